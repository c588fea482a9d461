//! The result sink and thread: results drained from a result ring land in
//! the right segment histograms and counters, each passes the callback, and
//! interval logs read back with HdrHistogram's own parser carry every
//! segment's tag and the recorded counts.

use frameloop::metrics::{
    ResultSink, ResultThread, Segment, create_interval_log, interval_log::LOG_FORMAT_VERSION,
};
use frameloop::ring::layout::{RESULT_GPU_CLOCK, SLOT_COMPLETE, SLOT_INCOMPLETE, result_ring_bytes};
use frameloop::ring::{HostMemory, ResultReader, ResultRecord, ResultRing};
use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const T0: u64 = 1_700_000_000_000_000_000;
const SECOND: u64 = 1_000_000_000;

fn result_ring(capacity: usize) -> Arc<ResultRing> {
    ResultRing::new(Box::new(HostMemory::new(result_ring_bytes(capacity).unwrap()).unwrap()), capacity)
        .unwrap()
}

/// A result sent at `sent`, each segment `step` ns long (wire .. done_to_seen).
fn result(frame: u64, sent: u64, step: u64) -> ResultRecord {
    ResultRecord {
        frame_seq: frame,
        slot_flags: if frame.is_multiple_of(4) { SLOT_INCOMPLETE } else { SLOT_COMPLETE },
        sender_ts_ns: sent,
        first_rx_ns: sent + step,
        last_rx_ns: sent + step,
        published_ns: sent + 2 * step,
        detect_ns: sent + 3 * step,
        done_ns: sent + 4 * step,
        skipped_before: u64::from(frame.is_multiple_of(10)),
        ..Default::default()
    }
}

/// Standard base64 (the interval log's histogram encoding).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        other => panic!("not base64: {other}"),
    };
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b'=').map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, &d)| acc | u32::from(d) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// One interval line of a log: tag, start (s after BaseTime), length (s), histogram.
type LoggedInterval = (String, f64, f64, Histogram<u64>);

/// The header entries and every interval of a log.
fn read_log(bytes: &[u8]) -> (Vec<LogEntry<'_>>, Vec<LoggedInterval>) {
    let mut headers = Vec::new();
    let mut intervals = Vec::new();
    for entry in IntervalLogIterator::new(bytes) {
        match entry.expect("the log parses") {
            LogEntry::Interval(i) => {
                let raw = base64_decode(i.encoded_histogram());
                let h: Histogram<u64> = Deserializer::new().deserialize(&mut raw.as_slice()).unwrap();
                let tag = i.tag().expect("every interval is tagged").as_str().to_string();
                intervals.push((tag, i.start_timestamp().as_secs_f64(), i.duration().as_secs_f64(), h));
            }
            other => headers.push(other),
        }
    }
    (headers, intervals)
}

#[test]
fn sink_records_segments_counters_and_calls_back_for_each_result() {
    let ring = result_ring(64);
    let mut producer = ring.writer().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_in_callback = Arc::clone(&seen);
    let mut sink = ResultSink::new(ResultReader::new(Arc::clone(&ring)), 0)
        .with_callback(Box::new(move |r: &ResultRecord| seen_in_callback.lock().unwrap().push(r.frame_seq)));
    for frame in 1..=40 {
        producer.push(&result(frame, T0 + frame * 1000, 2_000));
    }
    // Seen 2 µs after the last one was done.
    let seen_ns = T0 + 40 * 1000 + 4 * 2_000 + 2_000;
    assert_eq!(sink.poll(seen_ns), 40);
    assert_eq!(sink.poll(seen_ns), 0);
    assert_eq!(*seen.lock().unwrap(), (1..=40).collect::<Vec<u64>>());
    let s = sink.summary();
    assert_eq!(
        (s.frames.processed, s.frames.complete, s.frames.incomplete, s.frames.skipped),
        (40, 30, 10, 4)
    );
    for segment in [Segment::Wire, Segment::Assembly, Segment::PublishToDetect, Segment::Compute] {
        let p = s.segment(segment).percentiles;
        assert!((p.p50_us - 2.0).abs() < 0.01 && (p.max_us - 2.0).abs() < 0.01, "{segment:?} {p:?}");
        assert_eq!(s.segment(segment).count, 40);
    }
    // done_to_seen shrinks with the frame: 41 µs for the first down to 2 µs for the last.
    let d = s.segment(Segment::DoneToSeen).percentiles;
    assert!((d.p50_us - 21.0).abs() < 0.1 && (d.max_us - 41.0).abs() < 0.1, "{d:?}");
    let e = s.segment(Segment::EndToEnd).percentiles;
    assert!((e.max_us - 49.0).abs() < 0.1, "{e:?}");
}

