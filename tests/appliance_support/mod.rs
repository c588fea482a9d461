//! Shared by the whole-appliance tests: a host-backend appliance on an
//! ephemeral loopback port that collects every result, polling waits, and an
//! oracle that computes a chain's results straight from the CPU reference
//! operators (not through `CpuChain`), so a result can be checked without
//! trusting the pipeline's own chaining code.

#![allow(dead_code)] // each test binary uses its own subset

pub mod threads;

use frameloop::app::{Appliance, Report, StartOptions};
use frameloop::config::{BackendChoice, Config};
use frameloop::ingest::IngestSnapshot;
use frameloop::ops::{OpSpec, cpu};
use frameloop::ring::ResultRecord;
use frameloop::ring::layout::{RESULT_HAS_DETECT, RESULT_HAS_STATS};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long any wait in these tests may take before it fails: far above what
/// an idle machine needs, so a loaded 2-core machine does not fail a test.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Appliance tests of one binary run one at a time: each starts a receiver,
/// a busy resident loop and a result thread, and two cores are not enough to
/// run several of those side by side without starving one.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A host-backend config on an ephemeral loopback port with `chain`.
/// Frames time out only after a second, so a descheduled thread never turns
/// a frame in the middle of its burst incomplete.
pub fn host_config(chain: Vec<OpSpec>) -> Config {
    let mut cfg = Config { backend: BackendChoice::Host, chain, ..Config::default() };
    cfg.ingest.bind = "127.0.0.1:0".into();
    cfg.ingest.reassembly.frame_timeout_ms = 1000;
    // Do not spin a core while idle: other test threads need it.
    cfg.loop_.data_not_ready_sleep_interval_us = 100;
    cfg
}

/// Polls `condition` every millisecond until it returns `Some`, failing the
/// test (with `describe`'s account of the state) after [`PATIENCE`].
pub fn wait_for<T>(what: &str, mut condition: impl FnMut() -> Option<T>, describe: impl Fn() -> String) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = condition() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}; state: {}", describe());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A running appliance and every result its result thread has seen.
pub struct Running {
    pub app: Appliance,
    results: Arc<Mutex<Vec<ResultRecord>>>,
}

impl Running {
    pub fn start(cfg: &Config) -> Self {
        let running = Self::start_any(cfg);
        assert_eq!(running.app.backend().name(), "host");
        running
    }

    /// Starts on whatever backend `cfg` asks for.
    pub fn start_any(cfg: &Config) -> Self {
        Self::start_with_options(cfg, |_| {})
    }

    /// Starts with the options `adjust` sets besides the result collector.
    pub fn start_with_options(cfg: &Config, adjust: impl FnOnce(&mut StartOptions)) -> Self {
        let results = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&results);
        let mut opts = StartOptions {
            histogram_log: None,
            on_result: Some(Box::new(move |r: &ResultRecord| sink.lock().unwrap().push(*r))),
            ..Default::default()
        };
        adjust(&mut opts);
        let app = Appliance::start(cfg, opts).expect("the appliance starts");
        Running { app, results }
    }

    pub fn addr(&self) -> SocketAddr {
        self.app.local_addr()
    }

    /// A copy of the results seen so far, in arrival order.
    pub fn results(&self) -> Vec<ResultRecord> {
        self.results.lock().unwrap().clone()
    }

    /// Waits until at least `n` results were seen; returns them all.
    pub fn wait_results(&self, n: usize) -> Vec<ResultRecord> {
        wait_for(
            &format!("{n} results"),
            || {
                let r = self.results.lock().unwrap();
                (r.len() >= n).then(|| r.clone())
            },
            || {
                format!(
                    "{} results, ingest {:?}, loop {:?}",
                    self.results().len(),
                    self.app.ingest(),
                    self.app.loop_stats()
                )
            },
        )
    }

    /// Waits until the ingest counters satisfy `done`; returns that snapshot.
    pub fn wait_ingest(&self, what: &str, done: impl Fn(&IngestSnapshot) -> bool) -> IngestSnapshot {
        wait_for(what, || Some(self.app.ingest()).filter(|s| done(s)), || format!("{:?}", self.app.ingest()))
    }

    /// Lets the loop finish what is in the ring, stops everything and returns
    /// the report and every result.
    pub fn stop(self) -> (Report, Vec<ResultRecord>) {
        assert!(self.app.drain(PATIENCE), "the resident loop did not drain the ring");
        let report = self.app.stop().expect("the appliance stops cleanly");
        let results = self.results.lock().unwrap().clone();
        (report, results)
    }
}

