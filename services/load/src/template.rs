//! ghz call templates: the `{{.RequestNumber}}`-style placeholders that ghz
//! expands in a scenario's `data` and `metadata` before every call.
//!
//! ghz runs Go's `text/template` with its call data and a few functions. Only
//! the forms scenarios actually use are supported, and anything else is
//! rejected when the scenario is loaded, so `check` catches a typo instead of
//! every call sending the literal text.

use std::hash::{BuildHasher, RandomState};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// The per-call values ghz exposes as `{{.Name}}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    WorkerId,
    RequestNumber,
    FullyQualifiedName,
    MethodName,
    ServiceName,
    InputName,
    OutputName,
    IsClientStreaming,
    IsServerStreaming,
    Timestamp,
    TimestampUnix,
    TimestampUnixMilli,
    TimestampUnixNano,
    Uuid,
}

const FIELDS: &[(&str, Field)] = &[
    ("WorkerID", Field::WorkerId),
    ("RequestNumber", Field::RequestNumber),
    ("FullyQualifiedName", Field::FullyQualifiedName),
    ("MethodName", Field::MethodName),
    ("ServiceName", Field::ServiceName),
    ("InputName", Field::InputName),
    ("OutputName", Field::OutputName),
    ("IsClientStreaming", Field::IsClientStreaming),
    ("IsServerStreaming", Field::IsServerStreaming),
    ("Timestamp", Field::Timestamp),
    ("TimestampUnix", Field::TimestampUnix),
    ("TimestampUnixMilli", Field::TimestampUnixMilli),
    ("TimestampUnixNano", Field::TimestampUnixNano),
    ("UUID", Field::Uuid),
];

const SUPPORTED: &str = "{{.WorkerID}}, {{.RequestNumber}}, {{.UUID}}, {{.Timestamp}}, {{.TimestampUnix}}, \
     {{.TimestampUnixMilli}}, {{.TimestampUnixNano}}, {{.FullyQualifiedName}}, {{.MethodName}}, {{.ServiceName}}, \
     {{.InputName}}, {{.OutputName}}, {{.IsClientStreaming}}, {{.IsServerStreaming}}, {{newUUID}}, \
     {{randomString N}} and {{randomInt MIN MAX}}";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Field(Field),
    NewUuid,
    RandomString(i64),
    RandomInt(i64, i64),
}

/// One string with its placeholders parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    /// Parses `text`; an unknown or malformed placeholder is an error.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            let mut literal = rest[..open].to_owned();
            let after = &rest[open + 2..];
            let close = after.find("}}").ok_or_else(|| format!("unclosed `{{{{` in {text:?}"))?;
            let mut inner = &after[..close];
            rest = &after[close + 2..];
            // `{{-` and `-}}` trim the whitespace around the action, as in Go.
            if let Some(trimmed) = inner.strip_prefix('-').filter(|s| s.starts_with(char::is_whitespace)) {
                literal.truncate(literal.trim_end().len());
                inner = trimmed;
            }
            let trim_after = inner.strip_suffix('-').filter(|s| s.ends_with(char::is_whitespace));
            if let Some(trimmed) = trim_after {
                inner = trimmed;
                rest = rest.trim_start();
            }
            if !literal.is_empty() {
                parts.push(Part::Text(literal));
            }
            parts.push(parse_action(inner.trim())?);
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        Ok(Template { parts })
    }

    /// Whether the template has no placeholder at all.
    pub fn is_literal(&self) -> bool {
        self.parts.iter().all(|part| matches!(part, Part::Text(_)))
    }

    /// The text with every placeholder replaced by this call's value.
    pub fn render(&self, call: &mut CallData<'_>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Field(field) => out.push_str(&call.field(*field)),
                Part::NewUuid => out.push_str(&call.rng.uuid()),
                Part::RandomString(length) => out.push_str(&call.rng.string(*length)),
                Part::RandomInt(min, max) => out.push_str(&call.rng.int(*min, *max).to_string()),
            }
        }
        out
    }
}

fn parse_action(action: &str) -> Result<Part, String> {
    let words: Vec<&str> = action.split_whitespace().collect();
    let unsupported = || format!("unsupported template `{{{{{action}}}}}`; supported are {SUPPORTED}");
    let number = |word: &str| word.parse::<i64>().map_err(|_| unsupported());
    match words.as_slice() {
        [name] if name.starts_with('.') => FIELDS
            .iter()
            .find(|(known, _)| *known == &name[1..])
            .map(|(_, field)| Part::Field(*field))
            .ok_or_else(unsupported),
        ["newUUID"] => Ok(Part::NewUuid),
        ["randomString", length] => Ok(Part::RandomString(number(length)?)),
        ["randomInt", min, max] => {
            let (min, max) = (number(min)?, number(max)?);
            if max <= min {
                return Err(format!("`{{{{{action}}}}}`: MAX must be greater than MIN"));
            }
            Ok(Part::RandomInt(min, max))
        }
        _ => Err(unsupported()),
    }
}

