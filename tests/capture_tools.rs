//! Interoperability with the standard capture tools: a capture written by
//! `tcpdump -i lo -w` replays into frameloop, and tshark and tcpdump read
//! frameloop's pcapng without errors.
//!
//! A missing tool skips the test with a message, unless
//! `FRAMELOOP_REQUIRE_TOOLS` is set (CI sets it), which makes it a failure.

use frameloop::capture::replay::{DatagramFilter, fnv1a64, replay_in_process};
use frameloop::capture::{CaptureReader, DatagramTap, InProcessSetup, PcapngRecorder, SkipReason};
use frameloop::config::RingConfig;
use frameloop::ingest::ReassemblyConfig;
use frameloop::ops::{OpSpec, SampleFormat};
use frameloop::ring::layout::SLOT_COMPLETE;
use frameloop::wire::native;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The tool's path, or `None` (with a message) when it is missing and not required.
fn tool(name: &str) -> Option<&'static str> {
    let found = Command::new("sh").arg("-c").arg(format!("command -v {name}")).output();
    if found.is_ok_and(|o| o.status.success()) {
        return Some(Box::leak(name.to_string().into_boxed_str()));
    }
    if std::env::var_os("FRAMELOOP_REQUIRE_TOOLS").is_some() {
        panic!("{name} is not installed but FRAMELOOP_REQUIRE_TOOLS is set; run scripts/setup.sh");
    }
    eprintln!(
        "skipping: {name} is not installed (run scripts/setup.sh, or set FRAMELOOP_REQUIRE_TOOLS=1 to fail)"
    );
    None
}

fn frame_bytes(f: u64, len: u32) -> Vec<u8> {
    (0..len).map(|i| (i as u64 * 3 + f * 11) as u8).collect()
}

fn native_frames(frames: u64, frame_len: u32, mtu: u32) -> Vec<Vec<u8>> {
    (1..=frames).flat_map(|f| native::encode_frame(9, f, &frame_bytes(f, frame_len), mtu, 0)).collect()
}

fn setup() -> InProcessSetup {
    InProcessSetup {
        ring: RingConfig { slots: 8, slot_bytes: 16384, ..RingConfig::default() },
        chain: vec![OpSpec::Unpack { format: SampleFormat::U8, scale: 1.0, offset: 0.0 }, OpSpec::Stats],
        reassembly: ReassemblyConfig::default(),
        rtp: None,
    }
}

/// `tcpdump -i lo` writing UDP datagrams to one port into a file.
struct Tcpdump {
    child: std::process::Child,
    stderr: BufReader<std::process::ChildStderr>,
    first_line: String,
}

impl Tcpdump {
    /// Starts recording to `path` (whose directory must be writable by all:
    /// tcpdump drops its privileges before opening the file), or `None`
    /// (with a message) when tcpdump is missing or may not capture here.
    fn start(path: &std::path::Path, port: u16) -> Option<Self> {
        let tcpdump = tool("tcpdump")?;
        let mut child = Command::new(tcpdump)
            .args(["-i", "lo", "-n", "-U", "--immediate-mode", "-B", "32768", "-w"])
            .arg(path)
            .args(["udp", "and", "dst", "port", &port.to_string()])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // tcpdump says "listening on lo" once its capture is open.
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut first_line = String::new();
        stderr.read_line(&mut first_line).unwrap();
        if !first_line.contains("listening") {
            let _ = child.kill();
            let _ = child.wait();
            if std::env::var_os("FRAMELOOP_REQUIRE_TOOLS").is_some() {
                panic!("tcpdump could not capture on lo: {first_line}");
            }
            eprintln!("skipping: tcpdump cannot capture here (needs CAP_NET_RAW): {first_line}");
            return None;
        }
        // The filter may be attached just after the message; give it a moment.
        std::thread::sleep(Duration::from_millis(500));
        Some(Self { child, stderr, first_line })
    }

    /// Stops it and returns what it printed on stderr.
    fn stop(mut self) -> String {
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: plain kill(2) of the child this test started, by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait().unwrap();
        let mut text = self.first_line;
        std::io::Read::read_to_string(&mut self.stderr, &mut text).unwrap();
        assert!(status.success(), "tcpdump failed: {text}");
        text
    }
}

/// A directory tcpdump can write into after dropping its privileges.
fn open_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let open = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o777);
    std::fs::set_permissions(dir.path(), open).unwrap();
    dir
}

