//! PCI devices as sysfs shows them: address, place in the PCIe tree (root
//! complex and bridges), NUMA node and link, and how close two devices are.

use super::sysfs::Sysfs;
use serde::Serialize;
use std::fmt;

/// A PCI function, e.g. a GPU or a NIC port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PciDevice {
    /// Domain:bus:device.function, e.g. `0000:41:00.0`.
    pub address: String,
    /// Where it sits in the PCIe tree.
    pub path: PciPath,
    /// NUMA node from `numa_node`; `None` when the kernel says -1 or nothing.
    pub numa_node: Option<u32>,
    /// Link as trained now (`current_link_*`).
    pub link: PciLink,
    /// Link the device and slot could train (`max_link_*`).
    pub max_link: PciLink,
}

/// The way from a root complex down to a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PciPath {
    /// The root complex (host bridge), e.g. `pci0000:40`; `None` if unknown.
    pub root: Option<String>,
    /// Bridge addresses from the root port down, the device itself excluded.
    pub bridges: Vec<String>,
}

/// A PCIe link's generation and lane count, each `None` when unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct PciLink {
    /// PCIe generation (1 = 2.5 GT/s ... 6 = 64 GT/s).
    pub generation: Option<u8>,
    /// Lanes (x1 ... x16).
    pub width: Option<u32>,
}

/// How close a NIC is to a GPU, closest first (the order placement prefers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Relationship {
    /// Both below one PCIe switch: they share a bridge below the root port,
    /// so peer traffic need not cross the root complex.
    SameSwitch,
    /// Different switches or root ports of one root complex.
    SameRootComplex,
    /// Different root complexes on one NUMA node (one socket).
    SameNumaNode,
    /// Different root complexes and a NUMA node unknown on either side.
    Unknown,
    /// Different NUMA nodes: traffic crosses the socket interconnect.
    AcrossSockets,
}

impl Relationship {
    /// Between the NIC `nic` and the GPU `gpu`.
    pub fn between(nic: &PciDevice, gpu: &PciDevice) -> Relationship {
        match (&nic.path.root, &gpu.path.root) {
            (Some(a), Some(b)) if a == b => {
                let shared =
                    nic.path.bridges.iter().zip(&gpu.path.bridges).take_while(|(x, y)| x == y).count();
                // The first bridge is the root port; sharing one below it
                // means both hang off the same switch.
                if shared >= 2 { Relationship::SameSwitch } else { Relationship::SameRootComplex }
            }
            _ => match (nic.numa_node, gpu.numa_node) {
                (Some(a), Some(b)) if a == b => Relationship::SameNumaNode,
                (Some(_), Some(_)) => Relationship::AcrossSockets,
                _ => Relationship::Unknown,
            },
        }
    }
}

impl fmt::Display for Relationship {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Relationship::SameSwitch => "same PCIe switch",
            Relationship::SameRootComplex => "same root complex",
            Relationship::SameNumaNode => "same NUMA node",
            Relationship::Unknown => "unknown (NUMA node not reported)",
            Relationship::AcrossSockets => "across sockets",
        })
    }
}

impl fmt::Display for PciPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.root.as_deref().unwrap_or("?"))?;
        for bridge in &self.bridges {
            write!(f, "/{bridge}")?;
        }
        Ok(())
    }
}

impl fmt::Display for PciLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.generation {
            Some(g) => write!(f, "Gen{g}")?,
            None => f.write_str("Gen?")?,
        }
        match self.width {
            Some(w) => write!(f, " x{w}"),
            None => f.write_str(" x?"),
        }
    }
}

