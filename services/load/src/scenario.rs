//! Scenario files: ghz's JSON config format (`ghz --config FILE`), so the
//! same files drive ghz and this tool.
//!
//! Options ghz reads that matter here are honoured; options about TLS,
//! load or concurrency schedules and streaming are accepted with a warning;
//! options ghz uses to find descriptors (`proto`, `protoset`,
//! `import-paths`, `reflect-metadata`) are accepted silently because the
//! agentvfs descriptors are compiled in. A key ghz does not know is an error,
//! since ghz would silently ignore a misspelt `totl` and run its defaults.
//! Keys starting with `_` are comments.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value};

/// ghz's defaults.
const DEFAULT_TOTAL: u64 = 200;
const DEFAULT_CONCURRENCY: u64 = 50;
const DEFAULT_CONNECTIONS: u64 = 1;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Keys that only tell ghz where to find descriptors.
const DESCRIPTOR_KEYS: &[&str] = &["proto", "protoset", "import-paths", "reflect-metadata"];

/// ghz options this tool does not implement; a non-default value warns.
const IGNORED_KEYS: &[&str] = &[
    "cacert",
    "cert",
    "key",
    "skipTLS",
    "cname",
    "authority",
    "async",
    "concurrency-schedule",
    "concurrency-start",
    "concurrency-end",
    "concurrency-step",
    "concurrency-step-duration",
    "concurrency-max-duration",
    "load-schedule",
    "load-start",
    "load-end",
    "load-step",
    "load-step-duration",
    "load-max-duration",
    "binary",
    "binary-file",
    "stream-interval",
    "stream-call-duration",
    "stream-call-count",
    "stream-dynamic-messages",
    "output",
    "keepalive",
    "cpus",
    "debug",
    "enable-compression",
    "lb-strategy",
    "max-recv-message-size",
    "max-send-message-size",
    "count-errors",
    "disable-template-functions",
    "disable-template-data",
];

/// Keys read below.
const HANDLED_KEYS: &[&str] = &[
    "call",
    "host",
    "insecure",
    "data",
    "data-file",
    "metadata",
    "metadata-file",
    "concurrency",
    "connections",
    "total",
    "duration",
    "max-duration",
    "duration-stop",
    "timeout",
    "connect-timeout",
    "rps",
    "qps",
    "skipFirst",
    "format",
    "name",
    "tags",
];

/// What happens to calls still in flight when `duration` runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationStop {
    /// Cancel them and leave them out of the report (ghz's `close` and `ignore`).
    Drop,
    /// Let them finish and report them (ghz's `wait`).
    Wait,
}

/// Report format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// ghz's JSON report on one line.
    Json,
    /// ghz's JSON report, indented.
    Pretty,
    /// A short human-readable table.
    Summary,
}

/// One parsed scenario with command-line overrides applied.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub call: String,
    pub host: Option<String>,
    pub insecure: bool,
    /// The request messages, sent round-robin (ghz's array form); never empty.
    pub data: Vec<Value>,
    pub metadata: BTreeMap<String, String>,
    pub concurrency: u64,
    pub connections: u64,
    /// Ignored when `duration` is set, as in ghz.
    pub total: u64,
    pub duration: Option<Duration>,
    pub max_duration: Option<Duration>,
    pub duration_stop: DurationStop,
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub rps: u64,
    pub skip_first: u64,
    pub format: Format,
    pub name: Option<String>,
    pub tags: BTreeMap<String, String>,
    /// Things accepted but not honoured, for the user to see.
    pub warnings: Vec<String>,
}

/// Command-line settings that replace the scenario's.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub host: Option<String>,
    pub concurrency: Option<u64>,
    pub connections: Option<u64>,
    pub total: Option<u64>,
    pub duration: Option<Duration>,
    pub metadata: Vec<(String, String)>,
    pub format: Option<Format>,
}

