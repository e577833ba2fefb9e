//! The HTTP API, driven over a real loopback socket: every endpoint, every
//! bad input, the roles, and a cross-org attempt on every read endpoint.

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;

use base64::Engine as _;
use cairn_core::Hash;
use cairn_core::commit::{
    AgentSignature, Openings, agent_key_id, signed_step_message, step_digest,
};
use cairn_core::ed25519_dalek::{Signer as _, SigningKey};
use cairn_core::record::Step;

fn start() -> Server {
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

fn call(
    server: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Reply {
    cairn_testkit::http::call(server.addr, method, path, token, body)
}

fn step(session: &str, kind: &str, content: &str) -> Value {
    json!({"session_id": session, "agent_id": "analyst", "step_type": kind, "content": content})
}

/// Seed 000's four steps into `session`.
fn seed_000(server: &Server, token: &str, session: &str) -> Vec<Value> {
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

#[test]
fn every_endpoint_works() {
    let server = start();
    let admin = server.admin.clone();
    assert_eq!(
        call(&server, "GET", "/healthz", None, None).json(),
        json!({"status": "ok"})
    );
    let openapi = call(&server, "GET", "/openapi.json", None, None);
    assert_eq!(openapi.status, 200);
    assert_eq!(openapi.json()["openapi"], "3.1.0");

    // Sessions and steps.
    let started = post(
        &server,
        "/v1/sessions",
        &admin,
        &json!({"session_id": "trail", "agent_id": "planner", "profile": "strict"}),
    );
    assert_eq!(started.status, 201, "{}", started.text());
    assert_eq!(started.json()["session_id"], "trail");
    let written = seed_000(&server, &admin, "revenue-analysis-q4");
    assert_eq!(written[0]["step_index"], 0);
    assert_eq!(written[3]["step_index"], 3);
    assert_eq!(written[0]["session_created"], true);
    let batch = post(
        &server,
        "/v1/steps/batch",
        &admin,
        &json!([
            step("b", "plan", "one"),
            step("b", "Bogus", "x"),
            step("b", "plan", "two")
        ]),
    );
    assert_eq!(batch.status, 200);
    let batch = batch.json();
    assert_eq!(batch["accepted"], 2);
    assert_eq!(batch["results"][1]["error"]["code"], "unknown_step_type");
    assert_eq!(batch["results"][2]["step_index"], 1);

    // Replay, JSON and Markdown, with the verdict.
    let replay = get(
        &server,
        "/v1/sessions/revenue-analysis-q4?verify=true",
        &admin,
    )
    .json();
    assert_eq!(replay["chain_valid"], true);
    assert_eq!(replay["step_count"], 4);
    assert_eq!(replay["steps"][1]["step_type"], "ToolCall");
    assert_eq!(
        replay["steps"][1]["prev_hash"],
        replay["steps"][0]["current_hash"]
    );
    let md = get(
        &server,
        "/v1/sessions/revenue-analysis-q4?format=markdown",
        &admin,
    );
    assert!(md.content_type.starts_with("text/markdown"));
    assert!(
        md.text().contains("[実行] Querying orders table"),
        "{}",
        md.text()
    );
    let history = get(&server, "/v1/sessions?agent_id=analyst&limit=10", &admin).json();
    assert!(
        history
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["session_id"] == "revenue-analysis-q4"
                && s["step_count"] == 4
                && s["chain_valid"] == true)
    );
    let trace = written[2]["trace_id"].as_str().unwrap();
    let one = get(&server, &format!("/v1/steps/{trace}"), &admin).json();
    assert_eq!(one["confidence"], 0.88);

    // Verification.
    let v = get(&server, "/v1/sessions/revenue-analysis-q4/verify", &admin).json();
    assert_eq!(
        (v["verified"].as_bool(), v["totalChecked"].as_u64()),
        (Some(true), Some(4))
    );
    for key in [
        "lastValidSequence",
        "brokenAtSequence",
        "brokenReason",
        "durationMs",
        "verifiedAt",
    ] {
        assert!(v.get(key).is_some(), "verdict lacks {key}");
    }
    let v = get(&server, "/v1/verify", &admin).json();
    assert_eq!(v["verified"], true, "{v}");

    // Seal and root.
    assert_eq!(
        get(&server, "/v1/sessions/revenue-analysis-q4/root", &admin).code(),
        "not_sealed"
    );
    let sealed = post(
        &server,
        "/v1/sessions/revenue-analysis-q4/seal",
        &admin,
        &json!({}),
    );
    assert_eq!(sealed.status, 200, "{}", sealed.text());
    let root = get(&server, "/v1/sessions/revenue-analysis-q4/root", &admin).json();
    assert_eq!(root["merkle_root"], sealed.json()["merkle_root"]);
    assert_eq!(root["step_count"], 4);

    // Checkpoint and proofs, checked with the core.
    let note = get(&server, "/v1/checkpoint", &admin);
    assert!(note.content_type.starts_with("text/plain"));
    let origin = format!("{}/acme", server.store.server_name());
    let cp = cairn_core::checkpoint::verify_checkpoint(
        &note.text(),
        &origin,
        std::slice::from_ref(server.store.server_key()),
    )
    .unwrap();
    let size = cp.checkpoint().size;
    let proof = get(
        &server,
        &format!("/v1/proofs/inclusion?seq=2&size={size}"),
        &admin,
    )
    .json();
    let hashes: Vec<Hash> = proof["proof"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| Hash::from_hex(h.as_str().unwrap()).unwrap())
        .collect();
    let leaf = Hash::from_hex(proof["leaf_hash"].as_str().unwrap()).unwrap();
    assert_eq!(
        cairn_core::merkle::verify_inclusion(&leaf, 2, size, &hashes, &cp.checkpoint().root),
        Ok(())
    );
    let cons = get(
        &server,
        &format!("/v1/proofs/consistency?old=3&new={size}"),
        &admin,
    )
    .json();
    let hashes: Vec<Hash> = cons["proof"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| Hash::from_hex(h.as_str().unwrap()).unwrap())
        .collect();
    let old_root = Hash::from_hex(cons["old_root"].as_str().unwrap()).unwrap();
    assert_eq!(
        cairn_core::merkle::verify_consistency(3, size, &old_root, &cp.checkpoint().root, &hashes),
        Ok(())
    );

    // Export (streamed) verifies offline; the upload endpoint agrees.
    let bundle = get(&server, "/v1/export?session=revenue-analysis-q4", &admin);
    assert_eq!(bundle.status, 200);
    assert!(bundle.content_type.starts_with("application/x-ndjson"));
    let mut verifier =
        cairn_core::bundle::BundleVerifier::new(vec![server.store.server_key().clone()]);
    for line in bundle.text().lines() {
        verifier.push_line(line);
    }
    assert!(verifier.finish().verdict.verified);
    let checked = call(
        &server,
        "POST",
        "/v1/bundles/verify",
        Some(&admin),
        Some(&bundle.body),
    )
    .json();
    assert_eq!(checked["verified"], true, "{checked}");
    let tampered = bundle
        .text()
        .replacen("Enterprise grew 23%", "Enterprise grew 32%", 1);
    let checked = call(
        &server,
        "POST",
        "/v1/bundles/verify",
        Some(&admin),
        Some(tampered.as_bytes()),
    )
    .json();
    assert_eq!(checked["brokenReason"], "digest-mismatch");
    // Keys.
    let created = post(
        &server,
        "/v1/keys",
        &admin,
        &json!({"role": "reader", "label": "dashboard"}),
    );
    assert_eq!(created.status, 201, "{}", created.text());
    let reader = created.json()["token"].as_str().unwrap().to_owned();
    assert_eq!(
        get(&server, "/v1/sessions/revenue-analysis-q4", &reader).status,
        200
    );
    let keys = get(&server, "/v1/keys", &admin).json();
    assert_eq!(keys.as_array().unwrap().len(), 2);
    assert!(
        keys.to_string().contains("dashboard") && !keys.to_string().contains(&reader),
        "tokens are never listed"
    );
    let id = created.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        call(
            &server,
            "DELETE",
            &format!("/v1/keys/{id}"),
            Some(&admin),
            None
        )
        .status,
        204
    );
    assert_eq!(
        get(&server, "/v1/sessions/revenue-analysis-q4", &reader).code(),
        "unauthorized"
    );

    // Metrics reflect what happened.
    let metrics = call(&server, "GET", "/metrics", None, None).text();
    assert!(metrics.contains("cairn_appends_total 6"), "{metrics}");
    assert!(metrics.contains("cairn_append_refusals_total 1"));
    assert!(metrics.contains("cairn_append_latency_seconds_count 6"));
    assert!(metrics.contains("cairn_verifications_total{result=\"verified\"}"));
}

#[test]
fn bad_input_gets_a_clear_answer_and_writes_nothing() {
    let server = start();
    let admin = server.admin.clone();
    seed_000(&server, &admin, "s1");
    let size_before = server.store.log_size("acme").unwrap();
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("malformed JSON", b"{\"session_id\": ".to_vec(), 400, "invalid_json"),
        ("not an object", b"[1, 2]".to_vec(), 400, "invalid_request"),
        ("wrong type", json!({"session_id": 7, "agent_id": "a", "step_type": "plan"}).to_string().into_bytes(), 400, "invalid_request"),
        ("unknown member", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "colour": "red"}).to_string().into_bytes(), 400, "unknown_field"),
        ("unknown step type", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "Informational"}).to_string().into_bytes(), 400, "unknown_step_type"),
        ("confidence above 1", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "confidence": 1.2}).to_string().into_bytes(), 400, "confidence_out_of_range"),
        ("confidence below 0", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "confidence": -0.1}).to_string().into_bytes(), 400, "confidence_out_of_range"),
        ("content too long", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "content": "x".repeat(65_537)}).to_string().into_bytes(), 400, "content_too_long"),
        ("malformed id", json!({"session_id": "has space", "agent_id": "analyst", "step_type": "plan"}).to_string().into_bytes(), 400, "malformed_id"),
        ("oversized body", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "metadata": "y".repeat(300_000)}).to_string().into_bytes(), 413, "body_too_large"),
        ("another agent's session", json!({"session_id": "s1", "agent_id": "mallory", "step_type": "plan"}).to_string().into_bytes(), 409, "agent_mismatch"),
        ("stale index", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "step_index": 2}).to_string().into_bytes(), 409, "index_conflict"),
    ];
    for (name, body, status, code) in cases {
        let reply = call(&server, "POST", "/v1/steps", Some(&admin), Some(&body));
        assert_eq!(
            (reply.status, reply.code().as_str()),
            (status, code),
            "{name}: {}",
            reply.text()
        );
        assert!(
            !reply.json()["error"]["message"]
                .as_str()
                .unwrap()
                .is_empty(),
            "{name}"
        );
    }
    // The seeds' endpoints: each bad request has its code (TRACE is the
    // trace id of s1's first step, which is not flagged).
    let mut first = String::new();
    server
        .store
        .read_session("acme", "s1", &mut |s| {
            first = s.record.step.trace_id;
            false
        })
        .unwrap();
    let with_link = |name: &str, id: &str| json!({"session_id": "s1", "agent_id": "analyst", "step_type": "Correction", "links": {name: id}});
    for (name, path, body, status, code) in [
        (
            "seal without the closing reflection",
            "/v1/sessions/s1/seal?require_reflection=true",
            json!({}),
            409,
            "reflection_required",
        ),
        (
            "bad flag",
            "/v1/sessions/s1/seal?require_reflection=maybe",
            json!({}),
            400,
            "invalid_request",
        ),
        (
            "correction of nothing",
            "/v1/steps",
            with_link("corrects", "no-such-trace"),
            400,
            "unknown_link",
        ),
        (
            "unknown audit event",
            "/v1/steps",
            with_link("audit_event", "no-such-event"),
            400,
            "unknown_link",
        ),
        (
            "unknown link name",
            "/v1/steps",
            with_link("colour", "red"),
            400,
            "invalid_request",
        ),
        (
            "review of a step that is not flagged",
            "/v1/steps/TRACE/review",
            json!({"decision": "approve"}),
            409,
            "not_flagged",
        ),
        (
            "review of nothing",
            "/v1/steps/no-such-trace/review",
            json!({"decision": "approve"}),
            404,
            "not_found",
        ),
        (
            "review without a decision",
            "/v1/steps/TRACE/review",
            json!({"note": "hm"}),
            400,
            "invalid_request",
        ),
        (
            "event without an action",
            "/v1/audit-events",
            json!({"event_id": "e"}),
            400,
            "invalid_request",
        ),
        (
            "event with a bad id",
            "/v1/audit-events",
            json!({"event_id": "has space", "action": "x"}),
            400,
            "malformed_id",
        ),
        (
            "event of an unknown session",
            "/v1/audit-events",
            json!({"action": "x", "session_id": "nope"}),
            404,
            "not_found",
        ),
        (
            "event reusing a trace id",
            "/v1/audit-events",
            json!({"action": "x", "event_id": "TRACE"}),
            409,
            "duplicate_id",
        ),
        (
            "turn with nothing in it",
            "/v1/sessions/s1/turns",
            json!({"agent_id": "analyst"}),
            400,
            "invalid_request",
        ),
        (
            "turn with a step of another session",
            "/v1/sessions/s1/turns",
            json!({"agent_id": "analyst", "steps": [{"session_id": "s2", "step_type": "plan"}]}),
            400,
            "invalid_request",
        ),
        (
            "parse without text",
            "/v1/thinking/parse",
            json!({"txt": "x"}),
            400,
            "unknown_field",
        ),
        (
            "continuing an open session",
            "/v1/sessions",
            json!({"session_id": "s9", "agent_id": "analyst", "predecessor_session": "s1"}),
            400,
            "bad_predecessor",
        ),
    ] {
        let path = path.replace("TRACE", &first);
        let body = body.to_string().replace("TRACE", &first);
        let reply = call(&server, "POST", &path, Some(&admin), Some(body.as_bytes()));
        assert_eq!(
            (reply.status, reply.code().as_str()),
            (status, code),
            "{name}: {}",
            reply.text()
        );
    }
    for path in [
        "/v1/sessions/s1/trail?format=xml",
        "/v1/sessions/s1/turns/t?format=pdf",
        "/v1/reviews?all=maybe",
        "/v1/sessions/s1?verify=yes",
        "/v1/sessions/s1?format=html",
        // `all=false` is not a request for the whole log.
        "/v1/export?all=false",
        "/v1/export?session=s1&all=false&agent=analyst",
    ] {
        assert_eq!(
            get(&server, path, &admin).code(),
            "invalid_request",
            "{path}"
        );
    }
    assert_eq!(
        get(&server, "/v1/sessions/s1/turns/no-such-turn", &admin).code(),
        "not_found"
    );
    assert_eq!(
        get(&server, "/v1/audit-events/nope", &admin).code(),
        "not_found"
    );
    // Unknown session (reads and seal) and a step after the seal.
    assert_eq!(get(&server, "/v1/sessions/nope", &admin).status, 404);
    assert_eq!(
        post(&server, "/v1/sessions/nope/seal", &admin, &json!({})).code(),
        "not_found"
    );
    assert_eq!(
        post(&server, "/v1/sessions/s1/seal", &admin, &json!({})).status,
        200
    );
    let late = post(&server, "/v1/steps", &admin, &step("s1", "plan", "late"));
    assert_eq!((late.status, late.code().as_str()), (409, "session_sealed"));
    // Proof requests outside the log.
    assert_eq!(
        get(&server, "/v1/proofs/inclusion?seq=999", &admin).status,
        404
    );
    assert_eq!(
        get(&server, "/v1/proofs/inclusion?seq=x", &admin).code(),
        "invalid_request"
    );
    assert_eq!(
        get(&server, "/v1/proofs/consistency?old=0", &admin).code(),
        "invalid_request"
    );
    // Unknown route, wrong method.
    assert_eq!(get(&server, "/v1/nope", &admin).code(), "not_found");
    assert_eq!(
        call(&server, "DELETE", "/v1/steps", Some(&admin), None).code(),
        "method_not_allowed"
    );
    // Only the seal was written.
    assert_eq!(server.store.log_size("acme").unwrap(), size_before + 1);
}

