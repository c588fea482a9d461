//! The `stage` operator: copies the claimed frame's payload into device
//! memory before the chain (the one-copy payload path; kernel
//! `fl_stage_payload` in `kernels/stage.cu`, with the streaming pulls).

use super::launch::config;
use crate::fragment::{ComputeContext, FragmentError, GpuResidentOperator, OperatorSpec, PortMemory};
use cudarc::driver::PushKernelArg;

/// Copies the claimed frame's payload from the mapped ring into device memory
/// and points the FrameDesc at the copy (one copy instead of zero-copy
/// reads; see [`super::PayloadPath`]). Output port `out`: the copy.
pub struct StagePayloadOp {
    name: String,
    /// Bytes of the copy: the largest frame rounded up to 16.
    bytes: usize,
}

/// Threads of the one block of `fl_stage_payload` (`FL_STAGE_THREADS`).
pub const STAGE_THREADS: u32 = 1024;

impl StagePayloadOp {
    pub fn new(name: &str, max_frame_bytes: usize) -> Self {
        Self { name: name.to_owned(), bytes: max_frame_bytes.max(1).next_multiple_of(16) }
    }
}

impl GpuResidentOperator for StagePayloadOp {
    fn name(&self) -> &str {
        &self.name
    }

    fn setup(&mut self, spec: &mut OperatorSpec) {
        spec.output("out", PortMemory::Size(self.bytes));
    }

    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        let out = ctx.port("out")?;
        let words = u32::try_from(out.bytes / 16).unwrap_or(u32::MAX);
        let f = ctx.kernel("fl_stage_payload")?;
        let fd = ctx.frame_desc();
        let mut launch = ctx.stream().launch_builder(f);
        launch.arg(&fd).arg(&out.dptr).arg(&words);
        // SAFETY: (FrameDesc*, uint4*, uint32_t) is fl_stage_payload's signature; it writes at
        // most `words` 16-byte words of `out` and is launched as its one block of STAGE_THREADS.
        unsafe { launch.launch(config(1, STAGE_THREADS)) }
            .map_err(|e| ctx.enqueue_error("fl_stage_payload", e))?;
        Ok(())
    }
}
