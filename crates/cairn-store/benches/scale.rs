//! How every cost a user meets grows with the ledger. One embedded store
//! (SQLite, written through the `Ledger`: 64 writers with 64 steps in
//! flight each, every step durable, checkpoints signed as in production)
//! grows through milestones of 10k, 100k and 1M steps (and 10M with
//! `CAIRN_BENCH_SCALE=full`): sessions of ~100 steps of ~900 bytes dealt
//! in turn to 10 orgs of 100 agents, plus a 1,000-step session in org 0
//! written first. At each milestone, each figure beside a baseline from
//! the same run (the machines are shared: compare ratios, not times):
//! ingest of the increment (steps/s, peak RSS) against raw rusqlite rows
//! in the same batch sizes; bytes on disk per step against its canonical
//! JSON; `verify_org` of org 0 (records/s, peak RSS) against raw reads of
//! its rows with SHA-256 over each; replay of the 1,000-step session,
//! listing pages of an agent's sessions (first and half-way down, keyset)
//! and exports (that session, the whole org) against raw reads of the
//! same rows; inclusion and consistency proofs (p50/p99, some verified
//! against signed checkpoints) against as many raw point reads as a proof
//! has hashes; the start (`SqliteStore::open` + `Ledger::new`, then the
//! first write against the second); and the checkpoint cadence under load
//! (intervals between org 0's checkpoints while it grows).
//!
//! Org 0 is a typical org (a tenth of the store) plus the 1,000-step
//! session; its agent 0 holds one session in ten of the org's (a busy
//! agent, so that its listing has deep pages).
//!
//! ```sh
//! cargo bench -p cairn-store --bench scale                         # 10k, 100k, 1M: ~2 min
//! CAIRN_BENCH_SCALE=full cargo bench -p cairn-store --bench scale  # and 10M
//! ```
//!
//! The full run needs about 18 GB of disk for the store plus 11 GB while
//! the raw baseline of the last increment is written (then removed), and
//! about 20 minutes on a 2-core machine. `CAIRN_BENCH_SCALE_MILESTONES=
//! 10000,100000` picks the milestones, `CAIRN_BENCH_DIR` where the store
//! goes (default: the temporary directory). `cargo test --benches` runs
//! it once at 2,000 and 5,000 steps and checks every answer.
//!
//! The workload, the measurements and the tables are shared with the
//! PostgreSQL version (`pg_scale.rs`) in `common/scale.rs`; this file
//! holds the embedded store and its raw rusqlite baselines.

// Benchmark fixtures: a failed unwrap is a broken benchmark.
#![allow(clippy::unwrap_used)]

#[path = "common/scale.rs"]
mod common;

use cairn_core::Hash;
use cairn_store::{Ledger, LedgerStore, SequencerConfig, SqliteOptions, SqliteStore};
use common::{Backend, Labels, LeafReader, ORG0, PAGE, RawReads, RowsReader, content};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, params};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Raw rusqlite (`store.rs`'s baseline): the same rows (same columns and
/// sizes as Cairn stores), `batch` rows per durable transaction, no
/// secondary index, in a database removed afterwards.
fn raw_inserts(dir: &Path, batch: usize, total: u64) -> f64 {
    let path = dir.join("raw.db");
    let conn = Connection::open(&path).unwrap();
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
            for _ in 0..batch.min((total - seq) as usize) {
                let hash = Hash::sha256(&seq.to_be_bytes());
                stmt.execute(params![
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
    let rate = total as f64 / started.elapsed().as_secs_f64();
    drop(conn);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!("raw.db{suffix}")));
    }
    rate
}

fn raw_conn(db: &Path) -> Connection {
    Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

fn push_value(v: ValueRef<'_>, buf: &mut Vec<u8>) {
    match v {
        ValueRef::Null => {}
        ValueRef::Integer(i) => buf.extend_from_slice(&i.to_le_bytes()),
        ValueRef::Real(f) => buf.extend_from_slice(&f.to_le_bytes()),
        ValueRef::Text(b) | ValueRef::Blob(b) => buf.extend_from_slice(b),
    }
}

/// Raw rusqlite reading every row of an org (its rowid range, as the store
/// does), optionally with SHA-256 over each row's bytes: (rows, bytes).
fn raw_scan(db: &Path, org: i64, hash: bool) -> (u64, u64, Duration) {
    let conn = raw_conn(db);
    let started = Instant::now();
    let mut stmt = conn
        .prepare("SELECT * FROM entries WHERE id >= ?1 AND id < ?2 ORDER BY id")
        .unwrap();
    let columns = stmt.column_count();
    let mut rows = stmt.query(params![org << 40, (org + 1) << 40]).unwrap();
    let (mut n, mut bytes, mut buf, mut acc) = (0u64, 0u64, Vec::new(), Hash::ZERO);
    while let Some(row) = rows.next().unwrap() {
        buf.clear();
        for i in 0..columns {
            push_value(row.get_ref(i).unwrap(), &mut buf);
        }
        if hash {
            acc = Hash::sha256(&buf);
        }
        n += 1;
        bytes += buf.len() as u64;
    }
    std::hint::black_box(acc);
    (n, bytes, started.elapsed())
}

/// Raw rusqlite reads of the store's database, read-only.
struct SqliteRaw {
    db: PathBuf,
    conn: Connection,
    org: i64,
}

impl RawReads for SqliteRaw {
    fn sessions(&mut self) -> u64 {
        self.conn
            .query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get::<_, i64>(0))
            .unwrap() as u64
    }

    fn scan(&mut self, hash: bool) -> (u64, u64, Duration) {
        raw_scan(&self.db, self.org, hash)
    }

    fn rows_reader(&mut self) -> RowsReader<'_> {
        let mut stmt = self
            .conn
            .prepare("SELECT * FROM entries WHERE id = ?1")
            .unwrap();
        let columns = stmt.column_count();
        let org = self.org;
        Box::new(move |seqs| {
            let mut buf = Vec::new();
            for &seq in seqs {
                stmt.query_row([(org << 40) | seq as i64], |r| {
                    for i in 0..columns {
                        push_value(r.get_ref(i)?, &mut buf);
                    }
                    Ok(())
                })
                .unwrap();
            }
            std::hint::black_box(buf.len());
        })
    }

    fn leaf_reader(&mut self) -> LeafReader<'_> {
        let mut stmt = self
            .conn
            .prepare("SELECT leaf_hash FROM entries WHERE id = ?1")
            .unwrap();
        let org = self.org;
        Box::new(move |seq| {
            let leaf: Vec<u8> = stmt
                .query_row([(org << 40) | seq as i64], |r| r.get(0))
                .unwrap();
            std::hint::black_box(leaf);
        })
    }

    /// A listing page's raw twin: the same rows of the sessions table.
    fn first_page(&mut self) -> usize {
        let (at, id) = (i64::MAX, String::new());
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT session_id, agent_id, started_at, sid FROM sessions
                 WHERE org = ?1 AND agent_id = 'agent-0' AND (started_at, session_id) < (?2, ?3)
                 ORDER BY started_at DESC, session_id DESC LIMIT ?4",
            )
            .unwrap();
        let rows = stmt.query_map(params![self.org, at, id, PAGE as i64], |r| {
            r.get::<_, String>(0)
        });
        rows.unwrap().count()
    }
}

