//! Link, IP and UDP headers of captured packets: decoding a captured frame
//! down to its UDP datagram (every other packet is a counted skip by
//! reason), and encoding the synthetic IPv4/IPv6 + UDP headers that
//! recordings carry under `LINKTYPE_RAW`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Link-layer header types (tcpdump.org `LINKTYPE_*` values) this reader decodes.
pub mod linktype {
    /// BSD loopback: 4-byte address family in the capturing host's byte order.
    pub const NULL: u32 = 0;
    /// Ethernet II, with any number of 802.1Q / 802.1ad tags.
    pub const ETHERNET: u32 = 1;
    /// Raw IP as written by some systems as DLT_RAW (12 on most, 14 on OpenBSD).
    pub const RAW_DLT12: u32 = 12;
    pub const RAW_DLT14: u32 = 14;
    /// Raw IPv4 or IPv6 (version from the first nibble).
    pub const RAW: u32 = 101;
    /// OpenBSD loopback: address family in network byte order.
    pub const LOOP: u32 = 108;
    /// Linux cooked capture v1 (`tcpdump -i any`).
    pub const LINUX_SLL: u32 = 113;
    /// Raw IPv4.
    pub const IPV4: u32 = 228;
    /// Raw IPv6.
    pub const IPV6: u32 = 229;
    /// Linux cooked capture v2.
    pub const LINUX_SLL2: u32 = 276;
}

/// Why a captured packet yields no UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkipReason {
    /// The interface's link type is not one [`linktype`] lists.
    UnsupportedLinkType,
    /// Not IPv4 or IPv6 (ARP, LLDP, ...).
    NotIp,
    /// IP but not UDP (TCP, ICMP, ...).
    NotUdp,
    /// An IPv4 fragment (the datagram is not reassembled).
    Ipv4Fragment,
    /// An IPv6 fragment.
    Ipv6Fragment,
    /// The capture holds fewer bytes than the headers announce (snap length).
    Truncated,
    /// Header fields that contradict each other.
    Malformed,
    /// Destination port not selected.
    FilteredPort,
    /// Native stream id not selected (or not a native datagram while filtering by stream).
    FilteredStream,
}

impl SkipReason {
    /// Every reason, in summary order.
    pub const ALL: [SkipReason; 9] = [
        SkipReason::UnsupportedLinkType,
        SkipReason::NotIp,
        SkipReason::NotUdp,
        SkipReason::Ipv4Fragment,
        SkipReason::Ipv6Fragment,
        SkipReason::Truncated,
        SkipReason::Malformed,
        SkipReason::FilteredPort,
        SkipReason::FilteredStream,
    ];

    /// Stable name for the summary.
    pub fn name(self) -> &'static str {
        match self {
            SkipReason::UnsupportedLinkType => "unsupported_link_type",
            SkipReason::NotIp => "not_ip",
            SkipReason::NotUdp => "not_udp",
            SkipReason::Ipv4Fragment => "ipv4_fragment",
            SkipReason::Ipv6Fragment => "ipv6_fragment",
            SkipReason::Truncated => "truncated",
            SkipReason::Malformed => "malformed",
            SkipReason::FilteredPort => "filtered_port",
            SkipReason::FilteredStream => "filtered_stream",
        }
    }
}

