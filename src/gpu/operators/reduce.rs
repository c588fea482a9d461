//! The `stats` and `threshold` operators on the GPU: the frame reduced into
//! the ChainResult (kernels `fl_stats`, `fl_threshold`,
//! `fl_stats_threshold`, `reduce.cu` and `reduce.cuh` beside this file; the
//! fused chains use `reduce.cuh` too). Their specs are
//! [`crate::ops::OpSpec::Stats`] and [`crate::ops::OpSpec::Threshold`],
//! their CPU references [`crate::ops::cpu::stats`] and
//! [`crate::ops::cpu::threshold`].

use super::launch::{config, float_capacity, sample_bytes};
use crate::fragment::{ComputeContext, FragmentError, GpuResidentOperator, OperatorSpec, PortMemory};
use crate::gpu::param_banks::NO_PARAM_STEP;
use cudarc::driver::PushKernelArg;

/// Threads per block of the reductions (`FL_REDUCE_THREADS`).
pub const REDUCE_THREADS: u32 = 1024;
/// Samples a block of a grid reduction takes at least (`FL_REDUCE_BLOCK_SAMPLES`).
pub const REDUCE_BLOCK_SAMPLES: usize = REDUCE_THREADS as usize * 4;
/// Frames of at most this many samples are reduced by one block
/// (`FL_REDUCE_ONE_BLOCK_SAMPLES`, where the reason is given): a chain whose
/// largest frame is this small gets a one-block launch and no scratch.
pub const REDUCE_ONE_BLOCK_SAMPLES: usize = 32_768;
/// Most blocks of a grid reduction (`FL_REDUCE_MAX_BLOCKS`).
pub const REDUCE_MAX_BLOCKS: u32 = 1024;
/// Bytes of `FlReduceScratch` (`reduce.cuh`): a 16-byte ticket word,
/// then one 24-byte partial per block.
pub const REDUCE_SCRATCH_BYTES: usize = 16 + 24 * REDUCE_MAX_BLOCKS as usize;
/// Which reductions a [`ReduceOp`] computes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reduction {
    /// Sum, min, max, mean.
    Stats,
    /// Count above `level` and first index.
    Threshold { level: f32 },
    /// Both in one pass (a stats next to a threshold in the chain).
    StatsThreshold { level: f32 },
}

/// `stats` and/or `threshold`: the frame reduced into the ChainResult. Port
/// `in`; `out` passes the samples through unchanged.
///
/// When the largest frame has more than [`REDUCE_ONE_BLOCK_SAMPLES`] samples
/// the kernel runs on up to two blocks per SM (as many as fit at once, at
/// most one per [`REDUCE_BLOCK_SAMPLES`] and [`REDUCE_MAX_BLOCKS`]). Each
/// block reduces a grid-stride share of the frame into its slot of the
/// operator's scratch; the last block to finish combines the slots in block
/// order (`reduce.cuh`), so the result's bits do not depend on the
/// order the blocks ran in. The scratch is the unconnected output port
/// `scratch`, allocated (zeroed) with the graph's buffers and only ever
/// touched by this operator's kernel; nothing is allocated or synchronised
/// per frame, so the launch captures into a graph. A small frame in such a
/// graph is still reduced by one block (the others return at once).
pub struct ReduceOp {
    name: String,
    reduction: Reduction,
    max_samples: usize,
    /// Where the frame's parameter bank holds the level ([`NO_PARAM_STEP`]: none).
    param_step: u32,
}

impl ReduceOp {
    pub fn new(name: &str, reduction: Reduction, max_samples: usize) -> Self {
        Self { name: name.to_owned(), reduction, max_samples, param_step: NO_PARAM_STEP }
    }

    /// Whether frames can be large enough for more than one block (and the
    /// operator declares its `scratch` port).
    fn spans_blocks(&self) -> bool {
        self.max_samples > REDUCE_ONE_BLOCK_SAMPLES
    }

    /// Reads the level from step `step` of the frame's parameter bank.
    pub(super) fn with_param_step(self, step: u32) -> Self {
        Self { param_step: step, ..self }
    }
}

