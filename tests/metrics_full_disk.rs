//! A full disk under `[metrics] frame_log` and `histogram_log` degrades the
//! run instead of failing it: every frame is processed, the lines and
//! intervals that do not fit are counted lost (in `/metrics` while it runs
//! and in the report), the frame log holds exactly the whole lines it says
//! it wrote and never part of one, writing resumes when space comes back,
//! and `frameloop run --json` prints the whole report and exits 0 (status 5
//! only with `metrics.fail_on_log_loss`), a disk full from the start too.
//!
//! The disk is a 1 MiB tmpfs where this process may mount one (root); where
//! it may not, the logs go to `/dev/full`, whose every write fails with
//! ENOSPC (the cases that need space to come back are then skipped).

mod appliance_support;

use appliance_support::{PATIENCE, Running, host_config, one_at_a_time, wait_for};
use frameloop::ops::default_chain;
use frameloop::service::LogMetrics;
use std::io::Write;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FRAME_BYTES: usize = 4096;

/// A 1 MiB tmpfs mounted for the test, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount() -> Option<Self> {
        let dir = tempfile::tempdir().ok()?;
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "frameloop-test", dir.path().to_str()?])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("cannot mount a tmpfs here: the logs go to /dev/full");
        }
        mounted.then_some(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the disk, leaving about `leave` bytes free; returns the filler.
    fn fill(&self, leave: u64) -> PathBuf {
        let filler = self.path().join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        loop {
            let stat = nix::sys::statvfs::statvfs(self.path()).unwrap();
            let free = stat.blocks_available() * stat.fragment_size();
            if free <= leave || f.write_all(&chunk).is_err() {
                break;
            }
        }
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.path()).status();
    }
}

/// Sends `frames` one-datagram frames of stream 1 from `first`, paced.
fn send_frames(to: std::net::SocketAddr, first: u64, frames: u64) {
    use frameloop::wire::native::{self, NativeHeader};
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    for seq in first..first + frames {
        let h = NativeHeader {
            stream_id: 1,
            frame_seq: seq,
            packet_count: 1,
            frame_len: FRAME_BYTES as u32,
            payload_len: FRAME_BYTES as u32,
            ..Default::default()
        };
        sock.send_to(&native::encode(&h, &[(seq % 251) as u8; FRAME_BYTES]), to).unwrap();
        if seq % 8 == 0 {
            std::thread::sleep(Duration::from_millis(4));
        }
    }
}

fn log_metrics(app: &Running, log: &str) -> LogMetrics {
    app.app.metrics_snapshot().logs.into_iter().find(|l| l.log == log).expect("the log's metrics")
}

#[test]
fn a_disk_that_fills_loses_whole_lines_counted_and_recovers() {
    let Some(disk) = SmallDisk::mount() else { return };
    let _serial = one_at_a_time();
    let filler = disk.fill(96 * 1024);
    let mut cfg = host_config(default_chain());
    cfg.ring.slot_bytes = FRAME_BYTES;
    cfg.ring.slots = 1024;
    cfg.metrics.frame_log = Some(disk.path().join("frames.csv"));
    cfg.metrics.histogram_log = Some(disk.path().join("latency.hlog"));
    let app = Running::start(&cfg);
    // About 120 bytes a line: 3,000 lines are several times the room left.
    const FIRST: u64 = 3000;
    send_frames(app.addr(), 0, FIRST);
    app.wait_results(FIRST as usize);
    let frames = wait_for(
        "frame-log lines counted lost",
        || Some(log_metrics(&app, "frame_log")).filter(|l| l.written + l.lost == FIRST),
        || format!("{:?}", app.app.metrics_snapshot().logs),
    );
    assert!(frames.lost > 0 && frames.failing, "{frames:?}");
    // An interval of the histogram log comes due each second: lost too.
    let intervals = wait_for(
        "a histogram-log interval counted lost",
        || Some(log_metrics(&app, "histogram_log")).filter(|l| l.lost > 0),
        || format!("{:?}", app.app.metrics_snapshot().logs),
    );
    assert!(intervals.failing, "{intervals:?}");

    // Space comes back: both logs write again.
    std::fs::remove_file(&filler).unwrap();
    const MORE: u64 = 100;
    send_frames(app.addr(), FIRST, MORE);
    app.wait_results((FIRST + MORE) as usize);
    let deadline = Instant::now() + PATIENCE;
    while log_metrics(&app, "frame_log").written + log_metrics(&app, "frame_log").lost < FIRST + MORE {
        assert!(Instant::now() < deadline, "{:?}", app.app.metrics_snapshot().logs);
        std::thread::sleep(Duration::from_millis(10));
    }
    let (report, results) = app.stop();

    assert_eq!(results.len() as u64, FIRST + MORE);
    assert_eq!(report.latency.frames.processed, FIRST + MORE, "the summary is whole");
    let f = report.frame_log.as_ref().expect("the frame log's report");
    assert_eq!(f.written + f.lost + f.dropped, FIRST + MORE, "{f:?}");
    assert_eq!(f.lost, frames.lost, "nothing lost once space came back: {f:?}");
    assert!(f.error.as_deref().is_some_and(|e| e.contains("No space left")), "{f:?}");
    let text = std::fs::read_to_string(disk.path().join("frames.csv")).unwrap();
    assert!(text.ends_with('\n'), "the file ends in a whole line");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], frameloop::metrics::frame_log::FRAME_LOG_HEADER);
    assert_eq!(lines.len() as u64 - 1, f.written, "written is exactly the whole lines in the file");
    assert!(lines[1..].iter().all(|l| l.split(',').count() == 13), "every line whole");
    let last_seq: u64 = lines.last().unwrap().split(',').nth(2).unwrap().parse().unwrap();
    assert_eq!(last_seq, FIRST + MORE - 1, "the last frame's line was written after the recovery");
    let h = report.histogram_log.as_ref().expect("the histogram log's report");
    assert!(h.intervals_lost >= 1 && h.intervals_written >= 1, "{h:?}");
    assert!(report.render().contains("lost (not written)"), "{}", report.render());
}

