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
            return Err(TopologyError::NoGpu { stream: format!("stream {} ({})", stream.id, stream.description) });
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
                    Some(rel) => format!("set by `gpu = {gpu}` ({rel} as {on})"),
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
