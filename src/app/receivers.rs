//! Start-up of the receiving side: the thread that takes frames off the
//! network into the frame ring, by transport and format (native UDP, RTP
//! video, the emulated HSB bridge, or RDMA), and the one UDP receiver of a
//! port shared by several loops, feeding each loop's ring its streams.

use super::AppError;
use super::report::{RecordingReport, on_off};
use crate::config::Config;
use crate::ingest::udp::ThreadStartError;
use crate::ingest::{FrameAssembler, IngestCounters, Reassembler, Route, StreamRouter, UdpReceiver};
use crate::rdma::{IngestPlan, Transport};
use crate::ring::FrameRing;
use crate::rtp::{RtpAssembler, RtpCounters};
use crate::service::thread_stall::ThreadStall;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

/// Why a receiver's thread stopped, whichever transport ran it.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReceiverError {
    #[error(transparent)]
    Udp(#[from] crate::ingest::IngestError),
    #[cfg(feature = "rdma")]
    #[error(transparent)]
    Rdma(#[from] crate::rdma::RdmaError),
}

/// The receiving side, whichever transport runs it.
pub(super) struct IngestParts {
    pub(super) local_addr: SocketAddr,
    pub(super) gro_active: bool,
    pub(super) rtp_counters: Option<Arc<RtpCounters>>,
    pub(super) recording: Option<std::sync::mpsc::Receiver<RecordingReport>>,
    pub(super) thread: JoinHandle<Result<(), ReceiverError>>,
    /// The receiver's poll-loop count, for the watchdog (UDP receivers only).
    pub(super) poll_loops: Option<Arc<AtomicU64>>,
    /// A handle on the UDP receiver's socket for the actuation sender, when
    /// [`ActuationWiring::want_socket`] asked for one.
    pub(super) send_socket: Option<std::net::UdpSocket>,
}

/// What the actuation outputs need of the UDP receiver: the reply book it
/// notes admitted sources in, and a handle on its socket to send from.
#[derive(Default)]
pub(super) struct ActuationWiring {
    pub(super) book: Option<Arc<crate::ingest::ReplyBook>>,
    pub(super) want_socket: bool,
}

impl IngestParts {
    /// A receiver with no GRO, RTP counters, recording or poll-loop count
    /// (the HSB and RDMA receivers).
    fn plain(local_addr: SocketAddr, thread: JoinHandle<Result<(), ReceiverError>>) -> Self {
        Self {
            local_addr,
            gro_active: false,
            rtp_counters: None,
            recording: None,
            thread,
            poll_loops: None,
            send_socket: None,
        }
    }
}

/// The assembler as the UDP receiver drives it, counting the receiver's
/// poll loops (one tick per loop, idle or not: the poll is timed) for
/// the watchdog, and honouring the test hook that hangs the receiver.
struct PollCounted<A> {
    inner: A,
    loops: Arc<AtomicU64>,
    stall: Option<ThreadStall>,
    stop: Arc<AtomicBool>,
}

impl<A> PollCounted<A> {
    fn new(inner: A, loops: &Arc<AtomicU64>, stop: &Arc<AtomicBool>) -> Self {
        let stall = ThreadStall::requested("receiver");
        Self { inner, loops: Arc::clone(loops), stall, stop: Arc::clone(stop) }
    }
}

impl<A: FrameAssembler> FrameAssembler for PollCounted<A> {
    fn on_datagram(&mut self, datagram: &[u8], rx_ns: u64) {
        self.inner.on_datagram(datagram, rx_ns);
    }
    fn on_datagram_at(&mut self, datagram: &[u8], rx_ns: u64, now_ns: u64) {
        self.inner.on_datagram_at(datagram, rx_ns, now_ns);
    }
    fn on_datagrams_at(&mut self, datagrams: &mut dyn Iterator<Item = &[u8]>, rx_ns: u64, now_ns: u64) {
        self.inner.on_datagrams_at(datagrams, rx_ns, now_ns);
    }
    fn plan_landing(
        &mut self,
        shape: crate::ingest::landing::LandingShape,
        min_payload: usize,
    ) -> Option<&mut crate::ingest::landing::LandingPlan> {
        self.inner.plan_landing(shape, min_payload)
    }
    fn landing(&mut self) -> Option<&mut crate::ingest::landing::LandingPlan> {
        self.inner.landing()
    }
    fn on_landed_at(&mut self, k: usize, head: &[u8], rx_ns: u64, now_ns: u64) {
        self.inner.on_landed_at(k, head, rx_ns, now_ns)
    }
    fn on_landed_run_at(
        &mut self,
        landed: &mut dyn Iterator<Item = (usize, &[u8])>,
        rx_ns: u64,
        now_ns: u64,
    ) {
        self.inner.on_landed_run_at(landed, rx_ns, now_ns)
    }
    fn end_landing(&mut self) {
        self.inner.end_landing()
    }
    fn on_tick_behind(&mut self, stale_at: u64, now_ns: u64) {
        self.loops.fetch_add(1, Ordering::Relaxed);
        if let Some(stall) = self.stall.as_mut() {
            stall.hang_if_due(&self.stop);
        }
        self.inner.on_tick_behind(stale_at, now_ns);
    }
    fn flush(&mut self, now_ns: u64) {
        self.inner.flush(now_ns);
    }
}

/// With `ingest.assembly_thread`, has the assembly thread place itself on
/// `service.assembly_cpu` (under the receiver's real-time priority, if
/// any; see [`StartedThreadPlacement`]). Returns where the placement's
/// outcome will be sent, when there is a thread to place.
fn place_assembly_thread<A: FrameAssembler>(cfg: &Config, receiver: &mut UdpReceiver<A>) -> Option<Placed> {
    let (cpu, priority) = (cfg.service.assembly_cpu, cfg.service.realtime_priority);
    if !receiver.has_assembly_thread() {
        if cpu.is_some() {
            tracing::warn!(
                "service.assembly_cpu is set but ingest.assembly_thread = false: no thread to place"
            );
        }
        return None;
    }
    let (placement, placed) = StartedThreadPlacement::new();
    receiver.on_assembly_thread_start(Box::new(move || {
        placement.place("assembly", "service.assembly_cpu", cpu, priority)
    }));
    Some(placed)
}

/// With `ingest.reading_threads` above one, has each reading thread after
/// the first place itself on its entry of `service.reader_cpus` (under the
/// receiver's real-time priority, if any; see [`StartedThreadPlacement`]);
/// a thread without an entry may use the process's CPUs. Returns where
/// each placement's outcome will be sent, and how many will come.
fn place_reading_threads<A: FrameAssembler>(
    cfg: &Config,
    receiver: &mut UdpReceiver<A>,
) -> Option<(Placed, usize)> {
    let (cpus, priority) = (cfg.service.reader_cpus.clone(), cfg.service.realtime_priority);
    let further = receiver.reading_threads() - 1;
    if cpus.len() > further {
        tracing::warn!(
            "service.reader_cpus names {} cores but there are {further} reading threads after the first \
             (ingest.reading_threads = {}): the rest are not used",
            cpus.len(),
            further + 1
        );
    }
    if further == 0 {
        return None;
    }
    let (placement, placed) = StartedThreadPlacement::new();
    let placing = receiver.on_reading_thread_start(Arc::new(move |index| {
        let cpu = cpus.get(index - 1).copied();
        placement.place(&format!("reader {index}"), "service.reader_cpus", cpu, priority)
    }));
    Some((placed, placing))
}

/// Where the outcome of placing a thread that the receiver starts goes.
type Placed = std::sync::mpsc::Receiver<Result<(), Arc<crate::service::ServiceError>>>;

/// Placing a thread that the pinned receiving thread starts (the assembly
/// thread, further reading threads): it first takes back the CPUs the
/// process could use when the receiver was set up (it would otherwise
/// share the receiver's one core, or be refused another), then places
/// itself as configured, and the outcome goes to start-up.
struct StartedThreadPlacement {
    inherited: Option<nix::sched::CpuSet>,
    outcomes: std::sync::mpsc::Sender<Result<(), Arc<crate::service::ServiceError>>>,
}

impl StartedThreadPlacement {
    /// Called where the receiver is set up, before it pins itself.
    fn new() -> (Self, Placed) {
        let inherited = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok();
        let (outcomes, placed) = std::sync::mpsc::channel();
        (Self { inherited, outcomes }, placed)
    }

    /// Places the calling thread (`role` in the log) on `cpu` under
    /// `priority`; `key` is the setting to name if its CPUs cannot be
    /// taken back.
    fn place(
        &self,
        role: &str,
        key: &str,
        cpu: Option<usize>,
        priority: Option<u8>,
    ) -> Result<(), ThreadStartError> {
        if let Some(set) = &self.inherited
            && let Err(e) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), set)
        {
            tracing::warn!("the {role} thread keeps the receiver's CPUs ({e}); set {key}");
        }
        // Start-up and the receiver (which stops on it) both get the error.
        let placed = crate::service::threads::place_current_thread(role, cpu, priority).map_err(Arc::new);
        let _ = self.outcomes.send(placed.clone());
        placed.map_err(|e| Box::new(e) as ThreadStartError)
    }
}

