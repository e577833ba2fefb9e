//! The command line's answers to a user's likely mistakes: a data
//! directory without a store, a misspelt step line, a busy port, errors
//! asked for as JSON (a bundle that is not one: `bundle_mistakes.rs`).

use super::common::{self, cairn_in, json};
use super::{log_stdin_refusing, populated};

/// A reading command pointed at a data directory without a store (a
/// mistyped `CAIRN_DATA_DIR`, a command run from another directory)
/// refuses, exit 2, naming the directory, and creates nothing: it had
/// created an empty store with a server key of its own, so `cairn keys`
/// printed a key no bundle was signed with and `cairn sessions` an empty
/// table. Writing commands still create the store.
#[test]
fn reading_commands_do_not_create_a_store() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["sessions"][..],
        &["replay", "s1"],
        &["verify"],
        &["export", "--session", "s1", "--output", "x.bundle"],
        &["search", "anything"],
        &["sql", "SELECT 1"],
        &["admin", "list-keys"],
        &["admin", "repair-tree"],
    ] {
        let run = cairn_in(dir.path(), args, None);
        assert_eq!(run.code, 2, "{args:?}: {} {}", run.stdout, run.stderr);
        assert!(
            run.stderr.contains("no Cairn store in") && run.stderr.contains("data"),
            "{args:?}: {}",
            run.stderr
        );
        assert!(
            !dir.path().join("data").exists(),
            "{args:?} created the store"
        );
    }
    let logged = cairn_in(
        dir.path(),
        &[
            "log",
            "--session",
            "s1",
            "--agent",
            "a",
            "--type",
            "Observation",
            "--content",
            "x",
        ],
        None,
    );
    assert_eq!(logged.code, 0, "{}", logged.stderr);
    let shown = cairn_in(dir.path(), &["keys"], None);
    assert_eq!(shown.code, 0);
    assert!(!shown.stderr.contains("held no store"), "{}", shown.stderr);
    // `keys` makes a new directory's store and key (a witness is told a
    // server's key before the server first starts), and says so.
    let fresh = tempfile::tempdir().unwrap();
    let made = cairn_in(fresh.path(), &["keys"], None);
    assert_eq!(made.code, 0);
    assert!(made.stderr.contains("held no store"), "{}", made.stderr);
}

/// A command that reads an org the store does not hold (a mistyped
/// `--org` or `CAIRN_ORG`) refuses, exit 2, naming the org, the store and
/// what to check, on every such command: `sessions`, `search` and `sql`
/// answered an empty listing, as if the org were empty, and `checkpoint`
/// a refusal worded as a missing session.
#[test]
fn a_mistyped_org_is_named_by_every_reading_command() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    for args in [
        &["sessions"][..],
        &["sessions", "--json"],
        &["verify"],
        &["search", "anything"],
        &["sql", "SELECT 1"],
        &["checkpoint"],
        &["review", "queue"],
        &["retention", "--before", "2020-01-01"],
        &["export", "--all", "-o", "x.bundle"],
    ] {
        let mut with_org = vec!["--org", "no-such-org"];
        with_org.extend_from_slice(args);
        let run = cairn_in(dir.path(), &with_org, None);
        assert_eq!(run.code, 2, "{args:?}: {} {}", run.stdout, run.stderr);
        // Asked for JSON, the error is the JSON answer (the usage code).
        let said = if args.contains(&"--json") {
            json(&run)["error"]["message"].as_str().unwrap().to_owned()
        } else {
            assert_eq!(run.stdout, "", "{args:?}");
            run.stderr.clone()
        };
        assert!(
            said.contains("org no-such-org has no records")
                && said.contains("data")
                && said.contains("check --org or CAIRN_ORG"),
            "{args:?}: {said}"
        );
        // The org the store holds answers each of them.
        let known = cairn_in(dir.path(), args, None);
        assert_eq!(known.code, 0, "{args:?}: {} {}", known.stdout, known.stderr);
    }
    // Commands that name a session or a step say the org too, not only
    // that the session is missing.
    for args in [
        &["replay", "s1"][..],
        &["trail", "s1"],
        &["seal", "s1"],
        &["erase", "t1", "--reason", "r"],
    ] {
        let mut with_org = vec!["--org", "no-such-org"];
        with_org.extend_from_slice(args);
        let run = cairn_in(dir.path(), &with_org, None);
        assert_eq!(run.code, 2, "{args:?}: {} {}", run.stdout, run.stderr);
        assert!(
            run.stderr.contains("org no-such-org has no records"),
            "{args:?}: {}",
            run.stderr
        );
    }
    let keys = cairn_in(
        dir.path(),
        &["--org", "no-such-org", "admin", "list-keys"],
        None,
    );
    assert_eq!(keys.code, 0, "{}", keys.stderr);
    assert!(
        keys.stderr.contains("org no-such-org has no API keys"),
        "{}",
        keys.stderr
    );
    // An org with an API key and nothing recorded yet (a fresh server's)
    // is known: an empty listing, not "no records; check --org".
    let key = cairn_in(
        dir.path(),
        &["--org", "beta", "admin", "create-key", "--role", "admin"],
        None,
    );
    assert_eq!(key.code, 0, "{}", key.stderr);
    for args in [
        &["sessions"][..],
        &["sql", "SELECT 1"],
        &["review", "queue"],
    ] {
        let mut with_org = vec!["--org", "beta"];
        with_org.extend_from_slice(args);
        let run = cairn_in(dir.path(), &with_org, None);
        assert_eq!(run.code, 0, "{args:?}: {} {}", run.stdout, run.stderr);
    }
}

