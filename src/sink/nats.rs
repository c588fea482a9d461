//! The NATS JetStream result sink: a never-blocking hook queues each result,
//! and a dedicated thread publishes them in order with JetStream
//! acknowledgement, holding up to `buffer` results through an uplink outage.

use super::encoding::{Detection, encode_detection, encode_result};
use crate::config_problem::{ConfigProblem, check_range};
use crate::ring::ResultRecord;
use async_nats::jetstream;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Results published per round before their acknowledgements are awaited.
const PUBLISH_WINDOW: usize = 512;
/// First wait before a failed window is published again; it doubles up to
/// `sink.nats.retry_max_ms`.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// How long a dropped sink keeps publishing what it holds before counting
/// the rest as dropped: well inside the appliance's stop budget
/// (`service.shutdown_timeout_ms`, 5 s by default), so that a broker that is
/// down at stop costs the buffer, counted, not a stop that overruns it.
const STOP_FLUSH: Duration = Duration::from_secs(1);

/// The `[sink.nats]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsSinkConfig {
    /// Server to publish to, e.g. `nats://127.0.0.1:4222` (usually the box's leaf node).
    pub url: String,
    #[serde(default = "default_subject_prefix")]
    pub subject_prefix: String,
    /// This box in subjects and message ids; the hostname when absent.
    #[serde(default)]
    pub box_id: Option<String>,
    /// JetStream stream, created with subjects `<subject_prefix>.>` when missing.
    #[serde(default = "default_stream")]
    pub stream: String,
    /// Results held while the broker is unreachable; newer ones are dropped and counted.
    #[serde(default = "default_buffer")]
    pub buffer: usize,
    /// Also publish each threshold detection as its own event.
    #[serde(default)]
    pub detections: bool,
    #[serde(default = "default_ack_timeout_ms")]
    pub ack_timeout_ms: u64,
    /// Longest wait between two attempts to reach the broker: between two
    /// reconnects of the client (it waits 0, 2, 4, 8 ... ms, doubling up to
    /// this) and between two publishes of a window whose acknowledgement
    /// failed (50 ms doubling up to this). After an outage publishing
    /// resumes within about twice this once the broker answers again.
    #[serde(default = "default_retry_max_ms")]
    pub retry_max_ms: u64,
}

fn default_subject_prefix() -> String {
    "frameloop".into()
}
fn default_stream() -> String {
    "FRAMELOOP".into()
}
fn default_buffer() -> usize {
    100_000
}
fn default_ack_timeout_ms() -> u64 {
    2_000
}
fn default_retry_max_ms() -> u64 {
    1_000
}

/// A subject token: non-empty, no dots, wildcards or whitespace.
fn is_token(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(|c| c == '.' || c == '*' || c == '>' || c.is_whitespace())
}

impl NatsSinkConfig {
    /// Records every problem of this section, naming its `sink.nats.*` key.
    pub fn validate(&self, problems: &mut Vec<ConfigProblem>) {
        if !(self.url.starts_with("nats://") || self.url.starts_with("tls://")) || self.url.len() <= 7 {
            problems.push(ConfigProblem::new(
                "sink.nats.url",
                format!("{:?} is not a NATS URL; use e.g. \"nats://127.0.0.1:4222\"", self.url),
            ));
        }
        let prefix_ok = self.subject_prefix.split('.').all(is_token);
        if !prefix_ok {
            problems.push(ConfigProblem::new(
                "sink.nats.subject_prefix",
                format!(
                    "{:?} is not a subject prefix; use dot-separated tokens without spaces or wildcards, e.g. \"frameloop\"",
                    self.subject_prefix
                ),
            ));
        }
        if let Some(id) = &self.box_id
            && !is_token(id)
        {
            problems.push(ConfigProblem::new(
                "sink.nats.box_id",
                format!(
                    "{id:?} is not one subject token; use letters, digits, '-' or '_' (no dots or spaces)"
                ),
            ));
        }
        if !is_token(&self.stream) || self.stream.contains('/') || self.stream.contains('\\') {
            problems.push(ConfigProblem::new(
                "sink.nats.stream",
                format!("{:?} is not a JetStream stream name; use e.g. \"FRAMELOOP\"", self.stream),
            ));
        }
        check_range(problems, "sink.nats.buffer", self.buffer, 1, 100_000_000);
        check_range(problems, "sink.nats.ack_timeout_ms", self.ack_timeout_ms, 10, 600_000);
        check_range(problems, "sink.nats.retry_max_ms", self.retry_max_ms, 10, 60_000);
    }

