//! Fuzz target: any bytes as the result and detection messages a subscriber
//! reads off the sink (`sink::encoding::decode_result`, `decode_detection`),
//! whole and cut to each message's length: a message decodes or is refused
//! with the reason, never panics, and one that decodes encodes back to the
//! same bytes (all but the reserved ones).
//! Seeds: `fuzz/seeds/sink_messages`.
#![no_main]

use frameloop::sink::encoding::{
    DETECTION_MESSAGE_BYTES, RESULT_MESSAGE_BYTES, decode_detection, decode_result, encode_detection,
    encode_result,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for bytes in [data, &data[..data.len().min(RESULT_MESSAGE_BYTES)]] {
        if let Ok(r) = decode_result(bytes) {
            let again = encode_result(&r);
            assert_eq!(again[..2], bytes[..2]);
            assert_eq!(again[4..], bytes[4..], "every field but the reserved ones");
        }
    }
    for bytes in [data, &data[..data.len().min(DETECTION_MESSAGE_BYTES)]] {
        if let Ok(d) = decode_detection(bytes) {
            let again = encode_detection(&d);
            assert_eq!(again[..2], bytes[..2]);
            assert_eq!(again[4..], bytes[4..]);
        }
    }
});
