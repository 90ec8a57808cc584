//! JSON Schemas of proto messages and enums, in the shape proto3 JSON gives
//! them (the shape `prost-reflect` reads and writes): one component per
//! message or enum, named by its full proto name.
//!
//! - A field is a property named by its JSON name (lowerCamelCase). No field
//!   is `required`: proto3 JSON leaves out fields at their default.
//! - `repeated` is an array; a `map` an object whose values have the map's
//!   value schema (keys are strings in JSON whatever the key type).
//! - 32-bit integers are integers; 64-bit integers are decimal strings;
//!   `bytes` are base64 strings; an enum is a string enum of its value names.
//! - A `oneof` allows at most one of its fields in an object; an `optional`
//!   field says that sending its default differs from leaving it out.
//! - The well-known types have their own JSON forms (a `Timestamp` is an
//!   RFC 3339 string, a `Duration` `"1.5s"`, an `Any` an object with `@type`,
//!   a wrapper the bare value, …).

use std::collections::BTreeMap;

use prost_reflect::{EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor, OneofDescriptor};
use serde_json::{Value, json};

use super::comments::Comments;
use crate::grep::query::MAX_HEAD_LIMIT;

/// Where the document keeps its schemas.
pub(super) const SCHEMAS: &str = "#/components/schemas/";

/// A `$ref` to the component schema `name`.
pub(super) fn reference(name: &str) -> Value {
    json!({ "$ref": format!("{SCHEMAS}{name}") })
}

/// A message or an enum that becomes a component schema.
#[derive(Debug)]
pub(super) enum Definition {
    Message(MessageDescriptor),
    Enum(EnumDescriptor),
}

/// Every message and enum that `roots` use, themselves included, directly
/// or through their fields, by full name. Map entries are not components:
/// a map is an object in JSON.
pub(super) fn reachable(roots: impl IntoIterator<Item = MessageDescriptor>) -> BTreeMap<String, Definition> {
    let mut found = BTreeMap::new();
    let mut pending: Vec<MessageDescriptor> = roots.into_iter().collect();
    while let Some(message) = pending.pop() {
        if found.contains_key(message.full_name()) {
            continue;
        }
        found.insert(message.full_name().to_owned(), Definition::Message(message.clone()));
        if well_known(&message).is_some() {
            continue;
        }
        for field in message.fields() {
            match element_kind(&field) {
                Kind::Message(used) => pending.push(used),
                Kind::Enum(used) => {
                    found.insert(used.full_name().to_owned(), Definition::Enum(used));
                }
                _ => {}
            }
        }
    }
    found
}

/// The component schema of `definition`, its comments as descriptions.
pub(super) fn component(definition: &Definition, comments: &Comments) -> Value {
    match definition {
        Definition::Message(message) => message_schema(message, comments),
        Definition::Enum(enumeration) => enum_schema(enumeration, comments),
    }
}

/// The schema of `field`'s value, its comment and constraints included:
/// for a property, or for a query parameter that carries the field.
pub(super) fn field_schema(field: &FieldDescriptor, comments: &Comments) -> Value {
    let element = kind_schema(&element_kind(field));
    let mut schema = if field.is_map() {
        json!({ "type": "object", "additionalProperties": element })
    } else if field.is_list() {
        json!({ "type": "array", "items": element })
    } else {
        element
    };
    if let Some(bound) = fixed_bound(field) {
        bound.apply(&mut schema);
    }
    let comment = comments.of(&field.parent_file(), field.path()).unwrap_or_default();
    describe(&mut schema, &[comment, presence_note(field).as_deref().unwrap_or_default()]);
    schema
}

/// The kind of a field's elements: of its values for a map, of its items
/// for a list.
fn element_kind(field: &FieldDescriptor) -> Kind {
    match field.kind() {
        Kind::Message(entry) if field.is_map() => entry.map_entry_value_field().kind(),
        kind => kind,
    }
}

fn message_schema(message: &MessageDescriptor, comments: &Comments) -> Value {
    if let Some(schema) = well_known(message) {
        return schema;
    }
    let properties: serde_json::Map<String, Value> =
        message.fields().map(|field| (field.json_name().to_owned(), field_schema(&field, comments))).collect();
    let mut schema = json!({ "type": "object", "properties": properties });
    let oneofs: Vec<Value> = message.oneofs().filter(|oneof| !oneof.is_synthetic()).map(at_most_one).collect();
    if !oneofs.is_empty() {
        schema["allOf"] = Value::Array(oneofs);
    }
    describe(&mut schema, &[comments.of(&message.parent_file(), message.path()).unwrap_or_default()]);
    schema
}

