//! On a GPU machine (no NIC needed):
//!
//! - the RDMA ring in GPU memory is exported as a dma-buf
//!   (cuMemGetHandleForAddressRange), and the registration path is followed
//!   as far as this machine allows, recording where it stopped;
//! - the resident CUDA loop consumes a frame ring in GPU memory that an
//!   emulated NIC writes the way the RDMA sensor does (slot header and
//!   payload, then the head-sequence trailer, as ordered host-to-device
//!   copies), and every result equals the CPU chain's; the host reads the
//!   ring's sequences back only with copies on the ring's own stream;
//! - those host copies keep their order and cross the staging size.
//!
//! Run: `cargo test --test rdma_gpu -- --ignored --nocapture --test-threads=1`;
//! the records are printed as JSON lines starting with `rdma_gpu_record`
//! and `rdma_gpu_ring_record`.

use frameloop::backend::ResidentLoop;
use frameloop::config::LoopConfig;
use frameloop::gpu::CudaLoop;
use frameloop::gpu::device_memory::{DeviceRingMemory, GPU_PAGE};
use frameloop::gpu::executor::GpuRuntime;
use frameloop::gpu::nvrtc::CacheDir;
use frameloop::gpu::test_rings::fill_frame;
use frameloop::ops::{CpuChain, OpSpec, SampleFormat, default_chain};
use frameloop::rdma::dmabuf::{device_region, gpu_rdma_support};
use frameloop::rdma::remote::{
    ConsumerState, Credit, CreditWindow, HEAD_SEQ_OFFSET, RemoteFrame, RingDescriptor, trailer,
};
use frameloop::rdma::{Decision, GpuFrameRing, RdmaConfig, RingRegion, SidewayVerbs, Transport, decide};
use frameloop::ring::layout::{
    RESULT_GPU_CLOCK, RESULTS_OFFSET, RING_LAYOUT_VERSION, RING_MAGIC, SLOT_COMPLETE, SLOT_PAYLOAD_OFFSET,
    result_ring_bytes, ring_bytes,
};
use frameloop::ring::{FrameRing, OverrunPolicy, ResultReader, ResultRecord, ResultRing, RingSequences};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[test]
#[ignore = "needs a GPU"]
fn gpu_ring_exports_as_dmabuf_and_registration_is_followed_until_it_needs_a_device() {
    let info = frameloop::gpu::probe(0).expect("this test needs a usable GPU");
    let support = gpu_rdma_support(0).expect("device attributes");
    let ctx = frameloop::gpu::driver::open_context(0).expect("CUDA context");
    let wanted = ring_bytes(64, 65536).unwrap();
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
    let region = device_region(&mem, &export);
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

const SLOTS: usize = 8;
const FRAME_BYTES: usize = 8192;
const FRAMES: u64 = 400;

/// Aborts the process if the test has not finished in time: a copy that
/// waited for the whole device would hang behind the resident graph.
fn watchdog(limit: Duration) -> mpsc::Sender<()> {
    let (done, wait) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
            eprintln!(
                "rdma_gpu: no progress within {limit:?}; a host copy probably waited for the resident graph"
            );
            std::process::abort();
        }
    });
    done
}

/// The NIC's view of the ring, as the appliance's descriptor gives it.
fn descriptor_of(ring: &FrameRing) -> RingDescriptor {
    let mem = ring.memory();
    RingDescriptor {
        ring_addr: mem.device_ptr().expect("a GPU ring has a device address"),
        ring_len: mem.len() as u64,
        rkey: 0,
        slot_count: ring.slot_count() as u32,
        slot_stride: ring.slot_stride() as u32,
        payload_capacity: ring.payload_capacity() as u32,
        policy: ring.policy().code(),
    }
}

