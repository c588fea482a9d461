//! The sequence protocol under a concurrent writer: a slow reader, a reader
//! that stops, and a reader holding a frame while the writer laps it.

use super::*;
use crate::output::{OutputRing, OutputServer, OutputWriter};
use proptest::prelude::*;
use std::sync::Arc;

fn attached(slots: usize, capacity: usize) -> (tempfile::TempDir, OutputServer, OutputWriter, Consumer) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.sock");
    let ring = OutputRing::host(slots, capacity).unwrap();
    let writer = ring.writer().unwrap();
    let server = OutputServer::start(Arc::clone(&ring), &path).unwrap();
    let consumer = Consumer::attach(&path).unwrap();
    (dir, server, writer, consumer)
}

/// Output `seq`: `seq % 7 + 1` samples `seq + i`, frame_seq `3 seq`, user words `seq`.
fn publish(writer: &mut OutputWriter, seq: u64) {
    let samples: Vec<f32> = (0..seq % 7 + 1).map(|i| (seq + i) as f32).collect();
    let record = ResultRecord { frame_seq: seq * 3, ..Default::default() };
    assert_eq!(writer.publish(&record, &[seq as u32; USER_RESULT_WORDS], &samples).unwrap(), seq);
}

/// Checks a whole output against what `publish` wrote; returns its sequence,
/// or `None` when the slot was rewritten while it was checked.
fn check(frame: &OutputFrame<'_>) -> Option<u64> {
    let seq = frame.sequence();
    let record = *frame.record();
    let user = *frame.user_result();
    let samples = frame.samples().unwrap().to_vec();
    if !frame.is_intact() {
        return None;
    }
    assert_eq!(record.frame_seq, seq * 3, "record of another output");
    assert_eq!(user, [seq as u32; USER_RESULT_WORDS], "user words of another output");
    let expected: Vec<f32> = (0..seq % 7 + 1).map(|i| (seq + i) as f32).collect();
    assert_eq!(samples, expected, "samples of output {seq} torn");
    Some(seq)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn a_slow_reader_sees_whole_outputs_in_order_and_counts_the_rest_lost(
        slots in 1usize..6,
        written in 1u64..400,
        pause_every in 1u64..20,
    ) {
        let (_dir, _server, mut writer, mut consumer) = attached(slots, 8);
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writing = {
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                for seq in 1..=written {
                    publish(&mut writer, seq);
                    if seq % 16 == 0 {
                        std::thread::yield_now();
                    }
                }
                done.store(true, Ordering::Release);
            })
        };
        let mut last = 0;
        let mut seen = 0u64;
        loop {
            let finished = done.load(Ordering::Acquire);
            match consumer.next() {
                Some(frame) => {
                    if let Some(seq) = check(&frame) {
                        prop_assert!(seq > last, "output {seq} after {last}");
                        last = seq;
                    }
                    drop(frame);
                    seen += 1;
                    if seen.is_multiple_of(pause_every) {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
                None if finished => break,
                None => std::thread::yield_now(),
            }
        }
        writing.join().unwrap();
        prop_assert_eq!(consumer.read() + consumer.lost(), written);
        prop_assert_eq!(last, written, "the newest output is always read once the writer stops");
    }

    #[test]
    fn a_reader_that_stops_loses_all_but_the_last_slots_and_never_holds_up_the_writer(
        slots in 1usize..6,
        before_stop in 0u64..10,
        after_stop in 0u64..200,
    ) {
        let (_dir, _server, mut writer, mut consumer) = attached(slots, 8);
        for seq in 1..=before_stop {
            publish(&mut writer, seq);
            let frame = consumer.next().unwrap();
            prop_assert_eq!(check(&frame), Some(seq));
        }
        for seq in before_stop + 1..=before_stop + after_stop {
            publish(&mut writer, seq);
        }
        let mut resumed = Vec::new();
        while let Some(frame) = consumer.next() {
            resumed.push(check(&frame).unwrap());
        }
        let kept = after_stop.min(slots as u64);
        let newest: Vec<u64> = (before_stop + after_stop - kept + 1..=before_stop + after_stop).collect();
        prop_assert_eq!(resumed, newest);
        prop_assert_eq!(consumer.read(), before_stop + kept);
        prop_assert_eq!(consumer.lost(), after_stop - kept);
    }
}