#[test]
fn signed_steps_are_checked_at_ingest() {
    let server = start();
    let admin = server.admin.clone();
    let key = SigningKey::from_bytes(&[21; 32]);
    let registered = post(
        &server,
        "/v1/agent-keys",
        &admin,
        &json!({
            "agent_id": "analyst",
            "public_key": base64::engine::general_purpose::STANDARD.encode(key.verifying_key().as_bytes()),
        }),
    );
    assert_eq!(registered.status, 201, "{}", registered.text());
    let key_id = agent_key_id(&key.verifying_key());
    assert_eq!(registered.json()["key_id"], key_id);
    // The agent builds the step, computes its digest and signs it.
    let signed = |content: &str, signer: &SigningKey| {
        let created_at = cairn_store::now();
        let seed = [5u8; 32];
        let mut core = Step::new(
            "signed-0", "acme", "analyst", "signed", 0, "Decision", created_at,
        )
        .unwrap();
        core.content = Some(content.to_owned());
        core.signer_key_id = Some(key_id.clone());
        let digest = step_digest(&core, &Openings::from_seed(&seed));
        let sig = AgentSignature {
            key_id: key_id.clone(),
            signature: signer.sign(&signed_step_message(&digest)).to_bytes(),
        };
        json!({
            "session_id": "signed", "agent_id": "analyst", "step_type": "Decision", "content": content,
            "trace_id": "signed-0", "step_index": 0, "created_at": created_at.to_string(), "seed": hex::encode(seed),
            "signature": {"key_id": sig.key_id, "signature": base64::engine::general_purpose::STANDARD.encode(sig.signature)},
        })
    };
    let forged = post(
        &server,
        "/v1/steps",
        &admin,
        &signed("approve", &SigningKey::from_bytes(&[22; 32])),
    );
    assert_eq!(
        (forged.status, forged.code().as_str()),
        (400, "bad_signature"),
        "{}",
        forged.text()
    );
    let mut tampered = signed("approve", &key);
    tampered["content"] = json!("approve twice");
    assert_eq!(
        post(&server, "/v1/steps", &admin, &tampered).code(),
        "bad_signature"
    );
    let good = post(&server, "/v1/steps", &admin, &signed("approve", &key));
    assert_eq!(good.status, 201, "{}", good.text());
    let replay = get(&server, "/v1/sessions/signed?verify=true", &admin).json();
    assert_eq!(replay["chain_valid"], true);
    assert_eq!(replay["steps"][0]["signature_key_id"], key_id);
}

