//! Memory kinds: device allocations ([`DeviceBuffer`], `cuMemAlloc`),
//! page-locked host memory mapped into the device ([`PinnedHost`],
//! `cuMemHostAlloc`), and host memory that something else owns, registered
//! with the device ([`HostRegistration`], `cuMemHostRegister`). Each owner
//! frees what it owns on drop and never panics there (a failure is logged,
//! and the memory leaks rather than being freed twice).

use super::copy;
use super::error::{CudaError, check};
use cudarc::driver::{CudaContext, sys};
use std::ffi::c_void;
use std::sync::Arc;

/// A device allocation (`cuMemAlloc`), freed on drop.
pub struct DeviceBuffer {
    ctx: Arc<CudaContext>,
    /// Invariant: a live allocation of `len` bytes in `ctx`.
    dptr: sys::CUdeviceptr,
    len: usize,
}

impl DeviceBuffer {
    /// Allocates `len` bytes filled with `fill`.
    pub fn new(ctx: &Arc<CudaContext>, len: usize, fill: u8) -> Result<Self, CudaError> {
        ctx.bind_to_thread()?;
        let mut dptr = 0;
        // SAFETY: valid out-pointer; the context is current.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut dptr, len.max(1)) })?;
        let buf = Self { ctx: Arc::clone(ctx), dptr, len: len.max(1) };
        // SAFETY: the allocation holds `buf.len` bytes.
        check("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(dptr, fill, buf.len) })?;
        Ok(buf)
    }

    /// The allocation's device address.
    pub fn dptr(&self) -> u64 {
        self.dptr
    }

    /// The allocation's length in bytes (at least 1).
    pub fn len(&self) -> usize {
        self.len
    }

    /// The context the allocation belongs to.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Never true: an allocation holds at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check_bounds(&self, direction: &'static str, offset: usize, len: usize) -> Result<(), CudaError> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(CudaError::OutOfBounds { direction, len, offset, size: self.len });
        }
        Ok(())
    }

    /// Copies `bytes` to `offset` (synchronous).
    pub fn write(&self, offset: usize, bytes: &[u8]) -> Result<(), CudaError> {
        self.check_bounds("write", offset, bytes.len())?;
        self.ctx.bind_to_thread()?;
        // SAFETY: bounds checked above; `bytes` is valid for reads.
        unsafe { copy::memcpy_htod(self.dptr + offset as u64, bytes.as_ptr(), bytes.len()) }
    }

    /// Copies `out.len()` bytes from `offset` (synchronous).
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), CudaError> {
        self.check_bounds("read", offset, out.len())?;
        self.ctx.bind_to_thread()?;
        // SAFETY: bounds checked above; `out` is valid for writes.
        unsafe { copy::memcpy_dtoh(out.as_mut_ptr(), self.dptr + offset as u64, out.len()) }
    }

    /// Sets `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` on the allocation, so that
    /// CUDA copies touching it are ordered with respect to RDMA writes (as
    /// GPUDirect RDMA requires).
    pub fn set_sync_memops(&self) -> Result<(), CudaError> {
        self.ctx.bind_to_thread()?;
        let one: u32 = 1;
        // SAFETY: `dptr` is the start of a live allocation of the bound
        // context; the value is a u32 flag that outlives the call.
        check("cuPointerSetAttribute(SYNC_MEMOPS)", unsafe {
            sys::cuPointerSetAttribute(
                (&one as *const u32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                self.dptr,
            )
        })
    }

    /// Exports the whole allocation as a dma-buf file descriptor (for a
    /// NIC's `ibv_reg_dmabuf_mr`); the length must be a multiple of the
    /// host page size.
    pub fn export_dmabuf(&self) -> Result<std::os::fd::OwnedFd, CudaError> {
        self.ctx.bind_to_thread()?;
        super::dmabuf::export(self.dptr, self.len)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_err() {
            tracing::warn!("device buffer leaked: context could not be bound");
            return;
        }
        // SAFETY: we own the allocation; it is freed exactly once here.
        let r = unsafe { sys::cuMemFree_v2(self.dptr) };
        if r != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!("cuMemFree failed while dropping a device buffer: {r:?}");
        }
    }
}

/// The device address of page-locked, device-mapped host memory at `host`
/// (`cuMemHostGetDevicePointer`); the driver refuses other memory.
fn device_address(host: *mut u8) -> Result<u64, CudaError> {
    let mut dptr = 0;
    // SAFETY: valid out-pointer; the driver only looks `host` up in its
    // table of page-locked ranges (an error status for any other pointer).
    check("cuMemHostGetDevicePointer", unsafe {
        sys::cuMemHostGetDevicePointer_v2(&mut dptr, host.cast(), 0)
    })?;
    Ok(dptr)
}

