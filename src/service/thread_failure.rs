//! Pipeline thread failure: a process-wide panic hook that logs which thread
//! died and why, and records the first failure for `frameloop run` to act on
//! (stop and exit non-zero, so systemd's `Restart=` brings the service back).

use std::sync::OnceLock;

/// Names a pipeline thread that a test asks to panic at its start
/// (`receiver` or `result`): exercises the failure path end to end.
pub const TEST_PANIC_ENV: &str = "FRAMELOOP_TEST_PANIC_THREAD";

/// The first thread that panicked: its name and the panic message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadFailure {
    /// The thread's name (`frameloop-rx`, `frameloop-results`, ...).
    pub thread: String,
    /// The panic payload (the message) and where it was raised.
    pub message: String,
}

static FIRST_FAILURE: OnceLock<ThreadFailure> = OnceLock::new();

/// Installs the hook: every panic, on any thread, is logged with
/// `tracing::error!` (thread name and payload) and the first one is kept for
/// [`failure`]. The previous hook (the default stderr message) still runs.
pub fn install() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current().name().unwrap_or("unnamed").to_string();
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-text panic payload".to_string());
        let message = match info.location() {
            Some(at) => format!("{payload} (at {at})"),
            None => payload,
        };
        tracing::error!(thread = %thread, "thread {thread} panicked: {message}; the pipeline is stopping");
        let _ = FIRST_FAILURE.set(ThreadFailure { thread, message });
        previous(info);
    }));
}

/// The first panic seen since [`install`], if any.
pub fn failure() -> Option<&'static ThreadFailure> {
    FIRST_FAILURE.get()
}

/// Panics when [`TEST_PANIC_ENV`] names `thread`: lets tests kill one
/// pipeline thread of the real binary. Call it on the thread itself.
pub fn panic_if_requested(thread: &str) {
    if std::env::var(TEST_PANIC_ENV).is_ok_and(|v| v == thread) {
        panic!("{TEST_PANIC_ENV}={thread}: test-requested panic of the {thread} thread");
    }
}
