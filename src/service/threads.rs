//! Placement of the appliance's own threads: pinning the calling thread to a
//! CPU core and giving it SCHED_FIFO real-time priority, with errors that say
//! which unit setting or capability is missing.

use super::ServiceError;
use crate::realtime::{self, RealtimeError};
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// Pins the calling thread to CPU `cpu`. Fails when the core does not exist
/// or is outside the process's allowed set (for example `CPUAffinity=` in
/// the unit, or a cpuset cgroup).
pub fn pin_current_thread(cpu: usize) -> Result<(), ServiceError> {
    let allowed = sched_getaffinity(Pid::from_raw(0)).map_err(|e| ServiceError::Affinity {
        cpu,
        reason: format!("cannot read the allowed CPU set: {e}"),
    })?;
    match allowed.is_set(cpu) {
        Ok(true) => {}
        Ok(false) | Err(_) => {
            return Err(ServiceError::Affinity {
                cpu,
                reason: format!(
                    "the core is not in this process's allowed CPU set ({}); pick one of those \
                     or widen CPUAffinity=/the cpuset of the unit",
                    describe_cpu_set(&allowed)
                ),
            });
        }
    }
    let mut set = CpuSet::new();
    set.set(cpu).map_err(|e| ServiceError::Affinity { cpu, reason: e.to_string() })?;
    // Pid 0 is the calling thread for sched_setaffinity(2).
    sched_setaffinity(Pid::from_raw(0), &set)
        .map_err(|e| ServiceError::Affinity { cpu, reason: format!("sched_setaffinity failed: {e}") })
}

/// The CPUs in `set`, as a compact list such as `0-3,6`.
fn describe_cpu_set(set: &CpuSet) -> String {
    let cpus: Vec<usize> = (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    if parts.is_empty() { "empty".to_string() } else { parts.join(",") }
}

/// Gives the calling thread SCHED_FIFO at `priority` (1..=99). When the
/// kernel refuses, the error names what to change: `LimitRTPRIO=` (or
/// CAP_SYS_NICE) and `RestrictRealtime=no` in the unit.
pub fn set_current_thread_realtime(priority: u8) -> Result<(), ServiceError> {
    let err = match realtime::set_current_thread_fifo(priority) {
        Ok(()) => return Ok(()),
        Err(err) => err,
    };
    let reason = match &err {
        RealtimeError::OutOfRange { .. } => "priority must be from 1 to 99".to_string(),
        RealtimeError::Refused { source, .. } if err.is_permission_denied() => {
            let limit = realtime::rtprio_limit().map_or("unknown".to_string(), |l| l.to_string());
            format!(
                "{source}: the process may not use real-time scheduling (RLIMIT_RTPRIO is {limit}); \
                 run with LimitRTPRIO={priority} (or CAP_SYS_NICE) and RestrictRealtime=no — \
                 see systemd/realtime.conf — or remove service.realtime_priority"
            )
        }
        RealtimeError::Refused { source, .. } => source.to_string(),
    };
    Err(ServiceError::Realtime { priority, reason })
}

/// Applies the configured placement to the calling thread: pins it when
/// `cpu` is set, then raises it to SCHED_FIFO when `priority` is set. `role`
/// names the thread in the log line.
pub fn place_current_thread(
    role: &str,
    cpu: Option<usize>,
    priority: Option<u8>,
) -> Result<(), ServiceError> {
    if let Some(cpu) = cpu {
        pin_current_thread(cpu)?;
        tracing::info!(thread = role, cpu, "pinned thread to core");
    }
    if let Some(priority) = priority {
        set_current_thread_realtime(priority)?;
        tracing::info!(thread = role, priority, "thread runs SCHED_FIFO");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> CpuSet {
        sched_getaffinity(Pid::from_raw(0)).unwrap()
    }

    #[test]
    fn pins_a_thread_to_an_allowed_core() {
        let first = (0..CpuSet::count()).find(|&c| allowed().is_set(c).unwrap()).unwrap();
        std::thread::spawn(move || {
            pin_current_thread(first).unwrap();
            let now = allowed();
            let set: Vec<usize> = (0..CpuSet::count()).filter(|&c| now.is_set(c).unwrap()).collect();
            assert_eq!(set, vec![first]);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn refuses_a_core_outside_the_allowed_set() {
        let outside = (0..CpuSet::count()).rev().find(|&c| !allowed().is_set(c).unwrap()).unwrap();
        let err = std::thread::spawn(move || pin_current_thread(outside)).join().unwrap().unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&format!("core {outside}")), "{text}");
        assert!(text.contains("allowed CPU set"), "{text}");
    }

    #[test]
    fn describes_cpu_sets_compactly() {
        let mut set = CpuSet::new();
        for c in [0, 1, 2, 3, 6, 8, 9] {
            set.set(c).unwrap();
        }
        assert_eq!(describe_cpu_set(&set), "0-3,6,8-9");
        assert_eq!(describe_cpu_set(&CpuSet::new()), "empty");
    }

    #[test]
    fn realtime_either_succeeds_or_says_what_to_change() {
        let result = std::thread::spawn(|| {
            let r = set_current_thread_realtime(10);
            let policy = {
                let mut param = libc::sched_param { sched_priority: 0 };
                let mut policy = 0;
                // SAFETY: valid out-pointers for the calling thread's handle.
                let rc =
                    unsafe { libc::pthread_getschedparam(libc::pthread_self(), &mut policy, &mut param) };
                assert_eq!(rc, 0);
                (policy, param.sched_priority)
            };
            (r, policy)
        })
        .join()
        .unwrap();
        match result {
            (Ok(()), policy) => assert_eq!(policy, (libc::SCHED_FIFO, 10)),
            (Err(e), (policy, _)) => {
                assert_ne!(policy, libc::SCHED_FIFO);
                let text = e.to_string();
                assert!(text.contains("priority 10"), "{text}");
                if text.contains("Operation not permitted") {
                    assert!(text.contains("LimitRTPRIO"), "{text}");
                }
            }
        }
        assert!(set_current_thread_realtime(0).is_err());
        assert!(set_current_thread_realtime(100).is_err());
    }
}
