//! RTP raw video (RFC 4175): the RTP fixed header (RFC 3550) and the RFC 4175
//! payload header with its line headers, parsed and encoded as pure
//! functions over bytes (no I/O, no allocation while parsing, no panics).
//!
//! Payload layout after the RTP header (CSRCs and header extension skipped):
//!
//! ```text
//! | extended sequence number (16) |
//! | length (16) | F (1) line number (15) | C (1) offset (15) |   one per line segment,
//! | ...                                                     |   C = 1: another follows
//! | segment data, in the order of the line headers          |
//! ```
//!
//! `length` is in bytes, `offset` in pixels from the start of the line, and
//! the marker bit of the RTP header is set on the last packet of a frame.
//! Geometry checks (does a segment lie inside the frame) need the frame's
//! sampling and size and belong to the assembler above it (the `rtp`
//! module); this module only guarantees that every segment's bytes are
//! present in the packet.

use thiserror::Error;

/// Size of the RTP fixed header.
pub const RTP_HEADER_LEN: usize = 12;
/// Size of one RFC 4175 line header.
pub const LINE_HEADER_LEN: usize = 6;
/// Size of the extended sequence number field that opens the payload.
pub const EXT_SEQ_LEN: usize = 2;

/// The fields of the RTP fixed header that frame assembly uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RtpHeader {
    pub marker: bool,
    pub payload_type: u8,
    /// Low 16 bits of the sequence number.
    pub seq: u16,
    /// Media timestamp (90 kHz for video); identifies the frame.
    pub timestamp: u32,
    pub ssrc: u32,
}

/// One line segment of a packet: where its pixels go and the bytes themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineSegment<'a> {
    /// Field bit (second field of an interlaced frame).
    pub field: bool,
    /// Line number (0-based, 15 bits).
    pub line: u16,
    /// Offset of the first pixel in the line (15 bits).
    pub offset: u16,
    /// The segment's bytes (`length` of its line header).
    pub data: &'a [u8],
}

/// A parsed RFC 4175 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawVideoPacket<'a> {
    pub header: RtpHeader,
    /// High 16 bits of the extended sequence number (from the payload header).
    pub ext_seq_high: u16,
    /// Invariant: a whole number of line headers, the last with C = 0 and
    /// every other with C = 1; their lengths sum to at most `data.len()`.
    line_headers: &'a [u8],
    data: &'a [u8],
}

impl<'a> RawVideoPacket<'a> {
    /// The 32-bit extended sequence number: `ext_seq_high << 16 | seq`.
    pub fn extended_seq(&self) -> u32 {
        (self.ext_seq_high as u32) << 16 | self.header.seq as u32
    }

    /// Number of line segments.
    pub fn segment_count(&self) -> usize {
        self.line_headers.len() / LINE_HEADER_LEN
    }

    /// The line segments in packet order.
    pub fn segments(&self) -> Segments<'a> {
        Segments { headers: self.line_headers, data: self.data }
    }

    /// Payload bytes after the line headers that no segment covers (padding by some senders).
    pub fn trailing_bytes(&self) -> usize {
        self.data.len() - self.segments().map(|s| s.data.len()).sum::<usize>()
    }
}

/// Iterator over the segments of a [`RawVideoPacket`].
#[derive(Debug, Clone)]
pub struct Segments<'a> {
    headers: &'a [u8],
    data: &'a [u8],
}

impl<'a> Iterator for Segments<'a> {
    type Item = LineSegment<'a>;

    fn next(&mut self) -> Option<LineSegment<'a>> {
        let (h, rest) = self.headers.split_first_chunk::<LINE_HEADER_LEN>()?;
        self.headers = rest;
        let (length, line_word, offset_word) = decode_line_header(h);
        // Parsing checked that the lengths fit; `min` keeps this total anyway.
        let (data, tail) = self.data.split_at((length as usize).min(self.data.len()));
        self.data = tail;
        Some(LineSegment {
            field: line_word & 0x8000 != 0,
            line: line_word & 0x7fff,
            offset: offset_word & 0x7fff,
            data,
        })
    }
}

