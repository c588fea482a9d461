//! [`ResultThread`]: runs a [`ResultSink`] on its own thread with the real
//! clock, polling the result ring, and hands out snapshots for the progress
//! line and the final summary, computed by the thread between results.

use super::MetricsError;
use super::sink::ResultSink;
use super::summary::Summary;
use crate::clock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long [`ResultThread::snapshot`] waits for the thread to compute the
/// summary before computing it itself under the sink's lock (a thread that
/// hangs in a callback or a test's stall still leaves the lock free).
const SUMMARY_WAIT: Duration = Duration::from_millis(100);

/// The result thread. Dropping it stops the thread (without the final summary).
pub struct ResultThread {
    sink: Arc<Mutex<ResultSink>>,
    stop: Arc<AtomicBool>,
    progress: Arc<ResultProgress>,
    summaries: Arc<SummaryRequests>,
    /// Invariant: `Some` until `stop` or drop joins it.
    handle: Option<JoinHandle<()>>,
}

/// When the result thread spins instead of sleeping between polls.
pub struct ResultSpin {
    /// Spin while a result arrived within this long, or while a published
    /// frame has waited for its result less than this long.
    pub budget: Duration,
    /// The frame ring's head: while it is ahead of the newest result seen,
    /// a result is on its way. `None` where reading it is too slow to poll
    /// (a ring in GPU memory): then only the flow of results counts.
    pub frame_head: Option<Box<dyn Fn() -> u64 + Send>>,
    /// Sleeps until the frame ring's head passes the given sequence or the
    /// timeout ends ([`crate::ring::FrameRing::wait_published_past`]). Where
    /// a device writes the results, which cannot wake the thread, it sleeps
    /// here instead of on the result ring, so a frame's publication wakes it
    /// to spin for that frame's result; results are still polled at the
    /// thread's interval. `None`: sleep on the result ring.
    pub frame_wait: Option<FrameWait>,
}

/// How the result thread sleeps on the frame ring ([`ResultSpin::frame_wait`]).
pub type FrameWait = Box<dyn Fn(u64, Duration) -> bool + Send>;

/// What the result thread has done, readable from any thread without the
/// sink's lock (for a watchdog).
#[derive(Debug, Default)]
pub struct ResultProgress {
    /// Loop iterations: advances on every poll, results or not.
    pub iterations: AtomicU64,
    /// The result ring sequence the thread has read up to.
    pub read_position: AtomicU64,
}

/// Runs on the result thread once per loop, outside the sink's lock, with
/// the thread's stop flag (a test hook can hang the thread there).
pub type LoopHook = Box<dyn FnMut(&AtomicBool) + Send>;

/// Why placing the result thread (the `place` of
/// [`ResultThread::spawn_placed`]) failed: the error of the layer that
/// placed it, kept whole.
pub type PlaceError = Box<dyn std::error::Error + Send + Sync>;

/// Summaries other threads asked for, which the result thread computes when
/// no result is due. A summary walks every segment's histogram (0.05 ms,
/// 0.35 ms when the means walked every bucket too); computed by the asking
/// thread under the sink's lock, it held up
/// every result that arrived meanwhile, three times a second (the progress
/// line and the metrics board), which put those stalls into the tail of
/// every latency the appliance reports.
#[derive(Default)]
struct SummaryRequests {
    /// Requests made so far (each [`ResultThread::snapshot`] adds one).
    requested: AtomicU64,
    /// The newest summary the thread computed, with the number of the last
    /// request it answers (requests up to that number are answered by it).
    served: Mutex<Option<(u64, Summary)>>,
    ready: Condvar,
}

impl SummaryRequests {
    fn served(&self) -> MutexGuard<'_, Option<(u64, Summary)>> {
        self.served.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers requests up to `up_to` with `summary`.
    fn serve(&self, up_to: u64, summary: Summary) {
        *self.served() = Some((up_to, summary));
        self.ready.notify_all();
    }

    /// The summary answering request `request`, waiting until `deadline`
    /// or until `running` says the thread has ended.
    fn wait_for(&self, request: u64, deadline: Instant, running: impl Fn() -> bool) -> Option<Summary> {
        let mut served = self.served();
        loop {
            if let Some((up_to, summary)) = served.as_ref()
                && *up_to >= request
            {
                return Some(summary.clone());
            }
            let now = Instant::now();
            if now >= deadline || !running() {
                return None;
            }
            // Short waits, so that a thread that ended is noticed.
            let wait = (deadline - now).min(Duration::from_millis(5));
            served = self.ready.wait_timeout(served, wait).unwrap_or_else(PoisonError::into_inner).0;
        }
    }
}

