//! Latency benchmark of the CUDA backend (`frameloop bench --backend cuda
//! --compare`): one process, one run, the same operators and frames for every
//! mode. The host publishes frames into the mapped frame ring at random gaps
//! and measures publish → result seen by the host for: the resident loop with
//! a poll budget, the resident loop with Holoscan-style sleep intervals,
//! graph-launch-per-frame, stream-launch-per-frame, an empty-workload resident
//! loop, and the floors (persistent-kernel round trip, host-to-device and
//! device memory bandwidth: [`super::floors`], each mode's times as multiples
//! of its chain's floor); with a second chain
//! (`--compare-chain FILE`, e.g. the default chain written as user kernels)
//! also that chain in the resident graph.

use super::floors::{ChainBytes, FloorMultiple, Floors, chain_bytes};
use frameloop::clock::monotonic_ns;
use frameloop::config::{FusedChainMode, LoopConfig};
use frameloop::fragment::Fragment;
use frameloop::gpu::GpuRuntime;
use frameloop::gpu::driver::{self, LaunchDims};
use frameloop::gpu::executor::{ControllerPlacement, ExecutorOptions, LaunchStyle, ResidentExecutor};
use frameloop::gpu::fused::tiled::{
    FrameSource, LargePath, MEASURED, STREAMED, choose_large, plan_for, tiled_fragment,
};
use frameloop::gpu::fused::{FusedChain, NotFused, plan_fusion};
use frameloop::gpu::nvrtc::CacheDir;
use frameloop::gpu::operators::PayloadPath;
use frameloop::gpu::test_rings::{
    MappedRings, PHASE_MARKS, Rng, SLOT_BYTES_MARK, SM_CLOCK_MARK, STREAMED_PART_BYTES, publish,
    publish_streamed,
};
use frameloop::gpu::{GpuError, MappedMemory};
use frameloop::gpu::{chain_flags, chain_fragment, chain_fragment_with, fused_shared_limit};
use frameloop::ops::OpSpec;
use frameloop::ring::{OverrunPolicy, ResultReader};
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What to compare.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    pub ordinal: usize,
    pub chain: Vec<OpSpec>,
    pub frame_bytes: usize,
    /// Measured frames per mode (after `warmup`).
    pub frames: usize,
    pub warmup: usize,
    /// Random gap between frames, µs.
    pub gap_us: (u64, u64),
    pub seed: u64,
    /// Poll budget and interval of the "resident poll" mode.
    pub poll_budget_us: u64,
    pub poll_interval_ns: u64,
    /// How long each resident mode idles (no frames) to measure its idle cost.
    pub idle_ms: u64,
    pub cache: CacheDir,
    /// A second chain run as the extra mode "resident poll, compare chain"
    /// (see [`load_compare_chain`]), its user kernel sources resolved.
    pub compare_chain: Option<Vec<OpSpec>>,
    /// Run only the modes that compare the paths of the chain (what auto
    /// picks, one kernel per operator in the IF body, the tiled fused kernel,
    /// a graph launch per frame) and the floors: a sweep over frame sizes.
    pub paths_only: bool,
    /// Bytes the streamed modes' publisher writes between two received
    /// marks ([`publish_streamed`]): one receive batch of the UDP receiver.
    pub stream_part_bytes: usize,
    /// Put the frame ring in huge pages, as the appliance does with
    /// `ring.huge_pages` (registered ring pages rather than `cuMemHostAlloc`).
    pub huge_pages: bool,
}

impl Default for CompareOptions {
    fn default() -> Self {
        Self {
            ordinal: 0,
            chain: frameloop::ops::default_chain(),
            frame_bytes: 8192,
            frames: 20000,
            warmup: 200,
            gap_us: (20, 200),
            seed: 42,
            poll_budget_us: 1000,
            poll_interval_ns: 200,
            idle_ms: 200,
            cache: CacheDir::Default,
            compare_chain: None,
            paths_only: false,
            stream_part_bytes: STREAMED_PART_BYTES,
            huge_pages: true,
        }
    }
}

/// Latency percentiles of one mode, µs.
#[derive(Debug, Clone, Serialize)]
pub struct ModeResult {
    pub mode: String,
    pub frames: usize,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// Resident modes: loop iterations per second while no frame arrives.
    pub idle_loop_rate_hz: Option<f64>,
    /// Resident modes: fraction of wall time the handler kernel was running
    /// while idle (it holds one warp on one SM for that time).
    pub idle_handler_busy: Option<f64>,
    /// Graph modes: programmatic edges between workload kernels.
    pub programmatic_edges: Option<usize>,
    /// Whether the chain's last kernel published the result (no end-marker node).
    pub publish_in_last_kernel: Option<bool>,
    /// Median GPU time from the handler's detection to the result's
    /// publication (`done_ns - detect_ns` of the result records), µs.
    pub gpu_detect_to_done_p50_us: Option<f64>,
    /// The same at the 99.9th percentile, µs.
    pub gpu_detect_to_done_p999_us: Option<f64>,
    /// With kernels built with `FL_TILED_PHASES` (`FRAMELOOP_NVRTC_DEFINES`),
    /// the claiming tiled kernel's phase marks, p50 µs after detection, in
    /// [`PHASE_MARKS`] order; `None` when no result carried any.
    pub gpu_phase_p50_us: Option<Vec<f64>>,
    /// With the same marks: the bytes of each frame its tiles read from the
    /// slot over the bus after the claim (in place: all of them; streamed:
    /// what the pulls had not moved), p50, KiB.
    pub gpu_slot_read_p50_kib: Option<f64>,
    /// With the same marks: the SM clock block 0 ran at from its start to
    /// its tiles' end (`FL_MARK_SM_CLOCK_MHZ`), p50, MHz.
    pub gpu_sm_clock_p50_mhz: Option<f64>,
}

