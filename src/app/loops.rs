//! Several resident loops in one appliance (`[[loop]]`): where each loop
//! runs ([`plan_loops`]: its GPU, NUMA node and CPUs), the set of running
//! loops ([`LoopSet`]: one [`Appliance`] each, started bound to its node,
//! watched so that a loop whose stage stops is marked down while the others
//! keep serving; loops on one UDP port fed by one receiver that routes each
//! its streams) and `frameloop run` over them.

use super::numa::bind_current_thread;
use super::{AppError, Appliance, Report, RunArgs, StartOptions};
use crate::config::loops::{GpuChoice, gpu_problems, loop_config, per_loop_path, port_groups};
use crate::config::{Config, ConfigError};
use crate::ingest::{Reassembler, Route, Transport};
use crate::metrics::ResultCallback;
use crate::service::{LoopMetrics, MetricsSnapshot};
use crate::topology::{CpuList, InterfaceAddrs, StreamRequest, Topology, place};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where one loop runs, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LoopPlan {
    /// The loop's name.
    pub name: String,
    /// The CUDA ordinal of its GPU (`None` on the host backend).
    pub gpu: Option<usize>,
    /// The NUMA node its ring memory is preferred on.
    pub numa_node: Option<u32>,
    /// The CPUs its threads run on (`None`: wherever the process may run).
    pub cpus: Option<CpuList>,
    /// One line for the log.
    pub reason: String,
}

/// Plans every loop of `cfg`: on the host backend (`cuda` false) each loop
/// keeps its own `cpus`, if any; on the CUDA backend `gpu = N` is checked
/// against the GPUs of `topology` and `placement = "auto"` takes the GPU
/// closest to the NIC owning the loop's bind address (`interfaces`), ties
/// going to the GPU with the fewest loops; a loop's threads then run on its
/// GPU's NUMA node unless it sets `cpus`.
pub fn plan_loops(
    cfg: &Config,
    cuda: bool,
    topology: &Topology,
    interfaces: &[InterfaceAddrs],
) -> Result<Vec<LoopPlan>, AppError> {
    if !cuda {
        return Ok(cfg
            .loops
            .iter()
            .map(|spec| LoopPlan {
                name: spec.name.clone(),
                gpu: None,
                numa_node: None,
                cpus: spec.cpus.clone(),
                reason: format!(
                    "loop {} (udp {}) -> host backend{}",
                    spec.name,
                    spec.ingest.bind,
                    spec.cpus.as_ref().map_or_else(String::new, |c| format!(", CPUs {c}"))
                ),
            })
            .collect());
    }
    if topology.gpus.is_empty() {
        // CUDA works but sysfs lists no NVIDIA device (a container without
        // the host's /sys): the ordinals are checked when each GPU is opened.
        return Ok(cfg
            .loops
            .iter()
            .map(|spec| {
                let (gpu, why) = match spec.gpu {
                    GpuChoice::Ordinal(n) => (n, format!("set by `gpu = {n}`")),
                    GpuChoice::Auto => (0, "sysfs shows no GPU, so nothing to place by: GPU 0".to_string()),
                };
                LoopPlan {
                    name: spec.name.clone(),
                    gpu: Some(gpu),
                    numa_node: None,
                    cpus: spec.cpus.clone(),
                    reason: format!("loop {} (udp {}) -> GPU {gpu}: {why}", spec.name, spec.ingest.bind),
                }
            })
            .collect());
    }
    let problems = gpu_problems(&cfg.loops, topology.gpus.len());
    if !problems.is_empty() {
        return Err(ConfigError::Invalid(problems).into());
    }
    let requests: Vec<StreamRequest> = cfg
        .loops
        .iter()
        .enumerate()
        .map(|(id, spec)| StreamRequest {
            id,
            description: format!("loop {}: udp {}", spec.name, spec.ingest.bind),
            bind: spec
                .ingest
                .bind
                .parse::<SocketAddr>()
                .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| a.ip()),
            gpu: match spec.gpu {
                GpuChoice::Ordinal(n) => Some(n),
                GpuChoice::Auto => None,
            },
        })
        .collect();
    let placed = place(topology, interfaces, &requests)?;
    Ok(cfg
        .loops
        .iter()
        .zip(placed)
        .map(|(spec, p)| LoopPlan {
            name: spec.name.clone(),
            gpu: Some(p.gpu),
            numa_node: p.numa_node,
            cpus: spec.cpus.clone().or(p.cpus),
            reason: p.reason,
        })
        .collect())
}

