//! Run control of the GPU-resident loop: [`ResidentExecutor`] builds its
//! graph (see the `graph` module), launches it once (or per frame, the
//! benchmark's baselines), then talks to it only through the control block
//! in mapped memory; it tears the loop down within a bound and, on drop,
//! frees the device's memory or, when the device is wedged, leaks it.

pub(in crate::gpu) mod graph;

pub use crate::gpu::runtime::GpuRuntime;
pub use graph::{chain_flags, chain_fragment};

use crate::backend::LoopStats;
use crate::config::LoopConfig;
use crate::fragment::Fragment;
use crate::gpu::GpuError;
use crate::gpu::clock::ClockCalibration;
use crate::gpu::control::*;
use crate::gpu::driver::{self, DeviceBuffer, Graph, GraphExec};
use crate::gpu::fused::FusedChain;
use crate::gpu::mapped::MappedMemory;
use crate::gpu::param_banks::{ParamBanks, ParamSelect, select_word};
use crate::gpu::user_handler::{UserHandler, UserHandlerOperator, UserHandlerSource};
use crate::ring::{FrameRing, ResultRing, ResultWriter};
use cudarc::driver::CudaStream;
use graph::{BoundPlan, BuiltinHandler, FusedBuffers, plan_fragment};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// The host calls [`ExecutorCore::data_ready`] for each frame instead of
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
    pub output: Option<crate::gpu::output_publish::OutputPublish>,
    /// Stream each frame into GPU memory while it arrives (sub-frame
    /// streaming, [`crate::gpu::streaming`]): resident style, built-in handler,
    /// one kernel per operator, not host-driven.
    pub stream: bool,
    /// Keep the chain's tunable values in parameter banks that the kernels
    /// read on every frame ([`crate::gpu::param_banks`]), starting with this
    /// image; later parameter-only changes switch banks without stopping
    /// the graph. Resident style with the built-in handler, no streaming;
    /// otherwise ignored (the values stay kernel arguments).
    pub param_banks: Option<Vec<crate::gpu::fused::FusedStep>>,
    /// Let a workload whose kernel can claim the frames itself (the tiled
    /// fused chain) be the loop's whole body, `WHILE { workload }` (it pulls streamed frames itself),
    /// so that a frame waits for no handler exit and no IF body launch:
    /// resident style with the built-in handler, publishing from the last
    /// kernel, no stage markers, no output node, not host-driven. Off:
    /// `handler ; IF { workload }` (for comparisons).
    pub workload_claims_frames: bool,
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
        }
    }
}

/// The executor of one fragment over one frame ring and one result ring.
///
/// Dropping it tears a running loop down (bounded), then frees what the
/// device used, unless the device is wedged (a tear-down timed out or a
/// fault was seen): then everything the device may still touch (graphs,
/// device buffers, the control block, the rings' mapped memory, the context)
/// is leaked with a warning, because freeing it could block forever or let
/// the device write into freed memory.
pub struct ResidentExecutor {
    /// Invariant: initialised from `new` until `drop` takes it.
    core: ManuallyDrop<ExecutorCore>,
}

impl std::ops::Deref for ResidentExecutor {
    type Target = ExecutorCore;
    fn deref(&self) -> &ExecutorCore {
        &self.core
    }
}

impl std::ops::DerefMut for ResidentExecutor {
    fn deref_mut(&mut self) -> &mut ExecutorCore {
        &mut self.core
    }
}

impl ResidentExecutor {
    /// Builds the executor. `workload` is the main fragment (its registered
    /// data-ready handler fragment, if any, replaces the built-in one);
    /// `chain_flags` says which result fields the workload fills. Takes the
    /// result ring's writer and keeps it: the GPU is the only producer.
    pub fn new(
        rt: Arc<GpuRuntime>,
        workload: Fragment,
        frame_ring: Arc<FrameRing>,
        result_ring: Arc<ResultRing>,
        chain_flags: u32,
        opts: ExecutorOptions,
    ) -> Result<Self, GpuError> {
        let core = ExecutorCore::new(rt, workload, frame_ring, result_ring, chain_flags, opts)?;
        Ok(Self { core: ManuallyDrop::new(core) })
    }
}

