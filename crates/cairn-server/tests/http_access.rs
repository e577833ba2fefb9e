//! Who may read and write what over the HTTP API, on a real loopback
//! socket: keys and roles, agent-bound keys, another org's data
//! indistinguishable from nothing, erasure (admin only, the proof kept),
//! and detail levels with the session's consent. (Moved from `http.rs`.)

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod api;
mod common;
use api::{call, seed_000, start, step};
use common::*;

#[test]
fn keys_and_roles_are_enforced() {
    let server = start();
    let admin = server.admin.clone();
    seed_000(&server, &admin, "s1");
    // Missing, malformed, unknown keys: 401.
    let none = call(&server, "GET", "/v1/sessions", None, None);
    assert_eq!((none.status, none.code().as_str()), (401, "unauthorized"));
    assert_eq!(
        get(&server, "/v1/sessions", "cairn_000000000000_nope").status,
        401
    );
    let mut raw = TcpStream::connect(server.addr).unwrap();
    raw.write_all(b"GET /v1/sessions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Basic abc\r\n\r\n").unwrap();
    let mut text = String::new();
    raw.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");

    // Wrong role: 403.
    let reader = key_for(&server, "acme", Role::Reader, None);
    let writer = key_for(&server, "acme", Role::Writer, None);
    let auditor = key_for(&server, "acme", Role::Auditor, None);
    for (token, method, path) in [
        (&reader, "POST", "/v1/steps"),
        (&reader, "POST", "/v1/sessions/s1/seal"),
        (&reader, "GET", "/v1/export?session=s1"),
        (&writer, "GET", "/v1/export?session=s1"),
        (&writer, "POST", "/v1/keys"),
        (&auditor, "POST", "/v1/steps"),
        (&auditor, "GET", "/v1/keys"),
        (&writer, "POST", "/v1/steps/some-trace/review"),
        (&reader, "POST", "/v1/steps/some-trace/review"),
        (&reader, "POST", "/v1/audit-events"),
        (&reader, "POST", "/v1/sessions/s1/turns"),
        (&auditor, "POST", "/v1/audit-events"),
    ] {
        let body = step("s1", "plan", "x").to_string();
        let reply = call(&server, method, path, Some(token), Some(body.as_bytes()));
        assert_eq!(
            (reply.status, reply.code().as_str()),
            (403, "forbidden"),
            "{method} {path}: {}",
            reply.text()
        );
    }
    // An auditor exports at a level; without one an export shows every
    // field, which needs the session's consent (as level=full), and the
    // whole log is an admin's.
    assert_eq!(
        get(&server, "/v1/export?session=s1&level=detailed", &auditor).status,
        200
    );
    let whole = get(&server, "/v1/export?session=s1", &auditor);
    assert_eq!(
        (whole.status, whole.code().as_str()),
        (403, "consent_required"),
        "{}",
        whole.text()
    );
    let all = get(&server, "/v1/export?all=true", &auditor);
    assert_eq!(
        (all.status, all.code().as_str()),
        (403, "forbidden"),
        "{}",
        all.text()
    );
    assert_eq!(
        get(&server, "/v1/export?session=s1", &server.admin).status,
        200
    );
    // An admin bound to an agent is no admin of the org's own record.
    let bound_admin = key_for(&server, "acme", Role::Admin, Some("analyst"));
    let bound_whole = get(&server, "/v1/export?session=s1", &bound_admin);
    assert_eq!(
        (bound_whole.status, bound_whole.code().as_str()),
        (403, "consent_required"),
        "{}",
        bound_whole.text()
    );
    let bound_all = get(&server, "/v1/export?all=true", &bound_admin);
    assert_eq!(bound_all.status, 403, "{}", bound_all.text());
    assert_eq!(get(&server, "/v1/sessions/s1", &reader).status, 200);

    // A key bound to an agent writes only as that agent.
    let bound = key_for(&server, "acme", Role::Writer, Some("analyst"));
    let as_self = post(
        &server,
        "/v1/steps",
        &bound,
        &json!({"session_id": "s2", "step_type": "plan", "content": "mine"}),
    );
    assert_eq!(as_self.status, 201, "{}", as_self.text());
    let as_other = post(
        &server,
        "/v1/steps",
        &bound,
        &json!({"session_id": "s3", "agent_id": "mallory", "step_type": "plan"}),
    );
    assert_eq!(
        (as_other.status, as_other.code().as_str()),
        (403, "forbidden")
    );
}

