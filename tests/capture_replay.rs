//! Recording and replaying captures over real loopback sockets and in
//! process: byte-exact round trips, filters, deterministic in-process
//! results, hand-built pcap/pcapng variants, and corruption that never panics.

use frameloop::capture::net::linktype;
use frameloop::capture::replay::{DatagramFilter, replay_in_process};
use frameloop::capture::{
    CaptureError, CaptureFormat, CaptureReader, DatagramTap, InProcessSetup, PcapngRecorder, RecordArgs,
    ReplayArgs, SkipReason, net, record, replay,
};
use frameloop::config::RingConfig;
use frameloop::ingest::ReassemblyConfig;
use frameloop::ops::{OpSpec, SampleFormat};
use frameloop::ring::layout::SLOT_COMPLETE;
use frameloop::wire::native;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/seeds/pcap_reader");

/// Native datagrams of `frames` frames of `frame_len` bytes on `stream`, cut in `mtu`-byte payloads.
fn native_frames(stream: u32, frames: u64, frame_len: u32, mtu: u32) -> Vec<Vec<u8>> {
    (1..=frames)
        .flat_map(|f| {
            let frame: Vec<u8> = (0..frame_len).map(|i| (i as u64 * 7 + f * 13) as u8).collect();
            native::encode_frame(stream, f, &frame, mtu, f * 1000)
        })
        .collect()
}

fn setup() -> InProcessSetup {
    InProcessSetup {
        ring: RingConfig { slots: 8, slot_bytes: 8192, ..RingConfig::default() },
        chain: vec![OpSpec::Unpack { format: SampleFormat::U8, scale: 1.0, offset: 0.0 }, OpSpec::Stats],
        reassembly: ReassemblyConfig::default(),
        rtp: None,
    }
}

/// Records `datagrams` sent over loopback with `frameloop record`'s receiver.
fn record_loopback(path: &Path, datagrams: &[Vec<u8>]) -> (SocketAddr, SocketAddr) {
    let args = RecordArgs {
        out: path.to_path_buf(),
        duration: Some(20.0),
        count: Some(datagrams.len() as u64),
        bind: "127.0.0.1:0".parse().unwrap(),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let recorder =
        std::thread::spawn(move || record(&args, &AtomicBool::new(false), |a| tx.send(a).unwrap()));
    let dst = rx.recv().unwrap();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    for d in datagrams {
        sender.send_to(d, dst).unwrap();
        std::thread::sleep(Duration::from_micros(50));
    }
    let summary = recorder.join().unwrap().unwrap();
    assert_eq!(summary.stats.recorded, datagrams.len() as u64);
    (sender.local_addr().unwrap(), dst)
}

#[test]
fn record_then_read_is_byte_exact_with_addresses_and_ns_times() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.pcapng");
    let datagrams = native_frames(3, 4, 3000, 1000);
    let (src, dst) = record_loopback(&path, &datagrams);
    let mut reader = CaptureReader::open(&path).unwrap();
    assert_eq!(reader.format(), CaptureFormat::Pcapng);
    let mut last_ts = 0;
    for d in &datagrams {
        let p = reader.next_packet().unwrap().unwrap();
        assert_eq!(p.link_type, linktype::RAW);
        let udp = net::decode_udp(p.link_type, p.data).unwrap();
        assert_eq!((udp.src, udp.dst, udp.payload), (src, dst, &d[..]));
        assert!(p.ts_ns >= last_ts && p.ts_ns > 1_600_000_000_000_000_000, "ns since the epoch");
        last_ts = p.ts_ns;
    }
    assert!(reader.next_packet().unwrap().is_none());
}

#[test]
fn replay_to_a_socket_sends_the_recorded_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.pcapng");
    let mut datagrams = native_frames(3, 3, 2000, 1000);
    datagrams.extend(native_frames(4, 2, 500, 1000));
    let (_, dst) = record_loopback(&path, &datagrams);
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    sink.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut args = ReplayArgs::new(&path);
    args.to = Some(sink.local_addr().unwrap());
    args.speed = 4.0;
    args.ports = vec![dst.port()];
    args.streams = vec![3];
    let summary = replay(&args, None, &AtomicBool::new(false)).unwrap();
    let stream3: Vec<&Vec<u8>> =
        datagrams.iter().filter(|d| native::parse(d).unwrap().0.stream_id == 3).collect();
    assert_eq!(summary.datagrams, stream3.len() as u64);
    assert_eq!(summary.frames, 3);
    assert_eq!(summary.skipped(SkipReason::FilteredStream), 2);
    let mut buf = [0u8; 65536];
    for want in stream3 {
        let (n, _) = sink.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], &want[..]);
    }
    let text = summary.render();
    assert!(text.contains("3 frames") && text.contains("filtered_stream 2"), "{text}");
}

