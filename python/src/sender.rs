//! `frameloop.Sender` and `frameloop.replay`: the sensor emulator
//! (`frameloop send`) and capture replay (`frameloop replay`) driven from
//! Python, each run on a thread of its own while the caller waits with the
//! GIL released and Ctrl-C stops it.

use crate::app_error;
use crate::appliance::Appliance;
use frameloop::app::AppError;
use frameloop::capture::replay::{InProcessSetup, ReplayArgs};
use frameloop::sender::{GsoMode, Pacing, Pattern, SendArgs};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const WAIT_STEP: Duration = Duration::from_millis(50);

fn pattern(name: &str) -> PyResult<Pattern> {
    match name {
        "counter" => Ok(Pattern::Counter),
        "random" => Ok(Pattern::Random),
        "static" => Ok(Pattern::Static),
        other => Err(PyValueError::new_err(format!(
            "pattern {other:?} is none of \"counter\", \"random\" or \"static\""
        ))),
    }
}

fn pacing(name: &str) -> PyResult<Pacing> {
    match name {
        "spin" => Ok(Pacing::Spin),
        "sleep" => Ok(Pacing::Sleep),
        other => Err(PyValueError::new_err(format!("pacing {other:?} is neither \"spin\" nor \"sleep\""))),
    }
}

/// The sender's arguments, checked as `frameloop send` checks its flags.
#[allow(clippy::too_many_arguments)]
pub fn send_args(
    to: String,
    rate: f64,
    frame_bytes: u64,
    packet_bytes: usize,
    count: Option<u64>,
    duration: Option<f64>,
    streams: u32,
    pattern_name: &str,
    pacing_name: &str,
) -> PyResult<SendArgs> {
    let args = SendArgs {
        to,
        rate,
        frame_bytes,
        packet_bytes,
        count,
        duration,
        streams,
        pattern: pattern(pattern_name)?,
        gso: GsoMode::Auto,
        pacing: pacing(pacing_name)?,
        catch_up: frameloop::sender::DEFAULT_CATCH_UP,
        bind: None,
        link_gbps: None,
    };
    args.validate().map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(args)
}

/// Runs `job` on a thread of its own until it ends, waiting with the GIL
/// released; Ctrl-C raises `stop` (so the job ends) and goes to `interrupted`.
fn run_stoppable<T: Send + 'static>(
    py: Python<'_>,
    name: &str,
    job: impl FnOnce(&AtomicBool) -> T + Send + 'static,
    interrupted: impl FnOnce(Python<'_>, PyErr) -> PyErr,
) -> PyResult<T> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let handle =
        std::thread::Builder::new().name(name.to_string()).spawn(move || job(&flag)).map_err(|e| {
            pyo3::exceptions::PyRuntimeError::new_err(format!("cannot start the {name} thread: {e}"))
        })?;
    let mut interrupt = None;
    while !handle.is_finished() {
        py.detach(|| std::thread::sleep(WAIT_STEP.min(Duration::from_millis(5))));
        if interrupt.is_none()
            && let Err(e) = py.check_signals()
        {
            stop.store(true, Ordering::Release);
            interrupt = Some(e);
        }
    }
    let result = py
        .detach(|| handle.join())
        .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err(format!("the {name} thread panicked")))?;
    match interrupt {
        Some(e) => Err(interrupted(py, e)),
        None => Ok(result),
    }
}

/// Runs the sender to its count or duration; returns its stats as a dict.
pub fn run<'py>(
    py: Python<'py>,
    args: SendArgs,
    interrupted: impl FnOnce(Python<'_>, PyErr) -> PyErr,
) -> PyResult<Bound<'py, PyAny>> {
    let stats = run_stoppable(
        py,
        "frameloop-send",
        move |stop| frameloop::sender::run_sender(&args, stop, |_| {}),
        interrupted,
    )?
    .map_err(|e| app_error(&AppError::Sender(e)))?;
    let value = serde_json::to_value(stats).map_err(|e| PyValueError::new_err(e.to_string()))?;
    crate::json_to_python(py, &value)
}

/// Where a `to` argument points: an `Appliance` in this process, or "HOST:PORT".
fn destination(to: &Bound<'_, PyAny>) -> PyResult<SocketAddr> {
    if let Ok(app) = to.cast::<Appliance>() {
        return Ok(app.get().target());
    }
    let text: String = to.extract()?;
    use std::net::ToSocketAddrs;
    text.to_socket_addrs()
        .map_err(|e| {
            PyValueError::new_err(format!(
                "cannot resolve {text:?}: {e}; give HOST:PORT, e.g. \"127.0.0.1:5000\""
            ))
        })?
        .next()
        .ok_or_else(|| PyValueError::new_err(format!("{text:?} resolves to no address")))
}

/// The sensor emulator, as `frameloop send`: frames of `frame_bytes`
/// bytes in datagrams of `packet_bytes` (native header included), `rate`
/// frames per second paced by `pacing` ("spin": on time to the
/// microsecond, a core busy; "sleep": leaves the CPU to others), `count`
/// frames or for `duration` seconds, over `streams` interleaved streams,
/// payloads following `pattern` ("counter", "random", "static").
/// `to` is an `Appliance` of this process or "HOST:PORT".
#[pyclass(module = "frameloop", name = "Sender", frozen)]
pub struct Sender {
    args: SendArgs,
}

