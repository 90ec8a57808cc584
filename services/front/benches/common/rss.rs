//! Peak resident memory of the processes a benchmark runs.

use std::sync::Mutex;

/// The highest peak RSS (`VmHWM`) seen per process name, in MiB.
static PEAKS: Mutex<Vec<(&'static str, f64)>> = Mutex::new(Vec::new());

/// Records the peak RSS of process `pid` under `name`; call it just before
/// stopping the process.
pub fn note(name: &'static str, pid: u32) {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return };
    let Some(kib) = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
    else {
        return;
    };
    let mut peaks = PEAKS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match peaks.iter_mut().find(|(n, _)| *n == name) {
        Some((_, peak)) => *peak = peak.max(kib / 1024.0),
        None => peaks.push((name, kib / 1024.0)),
    }
}

/// Prints each process's peak and returns them as a JSON object.
pub fn report() -> serde_json::Value {
    let peaks = PEAKS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    println!();
    for (name, mib) in peaks.iter() {
        println!("{name:<24} peak RSS {mib:>8.1} MiB");
    }
    peaks.iter().map(|(name, mib)| ((*name).to_owned(), serde_json::json!((mib * 10.0).round() / 10.0))).collect()
}
