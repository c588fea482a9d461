//! A fragment: GPU-resident operators composed with flows into a linear
//! chain, optionally with a data-ready handler fragment.

use std::sync::Arc;

use cudarc::driver::CudaStream;

use super::FragmentError;
use super::operator::{ComputeContext, DevicePtr, DeviceRegion, GpuResidentOperator, KernelLookup};
use super::operator::{OperatorSpec, PortDirection, StreamedFrame};
use super::plan::Plan;

/// Index of an operator in the fragment that returned it from `add_operator`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperatorId(pub(crate) usize);

impl OperatorId {
    /// The operator's position in its fragment, from 0.
    pub fn index(self) -> usize {
        self.0
    }
}

/// One connection: an output port of `from` feeds an input port of `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    /// The sending operator.
    pub from: OperatorId,
    /// Its output port.
    pub from_port: String,
    /// The receiving operator.
    pub to: OperatorId,
    /// Its input port.
    pub to_port: String,
}

pub(crate) struct OperatorEntry {
    pub(crate) name: String,
    pub(crate) spec: OperatorSpec,
    pub(crate) op: Box<dyn GpuResidentOperator>,
}

/// Where an enqueue puts its work and what the kernels see.
pub struct EnqueueTarget<'a> {
    /// The stream the work is enqueued (captured) on.
    pub stream: &'a Arc<CudaStream>,
    /// Device address of the `FrameDesc` every kernel reads.
    pub frame_desc: DevicePtr,
    /// Device address of the `ChainResult` the reductions write.
    pub chain_result: DevicePtr,
    /// Device address of the frame's user result words (`fl_user_result`:
    /// 48 bytes of words, then the actuation request) that user kernels write and the result record carries;
    /// 0 where there are none (a chain with a user kernel then refuses to enqueue).
    pub user_result: DevicePtr,
    /// Device address of a copy of the claimed slot's header (`SlotHeader`,
    /// device memory, filled when the frame is claimed), 0 where there is none.
    pub slot_header: DevicePtr,
    /// The loaded kernels, by name.
    pub kernels: &'a dyn KernelLookup,
    /// Where the loop stages a streaming frame, when frames stream.
    pub streamed: Option<StreamedFrame>,
    /// Whether the fragment's only operator is the loop body alone and
    /// claims the frames itself ([`Fragment::can_claim_frames`]).
    pub claims_frames: bool,
}

/// A linear chain of GPU-resident operators.
pub struct Fragment {
    name: String,
    pub(crate) operators: Vec<OperatorEntry>,
    pub(crate) flows: Vec<Flow>,
    handler: Option<Box<Fragment>>,
}

impl std::fmt::Debug for Fragment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fragment")
            .field("name", &self.name)
            .field("operators", &self.operators.iter().map(|e| &e.name).collect::<Vec<_>>())
            .field("flows", &self.flows)
            .field("handler", &self.handler)
            .finish()
    }
}

impl Fragment {
    /// An empty fragment called `name`.
    pub fn new(name: &str) -> Self {
        Self { name: name.to_owned(), operators: Vec::new(), flows: Vec::new(), handler: None }
    }

    /// The fragment's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many operators it holds.
    pub fn len(&self) -> usize {
        self.operators.len()
    }

    /// Whether it holds no operator.
    pub fn is_empty(&self) -> bool {
        self.operators.is_empty()
    }

    /// Whether the fragment reads a streaming frame itself: its only
    /// operator says so ([`GpuResidentOperator::reads_streamed_frames`]).
    pub fn reads_streamed_frames(&self) -> bool {
        matches!(self.operators.as_slice(), [only] if only.op.reads_streamed_frames())
    }

    /// Whether the fragment can be the resident loop's whole body, claiming
    /// the frames itself: its only operator says so
    /// ([`GpuResidentOperator::can_claim_frames`]).
    pub fn can_claim_frames(&self) -> bool {
        matches!(self.operators.as_slice(), [only] if only.op.can_claim_frames())
    }

    /// Its flows, in the order added.
    pub fn flows(&self) -> &[Flow] {
        &self.flows
    }

    /// Adds an operator, running its `setup` to learn its ports.
    pub fn add_operator(
        &mut self,
        mut op: impl GpuResidentOperator + 'static,
    ) -> Result<OperatorId, FragmentError> {
        let name = op.name().to_owned();
        if name.is_empty() {
            return Err(FragmentError::EmptyOperatorName);
        }
        if self.operators.iter().any(|e| e.name == name) {
            return Err(FragmentError::DuplicateOperator { fragment: self.name.clone(), name });
        }
        let mut spec = OperatorSpec::default();
        op.setup(&mut spec);
        spec.check(&name)?;
        self.operators.push(OperatorEntry { name, spec, op: Box::new(op) });
        Ok(OperatorId(self.operators.len() - 1))
    }

    /// The name of operator `id`, if it is one of this fragment's.
    pub fn operator_name(&self, id: OperatorId) -> Option<&str> {
        self.operators.get(id.0).map(|e| e.name.as_str())
    }

    /// What the operator declared in `setup`.
    pub fn operator_spec(&self, id: OperatorId) -> Option<&OperatorSpec> {
        self.operators.get(id.0).map(|e| &e.spec)
    }

