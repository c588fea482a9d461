//! The actuation sender: the host thread that serves a loop's transmit ring.
//! It waits for messages (spinning on the ring's head, as the result thread
//! spins on results), sends each from its slot to its destinations with
//! `sendmmsg` (the kernel's copy is the only one), then gives the slots back.
//! It forms nothing and never makes the loop wait: a failing send, a rate
//! over `max_rate` or a reply with no known sensor is counted per output and
//! logged at most every [`LOG_EVERY`].

use super::config::{ActuationPlan, Destination};
use super::ring::{TxMessage, TxRing};
use crate::clock;
use crate::ingest::ReplyBook;
use crate::metrics::Percentiles;
use hdrhistogram::Histogram;
use socket2::SockAddr;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Messages taken from the ring per round (and `sendmmsg` entries, times destinations).
const BATCH: usize = 64;
/// The least time between two log lines about one output's failures.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// How the sender waits for the next message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderWait {
    /// Park until the host producer wakes it (at most this long).
    Woken(Duration),
    /// Spin on the head (a device producer wakes nobody).
    Spin,
}

/// The counters of one output.
#[derive(Debug, Default)]
struct OutputCounters {
    sent: AtomicU64,
    send_errors: AtomicU64,
    rate_limited: AtomicU64,
    no_reply_address: AtomicU64,
}

/// What one output did, for the report and the metrics.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OutputMetrics {
    pub name: String,
    /// Where it sends: "reply" or the addresses.
    pub destination: String,
    /// Datagrams the kernel accepted.
    pub sent: u64,
    /// Datagrams the kernel refused (unreachable, no buffer space, ...).
    pub send_errors: u64,
    /// Messages the loop could not put in the transmit ring (full).
    pub dropped: u64,
    /// Messages over the output's `max_rate`, not sent.
    pub rate_limited: u64,
    /// Reply messages for a stream no admitted source sent yet.
    pub no_reply_address: u64,
    /// Result ready to the datagram handed to the kernel.
    pub ready_to_sent: Percentiles,
}

/// Every output of a loop.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Default)]
pub struct ActuationMetrics {
    pub outputs: Vec<OutputMetrics>,
}

