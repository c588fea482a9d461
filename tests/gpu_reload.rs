//! Live reload on the whole appliance with the CUDA backend under a
//! loopback stream at 10,000 frames/s, with the chain fused into the
//! data-ready handler and with one kernel per operator: 50 parameter reloads
//! and 5 shape reloads lose no frame, every result is computed with exactly
//! the chain of the generation it carries (checked against the CPU chain of
//! that generation, and not its neighbours'), and an invalid config or a
//! change that needs a restart leaves the running chain untouched. At the
//! loop level, swaps by in-place graph update and by re-instantiation keep
//! every frame published at a steady pace, on fresh random frames of sizes
//! that are not multiples of the block size, over poisoned result records.
//! At the loop level under 10,000 frames/s, 50 parameter changes go to the
//! parameter banks without a relaunch (the loop's relaunch counter stays) and
//! 5 shape changes relaunch, for the fused chain and the graph path.
//! Needs a GPU: `cargo test --test gpu_reload -- --include-ignored --test-threads=1`.

mod appliance_support;
mod reload_support;

use appliance_support::{host_config, one_at_a_time};
use frameloop::config::{BackendChoice, FusedChainMode};
use frameloop::ops::user_kernel::{OutputSize, ParamValue, UserKernelSpec};
use frameloop::ops::{ChainOutput, OpSpec, SampleFormat, cpu};
use frameloop::ring::ResultRecord;
use reload_support::{
    FRAME_BYTES, PARAM_RELOADS, SHAPE_RELOADS, chain_of, is_shape_change, reloads_under_load,
};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Six seconds at 10,000 frames/s.
const FRAMES: u64 = 60_000;

#[test]
#[ignore = "needs a GPU"]
fn fused_chain_fifty_five_reloads_at_10k_frames_per_second_lose_nothing() {
    fifty_five_reloads(FusedChainMode::Auto);
}

#[test]
#[ignore = "needs a GPU"]
fn graph_path_fifty_five_reloads_at_10k_frames_per_second_lose_nothing() {
    fifty_five_reloads(FusedChainMode::Off);
}

fn fifty_five_reloads(fused: FusedChainMode) {
    let mut cfg = host_config(chain_of(0));
    cfg.backend = BackendChoice::Cuda;
    cfg.loop_.fused_chain = fused;
    cfg.loop_.data_not_ready_sleep_interval_us = 0;
    cfg.ring.slot_bytes = FRAME_BYTES;
    // Room for every frame: however long the loop is descheduled, none is dropped.
    cfg.ring.slots = (FRAMES as usize).next_power_of_two();
    reloads_under_load(&cfg, FRAMES, 10_000.0, "cuda");
}

/// The loop-level chain of generation `g`: parameters move every
/// generation; every third one also changes the shape (a delay operator in
/// or out, a different tap count).
fn loop_chain_of(g: u32) -> Vec<OpSpec> {
    let mut chain = chain_of(g % 11);
    chain[0] = OpSpec::Unpack {
        format: frameloop::ops::SampleFormat::U16,
        scale: (1.0 + g as f32 * 0.07) / 4096.0,
        offset: 0.01 * g as f32,
    };
    if g.is_multiple_of(3) {
        let n = [3usize, 9, 5][(g as usize / 3) % 3];
        chain[1] = OpSpec::Fir { taps: (0..n).map(|k| (1.0 + k as f32) / (n * n) as f32).collect() };
        if (g / 3) % 2 == 1 {
            chain.insert(2, OpSpec::Delay { us: 1 });
        }
    }
    chain
}

/// Whether two chains differ in values only (operators, tap counts and
/// delays' presence the same).
fn same_shape(a: &[OpSpec], b: &[OpSpec]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (OpSpec::Fir { taps: t }, OpSpec::Fir { taps: u }) => t.len() == u.len(),
            _ => std::mem::discriminant(x) == std::mem::discriminant(y),
        })
}

