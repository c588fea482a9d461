//! The UDP receiver: one socket (socket2: `SO_REUSEPORT`, `SO_RCVBUF`,
//! `SO_BUSY_POLL`, `SO_TIMESTAMPNS`, `UDP_GRO`), mio readiness, `recvmmsg`
//! batches ([`super::batch`]), a source allowlist ([`super::allow`]), and a
//! [`FrameAssembler`] (native [`Reassembler`] or RFC 4175
//! [`crate::rtp::RtpAssembler`]) that puts the frames into the ring.
//!
//! An optional [`DatagramTap`] sees every datagram taken off the socket
//! (after GRO splitting, whatever its source; not the buffers the kernel
//! cut short), with its source address, the socket's bound address and the
//! receive time: `frameloop run --record` records through it.
//!
//! Configuration lives in the `[ingest]` table ([`UdpConfig`]).
//!
//! With `ingest.assembly_thread` the thread that calls [`UdpReceiver::run`]
//! only reads the socket, and a second thread it starts assembles what it
//! read, in order (`ingest/assembly_thread.rs`, `ingest/handoff.rs`); both
//! run the same receive loop's rules (busy polling, staleness by what has
//! left the socket). With `ingest.reading_threads` above one, more threads
//! read sockets of their own bound to the same port, which the kernel
//! spreads the datagrams over (`ingest/steering.rs`), and the assembly
//! thread merges them back into arrival order.
//!
//! With GRO the kernel hands over one buffer holding several datagrams of one
//! flow, all `segment` bytes long but the last, with the segment size in a
//! `UDP_GRO` control message; the receiver splits it back into datagrams. If
//! the kernel refuses `UDP_GRO`, datagrams arrive one per buffer
//! ([`UdpReceiver::gro_active`] says which). The hot path (receive, split,
//! tap, reassemble) neither allocates nor logs.

use super::allow::AllowList;
use super::assembler::FrameAssembler;
use super::assembly_thread::{AssemblyStage, HandingOver, Shared};
use super::batch::{BufferInfo, RecvBatch, datagram_count, datagrams};
use super::config::UdpConfig;
use super::counters::IngestCounters;
use super::handoff::{self, HANDOFF_BATCH_BUFFERS, HANDOFF_BATCHES};
use super::landing::{Landed, LandingShape, MessageLayout};
use super::reassembly::Reassembler;
use super::steering;
use super::tap::DatagramTap;
use crate::clock;
use crate::wire::native::HEADER_LEN;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use thiserror::Error;

/// Batches read per wake-up before the stop flag and ticks get a turn.
pub(super) const BATCHES_PER_WAKE: usize = 64;

/// Errors of the UDP receiver; each says what to change.
#[derive(Debug, Error)]
pub enum IngestError {
    #[error("ingest.bind = {0:?} is not an address and port; write it like \"0.0.0.0:5000\"")]
    BadBind(String),
    #[error("ingest.allow entry {entry:?}: {reason}")]
    BadAllow { entry: String, reason: String },
    #[error(
        "cannot bind UDP {addr}: {source}; choose a free port in ingest.bind, stop the other listener, or set ingest.reuse_port = true on both"
    )]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("cannot set up the UDP socket ({what}): {source}")]
    Socket { what: &'static str, source: io::Error },
    #[error("waiting for UDP readiness failed: {0}")]
    Poll(io::Error),
    #[error("reading UDP datagrams failed: {0}")]
    Recv(io::Error),
    #[error(
        "cannot start the assembly thread of ingest.assembly_thread: {0}; set ingest.assembly_thread = false"
    )]
    AssemblySpawn(io::Error),
    #[error("the assembly thread (ingest.assembly_thread) could not start: {0}")]
    AssemblyStart(String),
    #[error("the assembly thread (ingest.assembly_thread) stopped while the receiver ran")]
    AssemblyGone,
    #[error("cannot start a reading thread of ingest.reading_threads: {0}; lower ingest.reading_threads")]
    ReadingThreadSpawn(io::Error),
    #[error("reading thread {index} (ingest.reading_threads) could not start: {why}")]
    ReadingThreadStart { index: usize, why: String },
    #[error("another thread of the receiver (ingest.assembly_thread, ingest.reading_threads) stopped")]
    PeerStopped,
    #[error(
        "cannot spread datagrams over the ingest.reading_threads sockets (SO_ATTACH_REUSEPORT_CBPF): \
         {0}; the kernel needs classic BPF reuseport programs (Linux 4.5 or later), or set \
         ingest.reading_threads = 1"
    )]
    Steering(io::Error),
}

/// The address a tap is given for a sender the kernel did not name.
const UNKNOWN_SOURCE: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

/// Hands one received buffer to the assembler (and each of its datagrams to
/// the tap, addressed to `local`), counting what it drops here (truncation,
/// disallowed source) and the GRO segments. Returns how many datagrams the
/// buffer held (one when truncated).
pub(super) fn deliver<A: FrameAssembler + ?Sized>(
    assembler: &mut A,
    counters: &IngestCounters,
    allow: &AllowList,
    mut tap: Option<&mut (dyn DatagramTap + 'static)>,
    local: SocketAddr,
    buf: &[u8],
    info: BufferInfo,
) -> usize {
    if info.truncated {
        counters.datagram(buf.len());
        IngestCounters::bump(&counters.truncated);
        return 1;
    }
    let allowed = allow.allows(info.source.map(|s| s.ip()));
    if allowed {
        allow.admitted(info.source, buf);
    }
    let now_ns = info.batch_ns.max(info.rx_ns);
    let mut segments = 0u64;
    if allowed && tap.is_none() {
        // The common case: the whole buffer in one call, which counts its
        // datagrams once rather than per datagram.
        let mut each = datagrams(buf, info.gro_segment).inspect(|_| segments += 1);
        assembler.on_datagrams_at(&mut each, info.rx_ns, now_ns);
    } else {
        for d in datagrams(buf, info.gro_segment) {
            if let Some(t) = tap.as_deref_mut() {
                t.on_datagram(info.source.unwrap_or(UNKNOWN_SOURCE), local, d, info.rx_ns);
            }
            if allowed {
                assembler.on_datagram_at(d, info.rx_ns, now_ns);
            } else {
                counters.datagram(d.len());
                IngestCounters::bump(&counters.source_not_allowed);
            }
            segments += 1;
        }
    }
    if segments > 1 {
        IngestCounters::add(&counters.gro_segments, segments);
    }
    segments as usize
}

/// Sets an integer socket option.
fn set_int_option(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and the length passed is its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Asks for `wanted` bytes of receive buffer (forcing past `rmem_max` where
/// permitted) and returns what the kernel granted, as usable bytes.
fn size_receive_buffer(socket: &Socket, wanted: usize) -> Result<usize, IngestError> {
    let value = libc::c_int::try_from(wanted).unwrap_or(libc::c_int::MAX);
    if set_int_option(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, value).is_err() {
        socket
            .set_recv_buffer_size(wanted)
            .map_err(|source| IngestError::Socket { what: "SO_RCVBUF", source })?;
    }
    let granted =
        socket.recv_buffer_size().map_err(|source| IngestError::Socket { what: "SO_RCVBUF", source })?;
    // Linux doubles the value for its bookkeeping and reports the double.
    let usable = granted / 2;
    if usable < wanted {
        tracing::warn!(
            "UDP receive buffer is {usable} bytes, less than ingest.recv_buffer_bytes = {wanted}: the kernel \
             capped it; raise it with `sysctl -w net.core.rmem_max={wanted}` or bursts may be lost"
        );
    }
    Ok(usable)
}

/// A socket set up as `ingest` asks, bound to `addr`, non-blocking.
struct OpenedSocket {
    socket: Socket,
    recv_buffer_bytes: usize,
    gro_active: bool,
}

/// Opens a UDP socket with the options of `cfg` (`SO_REUSEPORT` as
/// `reuse_port` says) and binds it to `addr`. Unsupported optional
/// features (GRO, busy poll, kernel timestamps) are logged and skipped.
fn open_socket(cfg: &UdpConfig, addr: SocketAddr, reuse_port: bool) -> Result<OpenedSocket, IngestError> {
    let setup = |what| move |source| IngestError::Socket { what, source };
    let socket =
        Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP)).map_err(setup("socket"))?;
    let fd = socket.as_raw_fd();
    socket.set_reuse_port(reuse_port).map_err(setup("SO_REUSEPORT"))?;
    let recv_buffer_bytes = size_receive_buffer(&socket, cfg.recv_buffer_bytes)?;
    if cfg.busy_poll_us > 0 {
        let us = libc::c_int::try_from(cfg.busy_poll_us).unwrap_or(libc::c_int::MAX);
        match set_int_option(fd, libc::SOL_SOCKET, libc::SO_BUSY_POLL, us) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                tracing::debug!("SO_BUSY_POLL refused (needs CAP_NET_ADMIN); receiving without busy poll")
            }
            Err(e) => return Err(IngestError::Socket { what: "SO_BUSY_POLL", source: e }),
        }
    }
    if let Err(e) = set_int_option(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1) {
        tracing::warn!("SO_TIMESTAMPNS refused ({e}); receive times come from the clock after recvmmsg");
    }
    let gro_active = cfg.gro
        && match set_int_option(fd, libc::SOL_UDP, libc::UDP_GRO, 1) {
            Ok(()) => true,
            Err(e) => {
                tracing::info!("UDP_GRO refused ({e}); receiving one datagram per buffer");
                false
            }
        };
    socket.set_nonblocking(true).map_err(setup("O_NONBLOCK"))?;
    socket.bind(&addr.into()).map_err(|source| IngestError::Bind { addr, source })?;
    Ok(OpenedSocket { socket, recv_buffer_bytes, gro_active })
}

