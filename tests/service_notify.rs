//! `frameloop run` under a fake systemd: READY=1 once the appliance can take
//! frames, WATCHDOG=1 while the pipeline makes progress and none once it
//! stalls, STOPPING=1 on SIGTERM, then a clean exit with the histogram log
//! flushed; the metrics endpoint scraped and parsed meanwhile.

mod service_support;

use frameloop::service::thread_stall::{TEST_STALL_THREAD_AFTER_ENV, TEST_STALL_THREAD_ENV};
use service_support::{Exposition, NotifySocket, count_line, http_get, parse_exposition};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Debug builds compile and start slowly on a loaded 2-core CI machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The appliance's own bound (service.shutdown_timeout_ms below) plus margin.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn free_tcp_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

struct Appliance {
    child: Child,
    udp_port: u16,
    metrics: SocketAddr,
    notify: NotifySocket,
    hlog: PathBuf,
    _dir: tempfile::TempDir,
}

impl Appliance {
    /// Starts `frameloop run` on the host backend with a fake NOTIFY_SOCKET
    /// and WATCHDOG_USEC, plus `env`.
    fn start(watchdog: Duration, env: &[(&str, &str)]) -> Self {
        Self::start_with_slots(watchdog, env, 16)
    }

    /// [`Appliance::start`] with a ring of `slots` slots.
    fn start_with_slots(watchdog: Duration, env: &[(&str, &str)], slots: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let udp_port = free_udp_port();
        let metrics = free_tcp_addr();
        let config = dir.path().join("frameloop.toml");
        std::fs::write(
            &config,
            format!(
                "backend = \"host\"\n\
                 [ring]\nslots = {slots}\nslot_bytes = 4096\n\
                 [ingest]\nbind = \"127.0.0.1:{udp_port}\"\n\
                 [service]\nmetrics_addr = \"{metrics}\"\nshutdown_timeout_ms = 5000\n"
            ),
        )
        .unwrap();
        let notify = NotifySocket::bind(dir.path());
        let hlog = dir.path().join("latency.hlog");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_frameloop"));
        cmd.arg("run")
            .arg("--config")
            .arg(&config)
            .arg("--histogram-log")
            .arg(&hlog)
            .env("NOTIFY_SOCKET", &notify.path)
            .env("WATCHDOG_USEC", watchdog.as_micros().to_string())
            .env_remove("WATCHDOG_PID")
            .env_remove("JOURNAL_STREAM")
            .env_remove(frameloop::service::watchdog::TEST_STALL_ENV)
            .env_remove(TEST_STALL_THREAD_ENV)
            .env_remove(TEST_STALL_THREAD_AFTER_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap();
        Self { child, udp_port, metrics, notify, hlog, _dir: dir }
    }

    /// Waits for READY=1, failing at once (with the output) if the
    /// appliance exits first.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut seen = Vec::new();
        loop {
            match self.notify.wait_for("READY=1", Duration::from_millis(200)) {
                Ok(_) => return,
                Err(more) => seen.extend(more),
            }
            let exited = self.child.try_wait().unwrap();
            if exited.is_some() || Instant::now() > deadline {
                let _ = self.child.kill();
                let out = self.child.wait_with_output_ref();
                panic!("no READY=1 (exit: {exited:?}); got {seen:?}\n{out}");
            }
        }
    }

    fn sigterm(&self) {
        // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0);
    }

