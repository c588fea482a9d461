//! What the fault tests share: run a launched loop into a fault that
//! strikes at ring sequence 3, and check that tear-down still returns.

use frameloop::gpu::GpuError;
use frameloop::gpu::ResidentExecutor;
use frameloop::gpu::bench::publish;
use frameloop::ring::RingWriter;
use std::time::{Duration, Instant};

/// Publishes two frames that must be processed, then the faulting third;
/// returns the error the loop reports (panics if it hangs or succeeds).
pub fn run_into_fault_at_third_frame(ex: &mut ResidentExecutor, w: &mut RingWriter) -> String {
    ex.launch().unwrap();
    for i in 0..2u64 {
        publish(w, 1, i, 8192).unwrap();
        let t = Instant::now();
        while !ex.result_ready(i) {
            assert!(t.elapsed() < Duration::from_secs(2), "frame {i} was not processed");
        }
    }
    publish(w, 1, 2, 8192).unwrap();
    let t = Instant::now();
    let outcome = loop {
        if let Some(outcome) = ex.poll() {
            break outcome;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "the fault did not surface: the loop hangs");
    };
    outcome.expect_err("the loop must report the fault")
}

/// The context is unusable after a fault; tear-down must still return (with the fault).
pub fn tear_down_returns(ex: &mut ResidentExecutor) {
    let t = Instant::now();
    let _: Result<_, GpuError> = ex.tear_down();
    assert!(t.elapsed() < Duration::from_secs(10));
}
