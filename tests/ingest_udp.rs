//! The UDP receiver over real loopback sockets: frames crafted with the
//! native encoder arrive byte-exact in the frame ring, and loss, reordering,
//! duplicates, every malformed kind and a disallowed source are counted while
//! the receiver keeps going, with UDP GRO on and off.

use frameloop::clock;
use frameloop::ingest::{
    IngestCounters, IngestSnapshot, Reassembler, ReassemblyConfig, UdpConfig, UdpReceiver,
};
use frameloop::ring::layout::{SLOT_COMPLETE, SLOT_INCOMPLETE, SLOT_TIMED_OUT, ring_bytes};
use frameloop::ring::{FrameRing, HostMemory, OverrunPolicy, RingReader, SlotHeader};
use frameloop::wire::native::{self, NativeHeader};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const SLOT_BYTES: usize = 65536;
/// Payload bytes per datagram for a 1,500-byte MTU (1,472 - 48 header bytes).
const MTU_PAYLOAD: u32 = 1472 - native::HEADER_LEN as u32;

/// A receiver running on its own thread, and the ring's consumer side.
struct Harness {
    addr: SocketAddr,
    gro_active: bool,
    counters: Arc<IngestCounters>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    reader: RingReader,
}

impl Harness {
    fn start(cfg: UdpConfig) -> Self {
        let mem = HostMemory::new(ring_bytes(64, SLOT_BYTES).unwrap()).unwrap();
        let ring = FrameRing::new(Box::new(mem), 64, SLOT_BYTES, OverrunPolicy::Every).unwrap();
        let reader = ring.reader().unwrap();
        let reassembler = Reassembler::new(cfg.reassembly.clone(), ring.writer().unwrap(), Arc::default());
        let mut receiver = UdpReceiver::bind(&cfg, reassembler).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (addr, gro_active, counters) =
            (receiver.local_addr(), receiver.gro_active(), Arc::clone(receiver.counters()));
        let thread = std::thread::spawn(move || receiver.run(&flag).unwrap());
        Harness { addr, gro_active, counters, stop, thread: Some(thread), reader }
    }

