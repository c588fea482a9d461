//! A consumer in another process (`frameloop consume`) attached through the
//! output socket to a host-backend loop reads every output of a short run,
//! and each one matches the CPU chain.

use frameloop::backend::ResidentLoop;
use frameloop::config::LoopConfig;
use frameloop::host::HostLoop;
use frameloop::ops::{CpuChain, default_chain};
use frameloop::output::{OutputConfig, serve_host_outputs};
use frameloop::ring::layout::{SLOT_COMPLETE, result_ring_bytes, ring_bytes};
use frameloop::ring::{FrameRing, HostMemory, OverrunPolicy, ResultRing, SlotHeader};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CAPACITY: usize = 1024;
const FRAMES: u64 = 24;

fn frame_bytes(frame: u64) -> Vec<u8> {
    (0..CAPACITY / 2)
        .map(|i| ((i as u64 * 37 + frame * 7919) % 65536) as u16)
        .flat_map(u16::to_le_bytes)
        .collect()
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `(frame, samples)` of each output the consumer printed.
fn parse(stdout: &str) -> Vec<(u64, Vec<f32>)> {
    let mut outputs = Vec::new();
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with("seq "));
    while let Some(line) = lines.next() {
        if line.starts_with("read ") {
            break;
        }
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(words[0..4].iter().step_by(2).copied().collect::<Vec<_>>(), ["seq", "frame"], "{line}");
        let frame = words[3].parse().unwrap();
        let samples = lines.next().expect("a samples line").strip_prefix("samples ").expect("samples");
        outputs.push((frame, samples.split(' ').map(|s| s.parse::<f32>().unwrap()).collect()));
    }
    outputs
}

#[test]
fn a_consumer_process_reads_every_output_and_each_matches_the_cpu_chain() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("output.sock");
    let frames = FrameRing::new(
        Box::new(HostMemory::new(ring_bytes(4, CAPACITY).unwrap()).unwrap()),
        4,
        CAPACITY,
        OverrunPolicy::Every,
    )
    .unwrap();
    let results =
        ResultRing::new(Box::new(HostMemory::new(result_ring_bytes(64).unwrap()).unwrap()), 64).unwrap();
    let config = OutputConfig { enabled: true, slots: 8, socket: socket.clone() };
    let outputs = serve_host_outputs(&config, &default_chain(), CAPACITY).unwrap().expect("enabled");
    let loop_config = LoopConfig { poll_budget_us: 200, poll_interval_ns: 1000, ..LoopConfig::default() };
    let mut host = HostLoop::new(frames.clone(), results, default_chain(), CAPACITY, loop_config).unwrap();
    host.write_outputs(outputs.writer).unwrap();
    host.launch().unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .args(["consume", "--samples", "--count", &FRAMES.to_string(), "--socket"])
        .arg(&socket)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Read its output as it comes: a full pipe would stop the consumer.
    let mut stdout_pipe = child.stdout.take().unwrap();
    let reading = std::thread::spawn(move || {
        let mut stdout = String::new();
        stdout_pipe.read_to_string(&mut stdout).unwrap();
        stdout
    });
    let server = &outputs.server;
    wait_for("the consumer to attach", Duration::from_secs(30), || server.snapshot().consumers.len() == 1);

    let mut writer = frames.writer().unwrap();
    for frame in 1..=FRAMES {
        let seq = writer.reserve().expect("the loop keeps up with one frame at a time");
        writer.payload_mut(seq).copy_from_slice(&frame_bytes(frame));
        let header = SlotHeader {
            frame_seq: frame,
            flags: SLOT_COMPLETE,
            payload_len: CAPACITY as u32,
            published_ns: frameloop::clock::realtime_ns(),
            ..Default::default()
        };
        writer.publish(seq, &header);
        // One output at a time, so the consumer reads every one of them.
        // After the last one it detaches (--count).
        wait_for("the consumer to read the output", Duration::from_secs(10), || {
            let snapshot = server.snapshot();
            match snapshot.consumers.first() {
                Some(c) => c.last_read_seq == frame && c.lag == 0,
                None => frame == FRAMES,
            }
        });
    }
    let stdout = reading.join().unwrap();
    assert!(child.wait().unwrap().success(), "{stdout}");
    host.tear_down().unwrap();

    assert!(stdout.starts_with("attached to "), "{stdout}");
    assert!(stdout.trim_end().ends_with(&format!("read {FRAMES} lost 0")), "{stdout}");
    let printed = parse(&stdout);
    assert_eq!(printed.iter().map(|(f, _)| *f).collect::<Vec<_>>(), (1..=FRAMES).collect::<Vec<_>>());
    let mut chain = CpuChain::new(&default_chain(), CAPACITY).unwrap();
    for (frame, samples) in printed {
        let out = chain.run(&frame_bytes(frame));
        assert_eq!(samples.as_slice(), chain.output(&out), "output of frame {frame}");
    }
    wait_for("the consumer to detach", Duration::from_secs(5), || server.snapshot().consumers.is_empty());
    assert_eq!(server.snapshot().attaches, 1);
}
