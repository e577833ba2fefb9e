//! PostgreSQL: a batch is never failed, and a session never wedged or
//! hidden, by what the database's derived rows say or by one step: heads
//! moved back, forward or onto another session's step are walked over, a
//! head moved forward is left alone (not raised into an error), retention
//! confirms its candidates against the log, a step the engine refuses or
//! whose document is huge does not fail the steps batched with it, and the
//! `tsvector`s computed before a batch takes its locks equal the ones the
//! insert computes. (Written by a review session as attacks; the refused
//! and huge steps, the head moved forward and retention failed before the
//! fixes.)

use crate::conformance::Backend as _;
use crate::pg::Pg;
use cairn_store::pg::{PgOptions, PgStore};
use cairn_store::{LedgerStore, load_or_create_server_key};
use cairn_store::{WriteRequest, Written};
use cairn_testkit::PgCluster;

/// A superuser connection to the database behind store `name`.
pub(crate) fn admin_of(backend: &Pg, name: &str) -> postgres::Client {
    postgres::Client::connect(
        &backend.cluster.url_for(&name.replace('-', "_")),
        postgres::NoTls,
    )
    .unwrap()
}

fn sid_of(client: &mut postgres::Client, session: &str) -> i64 {
    client
        .query_one(
            "SELECT sid FROM sessions WHERE session_id = $1",
            &[&session],
        )
        .unwrap()
        .get(0)
}

fn seq_of(client: &mut postgres::Client, session: &str, index: i64) -> i64 {
    client
        .query_one(
            "SELECT e.seq FROM entries e JOIN sessions s ON s.sid = e.sid
             WHERE s.session_id = $1 AND e.type = 'step' AND e.step_index = $2",
            &[&session, &index],
        )
        .unwrap()
        .get(0)
}

fn index_written(w: &Written) -> u64 {
    match w {
        Written::Step { step_index, .. } => *step_index,
        other => panic!("{other:?}"),
    }
}

fn step_in(org: &str, session: &str, content: &str) -> WriteRequest {
    let mut s = crate::conformance::step(session, "Observation", content);
    s.org_id = org.into();
    WriteRequest::Step(Box::new(s))
}

/// The session read-ahead (the head row says whether it lags): a head moved back, one
/// naming another session's step, one naming the right step with the wrong
/// index, and a missing head row are all walked over: no index is reused,
/// and the session listing (which reads a page's heads in one query)
/// counts the log's steps, not the head row's.
#[test]
fn tampered_heads_never_reuse_an_index() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let store = backend.open("heads-tampered");
    let write = |session: &str| -> u64 {
        let r = store
            .append_batch(&[step_in(crate::conformance::ORG, session, "x")])
            .unwrap()
            .remove(0)
            .unwrap();
        index_written(&r)
    };
    // What the listing says of s1: its step count, as the log holds it,
    // and that its first and last times are the log's too.
    let listed = || -> u64 {
        let all = store
            .list_sessions(
                crate::conformance::ORG,
                &cairn_store::SessionFilter::all(),
                10,
            )
            .unwrap();
        let s1 = all.iter().find(|s| s.session_id == "s1").unwrap();
        let read = store
            .session(crate::conformance::ORG, "s1")
            .unwrap()
            .unwrap();
        assert_eq!(s1.step_count, read.step_count);
        assert!(s1.first_step_at.is_some() && s1.first_step_at <= s1.last_step_at);
        s1.step_count
    };
    for _ in 0..3 {
        write("s1");
    }
    write("s2");
    write("s2");
    let mut admin = admin_of(&backend, "heads-tampered");
    let s1 = sid_of(&mut admin, "s1");
    // Bypasses the forward-only trigger, as a superuser can.
    let tamper = |admin: &mut postgres::Client, sql: &str| {
        admin
            .batch_execute(&format!(
                "BEGIN; SET LOCAL session_replication_role = replica; {sql}; COMMIT;"
            ))
            .unwrap();
    };
    // Moved back to step 0.
    let first = seq_of(&mut admin, "s1", 0);
    tamper(
        &mut admin,
        &format!("UPDATE session_heads SET last_seq = {first}, last_index = 0 WHERE sid = {s1}"),
    );
    assert_eq!(listed(), 3);
    assert_eq!(write("s1"), 3);
    // Naming s2's last step.
    let other = seq_of(&mut admin, "s2", 1);
    tamper(
        &mut admin,
        &format!("UPDATE session_heads SET last_seq = {other}, last_index = 1 WHERE sid = {s1}"),
    );
    assert_eq!(listed(), 4);
    assert_eq!(write("s1"), 4);
    // The right step, the wrong index.
    let last = seq_of(&mut admin, "s1", 4);
    tamper(
        &mut admin,
        &format!("UPDATE session_heads SET last_seq = {last}, last_index = 2 WHERE sid = {s1}"),
    );
    assert_eq!(listed(), 5);
    assert_eq!(write("s1"), 5);
    // No head row at all (a lost derived row).
    tamper(
        &mut admin,
        &format!("DELETE FROM session_heads WHERE sid = {s1}"),
    );
    assert_eq!(listed(), 6);
    assert_eq!(write("s1"), 6);
    assert_eq!(
        store
            .session(crate::conformance::ORG, "s1")
            .unwrap()
            .unwrap()
            .step_count,
        7
    );
    crate::conformance::assert_verifies(store.as_ref());
}