/// Bytes of every file of the data directory, after a WAL checkpoint.
fn disk_bytes(dir: &Path) -> u64 {
    let conn = Connection::open(dir.join("ledger.db")).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// The embedded store in `dir`, its raw baseline's database in `raw_dir`.
struct Embedded {
    dir: PathBuf,
    raw_dir: PathBuf,
    /// The sequenced store, for its batch timings (weak: closing the
    /// ledger must close the store and free its directory).
    store: std::sync::Weak<SqliteStore>,
}

impl Backend for Embedded {
    const LABELS: Labels = Labels {
        title: "Scale of the embedded store",
        note: "",
        raw_insert: "raw rusqlite rows/s, same batch",
        disk: "disk B/step",
        open: "open + Ledger::new ms",
        raw_open: "raw open + last row ms",
    };

    fn open_ledger(&mut self) -> Ledger {
        let store = Arc::new(SqliteStore::open(&self.dir, SqliteOptions::default()).unwrap());
        self.store = Arc::downgrade(&store);
        Ledger::new(store, SequencerConfig::default())
    }

    fn batch_parts(&self) -> Option<String> {
        let store = self.store.upgrade()?;
        let parts = store.slowest_batch_parts();
        let s = |slot: &std::sync::atomic::AtomicU64| {
            slot.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e6
        };
        Some(format!(
            "index wait {:.2} s (slowest index chunk {:.2} s), rows {:.2} s, commit {:.2} s",
            s(&parts.index_flush),
            store.slowest_index_chunk_micros() as f64 / 1e6,
            s(&parts.rows),
            s(&parts.commit)
        ))
    }

    fn raw_inserts(&mut self, batch: usize, total: u64) -> f64 {
        raw_inserts(&self.raw_dir, batch, total)
    }

    fn disk_bytes(&mut self) -> u64 {
        disk_bytes(&self.dir)
    }

    fn raw(&mut self) -> Box<dyn RawReads> {
        let db = self.dir.join("ledger.db");
        let conn = raw_conn(&db);
        let org: i64 = conn
            .query_row("SELECT org FROM orgs WHERE name = ?1", [ORG0], |r| r.get(0))
            .unwrap();
        Box::new(SqliteRaw { db, conn, org })
    }

    fn reader(&mut self) -> Box<dyn LedgerStore> {
        let options = SqliteOptions {
            sequencer: false,
            ..SqliteOptions::default()
        };
        Box::new(SqliteStore::open(&self.dir, options).unwrap())
    }

    fn raw_last_row(&mut self) {
        let conn = raw_conn(&self.dir.join("ledger.db"));
        let max: i64 = conn
            .query_row("SELECT MAX(id) FROM entries", [], |r| r.get(0))
            .unwrap();
        std::hint::black_box(max);
    }
}

fn main() {
    let (milestones, test) = common::milestones();
    let base = std::env::var_os("CAIRN_BENCH_DIR").map_or_else(std::env::temp_dir, Into::into);
    std::fs::create_dir_all(&base).unwrap();
    let work = tempfile::tempdir_in(&base).unwrap();
    let dir = work.path().join("store");
    let raw_dir = work.path().join("raw");
    std::fs::create_dir_all(&raw_dir).unwrap();
    eprintln!("scale: milestones {milestones:?} in {}", dir.display());
    common::run(
        &mut Embedded {
            dir,
            raw_dir,
            store: std::sync::Weak::new(),
        },
        "scale",
        &milestones,
        test,
    );
}
