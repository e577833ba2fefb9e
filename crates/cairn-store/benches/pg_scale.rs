//! How every cost a user meets grows with the ledger, on PostgreSQL: the
//! embedded store's scale benchmark (`benches/scale.rs`, whose workload,
//! measurements and tables this shares through `benches/common/scale.rs`)
//! run against a `PgStore`. One store on a throwaway PostgreSQL 15 cluster
//! (`fsync=on`, `synchronous_commit=on`: a commit waits for its WAL flush),
//! written through the `Ledger` (64 writers with 64 steps in flight each,
//! every step durable, checkpoints signed as in production), grows through
//! milestones of 10k, 100k and 1M steps (and 10M with
//! `CAIRN_BENCH_SCALE=full`): sessions of ~100 steps of ~900 bytes dealt
//! in turn to 10 orgs of 100 agents, plus a 1,000-step session in org 0
//! written first. After each milestone's load the database is vacuumed
//! and analyzed (as autovacuum would, but before measuring rather than
//! during it). At each milestone, each figure beside a baseline from
//! the same run, on the same database (the machines are shared: compare
//! ratios, not times):
//!
//! - ingest of the increment (steps/s, peak RSS) against raw binary `COPY`
//!   of rows shaped like Cairn's `entries` rows (as `benches/pg.rs`: a
//!   copy of `entries` with its indexes and without triggers), one
//!   connection, one transaction per batch of the size the sequencer
//!   reached (the table is dropped afterwards);
//! - bytes per step (`pg_database_size`: tables, indexes and TOAST, not
//!   the WAL) against the step's canonical JSON, and the bytes per log
//!   entry of each relation (table with its TOAST, or index) over 1% of
//!   the database, measured after each milestone's vacuum;
//! - `verify_org` of org 0 (records/s, peak RSS) against one plain
//!   `SELECT` streaming org 0's rows with SHA-256 over each row's bytes
//!   (its columns' binary wire values);
//! - replay of the 1,000-step session and its export against one `SELECT`
//!   of its 1,000 rows by primary key (`id = ANY($1)`: one round trip, as
//!   the least a client must do; point reads one by one, the embedded
//!   baseline, would cost 1,000 round trips);
//! - listing pages of an agent's sessions (first and half-way down,
//!   keyset) against the raw keyset query of the first page on `sessions`;
//! - inclusion and consistency proofs (p50/p99, some verified against
//!   signed checkpoints) against as many raw point reads of leaf hashes
//!   (one round trip each) as a proof has hashes;
//! - the whole org's export against the raw read of its rows;
//! - the start (`PgStore::open`, which checks the schema and the server
//!   key, + `Ledger::new`; then the first write against the second)
//!   against connecting and reading the last row;
//! - and the checkpoint cadence under load (intervals between org 0's
//!   checkpoints while it grows).
//!
//! Peak RSS is this process's (the writers, the `Ledger`, the store's
//! client side): PostgreSQL's own memory is in its server processes and is
//! not counted.
//!
//! ```sh
//! PATH=/usr/local/bin:$PATH cargo bench -p cairn-store --bench pg_scale
//! ```
//!
//! `CAIRN_BENCH_SCALE_MILESTONES=10000,100000` picks the milestones. The
//! cluster lives in the temporary directory. Without PostgreSQL (`initdb`,
//! `pg_ctl` on PATH) it says so and does nothing, except under `CI`, where
//! that is a failure. `cargo test --benches` runs it once at 2,000 and
//! 5,000 steps and checks every answer.

// Benchmark fixtures: a failed unwrap is a broken benchmark.
#![allow(clippy::unwrap_used)]

#[path = "common/scale.rs"]
mod common;

use cairn_core::Hash;
use cairn_store::pg::{PgOptions, PgStore};
use cairn_store::{Ledger, LedgerStore, SequencerConfig, ServerKey};
use cairn_testkit::PgCluster;
use common::{Backend, Labels, LeafReader, ORG0, PAGE, RawReads, RowsReader, content};
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::{FromSql, Type};
use postgres::{Client, NoTls, Row, Statement};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn connect(url: &str) -> Client {
    Client::connect(url, NoTls).unwrap()
}

/// A column's value as PostgreSQL sent it (binary format), whatever its
/// type.
struct WireBytes<'a>(&'a [u8]);

impl<'a> FromSql<'a> for WireBytes<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(WireBytes(raw))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Appends the bytes of every column of `row` to `buf` (nothing for NULL).
fn push_row(row: &Row, buf: &mut Vec<u8>) {
    for i in 0..row.len() {
        if let Some(WireBytes(b)) = row.get::<_, Option<WireBytes<'_>>>(i) {
            buf.extend_from_slice(b);
        }
    }
}