/// Runs `receiver` on a new thread placed on the configured core (under the
/// configured real-time priority), returning once it is placed.
fn spawn_udp<A: FrameAssembler + 'static>(
    cfg: &Config,
    mut receiver: UdpReceiver<A>,
    rx_stop: &Arc<AtomicBool>,
) -> Result<JoinHandle<Result<(), ReceiverError>>, AppError> {
    let stop = Arc::clone(rx_stop);
    let (rx_cpu, rt_prio) = (cfg.service.receiver_cpu, cfg.service.realtime_priority);
    if receiver.has_assembly_thread() {
        let readers = receiver.reading_threads();
        tracing::info!(
            reading_threads = readers,
            "datagrams read on {readers} thread{} and frames assembled on another (ingest.assembly_thread{})",
            if readers == 1 { "" } else { "s" },
            if readers == 1 { "" } else { ", ingest.reading_threads" }
        );
    }
    let assembly_placed = place_assembly_thread(cfg, &mut receiver);
    let readers_placed = place_reading_threads(cfg, &mut receiver);
    let (placed_tx, placed_rx) = std::sync::mpsc::channel();
    let rx_thread = std::thread::Builder::new()
        .name("frameloop-rx".into())
        .spawn(move || {
            let placed = crate::service::threads::place_current_thread("receiver", rx_cpu, rt_prio);
            let ok = placed.is_ok();
            let _ = placed_tx.send(placed);
            if !ok {
                return Ok(());
            }
            crate::service::thread_failure::panic_if_requested("receiver");
            receiver.run(&stop).map_err(ReceiverError::from)
        })
        .map_err(|source| AppError::Spawn { thread: "receiver", source })?;
    if let Ok(Err(e)) = placed_rx.recv() {
        rx_stop.store(true, Ordering::Release);
        return Err(e.into());
    }
    // The receiving thread starts the assembly thread first thing; a core
    // it may not have stops start-up as the receiver's would. (Nothing
    // comes when the receiver stopped before starting it: its error is
    // reported when its thread is joined.)
    if let Some(Ok(Err(e))) = assembly_placed.map(|placed| placed.recv()) {
        rx_stop.store(true, Ordering::Release);
        return Err(AppError::ThreadPlacement(e));
    }
    // So do the further reading threads, each on its core.
    if let Some((placed, count)) = readers_placed {
        for _ in 0..count {
            match placed.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    rx_stop.store(true, Ordering::Release);
                    return Err(AppError::ThreadPlacement(e));
                }
                Err(_) => break,
            }
        }
    }
    Ok(rx_thread)
}

