//! The whole appliance on the host backend under bad traffic, sent as
//! crafted datagrams from plain loopback sockets: lost, reordered and
//! duplicated packets and every malformed kind are counted by name, frames
//! with lost packets are processed flagged incomplete with zeros where the
//! packets were missing, and good frames after the garbage come out right.

mod appliance_support;

use appliance_support::{
    Running, check_result, check_sequences, check_timestamps, host_config, one_at_a_time, reference_chain,
};
use frameloop::clock;
use frameloop::config::Config;
use frameloop::ingest::IngestSnapshot;
use frameloop::ops::{OpSpec, SampleFormat};
use frameloop::ring::ResultRecord;
use frameloop::ring::layout::{SLOT_COMPLETE, SLOT_INCOMPLETE, SLOT_TIMED_OUT};
use frameloop::sender::FrameGeometry;
use frameloop::wire::native::{self, HEADER_LEN, NativeHeader};
use std::net::{SocketAddr, UdpSocket};

/// Every test frame is 1000 bytes cut into 10 packets of 100.
const FRAME_LEN: u32 = 1000;
const STRIDE: u32 = 100;
const PACKETS: u32 = FRAME_LEN / STRIDE;
/// Slot capacity: frames up to 4 KiB fit, larger ones are dropped whole.
const SLOT_BYTES: usize = 4096;
/// Samples of the "hot" packet lie above this level, all others below it.
const LEVEL: f32 = 150.0;

/// u8 samples, stats and threshold: the sum and minimum show zeroed
/// (lost) ranges, and the threshold's first index shows where the hot
/// packet landed, so a misplaced packet changes the result.
fn chain() -> Vec<OpSpec> {
    vec![
        OpSpec::Unpack { format: SampleFormat::U8, scale: 1.0, offset: 0.0 },
        OpSpec::Stats,
        OpSpec::Threshold { level: LEVEL },
    ]
}

fn config() -> Config {
    let mut cfg = host_config(chain());
    cfg.ring.slot_bytes = SLOT_BYTES;
    // Incomplete frames that nothing pushes out are published after this.
    cfg.ingest.reassembly.frame_timeout_ms = 500;
    cfg
}

/// The payload of frame (`stream`, `seq`): every byte in 1..=97 except in
/// packet `seq % PACKETS`, whose bytes lie in 200..250 (above [`LEVEL`]).
fn frame_payload(stream: u32, seq: u64) -> Vec<u8> {
    let hot = (seq % PACKETS as u64) as usize;
    (0..FRAME_LEN as usize)
        .map(|i| {
            if i / STRIDE as usize == hot {
                200 + (i % 50) as u8
            } else {
                1 + ((i * 7 + seq as usize * 13 + stream as usize * 29) % 97) as u8
            }
        })
        .collect()
}

fn geometry() -> FrameGeometry {
    FrameGeometry::new(FRAME_LEN as u64, STRIDE as usize + HEADER_LEN).unwrap()
}

/// The header of packet `index` of frame (`stream`, `seq`) on the regular cut.
fn header(stream: u32, seq: u64, index: u32) -> NativeHeader {
    geometry().header(stream, seq, index, clock::realtime_ns())
}

/// Packet `index` of frame (`stream`, `seq`), as the sender would send it.
fn packet(stream: u32, seq: u64, index: u32) -> Vec<u8> {
    let (offset, len) = geometry().span(index);
    let payload = frame_payload(stream, seq);
    native::encode(&header(stream, seq, index), &payload[offset as usize..(offset + len) as usize])
}

/// `payload` with the byte ranges of the packets in `lost` zeroed, as the
/// reassembler must leave an incomplete frame.
fn with_lost(mut payload: Vec<u8>, lost: &[u32]) -> Vec<u8> {
    for &index in lost {
        let (offset, len) = geometry().span(index);
        payload[offset as usize..(offset + len) as usize].fill(0);
    }
    payload
}

/// A plain UDP socket that counts what it sends.
struct Source {
    socket: UdpSocket,
    to: SocketAddr,
    sent: u64,
}

impl Source {
    fn new(local: &str, to: SocketAddr) -> Self {
        Source { socket: UdpSocket::bind(local).unwrap(), to, sent: 0 }
    }

    fn send(&mut self, datagram: &[u8]) {
        self.socket.send_to(datagram, self.to).unwrap();
        self.sent += 1;
    }

