//! The Prometheus text endpoint: a snapshot of the appliance's counters and
//! latency percentiles that the pipeline publishes, rendered in the text
//! exposition format (0.0.4) and served at `GET /metrics` by one small
//! thread speaking minimal HTTP/1.1 with bounded requests and timeouts.

use super::ServiceError;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest request head (request line and headers) accepted, in bytes.
pub const MAX_REQUEST_BYTES: usize = 8192;
/// How long one client may take to send its request or read the answer.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the accept loop looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);
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
    fn current(&self) -> Arc<MetricsSnapshot> {
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

/// One answer of the endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub reason: &'static str,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    fn text(status: u16, reason: &'static str, body: &str) -> Self {
        Self { status, reason, content_type: "text/plain; charset=utf-8", body: format!("{body}\n") }
    }

    /// The response as bytes on the wire; `head_only` leaves out the body
    /// (for HEAD) but keeps its Content-Length.
    pub fn to_bytes(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.status,
            self.reason,
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        if !head_only {
            out.extend_from_slice(self.body.as_bytes());
        }
        out
    }
}

/// The parts of a request the endpoint looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLine {
    pub method: String,
    pub path: String,
}

/// Parses the request line of a complete request head; Err is the answer
/// to send (400).
pub fn parse_request_line(head: &[u8]) -> Result<RequestLine, Response> {
    let bad = || Response::text(400, "Bad Request", "bad request");
    let line_end = head.windows(2).position(|w| w == b"\r\n").ok_or_else(bad)?;
    let line = std::str::from_utf8(&head[..line_end]).map_err(|_| bad())?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(bad());
    }
    let path = target.split('?').next().unwrap_or(target);
    Ok(RequestLine { method: method.to_string(), path: path.to_string() })
}

/// The answer to `request`: the metrics for `GET`/`HEAD /metrics`, 404 for
/// anything else.
pub fn respond(request: &RequestLine, board: &MetricsBoard) -> Response {
    match (request.method.as_str(), request.path.as_str()) {
        ("GET" | "HEAD", "/metrics") => {
            Response { status: 200, reason: "OK", content_type: CONTENT_TYPE, body: render(&board.current()) }
        }
        _ => Response::text(404, "Not Found", "not found; metrics are at GET /metrics"),
    }
}

/// Reads a request head (up to the blank line) of at most
/// [`MAX_REQUEST_BYTES`]; Err is the answer to send, if any.
fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, Option<Response>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            return Ok(head);
        }
        if head.len() > MAX_REQUEST_BYTES {
            return Err(Some(Response::text(431, "Request Header Fields Too Large", "request too large")));
        }
        if Instant::now() >= deadline {
            return Err(Some(Response::text(408, "Request Timeout", "request timeout")));
        }
        match stream.read(&mut buf) {
            Ok(0) => return Err(None),
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(Some(Response::text(408, "Request Timeout", "request timeout")));
            }
            Err(_) => return Err(None),
        }
    }
}

/// Serves one connection: one request, one answer, then close.
fn serve(mut stream: TcpStream, board: &MetricsBoard) {
    let _ = stream.set_read_timeout(Some(CLIENT_TIMEOUT));
    let _ = stream.set_write_timeout(Some(CLIENT_TIMEOUT));
    let (response, head_only) = match read_head(&mut stream) {
        Ok(head) => match parse_request_line(&head) {
            Ok(req) => (respond(&req, board), req.method == "HEAD"),
            Err(resp) => (resp, false),
        },
        Err(Some(resp)) => (resp, false),
        Err(None) => return,
    };
    let _ = stream.write_all(&response.to_bytes(head_only));
    let _ = stream.flush();
    if response.status >= 400 {
        discard_rest(&mut stream);
    }
}

/// After an error answer, reads (and drops) what the client still sends, for
/// a bounded time and size, so closing does not reset the connection before
/// the client has read the answer.
fn discard_rest(stream: &mut TcpStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = [0u8; 4096];
    let mut left = 16 * MAX_REQUEST_BYTES;
    while left > 0 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

/// The running endpoint. Dropping it (or [`MetricsServer::stop`]) closes the
/// listener and joins its thread.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr` (port 0 picks a free port) and serves `board` from one
    /// thread. Binding errors are returned so start-up can fail clearly.
    pub fn start(addr: SocketAddr, board: MetricsBoard) -> Result<Self, ServiceError> {
        let listener =
            TcpListener::bind(addr).map_err(|source| ServiceError::MetricsBind { addr, source })?;
        let local = listener.local_addr().map_err(|source| ServiceError::MetricsBind { addr, source })?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("frameloop-metrics".into())
            .spawn(move || accept_loop(&listener, &board, &thread_stop))
            .map_err(|source| ServiceError::Spawn { thread: "metrics", source })?;
        tracing::info!(addr = %local, "metrics endpoint listening at http://{local}/metrics");
        Ok(Self { addr: local, stop, thread: Some(thread) })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and joins the thread (within one client timeout).
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the metrics thread panicked");
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shut_down();
    }
}

fn accept_loop(listener: &TcpListener, board: &MetricsBoard, stop: &AtomicBool) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let timeout = PollTimeout::from(STOP_POLL.as_millis() as u16);
    let mut error_logged = false;
    while !stop.load(Ordering::Acquire) {
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e, "metrics endpoint: poll failed; endpoint stopped");
                return;
            }
        }
        match listener.accept() {
            Ok((stream, _)) => serve(stream, board),
            Err(e) => {
                if !error_logged {
                    tracing::warn!(error = %e, "metrics endpoint: accept failed (further failures not logged)");
                    error_logged = true;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
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

    #[test]
    fn parses_request_lines() {
        let req = parse_request_line(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        assert_eq!(req, RequestLine { method: "GET".into(), path: "/metrics".into() });
        for bad in [
            &b"GET /metrics\r\n\r\n"[..],
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"\xff\xfe HTTP/1.1\r\n\r\n",
            b"junk",
        ] {
            assert_eq!(parse_request_line(bad).unwrap_err().status, 400);
        }
    }

    #[test]
    fn routes_only_get_metrics() {
        let board = MetricsBoard::new();
        board.publish(snapshot());
        let get = respond(&RequestLine { method: "GET".into(), path: "/metrics".into() }, &board);
        assert_eq!((get.status, get.content_type), (200, CONTENT_TYPE));
        assert!(get.body.contains("frameloop_loop_iterations_total 1234"));
        for (m, p) in [("GET", "/"), ("POST", "/metrics"), ("GET", "/metrics/x")] {
            assert_eq!(respond(&RequestLine { method: m.into(), path: p.into() }, &board).status, 404);
        }
        let head = respond(&RequestLine { method: "HEAD".into(), path: "/metrics".into() }, &board);
        let bytes = head.to_bytes(true);
        assert!(bytes.ends_with(b"\r\n\r\n"));
        assert!(String::from_utf8(bytes).unwrap().contains(&format!("Content-Length: {}", head.body.len())));
    }

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
        let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(3 * MAX_REQUEST_BYTES));
        assert!(exchange(addr, huge.as_bytes()).starts_with("HTTP/1.1 431 "));
        // A client that sends nothing is cut off, and the next one is served.
        let idle = TcpStream::connect(addr).unwrap();
        let after = exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(after.starts_with("HTTP/1.1 200 OK"), "{after}");
        drop(idle);
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
