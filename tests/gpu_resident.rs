//! The resident loop on a real GPU (ignored without one; run on the GPU
//! machine with `--include-ignored --test-threads=1`): one launch processes
//! host-published frames and every result matches the CPU chain, with the
//! chain fused into the handler and as one kernel per operator; tear-down
//! terminates, a timeout tears the graph down by itself, and host-driven
//! data-ready and the latest policy work on both paths.

mod gpu_support;

use frameloop::backend::{BackendError, ResidentLoop};
use frameloop::config::{FusedChainMode, LoopConfig, StreamToGpu};
use frameloop::fragment::Fragment;
use frameloop::gpu::CudaLoop;
use frameloop::gpu::control::{STATE_TIMED_OUT, STATE_TORN_DOWN};
use frameloop::gpu::executor::{ExecutorOptions, GpuRuntime, ResidentExecutor, chain_flags, chain_fragment};
use frameloop::gpu::fused::FusedChain;
use frameloop::gpu::fused::tiled::{FrameSource, LargePath, MEASURED, choose_large, tiled_fragment};
use frameloop::gpu::test_rings::{MappedRings, STREAMED_PART_BYTES, fill_frame, publish, publish_streamed};
use frameloop::ops::{CpuChain, OpSpec, SampleFormat, default_chain};
use frameloop::ring::layout::{RESULT_GPU_CLOCK, RESULTS_OFFSET};
use frameloop::ring::{OverrunPolicy, ResultReader, ResultRecord};
use gpu_support::{runtime, wait_results};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a test waits for its results.
const RESULTS_WITHIN: Duration = Duration::from_secs(5);

const FRAME_BYTES: usize = 8192;

/// Fills the result records with a pattern no real result has.
fn poison_results(rings: &MappedRings) {
    let mem = rings.results.memory();
    // SAFETY: the records region lies inside the mapping; nothing reads or writes it yet.
    unsafe { std::ptr::write_bytes(mem.as_ptr().add(RESULTS_OFFSET), 0xa5, mem.len() - RESULTS_OFFSET) };
}

fn close(a: f32, b: f32, rel: f32) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1.0)
}

fn check_against_cpu(chain: &[OpSpec], seed: u64, results: &[ResultRecord], lens: &[usize]) {
    check_against_cpu_sized(chain, seed, results, lens, FRAME_BYTES);
}

fn check_against_cpu_sized(
    chain: &[OpSpec],
    seed: u64,
    results: &[ResultRecord],
    lens: &[usize],
    frame_bytes: usize,
) {
    let mut cpu = CpuChain::new(chain, frame_bytes).unwrap();
    let mut payload = vec![0u8; frame_bytes];
    for (r, &len) in results.iter().zip(lens) {
        let i = r.frame_seq;
        fill_frame(seed, i, &mut payload[..len]);
        let want = cpu.run(&payload[..len]);
        assert_eq!(r.result_flags, want.result_flags() | RESULT_GPU_CLOCK, "frame {i}: flags");
        assert_eq!(r.output_len as usize, want.output_len, "frame {i}: output_len");
        if let Some(s) = want.stats {
            assert!(close(r.sum, s.sum, 1e-5), "frame {i}: sum {} vs {}", r.sum, s.sum);
            assert_eq!((r.min, r.max), (s.min, s.max), "frame {i}: min/max");
            assert!(close(r.mean, s.mean, 1e-5), "frame {i}: mean {} vs {}", r.mean, s.mean);
        }
        if let Some((count, first)) = want.detect {
            assert_eq!((r.detect_count, r.first_detect_index), (count, first), "frame {i}: detect");
        }
        assert!(r.done_ns >= r.detect_ns && r.detect_ns > 0, "frame {i}: GPU times");
    }
}

