//! The Python module `frameloop`: attach to a frameloop appliance's output
//! ring and read each output in place, its samples as a DLPack tensor
//! (`numpy.from_dlpack(frame)`, `torch.from_dlpack(frame)`) without a copy;
//! and check what it reads against the CPU chain (`ReferenceChain`).
//! See docs/python.md.

#![deny(unsafe_op_in_unsafe_fn)]

mod consumer;
mod dlpack;
mod frame;
mod reference;
mod slot;

use pyo3::create_exception;
use pyo3::exceptions::{PyConnectionError, PyRuntimeError};
use pyo3::prelude::*;

create_exception!(
    frameloop,
    AttachError,
    PyConnectionError,
    "Attaching to the appliance's output socket failed or was refused."
);
create_exception!(
    frameloop,
    FrameOverwritten,
    PyRuntimeError,
    "The appliance reused the frame's ring slot: its samples are another output's now."
);

/// The error raised for a frame whose slot the appliance reused.
fn overwritten(sequence: u64) -> PyErr {
    FrameOverwritten::new_err(format!(
        "output {sequence} was overwritten: the appliance reused its slot; read frames sooner, \
         raise output.slots, or take frame.copy() while frame.valid()"
    ))
}

/// `error` and each of its sources, joined.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let more = e.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = e.source();
    }
    text
}

#[pymodule]
fn frameloop(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<consumer::Consumer>()?;
    m.add_class::<frame::Frame>()?;
    m.add_class::<frame::Stats>()?;
    m.add_class::<reference::ReferenceChain>()?;
    m.add_class::<slot::Slot>()?;
    m.add_function(wrap_pyfunction!(reference::sender_frame, m)?)?;
    m.add("AttachError", m.py().get_type::<AttachError>())?;
    m.add("FrameOverwritten", m.py().get_type::<FrameOverwritten>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
