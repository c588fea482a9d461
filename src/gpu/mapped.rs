//! Host memory the GPU addresses directly (zero-copy): page-locked, mapped
//! into the device's address space. The frame ring, the result ring and the
//! loop's control block live in it.

use super::GpuError;
use crate::cuda::{CudaError, HostRegistration, PinnedHost};
use crate::ring::{RingMemory, RingPages};
use cudarc::driver::CudaContext;
use std::sync::Arc;

enum Backing {
    /// `cuMemHostAlloc` memory, freed with `cuMemFreeHost` when the owner drops.
    Allocated { _pinned: PinnedHost },
    /// Ring pages registered with `cuMemHostRegister`; unregistered on drop,
    /// after which the pages themselves are unmapped.
    Registered { registration: HostRegistration, pages: RingPages },
    /// Released in drop.
    Released,
}

/// Page-locked host memory with a device address for the same bytes.
pub struct MappedMemory {
    /// Invariant: valid for `len` bytes, zeroed at creation, page aligned, and
    /// mapped at `dptr` until drop.
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

/// Why page-locking `what` failed, with the limit to raise.
fn lock_error(what: &'static str, e: CudaError) -> GpuError {
    GpuError::Memory {
        what,
        why: format!("{e}; raise the locked-memory limit (ulimit -l / LimitMEMLOCK=) or use a smaller ring"),
    }
}

impl MappedMemory {
    /// Allocates `len` zeroed bytes with `cuMemHostAlloc(DEVICEMAP | PORTABLE)`.
    pub fn alloc(ctx: &Arc<CudaContext>, len: usize) -> Result<Self, GpuError> {
        let len = len.max(1).next_multiple_of(4096);
        let pinned = PinnedHost::alloc(ctx, len).map_err(|e| lock_error("mapped host memory", e))?;
        let (host, dptr) = (pinned.host_ptr(), pinned.device_address()?);
        Ok(Self { host, dptr, len, backing: Backing::Allocated { _pinned: pinned } })
    }

    /// Maps `len` zeroed bytes for a ring ([`RingPages`]: faulted in, in
    /// 2 MiB huge pages when `huge` and the kernel gives them) and registers
    /// them with `cuMemHostRegister(DEVICEMAP | PORTABLE)`.
    pub fn register_ring_pages(ctx: &Arc<CudaContext>, len: usize, huge: bool) -> Result<Self, GpuError> {
        let pages = RingPages::new(len, huge)
            .map_err(|e| GpuError::Memory { what: "anonymous mapping", why: e.to_string() })?;
        let (host, len) = (pages.as_ptr(), pages.len());
        // SAFETY: `host` is a live, page-aligned mapping of `len` bytes that
        // stays alive (owned by the returned value) until it is unregistered
        // in drop, or for the rest of the process when that fails.
        let registration = unsafe { HostRegistration::register(ctx, host, len) }
            .map_err(|e| lock_error("registered host memory", e))?;
        let dptr = match registration.device_address() {
            Ok(dptr) => dptr,
            Err(e) => {
                Self::release(registration, pages);
                return Err(e.into());
            }
        };
        Ok(Self { host, dptr, len, backing: Backing::Registered { registration, pages } })
    }

    /// Unregisters `pages` and unmaps them; keeps them mapped for the rest
    /// of the process when they could not be unregistered: the device may
    /// still address them.
    fn release(registration: HostRegistration, pages: RingPages) {
        if let Err(e) = registration.unregister() {
            tracing::warn!("releasing mapped host memory failed: {e}");
            std::mem::forget(pages);
        }
    }

    /// The bytes' host address.
    pub fn host_ptr(&self) -> *mut u8 {
        self.host
    }

    /// The same bytes' device address.
    pub fn dptr(&self) -> u64 {
        self.dptr
    }
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
            Backing::Allocated { .. } => "cuda-mapped",
            Backing::Registered { .. } | Backing::Released => "cuda-registered",
        }
    }
    fn huge_page_bytes(&self) -> Option<usize> {
        match &self.backing {
            Backing::Allocated { .. } | Backing::Released => None,
            Backing::Registered { pages, .. } => pages.huge_page_bytes().ok(),
        }
    }
}

impl Drop for MappedMemory {
    fn drop(&mut self) {
        if let Backing::Registered { registration, pages } =
            std::mem::replace(&mut self.backing, Backing::Released)
        {
            Self::release(registration, pages);
        }
        // An allocation frees itself (`PinnedHost`'s drop).
    }
}
