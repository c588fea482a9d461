//! `frameloop.Appliance`: the appliance started in this process from a
//! config (dict or path), fed, tuned and watched from Python, stopped on
//! `stop()`, on leaving a `with` block, or when a wait of one of its calls
//! is interrupted (Ctrl-C). Every call that waits releases the GIL.

use crate::config;
use crate::consumer::Consumer;
use crate::histogram::Histogram;
use crate::record::ResultRecord;
use crate::{ApplianceError, ReloadRefused, app_error};
use frameloop::app::{Appliance as Running, FrameFeed, StartOptions};
use frameloop::metrics::Segment;
use frameloop::reload::ReloadOutcome;
use frameloop::ring::ResultRecord as Record;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBytes, PyDict};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a wait keeps the GIL released before looking for Ctrl-C.
const WAIT_STEP: Duration = Duration::from_millis(50);

/// Results the result thread handed over, for `Appliance.results()`.
#[derive(Default)]
pub struct ResultQueue {
    state: Mutex<QueueState>,
    ready: Condvar,
}

#[derive(Default)]
struct QueueState {
    records: VecDeque<Record>,
    capacity: usize,
    /// Records dropped, oldest first, because nobody took them in time.
    dropped: u64,
    /// The appliance stopped: no more will come.
    closed: bool,
}

impl ResultQueue {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Called on the result thread: never blocks for long, drops the oldest when full.
    fn push(&self, r: &Record) {
        let mut s = self.lock();
        if s.records.len() >= s.capacity.max(1) {
            s.records.pop_front();
            s.dropped += 1;
        }
        s.records.push_back(*r);
        drop(s);
        self.ready.notify_one();
    }

    /// The next record, waiting until `until`; `None` when none came, or
    /// when the queue is closed and empty.
    pub fn pop_until(&self, until: Instant) -> Option<Record> {
        let mut s = self.lock();
        loop {
            if let Some(r) = s.records.pop_front() {
                return Some(r);
            }
            let now = Instant::now();
            if s.closed || now >= until {
                return None;
            }
            s = self.ready.wait_timeout(s, until - now).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    pub fn closed_and_empty(&self) -> bool {
        let s = self.lock();
        s.closed && s.records.is_empty()
    }

    fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }
}

/// A frameloop appliance running in this process.
///
/// `Appliance(config=None, *, backend=None, gpu=0, base_dir=None,
/// record=None, results_buffer=65536)`: `config` is a dict with the keys of
/// the TOML file (`{"ring": {"slots": 16}, "chain": [{"op": "unpack", ...}]}`),
/// or the path of a TOML file, or None for the defaults; it is checked as
/// `frameloop validate` checks a file, and every problem is raised at once
/// in one `ConfigError` naming its key. `backend` ("auto", "host", "cuda")
/// overrides the config's. `base_dir`: what relative kernel `source` paths
/// of a dict are relative to (default: the current directory). `record`:
/// write every received datagram to this pcapng file. `results_buffer`:
/// result records `results()` keeps for you (the oldest are dropped past it).
///
/// The appliance runs once the constructor returns. Use it as a context
/// manager (`with frameloop.Appliance(cfg) as app:`) or call `stop()`.
#[pyclass(module = "frameloop", name = "Appliance", frozen)]
pub struct Appliance {
    running: Mutex<Option<Running>>,
    report: Mutex<Option<Py<PyAny>>>,
    results: Arc<ResultQueue>,
    local_addr: SocketAddr,
    backend_name: &'static str,
    /// The `backend` argument, applied to reloaded configs too.
    backend_override: Option<String>,
    base_dir: Option<PathBuf>,
    /// The next frame number `send` gives a frame of each stream.
    next_seq: Mutex<std::collections::HashMap<u32, u64>>,
}

impl Appliance {
    /// The appliance's lock, waited for with the GIL released (a call of
    /// another thread may hold it while it waits with the GIL released).
    fn lock_running(&self, py: Python<'_>) -> MutexGuard<'_, Option<Running>> {
        self.running.lock_py_attached(py).unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the running appliance, or raises if it was stopped.
    fn with_running<T>(&self, py: Python<'_>, f: impl FnOnce(&mut Running) -> PyResult<T>) -> PyResult<T> {
        let mut guard = self.lock_running(py);
        match guard.as_mut() {
            Some(app) => f(app),
            None => Err(ApplianceError::new_err("the appliance was stopped; start a new Appliance")),
        }
    }

    /// Where a sender on this machine reaches the receiver (loopback for a
    /// wildcard bind).
    pub fn target(&self) -> SocketAddr {
        let mut to = self.local_addr;
        if to.ip().is_unspecified() {
            to.set_ip(if to.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            });
        }
        to
    }

    /// Stops the appliance if it runs (the GIL released meanwhile) and
    /// returns the report, the same as `frameloop run --json` prints.
    fn stop_now(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let taken = self.lock_running(py).take();
        if let Some(app) = taken {
            let stopped = py.detach(move || app.stop());
            self.results.close();
            let report = stopped.map_err(|e| app_error(&e))?;
            let value = serde_json::to_value(&report).map_err(|e| PyValueError::new_err(e.to_string()))?;
            let object = crate::json_to_python(py, &value)?.unbind();
            *self.report.lock().unwrap_or_else(PoisonError::into_inner) = Some(object);
        }
        match &*self.report.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(r) => Ok(r.clone_ref(py)),
            None => Err(ApplianceError::new_err("the appliance stopped without a report")),
        }
    }

