use prost_reflect::DescriptorPool;
use serde_json::{Value, json};

use super::schemas::{Definition, FIXED_BOUNDS, component, well_known};
use super::{comments::Comments, document, grouped, routes, size};
use crate::grep::query::MAX_HEAD_LIMIT;
use crate::rest::snake_case;

fn pool() -> DescriptorPool {
    DescriptorPool::decode(agentvfs_proto::FILE_DESCRIPTOR_SET).unwrap()
}

fn parsed() -> Value {
    serde_json::from_slice(document()).unwrap()
}

fn schema(document: &Value, name: &str) -> Value {
    let schema = &document["components"]["schemas"][name];
    assert!(schema.is_object(), "no component schema {name}");
    schema.clone()
}

/// Every string under the key `key` in `value`.
fn strings_named(key: &str, value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(text)) = map.get(key) {
                found.push(text.clone());
            }
            map.values().for_each(|value| strings_named(key, value, found));
        }
        Value::Array(items) => items.iter().for_each(|value| strings_named(key, value, found)),
        _ => {}
    }
}

#[test]
fn the_document_is_openapi_3_1_built_once() {
    let document = parsed();
    assert_eq!(document["openapi"], "3.1.0");
    assert_eq!(document["info"]["title"], "agentvfs");
    assert!(std::ptr::eq(super::document(), super::document()));
}

#[test]
fn every_unary_rpc_of_both_services_is_a_post_of_its_messages() {
    let (document, pool) = (parsed(), pool());
    let mut unary = 0;
    for (prefix, name) in routes::SERVICES {
        for method in pool.get_service_by_name(name).unwrap().methods() {
            let path = format!("/api/v1/{prefix}/{}", snake_case(method.name()));
            let operation = &document["paths"][&path]["post"];
            if method.is_client_streaming() || method.is_server_streaming() {
                assert!(operation.is_null(), "{path} is a stream, not a POST");
                continue;
            }
            unary += 1;
            let input = &operation["requestBody"]["content"]["application/json"]["schema"]["$ref"];
            assert_eq!(*input, format!("#/components/schemas/{}", method.input().full_name()), "{path}");
            let output = &operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"];
            assert_eq!(*output, format!("#/components/schemas/{}", method.output().full_name()), "{path}");
            for status in ["400", "401", "403", "404", "409", "413", "415", "429", "499", "500", "503", "504"] {
                assert_eq!(
                    operation["responses"][status]["$ref"],
                    format!("#/components/responses/Error{status}"),
                    "{path} {status}"
                );
            }
        }
    }
    assert!(unary >= 20, "only {unary} unary RPCs");
    for path in ["/api/v1/fs/read_many", "/api/v1/fs/list_versions", "/api/v1/admin/create_space"] {
        assert!(document["paths"][path]["post"].is_object(), "{path}");
    }
}

#[test]
fn every_reference_resolves() {
    let document = parsed();
    let mut found = Vec::new();
    strings_named("$ref", &document, &mut found);
    assert!(found.len() > 100, "{} references", found.len());
    for target in found {
        let pointer = target.strip_prefix('#').unwrap_or_else(|| panic!("{target} is not local"));
        assert!(document.pointer(pointer).is_some(), "{target} does not resolve");
    }
}

#[test]
fn comments_become_descriptions() {
    let document = parsed();
    assert_eq!(document["paths"]["/api/v1/fs/read"]["post"]["description"], "Reads a bounded slice of a text file.");
    assert!(
        document["tags"][0]["description"].as_str().unwrap().starts_with("The file system agents use."),
        "{}",
        document["tags"][0]
    );
    let text_info = schema(&document, "agentvfs.v1.TextInfo");
    assert_eq!(
        text_info["description"],
        "How the stored bytes of a version look as text. Computed once, at write time."
    );
    assert_eq!(
        schema(&document, "agentvfs.v1.ListRequest")["properties"]["glob"]["description"],
        "Glob over entry paths: `*`, `?`, `**`, `[abc]`, `{a,b}`. Without `/` it\nmatches base names at any depth; \
         with `/`, the path relative to `path`."
    );
    let mut descriptions = Vec::new();
    strings_named("description", &document, &mut descriptions);
    for text in descriptions {
        let layout = text.starts_with(char::is_whitespace) || text.lines().any(|line| line.starts_with("//"));
        assert!(!layout, "{text:?} kept its layout");
    }
}

