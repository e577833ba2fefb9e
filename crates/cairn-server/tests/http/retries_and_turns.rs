//! Writes retried after a lost answer, and the turn endpoint's numbers,
//! agent and model, over the HTTP API.

use super::*;

/// A write retried after its answer was lost is answered as the first one
/// was, when the step names its trace id and every field is the same:
/// alone and in a batch (MCP's `log_reasoning_step` takes no trace id); a
/// different step under a taken trace id is still `duplicate_trace_id`.
/// Nothing is recorded twice.
#[test]
fn a_retried_step_is_answered_as_its_first_write() {
    let server = start();
    let admin = server.admin.clone();
    let mut first = step("r1", "plan", "retry me");
    first["trace_id"] = json!("retry-1");
    first["input_data"] = json!({"k": [1, 2.5, "x"]});
    let once = post(&server, "/v1/steps", &admin, &first);
    assert_eq!(once.status, 201, "{}", once.text());
    let again = post(&server, "/v1/steps", &admin, &first);
    assert_eq!(again.status, 201, "{}", again.text());
    assert_eq!(again.json()["seq"], once.json()["seq"]);
    assert_eq!(again.json()["current_hash"], once.json()["current_hash"]);
    let mut changed = first.clone();
    changed["content"] = json!("another step");
    let taken = post(&server, "/v1/steps", &admin, &changed);
    assert_eq!(
        (taken.status, taken.code().as_str()),
        (409, "duplicate_trace_id")
    );
    // A batch sent twice (more steps than one read of recorded steps
    // takes, so that the retry reads them in several).
    let batch: Vec<Value> = (0..150)
        .map(|i| {
            let mut s = step("r2", "plan", &format!("batched {i}"));
            s["trace_id"] = json!(format!("retry-batch-{i}"));
            s
        })
        .collect();
    let sent = post(&server, "/v1/steps/batch", &admin, &json!(batch)).json();
    let resent = post(&server, "/v1/steps/batch", &admin, &json!(batch)).json();
    assert_eq!(
        (&sent["accepted"], &sent["refused"]),
        (&json!(150), &json!(0))
    );
    // The same answers (but `session_created`, which only the first
    // write knows).
    let mut expected = sent["results"].clone();
    expected[0]["session_created"] = json!(false);
    assert_eq!(expected, resent["results"], "{resent}");
    assert_eq!(resent["refused"], 0);
    // A step changed under its trace id is a duplicate, in any chunk.
    let mut changed = batch.clone();
    changed[130]["content"] = json!("something else");
    let answer = post(&server, "/v1/steps/batch", &admin, &json!(changed)).json();
    assert_eq!(
        (&answer["accepted"], &answer["refused"]),
        (&json!(149), &json!(1)),
        "{answer}"
    );
    assert_eq!(
        answer["results"][130]["error"]["code"], "duplicate_trace_id",
        "{answer}"
    );
    // Each step is recorded once.
    let steps = |session: &str| {
        get(&server, &format!("/v1/sessions/{session}"), &admin).json()["steps"]
            .as_array()
            .unwrap()
            .len()
    };
    // A step repeated within one batch is its duplicate.
    let mut twice = step("r4", "plan", "twice");
    twice["trace_id"] = json!("retry-twice");
    let answer = post(&server, "/v1/steps/batch", &admin, &json!([twice, twice])).json();
    assert_eq!(
        (&answer["accepted"], &answer["refused"]),
        (&json!(1), &json!(1)),
        "{answer}"
    );
    assert_eq!(
        answer["results"][1]["error"]["code"], "duplicate_trace_id",
        "{answer}"
    );
    // A batch whose first copy of a step was refused and whose second was
    // recorded is answered the same when sent again.
    let mut bad = step("r5", "plan", "flip");
    bad["trace_id"] = json!("retry-flip");
    bad["created_at"] = json!("2001-01-01T00:00:00Z");
    let mut good = bad.clone();
    good.as_object_mut().unwrap().remove("created_at");
    let flip = json!([bad, good]);
    for _ in 0..2 {
        let answer = post(&server, "/v1/steps/batch", &admin, &flip).json();
        assert_eq!(
            (&answer["accepted"], &answer["refused"]),
            (&json!(1), &json!(1)),
            "{answer}"
        );
        assert_eq!(answer["results"][1]["trace_id"], "retry-flip", "{answer}");
    }
    assert_eq!(
        (steps("r1"), steps("r2"), steps("r4"), steps("r5")),
        (1, 150, 1, 1)
    );
}

