//! `pull-folder` and `push-folder` end to end: the real `agentvfs` binary
//! against a real front and worker, on real local directories.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use support::{Output, Stack};

/// Bytes that are not UTF-8 (NUL, a lone continuation byte, 0xFF).
const BINARY: &[u8] = &[0x00, 0x9f, 0x92, 0x96, 0xff, 0x00, 0x01, 0x02];
const JOURNAL: &str = ".agentvfs-sync.json";

fn hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

fn mkdir_remote(stack: &Stack, path: &str) {
    let actions = format!(r#"[{{"mkdir":{{"path":"{path}"}}}}]"#);
    let out = stack.run_with_stdin(&["batch", "-", "--apply", "--idempotency-key", &format!("mkdir {path}")], &actions);
    assert_eq!(out.code, 0, "{out:?}");
}

/// `/proj`: a text file, a file in a subfolder, a binary file and an empty folder.
fn seed(stack: &Stack) {
    stack.ok(&["write", "/proj/a.md", "--content", "alpha\n"]);
    stack.ok(&["write", "/proj/docs/b.txt", "--content", "beta\n"]);
    let out = stack.run_with_bytes(&["write", "/proj/bin.dat"], BINARY);
    assert_eq!(out.code, 0, "{out:?}");
    mkdir_remote(stack, "/proj/empty");
}

/// Every file (with its bytes) and folder (`None`) below `root`, journal aside.
fn tree(root: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    fn visit(root: &Path, dir: &Path, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let rel = entry.path().strip_prefix(root).unwrap().to_str().unwrap().to_owned();
            if rel.starts_with(".agentvfs-sync") {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                out.insert(rel, None);
                visit(root, &entry.path(), out);
            } else {
                out.insert(rel, Some(std::fs::read(entry.path()).unwrap()));
            }
        }
    }
    let mut out = BTreeMap::new();
    visit(root, root, &mut out);
    out
}

fn path(dir: &Path) -> &str {
    dir.to_str().unwrap()
}

fn journal(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join(JOURNAL)).unwrap()).unwrap()
}

fn set_journal(dir: &Path, value: &serde_json::Value) {
    std::fs::write(dir.join(JOURNAL), serde_json::to_string_pretty(value).unwrap()).unwrap();
}

#[track_caller]
fn refused(out: &Output, code: i32, reason: &str) {
    assert_eq!(out.code, code, "{out:?}");
    assert!(out.stderr.starts_with(&format!("error: {reason}: ")), "{out:?}");
    assert!(out.stderr.contains("\nnext: "), "{out:?}");
}

/// `path v3` for every file under `/proj`, from one listing.
fn versions(stack: &Stack) -> BTreeMap<String, u64> {
    stack
        .ok(&["ls", "-R", "/proj", "--all"])
        .lines()
        .filter(|line| line.starts_with("f "))
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields[3].to_owned(), fields[2].trim_start_matches('v').parse().unwrap())
        })
        .collect()
}

