//! The actuation message: what a loop sends back onto the network for a
//! processed frame. A fixed 64-byte little-endian header, then the payload
//! parts the output carries, in a fixed order (see `docs/wire-format.md`).
//!
//! | offset | size | field                                     |
//! |-------:|-----:|-------------------------------------------|
//! | 0      | 4    | magic `FLAC`                              |
//! | 4      | 1    | version (1)                               |
//! | 5      | 1    | payload parts (`PART_*` bits)             |
//! | 6      | 2    | header length (64)                        |
//! | 8      | 4    | stream id                                 |
//! | 12     | 2    | output index (`[[actuate]]` table)        |
//! | 14     | 2    | flags (`FLAG_*`)                          |
//! | 16     | 8    | frame sequence                            |
//! | 24     | 8    | ring sequence                             |
//! | 32     | 8    | sender time ns, echoed from the frame     |
//! | 40     | 8    | message sequence (per output, from 1)     |
//! | 48     | 4    | parameter generation                      |
//! | 52     | 4    | payload length                            |
//! | 56     | 4    | sample count                              |
//! | 60     | 4    | reserved (0)                              |
//!
//! Payload, each part present when its bit is set: the result record
//! ([`RECORD_BYTES`], the `ResultRecord` layout), the user result words
//! ([`USER_BYTES`]), then `sample count` little-endian `f32` samples.
//!
//! [`form`] writes a message into a byte buffer (the host backend's former,
//! the twin of the CUDA one); [`decode`] is a pure parser with no I/O, no
//! allocation and no panics, fuzzed (`fuzz/fuzz_targets/actuation_message.rs`).

use crate::ring::ResultRecord;
use crate::ring::layout::USER_RESULT_WORDS;
use thiserror::Error;

/// The four magic bytes that open every actuation message.
pub const MAGIC: [u8; 4] = *b"FLAC";
/// The only message version this build writes and reads.
pub const VERSION: u8 = 1;
/// Size of the version-1 header in bytes.
pub const HEADER_LEN: usize = 64;
/// Payload part: the frame's result record.
pub const PART_RECORD: u8 = 1 << 0;
/// Payload part: the frame's 48 user result bytes.
pub const PART_USER: u8 = 1 << 1;
/// Payload part: the first samples of the chain's output.
pub const PART_SAMPLES: u8 = 1 << 2;
/// Every known payload part.
pub const PART_ALL: u8 = PART_RECORD | PART_USER | PART_SAMPLES;
/// Bytes of the result record part.
pub const RECORD_BYTES: usize = std::mem::size_of::<ResultRecord>();
/// Bytes of the user result part.
pub const USER_BYTES: usize = USER_RESULT_WORDS * 4;
/// Message flag: the threshold operator detected something in the frame.
pub const FLAG_DETECTED: u16 = 1 << 0;
/// Message flag: a user kernel asked for an actuation for the frame.
pub const FLAG_USER_REQUEST: u16 = 1 << 1;
/// Message flag: the frame was incomplete (packets missing, zero-filled).
pub const FLAG_INCOMPLETE: u16 = 1 << 2;
/// Message flag: the chain produced fewer samples than the output carries
/// at most; `sample count` says how many are there.
pub const FLAG_SAMPLES_SHORT: u16 = 1 << 3;
/// The largest UDP payload, and so the largest message.
pub const MAX_MESSAGE_BYTES: usize = 65_507;

/// Byte offset of each header field, named as `handlers/actuation.cuh`'s
/// `ActuationHeader` names it (the layout test checks the CUDA struct
/// against this table, a unit test checks [`form`] against it).
pub const HEADER_FIELDS: &[(&str, usize)] = &[
    ("magic", 0),
    ("version", 4),
    ("parts", 5),
    ("header_len", 6),
    ("stream_id", 8),
    ("output", 12),
    ("flags", 14),
    ("frame_seq", 16),
    ("ring_seq", 24),
    ("sender_ts_ns", 32),
    ("message_seq", 40),
    ("param_generation", 48),
    ("payload_len", 52),
    ("sample_count", 56),
];

/// A parsed actuation header. Field meanings are in `docs/wire-format.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ActuationHeader {
    pub parts: u8,
    pub stream_id: u32,
    pub output: u16,
    pub flags: u16,
    pub frame_seq: u64,
    pub ring_seq: u64,
    pub sender_ts_ns: u64,
    pub message_seq: u64,
    pub param_generation: u32,
    pub payload_len: u32,
    pub sample_count: u32,
}