#[test]
fn in_process_replay_is_deterministic_and_processes_every_frame() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.pcapng");
    let datagrams = native_frames(1, 5, 4000, 1400);
    let mut rec = PcapngRecorder::create(&path).unwrap();
    let (src, dst): (SocketAddr, SocketAddr) =
        ("10.0.0.1:4000".parse().unwrap(), "10.0.0.2:5000".parse().unwrap());
    // Frame 3 loses its second packet.
    for (i, d) in datagrams.iter().enumerate().filter(|(i, _)| *i != 7) {
        rec.on_datagram(src, dst, d, 1_700_000_000_000_000_000 + i as u64 * 1000);
    }
    rec.finish().unwrap();
    let run = || {
        let reader = CaptureReader::open(&path).unwrap();
        replay_in_process(reader, &DatagramFilter::default(), &setup()).unwrap()
    };
    let (a, b) = (run(), run());
    assert_eq!(a.processed, b.processed, "two replays of one capture must agree exactly");
    assert_eq!(a.processed.len(), 5);
    let flags: Vec<u32> = a.processed.iter().map(|f| f.flags & SLOT_COMPLETE).collect();
    assert_eq!(flags, vec![SLOT_COMPLETE, SLOT_COMPLETE, 0, SLOT_COMPLETE, SLOT_COMPLETE]);
    let frame1: Vec<u8> = (0..4000u64).map(|i| (i * 7 + 13) as u8).collect();
    assert_eq!(a.processed[0].payload_digest, frameloop::capture::replay::fnv1a64(&frame1));
    let sum: u64 = frame1.iter().map(|b| *b as u64).sum();
    assert_eq!(a.processed[0].output.stats.unwrap().sum as u64, sum);
}

#[test]
fn hand_built_pcap_and_pcapng_variants_decode() {
    // Big-endian nanosecond pcap, LINKTYPE_RAW.
    let mut r = CaptureReader::open(&Path::new(CORPUS).join("native_raw_ns_be.pcap")).unwrap();
    assert!(matches!(r.format(), CaptureFormat::Pcap { nanosecond: true, big_endian: true, link_type: 101 }));
    let times: Vec<u64> = std::iter::from_fn(|| r.next_packet().unwrap().map(|p| p.ts_ns)).collect();
    assert_eq!(times, vec![1_700_000_000_000_000_000, 1_700_000_000_000_001_000, 1_700_000_000_000_002_000]);
    // pcapng: two interfaces with their own link type and resolution, an unknown block, an SPB.
    let mut r = CaptureReader::open(&Path::new(CORPUS).join("native_two_interfaces.pcapng")).unwrap();
    let mut seen = Vec::new();
    while let Some(p) = r.next_packet().unwrap() {
        let udp = net::decode_udp(p.link_type, p.data).unwrap();
        seen.push((p.interface, p.link_type, p.ts_ns, native::parse(udp.payload).unwrap().0.frame_seq));
    }
    assert_eq!(
        seen,
        vec![
            (0, linktype::RAW, 1_700_000_000_000_000_001, 0),
            (1, linktype::LINUX_SLL2, 5_000_000_000, 1),
            (0, linktype::RAW, 5_000_000_000, 2),
        ]
    );
}

#[test]
fn bad_captures_give_clear_errors() {
    let err = CaptureReader::open(&Path::new(CORPUS).join("not_a_capture.bin")).err().unwrap();
    assert!(
        matches!(err, CaptureError::NotACapture { .. }) && err.to_string().contains("tcpdump -w"),
        "{err}"
    );
    let err = CaptureReader::open(Path::new("/nonexistent/x.pcap")).err().unwrap();
    assert!(err.to_string().contains("/nonexistent/x.pcap"), "{err}");
    // A truncated capture replays what it holds and says where it ended.
    let reader = CaptureReader::open(&Path::new(CORPUS).join("truncated.pcapng")).unwrap();
    let s = replay_in_process(reader, &DatagramFilter::default(), &setup()).unwrap();
    assert_eq!(s.datagrams, 2);
    assert!(s.ended_early.as_deref().unwrap_or("").contains("truncated"), "{s:?}");
    // A huge length field is refused, not allocated.
    let mut huge = std::fs::read(Path::new(CORPUS).join("native_raw_ns_be.pcap")).unwrap();
    huge[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_be_bytes());
    let mut r = CaptureReader::new(&huge[..]).unwrap();
    assert!(matches!(r.next_packet(), Err(CaptureError::BlockTooLarge { .. })));
}

