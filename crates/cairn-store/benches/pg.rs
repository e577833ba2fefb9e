//! PostgreSQL ingest with 1, 2 and 3 servers on one database, against raw
//! batched `COPY` of the same rows measured in the same run.
//!
//! A "server" here is what a `cairn serve` process contributes to the
//! database: its own [`PgStore`] (connection, caches) and its own
//! sequencer, with 16 writer threads in front of it (HTTP is left out:
//! `benches/http.rs` measures that layer). The cluster is a throwaway one
//! with `fsync=on` and PostgreSQL's default `synchronous_commit=on`, so a
//! commit waits for its WAL flush as in production.
//!
//! Two workloads: every server writing to the **same org** (their batches
//! serialize on the org's lock: one org's log is one sequence), and each
//! server writing to **its own org**. The baseline inserts the same rows
//! (same columns and sizes as Cairn's `entries` rows) into a copy of the
//! `entries` table with its indexes and without triggers, from as many
//! connections as there are servers, one `COPY` and one commit per batch
//! of the size Cairn's sequencers reached.
//!
//! `cargo bench -p cairn-store --bench pg` (`CAIRN_BENCH_STEPS` sets the
//! number of steps per run, `CAIRN_BENCH_PG_WRITERS` the writer threads
//! per server, 16 by default).

// Benchmark fixtures: a failed unwrap is a broken benchmark.
#![allow(clippy::unwrap_used)]

use cairn_core::Hash;
use cairn_store::pg::{PgOptions, PgStore};
use cairn_store::{Ledger, LedgerStore, NewStep, SequencerConfig, WriteRequest};
use cairn_testkit::PgCluster;
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::Type;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// Closed-loop writer threads per server (each waits for its
/// acknowledgement before it sends again), unless `CAIRN_BENCH_PG_WRITERS`
/// says otherwise: the number of writers bounds a batch's size.
const WRITERS_PER_SERVER: usize = 16;

