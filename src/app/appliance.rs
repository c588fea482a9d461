//! The running appliance: frame ring and result ring, the UDP receiver
//! thread, the resident loop (host or CUDA) and the result thread, started
//! in that dependency order and stopped in the reverse one.
//!
//! The receiver assembles native frameloop datagrams, or RFC 4175 RTP video
//! when the config has an `[rtp]` section; it can record every datagram it
//! receives as pcapng ([`Appliance::start_recording`]).

use super::AppError;
use super::backend_factory::{BackendPick, OpenedBackend, open_backend, pick_backend_on};
use super::receivers::{ActuationWiring, start_ingest};
use super::report::{RecordingReport, Report, RingMemoryReport};
use crate::backend::{Backend, ClockEstimate, LoopStats, ResidentLoop};
use crate::config::Config;
use crate::fragment::GpuResidentOperator;
use crate::gpu::chain_builder::{OperatorPosition, UserOperators};
use crate::ingest::{IngestCounters, IngestSnapshot};
use crate::metrics::{
    FrameLog, FrameWait, HistogramLogReport, LogCounters, LoopHook, ResultCallback, ResultProgress,
    ResultSink, ResultSpin, ResultThread, Summary, create_interval_log,
};
use crate::rdma::Transport;
use crate::reload::{ReloadOutcome, Reloader};
use crate::ring::layout::{result_ring_bytes, ring_bytes};
use crate::ring::{FrameRing, ResultReader, ResultRing, RingWriter};
use crate::rtp::RtpCounters;
use crate::service::ProgressSource;
use crate::service::bounded::{call_by, join_by};
use crate::service::thread_stall::ThreadStall;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the result thread sleeps when no frame is being processed and
/// the GPU writes the results (nothing wakes it: it polls).
const RESULT_POLL: Duration = Duration::from_micros(50);

/// The same with the host backend, whose loop wakes the result thread on
/// every result: the wait only bounds how long the thread goes without
/// writing an interval of the histogram log or showing progress.
const RESULT_HOST_WAIT: Duration = Duration::from_millis(5);
/// How long the result thread keeps spinning after the last result (or for
/// the result of a published frame) before it falls back to sleeping.
const RESULT_SPIN_BUDGET: Duration = Duration::from_millis(2);

/// The result thread spins only where a core can be spared for it: with
/// fewer than four, the receiver and the resident loop need them more, and a
/// spinning result thread would push their tails up by whole time slices.
fn result_spin_budget() -> Duration {
    match std::thread::available_parallelism() {
        Ok(n) if n.get() >= 4 => RESULT_SPIN_BUDGET,
        _ => Duration::ZERO,
    }
}

/// Options that come from the command line rather than the config file.
#[derive(Default)]
pub struct StartOptions {
    /// Write HdrHistogram interval logs here (overrides `metrics.histogram_log`).
    pub histogram_log: Option<PathBuf>,
    /// Called with every result the host sees (tests, checks).
    pub on_result: Option<ResultCallback>,
    /// Build everything but leave the resident loop to [`Appliance::launch`]:
    /// several loops sharing a GPU are all built before any runs, since
    /// building one (loading its modules, freeing set-up memory) may wait
    /// for every graph running on that GPU's context.
    pub defer_launch: bool,
    /// Start no receiver: the frame ring's writer waits for
    /// [`Appliance::take_ring_writer`], for the one receiver of a UDP port
    /// that several loops share (it routes each loop its streams).
    pub shared_port: bool,
    /// Host backend: a Rust function run after the chain on every frame
    /// that writes the frame's user result words and may ask for an
    /// actuation (the host twin of a user kernel; see [`crate::host::UserStage`]).
    pub user_stage: Option<crate::host::UserStage>,
}

/// Starts an appliance with Rust GPU operators inserted into the configured
/// chain (see [`Appliance::builder`]); they run only on the CUDA backend.
pub struct ApplianceBuilder<'a> {
    cfg: &'a Config,
    options: StartOptions,
    operators: UserOperators,
}

impl ApplianceBuilder<'_> {
    /// Options that come from the command line rather than the config file.
    pub fn options(mut self, options: StartOptions) -> Self {
        self.options = options;
        self
    }

    /// Inserts `operator` into the chain at `position`: its input port `in`
    /// takes the samples of the entry before it, its output port `out` feeds
    /// the entry after it (size them with [`crate::gpu::samples_after`]).
    /// Operators at one position run in the order they were added.
    pub fn operator(
        mut self,
        position: OperatorPosition,
        operator: impl GpuResidentOperator + 'static,
    ) -> Self {
        self.operators.push(position, Box::new(operator));
        self
    }

    /// Checks where the operators go and that their ports connect, then
    /// starts the appliance as [`Appliance::start`] does.
    pub fn start(self) -> Result<Appliance, AppError> {
        Appliance::start_with(self.cfg, self.options, None, self.operators, 0)
    }
}

