//! Answers that stream or stop at their limit: a long session's replay
//! streamed in order within a bounded buffer, whole answers refused past
//! their size, and a bundle verification's bounded keys.

use super::common::*;

/// A session replay as JSON streams however long the session (in
/// batches, in order, counted), while answers built whole refuse past
/// their limit with `answer_too_large` and say what streams instead.
#[test]
fn long_sessions_stream_and_whole_answers_stop_at_their_limit() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    // 70 steps of 250 KB of input each: 17.5 MB, past the 16 MiB a held
    // answer may hold.
    let big = "x".repeat(250_000);
    for batch in 0..(70 / 5) {
        let steps: Vec<Value> = (0..5)
            .map(|i| {
                let mut s = step("long", "a", "tool_call", &format!("call {}", batch * 5 + i));
                s["input_data"] = json!({ "blob": big });
                s["turn_id"] = json!(format!("turn-{}", (batch * 5 + i) / 10));
                s
            })
            .collect();
        let reply = post(&server, "/v1/steps/batch", &admin, &json!(steps));
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let replay = get(&server, "/v1/sessions/long?verify=true", &admin);
    assert_eq!(replay.status, 200);
    let body = replay.json();
    assert_eq!(body["step_count"], 70);
    assert_eq!(body["chain_valid"], true, "{}", body["verdict"]);
    let steps = body["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 70);
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s["step_index"], i, "in order across batches");
        assert_eq!(
            s["input_data"]["blob"].as_str().map(str::len),
            Some(250_000)
        );
    }
    // Its audit trail streams too (17.5 MB of JSON, past what an answer
    // built whole may hold), its turns in order; its Markdown as well.
    let trail = get(&server, "/v1/sessions/long/trail", &admin);
    assert_eq!(trail.status, 200, "{}", trail.text());
    let trail = trail.json();
    let turns = trail["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 7);
    for (t, turn) in turns.iter().enumerate() {
        assert_eq!(turn["turn_id"], format!("turn-{t}"));
        let steps = turn["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 10);
        for (i, s) in steps.iter().enumerate() {
            assert_eq!(s["content"], format!("call {}", t * 10 + i));
            assert_eq!(
                s["input_data"]["blob"].as_str().map(str::len),
                Some(250_000)
            );
        }
    }
    let markdown = get(&server, "/v1/sessions/long/trail?format=markdown", &admin);
    assert_eq!(markdown.status, 200, "{}", markdown.text());
    assert_eq!(markdown.text().matches("\n## Turn turn-").count(), 7);
    // One turn of it is small, and answered.
    let turn = get(&server, "/v1/sessions/long/turns/turn-0", &admin);
    assert_eq!(turn.status, 200, "{}", turn.text());

    // A search's hits stop before the one that would take its steps past
    // 16 MiB (each step counted as its content, its JSON values or what
    // they take parsed where that is more, and 256 bytes: a little over
    // 250,400 bytes here, so 66 fit), and the answer says so.
    let found = get(&server, "/v1/search?q=call&mode=fulltext&limit=100", &admin);
    assert_eq!(found.status, 200, "{}", found.text());
    let body = found.json();
    assert_eq!(body["results"].as_array().unwrap().len(), 66);
    assert_eq!(body["truncated"], true);
    // Steps are counted as they are held, parsed: ten steps of 130,000
    // zeros (260 KB of JSON each, 2.6 MB together) take tens of times
    // that parsed, and only the first few are given.
    for half in 0..2 {
        let zeros: Vec<Value> = (0..5)
            .map(|i| {
                let mut s = step("zeros", "a", "tool_call", &format!("numbers {half} {i}"));
                s["input_data"] = json!({ "xs": vec![0; 130_000] });
                s
            })
            .collect();
        let reply = post(&server, "/v1/steps/batch", &admin, &json!(zeros));
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let body = get(
        &server,
        "/v1/search?q=numbers&mode=fulltext&limit=10",
        &admin,
    )
    .json();
    let given = body["results"].as_array().unwrap().len();
    assert!((1..10).contains(&given), "{given} of 10");
    assert_eq!(body["truncated"], true);
    let few = get(&server, "/v1/search?q=call&mode=fulltext&limit=10", &admin).json();
    assert_eq!(few["results"].as_array().unwrap().len(), 10);
    assert_eq!(few["truncated"], false);
    // Over MCP the hits fit one message (about 256 KiB of steps' JSON):
    // a step past 64 KiB is given shortened (its payloads left out), so
    // the same 66 hits fit, and the answer still says more matched.
    let session = mcp_session(server.addr, &admin);
    let search = |args: Value| tool_answer(&server, &admin, &session, "search_reasoning", args);
    let answer = search(json!({"query": "call", "mode": "fulltext", "limit": 100}));
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), 66);
    assert_eq!(answer["truncated"], true);
    assert!(
        results
            .iter()
            .all(|r| r["shortened"] == true && r.get("input_data").is_none())
    );
    // Steps of 60 KB are given whole, as many as fit the message.
    let medium = "m".repeat(60_000);
    let steps: Vec<Value> = (0..10)
        .map(|i| {
            let mut s = step("medium", "a", "tool_call", &format!("medium {i}"));
            s["input_data"] = json!({ "blob": medium });
            s
        })
        .collect();
    let reply = post(&server, "/v1/steps/batch", &admin, &json!(steps));
    assert_eq!(reply.status, 200, "{}", reply.text());
    let answer = search(json!({"query": "medium", "mode": "fulltext", "limit": 10}));
    let results = answer["results"].as_array().unwrap();
    assert_eq!(
        results.len(),
        7,
        "seven of about 61 KB (123 KB of the message each) fit"
    );
    assert_eq!(answer["truncated"], true);
    assert!(results.iter().all(|r| r.get("shortened").is_none()));

    // The review queue alike: three flagged steps of 250 KB each (the
    // first 500 KB) fit REST's answer, and MCP's answer gives the first,
    // shortened to fit its message, and says more wait.
    let flagged: Vec<Value> = (0..3)
        .map(|i| {
            let mut s = step("risky", "a", "decision", &format!("risky {i}"));
            s["status"] = json!("flagged");
            s["input_data"] = json!({ "blob": big });
            if i == 0 {
                s["content"] = json!("risky and enormous");
                s["output_data"] = json!({ "blob": big });
            }
            s
        })
        .collect();
    let reply = post(&server, "/v1/steps/batch", &admin, &json!(flagged));
    assert_eq!(reply.status, 200, "{}", reply.text());
    let queue = get(&server, "/v1/reviews", &admin).json();
    assert_eq!(queue["items"].as_array().unwrap().len(), 3, "{queue}");
    assert_eq!(queue["truncated"], false);
    assert_eq!(queue["items"][0]["review_count"], 0);
    assert!(queue["items"][0]["step"].get("shortened").is_none());
    let answer = &tool_answer(&server, &admin, &session, "review_queue", json!({}));
    assert_eq!(answer["items"].as_array().unwrap().len(), 3, "none hidden");
    assert_eq!(answer["truncated"], false);
    let first = &answer["items"][0]["step"];
    assert_eq!(first["shortened"], true);
    assert_eq!(first["content"], "risky and enormous");
    assert!(first.get("input_data").is_none() && first.get("output_data").is_none());
    // A search whose first hit alone passes the message is answered with
    // that hit shortened, not refused.
    let answer = &tool_answer(
        &server,
        &admin,
        &session,
        "search_reasoning",
        json!({"query": "enormous", "mode": "fulltext"}),
    );
    assert_eq!(answer["results"][0]["shortened"], true, "{answer}");
    assert_eq!(answer["results"][0]["trace_id"], first["trace_id"]);

    // An audit trail over MCP holds at most what its message carries: a
    // turn of ten 250 KB steps (JSON written twice: over 960 KiB) is
    // refused once its steps pass half the message, and says what to ask
    // for instead; its Markdown, contents only, and a turn of one such
    // step are answered.
    let trail = |args: Value| {
        mcp_tool(server.addr, &admin, &session, "get_audit_trail", args).rpc()["result"].clone()
    };
    for args in [
        json!({"session_id": "long", "turn_id": "turn-0"}),
        json!({"session_id": "long"}),
    ] {
        let refused = trail(args.clone());
        assert_eq!(refused["isError"], true, "{args}");
        let error = &refused["structuredContent"]["error"];
        assert_eq!(error["code"], "answer_too_large", "{args}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("over 960 KiB of its MCP message") && message.contains("turn_id"),
            "{message}"
        );
        let markdown =
            trail(json!({"session_id": "long", "turn_id": "turn-0", "format": "markdown"}));
        assert_eq!(markdown["isError"], false, "{args}");
    }
    let mut one = step("lone", "a", "tool_call", "one large call");
    one["input_data"] = json!({ "blob": big });
    one["turn_id"] = json!("only");
    assert_eq!(post(&server, "/v1/steps", &admin, &one).status, 201);
    let answer = tool_answer(
        &server,
        &admin,
        &session,
        "get_audit_trail",
        json!({"session_id": "lone", "turn_id": "only"}),
    );
    assert_eq!(answer["turn_id"], "only", "{answer}");
    assert_eq!(
        answer["steps"][0]["input_data"]["blob"]
            .as_str()
            .map(str::len),
        Some(250_000)
    );
    // The same answer as REST's, but for the embedding flag, which the
    // background embedder may set between the two reads.
    let mut rest = get(&server, "/v1/sessions/lone/turns/only", &admin).json();
    let mut answer = answer;
    for trail in [&mut rest, &mut answer] {
        for step in trail["steps"].as_array_mut().into_iter().flatten() {
            step.as_object_mut()
                .map(|step| step.remove("has_embedding"));
        }
    }
    assert_eq!(rest, answer);
}

