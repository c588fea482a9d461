//! The running appliance: frame ring and result ring, the UDP receiver
//! thread, the resident loop (host or CUDA) and the result thread, started
//! in that dependency order and stopped in the reverse one.
//!
//! The receiver assembles native frameloop datagrams, or RFC 4175 RTP video
//! when the config has an `[rtp]` section; it can record every datagram it
//! receives as pcapng ([`Appliance::start_recording`]).

use super::AppError;
use super::backend_factory::{BackendPick, OpenedBackend, open_backend, pick_backend};
use super::receivers::start_ingest;
use super::report::{RecordingReport, Report};
use crate::backend::{ClockEstimate, LoopStats, ResidentLoop};
use crate::config::Config;
use crate::ingest::{IngestCounters, IngestSnapshot};
use crate::metrics::{ResultCallback, ResultSink, ResultSpin, ResultThread, Summary, create_interval_log};
use crate::rdma::{RingPlacement, Transport};
use crate::reload::{ReloadOutcome, Reloader};
use crate::ring::layout::{result_ring_bytes, ring_bytes};
use crate::ring::{FrameRing, ResultReader};
use crate::rtp::RtpCounters;
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
    /// The running config and the way to change the chain live.
    reloader: Reloader,
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
        pick.check_handler(cfg)?;
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

        let OpenedBackend { frame_ring, result_ring, mut resident, plan, placement } =
            open_backend(&pick, cfg, user_handler, frame_bytes, result_bytes)?;
        tracing::info!(ring = ?placement, "frame ring in {}", placement.describe());
        resident.launch().map_err(|e| AppError::Startup(format!("cannot launch the resident loop: {e}")))?;
        let reloader = Reloader::new(cfg.clone(), resident.take_live_chain(), pick.name);

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
        let ingest = start_ingest(plan, cfg, &frame_ring, &counters, &rx_stop, record)?;

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
            reloader,
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
        }
    }

    /// Applies a reloaded config: parameter and chain-shape changes reach
    /// the running loop between two frames; an invalid config, or one with a
    /// change that needs a restart, changes nothing (see [`crate::reload`]).
    pub fn reload(&mut self, new: crate::config::Config) -> ReloadOutcome {
        self.reloader.apply(new)
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