/// What a chain should report for one frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Expected {
    pub stats: Option<cpu::Stats>,
    pub detect: Option<(u32, i32)>,
    pub output_len: u32,
}

/// Runs `chain` over `payload` with the CPU reference operators, one fresh
/// buffer per stage.
pub fn reference_chain(chain: &[OpSpec], payload: &[u8]) -> Expected {
    let mut samples: Vec<f32> = Vec::new();
    let mut expected = Expected { stats: None, detect: None, output_len: 0 };
    for op in chain {
        match op {
            OpSpec::Unpack { format, scale, offset } => {
                samples = vec![0.0; format.samples_in(payload.len())];
                let n = cpu::unpack(payload, *format, *scale, *offset, &mut samples);
                assert_eq!(n, samples.len());
            }
            OpSpec::Fir { taps } => {
                let mut out = vec![0.0; samples.len()];
                cpu::fir(&samples, taps, &mut out);
                samples = out;
            }
            OpSpec::Filter2d { width, kernel } => {
                let mut out = vec![0.0; samples.len()];
                cpu::filter2d(&samples, *width as usize, kernel, &mut out);
                samples = out;
            }
            OpSpec::Stats => expected.stats = Some(cpu::stats(&samples)),
            OpSpec::Threshold { level } => expected.detect = Some(cpu::threshold(&samples, *level)),
            OpSpec::Delay { .. } => {}
            OpSpec::Fft(spec) => {
                let mut out = vec![0.0; spec.output_len(samples.len())];
                frameloop::ops::fft::FftPlan::new(spec).run(&samples, &mut out);
                samples = out;
            }
            OpSpec::Kernel(k) => panic!("user kernel {} has no CPU reference", k.entry),
        }
    }
    expected.output_len = samples.len() as u32;
    expected
}

fn close(what: &str, got: f32, want: f32, r: &ResultRecord) {
    let tolerance = 1e-5 * want.abs().max(1.0);
    assert!(
        (got - want).abs() <= tolerance,
        "{what} of stream {} frame {}: got {got}, expected {want}",
        r.stream_id,
        r.frame_seq
    );
}

/// Checks one result against the reference: stats within a relative 1e-5,
/// detect count, first index and output length exact, and the result flags
/// saying which fields are valid.
pub fn check_result(r: &ResultRecord, want: &Expected) {
    let id = format!("stream {} frame {}", r.stream_id, r.frame_seq);
    assert_eq!(r.output_len, want.output_len, "output_len of {id}");
    assert_eq!(r.result_flags & RESULT_HAS_STATS != 0, want.stats.is_some(), "stats flag of {id}");
    assert_eq!(r.result_flags & RESULT_HAS_DETECT != 0, want.detect.is_some(), "detect flag of {id}");
    if let Some(s) = want.stats {
        close("sum", r.sum, s.sum, r);
        close("min", r.min, s.min, r);
        close("max", r.max, s.max, r);
        close("mean", r.mean, s.mean, r);
    }
    if let Some((count, first)) = want.detect {
        assert_eq!(
            (r.detect_count, r.first_detect_index),
            (count, first),
            "detect count and first index of {id}"
        );
    }
}

/// Checks that a result's timestamps are all stamped and in the order of a
/// frame's life: sent, first and last packet received, published, detected, done.
pub fn check_timestamps(r: &ResultRecord) {
    let stamps = [
        ("sender_ts", r.sender_ts_ns),
        ("first_rx", r.first_rx_ns),
        ("last_rx", r.last_rx_ns),
        ("published", r.published_ns),
        ("detect", r.detect_ns),
        ("done", r.done_ns),
    ];
    for pair in stamps.windows(2) {
        let ((a, ta), (b, tb)) = (pair[0], pair[1]);
        assert!(ta > 0 && ta <= tb, "stream {} frame {}: {a} {ta} then {b} {tb}", r.stream_id, r.frame_seq);
    }
}

/// Checks the result sequence numbers: 1, 2, 3, ... in arrival order, and
/// ring sequences rising.
pub fn check_sequences(results: &[ResultRecord]) {
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r.result_seq, i as u64 + 1, "result sequences are contiguous from 1");
    }
    for pair in results.windows(2) {
        assert!(
            pair[0].ring_seq < pair[1].ring_seq,
            "ring sequences rise: {} then {}",
            pair[0].ring_seq,
            pair[1].ring_seq
        );
    }
}
