//! Config and SDP paths that name something other than a small text file
//! (a device, a FIFO, a directory, a huge file) fail quickly with a message
//! naming the path, instead of being read without bound.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Far more than a refusal needs, far less than reading /dev/zero would take.
const QUICK: Duration = Duration::from_secs(10);

fn validate(config: &std::path::Path) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .args(["validate", "--config"])
        .arg(config)
        .env("NO_COLOR", "1")
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .output()
        .expect("frameloop runs");
    (out, start.elapsed())
}

fn assert_refused(config: &std::path::Path, why: &str) {
    let (out, took) = validate(config);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "validate accepted {}: {text}", config.display());
    assert!(took < QUICK, "validate took {took:?} on {}", config.display());
    assert!(text.contains(&config.display().to_string()), "message does not name the path: {text}");
    assert!(text.contains(why), "message does not say {why:?}: {text}");
}

#[test]
fn validate_refuses_dev_zero_quickly() {
    assert_refused(std::path::Path::new("/dev/zero"), "not a regular file");
}

#[test]
fn validate_refuses_a_directory_a_fifo_and_a_huge_file() {
    let dir = tempfile::tempdir().unwrap();
    assert_refused(dir.path(), "a directory");
    let fifo = dir.path().join("config.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert_refused(&fifo, "a FIFO");
    let big = dir.path().join("big.toml");
    std::fs::write(&big, vec![b'#'; 2 << 20]).unwrap();
    assert_refused(&big, "limit");
}

#[test]
fn an_sdp_path_naming_a_device_or_fifo_is_a_config_problem() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("stream.sdp");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    for sdp in [std::path::Path::new("/dev/zero"), fifo.as_path()] {
        let config = dir.path().join("rtp.toml");
        std::fs::write(&config, format!("[rtp]\nsdp = {:?}\n", sdp.display().to_string())).unwrap();
        let (out, took) = validate(&config);
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!out.status.success(), "validate accepted sdp {}: {text}", sdp.display());
        assert!(took < QUICK, "validate took {took:?} on sdp {}", sdp.display());
        assert!(text.contains("rtp.sdp") && text.contains(&sdp.display().to_string()), "{text}");
        assert!(text.contains("not a regular file"), "{text}");
    }
}