#[test]
fn keys_and_roles_are_enforced() {
    let server = start();
    let admin = server.admin.clone();
    seed_000(&server, &admin, "s1");
    // Missing, malformed, unknown keys: 401.
    let none = call(&server, "GET", "/v1/sessions", None, None);
    assert_eq!((none.status, none.code().as_str()), (401, "unauthorized"));
    assert_eq!(
        get(&server, "/v1/sessions", "cairn_000000000000_nope").status,
        401
    );
    let mut raw = TcpStream::connect(server.addr).unwrap();
    raw.write_all(b"GET /v1/sessions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Basic abc\r\n\r\n").unwrap();
    let mut text = String::new();
    raw.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");

    // Wrong role: 403.
    let reader = key_for(&server, "acme", Role::Reader, None);
    let writer = key_for(&server, "acme", Role::Writer, None);
    let auditor = key_for(&server, "acme", Role::Auditor, None);
    for (token, method, path) in [
        (&reader, "POST", "/v1/steps"),
        (&reader, "POST", "/v1/sessions/s1/seal"),
        (&reader, "GET", "/v1/export?session=s1"),
        (&writer, "GET", "/v1/export?session=s1"),
        (&writer, "POST", "/v1/keys"),
        (&auditor, "POST", "/v1/steps"),
        (&auditor, "GET", "/v1/keys"),
        (&writer, "POST", "/v1/steps/some-trace/review"),
        (&reader, "POST", "/v1/steps/some-trace/review"),
        (&reader, "POST", "/v1/audit-events"),
        (&reader, "POST", "/v1/sessions/s1/turns"),
        (&auditor, "POST", "/v1/audit-events"),
    ] {
        let body = step("s1", "plan", "x").to_string();
        let reply = call(&server, method, path, Some(token), Some(body.as_bytes()));
        assert_eq!(
            (reply.status, reply.code().as_str()),
            (403, "forbidden"),
            "{method} {path}: {}",
            reply.text()
        );
    }
    assert_eq!(get(&server, "/v1/export?session=s1", &auditor).status, 200);
    assert_eq!(get(&server, "/v1/sessions/s1", &reader).status, 200);

    // A key bound to an agent writes only as that agent.
    let bound = key_for(&server, "acme", Role::Writer, Some("analyst"));
    let as_self = post(
        &server,
        "/v1/steps",
        &bound,
        &json!({"session_id": "s2", "step_type": "plan", "content": "mine"}),
    );
    assert_eq!(as_self.status, 201, "{}", as_self.text());
    let as_other = post(
        &server,
        "/v1/steps",
        &bound,
        &json!({"session_id": "s3", "agent_id": "mallory", "step_type": "plan"}),
    );
    assert_eq!(
        (as_other.status, as_other.code().as_str()),
        (403, "forbidden")
    );
}

