//! Helpers shared by the binary's tests: running `cairn` as a user would,
//! against the embedded store or a PostgreSQL database, and recording the
//! sample data the tamper tests work on.
#![allow(dead_code, clippy::unwrap_used)]

use serde_json::Value;
use std::io::Write as _;
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Where a test's `cairn` commands point: a working directory (whose
/// `data` subdirectory is the data directory) and, for the PostgreSQL
/// backend, a database URL.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    /// The working directory.
    pub dir: &'a Path,
    /// `--database`, if any.
    pub database: Option<&'a str>,
}

impl<'a> Target<'a> {
    /// The embedded store in `dir/data`.
    pub fn embedded(dir: &'a Path) -> Target<'a> {
        Target {
            dir,
            database: None,
        }
    }

    /// `cairn` with `args` (org `acme`), this target's store, no stream
    /// set yet.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cairn"));
        command
            .args(args)
            .env("CAIRN_DATA_DIR", self.dir.join("data"))
            .env("CAIRN_ORG", "acme")
            .env_remove("CAIRN_DATABASE_URL")
            .env_remove("CAIRN_EMBEDDING_MODEL")
            .env_remove("CAIRN_EMBEDDING_ENDPOINT")
            .current_dir(self.dir);
        if let Some(url) = self.database {
            command.env("CAIRN_DATABASE_URL", url);
        }
        command
    }

