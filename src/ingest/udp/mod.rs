//! The UDP receiver: one socket (set up by `ingest/socket.rs`: socket2
//! options, mio readiness), `recvmmsg` batches (`ingest/batch.rs`), a source
//! allowlist (`ingest/allow.rs`), and a [`FrameAssembler`] (the native
//! [`Reassembler`], or any other format's) that puts the frames into the
//! ring. Its parts: `threads` (the threads of `ingest.assembly_thread`),
//! `drain` (the copy drain), `one_copy` (one-copy delivery); the loop it
//! runs is `ingest/receive_loop.rs`, its errors `ingest/error.rs`.
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

mod drain;
mod one_copy;
mod threads;

pub use super::error::{IngestError, ThreadStartError};
pub use threads::{ASSEMBLY_THREAD_NAME, OnAssemblyStart, OnReadingThreadStart, READING_THREAD_NAME};

use super::allow::AllowList;
use super::assembler::FrameAssembler;
use super::batch::RecvBatch;
use super::config::UdpConfig;
use super::counters::IngestCounters;
use super::error::{bind_error, setup_error};
use super::landing::{LandingShape, MessageLayout};
use super::port_owner;
use super::reassembly::Reassembler;
use super::receive_loop::{Drained, SocketReader, receive_loop};
use super::socket::{ReaderSocket, Readiness, open_socket, watch};
use super::steering;
use super::tap::DatagramTap;
use crate::clock;
use one_copy::MIN_GROUPS;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use threads::AssemblyThread;

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
        // A group of this process's own reading threads needs SO_REUSEPORT,
        // which would let another process join it: guarded (port_owner).
        let guard_group = readers > 1 && !cfg.reuse_port;
        if guard_group && addr.port() != 0 {
            port_owner::probe_free(addr).map_err(|source| bind_error(addr, source))?;
        }
        let opened = open_socket(cfg, addr, cfg.reuse_port || readers > 1)?;
        let mut inodes = vec![port_owner::inode(opened.socket.as_fd()).map_err(setup_error("fstat"))?];
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
            let socket = open_socket(cfg, local_addr, true)?.socket;
            inodes.push(port_owner::inode(socket.as_fd()).map_err(setup_error("fstat"))?);
            more_readers.push(watch(socket, timeout)?);
        }
        if guard_group {
            match port_owner::strangers(local_addr, &inodes) {
                Ok(Some(others)) if !others.is_empty() => {
                    return Err(IngestError::PortTaken {
                        addr: local_addr,
                        source: io::ErrorKind::AddrInUse.into(),
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!("cannot list the UDP sockets to check ingest.bind is ours alone: {e}")
                }
            }
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

    /// Notes each admitted source in `book`, for actuation outputs that
    /// reply to the sensor; call before [`UdpReceiver::run`].
    pub fn note_sources_in(&mut self, book: Arc<crate::ingest::ReplyBook>) {
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

    /// Calls `tap` for every datagram received from now on (replacing any
    /// earlier tap, which is returned).
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

#[cfg(test)]
mod tests;
