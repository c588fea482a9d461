//! The built-in operators as GPU-resident operators (one kernel launch each,
//! kernels in `kernels/`), the main fragment built from a configured chain,
//! and an artificial delay operator for tests that need a slow GPU.
//!
//! Choices made for latency on small frames (8 KiB is the design point):
//! one graph node per operator, and a stats next to a threshold fused into
//! one; elementwise grids are capped at [`MAX_GRID`] blocks with grid-stride
//! loops, so a graph captured for the largest frame wastes few empty blocks
//! on small ones. Reductions spread a large frame over the whole GPU (see
//! [`ReduceOp`]) and keep one block for small ones. Kernels read the sample
//! count from the FrameDesc at run time and clamp it to their buffers, so a
//! frame never makes them touch memory outside a port.

pub mod fft;

use cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};

use crate::fragment::{
    ComputeContext, DeviceRegion, Fragment, FragmentError, GpuResidentOperator, OperatorId, OperatorSpec,
    PortMemory,
};
use crate::ops::{MAX_FIR_TAPS, OpSpec, SampleFormat, validate_chain};

/// Threads per block of the elementwise kernels (`FL_OP_THREADS`).
pub const OP_THREADS: u32 = 256;
/// A graph kernel's `param_step` when its arguments are its only values (`FL_NO_PARAM_STEP`).
pub const NO_PARAM_STEP: u32 = u32::MAX;

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
/// Bytes of `FlReduceScratch` (kernels/reduce.cuh): a 16-byte ticket word,
/// then one 24-byte partial per block.
pub const REDUCE_SCRATCH_BYTES: usize = 16 + 24 * REDUCE_MAX_BLOCKS as usize;
/// Most blocks an elementwise kernel is launched with; larger frames are
/// covered by grid-stride loops, so a graph sized for big frames stays cheap
/// on small ones.
pub const MAX_GRID: u32 = 1024;

/// Floats a region holds, as the `capacity` the kernels take.
fn float_capacity(region: DeviceRegion) -> u32 {
    u32::try_from(region.bytes / 4).unwrap_or(u32::MAX)
}

/// Blocks for `items` work items of `per_block` each, within `1..=MAX_GRID`.
fn grid_for(items: u32, per_block: u32) -> u32 {
    items.div_ceil(per_block).clamp(1, MAX_GRID)
}

fn config(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 }
}

/// Bytes of an f32 sample buffer holding `samples` (at least one sample, so
/// that a port is never declared empty).
fn sample_bytes(samples: usize) -> usize {
    samples.max(1) * std::mem::size_of::<f32>()
}

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

/// Parameters of `fl_fir`, passed by value (mirrors `FirParams` in kernels/fir.cu).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FirParams {
    /// Odd, `1..=MAX_FIR_TAPS`.
    pub count: u32,
    pub taps: [f32; MAX_FIR_TAPS],
}

// SAFETY: plain #[repr(C)] data with the layout of the CUDA struct.
unsafe impl DeviceRepr for FirParams {}

/// Parameters of `fl_filter2d`, passed by value (mirrors kernels/filter2d.cu).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Filter2dParams {
    /// At least 1.
    pub width: u32,
    pub kernel: [f32; 9],
}

// SAFETY: plain #[repr(C)] data with the layout of the CUDA struct.
unsafe impl DeviceRepr for Filter2dParams {}

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

/// `fir`: centred, zero-padded FIR.
pub type FirOp = FilterOp<FirParams>;
/// `filter2d`: 3x3 filter over rows of `width` samples.
pub type Filter2dOp = FilterOp<Filter2dParams>;

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
        Ok(Self { name: name.to_owned(), kernel: "fl_fir", params, max_samples, param_step: NO_PARAM_STEP })
    }
}

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
        Ok(Self {
            name: name.to_owned(),
            kernel: "fl_filter2d",
            params,
            max_samples,
            param_step: NO_PARAM_STEP,
        })
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
/// order (kernels/reduce.cuh), so the result's bits do not depend on the
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

/// Copies the claimed frame's payload from the mapped ring into device memory
/// and points the FrameDesc at the copy (one copy instead of zero-copy
/// reads; see [`PayloadPath`]). Output port `out`: the copy.
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

