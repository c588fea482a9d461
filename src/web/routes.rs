//! The live view's router: the page at `/`, the JSON API under `/api`
//! (documented in docs/live-view.md and listed by `GET /api`), the plots
//! and previews it draws, and `/metrics`. Anything that may block (the
//! preview's copy and drawing, a fresh scrape) runs on the server's
//! blocking threads, never on the appliance's.

use super::WebView;
use crate::plot::{CurveSeries, percentile_svg, timeseries_svg};
use crate::service::MetricsSnapshot;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::time::Instant;

/// The page: one HTML file with its script and style inline.
pub const PAGE_HTML: &str = include_str!("page.html");

/// Every endpoint and what it answers (`GET /api`).
pub const ENDPOINTS: &[(&str, &str)] = &[
    ("/", "the live page (HTML; every asset inline)"),
    ("/metrics", "Prometheus text exposition (0.0.4)"),
    ("/api", "this list"),
    (
        "/api/status",
        "the appliance: version, backend, GPU, loops, streams, chain, uptime, reloads, frames, drops, consumers (JSON)",
    ),
    (
        "/api/latency",
        "each segment's count, percentiles and percentile curve, and the recent p50/p99 history (JSON)",
    ),
    ("/api/preview", "the newest output's preview: what was drawn and where (JSON)"),
    ("/api/preview.png", "the newest 2-D output as a grey-scale PNG (image previews)"),
    ("/api/preview.svg", "the newest 1-D output or spectrum as an SVG line plot"),
    ("/api/plot/latency.svg", "every segment's percentile distribution (SVG)"),
    ("/api/plot/history.svg?segment=end_to_end", "a segment's recent p50/p99 (SVG)"),
];

/// The router of `view`.
pub fn router(view: WebView) -> Router {
    let metrics = crate::service::metrics_http::metrics_router(view.board.clone());
    Router::new()
        .route("/", get(page))
        .route("/api", get(index))
        .route("/api/status", get(status))
        .route("/api/latency", get(latency))
        .route("/api/preview", get(preview_info))
        .route("/api/preview.png", get(preview_png))
        .route("/api/preview.svg", get(preview_svg))
        .route("/api/plot/latency.svg", get(latency_svg))
        .route("/api/plot/history.svg", get(history_svg))
        .with_state(view)
        .merge(metrics)
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found; see GET /api for the endpoints\n") })
}

async fn page() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], PAGE_HTML)
        .into_response()
}

async fn index() -> Json<Value> {
    Json(json!({
        "endpoints": ENDPOINTS.iter().map(|(path, what)| json!({"path": path, "what": what})).collect::<Vec<_>>()
    }))
}