/// Writes frame `index` into ring sequence `seq` as the RDMA sensor does:
/// one write of slot header and payload, then the 8-byte trailer to
/// `head_seq`, in that order on the ring's copy stream, synchronised.
fn nic_write(
    ring: &FrameRing,
    d: &RingDescriptor,
    seq: u64,
    frame: &RemoteFrame,
    payload: &[u8],
    buf: &mut Vec<u8>,
) {
    buf.clear();
    buf.resize(SLOT_PAYLOAD_OFFSET, 0);
    frame.encode_header(buf);
    buf.extend_from_slice(payload);
    assert_eq!(d.slot_write_len(payload.len()), Some(buf.len()));
    let slot_offset = (d.slot_addr(seq) - d.ring_addr) as usize;
    let copies = ring.memory().device_copies().expect("a GPU ring is written by copies");
    copies
        .write_in_order(&[(slot_offset, buf), (HEAD_SEQ_OFFSET, &trailer(seq))])
        .expect("host-to-device copies into the GPU ring");
}

/// Waits until the credit rule lets the NIC write `seq`, reading the
/// consumer words back the way the sensor's RDMA READ would.
fn wait_for_credit(ring: &FrameRing, credits: &mut CreditWindow, seq: u64, lp: &CudaLoop) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while credits.check(seq) == Credit::Refresh {
        let s = ring.try_sequences().expect("device-to-host copy of the sequences");
        credits.update(ConsumerState { claimed: s.claimed, consumed: s.consumed });
        assert!(lp.is_launched(), "the resident loop stopped while frame {seq} waited for a slot");
        assert!(Instant::now() < deadline, "no slot for ring sequence {seq}: consumer at {s:?}");
    }
}

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-5 * a.abs().max(b.abs()).max(1.0)
}

/// What differs between a GPU result and the CPU chain's output for the same payload.
fn mismatches(r: &ResultRecord, cpu: &frameloop::ops::ChainOutput) -> Vec<String> {
    let mut bad = Vec::new();
    if r.result_flags != cpu.result_flags() | RESULT_GPU_CLOCK {
        bad.push(format!("flags {:#x} vs {:#x}", r.result_flags, cpu.result_flags() | RESULT_GPU_CLOCK));
    }
    if r.output_len as usize != cpu.output_len {
        bad.push(format!("output_len {} vs {}", r.output_len, cpu.output_len));
    }
    if let Some(s) = cpu.stats
        && !(close(r.sum, s.sum) && r.min == s.min && r.max == s.max && close(r.mean, s.mean))
    {
        bad.push(format!("stats {:?} vs {:?}", (r.sum, r.min, r.max, r.mean), (s.sum, s.min, s.max, s.mean)));
    }
    if let Some(detect) = cpu.detect
        && (r.detect_count, r.first_detect_index) != detect
    {
        bad.push(format!("detect {:?} vs {detect:?}", (r.detect_count, r.first_detect_index)));
    }
    bad
}

