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
