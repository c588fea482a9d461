//! The operator kernels against their CPU references.
//!
//! `every_kernel_compiles_with_nvrtc` runs everywhere NVRTC is installed (CI
//! installs the nvidia-cuda-nvrtc wheel): it fails when NVRTC is missing and
//! FRAMELOOP_REQUIRE_NVRTC=1, and says "skipped" otherwise. The other tests
//! need a GPU (`cargo test --test gpu_ops -- --include-ignored`): each kernel
//! runs through the fragment API on fresh random inputs, outputs poisoned
//! first, and is compared with `frameloop::ops::cpu` element by element.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod gpu_support;
use gpu_support::Rng;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, result, sys};
use cudarc::nvrtc::{CompileOptions, Ptx, compile_ptx_with_opts};

use frameloop::fragment::{
    DevicePtr, DeviceRegion, EnqueueTarget, Fragment, GpuResidentOperator, OperatorId, Plan, PortDirection,
    StreamedFrame,
};
use frameloop::gpu::fused::FusedChain;
use frameloop::gpu::fused::tiled::{FrameSource, FusedTiledOp};
use frameloop::gpu::kernel_sources::{KERNEL_NAMES, KERNEL_SOURCES};
use frameloop::gpu::operators::{
    ChainLayout, DelayOp, Filter2dOp, FirOp, ReduceOp, Reduction, UnpackOp, build_main_fragment,
};
use frameloop::ops::{CpuChain, OpSpec, SampleFormat, cpu};
use frameloop::ring::layout::{ChainResult, FrameDesc};

fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen libnvrtc; cudarc panics on any other NVRTC call without it.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda.
    unsafe { sys::is_culib_present() }
}

