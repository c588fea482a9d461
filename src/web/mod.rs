//! The live view: a page at `/` that shows the running appliance (its
//! state, rates, drops, consumers, latency distributions and a preview of
//! the newest output) and the JSON API behind it (`/api/...`, see
//! docs/live-view.md), served beside `/metrics` by the appliance's HTTP
//! server. Every asset is embedded in the binary; plots and previews are
//! drawn on the server's own threads ([`crate::plot`]).
//!
//! Files: `facts.rs` (what the page shows and the control loop publishes),
//! `preview.rs` (the newest output, taken at a bounded rate), `routes.rs`
//! (the router), `page.html` (the page).

pub mod facts;
pub mod preview;
pub mod routes;

pub use facts::{ApplianceFacts, LatencyHistory, LiveLatency};
pub use preview::{PreviewKind, Previewer};

use crate::service::http_server::{HttpLimits, HttpServer};
use crate::service::{MetricsBoard, ServiceError};
use std::net::SocketAddr;
use std::time::Duration;

/// Everything the page and the API show: the metrics board the control loop
/// publishes, the facts fixed at start-up, the latency curves and the
/// previewer (when the appliance has an output ring).
#[derive(Clone)]
pub struct WebView {
    pub board: MetricsBoard,
    pub facts: std::sync::Arc<ApplianceFacts>,
    pub latency: LiveLatency,
    pub preview: Option<std::sync::Arc<Previewer>>,
}

impl WebView {
    /// A view of `board` with `facts`, no latency curves yet and no preview.
    pub fn new(board: MetricsBoard, facts: ApplianceFacts) -> Self {
        Self { board, facts: std::sync::Arc::new(facts), latency: LiveLatency::default(), preview: None }
    }

    /// Adds the preview of the newest output.
    pub fn with_preview(mut self, previewer: Previewer) -> Self {
        self.preview = Some(std::sync::Arc::new(previewer));
        self
    }
}

/// The running server of `/metrics`, the live page and the API. Dropping it
/// (or [`WebServer::stop`]) closes the listener and joins its thread.
pub struct WebServer {
    server: HttpServer,
}

impl WebServer {
    /// Binds `addr` and serves `view` within `limits`.
    pub fn start(addr: SocketAddr, view: WebView, limits: HttpLimits) -> Result<Self, ServiceError> {
        let server = HttpServer::start(addr, routes::router(view), limits, "http")?;
        let at = server.local_addr();
        tracing::info!(addr = %at, "live view at http://{at}/ (metrics at http://{at}/metrics)");
        Ok(Self { server })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// What the server refused so far.
    pub fn counters(&self) -> &crate::service::http_server::HttpCounters {
        self.server.counters()
    }

    /// Stops accepting and joins the thread.
    pub fn stop(self) {
        self.server.stop();
    }
}

/// Limits from the `[service]` keys `http_max_connections`,
/// `http_timeout_ms` and `http_requests_per_sec`.
pub fn limits_of(service: &crate::service::ServiceConfig) -> HttpLimits {
    HttpLimits {
        max_connections: service.http_max_connections,
        timeout: Duration::from_millis(service.http_timeout_ms),
        requests_per_sec: service.http_requests_per_sec,
        ..HttpLimits::default()
    }
}
