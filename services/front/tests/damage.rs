//! A damaged store is refused at startup with a clear error naming the
//! file, never served with acknowledged changes missing, and never replaced
//! by an empty store.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;
use support::{Front, read, write_text};

/// A cleanly stopped store with 100 acknowledged files.
async fn stopped_store() -> (Front, std::path::PathBuf) {
    let mut front = Front::start().await;
    front.space("s").await;
    let mut fs = front.fs().await;
    for n in 0..100 {
        fs.write(write_text("s", &format!("/f{n}.txt"), &format!("file {n} {}\n", "x".repeat(3_000)))).await.unwrap();
    }
    assert!(front.terminate().await.success());
    let dir = front.data_dir.clone();
    (front, dir)
}

/// Starts a front on `dir` and returns its exit code and stderr, or `None`
/// if it was still running after a few seconds.
fn start_on(dir: &Path) -> Option<(i32, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentvfs-front"))
        .args(["--dev", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
            return Some((status.code().unwrap_or(-1), stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Starting on `dir` fails naming `names`; with `untouched`, the `db` file
/// is left exactly as it was (sled's recovery may trim a damaged one).
fn refused(dir: &Path, damage: &str, names: &str, untouched: bool) {
    let db = std::fs::read(dir.join("db")).ok();
    let (code, stderr) = start_on(dir).unwrap_or_else(|| panic!("{damage}: the front served a damaged store"));
    assert_ne!(code, 0, "{damage}: {stderr}");
    assert!(stderr.contains(names) && stderr.contains("damaged"), "{damage}: {stderr}");
    if untouched {
        assert_eq!(std::fs::read(dir.join("db")).ok(), db, "{damage}: refusing must leave the files as they were");
    }
}

#[tokio::test]
async fn damaged_store_files_are_refused_naming_the_file() {
    let db_size = |dir: &Path| std::fs::metadata(dir.join("db")).unwrap().len();

    let (_front, dir) = stopped_store().await;
    std::fs::File::create(dir.join("db")).unwrap();
    refused(&dir, "db truncated to nothing", &dir.join("db").display().to_string(), true);

    let (_front, dir) = stopped_store().await;
    std::fs::remove_file(dir.join("db")).unwrap();
    refused(&dir, "db removed", &dir.join("db").display().to_string(), true);

    let (_front, dir) = stopped_store().await;
    let file = std::fs::OpenOptions::new().write(true).open(dir.join("db")).unwrap();
    file.set_len(db_size(&dir) / 2).unwrap();
    refused(&dir, "db truncated to half", &dir.join("db").display().to_string(), false);

    // In the middle of the log: its first segment may hold only records
    // that later ones replaced, which the store can lose without losing a
    // change (and then rightly opens).
    let (_front, dir) = stopped_store().await;
    let mut bytes = std::fs::read(dir.join("db")).unwrap();
    let middle = bytes.len() / 2;
    for (i, byte) in bytes[middle..middle + 4096].iter_mut().enumerate() {
        *byte = (i * 131 % 251) as u8;
    }
    std::fs::write(dir.join("db"), bytes).unwrap();
    refused(&dir, "db overwritten in the middle", &dir.join("db").display().to_string(), false);
}

#[tokio::test]
async fn a_store_that_lost_nothing_opens_with_everything() {
    // sled's own configuration file is rebuilt from the data: nothing lost.
    let (_front, dir) = stopped_store().await;
    std::fs::write(dir.join("conf"), "garbage").unwrap();
    let front = Front::start_at_with("127.0.0.1:0", dir.parent().unwrap(), &[]).await;
    let mut fs = front.fs().await;
    for n in 0..100 {
        let back = fs.read(read("s", &format!("/f{n}.txt"))).await.unwrap().into_inner();
        assert!(back.content.starts_with(&format!("file {n} ")));
    }
}

/// Receipts survive a restart on their shelf, so a retried call is answered
/// as before; a shelf that is damaged is refused, naming it.
#[tokio::test]
async fn receipts_outlive_a_restart_and_a_damaged_shelf_is_refused() {
    let write = |n: u32| {
        let mut request = write_text("s", &format!("/f{n}.txt"), "first\n");
        request.idempotency_key = format!("key-{n}");
        request
    };
    let mut front = Front::start().await;
    front.space("s").await;
    let mut fs = front.fs().await;
    let mut versions = Vec::new();
    for n in 0..20 {
        versions.push(fs.write(write(n)).await.unwrap().into_inner().version);
    }
    assert!(front.terminate().await.success());
    let dir = front.data_dir.clone();
    let shelves: Vec<_> = std::fs::read_dir(dir.join("receipts")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(shelves.len(), 1, "a clean stop shelves the receipts: {shelves:?}");

    let again = Front::start_at_with("127.0.0.1:0", dir.parent().unwrap(), &[]).await;
    let mut fs = again.fs().await;
    for n in 0..20 {
        let mut request = write(n);
        request.body = Some(pb::write_request::Body::Content("changed\n".into()));
        let error = fs.write(request).await.unwrap_err();
        assert_eq!(support::reason(&error), "IDEMPOTENCY_KEY_REUSED", "{n}: {error:?}");
        let replayed = fs.write(write(n)).await.unwrap().into_inner();
        assert_eq!(replayed.version, versions[n as usize], "the retry gets the original answer");
    }
    let back = fs.read(read("s", "/f0.txt")).await.unwrap().into_inner();
    assert_eq!(back.content, "first\n");
    drop(again);

    let bytes = std::fs::read(&shelves[0]).unwrap();
    std::fs::write(&shelves[0], &bytes[..bytes.len() - 1]).unwrap();
    refused(&dir, "a shelf of receipts cut short", &shelves[0].display().to_string(), true);
}