/// Writes every header into a fresh directory for NVRTC's include path.
fn header_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in frameloop::gpu::sources::all_headers() {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

fn compile(file: &str, source: &str, arch: &'static str, include: &std::path::Path) -> Ptx {
    let opts = CompileOptions {
        arch: Some(arch),
        include_paths: vec![include.to_string_lossy().into_owned()],
        options: vec!["-std=c++17".into()],
        name: Some(file.to_owned()),
        ..Default::default()
    };
    compile_ptx_with_opts(source, opts).unwrap_or_else(|e| panic!("{file} does not compile for {arch}: {e}"))
}

#[test]
fn every_kernel_compiles_with_nvrtc() {
    if !nvrtc_present() {
        let fix = "run scripts/setup.sh (it installs the nvidia-cuda-nvrtc wheel) and source \
                   scripts/env.sh (it puts libnvrtc on LD_LIBRARY_PATH)";
        if std::env::var("FRAMELOOP_REQUIRE_NVRTC").as_deref() == Ok("1") {
            panic!("FRAMELOOP_REQUIRE_NVRTC=1 but libnvrtc.so.13 cannot be loaded: {fix}");
        }
        eprintln!("skipped: libnvrtc.so.13 cannot be loaded ({fix})");
        return;
    }
    let include = header_dir();
    for arch in ["sm_90", "sm_80", "compute_90"] {
        for (file, source) in KERNEL_SOURCES {
            let ptx = compile(file, source, arch, include.path()).to_src();
            let names = KERNEL_NAMES.iter().find(|(f, _)| f == file).unwrap().1;
            for name in names {
                assert!(ptx.contains(&format!(".entry {name}(")), "{file} for {arch}: no entry {name}");
            }
            assert!(!ptx.contains(".local"), "{file} for {arch} spills to local memory");
        }
    }
}

// ---------------------------------------------------------------- GPU side

/// The device, the compiled kernels, and device memory freed on drop.
struct Gpu {
    _ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    _modules: Vec<Arc<CudaModule>>,
    kernels: HashMap<String, CudaFunction>,
    allocations: Vec<DevicePtr>,
}

/// Byte pattern of poisoned sample buffers: every f32 is a NaN.
const POISON: u8 = 0xff;
/// Byte pattern of a poisoned ChainResult: no field equals a real result.
const RESULT_POISON: u8 = 0xa5;
/// The ticket word at the start of a reduction's scratch (`FlReduceScratch`), with its padding.
const SCRATCH_TICKET_BYTES: usize = 16;

impl Gpu {
    fn open() -> Gpu {
        assert!(driver_present(), "no CUDA driver (libcuda.so) on this machine; run the GPU tests on a GPU");
        assert!(nvrtc_present(), "NVRTC (libnvrtc.so.13) is not on LD_LIBRARY_PATH");
        let ctx = CudaContext::new(0).expect("open GPU 0");
        let (major, minor) = ctx.compute_capability().unwrap();
        let arch: &'static str = Box::leak(format!("compute_{major}{minor}").into_boxed_str());
        let include = header_dir();
        let mut modules = Vec::new();
        let mut kernels = HashMap::new();
        for (file, source) in KERNEL_SOURCES {
            let module = ctx.load_module(compile(file, source, arch, include.path())).unwrap();
            for name in KERNEL_NAMES.iter().find(|(f, _)| f == file).unwrap().1 {
                kernels.insert(name.to_string(), module.load_function(name).unwrap());
            }
            modules.push(module);
        }
        let stream = ctx.new_stream().unwrap();
        Gpu { _ctx: ctx, stream, _modules: modules, kernels, allocations: Vec::new() }
    }

    fn alloc(&mut self, bytes: usize) -> DevicePtr {
        // SAFETY: a plain device allocation, freed in Drop.
        let p = unsafe { result::malloc_sync(bytes.max(1)) }.expect("cuMemAlloc");
        self.allocations.push(p);
        p
    }

    fn fill(&self, dptr: DevicePtr, byte: u8, bytes: usize) {
        // SAFETY: callers pass regions inside allocations of this Gpu.
        unsafe { result::memset_d8_sync(dptr, byte, bytes) }.expect("cuMemsetD8");
    }

    fn upload<T: Copy>(&self, dptr: DevicePtr, data: &[T]) {
        // SAFETY: as in `fill`; T is plain data.
        unsafe { result::memcpy_htod_sync(dptr, data) }.expect("cuMemcpyHtoD");
    }

    fn download<T: Copy + Default>(&self, dptr: DevicePtr, len: usize) -> Vec<T> {
        let mut out = vec![T::default(); len];
        // SAFETY: as in `fill`; T is plain data and every bit pattern is a valid T here.
        unsafe { result::memcpy_dtoh_sync(&mut out, dptr) }.expect("cuMemcpyDtoH");
        out
    }

    fn sync(&self) {
        self.stream.synchronize().expect("a kernel faulted");
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        for p in self.allocations.drain(..) {
            // SAFETY: allocated by `alloc`, freed once; errors are ignored (never panic in drop).
            let _ = unsafe { result::free_sync(p) };
        }
    }
}

/// A planned fragment with its buffers, FrameDesc and ChainResult on the device.
struct Rig {
    fragment: Fragment,
    plan: Plan,
    buffers: Vec<DeviceRegion>,
    frame_desc: DevicePtr,
    chain_result: DevicePtr,
    /// Where a streaming frame is staged, as the loop offers it.
    streamed: Option<StreamedFrame>,
}

impl Rig {
    fn new(gpu: &mut Gpu, fragment: Fragment) -> Rig {
        let plan = fragment.plan().unwrap();
        assert!(plan.diagnostics().is_empty(), "{:?}", plan.diagnostics());
        let buffers = plan.bind_buffers::<()>(|bytes| Ok(gpu.alloc(bytes))).unwrap();
        // Zero-filled, as the executor allocates them (a reduction's scratch relies on it).
        for b in &buffers {
            gpu.fill(b.dptr, 0, b.bytes);
        }
        let frame_desc = gpu.alloc(std::mem::size_of::<FrameDesc>());
        let chain_result = gpu.alloc(std::mem::size_of::<ChainResult>());
        Rig { fragment, plan, buffers, frame_desc, chain_result, streamed: None }
    }

    fn single(gpu: &mut Gpu, op: impl GpuResidentOperator + 'static) -> Rig {
        let mut f = Fragment::new("test");
        f.add_operator(op).unwrap();
        Rig::new(gpu, f)
    }

    fn port(&self, id: OperatorId, port: &str, direction: PortDirection) -> DeviceRegion {
        self.buffers[self.plan.port_buffer(id, port, direction).unwrap()]
    }

    fn first(&self) -> OperatorId {
        self.plan.order()[0]
    }

    fn last(&self) -> OperatorId {
        *self.plan.order().last().unwrap()
    }

    fn set_desc(&self, gpu: &Gpu, desc: FrameDesc) {
        gpu.upload(self.frame_desc, std::slice::from_ref(&desc));
    }

    fn desc(&self, gpu: &Gpu) -> FrameDesc {
        gpu.download::<FrameDesc>(self.frame_desc, 1)[0]
    }

    fn result(&self, gpu: &Gpu) -> ChainResult {
        gpu.download::<ChainResult>(self.chain_result, 1)[0]
    }

    /// Buffers bound to a reduction's `scratch` port.
    fn scratch_buffers(&self) -> impl Iterator<Item = DeviceRegion> + '_ {
        let planned = self.plan.buffers().iter().zip(&self.buffers);
        planned.filter(|(p, _)| p.users.iter().any(|u| u.ends_with(".scratch"))).map(|(_, b)| *b)
    }

    /// Poisons every buffer and the ChainResult; a reduction's scratch keeps
    /// its ticket word (0 between frames, the state it carries from one
    /// frame to the next) and has its per-block slots poisoned.
    /// The rig's fragment captured once into a graph on `gpu`'s stream.
    fn capture(&mut self, gpu: &Gpu) -> cudarc::driver::CudaGraph {
        gpu.stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL).unwrap();
        let target = self.target(gpu);
        let enqueued = self.fragment.enqueue(&self.plan, &self.buffers, &target);
        let graph = gpu.stream.end_capture(sys::CUgraphInstantiate_flags(0)).unwrap().expect("graph");
        enqueued.unwrap();
        graph
    }

    fn poison(&self, gpu: &Gpu) {
        for b in &self.buffers {
            gpu.fill(b.dptr, POISON, b.bytes);
        }
        for s in self.scratch_buffers() {
            gpu.fill(s.dptr, 0, SCRATCH_TICKET_BYTES);
        }
        gpu.fill(self.chain_result, RESULT_POISON, std::mem::size_of::<ChainResult>());
    }

    /// Where the rig's fragment enqueues on `gpu`.
    fn target<'a>(&self, gpu: &'a Gpu) -> EnqueueTarget<'a> {
        EnqueueTarget {
            stream: &gpu.stream,
            frame_desc: self.frame_desc,
            chain_result: self.chain_result,
            user_result: 0,
            slot_header: 0,
            kernels: &gpu.kernels,
            streamed: self.streamed,
            claims_frames: false,
        }
    }

    fn run(&mut self, gpu: &Gpu) {
        let target = self.target(gpu);
        self.fragment.enqueue(&self.plan, &self.buffers, &target).unwrap();
        gpu.sync();
    }
}

/// `got` equals `want` within `rel * bound[i]` (bound: the sum of the
/// magnitudes of the terms, so cancellation cannot hide behind the
/// tolerance); NaN never passes. Returns how many were bit-exact.
fn assert_close(what: &str, got: &[f32], want: &[f32], bound: &[f32], rel: f32) -> usize {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut exact = 0;
    for i in 0..want.len() {
        let (g, w) = (got[i], want[i]);
        if g.to_bits() == w.to_bits() {
            exact += 1;
            continue;
        }
        assert!(!g.is_nan(), "{what}[{i}]: NaN (unwritten?), want {w}");
        assert!((g - w).abs() <= rel * bound[i].abs() + f32::MIN_POSITIVE, "{what}[{i}]: got {g}, want {w}");
    }
    exact
}

/// The rest of a buffer past the frame's samples must still be poison.
fn assert_untouched(what: &str, tail: &[f32]) {
    if let Some(i) = tail.iter().position(|v| v.to_bits() != u32::from_ne_bytes([POISON; 4])) {
        panic!("{what}: wrote past the frame's samples (at +{i})");
    }
}

const MIB: usize = 1 << 20;

