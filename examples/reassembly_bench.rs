//! The reassembler's own cost per datagram, in memory (no socket, no
//! kernel): frames cut into datagrams of one size are fed to a
//! [`Reassembler`] writing into a host ring, and a consumer takes each
//! frame as it is published. What it measures is the receiving thread's
//! work after `recvmmsg`: parsing, checks, the copy into the slot and
//! publication, for a ring that stays in the CPU's cache and one that does
//! not. Each frame's datagrams go in one call, as the receiver hands over
//! one receive buffer.
//!
//! With `MODE` `landed` or `landed-each`, the datagrams go the one-copy
//! way instead: the reassembler plans where they will land, the bench
//! writes each payload there (the kernel's copy, done by `memcpy` here) and
//! hands the headers over, one call per receive buffer (`landed`, as the
//! receiver does) or one call per datagram (`landed-each`). Those times
//! include the payload's copy into the slot, which in the receiver is the
//! kernel's; `copy` includes the reassembler's own copy but not the kernel's
//! copy into the receive buffer before it, so the modes compare with each
//! other only within the landed pair.
//!
//! `cargo run --release --example reassembly_bench -- [DATAGRAM_BYTES] [SLOTS,SLOTS..] [FRAMES] [MODE] [PAGES]`
//! (defaults: 1472, 16,256, 20000 frames of 64 KiB, `copy`, `huge`: the ring
//! in huge pages as the appliance allocates it, `base` for 4 KiB pages; five rounds
//! each, the median and the spread printed, and each ring's median against
//! the first ring's: with 16 slots of 64 KiB the ring stays in the cache, so
//! that ratio is what a cold slot costs).

use frameloop::ingest::landing::LandingShape;
use frameloop::ingest::{IngestCounters, Reassembler, ReassemblyConfig};
use frameloop::ring::layout::ring_bytes;
use frameloop::ring::{FrameRing, HostMemory, OverrunPolicy};
use frameloop::wire::native::{self, HEADER_LEN, NativeHeader};
use std::sync::Arc;
use std::time::Instant;

const FRAME_BYTES: usize = 65536;
const ROUNDS: usize = 5;

/// Byte offset of `frame_seq` in an encoded header (found by encoding two
/// headers that differ only there), so frames can be renumbered in place.
fn frame_seq_offset() -> usize {
    let a = native::encode(&NativeHeader { frame_seq: 0, ..Default::default() }, &[]);
    let b = native::encode(&NativeHeader { frame_seq: u64::MAX, ..Default::default() }, &[]);
    a.iter().zip(&b).position(|(x, y)| x != y).expect("frame_seq is encoded")
}

/// How the datagrams reach the reassembler.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Copied by the reassembler, one call per frame.
    Copy,
    /// Landed in place, one call per receive buffer.
    Landed,
    /// Landed in place, one call per datagram.
    LandedEach,
}

/// Hands one frame's `datagrams` over the one-copy way: lands every
/// datagram the plan expects (writing its payload at its target) and
/// passes the landed ones receive buffer by receive buffer; the ones the
/// plan does not cover (the first frame, before anything predicts it) are
/// copied.
fn land_frame(reassembler: &mut Reassembler, datagrams: &[Vec<u8>], mode: Mode) {
    // Twice the receive buffers a frame needs, as the receiver plans about
    // twice what its last receive call returned.
    let plan = reassembler.plan_landing(LandingShape::coalesced(2 * datagrams.len().div_ceil(7)), 1);
    let groups = plan.groups();
    let planned = groups.checked_sub(1).map_or(0, |last| plan.group(last).end);
    let mut landed = 0;
    while landed < datagrams.len().min(planned) {
        let payload = &datagrams[landed][HEADER_LEN..];
        if plan.target(landed).len != payload.len() {
            break;
        }
        // SAFETY: the plan was just made, so its slots are reserved and
        // unpublished; nothing else touches them here.
        unsafe { plan.land(landed, payload) };
        landed += 1;
    }
    for g in 0..groups {
        let group = reassembler.landing_mut().group(g);
        if group.start >= landed {
            break;
        }
        let group = group.start..group.end.min(landed);
        if mode == Mode::LandedEach {
            for k in group {
                reassembler.on_landed_at(k, &datagrams[k][..HEADER_LEN], 0, 0);
            }
        } else {
            reassembler.on_landed_run_at(group.map(|k| (k, &datagrams[k][..HEADER_LEN])), 0, 0);
        }
    }
    reassembler.on_datagrams_at(datagrams[landed..].iter().map(Vec::as_slice), 0, 0);
}

