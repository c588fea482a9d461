//! `frameloop reload`: asks a running appliance to re-read its config by
//! sending it SIGHUP, the same signal as the systemd unit's `ExecReload`.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Arguments of `frameloop reload`.
#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "pid_file"])))]
pub struct ReloadArgs {
    /// Process id of the running `frameloop run`.
    #[arg(long)]
    pub pid: Option<i32>,
    /// File holding that process id (as written by `frameloop run --pid-file`).
    #[arg(long, value_name = "PATH")]
    pub pid_file: Option<PathBuf>,
}

/// Why the reload request could not be sent.
#[derive(Debug, Error)]
pub enum ReloadError {
    #[error("name the appliance to reload with --pid PID or --pid-file PATH")]
    NoTarget,
    #[error("cannot read the pid file {path}: {source}; check --pid-file")]
    ReadPidFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the pid file {path} holds {text:?}, not a process id above 1; check --pid-file")]
    BadPidFile { path: String, text: String },
    #[error("--pid {0}: give the process id of a running frameloop (above 1)")]
    BadPid(i32),
    #[error("cannot send SIGHUP to process {pid}: {source}; check that it runs and belongs to you")]
    Signal {
        pid: i32,
        #[source]
        source: nix::Error,
    },
}

/// Reads a pid file: one decimal process id, surrounding whitespace allowed.
pub fn read_pid_file(path: &Path) -> Result<i32, ReloadError> {
    let text = crate::small_file::read_text(path, 64)
        .map_err(|source| ReloadError::ReadPidFile { path: path.display().to_string(), source })?;
    match text.trim().parse::<i32>() {
        Ok(pid) if pid > 1 => Ok(pid),
        _ => Err(ReloadError::BadPidFile { path: path.display().to_string(), text: text.trim().to_string() }),
    }
}

/// `frameloop reload`: sends SIGHUP to the appliance named by `args`.
pub fn send_reload(args: &ReloadArgs) -> Result<(), ReloadError> {
    let pid = match (args.pid, &args.pid_file) {
        (Some(pid), _) if pid <= 1 => return Err(ReloadError::BadPid(pid)),
        (Some(pid), _) => pid,
        (None, Some(path)) => read_pid_file(path)?,
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
    fn pid_files_must_hold_one_process_id() {
        let dir = std::env::temp_dir().join(format!("frameloop-pid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("frameloop.pid");
        std::fs::write(&file, "4242\n").unwrap();
        assert_eq!(read_pid_file(&file).unwrap(), 4242);
        std::fs::write(&file, "1").unwrap();
        assert!(matches!(read_pid_file(&file), Err(ReloadError::BadPidFile { .. })));
        std::fs::write(&file, "frameloop").unwrap();
        let err = read_pid_file(&file).unwrap_err().to_string();
        assert!(err.contains("not a process id") && err.contains("--pid-file"), "{err}");
        assert!(matches!(read_pid_file(&dir.join("missing")), Err(ReloadError::ReadPidFile { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
        let err = send_reload(&ReloadArgs { pid: Some(0), pid_file: None }).unwrap_err();
        assert!(matches!(err, ReloadError::BadPid(0)));
    }
}
