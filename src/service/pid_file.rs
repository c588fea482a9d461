//! The pid file of `frameloop run --pid-file`: the process id on one line
//! (as systemd's `PIDFile=` reads it), written by the appliance, which
//! keeps an exclusive `flock` on the file for as long as it runs, so that
//! whoever reads the file can tell a live appliance from a stale file.
//!
//! `frameloop reload --pid-file` signals the pid only when both hold:
//! - a process holds the lock on that file: the lock ends with the process
//!   that took it (a SIGKILL too), so a file left behind by an appliance
//!   that died holds no lock, whatever process has that pid now;
//! - the process with that pid started no later than the file was written
//!   (its start time from `/proc/PID/stat`, the file's modification time):
//!   a process that got the pid after the appliance ended started later.

use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use thiserror::Error;

/// Why a pid file cannot be written, or does not name a running appliance.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PidFileError {
    /// The pid file cannot be written; check `--pid-file` (its folder exists and is writable).
    #[error("cannot write --pid-file {}: {source}; check the path", path.display())]
    Write { path: PathBuf, source: io::Error },
    /// Another frameloop runs with this pid file; stop it, or give this one another `--pid-file`.
    #[error(
        "--pid-file {}: another frameloop (process {pid}) runs with this pid file; stop it, or give this one another --pid-file",
        path.display()
    )]
    Held { path: PathBuf, pid: String },
    /// The pid file cannot be read; check `--pid-file`.
    #[error("cannot read the pid file {}: {source}; check --pid-file", path.display())]
    Read { path: PathBuf, source: io::Error },
    /// The pid file holds no process id; check `--pid-file`.
    #[error("the pid file {} holds {text:?}, not a process id above 1; check --pid-file", path.display())]
    NotAPid { path: PathBuf, text: String },
    /// No frameloop holds the pid file any more; start the appliance, or name a running one with
    /// `--pid`.
    #[error(
        "the pid file {} is stale: no frameloop holds it (the appliance that wrote it for process {pid} has \
         ended, and the pid may belong to another process now); nothing was signalled. Start the appliance, \
         or name a running one with --pid",
        path.display()
    )]
    Stale { path: PathBuf, pid: i32 },
    /// The pid was reused by a process that did not write the file; name the appliance with
    /// `--pid`.
    #[error(
        "process {pid} started after the pid file {} was written, so it is not the frameloop that wrote it \
         (the pid was reused); nothing was signalled. Check which appliance runs, or name it with --pid",
        path.display()
    )]
    NotTheWriter { path: PathBuf, pid: i32 },
    /// The process the pid file names is not running; start the appliance.
    #[error(
        "process {pid} named by the pid file {} is not running; nothing was signalled. Start the appliance",
        path.display()
    )]
    Gone { path: PathBuf, pid: i32 },
}

/// The pid file of a running appliance: written, locked for as long as the
/// value lives, removed when it is dropped.
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
    /// The open file holding the lock (released when the file closes).
    _lock: Flock<File>,
}

impl PidFile {
    /// Locks `path` (created if missing) and writes this process's id into it.
    /// Fails if another live process holds the file.
    pub fn create(path: &Path) -> Result<Self, PidFileError> {
        let write_error = |source| PidFileError::Write { path: path.to_path_buf(), source };
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(write_error)?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                let pid = std::fs::read_to_string(path).unwrap_or_default().trim().to_string();
                return Err(PidFileError::Held { path: path.to_path_buf(), pid });
            }
            Err((_, e)) => return Err(write_error(e.into())),
        };
        lock.set_len(0).map_err(write_error)?;
        lock.write_all(format!("{}\n", std::process::id()).as_bytes()).map_err(write_error)?;
        lock.sync_all().map_err(write_error)?;
        Ok(Self { path: path.to_path_buf(), _lock: lock })
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // Removed while still locked, so no other appliance's file is removed.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads a pid file: one decimal process id, surrounding whitespace allowed.
pub fn read_pid(path: &Path) -> Result<i32, PidFileError> {
    let text = crate::small_file::read_text(path, 64)
        .map_err(|source| PidFileError::Read { path: path.to_path_buf(), source })?;
    match text.trim().parse::<i32>() {
        Ok(pid) if pid > 1 => Ok(pid),
        _ => Err(PidFileError::NotAPid { path: path.to_path_buf(), text: text.trim().to_string() }),
    }
}