    /// Sends packets `indices` of frame (`stream`, `seq`) in that order.
    fn send_frame(&mut self, stream: u32, seq: u64, indices: impl IntoIterator<Item = u32>) {
        for index in indices {
            self.send(&packet(stream, seq, index));
        }
    }
}

/// Waits until every datagram sent has been read and accounted for.
fn wait_handled(app: &Running, sent: u64) -> IngestSnapshot {
    app.wait_ingest(&format!("{sent} datagrams handled"), |s| {
        s.datagrams == sent && s.datagrams_accounted() == sent
    })
}

/// Checks a result against its frame with the packets in `lost` missing.
fn check_frame(r: &ResultRecord, lost: &[u32]) {
    let want = reference_chain(&chain(), &with_lost(frame_payload(r.stream_id, r.frame_seq), lost));
    check_result(r, &want);
    check_timestamps(r);
    let flags = r.slot_flags & (SLOT_COMPLETE | SLOT_INCOMPLETE);
    if lost.is_empty() {
        assert_eq!(flags, SLOT_COMPLETE, "frame {} is complete", r.frame_seq);
        assert!(r.min >= 1.0, "a complete frame has no zero byte");
    } else {
        assert_eq!(flags, SLOT_INCOMPLETE, "frame {} is flagged incomplete", r.frame_seq);
        assert_eq!(r.min, 0.0, "lost ranges of frame {} read as zeros", r.frame_seq);
    }
}

/// The result of frame (`stream`, `seq`); fails if there is not exactly one.
fn result_of(results: &[ResultRecord], stream: u32, seq: u64) -> ResultRecord {
    let found: Vec<_> = results.iter().filter(|r| (r.stream_id, r.frame_seq) == (stream, seq)).collect();
    assert_eq!(found.len(), 1, "one result for stream {stream} frame {seq}: {found:?}");
    *found[0]
}

#[test]
fn frames_with_lost_packets_are_processed_incomplete_with_zeros_where_packets_were_lost() {
    let _serial = one_at_a_time();
    let app = Running::start(&config());
    let mut tx = Source::new("127.0.0.1:0", app.addr());
    // Lost packets by frame; the last frame has nothing after it to push
    // it out, so it can only be published by its timeout.
    let losses: [&[u32]; 8] = [&[], &[3], &[], &[0, 9], &[], &[1, 2, 3, 4, 5, 6, 7, 8, 9], &[], &[4]];
    for (seq, lost) in losses.iter().enumerate() {
        tx.send_frame(0, seq as u64, (0..PACKETS).filter(|i| !lost.contains(i)));
    }
    let results = app.wait_results(losses.len());
    let ingest = wait_handled(&app, tx.sent);
    let (report, _) = app.stop();

    check_sequences(&results);
    for (seq, lost) in losses.iter().enumerate() {
        check_frame(&result_of(&results, 0, seq as u64), lost);
    }
    let last = result_of(&results, 0, 7);
    assert_eq!(last.slot_flags & SLOT_TIMED_OUT, SLOT_TIMED_OUT, "the last frame went stale");
    let timed_out = results.iter().filter(|r| r.slot_flags & SLOT_TIMED_OUT != 0).count() as u64;
    assert_eq!(ingest.frames_timed_out, timed_out);
    assert_eq!((ingest.frames_started, ingest.frames_complete, ingest.frames_incomplete), (8, 4, 4));
    assert_eq!(ingest.packets_accepted, tx.sent);
    assert_eq!(ingest.datagrams_dropped(), 0, "{ingest:?}");
    let frames = &report.latency.frames;
    assert_eq!((frames.processed, frames.complete, frames.incomplete), (8, 4, 4));
}

