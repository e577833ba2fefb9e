//! Tampering with the SQLite file directly (triggers dropped first, as an
//! attacker with file access would), caught by `cairn verify` at the exact
//! first broken record with the right reason; a history rewritten under a
//! saved checkpoint, a checkpoint signed by another key, and a store that
//! contradicts itself opening read-only. (Moved from `cli.rs`.)
#![allow(clippy::unwrap_used)]

mod common;
// The crate root's modules resolve beside it in tests/: kept in a
// directory of its own so that Cargo does not take it for a test target.
#[path = "file_tampering/checkpoints.rs"]
mod checkpoints;
#[path = "file_tampering/tree_rows.rs"]
mod tree_rows;

use common::{SEED_000_SESSION, Target, cairn_in, json, populate_with};
use serde_json::Value;
use std::path::Path;

fn populated(dir: &Path) -> String {
    common::populated(Target::embedded(dir))
}

fn expect_broken(dir: &Path, extra: &[&str], seq: i64, reason: &str) {
    common::expect_broken(Target::embedded(dir), extra, seq, reason);
}

/// Opens the database as an attacker: plain SQL, triggers dropped.
fn attacker(dir: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(dir.join("data/ledger.db")).unwrap();
    let triggers: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(!triggers.is_empty());
    for t in triggers {
        conn.execute(&format!("DROP TRIGGER {t}"), []).unwrap();
    }
    conn
}

fn seq_of(conn: &rusqlite::Connection, session: &str, index: i64) -> i64 {
    conn.query_row(
        "SELECT e.seq FROM entries e JOIN sessions s ON s.sid = e.sid WHERE s.session_id = ?1 AND e.step_index = ?2",
        rusqlite::params![session, index],
        |r| r.get(0),
    )
    .unwrap()
}

fn last_step(conn: &rusqlite::Connection, session: &str) -> i64 {
    conn.query_row(
        "SELECT max(e.seq) FROM entries e JOIN sessions s ON s.sid = e.sid WHERE s.session_id = ?1 AND e.type = 'step'",
        [session],
        |r| r.get(0),
    )
    .unwrap()
}

