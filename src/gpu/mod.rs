//! The CUDA backend: NVRTC compilation of the embedded kernels, the ring
//! memory the GPU reads, and the persistent WHILE/IF graph that runs the
//! operator chain per frame.
//!
//! Layering: everything here sits on the CUDA layer ([`crate::cuda`], the
//! only place with raw driver, NVRTC and cuFFT calls; [`driver`] re-exports
//! its graph, launch and buffer types under their old paths). [`mapped`]
//! (zero-copy ring memory), [`device_copy`] (non-synchronising copies) and
//! [`device_memory`] (device-only ring memory) give the rings their memory;
//! [`nvrtc`] and [`library`] compile and load kernels; on top, the runtime
//! (an opened GPU), [`executor`] (the resident executor: graph building,
//! run control and live changes as its parts), [`operators`] (the built-in
//! operators, each beside its CUDA source), [`fused`] (the fused chains),
//! [`user`] (the user's CUDA code) and [`CudaLoop`] (the loop as the
//! appliance sees it).

pub mod actuation;
pub mod chain_builder;
mod chain_plan;
pub mod clock;
pub mod control;
mod cuda_loop;
pub mod device_copy;
pub mod device_memory;
pub mod driver;
pub mod executor;
pub mod fused;
pub mod kernel_sources;
pub mod library;
pub mod live_chain;
pub mod mapped;
pub mod nvrtc;
pub mod operators;
mod output_publish;
pub mod param_banks;
mod runtime;
pub mod sources;
pub mod streaming;
#[doc(hidden)]
pub mod test_rings;
pub mod user;

use cudarc::driver::sys;
use thiserror::Error;

pub use crate::cuda::device::{GpuInfo, GpuUnavailable, driver_present, nvrtc_present, probe};
pub use crate::cuda::error::CudaError;
/// What a Rust GPU operator implements and uses (see `Appliance::builder`).
pub use crate::fragment::{ComputeContext, FragmentError, GpuResidentOperator, OperatorSpec, PortMemory};
pub use chain_builder::{ChainBuilderError, OperatorPosition, samples_after};
pub use control::LoopControl;
pub use cuda_loop::CudaLoop;
pub use executor::ResidentExecutor;
pub use library::KernelLibrary;
pub use mapped::MappedMemory;
pub use runtime::GpuRuntime;

/// What `bench --compare` builds its workloads with (the executor's graph part).
#[doc(hidden)]
pub use executor::graph::{chain_flags, chain_fragment, chain_fragment_with, fused_shared_limit};

/// Errors of the CUDA backend, each saying how to fix the problem.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GpuError {
    /// The machine has no usable GPU, driver or NVRTC: install what the
    /// message names, or run the host backend.
    #[error("no usable GPU: {0}")]
    Unavailable(#[from] GpuUnavailable),
    /// A call of the CUDA layer failed. The [`CudaError`] keeps the status
    /// (`CudaError::Driver { source: DriverError(code), .. }`), which is
    /// also this error's source; its message says how to fix it.
    #[error(transparent)]
    Driver(CudaError),
    /// NVRTC rejected a kernel source: the log names the file and line;
    /// fix the source (or the `FRAMELOOP_NVRTC_DEFINES` the reason names).
    #[error("NVRTC could not compile {file}: {reason}\n{log}")]
    Compile {
        /// The source file NVRTC compiled.
        file: String,
        /// Why it failed: the NVRTC status or the check that refused it.
        reason: String,
        /// NVRTC's program log (errors with file and line).
        log: String,
    },
    /// A chain names a kernel that no loaded module holds: list its source
    /// among the embedded (or the user's) sources.
    #[error("kernel {0} is in none of the loaded modules; is its source listed in the embedded sources?")]
    MissingKernel(String),
    /// An operator failed on the GPU while the loop ran: see the stage and
    /// the frame's ring sequence, fix the operator or its input, restart.
    #[error("the resident loop faulted in stage {stage} (ring sequence {ring_seq}): {error}")]
    StageFault {
        /// The stage (operator or loop step) that was running.
        stage: String,
        /// The ring sequence of the frame it was working on.
        ring_seq: u64,
        /// What failed, as the driver reported it.
        error: String,
    },
    /// The loop did not stop at tear-down: the GPU may be wedged; restart
    /// the process (and check `nvidia-smi`).
    #[error(
        "the resident loop did not stop within {waited_ms} ms of tear-down (last stage {stage}); the GPU may be wedged: restart the process"
    )]
    TearDownTimeout {
        /// How long tear-down waited for the loop.
        waited_ms: u64,
        /// The last stage the loop was seen in.
        stage: String,
    },
    /// Memory the loop needs could not be made usable by the GPU: the
    /// message says which limit to raise or what to make smaller.
    #[error("{what} is not usable by the GPU: {why}")]
    Memory {
        /// The memory (e.g. `mapped host memory`).
        what: &'static str,
        /// Why, with the limit to raise or what to make smaller.
        why: String,
    },
    /// The loop's configuration cannot be set up as asked: the message
    /// names the setting to change.
    #[error("invalid loop setup: {0}")]
    Setup(String),
}

impl GpuError {
    /// Builds a [`GpuError::Driver`] from a failed driver call.
    pub fn driver(call: &'static str, code: sys::CUresult) -> Self {
        GpuError::Driver(CudaError::driver(call, code))
    }

    /// The driver status, when a driver call failed.
    pub fn driver_code(&self) -> Option<sys::CUresult> {
        match self {
            GpuError::Driver(e) => e.driver_code(),
            _ => None,
        }
    }
}

/// Converts a raw driver status into a `Result`, naming the call.
pub fn check(call: &'static str, code: sys::CUresult) -> Result<(), GpuError> {
    Ok(crate::cuda::check(call, code)?)
}

impl From<CudaError> for GpuError {
    fn from(e: CudaError) -> Self {
        match e {
            CudaError::Unavailable(why) => GpuError::Unavailable(why),
            other => GpuError::Driver(other),
        }
    }
}

impl From<cudarc::driver::DriverError> for GpuError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        GpuError::Driver(e.into())
    }
}
