//! The `[service]` config section: how frameloop behaves as a system service
//! (metrics endpoint, CPU placement and real-time priority of its threads,
//! shutdown bound), with validation that names each key.

use crate::config_problem::{ConfigProblem, check_range};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// Highest CPU id accepted in `receiver_cpu`/`assembly_cpu`/`reader_cpus`/`result_cpu`/`loop_cpu`
/// (the kernel's `CPU_SETSIZE` is 1024).
pub const MAX_CPU_ID: usize = 1023;

/// `[service]`: settings that only matter when frameloop runs as a long-lived
/// service. Every key is optional; the defaults leave the threads where the
/// scheduler puts them, at normal priority, with no metrics endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceConfig {
    /// Local address (`ip:port`) of the HTTP server: the Prometheus text
    /// endpoint (`GET /metrics`), the live page (`/`) and its JSON API
    /// (`/api/...`); none = no server. A loopback address unless
    /// `http_allow_remote` is set.
    pub metrics_addr: Option<String>,
    /// Serve the live page and its API beside `/metrics` (default true).
    pub live_view: bool,
    /// Let `metrics_addr` be an address other machines reach. The server has
    /// no authentication: put it behind an SSH tunnel or a reverse proxy
    /// that has (docs/live-view.md) rather than setting this.
    pub http_allow_remote: bool,
    /// Connections the HTTP server serves at once; more are closed at once.
    pub http_max_connections: usize,
    /// How long a client may take to send its request (ms); a connection
    /// lives at most five times this.
    pub http_timeout_ms: u64,
    /// Requests the HTTP server answers per second, over every client;
    /// past it the answer is 429.
    pub http_requests_per_sec: u32,
    /// Shortest time between two previews of the newest output (ms): the
    /// output ring is read and the preview drawn at most this often, however
    /// many viewers there are.
    pub preview_interval_ms: u64,
    /// CPU core the UDP receiver thread is pinned to.
    pub receiver_cpu: Option<usize>,
    /// CPU core the assembly thread is pinned to (with
    /// `ingest.assembly_thread`; ignored without it). Give it a core of
    /// its own, next to the receiver's (same cache) where the box has a choice.
    pub assembly_cpu: Option<usize>,
    /// CPU cores of the reading threads after the first
    /// (`ingest.reading_threads`), one each in order; the first reads on
    /// `receiver_cpu`. A thread without an entry may run on any of the
    /// process's CPUs. Give each a core of its own.
    pub reader_cpus: Vec<usize>,
    /// CPU core the result/metrics thread is pinned to.
    pub result_cpu: Option<usize>,
    /// The result thread's nice value (0..=19). Above 0, the UDP receiver
    /// (nice 0) takes the CPU from it as soon as datagrams arrive: on a
    /// machine with few cores its polls between results (every 50 µs) no
    /// longer delay the receiver into dropping datagrams, and a result is
    /// seen later only while the receiver is busy. 0 gives both the same share.
    pub result_nice: i32,
    /// CPU core the host resident loop (or the thread driving the GPU graph)
    /// is pinned to.
    pub loop_cpu: Option<usize>,
    /// SCHED_FIFO priority (1..=99) for the receiver and loop threads; none =
    /// normal scheduling. Needs `LimitRTPRIO=` (or CAP_SYS_NICE) and
    /// `RestrictRealtime=no` in the unit.
    pub realtime_priority: Option<u8>,
    /// How long shutdown (tear-down, log flush, summary) may take after
    /// SIGTERM before the remaining work is abandoned (ms). Keep it below the
    /// unit's `TimeoutStopSec=`.
    pub shutdown_timeout_ms: u64,
}

/// Default `result_nice`: the host loop's default `loop.host_nice`, so
/// every thread but the receiver yields to it.
pub const DEFAULT_RESULT_NICE: i32 = 10;

