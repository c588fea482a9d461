//! The appliance configuration (`frameloop.toml`): typed sections with
//! defaults, and validation that reports every problem at once, each naming
//! its key and the fix.

use crate::ops::{self, OpSpec};
use crate::ring::OverrunPolicy;
pub mod keys;
pub mod loops;

pub use crate::config_problem::{ConfigProblem, check_range};
use serde::{Deserialize, Serialize};

/// Settings of the resident loop (host thread or GPU graph), named after the
/// GPU-resident executor's host API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoopConfig {
    /// How long the data-ready handler polls for a new frame inside one loop
    /// iteration before giving up the iteration (µs). 0 = check once. The
    /// CUDA loop polls at most 20 µs at a time while frames stream into GPU
    /// memory or the tiled kernel claims them itself (docs/gpu.md).
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
    /// CUDA backend: run a chain of built-in operators inside the data-ready
    /// handler's kernel (one kernel per frame) instead of handler → IF → one
    /// kernel per operator. `auto` fuses when the samples fit in the shared
    /// memory of one block (8 and 32 KiB frames of u16 on an H200, not 64).
    pub fused_chain: FusedChainMode,
    /// CUDA backend with the native UDP receiver: copy each large frame's
    /// received part into GPU memory while the rest is on the wire, so that
    /// after its last packet only the tail crosses the bus (sub-frame
    /// streaming, `src/gpu/streaming.rs`). `auto` streams slots of at least
    /// [`AUTO_MIN_SLOT_BYTES`] and reads smaller ones in place.
    pub stream_to_gpu: StreamToGpu,
    /// CUDA backend, frames streaming into GPU memory: the last bytes of a
    /// frame (its expected length: the previous frame's) the loop does not
    /// pull before the claim; they are read after it instead (computes
    /// longer). Where pulls run between polls (one kernel per operator in
    /// the graph's IF body) the GPU is then waiting when the frame is
    /// published (detected sooner); the tiled kernel's puller block never
    /// delays detection, so there it only holds the puller back. 0 pulls up
    /// to the end. Measured over loopback at a 25 Gb/s pace before the
    /// puller, 65536 moved 768 KiB frames' wire-to-result p50 by -2.4, -1.3
    /// and +3.1 µs in three runs (docs/decisions.md).
    pub pull_end_guard_bytes: u32,
    /// Host backend: the nice value of the thread that runs the chain
    /// (0..=19). Above 0, the UDP receiver (nice 0) takes the CPU from it as
    /// soon as datagrams arrive, so processing never makes the kernel drop
    /// datagrams on a machine with few cores; the loop gets what the
    /// receiver leaves. 0 gives both the same share. Not used when the loop
    /// runs under `service.realtime_priority`.
    pub host_nice: i32,
}

/// Largest `loop.pull_end_guard_bytes` (1 GiB, past any slot).
pub const MAX_PULL_END_GUARD_BYTES: u64 = 1 << 30;

/// `loop.stream_to_gpu`: whether the CUDA backend streams frames into GPU
/// memory while they arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamToGpu {
    /// Stream when the receiver reports progress (native UDP) and the slot
    /// is large enough for it to pay (measured crossover).
    #[default]
    Auto,
    /// Stream whenever the receiver reports progress (fails start-up when
    /// the receiver or the chain's layout cannot).
    On,
    /// The chain reads each frame in place from the mapped slot (zero-copy).
    Off,
}

/// `loop.stream_to_gpu = "auto"` streams slots of at least this many bytes
/// (docs/gpu.md, "When to stream": the smallest measured size where
/// streaming lowered both p50 and p99.9).
pub const AUTO_MIN_SLOT_BYTES: usize = 768 * 1024;

