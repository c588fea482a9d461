//! The attach server: a thread that serves the output socket. A consumer
//! sends an attach request; a consumer built for another layout version is
//! refused with a message; otherwise it gets a hello and the region file
//! descriptors and keeps the connection open while it reads (closing it, or
//! dying, detaches it). Every socket is non-blocking and a handshake not
//! finished within [`HANDSHAKE_TIMEOUT`] is dropped, so no consumer can
//! slow or stop the appliance; the writer never looks at the socket at all.

use super::OutputError;
use super::handshake::{AttachRequest, HELLO_BYTES, Hello, REQUEST_BYTES};
use super::layout::{MAX_CONSUMERS, OUTPUT_LAYOUT_VERSION};
use super::memory::{OutputMemory, SharedRegion};
use super::ring::OutputRing;
use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Mode of the attach socket: the owner and its group may connect.
const SOCKET_MODE: u32 = 0o660;

/// How long a connection may take to send its attach request.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the server looks at its sockets when nothing happens.
const POLL_INTERVAL_MS: u16 = 50;

/// One attached consumer's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerLag {
    /// Its line in the control block.
    pub index: usize,
    /// The newest output sequence it reported finished.
    pub last_read_seq: u64,
    /// Outputs published after that one.
    pub lag: u64,
}

/// What the server and the ring look like now, for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputSnapshot {
    /// Newest published output sequence.
    pub head_seq: u64,
    /// Consumers attached now, with their lag.
    pub consumers: Vec<ConsumerLag>,
    /// Consumers attached since start.
    pub attaches: u64,
    /// Connections refused (wrong version, not a request, no free line).
    pub refused: u64,
    /// Connections dropped because their handshake took too long.
    pub timed_out: u64,
}

impl From<OutputSnapshot> for crate::metrics::OutputMetrics {
    fn from(s: OutputSnapshot) -> Self {
        Self {
            written: s.head_seq,
            consumers: s.consumers.iter().map(|c| (c.index, c.lag)).collect(),
            attaches: s.attaches,
            refused: s.refused,
            timed_out: s.timed_out,
        }
    }
}

#[derive(Default)]
struct Counters {
    attaches: AtomicU64,
    refused: AtomicU64,
    timed_out: AtomicU64,
}

/// The running attach server; dropping it stops the thread and removes the socket.
pub struct OutputServer {
    ring: Arc<OutputRing>,
    counters: Arc<Counters>,
    /// Connections of consumers in this process ([`OutputServer::attach_local`]),
    /// admitted already, for the server thread to watch like the others.
    local: Arc<Mutex<Vec<Conn>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

/// Why a connection is refused a consumer line; its text is the reason the
/// refusing hello carries to the consumer.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("the connection did not start with a frameloop attach request")]
    NotARequest,
    #[error(
        "the consumer (pid {pid}) speaks output layout version {version}, this appliance serves version \
         {OUTPUT_LAYOUT_VERSION}; use a frameloop consumer of the same release as the appliance"
    )]
    Version { pid: u32, version: u32 },
    #[error("{MAX_CONSUMERS} consumers are attached already; detach one and try again")]
    Full,
}

