//! What a page on another origin and a pasted token meet: cross-origin
//! access only where it is configured, and no error answer that quotes a
//! token back.

use super::common::*;

/// Cross-origin access is off unless origins are configured; then only
/// those origins' pages may call the API (preflights answered, the key
/// sent as `Authorization`, `Retry-After` readable), never with cookies,
/// and never the web UI's pages or MCP.
#[test]
fn cross_origin_access_is_opt_in_and_api_only() {
    let app = "https://app.example";
    let preflight = |addr, path: &str, origin: &str| {
        raw(
            addr,
            &format!(
                "OPTIONS {path} HTTP/1.1\r\nHost: localhost\r\nOrigin: {origin}\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type"
            ),
            b"",
        )
    };
    let get_from = |addr, path: &str, origin: &str, token: &str| {
        raw(
            addr,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: localhost\r\nOrigin: {origin}\r\nAuthorization: Bearer {token}"
            ),
            b"",
        )
    };
    // The default: no CORS headers at all.
    let closed = start(ServerConfig::default());
    let answer = preflight(closed.addr, "/v1/steps", app);
    assert_eq!(answer.header("access-control-allow-origin"), None);
    let answer = get_from(closed.addr, "/v1/sessions", app, &closed.admin);
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("access-control-allow-origin"), None);

    let open = start(ServerConfig {
        cors_origins: vec![app.to_owned()],
        ..ServerConfig::default()
    });
    for path in ["/v1/steps", "/v1/traces", "/v1/bundles/verify"] {
        let answer = preflight(open.addr, path, app);
        assert!(answer.status < 300, "{path}: {}", answer.status);
        assert_eq!(
            answer.header("access-control-allow-origin"),
            Some(app),
            "{path}"
        );
        let methods = answer.header("access-control-allow-methods").unwrap_or("");
        assert!(methods.contains("POST"), "{path}: {methods}");
        let headers = answer
            .header("access-control-allow-headers")
            .unwrap_or("")
            .to_ascii_lowercase();
        assert!(
            headers.contains("authorization") && headers.contains("content-type"),
            "{path}: {headers}"
        );
        assert_eq!(answer.header("access-control-allow-credentials"), None);
    }
    let answer = get_from(open.addr, "/v1/sessions", app, &open.admin);
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("access-control-allow-origin"), Some(app));
    assert!(
        answer
            .header("access-control-expose-headers")
            .is_some_and(|h| h.to_ascii_lowercase().contains("retry-after")),
        "{:?}",
        answer.headers
    );
    assert!(
        answer
            .header("vary")
            .is_some_and(|v| v.to_ascii_lowercase().contains("origin"))
    );
    // Errors carry it too, so a page can read why it was refused.
    let refused = get_from(open.addr, "/v1/sessions", app, "cairn_nope_nope");
    assert_eq!(refused.status, 401);
    assert_eq!(refused.header("access-control-allow-origin"), Some(app));
    // A refusal axum makes (405) keeps them, reshaped into the JSON shape.
    let wrong_method = raw(
        open.addr,
        &format!(
            "PUT /v1/sessions HTTP/1.1\r\nHost: localhost\r\nOrigin: {app}\r\nAuthorization: Bearer {}",
            open.admin
        ),
        b"",
    );
    assert_eq!(wrong_method.status, 405);
    assert_eq!(
        wrong_method.header("access-control-allow-origin"),
        Some(app)
    );
    // So does an answer made outside the routes: an unknown route's 404.
    let unknown = get_from(open.addr, "/v1/nope", app, &open.admin);
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.header("access-control-allow-origin"), Some(app));
    let unknown = get_from(open.addr, "/v1/nope", "https://evil.example", &open.admin);
    assert_eq!(unknown.header("access-control-allow-origin"), None);
    // The service routes beside the API (metrics trust the server's own
    // machine) never answer another origin.
    for path in ["/metrics", "/healthz", "/openapi.json", "/docs"] {
        let answer = get_from(open.addr, path, app, &open.admin);
        assert_eq!(answer.header("access-control-allow-origin"), None, "{path}");
    }
    // Another origin, the web UI and MCP: nothing.
    let other = get_from(
        open.addr,
        "/v1/sessions",
        "https://evil.example",
        &open.admin,
    );
    assert_eq!(other.header("access-control-allow-origin"), None);
    let answer = preflight(open.addr, "/v1/steps", "https://evil.example");
    assert_eq!(answer.header("access-control-allow-origin"), None);
    for path in ["/ui/", "/ui/sign-in", "/mcp"] {
        let answer = preflight(open.addr, path, app);
        assert_eq!(answer.header("access-control-allow-origin"), None, "{path}");
        let answer = get_from(open.addr, path, app, &open.admin);
        assert_eq!(answer.header("access-control-allow-origin"), None, "{path}");
    }
}

