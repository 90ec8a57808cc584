//! What the command-line tests share: a real worker and dev-mode front on
//! loopback ports, and a way to run the real `agentvfs` binary against them.

#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../front/tests/support/binaries.rs"]
mod binaries;

/// The directory holding the front and the worker beside the `agentvfs`
/// binary, built and up to date.
pub fn server_binaries() -> PathBuf {
    binaries::workspace_binaries(env!("CARGO_BIN_EXE_agentvfs"))
}

pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A worker and a dev-mode front with a space named `default`.
pub struct Stack {
    pub addr: String,
    front: Killed,
    worker_addr: String,
    _worker: Killed,
    pub temp: tempfile::TempDir,
}

pub fn listening_address(child: &mut Child) -> String {
    try_listening_address(child).unwrap_or_else(|line| panic!("unexpected first line {line:?}"))
}

/// The address a process says it listens on, or the first line it printed
/// instead (empty when it exited first).
fn try_listening_address(child: &mut Child) -> Result<String, String> {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    line.trim().strip_prefix("listening on ").map(str::to_owned).ok_or(line)
}

impl Stack {
    pub fn start() -> Stack {
        let dir = server_binaries();
        let temp = tempfile::tempdir().unwrap();
        // The worker must be told the front's address before the front
        // exists: a port that was free a moment ago, which another process
        // can take first. Then both start again, on another.
        for _ in 0..10 {
            let front_addr =
                format!("127.0.0.1:{}", TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
            let mut worker = Killed(
                Command::new(dir.join("agentvfs-worker"))
                    .args(["--listen", "127.0.0.1:0", "--front", &front_addr, "--index-dir"])
                    .arg(temp.path().join("index"))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            );
            let worker_addr = listening_address(&mut worker.0);
            let Some(front) = try_start_front(&front_addr, &worker_addr, temp.path(), &[]) else { continue };
            let stack = Stack { addr: front_addr, front, worker_addr, _worker: worker, temp };
            stack.create_default_space();
            return stack;
        }
        panic!("no front started on a free port in 10 attempts");
    }

    /// Creates the space `default`, retrying while the front that just
    /// started reports itself unavailable (listening is not yet serving).
    pub fn create_default_space(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = self.run(&["space", "create", "default"]);
            if out.code == 0 {
                break;
            }
            assert!(out.code == 6 && Instant::now() < deadline, "space create failed: {out:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILLs the front.
    pub fn kill_front(&mut self) {
        let _ = self.front.0.kill();
        let _ = self.front.0.wait();
    }

    /// Starts the front again, on the same address and store.
    pub fn restart_front(&mut self) {
        self.restart_front_with(&[]);
    }

    /// [`Stack::restart_front`] with more flags.
    pub fn restart_front_with(&mut self, extra: &[&str]) {
        self.kill_front();
        self.front = start_front(&self.addr, &self.worker_addr, self.temp.path(), extra);
    }

    /// The front's store directory.
    pub fn data_dir(&self) -> PathBuf {
        self.temp.path().join("data")
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with_stdin(args, "")
    }

    pub fn run_with_stdin(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentvfs"))
            .args(["--addr", &self.addr])
            .args(args)
            .env_remove("AGENTVFS_SPACE")
            .env_remove("AGENTVFS_TOKEN")
            .env_remove("AGENTVFS_SESSION")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        let output = child.wait_with_output().unwrap();
        Output {
            code: output.status.code().unwrap(),
            stdout: String::from_utf8(output.stdout).unwrap(),
            stderr: String::from_utf8(output.stderr).unwrap(),
        }
    }

    /// The `agentvfs` binary with `args`, pointed at this stack, not started.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentvfs"));
        command
            .args(["--addr", &self.addr])
            .args(args)
            .env_remove("AGENTVFS_SPACE")
            .env_remove("AGENTVFS_TOKEN")
            .env_remove("AGENTVFS_SESSION");
        command
    }

    /// Like `run_with_stdin`, with any bytes (binary included) on stdin.
    pub fn run_with_bytes(&self, args: &[&str], stdin: &[u8]) -> Output {
        let mut child =
            self.command(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let output = child.wait_with_output().unwrap();
        Output {
            code: output.status.code().unwrap(),
            stdout: String::from_utf8(output.stdout).unwrap(),
            stderr: String::from_utf8(output.stderr).unwrap(),
        }
    }

    /// How many calls of `method` (`List`, `Write`…) the front has served
    /// since it started; it must have been started with `--metrics-listen`.
    pub fn calls(&self, method: &str) -> u64 {
        self.metric(&format!("agentvfs_rpc_requests_total{{method=\"/agentvfs.v1.FileSystem/{method}\","))
    }

    /// How many flushes the front's store has made since it started (with
    /// `--metrics-listen`).
    pub fn flushes(&self) -> u64 {
        self.metric("agentvfs_flush_batch_writers_count")
    }

    /// The sum of the front's series that start with `series`.
    fn metric(&self, series: &str) -> u64 {
        let log = std::fs::read_to_string(self.temp.path().join("front.log")).unwrap();
        let addr = log
            .lines()
            .rev()
            .find_map(|line| line.split_once("metrics listening on ").map(|(_, addr)| addr.trim().to_owned()))
            .unwrap_or_else(|| panic!("the front serves no metrics:\n{log}"));
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut metrics = String::new();
        std::io::Read::read_to_string(&mut stream, &mut metrics).unwrap();
        metrics
            .lines()
            .filter(|line| line.starts_with(series))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Runs a command that must succeed and returns its stdout.
    #[track_caller]
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(out.code, 0, "agentvfs {args:?}: {out:?}");
        out.stdout
    }
}

/// A dev-mode front on `addr` with its store in `dir/data`, once it listens.
fn start_front(addr: &str, worker: &str, dir: &std::path::Path, extra: &[&str]) -> Killed {
    try_start_front(addr, worker, dir, extra).unwrap_or_else(|| panic!("the front did not start on {addr}"))
}

/// [`start_front`], or `None` when the front exits instead (its address taken).
fn try_start_front(addr: &str, worker: &str, dir: &std::path::Path, extra: &[&str]) -> Option<Killed> {
    let mut front = Killed(
        Command::new(server_binaries().join("agentvfs-front"))
            .args(["--listen", addr, "--worker", worker, "--dev", "--rate-limit", "0", "--data-dir"])
            .arg(dir.join("data"))
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::options().create(true).append(true).open(dir.join("front.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    try_listening_address(&mut front.0).ok().map(|_| front)
}

#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}