#[test]
fn pull_edit_push_round_trip_keeps_bytes_and_folders() {
    let stack = Stack::start();
    seed(&stack);
    let co = stack.temp.path().join("co");
    let out = stack.ok(&["pull-folder", "default:/proj", path(&co)]);
    assert_eq!(out, format!("pulled default:/proj into {}: 3 files, 2 folders\n", co.display()));
    let expected: BTreeMap<String, Option<Vec<u8>>> = [
        ("a.md", Some(b"alpha\n".to_vec())),
        ("bin.dat", Some(BINARY.to_vec())),
        ("docs", None),
        ("docs/b.txt", Some(b"beta\n".to_vec())),
        ("empty", None),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(tree(&co), expected);

    // The journal: origin, base versions and the server's hashes, private, no credentials.
    let pulled = journal(&co);
    assert_eq!(pulled["state"], "ready");
    assert_eq!(pulled["origin"]["path"], "/proj");
    assert_eq!(pulled["entries"]["bin.dat"]["version"], 1);
    assert_eq!(pulled["entries"]["bin.dat"]["hash"], hash(BINARY));
    assert_eq!(pulled["entries"]["empty"]["kind"], "directory");
    assert!(pulled["entries"]["empty"]["nodeId"].as_str().unwrap().starts_with("nd_"));
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(co.join(JOURNAL)).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "the journal is readable by others: {mode:o}");
    }

    // Edit locally: change a file, delete one, rename one, add a binary file and an empty folder.
    std::fs::write(co.join("a.md"), "alpha\nmore\n").unwrap();
    std::fs::remove_file(co.join("docs/b.txt")).unwrap();
    std::fs::rename(co.join("bin.dat"), co.join("moved.dat")).unwrap();
    let all_bytes: Vec<u8> = (0..=255).collect();
    std::fs::write(co.join("docs/c.bin"), &all_bytes).unwrap();
    std::fs::create_dir(co.join("fresh")).unwrap();

    assert_eq!(
        stack.ok(&["push-folder", path(&co)]),
        "plan     mkdir   fresh/ (new folder)\n\
         plan     update  a.md (new version of v1, 11 bytes)\n\
         plan     create  docs/c.bin (new file, 256 bytes)\n\
         plan     create  moved.dat (new file, 8 bytes)\n\
         plan     keep    bin.dat (deleted locally; the remote copy stays)\n\
         plan     keep    docs/b.txt (deleted locally; the remote copy stays)\n\
         preview: 4 changes, 2 kept remotely; nothing applied (apply with --apply)\n"
    );
    let json = stack.ok(&["push-folder", path(&co), "--json"]);
    let a = hash(b"alpha\nmore\n");
    let c = hash(&all_bytes);
    let moved = hash(BINARY);
    assert_eq!(
        json,
        format!(
            "{{\"action\":\"mkdir\",\"path\":\"fresh\"}}\n\
             {{\"action\":\"update\",\"baseVersion\":1,\"hash\":\"{a}\",\"path\":\"a.md\",\"size\":11}}\n\
             {{\"action\":\"create\",\"hash\":\"{c}\",\"path\":\"docs/c.bin\",\"size\":256}}\n\
             {{\"action\":\"create\",\"hash\":\"{moved}\",\"path\":\"moved.dat\",\"size\":8}}\n\
             {{\"action\":\"keep\",\"path\":\"bin.dat\"}}\n\
             {{\"action\":\"keep\",\"path\":\"docs/b.txt\"}}\n\
             {{\"summary\":{{\"applied\":false,\"changes\":4,\"kept\":2}}}}\n"
        )
    );
    // The preview changed nothing.
    assert!(stack.run(&["resolve", "/proj/fresh"]).code == 3);
    assert_eq!(versions(&stack)["/proj/a.md"], 1);

    let out = stack.run(&["push-folder", path(&co), "--apply"]);
    assert_eq!(out.stderr, "", "progress bars or notes on a stderr that is not a terminal");
    assert_eq!(
        out.stdout,
        "applied  mkdir   fresh/ (new folder)\n\
         applied  update  a.md (v1 -> v2, 11 bytes)\n\
         applied  create  docs/c.bin (new file v1, 256 bytes)\n\
         applied  create  moved.dat (new file v1, 8 bytes)\n\
         applied 4 changes; 2 kept remotely\n"
    );
    assert_eq!(
        versions(&stack),
        BTreeMap::from(
            [
                ("/proj/a.md", 2),
                ("/proj/bin.dat", 1),
                ("/proj/docs/b.txt", 1),
                ("/proj/docs/c.bin", 1),
                ("/proj/moved.dat", 1)
            ]
            .map(|(p, v)| (p.to_owned(), v))
        )
    );
    let pushed = journal(&co);
    assert_eq!(pushed["entries"]["a.md"]["version"], 2);
    assert_eq!(pushed["entries"]["a.md"]["hash"], a);
    assert!(pushed.get("pushId").is_none(), "{pushed}");
    assert_eq!(
        stack.ok(&["push-folder", path(&co)]),
        "plan     keep    bin.dat (deleted locally; the remote copy stays)\n\
         plan     keep    docs/b.txt (deleted locally; the remote copy stays)\n\
         preview: 0 changes, 2 kept remotely; nothing applied (apply with --apply)\n"
    );

    // A fresh pull has every byte and folder: the local tree plus what local deletions kept.
    let again = stack.temp.path().join("again");
    stack.ok(&["pull-folder", "default:/proj", path(&again)]);
    let mut expected = tree(&co);
    expected.insert("bin.dat".to_owned(), Some(BINARY.to_vec()));
    expected.insert("docs/b.txt".to_owned(), Some(b"beta\n".to_vec()));
    assert_eq!(tree(&again), expected);
}