/// No error answer quotes what looks like an API key back, on any surface
/// (a token pasted as a member name, a value, a header, an MCP method);
/// Cairn's own setting names in messages stay whole.
#[test]
fn errors_never_quote_a_token() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let secret = &admin[admin.len() - 30..];
    let unknown_member = post(
        &server,
        "/v1/steps",
        &admin,
        &json!({
            "session_id": "s", "agent_id": "a", "step_type": "plan", admin.clone(): 1
        }),
    );
    let otlp_member = call(
        &server,
        "POST",
        "/v1/traces",
        &admin,
        Some(format!("{{\"{admin}\": 1}}").as_bytes()),
    );
    let otlp_value = call(
        &server,
        "POST",
        "/v1/traces",
        &admin,
        Some(format!("{{\"resourceSpans\": \"{admin}\"}}").as_bytes()),
    );
    let otlp_header = raw(
        server.addr,
        &format!(
            "POST /v1/traces HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nContent-Type: {admin}"
        ),
        b"{}",
    );
    let session = mcp_session(server.addr, &admin);
    let mcp_method = raw(
        server.addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18"
        ),
        format!("{{\"jsonrpc\": \"2.0\", \"id\": 3, \"method\": \"{admin}\"}}").as_bytes(),
    );
    assert_eq!(mcp_method.rpc()["error"]["code"], -32601);
    assert_eq!(mcp_method.rpc()["id"], 3);
    for (what, status, body) in [
        ("REST member", unknown_member.status, unknown_member.body),
        ("OTLP member", otlp_member.status, otlp_member.body),
        ("OTLP value", otlp_value.status, otlp_value.body),
        ("OTLP header", otlp_header.status, otlp_header.body),
        ("MCP method", mcp_method.status, mcp_method.body),
    ] {
        let text = String::from_utf8_lossy(&body);
        assert!(status >= 200, "{what}");
        assert!(!text.contains(secret), "{what}: {text}");
    }
    // A token pasted as an id is never recorded (the ledger could not
    // forget it): refused, naming the field, not the value.
    for field in [
        "session_id",
        "agent_id",
        "trace_id",
        "turn_id",
        "model",
        "links.tool_call",
        "links.policy_decision",
    ] {
        let mut body =
            json!({"session_id": "s", "agent_id": "a", "step_type": "plan", "content": "x"});
        match field.split_once('.') {
            Some((_, link)) => body["links"] = json!({link: format!("pasted-{admin}")}),
            None => body[field] = json!(format!("pasted-{admin}")),
        }
        let refused = post(&server, "/v1/steps", &admin, &body);
        assert_eq!(
            (
                refused.status,
                refused.code().as_str(),
                &refused.json()["error"]["field"]
            ),
            (400, "malformed_id", &json!(field)),
            "{field}: {}",
            refused.text()
        );
        assert!(!refused.text().contains(secret), "{}", refused.text());
    }
    let session = post(
        &server,
        "/v1/sessions",
        &admin,
        &json!({"session_id": admin.clone(), "agent_id": "a"}),
    );
    assert_eq!(session.code(), "malformed_id", "{}", session.text());
    assert!(server.store.session("acme", &admin).unwrap().is_none());
    // An origin MCP refuses names the setting that allows it, whole.
    let refused = raw(
        server.addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nOrigin: https://evil.example\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream"
        ),
        br#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#,
    );
    assert_eq!(refused.status, 403);
    assert!(
        String::from_utf8_lossy(&refused.body).contains("CAIRN_ALLOWED_ORIGINS"),
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
}