#[test]
#[ignore = "needs a GPU"]
fn unpack_matches_cpu_for_every_format() {
    let mut gpu = Gpu::open();
    let mut rng = Rng::fresh("unpack");
    let max_frame = MIB;
    let payload = gpu.alloc(max_frame + 64);
    let lens = [0, 1, 2, 3, 4, 5, 17, 48, 1001, 8191, 8192, 12289, 100_003, MIB - 1, MIB];
    let mut exact = 0;
    let mut total = 0;
    for format in [SampleFormat::U8, SampleFormat::U16, SampleFormat::U12] {
        let (scale, offset) = (rng.float(-2.0, 2.0), rng.float(-100.0, 100.0));
        let mut rig = Rig::single(&mut gpu, UnpackOp::new("unpack", format, scale, offset, max_frame));
        let out = rig.port(rig.first(), "out", PortDirection::Output);
        let capacity = out.bytes / 4;
        for &len in &lens {
            for misalign in [0usize, 1, 4] {
                let raw = rng.bytes(len);
                gpu.upload(payload + misalign as u64, &raw);
                rig.poison(&gpu);
                let desc = FrameDesc {
                    payload_dptr: payload + misalign as u64,
                    payload_len: len as u32,
                    n_samples: u32::MAX,
                    ..Default::default()
                };
                rig.set_desc(&gpu, desc);
                rig.run(&gpu);
                let mut want = vec![0f32; capacity];
                let n = cpu::unpack(&raw, format, scale, offset, &mut want);
                let what = format!("unpack {format:?} len {len} misalign {misalign}");
                assert_eq!(rig.desc(&gpu).n_samples as usize, n, "{what}: n_samples");
                let got: Vec<f32> = gpu.download(out.dptr, capacity);
                let bound: Vec<f32> = want[..n].to_vec();
                exact += assert_close(&what, &got[..n], &want[..n], &bound, 1e-6);
                total += n;
                assert_untouched(&what, &got[n..]);
            }
        }
        // A payload longer than the buffer is clamped, never overrun.
        let raw = rng.bytes(max_frame);
        gpu.upload(payload, &raw);
        rig.poison(&gpu);
        rig.set_desc(
            &gpu,
            FrameDesc { payload_dptr: payload, payload_len: (max_frame + 64) as u32, ..Default::default() },
        );
        rig.run(&gpu);
        assert_eq!(rig.desc(&gpu).n_samples as usize, format.samples_in(max_frame), "{format:?} clamp");
    }
    eprintln!("unpack: {exact} of {total} samples bit-exact");
}

/// CPU reference of a filter: samples in, (expected output, error bound per sample) out.
type FilterReference<'a> = dyn Fn(&[f32]) -> (Vec<f32>, Vec<f32>) + 'a;

/// Runs a one-operator filter rig over random samples of each length and
/// compares with `reference(x, |x|) -> (y, bound)`.
fn check_filter(
    gpu: &Gpu,
    rig: &mut Rig,
    rng: &mut Rng,
    what: &str,
    lens: &[usize],
    reference: &FilterReference<'_>,
) -> (usize, usize) {
    let (x, y) = (
        rig.port(rig.first(), "in", PortDirection::Input),
        rig.port(rig.first(), "out", PortDirection::Output),
    );
    let capacity = x.bytes / 4;
    let (mut exact, mut total) = (0, 0);
    for &len in lens {
        let input = rng.floats(len.min(capacity), -10.0, 10.0);
        rig.poison(gpu);
        gpu.upload(x.dptr, &input);
        rig.set_desc(gpu, FrameDesc { n_samples: len as u32, ..Default::default() });
        rig.run(gpu);
        let n = len.min(capacity);
        let (want, bound) = reference(&input);
        let got: Vec<f32> = gpu.download(y.dptr, capacity);
        let label = format!("{what} n {len}");
        exact += assert_close(&label, &got[..n], &want, &bound, 1e-6);
        total += n;
        assert_untouched(&label, &got[n..]);
        let kept: Vec<f32> = gpu.download(x.dptr, n);
        assert!(kept.iter().zip(&input).all(|(a, b)| a.to_bits() == b.to_bits()), "{label}: input changed");
    }
    (exact, total)
}

/// Runs a linear filter `apply(x, absolute_coefficients, y)` on `x`, and on
/// |x| with |coefficients| for the error bound of each output.
fn with_bound(x: &[f32], apply: impl Fn(&[f32], bool, &mut [f32])) -> (Vec<f32>, Vec<f32>) {
    let (mut y, mut bound) = (vec![0f32; x.len()], vec![0f32; x.len()]);
    apply(x, false, &mut y);
    let ax: Vec<f32> = x.iter().map(|v| v.abs()).collect();
    apply(&ax, true, &mut bound);
    (y, bound)
}

const FILTER_LENS: [usize; 11] = [0, 1, 2, 3, 7, 100, 255, 4096, 4097, 524_288, 524_288 + 100];

#[test]
#[ignore = "needs a GPU"]
fn fir_matches_cpu() {
    let mut gpu = Gpu::open();
    let mut rng = Rng::fresh("fir");
    let capacity = 524_288;
    let (mut exact, mut total) = (0, 0);
    for count in [1usize, 3, 5, 31, 63] {
        let taps = rng.floats(count, -1.0, 1.0);
        let mut rig = Rig::single(&mut gpu, FirOp::fir("fir", &taps, capacity).unwrap());
        let abs_taps: Vec<f32> = taps.iter().map(|t| t.abs()).collect();
        let reference =
            |x: &[f32]| with_bound(x, |x, abs, y| cpu::fir(x, if abs { &abs_taps } else { &taps }, y));
        let (e, t) =
            check_filter(&gpu, &mut rig, &mut rng, &format!("fir {count} taps"), &FILTER_LENS, &reference);
        exact += e;
        total += t;
    }
    eprintln!("fir: {exact} of {total} samples bit-exact");
}

