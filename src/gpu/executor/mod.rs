//! The resident executor: [`ResidentExecutor`] builds the loop's graph
//! (`graph`), launches it once (or per frame, the benchmark's baselines),
//! then talks to it only through the control block in mapped memory
//! (`run`); it swaps the chain while the loop runs (`live_chain`); it
//! tears the loop down within a bound and, on drop, frees the device's
//! memory or, when the device is wedged, leaks it.
//!
//! The executor owns its parts, and each part owns the state it manages:
//! `run::RunControl` the control block, loop state and run stream;
//! `graph::LoopGraph` the chain, its plans and the graph;
//! `live_chain::LiveState` the parameter banks and what a change retired;
//! `options` the settings all of them read. The parts do not import one
//! another (except the settings) nor this module; what one needs of
//! another, the executor passes in.

pub(in crate::gpu) mod graph;
mod live_chain;
mod options;
mod run;

pub use crate::gpu::runtime::GpuRuntime;
pub use graph::{chain_flags, chain_fragment, chain_fragment_with, fused_shared_limit};
pub use live_chain::{NextChain, SwapMode, SwapReport};
pub use options::{ControllerPlacement, ExecutorOptions, LaunchStyle};

use crate::backend::LoopStats;
use crate::fragment::Fragment;
use crate::gpu::GpuError;
use crate::gpu::clock::ClockCalibration;
use crate::gpu::control::*;
use crate::gpu::driver::Graph;
use crate::gpu::fused::{FusedChain, FusedStep};
use crate::gpu::param_banks::{BankSwitch, ParamBanks};
use crate::gpu::user::handler::{UserHandler, UserHandlerOperator};
use crate::ring::{FrameRing, ResultRing};
use graph::{BoundPlan, BuiltinHandler, FusedBuffers, GraphInputs, LoopGraph, plan_fragment};
use live_chain::LiveState;
use run::{RunControl, Stages};
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// The executor of one fragment over one frame ring and one result ring.
///
/// Dropping it tears a running loop down (bounded), then frees what the
/// device used, unless the device is wedged (a tear-down timed out or a
/// fault was seen): then everything the device may still touch (graphs,
/// device buffers, the control block, the rings' mapped memory, the context)
/// is leaked with a warning, because freeing it could block forever or let
/// the device write into freed memory.
pub struct ResidentExecutor {
    opts: ExecutorOptions,
    // Invariant of the four parts below: initialised from `new` until `drop`,
    // which drops them, or leaks them when the device is wedged.
    rt: ManuallyDrop<Arc<GpuRuntime>>,
    run: ManuallyDrop<RunControl>,
    graph: ManuallyDrop<LoopGraph>,
    live: ManuallyDrop<LiveState>,
}

/// What the graph is built from, borrowed from the executor's fields (a
/// function, not a method, so that the graph part can be borrowed apart).
fn graph_inputs<'a>(rt: &'a GpuRuntime, opts: &'a ExecutorOptions, run: &RunControl) -> GraphInputs<'a> {
    GraphInputs { rt, opts, state: run.state_dptr(), params_dev: run.params_dev_dptr() }
}

/// What naming a fault's stage needs from the options and the graph part.
fn stages<'a>(opts: &'a ExecutorOptions, graph: &'a LoopGraph) -> Stages<'a> {
    Stages { opts, names: &graph.stage_names, fused: graph.fused.is_some() }
}