    /// Connects `from.from_port` (an output) to `to.to_port` (an input).
    /// Topology (chain shape) is checked by [`Fragment::plan`].
    pub fn add_flow(
        &mut self,
        from: OperatorId,
        from_port: &str,
        to: OperatorId,
        to_port: &str,
    ) -> Result<(), FragmentError> {
        self.check_port(from, from_port, PortDirection::Output)?;
        self.check_port(to, to_port, PortDirection::Input)?;
        for f in &self.flows {
            let (taken, other) = if f.from == from && f.from_port == from_port {
                (Some((from, from_port)), (f.to, f.to_port.as_str()))
            } else if f.to == to && f.to_port == to_port {
                (Some((to, to_port)), (f.from, f.from_port.as_str()))
            } else {
                (None, (from, ""))
            };
            if let Some((op, port)) = taken {
                return Err(FragmentError::PortAlreadyConnected {
                    operator: self.operators[op.0].name.clone(),
                    port: port.to_owned(),
                    other: format!("{}.{}", self.operators[other.0.0].name, other.1),
                });
            }
        }
        self.flows.push(Flow { from, from_port: from_port.to_owned(), to, to_port: to_port.to_owned() });
        Ok(())
    }

    /// Registers the fragment whose operators detect a new frame; it runs at
    /// the start of every iteration of the resident loop.
    pub fn register_data_ready_handler(&mut self, handler: Fragment) -> Result<(), FragmentError> {
        if self.handler.is_some() {
            return Err(FragmentError::HandlerAlreadyRegistered { fragment: self.name.clone() });
        }
        if handler.handler.is_some() {
            return Err(FragmentError::NestedHandler { handler: handler.name.clone() });
        }
        self.handler = Some(Box::new(handler));
        Ok(())
    }

    /// The data-ready handler fragment, if one was registered.
    pub fn data_ready_handler(&self) -> Option<&Fragment> {
        self.handler.as_deref()
    }

    /// As [`Fragment::data_ready_handler`], to change it.
    pub fn data_ready_handler_mut(&mut self) -> Option<&mut Fragment> {
        self.handler.as_deref_mut()
    }

    /// Plans this fragment (not its handler): execution order, one buffer
    /// per connection, warnings. See [`Plan`].
    pub fn plan(&self) -> Result<Plan, FragmentError> {
        super::plan::plan(self)
    }

    /// Enqueues every operator's `compute` in plan order on `target.stream`.
    /// `buffers[i]` is the memory of `plan.buffers()[i]` (see [`Plan::bind_buffers`]).
    pub fn enqueue(
        &mut self,
        plan: &Plan,
        buffers: &[DeviceRegion],
        target: &EnqueueTarget<'_>,
    ) -> Result<(), FragmentError> {
        for &id in plan.order() {
            self.enqueue_operator(plan, id, buffers, target)?;
        }
        Ok(())
    }

    /// As [`Fragment::enqueue`], offering the last operator the loop
    /// parameters at `publisher` (see `ComputeContext::take_result_publisher`).
    /// Returns whether it took them, i.e. whether its kernel publishes the
    /// frame's result (otherwise the caller enqueues an end marker).
    pub fn enqueue_publishing(
        &mut self,
        plan: &Plan,
        buffers: &[DeviceRegion],
        target: &EnqueueTarget<'_>,
        publisher: DevicePtr,
    ) -> Result<bool, FragmentError> {
        let Some((&last, rest)) = plan.order().split_last() else { return Ok(false) };
        for &id in rest {
            self.enqueue_operator(plan, id, buffers, target)?;
        }
        self.enqueue_operator_with(plan, last, buffers, target, Some(publisher))
    }

    /// Enqueues one operator's `compute` (for executors that put their own
    /// work, such as stage markers, between operators). Call it for every
    /// operator of `plan.order()`, in that order.
    pub fn enqueue_operator(
        &mut self,
        plan: &Plan,
        id: OperatorId,
        buffers: &[DeviceRegion],
        target: &EnqueueTarget<'_>,
    ) -> Result<(), FragmentError> {
        self.enqueue_operator_with(plan, id, buffers, target, None).map(|_| ())
    }

    /// Enqueues one operator, offering it `publisher`; returns whether it took it.
    pub fn enqueue_operator_with(
        &mut self,
        plan: &Plan,
        id: OperatorId,
        buffers: &[DeviceRegion],
        target: &EnqueueTarget<'_>,
        publisher: Option<DevicePtr>,
    ) -> Result<bool, FragmentError> {
        plan.check_belongs_to(self)?;
        if buffers.len() != plan.buffers().len() {
            return Err(FragmentError::PlanMismatch {
                fragment: self.name.clone(),
                problem: format!("{} buffers bound, the plan has {}", buffers.len(), plan.buffers().len()),
            });
        }
        let entry = self
            .operators
            .get_mut(id.0)
            .ok_or(FragmentError::UnknownOperatorId { fragment: self.name.clone(), id: id.0 })?;
        let mut ctx = ComputeContext {
            operator: &entry.name,
            stream: target.stream,
            ports: plan.bindings(id),
            buffers,
            frame_desc: target.frame_desc,
            chain_result: target.chain_result,
            user_result: target.user_result,
            slot_header: target.slot_header,
            kernels: target.kernels,
            result_publisher: publisher,
            publisher_taken: false,
            streamed: target.streamed,
            claims_frames: target.claims_frames,
        };
        entry.op.compute(&mut ctx)?;
        Ok(ctx.publisher_taken)
    }

    fn check_port(&self, id: OperatorId, port: &str, direction: PortDirection) -> Result<(), FragmentError> {
        let entry = self
            .operators
            .get(id.0)
            .ok_or(FragmentError::UnknownOperatorId { fragment: self.name.clone(), id: id.0 })?;
        match entry.spec.port(port, direction) {
            Some(_) => Ok(()),
            None => Err(FragmentError::UnknownPort {
                operator: entry.name.clone(),
                port: port.to_owned(),
                direction: direction.as_str(),
                available: entry.spec.port_names(direction),
            }),
        }
    }
}
