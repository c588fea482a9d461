//! The host loop core driven in memory with a fake clock: frames published
//! into a host-memory ring are processed in order (`every`) or newest first
//! (`latest`), results match the CPU chain computed here, and the poll,
//! sleep, timeout, tear-down and host-driven decisions follow the config.

use frameloop::backend::LoopStats;
use frameloop::config::LoopConfig;
use frameloop::host::{LoopControl, LoopCore, LoopEnd, Step, Trigger};
use frameloop::ops::{CpuChain, OpSpec, SampleFormat, default_chain};
use frameloop::ring::layout::{
    RESULT_HAS_DETECT, RESULT_HAS_STATS, SLOT_COMPLETE, SLOT_INCOMPLETE, result_ring_bytes, ring_bytes,
};
use frameloop::ring::{
    FrameRing, HostMemory, OverrunPolicy, ResultReader, ResultRecord, ResultRing, RingWriter, SlotHeader,
};
use std::sync::Arc;

const CAPACITY: usize = 256;
const T0: u64 = 1_700_000_000_000_000_000;

struct Rig {
    writer: RingWriter,
    results: ResultReader,
    core: LoopCore,
    control: Arc<LoopControl>,
}

fn rig(policy: OverrunPolicy, config: LoopConfig, trigger: Trigger) -> Rig {
    let frames = FrameRing::new(
        Box::new(HostMemory::new(ring_bytes(8, CAPACITY).unwrap()).unwrap()),
        8,
        CAPACITY,
        policy,
    )
    .unwrap();
    let result_ring =
        ResultRing::new(Box::new(HostMemory::new(result_ring_bytes(64).unwrap()).unwrap()), 64).unwrap();
    let control = LoopControl::new();
    let chain = CpuChain::new(&default_chain(), CAPACITY).unwrap();
    let core = LoopCore::new(
        frames.reader().unwrap(),
        result_ring.writer().unwrap(),
        chain,
        config,
        trigger,
        Arc::clone(&control),
    );
    Rig { writer: frames.writer().unwrap(), results: ResultReader::new(result_ring), core, control }
}

/// A u16 payload whose samples depend on `frame` so every frame's result differs.
fn payload(frame: u64, len: usize) -> Vec<u8> {
    (0..len / 2)
        .map(|i| ((i as u64 * 977 + frame * 4099) % 65536) as u16)
        .flat_map(u16::to_le_bytes)
        .collect()
}

fn header(frame: u64, len: usize) -> SlotHeader {
    SlotHeader {
        frame_seq: 1000 + frame,
        stream_id: 7,
        flags: if frame.is_multiple_of(3) { SLOT_INCOMPLETE } else { SLOT_COMPLETE },
        payload_len: len as u32,
        packets_expected: 4,
        packets_received: 4,
        sender_ts_ns: T0 + frame * 1000,
        first_rx_ns: T0 + frame * 1000 + 100,
        last_rx_ns: T0 + frame * 1000 + 150,
        published_ns: T0 + frame * 1000 + 200,
        ..Default::default()
    }
}

fn publish(writer: &mut RingWriter, frame: u64) -> Vec<u8> {
    let len = 64 + (frame as usize * 10) % 128;
    let data = payload(frame, len);
    let seq = writer.reserve().unwrap();
    writer.payload_mut(seq)[..len].copy_from_slice(&data);
    writer.publish(seq, &header(frame, len));
    data
}

fn drain(reader: &mut ResultReader) -> Vec<ResultRecord> {
    let mut out = Vec::new();
    reader.drain(&mut out);
    out
}

/// One check at `t` that finds data, then the claim and chain at the same
/// time; returns the ring sequence processed.
fn detect(core: &mut LoopCore, t: u64) -> Option<u64> {
    assert_eq!(core.step(t), Step::Ready);
    core.process(t)
}