#[test]
#[ignore = "needs a GPU"]
fn swaps_by_update_and_by_reinstantiation_keep_every_frame_with_its_generation() {
    use frameloop::backend::ResidentLoop;
    use frameloop::gpu::executor::GpuRuntime;
    use frameloop::gpu::executor::SwapMode;
    use frameloop::gpu::nvrtc::CacheDir;
    use frameloop::gpu::test_rings::{MappedRings, fill_frame, publish};
    use frameloop::ops::CpuChain;
    use frameloop::ring::layout::RESULT_GPU_CLOCK;
    use frameloop::ring::{OverrunPolicy, ResultReader};

    const SLOT: usize = 4000;
    const SWAPS: u32 = 12;
    const PER_GENERATION: u64 = 37;
    let rt = GpuRuntime::open(0, CacheDir::Disabled).expect("a usable GPU");
    let seed = 0x51ab ^ frameloop::clock::realtime_ns();
    for fused in [FusedChainMode::Auto, FusedChainMode::Off] {
        for mode in [SwapMode::Update, SwapMode::Reinstantiate] {
            let rings = MappedRings::new(&rt, 1024, SLOT, 1024, OverrunPolicy::Every).unwrap();
            let mut reader = ResultReader::new(Arc::clone(&rings.results));
            let mut lp = poisoned_loop(&rt, &rings, &loop_chain_of(0), loop_config(fused));
            let mut live = lp.take_cuda_live_chain().expect("the CUDA loop has a live chain");
            assert!(lp.take_live_chain().is_none(), "taken once");
            live.set_mode(mode);
            let mut w = rings.frames.writer().unwrap();
            lp.launch().unwrap();
            let mut lens = Vec::new();
            let mut out = Vec::new();
            let mut in_place = 0;
            let mut frame = 0u64;
            for g in 0..=SWAPS {
                if g > 0 {
                    let report = live.swap(&loop_chain_of(g), g).expect("the swap succeeds");
                    assert_eq!(report.generation, g);
                    assert!(
                        !(mode == SwapMode::Reinstantiate && report.in_place && !report.banked),
                        "{report:?}"
                    );
                    // Values only: the parameter banks take it, the graph keeps running.
                    let values_only = same_shape(&loop_chain_of(g - 1), &loop_chain_of(g));
                    assert_eq!(report.banked, values_only, "generation {g}: {report:?}");
                    in_place += usize::from(report.in_place);
                }
                // Frames published back to back: some are claimed only after
                // the next swap and run with the next generation.
                for _ in 0..PER_GENERATION {
                    let len = if frame % 5 == 2 {
                        1 + (frame as usize * 977) % SLOT
                    } else {
                        SLOT - 2 * (frame as usize % 3)
                    };
                    publish(&mut w, seed, frame, len).unwrap();
                    lens.push(len);
                    frame += 1;
                }
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while (out.len() as u64) < frame {
                reader.drain(&mut out);
                assert!(Instant::now() < deadline, "{fused:?} {mode:?}: {} of {frame} results", out.len());
            }
            let stats = lp.tear_down().unwrap();
            assert_eq!(
                stats.frames_processed, frame,
                "{fused:?} {mode:?}: counters carry over the relaunches"
            );
            assert_eq!(rings.frames.consumed(), frame, "every slot handed back");
            assert_eq!(out.iter().map(|r| r.ring_seq).collect::<Vec<_>>(), (1..=frame).collect::<Vec<_>>());
            assert_eq!(out.iter().map(|r| r.result_seq).collect::<Vec<_>>(), (1..=frame).collect::<Vec<_>>());
            assert!(out.windows(2).all(|p| p[0].param_generation <= p[1].param_generation));
            assert_eq!(out.last().unwrap().param_generation, SWAPS);
            let mut payload = vec![0u8; SLOT];
            let mut cpus: Vec<CpuChain> =
                (0..=SWAPS).map(|g| CpuChain::new(&loop_chain_of(g), SLOT).unwrap()).collect();
            for r in &out {
                let (i, len) = (r.frame_seq, lens[r.frame_seq as usize]);
                fill_frame(seed, i, &mut payload[..len]);
                let g = r.param_generation;
                assert!(g <= SWAPS, "{fused:?} {mode:?} frame {i}: generation {g} (a poisoned record?)");
                let want = cpus[g as usize].run(&payload[..len]);
                let id = format!("{fused:?} {mode:?} frame {i} generation {g}");
                assert_eq!(r.result_flags, want.result_flags() | RESULT_GPU_CLOCK, "{id}: flags");
                check_against(r, &want, &id);
            }
            eprintln!("{fused:?} {mode:?}: {frame} frames, {SWAPS} swaps, {in_place} in place");
        }
    }
}

/// Checks result `r` (named `id` in messages) against the CPU chain's `want`:
/// output length, sum and mean within 1e-5, min, max and detection exact.
fn check_against(r: &ResultRecord, want: &ChainOutput, id: &str) {
    assert_eq!(r.output_len as usize, want.output_len, "{id}: output_len");
    let s = want.stats.expect("the chain has stats");
    let close = |a: f32, b: f32| (a - b).abs() <= 1e-5 * a.abs().max(b.abs()).max(1.0);
    assert!(close(r.sum, s.sum) && close(r.mean, s.mean), "{id}: sum {} vs {}", r.sum, s.sum);
    assert_eq!((r.min, r.max), (s.min, s.max), "{id}: min/max");
    assert_eq!(Some((r.detect_count, r.first_detect_index)), want.detect, "{id}: detect");
}

/// The loop's settings with `fused` and the rest at their defaults.
fn loop_config(fused: FusedChainMode) -> frameloop::config::LoopConfig {
    frameloop::config::LoopConfig { fused_chain: fused, ..Default::default() }
}

/// A CUDA loop of `chain` over `rings` under `cfg`, whose result records are poisoned
/// first (so a record the loop did not write cannot pass for one).
fn poisoned_loop(
    rt: &Arc<frameloop::gpu::executor::GpuRuntime>,
    rings: &frameloop::gpu::test_rings::MappedRings,
    chain: &[OpSpec],
    cfg: frameloop::config::LoopConfig,
) -> frameloop::gpu::CudaLoop {
    use frameloop::ring::layout::RESULTS_OFFSET;
    let mem = rings.results.memory();
    // SAFETY: the records region lies inside the mapping; nothing reads or writes it yet.
    unsafe { std::ptr::write_bytes(mem.as_ptr().add(RESULTS_OFFSET), 0xa5, mem.len() - RESULTS_OFFSET) };
    frameloop::gpu::CudaLoop::new(
        Arc::clone(rt),
        Arc::clone(&rings.frames),
        Arc::clone(&rings.results),
        chain,
        cfg,
    )
    .unwrap()
}

/// The loop under frames published at 10,000/s into the mapped ring: 55
/// changes of `chain_of` (every 11th a shape change). Each values-only one
/// goes to the parameter banks (no relaunch: the counter stays; no switch
/// gap), each shape change relaunches once; no frame is lost and every
/// result equals the CPU chain of the generation it carries. Returns the
/// stages the loop of generation 0 ran.
fn bank_switches_at_10k(cfg: frameloop::config::LoopConfig, frame_bytes: usize) -> Vec<String> {
    let mut cpus: Vec<frameloop::ops::CpuChain> = (0..=PARAM_RELOADS + SHAPE_RELOADS)
        .map(|g| frameloop::ops::CpuChain::new(&chain_of(g), frame_bytes).unwrap())
        .collect();
    bank_switches_of(cfg, frame_bytes, &chain_of, &mut |g, payload| cpus[g as usize].run(payload))
}

/// [`bank_switches_at_10k`] for the chains `chain_of_gen` gives, each frame's
/// result checked against `expected(generation, payload)`.
fn bank_switches_of(
    cfg: frameloop::config::LoopConfig,
    frame_bytes: usize,
    chain_of: &dyn Fn(u32) -> Vec<OpSpec>,
    expected: &mut dyn FnMut(u32, &[u8]) -> ChainOutput,
) -> Vec<String> {
    use frameloop::backend::ResidentLoop;
    use frameloop::gpu::executor::GpuRuntime;
    use frameloop::gpu::nvrtc::CacheDir;
    use frameloop::gpu::test_rings::{MappedRings, fill_frame, publish};
    use frameloop::ring::{OverrunPolicy, ResultReader};

    // Room for every frame of the run (about 8,000), within 1 GiB of ring.
    let slots = ((1usize << 30) / frame_bytes).min(1 << 16).next_power_of_two() / 2;
    let rt = GpuRuntime::open(0, CacheDir::Disabled).expect("a usable GPU");
    let rings = MappedRings::new(&rt, slots, frame_bytes, slots, OverrunPolicy::Every).unwrap();
    let fused = cfg.fused_chain;
    let mut lp = poisoned_loop(&rt, &rings, &chain_of(0), cfg);
    let first_stages = lp.executor().stage_names().to_vec();
    assert!(lp.executor().has_banks(), "{fused:?}: the loop keeps its values in parameter banks");
    let mut live = lp.take_cuda_live_chain().expect("a live chain");
    lp.launch().unwrap();
    let seed = 0xb4c5 ^ frameloop::clock::realtime_ns();
    let len_of = move |i: u64| frame_bytes - 2 * (i as usize % 7) - usize::from(i % 5 == 3) * 333;
    let stop = Arc::new(AtomicBool::new(false));
    let mut writer = rings.frames.writer().unwrap();
    let publisher = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let period = Duration::from_micros(100);
            let start = Instant::now();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                while Instant::now() < start + period * i as u32 {
                    std::hint::spin_loop();
                }
                publish(&mut writer, seed, i, len_of(i)).expect("room in the ring");
                i += 1;
            }
            i
        })
    };
    let mut reader = ResultReader::new(Arc::clone(&rings.results));
    let mut out = Vec::new();
    let total = PARAM_RELOADS + SHAPE_RELOADS;
    std::thread::sleep(Duration::from_millis(50));
    for g in 1..=total {
        let before = lp.executor().relaunches();
        let report = live.swap(&chain_of(g), g).expect("the change is taken");
        let after = lp.executor().relaunches();
        if is_shape_change(g) {
            assert!(!report.banked, "generation {g}: {report:?}");
            assert_eq!(after, before + 1, "generation {g}: a shape change relaunches once");
        } else {
            assert!(report.banked, "generation {g}: {report:?}");
            assert_eq!(report.gap, Duration::ZERO);
            assert_eq!(after, before, "generation {g}: no relaunch for values");
        }
        // Let frames run with it before the next change (5 ms: ~50 frames).
        let until = Instant::now() + Duration::from_millis(5);
        while Instant::now() < until {
            reader.drain(&mut out);
        }
    }
    std::thread::sleep(Duration::from_millis(20));
    stop.store(true, Ordering::Relaxed);
    let frames = publisher.join().expect("the publisher does not panic");
    let deadline = Instant::now() + Duration::from_secs(10);
    while (out.len() as u64) < frames {
        reader.drain(&mut out);
        assert!(Instant::now() < deadline, "{fused:?}: {} of {frames} results", out.len());
    }
    let stats = lp.tear_down().unwrap();
    assert_eq!(stats.frames_processed, frames, "{fused:?}");
    assert_eq!(lp.executor().relaunches(), u64::from(SHAPE_RELOADS), "{fused:?}: relaunches");
    assert_eq!(lp.executor().bank_switches(), u64::from(PARAM_RELOADS), "{fused:?}: bank switches");
    assert_eq!(out.iter().map(|r| r.ring_seq).collect::<Vec<_>>(), (1..=frames).collect::<Vec<_>>());
    assert!(out.windows(2).all(|p| p[0].param_generation <= p[1].param_generation));
    let generations: BTreeSet<u32> = out.iter().map(|r| r.param_generation).collect();
    assert_eq!(generations, (0..=total).collect(), "{fused:?}: every generation ran");
    let mut payload = vec![0u8; frame_bytes];
    for r in &out {
        let (i, g) = (r.frame_seq, r.param_generation);
        let len = len_of(i);
        fill_frame(seed, i, &mut payload[..len]);
        assert!(g <= total, "{fused:?} frame {i}: generation {g} (a poisoned record?)");
        let want = expected(g, &payload[..len]);
        let id = format!("{fused:?} frame {i} generation {g}");
        check_against(r, &want, &id);
    }
    eprintln!(
        "{fused:?} {frame_bytes} B ({:?}): {frames} frames, {PARAM_RELOADS} bank switches, {SHAPE_RELOADS} relaunches",
        lp.executor().stage_names()
    );
    first_stages
}