/// `CudaLoop` (what `--backend cuda` runs) launched once processes every
/// published frame, and each result equals the CPU chain's on fresh inputs.
#[test]
#[ignore = "needs a GPU"]
fn one_launch_processes_frames_like_the_cpu_chain() {
    let rt = runtime();
    let seed = 0x5eed ^ frameloop::clock::realtime_ns();
    for chain in [
        default_chain(),
        vec![
            OpSpec::Unpack { format: SampleFormat::U12, scale: 0.01, offset: -3.0 },
            OpSpec::Filter2d { width: 61, kernel: [0.1, 0.2, 0.1, 0.0, 1.0, 0.0, -0.1, -0.2, -0.1] },
            OpSpec::Threshold { level: 20.0 },
            OpSpec::Fir { taps: vec![0.25, 0.5, 0.25] },
            OpSpec::Stats,
        ],
        vec![
            OpSpec::Unpack { format: SampleFormat::U8, scale: 0.5, offset: 1.0 },
            OpSpec::Fir { taps: (0..63).map(|k| ((k * 37 % 11) as f32 - 5.0) / 16.0).collect() },
            OpSpec::Delay { us: 3 },
            OpSpec::Threshold { level: 60.0 },
            OpSpec::Stats,
        ],
    ]
    .into_iter()
    .flat_map(|c| [(c.clone(), FusedChainMode::On), (c, FusedChainMode::Off)])
    {
        let rings = MappedRings::new(&rt, 16, FRAME_BYTES, 1024, OverrunPolicy::Every).unwrap();
        poison_results(&rings);
        let mut reader = ResultReader::new(Arc::clone(&rings.results));
        let mut lp = CudaLoop::new(
            Arc::clone(&rt),
            Arc::clone(&rings.frames),
            Arc::clone(&rings.results),
            &chain.0,
            LoopConfig { fused_chain: chain.1, ..LoopConfig::default() },
        )
        .unwrap();
        let fused = lp.executor().stage_names().iter().any(|n| n.starts_with("fused chain"));
        assert_eq!(fused, chain.1 == FusedChainMode::On, "{:?}", lp.executor().stage_names());
        let mut w = rings.frames.writer().unwrap();
        lp.launch().unwrap();
        assert!(lp.is_launched());
        let n = 300;
        let mut lens = Vec::new();
        let mut out = Vec::new();
        for i in 0..n as u64 {
            let len = if i % 7 == 3 { 1 + (i as usize * 131) % FRAME_BYTES } else { FRAME_BYTES };
            publish(&mut w, seed, i, len).unwrap();
            lens.push(len);
            wait_results(&mut reader, &mut out, i as usize + 1, RESULTS_WITHIN);
        }
        assert!(lp.is_launched(), "the graph stays launched across frames");
        let stats = lp.tear_down().unwrap();
        assert_eq!(stats.frames_processed, n as u64);
        assert!(stats.iterations >= n as u64);
        assert_eq!(out.iter().map(|r| r.ring_seq).collect::<Vec<_>>(), (1..=n as u64).collect::<Vec<_>>());
        check_against_cpu(&chain.0, seed, &out, &lens);
        assert!(!lp.is_launched());
        assert_eq!(rings.frames.consumed(), n as u64, "every slot handed back");
    }
}