    /// `box_id`, or the hostname when it is absent.
    pub fn resolved_box_id(&self) -> String {
        if let Some(id) = &self.box_id {
            return id.clone();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host = host.trim();
        // A hostname with dots (an FQDN) keeps its first label: one subject token.
        let first = host.split('.').next().unwrap_or("").to_string();
        if is_token(&first) { first } else { "unnamed".into() }
    }
}

/// Counters of the sink; snapshot them with [`NatsSink::counters`].
#[derive(Debug, Default)]
struct SinkCounters {
    published: AtomicU64,
    acked: AtomicU64,
    dropped: AtomicU64,
    reconnects: AtomicU64,
}

/// The sink's counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkSnapshot {
    /// Messages handed to the broker, retries included.
    pub sink_published: u64,
    /// Results the stream acknowledged (each once).
    pub sink_acked: u64,
    /// Results dropped: the queue was full, or still unacknowledged at stop.
    pub sink_dropped: u64,
    /// Results queued and not yet acknowledged.
    pub sink_buffered: u64,
    /// Times the connection to the broker was re-established.
    pub sink_reconnects: u64,
}

impl SinkSnapshot {
    /// One line for the log at stop.
    pub fn summary_line(&self) -> String {
        format!(
            "nats sink: {} acked, {} published, {} dropped, {} buffered, {} reconnects",
            self.sink_acked, self.sink_published, self.sink_dropped, self.sink_buffered, self.sink_reconnects
        )
    }
}

impl From<SinkSnapshot> for crate::metrics::SinkMetrics {
    fn from(s: SinkSnapshot) -> Self {
        Self {
            published: s.sink_published,
            acked: s.sink_acked,
            dropped: s.sink_dropped,
            pending: s.sink_buffered,
            reconnects: s.sink_reconnects,
        }
    }
}

