//! End-to-end: the outbox feeds the worker's tantivy index behind `Search`,
//! through real front and worker processes.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::batch_action::Action;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use agentvfs_proto::v1::worker_client::WorkerClient;
use support::{Stack, Worker, apply_batch, write_text};
use tonic::transport::Channel;

fn search(query: &str) -> pb::SearchRequest {
    pb::SearchRequest { space: "s".into(), query: query.into(), page_size: 50, ..Default::default() }
}

/// Polls until `check` holds for the hits of `query` (bounded wait).
async fn eventually(
    fs: &mut FileSystemClient<Channel>,
    query: &str,
    check: impl Fn(&[pb::SearchHit]) -> bool,
) -> Vec<pb::SearchHit> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(response) = fs.search(search(query)).await {
            let hits = response.into_inner().hits;
            if check(&hits) {
                return hits;
            }
        }
        assert!(Instant::now() < deadline, "search for {query:?} did not converge");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn paths(hits: &[pb::SearchHit]) -> Vec<&str> {
    let mut paths: Vec<_> = hits.iter().map(|h| h.path.as_str()).collect();
    paths.sort();
    paths
}

on_both_engines! {
    #[tokio::test]
    async fn writes_become_searchable_and_changes_are_reflected() {
        let stack = Stack::start(&[]).await;
        stack.front.space("s").await;
        stack.front.space("other").await;
        let mut fs = stack.front.fs().await;
        fs.write(write_text("s", "/notes/zebra.md", "The zebra grazes near the river.\n")).await.unwrap();
        fs.write(write_text("s", "/notes/lion.md", "A lion watches the zebra herd.\n")).await.unwrap();
        fs.write(write_text("other", "/canary.md", "zebra canary from another space\n")).await.unwrap();

        let hits = eventually(&mut fs, "zebra", |h| h.len() == 2).await;
        assert_eq!(paths(&hits), ["/notes/lion.md", "/notes/zebra.md"]);
        assert!(hits.iter().all(|h| !h.snippet.contains("canary")));
        let hit = hits.iter().find(|h| h.path == "/notes/zebra.md").unwrap();
        let highlighted: String = hit
            .snippet
            .encode_utf16()
            .skip(hit.highlights[0].start as usize)
            .take((hit.highlights[0].end - hit.highlights[0].start) as usize)
            .map(|u| char::from_u32(u32::from(u)).unwrap_or('?'))
            .collect();
        assert_eq!(highlighted.to_lowercase(), "zebra");

        // Edit, rename, trash: each is reflected.
        fs.write(write_text("s", "/notes/lion.md", "A lion sleeps.\n")).await.unwrap();
        eventually(&mut fs, "zebra", |h| paths(h) == ["/notes/zebra.md"]).await;
        fs.batch(apply_batch(
            "s",
            vec![Action::Rename(pb::RenameAction { path: "/notes/zebra.md".into(), new_name: "stripes.md".into() })],
            "r",
        ))
        .await
        .unwrap();
        eventually(&mut fs, "zebra", |h| paths(h) == ["/notes/stripes.md"]).await;
        fs.batch(apply_batch("s", vec![Action::Trash(pb::TrashAction { path: "/notes/stripes.md".into() })], "t"))
            .await
            .unwrap();
        eventually(&mut fs, "zebra", <[pb::SearchHit]>::is_empty).await;
        eventually(&mut fs, "sleeps", |h| paths(h) == ["/notes/lion.md"]).await;

        // Filters: glob and path.
        fs.write(write_text("s", "/code/lion.rs", "// lion in code\n")).await.unwrap();
        eventually(&mut fs, "lion", |h| h.len() == 2).await;
        let md = fs.search(pb::SearchRequest { glob: "*.md".into(), ..search("lion") }).await.unwrap().into_inner();
        assert_eq!(paths(&md.hits), ["/notes/lion.md"]);
        let code = fs.search(pb::SearchRequest { path: "/code".into(), ..search("lion") }).await.unwrap().into_inner();
        assert_eq!(paths(&code.hits), ["/code/lion.rs"]);
        assert!(code.index_revision > 0);

        // Permanent removal is reflected too.
        let remove = pb::RemoveRequest { space: "s".into(), path: "/notes/lion.md".into(), ..Default::default() };
        stack.front.admin().await.remove(remove).await.unwrap();
        eventually(&mut fs, "sleeps", <[pb::SearchHit]>::is_empty).await;
    }

    #[tokio::test]
    async fn a_restarted_or_wiped_worker_converges_to_the_store() {
        let mut stack = Stack::start(&[]).await;
        stack.front.space("s").await;
        let mut fs = stack.front.fs().await;
        for i in 0..40 {
            fs.write(write_text("s", &format!("/f{i:02}.txt"), &format!("alpha version one {i}\n"))).await.unwrap();
        }
        // Kill the worker while it indexes, change things meanwhile, restart.
        stack.worker.kill();
        for i in 0..20 {
            fs.write(write_text("s", &format!("/f{i:02}.txt"), &format!("beta version two {i}\n"))).await.unwrap();
        }
        stack.worker.restart().await;
        let alpha = eventually(&mut fs, "alpha", |h| h.len() == 20).await;
        assert!(alpha.iter().all(|h| h.path.as_str() >= "/f20.txt"));
        eventually(&mut fs, "beta", |h| h.len() == 20).await;

        // Losing the index entirely: the front rebuilds it from the store.
        stack.worker.kill();
        std::fs::remove_dir_all(stack.worker.index_dir()).unwrap();
        stack.worker.restart().await;
        let beta = eventually(&mut fs, "beta", |h| h.len() == 20).await;
        let mut nodes: Vec<_> = beta.iter().map(|h| h.node_id.clone()).collect();
        nodes.dedup();
        assert_eq!(nodes.len(), 20, "one document per node");
        eventually(&mut fs, "alpha", |h| h.len() == 20).await;

        // Reindex of a space queues every live file again.
        let queued =
            stack.front.admin().await.reindex(pb::ReindexRequest { space: "s".into() }).await.unwrap().into_inner();
        assert_eq!(queued.queued, 1 + 41, "drop, then 40 files and /AGENT.md");
        eventually(&mut fs, "beta", |h| h.len() == 20).await;
    }
}

