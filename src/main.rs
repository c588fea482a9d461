//! The `frameloop` command: run the appliance, benchmark it, send test
//! frames, and check configs.

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
    Send(frameloop::sender::SendArgs),
    /// Check a config file and report every problem at once.
    Validate(app::ValidateArgs),
}

fn main() -> ExitCode {
    let _ = frameloop::service::logging::init_logging();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(a) => app::bench(&a),
        Command::Run(a) => app::run(&a),
        Command::Send(a) => app::send(&a),
        Command::Validate(a) => app::validate(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("frameloop: {e}");
            ExitCode::FAILURE
        }
    }
}
