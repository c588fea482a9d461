//! Two `frameloop run` processes on one `ingest.bind`: the second fails at
//! start-up with a message naming `ingest.bind`, whether the first reads
//! the port with one socket or a group of reading threads (`SO_REUSEPORT`
//! among themselves), and whether the second has one or several; only
//! `ingest.reuse_port = true` in both shares the port on purpose. Their log
//! lines, piped, carry no colour codes.

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(60);

fn config(dir: &Path, name: &str, port: u16, extra: &str) -> PathBuf {
    let text = format!(
        "backend = \"host\"\n\
         [ring]\nslots = 16\nslot_bytes = 4096\n\
         [loop]\ndata_not_ready_sleep_interval_us = 200\n\
         [ingest]\nbind = \"127.0.0.1:{port}\"\n{extra}\n"
    );
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn frameloop_run(cfg: &Path, seconds: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_frameloop"));
    c.args(["run", "--duration", seconds, "--config"])
        .arg(cfg)
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// Starts the first appliance and waits until it holds the port.
fn first(cfg: &Path, port: u16) -> Child {
    let mut child = frameloop_run(cfg, "60").spawn().unwrap();
    let deadline = Instant::now() + PATIENCE;
    while UdpSocket::bind(("127.0.0.1", port)).is_ok() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the first appliance ended: {status} {:?}", child.wait_with_output().unwrap());
        }
        assert!(Instant::now() < deadline, "the first appliance never bound the port");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn stop(mut child: Child) -> Output {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the appliance did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn assert_refused(second: &Output) {
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "the second appliance started: {stderr}");
    assert!(stderr.contains("ingest.bind") && stderr.contains("already bound"), "{stderr}");
    assert!(!stderr.contains('\x1b'), "colour codes in piped log lines: {stderr:?}");
}

#[test]
fn a_second_appliance_on_a_bound_port_fails_naming_ingest_bind() {
    let dir = tempfile::tempdir().unwrap();
    let group = "assembly_thread = true\nreading_threads = 2";
    for (first_extra, second_extra) in [("", ""), (group, ""), ("", group), (group, group)] {
        let port = free_port();
        let a = first(&config(dir.path(), "a.toml", port, first_extra), port);
        let second = frameloop_run(&config(dir.path(), "b.toml", port, second_extra), "5").output().unwrap();
        let first_out = stop(a);
        assert!(
            first_out.status.success(),
            "first {first_extra:?}: {}",
            String::from_utf8_lossy(&first_out.stderr)
        );
        assert_refused(&second);
        let first_log = String::from_utf8_lossy(&first_out.stderr);
        assert!(!first_log.contains('\x1b'), "colour codes in piped log lines: {first_log:?}");
    }
}

#[test]
fn reuse_port_in_both_shares_the_port_on_purpose() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let shared = "reuse_port = true";
    let a = first(&config(dir.path(), "a.toml", port, shared), port);
    let second = frameloop_run(&config(dir.path(), "b.toml", port, shared), "0.5").output().unwrap();
    let first_out = stop(a);
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stderr));
    assert!(first_out.status.success(), "{}", String::from_utf8_lossy(&first_out.stderr));
}
