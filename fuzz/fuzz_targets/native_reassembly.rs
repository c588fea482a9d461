//! Fuzz target: any bytes as a sequence of native datagrams (a 2-byte
//! big-endian length before each) fed through `Reassembler::on_datagram_at`
//! (or, runs of them, through `Reassembler::on_datagrams_at`, as the UDP
//! receiver hands over a receive buffer) into a small host-memory frame
//! ring, as the UDP receiver feeds it (each handled up to 7 ms after it
//! arrived, then a tick: by the clock, or by the latest arrival as while
//! datagrams still wait); each
//! datagram also through `native::parse_split` (the one-copy receive path's
//! parse of a header whose payload lies elsewhere), which must agree with
//! `native::parse`. Runs handed over together may also go the one-copy
//! way: a landing plan of the shape the input picks (receive buffers and
//! datagrams per buffer), each datagram's payload written at the next
//! target its size fits as the kernel would, whatever its header says,
//! the landed ones handed over buffer by buffer and the rest copied; and
//! each of those datagrams, as a receive buffer of its own, is laid out
//! (`landing::message_layout`) so that exactly one datagram is handed
//! over, whatever its length (zero-length and one-byte ones included).
//! Seeds: `fuzz/seeds/native_reassembly`.
#![no_main]

use frameloop::ingest::landing::{LandingShape, MessageLayout, message_layout};
use frameloop::ingest::{FrameAssembler, Reassembler, ReassemblyConfig};
use frameloop::ring::layout::ring_bytes;
use frameloop::ring::{FrameRing, HostMemory, OverrunPolicy};
use frameloop::wire::native;
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

#[path = "../common/framing.rs"]
mod framing;

const SLOTS: usize = 4;
const CAPACITY: usize = 4096;
const MS: u64 = 1_000_000;

fuzz_target!(|data: &[u8]| {
    let mem = HostMemory::new(ring_bytes(SLOTS, CAPACITY).expect("ring size")).expect("host ring memory");
    let ring = FrameRing::new(Box::new(mem), SLOTS, CAPACITY, OverrunPolicy::Every).expect("ring");
    let mut reader = ring.reader().expect("one reader");
    let cfg = ReassemblyConfig {
        frame_timeout_ms: 5,
        max_frames_in_flight: 3,
        max_packets_per_frame: 256,
        restart_window: 8,
    };
    let mut reassembler = Reassembler::new(cfg, ring.writer().expect("one writer"), Arc::default());
    let mut rx = 1_000 * MS;
    let mut now = rx;
    let mut fed = 0u64;
    let mut buffer: Vec<&[u8]> = Vec::new();
    for datagram in framing::datagrams(data) {
        // Arrivals move on by the datagram's first byte (ms), so timeouts
        // happen; its last byte says how far behind the receiver handles it.
        rx += datagram.first().copied().unwrap_or(0) as u64 / 32 * MS;
        // An empty datagram has no last byte: it is held back and handed
        // over the one-copy way (0x30), so that it can sit inside a run.
        let lag = datagram.last().copied().unwrap_or(0x30) as u64;
        now = now.max(rx + lag % 8 * MS);
        if datagram.len() >= native::HEADER_LEN {
            let (head, payload) = datagram.split_at(native::HEADER_LEN);
            let split = native::parse_split(head, payload.len());
            let plain_header = u16::from_le_bytes([head[6], head[7]]) as usize == native::HEADER_LEN;
            match native::parse(datagram) {
                _ if !plain_header => assert!(split.is_err(), "an extended header parsed split"),
                Ok((h, _)) => assert_eq!(split, Ok(h), "split parse disagrees"),
                Err(e) => assert_eq!(split.map_err(|e| e.kind()), Err(e.kind()), "split parse disagrees"),
            }
        }
        fed += 1;
        // Bit 4 of the last byte holds the datagram back, to be handed over
        // in one call with those after it.
        buffer.push(datagram);
        if lag & 16 != 0 {
            continue;
        }
        match buffer.as_slice() {
            [one] => reassembler.on_datagram_at(one, rx, now),
            // Bit 5: one-copy receive, bits 6-7 the datagrams a buffer holds.
            _ if lag & 32 != 0 => {
                let per_buffer = [1, 2, 7, usize::MAX][(lag >> 6) as usize & 3];
                land(
                    &mut reassembler,
                    &buffer,
                    LandingShape { buffers: buffer.len(), datagrams_per_buffer: per_buffer },
                    rx,
                    now,
                );
            }
            _ => reassembler.on_datagrams_at(buffer.drain(..), rx, now),
        }
        buffer.clear();
        if lag & 8 == 0 {
            reassembler.on_tick_behind(rx, now);
        } else {
            reassembler.on_tick(now);
        }
        while let Some(slot) = reader.claim() {
            assert!(slot.payload.len() <= CAPACITY, "a slot payload larger than the ring's capacity");
            let seq = slot.seq;
            reader.finish(seq);
        }
    }
    reassembler.on_datagrams_at(buffer.drain(..), rx, now);
    reassembler.flush(now + 100 * MS);
    while let Some(slot) = reader.claim() {
        let seq = slot.seq;
        reader.finish(seq);
    }
    assert_eq!(reassembler.frames_in_flight(), 0);
    let counts = reassembler.counters().snapshot();
    assert_eq!(counts.datagrams, fed, "every datagram is counted");
    assert_eq!(counts.datagrams_accounted(), fed, "every datagram is kept or dropped for one reason");
});

