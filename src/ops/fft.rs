//! The `fft` operator: its configuration and its CPU reference, batched
//! real-to-complex transforms over rows of `n` samples giving the
//! magnitude or power spectrum of each row (rustfft, f64 inside).
//!
//! Semantics, shared by the host chain and the cuFFT operator:
//! - the input is cut into `rows = floor(samples / n)` rows of `n` samples;
//!   samples after the last whole row are dropped;
//! - each row is multiplied by the window `w[i]` (periodic, "DFT-even":
//!   `w` has period `n`, see [`FftWindow::value`]);
//! - `X_k = sum_i w[i] x[i] exp(-2 pi j i k / n)` for `k = 0..=n/2`;
//! - the output is `n/2 + 1` bins per row, row after row: `|scale * X_k|`
//!   (magnitude) or `|scale * X_k|^2` (power), as f32. `scale` defaults to
//!   `1/n`, so a constant `c` gives `c * mean(w)` in bin 0 and a tone of
//!   amplitude `A` on bin `k` (0 < k < n/2) gives `A/2 * mean(w)`.
//!
//! The output count, `rows * (n/2 + 1)`, is never more than the input's
//! (`n/2 + 1 <= n` for `n >= 2`), so the spectrum fits in the sample buffers.

use std::sync::Arc;

use rustfft::num_complex::Complex;
use rustfft::{Fft, FftPlanner};
use serde::{Deserialize, Serialize};

use super::ChainError;

/// Shortest row an `fft` takes (`n`).
pub const MIN_FFT_LEN: u32 = 2;
/// Longest row an `fft` takes (`n`).
pub const MAX_FFT_LEN: u32 = 65_536;

/// Window applied to each row before its transform (`window` key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FftWindow {
    /// `0.5 - 0.5 cos(2 pi i / n)`.
    #[default]
    Hann,
    /// `0.54 - 0.46 cos(2 pi i / n)`.
    Hamming,
    /// `0.42 - 0.5 cos(2 pi i / n) + 0.08 cos(4 pi i / n)`.
    Blackman,
    /// Every sample weighs 1 (rectangular).
    None,
}

impl FftWindow {
    /// The window's weight of sample `i` of a row of `n` (periodic form),
    /// computed in f64 (the GPU kernel uses the same formulas in f64).
    pub fn value(self, i: usize, n: usize) -> f64 {
        let phase = 2.0 * std::f64::consts::PI * i as f64 / n as f64;
        match self {
            FftWindow::Hann => 0.5 - 0.5 * phase.cos(),
            FftWindow::Hamming => 0.54 - 0.46 * phase.cos(),
            FftWindow::Blackman => 0.42 - 0.5 * phase.cos() + 0.08 * (2.0 * phase).cos(),
            FftWindow::None => 1.0,
        }
    }

    /// `FL_FFT_WINDOW_*` code the GPU kernel takes.
    pub fn code(self) -> u32 {
        match self {
            FftWindow::None => 0,
            FftWindow::Hann => 1,
            FftWindow::Hamming => 2,
            FftWindow::Blackman => 3,
        }
    }
}

/// What each bin holds (`output` key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FftOutput {
    /// `|scale * X_k|`.
    #[default]
    Magnitude,
    /// `|scale * X_k|^2`.
    Power,
}

/// `[[chain]] op = "fft"`: `n` (row length, samples), `window` (default
/// `"hann"`), `output` (default `"magnitude"`), `scale` (default `1/n`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FftSpec {
    pub n: u32,
    #[serde(default)]
    pub window: FftWindow,
    #[serde(default)]
    pub output: FftOutput,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f32>,
}

impl FftSpec {
    /// Rows of `n` samples with the defaults: Hann window, magnitude, scale `1/n`.
    pub fn new(n: u32) -> Self {
        Self { n, window: FftWindow::default(), output: FftOutput::default(), scale: None }
    }

    /// Bins per row: `n/2 + 1`.
    pub fn bins(&self) -> usize {
        self.n as usize / 2 + 1
    }

    /// The factor applied to `X_k`: `scale`, or `1/n` when not given.
    pub fn effective_scale(&self) -> f32 {
        self.scale.unwrap_or(1.0 / self.n.max(1) as f32)
    }

    /// Whole rows in `samples` input samples (`n` is at least 1 once validated).
    pub fn rows_in(&self, samples: usize) -> usize {
        samples / (self.n.max(1) as usize)
    }

    /// Output samples for `samples` input samples: `rows * (n/2 + 1)`.
    pub fn output_len(&self, samples: usize) -> usize {
        self.rows_in(samples) * self.bins()
    }