/// Under `auto`, frames too large for the handler's shared memory run as
/// one tiled kernel per frame where the recorded runs found it faster
/// (frames of 2 MiB and 6 bytes: the 2 MiB run of `gpu::fused::tiled::MEASURED`),
/// its last block publishing the result, and every result equals the CPU
/// chain's; 768 KiB image frames, where one kernel per operator was faster,
/// run that way. The frames are published whole, as
/// by a receiver that reports no progress, so the loop does not stream
/// (`loop.stream_to_gpu = "off"`, what the appliance sets for such receivers;
/// under "auto" such a slot would stream and run one kernel per operator).
#[test]
#[ignore = "needs a GPU"]
fn auto_runs_large_frames_as_one_tiled_kernel_like_the_cpu_chain() {
    let rt = runtime();
    let seed = 0x711e ^ frameloop::clock::realtime_ns();
    let frame_bytes = (2 << 20) + 6;
    let (path, why) = choose_large(frame_bytes, MEASURED);
    assert_eq!(path, LargePath::Tiled, "{why}");
    for chain in [
        default_chain(),
        vec![
            OpSpec::Unpack { format: SampleFormat::U12, scale: 0.01, offset: -3.0 },
            OpSpec::Filter2d { width: 1024, kernel: [0.1, 0.2, 0.1, 0.0, 1.0, 0.0, -0.1, -0.2, -0.1] },
            OpSpec::Stats,
            OpSpec::Threshold { level: 20.0 },
        ],
    ] {
        let rings = MappedRings::new(&rt, 16, frame_bytes, 1024, OverrunPolicy::Every).unwrap();
        poison_results(&rings);
        let mut reader = ResultReader::new(Arc::clone(&rings.results));
        let mut lp = CudaLoop::new(
            Arc::clone(&rt),
            Arc::clone(&rings.frames),
            Arc::clone(&rings.results),
            &chain,
            LoopConfig { stream_to_gpu: StreamToGpu::Off, ..LoopConfig::default() },
        )
        .unwrap();
        assert_eq!(lp.executor().stage_names(), ["fused_tiled"], "{chain:?}");
        let mut w = rings.frames.writer().unwrap();
        lp.launch().unwrap();
        let n = 60;
        let (mut lens, mut out) = (Vec::new(), Vec::new());
        for i in 0..n as u64 {
            let len = if i % 5 == 2 { 1 + (i as usize * 40_009) % frame_bytes } else { frame_bytes };
            publish(&mut w, seed, i, len).unwrap();
            lens.push(len);
            wait_results(&mut reader, &mut out, i as usize + 1, RESULTS_WITHIN);
        }
        assert_eq!(lp.tear_down().unwrap().frames_processed, n as u64);
        assert_eq!(out.iter().map(|r| r.ring_seq).collect::<Vec<_>>(), (1..=n as u64).collect::<Vec<_>>());
        check_against_cpu_sized(&chain, seed, &out, &lens, frame_bytes);
        assert_eq!(rings.frames.consumed(), n as u64, "every slot handed back");
    }
    // 768 KiB image frames ran faster as one kernel per operator: auto takes that.
    let image = [
        OpSpec::Unpack { format: SampleFormat::U12, scale: 1.0, offset: 0.0 },
        OpSpec::Filter2d { width: 1024, kernel: [0.1; 9] },
        OpSpec::Stats,
        OpSpec::Threshold { level: 1.0 },
    ];
    let rings = MappedRings::new(&rt, 4, 786_432, 16, OverrunPolicy::Every).unwrap();
    let cfg = LoopConfig { stream_to_gpu: StreamToGpu::Off, ..LoopConfig::default() };
    let lp =
        CudaLoop::new(Arc::clone(&rt), Arc::clone(&rings.frames), Arc::clone(&rings.results), &image, cfg)
            .unwrap();
    assert_eq!(lp.executor().stage_names(), ["unpack[0]", "filter2d[1]", "stats+threshold[2]"]);
}