#[test]
fn sink_counts_lost_results_and_converts_the_gpu_clock() {
    let ring = result_ring(16);
    let mut producer = ring.writer().unwrap();
    let offset: i64 = 5_000_000_000;
    let mut sink = ResultSink::new(ResultReader::new(Arc::clone(&ring)), offset);
    for frame in 1..=20 {
        let mut r = result(frame, T0, 1_000);
        // The consumer stamped these on a clock 5 s behind the host's.
        r.detect_ns -= offset as u64;
        r.done_ns -= offset as u64;
        r.result_flags = RESULT_GPU_CLOCK;
        producer.push(&r);
    }
    assert_eq!(sink.poll(T0 + 5_000), 16);
    let s = sink.summary();
    assert_eq!(s.frames.results_lost, 4);
    assert_eq!(s.frames.processed, 16);
    let compute = s.segment(Segment::Compute);
    assert!((compute.percentiles.max_us - 1.0).abs() < 0.01, "{compute:?}");
    assert_eq!(s.segment(Segment::PublishToDetect).negative_clamped, 0);
    assert_eq!(s.segment(Segment::DoneToSeen).negative_clamped, 0);
}

#[test]
fn interval_log_reads_back_with_every_tag_and_the_counts_per_interval() {
    let ring = result_ring(256);
    let mut producer = ring.writer().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("latency.hlog");
    let writer = create_interval_log(&path, T0).unwrap();
    let mut sink =
        ResultSink::new(ResultReader::new(Arc::clone(&ring)), 0).with_interval_log(writer, SECOND, T0);
    // Interval 0: 10 results; interval 1: none; interval 2 (closed by finish): 5.
    for frame in 1..=10 {
        producer.push(&result(frame, T0 + frame * 1000, 3_000));
    }
    sink.poll(T0 + SECOND / 2);
    sink.tick(T0 + SECOND / 2);
    let header_only = std::fs::read_to_string(&path).unwrap();
    assert!(!header_only.contains("Tag="), "no interval written before it ends: {header_only}");
    sink.tick(T0 + 2 * SECOND + 1);
    for frame in 11..=15 {
        producer.push(&result(frame, T0 + 2 * SECOND + frame * 1000, 3_000));
    }
    sink.finish(T0 + 2 * SECOND + SECOND / 4);
    assert!(!sink.logging());

    let bytes = std::fs::read(&path).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(text.lines().any(|l| l == format!("#{LOG_FORMAT_VERSION}")), "{text}");
    assert!(text.contains(
        "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
    ));
    let (headers, intervals) = read_log(&bytes);
    assert!(headers.iter().any(|h| matches!(h, LogEntry::StartTime(_))));
    assert!(headers.iter().any(|h| matches!(h, LogEntry::BaseTime(_))));
    assert_eq!(intervals.len(), 3 * Segment::ALL.len());
    for (i, chunk) in intervals.chunks(Segment::ALL.len()).enumerate() {
        let tags: Vec<&str> = chunk.iter().map(|(t, ..)| t.as_str()).collect();
        assert_eq!(tags, Segment::ALL.map(Segment::name));
        let expected = [10, 0, 5][i];
        for (tag, start, length, h) in chunk {
            assert_eq!(h.len(), expected, "interval {i} {tag}");
            assert!((start - i as f64).abs() < 1e-3, "interval {i} starts at {start}");
            assert!((length - [1.0, 1.0, 0.25][i]).abs() < 1e-3, "interval {i} lasts {length}");
            if tag == "wire" && expected > 0 {
                assert_eq!(h.value_at_quantile(0.5), h.highest_equivalent(3_000));
            }
        }
    }
    // The totals keep everything.
    assert_eq!(sink.summary().segment(Segment::Wire).count, 15);
}