    /// Waits (up to 10 s) until the counters satisfy `done`.
    fn wait_for(&self, what: &str, done: impl Fn(&IngestSnapshot) -> bool) -> IngestSnapshot {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = self.counters.snapshot();
            if done(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}: {s:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Every frame published so far: header and payload copy.
    fn frames(&mut self) -> Vec<(SlotHeader, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(slot) = self.reader.claim() {
            let seq = slot.seq;
            out.push((slot.header, slot.payload.to_vec()));
            self.reader.finish(seq);
        }
        out
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let joined = t.join();
            if !std::thread::panicking() {
                joined.expect("receiver thread failed");
            }
        }
    }
}

fn config(gro: bool) -> UdpConfig {
    UdpConfig { bind: "127.0.0.1:0".into(), gro, ..UdpConfig::default() }
}

fn frame_bytes(len: usize, seed: u64) -> Vec<u8> {
    (0..len).map(|i| ((i as u64 * 131 + seed * 17) % 251) as u8 + 1).collect()
}

/// The datagrams of one frame, cut with `max_payload` bytes per packet.
fn datagrams(stream_id: u32, frame_seq: u64, frame: &[u8], max_payload: u32) -> Vec<Vec<u8>> {
    native::encode_frame(stream_id, frame_seq, frame, max_payload, 7_000 + frame_seq)
}

fn sender(local: &str) -> UdpSocket {
    UdpSocket::bind(local).unwrap()
}

fn send_all(socket: &UdpSocket, to: SocketAddr, datagrams: &[Vec<u8>]) {
    for d in datagrams {
        socket.send_to(d, to).unwrap();
    }
}

#[test]
fn frames_arrive_byte_exact_with_gro_on_and_off() {
    for gro in [true, false] {
        let mut h = Harness::start(config(gro));
        if !gro {
            assert!(!h.gro_active, "gro = false must not enable UDP_GRO");
        }
        eprintln!("gro requested: {gro}, active: {}", h.gro_active);
        let tx = sender("127.0.0.1:0");
        let frames: Vec<_> = (0..16).map(|s| frame_bytes(20_000 + s as usize * 997, s)).collect();
        let mut sent = 0;
        for (seq, f) in frames.iter().enumerate() {
            let d = datagrams(4, seq as u64, f, MTU_PAYLOAD);
            sent += d.len() as u64;
            send_all(&tx, h.addr, &d);
        }
        let s = h.wait_for("all frames", |s| s.frames_complete == 16);
        assert_eq!((s.datagrams, s.packets_accepted, s.datagrams_dropped()), (sent, sent, 0), "gro={gro}");
        let before = clock::realtime_ns();
        let got = h.frames();
        assert_eq!(got.len(), 16);
        for (seq, ((hdr, payload), want)) in got.iter().zip(&frames).enumerate() {
            assert_eq!((hdr.stream_id, hdr.frame_seq, hdr.flags), (4, seq as u64, SLOT_COMPLETE));
            assert_eq!(hdr.sender_ts_ns, 7_000 + seq as u64);
            assert_eq!(hdr.packets_received, hdr.packets_expected);
            assert!(hdr.first_rx_ns <= hdr.last_rx_ns && hdr.last_rx_ns <= hdr.published_ns + 1_000_000);
            assert!(before - hdr.first_rx_ns < 10_000_000_000, "receive time is not CLOCK_REALTIME");
            assert_eq!(payload, want, "frame {seq} with gro={gro}");
        }
    }
}

/// Sends `buf` as one GSO send of `segment`-byte datagrams; false if the
/// kernel does not offer UDP_SEGMENT.
fn send_segmented(socket: &UdpSocket, to: SocketAddr, buf: &[u8], segment: u16) -> bool {
    use std::os::fd::AsRawFd;
    let value = segment as libc::c_int;
    // SAFETY: `value` is a live c_int and its size is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0 && socket.send_to(buf, to).is_ok()
}

#[test]
fn gso_sends_are_split_back_into_datagrams_with_gro_and_without() {
    for gro in [true, false] {
        let mut h = Harness::start(config(gro));
        let tx = sender("127.0.0.1:0");
        let frame = frame_bytes(30_000, 3);
        let d = datagrams(1, 0, &frame, MTU_PAYLOAD);
        let coalesced: Vec<u8> = d.concat();
        if !send_segmented(&tx, h.addr, &coalesced, 1472) {
            eprintln!("UDP_SEGMENT not offered by this kernel; GSO path not exercised");
            return;
        }
        let s = h.wait_for("the GSO frame", |s| s.frames_complete == 1);
        assert_eq!(s.datagrams, d.len() as u64);
        if h.gro_active {
            assert_eq!(s.gro_segments, d.len() as u64, "a GRO socket gets the coalesced buffer");
        } else {
            assert_eq!(s.gro_segments, 0, "without GRO the kernel splits before delivery");
        }
        assert_eq!(h.frames()[0].1, frame);
    }
}

#[test]
fn loss_reordering_and_duplicates_are_handled_and_counted() {
    let cfg = UdpConfig {
        reassembly: ReassemblyConfig { frame_timeout_ms: 50, ..Default::default() },
        ..config(true)
    };
    let mut h = Harness::start(cfg);
    let tx = sender("127.0.0.1:0");
    let frames: Vec<_> = (0..3).map(|s| frame_bytes(10_000, s)).collect();
    let packets: Vec<_> = frames.iter().enumerate().map(|(s, f)| datagrams(2, s as u64, f, 1000)).collect();
    // Frame 0 reversed with one duplicate; frame 1 loses packet 4; frame 2
    // interleaved with frame 1's tail.
    let mut schedule: Vec<&Vec<u8>> = packets[0].iter().rev().collect();
    schedule.insert(3, &packets[0][5]);
    for i in 0..10 {
        if i != 4 {
            schedule.push(&packets[1][i]);
        }
        schedule.push(&packets[2][9 - i]);
    }
    for d in &schedule {
        tx.send_to(d, h.addr).unwrap();
    }
    let s = h.wait_for("the lossy frame to time out", |s| s.frames_timed_out == 1 && s.frames_complete == 2);
    assert_eq!((s.datagrams, s.duplicate, s.frames_incomplete), (schedule.len() as u64, 1, 1));
    let got = h.frames();
    let by_seq = |seq: u64| got.iter().find(|(hdr, _)| hdr.frame_seq == seq).unwrap();
    assert_eq!((by_seq(0).0.flags, &by_seq(0).1), (SLOT_COMPLETE, &frames[0]));
    assert_eq!((by_seq(2).0.flags, &by_seq(2).1), (SLOT_COMPLETE, &frames[2]));
    let (lossy, payload) = by_seq(1);
    assert_eq!(lossy.flags, SLOT_INCOMPLETE | SLOT_TIMED_OUT);
    assert_eq!((lossy.packets_expected, lossy.packets_received), (10, 9));
    assert!(payload[4000..5000].iter().all(|&b| b == 0));
    assert_eq!((&payload[..4000], &payload[5000..]), (&frames[1][..4000], &frames[1][5000..]));
    // The lost packet turning up now is late; the receiver goes on.
    tx.send_to(&packets[1][4], h.addr).unwrap();
    let s = h.wait_for("the late packet", |s| s.late == 1);
    assert_eq!(s.datagrams_accounted(), s.datagrams);
}

#[test]
fn malformed_datagrams_are_counted_by_kind_and_the_receiver_keeps_going() {
    let mut h = Harness::start(config(true));
    let tx = sender("127.0.0.1:0");
    let frame = frame_bytes(2000, 9);
    let good = datagrams(5, 1, &frame, 1000);
    let header = native::parse(&good[0]).unwrap().0;
    let with = |f: &dyn Fn(&mut NativeHeader), len: usize| {
        let mut hd = header;
        f(&mut hd);
        native::encode(&hd, &vec![0u8; len])
    };
    let patched = |at: usize, byte: u8| {
        let mut d = good[0].clone();
        d[at] = byte;
        d
    };
    let mut bad_index = good[0].clone();
    bad_index[12..16].copy_from_slice(&2u32.to_le_bytes());
    let mut outside = good[0].clone();
    outside[28..32].copy_from_slice(&1500u32.to_le_bytes());
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("short_header", good[0][..30].to_vec()),
        ("bad_magic", patched(1, b'x')),
        ("bad_version", patched(4, 0)),
        ("bad_header_len", patched(6, 4)),
        ("truncated", good[0][..good[0].len() - 10].to_vec()),
        ("bad_packet_index", bad_index),
        ("payload_outside_frame", outside),
        ("bad_packet_count", with(&|h| (h.frame_seq, h.frame_len, h.packet_count) = (50, 3, 4), 0)),
        ("layout_mismatch", with(&|h| (h.frame_seq, h.payload_offset) = (51, 500), 1000)),
        ("frame_too_large", with(&|h| (h.frame_seq, h.frame_len, h.packet_count) = (52, 100_000, 100), 1000)),
    ];
    // The good frame's first packet, then mismatching and duplicate packets of
    // the same frame, then its second packet.
    let stateful: Vec<(&str, Vec<u8>)> = vec![
        ("duplicate", good[0].clone()),
        ("packet_count_mismatch", with(&|h| (h.packet_index, h.packet_count) = (2, 3), 0)),
        ("frame_len_mismatch", with(&|h| (h.packet_index, h.frame_len) = (1, 1999), 999)),
    ];
    for (_, d) in &cases {
        tx.send_to(d, h.addr).unwrap();
    }
    tx.send_to(&good[0], h.addr).unwrap();
    for (_, d) in &stateful {
        tx.send_to(d, h.addr).unwrap();
    }
    tx.send_to(&good[1], h.addr).unwrap();
    let total = (cases.len() + stateful.len() + 2) as u64;
    // `datagrams` counts a datagram as it is read, before the reassembler
    // accepts or drops it and publishes its frame: wait for all of that.
    let s = h.wait_for("every datagram handled and the frame published", |s| {
        s.datagrams == total
            && s.datagrams_accounted() == total
            && s.frames_complete + s.frames_incomplete >= 1
    });
    for (kind, _) in cases.iter().chain(&stateful) {
        assert_eq!(s.get(kind), Some(1), "{kind}: {s:?}");
    }
    assert_eq!((s.dropped_frame_packets, s.packets_accepted, s.frames_complete), (1, 2, 1));
    assert_eq!(s.datagrams_accounted(), total);
    let got = h.frames();
    assert_eq!((got.len(), &got[0].1), (1, &frame));
}

