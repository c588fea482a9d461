//! Result sinks: forwarding each result record off the box (`[sink]`).

pub mod encoding;
pub mod nats;

use crate::config_problem::ConfigProblem;
use serde::{Deserialize, Serialize};

/// The `[sink]` section: each sink is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    /// `[sink.nats]`: stream results to NATS JetStream.
    #[serde(default)]
    pub nats: Option<nats::NatsSinkConfig>,
}

impl SinkConfig {
    /// Records every problem of the configured sinks.
    pub fn validate(&self, problems: &mut Vec<ConfigProblem>) {
        if let Some(n) = &self.nats {
            n.validate(problems);
        }
    }
}