/// `loop.fused_chain`: whether the CUDA backend fuses the chain into the
/// data-ready handler's kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FusedChainMode {
    /// Fuse when the chain's samples fit in one block's shared memory.
    #[default]
    Auto,
    /// Fuse whenever the chain can be (fails start-up when it cannot).
    On,
    /// Always run one kernel per operator in the graph's IF body.
    Off,
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            poll_budget_us: 1000,
            poll_interval_ns: 200,
            data_not_ready_sleep_interval_us: 0,
            timeout_ms: 0,
            sync_with_host: true,
            fused_chain: FusedChainMode::Auto,
            stream_to_gpu: StreamToGpu::Auto,
            pull_end_guard_bytes: 0,
            host_nice: 10,
        }
    }
}

impl LoopConfig {
    /// Adds a problem for every `[loop]` key out of range.
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
        check_range(
            problems,
            "loop.pull_end_guard_bytes",
            u64::from(self.pull_end_guard_bytes),
            0,
            MAX_PULL_END_GUARD_BYTES,
        );
        if !(0..=19).contains(&self.host_nice) {
            problems.push(ConfigProblem::new(
                "loop.host_nice",
                format!(
                    "is {}; it must be from 0 (the receiver's own priority) to 19 (the lowest); \
                     10 lets the receiver take the CPU from the processing thread whenever datagrams arrive",
                    self.host_nice
                ),
            ));
        }
        if self.stream_to_gpu == StreamToGpu::On && self.fused_chain == FusedChainMode::On {
            problems.push(ConfigProblem::new(
                "loop.stream_to_gpu",
                "\"on\" streams each frame into GPU memory in front of a chain of one kernel per operator, \
                 but loop.fused_chain = \"on\" runs the chain inside the handler's kernel; \
                 set one of them to \"auto\" or \"off\"",
            ));
        }
        if self.stream_to_gpu == StreamToGpu::Off && self.pull_end_guard_bytes != 0 {
            problems.push(ConfigProblem::new(
                "loop.pull_end_guard_bytes",
                format!(
                    "is {} but loop.stream_to_gpu = \"off\" pulls nothing; set it to 0, or let frames stream \
                     (loop.stream_to_gpu = \"auto\" or \"on\")",
                    self.pull_end_guard_bytes
                ),
            ));
        }
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
    /// Back the frame ring (in host memory) with 2 MiB transparent huge
    /// pages: fewer TLB misses for the receiver's copies into the slots.
    pub huge_pages: bool,
    /// Slots of the transmit ring (one actuation message each), when the
    /// loop has `[[actuate]]` outputs: how many messages may wait for the
    /// network before more are dropped and counted.
    pub transmit_slots: usize,
}

impl Default for RingConfig {
    fn default() -> Self {
        Self {
            slots: 64,
            slot_bytes: 65536,
            policy: OverrunPolicy::Every,
            results: 4096,
            huge_pages: true,
            transmit_slots: 256,
        }
    }
}

impl RingConfig {
    /// Adds a problem for every `[ring]` key out of range.
    pub fn validate(&self, problems: &mut Vec<ConfigProblem>) {
        check_range(problems, "ring.slots", self.slots, 2, 65536);
        check_range(problems, "ring.slot_bytes", self.slot_bytes, 1, 1 << 30);
        check_range(problems, "ring.results", self.results, 16, 1 << 20);
        check_range(problems, "ring.transmit_slots", self.transmit_slots, 2, 65536);
        match crate::ring::layout::ring_bytes(self.slots.max(2), self.slot_bytes.max(1)) {
            Some(total) if total <= 16 << 30 => {}
            Some(total) => problems.push(ConfigProblem::new(
                "ring.slots",
                format!("ring.slots x ring.slot_bytes needs {total} bytes (over 16 GiB); use fewer or smaller slots"),
            )),
            None => problems.push(ConfigProblem::new(
                "ring.slots",
                "ring.slots x ring.slot_bytes overflows the address space; use fewer or smaller slots",
            )),
        }
    }
}

