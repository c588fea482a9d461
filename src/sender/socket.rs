//! The UDP transmit path: one connected socket; each frame goes out in
//! `sendmmsg` batches, either one datagram per message or, with UDP GSO
//! (`UDP_SEGMENT`), several equal-size datagrams per message that the kernel
//! cuts apart. Headers and payload are gathered with iovecs, never copied.

use super::frame::{FrameBuffer, MAX_DATAGRAM_BYTES};
use super::pacing::{LinkPace, wait_until};
use super::{GsoMode, GsoStatus, SendError, SendErrorCounts};
use socket2::Socket;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `UDP_SEGMENT` from linux/udp.h (the libc crate lacks it for glibc).
const UDP_SEGMENT: libc::c_int = 103;
/// Segments the kernel accepts in one GSO send (`UDP_MAX_SEGMENTS`, 64 on
/// kernels before 6.11; later ones accept 128).
const GSO_MAX_SEGMENTS: usize = 64;
/// Messages per `sendmmsg` call (`UIO_MAXIOV`).
const MAX_BATCH: usize = 1024;
/// First and longest wait before retrying a send the kernel refused for lack
/// of buffer space (ENOBUFS/EAGAIN).
const BACKOFF_MIN: Duration = Duration::from_micros(20);
const BACKOFF_MAX: Duration = Duration::from_millis(2);

/// What one frame's transmission achieved.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FrameSent {
    /// Datagrams the kernel accepted.
    pub packets: u64,
    /// Bytes of those datagrams (UDP payload, native headers included).
    pub bytes: u64,
    /// With a link pace: how far behind its time on the link the latest of
    /// the frame's messages left, ns (0: the sender kept the link's pace).
    pub link_lag_ns: u64,
    /// With a link pace: the time the link takes to carry the whole frame, ns.
    pub link_ns: u64,
}

/// Packets `[first, first + count)` of the frame travel in one message.
#[derive(Debug, Clone, Copy)]
struct MessageSpan {
    first: u32,
    count: u32,
    bytes: u32,
}

/// Where a frame being sent stands on its link.
#[derive(Debug, Clone, Copy)]
struct FramePace {
    link: LinkPace,
    /// Monotonic time the frame's first datagram left.
    start_ns: u64,
    /// Link bytes of the frame's datagrams before the first planned one.
    wire_bytes_before: u64,
}

enum Attempt {
    Done,
    /// The kernel refused a GSO message; packets from `first_unsent` on are not sent.
    GsoRefused {
        first_unsent: u32,
        source: io::Error,
    },
}