    /// Problems with this spec as the chain's operator `index`.
    pub(super) fn problems(&self, index: usize) -> Vec<ChainError> {
        let mut errs = Vec::new();
        if !(MIN_FFT_LEN..=MAX_FFT_LEN).contains(&self.n) {
            errs.push(ChainError::FftLength { index, n: self.n });
        }
        if let Some(value) = self.scale {
            if !value.is_finite() {
                errs.push(ChainError::NotFinite { index, key: "scale", value });
            } else if value <= 0.0 {
                errs.push(ChainError::FftScale { index, value });
            }
        }
        errs
    }
}

/// A planned CPU transform for one `fft` operator, with its buffers, so
/// that [`FftPlan::run`] never allocates.
pub struct FftPlan {
    spec: FftSpec,
    fft: Arc<dyn Fft<f64>>,
    /// Invariant: `n` weights.
    window: Vec<f64>,
    /// Invariant: `n` values.
    row: Vec<Complex<f64>>,
    scratch: Vec<Complex<f64>>,
    scale: f64,
}

impl FftPlan {
    /// Plans the transform of a validated spec (`n` in range).
    pub fn new(spec: &FftSpec) -> Self {
        let n = spec.n.max(1) as usize;
        let fft = FftPlanner::<f64>::new().plan_fft_forward(n);
        let scratch = vec![Complex::default(); fft.get_inplace_scratch_len()];
        Self {
            spec: spec.clone(),
            window: (0..n).map(|i| spec.window.value(i, n)).collect(),
            row: vec![Complex::default(); n],
            scratch,
            scale: f64::from(spec.effective_scale()),
            fft,
        }
    }

