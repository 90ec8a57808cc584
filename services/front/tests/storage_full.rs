//! End-to-end: a full disk under the store is STORAGE_FULL, and reads keep
//! working. Mounts a small tmpfs, so it runs as root (as CI does); elsewhere
//! it says why it did not run.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod support;

use std::process::Command;

use agentvfs_proto::v1 as pb;
use support::{Front, assert_error, read, write_bytes, write_text};
use tonic::Code;

struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &std::path::Path, size: &str) -> Option<Tmpfs> {
        let status =
            Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(dir).status();
        status.ok().filter(|s| s.success()).map(|_| Tmpfs(dir.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test]
async fn a_full_disk_refuses_writes_and_keeps_reads() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = Tmpfs::mount(dir.path(), "64m") else {
        eprintln!("storage_full: not run: mounting a tmpfs needs root");
        return;
    };
    // Room an operator can free later.
    let ballast = dir.path().join("ballast");
    std::fs::write(&ballast, vec![1u8; 16 << 20]).unwrap();
    // The reserve is what removal has to work with: sled rewrites the
    // leaves that held the removed chunks, so removing content takes free
    // space of about two thirds of its size here (7-11 MB to remove the
    // 14 MB written below). With a reserve of 16 MB against 24 MB written,
    // removal sometimes ran out of disk.
    let front = Front::start_at_with("127.0.0.1:0", dir.path(), &["--min-free-bytes", "32000000"]).await;
    front.space("s").await;
    let mut fs = front.fs().await;
    fs.write(write_text("s", "/kept.txt", "still readable\n")).await.unwrap();
    let mut full = None;
    for i in 0..200u32 {
        // Distinct content, so nothing is deduplicated.
        let body: Vec<u8> = (0..1_000_000u32).map(|b| (b.wrapping_mul(31).wrapping_add(i * 7) % 251) as u8).collect();
        match fs.write(write_bytes("s", &format!("/fill/{i}.bin"), &body)).await {
            Ok(_) => {}
            Err(status) => {
                full = Some(status);
                break;
            }
        }
    }
    let status = full.expect("a 64 MiB disk fills up");
    assert_error(&status, Code::ResourceExhausted, "STORAGE_FULL");
    assert_eq!(fs.read(read("s", "/kept.txt")).await.unwrap().into_inner().content, "still readable\n");
    let list = fs.list(pb::ListRequest { space: "s".into(), ..Default::default() }).await.unwrap();
    assert!(!list.into_inner().entries.is_empty());
    // Removal keeps working on a full disk.
    let remove = pb::RemoveRequest { space: "s".into(), path: "/fill".into(), recursive: true, ..Default::default() };
    front.admin().await.remove(remove).await.unwrap();
    // Once an operator frees room, writes resume; nothing acknowledged was lost.
    std::fs::remove_file(&ballast).unwrap();
    fs.write(write_text("s", "/after.txt", "written after the disk was freed\n")).await.unwrap();
    assert_eq!(fs.read(read("s", "/kept.txt")).await.unwrap().into_inner().content, "still readable\n");
}
