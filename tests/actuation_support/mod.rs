//! Shared by the actuation tests (host and CUDA backends): the sensor's
//! sending arguments, `[[actuate]]` tables, loopback listeners and the CPU
//! chain's samples for a frame.

#![allow(dead_code)]

use crate::appliance_support::PATIENCE;
use frameloop::actuate::{ActuateConfig, When, config::Part};
use frameloop::ops::{CpuChain, OpSpec};
use frameloop::sender::{GsoMode, Pattern, SendArgs};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// `count` frames of `frame_bytes` in `pattern` to `to` at `rate` frames/s.
pub fn send_args(to: SocketAddr, count: u64, frame_bytes: usize, pattern: Pattern, rate: f64) -> SendArgs {
    SendArgs {
        to: to.to_string(),
        rate,
        frame_bytes: frame_bytes as u64,
        packet_bytes: 1472,
        count: Some(count),
        duration: None,
        streams: 1,
        pattern,
        gso: GsoMode::Off,
        pacing: Default::default(),
        catch_up: frameloop::sender::DEFAULT_CATCH_UP,
        bind: None,
        link_gbps: None,
    }
}

/// One `[[actuate]]` table.
pub fn output(destination: &[&str], send: Vec<Part>, samples: u32, when: When) -> ActuateConfig {
    ActuateConfig {
        destination: destination.iter().map(|d| d.to_string()).collect(),
        send,
        samples,
        when,
        ..Default::default()
    }
}

/// A UDP socket on loopback (port 0) that receives with a short timeout,
/// its receive buffer as large as the system allows (many messages may
/// arrive before the test reads them).
pub fn listener() -> (UdpSocket, SocketAddr) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let _ = socket2::SockRef::from(&s).set_recv_buffer_size(16 << 20);
    let addr = s.local_addr().unwrap();
    (s, addr)
}

/// [`collect`] on a thread of its own, started now: the datagrams are read
/// while the frames are still being sent, so none overflows the socket.
pub fn collect_in_background(
    socket: UdpSocket,
    done: impl Fn(&[Vec<u8>]) -> bool + Send + 'static,
) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
    std::thread::spawn(move || collect(&socket, done))
}

/// A sensor socket connected to the appliance: it sends the frames and
/// receives the replies.
pub fn sensor(to: SocketAddr) -> (Socket, UdpSocket) {
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    socket.bind(&SockAddr::from("127.0.0.1:0".parse::<SocketAddr>().unwrap())).unwrap();
    // Many replies may wait before the test reads them.
    let _ = socket.set_recv_buffer_size(8 << 20);
    socket.connect(&SockAddr::from(to)).unwrap();
    let replies: UdpSocket = socket.try_clone().unwrap().into();
    replies.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    (socket, replies)
}

/// Every datagram `socket` receives until `done` says enough or PATIENCE ends.
pub fn collect(socket: &UdpSocket, done: impl Fn(&[Vec<u8>]) -> bool) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + PATIENCE;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while !done(&got) && Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
    }
    got
}

/// The CPU chain's final samples for frame `seq` of `frame_bytes` in `pattern`.
pub fn chain_samples(chain: &[OpSpec], seq: u64, frame_bytes: usize, pattern: Pattern) -> Vec<f32> {
    let mut cpu = CpuChain::new(chain, frame_bytes).unwrap();
    let out = cpu.run(&pattern.frame(0, seq, frame_bytes));
    cpu.output(&out).to_vec()
}
