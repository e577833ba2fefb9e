//! The `cairn` binary, run as a user would: recording, replay, export and
//! verification, and tampering with the SQLite file directly (triggers
//! dropped first, as an attacker with file access would) caught by
//! `cairn verify` at the exact first broken record with the right reason.

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod common;

use common::{SEED_000_SESSION, Target, cairn_in, json, populate_with};
use std::path::Path;
use std::process::Command;

fn populated(dir: &Path) -> String {
    common::populated(Target::embedded(dir))
}

fn expect_broken(dir: &Path, extra: &[&str], seq: i64, reason: &str) {
    common::expect_broken(Target::embedded(dir), extra, seq, reason);
}

#[test]
fn demo_verifies_then_catches_the_edited_step() {
    let dir = tempfile::tempdir().unwrap();
    let run = cairn_in(dir.path(), &["demo"], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("verdict: VERIFIED (6 records checked)"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("first failing record: seq 3, session revenue-analysis-q4, step 2"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("reason: digest-mismatch"),
        "{}",
        run.stdout
    );
}

/// `cairn log --stdin` keeps a bounded number of steps in flight: an input
/// longer than its window is recorded whole, and every line is answered,
/// in input order, refused lines included.
#[test]
fn log_stdin_answers_every_line_in_order_past_its_window() {
    let dir = tempfile::tempdir().unwrap();
    let lines = 17_000;
    let bad = [5, 16_500];
    let input: Vec<String> = (1..=lines)
        .map(|n| {
            if bad.contains(&n) {
                "{not json".to_owned()
            } else {
                serde_json::json!({
                    "session_id": format!("s{}", n % 10), "agent_id": "a",
                    "step_type": "Observation", "content": format!("line {n}"),
                })
                .to_string()
            }
        })
        .collect();
    let run = cairn_in(dir.path(), &["log", "--stdin"], Some(&input.join("\n")));
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("2 line(s) were not recorded"),
        "{}",
        run.stderr
    );
    let answers: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Refused lines are answered as they are read; the others in order.
    let mut numbers: Vec<u64> = answers
        .iter()
        .map(|a| a["line"].as_u64().unwrap())
        .collect();
    let recorded: Vec<u64> = answers
        .iter()
        .filter(|a| a.get("error").is_none())
        .map(|a| a["line"].as_u64().unwrap())
        .collect();
    assert!(recorded.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(recorded.len(), lines - bad.len());
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=lines as u64).collect::<Vec<_>>());
    let verify = cairn_in(dir.path(), &["verify", "--json"], None);
    assert_eq!(verify.code, 0, "{}", verify.stdout);
    // The whole org's bundle (many chunks for `verify --bundle`'s worker
    // threads) verifies, and a step changed deep inside it is found at its
    // own line and seq.
    let bundle = dir.path().join("all.jsonl");
    let export = cairn_in(
        dir.path(),
        &["export", "--all", "-o", bundle.to_str().unwrap()],
        None,
    );
    assert_eq!(export.code, 0, "{}", export.stderr);
    let check = |path: &Path| {
        let run = cairn_in(
            dir.path(),
            &["verify", "--json", "--bundle", path.to_str().unwrap()],
            None,
        );
        (run.code, json(&run))
    };
    let (code, verdict) = check(&bundle);
    assert_eq!(code, 0, "{verdict}");
    let text = std::fs::read_to_string(&bundle).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let target = lines
        .iter()
        .position(|l| l.contains("\"content\":\"line 12345\""))
        .unwrap();
    lines[target] = lines[target].replace("line 12345", "line 54321");
    let tampered = dir.path().join("tampered.jsonl");
    std::fs::write(&tampered, lines.join("\n") + "\n").unwrap();
    let seq: serde_json::Value = serde_json::from_str(&lines[target]).unwrap();
    let (code, verdict) = check(&tampered);
    assert_eq!(code, 1, "{verdict}");
    assert_eq!(verdict["brokenAtSequence"], seq["seq"], "{verdict}");
    assert_eq!(verdict["brokenReason"], "digest-mismatch", "{verdict}");
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(cairn_in(dir.path(), &["no-such-command"], None).code, 2);
    assert_eq!(
        cairn_in(dir.path(), &["log", "--session", "s"], None).code,
        2
    );
    let bad_kind = cairn_in(
        dir.path(),
        &[
            "log",
            "--session",
            "s",
            "--agent",
            "a",
            "--type",
            "Informational",
        ],
        None,
    );
    assert_eq!(bad_kind.code, 2);
    assert!(
        bad_kind
            .stderr
            .contains("unknown step type \"Informational\""),
        "{}",
        bad_kind.stderr
    );
    let bad_json = cairn_in(
        dir.path(),
        &[
            "log",
            "--session",
            "s",
            "--agent",
            "a",
            "--type",
            "plan",
            "--input",
            "{nope",
        ],
        None,
    );
    assert_eq!(bad_json.code, 2);
    assert!(bad_json.stderr.contains("--input is not valid JSON"));
    let missing = cairn_in(dir.path(), &["replay", "nope"], None);
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("session nope does not exist"));
    assert_eq!(cairn_in(dir.path(), &["--version"], None).code, 0);
}

