//! A stop that cannot hang: with the resident loop's tear-down made never to
//! return, `frameloop run --duration 1` still exits within
//! `service.shutdown_timeout_ms` (plus a margin), with exit status 4, and
//! says what it left behind.

use frameloop::service::thread_stall::{TEST_STALL_THREAD_AFTER_ENV, TEST_STALL_THREAD_ENV};
use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The bound configured below.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_millis(1000);
/// Scheduling slack on a loaded 2-core machine, and the report's printing.
const MARGIN: Duration = Duration::from_millis(1500);
/// Start-up of a debug build on a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `frameloop run --duration 1` with `env`; returns the exit code, the
/// time from the "stopping" log line to the exit, stdout and stderr.
fn run_for_a_second(env: &[(&str, &str)]) -> (Option<i32>, Duration, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = dir.path().join("frameloop.toml");
    std::fs::write(
        &config,
        format!(
            "backend = \"host\"\n[ring]\nslots = 16\nslot_bytes = 4096\n\
             [ingest]\nbind = \"127.0.0.1:{port}\"\n\
             [service]\nshutdown_timeout_ms = {}\n",
            SHUTDOWN_TIMEOUT.as_millis()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_frameloop"));
    cmd.args(["run", "--duration", "1", "--config"])
        .arg(&config)
        .env_remove("NOTIFY_SOCKET")
        .env_remove(TEST_STALL_THREAD_ENV)
        .env_remove(TEST_STALL_THREAD_AFTER_ENV)
        .env("FRAMELOOP_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    // Stamp each stderr line as it arrives.
    let stderr = child.stderr.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send((Instant::now(), line));
        }
    });
    let deadline = Instant::now() + START_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let text: Vec<String> = lines.try_iter().map(|(_, l)| l).collect();
            panic!("frameloop run --duration 1 did not exit\n{}", text.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let exited = Instant::now();
    reader.join().unwrap();
    let stamped: Vec<(Instant, String)> = lines.try_iter().collect();
    let text = stamped.iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>().join("\n");
    let stopping = stamped
        .iter()
        .find(|(_, l)| l.ends_with("stopping"))
        .unwrap_or_else(|| panic!("no \"stopping\" line:\n{text}"))
        .0;
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    (status.code(), exited.saturating_duration_since(stopping), stdout, text)
}

#[test]
fn a_tear_down_that_never_returns_is_left_behind_within_the_shutdown_timeout() {
    let (code, stop_took, stdout, stderr) =
        run_for_a_second(&[(TEST_STALL_THREAD_ENV, "tear-down"), (TEST_STALL_THREAD_AFTER_ENV, "0")]);
    assert_eq!(code, Some(4), "exit status with a hung tear-down\n{stderr}");
    assert!(
        stop_took <= SHUTDOWN_TIMEOUT + MARGIN,
        "the stop took {stop_took:?}, bound {SHUTDOWN_TIMEOUT:?} + {MARGIN:?}\n{stderr}"
    );
    assert!(stderr.contains("test hook: tear-down never returns"), "the hook did not fire:\n{stderr}");
    assert!(
        stderr.contains("did not stop within service.shutdown_timeout_ms = 1000 ms")
            && stderr.contains("resident loop (its tear-down did not return)"),
        "the error does not say what hung or which key bounds it:\n{stderr}"
    );
    // The report is still printed, naming what was left behind.
    assert!(stdout.contains("did not stop within 1000 ms (left behind): resident loop"), "{stdout}");
}

#[test]
fn a_clean_stop_exits_zero_and_reports_nothing_left_behind() {
    let (code, stop_took, stdout, stderr) = run_for_a_second(&[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stop_took <= SHUTDOWN_TIMEOUT + MARGIN, "the stop took {stop_took:?}\n{stderr}");
    assert!(!stdout.contains("left behind"), "{stdout}");
}