#[test]
fn another_orgs_data_is_indistinguishable_from_nothing() {
    let server = start();
    let admin = server.admin.clone();
    let written = seed_000(&server, &admin, "private");
    let turn = post(
        &server,
        "/v1/sessions/private/turns",
        &admin,
        &json!({"agent_id": "analyst", "turn_id": "t-1", "thinking": "[思考] private"}),
    );
    assert_eq!(turn.status, 201, "{}", turn.text());
    let event = post(
        &server,
        "/v1/audit-events",
        &admin,
        &json!({"event_id": "ev-private", "session_id": "private", "action": "sql"}),
    );
    assert_eq!(event.status, 201, "{}", event.text());
    let mut flagged = step("private", "Decision", "secret decision");
    flagged["status"] = json!("flagged");
    let flagged = post(&server, "/v1/steps", &admin, &flagged).json()["trace_id"]
        .as_str()
        .unwrap()
        .to_owned();
    post(&server, "/v1/sessions/private/seal", &admin, &json!({}));
    let trace = written[0]["trace_id"].as_str().unwrap().to_owned();
    let other = key_for(&server, "globex", Role::Admin, None);
    // Every read endpoint: the other org's id gives the same answer as an
    // id that exists nowhere.
    for (theirs, nowhere) in [
        (
            "/v1/sessions/private".to_owned(),
            "/v1/sessions/nowhere".to_owned(),
        ),
        (
            "/v1/sessions/private?format=markdown".to_owned(),
            "/v1/sessions/nowhere?format=markdown".to_owned(),
        ),
        (
            "/v1/sessions/private/verify".to_owned(),
            "/v1/sessions/nowhere/verify".to_owned(),
        ),
        (
            "/v1/sessions/private/root".to_owned(),
            "/v1/sessions/nowhere/root".to_owned(),
        ),
        (format!("/v1/steps/{trace}"), "/v1/steps/nowhere".to_owned()),
        (
            "/v1/export?session=private".to_owned(),
            "/v1/export?session=nowhere".to_owned(),
        ),
        (
            "/v1/proofs/inclusion?seq=1".to_owned(),
            "/v1/proofs/inclusion?seq=1".to_owned(),
        ),
        (
            "/v1/proofs/consistency?old=1".to_owned(),
            "/v1/proofs/consistency?old=1".to_owned(),
        ),
        ("/v1/checkpoint".to_owned(), "/v1/checkpoint".to_owned()),
        (
            "/v1/sessions/private/trail".to_owned(),
            "/v1/sessions/nowhere/trail".to_owned(),
        ),
        (
            "/v1/sessions/private/turns/t-1?format=markdown".to_owned(),
            "/v1/sessions/nowhere/turns/t-1?format=markdown".to_owned(),
        ),
        (
            "/v1/audit-events/ev-private".to_owned(),
            "/v1/audit-events/nowhere".to_owned(),
        ),
    ] {
        let a = get(&server, &theirs, &other);
        let b = get(&server, &nowhere, &other);
        assert_eq!(a.status, 404, "{theirs}: {}", a.text());
        assert_eq!((a.status, a.code()), (b.status, b.code()), "{theirs}");
    }
    // Lists, search and org-wide reads show nothing of acme.
    assert_eq!(get(&server, "/v1/sessions", &other).json(), json!([]));
    assert_eq!(
        get(&server, "/v1/reviews?all=true", &other).json(),
        json!({"items": [], "truncated": false})
    );
    assert_eq!(
        get(&server, "/v1/reviews", &admin).json()["items"][0]["step"]["trace_id"],
        flagged.as_str()
    );
    let review = post(
        &server,
        &format!("/v1/steps/{flagged}/review"),
        &other,
        &json!({"decision": "approve"}),
    );
    assert_eq!((review.status, review.code().as_str()), (404, "not_found"));
    // A decision outside the three, named as the web UI's form names it.
    let unknown = post(
        &server,
        &format!("/v1/steps/{flagged}/review"),
        &admin,
        &json!({"decision": "maybe"}),
    );
    assert_eq!(
        (
            unknown.status,
            unknown.code().as_str(),
            unknown.json()["error"]["field"].as_str()
        ),
        (400, "invalid_argument", Some("decision")),
        "{}",
        unknown.text()
    );
    settle_embeddings(&server);
    for mode in ["fulltext", "semantic", "hybrid"] {
        assert_eq!(
            get(
                &server,
                &format!("/v1/search?q=revenue&mode={mode}"),
                &other
            )
            .json()["results"],
            json!([]),
            "{mode}"
        );
        assert_ne!(
            get(
                &server,
                &format!("/v1/search?q=revenue&mode={mode}"),
                &admin
            )
            .json()["results"],
            json!([]),
            "{mode}"
        );
    }
    assert_eq!(
        get(&server, "/v1/keys", &other)
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let sealing = post(&server, "/v1/sessions/private/seal", &other, &json!({}));
    assert_eq!(sealing.status, 404);
    // Writing under the same session id creates globex's own session.
    let own = post(
        &server,
        "/v1/steps",
        &other,
        &step("private", "plan", "ours"),
    );
    assert_eq!(own.status, 201);
    assert_eq!(
        get(&server, "/v1/sessions/private", &admin).json()["step_count"],
        6,
        "seed 000's four steps, the turn's and the flagged one"
    );
    assert!(
        !get(&server, "/v1/sessions/private", &other)
            .text()
            .contains("Q4 revenue")
    );
    assert_eq!(
        call(&server, "DELETE", "/v1/keys/nope", Some(&other), None).status,
        404
    );
}

#[test]
fn erasure_keeps_the_proof_and_is_admin_only() {
    let server = start();
    let admin = server.admin.clone();
    let written = seed_000(&server, &admin, "s1");
    let trace = written[1]["trace_id"].as_str().unwrap().to_owned();
    let writer = key_for(&server, "acme", Role::Writer, None);
    let path = format!("/v1/steps/{trace}/erase");
    assert_eq!(
        post(&server, &path, &writer, &json!({"reason": "x"})).status,
        403
    );
    assert_eq!(
        post(&server, &path, &admin, &json!({})).code(),
        "missing_field"
    );
    assert_eq!(
        post(&server, &path, &admin, &json!({"reason": ""})).code(),
        "invalid_argument"
    );
    // The reason is recorded in the log: at most the content limit.
    let long = post(
        &server,
        &path,
        &admin,
        &json!({"reason": "x".repeat(65_537)}),
    );
    assert_eq!(
        (long.status, long.code().as_str()),
        (400, "invalid_argument"),
        "{}",
        long.text()
    );
    assert!(
        long.text().contains("at most 65536 bytes"),
        "{}",
        long.text()
    );
    let erased = post(&server, &path, &admin, &json!({"reason": "GDPR request 7"}));
    assert_eq!(erased.status, 200, "{}", erased.text());
    assert_eq!(
        post(&server, &path, &admin, &json!({"reason": "again"})).code(),
        "already_erased"
    );
    assert_eq!(
        post(
            &server,
            "/v1/steps/nope/erase",
            &admin,
            &json!({"reason": "x"})
        )
        .status,
        404
    );
    let replay = get(&server, "/v1/sessions/s1?verify=true", &admin).json();
    assert_eq!(replay["chain_valid"], true);
    assert_eq!(
        (
            replay["steps"][1]["erased"].as_bool(),
            replay["steps"][1]["content"].is_null()
        ),
        (Some(true), true)
    );
    assert_eq!(
        replay["steps"][0]["content"],
        "User asked for Q4 revenue breakdown by segment"
    );
    assert_eq!(get(&server, "/v1/verify", &admin).json()["verified"], true);
    let bundle = get(&server, "/v1/export?session=s1", &admin).text();
    assert!(!bundle.contains("Querying orders table"));
    assert_eq!(
        call(
            &server,
            "POST",
            "/v1/bundles/verify",
            Some(&admin),
            Some(bundle.as_bytes())
        )
        .json()["verified"],
        true
    );
}

/// Seed 004's detail levels: lower levels hide fields and still verify;
/// `full` needs the session's recorded consent and an auditor or admin key.
#[test]
fn detail_levels_and_consent() {
    let server = start();
    let admin = server.admin.clone();
    let reader = key_for(&server, "acme", Role::Reader, None);
    seed_000(&server, &admin, "plain");
    let started = post(
        &server,
        "/v1/sessions",
        &admin,
        &json!({"session_id": "consented", "agent_id": "analyst", "full_consent": true}),
    );
    assert_eq!(started.status, 201, "{}", started.text());
    seed_000(&server, &admin, "consented");
    // A session its first step opened cannot be given consent later: the
    // refusal says why, and what to do.
    let late = post(
        &server,
        "/v1/sessions",
        &admin,
        &json!({"session_id": "plain", "agent_id": "analyst", "full_consent": true}),
    );
    assert_eq!(
        (late.status, late.code().as_str()),
        (409, "session_exists"),
        "{}",
        late.text()
    );
    assert!(
        late.text()
            .contains("full_consent, is fixed in its genesis when it starts"),
        "{}",
        late.text()
    );

    let generic = get(
        &server,
        "/v1/sessions/plain?level=generic&verify=true",
        &admin,
    )
    .json();
    assert_eq!(generic["level"], "generic");
    assert_eq!(generic["chain_valid"], true);
    let step = &generic["steps"][1];
    assert!(step["content"].is_null() && step["input_data"].is_null() && step["trace_id"] == "");
    assert_eq!(step["step_type"], "ToolCall");
    assert!(step["current_hash"].as_str().unwrap().len() == 64);
    let hidden: Vec<&str> = step["hidden_fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        hidden.contains(&"content")
            && hidden.contains(&"model")
            && !hidden.contains(&"agent_id")
            && !hidden.contains(&"confidence")
    );
    let detailed = get(&server, "/v1/sessions/plain?level=detailed", &admin).json();
    assert!(detailed["steps"][1]["content"].is_null());
    assert_eq!(detailed["steps"][1]["agent_id"], "analyst");

    for (path, token, status, code) in [
        (
            "/v1/sessions/plain?level=full",
            &admin,
            403,
            "consent_required",
        ),
        (
            "/v1/sessions/consented?level=full",
            &reader,
            403,
            "forbidden",
        ),
        (
            "/v1/export?session=plain&level=full",
            &admin,
            403,
            "consent_required",
        ),
        (
            "/v1/export?all=true&level=generic",
            &admin,
            400,
            "invalid_request",
        ),
        (
            "/v1/sessions/plain?level=secret",
            &admin,
            400,
            "invalid_argument",
        ),
    ] {
        let reply = get(&server, path, token);
        assert_eq!(
            (reply.status, reply.code().as_str()),
            (status, code),
            "{path}: {}",
            reply.text()
        );
    }
    let full = get(&server, "/v1/sessions/consented?level=full", &admin).json();
    assert_eq!(
        full["steps"][0]["content"],
        "User asked for Q4 revenue breakdown by segment"
    );

    // A generic bundle verifies offline and carries none of the text.
    let bundle = get(&server, "/v1/export?session=plain&level=generic", &admin);
    assert_eq!(bundle.status, 200);
    let text = bundle.text();
    assert!(!text.contains("Enterprise grew"), "content left out");
    let mut verifier =
        cairn_core::bundle::BundleVerifier::new(vec![server.store.server_key().clone()]);
    for line in text.lines() {
        verifier.push_line(line);
    }
    let verdict = verifier.finish();
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
    assert_eq!(
        get(&server, "/v1/export?session=consented&level=full", &admin).status,
        200
    );
}

/// Managing keys does not trap the org: its last admin key of the whole
/// org cannot be revoked through the API (another can be, and then it
/// can); a whole token where a key id belongs is not repeated in the
/// answer; an Authorization header without the Bearer scheme is named.
#[test]
fn key_management_cannot_lock_the_org_out() {
    let server = start();
    let admin = server.admin.clone();
    let listed = get(&server, "/v1/keys", &admin).json();
    let admin_id = listed["keys"]
        .as_array()
        .or_else(|| listed.as_array())
        .and_then(|keys| keys.iter().find(|k| k["role"] == "admin"))
        .and_then(|k| k["id"].as_str())
        .unwrap_or_else(|| panic!("an admin key is listed: {listed}"))
        .to_owned();
    let last = call(
        &server,
        "DELETE",
        &format!("/v1/keys/{admin_id}"),
        Some(&admin),
        None,
    );
    assert_eq!(
        (last.status, last.code().as_str()),
        (409, "refused"),
        "{}",
        last.text()
    );
    assert!(last.text().contains("last admin key"), "{}", last.text());
    // A key bound to an agent is no admin of the whole org.
    let bound = key_for(&server, "acme", Role::Admin, Some("analyst"));
    let still_last = call(
        &server,
        "DELETE",
        &format!("/v1/keys/{admin_id}"),
        Some(&bound),
        None,
    );
    assert_ne!(still_last.status, 204, "{}", still_last.text());
    let second = key_for(&server, "acme", Role::Admin, None);
    let revoked = call(
        &server,
        "DELETE",
        &format!("/v1/keys/{admin_id}"),
        Some(&second),
        None,
    );
    assert_eq!(revoked.status, 204, "{}", revoked.text());
    // Sent again: not found, saying it was revoked, and when.
    let again = call(
        &server,
        "DELETE",
        &format!("/v1/keys/{admin_id}"),
        Some(&second),
        None,
    );
    assert_eq!(again.status, 404, "{}", again.text());
    assert!(
        again.text().contains("is not in use: it was revoked at 20"),
        "{}",
        again.text()
    );
    // Two admins revoking each other at once: one of them stays.
    for round in 0..10 {
        let org = format!("race{round}");
        let keys: Vec<String> = (0..2)
            .map(|_| key_for(&server, &org, Role::Admin, None))
            .collect();
        let ids: Vec<String> = keys
            .iter()
            .map(|k| k.split('_').nth(1).unwrap().to_owned())
            .collect();
        let answers: Vec<u16> = std::thread::scope(|scope| {
            let revokes: Vec<_> = (0..2)
                .map(|i| {
                    let (key, other) = (&keys[i], &ids[1 - i]);
                    let server = &server;
                    scope.spawn(move || {
                        call(
                            server,
                            "DELETE",
                            &format!("/v1/keys/{other}"),
                            Some(key),
                            None,
                        )
                        .status
                    })
                })
                .collect();
            revokes.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let live = server
            .store
            .api_keys(&org)
            .unwrap()
            .iter()
            .filter(|k| k.revoked_at.is_none())
            .count();
        assert!(live >= 1, "round {round}: {answers:?}");
    }
    // The token itself in the path, in any spelling: not found, and not
    // echoed (nor its secret part).
    // `cairn_<id>_<secret>`; the secret's own alphabet holds `_` too.
    let secret = second.splitn(3, '_').nth(2).unwrap().to_owned();
    let id_and_secret = second.trim_start_matches("cairn_").to_owned();
    for path_id in [
        second.clone(),
        format!("%20{second}"),
        second.to_uppercase(),
        id_and_secret,
    ] {
        let token_path = call(
            &server,
            "DELETE",
            &format!("/v1/keys/{path_id}"),
            Some(&second),
            None,
        );
        assert_eq!(token_path.status, 404, "{path_id}: {}", token_path.text());
        assert!(
            !token_path
                .text()
                .to_lowercase()
                .contains(&secret.to_lowercase()),
            "{path_id}: {}",
            token_path.text()
        );
    }
    // Nor does any other route repeat a token pasted for an id.
    let step_path = get(&server, &format!("/v1/steps/{second}"), &second);
    assert_eq!(step_path.status, 404, "{}", step_path.text());
    assert!(!step_path.text().contains(&secret), "{}", step_path.text());
    // A key without its scheme.
    let mut raw = TcpStream::connect(server.addr).unwrap();
    raw.write_all(
        format!("GET /v1/sessions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: {second}\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    let mut text = String::new();
    raw.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");
    assert!(text.contains("Bearer"), "{text}");
    assert!(!text.contains("an API key is required"), "{text}");
}

/// A key made to expire works until its `expires_at`, then is refused as a
/// revoked key is, saying that it expired (the key cache holds it, so the
/// end is checked at every request); it stays listed with its end. An
/// `expires_at` that is not a time, or not in the future, is refused.
#[test]
fn keys_made_to_expire_are_refused_from_their_end() {
    let server = start();
    let admin = server.admin.clone();
    let in_micros = |micros: i64| {
        cairn_core::Timestamp::from_micros(cairn_store::now().as_micros() + micros)
            .unwrap()
            .to_string()
    };
    for (expires_at, why) in [
        (json!("tomorrow"), "RFC 3339"),
        (json!(in_micros(-1_000_000)), "not in the future"),
        (json!("2001-01-01"), "not in the future"),
        (json!(17), "string"),
    ] {
        let refused = post(
            &server,
            "/v1/keys",
            &admin,
            &json!({"role": "reader", "expires_at": expires_at}),
        );
        assert_eq!(refused.status, 400, "{}", refused.text());
        assert_eq!(
            refused.json()["error"]["field"],
            "expires_at",
            "{}",
            refused.text()
        );
        assert!(refused.text().contains(why), "{}", refused.text());
    }
    let end = in_micros(1_500_000);
    let created = post(
        &server,
        "/v1/keys",
        &admin,
        &json!({"role": "reader", "label": "short-lived", "expires_at": end}),
    );
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(created.json()["expires_at"], end);
    let token = created.json()["token"].as_str().unwrap().to_owned();
    assert_eq!(get(&server, "/v1/sessions", &token).status, 200);
    std::thread::sleep(std::time::Duration::from_millis(1_700));
    let expired = get(&server, "/v1/sessions", &token);
    assert_eq!(
        (expired.status, expired.code().as_str()),
        (401, "unauthorized")
    );
    assert!(expired.text().contains("expired"), "{}", expired.text());
    let listed = get(&server, "/v1/keys", &admin).json();
    let listed = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["label"] == "short-lived")
        .cloned()
        .unwrap();
    assert_eq!(listed["expires_at"], end);
    assert!(listed["revoked_at"].is_null());
    // A date alone is that day's start, in UTC (as listings take one).
    let dated = post(
        &server,
        "/v1/keys",
        &admin,
        &json!({"role": "reader", "expires_at": "2999-01-31"}),
    );
    assert_eq!(dated.status, 201, "{}", dated.text());
    assert_eq!(dated.json()["expires_at"], "2999-01-31T00:00:00.000000Z");
    // A key that expires makes keys that expire no later than it does.
    let hour = in_micros(3_600_000_000);
    let expiring_admin = post(
        &server,
        "/v1/keys",
        &admin,
        &json!({"role": "admin", "expires_at": hour}),
    );
    let expiring_admin = expiring_admin.json()["token"].as_str().unwrap().to_owned();
    for asked in [json!(null), json!(in_micros(86_400_000_000))] {
        let mut body = json!({"role": "admin"});
        if !asked.is_null() {
            body["expires_at"] = asked;
        }
        let made = post(&server, "/v1/keys", &expiring_admin, &body);
        assert_eq!(made.status, 201, "{}", made.text());
        assert_eq!(made.json()["expires_at"], hour, "{}", made.text());
    }
}
