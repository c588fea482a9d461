//! The built-in operators as GPU-resident operators (one kernel launch
//! each), one module per operator with its CUDA source beside it
//! ([`unpack`], [`fir`], [`filter2d`], [`reduce`] for stats and threshold,
//! [`fft`], [`delay`]; [`stage`] for the one-copy payload path), the
//! launch arithmetic they share, and the main fragment built from a
//! configured chain ([`chain`]). An operator's spec and CPU reference are
//! in [`crate::ops`]; its step of the fused chains in [`crate::gpu::fused`].
//!
//! Choices made for latency on small frames (8 KiB is the design point):
//! one graph node per operator, and a stats next to a threshold fused into
//! one; elementwise grids are capped at [`MAX_GRID`] blocks with grid-stride
//! loops, so a graph captured for the largest frame wastes few empty blocks
//! on small ones. Reductions spread a large frame over the whole GPU (see
//! [`ReduceOp`]) and keep one block for small ones. Kernels read the sample
//! count from the FrameDesc at run time and clamp it to their buffers, so a
//! frame never makes them touch memory outside a port.

pub mod chain;
pub mod delay;
pub mod fft;
mod filter;
pub mod filter2d;
pub mod fir;
mod launch;
pub mod reduce;
pub mod stage;
pub mod unpack;

pub use crate::gpu::param_banks::NO_PARAM_STEP;
pub use chain::{
    ChainLayout, InsertionPoint, PayloadPath, build_main_fragment, build_main_fragment_around,
    build_main_fragment_with,
};
pub use delay::DelayOp;
pub use filter::FilterOp;
pub use filter2d::{Filter2dOp, Filter2dParams};
pub use fir::{FirOp, FirParams};
pub use launch::{MAX_GRID, OP_THREADS};
pub use reduce::{
    REDUCE_BLOCK_SAMPLES, REDUCE_MAX_BLOCKS, REDUCE_ONE_BLOCK_SAMPLES, REDUCE_SCRATCH_BYTES, REDUCE_THREADS,
    ReduceOp, Reduction,
};
pub use stage::{STAGE_THREADS, StagePayloadOp};
pub use unpack::UnpackOp;
