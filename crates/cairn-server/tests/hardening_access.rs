//! Hostile clients against what a key may do and what a request means, on
//! a real loopback socket: keys bound to an agent acting for another agent,
//! ambiguous JSON, empty exports and long ids, metrics for the operator
//! only, turns written whole or not at all; limits out of range and
//! compressed bodies on every surface are in
//! `hardening_access/request_limits.rs`. (Moved from `hardening.rs`;
//! MCP's gate is in `mcp_gate.rs`.)

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;

// ------------------------------------------------------------------ item 6

/// A key bound to an agent acts on its agent's sessions and steps only,
/// over REST and MCP, and mints keys for that agent only.
#[test]
fn bound_keys_act_only_for_their_agent() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    for (session, agent) in [("theirs", "bob"), ("mine", "alice")] {
        let r = post(
            &server,
            "/v1/steps",
            &admin,
            &step(session, agent, "plan", "x"),
        );
        assert_eq!(r.status, 201);
    }
    let flagged = post(
        &server,
        "/v1/steps",
        &admin,
        &json!({"session_id": "theirs", "agent_id": "bob", "step_type": "decision", "status": "flagged"}),
    )
    .json()["trace_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let alice = key_for(&server, "acme", Role::Writer, Some("alice"));
    let alice_admin = key_for(&server, "acme", Role::Admin, Some("alice"));
    let alice_auditor = key_for(&server, "acme", Role::Auditor, Some("alice"));

    // REST: seal and audit events on another agent's session.
    let sealed = post(&server, "/v1/sessions/theirs/seal", &alice, &json!({}));
    assert_eq!(
        (sealed.status, sealed.code().as_str()),
        (403, "forbidden"),
        "{}",
        sealed.text()
    );
    let event = post(
        &server,
        "/v1/audit-events",
        &alice,
        &json!({"session_id": "theirs", "action": "forged"}),
    );
    assert_eq!((event.status, event.code().as_str()), (403, "forbidden"));
    let erased = post(
        &server,
        &format!("/v1/steps/{flagged}/erase"),
        &alice_admin,
        &json!({"reason": "x"}),
    );
    assert_eq!((erased.status, erased.code().as_str()), (403, "forbidden"));
    let reviewed = post(
        &server,
        &format!("/v1/steps/{flagged}/review"),
        &alice_auditor,
        &json!({"decision": "approve"}),
    );
    assert_eq!(
        (reviewed.status, reviewed.code().as_str()),
        (403, "forbidden")
    );
    // Its own session: fine.
    let own_event = post(
        &server,
        "/v1/audit-events",
        &alice,
        &json!({"session_id": "mine", "action": "tool"}),
    );
    assert_eq!(own_event.status, 201, "{}", own_event.text());
    assert_eq!(
        post(&server, "/v1/sessions/mine/seal", &alice, &json!({})).status,
        200
    );

    // Keys: a bound admin mints keys for its agent only.
    let minted = post(&server, "/v1/keys", &alice_admin, &json!({"role": "admin"}));
    assert_eq!(minted.status, 201, "{}", minted.text());
    assert_eq!(minted.json()["agent_id"], "alice");
    let escalated = post(
        &server,
        "/v1/keys",
        &alice_admin,
        &json!({"role": "admin", "agent_id": "bob"}),
    );
    assert_eq!(
        (escalated.status, escalated.code().as_str()),
        (403, "forbidden")
    );
    let listed = get(&server, "/v1/keys", &alice_admin).json();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["agent_id"] == "alice"),
        "{listed}"
    );
    let unbound_id = get(&server, "/v1/keys", &admin).json()[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let revoked = call(
        &server,
        "DELETE",
        &format!("/v1/keys/{unbound_id}"),
        &alice_admin,
        None,
    );
    assert_eq!(revoked.status, 404);
    assert_eq!(get(&server, "/v1/sessions/theirs", &admin).status, 200);

    // MCP: the same tools on another agent's session are refused.
    let session = mcp_session(server.addr, &alice);
    for (tool, args) in [
        ("merkle_finalize", json!({"session_id": "theirs"})),
        ("audit_session_end", json!({"session_id": "theirs"})),
        (
            "record_audit_event",
            json!({"session_id": "theirs", "action": "forged"}),
        ),
        (
            "thought_record",
            json!({"session_id": "theirs", "type": "plan", "content": "x"}),
        ),
    ] {
        let r = mcp_tool(server.addr, &alice, &session, tool, args);
        let rpc = r.rpc();
        let result = &rpc["result"];
        assert_eq!(result["isError"], true, "{tool}: {rpc}");
        assert_eq!(
            result["structuredContent"]["error"]["code"], "forbidden",
            "{tool}: {rpc}"
        );
    }
    let info = server.store.session("acme", "theirs").unwrap().unwrap();
    assert!(info.seal.is_none(), "bob's session was sealed");

    // Continuing another agent's sealed session (each is continued once:
    // it would take bob's continuation), by id or by final hash, over
    // REST and MCP, is refused; its own, and bob's by bob, are not.
    assert_eq!(
        post(&server, "/v1/sessions/theirs/seal", &admin, &json!({})).status,
        200
    );
    let head = server
        .store
        .session("acme", "theirs")
        .unwrap()
        .unwrap()
        .head
        .to_hex();
    for body in [
        json!({"session_id": "taken", "predecessor_session": "theirs"}),
        json!({"session_id": "taken", "predecessor": head}),
    ] {
        let r = post(&server, "/v1/sessions", &alice, &body);
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "bad_predecessor"),
            "{body}: {}",
            r.text()
        );
        assert!(r.text().contains("bound to agent alice"), "{}", r.text());
    }
    let r = mcp_tool(
        server.addr,
        &alice,
        &session,
        "audit_session_start",
        json!({"session_id": "taken", "predecessor_session": "theirs"}),
    );
    let rpc = r.rpc();
    assert_eq!(rpc["result"]["isError"], true, "{rpc}");
    assert_eq!(
        rpc["result"]["structuredContent"]["error"]["code"], "bad_predecessor",
        "{rpc}"
    );
    assert!(server.store.session("acme", "taken").unwrap().is_none());
    let own = post(
        &server,
        "/v1/sessions",
        &alice,
        &json!({"session_id": "mine-next", "predecessor_session": "mine"}),
    );
    assert_eq!(own.status, 201, "{}", own.text());
    let bob = key_for(&server, "acme", Role::Writer, Some("bob"));
    let continued = post(
        &server,
        "/v1/sessions",
        &bob,
        &json!({"session_id": "theirs-next", "predecessor": head}),
    );
    assert_eq!(continued.status, 201, "{}", continued.text());
    // Its own session under its name's hash (hash_agent_id) is its own:
    // started (continuing `predecessor`), given a step and sealed by bob.
    let hashed_session = |id: &str, predecessor: Option<&str>| {
        let mut body = json!({"session_id": id, "hash_agent_id": true});
        if let Some(p) = predecessor {
            body["predecessor_session"] = json!(p);
        }
        let started = post(&server, "/v1/sessions", &bob, &body);
        assert_eq!(started.status, 201, "{id}: {}", started.text());
        let step =
            json!({"session_id": id, "step_type": "plan", "content": id, "hash_agent_id": true});
        let stepped = post(&server, "/v1/steps", &bob, &step);
        assert_eq!(stepped.status, 201, "{id}: {}", stepped.text());
        // A step without hash_agent_id is told to send it.
        let plain = json!({"session_id": id, "step_type": "plan", "content": "plain"});
        let refused = post(&server, "/v1/steps", &bob, &plain);
        assert_eq!(refused.status, 409, "{id}: {}", refused.text());
        assert!(
            refused.text().contains("send hash_agent_id: true"),
            "{id}: {}",
            refused.text()
        );
        let sealed = post(
            &server,
            &format!("/v1/sessions/{id}/seal"),
            &bob,
            &json!({}),
        );
        assert_eq!(sealed.status, 200, "{id}: {}", sealed.text());
    };
    hashed_session("hashed", None);
    hashed_session("hashed-next", Some("hashed"));
    let taken = post(
        &server,
        "/v1/sessions",
        &alice,
        &json!({"session_id": "hashed-taken", "predecessor_session": "hashed-next"}),
    );
    assert_eq!(taken.status, 400, "{}", taken.text());
    assert!(
        taken.text().contains("bound to agent alice"),
        "{}",
        taken.text()
    );
}

