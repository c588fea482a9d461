//! The native frameloop datagram: a fixed 48-byte little-endian header followed by payload.
//!
//! Layout (all integers little-endian), see `docs/wire-format.md`:
//!
//! | offset | size | field          |
//! |-------:|-----:|----------------|
//! | 0      | 4    | magic `FRLP`   |
//! | 4      | 1    | version (1)    |
//! | 5      | 1    | flags          |
//! | 6      | 2    | header length  |
//! | 8      | 4    | stream id      |
//! | 12     | 4    | packet index   |
//! | 16     | 8    | frame sequence |
//! | 24     | 4    | packet count   |
//! | 28     | 4    | payload offset |
//! | 32     | 4    | frame length   |
//! | 36     | 4    | payload length |
//! | 40     | 8    | sender time ns |
//!
//! Parsing is a pure function over bytes: no I/O, no allocation, no panics.

use thiserror::Error;

/// The four magic bytes that open every native datagram.
pub const MAGIC: [u8; 4] = *b"FRLP";
/// The only header version this build understands.
pub const VERSION: u8 = 1;
/// Size of the version-1 header in bytes.
pub const HEADER_LEN: usize = 48;

/// Header flag: the sender marks the last packet of a frame (informational).
pub const FLAG_LAST_PACKET: u8 = 0x01;

/// A parsed native header. Field meanings are in `docs/wire-format.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NativeHeader {
    pub flags: u8,
    pub stream_id: u32,
    pub packet_index: u32,
    pub frame_seq: u64,
    pub packet_count: u32,
    pub payload_offset: u32,
    pub frame_len: u32,
    pub payload_len: u32,
    pub sender_ts_ns: u64,
}

/// A datagram the parser rejects, by kind. Each kind has its own drop counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ParseError {
    /// A datagram shorter than the header; the sender sends something else to this port.
    #[error("datagram of {len} bytes is shorter than the {HEADER_LEN}-byte native header")]
    ShortHeader { len: usize },
    /// Not a frameloop datagram; point only frameloop senders at this port.
    #[error("bad magic {found:02x?}: not a frameloop datagram (expected \"FRLP\")")]
    BadMagic { found: [u8; 4] },
    /// A header version this build does not read; run the same frameloop version on both sides.
    #[error(
        "unsupported header version {found} (this build reads version {VERSION}); upgrade frameloop or the sender"
    )]
    BadVersion { found: u8 },
    /// A header length outside the datagram; the sender writes a bad `header_len`.
    #[error(
        "header length {found} is outside [{HEADER_LEN}, {len}] (the datagram's {len} bytes); the sender writes a bad header_len field"
    )]
    BadHeaderLen { found: u16, len: usize },
    /// Fewer payload bytes than the header announces; the sender or the path cuts datagrams (check
    /// the MTU).
    #[error("datagram holds {available} payload bytes but the header announces {announced}")]
    Truncated { announced: u32, available: usize },
    /// A packet index not below the packet count; the sender numbers packets wrongly.
    #[error("packet index {index} is not below packet count {count}")]
    BadPacketIndex { index: u32, count: u32 },
    /// A payload past the frame's length; the sender's offsets or frame length are wrong.
    #[error("payload [{offset}, {offset}+{len}) crosses the frame length {frame_len}")]
    PayloadOutsideFrame { offset: u32, len: u32, frame_len: u32 },
}

impl ParseError {
    /// Short stable name used for drop counters and metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            ParseError::ShortHeader { .. } => "short_header",
            ParseError::BadMagic { .. } => "bad_magic",
            ParseError::BadVersion { .. } => "bad_version",
            ParseError::BadHeaderLen { .. } => "bad_header_len",
            ParseError::Truncated { .. } => "truncated",
            ParseError::BadPacketIndex { .. } => "bad_packet_index",
            ParseError::PayloadOutsideFrame { .. } => "payload_outside_frame",
        }
    }
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}
fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// The stream id of a datagram that opens with the native magic and is
/// long enough for a header, without checking the rest (routing by stream
/// before the owner of the stream parses the whole header); `None` otherwise.
pub fn peek_stream_id(datagram: &[u8]) -> Option<u32> {
    (datagram.len() >= HEADER_LEN && datagram[..4] == MAGIC).then(|| u32_at(datagram, 8))
}

