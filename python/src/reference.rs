//! `frameloop.ReferenceChain` and `frameloop.sender_frame`: the CPU chain a
//! config describes and the payloads `frameloop send` generates, so a
//! consumer can check each output it reads against a CPU computation.

use frameloop::ops::CpuChain;
use frameloop::sender::Pattern;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::PathBuf;

/// The chain of a frameloop config run on the CPU (the host backend's
/// operators, which the GPU's results are checked against).
#[pyclass(module = "frameloop", name = "ReferenceChain")]
pub struct ReferenceChain {
    chain: CpuChain,
}

#[pymethods]
impl ReferenceChain {
    /// The `[[chain]]` of `config` (the path of a TOML file, or a dict
    /// with its keys, as `Appliance` takes), for frames of at most
    /// `max_frame_bytes` bytes (default: the config's `ring.slot_bytes`).
    #[new]
    #[pyo3(signature = (config, max_frame_bytes=None))]
    fn new(config: &Bound<'_, PyAny>, max_frame_bytes: Option<usize>) -> PyResult<Self> {
        let config_path = match config.extract::<PathBuf>() {
            Ok(p) => p,
            Err(_) => PathBuf::from("(dict)"),
        };
        let config = crate::config::read(Some(config), None, None)?.config;
        let max = max_frame_bytes.unwrap_or(config.ring.slot_bytes);
        let chain = CpuChain::new(&config.chain, max).map_err(|problems| {
            let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
            PyValueError::new_err(format!(
                "{}: the chain cannot run on the CPU: {}",
                config_path.display(),
                text.join("; ")
            ))
        })?;
        Ok(Self { chain })
    }

    /// The chain's final samples for one frame's payload, as little-endian
    /// `f32` bytes (`numpy.frombuffer(out, dtype=numpy.float32)`).
    fn run<'py>(&mut self, py: Python<'py>, payload: &[u8]) -> Bound<'py, PyBytes> {
        let out = self.chain.run(payload);
        let samples = self.chain.output(&out);
        let bytes: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
        PyBytes::new(py, &bytes)
    }
}

/// The payload `frameloop send --pattern PATTERN` sends as frame `seq` of
/// stream `stream` (`pattern`: "counter" or "random").
#[pyfunction]
#[pyo3(signature = (seq, frame_bytes, stream=0, pattern="counter"))]
pub fn sender_frame<'py>(
    py: Python<'py>,
    seq: u64,
    frame_bytes: usize,
    stream: u32,
    pattern: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    let pattern = match pattern {
        "counter" => Pattern::Counter,
        "random" => Pattern::Random,
        other => {
            return Err(PyValueError::new_err(format!(
                "pattern {other:?} is not one frameloop send generates; use \"counter\" or \"random\""
            )));
        }
    };
    Ok(PyBytes::new(py, &pattern.frame(stream, seq, frame_bytes)))
}
