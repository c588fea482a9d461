//! The emulated HSB sensor (`frameloop send --format hsb`): the same paced
//! frames as the native sender, sent as HSB datagrams (`wire::hsb`): frame
//! `k` of the run has counter `k + 1` and the payload `pattern` gives stream
//! 0, sequence `k`, cut into datagrams of `--packet-bytes` (16-byte header
//! included). One stream; no timestamps (the format has none).

use super::{LinkPace, Schedule, wait_until};
use super::{MAX_DATAGRAM_BYTES, Pattern, SendArgs, SendError, SenderStats, open_socket};
use crate::clock::monotonic_ns;
use crate::wire::hsb::{self, HEADER_LEN};
use socket2::Socket;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What `frameloop send` puts on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SendFormat {
    /// frameloop's native datagrams (48-byte header, docs/wire-format.md).
    #[default]
    Native,
    /// The emulated HSB sensor bridge: 16-byte big-endian header (counter,
    /// offset, frame length, last-datagram flag), one stream, for an
    /// appliance with `[handler]` = handlers/hsb_ready.cu (docs/operators.md).
    Hsb,
}

/// The payload of HSB frame `k` (counter `k + 1`): what a receiver checks against.
pub fn hsb_frame_payload(pattern: Pattern, k: u64, frame_bytes: usize) -> Vec<u8> {
    pattern.frame(0, k, frame_bytes)
}

/// The counter of HSB frame `k` of a run (1, 2, ..., skipping 0 on wrap).
pub fn hsb_counter(k: u64) -> u32 {
    (k % u64::from(u32::MAX)) as u32 + 1
}

/// Checks `args` for the HSB format: one stream, datagrams that hold the
/// header and at least one byte, frames of 1 byte to 4 GiB - 1. Returns the
/// payload bytes per datagram.
fn validate(args: &SendArgs) -> Result<usize, SendError> {
    if args.streams != 1 {
        return Err(SendError::HsbStreams { streams: args.streams });
    }
    if args.packet_bytes <= HEADER_LEN || args.packet_bytes > MAX_DATAGRAM_BYTES {
        return Err(SendError::HsbPacketBytes { packet_bytes: args.packet_bytes });
    }
    args.validate_pacing()?;
    if args.frame_bytes == 0 || u32::try_from(args.frame_bytes).is_err() {
        return Err(SendError::FrameBytes { frame_bytes: args.frame_bytes });
    }
    let chunk = args.packet_bytes - HEADER_LEN;
    args.validate_link(args.frame_bytes.div_ceil(chunk as u64), HEADER_LEN)?;
    Ok(chunk)
}

/// Runs the HSB sensor as `args` says until the count or duration is reached
/// or `stop` is raised.
pub fn run_hsb_sender(
    args: &SendArgs,
    stop: &AtomicBool,
    progress: impl FnMut(&SenderStats),
) -> Result<SenderStats, SendError> {
    validate(args)?;
    let socket = open_socket(args.destination()?, args.bind)?;
    run_hsb_sender_on(socket, args, stop, progress)
}

/// [`run_hsb_sender`] over a socket the caller opened and connected.
pub fn run_hsb_sender_on(
    socket: Socket,
    args: &SendArgs,
    stop: &AtomicBool,
    mut progress: impl FnMut(&SenderStats),
) -> Result<SenderStats, SendError> {
    let chunk = validate(args)?;
    let link = args.link_pace();
    let frame_bytes = args.frame_bytes as usize;
    let schedule =
        Schedule::new(monotonic_ns(), args.rate, args.count, args.duration.map(Duration::from_secs_f64));
    let mut stats =
        SenderStats { packets_per_frame: frame_bytes.div_ceil(chunk) as u32, ..SenderStats::default() };
    let mut next_progress = schedule.start_ns() + 500_000_000;
    let mut k = 0u64;
    while !schedule.is_past_end(k) {
        let payload = hsb_frame_payload(args.pattern, k, frame_bytes);
        let datagrams = hsb::encode_frame(hsb_counter(k), &payload, chunk);
        let Some(woke) = wait_until(schedule.due_ns(k), stop) else { break };
        let mut wire_before = 0;
        let mut link_lag_ns = 0;
        for d in &datagrams {
            if let Some(link) = link {
                let due = link.due_ns(woke, wire_before);
                let Some(sent_at) = wait_until(due, stop) else {
                    stats.errors.abandoned_packets += 1;
                    continue;
                };
                link_lag_ns = link_lag_ns.max(sent_at.saturating_sub(due));
                wire_before += LinkPace::wire_bytes(d.len() as u64, 1);
            }
            if send_one(&socket, d, stop, &mut stats)? {
                stats.packets += 1;
                stats.bytes += d.len() as u64;
            }
        }
        stats.frames += 1;
        if let Some(link) = link {
            // Every datagram's link bytes are in `wire_before` by now.
            stats.link_lag(link_lag_ns, link.link_ns(wire_before));
        }
        k += 1;
        if woke >= next_progress {
            next_progress = woke + 500_000_000;
            progress(&finish(&stats, schedule.start_ns()));
        }
    }
    Ok(finish(&stats, schedule.start_ns()))
}

/// Sends one datagram, retrying while the kernel has no buffer space.
/// Returns whether it was sent (a refusal by the destination is counted).
fn send_one(
    socket: &Socket,
    d: &[u8],
    stop: &AtomicBool,
    stats: &mut SenderStats,
) -> Result<bool, SendError> {
    loop {
        match socket.send(d) {
            Ok(_) => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                stats.errors.refused_packets += 1;
                return Ok(false);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => stats.errors.interrupted_retries += 1,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stats.errors.eagain_retries += 1,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => stats.errors.enobufs_retries += 1,
            Err(source) => return Err(SendError::Send { source }),
        }
        if stop.load(Ordering::Relaxed) {
            stats.errors.abandoned_packets += 1;
            return Ok(false);
        }
        std::thread::yield_now();
    }
}

/// The run's rates at this moment.
fn finish(stats: &SenderStats, start_ns: u64) -> SenderStats {
    let mut s = stats.clone();
    s.elapsed_s = monotonic_ns().saturating_sub(start_ns) as f64 / 1e9;
    if s.elapsed_s > 0.0 {
        s.frames_per_s = s.frames as f64 / s.elapsed_s;
        s.packets_per_s = s.packets as f64 / s.elapsed_s;
        s.gbit_per_s = s.bytes as f64 * 8.0 / s.elapsed_s / 1e9;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_start_at_one_and_skip_zero() {
        assert_eq!(hsb_counter(0), 1);
        assert_eq!(hsb_counter(41), 42);
        assert_eq!(hsb_counter(u64::from(u32::MAX) - 1), u32::MAX);
        assert_eq!(hsb_counter(u64::from(u32::MAX)), 1);
    }
}
