//! The `filter2d` operator on the GPU: a 3x3 filter over rows of `width`
//! samples (kernel `fl_filter2d`, `filter2d.cu` and `filter2d.cuh` beside
//! this file; the fused chains use `filter2d.cuh` too). Its spec is
//! [`crate::ops::OpSpec::Filter2d`], its CPU reference
//! [`crate::ops::cpu::filter2d`].

use super::filter::FilterOp;
use crate::fragment::FragmentError;
use cudarc::driver::DeviceRepr;

/// Parameters of `fl_filter2d`, passed by value (mirrors `filter2d.cu`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Filter2dParams {
    /// At least 1.
    pub width: u32,
    pub kernel: [f32; 9],
}

// SAFETY: plain #[repr(C)] data with the layout of the CUDA struct.
unsafe impl DeviceRepr for Filter2dParams {}

/// `filter2d`: 3x3 filter over rows of `width` samples.
pub type Filter2dOp = FilterOp<Filter2dParams>;

impl FilterOp<Filter2dParams> {
    pub fn filter2d(
        name: &str,
        width: u32,
        kernel: [f32; 9],
        max_samples: usize,
    ) -> Result<Self, FragmentError> {
        if width == 0 {
            return Err(FragmentError::Operator {
                operator: name.to_owned(),
                problem: "width is 0; rows must hold at least one sample".to_owned(),
            });
        }
        let params = Filter2dParams { width, kernel };
        Ok(Self::with_kernel(name, "fl_filter2d", params, max_samples))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parameters_have_the_cuda_layout_and_a_zero_width_is_refused() {
        assert_eq!(std::mem::size_of::<Filter2dParams>(), 40);
        assert!(Filter2dOp::filter2d("f2d", 0, [0.0; 9], 8).is_err());
    }
}
