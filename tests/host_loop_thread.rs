//! `HostLoop` on its own thread with the real clock: frames published by the
//! test are processed and their results match the CPU chain; the loop times
//! out by itself, tears down promptly from a long sleep, relaunches, and
//! answers host-driven data-ready.

#[path = "appliance_support/threads.rs"]
mod threads;

use frameloop::backend::{BackendError, ResidentLoop};
use frameloop::config::LoopConfig;
use frameloop::host::{HostError, HostLoop, Trigger};
use frameloop::ops::{CpuChain, OpSpec, default_chain};
use frameloop::ring::layout::{SLOT_COMPLETE, result_ring_bytes, ring_bytes};
use frameloop::ring::{
    FrameRing, HostMemory, OverrunPolicy, ResultReader, ResultRecord, ResultRing, SlotHeader,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CAPACITY: usize = 4096;

fn rings(slots: usize) -> (Arc<FrameRing>, Arc<ResultRing>) {
    let frames = FrameRing::new(
        Box::new(HostMemory::new(ring_bytes(slots, CAPACITY).unwrap()).unwrap()),
        slots,
        CAPACITY,
        OverrunPolicy::Every,
    )
    .unwrap();
    let results =
        ResultRing::new(Box::new(HostMemory::new(result_ring_bytes(1024).unwrap()).unwrap()), 1024).unwrap();
    (frames, results)
}

fn frame_bytes(frame: u64) -> Vec<u8> {
    (0..CAPACITY / 2)
        .map(|i| ((i as u64 * 31 + frame * 7919) % 65536) as u16)
        .flat_map(u16::to_le_bytes)
        .collect()
}

/// Drains results until `count` arrived or `limit` passed.
fn collect(reader: &mut ResultReader, count: usize, limit: Duration) -> Vec<ResultRecord> {
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    while out.len() < count && Instant::now() < deadline {
        if reader.drain(&mut out) == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    out
}

#[test]
fn processes_published_frames_end_to_end_and_matches_the_chain() {
    let (frames, results) = rings(8);
    let mut writer = frames.writer().unwrap();
    let mut reader = ResultReader::new(Arc::clone(&results));
    let config = LoopConfig { poll_budget_us: 200, poll_interval_ns: 1000, ..LoopConfig::default() };
    let mut host = HostLoop::new(Arc::clone(&frames), results, default_chain(), CAPACITY, config).unwrap();
    assert_eq!(host.backend_name(), "host");
    host.launch().unwrap();
    assert!(host.is_launched());
    assert!(matches!(host.launch(), Err(BackendError::AlreadyLaunched)));

    const N: u64 = 200;
    let mut received = Vec::new();
    for frame in 1..=N {
        let seq = loop {
            match writer.reserve() {
                Ok(seq) => break seq,
                // Ring full: the loop has not finished an older slot yet.
                Err(_) => received.extend(collect(&mut reader, 1, Duration::from_millis(1))),
            }
        };
        writer.payload_mut(seq).copy_from_slice(&frame_bytes(frame));
        let now = frameloop::clock::realtime_ns();
        writer.publish(
            seq,
            &SlotHeader {
                frame_seq: frame,
                flags: SLOT_COMPLETE,
                payload_len: CAPACITY as u32,
                sender_ts_ns: now - 3000,
                first_rx_ns: now - 2000,
                last_rx_ns: now - 1000,
                published_ns: now,
                ..Default::default()
            },
        );
    }
    received.extend(collect(
        &mut reader,
        (N as usize).saturating_sub(received.len()),
        Duration::from_secs(10),
    ));
    assert_eq!(received.len() as u64, N);
    assert!(host.result_ready());
    let mut reference = CpuChain::new(&default_chain(), CAPACITY).unwrap();
    for (i, r) in received.iter().enumerate() {
        let frame = i as u64 + 1;
        assert_eq!((r.frame_seq, r.ring_seq), (frame, frame));
        let out = reference.run(&frame_bytes(frame));
        let stats = out.stats.unwrap();
        assert_eq!((r.sum, r.min, r.max, r.mean), (stats.sum, stats.min, stats.max, stats.mean));
        assert_eq!((r.detect_count, r.first_detect_index), out.detect.unwrap());
        assert!(r.published_ns <= r.detect_ns && r.detect_ns <= r.done_ns, "{r:?}");
    }
    let stats = host.tear_down().unwrap();
    assert_eq!(stats.frames_processed, N);
    assert!(stats.iterations >= N);
    assert!(!host.is_launched());
    assert!(matches!(host.tear_down(), Err(BackendError::NotLaunched)));
}

#[test]
fn times_out_by_itself_and_relaunches_after_tear_down() {
    let (frames, results) = rings(4);
    let config = LoopConfig { poll_budget_us: 100, timeout_ms: 30, ..LoopConfig::default() };
    let mut host = HostLoop::new(frames, results, default_chain(), CAPACITY, config).unwrap();
    host.launch().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while host.is_launched() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!host.is_launched(), "the loop should have timed out");
    assert!(matches!(host.tear_down(), Err(BackendError::TimedOut { ms: 30 })));
    // The core came back: the loop can run again, with a fresh timeout.
    host.launch().unwrap();
    assert!(host.is_launched());
    assert!(matches!(host.tear_down(), Ok(_) | Err(BackendError::TimedOut { .. })));
}

#[test]
fn tear_down_wakes_the_loop_from_a_long_sleep() {
    let (frames, results) = rings(4);
    // Check once per iteration, then sleep a whole second.
    let config = LoopConfig {
        poll_budget_us: 0,
        data_not_ready_sleep_interval_us: 1_000_000,
        ..LoopConfig::default()
    };
    let mut host = HostLoop::new(frames, results, default_chain(), CAPACITY, config).unwrap();
    host.launch().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let started = Instant::now();
    let stats = host.tear_down().unwrap();
    assert!(started.elapsed() < Duration::from_millis(500), "tear-down took {:?}", started.elapsed());
    assert!(stats.idle_iterations >= 1);
}

#[test]
fn host_driven_loop_processes_one_frame_per_data_ready() {
    let (frames, results) = rings(4);
    let mut writer = frames.writer().unwrap();
    let mut reader = ResultReader::new(Arc::clone(&results));
    let config = LoopConfig { poll_budget_us: 50, ..LoopConfig::default() };
    let mut host = HostLoop::with_trigger(
        Arc::clone(&frames),
        results,
        default_chain(),
        CAPACITY,
        config,
        Trigger::HostDriven,
    )
    .unwrap();
    host.launch().unwrap();
    for frame in 1..=2u64 {
        let seq = writer.reserve().unwrap();
        writer.payload_mut(seq).copy_from_slice(&frame_bytes(frame));
        writer.publish(
            seq,
            &SlotHeader { frame_seq: frame, payload_len: CAPACITY as u32, ..Default::default() },
        );
    }
    std::thread::sleep(Duration::from_millis(20));
    assert!(collect(&mut reader, 1, Duration::from_millis(1)).is_empty(), "no signal, no processing");
    host.data_ready();
    let got = collect(&mut reader, 1, Duration::from_secs(5));
    assert_eq!(got.iter().map(|r| r.frame_seq).collect::<Vec<_>>(), vec![1]);
    host.data_ready();
    let got = collect(&mut reader, 1, Duration::from_secs(5));
    assert_eq!(got.iter().map(|r| r.frame_seq).collect::<Vec<_>>(), vec![2]);
    assert_eq!(host.tear_down().unwrap().frames_processed, 2);
}

#[test]
fn construction_reports_a_taken_reader_and_a_bad_chain() {
    let (frames, results) = rings(4);
    let bad = vec![OpSpec::Stats];
    assert!(matches!(
        HostLoop::new(Arc::clone(&frames), Arc::clone(&results), bad, CAPACITY, LoopConfig::default()),
        Err(HostError::Chain(_))
    ));
    let _first = frames.reader().unwrap();
    let err = HostLoop::new(frames, results, default_chain(), CAPACITY, LoopConfig::default()).err().unwrap();
    assert!(matches!(err, HostError::ReaderTaken));
    assert!(err.to_string().contains("reader"));
}

#[test]
fn the_loop_thread_runs_at_the_configured_nice_value_below_the_receiver() {
    for nice in [0, 7, 10] {
        let (frames, results) = rings(4);
        let config = LoopConfig { host_nice: nice, ..LoopConfig::default() };
        let mut host = HostLoop::new(frames, results, default_chain(), CAPACITY, config).unwrap();
        host.launch().unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut seen = None;
        while Instant::now() < deadline {
            seen = threads::nice_of_thread("frameloop-host-");
            if seen == Some(nice as i64) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        host.tear_down().unwrap();
        assert_eq!(seen, Some(nice as i64), "loop.host_nice = {nice}");
    }
}
