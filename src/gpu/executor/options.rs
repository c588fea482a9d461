//! The executor's settings: how the fragment is launched, where the
//! controller's work is done, and the options beyond [`LoopConfig`]; and the
//! poll budget the loop runs with. Every part of the executor reads them.

use crate::config::LoopConfig;
use crate::gpu::fused::{FusedChain, FusedStep};
use crate::gpu::output_publish::OutputPublish;
use crate::gpu::user::handler::UserHandlerSource;
use std::time::Duration;

/// Where the controller's work (IF/WHILE values, counters) is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ControllerPlacement {
    /// Inside the built-in handler: it sets the IF value itself and keeps the
    /// counters, so the loop body is `handler ; IF` with no controller node.
    InHandler,
    /// handler → controller → IF: the controller turns the handler's verdict
    /// into the IF value. Needed for custom handler fragments.
    Before,
}

/// How the fragment is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum LaunchStyle {
    /// One persistent graph launched once.
    Resident,
    /// One instantiated graph (claim → workload → end marker) launched per frame.
    GraphPerFrame,
    /// The same kernels launched on a stream per frame.
    StreamPerFrame,
}

/// Settings of an executor beyond [`LoopConfig`].
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutorOptions {
    pub loop_cfg: LoopConfig,
    /// The host calls [`ResidentExecutor::data_ready`](super::ResidentExecutor::data_ready) for each frame instead of
    /// the handler watching the ring head on its own.
    pub host_driven: bool,
    /// Marker kernels before every operator, so a fault names its stage
    /// (costs about one kernel launch per operator per frame).
    pub stage_markers: bool,
    /// `None`: `InHandler` for the built-in handler, `Before` for a custom one.
    pub controller: Option<ControllerPlacement>,
    pub style: LaunchStyle,
    /// Let the chain's last operator publish the result from its own kernel
    /// when it can (the built-in reductions can), instead of an end-marker
    /// node. Off with stage markers.
    pub publish_from_last_kernel: bool,
    /// Join consecutive built-in kernels of the workload with programmatic
    /// edges (programmatic dependent launch). If the driver refuses such a
    /// graph, the executor builds it with plain edges and says so.
    pub programmatic_edges: bool,
    /// How long `tear_down` waits for the graph to stop.
    pub tear_down_wait: Duration,
    /// Run this fused chain inside the handler's kernel (`WHILE {
    /// fl_fused_chain }`, resident style only); the workload fragment must
    /// then be empty.
    pub fused: Option<FusedChain>,
    /// A user data-ready handler (`[handler]`) to run instead of the
    /// built-in one (resident style, controller node before the IF, no fused chain).
    pub user_handler: Option<UserHandlerSource>,
    /// Write each frame's output into this output ring in device memory
    /// (an `fl_output_publish` node before the end marker; no fused chain,
    /// no publishing from the last kernel).
    pub output: Option<OutputPublish>,
    /// Stream each frame into GPU memory while it arrives (sub-frame
    /// streaming, [`crate::gpu::streaming`]): resident style, built-in handler,
    /// one kernel per operator, not host-driven.
    pub stream: bool,
    /// Keep the chain's tunable values in parameter banks that the kernels
    /// read on every frame ([`crate::gpu::param_banks`]), starting with this
    /// image; later parameter-only changes switch banks without stopping
    /// the graph. Resident style with the built-in handler, no streaming;
    /// otherwise ignored (the values stay kernel arguments).
    pub param_banks: Option<Vec<FusedStep>>,
    /// Let a workload whose kernel can claim the frames itself (the tiled
    /// fused chain) be the loop's whole body, `WHILE { workload }` (it pulls streamed frames itself),
    /// so that a frame waits for no handler exit and no IF body launch:
    /// resident style with the built-in handler, publishing from the last
    /// kernel, no stage markers, no output node, not host-driven. Off:
    /// `handler ; IF { workload }` (for comparisons).
    pub workload_claims_frames: bool,
    /// Device address of the actuation former's state
    /// ([`crate::gpu::actuation::DeviceActuation::state_dptr`]), 0 without
    /// actuation outputs: every result publish then forms the frame's
    /// messages. The caller keeps the state alive as long as the executor.
    pub actuation: u64,
}

impl ExecutorOptions {
    pub fn new(loop_cfg: LoopConfig) -> Self {
        Self {
            loop_cfg,
            host_driven: false,
            stage_markers: false,
            controller: None,
            style: LaunchStyle::Resident,
            tear_down_wait: Duration::from_secs(5),
            publish_from_last_kernel: true,
            programmatic_edges: true,
            fused: None,
            user_handler: None,
            output: None,
            stream: false,
            param_banks: None,
            workload_claims_frames: true,
            actuation: 0,
        }
    }
}

/// The poll budget the loop runs with: `configured`, capped while frames
/// stream ([`crate::gpu::streaming::STREAM_POLL_BUDGET_NS`]: pulls run between
/// polls) and while the workload claims the frames itself
/// ([`crate::gpu::fused::tiled::CLAIMING_POLL_BUDGET_NS`]).
pub(super) fn poll_budget_ns(configured: u64, streaming: bool, claiming: bool) -> u64 {
    let mut budget = configured;
    if streaming {
        budget = budget.min(crate::gpu::streaming::STREAM_POLL_BUDGET_NS);
    }
    if claiming {
        budget = budget.min(crate::gpu::fused::tiled::CLAIMING_POLL_BUDGET_NS);
    }
    budget
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_budget_is_capped_while_streaming_or_claiming_and_never_raised() {
        let stream = crate::gpu::streaming::STREAM_POLL_BUDGET_NS;
        let claim = crate::gpu::fused::tiled::CLAIMING_POLL_BUDGET_NS;
        assert_eq!(poll_budget_ns(1_000_000, false, false), 1_000_000);
        assert_eq!(poll_budget_ns(1_000_000, true, false), stream);
        assert_eq!(poll_budget_ns(1_000_000, false, true), claim);
        assert_eq!(poll_budget_ns(1_000_000, true, true), stream.min(claim));
        assert_eq!(poll_budget_ns(5_000, true, true), 5_000, "a shorter budget stays");
        assert_eq!(poll_budget_ns(0, false, true), 0);
    }
}
