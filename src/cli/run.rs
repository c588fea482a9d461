//! `frameloop run` and `frameloop validate`: their flags, turned into the
//! library's [`app::RunArgs`] and [`app::ValidateArgs`].

use super::choices::BackendChoice;
use frameloop::app;
use std::path::PathBuf;

/// Arguments of `frameloop validate`.
#[derive(clap::Args, Debug)]
pub struct ValidateCommand {
    /// Config file to check (TOML).
    #[arg(long, short)]
    pub config: PathBuf,
}

impl From<ValidateCommand> for app::ValidateArgs {
    fn from(c: ValidateCommand) -> Self {
        app::ValidateArgs { config: c.config }
    }
}

/// Arguments of `frameloop run`.
#[derive(clap::Args, Debug)]
pub struct RunCommand {
    /// Config file (TOML); see systemd/frameloop.toml for every key.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Override the config's backend.
    #[arg(long, value_enum)]
    pub backend: Option<BackendChoice>,
    /// Write HdrHistogram interval logs to this file (overrides metrics.histogram_log).
    #[arg(long)]
    pub histogram_log: Option<PathBuf>,
    /// Write one CSV line per frame with all its timestamps (host clock, ns)
    /// to this file (overrides metrics.frame_log; with `[[loop]]` tables, one file
    /// per loop, named like frames.cam0.csv).
    #[arg(long, value_name = "FILE.csv")]
    pub frame_log: Option<PathBuf>,
    /// Stop by itself after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Print the final report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Record every datagram the receiver takes off the socket to this pcapng
    /// file (replay it with `frameloop replay`; tcpdump and Wireshark read it).
    #[arg(long, value_name = "FILE.pcapng")]
    pub record: Option<PathBuf>,
    /// Write this process's id to this file while it runs (for `frameloop reload --pid-file`).
    #[arg(long, value_name = "PATH")]
    pub pid_file: Option<PathBuf>,
    /// At the stop, write the report as one self-contained HTML file: the
    /// machine, the config, the latency table and every segment's
    /// percentile plot.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
}

impl From<RunCommand> for app::RunArgs {
    fn from(c: RunCommand) -> Self {
        app::RunArgs {
            config: c.config,
            backend: c.backend.map(Into::into),
            histogram_log: c.histogram_log,
            frame_log: c.frame_log,
            duration: c.duration,
            json: c.json,
            record: c.record,
            pid_file: c.pid_file,
            report: c.report,
        }
    }
}
