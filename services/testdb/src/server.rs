//! One run of the postmaster, under a supervisor that ties its life to this
//! process.
//!
//! The supervisor is a small `sh` script that starts `postgres` and then
//! blocks reading its stdin, a pipe whose only writer is this process.
//! Whenever this process goes away (a normal exit, a panic, SIGKILL) the
//! kernel closes the pipe, the read returns end-of-file and the supervisor
//! shuts the server down and removes its directory. Unlike
//! `PR_SET_PDEATHSIG`, this needs no `unsafe` and does not depend on which
//! thread started the server. The supervisor stays the postmaster's parent
//! and is the only one to signal it, so no signal can reach a recycled pid.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::host::Account;

/// `$1` is the cluster's directory (the log goes there), the rest is the
/// `postgres` command line. Prints the postmaster's pid, then waits for
/// one line on stdin:
/// - `kill`: a crash. SIGKILL to the postmaster and every backend at once
///   (the postmaster is stopped first so that it forks no more), like a
///   machine losing power; the data directory stays for a restart.
/// - end of file: an immediate shutdown (SIGQUIT: the postmaster ends its
///   backends, then itself), then the directory is removed.
///
/// `/proc/PID/stat` reads as `pid (comm) state ppid …`; PostgreSQL's
/// processes are all named `postgres`, without spaces.
const SUPERVISOR: &str = r#"
dir=$1; shift
"$@" </dev/null >>"$dir/server.log" 2>&1 &
pid=$!
echo "$pid"
if read -r line && [ "$line" = kill ]; then
    kill -STOP "$pid" 2>/dev/null
    backends=
    for stat in /proc/[0-9]*/stat; do
        read -r child _ _ parent _ <"$stat" 2>/dev/null && [ "$parent" = "$pid" ] && backends="$backends $child"
    done
    kill -KILL "$pid" $backends 2>/dev/null
    wait "$pid" 2>/dev/null
else
    kill -QUIT "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rm -rf "$dir"
fi
"#;

/// A postmaster started by [`Server::spawn`], stopped when dropped.
#[derive(Debug)]
pub(crate) struct Server {
    supervisor: Child,
    pid: u32,
}

impl Server {
    /// Starts `postgres` on `port` for the cluster in `dir` (data in
    /// `dir/data`, socket and `server.log` in `dir`). Returns once the
    /// postmaster has a pid, before it accepts connections.
    pub(crate) fn spawn(bin: &Path, dir: &Path, port: u16, account: Option<Account>) -> Result<Server, String> {
        let mut command = Command::new("sh");
        command
            .args(["-c", SUPERVISOR, "agentvfs-testdb-supervisor"])
            .arg(dir)
            .arg(bin.join("postgres"))
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-p", &port.to_string(), "-k"])
            .arg(dir)
            .args(SETTINGS.iter().flat_map(|setting| ["-c", setting]))
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Its own process group: a Ctrl-C at the terminal reaches the
            // tests, whose exit then stops the server, not the supervisor.
            .process_group(0);
        if let Some(account) = account {
            command.uid(account.uid).gid(account.gid);
        }
        let mut supervisor = command.spawn().map_err(|error| format!("cannot run sh: {error}"))?;
        let mut line = String::new();
        if let Some(stdout) = supervisor.stdout.take() {
            // The supervisor writes nothing after the pid.
            let _ = BufReader::new(stdout).read_line(&mut line);
        }
        match line.trim().parse() {
            Ok(pid) => Ok(Server { supervisor, pid }),
            Err(_) => {
                drop(supervisor.stdin.take());
                let status = supervisor.wait();
                Err(format!("the postgres supervisor printed no pid ({status:?})"))
            }
        }
    }

    /// The postmaster's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the postmaster has exited (it may not be reaped yet).
    pub(crate) fn exited(&self) -> bool {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) else {
            return true;
        };
        let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
        matches!(state, Some('Z' | 'X') | None)
    }

    /// Crashes the server: SIGKILL to the postmaster and its backends, the
    /// data kept. Returns once the postmaster is gone.
    pub(crate) fn crash(mut self) -> Result<(), String> {
        let sent = match self.supervisor.stdin.as_mut() {
            Some(stdin) => stdin.write_all(b"kill\n").and_then(|()| stdin.flush()),
            None => Ok(()),
        };
        // `wait` closes the pipe, but the supervisor reads the line before
        // the end of file.
        let waited = self.supervisor.wait();
        sent.map_err(|error| format!("cannot tell the postgres supervisor to kill the server: {error}"))?;
        waited.map_err(|error| format!("cannot wait for the postgres supervisor: {error}"))?;
        Ok(())
    }
}

impl Drop for Server {
    /// Shuts the server down (immediately) and removes the cluster's
    /// directory; nothing happens if [`Server::crash`] ran.
    fn drop(&mut self) {
        drop(self.supervisor.stdin.take());
        let _ = self.supervisor.wait();
    }
}

/// Server settings for a test cluster on a small shared machine. Durability
/// stays as in production (`fsync`, `synchronous_commit` and
/// `full_page_writes` on): the crash tests check it.
const SETTINGS: &[&str] = &[
    "listen_addresses=127.0.0.1",
    "max_connections=200",
    "fsync=on",
    "synchronous_commit=on",
    // Two cores: parallel query and JIT compilation only add latency to
    // the small queries tests run.
    "max_parallel_workers_per_gather=0",
    "jit=off",
];
