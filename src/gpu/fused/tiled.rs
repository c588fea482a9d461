//! The tiled fused chain: the fused program of [`super`] run by one
//! kernel per frame across many blocks (`fl_fused_tiled`,
//! kernels/fused_tiled.cu), for frames whose samples do not fit in one
//! block's shared memory. In the resident loop the kernel claims its own
//! frames (`fl_fused_tiled_loop`: block 0 polls and claims as the built-in
//! handler does while the other blocks wait on the device, so the loop body
//! is `WHILE { kernel }` with no IF body to launch per frame; while frames
//! stream, one more block of it pulls them into device memory as they
//! arrive, beside the poll); elsewhere the graph runs `handler ; IF {
//! fl_fused_tiled }`. Either way the kernel's last tile block publishes the
//! result.
//!
//! Each block takes one tile of the frame plus a halo (the samples the
//! chain's FIR and filter2d steps reach on either side), unpacks it straight
//! from the slot into shared memory and runs every step there; stats and
//! threshold are folded in as per-block partials that the last block to
//! finish combines in block order, so results are identical run to run.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::{FusedChain, FusedProgram, step};
use crate::fragment::{
    ComputeContext, Fragment, FragmentError, GpuResidentOperator, OperatorSpec, PortMemory,
};
use crate::gpu::driver::DeviceBuffer;
use crate::gpu::operators::{REDUCE_MAX_BLOCKS, REDUCE_SCRATCH_BYTES, REDUCE_THREADS};
use thiserror::Error;

/// Samples a tile holds at least: two per thread, so that a small frame is
/// not spread over blocks that each do almost nothing but count in.
pub const MIN_TILE_SAMPLES: usize = 2 * REDUCE_THREADS as usize;

/// A tile holds at least this many times the chain's halo. Each block reads
/// its halos from the slot again, and the slot lives in mapped host memory:
/// re-read bytes cross PCIe again (on an H100, 132 blocks read a 768 KiB
/// frame in 19.8 µs, 27.9 µs when each re-reads a 1538-byte halo on either
/// side, 32 such blocks in 21.5 µs, and 16 to 132 blocks without halos all
/// at the same rate; results archive: bench/results/gpu-h100-2026-11-25/large-fused/zc_read2.txt).
/// At 16 the halos add about 1/8 of the frame, and a 1024-wide 12-bit image
/// of 768 KiB gets 32 blocks.
pub const HALO_TILE_RATIO: u64 = 16;

/// Where the tiled kernel reads the frame from, which decides whether the
/// halo cap ([`HALO_TILE_RATIO`]) applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameSource {
    /// The ring slot in mapped host memory: every byte a block re-reads for
    /// its halos crosses the bus again, so tiles are kept at least
    /// [`HALO_TILE_RATIO`] halos long.
    MappedSlot,
    /// A copy in device memory (the staging buffer of sub-frame streaming,
    /// `crate::gpu::streaming`): re-reading a halo costs device bandwidth only,
    /// so the frame is spread over every block the GPU runs at once.
    DeviceMemory,
}

/// Why a chain cannot run tiled.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NotTiled {
    #[error(
        "the chain's filters reach {halo} samples either side of a tile, and a tile at least as long with its halos needs {needed} B of shared memory per block where {limit} B are available; use narrower filter2d rows or fewer filters"
    )]
    HaloTooWide { halo: u64, needed: usize, limit: usize },
    #[error(
        "frames of {capacity} samples with their halos are more than the tiled kernel's 32-bit sample indices reach (2^31 - 1); use a smaller ring.slot_bytes (at most 1 GiB)"
    )]
    TooLarge { capacity: usize },
    #[error("an empty chain has nothing to tile")]
    Empty,
}

/// Samples the chain's filter steps reach in total on either side of an
/// output: `count / 2` per FIR, `width + 1` per filter2d (a 3x3 window one
/// row and one sample away). Each block recomputes that many samples of its
/// neighbours' tiles instead of exchanging them.
pub fn chain_halo(program: &FusedProgram) -> u64 {
    program.steps[..program.step_count as usize]
        .iter()
        .map(|s| match s.kind {
            step::FIR => u64::from(s.count / 2),
            step::FILTER2D => u64::from(s.count) + 1,
            _ => 0,
        })
        .sum()
}

/// How a frame is cut into tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TilePlan {
    /// Blocks of the kernel (at most [`REDUCE_MAX_BLOCKS`]).
    pub grid: u32,
    /// Samples either side of a tile a block recomputes.
    pub halo: u32,
    /// Floats of each of the block's two shared buffers: a tile of
    /// ceil(capacity / grid) rounded up to 4 plus twice the held halo
    /// ([`held_halo`]), or what the shared memory holds.
    pub span: u32,
}