/// Default `http_max_connections`.
pub const DEFAULT_HTTP_MAX_CONNECTIONS: usize = 64;
/// Default `http_timeout_ms`.
pub const DEFAULT_HTTP_TIMEOUT_MS: u64 = 2000;
/// Default `http_requests_per_sec`: 50 viewers' pages at one update a
/// second each, with room to spare.
pub const DEFAULT_HTTP_REQUESTS_PER_SEC: u32 = 500;
/// Default `preview_interval_ms`: two previews a second at most.
pub const DEFAULT_PREVIEW_INTERVAL_MS: u64 = 500;

/// Default `shutdown_timeout_ms`: well inside the unit's `TimeoutStopSec=15`.
pub const DEFAULT_SHUTDOWN_TIMEOUT_MS: u64 = 5000;

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            metrics_addr: None,
            live_view: true,
            http_allow_remote: false,
            http_max_connections: DEFAULT_HTTP_MAX_CONNECTIONS,
            http_timeout_ms: DEFAULT_HTTP_TIMEOUT_MS,
            http_requests_per_sec: DEFAULT_HTTP_REQUESTS_PER_SEC,
            preview_interval_ms: DEFAULT_PREVIEW_INTERVAL_MS,
            receiver_cpu: None,
            assembly_cpu: None,
            reader_cpus: Vec::new(),
            result_cpu: None,
            result_nice: DEFAULT_RESULT_NICE,
            loop_cpu: None,
            realtime_priority: None,
            shutdown_timeout_ms: DEFAULT_SHUTDOWN_TIMEOUT_MS,
        }
    }
}

impl ServiceConfig {
    /// Records every problem of this section, each named `service.<key>`.
    pub fn validate(&self, problems: &mut Vec<ConfigProblem>) {
        if let Some(addr) = &self.metrics_addr {
            match addr.parse::<SocketAddr>() {
                Err(_) => problems.push(ConfigProblem::new(
                    "service.metrics_addr",
                    format!("{addr:?} is not an ip:port address; write for example \"127.0.0.1:9464\""),
                )),
                Ok(a) if !a.ip().is_loopback() && !self.http_allow_remote => problems.push(ConfigProblem::new(
                    "service.http_allow_remote",
                    format!(
                        "service.metrics_addr {addr:?} is reachable from other machines and the HTTP server has \
                         no authentication; listen on 127.0.0.1 and reach it through an SSH tunnel or a reverse \
                         proxy (docs/live-view.md), or set service.http_allow_remote = true to serve it anyway"
                    ),
                )),
                Ok(_) => {}
            }
        }
        check_range(problems, "service.http_max_connections", self.http_max_connections, 1, 4096);
        check_range(problems, "service.http_timeout_ms", self.http_timeout_ms, 100, 60_000);
        check_range(problems, "service.http_requests_per_sec", self.http_requests_per_sec, 1, 100_000);
        check_range(problems, "service.preview_interval_ms", self.preview_interval_ms, 50, 60_000);
        for (key, cpu) in [
            ("service.receiver_cpu", self.receiver_cpu),
            ("service.assembly_cpu", self.assembly_cpu),
            ("service.result_cpu", self.result_cpu),
            ("service.loop_cpu", self.loop_cpu),
        ] {
            if let Some(cpu) = cpu {
                check_range(problems, key, cpu, 0, MAX_CPU_ID);
            }
        }
        for &cpu in &self.reader_cpus {
            check_range(problems, "service.reader_cpus", cpu, 0, MAX_CPU_ID);
        }
        check_range(problems, "service.result_nice", self.result_nice, 0, 19);
        if let Some(prio) = self.realtime_priority {
            check_range(problems, "service.realtime_priority", prio, 1, 99);
        }
        check_range(problems, "service.shutdown_timeout_ms", self.shutdown_timeout_ms, 100, 600_000);
    }