/// Which consumer runs the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
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
    /// `backend`: `auto` (CUDA when a GPU and NVRTC are usable), `host` or `cuda`.
    #[serde(default)]
    pub backend: BackendChoice,
    /// `[ring]`: the frame and result rings.
    #[serde(default)]
    pub ring: RingConfig,
    /// `[loop]`: the resident loop (polling, fused chain, streaming to the GPU).
    #[serde(default, rename = "loop")]
    pub loop_: LoopConfig,
    /// `[[chain]]`: the operators run on every frame, in order.
    #[serde(default = "default_chain")]
    pub chain: Vec<OpSpec>,
    /// `[ingest]`: the receiver (bind address, socket, reassembly).
    #[serde(default)]
    pub ingest: crate::ingest::UdpConfig,
    /// `[metrics]`: histograms, logs and the progress line.
    #[serde(default)]
    pub metrics: crate::metrics::MetricsConfig,
    /// `[service]`: thread placement, systemd, the metrics endpoint.
    #[serde(default)]
    pub service: crate::service::ServiceConfig,
    /// `[rdma]`: the RDMA ingest (with `ingest.transport`).
    #[serde(default)]
    pub rdma: crate::rdma::RdmaConfig,
    /// RFC 4175 RTP raw video: when present, the receiver assembles RTP video
    /// frames of this geometry instead of native frameloop datagrams.
    #[serde(default)]
    pub rtp: Option<crate::rtp::RtpConfig>,
    /// A user data-ready handler (CUDA backend only), replacing the built-in one.
    #[serde(default)]
    pub handler: Option<ops::handler::HandlerConfig>,
    /// The output ring consumers attach to (`[output]`).
    #[serde(default)]
    pub output: crate::output::OutputConfig,
    /// `[sink.*]`: where results are streamed off the box.
    #[serde(default)]
    pub sink: crate::sink::SinkConfig,
    /// `[[actuate]]`: the loop's actuation outputs (each `[[loop]]` inherits
    /// them unless it has its own `[[loop.actuate]]`).
    #[serde(default)]
    pub actuate: Vec<crate::actuate::ActuateConfig>,
    /// `[[loop]]`: several resident loops (empty: one loop, as configured above).
    #[serde(skip)]
    pub loops: Vec<loops::LoopSpec>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            backend: BackendChoice::Auto,
            ring: RingConfig::default(),
            loop_: LoopConfig::default(),
            chain: default_chain(),
            ingest: Default::default(),
            metrics: Default::default(),
            service: Default::default(),
            rdma: Default::default(),
            rtp: None,
            handler: None,
            output: Default::default(),
            sink: Default::default(),
            actuate: Vec::new(),
            loops: Vec::new(),
        }
    }
}

impl Config {
    /// Every problem of a parsed config (ranges and cross-field rules).
    pub fn problems(&self) -> Vec<ConfigProblem> {
        let mut p = Vec::new();
        self.ring.validate(&mut p);
        self.loop_.validate(&mut p);
        self.ingest.validate(&mut p);
        self.metrics.validate(&mut p);
        self.service.validate(&mut p);
        self.rdma.validate(self.ingest.transport, &mut p);
        self.output.validate(&mut p);
        self.sink.validate(&mut p);
        loops::problems(self, &mut p);
        if self.loops.is_empty() {
            self.actuation_plan_into(&mut p);
        }
        if let Some(rtp) = &self.rtp {
            match rtp.resolve() {
                Err(problems) => p.extend(problems),
                Ok(settings) if settings.geometry.frame_bytes() > self.ring.slot_bytes => {
                    p.push(ConfigProblem::new(
                        "ring.slot_bytes",
                        format!(
                            "{} is smaller than one [rtp] frame ({} bytes); set ring.slot_bytes to at least {}",
                            self.ring.slot_bytes,
                            settings.geometry.frame_bytes(),
                            settings.geometry.frame_bytes()
                        ),
                    ));
                }
                Ok(_) => {}
            }
        }
        // Both keys raise the receiving thread to SCHED_FIFO (the service
        // key also the loop thread); two different values would leave the
        // receiver at whichever is applied last.
        if let Some(service) = self.service.realtime_priority
            && self.ingest.realtime_priority != 0
            && self.ingest.realtime_priority != service
        {
            p.push(ConfigProblem::new(
                "ingest.realtime_priority",
                format!(
                    "is {} but service.realtime_priority is {service}; both set the receiver's priority: \
                     remove ingest.realtime_priority (service.realtime_priority covers the receiver and the loop)",
                    self.ingest.realtime_priority
                ),
            ));
        }
        if let Err(errs) = ops::validate_chain(&self.chain) {
            for e in errs {
                p.push(ConfigProblem::new("chain", e.to_string()));
            }
        }
        p
    }
}