/// Raw binary `COPY` of `total` rows like Cairn's step entries into a
/// trigger-free copy of `entries` with its indexes, `batch` rows per
/// transaction, on one connection; the table is dropped afterwards.
fn raw_copy(url: &str, batch: usize, total: u64) -> f64 {
    let mut client = connect(url);
    client
        .batch_execute(
            "DROP TABLE IF EXISTS raw_entries;
             CREATE TABLE raw_entries (LIKE entries INCLUDING DEFAULTS INCLUDING INDEXES);",
        )
        .unwrap();
    let types = [
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::BYTEA,
        Type::BYTEA,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::FLOAT8,
        Type::TEXT,
        Type::INT8,
        Type::TEXT,
        Type::BYTEA,
        Type::BYTEA,
        Type::BYTEA,
        Type::INT8,
        Type::INT8,
    ];
    let started = Instant::now();
    let mut seq = 0u64;
    while seq < total {
        let mut tx = client.transaction().unwrap();
        let sink = tx
            .copy_in(
                "COPY raw_entries (id, org, seq, type, record_hash, leaf_hash, sid, step_index,
                 trace_id, agent_id, kind, kind_label, content, confidence, model, created_at, status,
                 seed, digest, prev_hash, prev_seq, logged_at) FROM STDIN BINARY",
            )
            .unwrap();
        let mut writer = BinaryCopyInWriter::new(sink, &types);
        for _ in 0..batch.min((total - seq) as usize) {
            let hash = Hash::sha256(&seq.to_be_bytes());
            let h = &hash.0[..];
            let s = seq as i64;
            writer
                .write(&[
                    &((1i64 << 40) | s),
                    &1i64,
                    &s,
                    &"step",
                    &h,
                    &h,
                    &(s % 64),
                    &(s / 64),
                    &format!("0190aaaa-bbbb-7ccc-8ddd-{seq:012x}"),
                    &"agent",
                    &"reasoning",
                    &"Reasoning",
                    &content(seq),
                    &0.9f64,
                    &"gpt-4o",
                    &s,
                    &"ok",
                    &h,
                    &h,
                    &h,
                    &(s - 1),
                    &s,
                ])
                .unwrap();
            seq += 1;
        }
        writer.finish().unwrap();
        tx.commit().unwrap();
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    client.batch_execute("DROP TABLE raw_entries").unwrap();
    rate
}

/// Raw reads of the store's database on one connection of its own.
struct PgRaw {
    client: Client,
    org: i64,
    page: Option<Statement>,
}

impl RawReads for PgRaw {
    fn sessions(&mut self) -> u64 {
        let n: i64 = self
            .client
            .query_one("SELECT COUNT(*) FROM sessions", &[])
            .unwrap()
            .get(0);
        n as u64
    }

    fn scan(&mut self, hash: bool) -> (u64, u64, Duration) {
        let started = Instant::now();
        let stmt = self
            .client
            .prepare("SELECT * FROM entries WHERE id >= $1 AND id < $2 ORDER BY id")
            .unwrap();
        let range = [self.org << 40, (self.org + 1) << 40];
        let mut rows = self.client.query_raw(&stmt, range).unwrap();
        let (mut n, mut bytes, mut buf, mut acc) = (0u64, 0u64, Vec::new(), Hash::ZERO);
        while let Some(row) = rows.next().unwrap() {
            buf.clear();
            push_row(&row, &mut buf);
            if hash {
                acc = Hash::sha256(&buf);
            }
            n += 1;
            bytes += buf.len() as u64;
        }
        std::hint::black_box(acc);
        (n, bytes, started.elapsed())
    }

    fn rows_reader(&mut self) -> RowsReader<'_> {
        let stmt = self
            .client
            .prepare("SELECT * FROM entries WHERE id = ANY($1) ORDER BY id")
            .unwrap();
        let org = self.org;
        let client = &mut self.client;
        Box::new(move |seqs| {
            let ids: Vec<i64> = seqs.iter().map(|&s| (org << 40) | s as i64).collect();
            let rows = client.query(&stmt, &[&ids]).unwrap();
            assert_eq!(rows.len(), seqs.len());
            let mut buf = Vec::new();
            for row in &rows {
                push_row(row, &mut buf);
            }
            std::hint::black_box(buf.len());
        })
    }

    fn leaf_reader(&mut self) -> LeafReader<'_> {
        let stmt = self
            .client
            .prepare("SELECT leaf_hash FROM entries WHERE id = $1")
            .unwrap();
        let org = self.org;
        let client = &mut self.client;
        Box::new(move |seq| {
            let id = (org << 40) | seq as i64;
            let leaf: Vec<u8> = client.query_one(&stmt, &[&id]).unwrap().get(0);
            std::hint::black_box(leaf);
        })
    }

    /// A listing page's raw twin: the same rows of the sessions table.
    fn first_page(&mut self) -> usize {
        if self.page.is_none() {
            self.page = Some(
                self.client
                    .prepare(
                        "SELECT session_id, agent_id, started_at, sid FROM sessions
                         WHERE org = $1 AND agent_id = 'agent-0' AND (started_at, session_id) < ($2, $3)
                         ORDER BY started_at DESC, session_id DESC LIMIT $4",
                    )
                    .unwrap(),
            );
        }
        let stmt = self.page.as_ref().unwrap();
        let (at, id, limit) = (i64::MAX, "", PAGE as i64);
        let rows = self
            .client
            .query(stmt, &[&self.org, &at, &id, &limit])
            .unwrap();
        rows.len()
    }
}