#[test]
#[ignore = "needs a GPU"]
fn filter2d_matches_cpu() {
    let mut gpu = Gpu::open();
    let mut rng = Rng::fresh("filter2d");
    let capacity = 524_288;
    let (mut exact, mut total) = (0, 0);
    for width in [1u32, 2, 3, 64, 100, 1000, 4096, 600_000] {
        let kernel: [f32; 9] = std::array::from_fn(|_| rng.float(-1.0, 1.0));
        let mut rig =
            Rig::single(&mut gpu, Filter2dOp::filter2d("filter2d", width, kernel, capacity).unwrap());
        let abs_kernel = kernel.map(f32::abs);
        let reference = |x: &[f32]| {
            with_bound(x, |x, abs, y| {
                cpu::filter2d(x, width as usize, if abs { &abs_kernel } else { &kernel }, y)
            })
        };
        let (e, t) = check_filter(
            &gpu,
            &mut rig,
            &mut rng,
            &format!("filter2d width {width}"),
            &FILTER_LENS,
            &reference,
        );
        exact += e;
        total += t;
    }
    eprintln!("filter2d: {exact} of {total} samples bit-exact");
}

fn check_stats(what: &str, got: &ChainResult, x: &[f32]) {
    let want = cpu::stats(x);
    let magnitude: f64 = x.iter().map(|v| v.abs() as f64).sum();
    let tol = |v: f32| 1e-5 * v.abs() as f64 + 1e-12 * magnitude;
    assert!(((got.sum - want.sum) as f64).abs() <= tol(want.sum), "{what}: sum {} vs {}", got.sum, want.sum);
    let mean_tol = tol(want.mean) / x.len().max(1) as f64 + 1e-5 * want.mean.abs() as f64;
    assert!(((got.mean - want.mean) as f64).abs() <= mean_tol, "{what}: mean {} vs {}", got.mean, want.mean);
    assert_eq!(
        (got.min.to_bits(), got.max.to_bits()),
        (want.min.to_bits(), want.max.to_bits()),
        "{what}: min/max"
    );
}

#[test]
#[ignore = "needs a GPU"]
fn stats_and_threshold_match_cpu_and_pass_samples_through() {
    let mut gpu = Gpu::open();
    let mut rng = Rng::fresh("reduce");
    let capacity = MIB;
    let lens = [0, 1, 2, 5, 1023, 4096, 4097, 65_537, 524_288, MIB, MIB + 5];
    for kind in 0..3 {
        let level = 0.0f32;
        let reduction = match kind {
            0 => Reduction::Stats,
            1 => Reduction::Threshold { level },
            _ => Reduction::StatsThreshold { level },
        };
        let mut rig = Rig::single(&mut gpu, ReduceOp::new("reduce", reduction, capacity));
        let x = rig.port(rig.first(), "in", PortDirection::Input);
        assert_eq!(x, rig.port(rig.first(), "out", PortDirection::Output), "samples pass through");
        for &len in &lens {
            for (lo, hi) in [(-1.0f32, 1.0f32), (-3.0, -1.0), (1.0, 3.0), (-1.0, 0.001)] {
                let n = len.min(capacity);
                let mut input = rng.floats(n, lo, hi);
                if n > 3 && hi < 0.01 {
                    // A lone sample above the level late in the frame, and one exactly at it.
                    input[n - 2] = 0.5;
                    input[n / 3] = level;
                }
                rig.poison(&gpu);
                gpu.upload(x.dptr, &input);
                rig.set_desc(&gpu, FrameDesc { n_samples: len as u32, ..Default::default() });
                rig.run(&gpu);
                let got = rig.result(&gpu);
                let what = format!("{reduction:?} n {len} in [{lo}, {hi})");
                let poison = f32::from_bits(u32::from_ne_bytes([RESULT_POISON; 4]));
                if matches!(reduction, Reduction::Threshold { .. }) {
                    assert_eq!(got.sum.to_bits(), poison.to_bits(), "{what}: threshold wrote the stats");
                } else {
                    check_stats(&what, &got, &input);
                }
                if matches!(reduction, Reduction::Stats) {
                    assert_eq!(
                        got.detect_count,
                        u32::from_ne_bytes([RESULT_POISON; 4]),
                        "{what}: stats wrote the count"
                    );
                } else {
                    let (count, first) = cpu::threshold(&input, level);
                    assert_eq!(
                        (got.detect_count, got.first_detect_index),
                        (count, first),
                        "{what}: threshold"
                    );
                }
                let kept: Vec<f32> = gpu.download(x.dptr, n);
                assert!(
                    kept.iter().zip(&input).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{what}: samples changed"
                );
            }
        }
    }
}

/// The tolerance of a GPU sum against the CPU's (both f64 sums of the f32
/// samples, in different orders, then rounded to f32): each f64 sum is
/// within (n - 1) * 2^-53 * sum|x| of the exact one, and rounding to f32
/// adds at most one f32 ulp of the result.
fn sum_tolerance(want: f32, n: usize, magnitude: f64) -> f64 {
    want.abs() as f64 * f32::EPSILON as f64 + n as f64 * f64::EPSILON * magnitude
}

/// A grid reduction's result against the CPU's f64 reference: min, max,
/// count and first index exact, sum and mean within [`sum_tolerance`], and
/// the fields of the reduction it does not compute still poison.
fn check_reduction(what: &str, got: &ChainResult, x: &[f32], reduction: Reduction) {
    let poison_word = u32::from_ne_bytes([RESULT_POISON; 4]);
    match reduction {
        Reduction::Threshold { .. } => {
            let stats = [got.sum, got.min, got.max, got.mean].map(f32::to_bits);
            assert_eq!(stats, [poison_word; 4], "{what}: threshold wrote the stats");
        }
        Reduction::Stats | Reduction::StatsThreshold { .. } => {
            let want = cpu::stats(x);
            let magnitude: f64 = x.iter().map(|v| v.abs() as f64).sum();
            let n = x.len();
            let sum_tol = sum_tolerance(want.sum, n, magnitude);
            assert!(
                ((got.sum - want.sum) as f64).abs() <= sum_tol,
                "{what}: sum {} vs {} (tolerance {sum_tol:e})",
                got.sum,
                want.sum
            );
            let mean_tol = want.mean.abs() as f64 * f32::EPSILON as f64 + sum_tol / n.max(1) as f64;
            assert!(
                ((got.mean - want.mean) as f64).abs() <= mean_tol,
                "{what}: mean {} vs {} (tolerance {mean_tol:e})",
                got.mean,
                want.mean
            );
            assert_eq!(
                (got.min.to_bits(), got.max.to_bits()),
                (want.min.to_bits(), want.max.to_bits()),
                "{what}: min/max {} {} vs {} {}",
                got.min,
                got.max,
                want.min,
                want.max
            );
        }
    }
    match reduction {
        Reduction::Stats => {
            let detect = [got.detect_count, got.first_detect_index as u32];
            assert_eq!(detect, [poison_word; 2], "{what}: stats wrote the detection");
        }
        Reduction::Threshold { level } | Reduction::StatsThreshold { level } => {
            let want = cpu::threshold(x, level);
            assert_eq!((got.detect_count, got.first_detect_index), want, "{what}: detect count, first index");
        }
    }
}