/// Page-locked host memory mapped into the device's address space
/// (`cuMemHostAlloc(DEVICEMAP | PORTABLE)`), zeroed at creation, freed
/// (`cuMemFreeHost`) on drop.
pub struct PinnedHost {
    ctx: Arc<CudaContext>,
    /// Invariant: a live `cuMemHostAlloc` allocation of `len` bytes, page
    /// aligned, until drop.
    host: *mut u8,
    len: usize,
}

// SAFETY: plain memory owned by this value; what other threads do with the
// bytes is governed by the owners built on top.
unsafe impl Send for PinnedHost {}
// SAFETY: as above; `&self` hands out only the pointer.
unsafe impl Sync for PinnedHost {}

impl PinnedHost {
    /// Allocates `len` (at least 1) zeroed bytes in the context `ctx`.
    pub fn alloc(ctx: &Arc<CudaContext>, len: usize) -> Result<Self, CudaError> {
        let len = len.max(1);
        ctx.bind_to_thread()?;
        let mut host: *mut c_void = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: valid out-pointer; the context is current.
        check("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut host, len, flags) })?;
        let mem = Self { ctx: Arc::clone(ctx), host: host.cast(), len };
        // SAFETY: the allocation holds `len` bytes.
        unsafe { std::ptr::write_bytes(mem.host, 0, len) };
        Ok(mem)
    }

    /// The bytes' host address.
    pub fn host_ptr(&self) -> *mut u8 {
        self.host
    }

    /// The allocation's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: an allocation holds at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address of the same bytes.
    pub fn device_address(&self) -> Result<u64, CudaError> {
        self.ctx.bind_to_thread()?;
        device_address(self.host)
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_err() {
            tracing::warn!("mapped memory leaked: context could not be bound");
            return;
        }
        // SAFETY: allocated by cuMemHostAlloc, freed once.
        let r = unsafe { sys::cuMemFreeHost(self.host.cast()) };
        if r != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!("releasing mapped host memory failed: {r:?}");
        }
    }
}

/// Host memory owned elsewhere, registered with the device
/// (`cuMemHostRegister(DEVICEMAP | PORTABLE)`) until
/// [`unregister`](Self::unregister) or drop.
pub struct HostRegistration {
    ctx: Arc<CudaContext>,
    /// Invariant: registered in `ctx` while `registered`; the owner of the
    /// memory keeps it mapped for at least as long.
    host: *mut u8,
    /// False once unregistering was tried (whatever its outcome).
    registered: bool,
}

// SAFETY: the registration is a property of the process, not of a thread;
// the pointer is only handed to the driver.
unsafe impl Send for HostRegistration {}
// SAFETY: as above.
unsafe impl Sync for HostRegistration {}

impl HostRegistration {
    /// Registers `len` bytes at `host` in the context `ctx`.
    ///
    /// # Safety
    /// `host` is page aligned and `len` bytes from it stay mapped until the
    /// returned value is unregistered or dropped. When unregistering fails
    /// the device may still address them: an owner that can should keep
    /// them mapped for the rest of the process.
    pub unsafe fn register(ctx: &Arc<CudaContext>, host: *mut u8, len: usize) -> Result<Self, CudaError> {
        ctx.bind_to_thread()?;
        let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
        // SAFETY: the caller keeps `len` bytes at `host` mapped until they
        // are unregistered.
        check("cuMemHostRegister", unsafe { sys::cuMemHostRegister_v2(host.cast(), len, flags) })?;
        Ok(Self { ctx: Arc::clone(ctx), host, registered: true })
    }

    /// The device address of the registered bytes.
    pub fn device_address(&self) -> Result<u64, CudaError> {
        self.ctx.bind_to_thread()?;
        device_address(self.host)
    }

    /// Unregisters the memory. On an error the registration stays (the
    /// device may still address the memory): the owner must then keep the
    /// memory mapped for the rest of the process.
    pub fn unregister(mut self) -> Result<(), CudaError> {
        self.release()
    }

    fn release(&mut self) -> Result<(), CudaError> {
        if !std::mem::replace(&mut self.registered, false) {
            return Ok(());
        }
        self.ctx.bind_to_thread()?;
        // SAFETY: registered in this context (invariant, `registered` was
        // true) and unregistered once (the flag is now false).
        check("cuMemHostUnregister", unsafe { sys::cuMemHostUnregister(self.host.cast()) })
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::warn!("unregistering host memory failed: {e}");
        }
    }
}
