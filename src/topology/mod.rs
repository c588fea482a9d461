//! The box as frameloop sees it: GPUs, NICs and NUMA nodes read from sysfs,
//! how close each NIC is to each GPU, and where each stream should run.
//!
//! - `sysfs`: bounded, tolerant reads of a sysfs tree (live or recorded).
//! - [`pci`]: [`PciDevice`], its PCIe path and link, and [`Relationship`].
//! - [`cpulist`]: [`CpuList`], the CPUs of a NUMA node.
//! - [`interfaces`]: the addresses of each network interface (getifaddrs).
//! - [`placement`]: [`place`], the pure stream-to-GPU placement.
//! - [`report`]: `frameloop topology`, as text or JSON.
//!
//! GPUs are numbered in PCI address order, the order CUDA uses with
//! `CUDA_DEVICE_ORDER=PCI_BUS_ID`. Notes and an example are in
//! `docs/topology.md`.

pub mod cpulist;
pub mod interfaces;
pub mod pci;
pub mod placement;
pub mod report;
mod sysfs;

pub use cpulist::CpuList;
pub use interfaces::{InterfaceAddrs, interface_addresses};
pub use pci::{PciDevice, PciLink, PciPath, Relationship};
pub use placement::{Placement, StreamRequest, place};
pub use report::{TopologyArgs, command};

use serde::Serialize;
use std::path::{Path, PathBuf};
use sysfs::Sysfs;
use thiserror::Error;

/// PCI vendor id of NVIDIA.
const VENDOR_NVIDIA: &str = "0x10de";

/// Errors of reading the topology and placing streams on it.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// The sysfs tree cannot be opened; pass `--sysfs DIR` with a sysfs root.
    #[error(
        "cannot open the sysfs tree {}: {source}; pass --sysfs DIR with a sysfs root \
         (default /sys, or a tree recorded by scripts/record-sysfs.sh)",
        path.display()
    )]
    SysfsRoot {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The network interfaces cannot be listed; run where `getifaddrs` works (the host's network
    /// namespace).
    #[error(
        "cannot list the network interfaces' addresses (getifaddrs): {source}; run in the host's network namespace"
    )]
    Interfaces {
        #[source]
        source: nix::Error,
    },
    /// A stream names a GPU this machine does not have; give an index below the GPU count, or
    /// remove it.
    #[error(
        "{stream} is set to `gpu = {gpu}` but this machine has {count} GPU(s); \
         set gpu to 0..{count} (exclusive) or remove it to place the stream automatically"
    )]
    GpuOutOfRange { stream: String, gpu: usize, count: usize },
    /// No NVIDIA GPU to place a stream on; check `nvidia-smi` and the driver, or use the host
    /// backend.
    #[error(
        "no NVIDIA GPU under /sys/bus/pci/devices to place {stream} on; \
         check `nvidia-smi` and that the driver is loaded, or use the host backend"
    )]
    NoGpu { stream: String },
    /// The topology report could not be written; check the output (a closed pipe, a full disk).
    #[error(
        "cannot write the topology report: {source}; check where the output goes (a closed pipe, a full disk)"
    )]
    Output {
        #[source]
        source: std::io::Error,
    },
}

/// A GPU: an NVIDIA PCI device of class VGA (0x0300) or 3D (0x0302).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpu {
    /// Its number: its position in PCI address order.
    pub index: usize,
    /// The PCI function.
    pub pci: PciDevice,
}

/// Where a network interface's packets come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NicDevice {
    /// A PCI function (the NIC port, or the virtio device behind it).
    Pci(PciDevice),
    /// A device that is not on PCI (platform, USB root, ...): its sysfs path.
    NotPci { path: String },
    /// A bond, VLAN or macvlan over a PCI NIC: the first lower interface
    /// on PCI (followed through stacked ones) and its PCI function.
    Stacked { lower: String, pci: PciDevice },
    /// No device at all, nor a lower interface on PCI: loopback, bridge, tunnel.
    Virtual,
}

/// A network interface from `/sys/class/net`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Nic {
    /// Interface name, e.g. `enp65s0f0`.
    pub interface: String,
    /// Its device.
    pub device: NicDevice,
}

impl Nic {
    /// Its PCI function, if it has one.
    pub fn pci(&self) -> Option<&PciDevice> {
        match &self.device {
            NicDevice::Pci(pci) | NicDevice::Stacked { pci, .. } => Some(pci),
            NicDevice::NotPci { .. } | NicDevice::Virtual => None,
        }
    }
}

/// A NUMA node and its CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NumaNode {
    /// The node number (`nodeN`).
    pub node: u32,
    /// Its CPUs; `None` when `cpulist` is missing or unreadable.
    pub cpus: Option<CpuList>,
}

