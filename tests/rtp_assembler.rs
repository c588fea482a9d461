//! The RFC 4175 assembler end to end in memory: packets from the packetizer
//! (in order, shuffled, lost, duplicated, corrupted) into a real frame ring,
//! frames read back with the ring reader.

use frameloop::ingest::FrameAssembler;
use frameloop::ring::layout::{SLOT_COMPLETE, SLOT_INCOMPLETE, SLOT_TIMED_OUT, ring_bytes};
use frameloop::ring::{FrameRing, HostMemory, OverrunPolicy, RingReader};
use frameloop::rtp::{Packetizer, RtpAssembler, RtpConfig, RtpCounter, RtpSettings, Sampling, VideoGeometry};
use frameloop::wire::rtp4175::{self, LineSegment, RtpHeader};
use proptest::prelude::*;

const MS: u64 = 1_000_000;

fn settings(w: u32, h: u32) -> RtpSettings {
    RtpConfig::inline(Sampling::Ycbcr422, 8, w, h).resolve().unwrap()
}

fn setup(s: RtpSettings, slots: usize) -> (RtpAssembler, RingReader) {
    let cap = s.geometry.frame_bytes();
    let mem = HostMemory::new(ring_bytes(slots, cap).unwrap()).unwrap();
    let ring = FrameRing::new(Box::new(mem), slots, cap, OverrunPolicy::Every).unwrap();
    let a = RtpAssembler::new(s, ring.writer().unwrap()).unwrap();
    (a, ring.reader().unwrap())
}

fn frame_bytes(g: &VideoGeometry, n: u32) -> Vec<u8> {
    (0..g.frame_bytes()).map(|i| (i as u32).wrapping_mul(31).wrapping_add(n * 101) as u8).collect()
}

/// Every published frame: (frame_seq, flags, expected, received, payload).
fn drain(r: &mut RingReader) -> Vec<(u64, u32, u32, u32, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(c) = r.claim() {
        let h = c.header;
        out.push((h.frame_seq, h.flags, h.packets_expected, h.packets_received, c.payload.to_vec()));
        let seq = c.seq;
        r.finish(seq);
    }
    out
}

#[test]
fn in_order_frames_are_complete_and_byte_exact() {
    let s = settings(64, 8);
    let g = s.geometry;
    let (mut a, mut r) = setup(s, 4);
    let mut p = Packetizer::new(g, 200);
    for n in 0..3u32 {
        let packets = p.packetize(&frame_bytes(&g, n), 3000 * n);
        for (i, d) in packets.iter().enumerate() {
            a.on_datagram(d, n as u64 * 10 * MS + i as u64);
        }
        let frames = drain(&mut r);
        assert_eq!(frames.len(), 1, "frame {n} must publish on its marker packet");
        let (seq, flags, expected, received, payload) = &frames[0];
        assert_eq!((*seq, *flags), (3000 * n as u64, SLOT_COMPLETE));
        assert_eq!((*expected, *received), (packets.len() as u32, packets.len() as u32));
        assert_eq!(payload, &frame_bytes(&g, n));
    }
    assert_eq!(a.counters().get(RtpCounter::frames_complete), 3);
    assert_eq!(a.counters().packets_dropped(), 0);
}

#[test]
fn lost_packet_marks_the_frame_incomplete_with_zeroed_bytes() {
    let s = settings(64, 8);
    let g = s.geometry;
    let (mut a, mut r) = setup(s, 4);
    let mut p = Packetizer::new(g, 200);
    let f0 = p.packetize(&frame_bytes(&g, 0), 0);
    let f1 = p.packetize(&frame_bytes(&g, 1), 3000);
    for d in f0.iter().enumerate().filter(|(i, _)| *i != 2).map(|(_, d)| d) {
        a.on_datagram(d, MS);
    }
    assert!(drain(&mut r).is_empty(), "an incomplete frame waits for the next frame or its timeout");
    a.on_datagram(&f1[0], 2 * MS);
    let frames = drain(&mut r);
    assert_eq!(frames.len(), 1);
    let (_, flags, expected, received, payload) = &frames[0];
    assert_eq!(*flags, SLOT_INCOMPLETE);
    assert_eq!((*expected, *received), (f0.len() as u32, f0.len() as u32 - 1));
    // The lost packet's bytes are zero, the rest as sent.
    let lost = rtp4175::parse(&f0[2]).unwrap();
    let mut want = frame_bytes(&g, 0);
    for seg in lost.segments() {
        want[g.segment_range(seg.line, seg.offset, seg.data.len()).unwrap()].fill(0);
    }
    assert_eq!(payload, &want);
    assert_eq!(a.counters().get(RtpCounter::seq_gap_packets), 1);
}