/// The median of user result word `word` over `records`.
fn user_word_p50(records: &[frameloop::ring::ResultRecord], word: usize) -> u64 {
    let mut v: Vec<u64> = records.iter().map(|r| u64::from(r.user[word])).collect();
    v.sort_unstable();
    quantile(&v, 0.5).unwrap_or(0)
}

/// The medians of the phase marks over a run's results.
#[derive(Debug, Clone, PartialEq)]
struct PhaseMarksP50 {
    /// Each of [`PHASE_MARKS`], µs after detection.
    times_us: Vec<f64>,
    /// [`SLOT_BYTES_MARK`], KiB.
    slot_read_kib: f64,
    /// [`SM_CLOCK_MARK`], MHz; `None` when no record has it.
    sm_clock_mhz: Option<f64>,
}

/// The p50 of every mark over `records`, or `None` when no record carries marks.
fn phase_marks_p50(records: &[frameloop::ring::ResultRecord]) -> Option<PhaseMarksP50> {
    if records.iter().all(|r| PHASE_MARKS.iter().all(|m| r.user[m.word] == 0)) {
        return None;
    }
    let mhz = user_word_p50(records, SM_CLOCK_MARK.word);
    Some(PhaseMarksP50 {
        times_us: PHASE_MARKS.iter().map(|m| user_word_p50(records, m.word) as f64 / 1e3).collect(),
        slot_read_kib: user_word_p50(records, SLOT_BYTES_MARK.word) as f64 / 1024.0,
        sm_clock_mhz: (mhz != 0).then_some(mhz as f64),
    })
}

/// One target of the issue and whether this run met it.
#[derive(Debug, Clone, Serialize)]
pub struct TargetCheck {
    pub target: String,
    pub measured: String,
    pub met: bool,
}

/// Everything one comparison run measured.
#[derive(Debug, Clone, Serialize)]
pub struct CompareReport {
    pub device: String,
    pub chain: Vec<String>,
    /// The operators of the compare chain, when one ran.
    pub compare_chain: Option<Vec<String>>,
    pub frame_bytes: usize,
    pub frames_per_mode: usize,
    /// Bytes the streamed modes' publisher wrote between two received marks.
    pub stream_part_bytes: usize,
    pub clock_error_ns: u64,
    pub modes: Vec<ModeResult>,
    pub targets: Vec<TargetCheck>,
    /// Comparisons that are not targets (zero-copy against one copy, ablations).
    pub comparisons: Vec<String>,
    /// Registers, local (spill) and static shared memory of the kernels on the frame path.
    pub kernel_resources: Vec<String>,
    /// What the frame's bytes cost at best on this machine, measured in this run.
    pub floors: Floors,
    /// The bytes the chain moves per frame, that the floors are taken for.
    pub chain_bytes: ChainBytes,
    /// Each mode that ran the chain, its times as multiples of the chain's floors.
    pub floor_multiples: Vec<FloorMultiple>,
}

impl CompareReport {
    /// A fixed-width table of the modes and the targets.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{}\nchain {} | {} B frames | {} frames per mode | clock error ±{} ns\n",
            self.device,
            self.chain.join(" → "),
            self.frame_bytes,
            self.frames_per_mode,
            self.clock_error_ns
        );
        if let Some(other) = &self.compare_chain {
            s.push_str(&format!("compare chain {}\n", other.join(" → ")));
        }
        if self.modes.iter().any(|m| m.mode.contains("streamed")) {
            s.push_str(&format!(
                "streamed modes: the frame written and marked received {} B at a time\n",
                self.stream_part_bytes
            ));
        }
        s.push_str(&format!(
            "{:<38} {:>8} {:>8} {:>8} {:>8} {:>9}  {:>12} {:>9} {:>9} {:>9}\n",
            "mode (publish → result seen, µs)",
            "p50",
            "p90",
            "p99",
            "p99.9",
            "max",
            "idle loops/s",
            "idle busy",
            "gpu p50",
            "gpu p99.9"
        ));
        for m in &self.modes {
            s.push_str(&format!(
                "{:<38} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.2}  {:>12} {:>9} {:>9} {:>9}\n",
                m.mode,
                m.p50_us,
                m.p90_us,
                m.p99_us,
                m.p999_us,
                m.max_us,
                m.idle_loop_rate_hz.map_or("-".into(), |r| format!("{r:.0}")),
                m.idle_handler_busy.map_or("-".into(), |b| format!("{:.1}%", b * 100.0)),
                m.gpu_detect_to_done_p50_us.map_or("-".into(), |g| format!("{g:.2}")),
                m.gpu_detect_to_done_p999_us.map_or("-".into(), |g| format!("{g:.2}")),
            ));
        }
        for m in &self.modes {
            if let Some(marks) = &m.gpu_phase_p50_us {
                let marks: Vec<String> =
                    PHASE_MARKS.iter().zip(marks).map(|(m, us)| format!("{} {us:.2}", m.name)).collect();
                let mut read = m.gpu_slot_read_p50_kib.map_or(String::new(), |kib| {
                    format!("; read from the slot after the claim: p50 {kib:.1} KiB")
                });
                if let Some(mhz) = m.gpu_sm_clock_p50_mhz {
                    read.push_str(&format!("; SM clock p50 {mhz:.0} MHz"));
                }
                s.push_str(&format!(
                    "phases of {} (p50 µs after detection): {}{read}\n",
                    m.mode,
                    marks.join(", ")
                ));
            }
        }
        for row in self.floors.rows(self.chain_bytes, &self.floor_multiples) {
            s.push_str(&format!("{row}\n"));
        }
        for t in &self.targets {
            s.push_str(&format!("[{}] {}: {}\n", if t.met { "met" } else { "MISSED" }, t.target, t.measured));
        }
        for c in &self.comparisons {
            s.push_str(&format!("- {c}\n"));
        }
        s.push_str("gpu p50, p99.9: GPU time from detection to the published result (%globaltimer)\n");
        for k in &self.kernel_resources {
            s.push_str(&format!("kernel {k}\n"));
        }
        s
    }
}

