//! Shared by the GPU tests that drive a resident executor on mapped rings:
//! the runtime on GPU 0, the wait for a number of results, and fresh random
//! inputs (seed printed for replay).
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

/// A small xorshift generator: fresh inputs every run, seed printed for replay.
pub struct Rng(u64);

impl Rng {
    pub fn fresh(test: &str) -> Self {
        let seed =
            std::env::var("FRAMELOOP_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
                    | 1
            });
        eprintln!("{test}: FRAMELOOP_TEST_SEED={seed}");
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Uniform in [lo, hi).
    pub fn float(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    pub fn floats(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.float(lo, hi)).collect()
    }
}
