//! Frame geometry of RFC 4175 raw video: sampling, bit depth and size, and the
//! pixel group ("pgroup") arithmetic that maps a line segment to frame bytes.
//!
//! Frames are stored line after line with no padding, each line
//! `width / pgroup_pixels * pgroup_bytes` bytes: exactly the packed layout
//! the RTP payload carries (UYVY for 8-bit 4:2:2, as GStreamer's `UYVY`).

use std::fmt;
use std::str::FromStr;

/// Colour sampling of the `sampling=` SDP parameter (RFC 4175 section 6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sampling {
    /// `YCbCr-4:2:2`: Cb Y0 Cr Y1 per two pixels (UYVY at depth 8).
    Ycbcr422,
    /// `YCbCr-4:4:4`.
    Ycbcr444,
    /// `RGB`.
    Rgb,
    /// `BGR`.
    Bgr,
    /// `RGBA`.
    Rgba,
    /// `BGRA`.
    Bgra,
}

impl Sampling {
    /// Every sampling this build assembles, with its SDP name.
    pub const ALL: [(Sampling, &'static str); 6] = [
        (Sampling::Ycbcr422, "YCbCr-4:2:2"),
        (Sampling::Ycbcr444, "YCbCr-4:4:4"),
        (Sampling::Rgb, "RGB"),
        (Sampling::Bgr, "BGR"),
        (Sampling::Rgba, "RGBA"),
        (Sampling::Bgra, "BGRA"),
    ];

    /// The SDP name (`YCbCr-4:2:2`, `RGB`, ...).
    pub fn sdp_name(self) -> &'static str {
        Self::ALL.iter().find(|(s, _)| *s == self).map(|(_, n)| *n).unwrap_or("?")
    }

    /// `(bytes, pixels)` of one pixel group at `depth` bits, as in RFC 4175
    /// section 4.3; `None` for a depth the sampling does not define.
    pub fn pgroup(self, depth: u8) -> Option<(u32, u32)> {
        match (self, depth) {
            (Sampling::Ycbcr422, 8) => Some((4, 2)),
            (Sampling::Ycbcr422, 10) => Some((5, 2)),
            (Sampling::Ycbcr422, 12) => Some((6, 2)),
            (Sampling::Ycbcr422, 16) => Some((8, 2)),
            (Sampling::Ycbcr444 | Sampling::Rgb | Sampling::Bgr, 8) => Some((3, 1)),
            (Sampling::Ycbcr444 | Sampling::Rgb | Sampling::Bgr, 10) => Some((15, 4)),
            (Sampling::Ycbcr444 | Sampling::Rgb | Sampling::Bgr, 12) => Some((9, 2)),
            (Sampling::Ycbcr444 | Sampling::Rgb | Sampling::Bgr, 16) => Some((6, 1)),
            (Sampling::Rgba | Sampling::Bgra, 8) => Some((4, 1)),
            (Sampling::Rgba | Sampling::Bgra, 10) => Some((5, 1)),
            (Sampling::Rgba | Sampling::Bgra, 12) => Some((6, 1)),
            (Sampling::Rgba | Sampling::Bgra, 16) => Some((8, 1)),
            _ => None,
        }
    }
}

impl fmt::Display for Sampling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.sdp_name())
    }
}

impl Sampling {
    /// Every sampling's SDP name, comma-separated (for messages).
    fn names() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|(_, n)| *n).collect();
        names.join(", ")
    }
}

impl FromStr for Sampling {
    type Err = GeometryError;
    fn from_str(s: &str) -> Result<Self, GeometryError> {
        Self::ALL
            .iter()
            .find(|(_, n)| n.eq_ignore_ascii_case(s.trim()))
            .map(|(v, _)| *v)
            .ok_or_else(|| GeometryError::UnknownSampling { name: s.to_owned() })
    }
}

/// Why a geometry cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GeometryError {
    /// A bit depth the sampling does not define; use 8, 10, 12 or 16.
    #[error("depth {depth} is not defined for sampling {sampling}; use 8, 10, 12 or 16")]
    BadDepth { sampling: Sampling, depth: u8 },
    /// A width that is not a positive multiple of a pixel group, or too wide; fix the width.
    #[error("width {width} must be a positive multiple of {pixels} (one pixel group) and at most 32768")]
    BadWidth { width: u32, pixels: u32 },
    /// A height of 0 or above 32768; give a height from 1 to 32768.
    #[error("height {height} must be between 1 and 32768 (RFC 4175 line numbers have 15 bits)")]
    BadHeight { height: u32 },
    /// A sampling this build does not know; use one of those the message lists.
    #[error("unsupported sampling \"{name}\"; use one of {}", Sampling::names())]
    UnknownSampling { name: String },
}

/// Geometry of a progressive frame. Construct with [`VideoGeometry::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VideoGeometry {
    pub sampling: Sampling,
    pub depth: u8,
    pub width: u32,
    pub height: u32,
    /// Invariant: `(pgroup_bytes, pgroup_pixels) == sampling.pgroup(depth)`,
    /// `width % pgroup_pixels == 0`, `1 <= width, height <= 32768`.
    pgroup_bytes: u32,
    pgroup_pixels: u32,
}