#[test]
fn stale_frame_times_out_and_flush_publishes_the_rest() {
    let s = settings(64, 8);
    let g = s.geometry;
    let (mut a, mut r) = setup(s, 4);
    let mut p = Packetizer::new(g, 200);
    let f0 = p.packetize(&frame_bytes(&g, 0), 0);
    a.on_datagram(&f0[0], 1000 * MS);
    a.on_tick(1000 * MS + s.frame_timeout_ns - 1);
    assert!(drain(&mut r).is_empty());
    // A receiver behind its socket: the clock is past the timeout, the
    // latest datagram it read arrived before it, so nothing times out yet.
    a.on_tick_behind(1000 * MS + s.frame_timeout_ns - 1, 1000 * MS + 10 * s.frame_timeout_ns);
    assert!(drain(&mut r).is_empty(), "timed out by the clock while its packets may wait");
    a.on_tick(1000 * MS + s.frame_timeout_ns);
    let frames = drain(&mut r);
    assert_eq!(frames[0].1, SLOT_INCOMPLETE | SLOT_TIMED_OUT);
    // A straggler of the timed-out frame is late, not a new frame.
    a.on_datagram(&f0[1], 1200 * MS);
    assert_eq!(a.counters().get(RtpCounter::late), 1);
    let f1 = p.packetize(&frame_bytes(&g, 1), 3000);
    a.on_datagram(&f1[0], 1300 * MS);
    a.flush(1301 * MS);
    let frames = drain(&mut r);
    assert_eq!((frames.len(), frames[0].1), (1, SLOT_INCOMPLETE));
    assert_eq!(a.counters().get(RtpCounter::frames_timed_out), 1);
}

#[test]
fn duplicates_filters_and_lying_segments_are_counted_and_dropped() {
    let s = RtpSettings { payload_type: Some(96), ..settings(64, 8) };
    let g = s.geometry;
    let (mut a, mut r) = setup(s, 4);
    let mut p = Packetizer::new(g, 200);
    let f0 = p.packetize(&frame_bytes(&g, 0), 0);
    let mut t = 0;
    let mut send = |a: &mut RtpAssembler, d: &[u8]| {
        t += 1;
        a.on_datagram(d, t);
    };
    send(&mut a, &f0[0]);
    send(&mut a, &f0[0]);
    let mut other_pt = f0[1].clone();
    other_pt[1] = (other_pt[1] & 0x80) | 97;
    send(&mut a, &other_pt);
    let mut other_ssrc = f0[1].clone();
    other_ssrc[11] ^= 1;
    send(&mut a, &other_ssrc);
    // Lying packets with fresh sequence numbers of the same frame.
    let data = [0xeeu8; 8];
    let liar = |line: u16, offset: u16, len: usize, seq: u16| {
        let mut out = Vec::new();
        let h = RtpHeader { marker: false, payload_type: 96, seq, timestamp: 0, ssrc: p.ssrc };
        rtp4175::encode(&h, 0, &[LineSegment { field: false, line, offset, data: &data[..len] }], &mut out);
        out
    };
    send(&mut a, &liar(8, 0, 8, 1000));
    send(&mut a, &liar(0, 62, 8, 1001));
    send(&mut a, &liar(0, 1, 4, 1002));
    send(&mut a, &liar(0, 0, 6, 1003));
    let mut field = liar(0, 0, 8, 1004);
    field[rtp4175::RTP_HEADER_LEN + 4] |= 0x80;
    send(&mut a, &field);
    send(&mut a, &[0x80, 96, 0, 1]);
    let c = a.counters();
    for (counter, n) in [
        (RtpCounter::duplicate, 1),
        (RtpCounter::wrong_payload_type, 1),
        (RtpCounter::other_ssrc, 1),
        (RtpCounter::line_outside_frame, 1),
        (RtpCounter::past_line_end, 1),
        (RtpCounter::not_pgroup_aligned, 2),
        (RtpCounter::field_unsupported, 1),
        (RtpCounter::rtp_short_header, 1),
    ] {
        assert_eq!(c.get(counter), n, "{}", counter.name());
    }
    a.flush(t + 1);
    let frames = drain(&mut r);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].1, SLOT_INCOMPLETE);
    // Only the first packet's bytes were written; nothing of the liars.
    let first = rtp4175::parse(&f0[0]).unwrap();
    let mut want = vec![0u8; g.frame_bytes()];
    let src = frame_bytes(&g, 0);
    for seg in first.segments() {
        let range = g.segment_range(seg.line, seg.offset, seg.data.len()).unwrap();
        want[range.clone()].copy_from_slice(&src[range]);
    }
    assert_eq!(frames[0].4, want);
}

#[test]
fn sequence_numbers_wrap_across_frames_without_loss() {
    let s = settings(64, 8);
    let g = s.geometry;
    let (mut a, mut r) = setup(s, 4);
    let mut p = Packetizer::new(g, 200);
    p.next_seq = 0xfffe;
    p.write_ext_seq = false; // as some senders do
    for n in 0..3u32 {
        for d in p.packetize(&frame_bytes(&g, n), 3000 * n) {
            a.on_datagram(&d, 1);
        }
    }
    let frames = drain(&mut r);
    assert_eq!(frames.iter().map(|f| f.1).collect::<Vec<_>>(), vec![SLOT_COMPLETE; 3]);
    assert_eq!(a.counters().get(RtpCounter::seq_gap_packets), 0);
}