/// The tiled kernel claiming its own frames (the loop body alone: no
/// handler node, no IF body) gives the CPU chain's results, and the same bits
/// as the same kernel after the handler in an IF body, for frames read in
/// place and frames streamed into device memory part by part, at lengths
/// that are no multiple of a tile, a block or a sample (1, 3, 4095, ...);
/// the claiming loop idles between frames and stops on tear-down while it
/// waits for one. Streamed, the claiming kernel also runs with
/// `loop.pull_end_guard_bytes` (pulls leaving the last 64 KiB of the frame's
/// expected length to the claim, the lengths changing from frame to frame):
/// the same bits again.
#[test]
#[ignore = "needs a GPU"]
fn tiled_kernel_claiming_its_frames_matches_the_handler_and_if_path() {
    let rt = runtime();
    let seed = 0xc1a1 ^ frameloop::clock::realtime_ns();
    eprintln!("random seed {seed:#x}");
    let frame_bytes = 786_432 + 6;
    let lens = [frame_bytes, 1, 3, 4095, 12_345, frame_bytes - 1, 786_432, 300_001, frame_bytes];
    for chain in [
        default_chain(),
        vec![
            OpSpec::Unpack { format: SampleFormat::U12, scale: 0.01, offset: -3.0 },
            OpSpec::Filter2d { width: 1000, kernel: [0.1, 0.2, 0.1, 0.0, 1.0, 0.0, -0.1, -0.2, -0.1] },
            OpSpec::Stats,
            OpSpec::Threshold { level: 20.0 },
        ],
    ] {
        for streamed in [false, true] {
            let mut runs: Vec<Vec<ResultRecord>> = Vec::new();
            let variants: &[(bool, u32)] =
                if streamed { &[(true, 0), (false, 0), (true, 65_536)] } else { &[(true, 0), (false, 0)] };
            for &(claims, end_guard) in variants {
                let what =
                    format!("{chain:?}, streamed {streamed}, claiming {claims}, end guard {end_guard}");
                let rings = MappedRings::new(&rt, 8, frame_bytes, 64, OverrunPolicy::Every).unwrap();
                poison_results(&rings);
                let mut reader = ResultReader::new(Arc::clone(&rings.results));
                let encoded = FusedChain::encode(&chain, frame_bytes).unwrap();
                let source = if streamed { FrameSource::DeviceMemory } else { FrameSource::MappedSlot };
                let mut opts = ExecutorOptions::new(LoopConfig {
                    pull_end_guard_bytes: end_guard,
                    ..LoopConfig::default()
                });
                opts.stream = streamed;
                opts.workload_claims_frames = claims;
                let mut ex = ResidentExecutor::new(
                    Arc::clone(&rt),
                    tiled_fragment(encoded, source).unwrap(),
                    Arc::clone(&rings.frames),
                    Arc::clone(&rings.results),
                    chain_flags(&chain),
                    opts,
                )
                .unwrap();
                assert_eq!(ex.workload_claims_frames(), claims, "{what}");
                let mut w = rings.frames.writer().unwrap();
                ex.launch().unwrap();
                // Idle iterations first: each ends at the poll budget.
                std::thread::sleep(Duration::from_millis(20));
                let mut out = Vec::new();
                for (i, &len) in lens.iter().enumerate() {
                    // Streamed in GRO-sized parts, one 8,972-byte datagram's
                    // payload at a time, or in odd parts: marks that are not
                    // whole 16-byte words, as a receiver stores them.
                    let part = [STREAMED_PART_BYTES, 8924, 4099][i % 3];
                    match streamed {
                        true => publish_streamed(&mut w, seed, i as u64, len, part).unwrap(),
                        false => publish(&mut w, seed, i as u64, len).unwrap(),
                    };
                    wait_results(&mut reader, &mut out, i + 1, RESULTS_WITHIN);
                }
                // A wait with no frame, then tear-down from inside it.
                std::thread::sleep(Duration::from_millis(5));
                let stats = ex.tear_down().unwrap();
                assert_eq!(stats.frames_processed, lens.len() as u64, "{what}");
                assert!(stats.idle_iterations > 0, "{what}: {stats:?}");
                assert_eq!(
                    out.iter().map(|r| r.ring_seq).collect::<Vec<_>>(),
                    (1..=lens.len() as u64).collect::<Vec<_>>(),
                    "{what}"
                );
                check_against_cpu_sized(&chain, seed, &out, &lens, frame_bytes);
                assert_eq!(rings.frames.consumed(), lens.len() as u64, "{what}: every slot handed back");
                runs.push(out);
            }
            for (other, variant) in runs[1..].iter().zip(&variants[1..]) {
                for (a, b) in runs[0].iter().zip(other) {
                    assert_eq!(
                        (a.sum.to_bits(), a.min.to_bits(), a.max.to_bits(), a.mean.to_bits()),
                        (b.sum.to_bits(), b.min.to_bits(), b.max.to_bits(), b.mean.to_bits()),
                        "frame {}: the same bits claiming and {variant:?} ({chain:?}, streamed {streamed})",
                        a.frame_seq
                    );
                    assert_eq!(
                        (a.detect_count, a.first_detect_index),
                        (b.detect_count, b.first_detect_index)
                    );
                }
            }
        }
    }
}

