//! Storage benchmarks, each against a baseline measured in the same run:
//!
//! - durable ingest with 1, 8 and 64 concurrent writers (interleaved
//!   sessions, ~900-byte steps, every step acknowledged only after its
//!   batch's fsync) against raw rusqlite inserts of the same rows in the
//!   same batch sizes (same pragmas: WAL, `synchronous=FULL`, one
//!   transaction per batch, a table without secondary indexes);
//! - full-store verification (every digest recomputed, every chain link,
//!   the Merkle root against the checkpoints) against raw SHA-256 of the
//!   same bytes.
//!
//! `cargo bench -p cairn-store --bench store` (set `CAIRN_BENCH_STEPS` to
//! change the size; the default suits a 2-core machine).

// Benchmark fixtures: a failed unwrap is a broken benchmark.
#![allow(clippy::unwrap_used)]

use cairn_core::Hash;
use cairn_store::ops::verify_org;
use cairn_store::{
    Ledger, LedgerStore, NewStep, SequencerConfig, SqliteOptions, SqliteStore, WriteRequest,
};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

const CONTENT: &str = "The revenue data shows a clear upward trend in Q4, driven primarily by the enterprise segment which grew 23% QoQ. Mid-market held steady while SMB declined 5%, concentrated in three accounts that churned after the pricing change. ";

fn content(i: u64) -> String {
    // About 900 bytes, varying so that pages do not compress into one.
    format!("{i}: {}", CONTENT.repeat(4))
}

fn new_step(writer: usize, i: u64) -> NewStep {
    NewStep {
        org_id: "bench".into(),
        session_id: format!("session-{writer}"),
        agent_id: format!("agent-{writer}"),
        kind_label: "Reasoning".into(),
        content: Some(content(i)),
        confidence: Some(0.9),
        model: Some("gpt-4o".into()),
        caller: "bench".into(),
        ..NewStep::default()
    }
}

struct Ingest {
    steps_per_sec: f64,
    /// Until every step is also in the full-text index (written by its own
    /// thread after the acknowledgements): what a long run sustains.
    searchable_per_sec: f64,
    mean_batch: f64,
}

/// Waits until every acknowledged step is in the full-text index (a search
/// in the writing process writes what is queued first).
fn searchable(store: &dyn LedgerStore) {
    let query = cairn_store::fulltext::FullTextQuery::parse("revenue").unwrap();
    store
        .full_text_search("bench", &query, &cairn_store::StepFilter::default(), 1)
        .unwrap();
}

