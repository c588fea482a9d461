//! Fuzz target: any bytes as a sequence of RFC 4175 packets (a 2-byte
//! big-endian length before each) into the parser and the frame assembler.
//! Seeds: `fuzz/seeds/rtp4175` (also run by `tests/capture_seeds.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    frameloop::rtp::assemble_length_prefixed(data);
});
