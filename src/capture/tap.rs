//! The tap that records every datagram a receiver takes off the socket as
//! pcapng (the [`DatagramTap`] hook itself is ingest's).

use super::CaptureError;
use super::pcapng::PcapngWriter;
pub use crate::ingest::DatagramTap;
use std::io::Write;
use std::net::SocketAddr;

/// What a recorder wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Datagrams written.
    pub recorded: u64,
    /// Bytes of UDP payload written.
    pub payload_bytes: u64,
    /// Datagrams too large for one IP packet (not written).
    pub too_large: u64,
    /// Datagrams not written because an earlier write failed.
    pub not_written: u64,
}

/// A [`DatagramTap`] that writes pcapng. A write error stops recording (the
/// receiver goes on); [`PcapngRecorder::finish`] reports it.
pub struct PcapngRecorder<W: Write + Send> {
    writer: PcapngWriter<W>,
    stats: RecorderStats,
    /// The first write error; once set nothing more is written.
    error: Option<std::io::Error>,
}

impl<W: Write + Send> PcapngRecorder<W> {
    /// Starts a recording (writes the section and interface headers).
    pub fn new(out: W) -> Result<Self, CaptureError> {
        Ok(Self { writer: PcapngWriter::new(out)?, stats: RecorderStats::default(), error: None })
    }

    /// Counters so far.
    pub fn stats(&self) -> RecorderStats {
        self.stats
    }

    /// Flushes and returns the counters, or the first write error.
    pub fn finish(mut self) -> Result<(RecorderStats, W), CaptureError> {
        if let Some(e) = self.error.take() {
            return Err(CaptureError::Io(e));
        }
        let out = self.writer.into_inner()?;
        Ok((self.stats, out))
    }
}

impl PcapngRecorder<std::io::BufWriter<std::fs::File>> {
    /// Creates `path` and starts a recording into it.
    pub fn create(path: &std::path::Path) -> Result<Self, CaptureError> {
        let file = std::fs::File::create(path)
            .map_err(|source| CaptureError::Create { path: path.into(), source })?;
        Self::new(std::io::BufWriter::with_capacity(1 << 20, file))
    }
}

impl<W: Write + Send> DatagramTap for PcapngRecorder<W> {
    fn on_datagram(&mut self, src: SocketAddr, dst: SocketAddr, bytes: &[u8], rx_ns: u64) {
        if self.error.is_some() {
            self.stats.not_written += 1;
            return;
        }
        match self.writer.write_udp(src, dst, bytes, rx_ns) {
            Ok(true) => {
                self.stats.recorded += 1;
                self.stats.payload_bytes += bytes.len() as u64;
            }
            Ok(false) => self.stats.too_large += 1,
            Err(e) => {
                self.stats.not_written += 1;
                self.error = Some(e);
            }
        }
    }
}