/// Whether `name` is a PCI address like `0000:41:00.0`.
pub(crate) fn is_pci_address(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 12
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b':',
            10 => c == b'.',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Whether `name` is a root complex like `pci0000:40`.
fn is_pci_root(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 10
        && name.starts_with("pci")
        && b[7] == b':'
        && b[3..7].iter().chain(&b[8..]).all(u8::is_ascii_hexdigit)
}

impl PciDevice {
    /// Reads the device whose sysfs directory resolves to `components`
    /// (below the sysfs root). The device is the last PCI address in the
    /// path, so a NIC's `device` link that ends in a virtio or auxiliary
    /// node still finds its PCI function. `None` when no PCI address is in
    /// the path (a platform or virtual device).
    pub(crate) fn read(sysfs: &Sysfs, components: &[String]) -> Option<PciDevice> {
        let device_at = components.iter().rposition(|c| is_pci_address(c))?;
        let root_at = components[..device_at].iter().position(|c| is_pci_root(c));
        let bridges_from = root_at.map_or(0, |r| r + 1);
        let path = PciPath {
            root: root_at.map(|r| components[r].clone()),
            bridges: components[bridges_from..device_at]
                .iter()
                .filter(|c| is_pci_address(c))
                .cloned()
                .collect(),
        };
        let dir = components[..=device_at].join("/");
        let attribute = |name: &str| sysfs.attribute(&format!("{dir}/{name}"));
        Some(PciDevice {
            address: components[device_at].clone(),
            path,
            numa_node: attribute("numa_node").and_then(|n| n.parse::<u32>().ok()),
            link: PciLink::parse(attribute("current_link_speed"), attribute("current_link_width")),
            max_link: PciLink::parse(attribute("max_link_speed"), attribute("max_link_width")),
        })
    }
}

impl PciLink {
    /// From `*_link_speed` ("16.0 GT/s PCIe", "8 GT/s", "Unknown") and
    /// `*_link_width` ("16"; 0 and 255 mean no link).
    fn parse(speed: Option<String>, width: Option<String>) -> PciLink {
        let gts =
            speed.as_deref().and_then(|s| s.split_whitespace().next()).and_then(|s| s.parse::<f32>().ok());
        let generation = gts.and_then(|gts| match gts {
            2.5 => Some(1),
            5.0 => Some(2),
            8.0 => Some(3),
            16.0 => Some(4),
            32.0 => Some(5),
            64.0 => Some(6),
            _ => None,
        });
        let width = width.and_then(|w| w.parse::<u32>().ok()).filter(|&w| (1..=32).contains(&w));
        PciLink { generation, width }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(root: &str, bridges: &[&str], numa: Option<u32>) -> PciDevice {
        PciDevice {
            address: "0000:99:00.0".into(),
            path: PciPath {
                root: Some(root.into()),
                bridges: bridges.iter().map(|b| b.to_string()).collect(),
            },
            numa_node: numa,
            link: PciLink::default(),
            max_link: PciLink::default(),
        }
    }

    #[test]
    fn relationships_rank_switch_root_numa_socket() {
        let nic = device("pci0000:40", &["0000:40:01.1", "0000:41:00.0", "0000:42:00.0"], Some(1));
        let same_switch = device("pci0000:40", &["0000:40:01.1", "0000:41:00.0", "0000:42:01.0"], Some(1));
        let other_port = device("pci0000:40", &["0000:40:01.1"], Some(1));
        let other_root = device("pci0000:60", &["0000:60:01.1"], Some(1));
        let other_socket = device("pci0000:00", &["0000:00:01.1"], Some(0));
        let unknown = device("pci0000:00", &["0000:00:01.1"], None);
        assert_eq!(Relationship::between(&nic, &same_switch), Relationship::SameSwitch);
        assert_eq!(Relationship::between(&nic, &other_port), Relationship::SameRootComplex);
        assert_eq!(Relationship::between(&nic, &other_root), Relationship::SameNumaNode);
        assert_eq!(Relationship::between(&nic, &other_socket), Relationship::AcrossSockets);
        assert_eq!(Relationship::between(&nic, &unknown), Relationship::Unknown);
        assert!(Relationship::SameSwitch < Relationship::SameRootComplex);
        assert!(Relationship::SameNumaNode < Relationship::AcrossSockets);
    }

    #[test]
    fn addresses_and_links_parse_strictly() {
        assert!(is_pci_address("0000:41:00.0"));
        assert!(!is_pci_address("0000:41:00"));
        assert!(!is_pci_address("virtio2"));
        assert!(is_pci_root("pci0000:40"));
        assert!(!is_pci_root("pci0000_40"));
        let link = PciLink::parse(Some("16.0 GT/s PCIe".into()), Some("16".into()));
        assert_eq!(link, PciLink { generation: Some(4), width: Some(16) });
        assert_eq!(link.to_string(), "Gen4 x16");
        let unknown = PciLink::parse(Some("Unknown".into()), Some("255".into()));
        assert_eq!(unknown, PciLink::default());
        assert_eq!(PciLink::parse(Some("2.5 GT/s".into()), None).generation, Some(1));
    }
}
