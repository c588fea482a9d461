//! `frameloop reload --pid-file` never signals a process that is not the
//! appliance that wrote the file: a pid file left behind (nobody holds its
//! lock) whose pid now belongs to another process, and a held file whose
//! pid belongs to a process started after the file was written, are both
//! refused with a message saying why, and that process lives on.

use nix::fcntl::{Flock, FlockArg};
use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, SystemTime};

fn reload(pid_file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .arg("reload")
        .arg("--pid-file")
        .arg(pid_file)
        .output()
        .unwrap()
}

/// A process of the test's own that a stray SIGHUP would kill.
fn bystander() -> Child {
    Command::new("sleep").arg("60").spawn().expect("sleep runs")
}

fn assert_refused_and_alive(out: &Output, child: &mut Child, why: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "reload succeeded: {stderr}");
    assert!(stderr.contains(why) && stderr.contains("nothing was signalled"), "{stderr}");
    std::thread::sleep(Duration::from_millis(200));
    assert!(child.try_wait().unwrap().is_none(), "the unrelated process was signalled");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_stale_pid_file_whose_pid_was_reused_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("frameloop.pid");
    let mut sleep = bystander();
    std::fs::write(&pid_file, format!("{}\n", sleep.id())).unwrap();
    let out = reload(&pid_file);
    assert_refused_and_alive(&out, &mut sleep, "stale");
}

#[test]
fn a_held_pid_file_naming_a_younger_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("frameloop.pid");
    let mut sleep = bystander();
    std::fs::write(&pid_file, format!("{}\n", sleep.id())).unwrap();
    // Written a minute before the process started, and held as a running
    // appliance holds it.
    let file = std::fs::File::options().write(true).open(&pid_file).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(60)).unwrap();
    let _held = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e).unwrap();
    let out = reload(&pid_file);
    assert_refused_and_alive(&out, &mut sleep, "started after");
}
