//! OTLP bodies read as the OpenAPI document and the OTLP rules say: JSON
//! bodies that are objects, misspelt members named, text with NUL kept
//! without it, and sessions named by ids Cairn does not store as given.

use super::common::*;

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

/// An OTLP/JSON body that held no span because its member names are not
/// OTLP/JSON's (the proto's snake_case, OTLP before 0.19, a typo at the
/// top) is still a success, as the OTLP rules have a receiver ignore
/// unknown members, but a partial one that names them and rejects
/// nothing; an empty export is a bare success.
#[test]
fn otlp_json_bodies_of_misspelt_members_are_named() {
    let server = start(ServerConfig::default());
    for (body, named) in [
        (
            r#"{"resource_spans":[{"scope_spans":[{"spans":[{"trace_id":"0102030405060708090a0b0c0d0e0f10"}]}]}]}"#,
            Some("\"resource_spans\", \"scope_spans\""),
        ),
        (r#"{"resourceSpanz":[]}"#, Some("\"resourceSpanz\"")),
        (
            r#"{"resourceSpans":[{"instrumentationLibrarySpans":[{"spans":[]}]}]}"#,
            Some("\"instrumentationLibrarySpans\""),
        ),
        ("{}", None),
        (r#"{"resourceSpans":[]}"#, None),
        // A name in a value (an attribute's key) is no member.
        (
            r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"scope_spans","value":{"stringValue":"x"}}]}}]}"#,
            None,
        ),
        // In the body's order, each once.
        (
            r#"{"zeta":1,"alpha":2,"zeta":3}"#,
            Some("\"zeta\", \"alpha\""),
        ),
        // A long name once, however many times it comes.
        (
            &format!(r#"{{"{0}":1,"{0}":2,"b":3}}"#, "x".repeat(100)),
            Some(&format!("\"{}\", \"b\"", "x".repeat(64))),
        ),
    ] {
        let answer = export_text(&server, body);
        match named {
            Some(named) => {
                assert_eq!(answer["partialSuccess"]["rejectedSpans"], "0", "{answer}");
                let message = answer["partialSuccess"]["errorMessage"].as_str().unwrap();
                assert!(message.contains(named), "{body}: {message}");
                assert!(message.contains("resourceSpans, scopeSpans"), "{message}");
            }
            None => assert_eq!(answer, json!({}), "{body}"),
        }
    }
    // Beside spans spelt right, a time under `end_time_unix_nano` and a
    // second resource's spans under the proto's `scope_spans`: the
    // spans that decoded are recorded, and the answer names what was
    // ignored (also after a rejected span's reason).
    let span = |id: &str, time: &str| {
        format!(
            r#"{{"traceId":"6bf92f3577b34da6a3ce929d0e0e4736","spanId":"{id}","name":"chat",
               "startTimeUnixNano":"1764900000000000000","{time}":"1764900001000000000",
               "attributes":[{{"key":"gen_ai.operation.name","value":{{"stringValue":"chat"}}}}]}}"#
        )
    };
    for (bad, rejected) in [("endTimeUnixNano", "0"), ("traceId", "1")] {
        let body = format!(
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{},{}]}}]}},
                {{"scope_spans":[{{"spans":[{}]}}]}}]}}"#,
            span("0000000000000001", "endTimeUnixNano"),
            span("0000000000000002", "end_time_unix_nano").replace(bad, "x"),
            span("0000000000000003", "endTimeUnixNano"),
        );
        let answer = export_text(&server, &body);
        assert_eq!(
            answer["partialSuccess"]["rejectedSpans"], rejected,
            "{answer}"
        );
        let message = answer["partialSuccess"]["errorMessage"].as_str().unwrap();
        assert!(
            message.contains(
                r#"this OTLP/JSON body names "end_time_unix_nano" (for "endTimeUnixNano"), "scope_spans" (for "scopeSpans")"#
            ),
            "{message}"
        );
    }
}