/// Binds the one UDP receiver of a port that several loops share (`cfg` is
/// the first loop's: its `[ingest]` socket keys, which config validation
/// made the same for all) and starts its thread: `routes` hold each loop's
/// reassembler on its own ring, and what no route takes counts in
/// `counters` (the first loop's).
pub(super) fn start_shared_udp(
    cfg: &Config,
    routes: Vec<Route<Reassembler>>,
    counters: &Arc<IngestCounters>,
    rx_stop: &Arc<AtomicBool>,
) -> Result<IngestParts, AppError> {
    let poll_loops = Arc::new(AtomicU64::new(0));
    let router = StreamRouter::new(routes, Arc::clone(counters));
    let receiver = UdpReceiver::bind_assembler(
        &cfg.ingest,
        PollCounted::new(router, &poll_loops, rx_stop),
        Arc::clone(counters),
    )
    .map_err(AppError::Receiver)?;
    let (local_addr, gro_active) = (receiver.local_addr(), receiver.gro_active());
    let thread = spawn_udp(cfg, receiver, rx_stop)?;
    tracing::info!(%local_addr, gro = gro_active, "listening on {local_addr} for several loops (UDP GRO {})", on_off(gro_active));
    Ok(IngestParts {
        local_addr,
        gro_active,
        rtp_counters: None,
        recording: None,
        thread,
        poll_loops: Some(poll_loops),
        send_socket: None,
    })
}

