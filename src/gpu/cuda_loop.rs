//! The loop adapter: [`CudaLoop`], the resident executor as the appliance
//! sees it (a [`ResidentLoop`]).

use super::GpuError;
use super::actuation::DeviceActuation;
use super::chain_builder::UserChain;
use super::chain_plan::plan_chain;
use super::control::*;
use super::executor::{ExecutorOptions, ResidentExecutor, SwapMode, chain_flags};
use super::live_chain::{ChainPlanning, CudaLiveChain};
use super::output_publish::DeviceOutput;
use super::param_banks;
use super::runtime::GpuRuntime;
use super::user::handler::UserHandlerSource;
use crate::backend::{BackendError, ClockEstimate, LiveChain, LoopStats, ResidentLoop};
use crate::config::{FusedChainMode, LoopConfig};
use crate::ops::OpSpec;
use crate::output::OutputWriter;
use crate::ring::{FrameRing, ResultRing};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The CUDA resident loop as the appliance sees it.
pub struct CudaLoop {
    /// Shared (weakly) with the reload path's [`CudaLiveChain`], which swaps
    /// the chain under this lock.
    exec: Arc<Mutex<ResidentExecutor>>,
    /// The output ring the graph writes (`[output]`); declared after `exec`
    /// so that the graph is gone before the ring is freed.
    output: Option<DeviceOutput>,
    /// The actuation outputs' transmit ring and former state; after `exec`
    /// for the same reason.
    actuation: Option<DeviceActuation>,
    /// The reload path's handle on the chain; taken once.
    live: Option<CudaLiveChain>,
}

impl CudaLoop {
    /// Builds the loop over rings that live in mapped memory of `rt`
    /// (allocate them with [`GpuRuntime::mapped`]).
    pub fn new(
        rt: Arc<GpuRuntime>,
        frame_ring: Arc<FrameRing>,
        result_ring: Arc<ResultRing>,
        chain: &[OpSpec],
        cfg: LoopConfig,
    ) -> Result<Self, GpuError> {
        Self::with_handler(rt, frame_ring, result_ring, chain, cfg, None)
    }

    /// As [`CudaLoop::new`], with a user data-ready handler (`[handler]`)
    /// instead of the built-in one when `handler` is given (the chain then
    /// runs one kernel per operator, never fused).
    pub fn with_handler(
        rt: Arc<GpuRuntime>,
        frame_ring: Arc<FrameRing>,
        result_ring: Arc<ResultRing>,
        chain: &[OpSpec],
        cfg: LoopConfig,
        handler: Option<UserHandlerSource>,
    ) -> Result<Self, GpuError> {
        Self::with_extras(rt, frame_ring, result_ring, chain, cfg, handler, None, None, None)
    }

