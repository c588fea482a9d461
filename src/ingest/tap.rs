//! The datagram tap: a hook a receiver calls for every datagram it takes off
//! the socket (`frameloop run --record` records through it).

use std::net::SocketAddr;

/// Sees every datagram a receiver takes off the network, before reassembly.
///
/// Called on the receive path: implementations must not block for long and
/// must not fail the receiver; they keep their own errors.
pub trait DatagramTap: Send {
    /// One datagram from `src` to `dst`, received at `rx_ns` (ns, CLOCK_REALTIME).
    fn on_datagram(&mut self, src: SocketAddr, dst: SocketAddr, bytes: &[u8], rx_ns: u64);
}
