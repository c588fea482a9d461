//! Fuzz target: any bytes as a pcap/pcapng capture, replayed in-process
//! through UDP extraction and native reassembly. Seeds: `fuzz/seeds/pcap_reader`
//! (also run as an ordinary test by `tests/capture_seeds.rs`).
#![no_main]

use frameloop::capture::CaptureReader;
use frameloop::capture::replay::{DatagramFilter, InProcessSetup, replay_in_process};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(reader) = CaptureReader::new(data) {
        let config = frameloop::config::Config::default();
        let _ = replay_in_process(
            reader,
            &DatagramFilter::default(),
            &InProcessSetup::from_config(&config, None),
        );
    }
});