/// A UDP datagram found in a captured packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpView<'a> {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub payload: &'a [u8],
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: [u16; 3] = [0x8100, 0x88a8, 0x9100];
/// VLAN tags followed before giving up (real frames carry one or two).
const MAX_VLAN_TAGS: usize = 8;
const IPPROTO_UDP: u8 = 17;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// Decodes a captured frame of `link_type` down to its UDP datagram.
pub fn decode_udp(link_type: u32, frame: &[u8]) -> Result<UdpView<'_>, SkipReason> {
    match link_type {
        linktype::ETHERNET => {
            let mut ethertype = be16(frame, 12).ok_or(SkipReason::Truncated)?;
            let mut at = 14;
            for _ in 0..MAX_VLAN_TAGS {
                if !ETHERTYPE_VLAN.contains(&ethertype) {
                    break;
                }
                ethertype = be16(frame, at + 2).ok_or(SkipReason::Truncated)?;
                at += 4;
            }
            by_ethertype(ethertype, &frame[at..])
        }
        linktype::RAW | linktype::RAW_DLT12 | linktype::RAW_DLT14 => by_version(frame),
        linktype::IPV4 => decode_ipv4(frame),
        linktype::IPV6 => decode_ipv6(frame),
        linktype::LINUX_SLL => {
            by_ethertype(be16(frame, 14).ok_or(SkipReason::Truncated)?, frame.get(16..).unwrap_or(&[]))
        }
        linktype::LINUX_SLL2 => by_ethertype(
            be16(frame, 0).ok_or(SkipReason::Truncated)?,
            frame.get(20..).ok_or(SkipReason::Truncated)?,
        ),
        linktype::NULL | linktype::LOOP => {
            let family: [u8; 4] =
                frame.get(..4).ok_or(SkipReason::Truncated)?.try_into().map_err(|_| SkipReason::Truncated)?;
            // AF_INET is 2 everywhere; AF_INET6 is 10 (Linux), 24 (BSDs), 28 (FreeBSD), 30 (macOS).
            let v = if link_type == linktype::LOOP {
                u32::from_be_bytes(family)
            } else {
                u32::from_le_bytes(family).min(u32::from_be_bytes(family))
            };
            match v {
                2 => decode_ipv4(&frame[4..]),
                10 | 24 | 28 | 30 => decode_ipv6(&frame[4..]),
                _ => Err(SkipReason::NotIp),
            }
        }
        _ => Err(SkipReason::UnsupportedLinkType),
    }
}

fn by_ethertype(ethertype: u16, ip: &[u8]) -> Result<UdpView<'_>, SkipReason> {
    match ethertype {
        ETHERTYPE_IPV4 => decode_ipv4(ip),
        ETHERTYPE_IPV6 => decode_ipv6(ip),
        _ => Err(SkipReason::NotIp),
    }
}

fn by_version(ip: &[u8]) -> Result<UdpView<'_>, SkipReason> {
    match ip.first().map(|b| b >> 4) {
        Some(4) => decode_ipv4(ip),
        Some(6) => decode_ipv6(ip),
        Some(_) => Err(SkipReason::NotIp),
        None => Err(SkipReason::Truncated),
    }
}

fn decode_ipv4(ip: &[u8]) -> Result<UdpView<'_>, SkipReason> {
    if ip.len() < 20 {
        return Err(SkipReason::Truncated);
    }
    if ip[0] >> 4 != 4 {
        return Err(SkipReason::Malformed);
    }
    let header_len = (ip[0] & 0x0f) as usize * 4;
    let total_len = be16(ip, 2).unwrap_or(0) as usize;
    if header_len < 20 || total_len < header_len {
        return Err(SkipReason::Malformed);
    }
    if ip.len() < total_len {
        return Err(SkipReason::Truncated);
    }
    let flags_fragment = be16(ip, 6).unwrap_or(0);
    if flags_fragment & 0x3fff != 0 {
        // More-fragments set, or a non-zero fragment offset.
        return Err(SkipReason::Ipv4Fragment);
    }
    if ip[9] != IPPROTO_UDP {
        return Err(SkipReason::NotUdp);
    }
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    decode_udp_header(IpAddr::V4(src), IpAddr::V4(dst), &ip[header_len..total_len])
}

fn decode_ipv6(ip: &[u8]) -> Result<UdpView<'_>, SkipReason> {
    if ip.len() < 40 {
        return Err(SkipReason::Truncated);
    }
    if ip[0] >> 4 != 6 {
        return Err(SkipReason::Malformed);
    }
    let payload_len = be16(ip, 4).unwrap_or(0) as usize;
    if payload_len == 0 {
        // Jumbogram (hop-by-hop option) or empty: not a datagram frameloop records.
        return Err(SkipReason::Malformed);
    }
    if ip.len() < 40 + payload_len {
        return Err(SkipReason::Truncated);
    }
    let addr = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&ip[at..at + 16]);
        IpAddr::V6(Ipv6Addr::from(a))
    };
    let (src, dst) = (addr(8), addr(24));
    let mut next = ip[6];
    let mut rest = &ip[40..40 + payload_len];
    // Walk a bounded number of extension headers.
    for _ in 0..8 {
        match next {
            IPPROTO_UDP => return decode_udp_header(src, dst, rest),
            44 => return Err(SkipReason::Ipv6Fragment),
            0 | 43 | 60 | 51 => {
                let (n, len) =
                    (*rest.first().ok_or(SkipReason::Truncated)?, *rest.get(1).ok_or(SkipReason::Truncated)?);
                let len = if next == 51 { (len as usize + 2) * 4 } else { (len as usize + 1) * 8 };
                rest = rest.get(len..).ok_or(SkipReason::Truncated)?;
                next = n;
            }
            _ => return Err(SkipReason::NotUdp),
        }
    }
    Err(SkipReason::Malformed)
}

