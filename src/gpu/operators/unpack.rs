//! The `unpack` operator on the GPU: the claimed slot's payload to f32
//! samples (kernels `fl_unpack_*`, `unpack.cu` and `unpack.cuh` beside
//! this file). Its spec is [`crate::ops::OpSpec::Unpack`], its CPU
//! reference [`crate::ops::cpu::unpack`].

use cudarc::driver::PushKernelArg;

use super::launch::{OP_THREADS, config, float_capacity, grid_for, sample_bytes};
use crate::fragment::{ComputeContext, FragmentError, GpuResidentOperator, OperatorSpec, PortMemory};
use crate::gpu::param_banks::NO_PARAM_STEP;
use crate::ops::SampleFormat;

/// `unpack`: the claimed slot's payload to f32 samples; writes the frame's
/// sample count into the FrameDesc. Output port `out`.
pub struct UnpackOp {
    name: String,
    format: SampleFormat,
    scale: f32,
    offset: f32,
    max_samples: usize,
    /// Declares an input port `in` for a [`StagePayloadOp`] in front of it.
    staged: bool,
    /// Where the frame's parameter bank holds scale and offset ([`NO_PARAM_STEP`]: none).
    param_step: u32,
}

impl UnpackOp {
    pub fn new(name: &str, format: SampleFormat, scale: f32, offset: f32, max_frame_bytes: usize) -> Self {
        let max_samples = format.samples_in(max_frame_bytes);
        Self {
            name: name.to_owned(),
            format,
            scale,
            offset,
            max_samples,
            staged: false,
            param_step: NO_PARAM_STEP,
        }
    }

    /// An unpack behind a [`StagePayloadOp`]: it also declares the input
    /// port `in` (the staged copy; the kernel finds it through the FrameDesc).
    pub fn after_stage(
        name: &str,
        format: SampleFormat,
        scale: f32,
        offset: f32,
        max_frame_bytes: usize,
    ) -> Self {
        Self { staged: true, ..Self::new(name, format, scale, offset, max_frame_bytes) }
    }

    /// Kernel and samples each thread converts per chunk.
    fn kernel(&self) -> (&'static str, u32) {
        match self.format {
            SampleFormat::U8 => ("fl_unpack_u8", 16),
            SampleFormat::U16 => ("fl_unpack_u16", 8),
            SampleFormat::U12 => ("fl_unpack_u12", 8),
        }
    }

    /// Reads scale and offset from step `step` of the frame's parameter bank.
    pub(super) fn with_param_step(self, step: u32) -> Self {
        Self { param_step: step, ..self }
    }
}

impl GpuResidentOperator for UnpackOp {
    fn name(&self) -> &str {
        &self.name
    }

    fn setup(&mut self, spec: &mut OperatorSpec) {
        if self.staged {
            spec.input("in", PortMemory::Unspecified);
        }
        spec.output("out", PortMemory::Size(sample_bytes(self.max_samples)));
    }

    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        let out = ctx.port("out")?;
        let capacity = float_capacity(out);
        let (kernel, per_thread) = self.kernel();
        let f = ctx.kernel(kernel)?;
        let (fd, y) = (ctx.frame_desc(), out.dptr);
        let mut launch = ctx.stream().launch_builder(f);
        launch.arg(&fd).arg(&y).arg(&capacity).arg(&self.scale).arg(&self.offset).arg(&self.param_step);
        let cfg = config(grid_for(capacity, OP_THREADS * per_thread), OP_THREADS);
        // SAFETY: (FrameDesc*, float*, uint32_t, float, float, uint32_t) is fl_unpack_*'s signature; the
        // kernel writes at most `capacity` floats of `out` and reads at most payload_len bytes.
        unsafe { launch.launch(cfg) }.map_err(|e| ctx.enqueue_error(kernel, e))?;
        Ok(())
    }
}