/// How [`build_main_fragment`] lays the chain out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainLayout {
    /// Run a stats next to a threshold as one kernel (one pass, one graph node fewer).
    pub fuse_reductions: bool,
    /// Append a [`DelayOp`] of this many ns (0: none).
    pub delay_ns: u64,
}

impl Default for ChainLayout {
    fn default() -> Self {
        Self { fuse_reductions: true, delay_ns: 0 }
    }
}

/// How the chain reads the frame in the mapped ring slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum PayloadPath {
    /// The unpack kernel reads the slot over the bus (16-byte loads, all in
    /// flight at once). Measured faster for 8 KiB frames on an H200
    /// (results archive: bench/results/gpu-latency-h200.txt), so the default.
    #[default]
    ZeroCopy,
    /// A [`StagePayloadOp`] copies the slot into device memory first.
    OneCopy,
}

/// Builds the main fragment for a configured chain and frames of at most
/// `max_frame_bytes`: one operator per chain entry (a stats next to a
/// threshold fused when asked), linked `out -> in`. Operators are named
/// `"<op>[<chain index>]"`, e.g. `fir[1]` or `stats+threshold[2]`; a user
/// kernel by its entry, `chain[2] kernel "beamform"`. User kernel sources
/// are read as they stand when the graph is built (see
/// [`crate::gpu::user_kernel::with_sources_resolved`]).
pub fn build_main_fragment(
    chain: &[OpSpec],
    max_frame_bytes: usize,
    layout: ChainLayout,
) -> Result<Fragment, FragmentError> {
    build_main_fragment_with(chain, max_frame_bytes, layout, PayloadPath::ZeroCopy)
}

/// [`build_main_fragment`] with a choice of payload path; with
/// [`PayloadPath::OneCopy`] a `stage` operator comes first.
pub fn build_main_fragment_with(
    chain: &[OpSpec],
    max_frame_bytes: usize,
    layout: ChainLayout,
    payload: PayloadPath,
) -> Result<Fragment, FragmentError> {
    build_main_fragment_around(chain, max_frame_bytes, layout, payload, &[], |point, _| {
        Ok::<_, FragmentError>(point.tail)
    })
}

/// Where [`build_main_fragment_around`] lets its caller add operators: after
/// the operator of chain entry `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InsertionPoint {
    /// The chain entry just added.
    pub index: usize,
    /// Samples its output holds at most (its `out` port is that many f32s).
    pub samples: usize,
    /// The operator whose `out` the next operator's `in` is linked to.
    pub tail: OperatorId,
}

