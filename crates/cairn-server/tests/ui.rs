//! The web UI over a real socket: `/` leads to the sign-in page; an API
//! key signs in once and leaves only an HttpOnly, SameSite=Strict session
//! cookie; pages list sessions with their verdicts and show a session's
//! timeline; a tampered store turns the verdict red at the right step;
//! forms refuse cross-site posts and stale CSRF tokens; revoking the key
//! signs its sessions out; orgs stay apart. (Browser tests drive the same
//! pages in Chromium: tests/ui, with Playwright.)

#![allow(clippy::unwrap_used)]

mod common;
use common::*;

fn form(server: &Server, path: &str, body: &str, extra: &str) -> Raw {
    raw(
        server.addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-www-form-urlencoded{extra}"
        ),
        body.as_bytes(),
    )
}

fn page(server: &Server, path: &str, cookie: Option<&str>) -> Raw {
    let cookie = cookie
        .map(|c| format!("\r\nCookie: {c}"))
        .unwrap_or_default();
    raw(
        server.addr,
        &format!("GET {path} HTTP/1.1\r\nHost: localhost{cookie}"),
        b"",
    )
}

/// Signs in with `token`; returns the cookie pair (`cairn_ui=...`).
fn sign_in(server: &Server, token: &str) -> String {
    let reply = form(
        server,
        "/ui/sign-in",
        &format!("api_key={token}"),
        "\r\nOrigin: http://localhost",
    );
    assert_eq!(
        reply.status,
        303,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.header("location"), Some("/ui/sessions"));
    let cookie = reply.header("set-cookie").unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(!cookie.contains(token), "the key never reaches the browser");
    cookie.split(';').next().unwrap().to_owned()
}

fn text(reply: &Raw) -> String {
    String::from_utf8_lossy(&reply.body).into_owned()
}

fn csrf_of(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").unwrap() + "name=\"csrf\" value=\"".len();
    html[at..].split('"').next().unwrap().to_owned()
}