impl Config {
    /// This (one) loop's checked actuation outputs; problems go to `problems`.
    pub fn actuation_plan_into(&self, problems: &mut Vec<ConfigProblem>) -> crate::actuate::ActuationPlan {
        let cx = crate::actuate::config::LoopContext {
            ingest: &self.ingest,
            has_threshold: self.chain.iter().any(|op| matches!(op, OpSpec::Threshold { .. })),
        };
        crate::actuate::config::plan("actuate", &self.actuate, &cx, problems)
    }

    /// This (one) loop's actuation outputs (empty when the config has
    /// none; a config that passed validation has no problems here).
    pub fn actuation_plan(&self) -> crate::actuate::ActuationPlan {
        self.actuation_plan_into(&mut Vec::new())
    }
}

/// A config that cannot be used: every problem found, each naming its key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read; check the path and its permissions.
    #[error("cannot read config file {path}: {source}; check the path and its permissions")]
    Read {
        /// The file.
        path: String,
        /// The read's error.
        source: std::io::Error,
    },
    /// The file parsed but has problems; each names its key and the fix
    /// (`frameloop validate` prints them).
    #[error("{}", render_problems(.0))]
    Invalid(Vec<ConfigProblem>),
}

fn render_problems(problems: &[ConfigProblem]) -> String {
    let mut s = format!("config has {} problem(s):", problems.len());
    for p in problems {
        s.push_str("\n  - ");
        s.push_str(&p.to_string());
    }
    s
}

impl ConfigError {
    /// Every problem found (none for an unreadable file).
    pub fn problems(&self) -> &[ConfigProblem] {
        match self {
            ConfigError::Invalid(p) => p,
            ConfigError::Read { .. } => &[],
        }
    }
}

/// The top-level keys [`parse`] accepts; [`keys::all_keys`] lists what is in them.
pub(crate) const SECTIONS: &[&str] = &[
    "backend", "ring", "loop", "chain", "ingest", "metrics", "service", "rdma", "rtp", "handler", "output",
    "sink", "actuate",
];

