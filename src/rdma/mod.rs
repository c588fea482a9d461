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
//!   the listening [`RdmaEndpoint`].
//! - [`dmabuf`]: GPU ring memory (`cuMemAlloc`) exported as a dma-buf.
//! - `sender` (feature `rdma`): the sensor emulator behind `frameloop send --transport rdma`.

pub mod config;
pub mod dmabuf;
pub mod plan;
pub mod remote;
#[cfg(feature = "rdma")]
pub mod sender;
#[cfg(feature = "rdma")]
pub mod verbs;

pub use config::{RdmaConfig, Transport};
pub use plan::{Decision, RdmaUnavailable, RegistrationMethod, RingRegion, Verbs, decide};
#[cfg(feature = "rdma")]
pub use verbs::{RdmaEndpoint, SidewayVerbs};

use crate::ring::FrameRing;
use std::sync::Arc;
use thiserror::Error;

/// Errors of the RDMA ingest once it was chosen, each saying what to change.
#[derive(Debug, Error)]
pub enum RdmaError {
    #[error("ingest.transport = \"rdma\" but RDMA is not usable: {0}")]
    Unavailable(#[from] RdmaUnavailable),
    #[error("the frame ring's writer is already taken; RDMA ingest must be the ring's only writer")]
    WriterTaken,
    #[error("rdma_cm {what} failed: {why}")]
    Cm { what: &'static str, why: String },
    #[error("RDMA connection: {0}")]
    Connection(String),
    #[error("the appliance sent an unusable ring descriptor: {0}")]
    Descriptor(#[from] remote::DescriptorError),
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

/// The region of a frame ring as registration sees it. Every
/// [`crate::ring::RingMemory`] has a host address (host memory, or
/// page-locked memory the GPU maps), so the ring registers as host memory.
pub fn ring_region(ring: &FrameRing) -> RingRegion {
    let mem = ring.memory();
    RingRegion::Host { addr: mem.as_ptr() as u64, len: mem.len() }
}

/// Chooses the ingest for `ring`: with `udp` UDP; with `rdma` the RDMA
/// endpoint or the reason it cannot run as an error; with `auto` the RDMA
/// endpoint or UDP with that reason. The endpoint takes the ring's writer.
pub fn select_ingest(
    transport: Transport,
    cfg: &RdmaConfig,
    ring: &Arc<FrameRing>,
) -> Result<IngestPlan, RdmaError> {
    #[cfg(feature = "rdma")]
    {
        match decide(&SidewayVerbs, transport, cfg, &ring_region(ring))? {
            Decision::Udp { reason } => Ok(IngestPlan::Udp { reason }),
            Decision::Rdma { device, region, method } => {
                Ok(IngestPlan::Rdma(Box::new(RdmaEndpoint::new(device, region, method, ring)?)))
            }
        }
    }
    #[cfg(not(feature = "rdma"))]
    {
        let _ = (cfg, ring);
        match transport {
            Transport::Udp => Ok(IngestPlan::Udp { reason: "ingest.transport = \"udp\"".into() }),
            Transport::Auto => {
                Ok(IngestPlan::Udp { reason: format!("RDMA not usable: {}", RdmaUnavailable::NotBuilt) })
            }
            Transport::Rdma => Err(RdmaUnavailable::NotBuilt.into()),
        }
    }
}