/// A head moved *forward* past the log (the production role may: its
/// grants and the trigger allow any forward move) is ignored when reading,
/// and the batch's own head write leaves it alone instead of failing on
/// `cairn_heads_forward`: the session goes on, and so do the requests
/// sharing its batch (here a step of another org).
#[test]
fn a_head_moved_ahead_neither_wedges_the_session_nor_fails_its_batch() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let store = backend.open("heads-ahead");
    for _ in 0..2 {
        store
            .append_batch(&[step_in(crate::conformance::ORG, "s1", "x")])
            .unwrap();
    }
    let mut admin = admin_of(&backend, "heads-ahead");
    let s1 = sid_of(&mut admin, "s1");
    // No trigger bypass needed: a forward move, allowed to cairn_app.
    admin
        .execute(
            "UPDATE session_heads SET last_seq = last_seq + 1000, last_index = last_index + 1000
             WHERE sid = $1",
            &[&s1],
        )
        .unwrap();
    let results = store
        .append_batch(&[
            step_in(crate::conformance::ORG, "s1", "after the move"),
            step_in("other-org", "o1", "an unrelated writer"),
        ])
        .expect("a derived row the engine does not believe must not fail the batch");
    assert_eq!(index_written(results[0].as_ref().unwrap()), 2);
    assert_eq!(index_written(results[1].as_ref().unwrap()), 0);
}