#[test]
fn a_browser_signs_in_sees_sessions_and_verdicts_and_signs_out() {
    let server = start(ServerConfig::default());
    let writer = key_for(&server, "acme", Role::Writer, None);
    for (kind, content) in [
        ("observation", "User asked for <b>Q4</b> revenue"),
        ("decision", "Use the finance API"),
        ("final_answer", "Revenue grew 12%"),
    ] {
        let reply = post(
            &server,
            "/v1/steps",
            &writer,
            &step("s1", "analyst", kind, content),
        );
        assert_eq!(reply.status, 201, "{}", reply.text());
    }

    // Not signed in: / and every page lead to the sign-in page.
    let home = page(&server, "/", None);
    assert_eq!(
        (home.status, home.header("location")),
        (303, Some("/ui/sign-in"))
    );
    assert_eq!(page(&server, "/ui/sessions", None).status, 303);
    let sign_in_page = page(&server, "/ui/sign-in", None);
    assert_eq!(sign_in_page.status, 200);
    assert!(
        sign_in_page
            .header("content-security-policy")
            .unwrap()
            .contains("default-src 'none'")
    );
    assert!(text(&sign_in_page).contains("type=\"password\""));

    // A wrong key is refused with the page again; a cross-site post is
    // refused outright.
    let wrong = form(&server, "/ui/sign-in", "api_key=cairn_nope_nope", "");
    assert_eq!(wrong.status, 401);
    assert!(text(&wrong).contains("unknown, revoked or expired"));
    let reader = key_for(&server, "acme", Role::Reader, None);
    let cross = form(
        &server,
        "/ui/sign-in",
        &format!("api_key={reader}"),
        "\r\nOrigin: http://evil.example\r\nSec-Fetch-Site: cross-site",
    );
    assert_eq!(cross.status, 403);
    // A form is read like any body: an encoded one, another media type and
    // a form that is not this one are refused in the API's error shape.
    for (body, extra, status, code) in [
        (
            format!("api_key={reader}"),
            "\r\nContent-Encoding: gzip",
            415,
            "unsupported_media_type",
        ),
        (String::new(), "", 400, "invalid_request"),
        ("other=1".to_owned(), "", 400, "invalid_request"),
    ] {
        let refused = form(&server, "/ui/sign-in", &body, extra);
        let error: Value = serde_json::from_slice(&refused.body)
            .unwrap_or_else(|_| panic!("{extra}: {}", text(&refused)));
        assert_eq!(
            (refused.status, error["error"]["code"].as_str()),
            (status, Some(code)),
            "{body} {extra}: {error}"
        );
    }
    let plain = raw(
        server.addr,
        "POST /ui/sign-in HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain",
        b"api_key=x",
    );
    assert_eq!(plain.status, 415, "{}", text(&plain));

    // Signed in: the list, with the verdict; content is escaped.
    let cookie = sign_in(&server, &reader);
    let list = page(&server, "/ui/sessions", Some(&cookie));
    assert_eq!(list.status, 200);
    assert_eq!(list.header("cache-control"), Some("no-store"));
    let html = text(&list);
    assert!(
        html.contains("s1") && html.contains("analyst") && html.contains("verified"),
        "{html}"
    );
    let session = page(&server, "/ui/sessions/s1", Some(&cookie));
    let html = text(&session);
    assert!(html.contains("Verified"), "{html}");
    assert!(
        html.contains("&#60;b&#62;Q4&#60;/b&#62;") && !html.contains("<b>Q4</b>"),
        "{html}"
    );
    assert!(
        html.contains("final_answer") || html.contains("Final"),
        "{html}"
    );
    assert_eq!(
        page(&server, "/ui/sessions/nope", Some(&cookie)).status,
        404
    );
    assert_eq!(
        page(&server, "/ui/sessions?agent_id=a%20b", Some(&cookie)).status,
        400
    );

    // A step's proof page carries what the browser checks: the signed
    // checkpoint, the proof and the log's key.
    let proof = page(&server, "/ui/sessions/s1/steps/1", Some(&cookie));
    assert_eq!(proof.status, 200);
    assert!(
        proof
            .header("content-security-policy")
            .unwrap()
            .contains("script-src 'self'")
    );
    let html = text(&proof);
    for needle in [
        "data-checkpoint=",
        "data-proof=",
        "data-keys=\"cairn.local+",
        "/ui/assets/proof-page.js",
        "seq 2",
    ] {
        assert!(html.contains(needle), "{needle}: {html}");
    }
    assert_eq!(
        page(&server, "/ui/sessions/s1/steps/9", Some(&cookie)).status,
        404
    );
    assert_eq!(
        page(&server, "/ui/assets/proof-page.js", None).header("content-type"),
        Some("text/javascript")
    );

    // The bundle page runs the published verifier in the browser: its
    // page allows this server's scripts, and the modules are served.
    let verify = page(&server, "/ui/verify", Some(&cookie));
    assert_eq!(verify.status, 200);
    assert!(
        verify
            .header("content-security-policy")
            .unwrap()
            .contains("script-src 'self'")
    );
    assert!(text(&verify).contains("/ui/assets/verify-page.js"));
    let script = page(&server, "/ui/assets/verify-page.js", None);
    assert_eq!(script.header("content-type"), Some("text/javascript"));
    assert!(text(&script).contains("verifyBundleStream"));
    let module = page(&server, "/ui/assets/verifier/verify.js", None);
    assert_eq!(module.status, 200);
    assert!(text(&module).contains("export async function verifyBundleStream"));
    assert_eq!(
        page(&server, "/ui/assets/verifier/client.js", None).status,
        404
    );
    assert_eq!(
        page(&server, "/ui/assets/verifier/..%2Fmod.rs", None).status,
        404
    );

    // Another org's session is not found through this org's UI.
    let other = key_for(&server, "globex", Role::Writer, None);
    post(
        &server,
        "/v1/steps",
        &other,
        &step("g1", "bot", "observation", "secret"),
    );
    assert_eq!(page(&server, "/ui/sessions/g1", Some(&cookie)).status, 404);
    assert!(!text(&page(&server, "/ui/sessions", Some(&cookie))).contains("g1"));

    // Sign-out needs the session's CSRF token.
    let csrf = csrf_of(&html);
    let forged = form(
        &server,
        "/ui/sign-out",
        "csrf=0000",
        &format!("\r\nCookie: {cookie}"),
    );
    assert_eq!(forged.status, 403);
    let out = form(
        &server,
        "/ui/sign-out",
        &format!("csrf={csrf}"),
        &format!("\r\nCookie: {cookie}"),
    );
    assert_eq!(
        (out.status, out.header("location")),
        (303, Some("/ui/sign-in"))
    );
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(page(&server, "/ui/sessions", Some(&cookie)).status, 303);
}

