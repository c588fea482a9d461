//! The preview of the newest output: copied from the output ring by its
//! sequence protocol (never from the receiver, the loop or the result
//! thread), at most once per `min_interval` whatever the number of viewers,
//! and drawn on the server's threads: an image for two-dimensional frames,
//! the magnitude spectrum for `fft` chains, a line of samples otherwise.
//! Viewers are served the last drawing until it is older than the interval.

use crate::ops::OpSpec;
use crate::output::{OutputError, OutputRing, SlotReader};
use crate::plot::{GrayImage, PlotError, PreviewScaling, samples_svg};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why no preview could be drawn; its text is the message the live view shows.
#[derive(Debug, thiserror::Error)]
enum PreviewError {
    #[error("cannot copy the newest output: {0}")]
    Copy(#[source] OutputError),
    #[error("no output yet: the preview shows the newest processed frame once one arrives")]
    NoOutputYet,
    #[error("the output has {samples} samples: not one row of {width}")]
    NotRows { samples: usize, width: u32 },
    #[error(transparent)]
    Plot(#[from] PlotError),
}

/// Longest side of a preview image, pixels: larger frames are decimated
/// (see [`GrayImage::preview`]).
pub const PREVIEW_MAX_SIDE: u32 = 512;

/// How the chain's output is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PreviewKind {
    /// Rows of `width` samples (a `filter2d` chain).
    Image { width: u32 },
    /// `height` rows, as many samples each as the frame holds (RTP video).
    ImageRows { height: u32 },
    /// Rows of `bins` magnitude or power bins (an `fft` chain); the first
    /// row is drawn.
    Spectrum { bins: u32 },
    /// One signal of samples.
    Signal,
}

impl PreviewKind {
    /// What the output of `chain` is: the last operator that shapes it
    /// decides (`fft` → spectrum, `filter2d` → image), else RTP video of
    /// `rtp_height` rows is an image, else a signal.
    pub fn of_chain(chain: &[OpSpec], rtp_height: Option<u32>) -> Self {
        for op in chain.iter().rev() {
            match op {
                OpSpec::Fft(spec) => return Self::Spectrum { bins: spec.n / 2 + 1 },
                OpSpec::Filter2d { width, .. } => return Self::Image { width: *width },
                _ => {}
            }
        }
        match rtp_height {
            Some(height) if height > 0 => Self::ImageRows { height },
            _ => Self::Signal,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Image { .. } | Self::ImageRows { .. } => "image",
            Self::Spectrum { .. } => "spectrum",
            Self::Signal => "signal",
        }
    }
}

/// What `/api/preview` answers about the last drawing.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PreviewInfo {
    /// False until an output was copied (the message says why).
    pub available: bool,
    /// "image", "spectrum" or "signal".
    pub kind: &'static str,
    /// The output sequence drawn (1 for the first output).
    pub sequence: u64,
    /// The frame it came from: its stream and frame sequence.
    pub stream_id: u32,
    pub frame_seq: u64,
    /// Samples in the output.
    pub samples: usize,
    /// Milliseconds between the copy and this answer.
    pub age_ms: u64,
    /// Drawings made since start (at most one per interval).
    pub renders: u64,
    /// For an image: how pixels map to samples.
    pub scaling: Option<PreviewScaling>,
    /// For an image: its size in pixels.
    pub image_width: u32,
    pub image_height: u32,
    /// Where the drawing is: `/api/preview.png` or `/api/preview.svg`.
    pub url: Option<String>,
    /// Why there is no drawing, when there is none.
    pub message: Option<String>,
}

/// One drawing of the newest output.
#[derive(Debug, Clone)]
pub struct RenderedPreview {
    info: PreviewInfo,
    taken: Instant,
    /// The image (PNG), for image previews.
    pub png: Option<Vec<u8>>,
    /// The line plot (SVG), for spectra and signals.
    pub svg: Option<String>,
}

impl RenderedPreview {
    /// The description as of `now` (its age filled in).
    pub fn info(&self, now: Instant) -> PreviewInfo {
        PreviewInfo {
            age_ms: now.saturating_duration_since(self.taken).as_millis() as u64,
            ..self.info.clone()
        }
    }
}

