//! `frameloop run`'s HTTP endpoint: the live view (page, API, `/metrics`)
//! or `/metrics` alone (`service.live_view = false`), per `[service]`; and
//! the facts and previewer the live view is built from.

use super::Appliance;
use crate::config::Config;
use crate::service::{MetricsBoard, MetricsServer, ServiceError};
use crate::web::facts::LoopFacts;
use crate::web::{ApplianceFacts, PreviewKind, Previewer, WebServer, WebView};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The server `run` keeps while it runs.
pub enum HttpEndpoint {
    /// The live page, its API and `/metrics`.
    Web(WebServer, WebView),
    /// `/metrics` alone.
    Metrics(MetricsServer),
}

impl HttpEndpoint {
    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        match self {
            Self::Web(s, _) => s.local_addr(),
            Self::Metrics(s) => s.local_addr(),
        }
    }

    /// The live view, when served.
    pub fn view(&self) -> Option<&WebView> {
        match self {
            Self::Web(_, view) => Some(view),
            Self::Metrics(_) => None,
        }
    }

    /// Stops serving and joins the server's thread.
    pub fn stop(self) {
        match self {
            Self::Web(s, _) => s.stop(),
            Self::Metrics(s) => s.stop(),
        }
    }
}

/// Starts the endpoint `cfg.service` asks for (none without
/// `service.metrics_addr`), showing `board` and, for the live view, `facts`
/// and `previewer`.
pub fn start_endpoint(
    cfg: &Config,
    board: &MetricsBoard,
    facts: ApplianceFacts,
    previewer: Option<Previewer>,
) -> Result<Option<HttpEndpoint>, ServiceError> {
    let Some(addr) = cfg.service.metrics_socket_addr() else { return Ok(None) };
    if !cfg.service.live_view {
        return Ok(Some(HttpEndpoint::Metrics(MetricsServer::start(addr, board.clone())?)));
    }
    let mut view = WebView::new(board.clone(), facts);
    if let Some(p) = previewer {
        view = view.with_preview(p);
    }
    let server = WebServer::start(addr, view.clone(), crate::web::limits_of(&cfg.service))?;
    Ok(Some(HttpEndpoint::Web(server, view)))
}

/// The facts of a single-loop appliance.
pub fn appliance_facts(
    cfg: &Config,
    app: &Appliance,
    config_path: Option<&std::path::Path>,
) -> ApplianceFacts {
    let backend = app.backend();
    let gpu = (backend.backend == crate::backend::Backend::Cuda).then(|| backend.reason.clone());
    ApplianceFacts {
        version: env!("CARGO_PKG_VERSION").to_string(),
        backend: backend.name().to_string(),
        backend_reason: backend.reason.clone(),
        gpu,
        listen: app.local_addr().to_string(),
        loops: vec![LoopFacts { name: "main".into(), gpu: None, streams: Vec::new() }],
        chain: cfg.chain.iter().map(|op| op.name().to_string()).collect(),
        config_path: config_path.map(|p| p.display().to_string()),
        started: Some(Instant::now()),
    }
}

/// The previewer of the appliance's output ring, when it has one.
pub fn previewer(cfg: &Config, app: &Appliance) -> Option<Previewer> {
    let ring = app.output_ring()?;
    let kind = PreviewKind::of_chain(&cfg.chain, cfg.rtp.as_ref().and_then(|r| r.height));
    Some(Previewer::new(ring, kind, Duration::from_millis(cfg.service.preview_interval_ms)))
}