/// Nanoseconds per datagram over `frames` frames into a ring of `slots` slots.
fn round(datagrams: &mut [Vec<u8>], seq_at: usize, slots: usize, frames: u64, mode: Mode, huge: bool) -> f64 {
    let mem =
        HostMemory::for_ring(ring_bytes(slots, FRAME_BYTES).expect("ring size"), huge).expect("ring memory");
    let ring = FrameRing::new(Box::new(mem), slots, FRAME_BYTES, OverrunPolicy::Every).expect("ring");
    let mut reader = ring.reader().expect("reader");
    let counters = Arc::new(IngestCounters::default());
    let cfg = ReassemblyConfig { frame_timeout_ms: 1000, ..Default::default() };
    let mut reassembler = Reassembler::new(cfg, ring.writer().expect("writer"), Arc::clone(&counters));
    let mut run = |first: u64, count: u64| {
        for seq in first..first + count {
            for d in datagrams.iter_mut() {
                d[seq_at..seq_at + 8].copy_from_slice(&seq.to_le_bytes());
            }
            if mode == Mode::Copy {
                // One call per frame, as the receiver hands over a receive buffer.
                reassembler.on_datagrams_at(datagrams.iter().map(Vec::as_slice), 0, 0);
            } else {
                land_frame(&mut reassembler, datagrams, mode);
            }
            while let Some(slot) = reader.claim() {
                let s = slot.seq;
                reader.finish(s);
            }
        }
    };
    // Warm up: every slot written once (pages faulted in), caches settled.
    run(1, 2 * slots as u64);
    let start = Instant::now();
    run(1 + 2 * slots as u64, frames);
    let ns = start.elapsed().as_nanos() as f64;
    let snap = counters.snapshot();
    assert_eq!(snap.frames_incomplete, 0, "every frame arrives whole");
    assert_eq!(snap.frames_complete, frames + 2 * slots as u64, "every frame is published");
    if mode != Mode::Copy {
        // All but the first frame's datagrams land where they belong.
        let landed = snap.placed_by_kernel;
        assert_eq!(landed, snap.datagrams - datagrams.len() as u64, "every later datagram lands in place");
    }
    ns / (frames as f64 * datagrams.len() as f64)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let datagram_bytes: usize = args.get(1).map_or(1472, |a| a.parse().expect("DATAGRAM_BYTES: a number"));
    let slot_counts: Vec<usize> = args
        .get(2)
        .map_or("16,256", String::as_str)
        .split(',')
        .map(|s| s.parse().expect("SLOTS: numbers separated by commas"))
        .collect();
    let frames: u64 = args.get(3).map_or(20000, |a| a.parse().expect("FRAMES: a number"));
    let mode = match args.get(4).map_or("copy", String::as_str) {
        "copy" => Mode::Copy,
        "landed" => Mode::Landed,
        "landed-each" => Mode::LandedEach,
        other => panic!("MODE {other:?}: use copy, landed or landed-each"),
    };
    let huge = match args.get(5).map_or("huge", String::as_str) {
        "huge" => true,
        "base" => false,
        other => panic!("PAGES {other:?}: use huge or base"),
    };
    assert!(datagram_bytes > HEADER_LEN, "DATAGRAM_BYTES must exceed the {HEADER_LEN}-byte header");
    let frame: Vec<u8> = (0..FRAME_BYTES).map(|i| (i * 7 + 3) as u8).collect();
    let mut datagrams = native::encode_frame(1, 1, &frame, (datagram_bytes - HEADER_LEN) as u32, 0);
    let seq_at = frame_seq_offset();
    println!(
        "{} datagrams of {datagram_bytes} B per 64 KiB frame, {frames} frames, {ROUNDS} rounds, ring in {} pages",
        datagrams.len(),
        if huge { "huge" } else { "base" }
    );
    println!("slots  ring MiB  ns/datagram median  min  max  vs first ring");
    let mut first_median = None;
    for &slots in &slot_counts {
        let mut ns: Vec<f64> =
            (0..ROUNDS).map(|_| round(&mut datagrams, seq_at, slots, frames, mode, huge)).collect();
        ns.sort_by(f64::total_cmp);
        let median = ns[ROUNDS / 2];
        let baseline = *first_median.get_or_insert(median);
        println!(
            "{slots:>5}  {:>8.1}  {:>19.1}  {:>4.1}  {:>4.1}  {:>13.2}",
            (slots * FRAME_BYTES) as f64 / (1 << 20) as f64,
            median,
            ns[0],
            ns[ROUNDS - 1],
            median / baseline
        );
    }
}
