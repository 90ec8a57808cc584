//! Results: what each caller records, and the report in ghz's JSON shape
//! (so tools that read ghz reports read these) or as a short summary.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;
use tonic::Code;

use crate::scenario::Scenario;

/// Percentiles of the latency distribution, in per mille (exact, unlike
/// floating-point percentages): ghz's plus 99.9.
const PER_MILLE: &[u64] = &[100, 250, 500, 750, 900, 950, 990, 999];

/// Distinct error messages the summary lists.
const SUMMARY_ERRORS: usize = 10;

/// Metadata whose values are secrets and must not be copied into a report.
const SECRET_HINTS: &[&str] = &["authorization", "cookie", "token", "secret", "password", "api-key"];

/// What one caller (or all of them, merged) saw.
#[derive(Debug, Default)]
pub struct Stats {
    pub count: u64,
    pub latency_sum: u128,
    /// Latencies of successful calls in nanoseconds; ghz computes the
    /// distribution, fastest and slowest from successes only.
    pub ok_latencies: Vec<u64>,
    pub status_codes: BTreeMap<&'static str, u64>,
    pub errors: BTreeMap<String, u64>,
}

impl Stats {
    pub fn record(&mut self, latency: Duration, result: Result<(), &tonic::Status>) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.count += 1;
        self.latency_sum += u128::from(nanos);
        match result {
            Ok(()) => {
                self.ok_latencies.push(nanos);
                *self.status_codes.entry(code_name(Code::Ok)).or_default() += 1;
            }
            Err(status) => {
                *self.status_codes.entry(code_name(status.code())).or_default() += 1;
                *self.errors.entry(error_text(status)).or_default() += 1;
            }
        }
    }

    pub fn merge(&mut self, other: Stats) {
        self.count += other.count;
        self.latency_sum += other.latency_sum;
        self.ok_latencies.extend(other.ok_latencies);
        for (code, count) in other.status_codes {
            *self.status_codes.entry(code).or_default() += count;
        }
        for (error, count) in other.errors {
            *self.errors.entry(error).or_default() += count;
        }
    }
}

/// Why the run ended, in ghz's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EndReason {
    /// Every call was made.
    Normal,
    /// The duration ran out.
    Timeout,
    /// Interrupted (Ctrl-C).
    Cancel,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub end_reason: EndReason,
    pub date: String,
    pub options: Value,
    pub count: u64,
    pub total: u64,
    pub average: u64,
    pub fastest: u64,
    pub slowest: u64,
    pub rps: f64,
    pub error_distribution: BTreeMap<String, u64>,
    pub status_code_distribution: BTreeMap<String, u64>,
    pub latency_distribution: Vec<LatencyPoint>,
    pub histogram: Vec<Bucket>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
pub struct LatencyPoint {
    /// A JSON integer where the percentile is whole, as ghz writes it.
    pub percentage: Value,
    /// Nanoseconds.
    pub latency: u64,
}

#[derive(Debug, Serialize)]
pub struct Bucket {
    /// Upper bound in seconds.
    pub mark: f64,
    pub count: u64,
    pub frequency: f64,
}

impl Report {
    pub fn new(scenario: &Scenario, mut stats: Stats, elapsed: Duration, end_reason: EndReason) -> Report {
        stats.ok_latencies.sort_unstable();
        let ok = &stats.ok_latencies;
        let total = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let average = match stats.count {
            0 => 0,
            count => u64::try_from(stats.latency_sum / u128::from(count)).unwrap_or(u64::MAX),
        };
        let rps = if elapsed.is_zero() { 0.0 } else { stats.count as f64 / elapsed.as_secs_f64() };
        Report {
            name: scenario.name.clone(),
            end_reason,
            date: rfc3339(SystemTime::now()),
            options: options(scenario),
            count: stats.count,
            total,
            average,
            fastest: ok.first().copied().unwrap_or(0),
            slowest: ok.last().copied().unwrap_or(0),
            rps,
            error_distribution: stats.errors,
            status_code_distribution: stats
                .status_codes
                .into_iter()
                .map(|(code, count)| (code.to_owned(), count))
                .collect(),
            latency_distribution: latency_distribution(ok),
            histogram: histogram(ok),
            tags: scenario.tags.clone(),
        }
    }

