//! The Prometheus text endpoint: a snapshot of the appliance's counters and
//! latency percentiles that the pipeline publishes, rendered in the text
//! exposition format (0.0.4) and served at `GET /metrics` by the
//! appliance's HTTP server ([`super::http_server`]).

use super::ServiceError;
use super::http_server::{HttpLimits, HttpServer};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
/// Content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Latency of one segment (for example `wire`, `ring`, `gpu`,
/// `end_to_end`), over whatever window the publisher keeps (the whole run
/// for cumulative histograms).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SegmentLatency {
    /// Segment name (a label value; any text is escaped).
    pub segment: String,
    /// Samples recorded.
    pub count: u64,
    /// Sum of all samples in ns (count × mean for an HDR histogram).
    pub sum_ns: f64,
    /// (quantile in 0..=1, value in ns), for example (0.5, p50), (0.99, p99).
    pub quantiles: Vec<(f64, u64)>,
}

/// The frame ring's size and how much of it is in huge pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameRingPages {
    pub bytes: u64,
    pub huge_page_bytes: u64,
}

/// Everything the endpoint shows, as plain numbers and labelled series. The
/// pipeline fills one and publishes it on a [`MetricsBoard`].
/// One log file's counts (`metrics.frame_log`, `metrics.histogram_log`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogMetrics {
    /// `frame_log` or `histogram_log`.
    pub log: String,
    /// Records (lines, intervals) in the file.
    pub written: u64,
    /// Records that could not be written (a full disk).
    pub lost: u64,
    /// The last write failed.
    pub failing: bool,
}