#[test]
fn another_orgs_data_is_indistinguishable_from_nothing() {
    let server = start();
    let admin = server.admin.clone();
    let written = seed_000(&server, &admin, "private");
    let turn = post(
        &server,
        "/v1/sessions/private/turns",
        &admin,
        &json!({"agent_id": "analyst", "turn_id": "t-1", "thinking": "[思考] private"}),
    );
    assert_eq!(turn.status, 201, "{}", turn.text());
    let event = post(
        &server,
        "/v1/audit-events",
        &admin,
        &json!({"event_id": "ev-private", "session_id": "private", "action": "sql"}),
    );
    assert_eq!(event.status, 201, "{}", event.text());
    let mut flagged = step("private", "Decision", "secret decision");
    flagged["status"] = json!("flagged");
    let flagged = post(&server, "/v1/steps", &admin, &flagged).json()["trace_id"]
        .as_str()
        .unwrap()
        .to_owned();
    post(&server, "/v1/sessions/private/seal", &admin, &json!({}));
    let trace = written[0]["trace_id"].as_str().unwrap().to_owned();
    let other = key_for(&server, "globex", Role::Admin, None);
    // Every read endpoint: the other org's id gives the same answer as an
    // id that exists nowhere.
    for (theirs, nowhere) in [
        (
            "/v1/sessions/private".to_owned(),
            "/v1/sessions/nowhere".to_owned(),
        ),
        (
            "/v1/sessions/private?format=markdown".to_owned(),
            "/v1/sessions/nowhere?format=markdown".to_owned(),
        ),
        (
            "/v1/sessions/private/verify".to_owned(),
            "/v1/sessions/nowhere/verify".to_owned(),
        ),
        (
            "/v1/sessions/private/root".to_owned(),
            "/v1/sessions/nowhere/root".to_owned(),
        ),
        (format!("/v1/steps/{trace}"), "/v1/steps/nowhere".to_owned()),
        (
            "/v1/export?session=private".to_owned(),
            "/v1/export?session=nowhere".to_owned(),
        ),
        (
            "/v1/proofs/inclusion?seq=1".to_owned(),
            "/v1/proofs/inclusion?seq=1".to_owned(),
        ),
        (
            "/v1/proofs/consistency?old=1".to_owned(),
            "/v1/proofs/consistency?old=1".to_owned(),
        ),
        ("/v1/checkpoint".to_owned(), "/v1/checkpoint".to_owned()),
        (
            "/v1/sessions/private/trail".to_owned(),
            "/v1/sessions/nowhere/trail".to_owned(),
        ),
        (
            "/v1/sessions/private/turns/t-1?format=markdown".to_owned(),
            "/v1/sessions/nowhere/turns/t-1?format=markdown".to_owned(),
        ),
        (
            "/v1/audit-events/ev-private".to_owned(),
            "/v1/audit-events/nowhere".to_owned(),
        ),
    ] {
        let a = get(&server, &theirs, &other);
        let b = get(&server, &nowhere, &other);
        assert_eq!(a.status, 404, "{theirs}: {}", a.text());
        assert_eq!((a.status, a.code()), (b.status, b.code()), "{theirs}");
    }
    // Lists, search and org-wide reads show nothing of acme.
    assert_eq!(get(&server, "/v1/sessions", &other).json(), json!([]));
    assert_eq!(
        get(&server, "/v1/reviews?all=true", &other).json(),
        json!({"items": []})
    );
    assert_eq!(
        get(&server, "/v1/reviews", &admin).json()["items"][0]["step"]["trace_id"],
        flagged.as_str()
    );
    let review = post(
        &server,
        &format!("/v1/steps/{flagged}/review"),
        &other,
        &json!({"decision": "approve"}),
    );
    assert_eq!((review.status, review.code().as_str()), (404, "not_found"));
    settle_embeddings(&server);
    for mode in ["fulltext", "semantic", "hybrid"] {
        assert_eq!(
            get(
                &server,
                &format!("/v1/search?q=revenue&mode={mode}"),
                &other
            )
            .json()["results"],
            json!([]),
            "{mode}"
        );
        assert_ne!(
            get(
                &server,
                &format!("/v1/search?q=revenue&mode={mode}"),
                &admin
            )
            .json()["results"],
            json!([]),
            "{mode}"
        );
    }
    assert_eq!(
        get(&server, "/v1/keys", &other)
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let sealing = post(&server, "/v1/sessions/private/seal", &other, &json!({}));
    assert_eq!(sealing.status, 404);
    // Writing under the same session id creates globex's own session.
    let own = post(
        &server,
        "/v1/steps",
        &other,
        &step("private", "plan", "ours"),
    );
    assert_eq!(own.status, 201);
    assert_eq!(
        get(&server, "/v1/sessions/private", &admin).json()["step_count"],
        6,
        "seed 000's four steps, the turn's and the flagged one"
    );
    assert!(
        !get(&server, "/v1/sessions/private", &other)
            .text()
            .contains("Q4 revenue")
    );
    assert_eq!(
        call(&server, "DELETE", "/v1/keys/nope", Some(&other), None).status,
        404
    );
}

/// The OpenAPI document and the router agree: every documented operation
/// is routed (it never answers "route not found" or 405), and every route
/// the router serves is documented (probed paths outside the document get
/// the fallback 404).
#[test]
fn openapi_document_matches_the_router() {
    let server = start();
    let admin = server.admin.clone();
    seed_000(&server, &admin, "s1");
    let doc: Value = serde_json::from_str(cairn_server::openapi_document()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    let mut documented = Vec::new();
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            let concrete = path
                .replace("{session_id}", "s1")
                .replace("{trace_id}", "nope")
                .replace("{key_id}", "nope");
            let reply = call(
                &server,
                &method.to_uppercase(),
                &concrete,
                Some(&admin),
                Some(b"{}"),
            );
            let routed = !(reply.status == 405
                || (reply.status == 404 && reply.text().contains("route not found")));
            assert!(
                routed,
                "{method} {path} is documented but not routed: {} {}",
                reply.status,
                reply.text()
            );
            documented.push((method.to_uppercase(), path.clone()));
        }
    }
    // Every method on every documented path that is not documented is 405,
    // and a path that is not documented is the fallback 404.
    for (path, ops) in paths {
        for method in ["GET", "POST", "DELETE", "PUT", "PATCH"] {
            if ops.get(method.to_lowercase()).is_none() {
                let concrete = path
                    .replace("{session_id}", "s1")
                    .replace("{trace_id}", "t")
                    .replace("{key_id}", "k");
                let reply = call(&server, method, &concrete, Some(&admin), Some(b"{}"));
                assert_eq!(
                    reply.status,
                    405,
                    "{method} {path} answers but is not documented: {}",
                    reply.text()
                );
            }
        }
    }
    for undocumented in ["/v1", "/v1/session", "/v1/sessions/s1/steps", "/v2/steps"] {
        let reply = get(&server, undocumented, &admin);
        assert!(
            reply.status == 404 && reply.text().contains("route not found"),
            "{undocumented} is routed but not documented"
        );
    }
    assert!(documented.len() >= 20, "{documented:?}");
}

