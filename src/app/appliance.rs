//! The running appliance: frame ring and result ring, the UDP receiver
//! thread, the resident loop (host or CUDA) and the result thread, started
//! in that dependency order and stopped in the reverse one.
//!
//! The receiver assembles native frameloop datagrams, or RFC 4175 RTP video
//! when the config has an `[rtp]` section; it can record every datagram it
//! receives as pcapng ([`Appliance::start_recording`]).

use super::AppError;
use super::report::{RecordingReport, Report};
use crate::backend::{ClockEstimate, LoopStats, ResidentLoop};
use crate::config::{BackendChoice, Config};
use crate::host::HostLoop;
use crate::ingest::{FrameAssembler, IngestCounters, IngestSnapshot, Reassembler, UdpReceiver};
use crate::metrics::{ResultCallback, ResultSink, ResultSpin, ResultThread, Summary, create_interval_log};
use crate::rdma::{
    self, ConsumerBackend, GpuFrameRing, IngestPlan, RingPlacement, Transport, final_placement,
    first_placement,
};
use crate::ring::layout::{result_ring_bytes, ring_bytes};
use crate::ring::{FrameRing, HostMemory, ResultReader, ResultRing, RingMemory};
use crate::rtp::{RtpAssembler, RtpCounters};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the result thread sleeps when no frame is being processed.
const RESULT_POLL: Duration = Duration::from_micros(50);
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
}

/// The backend that was picked and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackendPick {
    pub name: &'static str,
    pub reason: String,
}