#[test]
fn comments_are_found_by_definition() {
    let pool = pool();
    let comments = Comments::new(&pool);
    let read = pool.get_message_by_name("agentvfs.v1.ReadRequest").unwrap();
    let max_chars = read.get_field_by_name("max_chars").unwrap();
    assert_eq!(
        comments.of(&max_chars.parent_file(), max_chars.path()),
        Some("Output budget in UTF-16 code units, 2–131,072 (0 = 32,768).")
    );
    assert_eq!(comments.of(&read.parent_file(), read.path()), None, "ReadRequest has no comment");
}

#[test]
fn enums_are_string_enums_of_their_value_names() {
    let write_mode = schema(&parsed(), "agentvfs.v1.WriteMode");
    assert_eq!(write_mode["type"], "string");
    assert_eq!(write_mode["enum"], json!(["WRITE_MODE_OVERWRITE", "WRITE_MODE_APPEND", "WRITE_MODE_CREATE_NEW"]));
    let description = write_mode["description"].as_str().unwrap();
    assert!(
        description.contains("- `WRITE_MODE_APPEND`: Add to the end; creates the file when missing."),
        "{description}"
    );
}

#[test]
fn fields_take_their_proto3_json_form() {
    let document = parsed();
    let read = schema(&document, "agentvfs.v1.ReadResponse");
    assert_eq!(read["properties"]["totalLines"]["type"], "string", "uint64 is a string");
    assert_eq!(read["properties"]["totalLines"]["pattern"], "^[0-9]+$");
    assert!(read["properties"]["total_lines"].is_null(), "properties take the JSON names");
    let write = schema(&document, "agentvfs.v1.WriteRequest");
    assert_eq!(write["properties"]["data"]["contentEncoding"], "base64");
    assert_eq!(write["properties"]["mode"]["$ref"], "#/components/schemas/agentvfs.v1.WriteMode");
    assert!(write["properties"]["expectedVersion"]["description"].as_str().unwrap().contains("Optional"));
    assert!(write.get("required").is_none());
    let metadata = &schema(&document, "agentvfs.v1.ReadError")["properties"]["metadata"];
    assert_eq!(*metadata, json!({ "type": "object", "additionalProperties": { "type": "string" } }));
    let entries = &schema(&document, "agentvfs.v1.ListResponse")["properties"]["entries"];
    assert_eq!(entries["items"]["$ref"], "#/components/schemas/agentvfs.v1.Entry");
    let list = schema(&document, "agentvfs.v1.ListRequest");
    assert_eq!(list["properties"]["pageSize"]["type"], "integer");
    let modified = &schema(&document, "agentvfs.v1.Entry")["properties"]["modifiedTime"];
    assert_eq!(modified["$ref"], "#/components/schemas/google.protobuf.Timestamp");
    assert_eq!(schema(&document, "google.protobuf.Timestamp")["format"], "date-time");
    let retry = schema(&document, "google.rpc.RetryInfo");
    assert_eq!(retry["properties"]["retryDelay"]["$ref"], "#/components/schemas/google.protobuf.Duration");
    assert_eq!(schema(&document, "google.rpc.BadRequest.FieldViolation")["type"], "object", "nested messages too");
    assert!(document["components"]["schemas"]["agentvfs.v1.GrepJob"].is_null(), "the worker's contract is not HTTP");
}

