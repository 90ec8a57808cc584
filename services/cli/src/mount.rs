//! `agentvfs mount [SPACE:]PATH DIR`: a space's folder as a local directory
//! (FUSE, SPEC §14) that shells, git, compilers and test runners use as they
//! would a local disk, while every change still becomes a version.
//!
//! - A file is buffered locally while it is open and saved as one new
//!   version when it is closed or fsynced, against the version seen when it
//!   was opened (an empty file when its last descriptor closes, since a
//!   shell's `> file` closes a duplicate before it writes). If the file
//!   changed on the server meanwhile, the close fails with `EIO`, nothing is
//!   overwritten, and the local copy is kept in the recovery folder
//!   (`--recovery-dir`), which the log on stderr names; so is a file whose
//!   last save fails (`EDQUOT` past the quota, `ENOSPC` on a full store,
//!   `EIO` without a front).
//! - Content is fetched by version and kept by hash in a bounded cache
//!   (`--cache-bytes`); listings are kept for a second, names and
//!   attributes in the kernel for longer, and `Watch` drops whatever a
//!   change elsewhere makes stale, here and in the kernel.
//! - mkdir, rename (a move when the folder changes, replacing the target as
//!   rename(2) does, in one atomic batch), unlink and rmdir (to the trash)
//!   are the service's own operations, never copies. Unlinks travel in
//!   batches: done for the mount at once, they reach the service within
//!   50 ms, and always before any other change or listing of the mount, on
//!   fsync of a folder and at unmount.
//! - Symbolic and hard links, device files and extended attributes are
//!   `ENOTSUP`. The executable bit is each version's own: chmod(2) that
//!   flips it saves a version, and a file created with any `x` bit has it.
//!   Other mode bits, owners and times are the service's (files 0644 or
//!   0755, folders 0755, times from versions).
//! - Every call has a deadline: a front that does not answer fails the
//!   operation with `EIO`, and the mount serves again once it answers.
//!
//! Unmounts on Ctrl-C or SIGTERM, or when `umount DIR` unmounts it.

use std::path::PathBuf;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use crate::client::Client;
use crate::errors::CliError;

mod content;
mod fs;
mod remote;

use self::fs::{MountFs, Options, Shared, Stale};
use self::remote::Remote;

#[derive(Debug, clap::Args)]
pub struct MountArgs {
    /// The folder to mount: `PATH` in `--space`, or `SPACE:PATH`.
    pub folder: String,
    /// The local directory to mount it on (must exist).
    pub dir: PathBuf,
    /// Refuse every change (`EROFS`).
    #[arg(long)]
    pub read_only: bool,
    /// Bytes of file content kept in memory, by hash.
    #[arg(long, default_value_t = 256 << 20)]
    pub cache_bytes: usize,
    /// Where a file whose save conflicts with a change made elsewhere is
    /// kept (default: `$XDG_STATE_HOME/agentvfs/recovery`, else
    /// `~/.local/state/agentvfs/recovery`).
    #[arg(long)]
    pub recovery_dir: Option<PathBuf>,
    /// Tool-call ID recorded with every change made through the mount.
    #[arg(long, env = "AGENTVFS_TOOL_CALL")]
    pub tool_call: Option<String>,
}

/// `SPACE:PATH` or `PATH` (in `space`): the space and the folder's path.
fn parse_folder(folder: &str, space: &str) -> Result<(String, String), CliError> {
    let (space, path) = match folder.split_once(':') {
        Some((named, path)) if !named.is_empty() && !named.contains('/') => (named, path),
        _ => (space, folder),
    };
    if !path.starts_with('/') {
        return Err(CliError::Usage(format!("the folder to mount is an absolute path, such as /src, not {path:?}")));
    }
    let path = if path.len() > 1 { path.trim_end_matches('/') } else { path };
    Ok((space.to_owned(), path.to_owned()))
}

fn default_recovery() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir);
    state.join("agentvfs/recovery")
}