/// A decoded message: the header and views of its payload parts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ActuationMessage<'a> {
    pub header: ActuationHeader,
    /// The result record, when [`PART_RECORD`] is set.
    pub record: Option<ResultRecord>,
    /// The user result words, when [`PART_USER`] is set.
    pub user: Option<[u32; USER_RESULT_WORDS]>,
    /// The samples' bytes (little-endian `f32`), empty without [`PART_SAMPLES`].
    pub sample_bytes: &'a [u8],
}

impl ActuationMessage<'_> {
    /// The samples carried.
    pub fn samples(&self) -> impl Iterator<Item = f32> + '_ {
        self.sample_bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }
}

/// A message the decoder rejects, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A message shorter than the actuation header; read only actuation outputs with this decoder.
    #[error("message of {len} bytes is shorter than the {HEADER_LEN}-byte actuation header")]
    ShortHeader { len: usize },
    /// Not an actuation message; read only actuation outputs with this decoder.
    #[error("bad magic {found:02x?}: not a frameloop actuation message (expected \"FLAC\")")]
    BadMagic { found: [u8; 4] },
    /// An actuation version this build does not read; upgrade frameloop on the reading side.
    #[error("unsupported actuation version {found} (this build reads version {VERSION}); upgrade frameloop")]
    BadVersion { found: u8 },
    /// A header length outside the message; the writer is broken or the message was cut.
    #[error("header length {found} is outside [{HEADER_LEN}, {len}] (the message's {len} bytes)")]
    BadHeaderLen { found: u16, len: usize },
    /// Payload parts this build does not know; upgrade frameloop on the reading side.
    #[error("unknown payload parts {parts:#04x}; this build knows {PART_ALL:#04x}")]
    UnknownParts { parts: u8 },
    /// A payload length that does not match the message; the message was cut or corrupted.
    #[error("payload length {announced} does not match the {available} bytes after the header")]
    PayloadLen { announced: u32, available: usize },
    /// Payload parts whose size does not match the announced length; the message was corrupted.
    #[error(
        "payload parts {parts:#04x} with {samples} samples need {needed} bytes, not the {announced} announced"
    )]
    PartsLen { parts: u8, samples: u32, needed: u64, announced: u32 },
}

impl DecodeError {
    /// Short stable name for counters.
    pub fn kind(&self) -> &'static str {
        match self {
            DecodeError::ShortHeader { .. } => "short_header",
            DecodeError::BadMagic { .. } => "bad_magic",
            DecodeError::BadVersion { .. } => "bad_version",
            DecodeError::BadHeaderLen { .. } => "bad_header_len",
            DecodeError::UnknownParts { .. } => "unknown_parts",
            DecodeError::PayloadLen { .. } => "payload_len",
            DecodeError::PartsLen { .. } => "parts_len",
        }
    }
}

/// Payload bytes of a message with `parts` and `samples` samples.
pub const fn payload_bytes(parts: u8, samples: u32) -> u64 {
    let mut n = 0u64;
    if parts & PART_RECORD != 0 {
        n += RECORD_BYTES as u64;
    }
    if parts & PART_USER != 0 {
        n += USER_BYTES as u64;
    }
    if parts & PART_SAMPLES != 0 {
        n += samples as u64 * 4;
    }
    n
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// The record stored in `bytes` (exactly [`RECORD_BYTES`], the record's
/// in-memory layout on a little-endian machine).
fn record_from(bytes: &[u8]) -> ResultRecord {
    let mut r = ResultRecord::default();
    debug_assert_eq!(bytes.len(), RECORD_BYTES);
    // SAFETY: `r` is a plain `repr(C)` record of integers and floats (every
    // bit pattern is a valid value) of exactly RECORD_BYTES bytes, and
    // `bytes` holds RECORD_BYTES readable bytes that do not overlap it.
    unsafe {
        std::ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            (&raw mut r).cast::<u8>(),
            RECORD_BYTES.min(bytes.len()),
        )
    };
    r
}

