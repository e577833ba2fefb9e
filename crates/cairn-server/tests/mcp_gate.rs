//! MCP over HTTP against hostile clients, on a real loopback socket: MCP
//! sessions used by another key or opened in bulk, GET streams held open,
//! DNS rebinding, and the rejections of axum and rmcp kept in the one error
//! shape. (Moved from `hardening_access.rs`.)

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;

/// Opens session `session`'s GET stream and reads its answer's head: the
/// status and the connection, kept open (a stream's body never ends).
fn mcp_stream(addr: SocketAddr, token: &str, session: &str) -> (u16, TcpStream) {
    mcp_stream_with(addr, token, session, "")
}

/// [`mcp_stream`] with more header lines (each ending in CRLF).
fn mcp_stream_with(addr: SocketAddr, token: &str, session: &str, more: &str) -> (u16, TcpStream) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
        .write_all(
            format!(
                "GET /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18\r\n{more}\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "{head:?}");
        head.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&head)
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    (status, stream)
}

/// The GET of a session's stream, answered whole (a refusal).
fn mcp_stream_refused(addr: SocketAddr, token: &str, session: &str) -> Raw {
    raw(
        addr,
        &format!(
            "GET /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18"
        ),
        b"",
    )
}

/// MCP sessions' GET streams hold a connection each for as long as the
/// client keeps them: one per session (409 `stream_open`), at most half
/// of the connections in all and a quarter for one org (429
/// `too_many_streams`), so one tenant's sessions cannot hold every
/// connection of the listener (a hostile probe held 1,023 of 1,024 with
/// 33 streams per session); a stream counts until its session ends.
#[test]
fn mcp_get_streams_are_one_per_session_and_bounded_per_org() {
    let limits = Limits {
        max_connections: 16,
        ..Limits::default()
    };
    let server = start(config(limits));
    let admin = server.admin.clone();
    let stranger = key_for(&server, "globex", Role::Admin, None);
    let sessions: Vec<String> = (0..5).map(|_| mcp_session(server.addr, &admin)).collect();
    let (status, _first) = mcp_stream(server.addr, &admin, &sessions[0]);
    assert_eq!(status, 200);
    let again = mcp_stream_refused(server.addr, &admin, &sessions[0]);
    assert_eq!(
        again.status,
        409,
        "{}",
        String::from_utf8_lossy(&again.body)
    );
    assert_eq!(again.api_error()["error"]["code"], "stream_open");
    // A client resuming a POST's answer after a dropped connection names
    // the last event it saw: that GET is not the session's one stream.
    let (status, _resumed) =
        mcp_stream_with(server.addr, &admin, &sessions[0], "Last-Event-ID: 0/2\r\n");
    assert_ne!(status, 409);
    // Half of 16 connections in all, a quarter (4) for one org.
    let mut held = Vec::new();
    for id in &sessions[1..4] {
        let (status, stream) = mcp_stream(server.addr, &admin, id);
        assert_eq!(status, 200);
        held.push(stream);
    }
    let over = mcp_stream_refused(server.addr, &admin, &sessions[4]);
    assert_eq!(over.status, 429, "{}", String::from_utf8_lossy(&over.body));
    assert_eq!(over.api_error()["error"]["code"], "too_many_streams");
    assert!(over.header("retry-after").is_some());
    // Another org still opens its own.
    let theirs = mcp_session(server.addr, &stranger);
    let (status, _theirs) = mcp_stream(server.addr, &stranger, &theirs);
    assert_eq!(status, 200);
    // Ending a session ends its stream, which no longer counts.
    let ended = mcp_call(server.addr, &admin, &sessions[1], "DELETE", &json!(null));
    assert!(ended.status < 300, "{}", ended.status);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _next) = mcp_stream(server.addr, &admin, &sessions[4]);
        if status == 200 {
            break;
        }
        assert_eq!(status, 429);
        assert!(
            Instant::now() < deadline,
            "the ended session's stream still counts"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An MCP session belongs to the key that opened it: another key, of the
/// same org or another, can neither use nor delete it (404); a key may
/// hold a few sessions and the server a bounded number; idle sessions end.
#[test]
fn mcp_sessions_are_bound_to_their_key_and_bounded() {
    let limits = Limits {
        mcp_sessions_per_key: 2,
        mcp_session_idle: Duration::from_millis(1500),
        ..Limits::default()
    };
    let server = start(config(limits));
    let admin = server.admin.clone();
    let colleague = key_for(&server, "acme", Role::Admin, None);
    let stranger = key_for(&server, "globex", Role::Admin, None);
    let mine = mcp_session(server.addr, &admin);
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    let ok = mcp_call(server.addr, &admin, &mine, "POST", &list);
    assert_eq!(ok.status, 200);
    assert!(ok.rpc()["result"]["tools"].is_array());
    for other in [&colleague, &stranger] {
        let used = mcp_call(server.addr, other, &mine, "POST", &list);
        assert_eq!((used.status, used.code().as_str()), (404, "not_found"));
        let deleted = mcp_call(server.addr, other, &mine, "DELETE", &json!({}));
        assert_eq!(
            (deleted.status, deleted.code().as_str()),
            (404, "not_found")
        );
    }
    assert_eq!(
        mcp_call(server.addr, &admin, &mine, "POST", &list).status,
        200
    );

    // Two per key; the third is refused with Retry-After.
    let second = mcp_session(server.addr, &admin);
    let third = mcp_initialize(server.addr, &admin, "localhost");
    assert_eq!(
        (third.status, third.code().as_str()),
        (429, "too_many_sessions")
    );
    assert!(third.header("retry-after").is_some());
    // Other keys are not affected.
    let _theirs = mcp_session(server.addr, &stranger);
    // Deleting one makes room.
    let deleted = mcp_call(server.addr, &admin, &second, "DELETE", &json!({}));
    assert!(deleted.status < 300, "{}", deleted.status);
    let _again = mcp_session(server.addr, &admin);
    // Idle sessions end.
    std::thread::sleep(Duration::from_millis(2000));
    let expired = mcp_call(server.addr, &admin, &mine, "POST", &list);
    assert_eq!(expired.status, 404);
    let _fresh = mcp_session(server.addr, &admin);
    let _fresh2 = mcp_session(server.addr, &admin);
}

/// One org's keys hold at most half of the server's MCP sessions: an
/// admin who creates key after key cannot fill the server and lock every
/// other tenant out of MCP (a probe once held 1,014 of 1,024 this way).
#[test]
fn one_org_cannot_hold_every_mcp_session() {
    let limits = Limits {
        mcp_sessions_per_key: 2,
        mcp_sessions: 6,
        ..Limits::default()
    };
    let server = start(config(limits));
    // (id, token) of three reader keys.
    let keys: Vec<(String, String)> = (0..3)
        .map(|_| {
            let (key, token) =
                ApiKey::generate("acme", Role::Reader, None, "test", cairn_store::now()).unwrap();
            server.store.put_api_key(&key).unwrap();
            (key.id, token)
        })
        .collect();
    let stranger = key_for(&server, "globex", Role::Reader, None);
    let _held: Vec<String> = [&keys[0].1, &keys[0].1, &keys[1].1]
        .into_iter()
        .map(|key| mcp_session(server.addr, key))
        .collect();
    let refused = mcp_initialize(server.addr, &keys[2].1, "localhost");
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (429, "too_many_sessions")
    );
    assert!(
        String::from_utf8_lossy(&refused.body).contains("the most one org may"),
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    assert!(refused.header("retry-after").is_some());
    let _theirs = mcp_session(server.addr, &stranger);
    let _theirs_too = mcp_session(server.addr, &stranger);
    // A revoked key's sessions end with it, and leave the org's share.
    let admin = key_for(&server, "acme", Role::Admin, None);
    let revoked = call(
        &server,
        "DELETE",
        &format!("/v1/keys/{}", keys[0].0),
        &admin,
        None,
    );
    assert_eq!(revoked.status, 204, "{}", revoked.text());
    let _after = mcp_session(server.addr, &keys[2].1);
    let _and_another = mcp_session(server.addr, &keys[2].1);
}

/// MCP over the network: hosts other than the allowed ones get a 403 that
/// names the setting; an allowed name (any port, or the given port) and
/// matching origins are served.
#[test]
fn mcp_hosts_and_origins_are_configurable() {
    let server = start(ServerConfig {
        allowed_hosts: AllowedHosts {
            hosts: vec![
                "localhost".into(),
                "cairn.example".into(),
                "10.1.2.3:8714".into(),
            ],
            origins: Vec::new(),
        },
        ..ServerConfig::default()
    });
    let admin = server.admin.clone();
    let refused = mcp_initialize(server.addr, &admin, "evil.example");
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (403, "host_not_allowed")
    );
    let message = refused.api_error()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("CAIRN_ALLOWED_HOSTS"), "{message}");
    assert!(message.contains("evil.example"), "{message}");
    for host in [
        "cairn.example",
        "cairn.example:8714",
        "10.1.2.3:8714",
        "localhost:1",
    ] {
        let init = mcp_initialize(server.addr, &admin, host);
        assert_eq!(
            init.status,
            200,
            "{host}: {}",
            String::from_utf8_lossy(&init.body)
        );
    }
    let wrong_port = mcp_initialize(server.addr, &admin, "10.1.2.3:9999");
    assert_eq!(wrong_port.status, 403);
    // A browser page from another site: refused; from an allowed host: ok.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "hardening", "version": "1"}}})
    .to_string();
    for (origin, status) in [
        ("http://evil.example", 403),
        ("https://cairn.example", 200),
        ("null", 403),
    ] {
        let r = raw(
            server.addr,
            &format!(
                "POST /mcp HTTP/1.1\r\nHost: cairn.example\r\nOrigin: {origin}\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream"
            ),
            body.as_bytes(),
        );
        assert_eq!(r.status, status, "{origin}");
        if status == 403 {
            assert_eq!(r.code(), "origin_not_allowed");
        }
    }
    // The default: loopback names only.
    let plain = start(ServerConfig::default());
    let r = mcp_initialize(plain.addr, &plain.admin, "cairn.example");
    assert_eq!(r.status, 403);
    assert_eq!(
        mcp_initialize(plain.addr, &plain.admin, "127.0.0.1:8714").status,
        200
    );
}

