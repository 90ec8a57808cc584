//! Several fronts on one database: every front serves every space, and
//! changes made through any of them at once are all kept, each at its own
//! revision.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeSet;

use agentvfs_proto::v1 as pb;
use support::{Front, read, write_text};

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
