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
pub enum ServiceError {
    #[error("cannot pin the thread to CPU core {cpu}: {reason}")]
    Affinity { cpu: usize, reason: String },
    #[error("cannot give the thread SCHED_FIFO priority {priority}: {reason}")]
    Realtime { priority: u8, reason: String },
    #[error(
        "cannot listen for metrics on {addr}: {source}; pick a free local port in service.metrics_addr \
         or remove the key"
    )]
    MetricsBind { addr: std::net::SocketAddr, source: std::io::Error },
    #[error("cannot start the {thread} thread: {source}")]
    Spawn { thread: &'static str, source: std::io::Error },
}
