//! Ingest: datagrams off the network, reassembled into frame-ring slots, with
//! every drop counted by reason (wire format and rules: `docs/wire-format.md`).
//!
//! - [`config`]: [`UdpConfig`] and [`ReassemblyConfig`], the `[ingest]` table
//!   and its validation.
//! - [`transport`]: [`Transport`], the `ingest.transport` choice.
//! - `allow`: the source allowlist (`ingest.allow`, CIDR blocks).
//! - `batch`: the Linux `recvmmsg`/GRO receive batch (the syscall wrapper).
//! - `handoff`: the pool of receive batches a reading thread fills and an
//!   assembly thread empties (`ingest.assembly_thread`); `assembly_thread`:
//!   the loops of those threads; `steering`: one port's datagrams spread
//!   over several sockets (`ingest.reading_threads`); `port_owner`: the
//!   port kept to this process unless `ingest.reuse_port` shares it.
//! - [`landing`]: one-copy receive, the payload places the reassembler
//!   predicts and what the kernel left there.
//! - [`tap`]: [`DatagramTap`], the hook a receiver calls per datagram.
//! - [`assembler`]: [`FrameAssembler`], the interface the receivers feed;
//!   the native [`Reassembler`] implements it here, other formats where
//!   they live (`rtp/` for RFC 4175). Ingest imports no format module: the
//!   appliance (`app/receivers.rs`) chooses the assembler.
//! - [`hsb`]: the emulated HSB sensor bridge's DMA engine (frames placed in
//!   slots with big-endian metadata words, no head sequence) and its receiver.
//! - [`counters`]: [`IngestCounters`], shared with metrics through `Arc`.
//! - [`reassembly`]: [`Reassembler`], the pure (no I/O, no clock) state
//!   machine from datagrams to published slots; `history`: what it
//!   remembers of finished frames and of each stream's sequence.
//! - [`route`]: [`StreamRouter`], one receiver's datagrams split among
//!   several assemblers by stream id (loops sharing a UDP port).
//! - [`udp`]: [`UdpReceiver`], the receiver: a bound socket (or a group of
//!   them, one per reading thread) feeding a [`FrameAssembler`], and its
//!   parts: `udp/threads.rs` the thread orchestration of
//!   `ingest.assembly_thread`, `udp/drain.rs` the copy drain (batches read
//!   until the socket is empty), `udp/one_copy.rs` one-copy delivery
//!   (`ingest.receive_into_slots`).
//! - `error`: [`IngestError`], every error of setting up or running a
//!   receiver; `socket`: socket set-up (socket2 options, bind, mio
//!   readiness); `receive_loop`: the loop every reading thread runs
//!   (busy polling, waits, ticks); `deliver`: copy delivery of one received
//!   buffer (GRO split, tap, allowlist) to the assembler.

mod allow;
pub mod assembler;
mod assembly_thread;
mod batch;
pub mod config;
pub mod counters;
mod deliver;
mod error;
mod handoff;
mod history;
pub mod hsb;
pub mod landing;
mod port_owner;
pub mod reassembly;
mod receive_loop;
pub mod reply;
pub mod route;
mod socket;
mod steering;
pub mod tap;
pub mod transport;
pub mod udp;

pub use allow::CidrError;
pub use assembler::FrameAssembler;
pub use config::{ReassemblyConfig, ReceiveIntoSlots, UdpConfig};
pub use counters::{CounterClass, IngestCounters, IngestSnapshot};
pub use error::IngestError;
pub use reassembly::Reassembler;
pub use reply::ReplyBook;
pub use route::{Route, StreamRouter};
pub use tap::DatagramTap;
pub use transport::Transport;
pub use udp::UdpReceiver;