/// Registers a bound socket for readiness, waits lasting `timeout` at most.
fn watch(socket: Socket, timeout: Duration) -> Result<ReaderSocket, IngestError> {
    let setup = |what| move |source| IngestError::Socket { what, source };
    let mut socket = mio::net::UdpSocket::from_std(socket.into());
    let poll = mio::Poll::new().map_err(setup("epoll"))?;
    poll.registry()
        .register(&mut socket, mio::Token(0), mio::Interest::READABLE)
        .map_err(setup("epoll register"))?;
    let readiness = Readiness { poll, events: mio::Events::with_capacity(4), timeout };
    Ok(ReaderSocket { socket, readiness })
}

/// A bound UDP socket feeding a [`FrameAssembler`] (by default the native
/// [`Reassembler`]), driven by [`UdpReceiver::run`].
pub struct UdpReceiver<A: FrameAssembler = Reassembler> {
    socket: mio::net::UdpSocket,
    readiness: Readiness,
    assembler: A,
    /// Counters of the drops made before the assembler (truncation,
    /// disallowed source) and of GRO segments; for the native reassembler,
    /// the same `Arc` it counts into.
    counters: Arc<IngestCounters>,
    /// Sees every datagram taken off the socket (see the module doc).
    tap: Option<Box<dyn DatagramTap>>,
    allow: AllowList,
    batch: RecvBatch,
    local_addr: SocketAddr,
    gro_active: bool,
    recv_buffer_bytes: usize,
    /// How long to keep reading without blocking after the last datagram
    /// (`ingest.poll_budget_us`); zero waits in epoll whenever the socket is empty.
    poll_budget: Duration,
    /// `SCHED_FIFO` priority for the thread that calls [`UdpReceiver::run`]; 0 = unchanged.
    realtime_priority: u8,
    /// `ingest.receive_into_slots`: the smallest datagram payload to ask the
    /// assembler for landing targets for; `None`: never.
    one_copy: Option<usize>,
    /// What the next one-copy plan covers ([`UdpReceiver::shape_after`] the
    /// last receive call): how many receive buffers, and how many datagrams
    /// each is expected to hold.
    landing_shape: LandingShape,
    /// Arrival time (CLOCK_REALTIME ns) of the latest datagram read: the
    /// clock frames go stale by while the socket still holds datagrams.
    latest_rx_ns: u64,
    /// Where each message of the current one-copy batch fell.
    layouts: Vec<MessageLayout>,
    /// `ingest.assembly_thread`: frames are assembled on a thread of their
    /// own, and this thread only reads the socket.
    assembly: Option<AssemblyThread>,
    /// `ingest.reading_threads` beyond the first: the sockets they read,
    /// bound to the same port, in the order the kernel's group numbers them.
    more_readers: Vec<ReaderSocket>,
}

/// A bound socket and its readiness.
struct ReaderSocket {
    socket: mio::net::UdpSocket,
    readiness: Readiness,
}

/// Sets its flag when dropped (a thread's end, however it ends).
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Waiting for the socket to become readable.
pub(super) struct Readiness {
    poll: mio::Poll,
    events: mio::Events,
    /// How long one wait may last, so ticks and the stop flag run.
    pub(super) timeout: Duration,
}

impl Readiness {
    /// Waits until the socket is readable or the timeout passed.
    pub(super) fn wait(&mut self) -> Result<(), IngestError> {
        match self.poll.poll(&mut self.events, Some(self.timeout)) {
            Err(e) if e.kind() != io::ErrorKind::Interrupted => Err(IngestError::Poll(e)),
            _ => Ok(()),
        }
    }
}

/// What the assembly thread runs first; see [`UdpReceiver::on_assembly_thread_start`].
pub type OnAssemblyStart = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// What each reading thread after the first runs first, given its index
/// (1 for the second); see [`UdpReceiver::on_reading_thread_start`].
pub type OnReadingThreadStart = Arc<dyn Fn(usize) -> Result<(), String> + Send + Sync>;

/// The name of the assembly thread (`ingest.assembly_thread`).
pub const ASSEMBLY_THREAD_NAME: &str = "frameloop-asm";

/// The name of the reading threads after the first (`ingest.reading_threads`),
/// followed by their index.
pub const READING_THREAD_NAME: &str = "frameloop-rx";

/// The second thread of `ingest.assembly_thread`.
#[derive(Default)]
struct AssemblyThread {
    /// Run on that thread before it assembles anything (placing it on a
    /// core); an error stops the receiver with it.
    on_start: Option<OnAssemblyStart>,
    /// Run on each reading thread after the first before it reads.
    on_reading_start: Option<OnReadingThreadStart>,
}

// The appliance moves the receiver onto its own thread.
const _: fn() = || {
    fn is_send<T: Send>() {}
    is_send::<UdpReceiver>();
};

impl UdpReceiver<Reassembler> {
    /// Opens and binds the socket described by `cfg` (which should have passed
    /// [`UdpConfig::validate`]), feeding the native `reassembler` and counting
    /// into its counters. Unsupported optional features (GRO, busy poll,
    /// kernel timestamps) are logged and skipped.
    pub fn bind(cfg: &UdpConfig, reassembler: Reassembler) -> Result<Self, IngestError> {
        let counters = Arc::clone(reassembler.counters());
        Self::bind_assembler(cfg, reassembler, counters)
    }
}

impl<A: FrameAssembler> UdpReceiver<A> {
    /// As [`UdpReceiver::bind`], feeding any `assembler`; the drops made
    /// before it (truncation, disallowed source) and GRO segments count in
    /// `counters`.
    pub fn bind_assembler(
        cfg: &UdpConfig,
        assembler: A,
        counters: Arc<IngestCounters>,
    ) -> Result<Self, IngestError> {
        let addr: SocketAddr = cfg.bind.parse().map_err(|_| IngestError::BadBind(cfg.bind.clone()))?;
        let allow = AllowList::new(&cfg.allow)
            .map_err(|bad| IngestError::BadAllow { entry: bad.entry, reason: bad.reason })?;
        let readers = if cfg.assembly_thread { cfg.reading_threads.max(1) } else { 1 };
        let opened = open_socket(cfg, addr, cfg.reuse_port || readers > 1)?;
        let setup = |what| move |source| IngestError::Socket { what, source };
        let local_addr =
            opened.socket.local_addr().map_err(setup("getsockname"))?.as_socket().ok_or(
                IngestError::Socket { what: "getsockname", source: io::ErrorKind::Unsupported.into() },
            )?;
        let (recv_buffer_bytes, gro_active) = (opened.recv_buffer_bytes, opened.gro_active);
        let timeout = Duration::from_millis((cfg.reassembly.frame_timeout_ms / 4).clamp(1, 10));
        let first = watch(opened.socket, timeout)?;
        // The group's other sockets join it on the port the first got.
        let mut more_readers = Vec::with_capacity(readers - 1);
        for _ in 1..readers {
            more_readers.push(watch(open_socket(cfg, local_addr, true)?.socket, timeout)?);
        }
        if readers > 1 {
            steering::spread_at_random(first.socket.as_raw_fd(), readers).map_err(IngestError::Steering)?;
        }
        let ReaderSocket { socket, readiness } = first;
        Ok(Self {
            socket,
            readiness,
            counters,
            assembler,
            tap: None,
            allow,
            batch: RecvBatch::new(cfg.batch.clamp(1, 1024)),
            local_addr,
            gro_active,
            recv_buffer_bytes,
            poll_budget: Duration::from_micros(cfg.poll_budget_us.into()),
            realtime_priority: cfg.realtime_priority,
            // The assembly thread copies every payload: landing places are
            // the assembler's to plan, and it runs elsewhere.
            one_copy: if cfg.assembly_thread { None } else { cfg.receive_into_slots.min_payload() },
            landing_shape: LandingShape::coalesced(MIN_GROUPS),
            latest_rx_ns: 0,
            layouts: Vec::with_capacity(cfg.batch.clamp(1, 1024)),
            assembly: cfg.assembly_thread.then(AssemblyThread::default),
            more_readers,
        })
    }

    /// The address the socket is bound to (with the real port when `:0` was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// True when the kernel accepted `UDP_GRO` and buffers may hold several datagrams.
    pub fn gro_active(&self) -> bool {
        self.gro_active
    }

    /// Usable receive buffer bytes the kernel granted.
    pub fn recv_buffer_bytes(&self) -> usize {
        self.recv_buffer_bytes
    }

    /// The ingest counters (shared; read them from any thread).
    pub fn counters(&self) -> &Arc<IngestCounters> {
        &self.counters
    }

