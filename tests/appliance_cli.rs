//! The `frameloop` binary as a user drives it: help for the command and each
//! subcommand, `bench --json` on the host backend, `validate` on good and bad
//! files, and `run` serving frames from `frameloop send`.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Far above what any command here needs on an idle machine.
const PATIENCE: Duration = Duration::from_secs(120);

const SEGMENTS: [&str; 8] = [
    "wire",
    "assembly",
    "publish_to_detect",
    "compute",
    "done_to_seen",
    "end_to_end",
    "publish_to_seen",
    "last_rx_to_seen",
];

fn frameloop(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_frameloop"));
    cmd.args(args).env("NO_COLOR", "1").env_remove("NOTIFY_SOCKET").stdin(Stdio::null());
    cmd
}

/// A child process whose output is read on threads, so it never blocks on
/// a full pipe; stderr lines are also passed on as they come.
struct Spawned {
    what: String,
    child: Child,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
    stderr_lines: mpsc::Receiver<String>,
}

/// What a finished command printed.
struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Spawned {
    fn start(args: &[&str]) -> Self {
        let mut child = frameloop(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the frameloop binary starts");
        let mut out = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let err = child.stderr.take().unwrap();
        let (tx, stderr_lines) = mpsc::channel();
        let stderr = std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line.clone());
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        Spawned { what: args.join(" "), child, stdout: Some(stdout), stderr: Some(stderr), stderr_lines }
    }

    /// Waits for the first stderr line containing `needle`.
    fn stderr_line_with(&self, needle: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr_lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(e) => panic!("`frameloop {}` printed no line with {needle:?} ({e})", self.what),
            }
        }
    }

    /// Waits for the process to exit (killing it after [`PATIENCE`]).
    fn finish(mut self) -> Finished {
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("waiting on frameloop") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("`frameloop {}` did not exit within {PATIENCE:?}", self.what);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let stdout = self.stdout.take().unwrap().join().unwrap();
        let stderr = self.stderr.take().unwrap().join().unwrap();
        Finished { status, stdout, stderr }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // Only reached with the child still running when a test fails early.
        if self.stdout.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `frameloop args` to completion.
fn run_to_end(args: &[&str]) -> Finished {
    Spawned::start(args).finish()
}

fn json_of(f: &Finished) -> Value {
    serde_json::from_str(&f.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}\nstderr:\n{}", f.stdout, f.stderr))
}

fn u64_at(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer).and_then(Value::as_u64).unwrap_or_else(|| panic!("no number at {pointer} in {v:#}"))
}

