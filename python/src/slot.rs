//! `frameloop.Slot`: one slot of the output ring as a DLPack-exportable
//! view of all its samples, made once and reused for every output that slot
//! holds (`Consumer.slot_views()`, `Frame.slot`), so a consumer that keeps a
//! tensor per slot pays no export per output.

use crate::consumer::SharedConsumer;
use crate::dlpack::{DEVICE_CPU, DEVICE_CUDA, TensorSpec};
use frameloop::output::SlotSamples;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use std::sync::Arc;

/// One ring slot's samples (`capacity` float32), in place. What they are is
/// known only through a `Frame` of that slot: use its first `len(frame)`
/// samples, then check `frame.valid()`.
#[pyclass(module = "frameloop", name = "Slot", frozen)]
pub struct Slot {
    index: usize,
    address: u64,
    len: usize,
    device: (i32, i32),
    consumer: SharedConsumer,
}

impl Slot {
    pub fn new(index: usize, samples: SlotSamples, consumer: &SharedConsumer) -> Self {
        let (address, len, device) = match samples {
            SlotSamples::Host { address, len } => (address, len, (DEVICE_CPU, 0)),
            SlotSamples::Device(d) => (d.dptr, d.len, (DEVICE_CUDA, d.device_ordinal)),
        };
        Self { index, address, len, device, consumer: Arc::clone(consumer) }
    }
}

#[pymethods]
impl Slot {
    /// The slot's index (what `Frame.slot` names).
    #[getter]
    fn index(&self) -> usize {
        self.index
    }

    /// Address of the slot's first sample (host, or device in this process).
    #[getter]
    fn data_ptr(&self) -> u64 {
        self.address
    }

    /// Samples the slot holds at most.
    fn __len__(&self) -> usize {
        self.len
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        self.device
    }

    /// A DLPack capsule over all the slot's samples (read-only), keeping the
    /// ring mapped while it lives. `stream` needs no synchronisation.
    #[pyo3(signature = (stream=None, *, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = stream;
        if dl_device.is_some_and(|wanted| wanted != self.device) || copy == Some(true) {
            return Err(PyBufferError::new_err(
                "a slot exports in place on its own device only; take a frame's copy() for a host copy",
            ));
        }
        let spec = TensorSpec {
            data: self.address,
            len: self.len,
            device: self.device,
            owner: Arc::clone(&self.consumer) as _,
            read_only: true,
            copied: false,
        };
        match max_version {
            Some((major, _)) if major >= 1 => spec.into_versioned_capsule(py),
            _ => spec.into_legacy_capsule(py),
        }
    }

    fn __repr__(&self) -> String {
        format!("Slot(index={}, len={}, device={:?})", self.index, self.len, self.device)
    }
}