/// Logs one step of session `b` into `org` of the store in `dir`.
fn log_to_org(dir: &Path, org: &str) {
    let run = cairn_in(
        dir,
        &[
            "--org",
            org,
            "log",
            "--session",
            "b",
            "--agent",
            "y",
            "--type",
            "observation",
            "--content",
            "theirs",
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
}

fn session_start(conn: &rusqlite::Connection, session: &str) -> i64 {
    conn.query_row(
        "SELECT start_seq FROM sessions WHERE session_id = ?1",
        [session],
        |r| r.get(0),
    )
    .unwrap()
}

#[test]
fn every_kind_of_file_tampering_is_caught_at_its_record() {
    type Tamper = fn(&rusqlite::Connection) -> (i64, &'static str);
    let cases: Vec<(&str, Tamper)> = vec![
        ("content edited", |c| {
            let seq = seq_of(c, "revenue-analysis-q4", 2);
            c.execute(
                "UPDATE entries SET content = 'Enterprise grew 2%' WHERE seq = ?1",
                [seq],
            )
            .unwrap();
            (seq, "digest-mismatch")
        }),
        ("metadata edited", |c| {
            let seq = seq_of(c, "revenue-analysis-q4", 1);
            c.execute(
                "UPDATE entries SET metadata = '{\"tool\":\"none\"}' WHERE seq = ?1",
                [seq],
            )
            .unwrap();
            (seq, "digest-mismatch")
        }),
        ("timestamp edited", |c| {
            let seq = seq_of(c, "revenue-analysis-q4", 3);
            c.execute(
                "UPDATE entries SET created_at = created_at - 3600000000 WHERE seq = ?1",
                [seq],
            )
            .unwrap();
            (seq, "digest-mismatch")
        }),
        ("step reordered", |c| {
            let (a, b) = (
                seq_of(c, "revenue-analysis-q4", 1),
                seq_of(c, "revenue-analysis-q4", 2),
            );
            c.execute("UPDATE entries SET seq = -1 WHERE seq = ?1", [a])
                .unwrap();
            c.execute("UPDATE entries SET seq = ?1 WHERE seq = ?2", [a, b])
                .unwrap();
            c.execute("UPDATE entries SET seq = ?1 WHERE seq = -1", [b])
                .unwrap();
            (a, "sequence-gap")
        }),
        ("step deleted", |c| {
            let seq = seq_of(c, "revenue-analysis-q4", 1);
            c.execute("DELETE FROM entries WHERE seq = ?1", [seq])
                .unwrap();
            (seq, "sequence-gap")
        }),
        ("step inserted", |c| {
            // A copy of step 1 inserted right after it; later entries are
            // renumbered (rowid and seq) to make room.
            let seq = seq_of(c, "revenue-analysis-q4", 1);
            // The attacker holds the file: indexes that would refuse the
            // copy (one successor per step) are dropped first.
            c.execute_batch(&format!(
                "DROP INDEX entries_next;
                 UPDATE entries SET id = -(id + 1), seq = seq + 1 WHERE seq > {seq};
                 UPDATE entries SET id = -id WHERE id < 0;
                 CREATE TEMP TABLE copy AS SELECT * FROM entries WHERE seq = {seq};
                 UPDATE copy SET id = id + 1, seq = seq + 1, trace_id = 'forged-trace';
                 INSERT INTO entries SELECT * FROM copy;"
            ))
            .unwrap();
            (seq + 1, "sequence-gap")
        }),
        ("tail truncated", |c| {
            let max: i64 = c
                .query_row("SELECT MAX(seq) FROM entries", [], |r| r.get(0))
                .unwrap();
            c.execute("DELETE FROM entries WHERE seq >= ?1", [max - 1])
                .unwrap();
            (max - 1, "missing-record")
        }),
        ("payload erased without an erasure record", |c| {
            // The attacker drops the trigger and nulls the payload in the
            // exact shape an erasure leaves, commitments computed from the
            // row's seed: no erasure record names the step.
            let seq = seq_of(c, "revenue-analysis-q4", 2);
            let db = std::path::PathBuf::from(c.path().unwrap());
            let bundle =
                std::fs::read_to_string(db.parent().unwrap().join("../all.bundle")).unwrap();
            let hidden = common::erasure_shape(&bundle, seq);
            c.execute_batch(&format!(
                "UPDATE entries SET content = NULL, input_data = NULL, output_data = NULL,
                   metadata = NULL, erased = 1, hidden = '{hidden}' WHERE seq = {seq};"
            ))
            .unwrap();
            (seq, "erasure-mismatch")
        }),
        ("logged time moved back", |c| {
            let seq = seq_of(c, "revenue-analysis-q4", 2);
            c.execute_batch(&format!(
                "UPDATE entries SET logged_at = logged_at - 86400000000 WHERE seq = {seq};"
            ))
            .unwrap();
            (seq, "bad-timestamp")
        }),
        ("whole session deleted", |c| {
            let start: i64 = c
                .query_row(
                    "SELECT start_seq FROM sessions WHERE session_id = 'other'",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            c.execute("DELETE FROM entries WHERE seq = ?1 OR sid = (SELECT sid FROM sessions WHERE session_id = 'other')", [start]).unwrap();
            c.execute("DELETE FROM sessions WHERE session_id = 'other'", [])
                .unwrap();
            (start, "sequence-gap")
        }),
        ("a JSON member repeated, the original value last", |c| {
            // serde_json keeps a repeated member's last value, SQLite's
            // json_extract its first: analyst SQL would show the forged
            // one while the digest recomputed over the original.
            let seq = seq_of(c, "revenue-analysis-q4", 1);
            c.execute(
                "UPDATE entries SET input_data = '{\"sql\":\"DROP TABLE users\",' || substr(input_data, 2) WHERE seq = ?1",
                [seq],
            )
            .unwrap();
            (seq, "malformed-record")
        }),
        ("a record's view with a member repeated", |c| {
            let seq = session_start(c, "revenue-analysis-q4");
            c.execute(
                "UPDATE entries SET view = '{\"agent_id\":\"mallory\",' || substr(view, 2) WHERE seq = ?1",
                [seq],
            )
            .unwrap();
            (seq, "malformed-record")
        }),
        ("the sessions table names another agent", |c| {
            // Listings and `--agent` filters read the sessions table: a
            // session moved to another agent left that agent's audit.
            let seq = session_start(c, "revenue-analysis-q4");
            c.execute(
                "UPDATE sessions SET agent_id = 'mallory' WHERE session_id = 'revenue-analysis-q4'",
                [],
            )
            .unwrap();
            (seq, "malformed-record")
        }),
        ("the sessions table moves a session's start time", |c| {
            let seq = session_start(c, "revenue-analysis-q4");
            c.execute(
                "UPDATE sessions SET started_at = started_at - 86400000000 WHERE session_id = 'revenue-analysis-q4'",
                [],
            )
            .unwrap();
            (seq, "malformed-record")
        }),
    ];
    for (name, tamper) in cases {
        let dir = tempfile::tempdir().unwrap();
        populated(dir.path());
        assert_eq!(
            cairn_in(dir.path(), &["verify"], None).code,
            0,
            "{name}: clean store"
        );
        assert_eq!(
            cairn_in(dir.path(), &["export", "--all", "-o", "all.bundle"], None).code,
            0
        );
        let (seq, reason) = tamper(&attacker(dir.path()));
        expect_broken(dir.path(), &[], seq, reason);
        eprintln!("{name}: caught at seq {seq} as {reason}");
    }
}

/// The columns readers find rows by (a step's kind and erased flag, an
/// operational record's session, agent and id) are compared with the
/// record they stand beside: an edit that would hide a seal from its
/// session, a step from a kind filter, or serve one audit event for
/// another is caught at its record. The per-session tables derived from
/// the log (head rows, kind rows) are compared with it too, an edit
/// caught at the session's last step.
#[test]
fn lookup_columns_that_disagree_with_their_record_are_caught() {
    type Tamper = fn(&rusqlite::Connection) -> (i64, &'static str);
    fn record_seq(c: &rusqlite::Connection, entry_type: &str) -> i64 {
        c.query_row(
            "SELECT seq FROM entries WHERE type = ?1 ORDER BY seq LIMIT 1",
            [entry_type],
            |r| r.get(0),
        )
        .unwrap()
    }
    let cases: Vec<(&str, Tamper)> = vec![
        (
            "a step's kind respelled as the parser would still read it",
            |c| {
                let seq = seq_of(c, "revenue-analysis-q4", 1);
                c.execute(
                    "UPDATE entries SET kind = '[' || upper(kind) || ']' WHERE seq = ?1",
                    [seq],
                )
                .unwrap();
                (seq, "malformed-record")
            },
        ),
        ("a step marked erased that shows its content", |c| {
            let seq = seq_of(c, "revenue-analysis-q4", 2);
            c.execute("UPDATE entries SET erased = 1 WHERE seq = ?1", [seq])
                .unwrap();
            (seq, "malformed-record")
        }),
        ("a seal moved out of its session", |c| {
            let seq = record_seq(c, "seal");
            c.execute("UPDATE entries SET sid = NULL WHERE seq = ?1", [seq])
                .unwrap();
            (seq, "malformed-record")
        }),
        ("an audit event moved out of its session", |c| {
            let seq = record_seq(c, "audit-event");
            c.execute(
                "UPDATE entries SET sid = (SELECT sid FROM sessions WHERE session_id = 'other') WHERE seq = ?1",
                [seq],
            )
            .unwrap();
            (seq, "malformed-record")
        }),
        ("a step's predecessor column pointed nowhere", |c| {
            // With the session's head row gone, readers walking the
            // session by `prev_seq` stop before this step: replays,
            // listings and session exports showed a shorter session.
            let seq = seq_of(c, "revenue-analysis-q4", 2);
            c.execute_batch(&format!(
                "UPDATE entries SET prev_seq = 999999 WHERE seq = {seq};
                 DELETE FROM session_heads WHERE sid = (SELECT sid FROM sessions WHERE session_id = 'revenue-analysis-q4');"
            ))
            .unwrap();
            (seq, "malformed-record")
        }),
        ("a session's head row deleted", |c| {
            // Retention found expired sessions by their head rows, and
            // analyst SQL counts a session's steps by it.
            let seq = last_step(c, "revenue-analysis-q4");
            c.execute_batch(
                "DELETE FROM session_heads WHERE sid = (SELECT sid FROM sessions WHERE session_id = 'revenue-analysis-q4');",
            )
            .unwrap();
            (seq, "malformed-record")
        }),
        ("a session's head row moved back a step", |c| {
            let seq = last_step(c, "revenue-analysis-q4");
            let before = seq_of(c, "revenue-analysis-q4", 2);
            c.execute(
                "UPDATE session_heads SET last_seq = ?1, last_index = 2 WHERE sid = (SELECT sid FROM sessions WHERE session_id = 'revenue-analysis-q4')",
                [before],
            )
            .unwrap();
            (seq, "malformed-record")
        }),
        ("a head row given a fraction (SQLite keeps any type)", |c| {
            // The trigger lets a head move forward by half a step; analyst
            // SQL then counted 4.5 steps. A verdict, not a read error.
            let seq = last_step(c, "revenue-analysis-q4");
            c.execute(
                "UPDATE session_heads SET last_seq = last_seq + 0.5, last_index = last_index + 0.5 WHERE sid = (SELECT sid FROM sessions WHERE session_id = 'revenue-analysis-q4')",
                [],
            )
            .unwrap();
            (seq, "malformed-record")
        }),
        ("a kind row added to a session", |c| {
            // A kind filter would list the session as holding a
            // correction it never made.
            let seq = last_step(c, "revenue-analysis-q4");
            c.execute(
                "INSERT INTO session_kinds (sid, kind) SELECT sid, 'correction' FROM sessions WHERE session_id = 'revenue-analysis-q4'",
                [],
            )
            .unwrap();
            (seq, "malformed-record")
        }),
        ("a kind row removed from a session", |c| {
            let seq = last_step(c, "revenue-analysis-q4");
            c.execute(
                "DELETE FROM session_kinds WHERE kind = 'final_answer' AND sid = (SELECT sid FROM sessions WHERE session_id = 'revenue-analysis-q4')",
                [],
            )
            .unwrap();
            (seq, "malformed-record")
        }),
        ("a kind row respelled", |c| {
            let seq = last_step(c, "other");
            c.execute(
                "UPDATE session_kinds SET kind = 'Reasoning' WHERE kind = 'reasoning' AND sid = (SELECT sid FROM sessions WHERE session_id = 'other')",
                [],
            )
            .unwrap();
            (seq, "malformed-record")
        }),
        ("an audit event's id changed", |c| {
            let seq = record_seq(c, "audit-event");
            c.execute(
                "UPDATE entries SET trace_id = 'another-event' WHERE seq = ?1",
                [seq],
            )
            .unwrap();
            (seq, "malformed-record")
        }),
        ("an audit event of no session given one", |c| {
            // Records that name no session must not be found by one.
            let seq = record_seq(c, "audit-event") + 1;
            c.execute(
                "UPDATE entries SET sid = (SELECT sid FROM sessions WHERE session_id = 'other') WHERE seq = ?1",
                [seq],
            )
            .unwrap();
            (seq, "malformed-record")
        }),
    ];
    for (name, tamper) in cases {
        let dir = tempfile::tempdir().unwrap();
        populated(dir.path());
        for args in [
            &[
                "audit-event",
                "--action",
                "export",
                "--id",
                "event-1",
                "--session",
                "revenue-analysis-q4",
            ][..],
            &["audit-event", "--action", "login", "--id", "event-2"],
            &["seal", "other"],
        ] {
            let run = cairn_in(dir.path(), args, None);
            assert_eq!(run.code, 0, "{name}: {args:?}: {}", run.stderr);
        }
        assert_eq!(
            cairn_in(dir.path(), &["verify"], None).code,
            0,
            "{name}: clean store"
        );
        let (seq, reason) = tamper(&attacker(dir.path()));
        expect_broken(dir.path(), &[], seq, reason);
        eprintln!("{name}: caught at seq {seq} as {reason}");
    }
}

/// A session's last step moved to another session by its row (the head
/// row left as written): the org's verification catches it at the moved
/// step, and the session's own verification (and its listing's verdict)
/// no longer pass a chain that ends a step early: its head row says it
/// holds more steps than the log gives it.
#[test]
fn a_session_whose_last_step_was_moved_away_fails_its_own_verification() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let c = attacker(dir.path());
    let moved = last_step(&c, "revenue-analysis-q4");
    let steps: i64 = c
        .query_row(
            "SELECT count(*) FROM entries e JOIN sessions s ON s.sid = e.sid WHERE s.session_id = 'revenue-analysis-q4' AND e.type = 'step'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    c.execute(
        "UPDATE entries SET sid = (SELECT sid FROM sessions WHERE session_id = 'other') WHERE seq = ?1",
        [moved],
    )
    .unwrap();
    drop(c);
    let own = json(&cairn_in(
        dir.path(),
        &["--json", "verify", "--session", "revenue-analysis-q4"],
        None,
    ));
    assert_eq!(own["verified"], false, "{own}");
    assert_eq!(own["brokenReason"], "missing-record", "{own}");
    assert_eq!(own["brokenAt"]["step_index"], steps - 1, "{own}");
    let listed = cairn_in(dir.path(), &["sessions"], None);
    assert!(
        listed
            .stdout
            .lines()
            .any(|l| l.starts_with("revenue-analysis-q4") && l.ends_with("BROKEN")),
        "{}",
        listed.stdout
    );
    assert_eq!(cairn_in(dir.path(), &["verify"], None).code, 1);
}

/// A head row edited to a value of another type (SQLite keeps any) is
/// no claim on what the session holds: its replay and its own
/// verification read on (the org's verification names the row), where
/// reading the claim had failed them both as a database error.
#[test]
fn a_head_row_of_another_type_fails_no_session_read() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let c = attacker(dir.path());
    c.execute(
        "UPDATE session_heads SET last_index = last_index + 0.5 WHERE sid = (SELECT sid FROM sessions WHERE session_id = 'revenue-analysis-q4')",
        [],
    )
    .unwrap();
    drop(c);
    for args in [
        &["replay", "revenue-analysis-q4"][..],
        &["verify", "--session", "revenue-analysis-q4"],
    ] {
        let run = cairn_in(dir.path(), args, None);
        assert_eq!(run.code, 0, "{args:?}: {} {}", run.stdout, run.stderr);
    }
    assert_eq!(cairn_in(dir.path(), &["verify"], None).code, 1);
}

#[test]
fn an_inconsistent_store_opens_read_only_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let conn = attacker(dir.path());
    let seq = seq_of(&conn, "revenue-analysis-q4", 3);
    conn.execute("DELETE FROM entries WHERE seq = ?1", [seq])
        .unwrap();
    drop(conn);
    // Reading and verifying still work...
    assert_eq!(cairn_in(dir.path(), &["replay", "other"], None).code, 0);
    assert_eq!(cairn_in(dir.path(), &["verify"], None).code, 1);
    // ...writing is refused with the reason, not a crash.
    let run = cairn_in(
        dir.path(),
        &[
            "log",
            "--session",
            "other",
            "--agent",
            "helper",
            "--type",
            "plan",
            "--content",
            "x",
        ],
        None,
    );
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains("inconsistent") && run.stderr.contains("cairn verify"),
        "{}",
        run.stderr
    );
}

/// `cairn verify` verifies one org (`--org`) and says that the store holds
/// others; `--all-orgs` verifies every one and fails if any fails, naming
/// it (a review found another org's tampering unreported by a plain
/// `cairn verify`). Records that no checkpoint covers, as after the stored
/// checkpoints were deleted, are counted and named.
#[test]
fn every_org_is_verified_with_all_orgs_and_an_uncovered_tail_is_named() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    log_to_org(dir.path(), "other-org");
    let c = attacker(dir.path());
    {
        c.execute(
            "UPDATE entries SET content = 'forged' WHERE type = 'step'
             AND org = (SELECT org FROM orgs WHERE name = 'other-org')",
            [],
        )
        .unwrap();
    }
    let one = cairn_in(dir.path(), &["verify"], None);
    assert_eq!(one.code, 0, "{}", one.stdout);
    assert!(one.stdout.contains("1 other org(s)"), "{}", one.stdout);
    let all = cairn_in(dir.path(), &["verify", "--all-orgs"], None);
    assert_eq!(all.code, 1, "{}", all.stdout);
    assert!(
        all.stdout.contains("org other-org:\nTAMPERED"),
        "{}",
        all.stdout
    );
    let all = json(&cairn_in(
        dir.path(),
        &["--json", "verify", "--all-orgs"],
        None,
    ));
    assert_eq!(all["verified"], false, "{all}");
    let orgs = all["orgs"].as_array().unwrap();
    assert_eq!(orgs.len(), 2, "{all}");
    let broken: Vec<&Value> = orgs.iter().filter(|o| o["verified"] == false).collect();
    assert_eq!(broken.len(), 1, "{all}");
    assert_eq!(broken[0]["org_id"], "other-org");
    assert_eq!(broken[0]["brokenReason"], "digest-mismatch");
    // The stored checkpoints deleted: every record is uncovered, said so.
    c.execute("DELETE FROM checkpoints", []).unwrap();
    let run = cairn_in(dir.path(), &["verify"], None);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout.contains("covered by no checkpoint"),
        "{}",
        run.stdout
    );
    let verdict = json(&cairn_in(dir.path(), &["--json", "verify"], None));
    assert_eq!(
        verdict["uncovered_records"], verdict["log_size"],
        "{verdict}"
    );
}