#[test]
fn a_tampered_step_turns_the_verdict_red_at_that_step_and_a_revoked_key_signs_out() {
    let server = start(ServerConfig::default());
    let admin = server.admin.clone();
    for i in 0..3 {
        let reply = post(
            &server,
            "/v1/steps",
            &admin,
            &step("s1", "analyst", "observation", &format!("step {i}")),
        );
        assert_eq!(reply.status, 201);
    }
    let auditor = key_for(&server, "acme", Role::Auditor, None);
    let cookie = sign_in(&server, &auditor);
    assert!(text(&page(&server, "/ui/sessions/s1", Some(&cookie))).contains("Verified"));
    let log = text(&page(&server, "/ui/log?verify=true", Some(&cookie)));
    assert!(
        log.contains("Verified") && log.contains("Checkpoints"),
        "{log}"
    );
    // An insider edits step 1's content in the database (dropping the
    // trigger that forbids it).
    insider_edits_content(&server, "step 1", "edited");
    let html = text(&page(&server, "/ui/sessions/s1", Some(&cookie)));
    assert!(html.contains("Tampered"), "{html}");
    assert!(html.contains("digest-mismatch"), "{html}");
    let failing = html.find("id=\"step-1\"").unwrap();
    let li_start = html[..failing].rfind("<li").unwrap();
    assert!(
        html[li_start..failing].contains("failing"),
        "step 1 is highlighted"
    );
    let step0 = html.find("id=\"step-0\"").unwrap();
    let li0 = html[..step0].rfind("<li").unwrap();
    assert!(!html[li0..step0].contains("failing"), "step 0 is not");
    let list = text(&page(&server, "/ui/sessions", Some(&cookie)));
    assert!(list.contains("tampered"), "{list}");
    let log = text(&page(&server, "/ui/log?verify=true", Some(&cookie)));
    assert!(
        log.contains("Tampered") && log.contains("digest-mismatch"),
        "{log}"
    );
    assert!(
        log.contains("seq 2"),
        "the org log fails at step 1's entry: {log}"
    );
    // Revoking the key ends its UI sessions at once.
    let id = auditor.split('_').nth(1).unwrap();
    let revoked = call(&server, "DELETE", &format!("/v1/keys/{id}"), &admin, None);
    assert_eq!(revoked.status, 204, "{}", revoked.text());
    let after = page(&server, "/ui/sessions", Some(&cookie));
    assert_eq!(
        (after.status, after.header("location")),
        (303, Some("/ui/sign-in"))
    );
}