/// Parses a config from TOML text, reporting every problem at once.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let table: toml::Table = match toml::from_str(text) {
        Ok(t) => t,
        Err(e) => return Err(ConfigError::Invalid(vec![ConfigProblem::new("(syntax)", e.to_string())])),
    };
    let mut problems = Vec::new();
    for key in table.keys() {
        if !SECTIONS.contains(&key.as_str()) {
            // A quoted empty key (`"" = 1`) is still named, as TOML writes it.
            let name = if key.is_empty() { "\"\"".to_string() } else { key.clone() };
            problems.push(ConfigProblem::new(
                name,
                format!("unknown key; top-level keys are {}", SECTIONS.join(", ")),
            ));
        }
    }
    let backend = section::<BackendChoice>("backend", table.get("backend"), &mut problems);
    let ring = section::<RingConfig>("ring", table.get("ring"), &mut problems);
    // `[loop]` is the one resident loop's settings; `[[loop]]` several loops.
    let (loop_, loop_tables) = match table.get("loop") {
        Some(toml::Value::Array(items)) => (LoopConfig::default(), Some(items)),
        other => (section::<LoopConfig>("loop", other, &mut problems), None),
    };
    let problems_before_chain = problems.len();
    let chain = match table.get("chain") {
        None => default_chain(),
        Some(toml::Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| section::<ChainEntry>(&format!("chain[{i}]"), Some(v), &mut problems).0)
            .collect::<Vec<_>>()
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default(),
        Some(_) => {
            problems
                .push(ConfigProblem::new("chain", "must be an array of tables: write [[chain]] sections"));
            Vec::new()
        }
    };
    let chain_parsed = problems.len() == problems_before_chain;
    let ingest = section("ingest", table.get("ingest"), &mut problems);
    let metrics = section("metrics", table.get("metrics"), &mut problems);
    let service = section("service", table.get("service"), &mut problems);
    let rdma = section("rdma", table.get("rdma"), &mut problems);
    // Absent means native ingest; present (even empty) means RTP video.
    let rtp = table.get("rtp").map(|v| section::<crate::rtp::RtpConfig>("rtp", Some(v), &mut problems));
    let handler = table.get("handler").map(|v| section("handler", Some(v), &mut problems));
    let output = section("output", table.get("output"), &mut problems);
    let sink = section("sink", table.get("sink"), &mut problems);
    let actuate = table
        .get("actuate")
        .map(|v| crate::actuate::config::parse_tables("actuate", v, &mut problems))
        .unwrap_or_default();
    let loops = loop_tables.map_or_else(Vec::new, |items| loops::parse(items, &table, &chain, &mut problems));
    let config = Config {
        backend,
        ring,
        loop_,
        chain,
        ingest,
        metrics,
        service,
        rtp,
        rdma,
        handler,
        output,
        sink,
        actuate,
        loops,
    };
    // Keys that failed to parse fell back to their (valid) defaults, so the
    // range and cross-field checks add only real problems; a chain that did
    // not parse is not checked again.
    problems.extend(config.problems().into_iter().filter(|p| chain_parsed || !p.key.starts_with("chain")));
    if problems.is_empty() { Ok(config) } else { Err(ConfigError::Invalid(problems)) }
}

/// Deserialises one table (`prefix` names it: `"ingest"`, `"chain[2]"`),
/// collecting every unknown key and bad value into `problems`: each
/// offending key is reported, removed and the rest tried again, so one bad
/// key never hides the next. An unknown key is answered with the keys the
/// table accepts, read from the config types.
pub fn section<T: serde::de::DeserializeOwned + Default>(
    prefix: &str,
    value: Option<&toml::Value>,
    problems: &mut Vec<ConfigProblem>,
) -> T {
    crate::config_problem::deserialize_table(prefix, value, problems, keys::keys_of_table)
}

/// Reads and parses a config file.
pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
    let text = crate::small_file::read_text(path, crate::small_file::SMALL_FILE_LIMIT)
        .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
    parse(&text)
}

/// One `[[chain]]` entry; `None` (the default) only while reporting problems.
#[derive(Default)]
struct ChainEntry(Option<OpSpec>);