/// A chain `on` cannot fuse is refused at start-up with the reason and the fix.
#[test]
#[ignore = "needs a GPU"]
fn fused_chain_on_refuses_a_chain_it_cannot_fuse() {
    let rt = runtime();
    let rings = MappedRings::new(&rt, 4, FRAME_BYTES, 16, OverrunPolicy::Every).unwrap();
    let mut chain = default_chain();
    chain.extend(std::iter::repeat_n(OpSpec::Fir { taps: vec![1.0] }, 20));
    let cfg = LoopConfig { fused_chain: FusedChainMode::On, ..LoopConfig::default() };
    let err =
        CudaLoop::new(Arc::clone(&rt), Arc::clone(&rings.frames), Arc::clone(&rings.results), &chain, cfg)
            .err()
            .expect("a 23-step chain cannot be fused");
    let msg = err.to_string();
    assert!(msg.contains("loop.fused_chain") && msg.contains("steps") && msg.contains("\"auto\""), "{msg}");
}

/// An executor over the default chain, fused into the handler when `opts.fused` asks.
fn executor(rt: &Arc<GpuRuntime>, rings: &MappedRings, opts: ExecutorOptions) -> ResidentExecutor {
    rings.frames.take_reader_for_device();
    let chain = default_chain();
    let fragment = if opts.fused.is_some() {
        Fragment::new("main")
    } else {
        chain_fragment(&chain, FRAME_BYTES).unwrap()
    };
    ResidentExecutor::new(
        Arc::clone(rt),
        fragment,
        Arc::clone(&rings.frames),
        Arc::clone(&rings.results),
        chain_flags(&chain),
        opts,
    )
    .unwrap()
}

#[test]
#[ignore = "needs a GPU"]
fn tear_down_terminates_even_mid_poll_and_mid_sleep() {
    let rt = runtime();
    for cfg in [
        LoopConfig { poll_budget_us: 1_000_000, poll_interval_ns: 1000, ..LoopConfig::default() },
        LoopConfig {
            poll_budget_us: 0,
            poll_interval_ns: 0,
            data_not_ready_sleep_interval_us: 1_000_000,
            ..LoopConfig::default()
        },
    ]
    .into_iter()
    .flat_map(|c| [(c.clone(), true), (c, false)])
    {
        let rings = MappedRings::new(&rt, 8, FRAME_BYTES, 64, OverrunPolicy::Every).unwrap();
        let mut ex = executor(&rt, &rings, with_fusion(ExecutorOptions::new(cfg.0), cfg.1));
        ex.launch().unwrap();
        std::thread::sleep(Duration::from_millis(30));
        assert!(ex.is_launched());
        let t = Instant::now();
        ex.tear_down().unwrap();
        assert!(t.elapsed() < Duration::from_millis(500), "tear-down took {:?}", t.elapsed());
        assert_eq!(ex.state(), STATE_TORN_DOWN);
        assert!(!ex.is_launched());
    }
}

#[test]
#[ignore = "needs a GPU"]
fn timeout_tears_the_graph_down_by_itself() {
    let rt = runtime();
    let lp = loop_with_timeout(&rt, FRAME_BYTES, StreamToGpu::Auto);
    check_times_out_after_one_frame(lp, FRAME_BYTES, "8 KiB");
}

/// A `CudaLoop` of the default chain on `frame_bytes` slots with a 50 ms timeout.
fn loop_with_timeout(
    rt: &Arc<GpuRuntime>,
    frame_bytes: usize,
    stream: StreamToGpu,
) -> (CudaLoop, MappedRings) {
    let rings = MappedRings::new(rt, 8, frame_bytes, 64, OverrunPolicy::Every).unwrap();
    let cfg = LoopConfig { timeout_ms: 50, stream_to_gpu: stream, ..LoopConfig::default() };
    let lp = CudaLoop::new(
        Arc::clone(rt),
        Arc::clone(&rings.frames),
        Arc::clone(&rings.results),
        &default_chain(),
        cfg,
    )
    .unwrap();
    (lp, rings)
}

