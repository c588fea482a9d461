//! The `[output]` table: whether processed frames go into the output ring,
//! how many slots it has and where consumers attach.

use crate::config_problem::{ConfigProblem, check_range};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Settings of the output ring (the `[output]` table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    /// Publish every processed frame's samples into the output ring and
    /// serve the attach socket.
    pub enabled: bool,
    /// Slots of the ring: how many outputs a consumer may fall behind
    /// before it loses some.
    pub slots: u32,
    /// Unix socket consumers attach to.
    pub socket: PathBuf,
}

impl Default for OutputConfig {
    fn default() -> Self {
        Self { enabled: false, slots: 8, socket: PathBuf::from("/run/frameloop/output.sock") }
    }
}

impl OutputConfig {
    /// Records every problem, naming its `output.*` key.
    pub fn validate(&self, problems: &mut Vec<ConfigProblem>) {
        check_range(problems, "output.slots", self.slots, 1, 1024);
        if self.socket.as_os_str().is_empty() || self.socket.file_name().is_none() {
            problems.push(ConfigProblem::new(
                "output.socket",
                format!(
                    "{:?} is not a socket path; write one like \"/run/frameloop/output.sock\"",
                    self.socket
                ),
            ));
        } else if self.socket.as_os_str().len() > 107 {
            problems.push(ConfigProblem::new(
                "output.socket",
                "is longer than the 107 bytes a Unix socket path may have; choose a shorter path",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_name_their_key() {
        let mut p = Vec::new();
        OutputConfig::default().validate(&mut p);
        assert!(p.is_empty(), "{p:?}");
        let c: OutputConfig = toml::from_str("enabled = true\nslots = 0\nsocket = \"\"").unwrap();
        assert!(c.enabled);
        c.validate(&mut p);
        let keys: Vec<_> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["output.slots", "output.socket"]);
        assert!(toml::from_str::<OutputConfig>("slot = 4").is_err(), "unknown keys are refused");
    }
}