/// The `q` quantile of ascending nanoseconds, in µs; `None` when empty.
fn quantile_us(sorted_ns: &[u64], q: f64) -> Option<f64> {
    quantile(sorted_ns, q).map(|ns| ns as f64 / 1000.0)
}

/// The value at quantile `q` of `sorted` (the rank `q * len`, rounded down), or `None` when empty.
fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    let last = sorted.len().checked_sub(1)?;
    Some(sorted[((q * sorted.len() as f64) as usize).min(last)])
}

fn percentiles(mode: &str, mut lat_ns: Vec<u64>, idle: Option<(f64, f64)>) -> ModeResult {
    lat_ns.sort_unstable();
    let p = |q: f64| quantile_us(&lat_ns, q).unwrap_or(0.0);
    ModeResult {
        mode: mode.to_string(),
        frames: lat_ns.len(),
        p50_us: p(0.5),
        p90_us: p(0.9),
        p99_us: p(0.99),
        p999_us: p(0.999),
        max_us: lat_ns.last().copied().unwrap_or(0) as f64 / 1000.0,
        idle_loop_rate_hz: idle.map(|i| i.0),
        idle_handler_busy: idle.map(|i| i.1),
        programmatic_edges: None,
        publish_in_last_kernel: None,
        gpu_detect_to_done_p50_us: None,
        gpu_detect_to_done_p999_us: None,
        gpu_phase_p50_us: None,
        gpu_slot_read_p50_kib: None,
        gpu_sm_clock_p50_mhz: None,
    }
}

fn busy_wait(ns: u64) {
    let until = monotonic_ns() + ns;
    while monotonic_ns() < until {
        std::hint::spin_loop();
    }
}

/// The chain of the config file `path` for [`CompareOptions::compare_chain`]:
/// loaded and checked like `frameloop validate` does (user kernels compiled
/// by NVRTC), its user kernel sources made relative to the file's directory.
pub fn load_compare_chain(path: &std::path::Path) -> Result<Vec<OpSpec>, GpuError> {
    let what = |e: String| GpuError::Setup(format!("--compare-chain {}: {e}", path.display()));
    let cfg = frameloop::config::load(path).map_err(|e| what(e.to_string()))?;
    let problems = frameloop::gpu::user::source::check_user_code(&cfg, path);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(what(list.join("; ")));
    }
    Ok(frameloop::gpu::user::kernel::with_sources_resolved(&cfg.chain, path))
}

struct ModeSpec {
    name: &'static str,
    style: LaunchStyle,
    cfg: LoopConfig,
    empty: bool,
    stage_markers: bool,
    controller: Option<ControllerPlacement>,
    payload: PayloadPath,
    programmatic_edges: bool,
    publish_from_last_kernel: bool,
    /// Run the chain fused into the handler's kernel.
    fused: bool,
    /// Run the chain as one tiled kernel across many blocks (claiming its
    /// own frames unless `claims` is false).
    tiled: bool,
    /// Run [`CompareOptions::compare_chain`] instead of the chain.
    compare_chain: bool,
    /// Publish frames part by part and stream them into device memory
    /// ([`publish_streamed`], `loop.stream_to_gpu`).
    streamed: bool,
    /// Let a tiled kernel claim its own frames (the loop body alone);
    /// false: `handler ; IF { tiled kernel }`.
    claims: bool,
}

