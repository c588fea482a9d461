//! Tests of the received mark the reassembler stores in a slot header while
//! a frame arrives (see the module doc of `reassembly`): it reports exactly
//! the run of packets received from index 0, never passes a gap, never
//! exceeds the frame, and the bytes under it are the sender's.

use super::*;
use crate::ingest::FrameAssembler;
use crate::ring::layout::{SLOT_PAYLOAD_OFFSET, SLOTS_OFFSET, received_prefix, ring_bytes};
use crate::ring::{FrameRing, HostMemory, OverrunPolicy, RingReader};
use proptest::prelude::*;
use std::mem::offset_of;

fn ring(slots: usize, capacity: usize) -> Arc<FrameRing> {
    let mem = HostMemory::new(ring_bytes(slots, capacity).unwrap()).unwrap();
    FrameRing::new(Box::new(mem), slots, capacity, OverrunPolicy::Every).unwrap()
}

/// The slot of ring sequence `seq` as the device would read it while the
/// frame arrives: its received mark word and its first `len` payload bytes.
fn slot_view(r: &FrameRing, seq: u64, len: usize) -> (u64, Vec<u8>) {
    let index = ((seq - 1) % r.slot_count() as u64) as usize;
    let base = SLOTS_OFFSET + index * r.slot_stride();
    assert!(base + SLOT_PAYLOAD_OFFSET + len <= r.memory().len());
    // SAFETY: the slot lies inside the ring's host memory (checked above),
    // alive while `r` is; the mark word is 8-byte aligned and only stored to
    // atomically; the reassembler runs on this thread, so nothing writes the
    // payload while it is copied.
    unsafe {
        let slot = r.memory().as_ptr().add(base);
        let mark = AtomicU64::from_ptr(slot.add(offset_of!(SlotHeader, received_mark)).cast::<u64>())
            .load(std::sync::atomic::Ordering::Acquire);
        let payload = std::slice::from_raw_parts(slot.add(SLOT_PAYLOAD_OFFSET), len).to_vec();
        (mark, payload)
    }
}

fn frame_bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) | 1).collect()
}

fn drain(reader: &mut RingReader) -> Vec<SlotHeader> {
    let mut out = Vec::new();
    while let Some(slot) = reader.claim() {
        let seq = slot.seq;
        out.push(slot.header);
        reader.finish(seq);
    }
    out
}

#[test]
fn the_mark_follows_the_run_from_packet_zero_out_of_order() {
    let r = ring(4, 1024);
    let mut rd = r.reader().unwrap();
    let mut re = Reassembler::new(ReassemblyConfig::default(), r.writer().unwrap(), Arc::default());
    let data = frame_bytes(450, 7);
    // Five packets of 100, 100, 100, 100, 50 bytes; ring sequence 1.
    let p = native::encode_frame(1, 10, &data, 100, 0);
    let prefix = |r: &FrameRing| received_prefix(slot_view(r, 1, 0).0, 1);
    re.on_datagram(&p[2], 1);
    assert_eq!(prefix(&r), None, "no mark before packet 0");
    re.on_datagram(&p[0], 2);
    assert_eq!(prefix(&r), Some(100), "packet 0 alone; packet 1 is a gap");
    re.on_datagram(&p[0], 3);
    assert_eq!(prefix(&r), Some(100), "a duplicate changes nothing");
    re.on_datagram(&p[1], 4);
    assert_eq!(prefix(&r), Some(300), "packets 0-2");
    re.on_datagram(&p[4], 5);
    assert_eq!(prefix(&r), Some(300), "packet 3 is a gap");
    assert_eq!(&slot_view(&r, 1, 300).1, &data[..300]);
    assert!(drain(&mut rd).is_empty());
    re.on_datagram(&p[3], 6);
    assert_eq!(prefix(&r), Some(450), "the whole frame, not the whole last stride");
    let out = drain(&mut rd);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].flags, SLOT_COMPLETE);
    assert_eq!(received_prefix(out[0].received_mark, 1), Some(450), "the published header keeps the mark");
}

#[test]
fn an_incomplete_frame_is_flagged_as_before_and_its_mark_stops_at_the_gap() {
    let r = ring(4, 1024);
    let mut rd = r.reader().unwrap();
    let mut re = Reassembler::new(ReassemblyConfig::default(), r.writer().unwrap(), Arc::default());
    let data = frame_bytes(1000, 3);
    let p = native::encode_frame(1, 10, &data, 300, 0);
    for i in [0, 1, 3] {
        re.on_datagram(&p[i], 1);
    }
    // Frame 11 lacks packet 0: its mark reports nothing.
    let q = native::encode_frame(1, 11, &frame_bytes(64, 5), 16, 0);
    re.on_datagram(&q[1], 2);
    assert_eq!(received_prefix(slot_view(&r, 2, 0).0, 2), None);
    re.on_tick(25_000_000);
    let out = drain(&mut rd);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].flags, SLOT_INCOMPLETE | SLOT_TIMED_OUT);
    assert_eq!((out[0].packets_received, out[0].packets_expected), (3, 4));
    assert_eq!(received_prefix(out[0].received_mark, 1), Some(600));
    assert_eq!(out[1].flags, SLOT_INCOMPLETE | SLOT_TIMED_OUT);
    assert_eq!(received_prefix(out[1].received_mark, 2), Some(0));
    // A one-packet frame and an empty one: the mark is the frame.
    let one = native::encode_frame(1, 12, &frame_bytes(77, 1), 1000, 0);
    re.on_datagram(&one[0], 3);
    let empty = native::encode_frame(1, 13, &[], 1000, 0);
    re.on_datagram(&empty[0], 3);
    let out = drain(&mut rd);
    let marks: Vec<_> = out.iter().map(|h| received_prefix(h.received_mark, h.ring_seq)).collect();
    assert_eq!(marks, [Some(77), Some(0)]);
}

