//! Errors of fragment composition, planning and enqueueing, each naming the
//! operators and ports involved and saying how to fix the problem.

use cudarc::driver::DriverError;
use thiserror::Error;

use crate::ops::ChainError;

/// Everything that can go wrong while building, planning or enqueueing a fragment.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FragmentError {
    /// A fragment without operators was planned; add at least one with `add_operator`.
    #[error("fragment \"{fragment}\" has no operators: add at least one with add_operator")]
    Empty {
        /// The fragment's name.
        fragment: String,
    },
    /// An operator returned an empty name; give every operator a unique, non-empty one.
    #[error("an operator name is empty: give every operator a unique, non-empty name")]
    EmptyOperatorName,
    /// Two operators of a fragment share a name; make names unique.
    #[error("operator \"{name}\" is already in fragment \"{fragment}\": operator names must be unique")]
    DuplicateOperator {
        /// The fragment's name.
        fragment: String,
        /// The operator's name.
        name: String,
    },
    /// An operator declared a port wrongly in `setup` (the problem says how).
    #[error("operator \"{operator}\", port \"{port}\": {problem}")]
    PortDeclaration {
        /// The operator's name.
        operator: String,
        /// The port's name.
        port: String,
        /// What is wrong.
        problem: String,
    },
    /// An operator id from another fragment was used; use the id this fragment's `add_operator` returned.
    #[error(
        "operator id {id} does not belong to fragment \"{fragment}\": use the id that this \
         fragment's add_operator returned"
    )]
    UnknownOperatorId {
        /// The fragment's name.
        fragment: String,
        /// The id given.
        id: usize,
    },
    /// A flow or lookup names a port the operator did not declare; use a declared name or declare it in `setup`.
    #[error(
        "operator \"{operator}\" has no {direction} port \"{port}\" (its {direction} ports: {available}): \
         use one of those names or declare the port in setup"
    )]
    UnknownPort {
        /// The operator's name.
        operator: String,
        /// The port's name.
        port: String,
        /// `input` or `output`.
        direction: &'static str,
        /// The ports it has.
        available: String,
    },
    /// A port is in two flows; a port takes part in one flow only.
    #[error(
        "port \"{operator}.{port}\" is already connected to \"{other}\": a port takes part in one \
         flow only"
    )]
    PortAlreadyConnected {
        /// The operator's name.
        operator: String,
        /// The port's name.
        port: String,
        /// The port it is connected to.
        other: String,
    },
    /// The flows form a cycle; remove the flow that leads back (a fragment is a linear chain).
    #[error(
        "flows form a cycle through {operators}: a fragment must be a linear chain, remove the flow \
         that leads back"
    )]
    Cycle {
        /// The operators involved.
        operators: String,
    },
    /// An operator feeds several others; a fragment is a linear chain.
    #[error(
        "operator \"{operator}\" sends to several operators ({targets}): a fragment must be a linear \
         chain, so each operator feeds at most one other"
    )]
    FanOut {
        /// The operator's name.
        operator: String,
        /// The operators it feeds.
        targets: String,
    },
    /// An operator is fed by several others; a fragment is a linear chain.
    #[error(
        "operator \"{operator}\" receives from several operators ({sources}): a fragment must be a \
         linear chain, so each operator is fed by at most one other"
    )]
    FanIn {
        /// The operator's name.
        operator: String,
        /// The operators that feed it.
        sources: String,
    },
    /// Operators are not connected to the rest; connect them with `add_flow` or move them to their own fragment.
    #[error(
        "operators {operators} are not connected to the rest of fragment \"{fragment}\": connect \
         them with add_flow or put them in their own fragment"
    )]
    Disconnected {
        /// The fragment's name.
        fragment: String,
        /// The operators involved.
        operators: String,
    },
    /// The two ports of a flow declare different sizes; declare the same on both.
    #[error(
        "flow {from}.{from_port} -> {to}.{to_port}: sizes differ ({from_bytes} bytes vs {to_bytes} \
         bytes); declare the same size on both ports"
    )]
    SizeMismatch {
        /// The sending operator.
        from: String,
        /// Its port.
        from_port: String,
        /// The size it declares.
        from_bytes: usize,
        /// The receiving operator.
        to: String,
        /// Its port.
        to_port: String,
        /// The size it declares.
        to_bytes: usize,
    },
    /// Neither port of a flow declares memory; declare a size or a device pointer on one side.
    #[error(
        "flow {from}.{from_port} -> {to}.{to_port}: neither port declares memory; declare a size \
         or a device pointer on at least one side in setup"
    )]
    NoMemory {
        /// The sending operator.
        from: String,
        /// Its port.
        from_port: String,
        /// The receiving operator.
        to: String,
        /// Its port.
        to_port: String,
    },
    /// A port with no flow declares no memory; connect it or declare a size.
    #[error(
        "port \"{operator}.{port}\" is not connected and declares no memory: connect it with \
         add_flow or declare a size in setup"
    )]
    UnconnectedPortWithoutMemory {
        /// The operator's name.
        operator: String,
        /// The port's name.
        port: String,
    },
    /// A second data-ready handler was registered; register one.
    #[error("fragment \"{fragment}\" already has a data-ready handler; register only one")]
    HandlerAlreadyRegistered {
        /// The fragment's name.
        fragment: String,
    },
    /// A handler fragment registered a handler of its own; handlers do not nest.
    #[error(
        "fragment \"{handler}\" has a data-ready handler of its own; a handler fragment cannot \
         register another"
    )]
    NestedHandler {
        /// The handler fragment's name.
        handler: String,
    },
    /// A plan made before the fragment changed was used; plan the fragment again.
    #[error(
        "the plan does not belong to fragment \"{fragment}\" ({problem}): plan the fragment again \
         after changing it"
    )]
    PlanMismatch {
        /// The fragment's name.
        fragment: String,
        /// What is wrong.
        problem: String,
    },
    /// An operator asked for a kernel that is not loaded; add its `.cu` file to `kernels/`.
    #[error(
        "operator \"{operator}\" asked for kernel \"{kernel}\", which is not loaded: add its .cu file to kernels/"
    )]
    MissingKernel {
        /// The operator's name.
        operator: String,
        /// The kernel's name.
        kernel: String,
    },
    /// A CUDA call of an operator's `compute` failed; the source keeps the
    /// driver's code (check the launch configuration and the GPU).
    #[error("operator \"{operator}\" failed to enqueue its work ({what}): {source}")]
    Enqueue {
        /// The operator's name.
        operator: String,
        /// The call that failed.
        what: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// An operator reported a problem of its own (the text says what to change).
    #[error("operator \"{operator}\": {problem}")]
    Operator {
        /// The operator's name.
        operator: String,
        /// What is wrong.
        problem: String,
    },
    /// The built-in operator chain is not valid; each error names the `[[chain]]` entry.
    #[error("the operator chain is not valid: {}", join_chain_errors(.0))]
    InvalidChain(Vec<ChainError>),
}

fn join_chain_errors(errs: &[ChainError]) -> String {
    errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}