/// The rejections axum and rmcp answer in plain text keep what they say
/// in the one error shape (a probe found every one answered "Bad Request"
/// or "Not Acceptable" with code `invalid_request`): a path that does not
/// parse names why, an MCP request that does not accept event streams is
/// 406 `not_acceptable` saying what to accept.
#[test]
fn plain_text_rejections_keep_their_reason() {
    let server = start(config(Limits::default()));
    let admin = server.admin.clone();
    let reply = get(&server, "/v1/sessions/%ff", &admin);
    assert_eq!(reply.status, 400, "{}", reply.text());
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(message, "Bad Request");
    assert!(message.starts_with("Bad Request: "), "{message}");
    // A method the route lacks: 405 in the error shape, its Allow kept.
    let method = raw(
        server.addr,
        &format!("DELETE /v1/steps HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}"),
        b"",
    );
    assert_eq!(method.status, 405);
    assert!(method.header("allow").is_some_and(|a| a.contains("POST")));
    assert_eq!(method.header("cache-control"), Some("no-store"));
    let session = mcp_session(server.addr, &admin);
    let refused = raw(
        server.addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json\r\nAccept: application/json\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18"
        ),
        br#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
    );
    assert_eq!(
        refused.status,
        406,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    // In the JSON-RPC shape MCP clients read, the API's error as its data.
    let rpc = refused.json();
    assert_eq!(
        (&rpc["jsonrpc"], &rpc["id"], &rpc["error"]["code"]),
        (&json!("2.0"), &Value::Null, &json!(-32600)),
        "{rpc}"
    );
    assert_eq!(
        rpc["error"]["message"],
        rpc["error"]["data"]["error"]["message"]
    );
    let body = refused.api_error();
    assert_eq!(body["error"]["code"], "not_acceptable", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("text/event-stream"),
        "{body}"
    );
}

