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
pub enum IngestError {
    #[error("ingest.bind = {0:?} is not an address and port; write it like \"0.0.0.0:5000\"")]
    BadBind(String),
    #[error("ingest.allow entry {entry:?}: {reason}")]
    BadAllow {
        entry: String,
        #[source]
        reason: super::allow::CidrError,
    },
    #[error(
        "cannot bind UDP {addr}: {source}; choose a free port in ingest.bind, stop the other listener, or set ingest.reuse_port = true on both"
    )]
    Bind { addr: SocketAddr, source: io::Error },
    #[error(
        "UDP {addr} (ingest.bind) is already bound by another process ({source}), perhaps another frameloop: \
         stop it or choose another port in ingest.bind. To share one port between processes on purpose \
         (the kernel then spreads the datagrams over them, each seeing only its share), set \
         ingest.reuse_port = true in every one of them"
    )]
    PortTaken { addr: SocketAddr, source: io::Error },
    #[error("cannot set up the UDP socket ({what}): {source}")]
    Socket { what: &'static str, source: io::Error },
    #[error("waiting for UDP readiness failed: {0}")]
    Poll(io::Error),
    #[error("reading UDP datagrams failed: {0}")]
    Recv(io::Error),
    #[error(
        "cannot start the assembly thread of ingest.assembly_thread: {0}; set ingest.assembly_thread = false"
    )]
    AssemblySpawn(io::Error),
    #[error("the assembly thread (ingest.assembly_thread) could not start: {0}")]
    AssemblyStart(#[source] ThreadStartError),
    #[error("the assembly thread (ingest.assembly_thread) stopped while the receiver ran")]
    AssemblyGone,
    #[error("cannot start a reading thread of ingest.reading_threads: {0}; lower ingest.reading_threads")]
    ReadingThreadSpawn(io::Error),
    #[error("reading thread {index} (ingest.reading_threads) could not start: {why}")]
    ReadingThreadStart {
        index: usize,
        #[source]
        why: ThreadStartError,
    },
    #[error("another thread of the receiver (ingest.assembly_thread, ingest.reading_threads) stopped")]
    PeerStopped,
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