/// GPUs, NICs and NUMA nodes of one machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Topology {
    /// NVIDIA GPUs in PCI address order.
    pub gpus: Vec<Gpu>,
    /// Network interfaces by name.
    pub nics: Vec<Nic>,
    /// NUMA nodes by number.
    pub numa_nodes: Vec<NumaNode>,
}

impl Topology {
    /// Reads the tree at `root` (`/sys`, or a recorded copy). Only an
    /// unopenable root is an error: anything missing below it is unknown.
    pub fn read(root: &Path) -> Result<Topology, TopologyError> {
        let sysfs = Sysfs::open(root)?;
        Ok(Topology { gpus: read_gpus(&sysfs), nics: read_nics(&sysfs), numa_nodes: read_numa_nodes(&sysfs) })
    }

    /// The NIC named `interface`.
    pub fn nic(&self, interface: &str) -> Option<&Nic> {
        self.nics.iter().find(|n| n.interface == interface)
    }

    /// The CPUs of NUMA node `node`, if known.
    pub fn cpus_of(&self, node: u32) -> Option<&CpuList> {
        self.numa_nodes.iter().find(|n| n.node == node)?.cpus.as_ref()
    }
}

fn read_gpus(sysfs: &Sysfs) -> Vec<Gpu> {
    let mut gpus = Vec::new();
    for address in sysfs.entries("bus/pci/devices").into_iter().filter(|a| pci::is_pci_address(a)) {
        let dir = format!("bus/pci/devices/{address}");
        let is_nvidia = sysfs.attribute(&format!("{dir}/vendor")).is_some_and(|v| v == VENDOR_NVIDIA);
        let class = sysfs
            .attribute(&format!("{dir}/class"))
            .and_then(|c| u32::from_str_radix(c.trim_start_matches("0x"), 16).ok());
        if !is_nvidia || !matches!(class.map(|c| c >> 8), Some(0x0300 | 0x0302)) {
            continue;
        }
        let pci = sysfs.resolve(&dir).and_then(|c| PciDevice::read(sysfs, &c)).unwrap_or_else(|| PciDevice {
            address: address.clone(),
            path: PciPath { root: None, bridges: Vec::new() },
            numa_node: None,
            link: PciLink::default(),
            max_link: PciLink::default(),
        });
        gpus.push(Gpu { index: gpus.len(), pci });
    }
    gpus
}

/// How deep stacked interfaces are followed (a VLAN on a bond on a port is 2).
const STACK_LIMIT: usize = 4;

fn read_nics(sysfs: &Sysfs) -> Vec<Nic> {
    sysfs
        .entries("class/net")
        .into_iter()
        .map(|interface| Nic { device: nic_device(sysfs, &interface, 0), interface })
        .collect()
}

/// The device of `interface`: its own, or for a bond, VLAN or macvlan
/// without one, the first of its `lower_*` interfaces that is on PCI.
fn nic_device(sysfs: &Sysfs, interface: &str, depth: usize) -> NicDevice {
    let link = format!("class/net/{interface}/device");
    if sysfs.exists(&link) {
        return match sysfs.resolve(&link) {
            Some(components) => match PciDevice::read(sysfs, &components) {
                Some(pci) => NicDevice::Pci(pci),
                None => NicDevice::NotPci { path: components.join("/") },
            },
            None => NicDevice::NotPci { path: "?".into() },
        };
    }
    if depth < STACK_LIMIT {
        for entry in sysfs.entries(&format!("class/net/{interface}")) {
            let Some(lower) = entry.strip_prefix("lower_") else { continue };
            match nic_device(sysfs, lower, depth + 1) {
                NicDevice::Pci(pci) => return NicDevice::Stacked { lower: lower.to_owned(), pci },
                NicDevice::Stacked { lower, pci } => return NicDevice::Stacked { lower, pci },
                NicDevice::NotPci { .. } | NicDevice::Virtual => {}
            }
        }
    }
    NicDevice::Virtual
}