/// The samples a block's buffers keep either side of its tile for a chain
/// reaching `halo`: the halo rounded up to 4, so that every tile's first
/// sample, and every unpacked chunk, starts on a 16-byte boundary of the
/// buffer and is stored with vector stores (the kernel's `halo_held`).
pub fn held_halo(halo: u64) -> u64 {
    halo.next_multiple_of(4)
}

impl TilePlan {
    /// Dynamic shared memory of one block.
    pub fn shared_bytes(&self) -> usize {
        2 * self.span as usize * std::mem::size_of::<f32>()
    }

    /// Samples of a tile of a frame of `n` samples, as the kernel cuts it:
    /// ceil(n / grid) rounded up to 4, at most what a buffer holds beside
    /// the held halo (rounded down to 4).
    pub fn tile_len(&self, n: usize) -> usize {
        let held = held_halo(u64::from(self.halo)) as usize;
        let room = (self.span as usize).saturating_sub(2 * held) & !3;
        n.div_ceil(self.grid as usize).next_multiple_of(4).min(room)
    }

    /// Tile `k` of a frame of `n` samples (block `k % grid` computes it);
    /// the last one shorter, those past the frame empty.
    pub fn tile(&self, n: usize, k: usize) -> std::ops::Range<usize> {
        let len = self.tile_len(n);
        let start = (k * len).min(n);
        start..(start + len).min(n)
    }

    /// Tiles of a frame of `n` samples.
    pub fn tiles(&self, n: usize) -> usize {
        match self.tile_len(n) {
            0 => 0,
            len => n.div_ceil(len),
        }
    }
}

/// Places (room for one block on an SM) the tiled kernel leaves to kernels
/// launched beside the loop, the GPU clock's probe once a second among
/// them. With every place taken such a kernel starts only when one of the
/// loop's launches ends, and the loop's next launch, whose whole grid must
/// be resident before it claims a frame, then waits for it to finish: the
/// probe's 200 round trips held frames published meanwhile for up to 0.8 ms.
pub const PLACES_LEFT_FREE: u32 = 1;

/// Tile blocks of a kernel on a GPU that runs `places` of its blocks at
/// once, `pullers` of them pulling streamed frames: the rest less
/// [`PLACES_LEFT_FREE`], at least one.
pub fn tile_blocks(places: u32, pullers: u32) -> u32 {
    places.saturating_sub(pullers.saturating_add(PLACES_LEFT_FREE)).max(1)
}

/// Tiles for frames of at most `capacity` samples and a chain reaching
/// `halo`: `blocks` blocks (what the GPU runs at once), fewer when their
/// tiles would hold under [`MIN_TILE_SAMPLES`], and at most
/// `ceil(capacity / (HALO_TILE_RATIO * halo))` when the frame is read from
/// the mapped slot (`source`), `ceil(capacity / halo)` from device memory;
/// each block's buffers take
/// its tile and the halo, or as much as `shared_limit` bytes hold (a frame
/// then has more tiles than blocks). Refused when a tile would be shorter
/// than the halo (or 4 samples): the blocks would mostly recompute their
/// neighbours' samples.
pub fn plan_tiles(
    capacity: usize,
    halo: u64,
    blocks: u32,
    shared_limit: usize,
    source: FrameSource,
) -> Result<TilePlan, NotTiled> {
    // kernels/fused_tiled.cu indexes samples (halos included) in 32 bits.
    if (capacity as u64).saturating_add(held_halo(halo).saturating_mul(2)) > i32::MAX as u64 {
        return Err(NotTiled::TooLarge { capacity });
    }
    let by_size = u32::try_from(capacity.div_ceil(MIN_TILE_SAMPLES)).unwrap_or(u32::MAX);
    // Tiles at least HALO_TILE_RATIO halos long from the mapped slot, at
    // least one halo long from device memory (shorter ones would mostly
    // recompute their neighbours' samples).
    let ratio = match source {
        FrameSource::MappedSlot => HALO_TILE_RATIO,
        FrameSource::DeviceMemory => 1,
    };
    let by_halo = match halo {
        0 => u32::MAX,
        h => u32::try_from((capacity as u64).div_ceil(ratio.saturating_mul(h))).unwrap_or(u32::MAX),
    };
    let grid = blocks.min(by_size).min(by_halo).clamp(1, REDUCE_MAX_BLOCKS);
    let two_halos = 2 * held_halo(halo);
    let whole = capacity.div_ceil(grid as usize).next_multiple_of(4) as u64 + two_halos;
    let most = (shared_limit / 8) as u64 & !3;
    let span = whole.min(most).min(u64::from(u32::MAX) & !3);
    if span < two_halos + halo.max(4) {
        return Err(NotTiled::HaloTooWide {
            halo,
            needed: usize::try_from((two_halos + halo.max(4)).saturating_mul(8)).unwrap_or(usize::MAX),
            limit: shared_limit,
        });
    }
    Ok(TilePlan { grid, halo: halo as u32, span: span as u32 })
}

