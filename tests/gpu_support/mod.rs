//! Shared by the GPU tests that drive a resident executor on mapped rings:
//! the runtime on GPU 0 and the wait for a number of results.
#![allow(dead_code)] // each test binary uses its own subset

use frameloop::gpu::executor::GpuRuntime;
use frameloop::gpu::nvrtc::CacheDir;
use frameloop::ring::{ResultReader, ResultRecord};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The runtime on GPU 0, kernels compiled afresh (no cubin cache).
pub fn runtime() -> Arc<GpuRuntime> {
    GpuRuntime::open(0, CacheDir::Disabled).expect("a usable GPU")
}

/// Drains `reader` into `out` until it holds `n` results; fails after `within`.
pub fn wait_results(reader: &mut ResultReader, out: &mut Vec<ResultRecord>, n: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while out.len() < n {
        reader.drain(out);
        assert!(Instant::now() < deadline, "only {} of {n} results arrived", out.len());
    }
}
