//! The same input rules on every surface: a mistake gets the same code
//! and field over REST and MCP, MCP's listing reads as REST's, and
//! refusals say how to do it right.

use super::common::*;

/// MCP's session listing reads as REST's does: a key bound to one agent
/// lists another agent's sessions (reading is the org's), an empty or
/// malformed agent id is refused rather than matching nothing, and pages,
/// filters and rows are REST's.
#[test]
fn mcp_lists_sessions_as_rest_does() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    post(
        &server,
        "/v1/steps",
        &admin,
        &step("other-s", "other", "plan", "x"),
    );
    let bound = key_for(&server, "acme", Role::Writer, Some("mine"));
    let rest = get(&server, "/v1/sessions?agent_id=other", &bound);
    assert_eq!(rest.status, 200, "{}", rest.text());
    assert!(rest.text().contains("other-s"), "{}", rest.text());
    let session = mcp_session(server.addr, &bound);
    let listed = mcp_tool(
        server.addr,
        &bound,
        &session,
        "get_session_history",
        json!({"agent_id": "other"}),
    )
    .rpc();
    assert_ne!(listed["result"]["isError"], true, "{listed}");
    assert!(listed.to_string().contains("other-s"), "{listed}");
    let own = mcp_tool(
        server.addr,
        &bound,
        &session,
        "get_session_history",
        json!({}),
    )
    .rpc();
    assert!(!own.to_string().contains("other-s"), "{own}");
    for malformed in ["", "a b"] {
        let refused = mcp_tool(
            server.addr,
            &bound,
            &session,
            "get_session_history",
            json!({"agent_id": malformed}),
        )
        .rpc();
        let error = &refused["result"]["structuredContent"]["error"];
        assert_eq!(error["code"], "malformed_id", "{refused}");
        assert_eq!(error["field"], "agent_id", "{refused}");
    }
    // Pages, filters and rows as REST's: two sessions of one agent, a page
    // of one at a time through next_cursor, then none; a kind filter; a
    // cursor that is none refused naming it.
    post(
        &server,
        "/v1/steps",
        &admin,
        &step("other-t", "other", "decision", "y"),
    );
    let page = |args: Value| {
        mcp_tool(server.addr, &bound, &session, "get_session_history", args).rpc()["result"]
            ["structuredContent"]
            .clone()
    };
    let first = page(json!({"agent_id": "other", "limit": 1}));
    // The text content: seed 000's list, then (a full page) the cursor,
    // for hosts that show the model the text alone.
    let texts = mcp_tool(
        server.addr,
        &bound,
        &session,
        "get_session_history",
        json!({"agent_id": "other", "limit": 1}),
    )
    .rpc()["result"]["content"]
        .clone();
    let listed: Value = serde_json::from_str(texts[0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(listed, first["sessions"], "{texts}");
    let cursor_block: Value = serde_json::from_str(texts[1]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        cursor_block,
        json!({"next_cursor": first["next_cursor"]}),
        "{texts}"
    );
    let rest_first = get(&server, "/v1/sessions?agent_id=other&limit=1", &bound).json()[0].clone();
    let row = &first["sessions"][0];
    for member in ["session_id", "sealed", "started_at", "cursor", "step_count"] {
        assert_eq!(
            row[member], rest_first[member],
            "{member}: {first} / {rest_first}"
        );
    }
    let cursor = first["next_cursor"]
        .as_str()
        .expect("a full page")
        .to_owned();
    let second = page(json!({"agent_id": "other", "limit": 1, "cursor": cursor}));
    assert_ne!(
        second["sessions"][0]["session_id"], row["session_id"],
        "{second}"
    );
    let third = page(json!({"agent_id": "other", "limit": 1, "cursor": second["next_cursor"]}));
    assert_eq!(third["sessions"], json!([]), "{third}");
    assert_eq!(third["next_cursor"], Value::Null, "{third}");
    let last_texts = mcp_tool(
        server.addr,
        &bound,
        &session,
        "get_session_history",
        json!({"agent_id": "other", "limit": 1, "cursor": second["next_cursor"]}),
    )
    .rpc()["result"]["content"]
        .clone();
    assert_eq!(last_texts.as_array().map(Vec::len), Some(1), "{last_texts}");
    let decisions = page(json!({"agent_id": "other", "kind": "decision"}));
    let listed: Vec<&str> = decisions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["other-t"], "{decisions}");
    let refused = page(json!({"cursor": "nonsense"}));
    assert_eq!(
        (
            refused["error"]["code"].as_str(),
            refused["error"]["field"].as_str()
        ),
        (Some("invalid_argument"), Some("cursor")),
        "{refused}"
    );
}

