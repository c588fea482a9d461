//! CPU reference implementations of the built-in operators. These define
//! what each operator computes; the GPU kernels are verified against them.

use super::SampleFormat;

/// Unpacks raw samples to f32 (`sample * scale + offset`) into `out`, which
/// must hold `format.samples_in(raw.len())` values. Returns the sample count.
pub fn unpack(raw: &[u8], format: SampleFormat, scale: f32, offset: f32, out: &mut [f32]) -> usize {
    let n = format.samples_in(raw.len());
    let out = &mut out[..n];
    match format {
        SampleFormat::U8 => {
            for (o, &b) in out.iter_mut().zip(raw) {
                *o = b as f32 * scale + offset;
            }
        }
        SampleFormat::U16 => {
            for (o, c) in out.iter_mut().zip(raw.chunks_exact(2)) {
                *o = u16::from_le_bytes([c[0], c[1]]) as f32 * scale + offset;
            }
        }
        SampleFormat::U12 => {
            for (pair, c) in out.chunks_exact_mut(2).zip(raw.chunks_exact(3)) {
                let s0 = c[0] as u32 | ((c[1] as u32 & 0x0f) << 8);
                let s1 = (c[1] as u32 >> 4) | ((c[2] as u32) << 4);
                pair[0] = s0 as f32 * scale + offset;
                pair[1] = s1 as f32 * scale + offset;
            }
        }
    }
    n
}

/// Centred FIR with zero padding: `y[i] = sum_k taps[k] * x[i + k - K/2]`.
pub fn fir(x: &[f32], taps: &[f32], y: &mut [f32]) {
    let c = taps.len() / 2;
    let n = x.len();
    for (i, yi) in y[..n].iter_mut().enumerate() {
        let mut acc = 0.0f32;
        for (k, &t) in taps.iter().enumerate() {
            let j = i + k;
            if j >= c && j - c < n {
                acc += t * x[j - c];
            }
        }
        *yi = acc;
    }
}

/// 3x3 filter over rows of `width` samples with a zero border; samples past
/// the last whole row are copied unchanged.
pub fn filter2d(x: &[f32], width: usize, kernel: &[f32; 9], y: &mut [f32]) {
    let n = x.len();
    let rows = n / width;
    for r in 0..rows {
        for c in 0..width {
            let mut acc = 0.0f32;
            for dr in 0..3 {
                for dc in 0..3 {
                    let (rr, cc) = (r + dr, c + dc);
                    if rr >= 1 && rr - 1 < rows && cc >= 1 && cc - 1 < width {
                        acc += kernel[dr * 3 + dc] * x[(rr - 1) * width + (cc - 1)];
                    }
                }
            }
            y[r * width + c] = acc;
        }
    }
    y[rows * width..n].copy_from_slice(&x[rows * width..n]);
}

/// Sum (accumulated in f64), min, max and mean. An empty input gives all zeros.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Stats {
    pub sum: f32,
    pub min: f32,
    pub max: f32,
    pub mean: f32,
}

pub fn stats(x: &[f32]) -> Stats {
    if x.is_empty() {
        return Stats::default();
    }
    let (mut sum, mut min, mut max) = (0.0f64, f32::INFINITY, f32::NEG_INFINITY);
    for &v in x {
        sum += v as f64;
        min = min.min(v);
        max = max.max(v);
    }
    Stats { sum: sum as f32, min, max, mean: (sum / x.len() as f64) as f32 }
}

/// Samples strictly above `level`: their count and the first index (-1 if none).
pub fn threshold(x: &[f32], level: f32) -> (u32, i32) {
    let mut count = 0u32;
    let mut first = -1i32;
    for (i, &v) in x.iter().enumerate() {
        if v > level {
            if first < 0 {
                first = i as i32;
            }
            count += 1;
        }
    }
    (count, first)
}

/// Busy-waits `us` microseconds (the `delay` operator: a stand-in for heavy
/// processing; the one operator that reads a clock).
pub fn delay(us: u32) {
    let until = std::time::Instant::now() + std::time::Duration::from_micros(us as u64);
    while std::time::Instant::now() < until {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpack_formats() {
        let mut out = [0f32; 4];
        assert_eq!(unpack(&[1, 2, 255], SampleFormat::U8, 2.0, 1.0, &mut out), 3);
        assert_eq!(&out[..3], &[3.0, 5.0, 511.0]);
        assert_eq!(unpack(&[0x34, 0x12, 0xff, 0xff, 9], SampleFormat::U16, 1.0, 0.0, &mut out), 2);
        assert_eq!(&out[..2], &[4660.0, 65535.0]);
        // s0 = 0xabc, s1 = 0x123 packed as bc 3a 12
        assert_eq!(unpack(&[0xbc, 0x3a, 0x12, 7], SampleFormat::U12, 1.0, 0.0, &mut out), 2);
        assert_eq!(&out[..2], &[0xabc as f32, 0x123 as f32]);
    }

    #[test]
    fn fir_is_centred_with_zero_padding() {
        let mut y = [0f32; 4];
        fir(&[1.0, 2.0, 3.0, 4.0], &[1.0, 10.0, 100.0], &mut y);
        // y[i] = x[i-1] + 10 x[i] + 100 x[i+1]
        assert_eq!(y, [210.0, 321.0, 432.0, 43.0]);
    }

    #[test]
    fn filter2d_identity_and_box() {
        let x: Vec<f32> = (0..7).map(|v| v as f32).collect();
        let mut y = vec![0f32; 7];
        let mut id = [0f32; 9];
        id[4] = 1.0;
        filter2d(&x, 3, &id, &mut y);
        assert_eq!(y, x);
        filter2d(&x, 3, &[1.0; 9], &mut y);
        // rows [0 1 2] [3 4 5], trailing 6 passes through
        assert_eq!(y, vec![8.0, 15.0, 12.0, 8.0, 15.0, 12.0, 6.0]);
    }

    #[test]
    fn stats_and_threshold() {
        let s = stats(&[1.0, -2.0, 4.0]);
        assert_eq!((s.sum, s.min, s.max, s.mean), (3.0, -2.0, 4.0, 1.0));
        assert_eq!(threshold(&[1.0, 5.0, 2.0, 6.0], 1.5), (3, 1));
        assert_eq!(threshold(&[1.0], 1.0), (0, -1));
    }
}
