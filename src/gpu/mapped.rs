//! Host memory the GPU addresses directly (zero-copy): page-locked, mapped
//! into the device's address space. The frame ring, the result ring and the
//! loop's control block live in it.

use super::{GpuError, check};
use crate::ring::{RingMemory, RingPages};
use cudarc::driver::CudaContext;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::Arc;

enum Backing {
    /// `cuMemHostAlloc` memory, freed with `cuMemFreeHost`.
    Allocated,
    /// Ring pages registered with `cuMemHostRegister`; unregistered on drop,
    /// after which the pages themselves are unmapped.
    Registered { pages: RingPages },
}

/// Page-locked host memory with a device address for the same bytes.
pub struct MappedMemory {
    ctx: Arc<CudaContext>,
    /// Invariant: valid for `len` bytes, zeroed at creation, page aligned, and
    /// mapped at `dptr` in `ctx` until drop.
    host: *mut u8,
    dptr: u64,
    len: usize,
    backing: Backing,
}

// SAFETY: plain memory; concurrent access is governed by the ring and control
// protocols built on top (atomics on shared words, disjoint regions otherwise).
unsafe impl Send for MappedMemory {}
// SAFETY: as above.
unsafe impl Sync for MappedMemory {}

impl MappedMemory {
    /// Allocates `len` zeroed bytes with `cuMemHostAlloc(DEVICEMAP | PORTABLE)`.
    pub fn alloc(ctx: &Arc<CudaContext>, len: usize) -> Result<Self, GpuError> {
        let len = len.max(1).next_multiple_of(4096);
        ctx.bind_to_thread()?;
        let mut host: *mut c_void = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: valid out-pointer; the context is current.
        check("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut host, len, flags) }).map_err(|e| {
            GpuError::Memory {
                what: "mapped host memory",
                why: format!(
                    "{e}; raise the locked-memory limit (ulimit -l / LimitMEMLOCK=) or use a smaller ring"
                ),
            }
        })?;
        let mut mem =
            Self { ctx: Arc::clone(ctx), host: host.cast(), dptr: 0, len, backing: Backing::Allocated };
        // SAFETY: the allocation holds `len` bytes.
        unsafe { std::ptr::write_bytes(mem.host, 0, len) };
        mem.dptr = device_address(mem.host)?;
        Ok(mem)
    }

    /// Maps `len` zeroed bytes for a ring ([`RingPages`]: faulted in, in
    /// 2 MiB huge pages when `huge` and the kernel gives them) and registers
    /// them with `cuMemHostRegister(DEVICEMAP | PORTABLE)`.
    pub fn register_ring_pages(ctx: &Arc<CudaContext>, len: usize, huge: bool) -> Result<Self, GpuError> {
        let pages = RingPages::new(len, huge)
            .map_err(|e| GpuError::Memory { what: "anonymous mapping", why: e.to_string() })?;
        let (host, len) = (pages.as_ptr(), pages.len());
        ctx.bind_to_thread()?;
        let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
        // SAFETY: `host` is a live mapping of `len` bytes that stays alive (owned
        // by the returned value) until it is unregistered in drop.
        check("cuMemHostRegister", unsafe { sys::cuMemHostRegister_v2(host.cast(), len, flags) }).map_err(
            |e| GpuError::Memory {
                what: "registered host memory",
                why: format!(
                    "{e}; raise the locked-memory limit (ulimit -l / LimitMEMLOCK=) or use a smaller ring"
                ),
            },
        )?;
        let mut mem =
            Self { ctx: Arc::clone(ctx), host, dptr: 0, len, backing: Backing::Registered { pages } };
        mem.dptr = device_address(mem.host)?;
        Ok(mem)
    }

    /// Keeps registered pages mapped for the rest of the process when they
    /// could not be unregistered: the device may still address them.
    fn leak_pages(&mut self) {
        if let Backing::Registered { pages } = std::mem::replace(&mut self.backing, Backing::Allocated) {
            std::mem::forget(pages);
        }
    }

    pub fn host_ptr(&self) -> *mut u8 {
        self.host
    }

    pub fn dptr(&self) -> u64 {
        self.dptr
    }
}

fn device_address(host: *mut u8) -> Result<u64, GpuError> {
    let mut dptr = 0;
    // SAFETY: `host` is page-locked, device-mapped memory of the current context.
    check("cuMemHostGetDevicePointer", unsafe {
        sys::cuMemHostGetDevicePointer_v2(&mut dptr, host.cast(), 0)
    })?;
    Ok(dptr)
}

// SAFETY: page aligned (cuMemHostAlloc and mmap both return page-aligned
// memory), zeroed at creation, never moves, and `dptr` maps the same bytes.
unsafe impl RingMemory for MappedMemory {
    fn as_ptr(&self) -> *mut u8 {
        self.host
    }
    fn len(&self) -> usize {
        self.len
    }
    fn device_ptr(&self) -> Option<u64> {
        Some(self.dptr)
    }
    fn kind(&self) -> &'static str {
        match self.backing {
            Backing::Allocated => "cuda-mapped",
            Backing::Registered { .. } => "cuda-registered",
        }
    }
    fn huge_page_bytes(&self) -> Option<usize> {
        match &self.backing {
            Backing::Allocated => None,
            Backing::Registered { pages } => pages.huge_page_bytes().ok(),
        }
    }
}

impl Drop for MappedMemory {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_err() {
            tracing::warn!("mapped memory leaked: context could not be bound");
            self.leak_pages();
            return;
        }
        let r = match self.backing {
            // SAFETY: allocated by cuMemHostAlloc, freed once.
            Backing::Allocated => unsafe { sys::cuMemFreeHost(self.host.cast()) },
            // SAFETY: registered in `register_ring_pages`; the pages are unmapped after this.
            Backing::Registered { .. } => unsafe { sys::cuMemHostUnregister(self.host.cast()) },
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!("releasing mapped host memory failed: {r:?}");
            self.leak_pages();
        }
    }
}
