//! The fft operator on a real GPU (ignored without one; run on the GPU
//! machine with `cargo test --test gpu_fft -- --include-ignored --test-threads=1`;
//! cuFFT, libcufft, must be on the loader path besides NVRTC).
//!
//! - `spectrum_matches_the_cpu_bin_by_bin`: unpack → fft through the
//!   fragment API, enqueued on a plain stream and captured into a CUDA graph
//!   (plan made before the capture, and, as the executor does it, during
//!   it), every bin of fresh random frames compared with the rustfft
//!   reference, outputs poisoned first;
//! - `resident_loop_runs_unpack_fft_stats_like_the_host_chain`: the same
//!   chains with stats in the persistent WHILE/IF graph (`CudaLoop`, what
//!   `--backend cuda` runs), 8 KiB and 1 MiB frames, every result compared
//!   with the host chain.
//!
//! Tolerance: cuFFT computes in f32, the reference in f64. A bin may differ
//! from the reference by [`TOLERANCE`] times the largest bin of its frame
//! (an f32 FFT's error is of the order of `eps * log2(n)` times the row's
//! energy, so a small bin next to a large one is only as exact as the large
//! one); a sum or mean of bins by `TOLERANCE` relative; min and max as bins.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaStream, result, sys};

use frameloop::backend::ResidentLoop;
use frameloop::config::LoopConfig;
use frameloop::fragment::{DevicePtr, DeviceRegion, EnqueueTarget, PortDirection};
use frameloop::gpu::CudaLoop;
use frameloop::gpu::executor::GpuRuntime;
use frameloop::gpu::nvrtc::CacheDir;
use frameloop::gpu::operators::fft::cufft_present;
use frameloop::gpu::operators::{ChainLayout, build_main_fragment};
use frameloop::gpu::test_rings::{MappedRings, fill_frame, publish};
use frameloop::ops::{CpuChain, FftOutput, FftSpec, FftWindow, OpSpec, SampleFormat};
use frameloop::ring::layout::{FrameDesc, RESULT_GPU_CLOCK, RESULTS_OFFSET};
use frameloop::ring::{OverrunPolicy, ResultReader, ResultRecord};

/// Largest difference from the reference, relative to the frame's largest bin.
const TOLERANCE: f32 = 1e-4;
const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
/// Byte pattern of poisoned buffers: every f32 is a NaN.
const POISON: u8 = 0xff;

fn runtime() -> Arc<GpuRuntime> {
    assert!(
        cufft_present(),
        "libcufft cannot be loaded: install the CUDA toolkit's cuFFT (or the nvidia-cufft wheel) and put its \
         lib directory on LD_LIBRARY_PATH"
    );
    GpuRuntime::open(0, CacheDir::Disabled).expect("a usable GPU")
}

/// A fresh seed per run, printed so a failure can be replayed.
fn seed(test: &str) -> u64 {
    let seed = std::env::var("FRAMELOOP_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| frameloop::clock::realtime_ns() | 1);
    eprintln!("{test}: FRAMELOOP_TEST_SEED={seed}");
    seed
}

fn fft(n: u32, window: FftWindow, output: FftOutput, scale: Option<f32>) -> OpSpec {
    OpSpec::Fft(FftSpec { n, window, output, scale })
}

/// Chains ending in the fft: row lengths that are powers of two and not,
/// every window and output, a given scale, and a row longer than an 8 KiB frame.
fn fft_chains() -> Vec<Vec<OpSpec>> {
    let u16 = OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0 / 4096.0, offset: -8.0 };
    let u8 = OpSpec::Unpack { format: SampleFormat::U8, scale: 1.0, offset: 0.0 };
    let u12 = OpSpec::Unpack { format: SampleFormat::U12, scale: 0.5, offset: 3.0 };
    vec![
        vec![u16.clone(), fft(1024, FftWindow::Hann, FftOutput::Magnitude, None)],
        vec![u16.clone(), fft(1000, FftWindow::Blackman, FftOutput::Power, None)],
        vec![u8, fft(37, FftWindow::Hamming, FftOutput::Magnitude, Some(1.0))],
        vec![
            u12,
            OpSpec::Fir { taps: vec![0.25, 0.5, 0.25] },
            fft(2, FftWindow::None, FftOutput::Power, None),
        ],
        vec![u16, fft(65_536, FftWindow::Hann, FftOutput::Magnitude, None)],
    ]
}

