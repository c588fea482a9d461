//! Fuzz target: any bytes as a sequence of HSB datagrams (a 2-byte
//! big-endian length before each; length 0 stands for the receiver's idle
//! flush) fed through `HsbDma::on_datagram` into a small host-memory ring,
//! as the emulated sensor bridge's receiver feeds it. Every datagram is
//! counted exactly once (written, malformed, too large or stale), and one
//! that `wire::hsb::parse` accepts keeps its payload inside the frame it
//! names, with the last-byte flag set exactly at the frame's end.
//! Seeds: `fuzz/seeds/hsb_dma`.
#![no_main]

use frameloop::ingest::hsb::{HsbCounters, HsbDma};
use frameloop::ring::layout::ring_bytes;
use frameloop::ring::{FrameRing, HostMemory, OverrunPolicy};
use frameloop::wire::hsb;
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

#[path = "../common/framing.rs"]
mod framing;

const SLOTS: usize = 4;
const CAPACITY: usize = 4096;

fn handled(c: &HsbCounters) -> u64 {
    c.datagrams + c.malformed + c.too_large + c.stale
}

fuzz_target!(|data: &[u8]| {
    let mem = HostMemory::new(ring_bytes(SLOTS, CAPACITY).expect("ring size")).expect("host ring memory");
    let ring = Arc::new(FrameRing::new(Box::new(mem), SLOTS, CAPACITY, OverrunPolicy::Every).expect("ring"));
    let mut dma = HsbDma::new(Arc::clone(&ring)).expect("a host ring takes the bridge's writes");
    let mut fed = 0u64;
    for datagram in framing::datagrams(data) {
        if datagram.is_empty() {
            dma.flush();
            continue;
        }
        if let Ok((h, payload)) = hsb::parse(datagram) {
            let end = h.offset as u64 + payload.len() as u64;
            assert!(h.counter != 0, "counter 0 parsed");
            assert!(end <= h.frame_len as u64, "payload past the frame's end parsed");
            assert_eq!(h.last, end == h.frame_len as u64, "last-byte flag");
            assert_eq!(payload.len(), datagram.len() - hsb::HEADER_LEN);
        }
        dma.on_datagram(datagram);
        fed += 1;
        assert_eq!(handled(&dma.counters()), fed, "every datagram counted once: {:?}", dma.counters());
    }
    dma.flush();
    let c = dma.counters();
    assert_eq!(handled(&c), fed, "{c:?}");
});