impl VideoGeometry {
    /// Checks the combination and computes the pixel group.
    pub fn new(sampling: Sampling, depth: u8, width: u32, height: u32) -> Result<Self, GeometryError> {
        let (pgroup_bytes, pgroup_pixels) =
            sampling.pgroup(depth).ok_or(GeometryError::BadDepth { sampling, depth })?;
        if width == 0 || width > 32768 || !width.is_multiple_of(pgroup_pixels) {
            return Err(GeometryError::BadWidth { width, pixels: pgroup_pixels });
        }
        if height == 0 || height > 32768 {
            return Err(GeometryError::BadHeight { height });
        }
        Ok(Self { sampling, depth, width, height, pgroup_bytes, pgroup_pixels })
    }

    /// Bytes of one pixel group.
    pub fn pgroup_bytes(&self) -> u32 {
        self.pgroup_bytes
    }

    /// Pixels of one pixel group.
    pub fn pgroup_pixels(&self) -> u32 {
        self.pgroup_pixels
    }

    /// Bytes of one line.
    pub fn line_bytes(&self) -> usize {
        (self.width / self.pgroup_pixels) as usize * self.pgroup_bytes as usize
    }

    /// Bytes of one frame.
    pub fn frame_bytes(&self) -> usize {
        self.line_bytes() * self.height as usize
    }

    /// The byte range in the frame of a segment of `len` bytes at pixel
    /// `offset` of `line`, or why it does not fit. Never returns a range
    /// outside `[0, frame_bytes)`.
    pub fn segment_range(
        &self,
        line: u16,
        offset: u16,
        len: usize,
    ) -> Result<std::ops::Range<usize>, SegmentFault> {
        if line as u32 >= self.height {
            return Err(SegmentFault::LineOutsideFrame);
        }
        if !(offset as u32).is_multiple_of(self.pgroup_pixels)
            || !len.is_multiple_of(self.pgroup_bytes as usize)
        {
            return Err(SegmentFault::NotPgroupAligned);
        }
        let start_in_line = (offset as u32 / self.pgroup_pixels) as usize * self.pgroup_bytes as usize;
        if start_in_line + len > self.line_bytes() {
            return Err(SegmentFault::PastLineEnd);
        }
        let start = line as usize * self.line_bytes() + start_in_line;
        debug_assert!(start + len <= self.frame_bytes());
        Ok(start..start + len)
    }
}

/// Why a line segment was refused (each a drop counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentFault {
    /// Line number at or past the frame height.
    LineOutsideFrame,
    /// Offset or length not a whole number of pixel groups.
    NotPgroupAligned,
    /// Segment runs past the end of its line.
    PastLineEnd,
}

impl SegmentFault {
    /// Stable counter name.
    pub fn kind(self) -> &'static str {
        match self {
            SegmentFault::LineOutsideFrame => "line_outside_frame",
            SegmentFault::NotPgroupAligned => "not_pgroup_aligned",
            SegmentFault::PastLineEnd => "past_line_end",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uyvy_geometry() {
        let g = VideoGeometry::new(Sampling::Ycbcr422, 8, 640, 480).unwrap();
        assert_eq!(g.line_bytes(), 1280);
        assert_eq!(g.frame_bytes(), 614_400);
        assert_eq!(g.segment_range(1, 2, 8), Ok(1284..1292));
        assert_eq!(g.segment_range(479, 638, 4), Ok(614_396..614_400));
        assert_eq!(g.segment_range(480, 0, 4), Err(SegmentFault::LineOutsideFrame));
        assert_eq!(g.segment_range(0, 1, 4), Err(SegmentFault::NotPgroupAligned));
        assert_eq!(g.segment_range(0, 0, 6), Err(SegmentFault::NotPgroupAligned));
        assert_eq!(g.segment_range(0, 638, 8), Err(SegmentFault::PastLineEnd));
        assert_eq!(g.segment_range(0, 0x7ffe, 4), Err(SegmentFault::PastLineEnd));
    }

    #[test]
    fn rejects_bad_geometry() {
        assert!(matches!(
            VideoGeometry::new(Sampling::Ycbcr422, 9, 640, 480),
            Err(GeometryError::BadDepth { .. })
        ));
        assert!(matches!(
            VideoGeometry::new(Sampling::Ycbcr422, 8, 641, 480),
            Err(GeometryError::BadWidth { .. })
        ));
        assert!(matches!(VideoGeometry::new(Sampling::Rgb, 10, 6, 480), Err(GeometryError::BadWidth { .. })));
        assert!(matches!(VideoGeometry::new(Sampling::Rgb, 8, 6, 0), Err(GeometryError::BadHeight { .. })));
        assert_eq!(VideoGeometry::new(Sampling::Rgb, 10, 8, 1).unwrap().line_bytes(), 30);
    }

    #[test]
    fn sampling_names_round_trip() {
        for (s, n) in Sampling::ALL {
            assert_eq!(n.parse::<Sampling>().unwrap(), s);
            assert_eq!(s.to_string(), n);
        }
        assert!("YCbCr-4:2:0".parse::<Sampling>().unwrap_err().to_string().contains("YCbCr-4:2:2"));
    }

    proptest::proptest! {
        #[test]
        fn segment_range_stays_inside_the_frame(line in 0u16..0x8000, offset in 0u16..0x8000, len in 0usize..70000) {
            let g = VideoGeometry::new(Sampling::Ycbcr422, 10, 64, 16).unwrap();
            if let Ok(r) = g.segment_range(line, offset, len) {
                proptest::prop_assert!(r.end <= g.frame_bytes() && r.len() == len);
            }
        }
    }
}
