//! `frameloop.Frame`: one output of the ring — its record, user words and
//! samples — whose samples export through DLPack in place (no copy).

use crate::consumer::SharedConsumer;
use crate::dlpack::{DEVICE_CPU, DEVICE_CUDA, TensorSpec};
use crate::overwritten;
use frameloop::output::OutputFrame;
use frameloop::ring::ResultRecord;
use frameloop::ring::layout::{RESULT_GPU_CLOCK, USER_RESULT_WORDS};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use std::sync::Arc;

/// The frame's stats as the chain's stats and threshold operators computed them.
#[pyclass(module = "frameloop", name = "Stats", frozen, get_all)]
#[derive(Clone)]
pub struct Stats {
    pub sum: f32,
    pub min: f32,
    pub max: f32,
    pub mean: f32,
    /// Samples above the threshold.
    pub detect_count: u32,
    /// Index of the first sample above the threshold, -1 for none.
    pub first_detect_index: i32,
}

impl Stats {
    /// The stats of a result record.
    pub fn of(r: &ResultRecord) -> Self {
        Self {
            sum: r.sum,
            min: r.min,
            max: r.max,
            mean: r.mean,
            detect_count: r.detect_count,
            first_detect_index: r.first_detect_index,
        }
    }
}

#[pymethods]
impl Stats {
    fn __repr__(&self) -> String {
        format!(
            "Stats(sum={}, min={}, max={}, mean={}, detect_count={}, first_detect_index={})",
            self.sum, self.min, self.max, self.mean, self.detect_count, self.first_detect_index
        )
    }
}

/// Where a frame's samples are.
enum Samples {
    /// In place in the consumer's mapping of the ring; whole while the slot
    /// holds `sequence`. `address` is a host address (`device` = kDLCPU) or
    /// a device address in this process's CUDA context (kDLCUDA).
    Ring { consumer: SharedConsumer, address: u64, device: (i32, i32) },
    /// A host copy (`Frame.copy()`).
    Copy(Arc<Vec<f32>>),
}

/// One output of the ring. Its samples are read in place: they stay this
/// output's until the appliance reuses the slot (`slots` outputs later);
/// `valid()` tells whether that has happened.
#[pyclass(module = "frameloop", name = "Frame", frozen)]
pub struct Frame {
    sequence: u64,
    /// Boxed: the record is 64-byte aligned, which a Python object's
    /// memory does not promise.
    record: Box<ResultRecord>,
    user: [u32; USER_RESULT_WORDS],
    len: usize,
    /// The ring slot that holds it (`Consumer.slot_views()[slot]`).
    slot: usize,
    samples: Samples,
}

impl Frame {
    /// Takes what `frame` handed out: record and user words (copies) and
    /// where its samples are (`None`: a ring of neither kind).
    pub fn from_output(frame: &OutputFrame<'_>, consumer: &SharedConsumer) -> Option<Self> {
        let (address, device) = if let Some(samples) = frame.samples() {
            (samples.as_ptr() as u64, (DEVICE_CPU, 0))
        } else {
            let device = frame.device_samples()?;
            (device.dptr, (DEVICE_CUDA, device.device_ordinal))
        };
        debug_assert!(address.is_multiple_of(4), "samples are f32-aligned (slots are 256-byte aligned)");
        Some(Self {
            sequence: frame.sequence(),
            record: Box::new(*frame.record()),
            user: *frame.user_result(),
            len: frame.len(),
            slot: frame.slot(),
            samples: Samples::Ring { consumer: Arc::clone(consumer), address, device },
        })
    }

    fn dlpack_device(&self) -> (i32, i32) {
        match &self.samples {
            Samples::Ring { device, .. } => *device,
            Samples::Copy(_) => (DEVICE_CPU, 0),
        }
    }

    fn is_valid(&self) -> bool {
        match &self.samples {
            Samples::Ring { consumer, .. } => consumer.holds(self.sequence),
            Samples::Copy(_) => true,
        }
    }