/// Retention takes its candidates from the head rows only when the row
/// names a step of the session: a head moved forward (allowed to the
/// production role) onto a later record with no `created_at`, or deleted
/// (by whoever can bypass the triggers), does not hide an expired session
/// from retention.
#[test]
fn a_head_moved_ahead_or_deleted_does_not_hide_a_session_from_retention() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let store = backend.open("heads-retention");
    let org = crate::conformance::ORG;
    for session in ["old", "gone", "control"] {
        for _ in 0..2 {
            store
                .append_batch(&[step_in(org, session, "personal data")])
                .unwrap();
        }
    }
    store
        .append_batch(&[WriteRequest::StartSession(cairn_store::NewSession {
            org_id: org.into(),
            session_id: "later".into(),
            agent_id: "analyst".into(),
            caller: "test".into(),
            profile: Default::default(),
            predecessor: None,
            predecessor_session: None,
            bound_agent: None,
            full_consent: false,
        })])
        .unwrap()
        .remove(0)
        .unwrap();
    let mut admin = admin_of(&backend, "heads-retention");
    let old = sid_of(&mut admin, "old");
    let later = sid_of(&mut admin, "later");
    let start: i64 = admin
        .query_one(
            "SELECT seq FROM entries WHERE sid = $1 AND type = 'session-start'",
            &[&later],
        )
        .unwrap()
        .get(0);
    admin
        .execute(
            "UPDATE session_heads SET last_seq = $2, last_index = last_index + 100 WHERE sid = $1",
            &[&old, &start],
        )
        .unwrap();
    let gone = sid_of(&mut admin, "gone");
    admin
        .batch_execute(&format!(
            "SET session_replication_role = replica; DELETE FROM session_heads WHERE sid = {gone}; SET session_replication_role = origin;"
        ))
        .unwrap();
    let cutoff =
        cairn_core::Timestamp::from_micros(cairn_store::now().as_micros() + 3_600_000_000).unwrap();
    store
        .append_batch(&[WriteRequest::Retention {
            org_id: org.into(),
            older_than: cutoff,
        }])
        .unwrap()
        .remove(0)
        .unwrap();
    let unerased = |admin: &mut postgres::Client, session: &str| -> i64 {
        admin
            .query_one(
                "SELECT count(*) FROM entries e JOIN sessions s ON s.sid = e.sid
                 WHERE s.session_id = $1 AND e.type = 'step' AND NOT e.erased",
                &[&session],
            )
            .unwrap()
            .get(0)
    };
    assert_eq!(unerased(&mut admin, "control"), 0, "retention ran");
    assert_eq!(
        unerased(&mut admin, "old"),
        0,
        "an expired session escaped retention through its head row"
    );
    assert_eq!(
        unerased(&mut admin, "gone"),
        0,
        "an expired session escaped retention by its head row's deletion"
    );
}

/// Distinct tokens: `n` bytes of `w<hex>` words from `from`.
fn words(from: u32, n: usize) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(n + 16);
    let mut i = from;
    while s.len() + 10 < n {
        write!(s, "w{i:x} ").unwrap();
        i += 1;
    }
    s
}

/// A step within the default limits (content 64 KiB, each payload
/// 256 KiB) whose full-text document's tsvector exceeds PostgreSQL's 1 MB.
fn huge_step(session: &str) -> cairn_store::NewStep {
    let mut s = crate::conformance::step(session, "Observation", &words(0x100000, 60_000));
    s.input = Some(serde_json::json!({ "a": words(0x200000, 250_000) }));
    s.output = Some(serde_json::json!({ "b": words(0x300000, 250_000) }));
    s.metadata = Some(serde_json::json!({ "c": words(0x400000, 250_000) }));
    s
}

fn prepared(s: cairn_store::NewStep) -> WriteRequest {
    WriteRequest::Prepared(Box::new(
        cairn_store::prepare_step(s, &cairn_core::record::Limits::default(), 0.0).unwrap(),
    ))
}

/// The tsvectors computed before the batch locks include steps the engine
/// will refuse: a refused step whose document is huge does not fail the
/// batch (that computation is outside the transaction and never fatal).
#[test]
fn a_refused_step_does_not_fail_its_batch() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let store = backend.open("refused-huge");
    let mut refused = huge_step("big");
    refused.step_index = Some(5); // a new session expects 0: refused
    let results = store
        .append_batch(&[prepared(refused), step_in("other-org", "o1", "unrelated")])
        .expect("a refused step must not fail its batch");
    assert!(
        matches!(results[0], Err(cairn_store::Refusal::IndexConflict { .. })),
        "{:?}",
        results[0]
    );
    assert_eq!(index_written(results[1].as_ref().unwrap()), 0);
}

/// A step within the record limits whose document would make a tsvector
/// over PostgreSQL's 1 MB is written (its document is capped at 256 KiB)
/// and does not fail the requests sharing its batch.
#[test]
fn a_valid_huge_step_does_not_fail_other_writers() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let store = backend.open("valid-huge");
    let results = store
        .append_batch(&[
            prepared(huge_step("big")),
            step_in("other-org", "o1", "unrelated"),
        ])
        .expect("one writer's step must not fail the other writers' requests");
    assert!(results[1].is_ok(), "{:?}", results[1]);
}