    /// As [`CudaLoop::with_handler`], with two optional extras:
    /// - `user_chain`: the main fragment of `chain` with Rust operators in
    ///   it (from [`UserOperators::into_chain`](super::chain_builder::UserOperators::into_chain)),
    ///   run one kernel per operator in the graph's IF body, never fused;
    /// - `output`: the writer of an output ring in device memory of `rt`:
    ///   every frame's final samples, record and user words go into that
    ///   ring from a node of the graph's IF body, just before the result is
    ///   published. The loop keeps the writer. The fused chain cannot take
    ///   that node: with `output`, `loop.fused_chain = "auto"` runs the chain
    ///   one kernel per operator.
    /// - `actuation`: the loop's actuation outputs: every result publish
    ///   (in every path) then forms the frame's messages into its transmit
    ///   ring. The loop keeps it; the sender reads its ring.
    #[allow(clippy::too_many_arguments)]
    pub fn with_extras(
        rt: Arc<GpuRuntime>,
        frame_ring: Arc<FrameRing>,
        result_ring: Arc<ResultRing>,
        chain: &[OpSpec],
        cfg: LoopConfig,
        handler: Option<UserHandlerSource>,
        user_chain: Option<UserChain>,
        output: Option<OutputWriter>,
        actuation: Option<DeviceActuation>,
    ) -> Result<Self, GpuError> {
        if output.is_some() && cfg.fused_chain == FusedChainMode::On {
            return Err(GpuError::Setup(
                "loop.fused_chain = \"on\" but [output] writes each frame's output from a node after the \
                 chain, which the fused chain has not; set loop.fused_chain to \"auto\" or \"off\""
                    .into(),
            ));
        }
        if !frame_ring.take_reader_for_device() {
            return Err(GpuError::Setup("the frame ring already has a consumer".into()));
        }
        let capacity = frame_ring.payload_capacity();
        // The ring's writer is taken by whoever fills it; whether it reports
        // progress is the caller's to say through loop.stream_to_gpu
        // (the appliance turns "auto" off for receivers that do not).
        let stream = super::streaming::decide(&cfg, capacity, true)?;
        if stream && handler.is_some() && cfg.stream_to_gpu == crate::config::StreamToGpu::On {
            return Err(GpuError::Setup(
                "loop.stream_to_gpu = \"on\" but a [handler] replaces the built-in data-ready handler the \
                 streaming works with; set loop.stream_to_gpu to \"auto\" or \"off\""
                    .into(),
            ));
        }
        let stream = stream && handler.is_none();
        let mut opts = ExecutorOptions::new(cfg);
        opts.stream = stream;
        let output = match output {
            Some(writer) => {
                let (device_output, publish) = DeviceOutput::new(&rt.ctx, writer)?;
                opts.output = Some(publish);
                opts.publish_from_last_kernel = false;
                Some(device_output)
            }
            None => None,
        };
        // Rust operators, a user handler and the output node all need one kernel per operator.
        let unfused = match (&user_chain, &handler, &output) {
            (Some(user), _, _) => Some(format!("the Rust operators {}", user.operators())),
            (None, Some(_), _) => Some("a [handler]".to_string()),
            (None, None, Some(_)) => Some(
                "[output] is enabled: the output node follows the chain (the fused chain has no place for it)"
                    .to_string(),
            ),
            (None, None, None) => None,
        };
        let mode = opts.loop_cfg.fused_chain;
        let mut planning = ChainPlanning {
            capacity,
            fused_mode: mode,
            unfused: unfused.clone(),
            output: output.is_some(),
            streaming: stream,
            fixed: None,
            layout: None,
        };
        let (fragment, fused, layout) = match user_chain {
            Some(user) => {
                if mode == FusedChainMode::On {
                    return Err(GpuError::Setup(format!(
                        "loop.fused_chain = \"on\" but with the Rust operators {} the chain runs one \
                         kernel per operator; set it to \"auto\" or \"off\"",
                        user.operators()
                    )));
                }
                planning.fixed = Some(format!("the chain has the Rust operators {}", user.operators()));
                tracing::info!(
                    "one kernel per operator in the graph's IF body: the Rust operators {}",
                    user.operators()
                );
                (user.into_fragment(capacity)?, None, None)
            }
            None => {
                let (fragment, fused, layout) =
                    plan_chain(&rt, chain, capacity, mode, unfused.as_deref(), stream)?;
                (fragment, fused, Some(layout))
            }
        };
        // The built-in operators' values in parameter banks, where the
        // built-in handler claims the frames (not with a [handler], nor
        // while frames stream in).
        if let Some(layout) = layout.filter(|_| handler.is_none() && !stream) {
            opts.param_banks = Some(param_banks::image(layout, chain, fused.as_ref(), capacity)?);
            planning.layout = Some(layout);
        }
        if let Some(h) = handler {
            tracing::info!("the data-ready handler is {} from {}", h.entry, h.file);
            opts.user_handler = Some(h);
        }
        opts.fused = fused;
        if let Some(a) = &actuation {
            opts.actuation = a.state_dptr();
        }
        let exec = ResidentExecutor::new(rt, fragment, frame_ring, result_ring, chain_flags(chain), opts)?;
        let exec = Arc::new(Mutex::new(exec));
        let live = CudaLiveChain {
            exec: Arc::downgrade(&exec),
            planning,
            running: chain.to_vec(),
            applied: 0,
            mode: SwapMode::Update,
            use_banks: true,
        };
        let lp = Self { exec, output, actuation, live: Some(live) };
        lp.check_actuation_samples()?;
        Ok(lp)
    }