/// What the executor ran before a swap, kept alive until the old graph has
/// stopped (its kernels read these buffers) or put back if the swap fails
/// before the stop.
struct Previous {
    workload: Fragment,
    workload_plan: Option<BoundPlan>,
    fused: Option<FusedBuffers>,
    fused_chain: Option<FusedChain>,
    banks: Option<ParamBanks>,
    builtin_handler: Option<Fragment>,
    handler: Option<BoundPlan>,
    params: LoopParams,
    stage_names: Vec<String>,
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
        let run = RunControl::new(&ctx, Arc::clone(&frame_ring), result_writer)?;
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
        let bank_image = match &opts.param_banks {
            Some(image) if opts.style == LaunchStyle::Resident && !custom_handler && stream.is_none() => {
                Some(image.as_slice())
            }
            _ => None,
        };
        let live = LiveState::new(&ctx, bank_image)?;
        let cfg = &opts.loop_cfg;
        let poll_budget_ns = cfg.poll_budget_us.saturating_mul(1000);
        let params = LoopParams {
            ring: ring_dptr,
            results: results_dptr,
            ctl: run.control_dptr(),
            st: run.state_dptr(),
            poll_budget_ns: options::poll_budget_ns(poll_budget_ns, stream.is_some(), false),
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
            param_ctl: live.select_dptr(),
            banks: live.banks().map_or(0, |b| b.dptr()),
            bank_bytes: live.banks().map_or(0, |b| b.bank_bytes() as u32),
            _reserved_banks: 0,
        };
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
        let graph = LoopGraph {
            capture_stream,
            exec: None,
            graph: None,
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
        };
        let mut ex = Self {
            opts,
            rt: ManuallyDrop::new(rt),
            run: ManuallyDrop::new(run),
            graph: ManuallyDrop::new(graph),
            live: ManuallyDrop::new(live),
        };
        let mut programmatic = ex.opts.programmatic_edges;
        loop {
            let inputs = graph_inputs(&ex.rt, &ex.opts, &ex.run);
            let built = match ex.opts.style {
                LaunchStyle::Resident => ex.graph.build_resident(&inputs, programmatic),
                LaunchStyle::GraphPerFrame => ex.graph.build_per_frame_graph(&inputs, programmatic),
                LaunchStyle::StreamPerFrame => {
                    ex.graph.set_standalone_params();
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

    /// Names of the workload stages in execution order.
    pub fn stage_names(&self) -> &[String] {
        &self.graph.stage_names
    }

    pub fn placement(&self) -> ControllerPlacement {
        self.graph.placement
    }

    /// The executor's options.
    pub fn options(&self) -> &ExecutorOptions {
        &self.opts
    }

    /// The opened GPU the loop runs on.
    pub fn runtime(&self) -> &Arc<GpuRuntime> {
        &self.rt
    }

    /// Whether the chain's workload is the loop's whole body, claiming the
    /// frames itself ([`crate::fragment::GpuResidentOperator::can_claim_frames`]):
    /// resident, with the built-in handler, polling without sleeps,
    /// publishing from the workload's kernel, and nothing the graph must run
    /// between the claim and the work or after it (stage markers, an output
    /// node).
    pub fn workload_claims_frames(&self) -> bool {
        self.graph.workload_claims_frames(&self.opts)
    }

    /// Programmatic edges in the built graph (0 when plain edges only).
    pub fn programmatic_edge_count(&self) -> usize {
        self.graph.programmatic_edge_count()
    }

    /// Whether the chain's last kernel publishes the result (no end-marker node).
    pub fn publishes_in_last_kernel(&self) -> bool {
        self.graph.publishes_in_last_kernel()
    }

    /// Launches the built resident graph (see [`RunControl::launch_resident_graph`]).
    fn launch_resident_graph(&self) -> Result<(), GpuError> {
        self.run.launch_resident_graph(self.graph.exec.as_ref(), &stages(&self.opts, &self.graph))
    }

    /// Starts the loop: resets the control block and loop state and launches
    /// the persistent graph once (resident style), or arms per-frame launching.
    pub fn launch(&mut self) -> Result<(), GpuError> {
        if self.run.launched() {
            return Err(GpuError::Setup("already launched; tear down first".into()));
        }
        // No frame runs: the handler starts with the selection as it stands.
        let param_select = self.live.selection_for_launch();
        let actuation = self.actuation_fields();
        self.run.reset_for_launch(param_select, &self.graph.params, &actuation)?;
        if self.opts.style == LaunchStyle::Resident {
            self.launch_resident_graph()?;
        }
        self.run.mark_launched();
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
                let exec =
                    self.graph.exec.as_ref().ok_or_else(|| GpuError::Setup("graph not built".into()))?;
                Ok(exec.launch(self.run.stream())?)
            }
            LaunchStyle::StreamPerFrame => {
                let s = Arc::clone(self.run.stream());
                let inputs = graph_inputs(&self.rt, &self.opts, &self.run);
                self.graph.enqueue_handler(&inputs, &s)?;
                self.graph.enqueue_workload(&inputs, &s)
            }
        }
    }

    /// Waits for the per-frame work queued so far, reporting a failure of it.
    pub fn sync(&self) -> Result<(), GpuError> {
        self.run.sync()
    }

    /// Whether the loop runs: polls for its end first (see [`Self::poll`]).
    pub fn is_launched(&mut self) -> bool {
        self.poll();
        self.run.launched()
    }

    /// Whether the loop was launched and not yet seen to stop, without
    /// polling (see [`Self::is_launched`]).
    pub fn launched(&self) -> bool {
        self.run.launched()
    }

    /// Whether the loop is launched and its stream still busy.
    pub fn is_running(&self) -> bool {
        self.run.is_running()
    }

    /// The terminal outcome once the loop stopped (by tear-down, timeout or
    /// fault), as [`Self::poll`] last saw it.
    pub fn finished(&self) -> Option<&Result<(), Arc<GpuError>>> {
        self.run.finished()
    }

    /// Host-driven mode: tells the handler a frame was published.
    pub fn data_ready(&self) {
        self.run.data_ready();
    }

    /// Results published so far (the result-ready counter).
    pub fn results_published(&self) -> u64 {
        self.run.results_published()
    }

    /// True when a result newer than `seen` was published.
    pub fn result_ready(&self, seen: u64) -> bool {
        self.results_published() > seen
    }

    /// Counters published by the controller.
    pub fn stats(&self) -> LoopStats {
        self.run.stats()
    }

    /// Nanoseconds the data-ready handler has spent running (polling or sleeping).
    pub fn handler_busy_ns(&self) -> u64 {
        self.run.handler_busy_ns()
    }

    pub fn clock(&self) -> ClockCalibration {
        self.rt.clock()
    }

    /// Checks whether the graph ended by itself (timeout) or faulted.
    pub fn poll(&mut self) -> Option<Result<(), Arc<GpuError>>> {
        self.run.poll(&stages(&self.opts, &self.graph))
    }

    /// The terminal state the GPU published (`STATE_*`).
    pub fn state(&self) -> u64 {
        self.run.state()
    }

    /// Stops the loop: raises tear-down (resident style) and waits, bounded,
    /// for the queued work to finish. Always returns; reports a fault, or a
    /// timeout (a wedged GPU). Either marks the executor wedged.
    pub fn tear_down(&mut self) -> Result<LoopStats, GpuError> {
        self.run.tear_down(&stages(&self.opts, &self.graph))
    }

    /// True once a tear-down timed out or a fault was seen: the device may
    /// still touch the loop's memory. The process should exit non-zero (a
    /// faulted CUDA context cannot be used again); dropping the executor
    /// then leaks instead of freeing.
    pub fn is_wedged(&self) -> bool {
        self.run.is_wedged()
    }

    /// What dropping does first: tears a launched loop down (bounded: a
    /// timeout marks the executor wedged; for the per-frame styles this waits
    /// for the queued frames), unless it is wedged already (a second wait
    /// would time out again). Never panics.
    fn stop_for_drop(&mut self) {
        if self.run.launched()
            && !self.is_wedged()
            && let Err(e) = self.tear_down()
        {
            tracing::warn!("tearing the resident loop down on drop: {e}");
        }
    }
}

/// Live chain changes (see [`live_chain`]).
impl ResidentExecutor {
    /// Replaces the chain the resident loop runs by `next`, under parameter
    /// `generation`: prepares it while the old graph runs, stops the loop
    /// between two frames, updates or re-instantiates the graph (`mode`) and
    /// relaunches it (if it was launched). The loop's state carries over:
    /// the claimed sequence (frames that arrived meanwhile are processed
    /// next; none is lost under policy `every`), result numbering and
    /// counters. An error before the stop leaves the running chain as it
    /// was; one after it leaves the loop stopped (the appliance's watchdog
    /// reports it).
    pub fn swap_chain(
        &mut self,
        next: NextChain,
        generation: u32,
        mode: SwapMode,
    ) -> Result<SwapReport, GpuError> {
        if self.opts.style != LaunchStyle::Resident {
            return Err(GpuError::Setup("live chain changes need the resident launch style".into()));
        }
        let own_handler =
            self.opts.user_handler.is_some() || self.graph.workload.data_ready_handler().is_some();
        if next.fused.is_some() && own_handler {
            return Err(GpuError::Setup(
                "a fused chain replaces the data-ready handler, and this loop runs its own; \
                 set loop.fused_chain = \"off\""
                    .into(),
            ));
        }
        if self.graph.workload.data_ready_handler().is_some() {
            return Err(GpuError::Setup(
                "the chain registers its own data-ready handler; its changes apply on restart".into(),
            ));
        }
        let started = Instant::now();
        let next_loads_modules = next.loads_modules;
        let previous = self.install(next, generation)?;
        let old_handles = (previous.params.while_handle, previous.params.if_handle);
        let update = mode == SwapMode::Update && self.graph.exec.is_some();
        let loads_modules = next_loads_modules;
        let captured = match update && !loads_modules {
            true => match self.capture_live(Some(old_handles)) {
                Ok(g) => Some(g),
                Err(e) => {
                    self.restore(previous);
                    return Err(e);
                }
            },
            false => None,
        };
        let prepare = started.elapsed();

        let gap_start = Instant::now();
        let was_launched = self.run.launched();
        if was_launched && let Err(e) = self.tear_down() {
            if self.is_wedged() {
                // The device may still read the old chain's buffers.
                std::mem::forget(previous);
            }
            return Err(e);
        }
        // Stopped: what the old chain used can be freed now (not once the
        // new graph runs: cuMemFree waits for the device to go idle).
        drop(previous);
        self.live.free_retired();
        // The new chain's values are in bank 0 of its banks.
        self.live.select_first_bank(generation);
        let captured = match captured {
            None if update && loads_modules => Some(self.capture_live(Some(old_handles))?),
            other => other,
        };
        let mut in_place = false;
        if let (Some(graph), Some(exec)) = (captured, self.graph.exec.as_mut()) {
            match exec.update(&graph)? {
                None => {
                    in_place = true;
                    self.graph.graph = Some(graph);
                }
                Some(why) => {
                    tracing::info!("the driver refused the in-place graph update ({why}); instantiating")
                }
            }
        }
        if !in_place {
            let graph = self.capture_live(None)?;
            let exec = graph.instantiate()?;
            self.graph.exec = Some(exec);
            self.graph.graph = Some(graph);
        }
        if was_launched {
            self.relaunch()?;
        }
        let gap = gap_start.elapsed();
        Ok(SwapReport { generation, banked: false, in_place, prepare, gap })
    }