#[test]
fn non_udp_and_fragments_are_counted_skips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.pcapng");
    let mut w = frameloop::capture::PcapngWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    let d = &native_frames(1, 1, 100, 1000)[0];
    let mut ip = Vec::new();
    net::encode_ip_udp("1.2.3.4:1".parse().unwrap(), "1.2.3.5:5000".parse().unwrap(), d, &mut ip);
    w.write_packet(1, &ip).unwrap();
    let mut tcp = ip.clone();
    tcp[9] = 6;
    w.write_packet(2, &tcp).unwrap();
    let mut frag = ip.clone();
    frag[6] |= 0x20;
    w.write_packet(3, &frag).unwrap();
    w.write_packet(4, &ip[..30]).unwrap();
    let mut other_port = Vec::new();
    net::encode_ip_udp("1.2.3.4:1".parse().unwrap(), "1.2.3.5:6000".parse().unwrap(), d, &mut other_port);
    w.write_packet(5, &other_port).unwrap();
    w.into_inner().unwrap();
    let filter = DatagramFilter { ports: vec![5000], streams: Vec::new() };
    let s = replay_in_process(CaptureReader::open(&path).unwrap(), &filter, &setup()).unwrap();
    assert_eq!((s.packets, s.datagrams, s.frames), (5, 1, 1));
    for (reason, n) in [
        (SkipReason::NotUdp, 1),
        (SkipReason::Ipv4Fragment, 1),
        (SkipReason::Truncated, 1),
        (SkipReason::FilteredPort, 1),
    ] {
        assert_eq!(s.skipped(reason), n, "{}", reason.name());
    }
}

#[test]
fn pcap_file_crate_reads_frameloop_pcapng() {
    let mut buf = Vec::new();
    let mut rec = PcapngRecorder::new(&mut buf).unwrap();
    let datagrams = native_frames(2, 2, 1500, 700);
    for (i, d) in datagrams.iter().enumerate() {
        rec.on_datagram("[::1]:9".parse().unwrap(), "[::1]:5000".parse().unwrap(), d, 10 + i as u64);
    }
    rec.finish().unwrap();
    let mut reader = pcap_file::pcapng::PcapNgReader::new(&buf[..]).unwrap();
    let mut n = 0;
    while let Some(block) = reader.next_block() {
        if let pcap_file::pcapng::Block::EnhancedPacket(epb) = block.unwrap() {
            let udp = net::decode_udp(linktype::RAW, &epb.data).unwrap();
            assert_eq!(udp.payload, &datagrams[n][..]);
            n += 1;
        }
    }
    assert_eq!(n, datagrams.len());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

    /// Random corruption of real captures never panics: every outcome is a
    /// packet, a clean end or an error.
    #[test]
    fn corrupted_captures_never_panic(
        file in proptest::sample::select(vec!["native_raw_ns_be.pcap", "native_two_interfaces.pcapng", "tcpdump_lo_rtpvraw.pcap"]),
        flips in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 1..12),
        cut in proptest::prelude::any::<usize>(),
    ) {
        let mut bytes = std::fs::read(Path::new(CORPUS).join(file)).unwrap();
        for (at, x) in flips {
            let i = at % bytes.len();
            bytes[i] ^= x;
        }
        bytes.truncate(cut % (bytes.len() + 1));
        if let Ok(reader) = CaptureReader::new(&bytes[..]) {
            let _ = replay_in_process(reader, &DatagramFilter::default(), &setup());
        }
    }
}

/// A capture of `datagrams` coalesced `per_record` to a UDP record, as
/// tcpdump records a UDP GSO send; `tail` is appended to the last record.
fn coalesced_capture(path: &Path, datagrams: &[Vec<u8>], per_record: usize, tail: &[u8], dst: SocketAddr) {
    let mut rec = PcapngRecorder::create(path).unwrap();
    let src: SocketAddr = "127.0.0.1:4000".parse().unwrap();
    let records: Vec<&[Vec<u8>]> = datagrams.chunks(per_record).collect();
    for (i, group) in records.iter().enumerate() {
        let mut payload = group.concat();
        if i + 1 == records.len() {
            payload.extend_from_slice(tail);
        }
        rec.on_datagram(src, dst, &payload, 1_700_000_000_000_000_000 + i as u64 * 1000);
    }
    rec.finish().unwrap();
}