fn decode_line_header(h: &[u8; LINE_HEADER_LEN]) -> (u16, u16, u16) {
    (u16::from_be_bytes([h[0], h[1]]), u16::from_be_bytes([h[2], h[3]]), u16::from_be_bytes([h[4], h[5]]))
}

/// A packet the parser rejects, by kind (each kind has its own drop counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RtpParseError {
    /// A packet shorter than the RTP header; the sender sends something else to this port.
    #[error("packet of {len} bytes is shorter than the 12-byte RTP header")]
    ShortHeader { len: usize },
    /// Not RTP version 2; point only RTP senders at this port.
    #[error("RTP version {found}, expected 2: not an RTP packet (is the sender using another protocol?)")]
    BadVersion { found: u8 },
    /// A header whose CSRCs or extension run past the packet; the sender or path cuts packets.
    #[error("RTP header with {csrc} CSRCs and extensions needs {needed} bytes but the packet has {len}")]
    TruncatedHeader { csrc: u8, needed: usize, len: usize },
    /// A padding count of 0 or past the payload; the sender pads wrongly.
    #[error("padding count {count} is zero or larger than the {available} payload bytes")]
    BadPadding { count: u8, available: usize },
    /// No room for the RFC 4175 payload header; the sender is not sending RFC 4175 video.
    #[error("payload of {len} bytes has no room for the RFC 4175 payload header (8 bytes at least)")]
    ShortPayload { len: usize },
    /// Line headers without an end; the sender writes bad continuation bits.
    #[error("line headers run past the end of the payload (the last has its continuation bit set)")]
    UnterminatedLineHeaders,
    /// Line segments longer than the packet; the sender or path cuts packets.
    #[error("line segments announce {announced} bytes but the packet carries {available}")]
    TruncatedSegments { announced: usize, available: usize },
}

impl RtpParseError {
    /// Short stable name used for drop counters.
    pub fn kind(&self) -> &'static str {
        match self {
            RtpParseError::ShortHeader { .. } => "rtp_short_header",
            RtpParseError::BadVersion { .. } => "rtp_bad_version",
            RtpParseError::TruncatedHeader { .. } => "rtp_truncated_header",
            RtpParseError::BadPadding { .. } => "rtp_bad_padding",
            RtpParseError::ShortPayload { .. } => "rtp_short_payload",
            RtpParseError::UnterminatedLineHeaders => "rtp_unterminated_line_headers",
            RtpParseError::TruncatedSegments { .. } => "rtp_truncated_segments",
        }
    }
}

/// Parses the RTP header, returning it and the payload (CSRCs, the header
/// extension and padding removed).
pub fn parse_rtp(packet: &[u8]) -> Result<(RtpHeader, &[u8]), RtpParseError> {
    if packet.len() < RTP_HEADER_LEN {
        return Err(RtpParseError::ShortHeader { len: packet.len() });
    }
    let version = packet[0] >> 6;
    if version != 2 {
        return Err(RtpParseError::BadVersion { found: version });
    }
    let padding = packet[0] & 0x20 != 0;
    let extension = packet[0] & 0x10 != 0;
    let csrc = packet[0] & 0x0f;
    let header = RtpHeader {
        marker: packet[1] & 0x80 != 0,
        payload_type: packet[1] & 0x7f,
        seq: u16::from_be_bytes([packet[2], packet[3]]),
        timestamp: u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]),
        ssrc: u32::from_be_bytes([packet[8], packet[9], packet[10], packet[11]]),
    };
    let mut start = RTP_HEADER_LEN + 4 * csrc as usize;
    let truncated = |needed| RtpParseError::TruncatedHeader { csrc, needed, len: packet.len() };
    if extension {
        if packet.len() < start + 4 {
            return Err(truncated(start + 4));
        }
        let words = u16::from_be_bytes([packet[start + 2], packet[start + 3]]) as usize;
        start += 4 + 4 * words;
    }
    if packet.len() < start {
        return Err(truncated(start));
    }
    let mut end = packet.len();
    if padding {
        let count = packet[end - 1];
        let available = end - start;
        if count == 0 || count as usize > available {
            return Err(RtpParseError::BadPadding { count, available });
        }
        end -= count as usize;
    }
    Ok((header, &packet[start..end]))
}