/// An audit event sent again under the id it chose is answered as it was
/// recorded when it records the same (its detail compared in canonical
/// form: `1.0` is `1`), over REST and MCP; another event under that id,
/// or a step's trace id, is still `409 duplicate_id`. Nothing is recorded
/// twice.
#[test]
fn a_retried_audit_event_is_answered_as_its_first_write() {
    let server = start();
    let admin = server.admin.clone();
    let first = json!({"event_id": "ev-retry", "action": "lookup", "detail": {"n": 1.0, "q": "x"}});
    let once = post(&server, "/v1/audit-events", &admin, &first);
    assert_eq!(once.status, 201, "{}", once.text());
    let events = || {
        let answer = post(
            &server,
            "/v1/sql",
            &admin,
            &json!({"sql": "SELECT count(*) AS n FROM records WHERE type = 'audit-event'"}),
        );
        assert_eq!(answer.status, 200, "{}", answer.text());
        answer.json()["rows"][0][0].clone()
    };
    let same = json!({"event_id": "ev-retry", "action": "lookup", "detail": {"q": "x", "n": 1}});
    let again = post(&server, "/v1/audit-events", &admin, &same);
    assert_eq!(again.status, 201, "{}", again.text());
    assert_eq!(again.json(), once.json(), "the first write's answer");
    for other in [
        json!({"event_id": "ev-retry", "action": "lookup", "detail": {"n": 2, "q": "x"}}),
        json!({"event_id": "ev-retry", "action": "search", "detail": {"n": 1, "q": "x"}}),
        json!({"event_id": "ev-retry", "action": "lookup"}),
    ] {
        let refused = post(&server, "/v1/audit-events", &admin, &other);
        assert_eq!(refused.status, 409, "{other}: {}", refused.text());
        assert_eq!(refused.json()["error"]["code"], "duplicate_id");
    }
    let mut step = step("ev-s", "plan", "a step");
    step["trace_id"] = json!("taken-by-a-step");
    assert_eq!(post(&server, "/v1/steps", &admin, &step).status, 201);
    let refused = post(
        &server,
        "/v1/audit-events",
        &admin,
        &json!({"event_id": "taken-by-a-step", "action": "lookup"}),
    );
    assert_eq!(refused.status, 409, "{}", refused.text());
    // MCP's record_audit_event answers a retry the same way.
    let session = mcp_session(server.addr, &admin);
    let rpc = mcp_tool(
        server.addr,
        &admin,
        &session,
        "record_audit_event",
        json!({"event_id": "ev-retry", "action": "lookup", "detail": {"n": 1, "q": "x"}}),
    )
    .rpc();
    assert_eq!(rpc["result"]["isError"], false, "{rpc}");
    assert_eq!(
        rpc["result"]["structuredContent"]["seq"],
        once.json()["seq"]
    );
    // The retries recorded nothing.
    assert_eq!(events(), json!(1), "one event recorded");
}

