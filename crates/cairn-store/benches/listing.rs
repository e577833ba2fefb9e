//! The session listing at a million steps: the first page, a page deep in
//! the listing (keyset: it should cost what the first does), and each
//! filter (agent, a rare kind, flagged, a time range), against raw
//! rusqlite answering the same page of the same sessions from a plain
//! indexed table in the same run.
//!
//! Then one session's verification (what a replay, the web UI's session
//! page and each session of a verified listing cost) in an org that
//! registers many agents' keys, against the same verification before those
//! keys were registered: it reads its own agent's key records, so it should
//! cost the same.
//!
//! `cargo bench -p cairn-store --bench listing` (`CAIRN_BENCH_STEPS` sets
//! the size, default 1,000,000 steps in sessions of 20, and
//! `CAIRN_BENCH_KEYS` the other agents' keys, default 20,000; `cargo test
//! --benches` runs it once, tiny).

// Benchmark fixtures: a failed unwrap is a broken benchmark.
#![allow(clippy::unwrap_used)]

use cairn_core::kind::StepKind;
use cairn_core::record::Status;
use cairn_store::{
    Ledger, LedgerStore, NewStep, SequencerConfig, SessionCursor, SessionFilter, SessionSummary,
    SqliteOptions, SqliteStore, WriteRequest,
};
use rusqlite::{Connection, params};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ORG: &str = "bench";
const STEPS_PER_SESSION: u64 = 20;
const PAGE: usize = 50;
const KINDS: [&str; 5] = [
    "Observation",
    "Reasoning",
    "ToolCall",
    "ToolResult",
    "Decision",
];

fn new_step(session: u64, index: u64) -> NewStep {
    // One session in 50 waits for approval once (a rare kind); one in 500
    // has a flagged step.
    let kind = if session % 50 == 7 && index == 3 {
        "waiting_approval"
    } else {
        KINDS[(index % 5) as usize]
    };
    NewStep {
        org_id: ORG.into(),
        session_id: format!("session-{session:07}"),
        agent_id: format!("agent-{}", session % 10),
        kind_label: kind.into(),
        content: Some(format!(
            "step {index} of session {session}: looked at the orders table"
        )),
        status: if session % 500 == 3 && index == 5 {
            Status::Flagged
        } else {
            Status::Ok
        },
        caller: "bench".into(),
        ..NewStep::default()
    }
}

/// Writes `steps` steps, `STEPS_PER_SESSION` per session, sessions one
/// after another (so that start times follow session numbers).
fn fill(dir: &std::path::Path, steps: u64) {
    let store: Arc<dyn LedgerStore> =
        Arc::new(SqliteStore::open(dir, SqliteOptions::default()).unwrap());
    let ledger = Ledger::new(store, SequencerConfig::default());
    let sessions = steps / STEPS_PER_SESSION;
    // A session's steps go in order; many sessions are in flight at once
    // so that commits are large batches.
    let wave = 100;
    let mut first = 0;
    while first < sessions {
        let last = (first + wave).min(sessions);
        for index in 0..STEPS_PER_SESSION {
            let pending: Vec<_> = (first..last)
                .map(|s| ledger.submit(WriteRequest::Step(Box::new(new_step(s, index)))))
                .collect();
            for p in pending {
                p.wait().unwrap();
            }
        }
        first = last;
    }
    ledger.close();
}

/// The same sessions in a plain table with the index a listing needs.
fn raw_table(store: &dyn LedgerStore, path: &std::path::Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE sessions (org INTEGER, session_id TEXT, agent_id TEXT, started_at INTEGER);
         CREATE INDEX sessions_listing ON sessions (org, started_at, session_id);",
    )
    .unwrap();
    let all = store
        .list_sessions(ORG, &SessionFilter::all(), usize::MAX)
        .unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    for s in &all {
        tx.execute(
            "INSERT INTO sessions VALUES (1, ?1, ?2, ?3)",
            params![s.session_id, s.agent_id, s.started_at.as_micros()],
        )
        .unwrap();
    }
    tx.commit().unwrap();
    conn
}