/// A connected UDP socket and the reusable message tables for sending frames.
pub struct Transmitter {
    socket: Socket,
    mode: GsoMode,
    gso: GsoStatus,
    /// Datagrams per message: > 1 only while `gso == GsoStatus::Active`.
    segments_per_message: usize,
    spans: Vec<MessageSpan>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

fn set_udp_segment(socket: &Socket, gso_size: libc::c_int) -> io::Result<()> {
    // SAFETY: the pointer and length describe a live c_int, as the option expects.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_UDP,
            UDP_SEGMENT,
            (&gso_size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Sends `msgs` with one `sendmmsg` call; returns how many went out.
///
/// # Safety
/// Every message's `msg_iov` must point to `msg_iovlen` iovecs, each
/// describing readable memory that stays alive for the call; `msg_name` and
/// `msg_control` must be null with zero lengths.
unsafe fn sendmmsg(socket: &Socket, msgs: &mut [libc::mmsghdr]) -> io::Result<usize> {
    debug_assert!(msgs.len() <= MAX_BATCH);
    // SAFETY: `msgs` is a valid mutable slice; the caller guarantees the
    // pointers inside it. The kernel only writes `msg_len` of each entry.
    let n = unsafe { libc::sendmmsg(socket.as_raw_fd(), msgs.as_mut_ptr(), msgs.len() as libc::c_uint, 0) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

/// Waits `backoff` (doubling it for next time) unless `stop` is raised; false if stopped.
fn back_off(backoff: &mut Duration, stop: &AtomicBool) -> bool {
    if stop.load(Ordering::Relaxed) {
        return false;
    }
    std::thread::sleep(*backoff);
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
    true
}

impl Transmitter {
    /// Takes a bound, connected UDP socket and turns GSO on as `mode` asks
    /// for datagrams of `packet_bytes` bytes.
    pub fn new(socket: Socket, mode: GsoMode, packet_bytes: usize) -> Result<Self, SendError> {
        let mut tx = Transmitter {
            socket,
            mode,
            gso: GsoStatus::Off,
            segments_per_message: 1,
            spans: Vec::new(),
            iov: Vec::new(),
            msgs: Vec::new(),
        };
        if mode == GsoMode::Off {
            return Ok(tx);
        }
        let segments = GSO_MAX_SEGMENTS.min(MAX_DATAGRAM_BYTES / packet_bytes);
        if segments < 2 {
            if mode == GsoMode::On {
                return Err(SendError::GsoPacketTooLarge { packet_bytes, max: MAX_DATAGRAM_BYTES / 2 });
            }
            tx.gso = GsoStatus::NotUseful;
            return Ok(tx);
        }
        match set_udp_segment(&tx.socket, packet_bytes as libc::c_int) {
            Ok(()) => {
                tx.gso = GsoStatus::Active;
                tx.segments_per_message = segments;
            }
            Err(source) if mode == GsoMode::On => return Err(SendError::GsoRefused { source }),
            Err(source) => {
                tracing::info!("UDP GSO unavailable ({source}); sending one datagram per message");
                tx.gso = GsoStatus::Unsupported;
            }
        }
        Ok(tx)
    }

    /// Whether UDP segmentation offload is in use.
    pub fn gso(&self) -> GsoStatus {
        self.gso
    }

    /// The UDP socket.
    pub fn socket(&self) -> &Socket {
        &self.socket
    }

    /// Sends every packet of `frame`. Transient refusals (ENOBUFS, EAGAIN,
    /// EINTR) are retried with backoff and counted in `errors`; packets that
    /// cannot be delivered (ECONNREFUSED, or `stop` raised while waiting to
    /// retry) are counted there too. If the kernel refuses GSO in `auto` mode
    /// the rest of the run goes without it. With a `link`, each message
    /// leaves when that link would have carried the frame's datagrams before
    /// it, the first at `start_ns` (monotonic).
    pub fn send_frame(
        &mut self,
        frame: &FrameBuffer,
        link: Option<LinkPace>,
        start_ns: u64,
        stop: &AtomicBool,
        errors: &mut SendErrorCounts,
    ) -> Result<FrameSent, SendError> {
        let count = frame.geometry().packet_count();
        let link_ns = link.map_or(0, |link| link.link_ns(self.wire_before(frame, count)));
        let mut sent = FrameSent { link_ns, ..FrameSent::default() };
        let mut first = 0;
        loop {
            self.plan(frame, first);
            let pace = link.map(|link| FramePace {
                link,
                start_ns,
                wire_bytes_before: self.wire_before(frame, first),
            });
            match self.attempt(frame, pace, stop, errors, &mut sent)? {
                Attempt::Done => return Ok(sent),
                Attempt::GsoRefused { first_unsent, source } => {
                    if self.mode == GsoMode::On {
                        return Err(SendError::GsoRefused { source });
                    }
                    tracing::warn!("the kernel refused a UDP GSO send ({source}); continuing without GSO");
                    // Best effort: messages of one datagram never segment, so a
                    // failure to clear the option changes nothing.
                    let _ = set_udp_segment(&self.socket, 0);
                    self.gso = GsoStatus::RefusedOnSend;
                    self.segments_per_message = 1;
                    errors.gso_fallbacks += 1;
                    first = first_unsent;
                }
            }
        }
    }

    /// Splits packets `first..` of the frame into messages.
    fn plan(&mut self, frame: &FrameBuffer, first: u32) {
        let count = frame.geometry().packet_count();
        self.spans.clear();
        let mut p = first;
        while p < count {
            let n = (self.segments_per_message as u32).min(count - p);
            let bytes =
                (p..p + n).map(|i| frame.packet(i).1.len() as u32 + frame.packet(i).0.len() as u32).sum();
            self.spans.push(MessageSpan { first: p, count: n, bytes });
            p += n;
        }
    }

    /// Link bytes of the frame's packets before packet `first`.
    fn wire_before(&self, frame: &FrameBuffer, first: u32) -> u64 {
        let payload: u64 =
            (0..first).map(|i| (frame.packet(i).0.len() + frame.packet(i).1.len()) as u64).sum();
        LinkPace::wire_bytes(payload, u64::from(first))
    }

    /// Sends the planned messages, gathering each packet from `frame`; with
    /// a `pace`, one message per call, each at its time on the link.
    fn attempt(
        &mut self,
        frame: &FrameBuffer,
        pace: Option<FramePace>,
        stop: &AtomicBool,
        errors: &mut SendErrorCounts,
        sent: &mut FrameSent,
    ) -> Result<Attempt, SendError> {
        // Build all iovecs first, then the messages that point into them, so
        // the iovec vector does not move once pointers are taken.
        self.iov.clear();
        for span in &self.spans {
            for i in span.first..span.first + span.count {
                let (header, payload) = frame.packet(i);
                for part in [&header[..], payload] {
                    self.iov.push(libc::iovec {
                        iov_base: part.as_ptr() as *mut libc::c_void,
                        iov_len: part.len(),
                    });
                }
            }
        }
        self.msgs.clear();
        let mut at = 0usize;
        for span in &self.spans {
            // SAFETY: an all-zero mmsghdr is valid: null pointers, zero lengths.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            let parts = 2 * span.count as usize;
            debug_assert!(at + parts <= self.iov.len());
            // SAFETY: `at + parts <= iov.len()`, so the pointer stays in bounds.
            m.msg_hdr.msg_iov = unsafe { self.iov.as_mut_ptr().add(at) };
            m.msg_hdr.msg_iovlen = parts;
            at += parts;
            self.msgs.push(m);
        }

        let mut next = 0usize;
        let mut backoff = BACKOFF_MIN;
        let mut wire_before = pace.map_or(0, |p| p.wire_bytes_before);
        let mut paced_up_to = 0usize;
        while next < self.msgs.len() {
            if let Some(p) = pace {
                // Messages before `next` have been accounted for on the link.
                for span in &self.spans[paced_up_to..next] {
                    wire_before += LinkPace::wire_bytes(u64::from(span.bytes), u64::from(span.count));
                }
                paced_up_to = next;
                let due = p.link.due_ns(p.start_ns, wire_before);
                let Some(woke) = wait_until(due, stop) else {
                    errors.abandoned_packets +=
                        self.spans[next..].iter().map(|s| s.count as u64).sum::<u64>();
                    return Ok(Attempt::Done);
                };
                sent.link_lag_ns = sent.link_lag_ns.max(woke.saturating_sub(due));
            }
            let end = if pace.is_some() { next + 1 } else { self.msgs.len().min(next + MAX_BATCH) };
            // SAFETY: each message points to iovecs built above from `frame`,
            // which is borrowed for this whole call; names and control are null.
            match unsafe { sendmmsg(&self.socket, &mut self.msgs[next..end]) } {
                Ok(n) => {
                    for span in &self.spans[next..next + n] {
                        sent.packets += span.count as u64;
                        sent.bytes += span.bytes as u64;
                    }
                    next += n;
                    backoff = BACKOFF_MIN;
                }
                Err(e) => match e.raw_os_error().unwrap_or(0) {
                    libc::EINTR => errors.interrupted_retries += 1,
                    code @ (libc::ENOBUFS | libc::EAGAIN) => {
                        if code == libc::ENOBUFS {
                            errors.enobufs_retries += 1;
                        } else {
                            errors.eagain_retries += 1;
                        }
                        if !back_off(&mut backoff, stop) {
                            errors.abandoned_packets +=
                                self.spans[next..].iter().map(|s| s.count as u64).sum::<u64>();
                            return Ok(Attempt::Done);
                        }
                    }
                    libc::ECONNREFUSED => {
                        // An ICMP port-unreachable came back for an earlier
                        // datagram: nobody listens yet. This message is not sent.
                        errors.refused_packets += self.spans[next].count as u64;
                        next += 1;
                    }
                    // GSO needs checksum offload and segments that fit the
                    // route's MTU; without them the kernel refuses the send.
                    libc::EINVAL | libc::EIO | libc::EOPNOTSUPP | libc::EMSGSIZE
                        if self.gso == GsoStatus::Active && self.spans[next].count > 1 =>
                    {
                        return Ok(Attempt::GsoRefused { first_unsent: self.spans[next].first, source: e });
                    }
                    libc::EMSGSIZE => {
                        return Err(SendError::MessageSize {
                            packet_bytes: frame.geometry().packet_bytes(),
                            source: e,
                        });
                    }
                    _ => return Err(SendError::Send { source: e }),
                },
            }
        }
        Ok(Attempt::Done)
    }
}