/// Binds the UDP receiver (native or RTP assembly, optional recording) and
/// starts its thread on the configured core.
fn start_udp(
    cfg: &Config,
    frame_ring: &Arc<FrameRing>,
    counters: &Arc<IngestCounters>,
    rx_stop: &Arc<AtomicBool>,
    record: Option<&std::path::Path>,
    actuation: &ActuationWiring,
) -> Result<IngestParts, AppError> {
    if cfg.ingest.format == crate::ingest::hsb::IngestFormat::Hsb {
        if record.is_some() {
            return Err(AppError::Unsupported(
                "--record taps the native receiver; with ingest.format = \"hsb\" record with tcpdump instead"
                    .into(),
            ));
        }
        return start_hsb(cfg, frame_ring, rx_stop);
    }
    let writer = frame_ring.writer().ok_or(AppError::WriterTaken)?;
    let poll_loops = Arc::new(AtomicU64::new(0));
    let (assembler, rtp_counters): (Box<dyn FrameAssembler>, _) = match &cfg.rtp {
        Some(rtp) => {
            let settings =
                rtp.resolve().map_err(|p| AppError::Config(crate::config::ConfigError::Invalid(p)))?;
            let a = RtpAssembler::new(settings, writer)?;
            let c = Arc::clone(a.counters());
            (Box::new(PollCounted::new(a, &poll_loops, rx_stop)), Some(c))
        }
        None => {
            let r = Reassembler::new(cfg.ingest.reassembly.clone(), writer, Arc::clone(counters));
            (Box::new(PollCounted::new(r, &poll_loops, rx_stop)), None)
        }
    };
    let mut receiver = UdpReceiver::bind_assembler(&cfg.ingest, assembler, Arc::clone(counters))
        .map_err(AppError::Receiver)?;
    let recording = match record {
        Some(path) => {
            let (tap, done) = super::captures::recording_tap(path)?;
            receiver.set_tap(Box::new(tap));
            tracing::info!("recording received datagrams to {}", path.display());
            Some(done)
        }
        None => None,
    };
    if let Some(book) = &actuation.book {
        receiver.note_sources_in(Arc::clone(book));
    }
    let send_socket = if actuation.want_socket {
        Some(receiver.send_socket().map_err(crate::actuate::SenderError::Socket)?)
    } else {
        None
    };
    let local_addr = receiver.local_addr();
    let gro_active = receiver.gro_active();
    let rx_thread = spawn_udp(cfg, receiver, rx_stop)?;
    tracing::info!(%local_addr, gro = gro_active, "listening on {local_addr} (UDP GRO {})", on_off(gro_active));
    Ok(IngestParts {
        local_addr,
        gro_active,
        rtp_counters,
        recording,
        thread: rx_thread,
        poll_loops: Some(poll_loops),
        send_socket,
    })
}

/// `ingest.format = "hsb"`: the emulated HSB bridge's receiver writes the
/// ring like its DMA engine (no head sequence: the `[handler]` finds frames).
fn start_hsb(
    cfg: &Config,
    frame_ring: &Arc<FrameRing>,
    rx_stop: &Arc<AtomicBool>,
) -> Result<IngestParts, AppError> {
    use crate::ingest::hsb::{HsbDma, HsbReceiver};
    if cfg.ingest.assembly_thread {
        tracing::warn!(
            "ingest.assembly_thread applies to the native and RTP receivers; the emulated HSB receiver \
             ignores it"
        );
    }
    if cfg.handler.is_none() || cfg.rtp.is_some() {
        return Err(AppError::Unsupported(
            "ingest.format = \"hsb\" writes frames without publishing the ring's head, so only a user handler \
             finds them: add [handler] (handlers/hsb_ready.cu, docs/operators.md) and remove [rtp]"
                .into(),
        ));
    }
    let listen: SocketAddr = cfg
        .ingest
        .bind
        .parse()
        .map_err(|source| AppError::BindAddress { value: cfg.ingest.bind.clone(), source })?;
    let dma = HsbDma::new(Arc::clone(frame_ring))?;
    let receiver = HsbReceiver::bind(listen, dma)?;
    let local_addr = receiver.local_addr().map_err(|source| AppError::Socket { addr: listen, source })?;
    let stop = Arc::clone(rx_stop);
    let thread = std::thread::Builder::new()
        .name("frameloop-hsb".into())
        .spawn(move || {
            let counters = receiver.run(&stop);
            tracing::info!("HSB receiver: {counters:?}");
            Ok(())
        })
        .map_err(|source| AppError::Spawn { thread: "receiver", source })?;
    tracing::info!(%local_addr, "listening on {local_addr} for HSB datagrams");
    Ok(IngestParts::plain(local_addr, thread))
}