/// A turn whose every step names its trace id, sent again after its
/// answer was lost, is answered as its first write (the numbers that write
/// gave the steps that gave none included); a turn that differs in a step,
/// its turn id or its order, or that has a thinking text (whose phases
/// get new ids), is still `409 duplicate_trace_id`. Nothing is recorded
/// twice.
#[test]
fn a_retried_turn_is_answered_as_its_first_write() {
    let server = start();
    let admin = server.admin.clone();
    // More steps than one read of recorded steps takes, one of them
    // numbered by its writer.
    let steps: Vec<Value> = (0..7)
        .map(|i| {
            let mut s = json!({"step_type": "plan", "content": format!("turn step {i}"), "trace_id": format!("turn-retry-{i}")});
            if i == 2 {
                s["turn_step"] = json!(40);
            }
            s
        })
        .collect();
    let body = json!({"agent_id": "analyst", "turn_id": "t-retry", "steps": steps});
    let once = post(&server, "/v1/sessions/tr/turns", &admin, &body);
    assert_eq!(once.status, 201, "{}", once.text());
    let again = post(&server, "/v1/sessions/tr/turns", &admin, &body);
    assert_eq!(again.status, 201, "{}", again.text());
    // The same answer but `session_created`, which only the first write
    // knows.
    let mut expected = once.json();
    expected["results"][0]["session_created"] = json!(false);
    assert_eq!(again.json(), expected);
    // What differs stays a duplicate.
    let mut changed = body.clone();
    changed["steps"][6]["content"] = json!("another step");
    let mut reordered = body.clone();
    reordered["steps"].as_array_mut().unwrap().swap(0, 1);
    let mut other_turn = body.clone();
    other_turn["turn_id"] = json!("t-other");
    let mut with_thinking = body.clone();
    with_thinking["thinking"] = json!("[思考] a thought");
    for refused in [changed, reordered, other_turn, with_thinking] {
        let answer = post(&server, "/v1/sessions/tr/turns", &admin, &refused);
        assert_eq!(
            (answer.status, answer.code().as_str()),
            (409, "duplicate_trace_id"),
            "{refused}: {}",
            answer.text()
        );
    }
    let replay = get(&server, "/v1/sessions/tr", &admin).json();
    let numbers: Vec<u64> = replay["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["turn_step"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [0, 1, 40, 2, 3, 4, 5], "{replay}");
}

/// Seed 002 over HTTP: requests of one turn sent at once are numbered as
/// they are written, so no two of its steps share a number (the number had
/// been read before the write, and two requests could take the same ones);
/// a turn is read back through the index of turns.
#[test]
fn requests_of_one_turn_at_once_never_share_a_number() {
    let server = start();
    let admin = server.admin.clone();
    let body = json!({
        "agent_id": "analyst",
        "turn_id": "t1",
        "thinking": "[思考] look at the data\n\n[計画] 1. query\n\n[実行] run it",
    });
    let addr = server.addr;
    let senders: Vec<_> = (0..8)
        .map(|_| {
            let (admin, body) = (admin.clone(), body.to_string());
            std::thread::spawn(move || {
                for _ in 0..3 {
                    let head = format!(
                        "POST /v1/sessions/s1/turns HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json"
                    );
                    let reply = raw(addr, &head, body.as_bytes());
                    assert_eq!(reply.status, 201, "{}", String::from_utf8_lossy(&reply.body));
                }
            })
        })
        .collect();
    for sender in senders {
        sender.join().unwrap();
    }
    let replay = get(&server, "/v1/sessions/s1", &admin).json();
    let mut numbers: Vec<u64> = replay["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["turn_step"].as_u64().unwrap())
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (0..72).collect::<Vec<u64>>());
    let turn = get(&server, "/v1/sessions/s1/turns/t1", &admin);
    assert_eq!(turn.status, 200, "{}", turn.text());
    assert_eq!(
        turn.text().matches("look at the data").count(),
        24,
        "{}",
        turn.text()
    );
}

/// A turn request's agent and model are each explicit step's unless the
/// step names its own; a member given as null names none.
#[test]
fn a_turns_agent_and_model_are_its_steps_unless_they_name_their_own() {
    let server = start();
    let admin = server.admin.clone();
    let reply = post(
        &server,
        "/v1/sessions/s1/turns",
        &admin,
        &json!({"agent_id": "analyst", "model": "m-turn", "turn_id": "t", "steps": [
            {"step_type": "plan", "content": "a"},
            {"step_type": "plan", "content": "b", "model": "m-own"},
            {"step_type": "plan", "content": "c", "agent_id": null, "model": null},
        ]}),
    );
    assert_eq!(reply.status, 201, "{}", reply.text());
    let replay = get(&server, "/v1/sessions/s1", &admin).json();
    let models: Vec<(&str, &str)> = replay["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["agent_id"].as_str().unwrap(),
                s["model"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        models,
        [
            ("analyst", "m-turn"),
            ("analyst", "m-own"),
            ("analyst", "m-turn")
        ]
    );
}