#[test]
fn a_oneof_allows_one_member_alone_or_none() {
    let write = schema(&parsed(), "agentvfs.v1.WriteRequest");
    let choices = &write["allOf"][0]["oneOf"];
    assert_eq!(
        *choices,
        json!([
            { "required": ["content"] },
            { "required": ["data"] },
            { "not": { "anyOf": [{ "required": ["content"] }, { "required": ["data"] }] } },
        ])
    );
    let content = write["properties"]["content"]["description"].as_str().unwrap();
    assert!(content.starts_with("Text content.\n\nOne of `content`, `data` (oneof `body`)"), "{content}");
    let edit = schema(&parsed(), "agentvfs.v1.EditRequest");
    assert!(edit.get("allOf").is_none(), "`optional` fields are not a oneof in JSON");
}

#[test]
fn well_known_types_have_their_json_forms() {
    let pool = DescriptorPool::global();
    let well_known = |name: &str| well_known(&pool.get_message_by_name(name).unwrap());
    for (name, kind) in [
        ("google.protobuf.Timestamp", "string"),
        ("google.protobuf.Duration", "string"),
        ("google.protobuf.FieldMask", "string"),
        ("google.protobuf.Int64Value", "string"),
        ("google.protobuf.BytesValue", "string"),
        ("google.protobuf.UInt32Value", "integer"),
        ("google.protobuf.BoolValue", "boolean"),
        ("google.protobuf.Struct", "object"),
        ("google.protobuf.Any", "object"),
        ("google.protobuf.ListValue", "array"),
    ] {
        assert_eq!(well_known(name).unwrap()["type"], kind, "{name}");
    }
    assert!(well_known("google.protobuf.Value").unwrap().get("type").is_none(), "any JSON value");
    assert_eq!(well_known("google.protobuf.Any").unwrap()["required"], json!(["@type"]));
    assert_eq!(well_known("google.protobuf.Empty"), None, "an object without fields, like any message");
    let null = pool.get_enum_by_name("google.protobuf.NullValue").unwrap();
    let comments = Comments::new(&pool);
    assert_eq!(component(&Definition::Enum(null), &comments)["type"], "null");
}

#[test]
fn fixed_limits_are_on_the_fields_they_bound() {
    let (document, pool) = (parsed(), pool());
    for (message, field, _) in FIXED_BOUNDS {
        let owner = pool.get_message_by_name(message).unwrap_or_else(|| panic!("no message {message}"));
        assert!(owner.get_field_by_name(field).is_some(), "{message} has no field {field}");
    }
    let reads = &schema(&document, "agentvfs.v1.ReadManyRequest")["properties"]["reads"];
    assert_eq!((reads["minItems"].clone(), reads["maxItems"].clone()), (json!(1), json!(10)));
    assert_eq!(schema(&document, "agentvfs.v1.BatchRequest")["properties"]["actions"]["maxItems"], 20);
    assert_eq!(schema(&document, "agentvfs.v1.ListRequest")["properties"]["pageSize"]["maximum"], 200);
    assert_eq!(schema(&document, "agentvfs.v1.GrepRequest")["properties"]["headLimit"]["maximum"], MAX_HEAD_LIMIT);
}

#[test]
fn configurable_limits_are_described_at_their_defaults() {
    let document = parsed();
    let description = document["info"]["description"].as_str().unwrap();
    for limit in ["8 MiB", "up to 5 MiB", "up to 64 MiB", "1 GiB and 100,000 files", "10,000 entries", "250 entries"] {
        assert!(description.contains(limit), "{limit} is not in {description}");
    }
    assert_eq!(
        (size(5 << 20), size(1 << 30), size(1536), size(1000)),
        ("5 MiB".to_owned(), "1 GiB".to_owned(), "1,536 bytes".to_owned(), "1,000 bytes".to_owned())
    );
    assert_eq!(
        (grouped(0), grouped(999), grouped(1_000), grouped(1_234_567)),
        ("0".to_owned(), "999".to_owned(), "1,000".to_owned(), "1,234,567".to_owned())
    );
}