#[test]
fn a_disabled_ledger_refuses_writes_and_still_serves_reads() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn LedgerStore> =
        Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap());
    let admin = cairn_server::bootstrap_admin_key(store.as_ref(), "acme")
        .unwrap()
        .unwrap();
    let ledger = Arc::new(Ledger::new(Arc::clone(&store), SequencerConfig::default()));
    ledger
        .write(cairn_store::WriteRequest::Step(Box::new(
            cairn_store::NewStep {
                org_id: "acme".into(),
                session_id: "before".into(),
                agent_id: "analyst".into(),
                kind_label: "plan".into(),
                caller: "test".into(),
                ..cairn_store::NewStep::default()
            },
        )))
        .unwrap();
    let state = AppState::new(
        ledger,
        ServerConfig {
            enabled: false,
            ..ServerConfig::default()
        },
    );
    let server = serve_state("127.0.0.1:0", state, admin.clone(), store, dir);
    let refused = post(&server, "/v1/steps", &admin, &step("s1", "plan", "x"));
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (503, "ledger_disabled")
    );
    assert_eq!(
        post(
            &server,
            "/v1/sessions",
            &admin,
            &json!({"session_id": "s2", "agent_id": "a"})
        )
        .code(),
        "ledger_disabled"
    );
    assert_eq!(get(&server, "/v1/sessions/before", &admin).status, 200);
    assert_eq!(get(&server, "/v1/verify", &admin).json()["verified"], true);
    assert_eq!(server.store.log_size("acme").unwrap(), 2);
}

