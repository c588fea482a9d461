//! The ingest errors ([`IngestError`]): what went wrong setting up or
//! running a receiver, each saying what to change.

use std::io;
use std::net::SocketAddr;
use thiserror::Error;

/// Why a thread's start hook refused to let it run (placing it on a core
/// failed, say): whatever error the layer that set the hook has, kept whole.
pub type ThreadStartError = Box<dyn std::error::Error + Send + Sync>;

/// Errors of the UDP receiver; each says what to change.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum IngestError {
    /// `ingest.bind` is not an address and port; write it like `"0.0.0.0:5000"`.
    #[error("ingest.bind = {0:?} is not an address and port; write it like \"0.0.0.0:5000\"")]
    BadBind(String),
    /// An `ingest.allow` entry is not an address or CIDR block; fix the entry (the reason says
    /// how).
    #[error("ingest.allow entry {entry:?}: {reason}")]
    BadAllow {
        entry: String,
        #[source]
        reason: super::allow::CidrError,
    },
    /// The UDP address cannot be bound; choose a free port in `ingest.bind` or share it with
    /// `ingest.reuse_port`.
    #[error(
        "cannot bind UDP {addr}: {source}; choose a free port in ingest.bind, stop the other listener, or set ingest.reuse_port = true on both"
    )]
    Bind { addr: SocketAddr, source: io::Error },
    /// Another process holds the UDP port; stop it, choose another port, or share it on purpose
    /// with `ingest.reuse_port`.
    #[error(
        "UDP {addr} (ingest.bind) is already bound by another process ({source}), perhaps another frameloop: \
         stop it or choose another port in ingest.bind. To share one port between processes on purpose \
         (the kernel then spreads the datagrams over them, each seeing only its share), set \
         ingest.reuse_port = true in every one of them"
    )]
    PortTaken { addr: SocketAddr, source: io::Error },
    /// The UDP socket could not be set up; check the process's socket limits and the named option.
    #[error("cannot set up the UDP socket ({what}): {source}; check the process's socket and file limits")]
    Socket { what: &'static str, source: io::Error },
    /// Waiting for datagrams failed; restart the appliance and check the interface.
    #[error("waiting for UDP readiness failed: {0}; restart the appliance and check the interface")]
    Poll(io::Error),
    /// Reading datagrams failed; restart the appliance and check the interface.
    #[error("reading UDP datagrams failed: {0}; restart the appliance and check the interface")]
    Recv(io::Error),
    /// The assembly thread could not be created; set `ingest.assembly_thread = false` or raise the
    /// thread limit.
    #[error(
        "cannot start the assembly thread of ingest.assembly_thread: {0}; set ingest.assembly_thread = false"
    )]
    AssemblySpawn(io::Error),
    /// The assembly thread could not set itself up; set `ingest.assembly_thread = false` or fix its
    /// placement.
    #[error(
        "the assembly thread (ingest.assembly_thread) could not start: {0}; fix its placement or set ingest.assembly_thread = false"
    )]
    AssemblyStart(#[source] ThreadStartError),
    /// The assembly thread stopped while the receiver ran; see the log for why, and restart the
    /// appliance.
    #[error(
        "the assembly thread (ingest.assembly_thread) stopped while the receiver ran; see the log for why and restart the appliance"
    )]
    AssemblyGone,
    /// A reading thread could not be created; lower `ingest.reading_threads`.
    #[error("cannot start a reading thread of ingest.reading_threads: {0}; lower ingest.reading_threads")]
    ReadingThreadSpawn(io::Error),
    /// A reading thread could not set itself up; lower `ingest.reading_threads` or fix its
    /// placement.
    #[error(
        "reading thread {index} (ingest.reading_threads) could not start: {why}; fix its placement or lower ingest.reading_threads"
    )]
    ReadingThreadStart {
        index: usize,
        #[source]
        why: ThreadStartError,
    },
    /// Another thread of the receiver stopped; see the log for why, and restart the appliance.
    #[error(
        "another thread of the receiver (ingest.assembly_thread, ingest.reading_threads) stopped; see the log for why and restart the appliance"
    )]
    PeerStopped,
    /// The kernel cannot spread datagrams over the reading threads; use Linux 4.5 or later, or set
    /// `ingest.reading_threads = 1`.
    #[error(
        "cannot spread datagrams over the ingest.reading_threads sockets (SO_ATTACH_REUSEPORT_CBPF): \
         {0}; the kernel needs classic BPF reuseport programs (Linux 4.5 or later), or set \
         ingest.reading_threads = 1"
    )]
    Steering(io::Error),
}

/// The error of a bind to `addr` that failed with `source`.
pub(super) fn bind_error(addr: SocketAddr, source: io::Error) -> IngestError {
    if source.kind() == io::ErrorKind::AddrInUse {
        IngestError::PortTaken { addr, source }
    } else {
        IngestError::Bind { addr, source }
    }
}

/// The error of a socket set-up step `what`.
pub(super) fn setup_error(what: &'static str) -> impl Fn(io::Error) -> IngestError {
    move |source| IngestError::Socket { what, source }
}