/// Hands `datagrams` over the one-copy way, as the UDP receiver does with
/// what one receive call returned: a plan of `shape`; each datagram with a
/// plain header whose payload fits the next target (its length, or shorter
/// for a target's last datagram) written there, whatever its header says,
/// until one does not fit; the landed ones handed over a receive buffer at
/// a time, the rest copied.
fn land(reassembler: &mut Reassembler, datagrams: &[&[u8]], shape: LandingShape, rx: u64, now: u64) {
    let plan = reassembler.plan_landing(shape, 1);
    let planned = plan.groups().checked_sub(1).map_or(0, |last| plan.group(last).end);
    // Each datagram as the receive buffer of its own that the kernel would
    // fill over the next target: its layout hands over exactly the one
    // datagram it is, landed, in the tail or gathered (an empty one too).
    for (k, d) in datagrams.iter().enumerate() {
        let predicted = (k < planned).then(|| plan.target(k).datagram_bytes());
        let mut head = [0u8; native::HEADER_LEN];
        let n = d.len().min(native::HEADER_LEN);
        head[..n].copy_from_slice(&d[..n]);
        let handed = match message_layout(d.len(), None, predicted.into_iter(), |_| head) {
            MessageLayout::Aligned { landed, tail, .. } => landed + usize::from(tail > 0),
            MessageLayout::Gather => 1,
        };
        assert_eq!(handed, 1, "a receive buffer of {} bytes not handed over as one datagram", d.len());
    }
    let mut landed = 0;
    while landed < datagrams.len().min(planned) {
        let d = datagrams[landed];
        let fits = d.len() >= native::HEADER_LEN
            && u16::from_le_bytes([d[6], d[7]]) as usize == native::HEADER_LEN
            && d.len() - native::HEADER_LEN <= plan.target(landed).len;
        if !fits {
            break;
        }
        // SAFETY: the plan was just made, so its slots are reserved and
        // unpublished, and nothing else touches them until it is handed over.
        unsafe { plan.land(landed, &d[native::HEADER_LEN..]) };
        landed += 1;
    }
    let groups = reassembler.landing_mut().groups();
    for g in 0..groups {
        let group = reassembler.landing_mut().group(g);
        if group.start >= landed {
            break;
        }
        let heads = (group.start..group.end.min(landed)).map(|k| (k, &datagrams[k][..native::HEADER_LEN]));
        reassembler.on_landed_run_at(heads, rx, now);
    }
    reassembler.on_datagrams_at(datagrams[landed..].iter().copied(), rx, now);
    reassembler.end_landing();
}