impl Drop for ResidentExecutor {
    fn drop(&mut self) {
        self.core.stop_for_drop();
        // SAFETY: `core` is initialised (field invariant) and this is its only
        // take; `self.core` is not used again.
        let core = unsafe { ManuallyDrop::take(&mut self.core) };
        if core.is_wedged() {
            tracing::warn!(
                "the GPU stopped answering: leaking the loop's graphs, device buffers and ring memory instead of freeing them"
            );
            std::mem::forget(core);
        } else {
            drop(core);
        }
    }
}

/// What a [`ResidentExecutor`] owns and does (reached through it).
pub struct ExecutorCore {
    pub(super) rt: Arc<GpuRuntime>,
    pub(super) frame_ring: Arc<FrameRing>,
    /// The result ring's single writer, held while the device writes the ring
    /// so that nothing on the host can push into it.
    pub(super) result_writer: ResultWriter,
    pub(super) control: MappedMemory,
    pub(super) state: DeviceBuffer,
    /// `params` in device memory, for kernels that publish the result.
    pub(super) params_dev: DeviceBuffer,
    /// Programmatic edges the built graph holds (0: plain edges only).
    pub(super) programmatic_edges: usize,
    /// Whether the workload's last kernel publishes the result (no end marker).
    pub(super) publishes_in_last_kernel: bool,
    /// The fused chain's device memory, when the handler runs the chain.
    pub(super) fused: Option<FusedBuffers>,
    /// The staging buffer of sub-frame streaming, when `opts.stream`.
    pub(super) stream: Option<crate::gpu::streaming::StreamBuffers>,
    /// The main fragment (it also holds a custom data-ready handler, if registered).
    pub(super) workload: Fragment,
    /// `None` for an empty workload (the end marker alone runs per frame).
    pub(super) workload_plan: Option<BoundPlan>,
    /// The handler fragment the executor built (built-in, or the `[handler]`
    /// wrapper), or `None` when the workload registered its own.
    pub(super) builtin_handler: Option<Fragment>,
    pub(super) handler: BoundPlan,
    pub(super) handler_params: Arc<Mutex<LoopParams>>,
    pub(super) params: LoopParams,
    pub(super) opts: ExecutorOptions,
    pub(super) placement: ControllerPlacement,
    pub(super) stage_names: Vec<String>,
    pub(super) capture_stream: Arc<CudaStream>,
    pub(super) run_stream: Arc<CudaStream>,
    /// Field order matters: the executable graph is dropped before the graph.
    pub(super) exec: Option<GraphExec>,
    pub(super) _graph: Option<Graph>,
    pub(super) launched: bool,
    /// The terminal outcome once the loop stopped (by tear-down, timeout or fault).
    pub(super) finished: Option<Result<(), Arc<GpuError>>>,
    /// Set when a tear-down timed out or a fault was seen: the device may
    /// still touch this executor's memory, and freeing it may block.
    pub(super) wedged: AtomicBool,
    /// Device resources a live chain change replaced while the graph ran:
    /// freeing device memory (`cuMemFree`) waits for the whole device to go
    /// idle, which a resident graph never does, so they are freed at the
    /// loop's next stop.
    pub(super) retired: Vec<Box<dyn std::any::Any + Send>>,
    /// The parameter banks' control block, when the loop has banks.
    pub(super) param_select: Option<ParamSelect>,
    /// The current chain's parameter banks (with `param_select`).
    pub(super) banks: Option<ParamBanks>,
    /// Relaunches after a live chain swap, and parameter bank switches.
    pub(super) relaunches: u64,
    pub(super) bank_switches: u64,
}

impl ExecutorCore {
    /// Launches the instantiated resident graph on the run stream, where it
    /// runs until told to stop; a launch the device refuses is a fault.
    pub(super) fn launch_resident_graph(&mut self) -> Result<(), GpuError> {
        let exec = self.exec.as_ref().ok_or_else(|| GpuError::Setup("graph not built".into()))?;
        exec.launch(&self.run_stream)?;
        if let Err(e) = driver::stream_done(&self.run_stream) {
            return Err(self.fault(e.into()));
        }
        Ok(())
    }

    /// The poll budget the loop runs with: `configured`, capped while frames
    /// stream ([`crate::gpu::streaming::STREAM_POLL_BUDGET_NS`]: pulls run between
    /// polls) and while the workload claims the frames itself
    /// ([`crate::gpu::fused_tiled::CLAIMING_POLL_BUDGET_NS`]).
    pub(super) fn poll_budget_ns(configured: u64, streaming: bool, claiming: bool) -> u64 {
        let mut budget = configured;
        if streaming {
            budget = budget.min(crate::gpu::streaming::STREAM_POLL_BUDGET_NS);
        }
        if claiming {
            budget = budget.min(crate::gpu::fused_tiled::CLAIMING_POLL_BUDGET_NS);
        }
        budget
    }

