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

// Benchmark fixtures: a failed unwrap is a broken benchmark.
#![allow(clippy::unwrap_used)]

use cairn_core::Hash;
use cairn_core::bundle::{BundleVerifier, bundle_lines};
use cairn_core::commit::{FIELDS, write_field_value};
use cairn_core::merkle::{verify_consistency, verify_inclusion};
use cairn_store::ops::{ExportScope, export, trusted_checkpoint, verify_org};
use cairn_store::{
    Ledger, LedgerStore, NewStep, SequencerConfig, SessionCursor, SessionFilter, SqliteOptions,
    SqliteStore, StoredCheckpoint, WriteRequest,
};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, params};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

const ORGS: u64 = 10;
const AGENTS: u64 = 100;
const MEAN_SESSION: u64 = 100;
const REPLAY_STEPS: u64 = 1_000;
const REPLAY_SESSION: &str = "replay-1000";
const ORG0: &str = "org-0";
const WRITERS: usize = 64;
const IN_FLIGHT: usize = 64;
const PAGE: usize = 50;
const KINDS: &str = "Observation Reasoning ToolCall ToolResult Decision";
const CONTENT: &str = "The revenue data shows a clear upward trend in Q4, driven primarily by the enterprise segment which grew 23% QoQ. Mid-market held steady while SMB declined 5%, concentrated in three accounts that churned after the pricing change. ";

/// A deterministic mix (splitmix64), for lengths, agents and samples.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Clone)]
struct Session {
    id: String,
    org: u64,
    agent: u64,
    steps: u64,
    n: u64,
}

/// Session `n`: orgs in turn; one session in ten of an org is agent 0's.
fn session(n: u64, steps: u64) -> Session {
    let local = n / ORGS;
    let agent = if local.is_multiple_of(10) {
        0
    } else {
        1 + mix(n) % (AGENTS - 1)
    };
    Session {
        id: format!("s-{n:08}"),
        org: n % ORGS,
        agent,
        steps,
        n,
    }
}

/// Sessions of 50 to 150 steps (100 on average) holding `steps` in all.
fn plan(next: &mut u64, mut steps: u64) -> Vec<Session> {
    let mut out = Vec::new();
    while steps > 0 {
        let mut len = MEAN_SESSION / 2 + mix(*next ^ 0x5eed) % (MEAN_SESSION + 1);
        if steps < len + MEAN_SESSION / 2 {
            len = steps;
        }
        out.push(session(*next, len));
        *next += 1;
        steps -= len;
    }
    out
}

/// About 900 bytes of text, rotated per step so that pages differ.
fn content(key: u64) -> String {
    let cut = (mix(key) % CONTENT.len() as u64) as usize;
    let turned = format!("{}{}", &CONTENT[cut..], &CONTENT[..cut]);
    format!("{key}: {}", turned.repeat(4))
}

fn new_step(s: &Session, index: u64) -> NewStep {
    NewStep {
        org_id: format!("org-{}", s.org),
        session_id: s.id.clone(),
        agent_id: format!("agent-{}", s.agent),
        kind_label: KINDS.split(' ').nth((index % 5) as usize).unwrap().into(),
        content: Some(content(s.n.wrapping_mul(1 << 20) + index)),
        confidence: Some(0.9),
        model: Some("gpt-4o".into()),
        caller: "bench".into(),
        ..NewStep::default()
    }
}

/// Resets the kernel's peak RSS of this process to its current RSS.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// A `/proc/self/status` figure (`VmHWM`, `VmRSS`) in MB.
fn vm_mb(key: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The median and the 99th percentile of `times`.
fn p50_p99(mut times: Vec<Duration>) -> (Duration, Duration) {
    times.sort_unstable();
    let at = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.99))
}

/// `runs` timings of `f`.
fn timed(runs: usize, mut f: impl FnMut()) -> Vec<Duration> {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect()
}

