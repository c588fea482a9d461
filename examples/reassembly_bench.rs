//! The reassembler's own cost per datagram, in memory (no socket, no
//! kernel): frames cut into datagrams of one size are fed to a
//! [`Reassembler`] writing into a host ring, and a consumer takes each
//! frame as it is published. What it measures is the receiving thread's
//! work after `recvmmsg`: parsing, checks, the copy into the slot and
//! publication, for a ring that stays in the CPU's cache and one that does
//! not. Each frame's datagrams go in one call, as the receiver hands over
//! one receive buffer.
//!
//! `cargo run --release --example reassembly_bench -- [DATAGRAM_BYTES] [SLOTS,SLOTS..] [FRAMES]`
//! (defaults: 1472, 16,256, 20000 frames of 64 KiB; five rounds each,
//! the median and the spread printed, and each ring's median against the
//! first ring's: with 16 slots of 64 KiB the ring stays in the cache, so
//! that ratio is what a cold slot costs).

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

/// Nanoseconds per datagram over `frames` frames into a ring of `slots` slots.
fn round(datagrams: &mut [Vec<u8>], seq_at: usize, slots: usize, frames: u64) -> f64 {
    let mem = HostMemory::new(ring_bytes(slots, FRAME_BYTES).expect("ring size")).expect("ring memory");
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
            // One call per frame, as the receiver hands over a receive buffer.
            reassembler.on_datagrams_at(datagrams.iter().map(Vec::as_slice), 0, 0);
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
    assert!(datagram_bytes > HEADER_LEN, "DATAGRAM_BYTES must exceed the {HEADER_LEN}-byte header");
    let frame: Vec<u8> = (0..FRAME_BYTES).map(|i| (i * 7 + 3) as u8).collect();
    let mut datagrams = native::encode_frame(1, 1, &frame, (datagram_bytes - HEADER_LEN) as u32, 0);
    let seq_at = frame_seq_offset();
    println!(
        "{} datagrams of {datagram_bytes} B per 64 KiB frame, {frames} frames, {ROUNDS} rounds",
        datagrams.len()
    );
    println!("slots  ring MiB  ns/datagram median  min  max  vs first ring");
    let mut first_median = None;
    for &slots in &slot_counts {
        let mut ns: Vec<f64> = (0..ROUNDS).map(|_| round(&mut datagrams, seq_at, slots, frames)).collect();
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
