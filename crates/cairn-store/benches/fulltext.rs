//! Full-text search at a million steps: a common word, a rare word, a
//! phrase, a prefix, Japanese, and a word with filters, through
//! `LedgerStore::full_text_search` (the store's part of `GET /v1/search`),
//! against raw rusqlite answering the same MATCH over the same documents
//! in a plain FTS5 table, in the same run. First, the time to segment a
//! step's text into its document (every write does it) against copying
//! the same bytes lower-cased, and the document's lexemes as PostgreSQL's
//! binary `tsvector` (every write to PostgreSQL does it).
//!
//! `cargo bench -p cairn-store --bench fulltext` (`CAIRN_BENCH_STEPS` sets
//! the size, default 1,000,000; `cargo test --benches` runs it once, tiny).

// Benchmark fixtures: a failed unwrap is a broken benchmark.
#![allow(clippy::unwrap_used)]

use cairn_core::kind::StepKind;
use cairn_store::fulltext::lexemes::tsvector_binary;
use cairn_store::fulltext::{FullTextQuery, segment};
use cairn_store::{
    Ledger, LedgerStore, NewStep, SequencerConfig, SqliteOptions, SqliteStore, StepFilter,
    WriteRequest,
};
use rusqlite::{Connection, params};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ORG: &str = "bench";
const STEPS_PER_SESSION: u64 = 20;
const LIMIT: usize = 10;

const WORDS: [&str; 24] = [
    "revenue", "orders", "customer", "refund", "pricing", "segment", "query", "table", "invoice",
    "shipment", "latency", "error", "retry", "timeout", "account", "churn", "forecast", "budget",
    "ticket", "deploy", "cache", "index", "report", "review",
];

fn content(session: u64, index: u64) -> String {
    let n = session * STEPS_PER_SESSION + index;
    let pick = |k: u64| WORDS[((n.wrapping_mul(2654435761) >> k) % WORDS.len() as u64) as usize];
    let mut text = format!(
        "Step {index}: checked the {} {} for the {} and the {} {}.",
        pick(3),
        pick(7),
        pick(11),
        pick(13),
        pick(17)
    );
    // One step in 10,000 mentions a rare word; one in 1,000 is Japanese.
    if n % 10_000 == 7 {
        text.push_str(" The zeppelin schedule slipped.");
    }
    if n % 1_000 == 3 {
        text.push_str(" [実行] 注文テーブルを検索しています");
    }
    text
}

fn fill(dir: &std::path::Path, steps: u64) -> Vec<String> {
    let store: Arc<dyn LedgerStore> =
        Arc::new(SqliteStore::open(dir, SqliteOptions::default()).unwrap());
    let ledger = Ledger::new(store, SequencerConfig::default());
    let sessions = steps / STEPS_PER_SESSION;
    let mut documents = Vec::with_capacity(steps as usize);
    let wave = 100;
    let mut first = 0;
    while first < sessions {
        let last = (first + wave).min(sessions);
        for index in 0..STEPS_PER_SESSION {
            let pending: Vec<_> = (first..last)
                .map(|s| {
                    let text = content(s, index);
                    documents.push(segment(&text));
                    ledger.submit(WriteRequest::Step(Box::new(NewStep {
                        org_id: ORG.into(),
                        session_id: format!("session-{s:07}"),
                        agent_id: format!("agent-{}", s % 10),
                        kind_label: if index % 5 == 4 {
                            "Decision"
                        } else {
                            "Observation"
                        }
                        .into(),
                        content: Some(text),
                        caller: "bench".into(),
                        ..NewStep::default()
                    })))
                })
                .collect();
            for p in pending {
                p.wait().unwrap();
            }
        }
        first = last;
    }
    ledger.close();
    documents
}

fn raw_fts(path: &std::path::Path, documents: &[String]) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE VIRTUAL TABLE docs USING fts5(doc, tokenize = 'porter unicode61 remove_diacritics 2', content = '');",
    )
    .unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    for (i, doc) in documents.iter().enumerate() {
        tx.execute(
            "INSERT INTO docs (rowid, doc) VALUES (?1, ?2)",
            params![i as i64, doc],
        )
        .unwrap();
    }
    tx.commit().unwrap();
    conn
}