/// Picks the backend for `choice`: `auto` takes CUDA only when a GPU and
/// NVRTC are usable, and says why it took what it took.
pub fn pick_backend(choice: BackendChoice) -> Result<BackendPick, AppError> {
    match choice {
        BackendChoice::Host => Ok(BackendPick { name: "host", reason: "chosen by configuration".into() }),
        BackendChoice::Cuda => match crate::gpu::probe(0) {
            Ok(info) => Ok(BackendPick { name: "cuda", reason: info.to_string() }),
            Err(why) => Err(AppError::Startup(format!(
                "backend cuda needs a usable GPU: {why}; use --backend host (or auto) on this machine"
            ))),
        },
        BackendChoice::Auto => match crate::gpu::probe(0) {
            Ok(info) => Ok(BackendPick { name: "cuda", reason: format!("auto: {info}") }),
            Err(why) => Ok(BackendPick { name: "host", reason: format!("auto: no usable GPU ({why})") }),
        },
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
    /// Where the frame ring's bytes live.
    placement: RingPlacement,
    rx_stop: Arc<AtomicBool>,
    /// Invariant: `Some` until `stop` joins it.
    rx_thread: Option<JoinHandle<Result<(), String>>>,
    resident: Box<dyn ResidentLoop>,
    results: Option<ResultThread>,
    started: Instant,
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
        let pick = pick_backend(cfg.backend)?;
        tracing::info!(backend = pick.name, "backend {}: {}", pick.name, pick.reason);
        if let Some(h) = &cfg.handler
            && pick.name != "cuda"
        {
            return Err(AppError::Startup(format!("handler.entry: {}", h.host_refusal())));
        }
        if cfg.ingest.format == crate::ingest::hsb::IngestFormat::Hsb
            && cfg.ingest.transport != Transport::Udp
        {
            return Err(AppError::Startup(
                "ingest.format = \"hsb\" receives UDP datagrams: set ingest.transport = \"udp\"".into(),
            ));
        }
        let user_handler = cfg
            .handler
            .as_ref()
            .map(|h| crate::gpu::user_handler::UserHandlerSource::from_config(h, Path::new("")))
            .transpose()
            .map_err(|e| AppError::Startup(format!("handler.source: {e}")))?;
        let frame_bytes = ring_bytes(cfg.ring.slots, cfg.ring.slot_bytes).ok_or_else(|| {
            AppError::Startup("ring.slots x ring.slot_bytes overflows; use fewer or smaller slots".into())
        })?;
        let result_bytes = result_ring_bytes(cfg.ring.results)
            .ok_or_else(|| AppError::Startup("ring.results is too large; lower it".into()))?;

        let transport = cfg.ingest.transport;
        let (frame_ring, result_ring, mut resident, plan, placement): (_, _, Box<dyn ResidentLoop>, _, _) =
            match pick.name {
                "cuda" => {
                    let rt = crate::gpu::executor::GpuRuntime::open(0, crate::gpu::nvrtc::CacheDir::Default)
                        .map_err(|e| AppError::Startup(format!("cannot open the GPU: {e}")))?;
                    let (fr, plan, placement) = cuda_frame_ring(cfg, &rt, frame_bytes)?;
                    let rr = ResultRing::new(mapped(&rt, result_bytes)?, cfg.ring.results)
                        .map_err(|e| AppError::Startup(e.to_string()))?;
                    let lp = crate::gpu::CudaLoop::with_handler(
                        Arc::clone(&rt),
                        Arc::clone(&fr),
                        Arc::clone(&rr),
                        &cfg.chain,
                        cfg.loop_.clone(),
                        user_handler,
                    )
                    .map_err(|e| AppError::Startup(format!("cannot build the GPU loop: {e}")))?;
                    (fr, rr, Box::new(lp), plan, placement)
                }
                _ => {
                    let host = |len| -> Result<Box<dyn RingMemory>, AppError> {
                        Ok(Box::new(HostMemory::new(len).map_err(|e| {
                            AppError::Startup(format!(
                                "cannot map {len} bytes for a ring: {e}; lower ring.slots"
                            ))
                        })?))
                    };
                    let (fr, rr) = make_rings(cfg, host(frame_bytes)?, host(result_bytes)?)?;
                    let plan = select_ingest(transport, &cfg.rdma, &fr, &rdma::ring_region(&fr))?;
                    let mut lp = HostLoop::new(
                        Arc::clone(&fr),
                        Arc::clone(&rr),
                        cfg.chain.clone(),
                        cfg.ring.slot_bytes,
                        cfg.loop_.clone(),
                    )
                    .map_err(|e| AppError::Startup(e.to_string()))?;
                    lp.place_thread(cfg.service.loop_cpu, cfg.service.realtime_priority);
                    (fr, rr, Box::new(lp), plan, RingPlacement::Host)
                }
            };
        tracing::info!(ring = ?placement, "frame ring in {}", placement.describe());
        resident.launch().map_err(|e| AppError::Startup(format!("cannot launch the resident loop: {e}")))?;

        let mut sink =
            ResultSink::new(ResultReader::new(Arc::clone(&result_ring)), resident.clock_offset_ns());
        let on_result = match &cfg.sink.nats {
            Some(nats) => Some(
                crate::sink::nats::forward_results(nats, opts.on_result)
                    .map_err(|e| AppError::Startup(e.to_string()))?
                    .0,
            ),
            None => opts.on_result,
        };
        if let Some(cb) = on_result {
            sink = sink.with_callback(cb);
        }
        if let Some(path) = opts.histogram_log.as_ref().or(cfg.metrics.histogram_log.as_ref()) {
            let now = crate::clock::realtime_ns();
            let writer = create_interval_log(path, now).map_err(|e| AppError::Startup(e.to_string()))?;
            sink = sink.with_interval_log(writer, cfg.metrics.interval_ns(), now);
        }
        // Reading the head of a ring in GPU memory takes a copy and a stream
        // sync (~10 µs), too slow to poll: there only the flow of results counts.
        let frame_head = (!frame_ring.is_device_only()).then(|| {
            let head_ring = Arc::clone(&frame_ring);
            Box::new(move || head_ring.head()) as Box<dyn Fn() -> u64 + Send>
        });
        let spin = ResultSpin { budget: result_spin_budget(), frame_head };
        let result_cpu = cfg.service.result_cpu;
        let results = ResultThread::spawn_placed(sink, RESULT_POLL, Some(spin), move || {
            crate::service::thread_failure::panic_if_requested("result");
            crate::service::threads::place_current_thread("result", result_cpu, None)
                .map_err(|e| e.to_string())
        })
        .map_err(|e| AppError::Startup(e.to_string()))?;

        let counters = Arc::new(IngestCounters::default());
        let rx_stop = Arc::new(AtomicBool::new(false));
        let ingest = match plan {
            IngestPlan::Udp { reason } => {
                if transport != Transport::Udp {
                    tracing::info!("{reason}; using UDP");
                }
                start_udp(cfg, &frame_ring, &counters, &rx_stop, record)?
            }
            #[cfg(feature = "rdma")]
            IngestPlan::Rdma(mut endpoint) => {
                tracing::info!("{}", endpoint.summary());
                let local_addr = endpoint.listen_addr();
                let stop = Arc::clone(&rx_stop);
                let thread = std::thread::Builder::new()
                    .name("frameloop-rdma".into())
                    .spawn(move || endpoint.run(&stop).map_err(|e| e.to_string()))
                    .map_err(|e| AppError::Startup(format!("cannot start the RDMA thread: {e}")))?;
                IngestParts { local_addr, gro_active: false, rtp_counters: None, recording: None, thread }
            }
        };

        Ok(Self {
            pick,
            local_addr: ingest.local_addr,
            gro_active: ingest.gro_active,
            counters,
            rtp_counters: ingest.rtp_counters,
            recording: ingest.recording,
            frame_ring,
            placement,
            rx_stop,
            rx_thread: Some(ingest.thread),
            resident,
            results: Some(results),
            started: Instant::now(),
        })
    }

    /// The address the receiver is bound to (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn backend(&self) -> &BackendPick {
        &self.pick
    }

    /// Where the frame ring's bytes live (GPU memory only with RDMA ingest on the CUDA backend).
    pub fn ring_placement(&self) -> RingPlacement {
        self.placement
    }

    /// Ingest counters (live).
    pub fn ingest(&self) -> IngestSnapshot {
        self.counters.snapshot()
    }

    /// Resident loop counters (live).
    pub fn loop_stats(&self) -> LoopStats {
        self.resident.stats()
    }

    /// True while the resident loop runs (false after it tore itself down).
    pub fn is_launched(&self) -> bool {
        self.resident.is_launched()
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
        use crate::service::{MetricsSnapshot, SegmentLatency};
        let latency = self.latency();
        let loop_stats = self.resident.stats();
        let ingest = self.counters.snapshot();
        let f = &latency.frames;
        MetricsSnapshot {
            backend: self.pick.name.to_string(),
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
        }
    }

    /// Re-measures the GPU clock offset (drift) and hands it to the result
    /// thread; returns the new offset and its error bound, if the backend has
    /// a clock of its own.
    pub fn recalibrate_clock(&mut self) -> Result<Option<ClockEstimate>, AppError> {
        let c = self.resident.recalibrate_clock().map_err(|e| AppError::Runtime(e.to_string()))?;
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
    pub fn stop(mut self) -> Result<Report, AppError> {
        self.rx_stop.store(true, Ordering::Release);
        let rx = self.rx_thread.take().map(|h| h.join());
        let drained = self.drain(Duration::from_secs(2));
        if !drained {
            tracing::warn!("frames left in the ring at shutdown were not processed");
        }
        let loop_result = self.resident.tear_down();
        // Results of the last frames: give the result thread a moment to see them.
        std::thread::sleep(Duration::from_millis(5));
        let latency = match self.results.take() {
            Some(r) => r.stop().map_err(|e| AppError::Runtime(e.to_string()))?,
            None => Summary::of(&Default::default()),
        };
        let loop_stats = match loop_result {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("resident loop: {e}");
                self.resident.stats()
            }
        };
        match rx {
            Some(Ok(Ok(()))) | None => {}
            Some(Ok(Err(e))) => tracing::error!("receiver stopped with an error: {e}"),
            Some(Err(_)) => tracing::error!("the receiver thread panicked"),
        }
        // The receiver thread has ended, so the tap was dropped and has reported.
        let recording = self.recording.as_ref().and_then(|done| done.try_recv().ok());
        if let Some(e) = recording.as_ref().and_then(|r| r.error.as_ref()) {
            tracing::error!("the recording stopped early: {e}");
        }
        Ok(Report {
            backend: self.pick.clone(),
            elapsed_s: self.started.elapsed().as_secs_f64(),
            listen: self.local_addr.to_string(),
            gro: self.gro_active,
            loop_stats,
            ingest: self.counters.snapshot(),
            clock_offset_ns: self.resident.clock_offset_ns(),
            clock_error_ns: self.resident.clock_error_ns(),
            rtp: self.rtp_counters(),
            recording,
            latency,
        })
    }
}