/// A string enum of the value names; the values' comments as a list.
fn enum_schema(enumeration: &EnumDescriptor, comments: &Comments) -> Value {
    if enumeration.full_name() == "google.protobuf.NullValue" {
        return json!({ "type": "null", "description": "JSON `null`." });
    }
    let names: Vec<String> = enumeration.values().map(|value| value.name().to_owned()).collect();
    let mut schema = json!({ "type": "string", "enum": names });
    let values: Vec<String> = enumeration
        .values()
        .filter_map(|value| {
            let comment = comments.of(&value.parent_file(), value.path())?;
            Some(format!("- `{}`: {}", value.name(), comment.replace('\n', " ")))
        })
        .collect();
    let own = comments.of(&enumeration.parent_file(), enumeration.path()).unwrap_or_default();
    describe(&mut schema, &[own, &values.join("\n")]);
    schema
}

/// At most one field of `oneof` in an object: exactly one of "this field
/// alone" for each of them, or "none of them".
fn at_most_one(oneof: OneofDescriptor) -> Value {
    let alone: Vec<Value> = oneof.fields().map(|field| json!({ "required": [field.json_name()] })).collect();
    let mut choices = alone.clone();
    choices.push(json!({ "not": { "anyOf": alone } }));
    json!({ "oneOf": choices })
}

/// What a field's membership in a `oneof` or its `optional` means in JSON.
fn presence_note(field: &FieldDescriptor) -> Option<String> {
    let oneof = field.containing_oneof()?;
    if oneof.is_synthetic() {
        return Some("Optional: a value sent, even `0` or `false`, differs from leaving the field out.".to_owned());
    }
    let members: Vec<String> = oneof.fields().map(|member| format!("`{}`", member.json_name())).collect();
    Some(format!("One of {} (oneof `{}`): send at most one.", members.join(", "), oneof.name()))
}

/// The schema of one value of `kind`.
fn kind_schema(kind: &Kind) -> Value {
    match kind {
        Kind::Message(message) => reference(message.full_name()),
        Kind::Enum(enumeration) => reference(enumeration.full_name()),
        Kind::Bool => json!({ "type": "boolean" }),
        Kind::String => json!({ "type": "string" }),
        Kind::Bytes => json!({ "type": "string", "contentEncoding": "base64" }),
        Kind::Double => json!({ "type": "number", "format": "double" }),
        Kind::Float => json!({ "type": "number", "format": "float" }),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => json!({ "type": "integer", "format": "int32" }),
        Kind::Uint32 | Kind::Fixed32 => {
            json!({ "type": "integer", "format": "uint32", "minimum": 0, "maximum": u32::MAX })
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            json!({ "type": "string", "format": "int64", "pattern": "^-?[0-9]+$" })
        }
        Kind::Uint64 | Kind::Fixed64 => json!({ "type": "string", "format": "uint64", "pattern": "^[0-9]+$" }),
    }
}

/// The wrapper types, whose JSON is their bare `value`.
const WRAPPERS: &[&str] = &[
    "google.protobuf.DoubleValue",
    "google.protobuf.FloatValue",
    "google.protobuf.Int64Value",
    "google.protobuf.UInt64Value",
    "google.protobuf.Int32Value",
    "google.protobuf.UInt32Value",
    "google.protobuf.BoolValue",
    "google.protobuf.StringValue",
    "google.protobuf.BytesValue",
];