/// A `--limit` is read as the API reads its `limit`: 0 or past the
/// listing's maximum is refused (exit 2, the API's code and field), never
/// clamped; `review queue --limit 0` said no flagged step waited, and
/// `sql --limit 99999` took more rows than the API allows. A session
/// listing cut by its limit says so on stderr.
#[test]
fn limits_are_read_as_the_api_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    for args in [
        &["sessions", "--limit", "0"][..],
        &["sessions", "--limit", "1001"],
        &["review", "queue", "--limit", "0"],
        &["review", "queue", "--limit", "10001"],
        &["sql", "SELECT 1", "--limit", "0"],
        &["sql", "SELECT 1", "--limit", "10001"],
        &["search", "anything", "--limit", "0"],
    ] {
        let mut with_json = vec!["--json"];
        with_json.extend_from_slice(args);
        let run = cairn_in(dir.path(), &with_json, None);
        assert_eq!(run.code, 2, "{args:?}: {} {}", run.stdout, run.stderr);
        let error = &json(&run)["error"];
        assert_eq!(
            (error["refusal"].as_str(), error["field"].as_str()),
            (Some("invalid_argument"), Some("limit")),
            "{args:?}: {error}"
        );
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("limit must be 1 to"),
            "{args:?}: {error}"
        );
    }
    let all = json(&cairn_in(dir.path(), &["--json", "sessions"], None));
    let sessions = all.as_array().unwrap().len();
    assert!(sessions >= 2, "{all}");
    let cut = cairn_in(dir.path(), &["--json", "sessions", "--limit", "1"], None);
    assert_eq!(cut.code, 0, "{}", cut.stderr);
    assert_eq!(json(&cut).as_array().unwrap().len(), 1);
    assert!(cut.stderr.contains("more exist"), "{}", cut.stderr);
    // Paged with --after, from the cursor it names: every session once,
    // in the listing's order.
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut args = vec!["--json", "sessions", "--limit", "1"];
        if let Some(cursor) = &after {
            args.extend(["--after", cursor]);
        }
        let page = cairn_in(dir.path(), &args, None);
        assert_eq!(page.code, 0, "{}", page.stderr);
        let rows = json(&page);
        paged.extend(
            rows.as_array()
                .unwrap()
                .iter()
                .map(|r| r["session_id"].clone()),
        );
        match page.stderr.split("--after ").nth(1) {
            Some(rest) => {
                let cursor = rest.split_whitespace().next().unwrap().to_owned();
                assert_eq!(rows[0]["cursor"], cursor.as_str());
                after = Some(cursor);
            }
            None => break,
        }
    }
    let listed: Vec<_> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["session_id"].clone())
        .collect();
    assert_eq!(paged, listed);
    let bad = cairn_in(dir.path(), &["sessions", "--after", "yesterday"], None);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("not a cursor of this listing"),
        "{}",
        bad.stderr
    );
    let whole = cairn_in(
        dir.path(),
        &["sessions", "--limit", &sessions.to_string()],
        None,
    );
    assert!(!whole.stderr.contains("more exist"), "{}", whole.stderr);
    // Analyst SQL cut at its limit says so, and how to see more.
    let rows = cairn_in(
        dir.path(),
        &["sql", "SELECT session_id FROM steps", "--limit", "1"],
        None,
    );
    assert_eq!(rows.code, 0, "{}", rows.stderr);
    assert_eq!(rows.stdout.lines().count(), 2, "{}", rows.stdout);
    assert!(
        rows.stderr
            .contains("first 1 rows: the query has more; --limit asks for up to 10000"),
        "{}",
        rows.stderr
    );
}