/// A running appliance.
pub struct Appliance {
    pick: BackendPick,
    local_addr: SocketAddr,
    gro_active: bool,
    counters: Arc<IngestCounters>,
    /// The RTP assembler's counters, when the receiver assembles RTP video.
    rtp_counters: Option<Arc<RtpCounters>>,
    /// Where the recording tap reports once the receiver has dropped it.
    recording: Option<std::sync::mpsc::Receiver<RecordingReport>>,
    frame_ring: Arc<FrameRing>,
    /// The frame ring's pages as start-up found them, for the metrics.
    frame_ring_pages: Option<crate::service::FrameRingPages>,
    rx_stop: Arc<AtomicBool>,
    /// Invariant: `Some` until `stop` joins it.
    rx_thread: Option<JoinHandle<Result<(), super::receivers::ReceiverError>>>,
    /// The receiver's poll-loop count (UDP receivers), for the watchdog.
    rx_poll_loops: Option<Arc<AtomicU64>>,
    /// Fed by the receiver of a port shared with other loops
    /// ([`StartOptions::shared_port`]), which the owner of the loops watches
    /// and stops; `rx_thread` is then `None`.
    shared_port: bool,
    /// The frame ring's writer until the shared port's receiver takes it.
    ring_writer: Option<RingWriter>,
    resident: Box<dyn ResidentLoop>,
    results: Option<ResultThread>,
    /// The result ring and how far the result thread has read it, for the watchdog.
    result_ring: Arc<ResultRing>,
    result_progress: Arc<ResultProgress>,
    /// `service.shutdown_timeout_ms`: the bound on [`Appliance::stop`].
    shutdown_timeout: Duration,
    /// The output ring's attach server (`[output]`); declared after
    /// `resident` so that the loop is gone before the ring is freed.
    outputs: Option<crate::output::OutputServer>,
    /// The actuation sender (`[[actuate]]`): sends what the loop forms into
    /// the transmit ring, which it keeps alive.
    actuation: Option<crate::actuate::ActuationSender>,
    /// The NATS sink's counters (`[sink.nats]`).
    nats_sink: Option<crate::sink::nats::SinkSender>,
    /// The frame log's writer (`metrics.frame_log`), finished at stop.
    frame_log: Option<FrameLog>,
    /// The histogram log (`metrics.histogram_log`) and its counts.
    histogram_log: Option<(PathBuf, Arc<LogCounters>)>,
    started: Instant,
    /// The running config and the way to change the chain live.
    reloader: Reloader,
    /// This appliance's GPU, claimed in this process while its loop runs
    /// (CUDA backend, launched at start).
    gpu_claim: Option<super::GpuClaim>,
    /// The receiver's UDP port, claimed in this process (not for a shared port's loop).
    port_claim: Option<super::PortClaim>,
}

/// What [`Appliance::reload_explained`] did, and why where it changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadVerdict {
    /// What the reload did: applied (parameters or shape), unchanged,
    /// rejected as invalid, or refused because it needs a restart.
    pub outcome: ReloadOutcome,
    /// Each problem (`key: message`) of a rejected config, or each key that
    /// needs a restart; empty when the change was applied or nothing changed.
    pub reasons: Vec<String>,
}

impl Appliance {
    /// Allocates the rings, launches the resident loop, starts the result
    /// thread and binds the receiver. When this returns, frames are accepted.
    pub fn start(cfg: &Config, opts: StartOptions) -> Result<Self, AppError> {
        Self::start_recording(cfg, opts, None)
    }

    /// As [`Appliance::start`], and with `record` every datagram the receiver
    /// takes off the socket is written to that pcapng file (finished when the
    /// appliance stops; [`Report::recording`] says what was written).
    pub fn start_recording(
        cfg: &Config,
        opts: StartOptions,
        record: Option<&Path>,
    ) -> Result<Self, AppError> {
        Self::start_on_gpu(cfg, opts, record, 0)
    }

    /// As [`Appliance::start_recording`], the CUDA backend on GPU `gpu`
    /// (a CUDA ordinal; the host backend ignores it).
    pub fn start_on_gpu(
        cfg: &Config,
        opts: StartOptions,
        record: Option<&Path>,
        gpu: usize,
    ) -> Result<Self, AppError> {
        Self::start_with(cfg, opts, record, UserOperators::default(), gpu)
    }