fn decode_udp_header(src: IpAddr, dst: IpAddr, udp: &[u8]) -> Result<UdpView<'_>, SkipReason> {
    if udp.len() < 8 {
        return Err(SkipReason::Truncated);
    }
    let len = be16(udp, 4).unwrap_or(0) as usize;
    if len < 8 || len > udp.len() {
        return Err(SkipReason::Malformed);
    }
    Ok(UdpView {
        src: SocketAddr::new(src, be16(udp, 0).unwrap_or(0)),
        dst: SocketAddr::new(dst, be16(udp, 2).unwrap_or(0)),
        payload: &udp[8..len],
    })
}

/// Largest UDP payload [`encode_ip_udp`] accepts for an IPv4 pair.
pub const MAX_UDP_PAYLOAD_V4: usize = 65535 - 20 - 8;
/// Largest UDP payload for an IPv6 pair.
pub const MAX_UDP_PAYLOAD_V6: usize = 65535 - 8;

fn checksum_add(mut sum: u32, bytes: &[u8]) -> u32 {
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [last] = chunks.remainder() {
        sum += (*last as u32) << 8;
    }
    sum
}

fn checksum_fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Encodes a UDP datagram as a raw IP packet (IPv4 when both addresses are
/// IPv4, IPv6 otherwise with IPv4 addresses mapped), with correct IP and UDP
/// checksums, into `out` (cleared first). Returns `false`, writing nothing,
/// when the payload does not fit one IP packet.
pub fn encode_ip_udp(src: SocketAddr, dst: SocketAddr, payload: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    let udp_len = 8 + payload.len();
    let mut udp = [0u8; 8];
    udp[0..2].copy_from_slice(&src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            if payload.len() > MAX_UDP_PAYLOAD_V4 {
                return false;
            }
            udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            let mut ip = [0u8; 20];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
            ip[6] = 0x40; // don't fragment
            ip[8] = 64;
            ip[9] = IPPROTO_UDP;
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            let ip_sum = checksum_fold(checksum_add(0, &ip));
            ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());
            let mut sum = checksum_add(0, &s.octets());
            sum = checksum_add(sum, &d.octets());
            sum += IPPROTO_UDP as u32 + udp_len as u32;
            sum = checksum_add(checksum_add(sum, &udp), payload);
            let c = checksum_fold(sum);
            udp[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
            out.extend_from_slice(&ip);
        }
        (s, d) => {
            if payload.len() > MAX_UDP_PAYLOAD_V6 {
                return false;
            }
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            let (s, d) = (v6(s), v6(d));
            udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            let mut ip = [0u8; 40];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            ip[6] = IPPROTO_UDP;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&s.octets());
            ip[24..40].copy_from_slice(&d.octets());
            let mut sum = checksum_add(0, &s.octets());
            sum = checksum_add(sum, &d.octets());
            sum += udp_len as u32 + IPPROTO_UDP as u32;
            sum = checksum_add(checksum_add(sum, &udp), payload);
            let c = checksum_fold(sum);
            udp[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
            out.extend_from_slice(&ip);
        }
    }
    out.extend_from_slice(&udp);
    out.extend_from_slice(payload);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn raw_ip_round_trip_v4_and_v6() {
        let mut buf = Vec::new();
        for (s, d) in [("10.0.0.1:4000", "10.0.0.2:5000"), ("[::1]:1", "[fe80::2]:65535")] {
            assert!(encode_ip_udp(addr(s), addr(d), b"hello", &mut buf));
            let v = decode_udp(linktype::RAW, &buf).unwrap();
            assert_eq!((v.src, v.dst, v.payload), (addr(s), addr(d), &b"hello"[..]));
        }
        assert!(!encode_ip_udp(
            addr("1.1.1.1:1"),
            addr("1.1.1.1:2"),
            &vec![0; MAX_UDP_PAYLOAD_V4 + 1],
            &mut buf
        ));
        assert!(buf.is_empty());
    }

    #[test]
    fn ipv4_checksums_verify() {
        let mut buf = Vec::new();
        encode_ip_udp(addr("192.168.1.7:1234"), addr("192.168.1.9:5004"), b"odd", &mut buf);
        assert_eq!(checksum_fold(checksum_add(0, &buf[..20])), 0);
        let mut pseudo = buf[12..20].to_vec();
        pseudo.extend_from_slice(&[0, 17, 0, 11]);
        assert_eq!(checksum_fold(checksum_add(checksum_add(0, &pseudo), &buf[20..])), 0);
    }

    #[test]
    fn link_layers_and_vlan_tags() {
        let mut ip = Vec::new();
        encode_ip_udp(addr("10.0.0.1:1"), addr("10.0.0.2:2"), b"x", &mut ip);
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x88, 0xa8, 0, 5, 0x81, 0x00, 0, 6, 0x08, 0x00]); // QinQ
        eth.extend_from_slice(&ip);
        assert_eq!(decode_udp(linktype::ETHERNET, &eth).unwrap().payload, b"x");
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(&ip);
        assert_eq!(decode_udp(linktype::LINUX_SLL, &sll).unwrap().payload, b"x");
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(&ip);
        assert_eq!(decode_udp(linktype::LINUX_SLL2, &sll2).unwrap().payload, b"x");
        for family in [[2, 0, 0, 0], [0, 0, 0, 2]] {
            let null = [&family[..], &ip].concat();
            assert_eq!(decode_udp(linktype::NULL, &null).unwrap().payload, b"x");
        }
        assert_eq!(decode_udp(linktype::LOOP, &[&[0, 0, 0, 2][..], &ip].concat()).unwrap().payload, b"x");
        assert_eq!(decode_udp(linktype::IPV4, &ip).unwrap().payload, b"x");
        assert_eq!(decode_udp(147, &ip), Err(SkipReason::UnsupportedLinkType));
    }

    #[test]
    fn skips_by_reason() {
        let mut ip = Vec::new();
        encode_ip_udp(addr("10.0.0.1:1"), addr("10.0.0.2:2"), b"abcd", &mut ip);
        let mut frag = ip.clone();
        frag[6] |= 0x20; // more fragments
        assert_eq!(decode_udp(linktype::RAW, &frag), Err(SkipReason::Ipv4Fragment));
        let mut tcp = ip.clone();
        tcp[9] = 6;
        assert_eq!(decode_udp(linktype::RAW, &tcp), Err(SkipReason::NotUdp));
        assert_eq!(decode_udp(linktype::RAW, &ip[..ip.len() - 1]), Err(SkipReason::Truncated));
        let mut bad_udp_len = ip.clone();
        bad_udp_len[25] = 200;
        assert_eq!(decode_udp(linktype::RAW, &bad_udp_len), Err(SkipReason::Malformed));
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06, 0, 0]);
        assert_eq!(decode_udp(linktype::ETHERNET, &arp), Err(SkipReason::NotIp));
        let mut v6 = Vec::new();
        encode_ip_udp(addr("[::1]:1"), addr("[::2]:2"), b"abcd", &mut v6);
        v6[6] = 44;
        assert_eq!(decode_udp(linktype::RAW, &v6), Err(SkipReason::Ipv6Fragment));
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(link in proptest::sample::select(vec![0u32, 1, 12, 101, 108, 113, 228, 229, 276, 9]), bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120)) {
            if let Ok(v) = decode_udp(link, &bytes) {
                proptest::prop_assert!(v.payload.len() <= bytes.len());
            }
        }
    }
}