    /// Writes the loop parameters to their device copy, which the graph's
    /// kernels read (before a launch or a relaunch).
    pub(super) fn upload_params(&self) -> Result<(), GpuError> {
        // SAFETY: LoopParams is plain old data (integers only, no padding).
        let params = unsafe {
            std::slice::from_raw_parts(
                (&self.params as *const LoopParams).cast::<u8>(),
                std::mem::size_of::<LoopParams>(),
            )
        };
        Ok(self.params_dev.write(0, params)?)
    }

    fn new(
        rt: Arc<GpuRuntime>,
        workload: Fragment,
        frame_ring: Arc<FrameRing>,
        result_ring: Arc<ResultRing>,
        chain_flags: u32,
        opts: ExecutorOptions,
    ) -> Result<Self, GpuError> {
        let ring_dptr = frame_ring.memory().device_ptr().ok_or(GpuError::Memory {
            what: "the frame ring",
            why: "it is in plain host memory; allocate it with GpuRuntime::mapped".into(),
        })?;
        let results_dptr = result_ring.memory().device_ptr().ok_or(GpuError::Memory {
            what: "the result ring",
            why: "it is in plain host memory; allocate it with GpuRuntime::mapped".into(),
        })?;
        let result_writer = result_ring.writer().ok_or_else(|| {
            GpuError::Setup(
                "the result ring's writer is already taken; the GPU loop must be its only producer".into(),
            )
        })?;
        let ctx = Arc::clone(&rt.ctx);
        let control = MappedMemory::alloc(&ctx, std::mem::size_of::<LoopControl>())?;
        let state = DeviceBuffer::new(&ctx, std::mem::size_of::<DeviceLoopState>(), 0)?;
        let params_dev = DeviceBuffer::new(&ctx, std::mem::size_of::<LoopParams>(), 0)?;
        let handler_params = Arc::new(Mutex::new(LoopParams::default()));
        let custom_handler = workload.data_ready_handler().is_some();
        let fused = match &opts.fused {
            None => None,
            Some(_) if custom_handler || !workload.is_empty() => {
                return Err(GpuError::Setup(
                    "a fused chain replaces the workload and the handler; pass an empty main fragment".into(),
                ));
            }
            Some(_) if opts.style != LaunchStyle::Resident || opts.stage_markers => {
                return Err(GpuError::Setup(
                    "a fused chain runs resident and without stage markers only".into(),
                ));
            }
            Some(chain) => Some(FusedBuffers::upload(&rt, chain, frame_ring.payload_capacity())?),
        };
        if opts.user_handler.is_some()
            && (custom_handler || fused.is_some() || opts.style != LaunchStyle::Resident)
        {
            return Err(GpuError::Setup(
                "a [handler] runs in the resident style, instead of the fragment's own handler and without a fused chain; \
                 set loop.fused_chain = \"off\""
                    .into(),
            ));
        }
        let user_handler = match &opts.user_handler {
            Some(src) => Some(UserHandler::load(&rt, src)?),
            None => None,
        };
        let builtin_handler = if let Some(u) = user_handler {
            let mut h = Fragment::new("data_ready");
            h.add_operator(UserHandlerOperator::new(u, Arc::clone(&handler_params)))
                .map_err(|e| GpuError::Setup(e.to_string()))?;
            Some(h)
        } else if let Some(f) = &fused {
            let mut h = Fragment::new("data_ready");
            h.add_operator(BuiltinHandler::fused_chain(Arc::clone(&handler_params), f.shared_bytes))
                .map_err(|e| GpuError::Setup(e.to_string()))?;
            Some(h)
        } else if custom_handler {
            None
        } else {
            let mut h = Fragment::new("data_ready");
            h.add_operator(BuiltinHandler::ring_ready(Arc::clone(&handler_params)))
                .map_err(|e| GpuError::Setup(e.to_string()))?;
            Some(h)
        };
        let custom_handler = custom_handler || opts.user_handler.is_some();
        let placement = opts.controller.unwrap_or(if custom_handler {
            ControllerPlacement::Before
        } else {
            ControllerPlacement::InHandler
        });
        if custom_handler && placement == ControllerPlacement::InHandler {
            return Err(GpuError::Setup(
                "a custom data-ready handler cannot set the IF value; use ControllerPlacement::Before".into(),
            ));
        }
        let stream = if opts.stream {
            if fused.is_some() || custom_handler || opts.style != LaunchStyle::Resident || opts.host_driven {
                return Err(GpuError::Setup(
                    "sub-frame streaming runs in the resident loop with the built-in data-ready handler and one \
                     kernel per operator; set loop.stream_to_gpu = \"off\" (or loop.fused_chain = \"off\")"
                        .into(),
                ));
            }
            Some(crate::gpu::streaming::StreamBuffers::new(
                &rt,
                frame_ring.payload_capacity(),
                opts.loop_cfg.pull_end_guard_bytes,
            )?)
        } else {
            None
        };
        let banked = match &opts.param_banks {
            Some(image) if opts.style == LaunchStyle::Resident && !custom_handler && stream.is_none() => {
                let banks = ParamBanks::new(&ctx, image.len())?;
                banks.write(0, image)?;
                let select = ParamSelect::new(&ctx)?;
                select.reset(select_word(0, 0));
                Some((select, banks))
            }
            _ => None,
        };
        let cfg = &opts.loop_cfg;
        let poll_budget_ns = cfg.poll_budget_us.saturating_mul(1000);
        let params = LoopParams {
            ring: ring_dptr,
            results: results_dptr,
            ctl: control.dptr(),
            st: state.dptr(),
            poll_budget_ns: Self::poll_budget_ns(poll_budget_ns, stream.is_some(), false),
            poll_interval_ns: cfg.poll_interval_ns,
            sleep_ns: cfg.data_not_ready_sleep_interval_us.saturating_mul(1000),
            timeout_ns: cfg.timeout_ms.saturating_mul(1_000_000),
            if_handle: 0,
            while_handle: 0,
            slot_count: frame_ring.slot_count() as u32,
            slot_stride: frame_ring.slot_stride() as u32,
            payload_capacity: frame_ring.payload_capacity() as u32,
            policy: frame_ring.policy().code(),
            result_capacity: result_ring.slots() as u32,
            host_driven: u32::from(opts.host_driven),
            sync_with_host: u32::from(cfg.sync_with_host),
            chain_flags,
            handler_sets_if: u32::from(placement == ControllerPlacement::InHandler),
            stage_markers: u32::from(opts.stage_markers),
            program: fused.as_ref().map_or(0, |f| f.program.dptr()),
            param_generation: 0,
            _reserved_generation: 0,
            param_ctl: banked.as_ref().map_or(0, |(s, _)| s.dptr()),
            banks: banked.as_ref().map_or(0, |(_, b)| b.dptr()),
            bank_bytes: banked.as_ref().map_or(0, |(_, b)| b.bank_bytes() as u32),
            _reserved_banks: 0,
        };
        let (param_select, banks) = banked.unzip();
        let handler = match (&builtin_handler, workload.data_ready_handler()) {
            (Some(h), _) | (None, Some(h)) => plan_fragment(&ctx, h)?,
            (None, None) => unreachable!("a handler is registered or built in"),
        };
        let workload_plan = if workload.is_empty() { None } else { Some(plan_fragment(&ctx, &workload)?) };
        let stage_names = match (&workload_plan, &opts.fused) {
            (_, Some(chain)) => vec![format!("fused chain ({})", chain.describe())],
            (Some(p), None) => p
                .plan
                .order()
                .iter()
                .filter_map(|&id| workload.operator_name(id).map(str::to_string))
                .collect(),
            (None, None) => Vec::new(),
        };
        let capture_stream = ctx.new_stream()?;
        let run_stream = ctx.new_stream()?;
        let mut ex = Self {
            rt,
            frame_ring,
            result_writer,
            control,
            state,
            params_dev,
            programmatic_edges: 0,
            publishes_in_last_kernel: false,
            fused,
            stream,
            workload,
            workload_plan,
            builtin_handler,
            handler,
            handler_params,
            params,
            placement,
            stage_names,
            capture_stream,
            run_stream,
            exec: None,
            _graph: None,
            launched: false,
            finished: None,
            wedged: AtomicBool::new(false),
            retired: Vec::new(),
            param_select,
            banks,
            relaunches: 0,
            bank_switches: 0,
            opts,
        };
        let mut programmatic = ex.opts.programmatic_edges;
        loop {
            let built = match ex.opts.style {
                LaunchStyle::Resident => ex.build_resident(programmatic),
                LaunchStyle::GraphPerFrame => ex.build_per_frame_graph(programmatic),
                LaunchStyle::StreamPerFrame => {
                    ex.set_standalone_params();
                    Ok(())
                }
            };
            match built {
                Err(e) if programmatic => {
                    tracing::warn!("the driver refused programmatic edges ({e}); building with plain edges");
                    programmatic = false;
                }
                other => break other?,
            }
        }
        Ok(ex)
    }

