//! The small safe layer over raw driver calls that cudarc's safe API lacks:
//! graphs with conditional WHILE/IF nodes, capture of a stream into an
//! existing (body) graph, kernel nodes and launches with raw parameters, and
//! device buffers. RAII owners free what they own; destructors never panic
//! (a failure there is logged).

use super::{GpuError, check};
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

/// Opens device `ordinal`'s primary context with spin-waiting synchronisation
/// (the lowest-latency choice for the launch-per-frame baselines) and returns it
/// bound to the calling thread.
pub fn open_context(ordinal: usize) -> Result<Arc<CudaContext>, GpuError> {
    // One context handle per device for the whole process: several resident
    // loops on one GPU share it. A second handle would synchronize the whole
    // context when it makes its first stream (cudarc does, to set up its
    // event tracking), and so wait forever behind a loop already running.
    static OPEN: std::sync::Mutex<Vec<(usize, std::sync::Weak<CudaContext>)>> =
        std::sync::Mutex::new(Vec::new());
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    open.retain(|(_, ctx)| ctx.strong_count() > 0);
    if let Some(ctx) = open.iter().find(|(o, _)| *o == ordinal).and_then(|(_, ctx)| ctx.upgrade()) {
        ctx.bind_to_thread()?;
        return Ok(ctx);
    }
    let ctx = new_context(ordinal)?;
    open.push((ordinal, Arc::downgrade(&ctx)));
    Ok(ctx)
}

/// The device's primary context, set to spin while it waits, as a new handle.
fn new_context(ordinal: usize) -> Result<Arc<CudaContext>, GpuError> {
    // SAFETY: callers reach this only after `probe` confirmed the driver library.
    check("cuInit", unsafe { sys::cuInit(0) })?;
    let mut dev = 0;
    // SAFETY: valid out-pointer.
    check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut dev, ordinal as i32) })?;
    let flags = sys::CUctx_flags::CU_CTX_SCHED_SPIN as u32;
    // SAFETY: valid device; fails harmlessly when the primary context is active already.
    let set = unsafe { sys::cuDevicePrimaryCtxSetFlags_v2(dev, flags) };
    if set != sys::CUresult::CUDA_SUCCESS {
        tracing::debug!("primary context flags left as they were ({set:?})");
    }
    Ok(CudaContext::new(ordinal)?)
}

/// A device allocation (`cuMemAlloc`), freed on drop.
pub struct DeviceBuffer {
    ctx: Arc<CudaContext>,
    /// Invariant: a live allocation of `len` bytes in `ctx`.
    dptr: sys::CUdeviceptr,
    len: usize,
}

impl DeviceBuffer {
    /// Allocates `len` bytes filled with `fill`.
    pub fn new(ctx: &Arc<CudaContext>, len: usize, fill: u8) -> Result<Self, GpuError> {
        ctx.bind_to_thread()?;
        let mut dptr = 0;
        // SAFETY: valid out-pointer; the context is current.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut dptr, len.max(1)) })?;
        let buf = Self { ctx: Arc::clone(ctx), dptr, len: len.max(1) };
        // SAFETY: the allocation holds `buf.len` bytes.
        check("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(dptr, fill, buf.len) })?;
        Ok(buf)
    }

    pub fn dptr(&self) -> u64 {
        self.dptr
    }

    /// The context the allocation belongs to.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `bytes` to `offset` (synchronous).
    pub fn write(&self, offset: usize, bytes: &[u8]) -> Result<(), GpuError> {
        if offset.checked_add(bytes.len()).is_none_or(|end| end > self.len) {
            return Err(GpuError::Setup(format!(
                "write of {} bytes at {offset} past a {}-byte buffer",
                bytes.len(),
                self.len
            )));
        }
        self.ctx.bind_to_thread()?;
        // SAFETY: bounds checked above; `bytes` is valid for reads.
        check("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(self.dptr + offset as u64, bytes.as_ptr().cast(), bytes.len())
        })
    }