/// The answer (200) to an OTLP/JSON export of `spans` (one resource, one
/// scope) by the admin key, and the spans it rejected.
fn export_spans(server: &Server, spans: Vec<serde_json::Value>) -> (serde_json::Value, u64) {
    let body = json!({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]});
    let reply = post(server, "/v1/traces", &server.admin, &body);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let answer = reply.json();
    let rejected = answer["partialSuccess"]["rejectedSpans"]
        .as_str()
        .map_or(0, |n| n.parse::<u64>().unwrap());
    (answer, rejected)
}

/// The answer to an OTLP/JSON export of `body`, as sent (200).
fn export_text(server: &Server, body: &str) -> serde_json::Value {
    let reply = call(
        server,
        "POST",
        "/v1/traces",
        &server.admin,
        Some(body.as_bytes()),
    );
    assert_eq!(reply.status, 200, "{body}: {}", reply.text());
    reply.json()
}

/// A session an OTLP exporter named with an id Cairn does not store as
/// given (a space, a slash, an accent) is found under its stored id, and
/// a read by the original name says which that is.
#[test]
fn an_otlp_session_read_by_its_original_name_is_pointed_to() {
    let server = start(ServerConfig::default());
    let span = json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "chat",
        "startTimeUnixNano": "1764900000000000000",
        "endTimeUnixNano": "1764900001000000000",
        "attributes": [{"key": "gen_ai.conversation.id", "value": {"stringValue": "conv 42/\u{e9}"}}]
    }]}]}]});
    let reply = post(&server, "/v1/traces", &server.admin, &span);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let sessions = call(&server, "GET", "/v1/sessions", &server.admin, None).json();
    let stored = sessions[0]["session_id"].as_str().unwrap().to_owned();
    assert!(stored.starts_with("conv-42-~"), "{sessions}");
    let by_original = call(
        &server,
        "GET",
        "/v1/sessions/conv%2042%2F%C3%A9",
        &server.admin,
        None,
    );
    assert_eq!(by_original.status, 404, "{}", by_original.text());
    let message = by_original.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.ends_with(&format!("is stored as {stored}")),
        "{message}"
    );
    let by_stored = call(
        &server,
        "GET",
        &format!("/v1/sessions/{stored}"),
        &server.admin,
        None,
    );
    assert_eq!(by_stored.status, 200, "{}", by_stored.text());
    // An id Cairn stores as given is just not found.
    let plain = call(
        &server,
        "GET",
        "/v1/sessions/nothing-here",
        &server.admin,
        None,
    );
    assert_eq!(
        plain.json()["error"]["message"],
        "session nothing-here not found"
    );
}

/// A span's text holding the NUL character is kept, each NUL replaced by
/// a space in the step's content and model (one byte, as NUL is, so that
/// text cut to its limits stays within them), where a step of its own
/// would be refused: an exporter cannot be asked to change its spans.
#[test]
fn otlp_text_with_nul_is_kept_without_it() {
    let server = start(ServerConfig::default());
    let body = json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "0102030405060708090a0b0c0d0e0f10",
        "spanId": "0102030405060708",
        "name": "chat\u{0}model",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001000000000",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "m\u{0}1"}},
            {"key": "session.id", "value": {"stringValue": "nul-span"}}
        ]
    }]}]}]});
    let reply = post(&server, "/v1/traces", &server.admin, &body);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json(), json!({}), "{}", reply.text());
    let replay = call(&server, "GET", "/v1/sessions/nul-span", &server.admin, None);
    assert_eq!(replay.status, 200, "{}", replay.text());
    let text = replay.text();
    // The step's text without it; the span as sent, in the metadata, with
    // it (a JSON string holds it escaped).
    assert!(text.contains("\"content\":\"chat model\""), "{text}");
    assert!(text.contains("\"model\":\"m 1\""), "{text}");
    assert!(text.contains("\"name\":\"chat\\u0000model\""), "{text}");
}

