//! The harness the server's integration tests share: a real server on a
//! loopback socket over a temporary embedded store, keys of any role, and
//! plain and raw HTTP exchanges.

// Each test file uses part of the harness.
#![allow(dead_code, unused_imports)]
// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

pub use cairn_server::{AllowedHosts, AppState, Limits, ServerConfig};
pub use cairn_store::{
    ApiKey, Ledger, LedgerStore, Role, SequencerConfig, SqliteOptions, SqliteStore,
};
pub use cairn_testkit::http::Reply;
pub use serde_json::{Value, json};
pub use std::io::{Read as _, Write as _};
pub use std::net::{SocketAddr, TcpStream};
pub use std::sync::Arc;
pub use std::time::{Duration, Instant};

pub struct Server {
    pub addr: SocketAddr,
    pub admin: String,
    pub store: Arc<dyn LedgerStore>,
    /// Stopped when the server is dropped.
    #[allow(dead_code)]
    listening: Listening,
    _dir: tempfile::TempDir,
}

impl Server {
    /// The data directory of the server's embedded store.
    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }
}

/// A listener served from a runtime on a thread of its own; stopped
/// (and its thread joined) when dropped.
pub struct Listening {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listening {
    /// Binds `bind` and runs `serve(listener, until_stopped)` on it.
    pub fn start<F, Fut>(bind: &str, serve: F) -> Listening
    where
        F: FnOnce(
                tokio::net::TcpListener,
                std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
            ) -> Fut
            + Send
            + 'static,
        Fut: std::future::Future<Output = std::io::Result<()>>,
    {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, at) = std::sync::mpsc::channel();
        let bind = bind.to_owned();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind(bind).await.unwrap();
                ready.send(listener.local_addr().unwrap()).unwrap();
                serve(
                    listener,
                    Box::pin(async {
                        let _ = stopped.await;
                    }),
                )
                .await
                .unwrap();
            });
        });
        Listening {
            addr: at.recv().unwrap(),
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A server with `config`, on `bind` (a loopback address by default).
pub fn start_on(bind: &str, config: ServerConfig) -> Server {
    start_on_with_state(bind, config).0
}

/// A loopback server with `config`, and its state (for tests that drive
/// parts of the server the routes do not reach, like the witness pusher).
pub fn start_with_state(config: ServerConfig) -> (Server, Arc<AppState>) {
    start_on_with_state("127.0.0.1:0", config)
}

fn start_on_with_state(bind: &str, config: ServerConfig) -> (Server, Arc<AppState>) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn LedgerStore> =
        Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap());
    let admin = cairn_server::bootstrap_admin_key(store.as_ref(), "acme")
        .unwrap()
        .unwrap();
    let ledger = Arc::new(Ledger::new(Arc::clone(&store), SequencerConfig::default()));
    let state = AppState::new(ledger, config);
    let server = serve_state(bind, Arc::clone(&state), admin, store, dir);
    (server, state)
}

/// Serves `state` (over `store`, kept in `dir`) on `bind` from a thread of
/// its own; `admin` is the token the tests use.
pub fn serve_state(
    bind: &str,
    state: Arc<AppState>,
    admin: String,
    store: Arc<dyn LedgerStore>,
    dir: tempfile::TempDir,
) -> Server {
    let listening = Listening::start(bind, move |listener, stopped| {
        cairn_server::serve(listener, state, stopped)
    });
    Server {
        addr: listening.addr,
        admin,
        store,
        listening,
        _dir: dir,
    }
}

/// `state`'s OTLP listener (`cairn_server::serve_otlp`, as
/// `--otlp-listen` serves it) on a loopback port; stopped when dropped.
pub fn otlp_listener(state: Arc<AppState>) -> Listening {
    Listening::start("127.0.0.1:0", move |listener, stopped| {
        cairn_server::serve_otlp(listener, state, stopped)
    })
}

pub fn start(config: ServerConfig) -> Server {
    start_on("127.0.0.1:0", config)
}

pub fn config(limits: Limits) -> ServerConfig {
    ServerConfig {
        limits,
        ..ServerConfig::default()
    }
}

pub fn call(server: &Server, method: &str, path: &str, token: &str, body: Option<&[u8]>) -> Reply {
    cairn_testkit::http::call(server.addr, method, path, Some(token), body)
}

pub fn post(server: &Server, path: &str, token: &str, body: &Value) -> Reply {
    call(
        server,
        "POST",
        path,
        token,
        Some(body.to_string().as_bytes()),
    )
}

pub fn get(server: &Server, path: &str, token: &str) -> Reply {
    call(server, "GET", path, token, None)
}

pub fn key_for(server: &Server, org: &str, role: Role, agent: Option<&str>) -> String {
    let (key, token) = ApiKey::generate(org, role, agent, "test", cairn_store::now()).unwrap();
    server.store.put_api_key(&key).unwrap();
    token
}

pub fn step(session: &str, agent: &str, kind: &str, content: &str) -> Value {
    json!({"session_id": session, "agent_id": agent, "step_type": kind, "content": content})
}