// ----------------------------------------------------------------- item 10

/// Bodies mean one thing: a wrongly typed member, an unknown member, a
/// member given twice and an integer beyond 64 bits are refused, naming
/// what is wrong.
#[test]
fn ambiguous_bodies_are_refused() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    for (path, body, code, words) in [
        (
            "/v1/sessions",
            r#"{"session_id": "c", "agent_id": "a", "full_consent": "yes"}"#,
            "invalid_argument",
            "full_consent",
        ),
        (
            "/v1/sessions",
            r#"{"session_id": "c", "agent_id": "a", "colour": 1}"#,
            "unknown_field",
            "colour",
        ),
        (
            "/v1/sessions",
            r#"{"session_id": "c", "agent_id": "a", "agent_id": "b"}"#,
            "invalid_json",
            "twice",
        ),
        (
            "/v1/steps",
            r#"{"session_id": "c", "agent_id": "a", "step_type": "plan", "token_count": 18446744073709551616}"#,
            "invalid_json",
            "64-bit",
        ),
        (
            "/v1/steps",
            r#"{"session_id": "c", "agent_id": "a", "step_type": "plan", "metadata": {"n": 1, "n": 2}}"#,
            "invalid_json",
            "twice",
        ),
        (
            // serde_json would read this object back as the number 1.
            "/v1/steps",
            r#"{"session_id": "c", "agent_id": "a", "step_type": "plan", "metadata": {"$serde_json::private::RawValue": "1"}}"#,
            "invalid_record",
            "reserved",
        ),
        (
            "/v1/keys",
            r#"{"role": "reader", "admin": true}"#,
            "unknown_field",
            "admin",
        ),
        (
            "/v1/sql",
            r#"{"sql": "SELECT 1", "rows": 5}"#,
            "unknown_field",
            "rows",
        ),
        (
            "/v1/audit-events",
            r#"{"action": "x", "sesion_id": "c"}"#,
            "unknown_field",
            "did you mean session_id?",
        ),
    ] {
        // As sent, and padded with white space past the size from which
        // a body is parsed on the blocking pool: the same answer.
        for body in [body.to_owned(), format!("{body}{}", " ".repeat(70_000))] {
            let r = call(&server, "POST", path, &admin, Some(body.as_bytes()));
            assert_eq!(
                (r.status, r.code().as_str()),
                (400, code),
                "{}: {}",
                &body[..body.len().min(200)],
                r.text()
            );
            assert!(
                r.text().contains(words),
                "{}: {}",
                &body[..body.len().min(200)],
                r.text()
            );
        }
    }
    assert!(server.store.session("acme", "c").unwrap().is_none());
    // MCP tool arguments: unknown members are invalid params; duplicate
    // members are refused before the MCP server sees them.
    let session = mcp_session(server.addr, &admin);
    let r = mcp_tool(
        server.addr,
        &admin,
        &session,
        "audit_session_start",
        json!({"session_id": "m", "full_consent": "yes"}),
    );
    assert!(
        r.rpc()["error"].is_object() || r.rpc()["result"]["isError"] == true,
        "{}",
        r.rpc()
    );
    let duplicate = raw(
        server.addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18"
        ),
        br#"{"jsonrpc": "2.0", "id": 9, "method": "tools/list", "method": "tools/call"}"#,
    );
    // Answered as JSON-RPC (the MCP transport lets a refused message's 400
    // carry an error answering its id), the REST error in its `data`.
    let answer = duplicate.json();
    assert_eq!(duplicate.status, 400);
    assert_eq!(
        (&answer["jsonrpc"], &answer["id"], &answer["error"]["code"]),
        (&json!("2.0"), &json!(9), &json!(-32600)),
        "{answer}"
    );
    assert_eq!(answer["error"]["data"]["error"]["code"], "invalid_json");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("given twice")),
        "{answer}"
    );
    // An id given twice is answered with a null id: either may be another
    // request's.
    let two_ids = raw(
        server.addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18"
        ),
        br#"{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "tools/list"}"#,
    );
    assert_eq!(
        (
            two_ids.status,
            &two_ids.json()["id"],
            &two_ids.json()["error"]["code"]
        ),
        (400, &Value::Null, &json!(-32600)),
        "{}",
        String::from_utf8_lossy(&two_ids.body)
    );
    // JSON nested past the reader's depth is JSON all the same: Invalid
    // Request, not Parse error.
    let deep = raw(
        server.addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18"
        ),
        format!(
            "{{\"jsonrpc\": \"2.0\", \"id\": 4, \"method\": \"tools/list\", \"params\": {}{}}}",
            "[".repeat(200),
            "]".repeat(200)
        )
        .as_bytes(),
    );
    assert_eq!(
        (deep.status, &deep.json()["error"]["code"]),
        (400, &json!(-32600)),
        "{}",
        String::from_utf8_lossy(&deep.body)
    );
    // What is not JSON at all is JSON-RPC's Parse error, with a null id.
    let garbled = raw(
        server.addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18"
        ),
        br#"{"jsonrpc": "2.0", "id": 11, "method": "tools/list""#,
    );
    let answer = garbled.json();
    assert_eq!(garbled.status, 400);
    assert_eq!(
        (&answer["id"], &answer["error"]["code"]),
        (&Value::Null, &json!(-32700)),
        "{answer}"
    );
    assert_eq!(answer["error"]["data"]["error"]["code"], "invalid_json");
    // A member name serde_json reserves for its own markers: the MCP
    // server's JSON library would read `{"<marker>": "[1]"}` as `[1]`, so
    // the step would be stored as another value than the one sent. Refused
    // before the MCP server reads it, as REST refuses it in a payload.
    let marker = raw(
        server.addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18"
        ),
        br#"{"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "log_reasoning_step", "arguments": {"session_id": "marker", "step_type": "plan", "metadata": {"k": {"$serde_json::private::RawValue": "[1]"}}}}}"#,
    );
    assert_eq!(
        (
            marker.status,
            &marker.json()["id"],
            &marker.json()["error"]["code"]
        ),
        (400, &json!(10), &json!(-32600)),
        "{}",
        String::from_utf8_lossy(&marker.body)
    );
    assert_eq!(
        marker.json()["error"]["data"]["error"]["code"],
        "invalid_json"
    );
    let message = marker.json()["error"]["message"].to_string();
    assert!(
        message.contains("$serde_json::private::RawValue"),
        "{message}"
    );
    assert!(server.store.session("acme", "marker").unwrap().is_none());
}

