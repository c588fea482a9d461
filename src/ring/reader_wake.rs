//! A reader thread asleep until a ring's host writer moves the head: the
//! doorbell both rings' writers ring after each publication.

use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::sync::{Mutex, PoisonError};
use std::thread::Thread;
use std::time::Duration;

/// The one reader thread that may sleep on a ring (host memory only; never
/// shared with a device).
#[derive(Default)]
pub(crate) struct ReaderWake {
    /// True from just before the reader's last look at the head until it
    /// wakes; the writer unparks `thread` only while it is set.
    asleep: AtomicBool,
    thread: Mutex<Option<Thread>>,
}

impl ReaderWake {
    /// Parks the calling thread until a [`ReaderWake::wake`] or `timeout`
    /// (or, rarely, spuriously earlier), unless `moved` already says the
    /// head moved; returns `moved()` afterwards. One reader thread at a time.
    pub(crate) fn wait(&self, timeout: Duration, moved: impl Fn() -> bool) -> bool {
        {
            let mut t = self.thread.lock().unwrap_or_else(PoisonError::into_inner);
            if t.as_ref().is_none_or(|t| t.id() != std::thread::current().id()) {
                *t = Some(std::thread::current());
            }
        }
        self.asleep.store(true, Ordering::Relaxed);
        // Pairs with the fence in `wake` (after each publication): either the
        // writer sees `asleep` and unparks this thread, or `moved` sees its head.
        fence(Ordering::SeqCst);
        if !moved() {
            std::thread::park_timeout(timeout);
        }
        self.asleep.store(false, Ordering::Relaxed);
        moved()
    }

    /// Unparks the reader if it waits in [`ReaderWake::wait`]; call it after
    /// the store that moves the head. Costs a fence and a load when nobody
    /// sleeps.
    pub(crate) fn wake(&self) {
        fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::Relaxed)
            && let Some(t) = self.thread.lock().unwrap_or_else(PoisonError::into_inner).as_ref()
        {
            t.unpark();
        }
    }
}

/// For the rings' tests: over 20 rounds, a thread blocked in `wait(round -
/// 1, 60 s)` is woken by `publish(round)` (which must move the head to
/// `round`), whether it is asleep before the publication or not.
#[cfg(test)]
pub(crate) fn check_a_publication_wakes_the_waiter(
    wait: impl Fn(u64, Duration) -> bool + Clone + Send + 'static,
    mut publish: impl FnMut(u64),
) {
    for round in 1..=20u64 {
        let waiting = wait.clone();
        let waiter = std::thread::spawn(move || {
            let start = std::time::Instant::now();
            let mut woken = false;
            // A spurious return is allowed: wait again until the head moves.
            while !woken && start.elapsed() < Duration::from_secs(60) {
                woken = waiting(round - 1, Duration::from_secs(60));
            }
            (woken, start.elapsed())
        });
        // Publish whether or not the waiter is asleep yet: either order must wake it.
        if round % 2 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
        publish(round);
        let (woken, waited) = waiter.join().unwrap();
        assert!(woken, "round {round}: the waiter saw the publication");
        assert!(waited < Duration::from_secs(30), "round {round}: woken, not timed out ({waited:?})");
    }
}