    /// The metrics endpoint address, when one is configured and valid.
    pub fn metrics_socket_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr.as_deref().and_then(|a| a.parse().ok())
    }

    /// `shutdown_timeout_ms` as a duration.
    pub fn shutdown_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.shutdown_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config_problem::{deserialize_table, no_listed_keys};

    fn parse(text: &str) -> (ServiceConfig, Vec<ConfigProblem>) {
        let value: toml::Value = toml::from_str(text).unwrap();
        let mut problems = Vec::new();
        let cfg: ServiceConfig = deserialize_table("service", Some(&value), &mut problems, no_listed_keys);
        if problems.is_empty() {
            cfg.validate(&mut problems);
        }
        (cfg, problems)
    }

    fn keys(problems: &[ConfigProblem]) -> Vec<&str> {
        problems.iter().map(|p| p.key.as_str()).collect()
    }

    #[test]
    fn empty_section_is_the_default() {
        let (cfg, problems) = parse("");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(cfg, ServiceConfig::default());
        assert_eq!(cfg.metrics_socket_addr(), None);
        assert_eq!(cfg.shutdown_timeout().as_millis(), u128::from(DEFAULT_SHUTDOWN_TIMEOUT_MS));
    }

    #[test]
    fn full_section_parses() {
        let (cfg, problems) = parse(
            r#"
            metrics_addr = "127.0.0.1:9464"
            receiver_cpu = 2
            reader_cpus = [5, 6]
            result_cpu = 3
            result_nice = 0
            loop_cpu = 4
            realtime_priority = 50
            shutdown_timeout_ms = 3000
            "#,
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(cfg.metrics_socket_addr(), Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!((cfg.receiver_cpu, cfg.result_cpu, cfg.loop_cpu), (Some(2), Some(3), Some(4)));
        assert_eq!(cfg.reader_cpus, [5, 6]);
        assert_eq!(cfg.realtime_priority, Some(50));
        assert_eq!(cfg.result_nice, 0);
        assert_eq!(cfg.shutdown_timeout_ms, 3000);
    }

    #[test]
    fn bad_values_are_reported_by_key() {
        let (_, problems) = parse(
            r#"
            metrics_addr = "localhost"
            receiver_cpu = 5000
            assembly_cpu = 2048
            reader_cpus = [3, 1024]
            loop_cpu = 1024
            result_nice = 20
            realtime_priority = 0
            shutdown_timeout_ms = 10
            "#,
        );
        let keys = keys(&problems);
        for k in [
            "service.metrics_addr",
            "service.receiver_cpu",
            "service.assembly_cpu",
            "service.reader_cpus",
            "service.loop_cpu",
            "service.result_nice",
            "service.realtime_priority",
            "service.shutdown_timeout_ms",
        ] {
            assert!(keys.contains(&k), "missing {k} in {problems:?}");
        }
        assert!(!keys.contains(&"service.result_cpu"), "{problems:?}");
    }

    #[test]
    fn a_remote_address_needs_http_allow_remote() {
        let (_, problems) = parse("metrics_addr = \"0.0.0.0:9464\"");
        assert_eq!(keys(&problems), ["service.http_allow_remote"], "{problems:?}");
        assert!(problems[0].to_string().contains("SSH tunnel"), "{}", problems[0]);
        let (cfg, problems) = parse("metrics_addr = \"0.0.0.0:9464\"\nhttp_allow_remote = true");
        assert!(problems.is_empty() && cfg.http_allow_remote, "{problems:?}");
        let (_, problems) = parse("metrics_addr = \"[::1]:9464\"");
        assert!(problems.is_empty(), "IPv6 loopback is local: {problems:?}");
        let (_, problems) = parse(
            "http_max_connections = 0\nhttp_timeout_ms = 5\nhttp_requests_per_sec = 0\npreview_interval_ms = 1",
        );
        assert_eq!(
            keys(&problems),
            [
                "service.http_max_connections",
                "service.http_timeout_ms",
                "service.http_requests_per_sec",
                "service.preview_interval_ms"
            ]
        );
    }

    #[test]
    fn unknown_and_mistyped_keys_are_reported_by_key() {
        let (_, problems) = parse("metrics_port = 9464\nrealtime_priority = 500\nresult_cpu = \"two\"");
        let keys = keys(&problems);
        for k in ["service.metrics_port", "service.realtime_priority", "service.result_cpu"] {
            assert!(keys.iter().any(|x| x.starts_with(k)), "missing {k} in {problems:?}");
        }
    }
}
