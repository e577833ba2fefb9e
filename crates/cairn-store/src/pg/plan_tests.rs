//! The plans of the look-ups by lists of keys: each key one probe of its
//! index, whatever the statistics say, both on a table just loaded (before
//! autovacuum analyzes it) and once it is analyzed.

use super::reads::{KEY_RECORDS_BETWEEN, KEY_RECORDS_PAGE, TURN_STEPS_TAKEN};
use super::rows::{STEPS_BY_TRACE, STEPS_IN_ORDER, TRACE_IDS_HELD, TURN_NUMBERS_HELD};
use crate::pg::{PgOptions, PgStore};
use crate::{HeldSpans as _, LedgerStore, NewStep, WriteRequest, load_or_create_server_key};
use cairn_testkit::PgCluster;
use postgres::types::ToSql;

#[test]
fn lookups_by_lists_of_keys_probe_their_indexes() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.create_database("plans");
    let keys = tempfile::tempdir().unwrap();
    let key = load_or_create_server_key(keys.path(), "cairn.local").unwrap();
    let store = PgStore::open(PgOptions::new(url.clone()), key).unwrap();
    // 20,000 steps in 20 sessions, each naming its id and its number in
    // its session's one turn.
    for chunk in 0..10 {
        let batch: Vec<WriteRequest> = (0..2_000)
            .map(|i| {
                let n = chunk * 2_000 + i;
                WriteRequest::Step(Box::new(NewStep {
                    org_id: "org".into(),
                    session_id: format!("s{}", n % 20),
                    agent_id: "agent".into(),
                    kind_label: "Observation".into(),
                    content: Some(format!("step {n}")),
                    trace_id: Some(format!("t-{n}")),
                    turn_id: Some(format!("turn-{}", n % 20)),
                    turn_step: Some(n),
                    caller: "test".into(),
                    ..NewStep::default()
                }))
            })
            .collect();
        for written in store.append_batch(&batch).unwrap() {
            written.unwrap();
        }
    }
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let org: i64 = admin
        .query_one("SELECT org FROM orgs WHERE name = 'org'", &[])
        .unwrap()
        .get(0);
    let sid: i64 = admin
        .query_one("SELECT sid FROM sessions WHERE session_id = 's3'", &[])
        .unwrap()
        .get(0);
    // As a large batch asks: 500 keys, most of them held.
    let ids: Vec<String> = (0..500).map(|i| format!("t-{}", i * 40)).collect();
    let sids = vec![sid; 500];
    let turns = vec!["turn-3".to_owned(); 500];
    let numbers: Vec<i64> = (0..500).map(|i| i * 20 + 3).collect();
    let turn = "turn-3".to_owned();
    let lookups: [(&str, &str, Vec<&(dyn ToSql + Sync)>); 4] = [
        ("STEPS_BY_TRACE", &STEPS_BY_TRACE, vec![&org, &ids]),
        ("TRACE_IDS_HELD", &TRACE_IDS_HELD, vec![&org, &ids]),
        (
            "TURN_NUMBERS_HELD",
            TURN_NUMBERS_HELD,
            vec![&sids, &turns, &numbers],
        ),
        (
            "TURN_STEPS_TAKEN",
            TURN_STEPS_TAKEN,
            vec![&sid, &turn, &numbers],
        ),
    ];
    for statistics in ["as loaded", "analyzed"] {
        if statistics == "analyzed" {
            admin.batch_execute("ANALYZE").unwrap();
        }
        for (name, sql, params) in &lookups {
            let plan = explain(&mut admin, sql, params);
            let index = if name.starts_with("TURN") {
                "entries_by_turn"
            } else {
                "entries_by_trace"
            };
            assert!(
                plan.contains(&format!("Index Scan using {index}"))
                    || plan.contains(&format!("Index Only Scan using {index}")),
                "{name}, {statistics}: {plan}"
            );
            for scan in ["Seq Scan on entries", "Bitmap Heap Scan on entries"] {
                assert!(!plan.contains(scan), "{name}, {statistics}: {plan}");
            }
        }
    }
    // The log-key records through their own partial index: never the
    // log, nor `entries_ops` (every operational record of every org).
    let plan = explain(&mut admin, crate::keys::LOG_KEY_RECORDS, &[]);
    assert!(plan.contains("using entries_log_keys on entries"), "{plan}");
    for scan in [
        "Seq Scan on entries",
        "Bitmap Heap Scan on entries",
        "entries_ops",
    ] {
        assert!(!plan.contains(scan), "{plan}");
    }
    // A streamed trail's batch: 256 of a session's steps by position, in
    // trail order (here backwards), each found by the primary key.
    let mut positions = store.session_seqs("org", "s3").unwrap().unwrap();
    positions.reverse();
    let by_id: Vec<i64> = positions
        .iter()
        .take(256)
        .map(|&seq| (org << 40) | seq as i64)
        .collect();
    let page_bytes: i64 = 4 * 1024 * 1024;
    let plan = explain(&mut admin, &STEPS_IN_ORDER, &[&by_id, &sid, &page_bytes]);
    assert!(plan.contains("Index Scan using entries_pkey"), "{plan}");
    for scan in ["Seq Scan on entries", "Bitmap Heap Scan on entries"] {
        assert!(!plan.contains(scan), "{plan}");
    }
    let read = store.steps_at("org", "s3", &positions[..256]).unwrap();
    let read: Vec<u64> = read.iter().map(|s| s.seq).collect();
    assert_eq!(read, positions[..256]);
    key_record_pages_follow_their_index(&store, &mut admin, org);
    // A second server's writer reads those 600 key records into its cache
    // a page at a time (pages of 64 in tests): a key of its first page and
    // one of its last are found.
    let second = PgStore::open(
        PgOptions::new(url.clone()),
        load_or_create_server_key(keys.path(), "cairn.local").unwrap(),
    )
    .unwrap();
    for i in [5u32, 599] {
        let mut seed = [0u8; 32];
        seed[..4].copy_from_slice(&i.to_be_bytes());
        let request = WriteRequest::RegisterKey {
            org_id: "org".into(),
            agent_id: "another".into(),
            public_key: cairn_core::ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key(),
            by_admin: true,
        };
        let outcome = second.append_batch(&[request]).unwrap().pop().unwrap();
        assert!(
            matches!(outcome, Err(crate::Refusal::KeyConflict { .. })),
            "key {i}: {outcome:?}"
        );
    }
    // And they answer: every key asked is held.
    let held = admin.query(TURN_STEPS_TAKEN, &lookups[3].2).unwrap().len();
    assert_eq!(held, 500);
    let found = store.steps_by_trace("org", &ids).unwrap().len();
    assert_eq!(found, 500);
}

