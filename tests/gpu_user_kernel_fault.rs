//! A fault in a user kernel (`__trap()` at ring sequence 3) surfaces as an
//! error naming the operator by its entry and the frame, and tear-down and
//! drop still return (ignored without a GPU; its own test binary because a
//! fault leaves the process's CUDA context unusable).

mod gpu_fault_support;

use frameloop::config::LoopConfig;
use frameloop::gpu::executor::{ExecutorOptions, GpuRuntime, ResidentExecutor, chain_flags};
use frameloop::gpu::nvrtc::CacheDir;
use frameloop::gpu::operators::{ChainLayout, build_main_fragment};
use frameloop::gpu::test_rings::MappedRings;
use frameloop::ops::user_kernel::UserKernelSpec;
use frameloop::ops::{OpSpec, SampleFormat};
use frameloop::ring::OverrunPolicy;
use gpu_fault_support::{run_into_fault_at_third_frame, tear_down_and_drop_return};
use std::path::Path;
use std::sync::Arc;

#[test]
#[ignore = "needs a GPU"]
fn a_user_kernel_fault_names_the_kernel_and_the_frame() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/user_kernels/trap_at.cu");
    let spec: UserKernelSpec = toml::from_str(&format!(
        "source = {:?}\nentry = \"trap_at\"\nparams = {{ at = 3 }}\nparam_types = [\"at: u64\"]",
        source.display().to_string()
    ))
    .unwrap();
    let chain = vec![
        OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0, offset: 0.0 },
        OpSpec::Kernel(spec),
        OpSpec::Stats,
    ];
    let rt = GpuRuntime::open(0, CacheDir::Disabled).unwrap();
    let rings = MappedRings::new(&rt, 8, 8192, 64, OverrunPolicy::Every).unwrap();
    rings.frames.take_reader_for_device();
    let fragment = build_main_fragment(&chain, 8192, ChainLayout::default()).unwrap();
    let mut opts = ExecutorOptions::new(LoopConfig::default());
    opts.stage_markers = true;
    let mut ex = ResidentExecutor::new(
        Arc::clone(&rt),
        fragment,
        Arc::clone(&rings.frames),
        Arc::clone(&rings.results),
        chain_flags(&chain),
        opts,
    )
    .unwrap_or_else(|e| panic!("building the loop: {e}"));
    let mut w = rings.frames.writer().unwrap();
    let message = run_into_fault_at_third_frame(&mut ex, &mut w);
    assert!(message.contains("stage chain[1] kernel \"trap_at\""), "{message}");
    assert!(message.contains("ring sequence 3"), "{message}");
    tear_down_and_drop_return(ex);
}
