//! `agentvfs-load check`: scenarios are validated against the compiled-in
//! agentvfs descriptors without a server, and every scenario under
//! `deploy/ghz/` passes.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn check(files: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentvfs-load")).arg("check").args(files).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `scenario` as `name` in `dir`.
fn scenario(dir: &Path, name: &str, scenario: serde_json::Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(&scenario).unwrap()).unwrap();
    path
}

fn write_scenario(data: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "call": "agentvfs.v1.FileSystem.Write",
        "host": "127.0.0.1:50051",
        "insecure": true,
        "total": 100,
        "concurrency": 4,
        "data": data,
        "metadata": {"authorization": "Bearer dev", "x-agentvfs-tool-call": "load-{{.RequestNumber}}"}
    })
}

#[test]
fn a_valid_scenario_passes() {
    let dir = tempfile::tempdir().unwrap();
    let valid = scenario(
        dir.path(),
        "write.json",
        write_scenario(serde_json::json!({
            "space": "default",
            "path": "/load/{{.WorkerID}}/{{.RequestNumber}}-{{.UUID}}.txt",
            "content": "at {{.TimestampUnix}}",
            "expectedVersion": "0"
        })),
    );
    let output = check(&[&valid]);
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    assert!(text(&output.stdout).contains("agentvfs.v1.FileSystem.Write"), "{}", text(&output.stdout));
}

#[test]
fn an_unknown_method_fails() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = write_scenario(serde_json::json!({"space": "default", "path": "/a.txt"}));
    config["call"] = "agentvfs.v1.FileSystem/Wrte".into();
    let bad = scenario(dir.path(), "typo.json", config);
    let output = check(&[&bad]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("typo.json") && stderr.contains("unknown method \"Wrte\""), "{stderr}");
}

#[test]
fn an_unknown_field_fails() {
    let dir = tempfile::tempdir().unwrap();
    let bad =
        scenario(dir.path(), "field.json", write_scenario(serde_json::json!({"space": "default", "pth": "/a.txt"})));
    let output = check(&[&bad]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("field.json") && stderr.contains("pth"), "{stderr}");
}

#[test]
fn streaming_methods_bad_templates_and_bad_values_fail() {
    let dir = tempfile::tempdir().unwrap();
    let mut streaming = write_scenario(serde_json::json!({}));
    streaming["call"] = "agentvfs.v1.FileSystem.Watch".into();
    let cases = [
        (scenario(dir.path(), "stream.json", streaming), "streaming"),
        (
            scenario(dir.path(), "template.json", write_scenario(serde_json::json!({"path": "/{{.RequestNum}}"}))),
            "unsupported template",
        ),
        (
            // A template that expands to something the field cannot hold.
            scenario(
                dir.path(),
                "value.json",
                write_scenario(serde_json::json!({"path": "/a", "expectedVersion": "{{.WorkerID}}"})),
            ),
            "field `expectedVersion`",
        ),
    ];
    for (path, expected) in &cases {
        let output = check(&[path]);
        assert!(!output.status.success(), "{} must fail", path.display());
        let stderr = text(&output.stderr);
        assert!(stderr.contains(expected), "{}: {stderr}", path.display());
    }
}

#[test]
fn one_bad_file_fails_the_whole_check_and_the_rest_are_still_reported() {
    let dir = tempfile::tempdir().unwrap();
    let good = scenario(dir.path(), "good.json", write_scenario(serde_json::json!({"path": "/a"})));
    let bad = scenario(dir.path(), "bad.json", write_scenario(serde_json::json!({"nope": 1})));
    let output = check(&[&bad, &good]);
    assert!(!output.status.success());
    assert!(text(&output.stdout).contains("good.json"), "{}", text(&output.stdout));
    assert!(text(&output.stderr).contains("1 of 2"), "{}", text(&output.stderr));
}

/// CI's check of the committed scenarios: every file under `deploy/ghz/`
/// names a real unary method and valid request fields. A `deploy/ghz/`
/// directory without any scenario is an error; no directory at all is not.
#[test]
fn every_deploy_scenario_is_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/ghz");
    if !dir.is_dir() {
        eprintln!("{} does not exist; nothing to check", dir.display());
        return;
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} has no *.json scenario", dir.display());
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let output = check(&paths);
    assert!(output.status.success(), "{}{}", text(&output.stdout), text(&output.stderr));
}
