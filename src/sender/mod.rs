//! The sensor emulator: sends frames in the native wire format at a paced
//! rate, each stamped with its send time, over sendmmsg batches or UDP GSO.
//!
//! Frame `k` of a run (counting across streams) belongs to stream
//! `k % streams` with sequence `k / streams` and is due at `t0 + k / rate`.
//! Its payload follows a [`Pattern`], so receivers can check every byte.

pub mod actuation;
mod frame;
#[doc(hidden)]
pub mod hsb;
mod pacing;
mod pattern;
pub mod ping_pong;
mod socket;

pub use actuation::{ActuationWatch, ExpectActuation, RoundTripReport, SentFrames};
pub use frame::{FrameBuffer, FrameGeometry, MAX_DATAGRAM_BYTES, build_frame_datagrams};
pub use pacing::{
    CATCH_UP_BURST_NS, CatchUp, LINK_FRAMING_BYTES, LinkPace, MAX_CATCH_UP_NS, Pacing, SPIN_NS, Schedule,
    wait_until, wait_until_paced,
};
pub use pattern::Pattern;
pub use socket::{FrameSent, Transmitter};

use crate::clock::{monotonic_ns, realtime_ns};
use crate::wire::native::HEADER_LEN;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use thiserror::Error;

/// Send buffer the sender asks for (the kernel caps it at net.core.wmem_max).
const SEND_BUFFER_BYTES: usize = 4 << 20;
/// `--catch-up` unless given.
pub const DEFAULT_CATCH_UP: f64 = 1.25;
/// How often `run_sender` reports progress.
const PROGRESS_INTERVAL_NS: u64 = 500_000_000;

/// Whether to use UDP generic segmentation offload (`UDP_SEGMENT`).
#[derive(serde::Serialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum GsoMode {
    /// Use GSO when the kernel accepts it, otherwise one datagram per message.
    #[default]
    Auto,
    /// Require GSO; stop with an error if the kernel refuses it.
    On,
    /// Never use GSO.
    Off,
}

/// What became of GSO in a run.
#[derive(serde::Serialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum GsoStatus {
    /// Several datagrams per send call, segmented by the kernel.
    Active,
    /// Not requested (`--gso off`).
    #[default]
    Off,
    /// The kernel does not offer `UDP_SEGMENT`.
    Unsupported,
    /// The kernel accepted the option but refused a GSO send; the run went on without.
    RefusedOnSend,
    /// Datagrams so large that two do not fit one GSO send.
    NotUseful,
}

/// Settings of `frameloop send` (and of the loopback sender of `frameloop bench`).
#[derive(Debug, Clone)]
pub struct SendArgs {
    /// Destination, HOST:PORT (for example 127.0.0.1:5000). A name resolves
    /// to its first address.
    pub to: String,

    /// Frames per second, summed over all streams (fractions allowed, e.g.
    /// 0.5). Frame k is sent at start + k/rate; the whole frame goes out as
    /// one burst, or at the pace of --link-gbps.
    pub rate: f64,

    /// Frame size in bytes (payload only, headers not counted), 1 to 4294967295.
    pub frame_bytes: u64,

    /// UDP payload size of each datagram in bytes, including the 48-byte
    /// frameloop header: 49 to 65507. A frame becomes ceil(N / (M - 48))
    /// datagrams; only the last can be shorter. 8972 fills a 9000-byte MTU,
    /// 1472 a 1500-byte MTU.
    pub packet_bytes: usize,

    /// Send this many frames in total (over all streams), then stop.
    pub count: Option<u64>,

    /// Send for this many seconds (fractions allowed), then stop. Without
    /// --count or --duration the sender runs until stopped (Ctrl-C).
    pub duration: Option<f64>,

    /// Number of streams; frames cycle through stream ids 0..S round-robin,
    /// each stream with its own frame sequence starting at 0.
    pub streams: u32,

    /// Payload content: `counter` (each 8-byte word holds its index, the
    /// stream id and the frame sequence) or `random` (seeded by stream and
    /// sequence). Both can be recomputed by a receiver to check the bytes.
    pub pattern: Pattern,

    /// UDP segmentation offload: `auto` uses UDP_SEGMENT when the kernel
    /// supports it and falls back to one datagram per message; `on` fails if
    /// it cannot; `off` never uses it. Either way sends go in sendmmsg batches.
    pub gso: GsoMode,

