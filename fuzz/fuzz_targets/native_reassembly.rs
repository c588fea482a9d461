//! Fuzz target: any bytes as a sequence of native datagrams (a 2-byte
//! big-endian length before each) fed through `Reassembler::on_datagram_at`
//! (or, runs of them, through `Reassembler::on_datagrams_at`, as the UDP
//! receiver hands over a receive buffer) into a small host-memory frame
//! ring, as the UDP receiver feeds it (each handled up to 7 ms after it
//! arrived, then a tick: by the clock, or by the latest arrival as while
//! datagrams still wait); each
//! datagram also through `native::parse_split` (the one-copy receive path's
//! parse of a header whose payload lies elsewhere), which must agree with
//! `native::parse`.
//! Seeds: `fuzz/seeds/native_reassembly`.
#![no_main]

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
        let lag = datagram.last().copied().unwrap_or(0) as u64;
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
