//! Fuzz target: any bytes as a sequence of RFC 4175 packets (a 2-byte
//! big-endian length before each) into the parser and the frame assembler.
//! Seeds: `fuzz/seeds/rtp4175` (also run by `tests/capture_seeds.rs`).
#![no_main]

use frameloop::ring::layout::ring_bytes;
use frameloop::ring::{FrameRing, HostMemory, OverrunPolicy};
use frameloop::rtp::{RtpAssembler, RtpConfig, Sampling};
use frameloop::wire::rtp4175;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = rtp4175::parse(data);
    let settings = RtpConfig::inline(Sampling::Ycbcr422, 8, 64, 8).resolve().expect("valid geometry");
    let cap = settings.geometry.frame_bytes();
    let mem = HostMemory::new(ring_bytes(4, cap)).expect("ring memory");
    let ring = FrameRing::new(Box::new(mem), 4, cap, OverrunPolicy::Latest).expect("ring");
    let mut assembler = RtpAssembler::new(settings, ring.writer().expect("writer")).expect("assembler");
    let mut rest = data;
    let mut t = 0;
    while let [hi, lo, tail @ ..] = rest {
        let n = (u16::from_be_bytes([*hi, *lo]) as usize).min(tail.len());
        assembler.on_datagram(&tail[..n], t);
        t += 1_000_000;
        rest = &tail[n..];
    }
    assembler.flush(t);
});
