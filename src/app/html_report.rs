//! `--report FILE.html` of `run` and `bench`: the run's report as one
//! self-contained HTML file with the machine, the config, the table and the
//! percentile plots ([`crate::plot::report`]). `bench --compare` writes its
//! own report with the same parts.

use super::AppError;
use super::report::Report;
use crate::backend::Backend;
use crate::metrics::Summary;
use crate::plot::report::{HtmlReport, ReportRow};
use crate::plot::{CurveSeries, percentile_svg};
use std::path::Path;

/// What the report says about the machine: host, kernel, CPU, memory, and
/// what the run ran on.
pub fn machine_rows(backend: Backend, backend_reason: &str) -> Vec<(String, String)> {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let memory = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:").map(|v| v.trim().to_string()))
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let when = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    vec![
        ("host".into(), read("/proc/sys/kernel/hostname")),
        ("kernel".into(), read("/proc/sys/kernel/osrelease")),
        ("CPU".into(), format!("{cpu} ({cores} usable cores)")),
        ("memory".into(), memory),
        ("backend".into(), format!("{backend}: {backend_reason}")),
        ("frameloop".into(), env!("CARGO_PKG_VERSION").into()),
        ("written at (Unix time)".into(), when.to_string()),
    ]
}

/// The config's text: the file given, else the defaults the run used.
pub fn config_text(path: Option<&Path>, cfg: &crate::config::Config) -> String {
    path.and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_else(|| {
        toml::to_string(cfg).unwrap_or_else(|e| format!("# cannot show the config: {e}\n"))
    })
}

const COLUMNS: [&str; 7] = ["count", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "max µs", "mean µs"];

/// The latency table and percentile plot of a run's summary.
fn latency_parts(latency: &Summary) -> Result<(Vec<ReportRow>, String), AppError> {
    let mut rows = Vec::new();
    let mut series = Vec::new();
    for s in latency.segments.iter().filter(|s| s.count > 0) {
        let name = s.segment.name();
        let p = &s.percentiles;
        let key = |what: &str| format!("latency.{name}.{what}");
        rows.push(ReportRow {
            name: name.to_string(),
            cells: vec![
                (s.count as f64, key("count")),
                (p.p50_us, key("p50_us")),
                (p.p90_us, key("p90_us")),
                (p.p99_us, key("p99_us")),
                (p.p99_9_us, key("p99_9_us")),
                (p.max_us, key("max_us")),
                (p.mean_us, key("mean_us")),
            ],
        });
        series.push(CurveSeries { name: name.to_string(), count: s.curve.count, points: s.curve.points() });
    }
    let svg = percentile_svg("latency by percentile, every segment", &series, &[]).map_err(AppError::Plot)?;
    Ok((rows, svg))
}

/// The report of a `run` or `bench`.
pub fn run_report(
    title: &str,
    report: &Report,
    config: String,
    extra: Option<serde_json::Value>,
) -> Result<HtmlReport, AppError> {
    let (rows, svg) = latency_parts(&report.latency)?;
    let mut data = serde_json::to_value(report).unwrap_or_default();
    if let (Some(extra), Some(obj)) = (extra, data.as_object_mut()) {
        obj.insert("sender".into(), extra);
    }
    Ok(HtmlReport {
        title: title.to_string(),
        machine: machine_rows(report.backend.backend, &report.backend.reason),
        config,
        rows,
        columns: COLUMNS.iter().map(|c| c.to_string()).collect(),
        text: report.render(),
        plots: vec![("Percentile distribution".into(), svg)],
        data,
    })
}

/// Writes `report` to `path`.
pub fn write(path: &Path, report: &HtmlReport) -> Result<(), AppError> {
    std::fs::write(path, report.render())
        .map_err(|source| AppError::Report { path: path.to_owned(), source })?;
    eprintln!("report written to {}", path.display());
    Ok(())
}