fn writers_per_server() -> usize {
    std::env::var("CAIRN_BENCH_PG_WRITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(WRITERS_PER_SERVER)
}
const CONTENT: &str = "The revenue data shows a clear upward trend in Q4, driven primarily by the enterprise segment which grew 23% QoQ. Mid-market held steady while SMB declined 5%, concentrated in three accounts that churned after the pricing change. ";

fn content(i: u64) -> String {
    // About 900 bytes, varying so that pages do not compress into one.
    format!("{i}: {}", CONTENT.repeat(4))
}

struct Run {
    steps_per_sec: f64,
    /// Steps per second until the last one is searchable too: until the
    /// stores close, which writes every full-text document still queued
    /// (PostgreSQL writes them after their batch commits).
    searchable_per_sec: f64,
    mean_batch: f64,
}

/// `servers` stores on the database, each with its own sequencer and
/// writers; `shared_org`: all write to one org, else one org each.
fn ingest(url: &str, servers: usize, shared_org: bool, total: u64) -> Run {
    let key_dir = tempfile::tempdir().unwrap();
    let key = cairn_store::load_or_create_server_key(key_dir.path(), "bench.local").unwrap();
    let ledgers: Vec<Arc<Ledger>> = (0..servers)
        .map(|_| {
            let store: Arc<dyn LedgerStore> =
                Arc::new(PgStore::open(PgOptions::new(url), key.clone()).unwrap());
            Arc::new(Ledger::new(store, SequencerConfig::default()))
        })
        .collect();
    let writers = servers * writers_per_server();
    let per_writer = total / writers as u64;
    let started = Instant::now();
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let server = w % servers;
            let ledger = Arc::clone(&ledgers[server]);
            let org = if shared_org {
                "bench".to_owned()
            } else {
                format!("bench-{server}")
            };
            std::thread::spawn(move || {
                for i in 0..per_writer {
                    let step = NewStep {
                        org_id: org.clone(),
                        session_id: format!("session-{w}"),
                        agent_id: format!("agent-{w}"),
                        kind_label: "Reasoning".into(),
                        content: Some(content(i)),
                        confidence: Some(0.9),
                        model: Some("gpt-4o".into()),
                        caller: "bench".into(),
                        ..NewStep::default()
                    };
                    ledger.write(WriteRequest::Step(Box::new(step))).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (batches, requests) = ledgers.iter().fold((0, 0), |(b, r), l| {
        let stats = l.stats();
        (
            b + stats.batches.load(Relaxed),
            r + stats.requests.load(Relaxed),
        )
    });
    drop(ledgers);
    let searchable = started.elapsed().as_secs_f64();
    let steps = (per_writer * writers as u64) as f64;
    Run {
        steps_per_sec: steps / elapsed,
        searchable_per_sec: steps / searchable,
        mean_batch: requests as f64 / batches.max(1) as f64,
    }
}

/// Raw `COPY` of the same rows into a trigger-free copy of `entries`, from
/// `connections` connections at once, `batch` rows per transaction.
fn raw_copy(url: &str, connections: usize, batch: usize, total: u64) -> f64 {
    let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
    admin
        .batch_execute(
            "DROP TABLE IF EXISTS raw_entries;
             CREATE TABLE raw_entries (LIKE entries INCLUDING DEFAULTS INCLUDING INDEXES);",
        )
        .unwrap();
    let per_connection = total / connections as u64;
    let started = Instant::now();
    let threads: Vec<_> = (0..connections as u64)
        .map(|c| {
            let url = url.to_owned();
            std::thread::spawn(move || {
                let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                let mut seq = 0u64;
                while seq < per_connection {
                    let mut tx = client.transaction().unwrap();
                    let sink = tx
                        .copy_in(
                            "COPY raw_entries (id, org, seq, type, record_hash, leaf_hash, sid, step_index,
                             trace_id, agent_id, kind, kind_label, content, confidence, model, created_at, status,
                             seed, digest, prev_hash, prev_seq, logged_at) FROM STDIN BINARY",
                        )
                        .unwrap();
                    let types = [
                        Type::INT8, Type::INT8, Type::INT8, Type::TEXT, Type::BYTEA, Type::BYTEA,
                        Type::INT8, Type::INT8, Type::TEXT, Type::TEXT, Type::TEXT, Type::TEXT,
                        Type::TEXT, Type::FLOAT8, Type::TEXT, Type::INT8, Type::TEXT, Type::BYTEA,
                        Type::BYTEA, Type::BYTEA, Type::INT8, Type::INT8,
                    ];
                    let mut writer = BinaryCopyInWriter::new(sink, &types);
                    for _ in 0..batch.min((per_connection - seq) as usize) {
                        let hash = Hash::sha256(&seq.to_be_bytes());
                        let h = &hash.0[..];
                        let s = seq as i64;
                        let org = c as i64 + 1;
                        writer
                            .write(&[
                                &((org << 40) | s), &org, &s, &"step", &h, &h, &(org * 16 + s % 16),
                                &(s / 16), &format!("0190aaaa-bbbb-7ccc-8ddd-{c:04x}{seq:08x}"),
                                &"agent", &"reasoning", &"Reasoning", &content(seq), &0.9f64,
                                &"gpt-4o", &s, &"ok", &h, &h, &h, &(s - 1), &s,
                            ])
                            .unwrap();
                        seq += 1;
                    }
                    writer.finish().unwrap();
                    tx.commit().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    (per_connection * connections as u64) as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let steps: u64 = std::env::var("CAIRN_BENCH_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24_000);
    // `cargo test --benches` runs this once in test mode: keep it tiny.
    let steps = if std::env::args().any(|a| a == "--bench") {
        steps
    } else {
        480
    };
    let Some(cluster) = PgCluster::start_durable() else {
        return;
    };
    println!(
        "PostgreSQL ingest, {steps} steps of ~900 bytes, {} writers per server, fsync on",
        writers_per_server()
    );
    println!(
        "| servers | orgs | Cairn steps/s | all searchable, steps/s | mean batch | raw COPY rows/s, same batches and connections | ratio |"
    );
    println!("|---|---|---|---|---|---|---|");
    for shared_org in [true, false] {
        for servers in [1usize, 2, 3] {
            if !shared_org && servers == 1 {
                continue;
            }
            let db = format!(
                "bench_{servers}_{}",
                if shared_org { "shared" } else { "own" }
            );
            let url = cluster.create_database(&db);
            let run = ingest(&url, servers, shared_org, steps);
            let batch = run.mean_batch.round().max(1.0) as usize;
            let raw = raw_copy(&url, servers, batch, steps);
            println!(
                "| {servers} | {} | {:.0} | {:.0} | {:.1} | {:.0} | {:.2}× |",
                if shared_org {
                    "one shared"
                } else {
                    "one per server"
                },
                run.steps_per_sec,
                run.searchable_per_sec,
                run.mean_batch,
                raw,
                run.steps_per_sec / raw
            );
        }
    }
}
