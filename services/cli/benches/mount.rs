//! `agentvfs mount` against local disk, the same work in the same run:
//! `git clone` of a local repository of 5,000 files, `tar x` of an archive
//! of that tree, `grep -r` over it with a cold and a warm cache, a small
//! build (`python3 -m compileall` of its Python files) and `rm -rf` of it.
//! Prints seconds and the mount ÷ disk ratio of each step, and writes them
//! to `target/bench-mount.json`.
//!
//! Run with `cargo bench -p agentvfs --bench mount` (as root, or with
//! `fusermount3`). Release builds of the front and the worker are built
//! first, and run on loopback with a sled store in a temporary directory.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

/// Files in the generated source tree.
const FILES: usize = 5_000;
/// Files per folder.
const PER_FOLDER: usize = 50;

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cli() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_agentvfs"))
}

/// Builds the front and the worker beside this benchmark's `agentvfs`.
fn servers() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args(["build", "--release", "--locked", "--quiet", "-p", "agentvfs-front", "-p", "agentvfs-worker"])
        .status()
        .unwrap();
    assert!(status.success(), "building the front and the worker failed");
    cli().parent().unwrap().to_owned()
}

fn listening(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    line.trim().strip_prefix("listening on ").unwrap().to_owned()
}

/// A worker and a front on loopback, with a space named `default`.
fn start_service(dir: &Path) -> (String, Killed, Killed) {
    let bin = servers();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let front_addr = format!("127.0.0.1:{port}");
    let mut worker = Killed(
        Command::new(bin.join("agentvfs-worker"))
            .args(["--listen", "127.0.0.1:0", "--front", &front_addr, "--index-dir"])
            .arg(dir.join("index"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let worker_addr = listening(&mut worker.0);
    let mut front = Killed(
        Command::new(bin.join("agentvfs-front"))
            .args(["--listen", &front_addr, "--worker", &worker_addr, "--dev", "--rate-limit", "0", "--data-dir"])
            .arg(dir.join("data"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    listening(&mut front.0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !agentvfs(&front_addr, &["space", "create", "default"]) {
        assert!(Instant::now() < deadline, "the front never served");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(agentvfs(&front_addr, &["write", "/bench/.keep", "--content", ""]));
    (front_addr, front, worker)
}

fn agentvfs(addr: &str, args: &[&str]) -> bool {
    let out = Command::new(cli()).args(["--addr", addr]).args(args).output().unwrap();
    out.status.success()
}

/// A running mount, unmounted on drop even when the bench panics, so that
/// no dead mount is left behind.
struct Mounted {
    process: Killed,
    dir: PathBuf,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = self.process.0.kill();
        let _ = self.process.0.wait();
        let _ = Command::new("umount").arg("-l").arg(&self.dir).stderr(Stdio::null()).status();
    }
}

/// `agentvfs mount default:/bench DIR`, once it says it is mounted.
fn mount(addr: &str, dir: &Path) -> Mounted {
    let mut child = Command::new(cli())
        .args(["--addr", addr, "mount", "default:/bench"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains(" mounted on ") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "the mount exited");
    }
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    Mounted { process: Killed(child), dir: dir.to_owned() }
}

/// Unmounts: SIGTERM, then waits for the exit.
fn unmount(mut mount: Mounted) {
    Command::new("kill").args(["-TERM", &mount.process.0.id().to_string()]).status().unwrap();
    mount.process.0.wait().unwrap();
}

/// A source tree of [`FILES`] files, some of them Python, some with `needle`.
fn make_tree(root: &Path) {
    for n in 0..FILES {
        let dir = root.join(format!("mod{:03}", n / PER_FOLDER));
        std::fs::create_dir_all(&dir).unwrap();
        let padding = "# filler line of a source file\n".repeat(n * 7 % 120);
        let needle = if n % 50 == 0 { "NEEDLE = 1\n" } else { "" };
        let (name, body) = if n % 25 == 0 {
            (format!("m{n}.py"), format!("def f{n}(x):\n    return x + {n}\n{needle}{padding}"))
        } else {
            (format!("f{n}.txt"), format!("file {n}\n{needle}{padding}"))
        };
        std::fs::write(dir.join(name), body).unwrap();
    }
}

#[track_caller]
fn sh(dir: &Path, script: &str) -> Duration {
    let started = Instant::now();
    let out = Command::new("bash").arg("-ceu").arg(script).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    started.elapsed()
}

/// Drops the kernel's page cache when allowed (root), so a cold read reads.
fn drop_page_cache() {
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3\n");
}

fn main() {
    let temp = tempfile::tempdir().unwrap();
    let work = temp.path();
    let (addr, _front, _worker) = start_service(&work.join("service"));

    // The inputs, on local disk: a repository and an archive of its tree.
    let source = work.join("source");
    make_tree(&source);
    sh(&source, "git init -q . && git add . && git -c user.email=b@example.com -c user.name=bench commit -qm tree");
    sh(work, "tar cf tree.tar -C source --exclude=.git .");

    let local = work.join("local");
    let mounted = work.join("mnt");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::create_dir_all(&mounted).unwrap();
    let mut on_mount = mount(&addr, &mounted);

    let steps = ["git clone", "tar x", "grep -r, cold", "grep -r, warm", "compileall", "rm -rf"];
    let mut results = Vec::new();
    for (target, is_mount) in [(&local, false), (&mounted, true)] {
        let clone = format!("git clone -q --no-hardlinks file://{} clone", source.display());
        let mut times = vec![sh(target, &clone)];
        times.push(sh(target, &format!("mkdir untar && tar xf {} -C untar", work.join("tree.tar").display())));
        // Cold: nothing of the tree in memory, on either side.
        if is_mount {
            unmount(on_mount);
            on_mount = mount(&addr, &mounted);
        }
        drop_page_cache();
        times.push(sh(target, "grep -rl NEEDLE untar | wc -l"));
        times.push(sh(target, "grep -rl NEEDLE untar | wc -l"));
        times.push(sh(target, "python3 -m compileall -q untar > /dev/null"));
        times.push(sh(target, "rm -rf clone untar"));
        results.push(times);
    }
    unmount(on_mount);

    println!("\n`agentvfs mount` against local disk, {FILES} files in folders of {PER_FOLDER}");
    println!("{:<16} {:>10} {:>10} {:>8}", "step", "disk s", "mount s", "ratio");
    let mut report = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        let (disk, mount) = (results[0][index].as_secs_f64(), results[1][index].as_secs_f64());
        let ratio = mount / disk.max(1e-6);
        println!("{step:<16} {disk:>10.3} {mount:>10.3} {ratio:>7.1}x");
        report.push(json!({"step": step, "disk_seconds": disk, "mount_seconds": mount, "ratio": ratio}));
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-mount.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json!({"files": FILES, "steps": report})).unwrap()).unwrap();
    println!("\nwrote {}", path.display());
}