/// Checks that the report has every segment, each with one value per
/// processed frame.
fn assert_every_segment(report: &Value, processed: u64) {
    let segments = report.pointer("/latency/segments").and_then(Value::as_array).expect("latency segments");
    let names: Vec<&str> = segments.iter().filter_map(|s| s["segment"].as_str()).collect();
    assert_eq!(names, SEGMENTS, "every segment, in order");
    for s in segments {
        assert_eq!(u64_at(s, "/count"), processed, "{s:#}");
        // One host clock stamps every end, so no span may be negative (but
        // see the loopback tests on done_to_seen).
        if s["segment"] != "done_to_seen" {
            assert_eq!(u64_at(s, "/negative_clamped"), 0, "{s:#}");
        }
        for p in ["p50_us", "p90_us", "p99_us", "p99_9_us", "max_us"] {
            assert!(s[p].as_f64().is_some_and(|v| v >= 0.0), "{p} of {s:#}");
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn help_of_the_command_and_each_subcommand_succeeds() {
    let top = run_to_end(&["--help"]);
    assert!(top.status.success(), "{}", top.stderr);
    for sub in ["bench", "run", "send", "validate"] {
        assert!(top.stdout.contains(sub), "--help lists {sub}:\n{}", top.stdout);
        let help = run_to_end(&[sub, "--help"]);
        assert!(help.status.success(), "{sub} --help: {}", help.stderr);
        assert!(help.stdout.contains(&format!("Usage: frameloop {sub}")), "{}", help.stdout);
    }
    let send = run_to_end(&["send", "--help"]).stdout;
    for flag in ["--to", "--rate", "--frame-bytes", "--packet-bytes", "--count", "--duration", "--streams"] {
        assert!(send.contains(flag), "send --help names {flag}");
    }
}

#[test]
fn bench_json_reports_every_frame_sent_as_processed() {
    // 50 frames fit the default 64-slot ring, so even an unoptimised build
    // on a loaded machine processes every frame the sender sends.
    let bench = run_to_end(&["bench", "--backend", "host", "--duration", "1", "--rate", "50", "--json"]);
    assert!(bench.status.success(), "bench failed:\n{}", bench.stderr);
    let report = json_of(&bench);
    assert_eq!(report.pointer("/backend/name"), Some(&Value::from("host")));
    let sent = u64_at(&report, "/sender/frames");
    assert!(sent >= 40, "a 1 s run at 50 frames/s sends about 50 frames, not {sent}");
    assert_eq!(u64_at(&report, "/latency/sections/sender/frames_sent"), sent);
    assert_eq!(u64_at(&report, "/latency/frames/processed"), sent, "frames sent == processed");
    assert_eq!(u64_at(&report, "/latency/frames/complete"), sent);
    assert_eq!(u64_at(&report, "/loop_stats/frames_processed"), sent);
    assert_eq!(u64_at(&report, "/ingest/frames_complete"), sent);
    assert_eq!(u64_at(&report, "/ingest/datagrams"), u64_at(&report, "/sender/packets"));
    assert_every_segment(&report, sent);
}

#[test]
fn validate_accepts_a_good_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "good.toml",
        "backend = \"host\"\n[ring]\nslots = 8\n[[chain]]\nop = \"unpack\"\nformat = \"u12\"\n[[chain]]\nop = \"stats\"\n",
    );
    let out = run_to_end(&["validate", "--config", &path]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("ok") && out.stdout.contains("unpack -> stats"), "{}", out.stdout);
    // The frame ring's size and the pages it will get on this machine.
    let expected = frameloop::ring::pages::expected_paging(
        true,
        frameloop::ring::pages::transparent_huge_page_mode().as_deref(),
    );
    assert!(out.stdout.contains(&format!("frame ring: 0.5 MiB, in {expected}")), "{}", out.stdout);
    let path = write(dir.path(), "base.toml", "[ring]\nslots = 8\nhuge_pages = false\n");
    let out = run_to_end(&["validate", "--config", &path]);
    assert!(out.stdout.contains("in base pages (ring.huge_pages = false)"), "{}", out.stdout);
}

/// `ring.huge_pages` must be a boolean: anything else names the key.
#[test]
fn validate_names_a_huge_pages_key_that_is_not_a_boolean() {
    assert_validate_names("[ring]\nhuge_pages = \"yes\"\n", &["ring.huge_pages"]);
}

/// Runs `validate` on `text`; it must fail and name every key in `keys`.
fn assert_validate_names(text: &str, keys: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "bad.toml", text);
    let out = run_to_end(&["validate", "--config", &path]);
    assert!(!out.status.success(), "validate accepted:\n{text}");
    let problems: Vec<&str> = out.stderr.lines().filter_map(|l| l.trim().strip_prefix("- ")).collect();
    for key in keys {
        assert!(
            problems.iter().any(|p| p.starts_with(&format!("{key}:"))),
            "no problem names {key}; stderr:\n{}",
            out.stderr
        );
    }
}

const UNKNOWN_KEYS: &str = "colour = \"red\"\n[ring]\nslotz = 3\n";
const OUT_OF_RANGE: &str = "[ring]\nslots = 1\n[loop]\npoll_budget_us = 5000000\n[ingest]\nbatch = 0\n";
const BAD_OP: &str = "[[chain]]\nop = \"unpack\"\nformat = \"u8\"\n[[chain]]\nop = \"median\"\n";

#[test]
fn validate_names_every_unknown_key_every_out_of_range_value_and_a_bad_op() {
    assert_validate_names(UNKNOWN_KEYS, &["colour", "ring.slotz"]);
    assert_validate_names(OUT_OF_RANGE, &["ring.slots", "loop.poll_budget_us", "ingest.batch"]);
    assert_validate_names(BAD_OP, &["chain[1].op"]);
}

#[test]
fn validate_names_every_kind_of_bad_key_in_one_run() {
    let text = format!("{UNKNOWN_KEYS}{}{BAD_OP}", OUT_OF_RANGE.replace("[ring]\n", ""));
    assert_validate_names(
        &text,
        &["colour", "ring.slotz", "ring.slots", "loop.poll_budget_us", "ingest.batch", "chain[1].op"],
    );
}