#[test]
fn conflicting_remote_changes_stop_the_push_before_anything_is_applied() {
    let stack = Stack::start();
    seed(&stack);
    let co = stack.temp.path().join("co");
    stack.ok(&["pull-folder", "default:/proj", path(&co)]);
    std::fs::write(co.join("a.md"), "mine\n").unwrap();
    std::fs::write(co.join("new.txt"), "new\n").unwrap();
    std::fs::write(co.join("taken.txt"), "local\n").unwrap();
    stack.ok(&["write", "/proj/a.md", "--content", "theirs\n"]);
    stack.ok(&["write", "/proj/taken.txt", "--content", "remote\n"]);

    let out = stack.run(&["push-folder", path(&co), "--apply"]);
    refused(&out, 4, "PUSH_CONFLICT");
    assert!(out.stderr.contains("has 2 conflicts; nothing was applied"), "{out:?}");
    assert!(out.stdout.contains("CONFLICT a.md: changed remotely (base v1, now v2)\n"), "{out:?}");
    assert!(out.stdout.contains("CONFLICT taken.txt: a different file exists remotely (v1); not overwritten\n"));
    assert_eq!(stack.run(&["resolve", "/proj/new.txt"]).code, 3, "a new file was created despite the conflict");
    assert_eq!(stack.ok(&["read", "/proj/taken.txt"]), "remote\n");
    assert_eq!(stack.ok(&["versions", "/proj/a.md"]).lines().count(), 2);
    assert_eq!(std::fs::read_to_string(co.join("a.md")).unwrap(), "mine\n", "the local draft is kept");

    // A remote rename stops the plan too, even of a file not edited locally.
    let co2 = stack.temp.path().join("co2");
    stack.ok(&["pull-folder", "default:/proj", path(&co2)]);
    std::fs::write(co2.join("new.txt"), "new\n").unwrap();
    let out = stack.run_with_stdin(
        &["batch", "-", "--apply", "--idempotency-key", "rename"],
        r#"[{"rename":{"path":"/proj/docs/b.txt","newName":"renamed.txt"}}]"#,
    );
    assert_eq!(out.code, 0, "{out:?}");
    let out = stack.run(&["push-folder", path(&co2), "--apply"]);
    refused(&out, 4, "PUSH_CONFLICT");
    assert!(
        out.stdout.contains("CONFLICT docs/b.txt: moved or renamed remotely to /proj/docs/renamed.txt\n"),
        "{out:?}"
    );
    assert_eq!(stack.run(&["resolve", "/proj/new.txt"]).code, 3);
}