/// One line on a configured loop, for `frameloop validate`.
pub(super) fn describe(spec: &crate::config::loops::LoopSpec) -> String {
    let gpu = match spec.gpu {
        GpuChoice::Ordinal(n) => format!("GPU {n}"),
        GpuChoice::Auto => "GPU by placement".to_string(),
    };
    format!(
        "loop {}: udp {}, streams {:?}, {gpu}, {} slots of {} bytes, chain: {}",
        spec.name,
        spec.ingest.bind,
        spec.streams,
        spec.ring.slots,
        spec.ring.slot_bytes,
        spec.chain.iter().map(|o| o.name()).collect::<Vec<_>>().join(" -> ")
    )
}

/// One running loop.
struct RunningLoop {
    plan: LoopPlan,
    streams: Vec<u32>,
    app: Appliance,
    /// Why the loop is down, once it is.
    down: Option<String>,
}

/// The one receiver of a UDP port that several loops share.
struct SharedPort {
    /// The loops it feeds (indices into `LoopSet::loops`), in config order.
    members: Vec<usize>,
    local_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Invariant: `Some` until [`SharedPort::stop`] joins it.
    thread: Option<JoinHandle<Result<(), super::receivers::ReceiverError>>>,
    /// Its loops were marked down for it.
    down: bool,
}

impl SharedPort {
    /// Binds the receiver of the loops `members` (the first one's
    /// `[ingest]` socket keys, on the first one's CPUs and NUMA node), each
    /// loop's reassembler writing its own ring with the streams it lists.
    fn start(cfg: &Config, loops: &mut [RunningLoop], members: Vec<usize>) -> Result<Self, AppError> {
        let first = &cfg.loops[members[0]];
        let mut routes = Vec::with_capacity(members.len());
        let mut counters = None;
        for &i in &members {
            let (writer, c) = loops[i].app.take_ring_writer().ok_or(AppError::WriterTaken)?;
            counters.get_or_insert_with(|| Arc::clone(&c));
            let reassembly = cfg.loops[i].ingest.reassembly.clone();
            routes.push(Route {
                streams: cfg.loops[i].streams.clone(),
                assembler: Reassembler::new(reassembly, writer, c),
            });
        }
        let counters = counters.ok_or(AppError::WriterTaken)?;
        let stop = Arc::new(AtomicBool::new(false));
        let parts = {
            let plan = &loops[members[0]].plan;
            let _bound = bind_current_thread(&first.name, plan.cpus.as_ref(), plan.numa_node);
            super::receivers::start_shared_udp(&loop_config(cfg, first), routes, &counters, &stop)?
        };
        for &i in &members {
            let l = &mut loops[i];
            l.app.set_shared_receiver(parts.local_addr, parts.gro_active);
            tracing::info!(
                loop_name = %l.plan.name,
                "loop {} serving on {} (port shared with {} loops: streams {:?})",
                l.plan.name,
                parts.local_addr,
                members.len(),
                l.streams
            );
        }
        Ok(Self { members, local_addr: parts.local_addr, stop, thread: Some(parts.thread), down: false })
    }

    /// Whether its receiver stopped by itself.
    fn stopped(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops the receiver (it publishes what it holds into each loop's
    /// ring) within `timeout`; logs how it ended.
    fn stop(&mut self, timeout: Duration) {
        self.stop.store(true, Ordering::Release);
        let Some(thread) = self.thread.take() else { return };
        match crate::service::bounded::join_by(thread, Instant::now() + timeout) {
            Some(Ok(Ok(()))) => {}
            Some(Ok(Err(e))) => {
                tracing::error!("the receiver of {} stopped with an error: {e}", self.local_addr)
            }
            Some(Err(_)) => tracing::error!("the receiver thread of {} panicked", self.local_addr),
            None => tracing::error!(
                "the receiver of {} did not stop within {timeout:?}; left behind",
                self.local_addr
            ),
        }
    }
}

/// The loops of one appliance, each serving its own streams.
pub struct LoopSet {
    loops: Vec<RunningLoop>,
    /// The receivers of ports several loops share.
    ports: Vec<SharedPort>,
    /// `service.shutdown_timeout_ms`: the bound on stopping a shared port's receiver.
    shutdown_timeout: Duration,
}

/// How one loop ended.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoopOutcome {
    /// The loop as planned (name, GPU, CPUs).
    pub plan: LoopPlan,
    /// The stream ids it took.
    pub streams: Vec<u32>,
    /// Why the loop went down before the stop, if it did.
    pub down: Option<String>,
    /// Its report, unless stopping it failed (`stop_error` says why).
    pub report: Option<Report>,
    /// Why stopping the loop failed, if it did.
    pub stop_error: Option<String>,
}

/// What `frameloop run` reports for several loops.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoopsReport {
    /// Each loop's outcome, in config order.
    pub loops: Vec<LoopOutcome>,
}

