//! What the first Schemathesis run against the OpenAPI document found:
//! requests the document forbids that the server accepted. Each is refused
//! now with a 4xx in the one error shape, and nothing is written.

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;

#[path = "input_rules/otlp.rs"]
mod otlp;
#[path = "input_rules/otlp_held.rs"]
mod otlp_held;
#[path = "input_rules/surfaces.rs"]
mod surfaces;

fn error_code(reply: &Reply) -> String {
    reply.json()["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("not the error shape: {}", reply.text()))
        .to_owned()
}

/// A batch with one malformed item is refused whole, naming the item; a
/// well-formed batch still gets per-step results.
#[test]
fn a_malformed_batch_item_refuses_the_batch() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let mut bad = step("b1", "agent-1", "observation", "second");
    bad["hash_agent_id"] = json!({});
    let batch = json!([step("b1", "agent-1", "observation", "first"), bad]);
    let reply = post(&server, "/v1/steps/batch", &admin, &batch);
    assert_eq!(reply.status, 400, "{}", reply.text());
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("step 1 of the batch"), "{message}");
    assert!(
        message.contains("nothing in this batch was written"),
        "{message}"
    );
    // Nothing was written: the session the first item would have started
    // does not exist.
    assert_eq!(get(&server, "/v1/sessions/b1", &admin).status, 404);

    let good = json!([
        step("b2", "agent-1", "observation", "first"),
        step("b2", "agent-1", "decision", "second"),
    ]);
    let reply = post(&server, "/v1/steps/batch", &admin, &good);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["accepted"], 2);
}

/// An empty upload is a request without its bundle (400), not a verdict.
#[test]
fn verifying_an_empty_body_is_a_client_error() {
    let server = start(ServerConfig::default());
    let reply = call(
        &server,
        "POST",
        "/v1/bundles/verify",
        &server.admin,
        Some(b""),
    );
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(error_code(&reply), "invalid_request");
    assert!(reply.text().contains("empty"), "{}", reply.text());
}

/// Limits out of range are refused rather than silently clamped.
#[test]
fn out_of_range_limits_are_refused() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    for path in [
        "/v1/reviews?limit=10001",
        "/v1/reviews?limit=0",
        "/v1/sessions?limit=0",
        "/v1/sessions?limit=1001",
    ] {
        let reply = get(&server, path, &admin);
        assert_eq!(reply.status, 400, "{path}: {}", reply.text());
        assert_eq!(error_code(&reply), "invalid_argument", "{path}");
    }
    assert_eq!(get(&server, "/v1/reviews?limit=10000", &admin).status, 200);
}

/// Ids given as filters or scopes follow the id rule: an empty or
/// malformed one is refused instead of matching nothing.
#[test]
fn malformed_ids_in_queries_are_refused() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    for path in [
        "/v1/sessions?agent_id=",
        "/v1/sessions?agent_id=a%20b",
        "/v1/export?session=",
        "/v1/export?agent=%2F%2F",
    ] {
        let reply = get(&server, path, &admin);
        assert_eq!(reply.status, 400, "{path}: {}", reply.text());
        assert_eq!(error_code(&reply), "malformed_id", "{path}");
        let field = path.split(['?', '=']).nth(1).unwrap();
        assert_eq!(reply.json()["error"]["field"], field, "{path}");
    }
}

/// A misspelt member or query parameter is an error naming it and the
/// nearest known name, on every endpoint: never silently dropped.
#[test]
fn misspellings_are_named_with_a_suggestion() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let mut misspelt = step("m1", "agent-1", "observation", "x");
    misspelt["contnet"] = json!("lost?");
    misspelt.as_object_mut().unwrap().remove("content");
    let reply = post(&server, "/v1/steps", &admin, &misspelt);
    assert_eq!(reply.status, 400, "{}", reply.text());
    let error = &reply.json()["error"];
    assert_eq!(error["code"], "unknown_field");
    assert_eq!(error["field"], "contnet");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("did you mean content?"),
        "{error}"
    );
    assert_eq!(get(&server, "/v1/sessions/m1", &admin).status, 404);

    for (path, parameter, suggestion) in [
        ("/v1/sessions?agent=a", "agent", "agent_id"),
        ("/v1/sessions?limt=5", "limt", "limit"),
        ("/v1/export?sesion=s", "sesion", "session"),
        ("/v1/search?q=x&limitt=3", "limitt", "limit"),
        ("/v1/reviews?al=true", "al", "all"),
    ] {
        let reply = get(&server, path, &admin);
        assert_eq!(reply.status, 400, "{path}: {}", reply.text());
        let error = &reply.json()["error"];
        assert_eq!(error["code"], "unknown_field", "{path}");
        assert_eq!(error["field"], parameter, "{path}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains("unknown query parameter"), "{message}");
        assert!(
            message.contains(&format!("did you mean {suggestion}?")),
            "{message}"
        );
    }
}