/// A page of key records (`GET /v1/agent-keys`) of the org is read in log
/// order through `entries_key_records_in_order`, never by sorting the
/// org's key records or scanning the log; one agent's (`?agent_id=`, a
/// session's verification) through `entries_key_records_by_agent`, in
/// log order too.
fn key_record_pages_follow_their_index(store: &PgStore, admin: &mut postgres::Client, org: i64) {
    use cairn_core::ed25519_dalek::SigningKey;
    let batch: Vec<WriteRequest> = (0..600u32)
        .map(|i| {
            let mut seed = [0u8; 32];
            seed[..4].copy_from_slice(&i.to_be_bytes());
            WriteRequest::RegisterKey {
                org_id: "org".into(),
                agent_id: format!("agent-{}", i % 6),
                public_key: SigningKey::from_bytes(&seed).verifying_key(),
                by_admin: true,
            }
        })
        .collect();
    for written in store.append_batch(&batch).unwrap() {
        written.unwrap();
    }
    admin.batch_execute("ANALYZE").unwrap();
    let after = (org << 40) + 20_100;
    let limit = 100i64;
    for agent in [None, Some("agent-3")] {
        let plan = explain(admin, KEY_RECORDS_PAGE, &[&org, &agent, &after, &limit]);
        assert!(plan.contains("entries_key_records"), "{agent:?}: {plan}");
        assert!(!plan.contains("Seq Scan on entries"), "{agent:?}: {plan}");
        // In log order through an index, never every record sorted for
        // each page.
        let index = if agent.is_none() {
            "entries_key_records_in_order"
        } else {
            "entries_key_records_by_agent"
        };
        assert!(plan.contains(index), "{plan}");
        assert!(!plan.contains("Sort"), "{plan}");
    }
    // The writer's read of the key records appended since its cache.
    let plan = explain(
        admin,
        KEY_RECORDS_BETWEEN,
        &[&org, &after, &((org << 40) + 20_700), &4096i64],
    );
    assert!(plan.contains("entries_key_records_in_order"), "{plan}");
    assert!(!plan.contains("Sort"), "{plan}");
    let page = store
        .key_records_page("org", None, Some(20_100), 100)
        .unwrap();
    assert_eq!(page.len(), 100);
    assert_eq!(page[0].0, 20_101);
}

