//! End-to-end: `agentvfs-front migrate` moves a stopped embedded store into
//! an empty database, and a front on the database answers exactly as the
//! embedded front did; what it must refuse, it refuses without touching
//! anything.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use agentvfs_front::store::engine::{Engine as _, KeyRange, Table};
use agentvfs_front::store::{Durability, SledEngine, SledOptions};
use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::batch_action::Action;
use support::{Front, apply_batch, assert_error, read, replace, write_bytes, write_text};
use tonic::Code;

const BINARY: &str = env!("CARGO_BIN_EXE_agentvfs-front");
/// The password put in database URLs: the cluster trusts local
/// connections, so it is never checked, and it must never be printed.
const PASSWORD: &str = "s3cret-pw";

/// A fresh database's URL, with a password in it.
fn database_url() -> String {
    let url = agentvfs_testdb::Cluster::shared().create_database();
    url.replacen("postgres://agentvfs@", &format!("postgres://agentvfs:{PASSWORD}@"), 1)
}

fn migrate(args: &[&str]) -> Output {
    let output = Command::new(BINARY).arg("migrate").args(args).output().expect("run agentvfs-front migrate");
    let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(!printed.contains(PASSWORD), "the password was printed:\n{printed}");
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Every row of the database's store, in key order (`None`: it has no
/// store table at all).
async fn dump(url: &str) -> Option<Vec<(i16, Vec<u8>, Vec<u8>)>> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let exists: Option<String> = client.query_one("SELECT to_regclass('kv')::text", &[]).await.unwrap().get(0);
    exists?;
    let rows = client.query("SELECT t, k, v FROM kv ORDER BY t, k", &[]).await.unwrap();
    Some(rows.iter().map(|row| (row.get(0), row.get(1), row.get(2))).collect())
}

/// Every row of the embedded store in `dir`, in the order of [`dump`].
fn embedded_rows(dir: &Path) -> Vec<(i16, Vec<u8>, Vec<u8>)> {
    let options = SledOptions { durability: Durability::Group, cache_bytes: 16 << 20, min_free_bytes: 0 };
    let engine = SledEngine::open(dir, options).unwrap();
    let mut rows = Vec::new();
    for table in Table::ALL {
        for item in engine.scan(table, KeyRange::from(Vec::new()), false) {
            let (key, value) = item.unwrap();
            rows.push((table as i16, key.to_vec(), value.to_vec()));
        }
    }
    rows
}

async fn next_event(stream: &mut tonic::Streaming<pb::WatchEvent>, wait: Duration) -> Option<pb::WatchEvent> {
    tokio::time::timeout(wait, stream.message()).await.ok().map(|event| event.unwrap().unwrap())
}