/// A refused record names the field the rule concerns.
#[test]
fn record_rules_name_their_field() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let mut confident = step("f1", "agent-1", "observation", "x");
    confident["confidence"] = json!(1.5);
    for (body, code, field) in [
        (
            step("f1", "agent-1", "Daydream", "x"),
            "unknown_step_type",
            "step_type",
        ),
        (confident, "confidence_out_of_range", "confidence"),
        (
            step("f 1", "agent-1", "observation", "x"),
            "malformed_id",
            "session_id",
        ),
        // No store keeps a NUL in text (PostgreSQL cannot): refused on
        // every backend, so that what one takes the other takes.
        (
            step("f1", "agent-1", "observation", "a\u{0}b"),
            "nul_character",
            "content",
        ),
        (
            {
                let mut s = step("f1", "agent-1", "observation", "x");
                s["model"] = json!("m\u{0}");
                s
            },
            "nul_character",
            "model",
        ),
    ] {
        let reply = post(&server, "/v1/steps", &admin, &body);
        assert_eq!(reply.status, 400, "{}", reply.text());
        let error = &reply.json()["error"];
        assert_eq!(error["code"], code, "{error}");
        assert_eq!(error["field"], field, "{error}");
    }
}

/// The document and the handlers agree on names: for every operation, each
/// documented query parameter and body member is accepted as known (never
/// refused as `unknown_field`), and an undocumented one is refused, naming
/// it. The handlers read bodies and queries by hand (to refuse duplicates
/// and 64-bit overflows, and to name every field), so this is what ties
/// them to the generated document.
#[test]
fn documented_names_are_the_accepted_ones() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let doc: Value = serde_json::from_str(cairn_server::openapi_document()).unwrap();
    let schemas = doc["components"]["schemas"].clone();
    let resolve = |schema: &Value| -> Value {
        match schema["$ref"].as_str() {
            Some(r) => schemas[r.trim_start_matches("#/components/schemas/")].clone(),
            None => schema.clone(),
        }
    };
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        // OTLP ignores unknown fields, as its specification requires.
        if ["/v1/traces", "/v1/metrics", "/v1/logs"].contains(&path.as_str()) {
            continue;
        }
        let concrete = path
            .replace("{session_id}", "s1")
            .replace("{turn_id}", "t1")
            .replace("{trace_id}", "nope")
            .replace("{event_id}", "nope")
            .replace("{key_id}", "nope");
        for (method, operation) in item.as_object().unwrap() {
            let method = method.to_uppercase();
            let send = |query: &str, body: Option<&Value>| {
                let bytes = body.map(|b| serde_json::to_vec(b).unwrap());
                call(
                    &server,
                    &method,
                    &format!("{concrete}{query}"),
                    &admin,
                    bytes.as_deref(),
                )
            };
            let refused_as_unknown = |reply: &Reply, name: &str| {
                reply.status == 400
                    && reply.json()["error"]["code"] == "unknown_field"
                    && reply.json()["error"]["field"] == name
            };
            let params: Vec<String> = operation["parameters"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .filter(|p| p["in"] == "query")
                        .map(|p| p["name"].as_str().unwrap().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            let body_schema =
                operation["requestBody"]["content"]["application/json"]["schema"].clone();
            let body = resolve(&body_schema);
            let (object, batch) = match body["type"].as_str() {
                Some("array") => (resolve(&body["items"]), true),
                _ => (body, false),
            };
            let wrap = |member: Value| if batch { json!([member]) } else { member };
            let default_body = (!body_schema.is_null()).then(|| wrap(json!({})));
            for name in &params {
                let reply = send(&format!("?{name}=1"), default_body.as_ref());
                assert!(
                    !refused_as_unknown(&reply, name),
                    "{method} {path}: documented parameter {name} refused: {}",
                    reply.text()
                );
                checked += 1;
            }
            // On every /v1/ operation, those that take no parameters too
            // (some ignored what they did not read); the service's routes
            // outside /v1/ take what probes and scrapers send.
            let reply = send("?zz_undocumented=1", default_body.as_ref());
            if path.starts_with("/v1/") && !path.starts_with("/v1/tlog/") {
                assert!(
                    refused_as_unknown(&reply, "zz_undocumented"),
                    "{method} {path}: an undocumented parameter was not refused: {} {}",
                    reply.status,
                    reply.text()
                );
            } else {
                assert!(
                    !refused_as_unknown(&reply, "zz_undocumented"),
                    "{method} {path}: a probe's parameter was refused: {}",
                    reply.text()
                );
            }
            // An empty name names nothing.
            let reply = send("?=1", default_body.as_ref());
            assert!(
                !refused_as_unknown(&reply, ""),
                "{method} {path}: an empty name was refused: {}",
                reply.text()
            );
            let Some(members) = object["properties"].as_object() else {
                continue;
            };
            for name in members.keys() {
                let reply = send("", Some(&wrap(json!({ name.as_str(): "1" }))));
                let item_name = if batch {
                    format!("[0].{name}")
                } else {
                    name.clone()
                };
                assert!(
                    !refused_as_unknown(&reply, name) && !refused_as_unknown(&reply, &item_name),
                    "{method} {path}: documented member {name} refused: {}",
                    reply.text()
                );
                checked += 1;
            }
            if object["additionalProperties"] == false {
                let reply = send("", Some(&wrap(json!({"zz_undocumented": 1}))));
                let item_name = if batch {
                    "[0].zz_undocumented"
                } else {
                    "zz_undocumented"
                };
                assert!(
                    reply.status == 400
                        && reply.json()["error"]["code"] == "unknown_field"
                        && reply.json()["error"]["field"]
                            .as_str()
                            .is_some_and(|f| f.ends_with("zz_undocumented")),
                    "{method} {path}: an undocumented member was not refused as {item_name}: {} {}",
                    reply.status,
                    reply.text()
                );
            }
        }
    }
    assert!(checked > 80, "only {checked} names checked");
}