    /// How the sender waits for each frame's time: `spin` (the last 80 µs
    /// on the clock, frames leave on time, one core busy at high rates) or
    /// `sleep` (sleeps only, frames may leave tens of microseconds late;
    /// for throughput runs where the receiver needs the cores).
    pub pacing: Pacing,

    /// How fast a sender that fell behind its schedule (a late wake-up, a
    /// busy core) sends the frames it owes, as a multiple of --rate: at
    /// least 1. Frames go back to back only for up to 250 µs at that rate,
    /// so a late sender neither drops frames nor floods the receiver with
    /// them. A sender more than 5 ms behind drops that deficit and goes on
    /// at --rate from then (counted in `schedule_rebases` and
    /// `skipped_frames`).
    pub catch_up: f64,

    /// Source address to bind, ADDR:PORT (default: any address, any port, of
    /// the destination's family).
    pub bind: Option<SocketAddr>,

    /// Send each frame at the pace of a link of this many gigabits per second
    /// (fractions allowed), as a sensor on such a link does, instead of in
    /// one burst: a datagram leaves once the link would have carried the
    /// frame's datagrams before it, each counted with 66 bytes of UDP, IP
    /// and Ethernet framing. Paced per message: with GSO, the datagrams of
    /// one message (up to 64 KiB) still leave back to back. The sender spins
    /// while a frame is on the link. A core too slow for that pace sends
    /// slower and says so: the frames some datagram of which left behind its
    /// time on the link by more than a tenth of the frame's time there
    /// (`frames_behind_link`, with `max_link_lag_ns`), and a warning.
    pub link_gbps: Option<f64>,
}

impl SendArgs {
    /// Settings for sending to `to` with the defaults of `frameloop send`:
    /// 1000 frames/s of 65536 bytes in 8972-byte datagrams, one stream, the
    /// `counter` pattern, GSO when the kernel has it, spin pacing, until
    /// stopped.
    pub fn new(to: impl Into<String>) -> Self {
        Self {
            to: to.into(),
            rate: 1000.0,
            frame_bytes: 65536,
            packet_bytes: 8972,
            count: None,
            duration: None,
            streams: 1,
            pattern: Pattern::Counter,
            gso: GsoMode::Auto,
            pacing: Pacing::Spin,
            catch_up: DEFAULT_CATCH_UP,
            bind: None,
            link_gbps: None,
        }
    }
}

