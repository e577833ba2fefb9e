//! Large sessions in the web UI: payloads shown cut, never rendered
//! whole, and a long session shown a page at a time.

use super::*;

/// Reviews' notes and erasures' reasons are shown within the page's
/// text budget: 100 reviews of 64 KiB notes (6.5 MB) on one step make a
/// page of about the budget (4 MiB), not of every note (a hostile review
/// had 9,000 such notes render a 657 MB page).
#[test]
fn review_notes_are_shown_within_the_page_budget() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    let trace = flagged_step(&server, &admin, step("noted", "a", "decision", "ship it"));
    let note = "n".repeat(65_536);
    for _ in 0..100 {
        escalate(&server, &admin, &trace, &note);
    }
    let reader = sign_in(&server, &key_for(&server, "acme", Role::Reader, None));
    let reply = page(&server, "/ui/sessions/noted", Some(&reader));
    assert_eq!(reply.status, 200);
    let html = text(&reply);
    assert!(html.len() < 4_700_000, "{} bytes", html.len());
    assert!(html.contains("(not shown: this page already shows"));
    assert!(html.contains("escalate by"), "every review is still listed");
}

/// A payload indenting makes many times larger (nested arrays of many
/// small numbers) is shown cut, never rendered whole: the page stays
/// small, says where it cut, and counts every step of the session.
#[test]
fn a_page_of_huge_payloads_is_cut_not_rendered_whole() {
    let server = start(ServerConfig::default());
    let writer = key_for(&server, "acme", Role::Writer, None);
    let start = post(
        &server,
        "/v1/sessions",
        &writer,
        &json!({"session_id": "big", "agent_id": "a"}),
    );
    assert_eq!(start.status, 201, "{}", start.text());
    // 60 arrays deep around 40,000 zeros: about 80 KB as sent, over 5 MB
    // indented (each zero on its own line behind 120 spaces).
    let zeros = vec![0u8; 40_000];
    let mut nested = json!(zeros);
    for _ in 0..60 {
        nested = json!([nested]);
    }
    let steps = 4;
    for _ in 0..steps {
        let mut body = step("big", "a", "tool_call", &"word ".repeat(12_000));
        body["input_data"] = nested.clone();
        body["output_data"] = nested.clone();
        let reply = post(&server, "/v1/steps", &writer, &body);
        assert_eq!(reply.status, 201, "{}", reply.text());
    }
    // An event's detail is limited to 64 KiB as sent.
    let mut rows = json!(vec![0u8; 30_000]);
    for _ in 0..60 {
        rows = json!([rows]);
    }
    let event = post(
        &server,
        "/v1/audit-events",
        &writer,
        &json!({"event_id": "ev-big", "session_id": "big", "action": "dump", "detail": {"rows": rows}}),
    );
    assert_eq!(event.status, 201, "{}", event.text());

    let reader = sign_in(&server, &key_for(&server, "acme", Role::Reader, None));
    let reply = page(&server, "/ui/sessions/big", Some(&reader));
    assert_eq!(reply.status, 200);
    let html = text(&reply);
    // 4 steps' input and output and one event's detail, each at most 64
    // KiB shown (escaped, so a little more), plus 4 contents of 60 KB.
    assert!(html.len() < 1_500_000, "{} bytes", html.len());
    assert_eq!(
        html.matches("cut here: the rest is not shown").count(),
        2 * steps + 1,
        "every payload says where it was cut"
    );
    assert!(html.contains("<dt>Steps</dt><dd>4</dd>"), "the real count");
    assert!(html.contains("Verified"));
    // What an open session's page polls: its count and seal, without its
    // steps (the page, which verifies, is fetched only when they change);
    // another org's reader finds no such session.
    let polled = page(&server, "/ui/sessions/big/state", Some(&reader));
    assert_eq!(polled.status, 200);
    assert_eq!(polled.header("cache-control"), Some("no-store"));
    assert_eq!(polled.json(), json!({"step_count": 4, "sealed": false}));
    let stranger = sign_in(&server, &key_for(&server, "globex", Role::Reader, None));
    let hidden = page(&server, "/ui/sessions/big/state", Some(&stranger));
    assert_eq!((hidden.status, hidden.code().as_str()), (404, "not_found"));
    // The step's own page of JSON (the API) still holds it whole.
    let whole = get(&server, "/v1/sessions/big", &writer);
    assert_eq!(whole.status, 200);
    assert_eq!(whole.json()["steps"][0]["input_data"], nested);
}