/// The pid of the running appliance that wrote `path` and still holds it;
/// an error (naming what is wrong) when the file is stale or the pid now
/// belongs to another process.
pub fn running_appliance(path: &Path) -> Result<i32, PidFileError> {
    let pid = read_pid(path)?;
    let read_error = |source| PidFileError::Read { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(read_error)?;
    let written = file.metadata().and_then(|m| m.modified()).map_err(read_error)?;
    // Taking the lock succeeds only when nobody holds it: then the
    // appliance that wrote the file has ended. (Released at once.)
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_free) => return Err(PidFileError::Stale { path: path.to_path_buf(), pid }),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {}
        Err((_, e)) => return Err(read_error(e.into())),
    }
    let started = match process_start(pid) {
        Ok(started) => started,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(PidFileError::Gone { path: path.to_path_buf(), pid });
        }
        Err(e) => return Err(read_error(e)),
    };
    // The start time is known to a clock tick (10 ms), the file's time finer.
    if started > written + Duration::from_millis(20) {
        return Err(PidFileError::NotTheWriter { path: path.to_path_buf(), pid });
    }
    Ok(pid)
}

/// When process `pid` started, from its `/proc` entry (`NotFound` when it
/// does not exist).
fn process_start(pid: i32) -> io::Result<SystemTime> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Field 22 (starttime, clock ticks after boot) counts from the field after
    // the command name, which ends at the last ')'.
    let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
    let ticks: u64 = after_name
        .split_whitespace()
        .nth(19)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| io::Error::other(format!("/proc/{pid}/stat has no start time")))?;
    let boot = std::fs::read_to_string("/proc/stat")?
        .lines()
        .find_map(|l| l.strip_prefix("btime ").and_then(|s| s.trim().parse::<u64>().ok()))
        .ok_or_else(|| io::Error::other("/proc/stat has no btime"))?;
    // SAFETY: sysconf reads a constant of the C library; no memory is passed.
    let hz =
        u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok().filter(|&h| h > 0).unwrap_or(100);
    let since_boot = Duration::from_nanos(ticks.saturating_mul(1_000_000_000) / hz);
    Ok(SystemTime::UNIX_EPOCH + Duration::from_secs(boot) + since_boot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_files_must_hold_one_process_id() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("frameloop.pid");
        std::fs::write(&file, "4242\n").unwrap();
        assert_eq!(read_pid(&file).unwrap(), 4242);
        std::fs::write(&file, "1").unwrap();
        assert!(matches!(read_pid(&file), Err(PidFileError::NotAPid { .. })));
        std::fs::write(&file, "frameloop").unwrap();
        let err = read_pid(&file).unwrap_err().to_string();
        assert!(err.contains("not a process id") && err.contains("--pid-file"), "{err}");
        assert!(matches!(read_pid(&dir.path().join("missing")), Err(PidFileError::Read { .. })));
    }

    #[test]
    fn a_held_pid_file_names_its_process_and_a_released_one_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("frameloop.pid");
        let held = PidFile::create(&path).unwrap();
        let me = std::process::id() as i32;
        assert_eq!(read_pid(&path).unwrap(), me);
        assert_eq!(running_appliance(&path).unwrap(), me);
        let second = PidFile::create(&path).unwrap_err();
        assert!(matches!(&second, PidFileError::Held { pid, .. } if *pid == me.to_string()), "{second}");
        drop(held);
        assert!(!path.exists(), "removed when the appliance ends");
        // Left behind (a SIGKILL): nobody holds it.
        std::fs::write(&path, format!("{me}\n")).unwrap();
        let err = running_appliance(&path).unwrap_err();
        assert!(matches!(err, PidFileError::Stale { .. }), "{err}");
        assert!(err.to_string().contains("stale"), "{err}");
    }

    #[test]
    fn this_process_started_before_now() {
        let started = process_start(std::process::id() as i32).unwrap();
        let now = SystemTime::now();
        assert!(started <= now + Duration::from_millis(20), "{started:?} after {now:?}");
        assert!(now.duration_since(started).unwrap_or_default() < Duration::from_secs(24 * 3600));
        let gone = process_start(i32::MAX).unwrap_err();
        assert_eq!(gone.kind(), io::ErrorKind::NotFound);
    }
}