    /// Starts `cairn` with `args` (org `acme`), every stream piped, for a
    /// test that talks to it while it runs.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cairn runs")
    }

    /// Runs `cairn` with `args` (org `acme`), feeding `stdin` if given.
    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> Run {
        let mut child = self
            .command(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cairn runs");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// What a `cairn` run did.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cairn` on the embedded store in `dir/data`.
pub fn cairn_in(dir: &Path, args: &[&str], stdin: Option<&str>) -> Run {
    Target::embedded(dir).run(args, stdin)
}

/// A run's stdout as JSON.
pub fn json(run: &Run) -> Value {
    serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {} / {}", run.stdout, run.stderr))
}

/// Asserts that `cairn verify` fails at record `seq` for `reason`.
pub fn expect_broken(target: Target<'_>, extra: &[&str], seq: i64, reason: &str) {
    let mut args = vec!["verify", "--json"];
    args.extend_from_slice(extra);
    let run = target.run(&args, None);
    let verdict = json(&run);
    assert_eq!(run.code, 1, "{verdict}");
    assert_eq!(verdict["brokenReason"], reason, "{verdict}");
    assert_eq!(verdict["brokenAtSequence"], seq, "{verdict}");
}

pub const SEED_000_SESSION: &str = r#"{"session_id":"revenue-analysis-q4","step_type":"Observation","content":"User asked for Q4 revenue breakdown by segment","metadata":{"channel":"chat"}}
{"session_id":"revenue-analysis-q4","step_type":"ToolCall","content":"Querying orders table","input_data":{"sql":"SELECT segment, SUM(revenue) FROM orders WHERE quarter='Q4' GROUP BY 1"},"metadata":{"tool":"sql"}}
{"session_id":"revenue-analysis-q4","step_type":"Reasoning","content":"Enterprise grew 23% QoQ while SMB declined 5%.","confidence":0.88,"metadata":{"k":1}}
{"session_id":"revenue-analysis-q4","step_type":"FinalAnswer","content":"Q4 revenue was $7.49M, up 15% QoQ.","confidence":0.95,"metadata":{"k":2}}
"#;

/// A store with two sessions, interleaved (one helper step, the analyst's
/// session, two more helper steps), checkpointed; returns the checkpoint.
pub fn populated(target: Target<'_>) -> String {
    populate_with(target, SEED_000_SESSION)
}

/// Records step `i` of the helper agent's session `other` (as the
/// populated store's own are recorded).
pub fn helper_step(target: Target<'_>, i: usize) {
    let content = format!("side note {i}");
    let run = target.run(
        &[
            "log",
            "--session",
            "other",
            "--agent",
            "helper",
            "--type",
            "thinking",
            "--content",
            &content,
            "--metadata",
            "{\"n\":1}",
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
}

/// Records the sample sessions and checkpoints; returns the checkpoint.
pub fn populate_with(target: Target<'_>, analyst_session: &str) -> String {
    helper_step(target, 0);
    let run = target.run(
        &["log", "--stdin", "--agent", "analyst"],
        Some(analyst_session),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    helper_step(target, 1);
    helper_step(target, 2);
    let run = target.run(&["checkpoint"], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout
}

/// Logs `count` more steps of the helper's session in one `log --stdin`
/// (a log long enough to hold stored subtrees: one every 16 leaves).
pub fn log_many(target: Target<'_>, count: usize) {
    let lines: String = (0..count)
        .map(|i| {
            format!(
                "{{\"session_id\":\"other\",\"step_type\":\"thinking\",\"content\":\"bulk note {i}\"}}\n"
            )
        })
        .collect();
    let run = target.run(&["log", "--stdin", "--agent", "helper"], Some(&lines));
    assert_eq!(run.code, 0, "{}", run.stderr);
}

/// What verification must say after a tampering of the stored tree.
#[derive(Clone, Copy, Debug)]
pub enum NodeVerdict {
    /// `inclusion-mismatch` at this seq.
    AtEntry(i64),
    /// `inclusion-mismatch` at this seq, while readers, which compute what
    /// they cannot use from below, still give right proofs: a session's
    /// export (a proof per entry, from the stored tree) verifies.
    ProofsHoldAtEntry(i64),
    /// `inclusion-mismatch` at no entry (found after the log).
    AfterTheLog,
    /// `inclusion-mismatch` at no entry (a row missing, reported after
    /// the log), while readers still give right proofs.
    ProofsHoldAfterTheLog,
}

/// Tamperings of the stored subtree hashes (`nodes`) of a log of more
/// than 256 entries, as SQL statements of SQLite or PostgreSQL run by an
/// attacker with the triggers off: (name, statements, the verdict).
pub fn node_tamperings(postgres: bool) -> Vec<(&'static str, String, NodeVerdict)> {
    let (zero, short, ones) = if postgres {
        (
            "decode(repeat('00', 32), 'hex')",
            "'\\x0102'::bytea",
            "decode(repeat('ff', 32), 'hex')",
        )
    } else {
        (
            "zeroblob(32)",
            "x'0102'",
            "x'ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff'",
        )
    };
    // The table's key and its hash's NOT NULL removed, as a superuser may
    // (SQLite: the table copied without them).
    let unkeyed = if postgres {
        "ALTER TABLE nodes DROP CONSTRAINT nodes_pkey; ALTER TABLE nodes ALTER COLUMN hash DROP NOT NULL;"
    } else {
        "CREATE TABLE unkeyed AS SELECT * FROM nodes; DROP TABLE nodes; ALTER TABLE unkeyed RENAME TO nodes;"
    };
    let mut cases = vec![
        (
            "level 4, a row deleted and the next one repeated in its place, the key removed",
            format!(
                "{unkeyed} DELETE FROM nodes WHERE level = 4 AND idx = 5;
                 INSERT INTO nodes (org, level, idx, hash) SELECT org, level, idx, hash FROM nodes WHERE level = 4 AND idx = 6"
            ),
            // Readers compute the range from below; verification names
            // the repeated index (the missing one only after the log).
            NodeVerdict::ProofsHoldAtEntry(111),
        ),
        (
            "level 4, a null hash beside the row, the key removed",
            format!(
                "{unkeyed} INSERT INTO nodes (org, level, idx, hash) SELECT org, level, idx, NULL FROM nodes WHERE level = 4 AND idx = 5"
            ),
            NodeVerdict::ProofsHoldAtEntry(95),
        ),
        (
            "level 4, a null hash",
            format!("{unkeyed} UPDATE nodes SET hash = NULL WHERE level = 4 AND idx = 3"),
            NodeVerdict::AtEntry(63),
        ),
        (
            "level 4, a row planted past the log's end",
            "INSERT INTO nodes (org, level, idx, hash) SELECT org, 4, 1000, hash FROM nodes WHERE level = 4 AND idx = 0".into(),
            NodeVerdict::AfterTheLog,
        ),
        (
            "level 4, first subtree, edited",
            format!("UPDATE nodes SET hash = {zero} WHERE level = 4 AND idx = 0"),
            NodeVerdict::AtEntry(15),
        ),
        (
            "level 4, fourth subtree, not a hash",
            format!("UPDATE nodes SET hash = {short} WHERE level = 4 AND idx = 3"),
            NodeVerdict::AtEntry(63),
        ),
        (
            "level 8, first subtree, another subtree's hash",
            "UPDATE nodes SET hash = (SELECT hash FROM nodes WHERE level = 4 AND idx = 1) WHERE level = 8 AND idx = 0".into(),
            NodeVerdict::AtEntry(255),
        ),
        (
            "level 4, a second row for a subtree, the key removed",
            format!(
                "{unkeyed} INSERT INTO nodes (org, level, idx, hash) SELECT org, level, idx, {ones} FROM nodes WHERE level = 4 AND idx = 5"
            ),
            NodeVerdict::ProofsHoldAtEntry(95),
        ),
        (
            "level 4, a row deleted",
            "DELETE FROM nodes WHERE level = 4 AND idx = 2".into(),
            NodeVerdict::ProofsHoldAfterTheLog,
        ),
        (
            "level 8, a row deleted",
            "DELETE FROM nodes WHERE level = 8 AND idx = 0".into(),
            NodeVerdict::ProofsHoldAfterTheLog,
        ),
        (
            "every row deleted",
            "DELETE FROM nodes".into(),
            NodeVerdict::ProofsHoldAfterTheLog,
        ),
        // Rows where no append writes one: readers never use them, so
        // only the scan after the log can name them.
        (
            "level 4, a row planted at index -1",
            "INSERT INTO nodes (org, level, idx, hash) SELECT org, 4, -1, hash FROM nodes WHERE level = 4 AND idx = 0".into(),
            NodeVerdict::ProofsHoldAfterTheLog,
        ),
        (
            "a row planted at level 5",
            "INSERT INTO nodes (org, level, idx, hash) SELECT org, 5, 0, hash FROM nodes WHERE level = 4 AND idx = 0".into(),
            NodeVerdict::ProofsHoldAfterTheLog,
        ),
        (
            "a row planted at level 0",
            "INSERT INTO nodes (org, level, idx, hash) SELECT org, 0, 0, hash FROM nodes WHERE level = 4 AND idx = 0".into(),
            NodeVerdict::ProofsHoldAfterTheLog,
        ),
        (
            "a row planted at level 44",
            "INSERT INTO nodes (org, level, idx, hash) SELECT org, 44, 0, hash FROM nodes WHERE level = 4 AND idx = 0".into(),
            NodeVerdict::ProofsHoldAfterTheLog,
        ),
    ];
    if !postgres {
        // SQLite keeps any type in any column: a row whose index is not an
        // integer must not hide the rows after it from the comparison.
        cases.push((
            "level 4, a row deleted and a fractional index planted in its place",
            "DELETE FROM nodes WHERE level = 4 AND idx = 5;
             INSERT INTO nodes (org, level, idx, hash) VALUES (1, 4, 5.5, zeroblob(32))"
                .into(),
            // Readers compute the range from below; verification names the
            // missing row, after the log.
            NodeVerdict::ProofsHoldAfterTheLog,
        ));
        cases.push((
            "level 4, a whole-number real index past the log's end (it takes the integer's key)",
            "CREATE TABLE loose (org INTEGER NOT NULL, level INTEGER NOT NULL, idx NOT NULL, hash BLOB NOT NULL,
               PRIMARY KEY (org, level, idx)) WITHOUT ROWID;
             INSERT INTO loose SELECT * FROM nodes; DROP TABLE nodes; ALTER TABLE loose RENAME TO nodes;
             INSERT INTO nodes (org, level, idx, hash) SELECT org, 4, 1000.0, hash FROM nodes WHERE level = 4 AND idx = 0"
                .into(),
            NodeVerdict::AfterTheLog,
        ));
        cases.push((
            "level 4, the right bytes as text",
            "UPDATE nodes SET hash = CAST(hash AS TEXT) WHERE level = 4 AND idx = 0".into(),
            NodeVerdict::AtEntry(15),
        ));
        cases.push((
            "level 4, a fractional index before an edited row",
            "INSERT INTO nodes (org, level, idx, hash) SELECT org, 4, 1.5, hash FROM nodes WHERE level = 4 AND idx = 1;
             UPDATE nodes SET hash = zeroblob(32) WHERE level = 4 AND idx = 2"
                .into(),
            NodeVerdict::AtEntry(47),
        ));
    }
    cases
}

/// What the `nodes` table holds, to tell that a tampering changed it.
pub const NODES_DIGEST_SQL: &str =
    "SELECT count(*) || ':' || coalesce(sum(length(hash) * (idx + 1)), 0) FROM nodes";

/// Session `other`'s export (written to `file` in the target's directory)
/// verifies: proofs are computed from the stored tree, one per entry.
fn session_proofs_verify(target: Target<'_>, name: &str, file: &str) {
    let bundle = target.dir.join(file);
    let bundle = bundle.to_str().unwrap();
    let run = target.run(&["export", "--session", "other", "-o", bundle], None);
    assert_eq!(run.code, 0, "{name}: {}", run.stderr);
    let run = target.run(&["verify", "--bundle", bundle], None);
    assert_eq!(run.code, 0, "{name}: {} {}", run.stdout, run.stderr);
}

/// After one of [`node_tamperings`]: the verdict it must give.
pub fn expect_node_verdict(target: Target<'_>, name: &str, verdict: NodeVerdict) {
    let seq = match verdict {
        NodeVerdict::ProofsHoldAtEntry(_) | NodeVerdict::ProofsHoldAfterTheLog => {
            session_proofs_verify(target, name, "session.bundle");
            match verdict {
                NodeVerdict::ProofsHoldAtEntry(seq) => Value::from(seq),
                _ => Value::Null,
            }
        }
        NodeVerdict::AtEntry(seq) => Value::from(seq),
        NodeVerdict::AfterTheLog => Value::Null,
    };
    let run = target.run(&["verify", "--json"], None);
    let verdict = json(&run);
    assert_eq!(run.code, 1, "{name}: {verdict}");
    assert_eq!(
        verdict["brokenReason"], "inclusion-mismatch",
        "{name}: {verdict}"
    );
    assert_eq!(verdict["brokenAtSequence"], seq, "{name}: {verdict}");
    let detail = verdict["detail"].as_str().unwrap();
    assert!(detail.contains("stored tree"), "{name}: {detail}");
    // Failed at an entry: that entry counted once, the one before it the
    // last valid (FORMAT 9.6).
    if let Some(seq) = seq.as_i64() {
        assert_eq!(verdict["totalChecked"], seq + 1, "{name}: {verdict}");
        assert_eq!(verdict["lastValidSequence"], seq - 1, "{name}: {verdict}");
    }
}

/// After one of [`node_tamperings`] and its verdict: `cairn admin
/// repair-tree` rebuilds the rows from the log, the org verifies again, and
/// a session's proofs (computed from the rows) verify.
pub fn expect_tree_repaired(target: Target<'_>, name: &str) {
    let run = target.run(&["--json", "admin", "repair-tree"], None);
    let answer = json(&run);
    assert_eq!(run.code, 0, "{name}: {answer} {}", run.stderr);
    assert_eq!(answer["repaired"], true, "{name}: {answer}");
    assert_eq!(answer["verified"], true, "{name}: {answer}");
    let changed = ["missing_written", "replaced", "unusable_removed"]
        .iter()
        .map(|k| answer[k].as_u64().unwrap())
        .sum::<u64>();
    assert!(changed > 0, "{name}: nothing repaired: {answer}");
    let run = target.run(&["verify", "--json"], None);
    assert_eq!(run.code, 0, "{name}: after the repair: {}", run.stdout);
    session_proofs_verify(target, name, "repaired.bundle");
    // A second run finds nothing to change.
    let run = target.run(&["--json", "admin", "repair-tree"], None);
    let again = json(&run);
    assert_eq!(run.code, 0, "{name}: {again}");
    for k in ["missing_written", "replaced", "unusable_removed"] {
        assert_eq!(again[k], 0, "{name}: {again}");
    }
}

/// Copies a directory and everything in it (a data directory, say).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// A running `cairn serve`, killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cairn serve` on a free port with the data directory
/// `dir/data` (org `acme`) and, if `url` is given, that database; returns
/// it and the admin key it printed, if it was the first.
pub fn serve(dir: &Path, url: Option<&str>) -> (Server, Option<String>) {
    serve_with(dir, url, &[], &[])
}

/// [`serve`] with more arguments and environment variables (a fault
/// injection shim, shorter limits).
pub fn serve_with(
    dir: &Path,
    url: Option<&str>,
    args: &[&str],
    envs: &[(&str, &std::ffi::OsStr)],
) -> (Server, Option<String>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cairn"));
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .envs(envs.iter().copied())
        .env("CAIRN_DATA_DIR", dir.join("data"))
        .env_remove("CAIRN_DATABASE_URL")
        .env("CAIRN_ORG", "acme")
        .env("CAIRN_LOG", "warn");
    if let Some(url) = url {
        command.env("CAIRN_DATABASE_URL", url);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut admin = None;
    let addr = loop {
        let line = lines
            .next()
            .expect("cairn serve printed where it listens")
            .unwrap();
        if let Some(token) = line
            .split(": ")
            .nth(1)
            .filter(|_| line.contains("admin API key"))
        {
            admin = Some(token.trim().to_owned());
        }
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    // Keep draining stdout so the server never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    (Server { child, addr }, admin)
}

/// The `hidden` column of a step erased in the exact shape Cairn writes,
/// computed from its line in a complete bundle (values and salts): what an
/// attacker who holds the store can compute from the row's seed.
pub fn erasure_shape(bundle: &str, seq: i64) -> String {
    use cairn_core::commit::{Field, Opening};
    let line = bundle
        .lines()
        .find(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .and_then(|v| v["seq"].as_i64())
                == Some(seq)
        })
        .expect("the step is in the bundle");
    let (entry, _) = cairn_core::bundle::decode_entry(line).unwrap();
    let cairn_core::log::LogRecord::Step(mut record) = entry.record else {
        panic!("not a step")
    };
    let mut hidden = serde_json::Map::new();
    for field in [
        Field::Content,
        Field::InputData,
        Field::OutputData,
        Field::Metadata,
    ] {
        record.hide(field).unwrap();
        if let Opening::Hidden(c) = record.openings.get(field) {
            hidden.insert(field.name().into(), Value::String(c.to_hex()));
        }
    }
    Value::Object(hidden).to_string()
}