#[test]
fn tcpdump_capture_of_loopback_sender_replays() {
    let dir = open_tempdir();
    let path = dir.path().join("lo.pcap");
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = receiver.local_addr().unwrap().port();
    let Some(tcpdump) = Tcpdump::start(&path, port) else { return };
    let datagrams = native_frames(4, 6000, 1400);
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    for d in &datagrams {
        sender.send_to(d, ("127.0.0.1", port)).unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
    let rest = tcpdump.stop();
    let filter = DatagramFilter { ports: vec![port], streams: vec![9] };
    let s = replay_in_process(CaptureReader::open(&path).unwrap(), &filter, &setup()).unwrap();
    assert_eq!(s.datagrams, datagrams.len() as u64, "{}tcpdump: {rest}", s.render());
    assert_eq!(s.skipped(SkipReason::UnsupportedLinkType), 0);
    assert_eq!(s.processed.len(), 4);
    for (i, f) in s.processed.iter().enumerate() {
        assert_eq!((f.frame_seq, f.flags), (i as u64 + 1, SLOT_COMPLETE));
        assert_eq!(f.payload_digest, fnv1a64(&frame_bytes(i as u64 + 1, 6000)));
    }
    drop(receiver);
}

#[test]
fn tcpdump_capture_of_a_gso_send_replays_every_frame() {
    const FRAMES: u64 = 300;
    let dir = open_tempdir();
    let path = dir.path().join("gso.pcap");
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = receiver.local_addr().unwrap().port();
    let Some(tcpdump) = Tcpdump::start(&path, port) else { return };
    // Default send: 64 KiB frames in 8972-byte datagrams, UDP GSO when the
    // kernel has it, which tcpdump on lo records as one datagram per send.
    let out = Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .args(["send", "--to", &format!("127.0.0.1:{port}"), "--count", &FRAMES.to_string(), "--rate", "300"])
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let rest = tcpdump.stop();
    assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
    let sent = String::from_utf8_lossy(&out.stdout);
    let mut setup = setup();
    setup.ring.slot_bytes = 65536;
    let filter = DatagramFilter { ports: vec![port], streams: vec![] };
    let s = replay_in_process(CaptureReader::open(&path).unwrap(), &filter, &setup).unwrap();
    let what = format!("{}send: {sent}\ntcpdump: {rest}", s.render());
    assert_eq!(s.processed.len() as u64, FRAMES, "{what}");
    assert!(s.processed.iter().all(|f| f.flags & SLOT_COMPLETE != 0), "{what}");
    assert_eq!(s.datagrams, FRAMES * 8, "{what}");
    assert_eq!(s.unparsed_tails, 0, "{what}");
    if sent.contains("\"gso\": \"active\"") {
        assert!(s.packets < s.datagrams, "GSO sends are recorded coalesced: {what}");
    }
    drop(receiver);
}

fn frameloop_pcapng(dir: &std::path::Path) -> (std::path::PathBuf, usize) {
    let path = dir.join("fl.pcapng");
    let mut rec = PcapngRecorder::create(&path).unwrap();
    let datagrams = native_frames(3, 3000, 1400);
    let pairs: [(SocketAddr, SocketAddr); 2] = [
        ("10.1.2.3:40000".parse().unwrap(), "10.1.2.4:5000".parse().unwrap()),
        ("[fd00::1]:40000".parse().unwrap(), "[fd00::2]:5000".parse().unwrap()),
    ];
    for (i, d) in datagrams.iter().enumerate() {
        let (src, dst) = pairs[i % 2];
        rec.on_datagram(src, dst, d, 1_700_000_000_123_456_789 + i as u64);
    }
    rec.finish().unwrap();
    (path, datagrams.len())
}

#[test]
fn tshark_reads_frameloop_pcapng_without_errors() {
    let Some(tshark) = tool("tshark") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (path, n) = frameloop_pcapng(dir.path());
    let out = Command::new(tshark)
        .arg("-r")
        .arg(&path)
        .args([
            "-o",
            "udp.check_checksum:TRUE",
            "-T",
            "fields",
            "-e",
            "frame.time_epoch",
            "-e",
            "udp.dstport",
        ])
        .args(["-e", "udp.length", "-e", "_ws.expert.severity", "-e", "_ws.malformed"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "tshark failed: {stderr}");
    assert!(!stderr.to_lowercase().contains("error") && !stderr.contains("appears to"), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), n, "{stdout}");
    for (i, l) in lines.iter().enumerate() {
        let f: Vec<&str> = l.split('\t').collect();
        let ts = 1_700_000_000_123_456_789u64 + i as u64;
        assert_eq!(f[0], format!("{}.{:09}", ts / 1_000_000_000, ts % 1_000_000_000), "ns timestamps: {l}");
        assert_eq!(f[1], "5000", "{l}");
        assert!(f[3].is_empty() && f[4].is_empty(), "expert info or malformed packet: {l}");
    }
}

#[test]
fn tcpdump_reads_frameloop_pcapng() {
    let Some(tcpdump) = tool("tcpdump") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (path, n) = frameloop_pcapng(dir.path());
    let out = Command::new(tcpdump).arg("-n").arg("-r").arg(&path).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.lines().filter(|l| l.contains(".5000: UDP, length")).count(), n, "{stdout}");
}
