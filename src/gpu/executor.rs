//! The GPU-resident executor: captures the data-ready handler fragment and the
//! workload fragment into one persistent graph,
//! `WHILE { handler ; controller ; IF(ready) { workload ; end marker } }`,
//! instantiates it and launches it once; the host then only talks to it
//! through the control block in mapped memory. Also runs the same fragment
//! launched per frame (graph or plain stream), the baselines of the benchmark.

use super::clock::ClockCalibration;
use super::control::*;
use super::driver::{self, Conditional, DeviceBuffer, Graph, GraphExec, GraphRef, LaunchDims, Node};
use super::fused::{FUSED_THREADS, FusedChain, FusedProgram, plan_fusion};
use super::library::KernelLibrary;
use super::mapped::MappedMemory;
use super::nvrtc::CacheDir;
use super::{GpuError, GpuInfo};
use crate::backend::{BackendError, ClockEstimate, LoopStats, ResidentLoop};
use crate::config::{FusedChainMode, LoopConfig};
use crate::fragment::{
    ComputeContext, DeviceRegion, EnqueueTarget, Fragment, FragmentError, GpuResidentOperator, OperatorSpec,
    Plan,
};
use crate::ops::OpSpec;
use crate::ring::layout::{RESULT_HAS_DETECT, RESULT_HAS_STATS};
use crate::ring::{FrameRing, ResultRing, ResultWriter};
use cudarc::driver::{CudaContext, CudaStream};
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An opened GPU: context, compiled kernels and clock calibration.
pub struct GpuRuntime {
    pub info: GpuInfo,
    pub ctx: Arc<CudaContext>,
    pub library: KernelLibrary,
    clock: Mutex<ClockCalibration>,
    probe: Mutex<super::clock::ClockProbe>,
}

impl GpuRuntime {
    /// Probes device `ordinal`, opens it, compiles (or loads cached) kernels and
    /// calibrates the GPU clock.
    pub fn open(ordinal: usize, cache: CacheDir) -> Result<Arc<Self>, GpuError> {
        let info = super::probe(ordinal)?;
        let ctx = driver::open_context(ordinal)?;
        let library = KernelLibrary::load(&ctx, cache)?;
        let probe = Mutex::new(super::clock::ClockProbe::new(&ctx)?);
        let rt = Arc::new(Self { info, ctx, library, clock: Mutex::new(ClockCalibration::default()), probe });
        rt.recalibrate_clock()?;
        Ok(rt)
    }

    /// Allocates zeroed mapped host memory for a ring or a control block.
    pub fn mapped(&self, len: usize) -> Result<MappedMemory, GpuError> {
        MappedMemory::alloc(&self.ctx, len)
    }

    /// Re-measures the `%globaltimer` offset (e.g. periodically, against drift).
    pub fn recalibrate_clock(&self) -> Result<ClockCalibration, GpuError> {
        let c = self.probe.lock().unwrap_or_else(|p| p.into_inner()).calibrate(&self.library, 200)?;
        let mut clock = self.clock.lock().unwrap_or_else(|p| p.into_inner());
        *clock = c.with_drift_since(&clock);
        Ok(*clock)
    }

    pub fn clock(&self) -> ClockCalibration {
        *self.clock.lock().unwrap_or_else(|p| p.into_inner())
    }
}

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
    /// The host calls [`ResidentExecutor::data_ready`] for each frame instead of
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
        }
    }
}

/// A built-in data-ready handler as a GPU-resident operator: launches its
/// kernel, whose one argument is the loop parameters the executor fills in
/// before capture.
pub struct BuiltinHandler {
    /// Kernel taking `(LoopParams)`: `fl_ring_ready` or `fl_fused_chain`.
    kernel: &'static str,
    dims: LaunchDims,
    params: Arc<Mutex<LoopParams>>,
}

impl BuiltinHandler {
    /// `fl_ring_ready`: one thread polls, claims and sets the IF value.
    fn ring_ready(params: Arc<Mutex<LoopParams>>) -> Self {
        Self { kernel: "fl_ring_ready", dims: LaunchDims::SINGLE, params }
    }