/// Parses one actuation message. Checks the magic, version, header length,
/// parts, and that the payload length is exactly what is after the header
/// and exactly what the parts and sample count need.
pub fn decode(message: &[u8]) -> Result<ActuationMessage<'_>, DecodeError> {
    let len = message.len();
    if len < HEADER_LEN {
        return Err(DecodeError::ShortHeader { len });
    }
    let magic = [message[0], message[1], message[2], message[3]];
    if magic != MAGIC {
        return Err(DecodeError::BadMagic { found: magic });
    }
    if message[4] != VERSION {
        return Err(DecodeError::BadVersion { found: message[4] });
    }
    let header_len = u16_at(message, 6);
    if (header_len as usize) < HEADER_LEN || header_len as usize > len {
        return Err(DecodeError::BadHeaderLen { found: header_len, len });
    }
    let h = ActuationHeader {
        parts: message[5],
        stream_id: u32_at(message, 8),
        output: u16_at(message, 12),
        flags: u16_at(message, 14),
        frame_seq: u64_at(message, 16),
        ring_seq: u64_at(message, 24),
        sender_ts_ns: u64_at(message, 32),
        message_seq: u64_at(message, 40),
        param_generation: u32_at(message, 48),
        payload_len: u32_at(message, 52),
        sample_count: u32_at(message, 56),
    };
    if h.parts & !PART_ALL != 0 {
        return Err(DecodeError::UnknownParts { parts: h.parts });
    }
    let payload = &message[header_len as usize..];
    if h.payload_len as usize != payload.len() {
        return Err(DecodeError::PayloadLen { announced: h.payload_len, available: payload.len() });
    }
    let samples = if h.parts & PART_SAMPLES != 0 { h.sample_count } else { 0 };
    let needed = payload_bytes(h.parts, samples);
    if needed != u64::from(h.payload_len) || (h.parts & PART_SAMPLES == 0 && h.sample_count != 0) {
        return Err(DecodeError::PartsLen {
            parts: h.parts,
            samples: h.sample_count,
            needed,
            announced: h.payload_len,
        });
    }
    let mut at = 0usize;
    let record = (h.parts & PART_RECORD != 0).then(|| {
        at += RECORD_BYTES;
        record_from(&payload[..RECORD_BYTES])
    });
    let user = (h.parts & PART_USER != 0).then(|| {
        let mut words = [0u32; USER_RESULT_WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            *w = u32_at(payload, at + 4 * i);
        }
        at += USER_BYTES;
        words
    });
    Ok(ActuationMessage { header: h, record, user, sample_bytes: &payload[at..] })
}

/// What one output puts in its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MessageShape {
    /// `PART_*` bits.
    pub parts: u8,
    /// With [`PART_SAMPLES`]: how many of the first output samples, at most.
    pub samples: u32,
}

impl MessageShape {
    /// Bytes of the largest message of this shape (header included).
    pub const fn max_bytes(&self) -> u64 {
        HEADER_LEN as u64 + payload_bytes(self.parts, self.samples)
    }
}

/// The frame-dependent inputs of one message.
#[derive(Debug, Clone, Copy)]
pub struct MessageInput<'a> {
    pub output: u16,
    pub message_seq: u64,
    pub flags: u16,
    pub record: &'a ResultRecord,
    pub user: &'a [u32; USER_RESULT_WORDS],
    pub samples: &'a [f32],
}