/// The ChainResult's bytes, for bit-for-bit comparisons (NaN included).
/// `graph` launched 100 times over a poisoned result gives `reference`'s bits every time.
fn assert_same_bits_over_100_launches(
    gpu: &Gpu,
    rig: &Rig,
    graph: &cudarc::driver::CudaGraph,
    reference: &ChainResult,
    what: &str,
) {
    for run in 0..100 {
        gpu.fill(rig.chain_result, RESULT_POISON, std::mem::size_of::<ChainResult>());
        graph.launch().unwrap();
        gpu.sync();
        assert_eq!(
            result_bits(&rig.result(gpu)),
            result_bits(reference),
            "{what}: graph launch {run} differs"
        );
    }
}

fn result_bits(r: &ChainResult) -> [u32; 6] {
    [
        r.sum.to_bits(),
        r.min.to_bits(),
        r.max.to_bits(),
        r.mean.to_bits(),
        r.detect_count,
        r.first_detect_index as u32,
    ]
}

/// The ticket word of every reduction scratch of the rig: 0 between frames.
fn assert_tickets_reset(gpu: &Gpu, rig: &Rig, what: &str) {
    for s in rig.scratch_buffers() {
        let ticket: Vec<u32> = gpu.download(s.dptr, 1);
        assert_eq!(ticket[0], 0, "{what}: the last block did not reset the ticket");
    }
}

/// Frame sizes (samples) that are not multiples of the block's share, on
/// both sides of the one-block limit, up to the largest frame.
const GRID_LENS: [usize; 11] =
    [0, 1, 255, 257, 8193, 32_768, 32_769, 100_003, (1 << 20) + 3, (3 << 20) - 1, 3 << 20];

fn grid_reductions(level: f32) -> [Reduction; 3] {
    [Reduction::Stats, Reduction::Threshold { level }, Reduction::StatsThreshold { level }]
}

#[test]
#[ignore = "needs a GPU"]
fn grid_reductions_match_the_cpu_at_every_size_and_repeat_bit_for_bit() {
    let mut gpu = Gpu::open();
    let mut rng = Rng::fresh("grid reduce");
    let capacity = 3 << 20;
    let level = 0.25f32;
    for reduction in grid_reductions(level) {
        let mut rig = Rig::single(&mut gpu, ReduceOp::new("reduce", reduction, capacity));
        assert_eq!(rig.scratch_buffers().count(), 1, "a {capacity}-sample reduction declares its scratch");
        let x = rig.port(rig.first(), "in", PortDirection::Input);
        for &len in &GRID_LENS {
            for (lo, hi) in [(-1.0f32, 1.0f32), (1.0, 3.0), (-3.0, 0.2)] {
                let mut input = rng.floats(len, lo, hi);
                if len > 3 && hi < level {
                    // A single sample above the level late in the frame, and one exactly at it before.
                    input[len - 2] = 0.5;
                    input[len / 3] = level;
                }
                let what = format!("{reduction:?} n {len} in [{lo}, {hi})");
                rig.poison(&gpu);
                gpu.upload(x.dptr, &input);
                rig.set_desc(&gpu, FrameDesc { n_samples: len as u32, ..Default::default() });
                rig.run(&gpu);
                let first = rig.result(&gpu);
                check_reduction(&what, &first, &input, reduction);
                assert_tickets_reset(&gpu, &rig, &what);
                // The same frame again, the result poisoned but the scratch as the last frame left it.
                gpu.fill(rig.chain_result, RESULT_POISON, std::mem::size_of::<ChainResult>());
                rig.run(&gpu);
                assert_eq!(result_bits(&rig.result(&gpu)), result_bits(&first), "{what}: second run differs");
                let kept: Vec<f32> = gpu.download(x.dptr, len);
                assert!(
                    kept.iter().zip(&input).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{what}: samples changed"
                );
            }
        }
        // A frame claiming more samples than the buffer holds is clamped to it.
        let input = rng.floats(capacity, -1.0, 1.0);
        rig.poison(&gpu);
        gpu.upload(x.dptr, &input);
        rig.set_desc(&gpu, FrameDesc { n_samples: u32::MAX, ..Default::default() });
        rig.run(&gpu);
        check_reduction(&format!("{reduction:?} n_samples u32::MAX"), &rig.result(&gpu), &input, reduction);
    }
}

#[test]
#[ignore = "needs a GPU"]
fn grid_reductions_captured_in_a_graph_give_identical_bits_over_100_frames() {
    let mut gpu = Gpu::open();
    let mut rng = Rng::fresh("grid reduce determinism");
    let capacity = 3 << 20;
    let level = 0.9f32;
    for len in [(1 << 20) + 3, 3 << 20] {
        let reduction = Reduction::StatsThreshold { level };
        let mut rig = Rig::single(&mut gpu, ReduceOp::new("reduce", reduction, capacity));
        let x = rig.port(rig.first(), "in", PortDirection::Input);
        // Samples of both signs and many magnitudes: the f64 sum depends on its order.
        let input: Vec<f32> =
            (0..len).map(|_| rng.float(-1.0, 1.0) * 2f32.powi(rng.below(40) as i32 - 20)).collect();
        rig.poison(&gpu);
        gpu.upload(x.dptr, &input);
        rig.set_desc(&gpu, FrameDesc { n_samples: len as u32, ..Default::default() });
        rig.run(&gpu);
        let reference = rig.result(&gpu);
        let what = format!("n {len}");
        check_reduction(&what, &reference, &input, reduction);

        let graph = rig.capture(&gpu);
        assert_same_bits_over_100_launches(&gpu, &rig, &graph, &reference, &what);
        assert_tickets_reset(&gpu, &rig, &what);
        // A small frame through the same graph: one block, the same bits as a one-block rig.
        let small = rng.floats(5000, -1.0, 1.0);
        gpu.upload(x.dptr, &small);
        rig.set_desc(&gpu, FrameDesc { n_samples: small.len() as u32, ..Default::default() });
        gpu.fill(rig.chain_result, RESULT_POISON, std::mem::size_of::<ChainResult>());
        graph.launch().unwrap();
        gpu.sync();
        let from_grid = rig.result(&gpu);
        check_reduction("5000 samples in the large graph", &from_grid, &small, reduction);
        let mut one = Rig::single(&mut gpu, ReduceOp::new("reduce", reduction, small.len()));
        assert_eq!(one.scratch_buffers().count(), 0, "a small reduction has no scratch");
        let y = one.port(one.first(), "in", PortDirection::Input);
        one.poison(&gpu);
        gpu.upload(y.dptr, &small);
        one.set_desc(&gpu, FrameDesc { n_samples: small.len() as u32, ..Default::default() });
        one.run(&gpu);
        assert_eq!(
            result_bits(&one.result(&gpu)),
            result_bits(&from_grid),
            "one block against the grid's one block"
        );
    }
}