/// Parses a whole RFC 4175 packet: RTP header, extended sequence number and
/// line headers. Guarantees every segment's bytes are inside the packet.
pub fn parse(packet: &[u8]) -> Result<RawVideoPacket<'_>, RtpParseError> {
    let (header, payload) = parse_rtp(packet)?;
    if payload.len() < EXT_SEQ_LEN + LINE_HEADER_LEN {
        return Err(RtpParseError::ShortPayload { len: payload.len() });
    }
    let ext_seq_high = u16::from_be_bytes([payload[0], payload[1]]);
    let after_seq = &payload[EXT_SEQ_LEN..];
    let mut headers_len = 0;
    let mut announced = 0usize;
    loop {
        let Some(h) = after_seq.get(headers_len..headers_len + LINE_HEADER_LEN) else {
            return Err(RtpParseError::UnterminatedLineHeaders);
        };
        headers_len += LINE_HEADER_LEN;
        announced += u16::from_be_bytes([h[0], h[1]]) as usize;
        if h[4] & 0x80 == 0 {
            break;
        }
    }
    let (line_headers, data) = after_seq.split_at(headers_len);
    if announced > data.len() {
        return Err(RtpParseError::TruncatedSegments { announced, available: data.len() });
    }
    Ok(RawVideoPacket { header, ext_seq_high, line_headers, data })
}

/// Writes an RTP fixed header (version 2, no padding, no extension, no CSRC).
pub fn write_rtp_header(h: &RtpHeader, out: &mut Vec<u8>) {
    out.push(0x80);
    out.push((h.marker as u8) << 7 | (h.payload_type & 0x7f));
    out.extend_from_slice(&h.seq.to_be_bytes());
    out.extend_from_slice(&h.timestamp.to_be_bytes());
    out.extend_from_slice(&h.ssrc.to_be_bytes());
}