#[test]
fn record_replay_verify_export_offline() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let sessions = json(&cairn_in(dir.path(), &["sessions", "--json"], None));
    let analyst = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == "revenue-analysis-q4")
        .unwrap();
    assert_eq!(
        (
            analyst["step_count"].as_u64(),
            analyst["chain_valid"].as_bool()
        ),
        (Some(4), Some(true))
    );
    let replay = json(&cairn_in(
        dir.path(),
        &[
            "replay",
            "revenue-analysis-q4",
            "--format",
            "json",
            "--verify",
        ],
        None,
    ));
    assert_eq!(replay["chain_valid"], true);
    assert_eq!(replay["steps"][1]["step_type"], "ToolCall");
    assert_eq!(
        replay["steps"][1]["prev_hash"],
        replay["steps"][0]["current_hash"]
    );
    let md = cairn_in(
        dir.path(),
        &["replay", "revenue-analysis-q4", "--format", "markdown"],
        None,
    );
    assert!(
        md.stdout.contains("[実行] Querying orders table"),
        "{}",
        md.stdout
    );
    assert_eq!(cairn_in(dir.path(), &["verify"], None).code, 0);

    // Export, then verify on "another machine": a directory with no store.
    let bundle = dir.path().join("session.bundle");
    let run = cairn_in(
        dir.path(),
        &[
            "export",
            "--session",
            "revenue-analysis-q4",
            "-o",
            bundle.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let elsewhere = tempfile::tempdir().unwrap();
    let key = cairn_in(dir.path(), &["keys"], None)
        .stdout
        .trim()
        .to_owned();
    let verdict = json(&cairn_in(
        elsewhere.path(),
        &[
            "verify",
            "--bundle",
            bundle.to_str().unwrap(),
            "--key",
            &key,
            "--json",
        ],
        None,
    ));
    assert_eq!(verdict["verified"], true, "{verdict}");
    assert_eq!(verdict["key_pinned"], true);
    assert!(
        !elsewhere.path().join("data").exists(),
        "verifying a bundle needs no store"
    );

    // One changed byte in a step's content is caught at that record.
    let text = std::fs::read_to_string(&bundle).unwrap();
    let tampered = text.replacen("Enterprise grew 23%", "Enterprise grew 28%", 1);
    let changed_line = text
        .lines()
        .position(|l| l.contains("Enterprise grew 23%"))
        .unwrap()
        + 1;
    std::fs::write(&bundle, tampered).unwrap();
    let run = cairn_in(
        elsewhere.path(),
        &["verify", "--bundle", bundle.to_str().unwrap(), "--json"],
        None,
    );
    assert_eq!(run.code, 1);
    let verdict = json(&run);
    assert_eq!(verdict["brokenReason"], "digest-mismatch");
    assert_eq!(verdict["brokenAt"]["line"], changed_line);
    assert_eq!(verdict["brokenAt"]["step_index"], 2);
    // A byte that is not UTF-8 is a change too, reported at its line.
    let mut bytes = text.clone().into_bytes();
    let at = text.find("Enterprise grew 23%").unwrap();
    bytes[at] = 0xff;
    std::fs::write(&bundle, bytes).unwrap();
    let run = cairn_in(
        elsewhere.path(),
        &["verify", "--bundle", bundle.to_str().unwrap(), "--json"],
        None,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let verdict = json(&run);
    assert_eq!(verdict["brokenReason"], "malformed-record");
    assert_eq!(verdict["brokenAt"]["line"], changed_line);

    // The whole org exports as a complete log and verifies too.
    let all = dir.path().join("all.bundle");
    assert_eq!(
        cairn_in(
            dir.path(),
            &["export", "--all", "-o", all.to_str().unwrap()],
            None
        )
        .code,
        0
    );
    assert_eq!(
        cairn_in(
            elsewhere.path(),
            &["verify", "--bundle", all.to_str().unwrap()],
            None
        )
        .code,
        0
    );
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

#[test]
fn a_rewritten_history_is_caught_by_a_saved_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let saved = populated(dir.path());
    let saved_path = dir.path().join("auditor-checkpoint.txt");
    std::fs::write(&saved_path, &saved).unwrap();
    let saved_size: i64 = saved.lines().nth(1).unwrap().parse().unwrap();

    // The attacker, holding the data directory and its key, rebuilds the
    // whole ledger with one step changed: every hash, every checkpoint and
    // every signature is consistent again.
    std::fs::remove_file(dir.path().join("data/ledger.db")).unwrap();
    let rewritten = SEED_000_SESSION.replace("Enterprise grew 23%", "Enterprise grew 32%");
    populate_with(Target::embedded(dir.path()), &rewritten);
    assert_eq!(
        cairn_in(dir.path(), &["verify"], None).code,
        0,
        "on its own the rewrite is consistent"
    );

    let run = cairn_in(
        dir.path(),
        &[
            "verify",
            "--json",
            "--checkpoint",
            saved_path.to_str().unwrap(),
        ],
        None,
    );
    let verdict = json(&run);
    assert_eq!(run.code, 1, "{verdict}");
    assert_eq!(
        verdict["brokenReason"], "inconsistent-checkpoint",
        "{verdict}"
    );
    assert_eq!(verdict["brokenAtSequence"], saved_size - 1);
    assert!(
        verdict["detail"].as_str().unwrap().contains("rewritten"),
        "{verdict}"
    );
}

#[test]
fn a_checkpoint_signed_by_another_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let saved = populated(dir.path());
    // Forge a checkpoint for the current log with a different key of the
    // same name, and slip it into the table.
    let other = tempfile::tempdir().unwrap();
    cairn_in(
        other.path(),
        &[
            "log",
            "--session",
            "x",
            "--agent",
            "a",
            "--type",
            "plan",
            "--content",
            "x",
        ],
        None,
    );
    let stranger_note = cairn_in(other.path(), &["checkpoint"], None).stdout;
    let size: i64 = saved.lines().nth(1).unwrap().parse().unwrap();
    let conn = attacker(dir.path());
    let forged = stranger_note.replace(
        "cairn.local/acme\n1\n",
        &format!("cairn.local/acme\n{}\n", size + 1),
    );
    conn.execute(
        "INSERT INTO checkpoints (org, size, root, note, created_at) VALUES (1, ?1, zeroblob(32), ?2, 0)",
        rusqlite::params![size + 1, forged],
    )
    .unwrap();
    drop(conn);
    let run = cairn_in(dir.path(), &["verify", "--json"], None);
    let verdict = json(&run);
    assert_eq!(run.code, 1, "{verdict}");
    assert_eq!(verdict["brokenReason"], "bad-signature", "{verdict}");
}

#[test]
fn import_mirrors_a_verified_bundle_and_refuses_a_bad_one() {
    let source = tempfile::tempdir().unwrap();
    populated(source.path());
    let bundle = source.path().join("all.bundle");
    assert_eq!(
        cairn_in(
            source.path(),
            &["export", "--all", "-o", bundle.to_str().unwrap()],
            None
        )
        .code,
        0
    );
    let bundle = bundle.to_str().unwrap();

    // Another server imports it as a read-only mirror.
    let mirror = tempfile::tempdir().unwrap();
    let run = cairn_in(mirror.path(), &["import", bundle, "--json"], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = json(&run);
    assert_eq!(
        (v["entries"].as_u64(), v["mirror"].as_bool()),
        (Some(9), Some(true))
    );
    assert_eq!(cairn_in(mirror.path(), &["verify"], None).code, 0);
    let replay = json(&cairn_in(
        mirror.path(),
        &["replay", "revenue-analysis-q4", "--json", "--verify"],
        None,
    ));
    assert_eq!(replay["chain_valid"], true);
    let write = cairn_in(
        mirror.path(),
        &[
            "log",
            "--session",
            "revenue-analysis-q4",
            "--agent",
            "analyst",
            "--type",
            "plan",
            "--content",
            "x",
        ],
        None,
    );
    assert_eq!(write.code, 2);
    assert!(
        write.stderr.contains("read-only mirror"),
        "{}",
        write.stderr
    );
    // A re-export of the mirror, whole, still verifies against the
    // original key; a partial one would need the original server to sign
    // its selection, so it is refused.
    let again = mirror.path().join("again.bundle");
    assert_eq!(
        cairn_in(
            mirror.path(),
            &["export", "--all", "-o", again.to_str().unwrap()],
            None
        )
        .code,
        0
    );
    let partial = cairn_in(mirror.path(), &["export", "--session", "other"], None);
    assert_eq!(partial.code, 2);
    assert!(partial.stderr.contains("mirror"), "{}", partial.stderr);
    let key = cairn_in(source.path(), &["keys"], None)
        .stdout
        .trim()
        .to_owned();
    assert_eq!(
        cairn_in(
            mirror.path(),
            &["verify", "--bundle", again.to_str().unwrap(), "--key", &key],
            None
        )
        .code,
        0
    );
    // Importing the same org twice is refused.
    assert_eq!(cairn_in(mirror.path(), &["import", bundle], None).code, 2);

    // A tampered bundle is rejected and nothing is written.
    let text = std::fs::read_to_string(bundle).unwrap();
    let tampered_path = source.path().join("tampered.bundle");
    std::fs::write(
        &tampered_path,
        text.replacen("side note 1", "side note 9", 1),
    )
    .unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let run = cairn_in(
        fresh.path(),
        &["import", tampered_path.to_str().unwrap()],
        None,
    );
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("nothing was imported") && run.stdout.contains("digest-mismatch"),
        "{}",
        run.stdout
    );
    assert!(
        cairn_in(fresh.path(), &["sessions", "--json"], None)
            .stdout
            .trim()
            == "[]"
    );

    // A partial bundle cannot be imported.
    let partial = source.path().join("partial.bundle");
    assert_eq!(
        cairn_in(
            source.path(),
            &[
                "export",
                "--session",
                "other",
                "-o",
                partial.to_str().unwrap()
            ],
            None
        )
        .code,
        0
    );
    let run = cairn_in(fresh.path(), &["import", partial.to_str().unwrap()], None);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("whole org log"), "{}", run.stderr);
}