fn read_numa_nodes(sysfs: &Sysfs) -> Vec<NumaNode> {
    let mut nodes: Vec<NumaNode> = sysfs
        .entries("devices/system/node")
        .into_iter()
        .filter_map(|name| {
            let node = name.strip_prefix("node")?.parse::<u32>().ok()?;
            let cpus = sysfs
                .attribute(&format!("devices/system/node/{name}/cpulist"))
                .and_then(|c| CpuList::parse(&c));
            Some(NumaNode { node, cpus })
        })
        .collect();
    nodes.sort_by_key(|n| n.node);
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs")
    }

    #[test]
    fn two_socket_tree_reads_gpus_nics_and_nodes() {
        let topo = Topology::read(&fixtures().join("two-socket")).unwrap();
        // The ASPEED BMC display (vendor 0x1a03) is not a GPU.
        let addresses: Vec<_> = topo.gpus.iter().map(|g| g.pci.address.as_str()).collect();
        assert_eq!(addresses, ["0000:03:00.0", "0000:83:00.0"]);
        let gpu1 = &topo.gpus[1];
        assert_eq!(gpu1.index, 1);
        assert_eq!(gpu1.pci.numa_node, Some(1));
        assert_eq!(gpu1.pci.path.root.as_deref(), Some("pci0000:80"));
        assert_eq!(gpu1.pci.path.bridges, ["0000:80:01.0", "0000:81:00.0", "0000:82:00.0"]);
        assert_eq!(gpu1.pci.link, PciLink { generation: Some(5), width: Some(16) });
        let nic = topo.nic("enp4s0f0np0").unwrap().pci().unwrap();
        assert_eq!(nic.address, "0000:04:00.0");
        assert_eq!(Relationship::between(nic, &topo.gpus[0].pci), Relationship::SameSwitch);
        assert_eq!(Relationship::between(nic, &topo.gpus[1].pci), Relationship::AcrossSockets);
        assert_eq!(topo.nic("lo").unwrap().device, NicDevice::Virtual);
        // vlan10 -> bond0 -> enp132s0f0np0: both stacked ones name the port.
        for stacked in ["bond0", "vlan10"] {
            match &topo.nic(stacked).unwrap().device {
                NicDevice::Stacked { lower, pci } => {
                    assert_eq!((lower.as_str(), pci.address.as_str()), ("enp132s0f0np0", "0000:84:00.0"))
                }
                other => panic!("{stacked} is {other:?}"),
            }
        }
        assert_eq!(topo.cpus_of(1).unwrap().count(), 32);
        assert_eq!(topo.cpus_of(2), None);
    }

    #[test]
    fn build_vm_tree_finds_the_virtio_nic_behind_its_pci_function() {
        let topo = Topology::read(&fixtures().join("build-vm")).unwrap();
        assert!(topo.gpus.is_empty());
        let eth0 = topo.nic("eth0").unwrap().pci().unwrap();
        assert_eq!(eth0.address, "0000:00:03.0");
        assert_eq!(eth0.path.root.as_deref(), Some("pci0000:00"));
        assert!(eth0.path.bridges.is_empty());
        assert_eq!(topo.nic("lo").unwrap().device, NicDevice::Virtual);
        assert!(topo.cpus_of(0).is_some_and(|c| c.count() >= 1));
    }

    #[test]
    fn damaged_trees_read_as_unknown_without_failing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let dev = root.join("devices/pci0000:00/0000:00:01.0/0000:01:00.0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("vendor"), "0x10de\n").unwrap();
        std::fs::write(dev.join("class"), "0x030200\n").unwrap();
        std::fs::write(dev.join("numa_node"), "-1\n").unwrap();
        std::fs::write(dev.join("current_link_speed"), "Unknown\n").unwrap();
        std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0",
            root.join("bus/pci/devices/0000:01:00.0"),
        )
        .unwrap();
        // A GPU whose link dangles: listed by address, place unknown.
        std::fs::create_dir_all(root.join("gone")).unwrap();
        std::os::unix::fs::symlink("../../../gone/0000:02:00.0", root.join("bus/pci/devices/0000:02:00.0"))
            .unwrap();
        std::fs::create_dir_all(root.join("class/net/eth9")).unwrap();
        std::os::unix::fs::symlink("../../../nowhere", root.join("class/net/eth9/device")).unwrap();
        std::fs::create_dir_all(root.join("devices/system/node/node0")).unwrap();
        std::fs::write(root.join("devices/system/node/node0/cpulist"), "garbage\n").unwrap();
        let topo = Topology::read(root).unwrap();
        assert_eq!(topo.gpus.len(), 1, "the dangling device has no vendor to read");
        assert_eq!(topo.gpus[0].pci.numa_node, None);
        assert_eq!(topo.gpus[0].pci.link, PciLink::default());
        assert_eq!(topo.nics[0].device, NicDevice::NotPci { path: "?".into() });
        assert_eq!(topo.numa_nodes, [NumaNode { node: 0, cpus: None }]);
    }

    #[test]
    fn the_record_script_copies_a_tree_that_reads_the_same() {
        let out = tempfile::tempdir().unwrap();
        let source = fixtures().join("two-socket");
        let status = std::process::Command::new(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/record-sysfs.sh"),
        )
        .arg(out.path())
        .arg(&source)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
        assert!(status.success());
        assert_eq!(Topology::read(out.path()).unwrap(), Topology::read(&source).unwrap());
    }
}