#[test]
fn result_thread_drains_live_results_and_writes_the_log_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("latency.hlog");
    let ring = result_ring(1024);
    let mut producer = ring.writer().unwrap();
    let now = frameloop::clock::realtime_ns();
    let log = create_interval_log(&path, now).unwrap();
    let checked = Arc::new(Mutex::new(0u64));
    let checked_in_callback = Arc::clone(&checked);
    let sink = ResultSink::new(ResultReader::new(Arc::clone(&ring)), 0)
        .with_interval_log(log, SECOND / 10, now)
        .with_callback(Box::new(move |r: &ResultRecord| {
            assert!(r.done_ns >= r.detect_ns);
            *checked_in_callback.lock().unwrap() += 1;
        }));
    let thread = ResultThread::spawn(sink, Duration::from_micros(100)).unwrap();
    for frame in 1..=300 {
        let sent = frameloop::clock::realtime_ns();
        producer.push(&result(frame, sent, 1_000));
        if frame % 50 == 0 {
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while thread.snapshot().frames.processed < 300 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(thread.snapshot().frames.processed, 300);
    let summary = thread.stop().unwrap();
    assert_eq!(*checked.lock().unwrap(), 300);
    assert_eq!(summary.segment(Segment::EndToEnd).count, 300);
    assert!(summary.render_table().contains("end_to_end"));
    let bytes = std::fs::read(&path).unwrap();
    let (_, intervals) = read_log(&bytes);
    let wire_total: u64 = intervals.iter().filter(|(t, ..)| t == "wire").map(|(.., h)| h.len()).sum();
    assert_eq!(wire_total, 300);
    assert!(intervals.iter().filter(|(t, ..)| t == "wire").count() >= 2, "several intervals over ~180 ms");
}

/// A result thread over a 32-slot frame ring whose head it watches and
/// sleeps on, as with the CUDA backend (its poll interval: 30 s).
fn watching_result_thread(
    budget: Duration,
) -> (ResultThread, frameloop::ring::RingWriter, frameloop::ring::ResultWriter) {
    use frameloop::metrics::ResultSpin;
    use frameloop::ring::layout::ring_bytes;
    use frameloop::ring::{FrameRing, OverrunPolicy};
    let results = result_ring(64);
    let frames = FrameRing::new(
        Box::new(HostMemory::new(ring_bytes(32, 64).unwrap()).unwrap()),
        32,
        64,
        OverrunPolicy::Every,
    )
    .unwrap();
    let (writer, producer) = (frames.writer().unwrap(), results.writer().unwrap());
    let (head_ring, wait_ring) = (Arc::clone(&frames), Arc::clone(&frames));
    let spin = ResultSpin {
        budget,
        frame_head: Some(Box::new(move || head_ring.head())),
        frame_wait: Some(Box::new(move |seen, timeout| wait_ring.wait_published_past(seen, timeout))),
    };
    let sink = ResultSink::new(ResultReader::new(results), 0);
    let thread =
        ResultThread::spawn_placed(sink, Duration::from_secs(30), Some(spin), None, || Ok(())).unwrap();
    (thread, writer, producer)
}

/// Publishes the next slot of `writer`'s frame ring as frame `frame_seq`;
/// returns its ring sequence.
fn publish_frame(writer: &mut frameloop::ring::RingWriter, frame_seq: u64) -> u64 {
    let seq = writer.reserve().unwrap();
    writer.publish(seq, &frameloop::ring::SlotHeader { payload_len: 8, frame_seq, ..Default::default() });
    seq
}

/// Where a device writes the results (nothing wakes the result thread),
/// the thread sleeps on the frame ring between frames: a frame's publication
/// wakes it to spin for the result, instead of the result waiting for the
/// thread's next poll (30 s here); after the spin budget it sleeps again.
#[test]
fn a_frame_publication_wakes_the_result_thread_to_spin_for_its_result() {
    let (thread, mut writer, mut producer) = watching_result_thread(Duration::from_millis(20));
    let progress = thread.progress();
    let iterations = || progress.iterations.load(std::sync::atomic::Ordering::Relaxed);
    for round in 1..=5u64 {
        // Past the spin budget: asleep on the frame ring, so its loop stands still.
        std::thread::sleep(Duration::from_millis(60));
        let asleep = iterations();
        std::thread::sleep(Duration::from_millis(20));
        assert!(iterations() - asleep <= 2, "round {round}: the thread sleeps between frames");
        publish_frame(&mut writer, round);
        // Woken by the publication, it spins while the result is on its way.
        let woke = std::time::Instant::now();
        while iterations() < asleep + 100 {
            assert!(woke.elapsed() < Duration::from_secs(5), "round {round}: not woken by the frame");
            std::hint::spin_loop();
        }
        // The result as a device writes it: the result ring's writer wakes only its own sleepers.
        producer.push(&result(round, frameloop::clock::realtime_ns(), 1_000));
        let seen = std::time::Instant::now();
        while thread.snapshot().frames.processed < round {
            assert!(seen.elapsed() < Duration::from_secs(5), "round {round}: result not seen while spinning");
            std::hint::spin_loop();
        }
    }
    thread.stop().unwrap();
}

/// A summary walks every histogram (a fraction of a millisecond): asked for
/// while a frame's result is due, the result thread computes it after
/// recording that result, so the asking never delays the result, and the
/// summary already counts it.
#[test]
fn a_summary_asked_for_while_a_result_is_due_follows_that_result() {
    let (thread, mut writer, mut producer) = watching_result_thread(Duration::from_secs(30));
    let thread = Arc::new(thread);
    let seq = publish_frame(&mut writer, 1);
    let asking = Arc::clone(&thread);
    let asked = std::thread::spawn(move || asking.snapshot());
    // The request is open while the result is due (the thread spins for it).
    std::thread::sleep(Duration::from_millis(20));
    assert!(!asked.is_finished(), "answered while the result was due");
    producer.push(&ResultRecord { ring_seq: seq, ..result(1, frameloop::clock::realtime_ns(), 1_000) });
    let summary = asked.join().unwrap();
    assert_eq!(summary.frames.processed, 1, "the summary follows the due result");
    Arc::into_inner(thread).unwrap().stop().unwrap();
}

/// Between frames the thread sleeps (here for up to 30 s); a request for a
/// summary wakes it to compute one, counting everything recorded so far.
#[test]
fn asking_for_a_summary_wakes_the_sleeping_result_thread() {
    let (thread, mut writer, mut producer) = watching_result_thread(Duration::from_millis(5));
    let progress = thread.progress();
    let iterations = || progress.iterations.load(std::sync::atomic::Ordering::Relaxed);
    for round in 1..=3u64 {
        let seq = publish_frame(&mut writer, round);
        producer
            .push(&ResultRecord { ring_seq: seq, ..result(round, frameloop::clock::realtime_ns(), 1_000) });
        // Past the spin budget the thread sleeps on the frame ring.
        std::thread::sleep(Duration::from_millis(60));
        let asleep = iterations();
        std::thread::sleep(Duration::from_millis(20));
        assert!(iterations() - asleep <= 2, "round {round}: the thread sleeps between frames");
        assert_eq!(thread.snapshot().frames.processed, round);
        assert!(iterations() > asleep, "round {round}: the request woke the thread to answer it");
    }
    thread.stop().unwrap();
}

/// A result thread that does not answer (here held in its loop hook, as a
/// hung callback would hold it) does not hang the asking thread: after a
/// short wait the caller computes the summary itself.
#[test]
fn a_result_thread_that_does_not_answer_leaves_the_summary_to_the_caller() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let ring = result_ring(64);
    let mut producer = ring.writer().unwrap();
    let (held, release) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (held_in_hook, release_in_hook) = (Arc::clone(&held), Arc::clone(&release));
    let hook: frameloop::metrics::LoopHook = Box::new(move |_stop: &AtomicBool| {
        held_in_hook.store(true, Ordering::Release);
        while !release_in_hook.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let sink = ResultSink::new(ResultReader::new(Arc::clone(&ring)), 0);
    producer.push(&result(1, frameloop::clock::realtime_ns(), 1_000));
    let thread =
        ResultThread::spawn_placed(sink, Duration::from_millis(1), None, Some(hook), || Ok(())).unwrap();
    while !held.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // The thread drained the result before its hook held it.
    let asked = std::time::Instant::now();
    let processed = thread.snapshot().frames.processed;
    let waited = asked.elapsed();
    // Let the thread go before asserting, so that a failure does not hang the test.
    release.store(true, Ordering::Release);
    assert_eq!(processed, 1);
    assert!(waited >= Duration::from_millis(50), "answered by a thread held in its hook? ({waited:?})");
    assert!(waited < Duration::from_secs(10), "the caller waited {waited:?}");
    assert_eq!(thread.stop().unwrap().frames.processed, 1);
}

#[test]
fn creating_a_log_in_a_missing_directory_names_the_path() {
    let err = create_interval_log(std::path::Path::new("/no/such/dir/latency.hlog"), T0).err().unwrap();
    assert!(err.to_string().contains("/no/such/dir/latency.hlog"), "{err}");
}
