//! `frameloop.Consumer`: attach to the appliance's output socket and take
//! its outputs in order, as `Frame`s, waiting with the GIL released.

use crate::AttachError;
use crate::frame::Frame;
use crate::slot::Slot;
use frameloop::output::{Consumer as RingConsumer, MemoryKind};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The attached consumer, shared by the Python object and every frame and
/// exported tensor it handed out: the ring stays mapped while any lives.
pub type SharedConsumer = Arc<Attached>;

/// The consumer behind a lock: `next` needs it exclusively, a frame's
/// `valid()` only briefly.
pub struct Attached(Mutex<RingConsumer>);

impl Attached {
    fn lock(&self) -> MutexGuard<'_, RingConsumer> {
        // A panic while holding the lock leaves the consumer's counters as
        // they were: still usable.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// True while output `seq`'s slot still holds it.
    pub fn holds(&self, seq: u64) -> bool {
        self.lock().holds(seq)
    }
}

/// How long one wait keeps the GIL released before checking for signals
/// (Ctrl-C) and for the appliance going away.
const WAIT_STEP: Duration = Duration::from_millis(50);
/// The sleep between two polls once a wait's spin budget is spent.
const POLL_SLEEP: Duration = Duration::from_micros(20);
/// A spin budget past any wait (for `spin_us=None`).
const WAIT_FOREVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// A process attached to an appliance's output ring.
#[pyclass(module = "frameloop", name = "Consumer", frozen)]
pub struct Consumer {
    shared: SharedConsumer,
    socket: PathBuf,
    /// How long a wait spins on the ring's head before sleeping between polls.
    spin: Duration,
    /// The appliance of this process whose outputs these are
    /// (`Appliance.outputs()`): Ctrl-C in a wait stops it.
    owner: Option<Py<crate::appliance::Appliance>>,
}

fn spin_of(spin_us: Option<f64>) -> PyResult<Duration> {
    match spin_us {
        None => Ok(WAIT_FOREVER),
        Some(us) if us >= 0.0 && us.is_finite() => Ok(Duration::from_secs_f64(us / 1e6).min(WAIT_FOREVER)),
        Some(us) => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "spin_us must be a finite number of microseconds >= 0 or None, not {us}"
        ))),
    }
}

impl Consumer {
    /// A consumer of the output ring of `owner`, an appliance in this
    /// process, read without its socket; `label` names it in `repr`.
    pub fn local(
        consumer: RingConsumer,
        label: PathBuf,
        spin_us: Option<f64>,
        owner: Option<Py<crate::appliance::Appliance>>,
    ) -> PyResult<Self> {
        Ok(Self {
            shared: Arc::new(Attached(Mutex::new(consumer))),
            socket: label,
            spin: spin_of(spin_us)?,
            owner,
        })
    }

    /// The next output if one is published, polling until `until`:
    /// spinning until `spin_until`, then sleeping 20 µs between polls.
    fn poll_until(&self, until: Instant, spin_until: Instant) -> Option<Frame> {
        loop {
            {
                let mut consumer = self.shared.lock();
                if consumer.ready() {
                    // Counted read when `output` drops here (or lost if
                    // overwritten already); the Frame re-checks with `valid()`.
                    if let Some(output) = consumer.next()
                        && let Some(frame) = Frame::from_output(&output, &self.shared)
                    {
                        return Some(frame);
                    }
                    continue;
                }
            }
            let now = Instant::now();
            if now >= until {
                return None;
            }
            if now < spin_until {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(POLL_SLEEP);
            }
        }
    }

    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Frame>> {
        let deadline = match timeout {
            Some(t) if !(t >= 0.0 && t.is_finite()) => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "timeout must be a finite number of seconds >= 0 or None, not {t}"
                )));
            }
            Some(t) => Some(Instant::now() + Duration::from_secs_f64(t)),
            None => None,
        };
        let spin_until =
            Instant::now().checked_add(self.spin).unwrap_or_else(|| Instant::now() + WAIT_FOREVER);
        loop {
            let step_end = Instant::now() + WAIT_STEP;
            let until = deadline.map_or(step_end, |d| d.min(step_end));
            if let Some(frame) = py.detach(|| self.poll_until(until, spin_until)) {
                return Ok(Some(frame));
            }
            if let Err(interrupt) = py.check_signals() {
                return Err(match &self.owner {
                    Some(app) => app.get().interrupted(py, interrupt),
                    None => interrupt,
                });
            }
            if deadline.is_some_and(|d| Instant::now() >= d) || self.shared.lock().appliance_gone() {
                return Ok(None);
            }
        }
    }
}

