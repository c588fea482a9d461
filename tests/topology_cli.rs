//! `frameloop topology` as a user runs it on recorded sysfs trees: the text
//! report, the JSON report, and a missing tree that ends in a clear error.

use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs").join(name).display().to_string()
}

fn topology(args: &[&str]) -> (Output, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .arg("topology")
        .args(args)
        .env("FRAMELOOP_LOG", "info")
        .output()
        .expect("the frameloop binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "frameloop topology panicked:\n{stderr}");
    (out, stdout, stderr)
}

#[test]
fn text_report_shows_gpus_nics_matrix_and_nodes() {
    let (out, stdout, stderr) = topology(&["--sysfs", &fixture("two-socket")]);
    assert!(out.status.success(), "{stderr}");
    for line in [
        "GPUs (2)",
        "  GPU 0  0000:03:00.0  NUMA 0  link Gen5 x16 (max Gen5 x16)  \
         pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
        "  GPU 1  0000:83:00.0  NUMA 1  link Gen5 x16 (max Gen5 x16)  \
         pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:00.0/0000:83:00.0",
        "  eno1           0000:05:00.0  NUMA 0  link Gen2 x1  pci0000:00/0000:00:1c.0/0000:05:00.0",
        "  lo             virtual (no device)",
        "  vlan10         0000:84:00.0  NUMA 1  via enp132s0f0np0  \
         pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:01.0/0000:84:00.0",
        "  vlan10         across sockets      same PCIe switch",
        "                 GPU 0               GPU 1",
        "  enp132s0f0np0  across sockets      same PCIe switch",
        "  enp4s0f0np0    same PCIe switch    across sockets",
        "  eno1           same root complex   across sockets",
        "  node 1  CPUs 16-31,48-63 (32)",
    ] {
        assert!(stdout.lines().any(|l| l == line), "no line {line:?} in:\n{stdout}");
    }
    assert!(!stdout.contains("0000:06:00.0"), "the BMC display is not a GPU:\n{stdout}");
}

#[test]
fn json_report_has_the_matrix_and_degraded_links() {
    let (out, stdout, stderr) = topology(&["--sysfs", &fixture("split-roots"), "--json"]);
    assert!(out.status.success(), "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("stdout is JSON");
    let gpu1 = &json["gpus"][1];
    assert_eq!(gpu1["pci"]["address"], "0000:21:00.0");
    assert_eq!(gpu1["pci"]["link"]["generation"], 4);
    assert_eq!(gpu1["pci"]["link"]["width"], 8);
    assert_eq!(gpu1["pci"]["max_link"]["generation"], 5);
    let pairs = json["relationships"].as_array().unwrap();
    assert_eq!(pairs.len(), 2, "one PCI NIC times two GPUs: {pairs:?}");
    assert!(pairs.iter().all(|p| p["interface"] == "enp65s0f0" && p["relationship"] == "same_numa_node"));
    assert_eq!(json["nics"][1]["device"]["kind"], "virtual");
    assert_eq!(json["numa_nodes"][0]["cpus"], "0-63");
    assert_eq!(json["addresses"], serde_json::json!([]), "a recorded tree shows no live addresses");
}

#[test]
fn a_missing_tree_says_how_to_point_at_one() {
    let (out, _, stderr) = topology(&["--sysfs", "/nonexistent/sysfs-tree"]);
    assert!(!out.status.success());
    assert!(stderr.contains("/nonexistent/sysfs-tree") && stderr.contains("--sysfs DIR"), "{stderr}");
}

#[test]
fn help_lists_the_command_and_its_flags() {
    let top = Command::new(env!("CARGO_BIN_EXE_frameloop")).arg("--help").output().unwrap();
    assert!(String::from_utf8_lossy(&top.stdout).contains("topology"));
    let (out, stdout, _) = topology(&["--help"]);
    assert!(out.status.success());
    assert!(
        stdout.contains("Usage: frameloop topology")
            && stdout.contains("--sysfs")
            && stdout.contains("--json")
    );
}
