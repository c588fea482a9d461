//! `frameloop reload`: asks a running appliance to re-read its config by
//! sending it SIGHUP, the same signal as the systemd unit's `ExecReload`.

use crate::service::pid_file::{self, PidFileError};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::path::PathBuf;
use thiserror::Error;

/// Arguments of `frameloop reload`.
#[derive(Debug, Clone)]
pub struct ReloadArgs {
    /// Process id of the running `frameloop run`.
    pub pid: Option<i32>,
    /// File holding that process id, as written by `frameloop run
    /// --pid-file`; refused unless the appliance that wrote it still runs
    /// and holds the file (a stale file's pid may be another process's now).
    pub pid_file: Option<PathBuf>,
}

/// Why the reload request could not be sent.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// No appliance named; give `--pid PID` or `--pid-file PATH`.
    #[error("name the appliance to reload with --pid PID or --pid-file PATH")]
    NoTarget,
    /// The pid file is unreadable, stale, or names a process that did not write it.
    #[error(transparent)]
    PidFile(#[from] PidFileError),
    /// A process id of 1 or below; give the id of a running frameloop.
    #[error("--pid {0}: give the process id of a running frameloop (above 1)")]
    BadPid(i32),
    /// SIGHUP could not be sent; check that the process runs and belongs to you.
    #[error("cannot send SIGHUP to process {pid}: {source}; check that it runs and belongs to you")]
    Signal {
        pid: i32,
        #[source]
        source: nix::Error,
    },
}

/// `frameloop reload`: sends SIGHUP to the appliance named by `args`. A
/// pid file is trusted only while the appliance that wrote it runs and
/// holds it ([`crate::service::pid_file`]): a stale file, or a pid that
/// another process got since, is refused and nothing is signalled.
pub fn send_reload(args: &ReloadArgs) -> Result<(), ReloadError> {
    let pid = match (args.pid, &args.pid_file) {
        (Some(pid), _) if pid <= 1 => return Err(ReloadError::BadPid(pid)),
        (Some(pid), _) => pid,
        (None, Some(path)) => pid_file::running_appliance(path)?,
        (None, None) => return Err(ReloadError::NoTarget),
    };
    kill(Pid::from_raw(pid), Signal::SIGHUP).map_err(|source| ReloadError::Signal { pid, source })?;
    println!("asked process {pid} to reload its config; its log says what changed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_below_two_is_refused() {
        let err = send_reload(&ReloadArgs { pid: Some(0), pid_file: None }).unwrap_err();
        assert!(matches!(err, ReloadError::BadPid(0)));
    }
}