/// The same mistake gets the same code and field on REST and MCP: a
/// missing member is `missing_field` naming it (MCP's typed arguments
/// answer so), an empty erasure reason `invalid_argument` naming `reason`.
#[test]
fn the_same_mistake_gets_the_same_code_on_rest_and_mcp() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let recorded = post(
        &server,
        "/v1/steps",
        &admin,
        &json!({"session_id": "m", "agent_id": "a", "step_type": "decision", "content": "x", "status": "flagged"}),
    );
    assert_eq!(recorded.status, 201, "{}", recorded.text());
    let trace = recorded.json()["trace_id"].as_str().unwrap().to_owned();
    let session = mcp_session(server.addr, &admin);
    for (path, body, tool, args, code, field) in [
        (
            format!("/v1/steps/{trace}/erase"),
            json!({}),
            "erase_step",
            json!({"trace_id": trace}),
            "missing_field",
            "reason",
        ),
        (
            format!("/v1/steps/{trace}/erase"),
            json!({"reason": null}),
            "erase_step",
            json!({"trace_id": trace, "reason": null}),
            "missing_field",
            "reason",
        ),
        (
            format!("/v1/steps/{trace}/erase"),
            json!({"reason": " "}),
            "erase_step",
            json!({"trace_id": trace, "reason": " "}),
            "invalid_argument",
            "reason",
        ),
        (
            format!("/v1/steps/{trace}/review"),
            json!({"note": "n"}),
            "review_step",
            json!({"trace_id": trace, "note": "n"}),
            "missing_field",
            "decision",
        ),
        (
            "/v1/sessions".to_owned(),
            json!({"session_id": "m2"}),
            "audit_session_start",
            json!({"session_id": "m2"}),
            "missing_field",
            "agent_id",
        ),
        (
            "/v1/steps".to_owned(),
            json!({"session_id": "m", "step_type": "plan", "content": "x"}),
            "log_reasoning_step",
            json!({"session_id": "m", "step_type": "plan", "content": "x"}),
            "missing_field",
            "agent_id",
        ),
        (
            "/v1/audit-events".to_owned(),
            json!({}),
            "record_audit_event",
            json!({}),
            "missing_field",
            "action",
        ),
        (
            "/v1/sessions/m/turns".to_owned(),
            json!({"agent_id": "a"}),
            "record_turn",
            json!({"session_id": "m", "agent_id": "a"}),
            "missing_field",
            "thinking",
        ),
        (
            "/v1/sql".to_owned(),
            json!({}),
            "query_sql",
            json!({}),
            "missing_field",
            "sql",
        ),
        (
            "/v1/thinking/parse".to_owned(),
            json!({}),
            "parse_thinking",
            json!({}),
            "missing_field",
            "text",
        ),
        (
            "/v1/audit-events".to_owned(),
            json!({"action": " "}),
            "record_audit_event",
            json!({"action": " "}),
            "invalid_argument",
            "action",
        ),
        (
            format!("/v1/steps/{trace}/review"),
            json!({"decision": "approve", "note": "n".repeat(65_537)}),
            "review_step",
            json!({"trace_id": trace, "decision": "approve", "note": "n".repeat(65_537)}),
            "invalid_argument",
            "note",
        ),
    ] {
        let rest = post(&server, &path, &admin, &body);
        assert_eq!(rest.status, 400, "{path}: {}", rest.text());
        let rest_error = &rest.json()["error"];
        let rpc = mcp_tool(server.addr, &admin, &session, tool, args).rpc();
        assert_eq!(rpc["result"]["isError"], true, "{tool}: {rpc}");
        let mcp_error = &rpc["result"]["structuredContent"]["error"];
        for error in [rest_error, mcp_error] {
            assert_eq!(
                (error["code"].as_str(), error["field"].as_str()),
                (Some(code), Some(field)),
                "{path} / {tool}: {error}"
            );
        }
    }
}