/// Takes and draws previews of one output ring.
pub struct Previewer {
    ring: Arc<OutputRing>,
    kind: PreviewKind,
    min_interval: Duration,
    /// The reader (a device copy stream for a GPU ring) and the last
    /// drawing; one lock, so concurrent viewers wait for one drawing.
    state: Mutex<(Option<SlotReader>, Option<Arc<RenderedPreview>>)>,
    renders: AtomicU64,
}

impl Previewer {
    /// A previewer of `ring` showing `kind`, drawing at most once per
    /// `min_interval`.
    pub fn new(ring: Arc<OutputRing>, kind: PreviewKind, min_interval: Duration) -> Self {
        Self { ring, kind, min_interval, state: Mutex::new((None, None)), renders: AtomicU64::new(0) }
    }

    /// How the output is shown.
    pub fn kind(&self) -> PreviewKind {
        self.kind
    }

    /// Drawings made so far.
    pub fn renders(&self) -> u64 {
        self.renders.load(Ordering::Relaxed)
    }

    /// The last drawing, or a new one when the last is older than the
    /// interval (blocking: call it from a thread that may block).
    pub fn latest(&self, now: Instant) -> Arc<RenderedPreview> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(last) = &state.1
            && now.saturating_duration_since(last.taken) < self.min_interval
        {
            return Arc::clone(last);
        }
        let drawn = Arc::new(self.draw(&mut state.0).unwrap_or_else(|e| self.unavailable(e.to_string())));
        self.renders.fetch_add(1, Ordering::Relaxed);
        state.1 = Some(Arc::clone(&drawn));
        drawn
    }

    fn unavailable(&self, message: String) -> RenderedPreview {
        RenderedPreview {
            info: PreviewInfo {
                available: false,
                kind: self.kind.name(),
                sequence: 0,
                stream_id: 0,
                frame_seq: 0,
                samples: 0,
                age_ms: 0,
                renders: self.renders(),
                scaling: None,
                image_width: 0,
                image_height: 0,
                url: None,
                message: Some(message),
            },
            taken: Instant::now(),
            png: None,
            svg: None,
        }
    }

    fn draw(&self, reader: &mut Option<SlotReader>) -> Result<RenderedPreview, PreviewError> {
        let reader = match reader {
            Some(reader) => reader,
            None => reader.insert(self.ring.slot_reader().map_err(PreviewError::Copy)?),
        };
        let newest =
            self.ring.copy_newest(reader).map_err(PreviewError::Copy)?.ok_or(PreviewError::NoOutputYet)?;
        let taken = Instant::now();
        let mut info = PreviewInfo {
            available: true,
            kind: self.kind.name(),
            sequence: newest.sequence,
            stream_id: newest.record.stream_id,
            frame_seq: newest.record.frame_seq,
            samples: newest.samples.len(),
            age_ms: 0,
            renders: self.renders() + 1,
            scaling: None,
            image_width: 0,
            image_height: 0,
            url: None,
            message: None,
        };
        let (png, svg) = match self.kind {
            PreviewKind::Image { .. } | PreviewKind::ImageRows { .. } => {
                let width = match self.kind {
                    PreviewKind::Image { width } => width,
                    PreviewKind::ImageRows { height } => {
                        (newest.samples.len() / height.max(1) as usize) as u32
                    }
                    _ => 0,
                };
                let (image, scaling) = GrayImage::preview(&newest.samples, width, PREVIEW_MAX_SIDE)
                    .ok_or(PreviewError::NotRows { samples: newest.samples.len(), width })?;
                info.scaling = Some(scaling);
                (info.image_width, info.image_height) = (image.width, image.height);
                info.url = Some(format!("/api/preview.png?seq={}", newest.sequence));
                (Some(image.to_png()?), None)
            }
            PreviewKind::Spectrum { bins } => {
                let row = &newest.samples[..newest.samples.len().min(bins as usize)];
                info.url = Some(format!("/api/preview.svg?seq={}", newest.sequence));
                let title = format!("spectrum of output {} (first row, {} bins)", newest.sequence, row.len());
                (None, Some(samples_svg(&title, "bin", "magnitude", row)?))
            }
            PreviewKind::Signal => {
                info.url = Some(format!("/api/preview.svg?seq={}", newest.sequence));
                let title = format!("output {} ({} samples)", newest.sequence, newest.samples.len());
                (None, Some(samples_svg(&title, "sample", "value", &newest.samples)?))
            }
        };
        Ok(RenderedPreview { info, taken, png, svg })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::FftSpec;
    use crate::ring::ResultRecord;

    #[test]
    fn the_chain_decides_what_the_preview_is() {
        let unpack = OpSpec::Unpack { format: crate::ops::SampleFormat::U8, scale: 1.0, offset: 0.0 };
        let filter = OpSpec::Filter2d { width: 64, kernel: [0.0; 9] };
        let fft = OpSpec::Fft(FftSpec::new(256));
        assert_eq!(
            PreviewKind::of_chain(&[unpack.clone(), filter.clone()], None),
            PreviewKind::Image { width: 64 }
        );
        assert_eq!(
            PreviewKind::of_chain(&[unpack.clone(), filter, fft.clone()], None),
            PreviewKind::Spectrum { bins: 129 }
        );
        assert_eq!(
            PreviewKind::of_chain(std::slice::from_ref(&unpack), Some(240)),
            PreviewKind::ImageRows { height: 240 }
        );
        assert_eq!(PreviewKind::of_chain(&[unpack, OpSpec::Stats], None), PreviewKind::Signal);
    }

    #[test]
    fn viewers_share_one_drawing_per_interval() {
        let ring = OutputRing::host(4, 64).unwrap();
        let mut writer = ring.writer().unwrap();
        let previewer =
            Previewer::new(Arc::clone(&ring), PreviewKind::Image { width: 8 }, Duration::from_secs(3600));
        let empty = previewer.latest(Instant::now());
        assert!(!empty.info(Instant::now()).available);
        let previewer =
            Previewer::new(Arc::clone(&ring), PreviewKind::Image { width: 8 }, Duration::from_millis(50));
        let samples: Vec<f32> = (0..64).map(|i| i as f32).collect();
        writer.publish(&ResultRecord { frame_seq: 9, ..Default::default() }, &[0; 12], &samples).unwrap();
        let t0 = Instant::now();
        let first = previewer.latest(t0);
        let info = first.info(t0);
        assert!(info.available, "{info:?}");
        assert_eq!((info.sequence, info.frame_seq, info.image_width, info.image_height), (1, 9, 8, 8));
        writer.publish(&ResultRecord::default(), &[0; 12], &samples).unwrap();
        for _ in 0..100 {
            assert_eq!(previewer.latest(t0).info(t0).sequence, 1, "within the interval: the same drawing");
        }
        assert_eq!(previewer.renders(), 1);
        let later = previewer.latest(t0 + Duration::from_millis(60));
        assert_eq!((later.info(t0).sequence, previewer.renders()), (2, 2));
        let png = later.png.as_ref().unwrap();
        let mut reader = png::Decoder::new(std::io::Cursor::new(png.clone())).read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        reader.next_frame(&mut buf).unwrap();
        assert_eq!((buf[0], buf[63]), (0, 255));
    }

    #[test]
    fn spectra_and_signals_are_drawn_as_lines() {
        let ring = OutputRing::host(2, 300).unwrap();
        let mut writer = ring.writer().unwrap();
        let samples: Vec<f32> = (0..258).map(|i| (i as f32 * 0.1).sin()).collect();
        writer.publish(&ResultRecord::default(), &[0; 12], &samples).unwrap();
        for (kind, name, axis) in [
            (PreviewKind::Spectrum { bins: 129 }, "spectrum", "bin"),
            (PreviewKind::Signal, "signal", "sample"),
        ] {
            let previewer = Previewer::new(Arc::clone(&ring), kind, Duration::from_millis(1));
            let drawn = previewer.latest(Instant::now());
            let info = drawn.info(Instant::now());
            assert_eq!((info.available, info.kind, info.samples), (true, name, 258), "{info:?}");
            assert!(drawn.png.is_none());
            let svg = drawn.svg.as_ref().unwrap();
            assert!(svg.contains("<polyline") && svg.contains(axis), "{name}");
            assert_eq!(info.url.as_deref(), Some("/api/preview.svg?seq=1"));
        }
        let spectrum =
            Previewer::new(Arc::clone(&ring), PreviewKind::Spectrum { bins: 129 }, Duration::from_millis(1));
        assert!(
            spectrum.latest(Instant::now()).svg.as_ref().unwrap().contains("129 bins"),
            "the first row only"
        );
    }
}
