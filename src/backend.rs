//! The consumer of the frame ring as the appliance sees it: a resident loop
//! that runs the operator chain on every frame, on CPU threads (`host`) or as
//! a persistent GPU graph (`cuda`). Both implement [`ResidentLoop`].

use crate::ops::{ChainError, OpSpec};
use thiserror::Error;

/// The consumers of the frame ring. The appliance picks one in its backend
/// factory (from `backend = "auto" | "host" | "cuda"` and what the machine
/// has); everything else matches on this enum rather than on names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// CPU threads run the chain (`HostLoop`, which the `host` module builds
    /// on this module's [`ResidentLoop`]).
    Host,
    /// A persistent GPU-resident CUDA graph runs the chain.
    Cuda,
}

impl Backend {
    /// The name the config, the command line and the reports use: `"host"`
    /// or `"cuda"`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Host => "host",
            Backend::Cuda => "cuda",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a resident loop reports about itself, for progress lines, metrics
/// and the final summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LoopStats {
    /// Frames the chain ran on.
    pub frames_processed: u64,
    /// Published frames skipped under policy `latest`.
    pub frames_skipped: u64,
    /// Loop iterations that found no frame.
    pub idle_iterations: u64,
    /// Total loop iterations.
    pub iterations: u64,
}

/// How the consumer's clock maps to the host's CLOCK_REALTIME: add
/// `offset_ns + drift_ppb * (host time - measured_at_ns) / 1e9`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClockEstimate {
    pub offset_ns: i64,
    /// Bound on the error of `offset_ns` when it was measured.
    pub error_ns: u64,
    /// Host time the offset was measured at.
    pub measured_at_ns: u64,
    /// Drift of the offset (ppb), from the previous measurement; 0 if unknown.
    pub drift_ppb: i64,
}

/// Errors of a resident loop, naming the stage where one is known.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The loop was launched twice; tear it down before launching again.
    #[error("the resident loop is already launched; tear it down before launching again")]
    AlreadyLaunched,
    /// The loop was used before launch; launch it first.
    #[error("the resident loop is not launched; call launch first")]
    NotLaunched,
    /// A stage of the loop failed (the message names the stage and what to change).
    #[error("stage {stage} failed: {message}")]
    Stage { stage: String, message: String },
    /// No frame arrived within `loop.timeout_ms`; check the sensor, or set `loop.timeout_ms = 0`.
    #[error(
        "the resident loop timed out after {ms} ms without a frame and tore itself down; check the sensor, or set loop.timeout_ms = 0"
    )]
    TimedOut { ms: u64 },
    /// The backend failed: the source (a `GpuError` or `HostError`) says
    /// why and what to change.
    #[error(transparent)]
    Failed(Box<dyn std::error::Error + Send + Sync + 'static>),
    /// The loop's thread could not take the CPU or priority the config
    /// gives it (the source says why); change `service.loop_cpu` or
    /// `service.realtime_priority`, or grant the capability it names.
    #[error("the resident loop's thread could not be placed: {0}")]
    Placement(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    /// The loop's thread could not be started; check the process thread
    /// limit (`ulimit -u`).
    #[error("cannot start the host loop thread ({0}); check the process thread limit (ulimit -u)")]
    Spawn(#[source] std::io::Error),
    /// The loop thread panicked earlier and took the loop's state with it;
    /// build a new loop.
    #[error("the host loop thread panicked earlier and its state is lost; build a new HostLoop")]
    StateLost,
}

impl BackendError {
    /// A backend's own error, kept as the source.
    pub fn failed(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Failed(Box::new(e))
    }
}

/// The way into a running loop's chain: a new chain is prepared off the hot
/// path and the loop switches to it between two frames, so every frame runs
/// entirely with one chain and its result carries that chain's generation.
/// Taken once from [`ResidentLoop::take_live_chain`]: the reload path is its
/// single writer.
pub trait LiveChain: Send {
    /// Prepares `chain` and hands it to the loop, which runs every frame it
    /// claims from then on with it, stamping results with `generation`. A
    /// chain this backend cannot run is refused and the running one kept.
    fn stage(&mut self, chain: &[OpSpec], generation: u32) -> Result<(), Vec<ChainError>>;
    /// The generation of the chain the loop has switched to most recently.
    fn applied_generation(&self) -> u32;
}

/// A resident loop over a frame ring and a result ring.
pub trait ResidentLoop: Send {
    /// "host" or "cuda".
    fn backend_name(&self) -> &'static str;
    /// Starts the loop (the GPU graph is launched once here).
    fn launch(&mut self) -> Result<(), BackendError>;
    /// True between a successful `launch` and the end of `tear_down` (or a
    /// timeout that tore the loop down by itself).
    fn is_launched(&self) -> bool;
    /// Counters so far.
    fn stats(&self) -> LoopStats;
    /// Offset (ns) to add to the `detect_ns`/`done_ns` of results flagged
    /// `RESULT_GPU_CLOCK` to express them on the host CLOCK_REALTIME.
    fn clock_offset_ns(&self) -> i64 {
        0
    }
    /// Bound (ns) on the error of `clock_offset_ns`; 0 for the host clock.
    fn clock_error_ns(&self) -> u64 {
        0
    }
    /// Re-measures the clock offset (GPU backends; against drift); `None`
    /// when the loop stamps results with the host clock.
    fn recalibrate_clock(&mut self) -> Result<Option<ClockEstimate>, BackendError> {
        Ok(None)
    }
    /// Stops the loop and waits for it; always terminates. Returns the final
    /// counters, or the error that stopped the loop earlier.
    fn tear_down(&mut self) -> Result<LoopStats, BackendError>;
    /// True once the loop's device stopped answering (a tear-down timed out
    /// or a fault was seen): its memory is leaked rather than freed on drop,
    /// and the process should exit non-zero. Always false for the host loop.
    fn is_wedged(&self) -> bool {
        false
    }
    /// The handle that changes the chain while the loop runs: `Some` on the
    /// first call of a backend that can, `None` after that and for backends
    /// that apply chain changes only on restart. The CUDA backend's stops
    /// its graph between two frames and relaunches it with the new chain.
    fn take_live_chain(&mut self) -> Option<Box<dyn LiveChain>> {
        None
    }
}

#[cfg(test)]
mod error_tests {
    use super::BackendError;

    #[test]
    fn a_backend_failure_keeps_the_backends_own_error() {
        let e = BackendError::failed(std::io::Error::new(std::io::ErrorKind::NotFound, "no such ring"));
        assert_eq!(e.to_string(), "no such ring", "the message is the backend error's own");
        let BackendError::Failed(inner) = &e else { panic!("{e:?}") };
        let io = inner.downcast_ref::<std::io::Error>().expect("the backend's error, as its type");
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        let spawn = BackendError::Spawn(std::io::Error::from(std::io::ErrorKind::WouldBlock));
        let source = std::error::Error::source(&spawn).expect("a spawn failure keeps the OS error");
        assert!(source.downcast_ref::<std::io::Error>().is_some());
        assert!(spawn.to_string().contains("ulimit -u"), "{spawn}");
    }
}
