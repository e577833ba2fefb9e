//! What the first Schemathesis run against the OpenAPI document found:
//! requests the document forbids that the server accepted. Each is refused
//! now with a 4xx in the one error shape, and nothing is written.

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;

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
        assert_eq!(error_code(&reply), "invalid_request", "{path}");
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
    }
}

/// OTLP/JSON bodies are objects: an array (which serde's derived structs
/// would read field by field) or a scalar is refused, on every signal.
#[test]
fn otlp_json_bodies_must_be_objects() {
    let server = start(ServerConfig::default());
    for path in ["/v1/traces", "/v1/metrics", "/v1/logs"] {
        for body in [&b"[]"[..], b"[null, null]", b"7", b"\"x\""] {
            // The harness sends `Content-Type: application/json`.
            let reply = call(&server, "POST", path, &server.admin, Some(body));
            assert_eq!(
                reply.status,
                400,
                "{path} {}: {}",
                String::from_utf8_lossy(body),
                reply.text()
            );
        }
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
    ] {
        let reply = post(&server, "/v1/steps", &admin, &body);
        assert_eq!(reply.status, 400, "{}", reply.text());
        let error = &reply.json()["error"];
        assert_eq!(error["code"], code, "{error}");
        assert_eq!(error["field"], field, "{error}");
    }
}
