//! The scheduling of this process's named threads, read from /proc.

/// The nice value of this process's thread named `name`, from
/// /proc/self/task/*/stat (field 19), if there is one. The kernel keeps the
/// first 15 bytes of a thread name.
pub fn nice_of_thread(name: &str) -> Option<i64> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
        // Fields after the parenthesised command: state is field 3, nice field 19.
        let rest = &stat[stat.rfind(')')? + 2..];
        return rest.split_whitespace().nth(16)?.parse().ok();
    }
    None
}
