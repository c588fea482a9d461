//! The IP addresses of each network interface, read with getifaddrs, so a
//! stream's bind address can be traced to the NIC that owns it.

use super::TopologyError;
use serde::Serialize;
use std::net::IpAddr;

/// One interface and the IPv4/IPv6 addresses it owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InterfaceAddrs {
    /// Interface name, as in `/sys/class/net`.
    pub interface: String,
    /// Its addresses.
    pub addresses: Vec<IpAddr>,
}

/// The live machine's interfaces and addresses, in the order getifaddrs
/// gives them (interfaces without an IP address are left out).
pub fn interface_addresses() -> Result<Vec<InterfaceAddrs>, TopologyError> {
    let mut out: Vec<InterfaceAddrs> = Vec::new();
    for entry in nix::ifaddrs::getifaddrs().map_err(|source| TopologyError::Interfaces { source })? {
        let Some(address) = entry.address.as_ref() else { continue };
        let ip = match (address.as_sockaddr_in(), address.as_sockaddr_in6()) {
            (Some(v4), _) => IpAddr::V4(v4.ip()),
            (None, Some(v6)) => IpAddr::V6(v6.ip()),
            (None, None) => continue,
        };
        match out.iter_mut().find(|i| i.interface == entry.interface_name) {
            Some(known) => known.addresses.push(ip),
            None => out.push(InterfaceAddrs { interface: entry.interface_name, addresses: vec![ip] }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_owns_127_0_0_1() {
        let all = interface_addresses().unwrap();
        let owner = all.iter().find(|i| i.addresses.contains(&IpAddr::from([127, 0, 0, 1])));
        assert!(owner.is_some(), "no interface owns 127.0.0.1 in {all:?}");
    }
}