    /// Copies `out.len()` bytes from `offset` (synchronous).
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), GpuError> {
        if offset.checked_add(out.len()).is_none_or(|end| end > self.len) {
            return Err(GpuError::Setup(format!(
                "read of {} bytes at {offset} past a {}-byte buffer",
                out.len(),
                self.len
            )));
        }
        self.ctx.bind_to_thread()?;
        // SAFETY: bounds checked above; `out` is valid for writes.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.dptr + offset as u64, out.len())
        })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_err() {
            tracing::warn!("device buffer leaked: context could not be bound");
            return;
        }
        // SAFETY: we own the allocation; it is freed exactly once here.
        let r = unsafe { sys::cuMemFree_v2(self.dptr) };
        if r != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!("cuMemFree failed while dropping a device buffer: {r:?}");
        }
    }
}

/// Kernel launch geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchDims {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_bytes: u32,
}

impl LaunchDims {
    /// One block of one thread.
    pub const SINGLE: LaunchDims = LaunchDims { grid: (1, 1, 1), block: (1, 1, 1), shared_bytes: 0 };

    /// `threads` threads in blocks of `block` (1-D).
    pub fn linear(threads: u32, block: u32) -> Self {
        LaunchDims { grid: (threads.div_ceil(block).max(1), 1, 1), block: (block, 1, 1), shared_bytes: 0 }
    }
}

/// Launches `func` on `stream` (captured when the stream is capturing).
///
/// # Safety
/// `params` must hold one pointer per kernel parameter, each pointing to a
/// value of exactly that parameter's type, alive for the duration of the call.
pub unsafe fn launch_raw(
    stream: &CudaStream,
    func: &CudaFunction,
    dims: LaunchDims,
    params: &mut [*mut c_void],
) -> Result<(), GpuError> {
    // SAFETY: the caller guarantees the parameter array; the function and
    // stream are live handles of the same context.
    let r = unsafe {
        sys::cuLaunchKernel(
            func.cu_function(),
            dims.grid.0,
            dims.grid.1,
            dims.grid.2,
            dims.block.0,
            dims.block.1,
            dims.block.2,
            dims.shared_bytes,
            stream.cu_stream(),
            params.as_mut_ptr(),
            ptr::null_mut(),
        )
    };
    check("cuLaunchKernel", r)
}

/// A graph this process owns (`cuGraphCreate`), destroyed on drop together with
/// the body graphs of its conditional nodes.
pub struct Graph {
    /// Invariant: a live graph handle.
    raw: sys::CUgraph,
}

// SAFETY: graph handles may be used from any thread (not concurrently, which
// `&mut`/ownership rules out for mutation here).
unsafe impl Send for Graph {}

impl Graph {
    pub fn new() -> Result<Self, GpuError> {
        let mut raw = ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("cuGraphCreate", unsafe { sys::cuGraphCreate(&mut raw, 0) })?;
        Ok(Self { raw })
    }

    /// The root graph as a body reference for building.
    pub fn root(&self) -> GraphRef<'_> {
        GraphRef { raw: self.raw, _owner: std::marker::PhantomData }
    }

    /// Instantiates the graph for launching.
    pub fn instantiate(&self) -> Result<GraphExec, GpuError> {
        let mut exec = ptr::null_mut();
        // SAFETY: the graph is live; valid out-pointer.
        check("cuGraphInstantiate", unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, self.raw, 0) })?;
        Ok(GraphExec { raw: exec })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: we own the handle; destroyed once.
        let r = unsafe { sys::cuGraphDestroy(self.raw) };
        if r != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!("cuGraphDestroy failed: {r:?}");
        }
    }
}

/// A graph node handle (owned by its graph).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node(sys::CUgraphNode);

/// Kind of a conditional node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conditional {
    /// Runs the body while the handle's value is non-zero (checked before each pass).
    While,
    /// Runs the body once when the handle's value is non-zero.
    If,
}

/// A conditional handle; its value is set on the device with `cudaGraphSetConditional`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConditionalHandle(pub u64);

/// A graph being built: the root [`Graph`] or the body of one of its
/// conditional nodes (owned by that node, so it lives as long as the root).
#[derive(Clone, Copy)]
pub struct GraphRef<'g> {
    raw: sys::CUgraph,
    _owner: std::marker::PhantomData<&'g Graph>,
}

