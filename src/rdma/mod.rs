//! RDMA ingest: a sensor writes frames straight into the registered frame
//! ring over a RoCEv2 reliable connection (rdma_cm), and publishes each one
//! by writing the ring's head sequence; with no usable RDMA the appliance
//! takes UDP and says why in one line (protocol and deployment: `docs/rdma.md`).
//!
//! - [`config`]: [`Transport`] (`ingest.transport`) and [`RdmaConfig`] (`[rdma]`).
//! - [`remote`]: pure functions for the remote writer: ring descriptor,
//!   slot and control-word addresses, slot header and trailer encoding, credits.
//! - [`plan`]: the transport decision through the [`Verbs`] trait.
//! - `verbs` (feature `rdma`): the sideway implementation of [`Verbs`] and
//!   the listening `RdmaEndpoint`.
//! - [`dmabuf`]: the registration region of GPU ring memory
//!   ([`crate::gpu::device_memory`]) with its dma-buf, and GPUDirect RDMA support.
//! - [`gpu_ring`]: the frame ring in GPU memory with its dma-buf export.
//! - [`placement`]: which memory the frame ring goes in for a backend and transport.
//! - `sender` (feature `rdma`): the sensor emulator behind `frameloop send --transport rdma`.

pub mod config;
pub mod dmabuf;
pub mod gpu_ring;
pub mod placement;
pub mod plan;
pub mod remote;
#[cfg(feature = "rdma")]
pub mod sender;
#[cfg(feature = "rdma")]
pub mod verbs;

pub use config::{RdmaConfig, Transport};
pub use gpu_ring::GpuFrameRing;
pub use placement::{ConsumerBackend, RingPlacement, final_placement, first_placement};
pub use plan::{Decision, NoDmabuf, RdmaUnavailable, RegistrationMethod, RingRegion, Verbs, decide};
#[cfg(feature = "rdma")]
pub use verbs::{RdmaEndpoint, SidewayVerbs};

use crate::ring::FrameRing;
use std::sync::Arc;
use thiserror::Error;

/// Errors of the RDMA ingest once it was chosen, each saying what to change.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RdmaError {
    /// RDMA was asked for but cannot be used here; fix what the source names, or use UDP ingest.
    #[error("ingest.transport = \"rdma\" but RDMA is not usable: {0}")]
    Unavailable(#[from] RdmaUnavailable),
    /// The frame ring already has a writer; RDMA ingest must be its only writer.
    #[error("the frame ring's writer is already taken; RDMA ingest must be the ring's only writer")]
    WriterTaken,
    /// A connection manager call failed; check the RDMA device, the addresses and that the peer
    /// runs.
    #[error("rdma_cm {what} failed: {why}; check the RDMA device, the addresses and that the peer runs")]
    Cm { what: &'static str, why: String },
    /// The RDMA connection failed (the message says why and what to change).
    #[error("RDMA connection: {0}")]
    Connection(String),
    /// The appliance's ring descriptor cannot be used; run the same frameloop version on both
    /// sides.
    #[error("the appliance sent an unusable ring descriptor: {0}")]
    Descriptor(#[from] remote::DescriptorError),
    /// The RDMA sender failed (the message says why and what to change).
    #[error("{0}")]
    Sender(String),
}

/// The ingest the appliance runs.
pub enum IngestPlan {
    /// Take UDP; `reason` is the one line to log.
    Udp { reason: String },
    /// Run the RDMA endpoint (it holds the ring's writer).
    #[cfg(feature = "rdma")]
    Rdma(Box<RdmaEndpoint>),
}

impl std::fmt::Debug for IngestPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IngestPlan::Udp { reason } => write!(f, "Udp({reason})"),
            #[cfg(feature = "rdma")]
            IngestPlan::Rdma(e) => write!(f, "Rdma({})", e.summary()),
        }
    }
}

/// The region of a frame ring as registration sees it: host-addressable
/// rings (host memory, or page-locked memory the GPU maps) register as host
/// memory. A device-only ring registers as GPU memory; this view has no
/// dma-buf for it (build GPU rings with [`GpuFrameRing`] and pass its
/// region to [`select_ingest_for`]), so registration would go straight to
/// nvidia-peermem.
pub fn ring_region(ring: &FrameRing) -> RingRegion {
    let mem = ring.memory();
    match (mem.is_host_addressable(), mem.device_ptr()) {
        (false, Some(dptr)) => {
            RingRegion::Device { dptr, len: mem.len(), dmabuf: Err(plan::NoDmabuf::NotExported) }
        }
        _ => RingRegion::Host { addr: mem.as_ptr() as u64, len: mem.len() },
    }
}