fn pairs(list: &[(String, u64)]) -> Value {
    Value::Object(list.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
}

/// `/api/status` of `snap` and the view's facts at `now`.
pub fn status_json(view: &WebView, snap: &MetricsSnapshot, now: Instant) -> Value {
    let facts = &view.facts;
    let outputs = snap.outputs.as_ref().map(|o| {
        json!({
            "written": o.written,
            "consumers": o.consumers.len(),
            "consumer_lag": o.consumers.iter().map(|&(line, lag)| json!({"consumer": line, "lag": lag})).collect::<Vec<_>>(),
            "attaches": o.attaches,
            "refused": o.refused,
            "timed_out": o.timed_out,
        })
    });
    let loops: Vec<Value> = if snap.loops.is_empty() {
        facts
            .loops
            .iter()
            .map(|l| json!({"name": l.name, "gpu": l.gpu, "streams": l.streams, "up": snap.loop_launched}))
            .collect()
    } else {
        snap.loops
            .iter()
            .map(|l| json!({"name": l.name, "gpu": l.gpu, "streams": l.streams, "up": l.up}))
            .collect()
    };
    json!({
        "version": facts.version,
        "backend": if snap.backend.is_empty() { facts.backend.clone() } else { snap.backend.clone() },
        "backend_reason": facts.backend_reason,
        "gpu": facts.gpu,
        "listen": facts.listen,
        "config": facts.config_path,
        "chain": facts.chain,
        "loops": loops,
        "uptime_s": facts.uptime_s(now),
        "loop_launched": snap.loop_launched,
        "loop_iterations": snap.loop_iterations,
        "loop_idle_iterations": snap.loop_idle_iterations,
        "param_generation": snap.param_generation,
        "reloads": pairs(&snap.reloads),
        "frames": pairs(&snap.frames),
        "frames_per_s": view.latency.frame_rate(),
        "drops": pairs(&snap.drops),
        "ring_overruns": snap.ring_overruns,
        "outputs": outputs,
        "nats_sink": snap.nats_sink.as_ref().map(|n| Value::Object(n.counters().iter().map(|(k, v)| (k.to_string(), json!(v))).collect())),
        "preview": view.preview.as_ref().map(|p| p.kind()),
    })
}

async fn status(axum::extract::State(view): axum::extract::State<WebView>) -> Json<Value> {
    Json(status_json(&view, &view.board.latest(), Instant::now()))
}

/// `/api/latency` of `snap` and the view's curves and history at `now_ns`
/// (CLOCK_REALTIME).
pub fn latency_json(view: &WebView, snap: &MetricsSnapshot, now_ns: u64) -> Value {
    let curves = view.latency.curves();
    let history = view.latency.history();
    let segments: Vec<Value> = snap
        .latency
        .iter()
        .map(|seg| {
            let curve = curves.iter().find(|c| c.name == seg.segment);
            let points = |c: &CurveSeries| c.points.iter().map(|&(q, us)| json!({"q": q, "us": us})).collect::<Vec<_>>();
            let series = history.series(&seg.segment, now_ns);
            json!({
                "segment": seg.segment,
                "count": seg.count,
                "mean_us": if seg.count > 0 { seg.sum_ns / seg.count as f64 / 1000.0 } else { 0.0 },
                "quantiles": seg.quantiles.iter().map(|&(q, ns)| json!({"q": q, "us": ns as f64 / 1000.0})).collect::<Vec<_>>(),
                "curve": curve.map(points).unwrap_or_default(),
                "history": series.iter().map(|&(t, p50, p99)| json!({"t_s": t, "p50_us": p50, "p99_us": p99})).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "segments": segments })
}

async fn latency(axum::extract::State(view): axum::extract::State<WebView>) -> Json<Value> {
    Json(latency_json(&view, &view.board.latest(), crate::clock::realtime_ns()))
}

fn svg(body: String) -> Response {
    ([(header::CONTENT_TYPE, "image/svg+xml"), (header::CACHE_CONTROL, "no-store")], body).into_response()
}

fn server_error(e: impl std::fmt::Display) -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()
}

async fn latency_svg(axum::extract::State(view): axum::extract::State<WebView>) -> Response {
    let drawn = tokio::task::spawn_blocking(move || {
        percentile_svg("latency by percentile (since start)", &view.latency.curves(), &[])
    })
    .await;
    match drawn {
        Ok(Ok(body)) => svg(body),
        Ok(Err(e)) => server_error(e),
        Err(e) => server_error(e),
    }
}

#[derive(serde::Deserialize)]
struct HistoryQuery {
    segment: Option<String>,
}

async fn history_svg(
    axum::extract::State(view): axum::extract::State<WebView>,
    axum::extract::Query(q): axum::extract::Query<HistoryQuery>,
) -> Response {
    let segment = q.segment.unwrap_or_else(|| "end_to_end".into());
    if segment.len() > 64 {
        return (StatusCode::BAD_REQUEST, "segment name too long\n").into_response();
    }
    let drawn = tokio::task::spawn_blocking(move || {
        let points = view.latency.history().series(&segment, crate::clock::realtime_ns());
        let p50 = points.iter().map(|p| (p.0, p.1)).collect();
        let p99 = points.iter().map(|p| (p.0, p.2)).collect();
        timeseries_svg(
            &format!("{segment}: p50 and p99 of each second"),
            &[("p50".to_string(), p50), ("p99".to_string(), p99)],
        )
    })
    .await;
    match drawn {
        Ok(Ok(body)) => svg(body),
        Ok(Err(e)) => server_error(e),
        Err(e) => server_error(e),
    }
}

/// The last preview (drawn anew when older than the interval) on the
/// blocking threads; `None` without an output ring.
async fn rendered(view: &WebView) -> Option<std::sync::Arc<super::preview::RenderedPreview>> {
    let previewer = view.preview.clone()?;
    tokio::task::spawn_blocking(move || previewer.latest(Instant::now())).await.ok()
}

/// The header naming the output sequence a preview drawing shows.
pub const SEQUENCE_HEADER: &str = "x-frameloop-output-sequence";

const NO_PREVIEW: &str =
    "no preview: the preview reads the output ring; enable it with [output] enabled = true";

async fn preview_info(axum::extract::State(view): axum::extract::State<WebView>) -> Json<Value> {
    match rendered(&view).await {
        Some(r) => Json(serde_json::to_value(r.info(Instant::now())).unwrap_or_default()),
        None => Json(json!({"available": false, "kind": Value::Null, "message": NO_PREVIEW})),
    }
}

async fn preview_png(axum::extract::State(view): axum::extract::State<WebView>) -> Response {
    match rendered(&view).await {
        Some(r) => match &r.png {
            Some(png) => {
                let seq = r.info(Instant::now()).sequence.to_string();
                (
                    [(header::CONTENT_TYPE, "image/png"), (header::CACHE_CONTROL, "no-store")],
                    [(SEQUENCE_HEADER, seq)],
                    png.clone(),
                )
                    .into_response()
            }
            None => (
                StatusCode::NOT_FOUND,
                "no image: this chain's output is not two-dimensional (see /api/preview)\n",
            )
                .into_response(),
        },
        None => (StatusCode::NOT_FOUND, format!("{NO_PREVIEW}\n")).into_response(),
    }
}

async fn preview_svg(axum::extract::State(view): axum::extract::State<WebView>) -> Response {
    match rendered(&view).await {
        Some(r) => match &r.svg {
            Some(body) => {
                let seq = r.info(Instant::now()).sequence.to_string();
                ([(SEQUENCE_HEADER, seq)], svg(body.clone())).into_response()
            }
            None => (
                StatusCode::NOT_FOUND,
                "no line plot: this chain's output is an image (see /api/preview.png)\n",
            )
                .into_response(),
        },
        None => (StatusCode::NOT_FOUND, format!("{NO_PREVIEW}\n")).into_response(),
    }
}