/// A few more refusals name their field or the way out: a key without a
/// role, a replay's unknown level, an MCP request sent before its
/// session's handshake.
#[test]
fn refusals_name_their_field_and_the_way_out() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    for (body, code) in [
        (json!({}), "missing_field"),
        (json!({"role": "boss"}), "invalid_argument"),
    ] {
        let reply = post(&server, "/v1/keys", &admin, &body);
        assert_eq!(reply.status, 400, "{}", reply.text());
        let error = &reply.json()["error"];
        assert_eq!(
            (error["code"].as_str(), error["field"].as_str()),
            (Some(code), Some("role")),
            "{error}"
        );
    }
    post(&server, "/v1/steps", &admin, &step("lv", "a", "plan", "x"));
    let level = get(&server, "/v1/sessions/lv?level=bogus", &admin);
    assert_eq!(level.status, 400, "{}", level.text());
    assert_eq!(level.json()["error"]["field"], "level");
    let no_session = raw(
        server.addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream"
        ),
        br#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#,
    );
    assert_eq!(no_session.status, 400);
    let text = String::from_utf8_lossy(&no_session.body).to_string();
    assert!(text.contains("send `initialize` first"), "{text}");

    // A mistyped tool argument is said in REST's words, not serde's.
    let session = mcp_session(server.addr, &admin);
    let rpc = mcp_tool(
        server.addr,
        &admin,
        &session,
        "log_reasoning_step",
        json!({"session_id": "lv", "step_type": "plan", "confidence": "high"}),
    )
    .rpc();
    let error = &rpc["result"]["structuredContent"]["error"];
    assert_eq!(error["field"], "confidence", "{rpc}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("must be a number") && !m.contains("f64")),
        "{rpc}"
    );

    // A step logged over MCP is answered as REST answers it.
    let logged = mcp_tool(
        server.addr,
        &admin,
        &session,
        "log_reasoning_step",
        json!({"session_id": "mcp-new", "agent_id": "a", "step_type": "plan", "content": "x"}),
    )
    .rpc();
    let answer = &logged["result"]["structuredContent"];
    assert_eq!(answer["session_created"], true, "{logged}");
    assert!(
        answer["created_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{logged}"
    );
    assert!(answer["seq"].as_u64().is_some(), "{logged}");

    // A key bound to no agent lists every agent's sessions, as REST does.
    let history = mcp_tool(
        server.addr,
        &admin,
        &session,
        "get_session_history",
        json!({"limit": 5}),
    )
    .rpc();
    assert_ne!(history["result"]["isError"], true, "{history}");
    assert!(history.to_string().contains("\"lv\""), "{history}");

    // A vkey whose `+` a query string read as spaces is told how to send
    // it; a quorum past the witnesses given names quorum.
    let vkey = cairn_core::checkpoint::Cosigner::from_seed("w.example", &[1; 32])
        .unwrap()
        .verifier()
        .to_string();
    let spaced = get(&server, &format!("/v1/verify?witness={vkey}"), &admin);
    assert_eq!(spaced.status, 400, "{}", spaced.text());
    assert!(spaced.text().contains("%2B"), "{}", spaced.text());
    let encoded = vkey.replace('+', "%2B");
    let quorum = get(
        &server,
        &format!("/v1/verify?witness={encoded}&quorum=2"),
        &admin,
    );
    assert_eq!(quorum.status, 400, "{}", quorum.text());
    assert_eq!(
        quorum.json()["error"]["field"],
        "quorum",
        "{}",
        quorum.text()
    );

    // A query number that is none names its parameter and what was sent.
    let proof = get(&server, "/v1/proofs/inclusion?seq=abc", &admin);
    assert_eq!(proof.status, 400, "{}", proof.text());
    assert_eq!(proof.json()["error"]["field"], "seq", "{}", proof.text());
    assert!(proof.text().contains("abc"), "{}", proof.text());
}
