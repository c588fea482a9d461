//! The ingest transport choice (`ingest.transport`): UDP, RDMA, or RDMA when
//! it is usable.

use serde::{Deserialize, Serialize};

/// How frames reach the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// RDMA when a device is usable and the ring registers with it, UDP
    /// otherwise (saying why in one log line).
    #[default]
    Auto,
    /// RDMA only: start-up fails, with the reason, when RDMA is not usable.
    Rdma,
    /// UDP only.
    Udp,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::Rdma => "rdma",
            Transport::Udp => "udp",
        }
    }
}