/// Encodes a whole RFC 4175 packet into `out` (cleared first). Lines and
/// offsets are truncated to their 15-bit fields and lengths to 16 bits, so
/// callers cut segments to at most 65535 bytes.
pub fn encode(h: &RtpHeader, ext_seq_high: u16, segments: &[LineSegment<'_>], out: &mut Vec<u8>) {
    out.clear();
    write_rtp_header(h, out);
    out.extend_from_slice(&ext_seq_high.to_be_bytes());
    for (i, s) in segments.iter().enumerate() {
        debug_assert!(s.data.len() <= u16::MAX as usize);
        let more = i + 1 < segments.len();
        out.extend_from_slice(&(s.data.len() as u16).to_be_bytes());
        out.extend_from_slice(&((s.field as u16) << 15 | (s.line & 0x7fff)).to_be_bytes());
        out.extend_from_slice(&((more as u16) << 15 | (s.offset & 0x7fff)).to_be_bytes());
    }
    for s in segments {
        out.extend_from_slice(s.data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_header() -> RtpHeader {
        RtpHeader { marker: true, payload_type: 96, seq: 0xfffe, timestamp: 90_000, ssrc: 0xdead_beef }
    }

    fn sample_packet() -> Vec<u8> {
        let a = [1u8; 8];
        let b = [2u8; 4];
        let segs = [
            LineSegment { field: false, line: 3, offset: 6, data: &a },
            LineSegment { field: true, line: 0x7fff, offset: 0, data: &b },
        ];
        let mut out = Vec::new();
        encode(&sample_header(), 7, &segs, &mut out);
        out
    }

    #[test]
    fn round_trip_two_segments() {
        let bytes = sample_packet();
        let p = parse(&bytes).unwrap();
        assert_eq!(p.header, sample_header());
        assert_eq!(p.extended_seq(), 7 << 16 | 0xfffe);
        assert_eq!(p.segment_count(), 2);
        let segs: Vec<_> = p.segments().collect();
        assert_eq!((segs[0].line, segs[0].offset, segs[0].field, segs[0].data), (3, 6, false, &[1u8; 8][..]));
        assert_eq!(
            (segs[1].line, segs[1].offset, segs[1].field, segs[1].data),
            (0x7fff, 0, true, &[2u8; 4][..])
        );
        assert_eq!(p.trailing_bytes(), 0);
    }

    #[test]
    fn skips_csrc_extension_and_padding() {
        let inner = sample_packet();
        let mut bytes = inner[..RTP_HEADER_LEN].to_vec();
        bytes[0] |= 0x20 | 0x10 | 2; // padding, extension, two CSRCs
        bytes.extend_from_slice(&[9; 8]); // CSRCs
        bytes.extend_from_slice(&[0xbe, 0xde, 0, 1, 0xaa, 0xbb, 0xcc, 0xdd]); // one-word extension
        bytes.extend_from_slice(&inner[RTP_HEADER_LEN..]);
        bytes.extend_from_slice(&[0, 0, 3]); // three bytes of padding
        let p = parse(&bytes).unwrap();
        assert_eq!(p.header, sample_header());
        assert_eq!(p.segments().map(|s| s.data.len()).collect::<Vec<_>>(), vec![8, 4]);
        assert_eq!(p.trailing_bytes(), 0);
    }

    #[test]
    fn rejects_each_malformation_by_kind() {
        let good = sample_packet();
        assert_eq!(parse(&good[..11]).unwrap_err().kind(), "rtp_short_header");
        let mut d = good.clone();
        d[0] = 0x40;
        assert_eq!(parse(&d).unwrap_err().kind(), "rtp_bad_version");
        let mut d = good.clone();
        d[0] |= 0x0f; // 15 CSRCs do not fit
        assert_eq!(parse(&d).unwrap_err().kind(), "rtp_truncated_header");
        let mut d = good.clone();
        d[0] |= 0x10;
        d[RTP_HEADER_LEN + 2] = 0xff; // extension length far past the end
        assert_eq!(parse(&d).unwrap_err().kind(), "rtp_truncated_header");
        let mut d = good.clone();
        d[0] |= 0x20;
        *d.last_mut().unwrap() = 0;
        assert_eq!(parse(&d).unwrap_err().kind(), "rtp_bad_padding");
        let mut d = good.clone();
        d[0] |= 0x20;
        *d.last_mut().unwrap() = 255;
        assert_eq!(parse(&d).unwrap_err().kind(), "rtp_bad_padding");
        assert_eq!(parse(&good[..RTP_HEADER_LEN + 7]).unwrap_err().kind(), "rtp_short_payload");
        let mut d = good.clone();
        d[RTP_HEADER_LEN + 2 + 6 + 4] |= 0x80; // continuation on the last header
        assert_eq!(parse(&d[..RTP_HEADER_LEN + 2 + 12]).unwrap_err().kind(), "rtp_unterminated_line_headers");
        assert_eq!(parse(&good[..good.len() - 1]).unwrap_err().kind(), "rtp_truncated_segments");
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics_and_segments_stay_inside(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            if let Ok(p) = parse(&bytes) {
                let total: usize = p.segments().map(|s| s.data.len()).sum();
                proptest::prop_assert!(total + p.trailing_bytes() <= bytes.len());
            }
        }
    }
}
