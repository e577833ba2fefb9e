//! The server and calls the HTTP API suites share (`http.rs`,
//! `http_access.rs`, `http_verification.rs`): a server with a 256 KiB body
//! limit whose admin key is bootstrapped once, calls with or without a
//! token, an `analyst` step, and seed 000's four steps.
#![allow(dead_code)]

use super::common::*;

pub fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn LedgerStore> =
        Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap());
    let admin = cairn_server::bootstrap_admin_key(store.as_ref(), "acme")
        .unwrap()
        .unwrap();
    assert_eq!(
        cairn_server::bootstrap_admin_key(store.as_ref(), "acme").unwrap(),
        None,
        "only once"
    );
    let ledger = Arc::new(Ledger::new(Arc::clone(&store), SequencerConfig::default()));
    let config = ServerConfig {
        max_body_bytes: 256 * 1024,
        ..ServerConfig::default()
    };
    serve_state(
        "127.0.0.1:0",
        AppState::new(ledger, config),
        admin,
        store,
        dir,
    )
}

pub fn call(
    server: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Reply {
    cairn_testkit::http::call(server.addr, method, path, token, body)
}

pub fn step(session: &str, kind: &str, content: &str) -> Value {
    json!({"session_id": session, "agent_id": "analyst", "step_type": kind, "content": content})
}

/// Seed 000's four steps into `session`.
pub fn seed_000(server: &Server, token: &str, session: &str) -> Vec<Value> {
    [
        json!({"session_id": session, "agent_id": "analyst", "step_type": "Observation", "content": "User asked for Q4 revenue breakdown by segment"}),
        json!({"session_id": session, "agent_id": "analyst", "step_type": "ToolCall", "content": "Querying orders table", "input_data": {"sql": "SELECT segment, SUM(revenue) FROM orders WHERE quarter='Q4' GROUP BY 1"}}),
        json!({"session_id": session, "agent_id": "analyst", "step_type": "Reasoning", "content": "Enterprise grew 23% QoQ while SMB declined 5%.", "confidence": 0.88}),
        json!({"session_id": session, "agent_id": "analyst", "step_type": "FinalAnswer", "content": "Q4 revenue was $7.49M, up 15% QoQ.", "confidence": 0.95}),
    ]
    .iter()
    .map(|s| {
        let reply = post(server, "/v1/steps", token, s);
        assert_eq!(reply.status, 201, "{}", reply.text());
        reply.json()
    })
    .collect()
}