#[test]
fn erasure_keeps_the_proof_and_is_admin_only() {
    let server = start();
    let admin = server.admin.clone();
    let written = seed_000(&server, &admin, "s1");
    let trace = written[1]["trace_id"].as_str().unwrap().to_owned();
    let writer = key_for(&server, "acme", Role::Writer, None);
    let path = format!("/v1/steps/{trace}/erase");
    assert_eq!(
        post(&server, &path, &writer, &json!({"reason": "x"})).status,
        403
    );
    assert_eq!(
        post(&server, &path, &admin, &json!({})).code(),
        "invalid_request"
    );
    let erased = post(&server, &path, &admin, &json!({"reason": "GDPR request 7"}));
    assert_eq!(erased.status, 200, "{}", erased.text());
    assert_eq!(
        post(&server, &path, &admin, &json!({"reason": "again"})).code(),
        "already_erased"
    );
    assert_eq!(
        post(
            &server,
            "/v1/steps/nope/erase",
            &admin,
            &json!({"reason": "x"})
        )
        .status,
        404
    );
    let replay = get(&server, "/v1/sessions/s1?verify=true", &admin).json();
    assert_eq!(replay["chain_valid"], true);
    assert_eq!(
        (
            replay["steps"][1]["erased"].as_bool(),
            replay["steps"][1]["content"].is_null()
        ),
        (Some(true), true)
    );
    assert_eq!(
        replay["steps"][0]["content"],
        "User asked for Q4 revenue breakdown by segment"
    );
    assert_eq!(get(&server, "/v1/verify", &admin).json()["verified"], true);
    let bundle = get(&server, "/v1/export?session=s1", &admin).text();
    assert!(!bundle.contains("Querying orders table"));
    assert_eq!(
        call(
            &server,
            "POST",
            "/v1/bundles/verify",
            Some(&admin),
            Some(bundle.as_bytes())
        )
        .json()["verified"],
        true
    );
}

