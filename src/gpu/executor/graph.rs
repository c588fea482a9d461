//! Graph building: the built-in data-ready handlers, the fused chain's
//! device memory, and the capture of the handler and workload fragments into
//! the executor's graph, `WHILE { handler ; controller ; IF(ready) { workload
//! ; end marker } }` (or launched per frame, the benchmark's baselines); with
//! sub-frame streaming a pull in front of the handler and a tail copy in
//! front of the workload ([`crate::gpu::streaming`]).

use super::options::{ControllerPlacement, ExecutorOptions, LaunchStyle, poll_budget_ns};
use crate::fragment::{
    ComputeContext, DeviceRegion, EnqueueTarget, Fragment, FragmentError, GpuResidentOperator, OperatorSpec,
    Plan, PortDirection, StreamedFrame,
};
use crate::gpu::GpuError;
use crate::gpu::control::*;
use crate::gpu::driver::{self, Conditional, DeviceBuffer, Graph, GraphExec, GraphRef, LaunchDims, Node};
use crate::gpu::fused::{FUSED_THREADS, FusedChain, FusedProgram};
use crate::gpu::output_publish::{OUTPUT_THREADS, OutputPublish};
use crate::gpu::runtime::GpuRuntime;
use crate::gpu::streaming::StreamBuffers;
use crate::ops::OpSpec;
use crate::ring::layout::{RESULT_HAS_DETECT, RESULT_HAS_STATS};
use cudarc::driver::{CudaContext, CudaStream};
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// A built-in data-ready handler as a GPU-resident operator: launches its
/// kernel, whose one argument is the loop parameters the executor fills in
/// before capture.
pub(super) struct BuiltinHandler {
    /// Kernel taking `(LoopParams)`: `fl_ring_ready` or `fl_fused_chain`.
    kernel: &'static str,
    dims: LaunchDims,
    params: Arc<Mutex<LoopParams>>,
}

impl BuiltinHandler {
    /// `fl_ring_ready`: one thread polls, claims and sets the IF value.
    pub(super) fn ring_ready(params: Arc<Mutex<LoopParams>>) -> Self {
        Self { kernel: "fl_ring_ready", dims: LaunchDims::SINGLE, params }
    }

