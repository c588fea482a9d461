//! The appliance embedded in a program on the CUDA backend (what the Python
//! module does): frames the program supplies itself go in through
//! `FrameFeed`, a user kernel given as `code` runs in the chain, the
//! program reads the device-memory output ring in its own process
//! (`Appliance::attach_consumer`: a CUDA IPC handle does not open in the
//! process that exported it, so the ring is addressed directly), and every
//! output matches the CPU computation on fresh random frames; a second
//! appliance on the same GPU is refused with a message. Needs a GPU:
//! `cargo test --test gpu_embedded -- --include-ignored`.

mod appliance_support;

use appliance_support::{Running, one_at_a_time, wait_for};
use frameloop::app::{AppError, Appliance, FrameFeed, StartOptions};
use frameloop::config::{BackendChoice, Config};
use frameloop::ops::user_kernel::{ParamValue, UserKernelSpec};
use frameloop::ops::{OpSpec, SampleFormat};
use std::time::{Duration, Instant};

/// u16 samples per frame: not a multiple of the 256-thread block.
const SAMPLES: usize = 3001;
const FRAMES: u64 = 500;
const GAIN: f64 = 1.5;
const OFFSET: f64 = -7.25;

/// The fixture kernel's source, given as `code`: `y = x * gain + offset`,
/// user word 0 = 1 when a frame has more than `limit` samples.
const GAIN_KERNEL: &str = include_str!("fixtures/user_kernels/gain_offset.cu");
/// Below `SAMPLES`: every frame sets user word 0.
const LIMIT: i64 = 1000;

fn config(socket: &std::path::Path) -> Config {
    let kernel = UserKernelSpec {
        source: Default::default(),
        code: Some(GAIN_KERNEL.into()),
        entry: "gain_offset".into(),
        params: [
            ("gain".to_owned(), ParamValue::Float(GAIN)),
            ("offset".to_owned(), ParamValue::Float(OFFSET)),
            ("limit".to_owned(), ParamValue::Int(LIMIT)),
        ]
        .into_iter()
        .collect(),
        param_types: vec!["gain: f32".into(), "offset: f32".into(), "limit: u32".into()],
        output: Default::default(),
        threads: None,
        blocks: None,
        shared_bytes: 0,
    };
    let mut cfg = Config {
        backend: BackendChoice::Cuda,
        chain: vec![
            OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0, offset: 0.0 },
            OpSpec::Kernel(kernel),
        ],
        ..Config::default()
    };
    cfg.ingest.bind = "127.0.0.1:0".into();
    cfg.ingest.transport = frameloop::ingest::Transport::Udp;
    cfg.ring.slots = 64;
    cfg.ring.slot_bytes = SAMPLES * 2;
    cfg.output.enabled = true;
    cfg.output.slots = 1024;
    cfg.output.socket = socket.to_owned();
    assert!(cfg.problems().is_empty(), "{:?}", cfg.problems());
    cfg
}

/// Copies `len` f32 from device address `dptr` of GPU 0.
fn device_samples(dptr: u64, len: usize) -> Vec<f32> {
    let ctx = frameloop::gpu::driver::open_context(0).expect("GPU 0");
    ctx.bind_to_thread().expect("the context binds");
    let mut out = vec![f32::NAN; len];
    // SAFETY: `out` holds `len` f32; `dptr` addresses `len` f32 of the
    // output ring's slot, device memory of this context that the appliance
    // keeps allocated while it runs.
    let r = unsafe { cudarc::driver::sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), dptr, len * 4) };
    assert_eq!(r, cudarc::driver::sys::CUresult::CUDA_SUCCESS, "cuMemcpyDtoH");
    out
}

/// Checks one output read in place against `x * GAIN + OFFSET` of the frame it came from.
fn check_output(out: &frameloop::output::OutputFrame<'_>, frames: &[Vec<u8>]) {
    let seq = out.record().frame_seq as usize;
    let device = out.device_samples().expect("device samples");
    assert_eq!(device.len, SAMPLES, "frame {seq}: length");
    let got = device_samples(device.dptr, device.len);
    assert!(out.is_intact(), "frame {seq} overwritten while read");
    assert_eq!(out.user_result()[0], 1, "frame {seq}: user word (more than limit samples)");
    for (i, (g, pair)) in got.iter().zip(frames[seq].chunks_exact(2)).enumerate() {
        let x = f32::from(u16::from_le_bytes([pair[0], pair[1]]));
        let want = x * GAIN as f32 + OFFSET as f32;
        assert!((g - want).abs() <= 1e-3 * want.abs().max(1.0), "frame {seq} sample {i}: {g} != {want}");
    }
}

#[test]
#[ignore = "needs a GPU"]
fn a_program_feeds_its_own_frames_and_reads_the_device_outputs_in_its_own_process() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let running = Running::start_any(&config(&dir.path().join("out.sock")));
    assert_eq!(running.app.backend().name(), "cuda");
    let mut consumer = running.app.attach_consumer().expect("an in-process consumer");
    assert_eq!(consumer.memory_kind(), frameloop::output::MemoryKind::CudaDevice);

    // Fresh random frames, kept to check against.
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let frames: Vec<Vec<u8>> = (0..FRAMES)
        .map(|k| {
            (0..SAMPLES * 2)
                .map(|i| (seed.wrapping_mul(k + 1).wrapping_add(i as u64 * 2654435761) >> 13) as u8)
                .collect()
        })
        .collect();
    let mut feed = FrameFeed::connect(running.addr(), 1472).expect("the feed connects");
    let mut checked = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    for (k, frame) in frames.iter().enumerate() {
        feed.send(0, k as u64, frame).expect("the frame goes out");
        std::thread::sleep(Duration::from_micros(500));
        while let Some(out) = consumer.next() {
            check_output(&out, &frames);
            checked += 1;
        }
    }
    while checked < FRAMES && Instant::now() < deadline {
        match consumer.next() {
            Some(out) => {
                check_output(&out, &frames);
                checked += 1;
            }
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    assert_eq!((checked, consumer.lost()), (FRAMES, 0));
    wait_for(
        "every result",
        || (running.results().len() as u64 == FRAMES).then_some(()),
        || format!("{} results", running.results().len()),
    );
    assert!(consumer.next().is_none());
    drop(consumer);
    let (report, _) = running.stop();
    assert_eq!(report.outputs.map(|o| o.written), Some(FRAMES));
}

#[test]
#[ignore = "needs a GPU"]
fn a_second_appliance_on_the_same_gpu_is_refused_naming_it() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let first = Running::start_any(&config(&dir.path().join("a.sock")));
    let second = Appliance::start(&config(&dir.path().join("b.sock")), StartOptions::default());
    match second {
        Err(e @ AppError::GpuTaken { gpu: 0 }) => assert!(e.to_string().contains("[[loop]]"), "{e}"),
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a second resident loop on GPU 0 started"),
    }
    drop(first.stop());
    let again = Appliance::start(&config(&dir.path().join("c.sock")), StartOptions::default())
        .expect("the GPU is free once the first appliance stopped");
    again.stop().expect("it stops");
}