    /// Calls `tap` for every datagram received from now on (replacing any
    /// earlier tap, which is returned).
    /// Notes each admitted source in `book`, for actuation outputs that
    /// reply to the sensor; call before [`UdpReceiver::run`].
    pub fn note_sources_in(&mut self, book: Arc<super::ReplyBook>) {
        self.allow.note_sources_in(book);
    }

    /// A second handle on the receiving socket, for sending replies from the
    /// port the sensor sends to (so a sensor's connected socket accepts them).
    pub fn send_socket(&self) -> io::Result<std::net::UdpSocket> {
        // SAFETY: the descriptor is open (owned by `self.socket`) for the
        // duration of this call; `try_clone` dups it into a new owned one.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.socket.as_raw_fd()) };
        let owned = borrowed.try_clone_to_owned()?;
        Ok(std::net::UdpSocket::from(owned))
    }

    pub fn set_tap(&mut self, tap: Box<dyn DatagramTap>) -> Option<Box<dyn DatagramTap>> {
        self.tap.replace(tap)
    }

    /// With `ingest.assembly_thread`, runs `start` on the assembly thread
    /// before it assembles anything (the appliance places it on
    /// `service.assembly_cpu` there); an error it returns stops
    /// [`UdpReceiver::run`] with [`IngestError::AssemblyStart`]. Without an
    /// assembly thread it is never run. Returns whether it will be.
    pub fn on_assembly_thread_start(&mut self, start: OnAssemblyStart) -> bool {
        match self.assembly.as_mut() {
            Some(assembly) => {
                assembly.on_start = Some(start);
                true
            }
            None => false,
        }
    }

    /// True when frames are assembled on a thread of their own (`ingest.assembly_thread`).
    pub fn has_assembly_thread(&self) -> bool {
        self.assembly.is_some()
    }

    /// With `ingest.reading_threads` above one, runs `start` on each
    /// reading thread after the first, with its index (1 for the second),
    /// before it reads (the appliance places it on its core of
    /// `service.reader_cpus` there); an error it returns stops
    /// [`UdpReceiver::run`] with [`IngestError::ReadingThreadStart`].
    /// Returns on how many threads it will run (0: never).
    pub fn on_reading_thread_start(&mut self, start: OnReadingThreadStart) -> usize {
        match self.assembly.as_mut() {
            Some(assembly) if !self.more_readers.is_empty() => {
                assembly.on_reading_start = Some(start);
                self.more_readers.len()
            }
            _ => 0,
        }
    }

    /// Threads reading the port (`ingest.reading_threads`; 1 without an
    /// assembly thread).
    pub fn reading_threads(&self) -> usize {
        1 + self.more_readers.len()
    }

    /// The assembler the receiver feeds.
    pub fn assembler(&self) -> &A {
        &self.assembler
    }

    /// Receives and reassembles on the calling thread until `stop` is set,
    /// then publishes the frames still in flight (flagged) and returns.
    ///
    /// The socket is edge-triggered: the receiver waits in epoll only once a
    /// read found it empty, and (with `ingest.poll_budget_us`) only after it
    /// stayed empty for the budget.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<(), IngestError> {
        if self.realtime_priority > 0 {
            match crate::realtime::set_current_thread_fifo(self.realtime_priority) {
                Ok(()) => {
                    tracing::info!("UDP receiver runs under SCHED_FIFO priority {}", self.realtime_priority)
                }
                Err(e) => tracing::warn!(
                    "ingest.realtime_priority = {} refused ({e}); receiving at normal priority (needs CAP_SYS_NICE)",
                    self.realtime_priority
                ),
            }
        }
        if self.assembly.is_some() {
            return self.run_with_assembly_thread(stop);
        }
        let (budget, counters) = (self.poll_budget, Arc::clone(&self.counters));
        receive_loop(self, stop, budget, &counters)?;
        self.assembler.flush(clock::realtime_ns());
        Ok(())
    }

    /// [`UdpReceiver::run`] with `ingest.assembly_thread`: this thread (and
    /// with `ingest.reading_threads` more, one per socket) reads into the
    /// batches of a [`handoff::pool`] and a second one assembles them into
    /// frames, in the order read.
    fn run_with_assembly_thread(&mut self, stop: &AtomicBool) -> Result<(), IngestError> {
        let (on_start, on_reading_start) = match self.assembly.as_mut() {
            Some(a) => (a.on_start.take(), a.on_reading_start.clone()),
            None => (None, None),
        };
        let readers = 1 + self.more_readers.len();
        let (reading, assembling) =
            handoff::pool(readers, HANDOFF_BATCHES, self.batch.buffers().min(HANDOFF_BATCH_BUFFERS));
        let Self {
            socket,
            readiness,
            assembler,
            counters,
            tap,
            allow,
            local_addr,
            poll_budget,
            more_readers,
            ..
        } = self;
        let sockets: Vec<RawFd> = std::iter::once(socket.as_raw_fd())
            .chain(more_readers.iter().map(|r| r.socket.as_raw_fd()))
            .collect();
        let (counters, allow, local, spin, idle) =
            (&**counters, &*allow, *local_addr, *poll_budget, readiness.timeout);
        let (halt, sockets) = (AtomicBool::new(false), &sockets[..]);
        let shared = Shared { stop, halt: &halt, counters };
        let halt = &halt;
        std::thread::scope(|scope| {
            // Each thread started says whether its start succeeded.
            let (started_tx, started_rx) = std::sync::mpsc::sync_channel::<bool>(readers);
            let assembly_started = started_tx.clone();
            let assembly = std::thread::Builder::new()
                .name(ASSEMBLY_THREAD_NAME.into())
                .spawn_scoped(scope, move || {
                    // However it ends (a failed start, a panic), the
                    // reading threads stop reading.
                    let _ended = SetOnDrop(halt);
                    let started = on_start.map_or(Ok(()), |start| start());
                    let _ = assembly_started.send(started.is_ok());
                    // On failure `assembling` is dropped unused, which ends
                    // the reading loops below.
                    started?;
                    let stage = AssemblyStage { allow, counters, local, sockets };
                    stage.run(&assembling, assembler, tap.as_deref_mut(), spin, idle);
                    Ok(())
                })
                .map_err(IngestError::AssemblySpawn)?;
            let mut sides = reading.into_iter();
            let first_side = sides.next().expect("the pool has a side per reader");
            let mut more = Vec::with_capacity(readers - 1);
            for (i, (side, theirs)) in sides.zip(more_readers.iter_mut()).enumerate() {
                let index = i + 1;
                let (started, on_start) = (started_tx.clone(), on_reading_start.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("{READING_THREAD_NAME}{index}"))
                    .spawn_scoped(scope, move || {
                        let begun = on_start.map_or(Ok(()), |start| start(index));
                        let _ = started.send(begun.is_ok());
                        if let Err(why) = begun {
                            halt.store(true, Ordering::Release);
                            return Err(IngestError::ReadingThreadStart { index, why });
                        }
                        let fd = theirs.socket.as_raw_fd();
                        let read = HandingOver::new(fd, &mut theirs.readiness, side, shared).run(spin);
                        if read.is_err() {
                            halt.store(true, Ordering::Release);
                        }
                        read
                    });
                match spawned {
                    Ok(handle) => more.push(handle),
                    Err(e) => {
                        halt.store(true, Ordering::Release);
                        return Err(IngestError::ReadingThreadSpawn(e));
                    }
                }
            }
            drop(started_tx);
            // Read nothing before every thread is placed and ready: the
            // first frames would wait for their start-up. A failed start
            // halts the readers, and its error is reported below.
            for _ in 0..readers {
                if started_rx.recv() != Ok(true) {
                    halt.store(true, Ordering::Release);
                    break;
                }
            }
            let mut reader = HandingOver::new(socket.as_raw_fd(), readiness, first_side, shared);
            let mut read =
                if halt.load(Ordering::Acquire) { Err(IngestError::PeerStopped) } else { reader.run(spin) };
            if read.is_err() {
                halt.store(true, Ordering::Release);
            }
            // Dropping the reading sides tells the assembly thread to
            // finish what was handed over, flush and return.
            drop(reader);
            for handle in more {
                match handle.join() {
                    Err(panic) => std::panic::resume_unwind(panic),
                    // The first thread that failed on its own says why.
                    Ok(Err(e)) if matches!(read, Ok(()) | Err(IngestError::PeerStopped)) => read = Err(e),
                    Ok(_) => {}
                }
            }
            match assembly.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(Err(why)) => Err(IngestError::AssemblyStart(why)),
                Ok(Ok(())) => read,
            }
        })
    }

    /// Reads batches until the socket is empty (or for a bounded while).
    fn drain(&mut self) -> Result<Drained, IngestError> {
        let fd = self.socket.as_raw_fd();
        let mut drained = Drained { buffers: 0, empty: false };
        for _ in 0..BATCHES_PER_WAKE {
            if let Some(min_payload) = self.one_copy
                && self.tap.is_none()
                && let Some(plan) = self.assembler.plan_landing(self.landing_shape, min_payload)
                && plan.groups() > 0
            {
                let n = self.batch.recv_landing(fd, plan).map_err(IngestError::Recv)?;
                drained.buffers += n;
                let fullest = if n > 0 { self.deliver_landed(n, clock::realtime_ns()) } else { 0 };
                self.landing_shape = self.shape_after(n, fullest);
                self.assembler.end_landing();
                if n < self.batch.buffers() {
                    drained.empty = true;
                    break;
                }
                continue;
            }
            let n = self.batch.recv(fd).map_err(IngestError::Recv)?;
            drained.buffers += n;
            let batch_ns = if n > 0 { clock::realtime_ns() } else { 0 };
            let mut fullest = 0;
            for i in 0..n {
                let (buf, info) = self.batch.message(i, batch_ns);
                self.latest_rx_ns = self.latest_rx_ns.max(info.rx_ns);
                let held = deliver(
                    &mut self.assembler,
                    &self.counters,
                    &self.allow,
                    self.tap.as_deref_mut(),
                    self.local_addr,
                    buf,
                    info,
                );
                fullest = fullest.max(held);
            }
            self.landing_shape = self.shape_after(n, fullest);
            if n < self.batch.buffers() {
                drained.empty = true;
                break;
            }
        }
        Ok(drained)
    }
}

