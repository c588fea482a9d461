//! GPU memory for an RDMA ring: a `cuMemAlloc` allocation exported as a
//! dma-buf (`cuMemGetHandleForAddressRange`) for `ibv_reg_dmabuf_mr`, the
//! device-only [`RingMemory`] a frame ring lives in for GPUDirect RDMA, and
//! the device attributes that say whether GPUDirect RDMA can work at all.
//! Every entry point checks for the driver library first (cudarc panics
//! without it).

use super::device_copy::CopyStream;
use super::plan::RingRegion;
use crate::gpu::driver::DeviceBuffer;
use crate::gpu::{GpuError, check};
use crate::ring::{CopyError, DeviceCopies, RingMemory};
use cudarc::driver::CudaContext;
use cudarc::driver::sys;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

/// GPU allocations for RDMA are rounded up to this (the GPU's large page:
/// nvidia-peermem pins and dma-buf exports whole pages).
pub const GPU_PAGE: usize = 2 << 20;

/// What the GPU says about GPUDirect RDMA (device attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct GpuRdmaSupport {
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`.
    pub gpu_direct_rdma: bool,
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
    pub dma_buf: bool,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING`: 0 none, 100
    /// owner (this GPU sees a NIC's writes in order), 200 all devices.
    pub writes_ordering: i32,
}

impl GpuRdmaSupport {
    /// Whether a kernel on this GPU that observes the trailer also sees the
    /// slot written before it (the ordering the trailer protocol needs).
    pub fn orders_remote_writes(&self) -> bool {
        self.writes_ordering
            >= sys::CUGPUDirectRDMAWritesOrdering::CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER as i32
    }
}

/// Reads the GPUDirect RDMA attributes of GPU `ordinal`.
pub fn gpu_rdma_support(ordinal: usize) -> Result<GpuRdmaSupport, GpuError> {
    crate::gpu::probe(ordinal)?;
    let mut dev = 0;
    // SAFETY: the driver is present and initialised (probe); valid out-pointer.
    check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut dev, ordinal as i32) })?;
    let attr = |a: sys::CUdevice_attribute| -> Result<i32, GpuError> {
        let mut v = 0;
        // SAFETY: valid out-pointer and device handle.
        check("cuDeviceGetAttribute", unsafe { sys::cuDeviceGetAttribute(&mut v, a, dev) })?;
        Ok(v)
    };
    use sys::CUdevice_attribute::*;
    Ok(GpuRdmaSupport {
        gpu_direct_rdma: attr(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED)? != 0,
        dma_buf: attr(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)? != 0,
        writes_ordering: attr(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING)?,
    })
}

/// Zeroed GPU memory for a ring that a NIC writes: a `cuMemAlloc`
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

    /// The region to register, with the export's outcome; `fd` must stay
    /// open until registration is done (the caller keeps it).
    pub fn region(&self, export: &Result<OwnedFd, GpuError>) -> RingRegion {
        RingRegion::Device {
            dptr: self.dptr(),
            len: self.len(),
            dmabuf: export.as_ref().map(|fd| fd.as_raw_fd()).map_err(|e| e.to_string()),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_gpu_the_support_query_says_why_instead_of_panicking() {
        if crate::gpu::probe(0).is_ok() {
            return; // covered by tests/rdma_gpu.rs on a GPU machine
        }
        let err = gpu_rdma_support(0).unwrap_err();
        assert!(matches!(err, GpuError::Unavailable(_)), "{err}");
    }

    #[test]
    fn ordering_threshold_is_the_owner_level() {
        let s = |writes_ordering| GpuRdmaSupport { gpu_direct_rdma: true, dma_buf: true, writes_ordering };
        assert!(!s(0).orders_remote_writes());
        assert!(s(100).orders_remote_writes());
        assert!(s(200).orders_remote_writes());
    }
}