impl Scenario {
    /// Reads and validates the file at `path`, then applies `overrides`.
    pub fn load(path: &Path, overrides: &Overrides) -> Result<Scenario, String> {
        let text = std::fs::read_to_string(path).map_err(|error| format!("cannot read: {error}"))?;
        let value: Value = serde_json::from_str(&text).map_err(|error| format!("not valid JSON: {error}"))?;
        let Value::Object(config) = value else {
            return Err("a ghz config must be a JSON object".into());
        };
        let base = path.parent().unwrap_or(Path::new("."));
        let mut scenario = Scenario::from_config(&config, base)?;
        scenario.apply(overrides);
        scenario.validate()?;
        Ok(scenario)
    }

    fn from_config(config: &Map<String, Value>, base: &Path) -> Result<Scenario, String> {
        let mut warnings = Vec::new();
        for (key, value) in config {
            if key.starts_with('_') || HANDLED_KEYS.contains(&key.as_str()) || DESCRIPTOR_KEYS.contains(&key.as_str()) {
                continue;
            }
            if IGNORED_KEYS.contains(&key.as_str()) {
                if !is_default(value) {
                    warnings.push(format!("`{key}` is not supported and is ignored"));
                }
                continue;
            }
            return Err(format!("unknown ghz option `{key}`"));
        }

        let call = string(config, "call")?.ok_or("`call` is missing (e.g. \"agentvfs.v1.FileSystem.Read\")")?;
        let data = match (config.get("data"), string(config, "data-file")?) {
            (Some(_), Some(_)) => return Err("set either `data` or `data-file`, not both".into()),
            (Some(data), None) => data.clone(),
            (None, Some(file)) => read_json(&base.join(file), "data-file")?,
            (None, None) => Value::Object(Map::new()),
        };
        let data = match data {
            Value::Object(_) => vec![data],
            Value::Array(items) if items.is_empty() => return Err("`data` must not be an empty array".into()),
            Value::Array(items) if items.iter().all(Value::is_object) => items,
            Value::Array(_) => return Err("every element of a `data` array must be an object".into()),
            _ => return Err("`data` must be an object or an array of objects".into()),
        };
        let metadata = match (config.get("metadata"), string(config, "metadata-file")?) {
            (Some(_), Some(_)) => return Err("set either `metadata` or `metadata-file`, not both".into()),
            (Some(metadata), None) => string_map(metadata, "metadata")?,
            (None, Some(file)) => string_map(&read_json(&base.join(file), "metadata-file")?, "metadata-file")?,
            (None, None) => BTreeMap::new(),
        };
        let duration_stop = match string(config, "duration-stop")?.as_deref() {
            None | Some("close" | "ignore") => DurationStop::Drop,
            Some("wait") => DurationStop::Wait,
            Some(other) => return Err(format!("`duration-stop` must be close, ignore or wait, not {other:?}")),
        };
        let format = match string(config, "format")?.as_deref() {
            None | Some("summary") => Format::Summary,
            Some("json") => Format::Json,
            Some("pretty") => Format::Pretty,
            Some(other) => {
                warnings.push(format!("report format {other:?} is not supported; printing the summary"));
                Format::Summary
            }
        };
        let rps = match (integer(config, "rps")?, integer(config, "qps")?) {
            (Some(rps), _) | (None, Some(rps)) => rps,
            (None, None) => 0,
        };
        Ok(Scenario {
            call,
            host: string(config, "host")?.filter(|host| !host.is_empty()),
            insecure: boolean(config, "insecure")?.unwrap_or(false),
            data,
            metadata,
            concurrency: integer(config, "concurrency")?.unwrap_or(DEFAULT_CONCURRENCY),
            connections: integer(config, "connections")?.unwrap_or(DEFAULT_CONNECTIONS),
            total: integer(config, "total")?.unwrap_or(DEFAULT_TOTAL),
            duration: duration(config, "duration")?,
            max_duration: duration(config, "max-duration")?,
            duration_stop,
            timeout: duration(config, "timeout")?.unwrap_or(DEFAULT_TIMEOUT),
            connect_timeout: duration(config, "connect-timeout")?.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            rps,
            skip_first: integer(config, "skipFirst")?.unwrap_or(0),
            format,
            name: string(config, "name")?.filter(|name| !name.is_empty()),
            tags: match config.get("tags") {
                Some(tags) => string_map(tags, "tags")?,
                None => BTreeMap::new(),
            },
            warnings,
        })
    }