/// `--kind` is read as `--type` (the API and the UI say a step's kind).
#[test]
fn log_takes_kind_for_type() {
    let dir = tempfile::tempdir().unwrap();
    let run = cairn_in(
        dir.path(),
        &[
            "--json",
            "log",
            "--session",
            "k",
            "--agent",
            "a",
            "--kind",
            "plan",
            "--content",
            "x",
        ],
        None,
    );
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    let replay = json(&cairn_in(dir.path(), &["--json", "replay", "k"], None));
    assert_eq!(replay["steps"][0]["step_type"], "plan", "{replay}");
}

/// `cairn log --stdin` names a refused line's mistake as REST answers the
/// same body: the code, the member and the message (an unknown member
/// with its nearest known name, a link name too).
#[test]
fn log_stdin_names_mistakes_as_rest_does() {
    let dir = tempfile::tempdir().unwrap();
    let input = [
        r#"{"agent_id":"a","step_type":"Observation"}"#,
        r#"{"session_id":"s","agent_id":"a","step_type":"Observation","contnet":"x"}"#,
        r#"{"session_id":"s","agent_id":"a","step_type":"Observation","confidence":"0.9"}"#,
        r#"{"session_id":"s","agent_id":"a","step_type":"Observation","links":{"tool_cal":"t"}}"#,
        "not json",
        r#"{"session_id":"s","agent_id":"a","step_type":"Observation","confidence":1.5}"#,
        r#"{"session_id":"s","agent_id":"a","step_type":"Observation","content":"fine"}"#,
    ];
    let answers = log_stdin_refusing(dir.path(), &input);
    let answer = |line: u64| answers.iter().find(|a| a["line"] == line).unwrap().clone();
    for (line, code, field) in [
        (1, "missing_field", Some("session_id")),
        (2, "unknown_field", Some("contnet")),
        (3, "invalid_argument", Some("confidence")),
        (4, "unknown_field", Some("links.tool_cal")),
        (5, "invalid_json", None),
        (6, "confidence_out_of_range", Some("confidence")),
    ] {
        let a = answer(line);
        assert_eq!(a["code"], code, "{a}");
        assert_eq!(a["field"].as_str(), field, "{a}");
    }
    assert!(
        answer(2)["error"]
            .as_str()
            .unwrap()
            .contains("did you mean content")
    );
    assert!(
        answer(4)["error"]
            .as_str()
            .unwrap()
            .contains("did you mean links.tool_call")
    );
    // Answers come in the order of the lines, refused or recorded.
    let order: Vec<u64> = answers
        .iter()
        .map(|a| a["line"].as_u64().unwrap())
        .collect();
    assert_eq!(order, [1, 2, 3, 4, 5, 6, 7]);
}