/// Launches the loop, publishes one frame and checks that the loop stops by
/// its 50 ms timeout by itself, after that frame.
fn check_times_out_after_one_frame((mut lp, rings): (CudaLoop, MappedRings), frame_bytes: usize, what: &str) {
    let mut w = rings.frames.writer().unwrap();
    lp.launch().unwrap();
    publish(&mut w, 1, 0, frame_bytes).unwrap();
    let t = Instant::now();
    while lp.is_launched() {
        assert!(t.elapsed() < Duration::from_secs(3), "{what}: the loop did not time out");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        t.elapsed() >= Duration::from_millis(40),
        "{what}: stopped before the timeout: {:?}",
        t.elapsed()
    );
    assert_eq!(lp.executor().state(), STATE_TIMED_OUT, "{what}");
    assert_eq!(lp.stats().frames_processed, 1, "{what}");
    assert!(matches!(lp.tear_down(), Err(BackendError::TimedOut { ms: 50 })), "{what}");
}

/// The loop whose tiled kernel claims its own frames times out by itself
/// too (block 0's poll gives the stop verdict, every block ends), with
/// frames read in place and streamed.
#[test]
#[ignore = "needs a GPU"]
fn claiming_tiled_kernel_times_out_by_itself() {
    let rt = runtime();
    let frame_bytes = (2 << 20) + 6;
    for stream in [StreamToGpu::Off, StreamToGpu::On] {
        let lp = loop_with_timeout(&rt, frame_bytes, stream);
        assert!(lp.0.executor().workload_claims_frames(), "{stream:?}: the tiled kernel claims");
        check_times_out_after_one_frame(lp, frame_bytes, &format!("{stream:?}"));
    }
}

fn with_fusion(mut opts: ExecutorOptions, fused: bool) -> ExecutorOptions {
    if fused {
        opts.fused = Some(FusedChain::encode(&default_chain(), FRAME_BYTES).unwrap());
    }
    opts
}

#[test]
#[ignore = "needs a GPU"]
fn host_driven_mode_waits_for_data_ready() {
    let rt = runtime();
    for fused in [true, false] {
        let rings = MappedRings::new(&rt, 8, FRAME_BYTES, 64, OverrunPolicy::Every).unwrap();
        let mut opts = ExecutorOptions::new(LoopConfig::default());
        opts.host_driven = true;
        let mut ex = executor(&rt, &rings, with_fusion(opts, fused));
        let mut w = rings.frames.writer().unwrap();
        ex.launch().unwrap();
        for i in 0..5u64 {
            publish(&mut w, 9, i, FRAME_BYTES).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(ex.results_published(), i, "processed frame {i} before data_ready");
            ex.data_ready();
            let t = Instant::now();
            while !ex.result_ready(i) {
                assert!(t.elapsed() < Duration::from_secs(2), "no result after data_ready");
            }
        }
        assert_eq!(ex.tear_down().unwrap().frames_processed, 5, "fused: {fused}");
    }
}

#[test]
#[ignore = "needs a GPU"]
fn latest_policy_skips_to_the_newest_frame() {
    let rt = runtime();
    for fused in [true, false] {
        let rings = MappedRings::new(&rt, 16, FRAME_BYTES, 64, OverrunPolicy::Latest).unwrap();
        let mut opts = ExecutorOptions::new(LoopConfig::default());
        opts.host_driven = true;
        let mut ex = executor(&rt, &rings, with_fusion(opts, fused));
        let mut w = rings.frames.writer().unwrap();
        ex.launch().unwrap();
        for i in 0..4u64 {
            publish(&mut w, 3, i, FRAME_BYTES).unwrap();
        }
        ex.data_ready();
        let t = Instant::now();
        while !ex.result_ready(0) {
            assert!(t.elapsed() < Duration::from_secs(2));
        }
        let mut out = Vec::new();
        ResultReader::new(Arc::clone(&rings.results)).drain(&mut out);
        let stats = ex.tear_down().unwrap();
        assert_eq!(stats.frames_processed, 1);
        assert_eq!(stats.frames_skipped, 3);
        assert_eq!(rings.results.head(), 1);
        assert_eq!(rings.frames.consumed(), 4, "fused: {fused}");
    }
}