fn describe(chain: &[OpSpec]) -> String {
    chain
        .iter()
        .map(|op| match op {
            OpSpec::Fft(s) => format!("fft(n {}, {:?}, {:?}, scale {:?})", s.n, s.window, s.output, s.scale),
            op => op.name().to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" → ")
}

/// Frame lengths for frames of at most `max`: full, not a multiple of any
/// row or block, shorter than one row, empty, and random.
fn frame_lengths(max: usize, seed: u64, count: usize) -> Vec<usize> {
    let mut lens = vec![max, max - 1, max - 333, (8 * KIB - 5).min(max), 3, 0, 4099.min(max)];
    let mut r = seed;
    while lens.len() < count {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        lens.push((r % max as u64) as usize + 1);
    }
    lens
}

/// Device memory of one test, freed on drop.
struct Allocations(Vec<DevicePtr>);

impl Allocations {
    fn alloc(&mut self, bytes: usize) -> DevicePtr {
        // SAFETY: a plain device allocation in the current context, freed in Drop.
        let p = unsafe { result::malloc_sync(bytes.max(1)) }.expect("cuMemAlloc");
        self.0.push(p);
        p
    }
}

impl Drop for Allocations {
    fn drop(&mut self) {
        for p in self.0.drain(..) {
            // SAFETY: allocated by `alloc`, freed once; errors ignored (never panic in drop).
            let _ = unsafe { result::free_sync(p) };
        }
    }
}

fn fill(dptr: DevicePtr, byte: u8, bytes: usize) {
    // SAFETY: callers pass regions inside live allocations.
    unsafe { result::memset_d8_sync(dptr, byte, bytes) }.expect("cuMemsetD8");
}

fn upload<T: Copy>(dptr: DevicePtr, data: &[T]) {
    // SAFETY: as in `fill`; T is plain data.
    unsafe { result::memcpy_htod_sync(dptr, data) }.expect("cuMemcpyHtoD");
}

fn download<T: Copy + Default>(dptr: DevicePtr, len: usize) -> Vec<T> {
    let mut out = vec![T::default(); len];
    // SAFETY: as in `fill`; every bit pattern is a valid T for the types used here.
    unsafe { result::memcpy_dtoh_sync(&mut out, dptr) }.expect("cuMemcpyDtoH");
    out
}

/// Checks every bin of one frame; `what` says which frame, for the message.
fn assert_spectrum(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: bin count");
    let largest = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let allowed = TOLERANCE * largest + f32::MIN_POSITIVE;
    let mut worst = (0usize, 0f32);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(!g.is_nan(), "{what}: bin {i} is NaN (never written?), want {w}");
        let d = (g - w).abs();
        if d > worst.1 {
            worst = (i, d);
        }
    }
    assert!(
        worst.1 <= allowed,
        "{what}: bin {} is {} but the reference says {} (difference {}, allowed {allowed} = {TOLERANCE} × largest bin {largest})",
        worst.0,
        got[worst.0],
        want[worst.0],
        worst.1
    );
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Enqueue {
    /// Each operator's work straight on the stream.
    Direct,
    /// The work enqueued once straight on the stream (so the cuFFT plan is
    /// made outside a capture), then captured into a graph (relaxed mode,
    /// as the executor captures) that is launched per frame.
    CapturedAfterPlan,
    /// As the executor does it: the first enqueue is captured, so the
    /// cuFFT plan is made while the stream captures.
    Captured,
}

#[test]
#[ignore = "needs a GPU"]
fn spectrum_matches_the_cpu_bin_by_bin() {
    let rt = runtime();
    rt.ctx.bind_to_thread().unwrap();
    let stream: Arc<CudaStream> = rt.ctx.new_stream().unwrap();
    let seed = seed("spectrum");
    let mut frames_checked = 0;
    for max_frame in [8 * KIB, MIB] {
        for chain in fft_chains() {
            for mode in [Enqueue::Direct, Enqueue::CapturedAfterPlan, Enqueue::Captured] {
                let label = format!("{} over {max_frame} B frames, {mode:?}", describe(&chain));
                let mut mem = Allocations(Vec::new());
                let mut fragment = build_main_fragment(&chain, max_frame, ChainLayout::default())
                    .unwrap_or_else(|e| panic!("{label}: building the fragment: {e}"));
                let plan = fragment.plan().unwrap();
                assert!(plan.diagnostics().is_empty(), "{label}: {:?}", plan.diagnostics());
                let buffers: Vec<DeviceRegion> =
                    plan.bind_buffers::<()>(|bytes| Ok(mem.alloc(bytes))).unwrap();
                let frame_desc = mem.alloc(std::mem::size_of::<FrameDesc>());
                let chain_result = mem.alloc(256);
                let payload = mem.alloc(max_frame);
                let last = *plan.order().last().unwrap();
                let out = buffers[plan.port_buffer(last, "out", PortDirection::Output).unwrap()];
                let target = EnqueueTarget {
                    stream: &stream,
                    frame_desc,
                    chain_result,
                    user_result: 0,
                    slot_header: 0,
                    kernels: &rt.library,
                    streamed: None,
                    claims_frames: false,
                };
                let graph = match mode {
                    Enqueue::Direct => None,
                    Enqueue::CapturedAfterPlan | Enqueue::Captured => {
                        if mode == Enqueue::CapturedAfterPlan {
                            fragment.enqueue(&plan, &buffers, &target).unwrap();
                            stream.synchronize().unwrap();
                        }
                        stream
                            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
                            .unwrap();
                        let enqueued = fragment.enqueue(&plan, &buffers, &target);
                        let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0));
                        enqueued.unwrap_or_else(|e| {
                            panic!(
                                "{label}: enqueueing under capture: {e}\n(if CapturedAfterPlan passes, making \
                                 the cuFFT plan while the stream captures is what fails: make it before the capture)"
                            )
                        });
                        let graph = graph.unwrap_or_else(|e| {
                            panic!(
                                "{label}: ending the capture or instantiating the graph with cuFFT in it: {e}"
                            )
                        });
                        Some(graph.expect("the capture holds the chain's work"))
                    }
                };
                let mut cpu = CpuChain::new(&chain, max_frame).unwrap();
                let mut raw = vec![0u8; max_frame];
                for (i, len) in frame_lengths(max_frame, seed ^ max_frame as u64, 12).into_iter().enumerate()
                {
                    fill_frame(seed, i as u64, &mut raw[..len]);
                    upload(payload, &raw[..len]);
                    for b in &buffers {
                        fill(b.dptr, POISON, b.bytes);
                    }
                    let desc = FrameDesc {
                        payload_dptr: payload,
                        payload_len: len as u32,
                        n_samples: u32::MAX,
                        ..Default::default()
                    };
                    upload(frame_desc, std::slice::from_ref(&desc));
                    match &graph {
                        None => fragment
                            .enqueue(&plan, &buffers, &target)
                            .unwrap_or_else(|e| panic!("{label}: enqueueing: {e}")),
                        Some(g) => g.launch().unwrap_or_else(|e| panic!("{label}: launching the graph: {e}")),
                    }
                    stream
                        .synchronize()
                        .unwrap_or_else(|e| panic!("{label}, frame {i} ({len} B): a kernel faulted: {e}"));
                    let want = cpu.run(&raw[..len]);
                    let what = format!("{label}, frame {i} ({len} B)");
                    let n = download::<FrameDesc>(frame_desc, 1)[0].n_samples as usize;
                    assert_eq!(n, want.output_len, "{what}: FrameDesc.n_samples after the fft");
                    let got: Vec<f32> = download(out.dptr, out.bytes / 4);
                    assert_spectrum(&what, &got[..n], cpu.output(&want));
                    if let Some(j) =
                        got[n..].iter().position(|v| v.to_bits() != u32::from_ne_bytes([POISON; 4]))
                    {
                        panic!("{what}: wrote bin {} past the frame's {n} bins", n + j);
                    }
                    frames_checked += 1;
                }
            }
        }
    }
    eprintln!("spectrum: {frames_checked} frames match within {TOLERANCE} of their largest bin");
}