/// An audit event shares the step ids' namespace but is not a step: read,
/// review or erase it as a step and the answer is 404, never a storage
/// failure (found by Schemathesis: it used to be a 503).
#[test]
fn an_audit_event_id_is_not_a_step() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let event = post(
        &server,
        "/v1/audit-events",
        &admin,
        &json!({"event_id": "ev-1", "action": "tool call"}),
    );
    assert_eq!(event.status, 201, "{}", event.text());
    let read = get(&server, "/v1/steps/ev-1", &admin);
    assert_eq!(
        (read.status, error_code(&read)),
        (404, "not_found".to_owned()),
        "{}",
        read.text()
    );
    let erase = post(
        &server,
        "/v1/steps/ev-1/erase",
        &admin,
        &json!({"reason": "gdpr"}),
    );
    assert_eq!(
        (erase.status, error_code(&erase)),
        (404, "not_found".to_owned()),
        "{}",
        erase.text()
    );
    let review = post(
        &server,
        "/v1/steps/ev-1/review",
        &admin,
        &json!({"decision": "approve"}),
    );
    assert_eq!(
        (review.status, error_code(&review)),
        (404, "not_found".to_owned()),
        "{}",
        review.text()
    );
    // A step of that id cannot be recorded either: the namespace is shared.
    let mut step = step("s-ev", "agent-1", "observation", "x");
    step["trace_id"] = json!("ev-1");
    let clash = post(&server, "/v1/steps", &admin, &step);
    assert_eq!(clash.status, 409, "{}", clash.text());
}

