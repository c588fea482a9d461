//! Recorded sensor captures: recording what the appliance receives as
//! pcapng, and replaying pcap/pcapng captures (from tcpdump, tshark,
//! Wireshark or frameloop) into a running appliance or in-process.
//!
//! - [`net`]: link/IP/UDP decoding of captured packets (skips by reason)
//!   and the synthetic IP/UDP headers of recordings.
//! - [`pcapng`]: [`PcapngWriter`], the recording format.
//! - [`reader`]: [`CaptureReader`], pcap and pcapng packet by packet.
//! - [`tap`]: [`DatagramTap`], the hook a receiver calls per datagram, and
//!   [`PcapngRecorder`], the tap that records.
//! - `record`: `frameloop record` (its own socket receiver).
//! - `replay`: `frameloop replay`: filters, pacing, socket and in-process replay.
//!
//! Format notes and the reasons behind them are in `docs/captures.md`.

pub mod net;
pub mod pcapng;
pub mod reader;
pub mod record;
pub mod replay;
pub mod tap;

pub use net::{SkipReason, UdpView};
pub use pcapng::PcapngWriter;
pub use reader::{CaptureFormat, CaptureReader, CapturedPacket};
pub use record::{RecordArgs, RecordSummary, record};
pub use replay::{InProcessSetup, ProcessedFrame, ReplayArgs, ReplaySummary, replay};
pub use tap::{DatagramTap, PcapngRecorder};

use std::path::PathBuf;
use thiserror::Error;

/// Errors of recording and replaying captures, each saying what to do.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CaptureError {
    /// The capture cannot be opened; check the path and its permissions.
    #[error("cannot open capture {path}: {source}; check the path and its permissions")]
    Open { path: PathBuf, source: std::io::Error },
    /// The capture file cannot be created; check that its folder exists and is writable.
    #[error("cannot create {path}: {source}; check that the directory exists and is writable")]
    Create { path: PathBuf, source: std::io::Error },
    /// Reading or writing the capture failed; check the disk and the file.
    #[error("I/O error on the capture: {0}; check the disk and the file")]
    Io(#[from] std::io::Error),
    /// The file is not pcap or pcapng; record with `tcpdump -w`, `tshark -w` or `frameloop record`.
    #[error(
        "not a pcap or pcapng file (starts with {magic:02x?}); record with `tcpdump -w FILE`, `tshark -w FILE` or `frameloop record`"
    )]
    NotACapture { magic: [u8; 4] },
    /// The capture ends inside a block; the packets before it were read (stop captures cleanly).
    #[error(
        "capture ends inside a {what} at byte {offset}: the file is truncated (was the capture stopped cleanly?); packets before it were read"
    )]
    Truncated { offset: u64, what: &'static str },
    /// The capture is corrupt at the named byte; record it again.
    #[error("capture is corrupt at byte {offset}: {message}; record it again")]
    Corrupt { offset: u64, message: String },
    /// A block larger than any capture writes; the capture is corrupt, record it again.
    #[error(
        "block or record of {len} bytes at byte {offset} exceeds the {limit}-byte limit: the capture is corrupt; record it again"
    )]
    BlockTooLarge { offset: u64, len: u64, limit: usize },
    /// The replay's UDP address cannot be bound; pick a free port or address (`--bind`).
    #[error("cannot bind UDP socket {addr}: {source}; pick a free port or address (--bind)")]
    Bind { addr: std::net::SocketAddr, source: std::io::Error },
    /// A command-line argument is invalid (the message names it and the fix).
    #[error("invalid argument {arg}: {message}")]
    BadArgument { arg: &'static str, message: String },
    /// In-process replay cannot start (the message says why and what to change).
    #[error("in-process replay cannot start: {0}")]
    Setup(String),
}

impl CaptureError {
    /// True for errors that describe the capture's content (as opposed to the system).
    pub fn is_bad_capture(&self) -> bool {
        matches!(
            self,
            CaptureError::NotACapture { .. }
                | CaptureError::Truncated { .. }
                | CaptureError::Corrupt { .. }
                | CaptureError::BlockTooLarge { .. }
        )
    }
}
