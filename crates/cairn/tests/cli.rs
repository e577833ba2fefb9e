//! The `cairn` binary, run as a user would: recording, replay, export and
//! verification, import, administration, erasure and search from the
//! command line. (Tampering with the SQLite file directly is in
//! `file_tampering.rs`; the README's quickstarts in `readme.rs`.)

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Target, cairn_in, json};
use serde_json::Value;
use std::path::Path;

fn populated(dir: &Path) -> String {
    common::populated(Target::embedded(dir))
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

/// `cairn log --stdin` reads each line as a REST body is read: a member
/// given twice, or a member name serde_json would read as one of its own
/// markers (a value that could not be recorded as sent), refuses the line
/// with a message saying so; the other lines are recorded and verify.
/// `cairn log --stdin` of `lines`, some of them refused (exit 2): its
/// answer lines.
fn log_stdin_refusing(dir: &Path, lines: &[&str]) -> Vec<serde_json::Value> {
    let run = cairn_in(dir, &["log", "--stdin"], Some(&lines.join("\n")));
    assert_eq!(run.code, 2, "{}", run.stderr);
    run.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn log_stdin_reads_lines_as_strictly_as_rest_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let input = [
        r#"{"session_id":"s","agent_id":"a","step_type":"Observation","content":"x","content":"y"}"#,
        r#"{"session_id":"s","agent_id":"a","step_type":"Observation","input_data":{"$serde_json::private::RawValue":"1"}}"#,
        r#"{"session_id":"s","agent_id":"a","step_type":"Observation","input_data":{"$serde_json":1}}"#,
    ];
    let answers = log_stdin_refusing(dir.path(), &input);
    assert_eq!(answers.len(), 3, "{answers:?}");
    let error = |line: u64| {
        let answer = answers.iter().find(|a| a["line"] == line).unwrap();
        answer["error"].as_str().unwrap_or_default().to_owned()
    };
    assert!(error(1).contains("given twice"), "{}", error(1));
    assert!(error(2).contains("reserved"), "{}", error(2));
    assert_eq!(error(3), "", "an ordinary `$` name is recorded");
    let verify = cairn_in(dir.path(), &["verify"], None);
    assert_eq!(verify.code, 0, "{}", verify.stdout);
    let replay = json(&cairn_in(
        dir.path(),
        &["replay", "s", "--format", "json"],
        None,
    ));
    assert_eq!(
        replay["steps"][0]["input_data"]["$serde_json"], 1,
        "{replay}"
    );
}

/// `cairn trail` and `cairn replay` write a session as they read it, in
/// runs of positions: the trail in its order (turns by their first step,
/// each turn's steps by number, then index) however the steps were
/// recorded and numbered, more steps than one read takes, and the
/// Markdown replay is the trail's Markdown.
#[test]
fn trails_and_replays_are_written_in_order_as_they_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let turn_of = |i: usize| ["b", "a", "", "c"][i % 4];
    let lines: Vec<String> = (0..150)
        .map(|i| {
            let mut step = serde_json::json!({"session_id": "t", "agent_id": "a",
                "step_type": "plan", "content": format!("step {i}")});
            match turn_of(i) {
                "" => {}
                turn => step["turn_id"] = turn.into(),
            }
            if turn_of(i) == "b" {
                step["turn_step"] = (1000 - i).into();
            }
            step.to_string()
        })
        .collect();
    let run = cairn_in(dir.path(), &["log", "--stdin"], Some(&lines.join("\n")));
    assert_eq!(run.code, 0, "{}", run.stderr);
    let trail = json(&cairn_in(dir.path(), &["--json", "trail", "t"], None));
    let turns: Vec<(Value, Vec<String>)> = trail["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let steps = t["steps"].as_array().unwrap().iter();
            (
                t["turn_id"].clone(),
                steps
                    .map(|s| s["content"].as_str().unwrap().to_owned())
                    .collect(),
            )
        })
        .collect();
    let contents = |turn: &str, backwards: bool| {
        let mut of: Vec<String> = (0..150)
            .filter(|&i| turn_of(i) == turn)
            .map(|i| format!("step {i}"))
            .collect();
        if backwards {
            of.reverse();
        }
        of
    };
    assert_eq!(
        turns,
        [
            (Value::from("b"), contents("b", true)),
            (Value::from("a"), contents("a", false)),
            (Value::Null, contents("", false)),
            (Value::from("c"), contents("c", false)),
        ]
    );
    let markdown = cairn_in(dir.path(), &["trail", "t", "--format", "markdown"], None);
    let replayed = cairn_in(dir.path(), &["replay", "t", "--format", "markdown"], None);
    assert_eq!(markdown.code, 0, "{}", markdown.stderr);
    assert_eq!(markdown.stdout, replayed.stdout);
    assert!(markdown.stdout.starts_with("# Session t\n\n## Turn b ("));
    let replay = json(&cairn_in(dir.path(), &["--json", "replay", "t"], None));
    assert_eq!(replay["step_count"], 150);
    let indexes: Vec<u64> = replay["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, (0..150).collect::<Vec<u64>>());
    let text = cairn_in(dir.path(), &["replay", "t"], None).stdout;
    assert!(
        text.starts_with("session t (agent a), 150 steps\n"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 151);
}

/// `cairn mcp` reads each line as strictly as `/mcp` reads a body, before
/// the MCP SDK (whose serde_json would keep the last of two members, and
/// read a reserved marker name as another value) sees it: a refused
/// request is answered by its id with a JSON-RPC error saying what to
/// change, and nothing of it is recorded; a line over 16 MiB is answered
/// with a null id; other lines (a byte order mark skipped) reach the SDK.
#[test]
fn mcp_stdio_reads_lines_as_strictly_as_http_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let call = |id: u32, arguments: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"log_reasoning_step","arguments":{arguments}}}}}"#
        )
    };
    let input = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"cli-test","version":"1"}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
        call(2, r#"{"session_id":"m","step_type":"plan","agent_id":"a","metadata":{"k":{"$serde_json::private::RawValue":"[1]"}}}"#),
        call(3, r#"{"session_id":"m","step_type":"plan","agent_id":"a","content":"x","content":"y"}"#),
        call(4, r#"{"session_id":"m","step_type":"plan","agent_id":"a","token_count":18446744073709551616}"#),
        "{not json".to_owned(),
        // A byte order mark is skipped, as the SDK skips it.
        "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\"}".to_owned(),
        // Longer than the 16 MiB a line may hold: answered, not buffered.
        format!(
            r#"{{"jsonrpc":"2.0","id":5,"method":"ping","params":{{"p":"{}"}}}}"#,
            "a".repeat(16 * 1024 * 1024)
        ),
    ];
    let run = cairn_in(dir.path(), &["mcp"], Some(&input.join("\n")));
    assert_eq!(run.code, 0, "{}", run.stderr);
    let answers: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let answer = |id: u32| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no answer to {id}: {}", run.stdout))
    };
    assert_eq!(
        answer(1)["result"]["serverInfo"]["name"],
        "cairn",
        "{}",
        run.stdout
    );
    for (id, words) in [(2, "reserved"), (3, "given twice"), (4, "64-bit")] {
        let error = &answer(id)["error"];
        assert_eq!(error["code"], -32600, "{id}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains(words),
            "{id}: {error}"
        );
    }
    let too_long = answers.iter().find(|a| a["id"].is_null()).unwrap();
    assert!(
        too_long["error"]["message"]
            .as_str()
            .unwrap()
            .contains("longer than 16777216 bytes"),
        "{too_long}"
    );
    assert!(answer(6)["result"].is_object(), "{}", run.stdout);
    assert_eq!(answers.len(), 6, "the line that is not JSON is dropped");
    let replay = cairn_in(dir.path(), &["replay", "m"], None);
    assert_ne!(replay.code, 0, "nothing of a refused request is recorded");
}

