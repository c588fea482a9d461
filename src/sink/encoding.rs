//! The compact wire encoding of results and detections sent off the box:
//! fixed little-endian layouts, versioned by their first byte.
//!
//! Result message (`ENCODING_VERSION` 1, kind 1, 176 bytes):
//!
//! | offset | type | field |
//! |---|---|---|
//! | 0 | u8 | version (1) |
//! | 1 | u8 | kind (1 = result) |
//! | 2 | u16 | reserved, 0 |
//! | 4 | u32 | stream_id |
//! | 8 | u64 | result_seq |
//! | 16 | u64 | ring_seq |
//! | 24 | u64 | frame_seq |
//! | 32 | u32 | slot_flags |
//! | 36 | u32 | result_flags |
//! | 40 | u64 | sender_ts_ns |
//! | 48 | u64 | first_rx_ns |
//! | 56 | u64 | last_rx_ns |
//! | 64 | u64 | published_ns |
//! | 72 | u64 | detect_ns |
//! | 80 | u64 | done_ns |
//! | 88 | f32 | sum |
//! | 92 | f32 | min |
//! | 96 | f32 | max |
//! | 100 | f32 | mean |
//! | 104 | u32 | detect_count |
//! | 108 | i32 | first_detect_index |
//! | 112 | u32 | output_len |
//! | 116 | u32 | param_generation (reserved, 0, before live reload: readers that ignore it lose nothing) |
//! | 120 | u64 | skipped_before |
//! | 128 | 12 × u32 | user result words (`fl_user_result` of user kernels; 0 otherwise) |
//!
//! Detection message (version 1, kind 2, 48 bytes): version, kind, reserved
//! u16, stream_id u32 @4, result_seq u64 @8, frame_seq u64 @16, done_ns u64
//! @24, detect_count u32 @32, first_detect_index i32 @36, max f32 @40,
//! result_flags u32 @44.

use crate::ring::ResultRecord;

/// Version byte of every message this module writes.
pub const ENCODING_VERSION: u8 = 1;
/// Kind byte of a result message.
pub const KIND_RESULT: u8 = 1;
/// Kind byte of a detection message.
pub const KIND_DETECTION: u8 = 2;
/// Bytes of an encoded result.
pub const RESULT_MESSAGE_BYTES: usize = 176;
/// Bytes of an encoded detection.
pub const DETECTION_MESSAGE_BYTES: usize = 48;

/// Why a message could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// A message of the wrong length for its kind; decode it with the reader of the version that
    /// wrote it.
    #[error("message is {got} bytes; a version-1 {what} message is {want} bytes")]
    Length { what: &'static str, got: usize, want: usize },
    /// A message of a newer encoding version; upgrade the reader.
    #[error(
        "message version {0} is not supported (this build reads version {ENCODING_VERSION}); upgrade the reader"
    )]
    Version(u8),
    /// A message of another kind; decode it with the decoder of its kind (subscribe to its
    /// subject).
    #[error("message kind {got} is not a {what} (kind {want})")]
    Kind { what: &'static str, got: u8, want: u8 },
}

/// One threshold detection, published as its own event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Detection {
    pub stream_id: u32,
    pub result_seq: u64,
    pub frame_seq: u64,
    pub done_ns: u64,
    pub detect_count: u32,
    pub first_detect_index: i32,
    pub max: f32,
    pub result_flags: u32,
}

impl Detection {
    /// The detection a result carries: `None` unless the chain has a
    /// threshold (`RESULT_HAS_DETECT`) and at least one sample crossed it.
    pub fn of(r: &ResultRecord) -> Option<Self> {
        (r.result_flags & crate::ring::layout::RESULT_HAS_DETECT != 0 && r.detect_count > 0).then_some(Self {
            stream_id: r.stream_id,
            result_seq: r.result_seq,
            frame_seq: r.frame_seq,
            done_ns: r.done_ns,
            detect_count: r.detect_count,
            first_detect_index: r.first_detect_index,
            max: r.max,
            result_flags: r.result_flags,
        })
    }
}

/// Little-endian writer over a fixed-size message.
struct Writer<const N: usize> {
    buf: [u8; N],
    at: usize,
}

