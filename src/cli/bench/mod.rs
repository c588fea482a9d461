//! `frameloop bench`: the appliance with a loopback sender
//! ([`super::loopback::bench`]), or with `--compare` the orchestration
//! modes of the CUDA backend against each other and against the machine's
//! floors ([`compare`], [`floors`]), with its HTML report.

pub mod compare;
pub mod floors;

use super::choices::BackendChoice;
use compare::CompareReport;
use frameloop::app::{self, AppError, html_report};
use frameloop::backend::Backend;
use frameloop::config::{self, Config};
use frameloop::plot::report::{HtmlReport, ReportRow};
use frameloop::plot::{CurveSeries, FloorLine, percentile_svg};
use std::path::PathBuf;
use thiserror::Error;

/// Arguments of `frameloop bench`.
#[derive(clap::Args, Debug)]
pub struct BenchCommand {
    /// Backend: auto (CUDA when a GPU is usable, else host), host or cuda.
    #[arg(long, value_enum)]
    pub backend: Option<BackendChoice>,
    /// Config file for ring, loop and chain settings (default: embedded defaults).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// How long the loopback sender streams, in seconds.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Frames per second the loopback sender offers.
    #[arg(long, default_value_t = 1000.0)]
    pub rate: f64,
    /// Bytes per frame [default: 65536; 8192 with --compare]. When given,
    /// the ring's slots are sized to it (ring.slot_bytes is overridden).
    #[arg(long)]
    pub frame_bytes: Option<usize>,
    /// Bytes per UDP datagram, the 48-byte native header included (8972 fits a 9000-byte MTU).
    #[arg(long, default_value_t = 8972)]
    pub packet_bytes: usize,
    /// Interleaved sensor streams.
    #[arg(long, default_value_t = 1)]
    pub streams: u32,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write the report as one self-contained HTML file: the machine,
    /// the config, the table and every segment's percentile plot (with
    /// --compare: every mode and the floors on one plot).
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Write HdrHistogram interval logs to this file.
    #[arg(long)]
    pub histogram_log: Option<PathBuf>,
    /// CUDA only: compare the resident graph against sleep-interval,
    /// launch-per-frame and round-trip-floor modes on host-published frames.
    /// The measuring thread takes service.result_cpu and
    /// service.realtime_priority from the config, when set. With
    /// `[[actuate]]` outputs in the config (either backend): the loopback run
    /// with its sensor-to-actuator round trip, and in the same run the UDP
    /// ping-pong floor (as --ping-pong-floor).
    #[arg(long)]
    pub compare: bool,
    /// With --compare: measured frames per mode (the p99.9 rests on the
    /// slowest 0.1%: 20 frames at the default).
    #[arg(long, default_value_t = 20000)]
    pub frames: usize,
    /// With --compare: a second config whose chain runs as one more mode
    /// ("resident poll, compare chain") in the same run, e.g. the same math
    /// written as user kernels (bench/configs/user-default-chain.toml).
    #[arg(long, value_name = "CONFIG")]
    pub compare_chain: Option<PathBuf>,
    /// With --compare: only the floors and the modes that compare the
    /// chain's paths (what loop.fused_chain = "auto" runs, one kernel per
    /// operator, the tiled fused kernel, a graph launch per frame), for
    /// sweeps over frame sizes.
    #[arg(long, requires = "compare")]
    pub paths_only: bool,
    /// With `[[actuate]]` outputs in the config: also measure, in the same
    /// run, a UDP ping-pong over the same loopback path with the frame's
    /// datagrams out and one actuation-sized message back (the network
    /// floor under the sensor-to-actuator round trip).
    #[arg(long, conflicts_with = "compare")]
    pub ping_pong_floor: bool,
    /// With --compare: bytes the streamed modes' publisher writes between
    /// two received marks, i.e. what one receive batch of the UDP receiver
    /// holds: 65536 models GRO buffers, one datagram's payload (8924 for
    /// 8972-byte datagrams) a receiver that gets datagrams one at a time; at
    /// least 64. The frame's last part is what crosses the bus after the
    /// frame is published.
    #[arg(long, requires = "compare", value_name = "N", value_parser = parse_stream_part_bytes,
          default_value_t = frameloop::gpu::test_rings::STREAMED_PART_BYTES)]
    pub stream_part_bytes: usize,
}

/// `--stream-part-bytes`: at least 64 (shorter parts would time the
/// publisher's marks rather than the loop).
fn parse_stream_part_bytes(s: &str) -> Result<usize, BadPartBytes> {
    let n: usize = s.parse()?;
    if n < 64 {
        return Err(BadPartBytes::TooSmall(n));
    }
    Ok(n)
}