#[test]
fn a_restore_under_the_same_key_stays_writable() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let bundle = dir.path().join("backup.bundle");
    assert_eq!(
        cairn_in(
            dir.path(),
            &["export", "--all", "-o", bundle.to_str().unwrap()],
            None
        )
        .code,
        0
    );
    std::fs::remove_file(dir.path().join("data/ledger.db")).unwrap();
    let run = cairn_in(
        dir.path(),
        &["import", bundle.to_str().unwrap(), "--json"],
        None,
    );
    assert_eq!(json(&run)["mirror"], false);
    let run = cairn_in(
        dir.path(),
        &[
            "log",
            "--session",
            "revenue-analysis-q4",
            "--agent",
            "analyst",
            "--type",
            "reflection",
            "--content",
            "done",
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("logged step 4"), "{}", run.stdout);
    assert_eq!(cairn_in(dir.path(), &["verify"], None).code, 0);
}

/// The first `sh` block under `heading` in the README.
fn readme_script(heading: &str) -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let section = readme
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("README has {heading}"));
    section
        .split("```sh\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap()
        .to_owned()
}

/// The README's CLI quickstart, run exactly as written (but for the build
/// line: the binary under test is put on PATH instead).
#[test]
fn readme_quickstart_works_as_written() {
    let block = readme_script("## Quickstart with the CLI");
    let block = block.as_str();
    let script: String = block
        .lines()
        .filter(|l| !l.starts_with("cargo build"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(script.contains("cairn verify --bundle"), "{script}");
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_cairn")).parent().unwrap();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env_remove("CAIRN_DATA_DIR")
        .env_remove("CAIRN_ORG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("VERIFIED"), "{stdout}");
    assert!(dir.path().join("s.bundle").exists());
    assert!(
        stdout.contains("## Turn ")
            && stdout.contains(
                "[思考] Check credits first.\n\n[計画] 1. check_credits  2. check_inbox\n"
            ),
        "{stdout}"
    );
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

/// The README's server quickstart, run exactly as written with the binary
/// under test on PATH (on a free port: `CAIRN_LISTEN` overrides the
/// default, and the script reads the address from the server's output).
#[test]
fn readme_server_quickstart_works_as_written() {
    let script = readme_script("## Quickstart with the server");
    let script = script.as_str();
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_cairn")).parent().unwrap();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir.path())
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("CAIRN_LISTEN", "127.0.0.1:0")
        .env_remove("CAIRN_DATA_DIR")
        .env_remove("CAIRN_ORG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"chain_valid\":true"), "{stdout}");
    assert!(stdout.contains("\"verified\":true"), "{stdout}");
    assert!(stdout.contains("VERIFIED"), "{stdout}");
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap();
    assert!(log.contains("sample session recorded"), "{log}");
}

#[test]
fn admin_commands_manage_keys_on_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let created = json(&cairn_in(
        dir.path(),
        &[
            "--org",
            "globex",
            "admin",
            "create-key",
            "--role",
            "writer",
            "--agent",
            "bot",
            "--label",
            "ci",
            "--json",
        ],
        None,
    ));
    let token = created["token"].as_str().unwrap();
    assert!(token.starts_with(&format!("cairn_{}_", created["id"].as_str().unwrap())));
    assert_eq!(created["org_id"], "globex");
    let listed = json(&cairn_in(
        dir.path(),
        &["--org", "globex", "admin", "list-keys", "--json"],
        None,
    ));
    assert_eq!(listed[0]["agent_id"], "bot");
    assert!(
        !listed.to_string().contains(token),
        "tokens are never listed"
    );
    assert!(
        cairn_in(dir.path(), &["--org", "globex", "admin", "orgs"], None)
            .stdout
            .contains("globex")
    );
    let id = created["id"].as_str().unwrap();
    assert_eq!(
        cairn_in(
            dir.path(),
            &["--org", "globex", "admin", "revoke-key", id],
            None
        )
        .code,
        0
    );
    assert_eq!(
        cairn_in(
            dir.path(),
            &["--org", "globex", "admin", "revoke-key", id],
            None
        )
        .code,
        2
    );
    assert_eq!(
        cairn_in(
            dir.path(),
            &["--org", "globex", "admin", "create-key", "--role", "boss"],
            None
        )
        .code,
        2
    );
    let listed = json(&cairn_in(
        dir.path(),
        &["--org", "globex", "admin", "list-keys", "--json"],
        None,
    ));
    assert!(listed[0]["revoked_at"].is_string());
}

#[test]
fn erase_and_retention_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let replay = json(&cairn_in(
        dir.path(),
        &["replay", "revenue-analysis-q4", "--json"],
        None,
    ));
    let trace = replay["steps"][2]["trace_id"].as_str().unwrap().to_owned();
    let run = cairn_in(
        dir.path(),
        &["erase", &trace, "--reason", "GDPR request 3"],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        cairn_in(dir.path(), &["erase", &trace, "--reason", "again"], None).code,
        2
    );
    let replay = json(&cairn_in(
        dir.path(),
        &["replay", "revenue-analysis-q4", "--json", "--verify"],
        None,
    ));
    assert_eq!(
        (
            replay["chain_valid"].as_bool(),
            replay["steps"][2]["erased"].as_bool()
        ),
        (Some(true), Some(true))
    );
    assert_eq!(cairn_in(dir.path(), &["verify"], None).code, 0);
    // Nothing is older than 90 days; with 0 days retention is off.
    assert!(
        cairn_in(dir.path(), &["retention"], None)
            .stdout
            .contains("erased 0 step")
    );
    assert!(
        cairn_in(dir.path(), &["--retention-days", "0", "retention"], None)
            .stdout
            .contains("erased 0 step")
    );
}

#[test]
fn search_from_the_command_line_reads_the_api_parameters() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let found = json(&cairn_in(
        dir.path(),
        &["search", "\"orders table\"", "--mode", "fulltext", "--json"],
        None,
    ));
    assert_eq!(found["mode"], "fulltext");
    let hit = &found["results"][0];
    assert_eq!(
        (hit["session_id"].as_str(), hit["step_index"].as_u64()),
        (Some("revenue-analysis-q4"), Some(1))
    );
    assert!(hit["snippet"].as_str().unwrap().contains("orders table"));
    let text = cairn_in(dir.path(), &["search", "revenue growth"], None);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.contains("meaning ranked by word-hash"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("revenue-analysis-q4 #"),
        "{}",
        text.stdout
    );
    let refused = cairn_in(dir.path(), &["search", "x", "--status", "maybe"], None);
    assert_eq!(refused.code, 2);
    assert!(refused.stderr.contains("--status"), "{}", refused.stderr);
}

