//! End-to-end: `ApplyPatch` through the real front process, in both
//! formats, with git as the oracle for unified diffs.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use support::{Front, assert_error, metadata, write_bytes, write_text};
use tonic::Code;
use tonic::transport::Channel;

fn patch(text: &str, key: &str) -> pb::ApplyPatchRequest {
    pb::ApplyPatchRequest { space: "s".into(), patch: text.into(), idempotency_key: key.into(), ..Default::default() }
}

/// Every file of space `s` under `/` and its bytes.
async fn files(fs: &mut FileSystemClient<Channel>) -> BTreeMap<String, Vec<u8>> {
    let request = pb::ListRequest { space: "s".into(), recursive: true, page_size: 200, ..Default::default() };
    let listing = fs.list(request).await.unwrap().into_inner();
    assert!(listing.next_page_token.is_empty());
    let mut out = BTreeMap::new();
    for entry in listing.entries {
        if entry.kind != pb::NodeKind::File as i32 || entry.system {
            continue;
        }
        let download = pb::DownloadRequest { space: "s".into(), path: entry.path.clone(), ..Default::default() };
        let mut stream = fs.download(download).await.unwrap().into_inner();
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.message().await.unwrap() {
            bytes.extend(chunk.data);
        }
        out.insert(entry.path, bytes);
    }
    out
}

/// Runs `script` with bash in `dir`; panics with its output unless it succeeds.
#[track_caller]
fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("bash").arg("-ceu").arg(script).current_dir(dir).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{script}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    stdout.into_owned()
}

/// The files under `dir` (outside `.git`), by space path.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let listed = sh(dir, "find . -type f -not -path './.git/*' | sort");
    for file in listed.lines() {
        out.insert(file.trim_start_matches('.').to_owned(), std::fs::read(dir.join(file)).unwrap());
    }
    out
}

const PLAN: &str = "# Plan\n\nintro\n\n## Steps\n\none\ntwo\nthree\n\n## Risks\n\nnone yet\n";

on_both_engines! {
    #[tokio::test]
    async fn an_apply_patch_adds_updates_moves_and_deletes_in_one_revision() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/docs/plan.md", PLAN)).await.unwrap();
        fs.write(write_text("s", "/src/old.rs", "fn old() {}\n")).await.unwrap();
        fs.write(write_text("s", "/src/lib.rs", "mod old;\n\npub fn run() {\n    old::old();\n}\n")).await.unwrap();
        fs.write(write_text("s", "/win.txt", "first\r\nsecond\r\n")).await.unwrap();
        let before = files(&mut fs).await;
        let text = "\
*** Begin Patch
*** Add File: src/new.rs
+pub fn new() -> u32 {
+    7
+}
*** Update File: docs/plan.md
@@ ## Steps
 one
-two
+two, done
 three
@@ ## Risks
 
-none yet
+the schedule
*** Update File: src/lib.rs
*** Move to: src/main.rs
@@
-mod old;
+mod new;
 
 pub fn run() {
-    old::old();
+    new::new();
 }
*** Delete File: src/old.rs
*** Update File: win.txt
@@
 first
-second
+second, edited
*** End Patch
";
        // A dry run shows the change and saves nothing.
        let dry = fs.apply_patch(pb::ApplyPatchRequest { dry_run: true, ..patch(text, "") }).await.unwrap().into_inner();
        assert!(dry.dry_run);
        assert!(dry.diff.contains("+two, done") && dry.diff.contains("+++ b/src/main.rs"), "{}", dry.diff);
        assert_eq!(dry.files.len(), 5);
        assert!(dry.files.iter().all(|f| f.version == 0), "{dry:?}");
        assert_eq!(files(&mut fs).await, before);

        let applied = fs.apply_patch(patch(text, "p1")).await.unwrap().into_inner();
        let changes: Vec<_> = applied.files.iter().map(|f| (f.path.as_str(), f.new_path.as_str(), f.change)).collect();
        use pb::PatchChange::{Added, Deleted, Moved, Updated};
        assert_eq!(
            changes,
            [
                ("/src/new.rs", "", Added as i32),
                ("/docs/plan.md", "", Updated as i32),
                ("/src/lib.rs", "/src/main.rs", Moved as i32),
                ("/src/old.rs", "", Deleted as i32),
                ("/win.txt", "", Updated as i32),
            ]
        );
        let after = files(&mut fs).await;
        let text_of = |path: &str| String::from_utf8(after[path].clone()).unwrap();
        assert_eq!(text_of("/src/new.rs"), "pub fn new() -> u32 {\n    7\n}\n");
        assert_eq!(text_of("/docs/plan.md"), PLAN.replace("two\n", "two, done\n").replace("none yet", "the schedule"));
        assert_eq!(text_of("/src/main.rs"), "mod new;\n\npub fn run() {\n    new::new();\n}\n");
        // A CRLF file stays CRLF.
        assert_eq!(text_of("/win.txt"), "first\r\nsecond, edited\r\n");
        assert!(!after.contains_key("/src/old.rs") && !after.contains_key("/src/lib.rs"));

        // One revision for the whole patch; a retry replays it.
        let space = front.admin().await.get_space(pb::GetSpaceRequest { space: "s".into() }).await.unwrap().into_inner();
        assert_eq!(space.revision, applied.revision);
        assert_eq!(fs.apply_patch(patch(text, "p1")).await.unwrap().into_inner(), applied);
        assert_eq!(files(&mut fs).await, after);
    }

    #[tokio::test]
    async fn a_patch_that_fails_in_its_third_file_changes_nothing_and_says_where() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/a.txt", "alpha\nbeta\n")).await.unwrap();
        fs.write(write_text("s", "/b.txt", "one\ntwo\n")).await.unwrap();
        fs.write(write_text("s", "/c.txt", "x = 1\n    y = 2\nz = 3\n")).await.unwrap();
        let before = files(&mut fs).await;
        let text = "\
*** Begin Patch
*** Update File: a.txt
@@
-alpha
+ALPHA
*** Add File: new.txt
+new
*** Update File: c.txt
@@
 x = 1
