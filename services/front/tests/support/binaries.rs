//! The workspace's binaries for end-to-end tests, shared by the test suites
//! of every package (included with `#[path]`).
//!
//! A test run builds only its own package's binaries, and a `cargo build` of
//! another package resolves other dependency features: shared dependencies
//! would be compiled again and the binaries under running tests replaced.
//! So the other binaries are built by the very command `./scripts/test` runs,
//! `cargo test --workspace --all-features`, which is a no-op inside that run.
//! `--all-features` compiles the fault points of the crash tests into the
//! one build every test uses; they stay inert unless `FAILPOINTS` names them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory of `own` (a `CARGO_BIN_EXE_*` path of the calling package),
/// once every binary of the workspace in it is built and up to date (a stale
/// binary would test old code).
pub fn workspace_binaries(own: &str) -> PathBuf {
    let dir = Path::new(own).parent().expect("a binary lives in a directory").to_owned();
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let mut build = Command::new(cargo);
        build.args(["test", "--workspace", "--all-features", "--no-run", "--quiet"]);
        if !dir.ends_with("debug") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo");
        assert!(status.success(), "building the workspace's binaries failed");
    });
    dir
}
