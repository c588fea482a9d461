//! The appliance and the service commands the `frameloop` binary runs
//! (`run`, `validate`, `record`, `replay`), each over a plain option struct;
//! the binary's command line (`src/cli/`) parses the flags into them.

mod appliance;
mod backend_factory;
mod captures;
mod chores;
mod claims;
mod feed;
#[doc(hidden)]
pub mod html_report;
#[doc(hidden)]
pub mod live_view;
mod loops;
mod numa;
mod receivers;
mod report;
#[doc(hidden)]
pub mod signals;

pub use appliance::{Appliance, ApplianceBuilder, ReloadVerdict, StartOptions};
pub use backend_factory::{BackendPick, pick_backend};
pub use captures::{record, replay};
pub use claims::{GpuClaim, PortClaim};
pub use feed::FrameFeed;
pub use loops::{LoopOutcome, LoopPlan, LoopSet, LoopsReport, plan_loops};
pub use report::{RecordingReport, Report, RingMemoryReport};

use crate::config::{self, BackendChoice, Config};
use std::path::PathBuf;
use thiserror::Error;

/// Errors that stop a command, each saying what to do about it and keeping
/// the error underneath as its source.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum AppError {
    /// The config is unreadable or invalid; the message names each key and
    /// its fix (`frameloop validate` lists them all).
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// A ring could not be created (the message names the ring.* key).
    #[error(transparent)]
    Ring(#[from] crate::ring::RingError),
    /// The RDMA ingest (or sender) was chosen but cannot run (the message
    /// names what to change).
    #[error(transparent)]
    Rdma(#[from] crate::rdma::RdmaError),
    /// Rust operators that cannot go into the chain (the message names the operator).
    #[error(transparent)]
    Operators(#[from] crate::gpu::chain_builder::ChainBuilderError),
    /// The output ring or its socket could not be set up (the message names output.*).
    #[error(transparent)]
    Output(#[from] crate::output::OutputError),
    /// A combination of settings that this build, backend or ingest format
    /// cannot run; the message names the keys or flags to change.
    #[error("{0}")]
    Unsupported(String),
    /// `backend = "cuda"` on a machine without a usable GPU or NVRTC; use
    /// `--backend host` (or `auto`) there.
    #[error("backend cuda needs a usable GPU: {0}; use --backend host (or auto) on this machine")]
    NoGpu(#[source] crate::gpu::GpuUnavailable),
    /// The `[handler]` source file cannot be read or compiled; fix the file
    /// that `handler.source` names.
    #[error("handler.source: {0}")]
    HandlerSource(#[source] crate::gpu::user::source::UserCodeError),
    /// The GPU already runs the resident loop of another appliance in this
    /// process; stop that appliance, use another GPU, or run both loops from
    /// one config with `[[loop]]` tables.
    #[error(
        "GPU {gpu} already runs the resident loop of another appliance in this process, and a second \
         loop would wait for it for ever: stop that appliance first, start this one on another GPU, or \
         run both loops from one config with [[loop]] tables"
    )]
    GpuTaken {
        /// The GPU's ordinal.
        gpu: usize,
    },
    /// `ingest.bind` names the UDP port of another appliance in this
    /// process; give each appliance its own port, or run both loops from one
    /// config with `[[loop]]` tables.
    #[error(
        "ingest.bind: UDP port {addr} is the port of another appliance in this process; with \
         ingest.reuse_port the kernel would split the datagrams between the two at random: give each \
         appliance its own port, or run both loops from one config with [[loop]] tables (one receiver \
         gives each loop the streams it lists)"
    )]
    PortTaken {
        /// The address asked for.
        addr: std::net::SocketAddr,
    },
    /// Outputs were asked for without the output ring; set
    /// `output.enabled = true`.
    #[error("outputs need the output ring: set output.enabled = true (and output.socket to a writable path)")]
    NoOutputs,
    /// The CUDA context could not be created; check the driver and that
    /// the GPU is not exclusive to another process.
    #[error("cannot open the GPU: {0}")]
    GpuOpen(#[source] crate::gpu::GpuError),
    /// The GPU-resident loop could not be built (kernels, graph, memory);
    /// the source names the step.
    #[error("cannot build the GPU loop: {0}")]
    GpuLoop(#[source] crate::gpu::GpuError),
    /// A GPU step outside the appliance (`bench --compare`); the message
    /// names what failed.
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    #[error("cannot map {len} bytes for a ring: {source}; lower ring.slots")]
    /// Host memory for a ring could not be mapped; lower `ring.slots` or
    /// raise the memlock limit.
    RingMemory {
        /// Bytes asked for.
        len: usize,
        /// The mapping's error.
        source: std::io::Error,
    },
    #[error("cannot map {len} bytes of GPU-mapped memory for a ring: {source}; lower ring.slots")]
    /// Page-locked, GPU-mapped memory for a ring could not be had; lower
    /// `ring.slots`.
    MappedRingMemory {
        /// Bytes asked for.
        len: usize,
        /// The CUDA error.
        source: crate::gpu::GpuError,
    },
    /// The host backend's loop could not be built; the source says why.
    #[error("cannot build the host loop: {0}")]
    HostLoop(#[source] crate::host::HostError),
    /// The resident loop could not be launched; the source names the stage.
    #[error("cannot launch the resident loop: {0}")]
    Launch(#[source] crate::backend::BackendError),
    /// The resident loop failed while running (clock recalibration, ...).
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
    /// `[sink.nats]` cannot start (the message names the key).
    #[error(transparent)]
    Sink(#[from] crate::sink::nats::SinkError),
    /// The histogram log or the result thread failed.
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
    /// Thread placement or the metrics endpoint (the message names the key
    /// or unit setting).
    #[error(transparent)]
    Service(#[from] crate::service::ServiceError),
    /// Placing a thread the receiver starts (the assembly thread, further
    /// reading threads); the message names the key.
    #[error(transparent)]
    ThreadPlacement(std::sync::Arc<crate::service::ServiceError>),
    /// SIGINT/SIGTERM/SIGHUP handlers could not be installed (a process
    /// limit or sandbox); run frameloop without that restriction.
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] nix::Error),
    /// `--pid-file` cannot be written, or another appliance holds it.
    #[error(transparent)]
    PidFile(#[from] crate::service::PidFileError),
    /// `--report` could not be written; give a path in a writable directory.
    #[error("cannot write --report {}: {source}; check that the directory exists and is writable", path.display())]
    Report {
        /// The file asked for.
        path: PathBuf,
        /// The write's error.
        source: std::io::Error,
    },
    /// Drawing a report's plot failed.
    #[error(transparent)]
    Plot(#[from] crate::plot::PlotError),
    /// Placing `[[loop]]` tables on the box's GPUs (the message names the fix).
    #[error(transparent)]
    Topology(#[from] crate::topology::TopologyError),
    /// One loop of several could not start; the loops started before it were stopped.
    #[error("loop {name} cannot start: {source}")]
    LoopStart {
        /// The `[[loop]]` table's name.
        name: String,
        /// Why it could not start.
        #[source]
        source: Box<AppError>,
    },
    #[error(
        "cannot start the {thread} thread: {source}; check the process thread limit (ulimit -u, TasksMax=)"
    )]
    /// A thread could not be started; raise the process thread limit.
    Spawn {
        /// Which thread.
        thread: &'static str,
        /// The spawn's error.
        source: std::io::Error,
    },
    /// The UDP receiver could not start (bind, socket options); the message
    /// names the `ingest.*` key to change.
    #[error("cannot start the UDP receiver: {0}")]
    Receiver(#[source] crate::ingest::IngestError),
    /// The transmit ring of the `[[actuate]]` outputs could not be built.
    #[error(transparent)]
    Actuate(#[from] crate::actuate::ActuateError),
    /// The actuation sender could not start.
    #[error(transparent)]
    ActuationSender(#[from] crate::actuate::SenderError),
    /// The `[rtp]` assembler refused its settings (the message names the key).
    #[error(transparent)]
    Rtp(#[from] crate::rtp::AssemblerError),
    /// The emulated HSB bridge's receiver cannot start.
    #[error(transparent)]
    Hsb(#[from] crate::ingest::hsb::HsbIngestError),
    #[error("ingest.bind {value:?} is not ADDR:PORT ({source}); for example \"0.0.0.0:5000\"")]
    /// `ingest.bind` is not `ADDR:PORT`; write it like `"0.0.0.0:5000"`.
    BindAddress {
        /// The value as written.
        value: String,
        /// The parser's error.
        source: std::net::AddrParseError,
    },
    #[error("cannot read the local address of the socket bound to {addr}: {source}")]
    /// The bound socket's local address could not be read (rare; an OS error).
    Socket {
        /// The address it was bound to.
        addr: std::net::SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The frame ring has one writer and it is taken: give each ring one
    /// receiver.
    #[error("the frame ring's writer is already taken")]
    WriterTaken,
    /// The sensor emulator stopped with an error; the message names the fix.
    #[error("sender: {0}")]
    Sender(#[source] crate::sender::SendError),
    /// The sensor emulator's thread panicked (a bug; see the log above).
    #[error("the sender thread panicked")]
    SenderPanicked,
    /// Recording or replaying a capture failed (the message names the file).
    #[error(transparent)]
    Capture(#[from] crate::capture::CaptureError),
    /// The `--record` file could not be written; choose a writable path.
    #[error("--record: {0}")]
    RecordFile(#[source] crate::capture::CaptureError),
    #[error("{}: {why}", file.display())]
    /// A replayed capture ended early; the reason names the packet or file.
    ReplayEnded {
        /// The capture file.
        file: PathBuf,
        /// Why the replay ended.
        why: String,
    },
    #[error(
        "the {thread} thread died: {message}; the service stopped so that it can be restarted \
         (see the log above for the cause)"
    )]
    /// A pipeline thread died; restart the service (systemd does) and read
    /// the log for the cause.
    ThreadDied {
        /// The thread's role.
        thread: String,
        /// Its panic or error message.
        message: String,
    },
    #[error(
        "the pipeline did not stop within service.shutdown_timeout_ms = {timeout_ms} ms: {}; \
         it was left behind and the process exits so that it can be restarted (a wedged GPU may \
         need a reset: see docs/operations.md, exit status 4)",
        stages.join("; ")
    )]
    /// Stopping did not finish within `service.shutdown_timeout_ms`; raise the
    /// key if the stages are only slow, else restart (a wedged GPU may need a reset).
    StopTimedOut {
        /// The stages left behind.
        stages: Vec<String>,
        /// The budget they had.
        timeout_ms: u64,
    },
    /// The frame log or the histogram log lost records and
    /// `metrics.fail_on_log_loss` asks for a failure (exit status 5).
    #[error(
        "{lost} log records (frame-log lines, histogram-log intervals) could not be written (see the report); \
         metrics.fail_on_log_loss = true makes that a failure: free space on the logs' filesystem, or set \
         it to false to let a full disk only degrade the run"
    )]
    LogsLost {
        /// The records lost.
        lost: u64,
    },
    #[error(
        "{loops} went down while the others kept running; the service exits non-zero so that it can be \
         restarted (see the log above for the cause)"
    )]
    /// Some `[[loop]]`s went down while others ran; the service exits so
    /// that it is restarted.
    LoopsDown {
        /// The loops that went down.
        loops: String,
    },
}

impl AppError {
    /// Exit status of `frameloop`: 3 when a pipeline thread died or a loop
    /// went down (the service must be restarted), 4 when the stop had to
    /// leave a hung thread or a wedged device behind, 5 when a log lost
    /// records and `metrics.fail_on_log_loss` is set, 1 for every other error.
    pub fn exit_code(&self) -> u8 {
        match self {
            AppError::ThreadDied { .. } | AppError::LoopsDown { .. } => 3,
            AppError::StopTimedOut { .. } => 4,
            AppError::LogsLost { .. } => 5,
            _ => 1,
        }
    }
}

/// Arguments of `frameloop validate`.
#[derive(Debug, Clone)]
pub struct ValidateArgs {
    /// Config file to check (TOML).
    pub config: PathBuf,
}

/// Logs go to stderr through `tracing`; `RUST_LOG` (or `FRAMELOOP_LOG`) filters them.
pub fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = std::env::var("FRAMELOOP_LOG")
        .ok()
        .and_then(|v| EnvFilter::try_new(v).ok())
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// `frameloop validate`: prints every problem, or a one-line confirmation.
pub fn validate(args: &ValidateArgs) -> Result<(), AppError> {
    let cfg = config::load(&args.config)?;
    let problems = crate::gpu::user::source::check_user_code(&cfg, &args.config);
    if !problems.is_empty() {
        return Err(config::ConfigError::Invalid(problems).into());
    }
    println!(
        "{}: ok (backend {:?}, {} slots of {} bytes, policy {:?}, chain: {})",
        args.config.display(),
        cfg.backend,
        cfg.ring.slots,
        cfg.ring.slot_bytes,
        cfg.ring.policy,
        cfg.chain.iter().map(|o| o.name()).collect::<Vec<_>>().join(" -> ")
    );
    if let Some(bytes) = crate::ring::layout::ring_bytes(cfg.ring.slots, cfg.ring.slot_bytes) {
        let mode = crate::ring::pages::transparent_huge_page_mode();
        println!(
            "  frame ring: {:.1} MiB, in {}",
            bytes as f64 / f64::from(1 << 20),
            crate::ring::pages::expected_paging(cfg.ring.huge_pages, mode.as_deref())
        );
    }
    for spec in &cfg.loops {
        println!("  {}", loops::describe(spec));
    }
    for group in crate::config::loops::port_groups(&cfg.loops) {
        let names: Vec<&str> = group.iter().map(|&i| cfg.loops[i].name.as_str()).collect();
        println!(
            "  udp {} shared by loops {}: one receiver gives each loop the streams it lists",
            cfg.loops[group[0]].ingest.bind,
            names.join(", ")
        );
    }
    Ok(())
}

/// Loads `path` or returns the embedded defaults.
pub fn load_or_default(path: Option<&std::path::Path>) -> Result<Config, AppError> {
    Ok(match path {
        Some(p) => {
            let mut cfg = config::load(p)?;
            // User kernel sources are named relative to the config file.
            cfg.chain = crate::gpu::user::kernel::with_sources_resolved(&cfg.chain, p);
            for spec in &mut cfg.loops {
                spec.chain = crate::gpu::user::kernel::with_sources_resolved(&spec.chain, p);
            }
            // [handler] source is relative to the config file, like chain kernels.
            if let Some(h) = &mut cfg.handler {
                h.source = h.source_path(p);
            }
            cfg
        }
        None => Config::default(),
    })
}

/// Puts `choice`, when given, in place of the config's backend.
pub fn backend_override(cfg: &mut Config, choice: Option<BackendChoice>) {
    if let Some(b) = choice {
        cfg.backend = b;
    }
}

/// Arguments of `frameloop run`.
#[derive(Debug, Clone)]
pub struct RunArgs {
    /// Config file (TOML); see systemd/frameloop.toml for every key.
    pub config: Option<PathBuf>,
    /// Override the config's backend.
    pub backend: Option<BackendChoice>,
    /// Write HdrHistogram interval logs to this file (overrides metrics.histogram_log).
    pub histogram_log: Option<PathBuf>,
    /// Write one CSV line per frame with all its timestamps (host clock, ns)
    /// to this file (overrides metrics.frame_log; with `[[loop]]` tables, one file
    /// per loop, named like frames.cam0.csv).
    pub frame_log: Option<PathBuf>,
    /// Stop by itself after this many seconds (default: run until SIGINT/SIGTERM).
    pub duration: Option<f64>,
    /// Print the final report as JSON.
    pub json: bool,
    /// Record every datagram the receiver takes off the socket to this pcapng
    /// file (replay it with `frameloop replay`; tcpdump and Wireshark read it).
    pub record: Option<PathBuf>,
    /// Write this process's id to this file while it runs (for `frameloop reload --pid-file`).
    pub pid_file: Option<PathBuf>,
    /// At the stop, write the report as one self-contained HTML file: the
    /// machine, the config, the latency table and every segment's
    /// percentile plot.
    pub report: Option<PathBuf>,
}

/// Prints `report` on stdout as `run` and `bench` do: the latency table,
/// or with `json` the report as JSON with the `extra` members added.
#[doc(hidden)]
pub fn print_report(report: &Report, extra: Vec<(&str, serde_json::Value)>, json: bool) {
    if json {
        let mut v = serde_json::to_value(report).unwrap_or_default();
        if let Some(obj) = v.as_object_mut() {
            for (k, e) in extra {
                obj.insert(k.to_string(), e);
            }
        }
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", report.render());
    }
}

/// A progress line on stderr: rewritten in place on a terminal, one line a second otherwise.
#[doc(hidden)]
pub struct Progress {
    tty: bool,
    last: std::time::Instant,
    shown: bool,
}

impl Progress {
    /// A progress line on stderr (a terminal or not).
    pub fn on_stderr() -> Self {
        use std::io::IsTerminal;
        Self { tty: std::io::stderr().is_terminal(), last: std::time::Instant::now(), shown: false }
    }
    /// Shows `line()` if the last line is old enough.
    pub fn show(&mut self, line: impl FnOnce() -> String) {
        let every = if self.tty { 250 } else { 1000 };
        if self.last.elapsed() < std::time::Duration::from_millis(every) {
            return;
        }
        self.last = std::time::Instant::now();
        if self.tty {
            eprint!("\r\x1b[2K{}", line());
        } else {
            eprintln!("{}", line());
        }
        self.shown = true;
    }
    /// Ends the line on a terminal.
    pub fn done(&mut self) {
        if self.tty && self.shown {
            eprintln!();
        }
    }
}

/// How often `run` re-measures the GPU clock offset against drift.
/// (The GPU's %globaltimer was seen drifting about 5 µs per second against
/// CLOCK_REALTIME on an H200, so once a second keeps the error near the
/// calibration's own bound.)
#[doc(hidden)]
pub const CLOCK_RECALIBRATION: std::time::Duration = std::time::Duration::from_secs(1);

/// `frameloop run`: serve until a signal (or `--duration`), then report.
///
/// Under systemd (`NOTIFY_SOCKET`) it sends READY=1 once the ring is
/// allocated, the loop launched and the socket bound; WATCHDOG=1 only while
/// no stage (receiver, resident loop, result thread, this control loop)
/// stops making progress with work waiting for it; STOPPING=1 on the way
/// out. A stop that has to leave a hung stage behind exits with status 4.
pub fn run(args: &RunArgs) -> Result<(), AppError> {
    use crate::service::{MetricsBoard, Notifier, ProgressSource, WatchdogPinger};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    let mut cfg = load_or_default(args.config.as_deref())?;
    backend_override(&mut cfg, args.backend);
    if let Some(path) = &args.frame_log {
        cfg.metrics.frame_log = Some(path.clone());
    }
    if !cfg.loops.is_empty() {
        return loops::run_loops(args, &cfg);
    }
    crate::service::thread_failure::install();
    signals::install().map_err(AppError::Signals)?;
    let notifier = Notifier::from_env().map(Arc::new);
    let opts = StartOptions { histogram_log: args.histogram_log.clone(), ..Default::default() };
    let mut app = Appliance::start_recording(&cfg, opts, args.record.as_deref())?;
    // Locked while the appliance runs, removed when it ends (see service::pid_file).
    let pid_file = args.pid_file.as_deref().map(crate::service::PidFile::create).transpose()?;

    let board = MetricsBoard::new();
    let (snapshot, summary) = app.live_snapshot();
    board.publish(snapshot);
    let facts = live_view::appliance_facts(&cfg, &app, args.config.as_deref());
    let server = live_view::start_endpoint(&cfg, &board, facts, live_view::previewer(&cfg, &app))?;
    let live = server.as_ref().and_then(live_view::HttpEndpoint::view).map(|v| v.latency.clone());
    if let Some(s) = &server {
        tracing::info!("metrics on http://{}/metrics", s.local_addr());
    }
    if let Some(l) = &live {
        l.publish(&summary);
    }
    // The resident loop's counters need the loop itself, so this loop copies
    // them for the watchdog; its own tick shows that the copies are fresh.
    let iterations = Arc::new(AtomicU64::new(app.loop_stats().iterations));
    let frame_backlog = Arc::new(AtomicU64::new(0));
    let ticks = Arc::new(AtomicU64::new(0));
    let pinger = notifier.as_ref().and_then(|n| {
        n.ready(&format!("serving on {} ({} backend)", app.local_addr(), app.backend().name()));
        let (it, pending, tick) = (Arc::clone(&iterations), Arc::clone(&frame_backlog), Arc::clone(&ticks));
        let mut sources = app.progress_sources();
        sources.push(ProgressSource::with_backlog(
            "resident loop",
            move || it.load(Ordering::Relaxed),
            move || pending.load(Ordering::Relaxed),
        ));
        sources.push(ProgressSource::new("control loop", move || tick.load(Ordering::Relaxed)));
        WatchdogPinger::start(Arc::clone(n), sources)
    });

    let started = Instant::now();
    let limit = args.duration.map(Duration::from_secs_f64);
    let mut chores = chores::Chores::new(notifier.as_deref());
    let stop = signals::stop_flag();
    let mut died = None;
    while !stop.load(Ordering::Acquire) {
        if limit.is_some_and(|l| started.elapsed() >= l) {
            break;
        }
        if let Some(failure) = crate::service::thread_failure::failure() {
            died = Some(failure.clone());
            break;
        }
        if !app.is_launched() {
            tracing::error!("the resident loop stopped by itself; shutting down");
            break;
        }
        if pinger.is_some() {
            iterations.store(app.loop_stats().iterations, Ordering::Relaxed);
            frame_backlog.store(app.frame_backlog(), Ordering::Relaxed);
            ticks.fetch_add(1, Ordering::Relaxed);
        }
        if signals::take_reload_request() {
            reload_config(&mut app, args, notifier.as_deref());
        }
        if chores.calibration_due()
            && let Err(e) = app.recalibrate_clock()
        {
            tracing::warn!("GPU clock recalibration failed: {e}");
        }
        chores.publish_if_due(&board, || {
            let (snapshot, summary) = app.live_snapshot();
            if let Some(l) = &live {
                l.publish(&summary);
            }
            snapshot
        });
        chores.show_progress(|| app.progress_line());
        std::thread::sleep(Duration::from_millis(20));
    }
    chores.finish(notifier.as_deref(), pinger);
    if let Some(failure) = died {
        // The stop is bounded by service.shutdown_timeout_ms; the timer is
        // the net under it (a second more).
        stop_within(app, server, cfg.service.shutdown_timeout() + Duration::from_secs(1));
        return Err(AppError::ThreadDied { thread: failure.thread, message: failure.message });
    }
    match signals::last_signal() {
        Some(sig) => tracing::info!("received {sig}; stopping"),
        None => tracing::info!("stopping"),
    }
    let report = app.stop()?;
    if let Some(s) = server {
        s.stop();
    }
    drop(pid_file);
    tracing::info!(frames = report.latency.frames.processed, "summary\n{}", report.render());
    print_report(&report, Vec::new(), args.json);
    if let Some(path) = &args.report {
        let config = html_report::config_text(args.config.as_deref(), &cfg);
        html_report::write(path, &html_report::run_report("frameloop run", &report, config, None)?)?;
    }
    if !report.hung.is_empty() {
        return Err(AppError::StopTimedOut { stages: report.hung, timeout_ms: report.shutdown_timeout_ms });
    }
    let lost = report.log_records_lost();
    if lost > 0 && cfg.metrics.fail_on_log_loss {
        return Err(AppError::LogsLost { lost });
    }
    Ok(())
}

/// SIGHUP: re-reads `--config` and applies what can be applied while the
/// appliance runs (see [`crate::reload`]); systemd hears RELOADING=1, then
/// READY=1 once the outcome is known.
fn reload_config(app: &mut Appliance, args: &RunArgs, notifier: Option<&crate::service::Notifier>) {
    if let Some(n) = notifier {
        n.reloading();
    }
    match &args.config {
        None => tracing::warn!(
            "reload: frameloop run was started without --config, so there is no file to re-read; restart it with --config"
        ),
        Some(path) => match load_or_default(Some(path)) {
            Ok(mut cfg) => {
                backend_override(&mut cfg, args.backend);
                app.reload(cfg);
            }
            Err(AppError::Config(e)) => {
                app.reload_failed(&e);
            }
            Err(e) => tracing::error!("reload rejected, the running config is kept: {e}"),
        },
    }
    if let Some(n) = notifier {
        n.ready(&format!(
            "serving on {} ({} backend, parameter generation {})",
            app.local_addr(),
            app.backend().name(),
            app.param_generation()
        ));
    }
}

/// After a thread died: stops what still runs (flushing the histogram log
/// where it can), but a timer ends the process with the failure's exit
/// status if that takes longer than `limit`, so it exits promptly even when
/// a stage is wedged.
fn stop_within(app: Appliance, server: Option<live_view::HttpEndpoint>, limit: std::time::Duration) {
    let code = i32::from(AppError::ThreadDied { thread: String::new(), message: String::new() }.exit_code());
    let deadline = std::thread::Builder::new().name("frameloop-stop-timer".into()).spawn(move || {
        std::thread::sleep(limit);
        tracing::error!("the pipeline did not stop within {limit:?}; exiting anyway");
        std::process::exit(code);
    });
    if let Err(e) = deadline {
        tracing::error!("cannot start the stop timer ({e}); exiting without a clean stop");
        std::process::exit(code);
    }
    if let Err(e) = app.stop() {
        tracing::error!("stopping after the failure: {e}");
    }
    if let Some(s) = server {
        s.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn exit_status_says_what_kind_of_failure_it_was() {
        let died = AppError::ThreadDied { thread: "frameloop-rx".into(), message: "boom".into() };
        assert_eq!(died.exit_code(), 3);
        let hung = AppError::StopTimedOut {
            stages: vec!["receiver thread (did not return)".into()],
            timeout_ms: 800,
        };
        assert_eq!(hung.exit_code(), 4);
        let text = hung.to_string();
        assert!(
            text.contains("service.shutdown_timeout_ms = 800 ms") && text.contains("receiver thread"),
            "{text}"
        );
        assert_eq!(AppError::Unsupported("x".into()).exit_code(), 1);
    }

    #[test]
    fn wrapped_errors_keep_their_source_and_their_advice() {
        let spawn =
            AppError::Spawn { thread: "receiver", source: std::io::Error::from_raw_os_error(libc::EAGAIN) };
        assert!(spawn.source().is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some()));
        let text = spawn.to_string();
        assert!(
            text.starts_with("cannot start the receiver thread: ") && text.contains("ulimit -u"),
            "{text}"
        );

        let signals = AppError::Signals(nix::Error::EPERM);
        assert!(signals.source().is_some_and(|s| s.downcast_ref::<nix::Error>().is_some()));
        assert!(signals.to_string().starts_with("cannot install signal handlers: "));

        let bind = "not-an-address".parse::<std::net::SocketAddr>().unwrap_err();
        let bad = AppError::BindAddress { value: "not-an-address".into(), source: bind };
        assert!(bad.source().is_some());
        assert!(bad.to_string().contains("ingest.bind \"not-an-address\" is not ADDR:PORT"), "{bad}");

        let launch = AppError::Launch(crate::backend::BackendError::AlreadyLaunched);
        assert!(launch.source().is_some_and(|s| s.is::<crate::backend::BackendError>()));
        assert!(
            launch.to_string().starts_with("cannot launch the resident loop: the resident loop is already")
        );
    }
}