impl LoopsReport {
    /// The loops that went down, each with why (empty when all kept running).
    pub fn down(&self) -> Vec<String> {
        self.loops
            .iter()
            .filter_map(|l| {
                let why = l.down.as_ref().or(l.stop_error.as_ref())?;
                Some(format!("loop {} ({why})", l.plan.name))
            })
            .collect()
    }

    /// One section per loop: where it ran, whether it stayed up, its report.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for l in &self.loops {
            let state = match (&l.down, &l.stop_error) {
                (Some(why), _) => format!("DOWN: {why}"),
                (None, Some(e)) => format!("stop failed: {e}"),
                (None, None) => "up".to_string(),
            };
            let streams = l.streams.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
            out.push_str(&format!(
                "=== loop {} [{state}] streams [{streams}]\n{}\n",
                l.plan.name, l.plan.reason
            ));
            if let Some(r) = &l.report {
                out.push_str(&r.render());
            }
            out.push('\n');
        }
        out
    }
}

impl LoopSet {
    /// Starts one appliance per loop of `cfg`, in `plans`' order, each
    /// started from this thread bound to the loop's CPUs and NUMA node (its
    /// threads and ring memory follow). `histogram_log` (else
    /// `metrics.histogram_log`) is split per loop (`latency.cam0.hlog`);
    /// `on_result` gives each loop, by name, its result callback. Loops on
    /// one port ([`port_groups`]) get one receiver, bound once all are
    /// built. If a loop cannot start, the ones started are stopped and the
    /// error names it.
    pub fn start(
        cfg: &Config,
        plans: Vec<LoopPlan>,
        histogram_log: Option<&Path>,
        mut on_result: impl FnMut(&str) -> Option<ResultCallback>,
    ) -> Result<Self, AppError> {
        debug_assert_eq!(plans.len(), cfg.loops.len());
        let groups = port_groups(&cfg.loops);
        let mut loops: Vec<RunningLoop> = Vec::with_capacity(plans.len());
        for (i, (spec, plan)) in cfg.loops.iter().zip(plans).enumerate() {
            tracing::info!("{}", plan.reason);
            let shared_port = groups.iter().any(|g| g.contains(&i));
            let mut one = loop_config(cfg, spec);
            if shared_port {
                // Validation refused `rdma`; `auto` means UDP on a shared port.
                one.ingest.transport = Transport::Udp;
            }
            let opts = StartOptions {
                histogram_log: histogram_log.map(|p| per_loop_path(p, &spec.name)),
                on_result: on_result(&spec.name),
                defer_launch: true,
                shared_port,
                user_stage: None,
            };
            let started = {
                let _bound = bind_current_thread(&spec.name, plan.cpus.as_ref(), plan.numa_node);
                Appliance::start_on_gpu(&one, opts, None, plan.gpu.unwrap_or(0))
            };
            match started {
                Ok(app) => {
                    if !shared_port {
                        tracing::info!(loop_name = %spec.name, "loop {} serving on {}", spec.name, app.local_addr());
                    }
                    loops.push(RunningLoop { plan, streams: spec.streams.clone(), app, down: None });
                }
                Err(e) => {
                    for l in loops {
                        let _ = l.app.stop();
                    }
                    return Err(AppError::LoopStart { name: spec.name.clone(), source: Box::new(e) });
                }
            }
        }
        let shutdown_timeout = cfg.service.shutdown_timeout();
        let mut set = Self { loops, ports: Vec::with_capacity(groups.len()), shutdown_timeout };
        for members in groups {
            let name = set.loops[members[0]].plan.name.clone();
            match SharedPort::start(cfg, &mut set.loops, members) {
                Ok(port) => set.ports.push(port),
                Err(e) => {
                    set.abandon();
                    return Err(AppError::LoopStart { name, source: Box::new(e) });
                }
            }
        }
        // Every loop is built: now they may run (see StartOptions::defer_launch).
        for i in 0..set.loops.len() {
            if let Err(e) = set.loops[i].app.launch() {
                let name = set.loops[i].plan.name.clone();
                set.abandon();
                return Err(AppError::LoopStart { name, source: Box::new(e) });
            }
        }
        Ok(set)
    }

