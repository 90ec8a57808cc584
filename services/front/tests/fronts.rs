//! Several fronts on one database: every front serves every space, and
//! changes made through any of them at once are all kept, each at its own
//! revision.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use support::{Front, Stack, assert_error, read, reason, replace, write_text};
use tonic::Code;
use tonic::transport::Channel;

/// Two fronts on one database.
async fn two_fronts() -> (Front, Front) {
    let url = agentvfs_testdb::Cluster::shared().create_database();
    let a = Front::start_with(&["--database-url", &url]).await;
    let b = Front::start_with(&["--database-url", &url]).await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_one_space_through_two_fronts_are_all_kept_at_their_own_revisions() {
    let (a, b) = two_fronts().await;
    a.space("shared").await;
    let clients = [a.fs().await, b.fs().await];
    let mut tasks = Vec::new();
    for task in 0..8 {
        let mut fs = clients[task % 2].clone();
        tasks.push(tokio::spawn(async move {
            let mut revisions = Vec::new();
            for n in 0..25 {
                let path = format!("/t{task}/f{n}.txt");
                let written = fs.write(write_text("shared", &path, &format!("{task} {n}"))).await.unwrap();
                revisions.push(written.into_inner().revision);
            }
            revisions
        }));
    }
    let mut revisions = BTreeSet::new();
    for task in tasks {
        for revision in task.await.unwrap() {
            assert!(revisions.insert(revision), "revision {revision} acknowledged twice");
        }
    }
    // Revision 1 created the space; every write made the next one.
    assert_eq!(revisions, (2..2 + 200).collect(), "revisions unique and gap-free");
    // Every file is readable through both fronts.
    for client in &clients {
        let mut fs = client.clone();
        for task in 0..8 {
            for n in 0..25 {
                let path = format!("/t{task}/f{n}.txt");
                let content = fs.read(read("shared", &path)).await.unwrap().into_inner().content;
                assert_eq!(content, format!("{task} {n}"));
            }
        }
    }
    let listing = clients[1]
        .clone()
        .find(pb::FindRequest {
            space: "shared".into(),
            pattern: "**/*.txt".into(),
            page_size: 200,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listing.matches.len(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_on_one_front_streams_the_commits_of_another_in_order() {
    let (a, b) = two_fronts().await;
    a.space("w").await;
    let mut events = b
        .fs()
        .await
        .watch(pb::WatchRequest { space: "w".into(), path: "/".into(), from_revision: 0 })
        .await
        .unwrap()
        .into_inner();
    let mut fs = a.fs().await;
    let mut written = Vec::new();
    for n in 0..10 {
        let response = fs.write(write_text("w", &format!("/f{n}.txt"), "x")).await.unwrap().into_inner();
        written.push((response.revision, format!("/f{n}.txt")));
    }
    let mut seen = Vec::new();
    while seen.len() < written.len() {
        // Other fronts' commits are looked for every 100 ms.
        let event = tokio::time::timeout(Duration::from_secs(5), events.message()).await;
        let event = event.expect("an event within 5 s").unwrap().expect("the stream goes on");
        seen.push((event.revision, event.path));
    }
    assert_eq!(seen, written, "every commit, in revision order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_on_a_front_started_again_after_it_was_killed() {
    let (a, mut b) = two_fronts().await;
    a.space("w").await;
    let watch = |from_revision| pb::WatchRequest { space: "w".into(), path: "/".into(), from_revision };
    let mut fs = a.fs().await;
    let first = fs.write(write_text("w", "/before.txt", "x")).await.unwrap().into_inner().revision;
    let mut events = b.fs().await.watch(watch(first)).await.unwrap().into_inner();
    let event = tokio::time::timeout(Duration::from_secs(5), events.message()).await.unwrap().unwrap().unwrap();
    assert_eq!((event.revision, event.path.as_str()), (first, "/before.txt"));
    // B dies; A goes on; a client resumes on B, started again, from the next revision.
    b.crash_and_restart().await;
    let mut written = Vec::new();
    for n in 0..5 {
        let response = fs.write(write_text("w", &format!("/after{n}.txt"), "x")).await.unwrap().into_inner();
        written.push((response.revision, format!("/after{n}.txt")));
    }
    let mut events = b.fs().await.watch(watch(first + 1)).await.unwrap().into_inner();
    let mut seen = Vec::new();
    while seen.len() < written.len() {
        let event = tokio::time::timeout(Duration::from_secs(5), events.message()).await;
        let event = event.expect("an event within 5 s").unwrap().expect("the stream goes on");
        seen.push((event.revision, event.path));
    }
    assert_eq!(seen, written, "nothing missed, nothing repeated, in order");
}

/// Search through `fs` until `query` finds `expected` hits (bounded wait).
async fn searched(
    fs: &mut agentvfs_proto::v1::file_system_client::FileSystemClient<tonic::transport::Channel>,
    query: &str,
    expected: usize,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let request = pb::SearchRequest { space: "s".into(), query: query.into(), page_size: 50, ..Default::default() };
        if let Ok(response) = fs.search(request).await
            && response.into_inner().hits.len() == expected
        {
            return;
        }
        assert!(Instant::now() < deadline, "search for {query:?} never found {expected} files");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An append of `line` under idempotency key `key`: applied twice, it would
/// show as a second version and a repeated line.
fn append(key: &str, line: &str) -> pb::WriteRequest {
    pb::WriteRequest {
        mode: pb::WriteMode::Append as i32,
        idempotency_key: key.into(),
        ..write_text("shared", "/log.txt", line)
    }
}

/// Sends the append until it is answered with something other than
/// IDEMPOTENCY_REQUEST_IN_PROGRESS (with the retry delay it asks for).
async fn replayed(fs: &mut FileSystemClient<Channel>, request: pb::WriteRequest) -> pb::WriteResponse {
    loop {
        match fs.write(request.clone()).await {
            Ok(response) => return response.into_inner(),
            Err(status) if reason(&status) == "IDEMPOTENCY_REQUEST_IN_PROGRESS" => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(status) => panic!("retry of an idempotent append failed: {status:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_follows_every_front_and_moves_to_a_survivor_when_its_feeder_dies() {
    let url = agentvfs_testdb::Cluster::shared().create_database();
    // A stack (front A and a worker), and front B on the same database and worker.
    let mut stack = Stack::start(&["--database-url", &url]).await;
    let b = Front::start_with(&["--database-url", &url, "--worker", &stack.worker.addr]).await;
    stack.front.space("s").await;
    let (mut through_a, mut through_b) = (stack.front.fs().await, b.fs().await);
    through_a.write(write_text("s", "/a.md", "a heron by the river")).await.unwrap();
    through_b.write(write_text("s", "/b.md", "a heron on the roof")).await.unwrap();
    // One front feeds the worker's index, whichever got the lease; writes
    // through either are searchable through either.
    searched(&mut through_b, "heron", 2).await;
    searched(&mut through_a, "heron", 2).await;

    // Whichever front fed the index dies; the other takes the work over.
    stack.front.crash_and_restart().await;
    drop(b);
    let mut through_a = stack.front.fs().await;
    through_a.write(write_text("s", "/c.md", "a third heron")).await.unwrap();
    searched(&mut through_a, "heron", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_idempotency_key_sent_through_two_fronts_at_once_applies_once() {
    let (a, b) = two_fronts().await;
    a.space("shared").await;
    let (mut fa, mut fb) = (a.fs().await, b.fs().await);
    let rounds = 20;
    let mut expected = String::new();
    for round in 0..rounds {
        let (key, line) = (format!("key-{round}"), format!("line {round}\n"));
        expected.push_str(&line);
        let request = append(&key, &line);
        let (through_a, through_b) = tokio::join!(fa.write(request.clone()), fb.write(request.clone()));
        // One call applies it; the other is told it is in progress, or gets
        // the replay of the same response.
        let mut applied = Vec::new();
        for (outcome, fs) in [(through_a, &mut fa), (through_b, &mut fb)] {
            match outcome {
                Ok(response) => applied.push(response.into_inner()),
                Err(status) => {
                    assert_error(&status, Code::Aborted, "IDEMPOTENCY_REQUEST_IN_PROGRESS");
                    applied.push(replayed(fs, request.clone()).await);
                }
            }
        }
        assert_eq!(applied[0], applied[1], "round {round}: both fronts answer with the one response");
        assert_eq!(applied[0].version, round + 1, "round {round}: one version per key");
    }
    for fs in [&mut fa, &mut fb] {
        let file = fs.read(read("shared", "/log.txt")).await.unwrap().into_inner();
        assert_eq!((file.version, file.content.as_str()), (rounds, expected.as_str()));
    }
}

/// Adds `x-agentvfs-session: <id>` to every call.
#[derive(Clone)]
struct Session(&'static str);

impl tonic::service::Interceptor for Session {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        request.metadata_mut().insert("x-agentvfs-session", self.0.parse().unwrap());
        Ok(request)
    }
}

async fn in_session(
    front: &Front,
    id: &'static str,
) -> FileSystemClient<tonic::service::interceptor::InterceptedService<Channel, Session>> {
    FileSystemClient::with_interceptor(front.channel().await, Session(id))
}

fn edit(path: &str, edits: Vec<pb::TextEdit>) -> pb::EditRequest {
    pb::EditRequest { space: "shared".into(), path: path.into(), edits, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_through_one_front_lets_an_edit_in_that_session_through_the_other() {
    let (a, b) = two_fronts().await;
    a.space("shared").await;
    a.fs().await.write(write_text("shared", "/notes.md", "hello\n")).await.unwrap();
    let (mut s_on_a, mut s_on_b) = (in_session(&a, "s").await, in_session(&b, "s").await);
    let mut other_on_b = in_session(&b, "other").await;

    s_on_a.read(read("shared", "/notes.md")).await.unwrap();
    let done = s_on_b.edit(edit("/notes.md", vec![replace("hello", "hi")])).await.unwrap().into_inner();
    assert_eq!(done.version, 2);
    let unread = other_on_b.edit(edit("/notes.md", vec![replace("hi", "yo")])).await.unwrap_err();
    assert_error(&unread, Code::FailedPrecondition, "READ_REQUIRED");

    // The edit through B counts as the session's read of version 2, on A too.
    let again = s_on_a.edit(edit("/notes.md", vec![replace("hi", "hey")])).await.unwrap().into_inner();
    assert_eq!(again.version, 3);
    // A read through B of version 3 is what A checks an edit in `other` against.
    other_on_b.read(read("shared", "/notes.md")).await.unwrap();
    s_on_b.edit(edit("/notes.md", vec![replace("hey", "hoi")])).await.unwrap();
    let stale = in_session(&a, "other").await.edit(edit("/notes.md", vec![replace("hoi", "ho")])).await.unwrap_err();
    assert_error(&stale, Code::FailedPrecondition, "FILE_MODIFIED_SINCE_READ");
}