    /// A host copy of the samples, checked whole after the copy.
    fn copy_samples(&self) -> PyResult<Arc<Vec<f32>>> {
        match &self.samples {
            Samples::Copy(samples) => Ok(Arc::clone(samples)),
            Samples::Ring { device: (DEVICE_CPU, _), address, .. } => {
                let mut copy = vec![0f32; self.len];
                // SAFETY: `address` is `len` samples inside the consumer's
                // host mapping, which the `consumer` Arc keeps mapped. The
                // appliance may rewrite them meanwhile; `is_valid` below
                // tells, and the torn copy is then dropped unseen.
                unsafe { std::ptr::copy_nonoverlapping(*address as *const f32, copy.as_mut_ptr(), self.len) };
                if self.is_valid() { Ok(Arc::new(copy)) } else { Err(overwritten(self.sequence)) }
            }
            Samples::Ring { .. } => Err(PyBufferError::new_err(
                "the samples are in CUDA device memory; copy them on the device, \
                 e.g. torch.from_dlpack(frame).clone() or cupy.from_dlpack(frame).copy()",
            )),
        }
    }
}

#[pymethods]
impl Frame {
    /// Output sequence (1-based, contiguous over the appliance's run).
    #[getter]
    fn sequence(&self) -> u64 {
        self.sequence
    }
    /// Result sequence of the frame in the appliance's result ring.
    #[getter]
    fn result_seq(&self) -> u64 {
        self.record.result_seq
    }
    /// Frame-ring sequence of the frame.
    #[getter]
    fn ring_seq(&self) -> u64 {
        self.record.ring_seq
    }
    /// The sender's frame number.
    #[getter]
    fn frame_seq(&self) -> u64 {
        self.record.frame_seq
    }
    #[getter]
    fn stream_id(&self) -> u32 {
        self.record.stream_id
    }
    /// The sender's timestamp (ns).
    #[getter]
    fn sender_ts_ns(&self) -> u64 {
        self.record.sender_ts_ns
    }
    /// First packet of the frame received (host CLOCK_REALTIME ns).
    #[getter]
    fn first_rx_ns(&self) -> u64 {
        self.record.first_rx_ns
    }
    /// Last packet received (host CLOCK_REALTIME ns).
    #[getter]
    fn last_rx_ns(&self) -> u64 {
        self.record.last_rx_ns
    }
    /// The frame published into the frame ring (host CLOCK_REALTIME ns,
    /// the clock of Python's `time.time_ns()`).
    #[getter]
    fn published_ns(&self) -> u64 {
        self.record.published_ns
    }
    /// The backend noticed the frame (host clock; GPU clock when `gpu_clock`).
    #[getter]
    fn detect_ns(&self) -> u64 {
        self.record.detect_ns
    }
    /// The chain finished (same clock as `detect_ns`).
    #[getter]
    fn done_ns(&self) -> u64 {
        self.record.done_ns
    }
    /// True when `detect_ns` and `done_ns` are GPU `%globaltimer` values.
    #[getter]
    fn gpu_clock(&self) -> bool {
        self.record.result_flags & RESULT_GPU_CLOCK != 0
    }
    /// The record's `RESULT_*` flags.
    #[getter]
    fn result_flags(&self) -> u32 {
        self.record.result_flags
    }
    /// Frames the backend skipped before this one (overrun policy `latest`).
    #[getter]
    fn skipped_before(&self) -> u64 {
        self.record.skipped_before
    }
    #[getter]
    fn stats(&self) -> Stats {
        Stats::of(&self.record)
    }