    /// Whether the loop keeps its chain's values in parameter banks.
    pub fn has_banks(&self) -> bool {
        self.live.has_banks()
    }

    /// Relaunches after live chain swaps since the loop was built.
    pub fn relaunches(&self) -> u64 {
        self.live.relaunches()
    }

    /// Parameter bank switches since the loop was built.
    pub fn bank_switches(&self) -> u64 {
        self.live.bank_switches()
    }

    /// Puts the values of `image` (the running chain's shape, other values)
    /// in force under `generation` without stopping the graph: waits until
    /// the handler took the last published bank (at most a second), writes
    /// the other one and publishes it. Frames claimed from then on run with
    /// it, and their results carry `generation`.
    pub fn switch_params(&mut self, image: &[FusedStep], generation: u32) -> Result<BankSwitch, GpuError> {
        let switched = self.live.switch_params(image, generation, self.run.launched())?;
        self.graph.params.param_generation = generation;
        Ok(switched)
    }

    /// Captures the resident graph, with programmatic edges if the options
    /// ask for them and the driver takes them, else plain ones.
    fn capture_live(&mut self, keep_handles: Option<(u64, u64)>) -> Result<Graph, GpuError> {
        let inputs = graph_inputs(&self.rt, &self.opts, &self.run);
        if self.opts.programmatic_edges {
            match self.graph.capture_resident(&inputs, true, keep_handles) {
                Ok(g) => return Ok(g),
                Err(e) => {
                    tracing::warn!("the driver refused programmatic edges ({e}); capturing with plain edges")
                }
            }
        }
        self.graph.capture_resident(&inputs, false, keep_handles)
    }