/// Frames (bytes, max payload), per-packet loss, a delivery order (with
/// duplicates), `max_frames_in_flight`.
type Scenario = (Vec<(Vec<u8>, u32)>, Vec<bool>, Vec<usize>, usize);

fn scenario() -> impl Strategy<Value = Scenario> {
    let frames = prop::collection::vec((prop::collection::vec(any::<u8>(), 0..2000), 8u32..700), 1..6);
    frames.prop_flat_map(|frames| {
        let total: usize =
            frames.iter().map(|(f, mp)| native::packet_span(f.len() as u32, *mp, 0).0 as usize).sum();
        let lost = prop::collection::vec(prop::bool::weighted(0.15), total);
        // Each packet twice in the order (the second a duplicate).
        let order = Just((0..total * 2).collect::<Vec<_>>()).prop_shuffle();
        (Just(frames), lost, order, 1usize..8)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// After every datagram, the mark of every frame that reached a slot is
    /// exactly the bytes of its received run from packet 0 (so it never
    /// passes a gap and never exceeds the frame), it never goes back, and
    /// the slot holds the sender's bytes under it; published headers keep it.
    #[test]
    fn the_mark_is_the_received_prefix_after_every_datagram((frames, lost, order, max_in_flight) in scenario()) {
        const SLOTS: usize = 16;
        let r = ring(SLOTS, 2000);
        let mut rd = r.reader().unwrap();
        let cfg = ReassemblyConfig { max_frames_in_flight: max_in_flight, ..Default::default() };
        let mut re = Reassembler::new(cfg, r.writer().unwrap(), Arc::default());
        // (frame, packet index, datagram, stride)
        let mut sent: Vec<(usize, u32, Vec<u8>)> = Vec::new();
        for (fi, (data, mp)) in frames.iter().enumerate() {
            for (i, d) in native::encode_frame(3, 100 + fi as u64, data, *mp, 0).into_iter().enumerate() {
                sent.push((fi, i as u32, d));
            }
        }
        let mut ring_seq = vec![None; frames.len()];
        let mut received = vec![std::collections::BTreeSet::new(); frames.len()];
        let mut last_mark = vec![0u32; frames.len()];
        for (t, &o) in order.iter().enumerate() {
            let k = o / 2;
            if lost[k] {
                continue;
            }
            let (fi, index, d) = &sent[k];
            let before = re.counters().snapshot();
            re.on_datagram(d, t as u64 + 1);
            let after = re.counters().snapshot();
            if after.frames_started > before.frames_started {
                prop_assert!(ring_seq[*fi].is_none());
                ring_seq[*fi] = Some(after.frames_started);
            }
            if after.packets_accepted > before.packets_accepted {
                received[*fi].insert(*index);
            }
            for (f, seq) in ring_seq.iter().enumerate() {
                let Some(seq) = *seq else { continue };
                let (data, mp) = &frames[f];
                let stride = *mp as usize;
                let run = (0u32..).take_while(|i| received[f].contains(i)).count();
                let want = (run * stride).min(data.len()) as u32;
                let (mark, payload) = slot_view(&r, seq, data.len());
                match received_prefix(mark, seq) {
                    Some(bytes) => {
                        prop_assert_eq!(bytes, want, "frame {} mark", f);
                        prop_assert!(bytes as usize <= data.len());
                        prop_assert!(bytes >= last_mark[f], "the mark went back");
                        prop_assert_eq!(&payload[..bytes as usize], &data[..bytes as usize]);
                        last_mark[f] = bytes;
                    }
                    None => prop_assert_eq!(want, 0, "frame {} has a received run but no mark", f),
                }
            }
        }
        re.flush(u64::MAX);
        for h in drain(&mut rd) {
            let f = (h.frame_seq - 100) as usize;
            prop_assert_eq!(received_prefix(h.received_mark, h.ring_seq), Some(last_mark[f]));
            let complete = h.flags == SLOT_COMPLETE;
            prop_assert_eq!(complete, h.packets_received == h.packets_expected);
            if complete {
                prop_assert_eq!(last_mark[f] as usize, frames[f].0.len());
            }
        }
    }
}