/// A config whose logs are on a disk with no room at all: in directory
/// `logs`, or `/dev/full` itself.
fn full_config(dir: &Path, logs: &Path, port: u16, fail: bool) -> PathBuf {
    let at = |name: &str| if logs == Path::new("/dev/full") { logs.to_path_buf() } else { logs.join(name) };
    let text = format!(
        "backend = \"host\"\n\
         [ring]\nslots = 512\nslot_bytes = {FRAME_BYTES}\n\
         [loop]\ndata_not_ready_sleep_interval_us = 200\n\
         [ingest]\nbind = \"127.0.0.1:{port}\"\n\
         [metrics]\nframe_log = {:?}\nhistogram_log = {:?}\nfail_on_log_loss = {fail}\n",
        at("frames.csv"),
        at("latency.hlog"),
    );
    let path = dir.join(format!("frameloop-{fail}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `frameloop run --json` on `cfg`, sends `frames` frames, stops it
/// with SIGTERM; returns its exit status, stdout and stderr.
fn run_json(cfg: &Path, port: u16, frames: u64) -> (Option<i32>, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .args(["run", "--json", "--duration", "60", "--config"])
        .arg(cfg)
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while UdpSocket::bind(("127.0.0.1", port)).is_ok() {
        assert!(child.try_wait().unwrap().is_none(), "the appliance ended early");
        assert!(Instant::now() < deadline, "the appliance never bound its port");
        std::thread::sleep(Duration::from_millis(20));
    }
    send_frames(format!("127.0.0.1:{port}").parse().unwrap(), 0, frames);
    std::thread::sleep(Duration::from_millis(1500));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn a_disk_full_from_the_start_warns_and_the_json_report_is_whole() {
    let _serial = one_at_a_time();
    let disk = SmallDisk::mount();
    let logs = match &disk {
        Some(d) => {
            d.fill(0);
            d.path().to_path_buf()
        }
        None => PathBuf::from("/dev/full"),
    };
    let dir = tempfile::tempdir().unwrap();
    const FRAMES: u64 = 200;
    for fail in [false, true] {
        let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let cfg = full_config(dir.path(), &logs, port, fail);
        let (status, stdout, stderr) = run_json(&cfg, port, FRAMES);
        assert_eq!(status, Some(if fail { 5 } else { 0 }), "{stderr}");
        assert!(stderr.contains("cannot write"), "said at start-up: {stderr}");
        let report: serde_json::Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        // Every frame that reached the loop is processed and its line lost.
        let processed = report["latency"]["frames"]["processed"].as_u64().unwrap_or(0);
        assert!(processed > FRAMES / 2, "{stdout}");
        assert_eq!(report["loop_stats"]["frames_processed"].as_u64(), Some(processed), "{stdout}");
        assert_eq!(report["frame_log"]["written"].as_u64(), Some(0), "{stdout}");
        assert_eq!(report["frame_log"]["lost"].as_u64(), Some(processed), "{stdout}");
        assert!(report["histogram_log"]["intervals_lost"].as_u64() >= Some(1), "{stdout}");
        if fail {
            assert!(stderr.contains("metrics.fail_on_log_loss"), "{stderr}");
        }
        if disk.is_some() {
            let frames = std::fs::read(logs.join("frames.csv")).unwrap();
            assert!(frames.is_empty(), "not even part of the header: {frames:?}");
        }
    }
}