    fn apply(&mut self, overrides: &Overrides) {
        if let Some(host) = &overrides.host {
            self.host = Some(host.clone());
        }
        if let Some(concurrency) = overrides.concurrency {
            self.concurrency = concurrency;
        }
        if let Some(connections) = overrides.connections {
            self.connections = connections;
        }
        // An explicit count on the command line means "this many calls",
        // even for a scenario written with a duration.
        if let Some(total) = overrides.total {
            self.total = total;
            self.duration = None;
        }
        if let Some(duration) = overrides.duration {
            self.duration = Some(duration);
        }
        for (key, value) in &overrides.metadata {
            self.metadata.insert(key.clone(), value.clone());
        }
        if let Some(format) = overrides.format {
            self.format = format;
        }
    }

    /// ghz's own rules, so a scenario that passes here also runs under ghz.
    fn validate(&mut self) -> Result<(), String> {
        if self.concurrency == 0 {
            return Err("`concurrency` must be at least 1".into());
        }
        if self.connections == 0 {
            return Err("`connections` must be at least 1".into());
        }
        if self.connections > self.concurrency {
            return Err(format!(
                "`concurrency` ({}) cannot be less than `connections` ({})",
                self.concurrency, self.connections
            ));
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            self.duration = None;
        }
        if self.max_duration.is_some_and(|d| d.is_zero()) {
            self.max_duration = None;
        }
        if self.duration.is_none() {
            if self.total == 0 {
                return Err("`total` must be at least 1 when no `duration` is set".into());
            }
            if self.total < self.concurrency {
                return Err(format!(
                    "`total` ({}) cannot be less than `concurrency` ({})",
                    self.total, self.concurrency
                ));
            }
        }
        if self.timeout.is_zero() {
            self.timeout = DEFAULT_TIMEOUT;
        }
        if self.connect_timeout.is_zero() {
            self.connect_timeout = DEFAULT_CONNECT_TIMEOUT;
        }
        let lowered: BTreeMap<String, String> = std::mem::take(&mut self.metadata)
            .into_iter()
            .map(|(key, value)| (key.to_ascii_lowercase(), value))
            .collect();
        self.metadata = lowered;
        Ok(())
    }

    /// Whether `total` bounds the run (rather than `duration`).
    pub fn bounded_by_count(&self) -> bool {
        self.duration.is_none()
    }
}

/// Whether a ghz option has its default (or an empty) value, so that
/// ignoring it changes nothing.
fn is_default(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(yes) => !yes,
        Value::Number(number) => number.as_f64() == Some(0.0),
        Value::String(text) => matches!(text.as_str(), "" | "0" | "const" | "0s"),
        Value::Array(items) => items.is_empty(),
        Value::Object(fields) => fields.is_empty(),
    }
}

fn read_json(path: &Path, key: &str) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("`{key}` {}: {error}", path.display()))?;
    serde_json::from_str(&text).map_err(|error| format!("`{key}` {} is not valid JSON: {error}", path.display()))
}

fn string(config: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(format!("`{key}` must be a string")),
    }
}

fn boolean(config: &Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(yes)) => Ok(Some(*yes)),
        Some(_) => Err(format!("`{key}` must be true or false")),
    }
}

fn integer(config: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or_else(|| format!("`{key}` must be a non-negative integer")),
    }
}

fn duration(config: &Map<String, Value>, key: &str) -> Result<Option<Duration>, String> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if text.is_empty() => Ok(None),
        Some(Value::String(text)) => parse_duration(text).map(Some).map_err(|error| format!("`{key}`: {error}")),
        Some(_) => Err(format!("`{key}` must be a duration string such as \"10s\" or \"1m30s\"")),
    }
}