/// Starts the receiver that `plan` chose, writing into `frame_ring`; with
/// `record`, every datagram the UDP receiver takes is also written there.
pub(super) fn start_ingest(
    plan: IngestPlan,
    cfg: &Config,
    frame_ring: &Arc<FrameRing>,
    counters: &Arc<IngestCounters>,
    rx_stop: &Arc<AtomicBool>,
    record: Option<&Path>,
    actuation: &ActuationWiring,
) -> Result<IngestParts, AppError> {
    let transport = cfg.ingest.transport;
    Ok(match plan {
        IngestPlan::Udp { reason } => {
            if transport != Transport::Udp {
                tracing::info!("{reason}; using UDP");
            }
            start_udp(cfg, frame_ring, counters, rx_stop, record, actuation)?
        }
        #[cfg(feature = "rdma")]
        IngestPlan::Rdma(mut endpoint) => {
            tracing::info!("{}", endpoint.summary());
            if cfg.ingest.assembly_thread {
                tracing::warn!(
                    "ingest.assembly_thread applies to the UDP receiver; the NIC places RDMA frames itself, \
                     so it is ignored (set ingest.transport = \"udp\" to use it)"
                );
            }
            let local_addr = endpoint.listen_addr();
            let stop = Arc::clone(rx_stop);
            let thread = std::thread::Builder::new()
                .name("frameloop-rdma".into())
                .spawn(move || endpoint.run(&stop).map_err(ReceiverError::from))
                .map_err(|source| AppError::Spawn { thread: "RDMA", source })?;
            IngestParts::plain(local_addr, thread)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records how the datagrams reached it.
    #[derive(Default)]
    struct Calls {
        one_by_one: usize,
        buffers: Vec<usize>,
        landed_one_by_one: usize,
        landed_runs: Vec<Vec<usize>>,
    }

    impl FrameAssembler for Calls {
        fn on_datagram(&mut self, _: &[u8], _: u64) {
            self.one_by_one += 1;
        }
        fn on_datagrams_at(&mut self, datagrams: &mut dyn Iterator<Item = &[u8]>, _: u64, _: u64) {
            self.buffers.push(datagrams.count());
        }
        fn on_landed_at(&mut self, _: usize, _: &[u8], _: u64, _: u64) {
            self.landed_one_by_one += 1;
        }
        fn on_landed_run_at(&mut self, landed: &mut dyn Iterator<Item = (usize, &[u8])>, _: u64, _: u64) {
            self.landed_runs.push(landed.map(|(k, _)| k).collect());
        }
        fn on_tick_behind(&mut self, _: u64, _: u64) {}
        fn flush(&mut self, _: u64) {}
    }

    #[test]
    fn the_watchdog_wrapper_hands_a_receive_buffer_over_whole() {
        let (loops, stop) = (Arc::default(), Arc::default());
        let mut wrapped = PollCounted::new(Calls::default(), &loops, &stop);
        let buffer: [&[u8]; 3] = [b"a", b"b", b"c"];
        wrapped.on_datagrams_at(&mut buffer.into_iter(), 1, 2);
        wrapped.on_datagram_at(b"d", 3, 4);
        assert_eq!(wrapped.inner.buffers, [3], "one call for the buffer's three datagrams");
        assert_eq!(wrapped.inner.one_by_one, 1, "a single datagram still goes alone");
    }

    #[test]
    fn the_watchdog_wrapper_hands_a_landed_run_over_whole() {
        let (loops, stop) = (Arc::default(), Arc::default());
        let mut wrapped = PollCounted::new(Calls::default(), &loops, &stop);
        let heads: [(usize, &[u8]); 3] = [(4, b"a"), (5, b"b"), (6, b"c")];
        wrapped.on_landed_run_at(&mut heads.into_iter(), 1, 2);
        wrapped.on_landed_at(7, b"d", 3, 4);
        assert_eq!(
            wrapped.inner.landed_runs,
            [vec![4, 5, 6]],
            "one call for the run's three targets, in order"
        );
        assert_eq!(wrapped.inner.landed_one_by_one, 1, "a single landed datagram still goes alone");
    }
}