/// A signing key kept outside the data directory (`--server-key`): a copy
/// of the directory alone cannot sign for the log. A sequencing process
/// with another key refuses to start; an attacker who also deletes the
/// recorded key can sign, but only with a key no verifier pinned to the
/// log's published key accepts.
#[test]
fn a_data_directory_copied_without_its_key_cannot_sign_for_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("keys").join("signing.key");
    let key_arg = format!("--server-key={}", key_file.display());
    let log_step = |dir: &Path, extra: &[&str], content: &str| {
        let mut args: Vec<&str> = extra.to_vec();
        args.extend_from_slice(&[
            "log",
            "--session",
            "s",
            "--agent",
            "a",
            "--type",
            "observation",
            "--content",
            content,
        ]);
        cairn_in(dir, &args, None)
    };
    let first = log_step(dir.path(), &[&key_arg], "one");
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(key_file.exists());
    assert!(
        !dir.path().join("data/server.key").exists(),
        "the key stays outside the data directory"
    );
    let published = json(&cairn_in(dir.path(), &[&key_arg, "--json", "keys"], None))["server_key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        cairn_in(dir.path(), &[&key_arg, "checkpoint"], None).code,
        0
    );

    // The insider copies the data directory, not the key.
    let copy = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(copy.path().join("data")).unwrap();
    for name in ["ledger.db", "ledger.db-wal"] {
        let from = dir.path().join("data").join(name);
        if from.exists() {
            std::fs::copy(&from, copy.path().join("data").join(name)).unwrap();
        }
    }
    let refused = log_step(copy.path(), &[], "two");
    assert_ne!(refused.code, 0, "a store copied without its key sequenced");
    assert!(refused.stderr.contains("signed by"), "{}", refused.stderr);
    // Still readable and verifiable with the published key.
    let verified = cairn_in(copy.path(), &["verify", "--key", &published], None);
    assert_eq!(verified.code, 0, "{}{}", verified.stdout, verified.stderr);

    // The insider deletes the recorded key: now a new key signs, and no
    // checkpoint it makes verifies against the published key.
    let conn = rusqlite::Connection::open(copy.path().join("data/ledger.db")).unwrap();
    conn.execute("DELETE FROM meta WHERE key = 'server_key'", [])
        .unwrap();
    drop(conn);
    let forged = log_step(copy.path(), &[], "forged");
    assert_eq!(forged.code, 0, "{}", forged.stderr);
    assert_eq!(cairn_in(copy.path(), &["checkpoint"], None).code, 0);
    let verdict = json(&cairn_in(
        copy.path(),
        &["verify", "--json", "--key", &published],
        None,
    ));
    assert_eq!(verdict["verified"], false, "{verdict}");
    assert_eq!(verdict["brokenReason"], "bad-signature", "{verdict}");
}