/// Whether the encoded chain runs tiled from `source` on a GPU whose blocks
/// may use `shared_limit` bytes of shared memory: [`plan_tiles`] for the
/// most blocks a grid may have, which refuses exactly when no grid would do.
pub fn plan_for(chain: &FusedChain, shared_limit: usize, source: FrameSource) -> Result<TilePlan, NotTiled> {
    let samples = chain.program.capacity as usize;
    plan_tiles(samples, chain_halo(&chain.program), REDUCE_MAX_BLOCKS, shared_limit, source)
}

/// The data-ready poll budget of a loop whose tiled kernel claims its own
/// frames (ns): its blocks wait on the device while block 0 polls, and
/// waits much longer than this made the GPU slower at everything. On an H200
/// (results archive: bench/results/gpu-h200-2026-11-26/claiming-budget/), 2 MiB frames read
/// in place took 190-198 µs p50 from publish to result with a budget of
/// 1,000 µs and 156-158 with 100 µs, against 93-100 with 20 µs and 106 for
/// the handler and IF body; their GPU time itself rose from 86-93 to
/// 157-161 µs. So the loop polls at most this long before it relaunches.
pub const CLAIMING_POLL_BUDGET_NS: u64 = 20_000;

/// The kernel of a [`FusedTiledOp`] that claims its own frames
/// ([`crate::fragment::ComputeContext::claims_frames`]).
const LOOP_KERNEL: &str = "fl_fused_tiled_loop";

/// Bytes of `FlTiledClaim` (kernels/fused_tiled.cu), the claim handshake.
const CLAIM_BYTES: usize = 64;

/// The device side of a [`FusedTiledOp`], made on its first enqueue.
struct Loaded {
    program: DeviceBuffer,
    plan: TilePlan,
    /// Blocks launched beside the plan's: 1 for the puller of a kernel that
    /// claims streamed frames (`fl_tiled_puller`), else 0.
    pullers: u32,
}

/// The whole chain as one `fl_fused_tiled` kernel across many blocks. Port
/// `scratch` (unconnected): the reduction partials and ticket, zeroed when
/// allocated and only ever touched by this kernel. With
/// [`FusedTiledOp::with_samples_port`] also `samples`, where the kernel
/// writes the chain's final samples (for tests; the loop does not need them).
pub struct FusedTiledOp {
    name: String,
    chain: FusedChain,
    source: FrameSource,
    samples_port: bool,
    loaded: Option<Loaded>,
}

impl FusedTiledOp {
    /// The chain as one tiled kernel reading frames from `source`.
    pub fn new(name: &str, chain: FusedChain, source: FrameSource) -> Result<Self, NotTiled> {
        if chain.program.step_count == 0 {
            return Err(NotTiled::Empty);
        }
        Ok(Self { name: name.to_owned(), chain, source, samples_port: false, loaded: None })
    }

    /// Declares the output port `samples` and has the kernel write the final samples there.
    pub fn with_samples_port(mut self) -> Self {
        self.samples_port = true;
        self
    }

    /// The tiling it runs with, once enqueued.
    pub fn plan(&self) -> Option<TilePlan> {
        self.loaded.as_ref().map(|l| l.plan)
    }

    fn problem(&self, problem: String) -> FragmentError {
        FragmentError::Operator { operator: self.name.clone(), problem }
    }

