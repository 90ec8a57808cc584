//! CPU time of the processes a benchmark runs, from `/proc`: on a machine
//! shared with other work, CPU seconds spent on a run vary far less than its
//! wall time, so both are reported.

/// Clock ticks per second of `/proc/*/stat` times (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// Fields of `/proc/PID/stat` after the command name, from `state` on.
fn stat_fields(pid: &str) -> Vec<u64> {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return Vec::new() };
    let Some((_, rest)) = stat.rsplit_once(')') else { return Vec::new() };
    rest.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect()
}

/// User and system CPU seconds process `pid` has used, all its threads
/// included (0 once it is gone).
pub fn of_process(pid: u32) -> f64 {
    let fields = stat_fields(&pid.to_string());
    // utime and stime are fields 14 and 15; `state` is field 3.
    fields.get(11..13).map_or(0.0, |t| (t[0] + t[1]) as f64 / TICKS_PER_SECOND)
}

/// CPU seconds of this process's children that have exited and been waited
/// for: the difference across one `Command::output` is that command's.
pub fn of_waited_children() -> f64 {
    let fields = stat_fields("self");
    // cutime and cstime are fields 16 and 17.
    fields.get(13..15).map_or(0.0, |t| (t[0] + t[1]) as f64 / TICKS_PER_SECOND)
}
