//! The NATS sink against a real `nats-server -js`: every result arrives once,
//! in order and decoded exactly, through a broker restart, and what a too
//! small buffer drops is exactly what is missing.

use frameloop::ring::ResultRecord;
use frameloop::sink::encoding::decode_result;
use frameloop::sink::nats::{NatsSink, NatsSinkConfig, SinkSender, SinkSnapshot};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const RATE_PER_S: u64 = 10_000;

/// `Some(path)` of nats-server, or `None` (after saying why) when the test should skip.
fn nats_server() -> Option<&'static str> {
    let found = Command::new("nats-server").arg("--version").output().is_ok_and(|o| o.status.success());
    if found {
        return Some("nats-server");
    }
    if std::env::var("FRAMELOOP_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!(
            "nats-server is missing and FRAMELOOP_REQUIRE_TOOLS=1: install it (apt-get install nats-server)"
        );
    }
    eprintln!("skipping: nats-server is not installed (apt-get install nats-server)");
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Broker {
    child: Child,
}

impl Broker {
    fn start(bin: &str, port: u16, store: &Path) -> Self {
        let child = Command::new(bin)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child }
    }
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(port: u16, buffer: usize) -> NatsSinkConfig {
    NatsSinkConfig {
        url: format!("nats://127.0.0.1:{port}"),
        subject_prefix: "frameloop".into(),
        box_id: Some("box1".into()),
        stream: "FRAMELOOP".into(),
        buffer,
        detections: false,
        ack_timeout_ms: 500,
        retry_max_ms: 1000,
    }
}

fn record(seq: u64) -> ResultRecord {
    ResultRecord {
        result_seq: seq,
        ring_seq: seq,
        frame_seq: seq * 2,
        stream_id: 7,
        done_ns: seq * 1000 + 3,
        sum: seq as f32 * 0.5,
        max: -(seq as f32),
        detect_count: (seq % 5) as u32,
        first_detect_index: -1,
        output_len: 64,
        ..Default::default()
    }
}

/// Feeds results `first..=last` at `RATE_PER_S`, calling `during(seq)` before each; returns the achieved rate.
fn feed(sender: &SinkSender, first: u64, last: u64, mut during: impl FnMut(u64)) -> f64 {
    let start = Instant::now();
    for seq in first..=last {
        during(seq);
        let due = start + Duration::from_nanos((seq - first + 1) * 1_000_000_000 / RATE_PER_S);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        sender.forward(&record(seq));
    }
    (last - first + 1) as f64 / start.elapsed().as_secs_f64()
}

/// Every result in the stream, in stream order.
fn consume(port: u16, expect: usize) -> Vec<ResultRecord> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        use async_nats::jetstream::consumer::{DeliverPolicy, pull};
        let client = async_nats::connect(format!("nats://127.0.0.1:{port}")).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let mut stream = js.get_stream("FRAMELOOP").await.unwrap();
        let stored = stream.info().await.unwrap().state.messages;
        assert_eq!(stored as usize, expect, "messages stored in the stream");
        let consumer = stream
            .create_consumer(pull::Config {
                deliver_policy: DeliverPolicy::All,
                ack_policy: async_nats::jetstream::consumer::AckPolicy::None,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut out = Vec::with_capacity(expect);
        while out.len() < expect {
            let want = (expect - out.len()).min(1000);
            let mut batch =
                consumer.fetch().max_messages(want).expires(Duration::from_secs(2)).messages().await.unwrap();
            let before = out.len();
            while let Some(m) = futures_next(&mut batch).await {
                let m = m.unwrap();
                assert_eq!(m.subject.as_str(), "frameloop.box1.7.result");
                out.push(decode_result(&m.payload).expect("a version-1 result"));
            }
            assert!(out.len() > before, "consumer stopped at {} of {expect}", out.len());
        }
        out
    })
}

async fn futures_next<S: futures_core::Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *s).poll_next(cx)).await
}