/// An export whose scope matches nothing is a 404 before any byte of a
/// bundle; a long or strange id in a path is not echoed whole.
#[test]
fn empty_exports_and_long_ids() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    assert_eq!(
        post(&server, "/v1/steps", &admin, &step("s", "a", "plan", "x")).status,
        201
    );
    for path in [
        "/v1/export?agent=nobody",
        "/v1/export?session=nothing",
        "/v1/export?since=2001-01-01T00:00:00Z&until=2001-01-02T00:00:00Z",
        "/v1/export?since=2001-01-01&until=2001-01-01",
    ] {
        let r = get(&server, path, &admin);
        assert_eq!((r.status, r.code().as_str()), (404, "not_found"), "{path}");
    }
    // A time-range export reads its times as a listing does (a date: that
    // day, `until` included), and names the bound it lacks.
    let today = cairn_store::now().to_string()[..10].to_owned();
    let range = get(
        &server,
        &format!("/v1/export?since={today}&until={today}"),
        &admin,
    );
    assert_eq!(range.status, 200, "{}", range.text());
    for (path, field) in [
        ("/v1/export?since=2001-01-01", "until"),
        ("/v1/export?until=2001-01-01", "since"),
        ("/v1/export?since=soon&until=2001-01-01", "since"),
    ] {
        let r = get(&server, path, &admin);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert_eq!(r.json()["error"]["field"], field, "{path}");
    }
    let long = "x".repeat(5000);
    for path in [
        format!("/v1/sessions/{long}"),
        format!("/v1/steps/{long}"),
        format!("/v1/sessions/{long}/trail"),
        format!("/v1/audit-events/{long}"),
    ] {
        let r = get(&server, &path, &admin);
        assert_eq!(r.status, 404);
        // The id is cut to 64 characters; a session named so by OTLP is
        // named by its stored id (at most 193 characters).
        assert!(r.body.len() < 600, "{path}: {}", r.text());
    }
    let odd = get(&server, "/v1/sessions/a%0Ab%1B%5B31m", &admin);
    assert_eq!(odd.status, 404);
    assert!(!odd.text().contains('\u{1b}'), "{}", odd.text());
}

