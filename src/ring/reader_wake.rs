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
