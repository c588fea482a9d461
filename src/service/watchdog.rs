//! The systemd watchdog driven by pipeline progress: a small thread that,
//! every half watchdog interval, reads each stage's progress counter and the
//! work waiting for it, and sends `WATCHDOG=1` only if no stage failed to
//! advance while work was offered to it. A stalled receiver, resident loop or
//! result thread therefore stops the pings (the log names it), and systemd
//! restarts the service once `WatchdogSec=` has passed; an idle pipeline
//! keeps pinging.

use super::notify::Notifier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Environment variable of the test hook: after this many milliseconds the
/// watchdog sees every progress counter frozen, exactly as if the pipeline
/// had stalled. For tests only; never set it on a production unit.
pub const TEST_STALL_ENV: &str = "FRAMELOOP_TEST_STALL_AFTER_MS";

/// One counter that advances while a part of the pipeline works, such as
/// the resident loop's `LoopStats::iterations` (which advances on every
/// iteration, idle or not) or the receiver's poll-loop count.
pub struct ProgressSource {
    name: String,
    read: Box<dyn Fn() -> u64 + Send>,
    /// Work offered to the stage and not yet taken (ring head minus the
    /// stage's position); None for a stage whose counter always advances.
    backlog: Option<Box<dyn Fn() -> u64 + Send>>,
}

impl ProgressSource {
    /// A source called `name` (used in log lines) read by `read`. `read` runs
    /// on the watchdog thread, so it should only load atomics.
    pub fn new(name: impl Into<String>, read: impl Fn() -> u64 + Send + 'static) -> Self {
        Self { name: name.into(), read: Box::new(read), backlog: None }
    }

    /// A source whose counter (`read`, the stage's consumed position) only
    /// has to advance while `backlog` reports work waiting for the stage: an
    /// idle stage with nothing offered is not a stall.
    pub fn with_backlog(
        name: impl Into<String>,
        read: impl Fn() -> u64 + Send + 'static,
        backlog: impl Fn() -> u64 + Send + 'static,
    ) -> Self {
        Self { name: name.into(), read: Box::new(read), backlog: Some(Box::new(backlog)) }
    }

    /// The work waiting for the stage, or None when the counter must always
    /// advance.
    pub fn backlog(&self) -> Option<u64> {
        self.backlog.as_ref().map(|b| b())
    }

    /// The source's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The counter's current value.
    pub fn read(&self) -> u64 {
        (self.read)()
    }
}

impl std::fmt::Debug for ProgressSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressSource").field("name", &self.name).finish_non_exhaustive()
    }
}

/// What one watchdog check decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every counter advanced: send `WATCHDOG=1`.
    Ping,
    /// These sources (indices) did not advance: withhold the ping.
    Stalled(Vec<usize>),
}

/// The pure decision: compares each check's counter values with the
/// previous check's.
#[derive(Debug, Clone)]
pub struct ProgressGate {
    /// Counter values at the previous check, one per source.
    last: Vec<u64>,
}

impl ProgressGate {
    /// A gate whose first check compares against `initial`.
    pub fn new(initial: Vec<u64>) -> Self {
        Self { last: initial }
    }

    /// Decides on the values `now` (same order and length as `initial`),
    /// then remembers them for the next check. Every counter must advance.
    pub fn check(&mut self, now: &[u64]) -> Verdict {
        let no_backlog = vec![None; now.len()];
        self.check_with_backlog(now, &no_backlog)
    }

    /// Like [`ProgressGate::check`], but a source whose `backlog` is
    /// `Some(0)` (nothing offered to it) is idle, not stalled, even if its
    /// counter did not advance. `None` means the counter must advance.
    pub fn check_with_backlog(&mut self, now: &[u64], backlog: &[Option<u64>]) -> Verdict {
        debug_assert_eq!(now.len(), self.last.len(), "one value per progress source");
        debug_assert_eq!(backlog.len(), now.len(), "one backlog per progress source");
        let stalled: Vec<usize> = now
            .iter()
            .zip(&self.last)
            .zip(backlog)
            .enumerate()
            .filter(|(_, ((n, l), b))| n <= l && **b != Some(0))
            .map(|(i, _)| i)
            .collect();
        self.last.clear();
        self.last.extend_from_slice(now);
        if stalled.is_empty() { Verdict::Ping } else { Verdict::Stalled(stalled) }
    }
}

/// Work offered to a stage and not yet taken: the offering side's head
/// minus the stage's position (0 when the stage is level or ahead).
pub fn backlog(head: u64, position: u64) -> u64 {
    head.saturating_sub(position)
}

