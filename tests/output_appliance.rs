//! The output ring in the running appliance (host backend): `frameloop run`
//! with `[output] enabled = true` serves the attach socket, a `frameloop
//! consume` process reads every frame `frameloop send` sent and each one's
//! samples match the CPU chain; a consumer killed mid-run leaves the
//! appliance running and its consumer count drops; the socket is gone after
//! stop; a socket that cannot be served stops start-up naming output.socket.

mod appliance_support;

use appliance_support::{Running, host_config, one_at_a_time, wait_for};
use frameloop::app::Appliance;
use frameloop::ops::{CpuChain, default_chain};
use frameloop::sender::{GsoMode, Pattern, SendArgs, run_sender};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const FRAME_BYTES: usize = 4096;
const FRAMES: u64 = 30;
const PATIENCE: Duration = Duration::from_secs(120);

fn frameloop(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_frameloop"));
    cmd.args(args).env("NO_COLOR", "1").env_remove("NOTIFY_SOCKET").stdin(Stdio::null());
    cmd
}

/// A child whose stdout and stderr lines arrive on channels (never a full pipe).
struct Lines {
    child: Child,
    stdout: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
}

impl Lines {
    fn spawn(args: &[&str]) -> Self {
        let mut child =
            frameloop(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("frameloop starts");
        let forward = |pipe: Box<dyn Read + Send>| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
            rx
        };
        let stdout = forward(Box::new(child.stdout.take().unwrap()));
        let stderr = forward(Box::new(child.stderr.take().unwrap()));
        Self { child, stdout, stderr }
    }

    /// The first line of `from` containing `needle`.
    fn line_with(from: &mpsc::Receiver<String>, needle: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match from.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(e) => panic!("no line with {needle:?} ({e})"),
            }
        }
    }

    /// Waits for the child to exit (killing it after [`PATIENCE`]); returns
    /// whether it succeeded and what is left of its stdout.
    fn finish(mut self) -> (bool, String) {
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                break self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut rest = String::new();
        while let Ok(line) = self.stdout.recv_timeout(Duration::from_secs(5)) {
            rest.push_str(&line);
            rest.push('\n');
        }
        (status.success(), rest)
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        // Only matters when a test fails with the child still running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `(frame, samples)` of each output `consume --samples` printed.
fn parse_outputs(stdout: &str) -> Vec<(u64, Vec<f32>)> {
    let mut outputs = Vec::new();
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with("seq "));
    while let Some(line) = lines.next() {
        if line.starts_with("read ") {
            break;
        }
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!((words[0], words[2]), ("seq", "frame"), "{line}");
        let frame = words[3].parse().unwrap();
        let samples = lines.next().expect("a samples line").strip_prefix("samples ").expect("samples");
        outputs.push((frame, samples.split(' ').map(|s| s.parse::<f32>().unwrap()).collect()));
    }
    outputs
}

fn u64_at(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer).and_then(Value::as_u64).unwrap_or_else(|| panic!("no number at {pointer} in {v:#}"))
}

fn write_config(dir: &Path, socket: &Path) -> String {
    let path = dir.join("run.toml");
    let text = format!(
        "backend = \"host\"\n[ring]\nslots = 64\nslot_bytes = 16384\n[loop]\n\
         data_not_ready_sleep_interval_us = 100\n[ingest]\nbind = \"127.0.0.1:0\"\n\
         [output]\nenabled = true\nslots = 64\nsocket = \"{}\"\n",
        socket.display()
    );
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn run_serves_outputs_that_a_consume_process_reads_and_each_matches_the_cpu_chain() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("output.sock");
    let config = write_config(dir.path(), &socket);
    let chain = frameloop::config::load(Path::new(&config)).unwrap().chain;

    let run = Lines::spawn(&["run", "--config", &config, "--json"]);
    let line = Lines::line_with(&run.stderr, "listening on ");
    let addr = line.split("listening on ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap();
    assert!(socket.exists(), "the output socket is served once the appliance listens");

    let count = FRAMES.to_string();
    let socket_arg = socket.to_str().unwrap();
    let consume = Lines::spawn(&["consume", "--samples", "--count", &count, "--socket", socket_arg]);
    let attached = Lines::line_with(&consume.stdout, "attached to ");
    assert!(attached.contains("64 slots") && attached.contains("host memfd"), "{attached}");

    let send = frameloop(&[
        "send",
        "--to",
        addr,
        "--rate",
        "100",
        "--count",
        &count,
        "--frame-bytes",
        &FRAME_BYTES.to_string(),
        "--packet-bytes",
        "1472",
    ])
    .output()
    .unwrap();
    assert!(send.status.success(), "send failed:\n{}", String::from_utf8_lossy(&send.stderr));

    let (consumed_ok, stdout) = consume.finish();
    assert!(consumed_ok, "{stdout}");
    assert!(stdout.trim_end().ends_with(&format!("read {FRAMES} lost 0")), "{stdout}");
    let printed = parse_outputs(&stdout);
    assert_eq!(printed.iter().map(|(f, _)| *f).collect::<Vec<_>>(), (0..FRAMES).collect::<Vec<_>>());
    let mut cpu = CpuChain::new(&chain, FRAME_BYTES).unwrap();
    for (frame, samples) in &printed {
        let out = cpu.run(&Pattern::Counter.frame(0, *frame, FRAME_BYTES));
        let want = cpu.output(&out);
        assert_eq!(samples.len(), FRAME_BYTES / 2, "u16 samples of a whole frame");
        assert!(want.iter().any(|&s| s != 0.0), "frame {frame}: a zeroed slot would match");
        assert_eq!(samples.as_slice(), want, "output of frame {frame}");
    }

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(run.child.id() as i32), nix::sys::signal::SIGINT)
        .unwrap();
    let (ran_ok, report) = run.finish();
    assert!(ran_ok, "{report}");
    assert!(!socket.exists(), "the output socket is removed at stop");
    let report: Value = serde_json::from_str(&report).unwrap_or_else(|e| panic!("{e}: {report}"));
    assert_eq!(u64_at(&report, "/outputs/written"), FRAMES);
    assert_eq!(u64_at(&report, "/outputs/attaches"), 1);
    assert_eq!(report.pointer("/outputs/consumers"), Some(&Value::Array(vec![])), "{report:#}");
}

