//! Errors of fragment composition, planning and enqueueing, each naming the
//! operators and ports involved and saying how to fix the problem.

use cudarc::driver::DriverError;
use thiserror::Error;

use crate::ops::ChainError;

/// Everything that can go wrong while building, planning or enqueueing a fragment.
#[derive(Debug, Error)]
pub enum FragmentError {
    #[error("fragment \"{fragment}\" has no operators: add at least one with add_operator")]
    Empty { fragment: String },
    #[error("an operator name is empty: give every operator a unique, non-empty name")]
    EmptyOperatorName,
    #[error("operator \"{name}\" is already in fragment \"{fragment}\": operator names must be unique")]
    DuplicateOperator { fragment: String, name: String },
    #[error("operator \"{operator}\", port \"{port}\": {problem}")]
    PortDeclaration { operator: String, port: String, problem: String },
    #[error(
        "operator id {id} does not belong to fragment \"{fragment}\": use the id that this \
         fragment's add_operator returned"
    )]
    UnknownOperatorId { fragment: String, id: usize },
    #[error(
        "operator \"{operator}\" has no {direction} port \"{port}\" (its {direction} ports: {available}): \
         use one of those names or declare the port in setup"
    )]
    UnknownPort { operator: String, port: String, direction: &'static str, available: String },
    #[error(
        "port \"{operator}.{port}\" is already connected to \"{other}\": a port takes part in one \
         flow only"
    )]
    PortAlreadyConnected { operator: String, port: String, other: String },
    #[error(
        "flows form a cycle through {operators}: a fragment must be a linear chain, remove the flow \
         that leads back"
    )]
    Cycle { operators: String },
    #[error(
        "operator \"{operator}\" sends to several operators ({targets}): a fragment must be a linear \
         chain, so each operator feeds at most one other"
    )]
    FanOut { operator: String, targets: String },
    #[error(
        "operator \"{operator}\" receives from several operators ({sources}): a fragment must be a \
         linear chain, so each operator is fed by at most one other"
    )]
    FanIn { operator: String, sources: String },
    #[error(
        "operators {operators} are not connected to the rest of fragment \"{fragment}\": connect \
         them with add_flow or put them in their own fragment"
    )]
    Disconnected { fragment: String, operators: String },
    #[error(
        "flow {from}.{from_port} -> {to}.{to_port}: sizes differ ({from_bytes} bytes vs {to_bytes} \
         bytes); declare the same size on both ports"
    )]
    SizeMismatch {
        from: String,
        from_port: String,
        from_bytes: usize,
        to: String,
        to_port: String,
        to_bytes: usize,
    },
    #[error(
        "flow {from}.{from_port} -> {to}.{to_port}: neither port declares memory; declare a size \
         or a device pointer on at least one side in setup"
    )]
    NoMemory { from: String, from_port: String, to: String, to_port: String },
    #[error(
        "port \"{operator}.{port}\" is not connected and declares no memory: connect it with \
         add_flow or declare a size in setup"
    )]
    UnconnectedPortWithoutMemory { operator: String, port: String },
    #[error("fragment \"{fragment}\" already has a data-ready handler; register only one")]
    HandlerAlreadyRegistered { fragment: String },
    #[error(
        "fragment \"{handler}\" has a data-ready handler of its own; a handler fragment cannot \
         register another"
    )]
    NestedHandler { handler: String },
    #[error(
        "the plan does not belong to fragment \"{fragment}\" ({problem}): plan the fragment again \
         after changing it"
    )]
    PlanMismatch { fragment: String, problem: String },
    #[error(
        "operator \"{operator}\" asked for kernel \"{kernel}\", which is not loaded: add its .cu file to kernels/"
    )]
    MissingKernel { operator: String, kernel: String },
    #[error("operator \"{operator}\" failed to enqueue its work ({what}): {source}")]
    Enqueue {
        operator: String,
        what: &'static str,
        #[source]
        source: DriverError,
    },
    #[error("operator \"{operator}\": {problem}")]
    Operator { operator: String, problem: String },
    #[error("the operator chain is not valid: {}", join_chain_errors(.0))]
    InvalidChain(Vec<ChainError>),
}

fn join_chain_errors(errs: &[ChainError]) -> String {
    errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}