/// A JSON value whose strings (keys included) may hold placeholders.
#[derive(Debug, Clone)]
pub enum JsonTemplate {
    /// No placeholder anywhere below: used as is.
    Literal(Value),
    String(Template),
    Array(Vec<JsonTemplate>),
    Object(Vec<(Template, JsonTemplate)>),
}

impl JsonTemplate {
    /// Parses every string in `value`.
    pub fn parse(value: &Value) -> Result<JsonTemplate, String> {
        let parsed = match value {
            Value::String(text) => JsonTemplate::String(Template::parse(text)?),
            Value::Array(items) => {
                JsonTemplate::Array(items.iter().map(JsonTemplate::parse).collect::<Result<_, _>>()?)
            }
            Value::Object(fields) => JsonTemplate::Object(
                fields
                    .iter()
                    .map(|(key, value)| Ok((Template::parse(key)?, JsonTemplate::parse(value)?)))
                    .collect::<Result<_, String>>()?,
            ),
            other => JsonTemplate::Literal(other.clone()),
        };
        Ok(if parsed.is_literal() { JsonTemplate::Literal(value.clone()) } else { parsed })
    }

    /// Whether rendering always gives the same value.
    pub fn is_literal(&self) -> bool {
        match self {
            JsonTemplate::Literal(_) => true,
            JsonTemplate::String(template) => template.is_literal(),
            JsonTemplate::Array(items) => items.iter().all(JsonTemplate::is_literal),
            JsonTemplate::Object(fields) => fields.iter().all(|(key, value)| key.is_literal() && value.is_literal()),
        }
    }

    /// The value with every placeholder replaced by this call's value.
    pub fn render(&self, call: &mut CallData<'_>) -> Value {
        match self {
            JsonTemplate::Literal(value) => value.clone(),
            JsonTemplate::String(template) => Value::String(template.render(call)),
            JsonTemplate::Array(items) => Value::Array(items.iter().map(|item| item.render(call)).collect()),
            JsonTemplate::Object(fields) => {
                Value::Object(fields.iter().map(|(key, value)| (key.render(call), value.render(call))).collect())
            }
        }
    }
}

/// The names of the called method, as ghz exposes them to templates.
#[derive(Debug, Clone, Default)]
pub struct MethodNames {
    pub fully_qualified: String,
    pub method: String,
    pub service: String,
    pub input: String,
    pub output: String,
    pub client_streaming: bool,
    pub server_streaming: bool,
}

/// The values of one call. `{{.UUID}}` and the timestamps are fixed per
/// call, so a template that names them twice gets the same value twice.
#[derive(Debug)]
pub struct CallData<'a> {
    worker_id: &'a str,
    request_number: u64,
    method: &'a MethodNames,
    now: SystemTime,
    uuid: Option<String>,
    rng: &'a mut Rng,
}

impl<'a> CallData<'a> {
    pub fn new(worker_id: &'a str, request_number: u64, method: &'a MethodNames, rng: &'a mut Rng) -> CallData<'a> {
        CallData { worker_id, request_number, method, now: SystemTime::now(), uuid: None, rng }
    }

    fn field(&mut self, field: Field) -> String {
        let since_epoch = self.now.duration_since(UNIX_EPOCH).unwrap_or_default();
        match field {
            Field::WorkerId => self.worker_id.to_owned(),
            Field::RequestNumber => self.request_number.to_string(),
            Field::FullyQualifiedName => self.method.fully_qualified.clone(),
            Field::MethodName => self.method.method.clone(),
            Field::ServiceName => self.method.service.clone(),
            Field::InputName => self.method.input.clone(),
            Field::OutputName => self.method.output.clone(),
            Field::IsClientStreaming => self.method.client_streaming.to_string(),
            Field::IsServerStreaming => self.method.server_streaming.to_string(),
            Field::Timestamp => crate::report::rfc3339(self.now),
            Field::TimestampUnix => since_epoch.as_secs().to_string(),
            Field::TimestampUnixMilli => since_epoch.as_millis().to_string(),
            Field::TimestampUnixNano => since_epoch.as_nanos().to_string(),
            Field::Uuid => self.uuid.get_or_insert_with(|| self.rng.uuid()).clone(),
        }
    }
}

/// A small non-cryptographic generator (SplitMix64) for template values;
/// each caller owns one, so generating never contends on a lock.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from the process's random hasher keys.
    pub fn seeded(stream: u64) -> Rng {
        Rng(RandomState::new().hash_one((stream, SystemTime::now())))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A random version-4 UUID in its usual hex form, as ghz generates.
    pub fn uuid(&mut self) -> String {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.next_u64().to_be_bytes());
        bytes[8..].copy_from_slice(&self.next_u64().to_be_bytes());
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
    }