/// Checks one result against the CPU chain run independently on `data`.
fn assert_matches_chain(r: &ResultRecord, frame: u64, data: &[u8], detect_ns: u64, done_ns: u64) {
    let mut reference = CpuChain::new(&default_chain(), CAPACITY).unwrap();
    let out = reference.run(data);
    let stats = out.stats.unwrap();
    let (count, first) = out.detect.unwrap();
    let h = header(frame, data.len());
    assert_eq!((r.frame_seq, r.stream_id, r.slot_flags), (h.frame_seq, h.stream_id, h.flags));
    assert_eq!(
        (r.sender_ts_ns, r.first_rx_ns, r.last_rx_ns, r.published_ns),
        (h.sender_ts_ns, h.first_rx_ns, h.last_rx_ns, h.published_ns)
    );
    assert_eq!((r.detect_ns, r.done_ns), (detect_ns, done_ns));
    assert_eq!((r.sum, r.min, r.max, r.mean), (stats.sum, stats.min, stats.max, stats.mean));
    assert_eq!((r.detect_count, r.first_detect_index), (count, first));
    assert_eq!(r.output_len as usize, out.output_len);
    assert_eq!(r.result_flags, RESULT_HAS_STATS | RESULT_HAS_DETECT);
}

#[test]
fn every_policy_processes_all_frames_in_order_with_chain_results() {
    let mut rig = rig(OverrunPolicy::Every, LoopConfig::default(), Trigger::RingHead);
    let frames: Vec<Vec<u8>> = (1..=5).map(|f| publish(&mut rig.writer, f)).collect();
    let mut now = T0 + 1_000_000;
    for ring_seq in 1..=5u64 {
        assert_eq!(detect(&mut rig.core, now), Some(ring_seq));
        assert_eq!(rig.core.complete(now + 700), Some(ring_seq));
        now += 1000;
    }
    let results = drain(&mut rig.results);
    assert_eq!(results.len(), 5);
    for (i, r) in results.iter().enumerate() {
        let frame = i as u64 + 1;
        assert_eq!((r.result_seq, r.ring_seq, r.skipped_before), (frame, frame, 0));
        let detect = T0 + 1_000_000 + i as u64 * 1000;
        assert_matches_chain(r, frame, &frames[i], detect, detect + 700);
    }
    let s = rig.control.stats();
    assert_eq!((s.frames_processed, s.frames_skipped, s.iterations, s.idle_iterations), (5, 0, 5, 0));
    // Nothing left: the next check polls.
    assert!(matches!(rig.core.step(now), Step::Pause { .. }));
}

#[test]
fn latest_policy_takes_the_newest_frame_and_counts_the_skipped() {
    let mut rig = rig(OverrunPolicy::Latest, LoopConfig::default(), Trigger::RingHead);
    let frames: Vec<Vec<u8>> = (1..=4).map(|f| publish(&mut rig.writer, f)).collect();
    assert_eq!(detect(&mut rig.core, T0), Some(4));
    rig.core.complete(T0 + 10);
    let f5 = publish(&mut rig.writer, 5);
    let f6 = publish(&mut rig.writer, 6);
    assert_eq!(detect(&mut rig.core, T0 + 20), Some(6));
    rig.core.complete(T0 + 30);
    let results = drain(&mut rig.results);
    assert_eq!(
        results.iter().map(|r| (r.ring_seq, r.skipped_before)).collect::<Vec<_>>(),
        vec![(4, 3), (6, 1)]
    );
    assert_matches_chain(&results[0], 4, &frames[3], T0, T0 + 10);
    assert_matches_chain(&results[1], 6, &f6, T0 + 20, T0 + 30);
    assert_ne!(f5, f6);
    let s = rig.control.stats();
    assert_eq!((s.frames_processed, s.frames_skipped), (2, 4));
}

#[test]
fn polls_within_the_budget_then_sleeps_the_configured_interval() {
    let config = LoopConfig {
        poll_budget_us: 10,
        poll_interval_ns: 3000,
        data_not_ready_sleep_interval_us: 500,
        ..LoopConfig::default()
    };
    let mut rig = rig(OverrunPolicy::Every, config, Trigger::RingHead);
    assert_eq!(rig.core.step(T0), Step::Pause { ns: 3000 });
    assert_eq!(rig.core.step(T0 + 3000), Step::Pause { ns: 3000 });
    assert_eq!(rig.core.step(T0 + 6000), Step::Pause { ns: 3000 });
    // The last pause is cut to the end of the budget.
    assert_eq!(rig.core.step(T0 + 9000), Step::Pause { ns: 1000 });
    assert_eq!(rig.core.step(T0 + 10_000), Step::Sleep { ns: 500_000 });
    assert_eq!(rig.control.stats(), LoopStats { iterations: 1, idle_iterations: 1, ..LoopStats::default() });
    // The next step begins a new iteration with a fresh budget.
    assert_eq!(rig.core.step(T0 + 510_000), Step::Pause { ns: 3000 });
    assert_eq!(rig.control.stats().iterations, 2);
    // A frame published while polling is detected at the next check, stamped then.
    let data = publish(&mut rig.writer, 1);
    assert_eq!(detect(&mut rig.core, T0 + 513_000), Some(1));
    rig.core.complete(T0 + 514_000);
    let r = drain(&mut rig.results);
    assert_matches_chain(&r[0], 1, &data, T0 + 513_000, T0 + 514_000);
    assert_eq!(
        rig.control.stats(),
        LoopStats { frames_processed: 1, iterations: 2, idle_iterations: 1, ..LoopStats::default() }
    );
}