#[pymethods]
impl Sender {
    #[new]
    #[pyo3(signature = (to, *, rate=1000.0, frame_bytes=65536, packet_bytes=8972, count=None, duration=None,
                        streams=1, pattern="counter", pacing="spin"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        to: &Bound<'_, PyAny>,
        rate: f64,
        frame_bytes: u64,
        packet_bytes: usize,
        count: Option<u64>,
        duration: Option<f64>,
        streams: u32,
        pattern: &str,
        pacing: &str,
    ) -> PyResult<Self> {
        if count.is_none() && duration.is_none() {
            return Err(PyValueError::new_err(
                "give count= or duration=: a sender without either would never end",
            ));
        }
        let to = destination(to)?.to_string();
        Ok(Self {
            args: send_args(to, rate, frame_bytes, packet_bytes, count, duration, streams, pattern, pacing)?,
        })
    }

    /// Sends every frame (the GIL released) and returns the sender's stats
    /// (frames, packets, bytes, rates, schedule lag, errors) as a dict.
    /// Ctrl-C stops the sender and raises KeyboardInterrupt.
    fn run<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        run(py, self.args.clone(), |_, e| e)
    }

    /// The payload frame `seq` of `stream` carries (what a consumer checks against).
    #[pyo3(signature = (seq, stream=0))]
    fn payload<'py>(&self, py: Python<'py>, seq: u64, stream: u32) -> Bound<'py, pyo3::types::PyBytes> {
        pyo3::types::PyBytes::new(py, &self.args.pattern.frame(stream, seq, self.args.frame_bytes as usize))
    }

    fn __repr__(&self) -> String {
        format!(
            "Sender(to={:?}, rate={}, frame_bytes={}, packet_bytes={}, count={:?}, duration={:?})",
            self.args.to,
            self.args.rate,
            self.args.frame_bytes,
            self.args.packet_bytes,
            self.args.count,
            self.args.duration
        )
    }
}

/// Replays a pcap or pcapng capture (tcpdump, Wireshark, `frameloop
/// record`, `Appliance(record=...)`), as `frameloop replay`: to `to` (an
/// `Appliance` of this process or "HOST:PORT") at the capture's timing
/// times `speed` (or as fast as possible with `max_rate`), or without `to`
/// in-process through the reassembly and the chain of `config` (dict, path
/// or None for the defaults). `ports` and `streams` keep only those
/// datagrams. Returns the summary as a dict. Ctrl-C stops the replay.
#[pyfunction]
#[pyo3(signature = (path, to=None, *, speed=1.0, max_rate=false, ports=Vec::new(), streams=Vec::new(),
                    config=None, max_gap_ms=ReplayArgs::DEFAULT_MAX_GAP_MS))]
#[allow(clippy::too_many_arguments)]
pub fn replay<'py>(
    py: Python<'py>,
    path: PathBuf,
    to: Option<&Bound<'py, PyAny>>,
    speed: f64,
    max_rate: bool,
    ports: Vec<u16>,
    streams: Vec<u32>,
    config: Option<&Bound<'py, PyAny>>,
    max_gap_ms: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let mut args = ReplayArgs::new(path);
    args.to = to.map(destination).transpose()?;
    (args.speed, args.max_rate, args.ports, args.streams, args.max_gap_ms) =
        (speed, max_rate, ports, streams, max_gap_ms);
    let setup = match args.to {
        Some(_) => None,
        None => {
            let cfg = crate::config::read(config, None, None)?.config;
            let rtp = match &cfg.rtp {
                Some(r) => Some(r.resolve().map_err(crate::config::config_error)?),
                None => None,
            };
            args.rtp = rtp.is_some();
            Some(InProcessSetup::from_config(&cfg, rtp))
        }
    };
    let summary = run_stoppable(
        py,
        "frameloop-replay",
        move |stop| frameloop::capture::replay::replay(&args, setup.as_ref(), stop),
        |_, e| e,
    )?
    .map_err(|e| app_error(&AppError::Capture(e)))?;
    let d = PyDict::new(py);
    d.set_item("packets", summary.packets)?;
    d.set_item("datagrams", summary.datagrams)?;
    d.set_item("bytes", summary.bytes)?;
    d.set_item("frames", summary.frames)?;
    d.set_item("send_errors", summary.send_errors)?;
    d.set_item("capture_span_ns", summary.capture_span_ns)?;
    d.set_item("wall_ns", summary.wall_ns)?;
    let skipped = PyDict::new(py);
    for (reason, n) in &summary.skipped {
        skipped.set_item(format!("{reason:?}"), n)?;
    }
    d.set_item("skipped", skipped)?;
    d.set_item("ingest_counters", summary.ingest_counters.clone())?;
    d.set_item("gaps_shortened", summary.gaps_shortened)?;
    d.set_item("ended_early", summary.ended_early.clone())?;
    Ok(d)
}
