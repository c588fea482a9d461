//! The whole appliance on the host backend over real loopback sockets: the
//! real sender streams frames to it, and every processed result is checked
//! against the chain computed here from the known payload of (stream, frame
//! sequence) with the CPU reference operators; counters, timestamps and both
//! overrun policies are checked on the report.

mod appliance_support;

use appliance_support::{
    Running, check_result, check_sequences, check_timestamps, host_config, one_at_a_time, reference_chain,
    threads::nice_of_thread,
};
use frameloop::app::Report;
use frameloop::config::Config;
use frameloop::metrics::Segment;
use frameloop::ops::{OpSpec, SampleFormat, default_chain};
use frameloop::ring::layout::{SLOT_COMPLETE, SLOT_INCOMPLETE};
use frameloop::ring::{OverrunPolicy, ResultRecord};
use frameloop::sender::{GsoMode, Pattern, SendArgs, SenderStats, run_sender};
use frameloop::service::FrameRingPages;
use std::collections::{BTreeSet, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;

/// What the sender sends in one test.
#[derive(Debug, Clone, Copy)]
struct Traffic {
    frame_bytes: u64,
    packet_bytes: usize,
    streams: u32,
    count: u64,
    rate: f64,
    pattern: Pattern,
}

/// Runs the real sender to `to` on its own thread until it has sent everything.
fn send(to: SocketAddr, t: Traffic) -> SenderStats {
    let args = SendArgs {
        to: to.to_string(),
        rate: t.rate,
        frame_bytes: t.frame_bytes,
        packet_bytes: t.packet_bytes,
        count: Some(t.count),
        duration: None,
        streams: t.streams,
        pattern: t.pattern,
        gso: GsoMode::Auto,
        pacing: Default::default(),
        catch_up: frameloop::sender::DEFAULT_CATCH_UP,
        bind: None,
        link_gbps: None,
    };
    let sender = std::thread::spawn(move || run_sender(&args, &AtomicBool::new(false), |_| {}));
    let stats = sender.join().expect("the sender thread does not panic").expect("the sender runs");
    assert_eq!(stats.frames, t.count, "the sender sent every frame: {stats:?}");
    assert_eq!(stats.errors.refused_packets + stats.errors.abandoned_packets, 0, "{stats:?}");
    stats
}

/// The payload of frame (`stream`, `seq`). The counter pattern is written out
/// here from its definition (word `w` = `w | stream << 32 | (seq & 0xffff) << 48`,
/// little-endian) rather than taken from the sender, and checked against it.
fn payload(pattern: Pattern, stream: u32, seq: u64, len: usize) -> Vec<u8> {
    let from_sender = pattern.frame(stream, seq, len);
    if pattern == Pattern::Counter {
        let own: Vec<u8> = (0..len)
            .map(|i| {
                let word = (i as u64 / 8) | (stream as u64) << 32 | (seq & 0xffff) << 48;
                word.to_le_bytes()[i % 8]
            })
            .collect();
        assert_eq!(own, from_sender, "the sender's counter pattern differs from its definition");
    }
    from_sender
}

/// Every (stream, sequence) the sender sends: frame k goes to stream
/// `k % streams` with sequence `k / streams`.
fn sent_frames(t: Traffic) -> BTreeSet<(u32, u64)> {
    (0..t.count).map(|k| ((k % t.streams as u64) as u32, k / t.streams as u64)).collect()
}

/// Checks one result against the reference chain on its frame's payload.
fn check_against_reference(chain: &[OpSpec], t: Traffic, r: &ResultRecord) {
    assert_eq!(r.slot_flags & (SLOT_COMPLETE | SLOT_INCOMPLETE), SLOT_COMPLETE, "frames arrive whole: {r:?}");
    let bytes = payload(t.pattern, r.stream_id, r.frame_seq, t.frame_bytes as usize);
    check_result(r, &reference_chain(chain, &bytes));
    check_timestamps(r);
}

/// A chain's threshold must find samples in some frames and not everywhere,
/// or its exact check would prove little.
fn assert_detects_discriminate(chain: &[OpSpec], results: &[ResultRecord]) {
    if !chain.iter().any(|op| matches!(op, OpSpec::Threshold { .. })) {
        return;
    }
    assert!(
        results
            .iter()
            .any(|r| r.detect_count > 0 && r.detect_count < r.output_len && r.first_detect_index > 0),
        "the threshold level never splits a frame; pick one that does"
    );
}

/// Streams `t` through an appliance running `chain` with policy `every`,
/// checks every result, and returns the report.
fn stream_and_check(chain: Vec<OpSpec>, t: Traffic) -> Report {
    stream_and_check_with(chain, t, |_| {})
}

/// As [`stream_and_check`], with `adjust` applied to the config last.
fn stream_and_check_with(chain: Vec<OpSpec>, t: Traffic, adjust: impl FnOnce(&mut Config)) -> Report {
    let _serial = one_at_a_time();
    let mut cfg = host_config(chain.clone());
    cfg.ring.slot_bytes = t.frame_bytes as usize;
    // Room for every frame of the run: however long the loop is descheduled
    // on a loaded machine, no frame finds the ring full.
    cfg.ring.slots = (t.count as usize).next_power_of_two();
    adjust(&mut cfg);
    let assembly_thread = cfg.ingest.assembly_thread;
    let app = Running::start(&cfg);
    let sent = send(app.addr(), t);
    app.wait_results(t.count as usize);
    let ring_metrics = app.app.metrics_snapshot().frame_ring_pages;
    let (report, results) = app.stop();
    // The metrics endpoint shows the frame ring's pages as the report does.
    let ring = &report.frame_ring;
    assert_eq!(
        ring_metrics,
        Some(FrameRingPages {
            bytes: ring.bytes as u64,
            huge_page_bytes: ring.huge_page_bytes.expect("host memory says how it is paged") as u64
        })
    );

    assert_eq!(results.len() as u64, t.count, "one result per frame sent");
    check_sequences(&results);
    let seen: BTreeSet<(u32, u64)> = results.iter().map(|r| (r.stream_id, r.frame_seq)).collect();
    assert_eq!(seen, sent_frames(t), "each frame sent was processed exactly once");
    for r in &results {
        assert_eq!(r.skipped_before, 0, "policy every skips nothing");
        check_against_reference(&chain, t, r);
    }
    assert_detects_discriminate(&chain, &results);

    let ingest = &report.ingest;
    assert_eq!(ingest.datagrams, sent.packets, "every datagram arrived: {ingest:?}");
    assert_eq!(ingest.packets_accepted, sent.packets, "{ingest:?}");
    assert_eq!(ingest.datagrams_dropped(), 0, "{ingest:?}");
    assert_eq!(ingest.frames_dropped(), 0, "{ingest:?}");
    assert_eq!(
        (ingest.frames_started, ingest.frames_complete, ingest.frames_incomplete),
        (t.count, t.count, 0)
    );
    // ingest.receive_into_slots = "auto" places datagrams with payloads of
    // 4 KiB and more: in-order traffic lands in place.
    // The assembly thread copies every payload (ingest.assembly_thread).
    let placed = !assembly_thread
        && t.packet_bytes - frameloop::wire::native::HEADER_LEN
            >= frameloop::ingest::config::ONE_COPY_MIN_PAYLOAD;
    assert!(
        !placed || ingest.placed_by_kernel * 2 > ingest.packets_accepted,
        "one-copy receive placed only {} of {} payloads: {ingest:?}",
        ingest.placed_by_kernel,
        ingest.packets_accepted
    );
    if !placed {
        assert_eq!(ingest.placed_by_kernel, 0, "auto placed small datagrams: {ingest:?}");
    }
    assert_eq!(report.loop_stats.frames_processed, t.count);
    assert_eq!(report.loop_stats.frames_skipped, 0);
    let frames = &report.latency.frames;
    assert_eq!((frames.processed, frames.complete, frames.incomplete), (t.count, t.count, 0));
    assert_eq!((frames.skipped, frames.results_lost), (0, 0));
    for segment in Segment::ALL {
        let s = report.latency.segment(segment);
        assert_eq!(s.count, t.count, "{} recorded once per frame", segment.name());
        // One host clock stamps every end, so no span may be negative, except
        // that the result thread reads its clock before it reads the result
        // ring (src/metrics/thread.rs), so a result finished in between looks
        // seen before it was done.
        if segment != Segment::DoneToSeen {
            assert_eq!(s.negative_clamped, 0, "{}: one host clock, no negative span", segment.name());
        }
        assert_eq!(s.unstamped, 0, "{} is stamped on every frame", segment.name());
    }
    report
}

/// `service.result_nice` puts the result thread below the receiver, which
/// stays at nice 0 (so datagrams take the CPU from the result thread's polls).
#[test]
fn the_result_thread_runs_at_service_result_nice_and_the_receiver_at_zero() {
    let _serial = one_at_a_time();
    for nice in [0, 10, 19] {
        let mut cfg = host_config(default_chain());
        cfg.service.result_nice = nice;
        let running = Running::start(&cfg);
        let seen = (nice_of_thread("frameloop-resul"), nice_of_thread("frameloop-rx"));
        running.stop();
        assert_eq!(seen, (Some(i64::from(nice)), Some(0)), "service.result_nice = {nice}");
    }
}

#[test]
fn default_chain_results_match_the_reference_on_every_frame() {
    let traffic = Traffic {
        frame_bytes: 65536,
        packet_bytes: 8972,
        streams: 1,
        count: 60,
        rate: 200.0,
        pattern: Pattern::Random,
    };
    stream_and_check(default_chain(), traffic);
}

/// `ingest.assembly_thread`: frames read on one thread (or several) and
/// assembled on another come through whole and in order, at datagram sizes
/// that one-copy receive would otherwise place and that it copies, over
/// several streams.
#[test]
fn frames_assembled_on_their_own_thread_match_the_reference_on_every_frame() {
    let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    let first_allowed = (0..nix::sched::CpuSet::count()).find(|&c| allowed.is_set(c).unwrap_or(false));
    // Placed by service.assembly_cpu, then left on the CPUs the process may
    // use; read by one thread, then by three (ingest.reading_threads), the
    // second placed by service.reader_cpus.
    for (packet_bytes, assembly_cpu, reading_threads) in
        [(8972, first_allowed, 1), (1472, None, 1), (8972, None, 3), (1472, first_allowed, 3)]
    {
        let traffic = Traffic {
            frame_bytes: 100_003,
            packet_bytes,
            streams: 3,
            count: 45,
            rate: 300.0,
            pattern: Pattern::Random,
        };
        let report = stream_and_check_with(default_chain(), traffic, |cfg| {
            cfg.ingest.assembly_thread = true;
            cfg.ingest.reading_threads = reading_threads;
            cfg.service.assembly_cpu = assembly_cpu;
            cfg.service.reader_cpus = first_allowed.into_iter().collect();
        });
        assert_eq!(report.ingest.placed_by_kernel, 0, "the assembly thread copies: {:?}", report.ingest);
    }
}

/// `ring.huge_pages` puts the frame ring in huge pages where the kernel gives
/// them (and not otherwise), the report says so, and frames come through
/// either way exactly as the reference computes them.
#[test]
fn the_frame_ring_is_in_huge_pages_as_configured_and_frames_come_through_either_way() {
    let traffic = Traffic {
        frame_bytes: 1_000_000,
        packet_bytes: 8972,
        streams: 2,
        count: 12,
        rate: 100.0,
        pattern: Pattern::Random,
    };
    let thp = frameloop::ring::pages::transparent_huge_page_mode();
    for huge in [true, false] {
        let report = stream_and_check_with(default_chain(), traffic, |cfg| cfg.ring.huge_pages = huge);
        let ring = &report.frame_ring;
        assert_eq!(ring.kind, "host");
        assert!(ring.bytes >= 16 * 1_000_000, "{ring:?}");
        let in_huge = ring.huge_page_bytes.expect("host memory says how it is paged");
        match (huge, thp.as_deref()) {
            // Aligned, advised and touched: all of it unless memory is too
            // fragmented to compact, so most of it.
            (true, mode) if frameloop::ring::pages::huge_pages_enabled(mode) => {
                assert!(in_huge * 2 >= ring.bytes, "{ring:?}")
            }
            (_, Some("always")) => {}
            _ => assert_eq!(in_huge, 0, "{ring:?}"),
        }
        let rendered = report.render();
        assert!(rendered.contains("frame ring: "), "{rendered}");
    }
}

#[test]
fn u8_filter2d_stats_over_three_streams_match_the_reference() {
    let chain = vec![
        OpSpec::Unpack { format: SampleFormat::U8, scale: 0.5, offset: -3.0 },
        // Asymmetric, so a row or column mix-up changes the result.
        OpSpec::Filter2d { width: 100, kernel: [0.0, 0.1, 0.0, 0.2, 0.4, -0.3, 0.0, 0.05, 0.15] },
        OpSpec::Stats,
    ];
    // 120 whole rows and 37 samples past the last one, which pass through.
    let traffic = Traffic {
        frame_bytes: 12_037,
        packet_bytes: 1472,
        streams: 3,
        count: 90,
        rate: 300.0,
        pattern: Pattern::Counter,
    };
    stream_and_check(chain, traffic);
}

#[test]
fn u12_fir_threshold_over_two_streams_matches_the_reference() {
    let chain = vec![
        OpSpec::Unpack { format: SampleFormat::U12, scale: 1.0, offset: 0.0 },
        OpSpec::Fir { taps: vec![0.05, 0.1, 0.2, 0.3, 0.2, 0.1, 0.05] },
        OpSpec::Threshold { level: 2300.0 },
    ];
    // 9001 bytes: 3000 whole packed pairs and two stray bytes, which unpack ignores.
    let traffic = Traffic {
        frame_bytes: 9001,
        packet_bytes: 2048,
        streams: 2,
        count: 80,
        rate: 300.0,
        pattern: Pattern::Random,
    };
    let report = stream_and_check(chain, traffic);
    assert_eq!(report.backend.name(), "host");
}

#[test]
fn a_chain_without_reductions_reports_only_its_output_length() {
    let chain = vec![
        OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0, offset: 0.0 },
        OpSpec::Fir { taps: vec![0.25, 0.5, 0.25] },
    ];
    let traffic = Traffic {
        frame_bytes: 20_001,
        packet_bytes: 4096,
        streams: 2,
        count: 40,
        rate: 300.0,
        pattern: Pattern::Counter,
    };
    stream_and_check(chain, traffic);
}

