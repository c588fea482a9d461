//! User CUDA kernels inside the resident graph on a real GPU (ignored
//! without one; run on the GPU machine with `--include-ignored
//! --test-threads=1`): a chain mixing built-in operators with three user
//! kernels (parameters, a fixed output size on a fixed grid, user result
//! words) gives, frame after frame, what the same math gives on the CPU; a
//! user kernel's fault is in `gpu_user_kernel_fault.rs` (a fault leaves the
//! process's CUDA context unusable).

use frameloop::backend::ResidentLoop;
use frameloop::config::{self, LoopConfig};
use frameloop::gpu::CudaLoop;
use frameloop::gpu::executor::GpuRuntime;
use frameloop::gpu::nvrtc::CacheDir;
use frameloop::gpu::test_rings::{MappedRings, fill_frame};
use frameloop::gpu::user::kernel::with_sources_resolved;
use frameloop::ops::{OpSpec, SampleFormat, cpu};
use frameloop::ring::layout::{
    RESULT_GPU_CLOCK, RESULT_HAS_DETECT, RESULT_HAS_STATS, RESULTS_OFFSET, SLOT_COMPLETE,
};
use frameloop::ring::{OverrunPolicy, ResultReader, ResultRecord, SlotHeader};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const FRAME_BYTES: usize = 8192;
const STREAM_ID: u32 = 7;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/user_kernels").join(name)
}

/// The chain of `gpu_chain.toml` with its sources resolved, and the values
/// the CPU reference needs from it (so the two cannot drift apart).
struct Reference {
    chain: Vec<OpSpec>,
    unpack: (f32, f32),
    gain: f32,
    offset: f32,
    limit: u32,
    taps: Vec<f32>,
    width: usize,
    window_out: usize,
    level: f32,
}

fn param_f32(k: &frameloop::ops::user_kernel::UserKernelSpec, name: &str) -> f64 {
    match k.params.get(name).unwrap_or_else(|| panic!("{} has no param {name}", k.entry)) {
        frameloop::ops::user_kernel::ParamValue::Int(v) => *v as f64,
        frameloop::ops::user_kernel::ParamValue::Float(v) => *v,
        other => panic!("{name} is {other}"),
    }
}

