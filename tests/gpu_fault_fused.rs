//! A kernel fault inside the fused chain surfaces as an error naming the
//! fused chain and the frame, not as a hang (ignored without a GPU; its own
//! test binary because a fault leaves the process's CUDA context unusable).

mod gpu_fault_support;

use frameloop::config::LoopConfig;
use frameloop::fragment::Fragment;
use frameloop::gpu::executor::{ExecutorOptions, GpuRuntime, ResidentExecutor, chain_flags};
use frameloop::gpu::fused::FusedChain;
use frameloop::gpu::nvrtc::CacheDir;
use frameloop::gpu::test_rings::MappedRings;
use frameloop::ops::default_chain;
use frameloop::ring::OverrunPolicy;
use gpu_fault_support::{run_into_fault_at_third_frame, tear_down_and_drop_return};
use std::sync::Arc;

#[test]
#[ignore = "needs a GPU"]
fn a_fault_in_the_fused_chain_names_it_and_the_frame() {
    let rt = GpuRuntime::open(0, CacheDir::Disabled).unwrap();
    let rings = MappedRings::new(&rt, 8, 8192, 64, OverrunPolicy::Every).unwrap();
    rings.frames.take_reader_for_device();
    let chain = default_chain();
    let mut fused = FusedChain::encode(&chain, 8192).unwrap();
    fused.push_fault_at(3).unwrap();
    let mut opts = ExecutorOptions::new(LoopConfig::default());
    opts.fused = Some(fused);
    let mut ex = ResidentExecutor::new(
        Arc::clone(&rt),
        Fragment::new("main"),
        Arc::clone(&rings.frames),
        Arc::clone(&rings.results),
        chain_flags(&chain),
        opts,
    )
    .unwrap();
    let mut w = rings.frames.writer().unwrap();
    let message = run_into_fault_at_third_frame(&mut ex, &mut w);
    assert!(message.contains("fused chain (unpack → fir → stats+threshold → fault_at)"), "{message}");
    assert!(message.contains("loop.fused_chain = \"off\""), "{message}");
    assert!(message.contains("ring sequence 3"), "{message}");
    assert_eq!(ex.results_published(), 2, "the faulting frame published nothing");
    tear_down_and_drop_return(ex);
}