#[test]
fn run_serves_frames_from_the_send_command_and_reports_them_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "run.toml",
        "backend = \"host\"\n[ring]\nslots = 64\nslot_bytes = 16384\n[loop]\n\
         data_not_ready_sleep_interval_us = 100\n[ingest]\nbind = \"127.0.0.1:0\"\n\
         [[chain]]\nop = \"unpack\"\nformat = \"u8\"\n[[chain]]\nop = \"stats\"\n",
    );
    let run = Spawned::start(&["run", "--config", &config, "--duration", "3", "--json"]);
    let line = run.stderr_line_with("listening on ");
    let addr = line.split("listening on ").nth(1).and_then(|rest| rest.split_whitespace().next()).unwrap();
    let addr = addr.to_string();
    assert!(addr.parse::<std::net::SocketAddr>().is_ok(), "listening address in {line:?}");

    let send = run_to_end(&[
        "send",
        "--to",
        &addr,
        "--rate",
        "100",
        "--count",
        "20",
        "--frame-bytes",
        "8192",
        "--packet-bytes",
        "1472",
    ]);
    assert!(send.status.success(), "send failed:\n{}", send.stderr);
    let served = run.finish();
    assert!(served.status.success(), "run failed:\n{}", served.stderr);
    let report = json_of(&served);
    assert_eq!(report.pointer("/listen"), Some(&Value::from(addr)));
    assert_eq!(u64_at(&report, "/latency/frames/processed"), 20, "every frame sent is processed");
    assert_eq!(u64_at(&report, "/ingest/frames_complete"), 20);
    // 8192 bytes in 1424-byte payloads: 6 datagrams per frame.
    assert_eq!(u64_at(&report, "/ingest/datagrams"), 20 * 6);
    assert_eq!(u64_at(&report, "/ingest/packets_accepted"), 20 * 6);
    assert_every_segment(&report, 20);
}

/// Where no RDMA stack is (this machine, CI): `ingest.transport = "rdma"`
/// stops start-up with the reason, and `auto` says why once and serves UDP.
#[test]
fn rdma_transport_without_a_device_fails_and_auto_falls_back_to_udp() {
    let dir = tempfile::tempdir().unwrap();
    let base =
        "backend = \"host\"\n[ring]\nslots = 8\nslot_bytes = 4096\n[rdma]\nlisten = \"127.0.0.1:7471\"\n";
    let rdma = write(
        dir.path(),
        "rdma.toml",
        &format!("{base}[ingest]\nbind = \"127.0.0.1:0\"\ntransport = \"rdma\"\n"),
    );
    let f = run_to_end(&["run", "--config", &rdma, "--duration", "1"]);
    assert!(!f.status.success(), "rdma without a device must fail:\n{}", f.stderr);
    assert!(f.stderr.contains("RDMA"), "the error names RDMA:\n{}", f.stderr);

    let auto = write(
        dir.path(),
        "auto.toml",
        &format!("{base}[ingest]\nbind = \"127.0.0.1:0\"\ntransport = \"auto\"\n"),
    );
    let f = run_to_end(&["run", "--config", &auto, "--duration", "1", "--json"]);
    assert!(f.status.success(), "auto falls back to UDP:\n{}", f.stderr);
    assert_eq!(f.stderr.matches("using UDP").count(), 1, "one line says why:\n{}", f.stderr);
    let report = json_of(&f);
    assert!(report["listen"].as_str().is_some_and(|l| l.starts_with("127.0.0.1:")), "{report:#}");
}

#[test]
fn send_refuses_a_link_pace_for_rdma_writes_naming_the_flag() {
    let f = run_to_end(&[
        "send",
        "--to",
        "127.0.0.1:9",
        "--transport",
        "rdma",
        "--link-gbps",
        "10",
        "--count",
        "1",
    ]);
    assert!(!f.status.success(), "{}", f.stderr);
    assert!(f.stderr.contains("--link-gbps 10") && f.stderr.contains("--transport udp"), "{}", f.stderr);
    let f = run_to_end(&[
        "send",
        "--to",
        "127.0.0.1:9",
        "--link-gbps",
        "0.001",
        "--rate",
        "1000",
        "--count",
        "1",
    ]);
    assert!(!f.status.success(), "{}", f.stderr);
    assert!(f.stderr.contains("raise --link-gbps or lower --rate"), "{}", f.stderr);
}