/// A batch item whose shape is wrong (an id off its pattern, a confidence
/// out of range) is malformed: the whole batch is refused, naming the item,
/// as the document's patterns say; nothing is written. An unknown step type
/// is answered per item, like every refusal of the ledger.
#[test]
fn a_batch_item_of_the_wrong_shape_refuses_the_batch() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    for (member, value, code) in [
        ("agent_id", json!(""), "malformed_id"),
        ("session_id", json!("has space"), "malformed_id"),
        ("trace_id", json!("x".repeat(201)), "malformed_id"),
        ("confidence", json!(1.5), "confidence_out_of_range"),
    ] {
        let mut bad = step("shape", "agent-1", "observation", "second");
        bad[member] = value;
        let batch = json!([step("shape", "agent-1", "observation", "first"), bad]);
        let reply = post(&server, "/v1/steps/batch", &admin, &batch);
        assert_eq!(reply.status, 400, "{member}: {}", reply.text());
        assert_eq!(error_code(&reply), code, "{}", reply.text());
        assert_eq!(
            reply.json()["error"]["field"],
            format!("[1].{member}"),
            "{}",
            reply.text()
        );
        assert_eq!(get(&server, "/v1/sessions/shape", &admin).status, 404);
    }
}

#[test]
fn an_unknown_step_type_in_a_batch_is_answered_per_item() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let batch = json!([
        step("kinds", "agent-1", "observation", "first"),
        step("kinds", "agent-1", "Bogus", "second")
    ]);
    let reply = post(&server, "/v1/steps/batch", &admin, &batch);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["accepted"], 1);
    assert_eq!(
        reply.json()["results"][1]["error"]["code"],
        "unknown_step_type"
    );
}

/// A step's integer fields beyond 2^53 − 1 are refused (400
/// `unsafe_integer` naming the field): stored, every export of the step
/// would fail verification for good, since a verifier reads a bundle's
/// numbers exactly only up to 2^53 − 1. Just below is accepted and its
/// export verifies.
#[test]
fn integer_fields_beyond_two_to_the_53_are_refused() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    for (field, value) in [
        ("duration_ms", json!(9_007_199_254_740_992u64)),
        ("token_count", json!(u64::MAX)),
    ] {
        let mut body = step("big", "agent-1", "observation", "counted");
        body[field] = value;
        let reply = post(&server, "/v1/steps", &admin, &body);
        assert_eq!(reply.status, 400, "{field}: {}", reply.text());
        assert_eq!(error_code(&reply), "unsafe_integer", "{}", reply.text());
        assert_eq!(reply.json()["error"]["field"], field, "{}", reply.text());
    }
    assert_eq!(get(&server, "/v1/sessions/big", &admin).status, 404);
    let mut body = step("big", "agent-1", "observation", "counted");
    body["duration_ms"] = json!(9_007_199_254_740_991u64);
    body["token_count"] = json!(9_007_199_254_740_991u64);
    let reply = post(&server, "/v1/steps", &admin, &body);
    assert_eq!(reply.status, 201, "{}", reply.text());
    let bundle = get(&server, "/v1/export?session=big", &admin);
    assert_eq!(bundle.status, 200, "{}", bundle.text());
    // An org's records are never cached on the way (a probe found exports
    // without Cache-Control while pages had no-store).
    let head = raw(
        server.addr,
        &format!(
            "GET /v1/export?session=big HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}"
        ),
        b"",
    );
    assert_eq!(head.status, 200);
    assert_eq!(head.header("cache-control"), Some("no-store"));
    let mut verifier = cairn_core::bundle::BundleVerifier::new(Vec::new());
    for line in bundle.text().lines() {
        verifier.push_line(line);
    }
    let result = verifier.finish();
    assert!(result.verdict.verified, "{:?}", result.verdict);
}

/// A query parameter given twice is refused, naming it, as a JSON body's
/// repeated member is (a probe found `?session=a&session=b` exported `b`
/// and `limit=1&limit=2` accepted).
#[test]
fn a_query_parameter_given_twice_is_refused() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    for path in [
        "/v1/export?session=a&session=b",
        "/v1/sessions?limit=1&limit=2",
        "/v1/search?q=x&q=y",
        // A witness policy's one quorum (witness itself repeats).
        "/v1/verify?quorum=1&quorum=2",
    ] {
        let reply = get(&server, path, &admin);
        assert_eq!(reply.status, 400, "{path}: {}", reply.text());
        assert_eq!(error_code(&reply), "invalid_request", "{path}");
        assert!(
            reply.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("given twice"),
            "{path}: {}",
            reply.text()
        );
    }
    assert_eq!(get(&server, "/v1/sessions?limit=1", &admin).status, 200);
}