/// Parses one datagram into its header and payload.
///
/// Checks everything that can be checked without state: magic, version,
/// header length, that the announced payload is present, that the packet index
/// is below the count and that the payload lies inside the announced frame.
/// Trailing bytes past `payload_len` are ignored (some NICs pad).
pub fn parse(datagram: &[u8]) -> Result<(NativeHeader, &[u8]), ParseError> {
    let (h, start) = parse_head(datagram, datagram.len())?;
    let available = datagram.len() - start;
    let truncated = ParseError::Truncated { announced: h.payload_len, available };
    let payload = usize::try_from(h.payload_len)
        .ok()
        .and_then(|len| datagram.get(start..start.checked_add(len)?))
        .ok_or(truncated)?;
    check_placement(&h)?;
    Ok((h, payload))
}

/// The header fields of a datagram of `len` bytes that opens with `head`
/// (the whole datagram, or at least its first [`HEADER_LEN`] bytes), after
/// the magic, version and header length checks; and its header length.
fn parse_head(head: &[u8], len: usize) -> Result<(NativeHeader, usize), ParseError> {
    if head.len() < HEADER_LEN {
        return Err(ParseError::ShortHeader { len });
    }
    let magic = [head[0], head[1], head[2], head[3]];
    if magic != MAGIC {
        return Err(ParseError::BadMagic { found: magic });
    }
    if head[4] != VERSION {
        return Err(ParseError::BadVersion { found: head[4] });
    }
    let header_len = u16_at(head, 6);
    if (header_len as usize) < HEADER_LEN || header_len as usize > len {
        return Err(ParseError::BadHeaderLen { found: header_len, len });
    }
    let h = NativeHeader {
        flags: head[5],
        stream_id: u32_at(head, 8),
        packet_index: u32_at(head, 12),
        frame_seq: u64_at(head, 16),
        packet_count: u32_at(head, 24),
        payload_offset: u32_at(head, 28),
        frame_len: u32_at(head, 32),
        payload_len: u32_at(head, 36),
        sender_ts_ns: u64_at(head, 40),
    };
    Ok((h, header_len as usize))
}

/// The checks of a header that need no state once its payload is known to
/// be present: the packet index below the count, the payload inside the frame.
fn check_placement(h: &NativeHeader) -> Result<(), ParseError> {
    if h.packet_index >= h.packet_count {
        return Err(ParseError::BadPacketIndex { index: h.packet_index, count: h.packet_count });
    }
    let end = h.payload_offset as u64 + h.payload_len as u64;
    if end > h.frame_len as u64 {
        return Err(ParseError::PayloadOutsideFrame {
            offset: h.payload_offset,
            len: h.payload_len,
            frame_len: h.frame_len,
        });
    }
    Ok(())
}

/// Parses a datagram whose first [`HEADER_LEN`] bytes are `head` and whose
/// payload (`available` bytes, starting right after them) lies elsewhere, as
/// the one-copy receive path leaves it. Accepts and rejects exactly what
/// [`parse`] does for the datagram `head ++ payload`, and returns the header;
/// the payload is the first `payload_len` of the `available` bytes.
pub fn parse_split(head: &[u8], available: usize) -> Result<NativeHeader, ParseError> {
    let len = head.len().saturating_add(available);
    let (h, header_len) = parse_head(head, len)?;
    if header_len != head.len() {
        // An extended header runs into what was taken for the payload: only
        // the contiguous datagram can be parsed.
        return Err(ParseError::BadHeaderLen { found: header_len as u16, len });
    }
    if h.payload_len as usize > available {
        return Err(ParseError::Truncated { announced: h.payload_len, available });
    }
    check_placement(&h)?;
    Ok(h)
}

/// Writes a version-1 header into `out[..HEADER_LEN]`.
///
/// # Panics
/// Panics if `out` is shorter than [`HEADER_LEN`] (a programming error of the caller).
pub fn write_header(h: &NativeHeader, out: &mut [u8]) {
    let out = &mut out[..HEADER_LEN];
    out[0..4].copy_from_slice(&MAGIC);
    out[4] = VERSION;
    out[5] = h.flags;
    out[6..8].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
    out[8..12].copy_from_slice(&h.stream_id.to_le_bytes());
    out[12..16].copy_from_slice(&h.packet_index.to_le_bytes());
    out[16..24].copy_from_slice(&h.frame_seq.to_le_bytes());
    out[24..28].copy_from_slice(&h.packet_count.to_le_bytes());
    out[28..32].copy_from_slice(&h.payload_offset.to_le_bytes());
    out[32..36].copy_from_slice(&h.frame_len.to_le_bytes());
    out[36..40].copy_from_slice(&h.payload_len.to_le_bytes());
    out[40..48].copy_from_slice(&h.sender_ts_ns.to_le_bytes());
}

/// Encodes a whole datagram (header plus payload) into a new vector.
pub fn encode(h: &NativeHeader, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; HEADER_LEN + payload.len()];
    let mut h = *h;
    h.payload_len = payload.len() as u32;
    write_header(&h, &mut v);
    v[HEADER_LEN..].copy_from_slice(payload);
    v
}

