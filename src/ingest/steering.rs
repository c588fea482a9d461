//! Spreading one port's datagrams over several sockets
//! (`ingest.reading_threads`): the sockets form one `SO_REUSEPORT` group,
//! and a classic BPF program attached to the group picks a socket at random
//! for each packet the stack delivers (a datagram, or a whole GRO/GSO
//! buffer), so that even a single flow is read by several threads. The
//! kernel's own choice hashes the addresses, which sends one sender's flow
//! to one socket. The assembly thread puts the datagrams back in arrival
//! order (`ingest/assembly_thread.rs`).

use std::io;
use std::os::fd::RawFd;

/// `SO_ATTACH_REUSEPORT_CBPF` (asm-generic/socket.h; the libc crate has it
/// for Android only). Its value differs on sparc, alpha and parisc.
#[cfg(not(any(target_arch = "sparc64", target_arch = "sparc")))]
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;
#[cfg(any(target_arch = "sparc64", target_arch = "sparc"))]
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 0x35;

/// One classic BPF instruction.
fn op(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt: 0, jf: 0, k }
}

/// The program: a random 32-bit number modulo `sockets`, returned as the
/// index of the socket in the group (in the order the sockets were bound).
fn random_choice(sockets: u32) -> [libc::sock_filter; 3] {
    let random = (libc::SKF_AD_OFF + libc::SKF_AD_RANDOM) as u32;
    [
        op(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, random),
        op(libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K, sockets),
        op(libc::BPF_RET | libc::BPF_A, 0),
    ]
}

/// Has the `SO_REUSEPORT` group of bound socket `fd` (which must be bound
/// with its `sockets - 1` peers, in order) deliver each packet to one of
/// its `sockets` sockets at random.
pub(super) fn spread_at_random(fd: RawFd, sockets: usize) -> io::Result<()> {
    let sockets = u32::try_from(sockets).map_err(|_| io::ErrorKind::InvalidInput)?;
    if sockets == 0 {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    let mut program = random_choice(sockets);
    let fprog = libc::sock_fprog { len: program.len() as u16, filter: program.as_mut_ptr() };
    // SAFETY: `fprog` points at `program`, which lives through the call and
    // holds `len` instructions; the kernel copies the program.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// What waits at the head of a socket's receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Head {
    /// No datagram waits.
    Empty,
    /// A datagram waits that arrived at this time (`SO_TIMESTAMPNS`,
    /// CLOCK_REALTIME ns); those behind it arrived no earlier.
    ArrivedAt(u64),
    /// A datagram waits without a receive time, or the peek failed.
    Unknown,
}

/// Looks at the head of socket `fd`'s receive queue without taking
/// anything (a non-blocking peek of no bytes, with the control messages).
pub(super) fn peek_head(fd: RawFd) -> Head {
    let mut control = [0u64; 8];
    // SAFETY: all-zero is a valid msghdr (no name, no vectors).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: `msg` names no buffers but `control`, which lives through the
    // call and is as long as `msg_controllen` says; MSG_PEEK takes nothing.
    let rc = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_PEEK | libc::MSG_DONTWAIT | libc::MSG_TRUNC) };
    if rc < 0 {
        let empty = io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN);
        return if empty { Head::Empty } else { Head::Unknown };
    }
    // SAFETY: the kernel filled `msg_control` up to `msg_controllen`, and
    // the CMSG_* helpers stay inside that span; the timestamp is read
    // unaligned at its size.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if ((*c).cmsg_level, (*c).cmsg_type) == (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                return Head::ArrivedAt(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Head::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Protocol, Socket, Type};
    use std::net::{SocketAddr, UdpSocket};
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    /// `n` sockets bound to one loopback port in one `SO_REUSEPORT` group.
    fn group(n: usize) -> (Vec<Socket>, SocketAddr) {
        let mut sockets: Vec<Socket> = Vec::new();
        let mut addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        for _ in 0..n {
            let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
            s.set_reuse_port(true).unwrap();
            s.bind(&addr.into()).unwrap();
            addr = s.local_addr().unwrap().as_socket().unwrap();
            s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
            sockets.push(s);
        }
        (sockets, addr)
    }

    fn drain(s: &Socket) -> usize {
        let mut n = 0;
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 64];
        s.set_nonblocking(true).unwrap();
        while s.recv(&mut buf).is_ok() {
            n += 1;
        }
        n
    }

    #[test]
    fn one_flow_is_spread_over_every_socket_of_the_group() {
        for n in [2, 3] {
            let (sockets, addr) = group(n);
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            // Without the program the group hashes the addresses: one
            // flow lands on one socket.
            for i in 0..60u32 {
                tx.send_to(&i.to_le_bytes(), addr).unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
            let hashed: Vec<usize> = sockets.iter().map(drain).collect();
            assert_eq!(hashed.iter().sum::<usize>(), 60);
            assert_eq!(hashed.iter().filter(|&&c| c > 0).count(), 1, "{hashed:?}");

            spread_at_random(sockets[0].as_raw_fd(), n).unwrap();
            // In rounds the sockets' default buffers hold.
            let mut spread = vec![0; n];
            for round in 0..6u32 {
                for i in 0..100 {
                    tx.send_to(&(round * 100 + i).to_le_bytes(), addr).unwrap();
                }
                std::thread::sleep(Duration::from_millis(10));
                for (count, s) in spread.iter_mut().zip(&sockets) {
                    *count += drain(s);
                }
            }
            assert_eq!(spread.iter().sum::<usize>(), 600, "nothing lost: {spread:?}");
            // Each of n sockets gets 600/n on average; far below that
            // would mean the program is not choosing.
            assert!(spread.iter().all(|&c| c >= 600 / n / 3), "{spread:?}");
        }
    }

    #[test]
    fn a_group_of_one_and_a_zero_count_are_handled() {
        let (sockets, addr) = group(1);
        spread_at_random(sockets[0].as_raw_fd(), 1).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", addr).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(drain(&sockets[0]), 1);
        assert_eq!(
            spread_at_random(sockets[0].as_raw_fd(), 0).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn the_head_of_the_queue_says_when_it_arrived_and_is_not_taken() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = rx.as_raw_fd();
        assert_eq!(peek_head(fd), Head::Empty);
        tx.send_to(b"", rx.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(peek_head(fd), Head::Unknown, "a zero-length datagram waits, without a receive time");
        let mut buf = [0u8; 8];
        assert_eq!(rx.recv(&mut buf).unwrap(), 0);
        assert_eq!(peek_head(fd), Head::Empty);

        let on = 1 as libc::c_int;
        // SAFETY: `on` is a live c_int and the length passed is its size.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                4,
            )
        };
        assert_eq!(rc, 0);
        // The kernel turns receive stamping on a moment after the first
        // socket asks (until then a datagram is stamped when it is read).
        std::thread::sleep(Duration::from_millis(20));
        let before = crate::clock::realtime_ns();
        tx.send_to(b"first", rx.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        tx.send_to(b"second", rx.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let Head::ArrivedAt(first) = peek_head(fd) else { panic!("a timestamped datagram waits") };
        assert!(first >= before && first < crate::clock::realtime_ns(), "{first} after {before}");
        assert_eq!(peek_head(fd), Head::ArrivedAt(first), "peeking takes nothing");
        assert_eq!(rx.recv(&mut buf).unwrap(), 5);
        let Head::ArrivedAt(second) = peek_head(fd) else { panic!("the second waits") };
        assert!(second >= first + 4_000_000, "{second} vs {first}");
        assert_eq!(peek_head(-1), Head::Unknown, "an error is not taken for empty");
    }
}