fn reference() -> Reference {
    let path = fixture("gpu_chain.toml");
    let cfg = config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let chain = with_sources_resolved(&cfg.chain, &path);
    let kernel = |entry: &str| {
        chain
            .iter()
            .find_map(|op| match op {
                OpSpec::Kernel(k) if k.entry == entry => Some(k.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("gpu_chain.toml has no kernel {entry}"))
    };
    let (go, ws) = (kernel("gain_offset"), kernel("window_sum"));
    let OpSpec::Unpack { format: SampleFormat::U16, scale, offset } = chain[0] else {
        panic!("unpack u16 first")
    };
    let taps =
        chain.iter().find_map(|op| if let OpSpec::Fir { taps } = op { Some(taps.clone()) } else { None });
    let level =
        chain.iter().find_map(|op| if let OpSpec::Threshold { level } = op { Some(*level) } else { None });
    let window_out = match ws.output {
        frameloop::ops::user_kernel::OutputSize::Samples(n) => n as usize,
        other => panic!("window_sum must have a fixed output, not {other:?}"),
    };
    Reference {
        unpack: (scale, offset),
        gain: param_f32(&go, "gain") as f32,
        offset: param_f32(&go, "offset") as f32,
        limit: param_f32(&go, "limit") as u32,
        taps: taps.expect("a fir"),
        width: param_f32(&ws, "width") as usize,
        window_out,
        level: level.expect("a threshold"),
        chain,
    }
}

/// What the chain computes for one frame on the CPU: the last samples and the user words.
fn cpu_frame(r: &Reference, payload: &[u8], frame_seq: u64, ring_seq: u64) -> (Vec<f32>, [u32; 12]) {
    let mut x = vec![0f32; payload.len() / 2];
    let n = cpu::unpack(payload, SampleFormat::U16, r.unpack.0, r.unpack.1, &mut x);
    assert_eq!(n, x.len());
    // gain_offset; `gain` is 2.0 in the fixture, so a fused multiply-add rounds the same.
    let g: Vec<f32> = x.iter().map(|v| v * r.gain + r.offset).collect();
    let mut f = vec![0f32; n];
    cpu::fir(&g, &r.taps, &mut f);
    // window_sum: a fixed output of `window_out` samples.
    let w: Vec<f32> = (0..r.window_out)
        .map(|i| {
            let mut sum = 0f32;
            for k in 0..r.width.min(i + 1) {
                if i - k < n {
                    sum += f[i - k];
                }
            }
            sum
        })
        .collect();
    let mut words = [0u32; 12];
    words[0] = u32::from(n as u32 > r.limit);
    words[1] = w.len() as u32;
    words[2] = w.len() as u32;
    words[3] = frame_seq as u32;
    words[4] = ring_seq as u32;
    words[5] = STREAM_ID;
    words[6] = payload.len() as u32;
    words[7] = SLOT_COMPLETE;
    words[8] = w.first().map_or(u32::MAX, |v| v.to_bits());
    words[9] = w.last().map_or(u32::MAX, |v| v.to_bits());
    words[10] = 1;
    words[11] = if frame_seq % 2 == 1 { 7 } else { 0 };
    (w, words)
}

fn runtime() -> Arc<GpuRuntime> {
    GpuRuntime::open(0, CacheDir::Disabled).expect("a usable GPU")
}

/// Fills the result records with a pattern no real result has.
fn poison_results(rings: &MappedRings) {
    let mem = rings.results.memory();
    // SAFETY: the records region lies inside the mapping; nothing reads or writes it yet.
    unsafe { std::ptr::write_bytes(mem.as_ptr().add(RESULTS_OFFSET), 0xa5, mem.len() - RESULTS_OFFSET) };
}

fn close(a: f32, b: f32, rel: f32) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1.0)
}

/// Frame `index`'s length: mostly odd sizes that are no multiple of a block,
/// some shorter than the kernels' limits, one empty.
fn frame_len(index: u64) -> usize {
    match index % 9 {
        0 => FRAME_BYTES,
        4 => 1,
        k => (1 + index as usize * 997 + k as usize * 131) % FRAME_BYTES,
    }
}

fn check(r: &Reference, seed: u64, rec: &ResultRecord, len: usize) {
    let i = rec.frame_seq;
    let mut payload = vec![0u8; len];
    fill_frame(seed, i, &mut payload);
    let (w, words) = cpu_frame(r, &payload, i, rec.ring_seq);
    let ctx = format!("frame {i} (ring sequence {}, {len} bytes, seed {seed:#x})", rec.ring_seq);
    assert_eq!(rec.result_flags, RESULT_HAS_STATS | RESULT_HAS_DETECT | RESULT_GPU_CLOCK, "{ctx}: flags");
    assert_eq!(rec.output_len as usize, w.len(), "{ctx}: output_len");
    let names = [
        "gain_offset: in_count > limit",
        "frame_words: in_count",
        "frame_words: out_count",
        "sequence",
        "ring sequence",
        "stream id",
        "length bytes",
        "flags",
        "first sample bits",
        "last sample bits",
        "params is null",
        "odd frames only",
    ];
    for (k, name) in names.iter().enumerate() {
        assert_eq!(
            rec.user[k], words[k],
            "{ctx}: user word {k} ({name}) is {:#x}, the CPU says {:#x}; all words {:x?}",
            rec.user[k], words[k], rec.user
        );
    }
    let s = cpu::stats(&w);
    assert!(close(rec.sum, s.sum, 1e-5), "{ctx}: sum {} vs CPU {}", rec.sum, s.sum);
    assert_eq!((rec.min, rec.max), (s.min, s.max), "{ctx}: min/max vs CPU");
    assert!(close(rec.mean, s.mean, 1e-5), "{ctx}: mean {} vs CPU {}", rec.mean, s.mean);
    let (count, first) = cpu::threshold(&w, r.level);
    assert_eq!((rec.detect_count, rec.first_detect_index), (count, first), "{ctx}: threshold vs CPU");
}