#[test]
fn sources_outside_the_allowlist_are_dropped() {
    let cfg = UdpConfig { allow: vec!["127.0.0.2/32".into(), "10.0.0.0/8".into()], ..config(false) };
    let mut h = Harness::start(cfg);
    let frame = frame_bytes(5000, 1);
    let d = datagrams(1, 0, &frame, MTU_PAYLOAD);
    send_all(&sender("127.0.0.1:0"), h.addr, &d);
    let s = h.wait_for("the refused datagrams", |s| s.source_not_allowed == d.len() as u64);
    assert_eq!(s.frames_started, 0);
    send_all(&sender("127.0.0.2:0"), h.addr, &d);
    let s = h.wait_for("the allowed frame", |s| s.frames_complete == 1);
    assert_eq!(s.datagrams_accounted(), s.datagrams);
    assert_eq!(h.frames()[0].1, frame);
}

#[test]
fn bind_reports_a_bad_address_and_a_busy_port() {
    let reassembler = || {
        let mem = HostMemory::new(ring_bytes(2, 64).unwrap()).unwrap();
        let ring = FrameRing::new(Box::new(mem), 2, 64, OverrunPolicy::Every).unwrap();
        Reassembler::new(ReassemblyConfig::default(), ring.writer().unwrap(), Arc::default())
    };
    let cfg = UdpConfig { bind: "localhost".into(), ..config(true) };
    let err = UdpReceiver::bind(&cfg, reassembler()).err().expect("not an address");
    assert!(err.to_string().contains("ingest.bind"), "{err}");
    let taken = UdpSocket::bind("127.0.0.1:0").unwrap();
    let cfg = UdpConfig { bind: taken.local_addr().unwrap().to_string(), reuse_port: false, ..config(true) };
    let err = UdpReceiver::bind(&cfg, reassembler()).err().expect("port already bound");
    assert!(err.to_string().contains("ingest.bind"), "{err}");
}