/// `writers` threads, each with up to `in_flight` steps submitted and not
/// yet acknowledged (1: each waits for its step's commit before the next,
/// as a simple agent does; more: a writer that sends a turn's steps at once
/// or uses the batch endpoint).
fn ingest(dir: &std::path::Path, writers: usize, in_flight: u64, total: u64) -> Ingest {
    let store: Arc<dyn LedgerStore> =
        Arc::new(SqliteStore::open(dir, SqliteOptions::default()).unwrap());
    let ledger = Arc::new(Ledger::new(Arc::clone(&store), SequencerConfig::default()));
    let per_writer = total / writers as u64;
    let started = Instant::now();
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let ledger = Arc::clone(&ledger);
            std::thread::spawn(move || {
                let mut i = 0;
                while i < per_writer {
                    let end = (i + in_flight).min(per_writer);
                    let pending: Vec<_> = (i..end)
                        .map(|j| ledger.submit(WriteRequest::Step(Box::new(new_step(w, j)))))
                        .collect();
                    for p in pending {
                        p.wait().unwrap();
                    }
                    i = end;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let elapsed = started.elapsed();
    searchable(store.as_ref());
    let indexed = started.elapsed();
    let batches = ledger.stats().batches.load(Relaxed) as f64;
    let requests = ledger.stats().requests.load(Relaxed) as f64;
    let steps = (per_writer * writers as u64) as f64;
    Ingest {
        steps_per_sec: steps / elapsed.as_secs_f64(),
        searchable_per_sec: steps / indexed.as_secs_f64(),
        mean_batch: requests / batches,
    }
}

/// `writers` async tasks on a two-thread runtime (as `cairn serve` runs
/// its requests), each submitting one step and awaiting its
/// acknowledgement before the next: a batch's replies wake tasks, not 64
/// OS threads.
fn ingest_async(dir: &std::path::Path, writers: usize, total: u64) -> Ingest {
    let store: Arc<dyn LedgerStore> =
        Arc::new(SqliteStore::open(dir, SqliteOptions::default()).unwrap());
    let ledger = Arc::new(Ledger::new(Arc::clone(&store), SequencerConfig::default()));
    let per_writer = total / writers as u64;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let started = Instant::now();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..writers)
            .map(|w| {
                let ledger = Arc::clone(&ledger);
                tokio::spawn(async move {
                    for i in 0..per_writer {
                        ledger
                            .submit(WriteRequest::Step(Box::new(new_step(w, i))))
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    let elapsed = started.elapsed();
    searchable(store.as_ref());
    let indexed = started.elapsed();
    let batches = ledger.stats().batches.load(Relaxed) as f64;
    let requests = ledger.stats().requests.load(Relaxed) as f64;
    let steps = (per_writer * writers as u64) as f64;
    Ingest {
        steps_per_sec: steps / elapsed.as_secs_f64(),
        searchable_per_sec: steps / indexed.as_secs_f64(),
        mean_batch: requests / batches,
    }
}

/// Raw rusqlite: the same rows (same columns and sizes as Cairn stores),
/// `batch` rows per transaction, durable commits, no secondary index.
fn raw_inserts(dir: &std::path::Path, batch: usize, total: u64) -> f64 {
    let conn = rusqlite::Connection::open(dir.join("raw.db")).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
         CREATE TABLE raw (org INTEGER, seq INTEGER, type TEXT, record_hash BLOB, leaf_hash BLOB, sid INTEGER,
           step_index INTEGER, trace_id TEXT, agent_id TEXT, kind TEXT, kind_label TEXT, content TEXT,
           confidence REAL, model TEXT, created_at INTEGER, status TEXT, seed BLOB, digest BLOB, prev_hash BLOB,
           PRIMARY KEY (org, seq));",
    )
    .unwrap();
    let started = Instant::now();
    let mut seq = 0u64;
    while seq < total {
        let tx = conn.unchecked_transaction().unwrap();
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO raw VALUES (1, ?1, 'step', ?2, ?2, ?3, ?4, ?5, 'agent', 'reasoning', 'Reasoning', ?6,
                     0.9, 'gpt-4o', ?7, 'ok', ?2, ?2, ?2)",
                )
                .unwrap();
            for _ in 0..batch {
                let hash = Hash::sha256(&seq.to_be_bytes());
                stmt.execute(rusqlite::params![
                    seq as i64,
                    &hash.0[..],
                    (seq % 64) as i64,
                    (seq / 64) as i64,
                    format!("0190aaaa-bbbb-7ccc-8ddd-{seq:012x}"),
                    content(seq),
                    seq as i64
                ])
                .unwrap();
                seq += 1;
            }
        }
        tx.commit().unwrap();
    }
    total as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let steps: u64 = std::env::var("CAIRN_BENCH_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64_000);
    // `cargo test --benches` runs this once in test mode: keep it tiny.
    let steps = if std::env::args().any(|a| a == "--bench") {
        steps
    } else {
        640
    };
    println!(
        "Durable ingest, {steps} steps of ~900 bytes (1 writer: {} steps)",
        steps / 8
    );
    println!(
        "| writers | Cairn steps/s | ... and all searchable | mean batch | raw rusqlite rows/s, same batch size | ratio |"
    );
    println!("|---|---|---|---|---|---|");
    // `CAIRN_BENCH_WRITERS=64` runs only the listed writer counts (and no
    // verification unless 64 is among them), for quick experiments.
    let only: Option<Vec<usize>> = std::env::var("CAIRN_BENCH_WRITERS")
        .ok()
        .map(|v| v.split(',').filter_map(|w| w.trim().parse().ok()).collect());
    let mut verify_dir = None;
    for writers in [1usize, 8, 64] {
        if only.as_ref().is_some_and(|o| !o.contains(&writers)) {
            continue;
        }
        let total = if writers == 1 { steps / 8 } else { steps };
        let dir = tempfile::tempdir().unwrap();
        let result = ingest(dir.path(), writers, 1, total);
        let raw_dir = tempfile::tempdir().unwrap();
        let batch = result.mean_batch.round().max(1.0) as usize;
        let raw = raw_inserts(raw_dir.path(), batch, total);
        println!(
            "| {writers} | {:.0} | {:.0} | {:.1} | {:.0} | {:.2}× |",
            result.steps_per_sec,
            result.searchable_per_sec,
            result.mean_batch,
            raw,
            result.steps_per_sec / raw
        );
        if writers == 64 {
            verify_dir = Some(dir);
        }
    }
    // The same 64 writers as async tasks.
    let dir = tempfile::tempdir().unwrap();
    let result = ingest_async(dir.path(), 64, steps);
    let raw_dir = tempfile::tempdir().unwrap();
    let batch = result.mean_batch.round().max(1.0) as usize;
    let raw = raw_inserts(raw_dir.path(), batch, steps);
    println!(
        "| 64 async tasks | {:.0} | {:.0} | {:.1} | {:.0} | {:.2}× |",
        result.steps_per_sec,
        result.searchable_per_sec,
        result.mean_batch,
        raw,
        result.steps_per_sec / raw
    );
    // Writers that keep several steps in flight (a turn's steps, the batch
    // endpoint): batches grow, and so does throughput.
    let in_flight = 64;
    let dir = tempfile::tempdir().unwrap();
    let result = ingest(dir.path(), 64, in_flight, steps);
    let raw_dir = tempfile::tempdir().unwrap();
    let batch = result.mean_batch.round().max(1.0) as usize;
    let raw = raw_inserts(raw_dir.path(), batch, steps);
    println!(
        "| 64, {in_flight} in flight each | {:.0} | {:.0} | {:.1} | {:.0} | {:.2}× |",
        result.steps_per_sec,
        result.searchable_per_sec,
        result.mean_batch,
        raw,
        result.steps_per_sec / raw
    );
    let raw_dir = tempfile::tempdir().unwrap();
    println!(
        "(reference: raw rusqlite in batches of 10,000 rows: {:.0} rows/s)",
        raw_inserts(raw_dir.path(), 10_000, steps.max(10_000))
    );

    let Some(dir) = verify_dir else {
        return;
    };
    let ledger = Ledger::new(
        Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap()),
        SequencerConfig::default(),
    );
    ledger
        .write(WriteRequest::Checkpoint {
            org_id: "bench".into(),
        })
        .unwrap();
    ledger.close();
    // One sequencing process per data directory: verify through a
    // read-only open, as `cairn verify` beside a server does.
    let store = SqliteStore::open(
        dir.path(),
        SqliteOptions {
            sequencer: false,
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    let started = Instant::now();
    let verdict = verify_org(&store, "bench", &[], &[], &mut |_| {}).unwrap();
    let elapsed = started.elapsed();
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
    let records = verdict.log_size;
    // Baseline: raw SHA-256 over the same bytes (each step's content and
    // fixed fields, about the canonical size of a step).
    let sample = content(12345);
    let per_step_bytes = sample.len() + 120;
    let buffer = vec![0x5au8; per_step_bytes];
    let started_sha = Instant::now();
    let mut acc = Hash::ZERO;
    for _ in 0..records {
        acc = Hash::sha256(&buffer);
    }
    std::hint::black_box(acc);
    let sha_elapsed = started_sha.elapsed().max(Duration::from_nanos(1));
    println!(
        "\nFull-store verification of {records} records (digests recomputed, chains, Merkle root vs checkpoints)"
    );
    println!("| what | records/s | raw SHA-256 of the same bytes, per s | ratio |");
    println!("|---|---|---|---|");
    let rate = records as f64 / elapsed.as_secs_f64();
    let sha_rate = records as f64 / sha_elapsed.as_secs_f64();
    println!(
        "| verify_org | {rate:.0} | {sha_rate:.0} | {:.3}× |",
        rate / sha_rate
    );
}