    pub(super) fn control(&self) -> &LoopControl {
        // SAFETY: the mapping holds a zero-initialised LoopControl (all-zero
        // atomics are valid), 64-byte aligned, alive as long as `self`.
        unsafe { &*(self.control.host_ptr() as *const LoopControl) }
    }

    /// Names of the workload stages in execution order.
    pub fn stage_names(&self) -> &[String] {
        &self.stage_names
    }

    pub fn placement(&self) -> ControllerPlacement {
        self.placement
    }

    /// Starts the loop: resets the control block and loop state and launches
    /// the persistent graph once (resident style), or arms per-frame launching.
    pub fn launch(&mut self) -> Result<(), GpuError> {
        if self.launched {
            return Err(GpuError::Setup("already launched; tear down first".into()));
        }
        let c = self.control();
        for line in [&c.tear_down, &c.data_ready, &c.stage, &c.stage_seq, &c.iterations, &c.idle_iterations] {
            line.store(0);
        }
        for line in [&c.frames, &c.skipped, &c.results, &c.handler_ns, &c.heartbeat_ns] {
            line.store(0);
        }
        c.state.store(STATE_RUNNING);
        let consumed = self.frame_ring.consumed();
        // No frame runs: the handler starts with the selection as it stands.
        let param_select = self.param_select.as_ref().map_or(0, |s| {
            s.reset(s.select());
            s.select()
        });
        let st = DeviceLoopState {
            last_claimed: consumed,
            result_seq: self.result_writer.ring().head(),
            param_select,
            ..Default::default()
        };
        // SAFETY: DeviceLoopState is plain old data (integers, floats, padding zeroed by Default).
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&st as *const DeviceLoopState).cast::<u8>(),
                std::mem::size_of::<DeviceLoopState>(),
            )
        };
        self.state.write(0, bytes)?;
        self.upload_params()?;
        self.finished = None;
        if self.opts.style == LaunchStyle::Resident {
            self.launch_resident_graph()?;
        }
        self.launched = true;
        Ok(())
    }

    /// Per-frame styles: processes the newest published frame now (one graph
    /// or stream launch). Returns without waiting for the result.
    pub fn launch_one_frame(&mut self) -> Result<(), GpuError> {
        match self.opts.style {
            LaunchStyle::Resident => {
                Err(GpuError::Setup("launch_one_frame is for the per-frame styles".into()))
            }
            LaunchStyle::GraphPerFrame => {
                let exec = self.exec.as_ref().ok_or_else(|| GpuError::Setup("graph not built".into()))?;
                Ok(exec.launch(&self.run_stream)?)
            }
            LaunchStyle::StreamPerFrame => {
                let s = Arc::clone(&self.run_stream);
                self.enqueue_handler(&s)?;
                self.enqueue_workload(&s)
            }
        }
    }

    /// Waits for the per-frame work queued so far, reporting a failure of it.
    pub fn sync(&self) -> Result<(), GpuError> {
        Ok(driver::stream_sync(&self.run_stream)?)
    }

    pub fn is_launched(&mut self) -> bool {
        self.poll();
        self.launched
    }

    /// Host-driven mode: tells the handler a frame was published.
    pub fn data_ready(&self) {
        self.control().data_ready.store(1);
    }

    /// Results published so far (the result-ready counter).
    pub fn results_published(&self) -> u64 {
        self.control().results.load()
    }

    /// True when a result newer than `seen` was published.
    pub fn result_ready(&self, seen: u64) -> bool {
        self.results_published() > seen
    }

    /// Counters published by the controller.
    pub fn stats(&self) -> LoopStats {
        let c = self.control();
        LoopStats {
            frames_processed: c.results.load(),
            frames_skipped: c.skipped.load(),
            idle_iterations: c.idle_iterations.load(),
            iterations: c.iterations.load(),
        }
    }

    /// Nanoseconds the data-ready handler has spent running (polling or sleeping).
    pub fn handler_busy_ns(&self) -> u64 {
        self.control().handler_ns.load()
    }

    pub fn clock(&self) -> ClockCalibration {
        self.rt.clock()
    }

    /// Checks whether the graph ended by itself (timeout) or faulted.
    pub fn poll(&mut self) -> Option<Result<(), Arc<GpuError>>> {
        if self.launched && self.opts.style == LaunchStyle::Resident {
            match driver::stream_done(&self.run_stream) {
                Ok(false) => {}
                Ok(true) => {
                    self.launched = false;
                    self.finished = Some(Ok(()));
                }
                Err(e) => {
                    self.launched = false;
                    self.finished = Some(Err(Arc::new(self.fault(e.into()))));
                }
            }
        }
        self.finished.clone()
    }

    /// The terminal state the GPU published (`STATE_*`).
    pub fn state(&self) -> u64 {
        self.control().state.load()
    }

    /// Names the stage a failed run was in, from the marker the GPU left.
    pub(super) fn fault(&self, e: GpuError) -> GpuError {
        self.wedged.store(true, Ordering::Relaxed);
        let c = self.control();
        // Without markers the frame is still known: the handler stores the
        // claimed sequence into the ring header before the workload runs.
        let seq = if self.opts.stage_markers { c.stage_seq.load() } else { self.frame_ring.claimed() };
        let stage = c.stage.load();
        let name = if self.opts.stage_markers {
            match stage {
                STAGE_IDLE => "between frames (data-ready handler or controller)".to_string(),
                STAGE_HANDLER => "data-ready handler".to_string(),
                STAGE_CONTROLLER => "controller".to_string(),
                STAGE_END_MARKER => "end marker".to_string(),
                s => self
                    .stage_names
                    .get((s - STAGE_FIRST_OP) as usize)
                    .cloned()
                    .unwrap_or_else(|| format!("unknown stage marker {s}")),
            }
        } else if self.fused.is_some() {
            format!(
                "{} (set loop.fused_chain = \"off\" and enable stage markers to pinpoint the operator)",
                self.stage_names.join(", ")
            )
        } else if c.frames.load() > c.results.load() || self.opts.style != LaunchStyle::Resident {
            format!("workload (one of {}; enable stage markers to pinpoint)", self.stage_names.join(", "))
        } else {
            "data-ready handler or controller".to_string()
        };
        GpuError::StageFault { stage: name, ring_seq: seq, error: e.to_string() }
    }

    /// Stops the loop: raises tear-down (resident style) and waits, bounded,
    /// for the queued work to finish. Always returns; reports a fault, or a
    /// timeout (a wedged GPU). Either marks the executor wedged.
    pub fn tear_down(&mut self) -> Result<LoopStats, GpuError> {
        let resident = self.opts.style == LaunchStyle::Resident;
        if resident {
            self.control().tear_down.store(1);
        }
        // Saturating: the waits come from the config and must not overflow.
        let grace = self.opts.tear_down_wait.saturating_add(Duration::from_micros(
            self.opts
                .loop_cfg
                .poll_budget_us
                .saturating_add(self.opts.loop_cfg.data_not_ready_sleep_interval_us),
        ));
        let run_stream = Arc::clone(&self.run_stream);
        let wait = wait_for_stream(grace, || Ok(driver::stream_done(&run_stream)?));
        if wait.means_wedged() {
            self.wedged.store(true, Ordering::Relaxed);
        }
        match wait {
            StreamWait::Finished => {
                self.launched = false;
                if resident {
                    self.finished = Some(Ok(()));
                }
                Ok(self.stats())
            }
            StreamWait::TimedOut => Err(GpuError::TearDownTimeout {
                waited_ms: u64::try_from(self.opts.tear_down_wait.as_millis()).unwrap_or(u64::MAX),
                stage: self.control().stage.load().to_string(),
            }),
            StreamWait::Failed(e) => {
                self.launched = false;
                Err(self.fault(e))
            }
        }
    }
}