/// Fills the result records with a pattern no real result has.
fn poison_results(rings: &MappedRings) {
    let mem = rings.results.memory();
    // SAFETY: the records region lies inside the mapping; nothing reads or writes it yet.
    unsafe { std::ptr::write_bytes(mem.as_ptr().add(RESULTS_OFFSET), 0xa5, mem.len() - RESULTS_OFFSET) };
}

fn wait_results(reader: &mut ResultReader, out: &mut Vec<ResultRecord>, n: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        reader.drain(out);
        assert!(Instant::now() < deadline, "{what}: only {} of {n} results arrived", out.len());
    }
}

fn assert_near(what: &str, got: f32, want: f32, allowed: f32) {
    assert!(
        !got.is_nan() && (got - want).abs() <= allowed,
        "{what}: got {got}, the host chain says {want} (allowed difference {allowed})"
    );
}

#[test]
#[ignore = "needs a GPU"]
fn resident_loop_runs_unpack_fft_stats_like_the_host_chain() {
    let rt = runtime();
    let seed = seed("resident fft");
    for max_frame in [8 * KIB, MIB] {
        for mut chain in fft_chains() {
            chain.push(OpSpec::Stats);
            let label = format!("{} over {max_frame} B frames", describe(&chain));
            let rings = MappedRings::new(&rt, 8, max_frame, 1024, OverrunPolicy::Every).unwrap();
            poison_results(&rings);
            let mut reader = ResultReader::new(Arc::clone(&rings.results));
            // fused_chain = "auto" (the default) must take the graph path for an fft.
            let mut lp = CudaLoop::new(
                Arc::clone(&rt),
                Arc::clone(&rings.frames),
                Arc::clone(&rings.results),
                &chain,
                LoopConfig::default(),
            )
            .unwrap_or_else(|e| {
                panic!(
                    "{label}: building the resident loop failed: {e}\n(if the spectrum test passes in its \
                     Captured mode, cuFFT's work captures into a graph but not into the WHILE/IF body)"
                )
            });
            let stages = lp.executor().stage_names().to_vec();
            assert!(!stages.iter().any(|n| n.starts_with("fused chain")), "{label}: fused: {stages:?}");
            let mut w = rings.frames.writer().unwrap();
            lp.launch().unwrap();
            let lens =
                frame_lengths(max_frame, seed ^ max_frame as u64, if max_frame == MIB { 40 } else { 200 });
            let mut out = Vec::new();
            for (i, &len) in lens.iter().enumerate() {
                publish(&mut w, seed, i as u64, len).unwrap();
                wait_results(&mut reader, &mut out, i + 1, &format!("{label}, frame {i} ({len} B)"));
            }
            let stats = lp.tear_down().unwrap_or_else(|e| panic!("{label}: tear-down: {e}"));
            assert_eq!(stats.frames_processed, lens.len() as u64, "{label}");

            let mut cpu = CpuChain::new(&chain, max_frame).unwrap();
            let mut payload = vec![0u8; max_frame];
            for r in &out {
                let i = r.frame_seq as usize;
                let len = lens[i];
                fill_frame(seed, i as u64, &mut payload[..len]);
                let want = cpu.run(&payload[..len]);
                let what = format!("{label}, frame {i} ({len} B)");
                assert_eq!(r.result_flags, want.result_flags() | RESULT_GPU_CLOCK, "{what}: flags");
                assert_eq!(r.output_len as usize, want.output_len, "{what}: output_len (bins)");
                let s = want.stats.expect("the chain ends in stats");
                let largest = s.max.abs().max(s.min.abs());
                let bins = TOLERANCE * largest + f32::MIN_POSITIVE;
                assert_near(&format!("{what}: max bin"), r.max, s.max, bins);
                assert_near(&format!("{what}: min bin"), r.min, s.min, bins);
                let sum = TOLERANCE * s.sum.abs() + f32::MIN_POSITIVE;
                assert_near(&format!("{what}: sum of bins"), r.sum, s.sum, sum);
                let mean = TOLERANCE * s.mean.abs() + f32::MIN_POSITIVE;
                assert_near(&format!("{what}: mean bin"), r.mean, s.mean, mean);
            }
            eprintln!("{label}: {} frames match the host chain", out.len());
        }
    }
}
