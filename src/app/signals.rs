//! SIGINT/SIGTERM and SIGHUP handling: the signals only set flags that the
//! appliance's main loop polls, so shutdown and reload are ordinary control
//! flow.

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);
static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    LAST_SIGNAL.store(sig, Ordering::Relaxed);
    STOP.store(true, Ordering::Release);
}

extern "C" fn on_reload_signal(_sig: libc::c_int) {
    RELOAD.store(true, Ordering::Release);
}

/// Installs the handlers for SIGINT and SIGTERM (stop) and SIGHUP (reload
/// the config) (idempotent).
pub fn install() -> nix::Result<()> {
    let action = SigAction::new(SigHandler::Handler(on_signal), SaFlags::SA_RESTART, SigSet::empty());
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only performs atomic stores, which are
        // async-signal-safe.
        unsafe { sigaction(sig, &action) }?;
    }
    let reload = SigAction::new(SigHandler::Handler(on_reload_signal), SaFlags::SA_RESTART, SigSet::empty());
    // SAFETY: the handler only performs an atomic store, which is
    // async-signal-safe.
    unsafe { sigaction(Signal::SIGHUP, &reload) }?;
    Ok(())
}

/// True once for each burst of SIGHUP received since the last call: the
/// config should be reloaded.
pub fn take_reload_request() -> bool {
    RELOAD.load(Ordering::Relaxed) && RELOAD.swap(false, Ordering::AcqRel)
}

/// The process-wide stop flag that the signals set.
pub fn stop_flag() -> &'static AtomicBool {
    &STOP
}

/// The last signal received, if any (for the log line at shutdown).
pub fn last_signal() -> Option<Signal> {
    match LAST_SIGNAL.load(Ordering::Relaxed) {
        0 => None,
        n => Signal::try_from(n).ok(),
    }
}