    /// Allocates and plans `next` and swaps it into the executor; returns
    /// what it replaced.
    fn install(&mut self, next: NextChain, generation: u32) -> Result<Previous, GpuError> {
        let ctx = Arc::clone(&self.rt.ctx);
        let fused = match &next.fused {
            Some(chain) => {
                Some(FusedBuffers::upload(&self.rt, chain, self.run.frame_ring().payload_capacity())?)
            }
            None => None,
        };
        let banks = match self.live.banks_for(&ctx, next.param_image.as_deref()) {
            Ok(b) => b,
            Err(e) => return Err(self.retire_on_error(e, Box::new(fused))),
        };
        let workload_plan = match next.workload.is_empty() {
            true => None,
            false => match plan_fragment(&ctx, &next.workload) {
                Ok(plan) => Some(plan),
                Err(e) => return Err(self.retire_on_error(e, Box::new((fused, banks, next.workload)))),
            },
        };
        // A [handler] keeps its fragment and plan; the built-in one follows the chain.
        let handler = if self.opts.user_handler.is_some() {
            None
        } else {
            let mut h = Fragment::new("data_ready");
            let op = match &fused {
                Some(f) => {
                    BuiltinHandler::fused_chain(Arc::clone(&self.graph.handler_params), f.shared_bytes)
                }
                None => BuiltinHandler::ring_ready(Arc::clone(&self.graph.handler_params)),
            };
            let planned = h
                .add_operator(op)
                .map_err(|e| GpuError::Setup(e.to_string()))
                .and_then(|_| plan_fragment(&ctx, &h));
            match planned {
                Ok(plan) => Some((h, plan)),
                Err(e) => {
                    let allocated = Box::new((fused, banks, next.workload, workload_plan, h));
                    return Err(self.retire_on_error(e, allocated));
                }
            }
        };
        let stage_names = match (&workload_plan, &next.fused) {
            (_, Some(chain)) => vec![format!("fused chain ({})", chain.describe())],
            (Some(p), None) => p
                .plan
                .order()
                .iter()
                .filter_map(|&id| next.workload.operator_name(id).map(str::to_string))
                .collect(),
            (None, None) => Vec::new(),
        };
        let g = &mut *self.graph;
        let mut params = g.params;
        params.chain_flags = next.chain_flags;
        params.program = fused.as_ref().map_or(0, |f| f.program.dptr());
        params.param_generation = generation;
        if let Some(b) = &banks {
            (params.banks, params.bank_bytes) = (b.dptr(), b.bank_bytes() as u32);
        }
        let (builtin_handler, handler) = match handler {
            Some((h, plan)) => (g.builtin_handler.replace(h), Some(std::mem::replace(&mut g.handler, plan))),
            None => (None, None),
        };
        Ok(Previous {
            workload: std::mem::replace(&mut g.workload, next.workload),
            workload_plan: std::mem::replace(&mut g.workload_plan, workload_plan),
            fused: std::mem::replace(&mut g.fused, fused),
            fused_chain: std::mem::replace(&mut self.opts.fused, next.fused),
            banks: match banks {
                Some(b) => self.live.replace_banks(b),
                None => None,
            },
            builtin_handler,
            handler,
            params: std::mem::replace(&mut g.params, params),
            stage_names: std::mem::replace(&mut g.stage_names, stage_names),
        })
    }