/// The session an OpenTelemetry trace's steps are in is found through
/// the expression index over their ids' first 38 characters (a range over
/// text would depend on the database's collation), whatever the
/// statistics say, and names the latest step's session.
#[test]
fn a_traces_session_is_found_through_its_index() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.create_database("otel_plans");
    let keys = tempfile::tempdir().unwrap();
    let key = load_or_create_server_key(keys.path(), "cairn.local").unwrap();
    let store = PgStore::open(PgOptions::new(url.clone()), key).unwrap();
    // 200 traces of 20 steps each (the last step of each in a session of
    // its own), and as many steps under other ids.
    for chunk in 0..4 {
        let batch: Vec<WriteRequest> = (0..2_000)
            .map(|i| {
                let n = chunk * 2_000 + i;
                let (trace_id, session) = if n % 2 == 0 {
                    let step = n / 2;
                    let session = if step >= 3_800 { "last" } else { "s" };
                    let id = format!("otel.{:032x}.{:016x}.0", step % 200, step);
                    (id, format!("{session}{}", step % 200))
                } else {
                    (format!("t-{n}"), "other".to_owned())
                };
                WriteRequest::Step(Box::new(NewStep {
                    org_id: "org".into(),
                    session_id: session,
                    agent_id: "agent".into(),
                    kind_label: "Observation".into(),
                    content: Some(format!("step {n}")),
                    trace_id: Some(trace_id),
                    caller: "test".into(),
                    ..NewStep::default()
                }))
            })
            .collect();
        for written in store.append_batch(&batch).unwrap() {
            written.unwrap();
        }
    }
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let org: i64 = admin
        .query_one("SELECT org FROM orgs WHERE name = 'org'", &[])
        .unwrap()
        .get(0);
    let prefix = format!("otel.{:032x}.", 7);
    for statistics in ["as loaded", "analyzed"] {
        if statistics == "analyzed" {
            admin.batch_execute("ANALYZE").unwrap();
        }
        let most = 64i64;
        let plan = explain(
            &mut admin,
            super::held::TRACE_SESSIONS_SQL,
            &[&org, &prefix, &most],
        );
        assert!(
            plan.contains("entries_by_otel_trace"),
            "{statistics}: {plan}"
        );
    }
    let trace = format!("{:032x}", 7);
    assert_eq!(
        store
            .otel_trace_sessions("org", &[trace, "f".repeat(32)])
            .unwrap(),
        [vec!["last7".to_owned(), "s7".to_owned()], vec![]]
    );
}

/// The plan PostgreSQL chooses for `sql` with `params`, one line a node.
fn explain(admin: &mut postgres::Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> String {
    admin
        .query(&format!("EXPLAIN {sql}"), params)
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}