/// Streams `t` into a ring of `slots` slots under `policy`, stops once every
/// datagram is handled and the ring drained, and checks what holds under
/// both policies: each published frame is processed or counted skipped,
/// never processed twice, `skipped_before` counts the ring sequences jumped,
/// and each processed result matches the reference. Returns the report, the
/// results and the number of frames published.
fn stream_into_overrun(
    chain: &[OpSpec],
    t: Traffic,
    slots: usize,
    policy: OverrunPolicy,
) -> (Report, Vec<ResultRecord>, u64) {
    let mut cfg = host_config(chain.to_vec());
    cfg.ring.slots = slots;
    cfg.ring.slot_bytes = t.frame_bytes as usize;
    cfg.ring.policy = policy;
    let app = Running::start(&cfg);
    let sent = send(app.addr(), t);
    let ingest = app.wait_ingest("every datagram handled", |s| {
        s.datagrams == sent.packets
            && s.datagrams_accounted() == s.datagrams
            && s.frames_started == s.frames_complete + s.frames_incomplete
    });
    let published = ingest.frames_complete + ingest.frames_incomplete;
    let (report, results) = app.stop();

    assert_eq!(report.ingest.frames_incomplete, 0, "{:?}", report.ingest);
    assert_eq!(published + report.ingest.ring_full, t.count, "a frame is published or dropped whole");
    check_sequences(&results);
    let unique: HashSet<(u32, u64)> = results.iter().map(|r| (r.stream_id, r.frame_seq)).collect();
    assert_eq!(unique.len(), results.len(), "no frame is processed twice");
    let mut previous = 0;
    for r in &results {
        assert_eq!(r.skipped_before, r.ring_seq - previous - 1, "skipped_before counts the sequences jumped");
        previous = r.ring_seq;
        check_against_reference(chain, t, r);
    }
    assert_eq!(previous, published, "the newest published frame is processed");
    let skipped: u64 = results.iter().map(|r| r.skipped_before).sum();
    assert_eq!(results.len() as u64 + skipped, published, "each published frame is processed or skipped");
    assert_eq!(
        (report.loop_stats.frames_processed, report.latency.frames.processed),
        (results.len() as u64, results.len() as u64)
    );
    assert_eq!((report.loop_stats.frames_skipped, report.latency.frames.skipped), (skipped, skipped));
    (report, results, published)
}

