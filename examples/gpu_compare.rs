//! Runs the CUDA latency comparison (what `frameloop bench --backend cuda
//! --compare` prints) and writes the table and the JSON report.
//! Usage: gpu_compare [frames] [json-path]

use frameloop::gpu::bench::{CompareOptions, run_compare};

fn main() {
    let mut args = std::env::args().skip(1);
    let mut o = CompareOptions::default();
    if let Some(frames) = args.next() {
        o.frames = frames.parse().expect("frames must be a number");
    }
    let json_path = args.next();
    match run_compare(&o) {
        Ok(report) => {
            println!("{}", report.table());
            if let Some(p) = json_path {
                std::fs::write(&p, serde_json::to_string_pretty(&report).expect("serialisable"))
                    .unwrap_or_else(|e| eprintln!("cannot write {p}: {e}"));
            }
        }
        Err(e) => {
            eprintln!("gpu_compare: {e}");
            std::process::exit(1);
        }
    }
}
