//! Device-only GPU memory for a ring: a zeroed `cuMemAlloc` allocation with
//! `SYNC_MEMOPS` set, which the host reaches only through the copies of a
//! [`CopyStream`], and which can be exported as a dma-buf for a NIC to write.

use super::device_copy::CopyStream;
use super::driver::DeviceBuffer;
use super::{GpuError, check};
use crate::ring::{CopyError, DeviceCopies, RingMemory};
use cudarc::driver::CudaContext;
use cudarc::driver::sys;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

/// Ring allocations in GPU memory are rounded up to this (the GPU's large
/// page: nvidia-peermem pins and dma-buf exports whole pages).
pub const GPU_PAGE: usize = 2 << 20;

/// Zeroed GPU memory for a ring (that a NIC writes): a `cuMemAlloc`
/// allocation with `SYNC_MEMOPS` set (so CUDA copies touching it are ordered
/// with respect to RDMA, as GPUDirect RDMA requires), freed on drop.
///
/// As [`RingMemory`] it is device-only: the host reaches it through
/// [`DeviceCopies`] on a non-blocking stream of its own. Dropping it frees
/// device and page-locked memory, which synchronises the device: drop it
/// only when no resident graph runs (the loop holds the ring until it is
/// torn down).
pub struct DeviceRingMemory {
    /// Copies into `buffer`; field order drops it first.
    copies: Mutex<CopyStream>,
    ctx: Arc<CudaContext>,
    /// Invariant: its length is a multiple of [`GPU_PAGE`].
    buffer: DeviceBuffer,
}

impl DeviceRingMemory {
    /// Allocates at least `len` zeroed bytes, rounded up to [`GPU_PAGE`].
    /// Allocate before the resident graph is launched (allocation may
    /// synchronise the device).
    pub fn alloc(ctx: &Arc<CudaContext>, len: usize) -> Result<Self, GpuError> {
        let buffer = DeviceBuffer::new(ctx, len.max(1).next_multiple_of(GPU_PAGE), 0)?;
        let one: u32 = 1;
        // SAFETY: `dptr` is the start of a live allocation of the bound
        // context (DeviceBuffer::new bound it); the value is a u32 flag.
        check("cuPointerSetAttribute(SYNC_MEMOPS)", unsafe {
            sys::cuPointerSetAttribute(
                (&one as *const u32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                buffer.dptr(),
            )
        })?;
        debug_assert!(buffer.len().is_multiple_of(GPU_PAGE));
        debug_assert!(buffer.dptr().is_multiple_of(256), "cuMemAlloc aligns to at least 256 bytes");
        let copies = Mutex::new(CopyStream::new(ctx, buffer.dptr(), buffer.len())?);
        Ok(Self { copies, ctx: Arc::clone(ctx), buffer })
    }

    fn copies(&self) -> MutexGuard<'_, CopyStream> {
        // A panic while copying leaves the stream synchronised or failed; either way usable.
        self.copies.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn dptr(&self) -> u64 {
        self.buffer.dptr()
    }

    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }

    /// Exports the whole allocation as a dma-buf file descriptor.
    pub fn export_dmabuf(&self) -> Result<OwnedFd, GpuError> {
        self.ctx.bind_to_thread()?;
        let mut fd: i32 = -1;
        // SAFETY: `dptr..dptr+len` is one live allocation whose length is a
        // multiple of the host page size; the handle is an int for DMA_BUF_FD.
        check("cuMemGetHandleForAddressRange", unsafe {
            sys::cuMemGetHandleForAddressRange(
                (&mut fd as *mut i32).cast(),
                self.dptr(),
                self.len(),
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        })?;
        if fd < 0 {
            return Err(GpuError::Memory {
                what: "dma-buf export",
                why: format!("the driver returned fd {fd}"),
            });
        }
        // SAFETY: the driver handed us a new descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

impl DeviceCopies for DeviceRingMemory {
    fn write_in_order(&self, writes: &[(usize, &[u8])]) -> Result<(), CopyError> {
        self.copies().write_in_order(writes)
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), CopyError> {
        self.copies().read(offset, out)
    }
}

// SAFETY: device-only memory: `as_ptr` is null, `device_ptr` addresses the
// whole zeroed allocation (cuMemAlloc aligns to at least 256 bytes), which
// never moves and lives until drop; the host reaches it only by the copies.
unsafe impl RingMemory for DeviceRingMemory {
    fn as_ptr(&self) -> *mut u8 {
        std::ptr::null_mut()
    }
    fn len(&self) -> usize {
        self.buffer.len()
    }
    fn device_ptr(&self) -> Option<u64> {
        Some(self.buffer.dptr())
    }
    fn kind(&self) -> &'static str {
        "cuda-device"
    }
    fn device_copies(&self) -> Option<&dyn DeviceCopies> {
        Some(self)
    }
}
