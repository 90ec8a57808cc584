//! End-to-end: a full disk under the store is STORAGE_FULL, and reads keep
//! working. Mounts a small tmpfs, so it runs as root (as CI does); elsewhere
//! it says why it did not run.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::process::Command;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use support::{Front, assert_error, read, write_bytes, write_text};
use tonic::Code;
use tonic::transport::Channel;

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

/// A 64 MiB tmpfs holding 16 MiB of ballast, room an operator can free later.
struct SmallDisk {
    // Unmounted before the directory is removed.
    _mount: Tmpfs,
    dir: tempfile::TempDir,
    ballast: std::path::PathBuf,
}

impl SmallDisk {
    /// `None` (saying why) where a tmpfs cannot be mounted.
    fn mount() -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let Some(mount) = Tmpfs::mount(dir.path(), "64m") else {
            eprintln!("storage_full: not run: mounting a tmpfs needs root");
            return None;
        };
        let ballast = dir.path().join("ballast");
        std::fs::write(&ballast, vec![1u8; 16 << 20]).unwrap();
        Some(SmallDisk { _mount: mount, dir, ballast })
    }

    /// A front on the disk whose writes stop 16 MB short of full, with a
    /// store of about 30 MB: more room than removing one file may take,
    /// less than removing them all may.
    async fn front(&self) -> Front {
        Front::start_at_with("127.0.0.1:0", self.dir.path(), &["--min-free-bytes", "16000000"]).await
    }
}

#[tokio::test]
async fn a_full_disk_refuses_writes_and_keeps_reads() {
    let Some(disk) = SmallDisk::mount() else { return };
    let front = disk.front().await;
    front.space("s").await;
    let mut fs = front.fs().await;
    fs.write(write_text("s", "/kept.txt", "still readable\n")).await.unwrap();
    let written = fill(&mut fs, "s").await;
    assert_eq!(kept(&mut fs).await, "still readable\n");
    let list = fs.list(pb::ListRequest { space: "s".into(), ..Default::default() }).await.unwrap();
    assert!(!list.into_inner().entries.is_empty());

    // Removing content makes sled rewrite the pages that held it, which
    // takes room for a while. Removing everything at once might take more
    // than is left, and a write sled cannot finish would fail every write
    // after it, so it is refused before anything changes.
    let remove = |path: String| pb::RemoveRequest { space: "s".into(), path, recursive: true, ..Default::default() };
    let refused = front.admin().await.remove(remove("/fill".into())).await.unwrap_err();
    assert_error(&refused, Code::ResourceExhausted, "STORAGE_FULL");
    assert!(support::metadata(&refused, "nextAction").contains("fewer files"), "{refused:?}");
    // A file at a time goes through, until the room left runs short.
    let mut removed = 0;
    while removed < written {
        match front.admin().await.remove(remove(format!("/fill/{removed}.bin"))).await {
            Ok(_) => removed += 1,
            Err(status) => {
                assert_error(&status, Code::ResourceExhausted, "STORAGE_FULL");
                break;
            }
        }
    }
    assert!(removed > 0, "removing one file fits in the reserve");
    assert_eq!(kept(&mut fs).await, "still readable\n");

    // Once an operator frees room, writes and removals work again: the
    // store never failed a write half way. Nothing acknowledged was lost.
    std::fs::remove_file(&disk.ballast).unwrap();
    fs.write(write_text("s", "/after.txt", "written after the disk was freed\n")).await.unwrap();
    if removed < written {
        front.admin().await.remove(remove(format!("/fill/{removed}.bin"))).await.unwrap();
    }
    assert_eq!(kept(&mut fs).await, "still readable\n");
    let fill = pb::ListRequest { space: "s".into(), path: "/fill".into(), ..Default::default() };
    let left = fs.list(fill).await.unwrap().into_inner().entries.len() as u32;
    assert_eq!(left, written - (removed + 1).min(written), "the files not removed are all there");
}

#[tokio::test]
async fn deleting_a_space_on_a_full_disk_never_fails_a_write_half_way() {
    let Some(disk) = SmallDisk::mount() else { return };
    let mut front = disk.front().await;
    front.space("s").await;
    let big = front.space("big").await;
    let mut fs = front.fs().await;
    fs.write(write_text("s", "/kept.txt", "still readable\n")).await.unwrap();
    fill(&mut fs, "big").await;
    // The space goes at once; its content is purged as far as the room
    // left allows, and the rest at the next start.
    let delete = pb::DeleteSpaceRequest { space: big, confirm: "big".into(), ..Default::default() };
    front.admin().await.delete_space(delete).await.unwrap();
    let gone = fs.list(pb::ListRequest { space: "big".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
    assert_eq!(kept(&mut fs).await, "still readable\n");
    // The store never failed a write half way: once room is freed, writes
    // work without a restart, and a restart finishes the purge.
    std::fs::remove_file(&disk.ballast).unwrap();
    fs.write(write_text("s", "/after.txt", "written after the disk was freed\n")).await.unwrap();
    front.crash_and_restart().await;
    let mut fs = front.fs().await;
    assert_eq!(kept(&mut fs).await, "still readable\n");
    let after = fs.read(read("s", "/after.txt")).await.unwrap().into_inner().content;
    assert_eq!(after, "written after the disk was freed\n");
}

/// Writes distinct 1 MB files into `space` until the disk is full; returns
/// how many were written.
async fn fill(fs: &mut FileSystemClient<Channel>, space: &str) -> u32 {
    for i in 0..200u32 {
        // Distinct content, so nothing is deduplicated.
        let body: Vec<u8> = (0..1_000_000u32).map(|b| (b.wrapping_mul(31).wrapping_add(i * 7) % 251) as u8).collect();
        if let Err(status) = fs.write(write_bytes(space, &format!("/fill/{i}.bin"), &body)).await {
            assert_error(&status, Code::ResourceExhausted, "STORAGE_FULL");
            return i;
        }
    }
    panic!("a 64 MiB disk fills up");
}

/// The content of `/kept.txt`.
async fn kept(fs: &mut FileSystemClient<Channel>) -> String {
    fs.read(read("s", "/kept.txt")).await.unwrap().into_inner().content
}
