//! `frameloop record`: receive UDP datagrams on a socket of its own and
//! write them, with nanosecond receive times, to a pcapng file.

use super::CaptureError;
use super::tap::{DatagramTap, PcapngRecorder, RecorderStats};
use crate::clock;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Arguments of `frameloop record`.
#[derive(Debug, Clone)]
pub struct RecordArgs {
    /// pcapng file to write (tcpdump, tshark and Wireshark read it).
    pub out: PathBuf,
    /// Stop after this many seconds (default: until SIGINT/SIGTERM).
    pub duration: Option<f64>,
    /// Stop after this many datagrams.
    pub count: Option<u64>,
    /// Local address and port to receive on.
    pub bind: SocketAddr,
}

/// What a recording wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSummary {
    pub stats: RecorderStats,
    /// The address the socket was bound to (useful with port 0).
    pub local_addr: SocketAddr,
}

/// Receives on `args.bind` until the duration or count is reached or `stop`
/// is raised, recording every datagram. `on_bound` is called once with the
/// bound address before the first receive (tests use it to start a sender).
pub fn record(
    args: &RecordArgs,
    stop: &AtomicBool,
    on_bound: impl FnOnce(SocketAddr),
) -> Result<RecordSummary, CaptureError> {
    if let Some(d) = args.duration
        && !(d.is_finite() && d > 0.0)
    {
        return Err(CaptureError::BadArgument {
            arg: "--duration",
            message: format!("{d} is not a positive number of seconds"),
        });
    }
    let socket =
        UdpSocket::bind(args.bind).map_err(|source| CaptureError::Bind { addr: args.bind, source })?;
    let sock2 = socket2::SockRef::from(&socket);
    // A large buffer rides out disk stalls; the kernel caps it at rmem_max.
    let _ = sock2.set_recv_buffer_size(8 << 20);
    socket.set_read_timeout(Some(Duration::from_millis(50)))?;
    let local_addr = socket.local_addr()?;
    let mut recorder = PcapngRecorder::create(&args.out)?;
    on_bound(local_addr);
    let deadline = args.duration.map(|d| clock::monotonic_ns() + (d * 1e9) as u64);
    let mut buf = vec![0u8; 65536];
    let mut received = 0u64;
    while !stop.load(Ordering::Acquire)
        && deadline.is_none_or(|d| clock::monotonic_ns() < d)
        && args.count.is_none_or(|c| received < c)
    {
        match socket.recv_from(&mut buf) {
            Ok((n, src)) => {
                received += 1;
                recorder.on_datagram(src, local_addr, &buf[..n], clock::realtime_ns());
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(CaptureError::Io(e)),
        }
    }
    let (stats, _) = recorder.finish()?;
    Ok(RecordSummary { stats, local_addr })
}