impl<'g> GraphRef<'g> {
    /// Creates a conditional handle for a conditional node of this graph.
    /// With `reset_each_launch`, the handle takes `default` at every launch of the graph.
    pub fn conditional_handle(
        &self,
        ctx: &CudaContext,
        default: u32,
        reset_each_launch: bool,
    ) -> Result<ConditionalHandle, GpuError> {
        let mut h = 0;
        let flags = if reset_each_launch { sys::CU_GRAPH_COND_ASSIGN_DEFAULT } else { 0 };
        // SAFETY: live graph and context; valid out-pointer.
        check("cuGraphConditionalHandleCreate", unsafe {
            sys::cuGraphConditionalHandleCreate(&mut h, self.raw, ctx.cu_ctx(), default, flags)
        })?;
        Ok(ConditionalHandle(h))
    }

    /// Adds a conditional node after `deps`; returns it and its body graph.
    pub fn add_conditional(
        &self,
        ctx: &CudaContext,
        deps: &[Node],
        handle: ConditionalHandle,
        kind: Conditional,
    ) -> Result<(Node, GraphRef<'g>), GpuError> {
        // SAFETY: an all-zero CUgraphNodeParams is a valid starting value (plain data).
        let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
        params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
        params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
            handle: handle.0,
            type_: match kind {
                Conditional::While => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE,
                Conditional::If => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
            },
            size: 1,
            phGraph_out: ptr::null_mut(),
            ctx: ctx.cu_ctx(),
        };
        let raw_deps: Vec<sys::CUgraphNode> = deps.iter().map(|n| n.0).collect();
        let mut node = ptr::null_mut();
        // SAFETY: params are fully initialised for a conditional node; deps are
        // nodes of this graph; the driver writes the body graph into phGraph_out.
        check("cuGraphAddNode(conditional)", unsafe {
            sys::cuGraphAddNode_v2(
                &mut node,
                self.raw,
                if raw_deps.is_empty() { ptr::null() } else { raw_deps.as_ptr() },
                ptr::null(),
                raw_deps.len(),
                &mut params,
            )
        })?;
        // SAFETY: the driver filled the conditional member; phGraph_out points
        // to `size` (1) body graphs owned by the node.
        let body = unsafe {
            let out = params.__bindgen_anon_1.conditional.phGraph_out;
            if out.is_null() {
                return Err(GpuError::Setup("the driver returned no conditional body graph".into()));
            }
            *out
        };
        Ok((Node(node), GraphRef { raw: body, _owner: std::marker::PhantomData }))
    }

    /// Adds a kernel node after `deps`.
    ///
    /// # Safety
    /// As [`launch_raw`]: `params` holds one pointer per kernel parameter with
    /// the exact type (the driver copies the values during this call).
    pub unsafe fn add_kernel(
        &self,
        deps: &[Node],
        func: &CudaFunction,
        dims: LaunchDims,
        params: &mut [*mut c_void],
    ) -> Result<Node, GpuError> {
        let kp = sys::CUDA_KERNEL_NODE_PARAMS {
            func: func.cu_function(),
            gridDimX: dims.grid.0,
            gridDimY: dims.grid.1,
            gridDimZ: dims.grid.2,
            blockDimX: dims.block.0,
            blockDimY: dims.block.1,
            blockDimZ: dims.block.2,
            sharedMemBytes: dims.shared_bytes,
            kernelParams: params.as_mut_ptr(),
            extra: ptr::null_mut(),
            kern: ptr::null_mut(),
            ctx: ptr::null_mut(),
        };
        let raw_deps: Vec<sys::CUgraphNode> = deps.iter().map(|n| n.0).collect();
        let mut node = ptr::null_mut();
        // SAFETY: caller guarantees the parameters; deps belong to this graph.
        check("cuGraphAddKernelNode", unsafe {
            sys::cuGraphAddKernelNode_v2(
                &mut node,
                self.raw,
                if raw_deps.is_empty() { ptr::null() } else { raw_deps.as_ptr() },
                raw_deps.len(),
                &kp,
            )
        })?;
        Ok(Node(node))
    }

    /// Turns every kernel → kernel edge of this graph whose second kernel
    /// `waits_for_prior(function)` into a programmatic edge (programmatic
    /// dependent launch): the second kernel is launched while the first still
    /// runs and waits on the device (`griddepcontrol.wait`) for it to finish.
    /// Only kernels that wait before touching memory may be the second end of
    /// such an edge. Returns how many edges changed.
    pub fn make_edges_programmatic(
        &self,
        waits_for_prior: impl Fn(sys::CUfunction) -> bool,
    ) -> Result<usize, GpuError> {
        let mut n = 0usize;
        // SAFETY: live graph; null arrays ask for the edge count only.
        check("cuGraphGetEdges(count)", unsafe {
            sys::cuGraphGetEdges_v2(self.raw, ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), &mut n)
        })?;
        if n == 0 {
            return Ok(0);
        }
        let mut from = vec![ptr::null_mut(); n];
        let mut to = vec![ptr::null_mut(); n];
        // SAFETY: an all-zero CUgraphEdgeData is a valid value (plain bytes).
        let mut data: Vec<sys::CUgraphEdgeData> = vec![unsafe { std::mem::zeroed() }; n];
        // SAFETY: three arrays of `n` entries; the driver writes at most `n`.
        check("cuGraphGetEdges(edges)", unsafe {
            sys::cuGraphGetEdges_v2(self.raw, from.as_mut_ptr(), to.as_mut_ptr(), data.as_mut_ptr(), &mut n)
        })?;
        let kernel_function = |node: sys::CUgraphNode| -> Result<Option<sys::CUfunction>, GpuError> {
            let mut kind = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
            // SAFETY: a node of this graph; valid out-pointer.
            check("cuGraphNodeGetType", unsafe { sys::cuGraphNodeGetType(node, &mut kind) })?;
            if kind != sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
                return Ok(None);
            }
            // SAFETY: all-zero kernel node params are a valid out-value; the node is a kernel node.
            let mut kp: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
            // SAFETY: `node` is a kernel node of this graph; `kp` is a valid out-pointer.
            check("cuGraphKernelNodeGetParams", unsafe {
                sys::cuGraphKernelNodeGetParams_v2(node, &mut kp)
            })?;
            Ok(Some(kp.func))
        };
        let mut changed = 0;
        for i in 0..n.min(from.len()) {
            if data[i].type_ != sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_DEFAULT as u8
                || kernel_function(from[i])?.is_none()
                || !kernel_function(to[i])?.is_some_and(&waits_for_prior)
            {
                continue;
            }
            let programmatic = sys::CUgraphEdgeData {
                from_port: sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC as u8,
                to_port: 0,
                type_: sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8,
                reserved: [0; 5],
            };
            // SAFETY: the edge (from[i], to[i], data[i]) exists in this graph; it is
            // replaced by the same edge with programmatic data, between two kernel nodes.
            check("cuGraphRemoveDependencies", unsafe {
                sys::cuGraphRemoveDependencies_v2(self.raw, &from[i], &to[i], &data[i], 1)
            })?;
            // SAFETY: both nodes belong to this graph and are kernel nodes, as a
            // programmatic edge requires; `programmatic` is fully initialised.
            check("cuGraphAddDependencies(programmatic)", unsafe {
                sys::cuGraphAddDependencies_v2(self.raw, &from[i], &to[i], &programmatic, 1)
            })?;
            changed += 1;
        }
        Ok(changed)
    }

    /// Records what `enqueue` puts on `stream` into this graph, after `deps`
    /// (stream capture into an existing graph, relaxed mode). Returns the nodes
    /// the captured work ends in (empty if nothing was captured).
    pub fn capture<F>(
        &self,
        stream: &Arc<CudaStream>,
        deps: &[Node],
        enqueue: F,
    ) -> Result<Vec<Node>, GpuError>
    where
        F: FnOnce(&Arc<CudaStream>) -> Result<(), GpuError>,
    {
        let raw_deps: Vec<sys::CUgraphNode> = deps.iter().map(|n| n.0).collect();
        // SAFETY: live stream and graph; deps belong to the graph.
        check("cuStreamBeginCaptureToGraph", unsafe {
            sys::cuStreamBeginCaptureToGraph(
                stream.cu_stream(),
                self.raw,
                if raw_deps.is_empty() { ptr::null() } else { raw_deps.as_ptr() },
                ptr::null(),
                raw_deps.len(),
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        })?;
        let enqueued = enqueue(stream);
        let mut leaves = Vec::new();
        let info = if enqueued.is_ok() { self.capture_leaves(stream, &mut leaves) } else { Ok(()) };
        let mut captured = ptr::null_mut();
        // SAFETY: ends the capture begun above (also after a failed enqueue, so
        // the stream never stays in capture mode).
        let end = check("cuStreamEndCapture", unsafe {
            sys::cuStreamEndCapture(stream.cu_stream(), &mut captured)
        });
        enqueued?;
        info?;
        end?;
        Ok(leaves)
    }

    fn capture_leaves(&self, stream: &CudaStream, out: &mut Vec<Node>) -> Result<(), GpuError> {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut deps: *const sys::CUgraphNode = ptr::null();
        let mut n = 0usize;
        // SAFETY: the stream is capturing; the out-pointers are valid and the
        // returned array lives until the next capture call on this stream.
        check("cuStreamGetCaptureInfo", unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                stream.cu_stream(),
                &mut status,
                ptr::null_mut(),
                ptr::null_mut(),
                &mut deps,
                ptr::null_mut(),
                &mut n,
            )
        })?;
        if n > 0 && !deps.is_null() {
            // SAFETY: the driver returned `n` valid node handles at `deps`.
            out.extend(unsafe { std::slice::from_raw_parts(deps, n) }.iter().map(|&d| Node(d)));
        }
        Ok(())
    }
}