/// How a bounded wait for the loop's stream ended.
#[derive(Debug)]
enum StreamWait {
    /// Everything queued finished.
    Finished,
    /// Still running after the grace period: the device stopped answering.
    TimedOut,
    /// The stream reported an error (a fault: the context is unusable).
    Failed(GpuError),
}

impl StreamWait {
    /// A timeout or a fault: the device may still touch the loop's memory.
    fn means_wedged(&self) -> bool {
        !matches!(self, StreamWait::Finished)
    }
}

/// Polls `done` (a non-blocking stream query) until it says finished, fails,
/// or `grace` has passed; never blocks on the device itself.
fn wait_for_stream(grace: Duration, mut done: impl FnMut() -> Result<bool, GpuError>) -> StreamWait {
    let started = Instant::now();
    loop {
        match done() {
            Ok(true) => return StreamWait::Finished,
            Ok(false) if started.elapsed() < grace => std::thread::sleep(Duration::from_micros(50)),
            Ok(false) => return StreamWait::TimedOut,
            Err(e) => return StreamWait::Failed(e),
        }
    }
}

impl ExecutorCore {
    /// True once a tear-down timed out or a fault was seen: the device may
    /// still touch the loop's memory. The process should exit non-zero (a
    /// faulted CUDA context cannot be used again); dropping the executor
    /// then leaks instead of freeing.
    pub fn is_wedged(&self) -> bool {
        self.wedged.load(Ordering::Relaxed)
    }

