//! SIGINT/SIGTERM handling: the signals only set a flag that the
//! appliance's threads poll, so shutdown is ordinary control flow.

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    LAST_SIGNAL.store(sig, Ordering::Relaxed);
    STOP.store(true, Ordering::Release);
}

/// Installs the handlers for SIGINT and SIGTERM (idempotent).
pub fn install() -> nix::Result<()> {
    let action = SigAction::new(SigHandler::Handler(on_signal), SaFlags::SA_RESTART, SigSet::empty());
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only performs atomic stores, which are
        // async-signal-safe.
        unsafe { sigaction(sig, &action) }?;
    }
    Ok(())
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