#[test]
fn coalesced_native_datagrams_replay_in_process_as_every_frame() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gso.pcapng");
    // 6 frames of 4 packets each (the last one shorter), 5 per record: records
    // straddle frames, as GSO sends of consecutive frames would not, but the
    // split must not care.
    let datagrams = native_frames(2, 6, 4000, 1100);
    let garbage = b"not a native datagram";
    coalesced_capture(&path, &datagrams, 5, garbage, "10.0.0.2:5000".parse().unwrap());
    let reader = CaptureReader::open(&path).unwrap();
    let s = replay_in_process(reader, &DatagramFilter::default(), &setup()).unwrap();
    assert_eq!(s.packets, datagrams.len().div_ceil(5) as u64);
    assert_eq!(s.datagrams, datagrams.len() as u64, "every coalesced datagram is replayed");
    assert_eq!(s.processed.len(), 6);
    assert!(s.processed.iter().all(|f| f.flags & SLOT_COMPLETE != 0), "{:?}", s.processed);
    assert_eq!((s.unparsed_tails, s.unparsed_tail_bytes), (1, garbage.len() as u64));
    assert!(s.render().contains(&format!("warning: {} bytes", garbage.len())), "{}", s.render());
    // The stream filter applies to each coalesced datagram.
    let reader = CaptureReader::open(&path).unwrap();
    let other = DatagramFilter { ports: vec![], streams: vec![9] };
    let s = replay_in_process(reader, &other, &setup()).unwrap();
    assert_eq!((s.datagrams, s.skipped(SkipReason::FilteredStream)), (0, datagrams.len() as u64));
}

#[test]
fn coalesced_native_datagrams_are_sent_one_by_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gso.pcapng");
    let datagrams = native_frames(1, 3, 3000, 1000);
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    receiver.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let to = receiver.local_addr().unwrap();
    coalesced_capture(&path, &datagrams, 4, &[], to);
    let mut args = ReplayArgs::new(&path);
    args.to = Some(to);
    let s = replay(&args, None, &AtomicBool::new(false)).unwrap();
    assert_eq!((s.datagrams, s.frames, s.unparsed_tails), (datagrams.len() as u64, 3, 0));
    let mut buf = vec![0u8; 65536];
    for d in &datagrams {
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &d[..]);
    }
}

#[test]
fn rtp_payloads_are_never_split() {
    // An RTP packet whose payload happens to hold native datagrams stays whole.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rtp.pcapng");
    let mut rtp = vec![0x80, 96, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
    rtp.extend(native_frames(1, 1, 100, 1000).concat());
    let mut rec = PcapngRecorder::create(&path).unwrap();
    rec.on_datagram("127.0.0.1:4000".parse().unwrap(), "127.0.0.1:5000".parse().unwrap(), &rtp, 1);
    rec.finish().unwrap();
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    receiver.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut args = ReplayArgs::new(&path);
    args.to = Some(receiver.local_addr().unwrap());
    let s = replay(&args, None, &AtomicBool::new(false)).unwrap();
    assert_eq!((s.datagrams, s.unparsed_tails), (1, 0));
    let mut buf = vec![0u8; 65536];
    let n = receiver.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], &rtp[..]);
}

#[test]
fn a_timestamp_jump_is_shortened_to_max_gap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jump.pcapng");
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = receiver.local_addr().unwrap();
    let mut rec = PcapngRecorder::create(&path).unwrap();
    let src: SocketAddr = "127.0.0.1:4000".parse().unwrap();
    let t0 = 1_000_000_000u64;
    // 10^9 s later, then 20 ms later (kept as is), then back in time.
    for ts in [t0, t0 + 1_000_000_000 * 1_000_000_000, t0 + 1_000_000_000 * 1_000_000_000 + 20_000_000, t0] {
        rec.on_datagram(src, to, b"x", ts);
    }
    rec.finish().unwrap();
    let mut args = ReplayArgs::new(&path);
    args.to = Some(to);
    args.max_gap_ms = 100;
    let start = std::time::Instant::now();
    let s = replay(&args, None, &AtomicBool::new(false)).unwrap();
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(120) && took < Duration::from_secs(5), "{took:?}");
    assert_eq!(s.datagrams, 4);
    assert_eq!((s.gaps_shortened, s.longest_gap_ns), (1, 1_000_000_000 * 1_000_000_000));
    assert!(s.render().contains("pacing: 1 gaps shortened"), "{}", s.render());
}