/// A trail's plan is reserved in the replay buffer as it is read (each
/// distinct turn id twice and 96 bytes, 40 bytes a step): one that alone
/// would pass an org's share is refused at once with `answer_too_large`
/// (not left to wait for room it could never have), while the same
/// session's replay, which holds 8 bytes a step, streams.
#[test]
fn a_trail_whose_plan_passes_the_buffer_is_refused_at_once() {
    let limits = Limits {
        // The smallest buffer: an org's half is 16 MiB, 8 MiB of it kept
        // for the batches.
        replay_buffer_bytes: 1024,
        expensive_wait: Duration::from_secs(20),
        ..Limits::default()
    };
    let server = start(config(limits));
    let admin = server.admin.clone();
    // 36,000 steps, each in a turn of its own with a 200-character id:
    // about 19 MB of plan, more than the share even without the room.
    let pad = "t".repeat(190);
    for batch in 0..(36_000 / 600) {
        let steps: Vec<Value> = (0..600)
            .map(|i| {
                let mut s = step("turns", "a", "plan", "p");
                s["turn_id"] = json!(format!("{pad}{:010}", batch * 600 + i));
                s
            })
            .collect();
        let reply = post(&server, "/v1/steps/batch", &admin, &json!(steps));
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let started = std::time::Instant::now();
    let refused = get(&server, "/v1/sessions/turns/trail", &admin);
    let shown: String = refused.text().chars().take(300).collect();
    assert_eq!(refused.status, 422, "{shown}");
    assert_eq!(refused.code(), "answer_too_large");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused at once, not after waiting for room"
    );
    let replay = get(&server, "/v1/sessions/turns", &admin);
    assert_eq!(replay.status, 200);
    assert_eq!(replay.json()["step_count"], 36_000);
}