#[test]
#[ignore = "needs a GPU"]
fn delay_holds_the_stream_for_its_time() {
    let mut gpu = Gpu::open();
    let delay = Duration::from_micros(300);
    let mut rig = Rig::single(&mut gpu, DelayOp::new("delay", delay.as_nanos() as u64, 4));
    rig.run(&gpu); // warm
    let start = Instant::now();
    rig.run(&gpu);
    assert!(start.elapsed() >= delay, "returned after {:?}", start.elapsed());
}

/// A random valid chain: unpack first, then up to four other operators.
fn random_chain(rng: &mut Rng) -> Vec<OpSpec> {
    let format = [SampleFormat::U8, SampleFormat::U16, SampleFormat::U12][rng.below(3)];
    let mut chain =
        vec![OpSpec::Unpack { format, scale: rng.float(0.001, 0.1), offset: rng.float(-5.0, 5.0) }];
    let (mut stats, mut threshold) = (false, false);
    for _ in 0..rng.below(5) {
        match rng.below(4) {
            0 => {
                let count = 2 * rng.below(32) + 1;
                chain.push(OpSpec::Fir { taps: rng.floats(count, -0.5, 0.5) })
            }
            1 => chain.push(OpSpec::Filter2d {
                width: 1 + rng.below(300) as u32,
                kernel: std::array::from_fn(|_| rng.float(-0.3, 0.3)),
            }),
            2 if !stats => {
                stats = true;
                chain.push(OpSpec::Stats)
            }
            3 if !threshold => {
                threshold = true;
                chain.push(OpSpec::Threshold { level: rng.float(-1.0, 1.0) })
            }
            _ => {}
        }
    }
    chain
}

/// Compares one GPU run of a whole chain with the CPU chain on the same payload.
fn check_chain(gpu: &Gpu, rig: &Rig, cpu_chain: &mut CpuChain, raw: &[u8], what: &str) {
    let want = cpu_chain.run(raw);
    let desc = rig.desc(gpu);
    assert_eq!(desc.n_samples as usize, want.output_len, "{what}: n_samples");
    let out = rig.port(rig.last(), "out", PortDirection::Output);
    let got: Vec<f32> = gpu.download(out.dptr, want.output_len);
    let want_samples = cpu_chain.output(&want);
    // Chained filters compound rounding; the CPU and GPU order their f32 work alike, so they agree exactly.
    for (i, (g, w)) in got.iter().zip(want_samples).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g - w).abs() <= 1e-5 * w.abs(),
            "{what}: sample {i}: {g} vs {w}"
        );
    }
    let result = rig.result(gpu);
    if let Some(stats) = want.stats {
        assert!(
            ((result.sum - stats.sum) as f64).abs() <= 1e-5 * stats.sum.abs() as f64 + 1e-3,
            "{what}: sum"
        );
        assert_eq!((result.min, result.max), (stats.min, stats.max), "{what}: min/max");
    }
    if let Some(detect) = want.detect {
        assert_eq!((result.detect_count, result.first_detect_index), detect, "{what}: threshold");
    }
}

#[test]
#[ignore = "needs a GPU"]
fn whole_chains_match_the_cpu_chain_also_when_captured_into_a_graph() {
    let mut gpu = Gpu::open();
    let mut rng = Rng::fresh("chains");
    let payload = gpu.alloc(MIB);
    let mut chains = vec![frameloop::ops::default_chain()];
    chains.extend((0..12).map(|_| random_chain(&mut rng)));
    for (c, chain) in chains.iter().enumerate() {
        for max_frame in [8192usize, MIB] {
            for fuse in [true, false] {
                let layout = ChainLayout { fuse_reductions: fuse, delay_ns: 0 };
                let mut rig = Rig::new(&mut gpu, build_main_fragment(chain, max_frame, layout).unwrap());
                let mut cpu_chain = CpuChain::new(chain, max_frame).unwrap();
                let what = format!("chain {c} {chain:?} max {max_frame} fused {fuse}");
                // Enqueued directly, on frames of several sizes.
                for len in [max_frame, max_frame - 1, 1 + rng.below(max_frame), 0] {
                    let raw = rng.bytes(len);
                    gpu.upload(payload, &raw);
                    rig.poison(&gpu);
                    rig.set_desc(
                        &gpu,
                        FrameDesc { payload_dptr: payload, payload_len: len as u32, ..Default::default() },
                    );
                    rig.run(&gpu);
                    check_chain(&gpu, &rig, &mut cpu_chain, &raw, &format!("{what} len {len}"));
                }
                if max_frame != 8192 {
                    continue;
                }
                // Captured once into a graph, replayed on new frames.
                let graph = rig.capture(&gpu);
                for _ in 0..3 {
                    let len = 1 + rng.below(max_frame);
                    let raw = rng.bytes(len);
                    gpu.upload(payload, &raw);
                    rig.poison(&gpu);
                    rig.set_desc(
                        &gpu,
                        FrameDesc { payload_dptr: payload, payload_len: len as u32, ..Default::default() },
                    );
                    graph.launch().unwrap();
                    gpu.sync();
                    check_chain(&gpu, &rig, &mut cpu_chain, &raw, &format!("{what} graph len {len}"));
                }
            }
        }
    }
}

