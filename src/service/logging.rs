//! Where log events go: to the systemd journal with structured fields when
//! the process's stderr is connected to the journal (systemd sets
//! `JOURNAL_STREAM`), to the terminal otherwise. `FRAMELOOP_LOG` (or
//! `RUST_LOG`) filters events in both cases; the default level is `info`.
//! Lines are coloured only when stderr is a terminal and `NO_COLOR` is not set.

use std::io::IsTerminal;
use std::os::fd::AsFd;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Prefix of the journal fields made from event fields: an event's
/// `stream = 3` becomes `FRAMELOOP_STREAM=3`, so
/// `journalctl -u frameloop FRAMELOOP_STREAM=3` finds it.
pub const JOURNAL_FIELD_PREFIX: &str = "FRAMELOOP";

/// Where [`init_logging`] sent the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTarget {
    /// The journal's native protocol, one field per event field.
    Journal,
    /// Formatted lines on stderr.
    Terminal,
    /// A subscriber was already installed; nothing changed.
    AlreadyInitialised,
}

/// The filter from `FRAMELOOP_LOG`, else `RUST_LOG`, else `info`.
fn filter() -> EnvFilter {
    std::env::var("FRAMELOOP_LOG")
        .ok()
        .and_then(|v| EnvFilter::try_new(v).ok())
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new("info"))
}

/// The device and inode of this process's stderr.
fn stderr_identity() -> Option<(u64, u64)> {
    let stat = nix::sys::stat::fstat(std::io::stderr().as_fd()).ok()?;
    Some((stat.st_dev, stat.st_ino))
}

/// True when `journal_stream` (the value of `JOURNAL_STREAM`, `dev:ino`)
/// names the stream that stderr is: the variable is inherited by children
/// whose stderr was redirected elsewhere, so its presence alone is not
/// enough.
pub fn stderr_is_journal(journal_stream: Option<&str>, stderr: Option<(u64, u64)>) -> bool {
    let (Some(value), Some((dev, ino))) = (journal_stream, stderr) else { return false };
    let Some((d, i)) = value.trim().split_once(':') else { return false };
    matches!((d.parse::<u64>(), i.parse::<u64>()), (Ok(d), Ok(i)) if d == dev && i == ino)
}

/// Whether terminal lines carry ANSI colours: only when stderr is a
/// terminal (a file or pipe gets plain text), and never when `NO_COLOR` is
/// set to anything but the empty string (<https://no-color.org>).
pub fn colour_wanted(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Installs the process-wide subscriber: journal when stderr is the journal
/// (falling back to plain lines on stderr if the journal socket cannot be
/// opened), the terminal otherwise. Call once, first thing in `main`.
pub fn init_logging() -> LogTarget {
    let journal_stream = std::env::var("JOURNAL_STREAM").ok();
    if stderr_is_journal(journal_stream.as_deref(), stderr_identity()) {
        match tracing_journald::layer() {
            Ok(layer) => {
                let layer = layer
                    .with_field_prefix(Some(JOURNAL_FIELD_PREFIX.to_string()))
                    .with_syslog_identifier("frameloop".to_string());
                return match tracing_subscriber::registry().with(filter()).with(layer).try_init() {
                    Ok(()) => LogTarget::Journal,
                    Err(_) => LogTarget::AlreadyInitialised,
                };
            }
            Err(e) => {
                // stderr still reaches the journal: plain lines, no colours,
                // no timestamps (the journal adds its own).
                let installed = tracing_subscriber::fmt()
                    .with_env_filter(filter())
                    .with_writer(std::io::stderr)
                    .with_ansi(false)
                    .without_time()
                    .try_init()
                    .is_ok();
                if !installed {
                    return LogTarget::AlreadyInitialised;
                }
                tracing::warn!(error = %e, "cannot open the journal socket; logging plain lines to stderr");
                return LogTarget::Terminal;
            }
        }
    }
    let ansi = colour_wanted(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref());
    match tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .try_init()
    {
        Ok(()) => LogTarget::Terminal,
        Err(_) => LogTarget::AlreadyInitialised,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_only_when_the_stream_is_stderr() {
        let me = Some((64769, 123456));
        assert!(stderr_is_journal(Some("64769:123456"), me));
        assert!(!stderr_is_journal(Some("64769:123457"), me));
        assert!(!stderr_is_journal(Some("garbage"), me));
        assert!(!stderr_is_journal(Some("1:x"), me));
        assert!(!stderr_is_journal(None, me));
        assert!(!stderr_is_journal(Some("64769:123456"), None));
    }

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(colour_wanted(true, None));
        assert!(colour_wanted(true, Some(OsStr::new(""))), "an empty NO_COLOR does not count");
        assert!(!colour_wanted(true, Some(OsStr::new("1"))));
        assert!(!colour_wanted(false, None), "a file or pipe gets plain lines");
    }

    #[test]
    fn recognises_this_process_stderr() {
        let (dev, ino) = stderr_identity().expect("stderr is open in tests");
        assert!(stderr_is_journal(Some(&format!("{dev}:{ino}")), stderr_identity()));
        assert!(!stderr_is_journal(Some(&format!("{dev}:{}", ino.wrapping_add(1))), stderr_identity()));
    }
}