/// Seed 004's detail levels: lower levels hide fields and still verify;
/// `full` needs the session's recorded consent and an auditor or admin key.
#[test]
fn detail_levels_and_consent() {
    let server = start();
    let admin = server.admin.clone();
    let reader = key_for(&server, "acme", Role::Reader, None);
    seed_000(&server, &admin, "plain");
    let started = post(
        &server,
        "/v1/sessions",
        &admin,
        &json!({"session_id": "consented", "agent_id": "analyst", "full_consent": true}),
    );
    assert_eq!(started.status, 201, "{}", started.text());
    seed_000(&server, &admin, "consented");

    let generic = get(
        &server,
        "/v1/sessions/plain?level=generic&verify=true",
        &admin,
    )
    .json();
    assert_eq!(generic["level"], "generic");
    assert_eq!(generic["chain_valid"], true);
    let step = &generic["steps"][1];
    assert!(step["content"].is_null() && step["input_data"].is_null() && step["trace_id"] == "");
    assert_eq!(step["step_type"], "ToolCall");
    assert!(step["current_hash"].as_str().unwrap().len() == 64);
    let hidden: Vec<&str> = step["hidden_fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        hidden.contains(&"content")
            && hidden.contains(&"model")
            && !hidden.contains(&"agent_id")
            && !hidden.contains(&"confidence")
    );
    let detailed = get(&server, "/v1/sessions/plain?level=detailed", &admin).json();
    assert!(detailed["steps"][1]["content"].is_null());
    assert_eq!(detailed["steps"][1]["agent_id"], "analyst");

    for (path, token, status, code) in [
        (
            "/v1/sessions/plain?level=full",
            &admin,
            403,
            "consent_required",
        ),
        (
            "/v1/sessions/consented?level=full",
            &reader,
            403,
            "forbidden",
        ),
        (
            "/v1/export?session=plain&level=full",
            &admin,
            403,
            "consent_required",
        ),
        (
            "/v1/export?all=true&level=generic",
            &admin,
            400,
            "invalid_request",
        ),
        (
            "/v1/sessions/plain?level=secret",
            &admin,
            400,
            "invalid_request",
        ),
    ] {
        let reply = get(&server, path, token);
        assert_eq!(
            (reply.status, reply.code().as_str()),
            (status, code),
            "{path}: {}",
            reply.text()
        );
    }
    let full = get(&server, "/v1/sessions/consented?level=full", &admin).json();
    assert_eq!(
        full["steps"][0]["content"],
        "User asked for Q4 revenue breakdown by segment"
    );

    // A generic bundle verifies offline and carries none of the text.
    let bundle = get(&server, "/v1/export?session=plain&level=generic", &admin);
    assert_eq!(bundle.status, 200);
    let text = bundle.text();
    assert!(!text.contains("Enterprise grew"), "content left out");
    let mut verifier =
        cairn_core::bundle::BundleVerifier::new(vec![server.store.server_key().clone()]);
    for line in text.lines() {
        verifier.push_line(line);
    }
    let verdict = verifier.finish();
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
    assert_eq!(
        get(&server, "/v1/export?session=consented&level=full", &admin).status,
        200
    );
}

/// An uploaded bundle is checked as bytes: a byte that is not UTF-8 fails
/// at its line, even where reading it lossily would restore the character
/// it replaced.
#[test]
fn uploads_are_checked_as_bytes() {
    let server = start();
    let odd = post(
        &server,
        "/v1/steps",
        &server.admin,
        &step("odd", "plan", "a \u{fffd} b"),
    );
    assert_eq!(odd.status, 201, "{}", odd.text());
    let bundle = get(&server, "/v1/export?session=odd", &server.admin).body;
    let at = bundle
        .windows(3)
        .position(|w| w == "\u{fffd}".as_bytes())
        .unwrap();
    let checked = call(
        &server,
        "POST",
        "/v1/bundles/verify",
        Some(&server.admin),
        Some(&bundle),
    )
    .json();
    assert_eq!(checked["verified"], true, "{checked}");
    let mut swapped = bundle.clone();
    swapped.splice(at..at + 3, [0xff]);
    assert_eq!(String::from_utf8_lossy(&swapped).as_bytes(), &bundle[..]);
    let checked = call(
        &server,
        "POST",
        "/v1/bundles/verify",
        Some(&server.admin),
        Some(&swapped),
    )
    .json();
    assert_eq!(checked["brokenReason"], "malformed-record", "{checked}");
}