/// Locks the sink even if a callback panicked while holding it: the
/// histograms stay consistent between two results.
fn lock(sink: &Mutex<ResultSink>) -> MutexGuard<'_, ResultSink> {
    sink.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ResultThread {
    /// Starts draining `sink`, waiting up to `poll_interval` for the ring's
    /// head to move when it is empty: a host writer wakes the thread at once
    /// ([`crate::ring::ResultRing::wait_past`]), results a device writes wait
    /// at most that long to be seen.
    pub fn spawn(sink: ResultSink, poll_interval: Duration) -> Result<Self, MetricsError> {
        Self::spawn_placed(sink, poll_interval, None, None, || Ok(()))
    }

    /// As [`ResultThread::spawn`], but spinning instead of sleeping while
    /// results flow or a result is on its way (`spin`), so the moment a
    /// result is seen is not delayed by a sleep; between frames it sleeps
    /// and costs no CPU. Runs `place` first on the new thread (core
    /// affinity, priority); its error fails the spawn. `each_loop` runs once
    /// per loop.
    pub fn spawn_placed(
        sink: ResultSink,
        poll_interval: Duration,
        spin: Option<ResultSpin>,
        each_loop: Option<LoopHook>,
        place: impl FnOnce() -> Result<(), PlaceError> + Send + 'static,
    ) -> Result<Self, MetricsError> {
        let (placed_tx, placed_rx) = std::sync::mpsc::channel();
        let progress = Arc::new(ResultProgress {
            iterations: AtomicU64::new(0),
            read_position: AtomicU64::new(sink.read_position()),
        });
        let sink = Arc::new(Mutex::new(sink));
        let stop = Arc::new(AtomicBool::new(false));
        let (thread_sink, thread_stop) = (Arc::clone(&sink), Arc::clone(&stop));
        let thread_progress = Arc::clone(&progress);
        let summaries = Arc::new(SummaryRequests::default());
        let thread_summaries = Arc::clone(&summaries);
        let handle = std::thread::Builder::new()
            .name("frameloop-results".into())
            .spawn(move || {
                let placed = place();
                let ok = placed.is_ok();
                let _ = placed_tx.send(placed);
                if ok {
                    let shared = Shared {
                        sink: &thread_sink,
                        stop: &thread_stop,
                        progress: &thread_progress,
                        summaries: &thread_summaries,
                    };
                    run(shared, poll_interval, spin, each_loop)
                }
            })
            .map_err(MetricsError::Spawn)?;
        if let Ok(Err(e)) = placed_rx.recv() {
            let _ = handle.join();
            return Err(MetricsError::Place(e));
        }
        Ok(Self { sink, stop, progress, summaries, handle: Some(handle) })
    }

    /// The thread's progress counters (shared; they keep advancing).
    pub fn progress(&self) -> Arc<ResultProgress> {
        Arc::clone(&self.progress)
    }

    /// Uses a re-measured GPU clock offset for the results that follow.
    pub fn set_clock_offset(&self, clock_offset_ns: i64) {
        lock(&self.sink).set_clock_offset(clock_offset_ns);
    }

    /// Uses a re-measured offset, taken at `measured_at_ns`, and the drift
    /// between the clocks (ppb) for the results that follow.
    pub fn set_clock(&self, clock_offset_ns: i64, measured_at_ns: u64, drift_ppb: i64) {
        lock(&self.sink).set_clock(clock_offset_ns, measured_at_ns, drift_ppb);
    }

    /// True until the thread ends (a panic ends it early).
    pub fn is_running(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Summary of every result recorded so far (up to the moment of the
    /// call, or later). The result thread computes it when no result is due,
    /// so asking never delays a result; a thread that does not answer within
    /// `SUMMARY_WAIT` (ended, or hung in a callback) leaves it to this
    /// caller, under the sink's lock.
    pub fn snapshot(&self) -> Summary {
        let request = self.summaries.requested.fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(h) = &self.handle {
            // Asleep between frames, it would see the request only at its wait's end.
            h.thread().unpark();
        }
        self.summaries
            .wait_for(request, Instant::now() + SUMMARY_WAIT, || self.is_running())
            .unwrap_or_else(|| lock(&self.sink).summary())
    }

    /// A copy of the latency histograms of every result recorded so far
    /// (to plot, merge or encode). Taken under the sink's lock: the result
    /// thread waits for the copy (microseconds) if a result comes meanwhile.
    pub fn histograms(&self) -> super::histograms::LatencyHistograms {
        lock(&self.sink).histograms().clone()
    }

    /// Stops the thread, drains the last results, writes the interval log's
    /// last interval and returns the final summary (a log that could not be
    /// written costs only its lost intervals, counted by the log).
    pub fn stop(mut self) -> Result<Summary, MetricsError> {
        self.stop.store(true, Ordering::Release);
        let panicked = match self.handle.take() {
            Some(h) => {
                // Asleep in a ring's wait, it would see the flag only at the wait's end.
                h.thread().unpark();
                h.join().is_err()
            }
            None => false,
        };
        let mut sink = lock(&self.sink);
        sink.finish(clock::realtime_ns());
        if panicked {
            return Err(MetricsError::Panicked);
        }
        Ok(sink.summary())
    }
}

/// What the result thread shares with its [`ResultThread`].
struct Shared<'a> {
    sink: &'a Mutex<ResultSink>,
    stop: &'a AtomicBool,
    progress: &'a ResultProgress,
    summaries: &'a SummaryRequests,
}

fn run(
    shared: Shared<'_>,
    poll_interval: Duration,
    spin: Option<ResultSpin>,
    mut each_loop: Option<LoopHook>,
) {
    let Shared { sink, stop, progress, summaries } = shared;
    let ring = std::sync::Arc::clone(lock(sink).ring());
    let budget = spin.as_ref().map_or(Duration::ZERO, |s| s.budget);
    let (frame_head, frame_wait) = spin.map_or((None, None), |s| (s.frame_head, s.frame_wait));
    // Spin while results flow (a result or a pending frame within the
    // budget), sleep once the stream has been quiet for the whole budget.
    let mut last_activity: Option<Instant> = None;
    let mut pending_since: Option<Instant> = None;
    // Head for which waiting already ran out of budget: sleep until it moves.
    let mut gave_up_at_head = 0u64;
    // Summary requests answered, and when the thread first saw the oldest open one.
    let mut summaries_served = 0u64;
    let mut summary_asked_at: Option<Instant> = None;
    while !stop.load(Ordering::Acquire) {
        let (drained, last_seen, read_to) = {
            let mut s = lock(sink);
            let n = s.poll_then_stamp(clock::realtime_ns);
            s.tick(clock::realtime_ns());
            progress.read_position.store(s.read_position(), Ordering::Relaxed);
            (n, s.last_ring_seq(), s.read_position())
        };
        progress.iterations.fetch_add(1, Ordering::Relaxed);
        if let Some(hook) = each_loop.as_mut() {
            hook(stop);
        }
        let head = frame_head.as_ref().map_or(0, |head| head());
        // A published frame whose result has not been seen (within the budget).
        let due = head > last_seen && head != gave_up_at_head;
        if drained > 0 {
            last_activity = Some(Instant::now());
            pending_since = None;
        } else if due {
            let since = *pending_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= budget {
                gave_up_at_head = head;
                pending_since = None;
            }
        } else {
            pending_since = None;
        }
        // Summaries in the gaps between results; one asked for while results
        // keep coming is answered after the budget at the latest.
        let requested = summaries.requested.load(Ordering::Acquire);
        if requested > summaries_served {
            let asked_at = *summary_asked_at.get_or_insert_with(Instant::now);
            if !due || asked_at.elapsed() >= budget {
                let summary = lock(sink).summary_at(clock::realtime_ns());
                summaries.serve(requested, summary);
                (summaries_served, summary_asked_at) = (requested, None);
                continue;
            }
        }
        if drained > 0 {
            continue;
        }
        let flowing = last_activity.is_some_and(|t| t.elapsed() < budget);
        if pending_since.is_some() || flowing {
            std::hint::spin_loop();
        } else if let Some(wait) = frame_wait.as_ref() {
            wait(head, poll_interval);
        } else {
            ring.wait_past(read_to, poll_interval);
        }
    }
}

impl Drop for ResultThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            // A panic here was already reported by the panic hook.
            let _ = h.join();
        }
    }
}