/// A row added to the sessions table (a session no record of the log
/// started, which listings and `--agent` filters would show) fails
/// verification at the end, naming the table.
#[test]
fn a_session_row_no_record_names_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    attacker(dir.path())
        .execute(
            "INSERT INTO sessions (org, session_id, agent_id, profile, started_at, start_seq, genesis, max_clock_skew_s)
             SELECT org, 'fake', 'mallory', profile, started_at, start_seq, genesis, max_clock_skew_s
             FROM sessions WHERE session_id = 'revenue-analysis-q4'",
            [],
        )
        .unwrap();
    let run = cairn_in(dir.path(), &["--json", "verify"], None);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let verdict = json(&run);
    assert_eq!(verdict["brokenReason"], "malformed-record", "{verdict}");
    assert!(
        verdict["detail"]
            .as_str()
            .unwrap()
            .contains("sessions table"),
        "{verdict}"
    );
}

/// Derived rows outside any session's reach: a kind row planted for the
/// next session number (which that session would inherit) fails the
/// verification of every org; kind rows an earlier server left out are
/// named with the command that restores them, which does; and a store of
/// an earlier version whose kind rows are not built yet verifies without
/// them instead of failing to read them.
#[test]
fn kind_rows_planted_missing_or_not_yet_built() {
    let verdict = |dir: &Path| {
        let run = cairn_in(dir, &["verify", "--json"], None);
        (run.code, json(&run))
    };
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let conn = attacker(dir.path());
    conn.execute(
        "INSERT INTO session_kinds (sid, kind) SELECT max(sid) + 1, 'final_answer' FROM sessions",
        [],
    )
    .unwrap();
    let (code, v) = verdict(dir.path());
    assert_eq!(
        (code, &v["brokenReason"]),
        (1, &Value::from("malformed-record")),
        "{v}"
    );
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("the next session would inherit"),
        "{v}"
    );
    conn.execute("DELETE FROM session_kinds", []).unwrap();
    let (code, v) = verdict(dir.path());
    assert_eq!(code, 1, "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("cairn reindex --kinds"),
        "{v}"
    );
    let run = cairn_in(dir.path(), &["reindex", "--kinds", "--json"], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(json(&run)["kind_rows_restored"], 5, "{}", run.stdout);
    let (code, v) = verdict(dir.path());
    assert_eq!(code, 0, "{v}");
    // An earlier version's store: no kind table yet, the index it replaced
    // still there. Verification (which does not migrate) checks the rest.
    conn.execute_batch(
        "DROP TABLE session_kinds;
         CREATE INDEX entries_session_kinds ON entries (sid, kind);",
    )
    .unwrap();
    let (code, v) = verdict(dir.path());
    assert_eq!(code, 0, "{v}");
}