    /// Plans the tiles for this GPU with `pullers` blocks beside them,
    /// allows the kernel their shared memory and copies the program to the
    /// device (once for each number of pullers).
    fn load(&mut self, ctx: &ComputeContext<'_>, pullers: u32) -> Result<(), FragmentError> {
        use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
        if self.loaded.as_ref().is_some_and(|l| l.pullers == pullers) {
            return Ok(());
        }
        let f = ctx.kernel("fl_fused_tiled")?;
        let cuda = ctx.stream().context();
        let attr = |a| cuda.attribute(a).map_err(|e| ctx.enqueue_error("reading the device's limits", e));
        let sms = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let optin = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
        let looping = ctx.kernel(LOOP_KERNEL)?;
        let kernels = [(f, "fl_fused_tiled"), (looping, LOOP_KERNEL)];
        // The dynamic shared memory either kernel may take beside its own static share.
        let mut static_bytes = 0;
        for (k, _) in kernels {
            let bytes = k
                .shared_size_bytes()
                .map_err(|e| ctx.enqueue_error("reading the tiled kernels' static shared memory", e))?;
            static_bytes = static_bytes.max(bytes);
        }
        let limit = usize::try_from(optin - static_bytes).unwrap_or(0);
        let halo = chain_halo(&self.chain.program);
        let capacity = self.chain.program.capacity as usize;
        // One tile per SM first; a second per SM where two blocks fit at once.
        // A puller takes an SM (or a place) from the tiles, and one place
        // stays free (`PLACES_LEFT_FREE`).
        let sms = u32::try_from(sms).unwrap_or(1).max(1);
        let tile_blocks = |places: u32| tile_blocks(places, pullers);
        let mut plan = plan_tiles(capacity, halo, tile_blocks(sms), limit, self.source)
            .map_err(|e| self.problem(e.to_string()))?;
        // The grid never holds more blocks than the GPU runs at once: the
        // kernel that claims its own frames needs all of them resident.
        // Both kernels may use the one-per-SM plan's shared memory, the most
        // any plan below uses (more blocks, shorter tiles).
        for (k, _) in kernels {
            k.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                plan.shared_bytes() as i32,
            )
            .map_err(|e| ctx.enqueue_error("allowing the tiled kernels their shared memory", e))?;
        }
        // Blocks of both kernels an SM holds at once with `plan`'s shared memory.
        let resident = |plan: &TilePlan| -> Result<u32, FragmentError> {
            let mut fewest = u32::MAX;
            for (k, name) in kernels {
                let n = k
                    .occupancy_max_active_blocks_per_multiprocessor(REDUCE_THREADS, plan.shared_bytes(), None)
                    .map_err(|e| ctx.enqueue_error("reading the tiled kernels' occupancy", e))?;
                tracing::trace!("{name}: {n} blocks per SM with {} B of shared memory", plan.shared_bytes());
                fewest = fewest.min(n);
            }
            Ok(fewest)
        };
        let fit = resident(&plan)?;
        if fit == 0 {
            return Err(self.problem(format!(
                "no block of {REDUCE_THREADS} threads with {} B of shared memory fits on an SM of this GPU",
                plan.shared_bytes()
            )));
        }
        if fit >= 2 {
            let two = plan_tiles(capacity, halo, tile_blocks(2 * sms), limit, self.source)
                .map_err(|e| self.problem(e.to_string()))?;
            debug_assert!(
                two.shared_bytes() <= plan.shared_bytes(),
                "more blocks never need more shared memory"
            );
            if resident(&two)? >= 2 {
                plan = two;
            }
        }
        let held = sms.saturating_mul(resident(&plan)?);
        if plan.grid + pullers > held {
            return Err(self.problem(format!(
                "{} tile blocks and {pullers} puller need {} blocks resident at once where this GPU holds {held}; set loop.stream_to_gpu = \"off\"",
                plan.grid,
                plan.grid + pullers
            )));
        }
        let program = *self.chain.program;
        let buffer = DeviceBuffer::new(cuda, std::mem::size_of::<FusedProgram>(), 0)
            .map_err(|e| self.problem(e.to_string()))?;
        // SAFETY: FusedProgram is plain old data (integers and floats, no padding).
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&program as *const FusedProgram).cast::<u8>(),
                std::mem::size_of::<FusedProgram>(),
            )
        };
        buffer.write(0, bytes).map_err(|e| self.problem(e.to_string()))?;
        tracing::debug!(
            "tiled fused chain: {} blocks (and {pullers} puller), halo {} samples, {} B of shared memory each",
            plan.grid,
            plan.halo,
            plan.shared_bytes()
        );
        self.loaded = Some(Loaded { program: buffer, plan, pullers });
        Ok(())
    }
}

impl GpuResidentOperator for FusedTiledOp {
    fn name(&self) -> &str {
        &self.name
    }

    fn setup(&mut self, spec: &mut OperatorSpec) {
        spec.output("scratch", PortMemory::Size(REDUCE_SCRATCH_BYTES));
        spec.output("claim", PortMemory::Size(CLAIM_BYTES));
        if self.samples_port {
            spec.output("samples", PortMemory::Size(self.chain.buffer_bytes().max(4)));
        }
    }

    fn reads_streamed_frames(&self) -> bool {
        self.source == FrameSource::DeviceMemory
    }