/// Why the sender could not start or had to stop. Transient send failures
/// are not errors: they are retried or counted in [`SendErrorCounts`].
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SendError {
    /// `--rate` is not positive; give frames per second above 0.
    #[error("--rate {rate} is not a positive number of frames per second")]
    Rate {
        /// The rate given (frames per second).
        rate: f64,
    },
    /// `--catch-up` is below 1; give a multiple of `--rate` of at least 1.
    #[error("--catch-up {ratio} is not a number of at least 1 (a multiple of --rate)")]
    CatchUp {
        /// The ratio given.
        ratio: f64,
    },
    /// `--duration` is not positive; give seconds above 0.
    #[error("--duration {seconds} is not a positive number of seconds")]
    Duration {
        /// The seconds given.
        seconds: f64,
    },
    /// `--link-gbps` is not positive; give the link speed in Gb/s.
    #[error("--link-gbps {gbps} is not a positive number of gigabits per second")]
    LinkGbps {
        /// The link speed given (Gb/s).
        gbps: f64,
    },
    /// The link cannot carry the rate asked for; raise `--link-gbps` or lower `--rate`.
    #[error(
        "--link-gbps {gbps} cannot carry --rate {rate} frames of {frame_wire_bytes} link bytes each \
         (that needs {needed_gbps:.3} Gb/s); raise --link-gbps or lower --rate"
    )]
    LinkTooSlow {
        /// The link speed given (Gb/s).
        gbps: f64,
        /// The rate given (frames per second).
        rate: f64,
        /// Bytes one frame takes on the link.
        frame_wire_bytes: u64,
        /// The speed the rate needs (Gb/s).
        needed_gbps: f64,
    },
    /// `--streams 0`; send at least one stream.
    #[error("--streams must be at least 1")]
    Streams,
    /// `--format hsb` sends one stream; drop `--streams`.
    #[error("--format hsb sends one stream (the sensor bridge's), not {streams}; drop --streams")]
    HsbStreams {
        /// The streams asked for.
        streams: u32,
    },
    /// `--packet-bytes` does not fit an HSB datagram; give a size above the HSB header, at most the largest datagram.
    #[error(
        "--packet-bytes {packet_bytes} is out of range for --format hsb: it must exceed the {}-byte HSB header \
         and be at most {MAX_DATAGRAM_BYTES}",
        crate::wire::hsb::HEADER_LEN
    )]
    HsbPacketBytes {
        /// The datagram size given.
        packet_bytes: usize,
    },
    /// `--packet-bytes` does not fit a native datagram; give a size above the header, at most the largest UDP datagram.
    #[error(
        "--packet-bytes {packet_bytes} is out of range: it must exceed the {HEADER_LEN}-byte header \
         and be at most {MAX_DATAGRAM_BYTES} (the largest UDP datagram)"
    )]
    PacketBytes {
        /// The datagram size given.
        packet_bytes: usize,
    },
    /// `--frame-bytes` is 0 or above 4 GiB; give 1 to 4294967295.
    #[error("--frame-bytes {frame_bytes} is out of range: use 1 to 4294967295")]
    FrameBytes {
        /// The frame size given.
        frame_bytes: u64,
    },
    /// `--to` does not resolve; give HOST:PORT.
    #[error("cannot resolve --to {addr}: {source}; give HOST:PORT, for example 127.0.0.1:5000")]
    Resolve {
        /// The address.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// `--to` resolves to no address; give HOST:PORT.
    #[error("--to {addr} resolves to no address; give HOST:PORT, for example 127.0.0.1:5000")]
    NoAddress {
        /// The address.
        addr: String,
    },
    /// `--bind` and `--to` are IPv4 and IPv6; bind an address of the destination's family.
    #[error(
        "--bind {bind} and --to {to} are of different address families; bind an address of the same family"
    )]
    FamilyMismatch {
        /// The source address.
        bind: SocketAddr,
        /// The destination.
        to: SocketAddr,
    },
    /// No UDP socket could be created (a process or sandbox limit).
    #[error("cannot create a UDP socket: {source}")]
    Socket {
        /// The OS error.
        source: io::Error,
    },
    /// `--bind` cannot be bound; give an address of this host and a free port.
    #[error(
        "cannot bind the source address {addr}: {source}; check --bind (address on this host, port free)"
    )]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// The socket cannot be connected to `--to`; check the address and the routing table.
    #[error("cannot connect the UDP socket to {addr}: {source}; check --to and the routing table")]
    Connect {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// `--gso on` but the kernel refused GSO; use `--gso auto` or `off`.
    #[error(
        "--gso on, but the kernel refused UDP segmentation offload ({source}); \
         use --gso auto to fall back or --gso off"
    )]
    GsoRefused {
        /// The OS error.
        source: io::Error,
    },
    /// `--gso on` with datagrams too large for two per send; lower `--packet-bytes` or use `--gso auto`.
    #[error(
        "--gso on needs at least two datagrams per send, so --packet-bytes at most {max} \
         (got {packet_bytes}); use --gso auto or off"
    )]
    GsoPacketTooLarge {
        /// The datagram size given.
        packet_bytes: usize,
        /// The largest size that fits two datagrams per send.
        max: usize,
    },
    /// Datagrams larger than the path allows (EMSGSIZE); lower `--packet-bytes`.
    #[error("datagrams of {packet_bytes} bytes are too large for the path ({source}); lower --packet-bytes")]
    MessageSize {
        /// The datagram size given.
        packet_bytes: usize,
        /// The OS error.
        source: io::Error,
    },
    /// A send failed for good; check that `--to` is reachable from `--bind`.
    #[error("sending failed: {source}; check that --to is reachable from --bind")]
    Send {
        /// The OS error.
        source: io::Error,
    },
}