#[derive(Default)]
struct Growth {
    steps: u64,
    steps_per_sec: f64,
    mean_batch: f64,
    raw_per_sec: f64,
    peak_mb: f64,
    secs: f64,
    /// With the checkpoints signed after it and the raw baseline.
    total_secs: f64,
    /// Checkpoints of org 0 signed during the increment, and the intervals
    /// between them (s) and leaves each added.
    checkpoints: usize,
    intervals: Vec<f64>,
    leaves: Vec<u64>,
    /// The sequencer's longest batch write and longest round of
    /// maintenance (checkpoint signing) in the increment, s: what a gap in
    /// the cadence waited on.
    slowest_batch: f64,
    slowest_maintenance: f64,
}

/// Writes `sessions` through `ledger`: `WRITERS` threads, each keeping up
/// to `IN_FLIGHT` steps submitted and not yet acknowledged.
fn grow(ledger: &Ledger, sessions: &[Session], raw_dir: &Path) -> Growth {
    let (batches0, requests0) = (
        ledger.stats().batches.load(Relaxed),
        ledger.stats().requests.load(Relaxed),
    );
    let steps: u64 = sessions.iter().map(|s| s.steps).sum();
    reset_peak();
    let from = cairn_store::now();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            scope.spawn(move || {
                let mut pending = VecDeque::with_capacity(IN_FLIGHT);
                for s in sessions.iter().skip(w).step_by(WRITERS) {
                    for i in 0..s.steps {
                        if pending.len() == IN_FLIGHT {
                            let p: cairn_store::Pending = pending.pop_front().unwrap();
                            p.wait().unwrap();
                        }
                        let step = WriteRequest::Step(Box::new(new_step(s, i)));
                        pending.push_back(ledger.submit(step));
                    }
                }
                for p in pending {
                    p.wait().unwrap();
                }
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let to = cairn_store::now();
    let peak_mb = vm_mb("VmHWM");
    let slowest_batch = ledger.stats().slowest_batch_micros.load(Relaxed) as f64 / 1e6;
    let slowest_maintenance = ledger.stats().slowest_maintenance_micros.load(Relaxed) as f64 / 1e6;
    let batches = (ledger.stats().batches.load(Relaxed) - batches0).max(1) as f64;
    let requests = (ledger.stats().requests.load(Relaxed) - requests0) as f64;
    let cps: Vec<StoredCheckpoint> = ledger
        .store()
        .checkpoints(ORG0)
        .unwrap()
        .into_iter()
        .filter(|c| c.created_at >= from && c.created_at <= to)
        .collect();
    // Sign a checkpoint of every org at its full size, for the
    // measurements (proofs, exports, verification cover everything).
    for org in ledger.store().orgs().unwrap() {
        ledger
            .write(WriteRequest::Checkpoint { org_id: org })
            .unwrap();
    }
    let mean_batch = requests / batches;
    let raw_per_sec = raw_inserts(raw_dir, mean_batch.round().max(1.0) as usize, steps);
    Growth {
        steps,
        steps_per_sec: steps as f64 / secs,
        mean_batch,
        raw_per_sec,
        peak_mb,
        secs,
        total_secs: started.elapsed().as_secs_f64(),
        checkpoints: cps.len(),
        intervals: cps
            .windows(2)
            .map(|w| (w[1].created_at.as_micros() - w[0].created_at.as_micros()) as f64 / 1e6)
            .collect(),
        leaves: cps.windows(2).map(|w| w[1].size - w[0].size).collect(),
        slowest_batch,
        slowest_maintenance,
    }
}

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

/// Everything measured at one milestone.
#[derive(Default)]
struct Row {
    steps: u64,
    sessions: u64,
    org_entries: u64,
    growth: Growth,
    disk_per_step: f64,
    json_per_step: f64,
    verify_rate: f64,
    raw_scan_rate: f64,
    verify_peak_mb: f64,
    rss_before_verify_mb: f64,
    replay: Duration,
    raw_replay: Duration,
    agent_sessions: usize,
    first_page: (Duration, Duration),
    deep_page: (Duration, Duration, usize),
    org_deep_page: (Duration, Duration, usize),
    raw_page: Duration,
    inclusion: (Duration, Duration),
    consistency: (Duration, Duration),
    proof_hashes: f64,
    raw_point_reads: Duration,
    session_export: (u64, Duration),
    org_export: (u64, Duration),
    raw_org_read: (u64, Duration),
    open: Duration,
    raw_open: Duration,
    first_write: Duration,
    second_write: Duration,
    measure_secs: f64,
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

/// A sink that counts bytes (and keeps them when asked, to verify).
struct Sink {
    bytes: u64,
    kept: Option<Vec<u8>>,
}

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes += buf.len() as u64;
        if let Some(kept) = &mut self.kept {
            kept.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Exports `scope` of org 0 against `cp`; checks the bundle if `check`.
fn export_org0(
    store: &SqliteStore,
    scope: &ExportScope,
    cp: &StoredCheckpoint,
    check: bool,
) -> (u64, Duration) {
    let mut sink = Sink {
        bytes: 0,
        kept: check.then(Vec::new),
    };
    let started = Instant::now();
    let now = cairn_store::now();
    let summary = export(store, ORG0, scope, cp, now, &mut sink, &mut |_| {}).unwrap();
    let elapsed = started.elapsed();
    assert!(
        summary.entries > 0 && sink.bytes > 0,
        "{scope:?}: empty export"
    );
    if let Some(bytes) = sink.kept {
        let mut verifier = BundleVerifier::new(vec![store.server_key().clone()]);
        for line in bundle_lines(&bytes) {
            verifier.push_bytes(line);
        }
        let verdict = verifier.finish().verdict;
        assert!(verdict.verified, "{scope:?}: {:?}", verdict.failure);
    }
    (sink.bytes, elapsed)
}

/// The step's canonical JSON: its fields object in RFC 8785 form.
fn canonical_len(record: &cairn_core::commit::StepRecord) -> usize {
    let mut fields = serde_json::Map::new();
    let mut scratch = Vec::new();
    for field in FIELDS {
        scratch.clear();
        write_field_value(&record.step, field, &mut scratch);
        fields.insert(
            field.name().into(),
            serde_json::from_slice(&scratch).unwrap(),
        );
    }
    cairn_core::jcs::to_vec(&serde_json::Value::Object(fields)).len()
}

/// A listing page's raw twin: the same rows of the sessions table.
fn raw_page(conn: &Connection, org: i64, after: Option<&SessionCursor>) -> usize {
    let (at, id) = after.map_or((i64::MAX, String::new()), |c| {
        (c.started_at.as_micros(), c.session_id.clone())
    });
    let mut stmt = conn
        .prepare_cached(
            "SELECT session_id, agent_id, started_at, sid FROM sessions
             WHERE org = ?1 AND agent_id = 'agent-0' AND (started_at, session_id) < (?2, ?3)
             ORDER BY started_at DESC, session_id DESC LIMIT ?4",
        )
        .unwrap();
    let rows = stmt.query_map(params![org, at, id, PAGE as i64], |r| r.get::<_, String>(0));
    rows.unwrap().count()
}

/// Times listings of `filter` after the session at `position` (the first
/// page when 0): (p50, p99).
fn list_times(
    store: &SqliteStore,
    all: &[cairn_store::SessionSummary],
    agent: Option<&str>,
    position: usize,
    runs: usize,
) -> (Duration, Duration) {
    let filter = SessionFilter {
        after: position
            .checked_sub(1)
            .and_then(|p| all.get(p))
            .map(SessionCursor::after),
        ..SessionFilter::agent(agent)
    };
    p50_p99(timed(runs, || {
        let page = store.list_sessions(ORG0, &filter, PAGE).unwrap();
        assert!(!page.is_empty() || position >= all.len());
    }))
}

/// Every read-side measurement at a milestone, on a read-only open.
fn measure(dir: &Path, row: &mut Row, runs: usize, proofs: u64, check: bool) {
    let db = dir.join("ledger.db");
    let conn = raw_conn(&db);
    let org: i64 = conn
        .query_row("SELECT org FROM orgs WHERE name = ?1", [ORG0], |r| r.get(0))
        .unwrap();
    let store = SqliteStore::open(
        dir,
        SqliteOptions {
            sequencer: false,
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    row.sessions = conn
        .query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get::<_, i64>(0))
        .unwrap() as u64;

    // Verification, after the raw baseline (both with a warm cache).
    let (rows, _, raw) = raw_scan(&db, org, true);
    row.raw_scan_rate = rows as f64 / raw.as_secs_f64();
    row.rss_before_verify_mb = vm_mb("VmRSS");
    reset_peak();
    let started = Instant::now();
    let verdict = verify_org(&store, ORG0, &[], &[], &mut |_| {}).unwrap();
    let elapsed = started.elapsed();
    row.verify_peak_mb = vm_mb("VmHWM");
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
    assert_eq!(verdict.log_size, rows);
    row.org_entries = rows;
    row.verify_rate = rows as f64 / elapsed.as_secs_f64();

    // Replay of the 1,000-step session, against its rows read raw.
    let mut seqs = Vec::new();
    let mut json = 0;
    store
        .read_session(ORG0, REPLAY_SESSION, &mut |s| {
            seqs.push(s.seq);
            json += canonical_len(&s.record);
            true
        })
        .unwrap();
    assert_eq!(seqs.len() as u64, REPLAY_STEPS);
    row.json_per_step = json as f64 / seqs.len() as f64;
    row.replay = p50_p99(timed(runs, || {
        let mut n = 0;
        store
            .read_session(ORG0, REPLAY_SESSION, &mut |_| {
                n += 1;
                true
            })
            .unwrap();
        assert_eq!(n, REPLAY_STEPS);
    }))
    .0;
    let mut stmt = conn.prepare("SELECT * FROM entries WHERE id = ?1").unwrap();
    let columns = stmt.column_count();
    let mut read_rows = || {
        let mut buf = Vec::new();
        for &seq in &seqs {
            stmt.query_row([(org << 40) | seq as i64], |r| {
                for i in 0..columns {
                    push_value(r.get_ref(i)?, &mut buf);
                }
                Ok(())
            })
            .unwrap();
        }
        std::hint::black_box(buf.len());
    };
    row.raw_replay = p50_p99(timed(runs, &mut read_rows)).0;

    // Listing agent 0's sessions, and the whole org half-way down.
    let agent = store
        .list_sessions(ORG0, &SessionFilter::agent(Some("agent-0")), usize::MAX)
        .unwrap();
    let everyone = store
        .list_sessions(ORG0, &SessionFilter::all(), usize::MAX)
        .unwrap();
    row.agent_sessions = agent.len();
    let lists = runs * 10;
    row.first_page = list_times(&store, &agent, Some("agent-0"), 0, lists);
    let (mid, org_mid) = (agent.len() / 2, everyone.len() / 2);
    let (p50, p99) = list_times(&store, &agent, Some("agent-0"), mid, lists);
    row.deep_page = (p50, p99, mid);
    let (p50, p99) = list_times(&store, &everyone, None, org_mid, lists);
    row.org_deep_page = (p50, p99, org_mid);
    row.raw_page = p50_p99(timed(lists, || {
        assert!(raw_page(&conn, org, None) > 0);
    }))
    .0;

    // Proofs at random leaves and sizes of the latest checkpoint.
    let cp = store.latest_checkpoint(ORG0).unwrap().unwrap();
    let signed = trusted_checkpoint(&store, ORG0, &cp.note, &[]).unwrap();
    let (size, root) = (signed.checkpoint().size, signed.checkpoint().root);
    assert_eq!(size, rows, "the checkpoint covers the whole log");
    let mut hashes = 0usize;
    let mut times = Vec::new();
    for k in 0..proofs {
        let seq = mix(k ^ size) % size;
        let started = Instant::now();
        let proof = store.inclusion_proof(ORG0, seq, size).unwrap();
        times.push(started.elapsed());
        hashes += proof.len();
        if k < 20 {
            let mut leaf = None;
            store
                .read_log(ORG0, seq, seq + 1, &mut |e| {
                    leaf = Some(e.entry.unwrap().leaf_hash());
                    false
                })
                .unwrap();
            verify_inclusion(&leaf.unwrap(), seq, size, &proof, &root).unwrap();
        }
    }
    row.inclusion = p50_p99(times);
    row.proof_hashes = hashes as f64 / proofs as f64;
    let mut k = 0u64;
    row.consistency = p50_p99(timed(proofs as usize, || {
        k += 1;
        let old = 1 + mix(k ^ size ^ 0xc0) % (size - 1);
        std::hint::black_box(store.consistency_proof(ORG0, old, size).unwrap());
    }));
    // Older signed checkpoints against the latest.
    let older = store.checkpoints(ORG0).unwrap();
    let stride = (older.len() / 20).max(1);
    for old in older.iter().filter(|c| c.size < size).step_by(stride) {
        let old_root = trusted_checkpoint(&store, ORG0, &old.note, &[])
            .unwrap()
            .checkpoint()
            .root;
        let proof = store.consistency_proof(ORG0, old.size, size).unwrap();
        verify_consistency(old.size, size, &old_root, &root, &proof).unwrap();
    }
    let reads = row.proof_hashes.round().max(1.0) as u64;
    let mut leaf_stmt = conn
        .prepare("SELECT leaf_hash FROM entries WHERE id = ?1")
        .unwrap();
    let mut k = 0u64;
    row.raw_point_reads = p50_p99(timed(proofs as usize, || {
        for _ in 0..reads {
            k += 1;
            let id = (org << 40) | (mix(k) % size) as i64;
            let leaf: Vec<u8> = leaf_stmt.query_row([id], |r| r.get(0)).unwrap();
            std::hint::black_box(leaf);
        }
    }))
    .0;

    // Exports: the session (a partial bundle, one proof per entry) and
    // the whole org; the raw twins read the same rows.
    let session = ExportScope::Session(REPLAY_SESSION.into());
    row.session_export = export_org0(&store, &session, &cp, true);
    row.org_export = export_org0(&store, &ExportScope::All, &cp, check);
    let (_, bytes, raw) = raw_scan(&db, org, false);
    row.raw_org_read = (bytes, raw);
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

/// Reopens the store to sequence it, as `cairn serve` starts; times the
/// open and the first two writes (to an existing session of org 0).
fn start(dir: &Path, row: &mut Row, probe: &mut Session) -> Ledger {
    let started = Instant::now();
    let conn = raw_conn(&dir.join("ledger.db"));
    let max: i64 = conn
        .query_row("SELECT MAX(id) FROM entries", [], |r| r.get(0))
        .unwrap();
    std::hint::black_box(max);
    drop(conn);
    row.raw_open = started.elapsed();
    let started = Instant::now();
    let store = SqliteStore::open(dir, SqliteOptions::default()).unwrap();
    let ledger = Ledger::new(Arc::new(store), SequencerConfig::default());
    row.open = started.elapsed();
    for time in [&mut row.first_write, &mut row.second_write] {
        let started = Instant::now();
        let step = WriteRequest::Step(Box::new(new_step(probe, probe.steps)));
        ledger.write(step).unwrap();
        *time = started.elapsed();
        probe.steps += 1;
    }
    ledger
}

fn milestones() -> (Vec<u64>, bool) {
    if !std::env::args().any(|a| a == "--bench") {
        // `cargo test --benches`: once, tiny, checking every answer.
        return (vec![2_000, 5_000], true);
    }
    if let Ok(list) = std::env::var("CAIRN_BENCH_SCALE_MILESTONES") {
        let mut m: Vec<u64> = list
            .split(',')
            .map(|v| v.trim().replace('_', "").parse().unwrap())
            .collect();
        m.sort_unstable();
        return (m, false);
    }
    let mut m = vec![10_000, 100_000, 1_000_000];
    if std::env::var("CAIRN_BENCH_SCALE").is_ok_and(|v| v == "full") {
        m.push(10_000_000);
    }
    (m, false)
}

fn main() {
    let (milestones, test) = milestones();
    assert!(
        milestones[0] > REPLAY_STEPS,
        "the first milestone holds the 1,000-step session"
    );
    let (runs, proofs) = if test { (3, 50) } else { (21, 1_000) };
    let base = std::env::var_os("CAIRN_BENCH_DIR").map_or_else(std::env::temp_dir, Into::into);
    std::fs::create_dir_all(&base).unwrap();
    let work = tempfile::tempdir_in(&base).unwrap();
    let dir = work.path().join("store");
    let raw_dir = work.path().join("raw");
    std::fs::create_dir_all(&raw_dir).unwrap();
    eprintln!("scale: milestones {milestones:?} in {}", dir.display());

    let bench_started = Instant::now();
    let mut next = 0u64;
    let mut written = 0u64;
    let mut ledger = Ledger::new(
        Arc::new(SqliteStore::open(&dir, SqliteOptions::default()).unwrap()),
        SequencerConfig::default(),
    );
    let mut probe: Option<Session> = None;
    let mut rows: Vec<Row> = Vec::new();
    for (i, &target) in milestones.iter().enumerate() {
        let mut sessions = Vec::new();
        if i == 0 {
            sessions.push(Session {
                id: REPLAY_SESSION.into(),
                org: 0,
                agent: 1,
                steps: REPLAY_STEPS,
                n: u64::from(u32::MAX),
            });
        }
        let increment = target.saturating_sub(written + REPLAY_STEPS * u64::from(i == 0));
        sessions.extend(plan(&mut next, increment));
        let mut row = Row {
            growth: grow(&ledger, &sessions, &raw_dir),
            ..Row::default()
        };
        written += row.growth.steps;
        if let Some(last) = sessions
            .iter()
            .rev()
            .find(|s| s.org == 0 && s.n < u64::from(u32::MAX))
        {
            probe = Some(last.clone());
        }
        eprintln!(
            "scale: {target}: {} steps written in {:.1} s ({:.0}/s)",
            row.growth.steps, row.growth.secs, row.growth.steps_per_sec
        );
        ledger.close();
        let started = Instant::now();
        let disk = disk_bytes(&dir);
        measure(&dir, &mut row, runs, proofs, test);
        let probe = probe.as_mut().unwrap();
        ledger = start(&dir, &mut row, probe);
        written += 2;
        row.steps = written;
        row.disk_per_step = disk as f64 / (written - 2) as f64;
        row.measure_secs = started.elapsed().as_secs_f64();
        eprintln!("scale: {target}: measured in {:.1} s", row.measure_secs);
        rows.push(row);
    }
    ledger.close();
    print_tables(&rows, bench_started.elapsed());
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn machine() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = info
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split(':').nth(1));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{}, {cores} cores", cpu.unwrap_or("unknown CPU").trim())
}

type Cell = fn(&Row) -> String;

fn mbs(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

/// MB, s, MB/s.
fn volume((bytes, d): (u64, Duration)) -> String {
    let secs = d.as_secs_f64();
    format!("{:.1}, {secs:.2}, {:.1}", bytes as f64 / 1e6, mbs(bytes, d))
}

fn cadence(g: &Growth) -> String {
    if g.intervals.is_empty() {
        return "n/a | n/a".into();
    }
    let max = g.intervals.iter().copied().fold(f64::NAN, f64::max);
    let leaves: Vec<f64> = g.leaves.iter().map(|&l| l as f64).collect();
    format!(
        "{:.2} / {max:.2} | {:.0}",
        median(&g.intervals),
        median(&leaves)
    )
}

const TABLES: [(&str, &[Cell]); 6] = [
    (
        "increment: steps/s (mean batch) | raw rusqlite rows/s, same batch | ratio | peak RSS MB | disk B/step | canonical JSON B/step | disk / JSON",
        &[
            |r| format!("{:.0} ({:.0})", r.growth.steps_per_sec, r.growth.mean_batch),
            |r| format!("{:.0}", r.growth.raw_per_sec),
            |r| format!("{:.2}×", r.growth.steps_per_sec / r.growth.raw_per_sec),
            |r| format!("{:.0}", r.growth.peak_mb),
            |r| format!("{:.0}", r.disk_per_step),
            |r| format!("{:.0}", r.json_per_step),
            |r| format!("{:.2}×", r.disk_per_step / r.json_per_step),
        ],
    ),
    (
        "org 0 entries | verify records/s | raw read + SHA-256 rows/s | ratio | peak RSS MB during verify (before)",
        &[
            |r| r.org_entries.to_string(),
            |r| format!("{:.0}", r.verify_rate),
            |r| format!("{:.0}", r.raw_scan_rate),
            |r| format!("{:.3}×", r.verify_rate / r.raw_scan_rate),
            |r| format!("{:.0} ({:.0})", r.verify_peak_mb, r.rss_before_verify_mb),
        ],
    ),
    (
        "replay 1,000 steps ms | raw 1,000 rows ms | ratio | agent 0 sessions | first page p50 / p99 ms | half-way page p50 / p99 ms (after) | org half-way p50 / p99 ms (after) | raw page ms | first page / raw",
        &[
            |r| format!("{:.2}", ms(r.replay)),
            |r| format!("{:.2}", ms(r.raw_replay)),
            |r| format!("{:.1}×", ms(r.replay) / ms(r.raw_replay)),
            |r| r.agent_sessions.to_string(),
            |r| format!("{:.2} / {:.2}", ms(r.first_page.0), ms(r.first_page.1)),
            |r| {
                let (p50, p99, at) = r.deep_page;
                format!("{:.2} / {:.2} ({at})", ms(p50), ms(p99))
            },
            |r| {
                let (p50, p99, at) = r.org_deep_page;
                format!("{:.2} / {:.2} ({at})", ms(p50), ms(p99))
            },
            |r| format!("{:.3}", ms(r.raw_page)),
            |r| format!("{:.0}×", ms(r.first_page.0) / ms(r.raw_page)),
        ],
    ),
    (
        "org 0 leaves | inclusion p50 / p99 µs | consistency p50 / p99 µs | hashes per inclusion proof | raw point reads of as many leaf hashes, p50 µs | inclusion / raw",
        &[
            |r| r.org_entries.to_string(),
            |r| format!("{:.0} / {:.0}", us(r.inclusion.0), us(r.inclusion.1)),
            |r| format!("{:.0} / {:.0}", us(r.consistency.0), us(r.consistency.1)),
            |r| format!("{:.1}", r.proof_hashes),
            |r| format!("{:.0}", us(r.raw_point_reads)),
            |r| format!("{:.1}×", us(r.inclusion.0) / us(r.raw_point_reads)),
        ],
    ),
    (
        "session export: KB, ms, MB/s | raw 1,000 rows ms | ratio | org export: MB, s, MB/s | raw read of the org's rows: MB, s, MB/s | ratio",
        &[
            |r| {
                let (b, t) = r.session_export;
                format!("{:.0}, {:.1}, {:.1}", b as f64 / 1e3, ms(t), mbs(b, t))
            },
            |r| format!("{:.2}", ms(r.raw_replay)),
            |r| format!("{:.1}×", ms(r.session_export.1) / ms(r.raw_replay)),
            |r| volume(r.org_export),
            |r| volume(r.raw_org_read),
            |r| format!("{:.1}×", ms(r.org_export.1) / ms(r.raw_org_read.1)),
        ],
    ),
    (
        "open + Ledger::new ms | raw open + last row ms | first write ms | second write ms | org 0 checkpoints while growing | interval median / max s | leaves per checkpoint, median | longest batch / maintenance s | growth s (with raw baseline) | measurements s",
        &[
            |r| format!("{:.1}", ms(r.open)),
            |r| format!("{:.2}", ms(r.raw_open)),
            |r| format!("{:.1}", ms(r.first_write)),
            |r| format!("{:.1}", ms(r.second_write)),
            |r| r.growth.checkpoints.to_string(),
            |r| cadence(&r.growth),
            |r| {
                format!(
                    "{:.2} / {:.2}",
                    r.growth.slowest_batch, r.growth.slowest_maintenance
                )
            },
            |r| format!("{:.1} ({:.1})", r.growth.secs, r.growth.total_secs),
            |r| format!("{:.1}", r.measure_secs),
        ],
    ),
];

fn print_tables(rows: &[Row], total: Duration) {
    println!(
        "\nScale of the embedded store, measured {} on {} ({:.0} s in all). Org 0: a tenth of the store plus the 1,000-step session.",
        cairn_store::now(),
        machine(),
        total.as_secs_f64()
    );
    for (header, cells) in TABLES {
        println!("\n| steps | sessions | {header} |");
        println!("|---|---|{}", "---|".repeat(header.split(" | ").count()));
        for r in rows {
            let cells: Vec<String> = cells.iter().map(|c| c(r)).collect();
            println!("| {} | {} | {} |", r.steps, r.sessions, cells.join(" | "));
        }
    }
}
