//! End-to-end: metrics scraped from the real process move with the traffic.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};

use support::{Front, free_port, read, write_text};

fn scrape(address: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(address) {
            stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
            let mut body = String::new();
            stream.read_to_string(&mut body).unwrap();
            return body;
        }
        assert!(Instant::now() < deadline, "metrics endpoint never answered");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of the first sample line that contains every fragment.
fn sample(body: &str, fragments: &[&str]) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| fragments.iter().all(|f| l.contains(f)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn rpc_metrics_count_calls_by_method_and_code() {
    let metrics = format!("127.0.0.1:{}", free_port());
    let front = Front::start_with(&["--metrics-listen", &metrics]).await;
    front.space("s").await;
    let mut fs = front.fs().await;
    fs.write(write_text("s", "/a.txt", "a")).await.unwrap();
    for _ in 0..3 {
        fs.read(read("s", "/a.txt")).await.unwrap();
    }
    let _ = fs.read(read("s", "/missing.txt")).await.unwrap_err();
    let reads = ["agentvfs_rpc_requests_total", "/agentvfs.v1.FileSystem/Read", "code=\"0\""];
    let first = scrape(&metrics);
    assert_eq!(sample(&first, &reads), Some(3.0), "{first}");
    assert_eq!(
        sample(&first, &["agentvfs_rpc_requests_total", "/agentvfs.v1.FileSystem/Read", "code=\"5\""]),
        Some(1.0)
    );
    assert!(sample(&first, &["agentvfs_rpc_duration_seconds_count", "/agentvfs.v1.FileSystem/Write"]).is_some());
    assert!(sample(&first, &["agentvfs_flush_duration_seconds_count"]).is_some_and(|n| n >= 1.0));

    fs.read(read("s", "/a.txt")).await.unwrap();
    assert_eq!(sample(&scrape(&metrics), &reads), Some(4.0));
}
