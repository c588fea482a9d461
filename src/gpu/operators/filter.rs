//! What the sample-to-sample filters (`fir`, `filter2d`) share on the GPU:
//! [`FilterOp`], one launch of the filter's kernel over ports `in` and
//! `out`. Each filter's parameters and constructor are in its own module.

use super::launch::{OP_THREADS, config, float_capacity, grid_for, sample_bytes};
use crate::fragment::{ComputeContext, FragmentError, GpuResidentOperator, OperatorSpec, PortMemory};
use crate::gpu::param_banks::NO_PARAM_STEP;
use cudarc::driver::{DeviceRepr, PushKernelArg};

/// A sample-to-sample filter: ports `in` and `out` of the chain's sample
/// buffer size, one launch of `kernel(FrameDesc*, const float* in, float*
/// out, uint32_t capacity, P params)`.
pub struct FilterOp<P> {
    name: String,
    kernel: &'static str,
    params: P,
    max_samples: usize,
    /// Where the frame's parameter bank holds the taps or kernel ([`NO_PARAM_STEP`]: none).
    param_step: u32,
}

impl<P> FilterOp<P> {
    /// A filter launching `kernel` with `params` over frames of at most
    /// `max_samples` samples (the constructors of `fir` and `filter2d`).
    pub(super) fn with_kernel(name: &str, kernel: &'static str, params: P, max_samples: usize) -> Self {
        Self { name: name.to_owned(), kernel, params, max_samples, param_step: NO_PARAM_STEP }
    }

    /// Reads the taps or kernel from step `step` of the frame's parameter bank.
    pub(super) fn with_param_step(self, step: u32) -> Self {
        Self { param_step: step, ..self }
    }
}

impl<P: DeviceRepr + Send> GpuResidentOperator for FilterOp<P> {
    fn name(&self) -> &str {
        &self.name
    }

    fn setup(&mut self, spec: &mut OperatorSpec) {
        let bytes = sample_bytes(self.max_samples);
        spec.input("in", PortMemory::Size(bytes)).output("out", PortMemory::Size(bytes));
    }

    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        let (x, y) = (ctx.port("in")?, ctx.port("out")?);
        let capacity = float_capacity(x).min(float_capacity(y));
        let f = ctx.kernel(self.kernel)?;
        let fd = ctx.frame_desc();
        let mut launch = ctx.stream().launch_builder(f);
        launch.arg(&fd).arg(&x.dptr).arg(&y.dptr).arg(&capacity).arg(&self.params).arg(&self.param_step);
        // SAFETY: (const FrameDesc*, const float*, float*, uint32_t, P, uint32_t) is the signature of
        // fl_fir (P = FirParams) and fl_filter2d (P = Filter2dParams), the only kernels the
        // constructors name; each touches at most `capacity` floats of either buffer.
        unsafe { launch.launch(config(grid_for(capacity, OP_THREADS), OP_THREADS)) }
            .map_err(|e| ctx.enqueue_error(self.kernel, e))?;
        Ok(())
    }
}