/// A chain far slower per frame than a few milliseconds.
fn slow_chain() -> Vec<OpSpec> {
    vec![
        OpSpec::Unpack { format: SampleFormat::U8, scale: 1.0, offset: 0.0 },
        OpSpec::Fir { taps: vec![1.0 / 63.0; 63] },
        OpSpec::Filter2d { width: 512, kernel: [0.1, 0.1, 0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.1] },
        OpSpec::Stats,
        OpSpec::Threshold { level: 128.0 },
    ]
}

#[test]
fn policy_every_processes_each_published_frame_in_ring_order() {
    let _serial = one_at_a_time();
    // A small ring and a burst faster than the chain: the ring may fill, and
    // then whole frames are dropped at ingest, never skipped by the loop.
    let traffic = Traffic {
        frame_bytes: 32_768,
        packet_bytes: 8972,
        streams: 1,
        count: 60,
        rate: 2000.0,
        pattern: Pattern::Random,
    };
    let (_, results, published) = stream_into_overrun(&slow_chain(), traffic, 4, OverrunPolicy::Every);
    assert_eq!(results.len() as u64, published, "policy every processes every published frame");
    assert!(results.iter().all(|r| r.skipped_before == 0), "policy every skips nothing");
}

#[test]
fn policy_latest_with_a_slow_chain_skips_frames_but_never_repeats_one() {
    let _serial = one_at_a_time();
    let traffic = Traffic {
        frame_bytes: 131_072,
        packet_bytes: 8972,
        streams: 2,
        count: 40,
        rate: 400.0,
        pattern: Pattern::Random,
    };
    let (_, results, published) = stream_into_overrun(&slow_chain(), traffic, 16, OverrunPolicy::Latest);
    let skipped: u64 = results.iter().map(|r| r.skipped_before).sum();
    assert!(skipped > 0, "a chain this slow makes policy latest skip frames ({published} published)");
}