impl LogMetrics {
    /// The counts of log `log` now.
    pub fn of(log: &str, c: &crate::metrics::LogCounters) -> Self {
        use std::sync::atomic::Ordering::Relaxed;
        Self {
            log: log.to_string(),
            written: c.written.load(Relaxed),
            lost: c.lost.load(Relaxed),
            failing: c.failing.load(Relaxed),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// Resident loop backend: "host" or "cuda" (empty before start-up).
    pub backend: String,
    /// The resident loop is launched (the GPU graph runs, or the host loop).
    pub loop_launched: bool,
    /// Resident loop iterations (`LoopStats::iterations`).
    pub loop_iterations: u64,
    /// Iterations that found no frame (`LoopStats::idle_iterations`).
    pub loop_idle_iterations: u64,
    /// Frames by outcome, for example ("processed", n), ("skipped", n),
    /// ("incomplete", n).
    pub frames: Vec<(String, u64)>,
    /// Dropped datagrams or frames by reason, for example ("ring_full", n),
    /// ("bad_header", n).
    pub drops: Vec<(String, u64)>,
    /// Times the ring's writer found it full or lapped the reader.
    pub ring_overruns: u64,
    /// Times a busy-polling receiver left its socket unread for over 50 µs
    /// (the ingest counter `busy_poll_gaps`).
    pub receiver_busy_poll_gaps: u64,
    /// Times the receiving thread waited for the assembly thread to give a
    /// receive batch back (`ingest.assembly_thread`; the ingest counter
    /// `assembly_waits`).
    pub receiver_assembly_waits: u64,
    /// The frame ring's bytes in host memory and how many of them are in
    /// huge pages (`ring.huge_pages`); `None` where the host cannot say
    /// (a ring in GPU memory) or before start-up.
    pub frame_ring_pages: Option<FrameRingPages>,
    /// Latency percentiles per segment.
    pub latency: Vec<SegmentLatency>,
    /// With several resident loops (`[[loop]]`): each loop's own snapshot,
    /// shown with a `loop` label instead of the fields above.
    pub loops: Vec<super::metrics_loops::LoopMetrics>,
    /// The output ring and its consumers, when `[output]` is enabled.
    pub outputs: Option<crate::metrics::OutputMetrics>,
    /// The NATS sink's counters, when `[sink.nats]` is configured.
    pub nats_sink: Option<crate::metrics::SinkMetrics>,
    /// The actuation outputs' counters and latency, when `[[actuate]]` is configured.
    pub actuation: Option<crate::actuate::ActuationMetrics>,
    /// The operator parameter generation the loop runs (0: the start-up config).
    pub param_generation: u32,
    /// Config reloads by outcome, for example ("applied_params", n).
    pub reloads: Vec<(String, u64)>,
    /// The frame log and the histogram log (`[metrics]`), when written.
    pub logs: Vec<LogMetrics>,
}

/// How long a scrape waits for the pipeline to publish current values
/// before it answers with the last snapshot.
const FRESH_WAIT: Duration = Duration::from_millis(200);

/// The published snapshot and how many have been published.
#[derive(Debug, Default)]
struct Published {
    snapshot: Arc<MetricsSnapshot>,
    generation: u64,
}

/// The latest published snapshot, shared between the pipeline (writer) and
/// the endpoint (reader). Once the pipeline polls [`MetricsBoard::refresh_wanted`],
/// each scrape asks it for current values and waits (up to 200 ms) for them,
/// so a scrape sees the counters as they are at request time. Cloning gives
/// another handle to the same board.
#[derive(Debug, Clone, Default)]
pub struct MetricsBoard {
    published: Arc<(Mutex<Published>, Condvar)>,
    /// A scrape waits for a fresh snapshot.
    wanted: Arc<AtomicBool>,
    /// The pipeline answers refresh requests.
    answered: Arc<AtomicBool>,
}

impl MetricsBoard {
    /// A board holding an empty snapshot.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Published> {
        self.published.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces the snapshot the endpoint serves.
    pub fn publish(&self, snapshot: MetricsSnapshot) {
        let mut published = self.lock();
        published.snapshot = Arc::new(snapshot);
        published.generation = published.generation.wrapping_add(1);
        drop(published);
        self.published.1.notify_all();
    }

    /// True when a scrape is waiting for current values: the publisher then
    /// calls [`MetricsBoard::publish`]. Calling it at all marks the board as
    /// answered, so scrapes wait for fresh values from then on.
    pub fn refresh_wanted(&self) -> bool {
        self.answered.store(true, Ordering::Release);
        self.wanted.swap(false, Ordering::AcqRel)
    }

    /// The snapshot last published.
    pub fn latest(&self) -> Arc<MetricsSnapshot> {
        Arc::clone(&self.lock().snapshot)
    }

    /// Current values: asks the publisher for a new snapshot and waits for
    /// it (up to [`FRESH_WAIT`]) where a publisher answers; else the latest.
    pub fn current(&self) -> Arc<MetricsSnapshot> {
        if !self.answered.load(Ordering::Acquire) {
            return self.latest();
        }
        let published = self.lock();
        let seen = published.generation;
        self.wanted.store(true, Ordering::Release);
        let (published, _) = self
            .published
            .1
            .wait_timeout_while(published, FRESH_WAIT, |p| p.generation == seen)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Arc::clone(&published.snapshot)
    }
}

/// Escapes a label value: backslash, double quote and line feed.
pub fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Writes the `# HELP` and `# TYPE` lines of one metric family.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    // HELP text escapes backslash and line feed only.
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Writes one sample line with `labels` (name, unescaped value).
fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape_label_value(v));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// Nanoseconds as seconds, the unit Prometheus expects.
fn seconds(ns: f64) -> f64 {
    ns / 1e9
}

/// Renders `snap` in the Prometheus text exposition format.
pub fn render(snap: &MetricsSnapshot) -> String {
    if !snap.loops.is_empty() {
        return super::metrics_loops::render_loops(&snap.loops);
    }
    let mut out = String::with_capacity(2048);
    family(&mut out, "frameloop_info", "gauge", "frameloop build and backend; always 1.");
    sample(
        &mut out,
        "frameloop_info",
        &[("version", env!("CARGO_PKG_VERSION")), ("backend", &snap.backend)],
        1,
    );
    family(&mut out, "frameloop_loop_launched", "gauge", "1 while the resident loop is launched, else 0.");
    sample(&mut out, "frameloop_loop_launched", &[("backend", &snap.backend)], u8::from(snap.loop_launched));
    family(&mut out, "frameloop_loop_iterations_total", "counter", "Resident loop iterations, idle or not.");
    sample(&mut out, "frameloop_loop_iterations_total", &[], snap.loop_iterations);
    family(
        &mut out,
        "frameloop_loop_idle_iterations_total",
        "counter",
        "Resident loop iterations that found no frame.",
    );
    sample(&mut out, "frameloop_loop_idle_iterations_total", &[], snap.loop_idle_iterations);
    family(&mut out, "frameloop_frames_total", "counter", "Frames by outcome.");
    for (outcome, n) in &snap.frames {
        sample(&mut out, "frameloop_frames_total", &[("outcome", outcome)], n);
    }
    family(&mut out, "frameloop_drops_total", "counter", "Dropped datagrams and frames by reason.");
    for (reason, n) in &snap.drops {
        sample(&mut out, "frameloop_drops_total", &[("reason", reason)], n);
    }
    family(
        &mut out,
        "frameloop_ring_overruns_total",
        "counter",
        "Times the frame ring's writer found the ring full or lapped the reader.",
    );
    sample(&mut out, "frameloop_ring_overruns_total", &[], snap.ring_overruns);
    family(
        &mut out,
        "frameloop_receiver_busy_poll_gaps_total",
        "counter",
        "Times the busy-polling UDP receiver left its socket unread for over 50 us (preempted or stalled).",
    );
    sample(&mut out, "frameloop_receiver_busy_poll_gaps_total", &[], snap.receiver_busy_poll_gaps);
    family(
        &mut out,
        "frameloop_receiver_assembly_waits_total",
        "counter",
        "Times the UDP receiver waited for the assembly thread (ingest.assembly_thread) to free a receive batch.",
    );
    sample(&mut out, "frameloop_receiver_assembly_waits_total", &[], snap.receiver_assembly_waits);
    if let Some(ring) = snap.frame_ring_pages {
        family(&mut out, "frameloop_frame_ring_bytes", "gauge", "Bytes of the frame ring in host memory.");
        sample(&mut out, "frameloop_frame_ring_bytes", &[], ring.bytes);
        family(
            &mut out,
            "frameloop_frame_ring_huge_page_bytes",
            "gauge",
            "Bytes of the frame ring the kernel backs with huge pages (ring.huge_pages).",
        );
        sample(&mut out, "frameloop_frame_ring_huge_page_bytes", &[], ring.huge_page_bytes);
    }
    family(
        &mut out,
        "frameloop_param_generation",
        "gauge",
        "Operator parameter generation the loop runs (0: the start-up config; one more per applied reload).",
    );
    sample(&mut out, "frameloop_param_generation", &[], snap.param_generation);
    if !snap.logs.is_empty() {
        family(
            &mut out,
            "frameloop_log_records_total",
            "counter",
            "Records of the frame log (lines) and the histogram log (intervals), written or lost (a full disk).",
        );
        for l in &snap.logs {
            sample(
                &mut out,
                "frameloop_log_records_total",
                &[("log", &l.log), ("state", "written")],
                l.written,
            );
            sample(&mut out, "frameloop_log_records_total", &[("log", &l.log), ("state", "lost")], l.lost);
        }
        family(
            &mut out,
            "frameloop_log_failing",
            "gauge",
            "1 while the log's last write failed (a full disk).",
        );
        for l in &snap.logs {
            sample(&mut out, "frameloop_log_failing", &[("log", &l.log)], u64::from(l.failing));
        }
    }
    family(&mut out, "frameloop_reloads_total", "counter", "Config reloads by outcome.");
    for (outcome, n) in &snap.reloads {
        sample(&mut out, "frameloop_reloads_total", &[("outcome", outcome)], n);
    }
    family(
        &mut out,
        "frameloop_latency_seconds",
        "summary",
        "Frame latency per segment, from HDR histograms.",
    );
    for seg in &snap.latency {
        for &(q, ns) in &seg.quantiles {
            let q = q.to_string();
            sample(
                &mut out,
                "frameloop_latency_seconds",
                &[("segment", &seg.segment), ("quantile", &q)],
                seconds(ns as f64),
            );
        }
        sample(&mut out, "frameloop_latency_seconds_sum", &[("segment", &seg.segment)], seconds(seg.sum_ns));
        sample(&mut out, "frameloop_latency_seconds_count", &[("segment", &seg.segment)], seg.count);
    }
    if let Some(o) = &snap.outputs {
        render_outputs(&mut out, o);
    }
    if let Some(a) = &snap.actuation {
        render_actuation(&mut out, a);
    }
    if let Some(n) = &snap.nats_sink {
        family(
            &mut out,
            "frameloop_nats_sink_results",
            "gauge",
            "NATS sink results by state: published (retries included), acked, dropped, pending; and reconnects.",
        );
        for (state, v) in n.counters() {
            sample(&mut out, "frameloop_nats_sink_results", &[("state", state)], v);
        }
    }
    out
}

/// The actuation outputs' families: messages by fate, and result ready to sent.
fn render_actuation(out: &mut String, a: &crate::actuate::ActuationMetrics) {
    family(
        out,
        "frameloop_actuation_messages_total",
        "counter",
        "Actuation messages per output by fate: sent, send_errors, dropped (transmit ring full), \
         rate_limited, no_reply_address.",
    );
    for o in &a.outputs {
        for (fate, v) in o.fates() {
            sample(out, "frameloop_actuation_messages_total", &[("output", &o.name), ("fate", fate)], v);
        }
    }
    family(
        out,
        "frameloop_actuation_ready_to_sent_seconds",
        "gauge",
        "Actuation: from the frame's result ready to its message handed to the kernel, per output.",
    );
    for o in &a.outputs {
        let p = &o.ready_to_sent;
        for (q, us) in [("0.5", p.p50_us), ("0.99", p.p99_us), ("0.999", p.p99_9_us), ("1", p.max_us)] {
            sample(
                out,
                "frameloop_actuation_ready_to_sent_seconds",
                &[("output", &o.name), ("quantile", q)],
                us / 1e6,
            );
        }
    }
}

/// The output ring's families: outputs written, consumers attached and each one's lag.
fn render_outputs(out: &mut String, o: &crate::metrics::OutputMetrics) {
    family(out, "frameloop_outputs_written_total", "counter", "Outputs written into the output ring.");
    sample(out, "frameloop_outputs_written_total", &[], o.written);
    family(out, "frameloop_output_consumers", "gauge", "Consumers attached to the output ring now.");
    sample(out, "frameloop_output_consumers", &[], o.consumers.len());
    family(
        out,
        "frameloop_output_consumer_lag",
        "gauge",
        "Outputs written after the newest one the consumer finished with.",
    );
    for &(line, lag) in &o.consumers {
        sample(out, "frameloop_output_consumer_lag", &[("consumer", &line.to_string())], lag);
    }
    family(out, "frameloop_output_attaches_total", "counter", "Output consumer attach requests by outcome.");
    sample(out, "frameloop_output_attaches_total", &[("outcome", "accepted")], o.attaches);
    sample(out, "frameloop_output_attaches_total", &[("outcome", "refused")], o.refused);
    sample(out, "frameloop_output_attaches_total", &[("outcome", "timed_out")], o.timed_out);
}

/// The `/metrics` route: `GET` (and `HEAD`) answer the text exposition of
/// current values (the scrape waits up to 200 ms for the pipeline to
/// publish them; the wait runs on the server's blocking threads).
pub fn metrics_router(board: MetricsBoard) -> axum::Router {
    use axum::http::header::CONTENT_TYPE as HEADER;
    let handler = move || {
        let board = board.clone();
        async move {
            let text = tokio::task::spawn_blocking(move || render(&board.current()))
                .await
                .unwrap_or_else(|_| String::from("# the metrics renderer failed\n"));
            ([(HEADER, CONTENT_TYPE)], text)
        }
    };
    axum::Router::new().route("/metrics", axum::routing::get(handler))
}

/// The router of a server that serves only `/metrics`: anything else is 404
/// with a hint.
fn metrics_only(board: MetricsBoard) -> axum::Router {
    metrics_router(board).fallback(|| async {
        (axum::http::StatusCode::NOT_FOUND, "not found; metrics are at GET /metrics\n")
    })
}

/// The Prometheus endpoint alone (no live page): `GET /metrics` on the
/// appliance's HTTP server with the default [`HttpLimits`]. Dropping it (or
/// [`MetricsServer::stop`]) closes the listener and joins its thread.
pub struct MetricsServer {
    server: HttpServer,
}

impl MetricsServer {
    /// Binds `addr` (port 0 picks a free port) and serves `board`. Binding
    /// errors are returned so start-up can fail clearly.
    pub fn start(addr: SocketAddr, board: MetricsBoard) -> Result<Self, ServiceError> {
        let server = HttpServer::start(addr, metrics_only(board), HttpLimits::default(), "metrics")?;
        tracing::info!(addr = %server.local_addr(), "metrics endpoint listening at http://{}/metrics", server.local_addr());
        Ok(Self { server })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Stops accepting and joins the thread.
    pub fn stop(self) {
        self.server.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> MetricsSnapshot {
        MetricsSnapshot {
            backend: "host".into(),
            loop_launched: true,
            loop_iterations: 1234,
            loop_idle_iterations: 1000,
            frames: vec![("processed".into(), 200), ("skipped".into(), 3)],
            drops: vec![("ring_full".into(), 7), ("odd \"reason\"\\\n".into(), 1)],
            ring_overruns: 2,
            receiver_busy_poll_gaps: 4,
            receiver_assembly_waits: 5,
            frame_ring_pages: Some(FrameRingPages { bytes: 6 << 20, huge_page_bytes: 4 << 20 }),
            param_generation: 3,
            reloads: vec![("applied_params".into(), 3), ("refused_restart".into(), 1)],
            latency: vec![SegmentLatency {
                segment: "end_to_end".into(),
                count: 200,
                sum_ns: 2_000_000.0,
                quantiles: vec![(0.5, 9_000), (0.99, 25_000)],
            }],
            loops: Vec::new(),
            outputs: None,
            nats_sink: None,
            logs: vec![LogMetrics { log: "frame_log".into(), written: 6532, lost: 3443, failing: true }],
            actuation: None,
        }
    }

    #[test]
    fn renders_families_with_help_type_and_escaped_labels() {
        let text = render(&snapshot());
        assert!(text.contains(
            "# HELP frameloop_frames_total Frames by outcome.\n# TYPE frameloop_frames_total counter\n"
        ));
        assert!(text.contains("frameloop_frames_total{outcome=\"processed\"} 200\n"));
        assert!(text.contains("frameloop_drops_total{reason=\"odd \\\"reason\\\"\\\\\\n\"} 1\n"), "{text}");
        assert!(text.contains("frameloop_loop_launched{backend=\"host\"} 1\n"));
        assert!(text.contains("frameloop_param_generation 3\n"), "{text}");
        assert!(
            text.contains("frameloop_log_records_total{log=\"frame_log\",state=\"lost\"} 3443\n"),
            "{text}"
        );
        assert!(text.contains("frameloop_log_failing{log=\"frame_log\"} 1\n"), "{text}");
        assert!(text.contains("frameloop_reloads_total{outcome=\"refused_restart\"} 1\n"), "{text}");
        assert!(
            text.contains("frameloop_latency_seconds{segment=\"end_to_end\",quantile=\"0.99\"} 0.000025\n")
        );
        assert!(text.contains("frameloop_latency_seconds_sum{segment=\"end_to_end\"} 0.002\n"));
        assert!(text.contains("frameloop_latency_seconds_count{segment=\"end_to_end\"} 200\n"));
        assert!(text.contains("frameloop_ring_overruns_total 2\n"));
        assert!(text.contains("frameloop_receiver_busy_poll_gaps_total 4\n"), "{text}");
        assert!(text.contains("frameloop_receiver_assembly_waits_total 5\n"), "{text}");
        assert!(text.contains("frameloop_frame_ring_bytes 6291456\n"), "{text}");
        assert!(text.contains("frameloop_frame_ring_huge_page_bytes 4194304\n"), "{text}");
        let without = render(&MetricsSnapshot { frame_ring_pages: None, ..snapshot() });
        assert!(!without.contains("frameloop_frame_ring"), "no ring, no ring gauges: {without}");
        // Every sample line belongs to a family declared before it.
        let mut declared = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.push(rest.split(' ').next().unwrap().to_string());
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                assert!(declared.iter().any(|d| name.starts_with(d.as_str())), "{name} undeclared");
            }
        }
    }