    /// Stops what a failed start had started, reporting nothing.
    fn abandon(mut self) {
        for port in &mut self.ports {
            port.stop(self.shutdown_timeout);
        }
        for l in self.loops {
            let _ = l.app.stop();
        }
    }

    /// The address of the shared port that loop `name` is on, if it is on one.
    pub fn shared_port_of(&self, name: &str) -> Option<SocketAddr> {
        let i = self.loops.iter().position(|l| l.plan.name == name)?;
        self.ports.iter().find(|p| p.members.contains(&i)).map(|p| p.local_addr)
    }

    /// The loops' names, in config order.
    pub fn names(&self) -> Vec<&str> {
        self.loops.iter().map(|l| l.plan.name.as_str()).collect()
    }

    /// The running appliance of loop `name`.
    pub fn appliance(&self, name: &str) -> Option<&Appliance> {
        self.loops.iter().find(|l| l.plan.name == name).map(|l| &l.app)
    }

    /// Looks at every loop that is still up: one whose receiver, resident
    /// loop or result thread stopped by itself is marked down (logged once,
    /// with its streams). Returns the loops that went down in this call.
    pub fn check(&mut self) -> Vec<String> {
        let mut newly = Vec::new();
        for port in self.ports.iter_mut().filter(|p| !p.down && p.stopped()) {
            port.down = true;
            for &i in &port.members {
                let l = &mut self.loops[i];
                if l.down.is_some() {
                    continue;
                }
                let why = format!("the receiver of its shared port {} stopped", port.local_addr);
                tracing::error!(
                    loop_name = %l.plan.name,
                    "loop {} is down: {why}; its streams {:?} are not served; the loops on other ports keep \
                     running (the process exits non-zero at stop)",
                    l.plan.name,
                    l.streams
                );
                l.down = Some(why);
                newly.push(l.plan.name.clone());
            }
        }
        for l in self.loops.iter_mut().filter(|l| l.down.is_none()) {
            if let Some(stage) = l.app.stopped_stage() {
                let why = format!("its {stage} stopped");
                tracing::error!(
                    loop_name = %l.plan.name,
                    "loop {} is down: {why}; its streams {:?} are not served; the other loops keep running \
                     (the process exits non-zero at stop)",
                    l.plan.name,
                    l.streams
                );
                l.down = Some(why);
                newly.push(l.plan.name.clone());
            }
        }
        newly
    }

    /// Whether every loop is down.
    pub fn all_down(&self) -> bool {
        self.loops.iter().all(|l| l.down.is_some())
    }

    /// Resident-loop iterations of the loops that are up, summed: keeps
    /// moving while any loop serves.
    pub fn iterations(&self) -> u64 {
        self.loops.iter().filter(|l| l.down.is_none()).map(|l| l.app.loop_stats().iterations).sum()
    }

    /// Re-measures each running loop's GPU clock offset.
    pub fn recalibrate_clocks(&mut self) {
        for l in self.loops.iter_mut().filter(|l| l.down.is_none()) {
            if let Err(e) = l.app.recalibrate_clock() {
                tracing::warn!("loop {}: GPU clock recalibration failed: {e}", l.plan.name);
            }
        }
    }

    /// Every loop's metrics, labelled by loop.
    pub fn metrics_snapshot(&self) -> MetricsSnapshot {
        let loops: Vec<LoopMetrics> = self
            .loops
            .iter()
            .map(|l| LoopMetrics {
                name: l.plan.name.clone(),
                gpu: l.plan.gpu,
                up: l.down.is_none(),
                streams: l.streams.clone(),
                snapshot: l.app.metrics_snapshot(),
            })
            .collect();
        let backend = loops.first().map_or_else(String::new, |l| l.snapshot.backend.clone());
        MetricsSnapshot { backend, loops, ..Default::default() }
    }

