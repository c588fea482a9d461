//! RTP raw video (RFC 4175) as a second ingest format: frame geometry, a
//! minimal SDP reader, the `[rtp]` config section, and the assembler that
//! writes depacketized frames into the frame ring like native frames.
//!
//! - [`geometry`]: sampling, depth, pixel groups, segment placement.
//! - [`sdp`]: `m=video` and `a=fmtp` of an SDP file.
//! - [`config`]: [`RtpConfig`] (`[rtp]` keys) resolved to [`RtpSettings`].
//! - [`sequence`]: extended sequence numbers, duplicates, reordering, gaps.
//! - [`assembler`]: [`RtpAssembler`], the pure state machine from datagrams to slots.
//! - [`counters`]: [`RtpCounters`], every drop by reason.
//! - [`packetizer`]: [`Packetizer`], frames to packets (for tests and test senders).
//!
//! The wire parser itself is [`crate::wire::rtp4175`].

pub mod assembler;
pub mod config;
pub mod counters;
pub mod geometry;
pub mod packetizer;
pub mod sdp;
pub mod sequence;

pub use assembler::{AssemblerError, RtpAssembler};
pub use config::{RtpConfig, RtpSettings};
pub use counters::{RtpCounter, RtpCounters};
pub use geometry::{Sampling, VideoGeometry};
pub use packetizer::Packetizer;

/// Feeds `data`, read as RFC 4175 packets each preceded by a 2-byte
/// big-endian length, through the parser and an assembler for 8x64 4:2:2
/// 8-bit frames (1 ms apart, each followed by a receiver tick behind its
/// socket), then flushes it. The `rtp4175` fuzz target
/// and its seed-corpus test run exactly this, so they cannot drift apart.
pub fn assemble_length_prefixed(data: &[u8]) -> RtpAssembler {
    use crate::ring::layout::ring_bytes;
    use crate::ring::{FrameRing, HostMemory, OverrunPolicy};
    let _ = crate::wire::rtp4175::parse(data);
    let settings =
        RtpConfig::inline(Sampling::Ycbcr422, 8, 64, 8).resolve().expect("constant geometry is valid");
    let cap = settings.geometry.frame_bytes();
    let mem = HostMemory::new(ring_bytes(4, cap).expect("a small constant ring"))
        .expect("a small anonymous mapping");
    let ring = FrameRing::new(Box::new(mem), 4, cap, OverrunPolicy::Latest).expect("constant ring geometry");
    let writer = ring.writer().expect("a new ring's writer is free");
    let mut assembler = RtpAssembler::new(settings, writer).expect("the geometry fits the ring");
    let mut rest = data;
    let mut t = 0;
    while let [hi, lo, tail @ ..] = rest {
        let n = (u16::from_be_bytes([*hi, *lo]) as usize).min(tail.len());
        assembler.on_datagram(&tail[..n], t);
        // The receiver's tick while datagrams still wait, half a millisecond on.
        assembler.on_tick_behind(t, t + 500_000);
        t += 1_000_000;
        rest = &tail[n..];
    }
    assembler.flush(t);
    assembler
}
