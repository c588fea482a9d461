//! On a GPU machine: the RDMA ring in GPU memory is exported as a dma-buf
//! (cuMemGetHandleForAddressRange), and the registration path is followed
//! as far as this machine allows, recording where it stopped.
//!
//! Run: `cargo test --test rdma_gpu -- --ignored --nocapture`; the record
//! is printed as one JSON line starting with `rdma_gpu_record`.

use frameloop::rdma::dmabuf::{DeviceRingMemory, GPU_PAGE, gpu_rdma_support};
use frameloop::rdma::{Decision, RdmaConfig, RingRegion, SidewayVerbs, Transport, decide};
use frameloop::ring::layout::ring_bytes;

#[test]
#[ignore = "needs a GPU"]
fn gpu_ring_exports_as_dmabuf_and_registration_is_followed_until_it_needs_a_device() {
    let info = frameloop::gpu::probe(0).expect("this test needs a usable GPU");
    let support = gpu_rdma_support(0).expect("device attributes");
    let ctx = frameloop::gpu::driver::open_context(0).expect("CUDA context");
    let wanted = ring_bytes(64, 65536);
    let mem = DeviceRingMemory::alloc(&ctx, wanted).expect("cuMemAlloc of the ring");
    assert!(mem.len() >= wanted && mem.len().is_multiple_of(GPU_PAGE));

    let export = mem.export_dmabuf();
    let fd_target = export.as_ref().ok().map(|fd| {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|e| format!("unreadable: {e}"))
    });
    if support.dma_buf {
        let target =
            fd_target.clone().unwrap_or_else(|| panic!("export failed: {:?}", export.as_ref().err()));
        assert!(target.contains("dmabuf"), "the exported descriptor is not a dma-buf: {target}");
    } else {
        assert!(export.is_err(), "the GPU reports no dma-buf support, yet the export succeeded");
    }
    let region = mem.region(&export);
    let RingRegion::Device { dptr, len, .. } = &region else { panic!("a GPU ring is a device region") };
    assert_eq!((*dptr, *len), (mem.dptr(), mem.len()));

    let cfg = RdmaConfig { listen: "127.0.0.1:7471".into(), ..Default::default() };
    let outcome = match decide(&SidewayVerbs, Transport::Rdma, &cfg, &region) {
        Ok(Decision::Rdma { method, .. }) => format!("registered: {}", method.describe()),
        Ok(Decision::Udp { reason }) => panic!("transport rdma never falls back: {reason}"),
        Err(why) => format!("stopped: {why}"),
    };
    let record = serde_json::json!({
        "gpu": info.name,
        "compute_capability": info.compute_capability,
        "driver_version": info.driver_version,
        "gpu_direct_rdma_supported": support.gpu_direct_rdma,
        "dma_buf_supported": support.dma_buf,
        "rdma_writes_ordering": support.writes_ordering,
        "ring_bytes": mem.len(),
        "dmabuf_export": match &export { Ok(_) => "ok".to_string(), Err(e) => e.to_string() },
        "dmabuf_fd_target": fd_target,
        "registration": outcome,
    });
    println!("rdma_gpu_record {record}");
}