    /// The short human-readable form.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Summary:");
        if let Some(name) = &self.name {
            let _ = writeln!(out, "  Name:          {name}");
        }
        let _ = writeln!(out, "  Count:         {}", self.count);
        let _ = writeln!(out, "  Total:         {}", human(self.total));
        let _ = writeln!(out, "  Slowest:       {}", human(self.slowest));
        let _ = writeln!(out, "  Fastest:       {}", human(self.fastest));
        let _ = writeln!(out, "  Average:       {}", human(self.average));
        let _ = writeln!(out, "  Requests/sec:  {:.2}", self.rps);
        if !self.latency_distribution.is_empty() {
            let _ = writeln!(out, "\nLatency distribution:");
            for point in &self.latency_distribution {
                let _ = writeln!(out, "  {:>5} % in {}", point.percentage.to_string(), human(point.latency));
            }
        }
        let _ = writeln!(out, "\nStatus code distribution:");
        for (code, count) in &self.status_code_distribution {
            let _ = writeln!(out, "  [{code}]  {count} responses");
        }
        if !self.error_distribution.is_empty() {
            // Messages often name a path or an ID, so a long run can have
            // thousands of distinct ones; the JSON report keeps them all.
            let mut errors: Vec<(&String, &u64)> = self.error_distribution.iter().collect();
            errors.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
            let _ = writeln!(out, "\nError distribution:");
            for (error, count) in errors.iter().take(SUMMARY_ERRORS) {
                let _ = writeln!(out, "  [{count}]  {error}");
            }
            if errors.len() > SUMMARY_ERRORS {
                let rest: u64 = errors[SUMMARY_ERRORS..].iter().map(|(_, count)| **count).sum();
                let _ = writeln!(
                    out,
                    "  … {} more distinct errors ({rest} calls); see --format json",
                    errors.len() - SUMMARY_ERRORS
                );
            }
        }
        out
    }
}

/// ghz's rank rule: the value at ceil(p% of n), 1-based.
fn latency_distribution(sorted: &[u64]) -> Vec<LatencyPoint> {
    if sorted.is_empty() {
        return Vec::new();
    }
    PER_MILLE
        .iter()
        .map(|&per_mille| {
            let rank = (per_mille * sorted.len() as u64).div_ceil(1000);
            let latency = sorted[(rank as usize).clamp(1, sorted.len()) - 1];
            let percentage =
                if per_mille % 10 == 0 { Value::from(per_mille / 10) } else { Value::from(per_mille as f64 / 10.0) };
            LatencyPoint { percentage, latency }
        })
        .collect()
}

/// ghz's histogram: ten equal-width buckets from fastest to slowest.
fn histogram(sorted: &[u64]) -> Vec<Bucket> {
    let (Some(&fastest), Some(&slowest)) = (sorted.first(), sorted.last()) else {
        return Vec::new();
    };
    const BUCKETS: usize = 10;
    let width = (slowest - fastest) as f64 / BUCKETS as f64;
    let marks: Vec<f64> =
        (0..=BUCKETS).map(|i| if i == BUCKETS { slowest as f64 } else { fastest as f64 + width * i as f64 }).collect();
    let mut counts = vec![0u64; marks.len()];
    let mut bucket = 0;
    for &latency in sorted {
        while (latency as f64) > marks[bucket] && bucket < BUCKETS {
            bucket += 1;
        }
        counts[bucket] += 1;
    }
    marks
        .iter()
        .zip(counts)
        .map(|(&mark, count)| Bucket { mark: mark / 1e9, count, frequency: count as f64 / sorted.len() as f64 })
        .collect()
}

/// The effective options, in the shape of ghz's `options` (durations in
/// nanoseconds), with secret metadata values redacted.
fn options(scenario: &Scenario) -> Value {
    let nanos = |duration: std::time::Duration| u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    let metadata: serde_json::Map<String, Value> = scenario
        .metadata
        .iter()
        .map(|(key, value)| {
            let secret = SECRET_HINTS.iter().any(|hint| key.contains(hint));
            (key.clone(), Value::from(if secret { "<redacted>" } else { value.as_str() }))
        })
        .collect();
    let data = match scenario.data.as_slice() {
        [one] => one.clone(),
        many => Value::from(many.to_vec()),
    };
    let mut options = serde_json::json!({
        "host": scenario.host.clone().unwrap_or_default(),
        "call": scenario.call,
        "insecure": scenario.insecure,
        "concurrency": scenario.concurrency,
        "connections": scenario.connections,
        "timeout": nanos(scenario.timeout),
        "dial-timeout": nanos(scenario.connect_timeout),
        "data": data,
        "metadata": metadata,
        "binary": false,
        "CPUs": std::thread::available_parallelism().map_or(1, usize::from),
    });
    let fields = options.as_object_mut().expect("options is an object");
    match scenario.duration {
        Some(duration) => fields.insert("duration".into(), nanos(duration).into()),
        None => fields.insert("total".into(), scenario.total.into()),
    };
    if scenario.rps > 0 {
        fields.insert("rps".into(), scenario.rps.into());
    }
    if scenario.skip_first > 0 {
        fields.insert("skipFirst".into(), scenario.skip_first.into());
    }
    if let Some(name) = &scenario.name {
        fields.insert("name".into(), name.clone().into());
    }
    options
}