/// A span's steps whose ids are taken are answered as a retry only when
/// the step recorded under the id is this very step (as REST's batches):
/// an export sent again rejects nothing, but a span whose ids another
/// writer took first (here a key bound to another agent, which learnt the
/// trace and span ids, wrote a step under the span's first step id) is
/// rejected and counted, never dropped silently; so is a second,
/// different span of the same ids within one export.
#[test]
fn otlp_steps_whose_ids_another_step_took_are_rejected() {
    let server = start(ServerConfig::default());
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let span = |span_id: &str, text: &str| {
        json!({
            "traceId": trace,
            "spanId": span_id,
            "name": "invoke_agent",
            "startTimeUnixNano": "1764900000000000000",
            "endTimeUnixNano": "1764900001000000000",
            "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}},
                {"key": "gen_ai.agent.name", "value": {"stringValue": "orchestrator"}},
                {"key": "gen_ai.conversation.id", "value": {"stringValue": "orch-sess"}},
                {"key": "gen_ai.input.messages", "value": {"stringValue": text}}
            ]
        })
    };
    let rejected = |spans: &[serde_json::Value]| export_spans(&server, spans.to_vec()).1;
    // An export, and the same export again: nothing rejected.
    let first = [span("00f067aa0ba902b7", "hello")];
    assert_eq!(rejected(&first), 0);
    let steps = call(
        &server,
        "GET",
        "/v1/sessions/orch-sess",
        &server.admin,
        None,
    )
    .json()["steps"]
        .as_array()
        .unwrap()
        .len();
    assert!(steps > 0);
    assert_eq!(rejected(&first), 0);
    // A key bound to another agent writes a step under the next span's
    // first step id; the real span then finds it taken.
    let squatter = key_for(&server, "acme", Role::Writer, Some("agent-a"));
    let span_id = "b7ad6b7169203331";
    let taken = format!("otel.{trace}.{span_id}.0");
    let squat = post(
        &server,
        "/v1/steps",
        &squatter,
        &json!({"session_id": "a-sess", "agent_id": "agent-a", "step_type": "observation",
                "content": "benign", "trace_id": taken}),
    );
    assert_eq!(squat.status, 201, "{}", squat.text());
    let (answer, count) = export_spans(&server, vec![span(span_id, "delete prod db")]);
    assert_eq!(count, 1, "{answer}");
    let message = answer["partialSuccess"]["errorMessage"].as_str().unwrap();
    assert!(message.contains("taken by another step"), "{message}");
    // A span written as its session's agent (the session was opened by
    // another agent first), sent again: a retry still.
    let opened = post(
        &server,
        "/v1/steps",
        &server.admin,
        &json!({"session_id": "orch-sess-2", "agent_id": "first-agent",
                "step_type": "observation", "content": "opened"}),
    );
    assert_eq!(opened.status, 201, "{}", opened.text());
    let mut other = span("1111111111111111", "as the session's agent");
    other["attributes"][2]["value"]["stringValue"] = json!("orch-sess-2");
    let adopted = [other];
    assert_eq!(rejected(&adopted), 0);
    assert_eq!(rejected(&adopted), 0);
    let session = call(
        &server,
        "GET",
        "/v1/sessions/orch-sess-2",
        &server.admin,
        None,
    )
    .json();
    assert!(session["steps"].as_array().unwrap().len() > 1, "{session}");
    // Two different spans of the same ids in one export: one is rejected.
    let twice = [
        span("0000000000000abc", "one"),
        span("0000000000000abc", "another"),
    ];
    assert_eq!(rejected(&twice), 1);
}

