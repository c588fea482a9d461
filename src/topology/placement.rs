//! Stream placement: each stream goes to the GPU closest to the NIC that
//! owns its bind address (same switch, then root complex, then NUMA node,
//! then across sockets), ties going to the GPU with the fewest streams; an
//! explicit `gpu = N` wins. Pure: it takes the topology and the interface
//! addresses and reads nothing itself.

use super::{CpuList, InterfaceAddrs, Relationship, Topology, TopologyError};
use serde::Serialize;
use std::net::IpAddr;

/// What placement needs to know about one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRequest {
    /// The stream's number, as the log names it.
    pub id: usize,
    /// What it is, e.g. `udp 0.0.0.0:5000`.
    pub description: String,
    /// The address its receiver binds.
    pub bind: IpAddr,
    /// The GPU the config pins it to (`gpu = N`), if any.
    pub gpu: Option<usize>,
}

/// Where one stream runs, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// The stream's `id`.
    pub stream: usize,
    /// The GPU's index.
    pub gpu: usize,
    /// The interface owning the bind address, if one does.
    pub interface: Option<String>,
    /// How close that interface's NIC is to the GPU, if both are on PCI.
    pub relationship: Option<Relationship>,
    /// The GPU's NUMA node: where the stream's ring and receiver belong.
    pub numa_node: Option<u32>,
    /// The CPUs of that node, for the receiver thread.
    pub cpus: Option<CpuList>,
    /// One line for the log: `stream 1 (udp 10.0.1.5:5000 on enp65s0) -> GPU 1 (0000:41:00.0): same PCIe switch`.
    pub reason: String,
}

/// Which interface owns a bind address.
enum Owner<'a> {
    /// The unspecified address (0.0.0.0 or ::): every interface.
    Every,
    /// One interface.
    Interface(&'a str),
    /// No interface has this address.
    Nobody,
}

fn owner<'a>(bind: IpAddr, interfaces: &'a [InterfaceAddrs]) -> Owner<'a> {
    if bind.is_unspecified() {
        return Owner::Every;
    }
    interfaces
        .iter()
        .find(|i| i.addresses.contains(&bind))
        .map_or(Owner::Nobody, |i| Owner::Interface(&i.interface))
}

