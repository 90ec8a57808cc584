//! The throwaway cluster against a real PostgreSQL server.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use agentvfs_testdb::Cluster;
use tokio_postgres::{Client, NoTls};

async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// Whether process `pid` is still running (a zombie counts as gone).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !matches!(stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()), Some('Z' | 'X')))
}

/// Waits up to five seconds for `pid` to end.
fn ends_within_seconds(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while running(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
    true
}

#[tokio::test]
async fn committed_rows_survive_a_kill_and_restart() {
    let cluster = Cluster::start();
    let url = cluster.create_database();
    let client = connect(&url).await.expect("connect");
    client
        .batch_execute("CREATE TABLE kv (k bytea PRIMARY KEY, v bytea); INSERT INTO kv VALUES ('\\x01', '\\x0203')")
        .await
        .expect("create and insert");
    let pid = cluster.pid().expect("running");

    cluster.kill();
    assert_eq!(cluster.pid(), None);
    assert!(!running(pid), "the postmaster survived kill()");
    assert!(client.query_one("SELECT 1", &[]).await.is_err(), "the old connection still answers");
    assert!(connect(&url).await.is_err(), "a connection succeeded while the server was killed");

    cluster.restart();
    assert_ne!(cluster.pid(), Some(pid));
    let client = connect(&url).await.expect("connect after restart");
    let row = client.query_one("SELECT v FROM kv WHERE k = '\\x01'", &[]).await.expect("committed row");
    assert_eq!(row.get::<_, Vec<u8>>(0), [2, 3]);
}

#[tokio::test]
async fn restart_waits_while_another_process_holds_the_port() {
    let cluster = Cluster::start();
    cluster.kill();
    let squatter = TcpListener::bind((Ipv4Addr::LOCALHOST, cluster.port())).expect("take the port");
    let release = thread::spawn(move || {
        thread::sleep(Duration::from_millis(500));
        drop(squatter);
    });

    cluster.restart();
    release.join().expect("release the port");
    let log = std::fs::read_to_string(cluster.directory().join("server.log")).expect("server log");
    assert!(log.contains("could not bind"), "the port was never refused:\n{log}");
    connect(&cluster.url("postgres")).await.expect("connect after restart");
}

#[tokio::test]
async fn dropping_a_cluster_stops_its_server_and_removes_its_directory() {
    let cluster = Cluster::start();
    let pid = cluster.pid().expect("running");
    let dir = cluster.directory().to_owned();
    assert!(dir.join("data/PG_VERSION").is_file());

    drop(cluster);
    assert!(ends_within_seconds(pid), "the postmaster outlived its cluster");
    assert!(!dir.exists(), "{} is left behind", dir.display());
}

#[tokio::test]
async fn databases_are_independent() {
    let cluster = Cluster::shared();
    let first = cluster.create_database();
    let second = cluster.create_database();
    assert_ne!(first, second);

    let one = connect(&first).await.expect("connect to the first");
    let two = connect(&second).await.expect("connect to the second");
    one.batch_execute("CREATE TABLE t (n int); INSERT INTO t VALUES (1)").await.expect("first");
    two.batch_execute("CREATE TABLE t (n int); INSERT INTO t VALUES (2), (3)").await.expect("second");
    let count = |client: Client| async move {
        client.query_one("SELECT count(*) FROM t", &[]).await.expect("count").get::<_, i64>(0)
    };
    assert_eq!((count(one).await, count(two).await), (1, 2));
    assert!(std::ptr::eq(cluster, Cluster::shared()), "a second shared cluster");
}

#[tokio::test]
async fn a_cluster_outlives_the_thread_that_started_it() {
    let cluster = thread::spawn(Cluster::start).join().expect("start");
    let client = connect(&cluster.create_database()).await.expect("connect");
    client.batch_execute("SELECT 1").await.expect("query");
}

/// Runs as a child of [`the_server_dies_with_its_test_process`] (and does
/// nothing otherwise): starts a cluster, says where it is, and waits to be
/// killed.
#[test]
#[ignore = "a child process of the_server_dies_with_its_test_process"]
fn cluster_in_a_child_process() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let cluster = Cluster::shared();
    let pid = cluster.pid().expect("running");
    println!("postmaster {pid} {}", cluster.directory().display());
    thread::sleep(Duration::from_secs(600));
}

const CHILD: &str = "AGENTVFS_TESTDB_CHILD";

#[test]
fn the_server_dies_with_its_test_process() {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--ignored", "--exact", "cluster_in_a_child_process", "--nocapture"])
        .env(CHILD, "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the test binary");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let (pid, dir): (u32, PathBuf) = stdout
        .lines()
        .map_while(Result::ok)
        .find_map(|line| {
            let (pid, dir) = line.strip_prefix("postmaster ")?.split_once(' ')?;
            Some((pid.parse().ok()?, Path::new(dir).to_owned()))
        })
        .expect("the child started a cluster");
    assert!(running(pid));

    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    assert!(ends_within_seconds(pid), "postmaster {pid} outlived its test process");
    let deadline = Instant::now() + Duration::from_secs(5);
    while dir.exists() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(!dir.exists(), "{} is left behind", dir.display());
}
