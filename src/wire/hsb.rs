//! The HSB-style datagram format of the emulated sensor bridge: each frame
//! is cut into UDP datagrams that say where their bytes go, so that a
//! receiver can place them like the bridge's DMA engine places a frame in
//! GPU memory. Big-endian, a 16-byte header then the payload:
//!
//! | bytes  | field                                                        |
//! |--------|--------------------------------------------------------------|
//! | 0..2   | magic `0x4853` ("HS")                                         |
//! | 2      | version, 1                                                    |
//! | 3      | flags: bit 0 set on the datagram holding the frame's last byte |
//! | 4..8   | frame counter: 1, 2, 3, ... (never 0; wraps to 1)             |
//! | 8..12  | offset of this datagram's payload in the frame                |
//! | 12..16 | frame length in bytes                                         |
//!
//! A datagram is well formed when `offset + payload <= length` and its
//! last-byte flag is set exactly when `offset + payload == length`.

use thiserror::Error;

/// Header bytes before the payload.
pub const HEADER_LEN: usize = 16;
/// The first two bytes of every datagram.
pub const MAGIC: u16 = 0x4853;
/// The format version this module reads and writes.
pub const VERSION: u8 = 1;
/// `flags` bit: this datagram holds the frame's last byte.
pub const FLAG_LAST: u8 = 1 << 0;

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HsbHeader {
    pub counter: u32,
    pub offset: u32,
    pub frame_len: u32,
    pub last: bool,
}

/// Why a datagram is not a well-formed HSB datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum HsbWireError {
    /// A datagram shorter than the HSB header; the sender sends something else to this port.
    #[error("{len} bytes is shorter than the {HEADER_LEN}-byte HSB header")]
    Short { len: usize },
    /// Not an HSB datagram; send with `--format hsb` or point only HSB senders here.
    #[error("magic {found:#06x} is not the HSB magic {MAGIC:#06x}; is the sender in --format hsb?")]
    Magic { found: u16 },
    /// An HSB version this build does not read; run matching versions on both sides.
    #[error("version {found} is not HSB version {VERSION}; run matching versions on both sides")]
    Version { found: u8 },
    /// Frame counter 0, which is reserved; the sender must count frames from 1.
    #[error("frame counter 0 is reserved (a slot never written); the sender must count frames from 1")]
    ZeroCounter,
    /// A payload past the frame's length; the sender's offsets or frame length are wrong.
    #[error("payload of {payload} bytes at offset {offset} does not fit a frame of {frame_len} bytes")]
    Span { offset: u32, payload: usize, frame_len: u32 },
    /// A last-byte flag that disagrees with the offset; the sender sets the flag wrongly.
    #[error("the last-byte flag disagrees with offset {offset} + {payload} bytes of a frame of {frame_len}")]
    LastFlag { offset: u32, payload: usize, frame_len: u32 },
}

impl HsbHeader {
    /// The header's 16 bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&MAGIC.to_be_bytes());
        b[2] = VERSION;
        b[3] = if self.last { FLAG_LAST } else { 0 };
        b[4..8].copy_from_slice(&self.counter.to_be_bytes());
        b[8..12].copy_from_slice(&self.offset.to_be_bytes());
        b[12..16].copy_from_slice(&self.frame_len.to_be_bytes());
        b
    }
}