/// Why a `--stream-part-bytes` value was refused.
#[derive(Debug, Error)]
enum BadPartBytes {
    #[error("{0}; give a byte count such as 8924")]
    NotANumber(#[from] std::num::ParseIntError),
    #[error("{0} bytes is below the 64 a part must hold; give 64 or more")]
    TooSmall(usize),
}

/// Runs `frameloop bench`.
pub fn bench(args: BenchCommand) -> Result<(), AppError> {
    if !args.compare {
        return super::loopback::bench(&args);
    }
    let mut cfg = app::load_or_default(args.config.as_deref())?;
    app::backend_override(&mut cfg, args.backend.map(Into::into));
    if !cfg.actuation_plan().is_empty() {
        // What an actuation config compares: the round trip over the
        // network against the network's own floor, in one run.
        eprintln!(
            "the config has [[actuate]] outputs: comparing the sensor-to-actuator round trip with a UDP ping-pong"
        );
        let args = BenchCommand { compare: false, ping_pong_floor: true, ..args };
        return super::loopback::bench(&args);
    }
    compare(&cfg, &args)
}

/// `frameloop bench --compare`: the orchestration modes and floors on the
/// GPU, printed as a table (or JSON) and written as an HTML report.
fn compare(cfg: &Config, args: &BenchCommand) -> Result<(), AppError> {
    let pick = app::pick_backend(if cfg.backend == config::BackendChoice::Auto {
        config::BackendChoice::Cuda
    } else {
        cfg.backend
    })?;
    if pick.backend != frameloop::backend::Backend::Cuda {
        return Err(AppError::Unsupported(
            "--compare measures the GPU orchestration modes and needs --backend cuda (or auto on a GPU box)"
                .into(),
        ));
    }
    let opts = compare::CompareOptions {
        chain: cfg.chain.clone(),
        frame_bytes: args.frame_bytes.unwrap_or(8192),
        frames: args.frames,
        poll_budget_us: cfg.loop_.poll_budget_us,
        poll_interval_ns: cfg.loop_.poll_interval_ns,
        compare_chain: args.compare_chain.as_deref().map(compare::load_compare_chain).transpose()?,
        paths_only: args.paths_only,
        stream_part_bytes: args.stream_part_bytes,
        huge_pages: cfg.ring.huge_pages,
        ..Default::default()
    };
    // The measuring thread publishes frames and spins on results, like the
    // appliance's result thread: it takes that thread's placement.
    frameloop::service::threads::place_current_thread(
        "bench",
        cfg.service.result_cpu,
        cfg.service.realtime_priority,
    )?;
    eprintln!("comparing orchestration modes on {} ({} frames per mode)...", pick.reason, opts.frames);
    let report = compare::run_compare(&opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        print!("{}", report.table());
    }
    if let Some(path) = &args.report {
        let config = html_report::config_text(args.config.as_deref(), cfg);
        html_report::write(path, &compare_report(&report, config)?)?;
    }
    Ok(())
}

/// The report of `bench --compare`: every mode's percentiles and the
/// measured floors on one plot.
pub fn compare_report(report: &CompareReport, config: String) -> Result<HtmlReport, AppError> {
    let mut rows = Vec::new();
    let mut series = Vec::new();
    for m in &report.modes {
        let key = |what: &str| format!("mode.{}.{what}", m.mode);
        rows.push(ReportRow {
            name: m.mode.clone(),
            cells: vec![
                (m.frames as f64, key("frames")),
                (m.p50_us, key("p50_us")),
                (m.p90_us, key("p90_us")),
                (m.p99_us, key("p99_us")),
                (m.p999_us, key("p999_us")),
                (m.max_us, key("max_us")),
            ],
        });
        series.push(CurveSeries {
            name: m.mode.clone(),
            count: m.frames as u64,
            points: vec![
                (0.5, m.p50_us),
                (0.9, m.p90_us),
                (0.99, m.p99_us),
                (0.999, m.p999_us),
                (1.0, m.max_us),
            ],
        });
    }
    let f = &report.floors;
    let floors: Vec<FloorLine> = [
        ("persistent-kernel round trip p50", f.round_trip_p50_us),
        ("fresh frame copy", f.fresh_frame_copy_us),
        ("frame copy in a stream", f.frame_copy_us),
    ]
    .into_iter()
    .filter(|(_, us)| *us > 0.0)
    .map(|(name, us)| FloorLine { name: name.into(), us })
    .collect();
    let svg = percentile_svg("every mode and the floors", &series, &floors).map_err(AppError::Plot)?;
    Ok(HtmlReport {
        title: format!("frameloop bench --compare on {}", report.device),
        machine: html_report::machine_rows(Backend::Cuda, &report.device),
        config,
        rows,
        columns: ["frames", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "max µs"]
            .iter()
            .map(|c| c.to_string())
            .collect(),
        text: report.table(),
        plots: vec![("Every mode and the floors".into(), svg)],
        data: serde_json::to_value(report).unwrap_or_default(),
    })
}