/// Send failures that did not stop the run, by kind.
#[derive(serde::Serialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendErrorCounts {
    /// Sends retried because the kernel had no buffer space (ENOBUFS).
    pub enobufs_retries: u64,
    /// Sends retried because the socket would block (EAGAIN).
    pub eagain_retries: u64,
    /// Sends retried after a signal interrupted them (EINTR).
    pub interrupted_retries: u64,
    /// Datagrams not sent because the destination refused an earlier one
    /// (ICMP port unreachable: no receiver listening yet).
    pub refused_packets: u64,
    /// Datagrams given up because a stop came while a send was being retried.
    pub abandoned_packets: u64,
    /// Times the kernel refused a GSO send and the run continued without GSO.
    pub gso_fallbacks: u64,
}

/// Counters and rates of a sender run (a snapshot while running, the totals at the end).
#[derive(serde::Serialize, Debug, Clone, Default, PartialEq)]
pub struct SenderStats {
    /// Frames whose every packet was handed to the kernel or counted in `errors`.
    pub frames: u64,
    /// Datagrams the kernel accepted.
    pub packets: u64,
    /// UDP payload bytes the kernel accepted (native headers included).
    pub bytes: u64,
    /// Datagrams per frame.
    pub packets_per_frame: u32,
    /// Send failures that did not stop the run.
    pub errors: SendErrorCounts,
    /// Whether UDP segmentation offload was used.
    pub gso: GsoStatus,
    /// Seconds from the first frame's due time to now (or to the end of the run).
    pub elapsed_s: f64,
    /// Frames per second between the first and the last frame sent
    /// (`(frames - 1) / (t_last - t_first)`), 0 with fewer than two frames.
    pub frames_per_s: f64,
    /// `packets / elapsed_s`.
    pub packets_per_s: f64,
    /// UDP payload bit rate, `8 * bytes / elapsed_s / 1e9`.
    pub gbit_per_s: f64,
    /// Largest delay between a frame's due time and its timestamp, ns.
    pub max_schedule_lag_ns: u64,
    /// Mean of that delay, ns.
    pub mean_schedule_lag_ns: u64,
    /// Times the sender fell more than [`MAX_CATCH_UP_NS`] behind and moved
    /// its schedule instead of catching up.
    pub schedule_rebases: u64,
    /// Frames of the schedule those moves left out (the rate was not met by this many).
    pub skipped_frames: u64,
    /// With `--link-gbps`: frames some datagram of which left behind its
    /// time on the link by more than a tenth of the frame's time there (and
    /// more than [`LINK_LAG_TOLERANCE_NS`]). This sender could not keep that
    /// link's pace there (a core too slow for it, or a long stall), and the
    /// receiver saw the sender's own pace instead.
    pub frames_behind_link: u64,
    /// The most any datagram left behind its time on the link, ns.
    pub max_link_lag_ns: u64,
}

/// The least lag behind the link that counts a frame in
/// [`SenderStats::frames_behind_link`]: past what waiting for a time itself
/// misses by.
pub const LINK_LAG_TOLERANCE_NS: u64 = 2_000;

impl SenderStats {
    /// Counts a frame sent with a link pace: its latest datagram left
    /// `link_lag_ns` behind its time on the link, which takes `link_ns` to
    /// carry the whole frame.
    pub fn link_lag(&mut self, link_lag_ns: u64, link_ns: u64) {
        self.max_link_lag_ns = self.max_link_lag_ns.max(link_lag_ns);
        if link_lag_ns > LINK_LAG_TOLERANCE_NS.max(link_ns / 10) {
            self.frames_behind_link += 1;
        }
    }

    /// What to tell the user when the sender could not keep `--link-gbps`
    /// (`None` when it did, or there was no link pace).
    pub fn link_lag_warning(&self, link_gbps: Option<f64>) -> Option<String> {
        let gbps = link_gbps?;
        (self.frames_behind_link > 0).then(|| {
            format!(
                "{} of {} frames left slower than --link-gbps {gbps}: a datagram up to {:.1} µs behind its time \
                 on the link. This sender could not keep that pace there, so the receiver saw the sender's own \
                 pace; lower --link-gbps, send with GSO, or give the sender a core of its own",
                self.frames_behind_link,
                self.frames,
                self.max_link_lag_ns as f64 / 1000.0
            )
        })
    }
}

impl SendArgs {
    /// Checks the settings that do not need the network.
    pub fn validate(&self) -> Result<FrameGeometry, SendError> {
        self.validate_pacing()?;
        if self.streams == 0 {
            return Err(SendError::Streams);
        }
        let geometry = FrameGeometry::new(self.frame_bytes, self.packet_bytes)?;
        self.validate_link(u64::from(geometry.packet_count()), HEADER_LEN)?;
        Ok(geometry)
    }

