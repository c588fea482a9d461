//! Test hook that hangs one pipeline thread of the real binary after a
//! delay (`FRAMELOOP_TEST_STALL_THREAD`), so tests can watch the watchdog
//! withhold its pings and the stop path give up on the thread in bounded
//! time. Never set it on a production unit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Names the thread to hang: `receiver` or `result` (each stops making
/// progress in its loop until shutdown), or `tear-down` (tearing the
/// resident loop down never returns).
pub const TEST_STALL_THREAD_ENV: &str = "FRAMELOOP_TEST_STALL_THREAD";
/// Milliseconds the thread runs normally before it hangs (default
/// [`DEFAULT_STALL_AFTER`]).
pub const TEST_STALL_THREAD_AFTER_ENV: &str = "FRAMELOOP_TEST_STALL_THREAD_AFTER_MS";
/// How long the thread runs normally when no delay is given.
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_millis(500);
/// How often a hung thread looks at its stop flag.
const STOP_CHECK: Duration = Duration::from_millis(10);

/// A requested hang of one thread.
#[derive(Debug, Clone)]
pub struct ThreadStall {
    thread: &'static str,
    after: Duration,
    /// When the thread first checked the hook; the delay counts from here.
    started: Option<Instant>,
}

impl ThreadStall {
    /// The hang requested for `thread` by [`TEST_STALL_THREAD_ENV`], if any.
    pub fn requested(thread: &'static str) -> Option<Self> {
        Self::parse(
            thread,
            std::env::var(TEST_STALL_THREAD_ENV).ok().as_deref(),
            std::env::var(TEST_STALL_THREAD_AFTER_ENV).ok().as_deref(),
        )
    }

    /// The hang for `thread` given the two variables' values: None unless
    /// `named` is `thread`; an unreadable delay falls back to the default.
    pub fn parse(thread: &'static str, named: Option<&str>, after_ms: Option<&str>) -> Option<Self> {
        if named?.trim() != thread {
            return None;
        }
        let after =
            after_ms.and_then(|v| v.trim().parse().ok()).map_or(DEFAULT_STALL_AFTER, Duration::from_millis);
        Some(Self { thread, after, started: None })
    }

    /// True once the delay has passed since the first call.
    fn due(&mut self) -> bool {
        self.started.get_or_insert_with(Instant::now).elapsed() >= self.after
    }

    /// Call once per loop of the thread: after the delay, logs and then
    /// sleeps until `stop` is set, so the thread makes no progress but still
    /// ends when the appliance stops.
    pub fn hang_if_due(&mut self, stop: &AtomicBool) {
        if !self.due() {
            return;
        }
        tracing::warn!(
            hook = TEST_STALL_THREAD_ENV,
            thread = self.thread,
            "test hook: the {} thread hangs now",
            self.thread
        );
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(STOP_CHECK);
        }
    }

    /// Hangs the calling thread for good (for a call that must never
    /// return), after the delay.
    pub fn hang_forever(mut self) -> ! {
        while !self.due() {
            std::thread::sleep(STOP_CHECK);
        }
        tracing::warn!(
            hook = TEST_STALL_THREAD_ENV,
            thread = self.thread,
            "test hook: {} never returns",
            self.thread
        );
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn only_the_named_thread_hangs() {
        assert!(ThreadStall::parse("result", None, None).is_none());
        assert!(ThreadStall::parse("result", Some("receiver"), None).is_none());
        let s = ThreadStall::parse("result", Some(" result\n"), None).unwrap();
        assert_eq!(s.after, DEFAULT_STALL_AFTER);
        let s = ThreadStall::parse("receiver", Some("receiver"), Some("25")).unwrap();
        assert_eq!(s.after, Duration::from_millis(25));
        let s = ThreadStall::parse("receiver", Some("receiver"), Some("soon")).unwrap();
        assert_eq!(s.after, DEFAULT_STALL_AFTER);
    }

    #[test]
    fn hangs_after_the_delay_until_stopped() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut stall = ThreadStall::parse("result", Some("result"), Some("50")).unwrap();
        // Before the delay the call returns at once.
        let t = Instant::now();
        stall.hang_if_due(&stop);
        assert!(t.elapsed() < Duration::from_millis(50));
        let thread_stop = Arc::clone(&stop);
        let hung = std::thread::spawn(move || {
            loop {
                stall.hang_if_due(&thread_stop);
                if thread_stop.load(Ordering::Acquire) {
                    return Instant::now();
                }
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        assert!(!hung.is_finished(), "the thread must hang until stopped");
        let stopped_at = Instant::now();
        stop.store(true, Ordering::Release);
        let returned_at = hung.join().unwrap();
        assert!(returned_at >= stopped_at, "the thread returned before the stop");
    }
}