#[test]
fn full_ring_drops_whole_frames() {
    let s = settings(64, 8);
    let g = s.geometry;
    let (mut a, mut r) = setup(s, 2);
    let mut p = Packetizer::new(g, 200);
    for n in 0..3u32 {
        for d in p.packetize(&frame_bytes(&g, n), 3000 * n) {
            a.on_datagram(&d, 1);
        }
    }
    let c = a.counters();
    assert_eq!(c.get(RtpCounter::frames_ring_full), 1);
    assert!(c.get(RtpCounter::dropped_frame_packets) > 0);
    assert_eq!(drain(&mut r).len(), 2);
}

#[test]
fn geometry_larger_than_a_slot_is_refused_with_the_key_to_fix() {
    let s = settings(64, 8);
    let mem = HostMemory::new(ring_bytes(2, 100).unwrap()).unwrap();
    let ring = FrameRing::new(Box::new(mem), 2, 100, OverrunPolicy::Every).unwrap();
    let err = RtpAssembler::new(s, ring.writer().unwrap()).err().unwrap();
    assert!(err.to_string().contains("ring.slot_bytes"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Packets of a frame in any order (frames in order) give complete, exact frames.
    #[test]
    fn any_order_within_a_frame(perms in proptest::collection::vec(any::<u64>(), 3), mtu in 60usize..400) {
        let s = settings(32, 6);
        let g = s.geometry;
        let (mut a, mut r) = setup(s, 4);
        let mut p = Packetizer::new(g, mtu);
        for (n, seed) in perms.iter().enumerate() {
            let mut packets = p.packetize(&frame_bytes(&g, n as u32), 1000 * n as u32);
            shuffle(&mut packets, *seed);
            for d in &packets {
                a.on_datagram(d, n as u64);
            }
        }
        let frames = drain(&mut r);
        prop_assert_eq!(frames.len(), 3);
        for (n, f) in frames.iter().enumerate() {
            prop_assert_eq!(f.1, SLOT_COMPLETE);
            prop_assert_eq!(&f.4, &frame_bytes(&g, n as u32));
        }
    }

    /// Losing any non-empty set of a middle frame's packets (in any order)
    /// makes exactly that frame incomplete; its neighbours stay complete.
    #[test]
    fn loss_marks_only_that_frame_incomplete(lose in proptest::collection::vec(any::<bool>(), 1..64), seed in any::<u64>()) {
        let s = settings(32, 6);
        let g = s.geometry;
        let (mut a, mut r) = setup(s, 4);
        let mut p = Packetizer::new(g, 100);
        let f0 = p.packetize(&frame_bytes(&g, 0), 0);
        let mut f1 = p.packetize(&frame_bytes(&g, 1), 1000);
        let f2 = p.packetize(&frame_bytes(&g, 2), 2000);
        let mut keep: Vec<bool> = (0..f1.len()).map(|i| !lose[i % lose.len()]).collect();
        if keep.iter().all(|k| *k) {
            keep[seed as usize % f1.len()] = false;
        }
        let mut i = 0;
        f1.retain(|_| { i += 1; keep[i - 1] });
        shuffle(&mut f1, seed);
        for d in f0.iter().chain(&f1).chain(&f2) {
            a.on_datagram(d, 0);
        }
        a.flush(1);
        let frames = drain(&mut r);
        let flags: Vec<u32> = frames.iter().map(|f| f.1).collect();
        let f1_published = !f1.is_empty();
        if f1_published {
            prop_assert_eq!(flags, vec![SLOT_COMPLETE, SLOT_INCOMPLETE, SLOT_COMPLETE]);
            let (expected, received) = (frames[1].2, frames[1].3);
            prop_assert!(received < expected || expected == received && frames[1].4 != frame_bytes(&g, 1));
        } else {
            prop_assert_eq!(flags, vec![SLOT_COMPLETE, SLOT_COMPLETE]);
        }
    }

    /// Arbitrary corruption of valid packets never panics, and every
    /// published frame has exactly the geometry's size.
    #[test]
    fn corrupted_packets_never_panic(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..40), cut in any::<usize>()) {
        let s = settings(32, 6);
        let g = s.geometry;
        let (mut a, mut r) = setup(s, 3);
        let mut p = Packetizer::new(g, 120);
        let mut packets = p.packetize(&frame_bytes(&g, 0), 0);
        packets.extend(p.packetize(&frame_bytes(&g, 1), 1000));
        for (k, (at, x)) in flips.iter().enumerate() {
            let n = packets.len();
            let d = &mut packets[k % n];
            let i = at % d.len();
            d[i] ^= x;
        }
        let victim = cut % packets.len();
        let keep = cut % (packets[victim].len() + 1);
        packets[victim].truncate(keep);
        for (t, d) in packets.iter().enumerate() {
            a.on_datagram(d, t as u64 * MS);
            for f in drain(&mut r) {
                prop_assert_eq!(f.4.len(), g.frame_bytes());
            }
        }
        a.flush(u64::MAX / 2);
        for f in drain(&mut r) {
            prop_assert_eq!(f.4.len(), g.frame_bytes());
        }
    }
}

/// Deterministic Fisher-Yates shuffle driven by a splitmix64 sequence.
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        v.swap(i, (z % (i as u64 + 1)) as usize);
    }
}