/// Writes the message of `input` in `shape` into `out` and returns its
/// length, or `None` when `out` is too short for it (nothing useful is
/// written then). Samples past `shape.samples` are not sent; fewer are sent
/// as they are, with [`FLAG_SAMPLES_SHORT`].
pub fn form(shape: MessageShape, input: &MessageInput<'_>, out: &mut [u8]) -> Option<usize> {
    let with_samples = shape.parts & PART_SAMPLES != 0;
    let sample_count = if with_samples { input.samples.len().min(shape.samples as usize) } else { 0 };
    let payload_len = payload_bytes(shape.parts, sample_count as u32) as usize;
    let total = HEADER_LEN + payload_len;
    let out = out.get_mut(..total)?;
    let mut flags = input.flags;
    if with_samples && sample_count < shape.samples as usize {
        flags |= FLAG_SAMPLES_SHORT;
    }
    let r = input.record;
    out[0..4].copy_from_slice(&MAGIC);
    out[4] = VERSION;
    out[5] = shape.parts;
    out[6..8].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
    out[8..12].copy_from_slice(&r.stream_id.to_le_bytes());
    out[12..14].copy_from_slice(&input.output.to_le_bytes());
    out[14..16].copy_from_slice(&flags.to_le_bytes());
    out[16..24].copy_from_slice(&r.frame_seq.to_le_bytes());
    out[24..32].copy_from_slice(&r.ring_seq.to_le_bytes());
    out[32..40].copy_from_slice(&r.sender_ts_ns.to_le_bytes());
    out[40..48].copy_from_slice(&input.message_seq.to_le_bytes());
    out[48..52].copy_from_slice(&r.param_generation.to_le_bytes());
    out[52..56].copy_from_slice(&(payload_len as u32).to_le_bytes());
    out[56..60].copy_from_slice(&(sample_count as u32).to_le_bytes());
    out[60..64].fill(0);
    let mut at = HEADER_LEN;
    if shape.parts & PART_RECORD != 0 {
        // SAFETY: a `repr(C)` record of plain integers and floats viewed as
        // its RECORD_BYTES bytes, for reading only.
        let bytes =
            unsafe { std::slice::from_raw_parts((r as *const ResultRecord).cast::<u8>(), RECORD_BYTES) };
        out[at..at + RECORD_BYTES].copy_from_slice(bytes);
        at += RECORD_BYTES;
    }
    if shape.parts & PART_USER != 0 {
        for w in input.user {
            out[at..at + 4].copy_from_slice(&w.to_le_bytes());
            at += 4;
        }
    }
    for s in &input.samples[..sample_count] {
        out[at..at + 4].copy_from_slice(&s.to_le_bytes());
        at += 4;
    }
    debug_assert_eq!(at, total);
    Some(total)
}

