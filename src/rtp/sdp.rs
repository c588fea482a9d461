//! A minimal SDP reader for RFC 4175 streams: the first `m=video` section's
//! port and payload type, and its `a=fmtp` parameters `sampling`, `width`,
//! `height` and `depth` (RFC 4175 section 6). Everything else is ignored.

use super::geometry::{GeometryError, Sampling, VideoGeometry};
use thiserror::Error;

/// What the SDP says about a raw video stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdpVideo {
    /// Port of the `m=video` line.
    pub port: u16,
    /// Payload type of the `m=video` line (the first listed format).
    pub payload_type: u8,
    pub geometry: VideoGeometry,
    /// `interlace` present in the fmtp line (not assembled by this build).
    pub interlaced: bool,
}

/// An SDP this reader cannot use, naming what is missing or wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SdpError {
    /// The SDP describes no video stream; give one with an `m=video` line.
    #[error("no `m=video <port> RTP/AVP <pt>` line; the SDP must describe a video stream")]
    NoVideo,
    /// A line of the SDP cannot be read (the message names the line and what is wrong).
    #[error("line {line}: {message}")]
    BadLine { line: usize, message: String },
    /// No `a=fmtp` line for the video payload type; add one with sampling, width, height and depth.
    #[error(
        "no `a=fmtp:{0} ...` line for the video payload type; it must give sampling, width, height, depth"
    )]
    NoFmtp(u8),
    /// The `a=fmtp` line lacks a parameter RFC 4175 requires; add it.
    #[error("a=fmtp lacks `{0}=`; RFC 4175 requires sampling, width, height and depth")]
    MissingParameter(&'static str),
    /// The `a=fmtp` geometry cannot be used (the source says how to fix it).
    #[error("a=fmtp: {0}")]
    Geometry(#[from] GeometryError),
}

/// Parses SDP text.
pub fn parse(text: &str) -> Result<SdpVideo, SdpError> {
    let mut video: Option<(u16, u8)> = None;
    let mut in_video = false;
    let mut fmtp: Option<&str> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let bad = |message: &str| SdpError::BadLine { line: i + 1, message: message.to_string() };
        if let Some(m) = line.strip_prefix("m=") {
            in_video = false;
            if video.is_some() {
                continue;
            }
            let mut f = m.split_whitespace();
            if f.next() != Some("video") {
                continue;
            }
            let port =
                f.next().and_then(|p| p.split('/').next()?.parse().ok()).ok_or_else(|| bad("bad port"))?;
            let _proto = f.next().ok_or_else(|| bad("missing transport"))?;
            let pt = f.next().and_then(|p| p.parse::<u8>().ok()).filter(|p| *p < 128);
            video = Some((port, pt.ok_or_else(|| bad("missing or bad payload type (0-127)"))?));
            in_video = true;
        } else if let Some(a) = line.strip_prefix("a=fmtp:") {
            let Some((pt, params)) = a.split_once(char::is_whitespace) else { continue };
            if in_video && fmtp.is_none() && video.is_some_and(|(_, v)| pt.parse::<u8>().ok() == Some(v)) {
                fmtp = Some(params);
            }
        }
    }
    let (port, payload_type) = video.ok_or(SdpError::NoVideo)?;
    let params = fmtp.ok_or(SdpError::NoFmtp(payload_type))?;
    let mut sampling = None;
    let (mut width, mut height, mut depth) = (None, None, None);
    let mut interlaced = false;
    for p in params.split(';') {
        let (k, v) = p.split_once('=').map(|(k, v)| (k.trim(), v.trim())).unwrap_or((p.trim(), ""));
        let number = |name: &'static str| {
            v.parse::<u32>()
                .map_err(|_| SdpError::BadLine { line: 0, message: format!("{name}={v} is not a number") })
        };
        match k.to_ascii_lowercase().as_str() {
            "sampling" => {
                sampling = Some(
                    v.parse::<Sampling>()
                        .map_err(|e| SdpError::BadLine { line: 0, message: e.to_string() })?,
                )
            }
            "width" => width = Some(number("width")?),
            "height" => height = Some(number("height")?),
            "depth" => depth = Some(number("depth")?),
            "interlace" => interlaced = true,
            _ => {}
        }
    }
    let sampling = sampling.ok_or(SdpError::MissingParameter("sampling"))?;
    let width = width.ok_or(SdpError::MissingParameter("width"))?;
    let height = height.ok_or(SdpError::MissingParameter("height"))?;
    let depth = depth.ok_or(SdpError::MissingParameter("depth"))?;
    let depth = u8::try_from(depth).unwrap_or(0);
    let geometry = VideoGeometry::new(sampling, depth, width, height)?;
    Ok(SdpVideo { port, payload_type, geometry, interlaced })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SDP: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=test\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
        m=audio 5000 RTP/AVP 0\r\na=fmtp:0 width=1\r\n\
        m=video 5004 RTP/AVP 96\r\na=rtpmap:96 raw/90000\r\n\
        a=fmtp:96 sampling=YCbCr-4:2:2; width=1280; height=720; exactframerate=60; depth=10; colorimetry=BT709-2\r\n";

    #[test]
    fn parses_the_rfc_example_shape() {
        let v = parse(SDP).unwrap();
        assert_eq!((v.port, v.payload_type, v.interlaced), (5004, 96, false));
        assert_eq!(v.geometry, VideoGeometry::new(Sampling::Ycbcr422, 10, 1280, 720).unwrap());
        assert_eq!(v.geometry.line_bytes(), 3200);
    }

    #[test]
    fn names_what_is_missing() {
        assert_eq!(parse("v=0\n"), Err(SdpError::NoVideo));
        assert_eq!(parse("m=video 5004 RTP/AVP 96\n"), Err(SdpError::NoFmtp(96)));
        let no_depth = "m=video 5004 RTP/AVP 96\na=fmtp:96 sampling=RGB; width=8; height=8\n";
        assert_eq!(parse(no_depth), Err(SdpError::MissingParameter("depth")));
        let bad = "m=video 5004 RTP/AVP 96\na=fmtp:96 sampling=YCbCr-4:2:2; width=7; height=8; depth=8\n";
        assert!(matches!(parse(bad), Err(SdpError::Geometry(GeometryError::BadWidth { .. }))));
        assert!(matches!(parse("m=video x RTP/AVP 96\n"), Err(SdpError::BadLine { line: 1, .. })));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in "(m=video [0-9]{1,6} RTP/AVP [0-9]{1,3}\n|a=fmtp:[0-9]{1,3} [a-z=0-9;:-]{0,40}\n|[ -~]{0,20}\n){0,6}") {
            let _ = parse(&text);
        }
    }
}
