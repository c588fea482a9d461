//! The source allowlist (`ingest.allow`): addresses and CIDR blocks, IPv4
//! and IPv6, matched in the IPv6-mapped space.

use std::net::{AddrParseError, IpAddr};
use thiserror::Error;

/// Why an `ingest.allow` entry is not an address or CIDR block.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CidrError {
    /// The part before `/` is not an IPv4 or IPv6 address; write one such
    /// as `10.0.0.1` or `fd00::1`.
    #[error("not an IP address; write an address or a CIDR block like \"10.0.0.0/8\" or \"fd00::/8\"")]
    NotAnAddress(#[source] AddrParseError),
    /// The part after `/` is not a prefix length the address family has;
    /// write 0 to `bits` (32 for IPv4, 128 for IPv6).
    #[error("prefix length must be a number from 0 to {bits}")]
    Prefix {
        /// The address family's width: 32 or 128.
        bits: u32,
    },
}

/// An `ingest.allow` entry that is not an address or CIDR block, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct InvalidEntry {
    pub entry: String,
    pub reason: CidrError,
}

/// Parses `"a.b.c.d/p"`, `"a:b::/p"` or a bare address into an
/// IPv6-mapped `(network, mask)` pair.
pub(super) fn parse_cidr(entry: &str) -> Result<(u128, u128), CidrError> {
    let (addr, prefix) = match entry.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (entry, None),
    };
    let ip: IpAddr = addr.trim().parse().map_err(CidrError::NotAnAddress)?;
    let (bits, offset) = match ip {
        IpAddr::V4(_) => (32u32, 96u32),
        IpAddr::V6(_) => (128, 0),
    };
    let prefix = match prefix {
        None => bits,
        Some(p) => match p.trim().parse::<u32>() {
            Ok(p) if p <= bits => p,
            _ => return Err(CidrError::Prefix { bits }),
        },
    };
    let len = prefix + offset;
    let mask = if len == 0 { 0 } else { u128::MAX << (128 - len) };
    Ok((mapped(ip) & mask, mask))
}

/// An address in the IPv6 space (IPv4 as `::ffff:a.b.c.d`).
fn mapped(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// Source allowlist; empty allows every source.
#[derive(Debug, Clone, Default)]
pub(super) struct AllowList {
    /// `(network, mask)` pairs in the IPv6-mapped space; `network & !mask == 0`.
    nets: Vec<(u128, u128)>,
    /// Where admitted sources are noted for replies, when an actuation
    /// output replies to the sensor.
    reply: Option<std::sync::Arc<super::ReplyBook>>,
}

impl AllowList {
    pub(super) fn new(entries: &[String]) -> Result<Self, InvalidEntry> {
        let nets = entries
            .iter()
            .map(|e| parse_cidr(e).map_err(|reason| InvalidEntry { entry: e.clone(), reason }))
            .collect::<Result<_, _>>()?;
        Ok(Self { nets, reply: None })
    }

    /// Notes every admitted source (with the stream its datagram names) in `book`.
    pub(super) fn note_sources_in(&mut self, book: std::sync::Arc<super::ReplyBook>) {
        self.reply = Some(book);
    }

    /// After [`AllowList::allows`] admitted `source`: notes it for replies to
    /// the stream `datagram` names, when replies are asked for.
    pub(super) fn admitted(&self, source: Option<std::net::SocketAddr>, datagram: &[u8]) {
        if let (Some(book), Some(source)) = (&self.reply, source) {
            book.note(crate::wire::native::peek_stream_id(datagram), source);
        }
    }

    pub(super) fn allows(&self, source: Option<IpAddr>) -> bool {
        if self.nets.is_empty() {
            return true;
        }
        let Some(ip) = source else { return false };
        let addr = mapped(ip);
        self.nets.iter().any(|&(net, mask)| addr & mask == net)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowlist_matches_v4_v6_and_mapped_addresses() {
        let allow = AllowList::new(&["10.0.0.0/8".into(), "127.0.0.1".into(), "fd00::/8".into()]).unwrap();
        let ok = |s: &str| allow.allows(Some(s.parse().unwrap()));
        assert!(ok("10.200.3.4") && ok("127.0.0.1") && ok("fd12::1") && ok("::ffff:10.9.9.9"));
        assert!(!ok("11.0.0.1") && !ok("127.0.0.2") && !ok("fe80::1") && !ok("::ffff:11.0.0.1"));
        assert!(!allow.allows(None));
        assert!(AllowList::default().allows(Some("8.8.8.8".parse().unwrap())));
        assert!(AllowList::new(&["0.0.0.0/0".into()]).unwrap().allows(Some("1.2.3.4".parse().unwrap())));
        for bad in ["10.0.0.0/33", "fd00::/129", "hostname", "10.0.0.0/x", ""] {
            assert!(parse_cidr(bad).is_err(), "{bad}");
        }
    }
}
