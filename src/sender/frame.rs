//! Cutting a frame into native datagrams: the geometry shared by every frame
//! of a run, a reusable per-frame buffer, and a pure builder for tests.
//!
//! A frame of `frame_bytes` bytes becomes `packet_count` datagrams of at most
//! `packet_bytes` bytes each (48-byte header included), cut by
//! [`crate::wire::native::packet_span`]; every packet of a frame carries the
//! same sender timestamp and the last one has [`FLAG_LAST_PACKET`].

use super::{Pattern, SendError};
use crate::wire::native::{self, FLAG_LAST_PACKET, HEADER_LEN, NativeHeader};

/// Largest UDP payload of one IPv4 datagram (65535 - 20 IP - 8 UDP).
pub const MAX_DATAGRAM_BYTES: usize = 65_507;

/// How every frame of a run is cut into datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameGeometry {
    /// Frame length in bytes, at least 1.
    frame_bytes: u32,
    /// Datagram size including the header, in `HEADER_LEN + 1 ..= MAX_DATAGRAM_BYTES`.
    packet_bytes: usize,
    /// Packets per frame, `ceil(frame_bytes / (packet_bytes - HEADER_LEN))`.
    packet_count: u32,
}

impl FrameGeometry {
    /// Checks the sizes and derives the packet count.
    pub fn new(frame_bytes: u64, packet_bytes: usize) -> Result<Self, SendError> {
        if packet_bytes <= HEADER_LEN || packet_bytes > MAX_DATAGRAM_BYTES {
            return Err(SendError::PacketBytes { packet_bytes });
        }
        let frame_bytes = u32::try_from(frame_bytes)
            .ok()
            .filter(|&f| f > 0)
            .ok_or(SendError::FrameBytes { frame_bytes })?;
        let (packet_count, _, _) = native::packet_span(frame_bytes, (packet_bytes - HEADER_LEN) as u32, 0);
        Ok(FrameGeometry { frame_bytes, packet_bytes, packet_count })
    }

    /// Payload bytes of one frame.
    pub fn frame_bytes(&self) -> u32 {
        self.frame_bytes
    }

    /// Datagram size (header included) of every packet but possibly the last.
    pub fn packet_bytes(&self) -> usize {
        self.packet_bytes
    }

    /// Datagrams one frame takes.
    pub fn packet_count(&self) -> u32 {
        self.packet_count
    }

    fn max_payload(&self) -> u32 {
        (self.packet_bytes - HEADER_LEN) as u32
    }

    /// `(payload_offset, payload_len)` of packet `index`.
    pub fn span(&self, index: u32) -> (u32, u32) {
        debug_assert!(index < self.packet_count);
        let (_, offset, len) = native::packet_span(self.frame_bytes, self.max_payload(), index);
        (offset, len)
    }

    /// Header of packet `index` of frame (`stream`, `seq`) stamped `ts_ns`.
    pub fn header(&self, stream: u32, seq: u64, index: u32, ts_ns: u64) -> NativeHeader {
        let (payload_offset, payload_len) = self.span(index);
        NativeHeader {
            flags: if index + 1 == self.packet_count { FLAG_LAST_PACKET } else { 0 },
            stream_id: stream,
            packet_index: index,
            frame_seq: seq,
            packet_count: self.packet_count,
            payload_offset,
            frame_len: self.frame_bytes,
            payload_len,
            sender_ts_ns: ts_ns,
        }
    }
}

/// One frame's headers and payload in buffers reused from frame to frame:
/// packet `i` on the wire is `headers[i]` followed by its span of `payload`.
pub struct FrameBuffer {
    geometry: FrameGeometry,
    /// One encoded header per packet; `len() == geometry.packet_count()`.
    headers: Vec<[u8; HEADER_LEN]>,
    /// The frame payload; `len() == geometry.frame_bytes()`.
    payload: Vec<u8>,
    /// The payload holds the `static` pattern already.
    static_filled: bool,
}

