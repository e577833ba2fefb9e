//! Seeds 002 and 003 end to end against a real `cairn serve` (the embedded
//! store), driven over HTTP as an agent and an auditor would:
//!
//! - seed 002: a turn's raw thinking text, in Japanese and in English,
//!   parsed and recorded, then exported as Markdown in the seed's format
//!   with its bracket labels, checked against the expected text; the
//!   session's audit trail across turns;
//! - seed 003: flagged steps in the review queue and the reviewer's
//!   decisions as records; the verdict after each kind of tampering; and an
//!   export taken after an erasure and after a retention run, verified
//!   offline.

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod common;

use cairn_testkit::http::{Reply, call};
use common::{Server, Target, copy_dir, json, serve};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::Path;

fn post(addr: SocketAddr, key: &str, path: &str, body: &Value) -> Reply {
    call(
        addr,
        "POST",
        path,
        Some(key),
        Some(body.to_string().as_bytes()),
    )
}

fn get(addr: SocketAddr, key: &str, path: &str) -> Reply {
    call(addr, "GET", path, Some(key), None)
}

/// `2026-02-23T10:30:00Z` from a step's `created_at`, as turn headings show
/// it.
fn heading_time(created_at: &str) -> String {
    format!("{}Z", &created_at[..19])
}

const JAPANESE_THINKING: &str = "[思考] ユーザーはシステムの状態確認を求めている。まずクレジット残高を確認し、次に受信箱に未処理のメッセージがあるか確認する。
[計画] 1. check_credits を呼ぶ
2. check_inbox を呼ぶ
[承認待ち] 送金には人間の承認が必要
[実行] check_credits -> 残高 $2.50
[エラー] check_inbox が失敗した: タイムアウト";

const ENGLISH_THINKING: &str = "The user asked me to check system status. I should verify
credits balance first, then check if any inbox messages are pending.

Plan:
1. Call check_credits
2. Call check_inbox";

