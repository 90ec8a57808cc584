//! `agentvfs up` end to end: the real binary starts the real front and
//! worker, serves a `default` space, and leaves nothing running after SIGTERM.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead as _, BufReader, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use agentvfs_proto::v1::GetSpaceRequest;
use agentvfs_proto::v1::admin_client::AdminClient;

use crate::support;

/// Builds the children `agentvfs up` starts into the directory of the
/// `agentvfs` binary.
fn assert_children_built() {
    support::server_binaries();
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Everything the process tree writes to stderr, for failure messages. Read
/// on a thread that is never joined: children left running would keep the
/// pipe open.
fn collect(mut stderr: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    std::thread::spawn(move || {
        let mut buffer = [0; 4096];
        while let Ok(n @ 1..) = stderr.read(&mut buffer) {
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    });
    text
}

/// Kills `agentvfs` if the test fails before it stops on its own.
struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 POST of proto3 JSON; the whole response.
fn http_post(addr: &str, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(addr).unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
}

#[tokio::test]
async fn up_serves_a_default_space_and_stops_everything_on_sigterm() {
    assert_children_built();
    let temp = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let http = format!("127.0.0.1:{}", free_port());
    let mut up = Up(Command::new(env!("CARGO_BIN_EXE_agentvfs"))
        .args(["up", "--listen", &listen, "--http-listen", &http, "--data-dir"])
        .arg(temp.path().join("data"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap());
    let stderr = collect(up.0.stderr.take().unwrap());
    let (lines, stdout) = mpsc::channel();
    let out = up.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });

    let banner = stdout
        .recv_timeout(Duration::from_secs(90))
        .unwrap_or_else(|_| panic!("no banner; stderr:\n{}", stderr.lock().unwrap()));
    let rest = banner
        .strip_prefix(&format!("agentvfs is up: front {listen} (data "))
        .unwrap_or_else(|| panic!("unexpected banner {banner:?}"));
    let (_, worker) = rest.split_once("), worker ").unwrap();
    let worker: SocketAddr = worker.strip_suffix("; space \"default\"").unwrap().parse().unwrap();
    assert_eq!(
        stdout.recv_timeout(Duration::from_secs(5)).unwrap(),
        format!("HTTP on http://{http}, MCP on http://{http}/mcp")
    );
    assert_eq!(stdout.recv_timeout(Duration::from_secs(5)).unwrap(), "press Ctrl-C to stop");

    {
        let mut admin = AdminClient::connect(format!("http://{listen}")).await.unwrap();
        let space = admin.get_space(GetSpaceRequest { space: "default".into() }).await.unwrap().into_inner();
        assert_eq!(space.name, "default");
    }
    // The same space over HTTP.
    let reply = http_post(&http, "/api/v1/admin/get_space", r#"{"space": "default"}"#);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains(r#""name":"default""#), "{reply}");

    let pid = up.0.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = up.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "agentvfs did not stop within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}; stderr:\n{}", stderr.lock().unwrap());
    assert!(!accepts(listen.parse().unwrap()), "the front is still listening");
    assert!(!accepts(http.parse().unwrap()), "the front still serves HTTP");
    assert!(!accepts(worker), "the worker is still listening");
}
