//! A user data-ready handler on a real GPU (ignored without one; run with
//! `--include-ignored --test-threads=1`): the `[handler]` of a config,
//! `handlers/hsb_ready.cu`, runs as the resident loop's handler while the
//! emulated HSB sensor sends frames over loopback to the emulated bridge's
//! DMA engine, which writes the ring and its metadata words but never the
//! head sequence. Every frame is processed once, in order, and each result
//! equals the CPU chain's on the same bytes; lossy frames arrive flagged;
//! tear-down and the loop timeout still end the graph; and the appliance
//! runs the same from a config (`[handler]`, `ingest.format = "hsb"`).

mod appliance_support;
mod gpu_support;

use appliance_support::{Running, check_result as check_expected, reference_chain};
use frameloop::config::{BackendChoice, LoopConfig};
use frameloop::gpu::control::{STATE_TIMED_OUT, STATE_TORN_DOWN};
use frameloop::gpu::executor::{ExecutorOptions, GpuRuntime, ResidentExecutor, chain_flags, chain_fragment};
use frameloop::gpu::test_rings::MappedRings;
use frameloop::gpu::user::handler::UserHandlerSource;
use frameloop::ingest::hsb::{HsbDma, HsbReceiver};
use frameloop::ops::{CpuChain, OpSpec, SampleFormat};
use frameloop::ring::layout::{RESULT_GPU_CLOCK, SLOT_COMPLETE, SLOT_INCOMPLETE};
use frameloop::ring::{OverrunPolicy, ResultReader, ResultRecord};
use frameloop::sender::hsb::{hsb_frame_payload, run_hsb_sender};
use frameloop::sender::{GsoMode, Pattern, SendArgs};
use frameloop::wire::hsb;
use gpu_support::{runtime, wait_results};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a test waits for its results.
const RESULTS_WITHIN: Duration = Duration::from_secs(10);

const FRAME_BYTES: usize = 8192;
const SLOTS: usize = 64;

fn chain() -> Vec<OpSpec> {
    vec![
        OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0 / 4096.0, offset: 0.0 },
        OpSpec::Fir { taps: vec![0.0625, 0.25, 0.375, 0.25, 0.0625] },
        OpSpec::Stats,
        OpSpec::Threshold { level: 8.0 },
    ]
}

/// The handler as a config names it: `[handler]` of a config file in the
/// repository root, its source relative to that file.
fn hsb_handler() -> UserHandlerSource {
    let cfg =
        frameloop::config::parse("[handler]\nsource = \"handlers/hsb_ready.cu\"\nentry = \"hsb_ready\"\n")
            .expect("the [handler] section parses");
    let config_file = Path::new(env!("CARGO_MANIFEST_DIR")).join("frameloop.toml");
    UserHandlerSource::from_config(cfg.handler.as_ref().unwrap(), &config_file)
        .expect("hsb_ready.cu is readable")
}

fn executor(rt: &Arc<GpuRuntime>, rings: &MappedRings, loop_cfg: LoopConfig) -> ResidentExecutor {
    assert!(rings.frames.take_reader_for_device());
    let mut opts = ExecutorOptions::new(loop_cfg);
    opts.user_handler = Some(hsb_handler());
    ResidentExecutor::new(
        Arc::clone(rt),
        chain_fragment(&chain(), FRAME_BYTES).unwrap(),
        Arc::clone(&rings.frames),
        Arc::clone(&rings.results),
        chain_flags(&chain()),
        opts,
    )
    .expect("the executor builds around the user handler")
}

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-5 * a.abs().max(b.abs()).max(1.0)
}

/// `r` is the CPU chain's result on `payload`.
fn check_result(cpu: &mut CpuChain, r: &ResultRecord, payload: &[u8]) {
    let i = r.frame_seq;
    let want = cpu.run(payload);
    assert_eq!(r.result_flags, want.result_flags() | RESULT_GPU_CLOCK, "frame {i}: flags");
    assert_eq!(r.output_len as usize, want.output_len, "frame {i}: output_len");
    let s = want.stats.expect("the chain has stats");
    assert!(close(r.sum, s.sum), "frame {i}: sum {} vs {}", r.sum, s.sum);
    assert_eq!((r.min, r.max), (s.min, s.max), "frame {i}: min/max");
    assert!(close(r.mean, s.mean), "frame {i}: mean {} vs {}", r.mean, s.mean);
    let (count, first) = want.detect.expect("the chain has a threshold");
    assert_eq!((r.detect_count, r.first_detect_index), (count, first), "frame {i}: detect");
    assert!(r.done_ns >= r.detect_ns && r.detect_ns > 0, "frame {i}: GPU times");
}