/// Cuts a whole frame into its datagrams, each with at most `max_payload`
/// payload bytes, the way receivers expect (see [`packet_span`]); the last
/// packet carries [`FLAG_LAST_PACKET`]. For tests, tools and replay files;
/// the sender builds its datagrams in place without allocating.
pub fn encode_frame(
    stream_id: u32,
    frame_seq: u64,
    frame: &[u8],
    max_payload: u32,
    sender_ts_ns: u64,
) -> Vec<Vec<u8>> {
    let frame_len = frame.len() as u32;
    let (count, _, _) = packet_span(frame_len, max_payload, 0);
    (0..count)
        .map(|i| {
            let (_, off, len) = packet_span(frame_len, max_payload, i);
            let h = NativeHeader {
                flags: if i + 1 == count { FLAG_LAST_PACKET } else { 0 },
                stream_id,
                packet_index: i,
                frame_seq,
                packet_count: count,
                payload_offset: off,
                frame_len,
                payload_len: len,
                sender_ts_ns,
            };
            encode(&h, &frame[off as usize..(off + len) as usize])
        })
        .collect()
}

/// How a frame of `frame_len` bytes is cut into packets of at most
/// `max_payload` payload bytes: returns `(packet_count, payload_offset, payload_len)`
/// for packet `index`.
pub fn packet_span(frame_len: u32, max_payload: u32, index: u32) -> (u32, u32, u32) {
    debug_assert!(max_payload > 0);
    let count = frame_len.div_ceil(max_payload).max(1);
    let offset = index.saturating_mul(max_payload).min(frame_len);
    let len = (frame_len - offset).min(max_payload);
    (count, offset, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> NativeHeader {
        NativeHeader {
            flags: FLAG_LAST_PACKET,
            stream_id: 7,
            packet_index: 2,
            frame_seq: 0x1122_3344_5566_7788,
            packet_count: 3,
            payload_offset: 200,
            frame_len: 300,
            payload_len: 100,
            sender_ts_ns: 1_700_000_000_123_456_789,
        }
    }

    #[test]
    fn round_trip() {
        let payload: Vec<u8> = (0..100).map(|i| i as u8).collect();
        let d = encode(&sample(), &payload);
        let (h, p) = parse(&d).unwrap();
        assert_eq!(h, sample());
        assert_eq!(p, &payload[..]);
    }

    #[test]
    fn peeks_the_stream_id_of_a_native_datagram_only() {
        let d = encode(&NativeHeader { stream_id: 0xA1B2_C3D4, ..sample() }, &[0u8; 100]);
        assert_eq!(peek_stream_id(&d), Some(0xA1B2_C3D4));
        assert_eq!(peek_stream_id(&d[..HEADER_LEN]), Some(0xA1B2_C3D4));
        assert_eq!(peek_stream_id(&d[..HEADER_LEN - 1]), None);
        let mut other = d.clone();
        other[1] = b'x';
        assert_eq!(peek_stream_id(&other), None);
    }

    #[test]
    fn rejects_each_malformation_by_kind() {
        let payload = [0u8; 100];
        let good = encode(&sample(), &payload);
        assert_eq!(parse(&good[..10]).unwrap_err().kind(), "short_header");
        let mut d = good.clone();
        d[0] = b'X';
        assert_eq!(parse(&d).unwrap_err().kind(), "bad_magic");
        let mut d = good.clone();
        d[4] = 9;
        assert_eq!(parse(&d).unwrap_err().kind(), "bad_version");
        let mut d = good.clone();
        d[6] = 8;
        d[7] = 0;
        assert_eq!(parse(&d).unwrap_err().kind(), "bad_header_len");
        assert_eq!(parse(&good[..good.len() - 1]).unwrap_err().kind(), "truncated");
        let mut h = sample();
        h.packet_index = 3;
        assert_eq!(parse(&encode(&h, &payload)).unwrap_err().kind(), "bad_packet_index");
        let mut h = sample();
        h.payload_offset = 201;
        assert_eq!(parse(&encode(&h, &payload)).unwrap_err().kind(), "payload_outside_frame");
        let mut h = sample();
        h.payload_offset = u32::MAX;
        assert_eq!(parse(&encode(&h, &payload)).unwrap_err().kind(), "payload_outside_frame");
    }

    #[test]
    fn encode_frame_cuts_like_packet_span() {
        let frame: Vec<u8> = (0..250u32).map(|i| i as u8).collect();
        let datagrams = encode_frame(3, 9, &frame, 100, 77);
        assert_eq!(datagrams.len(), 3);
        let mut joined = Vec::new();
        for (i, d) in datagrams.iter().enumerate() {
            let (h, p) = parse(d).unwrap();
            assert_eq!((h.stream_id, h.frame_seq, h.packet_index, h.packet_count), (3, 9, i as u32, 3));
            assert_eq!((h.payload_offset as usize, h.sender_ts_ns), (joined.len(), 77));
            assert_eq!(h.flags & FLAG_LAST_PACKET != 0, i == 2);
            joined.extend_from_slice(p);
        }
        assert_eq!(joined, frame);
    }

    #[test]
    fn packet_span_covers_frame_exactly() {
        for (frame, mtu) in [(1u32, 1u32), (65536, 8924), (300, 100), (301, 100), (0, 64)] {
            let (count, _, _) = packet_span(frame, mtu, 0);
            let mut next = 0;
            for i in 0..count {
                let (c, off, len) = packet_span(frame, mtu, i);
                assert_eq!(c, count);
                assert_eq!(off, next);
                next = off + len;
            }
            assert_eq!(next, frame);
        }
    }

    #[test]
    fn header_len_beyond_the_datagram_is_rejected_not_a_panic() {
        let mut d = encode(&NativeHeader { packet_count: 1, ..Default::default() }, &[]);
        assert_eq!(d.len(), HEADER_LEN);
        d[6..8].copy_from_slice(&200u16.to_le_bytes());
        assert_eq!(parse(&d).unwrap_err(), ParseError::BadHeaderLen { found: 200, len: 48 });
        d[6..8].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(parse(&d).unwrap_err().kind(), "bad_header_len");
        // A header_len that fits but leaves too little room for the payload.
        let mut d = encode(&sample(), &[0u8; 100]);
        d[6..8].copy_from_slice(&60u16.to_le_bytes());
        assert_eq!(parse(&d).unwrap_err(), ParseError::Truncated { announced: 100, available: 88 });
        // header_len exactly the datagram: payload must be empty.
        let mut d = encode(&NativeHeader { packet_count: 1, ..Default::default() }, &[1, 2]);
        d[6..8].copy_from_slice(&50u16.to_le_bytes());
        assert_eq!(parse(&d).unwrap_err().kind(), "truncated");
        d[36..40].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(parse(&d).unwrap().1, &[] as &[u8]);
    }

    #[test]
    fn payload_len_near_u32_max_is_truncated() {
        let mut d = encode(&sample(), &[0u8; 100]);
        d[36..40].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(parse(&d).unwrap_err().kind(), "truncated");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = parse(&bytes);
        }

        /// Valid magic and version, every other header byte arbitrary: the
        /// payload returned always lies inside the datagram.
        #[test]
        fn parse_of_arbitrary_header_fields_stays_inside(
            mut bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), HEADER_LEN..400),
            header_len in 0u16..450,
        ) {
            bytes[..4].copy_from_slice(&MAGIC);
            bytes[4] = VERSION;
            bytes[6..8].copy_from_slice(&header_len.to_le_bytes());
            if let Ok((h, payload)) = parse(&bytes) {
                proptest::prop_assert_eq!(payload.len(), h.payload_len as usize);
                proptest::prop_assert!(header_len as usize + payload.len() <= bytes.len());
                proptest::prop_assert!(h.packet_index < h.packet_count);
            }
        }

        /// The split parse of the one-copy path agrees with the contiguous
        /// parse on every datagram with a plain 48-byte header, and refuses
        /// every other header length.
        #[test]
        fn split_parse_agrees_with_parse(
            mut bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), HEADER_LEN..400),
            header_len in proptest::prop_oneof![proptest::strategy::Just(HEADER_LEN as u16), 0u16..450],
            small in 0u32..400,
            which in 0usize..4,
        ) {
            bytes[..4].copy_from_slice(&MAGIC);
            bytes[4] = VERSION;
            bytes[6..8].copy_from_slice(&header_len.to_le_bytes());
            // Make the size fields small now and then, so valid headers occur.
            let at = [24, 28, 32, 36][which];
            bytes[at..at + 4].copy_from_slice(&small.to_le_bytes());
            let split = parse_split(&bytes[..HEADER_LEN], bytes.len() - HEADER_LEN);
            match parse(&bytes) {
                _ if header_len as usize != HEADER_LEN => proptest::prop_assert!(split.is_err()),
                Ok((h, _)) => proptest::prop_assert_eq!(split, Ok(h)),
                Err(e) => proptest::prop_assert_eq!(split.map_err(|e| e.kind()), Err(e.kind())),
            }
        }
    }
}