/// Blocks of a grid reduction over at most `max_samples` samples on a GPU
/// of `sms` multiprocessors each holding `resident` blocks of the kernel at
/// once: every block that can run at once, at most two per SM, no more than
/// the largest frame has shares of [`REDUCE_BLOCK_SAMPLES`], and at most
/// [`REDUCE_MAX_BLOCKS`]; 1 when frames never need more than one block.
fn reduce_grid(max_samples: usize, sms: u32, resident: u32) -> u32 {
    if max_samples <= REDUCE_ONE_BLOCK_SAMPLES {
        return 1;
    }
    let shares = u32::try_from(max_samples.div_ceil(REDUCE_BLOCK_SAMPLES)).unwrap_or(u32::MAX);
    let at_once = sms.saturating_mul(resident.clamp(1, 2));
    shares.min(at_once).clamp(1, REDUCE_MAX_BLOCKS)
}

impl GpuResidentOperator for ReduceOp {
    fn name(&self) -> &str {
        &self.name
    }

    fn setup(&mut self, spec: &mut OperatorSpec) {
        spec.input("in", PortMemory::Size(sample_bytes(self.max_samples)))
            .output("out", PortMemory::SameAsInput("in".to_owned()));
        if self.spans_blocks() {
            spec.output("scratch", PortMemory::Size(REDUCE_SCRATCH_BYTES));
        }
    }

    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        let x = ctx.port("in")?;
        let capacity = float_capacity(x);
        let (kernel, level) = match self.reduction {
            Reduction::Stats => ("fl_stats", None),
            Reduction::Threshold { level } => ("fl_threshold", Some(level)),
            Reduction::StatsThreshold { level } => ("fl_stats_threshold", Some(level)),
        };
        let f = ctx.kernel(kernel)?;
        let (grid, scratch) = if self.spans_blocks() {
            let scratch = ctx.port("scratch")?;
            debug_assert!(scratch.bytes >= REDUCE_SCRATCH_BYTES);
            let sms = ctx
                .stream()
                .context()
                .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .map_err(|e| ctx.enqueue_error("reading the SM count for the reduction grid", e))?;
            let resident = f
                .occupancy_max_active_blocks_per_multiprocessor(REDUCE_THREADS, 0, None)
                .map_err(|e| ctx.enqueue_error("reading the reduction kernel's occupancy", e))?;
            let grid = reduce_grid(self.max_samples, u32::try_from(sms).unwrap_or(1), resident);
            (grid, scratch.dptr)
        } else {
            (1, 0)
        };
        let (fd, result) = (ctx.frame_desc(), ctx.chain_result());
        // Last in the chain: the kernel publishes the result (one graph node fewer).
        let publisher = ctx.take_result_publisher().unwrap_or(0);
        let mut launch = ctx.stream().launch_builder(f);
        launch.arg(&fd).arg(&x.dptr).arg(&capacity).arg(&result);
        if let Some(level) = &level {
            launch.arg(level);
        }
        launch.arg(&scratch).arg(&publisher);
        if level.is_some() {
            launch.arg(&self.param_step);
        }
        // SAFETY: (const FrameDesc*, const float*, uint32_t, ChainResult*[, float],
        // FlReduceScratch*, const LoopParams*[, uint32_t]) is the signature of fl_stats / fl_threshold /
        // fl_stats_threshold; `scratch` is this operator's zeroed REDUCE_SCRATCH_BYTES port,
        // or 0 with a grid of one block (which never touches it); the grid is at most
        // REDUCE_MAX_BLOCKS, the slots the scratch holds; `publisher` is 0 or the
        // executor's LoopParams in device memory.
        unsafe { launch.launch(config(grid, REDUCE_THREADS)) }.map_err(|e| ctx.enqueue_error(kernel, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_use_one_block_for_small_frames_and_the_gpu_for_large_ones() {
        // The design point and anything up to the one-block limit: one block, no scratch.
        assert_eq!(reduce_grid(4096, 132, 1), 1);
        assert_eq!(reduce_grid(REDUCE_ONE_BLOCK_SAMPLES, 132, 2), 1);
        // Just past it: one block per share.
        assert_eq!(reduce_grid(REDUCE_ONE_BLOCK_SAMPLES + 1, 132, 2), 9);
        // Every resident block, at most two per SM, at most one per share: a
        // 2 MiB u16 frame (1 Mi samples) has 256 shares.
        assert_eq!(reduce_grid(1 << 20, 132, 1), 132);
        assert_eq!(reduce_grid(1 << 20, 132, 2), 256);
        assert_eq!(reduce_grid(2 << 20, 132, 2), 264);
        assert_eq!(reduce_grid(2 << 20, 132, 8), 264);
        // Never more blocks than the scratch has slots, never zero.
        assert_eq!(reduce_grid(usize::MAX, 4000, 2), REDUCE_MAX_BLOCKS);
        assert_eq!(reduce_grid(1 << 20, 0, 0), 1);
    }
}