    /// Waits for the exit within `EXIT_TIMEOUT`; returns the status and output.
    fn wait_exit(mut self) -> (std::process::ExitStatus, String, String, PathBuf, tempfile::TempDir) {
        let deadline = Instant::now() + EXIT_TIMEOUT;
        loop {
            if let Some(_status) = self.child.try_wait().unwrap() {
                break;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let out = self.child.wait_with_output_ref();
                panic!("frameloop did not exit within {EXIT_TIMEOUT:?} of SIGTERM\n{out}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = self.child.wait_with_output().unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            self.hlog,
            self._dir,
        )
    }
}

trait OutputRef {
    fn wait_with_output_ref(&mut self) -> String;
}

impl OutputRef for Child {
    /// Stdout and stderr of a child already killed.
    fn wait_with_output_ref(&mut self) -> String {
        use std::io::Read;
        let _ = self.wait();
        let mut text = String::new();
        if let Some(o) = self.stdout.as_mut() {
            let _ = o.read_to_string(&mut text);
        }
        if let Some(e) = self.stderr.as_mut() {
            let _ = e.read_to_string(&mut text);
        }
        text
    }
}

/// Sends `count` single-packet native frames of 1 KiB to `port`.
fn send_frames(port: u16, count: u64) {
    use frameloop::wire::native::{FLAG_LAST_PACKET, NativeHeader, encode};
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let payload = vec![0x11u8; 1024];
    for seq in 0..count {
        let h = NativeHeader {
            flags: FLAG_LAST_PACKET,
            stream_id: 7,
            packet_index: 0,
            frame_seq: seq,
            packet_count: 1,
            payload_offset: 0,
            frame_len: payload.len() as u32,
            payload_len: payload.len() as u32,
            sender_ts_ns: frameloop::clock::realtime_ns(),
        };
        sock.send_to(&encode(&h, &payload), ("127.0.0.1", port)).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Streams single-packet native frames to `port` every 2 ms until the
/// returned flag is set (send errors, after the appliance exits, ignored).
fn stream_frames(port: u16) -> (Arc<AtomicBool>, std::thread::JoinHandle<u64>) {
    use frameloop::wire::native::{FLAG_LAST_PACKET, NativeHeader, encode};
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = Arc::clone(&stop);
    let sender = std::thread::spawn(move || {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let payload = vec![0x22u8; 1024];
        let mut seq = 0;
        while !thread_stop.load(Ordering::Relaxed) {
            let h = NativeHeader {
                flags: FLAG_LAST_PACKET,
                stream_id: 3,
                packet_index: 0,
                frame_seq: seq,
                packet_count: 1,
                payload_offset: 0,
                frame_len: payload.len() as u32,
                payload_len: payload.len() as u32,
                sender_ts_ns: frameloop::clock::realtime_ns(),
            };
            let _ = sock.send_to(&encode(&h, &payload), ("127.0.0.1", port));
            seq += 1;
            std::thread::sleep(Duration::from_millis(2));
        }
        seq
    });
    (stop, sender)
}

/// Scrapes and parses the endpoint, retrying until `ok` holds (5 s).
fn scrape_until(
    addr: SocketAddr,
    ok: impl Fn(&service_support::Exposition) -> bool,
) -> service_support::Exposition {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, _, body) = http_get(addr, "/metrics").unwrap();
        assert_eq!(status, 200);
        let exp = parse_exposition(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
        if ok(&exp) || Instant::now() > deadline {
            return exp;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn ready_then_watchdog_then_clean_stop_with_flushed_log() {
    let mut app = Appliance::start(Duration::from_millis(400), &[]);
    app.wait_ready();
    // READY=1 promises a bound socket: the port is taken now.
    assert!(UdpSocket::bind(("127.0.0.1", app.udp_port)).is_err(), "ingest socket not bound at READY=1");

    send_frames(app.udp_port, 200);
    // Pings every 200 ms while the loop runs.
    let window = app.notify.collect(Duration::from_millis(1500));
    let pings = count_line(&window, "WATCHDOG=1");
    assert!(pings >= 3, "{pings} WATCHDOG=1 in 1.5 s with WATCHDOG_USEC=400000: {window:?}");

    let exp = scrape_until(app.metrics, |e| {
        e.value("frameloop_frames_total", &[("outcome", "processed")]).is_some_and(|v| v > 0.0)
    });
    assert_eq!(exp.value("frameloop_loop_launched", &[("backend", "host")]), Some(1.0), "{exp:?}");
    assert!(exp.value("frameloop_frames_total", &[("outcome", "processed")]).unwrap() > 0.0, "{exp:?}");
    let first = exp.value("frameloop_loop_iterations_total", &[]).unwrap();
    let later = scrape_until(app.metrics, |e| e.value("frameloop_loop_iterations_total", &[]) > Some(first));
    assert!(
        later.value("frameloop_loop_iterations_total", &[]).unwrap() > first,
        "iterations do not advance"
    );
    assert!(
        later.all("frameloop_latency_seconds").iter().any(|s| s.labels.contains_key("segment")),
        "no latency percentiles: {later:?}"
    );

    app.sigterm();
    let stopping = app.notify.wait_for("STOPPING=1", Duration::from_secs(5));
    assert!(stopping.is_ok(), "no STOPPING=1 after SIGTERM: {stopping:?}");
    let (status, stdout, stderr, hlog, _dir) = app.wait_exit();
    assert!(status.success(), "exit {status:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let log = std::fs::read_to_string(&hlog).unwrap_or_else(|e| panic!("{}: {e}\n{stderr}", hlog.display()));
    assert!(
        log.contains("#[StartTime: ") || log.contains("#[BaseTime: "),
        "no HdrHistogram log header:\n{log}"
    );
    let intervals =
        log.lines().filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("\"")).count();
    assert!(intervals >= 1, "no interval histogram in the log:\n{log}");
}

#[test]
fn a_scrape_right_after_a_burst_sees_the_final_count() {
    // A ring longer than the burst: on a loaded machine the chain may fall
    // behind, but no frame is dropped for a full ring.
    let mut app = Appliance::start_with_slots(Duration::from_secs(10), &[], 512);
    app.wait_ready();
    let burst = 300;
    send_frames(app.udp_port, burst);
    // Wait until the loop has run every frame (its own counters, read live
    // at each scrape: non-idle iterations), then give the result path the
    // time this test is about.
    let looped = |exp: &Exposition| {
        let all = exp.value("frameloop_loop_iterations_total", &[]).unwrap_or(0.0);
        all - exp.value("frameloop_loop_idle_iterations_total", &[]).unwrap_or(0.0)
    };
    let looped_by = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, _, body) = http_get(app.metrics, "/metrics").unwrap();
        let exp = parse_exposition(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
        if looped(&exp) >= burst as f64 {
            break;
        }
        assert!(Instant::now() < looped_by, "the loop never ran the whole burst\n{body}");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Far shorter than a fixed republish interval would need to be right.
    std::thread::sleep(Duration::from_millis(100));
    let (status, _, body) = http_get(app.metrics, "/metrics").unwrap();
    assert_eq!(status, 200);
    let exp = parse_exposition(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    assert_eq!(
        exp.value("frameloop_frames_total", &[("outcome", "processed")]),
        Some(burst as f64),
        "one scrape 100 ms after the loop ran the last frame\n{body}"
    );
    app.sigterm();
    let (status, _, stderr, _, _dir) = app.wait_exit();
    assert!(status.success(), "exit {status:?}\n{stderr}");
}

#[test]
fn stalled_pipeline_stops_the_watchdog_pings() {
    let stall_ms = 1500u64;
    let mut app = Appliance::start(
        Duration::from_millis(300),
        &[(frameloop::service::watchdog::TEST_STALL_ENV, &stall_ms.to_string())],
    );
    app.wait_ready();
    let ready_at = Instant::now();
    // Before the stall: pings every 150 ms.
    let before = app.notify.collect(Duration::from_millis(900));
    assert!(count_line(&before, "WATCHDOG=1") >= 2, "no pings before the stall: {before:?}");
    // Well after the stall begins (hook deadline + one check), none at all.
    let quiet_from = ready_at + Duration::from_millis(stall_ms + 600);
    let _ = app.notify.collect(quiet_from.saturating_duration_since(Instant::now()));
    let after = app.notify.collect(Duration::from_millis(1500));
    assert_eq!(count_line(&after, "WATCHDOG=1"), 0, "pings went on through a stalled pipeline: {after:?}");
    app.sigterm();
    let (status, _, stderr, _, _dir) = app.wait_exit();
    assert!(status.success(), "exit {status:?}\n{stderr}");
}

/// `thread` (a FRAMELOOP_TEST_STALL_THREAD value) hangs 1.5 s after it
/// starts while frames stream in: the pings go on before, stop after, the
/// log names `stage` as stalled, and SIGTERM still stops the appliance
/// cleanly (the hung thread ends with the shutdown).
fn a_hung_stage_stops_the_pings(thread: &str, stage: &str) {
    let stall_ms = 1500u64;
    let mut app = Appliance::start(
        Duration::from_millis(300),
        &[(TEST_STALL_THREAD_ENV, thread), (TEST_STALL_THREAD_AFTER_ENV, &stall_ms.to_string())],
    );
    app.wait_ready();
    let ready_at = Instant::now();
    let (stop_sending, sender) = stream_frames(app.udp_port);
    let before = app.notify.collect(Duration::from_millis(900));
    assert!(count_line(&before, "WATCHDOG=1") >= 2, "no pings before the {thread} hung: {before:?}");
    // The thread started before READY=1, so its hang began at the latest
    // here; one check later the pings stop.
    let quiet_from = ready_at + Duration::from_millis(stall_ms + 600);
    let _ = app.notify.collect(quiet_from.saturating_duration_since(Instant::now()));
    let after = app.notify.collect(Duration::from_millis(1500));
    assert_eq!(count_line(&after, "WATCHDOG=1"), 0, "pings went on with a hung {thread} thread: {after:?}");
    app.sigterm();
    let (status, _, stderr, _, _dir) = app.wait_exit();
    stop_sending.store(true, Ordering::Relaxed);
    let sent = sender.join().unwrap();
    assert!(sent > 500, "only {sent} frames streamed");
    assert!(status.success(), "exit {status:?}\n{stderr}");
    assert!(stderr.contains(&format!("the {thread} thread hangs now")), "the hook did not fire:\n{stderr}");
    assert!(
        stderr.contains(&format!("stalled stage: {stage} made no progress")),
        "the log does not name the stalled {stage}:\n{stderr}"
    );
}

#[test]
fn a_hung_result_thread_stops_the_watchdog_pings() {
    a_hung_stage_stops_the_pings("result", "result thread");
}

#[test]
fn a_hung_receiver_stops_the_watchdog_pings() {
    a_hung_stage_stops_the_pings("receiver", "receiver");
}

#[test]
fn example_config_validates() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/frameloop.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .arg("validate")
        .arg("--config")
        .arg(&example)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