/// `CudaLoop` over a frame ring in GPU memory, fed by an emulated NIC:
/// every frame is processed once, in order, and its result equals the CPU
/// chain's on fresh random payloads (result records poisoned first); head
/// and consumed read back through the host copies end at the last frame.
#[test]
#[ignore = "needs a GPU"]
fn resident_loop_consumes_a_gpu_memory_ring_written_like_a_nic_does() {
    let done = watchdog(Duration::from_secs(240));
    let rt = GpuRuntime::open(0, CacheDir::Disabled).expect("a usable GPU");
    let seed = 0x6d61_7267 ^ frameloop::clock::realtime_ns();
    let chains = [
        default_chain(),
        vec![
            OpSpec::Unpack { format: SampleFormat::U12, scale: 0.02, offset: -1.5 },
            OpSpec::Fir { taps: vec![0.2, 0.6, 0.2] },
            OpSpec::Filter2d { width: 48, kernel: [0.0, 0.25, 0.0, 0.25, 0.5, -0.25, 0.0, -0.25, 0.0] },
            OpSpec::Stats,
            OpSpec::Threshold { level: 60.0 },
        ],
    ];
    for (chain_index, chain) in chains.iter().enumerate() {
        let gpu_ring =
            GpuFrameRing::new(&rt.ctx, SLOTS, FRAME_BYTES, OverrunPolicy::Every).expect("GPU ring");
        let ring = Arc::clone(gpu_ring.ring());
        assert!(ring.is_device_only() && ring.memory().kind() == "cuda-device");
        assert!(ring.writer().is_none() && ring.take_writer_for_remote(), "the NIC is the only writer");

        // The header the host initialised, as the GPU sees it.
        let mut header = [0u8; 256];
        ring.memory().device_copies().unwrap().read(0, &mut header).expect("read the header back");
        let word = |o: usize| u32::from_le_bytes(header[o..o + 4].try_into().unwrap());
        assert_eq!((word(0), word(4), word(8)), (RING_MAGIC, RING_LAYOUT_VERSION, SLOTS as u32));
        assert_eq!((word(12), word(16)), (ring.slot_stride() as u32, FRAME_BYTES as u32));
        assert_eq!(ring.try_sequences().unwrap(), RingSequences::default());

        let results =
            ResultRing::new(Box::new(rt.mapped(result_ring_bytes(1024).unwrap()).unwrap()), 1024).unwrap();
        let rmem = results.memory();
        // SAFETY: the record area lies inside the mapping; nothing reads or writes it yet.
        unsafe {
            std::ptr::write_bytes(rmem.as_ptr().add(RESULTS_OFFSET), 0xa5, rmem.len() - RESULTS_OFFSET)
        };
        let mut reader = ResultReader::new(Arc::clone(&results));
        let mut lp = CudaLoop::new(
            Arc::clone(&rt),
            Arc::clone(&ring),
            Arc::clone(&results),
            chain,
            LoopConfig::default(),
        )
        .expect("the loop builds over a GPU ring");
        lp.launch().expect("launch");
        assert!(lp.is_launched());

        let d = descriptor_of(&ring);
        let mut credits = CreditWindow::new(SLOTS as u32);
        let mut buf = Vec::new();
        let mut payload = vec![0u8; FRAME_BYTES];
        let mut posted = Vec::new();
        let t0 = Instant::now();
        for seq in 1..=FRAMES {
            let index = seq - 1;
            let len = if index % 5 == 2 { 1 + (index as usize * 977) % FRAME_BYTES } else { FRAME_BYTES };
            fill_frame(seed, index, &mut payload[..len]);
            wait_for_credit(&ring, &mut credits, seq, &lp);
            let now = frameloop::clock::realtime_ns();
            let frame = RemoteFrame {
                ring_seq: seq,
                frame_seq: index,
                stream_id: 3,
                payload_len: len as u32,
                sender_ts_ns: now,
                posted_ns: now,
            };
            nic_write(&ring, &d, seq, &frame, &payload[..len], &mut buf);
            posted.push((len, now));
        }
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while (out.len() as u64) < FRAMES {
            reader.drain(&mut out);
            assert!(Instant::now() < deadline, "only {} of {FRAMES} results arrived", out.len());
        }
        let elapsed = t0.elapsed();
        let mut seq_read = ring.sequences();
        while seq_read.consumed < FRAMES && Instant::now() < deadline {
            seq_read = ring.sequences();
        }
        assert_eq!(seq_read.head, FRAMES, "head read back through the copy stream");
        assert_eq!(seq_read.consumed, FRAMES, "every slot handed back, read through the copy stream");
        assert_eq!((ring.head(), ring.consumed()), (FRAMES, FRAMES));
        assert!(lp.is_launched(), "the graph stays launched across frames");
        let stats = lp.tear_down().expect("tear-down");
        assert_eq!(stats.frames_processed, FRAMES);

        assert_eq!(out.iter().map(|r| r.ring_seq).collect::<Vec<_>>(), (1..=FRAMES).collect::<Vec<_>>());
        let mut cpu = CpuChain::new(chain, FRAME_BYTES).unwrap();
        for (r, &(len, posted_ns)) in out.iter().zip(&posted) {
            let i = r.ring_seq - 1;
            assert_eq!(
                (r.frame_seq, r.stream_id, r.slot_flags),
                (i, 3, SLOT_COMPLETE),
                "frame {i}: slot header"
            );
            assert_eq!((r.sender_ts_ns, r.published_ns), (posted_ns, posted_ns), "frame {i}: sender times");
            assert!(r.done_ns >= r.detect_ns && r.detect_ns > 0, "frame {i}: GPU times");
            fill_frame(seed, i, &mut payload[..len]);
            let want = cpu.run(&payload[..len]);
            let bad = mismatches(r, &want);
            assert!(bad.is_empty(), "chain {chain_index}, frame {i} ({len} bytes): {}", bad.join(", "));
        }
        let record = serde_json::json!({
            "gpu": rt.info.name,
            "chain": chain_index,
            "frames": FRAMES,
            "slots": SLOTS,
            "frame_bytes": FRAME_BYTES,
            "ring_bytes": ring.memory().len(),
            "dmabuf": match gpu_ring.region() {
                RingRegion::Device { dmabuf: Ok(_), .. } => "exported".to_string(),
                RingRegion::Device { dmabuf: Err(e), .. } => e.to_string(),
                RingRegion::Host { .. } => unreachable!("a GPU ring is a device region"),
            },
            "elapsed_ms": elapsed.as_secs_f64() * 1e3,
        });
        println!("rdma_gpu_ring_record {record}");
        drop(lp);
    }
    let _ = done.send(());
}