/// A session longer than a page is shown a page of 2,000 steps at a time
/// (`?from=N`): each page links to the pages around it, the closing
/// reflection is named on the page that holds it, and links to a step
/// from elsewhere (a record id, a search hit, a review) land on the page
/// that shows it. A start that is not a number is an HTML error page.
#[test]
fn a_long_session_is_shown_a_page_at_a_time() {
    let server = start(ServerConfig::default());
    let writer = key_for(&server, "acme", Role::Writer, None);
    let total = 2_003;
    for first in (0..total).step_by(500) {
        let steps: Vec<Value> = (first..(first + 500).min(total))
            .map(|i| {
                let kind = if i == total - 1 { "reflection" } else { "plan" };
                let mut s = step("long", "a", kind, &format!("step {i}"));
                s["trace_id"] = json!(format!("long-{i}"));
                s
            })
            .collect();
        let reply = post(&server, "/v1/steps/batch", &writer, &json!(steps));
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let reader = sign_in(&server, &key_for(&server, "acme", Role::Reader, None));
    let first = text(&page(&server, "/ui/sessions/long", Some(&reader)));
    assert!(first.contains("id=\"step-0\"") && first.contains("id=\"step-1999\""));
    assert!(!first.contains("id=\"step-2000\""));
    assert!(first.contains("Steps #0 to #1999 of 2003"), "{first}");
    assert!(first.contains("href=\"?from=2000\" rel=\"next\""));
    assert!(!first.contains("rel=\"prev\""));
    assert!(
        !first.contains("Closing reflection"),
        "not this page's last step"
    );
    assert!(first.contains("Verified"));
    let unaligned = text(&page(&server, "/ui/sessions/long?from=1", Some(&reader)));
    assert!(
        unaligned.contains("Steps #0 to #1999 of 2003"),
        "pages start at multiples"
    );
    for path in [
        "/ui/sessions/long?from=2000",
        "/ui/sessions/long?from=2001",
        "/ui/sessions/long?from=99999",
    ] {
        let last = text(&page(&server, path, Some(&reader)));
        assert!(last.contains("id=\"step-2000\"") && last.contains("id=\"step-2002\""));
        assert!(!last.contains("id=\"step-1999\""));
        assert!(last.contains("Steps #2000 to #2002 of 2003"), "{last}");
        assert!(last.contains("href=\"?from=0\" rel=\"prev\""));
        assert!(!last.contains("rel=\"next\""));
        assert!(last.contains("Closing reflection</dt><dd><a href=\"#step-2002\""));
    }
    // A step index that is not a number, and a GET of a decision's
    // address, are pages too (they were JSON).
    // Numbers are decimal digits only, as in the API (`+5` is a second
    // spelling other readers of the URL would not take for 5).
    for path in ["/ui/sessions/long/steps/abc", "/ui/sessions/long/steps/+5"] {
        let bad = page(&server, path, Some(&reader));
        assert_eq!(bad.status, 400, "{path}");
        assert!(bad.header("content-type").unwrap().starts_with("text/html"));
        assert!(text(&bad).contains("a step index is a number"), "{path}");
    }
    let decision = page(&server, "/ui/reviews/long-5", Some(&reader));
    assert_eq!(decision.status, 303);
    assert_eq!(decision.header("location"), Some("/ui/reviews"));
    for path in [
        "/ui/sessions/long?from=two",
        "/ui/sessions/long?from=%2B2000",
    ] {
        let bad = page(&server, path, Some(&reader));
        assert_eq!(bad.status, 400, "{path}");
        assert!(
            bad.header("content-type").unwrap().starts_with("text/html"),
            "a page, not JSON"
        );
        assert!(text(&bad).contains("the index of the first step to show"));
    }
    // A record id resolves to the page showing the step.
    let found = page(&server, "/ui/records/long-2001", Some(&reader));
    assert_eq!(found.status, 303);
    assert_eq!(
        found.header("location"),
        Some("/ui/sessions/long?from=2000#step-2001")
    );
    let found = page(&server, "/ui/records/long-5", Some(&reader));
    assert_eq!(found.header("location"), Some("/ui/sessions/long#step-5"));
    // A step's row deleted by the database's holder: the pages still
    // cover the indices in order (each "later" link moves forward) and
    // the verdict links to the page of the first failing step.
    let conn = rusqlite::Connection::open(server.dir().join("ledger.db")).unwrap();
    conn.execute_batch(
        "DROP TRIGGER entries_no_delete;
         DELETE FROM entries WHERE trace_id = 'long-1999';",
    )
    .unwrap();
    let mut from = 0u64;
    let mut pages = 0;
    loop {
        let html = text(&page(
            &server,
            &format!("/ui/sessions/long?from={from}"),
            Some(&reader),
        ));
        assert!(html.contains("Tampered"), "{html}");
        assert!(
            html.contains("Show the step</a>"),
            "the failing step is linked"
        );
        pages += 1;
        match html
            .split("href=\"?from=")
            .nth(1)
            .filter(|_| html.contains("rel=\"next\""))
        {
            Some(_) => {
                let next = html
                    .split("rel=\"next\"")
                    .next()
                    .and_then(|before| before.rsplit("?from=").next())
                    .and_then(|n| n.split('"').next())
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap();
                assert!(next > from, "{next} after {from}");
                from = next;
            }
            None => break,
        }
        assert!(pages < 5, "the pages loop");
    }
    assert_eq!(pages, 2);
}