/// The receiving side, whichever transport runs it.
struct IngestParts {
    local_addr: SocketAddr,
    gro_active: bool,
    rtp_counters: Option<Arc<RtpCounters>>,
    recording: Option<std::sync::mpsc::Receiver<RecordingReport>>,
    thread: JoinHandle<Result<(), String>>,
}

/// Binds the UDP receiver (native or RTP assembly, optional recording) and
/// starts its thread on the configured core.
fn start_udp(
    cfg: &Config,
    frame_ring: &Arc<FrameRing>,
    counters: &Arc<IngestCounters>,
    rx_stop: &Arc<AtomicBool>,
    record: Option<&std::path::Path>,
) -> Result<IngestParts, AppError> {
    if cfg.ingest.format == crate::ingest::hsb::IngestFormat::Hsb {
        if record.is_some() {
            return Err(AppError::Startup(
                "--record taps the native receiver; with ingest.format = \"hsb\" record with tcpdump instead"
                    .into(),
            ));
        }
        return start_hsb(cfg, frame_ring, rx_stop);
    }
    let writer = frame_ring
        .writer()
        .ok_or_else(|| AppError::Startup("the frame ring's writer is already taken".into()))?;
    let (assembler, rtp_counters): (Box<dyn FrameAssembler>, _) = match &cfg.rtp {
        Some(rtp) => {
            let settings =
                rtp.resolve().map_err(|p| AppError::Config(crate::config::ConfigError::Invalid(p)))?;
            let a = RtpAssembler::new(settings, writer).map_err(|e| AppError::Startup(e.to_string()))?;
            let c = Arc::clone(a.counters());
            (Box::new(a), Some(c))
        }
        None => {
            let r = Reassembler::new(cfg.ingest.reassembly.clone(), writer, Arc::clone(counters));
            (Box::new(r), None)
        }
    };
    let mut receiver = UdpReceiver::bind_assembler(&cfg.ingest, assembler, Arc::clone(counters))
        .map_err(|e| AppError::Startup(format!("cannot start the UDP receiver: {e}")))?;
    let recording = match record {
        Some(path) => {
            let (tap, done) = super::captures::recording_tap(path)?;
            receiver.set_tap(Box::new(tap));
            tracing::info!("recording received datagrams to {}", path.display());
            Some(done)
        }
        None => None,
    };
    let local_addr = receiver.local_addr();
    let gro_active = receiver.gro_active();
    let stop = Arc::clone(rx_stop);
    let (rx_cpu, rt_prio) = (cfg.service.receiver_cpu, cfg.service.realtime_priority);
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
            receiver.run(&stop).map_err(|e| e.to_string())
        })
        .map_err(|e| AppError::Startup(format!("cannot start the receiver thread: {e}")))?;
    if let Ok(Err(e)) = placed_rx.recv() {
        rx_stop.store(true, Ordering::Release);
        return Err(AppError::Startup(e.to_string()));
    }
    tracing::info!(%local_addr, gro = gro_active, "listening on {local_addr} (UDP GRO {})", on_off(gro_active));
    Ok(IngestParts { local_addr, gro_active, rtp_counters, recording, thread: rx_thread })
}