#[test]
fn an_auditor_approves_a_flagged_step_and_a_reader_may_not() {
    let server = start(ServerConfig::default());
    let writer = key_for(&server, "acme", Role::Writer, None);
    let mut flagged = step("s1", "analyst", "decision", "Wire $2M to the new vendor");
    flagged["status"] = json!("flagged");
    flagged["trace_id"] = json!("t-flagged");
    let reply = post(&server, "/v1/steps", &writer, &flagged);
    assert_eq!(reply.status, 201, "{}", reply.text());

    let mut correction = step(
        "s1",
        "analyst",
        "correction",
        "The vendor is not approved yet",
    );
    correction["links"] = json!({"corrects": "t-flagged"});
    correction["turn_id"] = json!("turn-7");
    correction["turn_step"] = json!(2);
    let reply = post(&server, "/v1/steps", &writer, &correction);
    assert_eq!(reply.status, 201, "{}", reply.text());

    let reader = sign_in(&server, &key_for(&server, "acme", Role::Reader, None));
    // The timeline threads the correction to the step it corrects.
    let timeline = text(&page(&server, "/ui/sessions/s1", Some(&reader)));
    for needle in [
        "corrects: <a href=\"#step-0\">#0</a>",
        "corrected by <a href=\"#step-1\">#1</a>",
        "flagged for review",
        "turn turn-7 · phase 2",
    ] {
        assert!(timeline.contains(needle), "{needle}: {timeline}");
    }
    let queue = text(&page(&server, "/ui/reviews", Some(&reader)));
    assert!(
        queue.contains("Wire $2M") && queue.contains("pending"),
        "{queue}"
    );
    assert!(
        queue.contains("may not review") && !queue.contains("value=\"approve\""),
        "{queue}"
    );
    let csrf = csrf_of(&queue);
    let refused = form(
        &server,
        "/ui/reviews/t-flagged",
        &format!("csrf={csrf}&decision=approve"),
        &format!("\r\nCookie: {reader}"),
    );
    assert_eq!(refused.status, 403, "{}", text(&refused));

    let auditor = sign_in(&server, &key_for(&server, "acme", Role::Auditor, None));
    let queue = text(&page(&server, "/ui/reviews", Some(&auditor)));
    assert!(queue.contains("value=\"approve\""), "{queue}");
    let csrf = csrf_of(&queue);
    let stale = form(
        &server,
        "/ui/reviews/t-flagged",
        "csrf=stale&decision=approve",
        &format!("\r\nCookie: {auditor}"),
    );
    assert_eq!(stale.status, 403);
    let done = form(
        &server,
        "/ui/reviews/t-flagged",
        &format!("csrf={csrf}&decision=approve&note=checked+the+contract"),
        &format!("\r\nCookie: {auditor}"),
    );
    // Post/redirect/get: a reload shows the queue, it does not decide again.
    assert_eq!(done.status, 303, "{}", text(&done));
    let location = done.header("location").unwrap().to_owned();
    assert!(
        location.starts_with("/ui/reviews?recorded=") && location.ends_with("&decision=approve"),
        "{location}"
    );
    let html = text(&page(&server, &location, Some(&auditor)));
    assert!(html.contains("approve: recorded at seq"), "{html}");
    assert!(html.contains("Nothing to review"), "{html}");
    // The decision is a review record in the log, through the API too.
    let all = get(&server, "/v1/reviews?all=true", &server.admin);
    assert_eq!(
        all.json()["items"][0]["state"],
        "approved",
        "{}",
        all.text()
    );
}