fn median(runs: usize, mut f: impl FnMut() -> usize) -> (Duration, usize) {
    let mut times = Vec::with_capacity(runs);
    let mut rows = 0;
    for _ in 0..runs {
        let started = Instant::now();
        rows = f();
        times.push(started.elapsed());
    }
    times.sort();
    (times[runs / 2], rows)
}

/// A step's text as every write segments it (`fulltext::segment`, run
/// for each step's document on the write path of both backends), against
/// the least any segmenting does with the same bytes: copying them
/// lower-cased (`str::to_lowercase`, which has an ASCII fast path).
fn segmenting(count: usize) {
    let prose = "The revenue data shows a clear upward trend in Q4, driven primarily by the \
        enterprise segment which grew 23% QoQ. Mid-market held steady while SMB declined 5%, \
        concentrated in three accounts that churned after the pricing change (see report #42: \
        \"churn-analysis/2026-Q4.csv\"). ";
    let texts: Vec<String> = (0..64)
        .map(|i| format!("{i}: {}", prose.repeat(3)))
        .collect();
    // µs per text: the median of five passes over `count` texts.
    let per_text = |f: &dyn Fn(&str) -> usize| {
        let (time, _) = median(5, || {
            (0..count)
                .map(|i| f(std::hint::black_box(&texts[i % texts.len()])))
                .sum()
        });
        time.as_secs_f64() * 1e6 / count as f64
    };
    let segmented = per_text(&|text| segment(text).len());
    let lowered = per_text(&|text| text.to_lowercase().len());
    let tsvector = per_text(&|text| tsvector_binary(&segment(text)).len());
    println!(
        "Segmenting a {}-byte step text: {segmented:.2} µs (copying it lower-cased: {lowered:.2} µs, {:.1}×); with its lexemes as PostgreSQL's binary tsvector: {tsvector:.2} µs",
        texts[0].len(),
        segmented / lowered
    );
}

fn main() {
    let steps: u64 = std::env::var("CAIRN_BENCH_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let steps = if std::env::args().any(|a| a == "--bench") {
        steps
    } else {
        STEPS_PER_SESSION * 1_000
    };
    segmenting(if steps > 100_000 { 200_000 } else { 2_000 });
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let documents = fill(dir.path(), steps);
    println!(
        "Full-text search over {steps} steps, filled (and indexed) in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let store = SqliteStore::open(
        dir.path(),
        SqliteOptions {
            sequencer: false,
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    let raw = raw_fts(&dir.path().join("raw.db"), &documents);
    let all = StepFilter::default();
    let decisions_of_one_agent = StepFilter {
        agent_id: Some("agent-3".into()),
        kind: Some(StepKind::Decision),
        ..StepFilter::default()
    };
    let cases: [(&str, &str, &StepFilter); 6] = [
        ("a common word (1 step in 5)", "revenue", &all),
        ("a rare word (1 in 10,000)", "zeppelin", &all),
        ("a phrase", "\"orders table\"", &all),
        ("a prefix", "forec*", &all),
        ("Japanese (1 in 1,000)", "注文", &all),
        (
            "a common word, one agent's decisions",
            "revenue",
            &decisions_of_one_agent,
        ),
    ];
    println!("| top {LIMIT} | median | raw FTS5, same MATCH, same documents | ratio |");
    println!("|---|---|---|---|");
    let runs = 21;
    for (name, text, filter) in cases {
        let query = FullTextQuery::parse(text).unwrap();
        let (time, rows) = median(runs, || {
            store
                .full_text_search(ORG, &query, filter, LIMIT)
                .unwrap()
                .len()
        });
        assert!(rows > 0, "{name}: nothing found");
        let fts5 = query.to_fts5();
        let (raw_time, _) = median(runs, || {
            let mut stmt = raw
                .prepare_cached(
                    "SELECT rowid FROM docs WHERE docs MATCH ?1 ORDER BY bm25(docs) LIMIT ?2",
                )
                .unwrap();
            stmt.query_map(params![fts5, LIMIT as i64], |r| r.get::<_, i64>(0))
                .unwrap()
                .count()
        });
        println!(
            "| {name} | {:.2} ms | {:.2} ms | {:.1}× |",
            time.as_secs_f64() * 1e3,
            raw_time.as_secs_f64() * 1e3,
            time.as_secs_f64() / raw_time.as_secs_f64()
        );
    }
}