/// Everything a client can read from `front` without changing it, as lines
/// to compare: every space, listings at every retained revision, every
/// version of every file with its bytes, the change feed from revision 1,
/// and the replay of idempotent calls.
async fn picture(front: &Front, replays: &[pb::WriteRequest], batches: &[pb::BatchRequest]) -> Vec<String> {
    let mut fs = front.fs().await;
    let mut admin = front.admin().await;
    let mut lines = Vec::new();
    let spaces = admin.list_spaces(pb::ListSpacesRequest { page_size: 100, ..Default::default() }).await.unwrap();
    let spaces = spaces.into_inner();
    assert!(spaces.next_page_token.is_empty());
    for space in &spaces.spaces {
        lines.push(format!("space {space:?}"));
        let name = space.name.clone();
        let oldest = space.compacted_revision.max(1);
        if oldest > 1 {
            let expired = pb::ListRequest { space: name.clone(), at_revision: oldest - 1, ..Default::default() };
            let error = fs.list(expired).await.unwrap_err();
            lines.push(format!("list at {} of {name}: {}", oldest - 1, support::reason(&error)));
        }
        for revision in oldest..=space.revision {
            let mut token = String::new();
            loop {
                let list = pb::ListRequest {
                    space: name.clone(),
                    recursive: true,
                    page_size: 3,
                    page_token: token,
                    at_revision: revision,
                    ..Default::default()
                };
                let page = fs.list(list).await.unwrap().into_inner();
                lines.push(format!("list at {revision} of {name}: {:?}", page.entries));
                token = page.next_page_token;
                if token.is_empty() {
                    break;
                }
            }
        }
        let now = fs
            .list(pb::ListRequest { space: name.clone(), recursive: true, page_size: 200, ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        for file in now.entries.iter().filter(|e| e.kind == pb::NodeKind::File as i32) {
            let versions = pb::ListVersionsRequest {
                space: name.clone(),
                path: file.path.clone(),
                page_size: 100,
                ..Default::default()
            };
            let versions = fs.list_versions(versions).await.unwrap().into_inner();
            lines.push(format!("versions of {name}{}: {:?}", file.path, versions.versions));
            for version in &versions.versions {
                let download = pb::DownloadRequest {
                    space: name.clone(),
                    path: file.path.clone(),
                    version: version.version,
                    ..Default::default()
                };
                let mut stream = fs.download(download).await.unwrap().into_inner();
                let mut bytes = Vec::new();
                while let Some(chunk) = stream.message().await.unwrap() {
                    bytes.extend_from_slice(&chunk.data);
                }
                assert_eq!(
                    blake3::hash(&bytes).to_hex().as_str(),
                    version.hash,
                    "{name}{} v{}",
                    file.path,
                    version.version
                );
                lines.push(format!(
                    "bytes of {name}{} v{}: {} {:?}",
                    file.path,
                    version.version,
                    bytes.len(),
                    bytes.get(..64)
                ));
            }
        }
        let watch = pb::WatchRequest { space: name.clone(), path: "/".into(), from_revision: 1 };
        match fs.watch(watch).await {
            Err(error) => lines.push(format!("watch {name} from 1: {}", support::reason(&error))),
            Ok(stream) => {
                let mut stream = stream.into_inner();
                // Every event up to the space's revision, then nothing more.
                while let Some(event) = next_event(&mut stream, Duration::from_secs(10)).await {
                    let last = event.revision == space.revision;
                    lines.push(format!("watch {name}: {event:?}"));
                    if last {
                        break;
                    }
                }
                while let Some(event) = next_event(&mut stream, Duration::from_millis(300)).await {
                    lines.push(format!("watch {name}: {event:?}"));
                }
            }
        }
    }
    for request in replays {
        lines.push(format!(
            "replay {}: {:?}",
            request.idempotency_key,
            fs.write(request.clone()).await.unwrap().into_inner()
        ));
    }
    for request in batches {
        lines.push(format!(
            "replay {}: {:?}",
            request.idempotency_key,
            fs.batch(request.clone()).await.unwrap().into_inner()
        ));
    }
    lines
}

/// Bytes that compress badly, so that they take several content chunks.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as u8
        })
        .collect()
}