#[test]
fn the_sessions_page_filters_and_pages_like_the_api() {
    let server = start(ServerConfig::default());
    let writer = key_for(&server, "acme", Role::Writer, None);
    for n in 0..53 {
        let session = format!("s{n:02}");
        let mut first = step(&session, "analyst", "observation", "looks");
        if n == 10 {
            first["status"] = json!("flagged");
        }
        assert_eq!(post(&server, "/v1/steps", &writer, &first).status, 201);
    }
    let call = step("s20", "analyst", "ToolCall", "search");
    assert_eq!(post(&server, "/v1/steps", &writer, &call).status, 201);
    let cookie = sign_in(&server, &key_for(&server, "acme", Role::Reader, None));

    // 50 a page: the first page links to the rest, which is the last.
    let first = text(&page(&server, "/ui/sessions", Some(&cookie)));
    assert!(first.contains(">s52<") && !first.contains(">s02<"));
    let at = first.find("href=\"/ui/sessions?cursor=").unwrap() + "href=\"".len();
    let next = first[at..].split('"').next().unwrap().replace("&amp;", "&");
    let second = page(&server, &next, Some(&cookie));
    assert_eq!(second.status, 200);
    let second = text(&second);
    for id in ["s02", "s01", "s00"] {
        assert!(
            second.contains(&format!(">{id}<")),
            "{id} on the second page"
        );
    }
    assert!(!second.contains(">s03<") && !second.contains("rel=\"next\""));
    assert!(second.contains("href=\"/ui/sessions\">Newest"));

    // Filters: a kind as written, flagged, a day; empty fields are no filter.
    let tools = text(&page(
        &server,
        "/ui/sessions?agent_id=&kind=ToolCall&since=&until=",
        Some(&cookie),
    ));
    assert!(tools.contains(">s20<") && !tools.contains(">s21<"));
    let flagged = text(&page(&server, "/ui/sessions?flagged=true", Some(&cookie)));
    assert!(flagged.contains(">s10<") && !flagged.contains(">s11<"));
    assert!(flagged.contains("name=\"flagged\" type=\"checkbox\" value=\"true\" checked"));
    let refused = page(
        &server,
        "/ui/sessions?kind=daydream&since=soon",
        Some(&cookie),
    );
    assert_eq!(refused.status, 400);
    let refused = text(&refused);
    assert!(refused.contains("role=\"alert\"") && refused.contains("not a step kind"));
}