    fn can_claim_frames(&self) -> bool {
        true
    }

    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        let scratch = ctx.port("scratch")?;
        let samples = if self.samples_port { ctx.port("samples")?.dptr } else { 0 };
        // Planned for device memory, it reads a streaming frame's pulled part
        // from the staging buffer and the rest from the slot.
        let (stream_state, staged, staged_words) = match ctx.streamed_frame() {
            Some(s) if self.reads_streamed_frames() => (s.state, s.staging, s.staging_words),
            _ => (0, 0, 0),
        };
        // Claiming streamed frames, the kernel pulls them with a block of its own.
        let pullers = u32::from(ctx.claims_frames() && stream_state != 0);
        self.load(ctx, pullers)?;
        let Some(loaded) = &self.loaded else { unreachable!("loaded above") };
        let plan = loaded.plan;
        let (fd, result) = (ctx.frame_desc(), ctx.chain_result());
        let program = loaded.program.dptr();
        // The only operator of its fragment: the kernel publishes the result.
        let publisher = ctx.take_result_publisher().unwrap_or(0);
        let cfg = LaunchConfig {
            grid_dim: (plan.grid, 1, 1),
            block_dim: (REDUCE_THREADS, 1, 1),
            shared_mem_bytes: plan.shared_bytes() as u32,
        };
        if ctx.claims_frames() {
            let cfg = LaunchConfig { grid_dim: (plan.grid + pullers, 1, 1), ..cfg };
            if publisher == 0 {
                return Err(self.problem("asked to claim the frames without the loop's parameters".into()));
            }
            let claim = ctx.port("claim")?.dptr;
            let f = ctx.kernel(LOOP_KERNEL)?;
            let mut launch = ctx.stream().launch_builder(f);
            launch
                .arg(&publisher)
                .arg(&program)
                .arg(&scratch.dptr)
                .arg(&claim)
                .arg(&plan.halo)
                .arg(&plan.span)
                .arg(&samples)
                .arg(&stream_state)
                .arg(&staged)
                .arg(&staged_words);
            // SAFETY: (const LoopParams*, const FusedProgram*, FlReduceScratch*, FlTiledClaim*,
            // uint32_t, uint32_t, float*, FlStreamState*, uint8_t*, uint32_t) is
            // fl_fused_tiled_loop's signature; `publisher` is the loop's parameters in device
            // memory, `claim` this operator's zeroed CLAIM_BYTES port, `staged` 0 or the loop's
            // staging buffer of `staged_words` 16-byte words (the pulls write at most that many)
            // with one block more than the tiles use for the puller, the rest as for
            // fl_fused_tiled below; the grid holds no more blocks than the GPU runs at once
            // (`load` plans the tiles for the GPU's blocks less the pullers), which the kernel's
            // claim handshake needs.
            unsafe { launch.launch(cfg) }.map_err(|e| ctx.enqueue_error("fl_fused_tiled_loop", e))?;
            return Ok(());
        }
        let f = ctx.kernel("fl_fused_tiled")?;
        let mut launch = ctx.stream().launch_builder(f);
        launch
            .arg(&fd)
            .arg(&program)
            .arg(&result)
            .arg(&scratch.dptr)
            .arg(&plan.halo)
            .arg(&plan.span)
            .arg(&publisher)
            .arg(&samples)
            .arg(&stream_state)
            .arg(&staged);
        // SAFETY: (FrameDesc*, const FusedProgram*, ChainResult*, FlReduceScratch*, uint32_t,
        // uint32_t, const LoopParams*, float*, const FlStreamState*, const uint8_t*) is
        // fl_fused_tiled's signature; `stream_state` and `staged` are 0 or the loop's
        // streaming state and its staging buffer of the slot's capacity; `program` is this
        // operator's copy of a FusedProgram; `scratch` its zeroed REDUCE_SCRATCH_BYTES port for a
        // grid of at most REDUCE_MAX_BLOCKS; the kernel was allowed `shared_mem_bytes`, which hold
        // two buffers of `span` floats, enough for the largest tile of `capacity` samples and its
        // halo; `samples` is 0 or a port of `capacity` floats; `publisher` 0 or the loop's params.
        unsafe { launch.launch(cfg) }.map_err(|e| ctx.enqueue_error("fl_fused_tiled", e))?;
        Ok(())
    }
}

/// The main fragment that runs `chain` tiled, reading frames from `source`: one [`FusedTiledOp`].
pub fn tiled_fragment(chain: FusedChain, source: FrameSource) -> Result<Fragment, FragmentError> {
    let op = FusedTiledOp::new("fused_tiled", chain, source)
        .map_err(|e| FragmentError::Operator { operator: "fused_tiled".into(), problem: e.to_string() })?;
    let mut fragment = Fragment::new("main");
    fragment.add_operator(op)?;
    Ok(fragment)
}

/// What runs a chain whose samples do not fit in one block's shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LargePath {
    /// One tiled kernel per frame (claiming its own frames in the resident loop).
    Tiled,
    /// One kernel per operator in the IF body.
    Graph,
}

/// One recorded `bench --compare` run: the chain's GPU detect-to-done p50
/// on each path at one frame size (both paths in the same run, on the GPU
/// its file names).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    pub frame_bytes: usize,
    /// The chain that ran: "default" (unpack u16 → 5-tap FIR → stats +
    /// threshold) or "image" (bench/configs/image-u12.toml: unpack u12 →
    /// 1024-wide filter2d → stats + threshold).
    pub chain: &'static str,
    /// The tiled fused kernel ("resident poll, tiled fused kernel", or its
    /// streamed mode).
    pub tiled_us: f64,
    /// One kernel per operator ("resident poll, graph IF body", or its
    /// streamed mode).
    pub graph_us: f64,
    /// The run's file, from the repository's root, as recorded in the
    /// results archive (tag `results-archive-2026-12`); the tree keeps its
    /// output as the section headed `==> NAME <==` of `runs.txt` in the
    /// same folder or one above it (the tests check the figures there).
    pub source: &'static str,
}