#[tokio::test]
async fn a_migrated_store_answers_on_the_database_as_it_did_embedded() {
    // A worker that never answers: nothing listens on port 1 (a privileged
    // port, outside the range port-0 binds draw from). Index jobs stay in
    // the outbox.
    let mut front = Front::start_with(&["--worker", "127.0.0.1:1"]).await;
    let mut fs = front.fs().await;
    let mut admin = front.admin().await;
    for name in ["alpha", "beta", "gone"] {
        front.space(name).await;
    }
    // alpha: writes, edits, a batch, renames, trash, content of several chunks.
    fs.write(write_text("alpha", "/docs/a.md", "one\ntwo\n")).await.unwrap();
    fs.write(write_text("alpha", "/docs/a.md", "one\ntwo\nthree\n")).await.unwrap();
    let edit = pb::EditRequest {
        space: "alpha".into(),
        path: "/docs/a.md".into(),
        base_version: Some(2),
        edits: vec![replace("two", "TWO")],
        ..Default::default()
    };
    fs.edit(edit).await.unwrap();
    let keyed = pb::WriteRequest { idempotency_key: "write-1".into(), ..write_text("alpha", "/keyed.txt", "once\n") };
    let keyed_answer = fs.write(keyed.clone()).await.unwrap().into_inner();
    let batch = apply_batch(
        "alpha",
        vec![
            Action::Mkdir(pb::MkdirAction { path: "/empty".into() }),
            Action::Mkdir(pb::MkdirAction { path: "/notes".into() }),
            Action::Create(pb::CreateAction { path: "/notes/n.md".into(), content: "note\n".into() }),
            Action::Rename(pb::RenameAction { path: "/docs/a.md".into(), new_name: "renamed.md".into() }),
        ],
        "batch-1",
    );
    let batch_answer = fs.batch(batch.clone()).await.unwrap().into_inner();
    assert_eq!(batch_answer.applied, 4, "{batch_answer:?}");
    fs.write(write_text("alpha", "/dir/keep.md", "kept v1\n")).await.unwrap();
    fs.write(write_text("alpha", "/dir/keep.md", "kept v2\n")).await.unwrap();
    fs.batch(apply_batch("alpha", vec![Action::Trash(pb::TrashAction { path: "/dir".into() })], "trash-1"))
        .await
        .unwrap();
    fs.write(write_bytes("alpha", "/bin/blob.bin", &noise(300_000, 1))).await.unwrap();
    fs.write(write_bytes("alpha", "/bin/blob.bin", &noise(200_000, 2))).await.unwrap();
    for i in 0..20 {
        fs.write(write_text("alpha", &format!("/many/f{}.txt", i % 7), &format!("round {i}\n"))).await.unwrap();
    }
    // beta: history, then compacted.
    for i in 0..4 {
        fs.write(write_text("beta", "/x.txt", &format!("x{i}\n"))).await.unwrap();
    }
    fs.write(write_text("beta", "/y.txt", "y\n")).await.unwrap();
    admin.compact(pb::CompactRequest { space: "beta".into(), revision: 0 }).await.unwrap();
    fs.write(write_text("beta", "/x.txt", "after compaction\n")).await.unwrap();
    // gone: written, then deleted.
    fs.write(write_text("gone", "/secret.txt", "gone with its space\n")).await.unwrap();
    admin
        .delete_space(pb::DeleteSpaceRequest { space: "gone".into(), confirm: "gone".into(), ..Default::default() })
        .await
        .unwrap();

    let beta_revision =
        admin.get_space(pb::GetSpaceRequest { space: "beta".into() }).await.unwrap().into_inner().revision;
    let before = picture(&front, std::slice::from_ref(&keyed), std::slice::from_ref(&batch)).await;
    assert!(before.contains(&format!("replay write-1: {keyed_answer:?}")), "the embedded front replays");
    assert!(before.contains(&format!("replay batch-1: {batch_answer:?}")));
    // What the comparison covers.
    assert!(before.iter().any(|l| l.starts_with("bytes of alpha/bin/blob.bin v1: 300000 ")), "{before:#?}");
    assert!(before.iter().filter(|l| l.starts_with("watch alpha: ")).count() > 20, "{before:#?}");
    assert!(before.iter().any(|l| l.starts_with("list at 1 of alpha: ")));
    assert!(before.contains(&"watch beta from 1: SNAPSHOT_EXPIRED".to_owned()), "{before:#?}");
    drop((fs, admin));
    assert!(front.terminate().await.success());

    let url = database_url();
    let url_file = front.data_dir.parent().unwrap().join("database-url");
    std::fs::write(&url_file, format!("{url}\n")).unwrap();
    let data_dir = front.data_dir.display().to_string();
    let output = migrate(&["--from-data-dir", &data_dir, "--to-database-url-file", url_file.to_str().unwrap()]);
    assert!(output.status.success(), "{}\n{}", stdout(&output), stderr(&output));
    let printed = stdout(&output);
    println!("{printed}");
    assert!(printed.contains("copied versions:") && printed.contains("copied content:"), "{printed}");
    assert!(printed.contains("done: 2 spaces"), "{printed}");
    // Every table, byte for byte (but the database engine's own flush mark).
    let mut copied = dump(&url).await.unwrap();
    copied.retain(|(t, k, _)| !(*t == Table::Meta as i16 && k.starts_with(b"flush.")));
    let source = embedded_rows(&front.data_dir);
    assert!(source.iter().any(|(t, _, _)| [Table::Queue as i16, Table::Outbox as i16].contains(t)), "index jobs");
    assert!(source.iter().any(|(t, _, _)| *t == Table::Receipts as i16));
    assert!(source.iter().any(|(t, _, _)| *t == Table::Trash as i16));
    assert_eq!(copied.len(), source.len());
    assert!(copied == source, "the database's rows differ from the embedded store's");

    let moved = Front::start_with(&["--database-url", &url]).await;
    let after = picture(&moved, std::slice::from_ref(&keyed), std::slice::from_ref(&batch)).await;
    assert_eq!(before.len(), after.len(), "{after:#?}");
    for (was, is) in before.iter().zip(&after) {
        assert_eq!(was, is);
    }
    let mut fs = moved.fs().await;
    let mut admin = moved.admin().await;
    // Receipts came across: the same key with another request is refused.
    let reused = pb::WriteRequest { idempotency_key: "write-1".into(), ..write_text("alpha", "/keyed.txt", "other\n") };
    assert_error(&fs.write(reused).await.unwrap_err(), Code::FailedPrecondition, "IDEMPOTENCY_KEY_REUSED");
    // The deleted space stays deleted.
    let gone = admin.get_space(pb::GetSpaceRequest { space: "gone".into() }).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    // The trash came across: restoring brings the folder back with its history.
    let restore = pb::RestoreRequest { space: "alpha".into(), reference: "/dir".into(), ..Default::default() };
    let restored = admin.restore(restore).await.unwrap().into_inner();
    assert_eq!((restored.path.as_str(), restored.restored), ("/dir", 2));
    assert_eq!(fs.read(read("alpha", "/dir/keep.md")).await.unwrap().into_inner().content, "kept v2\n");
    let first = fs.read(pb::ReadRequest { version: 1, ..read("alpha", "/dir/keep.md") }).await.unwrap().into_inner();
    assert_eq!(first.content, "kept v1\n");
    // And the store goes on: a new revision follows the migrated ones.
    let written = fs.write(write_text("beta", "/z.txt", "new\n")).await.unwrap().into_inner();
    assert_eq!(written.revision, beta_revision + 1);
}