-  y = 2
+  y = 20
*** End Patch
";
        let error = fs.apply_patch(patch(text, "k")).await.unwrap_err();
        assert_error(&error, Code::FailedPrecondition, "EDIT_NO_MATCH");
        assert_eq!(metadata(&error, "file"), "c.txt");
        assert_eq!(metadata(&error, "fileIndex"), "2");
        assert_eq!(metadata(&error, "hunk"), "0");
        assert_eq!(metadata(&error, "nearMissLine"), "1");
        assert!(error.message().contains("Hunk 0 of /c.txt"), "{}", error.message());
        assert_eq!(files(&mut fs).await, before);

        // Ambiguous context is refused; so is an add over an existing file.
        fs.write(write_text("s", "/twice.txt", "same\nx\nsame\nx\n")).await.unwrap();
        let ambiguous = "*** Begin Patch\n*** Update File: twice.txt\n@@\n same\n-x\n+y\n*** End Patch\n";
        let error = fs.apply_patch(patch(ambiguous, "k2")).await.unwrap_err();
        assert_error(&error, Code::FailedPrecondition, "EDIT_AMBIGUOUS_MATCH");
        let exists = "*** Begin Patch\n*** Add File: a.txt\n+again\n*** End Patch\n";
        assert_error(&fs.apply_patch(patch(exists, "k3")).await.unwrap_err(), Code::AlreadyExists, "ALREADY_EXISTS");
        let unreadable = "*** Begin Patch\n*** Frobnicate File: a.txt\n*** End Patch\n";
        let error = fs.apply_patch(patch(unreadable, "k4")).await.unwrap_err();
        assert_error(&error, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert_eq!(metadata(&error, "patchLine"), "2");
        let unkeyed = fs.apply_patch(patch(ambiguous, "")).await.unwrap_err();
        assert_error(&unkeyed, Code::InvalidArgument, "INVALID_ARGUMENT");

        // A file that is not text can still be deleted.
        fs.write(write_bytes("s", "/logo.bin", &[0, 159, 146, 150])).await.unwrap();
        let delete = "*** Begin Patch\n*** Delete File: logo.bin\n*** End Patch\n";
        let deleted = fs.apply_patch(patch(delete, "k5")).await.unwrap().into_inner();
        assert_eq!(deleted.files[0].change, pb::PatchChange::Deleted as i32);
        assert!(!files(&mut fs).await.contains_key("/logo.bin"));
    }

    #[tokio::test]
    async fn a_git_diff_applies_as_git_apply_applies_it() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        let temp = tempfile::tempdir().unwrap();
        let repo = temp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        // A small repository: several hunks in one file, a CRLF file, a file
        // without a final newline, a rename with an edit, an add, a delete.
        let long: String = (1..=60).map(|n| format!("line {n}\n")).collect();
        std::fs::create_dir_all(repo.join("src/deep")).unwrap();
        std::fs::write(repo.join("src/long.txt"), &long).unwrap();
        std::fs::write(repo.join("src/crlf.txt"), "a\r\nb\r\nc\r\n").unwrap();
        std::fs::write(repo.join("src/no_newline.txt"), "first\nlast").unwrap();
        std::fs::write(repo.join("src/deep/moved.rs"), "fn moved() {\n    1\n}\n\nfn stays() {}\n").unwrap();
        std::fs::write(repo.join("gone.md"), "to be deleted\n").unwrap();
        sh(&repo, "git init -q . && git add . && git -c user.email=a@example.com -c user.name=t commit -qm base");
        for (path, bytes) in tree(&repo) {
            fs.write(write_bytes("s", &path, &bytes)).await.unwrap();
        }
        let changed = long.replace("line 3\n", "line three\n").replace("line 30\n", "").replace("line 58\n", "line 58\nextra\n");
        std::fs::write(repo.join("src/long.txt"), changed).unwrap();
        std::fs::write(repo.join("src/crlf.txt"), "a\r\nB\r\nc\r\n").unwrap();
        std::fs::write(repo.join("src/no_newline.txt"), "first\nlast, changed").unwrap();
        std::fs::write(repo.join("src/added.rs"), "pub const ADDED: u8 = 1;\n").unwrap();
        sh(
            &repo,
            "git mv src/deep/moved.rs src/renamed.rs && sed -i 's/    1/    2/' src/renamed.rs && git rm -q gone.md && git add -A",
        );
        let diff = sh(&repo, "git diff --cached -M");
        assert!(diff.contains("rename from src/deep/moved.rs"), "{diff}");
        std::fs::write(temp.path().join("change.diff"), &diff).unwrap();

        // The oracle: git apply on a checkout of the base.
        sh(temp.path(), "git clone -q repo oracle && cd oracle && git apply ../change.diff");
        let expected = tree(&temp.path().join("oracle"));

        let request = pb::ApplyPatchRequest { format: pb::PatchFormat::Unified as i32, ..patch(&diff, "git") };
        let applied = fs.apply_patch(request).await.unwrap().into_inner();
        assert_eq!(applied.files.len(), 6, "{applied:?}");
        assert_eq!(files(&mut fs).await, expected);
    }
}