#[test]
fn errors_share_googles_body_and_say_when_to_retry() {
    let document = parsed();
    let error = schema(&document, "Error");
    let details = error["properties"]["error"]["properties"]["details"]["items"]["anyOf"].as_array().unwrap();
    let info = json!({ "const": "type.googleapis.com/google.rpc.ErrorInfo" });
    assert!(details.iter().any(|detail| detail["properties"]["@type"] == info), "{details:?}");
    let statuses = &error["properties"]["error"]["properties"]["status"]["enum"];
    assert!(statuses.as_array().unwrap().contains(&json!("RESOURCE_EXHAUSTED")));
    let responses = document["components"]["responses"].as_object().unwrap();
    for (name, response) in responses {
        assert_eq!(response["headers"]["x-request-id"]["$ref"], "#/components/headers/RequestId", "{name}");
        let retry = !response["headers"]["Retry-After"].is_null();
        assert_eq!(retry, name == "Error429" || name == "Error503", "{name}");
    }
    let bad_request = responses["Error400"]["description"].as_str().unwrap();
    assert!(bad_request.contains("INVALID_ARGUMENT, FAILED_PRECONDITION or OUT_OF_RANGE"), "{bad_request}");
}

#[test]
fn the_headers_of_spec_11_are_parameters_and_a_security_scheme() {
    let document = parsed();
    let parameters = document["components"]["parameters"].as_object().unwrap();
    let names: Vec<&str> = parameters.values().map(|p| p["name"].as_str().unwrap()).collect();
    for header in [
        "X-Agentvfs-Session",
        "X-Agentvfs-Mode",
        "X-Agentvfs-Tool-Call",
        "X-Request-Id",
        "X-Request-Timeout",
        "Idempotency-Key",
    ] {
        assert!(names.contains(&header), "{header} is not in {names:?}");
    }
    assert_eq!(parameters["Mode"]["schema"]["enum"], json!(["read-only", "edit"]));
    assert_eq!(document["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
    let idempotent = |path: &str| {
        let parameters = document["paths"][path]["post"]["parameters"].as_array().unwrap();
        parameters.contains(&json!({ "$ref": "#/components/parameters/IdempotencyKey" }))
    };
    assert!(idempotent("/api/v1/fs/write"));
    assert!(!idempotent("/api/v1/fs/read"), "Read has no idempotency key to fill");
}

#[test]
fn the_routes_beside_the_rpcs_are_described() {
    let document = parsed();
    let paths = &document["paths"];
    let names = |operation: &Value| -> Vec<String> {
        operation["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str().map(str::to_owned))
            .collect()
    };
    let watch = &paths["/api/v1/fs/watch"]["get"];
    assert_eq!(names(watch), ["space", "path", "from_revision"]);
    assert!(watch["responses"]["200"]["content"]["text/event-stream"].is_object());
    assert!(watch["description"].as_str().unwrap().contains("Last-Event-ID"));
    let download = &paths["/api/v1/fs/content"]["get"];
    assert_eq!(names(download), ["space", "path", "base", "version", "at_revision"]);
    let headers = download["responses"]["200"]["headers"].as_object().unwrap();
    for header in ["ETag", "X-Agentvfs-Version", "X-Agentvfs-Node-Id", "X-Agentvfs-Hash", "Content-Length"] {
        assert!(headers.contains_key(header), "{header}");
    }
    let upload = &paths["/api/v1/fs/content"]["put"];
    assert_eq!(names(upload), ["space", "path", "base", "If-Match", "If-None-Match", "X-Agentvfs-Hash"]);
    assert_eq!(
        upload["responses"]["201"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/agentvfs.v1.UploadResponse"
    );
    for method in ["post", "get", "delete"] {
        assert!(paths["/mcp"][method].is_object(), "/mcp {method}");
    }
    assert_eq!(paths["/openapi.json"]["get"]["security"], json!([]), "the document needs no token");
}
