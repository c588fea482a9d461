//! `frameloop record` and `frameloop replay` as a user runs them: help,
//! recording what a sender sends, replaying it in-process and into a running
//! `frameloop run --record`, whose own recording replays to the same bytes,
//! and damaged or foreign files that end with a clear error, never a panic.

use frameloop::capture::{CaptureReader, DatagramTap, PcapngRecorder, net};
use frameloop::sender::{Pattern, build_frame_datagrams};
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(120);
const FRAMES: u64 = 3;
/// 4000-byte frames in 1048-byte datagrams: four datagrams of 1000 payload bytes each.
const FRAME_BYTES: u64 = 4000;
const DATAGRAMS: u64 = FRAMES * 4;

fn frameloop(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_frameloop"));
    cmd.args(args).env_remove("NOTIFY_SOCKET").env("FRAMELOOP_LOG", "info").stdin(Stdio::null());
    cmd
}

/// Runs a command to its end and returns what it printed.
fn finished(args: &[&str]) -> (Output, String, String) {
    let out = frameloop(args).output().expect("the frameloop binary runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(!stderr.contains("panicked"), "`frameloop {}` panicked:\n{stderr}", args.join(" "));
    (out, stdout, stderr)
}

/// A running command, its stderr passed line by line to `lines`.
struct Background {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Background {
    fn start(args: &[&str]) -> Self {
        let mut child =
            frameloop(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("frameloop starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("  | {line}");
                let _ = tx.send(line);
            }
        });
        Background { child, lines }
    }

    /// Waits for a stderr line containing `needle`.
    fn wait_for(&self, needle: &str) {
        loop {
            match self.lines.recv_timeout(PATIENCE) {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => {}
                Err(e) => panic!("no stderr line with {needle:?}: {e}"),
            }
        }
    }

    /// Waits for the exit; returns whether it succeeded and the stdout.
    fn finish(mut self) -> (bool, String) {
        let mut stdout = String::new();
        self.child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
        (self.child.wait().unwrap().success(), stdout)
    }
}

/// A loopback port free a moment ago.
fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Every datagram of the test's frames, in sending order.
fn datagrams() -> Vec<Vec<u8>> {
    (0..FRAMES)
        .flat_map(|seq| build_frame_datagrams(0, seq, FRAME_BYTES, 1048, 0, Pattern::Counter).unwrap())
        .collect()
}

/// A host-backend config with `unpack u8 -> stats`, listening on `port`.
fn write_config(path: &Path, port: u16) {
    let text = format!(
        "backend = \"host\"\n[ingest]\nbind = \"127.0.0.1:{port}\"\nframe_timeout_ms = 1000\n\
         [ring]\nslots = 16\nslot_bytes = 8192\n[loop]\ndata_not_ready_sleep_interval_us = 100\n\
         [[chain]]\nop = \"unpack\"\nformat = \"u8\"\n[[chain]]\nop = \"stats\"\n"
    );
    std::fs::write(path, text).unwrap();
}

/// UDP payloads of a capture, in order.
fn payloads(path: &Path) -> Vec<Vec<u8>> {
    let mut reader = CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(p) = reader.next_packet().unwrap() {
        out.push(net::decode_udp(p.link_type, p.data).unwrap().payload.to_vec());
    }
    out
}

#[test]
fn help_describes_both_commands() {
    let (out, top, _) = finished(&["--help"]);
    assert!(out.status.success());
    assert!(top.contains("record") && top.contains("replay"), "{top}");
    for (cmd, flags) in [
        ("record", &["--out", "--duration", "--count", "--bind", "pcapng", "frameloop run --record"][..]),
        (
            "replay",
            &[
                "--to",
                "--speed",
                "--max-rate",
                "--max-gap-ms",
                "--port",
                "--stream",
                "--rtp",
                "--config",
                "[rtp]",
            ][..],
        ),
        ("run", &["--record"][..]),
    ] {
        let (out, help, _) = finished(&[cmd, "--help"]);
        assert!(out.status.success(), "{cmd} --help");
        for f in flags {
            assert!(help.contains(f), "`frameloop {cmd} --help` lacks {f}:\n{help}");
        }
    }
    let (out, _, err) = finished(&["replay"]);
    assert!(!out.status.success());
    assert!(err.contains("FILE"), "a missing capture is named: {err}");
}

#[test]
fn record_then_replay_in_process_and_into_a_running_appliance() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (sent_capture, run_capture, config) = (path("sent.pcapng"), path("run.pcapng"), path("c.toml"));
    write_config(Path::new(&config), free_port());
    let sent = datagrams();

    // 1. `record` while a sender sends.
    let port = free_port();
    let bind = format!("127.0.0.1:{port}");
    let recorder = Background::start(&["record", "--out", &sent_capture, "--duration", "1", "--bind", &bind]);
    recorder.wait_for("recording UDP datagrams sent to");
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    for d in &sent {
        sender.send_to(d, &bind).unwrap();
    }
    let (ok, stdout) = recorder.finish();
    assert!(ok, "record failed: {stdout}");
    assert!(stdout.contains(&format!("recorded {DATAGRAMS} datagrams")), "{stdout}");
    assert_eq!(payloads(Path::new(&sent_capture)), sent, "the recording holds the sent bytes");

    // 2. In-process replay processes every frame.
    let (out, summary, err) = finished(&["replay", &sent_capture, "--config", &config]);
    assert!(out.status.success(), "{summary}{err}");
    assert!(summary.contains(&format!("replay: {FRAMES} frames, {DATAGRAMS} datagrams")), "{summary}");

    // 3. Replay into a running appliance that records what it receives.
    let run_port = free_port();
    write_config(Path::new(&config), run_port);
    let run = Background::start(&["run", "--config", &config, "--record", &run_capture, "--json"]);
    run.wait_for("listening on");
    let to = SocketAddr::from(([127, 0, 0, 1], run_port)).to_string();
    let (out, summary, err) = finished(&["replay", &sent_capture, "--to", &to, "--speed", "4"]);
    assert!(out.status.success(), "{summary}{err}");
    assert!(summary.contains(&format!("replay: {FRAMES} frames, {DATAGRAMS} datagrams")), "{summary}");
    // The progress line (one a second) shows when the receiver has taken everything.
    run.wait_for(&format!("rx {DATAGRAMS} datagrams"));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(run.child.id() as i32), nix::sys::signal::SIGINT)
        .unwrap();
    let (ok, report) = run.finish();
    assert!(ok, "run failed: {report}");
    let report: serde_json::Value = serde_json::from_str(&report).expect("run --json prints JSON");
    assert_eq!(report["ingest"]["frames_complete"], FRAMES, "{report}");
    assert_eq!(report["recording"]["datagrams"], DATAGRAMS, "{report}");
    assert_eq!(report["recording"]["error"], serde_json::Value::Null, "{report}");

    // 4. The appliance's recording holds the same bytes and replays the same frames.
    assert_eq!(payloads(Path::new(&run_capture)), sent);
    let (out, summary, err) = finished(&["replay", &run_capture, "--config", &config, "--max-rate"]);
    assert!(out.status.success(), "{summary}{err}");
    assert!(summary.contains(&format!("replay: {FRAMES} frames, {DATAGRAMS} datagrams")), "{summary}");
}