#[test]
fn a_consumer_killed_mid_run_leaves_the_appliance_running_and_detaches() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("output.sock");
    let mut cfg = host_config(default_chain());
    cfg.output.enabled = true;
    cfg.output.socket = socket.clone();
    let running = Running::start(&cfg);
    let outputs = || running.app.output_metrics().expect("[output] is enabled");

    let consume = Lines::spawn(&["consume", "--socket", socket.to_str().unwrap()]);
    Lines::line_with(&consume.stdout, "attached to ");
    assert_eq!(outputs().consumers.len(), 1);
    let metrics = running.app.metrics_snapshot();
    assert_eq!(metrics.outputs.as_ref().map(|o| o.consumers.len()), Some(1), "/metrics sees the consumer");

    // One sender for the whole run (a second one would restart the frame
    // sequence, and the receiver would drop its frames as late).
    let args = SendArgs {
        to: running.addr().to_string(),
        rate: 20.0,
        frame_bytes: FRAME_BYTES as u64,
        packet_bytes: 1472,
        count: Some(FRAMES),
        duration: None,
        streams: 1,
        pattern: Pattern::Counter,
        gso: GsoMode::Auto,
        pacing: Default::default(),
        catch_up: frameloop::sender::DEFAULT_CATCH_UP,
        bind: None,
        link_gbps: None,
    };
    let sender = std::thread::spawn(move || run_sender(&args, &AtomicBool::new(false), |_| {}));
    Lines::line_with(&consume.stdout, "seq 5 ");
    let mut consume = consume;
    consume.child.kill().unwrap();
    consume.child.wait().unwrap();
    wait_for(
        "the killed consumer to detach",
        || outputs().consumers.is_empty().then_some(()),
        || format!("{:?}", outputs()),
    );
    let killed_at = outputs().written;
    assert!(killed_at < FRAMES, "the consumer was killed mid-run, not after it ({killed_at} written)");

    let stats = sender.join().unwrap().expect("the sender runs");
    assert_eq!(stats.frames, FRAMES, "{stats:?}");
    running.wait_results(FRAMES as usize);
    // The loop writes a frame's output after its result: wait for the last one.
    wait_for(
        "every output written",
        || (outputs().written == FRAMES).then_some(()),
        || format!("{:?}", outputs()),
    );
    assert!(running.app.is_launched(), "the loop still runs");
    let o = outputs();
    assert_eq!((o.written, o.attaches, o.consumers.len()), (FRAMES, 1, 0), "{o:?}");
    let (report, _) = running.stop();
    assert!(report.render().contains("output ring"), "{}", report.render());
    assert_eq!(report.outputs.map(|o| o.written), Some(FRAMES));
    assert!(!socket.exists(), "the output socket is removed at stop");
}

#[test]
fn an_output_socket_in_a_missing_directory_stops_start_up_naming_output_socket() {
    let _one = one_at_a_time();
    let mut cfg = host_config(default_chain());
    cfg.output.enabled = true;
    cfg.output.socket = "/nonexistent-frameloop-dir/output.sock".into();
    let err = Appliance::start(&cfg, Default::default()).err().expect("start-up fails");
    let text = err.to_string();
    assert!(text.contains("output.socket") && text.contains("/nonexistent-frameloop-dir"), "{text}");
}
