//! Socket set-up: a UDP socket opened with the options of `[ingest]`
//! (socket2: `SO_REUSEPORT`, `SO_RCVBUF`, `SO_BUSY_POLL`, `SO_TIMESTAMPNS`,
//! `UDP_GRO`), bound, and registered with mio for readiness.

use super::config::UdpConfig;
use super::error::{IngestError, bind_error};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// Sets an integer socket option.
pub(super) fn set_int_option(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and the length passed is its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Asks for `wanted` bytes of receive buffer (forcing past `rmem_max` where
/// permitted) and returns what the kernel granted, as usable bytes.
fn size_receive_buffer(socket: &Socket, wanted: usize) -> Result<usize, IngestError> {
    let value = libc::c_int::try_from(wanted).unwrap_or(libc::c_int::MAX);
    if set_int_option(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, value).is_err() {
        socket
            .set_recv_buffer_size(wanted)
            .map_err(|source| IngestError::Socket { what: "SO_RCVBUF", source })?;
    }
    let granted =
        socket.recv_buffer_size().map_err(|source| IngestError::Socket { what: "SO_RCVBUF", source })?;
    // Linux doubles the value for its bookkeeping and reports the double.
    let usable = granted / 2;
    if usable < wanted {
        tracing::warn!(
            "UDP receive buffer is {usable} bytes, less than ingest.recv_buffer_bytes = {wanted}: the kernel \
             capped it; raise it with `sysctl -w net.core.rmem_max={wanted}` or bursts may be lost"
        );
    }
    Ok(usable)
}

/// A socket set up as `ingest` asks, bound to `addr`, non-blocking.
pub(super) struct OpenedSocket {
    pub(super) socket: Socket,
    pub(super) recv_buffer_bytes: usize,
    pub(super) gro_active: bool,
}

/// Opens a UDP socket with the options of `cfg` (`SO_REUSEPORT` as
/// `reuse_port` says) and binds it to `addr`. Unsupported optional
/// features (GRO, busy poll, kernel timestamps) are logged and skipped.
pub(super) fn open_socket(
    cfg: &UdpConfig,
    addr: SocketAddr,
    reuse_port: bool,
) -> Result<OpenedSocket, IngestError> {
    let setup = |what| move |source| IngestError::Socket { what, source };
    let socket =
        Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP)).map_err(setup("socket"))?;
    let fd = socket.as_raw_fd();
    socket.set_reuse_port(reuse_port).map_err(setup("SO_REUSEPORT"))?;
    let recv_buffer_bytes = size_receive_buffer(&socket, cfg.recv_buffer_bytes)?;
    if cfg.busy_poll_us > 0 {
        let us = libc::c_int::try_from(cfg.busy_poll_us).unwrap_or(libc::c_int::MAX);
        match set_int_option(fd, libc::SOL_SOCKET, libc::SO_BUSY_POLL, us) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                tracing::debug!("SO_BUSY_POLL refused (needs CAP_NET_ADMIN); receiving without busy poll")
            }
            Err(e) => return Err(IngestError::Socket { what: "SO_BUSY_POLL", source: e }),
        }
    }
    if let Err(e) = set_int_option(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1) {
        tracing::warn!("SO_TIMESTAMPNS refused ({e}); receive times come from the clock after recvmmsg");
    }
    let gro_active = cfg.gro
        && match set_int_option(fd, libc::SOL_UDP, libc::UDP_GRO, 1) {
            Ok(()) => true,
            Err(e) => {
                tracing::info!("UDP_GRO refused ({e}); receiving one datagram per buffer");
                false
            }
        };
    socket.set_nonblocking(true).map_err(setup("O_NONBLOCK"))?;
    socket.bind(&addr.into()).map_err(|source| bind_error(addr, source))?;
    Ok(OpenedSocket { socket, recv_buffer_bytes, gro_active })
}

/// Registers a bound socket for readiness, waits lasting `timeout` at most.
pub(super) fn watch(socket: Socket, timeout: Duration) -> Result<ReaderSocket, IngestError> {
    let setup = |what| move |source| IngestError::Socket { what, source };
    let mut socket = mio::net::UdpSocket::from_std(socket.into());
    let poll = mio::Poll::new().map_err(setup("epoll"))?;
    poll.registry()
        .register(&mut socket, mio::Token(0), mio::Interest::READABLE)
        .map_err(setup("epoll register"))?;
    let readiness = Readiness { poll, events: mio::Events::with_capacity(4), timeout };
    Ok(ReaderSocket { socket, readiness })
}

/// A bound socket and its readiness.
pub(super) struct ReaderSocket {
    pub(super) socket: mio::net::UdpSocket,
    pub(super) readiness: Readiness,
}

/// Waiting for the socket to become readable.
pub(super) struct Readiness {
    poll: mio::Poll,
    events: mio::Events,
    /// How long one wait may last, so ticks and the stop flag run.
    pub(super) timeout: Duration,
}

impl Readiness {
    /// Waits until the socket is readable or the timeout passed.
    pub(super) fn wait(&mut self) -> Result<(), IngestError> {
        match self.poll.poll(&mut self.events, Some(self.timeout)) {
            Err(e) if e.kind() != io::ErrorKind::Interrupted => Err(IngestError::Poll(e)),
            _ => Ok(()),
        }
    }
}