    /// A wait of one of this appliance's calls saw Ctrl-C: stop, then let
    /// the KeyboardInterrupt go on.
    pub fn interrupted(&self, py: Python<'_>, interrupt: PyErr) -> PyErr {
        if let Err(e) = self.stop_now(py) {
            e.print(py);
        }
        interrupt
    }

    /// Sends one frame of `stream` through `feed` (a few sendmmsg calls,
    /// with the GIL held: the socket's buffers are not for other threads).
    fn send_payload(&self, feed: &mut FrameFeed, stream: u32, payload: &[u8]) -> PyResult<u64> {
        let seq = {
            let mut seqs = self.next_seq.lock().unwrap_or_else(PoisonError::into_inner);
            let next = seqs.entry(stream).or_insert(0);
            *next += 1;
            *next - 1
        };
        feed.send(stream, seq, payload).map(|sent| sent.packets).map_err(|e| app_error(&e))
    }
}

/// The bytes of one frame a user supplies: bytes-like, or anything with
/// `tobytes()` (a NumPy array, in its own dtype and byte order).
fn payload_of<'py>(frame: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    if let Ok(b) = frame.cast::<PyBytes>() {
        return Ok(b.clone());
    }
    if frame.hasattr("tobytes")? {
        return Ok(frame.call_method0("tobytes")?.cast_into::<PyBytes>()?);
    }
    let builtins = frame.py().import("builtins")?;
    builtins.getattr("bytes")?.call1((frame,))?.cast_into::<PyBytes>().map_err(Into::into)
}

#[pymethods]
impl Appliance {
    #[new]
    #[pyo3(signature = (config=None, *, backend=None, gpu=0, base_dir=None, record=None, results_buffer=65536))]
    fn new(
        py: Python<'_>,
        config: Option<&Bound<'_, PyAny>>,
        backend: Option<String>,
        gpu: usize,
        base_dir: Option<PathBuf>,
        record: Option<PathBuf>,
        results_buffer: usize,
    ) -> PyResult<Self> {
        crate::init_logging();
        let source = config::read(config, backend.as_deref(), base_dir.clone())?;
        config::check_kernels(&source)?;
        let results = Arc::new(ResultQueue::default());
        results.lock().capacity = results_buffer.max(1);
        let sink = Arc::clone(&results);
        let opts =
            StartOptions { on_result: Some(Box::new(move |r: &Record| sink.push(r))), ..Default::default() };
        let cfg = source.config;
        let started = py.detach(|| Running::start_on_gpu(&cfg, opts, record.as_deref(), gpu));
        let app = started.map_err(|e| app_error(&e))?;
        Ok(Self {
            local_addr: app.local_addr(),
            backend_name: app.backend().name(),
            running: Mutex::new(Some(app)),
            report: Mutex::new(None),
            results,
            backend_override: backend,
            base_dir,
            next_seq: Mutex::new(Default::default()),
        })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Stops the appliance; an exception in the block goes on.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.stop_now(py)?;
        Ok(false)
    }

