//! GPU memory as RDMA sees it: the region a NIC registers for a ring in
//! [`DeviceRingMemory`] (its dma-buf for `ibv_reg_dmabuf_mr`), and the device
//! attributes that say whether GPUDirect RDMA can work at all. Every entry
//! point checks for the driver library first (cudarc panics without it).

use super::plan::RingRegion;
use crate::cuda::device::{device, device_attribute};
use crate::gpu::GpuError;
use crate::gpu::device_memory::DeviceRingMemory;
use cudarc::driver::sys;
use std::os::fd::{AsRawFd, OwnedFd};

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
    // The driver is present and initialised (probe).
    let dev = device(ordinal)?;
    let attr = |a| device_attribute(dev, a);
    use sys::CUdevice_attribute::*;
    Ok(GpuRdmaSupport {
        gpu_direct_rdma: attr(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED)? != 0,
        dma_buf: attr(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)? != 0,
        writes_ordering: attr(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING)?,
    })
}

/// The region to register for a ring in `mem`, with the outcome of its
/// dma-buf `export`; the descriptor must stay open until registration is
/// done (the caller keeps it).
pub fn device_region(mem: &DeviceRingMemory, export: &Result<OwnedFd, GpuError>) -> RingRegion {
    RingRegion::Device {
        dptr: mem.dptr(),
        len: mem.len(),
        dmabuf: export
            .as_ref()
            .map(|fd| fd.as_raw_fd())
            .map_err(|e| super::plan::NoDmabuf::ExportFailed { reason: e.to_string() }),
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