/// Spans of a key without a binding are written into a session another
/// agent opened as that agent only when a key without a binding opened
/// it (the exporter's earlier spans, before their agent span arrived). In
/// a session a key bound to an agent opened first, each span is checked
/// on its own, whatever the export's batching: one naming another agent
/// is rejected and counted, naming both agents (as REST refuses it); one
/// naming that agent, or none (a child span exported before its agent
/// span), is written as it; a session of a hashed agent id takes spans
/// naming the agent whose hash it is.
#[test]
fn otlp_spans_are_not_adopted_into_a_session_a_bound_key_opened() {
    let server = start(ServerConfig::default());
    // A span naming `session` and, if any, `agent` (an agent span when
    // `invoke`).
    let span = |session: &str, span_id: &str, agent: Option<&str>, invoke: bool| {
        let operation = if invoke { "invoke_agent" } else { "chat" };
        let mut attributes = vec![
            json!({"key": "gen_ai.operation.name", "value": {"stringValue": operation}}),
            json!({"key": "gen_ai.conversation.id", "value": {"stringValue": session}}),
            json!({"key": "gen_ai.output.messages", "value": {"stringValue": "the answer"}}),
        ];
        if let Some(agent) = agent {
            attributes.push(json!({"key": "gen_ai.agent.name", "value": {"stringValue": agent}}));
        }
        json!({
            "traceId": "5bf92f3577b34da6a3ce929d0e0e4736",
            "spanId": span_id,
            "name": operation,
            "startTimeUnixNano": format!("17649000{}000000000", &span_id[14..]),
            "endTimeUnixNano": "1764900009000000000",
            "attributes": attributes
        })
    };
    let export = |spans: Vec<serde_json::Value>| export_spans(&server, spans);
    let open = |key: &str, body: serde_json::Value| {
        let reply = post(&server, "/v1/steps", key, &body);
        assert_eq!(reply.status, 201, "{}", reply.text());
    };
    let opening = |session: &str, agent: &str| {
        json!({"session_id": session, "agent_id": agent,
               "step_type": "observation", "content": "opened"})
    };
    let agents = |session: &str| {
        call(
            &server,
            "GET",
            &format!("/v1/sessions/{session}"),
            &server.admin,
            None,
        )
        .json()["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["agent_id"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    // A key bound to agent-a opens the session id an orchestrator's
    // conversation will use.
    let squatter = key_for(&server, "acme", Role::Writer, Some("agent-a"));
    open(&squatter, opening("squatted", "agent-a"));
    let (answer, rejected) = export(vec![span(
        "squatted",
        "0000000000000001",
        Some("orchestrator"),
        true,
    )]);
    assert_eq!(rejected, 1, "{answer}");
    let message = answer["partialSuccess"]["errorMessage"].as_str().unwrap();
    assert!(
        message.contains(
            "session squatted was opened as agent agent-a by a key bound to that agent, so only spans naming that agent (or no agent) are written into it, and this span names agent orchestrator"
        ),
        "{message}"
    );
    assert_eq!(agents("squatted"), ["agent-a"]);
    // In one export beside an agent span of agent-a: still rejected,
    // and agent-a's own span written.
    let (answer, rejected) = export(vec![
        span("squatted", "0000000000000002", Some("agent-a"), true),
        span("squatted", "0000000000000003", Some("orchestrator"), false),
    ]);
    assert_eq!(rejected, 1, "{answer}");
    let written = agents("squatted");
    assert!(
        written.len() > 1 && written.iter().all(|a| a == "agent-a"),
        "{written:?}"
    );
    // A child span naming no agent, exported before its agent span, then
    // its agent span naming agent-a: both written as agent-a.
    let before = agents("squatted").len();
    assert_eq!(
        export(vec![span("squatted", "0000000000000004", None, false)]).1,
        0
    );
    assert_eq!(
        export(vec![span(
            "squatted",
            "0000000000000005",
            Some("agent-a"),
            true
        )])
        .1,
        0
    );
    let written = agents("squatted");
    assert!(
        written.len() > before + 1 && written.iter().all(|a| a == "agent-a"),
        "{written:?}"
    );
    // A session of agent-a's hashed id takes spans naming agent-a.
    let mut hashed = opening("hashed", "agent-a");
    hashed["hash_agent_id"] = json!(true);
    open(&squatter, hashed);
    let (answer, rejected) = export(vec![span(
        "hashed",
        "0000000000000006",
        Some("agent-a"),
        false,
    )]);
    assert_eq!(rejected, 0, "{answer}");
    let written = agents("hashed");
    assert!(
        written.len() > 1 && written.iter().all(|a| *a == written[0]),
        "{written:?}"
    );
    // A session another key without a binding opened (another exporter,
    // or the same one before its agent span) takes the spans as its agent.
    let collector = key_for(&server, "acme", Role::Writer, None);
    open(&collector, opening("shared", "first-agent"));
    assert_eq!(
        export(vec![span(
            "shared",
            "0000000000000007",
            Some("orchestrator"),
            true
        )]),
        (json!({}), 0)
    );
    let written = agents("shared");
    assert!(
        written.len() > 1 && written.iter().all(|a| a == "first-agent"),
        "{written:?}"
    );
}