/// `CudaLoop` (what `--backend cuda` runs) with user kernels between
/// built-in operators: every result equals the CPU's on fresh random input.
#[test]
#[ignore = "needs a GPU"]
fn user_kernels_between_built_in_operators_match_the_cpu() {
    let r = reference();
    let seed = 0x05e1_u64 ^ frameloop::clock::realtime_ns();
    println!("seed {seed:#x}");
    let rt = runtime();
    let rings = MappedRings::new(&rt, 16, FRAME_BYTES, 1024, OverrunPolicy::Every).unwrap();
    poison_results(&rings);
    let mut reader = ResultReader::new(Arc::clone(&rings.results));
    let mut lp = CudaLoop::new(
        Arc::clone(&rt),
        Arc::clone(&rings.frames),
        Arc::clone(&rings.results),
        &r.chain,
        LoopConfig::default(),
    )
    .unwrap_or_else(|e| panic!("building the loop: {e}"));
    let stages = lp.executor().stage_names().to_vec();
    assert!(
        stages.iter().any(|s| s == "chain[3] kernel \"window_sum\""),
        "user kernels are graph operators named by entry: {stages:?}"
    );
    let mut w = rings.frames.writer().unwrap();
    lp.launch().unwrap();
    let n = 200u64;
    let (mut lens, mut out) = (Vec::new(), Vec::new());
    for i in 0..n {
        let len = frame_len(i);
        let seq = w.reserve().unwrap();
        fill_frame(seed, i, &mut w.payload_mut(seq)[..len]);
        let header = SlotHeader {
            frame_seq: i,
            stream_id: STREAM_ID,
            flags: SLOT_COMPLETE,
            payload_len: len as u32,
            ..Default::default()
        };
        w.publish(seq, &header);
        lens.push(len);
        let deadline = Instant::now() + Duration::from_secs(5);
        while out.len() <= i as usize {
            reader.drain(&mut out);
            assert!(Instant::now() < deadline, "frame {i} ({len} bytes) was not processed: {:?}", lp.stats());
        }
    }
    let stats = lp.tear_down().unwrap();
    assert_eq!(stats.frames_processed, n);
    assert_eq!(out.iter().map(|r| r.ring_seq).collect::<Vec<_>>(), (1..=n).collect::<Vec<_>>());
    for (rec, &len) in out.iter().zip(&lens) {
        check(&r, seed, rec, len);
    }
    assert_eq!(rings.frames.consumed(), n, "every slot handed back");
}

/// Without a GPU: the chain's user sources compile and have their entries
/// (NVRTC only), so a GPU run fails only on what the GPU does.
#[test]
fn the_chain_fixture_validates() {
    if !frameloop::gpu::nvrtc_present() {
        assert_ne!(std::env::var("FRAMELOOP_REQUIRE_NVRTC").as_deref(), Ok("1"), "NVRTC is required");
        eprintln!("skipped: NVRTC cannot be loaded (`. scripts/env.sh`)");
        return;
    }
    let path = fixture("gpu_chain.toml");
    let cfg = config::load(&path).unwrap();
    let problems = frameloop::gpu::user::source::check_user_code(&cfg, &path);
    assert!(problems.is_empty(), "{problems:#?}");
    let fault = fixture("trap_at.cu");
    let text = std::fs::read_to_string(&fault).unwrap();
    let kind = frameloop::gpu::user::source::EntryKind::Kernel;
    let errors =
        frameloop::gpu::user::source::check_source(&fault.display().to_string(), &text, "trap_at", kind);
    assert!(errors.is_empty(), "{errors:?}");
    let r = reference();
    assert_eq!(r.gain, 2.0, "the CPU reference rounds like the GPU only for gain = 2 (exact products)");
    assert_eq!(r.chain.len(), 7);
}
