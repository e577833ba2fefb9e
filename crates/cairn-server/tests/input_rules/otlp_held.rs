//! OTLP spans exported before the span that names their session wait for
//! it (docs/OTLP.md "Spans waiting for their session"): a turn's model and
//! tool spans, sent by a batch processor before the agent span carrying
//! the conversation id, end up in the conversation's session, in time
//! order, and never in a session named after their trace.

use super::*;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const AGENT_SPAN: &str = "00f067aa0ba902b7";

/// A span of [`TRACE`]: `parent` empty for the root; `session` named on it
/// when given; starting at second `start` of the turn.
fn span(id: &str, parent: &str, operation: &str, session: Option<&str>, start: u64) -> Value {
    let mut attributes = vec![
        json!({"key": "gen_ai.operation.name", "value": {"stringValue": operation}}),
        json!({"key": "gen_ai.output.messages", "value": {"stringValue": format!("out of {id}")}}),
    ];
    if let Some(session) = session {
        attributes
            .push(json!({"key": "gen_ai.conversation.id", "value": {"stringValue": session}}));
    }
    json!({
        "traceId": TRACE,
        "spanId": id,
        "parentSpanId": parent,
        "name": operation,
        "startTimeUnixNano": format!("{}", 1_764_900_000_000_000_000u64 + start * 1_000_000_000),
        "endTimeUnixNano": format!("{}", 1_764_900_000_000_000_000u64 + (start + 1) * 1_000_000_000),
        "attributes": attributes
    })
}

/// The model and tool spans of the agent's turn (children of the agent
/// span), naming no session.
fn children() -> Vec<Value> {
    vec![
        span("1000000000000001", AGENT_SPAN, "chat", None, 1),
        span("1000000000000002", AGENT_SPAN, "execute_tool", None, 2),
    ]
}

fn export(server: &Server, token: &str, spans: Vec<Value>) {
    let body = json!({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]});
    let reply = post(server, "/v1/traces", token, &body);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        reply.json()["partialSuccess"]["rejectedSpans"].is_null(),
        "{}",
        reply.text()
    );
}

/// The step ids of `session`, in chain order (none: no such session).
fn steps_of(server: &Server, session: &str) -> Option<Vec<String>> {
    let reply = get(server, &format!("/v1/sessions/{session}"), &server.admin);
    if reply.status == 404 {
        return None;
    }
    assert_eq!(reply.status, 200, "{}", reply.text());
    Some(
        reply.json()["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["trace_id"].as_str().unwrap().to_owned())
            .collect(),
    )
}

/// The span ids of step ids, in order, each once.
fn spans_of(steps: &[String]) -> Vec<String> {
    let mut spans: Vec<String> = Vec::new();
    for step in steps {
        let span = step.split('.').nth(2).unwrap().to_owned();
        if spans.last() != Some(&span) && !spans.contains(&span) {
            spans.push(span);
        }
    }
    spans
}

#[test]
fn spans_sent_before_the_span_naming_their_session_are_written_into_it() {
    let server = start(ServerConfig::default());
    // The first batch: the children alone. Acknowledged, written nowhere
    // yet (no session named after the trace is opened).
    export(&server, &server.admin, children());
    // A retry of the same export holds nothing twice.
    export(&server, &server.admin, children());
    assert_eq!(steps_of(&server, TRACE), None);
    // The agent span, the trace's root, names the conversation.
    export(
        &server,
        &server.admin,
        vec![span(AGENT_SPAN, "", "invoke_agent", Some("conv-1"), 0)],
    );
    let steps = steps_of(&server, "conv-1").expect("the conversation's session");
    // In time order: the agent's opening step, the model call, the tool,
    // the agent's closing steps; each step once.
    assert_eq!(
        spans_of(&steps)[..3],
        [AGENT_SPAN, "1000000000000001", "1000000000000002"]
    );
    let mut unique = steps.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), steps.len(), "{steps:?}");
    assert_eq!(steps_of(&server, TRACE), None);
    // A span of the trace arriving later, naming nothing, joins the
    // session the trace's steps are in at once.
    export(
        &server,
        &server.admin,
        vec![span("1000000000000003", AGENT_SPAN, "chat", None, 3)],
    );
    let later = steps_of(&server, "conv-1").unwrap();
    assert_eq!(spans_of(&later).last().unwrap(), "1000000000000003");
    assert_eq!(steps_of(&server, TRACE), None);
}

