//! The session listing over a real socket, as the API (`GET /v1/sessions`)
//! and the web UI (`/ui/sessions`) give it: filters by agent, kind,
//! flagged status and time range, keyset pages followed through the
//! `Link` header (API) and the "Older sessions" link (UI) until the end,
//! malformed filters refused with their field, and another org's sessions
//! never listed.

#![allow(clippy::unwrap_used)]

mod common;
use common::*;

fn link_next(reply: &Raw) -> Option<String> {
    let link = reply.header("link")?;
    assert!(link.ends_with("; rel=\"next\""), "{link}");
    Some(
        link.trim_start_matches('<')
            .split('>')
            .next()
            .unwrap()
            .to_owned(),
    )
}

fn api(server: &Server, path: &str, token: &str) -> Raw {
    raw(
        server.addr,
        &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}"),
        b"",
    )
}

/// Every session id of a listing, following `Link: rel="next"`.
fn follow(server: &Server, first: &str, token: &str) -> (Vec<String>, usize) {
    let mut ids = Vec::new();
    let mut pages = 0;
    let mut next = Some(first.to_owned());
    while let Some(path) = next {
        let reply = api(server, &path, token);
        assert_eq!(
            reply.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&reply.body)
        );
        pages += 1;
        for row in reply.json().as_array().unwrap() {
            ids.push(row["session_id"].as_str().unwrap().to_owned());
        }
        next = link_next(&reply);
        assert!(pages < 100, "pages never end");
    }
    (ids, pages)
}

#[test]
fn the_api_filters_and_pages_sessions() {
    let server = start(ServerConfig::default());
    let writer = key_for(&server, "acme", Role::Writer, None);
    let reader = key_for(&server, "acme", Role::Reader, None);
    for n in 0..12 {
        let session = format!("s{n:02}");
        let agent = if n % 3 == 0 { "planner" } else { "analyst" };
        let mut first = step(&session, agent, "Observation", "looks");
        if n == 4 {
            first["status"] = json!("flagged");
        }
        assert_eq!(post(&server, "/v1/steps", &writer, &first).status, 201);
        if n == 2 || n == 9 {
            let call = step(&session, agent, "ToolCall", "search");
            assert_eq!(post(&server, "/v1/steps", &writer, &call).status, 201);
        }
    }
    let rival = key_for(&server, "rival", Role::Writer, None);
    let theirs = step("t1", "analyst", "ToolCall", "elsewhere");
    assert_eq!(post(&server, "/v1/steps", &rival, &theirs).status, 201);

    let everything = api(&server, "/v1/sessions?limit=1000", &reader);
    assert_eq!(everything.status, 200);
    assert_eq!(
        everything.header("link"),
        None,
        "a page that is not full is the last"
    );
    let all: Vec<Value> = everything.json().as_array().unwrap().clone();
    assert_eq!(all.len(), 12);
    let all_ids: Vec<String> = all
        .iter()
        .map(|r| r["session_id"].as_str().unwrap().to_owned())
        .collect();
    for row in &all {
        assert!(
            row["started_at"].is_string() && row["cursor"].is_string(),
            "{row}"
        );
    }

    let (paged, pages) = follow(&server, "/v1/sessions?limit=5", &reader);
    assert_eq!((paged.clone(), pages), (all_ids.clone(), 3));
    let (planner, _) = follow(&server, "/v1/sessions?agent_id=planner&limit=2", &reader);
    assert_eq!(planner, vec!["s09", "s06", "s03", "s00"]);
    let (tools, _) = follow(&server, "/v1/sessions?kind=tool_call&limit=1", &reader);
    assert_eq!(tools, vec!["s09", "s02"], "rival's t1 is not listed");
    let (tools_as_written, _) = follow(&server, "/v1/sessions?kind=ToolCall", &reader);
    assert_eq!(tools_as_written, tools, "a kind's labels are one kind");
    let (both, _) = follow(
        &server,
        "/v1/sessions?kind=tool_call&agent_id=analyst",
        &reader,
    );
    assert_eq!(both, vec!["s02"]);
    let (flagged, _) = follow(&server, "/v1/sessions?flagged=true", &reader);
    assert_eq!(flagged, vec!["s04"]);

    // A time range: since is inclusive, until exclusive; a date is a day.
    let pivot = all[5]["started_at"].as_str().unwrap().to_owned();
    let (newer, _) = follow(
        &server,
        &format!("/v1/sessions?since={pivot}&limit=4"),
        &reader,
    );
    let (older, _) = follow(
        &server,
        &format!("/v1/sessions?until={pivot}&limit=4"),
        &reader,
    );
    assert_eq!(newer.len(), 6);
    assert_eq!([newer, older].concat(), all_ids);
    let today = &pivot[..10];
    let (day, _) = follow(
        &server,
        &format!("/v1/sessions?since={today}&until={today}"),
        &reader,
    );
    let started_that_day: Vec<String> = all
        .iter()
        .filter(|r| r["started_at"].as_str().unwrap().starts_with(today))
        .map(|r| r["session_id"].as_str().unwrap().to_owned())
        .collect();
    assert!(!started_that_day.is_empty());
    assert_eq!(
        day, started_that_day,
        "a date as until includes that whole day"
    );

    // A cursor from a row continues after it.
    let cursor = all[7]["cursor"].as_str().unwrap();
    let encoded: String = percent_encode(cursor);
    let rest = api(
        &server,
        &format!("/v1/sessions?cursor={encoded}&limit=1000"),
        &reader,
    );
    let rest: Vec<String> = rest
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["session_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(rest, all_ids[8..].to_vec());

    // Malformed filters are refused with their field, never read as none.
    for (query, field) in [
        ("kind=thinking_hard", "kind"),
        ("cursor=yesterday", "cursor"),
        ("cursor=12.", "cursor"),
        ("since=last%20week", "since"),
        ("until=2026-13-45", "until"),
        ("flagged=maybe", ""),
        ("agent_id=", ""),
        ("page=2", "page"),
    ] {
        let reply = api(&server, &format!("/v1/sessions?{query}"), &reader);
        assert_eq!(reply.status, 400, "{query}");
        let error = &reply.json()["error"];
        if !field.is_empty() {
            assert_eq!(error["field"], field, "{query}: {error}");
        }
        assert!(!error["message"].as_str().unwrap().is_empty());
    }

    // The other org sees only its own.
    let rival_reader = key_for(&server, "rival", Role::Reader, None);
    let (theirs, _) = follow(&server, "/v1/sessions?flagged=false", &rival_reader);
    assert_eq!(theirs, vec!["t1"]);
}
