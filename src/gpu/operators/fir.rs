//! The `fir` operator on the GPU: a centred, zero-padded FIR (kernel
//! `fl_fir`, `fir.cu` and `fir.cuh` beside this file; the fused chains use
//! `fir.cuh` too). Its spec is [`crate::ops::OpSpec::Fir`], its CPU
//! reference [`crate::ops::cpu::fir`].

use super::filter::FilterOp;
use crate::fragment::FragmentError;
use crate::ops::MAX_FIR_TAPS;
use cudarc::driver::DeviceRepr;

/// Parameters of `fl_fir`, passed by value (mirrors `FirParams` in `fir.cu`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FirParams {
    /// Odd, `1..=MAX_FIR_TAPS`.
    pub count: u32,
    pub taps: [f32; MAX_FIR_TAPS],
}

// SAFETY: plain #[repr(C)] data with the layout of the CUDA struct.
unsafe impl DeviceRepr for FirParams {}

/// `fir`: centred, zero-padded FIR.
pub type FirOp = FilterOp<FirParams>;

impl FilterOp<FirParams> {
    /// `taps` must hold an odd number of taps, at most [`MAX_FIR_TAPS`].
    pub fn fir(name: &str, taps: &[f32], max_samples: usize) -> Result<Self, FragmentError> {
        if taps.len().is_multiple_of(2) || taps.len() > MAX_FIR_TAPS {
            return Err(FragmentError::Operator {
                operator: name.to_owned(),
                problem: format!("{} taps; use an odd number between 1 and {MAX_FIR_TAPS}", taps.len()),
            });
        }
        let mut params = FirParams { count: taps.len() as u32, taps: [0.0; MAX_FIR_TAPS] };
        params.taps[..taps.len()].copy_from_slice(taps);
        Ok(Self::with_kernel(name, "fl_fir", params, max_samples))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parameters_have_the_cuda_layout_and_bad_tap_counts_are_refused() {
        assert_eq!(std::mem::size_of::<FirParams>(), 4 + 4 * MAX_FIR_TAPS);
        assert!(FirOp::fir("fir", &[1.0, 2.0], 8).is_err());
    }
}
