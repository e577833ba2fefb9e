//! Seed 002's audit trail over HTTP, streamed: the same turns, steps and
//! Markdown that an answer built whole gives (MCP's `get_audit_trail`),
//! whatever the order the steps were recorded and numbered in.

use super::*;

/// What MCP's `get_audit_trail` answers for `args`: the trail, a turn,
/// or `{markdown}`.
fn mcp_trail(server: &Server, admin: &str, args: Value) -> Value {
    let session = mcp_session(server.addr, admin);
    let rpc = mcp_tool(server.addr, admin, &session, "get_audit_trail", args).rpc();
    assert_eq!(rpc["result"]["isError"], false, "{rpc}");
    rpc["result"]["structuredContent"].clone()
}

/// A session whose turns interleave, whose steps are numbered against
/// the order they were recorded in (and some not at all, some outside
/// any turn), with large steps among those numbered backwards, is streamed as its trail in
/// batches: as JSON and Markdown, whole and by turn, equal to the answer
/// built whole, and the Markdown replay is the trail's Markdown.
#[test]
fn a_streamed_trail_is_the_trail_built_whole() {
    let server = start();
    let admin = server.admin.clone();
    let large = "x".repeat(90_000);
    let steps: Vec<Value> = (0..60)
        .map(|i: i64| {
            let mut s = step("tt", "plan", &format!("step {i}"));
            match i % 4 {
                // Numbered backwards: each step goes before the last.
                0 => {
                    s["turn_id"] = json!("b");
                    s["turn_step"] = json!(100 - i);
                }
                // Every other one numbered, the rest after them by index.
                1 => {
                    s["turn_id"] = json!("a");
                    if i % 8 == 1 {
                        s["turn_step"] = json!(60 - i);
                    }
                }
                2 => {}
                _ => s["turn_id"] = json!("c"),
            }
            // Large steps in the turn numbered backwards: its batches,
            // read against the store's order, stop at their bytes.
            if i % 4 == 0 && (20..36).contains(&i) {
                s["input_data"] = json!({ "large": large });
            }
            s
        })
        .collect();
    for batch in steps.chunks(2) {
        let reply = post(&server, "/v1/steps/batch", &admin, &json!(batch));
        assert_eq!(reply.status, 200, "{}", reply.text());
    }

    let trail = get(&server, "/v1/sessions/tt/trail", &admin);
    assert_eq!(trail.status, 200, "{}", trail.text());
    let trail = trail.json();
    assert_eq!(
        trail,
        mcp_trail(&server, &admin, json!({"session_id": "tt"}))
    );
    // Turns by their first step; each turn's steps by number, then index.
    let turns: Vec<(Value, Vec<String>)> = trail["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let contents = t["steps"].as_array().unwrap().iter();
            let contents = contents.map(|s| s["content"].as_str().unwrap().replace("step ", ""));
            (t["turn_id"].clone(), contents.collect())
        })
        .collect();
    let numbers = |from: i64, keep: &dyn Fn(i64) -> bool| -> Vec<String> {
        (from..60)
            .step_by(4)
            .filter(|&i| keep(i))
            .map(|i| i.to_string())
            .collect()
    };
    let mut b = numbers(0, &|_| true);
    b.reverse();
    let mut a = numbers(1, &|i| i % 8 == 1);
    a.reverse();
    a.extend(numbers(1, &|i| i % 8 != 1));
    let expected = vec![
        (json!("b"), b),
        (json!("a"), a),
        (Value::Null, numbers(2, &|_| true)),
        (json!("c"), numbers(3, &|_| true)),
    ];
    assert_eq!(turns, expected);
    assert_eq!(
        trail["turns"][0]["started_at"],
        trail["turns"][0]["steps"][0]["created_at"]
    );

    let markdown = get(&server, "/v1/sessions/tt/trail?format=markdown", &admin);
    assert_eq!(markdown.status, 200);
    let text = markdown.text();
    assert!(text.starts_with("# Session tt\n\n## Turn b ("), "{text}");
    assert!(text.contains("\n## Steps outside any turn ("), "{text}");
    let whole = mcp_trail(
        &server,
        &admin,
        json!({"session_id": "tt", "format": "markdown"}),
    );
    assert_eq!(whole["markdown"], json!(text));
    let replay = get(&server, "/v1/sessions/tt?format=markdown", &admin);
    assert_eq!(replay.status, 200);
    assert_eq!(replay.text(), text);
    let detailed = get(
        &server,
        "/v1/sessions/tt?format=markdown&level=detailed",
        &admin,
    );
    // `detailed` hides contents, not turns: the same turns and order.
    let hidden = (0..60).fold(text.clone(), |shown, i| {
        shown.replace(&format!("] step {i}\n"), "] (hidden)\n")
    });
    assert_eq!(detailed.text(), hidden);
    // At `generic` turn ids are hidden (numbers are not): the steps make
    // one section of steps outside any turn, ordered by number, then
    // index, whole.
    let generic = get(
        &server,
        "/v1/sessions/tt?format=markdown&level=generic",
        &admin,
    );
    assert_eq!(generic.status, 200);
    let generic = generic.text();
    assert!(
        generic.starts_with("# Session tt\n\n## Steps outside any turn ("),
        "{generic}"
    );
    assert_eq!(generic.matches("## ").count(), 1, "{generic}");
    assert_eq!(
        generic.matches("[計画] (hidden)\n").count(),
        60,
        "{generic}"
    );

    for turn in ["a", "b", "c"] {
        let path = format!("/v1/sessions/tt/turns/{turn}");
        let streamed = get(&server, &path, &admin);
        assert_eq!(streamed.status, 200, "{}", streamed.text());
        let args = json!({"session_id": "tt", "turn_id": turn});
        assert_eq!(streamed.json(), mcp_trail(&server, &admin, args.clone()));
        let streamed = get(&server, &format!("{path}?format=markdown"), &admin);
        let mut args = args;
        args["format"] = json!("markdown");
        assert_eq!(
            json!(streamed.text()),
            mcp_trail(&server, &admin, args)["markdown"]
        );
    }
    let unknown = get(&server, "/v1/sessions/tt/turns/nope", &admin);
    assert_eq!(
        (unknown.status, unknown.code().as_str()),
        (404, "not_found")
    );
    let unknown = get(&server, "/v1/sessions/nope/trail", &admin);
    assert_eq!(
        (unknown.status, unknown.code().as_str()),
        (404, "not_found")
    );

    // A session without steps has a trail without turns.
    let started = post(
        &server,
        "/v1/sessions",
        &admin,
        &json!({"session_id": "empty", "agent_id": "a"}),
    );
    assert_eq!(started.status, 201, "{}", started.text());
    let empty = get(&server, "/v1/sessions/empty/trail", &admin).json();
    assert_eq!(empty, json!({"session_id": "empty", "turns": []}));
    assert_eq!(
        empty,
        mcp_trail(&server, &admin, json!({"session_id": "empty"}))
    );
    let empty = get(&server, "/v1/sessions/empty/trail?format=markdown", &admin);
    assert_eq!(empty.text(), "# Session empty\n");
}