#[tokio::test]
async fn a_database_that_holds_anything_is_refused_and_left_untouched() {
    let url = database_url();
    let mut on_database = Front::start_with(&["--database-url", &url]).await;
    on_database.space("there").await;
    on_database.fs().await.write(write_text("there", "/a.txt", "already here\n")).await.unwrap();
    assert!(on_database.terminate().await.success());
    let held = dump(&url).await.unwrap();
    assert!(!held.is_empty());

    let mut embedded = Front::start().await;
    embedded.space("moving").await;
    assert!(embedded.terminate().await.success());
    let data_dir = embedded.data_dir.display().to_string();
    let output = migrate(&["--from-data-dir", &data_dir, "--to-database-url", &url]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("is not empty"), "{}", stderr(&output));
    assert_eq!(dump(&url).await.unwrap(), held, "the database was changed");

    // A database holding a copy that did not complete is refused too, and
    // the message says what to do.
    let url = database_url();
    let output = migrate(&["--from-data-dir", &data_dir, "--to-database-url", &url]);
    assert!(output.status.success(), "{}", stderr(&output));
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client.execute("INSERT INTO kv (t, k, v) VALUES (0, 'migrate.incomplete', '')", &[]).await.unwrap();
    client.execute("DELETE FROM kv WHERE t = 0 AND k = 'format'", &[]).await.unwrap();
    let output = migrate(&["--from-data-dir", &data_dir, "--to-database-url", &url]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("drop and recreate the database"), "{}", stderr(&output));
}

#[tokio::test]
async fn a_running_missing_or_damaged_store_is_refused() {
    let front = Front::start().await;
    front.space("live").await;
    let url = database_url();
    let data_dir = front.data_dir.display().to_string();
    let output = migrate(&["--from-data-dir", &data_dir, "--to-database-url", &url]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("is in use by another process"), "{}", stderr(&output));
    assert!(dump(&url).await.is_none_or(|rows| rows.is_empty()), "the database was written");
    // The running front was not disturbed.
    front.fs().await.write(write_text("live", "/still.txt", "serving\n")).await.unwrap();

    let temp = tempfile::tempdir().unwrap();
    let missing = temp.path().join("no-store");
    let output = migrate(&["--from-data-dir", missing.to_str().unwrap(), "--to-database-url", &url]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("holds no embedded store"), "{}", stderr(&output));
    assert!(!missing.exists(), "a store was created");

    let mut damaged = Front::start().await;
    damaged.space("damaged").await;
    assert!(damaged.terminate().await.success());
    std::fs::File::options().write(true).open(damaged.data_dir.join("db")).unwrap().set_len(0).unwrap();
    let output = migrate(&["--from-data-dir", &damaged.data_dir.display().to_string(), "--to-database-url", &url]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("damaged"), "{}", stderr(&output));
    assert!(dump(&url).await.is_none_or(|rows| rows.is_empty()), "the database was written");
}

#[test]
fn both_forms_describe_themselves() {
    let help = |args: &[&str]| {
        let output = Command::new(BINARY).args(args).output().unwrap();
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        stdout(&output)
    };
    let serve = help(&["--help"]);
    for flag in ["--listen", "--data-dir", "--database-url", "--worker", "--dev", "migrate"] {
        assert!(serve.contains(flag), "{flag} missing from:\n{serve}");
    }
    let migrate = help(&["migrate", "--help"]);
    for flag in ["--from-data-dir", "--to-database-url", "--to-database-url-file", "empty database"] {
        assert!(migrate.contains(flag), "{flag} missing from:\n{migrate}");
    }
    assert!(!migrate.contains("--listen"), "{migrate}");
    // The server's flags parse as before.
    assert!(help(&["--dev", "--print-config"]).contains("listen = \"127.0.0.1:50051\""));
}