/// Frame sizes (bytes) the tiled fused kernel is checked at: not multiples
/// of a tile or of the unpack chunks, and a 768 KiB image.
const TILED_LENS: [usize; 6] = [1, 3, 4095, 786_432, (2 << 20) + 6, 0];

/// The 768 KiB image chain of bench/configs/image-u12.toml, with a FIR behind it.
fn image_chain(rng: &mut Rng) -> Vec<OpSpec> {
    vec![
        OpSpec::Unpack { format: SampleFormat::U12, scale: 1.0 / 4096.0, offset: -0.5 },
        OpSpec::Filter2d { width: 1024, kernel: std::array::from_fn(|_| rng.float(-0.3, 0.3)) },
        OpSpec::Fir { taps: rng.floats(7, -0.5, 0.5) },
        OpSpec::Stats,
        OpSpec::Threshold { level: 0.1 },
    ]
}

/// One frame of `raw` through a tiled rig against the CPU chain: n_samples,
/// every final sample (and nothing written past them), the reductions
/// (min, max, counts exact; the sum within the f64 tolerance) and the
/// result fields the chain does not compute left as they were.
fn check_tiled(
    gpu: &Gpu,
    rig: &mut Rig,
    cpu_chain: &mut CpuChain,
    payload: DevicePtr,
    raw: &[u8],
    what: &str,
) {
    gpu.upload(payload, raw);
    let desc = FrameDesc { payload_dptr: payload, payload_len: raw.len() as u32, ..Default::default() };
    check_tiled_frame(gpu, rig, cpu_chain, desc, raw, what);
}

/// Poisons `rig`'s outputs, runs it on the frame `desc` describes and
/// checks every sample and the result against the CPU chain on `raw`, the
/// bytes the frame should be read as.
fn check_tiled_frame(
    gpu: &Gpu,
    rig: &mut Rig,
    cpu_chain: &mut CpuChain,
    desc: FrameDesc,
    raw: &[u8],
    what: &str,
) {
    rig.poison(gpu);
    rig.set_desc(gpu, desc);
    rig.run(gpu);
    let want = cpu_chain.run(raw);
    assert_eq!(rig.desc(gpu).n_samples as usize, want.output_len, "{what}: n_samples");
    let port = rig.port(rig.first(), "samples", PortDirection::Output);
    let all: Vec<f32> = gpu.download(port.dptr, port.bytes / 4);
    let want_samples = cpu_chain.output(&want);
    for (i, (g, w)) in all.iter().zip(want_samples).enumerate() {
        assert!(g.to_bits() == w.to_bits(), "{what}: sample {i}: {g} vs {w}");
    }
    assert_untouched(what, &all[want.output_len..]);
    let result = rig.result(gpu);
    let poison_word = u32::from_ne_bytes([RESULT_POISON; 4]);
    let x = want_samples;
    match want.stats {
        Some(stats) => {
            let magnitude: f64 = x.iter().map(|v| v.abs() as f64).sum();
            let tol = sum_tolerance(stats.sum, x.len(), magnitude);
            assert!(
                ((result.sum - stats.sum) as f64).abs() <= tol,
                "{what}: sum {} vs {}",
                result.sum,
                stats.sum
            );
            assert_eq!(
                (result.min.to_bits(), result.max.to_bits()),
                (stats.min.to_bits(), stats.max.to_bits())
            );
        }
        None => assert_eq!(result.sum.to_bits(), poison_word, "{what}: no stats in the chain, sum written"),
    }
    match want.detect {
        Some(detect) => {
            assert_eq!((result.detect_count, result.first_detect_index), detect, "{what}: threshold")
        }
        None => {
            assert_eq!(result.detect_count, poison_word, "{what}: no threshold in the chain, count written")
        }
    }
    assert_tickets_reset(gpu, rig, what);
}

/// The tiled rig of `chain` for frames of `max_frame` bytes (scratch and
/// samples ports), planned for frames read from `source`.
fn tiled_rig_from(gpu: &mut Gpu, chain: &[OpSpec], max_frame: usize, source: FrameSource) -> Rig {
    let encoded = FusedChain::encode(chain, max_frame).unwrap();
    Rig::single(gpu, FusedTiledOp::new("tiled", encoded, source).unwrap().with_samples_port())
}

/// [`tiled_rig_from`] the mapped slot.
fn tiled_rig(gpu: &mut Gpu, chain: &[OpSpec], max_frame: usize) -> Rig {
    tiled_rig_from(gpu, chain, max_frame, FrameSource::MappedSlot)
}

