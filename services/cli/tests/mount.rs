//! `agentvfs mount` on a real FUSE mount against a real front and worker:
//! git, cp and grep on the mount, changes made elsewhere appearing, a
//! conflicting save kept as a draft, read-only mounts, and a clean unmount.
//!
//! These tests need FUSE (`/dev/fuse`, and root or `fusermount3`); without
//! it they fail, never pass silently.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{Killed, Stack};

/// A running `agentvfs mount`; unmounted (SIGKILL, then a lazy unmount) if
/// a test fails before it stops it.
struct Mount {
    process: Killed,
    dir: PathBuf,
    /// What the mount logged on stderr.
    log: Arc<Mutex<String>>,
}

impl Mount {
    fn start(stack: &Stack, folder: &str, dir: &Path, extra: &[&str]) -> Mount {
        std::fs::create_dir_all(dir).unwrap();
        let recovery = stack.temp.path().join("recovery");
        let mut args = vec!["mount", folder, dir.to_str().unwrap(), "--recovery-dir", recovery.to_str().unwrap()];
        args.extend_from_slice(extra);
        let mut child =
            stack.command(&args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let log = Arc::new(Mutex::new(String::new()));
        let (mounted, ready) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if line.contains(" mounted on ") {
                    let _ = mounted.send(());
                }
                sink.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        let mount = Mount { process: Killed(child), dir: dir.to_owned(), log };
        assert!(ready.recv_timeout(Duration::from_secs(30)).is_ok(), "the mount never came up:\n{}", mount.log());
        mount
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The draft the mount said it kept, if it has said so yet.
    fn kept_draft(&self) -> Option<PathBuf> {
        let log = self.log();
        log.lines()
            .find_map(|line| line.split_once("this copy is kept at ").map(|(_, path)| PathBuf::from(path.trim())))
    }

    /// The draft the mount keeps, waited for: a file's release, which saves
    /// it a last time, reaches the mount after its close has returned.
    fn draft(&self) -> PathBuf {
        let started = Instant::now();
        loop {
            if let Some(draft) = self.kept_draft() {
                return draft;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "no draft in the log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM; the exit status.
    fn stop(&mut self) -> std::process::ExitStatus {
        let pid = self.process.0.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.process.0.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the mount did not stop:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = self.process.0.kill();
        let _ = self.process.0.wait();
        let _ = Command::new("umount").arg("-l").arg(&self.dir).stderr(Stdio::null()).status();
    }
}

fn mounted(dir: &Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap();
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .any(|line| line.split(' ').nth(1) == Some(dir.to_str().unwrap()))
}

/// Runs `script` with bash in `dir`; panics with its output unless it succeeds.
#[track_caller]
fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("bash").arg("-ceu").arg(script).current_dir(dir).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{script}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    stdout.into_owned()
}

/// A tree of `files` files in a few folders, some with `needle` in them.
fn make_tree(root: &Path, files: usize) {
    for n in 0..files {
        let dir = root.join(format!("pkg{}/sub{}", n % 7, n % 3));
        std::fs::create_dir_all(&dir).unwrap();
        let needle = if n % 10 == 0 { "needle\n" } else { "" };
        let body = format!("// file {n}\n{needle}{}\n", "x".repeat(n * 37 % 4000));
        std::fs::write(dir.join(format!("f{n}.rs")), body).unwrap();
    }
    // A binary file, byte for byte.
    std::fs::write(root.join("blob.bin"), (0..=255u8).cycle().take(300_000).collect::<Vec<_>>()).unwrap();
}

#[test]
fn git_cp_and_grep_work_on_a_mount_and_every_save_is_a_version() {
    let stack = Stack::start();
    stack.ok(&["write", "/proj/README.md", "--content", "hello\n"]);
    let mnt = stack.temp.path().join("mnt");
    let mut mount = Mount::start(&stack, "/proj", &mnt, &[]);
    assert!(mounted(&mnt));
    assert_eq!(std::fs::read_to_string(mnt.join("README.md")).unwrap(), "hello\n");

    // A git repository of a few hundred files, committed on the mount.
    let repo = mnt.join("repo");
    std::fs::create_dir(&repo).unwrap();
    make_tree(&repo, 300);
    sh(&repo, "git init -q . && git add . && git -c user.email=a@example.com -c user.name=agent commit -qm first");
    assert_eq!(sh(&repo, "git status --porcelain"), "", "the work tree is clean after the commit");
    assert!(sh(&repo, "git log --oneline").ends_with(" first\n"));
    sh(&repo, "git fsck --strict --no-progress");
    // The kernel drops what it cached and forgets its inodes: every path is
    // looked up again, as a new inode, and nothing changes for git.
    std::fs::write("/proc/sys/vm/drop_caches", "2").expect("dropping the kernel's caches (the suite runs as root)");
    assert_eq!(sh(&repo, "git status --porcelain"), "", "the work tree is clean after the kernel forgot it");
    sh(
        &repo,
        "echo change >> pkg0/sub0/f0.rs && git -c user.email=a@example.com -c user.name=agent commit -qam second",
    );
    assert_eq!(sh(&repo, "git log --oneline | wc -l").trim(), "2");

    // cp -r in and out, byte for byte.
    let local = stack.temp.path().join("local");
    make_tree(&local, 120);
    sh(stack.temp.path(), "cp -r local mnt/copied && cp -r mnt/copied back && diff -r local back");

    // git clone into the mount: index-pack reads its pack back through a
    // second descriptor while the first still writes it.
    sh(&local, "git init -q . && git add . && git -c user.email=a@example.com -c user.name=agent commit -qm local");
    sh(stack.temp.path(), "git clone -q --no-hardlinks file://$PWD/local mnt/cloned");
    assert_eq!(sh(&mnt.join("cloned"), "git status --porcelain"), "");
    sh(&mnt.join("cloned"), "git fsck --strict --no-progress && diff -r --exclude=.git . ../../local");

    // grep on the mount finds what Grep through the service finds.
    let on_mount: BTreeSet<String> =
        sh(&mnt, "grep -rl needle copied").lines().map(|line| format!("/proj/{line}")).collect();
    let through_api: BTreeSet<String> =
        stack.ok(&["grep", "-l", "--all", "needle", "/proj/copied"]).lines().map(str::to_owned).collect();
    assert_eq!(on_mount.len(), 12);
    assert_eq!(on_mount, through_api);

    // Each saved file is a version in the space, with the mount's bytes.
    let versions = stack.ok(&["versions", "/proj/repo/pkg0/sub0/f0.rs"]);
    assert_eq!(versions.lines().filter(|line| line.contains('v')).count(), 2, "{versions}");
    let blob = stack.run_with_bytes(&["resolve", "/proj/copied/blob.bin"], b"");
    assert_eq!(blob.code, 0, "{blob:?}");

    // Renames and removals are the service's moves and trash.
    sh(&mnt, "mkdir moved && mv copied/pkg1 moved/ && mv moved/pkg1 moved/renamed && rm -r copied/pkg2");
    let listed = stack.ok(&["ls", "/proj/moved"]);
    assert!(listed.contains("/proj/moved/renamed/"), "{listed}");
    assert_eq!(stack.run(&["ls", "/proj/copied/pkg2"]).code, 3);

    assert!(mount.stop().success(), "{}", mount.log());
    assert!(!mounted(&mnt), "still mounted after SIGTERM");
}

/// Waits until `done` holds, failing after `limit` with what should have
/// happened.
fn within(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The revision of the stack's space.
fn revision(stack: &Stack) -> u64 {
    let spaces = stack.ok(&["space", "list"]);
    let line = spaces.lines().find(|line| line.starts_with("default\t")).unwrap_or_else(|| panic!("{spaces}"));
    line.rsplit("\tr").next().unwrap().parse().unwrap()
}

#[test]
fn unlinks_travel_in_batches_and_in_order() {
    let stack = Stack::start();
    stack.ok(&["write", "/r/keep.txt", "--content", "keep\n"]);
    let mnt = stack.temp.path().join("mnt");
    let mount = Mount::start(&stack, "/r", &mnt, &[]);
    sh(&mnt, "mkdir many && for i in $(seq 45); do echo $i > many/f$i; done");

    // Gone from the service once `rm -r` returns (the folder's removal sends
    // the files' first), in a few calls rather than one a file.
    let before = revision(&stack);
    sh(&mnt, "rm -r many");
    assert_eq!(stack.run(&["ls", "/r/many"]).code, 3, "{}", mount.log());
    let calls = revision(&stack) - before;
    assert!(calls <= 12, "46 removals took {calls} revisions");

    // A lone unlink reaches the service with nothing else sent after it.
    sh(&mnt, "rm keep.txt");
    within(Duration::from_secs(2), "the unlink reached the service", || stack.run(&["ls", "/r/keep.txt"]).code == 3);

    // An unlink, then a new file at the same path: in that order.
    sh(&mnt, "echo one > again.txt && rm again.txt && echo two > again.txt");
    let on_server = stack.ok(&["read", "/r/again.txt"]);
    assert!(on_server.contains("two") && !on_server.contains("one"), "{on_server}");
    assert_eq!(std::fs::read_to_string(mnt.join("again.txt")).unwrap(), "two\n");
}

#[test]
fn the_mounts_own_saves_keep_its_listings() {
    let mut stack = Stack::start();
    stack.restart_front_with(&["--metrics-listen", "127.0.0.1:0"]);
    stack.ok(&["write", "/own/keep.txt", "--content", "keep\n"]);
    let mnt = stack.temp.path().join("mnt");
    let mount = Mount::start(&stack, "/own", &mnt, &[]);
    let flushes = stack.flushes();
    // `Watch` reports each save, often before the save's reply reaches the
    // mount: the listing the save updated must not be fetched again for it.
    sh(&mnt, "mkdir d && for i in $(seq 100); do echo $i > d/f$i; test -e d/g$i && exit 1; done; true");
    let lists = stack.calls("List");
    assert!(lists <= 10, "100 new files took {lists} listings:\n{}", mount.log());
    assert_eq!(stack.calls("Write"), 101);
    // The mount's `Watch` waits for each save to be on disk before it
    // reports it: the save's own flush covers that wait.
    let flushes = stack.flushes() - flushes;
    assert!(flushes <= 110, "a folder and 100 files took {flushes} flushes");
    assert_eq!(sh(&mnt, "ls d | wc -l").trim(), "100");
}

#[test]
fn the_executable_bit_is_kept_both_ways() {
    let stack = Stack::start();
    let script = "#!/bin/sh\necho from the service\n";
    stack.ok(&["write", "/x/tool.sh", "--content", script, "--executable", "true"]);
    let mnt = stack.temp.path().join("mnt");
    let mut mount = Mount::start(&stack, "/x", &mnt, &[]);
    let executable = |name: &str| -> bool {
        let listing = stack.ok(&["--json", "ls", "/x"]);
        let page: serde_json::Value = serde_json::from_str(&listing).unwrap();
        let entries = page["entries"].as_array().unwrap();
        let entry = entries.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("{name} in {listing}"));
        entry["executable"].as_bool().unwrap_or(false)
    };

    // Written elsewhere with the bit: it runs from the mount.
    assert_eq!(sh(&mnt, "stat -c %a tool.sh"), "755\n");
    assert_eq!(sh(&mnt, "./tool.sh"), "from the service\n");

    // Made executable on the mount: a version with the bit, and back off.
    sh(&mnt, "printf '#!/bin/sh\\necho made here\\n' > made.sh && chmod +x made.sh");
    assert_eq!(sh(&mnt, "./made.sh"), "made here\n");
    assert!(executable("made.sh"));
    sh(&mnt, "chmod -x tool.sh");
    assert!(!executable("tool.sh"));
    assert_eq!(sh(&mnt, "stat -c %a tool.sh"), "644\n");
    // Other mode bits are the service's: a chmod that keeps the bit saves nothing.
    sh(&mnt, "chmod 700 made.sh");
    assert_eq!(sh(&mnt, "stat -c %a made.sh"), "755\n");
    for (file, count) in [("tool.sh", 2), ("made.sh", 2)] {
        let versions = stack.ok(&["versions", &format!("/x/{file}")]);
        assert_eq!(versions.lines().filter(|line| line.contains('v')).count(), count, "{versions}");
    }

    // A clone keeps its scripts executable, and git sees no mode change.
    let local = stack.temp.path().join("local");
    std::fs::create_dir(&local).unwrap();
    sh(
        &local,
        "printf '#!/bin/sh\\necho cloned\\n' > run.sh && chmod 755 run.sh && echo data > plain.txt \
         && git init -q . && git add . && git -c user.email=a@example.com -c user.name=agent commit -qm local",
    );
    sh(stack.temp.path(), "git clone -q --no-hardlinks file://$PWD/local mnt/cloned");
    assert_eq!(sh(&mnt.join("cloned"), "git status --porcelain"), "");
    assert_eq!(sh(&mnt.join("cloned"), "./run.sh"), "cloned\n");
    assert_eq!(sh(&mnt.join("cloned"), "stat -c %a run.sh plain.txt"), "755\n644\n");

    assert!(mount.stop().success(), "{}", mount.log());
}

/// Opens the file in argv[1] to write, writes a draft, says `written`,
/// waits for a line, then fsyncs and says how that went.
const CONFLICTED_WRITER: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC)
os.write(fd, b"local draft\n")
print("written", flush=True)
sys.stdin.readline()
try:
    os.fsync(fd)
    print("fsync: ok", flush=True)
except OSError as error:
    print(f"fsync: {error.errno}", flush=True)
os.close(fd)
"#;

#[test]
fn changes_made_elsewhere_appear_and_a_conflicting_save_keeps_the_draft() {
    let stack = Stack::start();
    stack.ok(&["write", "/w/notes.txt", "--content", "first\n"]);
    let mnt = stack.temp.path().join("mnt");
    let mount = Mount::start(&stack, "/w", &mnt, &[]);
    assert_eq!(std::fs::read_to_string(mnt.join("notes.txt")).unwrap(), "first\n");

    // A write through the service shows on the mount within about a second.
    stack.ok(&["write", "/w/notes.txt", "--content", "second\n"]);
    stack.ok(&["write", "/w/new.txt", "--content", "new\n"]);
    within(Duration::from_millis(2500), "the change showed on the mount", || {
        std::fs::read_to_string(mnt.join("notes.txt")).unwrap() == "second\n" && mnt.join("new.txt").exists()
    });
    // A change of the same size too: the pages the kernel cached of the
    // version read before are not served for the new one.
    stack.ok(&["write", "/w/notes.txt", "--content", "SECOND\n"]);
    within(Duration::from_secs(3), "the same-size change showed on the mount", || {
        std::fs::read_to_string(mnt.join("notes.txt")).unwrap() == "SECOND\n"
    });

    // A rename and a removal elsewhere show too, although the kernel had
    // looked both names up and may keep names for longer than a second.
    assert_eq!(std::fs::read_to_string(mnt.join("new.txt")).unwrap(), "new\n");
    let batch = |name: &str, actions: &str| {
        let file = stack.temp.path().join(format!("{name}.json"));
        std::fs::write(&file, actions).unwrap();
        stack.ok(&["batch", file.to_str().unwrap(), "--apply", "--idempotency-key", name]);
    };
    batch("rename-elsewhere", r#"[{"rename":{"path":"/w/new.txt","newName":"renamed.txt"}}]"#);
    within(Duration::from_secs(3), "the rename showed on the mount", || {
        !mnt.join("new.txt").exists() && mnt.join("renamed.txt").exists()
    });
    batch("trash-elsewhere", r#"[{"trash":{"path":"/w/renamed.txt"}}]"#);
    within(Duration::from_secs(3), "the removal showed on the mount", || {
        std::fs::metadata(mnt.join("renamed.txt")).is_err()
    });

    // Opened on the mount, changed through the service, then fsynced and
    // closed: the save fails with EIO, the server keeps its version, and
    // the draft is kept where the log says. The writer is a process of its
    // own, so that no other process inherits its descriptor (a close of an
    // inherited copy saves too, as close(2) does).
    let mut writer = Command::new("python3")
        .arg("-c")
        .arg(CONFLICTED_WRITER)
        .arg(mnt.join("notes.txt"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut replies = BufReader::new(writer.stdout.take().unwrap()).lines();
    assert_eq!(replies.next().unwrap().unwrap(), "written");
    stack.ok(&["write", "/w/notes.txt", "--content", "third, from elsewhere\n"]);
    writeln!(writer.stdin.as_mut().unwrap(), "go").unwrap();
    assert_eq!(replies.next().unwrap().unwrap(), format!("fsync: {}", libc::EIO));
    assert!(writer.wait().unwrap().success());
    let on_server = stack.ok(&["read", "/w/notes.txt"]);
    assert!(on_server.contains("third, from elsewhere") && !on_server.contains("draft"), "{on_server}");
    let draft = mount.draft();
    assert_eq!(std::fs::read_to_string(draft).unwrap(), "local draft\n");
    // The next open sees the server's version.
    within(Duration::from_secs(3), "the server's version showed", || {
        std::fs::read_to_string(mnt.join("notes.txt")).unwrap() == "third, from elsewhere\n"
    });
}

#[test]
fn a_save_past_the_quota_fails_with_edquot_and_keeps_the_draft() {
    let stack = Stack::start();
    stack.ok(&["write", "/q/a.txt", "--content", "small\n"]);
    let mnt = stack.temp.path().join("mnt");
    let mount = Mount::start(&stack, "/q", &mnt, &[]);
    // Room for 1,000 bytes more than the space holds.
    let space = stack.ok(&["--json", "quota", "set", "default", "--bytes", "0"]);
    let space: serde_json::Value = serde_json::from_str(&space).unwrap();
    let used: u64 = space["usage"]["bytes"].as_str().unwrap_or_else(|| panic!("{space}")).parse().unwrap();
    stack.ok(&["quota", "set", "default", "--bytes", &(used + 1000).to_string()]);

    std::fs::write(mnt.join("fits.txt"), "fits\n").unwrap();
    let mut big = std::fs::File::create(mnt.join("big.txt")).unwrap();
    big.write_all(&[b'x'; 4000]).unwrap();
    assert_eq!(big.sync_all().unwrap_err().raw_os_error(), Some(libc::EDQUOT));
    drop(big);

    assert_eq!(stack.ok(&["read", "/q/fits.txt"]), "fits\n");
    assert_eq!(stack.run(&["read", "/q/big.txt"]).code, 3, "nothing past the quota is saved");
    let draft = mount.draft();
    assert_eq!(std::fs::read(draft).unwrap(), [b'x'; 4000]);
}

/// A tmpfs of `size` on `dir`, unmounted (lazily) on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        let status =
            Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(dir).status();
        assert!(status.unwrap().success(), "mounting a tmpfs needs root, as FUSE does here");
        Tmpfs(dir.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_save_on_a_full_disk_fails_with_enospc_and_keeps_the_draft() {
    let mut stack = Stack::start();
    // The front starts again with its store on a 64 MiB disk whose writes
    // stop 40 MB short of full.
    stack.kill_front();
    let data = stack.data_dir();
    std::fs::remove_dir_all(&data).unwrap();
    std::fs::create_dir(&data).unwrap();
    let _disk = Tmpfs::mount(&data, "64m");
    stack.restart_front_with(&["--min-free-bytes", "40000000"]);
    stack.create_default_space();
    stack.ok(&["write", "/full/kept.txt", "--content", "kept\n"]);
    let mnt = stack.temp.path().join("mnt");
    let mount = Mount::start(&stack, "/full", &mnt, &[]);

    // Files of 1 MiB, each saved when synced, until the disk is full.
    let bytes = |n: usize| vec![n as u8; 1 << 20];
    let mut refused = None;
    for n in 0..64 {
        let mut file = std::fs::File::create(mnt.join(format!("{n}.bin"))).unwrap();
        file.write_all(&bytes(n)).unwrap();
        if let Err(error) = file.sync_all() {
            refused = Some((n, file, error));
            break;
        }
    }
    let (refused, file, error) = refused.expect("64 MiB of files fit on a 64 MiB disk");
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
    assert!(refused > 0, "the disk had room for some files");
    let refused_path = format!("/full/{refused}.bin");
    assert_eq!(stack.run(&["read", &refused_path]).code, 3, "nothing past a full disk is saved");

    // What was saved before stays readable, through the mount and the API.
    assert_eq!(std::fs::read_to_string(mnt.join("kept.txt")).unwrap(), "kept\n");
    assert_eq!(std::fs::read(mnt.join("0.bin")).unwrap(), bytes(0));
    // Nothing of the refused file is lost: its release (which the kernel
    // sends after the close returns) saves it again, which succeeds if the
    // store found room meanwhile, else keeps its draft.
    drop(file);
    let hash = blake3::hash(&bytes(refused)).to_hex().to_string();
    let started = Instant::now();
    loop {
        if let Some(draft) = mount.kept_draft() {
            assert_eq!(std::fs::read(draft).unwrap(), bytes(refused));
            break;
        }
        if stack.run(&["--json", "versions", &refused_path]).stdout.contains(&hash) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "neither saved nor kept:\n{}", mount.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_read_only_mount_refuses_every_change() {
    let stack = Stack::start();
    stack.ok(&["write", "/r/a.txt", "--content", "kept\n"]);
    let mnt = stack.temp.path().join("mnt");
    let _mount = Mount::start(&stack, "/r", &mnt, &["--read-only"]);
    assert_eq!(std::fs::read_to_string(mnt.join("a.txt")).unwrap(), "kept\n");
    let erofs = |result: std::io::Result<()>| result.unwrap_err().raw_os_error();
    assert_eq!(erofs(std::fs::write(mnt.join("a.txt"), "no")), Some(libc::EROFS));
    assert_eq!(erofs(std::fs::write(mnt.join("b.txt"), "no")), Some(libc::EROFS));
    assert_eq!(erofs(std::fs::create_dir(mnt.join("d"))), Some(libc::EROFS));
    assert_eq!(erofs(std::fs::remove_file(mnt.join("a.txt"))), Some(libc::EROFS));
    assert_eq!(stack.ok(&["ls", "/r"]).lines().count(), 1);
}

#[test]
fn a_lost_front_fails_calls_with_eio_and_the_mount_serves_again_once_it_is_back() {
    let mut stack = Stack::start();
    stack.ok(&["write", "/l/a.txt", "--content", "before\n"]);
    let mnt = stack.temp.path().join("mnt");
    let mount = Mount::start(&stack, "/l", &mnt, &[]);
    assert_eq!(std::fs::read_to_string(mnt.join("a.txt")).unwrap(), "before\n");

    stack.kill_front();
    // Past what the mount and the kernel may answer from memory.
    std::thread::sleep(Duration::from_millis(1200));
    let started = Instant::now();
    let listed = std::fs::read_dir(&mnt).and_then(|entries| entries.collect::<Result<Vec<_>, _>>());
    assert_eq!(listed.unwrap_err().raw_os_error(), Some(libc::EIO));
    let written = std::fs::write(mnt.join("b.txt"), "lost\n");
    assert_eq!(written.unwrap_err().raw_os_error(), Some(libc::EIO));
    assert!(started.elapsed() < Duration::from_secs(5), "failing took {:?}", started.elapsed());

    stack.restart_front();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::write(mnt.join("b.txt"), "after\n").is_err() {
        assert!(Instant::now() < deadline, "the mount never served again:\n{}", mount.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(stack.ok(&["read", "/l/b.txt"]).contains("after"));
    assert_eq!(std::fs::read_to_string(mnt.join("a.txt")).unwrap(), "before\n");
}

#[test]
fn a_mount_still_in_use_unmounts_and_exits_on_sigterm() {
    let stack = Stack::start();
    stack.ok(&["write", "/u/a.txt", "--content", "a\n"]);
    let mnt = stack.temp.path().join("mnt");
    let mut mount = Mount::start(&stack, "/u", &mnt, &[]);
    // A shell whose working directory is on the mount keeps it busy.
    let _busy = Killed(Command::new("sleep").arg("120").current_dir(&mnt).spawn().unwrap());
    let started = Instant::now();
    assert!(mount.stop().success(), "{}", mount.log());
    assert!(started.elapsed() < Duration::from_secs(20), "stopping took {:?}", started.elapsed());
    assert!(!mounted(&mnt), "still mounted after SIGTERM");
}