impl OutputServer {
    /// Listens on `path` (replacing a stale socket nobody serves) and starts
    /// the server thread.
    pub fn start(ring: Arc<OutputRing>, path: &Path) -> Result<Self, OutputError> {
        let listen_error = |source| OutputError::Listen { path: path.to_owned(), source };
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(listen_error(std::io::Error::new(
                    ErrorKind::AddrInUse,
                    "another process serves this socket",
                )));
            }
            std::fs::remove_file(path).map_err(listen_error)?;
        }
        let listener = UnixListener::bind(path).map_err(listen_error)?;
        // Consumers of the appliance's group may attach whatever the umask
        // (the service runs with UMask=0077); others may not.
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(SOCKET_MODE))
            .map_err(listen_error)?;
        listener.set_nonblocking(true).map_err(listen_error)?;
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let local = Arc::new(Mutex::new(Vec::new()));
        let serve = Server {
            ring: Arc::clone(&ring),
            counters: Arc::clone(&counters),
            local: Arc::clone(&local),
            stop: Arc::clone(&stop),
            listener,
            conns: Vec::new(),
        };
        let thread =
            std::thread::Builder::new().name("frameloop-output".into()).spawn(move || serve.run()).map_err(
                |e| listen_error(std::io::Error::other(format!("cannot start the server thread: {e}"))),
            )?;
        Ok(Self { ring, counters, local, stop, thread: Some(thread), path: path.to_owned() })
    }

    /// The ring this server shares (a previewer reads the newest output
    /// from it).
    pub fn ring(&self) -> &Arc<OutputRing> {
        &self.ring
    }

    /// Admits a consumer in this process without the socket: gives it a
    /// consumer line and one end of a connected socket pair, whose other end
    /// the server thread watches like an attached consumer's (closing
    /// either end detaches it; the server stopping closes it). Returns that
    /// end and the line (see [`crate::output::Consumer::attach_local`]).
    pub fn attach_local(&self) -> Result<(UnixStream, usize), OutputError> {
        let pair_error = |source| OutputError::Connect { path: self.path.clone(), source };
        let (ours, theirs) = UnixStream::pair().map_err(pair_error)?;
        ours.set_nonblocking(true).map_err(pair_error)?;
        let index = admit_line(&self.ring, std::process::id()).map_err(|reason| {
            self.counters.refused.fetch_add(1, Ordering::Relaxed);
            OutputError::Refused(reason.to_string())
        })?;
        self.counters.attaches.fetch_add(1, Ordering::Relaxed);
        let conn = Conn { stream: ours, state: ConnState::Attached { index } };
        self.local.lock().unwrap_or_else(PoisonError::into_inner).push(conn);
        Ok((theirs, index))
    }

    /// Attached consumers, their lag and the server's counters.
    pub fn snapshot(&self) -> OutputSnapshot {
        let head_seq = self.ring.head();
        let consumers = (0..MAX_CONSUMERS)
            .filter_map(|index| {
                let word = self.ring.consumer_word(index);
                (word.attached.load(Ordering::Acquire) != 0).then(|| {
                    let last_read_seq = word.last_read_seq.load(Ordering::Relaxed);
                    ConsumerLag { index, last_read_seq, lag: head_seq.saturating_sub(last_read_seq) }
                })
            })
            .collect();
        OutputSnapshot {
            head_seq,
            consumers,
            attaches: self.counters.attaches.load(Ordering::Relaxed),
            refused: self.counters.refused.load(Ordering::Relaxed),
            timed_out: self.counters.timed_out.load(Ordering::Relaxed),
        }
    }
}

impl Drop for OutputServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

enum ConnState {
    /// Waiting for the attach request; `got` bytes of it are in `buf`.
    Pending { deadline: Instant, buf: [u8; REQUEST_BYTES], got: usize },
    /// Attached under this consumer line.
    Attached { index: usize },
}

struct Conn {
    stream: UnixStream,
    state: ConnState,
}

struct Server {
    ring: Arc<OutputRing>,
    counters: Arc<Counters>,
    local: Arc<Mutex<Vec<Conn>>>,
    stop: Arc<AtomicBool>,
    listener: UnixListener,
    conns: Vec<Conn>,
}

/// What became of a connection in one round.
enum Fate {
    Keep,
    Close,
}

/// Gives consumer process `pid` a free consumer line of `ring`, starting
/// after the newest output, or says why none is free. Lines are claimed
/// with a compare-and-swap: the server thread and [`OutputServer::attach_local`]
/// may admit at the same time.
fn admit_line(ring: &OutputRing, pid: u32) -> Result<usize, Refusal> {
    for index in 0..MAX_CONSUMERS {
        let word = ring.consumer_word(index);
        let claimed =
            word.attached.compare_exchange(0, u64::from(pid).max(1), Ordering::AcqRel, Ordering::Acquire);
        if claimed.is_ok() {
            word.last_read_seq.store(ring.head(), Ordering::Release);
            return Ok(index);
        }
    }
    Err(Refusal::Full)
}