/// A number in a query is spelled in decimal digits only: a leading `+`
/// (which Rust's integer parsing takes) is a second spelling of it and is
/// refused, naming the parameter.
#[test]
fn a_number_with_a_plus_sign_is_refused() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let witness = cairn_core::checkpoint::Cosigner::from_seed("w.example", &[1; 32])
        .unwrap()
        .verifier()
        .to_string()
        .replace('+', "%2B");
    for (path, field) in [
        ("/v1/sessions?limit=%2B5".to_owned(), "limit"),
        ("/v1/search?q=x&limit=%2B5".to_owned(), "limit"),
        ("/v1/reviews?limit=%2B5".to_owned(), "limit"),
        (
            format!("/v1/verify?witness={witness}&quorum=%2B1"),
            "quorum",
        ),
    ] {
        let path = path.as_str();
        let reply = get(&server, path, &admin);
        assert_eq!(reply.status, 400, "{path}: {}", reply.text());
        assert_eq!(
            reply.json()["error"]["field"],
            field,
            "{path}: {}",
            reply.text()
        );
    }
    assert_eq!(get(&server, "/v1/sessions?limit=5", &admin).status, 200);
}

/// An audit event's detail is checked in canonical form before it is
/// queued, from the blocking pool when it holds much memory (as a large
/// body is parsed there): such a detail is refused, recorded and read
/// back exactly as a small one, and a retry of it is recognised as one.
#[test]
fn a_large_audit_detail_is_answered_as_a_small_one() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    // 4,000 small numbers: about 20 KB in canonical form (under the
    // content limit), past 64 KiB in memory once parsed.
    let many: Vec<u32> = (0..4_000).collect();
    for items in [json!([]), json!(many)] {
        let reserved = json!({"items": items, "$serde_json::private::RawValue": "1"});
        let refused = post(
            &server,
            "/v1/audit-events",
            &admin,
            &json!({"action": "x", "detail": reserved}),
        );
        assert_eq!(
            (refused.status, error_code(&refused)),
            (400, "invalid_record".to_owned()),
            "{}",
            refused.text()
        );
        assert!(refused.text().contains("reserved"), "{}", refused.text());
        let event_id = format!("ev-{}", items.as_array().map_or(0, Vec::len));
        let detail = json!({"items": items, "n": [1, 2.5, -0.0], "ok": true});
        let event = json!({"event_id": event_id, "action": "x", "detail": detail});
        let recorded = post(&server, "/v1/audit-events", &admin, &event);
        assert_eq!(recorded.status, 201, "{}", recorded.text());
        let read = get(&server, &format!("/v1/audit-events/{event_id}"), &admin);
        assert_eq!(read.status, 200, "{}", read.text());
        assert_eq!(read.json()["detail"], detail);
        // Sent again, it is answered as recorded (a retry); another
        // detail under its id is refused.
        let again = post(&server, "/v1/audit-events", &admin, &event);
        assert_eq!(again.status, 201, "{}", again.text());
        assert_eq!(again.json(), recorded.json());
        let other = json!({"event_id": event_id, "action": "x", "detail": {"items": items}});
        let refused = post(&server, "/v1/audit-events", &admin, &other);
        assert_eq!(
            (refused.status, error_code(&refused)),
            (409, "duplicate_id".to_owned()),
            "{}",
            refused.text()
        );
    }
    assert!(cairn_core::json::approx_memory(&json!(many)) > 64 * 1024);
    let past_the_limit = json!({"action": "x", "detail": {"pad": "x".repeat(70_000)}});
    let refused = post(&server, "/v1/audit-events", &admin, &past_the_limit);
    assert_eq!(
        (refused.status, error_code(&refused)),
        (400, "payload_too_large".to_owned()),
        "{}",
        refused.text()
    );
}

