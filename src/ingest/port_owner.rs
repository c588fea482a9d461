//! Keeping a UDP port to one process. The receiver's own reading threads
//! (`ingest.reading_threads`) share the port through one `SO_REUSEPORT`
//! group, but with `SO_REUSEPORT` set any other process of the same user
//! that sets it too may join the group, and the kernel then spreads the
//! stream over both, each seeing the other's datagrams as lost. Unless
//! `ingest.reuse_port` asks for sharing:
//! - a receiver of one socket binds without `SO_REUSEPORT`: the kernel
//!   refuses a second bind to the port, and a bind to a port already taken;
//! - a group first binds a probe socket without `SO_REUSEPORT`, which fails
//!   when anyone holds the port, and after binding its sockets checks the
//!   kernel's list of UDP sockets (`/proc/net/udp`, `/proc/net/udp6`): any
//!   socket on the port that is not one of the group's (a process that
//!   bound in the instant between the probe and the group) fails the start.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::BorrowedFd;

/// Whether a plain bind (without `SO_REUSEPORT`) to `addr` would succeed
/// now: `Err(AddrInUse)` when any socket holds the port.
pub(super) fn probe_free(addr: SocketAddr) -> io::Result<()> {
    std::net::UdpSocket::bind(addr).map(drop)
}

/// A UDP socket the kernel lists: its bound address and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ListedSocket {
    pub(super) local: SocketAddr,
    pub(super) inode: u64,
}

/// The sockets of one `/proc/net/udp` or `/proc/net/udp6` table.
pub(super) fn parse_table(text: &str) -> Vec<ListedSocket> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (ip, port) = fields.get(1)?.split_once(':')?;
            let port = u16::from_str_radix(port, 16).ok()?;
            let inode = fields.get(9)?.parse().ok()?;
            Some(ListedSocket { local: SocketAddr::new(parse_ip(ip)?, port), inode })
        })
        .collect()
}

/// An address as the kernel prints it: the `u32` words of the network-order
/// address, each in hexadecimal as the host reads it.
fn parse_ip(hex: &str) -> Option<IpAddr> {
    let words: Option<Vec<u32>> =
        (0..hex.len() / 8).map(|i| u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok()).collect();
    let bytes: Vec<u8> = words?.iter().flat_map(|w| w.to_ne_bytes()).collect();
    match bytes.len() {
        4 => Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?))),
        16 => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?))),
        _ => None,
    }
}

/// Whether a socket bound to `a` receives datagrams meant for `b`'s port:
/// the same port, and the same address or either one unspecified.
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port()
        && (a.ip().is_unspecified()
            || b.ip().is_unspecified()
            || a.ip().to_canonical() == b.ip().to_canonical())
}

/// The inode of a socket, as the kernel's tables list it.
pub(super) fn inode(fd: BorrowedFd<'_>) -> io::Result<u64> {
    Ok(nix::sys::stat::fstat(fd).map_err(io::Error::from)?.st_ino)
}

/// The sockets bound to `addr`'s port (and an overlapping address) that are
/// not among `ours` (inodes), from the kernel's UDP tables; `Ok(None)`
/// when the tables cannot be read (no `/proc`), which leaves the probe alone
/// to stand guard.
pub(super) fn strangers(addr: SocketAddr, ours: &[u64]) -> io::Result<Option<Vec<ListedSocket>>> {
    let mut found = Vec::new();
    let mut read_any = false;
    for table in ["/proc/net/udp", "/proc/net/udp6"] {
        match std::fs::read_to_string(table) {
            Ok(text) => {
                read_any = true;
                found.extend(
                    parse_table(&text)
                        .into_iter()
                        .filter(|s| overlaps(s.local, addr) && !ours.contains(&s.inode)),
                );
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(read_any.then_some(found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn the_kernel_tables_parse_into_addresses_and_inodes() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                  \x20 1: 0100007F:1388 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0\n\
                  \x20 2: 00000000:0044 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 77 2 0000000000000000 0\n";
        let got = parse_table(v4);
        // The hex words are the address as the host reads its bytes.
        let loopback = u32::from_ne_bytes([127, 0, 0, 1]);
        assert_eq!(
            format!("{loopback:08X}"),
            if cfg!(target_endian = "little") { "0100007F" } else { "7F000001" }
        );
        if cfg!(target_endian = "little") {
            assert_eq!(
                got,
                [
                    ListedSocket { local: "127.0.0.1:5000".parse().unwrap(), inode: 4242 },
                    ListedSocket { local: "0.0.0.0:68".parse().unwrap(), inode: 77 },
                ]
            );
            let v6 = "header\n   0: 00000000000000000000000001000000:1388 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 99 2 0 0\n";
            assert_eq!(parse_table(v6), [ListedSocket { local: "[::1]:5000".parse().unwrap(), inode: 99 }]);
        }
        assert!(parse_table("header\ngarbage line\n").is_empty());
    }

    #[test]
    fn sockets_overlap_on_one_port_by_address_or_wildcard() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(overlaps(a("127.0.0.1:5000"), a("127.0.0.1:5000")));
        assert!(overlaps(a("0.0.0.0:5000"), a("127.0.0.1:5000")));
        assert!(overlaps(a("[::]:5000"), a("10.0.0.1:5000")));
        assert!(overlaps(a("[::ffff:10.0.0.1]:5000"), a("10.0.0.1:5000")));
        assert!(!overlaps(a("127.0.0.1:5000"), a("127.0.0.1:5001")));
        assert!(!overlaps(a("127.0.0.2:5000"), a("127.0.0.1:5000")));
    }

    #[test]
    fn a_socket_of_another_owner_on_the_port_is_found_and_ours_are_not() {
        let ours = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = ours.local_addr().unwrap();
        let mine = vec![inode(ours.as_fd()).unwrap()];
        let Some(found) = strangers(addr, &mine).unwrap() else {
            eprintln!("skipped: no /proc/net/udp here");
            return;
        };
        assert!(found.is_empty(), "{found:?}");
        assert!(probe_free(addr).is_err(), "the port is taken");
        let found = strangers(addr, &[]).unwrap().unwrap();
        assert_eq!(found.iter().map(|s| s.inode).collect::<Vec<_>>(), mine);
    }
}