/// The thread that reads the socket, as [`receive_loop`] drives it.
pub(super) trait SocketReader {
    /// Waits until the socket is readable or the readiness timeout passed.
    fn wait_readable(&mut self) -> Result<(), IngestError>;
    /// The thread comes back after being away from the socket (a wait, or
    /// a turn that was a gap): a backlog may wait.
    fn prepare_for_backlog(&mut self);
    /// Reads until the socket is empty (or for a bounded while).
    fn read_available(&mut self) -> Result<Drained, IngestError>;
    /// A turn that read what `drained` says ended at `now_ns`.
    fn end_turn(&mut self, drained: &Drained, now_ns: u64);
}

/// The receive loop, until `stop` is set: a turn reads the socket dry; it
/// waits in epoll only once a read found the socket empty, and (with a
/// `poll_budget`) only after it stayed empty that long. The socket is
/// edge-triggered, so a turn must read until empty before it waits.
pub(super) fn receive_loop(
    reader: &mut impl SocketReader,
    stop: &AtomicBool,
    poll_budget: Duration,
    counters: &IngestCounters,
) -> Result<(), IngestError> {
    let busy_polling = !poll_budget.is_zero();
    let budget_ns = u64::try_from(poll_budget.as_nanos()).unwrap_or(u64::MAX);
    // One clock read a turn serves the poll budget, the gap counter and
    // the tick (a busy-polling turn that finds the socket empty is short,
    // and a second read was a noticeable part of it).
    let mut now = clock::realtime_ns();
    let mut last_data_ns = now;
    let mut turns = BusyPollTurns::new(now);
    let mut away = false;
    let mut waits = !busy_polling;
    while !stop.load(Ordering::Acquire) {
        if waits {
            reader.wait_readable()?;
        }
        if busy_polling && (waits || away) {
            reader.prepare_for_backlog();
        }
        let drained = reader.read_available()?;
        now = clock::realtime_ns();
        if drained.buffers > 0 {
            last_data_ns = now;
        }
        away = busy_polling && turns.gap_after(now, waits);
        if away {
            IngestCounters::bump(&counters.busy_poll_gaps);
        }
        reader.end_turn(&drained, now);
        // A clock set back restarts the budget instead of stretching it.
        last_data_ns = last_data_ns.min(now);
        waits = drained.empty && (!busy_polling || now - last_data_ns >= budget_ns);
    }
    Ok(())
}

/// One thread reads and assembles.
impl<A: FrameAssembler> SocketReader for UdpReceiver<A> {
    fn wait_readable(&mut self) -> Result<(), IngestError> {
        self.readiness.wait()
    }

    fn prepare_for_backlog(&mut self) {
        self.expect_backlog();
    }

    fn read_available(&mut self) -> Result<Drained, IngestError> {
        self.drain()
    }

    fn end_turn(&mut self, drained: &Drained, now_ns: u64) {
        // Frames go stale by the clock only once nothing more of them can
        // be waiting in the socket; while it holds datagrams, by the
        // arrival time of the latest one handled.
        self.assembler.on_tick_behind(if drained.empty { now_ns } else { self.latest_rx_ns }, now_ns);
    }
}

/// A receive-loop turn longer than this without a wait in epoll counts in
/// `busy_poll_gaps`.
const BUSY_POLL_GAP_NS: u64 = 50_000;

/// The end time of the receive loop's last turn, to find the turns of a
/// busy-polling receiver that left the socket unread too long.
struct BusyPollTurns {
    last_end_ns: u64,
}

impl BusyPollTurns {
    fn new(now_ns: u64) -> Self {
        Self { last_end_ns: now_ns }
    }

    /// Ends a turn at `now_ns`; whether it was a gap: longer than
    /// [`BUSY_POLL_GAP_NS`] although it did not wait for readiness (a turn
    /// that `waited` found the socket empty and slept on purpose).
    fn gap_after(&mut self, now_ns: u64, waited: bool) -> bool {
        let took = now_ns.saturating_sub(self.last_end_ns);
        self.last_end_ns = now_ns;
        !waited && took > BUSY_POLL_GAP_NS
    }
}

impl<A: FrameAssembler> UdpReceiver<A> {
    /// After a busy-polling thread was away from its socket (its budget ran
    /// out and it waited in epoll, or its last turn was a gap), any number
    /// of datagrams may wait: the next one-copy plan covers every receive
    /// buffer, so that none of them lands in a plain buffer for want of a
    /// planned place and is copied twice. A plan shaped after an empty read
    /// covers only a few, which is all a receiver that kept reading finds.
    /// (A receiver without a poll budget waits before nearly every read;
    /// planning the whole batch each time would cost it more than the
    /// copies it saves.)
    fn expect_backlog(&mut self) {
        self.landing_shape.buffers = self.batch.buffers();
    }

    /// The plan to make after a receive call that returned `n` buffers, the
    /// fullest holding `fullest` datagrams: twice as many buffers and a
    /// little more. Several buffers show how the kernel cut what waited, and
    /// the next plan expects as many datagrams in each as the fullest held;
    /// one buffer only shows that it may hold more than planned (a plan's
    /// first buffer takes whatever comes, so planning it too large costs
    /// nothing).
    fn shape_after(&self, n: usize, fullest: usize) -> LandingShape {
        let buffers = (2 * n + MIN_GROUPS).min(self.batch.buffers());
        let datagrams_per_buffer = match n {
            0 => self.landing_shape.datagrams_per_buffer,
            1 => fullest.max(self.landing_shape.datagrams_per_buffer),
            _ => fullest,
        };
        LandingShape { buffers, datagrams_per_buffer }
    }

    /// Hands the `n` messages of a one-copy receive to the assembler: first
    /// records where every message's datagrams fell (gathering the ones
    /// that did not line up) before anything is written to a slot, then
    /// delivers them in order, landed payloads in place. Returns the most
    /// datagrams one message held.
    fn deliver_landed(&mut self, n: usize, batch_ns: u64) -> usize {
        let Some(plan) = self.assembler.landing() else { return 0 };
        self.layouts.clear();
        let mut fullest = 0;
        for i in 0..n {
            let info = self.batch.info(i, batch_ns);
            let layout = self.batch.landed(i, plan, info.gro_segment);
            match layout {
                MessageLayout::Aligned { landed, last_payload, .. } => {
                    let group = self.batch.group(i);
                    for j in 0..landed {
                        let k = group.start + j;
                        let len = if j + 1 == landed { last_payload } else { plan.target(k).len };
                        plan.set_arrived(k, len);
                    }
                }
                MessageLayout::Gather => {
                    self.batch.gather(i, plan);
                }
            }
            self.layouts.push(layout);
        }
        for i in 0..n {
            let info = self.batch.info(i, batch_ns);
            self.latest_rx_ns = self.latest_rx_ns.max(info.rx_ns);
            // What the kernel did not put in a slot goes through `deliver`: an
            // Aligned message's tail, or a Gather message's whole buffer.
            let buf = match self.layouts[i] {
                MessageLayout::Aligned { landed, tail, .. } => {
                    let group = self.batch.group(i);
                    let allowed = self.allow.allows(info.source.map(|s| s.ip()));
                    let targets = group.start..group.start + landed;
                    if allowed {
                        if let Some(k) = targets.clone().next() {
                            self.allow.admitted(info.source, self.batch.head(k).as_slice());
                        }
                        let batch = &self.batch;
                        let mut heads = targets.map(|k| (k, batch.head(k).as_slice()));
                        self.assembler.on_landed_run_at(
                            &mut heads,
                            info.rx_ns,
                            info.batch_ns.max(info.rx_ns),
                        );
                    } else {
                        for k in targets {
                            let payload = match self.assembler.landing().map(|p| p.take(k)) {
                                Some(Landed::InSlot(len)) => len,
                                _ => 0,
                            };
                            self.counters.datagram(HEADER_LEN + payload);
                            IngestCounters::bump(&self.counters.source_not_allowed);
                        }
                    }
                    // GRO segments of the whole buffer; `deliver` counts the
                    // tail's own when it holds more than one.
                    let tail_count = if tail > 0 { datagram_count(tail, info.gro_segment) } else { 0 };
                    if landed + tail_count > 1 {
                        let uncounted = landed + if tail_count == 1 { 1 } else { 0 };
                        IngestCounters::add(&self.counters.gro_segments, uncounted as u64);
                    }
                    fullest = fullest.max(landed + tail_count);
                    if tail == 0 {
                        continue;
                    }
                    self.batch.tail(i, tail)
                }
                MessageLayout::Gather => self.batch.gathered(i),
            };
            let held =
                deliver(&mut self.assembler, &self.counters, &self.allow, None, self.local_addr, buf, info);
            if matches!(self.layouts[i], MessageLayout::Gather) {
                fullest = fullest.max(held);
            }
        }
        fullest
    }
}