impl<'de> Deserialize<'de> for ChainEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        OpSpec::deserialize(d).map(|op| ChainEntry(Some(op)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_nice_outside_0_to_19_names_the_key() {
        for bad in [-1, 20] {
            let err = parse(&format!("[loop]\nhost_nice = {bad}\n")).unwrap_err();
            let p =
                err.problems().iter().find(|p| p.key == "loop.host_nice").expect("a loop.host_nice problem");
            assert!(p.message.contains("from 0"), "{}", p.message);
        }
        assert_eq!(parse("[loop]\nhost_nice = 19\n").unwrap().loop_.host_nice, 19);
        assert_eq!(Config::default().loop_.host_nice, 10);
    }

    #[test]
    fn pull_end_guard_parses_and_a_guard_past_any_slot_names_the_key() {
        assert_eq!(Config::default().loop_.pull_end_guard_bytes, 0);
        assert_eq!(
            parse("[loop]\npull_end_guard_bytes = 65536\n").unwrap().loop_.pull_end_guard_bytes,
            65536
        );
        let err = parse("[loop]\npull_end_guard_bytes = 2147483648\n").unwrap_err();
        let p = err
            .problems()
            .iter()
            .find(|p| p.key == "loop.pull_end_guard_bytes")
            .expect("a loop.pull_end_guard_bytes problem");
        assert!(p.message.contains("1073741824"), "{}", p.message);
        let err = parse("[loop]\npull_end_guard_bytes = -1\n").unwrap_err().to_string();
        assert!(err.contains("pull_end_guard_bytes"), "{err}");
        let err = parse("[loop]\nstream_to_gpu = \"off\"\npull_end_guard_bytes = 4096\n").unwrap_err();
        let p = &err.problems()[0];
        assert_eq!(p.key, "loop.pull_end_guard_bytes");
        assert!(p.message.contains("stream_to_gpu"), "{}", p.message);
        assert!(parse("[loop]\nstream_to_gpu = \"off\"\npull_end_guard_bytes = 0\n").is_ok());
    }

    #[test]
    fn empty_file_is_the_default_config() {
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn full_example_parses() {
        let cfg = parse(
            r#"
            backend = "host"
            [ring]
            slots = 8
            slot_bytes = 8192
            policy = "latest"
            [loop]
            poll_budget_us = 500
            [[chain]]
            op = "unpack"
            format = "u12"
            [[chain]]
            op = "filter2d"
            width = 64
            kernel = [0, 0, 0, 0, 1, 0, 0, 0, 0]
            [[chain]]
            op = "stats"
            "#,
        )
        .unwrap();
        assert_eq!(cfg.backend, BackendChoice::Host);
        assert_eq!(cfg.ring.policy, OverrunPolicy::Latest);
        assert_eq!(cfg.ring.results, RingConfig::default().results);
        assert_eq!(cfg.chain.len(), 3);
    }

    #[test]
    fn two_different_receiver_priorities_are_refused_naming_both_keys() {
        let cfg = |ingest: u8, service: Option<u8>| {
            let service = service.map_or(String::new(), |p| format!("[service]\nrealtime_priority = {p}\n"));
            parse(&format!("[ingest]\nrealtime_priority = {ingest}\n{service}"))
        };
        let err = cfg(20, Some(50)).unwrap_err();
        let p = &err.problems()[0];
        assert_eq!(p.key, "ingest.realtime_priority");
        assert!(p.message.contains("service.realtime_priority is 50"), "{}", p.message);
        assert!(cfg(50, Some(50)).is_ok());
        assert!(cfg(20, None).is_ok());
        assert!(cfg(0, Some(50)).is_ok());
    }

    #[test]
    fn reports_every_problem_with_its_key() {
        let err = parse(
            r#"
            colour = "red"
            [ring]
            slotz = 3
            slot_bytes = "big"
            policy = "sometimes"
            [loop]
            poll_budget_us = -5
            bogus = true
            [[chain]]
            op = "unpack"
            format = "u7"
            [[chain]]
            op = "fir"
            tapz = [1.0]
            "#,
        )
        .unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        for k in [
            "colour",
            "ring.slotz",
            "ring.slot_bytes",
            "ring.policy",
            "loop.poll_budget_us",
            "loop.bogus",
            "chain[0]",
        ] {
            assert!(keys.iter().any(|x| x.starts_with(k)), "missing {k} in {keys:?}\n{err}");
        }
        assert!(keys.iter().any(|x| x.starts_with("chain[1]")), "{keys:?}");
    }

    #[test]
    fn rtp_section_is_optional_and_checked_with_the_rest() {
        assert_eq!(parse("").unwrap().rtp, None);
        let cfg = parse(
            "[ring]\nslot_bytes = 153600\n[rtp]\nwidth = 320\nheight = 240\nsampling = \"YCbCr-4:2:2\"\ndepth = 8\n",
        )
        .unwrap();
        let settings = cfg.rtp.as_ref().unwrap().resolve().unwrap();
        assert_eq!(settings.geometry.frame_bytes(), 320 * 240 * 2);
        // Unknown keys, bad values and missing geometry are all reported at once.
        let err = parse("[ring]\nslotz = 1\n[rtp]\nwidht = 320\nheight = 0\ndepth = 8\n").unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        for k in ["ring.slotz", "rtp.widht", "rtp.width", "rtp.height"] {
            assert!(keys.contains(&k), "{k} missing from {keys:?}");
        }
        let err = parse("[rtp]\nheight = 0\ndepth = 8\nsampling = \"RGB\"\n").unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["rtp.width", "rtp.height"], "{err}");
        // A frame larger than a ring slot names the slot size and the size needed.
        let err =
            parse("[rtp]\nwidth = 640\nheight = 480\nsampling = \"YCbCr-4:2:2\"\ndepth = 8\n").unwrap_err();
        assert_eq!(err.problems()[0].key, "ring.slot_bytes");
        assert!(err.to_string().contains("at least 614400"), "{err}");
    }

    #[test]
    fn unknown_keys_bad_ops_and_ranges_are_reported_together() {
        let err = parse("colour = \"red\"\n[ring]\nslots = 1\n[[chain]]\nop = \"median\"\n").unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert!(keys.contains(&"colour"), "{keys:?}");
        assert!(keys.contains(&"ring.slots"), "{keys:?}");
        assert_eq!(keys.iter().filter(|k| k.starts_with("chain")).count(), 1, "{keys:?}");
        assert!(!err.to_string().contains("one of one of"), "{err}");
    }

    #[test]
    fn an_unknown_ingest_key_lists_the_keys_of_ingest() {
        // [ingest] flattens the reassembly keys, so serde refuses without a list.
        let err = parse("[ingest]\nbindd = \"0.0.0.0:5000\"\n").unwrap_err();
        let p = err.problems().iter().find(|p| p.key == "ingest.bindd").expect("ingest.bindd named");
        for key in ["`bind`", "`frame_timeout_ms`", "`reading_threads`"] {
            assert!(p.message.contains(key), "{}", p.message);
        }
    }

    #[test]
    fn out_of_range_values_name_the_key() {
        let err = parse("[ring]\nslots = 1\nslot_bytes = 0\n[loop]\npoll_budget_us = 5000000").unwrap_err();
        let text = err.to_string();
        for k in ["ring.slots", "ring.slot_bytes", "loop.poll_budget_us"] {
            assert!(text.contains(k), "{text}");
        }
    }

    // The sections' own tables, parsed as part of the whole config.

    #[test]
    fn sink_nats_section_parses_with_defaults() {
        let cfg = parse("[sink.nats]\nurl = \"nats://10.0.0.1:4222\"\nbox_id = \"edge-7\"\n").unwrap();
        let nats = cfg.sink.nats.expect("section present");
        assert_eq!(nats.subject_prefix, "frameloop");
        assert_eq!(nats.stream, "FRAMELOOP");
        assert_eq!(nats.buffer, 100_000);
        assert!(!nats.detections);
        assert_eq!(nats.retry_max_ms, 1000);
        assert_eq!(nats.resolved_box_id(), "edge-7");
        assert!(parse("").unwrap().sink.nats.is_none());
    }

    #[test]
    fn sink_nats_bad_values_name_their_keys() {
        let text = "[sink.nats]\nurl = \"http://x\"\nsubject_prefix = \"a..b\"\nbox_id = \"my box\"\n\
                    stream = \"A.B\"\nbuffer = 0\nack_timeout_ms = 1\nretry_max_ms = 0\n";
        let Err(ConfigError::Invalid(problems)) = parse(text) else { panic!("invalid config accepted") };
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        for key in [
            "sink.nats.url",
            "sink.nats.subject_prefix",
            "sink.nats.box_id",
            "sink.nats.stream",
            "sink.nats.buffer",
            "sink.nats.ack_timeout_ms",
            "sink.nats.retry_max_ms",
        ] {
            assert!(keys.contains(&key), "{key} missing from {keys:?}");
        }
    }

    #[test]
    fn the_output_table_is_part_of_the_config() {
        let config = parse("[output]\nenabled = true\nslots = 16").unwrap();
        assert_eq!(
            config.output,
            crate::output::OutputConfig {
                enabled: true,
                slots: 16,
                ..crate::output::OutputConfig::default()
            }
        );
        let err = parse("[output]\nslots = 5000").unwrap_err();
        assert_eq!(err.problems()[0].key, "output.slots", "{err}");
    }
}