/// `metrics.frame_log`: one CSV line per result, in result order, with the
/// frame's identity and every timestamp on the host clock in the order the
/// frame went through the appliance; the report says how many were written.
#[test]
fn the_frame_log_has_a_line_per_frame_with_its_times_in_order() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("frames.csv");
    let mut cfg = host_config(default_chain());
    cfg.ring.slot_bytes = 8192;
    cfg.ring.slots = 256;
    cfg.metrics.frame_log = Some(path.clone());
    let t = Traffic {
        frame_bytes: 8192,
        packet_bytes: 1472,
        streams: 2,
        count: 120,
        rate: 2000.0,
        pattern: Pattern::Counter,
    };
    let app = Running::start(&cfg);
    send(app.addr(), t);
    app.wait_results(t.count as usize);
    let (report, results) = app.stop();
    let log = report.frame_log.as_ref().expect("the report has the frame log");
    assert_eq!((log.written, log.dropped, log.error.as_deref()), (t.count, 0, None), "{log:?}");
    assert_eq!(log.path, path);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(frameloop::metrics::frame_log::FRAME_LOG_HEADER));
    let rows: Vec<Vec<u64>> =
        lines.map(|l| l.split(',').map(|f| f.parse().expect("every field is a number")).collect()).collect();
    assert_eq!(rows.len(), results.len());
    for (row, r) in rows.iter().zip(&results) {
        assert_eq!(row.len(), 13, "{row:?}");
        assert_eq!(
            (row[0], row[1], row[2], row[3]),
            (r.result_seq, u64::from(r.stream_id), r.frame_seq, r.ring_seq),
            "identity"
        );
        assert_eq!(
            (row[6], row[7], row[8], row[9]),
            (r.sender_ts_ns, r.first_rx_ns, r.last_rx_ns, r.published_ns)
        );
        // One host clock: sent, first and last datagram, published, detected,
        // done; seen is read before the result ring (see the segments test).
        let times = &row[6..12];
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "times out of order: {row:?}");
        assert!(row[12] > 0 && row[12] + 1_000_000 > row[11], "seen: {row:?}");
    }
    assert!(report.render().contains("frame log: 120 lines written to"), "{}", report.render());
}
