//! The systemd notification protocol (sd_notify): READY, STATUS, STOPPING and
//! WATCHDOG messages to the service manager's datagram socket, and the
//! watchdog interval it asks for. Sending never panics and never stops the
//! appliance: a failure is logged once and later ones are counted.

use sd_notify::NotifyState;
use std::ffi::OsStr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A connection to the service manager's notification socket
/// (`NOTIFY_SOCKET`). Cheap to share between threads behind an `Arc`.
#[derive(Debug)]
pub struct Notifier {
    /// Unbound datagram socket connected to the manager's socket.
    socket: UnixDatagram,
    /// Where the socket points, for log lines.
    target: String,
    /// `WATCHDOG_USEC`, when it is set for this process.
    watchdog: Option<Duration>,
    /// Set after the first failed send has been logged.
    failure_logged: AtomicBool,
    /// Sends that failed (the first is logged, the rest only counted).
    failures: AtomicU64,
}

impl Notifier {
    /// A notifier for the socket named by `NOTIFY_SOCKET`; None when the
    /// variable is unset or empty (not started by systemd with
    /// `Type=notify`) or when the socket cannot be reached (logged).
    pub fn from_env() -> Option<Self> {
        let path = std::env::var_os("NOTIFY_SOCKET").filter(|p| !p.is_empty())?;
        let watchdog = watchdog_from_env(
            std::env::var("WATCHDOG_USEC").ok().as_deref(),
            std::env::var("WATCHDOG_PID").ok().as_deref(),
            std::process::id(),
        );
        match Self::connect(&path, watchdog) {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::warn!(
                    socket = %path.to_string_lossy(),
                    error = %e,
                    "cannot reach the service manager's notification socket; readiness and \
                     watchdog messages will not be sent"
                );
                None
            }
        }
    }

    /// A notifier for the socket at `path` (a filesystem path, or `@name` for
    /// an abstract socket), with the given watchdog interval.
    pub fn connect(path: &OsStr, watchdog: Option<Duration>) -> std::io::Result<Self> {
        let bytes = path.as_bytes();
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => SocketAddr::from_abstract_name(name)?,
            None => SocketAddr::from_pathname(path)?,
        };
        let socket = UnixDatagram::unbound()?;
        socket.connect_addr(&addr)?;
        Ok(Self {
            socket,
            target: path.to_string_lossy().into_owned(),
            watchdog,
            failure_logged: AtomicBool::new(false),
            failures: AtomicU64::new(0),
        })
    }

    /// The watchdog interval the manager expects pings within
    /// (`WATCHDOG_USEC`, honoured only when `WATCHDOG_PID` is unset or names
    /// this process); None when the watchdog is off.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog
    }

    /// `READY=1` with a status line: start-up is complete.
    pub fn ready(&self, status: &str) {
        self.send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// `STATUS=...`: a one-line state shown by `systemctl status`.
    pub fn status(&self, text: &str) {
        self.send(&[NotifyState::Status(text)]);
    }

    /// `RELOADING=1` with `MONOTONIC_USEC` (as `Type=notify-reload` requires):
    /// a config reload has begun; [`Notifier::ready`] ends it.
    pub fn reloading(&self) {
        let mut states = vec![NotifyState::Reloading, NotifyState::Status("reloading the config")];
        if let Ok(now) = NotifyState::monotonic_usec_now() {
            states.push(now);
        }
        self.send(&states);
    }

    /// `STOPPING=1`: shutdown has begun.
    pub fn stopping(&self) {
        self.send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
    }

    /// `WATCHDOG=1`: the appliance is alive and making progress.
    pub fn watchdog(&self) {
        self.send(&[NotifyState::Watchdog]);
    }

    /// `EXTEND_TIMEOUT_USEC=...`: asks for more time for the current start
    /// or stop phase (for example a slow GPU tear-down).
    pub fn extend_timeout(&self, by: Duration) {
        let usec = u32::try_from(by.as_micros()).unwrap_or(u32::MAX);
        self.send(&[NotifyState::ExtendTimeoutUsec(usec)]);
    }

    /// Sends that have failed so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    fn send(&self, states: &[NotifyState<'_>]) {
        let message = render(states);
        let result = match self.socket.send(message.as_bytes()) {
            Ok(n) if n == message.len() => Ok(()),
            Ok(n) => Err(format!("short write ({n} of {} bytes)", message.len())),
            Err(e) => Err(e.to_string()),
        };
        if let Err(error) = result {
            self.failures.fetch_add(1, Ordering::Relaxed);
            if !self.failure_logged.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    socket = %self.target,
                    error = %error,
                    message = message.trim_end(),
                    "cannot notify the service manager; further failures are only counted"
                );
            }
        }
    }
}