#[test]
fn damaged_and_foreign_files_fail_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.pcapng");
    let mut recorder = PcapngRecorder::create(&good).unwrap();
    let (src, dst): (SocketAddr, SocketAddr) =
        ("127.0.0.1:4000".parse().unwrap(), "127.0.0.1:5000".parse().unwrap());
    for (i, d) in datagrams().iter().enumerate() {
        recorder.on_datagram(src, dst, d, 1_700_000_000_000_000_000 + i as u64 * 1000);
    }
    recorder.finish().unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let (out, summary, _) = finished(&["replay", good.to_str().unwrap()]);
    assert!(out.status.success() && summary.contains(&format!("replay: {FRAMES} frames")), "{summary}");

    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("cut.pcapng", bytes[..bytes.len() - 10].to_vec(), "truncated"),
        ("header-only.pcapng", bytes[..20].to_vec(), "truncated"),
        ("text.pcap", b"this is not a capture at all\n".to_vec(), "not a pcap or pcapng file"),
        ("empty.pcap", Vec::new(), "truncated"),
    ];
    for (name, content, message) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, content).unwrap();
        let (out, _, err) = finished(&["replay", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{name}: exit status; stderr:\n{err}");
        assert!(err.contains(message) && err.contains("frameloop: "), "{name}: stderr:\n{err}");
    }
    // A cut file still replays what comes before the damage.
    let (_, summary, _) = finished(&["replay", dir.path().join("cut.pcapng").to_str().unwrap()]);
    assert!(
        summary.contains(&format!("{} datagrams", DATAGRAMS - 1)) && summary.contains("ended early"),
        "{summary}"
    );
    let (out, _, err) = finished(&["replay", dir.path().join("missing.pcapng").to_str().unwrap()]);
    assert!(!out.status.success() && err.contains("cannot open capture"), "{err}");
}