    /// One progress line: each loop's, after its name.
    pub fn progress_line(&self) -> String {
        self.loops
            .iter()
            .map(|l| {
                let state = if l.down.is_some() { " DOWN" } else { "" };
                format!("{}{state}: {}", l.plan.name, l.app.progress_line().trim())
            })
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// Stops every loop (each finishing the frames in its ring) and reports.
    pub fn stop(mut self) -> LoopsReport {
        self.check();
        // The shared ports' receivers first: they publish what they hold
        // into the rings, which each loop then finishes.
        for port in &mut self.ports {
            port.stop(self.shutdown_timeout);
        }
        // All loops stop at once: loops sharing a GPU share its context, and
        // freeing one loop's device memory waits for every graph running in
        // that context, so no loop may wait for another to be stopped first.
        let loops = std::thread::scope(|scope| {
            let stopping: Vec<_> =
                self.loops.into_iter().map(|l| scope.spawn(move || Self::stop_loop(l))).collect();
            stopping.into_iter().map(|h| h.join().expect("stop_loop catches panics")).collect()
        });
        LoopsReport { loops }
    }

    /// Stops one loop and makes its outcome.
    fn stop_loop(l: RunningLoop) -> LoopOutcome {
        // Stopping drains the last results through the loop's result
        // callback on this thread; one that panicked on the loop's
        // own thread may panic here too, and must not take the
        // other loops' reports with it.
        let app = l.app;
        let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || app.stop()));
        let (report, stop_error) = match stopped {
            Ok(Ok(r)) => (Some(r), None),
            Ok(Err(e)) => {
                tracing::error!("loop {}: {e}", l.plan.name);
                (None, Some(e.to_string()))
            }
            Err(_) => (None, Some("stopping it panicked (see the log above)".to_string())),
        };
        LoopOutcome { plan: l.plan, streams: l.streams, down: l.down, report, stop_error }
    }
}

/// With `FRAMELOOP_TEST_PANIC_THREAD=result@NAME`, loop NAME's result
/// thread panics at its first result: lets tests take one loop of the real
/// binary down while the others run.
fn test_panic_callback(name: &str) -> Option<ResultCallback> {
    let wanted = std::env::var(crate::service::thread_failure::TEST_PANIC_ENV).ok()?;
    (wanted == format!("result@{name}")).then(|| {
        let name = name.to_string();
        Box::new(move |_: &crate::ring::ResultRecord| requested_panic(&wanted, &name)) as ResultCallback
    })
}

fn requested_panic(wanted: &str, name: &str) {
    panic!("{wanted}: test-requested panic of loop {name}'s result thread")
}