/// `ingest.format = "hsb"`: the emulated HSB bridge's receiver writes the
/// ring like its DMA engine (no head sequence: the `[handler]` finds frames).
fn start_hsb(
    cfg: &Config,
    frame_ring: &Arc<FrameRing>,
    rx_stop: &Arc<AtomicBool>,
) -> Result<IngestParts, AppError> {
    use crate::ingest::hsb::{HsbDma, HsbReceiver};
    if cfg.handler.is_none() || cfg.rtp.is_some() {
        return Err(AppError::Startup(
            "ingest.format = \"hsb\" writes frames without publishing the ring's head, so only a user handler \
             finds them: add [handler] (handlers/hsb_ready.cu, docs/operators.md) and remove [rtp]"
                .into(),
        ));
    }
    let listen: SocketAddr = cfg.ingest.bind.parse().map_err(|e| {
        AppError::Startup(format!(
            "ingest.bind {:?} is not ADDR:PORT ({e}); for example \"0.0.0.0:5000\"",
            cfg.ingest.bind
        ))
    })?;
    let dma = HsbDma::new(Arc::clone(frame_ring)).map_err(|e| AppError::Startup(e.to_string()))?;
    let receiver = HsbReceiver::bind(listen, dma).map_err(|e| AppError::Startup(e.to_string()))?;
    let local_addr = receiver.local_addr().map_err(|e| AppError::Startup(e.to_string()))?;
    let stop = Arc::clone(rx_stop);
    let thread = std::thread::Builder::new()
        .name("frameloop-hsb".into())
        .spawn(move || {
            let counters = receiver.run(&stop);
            tracing::info!("HSB receiver: {counters:?}");
            Ok(())
        })
        .map_err(|e| AppError::Startup(format!("cannot start the receiver thread: {e}")))?;
    tracing::info!(%local_addr, "listening on {local_addr} for HSB datagrams");
    Ok(IngestParts { local_addr, gro_active: false, rtp_counters: None, recording: None, thread })
}

