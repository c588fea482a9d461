//! A kernel fault inside the resident loop surfaces as an error naming the
//! stage, not as a hang (ignored without a GPU; its own test binary because a
//! fault leaves the process's CUDA context unusable).

use frameloop::config::LoopConfig;
use frameloop::fragment::Fragment;
use frameloop::fragment::{ComputeContext, FragmentError, GpuResidentOperator, OperatorSpec, PortMemory};
use frameloop::gpu::GpuError;
use frameloop::gpu::bench::{MappedRings, publish};
use frameloop::gpu::driver::{LaunchDims, launch_raw};
use frameloop::gpu::executor::{ExecutorOptions, GpuRuntime, ResidentExecutor};
use frameloop::gpu::nvrtc::CacheDir;
use frameloop::gpu::operators::UnpackOp;
use frameloop::ops::SampleFormat;
use frameloop::ring::OverrunPolicy;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Test-only operator whose kernel writes to an illegal address once the
/// frame's ring sequence reaches `at_seq`.
struct FaultOp {
    at_seq: u64,
}

impl GpuResidentOperator for FaultOp {
    fn name(&self) -> &str {
        "faulty"
    }
    fn setup(&mut self, spec: &mut OperatorSpec) {
        spec.input("in", PortMemory::Unspecified);
    }
    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        let f = ctx.kernel("fl_fault_at")?;
        let (mut desc, mut at) = (ctx.frame_desc(), self.at_seq);
        let mut args = [(&mut desc as *mut u64).cast(), (&mut at as *mut u64).cast()];
        // SAFETY: (const FrameDesc*, uint64_t) matches fl_fault_at.
        unsafe { launch_raw(ctx.stream(), f, LaunchDims::SINGLE, &mut args) }
            .map_err(|e| FragmentError::Operator { operator: "faulty".into(), problem: e.to_string() })
    }
}

#[test]
#[ignore = "needs a GPU"]
fn a_fault_names_its_stage() {
    let rt = GpuRuntime::open(0, CacheDir::Disabled).unwrap();
    let rings = MappedRings::new(&rt, 8, 8192, 64, OverrunPolicy::Every).unwrap();
    rings.frames.take_reader_for_device();
    let mut fragment = Fragment::new("main");
    let unpack = fragment.add_operator(UnpackOp::new("unpack", SampleFormat::U16, 1.0, 0.0, 8192)).unwrap();
    let faulty = fragment.add_operator(FaultOp { at_seq: 3 }).unwrap();
    fragment.add_flow(unpack, "out", faulty, "in").unwrap();
    let mut opts = ExecutorOptions::new(LoopConfig::default());
    opts.stage_markers = true;
    let mut ex = ResidentExecutor::new(
        Arc::clone(&rt),
        fragment,
        Arc::clone(&rings.frames),
        Arc::clone(&rings.results),
        0,
        opts,
    )
    .unwrap();
    let mut w = rings.frames.writer().unwrap();
    ex.launch().unwrap();
    for i in 0..2u64 {
        publish(&mut w, 1, i, 8192).unwrap();
        let t = Instant::now();
        while !ex.result_ready(i) {
            assert!(t.elapsed() < Duration::from_secs(2), "frame {i} was not processed");
        }
    }
    publish(&mut w, 1, 2, 8192).unwrap();
    let t = Instant::now();
    let outcome = loop {
        if let Some(outcome) = ex.poll() {
            break outcome;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "the fault did not surface: the loop hangs");
    };
    let message = outcome.expect_err("the loop must report the fault");
    assert!(message.contains("stage faulty"), "{message}");
    assert!(message.contains("ring sequence 3"), "{message}");
    // The context is unusable now; tear-down must still return (with the fault).
    let t = Instant::now();
    let _: Result<_, GpuError> = ex.tear_down();
    assert!(t.elapsed() < Duration::from_secs(10));
}