fn assert_in_order_exact(got: &[ResultRecord], seqs: impl Iterator<Item = u64>) {
    let want: Vec<ResultRecord> = seqs.map(record).collect();
    assert_eq!(got.len(), want.len(), "results received");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w, "result {} decoded exactly and in order", w.result_seq);
    }
}

#[test]
fn every_result_arrives_once_in_order_at_10k_per_second() {
    let Some(bin) = nats_server() else { return };
    let store = tempfile::tempdir().unwrap();
    let port = free_port();
    let _broker = Broker::start(bin, port, store.path());
    let (sink, sender) = NatsSink::start(&config(port, 100_000)).unwrap();
    let n = 20_000;
    let rate = feed(&sender, 1, n, |_| {});
    let snap = sink.stop(Duration::from_secs(20));
    println!("fed {n} results at {rate:.0}/s; {}", snap.summary_line());
    assert!(rate > 9_000.0, "the hook kept up with 10,000 results/s ({rate:.0}/s)");
    assert_eq!(snap.sink_acked, n);
    assert_eq!(snap.sink_dropped, 0);
    assert_eq!(snap.sink_buffered, 0);
    assert_in_order_exact(&consume(port, n as usize), 1..=n);
}

#[test]
fn a_broker_restart_loses_nothing_within_the_buffer() {
    let Some(bin) = nats_server() else { return };
    let store = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut broker = Some(Broker::start(bin, port, store.path()));
    let (sink, sender) = NatsSink::start(&config(port, 100_000)).unwrap();
    let n = 20_000;
    let mut outage_started = None;
    feed(&sender, 1, n, |seq| {
        if seq == n / 4 {
            broker.take().unwrap().kill();
            outage_started = Some(Instant::now());
        }
        if broker.is_none() && outage_started.is_some_and(|t| t.elapsed() >= Duration::from_secs(1)) {
            broker = Some(Broker::start(bin, port, store.path()));
        }
    });
    let snap = sink.stop(Duration::from_secs(30));
    println!("{}", snap.summary_line());
    assert_eq!(snap.sink_dropped, 0);
    assert_eq!(snap.sink_acked, n);
    assert!(snap.sink_reconnects >= 1, "the reconnect is counted: {snap:?}");
    assert_in_order_exact(&consume(port, n as usize), 1..=n);
}

#[test]
fn a_buffer_smaller_than_the_outage_drops_exactly_what_is_missing() {
    let Some(bin) = nats_server() else { return };
    let store = tempfile::tempdir().unwrap();
    let port = free_port();
    let broker = Broker::start(bin, port, store.path());
    let buffer = 2_000;
    let (sink, sender) = NatsSink::start(&config(port, buffer)).unwrap();
    // Let the stream be created before the outage.
    let deadline = Instant::now() + Duration::from_secs(10);
    sender.forward(&record(1));
    while sink.counters().sink_acked < 1 {
        assert!(Instant::now() < deadline, "the first result was never acknowledged");
        std::thread::sleep(Duration::from_millis(10));
    }
    broker.kill();
    // 10,000 results during a 1 s outage: at most `buffer` are held.
    let n = 10_001;
    feed(&sender, 2, n, |_| {});
    let during: SinkSnapshot = sink.counters();
    assert!(during.sink_dropped > 0, "a full buffer drops: {during:?}");
    let _broker = Broker::start(bin, port, store.path());
    let snap = sink.stop(Duration::from_secs(30));
    println!("{}", snap.summary_line());
    assert_eq!(snap.sink_buffered, 0);
    assert_eq!(snap.sink_acked + snap.sink_dropped, n, "every result is acked or counted as dropped");
    let got = consume(port, snap.sink_acked as usize);
    let missing = n - got.len() as u64;
    assert_eq!(missing, snap.sink_dropped, "the drop count equals what is missing");
    assert!(got.windows(2).all(|w| w[0].result_seq < w[1].result_seq), "in order, no duplicates");
}