#[test]
fn zero_budget_checks_once_and_zero_interval_spins() {
    let once = LoopConfig { poll_budget_us: 0, data_not_ready_sleep_interval_us: 0, ..LoopConfig::default() };
    let mut rig1 = rig(OverrunPolicy::Every, once, Trigger::RingHead);
    assert_eq!(rig1.core.step(T0), Step::Sleep { ns: 0 });
    assert_eq!(rig1.core.step(T0 + 1), Step::Sleep { ns: 0 });
    assert_eq!(rig1.control.stats().idle_iterations, 2);

    let spin = LoopConfig { poll_budget_us: 5, poll_interval_ns: 0, ..LoopConfig::default() };
    let mut rig2 = rig(OverrunPolicy::Every, spin, Trigger::RingHead);
    assert_eq!(rig2.core.step(T0), Step::Pause { ns: 0 });
    assert_eq!(rig2.core.step(T0 + 4999), Step::Pause { ns: 0 });
    assert_eq!(rig2.core.step(T0 + 5000), Step::Sleep { ns: 0 });
}

#[test]
fn timeout_without_frames_ends_the_loop_and_frames_reset_it() {
    let config = LoopConfig { poll_budget_us: 100, timeout_ms: 5, ..LoopConfig::default() };
    let mut rig = rig(OverrunPolicy::Every, config, Trigger::RingHead);
    assert!(matches!(rig.core.step(T0), Step::Pause { .. }));
    assert!(matches!(rig.core.step(T0 + 4_999_999), Step::Pause { .. } | Step::Sleep { .. }));
    publish(&mut rig.writer, 1);
    assert_eq!(detect(&mut rig.core, T0 + 4_999_999), Some(1));
    rig.core.complete(T0 + 5_000_000);
    // 5 ms after that frame, not 5 ms after the start.
    assert!(matches!(rig.core.step(T0 + 9_000_000), Step::Pause { .. }));
    assert_eq!(rig.core.step(T0 + 9_999_999), Step::End(LoopEnd::TimedOut { ms: 5 }));
}

#[test]
fn tear_down_ends_the_loop_at_the_next_check_even_with_frames_waiting() {
    let config = LoopConfig { poll_budget_us: 1_000_000, ..LoopConfig::default() };
    let mut rig = rig(OverrunPolicy::Every, config, Trigger::RingHead);
    assert!(matches!(rig.core.step(T0), Step::Pause { .. }));
    publish(&mut rig.writer, 1);
    rig.control.request_tear_down();
    assert_eq!(rig.core.step(T0 + 200), Step::End(LoopEnd::TornDown));
    assert_eq!(rig.control.stats().frames_processed, 0);
    assert!(drain(&mut rig.results).is_empty());
}

#[test]
fn host_driven_mode_processes_only_when_data_ready_is_raised() {
    let config = LoopConfig { poll_budget_us: 10, poll_interval_ns: 1000, ..LoopConfig::default() };
    let mut rig = rig(OverrunPolicy::Every, config, Trigger::HostDriven);
    let f1 = publish(&mut rig.writer, 1);
    publish(&mut rig.writer, 2);
    // Published frames are not detected without the host's signal.
    assert_eq!(rig.core.step(T0), Step::Pause { ns: 1000 });
    rig.control.raise_data_ready();
    assert_eq!(detect(&mut rig.core, T0 + 1000), Some(1));
    rig.core.complete(T0 + 1500);
    assert!(rig.control.take_result_ready());
    assert!(!rig.control.take_result_ready(), "result-ready is consumed by asking");
    // The flag was consumed: frame 2 waits for the next signal.
    assert_eq!(rig.core.step(T0 + 2000), Step::Pause { ns: 1000 });
    rig.control.raise_data_ready();
    assert_eq!(detect(&mut rig.core, T0 + 3000), Some(2));
    rig.core.complete(T0 + 3500);
    // A signal with nothing published is counted, not processed, and the
    // iteration goes on polling.
    rig.control.raise_data_ready();
    assert_eq!(rig.core.step(T0 + 4000), Step::Ready);
    assert_eq!(rig.core.process(T0 + 4000), None);
    assert_eq!(rig.control.empty_triggers(), 1);
    assert_eq!(rig.core.step(T0 + 4000), Step::Pause { ns: 1000 });
    let results = drain(&mut rig.results);
    assert_eq!(results.len(), 2);
    assert_matches_chain(&results[0], 1, &f1, T0 + 1000, T0 + 1500);
}