#[test]
#[ignore = "needs a GPU"]
fn fused_chain_takes_fifty_parameter_changes_in_its_banks_without_a_relaunch() {
    let _serial = one_at_a_time();
    bank_switches_at_10k(loop_config(FusedChainMode::Auto), FRAME_BYTES);
}

#[test]
#[ignore = "needs a GPU"]
fn graph_path_takes_fifty_parameter_changes_in_its_banks_without_a_relaunch() {
    let _serial = one_at_a_time();
    bank_switches_at_10k(loop_config(FusedChainMode::Off), FRAME_BYTES);
}

#[test]
#[ignore = "needs a GPU"]
fn large_frames_take_fifty_parameter_changes_in_their_banks_without_a_relaunch() {
    // 64 KiB frames: their sample buffers do not fit the shared-memory fused
    // kernel; "auto" runs them tiled or one kernel per operator, as measured
    // for the GPU.
    let _serial = one_at_a_time();
    bank_switches_at_10k(loop_config(FusedChainMode::Auto), 64 * 1024 + 6);
}

#[test]
#[ignore = "needs a GPU"]
fn tiled_frames_take_parameter_changes_in_their_banks_without_a_relaunch() {
    // Frames of 2 MiB and 6 bytes read in place from the slot (the banks
    // hold the values only where frames do not stream in): "auto" runs them
    // as the tiled kernel that claims its own frames (the 2 MiB run of
    // `gpu::fused::tiled::MEASURED`), whose blocks copy the steps from the
    // bank each frame brings.
    let _serial = one_at_a_time();
    let frame_bytes = (2 << 20) + 6;
    let cfg = frameloop::config::LoopConfig {
        stream_to_gpu: frameloop::config::StreamToGpu::Off,
        ..loop_config(FusedChainMode::Auto)
    };
    assert_eq!(bank_switches_at_10k(cfg, frame_bytes), ["fused_tiled"]);
}

