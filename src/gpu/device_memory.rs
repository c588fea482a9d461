//! Device-only GPU memory for a ring: a zeroed `cuMemAlloc` allocation with
//! `SYNC_MEMOPS` set, which the host reaches only through the copies of a
//! [`CopyStream`], and which can be exported as a dma-buf for a NIC to write.

use super::GpuError;
use super::device_copy::CopyStream;
use crate::cuda::{CudaError, DeviceBuffer};
use crate::ring::{CopyError, DeviceCopies, RingMemory};
use cudarc::driver::CudaContext;
use std::os::fd::OwnedFd;
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
    /// Invariant: its length is a multiple of [`GPU_PAGE`].
    buffer: DeviceBuffer,
}

impl DeviceRingMemory {
    /// Allocates at least `len` zeroed bytes, rounded up to [`GPU_PAGE`].
    /// Allocate before the resident graph is launched (allocation may
    /// synchronise the device).
    pub fn alloc(ctx: &Arc<CudaContext>, len: usize) -> Result<Self, GpuError> {
        let buffer = DeviceBuffer::new(ctx, len.max(1).next_multiple_of(GPU_PAGE), 0)?;
        buffer.set_sync_memops()?;
        debug_assert!(buffer.len().is_multiple_of(GPU_PAGE));
        debug_assert!(buffer.dptr().is_multiple_of(256), "cuMemAlloc aligns to at least 256 bytes");
        let copies = Mutex::new(CopyStream::new(ctx, buffer.dptr(), buffer.len())?);
        Ok(Self { copies, buffer })
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
        self.buffer.export_dmabuf().map_err(|e| match e {
            CudaError::NoResult { what, .. } => {
                GpuError::Memory { what: "dma-buf export", why: format!("the driver returned {what}") }
            }
            other => other.into(),
        })
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