/// Go's name for a status code (`codes.Code.String()`), which ghz reports.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// An error as Go's gRPC prints it, which is how ghz keys its error
/// distribution.
fn error_text(status: &tonic::Status) -> String {
    format!("rpc error: code = {} desc = {}", code_name(status.code()), status.message())
}

/// `time` as RFC 3339 in UTC, to the second.
pub fn rfc3339(time: SystemTime) -> String {
    let seconds = time.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs());
    let (days, of_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", of_day / 3600, of_day % 3600 / 60, of_day % 60)
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, restricted to dates after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Nanoseconds in a unit a person reads at a glance.
fn human(nanos: u64) -> String {
    let value = nanos as f64;
    if value >= 1e9 {
        format!("{:.2} s", value / 1e9)
    } else if value >= 1e6 {
        format!("{:.2} ms", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.2} µs", value / 1e3)
    } else {
        format!("{nanos} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_rfc3339_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(1_767_225_599)), "2025-12-31T23:59:59Z");
    }

    #[test]
    fn percentiles_use_ghz_ranks() {
        let sorted: Vec<u64> = (1..=1000).collect();
        let points = latency_distribution(&sorted);
        let pairs: Vec<(String, u64)> = points.iter().map(|p| (p.percentage.to_string(), p.latency)).collect();
        assert_eq!(pairs[0], ("10".into(), 100));
        assert_eq!(pairs[2], ("50".into(), 500));
        assert_eq!(pairs[6], ("99".into(), 990));
        assert_eq!(pairs[7], ("99.9".into(), 999));
        assert_eq!(latency_distribution(&[7])[7].latency, 7);
        assert!(latency_distribution(&[]).is_empty());
    }

    #[test]
    fn histogram_counts_every_latency() {
        let sorted: Vec<u64> = (0..100).map(|i| i * 10).collect();
        let buckets = histogram(&sorted);
        assert_eq!(buckets.len(), 11);
        assert_eq!(buckets.iter().map(|b| b.count).sum::<u64>(), 100);
        assert_eq!(histogram(&[5, 5]).iter().map(|b| b.count).sum::<u64>(), 2);
    }

    #[test]
    fn the_summary_lists_the_most_frequent_errors() {
        let mut stats = Stats::default();
        for i in 0..30 {
            stats.record(Duration::from_millis(1), Err(&tonic::Status::not_found(format!("/f/{i} was not found"))));
        }
        for _ in 0..5 {
            stats.record(Duration::from_millis(1), Err(&tonic::Status::resource_exhausted("slow down")));
        }
        let scenario = crate::scenario::tests::sample();
        let report = Report::new(&scenario, stats, Duration::from_secs(1), EndReason::Normal);
        assert_eq!(report.error_distribution.len(), 31);
        let summary = report.summary();
        assert!(summary.contains("[5]  rpc error: code = ResourceExhausted desc = slow down"), "{summary}");
        assert!(summary.contains("21 more distinct errors (21 calls)"), "{summary}");
        assert_eq!(summary.matches("rpc error").count(), SUMMARY_ERRORS);
    }

    #[test]
    fn secret_metadata_is_redacted_from_options() {
        let mut scenario = crate::scenario::tests::sample();
        scenario.metadata.insert("authorization".into(), "Bearer hunter2".into());
        scenario.metadata.insert("x-agentvfs-session".into(), "s1".into());
        let report = Report::new(&scenario, Stats::default(), Duration::from_secs(1), EndReason::Normal);
        let text = serde_json::to_string(&report).expect("serializes");
        assert!(!text.contains("hunter2"), "{text}");
        assert_eq!(report.options["metadata"]["x-agentvfs-session"], "s1");
    }

    #[test]
    fn stats_follow_ghz() {
        let mut stats = Stats::default();
        stats.record(Duration::from_millis(2), Ok(()));
        stats.record(Duration::from_millis(4), Err(&tonic::Status::not_found("no such file")));
        let mut merged = Stats::default();
        merged.merge(stats);
        assert_eq!(merged.count, 2);
        assert_eq!(merged.status_codes["OK"], 1);
        assert_eq!(merged.status_codes["NotFound"], 1);
        assert_eq!(merged.errors["rpc error: code = NotFound desc = no such file"], 1);
        assert_eq!(merged.ok_latencies, vec![2_000_000]);
    }
}
