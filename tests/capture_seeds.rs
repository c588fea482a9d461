//! The fuzz targets' seed corpora run as ordinary tests: every file of
//! `fuzz/seeds/pcap_reader` goes through the capture reader and in-process
//! replay, every file of `fuzz/seeds/rtp4175` (2-byte big-endian length
//! before each packet) through the RFC 4175 parser and assembler, exactly
//! as `fuzz/fuzz_targets/*.rs` do.

use frameloop::capture::replay::{DatagramFilter, InProcessSetup, replay_in_process};
use frameloop::capture::{CaptureError, CaptureReader};
use frameloop::rtp::RtpCounter;
use std::path::{Path, PathBuf};

fn seeds(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 2, "seed corpus {} is missing", dir.display());
    files
}

#[test]
fn pcap_reader_seeds() {
    let config = frameloop::config::Config::default();
    let setup = InProcessSetup::from_config(&config, None);
    for path in seeds("pcap_reader") {
        let bytes = std::fs::read(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        match CaptureReader::new(&bytes[..]) {
            Ok(reader) => {
                let s = replay_in_process(reader, &DatagramFilter::default(), &setup).unwrap();
                assert!(s.datagrams > 0, "{name}: no datagram found\n{}", s.render());
                assert_eq!(
                    s.ended_early.is_some(),
                    name.starts_with("truncated"),
                    "{name}: {:?}",
                    s.ended_early
                );
            }
            Err(e) => {
                assert!(
                    matches!(e, CaptureError::NotACapture { .. }) && name.starts_with("not_a"),
                    "{name}: {e}"
                )
            }
        }
    }
}

#[test]
fn rtp4175_seeds() {
    for path in seeds("rtp4175") {
        let data = std::fs::read(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let assembler = frameloop::rtp::assemble_length_prefixed(&data);
        let c = assembler.counters();
        if name.starts_with("lying") {
            // The dropped liar belongs to the frame, so the frame is published incomplete.
            assert_eq!(c.get(RtpCounter::line_outside_frame), 1, "{name}");
            assert_eq!(c.get(RtpCounter::rtp_truncated_segments), 1, "{name}");
            assert_eq!(c.get(RtpCounter::frames_incomplete), 1, "{name}");
        } else {
            assert!(c.get(RtpCounter::frames_complete) >= 1, "{name}: the seed's whole frame must assemble");
        }
    }
}