impl<const N: usize> Writer<N> {
    fn new(kind: u8) -> Self {
        let mut w = Self { buf: [0; N], at: 0 };
        w.put(&[ENCODING_VERSION, kind, 0, 0]);
        w
    }
    fn put(&mut self, bytes: &[u8]) {
        self.buf[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }
    fn finish(self) -> [u8; N] {
        debug_assert_eq!(self.at, N, "every byte of the layout is written");
        self.buf
    }
}

/// Little-endian reader over a message whose length was checked.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn open(buf: &'a [u8], what: &'static str, want: usize, kind: u8) -> Result<Self, DecodeError> {
        if buf.len() != want {
            return Err(DecodeError::Length { what, got: buf.len(), want });
        }
        if buf[0] != ENCODING_VERSION {
            return Err(DecodeError::Version(buf[0]));
        }
        if buf[1] != kind {
            return Err(DecodeError::Kind { what, got: buf[1], want: kind });
        }
        Ok(Self { buf, at: 4 })
    }
    fn take<const K: usize>(&mut self) -> [u8; K] {
        let mut out = [0; K];
        out.copy_from_slice(&self.buf[self.at..self.at + K]);
        self.at += K;
        out
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn i32(&mut self) -> i32 {
        i32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
    fn f32(&mut self) -> f32 {
        f32::from_le_bytes(self.take())
    }
}

/// Encodes `r` as a version-1 result message.
pub fn encode_result(r: &ResultRecord) -> [u8; RESULT_MESSAGE_BYTES] {
    let mut w = Writer::<RESULT_MESSAGE_BYTES>::new(KIND_RESULT);
    w.put(&r.stream_id.to_le_bytes());
    for v in [r.result_seq, r.ring_seq, r.frame_seq] {
        w.put(&v.to_le_bytes());
    }
    w.put(&r.slot_flags.to_le_bytes());
    w.put(&r.result_flags.to_le_bytes());
    for v in [r.sender_ts_ns, r.first_rx_ns, r.last_rx_ns, r.published_ns, r.detect_ns, r.done_ns] {
        w.put(&v.to_le_bytes());
    }
    for v in [r.sum, r.min, r.max, r.mean] {
        w.put(&v.to_le_bytes());
    }
    w.put(&r.detect_count.to_le_bytes());
    w.put(&r.first_detect_index.to_le_bytes());
    w.put(&r.output_len.to_le_bytes());
    w.put(&r.param_generation.to_le_bytes());
    w.put(&r.skipped_before.to_le_bytes());
    for v in r.user {
        w.put(&v.to_le_bytes());
    }
    w.finish()
}

/// Decodes a version-1 result message (reserved fields come back zero).
pub fn decode_result(buf: &[u8]) -> Result<ResultRecord, DecodeError> {
    let mut rd = Reader::open(buf, "result", RESULT_MESSAGE_BYTES, KIND_RESULT)?;
    let stream_id = rd.u32();
    let (result_seq, ring_seq, frame_seq) = (rd.u64(), rd.u64(), rd.u64());
    let (slot_flags, result_flags) = (rd.u32(), rd.u32());
    let (sender_ts_ns, first_rx_ns, last_rx_ns) = (rd.u64(), rd.u64(), rd.u64());
    let (published_ns, detect_ns, done_ns) = (rd.u64(), rd.u64(), rd.u64());
    let (sum, min, max, mean) = (rd.f32(), rd.f32(), rd.f32(), rd.f32());
    let (detect_count, first_detect_index, output_len) = (rd.u32(), rd.i32(), rd.u32());
    let param_generation = rd.u32();
    let skipped_before = rd.u64();
    let user = std::array::from_fn(|_| rd.u32());
    Ok(ResultRecord {
        result_seq,
        ring_seq,
        frame_seq,
        stream_id,
        slot_flags,
        sender_ts_ns,
        first_rx_ns,
        last_rx_ns,
        published_ns,
        detect_ns,
        done_ns,
        sum,
        min,
        max,
        mean,
        detect_count,
        first_detect_index,
        output_len,
        result_flags,
        skipped_before,
        user,
        param_generation,
        actuate_request: 0,
    })
}

/// Encodes `d` as a version-1 detection message.
pub fn encode_detection(d: &Detection) -> [u8; DETECTION_MESSAGE_BYTES] {
    let mut w = Writer::<DETECTION_MESSAGE_BYTES>::new(KIND_DETECTION);
    w.put(&d.stream_id.to_le_bytes());
    for v in [d.result_seq, d.frame_seq, d.done_ns] {
        w.put(&v.to_le_bytes());
    }
    w.put(&d.detect_count.to_le_bytes());
    w.put(&d.first_detect_index.to_le_bytes());
    w.put(&d.max.to_le_bytes());
    w.put(&d.result_flags.to_le_bytes());
    w.finish()
}

/// Decodes a version-1 detection message.
pub fn decode_detection(buf: &[u8]) -> Result<Detection, DecodeError> {
    let mut rd = Reader::open(buf, "detection", DETECTION_MESSAGE_BYTES, KIND_DETECTION)?;
    Ok(Detection {
        stream_id: rd.u32(),
        result_seq: rd.u64(),
        frame_seq: rd.u64(),
        done_ns: rd.u64(),
        detect_count: rd.u32(),
        first_detect_index: rd.i32(),
        max: rd.f32(),
        result_flags: rd.u32(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::layout::RESULT_HAS_DETECT;

    fn record(seq: u64) -> ResultRecord {
        ResultRecord {
            result_seq: seq,
            ring_seq: seq + 7,
            frame_seq: seq * 3,
            stream_id: 0xdead_beef,
            slot_flags: 5,
            sender_ts_ns: 11,
            first_rx_ns: 12,
            last_rx_ns: 13,
            published_ns: 14,
            detect_ns: 15,
            done_ns: u64::MAX - 1,
            sum: -1.5,
            min: f32::MIN_POSITIVE,
            max: 1e30,
            mean: 0.25,
            detect_count: 9,
            first_detect_index: -1,
            output_len: 4096,
            result_flags: RESULT_HAS_DETECT,
            skipped_before: 2,
            user: [0; 12],
            param_generation: 0x0102_0304,
            actuate_request: 0,
        }
    }

    #[test]
    fn result_round_trips_exactly() {
        let r = record(42);
        let bytes = encode_result(&r);
        assert_eq!(decode_result(&bytes), Ok(r));
        // The layout is fixed: spot-check offsets from the table.
        assert_eq!(bytes[0], ENCODING_VERSION);
        assert_eq!(bytes[1], KIND_RESULT);
        assert_eq!(&bytes[4..8], &0xdead_beefu32.to_le_bytes());
        assert_eq!(&bytes[8..16], &42u64.to_le_bytes());
        assert_eq!(&bytes[80..88], &(u64::MAX - 1).to_le_bytes());
        assert_eq!(&bytes[116..120], &0x0102_0304u32.to_le_bytes());
        assert_eq!(&bytes[120..128], &2u64.to_le_bytes());
    }

    #[test]
    fn detection_round_trips_and_only_exists_when_detected() {
        let r = record(9);
        let d = Detection::of(&r).expect("flagged and counted");
        assert_eq!(decode_detection(&encode_detection(&d)), Ok(d));
        assert_eq!(Detection::of(&ResultRecord { detect_count: 0, ..r }), None);
        assert_eq!(Detection::of(&ResultRecord { result_flags: 0, ..r }), None);
    }

    #[test]
    fn lying_messages_are_rejected() {
        let bytes = encode_result(&record(1));
        assert!(matches!(decode_result(&bytes[..127]), Err(DecodeError::Length { got: 127, .. })));
        let mut v2 = bytes;
        v2[0] = 2;
        assert_eq!(decode_result(&v2), Err(DecodeError::Version(2)));
        let det = encode_detection(&Detection::of(&record(1)).unwrap());
        assert!(matches!(decode_result(&det), Err(DecodeError::Length { .. })));
        let mut wrong_kind = bytes;
        wrong_kind[1] = KIND_DETECTION;
        assert!(matches!(decode_result(&wrong_kind), Err(DecodeError::Kind { got: 2, .. })));
    }
}
