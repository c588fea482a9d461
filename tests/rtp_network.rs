//! The running appliance fed over loopback: GStreamer's `rtpvrawpay` streams
//! solid-white UYVY frames straight into `Appliance` configured with `[rtp]`
//! (every result checked: size and exact statistics), and `--record`
//! (`Appliance::start_recording`) writes what the receiver took, which an
//! in-process replay turns back into byte-identical frames.
//!
//! The GStreamer test is skipped with a message when gst-launch-1.0 is
//! missing, unless `FRAMELOOP_REQUIRE_TOOLS` is set (CI): then it fails.

use frameloop::app::{Appliance, Report, StartOptions};
use frameloop::capture::replay::fnv1a64;
use frameloop::capture::{InProcessSetup, ReplayArgs, replay};
use frameloop::config::{BackendChoice, Config};
use frameloop::ops::{OpSpec, SampleFormat};
use frameloop::ring::ResultRecord;
use frameloop::ring::layout::{RESULT_HAS_STATS, SLOT_COMPLETE};
use frameloop::rtp::{RtpConfig, Sampling};
use frameloop::wire::native::{self, NativeHeader};
use std::net::UdpSocket;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const W: u32 = 320;
const H: u32 = 240;
const FRAME_BYTES: usize = (W * H * 2) as usize;
/// 8-bit UYVY of BT.601 white: Cb Y Cr Y at limited-range levels.
const WHITE_PAIR: [u8; 4] = [0x80, 0xeb, 0x80, 0xeb];
const PATIENCE: Duration = Duration::from_secs(60);

/// One appliance at a time: two cores do not run two receivers and loops well.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn gst_available() -> bool {
    let ok = Command::new("gst-launch-1.0").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("FRAMELOOP_REQUIRE_TOOLS").is_none(),
            "gst-launch-1.0 is not installed but FRAMELOOP_REQUIRE_TOOLS is set; run scripts/setup.sh"
        );
        eprintln!("skipping: gst-launch-1.0 is not installed (run scripts/setup.sh)");
    }
    ok
}

/// Host backend on an ephemeral loopback port, `unpack u8` then `stats`.
fn config(slot_bytes: usize, rtp: Option<RtpConfig>) -> Config {
    let mut cfg = Config {
        backend: BackendChoice::Host,
        chain: vec![OpSpec::Unpack { format: SampleFormat::U8, scale: 1.0, offset: 0.0 }, OpSpec::Stats],
        rtp,
        ..Config::default()
    };
    cfg.ring.slots = 16;
    cfg.ring.slot_bytes = slot_bytes;
    cfg.ingest.bind = "127.0.0.1:0".into();
    cfg.ingest.reassembly.frame_timeout_ms = 1000;
    cfg.loop_.data_not_ready_sleep_interval_us = 100;
    assert!(cfg.problems().is_empty(), "{:?}", cfg.problems());
    cfg
}

/// A running appliance recording into `record`, and the results it produced.
fn start(cfg: &Config, record: &Path) -> (Appliance, Arc<Mutex<Vec<ResultRecord>>>) {
    let results = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&results);
    let opts = StartOptions {
        histogram_log: None,
        on_result: Some(Box::new(move |r: &ResultRecord| sink.lock().unwrap().push(*r))),
        ..Default::default()
    };
    let app = Appliance::start_recording(cfg, opts, Some(record)).expect("the appliance starts");
    (app, results)
}

/// Waits for `n` results, lets the loop drain and stops the appliance.
fn wait_and_stop(
    app: Appliance,
    results: &Mutex<Vec<ResultRecord>>,
    n: usize,
) -> (Report, Vec<ResultRecord>) {
    let deadline = Instant::now() + PATIENCE;
    while results.lock().unwrap().len() < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} results; ingest {:?}, rtp {:?}",
            results.lock().unwrap().len(),
            app.ingest(),
            app.rtp_counters()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(app.drain(PATIENCE));
    let report = app.stop().expect("the appliance stops");
    let all = results.lock().unwrap().clone();
    (report, all)
}