#[test]
fn a_frame_held_while_the_writer_laps_it_counts_lost_and_the_writer_never_waits() {
    let (_dir, server, mut writer, mut consumer) = attached(4, 8);
    publish(&mut writer, 1);
    let frame = consumer.next().unwrap();
    assert_eq!(check(&frame), Some(1));
    // The consumer sits on output 1; the writer goes on as if nobody read.
    let started = Instant::now();
    for seq in 2..=100_000 {
        publish(&mut writer, seq);
    }
    assert!(started.elapsed() < Duration::from_secs(20), "the writer was held up");
    assert!(!frame.is_intact(), "slot 1 was rewritten under the held frame");
    assert_eq!(check(&frame), None);
    drop(frame);
    assert_eq!((consumer.read(), consumer.lost()), (0, 1));
    let snapshot = server.snapshot();
    assert_eq!(snapshot.head_seq, 100_000);
    assert_eq!(snapshot.consumers.len(), 1);
    assert_eq!(snapshot.consumers[0].last_read_seq, 1);
    assert_eq!(snapshot.consumers[0].lag, 99_999, "the lag the appliance reports");
    let newest: Vec<u64> = std::iter::from_fn(|| consumer.next().map(|f| check(&f).unwrap())).collect();
    assert_eq!(newest, [99_997, 99_998, 99_999, 100_000]);
    assert_eq!(consumer.read() + consumer.lost(), 100_000);
    // After the frames are dropped, `holds` still tells which slots hold which output.
    assert!(consumer.holds(100_000) && consumer.holds(99_997));
    assert!(!consumer.holds(99_996) && !consumer.holds(1) && !consumer.holds(0));
    publish(&mut writer, 100_001);
    assert!(!consumer.holds(99_997), "rewritten by 100 001");
}

#[test]
fn a_consumer_of_another_layout_version_gets_the_refusal_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.sock");
    let _server = OutputServer::start(OutputRing::host(2, 4).unwrap(), &path).unwrap();
    let request = AttachRequest { version: OUTPUT_LAYOUT_VERSION + 7, pid: std::process::id() };
    let err = Consumer::attach_as(&path, request).err().expect("refused");
    assert!(matches!(err, OutputError::Refused(_)), "{err}");
    assert!(err.to_string().contains("same release"), "{err}");
    let err = Consumer::attach(dir.path().join("none.sock")).err().expect("no socket");
    assert!(err.to_string().contains("[output] enabled = true"), "{err}");
}

#[test]
fn a_consumer_notices_the_appliance_going_away() {
    let (_dir, server, mut writer, mut consumer) = attached(2, 4);
    assert!(!consumer.appliance_gone());
    publish(&mut writer, 1);
    drop(server);
    assert!(consumer.appliance_gone(), "the server closed the connection when it stopped");
    assert_eq!(consumer.next().map(|f| f.sequence()), Some(1), "what was published stays readable");
}

#[test]
fn a_spinning_wait_still_ends_at_its_timeout_and_then_takes_what_arrived() {
    let (_dir, _server, mut writer, mut consumer) = attached(4, 8);
    consumer.set_spin(Duration::MAX);
    let started = std::time::Instant::now();
    assert!(consumer.next_timeout(Duration::from_millis(30)).is_none(), "nothing was published");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(30) && waited < Duration::from_secs(5), "{waited:?}");
    let publishing = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        publish(&mut writer, 1);
        writer
    });
    let frame = consumer.next_timeout(Duration::from_secs(10)).expect("the output published meanwhile");
    assert_eq!(check(&frame), Some(1));
    drop(frame);
    publishing.join().unwrap();
    assert_eq!((consumer.read(), consumer.lost()), (1, 0));
}