/// The schema of a well-known type whose proto3 JSON is not an object of
/// its fields.
pub(super) fn well_known(message: &MessageDescriptor) -> Option<Value> {
    let schema = match message.full_name() {
        "google.protobuf.Timestamp" => json!({
            "type": "string",
            "format": "date-time",
            "description": "An RFC 3339 date-time in UTC with up to nine fractional digits, as \
                            `2026-12-01T09:30:00.250Z`.",
        }),
        "google.protobuf.Duration" => json!({
            "type": "string",
            "pattern": r"^-?[0-9]+(\.[0-9]{1,9})?s$",
            "description": "Seconds with up to nine fractional digits and the suffix `s`, as `1.500s`.",
        }),
        "google.protobuf.Any" => json!({
            "type": "object",
            "required": ["@type"],
            "properties": {
                "@type": {
                    "type": "string",
                    "description": "The type URL, as `type.googleapis.com/google.rpc.ErrorInfo`.",
                },
            },
            "description": "A message of any type: `@type` names it and its fields sit beside `@type` \
                            (a well-known type's JSON is in `value`).",
        }),
        "google.protobuf.Struct" => {
            json!({ "type": "object", "additionalProperties": true, "description": "Any JSON object." })
        }
        "google.protobuf.Value" => json!({ "description": "Any JSON value." }),
        "google.protobuf.ListValue" => json!({ "type": "array", "description": "Any JSON array." }),
        "google.protobuf.FieldMask" => json!({
            "type": "string",
            "description": "Field paths in lowerCamelCase, separated by commas.",
        }),
        name if WRAPPERS.contains(&name) => {
            let mut schema = kind_schema(&message.get_field_by_name("value")?.kind());
            describe(&mut schema, &["A value that may be absent (`null`)."]);
            schema
        }
        _ => return None,
    };
    Some(schema)
}

/// Sets the `paragraphs` that are not empty, when there are any, as the
/// description of `schema` (or of any other object of the document).
pub(super) fn describe(schema: &mut Value, paragraphs: &[&str]) {
    let text: Vec<&str> = paragraphs.iter().copied().filter(|paragraph| !paragraph.is_empty()).collect();
    if !text.is_empty() {
        schema["description"] = Value::from(text.join("\n\n"));
    }
}

/// A bound of a field that the front enforces with a constant of its code
/// (not a setting), so that the schema can state it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Bound {
    Items { min: u32, max: u32 },
    Maximum(u32),
}

impl Bound {
    fn apply(self, schema: &mut Value) {
        match self {
            Bound::Items { min, max } => {
                schema["minItems"] = min.into();
                schema["maxItems"] = max.into();
            }
            Bound::Maximum(max) => schema["maximum"] = max.into(),
        }
    }
}

/// The fixed limits of SPEC §7 that JSON Schema can state: list lengths
/// and `uint32` maxima. Bounds on 64-bit integers (strings in JSON) and on
/// UTF-8 byte lengths stay in the proto comments; the configurable limits
/// are in the document's description. The constants are private to the
/// handlers named beside each entry; `tests.rs` checks every entry names a
/// field.
pub(super) const FIXED_BOUNDS: &[(&str, &str, Bound)] = &[
    // grpc/read.rs: MAX_READS.
    ("agentvfs.v1.ReadManyRequest", "reads", Bound::Items { min: 1, max: 10 }),
    // grpc/batch.rs: MAX_ACTIONS.
    ("agentvfs.v1.BatchRequest", "actions", Bound::Items { min: 1, max: 20 }),
    // grpc/edit.rs: MAX_EDITS, for Edit and for a batch's edit action.
    ("agentvfs.v1.EditRequest", "edits", Bound::Items { min: 1, max: 100 }),
    ("agentvfs.v1.EditAction", "edits", Bound::Items { min: 1, max: 100 }),
    // grpc/admin.rs: MAX_FUNCTIONS.
    ("agentvfs.v1.RegisterFunctionsRequest", "functions", Bound::Items { min: 0, max: 500 }),
    // grpc/filesystem.rs and grpc/admin.rs: MAX_PAGE.
    ("agentvfs.v1.ListRequest", "page_size", Bound::Maximum(200)),
    ("agentvfs.v1.FindRequest", "page_size", Bound::Maximum(200)),
    ("agentvfs.v1.ListVersionsRequest", "page_size", Bound::Maximum(200)),
    ("agentvfs.v1.ListSpacesRequest", "page_size", Bound::Maximum(200)),
    // grpc/search.rs: MAX_PAGE.
    ("agentvfs.v1.SearchRequest", "page_size", Bound::Maximum(100)),
    ("agentvfs.v1.GrepRequest", "head_limit", Bound::Maximum(MAX_HEAD_LIMIT)),
];

fn fixed_bound(field: &FieldDescriptor) -> Option<Bound> {
    let message = field.parent_message();
    FIXED_BOUNDS
        .iter()
        .find(|(owner, name, _)| *owner == message.full_name() && *name == field.name())
        .map(|(_, _, bound)| *bound)
}