/// The chain of generation `g` with a user kernel (tests/fixtures/user_kernels/gain_offset.cu):
/// its gain (a power of two, so that a fused multiply-add rounds as the CPU
/// does), offset and limit move with `g` and so does the threshold level
/// (parameters); every 11th generation also changes the kernel's block size
/// (shape).
fn user_chain_of(g: u32) -> Vec<OpSpec> {
    let source =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/user_kernels/gain_offset.cu");
    let params = [
        ("gain".to_owned(), ParamValue::Float(0.25 * f64::from(1u32 << (g % 5)))),
        ("offset".to_owned(), ParamValue::Float(f64::from(g) * 0.5 - 3.0)),
        ("limit".to_owned(), ParamValue::Int(1000 + i64::from(g))),
    ];
    let kernel = UserKernelSpec {
        source,
        code: None,
        entry: "gain_offset".into(),
        params: params.into_iter().collect(),
        param_types: vec!["gain: f32".into(), "offset: f32".into(), "limit: u32".into()],
        output: OutputSize::Same,
        threads: Some(if (g / 11) % 2 == 1 { 128 } else { 256 }),
        blocks: None,
        shared_bytes: 0,
    };
    vec![
        OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0 / 4096.0, offset: 0.0 },
        OpSpec::Kernel(kernel),
        OpSpec::Stats,
        OpSpec::Threshold { level: 7.0 + (g % 9) as f32 * 0.5 },
    ]
}