/// A bundle verification pins at most 64 log keys, counted before any is
/// decoded (each is a curve point to decompress), as witnesses are.
#[test]
fn a_bundle_verification_pins_a_bounded_number_of_keys() {
    let server = start(ServerConfig::default());
    let crowd = format!("/v1/bundles/verify?{}", vec!["key=x"; 65].join("&"));
    let refused = call(&server, "POST", &crowd, &server.admin, Some(b"{}\n"));
    assert_eq!(refused.status, 400, "{}", refused.text());
    let body = refused.json();
    assert_eq!(body["error"]["code"], "invalid_argument");
    assert_eq!(body["error"]["field"], "key");
}

/// Streamed replays share one buffer: a client that stops reading a long
/// replay of large steps keeps what its replay reserved (its positions
/// and a few batches), so one org's slow readers cannot add up past its
/// share; the next replay waits, then gets 503 `overloaded`, and is
/// served in full once the slow clients have gone. (A buffer set below
/// its 32 MiB floor is raised to it.)
#[test]
fn streamed_replays_share_a_bounded_buffer() {
    let limits = Limits {
        // The smallest buffer: an org's half, 16 MiB, holds about sixteen
        // slow readers of large steps.
        replay_buffer_bytes: 1024,
        expensive_wait: Duration::from_millis(300),
        ..Limits::default()
    };
    let server = start(config(limits));
    let admin = server.admin.clone();
    // 120 steps of 250 KB of input each: 30 MB, more than loopback's
    // socket buffers take, so a client that does not read holds the
    // server's batches.
    let big = "x".repeat(250_000);
    for batch in 0..(120 / 5) {
        let steps: Vec<Value> = (0..5)
            .map(|i| {
                let mut s = step("wide", "a", "tool_call", &format!("call {}", batch * 5 + i));
                s["input_data"] = json!({ "blob": big });
                s
            })
            .collect();
        let reply = post(&server, "/v1/steps/batch", &admin, &json!(steps));
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let slow: Vec<TcpStream> = (0..32)
        .map(|_| {
            let mut slow = TcpStream::connect(server.addr).unwrap();
            write!(
                slow,
                "GET /v1/sessions/wide HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\n\r\n"
            )
            .unwrap();
            slow
        })
        .collect();
    // Once the slow replays fill what they may hold (its batches queued to
    // a socket nobody reads), the next one waits and is refused; until
    // then a replay may still be served whole.
    // (A replay that starts is left after its status line: one that
    // started and then found the buffer full is cut short.)
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let refused = loop {
        let mut probe = TcpStream::connect(server.addr).unwrap();
        probe
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        write!(
            probe,
            "GET /v1/sessions/wide HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut head = [0u8; 12];
        probe.read_exact(&mut head).unwrap();
        if !head.starts_with(b"HTTP/1.1 200") {
            let mut rest = Vec::new();
            let _ = probe.read_to_end(&mut rest);
            break parse_response(&[&head[..], &rest].concat());
        }
        assert!(std::time::Instant::now() < deadline, "never refused");
        drop(probe);
        std::thread::sleep(Duration::from_millis(200));
    };
    let error: Value = serde_json::from_slice(&refused.body).unwrap();
    assert_eq!(
        (refused.status, error["error"]["code"].as_str()),
        (503, Some("overloaded")),
        "{error}"
    );
    assert!(
        error["error"]["message"]
            .as_str()
            // The buffer, or the org's read turns held by batches waiting
            // for it.
            .is_some_and(|m| m.contains("replay buffer") || m.contains("replay batches")),
        "{error}"
    );
    assert_eq!(refused.header("retry-after"), Some("1"));
    // Answers that hold nothing of the buffer are still served.
    assert_eq!(get(&server, "/v1/sessions?limit=5", &admin).status, 200);
    drop(slow);
    // The slow clients' replays end as their writes fail.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let replay = loop {
        let replay = get(&server, "/v1/sessions/wide", &admin);
        if replay.status == 200 || std::time::Instant::now() > deadline {
            break replay;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(replay.status, 200, "{}", replay.text());
    let body = replay.json();
    assert_eq!(body["step_count"], 120);
    assert_eq!(body["steps"].as_array().map(Vec::len), Some(120));
}

/// A replay's batch writes steps until it holds about 256 KiB, whatever
/// the batch before it suggested: after many small steps come large ones,
/// and every step is still sent once, in order.
#[test]
fn a_replay_of_steps_growing_in_size_sends_each_once_in_order() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let big = "y".repeat(200_000);
    let steps: Vec<Value> = (0..40)
        .map(|i| {
            let mut s = step("growing", "a", "tool_call", &format!("call {i}"));
            if i >= 20 {
                s["input_data"] = json!({ "blob": big });
            }
            s
        })
        .collect();
    for chunk in steps.chunks(5) {
        let reply = post(&server, "/v1/steps/batch", &admin, &json!(chunk));
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let replay = get(&server, "/v1/sessions/growing", &admin);
    assert_eq!(replay.status, 200);
    let body = replay.json();
    assert_eq!(body["step_count"], 40);
    let sent = body["steps"].as_array().unwrap();
    assert_eq!(sent.len(), 40);
    for (i, s) in sent.iter().enumerate() {
        assert_eq!(s["step_index"], i, "in order");
        assert_eq!(s["content"], format!("call {i}"));
        assert_eq!(
            s["input_data"]["blob"].as_str().map(str::len),
            (i >= 20).then_some(200_000)
        );
    }
}

/// An MCP review queue is fitted by what each item takes of the message
/// as sent (its JSON, then escaped again): a step of quotes just under
/// the size that shortens it, with a review whose note is control
/// characters (13 bytes each in the message), is answered, not refused
/// (a review found it made the tool fail, hiding the whole queue).
#[test]
fn an_mcp_review_queue_counts_what_escaping_adds() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let quoted = step("quoted", "a", "decision", &"\"".repeat(31_900));
    let trace = flagged_step(&server, &admin, quoted);
    escalate(&server, &admin, &trace, &"\u{1}".repeat(65_536));
    flagged_step(&server, &admin, step("plain", "a", "decision", "later"));
    let session = mcp_session(server.addr, &admin);
    let answer = &tool_answer(&server, &admin, &session, "review_queue", json!({}));
    let items = answer["items"].as_array().unwrap();
    assert_eq!(
        items[0]["step"]["shortened"], true,
        "quotes take 6 bytes each"
    );
    assert_eq!(
        items[0]["reviews"][0]["note"].as_str().map(str::len),
        Some(65_536)
    );
    // The plain item still fits beside them.
    assert_eq!(
        (items.len(), answer["truncated"].as_bool()),
        (2, Some(false))
    );
}

/// A queue item whose step is just under the size that shortens it, beside
/// a latest review of 64 KiB of control characters (852 KB of the message
/// alone), is given with its step shortened, not refused (a review found
/// it made `review_queue` fail and hid every item after it).
#[test]
fn an_mcp_queue_item_is_fitted_whole() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let mut flagged = step("q2", "a", "reasoning", &"a".repeat(65_536));
    flagged["metadata"] = json!({"k": "b".repeat(24_500)});
    let trace = flagged_step(&server, &admin, flagged);
    escalate(&server, &admin, &trace, &"\u{1}".repeat(65_536));
    let session = mcp_session(server.addr, &admin);
    let answer = &tool_answer(&server, &admin, &session, "review_queue", json!({}));
    let item = &answer["items"][0];
    assert_eq!(item["step"]["shortened"], true);
    assert_eq!(item["step"]["content"].as_str().map(str::len), Some(4096));
    assert_eq!(
        item["reviews"][0]["note"].as_str().map(str::len),
        Some(65_536)
    );
}

/// MCP tool `tool`'s structured answer, which must not be an error (the
/// error's start is shown otherwise).
fn tool_answer(server: &Server, token: &str, session: &str, tool: &str, args: Value) -> Value {
    let rpc = mcp_tool(server.addr, token, session, tool, args).rpc();
    let shown: String = rpc.to_string().chars().take(300).collect();
    assert_eq!(rpc["result"]["isError"], false, "{shown}");
    rpc["result"]["structuredContent"].clone()
}
