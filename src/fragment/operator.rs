//! The GPU-resident operator: its port declarations (`setup`) and the context
//! its `compute` enqueues work with.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream};

use super::FragmentError;

/// A device address (`CUdeviceptr`).
pub type DevicePtr = u64;

/// A range of device memory: its address and its length in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRegion {
    /// Its device address.
    pub dptr: DevicePtr,
    /// Its length in bytes.
    pub bytes: usize,
}

/// Whether a port is read or written by its operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortDirection {
    /// The operator reads it.
    Input,
    /// The operator writes it.
    Output,
}

impl PortDirection {
    /// `"input"` or `"output"`, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            PortDirection::Input => "input",
            PortDirection::Output => "output",
        }
    }
}

/// What memory a port brings to its connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortMemory {
    /// Nothing: the port takes whatever the other side of its flow provides.
    Unspecified,
    /// The executor allocates (or shares) a buffer of this many bytes.
    Size(usize),
    /// Device memory the operator owns and keeps alive while the fragment runs.
    Pointer(DeviceRegion),
    /// Output only: the same memory as the named input port of the same
    /// operator (samples pass through unchanged). Counts, at its connection,
    /// as whatever kind of memory that input was bound to.
    SameAsInput(String),
}

/// One declared port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// The port's name, unique per direction.
    pub name: String,
    /// Read or written.
    pub direction: PortDirection,
    /// The memory it declares.
    pub memory: PortMemory,
}

/// The ports an operator declares in [`GpuResidentOperator::setup`].
/// Declaration mistakes are collected and reported by `Fragment::add_operator`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorSpec {
    ports: Vec<PortSpec>,
    problems: Vec<(String, String)>,
}

impl OperatorSpec {
    /// Declares an input port.
    pub fn input(&mut self, name: &str, memory: PortMemory) -> &mut Self {
        self.declare(name, PortDirection::Input, memory)
    }

    /// Declares an output port.
    pub fn output(&mut self, name: &str, memory: PortMemory) -> &mut Self {
        self.declare(name, PortDirection::Output, memory)
    }

    /// The ports declared, in order.
    pub fn ports(&self) -> &[PortSpec] {
        &self.ports
    }

    /// The port `name` of `direction`, if declared.
    pub fn port(&self, name: &str, direction: PortDirection) -> Option<&PortSpec> {
        self.ports.iter().find(|p| p.name == name && p.direction == direction)
    }

    /// Names of the ports of one direction, for error messages.
    pub fn port_names(&self, direction: PortDirection) -> String {
        let names: Vec<&str> =
            self.ports.iter().filter(|p| p.direction == direction).map(|p| p.name.as_str()).collect();
        if names.is_empty() { "none".to_owned() } else { names.join(", ") }
    }

    fn declare(&mut self, name: &str, direction: PortDirection, memory: PortMemory) -> &mut Self {
        let problem = if name.is_empty() {
            Some("port names must not be empty".to_owned())
        } else if self.ports.iter().any(|p| p.name == name) {
            Some("declared twice; give each port of an operator its own name".to_owned())
        } else {
            match &memory {
                PortMemory::Size(0) => Some("size is 0 bytes; declare at least 1 byte".to_owned()),
                PortMemory::Pointer(r) if r.dptr == 0 => {
                    Some("device pointer is null; pass the address of memory the operator owns".to_owned())
                }
                PortMemory::Pointer(r) if r.bytes == 0 => {
                    Some("pointer region is 0 bytes; give the size of the memory behind it".to_owned())
                }
                PortMemory::SameAsInput(_) if direction == PortDirection::Input => {
                    Some("an input cannot pass through another port; use SameAsInput on an output".to_owned())
                }
                _ => None,
            }
        };
        match problem {
            Some(p) => self.problems.push((name.to_owned(), p)),
            None => self.ports.push(PortSpec { name: name.to_owned(), direction, memory }),
        }
        self
    }