    /// An appliance with Rust GPU operators in its chain, e.g.
    /// `Appliance::builder(&cfg).operator(OperatorPosition::After("fir".into()), Gain::new(2.0)).start()`.
    pub fn builder(cfg: &Config) -> ApplianceBuilder<'_> {
        ApplianceBuilder { cfg, options: StartOptions::default(), operators: UserOperators::default() }
    }

    fn start_with(
        cfg: &Config,
        opts: StartOptions,
        record: Option<&Path>,
        operators: UserOperators,
        gpu: usize,
    ) -> Result<Self, AppError> {
        let pick = pick_backend_on(cfg.backend, gpu)?;
        tracing::info!(backend = pick.name(), "backend {}: {}", pick.name(), pick.reason);
        let gpu_claim = if pick.backend == Backend::Cuda && !opts.defer_launch {
            Some(super::GpuClaim::take(gpu)?)
        } else {
            None
        };
        // A port another appliance of this process holds is refused here,
        // before anything starts. (Port 0 is a fresh port every time.)
        let port_claim = match cfg.ingest.bind.parse::<SocketAddr>() {
            Ok(addr) if !opts.shared_port && addr.port() != 0 => Some(super::PortClaim::take(addr)?),
            _ => None,
        };
        let mut opts = opts;
        let user_stage = opts.user_stage.take();
        pick.check_handler(cfg)?;
        operators.check(&cfg.chain, pick.backend, cfg.loop_.fused_chain)?;
        // Built (and its ports checked) before any memory is allocated; the
        // frame ring's slots hold ring.slot_bytes, the size it is built for.
        let user_chain = if operators.is_empty() {
            None
        } else {
            Some(operators.into_chain(&cfg.chain, cfg.ring.slot_bytes)?)
        };
        if cfg.ingest.format == crate::ingest::hsb::IngestFormat::Hsb
            && cfg.ingest.transport != Transport::Udp
        {
            return Err(AppError::Unsupported(
                "ingest.format = \"hsb\" receives UDP datagrams: set ingest.transport = \"udp\"".into(),
            ));
        }
        let user_handler = cfg
            .handler
            .as_ref()
            .map(|h| crate::gpu::user::handler::UserHandlerSource::from_config(h, Path::new("")))
            .transpose()
            .map_err(AppError::HandlerSource)?;
        let frame_bytes = ring_bytes(cfg.ring.slots, cfg.ring.slot_bytes).ok_or_else(|| {
            AppError::Unsupported("ring.slots x ring.slot_bytes overflows; use fewer or smaller slots".into())
        })?;
        let result_bytes = result_ring_bytes(cfg.ring.results)
            .ok_or_else(|| AppError::Unsupported("ring.results is too large; lower it".into()))?;

        let OpenedBackend { frame_ring, result_ring, mut resident, plan, placement, outputs, transmit } =
            open_backend(&pick, gpu, cfg, (user_handler, user_chain, user_stage), frame_bytes, result_bytes)?;
        tracing::info!(ring = ?placement, "frame ring in {}", placement.describe());
        let frame_ring_pages = log_ring_pages(cfg.ring.huge_pages, frame_ring.memory());
        if !opts.defer_launch {
            resident.launch().map_err(AppError::Launch)?;
        }
        let reloader = Reloader::new(cfg.clone(), resident.take_live_chain(), pick.name());

        let mut sink =
            ResultSink::new(ResultReader::new(Arc::clone(&result_ring)), resident.clock_offset_ns());
        let (on_result, nats_sink) = match &cfg.sink.nats {
            Some(nats) => {
                let (callback, sender) = crate::sink::nats::forward_results(nats, opts.on_result)?;
                (Some(callback), Some(sender))
            }
            None => (opts.on_result, None),
        };
        if let Some(cb) = on_result {
            sink = sink.with_callback(cb);
        }
        let mut histogram_log = None;
        if let Some(path) = opts.histogram_log.as_ref().or(cfg.metrics.histogram_log.as_ref()) {
            let now = crate::clock::realtime_ns();
            let writer = create_interval_log(path, now)?;
            histogram_log = Some((path.clone(), writer.counters()));
            sink = sink.with_interval_log(writer, cfg.metrics.interval_ns(), now);
        }
        let frame_log = match &cfg.metrics.frame_log {
            Some(path) => {
                let (log, feed) = FrameLog::create(path)?;
                sink = sink.with_frame_log(feed);
                tracing::info!("frame log: one line per frame to {}", path.display());
                Some(log)
            }
            None => None,
        };
        // Reading the head of a ring in GPU memory takes a copy and a stream
        // sync (~10 µs), too slow to poll: there only the flow of results counts.
        let frame_head = (!frame_ring.is_device_only()).then(|| {
            let head_ring = Arc::clone(&frame_ring);
            Box::new(move || head_ring.head()) as Box<dyn Fn() -> u64 + Send>
        });
        // The GPU writes its results without waking anyone: between frames the
        // result thread sleeps on the frame ring, whose publication wakes it to
        // spin for the result (the host loop wakes it through the result ring).
        let frame_wait = (pick.backend != Backend::Host && !frame_ring.is_device_only()).then(|| {
            let wait_ring = Arc::clone(&frame_ring);
            Box::new(move |seen, timeout| wait_ring.wait_published_past(seen, timeout)) as FrameWait
        });
        let spin = ResultSpin { budget: result_spin_budget(), frame_head, frame_wait };
        let (result_cpu, result_nice) = (cfg.service.result_cpu, cfg.service.result_nice);
        let result_stall: Option<LoopHook> = ThreadStall::requested("result")
            .map(|mut stall| Box::new(move |stop: &AtomicBool| stall.hang_if_due(stop)) as LoopHook);
        let result_wait = match pick.backend {
            Backend::Host => RESULT_HOST_WAIT,
            Backend::Cuda => RESULT_POLL,
        };
        let results = ResultThread::spawn_placed(sink, result_wait, Some(spin), result_stall, move || {
            crate::service::thread_failure::panic_if_requested("result");
            crate::service::threads::place_current_thread("result", result_cpu, None)?;
            if result_nice > 0
                && let Err(e) = crate::realtime::set_current_thread_nice(result_nice)
            {
                tracing::warn!(
                    "service.result_nice = {result_nice} refused ({e}); the result thread runs at the receiver's priority"
                );
            }
            Ok(())
        })?;

        let counters = Arc::new(IngestCounters::default());
        let rx_stop = Arc::new(AtomicBool::new(false));
        let wiring = ActuationWiring {
            book: transmit.as_ref().and_then(|t| {
                t.plan
                    .outputs
                    .iter()
                    .any(|o| o.destination == crate::actuate::Destination::Reply)
                    .then(Arc::default)
            }),
            want_socket: transmit.is_some(),
        };
        let (ingest, ring_writer) = if opts.shared_port {
            if record.is_some() {
                return Err(AppError::Unsupported(
                    "--record taps one loop's receiver; a shared port's receiver is not one: record with tcpdump"
                        .into(),
                ));
            }
            (None, Some(frame_ring.writer().ok_or(AppError::WriterTaken)?))
        } else {
            (Some(start_ingest(plan, cfg, &frame_ring, &counters, &rx_stop, record, &wiring)?), None)
        };
        let mut send_socket = None;
        let (local_addr, gro_active, rtp_counters, recording, rx_thread, rx_poll_loops) = match ingest {
            Some(i) => {
                send_socket = i.send_socket;
                (i.local_addr, i.gro_active, i.rtp_counters, i.recording, Some(i.thread), i.poll_loops)
            }
            // Until the shared port's receiver is bound (set_shared_receiver).
            None => (
                cfg.ingest.bind.parse().unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))),
                false,
                None,
                None,
                None,
                None,
            ),
        };

        // A fresh port (bind port 0) is claimed once known, so that another
        // appliance of this process naming it is refused too.
        let port_claim = match port_claim {
            None if rx_thread.is_some() => super::PortClaim::take(local_addr).ok(),
            held => held,
        };

        let actuation = match transmit {
            Some(t) => Some(crate::actuate::ActuationSender::start(
                t.ring,
                t.plan,
                send_socket,
                wiring.book,
                t.wait,
                t.ready_offset_ns,
            )?),
            None => None,
        };

        Ok(Self {
            actuation,
            pick,
            local_addr,
            gro_active,
            counters,
            rtp_counters,
            recording,
            frame_ring,
            frame_ring_pages,
            rx_stop,
            rx_thread,
            rx_poll_loops,
            shared_port: opts.shared_port,
            ring_writer,
            resident,
            result_progress: results.progress(),
            results: Some(results),
            result_ring,
            shutdown_timeout: cfg.service.shutdown_timeout(),
            outputs,
            nats_sink,
            frame_log,
            histogram_log,
            started: Instant::now(),
            reloader,
            gpu_claim,
            port_claim,
        })
    }

    /// The address the receiver is bound to (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The backend running the chain, and why it was picked.
    pub fn backend(&self) -> &BackendPick {
        &self.pick
    }

    /// Ingest counters (live).
    pub fn ingest(&self) -> IngestSnapshot {
        self.counters.snapshot()
    }

    /// The frame ring's memory: kind, size and how much is in huge pages.
    pub fn frame_ring_memory(&self) -> RingMemoryReport {
        RingMemoryReport::of(self.frame_ring.memory())
    }

    /// Resident loop counters (live).
    pub fn loop_stats(&self) -> LoopStats {
        self.resident.stats()
    }

    /// True while the resident loop runs (false after it tore itself down).
    pub fn is_launched(&self) -> bool {
        self.resident.is_launched()
    }

    /// Launches a resident loop started with [`StartOptions::defer_launch`]
    /// (frames that arrived meanwhile wait in the ring); does nothing when it
    /// runs already.
    pub fn launch(&mut self) -> Result<(), AppError> {
        if self.resident.is_launched() {
            return Ok(());
        }
        self.resident.launch().map_err(AppError::Launch)
    }

    /// The frame ring's writer and the ingest counters, once, for the
    /// receiver of a shared port ([`StartOptions::shared_port`]; `None`
    /// otherwise, and after the first call: a ring has one writer).
    pub fn take_ring_writer(&mut self) -> Option<(RingWriter, Arc<IngestCounters>)> {
        let writer = self.ring_writer.take()?;
        Some((writer, Arc::clone(&self.counters)))
    }

    /// Where the shared port's receiver listens, for [`Appliance::local_addr`]
    /// and the report.
    pub fn set_shared_receiver(&mut self, local_addr: SocketAddr, gro_active: bool) {
        self.local_addr = local_addr;
        self.gro_active = gro_active;
    }

    /// The first stage found stopped by itself (`receiver thread`, `resident
    /// loop` or `result thread`), if one has: the appliance no longer serves
    /// its streams. A shared port's receiver is watched by whoever started it.
    pub fn stopped_stage(&self) -> Option<&'static str> {
        if !self.shared_port && self.rx_thread.as_ref().is_none_or(JoinHandle::is_finished) {
            Some("receiver thread")
        } else if !self.resident.is_launched() {
            Some("resident loop")
        } else if !self.results.as_ref().is_some_and(ResultThread::is_running) {
            Some("result thread")
        } else {
            None
        }
    }

    /// Latency summary so far.
    pub fn latency(&self) -> Summary {
        self.results.as_ref().map(ResultThread::snapshot).unwrap_or_else(|| Summary::of(&Default::default()))
    }

    /// RTP assembler counters (name, value), when the receiver assembles RTP video.
    pub fn rtp_counters(&self) -> Option<Vec<(&'static str, u64)>> {
        self.rtp_counters.as_ref().map(|c| c.iter().collect())
    }

    /// One line for a progress display.
    pub fn progress_line(&self) -> String {
        let ingest = self.counters.snapshot();
        // RTP datagrams are counted by the RTP assembler; the ingest counters
        // then hold only what the receiver dropped before it.
        let (rtp_datagrams, rtp_drops) = self
            .rtp_counters
            .as_ref()
            .map_or((0, 0), |c| (c.get(crate::rtp::RtpCounter::datagrams), c.packets_dropped()));
        format!(
            "{:>6.1}s  rx {} datagrams  {}  drops {}",
            self.started.elapsed().as_secs_f64(),
            ingest.datagrams + rtp_datagrams,
            self.latency().progress_line(),
            ingest.datagrams_dropped() + rtp_drops
        )
    }

    /// Everything the Prometheus endpoint shows, as of now.
    pub fn metrics_snapshot(&self) -> crate::service::MetricsSnapshot {
        self.metrics_snapshot_of(&self.latency())
    }

    /// The metrics snapshot and the latency summary it was made from (the
    /// live view plots the summary's curves).
    pub fn live_snapshot(&self) -> (crate::service::MetricsSnapshot, Summary) {
        let latency = self.latency();
        (self.metrics_snapshot_of(&latency), latency)
    }

    /// The output ring, when `[output]` is enabled (the live view's preview
    /// reads its newest output).
    pub fn output_ring(&self) -> Option<std::sync::Arc<crate::output::OutputRing>> {
        self.outputs.as_ref().map(|s| std::sync::Arc::clone(s.ring()))
    }

    fn metrics_snapshot_of(&self, latency: &Summary) -> crate::service::MetricsSnapshot {
        use crate::service::{MetricsSnapshot, SegmentLatency};
        let loop_stats = self.resident.stats();
        let ingest = self.counters.snapshot();
        let f = &latency.frames;
        MetricsSnapshot {
            backend: self.pick.name().to_string(),
            loop_launched: self.resident.is_launched(),
            loop_iterations: loop_stats.iterations,
            loop_idle_iterations: loop_stats.idle_iterations,
            frames: vec![
                ("processed".into(), f.processed),
                ("complete".into(), f.complete),
                ("incomplete".into(), f.incomplete),
                ("skipped".into(), f.skipped),
                ("results_lost".into(), f.results_lost),
            ],
            drops: crate::ingest::counters::COUNTERS
                .iter()
                .filter(|(_, class)| !matches!(class, crate::ingest::CounterClass::Total))
                .filter_map(|(name, _)| ingest.get(name).map(|v| (name.to_string(), v)))
                .collect(),
            ring_overruns: ingest.ring_full,
            receiver_busy_poll_gaps: ingest.busy_poll_gaps,
            receiver_assembly_waits: ingest.assembly_waits,
            frame_ring_pages: self.frame_ring_pages,
            param_generation: self.reloader.applied_generation(),
            reloads: self.reloader.counts().labelled(),
            latency: latency
                .segments
                .iter()
                .map(|s| {
                    let p = &s.percentiles;
                    let ns = |us: f64| (us * 1000.0) as u64;
                    SegmentLatency {
                        segment: s.segment.name().to_string(),
                        count: s.count,
                        sum_ns: p.mean_us * 1000.0 * s.count as f64,
                        quantiles: vec![
                            (0.5, ns(p.p50_us)),
                            (0.9, ns(p.p90_us)),
                            (0.99, ns(p.p99_us)),
                            (0.999, ns(p.p99_9_us)),
                            (1.0, ns(p.max_us)),
                        ],
                    }
                })
                .collect(),
            loops: Vec::new(),
            outputs: self.output_metrics(),
            nats_sink: self.nats_sink.as_ref().map(|s| s.counters().into()),
            logs: self.log_metrics(),
            actuation: self.actuation_metrics(),
        }
    }

    /// The frame log's and the histogram log's counts, as now.
    fn log_metrics(&self) -> Vec<crate::service::LogMetrics> {
        let frame_log = self.frame_log.as_ref().map(|l| ("frame_log", l.counters()));
        let histogram_log = self.histogram_log.as_ref().map(|(_, c)| ("histogram_log", Arc::clone(c)));
        frame_log
            .into_iter()
            .chain(histogram_log)
            .map(|(log, c)| crate::service::LogMetrics::of(log, &c))
            .collect()
    }

    /// The actuation outputs' counters and latency, when `[[actuate]]` is configured.
    pub fn actuation_metrics(&self) -> Option<crate::actuate::ActuationMetrics> {
        self.actuation.as_ref().map(crate::actuate::ActuationSender::snapshot)
    }

    /// The output ring and its consumers, when `[output]` is enabled.
    pub fn output_metrics(&self) -> Option<crate::metrics::OutputMetrics> {
        self.outputs.as_ref().map(|s| s.snapshot().into())
    }

    /// Applies a reloaded config: parameter and chain-shape changes reach
    /// the running loop between two frames; an invalid config, or one with a
    /// change that needs a restart, changes nothing (see [`crate::reload`]).
    pub fn reload(&mut self, new: crate::config::Config) -> ReloadOutcome {
        self.reloader.apply(new)
    }

    /// As [`Appliance::reload`], and says why a config that changed nothing
    /// was refused: its problems, or the keys that need a restart.
    pub fn reload_explained(&mut self, new: crate::config::Config) -> ReloadVerdict {
        let mut reasons: Vec<String> = new.problems().iter().map(ToString::to_string).collect();
        if reasons.is_empty() {
            let change = crate::reload::classify(self.reloader.running(), &new);
            reasons = change
                .of(crate::reload::ChangeClass::Restart)
                .map(|k| format!("{} changed ({} -> {}) and needs a restart", k.key, k.from, k.to))
                .collect();
        }
        let outcome = self.reloader.apply(new);
        match outcome {
            ReloadOutcome::RejectedInvalid if reasons.is_empty() => reasons.push(format!(
                "the {} backend cannot run the new chain (its errors are in the log)",
                self.pick.name()
            )),
            ReloadOutcome::RefusedRestart if reasons.is_empty() => reasons
                .push(format!("the {} backend applies chain changes only on restart", self.pick.name())),
            ReloadOutcome::AppliedParams { .. }
            | ReloadOutcome::AppliedShape { .. }
            | ReloadOutcome::Unchanged => reasons.clear(),
            _ => {}
        }
        ReloadVerdict { outcome, reasons }
    }

    /// The config the appliance runs now: the start-up one, or the last one
    /// a reload applied.
    pub fn running_config(&self) -> &crate::config::Config {
        self.reloader.running()
    }

    /// A reader of the output ring in this process, without the socket
    /// ([`crate::output::Consumer::attach_local`]); refused without `[output]`.
    pub fn attach_consumer(&self) -> Result<crate::output::Consumer, AppError> {
        let server = self.outputs.as_ref().ok_or(AppError::NoOutputs)?;
        Ok(crate::output::Consumer::attach_local(server)?)
    }

    /// A copy of every segment's latency histogram so far (nanoseconds), to
    /// plot, merge or encode; [`Appliance::latency`] gives their percentiles.
    pub fn latency_histograms(&self) -> crate::metrics::LatencyHistograms {
        self.results.as_ref().map(ResultThread::histograms).unwrap_or_default()
    }

    /// A reload whose config file could not be read or parsed: logged, counted, nothing changes.
    pub fn reload_failed(&mut self, error: &crate::config::ConfigError) -> ReloadOutcome {
        self.reloader.reject(error)
    }

    /// The parameter generation the loop runs now (0: the start-up config).
    pub fn param_generation(&self) -> u32 {
        self.reloader.applied_generation()
    }

    /// Re-measures the GPU clock offset (drift) and hands it to the result
    /// thread; returns the new offset and its error bound, if the backend has
    /// a clock of its own.
    pub fn recalibrate_clock(&mut self) -> Result<Option<ClockEstimate>, AppError> {
        let c = self.resident.recalibrate_clock()?;
        if let (Some(c), Some(r)) = (c, &self.results) {
            r.set_clock(c.offset_ns, c.measured_at_ns, c.drift_ppb);
            tracing::debug!(
                offset = c.offset_ns,
                error = c.error_ns,
                drift_ppb = c.drift_ppb,
                "GPU clock recalibrated"
            );
        }
        Ok(c)
    }

    /// Frames published in the frame ring that the resident loop has not
    /// taken yet (a copy and a stream sync for a ring in GPU memory).
    pub fn frame_backlog(&self) -> u64 {
        let seq = self.frame_ring.sequences();
        crate::service::backlog(seq.head, seq.consumed)
    }

    /// The receiver's and the result thread's progress for the watchdog,
    /// read from atomics on the watchdog's thread: the receiver's poll loop
    /// must always advance (its poll is timed); the result thread's loop
    /// must advance while results wait in the result ring. The resident
    /// loop's source is built by the caller from [`Appliance::loop_stats`]
    /// and [`Appliance::frame_backlog`], which need the loop itself.
    pub fn progress_sources(&self) -> Vec<ProgressSource> {
        let mut sources = Vec::new();
        if let Some(loops) = &self.rx_poll_loops {
            let loops = Arc::clone(loops);
            sources.push(ProgressSource::new("receiver", move || loops.load(Ordering::Relaxed)));
        }
        let (count, read) = (Arc::clone(&self.result_progress), Arc::clone(&self.result_progress));
        let ring = Arc::clone(&self.result_ring);
        sources.push(ProgressSource::with_backlog(
            "result thread",
            move || count.iterations.load(Ordering::Relaxed),
            move || crate::service::backlog(ring.head(), read.read_position.load(Ordering::Relaxed)),
        ));
        sources
    }

    /// Waits until every published frame has been consumed or `timeout` passes.
    pub fn drain(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            // One read of both words (a copy for a ring in GPU memory).
            let seq = self.frame_ring.sequences();
            if seq.consumed >= seq.head {
                return true;
            }
            if Instant::now() >= deadline || !self.resident.is_launched() {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Stops the receiver (publishing what it holds), lets the loop finish
    /// the frames in the ring, tears the loop down and returns the report.
    ///
    /// Returns within `service.shutdown_timeout_ms` whatever happens: a
    /// thread (or a tear-down) that has not finished by then is left behind,
    /// leaked with what it owns, and named in [`Report::hung`], as is a
    /// resident loop whose device stopped answering ([`ResidentLoop::is_wedged`]).
    pub fn stop(mut self) -> Result<Report, AppError> {
        let deadline = Instant::now() + self.shutdown_timeout;
        // The last part of the budget is kept for the result thread, so that
        // a hung tear-down does not make a healthy result thread look hung.
        let results_reserve = (self.shutdown_timeout / 10).min(Duration::from_millis(200));
        let loop_deadline = deadline - results_reserve;
        let mut hung = Vec::new();
        self.rx_stop.store(true, Ordering::Release);
        let rx = match self.rx_thread.take() {
            Some(h) => {
                let joined = join_by(h, loop_deadline);
                if joined.is_none() {
                    hung.push("receiver thread (did not return)".to_string());
                    // It may still hold the port.
                    std::mem::forget(self.port_claim.take());
                }
                joined
            }
            None => None,
        };
        let left = loop_deadline.saturating_duration_since(Instant::now());
        let drained = self.drain(left.min(Duration::from_secs(2)));
        if !drained {
            tracing::warn!("frames left in the ring at shutdown were not processed");
        }
        let stats_before = self.resident.stats();
        let (clock_offset_ns, clock_error_ns) =
            (self.resident.clock_offset_ns(), self.resident.clock_error_ns());
        // The output ring's server goes after the loop (the graph writes its control block).
        let output_server = self.outputs.take();
        let mut resident = self.resident;
        let torn_down = call_by("frameloop-tear-down", loop_deadline, move || {
            if let Some(stall) = ThreadStall::requested("tear-down") {
                stall.hang_forever();
            }
            let result = resident.tear_down();
            (result, resident.is_wedged())
        });
        let loop_stats = match torn_down {
            Some((Ok(s), wedged)) => {
                if wedged {
                    hung.push(
                        "resident loop (its device stopped answering; its memory is leaked)".to_string(),
                    );
                }
                s
            }
            Some((Err(e), wedged)) => {
                tracing::error!("resident loop: {e}");
                if wedged {
                    hung.push(
                        "resident loop (its device stopped answering; its memory is leaked)".to_string(),
                    );
                }
                stats_before
            }
            None => {
                hung.push("resident loop (its tear-down did not return)".to_string());
                stats_before
            }
        };
        // After the loop: the sender sends what the loop formed, then stops.
        let actuation = self.actuation.take().map(crate::actuate::ActuationSender::stop);
        let outputs = output_server.as_ref().map(|s| s.snapshot().into());
        if hung.is_empty() {
            // Closes every consumer's connection and removes the socket.
            drop(output_server);
        } else {
            // The device may still write the control block: leave it mapped,
            // and the GPU claimed (its loop may still run).
            std::mem::forget(output_server);
            std::mem::forget(self.gpu_claim.take());
        }
        // Results of the last frames: give the result thread a moment to see them.
        std::thread::sleep(Duration::from_millis(5));
        let latency = match self.results {
            Some(r) => match call_by("frameloop-results-stop", deadline, move || r.stop()) {
                Some(summary) => summary?,
                None => {
                    hung.push("result thread (did not return; latency figures lost)".to_string());
                    Summary::of(&Default::default())
                }
            },
            None => Summary::of(&Default::default()),
        };
        // After the result thread: every line it pushed is queued.
        let frame_log = self.frame_log.take().map(|log| {
            log.finish(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100)))
        });
        if let Some(log) = &frame_log {
            if log.lost > 0 || log.error.is_some() {
                tracing::warn!(
                    "frame log {}: {} lines written, {} lost ({})",
                    log.path.display(),
                    log.written,
                    log.lost,
                    log.error.as_deref().unwrap_or("no error")
                );
            }
            if log.dropped > 0 {
                tracing::warn!(
                    "frame log {}: {} lines dropped (the disk fell behind the frames)",
                    log.path.display(),
                    log.dropped
                );
            }
        }
        match rx {
            Some(Ok(Ok(()))) | None => {}
            Some(Ok(Err(e))) => tracing::error!("receiver stopped with an error: {e}"),
            Some(Err(_)) => tracing::error!("the receiver thread panicked"),
        }
        for stage in &hung {
            tracing::error!(
                "shutdown: {stage} within service.shutdown_timeout_ms = {} ms; left it behind \
                 (raise the key if the stage is only slow to stop)",
                self.shutdown_timeout.as_millis()
            );
        }
        // Once the receiver thread has ended, the tap was dropped and has reported.
        let recording = self.recording.as_ref().and_then(|done| done.try_recv().ok());
        if let Some(e) = recording.as_ref().and_then(|r| r.error.as_ref()) {
            tracing::error!("the recording stopped early: {e}");
        }
        let rtp = self.rtp_counters.as_ref().map(|c| c.iter().collect());
        Ok(Report {
            backend: self.pick.clone(),
            elapsed_s: self.started.elapsed().as_secs_f64(),
            listen: self.local_addr.to_string(),
            gro: self.gro_active,
            loop_stats,
            ingest: self.counters.snapshot(),
            frame_ring: RingMemoryReport::of(self.frame_ring.memory()),
            clock_offset_ns,
            clock_error_ns,
            rtp,
            recording,
            outputs,
            nats_sink: self.nats_sink.as_ref().map(|s| s.counters().into()),
            actuation,
            frame_log,
            histogram_log: self.histogram_log.as_ref().map(|(path, c)| HistogramLogReport::of(path, c)),
            latency,
            hung,
            shutdown_timeout_ms: self.shutdown_timeout.as_millis().try_into().unwrap_or(u64::MAX),
        })
    }
}