#[test]
fn reordered_and_interleaved_packets_assemble_exactly() {
    let _serial = one_at_a_time();
    let app = Running::start(&config());
    let mut tx = Source::new("127.0.0.1:0", app.addr());
    // Four frames of two streams at once (the default frames in flight),
    // each in its own scrambled order, packets of all four interleaved.
    let frames = [(0u32, 10u64), (1, 10), (0, 11), (1, 11)];
    // Step `s` sends packet `(3 * s + 7 * f) % 10` of frame `f` (3 is prime
    // to 10, so each frame gets every index once), last frame first.
    for step in (0..PACKETS).rev() {
        for (f, &(stream, seq)) in (0..frames.len() as u32).zip(&frames).rev() {
            tx.send_frame(stream, seq, [(step * 3 + f * 7) % PACKETS]);
        }
    }
    // Then a frame whose last packet comes first and first packet last.
    tx.send_frame(0, 12, (0..PACKETS).rev());
    let results = app.wait_results(frames.len() + 1);
    let ingest = wait_handled(&app, tx.sent);
    app.stop();

    check_sequences(&results);
    for &(stream, seq) in frames.iter().chain(&[(0, 12)]) {
        check_frame(&result_of(&results, stream, seq), &[]);
    }
    assert_eq!((ingest.frames_complete, ingest.frames_incomplete), (5, 0));
    assert_eq!((ingest.packets_accepted, ingest.datagrams_dropped()), (tx.sent, 0));
    // Ring order is the order of each frame's first packet: (1, 11) came first.
    let order: Vec<(u32, u64)> = results.iter().map(|r| (r.stream_id, r.frame_seq)).collect();
    assert_eq!(order, [(1, 11), (0, 11), (1, 10), (0, 10), (0, 12)]);
}

#[test]
fn duplicate_and_late_packets_are_counted_and_the_first_copy_kept() {
    let _serial = one_at_a_time();
    let app = Running::start(&config());
    let mut tx = Source::new("127.0.0.1:0", app.addr());
    // Packets 2 and 5 twice, the second copy of 5 with other bytes.
    let mut forged = header(3, 40, 5);
    forged.payload_len = STRIDE;
    for index in 0..PACKETS {
        tx.send_frame(3, 40, [index]);
        match index {
            2 => tx.send_frame(3, 40, [2]),
            5 => tx.send(&native::encode(&forged, &[0xEE; STRIDE as usize])),
            _ => {}
        }
    }
    app.wait_results(1);
    // The frame is published: another copy of one of its packets is late.
    tx.send_frame(3, 40, [7]);
    tx.send_frame(3, 41, 0..PACKETS);
    let results = app.wait_results(2);
    let ingest = wait_handled(&app, tx.sent);
    app.stop();

    check_sequences(&results);
    check_frame(&result_of(&results, 3, 40), &[]);
    check_frame(&result_of(&results, 3, 41), &[]);
    assert_eq!((ingest.duplicate, ingest.late), (2, 1), "{ingest:?}");
    assert_eq!(ingest.packets_accepted, 2 * PACKETS as u64);
    assert_eq!(ingest.datagrams_dropped(), 3, "{ingest:?}");
    assert_eq!((ingest.frames_complete, ingest.frames_incomplete), (2, 0));
}

/// A good datagram of frame (`stream`, `seq`) with `edit` applied to its bytes.
fn mangled(stream: u32, seq: u64, index: u32, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut d = packet(stream, seq, index);
    edit(&mut d);
    d
}

/// A datagram with header `h` (as given, not on the frame's cut) and
/// `h.payload_len` bytes of 0xEE, so any write of it into a slot shows.
fn forged(h: NativeHeader) -> Vec<u8> {
    native::encode(&h, &vec![0xEE; h.payload_len as usize])
}

