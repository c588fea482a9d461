//! The UDP ping-pong floor: what the network path alone costs for a frame's
//! datagrams out and an actuation message back, with nothing processed in
//! between. An echo thread answers each whole frame with one reply of the
//! actuation message's size; the round trips go into an HDR histogram. It
//! runs in the same process and over the same path as `frameloop bench`,
//! so the two figures compare.

use super::{FrameBuffer, FrameGeometry, SendError};
use crate::clock::monotonic_ns;
use crate::metrics::Percentiles;
use hdrhistogram::Histogram;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// Round trips of `rounds` frames of `geometry` (each datagram sent as the
/// sender sends it) answered by one `reply_bytes` datagram, over loopback
/// at `ip` (127.0.0.1 or ::1).
pub fn ping_pong_floor(
    geometry: FrameGeometry,
    reply_bytes: usize,
    rounds: usize,
    ip: std::net::IpAddr,
) -> Result<Percentiles, SendError> {
    let socket_err = |source: io::Error| SendError::Socket { source };
    let echo = UdpSocket::bind(SocketAddr::new(ip, 0)).map_err(socket_err)?;
    let client = UdpSocket::bind(SocketAddr::new(ip, 0)).map_err(socket_err)?;
    let (echo_addr, client_addr) =
        (echo.local_addr().map_err(socket_err)?, client.local_addr().map_err(socket_err)?);
    client.connect(echo_addr).map_err(socket_err)?;
    echo.connect(client_addr).map_err(socket_err)?;
    for s in [&echo, &client] {
        s.set_read_timeout(Some(Duration::from_millis(500))).map_err(socket_err)?;
    }
    let packets = geometry.packet_count() as usize;
    let reply = vec![0u8; reply_bytes.max(1)];
    let echo_thread = std::thread::Builder::new()
        .name("frameloop-pingpong".into())
        .spawn(move || {
            let mut buf = vec![0u8; 65_536];
            'rounds: for _ in 0..rounds {
                for _ in 0..packets {
                    if echo.recv(&mut buf).is_err() {
                        break 'rounds;
                    }
                }
                if echo.send(&reply).is_err() {
                    break;
                }
            }
        })
        .map_err(socket_err)?;
    let mut frame = FrameBuffer::new(geometry);
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("static bounds are valid");
    let mut sum = 0u128;
    let mut buf = vec![0u8; 65_536];
    for k in 0..rounds as u64 {
        frame.write_headers(0, k, 0);
        let datagrams: Vec<Vec<u8>> = (0..packets as u32).map(|i| frame.datagram(i)).collect();
        let t0 = monotonic_ns();
        for d in &datagrams {
            client.send(d).map_err(|source| SendError::Send { source })?;
        }
        if client.recv(&mut buf).is_err() {
            break;
        }
        let rtt = (monotonic_ns() - t0).max(1);
        h.saturating_record(rtt);
        sum += u128::from(rtt);
    }
    let _ = echo_thread.join();
    Ok(Percentiles::of(&h, sum))
}
