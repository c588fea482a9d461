//! The systemd unit, its drop-in and the sysusers file as systemd's own tools
//! judge them: `systemd-analyze verify` finds nothing to say, `systemd-analyze
//! security` rates the exposure at most 2.5, and the unit keeps the contract
//! the appliance relies on (notify type, watchdog, validate before start,
//! stop bound above the appliance's own shutdown bound).
//!
//! Without systemd's tools these tests say so and pass, unless
//! FRAMELOOP_REQUIRE_TOOLS is set (CI sets it), in which case they fail.

use frameloop::service::config::{DEFAULT_SHUTDOWN_TIMEOUT_MS, ServiceConfig};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// True when `tool` runs; otherwise skips (returns false) or, with
/// FRAMELOOP_REQUIRE_TOOLS set, fails.
fn have(tool: &str) -> bool {
    if Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success()) {
        return true;
    }
    if std::env::var_os("FRAMELOOP_REQUIRE_TOOLS").is_some() {
        panic!("{tool} is required (FRAMELOOP_REQUIRE_TOOLS is set): apt-get install systemd");
    }
    eprintln!(
        "skipping: {tool} not found (apt-get install systemd); set FRAMELOOP_REQUIRE_TOOLS to fail instead"
    );
    false
}

/// The unit with its binary path pointing at the binary under test (verify
/// checks that every Exec command exists), written into `dir`, plus any
/// drop-in text appended as the drop-in would apply it.
fn unit_copy(dir: &Path, drop_in: Option<&str>) -> PathBuf {
    let mut text =
        read("systemd/frameloop.service").replace("/usr/bin/frameloop", env!("CARGO_BIN_EXE_frameloop"));
    if let Some(extra) = drop_in {
        text.push('\n');
        text.push_str(extra);
    }
    let path = dir.join("frameloop.service");
    std::fs::write(&path, text).unwrap();
    path
}

/// Every `Key=value` of the unit, in order (comments and sections dropped).
fn settings(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
        .collect()
}

fn values<'a>(settings: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    settings.iter().filter(|(k, _)| k == key).map(|(_, v)| v.as_str()).collect()
}

fn one<'a>(settings: &'a [(String, String)], key: &str) -> &'a str {
    match values(settings, key).as_slice() {
        [v] => v,
        other => panic!("{key} should be set exactly once, found {other:?}"),
    }
}

/// A systemd time span such as `15s`, `2min` or `500ms`, in milliseconds.
fn span_ms(text: &str) -> u64 {
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    let n: u64 = digits.parse().unwrap_or_else(|_| panic!("time span {text:?}"));
    match &text[digits.len()..] {
        "ms" => n,
        "" | "s" => n * 1000,
        "min" => n * 60_000,
        unit => panic!("unit {unit:?} in {text:?}"),
    }
}

#[test]
fn unit_passes_systemd_analyze_verify() {
    if !have("systemd-analyze") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_copy(dir.path(), None);
    let out = Command::new("systemd-analyze").arg("verify").arg(&unit).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // verify exits 0 even for unknown keys and bad values: it must say nothing.
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {:?}\n{said}",
        out.status
    );
}

#[test]
fn verify_catches_a_misspelt_setting() {
    // Guards the check above: the same run reports a broken copy.
    if !have("systemd-analyze") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_copy(dir.path(), None);
    let broken = std::fs::read_to_string(&unit).unwrap().replace("ProtectHome=yes", "ProtectHme=yes");
    std::fs::write(&unit, broken).unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&unit).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("ProtectHme"), "{out:?}");
}