const _: () = assert!(cfg!(target_endian = "little"), "the record part is the in-memory layout");

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(r: &'a ResultRecord, samples: &'a [f32]) -> MessageInput<'a> {
        MessageInput { output: 0, message_seq: 1, flags: 0, record: r, user: &[0; 12], samples }
    }

    fn record() -> ResultRecord {
        ResultRecord {
            result_seq: 9,
            ring_seq: 7,
            frame_seq: 41,
            stream_id: 3,
            sender_ts_ns: 123_456_789,
            sum: 2.5,
            detect_count: 4,
            first_detect_index: 17,
            param_generation: 2,
            user: [5; USER_RESULT_WORDS],
            ..Default::default()
        }
    }

    #[test]
    fn a_formed_message_decodes_to_what_went_in() {
        let r = record();
        let user: [u32; USER_RESULT_WORDS] = std::array::from_fn(|i| i as u32 * 3);
        let samples = [1.0f32, -2.5, 3.25];
        let shape = MessageShape { parts: PART_ALL, samples: 8 };
        let mut buf = vec![0u8; shape.max_bytes() as usize];
        let input = MessageInput {
            output: 2,
            message_seq: 11,
            flags: FLAG_DETECTED,
            record: &r,
            user: &user,
            samples: &samples,
        };
        let n = form(shape, &input, &mut buf).unwrap();
        assert_eq!(n, HEADER_LEN + RECORD_BYTES + USER_BYTES + 12);
        let m = decode(&buf[..n]).unwrap();
        let h = m.header;
        assert_eq!((h.stream_id, h.output, h.frame_seq, h.ring_seq), (3, 2, 41, 7));
        assert_eq!(
            (h.sender_ts_ns, h.message_seq, h.param_generation, h.sample_count),
            (123_456_789, 11, 2, 3)
        );
        assert_eq!(h.flags, FLAG_DETECTED | FLAG_SAMPLES_SHORT, "3 of 8 samples: short");
        assert_eq!(m.record, Some(r));
        assert_eq!(m.user, Some(user));
        assert_eq!(m.samples().collect::<Vec<_>>(), samples);
        assert_eq!(form(shape, &input, &mut buf[..n - 1]), None, "a buffer one byte short");
    }

    #[test]
    fn parts_left_out_are_not_sent_and_samples_past_the_shape_are_cut() {
        let r = record();
        let samples: Vec<f32> = (0..100).map(|i| i as f32).collect();
        let shape = MessageShape { parts: PART_SAMPLES, samples: 10 };
        let mut buf = [0u8; 256];
        let input = input(&r, &samples);
        let n = form(shape, &input, &mut buf).unwrap();
        let m = decode(&buf[..n]).unwrap();
        assert_eq!((m.record, m.user, m.header.flags), (None, None, 0));
        assert_eq!(m.samples().collect::<Vec<_>>(), samples[..10]);
        let n = form(MessageShape { parts: 0, samples: 0 }, &input, &mut buf).unwrap();
        assert_eq!(n, HEADER_LEN, "a header-only message");
        assert_eq!(decode(&buf[..n]).unwrap().header.payload_len, 0);
    }

    #[test]
    fn the_header_field_table_is_where_form_writes_each_field() {
        let r = ResultRecord {
            stream_id: 0x0a0b_0c0d,
            frame_seq: 0x1111_2222_3333_4444,
            ring_seq: 0x5555_6666_7777_8888,
            sender_ts_ns: 0x9999_aaaa_bbbb_cccc,
            param_generation: 0x0102_0304,
            ..Default::default()
        };
        let input = MessageInput {
            output: 0x0e0f,
            message_seq: 0xdddd_eeee_ffff_0123,
            flags: 0x0607,
            record: &r,
            user: &[0; 12],
            samples: &[1.0; 3],
        };
        let mut buf = [0u8; 256];
        let n = form(MessageShape { parts: PART_SAMPLES, samples: 3 }, &input, &mut buf).unwrap();
        let field = |name: &str| HEADER_FIELDS.iter().find(|(f, _)| *f == name).unwrap().1;
        let at = |name: &str, len: usize| buf[field(name)..field(name) + len].to_vec();
        assert_eq!(at("magic", 4), MAGIC);
        assert_eq!(at("version", 1), [VERSION]);
        assert_eq!(at("parts", 1), [PART_SAMPLES]);
        assert_eq!(at("header_len", 2), (HEADER_LEN as u16).to_le_bytes());
        assert_eq!(at("stream_id", 4), r.stream_id.to_le_bytes());
        assert_eq!(at("output", 2), 0x0e0fu16.to_le_bytes());
        assert_eq!(at("flags", 2), 0x0607u16.to_le_bytes());
        assert_eq!(at("frame_seq", 8), r.frame_seq.to_le_bytes());
        assert_eq!(at("ring_seq", 8), r.ring_seq.to_le_bytes());
        assert_eq!(at("sender_ts_ns", 8), r.sender_ts_ns.to_le_bytes());
        assert_eq!(at("message_seq", 8), 0xdddd_eeee_ffff_0123u64.to_le_bytes());
        assert_eq!(at("param_generation", 4), r.param_generation.to_le_bytes());
        assert_eq!(at("payload_len", 4), ((n - HEADER_LEN) as u32).to_le_bytes());
        assert_eq!(at("sample_count", 4), 3u32.to_le_bytes());
    }

    #[test]
    fn the_fuzz_seeds_decode_as_their_names_say() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/seeds/actuation_message");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            match decode(&bytes) {
                Ok(m) => {
                    assert!(!name.starts_with("lying"), "{name} decoded");
                    assert_eq!((m.header.stream_id, m.header.frame_seq), (3, 41), "{name}");
                    if let Some(r) = m.record {
                        assert_eq!((r.frame_seq, r.sender_ts_ns), (41, 123_456_789), "{name}");
                    }
                }
                Err(e) => assert!(name.starts_with("lying"), "{name}: {e}"),
            }
            seen += 1;
        }
        assert!(seen >= 5);
    }

    #[test]
    fn every_lie_is_a_typed_error_not_a_panic() {
        let r = record();
        let mut buf = [0u8; 512];
        let input = input(&r, &[1.0; 4]);
        let n = form(MessageShape { parts: PART_USER | PART_SAMPLES, samples: 4 }, &input, &mut buf).unwrap();
        let good = buf[..n].to_vec();
        let with = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut m = good.clone();
            f(&mut m);
            decode(&m).map(|_| ()).map_err(|e| e.kind())
        };
        assert_eq!(with(&|m| m.truncate(10)), Err("short_header"));
        assert_eq!(with(&|m| m[0] = b'X'), Err("bad_magic"));
        assert_eq!(with(&|m| m[4] = 2), Err("bad_version"));
        assert_eq!(with(&|m| m[6..8].copy_from_slice(&9000u16.to_le_bytes())), Err("bad_header_len"));
        assert_eq!(with(&|m| m[5] = 0x10), Err("unknown_parts"));
        assert_eq!(with(&|m| m.push(0)), Err("payload_len"));
        assert_eq!(with(&|m| m[56..60].copy_from_slice(&5u32.to_le_bytes())), Err("parts_len"));
        assert_eq!(with(&|m| m[5] = PART_USER), Err("parts_len"), "samples without the samples part");
        assert_eq!(with(&|_| {}), Ok(()));
    }
}