/// `cairn mcp` on a store in `dir`, every stream piped (stderr never read
/// by the tests that use it).
fn mcp_child(dir: &Path) -> std::process::Child {
    Target::embedded(dir).spawn(&["mcp"])
}

/// When the MCP handshake fails (a notification before `initialize`),
/// `cairn mcp` ends at once with every refusal already made written, even
/// though the client keeps its stdin open (the read of stdin still
/// pending must not hold the process).
#[test]
fn mcp_stdio_ends_when_its_handshake_fails_though_stdin_stays_open() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let mut child = mcp_child(dir.path());
    let mut stdin = child.stdin.take().unwrap();
    for id in 1..=3 {
        writeln!(
            stdin,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","a":1,"a":2}}"#
        )
        .unwrap();
    }
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    stdin.flush().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cairn mcp still runs 30 s after its handshake failed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    drop(stdin);
    // It has ended: its pipes are read to their end.
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    );
    assert_ne!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("serving MCP on stdio"), "{stderr}");
    let ids: Vec<u64> = stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(ids, [1, 2, 3], "{stdout}");
}

/// A client may write all its requests before it reads an answer, as it
/// may with the MCP SDK alone: refusals never stop `cairn mcp` from
/// reading stdin, nor does a stderr nobody reads (what it drops is logged
/// at debug level only). Every request is answered once the client reads.
#[test]
fn mcp_stdio_reads_every_request_before_any_answer_is_read() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let mut child = mcp_child(dir.path());
    let requests = 3000;
    let mut input = String::from(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"cli-test","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
"#,
    );
    for id in 1..=requests {
        input += &format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\",\"a\":1,\"a\":2}}\n\
             {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\",\"a\":1,\"a\":2}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}}\n",
            requests + id
        );
    }
    let mut stdin = child.stdin.take().unwrap();
    let writing = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !writing.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "cairn mcp stopped reading stdin while its answers waited"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    writing.join().unwrap().unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    let answers: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), 2 * requests + 1);
    let refused = answers
        .iter()
        .filter(|a| a["error"]["code"] == -32600)
        .count();
    assert_eq!(refused, requests);
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
    // A recorded line's answer is the step written (the REST answer's
    // members) with the line's number.
    let answer = answers.iter().find(|a| a.get("error").is_none()).unwrap();
    let members: Vec<&str> = answer
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        members,
        [
            "created_at",
            "current_hash",
            "line",
            "seq",
            "session_created",
            "step_index",
            "trace_id"
        ],
        "{answer}"
    );
    assert_eq!(
        answer["current_hash"].as_str().unwrap().len(),
        64,
        "{answer}"
    );
    // Each member once (a parsed object keeps only the last of two).
    for line in run.stdout.lines().filter(|l| !l.contains("\"error\"")) {
        assert_eq!(line.matches("\"line\":").count(), 1, "{line}");
    }
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
    let no_agent = cairn_in(
        dir.path(),
        &["log", "--session", "s", "--type", "plan"],
        None,
    );
    assert_eq!(no_agent.code, 2);
    // The API's words, naming the flag to give.
    assert!(
        no_agent.stderr.contains("agent_id is required (--agent)"),
        "{}",
        no_agent.stderr
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
    // An org without records is said as such; a session the org does not
    // hold, as a missing session.
    let empty_org = cairn_in(dir.path(), &["replay", "nope"], None);
    assert_eq!(empty_org.code, 2);
    assert!(
        empty_org.stderr.contains("has no records"),
        "{}",
        empty_org.stderr
    );
    let logged = cairn_in(
        dir.path(),
        &["log", "--session", "s", "--agent", "a", "--type", "plan"],
        None,
    );
    assert_eq!(logged.code, 0, "{}", logged.stderr);
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

/// The `erased` flag of a bundle line is outside the digest, so a
/// courier may flip it: an import stores a step that hides a field as
/// erased whatever its line says (a review's mirror showed an erased
/// step as not erased), and the mirror still verifies.
#[test]
fn import_does_not_believe_an_erased_flag() {
    let source = tempfile::tempdir().unwrap();
    populated(source.path());
    let sessions = json(&cairn_in(
        source.path(),
        &["--json", "replay", "revenue-analysis-q4"],
        None,
    ));
    let trace = sessions["steps"][1]["trace_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let erased = cairn_in(source.path(), &["erase", &trace, "--reason", "test"], None);
    assert_eq!(erased.code, 0, "{}", erased.stderr);
    let bundle = source.path().join("all.bundle");
    let exported = cairn_in(
        source.path(),
        &["export", "--all", "-o", bundle.to_str().unwrap()],
        None,
    );
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    let text = std::fs::read_to_string(&bundle).unwrap();
    assert_eq!(text.matches("\"erased\":true").count(), 1, "{text}");
    let flipped = source.path().join("flipped.bundle");
    std::fs::write(
        &flipped,
        text.replace("\"erased\":true", "\"erased\":false"),
    )
    .unwrap();
    let mirror = tempfile::tempdir().unwrap();
    let run = cairn_in(mirror.path(), &["import", flipped.to_str().unwrap()], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(cairn_in(mirror.path(), &["verify"], None).code, 0);
    let replay = json(&cairn_in(
        mirror.path(),
        &["--json", "replay", "revenue-analysis-q4"],
        None,
    ));
    assert_eq!(replay["steps"][1]["erased"], true, "{replay}");
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
    // Nothing of the org is in the store.
    let listed = cairn_in(fresh.path(), &["sessions", "--json"], None);
    assert_eq!(listed.code, 2, "{}", listed.stdout);
    assert!(
        listed.stderr.contains("has no records"),
        "{}",
        listed.stderr
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
        &["erase", &trace, "--reason", "GDPR request 3", "--json"],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    // A step of no signed trace: no trace erasure.
    let answer = json(&run);
    assert_eq!(
        (
            answer["erased"].as_bool(),
            answer["erasure_seq"].is_u64(),
            answer["trace_erasure_seq"].is_null()
        ),
        (Some(true), true, true),
        "{answer}"
    );
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
    assert_eq!(
        json(&cairn_in(dir.path(), &["--json", "retention"], None)),
        serde_json::json!({"erased_steps": 0, "withheld_traces": 0})
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

#[path = "cli/bundle_mistakes.rs"]
mod bundle_mistakes;
#[path = "cli/keys.rs"]
mod keys;
#[path = "cli/mistakes.rs"]
mod mistakes;