/// An org's row deleted from the `orgs` table hides its whole log from
/// every listing of orgs, and so from `verify --all-orgs`, while the log
/// is still in the store: whichever org it is (the first, one between
/// others, the last), `--all-orgs` fails and names its number.
#[test]
fn an_org_hidden_by_deleting_its_row_fails_all_orgs() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    for org in ["beta", "gamma"] {
        log_to_org(dir.path(), org);
    }
    let all = cairn_in(dir.path(), &["verify", "--all-orgs"], None);
    assert_eq!(all.code, 0, "{}", all.stdout);
    for org in ["acme", "beta", "gamma"] {
        let copy = tempfile::tempdir().unwrap();
        common::copy_dir(&dir.path().join("data"), &copy.path().join("data"));
        let conn = attacker(copy.path());
        let number: i64 = conn
            .query_row("SELECT org FROM orgs WHERE name = ?1", [org], |r| r.get(0))
            .unwrap();
        conn.execute("DELETE FROM orgs WHERE name = ?1", [org])
            .unwrap();
        drop(conn);
        let run = cairn_in(copy.path(), &["verify", "--all-orgs"], None);
        assert_eq!(run.code, 1, "{org}: {}", run.stdout);
        assert!(
            run.stdout.contains(&format!(
                "org number(s) {number} that the orgs table does not name"
            )),
            "{org}: {}",
            run.stdout
        );
        let verdict = json(&cairn_in(
            copy.path(),
            &["--json", "verify", "--all-orgs"],
            None,
        ));
        assert_eq!(verdict["verified"], false, "{org}: {verdict}");
        assert_eq!(
            verdict["unlisted_org_numbers"],
            serde_json::json!([number]),
            "{org}: {verdict}"
        );
        assert_eq!(
            verdict["orgs"].as_array().unwrap().len(),
            2,
            "{org}: {verdict}"
        );
    }
    // Rows planted for an org not created yet (its first appends would be
    // refused on the taken key), and a name given twice once its key is
    // removed (one org's log would stand for the other's).
    for (what, sql, member, expected) in [
        (
            "a tree node of an org not created yet",
            "INSERT INTO nodes (org, level, idx, hash) VALUES (99, 4, 0, zeroblob(32))",
            "unlisted_org_numbers",
            serde_json::json!([99]),
        ),
        (
            "a name given twice",
            "CREATE TABLE orgs_copy (org INTEGER PRIMARY KEY, name TEXT NOT NULL);
             INSERT INTO orgs_copy SELECT * FROM orgs; DROP TABLE orgs; ALTER TABLE orgs_copy RENAME TO orgs;
             UPDATE orgs SET name = 'acme' WHERE name = 'gamma'",
            "repeated_org_names",
            serde_json::json!(["acme"]),
        ),
    ] {
        let copy = tempfile::tempdir().unwrap();
        common::copy_dir(&dir.path().join("data"), &copy.path().join("data"));
        attacker(copy.path()).execute_batch(sql).unwrap();
        let run = cairn_in(copy.path(), &["--json", "verify", "--all-orgs"], None);
        assert_eq!(run.code, 1, "{what}: {}", run.stdout);
        let verdict = json(&run);
        assert_eq!(verdict["verified"], false, "{what}: {verdict}");
        assert_eq!(verdict[member], expected, "{what}: {verdict}");
        if member == "repeated_org_names" {
            // Verifying that one org alone says so too: a verdict, not a
            // store error, in the shape of every other verdict, whether
            // the org or one of its sessions is verified.
            for session in [None, Some("b")] {
                let mut args = vec!["--json", "--org", "acme", "verify"];
                args.extend(session.iter().flat_map(|s| ["--session", *s]));
                let run = cairn_in(copy.path(), &args, None);
                assert_eq!(run.code, 1, "{what}: {} {}", run.stdout, run.stderr);
                let verdict = json(&run);
                assert_eq!(verdict["verified"], false, "{what}: {verdict}");
                assert_eq!(verdict["brokenReason"], "malformed-record", "{what}: {verdict}");
                assert_eq!(verdict[member], expected, "{what}: {verdict}");
                let run = cairn_in(copy.path(), &args[1..], None);
                assert_eq!(run.code, 1, "{what}: {} {}", run.stdout, run.stderr);
                assert!(run.stdout.contains("TAMPERED"), "{what}: {}", run.stdout);
            }
            // The server gives the same verdict (one shared operation), for
            // the org (with a witness policy too, whose checkpoints are
            // the org's) and for a session, where it gave a storage error.
            let (server, admin) = common::serve(copy.path(), None);
            let admin = admin.expect("a store without API keys prints an admin key");
            let witness = "cairn-witness.local%2B97965466%2BBGpt9aQTeAX3NWDeML3I7%2B6IBxp%2Fw3FZ9I8L9W1avPze";
            for path in [
                "/v1/verify".to_owned(),
                format!("/v1/verify?witness={witness}"),
                "/v1/sessions/b/verify".to_owned(),
            ] {
                let reply =
                    cairn_testkit::http::call(server.addr, "GET", &path, Some(&admin), None);
                assert_eq!(reply.status, 200, "{what}: {path}: {}", reply.text());
                let verdict = reply.json();
                assert_eq!(verdict["verified"], false, "{what}: {path}: {verdict}");
                assert_eq!(
                    verdict["brokenReason"], "malformed-record",
                    "{what}: {path}: {verdict}"
                );
                assert!(
                    verdict["detail"]
                        .as_str()
                        .is_some_and(|d| d.contains("names org acme more than once")),
                    "{what}: {path}: {verdict}"
                );
            }
            drop(server);
            // MCP's chain check: the verdict, no step of either org counted.
            let input = [
                r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"audit_verify_chain","arguments":{"session_id":"b"}}}"#,
            ];
            let run = cairn_in(copy.path(), &["mcp"], Some(&input.join("\n")));
            let answer: Value = run
                .stdout
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .find(|a| a["id"] == 2)
                .unwrap_or_else(|| panic!("{what}: {} {}", run.stdout, run.stderr));
            let checked = &answer["result"]["structuredContent"];
            assert_eq!(checked["valid"], false, "{what}: {answer}");
            assert_eq!(checked["reason"], "malformed-record", "{what}: {answer}");
            // What only reads the org (a replay, a listing, verifying or
            // not) refuses it, naming the cause.
            for args in [&["replay", "b", "--verify"][..], &["sessions"][..]] {
                let run = cairn_in(copy.path(), args, None);
                assert_ne!(run.code, 0, "{what}: {args:?}: {}", run.stdout);
                assert!(
                    run.stderr.contains("names org acme more than once"),
                    "{what}: {args:?}: {}",
                    run.stderr
                );
            }
        }
    }
}

