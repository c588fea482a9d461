//! A frame ring in GPU memory for GPUDirect RDMA: the ring laid out in a
//! [`DeviceRingMemory`] (header written with a copy), together with the
//! dma-buf export of that memory, which must stay open until the ring is
//! registered with the NIC.

use super::dmabuf::device_region;
use super::plan::RingRegion;
use crate::gpu::GpuError;
use crate::gpu::device_memory::DeviceRingMemory;
use crate::ring::layout::ring_bytes;
use crate::ring::{FrameRing, OverrunPolicy};
use cudarc::driver::CudaContext;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// A frame ring whose bytes live in GPU memory, ready for registration.
pub struct GpuFrameRing {
    ring: Arc<FrameRing>,
    /// The registration view: the device range and the dma-buf outcome.
    /// Invariant: its descriptor, when exported, is `_dmabuf`'s.
    region: RingRegion,
    /// Kept open until registration is done (then dropped with `self`).
    _dmabuf: Option<OwnedFd>,
}

impl GpuFrameRing {
    /// Allocates GPU memory for `slot_count` slots of `payload_capacity`
    /// bytes, writes the ring header into it and exports it as a dma-buf
    /// (a failed export is kept as the reason registration will quote).
    pub fn new(
        ctx: &Arc<CudaContext>,
        slot_count: usize,
        payload_capacity: usize,
        policy: OverrunPolicy,
    ) -> Result<Self, GpuError> {
        let bytes = ring_bytes(slot_count, payload_capacity).ok_or_else(|| GpuError::Memory {
            what: "the GPU frame ring",
            why: "ring.slots x ring.slot_bytes overflows; use fewer or smaller slots".into(),
        })?;
        let mem = DeviceRingMemory::alloc(ctx, bytes)?;
        let export = mem.export_dmabuf();
        let region = device_region(&mem, &export);
        let ring = FrameRing::new(Box::new(mem), slot_count, payload_capacity, policy).map_err(|e| {
            GpuError::Memory {
                what: "the GPU frame ring",
                why: format!("{e}; check ring.slots and ring.slot_bytes"),
            }
        })?;
        debug_assert!(ring.is_device_only());
        Ok(Self { ring, region, _dmabuf: export.ok() })
    }

    /// The ring (device-only: the GPU consumes it, a NIC writes it).
    pub fn ring(&self) -> &Arc<FrameRing> {
        &self.ring
    }

    /// What registration needs: device address, length, dma-buf descriptor
    /// (valid while `self` lives).
    pub fn region(&self) -> &RingRegion {
        &self.region
    }

    /// The ring alone, closing the dma-buf descriptor (a registered region
    /// holds its own reference to the buffer).
    pub fn into_ring(self) -> Arc<FrameRing> {
        self.ring
    }
}