#[test]
fn an_interrupted_push_reruns_without_applying_anything_twice() {
    let stack = Stack::start();
    // 200 files, so that the push is still running when it is killed.
    mkdir_remote(&stack, "/proj");
    for batch in 0..10 {
        let actions: Vec<String> = (0..20)
            .map(|i| format!(r#"{{"create":{{"path":"/proj/f{:03}.txt","content":"v1 {i}\n"}}}}"#, batch * 20 + i))
            .collect();
        let out = stack.run_with_stdin(
            &["batch", "-", "--apply", "--idempotency-key", &format!("seed {batch}")],
            &format!("[{}]", actions.join(",")),
        );
        assert_eq!(out.code, 0, "{out:?}");
    }
    let co = stack.temp.path().join("co");
    stack.ok(&["pull-folder", "default:/proj", path(&co)]);
    for i in 0..200 {
        std::fs::write(co.join(format!("f{i:03}.txt")), format!("v2 {i}\n")).unwrap();
    }
    for i in 0..100 {
        std::fs::write(co.join(format!("n{i:03}.txt")), format!("new {i}\n")).unwrap();
    }

    let mut child = stack
        .command(&["push-folder", path(&co), "--apply"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut applied = 0;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        if line.unwrap().starts_with("applied  ") {
            applied += 1;
        }
        if applied == 30 {
            child.kill().unwrap();
            break;
        }
    }
    child.wait().unwrap();
    assert_eq!(applied, 30, "the push ended before it could be interrupted");
    let interrupted = journal(&co);
    assert!(interrupted["pushId"].is_string(), "{interrupted}");
    let before = versions(&stack);
    assert!(before.values().filter(|v| **v == 2).count() < 200, "the whole push ran before the kill");

    let out = stack.run(&["push-folder", path(&co), "--apply"]);
    assert_eq!(out.code, 0, "{out:?}");
    let expected: BTreeMap<String, u64> = (0..200)
        .map(|i| (format!("/proj/f{i:03}.txt"), 2))
        .chain((0..100).map(|i| (format!("/proj/n{i:03}.txt"), 1)))
        .collect();
    assert_eq!(versions(&stack), expected);
    assert!(journal(&co).get("pushId").is_none());

    // The journal as the kill left it, run again: the steps applied since are
    // answered from their receipts (same keys), not applied a second time.
    set_journal(&co, &interrupted);
    let out = stack.run(&["push-folder", path(&co), "--apply"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("(already v2 on the server)\n"), "{out:?}");
    assert_eq!(versions(&stack), expected);
    assert_eq!(stack.ok(&["versions", "/proj/f199.txt"]).lines().count(), 2);
    assert_eq!(stack.ok(&["read", "/proj/n099.txt"]), "new 99\n");
    assert_eq!(
        stack.ok(&["push-folder", path(&co)]),
        "preview: 0 changes, 0 kept remotely; nothing applied (apply with --apply)\n"
    );
}

/// A pull stopped part-way leaves the journal in state `pulling` with some
/// files not yet written; this makes one without racing a kill.
fn interrupt(co: &Path, missing: &[&str]) {
    let mut value = journal(co);
    value["state"] = "pulling".into();
    set_journal(co, &value);
    for name in missing {
        std::fs::remove_file(co.join(name)).unwrap();
    }
}

#[test]
fn resume_finishes_a_pull_without_overwriting_local_edits() {
    let stack = Stack::start();
    seed(&stack);
    let co = stack.temp.path().join("co");
    stack.ok(&["pull-folder", "default:/proj", path(&co)]);

    // Pushing a half-pulled checkout is refused.
    interrupt(&co, &["docs/b.txt", "bin.dat"]);
    refused(&stack.run(&["push-folder", path(&co)]), 4, "PULL_INCOMPLETE");
    std::fs::write(co.join("a.md"), "edited while the pull was stopped\n").unwrap();
    let out = stack.ok(&["pull-folder", "default:/proj", path(&co), "--resume"]);
    assert_eq!(
        out,
        format!(
            "resumed the pull default:/proj into {}: 3 files, 2 folders\n\
             downloaded 2; kept 1 already present (1 edited locally)\n",
            co.display()
        )
    );
    assert_eq!(std::fs::read_to_string(co.join("a.md")).unwrap(), "edited while the pull was stopped\n");
    assert_eq!(std::fs::read(co.join("bin.dat")).unwrap(), BINARY);
    assert_eq!(std::fs::read_to_string(co.join("docs/b.txt")).unwrap(), "beta\n");
    assert_eq!(journal(&co)["state"], "ready");
    // The edit made during the pull is pushed like any other.
    assert!(stack.ok(&["push-folder", path(&co)]).starts_with("plan     update  a.md (new version of v1, 34 bytes)\n"));

    // A file that changed remotely since the listing stops the pull.
    interrupt(&co, &["docs/b.txt"]);
    stack.ok(&["write", "/proj/docs/b.txt", "--content", "newer\n"]);
    let out = stack.run(&["pull-folder", "default:/proj", path(&co), "--resume"]);
    refused(&out, 4, "SOURCE_CHANGED");
    assert!(out.stderr.contains("/proj/docs/b.txt changed from v1 to v2 during the pull"), "{out:?}");
    assert!(!co.join("docs/b.txt").exists());
    assert_eq!(journal(&co)["state"], "pulling");

    // Resuming from another folder is refused, and pulling into an existing directory too.
    mkdir_remote(&stack, "/other");
    refused(&stack.run(&["pull-folder", "default:/other", path(&co), "--resume"]), 2, "ORIGIN_MISMATCH");
    refused(&stack.run(&["pull-folder", "default:/proj", path(&co)]), 4, "DIRECTORY_EXISTS");
}

#[test]
fn hostile_trees_are_refused() {
    let stack = Stack::start();
    seed(&stack);

    // Remote names that cannot be checked out: the journal's name, and a case pair.
    stack.ok(&["write", "/evil/.agentvfs-sync.json", "--content", "{}"]);
    let evil = stack.temp.path().join("evil");
    let out = stack.run(&["pull-folder", "default:/evil", path(&evil)]);
    refused(&out, 2, "UNSAFE_NAME");
    assert!(out.stderr.contains("reserved name"), "{out:?}");
    assert!(!evil.exists(), "a refused pull created its directory");
    stack.ok(&["write", "/cases/A.txt", "--content", "upper"]);
    stack.ok(&["write", "/cases/a.txt", "--content", "lower"]);
    let cases = stack.temp.path().join("cases");
    refused(&stack.run(&["pull-folder", "default:/cases", path(&cases)]), 2, "NAME_COLLISION");
    assert!(!cases.exists());

    // Local trees: each hostile thing alone in an otherwise clean checkout.
    let co = stack.temp.path().join("co");
    stack.ok(&["pull-folder", "default:/proj", path(&co)]);
    let clean = journal(&co);
    let check = |setup: &dyn Fn(&Path), undo: &dyn Fn(&Path), reason: &str| {
        setup(&co);
        let out = stack.run(&["push-folder", path(&co), "--apply"]);
        refused(&out, 2, reason);
        assert_eq!(out.stdout, "", "{out:?}");
        undo(&co);
    };
    check(
        &|co| std::os::unix::fs::symlink("/etc/passwd", co.join("docs/link")).unwrap(),
        &|co| std::fs::remove_file(co.join("docs/link")).unwrap(),
        "SYMLINK",
    );
    check(
        &|co| std::fs::write(co.join("A.MD"), "shouting").unwrap(),
        &|co| std::fs::remove_file(co.join("A.MD")).unwrap(),
        "NAME_COLLISION",
    );
    check(
        &|co| {
            std::fs::write(co.join("caf\u{e9}.txt"), "nfc").unwrap();
            std::fs::write(co.join("cafe\u{301}.txt"), "nfd").unwrap();
        },
        &|co| {
            std::fs::remove_file(co.join("caf\u{e9}.txt")).unwrap();
            std::fs::remove_file(co.join("cafe\u{301}.txt")).unwrap();
        },
        "NAME_COLLISION",
    );
    check(
        &|co| std::fs::write(co.join("docs/.agentvfs-sync.json"), "{}").unwrap(),
        &|co| std::fs::remove_file(co.join("docs/.agentvfs-sync.json")).unwrap(),
        "UNSAFE_NAME",
    );
    check(
        &|co| {
            let mut value = clean.clone();
            value["entries"]["../outside.txt"] = serde_json::json!({"kind": "file", "nodeId": "nd_x", "version": 1});
            set_journal(co, &value);
        },
        &|co| set_journal(co, &clean),
        "BAD_JOURNAL",
    );
    // Nothing above reached the server.
    assert_eq!(versions(&stack).len(), 3);
    assert!(stack.ok(&["push-folder", path(&co)]).starts_with("preview: 0 changes"));
}

#[test]
fn checkouts_are_limited_to_10000_entries() {
    let stack = Stack::start();
    seed(&stack);
    let small = stack.temp.path().join("small");
    let out = stack.run(&["pull-folder", "default:/proj", path(&small), "--max-entries", "4"]);
    refused(&out, 2, "TOO_MANY_ENTRIES");
    assert!(!small.exists());
    assert_eq!(stack.run(&["pull-folder", "default:/proj", path(&small), "--max-entries", "10001"]).code, 2);
    stack.ok(&["pull-folder", "default:/proj", path(&small), "--max-entries", "5"]);

    mkdir_remote(&stack, "/big");
    let big: PathBuf = stack.temp.path().join("big");
    stack.ok(&["pull-folder", "default:/big", path(&big)]);
    for i in 0..10_001 {
        std::fs::write(big.join(format!("{i}")), "").unwrap();
    }
    refused(&stack.run(&["push-folder", path(&big)]), 2, "TOO_MANY_ENTRIES");
}

#[test]
fn remote_deletions_stop_only_pushes_of_edited_files() {
    let stack = Stack::start();
    seed(&stack);
    let co = stack.temp.path().join("co");
    stack.ok(&["pull-folder", "default:/proj", path(&co)]);
    let out = stack.run_with_stdin(
        &["batch", "-", "--apply", "--idempotency-key", "trash"],
        r#"[{"trash":{"path":"/proj/docs/b.txt"}},{"trash":{"path":"/proj/bin.dat"}}]"#,
    );
    assert_eq!(out.code, 0, "{out:?}");

    // Unchanged local copies of deleted files do not stand in the way.
    std::fs::write(co.join("a.md"), "alpha\nmore\n").unwrap();
    assert_eq!(
        stack.ok(&["push-folder", path(&co)]),
        "plan     update  a.md (new version of v1, 11 bytes)\n\
         preview: 1 change, 0 kept remotely; nothing applied (apply with --apply)\n"
    );
    // An edited one does: pushing it would silently bring it back.
    std::fs::write(co.join("docs/b.txt"), "edited\n").unwrap();
    let out = stack.run(&["push-folder", path(&co), "--apply"]);
    refused(&out, 4, "PUSH_CONFLICT");
    assert!(out.stdout.contains("CONFLICT docs/b.txt: deleted remotely\n"), "{out:?}");
    assert_eq!(versions(&stack)["/proj/a.md"], 1);
}