impl OutputMetrics {
    /// The message counts by fate, named as the metrics name them.
    pub fn fates(&self) -> [(&'static str, u64); 5] {
        [
            ("sent", self.sent),
            ("send_errors", self.send_errors),
            ("dropped", self.dropped),
            ("rate_limited", self.rate_limited),
            ("no_reply_address", self.no_reply_address),
        ]
    }
}

impl ActuationMetrics {
    /// Rows for a counter table: `<output> sent`, ...
    pub fn counter_rows(&self) -> Vec<(String, u64)> {
        let mut rows = Vec::new();
        for o in &self.outputs {
            for (what, v) in o.fates() {
                rows.push((format!("{} {what}", o.name), v));
            }
        }
        rows
    }
}

/// What the thread and its owner share.
struct Shared {
    ring: Arc<TxRing>,
    plan: ActuationPlan,
    counters: Vec<OutputCounters>,
    /// Per output: result ready to sent (ns), and the sum of the values.
    latency: Mutex<Vec<(Histogram<u64>, u128)>>,
    stop: AtomicBool,
}

/// A running sender thread.
pub struct ActuationSender {
    shared: Arc<Shared>,
    /// Invariant: `Some` until `stop` joins it.
    thread: Option<JoinHandle<()>>,
}

/// Starting the sender failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SenderError {
    /// The actuation socket could not be opened; check the process's socket limits.
    #[error("cannot open the actuation socket: {0}; check the process's socket limits")]
    Socket(#[source] io::Error),
    /// The actuation sender thread could not start; check the process's thread limit (`ulimit -u`).
    #[error("cannot start the actuation sender thread: {0}; check the process thread limit (ulimit -u)")]
    Thread(#[source] io::Error),
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("static histogram bounds are valid")
}

impl ActuationSender {
    /// Starts the thread that sends `ring`'s messages for `plan` from
    /// `socket` (the receiver's own socket, so replies come from the port
    /// the sensor sends to; `None`: a new socket of the destinations'
    /// family). `ready_offset_ns` turns a slot's ready time into
    /// CLOCK_REALTIME (0 on the host backend).
    pub fn start(
        ring: Arc<TxRing>,
        plan: ActuationPlan,
        socket: Option<UdpSocket>,
        reply: Option<Arc<ReplyBook>>,
        wait: SenderWait,
        ready_offset_ns: i64,
    ) -> Result<Self, SenderError> {
        let socket = match socket {
            Some(s) => s,
            None => {
                let v6 = plan.outputs.iter().any(|o| {
                    matches!(&o.destination, Destination::Fixed(a) if a.first().is_some_and(SocketAddr::is_ipv6))
                });
                UdpSocket::bind(if v6 { "[::]:0" } else { "0.0.0.0:0" }).map_err(SenderError::Socket)?
            }
        };
        let n = plan.outputs.len();
        let shared = Arc::new(Shared {
            ring,
            counters: (0..n).map(|_| OutputCounters::default()).collect(),
            latency: Mutex::new((0..n).map(|_| (histogram(), 0)).collect()),
            plan,
            stop: AtomicBool::new(false),
        });
        let state = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("frameloop-actuate".into())
            .spawn(move || run(&state, &socket, reply.as_deref(), wait, ready_offset_ns))
            .map_err(SenderError::Thread)?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// The counters and latency so far.
    pub fn snapshot(&self) -> ActuationMetrics {
        let s = &*self.shared;
        let latency = s.latency.lock().unwrap_or_else(PoisonError::into_inner);
        let outputs = s
            .plan
            .outputs
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let c = &s.counters[i];
                OutputMetrics {
                    name: o.name.clone(),
                    destination: match &o.destination {
                        Destination::Reply => "reply".into(),
                        Destination::Fixed(a) => {
                            a.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
                        }
                    },
                    sent: c.sent.load(Ordering::Relaxed),
                    send_errors: c.send_errors.load(Ordering::Relaxed),
                    dropped: s.ring.dropped(i),
                    rate_limited: c.rate_limited.load(Ordering::Relaxed),
                    no_reply_address: c.no_reply_address.load(Ordering::Relaxed),
                    ready_to_sent: Percentiles::of(&latency[i].0, latency[i].1),
                }
            })
            .collect();
        ActuationMetrics { outputs }
    }

    /// Sends what the ring still holds, stops the thread and returns the final figures.
    pub fn stop(mut self) -> ActuationMetrics {
        self.halt();
        self.snapshot()
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for ActuationSender {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A token bucket of one output: `max_rate` messages a second, bursts of
/// up to a tenth of a second's worth (at least one).
struct RateLimit {
    per_s: u64,
    tokens: f64,
    burst: f64,
    last_ns: u64,
}

impl RateLimit {
    fn new(per_s: u32, now_ns: u64) -> Self {
        let burst = (f64::from(per_s) / 10.0).max(1.0);
        Self { per_s: u64::from(per_s), tokens: burst, burst, last_ns: now_ns }
    }

    fn take(&mut self, now_ns: u64) -> bool {
        let dt = now_ns.saturating_sub(self.last_ns);
        self.last_ns = now_ns;
        self.tokens = (self.tokens + dt as f64 * self.per_s as f64 / 1e9).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One datagram of a round: a message and one of its destinations.
struct Outgoing {
    output: usize,
    ready_ns: u64,
    to: SockAddr,
    ptr: *const u8,
    len: usize,
}

/// Log lines about one output, at most one per [`LOG_EVERY`] per kind.
struct Complaints {
    next_ns: Vec<u64>,
}

impl Complaints {
    fn due(&mut self, output: usize, now_ns: u64) -> bool {
        if now_ns < self.next_ns[output] {
            return false;
        }
        self.next_ns[output] = now_ns + LOG_EVERY.as_nanos() as u64;
        true
    }
}

fn run(s: &Shared, socket: &UdpSocket, reply: Option<&ReplyBook>, wait: SenderWait, ready_offset_ns: i64) {
    let n = s.plan.outputs.len();
    let now = clock::monotonic_ns();
    let mut limits: Vec<RateLimit> = s.plan.outputs.iter().map(|o| RateLimit::new(o.max_rate, now)).collect();
    let mut complaints = Complaints { next_ns: vec![0; n] };
    let mut dropped_logged = vec![0u64; n];
    let mut out: Vec<Outgoing> = Vec::with_capacity(BATCH * 2);
    let mut next = s.ring.consumed() + 1;
    let mut stopping = false;
    loop {
        let head = s.ring.head();
        if head < next {
            if stopping {
                return;
            }
            if s.stop.load(Ordering::Acquire) {
                // One more look: what the loop published before the stop is still sent.
                stopping = true;
                continue;
            }
            match wait {
                SenderWait::Woken(t) => {
                    s.ring.wait_past(head, t);
                }
                SenderWait::Spin => std::hint::spin_loop(),
            }
            continue;
        }
        let last = head.min(next + BATCH as u64 - 1);
        let now_mono = clock::monotonic_ns();
        out.clear();
        let mut seq = next;
        while seq <= last {
            let Some(m) = s.ring.message(seq) else {
                // Published but not yet whole here: look again next round.
                break;
            };
            gather(s, &m, reply, &mut limits, now_mono, &mut out);
            seq += 1;
        }
        let done_through = seq - 1;
        send_all(s, socket, &out, ready_offset_ns, &mut complaints);
        if done_through >= next {
            s.ring.release(done_through);
            next = done_through + 1;
        }
        for (i, logged) in dropped_logged.iter_mut().enumerate() {
            let dropped = s.ring.dropped(i);
            if dropped > *logged && complaints.due(i, now_mono) {
                tracing::warn!(
                    "actuation output {}: {} messages dropped so far because the transmit ring was full; \
                     the network or this sender cannot keep up: raise ring.transmit_slots or lower the rate",
                    s.plan.outputs[i].name,
                    dropped
                );
                *logged = dropped;
            }
        }
    }
}

/// Adds the datagrams of message `m` to `out`, one per destination, unless
/// its output is over its rate or has nowhere to reply to (both counted).
fn gather(
    s: &Shared,
    m: &TxMessage,
    reply: Option<&ReplyBook>,
    limits: &mut [RateLimit],
    now_ns: u64,
    out: &mut Vec<Outgoing>,
) {
    let output = m.output as usize;
    let Some(plan) = s.plan.outputs.get(output) else { return };
    let c = &s.counters[output];
    if !limits[output].take(now_ns) {
        c.rate_limited.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let mut push = |to: SocketAddr| {
        out.push(Outgoing {
            output,
            ready_ns: m.ready_ns,
            to: SockAddr::from(to),
            ptr: m.datagram_ptr(),
            len: m.len,
        })
    };
    match &plan.destination {
        Destination::Fixed(addrs) => addrs.iter().for_each(|&a| push(a)),
        Destination::Reply => match reply.and_then(|b| b.lookup(m.stream_id)) {
            Some(a) => push(a),
            None => {
                c.no_reply_address.fetch_add(1, Ordering::Relaxed);
            }
        },
    }
}

/// Sends `msgs` with `sendmmsg`, without blocking; returns how many went
/// out, or the error of the first when none did.
///
/// # Safety
/// Every entry's `msg_iov` points to one iovec of readable memory and its
/// `msg_name` to a socket address of `msg_namelen` bytes, alive for the call.
unsafe fn sendmmsg(fd: i32, msgs: &mut [libc::mmsghdr]) -> io::Result<usize> {
    // SAFETY: the caller guarantees the pointers; the kernel writes only `msg_len`.
    let n = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), msgs.len() as libc::c_uint, libc::MSG_DONTWAIT) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

fn send_all(
    s: &Shared,
    socket: &UdpSocket,
    out: &[Outgoing],
    ready_offset_ns: i64,
    complaints: &mut Complaints,
) {
    if out.is_empty() {
        return;
    }
    let mut iovs: Vec<libc::iovec> =
        out.iter().map(|o| libc::iovec { iov_base: o.ptr as *mut libc::c_void, iov_len: o.len }).collect();
    let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(out.len());
    for (o, iov) in out.iter().zip(iovs.iter_mut()) {
        // SAFETY: mmsghdr is plain C data; all-zero is a valid empty header.
        let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
        m.msg_hdr.msg_name = o.to.as_ptr() as *mut libc::c_void;
        m.msg_hdr.msg_namelen = o.to.len();
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
        msgs.push(m);
    }
    let fd = socket.as_raw_fd();
    let mut i = 0;
    let mut sent_ns = Vec::with_capacity(out.len());
    while i < msgs.len() {
        // SAFETY: each entry points at one iovec of `iovs` (alive here) that
        // describes a datagram in a transmit slot the sender holds until it
        // releases the ring after this call, and at a SockAddr of `out`.
        match unsafe { sendmmsg(fd, &mut msgs[i..]) } {
            Ok(0) => i += 1,
            Ok(k) => {
                let now = clock::realtime_ns();
                sent_ns.extend((i..i + k).map(|j| (j, now)));
                i += k;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let o = &out[i];
                s.counters[o.output].send_errors.fetch_add(1, Ordering::Relaxed);
                let now = clock::monotonic_ns();
                if complaints.due(o.output, now) {
                    tracing::warn!(
                        "actuation output {}: sending to {} failed ({e}); counted in send_errors, the loop goes on",
                        s.plan.outputs[o.output].name,
                        o.to.as_socket().map_or_else(|| "?".into(), |a| a.to_string())
                    );
                }
                i += 1;
            }
        }
    }
    let mut latency = s.latency.lock().unwrap_or_else(PoisonError::into_inner);
    for (j, at) in sent_ns {
        let o = &out[j];
        s.counters[o.output].sent.fetch_add(1, Ordering::Relaxed);
        let ready = o.ready_ns as i64 + ready_offset_ns;
        let ns = (at as i64 - ready).max(1) as u64;
        let (h, sum) = &mut latency[o.output];
        h.saturating_record(ns);
        *sum += u128::from(ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_limit_keeps_the_rate_after_a_burst() {
        let mut r = RateLimit::new(1000, 0);
        let burst = (0..200).filter(|_| r.take(0)).count();
        assert_eq!(burst, 100, "a tenth of a second's worth at once");
        let later = (1..=1000u64).filter(|k| r.take(k * 1_000_000)).count();
        assert_eq!(later, 1000, "then one per millisecond");
        let mut slow = RateLimit::new(1, 0);
        assert!(slow.take(0) && !slow.take(1) && slow.take(1_000_000_001));
    }
}
