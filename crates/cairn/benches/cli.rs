//! The `cairn` binary as a user runs it, side by side with raw SQLite in
//! the same run (ratios, not absolute figures, compare across runs):
//!
//! - `cairn log --stdin` of N JSON-lines steps (~850 bytes each, over N/100
//!   sessions) against raw rusqlite inserting the same lines (WAL,
//!   `synchronous=FULL`, commits of 1,000 rows, one unique index);
//! - `cairn verify` of that store (every digest recomputed) against reading
//!   every raw row back and hashing its bytes with SHA-256;
//! - `cairn export --all` and `cairn verify --bundle` of the export against
//!   reading the bundle file and hashing it;
//! - bytes on disk per step against the bytes of the input lines.
//!
//! `cargo bench -p cairn --bench cli` (100,000 steps; `CAIRN_BENCH_STEPS`
//! changes it). `cargo test --benches` runs it once with 2,000 steps.

// Benchmark fixtures: a failed unwrap is a broken benchmark.
#![allow(clippy::unwrap_used)]

use cairn_core::Hash;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Words of agent prose: steps built from them compress like real text,
/// not like one sentence repeated.
const WORDS: &[&str] = &[
    "the",
    "revenue",
    "segment",
    "enterprise",
    "grew",
    "quarter",
    "while",
    "mid-market",
    "held",
    "steady",
    "churned",
    "accounts",
    "pricing",
    "change",
    "query",
    "orders",
    "table",
    "returned",
    "rows",
    "latency",
    "doubled",
    "after",
    "deploy",
    "rolled",
    "back",
    "hypothesis",
    "confirmed",
    "customer",
    "asked",
    "for",
    "breakdown",
    "by",
    "region",
    "and",
    "product",
    "line",
    "tool",
    "call",
    "failed",
    "with",
    "timeout",
    "retrying",
    "smaller",
    "window",
    "plan",
    "next",
    "step",
    "compare",
    "against",
    "baseline",
    "of",
    "last",
    "year",
    "SMB",
    "declined",
    "5%",
    "23%",
    "QoQ",
    "in",
    "Q4",
    "three",
    "concentrated",
    "west",
    "EMEA",
    "APAC",
    "forecast",
    "risk",
];

/// A deterministic pseudo-random generator (xorshift): the same input every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn prose(rng: &mut Rng, bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 16);
    while text.len() < bytes {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(WORDS[(rng.next() % WORDS.len() as u64) as usize]);
    }
    text
}

/// The input: `steps` JSON lines over `steps / 100` sessions, interleaved.
fn input(steps: u64) -> Vec<String> {
    let sessions = (steps / 100).max(1);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..steps)
        .map(|i| {
            let session = i % sessions;
            let kind = ["Observation", "Reasoning", "ToolCall", "Decision"][(i % 4) as usize];
            serde_json::json!({
                "session_id": format!("session-{session}"),
                "agent_id": format!("agent-{}", session % 50),
                "step_type": kind,
                "content": prose(&mut rng, 700),
                "confidence": 0.9,
                "model": "gpt-4o",
                "metadata": {"tool": "sql", "rows": i % 1000},
            })
            .to_string()
        })
        .collect()
}