    /// What dropping does first: tears a launched loop down (bounded: a
    /// timeout marks the executor wedged; for the per-frame styles this waits
    /// for the queued frames), unless it is wedged already (a second wait
    /// would time out again). Never panics.
    fn stop_for_drop(&mut self) {
        if self.launched
            && !self.is_wedged()
            && let Err(e) = self.tear_down()
        {
            tracing::warn!("tearing the resident loop down on drop: {e}");
        }
    }
}

/// Runs only when the device is not wedged (see [`ResidentExecutor`]).
impl Drop for ExecutorCore {
    fn drop(&mut self) {
        // The graphs go first, on a thread where the context is current and
        // while `rt` (and with it the context) is certainly alive: the other
        // fields drop in declaration order, `rt` first.
        if self.rt.ctx.bind_to_thread().is_err() {
            tracing::warn!("cannot bind the CUDA context to destroy the loop's graphs; leaking them");
            std::mem::forget(self.exec.take());
            std::mem::forget(self._graph.take());
            return;
        }
        drop(self.exec.take());
        drop(self._graph.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_budget_is_capped_while_streaming_or_claiming_and_never_raised() {
        let stream = crate::gpu::streaming::STREAM_POLL_BUDGET_NS;
        let claim = crate::gpu::fused_tiled::CLAIMING_POLL_BUDGET_NS;
        assert_eq!(ExecutorCore::poll_budget_ns(1_000_000, false, false), 1_000_000);
        assert_eq!(ExecutorCore::poll_budget_ns(1_000_000, true, false), stream);
        assert_eq!(ExecutorCore::poll_budget_ns(1_000_000, false, true), claim);
        assert_eq!(ExecutorCore::poll_budget_ns(1_000_000, true, true), stream.min(claim));
        assert_eq!(ExecutorCore::poll_budget_ns(5_000, true, true), 5_000, "a shorter budget stays");
        assert_eq!(ExecutorCore::poll_budget_ns(0, false, true), 0);
    }

    #[test]
    fn a_stream_that_never_finishes_times_out_within_the_grace_and_means_wedged() {
        let grace = Duration::from_millis(30);
        let started = Instant::now();
        let mut polls = 0;
        let wait = wait_for_stream(grace, || {
            polls += 1;
            Ok(false)
        });
        assert!(matches!(wait, StreamWait::TimedOut), "{wait:?}");
        assert!(wait.means_wedged());
        assert!(started.elapsed() >= grace && started.elapsed() < Duration::from_secs(2));
        assert!(polls > 1, "polled, not blocked");
    }

    #[test]
    fn a_fault_while_waiting_means_wedged_and_a_finished_stream_does_not() {
        let fault = wait_for_stream(Duration::from_secs(5), || {
            Err(GpuError::Setup("CUDA_ERROR_ILLEGAL_ADDRESS".into()))
        });
        assert!(matches!(fault, StreamWait::Failed(_)) && fault.means_wedged(), "{fault:?}");
        let mut polls = 0;
        let finished = wait_for_stream(Duration::from_secs(5), || {
            polls += 1;
            Ok(polls == 3)
        });
        assert!(matches!(finished, StreamWait::Finished) && !finished.means_wedged(), "{finished:?}");
        assert_eq!(polls, 3);
    }
}