/// A session keeps its `initialize` request's parameters while it lives,
/// past what the request's memory count covers, so an `initialize` that
/// would hold more than 256 KiB once parsed is refused (a JSON-RPC error
/// answering its id) and opens no session; an ordinary one opens.
#[test]
fn an_initialize_too_large_to_keep_opens_no_session() {
    let server = start(config(Limits::default()));
    let pad: Vec<Value> = (0..20_000).map(|_| json!({"": 0})).collect();
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {"experimental": {"x": {"pad": pad}}},
        "clientInfo": {"name": "hoarder", "version": "1"}}});
    let refused = raw(
        server.addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream",
            server.admin
        ),
        body.to_string().as_bytes(),
    );
    assert_eq!(
        refused.status,
        400,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    assert_eq!(refused.rpc()["id"], 7);
    assert_eq!(refused.rpc()["error"]["code"], -32600);
    assert!(refused.header("mcp-session-id").is_none());
    let opened = mcp_initialize(server.addr, &server.admin, "localhost");
    assert_eq!(opened.status, 200);
    assert!(opened.header("mcp-session-id").is_some());
}

/// `/mcp/` (a client's URL with a trailing slash) is served by MCP, so
/// its refusals are JSON-RPC errors as `/mcp`'s are; a `POST` to `/v1`
/// (an OTLP exporter given the wrong endpoint) names `/v1/traces`.
#[test]
fn refusals_below_mcp_and_at_v1_say_what_to_do() {
    let server = start(config(Limits::default()));
    let admin = server.admin.clone();
    let refused = raw(
        server.addr,
        &format!(
            "POST /mcp/ HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream"
        ),
        br#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
    );
    assert!(refused.status >= 400, "{}", refused.status);
    let rpc = refused.json();
    assert_eq!(rpc["jsonrpc"], "2.0", "{rpc}");
    assert!(rpc["error"]["data"]["error"]["code"].is_string(), "{rpc}");
    for path in ["/v1", "/v1/"] {
        let otlp = raw(
            server.addr,
            &format!(
                "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-protobuf"
            ),
            b"",
        );
        assert_eq!(otlp.status, 404, "{path}");
        assert!(
            otlp.api_error()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("/v1/traces"),
            "{path}: {}",
            String::from_utf8_lossy(&otlp.body)
        );
    }
}