    /// `fl_fused_chain` (one block of [`FUSED_THREADS`] with `shared_bytes`
    /// of dynamic shared memory): claims the frame, runs every step of the
    /// fused chain and publishes the result.
    fn fused_chain(params: Arc<Mutex<LoopParams>>, shared_bytes: u32) -> Self {
        let dims = LaunchDims { grid: (1, 1, 1), block: (FUSED_THREADS, 1, 1), shared_bytes };
        Self { kernel: "fl_fused_chain", dims, params }
    }
}

impl GpuResidentOperator for BuiltinHandler {
    fn name(&self) -> &str {
        self.kernel.trim_start_matches("fl_")
    }
    fn setup(&mut self, _spec: &mut OperatorSpec) {}
    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        let mut p = *self.params.lock().unwrap_or_else(|e| e.into_inner());
        let f = ctx.kernel(self.kernel)?;
        let mut args = [(&mut p as *mut LoopParams).cast::<c_void>()];
        // SAFETY: both kernels take one argument of type LoopParams; the
        // dimensions are the ones their __launch_bounds__ allow.
        unsafe { driver::launch_raw(ctx.stream(), f, self.dims, &mut args) }.map_err(|e| {
            FragmentError::Operator { operator: self.name().to_string(), problem: e.to_string() }
        })
    }
}

/// Device memory of a fused chain: the program and its two sample buffers.
struct FusedBuffers {
    program: DeviceBuffer,
    _samples: [DeviceBuffer; 2],
    /// Dynamic shared memory of each launch.
    shared_bytes: u32,
}

impl FusedBuffers {
    /// Places what fits in shared memory, allows the kernel that much,
    /// allocates the buffers, binds them into the program and copies it to the device.
    fn upload(rt: &GpuRuntime, chain: &FusedChain, payload_capacity: usize) -> Result<Self, GpuError> {
        use cudarc::driver::sys::CUfunction_attribute;
        let ctx = &rt.ctx;
        let kernel = rt.library.function("fl_fused_chain")?;
        let limit = fused_shared_limit(rt)?;
        let mut chain = chain.clone();
        let shared_bytes = chain.place_in_shared(payload_capacity, limit);
        kernel
            .set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                shared_bytes as i32,
            )
            .map_err(|e| {
                GpuError::Setup(format!("allowing fl_fused_chain {shared_bytes} B of shared memory: {e}"))
            })?;
        tracing::debug!(
            "fused chain: {} B of shared memory (payload staged: {} B, buffers shared: {})",
            shared_bytes,
            chain.program.stage_bytes,
            chain.program.shared_buffers != 0
        );
        let samples = [
            DeviceBuffer::new(ctx, chain.buffer_bytes(), 0)?,
            DeviceBuffer::new(ctx, chain.buffer_bytes(), 0)?,
        ];
        let mut program: FusedProgram = *chain.program;
        program.buffers = [samples[0].dptr(), samples[1].dptr()];
        let dev = DeviceBuffer::new(ctx, std::mem::size_of::<FusedProgram>(), 0)?;
        // SAFETY: FusedProgram is plain old data (integers and floats, no padding).
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&program as *const FusedProgram).cast::<u8>(),
                std::mem::size_of::<FusedProgram>(),
            )
        };
        dev.write(0, bytes)?;
        Ok(Self { program: dev, _samples: samples, shared_bytes: shared_bytes as u32 })
    }
}

/// Dynamic shared memory `fl_fused_chain` may use per block on this device:
/// the opt-in maximum less the kernel's static shared memory.
pub fn fused_shared_limit(rt: &GpuRuntime) -> Result<usize, GpuError> {
    use cudarc::driver::sys::CUdevice_attribute;
    let optin = rt
        .ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .map_err(|e| GpuError::Setup(format!("reading the shared memory limit: {e}")))?;
    let static_bytes = rt
        .library
        .function("fl_fused_chain")?
        .shared_size_bytes()
        .map_err(|e| GpuError::Setup(format!("reading fl_fused_chain's shared memory: {e}")))?;
    Ok(usize::try_from(optin - static_bytes).unwrap_or(0))
}