    /// The link pace `--link-gbps` asks for, if any. Valid after [`SendArgs::validate`].
    pub fn link_pace(&self) -> Option<LinkPace> {
        self.link_gbps.map(LinkPace::new)
    }

    /// Checks `--link-gbps` against the frame rate: frames of `--frame-bytes`
    /// in `datagrams` datagrams with a `header_len`-byte header each must fit
    /// the link at `--rate`.
    fn validate_link(&self, datagrams: u64, header_len: usize) -> Result<(), SendError> {
        let Some(gbps) = self.link_gbps else { return Ok(()) };
        let frame_wire_bytes =
            LinkPace::wire_bytes(self.frame_bytes + datagrams * header_len as u64, datagrams);
        if !(gbps.is_finite() && gbps > 0.0) {
            return Err(SendError::LinkGbps { gbps });
        }
        let needed_gbps = frame_wire_bytes as f64 * 8.0 * self.rate / 1e9;
        if needed_gbps > gbps {
            return Err(SendError::LinkTooSlow { gbps, rate: self.rate, frame_wire_bytes, needed_gbps });
        }
        Ok(())
    }

    /// Checks `--rate` and `--duration`.
    fn validate_pacing(&self) -> Result<(), SendError> {
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(SendError::Rate { rate: self.rate });
        }
        if !(self.catch_up.is_finite() && self.catch_up >= 1.0) {
            return Err(SendError::CatchUp { ratio: self.catch_up });
        }
        if let Some(seconds) = self.duration
            && !(seconds.is_finite() && seconds > 0.0)
        {
            return Err(SendError::Duration { seconds });
        }
        Ok(())
    }

    /// Resolves `--to` to its first socket address.
    pub fn destination(&self) -> Result<SocketAddr, SendError> {
        let resolve = |source| SendError::Resolve { addr: self.to.clone(), source };
        self.to
            .to_socket_addrs()
            .map_err(resolve)?
            .next()
            .ok_or_else(|| SendError::NoAddress { addr: self.to.clone() })
    }
}