pub(super) fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// Page-locked host memory the GPU maps, for a ring.
fn mapped(rt: &crate::gpu::executor::GpuRuntime, len: usize) -> Result<Box<dyn RingMemory>, AppError> {
    Ok(Box::new(rt.mapped(len).map_err(|e| AppError::Startup(e.to_string()))?))
}

/// The transport decision, as a start-up error when `rdma` cannot run.
fn select_ingest(
    transport: Transport,
    cfg: &crate::rdma::RdmaConfig,
    ring: &Arc<FrameRing>,
    region: &crate::rdma::RingRegion,
) -> Result<IngestPlan, AppError> {
    rdma::select_ingest_for(transport, cfg, ring, region).map_err(|e| AppError::Startup(e.to_string()))
}

/// The CUDA backend's frame ring and ingest: with a transport that may take
/// RDMA and a GPU that can be its target, the ring goes in GPU memory and is
/// registered from there (dma-buf, then nvidia-peermem); if RDMA is not
/// taken after all (`auto` without a usable device), that ring is freed --
/// before any graph runs -- and the UDP receiver gets a ring in mapped host
/// memory. Returns the ring, the ingest plan and where the ring lives.
fn cuda_frame_ring(
    cfg: &Config,
    rt: &crate::gpu::executor::GpuRuntime,
    frame_bytes: usize,
) -> Result<(Arc<FrameRing>, IngestPlan, RingPlacement), AppError> {
    let transport = cfg.ingest.transport;
    let gpu = match transport {
        Transport::Udp => Err("not read: ingest.transport = \"udp\"".to_string()),
        _ => rdma::dmabuf::gpu_rdma_support(0).map_err(|e| e.to_string()),
    };
    let (first, note) = first_placement(ConsumerBackend::Cuda, transport, &gpu);
    if let Some(note) = note {
        tracing::info!("{note}");
    }
    let mapped_ring = || -> Result<Arc<FrameRing>, AppError> {
        FrameRing::new(mapped(rt, frame_bytes)?, cfg.ring.slots, cfg.ring.slot_bytes, cfg.ring.policy)
            .map_err(|e| AppError::Startup(e.to_string()))
    };
    if first == RingPlacement::Device {
        match GpuFrameRing::new(&rt.ctx, cfg.ring.slots, cfg.ring.slot_bytes, cfg.ring.policy) {
            Ok(gpu_ring) => {
                let plan = select_ingest(transport, &cfg.rdma, gpu_ring.ring(), gpu_ring.region())?;
                let placement = final_placement(first, plan.is_rdma());
                if placement == RingPlacement::Device {
                    return Ok((gpu_ring.into_ring(), plan, placement));
                }
                // UDP after all: the CPU receiver writes the ring, so it goes
                // in mapped host memory; the GPU ring is freed before any
                // graph runs (freeing synchronises the device).
                drop(gpu_ring);
                return Ok((mapped_ring()?, plan, placement));
            }
            Err(e) => {
                tracing::info!("cannot put the frame ring in GPU memory ({e}); it stays in host memory")
            }
        }
    }
    let ring = mapped_ring()?;
    let plan = select_ingest(transport, &cfg.rdma, &ring, &rdma::ring_region(&ring))?;
    Ok((ring, plan, RingPlacement::HostMapped))
}

fn make_rings(
    cfg: &Config,
    frames: Box<dyn RingMemory>,
    results: Box<dyn RingMemory>,
) -> Result<(Arc<FrameRing>, Arc<ResultRing>), AppError> {
    let fr = FrameRing::new(frames, cfg.ring.slots, cfg.ring.slot_bytes, cfg.ring.policy)
        .map_err(|e| AppError::Startup(e.to_string()))?;
    let rr = ResultRing::new(results, cfg.ring.results).map_err(|e| AppError::Startup(e.to_string()))?;
    Ok((fr, rr))
}