#[test]
fn cose_receipts_verify_with_the_server_key() {
    use cairn_core::receipt::{
        MEDIA_TYPE_COSE, MEDIA_TYPE_SCITT_RECEIPT, verify_consistency_receipt,
        verify_inclusion_receipt,
    };
    let server = start();
    let admin = server.admin.clone();
    seed_000(&server, &admin, "s1");
    let note = get(&server, "/v1/checkpoint", &admin).text();
    let origin = format!("{}/acme", server.store.server_name());
    let key = server.store.server_key().clone();
    let cp = cairn_core::checkpoint::verify_checkpoint(&note, &origin, std::slice::from_ref(&key))
        .unwrap();
    let (size, root) = (cp.checkpoint().size, cp.checkpoint().root);
    assert!(size >= 5, "session start and four steps");
    let mut leaves = Vec::new();
    server
        .store
        .read_log("acme", 0, size, &mut |e| {
            leaves.push(e.entry.unwrap().leaf_hash());
            true
        })
        .unwrap();

    // Every record's inclusion receipt against the checkpoint, and one
    // against an older size.
    for (seq, leaf) in leaves.iter().enumerate() {
        let reply = get(
            &server,
            &format!("/v1/receipts/inclusion?seq={seq}"),
            &admin,
        );
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.content_type, MEDIA_TYPE_COSE);
        let v = verify_inclusion_receipt(&reply.body, &key, leaf, Some(&root)).unwrap();
        assert_eq!((v.leaf_index, v.tree_size), (seq as u64, size));
        assert_eq!(v.issuer.as_deref(), Some(origin.as_str()));
    }
    let old_root = server.store.root_at("acme", 3).unwrap();
    let reply = get(&server, "/v1/receipts/inclusion?seq=1&size=3", &admin);
    verify_inclusion_receipt(&reply.body, &key, &leaves[1], Some(&old_root)).unwrap();
    // The wrong leaf, or a changed byte, does not verify.
    assert!(verify_inclusion_receipt(&reply.body, &key, &leaves[2], None).is_err());
    let mut altered = reply.body.clone();
    let last = altered.len() - 1;
    altered[last] ^= 1;
    assert!(verify_inclusion_receipt(&altered, &key, &leaves[1], None).is_err());

    // Consistency from size 3 to the checkpoint.
    let reply = get(&server, "/v1/receipts/consistency?old=3", &admin);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v = verify_consistency_receipt(&reply.body, &key, &old_root, Some(&root)).unwrap();
    assert_eq!((v.old_size, v.new_size), (3, size));

    // Accept picks the SCITT media type.
    let scitt = raw(
        server.addr,
        &format!(
            "GET /v1/receipts/consistency?old=2&new=4 HTTP/1.1\r\nHost: localhost\r\n\
             Authorization: Bearer {admin}\r\nAccept: application/json, {MEDIA_TYPE_SCITT_RECEIPT};q=0.9"
        ),
        b"",
    );
    assert_eq!(scitt.status, 200);
    assert_eq!(scitt.header("content-type"), Some(MEDIA_TYPE_SCITT_RECEIPT));
    let root2 = server.store.root_at("acme", 2).unwrap();
    let root4 = server.store.root_at("acme", 4).unwrap();
    verify_consistency_receipt(&scitt.body, &key, &root2, Some(&root4)).unwrap();

    // Errors in the shared shape.
    for (path, status, code) in [
        ("/v1/receipts/inclusion", 400, "invalid_request"),
        ("/v1/receipts/inclusion?seq=x", 400, "invalid_request"),
        ("/v1/receipts/inclusion?seq=999", 404, "not_found"),
        ("/v1/receipts/inclusion?seq=3&size=3", 404, "not_found"),
        ("/v1/receipts/inclusion?seq=1&size=999", 404, "not_found"),
        ("/v1/receipts/inclusion?seq=1&sise=3", 400, "unknown_field"),
        ("/v1/receipts/consistency?old=0", 400, "invalid_request"),
        (
            "/v1/receipts/consistency?old=4&new=4",
            400,
            "invalid_request",
        ),
        ("/v1/receipts/consistency?old=2&new=999", 404, "not_found"),
    ] {
        let reply = get(&server, path, &admin);
        assert_eq!(
            (reply.status, reply.code().as_str()),
            (status, code),
            "{path}"
        );
    }
    // Another org sees nothing of acme's log.
    let other = key_for(&server, "globex", Role::Admin, None);
    assert_eq!(
        get(&server, "/v1/receipts/inclusion?seq=0", &other).status,
        404
    );
    assert_eq!(
        get(&server, "/v1/receipts/consistency?old=1", &other).status,
        404
    );
    assert_eq!(
        call(&server, "GET", "/v1/receipts/inclusion?seq=0", None, None).status,
        401
    );
}
