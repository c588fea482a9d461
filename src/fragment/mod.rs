//! GPU-resident fragments: operators that only enqueue device work, composed
//! into a linear chain whose ports the planner binds to buffers following the
//! port-connection rules (see [`plan`]), plus the data-ready handler fragment
//! that the executor runs at the start of every loop iteration.
//!
//! Planning needs no GPU; `Fragment::enqueue` runs each operator's `compute`
//! on a stream the executor may be capturing into a graph.

mod error;
mod graph;
mod operator;
pub mod plan;

pub use error::FragmentError;
pub use graph::{EnqueueTarget, Flow, Fragment, OperatorId};
pub use operator::{
    ComputeContext, DevicePtr, DeviceRegion, GpuResidentOperator, KernelLookup, OperatorSpec, PortBinding,
    PortDirection, PortMemory, PortSpec, StreamedFrame,
};
pub use plan::{BufferSource, Diagnostic, Plan, PlannedBuffer, Severity};

#[cfg(test)]
mod tests;
