//! Latency accounting: every segment of every frame's latency into HDR
//! histograms, the result thread that records them, the summary table and
//! JSON, HdrHistogram interval logs, the per-frame log, and the delivery
//! counters of the output ring and the result sinks.

#[doc(hidden)]
pub mod delivery;
#[doc(hidden)]
pub mod frame_log;
pub mod histograms;
#[doc(hidden)]
pub mod interval_log;
#[doc(hidden)]
pub mod record_file;
pub mod segment;
#[doc(hidden)]
pub mod sink;
pub mod summary;
#[doc(hidden)]
pub mod thread;

pub use delivery::{OutputMetrics, SinkMetrics};
pub use frame_log::{FrameLog, FrameLogFeed, FrameLogLine, FrameLogReport};
pub use histograms::{CURVE_QUANTILES, FrameCounters, LatencyHistograms, PercentileCurve, Percentiles};
pub use interval_log::{HistogramLogReport, IntervalLogFile, IntervalLogWriter, create_interval_log};
pub use record_file::{LogCounters, RecordFile};
pub use segment::{Segment, SegmentSpan, segment_spans};
pub use sink::{ResultCallback, ResultSink};
pub use summary::{
    CounterSection, RecentWindow, SegmentSummary, Summary, render_counters, render_latency_table,
};
pub use thread::{FrameWait, LoopHook, PlaceError, ResultProgress, ResultSpin, ResultThread};

use crate::config_problem::{ConfigProblem, check_range};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use thiserror::Error;

/// Errors of the metrics layer.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// The histogram log (`metrics.histogram_log`) cannot be created; check
    /// that its directory exists and is writable.
    #[error(
        "cannot create the histogram log {path}: {source}; check that the directory exists and is writable"
    )]
    Open {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The frame log cannot be created; check that its directory exists and
    /// is writable.
    #[error(
        "cannot create the frame log {path} (metrics.frame_log or --frame-log): {source}; check that the directory exists and is writable"
    )]
    OpenFrameLog {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The result (or frame log) thread could not be started; raise the
    /// process thread limit.
    #[error("cannot start the result thread ({0}); check the process thread limit (ulimit -u)")]
    Spawn(#[source] std::io::Error),
    /// The result thread could not be placed; set `service.result_cpu` to a
    /// core the process may use.
    #[error("cannot start the result thread ({0}); check service.result_cpu")]
    Place(#[source] thread::PlaceError),
    /// The result thread panicked (a bug; see the message above); the
    /// summary holds what was recorded before.
    #[error(
        "the result thread panicked (see the message above); the summary holds the results recorded before"
    )]
    Panicked,
}

/// The `[metrics]` section of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Where to write the HdrHistogram interval log; none when absent.
    pub histogram_log: Option<PathBuf>,
    /// Length of one interval of the log, in seconds.
    pub interval_s: u64,
    /// Where to write one CSV line per frame with its timestamps (the
    /// frame log); none when absent.
    pub frame_log: Option<PathBuf>,
    /// Make `frameloop run` exit with status 5 (after the whole report)
    /// when the frame log or the histogram log lost records (a full disk).
    /// Off, a log that cannot be written degrades the run (warned, counted)
    /// but does not fail it.
    pub fail_on_log_loss: bool,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self { histogram_log: None, interval_s: 1, frame_log: None, fail_on_log_loss: false }
    }
}

impl MetricsConfig {
    /// Adds a problem for every `[metrics]` key that cannot be used.
    pub fn validate(&self, problems: &mut Vec<ConfigProblem>) {
        check_range(problems, "metrics.interval_s", self.interval_s, 1, 3600);
        check_file_path(problems, "metrics.histogram_log", self.histogram_log.as_deref(), "latency.hlog");
        check_file_path(problems, "metrics.frame_log", self.frame_log.as_deref(), "frames.csv");
    }

    /// Interval length in nanoseconds.
    pub fn interval_ns(&self) -> u64 {
        self.interval_s.saturating_mul(1_000_000_000)
    }
}

/// Records a problem with `key` when `path` is given but is not a file
/// path in an existing directory (`example`: a file name to suggest).
fn check_file_path(
    problems: &mut Vec<ConfigProblem>,
    key: &str,
    path: Option<&std::path::Path>,
    example: &str,
) {
    let Some(path) = path else { return };
    if path.as_os_str().is_empty() || path.file_name().is_none() {
        problems.push(ConfigProblem::new(
            key,
            format!("is not a file path; give a file name such as \"{example}\" or leave the key out"),
        ));
    } else if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
        problems.push(ConfigProblem::new(
            key,
            format!("directory {} does not exist; create it or choose another path", dir.display()),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_parse_and_validation_names_keys() {
        let c: MetricsConfig = toml::from_str("").unwrap();
        assert_eq!(c, MetricsConfig::default());
        let c: MetricsConfig = toml::from_str("histogram_log = \"/tmp/x.hlog\"\ninterval_s = 5").unwrap();
        assert_eq!((c.interval_s, c.interval_ns()), (5, 5_000_000_000));
        assert!(
            toml::from_str::<MetricsConfig>("interval = 5").unwrap_err().to_string().contains("interval")
        );
        let bad = MetricsConfig {
            histogram_log: Some("/no/such/dir/x.hlog".into()),
            interval_s: 0,
            frame_log: Some("".into()),
            fail_on_log_loss: true,
        };
        let mut problems = Vec::new();
        bad.validate(&mut problems);
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["metrics.interval_s", "metrics.histogram_log", "metrics.frame_log"]);
        assert!(problems[2].to_string().contains("frames.csv"), "{}", problems[2]);
        let c: MetricsConfig = toml::from_str("frame_log = \"/tmp/frames.csv\"").unwrap();
        assert_eq!(c.frame_log.as_deref(), Some(std::path::Path::new("/tmp/frames.csv")));
        let mut none = Vec::new();
        MetricsConfig::default().validate(&mut none);
        assert!(none.is_empty());
    }
}
