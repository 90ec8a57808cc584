//! Plain HTTP/1.1 exchanges with a front's `--http-listen` port, written
//! byte by byte so that a test controls exactly what is sent.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

/// A reply: the status, the headers (lowercase names) and the body.
pub type Reply = (u16, Vec<(String, String)>, String);

/// One request with a body of `body`; the connection closes after the reply.
pub fn exchange(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    raw(addr, request.as_bytes(), Duration::from_secs(30)).expect("a reply")
}

/// Sends `request` as is and reads until the front closes the connection;
/// `None` when it closes without a reply. Fails the test when nothing
/// comes within `patience`.
pub fn raw(addr: &str, request: &[u8], patience: Duration) -> Option<Reply> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(patience)).unwrap();
    // The front may answer, and close, before it has read everything.
    let _ = stream.write_all(request);
    let mut response = Vec::new();
    match stream.read_to_end(&mut response) {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(error) => panic!("no reply within {patience:?}: {error}"),
    }
    let response = String::from_utf8_lossy(&response);
    (!response.is_empty()).then(|| parse_response(&response))
}

pub fn parse_response(response: &str) -> Reply {
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((response, ""));
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}
