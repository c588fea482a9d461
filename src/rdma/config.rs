//! The `[rdma]` table:
//! where rdma_cm listens, which device and port, GID index and path MTU.

use crate::config_problem::{ConfigProblem, check_range};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

pub use crate::ingest::Transport;

/// Path MTUs a RoCE QP can use, in bytes.
pub const PATH_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// Settings of the RDMA ingest (the `[rdma]` table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RdmaConfig {
    /// Address and port rdma_cm listens on. The address must be one of the
    /// RoCE interface's own addresses: rdma_cm picks the device and the
    /// RoCEv2 GID from it.
    pub listen: String,
    /// RDMA device name (as `ibv_devices` or `rdma link` shows it, e.g.
    /// `mlx5_0`). Empty: the device that owns `listen`'s address. When set,
    /// start-up checks that the address belongs to this device.
    pub device: String,
    /// Port of the device (1-based).
    pub port: u8,
    /// GID table index the connection must use; -1 takes the one rdma_cm
    /// resolves for `listen` (the RoCEv2 GID of that address). When set,
    /// start-up checks that the entry exists and is RoCEv2.
    pub gid_index: i32,
    /// Path MTU in bytes (256, 512, 1024, 2048 or 4096); 0 keeps the one
    /// rdma_cm derives from the port (the active MTU, which follows the
    /// interface MTU: 4096 needs an interface MTU of at least 4200).
    pub mtu: u32,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        Self { listen: "0.0.0.0:7471".into(), device: String::new(), port: 1, gid_index: -1, mtu: 0 }
    }
}

impl RdmaConfig {
    /// The listen address, when it parses.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.listen.parse().ok()
    }

    /// Records every problem, naming its `rdma.*` key. `transport` decides
    /// whether an unspecified listen address is a problem: it is only with
    /// `rdma` (with `auto` it is one of the reasons to take UDP).
    pub fn validate(&self, transport: Transport, problems: &mut Vec<ConfigProblem>) {
        match self.listen_addr() {
            None => problems.push(ConfigProblem::new(
                "rdma.listen",
                format!(
                    "{:?} is not an address and port; write the RoCE interface's address, like \"192.0.2.10:7471\"",
                    self.listen
                ),
            )),
            Some(a) if a.ip().is_unspecified() && transport == Transport::Rdma => {
                problems.push(ConfigProblem::new(
                    "rdma.listen",
                    format!(
                        "{} is a wildcard address; ingest.transport = \"rdma\" needs the RoCE interface's own address (rdma_cm picks the device from it)",
                        self.listen
                    ),
                ))
            }
            Some(_) => {}
        }
        if !self.device.is_empty() && !self.device.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            problems.push(ConfigProblem::new(
                "rdma.device",
                format!(
                    "{:?} is not a device name; write it as ibv_devices shows it, like \"mlx5_0\"",
                    self.device
                ),
            ));
        }
        check_range(problems, "rdma.port", self.port, 1, 255);
        check_range(problems, "rdma.gid_index", self.gid_index, -1, 255);
        if self.mtu != 0 && !PATH_MTUS.contains(&self.mtu) {
            problems.push(ConfigProblem::new(
                "rdma.mtu",
                format!(
                    "{} is not a RoCE path MTU; use 0 (the port's) or one of 256, 512, 1024, 2048, 4096",
                    self.mtu
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(cfg: &RdmaConfig, transport: Transport) -> Vec<String> {
        let mut p = Vec::new();
        cfg.validate(transport, &mut p);
        p.into_iter().map(|p| p.key).collect()
    }

    #[test]
    fn default_is_valid_for_auto_but_not_for_rdma() {
        assert!(keys(&RdmaConfig::default(), Transport::Auto).is_empty());
        assert_eq!(keys(&RdmaConfig::default(), Transport::Rdma), ["rdma.listen"]);
    }

    #[test]
    fn every_bad_key_is_named() {
        let cfg = RdmaConfig {
            listen: "roce0".into(),
            device: "mlx5 0".into(),
            port: 0,
            gid_index: 300,
            mtu: 1500,
        };
        assert_eq!(
            keys(&cfg, Transport::Auto),
            ["rdma.listen", "rdma.device", "rdma.port", "rdma.gid_index", "rdma.mtu"]
        );
    }

    #[test]
    fn specific_address_and_known_mtu_pass_with_rdma() {
        let cfg = RdmaConfig {
            listen: "192.0.2.10:7471".into(),
            device: "mlx5_0".into(),
            mtu: 4096,
            gid_index: 3,
            ..Default::default()
        };
        assert!(keys(&cfg, Transport::Rdma).is_empty());
    }

    #[test]
    fn table_parses_and_rejects_unknown_keys() {
        let cfg: RdmaConfig = toml::from_str("listen = \"[fd00::1]:7471\"\nmtu = 1024").unwrap();
        assert_eq!(cfg.mtu, 1024);
        assert_eq!(cfg.port, 1);
        assert!(toml::from_str::<RdmaConfig>("mtu_bytes = 1024").is_err());
        let t: std::collections::BTreeMap<String, Transport> =
            toml::from_str("a = \"auto\"\nb = \"rdma\"\nc = \"udp\"").unwrap();
        assert_eq!(
            t.values().copied().collect::<Vec<_>>(),
            [Transport::Auto, Transport::Rdma, Transport::Udp]
        );
    }
}
