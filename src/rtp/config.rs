//! The `[rtp]` config section: geometry of an RFC 4175 stream, given either
//! inline (`width`, `height`, `sampling`, `depth`) or by an SDP file (`sdp`).
//!
//! ```toml
//! [rtp]
//! width = 640
//! height = 480
//! sampling = "YCbCr-4:2:2"
//! depth = 8
//! # or: sdp = "/etc/frameloop/camera.sdp"
//! payload_type = 96      # optional: drop packets of other payload types
//! stream_id = 0          # stream id written into slot headers
//! frame_timeout_ms = 100 # publish an unfinished frame this long after its first packet
//! ```

use super::geometry::{Sampling, VideoGeometry};
use super::sdp;
use crate::config_problem::{ConfigProblem, check_range};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Keys of the `[rtp]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RtpConfig {
    pub width: Option<u32>,
    pub height: Option<u32>,
    /// SDP sampling name, e.g. `YCbCr-4:2:2`.
    pub sampling: Option<String>,
    pub depth: Option<u8>,
    /// SDP file giving the geometry (and payload type) instead of the four keys above.
    pub sdp: Option<PathBuf>,
    /// Accept only this RTP payload type (96-127 for dynamic types).
    pub payload_type: Option<u8>,
    /// Stream id written into the slot header of every frame.
    pub stream_id: u32,
    /// An unfinished frame is published, flagged incomplete and timed out,
    /// this long after its first packet (ms).
    pub frame_timeout_ms: u64,
}

impl Default for RtpConfig {
    fn default() -> Self {
        Self {
            width: None,
            height: None,
            sampling: None,
            depth: None,
            sdp: None,
            payload_type: None,
            stream_id: 0,
            frame_timeout_ms: 100,
        }
    }
}

/// A resolved `[rtp]` section, ready for the assembler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpSettings {
    pub geometry: VideoGeometry,
    pub payload_type: Option<u8>,
    pub stream_id: u32,
    pub frame_timeout_ns: u64,
}

impl RtpConfig {
    /// The section for inline geometry.
    pub fn inline(sampling: Sampling, depth: u8, width: u32, height: u32) -> Self {
        Self {
            width: Some(width),
            height: Some(height),
            sampling: Some(sampling.sdp_name().to_string()),
            depth: Some(depth),
            ..Self::default()
        }
    }

    /// Records every problem, each naming its `rtp.*` key (reads the SDP file when one is named).
    pub fn validate(&self, problems: &mut Vec<ConfigProblem>) {
        if let Err(p) = self.resolve() {
            problems.extend(p);
        }
    }

    /// Resolves the geometry (reading the SDP file when `sdp` is set) or
    /// returns every problem found.
    pub fn resolve(&self) -> Result<RtpSettings, Vec<ConfigProblem>> {
        let mut problems = Vec::new();
        check_range(&mut problems, "rtp.frame_timeout_ms", self.frame_timeout_ms, 1, 60_000);
        if let Some(pt) = self.payload_type {
            check_range(&mut problems, "rtp.payload_type", pt, 0, 127);
        }
        let inline_keys: Vec<&str> = [
            ("rtp.width", self.width.is_some()),
            ("rtp.height", self.height.is_some()),
            ("rtp.sampling", self.sampling.is_some()),
            ("rtp.depth", self.depth.is_some()),
        ]
        .iter()
        .filter(|(_, set)| *set)
        .map(|(k, _)| *k)
        .collect();
        let mut payload_type = self.payload_type;
        let geometry = if let Some(path) = &self.sdp {
            for k in &inline_keys {
                problems.push(ConfigProblem::new(
                    *k,
                    "set together with rtp.sdp; give the geometry in one place",
                ));
            }
            match crate::small_file::read_text(path, crate::small_file::SMALL_FILE_LIMIT) {
                Err(e) => {
                    problems.push(ConfigProblem::new(
                        "rtp.sdp",
                        format!("cannot read {}: {e}; check the path", path.display()),
                    ));
                    None
                }
                Ok(text) => match sdp::parse(&text) {
                    Ok(v) => {
                        if v.interlaced {
                            problems.push(ConfigProblem::new(
                                "rtp.sdp",
                                "the stream is interlaced; frameloop assembles progressive RFC 4175 video only",
                            ));
                        }
                        payload_type = payload_type.or(Some(v.payload_type));
                        Some(v.geometry)
                    }
                    Err(e) => {
                        problems.push(ConfigProblem::new("rtp.sdp", format!("{}: {e}", path.display())));
                        None
                    }
                },
            }
        } else {
            self.inline_geometry(&mut problems)
        };
        match geometry {
            Some(geometry) if problems.is_empty() => Ok(RtpSettings {
                geometry,
                payload_type,
                stream_id: self.stream_id,
                frame_timeout_ns: self.frame_timeout_ms * 1_000_000,
            }),
            _ => Err(problems),
        }
    }

    fn inline_geometry(&self, problems: &mut Vec<ConfigProblem>) -> Option<VideoGeometry> {
        let missing =
            |k: &str| ConfigProblem::new(k, "missing; set width, height, sampling and depth, or rtp.sdp");
        let width = self.width.or_else(|| {
            problems.push(missing("rtp.width"));
            None
        });
        let height = self.height.or_else(|| {
            problems.push(missing("rtp.height"));
            None
        });
        let depth = self.depth.or_else(|| {
            problems.push(missing("rtp.depth"));
            None
        });
        let sampling = match &self.sampling {
            None => {
                problems.push(missing("rtp.sampling"));
                None
            }
            Some(s) => s
                .parse::<Sampling>()
                .map_err(|e| problems.push(ConfigProblem::new("rtp.sampling", e.to_string())))
                .ok(),
        };
        let pixels = match (sampling, depth) {
            (Some(sampling), Some(depth)) => match sampling.pgroup(depth) {
                Some((_, pixels)) => Some(pixels),
                None => {
                    problems.push(ConfigProblem::new(
                        "rtp.depth",
                        format!("{depth} is not defined for {sampling}; use 8, 10, 12 or 16"),
                    ));
                    None
                }
            },
            _ => None,
        };
        if let (Some(width), Some(pixels), Some(sampling)) = (width, pixels, sampling)
            && (width == 0 || width > 32768 || !width.is_multiple_of(pixels))
        {
            problems.push(ConfigProblem::new(
                "rtp.width",
                format!("{width} must be a multiple of {pixels} (one {sampling} pixel group) from {pixels} to 32768"),
            ));
        }
        if let Some(height) = height {
            check_range(problems, "rtp.height", height, 1, 32768);
        }
        let (width, height, depth, sampling) = (width?, height?, depth?, sampling?);
        VideoGeometry::new(sampling, depth, width, height).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config_problem::{deserialize_table, no_listed_keys};

    fn parse(text: &str) -> (RtpConfig, Vec<ConfigProblem>) {
        let table: toml::Table = toml::from_str(text).unwrap();
        let mut problems = Vec::new();
        let cfg = deserialize_table::<RtpConfig>("rtp", table.get("rtp"), &mut problems, no_listed_keys);
        cfg.validate(&mut problems);
        (cfg, problems)
    }

    fn keys(problems: &[ConfigProblem]) -> Vec<&str> {
        problems.iter().map(|p| p.key.as_str()).collect()
    }

    #[test]
    fn inline_geometry_resolves() {
        let (cfg, problems) = parse(
            "[rtp]\nwidth = 640\nheight = 480\nsampling = \"YCbCr-4:2:2\"\ndepth = 8\npayload_type = 96\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        let s = cfg.resolve().unwrap();
        assert_eq!(s.geometry.frame_bytes(), 640 * 480 * 2);
        assert_eq!(s.payload_type, Some(96));
        assert_eq!(s.frame_timeout_ns, 100_000_000);
    }

    #[test]
    fn every_problem_names_its_key() {
        let (_, p) =
            parse("[rtp]\nwidth = 641\nheight = 0\nsampling = \"YUV\"\ndepth = 8\nframe_timeout_ms = 0\n");
        let k = keys(&p);
        for key in ["rtp.sampling", "rtp.frame_timeout_ms"] {
            assert!(k.contains(&key), "{k:?}");
        }
        let (_, p) = parse("[rtp]\nwidth = 641\nheight = 0\nsampling = \"YCbCr-4:2:2\"\ndepth = 8\n");
        assert_eq!(keys(&p), vec!["rtp.width", "rtp.height"]);
        let (_, p) = parse("[rtp]\nwidth = 640\nsampling = \"RGB\"\ndepth = 9\n");
        assert_eq!(keys(&p), vec!["rtp.height", "rtp.depth"]);
        let (_, p) = parse("[rtp]\nwidht = 640\n");
        assert!(keys(&p).contains(&"rtp.widht"), "{p:?}");
    }

    #[test]
    fn sdp_file_gives_geometry_and_payload_type() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cam.sdp");
        std::fs::write(
            &path,
            "m=video 5004 RTP/AVP 112\na=fmtp:112 sampling=RGB; width=4; height=2; depth=8\n",
        )
        .unwrap();
        let cfg = RtpConfig { sdp: Some(path.clone()), ..RtpConfig::default() };
        let s = cfg.resolve().unwrap();
        assert_eq!((s.geometry.frame_bytes(), s.payload_type), (24, Some(112)));
        let both = RtpConfig { width: Some(4), ..cfg };
        assert_eq!(keys(&both.resolve().unwrap_err()), vec!["rtp.width"]);
        let missing = RtpConfig { sdp: Some(dir.path().join("nope.sdp")), ..RtpConfig::default() };
        assert_eq!(keys(&missing.resolve().unwrap_err()), vec!["rtp.sdp"]);
    }
}
