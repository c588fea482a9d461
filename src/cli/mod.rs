//! The `frameloop` command line: its clap structs, the glue that turns
//! parsed flags into library calls, and the benchmark harness of `bench
//! --compare`. The library (`frameloop::`) knows nothing of it: it takes
//! plain option structs and enums.

mod bench;
mod capture;
mod choices;
mod loopback;
mod run;
mod send;
mod tools;

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
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the appliance and a loopback sender in one process, then print the latency table.
    Bench(bench::BenchCommand),
    /// Run the appliance until SIGINT/SIGTERM (or --duration), then print the summary.
    Run(run::RunCommand),
    /// Send emulated sensor frames (native frameloop datagrams) to an appliance.
    Send(send::SendCommand),
    /// Check a config file and report every problem at once.
    Validate(run::ValidateCommand),
    /// Ask a running `frameloop run` to re-read its config (sends SIGHUP, like `systemctl reload`).
    #[command(long_about = "Ask a running `frameloop run` to re-read its config file, as \
`systemctl reload frameloop` does for the service: operator parameters and the chain's shape change \
between two frames without losing any; a change that needs a restart, or an invalid config, changes \
nothing. The appliance's log says what changed.")]
    Reload(tools::ReloadCommand),
    /// Record the UDP datagrams sent to an address as pcapng, with nanosecond receive times.
    #[command(long_about = "Record the UDP datagrams sent to --bind into a pcapng file, one packet per \
datagram with its real source address and a nanosecond receive time, until --duration, --count or \
SIGINT/SIGTERM. tcpdump, tshark and Wireshark read the file; `frameloop replay` replays it.\n\n\
To record what a running appliance receives, use `frameloop run --record FILE.pcapng` instead.")]
    Record(capture::RecordCommand),
    /// Replay a pcap/pcapng capture into a running appliance (--to) or in-process.
    #[command(long_about = "Replay the UDP datagrams of a pcap or pcapng capture (from tcpdump, tshark, \
Wireshark, `frameloop record` or `frameloop run --record`).\n\n\
With --to ADDR the datagrams are sent to a running appliance, paced on the capture's timestamps \
(--speed scales, --max-rate sends as fast as possible). Without --to they go in-process into \
reassembly and the CPU operator chain of --config (native datagrams, or RFC 4175 RTP video when \
the config has an [rtp] section); the result is the same on every run.\n\n\
A summary (frames, datagrams, packets skipped by reason) is printed at the end. A truncated or \
corrupt capture is replayed up to the damage, then reported with a non-zero exit status.")]
    Replay(capture::ReplayCommand),
    /// Attach to a running appliance's output ring and print each output as it arrives.
    Consume(tools::ConsumeCommand),
    /// Show the GPUs, NICs, their PCIe/NUMA relationships and each NUMA node's CPUs.
    Topology(tools::TopologyCommand),
}

/// Parses the command line and runs the command; the exit status says how it went.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(a) => bench::bench(a),
        Command::Run(a) => app::run(&a.into()),
        Command::Send(a) => loopback::send(a),
        Command::Validate(a) => app::validate(&a.into()),
        Command::Record(a) => app::record(&a.into()),
        Command::Replay(a) => app::replay(&a.replay.into(), a.config.as_deref()),
        Command::Topology(a) => return finish(frameloop::topology::command(&a.into()), |_| 1),
        Command::Consume(a) => return finish(frameloop::output::consume(&a.into()), |_| 1),
        Command::Reload(a) => return finish(frameloop::reload::send_reload(&a.into()), |_| 1),
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