#[test]
fn a_timeline_pairs_tool_calls_links_records_and_exports_at_a_level() {
    let server = start(ServerConfig::default());
    let writer = key_for(&server, "acme", Role::Writer, None);
    let start = post(
        &server,
        "/v1/sessions",
        &writer,
        &json!({"session_id": "s1", "agent_id": "analyst"}),
    );
    assert_eq!(start.status, 201, "{}", start.text());
    let event = post(
        &server,
        "/v1/audit-events",
        &writer,
        &json!({"event_id": "ev-7", "session_id": "s1", "action": "sql_query", "detail": {"rows": 3}}),
    );
    assert_eq!(event.status, 201, "{}", event.text());
    let mut call = step("s1", "analyst", "ToolCall", "SELECT sum(total) FROM orders");
    call["trace_id"] = json!("t-call");
    call["links"] = json!({"audit_event": "ev-7"});
    let mut result = step("s1", "analyst", "ToolResult", "12.4M");
    result["links"] = json!({"tool_call": "t-call"});
    // A tool call id carried by both steps pairs them too.
    let mut call2 = step("s1", "analyst", "tool_call", "fetch fx rates");
    call2["links"] = json!({"tool_call": "call_42"});
    let mut result2 = step("s1", "analyst", "tool_result", "EUR 1.08");
    result2["links"] = json!({"tool_call": "call_42", "policy_decision": "t-elsewhere"});
    // A call that failed is answered by its error.
    let mut call3 = step("s1", "analyst", "tool_call", "fetch the ledger");
    call3["links"] = json!({"tool_call": "call_9"});
    let mut failed = step("s1", "analyst", "error", "timed out");
    failed["links"] = json!({"tool_call": "call_9"});
    let mut reflection = step("s1", "analyst", "reflection", "The query was enough.");
    reflection["output_data"] = json!({"lessons": ["check fx first"]});
    let mut elsewhere = step("s2", "analyst", "decision", "approve the budget");
    elsewhere["trace_id"] = json!("t-elsewhere");
    for body in [
        &call,
        &result,
        &call2,
        &result2,
        &call3,
        &failed,
        &reflection,
        &elsewhere,
    ] {
        let reply = post(&server, "/v1/steps", &writer, body);
        assert_eq!(reply.status, 201, "{}", reply.text());
    }
    let seal = post(&server, "/v1/sessions/s1/seal", &writer, &json!({}));
    assert_eq!(seal.status, 200, "{}", seal.text());

    let reader = sign_in(&server, &key_for(&server, "acme", Role::Reader, None));
    let timeline = text(&page(&server, "/ui/sessions/s1", Some(&reader)));
    for needle in [
        "result: <a href=\"#step-1\">#1</a>",
        "result: <a href=\"#step-3\">#3</a>",
        "error: <a href=\"#step-5\">#5</a>",
        "tool_call: <a href=\"#step-0\">#0</a>",
        "audit_event: <a href=\"#event-ev-7\">ev-7</a>",
        "policy_decision: <a href=\"/ui/records/t-elsewhere\">t-elsewhere</a>",
        "id=\"event-ev-7\"",
        "sql_query",
        "Closing reflection</dt><dd><a href=\"#step-6\">#6</a>",
        "Merkle root",
        "&#34;lessons&#34;",
        "href=\"/ui/sessions/s1/markdown\"",
    ] {
        assert!(timeline.contains(needle), "{needle} in {timeline}");
    }
    assert!(!timeline.contains("Export…"), "a reader cannot export");

    // A link's id leads to the step elsewhere, or to the audit event.
    let elsewhere = page(&server, "/ui/records/t-elsewhere", Some(&reader));
    assert_eq!(
        (elsewhere.status, elsewhere.header("location")),
        (303, Some("/ui/sessions/s2#step-0"))
    );
    let event_page = page(&server, "/ui/records/ev-7", Some(&reader));
    assert_eq!(event_page.status, 200);
    assert!(text(&event_page).contains("&#34;rows&#34;: 3"));
    let missing = page(&server, "/ui/records/nothing-here", Some(&reader));
    assert_eq!(missing.status, 404);
    assert!(
        text(&missing).contains("role=\"alert\""),
        "an HTML page, not JSON"
    );

    // Seed 002's Markdown view.
    let markdown = text(&page(&server, "/ui/sessions/s1/markdown", Some(&reader)));
    assert!(markdown.contains("# Session s1") && markdown.contains("SELECT sum(total)"));

    // Search: the API's search, linked to steps.
    // (Decisions are always embedded; tool steps are sampled.)
    let found = text(&page(&server, "/ui/search?q=approve+budget", Some(&reader)));
    assert!(found.contains("href=\"/ui/sessions/s2#step-0\""), "{found}");
    assert!(
        found.contains("<mark>approve</mark>") && found.contains("<mark>budget</mark>"),
        "{found}"
    );
    let words_only = text(&page(
        &server,
        "/ui/search?q=%22fx+rates%22&mode=fulltext",
        Some(&reader),
    ));
    assert!(
        words_only.contains("href=\"/ui/sessions/s1#step-2\""),
        "every step is in the full-text index: {words_only}"
    );
    let refused = page(&server, "/ui/search?q=-only", Some(&reader));
    assert_eq!(refused.status, 400);
    assert!(text(&refused).contains("only excludes"));

    // Export: refused for a reader, a download at a level for an auditor
    // (a full-level export of a session without consent is refused).
    let refused = page(
        &server,
        "/ui/export/bundle?session=s1&level=detailed",
        Some(&reader),
    );
    assert_eq!(refused.status, 403);
    let auditor = sign_in(&server, &key_for(&server, "acme", Role::Auditor, None));
    assert!(text(&page(&server, "/ui/sessions/s1", Some(&auditor))).contains("Export…"));
    let bundle = page(
        &server,
        "/ui/export/bundle?session=s1&agent=&level=generic",
        Some(&auditor),
    );
    assert_eq!(bundle.status, 200, "{}", text(&bundle));
    assert_eq!(
        bundle.header("content-disposition"),
        Some("attachment; filename=\"cairn-s1-generic.jsonl\"")
    );
    let lines = text(&bundle);
    assert!(
        lines.lines().count() > 6 && !lines.contains("SELECT sum(total)"),
        "generic hides content"
    );
    let no_consent = page(
        &server,
        "/ui/export/bundle?session=s1&level=full",
        Some(&auditor),
    );
    assert_eq!(no_consent.status, 403);
    assert!(text(&no_consent).contains("consent"));
    let both = page(
        &server,
        "/ui/export/bundle?session=s1&all=true",
        Some(&auditor),
    );
    assert_eq!(both.status, 400);
}