/// State shared between the hook and the sink thread.
struct Shared {
    /// Results not yet acknowledged, oldest first; never longer than `capacity`.
    queue: Mutex<VecDeque<ResultRecord>>,
    capacity: usize,
    wake: tokio::sync::Notify,
    stopping: AtomicBool,
    counters: SinkCounters,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<ResultRecord>> {
        // A panic while holding the lock leaves a queue of plain records: still usable.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The hook the result thread forwards each record to; never blocks on the network.
#[derive(Clone)]
pub struct SinkSender {
    shared: Arc<Shared>,
}

impl SinkSender {
    /// Queues `r` for publishing; when `buffer` results are already held, drops `r` and counts it.
    pub fn forward(&self, r: &ResultRecord) {
        let queued = {
            let mut q = self.shared.lock();
            if q.len() < self.shared.capacity {
                q.push_back(*r);
                true
            } else {
                false
            }
        };
        if queued {
            self.shared.wake.notify_one();
        } else {
            self.shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The sink's counters now.
    pub fn counters(&self) -> SinkSnapshot {
        snapshot(&self.shared)
    }
}

/// Errors starting the sink.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// The sink's async runtime could not start; check the process's thread and memory limits.
    #[error(
        "cannot start the tokio runtime of the [sink.nats] thread; check the process's thread and memory limits"
    )]
    Runtime(#[source] std::io::Error),
    /// The sink's thread could not start; check the process's thread limit (`ulimit -u`).
    #[error("cannot spawn the [sink.nats] thread; check the process's thread limit (ulimit -u)")]
    Spawn(#[source] std::io::Error),
}

/// A running NATS sink: its thread, and the way to stop it.
pub struct NatsSink {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Subjects and message ids of one box's results.
struct Naming {
    prefix: String,
    box_id: String,
}

impl Naming {
    fn subject(&self, stream_id: u32, kind: &str) -> String {
        format!("{}.{}.{stream_id}.{kind}", self.prefix, self.box_id)
    }
    fn msg_id(&self, stream_id: u32, result_seq: u64, kind: &str) -> String {
        format!("{}/{stream_id}/{result_seq}/{kind}", self.box_id)
    }
}

impl NatsSink {
    /// Starts the sink thread for `cfg` (which must have passed `validate`);
    /// the thread connects in the background and retries until stopped.
    pub fn start(cfg: &NatsSinkConfig) -> Result<(Self, SinkSender), SinkError> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::with_capacity(cfg.buffer.min(1 << 16))),
            capacity: cfg.buffer,
            wake: tokio::sync::Notify::new(),
            stopping: AtomicBool::new(false),
            counters: SinkCounters::default(),
        });
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(SinkError::Runtime)?;
        let worker = Worker {
            shared: Arc::clone(&shared),
            naming: Naming { prefix: cfg.subject_prefix.clone(), box_id: cfg.resolved_box_id() },
            url: cfg.url.clone(),
            stream: cfg.stream.clone(),
            detections: cfg.detections,
            ack_timeout: Duration::from_millis(cfg.ack_timeout_ms),
            retry_max: Duration::from_millis(cfg.retry_max_ms),
        };
        let thread = std::thread::Builder::new()
            .name("nats-sink".into())
            .spawn(move || {
                runtime.block_on(async move {
                    // Stop means stop: a connect or ack wait in progress is abandoned.
                    let stopping = Arc::clone(&worker.shared);
                    tokio::select! {
                        () = worker.run() => {}
                        () = async {
                            while !stopping.stopping.load(Ordering::Acquire) {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        } => {}
                    }
                })
            })
            .map_err(SinkError::Spawn)?;
        let sender = SinkSender { shared: Arc::clone(&shared) };
        Ok((Self { shared, thread: Some(thread) }, sender))
    }

    /// The counters now.
    pub fn counters(&self) -> SinkSnapshot {
        snapshot(&self.shared)
    }

    /// Publishes what is queued (for at most `flush`), counts what is left
    /// as dropped, stops the thread, logs and returns the summary.
    pub fn stop(mut self, flush: Duration) -> SinkSnapshot {
        self.finish(flush)
    }

    fn finish(&mut self, flush: Duration) -> SinkSnapshot {
        let Some(thread) = self.thread.take() else { return snapshot(&self.shared) };
        let deadline = Instant::now() + flush;
        while !self.shared.lock().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.shared.stopping.store(true, Ordering::Release);
        self.shared.wake.notify_one();
        if thread.join().is_err() {
            tracing::error!("the nats sink thread panicked");
        }
        let left = {
            let mut q = self.shared.lock();
            let n = q.len() as u64;
            q.clear();
            n
        };
        self.shared.counters.dropped.fetch_add(left, Ordering::Relaxed);
        let snap = snapshot(&self.shared);
        tracing::info!("{}", snap.summary_line());
        snap
    }
}

impl Drop for NatsSink {
    /// A sink dropped without `stop` (with the result thread) still flushes and reports.
    fn drop(&mut self) {
        self.finish(STOP_FLUSH);
    }
}

/// Starts the sink for `cfg` and returns the result callback that forwards
/// each record to it and then calls `then`; the sink flushes, stops and
/// logs its summary when the callback is dropped. The sender reads the counters.
pub fn forward_results(
    cfg: &NatsSinkConfig,
    mut then: Option<crate::metrics::ResultCallback>,
) -> Result<(crate::metrics::ResultCallback, SinkSender), SinkError> {
    let (sink, sender) = NatsSink::start(cfg)?;
    let hook = sender.clone();
    let callback = Box::new(move |r: &ResultRecord| {
        let _owned = &sink;
        hook.forward(r);
        if let Some(next) = &mut then {
            next(r);
        }
    });
    Ok((callback, sender))
}

fn snapshot(shared: &Shared) -> SinkSnapshot {
    let c = &shared.counters;
    SinkSnapshot {
        sink_published: c.published.load(Ordering::Relaxed),
        sink_acked: c.acked.load(Ordering::Relaxed),
        sink_dropped: c.dropped.load(Ordering::Relaxed),
        sink_buffered: shared.lock().len() as u64,
        sink_reconnects: c.reconnects.load(Ordering::Relaxed),
    }
}

/// The sink thread's state.
struct Worker {
    shared: Arc<Shared>,
    naming: Naming,
    url: String,
    stream: String,
    detections: bool,
    ack_timeout: Duration,
    /// `sink.nats.retry_max_ms`.
    retry_max: Duration,
}

/// The client's wait before reconnect attempt `attempts`: none for the
/// first, then 2^(attempts - 1) ms, at most `max` (the client's own rule,
/// which stops at 4 s, with the cap of `sink.nats.retry_max_ms`).
fn reconnect_delay(max: Duration) -> impl Fn(usize) -> Duration + Send + Sync + 'static {
    move |attempts| {
        if attempts <= 1 {
            return Duration::ZERO;
        }
        let exp = u32::try_from(attempts - 1).unwrap_or(u32::MAX);
        Duration::from_millis(2u64.saturating_pow(exp)).min(max)
    }
}

