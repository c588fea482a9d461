//! Inputs the fuzzers found crashing, kept under `fuzz/regressions/<target>/`
//! and fed to the same entry point as the fuzz target: each must be counted
//! and dropped, never panic.
//!
//! Both inputs below are the native datagram whose header length (200)
//! runs past its 48 bytes with a zero payload length: `wire::native::parse`
//! sliced past the datagram's end. The fix of `native::parse` makes them pass.

use frameloop::capture::CaptureReader;
use frameloop::capture::replay::{DatagramFilter, InProcessSetup, replay_in_process};
use frameloop::ingest::{Reassembler, ReassemblyConfig};
use frameloop::ring::layout::ring_bytes;
use frameloop::ring::{FrameRing, HostMemory, OverrunPolicy};
use std::path::Path;
use std::sync::Arc;

fn regression(target: &str, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions").join(target).join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Header-length rejections, whichever counter the parser files them under.
const HEADER_LEN_DROPS: [&str; 3] = ["bad_header_len", "truncated", "short_header"];

#[test]
fn native_header_len_past_the_datagram_is_counted_and_dropped() {
    let input = regression("native_reassembly", "header_len_past_end.seq");
    // The fuzz target's framing: a 2-byte big-endian length, then the datagram.
    let len = u16::from_be_bytes([input[0], input[1]]) as usize;
    let datagram = &input[2..2 + len];
    assert_eq!(&datagram[..4], b"FRLP");
    assert_eq!(u16::from_le_bytes([datagram[6], datagram[7]]), 200, "header length past the datagram");

    let mem = HostMemory::new(ring_bytes(4, 4096).unwrap()).unwrap();
    let ring = FrameRing::new(Box::new(mem), 4, 4096, OverrunPolicy::Every).unwrap();
    let mut reader = ring.reader().unwrap();
    let mut reassembler =
        Reassembler::new(ReassemblyConfig::default(), ring.writer().unwrap(), Arc::default());
    reassembler.on_datagram_at(datagram, 1_000, 1_000);
    reassembler.flush(2_000);

    let counts = reassembler.counters().snapshot();
    assert_eq!(counts.datagrams, 1);
    assert_eq!(counts.packets_accepted, 0);
    assert_eq!(counts.datagrams_dropped(), 1, "{counts:?}");
    let header_drops: u64 = HEADER_LEN_DROPS.iter().map(|n| counts.get(n).unwrap()).sum();
    assert_eq!(header_drops, 1, "{counts:?}");
    assert!(reader.claim().is_none(), "nothing published for a rejected datagram");
}

#[test]
fn pcap_with_header_len_past_the_datagram_replays() {
    let input = regression("pcap_reader", "header_len_past_end.pcap");
    let reader = CaptureReader::new(&input[..]).expect("the crash input is a readable capture");
    let config = frameloop::config::Config::default();
    let summary =
        replay_in_process(reader, &DatagramFilter::default(), &InProcessSetup::from_config(&config, None))
            .expect("replay of a capture with a lying datagram");
    assert!(summary.datagrams > 0, "{}", summary.render());
    let header_drops: u64 =
        summary.ingest_counters.iter().filter(|(n, _)| HEADER_LEN_DROPS.contains(n)).map(|(_, v)| v).sum();
    assert!(header_drops >= 1, "{}", summary.render());
}

/// `"" = ''`: a top-level key that is the empty string was reported with an
/// empty key name, naming nothing for the user to fix.
#[test]
fn an_empty_top_level_key_is_named() {
    let input = regression("config_parse", "empty_top_level_key.toml");
    let err = frameloop::config::parse(std::str::from_utf8(&input).unwrap()).unwrap_err();
    let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["\"\""], "{err}");
    assert!(err.to_string().contains("unknown key"), "{err}");
}
