//! Long-running commands stop promptly on SIGTERM and SIGINT whatever they
//! wait on (a long gap in a replayed capture, a slow send rate, a quiet
//! socket), and still print their summary.

use frameloop::capture::{DatagramTap, PcapngRecorder};
use frameloop::wire::native;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a command may take to exit after the signal: the goal is well
/// under a second; the margin is for a loaded CI machine.
const STOP_BOUND: Duration = Duration::from_secs(2);
/// How long the command may take to get going.
const PATIENCE: Duration = Duration::from_secs(60);

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .args(args)
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("frameloop starts")
}

/// Sends `signal`, then waits for the exit; returns the time it took, whether it
/// succeeded, and stdout.
fn stop(mut child: Child, signal: Signal) -> (Duration, bool, String) {
    let mut stdout = child.stdout.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).unwrap();
        s
    });
    let mut stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        eprint!("{s}");
    });
    let start = Instant::now();
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > PATIENCE {
            let _ = child.kill();
            panic!("still running {PATIENCE:?} after {signal}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    (start.elapsed(), status.success(), out.join().unwrap())
}

fn receiver() -> (UdpSocket, SocketAddr) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    let addr = socket.local_addr().unwrap();
    (socket, addr)
}

#[test]
fn replay_sleeping_through_a_long_gap_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gap.pcapng");
    let (socket, to) = receiver();
    let frames: Vec<Vec<u8>> =
        (1..=2).flat_map(|f| native::encode_frame(1, f, &[5u8; 100], 1000, 0)).collect();
    let mut rec = PcapngRecorder::create(&path).unwrap();
    // The second datagram comes a day after the first.
    for (i, d) in frames.iter().enumerate() {
        rec.on_datagram(
            "127.0.0.1:4000".parse().unwrap(),
            to,
            d,
            1_000_000_000 + i as u64 * 86_400_000_000_000,
        );
    }
    rec.finish().unwrap();
    let child =
        spawn(&["replay", path.to_str().unwrap(), "--to", &to.to_string(), "--max-gap-ms", "100000000"]);
    let mut buf = [0u8; 2048];
    socket.recv(&mut buf).expect("the first datagram arrives");
    // Now it waits for the second; give it a moment to be inside the sleep.
    std::thread::sleep(Duration::from_millis(100));
    let (took, ok, stdout) = stop(child, Signal::SIGTERM);
    assert!(took < STOP_BOUND, "replay took {took:?} to stop");
    assert!(ok, "a stop by signal is not a failure: {stdout}");
    assert!(
        stdout.contains("replay: 1 frames, 1 datagrams") && stdout.contains("ended early: stopped"),
        "{stdout}"
    );
}

#[test]
fn send_at_a_slow_rate_stops_on_sigint() {
    let (socket, to) = receiver();
    let child = spawn(&["send", "--to", &to.to_string(), "--rate", "0.1", "--duration", "600"]);
    let mut buf = [0u8; 65536];
    socket.recv(&mut buf).expect("the first frame arrives");
    std::thread::sleep(Duration::from_millis(100));
    let (took, ok, stdout) = stop(child, Signal::SIGINT);
    assert!(took < STOP_BOUND, "send took {took:?} to stop");
    assert!(ok, "{stdout}");
    assert!(stdout.contains("\"frames\": 1"), "the summary counts the one frame sent: {stdout}");
}

#[test]
fn record_on_a_quiet_socket_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("quiet.pcapng");
    let mut child = spawn(&["record", "--out", out.to_str().unwrap(), "--bind", "127.0.0.1:0"]);
    // Wait for its "recording ... into" line, then let the stderr reader go on.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    while !rx.recv_timeout(PATIENCE).expect("record starts").contains("recording") {}
    child.stderr = None;
    let mut stdout = child.stdout.take().unwrap();
    let start = Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let mut text = String::new();
    stdout.read_to_string(&mut text).unwrap();
    let status = child.wait().unwrap();
    let took = start.elapsed();
    assert!(took < STOP_BOUND, "record took {took:?} to stop");
    assert!(status.success() && text.contains("recorded 0 datagrams"), "{text}");
}