impl Worker {
    async fn run(self) {
        let shared = Arc::clone(&self.shared);
        let connected_once = Arc::new(AtomicBool::new(false));
        let options = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .max_reconnects(None)
            .reconnect_delay_callback(reconnect_delay(self.retry_max))
            .event_callback(move |event| {
                let shared = Arc::clone(&shared);
                let connected_once = Arc::clone(&connected_once);
                async move {
                    match event {
                        async_nats::Event::Connected => {
                            if connected_once.swap(true, Ordering::Relaxed) {
                                shared.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        other => tracing::warn!("nats sink: {other}"),
                    }
                }
            });
        let client = match options.connect(&self.url).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!("nats sink: cannot connect to sink.nats.url {}: {e}", self.url);
                return;
            }
        };
        let mut js = jetstream::new(client);
        js.set_timeout(self.ack_timeout);
        let mut backoff = FIRST_BACKOFF;
        // Create the stream (subjects `<prefix>.>`) when missing, retrying until it answers.
        loop {
            if self.shared.stopping.load(Ordering::Acquire) {
                return;
            }
            let config = jetstream::stream::Config {
                name: self.stream.clone(),
                subjects: vec![format!("{}.>", self.naming.prefix)],
                ..Default::default()
            };
            match js.get_or_create_stream(config).await {
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(
                        "nats sink: stream sink.nats.stream {} not ready: {e}; retrying",
                        self.stream
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.retry_max);
                }
            }
        }
        backoff = FIRST_BACKOFF;
        let mut window = Vec::with_capacity(PUBLISH_WINDOW);
        loop {
            window.clear();
            window.extend(self.shared.lock().iter().take(PUBLISH_WINDOW).copied());
            if window.is_empty() {
                if self.shared.stopping.load(Ordering::Acquire) {
                    return;
                }
                let notified = self.shared.wake.notified();
                if self.shared.lock().is_empty() && !self.shared.stopping.load(Ordering::Acquire) {
                    let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
                }
                continue;
            }
            let acked = self.publish_window(&js, &window).await;
            if acked > 0 {
                self.shared.lock().drain(..acked);
                self.shared.counters.acked.fetch_add(acked as u64, Ordering::Relaxed);
            }
            if acked < window.len() {
                if self.shared.stopping.load(Ordering::Acquire) {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(self.retry_max);
            } else {
                backoff = FIRST_BACKOFF;
            }
        }
    }

    /// Publishes `window` in order and returns how many leading results were
    /// acknowledged (with their detection, when enabled).
    async fn publish_window(&self, js: &jetstream::Context, window: &[ResultRecord]) -> usize {
        let mut pending = Vec::with_capacity(window.len() * 2);
        for r in window {
            let mut msgs = vec![(
                self.naming.subject(r.stream_id, "result"),
                self.naming.msg_id(r.stream_id, r.result_seq, "result"),
                bytes::Bytes::copy_from_slice(&encode_result(r)),
            )];
            if self.detections
                && let Some(d) = Detection::of(r)
            {
                msgs.push((
                    self.naming.subject(r.stream_id, "detection"),
                    self.naming.msg_id(r.stream_id, r.result_seq, "detection"),
                    bytes::Bytes::copy_from_slice(&encode_detection(&d)),
                ));
            }
            let mut acks = Vec::with_capacity(msgs.len());
            for (subject, id, payload) in msgs {
                let publish = jetstream::context::Publish::build().payload(payload).message_id(id);
                match js.send_publish(subject, publish).await {
                    Ok(ack) => {
                        self.shared.counters.published.fetch_add(1, Ordering::Relaxed);
                        acks.push(ack);
                    }
                    Err(_) => break,
                }
            }
            let complete = acks.len() == if self.detections && Detection::of(r).is_some() { 2 } else { 1 };
            pending.push((complete, acks));
            if !complete {
                break;
            }
        }
        let mut acked = 0;
        for (complete, acks) in pending {
            let mut all = complete;
            for ack in acks {
                let ok = matches!(tokio::time::timeout(self.ack_timeout, ack.into_future()).await, Ok(Ok(_)));
                all &= ok;
            }
            if !all {
                break;
            }
            acked += 1;
        }
        acked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnects_wait_no_longer_than_the_retry_cap() {
        let delay = reconnect_delay(Duration::from_millis(300));
        let waits: Vec<u128> = (1..=12).map(|a| delay(a).as_millis()).collect();
        assert_eq!(waits, [0, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(delay(usize::MAX), Duration::from_millis(300));
    }

    #[test]
    fn the_hook_drops_and_counts_when_the_buffer_is_full() {
        // An unreachable broker: nothing is acknowledged, the queue fills.
        let cfg = NatsSinkConfig {
            url: "nats://127.0.0.1:1".into(),
            subject_prefix: "frameloop".into(),
            box_id: Some("t".into()),
            stream: "FRAMELOOP".into(),
            buffer: 3,
            detections: false,
            ack_timeout_ms: 100,
            retry_max_ms: 1000,
        };
        let (sink, sender) = NatsSink::start(&cfg).unwrap();
        for seq in 1..=5 {
            sender.forward(&ResultRecord { result_seq: seq, ..Default::default() });
        }
        let now = sender.counters();
        assert_eq!((now.sink_buffered, now.sink_dropped, now.sink_acked), (3, 2, 0));
        let end = sink.stop(Duration::ZERO);
        assert_eq!((end.sink_buffered, end.sink_dropped), (0, 5), "what is held at stop is counted");
    }
}
