//! `frameloop run` reloaded the way an operator does it: `frameloop reload
//! --pid-file` (SIGHUP, as the unit's ExecReload sends) makes it re-read its
//! config, tell systemd RELOADING=1 (with MONOTONIC_USEC) then READY=1, and
//! the metrics endpoint shows the new parameter generation and the reloads
//! by outcome; a change that needs a restart is refused. The unit carries
//! the ExecReload line.

mod service_support;

use service_support::{NotifySocket, http_get, parse_exposition};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(60);

fn config(udp_port: u16, metrics: SocketAddr, slots: usize, level: f32) -> String {
    format!(
        "backend = \"host\"\n\
         [ring]\nslots = {slots}\nslot_bytes = 4096\n\
         [ingest]\nbind = \"127.0.0.1:{udp_port}\"\n\
         [service]\nmetrics_addr = \"{metrics}\"\n\
         [[chain]]\nop = \"unpack\"\nformat = \"u16\"\n\
         [[chain]]\nop = \"stats\"\n\
         [[chain]]\nop = \"threshold\"\nlevel = {level:?}\n"
    )
}

fn reload(pid_file: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .arg("reload")
        .arg("--pid-file")
        .arg(pid_file)
        .output()
        .unwrap();
    assert!(out.status.success(), "frameloop reload: {}", String::from_utf8_lossy(&out.stderr));
}

fn metric(addr: SocketAddr, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let (status, _, body) = http_get(addr, "/metrics").unwrap();
    assert_eq!(status, 200);
    parse_exposition(&body).unwrap().value(name, labels)
}

#[test]
fn sighup_reloads_parameters_and_refuses_a_restart_change() {
    let dir = tempfile::tempdir().unwrap();
    let udp_port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let metrics = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let cfg = dir.path().join("frameloop.toml");
    let pid_file = dir.path().join("frameloop.pid");
    std::fs::write(&cfg, config(udp_port, metrics, 16, 8.0)).unwrap();
    let notify = NotifySocket::bind(dir.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .args(["run", "--config"])
        .arg(&cfg)
        .arg("--pid-file")
        .arg(&pid_file)
        .env("NOTIFY_SOCKET", &notify.path)
        .env_remove("WATCHDOG_USEC")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = notify.wait_for("READY=1", TIMEOUT);
    if ready.is_err() {
        let _ = child.kill();
        panic!("no READY=1: {:?}", child.wait_with_output().unwrap());
    }
    let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert_eq!(pid, child.id());
    assert_eq!(metric(metrics, "frameloop_param_generation", &[]), Some(0.0));

    // A new threshold: a parameter reload.
    std::fs::write(&cfg, config(udp_port, metrics, 16, 9.5)).unwrap();
    reload(&pid_file);
    let seen = notify.wait_for("READY=1", TIMEOUT).expect("READY=1 after the reload");
    let reloading = seen.iter().find(|(_, m)| m.lines().any(|l| l == "RELOADING=1")).expect("RELOADING=1");
    assert!(reloading.1.lines().any(|l| l.starts_with("MONOTONIC_USEC=")), "{reloading:?}");
    let deadline = Instant::now() + TIMEOUT;
    while metric(metrics, "frameloop_reloads_total", &[("outcome", "applied_params")]) != Some(1.0) {
        assert!(Instant::now() < deadline, "the parameter reload is never counted");
        std::thread::sleep(Duration::from_millis(50));
    }

    // A new slot count needs a restart: refused, the chain untouched.
    std::fs::write(&cfg, config(udp_port, metrics, 32, 1.0)).unwrap();
    reload(&pid_file);
    notify.wait_for("READY=1", TIMEOUT).expect("READY=1 after the refused reload");
    while metric(metrics, "frameloop_reloads_total", &[("outcome", "refused_restart")]) != Some(1.0) {
        assert!(Instant::now() < deadline, "the refused reload is never counted");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(metric(metrics, "frameloop_reloads_total", &[("outcome", "applied_params")]), Some(1.0));

    // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("reload applied as parameter generation 1: chain[2].level 8.0 -> 9.5 (parameter)"),
        "{log}"
    );
    assert!(log.contains("ring.slots changed (16 -> 32) and needs a restart"), "{log}");
    assert!(!pid_file.exists(), "the pid file is removed at exit");
}

#[test]
fn the_unit_reloads_by_sighup() {
    let unit =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/frameloop.service")).unwrap();
    assert!(unit.lines().any(|l| l == "ExecReload=/bin/kill -HUP $MAINPID"), "{unit}");
}
