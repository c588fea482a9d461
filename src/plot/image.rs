//! Two-dimensional frames as grey-scale images: the preview's scaling
//! (every `stride`-th row and column, values mapped linearly from the
//! frame's min..max onto 0..=255) and PNG encoding.

use super::PlotError;

/// How a frame of samples became the preview's pixels, so that a client can
/// map a pixel back to samples (served with every 2-D preview).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PreviewScaling {
    /// Row length of the frame in samples.
    pub frame_width: u32,
    /// Whole rows in the frame.
    pub frame_height: u32,
    /// Every `stride`-th row and column is kept (1: every sample).
    pub stride: u32,
    /// The sample value shown as 0 (the smallest kept sample).
    pub min: f32,
    /// The sample value shown as 255 (the largest kept sample).
    pub max: f32,
}

/// An 8-bit grey-scale image, row by row.
#[derive(Debug, Clone, PartialEq)]
pub struct GrayImage {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

impl GrayImage {
    /// The preview of `samples` laid out in rows of `frame_width`: rows and
    /// columns decimated by the smallest stride that brings both sides to at
    /// most `max_side` pixels, then each kept sample `v` shown as
    /// `round((v - min) / (max - min) * 255)` over the kept samples' finite
    /// min and max (0 everywhere when they are equal; non-finite values as 0).
    /// Samples after the last whole row are not shown. `None` when there is
    /// not one whole row.
    pub fn preview(samples: &[f32], frame_width: u32, max_side: u32) -> Option<(Self, PreviewScaling)> {
        let w = frame_width as usize;
        if w == 0 || samples.len() < w || max_side == 0 {
            return None;
        }
        let rows = samples.len() / w;
        let stride = w.max(rows).div_ceil(max_side as usize).max(1);
        let (out_w, out_h) = (w.div_ceil(stride), rows.div_ceil(stride));
        let kept = |r: usize, c: usize| samples[r * stride * w + c * stride];
        let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
        for r in 0..out_h {
            for c in 0..out_w {
                let v = kept(r, c);
                if v.is_finite() {
                    min = min.min(v);
                    max = max.max(v);
                }
            }
        }
        if !min.is_finite() {
            (min, max) = (0.0, 0.0);
        }
        let span = f64::from(max) - f64::from(min);
        let mut pixels = Vec::with_capacity(out_w * out_h);
        for r in 0..out_h {
            for c in 0..out_w {
                let v = kept(r, c);
                let p = if span > 0.0 && v.is_finite() {
                    ((f64::from(v) - f64::from(min)) / span * 255.0).round().clamp(0.0, 255.0) as u8
                } else {
                    0
                };
                pixels.push(p);
            }
        }
        let scaling =
            PreviewScaling { frame_width, frame_height: rows as u32, stride: stride as u32, min, max };
        Some((Self { width: out_w as u32, height: out_h as u32, pixels }, scaling))
    }

    /// The image as a PNG file (8-bit grey).
    pub fn to_png(&self) -> Result<Vec<u8>, PlotError> {
        let needed = self.width as usize * self.height as usize;
        if needed != self.pixels.len() || needed == 0 {
            return Err(PlotError::BadImage {
                width: self.width,
                height: self.height,
                needed,
                got: self.pixels.len(),
            });
        }
        let mut out = Vec::with_capacity(needed / 2 + 128);
        {
            let mut encoder = png::Encoder::new(&mut out, self.width, self.height);
            encoder.set_color(png::ColorType::Grayscale);
            encoder.set_depth(png::BitDepth::Eight);
            let mut writer = encoder.write_header()?;
            writer.write_image_data(&self.pixels)?;
            writer.finish()?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_scale_min_to_0_and_max_to_255_and_decimate() {
        let samples: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let (img, s) = GrayImage::preview(&samples, 4, 8).unwrap();
        assert_eq!((img.width, img.height, s.stride, s.min, s.max), (4, 3, 1, 0.0, 11.0));
        assert_eq!(img.pixels[0], 0);
        assert_eq!(img.pixels[11], 255);
        assert_eq!(img.pixels[1], (255.0f64 / 11.0).round() as u8);
        // 10 rows of 10 to at most 4 a side: stride 3 keeps rows/columns 0, 3, 6, 9.
        let big: Vec<f32> = (0..105).map(|i| i as f32).collect();
        let (img, s) = GrayImage::preview(&big, 10, 4).unwrap();
        assert_eq!((img.width, img.height, s.stride, s.frame_height), (4, 4, 3, 10));
        assert_eq!((s.min, s.max), (0.0, 99.0), "the partial last row is not shown");
        let flat = GrayImage::preview(&[5.0, f32::NAN, 5.0, 5.0], 2, 8).unwrap().0;
        assert_eq!(flat.pixels, vec![0; 4]);
        assert!(GrayImage::preview(&[1.0], 2, 8).is_none());
        assert!(GrayImage::preview(&[1.0], 0, 8).is_none());
    }

    #[test]
    fn png_round_trips_through_the_decoder() {
        let (img, _) =
            GrayImage::preview(&(0..64).map(|i| (i * 3) as f32).collect::<Vec<_>>(), 8, 64).unwrap();
        let bytes = img.to_png().unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height, info.color_type), (8, 8, png::ColorType::Grayscale));
        assert_eq!(&buf[..info.buffer_size()], &img.pixels[..]);
        assert!(GrayImage { width: 2, height: 2, pixels: vec![0; 3] }.to_png().is_err());
    }
}
