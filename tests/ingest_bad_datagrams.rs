//! A running appliance (host backend, loopback UDP) fed malformed datagrams
//! and restarted senders: each bad datagram is counted as a drop of its kind
//! and ingest goes on, and a sender whose frame sequence starts over has all
//! its frames processed.

mod appliance_support;

use appliance_support::{Running, check_sequences, host_config, one_at_a_time};
use frameloop::ops::default_chain;
use frameloop::sender::{GsoMode, Pattern, SendArgs, run_sender};
use frameloop::wire::native::{self, NativeHeader};
use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

const FRAME_BYTES: usize = 4096;
const MAX_PAYLOAD: u32 = 1024;

/// A valid single datagram (packet 0 of a 4-packet frame) to mangle.
fn good_header() -> NativeHeader {
    NativeHeader {
        stream_id: 9,
        packet_index: 0,
        frame_seq: 1000,
        packet_count: 4,
        payload_offset: 0,
        frame_len: FRAME_BYTES as u32,
        payload_len: MAX_PAYLOAD,
        ..Default::default()
    }
}

/// The malformed datagrams, each with the drop counter it must land in.
fn bad_datagrams() -> Vec<(&'static str, Vec<u8>)> {
    let good = native::encode(&good_header(), &[7; MAX_PAYLOAD as usize]);
    let set = |at: usize, bytes: &[u8]| {
        let mut d = good.clone();
        d[at..at + bytes.len()].copy_from_slice(bytes);
        d
    };
    // The datagram of the issue: valid magic and version, header_len 200, no payload.
    let mut lone_header = native::encode(&NativeHeader { packet_count: 1, ..Default::default() }, &[]);
    lone_header[6..8].copy_from_slice(&200u16.to_le_bytes());
    vec![
        ("bad_header_len", lone_header),
        ("short_header", good[..30].to_vec()),
        ("bad_header_len", set(6, &(good.len() as u16 + 1).to_le_bytes())),
        ("bad_header_len", set(6, &u16::MAX.to_le_bytes())),
        ("truncated", set(36, &(MAX_PAYLOAD + 100).to_le_bytes())),
        ("truncated", set(36, &u32::MAX.to_le_bytes())),
        ("bad_packet_index", set(12, &4u32.to_le_bytes())),
        ("bad_packet_index", set(12, &u32::MAX.to_le_bytes())),
        ("bad_magic", set(0, b"XXXX")),
        // Huge frame_len on a regular cut: a frame larger than any slot.
        ("dropped_frame_packets", {
            let h = NativeHeader {
                frame_seq: 2000,
                frame_len: 1 << 24,
                packet_count: (1 << 24) / MAX_PAYLOAD,
                ..good_header()
            };
            native::encode(&h, &[7; MAX_PAYLOAD as usize])
        }),
        // Huge frame_len that the packet count does not cut regularly.
        ("layout_mismatch", set(32, &u32::MAX.to_le_bytes())),
        // More packets than the configured cap (the bitmap stays bounded).
        ("bad_packet_count", {
            let h =
                NativeHeader { frame_seq: 3000, frame_len: 1 << 20, packet_count: 1 << 20, ..good_header() };
            native::encode(&h, &[7])
        }),
    ]
}