/// Fewest receive buffers a one-copy plan covers.
const MIN_GROUPS: usize = 4;

/// What one [`UdpReceiver::drain`] read.
pub(super) struct Drained {
    /// Buffers (datagrams, or GRO buffers of several) taken off the socket.
    pub(super) buffers: usize,
    /// The last read came back short: the socket was empty then.
    pub(super) empty: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::handoff::ReadingSide;
    use crate::ring::layout::{SLOT_COMPLETE, SlotHeader, ring_bytes};
    use crate::ring::{FrameRing, HostMemory, OverrunPolicy, RingReader};
    use crate::wire::native::{self, NativeHeader};

    fn reassembler() -> (Reassembler, RingReader) {
        let mem = HostMemory::new(ring_bytes(8, 8192).unwrap()).unwrap();
        let ring = FrameRing::new(Box::new(mem), 8, 8192, OverrunPolicy::Every).unwrap();
        let reader = ring.reader().unwrap();
        (Reassembler::new(Default::default(), ring.writer().unwrap(), Arc::default()), reader)
    }

    /// One frame of `len` bytes cut into `segment - HEADER_LEN` payloads,
    /// coalesced the way GRO hands it over: datagrams back to back.
    fn coalesced(len: usize, segment: usize) -> (Vec<u8>, Vec<u8>) {
        coalesced_frame(len, segment, 0)
    }

    /// As [`coalesced`], for frame `frame_seq` (the same payload bytes).
    fn coalesced_frame(len: usize, segment: usize, frame_seq: u64) -> (Vec<u8>, Vec<u8>) {
        let frame: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
        let max_payload = (segment - native::HEADER_LEN) as u32;
        let (count, _, _) = native::packet_span(len as u32, max_payload, 0);
        let mut buf = Vec::new();
        for i in 0..count {
            let (_, off, plen) = native::packet_span(len as u32, max_payload, i);
            let h = NativeHeader {
                packet_index: i,
                packet_count: count,
                payload_offset: off,
                frame_len: len as u32,
                frame_seq,
                ..Default::default()
            };
            buf.extend(native::encode(&h, &frame[off as usize..(off + plen) as usize]));
        }
        (buf, frame)
    }