    /// Stops the appliance (receiver, then the frames left in the ring, then
    /// the loop and the result thread, within service.shutdown_timeout_ms)
    /// and returns its report: the dict `frameloop run --json` prints.
    /// Stopping again returns the same report.
    fn stop(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.stop_now(py)
    }

    /// The final report once stopped, else None.
    #[getter]
    fn report(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.report.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(|r| r.clone_ref(py))
    }

    /// True until `stop()` (or a stage stopped by itself: see `wait`).
    #[getter]
    fn running(&self, py: Python<'_>) -> bool {
        self.lock_running(py).as_ref().is_some_and(|a| a.stopped_stage().is_none())
    }

    /// `(host, port)` the receiver is bound to.
    #[getter]
    fn address(&self) -> (String, u16) {
        (self.local_addr.ip().to_string(), self.local_addr.port())
    }

    /// The UDP port the receiver is bound to (useful with `ingest.bind` port 0).
    #[getter]
    fn port(&self) -> u16 {
        self.local_addr.port()
    }

    /// `"host"` or `"cuda"`: the backend the appliance runs on.
    #[getter]
    fn backend(&self) -> &'static str {
        self.backend_name
    }

    /// The config the appliance runs now (after reloads), as a dict.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let cfg = self.with_running(py, |app| Ok(app.running_config().clone()))?;
        config::to_python(py, &cfg)
    }

    /// The operator parameter generation the loop runs (0: the start-up config).
    #[getter]
    fn param_generation(&self, py: Python<'_>) -> PyResult<u32> {
        self.with_running(py, |app| Ok(app.param_generation()))
    }

    /// Blocks until `timeout` seconds passed (None: until Ctrl-C or a stage
    /// of the appliance stopped by itself), with the GIL released. Ctrl-C
    /// stops the appliance and raises KeyboardInterrupt. Returns the name of
    /// a stage that stopped by itself, else None.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<&'static str>> {
        let deadline = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t.max(0.0)));
        loop {
            if let Some(stage) = self.with_running(py, |app| Ok(app.stopped_stage()))? {
                return Ok(Some(stage));
            }
            let step =
                deadline.map_or(WAIT_STEP, |d| d.saturating_duration_since(Instant::now()).min(WAIT_STEP));
            if step.is_zero() {
                return Ok(None);
            }
            py.detach(|| std::thread::sleep(step));
            if let Err(e) = py.check_signals() {
                return Err(self.interrupted(py, e));
            }
        }
    }

    /// Sends frames to this appliance. With `frames` (an iterable of NumPy
    /// arrays or bytes-like objects, each one frame's payload as the sensor
    /// would send it; a 2-D array is a frame per row, one 1-D array or bytes
    /// object one frame): each as frame of `stream` with the next frame number,
    /// `packet_bytes` per datagram, `rate` frames per second (None: as fast
    /// as they come). Without `frames`: the sender's emulated frames
    /// (`pattern` "counter", "random" or "static") as `frameloop send` sends
    /// them, `count` frames or for `duration` seconds at `rate` (default
    /// 1000) per second, `frame_bytes` each (default ring.slot_bytes),
    /// paced by `pacing` ("spin" or "sleep"), over `streams` streams.
    /// Returns what was sent (dict). Ctrl-C stops the appliance.
    #[pyo3(signature = (frames=None, *, stream=0, rate=None, count=None, duration=None, frame_bytes=None,
                        packet_bytes=8972, pattern="counter", pacing="spin", streams=1))]
    #[allow(clippy::too_many_arguments)]
    fn send<'py>(
        &self,
        py: Python<'py>,
        frames: Option<&Bound<'py, PyAny>>,
        stream: u32,
        rate: Option<f64>,
        count: Option<u64>,
        duration: Option<f64>,
        frame_bytes: Option<u64>,
        packet_bytes: usize,
        pattern: &str,
        pacing: &str,
        streams: u32,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Some(frames) = frames {
            let period = match rate {
                Some(r) if r > 0.0 && r.is_finite() => Some(Duration::from_secs_f64(1.0 / r)),
                Some(r) => {
                    return Err(PyValueError::new_err(format!(
                        "rate {r} is not a positive number of frames per second"
                    )));
                }
                None => None,
            };
            let mut feed = FrameFeed::connect(self.target(), packet_bytes).map_err(|e| app_error(&e))?;
            let start = Instant::now();
            let (mut sent, mut packets, mut bytes) = (0u64, 0u64, 0u64);
            // One frame given alone (bytes, or a 1-D array) is one frame, not
            // a frame per byte or sample.
            let single = frames.is_instance_of::<PyBytes>()
                || frames.is_instance_of::<pyo3::types::PyByteArray>()
                || frames.getattr("ndim").ok().and_then(|n| n.extract::<usize>().ok()) == Some(1);
            let frames =
                if single { pyo3::types::PyList::new(py, [frames])?.into_any() } else { frames.clone() };
            for frame in frames.try_iter()? {
                let payload = payload_of(&frame?)?;
                if let Some(p) = period {
                    let due = start + p * u32::try_from(sent).unwrap_or(u32::MAX);
                    while Instant::now() < due {
                        let step = due.saturating_duration_since(Instant::now()).min(WAIT_STEP);
                        py.detach(|| std::thread::sleep(step));
                        if let Err(e) = py.check_signals() {
                            return Err(self.interrupted(py, e));
                        }
                    }
                }
                packets += self.send_payload(&mut feed, stream, payload.as_bytes())?;
                bytes += payload.as_bytes().len() as u64;
                sent += 1;
                if let Err(e) = py.check_signals() {
                    return Err(self.interrupted(py, e));
                }
            }
            let out = PyDict::new(py);
            out.set_item("frames", sent)?;
            out.set_item("packets", packets)?;
            out.set_item("bytes", bytes)?;
            return Ok(out.into_any());
        }
        let slot_bytes = self.with_running(py, |app| Ok(app.running_config().ring.slot_bytes))?;
        let args = crate::sender::send_args(
            self.target().to_string(),
            rate.unwrap_or(1000.0),
            frame_bytes.unwrap_or(slot_bytes as u64),
            packet_bytes,
            count,
            duration,
            streams,
            pattern,
            pacing,
        )?;
        if count.is_none() && duration.is_none() {
            return Err(PyValueError::new_err("give count= or duration= (or frames=) to send"));
        }
        crate::sender::run(py, args, |py, e| self.interrupted(py, e))
    }

    /// The appliance's outputs, read in place in this process without the
    /// socket: a `Consumer` (iterate it, or call `next(timeout)`) whose
    /// frames export as DLPack tensors (NumPy on the host backend, torch or
    /// CuPy on the CUDA backend). Needs `output.enabled = true`. Only outputs
    /// published after the call are read. Ctrl-C in its waits stops the
    /// appliance.
    #[pyo3(signature = (spin_us=Some(20.0)))]
    fn outputs(slf: &Bound<'_, Self>, spin_us: Option<f64>) -> PyResult<Consumer> {
        let me = slf.get();
        let consumer = me.with_running(slf.py(), |app| app.attach_consumer().map_err(|e| app_error(&e)))?;
        let label = PathBuf::from(format!("in-process:{}", me.local_addr));
        Consumer::local(consumer, label, spin_us, Some(slf.clone().unbind()))
    }

    /// The result records of processed frames, in order, as `ResultRecord`s:
    /// iterate (it ends when the appliance stops and every record was
    /// taken), or call `next(timeout)`. Records come from the result thread;
    /// up to `results_buffer` wait for you, older ones are dropped and
    /// counted in `results_dropped`.
    fn results(slf: &Bound<'_, Self>) -> Results {
        Results { appliance: slf.clone().unbind() }
    }

    /// Result records dropped because `results()` was not read in time.
    #[getter]
    fn results_dropped(&self) -> u64 {
        self.results.lock().dropped
    }

    /// The counters the Prometheus endpoint shows, as a dict.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.with_running(py, |app| Ok(app.metrics_snapshot()))?;
        let d = PyDict::new(py);
        d.set_item("backend", &m.backend)?;
        d.set_item("loop_launched", m.loop_launched)?;
        d.set_item("loop_iterations", m.loop_iterations)?;
        d.set_item("loop_idle_iterations", m.loop_idle_iterations)?;
        d.set_item("frames", m.frames.into_py_dict(py)?)?;
        d.set_item("drops", m.drops.into_py_dict(py)?)?;
        d.set_item("ring_overruns", m.ring_overruns)?;
        d.set_item("receiver_busy_poll_gaps", m.receiver_busy_poll_gaps)?;
        d.set_item("receiver_assembly_waits", m.receiver_assembly_waits)?;
        d.set_item("param_generation", m.param_generation)?;
        d.set_item("reloads", m.reloads.into_py_dict(py)?)?;
        if let Some(o) = &m.outputs {
            let out = PyDict::new(py);
            out.set_item("written", o.written)?;
            out.set_item("consumers", o.consumers.clone())?;
            out.set_item("attaches", o.attaches)?;
            out.set_item("refused", o.refused)?;
            out.set_item("timed_out", o.timed_out)?;
            d.set_item("outputs", out)?;
        }
        let ingest = self.with_running(py, |app| Ok(app.ingest()))?;
        let value = serde_json::to_value(ingest).map_err(|e| PyValueError::new_err(e.to_string()))?;
        d.set_item("ingest", crate::json_to_python(py, &value)?)?;
        d.set_item("results_dropped", self.results.lock().dropped)?;
        Ok(d)
    }

    /// Each latency segment's HDR histogram (nanoseconds) so far, by
    /// segment name ("wire", "assembly", "publish_to_detect", "compute",
    /// "done_to_seen", "end_to_end", "publish_to_seen", "last_rx_to_seen"):
    /// `Histogram` objects with percentiles, the recorded values, merge and
    /// the standard V2 encoding.
    fn latency<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let h = self.with_running(py, |app| Ok(app.latency_histograms()))?;
        let d = PyDict::new(py);
        for segment in Segment::ALL {
            d.set_item(segment.name(), Histogram::new(segment.name(), h.histogram(segment).clone()))?;
        }
        Ok(d)
    }

    /// Applies a new config (dict or path) as `systemctl reload` does:
    /// operator parameters and the chain's shape change between two frames
    /// (the result records' `param_generation` tells which frames run with
    /// it); a config with problems raises `ConfigError`, one that changes a
    /// key only a restart applies raises `ReloadRefused` naming the keys;
    /// either way nothing changes. Returns {"outcome": "applied_params" |
    /// "applied_shape" | "unchanged", "generation": int}.
    fn reload<'py>(&self, py: Python<'py>, config: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let source = config::read(Some(config), self.backend_override.as_deref(), self.base_dir.clone())?;
        config::check_kernels(&source)?;
        self.apply(py, source.config)
    }

    /// Sets parameters of one chain entry live, as a reload with only those
    /// changed would: `op` is the entry's index, `"chain[i]"`, its operator
    /// name (`"threshold"`, `"fir"`) or a user kernel's entry name; the
    /// keyword arguments are its keys (`level=3.0`, `taps=[...]`; a user
    /// kernel's `params`). Returns what `reload` returns.
    #[pyo3(signature = (op, **values))]
    fn set_params<'py>(
        &self,
        py: Python<'py>,
        op: &Bound<'py, PyAny>,
        values: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let running = self.with_running(py, |app| Ok(app.running_config().clone()))?;
        let index = config::find_op(&running.chain, op)?;
        let empty = PyDict::new(py);
        let new = config::with_params(&running, index, values.unwrap_or(&empty))?;
        self.apply(py, new)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let state = if self.lock_running(py).is_some() { "running" } else { "stopped" };
        format!("Appliance(backend={:?}, address={}, {state})", self.backend_name, self.local_addr)
    }
}

