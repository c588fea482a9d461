//! What the fault tests share: run a launched loop into a fault that
//! strikes at ring sequence 3, and check that tear-down and drop still return.

use frameloop::gpu::GpuError;
use frameloop::gpu::ResidentExecutor;
use frameloop::gpu::test_rings::publish;
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
    outcome.expect_err("the loop must report the fault").to_string()
}

/// The context is unusable after a fault; tear-down must still return (with
/// the fault), the executor must say it is wedged, and dropping it must
/// return promptly (it leaks what the device may touch instead of freeing).
pub fn tear_down_and_drop_return(mut ex: ResidentExecutor) {
    let t = Instant::now();
    let _: Result<_, GpuError> = ex.tear_down();
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(ex.is_wedged(), "a fault marks the executor wedged");
    let t = Instant::now();
    drop(ex);
    assert!(t.elapsed() < Duration::from_secs(1), "drop after a fault blocked for {:?}", t.elapsed());
}