/// Where the database's bytes go: each relation (a table with its TOAST,
/// or an index) over 1% of `pg_database_size`, in bytes per log entry,
/// largest first.
fn bytes_by_relation(url: &str) -> String {
    let rows = connect(url)
        .query(
            "WITH r AS (
               SELECT c.relname, c.relkind,
                      pg_relation_size(c.oid)
                        + COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0) AS bytes
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i'))
             SELECT relname::text, relkind::text,
                    bytes::float8 / GREATEST((SELECT count(*) FROM entries), 1)
             FROM r WHERE bytes * 100 > pg_database_size(current_database())
             ORDER BY bytes DESC",
            &[],
        )
        .unwrap();
    rows.iter()
        .map(|row| {
            let (name, kind, per): (String, String, f64) = (row.get(0), row.get(1), row.get(2));
            let what = if kind == "i" { "index" } else { "table" };
            format!("{name} ({what}) {per:.0}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The store's database on a throwaway cluster (stopped when dropped).
struct Postgres {
    _cluster: PgCluster,
    url: String,
    key: ServerKey,
}

impl Postgres {
    fn store(&self) -> PgStore {
        PgStore::open(PgOptions::new(&self.url), self.key.clone()).unwrap()
    }
}

impl Backend for Postgres {
    const LABELS: Labels = Labels {
        title: "Scale of the PostgreSQL store",
        note: " Peak RSS is this process's (writers, Ledger, the store's client side): PostgreSQL's memory is in its own processes, not counted. Bytes per step: pg_database_size (tables, indexes, TOAST; not the WAL).",
        raw_insert: "raw binary COPY rows/s, same batch",
        disk: "pg_database_size B/step",
        open: "PgStore::open + Ledger::new ms",
        raw_open: "raw connect + last row ms",
    };

    fn open_ledger(&mut self) -> Ledger {
        Ledger::new(Arc::new(self.store()), SequencerConfig::default())
    }

    fn raw_inserts(&mut self, batch: usize, total: u64) -> f64 {
        raw_copy(&self.url, batch, total)
    }

    fn settle(&mut self) -> Option<String> {
        // After a load of up to millions of rows autovacuum vacuums and
        // analyzes the tables (tens of seconds at 1M), starting when its
        // launcher next looks: measured beside it, the proofs took 2.6 ms
        // p50 at 1M instead of 1.0. Vacuuming here (autovacuum gives way
        // to it) measures the store at rest, as a user meets it.
        let started = std::time::Instant::now();
        connect(&self.url)
            .batch_execute("VACUUM (ANALYZE)")
            .unwrap();
        Some(format!(
            "VACUUM (ANALYZE) before measuring: {:.1} s",
            started.elapsed().as_secs_f64()
        ))
    }

    fn disk_bytes(&mut self) -> u64 {
        let size: i64 = connect(&self.url)
            .query_one("SELECT pg_database_size(current_database())", &[])
            .unwrap()
            .get(0);
        size as u64
    }

    fn disk_parts(&mut self) -> Option<String> {
        Some(bytes_by_relation(&self.url))
    }

    fn raw(&mut self) -> Box<dyn RawReads> {
        let mut client = connect(&self.url);
        let org: i64 = client
            .query_one("SELECT org FROM orgs WHERE name = $1", &[&ORG0])
            .unwrap()
            .get(0);
        Box::new(PgRaw {
            client,
            org,
            page: None,
        })
    }

    fn reader(&mut self) -> Box<dyn LedgerStore> {
        Box::new(self.store())
    }

    fn raw_last_row(&mut self) {
        let row = connect(&self.url)
            .query_one("SELECT * FROM entries ORDER BY id DESC LIMIT 1", &[])
            .unwrap();
        std::hint::black_box(row.len());
    }
}

fn main() {
    let (milestones, test) = common::milestones();
    // Outside CI, no PostgreSQL on PATH skips (saying so); under `CI` the
    // test kit fails instead.
    let Some(cluster) = PgCluster::start_durable() else {
        return;
    };
    let url = cluster.create_database("cairn_scale");
    let key_dir = tempfile::tempdir().unwrap();
    let key = cairn_store::load_or_create_server_key(key_dir.path(), "bench.local").unwrap();
    eprintln!(
        "pg_scale: milestones {milestones:?} in a cluster under {}",
        cluster.data_dir().display()
    );
    let mut backend = Postgres {
        _cluster: cluster,
        url,
        key,
    };
    common::run(&mut backend, "pg_scale", &milestones, test);
}
