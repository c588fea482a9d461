//! A Rust operator inserted into the appliance's chain through
//! `Appliance::builder`, on a real GPU (ignored without one; run on the GPU
//! machine with `--include-ignored --test-threads=1`): a gain between the FIR
//! and the stats+threshold, fed over loopback with fresh random frames of
//! odd sizes, gives for every frame what the CPU reference operators give
//! with the gain applied. The operator poisons its output before writing it,
//! so a sample it failed to write shows up as a NaN in the stats. Without a
//! GPU, its kernel source is compiled with NVRTC.

mod appliance_support;

use appliance_support::{Expected, PATIENCE, check_result, one_at_a_time, wait_for};
use cudarc::driver::{CudaFunction, CudaModule, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use frameloop::app::{Appliance, StartOptions};
use frameloop::config::{BackendChoice, Config};
use frameloop::gpu::{
    ComputeContext, FragmentError, GpuResidentOperator, OperatorPosition, OperatorSpec, PortMemory,
    samples_after,
};
use frameloop::ops::{OpSpec, SampleFormat, cpu, default_chain};
use frameloop::ring::ResultRecord;
use frameloop::ring::layout::{RESULT_GPU_CLOCK, SLOT_COMPLETE};
use frameloop::sender::Pattern;
use frameloop::sender::build_frame_datagrams;
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::sync::{Arc, Mutex};

const FRAME_BYTES: usize = 8192;
const PACKET_BYTES: usize = 1472;

/// `fill_nan` poisons the whole output port; `gain` then writes the frame's samples.
const SOURCE: &str = r#"
#include "ops_common.cuh"
extern "C" __global__ void fill_nan(float* y, uint32_t capacity) {
  for (uint64_t i = fl_grid_thread(); i < capacity; i += fl_grid_threads()) y[i] = __int_as_float(0x7fc00000);
}
extern "C" __global__ void gain(const FrameDesc* fd, const float* x, float* y, uint32_t capacity, float g) {
  uint32_t n = fl_frame_samples(fd, capacity);
  for (uint64_t i = fl_grid_thread(); i < n; i += fl_grid_threads()) y[i] = __fmul_rn(x[i], g);
}
"#;

const THREADS: u32 = 256;

fn launch_config(items: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (items.div_ceil(THREADS).clamp(1, 1024), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `y = gain * x` after poisoning `y`; ports `in` and `out` of `samples` floats.
struct PoisoningGain {
    gain: f32,
    port_bytes: usize,
    kernels: Option<(Arc<CudaModule>, CudaFunction, CudaFunction)>,
}

impl PoisoningGain {
    fn problem(&self, e: impl ToString) -> FragmentError {
        FragmentError::Operator { operator: "gain".into(), problem: e.to_string() }
    }
}

impl GpuResidentOperator for PoisoningGain {
    fn name(&self) -> &str {
        "gain"
    }

    fn setup(&mut self, spec: &mut OperatorSpec) {
        spec.input("in", PortMemory::Size(self.port_bytes)).output("out", PortMemory::Size(self.port_bytes));
    }

    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        let (x, y) = (ctx.port("in")?, ctx.port("out")?);
        assert_ne!(x.dptr, y.dptr, "in and out are separate buffers");
        let stream = ctx.stream();
        if self.kernels.is_none() {
            let gpu = stream.context();
            let (major, minor) = gpu.compute_capability().map_err(|e| self.problem(e))?;
            let cubin = frameloop::gpu::nvrtc::compile("gain.cu", SOURCE, &format!("sm_{major}{minor}"))
                .map_err(|e| self.problem(e))?;
            let module = gpu.load_module(Ptx::from_binary(cubin)).map_err(|e| self.problem(e))?;
            let fill = module.load_function("fill_nan").map_err(|e| self.problem(e))?;
            let gain = module.load_function("gain").map_err(|e| self.problem(e))?;
            self.kernels = Some((module, fill, gain));
        }
        let (_, fill, gain) = self.kernels.as_ref().expect("loaded above");
        let capacity = u32::try_from(x.bytes.min(y.bytes) / 4).unwrap_or(u32::MAX);
        let out_capacity = u32::try_from(y.bytes / 4).unwrap_or(u32::MAX);
        let mut poison = stream.launch_builder(fill);
        poison.arg(&y.dptr).arg(&out_capacity);
        // SAFETY: (float*, uint32_t) is fill_nan's signature; it writes `out_capacity` floats of `out`.
        unsafe { poison.launch(launch_config(out_capacity)) }
            .map_err(|e| ctx.enqueue_error("fill_nan", e))?;
        let fd = ctx.frame_desc();
        let mut launch = stream.launch_builder(gain);
        launch.arg(&fd).arg(&x.dptr).arg(&y.dptr).arg(&capacity).arg(&self.gain);
        // SAFETY: (const FrameDesc*, const float*, float*, uint32_t, float) is gain's
        // signature; it touches at most `capacity` floats of either port.
        unsafe { launch.launch(launch_config(capacity)) }.map_err(|e| ctx.enqueue_error("gain", e))?;
        Ok(())
    }
}

/// The chain around the gain, and the values the CPU reference takes from it.
struct Reference {
    chain: Vec<OpSpec>,
    gain: f32,
}

impl Reference {
    /// unpack -> fir -> [gain] -> stats -> threshold, the threshold level
    /// scaled with the gain so that it splits frames.
    fn new(gain: f32) -> Self {
        let mut chain = default_chain();
        for op in &mut chain {
            if let OpSpec::Threshold { level } = op {
                *level *= gain;
            }
        }
        Self { chain, gain }
    }

    /// What the chain with the gain reports for `payload`, from the CPU operators.
    fn expected(&self, payload: &[u8]) -> Expected {
        let [
            OpSpec::Unpack { format, scale, offset },
            OpSpec::Fir { taps },
            OpSpec::Stats,
            OpSpec::Threshold { level },
        ] = self.chain.as_slice()
        else {
            panic!("unpack, fir, stats, threshold")
        };
        let mut x = vec![0f32; format.samples_in(payload.len())];
        assert_eq!(cpu::unpack(payload, *format, *scale, *offset, &mut x), x.len());
        let mut f = vec![0f32; x.len()];
        cpu::fir(&x, taps, &mut f);
        let g: Vec<f32> = f.iter().map(|v| v * self.gain).collect();
        Expected {
            stats: Some(cpu::stats(&g)),
            detect: Some(cpu::threshold(&g, *level)),
            output_len: g.len() as u32,
        }
    }
}

/// Frame `k`'s length: mostly odd sizes that are no multiple of a block or a
/// packet, some a single byte (no sample), some full.
fn frame_len(k: u64, seed: u64) -> usize {
    match (k + seed) % 11 {
        0 => FRAME_BYTES,
        5 => 1,
        r => 1 + ((k * 997 + r * 131 + seed) as usize % FRAME_BYTES),
    }
}

#[test]
#[ignore = "needs a GPU"]
fn a_rust_operator_between_built_ins_matches_the_cpu_over_loopback() {
    let _serial = one_at_a_time();
    let seed = frameloop::clock::realtime_ns();
    // Fresh input each run: the random pattern is seeded by stream and sequence.
    let (stream, first_seq) = ((seed % 1000) as u32, seed >> 24);
    // A power of two times a small odd number: products of samples are exact on both sides.
    let gain = [0.5f32, 1.5, 2.0, 3.0, 0.75][(seed % 5) as usize];
    println!("seed {seed:#x}: stream {stream}, first sequence {first_seq}, gain {gain}");
    let r = Reference::new(gain);

    let mut cfg = Config { backend: BackendChoice::Cuda, chain: r.chain.clone(), ..Config::default() };
    cfg.ring.slot_bytes = FRAME_BYTES;
    cfg.ingest.bind = "127.0.0.1:0".into();
    cfg.ingest.reassembly.frame_timeout_ms = 1000;
    let at = OperatorPosition::After("fir".into());
    let samples = samples_after(&cfg.chain, cfg.ring.slot_bytes, &at, "gain").unwrap();
    assert_eq!(samples, SampleFormat::U16.samples_in(FRAME_BYTES));

    let results = Arc::new(Mutex::new(Vec::<ResultRecord>::new()));
    let sink = Arc::clone(&results);
    let options = StartOptions {
        on_result: Some(Box::new(move |rec: &ResultRecord| sink.lock().unwrap().push(*rec))),
        ..Default::default()
    };
    let op = PoisoningGain { gain, port_bytes: samples * 4, kernels: None };
    let app =
        Appliance::builder(&cfg).options(options).operator(at, op).start().expect("the appliance starts");
    assert_eq!(app.backend().name(), "cuda");

    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let n = 300u64;
    let mut lens = BTreeMap::new();
    for k in 0..n {
        let (seq, len) = (first_seq + k, frame_len(k, seed));
        let ts = frameloop::clock::realtime_ns();
        for d in build_frame_datagrams(stream, seq, len as u64, PACKET_BYTES, ts, Pattern::Random).unwrap() {
            socket.send_to(&d, app.local_addr()).unwrap();
        }
        lens.insert(seq, len);
        // One frame in flight at a time: nothing is lost to a full socket buffer.
        wait_for(
            &format!("the result of frame {seq} ({len} bytes)"),
            || (results.lock().unwrap().len() as u64 > k).then_some(()),
            || format!("ingest {:?}, loop {:?}", app.ingest(), app.loop_stats()),
        );
    }
    assert!(app.drain(PATIENCE));
    let report = app.stop().expect("the appliance stops");
    let results = results.lock().unwrap();
    assert_eq!(results.len() as u64, n, "one result per frame:\n{}", report.render());
    for rec in results.iter() {
        assert_eq!(rec.stream_id, stream);
        let len = lens
            .remove(&rec.frame_seq)
            .unwrap_or_else(|| panic!("frame {} twice or never sent", rec.frame_seq));
        assert_eq!(rec.slot_flags & SLOT_COMPLETE, SLOT_COMPLETE, "frame {} arrived whole", rec.frame_seq);
        check_result(rec, &r.expected(&Pattern::Random.frame(stream, rec.frame_seq, len)));
        // The host's stamps in the order of a frame's life; the GPU's on its own clock.
        let host = [rec.sender_ts_ns, rec.first_rx_ns, rec.last_rx_ns, rec.published_ns];
        assert!(host[0] > 0 && host.is_sorted(), "frame {}: host stamps {host:?}", rec.frame_seq);
        assert_ne!(rec.result_flags & RESULT_GPU_CLOCK, 0, "frame {}: a GPU result", rec.frame_seq);
        assert!(rec.detect_ns > 0 && rec.done_ns >= rec.detect_ns, "frame {}: GPU stamps", rec.frame_seq);
    }
    assert!(
        results.iter().any(|rec| rec.detect_count > 0 && rec.detect_count < rec.output_len),
        "the threshold never splits a frame; the check of the gain's output proves little"
    );
}

/// Without a GPU: the operator's source compiles (NVRTC only), so a GPU run
/// fails only on what the GPU does.
#[test]
fn the_operator_source_compiles() {
    if !frameloop::gpu::nvrtc_present() {
        assert_ne!(std::env::var("FRAMELOOP_REQUIRE_NVRTC").as_deref(), Ok("1"), "NVRTC is required");
        eprintln!("skipped: NVRTC cannot be loaded (`. scripts/env.sh`)");
        return;
    }
    let cubin = frameloop::gpu::nvrtc::compile("gain.cu", SOURCE, "sm_90").unwrap_or_else(|e| panic!("{e}"));
    assert!(cubin.starts_with(b"\x7fELF"), "a cubin is an ELF image");
}