const fn run(
    frame_bytes: usize,
    chain: &'static str,
    tiled_us: f64,
    graph_us: f64,
    file: &'static str,
) -> Measured {
    Measured { frame_bytes, chain, tiled_us, graph_us, source: file }
}

/// A file of the H100 large-frame runs.
macro_rules! large_fused {
    ($file:literal) => {
        concat!("bench/results/gpu-h100-2026-11-25/large-fused/", $file)
    };
}

/// A file of the H200 streamed runs.
macro_rules! streamed_compare {
    ($file:literal) => {
        concat!("bench/results/gpu-h200-2026-11-26/tiled-fir-local/", $file)
    };
}

/// The recorded runs `loop.fused_chain = "auto"` chooses from for large
/// frames read in place from the mapped slot, ascending by size (H100;
/// docs/decisions.md, "Large frames"). Sizes where both chains ran agree on the
/// faster path, so the choice is keyed by frame size alone.
pub const MEASURED: &[Measured] = &[
    run(65_536, "default", 18.40, 16.58, large_fused!("sweep/default-65536.txt")),
    run(262_144, "default", 29.06, 26.14, large_fused!("sweep/default-262144.txt")),
    run(786_432, "image", 67.04, 59.17, large_fused!("compare-768k-image.txt")),
    run(1_048_576, "default", 67.20, 60.86, large_fused!("sweep/default-1048576.txt")),
    run(2_097_152, "default", 82.66, 88.26, large_fused!("compare-2mib.txt")),
    run(3_145_728, "image", 107.71, 118.21, large_fused!("sweep/image-3145728.txt")),
    run(4_194_304, "default", 113.22, 134.98, large_fused!("sweep/default-4194304.txt")),
    run(8_388_608, "default", 212.51, 198.62, large_fused!("sweep/default-8388608.txt")),
];

/// The recorded runs `auto` chooses from when frames stream into device
/// memory (`loop.stream_to_gpu`): `bench --compare`'s streamed modes, where
/// the chain reads the staging buffer instead of the mapped slot (H200).
/// The tiled kernel was as fast or faster at every size.
pub const STREAMED: &[Measured] = &[
    run(786_432, "image", 22.91, 24.22, streamed_compare!("768k-image.txt")),
    run(2_097_152, "default", 20.16, 32.19, streamed_compare!("2mib.txt")),
    run(8_388_608, "default", 37.73, 55.36, streamed_compare!("8mib.txt")),
];

