//! Fuzz target: any bytes as an actuation message through
//! `wire::actuation::decode`, the decoder `frameloop send --expect-actuation`
//! uses: it returns a message or a typed error, never panics; a message it
//! accepts with the version-1 header length is formed again, byte for byte,
//! from what it decoded.
//! Seeds: `fuzz/seeds/actuation_message`.
#![no_main]

use frameloop::ring::ResultRecord;
use frameloop::wire::actuation::{HEADER_LEN, MessageInput, MessageShape, PART_SAMPLES, decode, form};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = decode(data) else { return };
    let h = m.header;
    let samples: Vec<f32> = m.samples().collect();
    assert_eq!(samples.len() as u32, if h.parts & PART_SAMPLES != 0 { h.sample_count } else { 0 });
    if usize::from(u16::from_le_bytes([data[6], data[7]])) != HEADER_LEN || data[60..64] != [0; 4] {
        return;
    }
    let record = m.record.unwrap_or(ResultRecord {
        stream_id: h.stream_id,
        frame_seq: h.frame_seq,
        ring_seq: h.ring_seq,
        sender_ts_ns: h.sender_ts_ns,
        param_generation: h.param_generation,
        ..Default::default()
    });
    // The header fields come from the record: a record part that disagrees
    // with its header cannot be formed again.
    if (record.stream_id, record.frame_seq, record.ring_seq, record.sender_ts_ns, record.param_generation)
        != (h.stream_id, h.frame_seq, h.ring_seq, h.sender_ts_ns, h.param_generation)
    {
        return;
    }
    let user = m.user.unwrap_or_default();
    let input = MessageInput {
        output: h.output,
        message_seq: h.message_seq,
        flags: h.flags,
        record: &record,
        user: &user,
        samples: &samples,
    };
    let mut again = vec![0u8; data.len()];
    let n =
        form(MessageShape { parts: h.parts, samples: h.sample_count }, &input, &mut again).expect("it fits");
    assert_eq!(&again[..n], data, "formed again byte for byte");
});