    /// Checks what can only be checked once setup is over (pass-through
    /// targets exist) and returns the first declaration problem.
    pub(crate) fn check(&self, operator: &str) -> Result<(), FragmentError> {
        if let Some((port, problem)) = self.problems.first() {
            return Err(FragmentError::PortDeclaration {
                operator: operator.to_owned(),
                port: port.clone(),
                problem: problem.clone(),
            });
        }
        for p in &self.ports {
            if let PortMemory::SameAsInput(input) = &p.memory
                && self.port(input, PortDirection::Input).is_none()
            {
                return Err(FragmentError::PortDeclaration {
                    operator: operator.to_owned(),
                    port: p.name.clone(),
                    problem: format!(
                        "passes through input \"{input}\", which is not declared (inputs: {})",
                        self.port_names(PortDirection::Input)
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Loaded kernels by name. The GPU kernel library implements it; tests can
/// use a plain map.
pub trait KernelLookup {
    /// The kernel called `name`, if loaded.
    fn function(&self, name: &str) -> Option<&CudaFunction>;
}

impl KernelLookup for HashMap<String, CudaFunction> {
    fn function(&self, name: &str) -> Option<&CudaFunction> {
        self.get(name)
    }
}

/// The port name and the plan's buffer index it is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortBinding {
    /// The port's name.
    pub port: String,
    /// Read or written.
    pub direction: PortDirection,
    /// Index into [`crate::fragment::Plan::buffers`].
    pub buffer: usize,
}

/// A frame that streams into device memory while it arrives (sub-frame
/// streaming): where the loop keeps what it has pulled of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamedFrame {
    /// Device address of the pulls' state (`FlStreamState`, kernels/stream.cuh).
    pub state: DevicePtr,
    /// Device address of the staging buffer the pulls copy the frame into.
    pub staging: DevicePtr,
    /// 16-byte words the staging buffer holds.
    pub staging_words: u32,
}

/// Everything an operator's `compute` may use. The stream may be capturing
/// into a graph: enqueue kernels, memsets and copies only; no host
/// synchronisation, allocation or event record.
pub struct ComputeContext<'a> {
    pub(crate) operator: &'a str,
    pub(crate) stream: &'a Arc<CudaStream>,
    /// Invariant: every binding's buffer index is < `buffers.len()`.
    pub(crate) ports: &'a [PortBinding],
    pub(crate) buffers: &'a [DeviceRegion],
    pub(crate) frame_desc: DevicePtr,
    pub(crate) chain_result: DevicePtr,
    /// 0 when the target has no user result words.
    pub(crate) user_result: DevicePtr,
    /// 0 when the target keeps no copy of the slot header.
    pub(crate) slot_header: DevicePtr,
    pub(crate) kernels: &'a dyn KernelLookup,
    /// Device address of the loop parameters, offered to the chain's last
    /// operator so that its kernel can publish the frame's result itself.
    pub(crate) result_publisher: Option<DevicePtr>,
    /// Set when the operator took [`ComputeContext::take_result_publisher`].
    pub(crate) publisher_taken: bool,
    /// Where the loop stages a streaming frame, when frames stream.
    pub(crate) streamed: Option<StreamedFrame>,
    /// Whether the loop body is this operator's kernel alone, which then
    /// claims the frames itself ([`GpuResidentOperator::can_claim_frames`]).
    pub(crate) claims_frames: bool,
}

impl<'a> ComputeContext<'a> {
    /// Name of the operator being enqueued.
    pub fn operator(&self) -> &'a str {
        self.operator
    }

    /// The stream to enqueue on.
    pub fn stream(&self) -> &'a Arc<CudaStream> {
        self.stream
    }

    /// The memory bound to one of this operator's ports.
    pub fn port(&self, name: &str) -> Result<DeviceRegion, FragmentError> {
        let binding = self.ports.iter().find(|b| b.port == name).ok_or_else(|| FragmentError::Operator {
            operator: self.operator.to_owned(),
            problem: format!("compute asked for port \"{name}\", which setup did not declare"),
        })?;
        debug_assert!(binding.buffer < self.buffers.len());
        Ok(self.buffers[binding.buffer])
    }

    /// Where the loop stages the frame when frames stream into device memory
    /// (`loop.stream_to_gpu`); `None` otherwise.
    pub fn streamed_frame(&self) -> Option<StreamedFrame> {
        self.streamed
    }

    /// Whether this operator's kernel is the loop body alone and claims the
    /// frames itself: it then takes [`ComputeContext::take_result_publisher`]
    /// and, from one thread, polls and claims as the built-in handler does
    /// (`fl_poll`, `fl_claim_slot`, `fl_end_iteration` in `ring_ready.cuh`)
    /// before its work, and publishes the result after it. While frames
    /// stream ([`ComputeContext::streamed_frame`]) the loop has no pull node
    /// either: the kernel also pulls, as `fl_stream_pull` does, in the
    /// iterations that find no frame. Offered only to an operator that
    /// [`GpuResidentOperator::can_claim_frames`].
    pub fn claims_frames(&self) -> bool {
        self.claims_frames
    }

    /// Device address of this iteration's `FrameDesc` (see `ring::layout`).
    pub fn frame_desc(&self) -> DevicePtr {
        self.frame_desc
    }

    /// Device address of the `ChainResult` the reductions write.
    pub fn chain_result(&self) -> DevicePtr {
        self.chain_result
    }

    /// Device address of the frame's user result words (`fl_user_result`),
    /// or `None` outside a target that publishes them.
    pub fn user_result(&self) -> Option<DevicePtr> {
        (self.user_result != 0).then_some(self.user_result)
    }

    /// Device address of this frame's copy of the claimed slot's header
    /// (`SlotHeader` in `ring.cuh`, device memory: no read over the bus), or
    /// `None` outside a target that keeps one (the resident executor does).
    pub fn slot_header(&self) -> Option<DevicePtr> {
        (self.slot_header != 0).then_some(self.slot_header)
    }

    /// A loaded kernel.
    pub fn kernel(&self, name: &str) -> Result<&'a CudaFunction, FragmentError> {
        self.kernels.function(name).ok_or_else(|| FragmentError::MissingKernel {
            operator: self.operator.to_owned(),
            kernel: name.to_owned(),
        })
    }

    /// For the chain's last operator inside a resident executor: the device
    /// address of the loop parameters (`const LoopParams*` in `ring.cuh`).
    /// An operator that takes it must, from one thread after all its other
    /// work, call `fl_publish_result(*params)`; the executor then leaves out
    /// its end-marker node. `None` for every other operator and outside an
    /// executor. Operators that never take it keep the end marker.
    pub fn take_result_publisher(&mut self) -> Option<DevicePtr> {
        let p = self.result_publisher;
        self.publisher_taken |= p.is_some();
        p
    }

    /// Wraps a driver error of this operator's enqueue.
    pub fn enqueue_error(&self, what: &'static str, source: cudarc::driver::DriverError) -> FragmentError {
        FragmentError::Enqueue { operator: self.operator.to_owned(), what, source }
    }
}

/// An operator whose work runs entirely on the GPU, inside the resident graph.
pub trait GpuResidentOperator: Send {
    /// Unique name inside its fragment (used in logs, errors and stage names).
    fn name(&self) -> &str;

    /// Declares the device ports. Called once, by `Fragment::add_operator`.
    fn setup(&mut self, spec: &mut OperatorSpec);

    /// Enqueues this operator's work on `ctx.stream()`. Called when the
    /// executor captures the graph (and, for launch-per-frame modes, per frame).
    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError>;

    /// Whether this operator reads a streaming frame itself: the pulled part
    /// from [`ComputeContext::streamed_frame`]'s staging buffer and the rest
    /// from the slot, so that the loop need not copy the rest into the
    /// staging buffer first. Honoured only for an operator that is its
    /// fragment's only one; the default reads the frame where the
    /// `FrameDesc` points.
    fn reads_streamed_frames(&self) -> bool {
        false
    }

    /// Whether this operator's kernel can claim the frames itself and so be
    /// the resident loop's whole body, with no handler node before it and no
    /// IF body to launch for each frame (see [`ComputeContext::claims_frames`]).
    /// Honoured only for an operator that is its fragment's only one, with
    /// the built-in data-ready handler.
    fn can_claim_frames(&self) -> bool {
        false
    }
}