#[test]
fn data_ready_in_ring_mode_and_skipped_driver_calls_do_not_lose_frames() {
    let mut rig = rig(OverrunPolicy::Every, LoopConfig::default(), Trigger::RingHead);
    publish(&mut rig.writer, 1);
    publish(&mut rig.writer, 2);
    rig.control.raise_data_ready();
    assert_eq!(detect(&mut rig.core, T0), Some(1));
    // The driver forgot `complete`: the next claim finishes frame 1 first.
    assert_eq!(detect(&mut rig.core, T0 + 50), Some(2));
    assert_eq!(rig.core.complete(T0 + 60), Some(2));
    assert_eq!(rig.core.complete(T0 + 70), None);
    // The driver ignored `Ready`: the next step claims and finishes frame 3.
    publish(&mut rig.writer, 3);
    assert_eq!(rig.core.step(T0 + 80), Step::Ready);
    assert!(matches!(rig.core.step(T0 + 90), Step::Pause { .. }));
    assert_eq!(rig.core.process(T0 + 95), None, "nothing armed");
    let results = drain(&mut rig.results);
    assert_eq!(
        results.iter().map(|r| (r.ring_seq, r.detect_ns, r.done_ns)).collect::<Vec<_>>(),
        vec![(1, T0, T0 + 50), (2, T0 + 50, T0 + 60), (3, T0 + 90, T0 + 90)]
    );
}

#[test]
fn chains_without_reductions_leave_the_result_flags_clear() {
    let frames = FrameRing::new(
        Box::new(HostMemory::new(ring_bytes(2, 64).unwrap()).unwrap()),
        2,
        64,
        OverrunPolicy::Every,
    )
    .unwrap();
    let results =
        ResultRing::new(Box::new(HostMemory::new(result_ring_bytes(16).unwrap()).unwrap()), 16).unwrap();
    let ops = [OpSpec::Unpack { format: SampleFormat::U8, scale: 2.0, offset: 0.0 }];
    let mut core = LoopCore::new(
        frames.reader().unwrap(),
        results.writer().unwrap(),
        CpuChain::new(&ops, 64).unwrap(),
        LoopConfig::default(),
        Trigger::RingHead,
        LoopControl::new(),
    );
    let mut writer = frames.writer().unwrap();
    let seq = writer.reserve().unwrap();
    writer.payload_mut(seq)[..3].copy_from_slice(&[1, 2, 3]);
    writer.publish(seq, &SlotHeader { payload_len: 3, ..Default::default() });
    let mut reader = ResultReader::new(Arc::clone(&results));
    assert_eq!(detect(&mut core, T0), Some(1));
    core.complete(T0 + 1);
    let r = drain(&mut reader);
    assert_eq!((r[0].result_flags, r[0].output_len, r[0].first_detect_index), (0, 3, -1));
}

/// One action of the property test: publish some frames, or run loop checks.
#[derive(Debug, Clone)]
enum Action {
    Publish(u8),
    Steps(u8),
}

fn action() -> impl proptest::strategy::Strategy<Value = Action> {
    use proptest::prelude::*;
    prop_oneof![(1u8..6).prop_map(Action::Publish), (1u8..8).prop_map(Action::Steps)]
}