/// A worker whose index is being rebuilt holds the outbox: jobs committed
/// meanwhile stay until it has them, even while another worker acknowledges
/// them and the front prunes what every worker has.
#[tokio::test]
async fn a_worker_rebuilt_while_another_indexes_misses_no_job() {
    let dir = tempfile::tempdir().unwrap();
    // The first rebuild to finish reading the store stalls before it
    // reports its position: the files below are written meanwhile.
    let stall = [("FAILPOINTS", "indexer::after_rebuild=1*sleep(5000)")];
    let (binary, _) = support::failpoint_binaries();
    let (front, workers) = support::with_front_port(async |front_addr| {
        let first = Worker::start(front_addr, "127.0.0.1:0", &dir.path().join("i1")).await;
        let second = Worker::start(front_addr, "127.0.0.1:0", &dir.path().join("i2")).await;
        let both = format!("{},{}", first.addr, second.addr);
        let front = support::Front::try_start_binary_at(&binary, front_addr, &["--worker", &both], &stall).await?;
        Some((front, [first, second]))
    })
    .await;
    let space = front.space("s").await;
    let mut fs = front.fs().await;
    for i in 0..20 {
        fs.write(write_text("s", &format!("/f{i:02}.txt"), "a needle in the hay\n")).await.unwrap();
    }
    // Each worker's own index, asked directly, ends up with every file.
    for worker in &workers {
        let mut client = WorkerClient::connect(format!("http://{}", worker.addr)).await.unwrap();
        let query = pb::IndexQuery {
            space_id: space.clone(),
            query: "needle".into(),
            path_prefix: "/".into(),
            limit: 100,
            offset: 0,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let hits = client.search_index(query.clone()).await.unwrap().into_inner().hits.len();
            if hits == 20 {
                break;
            }
            assert!(Instant::now() < deadline, "the worker at {} indexed {hits} of 20 files", worker.addr);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