/// The `RESULT_HAS_*` flags of a chain.
pub fn chain_flags(chain: &[OpSpec]) -> u32 {
    chain.iter().fold(0, |f, op| match op {
        OpSpec::Stats => f | RESULT_HAS_STATS,
        OpSpec::Threshold { .. } => f | RESULT_HAS_DETECT,
        _ => f,
    })
}

/// Plans `fragment` and allocates its executor-owned buffers.
fn plan_fragment(ctx: &Arc<CudaContext>, fragment: &Fragment) -> Result<BoundPlan, GpuError> {
    let plan = fragment.plan().map_err(|e| GpuError::Setup(e.to_string()))?;
    for d in plan.diagnostics() {
        tracing::warn!("fragment {}: {}", fragment.name(), d.message);
    }
    let mut allocations = Vec::new();
    let buffers = plan.bind_buffers(|bytes| {
        let b = DeviceBuffer::new(ctx, bytes, 0)?;
        let p = b.dptr();
        allocations.push(b);
        Ok::<_, GpuError>(p)
    })?;
    Ok(BoundPlan { plan, buffers, _allocations: allocations })
}
/// A fragment's plan with its buffers bound (the executor-allocated ones kept alive here).
struct BoundPlan {
    plan: Plan,
    buffers: Vec<DeviceRegion>,
    _allocations: Vec<DeviceBuffer>,
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
    rt: Arc<GpuRuntime>,
    frame_ring: Arc<FrameRing>,
    /// The result ring's single writer, held while the device writes the ring
    /// so that nothing on the host can push into it.
    result_writer: ResultWriter,
    control: MappedMemory,
    state: DeviceBuffer,
    /// `params` in device memory, for kernels that publish the result.
    params_dev: DeviceBuffer,
    /// Programmatic edges the built graph holds (0: plain edges only).
    programmatic_edges: usize,
    /// Whether the workload's last kernel publishes the result (no end marker).
    publishes_in_last_kernel: bool,
    /// The fused chain's device memory, when the handler runs the chain.
    fused: Option<FusedBuffers>,
    /// The main fragment (it also holds a custom data-ready handler, if registered).
    workload: Fragment,
    /// `None` for an empty workload (the end marker alone runs per frame).
    workload_plan: Option<BoundPlan>,
    /// The built-in handler fragment, or `None` when the workload registered its own.
    builtin_handler: Option<Fragment>,
    handler: BoundPlan,
    handler_params: Arc<Mutex<LoopParams>>,
    params: LoopParams,
    opts: ExecutorOptions,
    placement: ControllerPlacement,
    stage_names: Vec<String>,
    capture_stream: Arc<CudaStream>,
    run_stream: Arc<CudaStream>,
    /// Field order matters: the executable graph is dropped before the graph.
    exec: Option<GraphExec>,
    _graph: Option<Graph>,
    launched: bool,
    /// The terminal outcome once the loop stopped (by tear-down, timeout or fault).
    finished: Option<Result<(), String>>,
    /// Set when a tear-down timed out or a fault was seen: the device may
    /// still touch this executor's memory, and freeing it may block.
    wedged: AtomicBool,
}