    /// Keeps what a failed [`Self::install`] allocated until the next stop
    /// (freeing it now would wait for the running graph) and passes `e` on.
    fn retire_on_error(&mut self, e: GpuError, allocated: Box<dyn std::any::Any + Send>) -> GpuError {
        self.live.retire(allocated);
        e
    }

    /// Puts back what [`Self::install`] replaced (the old graph still runs
    /// with it). What the failed swap allocated is retired, not freed: the
    /// graph runs.
    fn restore(&mut self, previous: Previous) {
        let g = &mut *self.graph;
        let live = &mut *self.live;
        live.retire(Box::new(std::mem::replace(&mut g.workload, previous.workload)));
        live.retire(Box::new(std::mem::replace(&mut g.workload_plan, previous.workload_plan)));
        live.retire(Box::new(std::mem::replace(&mut g.fused, previous.fused)));
        self.opts.fused = previous.fused_chain;
        if let Some(b) = previous.banks {
            let replaced = live.replace_banks(b);
            live.retire(Box::new(replaced));
        }
        if let Some(plan) = previous.handler {
            live.retire(Box::new(std::mem::replace(&mut g.builtin_handler, previous.builtin_handler)));
            live.retire(Box::new(std::mem::replace(&mut g.handler, plan)));
        }
        g.params = previous.params;
        *g.handler_params.lock().unwrap_or_else(PoisonError::into_inner) = previous.params;
        g.stage_names = previous.stage_names;
    }