    #[test]
    fn escapes_label_values() {
        assert_eq!(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(escape_label_value("plain"), "plain");
    }

    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Instant;

    const MAX_REQUEST_BYTES: usize = super::super::http_server::MAX_REQUEST_BYTES;

    fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(request);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    #[test]
    fn serves_over_tcp_and_bounds_requests() {
        let board = MetricsBoard::new();
        let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), board.clone()).unwrap();
        let addr = server.local_addr();
        let empty = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(empty.starts_with("HTTP/1.1 200 OK\r\n"), "{empty}");
        assert!(empty.contains("frameloop_loop_launched{backend=\"\"} 0"), "{empty}");
        board.publish(snapshot());
        let full = exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(full.contains("frameloop_frames_total{outcome=\"skipped\"} 3"), "{full}");
        let (head, body) = full.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())), "{head}");
        assert!(exchange(addr, b"GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        assert!(
            exchange(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
                .starts_with("HTTP/1.1 405 ")
        );
        let head = exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n"), "{head}");
        assert!(exchange(addr, b"junk\r\n\r\n").starts_with("HTTP/1.1 400 "));
        let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(3 * MAX_REQUEST_BYTES));
        assert!(exchange(addr, huge.as_bytes()).starts_with("HTTP/1.1 431 "));
        // A client that sends nothing does not hold the next one up, and is
        // cut off after the timeout.
        let mut idle = TcpStream::connect(addr).unwrap();
        let after = exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(after.starts_with("HTTP/1.1 200 OK"), "{after}");
        idle.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let started = Instant::now();
        let mut rest = Vec::new();
        let _ = idle.read_to_end(&mut rest);
        let waited = started.elapsed();
        assert!(waited < Duration::from_secs(8), "the idle client was cut off after {waited:?}");
        server.stop();
        assert!(TcpStream::connect(addr).is_err(), "listener closed after stop");
    }

    #[test]
    fn a_taken_port_is_a_clear_error() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let err = MetricsServer::start(taken.local_addr().unwrap(), MetricsBoard::new()).err().unwrap();
        assert!(err.to_string().contains("service.metrics_addr"), "{err}");
    }

    #[test]
    fn a_scrape_gets_values_published_after_it_asked() {
        use std::time::Instant;
        let board = MetricsBoard::new();
        board.publish(MetricsSnapshot { ring_overruns: 1, ..Default::default() });
        assert!(!board.refresh_wanted(), "no scrape waits yet");
        let publisher = board.clone();
        let answer = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !publisher.refresh_wanted() {
                assert!(Instant::now() < deadline, "the scrape never asked for fresh values");
                std::thread::yield_now();
            }
            publisher.publish(MetricsSnapshot { ring_overruns: 7, ..Default::default() });
        });
        assert_eq!(board.current().ring_overruns, 7);
        answer.join().unwrap();
    }
}
