//! The worker as a process (SPEC §9): one `listening on <ADDR>` line once it
//! accepts connections, exit 0 after a SIGTERM drain, and a non-zero exit
//! with a one-line reason on bad configuration.
//!
//! These tests also make `cargo test --workspace` build the worker binary,
//! which the front's end-to-end tests start.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn worker() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentvfs-worker"));
    command.env_remove("AGENTVFS_TOKEN").env_remove("AGENTVFS_LISTEN");
    command
}

#[test]
fn it_reports_its_address_and_drains_on_sigterm() {
    let index = tempfile::tempdir().unwrap();
    let mut child = worker()
        .args(["--listen", "127.0.0.1:0", "--front", "127.0.0.1:1", "--index-dir"])
        .arg(index.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let address = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("first line {line:?}"));
    let address: std::net::SocketAddr = address.parse().unwrap();
    assert_ne!(address.port(), 0);
    std::net::TcpStream::connect(address).unwrap();

    let killed = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the worker did not stop after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
}

#[test]
fn bad_configuration_exits_non_zero_with_one_line() {
    let output = worker().args(["--listen", "not-an-address", "--front", "127.0.0.1:1"]).output().unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "nothing on stdout: {:?}", String::from_utf8_lossy(&output.stdout));
    // clap's own hint follows the reason, which is its first line.
    let stderr = String::from_utf8(output.stderr).unwrap();
    let reason = stderr.lines().next().unwrap_or_default();
    assert!(reason.contains("not-an-address") && reason.contains("--listen"), "{stderr:?}");
}