/// Opens the UDP socket the sender uses: bound to `bind` (or the wildcard of
/// `to`'s family), send buffer raised, connected to `to`.
pub fn open_socket(to: SocketAddr, bind: Option<SocketAddr>) -> Result<Socket, SendError> {
    let bind = match bind {
        Some(b) if b.is_ipv4() != to.is_ipv4() => return Err(SendError::FamilyMismatch { bind: b, to }),
        Some(b) => b,
        None if to.is_ipv4() => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        None => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = Socket::new(Domain::for_address(to), Type::DGRAM, Some(Protocol::UDP))
        .map_err(|source| SendError::Socket { source })?;
    if let Err(e) = socket.set_send_buffer_size(SEND_BUFFER_BYTES) {
        tracing::debug!("cannot raise the send buffer to {SEND_BUFFER_BYTES} bytes: {e}");
    }
    socket.bind(&SockAddr::from(bind)).map_err(|source| SendError::Bind { addr: bind, source })?;
    socket.connect(&SockAddr::from(to)).map_err(|source| SendError::Connect { addr: to, source })?;
    Ok(socket)
}

/// Runs the sender as `args` says until the count or duration is reached or
/// `stop` is raised. `progress` gets a snapshot about twice a second.
pub fn run_sender(
    args: &SendArgs,
    stop: &AtomicBool,
    progress: impl FnMut(&SenderStats),
) -> Result<SenderStats, SendError> {
    args.validate()?;
    let socket = open_socket(args.destination()?, args.bind)?;
    run_sender_on(socket, args, stop, progress)
}

/// [`run_sender`] over a socket the caller opened and connected (for
/// special socket options); `args.to` and `args.bind` are not used.
pub fn run_sender_on(
    socket: Socket,
    args: &SendArgs,
    stop: &AtomicBool,
    progress: impl FnMut(&SenderStats),
) -> Result<SenderStats, SendError> {
    run_stamping(socket, args, stop, progress, None)
}

/// How `frameloop send --expect-actuation` waits for the appliance's answers.
#[derive(Debug, Clone, Default)]
pub struct ExpectArgs {
    /// Wait for the appliance's actuation messages (`[[actuate]]` outputs),
    /// match each to its frame and record the sensor-to-actuator round trip
    /// on this host's clock: `every` (each frame answered by each output;
    /// frames without an answer count as missing; the default when the flag
    /// is given bare) or `some` (outputs that send on detection or on a
    /// user flag). Replies come to the sending socket; see --actuation-listen.
    pub expect_actuation: Option<ExpectActuation>,
    /// Read actuation messages on this address (an output with a fixed
    /// destination) instead of on the socket the frames leave from (an
    /// output with destination = "reply").
    pub actuation_listen: Option<SocketAddr>,
    /// Outputs that answer each frame (with `every`); 0: as many as answered any.
    pub actuation_outputs: u32,
    /// A round trip longer than this counts as late (milliseconds; still in the histogram).
    pub actuation_late_ms: f64,
    /// After the last frame, wait this long for the last answers (milliseconds).
    pub actuation_wait_ms: u64,
}

/// [`run_sender`] that, with `expect.expect_actuation`, also waits for the
/// appliance's actuation messages and reports the round trip.
pub fn run_sender_expecting(
    args: &SendArgs,
    expect: &ExpectArgs,
    stop: &AtomicBool,
    progress: impl FnMut(&SenderStats),
) -> Result<(SenderStats, Option<RoundTripReport>), SendError> {
    let Some(which) = expect.expect_actuation else {
        return run_sender(args, stop, progress).map(|s| (s, None));
    };
    args.validate()?;
    let socket = open_socket(args.destination()?, args.bind)?;
    let listen = match expect.actuation_listen {
        None => socket.try_clone().map_err(|source| SendError::Socket { source })?,
        Some(addr) => {
            let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
                .map_err(|source| SendError::Socket { source })?;
            s.bind(&SockAddr::from(addr)).map_err(|source| SendError::Bind { addr, source })?;
            s
        }
    };
    let late_ns = (expect.actuation_late_ms.max(0.0) * 1e6) as u64;
    let watch = ActuationWatch::start(listen, late_ns).map_err(|source| SendError::Socket { source })?;
    let sent = Arc::clone(watch.sent());
    let stats = run_stamping(socket, args, stop, progress, Some(&sent))?;
    let report =
        watch.finish(Duration::from_millis(expect.actuation_wait_ms), which, expect.actuation_outputs);
    Ok((stats, Some(report)))
}

/// [`run_sender_on`], noting each frame's send time in `sent` when given.
fn run_stamping(
    socket: Socket,
    args: &SendArgs,
    stop: &AtomicBool,
    mut progress: impl FnMut(&SenderStats),
    sent: Option<&SentFrames>,
) -> Result<SenderStats, SendError> {
    let geometry = args.validate()?;
    let mut tx = Transmitter::new(socket, args.gso, geometry.packet_bytes())?;
    let mut frame = FrameBuffer::new(geometry);
    let duration = args.duration.map(Duration::from_secs_f64);
    let mut schedule = Schedule::new(monotonic_ns(), args.rate, args.count, duration);
    let mut run = RunTotals::new(&schedule, geometry.packet_count());
    let link = args.link_pace();

    if args.pacing == Pacing::Sleep
        && let Err(e) = crate::realtime::set_current_thread_timer_slack(1_000)
    {
        tracing::debug!("timer slack left as it was: {e}");
    }
    let mut catch_up = CatchUp::new(schedule.period_ns(), args.catch_up, schedule.start_ns());
    let mut k = 0u64;
    while !schedule.is_past_end(k) {
        let stream = (k % args.streams as u64) as u32;
        let seq = k / args.streams as u64;
        frame.fill_payload(args.pattern, stream, seq);
        let due = schedule.due_ns(k);
        let Some(woke) = wait_until_paced(due.max(catch_up.earliest_ns()), stop, args.pacing) else { break };
        let due = if woke - due > MAX_CATCH_UP_NS {
            run.stats.skipped_frames += schedule.rebase(k, woke);
            run.stats.schedule_rebases += 1;
            woke
        } else {
            due
        };
        catch_up.sent(woke);
        let ts = realtime_ns();
        frame.write_headers(stream, seq, ts);
        if let Some(sent) = sent {
            sent.stamped(stream, seq, ts);
        }
        let sent = tx.send_frame(&frame, link, monotonic_ns(), stop, &mut run.stats.errors)?;
        run.frame_sent(sent, woke - due, woke);
        k += 1;
        if run.progress_due(woke) {
            progress(&run.snapshot(tx.gso(), monotonic_ns()));
        }
    }
    // A duration run lasts its duration even when its last frame went out early.
    if let Some(d) = duration
        && !stop.load(std::sync::atomic::Ordering::Relaxed)
    {
        let end = run.start_ns.saturating_add(d.as_nanos() as u64);
        let _ = wait_until(end, stop);
    }
    Ok(run.snapshot(tx.gso(), monotonic_ns()))
}

/// Running totals of [`run_sender_on`], turned into [`SenderStats`] on demand.
struct RunTotals {
    stats: SenderStats,
    start_ns: u64,
    first_sent_ns: Option<u64>,
    last_sent_ns: u64,
    lag_sum_ns: u128,
    next_progress_ns: u64,
}

impl RunTotals {
    fn new(schedule: &Schedule, packets_per_frame: u32) -> Self {
        RunTotals {
            stats: SenderStats { packets_per_frame, ..SenderStats::default() },
            start_ns: schedule.start_ns(),
            first_sent_ns: None,
            last_sent_ns: 0,
            lag_sum_ns: 0,
            next_progress_ns: schedule.start_ns() + PROGRESS_INTERVAL_NS,
        }
    }

    fn frame_sent(&mut self, sent: FrameSent, lag_ns: u64, at_ns: u64) {
        let s = &mut self.stats;
        s.frames += 1;
        s.packets += sent.packets;
        s.bytes += sent.bytes;
        s.max_schedule_lag_ns = s.max_schedule_lag_ns.max(lag_ns);
        if sent.link_ns > 0 {
            s.link_lag(sent.link_lag_ns, sent.link_ns);
        }
        self.lag_sum_ns += lag_ns as u128;
        self.first_sent_ns.get_or_insert(at_ns);
        self.last_sent_ns = at_ns;
    }

    fn progress_due(&mut self, now_ns: u64) -> bool {
        if now_ns < self.next_progress_ns {
            return false;
        }
        self.next_progress_ns = now_ns + PROGRESS_INTERVAL_NS;
        true
    }

    fn snapshot(&self, gso: GsoStatus, now_ns: u64) -> SenderStats {
        let mut s = self.stats.clone();
        s.gso = gso;
        s.elapsed_s = now_ns.saturating_sub(self.start_ns) as f64 / 1e9;
        if s.elapsed_s > 0.0 {
            s.packets_per_s = s.packets as f64 / s.elapsed_s;
            s.gbit_per_s = s.bytes as f64 * 8.0 / s.elapsed_s / 1e9;
        }
        if let Some(first) = self.first_sent_ns
            && self.last_sent_ns > first
        {
            s.frames_per_s = (s.frames - 1) as f64 * 1e9 / (self.last_sent_ns - first) as f64;
        }
        if s.frames > 0 {
            s.mean_schedule_lag_ns = (self.lag_sum_ns / s.frames as u128) as u64;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_count_behind_the_link_only_past_the_tolerance() {
        let mut stats = SenderStats { frames: 6, ..SenderStats::default() };
        // Short frames: past 2 µs counts. A 1 ms frame: past a tenth of it.
        for (lag, link) in
            [(0, 3_000), (2_000, 3_000), (2_001, 3_000), (100_000, 1_000_000), (100_001, 1_000_000)]
        {
            stats.link_lag(lag, link);
        }
        assert_eq!((stats.frames_behind_link, stats.max_link_lag_ns), (2, 100_001));
        let warning = stats.link_lag_warning(Some(25.0)).expect("frames fell behind the link");
        assert!(
            warning.contains("2 of 6 frames")
                && warning.contains("--link-gbps 25")
                && warning.contains("100.0 µs")
        );
        assert_eq!(stats.link_lag_warning(None), None, "no link pace asked for, nothing to say");
        let kept =
            SenderStats { frames: 4, max_link_lag_ns: LINK_LAG_TOLERANCE_NS, ..SenderStats::default() };
        assert_eq!(kept.link_lag_warning(Some(25.0)), None);
    }
}