/// Metrics count every org: they need the operator's token, or a client
/// on the server's own machine.
#[test]
fn metrics_are_for_the_operator() {
    let open = start(ServerConfig::default());
    let local = cairn_testkit::http::call(open.addr, "GET", "/metrics", None, None);
    assert_eq!(local.status, 200, "loopback scrapes work without a token");
    // On a dual-stack listener a local IPv4 scrape comes from
    // ::ffff:127.0.0.1: loopback too.
    let dual = start_on("[::]:0", ServerConfig::default());
    let ipv4 = std::net::SocketAddr::from(([127, 0, 0, 1], dual.addr.port()));
    let r = cairn_testkit::http::call(ipv4, "GET", "/metrics", None, None);
    assert_eq!(r.status, 200, "{}", r.text());
    // A request a same-machine proxy forwarded comes from loopback too, but
    // names the client it came from: refused without a token.
    for header in [
        "X-Forwarded-For: 203.0.113.9",
        "Forwarded: for=203.0.113.9",
        "X-Real-IP: 203.0.113.9",
        "X-Forwarded-Proto: https",
        "x-forwarded-host: cairn.example",
        "Via: 1.1 proxy",
        "CF-Connecting-IP: 203.0.113.9",
        "X-Forwarded: for=203.0.113.9",
        "X-Cluster-Client-IP: 203.0.113.9",
        "Fastly-Client-IP: 203.0.113.9",
        "X-Azure-ClientIP: 203.0.113.9",
        "X-Envoy-External-Address: 203.0.113.9",
        "CDN-Loop: cloudflare",
    ] {
        let r = raw_get(open.addr, "/metrics", header);
        assert!(r.starts_with("HTTP/1.1 403"), "{header}: {r}");
        assert!(r.contains("CAIRN_METRICS_TOKEN"), "{header}: {r}");
    }
    let server = start(ServerConfig {
        metrics_token: Some("scrape-me".into()),
        ..ServerConfig::default()
    });
    for (token, status) in [
        (None, 403),
        (Some("wrong"), 403),
        (Some(server.admin.as_str()), 403),
        (Some("scrape-me"), 200),
    ] {
        let r = cairn_testkit::http::call(server.addr, "GET", "/metrics", token, None);
        assert_eq!(r.status, status, "{token:?}");
    }
    // From another address of this machine, without a token: refused.
    let Some(ip) = local_ip() else {
        eprintln!("no non-loopback address: skipping the remote case");
        return;
    };
    let remote = start_on(&format!("{ip}:0"), ServerConfig::default());
    let r = cairn_testkit::http::call(remote.addr, "GET", "/metrics", None, None);
    assert_eq!((r.status, r.code().as_str()), (403, "forbidden"));
    assert!(r.text().contains("CAIRN_METRICS_TOKEN"), "{}", r.text());
}

