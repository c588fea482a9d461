//! Binding the calling thread to a NUMA node while one loop starts: its CPU
//! affinity to the node's CPUs and its memory policy to the node, so the
//! threads it spawns (receiver, host loop, result) inherit both and the ring
//! memory it allocates comes from the node. Dropping the binding restores
//! the thread's previous affinity and the default memory policy.

#![deny(unsafe_op_in_unsafe_fn)]

use crate::topology::CpuList;
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// The highest NUMA node number a memory policy is set for.
const MAX_NODE: u32 = 1023;
/// `MPOL_DEFAULT` and `MPOL_PREFERRED` of `<linux/mempolicy.h>`.
const MPOL_DEFAULT: libc::c_int = 0;
const MPOL_PREFERRED: libc::c_int = 1;
/// Bits in one word of a node mask.
const WORD_BITS: usize = libc::c_ulong::BITS as usize;

/// Sets the calling thread's memory policy (`set_mempolicy(2)`): `Some(node)`
/// prefers that node, `None` goes back to the default (local) policy.
fn set_memory_policy(node: Option<u32>) -> Result<(), std::io::Error> {
    let mut mask = [0 as libc::c_ulong; (MAX_NODE as usize + 1) / WORD_BITS];
    let mode = match node {
        Some(n) if n <= MAX_NODE => {
            let n = n as usize;
            mask[n / WORD_BITS] |= 1 << (n % WORD_BITS);
            MPOL_PREFERRED
        }
        Some(n) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("node {n} > {MAX_NODE}"),
            ));
        }
        None => MPOL_DEFAULT,
    };
    let (ptr, bits) = match mode {
        MPOL_DEFAULT => (std::ptr::null::<libc::c_ulong>(), 0),
        _ => (mask.as_ptr(), mask.len() * WORD_BITS + 1),
    };
    // SAFETY: `ptr` is null (MPOL_DEFAULT, no mask) or points to `mask`,
    // which lives until the call returns and holds `bits - 1` bits; the
    // kernel only reads it.
    let rc = unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, ptr, bits as libc::c_ulong) };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// The calling thread bound to a node until dropped.
pub(super) struct NodeBinding {
    /// The affinity to put back, when it was changed.
    saved_affinity: Option<CpuSet>,
    /// The memory policy was changed.
    policy_set: bool,
}

/// Binds the calling thread to `cpus` (those the process may use) and
/// prefers memory on `node`; whatever the kernel refuses is logged and left
/// as it was. `loop_name` names the loop in the log.
pub(super) fn bind_current_thread(loop_name: &str, cpus: Option<&CpuList>, node: Option<u32>) -> NodeBinding {
    let mut binding = NodeBinding { saved_affinity: None, policy_set: false };
    if let Some(cpus) = cpus {
        match sched_getaffinity(Pid::from_raw(0)) {
            Ok(allowed) => {
                let mut set = CpuSet::new();
                let mut any = false;
                for cpu in cpus.iter().map(|c| c as usize) {
                    if allowed.is_set(cpu).unwrap_or(false) && set.set(cpu).is_ok() {
                        any = true;
                    }
                }
                if !any {
                    tracing::warn!(
                        "loop {loop_name}: none of CPUs {cpus} may be used by this process; its threads are \
                         not pinned (set cpus = \"...\" in its [[loop]] to CPUs of CPUAffinity=)"
                    );
                } else if let Err(e) = sched_setaffinity(Pid::from_raw(0), &set) {
                    tracing::warn!("loop {loop_name}: cannot pin its threads to CPUs {cpus}: {e}");
                } else {
                    binding.saved_affinity = Some(allowed);
                    tracing::info!("loop {loop_name}: receiver, loop and result threads on CPUs {cpus}");
                }
            }
            Err(e) => {
                tracing::warn!("loop {loop_name}: cannot read the allowed CPUs ({e}); threads not pinned")
            }
        }
    }
    if let Some(node) = node {
        match set_memory_policy(Some(node)) {
            Ok(()) => {
                binding.policy_set = true;
                tracing::info!("loop {loop_name}: ring memory preferred on NUMA node {node}");
            }
            Err(e) => tracing::warn!("loop {loop_name}: cannot prefer memory on NUMA node {node}: {e}"),
        }
    }
    binding
}

impl Drop for NodeBinding {
    fn drop(&mut self) {
        if let Some(saved) = self.saved_affinity.take()
            && let Err(e) = sched_setaffinity(Pid::from_raw(0), &saved)
        {
            tracing::warn!("cannot restore the starting thread's CPU affinity: {e}");
        }
        if self.policy_set
            && let Err(e) = set_memory_policy(None)
        {
            tracing::warn!("cannot restore the default memory policy: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed_now() -> Vec<usize> {
        let set = sched_getaffinity(Pid::from_raw(0)).unwrap();
        (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap()).collect()
    }

    #[test]
    fn threads_spawned_while_bound_inherit_the_cpus_and_the_binding_is_undone() {
        std::thread::spawn(|| {
            let before = allowed_now();
            let first = before[0];
            let cpus = CpuList::parse(&first.to_string()).unwrap();
            let binding = bind_current_thread("t", Some(&cpus), Some(0));
            assert_eq!(allowed_now(), [first]);
            let child = std::thread::spawn(allowed_now).join().unwrap();
            assert_eq!(child, [first], "a thread spawned while bound inherits the CPUs");
            drop(binding);
            assert_eq!(allowed_now(), before);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn cpus_outside_the_allowed_set_leave_the_thread_alone() {
        std::thread::spawn(|| {
            let before = allowed_now();
            let outside = (0..CpuSet::count()).rev().find(|c| !before.contains(c)).unwrap();
            let cpus = CpuList::parse(&outside.to_string()).unwrap();
            let binding = bind_current_thread("t", Some(&cpus), None);
            assert_eq!(allowed_now(), before);
            assert!(binding.saved_affinity.is_none());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn memory_policy_refuses_impossible_nodes() {
        std::thread::spawn(|| {
            assert!(set_memory_policy(Some(MAX_NODE + 1)).is_err());
            // Node 0 exists on every Linux machine (even without NUMA).
            set_memory_policy(Some(0)).unwrap();
            set_memory_policy(None).unwrap();
        })
        .join()
        .unwrap();
    }
}