    /// Random letters and digits; a length of 0 or less picks one in 2..=16
    /// as ghz does.
    pub fn string(&mut self, length: i64) -> String {
        const CHARSET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let length = if length <= 0 { 2 + self.below(15) } else { length.unsigned_abs() };
        (0..length).map(|_| char::from(CHARSET[self.below(CHARSET.len() as u64) as usize])).collect()
    }

    /// A random integer in `min..max`.
    pub fn int(&mut self, min: i64, max: i64) -> i64 {
        let span = max.abs_diff(min);
        min.wrapping_add_unsigned(self.below(span))
    }

    fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 { 0 } else { self.next_u64() % bound }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names() -> MethodNames {
        MethodNames {
            fully_qualified: "agentvfs.v1.FileSystem.Write".into(),
            method: "Write".into(),
            service: "agentvfs.v1.FileSystem".into(),
            input: "agentvfs.v1.WriteRequest".into(),
            output: "agentvfs.v1.WriteResponse".into(),
            client_streaming: false,
            server_streaming: false,
        }
    }

    fn render(text: &str, number: u64) -> String {
        let names = names();
        let mut rng = Rng::seeded(0);
        Template::parse(text).expect("parses").render(&mut CallData::new("g1c0", number, &names, &mut rng))
    }

    #[test]
    fn fields_expand() {
        assert_eq!(render("/load/{{.WorkerID}}/{{ .RequestNumber }}.txt", 7), "/load/g1c0/7.txt");
        assert_eq!(render("{{.MethodName}} on {{.ServiceName}}", 0), "Write on agentvfs.v1.FileSystem");
        assert_eq!(render("no placeholders", 0), "no placeholders");
        let unix: u64 = render("{{.TimestampUnix}}", 0).parse().expect("a number");
        assert!(unix > 1_600_000_000);
    }

    #[test]
    fn uuid_is_random_hex_and_fixed_per_call() {
        let both = render("{{.UUID}} {{.UUID}}", 0);
        let (first, second) = both.split_once(' ').expect("two values");
        assert_eq!(first, second);
        assert_eq!(first.len(), 36);
        assert!(first.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
        assert_eq!(&first[14..15], "4");
        assert_ne!(render("{{.UUID}}", 0), render("{{.UUID}}", 0));
        let fresh = render("{{newUUID}} {{newUUID}}", 0);
        let (a, b) = fresh.split_once(' ').expect("two values");
        assert_ne!(a, b);
    }

    #[test]
    fn functions_respect_their_bounds() {
        assert_eq!(render("{{randomString 12}}", 0).len(), 12);
        for _ in 0..100 {
            let value: i64 = render("{{randomInt 5 8}}", 0).parse().expect("a number");
            assert!((5..8).contains(&value));
            let length = render("{{randomString 0}}", 0).len();
            assert!((2..=16).contains(&length));
        }
    }

    #[test]
    fn trim_markers_trim_whitespace() {
        assert_eq!(render("a  {{- .RequestNumber -}}  b", 3), "a3b");
    }

    #[test]
    fn unknown_and_malformed_placeholders_are_rejected() {
        for bad in ["{{.Nope}}", "{{sprig}}", "{{.RequestNumber", "{{randomInt 3 1}}", "{{randomString x}}"] {
            assert!(Template::parse(bad).is_err(), "{bad} must be rejected");
        }
    }

    #[test]
    fn json_templates_render_strings_and_keys() {
        let template = JsonTemplate::parse(&json!({
            "path": "/f/{{.RequestNumber}}",
            "n": 3,
            "list": ["{{.WorkerID}}", true],
            "{{.MethodName}}": null
        }))
        .expect("parses");
        assert!(!template.is_literal());
        let names = names();
        let mut rng = Rng::seeded(0);
        let value = template.render(&mut CallData::new("g0c0", 9, &names, &mut rng));
        assert_eq!(value, json!({"path": "/f/9", "n": 3, "list": ["g0c0", true], "Write": null}));
        assert!(JsonTemplate::parse(&json!({"a": ["b", 1]})).expect("parses").is_literal());
    }
}
