//! A minimal HTTP/1.1 client for tests that drive a real server over a
//! loopback socket.

use serde_json::Value;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};

/// A response.
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The Content-Type header.
    pub content_type: String,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON (panics if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// The stable error code of a JSON error body.
    pub fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }
}

/// A minimal HTTP/1.1 client: one request per connection. Panics if the
/// server cannot be reached; see [`try_call`].
pub fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Reply {
    try_call(addr, method, path, token, body)
        .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"))
}

/// [`call`], returning I/O failures (a server killed mid-request).
pub fn try_call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> std::io::Result<Reply> {
    try_call_within(addr, method, path, token, body, None)
}

/// [`try_call`] that gives up (an error of kind `WouldBlock` or
/// `TimedOut`) when the server sends nothing for `patience`: a guard
/// against a hung server, never a measure of its speed.
pub fn try_call_within(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
    patience: Option<std::time::Duration>,
) -> std::io::Result<Reply> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(patience)?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    let body = body.unwrap_or(b"");
    head.push_str(&format!(
        "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    ));
    // Head and body in one write: a body sent after the head may reach a
    // server that has already answered a request it did not read the body
    // of (a GET) and closed the connection; its kernel then resets the
    // connection for the unread bytes, and the client can lose the answer
    // (seen as "connection reset by peer" on GET /openapi.json).
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    // A server may answer a large body before reading all of it (a bundle
    // whose first line fails, a body past its limit) and close: the rest
    // of the write then fails, but its answer is there to read.
    let written = stream.write_all(&request);
    let mut raw = Vec::new();
    match (written, stream.read_to_end(&mut raw)) {
        (Ok(()), read) => {
            read?;
        }
        (Err(e), _)
            if matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ) && raw.windows(4).any(|w| w == b"\r\n\r\n") => {}
        (Err(e), _) => return Err(e),
    }
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the connection closed before a complete response",
        ));
    };
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut payload = raw[split + 4..].to_vec();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let header = |name: &str| {
        head.lines()
            .find(|l| l.to_ascii_lowercase().starts_with(&format!("{name}:")))
            .map(|l| l[name.len() + 1..].trim().to_owned())
    };
    if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        let mut decoded = Vec::new();
        let mut rest = &payload[..];
        loop {
            let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap().trim(), 16)
                    .unwrap();
            rest = &rest[line_end + 2..];
            if size == 0 {
                break;
            }
            decoded.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
        payload = decoded;
    }
    Ok(Reply {
        status,
        content_type: header("content-type").unwrap_or_default(),
        body: payload,
    })
}