impl Appliance {
    fn apply<'py>(&self, py: Python<'py>, new: frameloop::config::Config) -> PyResult<Bound<'py, PyDict>> {
        let verdict = self.with_running(py, |app| Ok(py.detach(move || app.reload_explained(new))))?;
        let d = PyDict::new(py);
        match verdict.outcome {
            ReloadOutcome::Unchanged => {
                d.set_item("outcome", "unchanged")?;
                d.set_item("generation", self.with_running(py, |app| Ok(app.param_generation()))?)?;
            }
            ReloadOutcome::AppliedParams { generation } => {
                d.set_item("outcome", "applied_params")?;
                d.set_item("generation", generation)?;
            }
            ReloadOutcome::AppliedShape { generation } => {
                d.set_item("outcome", "applied_shape")?;
                d.set_item("generation", generation)?;
            }
            ReloadOutcome::RejectedInvalid | ReloadOutcome::RefusedRestart => {
                let what = if verdict.outcome == ReloadOutcome::RefusedRestart {
                    "reload refused, nothing changed"
                } else {
                    "reload rejected, nothing changed"
                };
                let err = ReloadRefused::new_err(format!("{what}: {}", verdict.reasons.join("; ")));
                let _ = err.value(py).setattr("reasons", verdict.reasons);
                return Err(err);
            }
        }
        Ok(d)
    }

    pub fn queue(&self) -> &Arc<ResultQueue> {
        &self.results
    }
}