/// `frameloop run` with `[[loop]]` tables: plans and starts the loops, serves
/// until a signal (or `--duration`, or every loop down), then stops them all
/// and reports each. A loop that went down makes the exit status non-zero.
pub(super) fn run_loops(args: &RunArgs, cfg: &Config) -> Result<(), AppError> {
    use crate::service::{MetricsBoard, Notifier, ProgressSource, WatchdogPinger};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    if args.record.is_some() {
        return Err(AppError::Unsupported(
            "--record captures one receiver; with [[loop]] tables record with tcpdump, or run one loop"
                .into(),
        ));
    }
    let pick = super::pick_backend(cfg.backend)?;
    let cuda = pick.backend == crate::backend::Backend::Cuda;
    let (topology, interfaces) = if cuda {
        let topology = Topology::read(Path::new("/sys"))?;
        let interfaces = crate::topology::interface_addresses()?;
        if topology.gpus.len() > 1 && std::env::var("CUDA_DEVICE_ORDER").as_deref() != Ok("PCI_BUS_ID") {
            tracing::warn!(
                "GPUs are numbered in PCI address order (`frameloop topology`); set CUDA_DEVICE_ORDER=PCI_BUS_ID \
                 so that CUDA numbers them the same way"
            );
        }
        (topology, interfaces)
    } else {
        (Topology { gpus: Vec::new(), nics: Vec::new(), numa_nodes: Vec::new() }, Vec::new())
    };
    let plans = plan_loops(cfg, cuda, &topology, &interfaces)?;
    crate::service::thread_failure::install();
    super::signals::install().map_err(AppError::Signals)?;
    let notifier = Notifier::from_env().map(Arc::new);
    let base_log = args.histogram_log.clone().or_else(|| cfg.metrics.histogram_log.clone());
    // The per-loop configs name their logs from metrics.histogram_log; a
    // command-line log overrides it the same way.
    let mut set = LoopSet::start(cfg, plans, args.histogram_log.as_deref(), test_panic_callback)?;
    if let Some(p) = &base_log {
        tracing::info!("histogram logs per loop: {}", per_loop_path(p, "<loop>").display());
    }
    let pid_file = args.pid_file.as_deref().map(crate::service::PidFile::create).transpose()?;

    let board = MetricsBoard::new();
    let snapshot = set.metrics_snapshot();
    let facts = crate::web::ApplianceFacts {
        version: env!("CARGO_PKG_VERSION").to_string(),
        backend: pick.name().to_string(),
        backend_reason: pick.reason.clone(),
        gpu: cuda.then(|| pick.reason.clone()),
        listen: String::new(),
        loops: snapshot
            .loops
            .iter()
            .map(|l| crate::web::facts::LoopFacts {
                name: l.name.clone(),
                gpu: l.gpu,
                streams: l.streams.clone(),
            })
            .collect(),
        chain: cfg.chain.iter().map(|op| op.name().to_string()).collect(),
        config_path: args.config.as_ref().map(|p| p.display().to_string()),
        started: Some(Instant::now()),
    };
    board.publish(snapshot);
    let server = super::live_view::start_endpoint(cfg, &board, facts, None)?;
    if let Some(s) = &server {
        tracing::info!("metrics on http://{}/metrics", s.local_addr());
    }
    let iterations = Arc::new(AtomicU64::new(set.iterations()));
    let pinger = notifier.as_ref().and_then(|n| {
        n.ready(&format!("serving {} loops ({} backend)", set.names().len(), pick.name()));
        let it = Arc::clone(&iterations);
        WatchdogPinger::start(
            Arc::clone(n),
            vec![ProgressSource::new("resident loops", move || it.load(Ordering::Relaxed))],
        )
    });

    let started = Instant::now();
    let limit = args.duration.map(Duration::from_secs_f64);
    let mut chores = super::chores::Chores::new(notifier.as_deref());
    let stop = super::signals::stop_flag();
    while !stop.load(Ordering::Acquire) {
        if limit.is_some_and(|l| started.elapsed() >= l) {
            break;
        }
        if !set.check().is_empty() {
            board.publish(set.metrics_snapshot());
        }
        if set.all_down() {
            tracing::error!("every loop is down; shutting down");
            break;
        }
        iterations.store(set.iterations(), Ordering::Relaxed);
        if chores.calibration_due() {
            set.recalibrate_clocks();
        }
        chores.publish_if_due(&board, || set.metrics_snapshot());
        chores.show_progress(|| set.progress_line());
        std::thread::sleep(Duration::from_millis(20));
    }
    chores.finish(notifier.as_deref(), pinger);
    match super::signals::last_signal() {
        Some(sig) => tracing::info!("received {sig}; stopping"),
        None => tracing::info!("stopping"),
    }
    let report = set.stop();
    if let Some(s) = server {
        s.stop();
    }
    drop(pid_file);
    tracing::info!("summary\n{}", report.render());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        print!("{}", report.render());
    }
    let down = report.down();
    if !down.is_empty() {
        return Err(AppError::LoopsDown { loops: down.join(", ") });
    }
    let lost: u64 = report.loops.iter().filter_map(|l| l.report.as_ref()).map(Report::log_records_lost).sum();
    if lost > 0 && cfg.metrics.fail_on_log_loss {
        return Err(AppError::LogsLost { lost });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use crate::topology::InterfaceAddrs;
    use std::path::PathBuf;

    fn fixture(name: &str) -> Topology {
        Topology::read(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs").join(name))
            .unwrap()
    }

    fn iface(name: &str, address: &str) -> InterfaceAddrs {
        InterfaceAddrs { interface: name.into(), addresses: vec![address.parse().unwrap()] }
    }

    fn loops(binds: &[(&str, &str)]) -> Config {
        let mut text = String::from("backend = \"cuda\"\n");
        for (i, (bind, extra)) in binds.iter().enumerate() {
            text.push_str(&format!("[[loop]]\nname = \"l{i}\"\n{extra}\n[loop.ingest]\nbind = \"{bind}\"\n"));
        }
        parse(&text).unwrap()
    }

    #[test]
    fn two_socket_loops_go_to_their_nics_gpu_and_node() {
        let topo = fixture("two-socket");
        let interfaces = [iface("enp4s0f0np0", "10.0.0.1"), iface("enp132s0f0np0", "10.0.1.1")];
        let cfg =
            loops(&[("10.0.1.1:5000", ""), ("10.0.0.1:5000", ""), ("10.0.1.1:5001", "cpus = \"20-21\"")]);
        let plans = plan_loops(&cfg, true, &topo, &interfaces).unwrap();
        assert_eq!(plans.iter().map(|p| p.gpu).collect::<Vec<_>>(), [Some(1), Some(0), Some(1)]);
        assert_eq!(plans.iter().map(|p| p.numa_node).collect::<Vec<_>>(), [Some(1), Some(0), Some(1)]);
        assert_eq!(plans[0].cpus.as_ref().unwrap().to_string(), "16-31,48-63");
        assert_eq!(plans[1].cpus.as_ref().unwrap().to_string(), "0-15,32-47");
        // A loop's own cpus win over its node's.
        assert_eq!(plans[2].cpus.as_ref().unwrap().to_string(), "20-21");
        assert!(
            plans[0].reason.starts_with("stream 0 (loop l0: udp 10.0.1.1:5000 on enp132s0f0np0) -> GPU 1")
        );
        assert!(plans[0].reason.ends_with("same PCIe switch"), "{}", plans[0].reason);
    }

    #[test]
    fn loops_on_equally_close_gpus_are_spread_by_load_around_pinned_ones() {
        let topo = fixture("split-roots");
        let interfaces = [iface("enp65s0f0", "10.1.0.1")];
        let cfg = loops(&[
            ("10.1.0.1:5000", "gpu = 0"),
            ("10.1.0.1:5001", ""),
            ("10.1.0.1:5002", ""),
            ("10.1.0.1:5003", "placement = \"auto\""),
        ]);
        let plans = plan_loops(&cfg, true, &topo, &interfaces).unwrap();
        // GPU 0 holds the pinned loop, so the first automatic one takes GPU 1.
        assert_eq!(plans.iter().map(|p| p.gpu).collect::<Vec<_>>(), [Some(0), Some(1), Some(0), Some(1)]);
        assert!(plans[1].reason.contains("least loaded of 2 (0 streams before)"), "{}", plans[1].reason);
        assert!(plans[0].reason.contains("set by `gpu = 0`"), "{}", plans[0].reason);
    }

    #[test]
    fn a_gpu_past_the_machine_is_a_config_problem_naming_the_loop_where_sysfs_lists_gpus() {
        let topo = fixture("split-roots");
        let cfg = loops(&[("0.0.0.0:5000", ""), ("0.0.0.0:5001", "gpu = 3")]);
        let err = plan_loops(&cfg, true, &topo, &[]).unwrap_err();
        assert!(
            err.to_string().contains("loop[1].gpu: GPU 3 does not exist on this machine (2 GPUs)"),
            "{err}"
        );
        // A tree without GPUs (CUDA in a container without the host's
        // /sys): ordinals are taken as given, automatic loops go to GPU 0.
        let plans = plan_loops(&cfg, true, &fixture("build-vm"), &[]).unwrap();
        assert_eq!(plans.iter().map(|p| p.gpu).collect::<Vec<_>>(), [Some(0), Some(3)]);
        assert!(
            plans[0].reason.ends_with("sysfs shows no GPU, so nothing to place by: GPU 0"),
            "{}",
            plans[0].reason
        );
    }

    #[test]
    fn the_host_backend_keeps_each_loops_cpus_and_no_gpu() {
        let cfg = loops(&[("0.0.0.0:5000", "cpus = \"0\""), ("0.0.0.0:5001", "gpu = 7")]);
        let plans = plan_loops(&cfg, false, &fixture("build-vm"), &[]).unwrap();
        assert_eq!(plans.iter().map(|p| p.gpu).collect::<Vec<_>>(), [None, None]);
        assert_eq!(plans[0].cpus.as_ref().unwrap().to_string(), "0");
        assert_eq!(plans[1].cpus, None);
    }
}