/// An instantiated graph, destroyed on drop.
pub struct GraphExec {
    /// Invariant: a live executable graph handle.
    raw: sys::CUgraphExec,
}

// SAFETY: executable graphs may be launched and destroyed from any thread.
unsafe impl Send for GraphExec {}

impl GraphExec {
    /// Launches the graph on `stream`.
    pub fn launch(&self, stream: &CudaStream) -> Result<(), GpuError> {
        // SAFETY: live exec and stream.
        check("cuGraphLaunch", unsafe { sys::cuGraphLaunch(self.raw, stream.cu_stream()) })
    }

    /// Updates this executable graph in place from `graph` (`cuGraphExecUpdate`):
    /// `Ok(None)` when it took the new node parameters, `Ok(Some(why))` when
    /// the driver refused (a changed topology, node kind or kernel property)
    /// and left the executable graph as it was. Must not run while the
    /// graph executes.
    pub fn update(&mut self, graph: &Graph) -> Result<Option<String>, GpuError> {
        let mut info = sys::CUgraphExecUpdateResultInfo {
            result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
            errorNode: ptr::null_mut(),
            errorFromNode: ptr::null_mut(),
        };
        // SAFETY: live exec (owned, `&mut`: not launched concurrently through
        // this handle) and live graph; valid out-pointer.
        let code = unsafe { sys::cuGraphExecUpdate_v2(self.raw, graph.raw, &mut info) };
        match (code, info.result) {
            (sys::CUresult::CUDA_SUCCESS, sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS) => {
                Ok(None)
            }
            (sys::CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, why) => Ok(Some(format!("{why:?}"))),
            (code, _) => Err(GpuError::driver("cuGraphExecUpdate", code)),
        }
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        // SAFETY: we own the handle; destroyed once.
        let r = unsafe { sys::cuGraphExecDestroy(self.raw) };
        if r != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!("cuGraphExecDestroy failed: {r:?}");
        }
    }
}

