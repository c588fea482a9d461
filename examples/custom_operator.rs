//! A Rust GPU operator in the appliance's chain: a gain, compiled from the
//! inline CUDA source below with frameloop's NVRTC helper, goes in after the
//! FIR of the default chain (unpack -> fir -> gain -> stats -> threshold).
//! The appliance runs on the CUDA backend and an in-process sender streams
//! frames to it over loopback; the example prints the latency summary and
//! checks the first results against the same chain computed on the CPU.
//!
//! Usage: custom_operator [frames] [gain]  (needs a GPU; says so and exits 0 without one)

use cudarc::driver::{CudaFunction, CudaModule, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use frameloop::app::{Appliance, StartOptions};
use frameloop::config::{BackendChoice, Config};
use frameloop::gpu::{
    ComputeContext, FragmentError, GpuResidentOperator, OperatorPosition, OperatorSpec, PortMemory,
    samples_after,
};
use frameloop::ops::{OpSpec, cpu};
use frameloop::ring::ResultRecord;
use frameloop::sender::{GsoMode, Pattern, SendArgs, run_sender};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The gain kernel. `ops_common.cuh` (embedded in frameloop, with
/// `ring.cuh`'s `FrameDesc`) gives the frame's sample count clamped to the
/// buffer; `__fmul_rn` rounds the product as the CPU does.
const GAIN_SOURCE: &str = r#"
#include "ops_common.cuh"
extern "C" __global__ void gain(const FrameDesc* fd, const float* x, float* y, uint32_t capacity, float g) {
  uint32_t n = fl_frame_samples(fd, capacity);
  for (uint64_t i = fl_grid_thread(); i < n; i += fl_grid_threads()) y[i] = __fmul_rn(x[i], g);
}
"#;

const THREADS: u32 = 256;

/// `y = gain * x` over the chain's samples: ports `in` and `out` of the
/// chain's sample buffer size where it is inserted.
struct Gain {
    gain: f32,
    port_bytes: usize,
    /// Compiled and loaded on the first enqueue (the GPU is opened by the appliance).
    kernel: Option<(Arc<CudaModule>, CudaFunction)>,
}

impl Gain {
    fn new(gain: f32, samples: usize) -> Self {
        Self { gain, port_bytes: samples.max(1) * 4, kernel: None }
    }

    fn problem(&self, problem: String) -> FragmentError {
        FragmentError::Operator { operator: self.name().to_string(), problem }
    }

    fn load(&mut self, ctx: &ComputeContext<'_>) -> Result<&CudaFunction, FragmentError> {
        if self.kernel.is_none() {
            let gpu = ctx.stream().context();
            let (major, minor) = gpu.compute_capability().map_err(|e| self.problem(e.to_string()))?;
            let cubin = frameloop::gpu::nvrtc::compile("gain.cu", GAIN_SOURCE, &format!("sm_{major}{minor}"))
                .map_err(|e| self.problem(e.to_string()))?;
            let module = gpu.load_module(Ptx::from_binary(cubin)).map_err(|e| self.problem(e.to_string()))?;
            let function = module.load_function("gain").map_err(|e| self.problem(e.to_string()))?;
            self.kernel = Some((module, function));
        }
        Ok(&self.kernel.as_ref().expect("loaded above").1)
    }
}

impl GpuResidentOperator for Gain {
    fn name(&self) -> &str {
        "gain"
    }

    fn setup(&mut self, spec: &mut OperatorSpec) {
        spec.input("in", PortMemory::Size(self.port_bytes)).output("out", PortMemory::Size(self.port_bytes));
    }

    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        let (x, y) = (ctx.port("in")?, ctx.port("out")?);
        let capacity = u32::try_from(x.bytes.min(y.bytes) / 4).unwrap_or(u32::MAX);
        let fd = ctx.frame_desc();
        let gain = self.gain;
        let stream = ctx.stream();
        let function = self.load(ctx)?;
        let mut launch = stream.launch_builder(function);
        launch.arg(&fd).arg(&x.dptr).arg(&y.dptr).arg(&capacity).arg(&gain);
        let grid = capacity.div_ceil(THREADS).clamp(1, 1024);
        let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: (const FrameDesc*, const float*, float*, uint32_t, float) is the signature of
        // `gain` above; it touches at most `capacity` floats of either port.
        unsafe { launch.launch(cfg) }.map_err(|e| ctx.enqueue_error("gain", e))?;
        Ok(())
    }
}

/// What the chain with the gain gives for one frame on the CPU: (stats, threshold).
fn cpu_chain(chain: &[OpSpec], gain: f32, payload: &[u8]) -> (cpu::Stats, (u32, i32)) {
    let [
        OpSpec::Unpack { format, scale, offset },
        OpSpec::Fir { taps },
        OpSpec::Stats,
        OpSpec::Threshold { level },
    ] = chain
    else {
        panic!("the example's chain is unpack, fir, stats, threshold")
    };
    let mut x = vec![0f32; format.samples_in(payload.len())];
    cpu::unpack(payload, *format, *scale, *offset, &mut x);
    let mut f = vec![0f32; x.len()];
    cpu::fir(&x, taps, &mut f);
    let g: Vec<f32> = f.iter().map(|v| v * gain).collect();
    (cpu::stats(&g), cpu::threshold(&g, *level))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let frames: u64 = args.next().map_or(2000, |a| a.parse().expect("frames must be a number"));
    let gain: f32 = args.next().map_or(2.0, |a| a.parse().expect("gain must be a number"));
    if let Err(why) = frameloop::gpu::probe(0) {
        println!("custom_operator needs a GPU with the CUDA backend ({why}); nothing to do here");
        return;
    }
    frameloop::app::init_logging();

    let frame_bytes = 8192;
    let mut cfg = Config { backend: BackendChoice::Cuda, ..Config::default() };
    cfg.ring.slot_bytes = frame_bytes;
    cfg.ingest.bind = "127.0.0.1:0".into();
    let position = OperatorPosition::After("fir".into());
    let samples =
        samples_after(&cfg.chain, cfg.ring.slot_bytes, &position, "gain").expect("the chain has a fir");

    let results = Arc::new(Mutex::new(Vec::<ResultRecord>::new()));
    let sink = Arc::clone(&results);
    let options = StartOptions {
        on_result: Some(Box::new(move |r: &ResultRecord| sink.lock().unwrap().push(*r))),
        ..Default::default()
    };
    let app = Appliance::builder(&cfg)
        .options(options)
        .operator(position, Gain::new(gain, samples))
        .start()
        .unwrap_or_else(|e| panic!("the appliance does not start: {e}"));

    let send = SendArgs {
        to: app.local_addr().to_string(),
        rate: 1000.0,
        frame_bytes: frame_bytes as u64,
        packet_bytes: 8972,
        count: Some(frames),
        duration: None,
        streams: 1,
        pattern: Pattern::Random,
        gso: GsoMode::Auto,
        pacing: Default::default(),
        catch_up: frameloop::sender::DEFAULT_CATCH_UP,
        bind: None,
        link_gbps: None,
    };
    let sent = run_sender(&send, &AtomicBool::new(false), |_| {}).expect("the sender runs");
    let deadline = Instant::now() + Duration::from_secs(10);
    while (results.lock().unwrap().len() as u64) < sent.frames && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let report = app.stop().expect("the appliance stops");
    print!("{}", report.render());

    let results = results.lock().unwrap();
    let mut checked = 0;
    for r in results.iter().take(20) {
        let payload = Pattern::Random.frame(r.stream_id, r.frame_seq, frame_bytes);
        let (s, detect) = cpu_chain(&cfg.chain, gain, &payload);
        let close = |a: f32, b: f32| (a - b).abs() <= 1e-5 * b.abs().max(1.0);
        assert!(
            close(r.sum, s.sum) && close(r.mean, s.mean) && (r.min, r.max) == (s.min, s.max),
            "frame {}: GPU sum {} mean {} min {} max {}, CPU {s:?}",
            r.frame_seq,
            r.sum,
            r.mean,
            r.min,
            r.max
        );
        assert_eq!((r.detect_count, r.first_detect_index), detect, "frame {}: threshold", r.frame_seq);
        checked += 1;
    }
    assert!(checked > 0, "no results came back ({} frames sent)", sent.frames);
    println!(
        "{} of {} frames processed; the first {checked} match the CPU with gain {gain}",
        results.len(),
        sent.frames
    );
}
