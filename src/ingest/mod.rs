//! Ingest: datagrams off the network, reassembled into frame-ring slots, with
//! every drop counted by reason (wire format and rules: `docs/wire-format.md`).
//!
//! - [`config`]: [`UdpConfig`] and [`ReassemblyConfig`], the `[ingest]` table
//!   and its validation.
//! - [`transport`]: [`Transport`], the `ingest.transport` choice.
//! - [`allow`]: the source allowlist (`ingest.allow`, CIDR blocks).
//! - [`batch`]: the Linux `recvmmsg`/GRO receive batch (the syscall wrapper).
//! - `handoff`: the pool of receive batches a reading thread fills and an
//!   assembly thread empties (`ingest.assembly_thread`); `assembly_thread`:
//!   the loops of those threads; `steering`: one port's datagrams spread
//!   over several sockets (`ingest.reading_threads`).
//! - [`landing`]: one-copy receive, the payload places the reassembler
//!   predicts and what the kernel left there.
//! - [`tap`]: [`DatagramTap`], the hook a receiver calls per datagram.
//! - [`assembler`]: [`FrameAssembler`], what the receiver feeds: the native
//!   [`Reassembler`] or the RFC 4175 [`crate::rtp::RtpAssembler`].
//! - [`hsb`]: the emulated HSB sensor bridge's DMA engine (frames placed in
//!   slots with big-endian metadata words, no head sequence) and its receiver.
//! - [`counters`]: [`IngestCounters`], shared with metrics through `Arc`.
//! - [`reassembly`]: [`Reassembler`], the pure (no I/O, no clock) state
//!   machine from datagrams to published slots; `history`: what it
//!   remembers of finished frames and of each stream's sequence.
//! - [`route`]: [`StreamRouter`], one receiver's datagrams split among
//!   several assemblers by stream id (loops sharing a UDP port).
//! - [`udp`]: [`UdpReceiver`], the socket side (socket2, mio, kernel
//!   timestamps, UDP GRO, an optional datagram tap) feeding a
//!   [`FrameAssembler`].

mod allow;
pub mod assembler;
mod assembly_thread;
mod batch;
pub mod config;
pub mod counters;
mod handoff;
mod history;
pub mod hsb;
pub mod landing;
pub mod reassembly;
pub mod reply;
pub mod route;
mod steering;
pub mod tap;
pub mod transport;
pub mod udp;

pub use assembler::FrameAssembler;
pub use config::{ReassemblyConfig, ReceiveIntoSlots, UdpConfig};
pub use counters::{CounterClass, IngestCounters, IngestSnapshot};
pub use reassembly::Reassembler;
pub use reply::ReplyBook;
pub use route::{Route, StreamRouter};
pub use tap::DatagramTap;
pub use transport::Transport;
pub use udp::{IngestError, UdpReceiver};