/// A batch of steps near every limit of a step (about 830 KB each) is
/// written whole: its log entries go to PostgreSQL in pieces (every 64 MB
/// of rows, in messages of at most 1 MB), never as one message, which
/// PostgreSQL refuses over 1 GB by closing the connection (and failing
/// every request of the batch). 100 steps here (83 MB: two pieces); the
/// long run (`CAIRN_TEST_LONG=1`) writes 1,400 (1.1 GB, about five
/// minutes here, mostly PostgreSQL's).
#[test]
fn a_batch_of_huge_steps_is_sent_in_bounded_pieces() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let store = backend.open("huge-batch");
    let count = cairn_testkit::campaign(100, 1_400);
    let sessions = 7;
    let batch: Vec<WriteRequest> = (0..count)
        .map(|i| prepared(huge_step(&format!("s{}", i % sessions))))
        .collect();
    let results = store.append_batch(&batch).unwrap();
    drop(batch);
    for (i, written) in results.iter().enumerate() {
        assert!(written.is_ok(), "step {i}: {written:?}");
    }
    let org = crate::conformance::ORG;
    let mut written = 0;
    for s in 0..sessions {
        let session = store.session(org, &format!("s{s}")).unwrap().unwrap();
        written += session.step_count;
    }
    assert_eq!(written, count);
}

/// A prepared step's tsvector, computed before the batch locks its orgs,
/// equals the one computed when a step of the batch writes its document,
/// for the same text (duplicates in one batch, CJK, punctuation,
/// over-long words, mixed Prepared and Step requests).
#[test]
fn precomputed_vectors_equal_in_batch_ones() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let store = backend.open("vectors-equal");
    let long_word = "z".repeat(3000);
    let texts = [
        "The pricing change hit SMB accounts hardest.".to_owned(),
        "it's O'Neil's \\back\\slash 'quoted' \"x\" a''b".to_owned(),
        "注文テーブルを検索しています ﬁ İstanbul straße ǅ".to_owned(),
        format!("{long_word} short words around {long_word}"),
        "running runs ran runner 4% 1.5e3 user@example.com http://x.y/z?q=1".to_owned(),
        "The pricing change hit SMB accounts hardest.".to_owned(),
    ];
    let mut batch = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        batch.push(prepared(crate::conformance::step(
            &format!("p{i}"),
            "Observation",
            text,
        )));
        batch.push(WriteRequest::Step(Box::new(crate::conformance::step(
            &format!("t{i}"),
            "Observation",
            text,
        ))));
    }
    for r in store.append_batch(&batch).unwrap() {
        r.unwrap();
    }
    // The documents are written after the commit: a search waits for them.
    let query = cairn_store::fulltext::FullTextQuery::parse("anything").unwrap();
    store
        .full_text_search(crate::conformance::ORG, &query, &Default::default(), 1)
        .unwrap();
    let mut admin = admin_of(&backend, "vectors-equal");
    let rows = admin
        .query(
            "SELECT sa.session_id, a.doc = b.doc, a.doc::text, b.doc::text
             FROM sessions sa JOIN entries ea ON ea.sid = sa.sid AND ea.type = 'step'
             JOIN step_search a ON a.id = ea.id
             JOIN sessions sb ON sb.session_id = 't' || substr(sa.session_id, 2)
             JOIN entries eb ON eb.sid = sb.sid AND eb.type = 'step'
             JOIN step_search b ON b.id = eb.id
             WHERE sa.session_id LIKE 'p%'",
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), texts.len());
    for row in rows {
        let same: bool = row.get(1);
        assert!(
            same,
            "{}: {} vs {}",
            row.get::<_, String>(0),
            row.get::<_, String>(2),
            row.get::<_, String>(3)
        );
    }
    let query = cairn_store::fulltext::FullTextQuery::parse("pricing").unwrap();
    let hits = store
        .full_text_search(
            crate::conformance::ORG,
            &query,
            &cairn_store::StepFilter::default(),
            50,
        )
        .unwrap();
    assert_eq!(hits.len(), 4);
}