#[test]
fn seed_002_parsed_thinking_exports_as_the_seeds_markdown() {
    let dir = tempfile::tempdir().unwrap();
    let (server, key) = serve(dir.path(), None);
    let key = key.unwrap();
    let addr = server.addr;

    // parseThinking alone records nothing.
    let parsed = post(
        addr,
        &key,
        "/v1/thinking/parse",
        &json!({"text": JAPANESE_THINKING}),
    )
    .json();
    let phases: Vec<&str> = parsed["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["phase"].as_str().unwrap())
        .collect();
    assert_eq!(
        phases,
        ["thinking", "plan", "waiting_approval", "execute", "error"]
    );

    // A Japanese turn, from its raw thinking alone.
    let reply = post(
        addr,
        &key,
        "/v1/sessions/status-check/turns",
        &json!({"agent_id": "automaton", "turn_id": "01JXYZ-JA", "thinking": JAPANESE_THINKING}),
    );
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(reply.json()["accepted"], 5);
    let turn = get(addr, &key, "/v1/sessions/status-check/turns/01JXYZ-JA").json();
    let time = heading_time(turn["steps"][0]["created_at"].as_str().unwrap());
    let numbers: Vec<u64> = turn["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["turn_step"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [0, 1, 2, 3, 4]);
    let markdown = get(
        addr,
        &key,
        "/v1/sessions/status-check/turns/01JXYZ-JA?format=markdown",
    );
    assert!(markdown.content_type.starts_with("text/markdown"));
    assert_eq!(
        markdown.text(),
        format!(
            "## Turn 01JXYZ-JA ({time})

[思考] ユーザーはシステムの状態確認を求めている。まずクレジット残高を確認し、次に受信箱に未処理のメッセージがあるか確認する。

[計画] 1. check_credits を呼ぶ  2. check_inbox を呼ぶ

[承認待ち] 送金には人間の承認が必要

[実行] check_credits -> 残高 $2.50

[エラー] check_inbox が失敗した: タイムアウト
"
        )
    );

    // An English turn: unmarked thinking (the plan found by its keyword and
    // numbered lines), then the tool calls it made, linked.
    let reply = post(
        addr,
        &key,
        "/v1/sessions/status-check/turns",
        &json!({
            "agent_id": "automaton", "turn_id": "01JXYZ", "thinking": ENGLISH_THINKING,
            "steps": [
                {"step_type": "execute", "content": "check_credits -> $2.50 remaining",
                 "links": {"tool_call": "01JXYZ-TC1"}},
                {"step_type": "execute", "content": "check_inbox -> 3 unprocessed messages",
                 "links": {"tool_call": "01JXYZ-TC2"}},
            ],
        }),
    );
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(reply.json()["accepted"], 4);
    // A later step of the same turn (the policy engine) takes the next
    // number.
    let reply = post(
        addr,
        &key,
        "/v1/sessions/status-check/turns",
        &json!({
            "agent_id": "automaton", "turn_id": "01JXYZ",
            "steps": [{"step_type": "waiting_approval", "content": "Policy SPEND_LIMIT: transfer needs approval",
                       "links": {"policy_decision": "PD-7", "approval_request": "AR-3"}}],
        }),
    );
    assert_eq!(reply.status, 201, "{}", reply.text());
    let turn = get(addr, &key, "/v1/sessions/status-check/turns/01JXYZ").json();
    assert_eq!(turn["steps"][4]["turn_step"], 4);
    let time = heading_time(turn["steps"][0]["created_at"].as_str().unwrap());
    let english = format!(
        "## Turn 01JXYZ ({time})

[思考] The user asked me to check system status. I should verify credits balance first, then check if any inbox messages are pending.

[計画] Plan:  1. Call check_credits  2. Call check_inbox

[実行] check_credits -> $2.50 remaining (tool_call: 01JXYZ-TC1)

[実行] check_inbox -> 3 unprocessed messages (tool_call: 01JXYZ-TC2)

[承認待ち] Policy SPEND_LIMIT: transfer needs approval (policy_decision: PD-7) (approval_request: AR-3)
"
    );
    assert_eq!(
        get(
            addr,
            &key,
            "/v1/sessions/status-check/turns/01JXYZ?format=markdown"
        )
        .text(),
        english
    );

    // The session's audit trail: both turns, in order, each in seed 002's
    // format; the same from the command line.
    let trail = get(addr, &key, "/v1/sessions/status-check/trail").json();
    let turns: Vec<&str> = trail["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["turn_id"].as_str().unwrap())
        .collect();
    assert_eq!(turns, ["01JXYZ-JA", "01JXYZ"]);
    let whole = get(
        addr,
        &key,
        "/v1/sessions/status-check/trail?format=markdown",
    )
    .text();
    assert!(
        whole.starts_with("# Session status-check\n\n## Turn 01JXYZ-JA")
            && whole.ends_with(&english),
        "{whole}"
    );
    drop(server);
    let cli = Target::embedded(dir.path()).run(
        &[
            "trail",
            "status-check",
            "--turn",
            "01JXYZ",
            "--format",
            "markdown",
        ],
        None,
    );
    assert_eq!(cli.code, 0, "{}", cli.stderr);
    assert_eq!(cli.stdout, english);
    let parsed = Target::embedded(dir.path()).run(&["thinking"], Some(ENGLISH_THINKING));
    assert_eq!(
        parsed.stdout,
        "[思考] The user asked me to check system status. I should verify credits balance first, then check if any inbox messages are pending.\n[計画] Plan:  1. Call check_credits  2. Call check_inbox\n"
    );
}

/// Seed 003's example trace, flagged for review, in `session`.
fn record_traces(addr: SocketAddr, key: &str, session: &str) -> Vec<Value> {
    let steps = [
        json!({"session_id": session, "agent_id": "underwriter", "step_type": "Observation",
               "content": "Applicant income 4,200 EUR/month", "input_data": {"applicant": "A-17"}}),
        json!({"session_id": session, "agent_id": "underwriter", "step_type": "Decision",
               "content": "Decline the credit line", "confidence": 0.62, "status": "flagged",
               "output_data": {"decision": "decline", "matchedPolicy": "DTI>45%"}}),
        json!({"session_id": session, "agent_id": "underwriter", "step_type": "FinalAnswer",
               "content": "Declined: debt-to-income above policy", "confidence": 0.62}),
    ];
    steps
        .iter()
        .map(|s| {
            let reply = post(addr, key, "/v1/steps", s);
            assert_eq!(reply.status, 201, "{}", reply.text());
            reply.json()
        })
        .collect()
}

/// Opens the store as an attacker: plain SQL, triggers dropped.
fn attacker(dir: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(dir.join("data/ledger.db")).unwrap();
    let triggers: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for t in triggers {
        conn.execute(&format!("DROP TRIGGER {t}"), []).unwrap();
    }
    conn
}

#[test]
fn seed_003_reviews_verdicts_and_erasure() {
    let dir = tempfile::tempdir().unwrap();
    let (server, key) = serve(dir.path(), None);
    let key = key.unwrap();
    let addr = server.addr;
    let written = record_traces(addr, &key, "credit-A-17");
    let flagged = written[1]["trace_id"].as_str().unwrap().to_owned();

    // The review queue, and the reviewer's decisions as records.
    let queue = get(addr, &key, "/v1/reviews").json();
    assert_eq!(queue["items"].as_array().unwrap().len(), 1);
    assert_eq!(queue["items"][0]["state"], "pending");
    assert_eq!(queue["items"][0]["step"]["trace_id"], flagged.as_str());
    let reply = post(
        addr,
        &key,
        &format!(
            "/v1/steps/{}/review",
            written[0]["trace_id"].as_str().unwrap()
        ),
        &json!({"decision": "approve"}),
    );
    assert_eq!((reply.status, reply.code().as_str()), (409, "not_flagged"));
    let reply = post(
        addr,
        &key,
        &format!("/v1/steps/{flagged}/review"),
        &json!({"decision": "maybe"}),
    );
    assert_eq!(reply.status, 400);
    let reply = post(
        addr,
        &key,
        &format!("/v1/steps/{flagged}/review"),
        &json!({"decision": "escalate", "note": "income proof missing"}),
    );
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(
        get(addr, &key, "/v1/reviews").json()["items"][0]["state"],
        "escalated"
    );
    let reply = post(
        addr,
        &key,
        &format!("/v1/steps/{flagged}/review"),
        &json!({"decision": "approve", "note": "policy applied correctly"}),
    );
    let review = reply.json();
    assert_eq!(
        (review["decision"].as_str(), review["trace_id"].as_str()),
        (Some("approve"), Some(flagged.as_str()))
    );
    assert!(
        get(addr, &key, "/v1/reviews").json()["items"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let all = get(addr, &key, "/v1/reviews?all=true").json();
    assert_eq!(all["items"][0]["state"], "approved");
    assert_eq!(all["items"][0]["reviews"].as_array().unwrap().len(), 2);

    // The verdict, with the seed's member names.
    let verdict = get(addr, &key, "/v1/verify").json();
    assert_eq!(verdict["verified"], true, "{verdict}");
    assert_eq!(verdict["ok"], true);
    assert!(verdict["totalChecked"].as_u64().unwrap() >= 6);
    for member in [
        "lastValidSequence",
        "brokenAtSequence",
        "brokenReason",
        "durationMs",
        "verifiedAt",
    ] {
        assert!(verdict.get(member).is_some(), "{member}");
    }

    // Erasure: the payload goes, the hashes stay, an export verifies
    // offline and shows the step as erased.
    let reply = post(
        addr,
        &key,
        &format!("/v1/steps/{flagged}/erase"),
        &json!({"reason": "GDPR request 2026-114"}),
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    let step = get(addr, &key, &format!("/v1/steps/{flagged}")).json();
    assert_eq!(
        (step["content"].is_null(), step["erased"].as_bool()),
        (true, Some(true)),
        "{step}"
    );
    let verified_offline = |name: &str, addr: SocketAddr| {
        let bundle = get(addr, &key, "/v1/export?session=credit-A-17");
        assert_eq!(bundle.status, 200);
        let path = dir.path().join(name);
        std::fs::write(&path, &bundle.body).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let run = Target::embedded(elsewhere.path()).run(
            &["verify", "--bundle", path.to_str().unwrap(), "--json"],
            None,
        );
        assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
        assert_eq!(json(&run)["verified"], true);
        bundle.text()
    };
    let text = verified_offline("after-erasure.bundle", addr);
    assert!(
        !text.contains("Decline the credit line"),
        "the erased content left"
    );
    assert!(text.contains("\"erased\":true") && text.contains("GDPR request 2026-114"));

    // Retention (here: everything before now) erases the other steps the
    // same way, each recorded; the export still verifies offline.
    drop(server);
    let cutoff = cairn_core::Timestamp::from_micros(cairn_store::now().as_micros() + 1_000_000)
        .unwrap()
        .to_string();
    let run = Target::embedded(dir.path()).run(&["retention", "--before", &cutoff], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("erased 2 step(s)"), "{}", run.stdout);
    let (server, _) = serve(dir.path(), None);
    let text = verified_offline("after-retention.bundle", server.addr);
    assert!(
        !text.contains("Applicant income") && text.matches("\"reason\":\"retention\"").count() == 2
    );
    let verdict = get(server.addr, &key, "/v1/verify").json();
    assert_eq!(verdict["verified"], true, "{verdict}");
    drop(server);

    // Tampering, each kind, and the verdict's reason and position.
    type Tamper = fn(&rusqlite::Connection) -> (i64, &'static str);
    let cases: Vec<(&str, Tamper)> = vec![
        ("confidence edited", |c| {
            let seq = seq_of(c, 1);
            c.execute("UPDATE entries SET confidence = 0.99 WHERE seq = ?1", [seq])
                .unwrap();
            (seq, "digest-mismatch")
        }),
        ("an erased field filled in again", |c| {
            let seq = seq_of(c, 0);
            c.execute(
                "UPDATE entries SET input_data = '{\"applicant\":\"B-99\"}' WHERE seq = ?1",
                [seq],
            )
            .unwrap();
            (seq, "digest-mismatch")
        }),
        ("chain link rewritten", |c| {
            let seq = seq_of(c, 1);
            c.execute(
                "UPDATE entries SET prev_hash = zeroblob(32) WHERE seq = ?1",
                [seq],
            )
            .unwrap();
            (seq, "prev-hash-mismatch")
        }),
        ("chain hash rewritten", |c| {
            let seq = seq_of(c, 2);
            c.execute(
                "UPDATE entries SET record_hash = zeroblob(32) WHERE seq = ?1",
                [seq],
            )
            .unwrap();
            (seq, "chain-hash-mismatch")
        }),
        ("entry removed", |c| {
            let seq = seq_of(c, 1);
            c.execute("DELETE FROM entries WHERE seq = ?1", [seq])
                .unwrap();
            (seq, "sequence-gap")
        }),
        ("tail truncated", |c| {
            let max: i64 = c
                .query_row("SELECT MAX(seq) FROM entries", [], |r| r.get(0))
                .unwrap();
            c.execute("DELETE FROM entries WHERE seq = ?1", [max])
                .unwrap();
            (max, "missing-record")
        }),
    ];
    let pristine = dir.path().join("pristine");
    copy_dir(&dir.path().join("data"), &pristine);
    for (name, tamper) in cases {
        let data = dir.path().join("data");
        std::fs::remove_dir_all(&data).unwrap();
        copy_dir(&pristine, &data);
        let (seq, reason) = tamper(&attacker(dir.path()));
        let (server, _) = serve(dir.path(), None);
        let verdict = get(server.addr, &key, "/v1/verify").json();
        assert_eq!(verdict["verified"], false, "{name}: {verdict}");
        assert_eq!(verdict["brokenReason"], reason, "{name}: {verdict}");
        assert_eq!(verdict["brokenAtSequence"], seq, "{name}: {verdict}");
        assert_eq!(verdict["lastValidSequence"], seq - 1, "{name}: {verdict}");
        drop::<Server>(server);
    }
}

fn seq_of(c: &rusqlite::Connection, index: i64) -> i64 {
    c.query_row(
        "SELECT e.seq FROM entries e JOIN sessions s ON s.sid = e.sid
         WHERE s.session_id = 'credit-A-17' AND e.step_index = ?1",
        [index],
        |r| r.get(0),
    )
    .unwrap()
}