/// `cairn log --stdin` run again over the same input (its first run's
/// answers lost) answers every step that names its trace id as its first
/// write did, as REST answers a retry; a different step under a taken
/// trace id is still refused.
#[test]
fn log_stdin_answers_a_rerun_as_its_first_run() {
    let dir = tempfile::tempdir().unwrap();
    let input = [
        r#"{"session_id":"r","agent_id":"a","step_type":"Observation","content":"one","trace_id":"t-1"}"#,
        r#"{"session_id":"r","agent_id":"a","step_type":"Plan","content":"two","trace_id":"t-2","metadata":{"k":1}}"#,
    ]
    .join("\n");
    let first = cairn_in(dir.path(), &["log", "--stdin"], Some(&input));
    assert_eq!(first.code, 0, "{}", first.stderr);
    let again = cairn_in(dir.path(), &["log", "--stdin"], Some(&input));
    assert_eq!(again.code, 0, "{} / {}", again.stdout, again.stderr);
    // Field for field the first answers, but `session_created`, which is
    // not recorded with a step (false on a retry, as over REST).
    assert_eq!(
        again.stdout,
        first
            .stdout
            .replace(r#""session_created":true"#, r#""session_created":false"#)
    );
    assert!(first.stdout.contains(r#""session_created":true"#));
    let other = r#"{"session_id":"r","agent_id":"a","step_type":"Observation","content":"not one","trace_id":"t-1"}"#;
    let answers = log_stdin_refusing(dir.path(), &[other]);
    assert_eq!(answers[0]["code"], "duplicate_trace_id", "{}", answers[0]);
    let replay = json(&cairn_in(dir.path(), &["--json", "replay", "r"], None));
    assert_eq!(
        replay["steps"].as_array().map(Vec::len),
        Some(2),
        "{replay}"
    );
    // A longer input, answered together in several look-ups, in order,
    // each line as a request of its own: its repeated line is answered as
    // the first copy (as on the first run), a changed line is refused, a
    // line refused before it was written keeps its place.
    let line = |i: usize, content: &str| {
        format!(
            r#"{{"session_id":"long","agent_id":"a","step_type":"Observation","content":"{content}","trace_id":"long-{i}"}}"#
        )
    };
    let mut input: Vec<String> = (0..600).map(|i| line(i, "same")).collect();
    input.push(line(7, "same"));
    let first = cairn_in(dir.path(), &["log", "--stdin"], Some(&input.join("\n")));
    assert_eq!(first.code, 0, "{}", first.stderr);
    let first: Vec<&str> = first.stdout.lines().collect();
    assert_eq!(first.len(), 601);
    assert_eq!(first[600], first[7].replace(r#""line":8"#, r#""line":601"#));
    input[450] = line(450, "changed");
    input[300] = "not json".into();
    let again = cairn_in(dir.path(), &["log", "--stdin"], Some(&input.join("\n")));
    assert_eq!(again.code, 2, "{}", again.stderr);
    let again: Vec<&str> = again.stdout.lines().collect();
    assert_eq!(again.len(), 601);
    for (i, (then, now)) in first.iter().zip(&again).enumerate() {
        let answer: serde_json::Value = serde_json::from_str(now).unwrap();
        assert_eq!(answer["line"], i + 1, "{now}");
        match i {
            300 => assert_eq!(answer["code"], "invalid_json", "{now}"),
            450 => assert_eq!(answer["code"], "duplicate_trace_id", "{now}"),
            _ => assert_eq!(
                *now,
                then.replace(r#""session_created":true"#, r#""session_created":false"#)
            ),
        }
    }
}

/// A fresh data directory's admin key is printed only once the server
/// holds its address: a busy port stops the start before the key (shown
/// once) is made, and the next start prints it.
#[test]
fn a_busy_port_does_not_use_up_the_admin_key() {
    let dir = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = busy.local_addr().unwrap().to_string();
    let failed = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["serve", "--listen", &address])
        .env("CAIRN_DATA_DIR", dir.path().join("data"))
        .env_remove("CAIRN_DATABASE_URL")
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&failed.stdout);
    assert!(!stdout.contains("admin API key"), "{stdout}");
    assert!(String::from_utf8_lossy(&failed.stderr).contains("cannot listen on"));
    let (_server, admin) = common::serve(dir.path(), None);
    assert!(admin.is_some(), "the next start prints the key");
}

/// With `--json`, an error is JSON on standard output too, its kind in
/// `code` as the exit code gives it.
#[test]
fn json_output_covers_errors() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    // `cairn --json log` of a step of `session` by `agent`, with `more`.
    let log = |session: &str, agent: &str, more: &[&str]| {
        let mut args = vec!["--json", "log", "--session", session, "--agent", agent];
        args.extend_from_slice(more);
        cairn_in(dir.path(), &args, None)
    };
    let run = log("j", "a", &["--type", "Bogus"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let error = json(&run);
    assert_eq!(error["error"]["code"], "usage", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Bogus"),
        "{error}"
    );
    assert!(run.stderr.contains("Bogus"));
    // What the input rules or the ledger refused carries the API's code
    // and member too, as `log --stdin`'s answers and the HTTP API do.
    assert_eq!(
        (&error["error"]["refusal"], &error["error"]["field"]),
        (
            &serde_json::json!("unknown_step_type"),
            &serde_json::json!("step_type")
        ),
        "{error}"
    );
    let run = log("j", "a", &["--type", "plan", "--confidence", "7"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let error = json(&run);
    assert_eq!(
        (
            &error["error"]["code"],
            &error["error"]["refusal"],
            &error["error"]["field"]
        ),
        (
            &serde_json::json!("usage"),
            &serde_json::json!("confidence_out_of_range"),
            &serde_json::json!("confidence")
        ),
        "{error}"
    );
    // A refusal of the ledger itself: a session of another agent.
    assert_eq!(log("k", "a", &["--type", "plan"]).code, 0);
    let run = log("k", "b", &["--type", "plan"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let error = json(&run);
    assert_eq!(
        (&error["error"]["refusal"], &error["error"]["field"]),
        (
            &serde_json::json!("agent_mismatch"),
            &serde_json::json!("agent_id")
        ),
        "{error}"
    );
}

/// A reader that stops reading (`cairn sessions | head`) ends the command
/// quietly with 141 (128 + SIGPIPE, as other Unix tools end), not with a
/// panic's backtrace or an error message.
#[test]
fn a_reader_that_stops_reading_ends_the_command_quietly() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    for args in [&["sessions"][..], &["export", "--all"][..], &["verify"][..]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(args)
            .env("CAIRN_DATA_DIR", dir.path().join("data"))
            .env("CAIRN_ORG", "acme")
            .env_remove("CAIRN_DATABASE_URL")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Closed before the command writes its first line.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

/// `cairn export --since/--until` reads its times as the API does: a date
/// is that day (`--until` included), and a range lacking a bound names
/// it; a date had been refused as "not RFC 3339 UTC".
#[test]
fn export_times_are_read_as_the_api_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let today = chrono_free_today();
    let out = dir.path().join("range.bundle");
    let run = cairn_in(
        dir.path(),
        &[
            "export",
            "--since",
            &today,
            "--until",
            &today,
            "-o",
            out.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    assert!(std::fs::metadata(&out).unwrap().len() > 0);
    let half = cairn_in(dir.path(), &["export", "--since", &today], None);
    assert_eq!(half.code, 2, "{}", half.stderr);
    assert!(half.stderr.contains("--until"), "{}", half.stderr);
    // A range that holds no time is refused, naming --until, rather than
    // answered as an export that found no session; the last date there is
    // ends a range.
    let inverted = cairn_in(
        dir.path(),
        &["export", "--since", &today, "--until", "2000-01-01"],
        None,
    );
    assert_eq!(inverted.code, 2, "{}", inverted.stderr);
    assert!(
        inverted.stderr.contains("is not after since") && inverted.stderr.contains("(--until)"),
        "{}",
        inverted.stderr
    );
    let to_the_end = cairn_in(
        dir.path(),
        &[
            "export",
            "--since",
            &today,
            "--until",
            "9999-12-31",
            "-o",
            out.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(to_the_end.code, 0, "{}", to_the_end.stderr);
    let bad = cairn_in(
        dir.path(),
        &["export", "--since", "soon", "--until", &today],
        None,
    );
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("since must be an RFC 3339 time") && bad.stderr.contains("(--since)"),
        "{}",
        bad.stderr
    );
}

/// Today's date in UTC, as `YYYY-MM-DD`.
fn chrono_free_today() -> String {
    cairn_store::now().to_string()[..10].to_owned()
}

/// Answers to a few more mistakes: a directory given as a bundle is an
/// input mistake (exit 2, not a storage failure); `--json` with
/// `--format markdown` is refused, not silently JSON; a store file that is
/// not a database is said once, not three times over.
#[test]
fn more_mistakes_are_named() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let run = cairn_in(
        dir.path(),
        &["verify", "--bundle", dir.path().to_str().unwrap()],
        None,
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("is a directory"), "{}", run.stderr);
    let sessions = json(&cairn_in(dir.path(), &["--json", "sessions"], None));
    let session = sessions[0]["session_id"].as_str().unwrap().to_owned();
    let run = cairn_in(
        dir.path(),
        &["--json", "replay", &session, "--format", "markdown"],
        None,
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("two formats"), "{}", run.stderr);
    let broken = tempfile::tempdir().unwrap();
    populated(broken.path());
    let data = broken.path().join("data");
    std::fs::write(data.join("ledger.db"), vec![0x5a; 8192]).unwrap();
    for side in ["ledger.db-wal", "ledger.db-shm"] {
        let _ = std::fs::remove_file(data.join(side));
    }
    let run = cairn_in(broken.path(), &["sessions"], None);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert_eq!(
        run.stderr.matches("not a database").count(),
        1,
        "{}",
        run.stderr
    );
}

/// `cairn log` names the flag of every refused member (the step's and
/// the ledger's refusals alike) and reads an unknown link as REST does;
/// `log --stdin` of nothing says that nothing was recorded; `verify
/// --all-orgs` of an empty store says it held no records.
#[test]
fn log_and_verify_name_what_they_were_given() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let base = ["log", "--session", "s9", "--agent", "a", "--type", "plan"];
    for (extra, field, flag) in [
        (&["--task", ""][..], "task_id", "(--task)"),
        (&["--link", "foo=bar"], "links.foo", "(--link)"),
        (&["--turn", "t 1"], "turn_id", "(--turn)"),
    ] {
        let mut args = vec!["--json"];
        args.extend_from_slice(&base);
        args.extend_from_slice(extra);
        let run = cairn_in(dir.path(), &args, None);
        assert_eq!(run.code, 2, "{extra:?}: {}", run.stderr);
        let error = &json(&run)["error"];
        assert_eq!(error["field"], field, "{extra:?}: {error}");
        assert!(
            error["message"].as_str().unwrap().ends_with(flag),
            "{extra:?}: {error}"
        );
    }
    let nothing = cairn_in(dir.path(), &["log", "--stdin"], Some(""));
    assert_eq!(nothing.code, 0, "{}", nothing.stderr);
    assert!(
        nothing.stderr.contains("nothing was recorded"),
        "{}",
        nothing.stderr
    );
    // A bundle names its org; --org naming another is said, not applied.
    let bundle = dir.path().join("all.bundle");
    let exported = cairn_in(
        dir.path(),
        &["export", "--all", "-o", bundle.to_str().unwrap()],
        None,
    );
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    let checked = cairn_in(
        dir.path(),
        &[
            "--org",
            "elsewhere",
            "verify",
            "--bundle",
            bundle.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(checked.code, 0, "{}", checked.stderr);
    assert!(
        checked.stdout.contains("bundle of org acme"),
        "{}",
        checked.stdout
    );
    assert!(
        checked.stderr.contains("not --org elsewhere"),
        "{}",
        checked.stderr
    );
    // A review decision that is none suggests the nearest, as REST does.
    let decided = cairn_in(
        dir.path(),
        &["review", "decide", "t-none", "--decision", "approved"],
        None,
    );
    assert_eq!(decided.code, 2, "{}", decided.stderr);
    assert!(
        decided.stderr.contains("did you mean approve") && decided.stderr.contains("(--decision)"),
        "{}",
        decided.stderr
    );
    // Retention before a future time would erase every payload: refused.
    let future = cairn_in(dir.path(), &["retention", "--before", "2999-01-01"], None);
    assert_eq!(future.code, 2, "{}", future.stderr);
    assert!(
        future.stderr.contains("is in the future"),
        "{}",
        future.stderr
    );
    let empty = tempfile::tempdir().unwrap();
    let made = cairn_in(empty.path(), &["keys"], None);
    assert_eq!(made.code, 0, "{}", made.stderr);
    let run = cairn_in(empty.path(), &["verify", "--all-orgs"], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("holds no records"), "{}", run.stdout);
}

/// What a step's author wrote is shown, not obeyed, by the terminal: an
/// escape sequence, a carriage return or a bidirectional override in a
/// step's content comes out escaped from every human-readable command
/// (replay as text and Markdown, trail, review queue, search), and a line
/// break inside it cannot start a line that looks like another step's.
#[test]
fn a_steps_text_cannot_redraw_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let forged =
        "fine\u{1b}[2K\r[9] 2026-01-01T00:00:00.000000Z Decision forged\u{202e}\nsecond line";
    let line = serde_json::json!({
        "session_id": "tty", "agent_id": "a", "step_type": "Decision",
        "content": forged, "status": "flagged",
    });
    let logged = cairn_in(dir.path(), &["log", "--stdin"], Some(&line.to_string()));
    assert_eq!(logged.code, 0, "{}", logged.stderr);
    for args in [
        &["replay", "tty"][..],
        &["replay", "tty", "--format", "markdown"],
        &["trail", "tty"],
        &["trail", "tty", "--format", "text"],
        &["review", "queue"],
        &["search", "fine"],
        &["sql", "SELECT content FROM steps"],
    ] {
        let run = cairn_in(dir.path(), args, None);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
        assert!(
            !run.stdout.contains(['\u{1b}', '\r', '\u{202e}']),
            "{args:?}: {:?}",
            run.stdout
        );
        assert!(
            run.stdout.contains("\\u{1b}[2K"),
            "{args:?}: {}",
            run.stdout
        );
        assert!(
            !run.stdout
                .lines()
                .any(|l| l.starts_with("second line") || l.trim_start().starts_with("[9]")),
            "{args:?}: {}",
            run.stdout
        );
    }
}
