//! `frameloop topology`: GPUs, NICs, the NIC-GPU relationship matrix and
//! the CPUs of each NUMA node, as text for people or JSON for scripts.

use super::{InterfaceAddrs, NicDevice, Relationship, Topology, TopologyError, interface_addresses};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

/// Arguments of `frameloop topology`.
#[derive(Debug, Clone)]
pub struct TopologyArgs {
    /// Sysfs root to read: the live /sys, or a tree recorded by scripts/record-sysfs.sh.
    pub sysfs: PathBuf,
    /// Print JSON instead of text.
    pub json: bool,
}

/// One NIC-GPU pair of the matrix.
#[derive(Debug, Serialize)]
struct Pair<'a> {
    interface: &'a str,
    gpu: usize,
    relationship: Relationship,
}

/// The JSON document: the topology, the live interface addresses and the matrix.
#[derive(Debug, Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    topology: &'a Topology,
    addresses: &'a [InterfaceAddrs],
    relationships: Vec<Pair<'a>>,
}

/// Runs `frameloop topology`. Interface addresses are shown only for the
/// live /sys: a recorded tree is another machine's.
pub fn command(args: &TopologyArgs) -> Result<(), TopologyError> {
    let topology = Topology::read(&args.sysfs)?;
    let live = std::fs::canonicalize(&args.sysfs).is_ok_and(|p| p == std::path::Path::new("/sys"));
    let addresses = if live { interface_addresses()? } else { Vec::new() };
    let text = if args.json {
        let report = Report { topology: &topology, addresses: &addresses, relationships: pairs(&topology) };
        let mut json =
            serde_json::to_string_pretty(&report).expect("the report holds only strings and numbers");
        json.push('\n');
        json
    } else {
        render(&topology, &addresses)
    };
    std::io::stdout().write_all(text.as_bytes()).map_err(|source| TopologyError::Output { source })
}

fn pairs(topology: &Topology) -> Vec<Pair<'_>> {
    let mut pairs = Vec::new();
    for nic in &topology.nics {
        let Some(pci) = nic.pci() else { continue };
        for gpu in &topology.gpus {
            pairs.push(Pair {
                interface: &nic.interface,
                gpu: gpu.index,
                relationship: Relationship::between(pci, &gpu.pci),
            });
        }
    }
    pairs
}

fn numa(node: Option<u32>) -> String {
    node.map_or_else(|| "?".to_owned(), |n| n.to_string())
}

/// The text report.
fn render(topology: &Topology, addresses: &[InterfaceAddrs]) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = writeln!(out, "GPUs ({})", topology.gpus.len());
    if topology.gpus.is_empty() {
        let _ = writeln!(out, "  none (no NVIDIA device of class 0x0300/0x0302 in bus/pci/devices)");
    }
    for gpu in &topology.gpus {
        let pci = &gpu.pci;
        let _ = writeln!(
            out,
            "  GPU {}  {}  NUMA {}  link {} (max {})  {}/{}",
            gpu.index,
            pci.address,
            numa(pci.numa_node),
            pci.link,
            pci.max_link,
            pci.path,
            pci.address
        );
    }
    let _ = writeln!(out, "\nNICs ({})", topology.nics.len());
    let width = topology.nics.iter().map(|n| n.interface.len()).max().unwrap_or(0);
    for nic in &topology.nics {
        let place = match &nic.device {
            NicDevice::Pci(pci) => {
                format!(
                    "{}  NUMA {}  link {}  {}/{}",
                    pci.address,
                    numa(pci.numa_node),
                    pci.link,
                    pci.path,
                    pci.address
                )
            }
            NicDevice::Stacked { lower, pci } => format!(
                "{}  NUMA {}  via {lower}  {}/{}",
                pci.address,
                numa(pci.numa_node),
                pci.path,
                pci.address
            ),
            NicDevice::NotPci { path } => format!("not on PCI ({path})"),
            NicDevice::Virtual => "virtual (no device)".to_owned(),
        };
        let owned = addresses.iter().find(|a| a.interface == nic.interface).map_or_else(String::new, |a| {
            let list: Vec<String> = a.addresses.iter().map(ToString::to_string).collect();
            format!("  [{}]", list.join(", "))
        });
        let _ = writeln!(out, "  {:width$}  {place}{owned}", nic.interface);
    }
    let on_pci: Vec<_> =
        topology.nics.iter().filter_map(|n| Some((n.interface.as_str(), n.pci()?))).collect();
    if !topology.gpus.is_empty() && !on_pci.is_empty() {
        let _ = writeln!(out, "\nNIC-GPU relationships");
        let column = 18;
        let _ = write!(out, "  {:width$}", "");
        for gpu in &topology.gpus {
            let _ = write!(out, "  {:column$}", format!("GPU {}", gpu.index));
        }
        out.truncate(out.trim_end().len());
        let _ = writeln!(out);
        for (interface, pci) in on_pci {
            let _ = write!(out, "  {interface:width$}");
            for gpu in &topology.gpus {
                let rel = match Relationship::between(pci, &gpu.pci) {
                    Relationship::Unknown => "unknown".to_owned(),
                    known => known.to_string(),
                };
                let _ = write!(out, "  {rel:column$}");
            }
            out.truncate(out.trim_end().len());
            let _ = writeln!(out);
        }
    }
    let _ = writeln!(out, "\nNUMA nodes ({})", topology.numa_nodes.len());
    for node in &topology.numa_nodes {
        let cpus = node
            .cpus
            .as_ref()
            .map_or_else(|| "CPUs unknown".to_owned(), |c| format!("CPUs {c} ({})", c.count()));
        let _ = writeln!(out, "  node {}  {cpus}", node.node);
    }
    out
}