impl Server {
    fn run(mut self) {
        while !self.stop.load(Ordering::Acquire) {
            self.wait();
            self.accept();
            self.conns.append(&mut self.local.lock().unwrap_or_else(PoisonError::into_inner));
            let now = Instant::now();
            let mut conns = std::mem::take(&mut self.conns);
            conns.retain_mut(|conn| matches!(self.serve(conn, now), Fate::Keep));
            self.conns = conns;
        }
        let local = std::mem::take(&mut *self.local.lock().unwrap_or_else(PoisonError::into_inner));
        for conn in std::mem::take(&mut self.conns).into_iter().chain(local) {
            self.close(&conn);
        }
    }

    /// Sleeps until a socket is readable or the poll interval passed.
    fn wait(&self) {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        let mut fds: Vec<PollFd<'_>> = std::iter::once(self.listener.as_fd())
            .chain(self.conns.iter().map(|c| c.stream.as_fd()))
            .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
            .collect();
        // An error (EINTR) only shortens the wait.
        let _ = poll(&mut fds, PollTimeout::from(POLL_INTERVAL_MS));
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if stream.set_nonblocking(true).is_ok() {
                        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
                        let state = ConnState::Pending { deadline, buf: [0; REQUEST_BYTES], got: 0 };
                        self.conns.push(Conn { stream, state });
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // WouldBlock: none left. Other errors (EMFILE) are retried next round.
                Err(_) => return,
            }
        }
    }

    fn serve(&self, conn: &mut Conn, now: Instant) -> Fate {
        match &mut conn.state {
            ConnState::Pending { deadline, buf, got } => {
                match conn.stream.read(&mut buf[*got..]) {
                    Ok(0) => return Fate::Close,
                    Ok(n) => *got += n,
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                    Err(_) => return Fate::Close,
                }
                if *got < REQUEST_BYTES {
                    if now >= *deadline {
                        self.counters.timed_out.fetch_add(1, Ordering::Relaxed);
                        return Fate::Close;
                    }
                    return Fate::Keep;
                }
                let request = AttachRequest::decode(buf);
                match self.admit(request) {
                    Ok(index) => {
                        if self.send_hello(&conn.stream, index).is_err() {
                            self.release(index);
                            return Fate::Close;
                        }
                        self.counters.attaches.fetch_add(1, Ordering::Relaxed);
                        conn.state = ConnState::Attached { index };
                        Fate::Keep
                    }
                    Err(reason) => {
                        self.counters.refused.fetch_add(1, Ordering::Relaxed);
                        // Best effort: a consumer that does not read its refusal loses it.
                        let _ = conn.stream.write(&Hello::Refused(reason.to_string()).encode());
                        Fate::Close
                    }
                }
            }
            ConnState::Attached { .. } => {
                let mut sink = [0u8; 64];
                match conn.stream.read(&mut sink) {
                    Ok(0) => {
                        self.close(conn);
                        Fate::Close
                    }
                    Ok(_) => Fate::Keep,
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                        Fate::Keep
                    }
                    Err(_) => {
                        self.close(conn);
                        Fate::Close
                    }
                }
            }
        }
    }

    /// Gives an acceptable request a free consumer line, or says why not.
    fn admit(&self, request: Option<AttachRequest>) -> Result<usize, Refusal> {
        let request = request.ok_or(Refusal::NotARequest)?;
        if request.version != OUTPUT_LAYOUT_VERSION {
            return Err(Refusal::Version { pid: request.pid, version: request.version });
        }
        admit_line(&self.ring, request.pid)
    }

    fn release(&self, index: usize) {
        self.ring.consumer_word(index).attached.store(0, Ordering::Release);
    }

    fn close(&self, conn: &Conn) {
        if let ConnState::Attached { index } = conn.state {
            self.release(index);
        }
    }

    fn send_hello(&self, stream: &UnixStream, index: usize) -> Result<(), ()> {
        let ring = &*self.ring;
        let data = ring.data();
        let SharedRegion::HostFd(control_fd) = ring.control().share() else { return Err(()) };
        let mut fds: Vec<RawFd> = vec![control_fd.as_raw_fd()];
        let mut ipc_handle = [0u8; 64];
        let mut device_ordinal = -1;
        match data.share() {
            SharedRegion::HostFd(fd) => fds.push(fd.as_raw_fd()),
            SharedRegion::CudaIpc { handle, ordinal } => (ipc_handle, device_ordinal) = (handle, ordinal),
        }
        let hello = Hello::Accepted {
            version: OUTPUT_LAYOUT_VERSION,
            kind: data.kind(),
            geometry: ring.geometry(),
            device_ordinal,
            consumer_index: index as u32,
            fd_count: fds.len() as u32,
            ipc_handle,
        }
        .encode();
        let sent = sendmsg::<()>(
            stream.as_raw_fd(),
            &[IoSlice::new(&hello)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
            None,
        );
        match sent {
            Ok(n) if n == HELLO_BYTES => Ok(()),
            _ => Err(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::handshake::{HELLO_BYTES, REQUEST_BYTES};

    fn read_hello(stream: &mut UnixStream) -> Hello {
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; HELLO_BYTES];
        stream.read_exact(&mut b).unwrap();
        Hello::decode(&b).unwrap()
    }

    #[test]
    fn the_socket_admits_the_owner_and_its_group_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.sock");
        let _server = OutputServer::start(OutputRing::host(2, 4).unwrap(), &path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o660);
    }

    #[test]
    fn a_consumer_of_another_layout_version_is_refused_with_a_message() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.sock");
        let server = OutputServer::start(OutputRing::host(4, 16).unwrap(), &path).unwrap();
        let mut stream = UnixStream::connect(&path).unwrap();
        stream.write_all(&AttachRequest { version: OUTPUT_LAYOUT_VERSION + 1, pid: 77 }.encode()).unwrap();
        let Hello::Refused(text) = read_hello(&mut stream) else { panic!("a refusal") };
        let expected = format!(
            "version {}, this appliance serves version {OUTPUT_LAYOUT_VERSION}",
            OUTPUT_LAYOUT_VERSION + 1
        );
        assert!(text.contains(&expected), "{text}");
        assert_eq!(server.snapshot().refused, 1);
        assert!(server.snapshot().consumers.is_empty());
    }

    #[test]
    fn a_silent_connection_is_dropped_and_does_not_block_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.sock");
        let server = OutputServer::start(OutputRing::host(4, 16).unwrap(), &path).unwrap();
        let mut silent = UnixStream::connect(&path).unwrap();
        let mut half = UnixStream::connect(&path).unwrap();
        half.write_all(&[0x46; REQUEST_BYTES / 2]).unwrap();
        let started = Instant::now();
        let mut good = UnixStream::connect(&path).unwrap();
        good.write_all(&AttachRequest::current().encode()).unwrap();
        assert!(matches!(read_hello(&mut good), Hello::Accepted { consumer_index: 0, fd_count: 2, .. }));
        assert!(started.elapsed() < HANDSHAKE_TIMEOUT, "served while two connections hang");
        assert_eq!(server.snapshot().consumers.len(), 1);
        silent.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(silent.read(&mut [0u8; 8]).unwrap(), 0, "the silent connection is closed");
        drop(good);
        let deadline = Instant::now() + Duration::from_secs(5);
        while (server.snapshot().timed_out < 2 || !server.snapshot().consumers.is_empty())
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(server.snapshot().timed_out, 2, "both hanging handshakes were dropped");
        assert!(server.snapshot().consumers.is_empty(), "a closed connection detaches");
        drop(half);
    }

    #[test]
    fn a_second_server_on_a_live_socket_is_refused_and_a_stale_one_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.sock");
        let first = OutputServer::start(OutputRing::host(4, 16).unwrap(), &path).unwrap();
        let err = OutputServer::start(OutputRing::host(4, 16).unwrap(), &path).err().unwrap();
        assert!(err.to_string().contains("output.socket"), "{err}");
        drop(first);
        // A socket file left behind by a process that died is replaced.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        OutputServer::start(OutputRing::host(4, 16).unwrap(), &path).unwrap();
    }
}
