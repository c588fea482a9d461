//! The NATS message layouts that docs/outputs.md documents are the ones
//! the encoder writes: the stated length, and every table row (offset,
//! type, field) read from an encoded message gives that field's value, the
//! rows covering every byte once.

use frameloop::ring::ResultRecord;
use frameloop::sink::encoding::{Detection, encode_detection, encode_result};

/// One documented row: offset, type, field name (first word of the cell).
struct Row {
    offset: usize,
    ty: String,
    field: String,
}

/// The stated byte count and the rows of the table after the line that
/// starts with `title` (e.g. "Result message") in docs/outputs.md.
fn documented(title: &str) -> (usize, Vec<Row>) {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/outputs.md")).unwrap();
    // The title may be broken over two lines ("... Result\nmessage, 176
    // bytes"); line breaks made spaces keep every byte where it was.
    let flat = text.replace('\n', " ");
    let at = flat.find(&format!("{title}, ")).unwrap_or_else(|| panic!("docs/outputs.md names no {title}"));
    let after = &flat[at + title.len() + 2..];
    let bytes: usize =
        after.split_whitespace().next().unwrap().parse().expect("a byte count after the title");
    let table = text[at..]
        .lines()
        .skip_while(|l| !l.starts_with("| offset"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            Row {
                offset: cells[0].parse().unwrap_or_else(|_| panic!("offset of {l:?}")),
                ty: cells[1].to_string(),
                field: cells[2].split_whitespace().next().unwrap().to_string(),
            }
        })
        .collect();
    (bytes, table)
}

/// The bytes a documented type takes, and how many values.
fn width(ty: &str) -> (usize, usize) {
    let (count, base) = match ty.split_once('×') {
        Some((n, t)) => (n.trim().parse().unwrap(), t.trim()),
        None => (1, ty),
    };
    let size = match base {
        "u8" => 1,
        "u16" => 2,
        "u32" | "i32" | "f32" => 4,
        "u64" => 8,
        other => panic!("undocumented type {other}"),
    };
    (size, count)
}

/// Reads value `i` of type `ty` at `offset` as raw little-endian bits.
fn read(msg: &[u8], offset: usize, ty: &str, i: usize) -> u64 {
    let (size, _) = width(ty);
    let at = offset + i * size;
    let mut b = [0u8; 8];
    b[..size].copy_from_slice(&msg[at..at + size]);
    u64::from_le_bytes(b)
}

/// Checks that the rows tile `msg` and that each reads `value(field, i)`.
fn check(title: &str, msg: &[u8], value: impl Fn(&str, usize) -> u64) {
    let (bytes, rows) = documented(title);
    assert_eq!(bytes, msg.len(), "{title}: the docs say {bytes} bytes, the encoder writes {}", msg.len());
    let mut next = 0;
    for row in &rows {
        assert_eq!(row.offset, next, "{title}: row {} does not start where the one before ended", row.field);
        let (size, count) = width(&row.ty);
        for i in 0..count {
            let got = read(msg, row.offset, &row.ty, i);
            assert_eq!(
                got,
                value(&row.field, i),
                "{title}: {} (value {i}) at offset {}",
                row.field,
                row.offset
            );
        }
        next = row.offset + size * count;
    }
    assert_eq!(next, msg.len(), "{title}: the documented rows end at {next}, the message at {}", msg.len());
}

#[test]
fn the_documented_result_layout_is_the_encoders() {
    let r = ResultRecord {
        result_seq: 0x0102_0304_0506_0708,
        ring_seq: 0x1112_1314_1516_1718,
        frame_seq: 0x2122_2324_2526_2728,
        stream_id: 0x3132_3334,
        slot_flags: 0x4142_4344,
        sender_ts_ns: 0x5152_5354_5556_5758,
        first_rx_ns: 0x6162_6364_6566_6768,
        last_rx_ns: 0x7172_7374_7576_7778,
        published_ns: 0x8182_8384_8586_8788,
        detect_ns: 0x9192_9394_9596_9798,
        done_ns: 0xa1a2_a3a4_a5a6_a7a8,
        sum: 1.5,
        min: -2.25,
        max: 1e6,
        mean: 3.125,
        detect_count: 0xb1b2_b3b4,
        first_detect_index: -77,
        output_len: 0xc1c2_c3c4,
        result_flags: 0xd1d2_d3d4,
        skipped_before: 0xe1e2_e3e4_e5e6_e7e8,
        user: std::array::from_fn(|i| 0xf000_0000 + i as u32),
        param_generation: 0x0a0b_0c0d,
        ..ResultRecord::default()
    };
    let msg = encode_result(&r);
    check("Result message", &msg, |field, i| match field {
        "version" => 1,
        "kind" => 1,
        "reserved" => 0,
        "stream_id" => r.stream_id.into(),
        "result_seq" => r.result_seq,
        "ring_seq" => r.ring_seq,
        "frame_seq" => r.frame_seq,
        "slot_flags" => r.slot_flags.into(),
        "result_flags" => r.result_flags.into(),
        "sender_ts_ns" => r.sender_ts_ns,
        "first_rx_ns" => r.first_rx_ns,
        "last_rx_ns" => r.last_rx_ns,
        "published_ns" => r.published_ns,
        "detect_ns" => r.detect_ns,
        "done_ns" => r.done_ns,
        "sum" => r.sum.to_bits().into(),
        "min" => r.min.to_bits().into(),
        "max" => r.max.to_bits().into(),
        "mean" => r.mean.to_bits().into(),
        "detect_count" => r.detect_count.into(),
        "first_detect_index" => (r.first_detect_index as u32).into(),
        "output_len" => r.output_len.into(),
        "param_generation" => r.param_generation.into(),
        "skipped_before" => r.skipped_before,
        "user" => r.user[i].into(),
        other => panic!("the docs name a field the test does not know: {other}"),
    });
}

#[test]
fn the_documented_detection_layout_is_the_encoders() {
    let d = Detection {
        stream_id: 0x3132_3334,
        result_seq: 0x0102_0304_0506_0708,
        frame_seq: 0x2122_2324_2526_2728,
        done_ns: 0xa1a2_a3a4_a5a6_a7a8,
        detect_count: 0xb1b2_b3b4,
        first_detect_index: -77,
        max: 1e6,
        result_flags: 0xd1d2_d3d4,
    };
    let msg = encode_detection(&d);
    check("Detection message", &msg, |field, _| match field {
        "version" => 1,
        "kind" => 2,
        "reserved" => 0,
        "stream_id" => d.stream_id.into(),
        "result_seq" => d.result_seq,
        "frame_seq" => d.frame_seq,
        "done_ns" => d.done_ns,
        "detect_count" => d.detect_count.into(),
        "first_detect_index" => (d.first_detect_index as u32).into(),
        "max" => d.max.to_bits().into(),
        "result_flags" => d.result_flags.into(),
        other => panic!("the docs name a field the test does not know: {other}"),
    });
}
