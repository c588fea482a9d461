//! `frameloop consume`, `frameloop topology` and `frameloop reload`: their
//! flags, turned into the library's [`ConsumeArgs`], [`TopologyArgs`] and
//! [`ReloadArgs`].

use frameloop::output::ConsumeArgs;
use frameloop::reload::ReloadArgs;
use frameloop::topology::TopologyArgs;
use std::path::PathBuf;

/// Arguments of `frameloop consume`.
#[derive(Debug, clap::Args)]
pub struct ConsumeCommand {
    /// The appliance's output socket (its output.socket).
    #[arg(long, default_value = "/run/frameloop/output.sock")]
    pub socket: PathBuf,
    /// Stop after this many outputs (read or lost) [default: until interrupted].
    #[arg(long)]
    pub count: Option<u64>,
    /// Also print each output's samples (space-separated, on the line after
    /// it); from a device-memory ring they are copied to the host first.
    #[arg(long)]
    pub samples: bool,
    /// Spin on the ring's head for this long before sleeping between polls
    /// (microseconds). `--spin-us 0` sleeps at once; a large value keeps one
    /// core busy and sees each output as soon as it is published.
    #[arg(long, default_value_t = 20, value_name = "US")]
    pub spin_us: u64,
}

/// Arguments of `frameloop topology`.
#[derive(clap::Args, Debug)]
pub struct TopologyCommand {
    /// Sysfs root to read: the live /sys, or a tree recorded by scripts/record-sysfs.sh.
    #[arg(long, default_value = "/sys")]
    pub sysfs: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `frameloop reload`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "pid_file"])))]
pub struct ReloadCommand {
    /// Process id of the running `frameloop run`.
    #[arg(long)]
    pub pid: Option<i32>,
    /// File holding that process id, as written by `frameloop run
    /// --pid-file`; refused unless the appliance that wrote it still runs
    /// and holds the file (a stale file's pid may be another process's now).
    #[arg(long, value_name = "PATH")]
    pub pid_file: Option<PathBuf>,
}

impl From<ConsumeCommand> for ConsumeArgs {
    fn from(c: ConsumeCommand) -> Self {
        ConsumeArgs { socket: c.socket, count: c.count, samples: c.samples, spin_us: c.spin_us }
    }
}

impl From<TopologyCommand> for TopologyArgs {
    fn from(c: TopologyCommand) -> Self {
        TopologyArgs { sysfs: c.sysfs, json: c.json }
    }
}

impl From<ReloadCommand> for ReloadArgs {
    fn from(c: ReloadCommand) -> Self {
        ReloadArgs { pid: c.pid, pid_file: c.pid_file }
    }
}