/// One notification datagram: one `KEY=VALUE` line per state. Newlines
/// inside a status text would start a new assignment, so they become spaces.
fn render(states: &[NotifyState<'_>]) -> String {
    let mut message = String::new();
    for state in states {
        let line = state.to_string().replace('\n', " ");
        message.push_str(&line);
        message.push('\n');
    }
    message
}

/// The watchdog interval from the values of `WATCHDOG_USEC` and
/// `WATCHDOG_PID`: set, positive, and meant for the process `own_pid`.
pub fn watchdog_from_env(usec: Option<&str>, pid: Option<&str>, own_pid: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    if let Some(pid) = pid {
        let pid: u32 = pid.trim().parse().ok()?;
        if pid != own_pid {
            return None;
        }
    }
    Some(Duration::from_micros(usec))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener() -> (tempfile::TempDir, std::path::PathBuf, UnixDatagram) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        (dir, path, sock)
    }

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn sends_each_message_as_one_datagram() {
        let (_dir, path, sock) = listener();
        let n = Notifier::connect(path.as_os_str(), None).unwrap();
        n.ready("ring allocated\nloop launched");
        assert_eq!(recv(&sock), "READY=1\nSTATUS=ring allocated loop launched\n");
        n.status("12 frames");
        assert_eq!(recv(&sock), "STATUS=12 frames\n");
        n.watchdog();
        assert_eq!(recv(&sock), "WATCHDOG=1\n");
        n.extend_timeout(Duration::from_secs(3));
        assert_eq!(recv(&sock), "EXTEND_TIMEOUT_USEC=3000000\n");
        n.stopping();
        assert_eq!(recv(&sock), "STOPPING=1\nSTATUS=stopping\n");
        assert_eq!(n.failures(), 0);
    }

    #[test]
    fn reaches_abstract_sockets() {
        let name = format!("frameloop-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let sock = UnixDatagram::bind_addr(&addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let n = Notifier::connect(OsStr::new(&format!("@{name}")), None).unwrap();
        n.watchdog();
        assert_eq!(recv(&sock), "WATCHDOG=1\n");
    }

    #[test]
    fn a_vanished_manager_is_counted_not_fatal() {
        let (dir, path, sock) = listener();
        let n = Notifier::connect(path.as_os_str(), None).unwrap();
        drop(sock);
        drop(dir);
        for _ in 0..3 {
            n.watchdog();
        }
        assert_eq!(n.failures(), 3);
    }

    #[test]
    fn connecting_to_a_missing_socket_fails() {
        assert!(Notifier::connect(OsStr::new("/nonexistent/frameloop/notify.sock"), None).is_err());
    }

    #[test]
    fn watchdog_interval_follows_usec_and_pid() {
        assert_eq!(watchdog_from_env(Some("2000000"), None, 7), Some(Duration::from_secs(2)));
        assert_eq!(watchdog_from_env(Some("500000"), Some("7"), 7), Some(Duration::from_millis(500)));
        assert_eq!(watchdog_from_env(Some("500000"), Some("8"), 7), None);
        assert_eq!(watchdog_from_env(Some("500000"), Some("x"), 7), None);
        assert_eq!(watchdog_from_env(Some("0"), None, 7), None);
        assert_eq!(watchdog_from_env(Some("soon"), None, 7), None);
        assert_eq!(watchdog_from_env(None, Some("7"), 7), None);
    }
}