#[test]
#[ignore = "needs a GPU"]
fn every_frame_of_the_emulated_hsb_sensor_is_found_by_the_user_handler() {
    let rt = runtime();
    let rings = MappedRings::new(&rt, SLOTS, FRAME_BYTES, 4096, OverrunPolicy::Every).unwrap();
    let mut ex = executor(&rt, &rings, LoopConfig::default());
    let mut reader = ResultReader::new(Arc::clone(&rings.results));
    ex.launch().unwrap();

    let rx =
        HsbReceiver::bind("127.0.0.1:0".parse().unwrap(), HsbDma::new(Arc::clone(&rings.frames)).unwrap())
            .unwrap();
    let to = rx.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let receiver = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || rx.run(&stop))
    };
    let frames = 1000u64;
    let args = SendArgs {
        to: to.to_string(),
        rate: 2000.0,
        frame_bytes: FRAME_BYTES as u64,
        packet_bytes: 8972,
        count: Some(frames),
        duration: None,
        streams: 1,
        pattern: Pattern::Random,
        gso: GsoMode::Off,
        pacing: Default::default(),
        catch_up: frameloop::sender::DEFAULT_CATCH_UP,
        bind: None,
        link_gbps: None,
    };
    let sent = run_hsb_sender(&args, &AtomicBool::new(false), |_| {}).unwrap();
    assert_eq!(sent.frames, frames);
    let mut out = Vec::new();
    wait_results(&mut reader, &mut out, frames as usize, RESULTS_WITHIN);
    stop.store(true, Ordering::Relaxed);
    let counters = receiver.join().unwrap();
    assert_eq!(counters.frames_complete, frames, "{counters:?}");
    assert_eq!(rings.frames.head(), 0, "nothing published the head: the handler found the frames");

    let stats = ex.tear_down().unwrap();
    assert_eq!(ex.state(), STATE_TORN_DOWN);
    assert_eq!(stats.frames_processed, frames);
    assert_eq!(out.iter().map(|r| r.ring_seq).collect::<Vec<_>>(), (1..=frames).collect::<Vec<_>>());
    let mut cpu = CpuChain::new(&chain(), FRAME_BYTES).unwrap();
    for (k, r) in out.iter().enumerate() {
        assert_eq!(r.frame_seq, k as u64 + 1, "hsb_ready reports the counter as the frame sequence");
        assert_eq!(r.slot_flags, SLOT_COMPLETE, "frame {}", r.frame_seq);
        check_result(&mut cpu, r, &hsb_frame_payload(Pattern::Random, k as u64, FRAME_BYTES));
    }
}