/// The sources and the gate together: one [`ProgressWatch::check`] reads
/// every counter and backlog once and decides. No clock is read, so tests
/// drive it with plain atomics.
#[derive(Debug)]
pub struct ProgressWatch {
    sources: Vec<ProgressSource>,
    gate: ProgressGate,
}

impl ProgressWatch {
    /// Watches `sources`, starting from their current values.
    pub fn new(sources: Vec<ProgressSource>) -> Self {
        let gate = ProgressGate::new(sources.iter().map(ProgressSource::read).collect());
        Self { sources, gate }
    }

    /// Decides on the counters' values now, as seen through `adjust` (the
    /// test stall hook's freeze; identity otherwise).
    pub fn check_adjusted(&mut self, adjust: impl FnOnce(Vec<u64>) -> Vec<u64>) -> Verdict {
        let values = adjust(self.sources.iter().map(ProgressSource::read).collect());
        let backlog: Vec<Option<u64>> = self.sources.iter().map(ProgressSource::backlog).collect();
        self.gate.check_with_backlog(&values, &backlog)
    }

    /// Decides on the counters' values now.
    pub fn check(&mut self) -> Verdict {
        self.check_adjusted(|v| v)
    }

    /// The names of the sources `stalled` lists.
    pub fn names(&self, stalled: &[usize]) -> Vec<&str> {
        stalled.iter().filter_map(|&i| self.sources.get(i)).map(ProgressSource::name).collect()
    }
}

/// The test hook: from `after` on, the counters read as the values they had
/// then, as if the pipeline had stopped.
#[derive(Debug, Clone)]
pub struct StallHook {
    after: Duration,
    frozen: Option<Vec<u64>>,
}

impl StallHook {
    /// The hook requested by [`TEST_STALL_ENV`], if set to a number of ms.
    pub fn from_env() -> Option<Self> {
        Self::parse(std::env::var(TEST_STALL_ENV).ok().as_deref())
    }

    /// Parses the variable's value.
    pub fn parse(value: Option<&str>) -> Option<Self> {
        let ms: u64 = value?.trim().parse().ok()?;
        Some(Self { after: Duration::from_millis(ms), frozen: None })
    }

    /// The values the watchdog sees at `elapsed` since it started, given the
    /// real values `real`.
    pub fn apply(&mut self, elapsed: Duration, real: Vec<u64>) -> Vec<u64> {
        if elapsed < self.after {
            return real;
        }
        if self.frozen.is_none() {
            tracing::warn!(
                hook = TEST_STALL_ENV,
                after_ms = self.after.as_millis() as u64,
                "test hook: pipeline progress frozen from now on"
            );
        }
        self.frozen.get_or_insert(real).clone()
    }
}

/// Shared between the pinger thread and its handle.
struct Shared {
    stop: Mutex<bool>,
    wake: Condvar,
    pings: AtomicU64,
    withheld: AtomicU64,
}

/// The running watchdog thread. Dropping it (or [`WatchdogPinger::stop`])
/// stops the pings and joins the thread.
pub struct WatchdogPinger {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    period: Duration,
}

impl WatchdogPinger {
    /// Starts pinging at half the notifier's watchdog interval; None when the
    /// manager asked for no watchdog (`WATCHDOG_USEC` unset) or the thread
    /// cannot be spawned (logged). Honours [`TEST_STALL_ENV`]. Call it after
    /// `READY=1`: systemd arms the watchdog from then on.
    pub fn start(notifier: Arc<Notifier>, sources: Vec<ProgressSource>) -> Option<Self> {
        let interval = notifier.watchdog_interval()?;
        match Self::spawn(notifier, interval, sources, StallHook::from_env()) {
            Ok(pinger) => Some(pinger),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the watchdog thread; systemd will restart the service");
                None
            }
        }
    }

    /// Starts pinging through `notifier` every `interval / 2` while every
    /// source advances. With no sources, pings are unconditional.
    pub fn spawn(
        notifier: Arc<Notifier>,
        interval: Duration,
        sources: Vec<ProgressSource>,
        hook: Option<StallHook>,
    ) -> std::io::Result<Self> {
        let period = (interval / 2).max(Duration::from_millis(1));
        let shared = Arc::new(Shared {
            stop: Mutex::new(false),
            wake: Condvar::new(),
            pings: AtomicU64::new(0),
            withheld: AtomicU64::new(0),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("frameloop-watchdog".into())
            .spawn(move || ping_loop(&notifier, period, interval, sources, hook, &thread_shared))?;
        tracing::info!(
            interval_ms = interval.as_millis() as u64,
            period_ms = period.as_millis() as u64,
            "watchdog armed: pings only while the pipeline makes progress"
        );
        Ok(Self { shared, thread: Some(thread), period })
    }

    /// Pings sent so far.
    pub fn pings_sent(&self) -> u64 {
        self.shared.pings.load(Ordering::Relaxed)
    }

    /// Checks that withheld a ping because a counter did not advance.
    pub fn pings_withheld(&self) -> u64 {
        self.shared.withheld.load(Ordering::Relaxed)
    }

    /// Time between two checks (half the watchdog interval).
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Stops the thread and waits for it (within one check's work).
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Ok(mut stop) = self.shared.stop.lock() {
            *stop = true;
        }
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the watchdog thread panicked");
        }
    }
}