/// Parses and checks a datagram: its header and payload.
pub fn parse(datagram: &[u8]) -> Result<(HsbHeader, &[u8]), HsbWireError> {
    if datagram.len() < HEADER_LEN {
        return Err(HsbWireError::Short { len: datagram.len() });
    }
    let be32 =
        |at: usize| u32::from_be_bytes([datagram[at], datagram[at + 1], datagram[at + 2], datagram[at + 3]]);
    let magic = u16::from_be_bytes([datagram[0], datagram[1]]);
    if magic != MAGIC {
        return Err(HsbWireError::Magic { found: magic });
    }
    if datagram[2] != VERSION {
        return Err(HsbWireError::Version { found: datagram[2] });
    }
    let h = HsbHeader {
        counter: be32(4),
        offset: be32(8),
        frame_len: be32(12),
        last: datagram[3] & FLAG_LAST != 0,
    };
    if h.counter == 0 {
        return Err(HsbWireError::ZeroCounter);
    }
    let payload = &datagram[HEADER_LEN..];
    let end = u32::try_from(payload.len()).ok().and_then(|n| h.offset.checked_add(n));
    match end {
        Some(end) if end <= h.frame_len => {
            if h.last != (end == h.frame_len) {
                return Err(HsbWireError::LastFlag {
                    offset: h.offset,
                    payload: payload.len(),
                    frame_len: h.frame_len,
                });
            }
        }
        _ => {
            return Err(HsbWireError::Span {
                offset: h.offset,
                payload: payload.len(),
                frame_len: h.frame_len,
            });
        }
    }
    Ok((h, payload))
}

/// Cuts `frame` into datagrams of at most `chunk` payload bytes (at least
/// 1), in order; an empty frame is one datagram with no payload.
pub fn encode_frame(counter: u32, frame: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    debug_assert!(chunk > 0 && counter != 0);
    let frame_len = u32::try_from(frame.len()).expect("an HSB frame is at most u32::MAX bytes");
    let mut out = Vec::new();
    let mut offset = 0usize;
    loop {
        let end = frame.len().min(offset + chunk.max(1));
        let header = HsbHeader { counter, offset: offset as u32, frame_len, last: end == frame.len() };
        let mut d = Vec::with_capacity(HEADER_LEN + end - offset);
        d.extend_from_slice(&header.encode());
        d.extend_from_slice(&frame[offset..end]);
        out.push(d);
        if end == frame.len() {
            return out;
        }
        offset = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_is_big_endian() {
        let frame: Vec<u8> = (0..25u8).collect();
        let d = encode_frame(0x0102_0304, &frame, 10);
        assert_eq!(d.len(), 3);
        assert_eq!(&d[1][..HEADER_LEN], &[0x48, 0x53, 1, 0, 1, 2, 3, 4, 0, 0, 0, 10, 0, 0, 0, 25]);
        let (h, p) = parse(&d[2]).unwrap();
        assert_eq!(h, HsbHeader { counter: 0x0102_0304, offset: 20, frame_len: 25, last: true });
        assert_eq!(p, &frame[20..]);
        assert_eq!(encode_frame(7, &[], 10).len(), 1);
        assert!(parse(&encode_frame(7, &[], 10)[0]).unwrap().0.last);
    }

    #[test]
    fn refuses_datagrams_that_lie_about_their_sizes() {
        let good = encode_frame(3, &[1, 2, 3, 4], 4).remove(0);
        let with = |at: usize, bytes: &[u8]| {
            let mut d = good.clone();
            d[at..at + bytes.len()].copy_from_slice(bytes);
            parse(&d).map(|_| ())
        };
        assert_eq!(parse(&good[..10]).map(|_| ()), Err(HsbWireError::Short { len: 10 }));
        assert!(matches!(with(0, &[0, 0]), Err(HsbWireError::Magic { .. })));
        assert!(matches!(with(2, &[9]), Err(HsbWireError::Version { found: 9 })));
        assert_eq!(with(4, &[0, 0, 0, 0]), Err(HsbWireError::ZeroCounter));
        // Offset past the end, an offset that overflows, a length too short.
        assert!(matches!(with(8, &[0, 0, 0, 1]), Err(HsbWireError::Span { .. })));
        assert!(matches!(with(8, &[0xff, 0xff, 0xff, 0xfe]), Err(HsbWireError::Span { .. })));
        assert!(matches!(with(12, &[0, 0, 0, 3]), Err(HsbWireError::Span { .. })));
        // Not the last datagram, yet flagged; the last one, not flagged.
        assert!(matches!(with(12, &[0, 0, 0, 9]), Err(HsbWireError::LastFlag { .. })));
        assert!(matches!(with(3, &[0]), Err(HsbWireError::LastFlag { .. })));
    }
}