#[test]
fn detections_are_published_as_their_own_events() {
    let Some(bin) = nats_server() else { return };
    let store = tempfile::tempdir().unwrap();
    let port = free_port();
    let _broker = Broker::start(bin, port, store.path());
    let (sink, sender) =
        NatsSink::start(&NatsSinkConfig { detections: true, ..config(port, 1_000) }).unwrap();
    let detected =
        |seq: u64| ResultRecord { result_flags: frameloop::ring::layout::RESULT_HAS_DETECT, ..record(seq) };
    for seq in 1..=100 {
        sender.forward(&detected(seq));
    }
    let snap = sink.stop(Duration::from_secs(10));
    assert_eq!((snap.sink_acked, snap.sink_dropped), (100, 0));
    // detect_count is seq % 5: 80 of the 100 results carry a detection.
    assert_eq!(snap.sink_published, 180);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let client = async_nats::connect(format!("nats://127.0.0.1:{port}")).await.unwrap();
        let stream = async_nats::jetstream::new(client).get_stream("FRAMELOOP").await.unwrap();
        let last = stream.get_last_raw_message_by_subject("frameloop.box1.7.detection").await.unwrap();
        let d = frameloop::sink::encoding::decode_detection(&last.payload).unwrap();
        assert_eq!(d, frameloop::sink::encoding::Detection::of(&detected(99)).unwrap());
    });
}

/// The appliance reports the sink's counters in `/metrics` and the stop
/// report: with no broker listening, every result waits in the buffer until
/// it is full, the rest are dropped, and what is still buffered at stop is
/// dropped too. Needs no nats-server.
#[test]
fn the_appliance_reports_the_sink_counters_in_metrics_and_at_stop() {
    use frameloop::app::{Appliance, StartOptions};
    use frameloop::config::{BackendChoice, Config};
    use frameloop::metrics::SinkMetrics;
    use frameloop::sender::{GsoMode, Pattern, SendArgs, run_sender};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, atomic::AtomicBool};

    let mut cfg = Config { backend: BackendChoice::Host, ..Config::default() };
    cfg.ingest.bind = "127.0.0.1:0".into();
    cfg.loop_.data_not_ready_sleep_interval_us = 100;
    cfg.sink.nats = Some(config(free_port(), 4));
    let seen = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&seen);
    let on_result = Box::new(move |_: &ResultRecord| {
        counted.fetch_add(1, Ordering::Relaxed);
    });
    let app = Appliance::start(
        &cfg,
        StartOptions { histogram_log: None, on_result: Some(on_result), ..Default::default() },
    )
    .unwrap();
    let args = SendArgs {
        to: app.local_addr().to_string(),
        rate: 200.0,
        frame_bytes: 8192,
        packet_bytes: 1472,
        count: Some(10),
        duration: None,
        streams: 1,
        pattern: Pattern::Counter,
        gso: GsoMode::Auto,
        pacing: Default::default(),
        catch_up: frameloop::sender::DEFAULT_CATCH_UP,
        bind: None,
        link_gbps: None,
    };
    assert_eq!(run_sender(&args, &AtomicBool::new(false), |_| {}).unwrap().frames, 10);
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.load(Ordering::Relaxed) < 10 {
        assert!(Instant::now() < deadline, "10 results");
        std::thread::sleep(Duration::from_millis(5));
    }
    let live = app.metrics_snapshot().nats_sink.expect("[sink.nats] is configured");
    assert_eq!(live, SinkMetrics { published: 0, acked: 0, dropped: 6, pending: 4, reconnects: 0 });
    let report = app.stop().unwrap();
    let at_stop = report.nats_sink.expect("the report has the sink's counters");
    assert_eq!((at_stop.dropped, at_stop.pending, at_stop.acked), (10, 0, 0), "{at_stop:?}");
    assert!(report.render().contains("nats sink"), "{}", report.render());
}
