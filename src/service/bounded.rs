//! Waiting with a deadline for work on other threads: joining a thread, or
//! running a call that may never return, and giving up (leaking the thread
//! and what it owns) once the deadline passes, so a stop cannot hang.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a bounded join looks whether the thread has finished.
const JOIN_POLL: Duration = Duration::from_millis(1);

/// Joins `handle` if its thread finishes by `deadline`; otherwise detaches
/// it (the thread runs on, unjoined) and returns None.
pub fn join_by<T>(handle: JoinHandle<T>, deadline: Instant) -> Option<std::thread::Result<T>> {
    while !handle.is_finished() {
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(JOIN_POLL);
    }
    Some(handle.join())
}

/// Runs `call` on a new thread named `name` and returns its value if it
/// comes by `deadline`; otherwise None, and the thread (with everything
/// `call` owns) is leaked. When no thread can be started, runs `call` here.
pub fn call_by<T: Send + 'static>(
    name: &str,
    deadline: Instant,
    call: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    // The call moves into the thread only if the spawn succeeds; keep a way
    // to run it here when it does not.
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(call)));
    let thread_slot = std::sync::Arc::clone(&slot);
    let spawned = std::thread::Builder::new().name(name.into()).spawn(move || {
        let call = thread_slot.lock().ok().and_then(|mut c| c.take());
        if let Some(call) = call {
            let _ = tx.send(call());
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the {name} thread ({e}); waiting without a deadline");
        let call = slot.lock().ok().and_then(|mut c| c.take());
        return call.map(|c| c());
    }
    rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_a_thread_that_finishes_in_time() {
        let h = std::thread::spawn(|| 7);
        let joined = join_by(h, Instant::now() + Duration::from_secs(5));
        assert_eq!(joined.map(Result::unwrap), Some(7));
    }

    #[test]
    fn gives_up_on_a_thread_that_does_not_finish() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || rx.recv());
        let t = Instant::now();
        assert!(join_by(h, t + Duration::from_millis(50)).is_none());
        let waited = t.elapsed();
        assert!(waited >= Duration::from_millis(50) && waited < Duration::from_secs(2), "{waited:?}");
        drop(tx);
    }

    #[test]
    fn returns_a_call_that_comes_in_time_and_abandons_one_that_never_does() {
        let deadline = Instant::now() + Duration::from_secs(5);
        assert_eq!(call_by("test-quick", deadline, || 3), Some(3));
        let t = Instant::now();
        let never = call_by("test-never", t + Duration::from_millis(50), || {
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        });
        assert_eq!(never, None::<()>);
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        // A deadline already passed still collects nothing and returns at once.
        assert_eq!(call_by("test-late", t, || std::thread::sleep(Duration::from_millis(200))), None);
    }
}