/// A thinking text past 64 KiB is split on the server's CPU pool, for
/// `POST /v1/thinking/parse` and for a turn: the same steps as the core's
/// parser gives, the same refusal past the steps one request records.
#[test]
fn a_long_thinking_text_is_answered_as_a_short_one() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let phases = |n: usize| -> String {
        (0..n)
            .map(|i| format!("[思考] thought {i} about the ledger\n[計画] 1. step {i}\n"))
            .collect()
    };
    for n in [2, 2_000] {
        let text = phases(n);
        let expected = cairn_core::thinking::parse_thinking_at_most(&text, 10_000).unwrap();
        let parsed = post(
            &server,
            "/v1/thinking/parse",
            &admin,
            &json!({"text": text}),
        );
        assert_eq!(parsed.status, 200, "{n}: {}", parsed.text());
        let steps = parsed.json()["steps"].as_array().unwrap().clone();
        assert_eq!(steps.len(), expected.len(), "{n}");
        for (got, want) in steps.iter().zip(&expected) {
            assert_eq!(got["phase"], want.phase, "{n}");
            assert_eq!(got["content"], want.content.as_str(), "{n}");
        }
        // MCP's parse_thinking: the same steps.
        let session = mcp_session(server.addr, &admin);
        let rpc = mcp_tool(
            server.addr,
            &admin,
            &session,
            "parse_thinking",
            json!({"text": text}),
        )
        .rpc();
        assert_eq!(
            rpc["result"]["structuredContent"]["steps"],
            json!(steps),
            "{n}"
        );
        let turn = post(
            &server,
            &format!("/v1/sessions/long-{n}/turns"),
            &admin,
            &json!({"agent_id": "a", "thinking": text}),
        );
        assert_eq!(turn.status, 201, "{n}: {}", turn.text());
        assert_eq!(turn.json()["accepted"], expected.len(), "{n}");
    }
    assert!(phases(2_000).len() > 64 * 1024);
    let too_many = post(
        &server,
        "/v1/thinking/parse",
        &admin,
        &json!({"text": phases(5_001)}),
    );
    assert_eq!(
        (too_many.status, error_code(&too_many)),
        (400, "invalid_request".to_owned()),
        "{}",
        too_many.text()
    );
}

/// A time-range export reads its bounds as a listing does, refuses a
/// range that holds no time (rather than answering that it found no
/// session), and takes the last date there is as its end.
#[test]
fn a_time_range_export_refuses_a_range_that_holds_no_time() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    post(&server, "/v1/steps", &admin, &step("tr", "a", "plan", "x"));
    for query in [
        "since=2026-12-05&until=2026-12-01",
        "since=2026-12-05T10:00:00Z&until=2026-12-05T10:00:00Z",
    ] {
        let reply = get(&server, &format!("/v1/export?{query}"), &admin);
        assert_eq!(reply.status, 400, "{query}: {}", reply.text());
        let error = &reply.json()["error"];
        assert_eq!(
            (error["code"].as_str(), error["field"].as_str()),
            (Some("invalid_argument"), Some("until")),
            "{query}: {error}"
        );
    }
    let everything = get(
        &server,
        "/v1/export?since=2000-01-01&until=9999-12-31",
        &admin,
    );
    assert_eq!(everything.status, 200, "{}", everything.text());
    assert!(
        everything.text().contains("\"tr\""),
        "{}",
        everything.text()
    );
    let listing = get(&server, "/v1/sessions?until=9999-12-31", &admin);
    assert_eq!(listing.status, 200, "{}", listing.text());
}

/// A link given as null is no link, as a null member is an absent one
/// (the OpenAPI document types each link as a string or null); a null
/// under a name that is no link is still refused, naming it.
#[test]
fn a_null_link_is_no_link() {
    let server = start(ServerConfig::default());
    let mut body = step("nl", "agent-1", "plan", "x");
    body["links"] = json!({"parent": null, "tool_call": "call-1"});
    let reply = post(&server, "/v1/steps", &server.admin, &body);
    assert_eq!(reply.status, 201, "{}", reply.text());
    let trace = reply.json()["trace_id"].as_str().unwrap().to_owned();
    let stored = call(
        &server,
        "GET",
        &format!("/v1/steps/{trace}"),
        &server.admin,
        None,
    )
    .json();
    assert_eq!(stored["links"], json!({"tool_call": "call-1"}), "{stored}");
    body["links"] = json!({"parnet": null});
    let reply = post(&server, "/v1/steps", &server.admin, &body);
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(reply.json()["error"]["field"], "links.parnet");
}
