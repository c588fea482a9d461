//! The appliance configuration (`frameloop.toml`): typed sections with
//! defaults, and validation that reports every problem at once, each naming
//! its key and the fix.

use crate::ops::{self, OpSpec};
use crate::ring::OverrunPolicy;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One problem found in a config, naming the key (`section.key`) and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    pub key: String,
    pub message: String,
}

impl ConfigProblem {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self { key: key.into(), message: message.into() }
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Checks that `value` lies in `[lo, hi]`, recording a problem for `key` otherwise.
pub fn check_range<T: PartialOrd + fmt::Display + Copy>(
    problems: &mut Vec<ConfigProblem>,
    key: &str,
    value: T,
    lo: T,
    hi: T,
) {
    if value < lo || value > hi {
        problems
            .push(ConfigProblem::new(key, format!("{value} is out of range; use a value from {lo} to {hi}")));
    }
}

/// Settings of the resident loop (host thread or GPU graph), named after the
/// GPU-resident executor's host API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoopConfig {
    /// How long the data-ready handler polls for a new frame inside one loop
    /// iteration before giving up the iteration (µs). 0 = check once.
    pub poll_budget_us: u64,
    /// Pause between two checks while polling (ns). 0 = spin.
    pub poll_interval_ns: u64,
    /// Holoscan-style sleep when no data was found in an iteration (µs).
    pub data_not_ready_sleep_interval_us: u64,
    /// Tear the loop down by itself after this long without a frame (ms); 0 = never.
    pub timeout_ms: u64,
    /// Make results visible to the host with a system-wide fence before
    /// raising result-ready.
    pub sync_with_host: bool,
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            poll_budget_us: 1000,
            poll_interval_ns: 200,
            data_not_ready_sleep_interval_us: 0,
            timeout_ms: 0,
            sync_with_host: true,
        }
    }
}

impl LoopConfig {
    pub fn validate(&self, problems: &mut Vec<ConfigProblem>) {
        check_range(problems, "loop.poll_budget_us", self.poll_budget_us, 0, 1_000_000);
        check_range(problems, "loop.poll_interval_ns", self.poll_interval_ns, 0, 1_000_000);
        check_range(
            problems,
            "loop.data_not_ready_sleep_interval_us",
            self.data_not_ready_sleep_interval_us,
            0,
            1_000_000,
        );
        check_range(problems, "loop.timeout_ms", self.timeout_ms, 0, 86_400_000);
        if self.poll_interval_ns > self.poll_budget_us * 1000 && self.poll_budget_us > 0 {
            problems.push(ConfigProblem::new(
                "loop.poll_interval_ns",
                "is longer than loop.poll_budget_us; make the interval shorter than the budget",
            ));
        }
    }
}

/// Frame ring geometry and overrun policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RingConfig {
    /// Number of slots.
    pub slots: usize,
    /// Payload capacity of one slot in bytes (the largest frame accepted).
    pub slot_bytes: usize,
    /// `every` (process all, drop at ingest when full) or `latest` (skip to newest).
    pub policy: OverrunPolicy,
    /// Result ring entries.
    pub results: usize,
}

impl Default for RingConfig {
    fn default() -> Self {
        Self { slots: 64, slot_bytes: 65536, policy: OverrunPolicy::Every, results: 4096 }
    }
}

impl RingConfig {
    pub fn validate(&self, problems: &mut Vec<ConfigProblem>) {
        check_range(problems, "ring.slots", self.slots, 2, 65536);
        check_range(problems, "ring.slot_bytes", self.slot_bytes, 1, 1 << 30);
        check_range(problems, "ring.results", self.results, 16, 1 << 20);
        let total = crate::ring::layout::ring_bytes(self.slots.max(2), self.slot_bytes.max(1));
        if total > 16 << 30 {
            problems.push(ConfigProblem::new(
                "ring.slots",
                format!("ring.slots x ring.slot_bytes needs {total} bytes (over 16 GiB); use fewer or smaller slots"),
            ));
        }
    }
}

/// Which consumer runs the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// CUDA when a usable GPU and NVRTC are present, host otherwise.
    #[default]
    Auto,
    /// CPU threads with the operators' reference implementations.
    Host,
    /// The GPU-resident graph.
    Cuda,
}

fn default_chain() -> Vec<OpSpec> {
    ops::default_chain()
}

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub backend: BackendChoice,
    #[serde(default)]
    pub ring: RingConfig,
    #[serde(default, rename = "loop")]
    pub loop_: LoopConfig,
    #[serde(default = "default_chain")]
    pub chain: Vec<OpSpec>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            backend: BackendChoice::Auto,
            ring: RingConfig::default(),
            loop_: LoopConfig::default(),
            chain: default_chain(),
        }
    }
}

impl Config {
    /// Every problem of a parsed config (ranges and cross-field rules).
    pub fn problems(&self) -> Vec<ConfigProblem> {
        let mut p = Vec::new();
        self.ring.validate(&mut p);
        self.loop_.validate(&mut p);
        if let Err(errs) = ops::validate_chain(&self.chain) {
            for e in errs {
                p.push(ConfigProblem::new("chain", e.to_string()));
            }
        }
        p
    }
}