/// A raw HTTP/1.1 exchange: `head` (without the final blank line), then
/// the body; returns status, headers (lowercase names) and body.
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
    /// The API's error object (`{"error": {...}}`), also where an `/mcp`
    /// refusal carries it: as its JSON-RPC error's `data`.
    pub fn api_error(&self) -> Value {
        let body = self.json();
        if body.get("jsonrpc").is_some() {
            body["error"]["data"].clone()
        } else {
            body
        }
    }
    pub fn code(&self) -> String {
        self.api_error()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }
    /// The JSON-RPC message of an MCP answer (plain JSON or SSE).
    pub fn rpc(&self) -> Value {
        let text = String::from_utf8_lossy(&self.body);
        if let Ok(v) = serde_json::from_str::<Value>(&text) {
            return v;
        }
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|v| v.get("jsonrpc").is_some())
            .unwrap_or_else(|| panic!("no JSON-RPC message in {text}"))
    }
}

pub fn raw(addr: SocketAddr, head: &str, body: &[u8]) -> Raw {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let request = format!(
        "{head}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    // One write: see cairn_testkit::http::try_call_within.
    let mut request = request.into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request).unwrap();
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    parse_response(&bytes)
}

pub fn parse_response(bytes: &[u8]) -> Raw {
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(bytes)));
    let head = String::from_utf8_lossy(&bytes[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = bytes[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"))
    {
        let mut decoded = Vec::new();
        let mut rest = &body[..];
        while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..end]).unwrap().trim(), 16)
                .unwrap_or(0);
            rest = &rest[end + 2..];
            if size == 0 || rest.len() < size {
                break;
            }
            decoded.extend_from_slice(&rest[..size]);
            rest = &rest[(size + 2).min(rest.len())..];
        }
        body = decoded;
    }
    Raw {
        status,
        headers,
        body,
    }
}

/// The server closed the connection (EOF or reset) within `within`.
pub fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
}

/// Waits until the server's background embedder has emptied the queue
/// (steps written before the call have their vectors), for at most 20 s.
pub fn settle_embeddings(server: &Server) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while server.store.embedding_backlog().unwrap().waiting > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the background embedder did not empty the queue"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

// Seed 003's review queue: a flagged step, a review of it.

/// Records `step` flagged with `token`; returns its trace id.
pub fn flagged_step(server: &Server, token: &str, mut step: Value) -> String {
    step["status"] = json!("flagged");
    let written = post(server, "/v1/steps", token, &step);
    assert_eq!(written.status, 201, "{}", written.text());
    written.json()["trace_id"].as_str().unwrap().to_owned()
}

/// Records an `escalate` review of the step `trace` with `note`.
pub fn escalate(server: &Server, token: &str, trace: &str, note: &str) {
    let review = post(
        server,
        &format!("/v1/steps/{trace}/review"),
        token,
        &json!({"decision": "escalate", "note": note}),
    );
    assert_eq!(review.status, 201, "{}", review.text());
}

// MCP over Streamable HTTP, raw: `initialize`, a session, a call, a tool.

pub fn mcp_initialize(addr: SocketAddr, token: &str, host: &str) -> Raw {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "hardening", "version": "1"}}});
    raw(
        addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream"
        ),
        body.to_string().as_bytes(),
    )
}

pub fn mcp_call(addr: SocketAddr, token: &str, session: &str, method: &str, body: &Value) -> Raw {
    raw(
        addr,
        &format!(
            "{method} /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18"
        ),
        body.to_string().as_bytes(),
    )
}

/// Opens an MCP session with `token`; returns its id.
pub fn mcp_session(addr: SocketAddr, token: &str) -> String {
    let init = mcp_initialize(addr, token, "localhost");
    assert_eq!(init.status, 200, "{}", String::from_utf8_lossy(&init.body));
    let id = init.header("mcp-session-id").unwrap().to_owned();
    let done = mcp_call(
        addr,
        token,
        &id,
        "POST",
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert!(done.status < 300, "{}", done.status);
    id
}

pub fn mcp_tool(addr: SocketAddr, token: &str, session: &str, name: &str, args: Value) -> Raw {
    mcp_call(
        addr,
        token,
        session,
        "POST",
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": name, "arguments": args}}),
    )
}

/// Percent-encodes a query or form value (a vkey holds `+` and `/`).
pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An insider edits the content of the one step whose content is `from`
/// in the embedded store's database, dropping the trigger that forbids it.
pub fn insider_edits_content(server: &Server, from: &str, to: &str) {
    let conn = rusqlite::Connection::open(server.dir().join("ledger.db")).unwrap();
    conn.execute_batch("DROP TRIGGER IF EXISTS entries_no_update")
        .unwrap();
    let changed = conn
        .execute(
            "UPDATE entries SET content = ?2 WHERE content = ?1",
            [from, to],
        )
        .unwrap();
    assert_eq!(changed, 1);
}