/// The GPU ring's host copies: writes land in the order given (a later
/// write over an earlier one wins), pieces larger than the page-locked
/// staging go through in parts both ways, and copies past the allocation
/// are refused before any byte moves.
#[test]
#[ignore = "needs a GPU"]
fn gpu_ring_copies_keep_order_and_cross_the_staging_size() {
    use frameloop::gpu::device_copy::STAGING_BYTES;
    use frameloop::ring::{CopyError, DeviceCopies};
    let done = watchdog(Duration::from_secs(120));
    let ctx = frameloop::gpu::driver::open_context(0).expect("CUDA context");
    let mem = DeviceRingMemory::alloc(&ctx, 3 * STAGING_BYTES).expect("cuMemAlloc");
    let len = mem.len();
    assert!(len > 2 * STAGING_BYTES);
    let mut zeros = vec![0xffu8; len];
    mem.read(0, &mut zeros).unwrap();
    assert!(zeros.iter().all(|&b| b == 0), "the allocation starts zeroed");

    let mut model = vec![0u8; len];
    let seed = frameloop::clock::realtime_ns();
    let mut first = vec![0u8; STAGING_BYTES + STAGING_BYTES / 2];
    fill_frame(seed, 1, &mut first);
    let mut second = vec![0u8; len - first.len() - 4096];
    fill_frame(seed, 2, &mut second);
    let patch = [0xeeu8; 100];
    let writes: [(usize, &[u8]); 3] = [(0, &first), (first.len() + 4096, &second), (1000, &patch)];
    for (offset, bytes) in writes {
        model[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
    mem.write_in_order(&writes).expect("ordered writes");
    let mut back = vec![0u8; len];
    mem.read(0, &mut back).expect("read back across the staging size");
    let first_diff = back.iter().zip(&model).position(|(a, b)| a != b);
    assert_eq!(first_diff, None, "device bytes differ from the ordered writes");

    let past = mem.write_in_order(&[(0, &patch), (len - 10, &patch)]);
    assert_eq!(past, Err(CopyError::OutOfBounds { offset: len - 10, len: 100, capacity: len }));
    mem.read(0, &mut back[..100]).unwrap();
    assert_eq!(&back[..100], &model[..100], "a refused batch writes nothing");
    assert!(matches!(mem.read(len, &mut back[..1]), Err(CopyError::OutOfBounds { .. })));
    let _ = done.send(());
}
