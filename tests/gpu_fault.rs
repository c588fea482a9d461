//! A kernel fault inside the resident loop surfaces as an error naming the
//! stage, not as a hang (ignored without a GPU; its own test binary because a
//! fault leaves the process's CUDA context unusable).

mod gpu_fault_support;

use frameloop::config::LoopConfig;
use frameloop::fragment::Fragment;
use frameloop::fragment::{ComputeContext, FragmentError, GpuResidentOperator, OperatorSpec, PortMemory};
use frameloop::gpu::driver::{LaunchDims, launch_raw};
use frameloop::gpu::executor::{ExecutorOptions, GpuRuntime, ResidentExecutor};
use frameloop::gpu::nvrtc::CacheDir;
use frameloop::gpu::operators::UnpackOp;
use frameloop::gpu::test_rings::MappedRings;
use frameloop::ops::SampleFormat;
use frameloop::ring::OverrunPolicy;
use gpu_fault_support::{run_into_fault_at_third_frame, tear_down_and_drop_return};
use std::sync::Arc;

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
    let message = run_into_fault_at_third_frame(&mut ex, &mut w);
    assert!(message.contains("stage faulty"), "{message}");
    assert!(message.contains("ring sequence 3"), "{message}");
    tear_down_and_drop_return(ex);
}