/// The path `loop.fused_chain = "auto"` takes for frames of `frame_bytes`
/// that the shared-memory kernel cannot hold, from the run in `table`
/// nearest in size (by ratio), and a sentence saying why for the log.
/// Without a recorded run the tiled kernel is taken: it reads the frame on
/// every SM at once, where the kernel-per-operator graph writes and reads
/// every intermediate buffer through device memory.
pub fn choose_large(frame_bytes: usize, table: &[Measured]) -> (LargePath, String) {
    let distance = |m: &Measured| ((m.frame_bytes.max(1) as f64) / (frame_bytes.max(1) as f64)).ln().abs();
    let Some(m) = table.iter().min_by(|a, b| distance(a).total_cmp(&distance(b))) else {
        return (LargePath::Tiled, "no recorded measurement; the tiled kernel by default".to_owned());
    };
    let path = if m.tiled_us <= m.graph_us { LargePath::Tiled } else { LargePath::Graph };
    let why = format!(
        "measured at {} B frames ({} chain): tiled fused kernel {:.1} µs, one kernel per operator {:.1} µs \
         GPU time p50 ({})",
        m.frame_bytes, m.chain, m.tiled_us, m.graph_us, m.source
    );
    (path, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{OpSpec, SampleFormat, default_chain};

    fn image_chain() -> Vec<OpSpec> {
        vec![
            OpSpec::Unpack { format: SampleFormat::U12, scale: 1.0, offset: 0.0 },
            OpSpec::Filter2d { width: 1024, kernel: [0.1; 9] },
            OpSpec::Fir { taps: vec![0.2; 7] },
            OpSpec::Stats,
            OpSpec::Threshold { level: 1.0 },
        ]
    }

    #[test]
    fn the_halo_adds_each_filters_reach() {
        let c = FusedChain::encode(&default_chain(), 1 << 21).unwrap();
        assert_eq!(chain_halo(&c.program), 2, "a 5-tap FIR reaches two samples");
        let c = FusedChain::encode(&image_chain(), 786_432).unwrap();
        assert_eq!(chain_halo(&c.program), 1025 + 3);
    }

    /// Every sample of the frame in exactly one tile, in order, each tile
    /// with its halos inside a buffer.
    fn assert_covers(plan: &TilePlan, n: usize) {
        let mut next = 0;
        for k in 0..plan.tiles(n) {
            let t = plan.tile(n, k);
            assert_eq!(t.start, next, "n {n} tile {k}");
            assert!(!t.is_empty(), "n {n} tile {k} is empty");
            assert!(t.len() + 2 * plan.halo as usize <= plan.span as usize, "n {n} tile {k}");
            if t.end < n {
                assert_eq!(t.len() % 4, 0, "n {n} tile {k}: only the last tile is ragged");
            }
            next = t.end;
        }
        assert_eq!(next, n, "n {n}: the tiles end at the frame's end");
    }

    #[test]
    fn tiles_cover_every_frame_exactly_once_in_order() {
        let plan = plan_tiles(1 << 20, 2, 132, 200 * 1024, FrameSource::MappedSlot).unwrap();
        assert_eq!(plan.grid, 132);
        for n in [0usize, 1, 3, 4095, 524_288, (1 << 20) - 1, 1 << 20] {
            assert_covers(&plan, n);
            assert!(plan.tiles(n) <= plan.grid as usize, "n {n}: one tile per block when they fit");
        }
        // A frame larger than the blocks' buffers hold at once: several tiles per block.
        let small = plan_tiles(1 << 24, 1028, 132, 64 * 1024, FrameSource::MappedSlot).unwrap();
        for n in [1usize << 24, (1 << 24) - 5, 700_001] {
            assert_covers(&small, n);
        }
        assert!(small.tiles(1 << 24) > 4 * small.grid as usize);
    }

    #[test]
    fn one_place_stays_free_beside_the_tiles_and_the_puller() {
        // An H200's 132 SMs, one block each: 130 tiles and a puller, or 131
        // tiles, and one SM for the clock's probe.
        assert_eq!(tile_blocks(132, 1), 130);
        assert_eq!(tile_blocks(132, 0), 131);
        // Two blocks per SM: one place of the 264 stays free.
        assert_eq!(tile_blocks(264, 1), 262);
        // A GPU too small to spare a place still gets a tile block.
        assert_eq!((tile_blocks(2, 1), tile_blocks(1, 0), tile_blocks(1, 1)), (1, 1, 1));
        assert_eq!(tile_blocks(u32::MAX, u32::MAX), 1);
    }

    #[test]
    fn plans_follow_the_gpu_the_frame_and_the_shared_memory() {
        // 2 MiB of u16: 1 Mi samples over 132 SMs, tiles of 7944 and a halo
        // of 2, held as 4 either side (16-byte aligned tiles).
        let p = plan_tiles(1 << 20, 2, 132, 227 * 1024, FrameSource::MappedSlot).unwrap();
        assert_eq!((p.grid, p.halo), (132, 2));
        assert_eq!(p.span, (1u32 << 20).div_ceil(132).next_multiple_of(4) + 8);
        assert_eq!(p.shared_bytes(), 8 * p.span as usize);
        assert_eq!(p.tile_len(1 << 20), 7944);
        // Small frames get fewer blocks: tiles of at least MIN_TILE_SAMPLES.
        assert_eq!(plan_tiles(4096, 2, 132, 227 * 1024, FrameSource::MappedSlot).unwrap().grid, 2);
        assert_eq!(plan_tiles(1, 0, 132, 227 * 1024, FrameSource::MappedSlot).unwrap().grid, 1);
        // Too little shared memory for one tile per block: shorter tiles, more of them.
        let p = plan_tiles(1 << 20, 2, 132, 40 * 1024, FrameSource::MappedSlot).unwrap();
        assert_eq!((p.grid, p.span), (132, 5120));
        assert_eq!(p.tile_len(1 << 20), 5112);
        assert_eq!(p.tiles(1 << 20), (1usize << 20).div_ceil(5112));
        // A wide halo (a 1024-wide filter2d): fewer, longer tiles, so that
        // the halos each block reads again add at most 1/8 of the frame.
        let p = plan_tiles(524_288, 1025, 132, 227 * 1024, FrameSource::MappedSlot).unwrap();
        assert_eq!(p.grid, 32);
        assert_eq!(p.tile_len(524_288), 16_384, "about 16 halos");
        assert!(2 * 1025 * (p.grid as usize - 1) * 8 < 524_288, "{p:?}: halos under 1/8 with a block fewer");
        assert_covers(&p, 524_288);
        // Read from device memory the halos cost no bus traffic: every block,
        // as long as a tile is at least a halo long.
        let p = plan_tiles(524_288, 1025, 132, 227 * 1024, FrameSource::DeviceMemory).unwrap();
        assert_eq!(p.grid, 132);
        assert_covers(&p, 524_288);
        let p = plan_tiles(300_000, 5000, 132, 227 * 1024, FrameSource::DeviceMemory).unwrap();
        assert_eq!(p.grid, 60);
        assert!(p.tile_len(300_000) >= 5000, "{p:?}");
        assert_covers(&p, 300_000);
        assert_eq!(plan_tiles(3 << 20, 1025, 132, 227 * 1024, FrameSource::MappedSlot).unwrap().grid, 132);
        // A halo no tile can carry.
        let err = plan_tiles(1 << 20, 100_000, 132, 227 * 1024, FrameSource::MappedSlot).unwrap_err();
        assert!(matches!(err, NotTiled::HaloTooWide { halo: 100_000, .. }), "{err:?}");
        assert!(err.to_string().contains("100000 samples"), "{err}");
        // The largest slot's u8 frame is indexed; a frame past 32-bit indices is refused.
        assert!(plan_tiles(1 << 30, 1025, 132, 227 * 1024, FrameSource::DeviceMemory).is_ok());
        let err = plan_tiles(1 << 31, 0, 132, 227 * 1024, FrameSource::DeviceMemory).unwrap_err();
        assert!(matches!(err, NotTiled::TooLarge { capacity } if capacity == 1 << 31), "{err:?}");
        assert!(err.to_string().contains("ring.slot_bytes"), "{err}");
        assert!(
            FusedTiledOp::new("t", FusedChain::encode(&[], 64).unwrap(), FrameSource::MappedSlot).is_err()
        );
    }

    #[test]
    fn auto_takes_the_faster_path_of_the_nearest_recorded_size() {
        let m = |frame_bytes, tiled_us, graph_us| Measured {
            frame_bytes,
            chain: "c",
            tiled_us,
            graph_us,
            source: "x",
        };
        let table = [m(65_536, 30.0, 20.0), m(786_432, 40.0, 90.0), m(2 << 20, 60.0, 170.0)];
        assert_eq!(choose_large(65_536, &table).0, LargePath::Graph);
        assert_eq!(choose_large(100_000, &table).0, LargePath::Graph, "nearer 64 KiB than 768 KiB by ratio");
        assert_eq!(choose_large(300_000, &table).0, LargePath::Tiled, "nearer 768 KiB than 64 KiB by ratio");
        assert_eq!(choose_large(64 << 20, &table).0, LargePath::Tiled);
        let (_, why) = choose_large(786_432, &table);
        assert!(why.contains("786432 B") && why.contains("40.0 µs") && why.contains("90.0 µs"), "{why}");
        assert_eq!(choose_large(1 << 20, &[]).0, LargePath::Tiled);
    }

    /// The recorded output of the run `source` names: its section (headed
    /// `==> NAME <==`) of the `runs.txt` in the nearest folder above it
    /// that has one; `None` when there is none.
    fn recorded_run(root: &std::path::Path, source: &str) -> Option<String> {
        source.match_indices('/').rev().find_map(|(i, _)| {
            let runs = std::fs::read_to_string(root.join(&source[..i]).join("runs.txt")).ok()?;
            let header = format!("==> {} <==\n", &source[i + 1..]);
            let start = runs.find(&header)? + header.len();
            let end = runs[start..].find("\n==> ").map_or(runs.len(), |e| start + e);
            Some(runs[start..end].to_owned())
        })
    }

    /// The recorded table: ascending sizes, each run's output committed,
    /// and the choices it gives at the sizes users have.
    #[test]
    fn auto_chooses_from_the_recorded_runs() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        for table in [MEASURED, STREAMED] {
            assert!(table.windows(2).all(|w| w[0].frame_bytes < w[1].frame_bytes));
            for m in table {
                let text = recorded_run(root, m.source).unwrap_or_else(|| {
                    panic!("{}: no section of that name in the runs.txt beside it", m.source)
                });
                assert!(text.contains(&format!("| {} B frames |", m.frame_bytes)), "{}", m.source);
                assert!(text.contains(&format!("{:.2}", m.tiled_us)), "{}: tiled {}", m.source, m.tiled_us);
                assert!(text.contains(&format!("{:.2}", m.graph_us)), "{}: graph {}", m.source, m.graph_us);
            }
        }
        // The 768 KiB image and 1 MiB frames ran faster as one kernel per
        // operator, 2 to 4 MiB as the tiled kernel.
        let (path, why) = choose_large(786_432, MEASURED);
        assert_eq!(path, LargePath::Graph, "{why}");
        assert!(why.contains("large-fused/compare-768k-image.txt") && why.contains("67.0 µs"), "{why}");
        assert_eq!(choose_large(1 << 20, MEASURED).0, LargePath::Graph);
        assert_eq!(choose_large(2 << 20, MEASURED).0, LargePath::Tiled);
        assert_eq!(choose_large(3 << 20, MEASURED).0, LargePath::Tiled);
        assert_eq!(choose_large(4 << 20, MEASURED).0, LargePath::Tiled);
        assert_eq!(choose_large(100_000, MEASURED).0, LargePath::Graph);
        // Streamed into device memory the tiled kernel wins at every size.
        for bytes in [786_432, 1 << 20, 2 << 20, 8 << 20, 64 << 20] {
            assert_eq!(choose_large(bytes, STREAMED).0, LargePath::Tiled, "{bytes}");
        }
    }
}
