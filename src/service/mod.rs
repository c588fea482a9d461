//! frameloop as a systemd service: readiness and watchdog notification,
//! the `[service]` config section, thread placement, logging to the journal,
//! the pid file, and the appliance's HTTP server with the Prometheus metrics
//! endpoint on it.

pub mod bounded;
pub mod config;
pub mod http_server;
pub mod logging;
pub mod metrics_http;
pub mod metrics_loops;
pub mod notify;
pub mod pid_file;
pub mod thread_failure;
pub mod thread_stall;
pub mod threads;
pub mod watchdog;

pub use config::ServiceConfig;
pub use http_server::{HttpLimits, HttpServer};
pub use metrics_http::{
    FrameRingPages, LogMetrics, MetricsBoard, MetricsServer, MetricsSnapshot, SegmentLatency,
};
pub use metrics_loops::LoopMetrics;
pub use notify::Notifier;
pub use pid_file::{PidFile, PidFileError};
pub use watchdog::{ProgressSource, WatchdogPinger, backlog};

use thiserror::Error;

/// Errors of the service layer, each saying what to change.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// A thread cannot be pinned to the configured core; pick a core of the process's allowed set
    /// (the reason lists it).
    #[error("cannot pin the thread to CPU core {cpu}: {reason}")]
    Affinity { cpu: usize, reason: String },
    /// A thread cannot get real-time priority; grant it (`LimitRTPRIO=`, CAP_SYS_NICE) or remove
    /// `service.realtime_priority`.
    #[error("cannot give the thread SCHED_FIFO priority {priority}: {reason}")]
    Realtime { priority: u8, reason: String },
    /// The metrics address cannot be bound; pick a free local port in `service.metrics_addr` or
    /// remove the key.
    #[error(
        "cannot listen for metrics on {addr}: {source}; pick a free local port in service.metrics_addr \
         or remove the key"
    )]
    MetricsBind { addr: std::net::SocketAddr, source: std::io::Error },
    /// A service thread could not start; check the process's thread limit (`ulimit -u`).
    #[error("cannot start the {thread} thread: {source}; check the process's thread limit (ulimit -u)")]
    Spawn { thread: &'static str, source: std::io::Error },
}