/// Says how much of the frame ring the kernel put in huge pages, warns
/// when `ring.huge_pages` asked for them and got none, and returns the
/// figures for the metrics (`None` for memory the host cannot see).
fn log_ring_pages(
    requested: bool,
    memory: &dyn crate::ring::RingMemory,
) -> Option<crate::service::FrameRingPages> {
    let report = RingMemoryReport::of(memory);
    let huge = report.huge_page_bytes?;
    tracing::info!(huge_page_bytes = huge, ring_bytes = report.bytes, "frame ring: {}", report.describe());
    if requested && huge == 0 {
        let mode = crate::ring::pages::transparent_huge_page_mode();
        let why = if crate::ring::pages::huge_pages_enabled(mode.as_deref()) {
            // Enabled, yet none given: no free 2 MiB page could be compacted.
            "memory was too fragmented for 2 MiB pages at start-up \
             (echo 1 > /proc/sys/vm/compact_memory before starting, or set ring.huge_pages = false)"
                .to_string()
        } else {
            crate::ring::pages::expected_paging(true, mode.as_deref())
        };
        tracing::warn!("ring.huge_pages = true but the frame ring got no huge pages: {why}");
    }
    Some(crate::service::FrameRingPages { bytes: report.bytes as u64, huge_page_bytes: huge as u64 })
}
