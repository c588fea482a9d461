//! The `delay` operator on the GPU: holds the chain for a while (kernel
//! `fl_delay`, `delay.cu` beside this file), for tests that need a slow
//! GPU. Its spec is [`crate::ops::OpSpec::Delay`], its CPU reference
//! [`crate::ops::cpu::delay`].

use super::launch::config;
use crate::fragment::{ComputeContext, FragmentError, GpuResidentOperator, OperatorSpec, PortMemory};
use crate::gpu::param_banks::NO_PARAM_STEP;
use cudarc::driver::PushKernelArg;

/// Holds the chain for `delay_ns` on the GPU (one spinning thread). Port
/// `in`; `out` passes the samples through.
pub struct DelayOp {
    name: String,
    delay_ns: u64,
    port_bytes: usize,
    /// Where the frame's parameter bank holds the delay ([`NO_PARAM_STEP`]: none).
    param_step: u32,
}

impl DelayOp {
    pub fn new(name: &str, delay_ns: u64, port_bytes: usize) -> Self {
        Self { name: name.to_owned(), delay_ns, port_bytes, param_step: NO_PARAM_STEP }
    }

    /// Reads the delay from step `step` of the frame's parameter bank.
    pub(super) fn with_param_step(self, step: u32) -> Self {
        Self { param_step: step, ..self }
    }
}

impl GpuResidentOperator for DelayOp {
    fn name(&self) -> &str {
        &self.name
    }

    fn setup(&mut self, spec: &mut OperatorSpec) {
        spec.input("in", PortMemory::Size(self.port_bytes.max(1)))
            .output("out", PortMemory::SameAsInput("in".to_owned()));
    }

    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        let f = ctx.kernel("fl_delay")?;
        let fd = ctx.frame_desc();
        let mut launch = ctx.stream().launch_builder(f);
        launch.arg(&self.delay_ns).arg(&fd).arg(&self.param_step);
        // SAFETY: (uint64_t, const FrameDesc*, uint32_t) is fl_delay's signature; it reads
        // the FrameDesc (and the parameter bank it names) and writes no memory.
        unsafe { launch.launch(config(1, 1)) }.map_err(|e| ctx.enqueue_error("fl_delay", e))?;
        Ok(())
    }
}