impl ExecutorCore {
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
        let builtin_handler = if let Some(f) = &fused {
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
        let cfg = &opts.loop_cfg;
        let params = LoopParams {
            ring: ring_dptr,
            results: results_dptr,
            ctl: control.dptr(),
            st: state.dptr(),
            poll_budget_ns: cfg.poll_budget_us.saturating_mul(1000),
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

    fn control(&self) -> &LoopControl {
        // SAFETY: the mapping holds a zero-initialised LoopControl (all-zero
        // atomics are valid), 64-byte aligned, alive as long as `self`.
        unsafe { &*(self.control.host_ptr() as *const LoopControl) }
    }

    fn set_standalone_params(&mut self) {
        let mut p = self.params;
        p.handler_sets_if = 0;
        p.poll_budget_ns = 0;
        p.sleep_ns = 0;
        p.timeout_ns = 0;
        p.host_driven = 0;
        self.params = p;
        *self.handler_params.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    /// Kernels that wait for the kernels before them on the device
    /// (`fl_wait_for_prior_kernels`) and may follow a programmatic edge.
    fn waits_for_prior(&self, f: cudarc::driver::sys::CUfunction) -> bool {
        let names = super::kernel_sources::KERNEL_NAMES.iter().flat_map(|(_, names)| names.iter());
        names
            .chain(&["fl_end_marker"])
            .filter(|n| **n != "fl_fused_chain")
            .any(|n| self.rt.library.function(n).is_ok_and(|k| k.cu_function() == f))
    }

    fn build_resident(&mut self, programmatic: bool) -> Result<(), GpuError> {
        let ctx = Arc::clone(&self.rt.ctx);
        let graph = Graph::new()?;
        let root = graph.root();
        let while_handle = root.conditional_handle(&ctx, 1, true)?;
        let (_, body) = root.add_conditional(&ctx, &[], while_handle, Conditional::While)?;
        if self.fused.is_some() {
            // The handler runs the chain and publishes: the body is that one kernel.
            self.params.while_handle = while_handle.0;
            self.params.if_handle = 0;
            *self.handler_params.lock().unwrap_or_else(|e| e.into_inner()) = self.params;
            self.capture_handler(body)?;
            self.programmatic_edges = 0;
            self.exec = Some(graph.instantiate()?);
            self._graph = Some(graph);
            return Ok(());
        }
        let if_handle = body.conditional_handle(&ctx, 0, false)?;
        self.params.while_handle = while_handle.0;
        self.params.if_handle = if_handle.0;
        *self.handler_params.lock().unwrap_or_else(|e| e.into_inner()) = self.params;

        let handler_leaves = self.capture_handler(body)?;
        let if_deps = match self.placement {
            ControllerPlacement::InHandler => handler_leaves,
            ControllerPlacement::Before => {
                let mut p = self.params;
                let controller = self.rt.library.function("fl_loop_controller")?;
                let mut args = [(&mut p as *mut LoopParams).cast::<c_void>()];
                // SAFETY: one LoopParams argument, matching the kernel.
                vec![unsafe { body.add_kernel(&handler_leaves, controller, LaunchDims::SINGLE, &mut args)? }]
            }
        };
        let (_, if_body) = body.add_conditional(&ctx, &if_deps, if_handle, Conditional::If)?;
        self.capture_workload(if_body, &[])?;
        self.programmatic_edges =
            if programmatic { if_body.make_edges_programmatic(|f| self.waits_for_prior(f))? } else { 0 };
        let exec = graph.instantiate()?;
        self.exec = Some(exec);
        self._graph = Some(graph);
        Ok(())
    }

    fn build_per_frame_graph(&mut self, programmatic: bool) -> Result<(), GpuError> {
        self.set_standalone_params();
        let graph = Graph::new()?;
        let leaves = self.capture_handler(graph.root())?;
        self.capture_workload(graph.root(), &leaves)?;
        self.programmatic_edges = if programmatic {
            graph.root().make_edges_programmatic(|f| self.waits_for_prior(f))?
        } else {
            0
        };
        self.exec = Some(graph.instantiate()?);
        self._graph = Some(graph);
        Ok(())
    }

    /// Programmatic edges in the built graph (0 when plain edges only).
    pub fn programmatic_edge_count(&self) -> usize {
        self.programmatic_edges
    }

    /// Whether the chain's last kernel publishes the result (no end-marker node).
    pub fn publishes_in_last_kernel(&self) -> bool {
        self.publishes_in_last_kernel
    }

    fn capture_handler(&mut self, into: GraphRef<'_>) -> Result<Vec<Node>, GpuError> {
        let stream = Arc::clone(&self.capture_stream);
        let leaves = into.capture(&stream, &[], |s| self.enqueue_handler(s))?;
        if leaves.is_empty() {
            return Err(GpuError::Setup("the data-ready handler fragment enqueued no work".into()));
        }
        Ok(leaves)
    }

    fn capture_workload(&mut self, into: GraphRef<'_>, deps: &[Node]) -> Result<(), GpuError> {
        let stream = Arc::clone(&self.capture_stream);
        into.capture(&stream, deps, |s| self.enqueue_workload(s))?;
        Ok(())
    }

    fn enqueue_handler(&mut self, stream: &Arc<CudaStream>) -> Result<(), GpuError> {
        let target = EnqueueTarget {
            stream,
            frame_desc: self.state.dptr() + DESC_OFFSET as u64,
            chain_result: self.state.dptr() + CHAIN_OFFSET as u64,
            kernels: &self.rt.library,
        };
        let fragment = match self.builtin_handler.as_mut() {
            Some(h) => h,
            None => self
                .workload
                .data_ready_handler_mut()
                .ok_or_else(|| GpuError::Setup("the data-ready handler fragment disappeared".into()))?,
        };
        fragment
            .enqueue(&self.handler.plan, &self.handler.buffers, &target)
            .map_err(|e| GpuError::Setup(e.to_string()))
    }

    /// Enqueues the workload operators (with stage markers when enabled) and the end marker.
    fn enqueue_workload(&mut self, stream: &Arc<CudaStream>) -> Result<(), GpuError> {
        let rt = Arc::clone(&self.rt);
        let lib = &rt.library;
        let mut p = self.params;
        let Some(order) = self.workload_plan.as_ref().map(|b| b.plan.order().to_vec()) else {
            return self.enqueue_end_marker(stream);
        };
        if self.opts.stage_markers {
            let marker = lib.function("fl_stage_marker")?;
            for (i, id) in order.into_iter().enumerate() {
                let mut stage = STAGE_FIRST_OP + i as u64;
                let mut args =
                    [(&mut p as *mut LoopParams).cast::<c_void>(), (&mut stage as *mut u64).cast()];
                // SAFETY: (LoopParams, u64) matches fl_stage_marker.
                unsafe { driver::launch_raw(stream, marker, LaunchDims::SINGLE, &mut args)? };
                self.enqueue_one_operator(stream, id)?;
            }
        } else {
            let target = EnqueueTarget {
                stream,
                frame_desc: self.state.dptr() + DESC_OFFSET as u64,
                chain_result: self.state.dptr() + CHAIN_OFFSET as u64,
                kernels: &self.rt.library,
            };
            let bound =
                self.workload_plan.as_ref().ok_or_else(|| GpuError::Setup("empty workload".into()))?;
            let published = if self.opts.publish_from_last_kernel {
                self.workload.enqueue_publishing(&bound.plan, &bound.buffers, &target, self.params_dev.dptr())
            } else {
                self.workload.enqueue(&bound.plan, &bound.buffers, &target).map(|()| false)
            };
            self.publishes_in_last_kernel = published.map_err(|e| GpuError::Setup(e.to_string()))?;
            if self.publishes_in_last_kernel {
                return Ok(());
            }
        }
        self.enqueue_end_marker(stream)
    }

    fn enqueue_end_marker(&self, stream: &Arc<CudaStream>) -> Result<(), GpuError> {
        let mut p = self.params;
        let end = self.rt.library.function("fl_end_marker")?;
        let mut args = [(&mut p as *mut LoopParams).cast::<c_void>()];
        // SAFETY: one LoopParams argument, matching the kernel.
        unsafe { driver::launch_raw(stream, end, LaunchDims::SINGLE, &mut args) }
    }

    fn enqueue_one_operator(
        &mut self,
        stream: &Arc<CudaStream>,
        id: crate::fragment::OperatorId,
    ) -> Result<(), GpuError> {
        let frame_desc = self.state.dptr() + DESC_OFFSET as u64;
        let chain_result = self.state.dptr() + CHAIN_OFFSET as u64;
        let bound = self.workload_plan.as_ref().ok_or_else(|| GpuError::Setup("empty workload".into()))?;
        let entry = &mut self.workload.operators[id.index()];
        let mut ctx = ComputeContext {
            operator: &entry.name,
            stream,
            ports: bound.plan.bindings(id),
            buffers: &bound.buffers,
            frame_desc,
            chain_result,
            kernels: &self.rt.library,
            result_publisher: None,
            publisher_taken: false,
        };
        entry.op.compute(&mut ctx).map_err(|e| GpuError::Setup(e.to_string()))
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
        let st = DeviceLoopState {
            last_claimed: consumed,
            result_seq: self.result_writer.ring().head(),
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
        // SAFETY: LoopParams is plain old data (integers only, no padding).
        let params = unsafe {
            std::slice::from_raw_parts(
                (&self.params as *const LoopParams).cast::<u8>(),
                std::mem::size_of::<LoopParams>(),
            )
        };
        self.params_dev.write(0, params)?;
        self.finished = None;
        if self.opts.style == LaunchStyle::Resident {
            let exec = self.exec.as_ref().ok_or_else(|| GpuError::Setup("graph not built".into()))?;
            exec.launch(&self.run_stream)?;
            if let Err(e) = driver::stream_done(&self.run_stream) {
                return Err(self.fault(e));
            }
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
                exec.launch(&self.run_stream)
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
        driver::stream_sync(&self.run_stream)
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
    pub fn poll(&mut self) -> Option<Result<(), String>> {
        if self.launched && self.opts.style == LaunchStyle::Resident {
            match driver::stream_done(&self.run_stream) {
                Ok(false) => {}
                Ok(true) => {
                    self.launched = false;
                    self.finished = Some(Ok(()));
                }
                Err(e) => {
                    self.launched = false;
                    self.finished = Some(Err(self.fault(e).to_string()));
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
    fn fault(&self, e: GpuError) -> GpuError {
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

    /// Stops the loop: raises tear-down and waits (bounded) for the graph to
    /// finish. Always returns; reports a fault, a timeout or a wedged GPU.
    pub fn tear_down(&mut self) -> Result<LoopStats, GpuError> {
        if self.opts.style != LaunchStyle::Resident {
            self.launched = false;
            driver::stream_sync(&self.run_stream).map_err(|e| self.fault(e))?;
            return Ok(self.stats());
        }
        self.control().tear_down.store(1);
        // Saturating: the waits come from the config and must not overflow.
        let grace = self.opts.tear_down_wait.saturating_add(Duration::from_micros(
            self.opts
                .loop_cfg
                .poll_budget_us
                .saturating_add(self.opts.loop_cfg.data_not_ready_sleep_interval_us),
        ));
        let started = Instant::now();
        loop {
            match driver::stream_done(&self.run_stream) {
                Ok(true) => break,
                Ok(false) if started.elapsed() < grace => std::thread::sleep(Duration::from_micros(50)),
                Ok(false) => {
                    self.wedged.store(true, Ordering::Relaxed);
                    let waited_ms = self.opts.tear_down_wait.as_millis() as u64;
                    return Err(GpuError::TearDownTimeout {
                        waited_ms,
                        stage: self.control().stage.load().to_string(),
                    });
                }
                Err(e) => {
                    self.launched = false;
                    return Err(self.fault(e));
                }
            }
        }
        self.launched = false;
        self.finished = Some(Ok(()));
        Ok(self.stats())
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

    /// What dropping does first: tears a running resident loop down (bounded;
    /// a timeout marks the executor wedged), unless it is wedged already
    /// (a second wait would time out again). Never panics.
    fn stop_for_drop(&mut self) {
        if self.launched
            && !self.is_wedged()
            && self.opts.style == LaunchStyle::Resident
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

/// The main fragment of a configured chain (reductions fused where possible).
pub fn chain_fragment(chain: &[OpSpec], max_frame_bytes: usize) -> Result<Fragment, GpuError> {
    chain_fragment_with(chain, max_frame_bytes, super::operators::PayloadPath::default())
}

/// [`chain_fragment`] reading the payload by `payload`.
pub fn chain_fragment_with(
    chain: &[OpSpec],
    max_frame_bytes: usize,
    payload: super::operators::PayloadPath,
) -> Result<Fragment, GpuError> {
    let layout = super::operators::ChainLayout::default();
    super::operators::build_main_fragment_with(chain, max_frame_bytes, layout, payload)
        .map_err(|e| GpuError::Setup(e.to_string()))
}

/// The CUDA resident loop as the appliance sees it.
pub struct CudaLoop {
    exec: ResidentExecutor,
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
        if !frame_ring.take_reader_for_device() {
            return Err(GpuError::Setup("the frame ring already has a consumer".into()));
        }
        let mut opts = ExecutorOptions::new(cfg);
        let limit = fused_shared_limit(&rt)?;
        let fragment = match plan_fusion(
            chain,
            frame_ring.payload_capacity(),
            opts.loop_cfg.fused_chain,
            false,
            limit,
        ) {
            Ok(fused) => {
                tracing::info!("the data-ready handler runs the fused chain {}", fused.describe());
                opts.fused = Some(fused);
                Fragment::new("main")
            }
            Err(why) if opts.loop_cfg.fused_chain == FusedChainMode::On => {
                return Err(GpuError::Setup(format!(
                    "loop.fused_chain = \"on\" but the chain cannot be fused: {why}; set it to \"auto\""
                )));
            }
            Err(why) => {
                tracing::info!("one kernel per operator in the graph's IF body: {why}");
                chain_fragment(chain, frame_ring.payload_capacity())?
            }
        };
        let exec = ResidentExecutor::new(rt, fragment, frame_ring, result_ring, chain_flags(chain), opts)?;
        Ok(Self { exec })
    }

    pub fn executor(&mut self) -> &mut ResidentExecutor {
        &mut self.exec
    }
}

fn backend_error(e: GpuError) -> BackendError {
    match e {
        GpuError::StageFault { stage, ring_seq, error } => {
            BackendError::Stage { stage, message: format!("ring sequence {ring_seq}: {error}") }
        }
        other => BackendError::Other(other.to_string()),
    }
}

impl ResidentLoop for CudaLoop {
    fn backend_name(&self) -> &'static str {
        "cuda"
    }
    fn launch(&mut self) -> Result<(), BackendError> {
        if self.exec.is_launched() {
            return Err(BackendError::AlreadyLaunched);
        }
        self.exec.launch().map_err(backend_error)
    }
    fn is_wedged(&self) -> bool {
        self.exec.is_wedged()
    }
    fn is_launched(&self) -> bool {
        self.exec.launched && driver::stream_done(&self.exec.run_stream).is_ok_and(|done| !done)
    }
    fn stats(&self) -> LoopStats {
        self.exec.stats()
    }
    fn clock_offset_ns(&self) -> i64 {
        self.exec.clock().offset_ns
    }
    fn clock_error_ns(&self) -> u64 {
        self.exec.clock().error_ns
    }
    fn recalibrate_clock(&mut self) -> Result<Option<ClockEstimate>, BackendError> {
        let c = self.exec.rt.recalibrate_clock().map_err(backend_error)?;
        Ok(Some(ClockEstimate {
            offset_ns: c.offset_ns,
            error_ns: c.error_ns,
            measured_at_ns: c.measured_at_ns,
            drift_ppb: c.drift_ppb,
        }))
    }
    fn tear_down(&mut self) -> Result<LoopStats, BackendError> {
        let was_running = self.exec.launched;
        if let Some(Err(e)) = self.exec.poll() {
            return Err(BackendError::Other(e));
        }
        if !was_running && self.exec.finished.is_none() {
            return Err(BackendError::NotLaunched);
        }
        if !self.exec.launched {
            return match self.exec.state() {
                STATE_TIMED_OUT => Err(BackendError::TimedOut { ms: self.exec.opts.loop_cfg.timeout_ms }),
                _ => Ok(self.exec.stats()),
            };
        }
        self.exec.tear_down().map_err(backend_error)
    }
}