#[pymethods]
impl Consumer {
    /// Attaches to the output socket at `socket_path` (the appliance's
    /// `output.socket`) and maps the ring it serves. Only outputs published
    /// after the attach are read. A wait spins on the ring's head for
    /// `spin_us` microseconds before it sleeps 20 µs between polls; `None`
    /// spins for as long as it waits (one core busy, each output seen as
    /// soon as it is published).
    #[new]
    #[pyo3(signature = (socket_path, spin_us=Some(20.0)))]
    fn new(py: Python<'_>, socket_path: PathBuf, spin_us: Option<f64>) -> PyResult<Self> {
        let spin = spin_of(spin_us)?;
        let attached = py.detach(|| RingConsumer::attach(&socket_path));
        let consumer = attached.map_err(|e| AttachError::new_err(crate::error_chain(&e)))?;
        Ok(Self { shared: Arc::new(Attached(Mutex::new(consumer))), socket: socket_path, spin, owner: None })
    }

    /// The next output: waits up to `timeout` seconds (`None`: until one
    /// comes). Returns `None` when the time passed, or when the appliance
    /// stopped (see `appliance_gone`).
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Frame>> {
        self.wait(py, timeout)
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Waits for the next output; the iteration ends when the appliance stops.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Frame>> {
        self.wait(py, None)
    }

    /// Outputs published since the attach that this consumer lost: the
    /// appliance reused their slots before `next()` got to them.
    #[getter]
    fn lost(&self) -> u64 {
        self.shared.lock().lost()
    }

    /// Outputs handed out as frames.
    #[getter]
    fn read(&self) -> u64 {
        self.shared.lock().read()
    }

    /// Newest published output sequence.
    #[getter]
    fn head(&self) -> u64 {
        self.shared.lock().head()
    }

    /// Every slot of the ring as a `Slot`, in index order: export each once
    /// (`torch.from_dlpack(slot)`) and take `tensors[frame.slot][:len(frame)]`
    /// for each output, with no export per output.
    fn slot_views(&self) -> Vec<Slot> {
        let consumer = self.shared.lock();
        (0..consumer.geometry().slot_count)
            .filter_map(|i| consumer.slot_samples(i).map(|samples| Slot::new(i, samples, &self.shared)))
            .collect()
    }

    /// Outputs a reader may fall behind before it loses some.
    #[getter]
    fn slots(&self) -> usize {
        self.shared.lock().geometry().slot_count
    }

    /// The most samples an output holds.
    #[getter]
    fn capacity(&self) -> usize {
        self.shared.lock().geometry().sample_capacity
    }

    /// `"cpu"` (shared host memory) or `"cuda"` (device memory).
    #[getter]
    fn device(&self) -> &'static str {
        match self.shared.lock().memory_kind() {
            MemoryKind::HostMemfd => "cpu",
            MemoryKind::CudaDevice => "cuda",
        }
    }

    /// True when the appliance closed the connection: no new outputs will come.
    #[getter]
    fn appliance_gone(&self) -> bool {
        self.shared.lock().appliance_gone()
    }

    #[getter]
    fn socket_path(&self) -> PathBuf {
        self.socket.clone()
    }

    fn __repr__(&self) -> String {
        let consumer = self.shared.lock();
        format!(
            "Consumer(socket_path={:?}, device={:?}, slots={}, read={}, lost={})",
            self.socket,
            consumer.memory_kind().name(),
            consumer.geometry().slot_count,
            consumer.read(),
            consumer.lost()
        )
    }
}