    const LOCAL: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 5000));

    /// A tap that keeps what it is given.
    #[derive(Default)]
    struct Collect(Vec<(SocketAddr, SocketAddr, Vec<u8>, u64)>);

    impl DatagramTap for Collect {
        fn on_datagram(&mut self, src: SocketAddr, dst: SocketAddr, bytes: &[u8], rx_ns: u64) {
            self.0.push((src, dst, bytes.to_vec(), rx_ns));
        }
    }

    #[test]
    fn the_tap_sees_every_split_datagram_but_not_cut_buffers() {
        let (mut r, _rd) = reassembler();
        let counters = Arc::clone(r.counters());
        let allow = AllowList::new(&["10.1.0.0/16".into()]).unwrap();
        let (buf, _) = coalesced(3000, 1048);
        let mut tap = Collect::default();
        deliver(&mut r, &counters, &allow, Some(&mut tap), LOCAL, &buf, info(Some(1048), "10.1.2.3"));
        deliver(&mut r, &counters, &allow, Some(&mut tap), LOCAL, &buf[..1048], info(None, "10.9.9.9"));
        let cut = BufferInfo { truncated: true, ..info(None, "10.1.2.3") };
        deliver(&mut r, &counters, &allow, Some(&mut tap), LOCAL, &buf[..100], cut);
        let src = |ip: &str| SocketAddr::new(ip.parse().unwrap(), 4000);
        let want: Vec<_> = buf
            .chunks(1048)
            .map(|d| (src("10.1.2.3"), LOCAL, d.to_vec(), 5))
            .chain([(src("10.9.9.9"), LOCAL, buf[..1048].to_vec(), 5)])
            .collect();
        assert_eq!(tap.0, want, "three split datagrams and the disallowed one, in order");
        let s = r.counters().snapshot();
        assert_eq!((s.packets_accepted, s.source_not_allowed, s.truncated), (3, 1, 1));
    }

    fn info(gro_segment: Option<usize>, source: &str) -> BufferInfo {
        BufferInfo {
            truncated: false,
            gro_segment,
            source: Some(SocketAddr::new(source.parse().unwrap(), 4000)),
            rx_ns: 5,
            batch_ns: 5,
        }
    }

    #[test]
    fn splits_a_coalesced_buffer_into_its_datagrams() {
        let (mut r, mut rd) = reassembler();
        let (buf, frame) = coalesced(5000, 1048);
        let counters = Arc::clone(r.counters());
        deliver(&mut r, &counters, &AllowList::default(), None, LOCAL, &buf, info(Some(1048), "10.1.2.3"));
        let s = r.counters().snapshot();
        assert_eq!((s.datagrams, s.gro_segments, s.packets_accepted, s.frames_complete), (5, 5, 5, 1));
        let slot = rd.claim().unwrap();
        assert_eq!((slot.header.flags, slot.payload), (SLOT_COMPLETE, &frame[..]));
    }

    /// Runs a receiver bound by `cfg` on its own thread, sends one frame of
    /// `len` bytes in `segment`-byte datagrams, and returns what the ring got.
    fn receive_one_frame(cfg: UdpConfig, len: usize, segment: usize) -> (SlotHeader, Vec<u8>, Vec<u8>) {
        let (header, payload, frame, _) = receive_one_frame_with(cfg, Default::default(), len, segment, None);
        (header, payload, frame)
    }

    /// As [`receive_one_frame`], reassembling under `reassembly`; with
    /// `behind`, the frame is sent before the receiver starts and waits that
    /// long in the socket. Also returns the counters at the end.
    fn receive_one_frame_with(
        cfg: UdpConfig,
        reassembly: crate::ingest::ReassemblyConfig,
        len: usize,
        segment: usize,
        behind: Option<Duration>,
    ) -> (SlotHeader, Vec<u8>, Vec<u8>, crate::ingest::IngestSnapshot) {
        let mem = HostMemory::new(ring_bytes(8, 8192).unwrap()).unwrap();
        let ring = FrameRing::new(Box::new(mem), 8, 8192, OverrunPolicy::Every).unwrap();
        let mut rd = ring.reader().unwrap();
        let r = Reassembler::new(reassembly, ring.writer().unwrap(), Arc::default());
        let counters = Arc::clone(r.counters());
        let mut receiver = UdpReceiver::bind(&cfg, r).unwrap();
        let to = receiver.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let start = move || std::thread::spawn(move || receiver.run(&thread_stop));
        let (buf, frame) = coalesced(len, segment);
        let send = || {
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            for d in buf.chunks(segment) {
                tx.send_to(d, to).unwrap();
            }
        };
        let handle = match behind {
            None => {
                let handle = start();
                send();
                handle
            }
            Some(wait) => {
                send();
                std::thread::sleep(wait);
                start()
            }
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while counters.snapshot().frames_complete + counters.snapshot().frames_incomplete == 0
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Release);
        handle.join().unwrap().unwrap();
        let slot = rd.claim().expect("the frame was published");
        (slot.header, slot.payload.to_vec(), frame, counters.snapshot())
    }

    #[test]
    fn a_polling_receiver_with_realtime_priority_assembles_frames() {
        // The priority is applied where permitted and logged and skipped
        // elsewhere; either way the spinning receiver must deliver the frame.
        let cfg = UdpConfig {
            bind: "127.0.0.1:0".into(),
            poll_budget_us: 200,
            realtime_priority: 1,
            ..UdpConfig::default()
        };
        let (header, payload, frame) = receive_one_frame(cfg, 6000, 1048);
        assert_eq!((header.flags, header.packets_received), (SLOT_COMPLETE, 6));
        assert_eq!(payload, frame);
    }

    #[test]
    fn a_receiver_behind_its_socket_loses_nothing_that_arrived_in_time() {
        // The whole frame waits in the socket for longer than the frame
        // timeout before the receiver reads it: its packets arrived within
        // the timeout (by their kernel timestamps), so the frame completes;
        // with an assembly thread too, which gets it in three batches of two
        // and may tick between them (a frame goes stale only by what the
        // reading thread has found the socket empty after).
        for assembly_thread in [false, true] {
            let cfg = UdpConfig {
                bind: "127.0.0.1:0".into(),
                gro: false,
                batch: 2,
                assembly_thread,
                ..UdpConfig::default()
            };
            let reassembly = crate::ingest::ReassemblyConfig { frame_timeout_ms: 2, ..Default::default() };
            let (header, payload, frame, s) =
                receive_one_frame_with(cfg, reassembly, 6000, 1048, Some(Duration::from_millis(30)));
            assert_eq!((header.flags, header.packets_received), (SLOT_COMPLETE, 6), "{assembly_thread}");
            assert_eq!(payload, frame);
            assert_eq!((s.frames_timed_out, s.late), (0, 0));
        }
    }

    #[test]
    fn a_blocking_receiver_assembles_frames() {
        let cfg = UdpConfig { bind: "127.0.0.1:0".into(), gro: false, ..UdpConfig::default() };
        let (header, payload, frame) = receive_one_frame(cfg, 3000, 1048);
        assert_eq!((header.flags, header.packets_received), (SLOT_COMPLETE, 3));
        assert_eq!(payload, frame);
    }

    #[test]
    fn a_backlog_after_a_wait_lands_in_place() {
        // A receiver that found its socket empty plans few landing places;
        // once a busy-polling one comes back from a wait, a whole frame may
        // be waiting, and every datagram of it should still land in its slot
        // in one copy.
        const SLOT: usize = 192 * 1024;
        let mem = HostMemory::new(ring_bytes(8, SLOT).unwrap()).unwrap();
        let ring = FrameRing::new(Box::new(mem), 8, SLOT, OverrunPolicy::Every).unwrap();
        let mut rd = ring.reader().unwrap();
        let r = Reassembler::new(Default::default(), ring.writer().unwrap(), Arc::default());
        let counters = Arc::clone(r.counters());
        let cfg = UdpConfig { bind: "127.0.0.1:0".into(), gro: false, batch: 16, ..UdpConfig::default() };
        let mut receiver = UdpReceiver::bind(&cfg, r).unwrap();
        let to = receiver.local_addr();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let segment = 4500;
        let (first, frame) = coalesced_frame(170_003, segment, 0);
        let (second, _) = coalesced_frame(170_003, segment, 1);
        let count = first.chunks(segment).count() as u64;
        assert!(count > 2 * receiver.batch.buffers() as u64, "the frame outnumbers the receive buffers");
        let send_frame = |buf: &[u8]| {
            for d in buf.chunks(segment) {
                tx.send_to(d, to).unwrap();
            }
        };
        let drain_until = |receiver: &mut UdpReceiver, complete: u64| {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while counters.snapshot().frames_complete < complete && std::time::Instant::now() < deadline {
                receiver.drain().unwrap();
            }
            assert_eq!(counters.snapshot().frames_complete, complete);
        };
        send_frame(&first);
        drain_until(&mut receiver, 1);
        // The socket is empty now: the next plan is a short one.
        assert_eq!(receiver.drain().unwrap().buffers, 0);
        assert!(receiver.landing_shape.buffers < receiver.batch.buffers());
        let placed = counters.snapshot().placed_by_kernel;
        send_frame(&second);
        receiver.expect_backlog();
        drain_until(&mut receiver, 2);
        let s = counters.snapshot();
        assert_eq!(
            s.placed_by_kernel - placed,
            count,
            "every datagram of the second frame placed by the kernel"
        );
        assert_eq!((s.datagrams, s.packets_accepted), (2 * count, 2 * count));
        for seq in 0..2 {
            let slot = rd.claim().expect("both frames were published");
            assert_eq!((slot.header.frame_seq, slot.header.flags), (seq, SLOT_COMPLETE));
            assert_eq!(slot.payload, &frame[..]);
            let claimed = slot.seq;
            rd.finish(claimed);
        }
    }

    /// A native frame's datagrams (`segment` bytes at most) for stream 0.
    fn frame_datagrams(len: usize, segment: usize, frame_seq: u64) -> (Vec<Vec<u8>>, Vec<u8>) {
        let (buf, frame) = coalesced_frame(len, segment, frame_seq);
        (buf.chunks(segment).map(<[u8]>::to_vec).collect(), frame)
    }

    /// A tap whose datagrams the test can read while the receiver owns it.
    #[derive(Clone, Default)]
    struct Shared(Arc<std::sync::Mutex<Vec<Vec<u8>>>>);

    impl DatagramTap for Shared {
        fn on_datagram(&mut self, _: SocketAddr, _: SocketAddr, bytes: &[u8], _: u64) {
            self.0.lock().unwrap().push(bytes.to_vec());
        }
    }

    /// A receiver with an assembly thread (`ingest.assembly_thread`) on a
    /// ring of `slots` slots of `slot` bytes, started on its own thread;
    /// `prepare` adjusts it before it runs.
    struct Split {
        to: SocketAddr,
        counters: Arc<IngestCounters>,
        reader: RingReader,
        stop: Arc<AtomicBool>,
        handle: std::thread::JoinHandle<Result<(), IngestError>>,
    }

    impl Split {
        fn start(
            cfg: UdpConfig,
            reassembly: crate::ingest::ReassemblyConfig,
            slots: usize,
            slot: usize,
            prepare: impl FnOnce(&mut UdpReceiver),
        ) -> Self {
            let mem = HostMemory::new(ring_bytes(slots, slot).unwrap()).unwrap();
            let ring = FrameRing::new(Box::new(mem), slots, slot, OverrunPolicy::Every).unwrap();
            let reader = ring.reader().unwrap();
            let r = Reassembler::new(reassembly, ring.writer().unwrap(), Arc::default());
            let counters = Arc::clone(r.counters());
            let cfg = UdpConfig { bind: "127.0.0.1:0".into(), assembly_thread: true, ..cfg };
            let mut receiver = UdpReceiver::bind(&cfg, r).unwrap();
            assert!(receiver.has_assembly_thread());
            prepare(&mut receiver);
            let to = receiver.local_addr();
            let stop = Arc::new(AtomicBool::new(false));
            let thread_stop = Arc::clone(&stop);
            let handle = std::thread::spawn(move || receiver.run(&thread_stop));
            // The kernel turns receive stamping on a moment after the first
            // socket asks; until then a datagram is stamped when it is read,
            // and several readers' datagrams would be merged by that.
            std::thread::sleep(Duration::from_millis(20));
            Split { to, counters, reader, stop, handle }
        }

        /// Waits (5 s at most) until `done` holds for the counters.
        fn wait_until(&self, done: impl Fn(&crate::ingest::IngestSnapshot) -> bool) {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while !done(&self.counters.snapshot()) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(done(&self.counters.snapshot()), "{:?}", self.counters.snapshot());
        }

        fn stop(self) -> (RingReader, Result<(), IngestError>) {
            self.stop.store(true, Ordering::Release);
            (self.reader, self.handle.join().unwrap())
        }
    }

    #[test]
    fn an_assembly_thread_assembles_frames_with_and_without_gro() {
        for (gro, reading_threads) in [(true, 1), (false, 1), (true, 2), (false, 2)] {
            let cfg = UdpConfig {
                bind: "127.0.0.1:0".into(),
                gro,
                assembly_thread: true,
                reading_threads,
                ..UdpConfig::default()
            };
            let (header, payload, frame, s) =
                receive_one_frame_with(cfg, Default::default(), 7001, 1048, None);
            assert_eq!(
                (header.flags, header.packets_received),
                (SLOT_COMPLETE, 8),
                "gro {gro} {reading_threads}"
            );
            assert_eq!(payload, frame);
            assert_eq!((s.placed_by_kernel, s.datagrams, s.packets_accepted), (0, 8, 8));
        }
    }

    #[test]
    fn an_assembly_thread_keeps_the_order_read_and_counts_every_datagram() {
        for reading_threads in [1, 3] {
            keeps_the_order_read_and_counts_every_datagram(reading_threads);
        }
    }

    fn keeps_the_order_read_and_counts_every_datagram(reading_threads: usize) {
        // Frames of 3 datagrams with a foreign datagram after every fifth
        // frame, sent faster than one batch at a time: every frame comes out
        // whole and in order, every foreign datagram is counted, and the tap
        // sees all of them in the order sent, however many threads read
        // them (the kernel spreads them over their sockets at random).
        const FRAMES: u64 = 300;
        let tap = Shared::default();
        let seen = tap.clone();
        let cfg = UdpConfig { gro: false, batch: 4, reading_threads, ..UdpConfig::default() };
        let mut split = Split::start(cfg, Default::default(), 512, 4096, |r| {
            assert_eq!(r.reading_threads(), reading_threads);
            r.set_tap(Box::new(tap));
        });
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (mut sent, mut frames, mut framed) = (Vec::new(), Vec::new(), 0u64);
        for seq in 0..FRAMES {
            let (datagrams, frame) = frame_datagrams(3000 + seq as usize, 1048, seq);
            framed += datagrams.len() as u64;
            for d in datagrams {
                tx.send_to(&d, split.to).unwrap();
                sent.push(d);
            }
            if seq % 5 == 4 {
                let foreign = vec![0x5a; 60];
                tx.send_to(&foreign, split.to).unwrap();
                sent.push(foreign);
            }
            frames.push(frame);
        }
        split.wait_until(|s| s.frames_complete == FRAMES && s.datagrams == sent.len() as u64);
        for (seq, frame) in frames.iter().enumerate() {
            let slot = split.reader.claim().expect("every frame was published");
            assert_eq!((slot.header.frame_seq, slot.header.flags), (seq as u64, SLOT_COMPLETE));
            assert_eq!(slot.payload, &frame[..]);
            let claimed = slot.seq;
            split.reader.finish(claimed);
        }
        let counters = Arc::clone(&split.counters);
        let (_, result) = split.stop();
        result.unwrap();
        assert_eq!(*seen.0.lock().unwrap(), sent, "the tap saw every datagram in the order sent");
        let s = counters.snapshot();
        assert_eq!((s.packets_accepted, s.bad_magic, s.frames_incomplete), (framed, FRAMES / 5, 0));
        assert_eq!(s.datagrams_accounted(), s.datagrams);
    }

    #[test]
    fn an_assembly_thread_times_out_an_incomplete_frame_while_idle_and_flushes_at_stop() {
        // Frame 0 lacks its last datagram: with nothing more arriving it goes
        // stale by the clock and is published flagged. Frame 1 lacks one too,
        // but its timeout is far off: stopping publishes it flagged.
        let reassembly = crate::ingest::ReassemblyConfig { frame_timeout_ms: 5, ..Default::default() };
        let split =
            Split::start(UdpConfig { gro: false, ..UdpConfig::default() }, reassembly, 8, 8192, |_| {});
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (first, _) = frame_datagrams(4000, 1048, 0);
        for d in &first[..first.len() - 1] {
            tx.send_to(d, split.to).unwrap();
        }
        split.wait_until(|s| s.frames_timed_out == 1);
        let s = split.counters.snapshot();
        assert_eq!((s.frames_incomplete, s.frames_complete), (1, 0));
        split.stop().1.unwrap();
        let reassembly = crate::ingest::ReassemblyConfig { frame_timeout_ms: 60_000, ..Default::default() };
        let mut split =
            Split::start(UdpConfig { gro: false, ..UdpConfig::default() }, reassembly, 8, 8192, |_| {});
        let (second, _) = frame_datagrams(4000, 1048, 1);
        for d in &second[1..] {
            tx.send_to(d, split.to).unwrap();
        }
        split.wait_until(|s| s.packets_accepted == second.len() as u64 - 1);
        assert!(split.reader.claim().is_none(), "nothing published before the stop");
        let counters = Arc::clone(&split.counters);
        let (mut reader, result) = split.stop();
        result.unwrap();
        let slot = reader.claim().expect("the stop flushed the frame in flight");
        assert_eq!((slot.header.frame_seq, slot.header.flags & SLOT_COMPLETE), (1, 0));
        assert_eq!(counters.snapshot().frames_incomplete, 1);
    }

    #[test]
    fn the_assembly_thread_ages_frames_by_what_was_read_not_by_the_clock() {
        // Frame 0's first two datagrams are handed over, then nothing for
        // ten frame timeouts while the assembly thread idles and ticks: the
        // rest still waits in the socket (the reading side never found it
        // empty), so the frame may not go stale and completes once the rest
        // comes. Frame 1 is handed over the same way, and after the idle
        // while the reading side says it found the socket empty: then it
        // times out.
        let mem = HostMemory::new(ring_bytes(8, 8192).unwrap()).unwrap();
        let ring = FrameRing::new(Box::new(mem), 8, 8192, OverrunPolicy::Every).unwrap();
        let mut rd = ring.reader().unwrap();
        let reassembly = crate::ingest::ReassemblyConfig { frame_timeout_ms: 2, ..Default::default() };
        let mut r = Reassembler::new(reassembly, ring.writer().unwrap(), Arc::default());
        let counters = Arc::clone(r.counters());
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = rx.as_raw_fd();
        // Arrival times from the kernel, as the receiver asks for them.
        set_int_option(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).unwrap();
        let stage =
            AssemblyStage { allow: &AllowList::default(), counters: &counters, local: LOCAL, sockets: &[fd] };
        let (mut reading, assembling) = handoff::pool(1, 2, 2);
        let reading = reading.pop().unwrap();
        // Hands over the next `want` datagrams waiting in the socket.
        let hand_over = |reading: &ReadingSide, want: usize| {
            let mut batch = reading.free_batch(Duration::from_secs(5)).unwrap().expect("a free batch");
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            let mut count = batch.recv(fd).unwrap();
            while count == 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
                count = batch.recv(fd).unwrap();
            }
            assert_eq!(count, want);
            reading.hand_over(batch, count, clock::realtime_ns()).unwrap();
        };
        let idle = Duration::from_millis(20);
        std::thread::scope(|scope| {
            let (stage, r) = (&stage, &mut r);
            scope.spawn(move || stage.run(&assembling, r, None, Duration::ZERO, Duration::from_millis(1)));
            let (first, frame) = frame_datagrams(6000, 1048, 0);
            for d in &first {
                tx.send_to(d, rx.local_addr().unwrap()).unwrap();
            }
            hand_over(&reading, 2);
            std::thread::sleep(idle);
            assert_eq!(counters.snapshot().frames_timed_out, 0, "frame 0 went stale by the clock");
            hand_over(&reading, 2);
            hand_over(&reading, first.len() - 4);
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while counters.snapshot().frames_complete == 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            let slot = rd.claim().expect("frame 0 was published");
            assert_eq!((slot.header.frame_seq, slot.header.flags), (0, SLOT_COMPLETE));
            assert!(slot.payload == &frame[..], "frame 0's payload");
            let claimed = slot.seq;
            rd.finish(claimed);

            let (second, _) = frame_datagrams(6000, 1048, 1);
            for d in &second[..2] {
                tx.send_to(d, rx.local_addr().unwrap()).unwrap();
            }
            hand_over(&reading, 2);
            std::thread::sleep(idle);
            reading.mark_drained(clock::realtime_ns());
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while counters.snapshot().frames_timed_out == 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(reading);
        });
        let s = counters.snapshot();
        assert_eq!((s.frames_complete, s.frames_timed_out, s.frames_incomplete), (1, 1, 1), "{s:?}");
        let slot = rd.claim().expect("frame 1 was published");
        assert_eq!((slot.header.frame_seq, slot.header.flags & SLOT_COMPLETE), (1, 0));
    }

    /// Two reading sides' sockets and an assembly stage over them, as
    /// `ingest.reading_threads = 2` has: datagrams go to either socket as
    /// the test says, and reach the stage when a side hands them over.
    struct TwoReaders {
        sockets: [std::net::UdpSocket; 2],
        tx: std::net::UdpSocket,
        fds: [RawFd; 2],
        allow: AllowList,
        counters: Arc<IngestCounters>,
        reader: RingReader,
    }

    impl TwoReaders {
        /// The sockets, and the reassembler the stage is to feed.
        fn new() -> (Self, Reassembler) {
            let mem = HostMemory::new(ring_bytes(8, 16384).unwrap()).unwrap();
            let ring = FrameRing::new(Box::new(mem), 8, 16384, OverrunPolicy::Every).unwrap();
            let reader = ring.reader().unwrap();
            let reassembler = Reassembler::new(Default::default(), ring.writer().unwrap(), Arc::default());
            let counters = Arc::clone(reassembler.counters());
            let socket = || {
                let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                set_int_option(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).unwrap();
                s
            };
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let sockets = [socket(), socket()];
            // The kernel turns receive stamping on a moment after the first
            // socket asks (until then a datagram is stamped when it is read).
            std::thread::sleep(Duration::from_millis(20));
            let fds = [sockets[0].as_raw_fd(), sockets[1].as_raw_fd()];
            (TwoReaders { sockets, tx, fds, allow: AllowList::default(), counters, reader }, reassembler)
        }

        /// The assembly stage over both sockets.
        fn stage(&self) -> AssemblyStage<'_> {
            AssemblyStage { allow: &self.allow, counters: &self.counters, local: LOCAL, sockets: &self.fds }
        }

        /// Sends `datagrams` in order, each to the socket `to` names.
        fn send(&self, datagrams: &[Vec<u8>], to: impl Fn(usize) -> usize) {
            for (i, d) in datagrams.iter().enumerate() {
                self.tx.send_to(d, self.sockets[to(i)].local_addr().unwrap()).unwrap();
            }
        }

        /// Side `r` reads the `want` datagrams waiting in its socket and
        /// hands them over, then says it found its socket empty on that
        /// read (it came back short), as a reading thread does.
        fn hand_over(&self, side: &ReadingSide, r: usize, want: usize) {
            let mut batch = side.free_batch(Duration::from_secs(5)).unwrap().expect("a free batch");
            assert!(want < batch.buffers(), "the read comes back short");
            let fd = self.sockets[r].as_raw_fd();
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            let mut started = clock::realtime_ns();
            let mut count = batch.recv(fd).unwrap();
            while count < want && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
                assert_eq!(count, 0, "the batch is read in one go");
                started = clock::realtime_ns();
                count = batch.recv(fd).unwrap();
            }
            assert_eq!(count, want);
            side.hand_over(batch, count, clock::realtime_ns()).unwrap();
            side.mark_drained(started);
        }

        fn accepted(&self) -> u64 {
            self.counters.snapshot().packets_accepted
        }

        fn wait_for_accepted(&self, want: u64) {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while self.accepted() < want && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(self.accepted(), want);
        }
    }

    #[test]
    fn datagrams_of_several_readers_are_assembled_in_arrival_order() {
        // One frame's datagrams go to the two sockets in turn; reader 1
        // hands its half over first. Reader 0 is reading (not parked) and
        // has not said its socket was empty: nothing may be assembled
        // before its half comes, and then all of it in the order sent.
        let (mut two, mut r) = TwoReaders::new();
        let (datagrams, frame) = frame_datagrams(8000, 1048, 0);
        assert_eq!(datagrams.len(), 8);
        let tap = Shared::default();
        let seen = tap.clone();
        let stage = two.stage();
        let (reading, assembling) = handoff::pool(2, 2, 8);
        std::thread::scope(|scope| {
            let r = &mut r;
            scope.spawn(move || {
                let mut tap = tap;
                stage.run(&assembling, r, Some(&mut tap), Duration::ZERO, Duration::from_secs(2))
            });
            reading[0].unpark();
            two.send(&datagrams, |i| i % 2);
            two.hand_over(&reading[1], 1, 4);
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(
                two.accepted(),
                0,
                "assembled before the reader that may hold earlier ones handed over"
            );
            two.hand_over(&reading[0], 0, 4);
            two.wait_for_accepted(8);
            assert_eq!(*seen.0.lock().unwrap(), datagrams, "in the order they arrived");

            // Reader 0 parked with its socket empty holds nothing: reader
            // 1's datagrams go on at once.
            reading[0].park();
            let (second, _) = frame_datagrams(3000, 1048, 1);
            two.send(&second, |_| 1);
            let handed = std::time::Instant::now();
            two.hand_over(&reading[1], 1, second.len());
            let mut accepted = 8 + second.len() as u64;
            two.wait_for_accepted(accepted);
            assert!(handed.elapsed() < Duration::from_secs(1), "waited for a parked reader");

            // Nor does one whose socket holds only what arrived later: the
            // third frame's datagrams reach reader 1 first, then one
            // reaches reader 0, which stays parked.
            let (third, _) = frame_datagrams(3000, 1048, 2);
            two.send(&third, |i| if i + 1 == third.len() { 0 } else { 1 });
            let handed = std::time::Instant::now();
            two.hand_over(&reading[1], 1, third.len() - 1);
            accepted += third.len() as u64 - 1;
            two.wait_for_accepted(accepted);
            assert!(
                handed.elapsed() < Duration::from_secs(1),
                "waited for a reader holding a later datagram"
            );
            reading[0].unpark();
            two.hand_over(&reading[0], 0, 1);
            two.wait_for_accepted(accepted + 1);
            assert_eq!(two.counters.snapshot().frames_complete, 3);
            drop(reading);
        });
        let slot = two.reader.claim().expect("frame 0 was published");
        assert_eq!((slot.header.frame_seq, slot.header.flags), (0, SLOT_COMPLETE));
        assert!(slot.payload == &frame[..]);
    }

    #[test]
    fn a_reader_that_is_reading_holds_the_others_up_until_it_says_it_holds_nothing_earlier() {
        // Reader 0 is reading (kept off its core, say) and hands nothing
        // over: reader 1's datagrams wait for it however long that takes,
        // and go on once it finds its socket empty on a read that began
        // after they arrived. Going on without it would publish its frames
        // out of order.
        let (two, mut r) = TwoReaders::new();
        let stage = two.stage();
        let (reading, assembling) = handoff::pool(2, 2, 8);
        std::thread::scope(|scope| {
            let r = &mut r;
            scope.spawn(move || stage.run(&assembling, r, None, Duration::ZERO, Duration::from_millis(2)));
            reading[0].unpark();
            let (datagrams, _) = frame_datagrams(3000, 1048, 0);
            two.send(&datagrams, |_| 1);
            two.hand_over(&reading[1], 1, datagrams.len());
            std::thread::sleep(Duration::from_millis(300));
            assert_eq!(two.accepted(), 0, "went on without the reader that is reading");
            reading[0].mark_drained(clock::realtime_ns());
            two.wait_for_accepted(datagrams.len() as u64);
            drop(reading);
        });
        assert_eq!(two.counters.snapshot().frames_complete, 1);
    }

    #[test]
    fn the_assembly_thread_runs_its_start_first_and_a_failed_start_stops_the_receiver() {
        let ran_on = Arc::new(std::sync::Mutex::new(None));
        let record = Arc::clone(&ran_on);
        let split = Split::start(UdpConfig::default(), Default::default(), 8, 8192, move |r| {
            assert!(r.on_assembly_thread_start(Box::new(move || {
                *record.lock().unwrap() = std::thread::current().name().map(str::to_owned);
                Ok(())
            })));
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while ran_on.lock().unwrap().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        split.stop().1.unwrap();
        assert_eq!(ran_on.lock().unwrap().as_deref(), Some(ASSEMBLY_THREAD_NAME));

        let split = Split::start(UdpConfig::default(), Default::default(), 8, 8192, |r| {
            r.on_assembly_thread_start(Box::new(|| Err("core 9999 is not allowed".into())));
        });
        let result = split.handle.join().unwrap();
        let message = result.unwrap_err().to_string();
        assert!(message.contains("core 9999 is not allowed") && message.contains("assembly"), "{message}");

        // Without the key there is no thread to start.
        let (r, _rd) = reassembler();
        let mut receiver =
            UdpReceiver::bind(&UdpConfig { bind: "127.0.0.1:0".into(), ..Default::default() }, r).unwrap();
        assert!(!receiver.has_assembly_thread());
        assert!(!receiver.on_assembly_thread_start(Box::new(|| Ok(()))));
        assert_eq!(receiver.on_reading_thread_start(Arc::new(|_| Ok(()))), 0);
        assert_eq!(receiver.reading_threads(), 1);
    }

    #[test]
    fn each_further_reading_thread_runs_its_start_first_and_a_failed_start_stops_the_receiver() {
        let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = Arc::clone(&ran);
        let cfg = UdpConfig { reading_threads: 3, ..UdpConfig::default() };
        let split = Split::start(cfg.clone(), Default::default(), 8, 8192, move |r| {
            let start: OnReadingThreadStart = Arc::new(move |index| {
                let name = std::thread::current().name().map(str::to_owned);
                record.lock().unwrap().push((index, name));
                Ok(())
            });
            assert_eq!(r.on_reading_thread_start(start), 2);
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while ran.lock().unwrap().len() < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        split.stop().1.unwrap();
        let mut ran = ran.lock().unwrap().clone();
        ran.sort();
        let name = |i| Some(format!("{READING_THREAD_NAME}{i}"));
        assert_eq!(ran, vec![(1, name(1)), (2, name(2))]);

        let split = Split::start(cfg, Default::default(), 8, 8192, |r| {
            r.on_reading_thread_start(Arc::new(|index| {
                if index == 2 { Err("core 9999 is not allowed".into()) } else { Ok(()) }
            }));
        });
        let result = split.handle.join().unwrap();
        let message = result.unwrap_err().to_string();
        assert!(
            message.contains("core 9999 is not allowed") && message.contains("reading thread 2"),
            "{message}"
        );
    }

    #[test]
    fn only_long_turns_that_did_not_wait_are_busy_poll_gaps() {
        let mut turns = BusyPollTurns::new(1_000_000);
        assert!(!turns.gap_after(1_000_000 + BUSY_POLL_GAP_NS, false), "exactly the limit is no gap");
        assert!(turns.gap_after(1_000_000 + 2 * BUSY_POLL_GAP_NS + 1, false));
        assert!(!turns.gap_after(1_000_000 + 10 * BUSY_POLL_GAP_NS, true), "a wait in epoll is no gap");
        assert!(!turns.gap_after(1_000_000 + 10 * BUSY_POLL_GAP_NS + 3_000, false));
        // A clock that stepped back is no gap either.
        assert!(!turns.gap_after(5, false));
    }

    #[test]
    fn datagram_split_edges() {
        let buf = [1u8, 2, 3, 4, 5];
        let split = |seg| datagrams(&buf, seg).collect::<Vec<_>>();
        assert_eq!(split(Some(2)), [&[1, 2][..], &[3, 4], &[5]]);
        assert_eq!(split(None), [&buf[..]]);
        assert_eq!(split(Some(0)), [&buf[..]]);
        assert_eq!(split(Some(9)), [&buf[..]]);
        assert_eq!(datagrams(&[], Some(4)).collect::<Vec<_>>(), [&[0u8; 0][..]]);
    }

    #[test]
    fn truncated_and_disallowed_buffers_are_counted() {
        let (mut r, _rd) = reassembler();
        let allow = AllowList::new(&["192.168.0.0/16".into()]).unwrap();
        let (buf, _) = coalesced(3000, 1048);
        let counters = Arc::clone(r.counters());
        deliver(&mut r, &counters, &allow, None, LOCAL, &buf, info(Some(1048), "10.0.0.1"));
        let truncated = BufferInfo { truncated: true, ..info(None, "192.168.1.1") };
        deliver(&mut r, &counters, &allow, None, LOCAL, &buf[..500], truncated);
        let s = r.counters().snapshot();
        assert_eq!((s.source_not_allowed, s.truncated, s.datagrams, s.gro_segments), (3, 1, 4, 3));
        assert_eq!(s.datagrams_accounted(), s.datagrams);
        assert_eq!(s.bytes, buf.len() as u64 + 500);
    }
}