/// A frame that streams into device memory: planned for device memory, the
/// tiled kernel reads the bytes the pulls staged (below `pulled`) from the
/// staging buffer and the rest from the slot, with no tail copy first. The
/// staging buffer here holds other bytes than the slot below `pulled`, so
/// the result shows which one each sample came from.
#[test]
#[ignore = "needs a GPU"]
fn tiled_kernel_reads_a_streamed_frame_from_the_staging_buffer_below_pulled_and_the_slot_above() {
    let mut gpu = Gpu::open();
    let mut rng = Rng::fresh("tiled streamed");
    let max_frame = (2 << 20) + 64;
    let (slot, staging, state) =
        (gpu.alloc(max_frame), gpu.alloc(max_frame.next_multiple_of(16)), gpu.alloc(64));
    let mut chains = vec![frameloop::ops::default_chain(), image_chain(&mut rng)];
    chains.extend((0..4).map(|_| random_chain(&mut rng)));
    for (c, chain) in chains.iter().enumerate() {
        let mut rig = tiled_rig_from(&mut gpu, chain, max_frame, FrameSource::DeviceMemory);
        rig.streamed = Some(StreamedFrame { state, staging, staging_words: max_frame.div_ceil(16) as u32 });
        let mut cpu_chain = CpuChain::new(chain, max_frame).unwrap();
        let odd = 1 + rng.below(max_frame - 1);
        for (len, pulled) in [
            (786_432, 0),
            (786_432, 786_432),
            (786_432, 16 * 1_000),
            ((2 << 20) + 6, 2 << 20),
            (odd, (odd / 2) & !15),
            (4095, 4080),
        ] {
            let ring_seq = 7 + rng.below(1000) as u64;
            let mut from_slot = rng.bytes(len);
            let staged = rng.bytes(pulled);
            // A sample whose bytes straddle `pulled` is read from the slot, so
            // the two agree on the bytes just below it.
            let agree = pulled.saturating_sub(2);
            from_slot[agree..pulled].copy_from_slice(&staged[agree..pulled]);
            gpu.upload(slot, &from_slot);
            if pulled > 0 {
                gpu.upload(staging, &staged);
            }
            gpu.upload(state, &[ring_seq, pulled as u64, 0, 0]);
            let mut frame = staged.clone();
            frame.extend_from_slice(&from_slot[pulled..]);
            let desc =
                FrameDesc { payload_dptr: slot, payload_len: len as u32, ring_seq, ..Default::default() };
            let what = format!("chain {c} {chain:?} len {len} pulled {pulled}");
            check_tiled_frame(&gpu, &mut rig, &mut cpu_chain, desc, &frame, &what);
            // The state of another frame: the whole frame from the slot.
            gpu.upload(state, &[ring_seq + 1, pulled as u64, 0, 0]);
            let what = format!("chain {c} len {len}, stale state");
            check_tiled_frame(&gpu, &mut rig, &mut cpu_chain, desc, &from_slot, &what);
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn tiled_fused_chains_match_the_cpu_chain_at_every_size() {
    let mut gpu = Gpu::open();
    let mut rng = Rng::fresh("tiled chains");
    let max_frame = (2 << 20) + 64;
    let payload = gpu.alloc(max_frame);
    let mut chains = vec![frameloop::ops::default_chain(), image_chain(&mut rng)];
    // FIRs of both kinds of tap count: compiled in (3 to 15) and any other (1, 17, 21).
    chains.push(vec![
        OpSpec::Unpack { format: SampleFormat::U16, scale: 0.01, offset: -3.0 },
        OpSpec::Fir { taps: rng.floats(17, -0.5, 0.5) },
        OpSpec::Fir { taps: rng.floats(15, -0.5, 0.5) },
        OpSpec::Fir { taps: rng.floats(21, -0.5, 0.5) },
        OpSpec::Fir { taps: rng.floats(1, -0.5, 0.5) },
        OpSpec::Stats,
        OpSpec::Threshold { level: 0.1 },
    ]);
    // filter2d on rows a multiple of 4 long (whole quads read as float4s)
    // and on short ones (mostly border quads), then a FIR of the longest
    // taps read as float4s.
    chains.push(vec![
        OpSpec::Unpack { format: SampleFormat::U12, scale: 1.0 / 4096.0, offset: 0.0 },
        OpSpec::Filter2d { width: 1024, kernel: std::array::from_fn(|_| rng.float(-0.3, 0.3)) },
        OpSpec::Stats,
        OpSpec::Threshold { level: 0.2 },
    ]);
    chains.push(vec![
        OpSpec::Unpack { format: SampleFormat::U8, scale: 0.01, offset: -1.0 },
        OpSpec::Filter2d { width: 12, kernel: std::array::from_fn(|_| rng.float(-0.3, 0.3)) },
        OpSpec::Threshold { level: 0.05 },
        OpSpec::Fir { taps: rng.floats(9, -0.5, 0.5) },
        OpSpec::Stats,
    ]);
    chains.extend((0..10).map(|_| random_chain(&mut rng)));
    // Both plans: tiles capped by the halo (mapped slot) and spread over
    // every block (device memory, the streaming path).
    let sources = [FrameSource::MappedSlot, FrameSource::DeviceMemory];
    for ((c, chain), source) in chains.iter().enumerate().flat_map(|c| sources.map(|s| (c, s))) {
        let mut rig = tiled_rig_from(&mut gpu, chain, max_frame, source);
        let mut cpu_chain = CpuChain::new(chain, max_frame).unwrap();
        for len in TILED_LENS.iter().copied().chain([max_frame, 1 + rng.below(max_frame)]) {
            let raw = rng.bytes(len);
            check_tiled(
                &gpu,
                &mut rig,
                &mut cpu_chain,
                payload,
                &raw,
                &format!("chain {c} {chain:?} from {source:?}, len {len}"),
            );
        }
        // The same rig again: the scratch as the last frame left it.
        let raw = rng.bytes(786_432);
        check_tiled(
            &gpu,
            &mut rig,
            &mut cpu_chain,
            payload,
            &raw,
            &format!("chain {c} from {source:?} again"),
        );
    }
}

/// The largest slot ring.slot_bytes allows (1 GiB): every block takes many tiles.
#[test]
#[ignore = "needs a GPU"]
fn tiled_fused_default_chain_matches_the_cpu_on_the_largest_slot() {
    let mut gpu = Gpu::open();
    let mut rng = Rng::fresh("tiled largest slot");
    let max_frame = 1 << 30;
    let payload = gpu.alloc(max_frame);
    let chain = frameloop::ops::default_chain();
    let mut rig = tiled_rig(&mut gpu, &chain, max_frame);
    let mut cpu_chain = CpuChain::new(&chain, max_frame).unwrap();
    for len in [max_frame, max_frame - 3] {
        let raw = rng.bytes(len);
        check_tiled(&gpu, &mut rig, &mut cpu_chain, payload, &raw, &format!("default chain len {len}"));
    }
}

#[test]
#[ignore = "needs a GPU"]
fn tiled_fused_chains_give_identical_bits_over_100_graph_launches() {
    let mut gpu = Gpu::open();
    let mut rng = Rng::fresh("tiled determinism");
    let max_frame = (2 << 20) + 6;
    let payload = gpu.alloc(max_frame);
    for chain in [frameloop::ops::default_chain(), image_chain(&mut rng)] {
        let mut rig = tiled_rig(&mut gpu, &chain, max_frame);
        let mut cpu_chain = CpuChain::new(&chain, max_frame).unwrap();
        let raw = rng.bytes(max_frame);
        let what = format!("{chain:?}");
        check_tiled(&gpu, &mut rig, &mut cpu_chain, payload, &raw, &what);
        let reference = rig.result(&gpu);
        let graph = rig.capture(&gpu);
        assert_same_bits_over_100_launches(&gpu, &rig, &graph, &reference, &what);
        assert_tickets_reset(&gpu, &rig, &what);
    }
}
