//! Crash loop: writers with idempotency keys run against the real front
//! while a nemesis SIGKILLs it at random moments. After each restart every
//! call whose outcome is unknown is resolved by replaying its key, then the
//! invariants are checked: every acknowledged write is readable with its
//! bytes, version chains are unbroken, no version comes from a call that
//! did not succeed, each key applied at most once, and the space revision
//! never goes back. `AGENTVFS_CRASH_CYCLES` sets the number of cycles
//! (default 50; run thousands by hand).

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use agentvfs_proto::v1 as pb;
use support::{Front, read, write_text};
use tonic::Code;

const PATHS: usize = 6;
const WRITERS: usize = 4;

#[derive(Debug, Clone)]
struct Call {
    key: String,
    path: String,
    content: String,
}

/// A small deterministic generator (xorshift), so a failing run can be
/// repeated from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn request(call: &Call) -> pb::WriteRequest {
    pb::WriteRequest { idempotency_key: call.key.clone(), ..write_text("s", &call.path, &call.content) }
}

#[tokio::test]
async fn acknowledged_writes_survive_a_crash_loop() {
    let cycles: usize = std::env::var("AGENTVFS_CRASH_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let seed = std::env::var("AGENTVFS_CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_u64);
    let mut rng = Rng(seed);
    let mut front = Front::start().await;
    front.space("s").await;
    // key -> (path, content, version) of every acknowledged write.
    let mut acked: HashMap<String, (String, String, u64)> = HashMap::new();
    let mut last_revision = 0;
    let mut total_calls = 0;
    // Per path, the versions already checked (each cycle checks only newer ones).
    let mut verified: HashMap<String, u64> = HashMap::new();

    for cycle in 0..cycles {
        let fs = front.fs().await;
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let mut fs = fs.clone();
                tokio::spawn(async move {
                    let mut outcomes = Vec::new();
                    for n in 0.. {
                        let call = Call {
                            key: format!("c{cycle}-w{w}-{n}"),
                            path: format!("/f{}.txt", (w + n) % PATHS),
                            content: format!("cycle {cycle} writer {w} call {n}\n"),
                        };
                        let result = fs.write(request(&call)).await;
                        let stop = result.is_err();
                        outcomes.push((call, result.map(|r| r.into_inner().version)));
                        if stop {
                            return outcomes;
                        }
                    }
                    outcomes
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20 + rng.next() % 200)).await;
        front.crash_and_restart().await;
        let mut unknown = Vec::new();
        for task in tasks {
            for (call, result) in task.await.unwrap() {
                total_calls += 1;
                match result {
                    Ok(version) => {
                        acked.insert(call.key.clone(), (call.path, call.content, version));
                    }
                    // The crash cut the call: it may or may not have applied.
                    Err(status)
                        if matches!(
                            status.code(),
                            Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Internal
                        ) =>
                    {
                        unknown.push(call)
                    }
                    Err(status) => panic!("cycle {cycle}: unexpected failure {status:?}"),
                }
            }
        }
        // Replaying the key settles each unknown call: applied exactly once.
        let mut fs = front.fs().await;
        for call in unknown {
            let version = fs.write(request(&call)).await.unwrap().into_inner().version;
            acked.insert(call.key.clone(), (call.path, call.content, version));
        }
        let space =
            front.admin().await.get_space(pb::GetSpaceRequest { space: "s".into() }).await.unwrap().into_inner();
        assert!(space.revision >= last_revision, "cycle {cycle}: revision went back");
        last_revision = space.revision;
        check_versions(&mut fs, &acked, &mut verified, cycle).await;
    }
    // Once more, every version from the first.
    check_versions(&mut front.fs().await, &acked, &mut HashMap::new(), cycles).await;

    // Every acknowledged write, with its bytes, at its version.
    let mut fs = front.fs().await;
    for (key, (path, content, version)) in &acked {
        let back = fs.read(pb::ReadRequest { version: *version, ..read("s", path) }).await.unwrap().into_inner();
        assert_eq!(&back.content, content, "{key}: {path}@{version}");
    }
    eprintln!("crash loop: {cycles} cycles, {total_calls} calls, {} acknowledged, lost 0", acked.len());
}

/// Version chains have no gaps; every version comes from exactly one
/// acknowledged call (by its key), and every acknowledged call made one.
/// Checks the versions above `verified` of each path, then moves it up.
async fn check_versions(
    fs: &mut agentvfs_proto::v1::file_system_client::FileSystemClient<tonic::transport::Channel>,
    acked: &HashMap<String, (String, String, u64)>,
    verified: &mut HashMap<String, u64>,
    cycle: usize,
) {
    let mut by_path: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for (key, (path, _, version)) in acked {
        by_path.entry(path.clone()).or_default().push((*version, key.clone()));
    }
    for (path, expected) in by_path {
        let floor = verified.get(&path).copied().unwrap_or(0);
        let mut expected: Vec<_> = expected.into_iter().filter(|(v, _)| *v > floor).collect();
        expected.sort();
        // Newest first: stop at the first page that reaches checked versions.
        let mut stored = Vec::new();
        let mut token = String::new();
        loop {
            let request = pb::ListVersionsRequest {
                space: "s".into(),
                path: path.clone(),
                page_size: 200,
                page_token: token,
                ..Default::default()
            };
            let page = fs.list_versions(request).await.unwrap().into_inner();
            let reached = page.versions.iter().any(|v| v.version <= floor);
            stored.extend(
                page.versions.into_iter().filter(|v| v.version > floor).map(|v| (v.version, v.idempotency_key)),
            );
            if reached || page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        stored.sort();
        let numbers: Vec<u64> = stored.iter().map(|(v, _)| *v).collect();
        let contiguous: Vec<u64> = (floor + 1..=floor + numbers.len() as u64).collect();
        assert_eq!(numbers, contiguous, "cycle {cycle}: {path} has gaps");
        assert_eq!(stored, expected, "cycle {cycle}: {path}: versions and acknowledged calls differ");
        verified.insert(path, floor + numbers.len() as u64);
    }
}