/// [`build_main_fragment_with`], calling `insert` after each chain entry's
/// operator; `insert` may add operators linked behind `tail` and returns the
/// new tail. A stats and a threshold are not fused across an index listed in
/// `split_after`, so that operators inserted there run between them.
pub fn build_main_fragment_around<E: From<FragmentError>>(
    chain: &[OpSpec],
    max_frame_bytes: usize,
    layout: ChainLayout,
    payload: PayloadPath,
    split_after: &[usize],
    mut insert: impl FnMut(InsertionPoint, &mut Fragment) -> Result<OperatorId, E>,
) -> Result<Fragment, E> {
    validate_chain(chain).map_err(FragmentError::InvalidChain)?;
    let OpSpec::Unpack { format, .. } = chain[0] else { unreachable!("validate_chain puts unpack first") };
    // Samples flowing between operators: the unpacked frame, then the spectrum after an fft.
    let mut max_samples = format.samples_in(max_frame_bytes);
    let mut fragment = Fragment::new("main");
    let mut previous = match payload {
        PayloadPath::ZeroCopy => None,
        PayloadPath::OneCopy => Some(fragment.add_operator(StagePayloadOp::new("stage", max_frame_bytes))?),
    };
    let mut user_kernels = crate::gpu::user_kernel::UserKernels::new();
    // Operator i's values in the parameter bank: one FusedStep per operator
    // of the chain (super::param_banks::per_operator_image).
    let step = |i: usize| u32::try_from(i).unwrap_or(NO_PARAM_STEP);
    let mut i = 0;
    while i < chain.len() {
        let name = |op: &str| format!("{op}[{i}]");
        let next = chain.get(i + 1);
        let (id, consumed) = match &chain[i] {
            OpSpec::Unpack { format, scale, offset } => {
                let (name, f, s, o) = (&name("unpack"), *format, *scale, *offset);
                let op = match payload {
                    PayloadPath::ZeroCopy => UnpackOp::new(name, f, s, o, max_frame_bytes),
                    PayloadPath::OneCopy => UnpackOp::after_stage(name, f, s, o, max_frame_bytes),
                };
                (fragment.add_operator(UnpackOp { param_step: step(i), ..op })?, 1)
            }
            OpSpec::Fir { taps } => {
                let op = FirOp::fir(&name("fir"), taps, max_samples)?;
                (fragment.add_operator(FirOp { param_step: step(i), ..op })?, 1)
            }
            OpSpec::Filter2d { width, kernel } => {
                let op = Filter2dOp::filter2d(&name("filter2d"), *width, *kernel, max_samples)?;
                (fragment.add_operator(Filter2dOp { param_step: step(i), ..op })?, 1)
            }
            OpSpec::Fft(spec) => {
                let op = fft::FftOp::new(&name("fft"), spec, max_samples)?;
                max_samples = op.max_output_samples();
                (fragment.add_operator(op)?, 1)
            }
            OpSpec::Delay { us } => {
                let op = DelayOp::new(&name("delay"), *us as u64 * 1000, sample_bytes(max_samples));
                (fragment.add_operator(DelayOp { param_step: step(i), ..op })?, 1)
            }
            OpSpec::Kernel(k) => {
                let name = format!("chain[{i}] kernel \"{}\"", k.entry);
                let op = user_kernels.next(&name, k, max_samples)?.with_param_step(step(i));
                max_samples = op.max_output_samples();
                (fragment.add_operator(op)?, 1)
            }
            OpSpec::Stats | OpSpec::Threshold { .. } => {
                let (reduction, consumed) = match (&chain[i], next) {
                    (OpSpec::Stats, Some(OpSpec::Threshold { level }))
                    | (OpSpec::Threshold { level }, Some(OpSpec::Stats))
                        if layout.fuse_reductions && !split_after.contains(&i) =>
                    {
                        (Reduction::StatsThreshold { level: *level }, 2)
                    }
                    (OpSpec::Stats, _) => (Reduction::Stats, 1),
                    (OpSpec::Threshold { level }, _) => (Reduction::Threshold { level: *level }, 1),
                    _ => unreachable!("matched above"),
                };
                let label = match reduction {
                    Reduction::Stats => "stats",
                    Reduction::Threshold { .. } => "threshold",
                    Reduction::StatsThreshold { .. } => "stats+threshold",
                };
                // The level is the threshold's, wherever it stands in the pair.
                let level_at = if matches!(chain[i], OpSpec::Threshold { .. }) { i } else { i + 1 };
                let param_step =
                    if matches!(reduction, Reduction::Stats) { NO_PARAM_STEP } else { step(level_at) };
                let op = ReduceOp::new(&name(label), reduction, max_samples);
                (fragment.add_operator(ReduceOp { param_step, ..op })?, consumed)
            }
        };
        if let Some(prev) = previous {
            fragment.add_flow(prev, "out", id, "in")?;
        }
        let mut tail = id;
        for index in i..i + consumed {
            tail = insert(InsertionPoint { index, samples: max_samples, tail }, &mut fragment)?;
        }
        previous = Some(tail);
        i += consumed;
    }
    if layout.delay_ns > 0 {
        let id = fragment.add_operator(DelayOp::new("delay", layout.delay_ns, sample_bytes(max_samples)))?;
        fragment.add_flow(previous.expect("the chain is not empty"), "out", id, "in")?;
    }
    Ok(fragment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fragment::PortDirection;
    use crate::ops::default_chain;

    fn names(f: &Fragment) -> Vec<String> {
        let plan = f.plan().unwrap();
        plan.order().iter().map(|&id| f.operator_name(id).unwrap().to_owned()).collect()
    }

    #[test]
    fn default_chain_fuses_its_reductions_and_plans_two_buffers() {
        let f = build_main_fragment(&default_chain(), 8192, ChainLayout::default()).unwrap();
        assert_eq!(names(&f), ["unpack[0]", "fir[1]", "stats+threshold[2]"]);
        let plan = f.plan().unwrap();
        assert!(plan.diagnostics().is_empty(), "{:?}", plan.diagnostics());
        assert_eq!(plan.buffers().len(), 2);
        assert_eq!(plan.allocated_bytes(), 2 * 4096 * 4);
        // The chain's output is the FIR's buffer, passed through by the reduction.
        let last = *plan.order().last().unwrap();
        let fir = plan.order()[1];
        assert_eq!(
            plan.port_buffer(last, "out", PortDirection::Output),
            plan.port_buffer(fir, "out", PortDirection::Output)
        );
    }

    #[test]
    fn unfused_chain_with_every_operator_and_a_delay() {
        let chain = vec![
            OpSpec::Unpack { format: SampleFormat::U12, scale: 1.0, offset: 0.0 },
            OpSpec::Threshold { level: 1.0 },
            OpSpec::Filter2d { width: 7, kernel: [1.0; 9] },
            OpSpec::Fir { taps: vec![1.0; 3] },
            OpSpec::Stats,
        ];
        let layout = ChainLayout { fuse_reductions: false, delay_ns: 5_000 };
        let f = build_main_fragment(&chain, 3000, layout).unwrap();
        assert_eq!(names(&f), ["unpack[0]", "threshold[1]", "filter2d[2]", "fir[3]", "stats[4]", "delay"]);
        let plan = f.plan().unwrap();
        assert!(plan.diagnostics().is_empty(), "{:?}", plan.diagnostics());
        // unpack->threshold->filter2d share one, then filter2d->fir, fir->stats->delay.
        assert_eq!(plan.buffers().len(), 3);
        assert!(plan.buffers().iter().all(|b| b.bytes == 2000 * 4));
    }

    #[test]
    fn invalid_chains_are_refused_with_the_chain_errors() {
        let err = build_main_fragment(&[OpSpec::Stats], 64, ChainLayout::default()).unwrap_err();
        assert!(err.to_string().contains("must start with op = \"unpack\""), "{err}");
        assert!(FirOp::fir("fir", &[1.0, 2.0], 8).is_err());
        assert!(Filter2dOp::filter2d("f2d", 0, [0.0; 9], 8).is_err());
    }

    #[test]
    fn launch_geometry() {
        assert_eq!(grid_for(0, 256), 1);
        assert_eq!(grid_for(4096, 256), 16);
        assert_eq!(grid_for(1 << 20, 256), MAX_GRID);
        assert_eq!(float_capacity(DeviceRegion { dptr: 1, bytes: 4099 }), 1024);
        assert_eq!(std::mem::size_of::<FirParams>(), 4 + 4 * MAX_FIR_TAPS);
        assert_eq!(std::mem::size_of::<Filter2dParams>(), 40);
    }

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

    #[test]
    fn only_reductions_over_large_frames_declare_a_scratch() {
        let scratch = |max_samples| {
            let mut f = Fragment::new("t");
            let id = f.add_operator(ReduceOp::new("r", Reduction::Stats, max_samples)).unwrap();
            f.operator_spec(id).unwrap().port("scratch", PortDirection::Output).map(|p| p.memory.clone())
        };
        assert_eq!(scratch(REDUCE_ONE_BLOCK_SAMPLES), None);
        assert_eq!(scratch(REDUCE_ONE_BLOCK_SAMPLES + 1), Some(PortMemory::Size(REDUCE_SCRATCH_BYTES)));
        // A large chain plans the scratch as a buffer of its own, used by nothing else.
        let f = build_main_fragment(&default_chain(), 1 << 20, ChainLayout::default()).unwrap();
        let plan = f.plan().unwrap();
        assert!(plan.diagnostics().is_empty(), "{:?}", plan.diagnostics());
        let last = *plan.order().last().unwrap();
        let b = plan.port_buffer(last, "scratch", PortDirection::Output).unwrap();
        assert_eq!(plan.buffers()[b].bytes, REDUCE_SCRATCH_BYTES);
        assert_eq!(plan.buffers()[b].users, ["stats+threshold[2].scratch"]);
    }
}
