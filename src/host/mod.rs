//! The host backend of the resident loop: the GPU data-ready handler and
//! operator chain twinned on a CPU thread, with each operator's CPU reference
//! implementation. [`core`] is the pure state machine, [`resident`] the thread
//! that runs it behind [`crate::backend::ResidentLoop`].

pub mod core;
pub mod resident;

pub use self::core::{
    ChainSwitch, LoopControl, LoopCore, LoopEnd, LoopStage, Step, Trigger, UserStage, UserStageResult,
};
pub use self::resident::{HostLiveChain, HostLoop, SPIN_BELOW_NS};

use crate::backend::BackendError;
use crate::ops::ChainError;
use thiserror::Error;

/// Errors building the host loop.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum HostError {
    /// The frame ring's reader is taken; give the host loop a ring no other consumer reads.
    #[error("the frame ring's reader is already taken; give the host loop a ring no other consumer reads")]
    ReaderTaken,
    /// The result ring's writer is taken; give the host loop a result ring of its own.
    #[error(
        "the result ring's writer is already taken; give the host loop a result ring no other producer writes"
    )]
    ResultWriterTaken,
    /// An output ring in device memory; give the host loop a host-memory output ring.
    #[error("the output ring is in device memory; the host loop writes only a host-memory output ring")]
    OutputInDeviceMemory,
    /// An output ring given after launch; give it before launching.
    #[error("the output ring must be given to the host loop before it is launched")]
    OutputWhileLaunched,
    /// Something given after launch that must come before; give it before launching.
    #[error("{what} must be given to the host loop before it is launched")]
    Launched { what: &'static str },
    /// The operator chain cannot run on the host (each error names the entry and the fix).
    #[error("the operator chain cannot run: {}", join_errors(.0))]
    Chain(Vec<ChainError>),
}

fn join_errors(errors: &[ChainError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

impl From<HostError> for BackendError {
    fn from(e: HostError) -> Self {
        match e {
            HostError::Chain(_) => {
                BackendError::Stage { stage: "host loop: chain".into(), message: e.to_string() }
            }
            HostError::ReaderTaken
            | HostError::ResultWriterTaken
            | HostError::OutputInDeviceMemory
            | HostError::OutputWhileLaunched
            | HostError::Launched { .. } => BackendError::failed(e),
        }
    }
}