    /// `fl_fused_chain` (one block of [`FUSED_THREADS`] with `shared_bytes`
    /// of dynamic shared memory): claims the frame, runs every step of the
    /// fused chain and publishes the result.
    pub(super) fn fused_chain(params: Arc<Mutex<LoopParams>>, shared_bytes: u32) -> Self {
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
pub(super) struct FusedBuffers {
    pub(super) program: DeviceBuffer,
    _samples: [DeviceBuffer; 2],
    /// Dynamic shared memory of each launch.
    pub(super) shared_bytes: u32,
}

impl FusedBuffers {
    /// Places what fits in shared memory, allows the kernel that much,
    /// allocates the buffers, binds them into the program and copies it to the device.
    pub(super) fn upload(
        rt: &GpuRuntime,
        chain: &FusedChain,
        payload_capacity: usize,
    ) -> Result<Self, GpuError> {
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
pub(super) fn plan_fragment(ctx: &Arc<CudaContext>, fragment: &Fragment) -> Result<BoundPlan, GpuError> {
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
pub(super) struct BoundPlan {
    pub(super) plan: Plan,
    buffers: Vec<DeviceRegion>,
    _allocations: Vec<DeviceBuffer>,
}

/// What graph building reads and does not own: the opened GPU, the
/// executor's options and the device addresses of the loop state and of the
/// loop parameters' device copy (both owned by run control).
#[derive(Clone, Copy)]
pub(super) struct GraphInputs<'a> {
    pub(super) rt: &'a GpuRuntime,
    pub(super) opts: &'a ExecutorOptions,
    /// Device address of the loop state ([`DeviceLoopState`]).
    pub(super) state: u64,
    /// Device address of the loop parameters' device copy.
    pub(super) params_dev: u64,
}

impl GraphInputs<'_> {
    /// Where a fragment's kernels find the loop's frame: the loop state's
    /// parts, the kernels, and how frames arrive (`streamed`) and are
    /// claimed (`claims_frames`).
    fn target<'s>(
        &'s self,
        stream: &'s Arc<CudaStream>,
        streamed: Option<StreamedFrame>,
        claims_frames: bool,
    ) -> EnqueueTarget<'s> {
        EnqueueTarget {
            stream,
            frame_desc: self.state + DESC_OFFSET as u64,
            chain_result: self.state + CHAIN_OFFSET as u64,
            user_result: self.state + USER_OFFSET as u64,
            slot_header: self.state + SLOT_OFFSET as u64,
            kernels: &self.rt.library,
            streamed,
            claims_frames,
        }
    }
}

/// The loop's graph and what it is built from: the chain it runs (the
/// workload and handler fragments with their plans, the fused chain's or
/// the streaming's device memory), the loop parameters its kernels take,
/// and the captured and instantiated graph.
pub(super) struct LoopGraph {
    pub(super) capture_stream: Arc<CudaStream>,
    /// Field order matters: the executable graph is dropped before the graph.
    pub(super) exec: Option<GraphExec>,
    pub(super) graph: Option<Graph>,
    /// Programmatic edges the built graph holds (0: plain edges only).
    pub(super) programmatic_edges: usize,
    /// Whether the workload's last kernel publishes the result (no end marker).
    pub(super) publishes_in_last_kernel: bool,
    /// The fused chain's device memory, when the handler runs the chain.
    pub(super) fused: Option<FusedBuffers>,
    /// The staging buffer of sub-frame streaming, when `opts.stream`.
    pub(super) stream: Option<StreamBuffers>,
    /// The main fragment (it also holds a custom data-ready handler, if registered).
    pub(super) workload: Fragment,
    /// `None` for an empty workload (the end marker alone runs per frame).
    pub(super) workload_plan: Option<BoundPlan>,
    /// The handler fragment the executor built (built-in, or the `[handler]`
    /// wrapper), or `None` when the workload registered its own.
    pub(super) builtin_handler: Option<Fragment>,
    pub(super) handler: BoundPlan,
    /// The loop parameters the built-in handler launches with.
    pub(super) handler_params: Arc<Mutex<LoopParams>>,
    /// The loop parameters the graph's kernels take.
    pub(super) params: LoopParams,
    pub(super) placement: ControllerPlacement,
    /// The workload's stage names, in execution order.
    pub(super) stage_names: Vec<String>,
}

impl LoopGraph {
    pub(super) fn set_standalone_params(&mut self) {
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
    fn waits_for_prior(inp: &GraphInputs<'_>, f: cudarc::driver::sys::CUfunction) -> bool {
        let names = crate::gpu::kernel_sources::KERNEL_NAMES.iter().flat_map(|(_, names)| names.iter());
        names
            .chain(&["fl_end_marker"])
            .filter(|n| **n != "fl_fused_chain" && **n != "fl_fused_tiled_loop")
            .any(|n| inp.rt.library.function(n).is_ok_and(|k| k.cu_function() == f))
            // A user kernel's entry kernel waits like the built-in ones.
            // SAFETY: `f` is the function of a kernel node of the graph being built,
            // whose modules the executor keeps loaded.
            || unsafe { crate::gpu::driver::function_name(f) }.as_deref() == Some(crate::gpu::user::source::WRAPPED_ENTRY)
    }

    pub(super) fn build_resident(
        &mut self,
        inp: &GraphInputs<'_>,
        programmatic: bool,
    ) -> Result<(), GpuError> {
        let graph = self.capture_resident(inp, programmatic, None)?;
        self.exec = Some(graph.instantiate()?);
        self.graph = Some(graph);
        Ok(())
    }

    /// Captures the resident graph `WHILE { handler ; IF { workload } }`
    /// (or `WHILE { fused chain }`) without instantiating it. The kernels'
    /// loop parameters name the new graph's conditional handles, or
    /// `keep_handles` (`(while, if)`): those of the executable graph this one
    /// will update in place (`cuGraphExecUpdate` keeps the executable
    /// graph's conditional nodes and their handles).
    pub(super) fn capture_resident(
        &mut self,
        inp: &GraphInputs<'_>,
        programmatic: bool,
        keep_handles: Option<(u64, u64)>,
    ) -> Result<Graph, GpuError> {
        let ctx = Arc::clone(&inp.rt.ctx);
        let graph = Graph::new()?;
        let root = graph.root();
        let while_handle = root.conditional_handle(&ctx, 1, true)?;
        let (_, body) = root.add_conditional(&ctx, &[], while_handle, Conditional::While)?;
        if self.fused.is_some() {
            // The handler runs the chain and publishes: the body is that one kernel.
            self.params.while_handle = keep_handles.map_or(while_handle.0, |k| k.0);
            self.params.if_handle = 0;
            *self.handler_params.lock().unwrap_or_else(|e| e.into_inner()) = self.params;
            self.capture_handler(inp, body)?;
            self.programmatic_edges = 0;
            self.publishes_in_last_kernel = false;
            return Ok(graph);
        }
        if self.workload_claims_frames(inp.opts) {
            // The workload's kernel polls, claims and (while frames stream)
            // pulls itself: `WHILE { workload }`.
            self.params.while_handle = keep_handles.map_or(while_handle.0, |k| k.0);
            self.params.if_handle = 0;
            self.params.poll_budget_ns = self.configured_poll_budget_ns(inp.opts, true);
            *self.handler_params.lock().unwrap_or_else(|e| e.into_inner()) = self.params;
            self.capture_workload(inp, body, &[])?;
            if !self.publishes_in_last_kernel {
                return Err(GpuError::Setup(
                    "the workload said it claims the frames itself but did not take the loop parameters"
                        .into(),
                ));
            }
            self.programmatic_edges = 0;
            return Ok(graph);
        }
        let if_handle = body.conditional_handle(&ctx, 0, false)?;
        self.params.poll_budget_ns = self.configured_poll_budget_ns(inp.opts, false);
        self.params.while_handle = keep_handles.map_or(while_handle.0, |k| k.0);
        self.params.if_handle = keep_handles.map_or(if_handle.0, |k| k.1);
        *self.handler_params.lock().unwrap_or_else(|e| e.into_inner()) = self.params;

        let pull = match &self.stream {
            Some(st) => vec![st.add_pull(inp.rt, body, &[], self.params)?],
            None => Vec::new(),
        };
        let handler_leaves = self.capture_handler_after(inp, body, &pull)?;
        let if_deps = match self.placement {
            ControllerPlacement::InHandler => handler_leaves,
            ControllerPlacement::Before => {
                let mut p = self.params;
                let controller = inp.rt.library.function("fl_loop_controller")?;
                let mut args = [(&mut p as *mut LoopParams).cast::<c_void>()];
                // SAFETY: one LoopParams argument, matching the kernel.
                vec![unsafe { body.add_kernel(&handler_leaves, controller, LaunchDims::SINGLE, &mut args)? }]
            }
        };
        let (_, if_body) = body.add_conditional(&ctx, &if_deps, if_handle, Conditional::If)?;
        // A workload that reads a streaming frame itself needs no tail copy.
        let tail = match &self.stream {
            Some(st) if !self.workload.reads_streamed_frames() => {
                vec![st.add_tail(inp.rt, if_body, &[], inp.state + DESC_OFFSET as u64)?]
            }
            _ => Vec::new(),
        };
        self.capture_workload(inp, if_body, &tail)?;
        self.programmatic_edges = if programmatic {
            if_body.make_edges_programmatic(|f| Self::waits_for_prior(inp, f))?
        } else {
            0
        };
        Ok(graph)
    }

    /// Whether the loop body is the workload alone, claiming the frames
    /// itself ([`crate::fragment::GpuResidentOperator::can_claim_frames`]):
    /// resident, with the built-in handler, polling without sleeps,
    /// publishing from the workload's kernel, and nothing the graph must run
    /// between the claim and the work or after it (stage markers, an output
    /// node).
    pub(super) fn workload_claims_frames(&self, opts: &ExecutorOptions) -> bool {
        opts.workload_claims_frames
            && opts.style == LaunchStyle::Resident
            && self.fused.is_none()
            && self.placement == ControllerPlacement::InHandler
            && opts.user_handler.is_none()
            && self.workload.data_ready_handler().is_none()
            && !opts.stage_markers
            && !opts.host_driven
            // Block 0 sleeping between polls would leave the others waiting long.
            && opts.loop_cfg.data_not_ready_sleep_interval_us == 0
            && opts.output.is_none()
            && opts.publish_from_last_kernel
            && self.workload.can_claim_frames()
    }

    /// The poll budget of `loop.poll_budget_us` as this graph's handler runs it.
    fn configured_poll_budget_ns(&self, opts: &ExecutorOptions, claiming: bool) -> u64 {
        let configured = opts.loop_cfg.poll_budget_us.saturating_mul(1000);
        poll_budget_ns(configured, self.stream.is_some(), claiming)
    }

    pub(super) fn build_per_frame_graph(
        &mut self,
        inp: &GraphInputs<'_>,
        programmatic: bool,
    ) -> Result<(), GpuError> {
        self.set_standalone_params();
        let graph = Graph::new()?;
        let leaves = self.capture_handler(inp, graph.root())?;
        self.capture_workload(inp, graph.root(), &leaves)?;
        self.programmatic_edges = if programmatic {
            graph.root().make_edges_programmatic(|f| Self::waits_for_prior(inp, f))?
        } else {
            0
        };
        self.exec = Some(graph.instantiate()?);
        self.graph = Some(graph);
        Ok(())
    }

    /// Programmatic edges in the built graph (0 when plain edges only).
    pub(super) fn programmatic_edge_count(&self) -> usize {
        self.programmatic_edges
    }

    /// Whether the chain's last kernel publishes the result (no end-marker node).
    pub(super) fn publishes_in_last_kernel(&self) -> bool {
        self.publishes_in_last_kernel
    }

    fn capture_handler(&mut self, inp: &GraphInputs<'_>, into: GraphRef<'_>) -> Result<Vec<Node>, GpuError> {
        self.capture_handler_after(inp, into, &[])
    }

    fn capture_handler_after(
        &mut self,
        inp: &GraphInputs<'_>,
        into: GraphRef<'_>,
        deps: &[Node],
    ) -> Result<Vec<Node>, GpuError> {
        let stream = Arc::clone(&self.capture_stream);
        let leaves = into.capture(&stream, deps, |s| self.enqueue_handler(inp, s))?;
        if leaves.is_empty() {
            return Err(GpuError::Setup("the data-ready handler fragment enqueued no work".into()));
        }
        Ok(leaves)
    }

    fn capture_workload(
        &mut self,
        inp: &GraphInputs<'_>,
        into: GraphRef<'_>,
        deps: &[Node],
    ) -> Result<(), GpuError> {
        let stream = Arc::clone(&self.capture_stream);
        into.capture(&stream, deps, |s| self.enqueue_workload(inp, s))?;
        Ok(())
    }

    pub(super) fn enqueue_handler(
        &mut self,
        inp: &GraphInputs<'_>,
        stream: &Arc<CudaStream>,
    ) -> Result<(), GpuError> {
        let target = inp.target(stream, None, false);
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
    pub(super) fn enqueue_workload(
        &mut self,
        inp: &GraphInputs<'_>,
        stream: &Arc<CudaStream>,
    ) -> Result<(), GpuError> {
        let lib = &inp.rt.library;
        let mut p = self.params;
        let Some(order) = self.workload_plan.as_ref().map(|b| b.plan.order().to_vec()) else {
            return self.enqueue_end_marker(inp, stream);
        };
        if inp.opts.stage_markers {
            let marker = lib.function("fl_stage_marker")?;
            for (i, id) in order.into_iter().enumerate() {
                let mut stage = STAGE_FIRST_OP + i as u64;
                let mut args =
                    [(&mut p as *mut LoopParams).cast::<c_void>(), (&mut stage as *mut u64).cast()];
                // SAFETY: (LoopParams, u64) matches fl_stage_marker.
                unsafe { driver::launch_raw(stream, marker, LaunchDims::SINGLE, &mut args)? };
                self.enqueue_one_operator(inp, stream, id)?;
            }
        } else {
            let streamed = self.stream.as_ref().map(|st| st.staged());
            let target = inp.target(stream, streamed, self.workload_claims_frames(inp.opts));
            let bound =
                self.workload_plan.as_ref().ok_or_else(|| GpuError::Setup("empty workload".into()))?;
            // With an output ring the end marker publishes, after the output node.
            let published = if inp.opts.publish_from_last_kernel && inp.opts.output.is_none() {
                self.workload.enqueue_publishing(&bound.plan, &bound.buffers, &target, inp.params_dev)
            } else {
                self.workload.enqueue(&bound.plan, &bound.buffers, &target).map(|()| false)
            };
            self.publishes_in_last_kernel = published.map_err(|e| GpuError::Setup(e.to_string()))?;
            if self.publishes_in_last_kernel {
                return Ok(());
            }
        }
        self.enqueue_end_marker(inp, stream)
    }

    fn enqueue_end_marker(&self, inp: &GraphInputs<'_>, stream: &Arc<CudaStream>) -> Result<(), GpuError> {
        if let Some(output) = inp.opts.output {
            self.enqueue_output_publish(inp, stream, output)?;
        }
        let mut p = self.params;
        let end = inp.rt.library.function("fl_end_marker")?;
        let mut args = [(&mut p as *mut LoopParams).cast::<c_void>()];
        // SAFETY: one LoopParams argument, matching the kernel.
        Ok(unsafe { driver::launch_raw(stream, end, LaunchDims::SINGLE, &mut args) }?)
    }

    /// Where the chain's final samples are when the result is published
    /// from the loop state (the last operator's `out` port; reductions pass
    /// theirs through), and how many floats that buffer holds; `(0, 0)` when
    /// the workload has none there (the fused chain passes its own, the
    /// tiled kernel keeps none).
    pub(super) fn final_samples(&self) -> (u64, u32) {
        self.workload_plan
            .as_ref()
            .and_then(|bound| {
                let last = *bound.plan.order().last()?;
                let index = bound.plan.port_buffer(last, "out", PortDirection::Output)?;
                bound.buffers.get(index)
            })
            .map_or((0, 0), |region| (region.dptr, u32::try_from(region.bytes / 4).unwrap_or(u32::MAX)))
    }

    /// The output-publish node: `fl_output_publish` copies the chain's final
    /// output buffer (the last operator's `out` port), the frame's record and
    /// user words into the next slot of the device output ring.
    fn enqueue_output_publish(
        &self,
        inp: &GraphInputs<'_>,
        stream: &Arc<CudaStream>,
        mut o: OutputPublish,
    ) -> Result<(), GpuError> {
        let (samples, capacity) = self.final_samples();
        if samples != 0 {
            o.samples = samples;
            o.buffer_capacity = capacity;
        }
        let mut p = self.params;
        let f = inp.rt.library.function("fl_output_publish")?;
        let mut args = [(&mut p as *mut LoopParams).cast::<c_void>(), (&mut o as *mut OutputPublish).cast()];
        let dims = LaunchDims { grid: (1, 1, 1), block: (OUTPUT_THREADS, 1, 1), shared_bytes: 0 };
        // SAFETY: (LoopParams, OutputPublish) by value matches fl_output_publish,
        // whose __launch_bounds__ allow one block of OUTPUT_THREADS; every
        // address in `o` stays valid while the graph exists (CudaLoop keeps
        // the ring, the plan keeps the buffer).
        Ok(unsafe { driver::launch_raw(stream, f, dims, &mut args) }?)
    }

    fn enqueue_one_operator(
        &mut self,
        inp: &GraphInputs<'_>,
        stream: &Arc<CudaStream>,
        id: crate::fragment::OperatorId,
    ) -> Result<(), GpuError> {
        let frame_desc = inp.state + DESC_OFFSET as u64;
        let chain_result = inp.state + CHAIN_OFFSET as u64;
        let bound = self.workload_plan.as_ref().ok_or_else(|| GpuError::Setup("empty workload".into()))?;
        let entry = &mut self.workload.operators[id.index()];
        let mut ctx = ComputeContext {
            operator: &entry.name,
            stream,
            ports: bound.plan.bindings(id),
            buffers: &bound.buffers,
            frame_desc,
            chain_result,
            user_result: inp.state + USER_OFFSET as u64,
            slot_header: inp.state + SLOT_OFFSET as u64,
            kernels: &inp.rt.library,
            result_publisher: None,
            publisher_taken: false,
            streamed: self.stream.as_ref().map(|st| st.staged()),
            claims_frames: false,
        };
        entry.op.compute(&mut ctx).map_err(|e| GpuError::Setup(e.to_string()))
    }
}

/// The main fragment of a configured chain (reductions fused where possible).
pub fn chain_fragment(chain: &[OpSpec], max_frame_bytes: usize) -> Result<Fragment, GpuError> {
    chain_fragment_with(chain, max_frame_bytes, crate::gpu::operators::PayloadPath::default())
}

/// [`chain_fragment`] reading the payload by `payload`.
pub fn chain_fragment_with(
    chain: &[OpSpec],
    max_frame_bytes: usize,
    payload: crate::gpu::operators::PayloadPath,
) -> Result<Fragment, GpuError> {
    let layout = crate::gpu::operators::ChainLayout::default();
    crate::gpu::operators::build_main_fragment_with(chain, max_frame_bytes, layout, payload)
        .map_err(|e| GpuError::Setup(e.to_string()))
}
