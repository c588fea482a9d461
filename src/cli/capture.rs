//! `frameloop record` and `frameloop replay`: their flags, turned into the
//! library's [`RecordArgs`] and [`ReplayArgs`].

use frameloop::capture::{RecordArgs, ReplayArgs};
use std::path::PathBuf;

/// Arguments of `frameloop record`.
#[derive(Debug, clap::Args)]
pub struct RecordCommand {
    /// pcapng file to write (tcpdump, tshark and Wireshark read it).
    #[arg(long, short)]
    pub out: PathBuf,
    /// Stop after this many seconds (default: until SIGINT/SIGTERM).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Stop after this many datagrams.
    #[arg(long)]
    pub count: Option<u64>,
    /// Local address and port to receive on.
    #[arg(long, default_value = "0.0.0.0:5000")]
    pub bind: std::net::SocketAddr,
}

/// Arguments of `frameloop replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayFlags {
    /// pcap or pcapng capture (from tcpdump, tshark, Wireshark or `frameloop record`).
    pub file: PathBuf,
    /// Send the datagrams to a running appliance at this address; without it
    /// the capture is replayed in-process into reassembly and the operator chain.
    #[arg(long)]
    pub to: Option<std::net::SocketAddr>,
    /// Timing factor: 1 keeps the capture's timing, 4 replays four times faster.
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Send as fast as possible, ignoring the capture's timing.
    #[arg(long)]
    pub max_rate: bool,
    /// Replay only datagrams to this destination port (repeatable).
    #[arg(long = "port")]
    pub ports: Vec<u16>,
    /// Replay only native datagrams of this stream id (repeatable).
    #[arg(long = "stream")]
    pub streams: Vec<u32>,
    /// In-process: the datagrams are RFC 4175 RTP video (geometry from the config's `[rtp]` section).
    #[arg(long)]
    pub rtp: bool,
    /// Print the progress line even when stderr is not a terminal.
    #[arg(long)]
    pub progress: bool,
    /// Longest wait between two datagrams when pacing, in milliseconds:
    /// longer gaps in the capture's timestamps (a clock jump, a pause while
    /// recording) are shortened to this and counted in the summary.
    #[arg(long, default_value_t = ReplayArgs::DEFAULT_MAX_GAP_MS)]
    pub max_gap_ms: u64,
}

/// `frameloop replay`: the replay arguments and the config for in-process replay.
#[derive(clap::Args)]
pub struct ReplayCommand {
    #[command(flatten)]
    pub replay: ReplayFlags,
    /// In-process: config giving the ring, reassembly and chain; with an [rtp]
    /// section the datagrams are assembled as RFC 4175 video [default: embedded defaults].
    #[arg(long, short)]
    pub config: Option<PathBuf>,
}

impl From<RecordCommand> for RecordArgs {
    fn from(c: RecordCommand) -> Self {
        RecordArgs { out: c.out, duration: c.duration, count: c.count, bind: c.bind }
    }
}

impl From<ReplayFlags> for ReplayArgs {
    fn from(f: ReplayFlags) -> Self {
        ReplayArgs {
            file: f.file,
            to: f.to,
            speed: f.speed,
            max_rate: f.max_rate,
            ports: f.ports,
            streams: f.streams,
            rtp: f.rtp,
            progress: f.progress,
            max_gap_ms: f.max_gap_ms,
        }
    }
}