/// Places every stream on a GPU of `topology`. `interfaces` is the machine's
/// interface addresses ([`super::interface_addresses`] on the live machine).
/// Streams pinned with `gpu = N` are counted first, so automatic ones
/// spread around them.
pub fn place(
    topology: &Topology,
    interfaces: &[InterfaceAddrs],
    streams: &[StreamRequest],
) -> Result<Vec<Placement>, TopologyError> {
    let gpus = &topology.gpus;
    let mut load = vec![0usize; gpus.len()];
    for stream in streams {
        if gpus.is_empty() {
            return Err(TopologyError::NoGpu {
                stream: format!("stream {} ({})", stream.id, stream.description),
            });
        }
        if let Some(gpu) = stream.gpu {
            let slot = load.get_mut(gpu).ok_or_else(|| TopologyError::GpuOutOfRange {
                stream: format!("stream {} ({})", stream.id, stream.description),
                gpu,
                count: gpus.len(),
            })?;
            *slot += 1;
        }
    }
    let mut placements = Vec::with_capacity(streams.len());
    for stream in streams {
        let owner = owner(stream.bind, interfaces);
        let (interface, on) = match owner {
            Owner::Every => (None, "any interface".to_owned()),
            Owner::Interface(name) => (Some(name.to_owned()), name.to_owned()),
            Owner::Nobody => (None, "no interface".to_owned()),
        };
        let nic = interface.as_deref().and_then(|name| topology.nic(name)?.pci());
        let relationship_to = |gpu: usize| nic.map(|nic| Relationship::between(nic, &gpus[gpu].pci));
        let (gpu, why) = match stream.gpu {
            Some(gpu) => {
                let why = match relationship_to(gpu) {
                    Some(rel) => format!("set by `gpu = {gpu}` ({rel} from {on})"),
                    None => format!("set by `gpu = {gpu}`"),
                };
                (gpu, why)
            }
            None => {
                let (gpu, why) = match nic {
                    Some(_) => {
                        let rank = |g: usize| (relationship_to(g), load[g], g);
                        let best = (0..gpus.len()).min_by_key(|&g| rank(g)).unwrap_or(0);
                        let rel = relationship_to(best);
                        let tied = (0..gpus.len()).filter(|&g| relationship_to(g) == rel).count();
                        let rel = rel.map_or_else(String::new, |r| r.to_string());
                        if tied > 1 {
                            (best, format!("{rel}, least loaded of {tied} ({} streams before)", load[best]))
                        } else {
                            (best, rel)
                        }
                    }
                    None => {
                        let best = (0..gpus.len()).min_by_key(|&g| (load[g], g)).unwrap_or(0);
                        let cause = match owner {
                            Owner::Every => "bound to every interface".to_owned(),
                            Owner::Interface(name) => format!("{name} has no PCI device"),
                            Owner::Nobody => format!("no interface owns {}", stream.bind),
                        };
                        (best, format!("{cause}, least loaded ({} streams before)", load[best]))
                    }
                };
                load[gpu] += 1;
                (gpu, why)
            }
        };
        let pci = &gpus[gpu].pci;
        let numa_node = pci.numa_node;
        placements.push(Placement {
            stream: stream.id,
            gpu,
            relationship: relationship_to(gpu),
            interface,
            numa_node,
            cpus: numa_node.and_then(|n| topology.cpus_of(n)).cloned(),
            reason: format!(
                "stream {} ({} on {on}) -> GPU {gpu} ({}): {why}",
                stream.id, stream.description, pci.address
            ),
        });
    }
    Ok(placements)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> Topology {
        Topology::read(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs").join(name))
            .unwrap()
    }

    fn iface(name: &str, addresses: &[&str]) -> InterfaceAddrs {
        InterfaceAddrs {
            interface: name.into(),
            addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    fn stream(id: usize, bind: &str, gpu: Option<usize>) -> StreamRequest {
        StreamRequest {
            id,
            description: format!("udp {bind}:{}", 5000 + id),
            bind: bind.parse().unwrap(),
            gpu,
        }
    }

    fn two_socket_interfaces() -> Vec<InterfaceAddrs> {
        vec![
            iface("lo", &["127.0.0.1", "::1"]),
            iface("eno1", &["192.168.1.10"]),
            iface("enp4s0f0np0", &["10.0.0.1", "fd00::1"]),
            iface("enp132s0f0np0", &["10.0.1.1"]),
            iface("vlan10", &["10.10.0.1"]),
        ]
    }

    #[test]
    fn two_socket_streams_go_to_the_gpu_on_their_nics_switch() {
        let topo = fixture("two-socket");
        let streams = [stream(0, "10.0.1.1", None), stream(1, "10.0.0.1", None), stream(2, "fd00::1", None)];
        let placed = place(&topo, &two_socket_interfaces(), &streams).unwrap();
        assert_eq!(placed.iter().map(|p| p.gpu).collect::<Vec<_>>(), [1, 0, 0]);
        assert!(placed.iter().all(|p| p.relationship == Some(Relationship::SameSwitch)));
        assert_eq!(
            placed[0].reason,
            "stream 0 (udp 10.0.1.1:5000 on enp132s0f0np0) -> GPU 1 (0000:83:00.0): same PCIe switch"
        );
        assert_eq!(placed[0].numa_node, Some(1));
        assert_eq!(placed[0].cpus.as_ref().unwrap().to_string(), "16-31,48-63");
        assert_eq!(placed[1].cpus.as_ref().unwrap().to_string(), "0-15,32-47");
    }

    #[test]
    fn a_vlan_on_a_bond_is_placed_by_the_port_below_it() {
        let topo = fixture("two-socket");
        let placed = place(&topo, &two_socket_interfaces(), &[stream(0, "10.10.0.1", None)]).unwrap();
        assert_eq!(placed[0].gpu, 1);
        assert_eq!(placed[0].interface.as_deref(), Some("vlan10"));
        assert_eq!(placed[0].relationship, Some(Relationship::SameSwitch));
    }

    #[test]
    fn onboard_nic_prefers_its_root_complex_over_the_other_socket() {
        let topo = fixture("two-socket");
        let placed = place(&topo, &two_socket_interfaces(), &[stream(0, "192.168.1.10", None)]).unwrap();
        assert_eq!(placed[0].gpu, 0);
        assert_eq!(placed[0].relationship, Some(Relationship::SameRootComplex));
        assert!(
            placed[0].reason.ends_with("GPU 0 (0000:03:00.0): same root complex"),
            "{}",
            placed[0].reason
        );
    }

    #[test]
    fn explicit_gpu_wins_and_counts_as_load() {
        let topo = fixture("two-socket");
        let streams =
            [stream(0, "0.0.0.0", None), stream(1, "10.0.1.1", Some(0)), stream(2, "10.0.0.1", Some(0))];
        let placed = place(&topo, &two_socket_interfaces(), &streams).unwrap();
        // The pinned streams load GPU 0 before the wildcard stream is placed.
        assert_eq!(placed.iter().map(|p| p.gpu).collect::<Vec<_>>(), [1, 0, 0]);
        assert_eq!(placed[1].relationship, Some(Relationship::AcrossSockets));
        assert!(
            placed[1].reason.ends_with("set by `gpu = 0` (across sockets from enp132s0f0np0)"),
            "{}",
            placed[1].reason
        );
        assert!(placed[0].reason.contains("on any interface"), "{}", placed[0].reason);
        assert!(placed[0].reason.ends_with("bound to every interface, least loaded (0 streams before)"));
    }

    #[test]
    fn wildcard_unowned_and_virtual_binds_fall_back_to_load() {
        let topo = fixture("two-socket");
        let streams = [stream(0, "::", None), stream(1, "127.0.0.1", None), stream(2, "10.9.9.9", None)];
        let placed = place(&topo, &two_socket_interfaces(), &streams).unwrap();
        assert_eq!(placed.iter().map(|p| p.gpu).collect::<Vec<_>>(), [0, 1, 0]);
        assert!(placed.iter().all(|p| p.relationship.is_none()));
        assert!(placed[1].reason.contains("lo has no PCI device"), "{}", placed[1].reason);
        assert!(placed[2].reason.contains("no interface owns 10.9.9.9"), "{}", placed[2].reason);
        assert_eq!(placed[2].interface, None);
    }

    #[test]
    fn split_roots_ties_on_numa_node_are_broken_by_load() {
        let topo = fixture("split-roots");
        let interfaces = [iface("enp65s0f0", &["10.1.0.1"])];
        let streams = [stream(0, "10.1.0.1", None), stream(1, "10.1.0.1", None), stream(2, "10.1.0.1", None)];
        let placed = place(&topo, &interfaces, &streams).unwrap();
        assert_eq!(placed.iter().map(|p| p.gpu).collect::<Vec<_>>(), [0, 1, 0]);
        assert!(placed.iter().all(|p| p.relationship == Some(Relationship::SameNumaNode)));
        assert_eq!(
            placed[1].reason,
            "stream 1 (udp 10.1.0.1:5001 on enp65s0f0) -> GPU 1 (0000:21:00.0): same NUMA node, \
             least loaded of 2 (0 streams before)"
        );
    }

    #[test]
    fn build_vm_has_no_gpu_to_place_on() {
        let topo = fixture("build-vm");
        let err = place(&topo, &[], &[stream(3, "0.0.0.0", None)]).unwrap_err();
        assert!(matches!(err, TopologyError::NoGpu { .. }), "{err}");
        assert!(err.to_string().contains("stream 3 (udp 0.0.0.0:5003)"), "{err}");
        assert!(place(&topo, &[], &[]).unwrap().is_empty());
    }

    #[test]
    fn a_gpu_number_past_the_last_gpu_is_refused_with_the_range() {
        let topo = fixture("split-roots");
        let err = place(&topo, &[], &[stream(0, "0.0.0.0", Some(2))]).unwrap_err();
        assert!(err.to_string().contains("`gpu = 2` but this machine has 2 GPU(s)"), "{err}");
    }

    /// On every recorded tree (the GPU machine's too, once added), a stream
    /// bound on a PCI NIC lands on one of the closest GPUs.
    #[test]
    fn every_tree_places_each_pci_nic_on_a_closest_gpu() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs");
        let mut trees = 0;
        for entry in std::fs::read_dir(&root).unwrap() {
            let path = entry.unwrap().path();
            if !path.is_dir() {
                continue;
            }
            trees += 1;
            let topo = Topology::read(&path).unwrap();
            if topo.gpus.is_empty() {
                continue;
            }
            for (n, nic) in topo.nics.iter().enumerate() {
                let Some(pci) = nic.pci() else { continue };
                let bind = IpAddr::from([10, 200, (n / 256) as u8, (n % 256) as u8]);
                let interfaces = [InterfaceAddrs { interface: nic.interface.clone(), addresses: vec![bind] }];
                let request = StreamRequest { id: 0, description: "udp".into(), bind, gpu: None };
                let placed = place(&topo, &interfaces, &[request]).unwrap();
                let closest = topo.gpus.iter().map(|g| Relationship::between(pci, &g.pci)).min();
                assert_eq!(placed[0].relationship, closest, "{}: {}", path.display(), placed[0].reason);
                assert_eq!(placed[0].numa_node, topo.gpus[placed[0].gpu].pci.numa_node);
            }
        }
        assert!(trees >= 3, "the fixture trees are missing under {}", root.display());
    }
}