    /// Transforms the whole rows of `x` into `y`, which must hold
    /// `spec.output_len(x.len())` values. Returns that count.
    pub fn run(&mut self, x: &[f32], y: &mut [f32]) -> usize {
        let n = self.row.len();
        debug_assert_eq!(self.window.len(), n);
        let bins = self.spec.bins();
        let out_len = self.spec.output_len(x.len());
        for (row_in, row_out) in x.chunks_exact(n).zip(y[..out_len].chunks_exact_mut(bins)) {
            for ((c, &v), &w) in self.row.iter_mut().zip(row_in).zip(&self.window) {
                *c = Complex::new(f64::from(v) * w, 0.0);
            }
            self.fft.process_with_scratch(&mut self.row, &mut self.scratch);
            for (o, c) in row_out.iter_mut().zip(&self.row) {
                let power = (c * self.scale).norm_sqr();
                *o = match self.spec.output {
                    FftOutput::Magnitude => power.sqrt() as f32,
                    FftOutput::Power => power as f32,
                };
            }
        }
        out_len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(n: u32, window: FftWindow, output: FftOutput) -> FftSpec {
        FftSpec { n, window, output, scale: None }
    }

    fn run(spec: &FftSpec, x: &[f32]) -> Vec<f32> {
        let mut y = vec![f32::NAN; spec.output_len(x.len())];
        assert_eq!(FftPlan::new(spec).run(x, &mut y), y.len());
        y
    }

    fn close(got: f32, want: f64, what: &str) {
        assert!(
            (f64::from(got) - want).abs() <= 1e-5 * want.abs().max(1.0),
            "{what}: got {got}, want {want}"
        );
    }

    #[test]
    fn a_pure_tone_lands_in_its_bin_with_its_amplitude() {
        let (n, k, amp) = (64usize, 5usize, 3.0f64);
        let x: Vec<f32> = (0..n)
            .map(|i| (amp * (2.0 * std::f64::consts::PI * (k * i) as f64 / n as f64).cos()) as f32)
            .collect();
        let y = run(&spec(n as u32, FftWindow::None, FftOutput::Magnitude), &x);
        assert_eq!(y.len(), n / 2 + 1);
        for (bin, &v) in y.iter().enumerate() {
            close(v, if bin == k { amp / 2.0 } else { 0.0 }, &format!("bin {bin}"));
        }
        // Power is the square; Hann halves the tone (coherent gain 0.5) and leaks into k±1.
        let p = run(&spec(n as u32, FftWindow::None, FftOutput::Power), &x);
        close(p[k], (amp / 2.0).powi(2), "power");
        let h = run(&spec(n as u32, FftWindow::Hann, FftOutput::Magnitude), &x);
        close(h[k], amp / 4.0, "hann bin k");
        close(h[k - 1], amp / 8.0, "hann bin k-1");
        close(h[k + 2], 0.0, "hann bin k+2");
    }

    #[test]
    fn dc_is_the_windowed_mean_and_scale_multiplies_the_bins() {
        let x = vec![2.0f32; 16];
        let y = run(&spec(16, FftWindow::Hamming, FftOutput::Magnitude), &x);
        close(y[0], 2.0 * 0.54, "dc under hamming");
        let rect = run(&spec(16, FftWindow::None, FftOutput::Magnitude), &x);
        close(rect[0], 2.0, "dc");
        assert!(rect[1..].iter().all(|&v| v.abs() < 1e-6), "{rect:?}");
        let unscaled = FftSpec { scale: Some(1.0), ..spec(16, FftWindow::None, FftOutput::Power) };
        close(run(&unscaled, &x)[0], 32.0f64.powi(2), "unscaled power");
    }

    #[test]
    fn parseval_holds_for_a_rectangular_window() {
        // sum |x|^2 = (1/n) sum_k |X_k|^2 over all n bins; with only n/2+1
        // bins of a real input, bins 1..n/2 count twice.
        let n = 256usize;
        let x: Vec<f32> = (0..n).map(|i| ((i * 7919) % 101) as f32 / 10.0 - 5.0).collect();
        let s = FftSpec { scale: Some(1.0), ..spec(n as u32, FftWindow::None, FftOutput::Power) };
        let p = run(&s, &x);
        let time: f64 = x.iter().map(|&v| f64::from(v).powi(2)).sum();
        let freq: f64 = p
            .iter()
            .enumerate()
            .map(|(k, &v)| if k == 0 || k == n / 2 { f64::from(v) } else { 2.0 * f64::from(v) })
            .sum::<f64>()
            / n as f64;
        assert!((time - freq).abs() <= 1e-5 * time, "time {time}, frequency {freq}");
    }

    #[test]
    fn window_values() {
        let n = 8;
        for w in [FftWindow::Hann, FftWindow::Hamming, FftWindow::Blackman] {
            // Periodic: symmetric around n/2, peak 1 at n/2.
            assert!((w.value(n / 2, n) - 1.0).abs() < 1e-12, "{w:?}");
            for i in 1..n {
                assert!((w.value(i, n) - w.value(n - i, n)).abs() < 1e-12, "{w:?} at {i}");
            }
        }
        assert_eq!(FftWindow::Hann.value(0, n), 0.0);
        assert!((FftWindow::Hamming.value(0, n) - 0.08).abs() < 1e-12);
        assert!(FftWindow::Blackman.value(0, n).abs() < 1e-12);
        assert!((FftWindow::Hann.value(2, n) - 0.5).abs() < 1e-12);
        assert_eq!(FftWindow::None.value(3, n), 1.0);
    }

    #[test]
    fn rows_are_transformed_one_by_one_and_a_partial_row_is_dropped() {
        let s = spec(4, FftWindow::None, FftOutput::Magnitude);
        // Two whole rows (a constant 1, then an alternating ±1) and 3 dropped samples.
        let x = [1.0f32, 1.0, 1.0, 1.0, 1.0, -1.0, 1.0, -1.0, 9.0, 9.0, 9.0];
        assert_eq!(s.rows_in(x.len()), 2);
        let mut y = vec![f32::NAN; 12];
        assert_eq!(FftPlan::new(&s).run(&x, &mut y), 6);
        assert_eq!(&y[..6], &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
        assert!(y[6..].iter().all(|v| v.is_nan()), "wrote past the output: {y:?}");
        // Fewer samples than one row: nothing.
        assert_eq!(FftPlan::new(&s).run(&x[..3], &mut y), 0);
    }

    #[test]
    fn odd_lengths_have_n_half_plus_one_bins() {
        let s = spec(5, FftWindow::None, FftOutput::Magnitude);
        assert_eq!(s.bins(), 3);
        let y = run(&s, &[1.0; 10]);
        assert_eq!(y.len(), 6);
        close(y[0], 1.0, "dc of row 0");
        close(y[3], 1.0, "dc of row 1");
    }

    #[test]
    fn validation_names_the_keys() {
        let bad = |s: FftSpec| s.problems(2).iter().map(|e| e.to_string()).collect::<Vec<_>>();
        assert!(bad(spec(1, FftWindow::Hann, FftOutput::Power))[0].contains("chain[2].n"));
        assert!(bad(spec(MAX_FFT_LEN + 1, FftWindow::Hann, FftOutput::Power))[0].contains("chain[2].n"));
        assert!(bad(spec(MAX_FFT_LEN, FftWindow::Hann, FftOutput::Power)).is_empty());
        let zero = FftSpec { scale: Some(0.0), ..spec(8, FftWindow::Hann, FftOutput::Power) };
        assert!(bad(zero)[0].contains("chain[2].scale"));
        let nan = FftSpec { scale: Some(f32::NAN), ..spec(8, FftWindow::Hann, FftOutput::Power) };
        assert!(bad(nan)[0].contains("chain[2].scale"));
    }
}