#[test]
fn a_root_span_naming_no_session_writes_its_trace_at_once() {
    let server = start(ServerConfig::default());
    export(&server, &server.admin, children());
    assert_eq!(steps_of(&server, TRACE), None);
    export(
        &server,
        &server.admin,
        vec![span(AGENT_SPAN, "", "invoke_agent", None, 0)],
    );
    let steps = steps_of(&server, TRACE).expect("the trace's session");
    assert_eq!(spans_of(&steps).len(), 3, "{steps:?}");
    // A request holding a whole trace is written at once, as before.
    let mut whole = children();
    for s in &mut whole {
        s["traceId"] = json!("5bf92f3577b34da6a3ce929d0e0e4736");
    }
    let mut root = span(AGENT_SPAN, "", "invoke_agent", None, 0);
    root["traceId"] = json!("5bf92f3577b34da6a3ce929d0e0e4736");
    whole.push(root);
    export(&server, &server.admin, whole);
    let steps = steps_of(&server, "5bf92f3577b34da6a3ce929d0e0e4736").unwrap();
    assert_eq!(spans_of(&steps).len(), 3);
}

#[test]
fn a_span_whose_wait_ends_goes_to_the_session_named_after_its_trace() {
    let mut config = ServerConfig::default();
    config.otlp.hold_for = Duration::from_secs(1);
    let server = start(config);
    export(&server, &server.admin, children());
    assert_eq!(steps_of(&server, TRACE), None);
    let deadline = Instant::now() + Duration::from_secs(30);
    // Written, then forgotten: once nothing is held, everything is written.
    while !server
        .store
        .due_held_traces(i64::MAX, 1, 1)
        .unwrap()
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the held spans were never written"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let steps = steps_of(&server, TRACE).expect("the trace's session");
    assert_eq!(
        spans_of(&steps),
        ["1000000000000001", "1000000000000002"],
        "{steps:?}"
    );
    // Forgotten once written: the agent span arriving late writes itself
    // only (the trace's steps are where they are: the log is append-only).
    export(
        &server,
        &server.admin,
        vec![span(AGENT_SPAN, "", "invoke_agent", Some("conv-2"), 0)],
    );
    assert_eq!(
        spans_of(&steps_of(&server, "conv-2").unwrap()),
        [AGENT_SPAN]
    );
    assert_eq!(steps_of(&server, TRACE).unwrap(), steps);
}

#[test]
fn held_spans_wait_for_a_span_of_the_same_key() {
    let server = start(ServerConfig::default());
    let other = key_for(&server, "acme", Role::Writer, None);
    export(&server, &other, children());
    // Another key's agent span settles its own spans, not these.
    export(
        &server,
        &server.admin,
        vec![span(AGENT_SPAN, "", "invoke_agent", Some("conv-3"), 0)],
    );
    assert_eq!(
        spans_of(&steps_of(&server, "conv-3").unwrap()),
        [AGENT_SPAN]
    );
    // The held spans' key's next span of the trace settles them: its root
    // span, naming nothing, into the session named after the trace (the
    // session the other key opened, where the trace's steps are, is not
    // this key's to choose).
    export(
        &server,
        &other,
        vec![span("1000000000000004", "", "chat", None, 4)],
    );
    assert_eq!(
        spans_of(&steps_of(&server, "conv-3").unwrap()),
        [AGENT_SPAN]
    );
    assert_eq!(
        spans_of(&steps_of(&server, TRACE).unwrap()),
        ["1000000000000001", "1000000000000002", "1000000000000004"]
    );
    // The same key's later span of the trace, naming nothing, joins the
    // session of the trace's latest step, which this key opened.
    export(
        &server,
        &other,
        vec![span("1000000000000007", AGENT_SPAN, "chat", None, 7)],
    );
    assert_eq!(spans_of(&steps_of(&server, TRACE).unwrap()).len(), 4);
}

#[test]
fn holding_off_writes_every_span_at_once() {
    let mut config = ServerConfig::default();
    config.otlp.hold_for = Duration::ZERO;
    let server = start(config);
    export(&server, &server.admin, children());
    assert_eq!(spans_of(&steps_of(&server, TRACE).unwrap()).len(), 2);
}