impl Drop for WatchdogPinger {
    fn drop(&mut self) {
        self.shut_down();
    }
}

fn ping_loop(
    notifier: &Notifier,
    period: Duration,
    interval: Duration,
    sources: Vec<ProgressSource>,
    mut hook: Option<StallHook>,
    shared: &Shared,
) {
    let started = Instant::now();
    let mut watch = ProgressWatch::new(sources);
    let mut stalled_since: Option<Instant> = None;
    let mut next = Instant::now() + period;
    loop {
        // Sleep until the next check, waking early only to stop.
        let Ok(mut stop) = shared.stop.lock() else { return };
        loop {
            if *stop {
                return;
            }
            let now = Instant::now();
            if now >= next {
                break;
            }
            stop = match shared.wake.wait_timeout(stop, next - now) {
                Ok((guard, _)) => guard,
                Err(_) => return,
            };
        }
        drop(stop);
        next += period;
        let verdict = watch.check_adjusted(|real| match hook.as_mut() {
            Some(h) => h.apply(started.elapsed(), real),
            None => real,
        });
        match verdict {
            Verdict::Ping => {
                notifier.watchdog();
                shared.pings.fetch_add(1, Ordering::Relaxed);
                if let Some(since) = stalled_since.take() {
                    tracing::info!(
                        stalled_ms = since.elapsed().as_millis() as u64,
                        "pipeline progress resumed; watchdog pings resumed"
                    );
                }
            }
            Verdict::Stalled(stalled) => {
                shared.withheld.fetch_add(1, Ordering::Relaxed);
                if stalled_since.is_none() {
                    stalled_since = Some(Instant::now());
                    let names = watch.names(&stalled).join(", ");
                    tracing::warn!(
                        stalled = names,
                        watchdog_ms = interval.as_millis() as u64,
                        "stalled stage: {names} made no progress since the last check though it had work or must always advance; \
                         withholding WATCHDOG=1 (systemd restarts the service if this lasts the watchdog interval)"
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    #[test]
    fn gate_pings_only_when_every_counter_advanced() {
        let mut gate = ProgressGate::new(vec![10, 5]);
        assert_eq!(gate.check(&[11, 6]), Verdict::Ping);
        assert_eq!(gate.check(&[11, 7]), Verdict::Stalled(vec![0]));
        assert_eq!(gate.check(&[12, 7]), Verdict::Stalled(vec![1]));
        assert_eq!(gate.check(&[12, 7]), Verdict::Stalled(vec![0, 1]));
        assert_eq!(gate.check(&[13, 8]), Verdict::Ping);
        // A counter that goes backwards (a restarted loop) is not progress.
        assert_eq!(gate.check(&[2, 9]), Verdict::Stalled(vec![0]));
        assert_eq!(gate.check(&[3, 10]), Verdict::Ping);
    }

    #[test]
    fn gate_with_backlog_stalls_only_when_work_is_offered() {
        // Sources: resident loop (frames pending), result thread (results pending).
        let mut gate = ProgressGate::new(vec![0, 0]);
        // Idle: nothing offered, nothing consumed -> ping.
        assert_eq!(gate.check_with_backlog(&[0, 0], &[Some(0), Some(0)]), Verdict::Ping);
        // Progressing with work pending -> ping.
        assert_eq!(gate.check_with_backlog(&[4, 3], &[Some(2), Some(1)]), Verdict::Ping);
        // Resident loop stalled with frames pending -> no ping.
        assert_eq!(gate.check_with_backlog(&[4, 5], &[Some(3), Some(0)]), Verdict::Stalled(vec![0]));
        // Result thread stalled with results pending -> no ping.
        assert_eq!(gate.check_with_backlog(&[6, 5], &[Some(0), Some(7)]), Verdict::Stalled(vec![1]));
        // A source without a backlog (the receiver's poll counter) must advance.
        let mut rx = ProgressGate::new(vec![9]);
        assert_eq!(rx.check_with_backlog(&[9], &[None]), Verdict::Stalled(vec![0]));
        assert_eq!(rx.check_with_backlog(&[10], &[None]), Verdict::Ping);
    }

    /// One stage's counters as the appliance exposes them: the stage's loop
    /// counter, the head of what is offered to it and its position.
    #[derive(Default)]
    struct Stage {
        loops: AtomicU64,
        head: AtomicU64,
        position: AtomicU64,
    }

    impl Stage {
        fn source(self: &Arc<Self>, name: &str, with_backlog: bool) -> ProgressSource {
            let (count, offered) = (Arc::clone(self), Arc::clone(self));
            let read = move || count.loops.load(Ordering::Relaxed);
            if with_backlog {
                let pending = move || {
                    backlog(offered.head.load(Ordering::Relaxed), offered.position.load(Ordering::Relaxed))
                };
                ProgressSource::with_backlog(name, read, pending)
            } else {
                ProgressSource::new(name, read)
            }
        }
        fn offer(&self, n: u64) {
            self.head.fetch_add(n, Ordering::Relaxed);
        }
        /// One loop iteration that takes everything offered.
        fn work(&self) {
            self.loops.fetch_add(1, Ordering::Relaxed);
            self.position.store(self.head.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    #[test]
    fn backlog_is_head_minus_position() {
        assert_eq!(backlog(10, 7), 3);
        assert_eq!(backlog(7, 7), 0);
        // A position ahead of a stale head is no backlog, not a huge one.
        assert_eq!(backlog(3, 7), 0);
    }

    /// Each stage with a backlog: stalled with work pending withholds the
    /// ping and is named; idle pings; progressing pings.
    #[test]
    fn each_stage_withholds_the_ping_only_when_stalled_with_work_pending() {
        for stalled in ["resident loop", "result thread"] {
            let stages: Vec<Arc<Stage>> = (0..2).map(|_| Arc::new(Stage::default())).collect();
            let names = ["resident loop", "result thread"];
            let mut watch =
                ProgressWatch::new(stages.iter().zip(names).map(|(s, n)| s.source(n, true)).collect());
            // Idle: nothing offered, nothing done.
            assert_eq!(watch.check(), Verdict::Ping, "{stalled}: idle");
            // Progressing: work offered and taken.
            for s in &stages {
                s.offer(3);
                s.work();
            }
            assert_eq!(watch.check(), Verdict::Ping, "{stalled}: progressing");
            // One stage stops while work is offered to every stage.
            let i = names.iter().position(|n| *n == stalled).unwrap();
            for (j, s) in stages.iter().enumerate() {
                s.offer(2);
                if j != i {
                    s.work();
                }
            }
            let verdict = watch.check();
            assert_eq!(verdict, Verdict::Stalled(vec![i]), "{stalled}: stalled with work");
            assert_eq!(watch.names(&[i]), vec![stalled]);
            // It stays stalled while the work waits ...
            for (j, s) in stages.iter().enumerate() {
                if j != i {
                    s.work();
                }
            }
            assert_eq!(watch.check(), Verdict::Stalled(vec![i]));
            // ... and pings again once it takes the work.
            stages[i].work();
            assert_eq!(watch.check(), Verdict::Ping, "{stalled}: resumed");
        }
    }

    /// The receiver runs a timed poll, so its loop counter must advance
    /// even when no datagram arrives: a frozen receiver is a stall whatever
    /// the other stages do.
    #[test]
    fn a_receiver_whose_poll_loop_stops_withholds_the_ping() {
        let rx = Arc::new(Stage::default());
        let resident = Arc::new(Stage::default());
        let mut watch =
            ProgressWatch::new(vec![rx.source("receiver", false), resident.source("resident loop", true)]);
        rx.work();
        assert_eq!(watch.check(), Verdict::Ping, "idle receiver polling");
        assert_eq!(watch.check(), Verdict::Stalled(vec![0]), "poll loop stopped");
        assert_eq!(watch.names(&[0]), vec!["receiver"]);
        rx.work();
        assert_eq!(watch.check(), Verdict::Ping);
    }

    #[test]
    fn gate_without_sources_always_pings() {
        let mut gate = ProgressGate::new(Vec::new());
        assert_eq!(gate.check(&[]), Verdict::Ping);
    }

    #[test]
    fn stall_hook_freezes_values_from_its_deadline() {
        assert!(StallHook::parse(None).is_none());
        assert!(StallHook::parse(Some("soon")).is_none());
        let mut hook = StallHook::parse(Some("100")).unwrap();
        assert_eq!(hook.apply(Duration::from_millis(50), vec![1, 2]), vec![1, 2]);
        assert_eq!(hook.apply(Duration::from_millis(100), vec![3, 4]), vec![3, 4]);
        assert_eq!(hook.apply(Duration::from_millis(150), vec![9, 9]), vec![3, 4]);
    }

    fn socket() -> (tempfile::TempDir, Arc<Notifier>, UnixDatagram) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_nonblocking(true).unwrap();
        let notifier =
            Arc::new(Notifier::connect(path.as_os_str(), Some(Duration::from_millis(40))).unwrap());
        (dir, notifier, sock)
    }

    fn drain(sock: &UnixDatagram) -> usize {
        let mut buf = [0u8; 64];
        let mut n = 0;
        while let Ok(len) = sock.recv(&mut buf) {
            assert_eq!(&buf[..len], b"WATCHDOG=1\n");
            n += 1;
        }
        n
    }

    /// Polls `cond` for up to 5 s.
    fn eventually(mut cond: impl FnMut() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// A pinger with a 40 ms interval watching one "resident loop" counter.
    fn loop_pinger(
        notifier: Arc<Notifier>,
        read: impl Fn() -> u64 + Send + 'static,
        hook: Option<StallHook>,
    ) -> WatchdogPinger {
        let source = ProgressSource::new("resident loop", read);
        WatchdogPinger::spawn(notifier, Duration::from_millis(40), vec![source], hook).unwrap()
    }

    #[test]
    fn pings_follow_the_progress_counter() {
        let (_dir, notifier, sock) = socket();
        let counter = Arc::new(AtomicU64::new(0));
        let reader = Arc::clone(&counter);
        let pinger = loop_pinger(notifier, move || reader.load(Ordering::Relaxed), None);
        assert_eq!(pinger.period(), Duration::from_millis(20));
        // A pipeline that advances gets pings.
        let ticker_counter = Arc::clone(&counter);
        let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let ticker_running = Arc::clone(&running);
        let ticker = std::thread::spawn(move || {
            while ticker_running.load(Ordering::Relaxed) {
                ticker_counter.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let mut received = 0;
        assert!(eventually(|| {
            received += drain(&sock);
            received >= 3
        }));
        // A stopped pipeline gets none, however long it waits.
        running.store(false, Ordering::Relaxed);
        ticker.join().unwrap();
        assert!(eventually(|| pinger.pings_withheld() >= 1));
        drain(&sock);
        let sent = pinger.pings_sent();
        let withheld = pinger.pings_withheld();
        assert!(eventually(|| pinger.pings_withheld() >= withheld + 5));
        assert_eq!(pinger.pings_sent(), sent);
        assert_eq!(drain(&sock), 0);
        // Progress again: pings again.
        counter.fetch_add(1, Ordering::Relaxed);
        assert!(eventually(|| drain(&sock) == 1));
        pinger.stop();
    }

    #[test]
    fn stall_hook_stops_the_pings_of_a_running_pipeline() {
        let (_dir, notifier, sock) = socket();
        let counter = Arc::new(AtomicU64::new(0));
        let reader = Arc::clone(&counter);
        let advancing = move || reader.fetch_add(1, Ordering::Relaxed) + 1;
        let pinger = loop_pinger(notifier, advancing, StallHook::parse(Some("150")));
        assert!(eventually(|| pinger.pings_withheld() >= 3));
        let sent = pinger.pings_sent();
        assert!(sent >= 2, "pinged {sent} times before the stall");
        assert!(counter.load(Ordering::Relaxed) > sent, "the real counter keeps advancing");
        drain(&sock);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(drain(&sock), 0);
        assert_eq!(pinger.pings_sent(), sent);
    }

    #[test]
    fn stopping_is_prompt_even_with_a_long_interval() {
        let (_dir, notifier, _sock) = socket();
        let pinger = WatchdogPinger::spawn(notifier, Duration::from_secs(600), Vec::new(), None).unwrap();
        let t = Instant::now();
        drop(pinger);
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn no_watchdog_interval_means_no_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.sock");
        let _s = UnixDatagram::bind(&path).unwrap();
        let off = Arc::new(Notifier::connect(path.as_os_str(), None).unwrap());
        assert!(WatchdogPinger::start(off, Vec::new()).is_none());
    }
}
