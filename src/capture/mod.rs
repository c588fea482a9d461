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
pub enum CaptureError {
    #[error("cannot open capture {path}: {source}; check the path and its permissions")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("cannot create {path}: {source}; check that the directory exists and is writable")]
    Create { path: PathBuf, source: std::io::Error },
    #[error("I/O error on the capture: {0}")]
    Io(#[from] std::io::Error),
    #[error(
        "not a pcap or pcapng file (starts with {magic:02x?}); record with `tcpdump -w FILE`, `tshark -w FILE` or `frameloop record`"
    )]
    NotACapture { magic: [u8; 4] },
    #[error(
        "capture ends inside a {what} at byte {offset}: the file is truncated (was the capture stopped cleanly?); packets before it were read"
    )]
    Truncated { offset: u64, what: &'static str },
    #[error("capture is corrupt at byte {offset}: {message}")]
    Corrupt { offset: u64, message: String },
    #[error(
        "block or record of {len} bytes at byte {offset} exceeds the {limit}-byte limit: the capture is corrupt"
    )]
    BlockTooLarge { offset: u64, len: u64, limit: usize },
    #[error("cannot bind UDP socket {addr}: {source}; pick a free port or address (--bind)")]
    Bind { addr: std::net::SocketAddr, source: std::io::Error },
    #[error("invalid argument {arg}: {message}")]
    BadArgument { arg: &'static str, message: String },
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