fn run_mode(rt: &Arc<GpuRuntime>, o: &CompareOptions, m: &ModeSpec) -> Result<ModeResult, GpuError> {
    let rings =
        MappedRings::like_the_appliance(rt, 64, o.frame_bytes, 8192, OverrunPolicy::Every, o.huge_pages)?;
    rings.frames.take_reader_for_device();
    let chain: &[OpSpec] = match (m.empty, m.compare_chain, &o.compare_chain) {
        (true, _, _) => &[],
        (false, true, Some(other)) => other,
        (false, true, None) => {
            return Err(GpuError::Setup(format!("{}: no compare chain was given", m.name)));
        }
        (false, false, _) => &o.chain,
    };
    let mut opts = ExecutorOptions::new(m.cfg.clone());
    let fragment = if m.fused {
        opts.fused =
            Some(FusedChain::encode(chain, o.frame_bytes).map_err(|e| GpuError::Setup(e.to_string()))?);
        Fragment::new("main")
    } else if m.tiled {
        let encoded = FusedChain::encode(chain, o.frame_bytes).map_err(|e| GpuError::Setup(e.to_string()))?;
        let source = if m.streamed { FrameSource::DeviceMemory } else { FrameSource::MappedSlot };
        tiled_fragment(encoded, source).map_err(|e| GpuError::Setup(e.to_string()))?
    } else if m.empty {
        Fragment::new("empty")
    } else {
        chain_fragment_with(chain, o.frame_bytes, m.payload)?
    };
    let flags = chain_flags(chain);
    opts.style = m.style;
    opts.stage_markers = m.stage_markers;
    opts.controller = m.controller;
    opts.programmatic_edges = m.programmatic_edges;
    opts.publish_from_last_kernel = m.publish_from_last_kernel;
    opts.stream = m.streamed;
    opts.workload_claims_frames = m.claims;
    let mut ex = ResidentExecutor::new(
        Arc::clone(rt),
        fragment,
        Arc::clone(&rings.frames),
        Arc::clone(&rings.results),
        flags,
        opts,
    )?;
    let mut w = rings.frames.writer().ok_or_else(|| GpuError::Setup("ring writer taken".into()))?;
    ex.launch()?;
    let idle = if m.style == LaunchStyle::Resident {
        std::thread::sleep(Duration::from_millis(20));
        let (i0, h0, t0) = (ex.stats().iterations, ex.handler_busy_ns(), monotonic_ns());
        std::thread::sleep(Duration::from_millis(o.idle_ms));
        let (i1, h1, t1) = (ex.stats().iterations, ex.handler_busy_ns(), monotonic_ns());
        let secs = (t1 - t0) as f64 / 1e9;
        Some(((i1 - i0) as f64 / secs, (h1 - h0) as f64 / (t1 - t0) as f64))
    } else {
        None
    };
    let mut gaps = Rng(o.seed);
    let mut lat = Vec::with_capacity(o.frames);
    let head = Arc::clone(&rings.results);
    let mut reader = ResultReader::new(Arc::clone(&rings.results));
    let mut records = Vec::with_capacity(o.warmup + o.frames);
    for f in 0..(o.warmup + o.frames) as u64 {
        let (_, t0) = if m.streamed {
            publish_streamed(&mut w, o.seed, f, o.frame_bytes, o.stream_part_bytes)?
        } else {
            publish(&mut w, o.seed, f, o.frame_bytes)?
        };
        let want = f + 1;
        if m.style != LaunchStyle::Resident {
            ex.launch_one_frame()?;
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while head.head() < want {
            if Instant::now() > deadline {
                let why = match ex.poll() {
                    Some(Err(e)) => e.to_string(),
                    _ => "no result within 2 s".to_string(),
                };
                return Err(GpuError::Setup(format!("{}: frame {f}: {why}", m.name)));
            }
            std::hint::spin_loop();
        }
        let t1 = monotonic_ns();
        if m.style != LaunchStyle::Resident {
            ex.sync()?;
        }
        if f >= o.warmup as u64 {
            lat.push(t1 - t0);
        }
        reader.drain(&mut records);
        busy_wait((o.gap_us.0 + gaps.next_word() % (o.gap_us.1 - o.gap_us.0).max(1)) * 1000);
    }
    ex.tear_down()?;
    let mut r = percentiles(m.name, lat, idle);
    if m.style != LaunchStyle::StreamPerFrame {
        r.programmatic_edges = Some(ex.programmatic_edge_count());
    }
    r.publish_in_last_kernel = Some(ex.publishes_in_last_kernel());
    let mut gpu: Vec<u64> =
        records.iter().skip(o.warmup).map(|r| r.done_ns.saturating_sub(r.detect_ns)).collect();
    gpu.sort_unstable();
    r.gpu_detect_to_done_p50_us = quantile_us(&gpu, 0.5);
    r.gpu_detect_to_done_p999_us = quantile_us(&gpu, 0.999);
    if let Some(marks) = phase_marks_p50(records.get(o.warmup..).unwrap_or_default()) {
        r.gpu_phase_p50_us = Some(marks.times_us);
        r.gpu_slot_read_p50_kib = Some(marks.slot_read_kib);
        r.gpu_sm_clock_p50_mhz = marks.sm_clock_mhz;
    }
    Ok(r)
}

/// The persistent-kernel round trip: one thread echoes a host-written sequence.
fn run_floor(rt: &Arc<GpuRuntime>, o: &CompareOptions) -> Result<ModeResult, GpuError> {
    let mem = MappedMemory::alloc(&rt.ctx, 3 * 64)?;
    let word = |i: usize| -> &AtomicU64 {
        // SAFETY: three 64-byte lines, 8-aligned, alive for this function.
        unsafe { &*(mem.host_ptr().add(i * 64) as *const AtomicU64) }
    };
    let (mut inp, mut out, mut stop) = (mem.dptr(), mem.dptr() + 64, mem.dptr() + 128);
    let stream = rt.ctx.new_stream()?;
    let f = rt.library.function("fl_floor_echo")?;
    let mut args =
        [(&mut inp as *mut u64).cast(), (&mut out as *mut u64).cast(), (&mut stop as *mut u64).cast()];
    // SAFETY: three device pointers, matching fl_floor_echo.
    unsafe { driver::launch_raw(&stream, f, LaunchDims::SINGLE, &mut args)? };
    let mut gaps = Rng(o.seed);
    let mut lat = Vec::with_capacity(o.frames);
    let mut failed = None;
    for s in 1..=(o.warmup + o.frames) as u64 {
        let t0 = monotonic_ns();
        word(0).store(s, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(2);
        while word(1).load(Ordering::Acquire) != s {
            if Instant::now() > deadline {
                failed = Some(GpuError::Setup("floor kernel did not answer within 2 s".into()));
                break;
            }
        }
        if failed.is_some() {
            break;
        }
        if s > o.warmup as u64 {
            lat.push(monotonic_ns() - t0);
        }
        busy_wait((o.gap_us.0 + gaps.next_word() % (o.gap_us.1 - o.gap_us.0).max(1)) * 1000);
    }
    word(2).store(1, Ordering::Release);
    driver::stream_sync(&stream)?;
    match failed {
        Some(e) => Err(e),
        None => Ok(percentiles("floor: persistent kernel round trip", lat, None)),
    }
}

/// "name: R registers, L B local, S B shared" for the kernels on the frame path.
fn kernel_resources(rt: &GpuRuntime) -> Vec<String> {
    ["fl_ring_ready", "fl_fused_chain", "fl_fused_tiled", "fl_unpack_u16", "fl_fir", "fl_stats_threshold"]
        .iter()
        .map(|name| match rt.library.function(name) {
            Ok(f) => match (f.num_regs(), f.local_size_bytes(), f.shared_size_bytes()) {
                (Ok(r), Ok(l), Ok(sh)) => format!("{name}: {r} registers, {l} B local, {sh} B shared"),
                _ => format!("{name}: attributes unavailable"),
            },
            Err(e) => format!("{name}: {e}"),
        })
        .collect()
}

/// The operators `chain` runs as, in order (`unpack[0]`, `chain[1] kernel "fir5"`, ...).
fn operator_names(chain: &[OpSpec], frame_bytes: usize) -> Result<Vec<String>, GpuError> {
    let fragment = chain_fragment(chain, frame_bytes)?;
    let plan = fragment.plan().map_err(|e| GpuError::Setup(e.to_string()))?;
    Ok(plan.order().iter().filter_map(|&id| fragment.operator_name(id).map(str::to_string)).collect())
}

/// The mode that runs the chain as one tiled kernel (claiming its own frames).
const TILED_MODE: &str = "resident poll, tiled fused kernel";

/// One kernel per operator in the resident graph's IF body.
const IF_BODY_MODE: &str = "resident poll, graph IF body";

/// [`TILED_MODE`] on frames streamed into device memory while written.
const STREAMED_TILED_MODE: &str = "resident poll, streamed, tiled fused kernel";

/// [`STREAMED_TILED_MODE`] with the tiled kernel in an IF body after the
/// data-ready handler instead of claiming the frames itself.
const STREAMED_TILED_IF_MODE: &str = "resident poll, streamed, handler + IF { tiled kernel }";

/// [`IF_BODY_MODE`] on frames streamed into device memory while written.
const STREAMED_IF_BODY_MODE: &str = "resident poll, streamed, graph IF body";

/// A graph launched by the host for every frame.
const GRAPH_LAUNCH_MODE: &str = "graph-launch-per-frame";

/// The mode that runs [`CompareOptions::compare_chain`].
const COMPARE_CHAIN_MODE: &str = "resident poll, compare chain";

/// Runs every mode and checks the targets.
pub fn run_compare(o: &CompareOptions) -> Result<CompareReport, GpuError> {
    let rt = GpuRuntime::open(o.ordinal, o.cache.clone())?;
    let poll = LoopConfig {
        poll_budget_us: o.poll_budget_us,
        poll_interval_ns: o.poll_interval_ns,
        data_not_ready_sleep_interval_us: 0,
        timeout_ms: 0,
        sync_with_host: true,
        fused_chain: FusedChainMode::Off,
        stream_to_gpu: frameloop::config::StreamToGpu::Off,
        ..LoopConfig::default()
    };
    let sleep = |us| LoopConfig {
        poll_budget_us: 0,
        poll_interval_ns: 0,
        data_not_ready_sleep_interval_us: us,
        ..poll.clone()
    };
    let spec = |name, style, cfg: &LoopConfig, empty| ModeSpec {
        name,
        style,
        cfg: cfg.clone(),
        empty,
        stage_markers: false,
        controller: None,
        payload: PayloadPath::ZeroCopy,
        programmatic_edges: true,
        publish_from_last_kernel: true,
        fused: false,
        tiled: false,
        compare_chain: false,
        streamed: false,
        claims: true,
    };
    let resident = |name| spec(name, LaunchStyle::Resident, &poll, false);
    // The default mode runs what loop.fused_chain = "auto" picks.
    let limit = fused_shared_limit(&rt)?;
    let auto = plan_fusion(&o.chain, o.frame_bytes, FusedChainMode::Auto, false, limit);
    let large = choose_large(o.frame_bytes, MEASURED);
    // Whether the chain runs as one tiled kernel at all (built-in operators
    // only, halos that fit), for both frame sources; the tiled modes run only then.
    let tiled = tiled_plan(&o.chain, o.frame_bytes, limit);
    let default_mode = match &auto {
        Ok(_) => ModeSpec { fused: true, ..resident("resident poll budget, fused chain") },
        Err(NotFused::LargeFrames { .. }) if large.0 == LargePath::Tiled && tiled.is_ok() => {
            ModeSpec { tiled: true, ..resident("resident poll budget, auto: tiled fused kernel") }
        }
        Err(_) => resident("resident poll budget, auto: graph IF body"),
    };
    let mut modes = vec![
        default_mode,
        resident(IF_BODY_MODE),
        ModeSpec { tiled: true, ..resident(TILED_MODE) },
        ModeSpec { payload: PayloadPath::OneCopy, ..resident("resident poll, one copy (stage kernel)") },
        ModeSpec { programmatic_edges: false, ..resident("resident poll, plain edges") },
        ModeSpec { publish_from_last_kernel: false, ..resident("resident poll, end-marker node") },
        spec("resident sleep 100 µs (Holoscan)", LaunchStyle::Resident, &sleep(100), false),
        spec("resident sleep 500 µs (Holoscan)", LaunchStyle::Resident, &sleep(500), false),
        spec(GRAPH_LAUNCH_MODE, LaunchStyle::GraphPerFrame, &poll, false),
        spec("stream-launch-per-frame", LaunchStyle::StreamPerFrame, &poll, false),
        ModeSpec {
            fused: true,
            ..spec("resident EMPTY workload, fused", LaunchStyle::Resident, &poll, true)
        },
        spec("resident EMPTY workload, graph IF body", LaunchStyle::Resident, &poll, true),
        ModeSpec {
            controller: Some(ControllerPlacement::Before),
            ..spec("resident, controller before IF", LaunchStyle::Resident, &poll, false)
        },
        ModeSpec {
            stage_markers: true,
            ..spec("resident + stage markers", LaunchStyle::Resident, &poll, false)
        },
    ];
    if o.compare_chain.is_some() {
        modes.push(ModeSpec { compare_chain: true, ..resident(COMPARE_CHAIN_MODE) });
    }
    // Frames too large for the handler, or as large as loop.stream_to_gpu =
    // "auto" streams: both large-frame paths again, the frame streamed into
    // device memory while it is written.
    let streamed_large = choose_large(o.frame_bytes, STREAMED);
    if matches!(auto, Err(NotFused::LargeFrames { .. }))
        || o.frame_bytes >= frameloop::gpu::streaming::AUTO_MIN_SLOT_BYTES
    {
        modes.push(ModeSpec { streamed: true, tiled: true, ..resident(STREAMED_TILED_MODE) });
        modes.push(ModeSpec {
            streamed: true,
            tiled: true,
            claims: false,
            ..resident(STREAMED_TILED_IF_MODE)
        });
        modes.push(ModeSpec { streamed: true, ..resident(STREAMED_IF_BODY_MODE) });
    }
    if tiled.is_err() {
        modes.retain(|m| !m.tiled);
    }
    if o.paths_only {
        modes.retain(|m| {
            m.name.starts_with("resident poll budget")
                || [
                    IF_BODY_MODE,
                    TILED_MODE,
                    GRAPH_LAUNCH_MODE,
                    COMPARE_CHAIN_MODE,
                    STREAMED_TILED_MODE,
                    STREAMED_TILED_IF_MODE,
                    STREAMED_IF_BODY_MODE,
                ]
                .contains(&m.name)
        });
    }
    let mut results = vec![run_floor(&rt, o)?];
    for m in &modes {
        results.push(run_mode(&rt, o, m)?);
    }
    let by = |name: &str| results.iter().find(|r| r.mode.starts_with(name)).cloned();
    let floor = by("floor").expect("the floor ran first");
    let floors = super::floors::measure(&rt.ctx, o.frame_bytes, floor.p50_us)?;
    let bytes = chain_bytes(&o.chain, o.frame_bytes);
    // results[0] is the round-trip floor, then one result per mode; the empty workloads move no bytes.
    let floor_multiples = modes
        .iter()
        .zip(&results[1..])
        .filter(|(m, _)| !m.empty && !m.compare_chain)
        .map(|(_, r)| floors.multiple(&r.mode, r.p50_us, r.gpu_detect_to_done_p50_us, bytes))
        .collect();
    let res = by("resident poll budget").expect("the default mode always runs");
    let mut targets = vec![
        TargetCheck {
            target: "resident p50 <= 10 µs".into(),
            measured: format!("{:.2} µs", res.p50_us),
            met: res.p50_us <= 10.0,
        },
        TargetCheck {
            target: "resident p99.9 <= 15 µs".into(),
            measured: format!("{:.2} µs", res.p999_us),
            met: res.p999_us <= 15.0,
        },
    ];
    if let Some(graph) = by(GRAPH_LAUNCH_MODE) {
        targets.push(p999_against_graph_launch("resident", &res, &graph));
    }
    if let Some(s500) = by("resident sleep 500") {
        targets.push(TargetCheck {
            target: "resident p50 >= 30x lower than sleep 500 µs p50".into(),
            measured: format!("{:.1}x", s500.p50_us / res.p50_us),
            met: s500.p50_us >= 30.0 * res.p50_us,
        });
    }
    if let Some(empty) = by("resident EMPTY workload, fused") {
        targets.push(TargetCheck {
            target: "empty resident p50 within 2.5x of the floor".into(),
            measured: format!(
                "{:.2}x ({:.2} vs {:.2} µs)",
                empty.p50_us / floor.p50_us,
                empty.p50_us,
                floor.p50_us
            ),
            met: empty.p50_us <= 2.5 * floor.p50_us,
        });
    }
    // The large-frame targets, for frames the handler's shared memory cannot hold.
    if matches!(auto, Err(NotFused::LargeFrames { .. })) {
        targets.extend(large_frame_targets(&floors, bytes, &res, "auto's"));
        // The same targets for what auto runs when frames stream in (loop.stream_to_gpu).
        let streamed_mode = if streamed_large.0 == LargePath::Tiled && tiled.is_ok() {
            STREAMED_TILED_MODE
        } else {
            STREAMED_IF_BODY_MODE
        };
        if let Some(streamed) = by(streamed_mode) {
            targets.extend(large_frame_targets(&floors, bytes, &streamed, "streamed auto's"));
            if let Some(graph) = by(GRAPH_LAUNCH_MODE) {
                targets.push(p999_against_graph_launch("large frames: streamed auto's", &streamed, &graph));
            }
        }
    }
    let versus = |what: &str, base: &ModeResult, other: &ModeResult| {
        format!(
            "{what}: p50 {:.2} vs {:.2} µs, p99.9 {:.2} vs {:.2} µs ({} vs {})",
            base.p50_us, other.p50_us, base.p999_us, other.p999_us, base.mode, other.mode
        )
    };
    let pairs = [
        (
            "chain fused into the handler against one kernel per operator in the IF body",
            "resident poll budget",
            IF_BODY_MODE,
        ),
        (
            "one tiled kernel claiming its frames against one kernel per operator in the IF body",
            TILED_MODE,
            IF_BODY_MODE,
        ),
        (
            "streamed frames: one tiled kernel against one kernel per operator",
            STREAMED_TILED_MODE,
            STREAMED_IF_BODY_MODE,
        ),
        (
            "streamed frames, tiled kernel: claiming its own frames against handler + IF body",
            STREAMED_TILED_MODE,
            STREAMED_TILED_IF_MODE,
        ),
        (
            "tiled kernel: frame streamed into device memory against read in place",
            STREAMED_TILED_MODE,
            TILED_MODE,
        ),
        (
            "empty workload, fused handler against handler -> IF -> end marker",
            "resident EMPTY workload, fused",
            "resident EMPTY workload, graph IF body",
        ),
        (
            "zero-copy reads of the slot against one copy into device memory",
            IF_BODY_MODE,
            "resident poll, one copy",
        ),
        ("programmatic edges against plain edges", IF_BODY_MODE, "resident poll, plain edges"),
        (
            "result published by the last kernel against an end-marker node",
            IF_BODY_MODE,
            "resident poll, end-marker",
        ),
        ("the chain against the compare chain, both in the graph IF body", IF_BODY_MODE, COMPARE_CHAIN_MODE),
    ];
    let mut comparisons: Vec<String> =
        pairs.iter().filter_map(|(what, a, b)| Some(versus(what, &by(a)?, &by(b)?))).collect();
    if let Err(why) = &tiled {
        comparisons
            .insert(0, format!("the chain cannot run as one tiled kernel, so no tiled mode ran: {why}"));
    }
    match auto {
        Err(why @ NotFused::LargeFrames { .. }) if tiled.is_ok() => comparisons.insert(
            0,
            format!(
                "loop.fused_chain = \"auto\" does not fuse this chain into the handler: {why}; large frames: {:?} \
                 ({}); streamed: {:?} ({})",
                large.0, large.1, streamed_large.0, streamed_large.1
            ),
        ),
        Err(why) => comparisons.insert(
            0,
            format!("loop.fused_chain = \"auto\" does not fuse this chain into the handler: {why}; one kernel per operator"),
        ),
        Ok(_) => {}
    }
    Ok(CompareReport {
        device: rt.info.to_string(),
        chain: operator_names(&o.chain, o.frame_bytes)?,
        compare_chain: o.compare_chain.as_deref().map(|c| operator_names(c, o.frame_bytes)).transpose()?,
        frame_bytes: o.frame_bytes,
        frames_per_mode: o.frames,
        stream_part_bytes: o.stream_part_bytes,
        clock_error_ns: rt.clock().error_ns,
        modes: results,
        targets,
        comparisons,
        kernel_resources: kernel_resources(&rt),
        floors,
        chain_bytes: bytes,
        floor_multiples,
    })
}

/// Whether `chain` runs as one tiled kernel on frames of `frame_bytes`
/// with `shared_limit` bytes of shared memory per block, from the mapped
/// slot and from device memory; the reason when it does not.
fn tiled_plan(chain: &[OpSpec], frame_bytes: usize, shared_limit: usize) -> Result<(), NoTiledPlan> {
    let encoded = FusedChain::encode(chain, frame_bytes)?;
    for source in [FrameSource::MappedSlot, FrameSource::DeviceMemory] {
        plan_for(&encoded, shared_limit, source)?;
    }
    Ok(())
}

/// Why a chain has no tiled plan (so the tiled modes are not run).
#[derive(Debug, PartialEq, thiserror::Error)]
enum NoTiledPlan {
    #[error(transparent)]
    NotFused(#[from] NotFused),
    #[error(transparent)]
    NotTiled(#[from] frameloop::gpu::fused::tiled::NotTiled),
}

/// The target on `res`'s p99.9 against a graph launched per frame (at most 0.8x).
fn p999_against_graph_launch(target: &str, res: &ModeResult, graph: &ModeResult) -> TargetCheck {
    TargetCheck {
        target: format!("{target} p99.9 <= 0.8 x graph-launch-per-frame p99.9"),
        measured: format!(
            "{:.2} vs {:.2} µs ({:.2}x)",
            res.p999_us,
            graph.p999_us,
            res.p999_us / graph.p999_us
        ),
        met: res.p999_us <= 0.8 * graph.p999_us,
    }
}

/// The large-frame targets of `res` (a mode `loop.fused_chain = "auto"`
/// runs, named by `who`) against this run's floors: GPU time within 3x of the chain's
/// device-memory traffic at the device rate plus one round trip, and publish
/// to result within 1.3x of the payload at the host-to-device rate plus one
/// round trip.
fn large_frame_targets(floors: &Floors, bytes: ChainBytes, res: &ModeResult, who: &str) -> Vec<TargetCheck> {
    let mut targets = Vec::new();
    let device = floors.device_round_trip_floor_us(bytes);
    if let Some(gpu) = res.gpu_detect_to_done_p50_us.filter(|_| device > 0.0) {
        targets.push(TargetCheck {
            target: format!(
                "large frames: {who} gpu p50 <= 3 x (chain's device bytes at device bandwidth + round trip)"
            ),
            measured: format!("{gpu:.2} vs {device:.2} µs ({:.2}x)", gpu / device),
            met: gpu <= 3.0 * device,
        });
    }
    let link = floors.link_round_trip_floor_us(bytes);
    if link > 0.0 {
        targets.push(TargetCheck {
            target: format!("large frames: {who} p50 <= 1.3 x (frame at host→device bandwidth + round trip)"),
            measured: format!(
                "{:.2} vs {link:.2} µs ({:.2}x; against the frame copied right after it was written plus the \
                 round trip, {:.2} µs: {:.2}x)",
                res.p50_us,
                res.p50_us / link,
                floors.fresh_round_trip_floor_us(bytes),
                res.p50_us / floors.fresh_round_trip_floor_us(bytes)
            ),
            met: res.p50_us <= 1.3 * link,
        });
    }
    targets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiled_modes_run_only_for_chains_the_tiled_kernel_can_run() {
        let limit = 227 * 1024;
        assert_eq!(tiled_plan(&frameloop::ops::default_chain(), 2 << 20, limit), Ok(()));
        let wide = vec![
            OpSpec::Unpack { format: frameloop::ops::SampleFormat::U16, scale: 1.0, offset: 0.0 },
            OpSpec::Filter2d { width: 40_000, kernel: [0.1; 9] },
            OpSpec::Stats,
        ];
        let why = tiled_plan(&wide, 8 << 20, limit).unwrap_err().to_string();
        assert!(why.contains("filter2d rows") || why.contains("halo"), "{why}");
        let fft = frameloop::config::parse(
            "[[chain]]\nop = \"unpack\"\nformat = \"u16\"\n[[chain]]\nop = \"fft\"\nn = 1024\n",
        )
        .unwrap()
        .chain;
        assert!(tiled_plan(&fft, 2 << 20, limit).is_err(), "the fft has no place in a fused program");
    }

    #[test]
    fn the_user_default_chain_loads_with_its_sources_resolved() {
        if !frameloop::gpu::nvrtc_present() {
            eprintln!("skipped: NVRTC cannot be loaded (`. scripts/env.sh`)");
            return;
        }
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/configs");
        let chain = load_compare_chain(&dir.join("user-default-chain.toml")).unwrap();
        let entries: Vec<(&str, bool)> = chain
            .iter()
            .filter_map(|op| match op {
                OpSpec::Kernel(k) => Some((k.entry.as_str(), k.source.is_file())),
                _ => None,
            })
            .collect();
        assert_eq!(entries, [("fir5", true), ("stats_threshold", true)]);
        assert_eq!(
            operator_names(&chain, 8192).unwrap(),
            ["unpack[0]", "chain[1] kernel \"fir5\"", "chain[2] kernel \"stats_threshold\""]
        );
        let err = load_compare_chain(&dir.join("no-such.toml")).unwrap_err().to_string();
        assert!(err.contains("--compare-chain") && err.contains("no-such.toml"), "{err}");
    }

    #[test]
    fn phase_marks_are_reported_only_when_results_carry_them() {
        let plain = frameloop::ring::ResultRecord::default();
        assert_eq!(phase_marks_p50(&[plain; 3]), None, "built-in kernels leave the words zero");
        let marked: Vec<_> = [1_000u32, 3_000, 2_000]
            .iter()
            .map(|&ns| {
                let mut r = frameloop::ring::ResultRecord::default();
                for m in &PHASE_MARKS {
                    r.user[m.word] = ns * (m.word as u32 + 1);
                }
                r.user[SLOT_BYTES_MARK.word] = ns * 64;
                r
            })
            .collect();
        let marks = phase_marks_p50(&marked).expect("marks");
        let (p50, kib) = (marks.times_us, marks.slot_read_kib);
        assert_eq!(p50.len(), PHASE_MARKS.len());
        for (m, us) in PHASE_MARKS.iter().zip(&p50) {
            let (w, name) = (m.word, m.name);
            assert!((us - 2.0 * (w + 1) as f64).abs() < 0.01, "word {w} ({name}): {us}");
        }
        assert!((kib - 125.0).abs() < 0.01, "2,000 x 64 bytes: {kib} KiB");
    }

    #[test]
    fn large_frame_targets_are_ratios_against_the_runs_floors() {
        let floors = Floors {
            host_to_device_bytes_per_s: 50e9,
            frame_copy_us: 3.0,
            fresh_frame_copy_us: 4.5,
            device_bytes_per_s: 4e12,
            round_trip_p50_us: 4.0,
        };
        // 20 µs over the link, 2 µs of device traffic: floors of 6 µs (GPU) and 24 µs (end to end).
        let bytes = ChainBytes { host_to_device: 1_000_000, device: 8_000_000 };
        let mut res = percentiles("auto", vec![31_000; 10], None);
        res.gpu_detect_to_done_p50_us = Some(17.9);
        let t = large_frame_targets(&floors, bytes, &res, "auto's");
        assert_eq!(t.len(), 2);
        assert!(t[0].met && t[0].measured.contains("17.90 vs 6.00 µs (2.98x)"), "{:?}", t[0]);
        assert!(t[1].met && t[1].measured.contains("31.00 vs 24.00 µs (1.29x;"), "{:?}", t[1]);
        assert!(t[1].measured.contains("8.50 µs: 3.65x"), "{:?}", t[1]);
        let mut slow = percentiles("auto", vec![32_000; 10], None);
        slow.gpu_detect_to_done_p50_us = Some(18.1);
        assert!(large_frame_targets(&floors, bytes, &slow, "auto's").iter().all(|t| !t.met));
        // No GPU time recorded: only the end-to-end ratio.
        slow.gpu_detect_to_done_p50_us = None;
        assert_eq!(large_frame_targets(&floors, bytes, &slow, "auto's").len(), 1);
    }
}