fn raw_page(conn: &Connection, after: Option<&SessionCursor>) -> usize {
    let (at, id) = after.map_or((i64::MAX, String::new()), |c| {
        (c.started_at.as_micros(), c.session_id.clone())
    });
    let mut stmt = conn
        .prepare_cached(
            "SELECT session_id, agent_id, started_at FROM sessions
             WHERE org = 1 AND (started_at, session_id) < (?1, ?2)
             ORDER BY started_at DESC, session_id DESC LIMIT ?3",
        )
        .unwrap();
    let rows = stmt
        .query_map(params![at, id, PAGE as i64], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .unwrap();
    rows.count()
}

/// The median of `runs` timings of `f`.
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

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The public key of the signing key whose seed is `n`'s bytes.
fn public_key(n: u64) -> cairn_core::ed25519_dalek::VerifyingKey {
    let mut seed = [7u8; 32];
    seed[..8].copy_from_slice(&n.to_le_bytes());
    cairn_core::ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key()
}

/// One session of 20 steps verified (`ops::verify_session`, every digest
/// recomputed) with only its agent's key registered, then again once
/// `others` other agents have registered a key each.
fn session_verification(others: u64) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn LedgerStore> =
        Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap());
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    let register = |agent: String, n: u64| WriteRequest::RegisterKey {
        org_id: ORG.into(),
        agent_id: agent,
        public_key: public_key(n),
        by_admin: true,
    };
    ledger.write(register("agent-0".into(), 0)).unwrap();
    for index in 0..STEPS_PER_SESSION {
        ledger
            .write(WriteRequest::Step(Box::new(new_step(0, index))))
            .unwrap();
    }
    let session = new_step(0, 0).session_id;
    let verify = || {
        let verdict = cairn_store::ops::verify_session(store.as_ref(), ORG, &session)
            .unwrap()
            .unwrap();
        assert!(verdict.verified, "{verdict:?}");
        verdict.records_checked as usize
    };
    let runs = 21;
    let (alone, _) = median(runs, verify);
    let mut first = 1;
    while first <= others {
        let last = (first + 1_000).min(others + 1);
        let pending: Vec<_> = (first..last)
            .map(|n| ledger.submit(register(format!("other-agent-{n}"), n)))
            .collect();
        for p in pending {
            p.wait().unwrap();
        }
        first = last;
    }
    let (among, checked) = median(runs, verify);
    println!();
    println!(
        "| one session of {checked} steps verified | its agent's key only (µs) | and {others} other agents' keys (µs) | ratio |"
    );
    println!("|---|---|---|---|");
    println!(
        "| `ops::verify_session`, median of {runs} | {:.0} | {:.0} | {:.2}× |",
        micros(alone),
        micros(among),
        among.as_secs_f64() / alone.as_secs_f64()
    );
    ledger.close();
}

fn main() {
    let steps: u64 = std::env::var("CAIRN_BENCH_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let keys: u64 = std::env::var("CAIRN_BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let (steps, keys) = if std::env::args().any(|a| a == "--bench") {
        (steps, keys)
    } else {
        (STEPS_PER_SESSION * 600, 200)
    };
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    fill(dir.path(), steps);
    println!(
        "Session listing over {steps} steps ({} sessions of {STEPS_PER_SESSION}), filled in {:.0} s",
        steps / STEPS_PER_SESSION,
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
    let raw = raw_table(&store, &dir.path().join("raw.db"));
    let all = store
        .list_sessions(ORG, &SessionFilter::all(), usize::MAX)
        .unwrap();
    let middle: &SessionSummary = &all[all.len() / 2];
    let deep = SessionCursor::after(middle);
    let window = SessionFilter {
        started_from: Some(all[all.len() * 3 / 4].started_at),
        started_before: Some(all[all.len() / 4].started_at),
        ..SessionFilter::all()
    };
    let cases: Vec<(&str, SessionFilter)> = vec![
        ("first page", SessionFilter::all()),
        (
            "a page half-way down (keyset cursor)",
            SessionFilter {
                after: Some(deep.clone()),
                ..SessionFilter::all()
            },
        ),
        ("one agent of 10", SessionFilter::agent(Some("agent-3"))),
        (
            "one agent, half-way down",
            SessionFilter {
                after: Some(deep.clone()),
                ..SessionFilter::agent(Some("agent-3"))
            },
        ),
        (
            "a rare kind (1 session in 50)",
            SessionFilter {
                kind: Some(StepKind::WaitingApproval),
                ..SessionFilter::all()
            },
        ),
        (
            "flagged (1 session in 500)",
            SessionFilter {
                flagged: true,
                ..SessionFilter::all()
            },
        ),
        ("a time range (the middle half)", window),
    ];
    let runs = 21;
    let (raw_first, _) = median(runs, || raw_page(&raw, None));
    let (raw_deep, _) = median(runs, || raw_page(&raw, Some(&deep)));
    println!(
        "(raw rusqlite, the same sessions in a plain indexed table: first page {:.0} µs, half-way {:.0} µs)",
        micros(raw_first),
        micros(raw_deep)
    );
    println!("| listing of {PAGE} | rows | median µs | ratio to raw rusqlite's first page |");
    println!("|---|---|---|---|");
    for (name, filter) in cases {
        let (time, rows) = median(runs, || {
            store.list_sessions(ORG, &filter, PAGE).unwrap().len()
        });
        assert!(rows > 0, "{name}: no rows");
        println!(
            "| {name} | {rows} | {:.0} | {:.1}× |",
            micros(time),
            time.as_secs_f64() / raw_first.as_secs_f64()
        );
    }
    session_verification(keys);
}