fn cairn(data: &Path, args: &[&str], stdin: Option<&[u8]>) -> (Duration, Vec<u8>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .env("CAIRN_DATA_DIR", data)
        .env("CAIRN_ORG", "bench")
        .env_remove("CAIRN_DATABASE_URL")
        .env_remove("CAIRN_EMBEDDING_MODEL")
        .env_remove("CAIRN_EMBEDDING_ENDPOINT")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let writer = stdin.map(|bytes| {
        let mut pipe = child.stdin.take().unwrap();
        let bytes = bytes.to_vec();
        std::thread::spawn(move || pipe.write_all(&bytes).unwrap())
    });
    let output = child.wait_with_output().unwrap();
    let elapsed = started.elapsed();
    if let Some(writer) = writer {
        writer.join().unwrap();
    }
    assert!(
        output.status.success(),
        "cairn {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    (elapsed, output.stdout)
}

/// Raw rusqlite: the input lines' fields in a table with one unique index,
/// commits of 1,000 rows, durable.
fn raw_inserts(path: &Path, lines: &[String]) -> Duration {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
         CREATE TABLE steps (id INTEGER PRIMARY KEY, trace_id TEXT NOT NULL UNIQUE, session_id TEXT,
           agent_id TEXT, step_type TEXT, content TEXT, confidence REAL, model TEXT, metadata TEXT);",
    )
    .unwrap();
    let started = Instant::now();
    let mut id = 0u64;
    for chunk in lines.chunks(1000) {
        let tx = conn.unchecked_transaction().unwrap();
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO steps (trace_id, session_id, agent_id, step_type, content, confidence, model, metadata)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .unwrap();
            for line in chunk {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                id += 1;
                stmt.execute(rusqlite::params![
                    // Time-ordered, as Cairn's UUIDv7 trace ids are.
                    format!("0190aaaa-bbbb-7ccc-8ddd-{id:012x}"),
                    v["session_id"].as_str(),
                    v["agent_id"].as_str(),
                    v["step_type"].as_str(),
                    v["content"].as_str(),
                    v["confidence"].as_f64(),
                    v["model"].as_str(),
                    v["metadata"].to_string(),
                ])
                .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    started.elapsed()
}

/// Reads every row of `table` and hashes each row's column bytes.
fn raw_read_and_hash(path: &Path, table: &str) -> (Duration, u64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let started = Instant::now();
    let mut stmt = conn.prepare(&format!("SELECT * FROM {table}")).unwrap();
    let columns = stmt.column_count();
    let mut rows = stmt.query([]).unwrap();
    let mut count = 0u64;
    let mut buffer = Vec::new();
    let mut acc = Hash::ZERO;
    while let Some(row) = rows.next().unwrap() {
        buffer.clear();
        for c in 0..columns {
            match row.get_ref(c).unwrap() {
                rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => {
                    buffer.extend_from_slice(b)
                }
                rusqlite::types::ValueRef::Integer(i) => buffer.extend_from_slice(&i.to_le_bytes()),
                rusqlite::types::ValueRef::Real(f) => buffer.extend_from_slice(&f.to_le_bytes()),
                rusqlite::types::ValueRef::Null => {}
            }
        }
        acc = Hash::sha256(&buffer);
        count += 1;
    }
    std::hint::black_box(acc);
    (started.elapsed(), count)
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

fn rate(count: u64, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64()
}

fn main() {
    let steps: u64 = std::env::var("CAIRN_BENCH_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    // `cargo test --benches` runs this once in test mode: keep it small.
    let steps = if std::env::args().any(|a| a == "--bench") {
        steps
    } else {
        2_000
    };
    let lines = input(steps);
    let mut stdin = lines.join("\n").into_bytes();
    stdin.push(b'\n');
    let input_bytes = stdin.len() as u64;
    let temporary = tempfile::tempdir().unwrap();
    // `CAIRN_BENCH_KEEP=1` leaves the store, the input and the bundle for
    // profiling (the path is printed).
    let work_path = if std::env::var_os("CAIRN_BENCH_KEEP").is_some() {
        let kept = temporary.keep();
        println!("kept in {}", kept.display());
        kept
    } else {
        temporary.path().to_path_buf()
    };
    std::fs::write(work_path.join("input.jsonl"), &stdin).unwrap();
    let work = &work_path;
    let data = work.join("data");

    let (logged, answers) = cairn(&data, &["log", "--stdin"], Some(&stdin));
    let answered = answers.iter().filter(|&&b| b == b'\n').count() as u64;
    assert_eq!(answered, steps, "one answer per line");
    let raw_db = work.join("raw.db");
    let raw_logged = raw_inserts(&raw_db, &lines);

    let (verified, verdict) = cairn(&data, &["verify", "--json"], None);
    let verdict: serde_json::Value = serde_json::from_slice(&verdict).unwrap();
    assert_eq!(verdict["verified"], true, "{verdict}");
    let records = verdict["recordsChecked"].as_u64().unwrap_or(steps);
    let (raw_read, raw_rows) = raw_read_and_hash(&data.join("ledger.db"), "entries");

    let bundle = work.join("bundle.jsonl");
    let (exported, _) = cairn(
        &data,
        &["export", "--all", "-o", bundle.to_str().unwrap()],
        None,
    );
    let bundle_bytes = std::fs::metadata(&bundle).unwrap().len();
    let (bundle_verified, verdict) = cairn(
        &data,
        &["verify", "--json", "--bundle", bundle.to_str().unwrap()],
        None,
    );
    let verdict: serde_json::Value = serde_json::from_slice(&verdict).unwrap();
    assert_eq!(verdict["verified"], true, "{verdict}");
    let started = Instant::now();
    let text = std::fs::read(&bundle).unwrap();
    let mut acc = Hash::ZERO;
    for line in text.split(|&b| b == b'\n') {
        acc = Hash::sha256(line);
    }
    std::hint::black_box(acc);
    let raw_bundle = started.elapsed();

    let store_bytes = dir_bytes(&data);
    let raw_bytes: u64 = ["raw.db", "raw.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(work.join(f)).ok())
        .map(|m| m.len())
        .sum();

    println!(
        "\n`cairn` from the command line: {steps} steps of ~850 bytes ({} MB of JSON lines) over {} sessions",
        input_bytes / 1_000_000,
        (steps / 100).max(1)
    );
    println!("| what | cairn | raw baseline, same run | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| `cairn log --stdin` (durable, steps/s) | {:.0} | {:.0} rows/s (rusqlite, commits of 1,000, one unique index) | {:.2}× |",
        rate(steps, logged),
        rate(steps, raw_logged),
        raw_logged.as_secs_f64() / logged.as_secs_f64()
    );
    println!(
        "| `cairn verify` (whole store, records/s) | {:.0} | {:.0} rows/s (read every row, SHA-256 of its bytes) | {:.2}× |",
        rate(records, verified),
        rate(raw_rows, raw_read),
        raw_read.as_secs_f64() / verified.as_secs_f64()
    );
    println!(
        "| `cairn export --all` (MB/s of bundle) | {:.1} | | |",
        bundle_bytes as f64 / 1e6 / exported.as_secs_f64()
    );
    println!(
        "| `cairn verify --bundle` (records/s) | {:.0} | {:.0} lines/s (read the file, SHA-256 of each line) | {:.2}× |",
        rate(records, bundle_verified),
        rate(records, raw_bundle),
        raw_bundle.as_secs_f64() / bundle_verified.as_secs_f64()
    );
    println!(
        "| bytes on disk per step | {:.0} ({:.2}× the input line) | {:.0} (raw SQLite, {:.2}×) | |",
        store_bytes as f64 / steps as f64,
        store_bytes as f64 / input_bytes as f64,
        raw_bytes as f64 / steps as f64,
        raw_bytes as f64 / input_bytes as f64,
    );
}
