//! Cuts a frame into RFC 4175 packets the way standard senders do: lines in
//! order, several short segments per packet when they fit, long lines split
//! on pixel-group boundaries, the marker bit on the last packet. Used by
//! tests, fuzz seeds and test senders.

use super::geometry::VideoGeometry;
use crate::wire::rtp4175::{self, LINE_HEADER_LEN, LineSegment, RTP_HEADER_LEN, RtpHeader};

/// Packs frames of one geometry into RTP packets of at most `max_packet` bytes.
#[derive(Debug, Clone)]
pub struct Packetizer {
    geometry: VideoGeometry,
    /// Invariant: room for the payload header, one line header and one pixel group.
    max_packet: usize,
    pub payload_type: u8,
    pub ssrc: u32,
    /// Next extended sequence number.
    pub next_seq: u32,
    /// Write the high half of the extended sequence number (some senders leave it zero).
    pub write_ext_seq: bool,
}

impl Packetizer {
    /// A packetizer for `geometry`; `max_packet` (RTP header included) is raised
    /// to the smallest size that carries one pixel group.
    pub fn new(geometry: VideoGeometry, max_packet: usize) -> Self {
        let min = RTP_HEADER_LEN + rtp4175::EXT_SEQ_LEN + LINE_HEADER_LEN + geometry.pgroup_bytes() as usize;
        Self {
            geometry,
            max_packet: max_packet.max(min),
            payload_type: 96,
            ssrc: 0x4652_4c50,
            next_seq: 0,
            write_ext_seq: true,
        }
    }

    /// The packets of one frame (`frame` must hold `frame_bytes()` bytes).
    ///
    /// # Panics
    /// If `frame` is shorter than the geometry's frame size.
    pub fn packetize(&mut self, frame: &[u8], rtp_ts: u32) -> Vec<Vec<u8>> {
        let g = self.geometry;
        assert!(
            frame.len() >= g.frame_bytes(),
            "frame of {} bytes is shorter than the geometry",
            frame.len()
        );
        let pg = g.pgroup_bytes() as usize;
        let line_bytes = g.line_bytes();
        let max_segment = u16::MAX as usize / pg * pg;
        let (mut line, mut in_line) = (0u32, 0usize);
        let mut packets = Vec::new();
        while line < g.height {
            let mut budget = self.max_packet - RTP_HEADER_LEN - rtp4175::EXT_SEQ_LEN;
            let mut segments = Vec::new();
            while line < g.height && budget >= LINE_HEADER_LEN + pg {
                let take = (line_bytes - in_line).min((budget - LINE_HEADER_LEN) / pg * pg).min(max_segment);
                let start = line as usize * line_bytes + in_line;
                let offset = (in_line / pg) as u32 * g.pgroup_pixels();
                segments.push(LineSegment {
                    field: false,
                    line: line as u16,
                    offset: offset as u16,
                    data: &frame[start..start + take],
                });
                budget -= LINE_HEADER_LEN + take;
                in_line += take;
                if in_line == line_bytes {
                    line += 1;
                    in_line = 0;
                }
            }
            let header = RtpHeader {
                marker: line == g.height,
                payload_type: self.payload_type,
                seq: self.next_seq as u16,
                timestamp: rtp_ts,
                ssrc: self.ssrc,
            };
            let mut out = Vec::with_capacity(self.max_packet);
            let high = if self.write_ext_seq { (self.next_seq >> 16) as u16 } else { 0 };
            rtp4175::encode(&header, high, &segments, &mut out);
            debug_assert!(out.len() <= self.max_packet);
            self.next_seq = self.next_seq.wrapping_add(1);
            packets.push(out);
        }
        packets
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtp::geometry::Sampling;

    #[test]
    fn packets_cover_the_frame_once_and_fit() {
        for (w, h, mtu) in [(64u32, 8u32, 1400usize), (640, 4, 1000), (2, 1, 1), (6, 3, 30)] {
            let g = VideoGeometry::new(Sampling::Ycbcr422, 8, w, h).unwrap();
            let frame: Vec<u8> = (0..g.frame_bytes()).map(|i| (i * 7) as u8).collect();
            let mut p = Packetizer::new(g, mtu);
            let packets = p.packetize(&frame, 1234);
            let mut rebuilt = vec![0u8; g.frame_bytes()];
            let mut covered = 0;
            for (i, bytes) in packets.iter().enumerate() {
                let pkt = rtp4175::parse(bytes).unwrap();
                assert_eq!(pkt.header.marker, i + 1 == packets.len());
                assert_eq!(pkt.extended_seq(), i as u32);
                assert!(bytes.len() <= mtu.max(24));
                for s in pkt.segments() {
                    let r = g.segment_range(s.line, s.offset, s.data.len()).unwrap();
                    covered += r.len();
                    rebuilt[r].copy_from_slice(s.data);
                }
            }
            assert_eq!(covered, g.frame_bytes());
            assert_eq!(rebuilt, frame);
        }
    }
}
