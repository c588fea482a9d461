//! The output ring on the CUDA backend: the appliance with `[output]` puts
//! the ring in device memory, the graph's output node writes every frame's
//! final samples, record and user words into it, and a `frameloop consume`
//! process (CUDA IPC handles do not open in the process that exported them)
//! opens the ring with cuIpcOpenMemHandle and reads every frame sent; each
//! one's samples match the CPU chain on the bytes the sender sent, and its
//! record matches the result the appliance published for that frame. Needs
//! a GPU: `cargo test --test gpu_output -- --include-ignored`.

mod appliance_support;

use appliance_support::{Running, one_at_a_time, wait_for};
use frameloop::app::Appliance;
use frameloop::config::{BackendChoice, Config, FusedChainMode};
use frameloop::ops::{CpuChain, OpSpec, SampleFormat};
use frameloop::ring::ResultRecord;
use frameloop::sender::{GsoMode, Pattern, SendArgs, run_sender};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const FRAME_BYTES: usize = 4096;
/// A 10,000-frame run: the consumer reads every output, each checked.
const FRAMES: u64 = 10_000;

fn chain() -> Vec<OpSpec> {
    vec![
        OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0 / 4096.0, offset: 0.5 },
        OpSpec::Fir { taps: vec![0.0625, 0.25, 0.375, 0.25, 0.0625] },
        OpSpec::Stats,
        OpSpec::Threshold { level: 8.0 },
    ]
}

fn cuda_config(socket: &std::path::Path, fused: FusedChainMode) -> Config {
    let mut cfg = Config { backend: BackendChoice::Cuda, chain: chain(), ..Config::default() };
    cfg.ingest.bind = "127.0.0.1:0".into();
    cfg.ring.slots = 64;
    cfg.ring.slot_bytes = FRAME_BYTES;
    cfg.loop_.fused_chain = fused;
    cfg.output.enabled = true;
    // The most slots: the consumer may fall a second behind at 1,000
    // frames/s before it loses one (and the test fails).
    cfg.output.slots = 1024;
    cfg.output.socket = socket.to_owned();
    cfg
}

/// One output as `consume --samples` printed it.
struct Printed {
    frame: u64,
    len: usize,
    sum: f32,
    samples: Vec<f32>,
}

fn parse_outputs(lines: &[String]) -> Vec<Printed> {
    let mut outputs = Vec::new();
    let mut it = lines.iter().skip_while(|l| !l.starts_with("seq "));
    while let Some(line) = it.next() {
        if line.starts_with("read ") {
            break;
        }
        let w: Vec<&str> = line.split(' ').collect();
        assert_eq!((w[0], w[2], w[6], w[8]), ("seq", "frame", "len", "sum"), "{line}");
        let samples = it.next().expect("a samples line").strip_prefix("samples").expect("samples");
        outputs.push(Printed {
            frame: w[3].parse().unwrap(),
            len: w[7].parse().unwrap(),
            sum: w[9].parse().unwrap(),
            samples: samples.split_whitespace().map(|s| s.parse().unwrap()).collect(),
        });
    }
    outputs
}

/// The GPU's FIR may round differently from the CPU's in the last bits.
fn assert_close(frame: u64, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "frame {frame}: sample count");
    let scale = want.iter().fold(1.0f32, |m, w| m.max(w.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(!g.is_nan() && (g - w).abs() <= 1e-5 * scale, "frame {frame} sample {i}: got {g}, want {w}");
    }
}

#[test]
#[ignore = "needs a GPU"]
fn a_consumer_process_reads_every_frame_from_device_memory_and_each_matches_the_cpu_chain() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("output.sock");
    // `auto` would fuse this chain; [output] runs it in the IF body instead.
    let running = Running::start_any(&cuda_config(&socket, FusedChainMode::Auto));
    assert_eq!(running.app.backend().name(), "cuda");

    let mut consume = Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .args(["consume", "--samples", "--count", &FRAMES.to_string(), "--socket"])
        .arg(&socket)
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let stdout = consume.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let attached = lines.recv_timeout(Duration::from_secs(60)).expect("the consumer attaches");
    assert!(attached.contains("cuda device"), "{attached}");
    wait_for(
        "the consumer to attach",
        || (running.app.output_metrics()?.consumers.len() == 1).then_some(()),
        || format!("{:?}", running.app.output_metrics()),
    );

    let args = SendArgs {
        to: running.addr().to_string(),
        rate: 1_000.0,
        frame_bytes: FRAME_BYTES as u64,
        packet_bytes: 1472,
        count: Some(FRAMES),
        duration: None,
        streams: 1,
        pattern: Pattern::Random,
        gso: GsoMode::Auto,
        pacing: Default::default(),
        catch_up: frameloop::sender::DEFAULT_CATCH_UP,
        bind: None,
        link_gbps: None,
    };
    let stats = run_sender(&args, &AtomicBool::new(false), |_| {}).expect("the sender runs");
    assert_eq!(stats.frames, FRAMES);
    let results = running.wait_results(FRAMES as usize);

    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = consume.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the consumer did not finish");
        std::thread::sleep(Duration::from_millis(20));
    };
    let printed: Vec<String> = lines.try_iter().collect();
    let tail = &printed[printed.len().saturating_sub(6)..];
    assert!(status.success(), "the consumer failed; it printed last: {tail:?}");
    assert_eq!(printed.last().map(String::as_str), Some(&*format!("read {FRAMES} lost 0")), "{tail:?}");
    let outputs = parse_outputs(&printed);
    assert_eq!(outputs.len(), FRAMES as usize);

    let by_frame: BTreeMap<u64, &ResultRecord> = results.iter().map(|r| (r.frame_seq, r)).collect();
    let mut cpu = CpuChain::new(&chain(), FRAME_BYTES).unwrap();
    for o in &outputs {
        let result =
            by_frame.get(&o.frame).unwrap_or_else(|| panic!("output of frame {} has no result", o.frame));
        assert_eq!((o.len, o.sum), (result.output_len as usize, result.sum), "frame {}: record", o.frame);
        let out = cpu.run(&Pattern::Random.frame(0, o.frame, FRAME_BYTES));
        let want = cpu.output(&out);
        // The device ring starts poisoned (NaN): a sample the node never
        // wrote cannot pass, nor can a zero where the chain gives none.
        assert!(want.iter().all(|&s| s != 0.0), "frame {}: expected samples must be non-zero", o.frame);
        assert_close(o.frame, &o.samples, want);
    }
    let o = running.app.output_metrics().unwrap();
    assert_eq!(o.written, FRAMES);
    let (report, _) = running.stop();
    assert_eq!(report.outputs.map(|o| o.written), Some(FRAMES));
    assert!(!socket.exists(), "the output socket is removed at stop");
}

#[test]
#[ignore = "needs a GPU"]
fn a_fused_chain_forced_on_with_output_stops_start_up_naming_the_key() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let err = Appliance::start(
        &cuda_config(&dir.path().join("output.sock"), FusedChainMode::On),
        Default::default(),
    )
    .err()
    .expect("start-up fails");
    assert!(err.to_string().contains("loop.fused_chain"), "{err}");
}