#[test]
fn every_malformed_kind_is_counted_by_name_and_the_appliance_keeps_going() {
    let _serial = one_at_a_time();
    let app = Running::start(&config());
    let mut tx = Source::new("127.0.0.1:0", app.addr());
    // Frame 100 starts normally; the garbage comes while it is in flight.
    tx.send_frame(0, 100, [0]);
    let good = header(0, 100, 1);
    let garbage: Vec<(&str, Vec<u8>)> = vec![
        ("bad_magic", mangled(0, 100, 1, |d| d[..4].copy_from_slice(b"XRLP"))),
        ("bad_version", mangled(0, 100, 1, |d| d[4] = native::VERSION + 1)),
        ("short_header", mangled(0, 100, 1, |d| d.truncate(HEADER_LEN - 1))),
        ("short_header", Vec::new()),
        ("bad_header_len", mangled(0, 100, 1, |d| d[6..8].copy_from_slice(&16u16.to_le_bytes()))),
        ("truncated", mangled(0, 100, 1, |d| d.truncate(d.len() - 10))),
        ("payload_outside_frame", forged(NativeHeader { payload_offset: 950, ..good })),
        ("bad_packet_index", forged(NativeHeader { packet_index: PACKETS, ..good })),
        ("packet_count_mismatch", forged(NativeHeader { packet_count: PACKETS + 1, ..good })),
        ("frame_len_mismatch", forged(NativeHeader { frame_len: FRAME_LEN + 50, ..good })),
        ("layout_mismatch", forged(NativeHeader { payload_offset: 150, ..good })),
        (
            "bad_packet_count",
            forged(NativeHeader { frame_seq: 300, frame_len: 5, payload_offset: 0, payload_len: 5, ..good }),
        ),
    ];
    for (_, d) in &garbage {
        tx.send(d);
    }
    // A frame larger than a slot: dropped whole, every packet counted.
    let big = FrameGeometry::new(SLOT_BYTES as u64 + 1, STRIDE as usize + HEADER_LEN).unwrap();
    for index in 0..big.packet_count() {
        let h = big.header(0, 200, index, clock::realtime_ns());
        tx.send(&forged(h));
    }
    // The rest of frame 100, then a frame after all the garbage.
    tx.send_frame(0, 100, 1..PACKETS);
    tx.send_frame(0, 101, 0..PACKETS);
    let results = app.wait_results(2);
    let ingest = wait_handled(&app, tx.sent);
    app.stop();

    check_sequences(&results);
    assert_eq!(results.len(), 2, "only the good frames are processed: {results:?}");
    check_frame(&result_of(&results, 0, 100), &[]);
    check_frame(&result_of(&results, 0, 101), &[]);
    for (name, _) in &garbage {
        let want = garbage.iter().filter(|(n, _)| n == name).count() as u64;
        assert_eq!(ingest.get(name), Some(want), "counter {name}: {ingest:?}");
    }
    assert_eq!(ingest.get("frame_too_large"), Some(1), "{ingest:?}");
    assert_eq!(ingest.get("dropped_frame_packets"), Some(big.packet_count() as u64), "{ingest:?}");
    assert_eq!(ingest.packets_accepted, 2 * PACKETS as u64);
    assert_eq!(ingest.datagrams_dropped(), garbage.len() as u64 + big.packet_count() as u64);
    assert_eq!((ingest.frames_started, ingest.frames_complete, ingest.frames_incomplete), (2, 2, 0));
}

#[test]
fn a_source_outside_the_allowlist_is_counted_and_dropped() {
    let _serial = one_at_a_time();
    let mut cfg = config();
    cfg.ingest.allow = vec!["127.0.0.2/32".into()];
    let app = Running::start(&cfg);
    let mut stranger = Source::new("127.0.0.1:0", app.addr());
    stranger.send_frame(5, 1, 0..PACKETS);
    let mut allowed = Source::new("127.0.0.2:0", app.addr());
    allowed.send_frame(5, 2, 0..PACKETS);
    let results = app.wait_results(1);
    let ingest = wait_handled(&app, stranger.sent + allowed.sent);
    let (_, results_at_stop) = app.stop();

    assert_eq!(results_at_stop.len(), 1, "the stranger's frame is never processed");
    check_frame(&result_of(&results, 5, 2), &[]);
    assert_eq!(ingest.source_not_allowed, stranger.sent, "{ingest:?}");
    assert_eq!(ingest.packets_accepted, allowed.sent);
    assert_eq!(ingest.datagrams_dropped(), stranger.sent, "{ingest:?}");
}

#[test]
fn stopping_publishes_and_processes_a_frame_still_in_flight() {
    let _serial = one_at_a_time();
    let mut cfg = config();
    // Long enough that only the stop can publish the frame.
    cfg.ingest.reassembly.frame_timeout_ms = 60_000;
    let app = Running::start(&cfg);
    let mut tx = Source::new("127.0.0.1:0", app.addr());
    tx.send_frame(2, 9, (0..PACKETS).filter(|&i| i != 6));
    let ingest = wait_handled(&app, tx.sent);
    assert_eq!((ingest.frames_started, ingest.frames_complete + ingest.frames_incomplete), (1, 0));
    assert!(app.results().is_empty(), "nothing is published before the stop");
    let (report, results) = app.stop();

    assert_eq!(results.len(), 1, "the frame in flight is published on the way out and processed");
    check_frame(&results[0], &[6]);
    assert_eq!(results[0].slot_flags & SLOT_TIMED_OUT, 0, "published by the stop, not by a timeout");
    assert_eq!((report.ingest.frames_incomplete, report.ingest.frames_timed_out), (1, 0));
    assert_eq!(report.latency.frames.incomplete, 1);
}