/// The overall exposure `systemd-analyze security` gives the unit (with the
/// drop-in applied, if any), checked against its own threshold too.
fn exposure(drop_in: Option<&str>) -> Option<f64> {
    if !have("systemd-analyze") {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_copy(dir.path(), drop_in);
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--threshold=25", "--no-pager"])
        .arg(&unit)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text.lines().find(|l| l.contains("Overall exposure level")).unwrap_or_else(|| {
        panic!("no overall exposure in:\n{text}\n{}", String::from_utf8_lossy(&out.stderr))
    });
    let value = line.split(':').nth(1).and_then(|v| v.split_whitespace().next()).unwrap();
    let value: f64 = value.parse().unwrap_or_else(|_| panic!("exposure in {line:?}"));
    assert!(out.status.success(), "exposure {value} is over the threshold 2.5:\n{text}");
    Some(value)
}

#[test]
fn unit_security_exposure_is_at_most_2_5() {
    if let Some(value) = exposure(None) {
        assert!(value <= 2.5, "exposure {value}");
    }
}

#[test]
fn realtime_drop_in_keeps_exposure_at_most_2_5() {
    let drop_in = read("systemd/realtime.conf");
    assert!(settings(&drop_in).contains(&("RestrictRealtime".into(), "no".into())));
    if let Some(value) = exposure(Some(&drop_in)) {
        assert!(value <= 2.5, "exposure with realtime.conf {value}");
    }
}

#[test]
fn unit_keeps_the_appliance_contract() {
    let unit = settings(&read("systemd/frameloop.service"));
    assert_eq!(one(&unit, "Type"), "notify");
    assert_eq!(one(&unit, "NotifyAccess"), "main");
    assert_eq!(
        one(&unit, "ExecStartPre"),
        "/usr/bin/frameloop validate --config /etc/frameloop/frameloop.toml"
    );
    assert!(
        one(&unit, "ExecStart").starts_with("/usr/bin/frameloop run --config /etc/frameloop/frameloop.toml")
    );
    // The watchdog is armed, and pings (every half interval) have room.
    assert!(span_ms(one(&unit, "WatchdogSec")) >= 2000);
    // systemd kills only after the appliance's own shutdown bound has passed.
    let stop = span_ms(one(&unit, "TimeoutStopSec"));
    assert!(stop >= DEFAULT_SHUTDOWN_TIMEOUT_MS + 5000, "TimeoutStopSec {stop} ms");
    assert_eq!(one(&unit, "LimitMEMLOCK"), "infinity");
    assert_eq!(one(&unit, "CapabilityBoundingSet"), "");
    assert_eq!(one(&unit, "AmbientCapabilities"), "");
    assert_eq!(one(&unit, "NoNewPrivileges"), "yes");
    assert_eq!(one(&unit, "DevicePolicy"), "closed");
    let devices = values(&unit, "DeviceAllow");
    for node in ["/dev/nvidiactl", "char-nvidia-frontend", "char-nvidia-uvm"] {
        assert!(devices.iter().any(|d| d.starts_with(node)), "DeviceAllow lacks {node}: {devices:?}");
    }
    // The user is the one the sysusers file creates.
    let sysusers = read("systemd/frameloop.sysusers");
    let user_line = sysusers.lines().find(|l| l.starts_with("u ")).expect("a u line");
    assert_eq!(user_line.split_whitespace().nth(1), Some(one(&unit, "User")));
}

#[test]
fn sysusers_file_is_accepted() {
    if !have("systemd-sysusers") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    let out = Command::new("systemd-sysusers")
        .arg(format!("--root={}", root.path().display()))
        .arg("--dry-run")
        .arg(repo("systemd/frameloop.sysusers"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("Creating user 'frameloop'"), "{said}");
    // Parse errors are reported as "<file>:<line>: ..." and change no exit code.
    assert!(!said.contains("frameloop.sysusers:"), "{said}");
}

#[test]
fn example_config_service_section_is_valid() {
    let text = read("systemd/frameloop.toml");
    let table: toml::Table = toml::from_str(&text).unwrap();
    let mut problems = Vec::new();
    let service: ServiceConfig = frameloop::config::section("service", table.get("service"), &mut problems);
    service.validate(&mut problems);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(
        span_ms(one(&settings(&read("systemd/frameloop.service")), "TimeoutStopSec"))
            > service.shutdown_timeout_ms
    );
    // The commented examples are valid too once uncommented.
    let uncommented: String = text
        .lines()
        .map(|l| l.strip_prefix("# ").filter(|r| r.contains(" = ") && r.contains("# example")).unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let table: toml::Table = toml::from_str(&uncommented).unwrap();
    let service: ServiceConfig = frameloop::config::section("service", table.get("service"), &mut problems);
    service.validate(&mut problems);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(service.metrics_socket_addr().is_some() && service.realtime_priority.is_some());
    let rtprio: u8 = one(&settings(&read("systemd/realtime.conf")), "LimitRTPRIO").parse().unwrap();
    assert!(
        rtprio >= service.realtime_priority.unwrap(),
        "realtime.conf's LimitRTPRIO below the example priority"
    );
}

#[test]
fn install_script_and_deb_assets_place_the_same_files() {
    let root = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(repo("systemd/install.sh"))
        .args(["--binary", env!("CARGO_BIN_EXE_frameloop"), "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    if !out.status.success() && !have("systemd-sysusers") {
        return;
    }
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let manifest: toml::Table = toml::from_str(&read("Cargo.toml")).unwrap();
    let assets = manifest["package"]["metadata"]["deb"]["assets"].as_array().unwrap();
    assert!(!assets.is_empty());
    for asset in assets {
        let fields = asset.as_array().unwrap();
        let (src, dest) = (fields[0].as_str().unwrap(), fields[1].as_str().unwrap());
        let name = Path::new(src).file_name().unwrap();
        let installed =
            if dest.ends_with('/') { root.path().join(dest).join(name) } else { root.path().join(dest) };
        assert!(installed.is_file(), "install.sh did not place {src} at /{dest}");
        if !src.starts_with("target/") {
            assert_eq!(std::fs::read(&installed).unwrap(), std::fs::read(repo(src)).unwrap(), "{src}");
        }
    }
    let passwd = std::fs::read_to_string(root.path().join("etc/passwd")).unwrap();
    assert!(passwd.lines().any(|l| l.starts_with("frameloop:")), "{passwd}");
    config_is_readable_by_the_service_group(root.path());
}

/// The unit runs as `User=frameloop`: the installed config must be
/// root:frameloop 0640 (by the gid in the image's own /etc/group), not
/// root:root, or the service cannot read it. Ownership is only set when
/// the installer runs as root.
fn config_is_readable_by_the_service_group(root: &Path) {
    use std::os::unix::fs::MetadataExt;
    let config = std::fs::metadata(root.join("etc/frameloop/frameloop.toml")).unwrap();
    assert_eq!(config.mode() & 0o7777, 0o640, "etc/frameloop/frameloop.toml mode");
    let euid = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&euid.stdout).trim() != "0" {
        eprintln!("skipping the owner check: install.sh ran as a user that cannot chown");
        return;
    }
    let group = std::fs::read_to_string(root.join("etc/group")).unwrap();
    let gid: u32 = group
        .lines()
        .find_map(|l| l.strip_prefix("frameloop:"))
        .and_then(|rest| rest.split(':').nth(1))
        .and_then(|g| g.parse().ok())
        .unwrap_or_else(|| panic!("no frameloop group in the image: {group}"));
    assert_eq!((config.uid(), config.gid()), (0, gid), "etc/frameloop/frameloop.toml owner");
}
