//! Fuzz target: any bytes (as text, lossily) as the SDP file of an RFC 4175
//! stream through `rtp::sdp::parse`: it returns a stream or an error naming
//! the line, never panics, and a stream it returns has a payload type below
//! 128 and a frame of at least one byte.
//! Seeds: `fuzz/seeds/sdp_parse`.
#![no_main]

use frameloop::rtp::sdp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(video) = sdp::parse(&text) {
        assert!(video.payload_type < 128, "{video:?}");
        assert!(video.geometry.frame_bytes() > 0, "{video:?}");
        assert_eq!(sdp::parse(&text), Ok(video), "the same text parses the same");
    }
});