    /// Launches the graph again after a tear-down, continuing the loop's
    /// state: the claimed sequence, result numbering and counters stay; only
    /// the idle clock restarts, so the switch does not count towards
    /// `loop.timeout_ms`.
    /// The loop state's actuation fields for the chain the graph runs.
    fn actuation_fields(&self) -> run::ActuationFields {
        let (samples, capacity) = self.graph.final_samples();
        run::ActuationFields { tx: self.opts.actuation, samples, capacity }
    }

    /// Where the chain's final samples are when a result is published from
    /// the loop state (see [`graph::LoopGraph::final_samples`]); `(0, 0)`:
    /// nowhere (the fused chain passes its own; the tiled kernel keeps none).
    pub fn final_samples(&self) -> (u64, u32) {
        self.graph.final_samples()
    }

    fn relaunch(&mut self) -> Result<(), GpuError> {
        let actuation = self.actuation_fields();
        self.run.reset_for_relaunch(self.live.selection(), &actuation)?;
        self.live.count_relaunch();
        self.run.upload_for_relaunch(&self.graph.params)?;
        self.launch_resident_graph()?;
        self.run.mark_launched();
        Ok(())
    }
}

impl Drop for ResidentExecutor {
    fn drop(&mut self) {
        self.stop_for_drop();
        if self.is_wedged() {
            tracing::warn!(
                "the GPU stopped answering: leaking the loop's graphs, device buffers and ring memory instead of freeing them"
            );
            // The parts stay in their `ManuallyDrop`s: leaked.
            return;
        }
        // The graphs go first, on a thread where the context is current and
        // while `rt` (and with it the context) is certainly alive.
        if self.rt.ctx.bind_to_thread().is_err() {
            tracing::warn!("cannot bind the CUDA context to destroy the loop's graphs; leaking them");
            std::mem::forget(self.graph.exec.take());
            std::mem::forget(self.graph.graph.take());
        } else {
            drop(self.graph.exec.take());
            drop(self.graph.graph.take());
        }
        // SAFETY: the parts are initialised (field invariant) and dropped
        // only here, once each; `self` is not used after `drop`.
        unsafe {
            ManuallyDrop::drop(&mut self.rt);
            ManuallyDrop::drop(&mut self.run);
            ManuallyDrop::drop(&mut self.graph);
            ManuallyDrop::drop(&mut self.live);
        }
    }
}