/// Sends frames `seqs` of `stream` whole, pacing a little so that loopback drops nothing.
fn send_frames(sock: &UdpSocket, to: SocketAddr, stream: u32, seqs: std::ops::Range<u64>) -> u64 {
    let mut datagrams = 0;
    for seq in seqs {
        let frame: Vec<u8> = (0..FRAME_BYTES).map(|i| (i as u64 ^ seq) as u8).collect();
        for d in native::encode_frame(stream, seq, &frame, MAX_PAYLOAD, 1) {
            sock.send_to(&d, to).unwrap();
            datagrams += 1;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    datagrams
}

fn config() -> frameloop::config::Config {
    let mut cfg = host_config(default_chain());
    cfg.ring.slot_bytes = FRAME_BYTES;
    cfg.ring.slots = 256;
    cfg
}

#[test]
fn malformed_datagrams_are_counted_by_kind_and_ingest_goes_on() {
    let _serial = one_at_a_time();
    let app = Running::start(&config());
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let bad = bad_datagrams();
    for (_, d) in &bad {
        sock.send_to(d, app.addr()).unwrap();
    }
    app.wait_ingest("every bad datagram", |s| s.datagrams == bad.len() as u64);
    const FRAMES: u64 = 20;
    let good = send_frames(&sock, app.addr(), 1, 0..FRAMES);
    app.wait_results(FRAMES as usize);
    let (report, results) = app.stop();

    let s = &report.ingest;
    let mut want: BTreeMap<&str, u64> = BTreeMap::new();
    for (kind, _) in &bad {
        *want.entry(kind).or_default() += 1;
    }
    for (kind, n) in &want {
        assert_eq!(s.get(kind), Some(*n), "{kind}: {s:?}");
    }
    assert_eq!(s.frame_too_large, 1, "{s:?}");
    assert_eq!(s.datagrams_dropped(), bad.len() as u64, "only the bad datagrams are dropped: {s:?}");
    assert_eq!((s.datagrams, s.packets_accepted), (bad.len() as u64 + good, good), "{s:?}");
    assert_eq!((s.frames_started, s.frames_complete, s.frames_incomplete), (FRAMES, FRAMES, 0), "{s:?}");
    assert_eq!(results.len() as u64, FRAMES);
    check_sequences(&results);
    let seqs: Vec<_> = results.iter().map(|r| (r.stream_id, r.frame_seq)).collect();
    assert_eq!(seqs, (0..FRAMES).map(|q| (1, q)).collect::<Vec<_>>());
    assert_eq!(report.loop_stats.frames_processed, FRAMES);
}

/// Runs the real sender, as `frameloop send --count <count>` would.
fn run_send(to: SocketAddr, count: u64) {
    let args = SendArgs {
        to: to.to_string(),
        rate: 500.0,
        frame_bytes: FRAME_BYTES as u64,
        packet_bytes: MAX_PAYLOAD as usize + native::HEADER_LEN,
        count: Some(count),
        duration: None,
        streams: 1,
        pattern: Pattern::Counter,
        gso: GsoMode::Auto,
        pacing: Default::default(),
        catch_up: frameloop::sender::DEFAULT_CATCH_UP,
        bind: None,
        link_gbps: None,
    };
    let stats = run_sender(&args, &AtomicBool::new(false), |_| {}).expect("the sender runs");
    assert_eq!(stats.frames, count);
}

#[test]
fn a_restarted_sender_has_all_its_frames_processed() {
    let _serial = one_at_a_time();
    let app = Running::start(&config());
    const FRAMES: u64 = 50;
    run_send(app.addr(), FRAMES);
    app.wait_results(FRAMES as usize);
    // The sender restarts: its sequence begins at 0 again.
    run_send(app.addr(), FRAMES);
    app.wait_results(2 * FRAMES as usize);
    let (report, results) = app.stop();

    let s = &report.ingest;
    assert_eq!((s.stream_restarts, s.late, s.datagrams_dropped()), (1, 0, 0), "{s:?}");
    assert_eq!((s.frames_complete, s.frames_incomplete), (2 * FRAMES, 0), "{s:?}");
    let mut per_key: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    for r in &results {
        *per_key.entry((r.stream_id, r.frame_seq)).or_default() += 1;
    }
    assert_eq!(per_key.len() as u64, FRAMES, "{per_key:?}");
    assert!(per_key.values().all(|&n| n == 2), "each sequence processed once per run: {per_key:?}");
    assert_eq!(report.loop_stats.frames_processed, 2 * FRAMES);
}
