//! The `frameloop` command: run the appliance, benchmark it, send test
//! frames, record and replay captures, and check configs.

use clap::{Parser, Subcommand};
use frameloop::app;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "frameloop",
    version,
    about = "Low-latency sensor ingest: UDP frames into a GPU-resident processing loop",
    long_about = "frameloop takes sensor frames off the network into a frame ring the GPU can read, \
runs a chain of operators on every frame in a persistent GPU-resident loop (or its CPU twin), \
and records each frame's end-to-end latency, segment by segment, in HDR histograms.\n\n\
Start with `frameloop bench`: it needs no configuration and shows the latency table."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the appliance and a loopback sender in one process, then print the latency table.
    Bench(app::BenchArgs),
    /// Run the appliance until SIGINT/SIGTERM (or --duration), then print the summary.
    Run(app::RunArgs),
    /// Send emulated sensor frames (native frameloop datagrams) to an appliance.
    Send(app::SendCommand),
    /// Check a config file and report every problem at once.
    Validate(app::ValidateArgs),
    /// Ask a running `frameloop run` to re-read its config (sends SIGHUP, like `systemctl reload`).
    #[command(long_about = "Ask a running `frameloop run` to re-read its config file, as \
`systemctl reload frameloop` does for the service: operator parameters and the chain's shape change \
between two frames without losing any; a change that needs a restart, or an invalid config, changes \
nothing. The appliance's log says what changed.")]
    Reload(frameloop::reload::ReloadArgs),
    /// Record the UDP datagrams sent to an address as pcapng, with nanosecond receive times.
    #[command(long_about = "Record the UDP datagrams sent to --bind into a pcapng file, one packet per \
datagram with its real source address and a nanosecond receive time, until --duration, --count or \
SIGINT/SIGTERM. tcpdump, tshark and Wireshark read the file; `frameloop replay` replays it.\n\n\
To record what a running appliance receives, use `frameloop run --record FILE.pcapng` instead.")]
    Record(frameloop::capture::RecordArgs),
    /// Replay a pcap/pcapng capture into a running appliance (--to) or in-process.
    #[command(long_about = "Replay the UDP datagrams of a pcap or pcapng capture (from tcpdump, tshark, \
Wireshark, `frameloop record` or `frameloop run --record`).\n\n\
With --to ADDR the datagrams are sent to a running appliance, paced on the capture's timestamps \
(--speed scales, --max-rate sends as fast as possible). Without --to they go in-process into \
reassembly and the CPU operator chain of --config (native datagrams, or RFC 4175 RTP video when \
the config has an [rtp] section); the result is the same on every run.\n\n\
A summary (frames, datagrams, packets skipped by reason) is printed at the end. A truncated or \
corrupt capture is replayed up to the damage, then reported with a non-zero exit status.")]
    Replay(ReplayCommand),
    /// Attach to a running appliance's output ring and print each output as it arrives.
    Consume(frameloop::output::ConsumeArgs),
    /// Show the GPUs, NICs, their PCIe/NUMA relationships and each NUMA node's CPUs.
    Topology(frameloop::topology::TopologyArgs),
}

/// `frameloop replay`: the replay arguments and the config for in-process replay.
#[derive(clap::Args)]
struct ReplayCommand {
    #[command(flatten)]
    replay: frameloop::capture::ReplayArgs,
    /// In-process: config giving the ring, reassembly and chain; with an [rtp]
    /// section the datagrams are assembled as RFC 4175 video [default: embedded defaults].
    #[arg(long, short)]
    config: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    let _ = frameloop::service::logging::init_logging();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(a) => app::bench(&a),
        Command::Run(a) => app::run(&a),
        Command::Send(a) => app::send(&a),
        Command::Validate(a) => app::validate(&a),
        Command::Record(a) => app::record(&a),
        Command::Replay(a) => app::replay(&a.replay, a.config.as_deref()),
        Command::Topology(a) => return finish(frameloop::topology::command(&a), |_| 1),
        Command::Consume(a) => return finish(frameloop::output::consume(&a), |_| 1),
        Command::Reload(a) => return finish(frameloop::reload::send_reload(&a), |_| 1),
    };
    finish(result, app::AppError::exit_code)
}

/// The exit status of a command, its error (if any) printed first.
fn finish<E: std::fmt::Display>(result: Result<(), E>, exit_code: impl FnOnce(&E) -> u8) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("frameloop: {e}");
            ExitCode::from(exit_code(&e))
        }
    }
}
