//! One child process of `agentvfs up` (the front or the worker): found next
//! to this executable or on `PATH`, ready once it prints `listening on
//! <ADDR>`, and stopped with SIGTERM, then SIGKILL if it does not exit in time.

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, ChildStdout, Command};

/// How long a child may take to print `listening on <ADDR>`: opening a large
/// store or index can take a while, a hung process should not stall forever.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a child could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot find {name} next to {dir} or on PATH")]
    NotFound { name: &'static str, dir: String },
    #[error("cannot start {name}: {source}")]
    Spawn { name: &'static str, source: io::Error },
    #[error("{name} exited before it was listening ({status})")]
    Exited { name: &'static str, status: ExitStatus },
    #[error("{name} printed {line:?} where `listening on <ADDR>` was expected")]
    Unexpected { name: &'static str, line: String },
    #[error("{name} did not print `listening on <ADDR>` within {} s", LISTEN_TIMEOUT.as_secs())]
    Silent { name: &'static str },
    #[error("cannot read the output of {name}: {source}")]
    Read { name: &'static str, source: io::Error },
}

/// How a child ended when it was asked to stop.
#[derive(Debug)]
pub enum Ending {
    /// It had already exited on its own (and was waited for then).
    Gone,
    /// It exited after SIGTERM.
    Stopped(ExitStatus),
    /// It was still running after the grace period and was killed.
    TimedOut,
    /// A stop was forced before the grace period ran out, and it was killed.
    Hurried,
    /// SIGTERM could not be sent, so it was killed.
    Unsignalled(io::Error),
}

/// A running child process.
#[derive(Debug)]
pub struct Service {
    name: &'static str,
    child: Child,
    stdout: Option<BufReader<ChildStdout>>,
}

impl Service {
    /// Starts `name` with `args`. Its stderr is this process's, so its logs
    /// reach the terminal; its stdout is read by [`Service::listening`].
    pub fn spawn(name: &'static str, args: &[OsString]) -> Result<Service, StartError> {
        let (program, dir) = locate(name);
        let mut command = Command::new(&program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // A safety net for early returns and panics; normal stops are graceful.
            .kill_on_drop(true);
        // Its own process group keeps a terminal's Ctrl-C from reaching the
        // children directly, so that `agentvfs up` decides the order they stop in.
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command.spawn().map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => StartError::NotFound { name, dir },
            _ => StartError::Spawn { name, source },
        })?;
        let stdout = child.stdout.take().map(BufReader::new);
        Ok(Service { name, child, stdout })
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Waits for the `listening on <ADDR>` line and returns ADDR. The rest of
    /// stdout is then discarded in the background, so that the child never
    /// blocks on a full pipe.
    pub async fn listening(&mut self) -> Result<String, StartError> {
        let name = self.name;
        let line = tokio::time::timeout(LISTEN_TIMEOUT, self.first_line())
            .await
            .map_err(|_| StartError::Silent { name })??;
        let Some(addr) = line.trim_end().strip_prefix("listening on ") else {
            return Err(StartError::Unexpected { name, line });
        };
        if let Some(mut stdout) = self.stdout.take() {
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await;
            });
        }
        Ok(addr.to_owned())
    }

    /// The first line of stdout; if stdout closes first, the child has exited
    /// (or is about to), and its exit status is the error.
    async fn first_line(&mut self) -> Result<String, StartError> {
        let name = self.name;
        let mut line = String::new();
        let read = match self.stdout.as_mut() {
            Some(stdout) => stdout.read_line(&mut line).await,
            None => Ok(0),
        };
        match read {
            Ok(0) => {
                let status = self.exit().await.map_err(|source| StartError::Read { name, source })?;
                Err(StartError::Exited { name, status })
            }
            Ok(_) => Ok(line),
            Err(source) => Err(StartError::Read { name, source }),
        }
    }

    /// Completes when the child exits.
    pub async fn exit(&mut self) -> io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Sends SIGTERM and waits up to `grace` for the child to exit; kills it
    /// after that, or as soon as `hurry` completes.
    pub async fn stop(&mut self, grace: Duration, hurry: impl Future<Output = ()>) -> io::Result<Ending> {
        if self.child.try_wait()?.is_some() {
            return Ok(Ending::Gone);
        }
        if let Err(error) = self.terminate().await {
            self.child.kill().await?;
            return Ok(Ending::Unsignalled(error));
        }
        tokio::select! {
            exited = tokio::time::timeout(grace, self.child.wait()) => match exited {
                Ok(status) => Ok(Ending::Stopped(status?)),
                Err(_) => {
                    self.child.kill().await?;
                    Ok(Ending::TimedOut)
                }
            },
            () = hurry => {
                self.child.kill().await?;
                Ok(Ending::Hurried)
            }
        }
    }

    /// Asks the child to stop. There is no SIGTERM in the standard library,
    /// and `kill(1)` keeps this crate free of unsafe code and extra bindings.
    #[cfg(unix)]
    async fn terminate(&mut self) -> io::Result<()> {
        // `id` is `None` once the child has been reaped, so a recycled PID is never signalled.
        let Some(pid) = self.child.id() else {
            return Ok(());
        };
        let status = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .await?;
        if status.success() || self.child.try_wait()?.is_some() {
            Ok(())
        } else {
            Err(io::Error::other(format!("kill -TERM {pid} failed ({status})")))
        }
    }

    /// Without signals, stopping means killing.
    #[cfg(not(unix))]
    async fn terminate(&mut self) -> io::Result<()> {
        self.child.start_kill()
    }
}

/// The binary next to this executable if there is one, else the bare name
/// (looked up on `PATH`); and that directory, for error messages.
fn locate(name: &str) -> (PathBuf, String) {
    let file = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    let dir = std::env::current_exe().ok().and_then(|exe| exe.parent().map(PathBuf::from));
    match dir {
        Some(dir) if dir.join(&file).is_file() => (dir.join(&file), dir.display().to_string()),
        Some(dir) => (PathBuf::from(file), dir.display().to_string()),
        None => (PathBuf::from(file), "this executable".to_owned()),
    }
}
