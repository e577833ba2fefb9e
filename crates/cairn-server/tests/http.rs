//! The HTTP API, driven over a real loopback socket: every endpoint, every
//! bad input, the OpenAPI document against the router, and a disabled
//! ledger that refuses writes and still serves reads. (Roles, other orgs,
//! erasure and detail levels are in `http_access.rs`; signed steps,
//! uploads checked as bytes and COSE receipts in `http_verification.rs`;
//! retried writes and turn numbering in `http/retries_and_turns.rs`.)

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod api;
mod common;
use api::{call, seed_000, start, step};
use common::*;

use cairn_core::Hash;

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
    // The last valid record of a sealed session is its seal, by its seq
    // in the log (FORMAT 9.6), not by the session's step count.
    let seal_seq = sealed.json()["seq"].as_u64().expect("the seal's seq");
    assert!(seal_seq > 4, "{}", sealed.text());
    let verdict = get(&server, "/v1/sessions/revenue-analysis-q4/verify", &admin).json();
    assert_eq!(verdict["lastValidSequence"], seal_seq, "{verdict}");
    let root = get(&server, "/v1/sessions/revenue-analysis-q4/root", &admin).json();
    assert_eq!(root["merkle_root"], sealed.json()["merkle_root"]);
    assert_eq!(root["step_count"], 4);
    // The seal read back names its position as its write did.
    assert_eq!(root["seq"], seal_seq, "{root}");

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
    assert!(metrics.contains("cairn_sequencer_failed_batches_total 0"));
    assert!(metrics.contains("cairn_sequencer_isolated_batches_total 0"));
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
        ("wrong type", json!({"session_id": 7, "agent_id": "a", "step_type": "plan"}).to_string().into_bytes(), 400, "invalid_argument"),
        ("wrong type of a number", json!({"session_id": "s1", "agent_id": "a", "step_type": "plan", "confidence": "0.9"}).to_string().into_bytes(), 400, "invalid_argument"),
        ("missing member", json!({"agent_id": "a", "step_type": "plan"}).to_string().into_bytes(), 400, "missing_field"),
        ("unknown member", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "colour": "red"}).to_string().into_bytes(), 400, "unknown_field"),
        ("unknown step type", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "Informational"}).to_string().into_bytes(), 400, "unknown_step_type"),
        ("confidence above 1", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "confidence": 1.2}).to_string().into_bytes(), 400, "confidence_out_of_range"),
        ("confidence below 0", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "confidence": -0.1}).to_string().into_bytes(), 400, "confidence_out_of_range"),
        ("content too long", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "content": "x".repeat(65_537)}).to_string().into_bytes(), 400, "content_too_long"),
        ("malformed id", json!({"session_id": "has space", "agent_id": "analyst", "step_type": "plan"}).to_string().into_bytes(), 400, "malformed_id"),
        ("a session no URL can name", json!({"session_id": "..", "agent_id": "analyst", "step_type": "plan"}).to_string().into_bytes(), 400, "malformed_id"),
        ("a session no URL can name, too", json!({"session_id": ".", "agent_id": "analyst", "step_type": "plan"}).to_string().into_bytes(), 400, "malformed_id"),
        ("a trace no URL can name", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "trace_id": ".."}).to_string().into_bytes(), 400, "malformed_id"),
        ("a turn no URL can name", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "turn_id": "."}).to_string().into_bytes(), 400, "malformed_id"),
        ("oversized body", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "metadata": "y".repeat(300_000)}).to_string().into_bytes(), 413, "body_too_large"),
        ("another agent's session", json!({"session_id": "s1", "agent_id": "mallory", "step_type": "plan"}).to_string().into_bytes(), 409, "agent_mismatch"),
        ("stale index", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "step_index": 2}).to_string().into_bytes(), 409, "index_conflict"),
        ("a turn's number without its turn", json!({"session_id": "s1", "agent_id": "analyst", "step_type": "plan", "turn_step": 1}).to_string().into_bytes(), 400, "invalid_argument"),
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
        // A member's mistake names the member, as MCP names its argument.
        if ["invalid_argument", "missing_field", "unknown_field"].contains(&code) {
            assert!(
                reply.json()["error"]["field"].is_string(),
                "{name}: {}",
                reply.text()
            );
        }
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
            "invalid_argument",
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
            "unknown_field",
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
            "missing_field",
        ),
        (
            "event without an action",
            "/v1/audit-events",
            json!({"event_id": "e"}),
            400,
            "missing_field",
        ),
        (
            "event with a bad id",
            "/v1/audit-events",
            json!({"event_id": "has space", "action": "x"}),
            400,
            "malformed_id",
        ),
        (
            "event no URL can name",
            "/v1/audit-events",
            json!({"event_id": "..", "action": "x"}),
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
            "missing_field",
        ),
        (
            "turn with blank thinking and no steps",
            "/v1/sessions/s1/turns",
            json!({"agent_id": "analyst", "thinking": "  "}),
            400,
            "invalid_argument",
        ),
        (
            "turn with a step of another session",
            "/v1/sessions/s1/turns",
            json!({"agent_id": "analyst", "steps": [{"session_id": "s2", "step_type": "plan"}]}),
            400,
            "invalid_argument",
        ),
        (
            "turn with a malformed turn id",
            "/v1/sessions/s1/turns",
            json!({"agent_id": "analyst", "turn_id": "a b", "thinking": "x"}),
            400,
            "malformed_id",
        ),
        (
            "turn whose thinking holds no phase",
            "/v1/sessions/s1/turns",
            json!({"agent_id": "analyst", "thinking": "[思考]"}),
            400,
            "invalid_argument",
        ),
        (
            "turn with a step of another turn",
            "/v1/sessions/s1/turns",
            json!({"agent_id": "analyst", "turn_id": "t", "steps": [{"turn_id": "other", "step_type": "plan"}]}),
            400,
            "invalid_argument",
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
    // A turn's refused step is named by its member under the step, by
    // the server's reading of the body and by the sequencer's alike.
    for (body, field, code) in [
        (
            json!({"agent_id": "analyst", "steps": [{"step_type": "plan", "content": "a"}, {"session_id": "s2", "step_type": "plan"}]}),
            "steps[1].session_id",
            "invalid_argument",
        ),
        (
            json!({"agent_id": "analyst", "turn_id": "t", "steps": [{"step_type": "plan", "content": "a"}, {"turn_id": "other", "step_type": "plan"}]}),
            "steps[1].turn_id",
            "invalid_argument",
        ),
        (
            json!({"agent_id": "analyst", "steps": [{"step_type": "plan", "content": "a"}, {"step_type": "plan", "confidence": 7}]}),
            "steps[1].confidence",
            "confidence_out_of_range",
        ),
        (
            json!({"agent_id": "analyst", "steps": [{"step_type": "plan", "content": "a"}, 5]}),
            "steps[1]",
            "invalid_argument",
        ),
        (
            json!({"agent_id": "analyst", "steps": 5}),
            "steps",
            "invalid_argument",
        ),
        (json!({"agent_id": "analyst"}), "thinking", "missing_field"),
        (
            json!({"agent_id": "analyst", "steps": [{"session_id": 12, "step_type": "plan"}]}),
            "steps[0].session_id",
            "invalid_argument",
        ),
        (
            json!({"agent_id": "analyst", "steps": [{"step_type": "plan", "links": {"corrects": "no-such-trace"}}]}),
            "steps[0].links.corrects",
            "unknown_link",
        ),
        (
            json!({"agent_id": "analyst", "steps": [{"step_type": "plan", "trace_id": "twice"}, {"step_type": "plan", "trace_id": "twice"}]}),
            "steps[1].trace_id",
            "duplicate_trace_id",
        ),
        (
            json!({"agent_id": "analyst", "steps": [{"step_type": "plan", "turn_step": 5}, {"step_type": "plan", "turn_step": 5}]}),
            "steps[1].turn_step",
            "turn_step_taken",
        ),
        // A phase refused for a member every phase takes names that member.
        (
            json!({"agent_id": "someone-else", "thinking": "[思考] a"}),
            "agent_id",
            "agent_mismatch",
        ),
    ] {
        let reply = post(&server, "/v1/sessions/s1/turns", &admin, &body);
        assert_eq!(
            (reply.code().as_str(), &reply.json()["error"]["field"]),
            (code, &json!(field)),
            "{body}: {}",
            reply.text()
        );
    }
    let unknown = post(
        &server,
        "/v1/steps",
        &admin,
        &with_link("corrects", "no-such-trace"),
    );
    assert_eq!(
        unknown.json()["error"]["field"],
        json!("links.corrects"),
        "{}",
        unknown.text()
    );
    // A parameter's value mistyped: invalid_argument naming it, as a
    // body member's.
    for (path, field) in [
        ("/v1/sessions/s1/trail?format=xml", "format"),
        ("/v1/sessions/s1/turns/t?format=pdf", "format"),
        ("/v1/reviews?all=maybe", "all"),
        ("/v1/sessions/s1?verify=yes", "verify"),
        ("/v1/sessions/s1?format=html", "format"),
    ] {
        let reply = get(&server, path, &admin);
        assert_eq!(
            (reply.code().as_str(), &reply.json()["error"]["field"]),
            ("invalid_argument", &json!(field)),
            "{path}"
        );
    }
    for path in [
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
    // Proof requests outside the log: an entry it does not hold is not
    // found; a size past it, or an entry past the size, names the field.
    assert_eq!(
        get(&server, "/v1/proofs/inclusion?seq=999", &admin).status,
        404
    );
    for (query, field) in [
        ("seq=0&size=99999", "size"),
        ("seq=0&size=0", "size"),
        ("seq=2&size=1", "seq"),
    ] {
        let refused = get(&server, &format!("/v1/proofs/inclusion?{query}"), &admin);
        assert_eq!(
            (refused.status, refused.json()["error"]["field"].as_str()),
            (400, Some(field)),
            "{query}: {}",
            refused.text()
        );
    }
    let proof = get(&server, "/v1/proofs/inclusion?seq=0", &admin).json();
    assert!(
        proof["checkpoint"]
            .as_str()
            .is_some_and(|c| c.contains(&format!("\n{}\n", proof["size"]))),
        "{proof}"
    );
    assert_eq!(
        get(&server, "/v1/proofs/inclusion?seq=x", &admin).code(),
        "invalid_argument"
    );
    assert_eq!(
        get(&server, "/v1/proofs/consistency?old=0", &admin).code(),
        "invalid_argument"
    );
    // Unknown route, wrong method.
    assert_eq!(get(&server, "/v1/nope", &admin).code(), "not_found");
    let wrong_method = call(&server, "DELETE", "/v1/steps", Some(&admin), None);
    assert_eq!(wrong_method.code(), "method_not_allowed");
    assert_eq!(
        wrong_method.json()["error"]["message"],
        "DELETE is not a method of /v1/steps; it takes POST"
    );
    // Only the seal was written.
    assert_eq!(server.store.log_size("acme").unwrap(), size_before + 1);
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
    // A trailing slash is named, with the address to use.
    let slashed = get(&server, "/v1/sessions/", &admin);
    assert_eq!(slashed.status, 404);
    assert!(
        slashed.text().contains("no trailing slash: /v1/sessions)"),
        "{}",
        slashed.text()
    );
    // No answer is sniffed as another type than it says.
    for path in ["/v1/sessions", "/v1/sessions/"] {
        let answer = raw(
            server.addr,
            &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}"),
            b"",
        );
        assert_eq!(
            answer.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
    }
    // A base URL joined to a route the wrong way is named, with the path
    // it would have been.
    for (misjoined, said) in [
        (
            "//v1/sessions",
            "ends with a slash; without it the path is /v1/sessions)",
        ),
        (
            "/v1/v1/v1/sessions",
            "without the repetition the path is /v1/sessions)",
        ),
    ] {
        let reply = get(&server, misjoined, &admin);
        assert_eq!(reply.status, 404, "{misjoined}");
        assert!(reply.text().contains(said), "{misjoined}: {}", reply.text());
    }
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

#[path = "http/retries_and_turns.rs"]
mod retries_and_turns;

#[path = "http/trails.rs"]
mod trails;