#[test]
#[ignore = "needs a GPU"]
fn a_lossy_frame_arrives_flagged_with_zeroes_and_a_lost_frame_is_stepped_over() {
    let rt = runtime();
    let rings = MappedRings::new(&rt, 8, FRAME_BYTES, 64, OverrunPolicy::Every).unwrap();
    let mut ex = executor(&rt, &rings, LoopConfig::default());
    let mut reader = ResultReader::new(Arc::clone(&rings.results));
    ex.launch().unwrap();
    let mut dma = HsbDma::new(Arc::clone(&rings.frames)).unwrap();
    let payload = |counter: u32| hsb_frame_payload(Pattern::Random, u64::from(counter), FRAME_BYTES);
    // Frame 1 whole; frame 2 without its second datagram; frame 3 lost; frame 4 whole.
    let mut expected = Vec::new();
    for counter in [1u32, 2, 4] {
        let bytes = payload(counter);
        let mut seen = bytes.clone();
        for (i, d) in hsb::encode_frame(counter, &bytes, 1000).iter().enumerate() {
            if counter == 2 && i == 1 {
                seen[1000..2000].fill(0);
                continue;
            }
            dma.on_datagram(d);
        }
        dma.flush();
        expected.push((counter, seen));
    }
    let mut out = Vec::new();
    wait_results(&mut reader, &mut out, 4, RESULTS_WITHIN);
    ex.tear_down().unwrap();
    assert_eq!(out.iter().map(|r| r.frame_seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
    let flags: Vec<u32> = out.iter().map(|r| r.slot_flags).collect();
    assert_eq!(flags, [SLOT_COMPLETE, SLOT_INCOMPLETE, SLOT_INCOMPLETE, SLOT_COMPLETE]);
    let mut cpu = CpuChain::new(&chain(), FRAME_BYTES).unwrap();
    for (counter, seen) in &expected {
        let r = &out[*counter as usize - 1];
        check_result(&mut cpu, r, seen);
    }
    assert_eq!(out[2].output_len, 0, "the lost frame is empty");
}

#[test]
#[ignore = "needs a GPU"]
fn with_no_frames_the_user_handler_honours_tear_down_and_the_timeout() {
    let rt = runtime();
    let rings = MappedRings::new(&rt, 4, FRAME_BYTES, 16, OverrunPolicy::Every).unwrap();
    let long_poll = LoopConfig { poll_budget_us: 1_000_000, poll_interval_ns: 1000, ..LoopConfig::default() };
    let mut ex = executor(&rt, &rings, long_poll);
    ex.launch().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    let stats = ex.tear_down().unwrap();
    assert!(started.elapsed() < Duration::from_millis(500), "tear-down took {:?}", started.elapsed());
    assert_eq!(ex.state(), STATE_TORN_DOWN);
    assert_eq!(stats.frames_processed, 0);
    drop(ex);

    let rings = MappedRings::new(&rt, 4, FRAME_BYTES, 16, OverrunPolicy::Every).unwrap();
    let mut ex = executor(&rt, &rings, LoopConfig { timeout_ms: 100, ..LoopConfig::default() });
    ex.launch().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while ex.is_launched() {
        assert!(Instant::now() < deadline, "the loop did not time out by itself");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(ex.state(), STATE_TIMED_OUT);
}

/// The whole appliance from a config: `[handler]` and `ingest.format = "hsb"`.
#[test]
#[ignore = "needs a GPU"]
fn the_appliance_runs_a_handler_and_the_hsb_receiver_from_its_config() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = format!(
        "backend = \"cuda\"\n[ring]\nslots = {SLOTS}\nslot_bytes = {FRAME_BYTES}\n\
         [ingest]\nbind = \"127.0.0.1:0\"\nformat = \"hsb\"\ntransport = \"udp\"\n\
         [handler]\nsource = \"{}\"\nentry = \"hsb_ready\"\n",
        dir.join("handlers/hsb_ready.cu").display()
    );
    let mut cfg = frameloop::config::parse(&text).expect("the config parses");
    cfg.chain = chain();
    assert_eq!(cfg.backend, BackendChoice::Cuda);
    let running = Running::start_any(&cfg);
    assert_eq!(running.app.backend().name(), "cuda");
    let frames = 300u64;
    let args = SendArgs {
        to: running.addr().to_string(),
        rate: 1000.0,
        frame_bytes: FRAME_BYTES as u64,
        packet_bytes: 1472,
        count: Some(frames),
        duration: None,
        streams: 1,
        pattern: Pattern::Random,
        gso: GsoMode::Off,
        pacing: Default::default(),
        catch_up: frameloop::sender::DEFAULT_CATCH_UP,
        bind: None,
        link_gbps: None,
    };
    run_hsb_sender(&args, &AtomicBool::new(false), |_| {}).unwrap();
    let results = running.wait_results(frames as usize);
    let (_, results_at_stop) = running.stop();
    assert_eq!(results_at_stop.len(), results.len(), "no result after the last frame");
    for (k, r) in results.iter().enumerate() {
        assert_eq!(r.frame_seq, k as u64 + 1);
        assert_eq!(r.slot_flags, SLOT_COMPLETE, "frame {}", r.frame_seq);
        let payload = hsb_frame_payload(Pattern::Random, k as u64, FRAME_BYTES);
        check_expected(r, &reference_chain(&chain(), &payload));
    }
}
