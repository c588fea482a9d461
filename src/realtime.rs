//! Real-time scheduling of the calling thread: the one place that asks the
//! kernel for SCHED_FIFO.

use thiserror::Error;

/// Why the calling thread could not be put under SCHED_FIFO.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RealtimeError {
    /// A priority outside 1..=99; pick one from 1 to 99.
    #[error("SCHED_FIFO priority {priority} is out of range; pick a priority from 1 to 99")]
    OutOfRange { priority: u8 },
    /// The kernel refused SCHED_FIFO; grant `LimitRTPRIO=` or CAP_SYS_NICE, or run without
    /// real-time priority.
    #[error(
        "the kernel refused SCHED_FIFO priority {priority}: {source}; grant LimitRTPRIO= or CAP_SYS_NICE"
    )]
    Refused {
        priority: u8,
        #[source]
        source: std::io::Error,
    },
}

impl RealtimeError {
    /// True when the kernel refused for lack of permission (RLIMIT_RTPRIO,
    /// CAP_SYS_NICE or `RestrictRealtime=`), not for a bad argument.
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, Self::Refused { source, .. } if source.raw_os_error() == Some(libc::EPERM))
    }
}

/// The soft RLIMIT_RTPRIO of this process (the highest SCHED_FIFO priority an
/// unprivileged thread may take), or None when it cannot be read.
pub fn rtprio_limit() -> Option<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into the valid, exclusively
    // borrowed struct and reads nothing else.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_RTPRIO, &mut lim) };
    (rc == 0).then_some(lim.rlim_cur)
}

/// Puts the calling thread under SCHED_FIFO at `priority` (1..=99).
pub fn set_current_thread_fifo(priority: u8) -> Result<(), RealtimeError> {
    if !(1..=99).contains(&priority) {
        return Err(RealtimeError::OutOfRange { priority });
    }
    let param = libc::sched_param { sched_priority: i32::from(priority) };
    // SAFETY: pthread_self() is always a valid handle of the calling thread,
    // and `param` is a valid sched_param that the call only reads.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(RealtimeError::Refused { priority, source: std::io::Error::from_raw_os_error(rc) })
    }
}

/// Sets the calling thread's timer slack to `ns` nanoseconds, so that its
/// sleeps end close to when they were asked to (the default slack is 50 µs).
pub fn set_current_thread_timer_slack(ns: u64) -> std::io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and changes only
    // the calling thread's timer slack; the result is checked.
    if unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns.max(1) as libc::c_ulong) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the calling thread's nice value (0 = default, 19 = lowest). Raising
/// it needs no privilege; on Linux `setpriority` with a thread id changes
/// only that thread.
pub fn set_current_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority takes plain integers; PRIO_PROCESS with a thread id
    // affects only that thread; the result is checked.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_priorities_outside_1_to_99_without_asking_the_kernel() {
        for priority in [0, 100, 255] {
            let err = set_current_thread_fifo(priority).unwrap_err();
            assert!(matches!(err, RealtimeError::OutOfRange { priority: p } if p == priority));
            assert!(err.to_string().contains("from 1 to 99"), "{err}");
            assert!(!err.is_permission_denied());
        }
    }

    #[test]
    fn fifo_is_either_granted_or_refused_with_the_kernel_error() {
        let (result, policy) = std::thread::spawn(|| {
            let r = set_current_thread_fifo(7);
            let mut param = libc::sched_param { sched_priority: 0 };
            let mut policy = 0;
            // SAFETY: valid out-pointers for the calling thread's handle.
            let rc = unsafe { libc::pthread_getschedparam(libc::pthread_self(), &mut policy, &mut param) };
            assert_eq!(rc, 0);
            (r, (policy, param.sched_priority))
        })
        .join()
        .unwrap();
        match result {
            Ok(()) => assert_eq!(policy, (libc::SCHED_FIFO, 7)),
            Err(e) => {
                assert_ne!(policy.0, libc::SCHED_FIFO);
                assert!(matches!(e, RealtimeError::Refused { priority: 7, .. }), "{e}");
                assert!(std::error::Error::source(&e).is_some());
            }
        }
    }
}
