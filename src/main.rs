//! The `frameloop` command: run the appliance, benchmark it, send test
//! frames, record and replay captures, and check configs. The command line
//! lives in [`cli`]; the appliance in the `frameloop` library.

mod cli;

fn main() -> std::process::ExitCode {
    let _ = frameloop::service::logging::init_logging();
    cli::main()
}