/// The derived rows written in one statement, under chunked flushes: one batch of more than FLUSH_ROWS
/// entries (derived rows sent mid-batch), then a bundle of it imported
/// (import flushes in chunks): every step indexed once, heads right.
#[test]
fn chunked_flushes_write_every_derived_row() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let store = backend.open("chunked");
    let org = crate::conformance::ORG;
    let batch: Vec<WriteRequest> = (0..5000)
        .map(|i| step_in(org, &format!("s{}", i % 7), &format!("needle word{i}")))
        .collect();
    for r in store.append_batch(&batch).unwrap() {
        r.unwrap();
    }
    let next = store.append_batch(&[step_in(org, "s3", "after")]).unwrap();
    assert_eq!(index_written(next[0].as_ref().unwrap()), 714);
    let count = |store: &dyn LedgerStore| {
        store
            .full_text_search(
                org,
                &cairn_store::fulltext::FullTextQuery::parse("needle").unwrap(),
                &cairn_store::StepFilter::default(),
                10_000,
            )
            .unwrap()
            .len()
    };
    assert_eq!(count(store.as_ref()), 5000);
    crate::conformance::assert_verifies(store.as_ref());
    let cp = match store
        .append_batch(&[WriteRequest::Checkpoint { org_id: org.into() }])
        .unwrap()
        .remove(0)
        .unwrap()
    {
        Written::Checkpoint(cp) => cp,
        other => panic!("{other:?}"),
    };
    let mut bundle = Vec::new();
    cairn_store::ops::export(
        store.as_ref(),
        org,
        &cairn_store::ops::ExportScope::All,
        &cp,
        cairn_core::Timestamp::from_micros(0).unwrap(),
        &mut bundle,
        &mut |_| {},
    )
    .unwrap();
    let target = backend.open("chunked-import");
    crate::conformance::import_bytes(target.as_ref(), &bundle).unwrap();
    assert_eq!(count(target.as_ref()), 5000);
    assert_eq!(target.session(org, "s3").unwrap().unwrap().step_count, 715);
    let mut admin = admin_of(&backend, "chunked-import");
    let heads: i64 = admin
        .query_one("SELECT count(*) FROM session_heads", &[])
        .unwrap()
        .get(0);
    assert_eq!(heads, 7);
}

/// The production role: batches with no step at all
/// (the statement names every derived table) pass on its grants alone.
#[test]
fn the_production_role_writes_batches_without_steps() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let app_url = crate::pg::production_role_url(&cluster, "app_ops", keys.path());
    let key = load_or_create_server_key(keys.path(), "cairn.local").unwrap();
    let store = PgStore::open(PgOptions::new(app_url), key).unwrap();
    let org = crate::conformance::ORG;
    let session = |id: &str| {
        WriteRequest::StartSession(cairn_store::NewSession {
            org_id: org.into(),
            session_id: id.into(),
            agent_id: "analyst".into(),
            caller: "test".into(),
            profile: Default::default(),
            predecessor: None,
            predecessor_session: None,
            bound_agent: None,
            full_consent: false,
        })
    };
    for r in store
        .append_batch(&[
            session("a"),
            WriteRequest::AuditEvent {
                org_id: org.into(),
                event_id: None,
                session_id: Some("a".into()),
                action: "tool".into(),
                detail: None,
            },
        ])
        .unwrap()
    {
        r.unwrap();
    }
    for r in store
        .append_batch(&[
            step_in(org, "a", "one step"),
            WriteRequest::Seal {
                org_id: org.into(),
                session_id: "a".into(),
                require_reflection: false,
            },
            WriteRequest::Checkpoint { org_id: org.into() },
        ])
        .unwrap()
    {
        r.unwrap();
    }
    crate::conformance::assert_verifies(&store);
}