    /// Refuses outputs that send samples where the workload keeps no final
    /// samples to send (the tiled kernel for large frames writes none).
    fn check_actuation_samples(&self) -> Result<(), GpuError> {
        let Some(a) = &self.actuation else { return Ok(()) };
        let exec = self.executor();
        if a.wants_samples() && exec.options().fused.is_none() && exec.final_samples().0 == 0 {
            return Err(GpuError::Setup(
                "an [[actuate]] output sends \"samples\" but this chain's kernel keeps no final samples                  (the tiled kernel for frames larger than the fused chain's shared memory); send \"record\"                  or \"user\" only, or use smaller frames (ring.slot_bytes)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The transmit ring the loop forms actuation messages into, when it has outputs.
    pub fn transmit_ring(&self) -> Option<&Arc<crate::actuate::TxRing>> {
        self.actuation.as_ref().map(DeviceActuation::ring)
    }

    /// The executor, locked (a reload swapping the chain holds the same lock).
    pub fn executor(&self) -> MutexGuard<'_, ResidentExecutor> {
        self.exec.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The reload path's handle on the chain, as its concrete type (it tells
    /// how each swap went); `None` after the first call of this or
    /// [`ResidentLoop::take_live_chain`].
    pub fn take_cuda_live_chain(&mut self) -> Option<CudaLiveChain> {
        self.live.take()
    }
}

impl Drop for CudaLoop {
    /// Stops the graph before the output and transmit rings go; a device
    /// that stopped answering may still write them, so they are then
    /// leaked, not freed.
    fn drop(&mut self) {
        if self.output.is_none() && self.actuation.is_none() {
            return;
        }
        let mut exec = self.exec.lock().unwrap_or_else(PoisonError::into_inner);
        if exec.launched() {
            let _ = exec.tear_down();
        }
        if exec.is_wedged()
            && let Some(output) = self.output.take()
        {
            tracing::warn!("the GPU stopped answering: the output ring is leaked, not freed");
            std::mem::forget(output);
        }
        if exec.is_wedged()
            && let Some(actuation) = self.actuation.take()
        {
            tracing::warn!("the GPU stopped answering: the transmit ring is leaked, not freed");
            std::mem::forget(actuation);
        }
    }
}

fn backend_error(e: GpuError) -> BackendError {
    match e {
        GpuError::StageFault { stage, ring_seq, error } => {
            BackendError::Stage { stage, message: format!("ring sequence {ring_seq}: {error}") }
        }
        other => BackendError::failed(other),
    }
}

impl ResidentLoop for CudaLoop {
    fn backend_name(&self) -> &'static str {
        "cuda"
    }
    fn launch(&mut self) -> Result<(), BackendError> {
        let mut exec = self.executor();
        if exec.is_launched() {
            return Err(BackendError::AlreadyLaunched);
        }
        exec.launch().map_err(backend_error)
    }
    fn is_wedged(&self) -> bool {
        self.executor().is_wedged()
    }
    fn is_launched(&self) -> bool {
        self.executor().is_running()
    }
    fn stats(&self) -> LoopStats {
        self.executor().stats()
    }
    fn clock_offset_ns(&self) -> i64 {
        self.executor().clock().offset_ns
    }
    fn clock_error_ns(&self) -> u64 {
        self.executor().clock().error_ns
    }
    fn recalibrate_clock(&mut self) -> Result<Option<ClockEstimate>, BackendError> {
        let c = self.executor().runtime().recalibrate_clock().map_err(backend_error)?;
        Ok(Some(ClockEstimate {
            offset_ns: c.offset_ns,
            error_ns: c.error_ns,
            measured_at_ns: c.measured_at_ns,
            drift_ppb: c.drift_ppb,
        }))
    }
    fn tear_down(&mut self) -> Result<LoopStats, BackendError> {
        let mut exec = self.executor();
        let was_running = exec.launched();
        if let Some(Err(e)) = exec.poll() {
            return Err(BackendError::failed(e));
        }
        if !was_running && exec.finished().is_none() {
            return Err(BackendError::NotLaunched);
        }
        if !exec.launched() {
            return match exec.state() {
                STATE_TIMED_OUT => Err(BackendError::TimedOut { ms: exec.options().loop_cfg.timeout_ms }),
                _ => Ok(exec.stats()),
            };
        }
        exec.tear_down().map_err(backend_error)
    }
    fn take_live_chain(&mut self) -> Option<Box<dyn LiveChain>> {
        self.live.take().map(|l| Box::new(l) as Box<dyn LiveChain>)
    }
}