/// `span` naming agent `agent` (`gen_ai.agent.id`).
fn with_agent(mut span: Value, agent: &str) -> Value {
    span["attributes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "gen_ai.agent.id", "value": {"stringValue": agent}}));
    span
}

/// The server's count of held spans with `outcome` (`/metrics`).
fn held_spans(server: &Server, outcome: &str) -> u64 {
    let metrics = get(server, "/metrics", &server.admin).text();
    let line = format!("cairn_otlp_held_spans_total{{outcome=\"{outcome}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .unwrap_or_else(|| panic!("no {outcome} count: {metrics}"))
        .parse()
        .unwrap()
}

/// Waits until nothing is held (everything held written, then forgotten).
fn until_nothing_is_held(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server
        .store
        .due_held_traces(i64::MAX, 1, 1)
        .unwrap()
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the held spans were never written"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The agents of the steps of `session`, in chain order.
fn agents_of(server: &Server, session: &str) -> Vec<String> {
    get(server, &format!("/v1/sessions/{session}"), &server.admin).json()["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["agent_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Another key's session, even one whose steps carry the trace's ids,
/// never decides where a key's held spans go, nor as which agent they are
/// written: when their wait ends they go into the session named after
/// their trace, as planned (a key bound to alice had had a span naming
/// agent bob written into its session as alice).
#[test]
fn another_keys_session_does_not_take_held_spans() {
    let mut config = ServerConfig::default();
    config.otlp.hold_for = Duration::from_secs(1);
    let server = start(config);
    let mut bob = span("1000000000000005", AGENT_SPAN, "chat", None, 1);
    bob["attributes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "gen_ai.agent.name", "value": {"stringValue": "bob"}}));
    export(&server, &server.admin, vec![bob]);
    let alice = key_for(&server, "acme", Role::Writer, Some("alice"));
    export(
        &server,
        &alice,
        vec![span(
            "1000000000000006",
            AGENT_SPAN,
            "chat",
            Some("alices"),
            2,
        )],
    );
    // Sealed by its key: a session that refuses everything after.
    let sealed = post(&server, "/v1/sessions/alices/seal", &alice, &json!({}));
    assert_eq!(sealed.status, 200, "{}", sealed.text());
    until_nothing_is_held(&server);
    assert_eq!(
        spans_of(&steps_of(&server, "alices").unwrap()),
        ["1000000000000006"]
    );
    assert_eq!(
        spans_of(&steps_of(&server, TRACE).unwrap()),
        ["1000000000000005"]
    );
    assert!(agents_of(&server, TRACE).iter().all(|a| a == "bob"));
}

/// A retry of an export whose spans were held, arriving after they were
/// written and their trace went on into another session, is answered as
/// recorded: each span goes where its steps are.
#[test]
fn a_retry_after_held_spans_were_written_is_recognized() {
    let mut config = ServerConfig::default();
    config.otlp.hold_for = Duration::from_secs(1);
    let server = start(config);
    export(&server, &server.admin, children());
    until_nothing_is_held(&server);
    export(
        &server,
        &server.admin,
        vec![span(AGENT_SPAN, "", "invoke_agent", Some("conv-4"), 0)],
    );
    // `export` asserts nothing was rejected.
    export(&server, &server.admin, children());
    assert_eq!(spans_of(&steps_of(&server, TRACE).unwrap()).len(), 2);
    assert_eq!(
        spans_of(&steps_of(&server, "conv-4").unwrap()),
        [AGENT_SPAN]
    );
    // The flusher's counts are in /metrics.
    assert_eq!(held_spans(&server, "held"), 2);
    assert_eq!(held_spans(&server, "waited"), 2);
}

/// Another key's later step in the trace does not hide the session this
/// key's steps of the trace are in: a key's span naming nothing joins the
/// key's own session at once, not the other key's (whose agent would
/// refuse it when its wait ended, and it would be dropped).
#[test]
fn another_keys_later_step_does_not_hide_this_keys_session() {
    let mut config = ServerConfig::default();
    config.otlp.hold_for = Duration::from_secs(1);
    let server = start(config);
    let other = key_for(&server, "acme", Role::Writer, None);
    export(
        &server,
        &server.admin,
        vec![span(
            "1000000000000008",
            AGENT_SPAN,
            "chat",
            Some("mine"),
            1,
        )],
    );
    // The other key's span of the trace waits, then opens the session
    // named after the trace.
    export(
        &server,
        &other,
        vec![span("1000000000000009", AGENT_SPAN, "chat", None, 2)],
    );
    until_nothing_is_held(&server);
    assert_eq!(
        spans_of(&steps_of(&server, TRACE).unwrap()),
        ["1000000000000009"]
    );
    // This key's next span naming nothing joins its own session, at once.
    export(
        &server,
        &server.admin,
        vec![span("100000000000000a", AGENT_SPAN, "chat", None, 3)],
    );
    assert_eq!(
        spans_of(&steps_of(&server, "mine").unwrap()),
        ["1000000000000008", "100000000000000a"]
    );
}

/// A held span whose id another key's span took while it waited is not
/// taken for written: it is dropped, logged and counted.
#[test]
fn a_held_span_whose_id_was_taken_while_it_waited_is_counted_as_dropped() {
    let server = start(ServerConfig::default());
    let other = key_for(&server, "acme", Role::Writer, None);
    export(&server, &server.admin, children());
    // The same trace and span ids, naming a session, from another key.
    let mut forged = children().remove(0);
    forged["attributes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "gen_ai.conversation.id", "value": {"stringValue": "elsewhere"}}));
    export(&server, &other, vec![forged]);
    export(
        &server,
        &server.admin,
        vec![span(AGENT_SPAN, "", "invoke_agent", Some("conv-5"), 0)],
    );
    assert_eq!(
        spans_of(&steps_of(&server, "conv-5").unwrap()),
        [AGENT_SPAN, "1000000000000002"]
    );
    assert_eq!(held_spans(&server, "held"), 2);
    assert_eq!(held_spans(&server, "settled"), 1);
    assert_eq!(held_spans(&server, "dropped"), 1);
}

/// Two services of one trace, each with its own key without a binding:
/// the second's spans, held, are written when their wait ends into the
/// session the first opened, as that session's agent (as its requests
/// would be), not dropped.
#[test]
fn a_second_services_held_spans_join_the_first_services_session() {
    let mut config = ServerConfig::default();
    config.otlp.hold_for = Duration::from_secs(1);
    let server = start(config);
    let second = key_for(&server, "acme", Role::Writer, None);
    export(
        &server,
        &second,
        vec![with_agent(
            span("100000000000000b", AGENT_SPAN, "chat", None, 1),
            "svcb",
        )],
    );
    export(
        &server,
        &server.admin,
        vec![with_agent(
            span(AGENT_SPAN, "", "invoke_agent", None, 0),
            "svca",
        )],
    );
    until_nothing_is_held(&server);
    assert_eq!(
        spans_of(&steps_of(&server, TRACE).unwrap()),
        [AGENT_SPAN, "100000000000000b"]
    );
    assert!(agents_of(&server, TRACE).iter().all(|a| a == "svca"));
    assert_eq!(held_spans(&server, "dropped"), 0);
}

/// A step recorded under a span's first step id in a session another key
/// opened is another step: the span's other steps do not follow it there.
#[test]
fn a_step_under_a_spans_id_in_another_keys_session_is_not_its_retry() {
    let server = start(ServerConfig::default());
    let alice = key_for(&server, "acme", Role::Writer, Some("alice"));
    // The span's first step id, taken in alice's session.
    let taken = post(
        &server,
        "/v1/steps",
        &alice,
        &json!({"session_id": "alices-own", "agent_id": "alice", "step_type": "observation",
                "content": "first", "trace_id": format!("otel.{TRACE}.100000000000000c.0")}),
    );
    assert_eq!(taken.status, 201, "{}", taken.text());
    // A tool span of two steps with those ids, naming no session, whose
    // trace's root is here.
    let mut tool = span("100000000000000c", AGENT_SPAN, "execute_tool", None, 1);
    tool["attributes"].as_array_mut().unwrap().extend([
        json!({"key": "gen_ai.tool.name", "value": {"stringValue": "lookup"}}),
        json!({"key": "gen_ai.tool.call.arguments", "value": {"stringValue": "{\"q\":1}"}}),
        json!({"key": "gen_ai.tool.call.result", "value": {"stringValue": "private result"}}),
    ]);
    let body = json!({"resourceSpans": [{"scopeSpans": [{"spans": [
        tool, span(AGENT_SPAN, "", "invoke_agent", None, 0)
    ]}]}]});
    let reply = post(&server, "/v1/traces", &server.admin, &body);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["partialSuccess"]["rejectedSpans"], json!("1"));
    let alices = get(&server, "/v1/sessions/alices-own", &server.admin).json();
    assert_eq!(alices["steps"].as_array().unwrap().len(), 1, "{alices}");
}

/// Two services of one trace whose spans both wait and are written in one
/// round of the flusher: whichever opens the trace's session, the other's
/// are written into it as its agent (the flusher had planned both before
/// either session existed, and dropped the second's).
#[test]
fn two_services_held_spans_due_together_share_the_traces_session() {
    let mut config = ServerConfig::default();
    config.otlp.hold_for = Duration::from_secs(1);
    let server = start(config);
    let second = key_for(&server, "acme", Role::Writer, None);
    export(
        &server,
        &server.admin,
        vec![with_agent(
            span("100000000000000d", AGENT_SPAN, "chat", None, 1),
            "svca",
        )],
    );
    export(
        &server,
        &second,
        vec![with_agent(
            span("100000000000000e", "100000000000000d", "chat", None, 2),
            "svcb",
        )],
    );
    until_nothing_is_held(&server);
    let steps = steps_of(&server, TRACE).unwrap();
    let mut spans = spans_of(&steps);
    spans.sort();
    assert_eq!(spans, ["100000000000000d", "100000000000000e"]);
    let agents = agents_of(&server, TRACE);
    assert!(agents.iter().all(|a| *a == agents[0]), "{agents:?}");
    assert_eq!(held_spans(&server, "dropped"), 0);
}