/// What [`user_chain_of`]`(g)` gives for `payload` on the CPU.
fn user_chain_on_cpu(g: u32, payload: &[u8]) -> ChainOutput {
    let chain = user_chain_of(g);
    let (OpSpec::Unpack { format, scale, offset }, OpSpec::Kernel(k), OpSpec::Threshold { level }) =
        (&chain[0], &chain[1], &chain[3])
    else {
        panic!("unpack, kernel, stats, threshold")
    };
    let value = |name: &str| match k.params[name] {
        ParamValue::Float(v) => v as f32,
        ParamValue::Int(v) => v as f32,
        ref other => panic!("{name}: {other}"),
    };
    let mut x = vec![0f32; payload.len() / 2];
    let n = cpu::unpack(payload, *format, *scale, *offset, &mut x);
    let y: Vec<f32> = x[..n].iter().map(|v| v * value("gain") + value("offset")).collect();
    ChainOutput { stats: Some(cpu::stats(&y)), detect: Some(cpu::threshold(&y, *level)), output_len: n }
}

#[test]
#[ignore = "needs a GPU"]
fn user_kernel_parameters_change_in_the_banks_without_a_relaunch() {
    let _serial = one_at_a_time();
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter("info").try_init();
    bank_switches_of(loop_config(FusedChainMode::Auto), 4096 + 6, &user_chain_of, &mut user_chain_on_cpu);
}