/// What the router answers for a web UI address before any page runs (an
/// address with no page, a method the page lacks) is a page a browser
/// shows, in the API's codes; the API's own addresses keep the JSON
/// shape.
#[test]
fn refusals_at_ui_addresses_are_pages() {
    let server = start(ServerConfig::default());
    let missing = page(&server, "/ui/no-such-page", None);
    assert_eq!(missing.status, 404);
    assert!(
        missing
            .header("content-type")
            .unwrap()
            .starts_with("text/html"),
        "{:?}",
        missing.header("content-type")
    );
    let html = text(&missing);
    assert!(
        html.contains("there is no page at this address")
            && html.contains("<code>not_found</code>"),
        "{html}"
    );
    assert!(
        !html.contains("Sign out"),
        "no signed-in navigation: {html}"
    );
    let wrong_method = raw(
        server.addr,
        "PUT /ui/sessions HTTP/1.1\r\nHost: localhost",
        b"",
    );
    assert_eq!(wrong_method.status, 405);
    assert!(
        wrong_method
            .header("content-type")
            .unwrap()
            .starts_with("text/html")
    );
    assert!(wrong_method.header("allow").unwrap().contains("GET"));
    assert!(text(&wrong_method).contains("method_not_allowed"));
    let api = raw(
        server.addr,
        "GET /v1/no-such-route HTTP/1.1\r\nHost: localhost",
        b"",
    );
    assert_eq!(api.status, 404);
    let error: Value = serde_json::from_slice(&api.body).unwrap();
    assert_eq!(error["error"]["code"], "not_found");
}

#[path = "ui/large_pages.rs"]
mod large_pages;

/// A step's metadata is on its card (folded), and a step from an
/// OpenTelemetry span says which span: its name, kind, start and end,
/// status, trace and span ids (the step's own time is when Cairn
/// recorded it, not the span's).
#[test]
fn a_steps_metadata_and_its_span_are_shown() {
    let server = start(ServerConfig::default());
    let writer = key_for(&server, "acme", Role::Writer, None);
    let mut noted = step("plain", "analyst", "observation", "a note");
    noted["metadata"] = json!({"ticket": "OPS-1234"});
    let reply = post(&server, "/v1/steps", &writer, &noted);
    assert_eq!(reply.status, 201, "{}", reply.text());
    let span = json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "chat gpt-4o",
        "kind": 3,
        "startTimeUnixNano": "1764900000000000000",
        "endTimeUnixNano": "1764900001500000000",
        "status": {"code": 2, "message": "rate limited"},
        "attributes": [
            {"key": "gen_ai.conversation.id", "value": {"stringValue": "conv-1"}},
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.agent.name", "value": {"stringValue": "Billing"}}
        ]
    }]}]}]});
    let reply = post(&server, "/v1/traces", &writer, &span);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let reader = sign_in(&server, &key_for(&server, "acme", Role::Reader, None));
    let plain = text(&page(&server, "/ui/sessions/plain", Some(&reader)));
    assert!(plain.contains("<summary>Metadata</summary>"), "{plain}");
    assert!(plain.contains("OPS-1234"), "{plain}");
    assert!(!plain.contains("span (metadata.otel)"), "{plain}");
    let traced = text(&page(&server, "/ui/sessions/conv-1", Some(&reader)));
    for needle in [
        "span (metadata.otel) chat gpt-4o (client) · agent Billing",
        "2025-12-05T02:00:00.000000Z → 2025-12-05T02:00:01.500000Z",
        "status error",
        "trace 5b8efff798038103d269b633813fc60c · span eee19b7ec3c1b174",
    ] {
        assert!(traced.contains(needle), "{needle}: {traced}");
    }
}