/// The address a remote writer uses for ring byte 0: the host address of a
/// host-addressable ring, the device address of a GPU ring (the dma-buf
/// region's iova, and the address nvidia-peermem registers).
pub fn remote_ring_addr(ring: &FrameRing) -> u64 {
    match ring_region(ring) {
        RingRegion::Host { addr, .. } => addr,
        RingRegion::Device { dptr, .. } => dptr,
    }
}

/// Chooses the ingest for `ring`: with `udp` UDP; with `rdma` the RDMA
/// endpoint or the reason it cannot run as an error; with `auto` the RDMA
/// endpoint or UDP with that reason. The endpoint takes the ring's writer.
pub fn select_ingest(
    transport: Transport,
    cfg: &RdmaConfig,
    ring: &Arc<FrameRing>,
) -> Result<IngestPlan, RdmaError> {
    select_ingest_for(transport, cfg, ring, &ring_region(ring))
}

/// As [`select_ingest`], registering `region` (for a GPU ring, the one
/// [`GpuFrameRing::region`] gives, with its dma-buf).
pub fn select_ingest_for(
    transport: Transport,
    cfg: &RdmaConfig,
    ring: &Arc<FrameRing>,
    region: &RingRegion,
) -> Result<IngestPlan, RdmaError> {
    #[cfg(feature = "rdma")]
    {
        match decide(&SidewayVerbs, transport, cfg, region)? {
            Decision::Udp { reason } => Ok(IngestPlan::Udp { reason }),
            Decision::Rdma { device, region, method } => {
                Ok(IngestPlan::Rdma(Box::new(RdmaEndpoint::new(device, region, method, ring)?)))
            }
        }
    }
    #[cfg(not(feature = "rdma"))]
    {
        let _ = (cfg, ring, region);
        match transport {
            Transport::Udp => Ok(IngestPlan::Udp { reason: "ingest.transport = \"udp\"".into() }),
            Transport::Auto => {
                Ok(IngestPlan::Udp { reason: format!("RDMA not usable: {}", RdmaUnavailable::NotBuilt) })
            }
            Transport::Rdma => Err(RdmaUnavailable::NotBuilt.into()),
        }
    }
}

impl IngestPlan {
    /// True when the plan runs RDMA (the sensor writes the ring).
    pub fn is_rdma(&self) -> bool {
        !matches!(self, IngestPlan::Udp { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::layout::ring_bytes;
    use crate::ring::memory::FakeDeviceMemory;
    use crate::ring::{HostMemory, OverrunPolicy, RingMemory};

    #[test]
    fn host_rings_register_as_host_memory_at_their_host_address() {
        let mem = HostMemory::new(ring_bytes(4, 64).unwrap()).unwrap();
        let addr = mem.as_ptr() as u64;
        let ring = FrameRing::new(Box::new(mem), 4, 64, OverrunPolicy::Every).unwrap();
        assert!(matches!(ring_region(&ring), RingRegion::Host { addr: a, .. } if a == addr));
        assert_eq!(remote_ring_addr(&ring), addr);
    }

    #[test]
    fn device_rings_register_as_gpu_memory_at_their_device_address() {
        let len = ring_bytes(4, 64).unwrap();
        let mem = FakeDeviceMemory::new(len, 0x7f00_0040_0000);
        let ring = FrameRing::new(Box::new(mem), 4, 64, OverrunPolicy::Every).unwrap();
        match ring_region(&ring) {
            RingRegion::Device { dptr, len: l, dmabuf } => {
                assert_eq!((dptr, l), (0x7f00_0040_0000, len));
                assert!(dmabuf.is_err(), "no export behind a plain ring");
            }
            other => panic!("a device-only ring registered as {other:?}"),
        }
        assert_eq!(remote_ring_addr(&ring), 0x7f00_0040_0000, "the sensor writes device addresses");
    }

    #[test]
    fn udp_plan_is_not_rdma() {
        assert!(!IngestPlan::Udp { reason: String::new() }.is_rdma());
    }
}
