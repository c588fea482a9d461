//! The Python module `frameloop`: start, feed, tune, watch and stop an
//! appliance in the calling process (`Appliance`, `Sender`, `replay`), or
//! attach to one running elsewhere (`Consumer`); read each output in place,
//! its samples as a DLPack tensor (`numpy.from_dlpack(frame)`,
//! `torch.from_dlpack(frame)`) without a copy; and check what it reads
//! against the CPU chain (`ReferenceChain`). A thin layer over the
//! library's facade (`frameloop::app`): see docs/python.md.

#![deny(unsafe_op_in_unsafe_fn)]

mod appliance;
mod config;
mod consumer;
mod dlpack;
mod frame;
mod histogram;
mod record;
mod reference;
mod sender;
mod slot;

use pyo3::create_exception;
use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyValueError};
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

create_exception!(
    frameloop,
    ConfigError,
    PyValueError,
    "A config with problems: `problems` lists (key, message) of every one, `keys` their keys."
);
create_exception!(
    frameloop,
    CompileError,
    ConfigError,
    "A user kernel NVRTC refused: `lines` lists (key, file, line, message) of every error, `line` the first's line."
);
create_exception!(
    frameloop,
    ApplianceError,
    PyRuntimeError,
    "The appliance could not start or run (the message says what to change)."
);
create_exception!(
    frameloop,
    ReloadRefused,
    PyRuntimeError,
    "A reload changed nothing: `reasons` lists why (keys that need a restart, or what the backend refused)."
);

/// The Python exception for a library error: `ConfigError` (with every
/// problem) for a config, else `ApplianceError` with the error and its sources.
pub fn app_error(error: &::frameloop::app::AppError) -> PyErr {
    match error {
        ::frameloop::app::AppError::Config(::frameloop::config::ConfigError::Invalid(p)) => {
            config::config_error(p.clone())
        }
        other => ApplianceError::new_err(error_chain(other)),
    }
}

/// A JSON value (a report, stats) as Python objects.
pub fn json_to_python<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use pyo3::IntoPyObjectExt;
    use serde_json::Value;
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_bound_py_any(py)?,
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_bound_py_any(py)?,
            (None, Some(i)) => i.into_bound_py_any(py)?,
            _ => n.as_f64().unwrap_or(f64::NAN).into_bound_py_any(py)?,
        },
        Value::String(s) => s.into_bound_py_any(py)?,
        Value::Array(items) => {
            let list = pyo3::types::PyList::empty(py);
            for item in items {
                list.append(json_to_python(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = pyo3::types::PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, json_to_python(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

/// The library's log to stderr, filtered by `FRAMELOOP_LOG` or `RUST_LOG`
/// (warnings and errors without either), set up once per process.
pub fn init_logging() {
    use tracing_subscriber::EnvFilter;
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = std::env::var("FRAMELOOP_LOG")
            .ok()
            .and_then(|v| EnvFilter::try_new(v).ok())
            .or_else(|| EnvFilter::try_from_default_env().ok())
            .unwrap_or_else(|| EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    });
}

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
    m.add_class::<appliance::Appliance>()?;
    m.add_class::<appliance::Results>()?;
    m.add_class::<histogram::Histogram>()?;
    m.add_class::<record::ResultRecord>()?;
    m.add_class::<sender::Sender>()?;
    m.add_function(wrap_pyfunction!(sender::replay, m)?)?;
    m.add("ConfigError", m.py().get_type::<ConfigError>())?;
    m.add("CompileError", m.py().get_type::<CompileError>())?;
    m.add("ApplianceError", m.py().get_type::<ApplianceError>())?;
    m.add("ReloadRefused", m.py().get_type::<ReloadRefused>())?;
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