/// Mounts, serves until a signal or an unmount, and unmounts.
pub async fn run(
    addr: &str,
    token: Option<&str>,
    space: &str,
    session: Option<&str>,
    args: MountArgs,
) -> Result<(), CliError> {
    let (space, root) = parse_folder(&args.folder, space)?;
    let metadata = std::fs::metadata(&args.dir)
        .map_err(|error| CliError::Usage(format!("cannot mount on {}: {error}", args.dir.display())))?;
    if !metadata.is_dir() {
        return Err(CliError::Usage(format!("cannot mount on {}: not a directory", args.dir.display())));
    }
    let client = Client::with_tool_call(addr, token, session, args.tool_call.as_deref())?;
    let remote = Remote::new(client, space.clone(), tokio::runtime::Handle::current());
    // The folder must exist: a mount of nothing would fail every call.
    {
        let (remote, folder) = (remote.clone(), root.clone());
        tokio::task::spawn_blocking(move || remote.list(&folder))
            .await
            .map_err(|error| CliError::Other(error.to_string()))?
            .map_err(|failure| CliError::Other(format!("cannot mount {space}:{root}: {failure}")))?;
    }
    use std::os::unix::fs::MetadataExt as _;
    let options = Options {
        read_only: args.read_only,
        cache_bytes: args.cache_bytes,
        recovery: args.recovery_dir.unwrap_or_else(default_recovery),
        uid: metadata.uid(),
        gid: metadata.gid(),
    };
    let filesystem = MountFs::new(remote.clone(), &root, options);
    let shared = filesystem.shared();
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName(format!("agentvfs:{space}:{root}")),
        fuser::MountOption::Subtype("agentvfs".into()),
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
        if args.read_only { fuser::MountOption::RO } else { fuser::MountOption::RW },
    ];
    // Calls wait on the network: several at once keep a slow one from
    // holding up the rest.
    config.n_threads = Some(4);
    // Before the mount announces itself: a signal sent as soon as it has is
    // an unmount, not the default death.
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let session = fuser::spawn_mount(filesystem, &args.dir, &config).map_err(|error| {
        CliError::Other(format!(
            "cannot mount on {}: {error} (FUSE needs /dev/fuse, and root or fusermount3 from Debian's fuse3)",
            args.dir.display()
        ))
    })?;
    let follower = tokio::spawn(follow(remote, root.clone(), shared.clone(), session.notifier()));
    let settler = tokio::spawn(settle_removals(shared.clone()));
    eprintln!("agentvfs: {space}:{root} mounted on {}; Ctrl-C to unmount", args.dir.display());

    let mut poll = tokio::time::interval(Duration::from_millis(200));
    let unmounted = loop {
        tokio::select! {
            _ = terminate.recv() => break false,
            _ = interrupt.recv() => break false,
            _ = poll.tick() => if session.guard.is_finished() { break true },
        }
    };
    follower.abort();
    if !unmounted {
        detach(&args.dir)?;
    }
    // Files still open on the mount are served until they are closed, for
    // a while; then the process exits, and they fail with ENOTCONN. The
    // removals made meanwhile keep going out, and the last ones are sent
    // once serving stops.
    let stopped = tokio::task::spawn_blocking(move || session.join());
    let stopped = tokio::time::timeout(STOP_GRACE, stopped).await;
    settler.abort();
    let settled = tokio::task::spawn_blocking(move || shared.settle()).await;
    if let Ok(Err(failure)) = settled {
        eprintln!("agentvfs: files removed on the mount may still be on the service: {failure}");
    }
    match stopped {
        Ok(Ok(Ok(()))) => eprintln!("agentvfs: unmounted {}", args.dir.display()),
        Ok(Ok(Err(error))) => return Err(CliError::Other(format!("unmounting {}: {error}", args.dir.display()))),
        Ok(Err(error)) => return Err(CliError::Other(error.to_string())),
        Err(_) => eprintln!(
            "agentvfs: unmounted {}; files still open there after {STOP_GRACE:?} are cut off",
            args.dir.display()
        ),
    }
    Ok(())
}

/// Sends the files unlinked on the mount to the trash once the oldest has
/// waited [`fs::REMOVAL_DELAY`] for others to share its call.
async fn settle_removals(shared: std::sync::Arc<Shared>) {
    let mut tick = tokio::time::interval(fs::REMOVAL_DELAY / 2);
    loop {
        tick.tick().await;
        if shared.removals_due() {
            let shared = shared.clone();
            // Without a front they wait, and the next call says so.
            let _ = tokio::task::spawn_blocking(move || shared.settle()).await;
        }
    }
}

/// How long files still open at unmount keep being served.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Unmounts `dir` lazily, as libfuse does: it leaves the tree at once, and
/// whatever is still open or a working directory there goes on until it
/// lets go. As root directly, else through `fusermount3 -u -z`.
fn detach(dir: &std::path::Path) -> Result<(), CliError> {
    match rustix::mount::unmount(dir, rustix::mount::UnmountFlags::DETACH) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::PERM) => {
            let status = std::process::Command::new("fusermount3").arg("-u").arg("-z").arg(dir).status()?;
            if status.success() {
                Ok(())
            } else {
                Err(CliError::Other(format!("fusermount3 -u -z {} failed: {status}", dir.display())))
            }
        }
        Err(error) => Err(CliError::Other(format!("unmounting {}: {error}", dir.display()))),
    }
}

/// Follows the mounted folder's changes and drops what they make stale,
/// here and in the kernel, connecting again after a failure (and
/// forgetting everything then, since changes may have been missed).
async fn follow(remote: Remote, root: String, shared: std::sync::Arc<Shared>, notifier: fuser::Notifier) {
    // A notice may wait for a call in the same folder to be answered: the
    // kernel is told on a blocking thread, never on the runtime's.
    let tell = |stale: Vec<Stale>| {
        if !stale.is_empty() {
            let notifier = notifier.clone();
            tokio::task::spawn_blocking(move || stale.iter().for_each(|s| s.notify(&notifier)));
        }
    };
    loop {
        if let Ok(mut events) = remote.watch(&root).await {
            while let Ok(Some(event)) = events.message().await {
                shared.answered().await;
                tell(shared.seen(event.revision, &event.path, &event.old_path));
            }
        }
        tell(shared.forget_listings());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_names_its_space_or_takes_the_default() {
        assert_eq!(parse_folder("/src", "default").unwrap(), ("default".into(), "/src".into()));
        assert_eq!(parse_folder("proj:/src/", "default").unwrap(), ("proj".into(), "/src".into()));
        assert_eq!(parse_folder("proj:/", "default").unwrap(), ("proj".into(), "/".into()));
        assert!(parse_folder("src", "default").is_err());
    }
}
