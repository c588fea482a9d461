//! A pipeline thread that dies takes `frameloop run` down loudly: the panic
//! logged with the thread's name and message, a distinct non-zero exit
//! status (3) so systemd's `Restart=` brings the service back, and no hang.

use frameloop::service::thread_failure::TEST_PANIC_ENV;
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Start-up of a debug build on a loaded machine plus the 3 s stop bound.
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `frameloop run` (host backend, no --duration) with `thread` made to
/// panic; returns the exit code and stderr, failing if it does not exit.
fn run_with_dead(thread: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = dir.path().join("frameloop.toml");
    std::fs::write(
        &config,
        format!(
            "backend = \"host\"\n[ring]\nslots = 16\nslot_bytes = 4096\n\
             [ingest]\nbind = \"127.0.0.1:{port}\"\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .arg("run")
        .arg("--config")
        .arg(&config)
        .env(TEST_PANIC_ENV, thread)
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + EXIT_TIMEOUT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "frameloop ran on for {EXIT_TIMEOUT:?} with a dead {thread} thread\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn assert_died_loudly(thread: &str, thread_name: &str) {
    let (code, stderr) = run_with_dead(thread);
    assert_eq!(code, Some(3), "exit status with a dead {thread} thread\n{stderr}");
    assert!(
        stderr.contains(&format!("thread {thread_name} panicked"))
            && stderr.contains(&format!("test-requested panic of the {thread} thread")),
        "the log does not name the thread and its panic message:\n{stderr}"
    );
    assert!(
        stderr.contains(&format!("frameloop: the {thread_name} thread died")),
        "no final error line:\n{stderr}"
    );
}

#[test]
fn a_dead_receiver_thread_stops_the_service_with_status_3() {
    assert_died_loudly("receiver", "frameloop-rx");
}

#[test]
fn a_dead_result_thread_stops_the_service_with_status_3() {
    assert_died_loudly("result", "frameloop-results");
}