impl FrameBuffer {
    /// A zeroed frame of `geometry`, headers and payload.
    pub fn new(geometry: FrameGeometry) -> Self {
        FrameBuffer {
            geometry,
            headers: vec![[0u8; HEADER_LEN]; geometry.packet_count() as usize],
            payload: vec![0u8; geometry.frame_bytes() as usize],
            static_filled: false,
        }
    }

    /// The frame's geometry.
    pub fn geometry(&self) -> &FrameGeometry {
        &self.geometry
    }

    /// Writes the payload of frame (`stream`, `seq`).
    pub fn fill_payload(&mut self, pattern: Pattern, stream: u32, seq: u64) {
        if pattern == Pattern::Static && self.static_filled {
            return;
        }
        pattern.fill(stream, seq, 0, &mut self.payload);
        self.static_filled = pattern == Pattern::Static;
    }

    /// The payload, to fill with a frame of one's own (`geometry().frame_bytes()` bytes).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.static_filled = false;
        &mut self.payload
    }

    /// Writes every packet header of frame (`stream`, `seq`) with timestamp `ts_ns`.
    pub fn write_headers(&mut self, stream: u32, seq: u64, ts_ns: u64) {
        debug_assert_eq!(self.headers.len(), self.geometry.packet_count() as usize);
        for (index, out) in self.headers.iter_mut().enumerate() {
            native::write_header(&self.geometry.header(stream, seq, index as u32, ts_ns), out);
        }
    }

    /// The header bytes and payload bytes of packet `index`.
    pub fn packet(&self, index: u32) -> (&[u8; HEADER_LEN], &[u8]) {
        let (offset, len) = self.geometry.span(index);
        (&self.headers[index as usize], &self.payload[offset as usize..(offset + len) as usize])
    }

    /// Packet `index` as one contiguous datagram.
    pub fn datagram(&self, index: u32) -> Vec<u8> {
        let (header, payload) = self.packet(index);
        let mut d = Vec::with_capacity(HEADER_LEN + payload.len());
        d.extend_from_slice(header);
        d.extend_from_slice(payload);
        d
    }
}

/// The datagrams of frame (`stream`, `seq`), exactly as the sender puts them
/// on the wire, built without I/O.
pub fn build_frame_datagrams(
    stream: u32,
    seq: u64,
    frame_bytes: u64,
    packet_bytes: usize,
    ts_ns: u64,
    pattern: Pattern,
) -> Result<impl Iterator<Item = Vec<u8>>, SendError> {
    let mut frame = FrameBuffer::new(FrameGeometry::new(frame_bytes, packet_bytes)?);
    frame.fill_payload(pattern, stream, seq);
    frame.write_headers(stream, seq, ts_ns);
    let count = frame.geometry().packet_count();
    Ok((0..count).map(move |i| frame.datagram(i)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_rejects_sizes_that_cannot_work() {
        assert!(matches!(FrameGeometry::new(100, 48), Err(SendError::PacketBytes { .. })));
        assert!(matches!(FrameGeometry::new(100, 65_508), Err(SendError::PacketBytes { .. })));
        assert!(matches!(FrameGeometry::new(0, 1000), Err(SendError::FrameBytes { .. })));
        assert!(matches!(FrameGeometry::new(1 << 32, 1000), Err(SendError::FrameBytes { .. })));
        assert_eq!(FrameGeometry::new(1, 49).unwrap().packet_count(), 1);
        assert_eq!(FrameGeometry::new(65536, 8972).unwrap().packet_count(), 8);
        assert_eq!(FrameGeometry::new(65536, 1472).unwrap().packet_count(), 47);
    }

    #[test]
    fn only_the_last_packet_is_flagged_and_short() {
        let g = FrameGeometry::new(1000, 48 + 300).unwrap();
        let h: Vec<_> = (0..g.packet_count()).map(|i| g.header(1, 2, i, 3)).collect();
        assert_eq!(h.len(), 4);
        assert!(h[..3].iter().all(|h| h.flags == 0 && h.payload_len == 300));
        assert_eq!((h[3].flags, h[3].payload_offset, h[3].payload_len), (FLAG_LAST_PACKET, 900, 100));
    }
}