impl Drop for Appliance {
    fn drop(&mut self) {
        // An appliance nobody stopped stops with its Python object.
        if let Some(app) = self.running.get_mut().unwrap_or_else(PoisonError::into_inner).take() {
            let _ = app.stop();
        }
    }
}

/// The iterator `Appliance.results()` returns.
#[pyclass(module = "frameloop", name = "Results", frozen)]
pub struct Results {
    appliance: Py<Appliance>,
}

impl Results {
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<ResultRecord>> {
        let app = self.appliance.get();
        let deadline = match timeout {
            Some(t) if !(t >= 0.0 && t.is_finite()) => {
                return Err(PyValueError::new_err(format!("timeout must be seconds >= 0 or None, not {t}")));
            }
            Some(t) => Some(Instant::now() + Duration::from_secs_f64(t)),
            None => None,
        };
        loop {
            let step_end = Instant::now() + WAIT_STEP;
            let until = deadline.map_or(step_end, |d| d.min(step_end));
            let queue = Arc::clone(app.queue());
            if let Some(r) = py.detach(move || queue.pop_until(until)) {
                return Ok(Some(ResultRecord::from(r)));
            }
            if let Err(e) = py.check_signals() {
                return Err(app.interrupted(py, e));
            }
            if app.queue().closed_and_empty() || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
        }
    }
}

#[pymethods]
impl Results {
    /// The next record: waits up to `timeout` seconds (None: until one
    /// comes); None when the time passed or the appliance stopped and every
    /// record was taken.
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<ResultRecord>> {
        self.wait(py, timeout)
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<ResultRecord>> {
        self.wait(py, None)
    }
}

trait IntoPyDict {
    fn into_py_dict(self, py: Python<'_>) -> PyResult<Bound<'_, PyDict>>;
}

impl IntoPyDict for Vec<(String, u64)> {
    fn into_py_dict(self, py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
}