/// The name a loaded kernel was compiled with (`cuFuncGetName`), `None`
/// when the driver cannot say.
///
/// # Safety
/// `f` is a function handle of a module that is still loaded (for example
/// the function of a kernel node of a live graph).
pub unsafe fn function_name(f: sys::CUfunction) -> Option<String> {
    let mut name: *const std::ffi::c_char = ptr::null();
    // SAFETY: `f` is a loaded function handle (the caller's contract); the driver
    // stores a pointer to a NUL-terminated string it owns in `name`.
    let status = unsafe { sys::cuFuncGetName(&mut name, f) };
    if status != sys::CUresult::CUDA_SUCCESS || name.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per cuFuncGetName's contract; copied at once.
    Some(unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned())
}

/// Non-blocking check of a stream: `Ok(true)` when all work finished,
/// `Ok(false)` while running, the error when the work failed.
pub fn stream_done(stream: &CudaStream) -> Result<bool, GpuError> {
    // SAFETY: live stream.
    let r = unsafe { sys::cuStreamQuery(stream.cu_stream()) };
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        other => Err(GpuError::driver("cuStreamQuery", other)),
    }
}

/// Blocks until `stream` is idle, reporting a failure of its work.
pub fn stream_sync(stream: &CudaStream) -> Result<(), GpuError> {
    // SAFETY: live stream.
    check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(stream.cu_stream()) })
}
