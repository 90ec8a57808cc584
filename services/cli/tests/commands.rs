//! The client commands end to end: the real `agentvfs` binary against a real
//! front and worker, checked by exact (golden) output.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::Stack;

/// The files every golden test reads.
fn seed(stack: &Stack) {
    stack.ok(&["write", "/docs/a.md", "--content", "alpha\nbeta\ngamma\ndelta\nepsilon\nzeta\n"]);
    stack.ok(&["write", "/docs/b.txt", "--content", "one beta\ntwo\n"]);
    let out = stack.run_with_stdin(&["write", "/src/main.rs"], "fn main() {\n    println!(\"beta\");\n}\n");
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn file_commands_print_golden_output() {
    let stack = Stack::start();
    assert_eq!(stack.ok(&["write", "/docs/a.md", "--content", "x\n"]), "created /docs/a.md v1 (2 bytes)\n");
    seed(&stack);

    assert_eq!(
        stack.ok(&["ls", "/docs"]),
        "f         36    v2 /docs/a.md\n\
         f         13    v1 /docs/b.txt\n"
    );
    assert_eq!(
        stack
            .ok(&["ls", "-R", "/", "--glob", "*.{md,rs}"])
            .lines()
            .filter(|l| l.contains("/docs/") || l.contains("/src/"))
            .count(),
        2
    );

    let out = stack.run(&["read", "/docs/a.md", "--lines", "2:3"]);
    assert_eq!(out.code, 0);
    assert_eq!(out.stdout, "beta\ngamma\n");
    assert_eq!(out.stderr, "/docs/a.md: lines 2-3 of 6; more from line 4\n");
    assert_eq!(stack.ok(&["read", "/docs/a.md", "--version", "1"]), "x\n");

    assert_eq!(stack.ok(&["find", "*.md", "/docs"]), "/docs/a.md\n");

    let versions = stack.ok(&["versions", "/docs/a.md"]);
    let normalized: Vec<String> = versions
        .lines()
        .map(|line| {
            let mut fields: Vec<&str> = line.split('\t').collect();
            assert!(fields[1].ends_with('Z'), "{line}");
            fields[1] = "TIME";
            fields.join("\t")
        })
        .collect();
    assert_eq!(normalized, ["v2\tTIME\twrite\tdev\t36 bytes\tr3", "v1\tTIME\twrite\tdev\t2 bytes\tr2"]);

    let resolved = stack.ok(&["resolve", "/docs/a.md"]);
    assert!(
        resolved.starts_with("path: /docs/a.md\nkind: file\nversion: 2\nsize: 36\nreference: agentvfs:item:nd_"),
        "{resolved}"
    );
}

#[test]
fn grep_prints_like_ripgrep() {
    let stack = Stack::start();
    seed(&stack);
    assert_eq!(
        stack.ok(&["grep", "beta", "/", "-C", "1"]),
        "/docs/a.md-1-alpha\n\
         /docs/a.md:2:beta\n\
         /docs/a.md-3-gamma\n\
         --\n\
         /docs/b.txt:1:one beta\n\
         /docs/b.txt-2-two\n\
         --\n\
         /src/main.rs-1-fn main() {\n\
         /src/main.rs:2:    println!(\"beta\");\n\
         /src/main.rs-3-}\n"
    );
    // Overlapping context prints each line once, the match as a match, with no separator.
    assert_eq!(
        stack.ok(&["grep", "-n", "^(beta|delta)$", "/docs", "-A", "1"]),
        "/docs/a.md:2:beta\n\
         /docs/a.md-3-gamma\n\
         /docs/a.md:4:delta\n\
         /docs/a.md-5-epsilon\n"
    );
    assert_eq!(stack.ok(&["grep", "-i", "-F", "BETA", "/docs"]), "/docs/a.md:2:beta\n/docs/b.txt:1:one beta\n");
    assert_eq!(stack.ok(&["grep", "-c", "a", "/docs"]), "/docs/a.md:5\n/docs/b.txt:1\n");
    assert_eq!(stack.ok(&["grep", "-l", "beta", "--type", "rust"]), "/src/main.rs\n");
    assert_eq!(stack.ok(&["grep", "-l", "beta", "--glob", "*.txt"]), "/docs/b.txt\n");
    assert_eq!(stack.ok(&["grep", "-U", "-N", "alpha\\nbeta", "/docs"]), "/docs/a.md:alpha\n/docs/a.md:beta\n");

    // The index follows commits asynchronously: poll until it has the file.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let hits = stack.ok(&["search", "epsilon"]);
        if !hits.is_empty() {
            assert!(hits.starts_with("/docs/a.md:v1: "), "{hits}");
            break;
        }
        assert!(Instant::now() < deadline, "search never found the file");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn edit_previews_unless_applied() {
    let stack = Stack::start();
    seed(&stack);
    let patch = stack.temp.path().join("edits.json");
    std::fs::write(&patch, r#"[{"type":"replace","old_text":"beta","new_text":"BETA"}]"#).unwrap();
    let patch = patch.to_str().unwrap();
    let diff =
        "--- /docs/a.md@v1\n+++ /docs/a.md@edited\n@@ -1,5 +1,5 @@\n alpha\n-beta\n+BETA\n gamma\n delta\n epsilon\n";

    assert_eq!(
        stack.ok(&["edit", "/docs/a.md", "--patch", patch, "--version", "1"]),
        format!("{diff}preview of an edit to v1: nothing saved (save with --apply --idempotency-key KEY)\n")
    );
    assert_eq!(stack.ok(&["read", "/docs/a.md", "--lines", "2:2"]), "beta\n");

    let out = stack.run(&["edit", "/docs/a.md", "--patch", patch, "--version", "1", "--apply"]);
    assert_eq!(out.code, 2, "--apply without --idempotency-key is a usage error: {out:?}");

    assert_eq!(
        stack.ok(&["edit", "/docs/a.md", "--patch", patch, "--version", "1", "--apply", "--idempotency-key", "e1"]),
        format!("{diff}applied: v1 -> v2\n")
    );
    assert_eq!(stack.ok(&["read", "/docs/a.md", "--lines", "2:2"]), "BETA\n");
    assert!(stack.ok(&["diff", "/docs/a.md", "--from", "1", "--to", "2"]).contains("-beta\n+BETA\n"));
}

#[test]
fn revert_previews_then_saves_a_folder_as_it_was() {
    let stack = Stack::start();
    stack.ok(&["write", "/notes/plan.md", "--content", "ship it\n"]);
    let at = stack.ok(&["versions", "/notes/plan.md"]);
    let at = at.trim_end().rsplit_once("\tr").unwrap().1.to_owned();
    stack.ok(&["write", "/notes/plan.md", "--content", "scrap it\n"]);
    stack.ok(&["write", "/notes/later.md", "--content", "later\n"]);
    assert_eq!(
        stack.ok(&["revert", "/notes", "--to-revision", &at]),
        format!(
            "trashed /notes/later.md\nmodified /notes/plan.md v2 -> v3\n\
             preview of a revert of /notes to revision {at}: nothing saved (apply with --apply)\n"
        )
    );
    assert_eq!(stack.ok(&["read", "/notes/plan.md"]), "scrap it\n");
    let applied = stack.ok(&["revert", "/notes", "--to-revision", &at, "--apply"]);
    assert!(
        applied.ends_with(&format!(
            "reverted /notes to revision {at}: 2 changes at revision {}\n",
            at.parse::<u64>().unwrap() + 3
        )),
        "{applied}"
    );
    assert_eq!(stack.ok(&["read", "/notes/plan.md"]), "ship it\n");
    assert_eq!(stack.run(&["read", "/notes/later.md"]).code, 3);
    assert_eq!(
        stack.ok(&["revert", "/notes", "--to-revision", &at, "--apply"]),
        format!("/notes to revision {at}: nothing to change\n")
    );
    assert_eq!(stack.run(&["revert", "/notes", "--to-revision", "999", "--apply"]).code, 2);
}

#[test]
fn a_lease_keeps_a_folder_to_the_calls_that_carry_it() {
    let stack = Stack::start();
    stack.ok(&["write", "/notes/plan.md", "--content", "a\n"]);
    let id = stack.ok(&["lease", "acquire", "/notes", "--ttl", "300"]).trim_end().to_owned();
    assert!(id.starts_with("ls_") && id.len() == 29, "{id}");
    let refused = stack.run(&["write", "/notes/plan.md", "--content", "b\n"]);
    assert_eq!(refused.code, 4, "{refused:?}");
    assert!(refused.stderr.contains("LEASE_HELD") && refused.stderr.contains("--lease ID"), "{}", refused.stderr);
    assert_eq!(
        stack.ok(&["--lease", &id, "write", "/notes/plan.md", "--content", "b\n"]),
        "wrote /notes/plan.md v2 (2 bytes)\n"
    );
    assert!(stack.ok(&["lease", "list"]).starts_with(&format!("{id}\t/notes\tdev\tuntil ")));
    assert!(stack.ok(&["lease", "renew", &id, "--ttl", "600"]).starts_with(&format!("renewed {id} on /notes until ")));
    assert!(stack.ok(&["lease", "release", &id]).starts_with(&format!("released {id} on /notes")));
    assert_eq!(stack.ok(&["lease", "list"]), "");
    stack.ok(&["write", "/notes/plan.md", "--content", "c\n"]);
}

#[test]
fn errors_name_the_reason_the_next_step_and_exit_by_class() {
    let stack = Stack::start();
    seed(&stack);
    let out = stack.run(&["read", "/docs/missing.md"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(out.stdout, "");
    let mut lines = out.stderr.lines();
    assert_eq!(lines.next().unwrap(), "error: NOT_FOUND: /docs/missing.md was not found.");
    assert!(lines.next().unwrap().starts_with("next: "), "{}", out.stderr);

    let out = stack.run(&["read", "/docs/../a.md"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.starts_with("error: PATH_TRAVERSAL: "), "{}", out.stderr);
    assert!(out.stderr.contains("\nnext: "), "{}", out.stderr);

    // read-many prints what it could and exits with the first failure's class.
    let out = stack.run(&["read-many", "/docs/b.txt", "/docs/missing.md"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(out.stdout, "==> /docs/b.txt <==\none beta\ntwo\n");
    assert!(out.stderr.starts_with("error: /docs/missing.md: NOT_FOUND: "), "{}", out.stderr);

    let out = stack.run(&["read", "/docs/a.md", "--lines", "3:1"]);
    assert_eq!(out.code, 2, "{out:?}");

    let out = stack.run(&["--space", "nope", "ls"]);
    assert_eq!(out.code, 3, "{out:?}");

    let out = stack.run(&["--json", "read", "/docs/missing.md"]);
    assert_eq!(out.code, 3);
    let error: serde_json::Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert_eq!(error["error"]["reason"], "NOT_FOUND");
    assert_eq!(error["error"]["metadata"]["retryable"], "false");

    let unreachable =
        Command::new(env!("CARGO_BIN_EXE_agentvfs")).args(["--addr", "127.0.0.1:1", "ls"]).output().unwrap();
    assert_eq!(unreachable.status.code(), Some(6));
}

#[test]
fn json_prints_one_proto_json_line_per_page_and_cursors_are_never_dropped() {
    let stack = Stack::start();
    seed(&stack);
    let read: serde_json::Value =
        serde_json::from_str(&stack.ok(&["--json", "read", "/docs/a.md", "--lines", "1:1"])).unwrap();
    assert_eq!(read["content"], "alpha\n");
    assert_eq!(read["path"], "/docs/a.md");
    assert_eq!(read["totalLines"], "6");
    assert_eq!(read["next"]["startLine"], "2");

    // One page of two entries, with the token to continue in the JSON.
    let page = stack.ok(&["--json", "ls", "--page-size", "2"]);
    assert_eq!(page.lines().count(), 1);
    let page: serde_json::Value = serde_json::from_str(&page).unwrap();
    assert_eq!(page["entries"].as_array().unwrap().len(), 2);
    assert_eq!(page["entries"][0]["kind"], "NODE_KIND_FILE");
    let token = page["nextPageToken"].as_str().unwrap();

    // In text the token goes to stderr; --page-token continues; --all follows every page.
    let out = stack.run(&["ls", "--page-size", "2"]);
    assert_eq!(out.stdout.lines().count(), 2);
    assert_eq!(out.stderr, format!("next page token: {token}\n"));
    let rest = stack.ok(&["ls", "--page-size", "2", "--page-token", token, "--all"]);
    let all = stack.ok(&["ls", "--page-size", "2", "--all"]);
    assert_eq!(all, format!("{}{rest}", out.stdout));
    assert_eq!(all, stack.ok(&["ls"]));

    let written: serde_json::Value =
        serde_json::from_str(&stack.ok(&["--json", "write", "/n.txt", "--content", "n"])).unwrap();
    assert_eq!(written["created"], true);
    assert_eq!(written["version"], "1");
}

#[test]
fn patch_checks_a_unified_diff_then_applies_it() {
    let stack = Stack::start();
    stack.ok(&["write", "/src/app.py", "--content", "def main():\n    print(\"hi\")\n"]);
    let diff = stack.temp.path().join("change.diff");
    std::fs::write(
        &diff,
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n def main():\n-    print(\"hi\")\n+    print(\"hello\")\n",
    )
    .unwrap();
    let diff = diff.to_str().unwrap();
    let checked = stack.ok(&["patch", diff]);
    assert!(checked.contains("+    print(\"hello\")"), "{checked}");
    assert!(
        checked.ends_with(
            "update /src/app.py (+1 -1)\nchecked: nothing applied (apply with --apply --idempotency-key KEY)\n"
        ),
        "{checked}"
    );
    assert_eq!(stack.run(&["patch", diff, "--apply"]).code, 2, "--apply needs a key");
    let applied = stack.ok(&["patch", diff, "--apply", "--idempotency-key", "p1"]);
    assert!(applied.starts_with("update /src/app.py v2 (+1 -1)\napplied 1 files at revision"), "{applied}");
    assert!(stack.ok(&["read", "/src/app.py"]).contains("hello"));

    // Applied once, the hunk no longer matches: exit 4, naming the hunk.
    let stale = stack.run(&["patch", diff, "--apply", "--idempotency-key", "p2"]);
    assert_eq!(stale.code, 4, "{stale:?}");
    assert!(stale.stderr.contains("EDIT_NO_MATCH") && stale.stderr.contains("hunk 0 of the patch"), "{stale:?}");
}

#[test]
fn batch_and_admin_commands() {
    let stack = Stack::start();
    let actions = stack.temp.path().join("actions.json");
    std::fs::write(&actions, r#"[{"mkdir":{"path":"/new"}},{"create":{"path":"/new/x.md","content":"hi\n"}}]"#)
        .unwrap();
    let actions = actions.to_str().unwrap();
    assert_eq!(
        stack.ok(&["batch", actions]),
        "#0 ok: create folder /new\n#1 ok: create /new/x.md (3 bytes)\n\
         preview: nothing applied (apply with --apply --idempotency-key KEY)\n"
    );
    assert_eq!(stack.run(&["read", "/new/x.md"]).code, 3);
    assert!(
        stack
            .ok(&["batch", actions, "--apply", "--idempotency-key", "b1"])
            .ends_with("applied 2 actions at revision 2\n")
    );
    assert_eq!(stack.ok(&["read", "/new/x.md"]), "hi\n");

    let created = stack.ok(&["space", "create", "other"]);
    assert!(created.starts_with("created space other (sp_"), "{created}");
    let spaces: Vec<String> =
        stack.ok(&["space", "list"]).lines().map(|l| l.split('\t').next().unwrap().to_owned()).collect();
    assert_eq!(spaces, ["default", "other"]);
    assert!(stack.ok(&["access", "set", "other", "alice", "viewer"]).starts_with("updated access of space other"));
    assert_eq!(stack.run(&["access", "set", "other", "alice", "boss"]).code, 2);
    assert!(stack.ok(&["quota", "set", "other", "--bytes", "1000000", "--files", "100"]).starts_with("updated quota"));
    let functions = stack.temp.path().join("functions.json");
    std::fs::write(
        &functions,
        r#"[{"name":"deploy","description":"Deploys.","parametersJsonSchema":"{}","returns":"ok"}]"#,
    )
    .unwrap();
    let registered = stack.ok(&["functions", "register", "other", functions.to_str().unwrap()]);
    assert!(registered.contains("wrote /functions/deploy.md\n"), "{registered}");
    let forked = stack.ok(&["space", "fork", "other", "other-fork"]);
    assert!(forked.starts_with("forked other at revision 4 into space other-fork (sp_"), "{forked}");
    assert!(stack.ok(&["--space", "other-fork", "read", "/functions/deploy.md"]).contains("Deploys."));
    assert!(stack.ok(&["space", "fork", "other", "as-created", "--at-revision", "1"]).contains(" 1 files, "));
    assert_eq!(stack.run(&["--space", "as-created", "read", "/functions/deploy.md"]).code, 3);
    assert_eq!(stack.run(&["space", "delete", "other", "--confirm", "wrong"]).code, 2);
    assert!(stack.ok(&["space", "delete", "other", "--confirm", "other"]).starts_with("deleted space other"));
}

#[test]
fn watch_prints_each_change_as_it_happens() {
    use std::io::BufRead as _;

    let stack = Stack::start();
    let mut watch = stack
        .command(&["watch", "/docs"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = lines.send(line.unwrap());
        }
    });
    // The watch follows only changes made after it starts: keep writing
    // until the first one shows up, then make the rest.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut n = 0;
    let first = loop {
        // Each write changes the file: rewriting the same bytes is no change.
        n += 1;
        stack.ok(&["write", "/docs/a.md", "--content", &format!("write {n}\n")]);
        if let Ok(line) = received.recv_timeout(Duration::from_millis(200)) {
            break line;
        }
        assert!(Instant::now() < deadline, "watch printed nothing");
    };
    assert!(first.starts_with('r') && first.contains(" /docs"), "{first}");
    stack.ok(&["write", "/elsewhere.md", "--content", "not under /docs\n"]);
    stack.ok(&["write", "/docs/b.md", "--content", "two\n"]);
    let actions = stack.temp.path().join("rename.json");
    std::fs::write(&actions, r#"[{"rename": {"path": "/docs/b.md", "newName": "c.md"}}]"#).unwrap();
    stack.ok(&["batch", actions.to_str().unwrap(), "--apply", "--idempotency-key", "rename-b"]);

    let mut rest = Vec::new();
    while rest.len() < 2 {
        let line = received.recv_timeout(Duration::from_secs(10)).expect("an event for each change");
        // Events of the first writes may still be arriving.
        if !line.ends_with("/docs/a.md") && !line.ends_with("mkdir /docs") {
            rest.push(line.split_once(' ').unwrap().1.to_owned());
        }
    }
    assert_eq!(rest, ["created /docs/b.md", "renamed /docs/c.md (from /docs/b.md)"]);
    let _ = watch.kill();
    let _ = watch.wait();
}

/// The commands of the README's command-line walkthrough, as a person types
/// them into one shell: a heredoc is one command with its body, and what a
/// line `export`s holds for the lines after it.
fn readme_walkthrough() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let section = &readme[readme.find("## Using it from the command line").unwrap()..];
    let block = &section[section.find("```sh\n").unwrap() + 6..];
    let block = &block[..block.find("```").unwrap()];
    let mut commands: Vec<String> = Vec::new();
    let mut heredoc_end: Option<String> = None;
    for line in block.lines() {
        match &heredoc_end {
            Some(end) => {
                let last = commands.last_mut().unwrap();
                last.push('\n');
                last.push_str(line);
                if line == end {
                    heredoc_end = None;
                }
            }
            None => {
                if let Some((_, end)) = line.split_once("<<") {
                    heredoc_end = Some(end.trim().trim_matches('\'').to_owned());
                }
                commands.push(line.to_owned());
            }
        }
    }
    commands
}

#[test]
fn the_readme_walkthrough_works_as_written() {
    let stack = Stack::start();
    // The README runs in a clone after `./scripts/dev`, which built
    // `target/release/`: here that directory holds the binaries under test.
    let clone = tempfile::tempdir().unwrap();
    std::fs::create_dir(clone.path().join("target")).unwrap();
    let binaries = std::path::Path::new(env!("CARGO_BIN_EXE_agentvfs")).parent().unwrap();
    std::os::unix::fs::symlink(binaries, clone.path().join("target/release")).unwrap();

    let commands = readme_walkthrough();
    assert!(commands.len() >= 10, "{commands:?}");
    let mut exports = String::new();
    let mut outputs = Vec::new();
    for command in &commands {
        let run = || {
            Command::new("bash")
                .arg("-c")
                .arg(format!("set -euo pipefail\n{exports}{command}"))
                .current_dir(clone.path())
                // The front listens on a free port, not the default one.
                .env("AGENTVFS_ADDR", &stack.addr)
                .env_remove("AGENTVFS_SPACE")
                .env_remove("AGENTVFS_TOKEN")
                .env_remove("AGENTVFS_SESSION")
                .output()
                .unwrap()
        };
        let mut output = run();
        // The search index follows commits asynchronously: a person running
        // the search a moment later finds the file.
        let deadline = Instant::now() + Duration::from_secs(30);
        while command.starts_with("agentvfs search")
            && output.status.success()
            && output.stdout.is_empty()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(100));
            output = run();
        }
        let stdout = String::from_utf8(output.stdout).unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(output.status.success(), "{command}\nfailed: {stdout}{stderr}");
        if command.starts_with("export ") {
            exports.push_str(command);
            exports.push('\n');
        }
        outputs.push((command.clone(), stdout));
    }
    let output = |prefix: &str| {
        let found = outputs.iter().filter(|(command, _)| command.starts_with(prefix)).collect::<Vec<_>>();
        assert_eq!(found.len(), 1, "one command starts with {prefix:?}");
        found[0].1.clone()
    };
    assert_eq!(output("agentvfs write"), "created /notes/plan.md v1 (15 bytes)\n");
    assert!(output("agentvfs ls").contains(" /notes/plan.md\n"));
    assert_eq!(output("agentvfs read"), "# Plan\nship it\n");
    assert_eq!(output("agentvfs grep"), "/notes/plan.md-1-# Plan\n/notes/plan.md:2:ship it\n");
    let preview = &outputs.iter().find(|(c, _)| c.ends_with("# preview")).unwrap().1;
    assert!(preview.contains("\n-ship it\n+ship it on Friday\n"), "{preview}");
    assert!(preview.contains("preview of an edit to v1: nothing saved"), "{preview}");
    let applied = &outputs.iter().find(|(c, _)| c.contains("--apply")).unwrap().1;
    assert!(applied.ends_with("applied: v1 -> v2\n"), "{applied}");
    let versions = output("agentvfs versions");
    assert_eq!(versions.lines().map(|l| l.split('\t').next().unwrap()).collect::<Vec<_>>(), ["v2", "v1"]);
    assert_eq!(
        output("agentvfs revert"),
        "modified /notes/plan.md v2 -> v3\npreview of a revert of /notes to revision 2: nothing saved (apply with --apply)\n"
    );
    assert!(output("agentvfs search").contains("/notes/plan.md"));
    assert_eq!(stack.ok(&["read", "/notes/plan.md"]), "# Plan\nship it on Friday\n");
    assert!(output("agentvfs space fork").starts_with("forked default at revision "));
    assert_eq!(stack.ok(&["--space", "experiment", "read", "/notes/plan.md"]), "# Plan\nscrap it\n");
}

/// Runs the first `sh` block of the README after `heading` with bash, the
/// binaries under test on `PATH`, against `stack`; its standard output.
fn run_readme_block(stack: &Stack, heading: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let section = &readme[readme.find(heading).unwrap()..];
    let block = &section[section.find("```sh\n").unwrap() + 6..];
    let block = &block[..block.find("```").unwrap()];
    let binaries = std::path::Path::new(env!("CARGO_BIN_EXE_agentvfs")).parent().unwrap();
    let path = format!("{}:{}", binaries.display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{block}"))
        .env("PATH", path)
        .env("AGENTVFS_ADDR", &stack.addr)
        .env_remove("AGENTVFS_SPACE")
        .env_remove("AGENTVFS_LEASE")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "{block}\nfailed: {stdout}{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

#[test]
fn the_readme_lease_example_works_as_written() {
    let stack = Stack::start();
    let stdout = run_readme_block(&stack, "To keep other agents off a folder");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("wrote /notes/plan.md v1") || lines[0].starts_with("created /notes/plan.md v1"),
        "{stdout}"
    );
    assert!(lines[1].starts_with("ls_") && lines[1].contains("\t/notes\tdev\tuntil "), "{stdout}");
    assert!(lines[2].starts_with("released ls_"), "{stdout}");
    assert_eq!(stack.ok(&["read", "/notes/plan.md"]), "# Plan\nmine for now\n");
    assert_eq!(stack.ok(&["lease", "list"]), "");
}

#[test]
fn the_readme_encoding_example_works_as_written() {
    let stack = Stack::start();
    let stdout = run_readme_block(&stack, "Text need not be UTF-8");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "created /notes/sjis.txt v1 (7 bytes)", "議事録 is six bytes in Shift_JIS");
    assert!(lines[1].contains(r#""encoding":"shift_jis""#), "{stdout}");
    assert_eq!(lines[2], "wrote /notes/sjis.txt v2 (14 bytes)", "議事録 ✓ in UTF-8");
    assert!(stack.ok(&["read", "/notes/sjis.txt", "--json"]).contains(r#""encoding":"utf-8""#));

    // Budgets in tokens: the output ends at a whole line, and says where more begins.
    stack.ok(&["write", "/notes/long.md", "--content", &"a line of some words\n".repeat(50)]);
    let out = stack.run(&["read", "/notes/long.md", "--max-tokens", "20"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "a line of some words\n".repeat(3));
    assert_eq!(out.stderr, "/notes/long.md: lines 1-3 of 50; more from line 4\n");
    let out = stack.run(&["read", "/notes/long.md", "--max-tokens", "20", "--tokenizer", "p50k_base"]);
    assert_eq!(out.code, 2, "{out:?}");
}

#[test]
fn next_actions_name_the_flags_of_the_command() {
    let stack = Stack::start();
    seed(&stack);
    let patch = stack.temp.path().join("edits.json");
    std::fs::write(&patch, r#"[{"type":"replace","old_text":"beta","new_text":"BETA"}]"#).unwrap();
    let patch = patch.to_str().unwrap();
    let next = |out: &support::Output| {
        out.stderr.lines().find_map(|l| l.strip_prefix("next: ")).unwrap_or_else(|| panic!("{out:?}")).to_owned()
    };

    // A session without a read of the file: read first, or say which version.
    let out = stack.run(&["--session", "s1", "edit", "/docs/a.md", "--patch", patch]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.starts_with("error: READ_REQUIRED: "), "{out:?}");
    let read_required = next(&out);
    assert!(read_required.contains("agentvfs read /docs/a.md"), "{read_required}");
    assert!(read_required.contains("--version N"), "{read_required}");
    assert!(!read_required.contains("base_version"), "{read_required}");
    // After the read in that session, the edit goes ahead.
    stack.ok(&["--session", "s1", "read", "/docs/a.md"]);
    stack.ok(&["--session", "s1", "edit", "/docs/a.md", "--patch", patch]);

    // /docs/a.md is at version 1: each command names its own flag and the version to give.
    let out = stack.run(&["edit", "/docs/a.md", "--patch", patch, "--version", "3"]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.starts_with("error: VERSION_CONFLICT: "), "{out:?}");
    assert!(next(&out).contains("--version 1"), "{out:?}");
    let out = stack.run(&["write", "/docs/a.md", "--content", "x\n", "--expected-version", "3"]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(next(&out).contains("--expected-version 1"), "{out:?}");

    // With --json the metadata carries the same next action.
    let out = stack.run(&["--json", "edit", "/docs/a.md", "--patch", patch, "--version", "3"]);
    let error: serde_json::Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert!(error["error"]["metadata"]["nextAction"].as_str().unwrap().contains("--version 1"), "{error}");

    // A page token the front refuses names the flag that carries it.
    let out = stack.run(&["ls", "--page-token", "not-a-token"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(next(&out).contains("--page-token"), "{out:?}");
}