proptest::proptest! {
    /// Whatever the interleaving of publishing and checking, every published
    /// frame is processed exactly once or counted as skipped, results come in
    /// ring order, and each result is the chain's value for its frame.
    #[test]
    fn every_frame_is_processed_or_counted_skipped(
        latest in proptest::bool::ANY,
        actions in proptest::collection::vec(action(), 1..40),
    ) {
        let policy = if latest { OverrunPolicy::Latest } else { OverrunPolicy::Every };
        let config = LoopConfig { poll_budget_us: 3, poll_interval_ns: 1000, ..LoopConfig::default() };
        let mut rig = rig(policy, config, Trigger::RingHead);
        let mut frames = Vec::new();
        let mut results = Vec::new();
        let mut now = T0;
        let step = |rig: &mut Rig, now: &mut u64| {
            *now += 500;
            if rig.core.step(*now) == Step::Ready {
                *now += 100;
                if rig.core.process(*now).is_some() {
                    *now += 400;
                    rig.core.complete(*now);
                }
            }
        };
        for a in actions {
            match a {
                Action::Publish(n) => {
                    for _ in 0..n {
                        // A full ring (policy every) drops at ingest, as the receiver would.
                        if let Ok(frame) = rig.writer.reserve() {
                            let len = 64;
                            let data = payload(frame, len);
                            rig.writer.payload_mut(frame)[..len].copy_from_slice(&data);
                            rig.writer.publish(frame, &header(frame, len));
                            frames.push(data);
                        }
                    }
                }
                Action::Steps(n) => (0..n).for_each(|_| step(&mut rig, &mut now)),
            }
            results.extend(drain(&mut rig.results));
        }
        // Let the loop catch up, then account for every frame.
        for _ in 0..(frames.len() * 2 + 2) {
            step(&mut rig, &mut now);
        }
        results.extend(drain(&mut rig.results));
        let stats = rig.control.stats();
        proptest::prop_assert_eq!(stats.frames_processed, results.len() as u64);
        proptest::prop_assert_eq!(stats.frames_processed + stats.frames_skipped, frames.len() as u64);
        let mut expected_next = 1;
        for r in &results {
            proptest::prop_assert_eq!(r.ring_seq, expected_next + r.skipped_before);
            expected_next = r.ring_seq + 1;
            assert_matches_chain(r, r.ring_seq, &frames[r.ring_seq as usize - 1], r.detect_ns, r.done_ns);
        }
        if !latest {
            proptest::prop_assert_eq!(stats.frames_skipped, 0);
        }
    }
}

#[test]
fn a_full_transmit_ring_drops_and_counts_while_every_frame_completes() {
    use frameloop::actuate::{ActuationPlan, Actuator, Destination, OutputPlan, TxRing, When};
    use frameloop::wire::actuation::{MessageShape, PART_RECORD, decode};
    let mut rig = rig(OverrunPolicy::Every, LoopConfig::default(), Trigger::RingHead);
    let output = |name: &str| OutputPlan {
        name: name.into(),
        destination: Destination::Fixed(vec!["127.0.0.1:9".parse().unwrap()]),
        shape: MessageShape { parts: PART_RECORD, samples: 0 },
        when: When::Every,
        max_rate: 1000,
    };
    let plan = ActuationPlan { outputs: vec![output("a"), output("b")] };
    // Two slots and nobody sending: the first frame's two messages fill it.
    let tx = TxRing::host(2, 512).unwrap();
    rig.core.set_actuator(Actuator::new(plan, tx.writer().unwrap()));
    for frame in 0..5 {
        publish(&mut rig.writer, frame);
        let t = T0 + frame * 10_000;
        assert!(detect(&mut rig.core, t).is_some());
        assert!(rig.core.complete(t + 500).is_some(), "frame {frame} completes whatever the ring holds");
    }
    assert_eq!(drain(&mut rig.results).len(), 5, "every frame has its result");
    assert_eq!(tx.head(), 2);
    assert_eq!((tx.dropped(0), tx.dropped(1)), (4, 4), "each output's four later messages dropped, counted");
    let first = tx.message(1).unwrap();
    let m = decode(first.bytes()).unwrap();
    assert_eq!((m.header.frame_seq, m.header.output, m.header.message_seq), (1000, 0, 1));
    assert_eq!(first.ready_ns, T0 + 500, "stamped with the frame's done time");
    // The sender frees the slots: the next frame's messages go in, their
    // sequence showing the gap.
    tx.release(2);
    publish(&mut rig.writer, 5);
    assert!(detect(&mut rig.core, T0 + 60_000).is_some());
    rig.core.complete(T0 + 60_500);
    let m = decode(tx.message(3).unwrap().bytes()).unwrap().header;
    assert_eq!((m.frame_seq, m.output, m.message_seq), (1005, 0, 6));
}