/// The whole answer to a GET of `path` on `addr` with one extra header
/// line, as text.
fn raw_get(addr: std::net::SocketAddr, path: &str, header: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{header}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// A non-loopback address of this machine, if it has one.
fn local_ip() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// A turn is one unit: a bad step (a record rule, a link to nothing, a
/// malformed member) refuses the whole turn with a 4xx naming it, and
/// nothing of the turn is written.
#[test]
fn a_turn_is_written_whole_or_not_at_all() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let good = |content: &str| json!({"step_type": "plan", "content": content});
    for (steps, status, code, words) in [
        (
            json!([good("a"), {"step_type": "no-such-kind"}, good("c")]),
            400,
            "unknown_step_type",
            "steps[1]",
        ),
        (
            json!([good("a"), {"step_type": "plan", "links": {"corrects": "nothing"}}]),
            400,
            "unknown_link",
            "steps[1]",
        ),
        (
            json!([good("a"), good("b"), {"step_type": "plan", "colour": "red"}]),
            400,
            "unknown_field",
            "steps[2]",
        ),
    ] {
        let r = post(
            &server,
            "/v1/sessions/turned/turns",
            &admin,
            &json!({"thinking": "[思考] first", "agent_id": "a", "steps": steps}),
        );
        assert_eq!(
            (r.status, r.code().as_str()),
            (status, code),
            "{}",
            r.text()
        );
        assert!(r.text().contains(words), "{}", r.text());
        assert!(
            server.store.session("acme", "turned").unwrap().is_none(),
            "part of a refused turn was written: {}",
            r.text()
        );
    }
    let whole = post(
        &server,
        "/v1/sessions/turned/turns",
        &admin,
        &json!({"thinking": "[思考] first", "agent_id": "a", "steps": [good("a"), good("b")]}),
    );
    assert_eq!(whole.status, 201, "{}", whole.text());
    assert_eq!(whole.json()["accepted"], 3);
    assert_eq!(
        get(&server, "/v1/sessions/turned", &admin).json()["step_count"],
        3
    );
}

#[path = "hardening_access/request_limits.rs"]
mod request_limits;
#[path = "hardening_access/strangers.rs"]
mod strangers;