fn counter(counters: &[(&'static str, u64)], name: &str) -> u64 {
    counters.iter().find(|(n, _)| *n == name).map_or_else(|| panic!("no counter {name}"), |(_, v)| *v)
}

#[test]
fn gstreamer_rtp_video_feeds_the_running_appliance() {
    if !gst_available() {
        return;
    }
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let recording = dir.path().join("rtp.pcapng");
    let rtp = RtpConfig::inline(Sampling::Ycbcr422, 8, W, H);
    let cfg = config(FRAME_BYTES, Some(rtp));
    let (app, results) = start(&cfg, &recording);
    let port = app.local_addr().port();
    const FRAMES: usize = 5;
    let status = Command::new("gst-launch-1.0")
        .arg("-q")
        .args(["videotestsrc", &format!("num-buffers={FRAMES}"), "pattern=white", "!"])
        .args([&format!("video/x-raw,format=UYVY,width={W},height={H},framerate=30/1"), "!"])
        .args(["rtpvrawpay", "mtu=1400", "!", "udpsink", "host=127.0.0.1", &format!("port={port}")])
        .status()
        .expect("gst-launch-1.0 runs");
    assert!(status.success(), "gst-launch-1.0 failed");
    let (report, results) = wait_and_stop(app, &results, FRAMES);

    let rtp = report.rtp.as_ref().expect("the report has RTP counters");
    assert_eq!(counter(rtp, "frames_complete"), FRAMES as u64, "{rtp:?}");
    assert_eq!(counter(rtp, "seq_gap_packets") + counter(rtp, "duplicate"), 0, "{rtp:?}");
    assert_eq!(results.len(), FRAMES, "one result per frame");
    // Half the bytes are 0x80 (chroma) and half 0xeb (luma).
    let (lo, hi) = (f32::from(WHITE_PAIR[0]), f32::from(WHITE_PAIR[1]));
    let mean = (lo + hi) / 2.0;
    for r in &results {
        assert_eq!(r.slot_flags, SLOT_COMPLETE, "{r:?}");
        assert_ne!(r.result_flags & RESULT_HAS_STATS, 0);
        assert_eq!(r.output_len as usize, FRAME_BYTES, "one sample per byte");
        assert_eq!((r.min, r.max), (lo, hi), "{r:?}");
        assert!((r.mean - mean).abs() < 1e-3, "mean {} != {mean}", r.mean);
        let sum = f64::from(mean) * FRAME_BYTES as f64;
        assert!((f64::from(r.sum) - sum).abs() / sum < 1e-5, "sum {} != {sum}", r.sum);
    }
    let ts: Vec<u64> = results.iter().map(|r| r.frame_seq).collect();
    assert!(ts.windows(2).all(|w| w[1] > w[0]), "RTP timestamps increase: {ts:?}");

    // The recording replays in-process into the same white frames.
    let rec = report.recording.as_ref().expect("the report has the recording");
    assert_eq!(rec.error, None);
    assert_eq!(rec.datagrams, counter(rtp, "datagrams"));
    let mut args = ReplayArgs::new(&recording);
    args.max_rate = true;
    args.rtp = true;
    let settings = cfg.rtp.as_ref().unwrap().resolve().unwrap();
    let setup = InProcessSetup::from_config(&cfg, Some(settings));
    let summary = replay(&args, Some(&setup), &AtomicBool::new(false)).unwrap();
    let white: Vec<u8> = WHITE_PAIR.iter().copied().cycle().take(FRAME_BYTES).collect();
    assert_eq!(summary.processed.len(), FRAMES, "{}", summary.render());
    for (f, r) in summary.processed.iter().zip(&results) {
        assert_eq!((f.flags, f.frame_seq), (SLOT_COMPLETE, r.frame_seq));
        assert_eq!(f.payload_digest, fnv1a64(&white));
    }
}

/// Native datagrams of frame `seq` (`len` bytes, cut in 1000-byte payloads) and the frame.
fn native_frame(seq: u64, len: u32) -> (Vec<Vec<u8>>, Vec<u8>) {
    let frame: Vec<u8> = (0..len).map(|i| (i as u64 * 31 + seq * 7) as u8).collect();
    let (count, _, _) = native::packet_span(len, 1000, 0);
    let datagrams = (0..count)
        .map(|i| {
            let (_, off, plen) = native::packet_span(len, 1000, i);
            let h = NativeHeader {
                stream_id: 2,
                frame_seq: seq,
                packet_index: i,
                packet_count: count,
                payload_offset: off,
                frame_len: len,
                ..NativeHeader::default()
            };
            native::encode(&h, &frame[off as usize..(off + plen) as usize])
        })
        .collect();
    (datagrams, frame)
}

#[test]
fn a_recording_of_the_running_appliance_replays_byte_exact() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let recording = dir.path().join("native.pcapng");
    let cfg = config(8192, None);
    let (app, results) = start(&cfg, &recording);
    let to = app.local_addr();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    const FRAMES: u64 = 6;
    let mut frames = Vec::new();
    let mut datagrams = 0;
    for seq in 1..=FRAMES {
        let (packets, frame) = native_frame(seq, 2500 + seq as u32 * 100);
        for p in &packets {
            sender.send_to(p, to).unwrap();
        }
        datagrams += packets.len() as u64;
        frames.push(frame);
        std::thread::sleep(Duration::from_millis(2));
    }
    // A datagram from an unexpected sender that is no frameloop datagram:
    // recorded too, and counted as too short for a header by the replay.
    sender.send_to(b"not a frame", to).unwrap();
    let (report, results) = wait_and_stop(app, &results, FRAMES as usize);
    assert_eq!(report.ingest.frames_complete, FRAMES);
    assert_eq!(results.len() as u64, FRAMES);
    let rec = report.recording.as_ref().expect("the report has the recording");
    assert_eq!((rec.datagrams, rec.not_written, &rec.error), (datagrams + 1, 0, &None));
    assert!(
        report.render().contains(&format!("recorded {} datagrams", datagrams + 1)),
        "{}",
        report.render()
    );

    let mut args = ReplayArgs::new(&recording);
    args.max_rate = true;
    let setup = InProcessSetup::from_config(&cfg, None);
    let summary = replay(&args, Some(&setup), &AtomicBool::new(false)).unwrap();
    assert_eq!(summary.datagrams, datagrams + 1);
    assert_eq!(summary.processed.len() as u64, FRAMES, "{}", summary.render());
    for ((f, frame), r) in summary.processed.iter().zip(&frames).zip(&results) {
        assert_eq!((f.flags, f.payload_len as usize), (SLOT_COMPLETE, frame.len()));
        assert_eq!(f.payload_digest, fnv1a64(frame), "frame {} byte-exact", f.frame_seq);
        // The in-process chain agrees with what the appliance computed.
        let stats = f.output.stats.expect("the chain has stats");
        assert_eq!((r.frame_seq, r.min, r.max), (f.frame_seq, stats.min, stats.max));
        assert_eq!(r.output_len as usize, f.output.output_len);
    }
    let short = summary.ingest_counters.iter().find(|(n, _)| *n == "short_header").map(|(_, v)| *v);
    assert_eq!(short, Some(1), "{:?}", summary.ingest_counters);
}
