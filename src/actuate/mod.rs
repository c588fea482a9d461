//! Actuation outputs: the messages a loop sends back onto the network for
//! the frames it processed (docs/actuation.md). Each loop has a transmit
//! ring ([`ring`]) that the loop's last step for a frame writes whole
//! datagrams into ([`former`] on the host backend, the CUDA former on the
//! GPU) and a host thread that sends them ([`sender`]); [`config`] checks
//! the `[[actuate]]` tables into the plan both follow. The message format
//! is `crate::wire::actuation`.

pub mod config;
pub mod former;
pub mod ring;
pub mod sender;

pub use config::{ActuateConfig, ActuationPlan, Destination, OutputPlan, When};
pub use former::Actuator;
pub use ring::{TxRing, TxWriter};
pub use sender::{ActuationMetrics, ActuationSender, OutputMetrics, SenderError, SenderWait};

use thiserror::Error;

/// Errors building a transmit ring.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ActuateError {
    /// A transmit ring of impossible geometry; set `ring.transmit_slots` to 2..=65536 and
    /// `max_bytes` to at most 65507.
    #[error(
        "a transmit ring of {slots} slots for {max_datagram}-byte messages is impossible; set \
         ring.transmit_slots to 2..=65536 and the outputs' max_bytes to at most 65507"
    )]
    RingGeometry { slots: usize, max_datagram: usize },
    /// Transmit ring memory the host cannot address or not 64-byte aligned; allocate it in host or
    /// mapped memory.
    #[error(
        "the transmit ring needs host-addressable, 64-byte aligned memory, not {0}; allocate it in host or mapped memory"
    )]
    RingMemory(&'static str),
    /// Transmit ring memory smaller than the ring needs; allocate the size the ring asks for.
    #[error(
        "the transmit ring needs {needed} bytes of memory but got {available}; allocate the size the ring asks for"
    )]
    RingTooSmall { needed: usize, available: usize },
    /// The transmit ring could not be allocated; raise the memlock limit (`LimitMEMLOCK=`).
    #[error("cannot allocate {len} bytes for the transmit ring: {source}; check the memlock limit")]
    Memory {
        len: usize,
        #[source]
        source: std::io::Error,
    },
}