#[test]
fn bench_refuses_a_stream_part_below_64_bytes_naming_the_flag() {
    for (value, says) in [("63", "64 or more"), ("0", "64 or more"), ("lots", "byte count")] {
        let f = run_to_end(&["bench", "--compare", "--stream-part-bytes", value]);
        assert_eq!(f.status.code(), Some(2), "{value}: {}", f.stderr);
        assert!(f.stderr.contains("--stream-part-bytes") && f.stderr.contains(says), "{value}: {}", f.stderr);
    }
    // Without --compare it means nothing: refused too.
    let f = run_to_end(&["bench", "--stream-part-bytes", "8924"]);
    assert_eq!(f.status.code(), Some(2), "{}", f.stderr);
    assert!(f.stderr.contains("--compare"), "{}", f.stderr);
}

/// `[service]` thread placement reaches the receiver, result and loop
/// threads; a core that does not exist stops start-up with the reason.
#[test]
fn service_thread_placement_is_applied_or_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let base = "backend = \"host\"\n[ring]\nslots = 8\nslot_bytes = 4096\n[ingest]\nbind = \"127.0.0.1:0\"\ntransport = \"udp\"\n";
    let good = write(
        dir.path(),
        "good.toml",
        &format!("{base}[service]\nreceiver_cpu = 0\nresult_cpu = 0\nloop_cpu = 0\n"),
    );
    let f = run_to_end(&["run", "--config", &good, "--duration", "1", "--json"]);
    assert!(f.status.success(), "placement on core 0 works:\n{}", f.stderr);
    for key in ["receiver_cpu", "result_cpu", "loop_cpu"] {
        let bad = write(dir.path(), "bad.toml", &format!("{base}[service]\n{key} = 4095\n"));
        let f = run_to_end(&["run", "--config", &bad, "--duration", "1"]);
        assert!(!f.status.success(), "{key} = 4095 must stop start-up:\n{}", f.stderr);
        assert!(f.stderr.contains("4095"), "the error names the core ({key}):\n{}", f.stderr);
    }
    // The assembly thread (ingest.assembly_thread) is placed at start-up
    // too: on a core the receiver is not pinned to, and on one the machine
    // does not have (within the accepted range) start-up stops.
    let split = format!("{base}assembly_thread = true\n[service]\nreceiver_cpu = 0\n");
    let good = write(dir.path(), "split.toml", &format!("{split}assembly_cpu = 0\n"));
    let f = run_to_end(&["run", "--config", &good, "--duration", "1", "--json"]);
    assert!(f.status.success(), "the assembly thread on core 0:\n{}", f.stderr);
    let pinned = f.stderr.lines().any(|l| l.contains("pinned thread to core") && l.contains("\"assembly\""));
    assert!(pinned, "the start-up log says the assembly thread was pinned:\n{}", f.stderr);
    let bad = write(dir.path(), "split-bad.toml", &format!("{split}assembly_cpu = 1023\n"));
    let f = run_to_end(&["run", "--config", &bad, "--duration", "1"]);
    assert!(!f.status.success(), "assembly_cpu = 1023 must stop start-up:\n{}", f.stderr);
    assert!(f.stderr.contains("1023"), "the error names the core:\n{}", f.stderr);
    // So are the further reading threads (ingest.reading_threads), each on
    // its entry of service.reader_cpus; one without an entry is left be.
    let readers = format!("{base}assembly_thread = true\nreading_threads = 3\n[service]\nreceiver_cpu = 0\n");
    let good = write(dir.path(), "readers.toml", &format!("{readers}reader_cpus = [0]\n"));
    let f = run_to_end(&["run", "--config", &good, "--duration", "1", "--json"]);
    assert!(f.status.success(), "reading thread 1 on core 0:\n{}", f.stderr);
    let pinned =
        |role: &str| f.stderr.lines().any(|l| l.contains("pinned thread to core") && l.contains(role));
    assert!(
        pinned("\"reader 1\"") && !pinned("\"reader 2\""),
        "reader 1 pinned, reader 2 not:\n{}",
        f.stderr
    );
    assert!(f.stderr.contains("read on 3 threads"), "start-up says how many threads read:\n{}", f.stderr);
    let bad = write(dir.path(), "readers-bad.toml", &format!("{readers}reader_cpus = [0, 1023]\n"));
    let f = run_to_end(&["run", "--config", &bad, "--duration", "1"]);
    assert!(!f.status.success(), "reader_cpus = [0, 1023] must stop start-up:\n{}", f.stderr);
    assert!(f.stderr.contains("1023"), "the error names the core:\n{}", f.stderr);
}