#[test]
fn a_slot_view_is_the_memory_every_output_of_that_slot_is_read_from() {
    let (_dir, _server, mut writer, mut consumer) = attached(3, 8);
    assert_eq!(consumer.slot_samples(3), None, "3 slots: 0, 1 and 2");
    for seq in 1..=7 {
        publish(&mut writer, seq);
        let frame = consumer.next().expect("published");
        let Some(SlotSamples::Host { address, len }) = frame.consumer.slot_samples(frame.slot()) else {
            panic!("a host ring's slot is host memory")
        };
        assert_eq!((frame.slot(), len), (((seq - 1) % 3) as usize, 8));
        let samples = frame.samples().unwrap();
        assert_eq!(address, samples.as_ptr() as u64, "output {seq}: the frame's samples start the slot view");
        // SAFETY: `len` samples of the mapped slot; no writer runs now.
        let view = unsafe { std::slice::from_raw_parts(address as *const f32, samples.len()) };
        assert_eq!(view, samples);
    }
}

#[test]
fn a_consumer_starts_at_the_output_it_was_admitted_at_even_when_more_arrive_while_it_maps_the_ring() {
    // Outputs published between the appliance admitting a consumer and the
    // consumer mapping the ring are that consumer's to read: it starts right
    // after the head at admission, never at the head it happens to see later.
    const PER_ROUND: u64 = 3000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.sock");
    let ring = OutputRing::host(4096, 8).unwrap();
    let mut writer = ring.writer().unwrap();
    let server = OutputServer::start(Arc::clone(&ring), &path).unwrap();
    let mut head = 0;
    for round in 0..8u64 {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writing = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                // One output every ~2 µs, so several land while the consumer attaches.
                let mut seq = head;
                while !stop.load(Ordering::Acquire) && seq < head + PER_ROUND {
                    seq += 1;
                    publish(&mut writer, seq);
                    let published = Instant::now();
                    while published.elapsed() < Duration::from_micros(2) {
                        std::hint::spin_loop();
                    }
                }
                writer
            })
        };
        let mut consumer = Consumer::attach(&path).unwrap();
        let admitted = consumer.consumer_word().last_read_seq.load(Ordering::Relaxed);
        stop.store(true, Ordering::Release);
        writer = writing.join().unwrap();
        head = consumer.head();
        assert!(head - admitted < 4096, "round {round}: the writer lapped the ring");
        let read: Vec<u64> = std::iter::from_fn(|| consumer.next().map(|f| check(&f).unwrap())).collect();
        assert_eq!(read, (admitted + 1..=head).collect::<Vec<_>>(), "round {round}: admitted at {admitted}");
        assert_eq!(consumer.lost(), 0);
        drop(consumer);
        let detached = Instant::now();
        while !server.snapshot().consumers.is_empty() {
            assert!(detached.elapsed() < Duration::from_secs(10), "the consumer never detached");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[test]
fn a_consumer_in_the_serving_process_reads_without_the_socket_and_detaches_on_drop() {
    let (_dir, server, mut writer, mut remote) = attached(4, 8);
    publish(&mut writer, 1);
    let mut local = Consumer::attach_local(&server).unwrap();
    assert_eq!(local.memory_kind(), MemoryKind::HostMemfd);
    assert!(local.next().is_none(), "only outputs published after the attach");
    for seq in 2..=4 {
        publish(&mut writer, seq);
    }
    for seq in 2..=4 {
        let frame = local.next().unwrap();
        assert_eq!(check(&frame), Some(seq));
    }
    assert_eq!((local.read(), local.lost()), (3, 0));
    assert_eq!(server.snapshot().consumers.len(), 2, "the socket's consumer and the local one");
    assert!(!local.appliance_gone());
    drop(local);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while server.snapshot().consumers.len() != 1 {
        assert!(std::time::Instant::now() < deadline, "the local consumer's line was never released");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(remote.next().map(|f| f.sequence()), Some(1));
    let local = Consumer::attach_local(&server).unwrap();
    drop(server);
    assert!(local.appliance_gone(), "the server stopping closes the local consumer's connection");
}