/// `cairn replay --format markdown --verify`: standard output is seed
/// 002's Markdown alone, the verdict goes to standard error, and a
/// tampered session exits 1 (it printed the Markdown and exited 1 with
/// nothing said: a hostile review's finding).
#[test]
fn a_markdown_replay_says_its_verdict_on_standard_error() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let args = [
        "replay",
        "revenue-analysis-q4",
        "--format",
        "markdown",
        "--verify",
    ];
    let genuine = cairn_in(dir.path(), &args, None);
    assert_eq!(genuine.code, 0, "{}", genuine.stderr);
    assert!(
        genuine
            .stdout
            .starts_with("# Session revenue-analysis-q4\n")
    );
    assert!(!genuine.stdout.contains("VERIFIED"), "{}", genuine.stdout);
    assert!(genuine.stderr.contains("VERIFIED"), "{}", genuine.stderr);
    attacker(dir.path())
        .execute(
            "UPDATE entries SET content = 'Enterprise grew 2%'
             WHERE type = 'step' AND step_index = 2",
            [],
        )
        .unwrap();
    let tampered = cairn_in(dir.path(), &args, None);
    assert_eq!(tampered.code, 1, "{}", tampered.stderr);
    assert!(tampered.stdout.contains("Enterprise grew 2%"));
    assert!(!tampered.stdout.contains("TAMPERED"), "{}", tampered.stdout);
    assert!(
        tampered.stderr.contains("TAMPERED") && tampered.stderr.contains("digest-mismatch"),
        "{}",
        tampered.stderr
    );
}