    /// The parameter generation the frame ran with (0: the start-up config).
    #[getter]
    fn param_generation(&self) -> u32 {
        self.record.param_generation
    }
    /// Index of the ring slot that holds this output (`Consumer.slot_views()`).
    #[getter]
    fn slot(&self) -> usize {
        self.slot
    }
    /// The 12 user result words a user kernel wrote.
    #[getter]
    fn user(&self) -> Vec<u32> {
        self.user.to_vec()
    }
    /// `"cpu"` or `"cuda"`.
    #[getter]
    fn device(&self) -> &'static str {
        if self.dlpack_device().0 == DEVICE_CUDA { "cuda" } else { "cpu" }
    }
    /// Address of the first sample (host, or device in this process).
    #[getter]
    fn data_ptr(&self) -> u64 {
        match &self.samples {
            Samples::Ring { address, .. } => *address,
            Samples::Copy(samples) => samples.as_ptr() as u64,
        }
    }

    fn __len__(&self) -> usize {
        self.len
    }

    /// True while the ring slot still holds this output: what was read from
    /// the samples since `next()` is this output's. Always true for a copy.
    fn valid(&self) -> bool {
        self.is_valid()
    }

    /// A frame with the same record over a host copy of the samples, valid
    /// for ever. Raises `FrameOverwritten` if the slot was reused first.
    fn copy(&self) -> PyResult<Frame> {
        Ok(Frame {
            sequence: self.sequence,
            record: self.record.clone(),
            user: self.user,
            len: self.len,
            slot: self.slot,
            samples: Samples::Copy(self.copy_samples()?),
        })
    }

    /// `(device_type, device_id)`: `(1, 0)` (kDLCPU) or `(2, ordinal)` (kDLCUDA).
    fn __dlpack_device__(&self) -> (i32, i32) {
        self.dlpack_device()
    }

    /// A DLPack capsule over the samples, in place: a 1-D float32 tensor of
    /// `len(frame)` samples that keeps the ring mapped while it lives.
    /// `stream` needs no synchronisation (the appliance publishes a slot
    /// only once it is whole); `copy=True` exports a host copy.
    #[pyo3(signature = (stream=None, *, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // Nothing to order on any stream: the slot was whole before `next()`
        // handed the frame out.
        let _ = stream;
        if let Some(wanted) = dl_device
            && wanted != self.dlpack_device()
        {
            return Err(PyBufferError::new_err(format!(
                "the frame's samples are on DLPack device {:?}, not {wanted:?}; export without dl_device and move them",
                self.dlpack_device()
            )));
        }
        let spec = match (&self.samples, copy) {
            (Samples::Ring { consumer, address, device }, None | Some(false)) => {
                if !self.is_valid() {
                    return Err(overwritten(self.sequence));
                }
                TensorSpec {
                    data: *address,
                    len: self.len,
                    device: *device,
                    owner: Arc::clone(consumer) as _,
                    read_only: true,
                    copied: false,
                }
            }
            (_, Some(true)) => {
                let samples = match &self.samples {
                    Samples::Copy(kept) => Arc::new(kept.to_vec()),
                    Samples::Ring { .. } => self.copy_samples()?,
                };
                let data = samples.as_ptr() as u64;
                TensorSpec {
                    data,
                    len: self.len,
                    device: (DEVICE_CPU, 0),
                    owner: samples,
                    read_only: false,
                    copied: true,
                }
            }
            (Samples::Copy(samples), None | Some(false)) => {
                let data = samples.as_ptr() as u64;
                TensorSpec {
                    data,
                    len: self.len,
                    device: (DEVICE_CPU, 0),
                    owner: Arc::clone(samples) as _,
                    read_only: false,
                    copied: false,
                }
            }
        };
        match max_version {
            Some((major, _)) if major >= 1 => spec.into_versioned_capsule(py),
            _ => spec.into_legacy_capsule(py),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Frame(sequence={}, frame_seq={}, len={}, device={:?}, valid={})",
            self.sequence,
            self.record.frame_seq,
            self.len,
            self.dlpack_device(),
            self.is_valid()
        )
    }
}