fn string_map(value: &Value, key: &str) -> Result<BTreeMap<String, String>, String> {
    let Value::Object(fields) = value else {
        return Err(format!("`{key}` must be an object of strings"));
    };
    fields
        .iter()
        .map(|(name, value)| match value {
            Value::String(text) => Ok((name.clone(), text.clone())),
            _ => Err(format!("`{key}.{name}` must be a string")),
        })
        .collect()
}

/// Parses a Go duration (`time.ParseDuration`): a sequence of decimal
/// numbers, each with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), such as
/// `"300ms"`, `"1.5h"` or `"2h45m"`; `"0"` is zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("invalid duration {text:?} (use e.g. \"10s\", \"500ms\", \"1m30s\")");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(invalid)?;
        let number: f64 = rest[..number_len].parse().map_err(|_| invalid())?;
        rest = &rest[number_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let nanos_per_unit = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(invalid()),
        };
        rest = &rest[unit_len..];
        total += number * nanos_per_unit;
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return Err(invalid());
    }
    Ok(Duration::from_nanos(total.round() as u64))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A valid scenario with ghz's defaults, for other modules' tests.
    pub(crate) fn sample() -> Scenario {
        scenario(serde_json::json!({"call": "agentvfs.v1.FileSystem.Read"})).expect("valid")
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "10", "s", "10x", "-1s", "1s2"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} must be rejected");
        }
    }

    fn scenario(config: Value) -> Result<Scenario, String> {
        let Value::Object(config) = config else { panic!("object") };
        let mut scenario = Scenario::from_config(&config, Path::new("."))?;
        scenario.validate()?;
        Ok(scenario)
    }

    #[test]
    fn defaults_follow_ghz() {
        let s = scenario(serde_json::json!({"call": "agentvfs.v1.FileSystem.Read"})).expect("valid");
        assert_eq!((s.total, s.concurrency, s.connections), (200, 50, 1));
        assert_eq!(s.timeout, Duration::from_secs(20));
        assert_eq!(s.data, vec![serde_json::json!({})]);
        assert!(s.bounded_by_count());
    }

    #[test]
    fn ghz_rules_are_enforced() {
        let call = "agentvfs.v1.FileSystem.Read";
        assert!(scenario(serde_json::json!({"call": call, "totl": 5})).expect_err("typo").contains("totl"));
        assert!(scenario(serde_json::json!({"call": call, "concurrency": 2, "connections": 3})).is_err());
        assert!(scenario(serde_json::json!({"call": call, "total": 5, "concurrency": 10})).is_err());
        assert!(scenario(serde_json::json!({"call": call, "total": 5, "concurrency": 10, "duration": "1s"})).is_ok());
        assert!(scenario(serde_json::json!({"call": call, "data": []})).is_err());
        assert!(scenario(serde_json::json!({"call": call, "data": "x"})).is_err());
        assert!(scenario(serde_json::json!({"call": call, "metadata": {"a": 1}})).is_err());
        assert!(scenario(serde_json::json!({"total": 1})).is_err());
    }

    #[test]
    fn unsupported_options_warn_only_when_set() {
        let call = "agentvfs.v1.FileSystem.Read";
        let quiet = scenario(serde_json::json!({"call": call, "async": false, "proto": "x.proto", "_note": "hi"}))
            .expect("valid");
        assert!(quiet.warnings.is_empty(), "{:?}", quiet.warnings);
        let loud = scenario(serde_json::json!({"call": call, "load-schedule": "step"})).expect("valid");
        assert_eq!(loud.warnings.len(), 1);
    }

    #[test]
    fn overrides_replace_the_file() {
        let mut s = scenario(serde_json::json!({
            "call": "agentvfs.v1.FileSystem.Read", "duration": "10s", "metadata": {"a": "1"}
        }))
        .expect("valid");
        s.apply(&Overrides {
            total: Some(10),
            concurrency: Some(2),
            metadata: vec![("Authorization".into(), "Bearer t".into())],
            ..Overrides::default()
        });
        s.validate().expect("valid");
        assert!(s.bounded_by_count());
        assert_eq!((s.total, s.concurrency), (10, 2));
        assert_eq!(s.metadata["authorization"], "Bearer t");
        assert_eq!(s.metadata["a"], "1");
    }
}
