//! Verification and the readers over a SQLite store's rows: a session
//! head moved forward, moved back or deleted with plain SQL (what a file
//! holder can do) is read, written over and verified as the log says; a
//! log of many chunks verifies whole and in order while steps of new
//! kinds and sessions are appended; a session is verified against its
//! agent's key records, and a signature failure worded from the org's.

use crate::sqlite::options;
use cairn_core::commit::{
    AgentSignature, Openings, agent_key_id, signed_step_message, step_digest,
};
use cairn_core::ed25519_dalek::{Signer as _, SigningKey};
use cairn_core::record::Step;
use cairn_store::{LedgerStore, SqliteStore};
use std::sync::Arc;

/// Appends one plan step to session s1 through a ledger over `store`.
fn append_plan(
    store: Arc<dyn LedgerStore>,
    content: &str,
) -> Result<cairn_store::Written, cairn_store::AppendError> {
    cairn_store::Ledger::new(store, cairn_store::SequencerConfig::default()).write(
        cairn_store::WriteRequest::Step(Box::new(crate::conformance::step("s1", "plan", content))),
    )
}

/// A store in `dir` whose session s1 holds `steps` steps, closed again.
fn session_of(dir: &std::path::Path, steps: usize) {
    let store: Arc<dyn LedgerStore> = Arc::new(SqliteStore::open(dir, options()).unwrap());
    for i in 0..steps {
        append_plan(Arc::clone(&store), &format!("p{i}")).unwrap();
    }
}

/// A head moved forward past the log (the trigger allows any forward move)
/// is ignored when reading and left alone by the next batch's head write:
/// the session goes on at the log's next index instead of every batch
/// failing on the trigger. The session's verification reports it (a head
/// row claiming steps the log does not give the session is how a step
/// moved away shows), as the org's does.
#[test]
fn a_session_head_moved_forward_is_left_alone_and_stops_nothing() {
    let dir = tempfile::tempdir().unwrap();
    session_of(dir.path(), 2);
    // The trigger lets a head move forward, even past the log.
    let conn = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    conn.execute(
        "UPDATE session_heads SET last_index = last_index + 1000, last_seq = last_seq + 1000",
        [],
    )
    .unwrap();
    drop(conn);
    let store: Arc<dyn LedgerStore> = Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
    match append_plan(Arc::clone(&store), "after").unwrap() {
        cairn_store::Written::Step { step_index, .. } => assert_eq!(step_index, 2),
        other => panic!("{other:?}"),
    }
    let verdict = cairn_store::ops::verify_session(store.as_ref(), crate::conformance::ORG, "s1")
        .unwrap()
        .unwrap();
    let failure = verdict.failure.as_ref().expect("a failed verdict");
    assert!(
        verdict.records_checked == 3
            && failure.reason == cairn_core::verify::Reason::MissingRecord
            && failure.at.step_index == Some(3)
            && failure
                .detail
                .starts_with("the session's head row records 1002 steps, the log gives it 3"),
        "{verdict:?}"
    );
}

/// `session_heads` is derived: even with its trigger dropped (the file's
/// holder can) and a head moved back, the sequencer reads the session's
/// last step from the log itself, so no index is used twice and the log
/// still verifies; a head pointing elsewhere is ignored the same way.
#[test]
fn a_session_head_moved_back_cannot_make_an_index_be_used_twice() {
    let dir = tempfile::tempdir().unwrap();
    session_of(dir.path(), 3);
    let conn = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    assert!(
        conn.execute("UPDATE session_heads SET last_index = 0, last_seq = 1", [])
            .is_err(),
        "the trigger refuses"
    );
    conn.execute_batch(
        "DROP TRIGGER session_heads_forward;
         UPDATE session_heads SET last_index = 0, last_seq = 1;",
    )
    .unwrap();
    drop(conn);
    let store: Arc<dyn LedgerStore> = Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
    // Reads report the session as the log holds it.
    let info = store
        .session(crate::conformance::ORG, "s1")
        .unwrap()
        .unwrap();
    assert_eq!(info.step_count, 3);
    let listed = store
        .list_sessions(
            crate::conformance::ORG,
            &cairn_store::SessionFilter::all(),
            10,
        )
        .unwrap();
    assert_eq!(listed[0].step_count, 3);
    let verdict = cairn_store::ops::verify_session(store.as_ref(), crate::conformance::ORG, "s1")
        .unwrap()
        .unwrap();
    assert!(
        verdict.verified && verdict.records_checked == 3,
        "{verdict:?}"
    );
    // The next step takes index 3, not 1.
    let cairn_store::Written::Step { step_index, .. } =
        append_plan(Arc::clone(&store), "p3").unwrap()
    else {
        panic!()
    };
    assert_eq!(step_index, 3);
    let verdict = cairn_store::ops::verify_org(
        store.as_ref(),
        crate::conformance::ORG,
        &[],
        &[],
        &mut |_| {},
    )
    .unwrap();
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
}

/// Retention finds an expired session whose head row was deleted (by the
/// file's holder, triggers dropped): the row is a hint, the log decides;
/// and verification names the missing row.
#[test]
fn a_deleted_head_row_neither_hides_a_session_from_retention_nor_verifies() {
    let dir = tempfile::tempdir().unwrap();
    session_of(dir.path(), 2);
    let conn = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    conn.execute_batch(
        "DROP TRIGGER session_heads_no_delete;
         DELETE FROM session_heads;",
    )
    .unwrap();
    let store: Arc<dyn LedgerStore> = Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
    let org = crate::conformance::ORG;
    let verdict = cairn_store::ops::verify_org(store.as_ref(), org, &[], &[], &mut |_| {}).unwrap();
    let failure = verdict.verdict.failure.expect("a missing head row fails");
    assert!(failure.detail.contains("no head row"), "{}", failure.detail);
    let cutoff =
        cairn_core::Timestamp::from_micros(cairn_store::now().as_micros() + 3_600_000_000).unwrap();
    store
        .append_batch(&[cairn_store::WriteRequest::Retention {
            org_id: org.into(),
            older_than: cutoff,
        }])
        .unwrap()
        .remove(0)
        .unwrap();
    let unerased: i64 = conn
        .query_row(
            "SELECT count(*) FROM entries WHERE type = 'step' AND erased = 0",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(unerased, 0, "the expired session escaped retention");
}

/// Verification reads the head rows a page at a time: with the table's
/// key removed (the file's holder can rebuild it), a second head row of
/// the session that ends a page is still read and reported, not passed
/// over between two pages (an exact copy, so that it fails only for
/// being a second row).
#[test]
fn a_second_head_row_at_a_page_boundary_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn LedgerStore> = Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
    // More sessions than a page holds (4,096), one step each.
    let requests: Vec<_> = (0..4_100)
        .map(|i| {
            cairn_store::WriteRequest::Step(Box::new(crate::conformance::step(
                &format!("s{i:05}"),
                "plan",
                "p",
            )))
        })
        .collect();
    for chunk in requests.chunks(500) {
        for written in store.append_batch(chunk).unwrap() {
            written.unwrap();
        }
    }
    let org = crate::conformance::ORG;
    let verdict = cairn_store::ops::verify_org(store.as_ref(), org, &[], &[], &mut |_| {}).unwrap();
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
    let conn = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    conn.execute_batch(
        "CREATE TABLE heads_copy AS SELECT * FROM session_heads;
         DROP TABLE session_heads;
         ALTER TABLE heads_copy RENAME TO session_heads;
         INSERT INTO session_heads
           SELECT * FROM session_heads ORDER BY sid LIMIT 1 OFFSET 4095;",
    )
    .unwrap();
    let verdict = cairn_store::ops::verify_org(store.as_ref(), org, &[], &[], &mut |_| {}).unwrap();
    let failure = verdict.verdict.failure.expect("a second head row fails");
    assert!(
        failure.detail.contains("more than one head row"),
        "{}",
        failure.detail
    );
}

/// Appends `per_writer` steps from each of `writers` threads (session
/// `w{n}` each) through one sequencer.
fn append_many(store: &Arc<dyn LedgerStore>, writers: usize, per_writer: usize) {
    append_varied(store, writers, per_writer, false);
}

/// [`append_many`], each writer's steps of session `w{n}`; `varied`
/// steps cycle through kinds and every other one starts or grows a new
/// session (so that sessions get new kinds, and new sessions appear,
/// while a verification runs).
fn append_varied(store: &Arc<dyn LedgerStore>, writers: usize, per_writer: usize, varied: bool) {
    const KINDS: [&str; 5] = [
        "plan",
        "decision",
        "tool_call",
        "observation",
        "final_answer",
    ];
    let ledger = Arc::new(cairn_store::Ledger::new(
        Arc::clone(store),
        cairn_store::SequencerConfig::default(),
    ));
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let ledger = Arc::clone(&ledger);
            std::thread::spawn(move || {
                for i in 0..per_writer {
                    let (session, kind) = match varied {
                        false => (format!("w{w}"), "plan"),
                        true if i % 2 == 0 => (format!("w{w}"), KINDS[(i / 2) % KINDS.len()]),
                        true => (format!("n{w}-{}", i / 10), KINDS[(i / 7) % KINDS.len()]),
                    };
                    let step = crate::conformance::step(&session, kind, &format!("{i}"));
                    ledger
                        .write(cairn_store::WriteRequest::Step(Box::new(step)))
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Full verification reads the log in chunks on one thread per core and
/// checks them in log order (`ops::verify`): a log of many chunks verifies
/// whole; a change in a late chunk and a hole wider than a chunk are each
/// found at the first entry they touch; entries appended while a
/// verification runs (new kinds, new sessions: derived rows past what it
/// read) never make it fail.
#[test]
fn a_log_of_many_chunks_is_verified_whole_and_in_order() {
    use cairn_core::verify::Reason;
    use cairn_store::ops::verify_org;
    let dir = tempfile::tempdir().unwrap();
    let org = crate::conformance::ORG;
    let store: Arc<dyn LedgerStore> = Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
    append_many(&store, 8, 400);
    let size = store.log_size(org).unwrap();
    assert!(size > 3200, "{size}");
    let verdict = verify_org(store.as_ref(), org, &[], &[], &mut |_| {}).unwrap();
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
    assert_eq!(
        (verdict.log_size, verdict.verdict.records_checked),
        (size, size)
    );

    // Entries appended meanwhile, and early steps erased meanwhile (a
    // verification may read a step whole and then its erasure record past
    // the size it started with): every verification still holds.
    let early: Vec<String> = {
        let conn = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
        conn.prepare("SELECT trace_id FROM entries WHERE type = 'step' ORDER BY id LIMIT 60")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let appending = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || append_varied(&store, 4, 300, true))
    };
    let erasing = {
        let ledger =
            cairn_store::Ledger::new(Arc::clone(&store), cairn_store::SequencerConfig::default());
        std::thread::spawn(move || {
            for trace_id in early {
                std::thread::sleep(std::time::Duration::from_millis(15));
                ledger
                    .write(cairn_store::WriteRequest::Erase {
                        org_id: crate::conformance::ORG.into(),
                        trace_id,
                        reason: "test".into(),
                        actor: "test".into(),
                    })
                    .unwrap();
            }
        })
    };
    let mut checked = Vec::new();
    while !appending.is_finished() || !erasing.is_finished() || checked.is_empty() {
        let verdict = verify_org(store.as_ref(), org, &[], &[], &mut |_| {}).unwrap();
        assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
        checked.push(verdict.log_size);
        // A session's own verification reads its erasures and its steps
        // apart: one erased in between is read again, not failed.
        for w in 0..8 {
            let session = format!("w{w}");
            let verdict = cairn_store::ops::verify_session(store.as_ref(), org, &session)
                .unwrap()
                .unwrap();
            assert!(verdict.verified, "{session}: {:?}", verdict.failure);
        }
    }
    appending.join().unwrap();
    erasing.join().unwrap();
    assert!(checked.iter().all(|&n| n >= size), "{checked:?}");
    let size = store.log_size(org).unwrap();
    drop(store);

    let conn = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    // The file's holder can drop the append-only triggers (opening the
    // store puts them back).
    let tamper = |sql: &str, params: &[&dyn rusqlite::ToSql]| {
        let triggers: Vec<String> = conn
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'entries'",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for trigger in triggers {
            conn.execute_batch(&format!("DROP TRIGGER {trigger}"))
                .unwrap();
        }
        conn.execute(sql, params).unwrap();
    };
    let verify = || {
        let store = SqliteStore::open(dir.path(), options()).unwrap();
        verify_org(&store, org, &[], &[], &mut |_| {})
            .unwrap()
            .verdict
    };
    // A step's content changed in one of the last chunks.
    let late: i64 = conn
        .query_row(
            "SELECT min(seq) FROM entries WHERE type = 'step' AND seq >= ?1",
            [size as i64 - 700],
            |r| r.get(0),
        )
        .unwrap();
    let content: String = conn
        .query_row("SELECT content FROM entries WHERE seq = ?1", [late], |r| {
            r.get(0)
        })
        .unwrap();
    tamper(
        "UPDATE entries SET content = 'changed' WHERE seq = ?1",
        &[&late],
    );
    let verdict = verify();
    let failure = verdict.failure.expect("the change is found");
    let late = late as u64;
    assert_eq!(failure.at.seq, Some(late), "{failure:?}");
    assert_eq!(verdict.records_checked, late + 1);
    assert_eq!(verdict.last_valid.and_then(|l| l.seq), Some(late - 1));
    tamper(
        "UPDATE entries SET content = ?1 WHERE seq = ?2",
        &[&content, &(late as i64)],
    );
    assert!(verify().verified, "restored");

    // A hole of 1,300 entries (more than two whole chunks) mid-log.
    tamper("DELETE FROM entries WHERE seq >= 1000 AND seq < 2300", &[]);
    let verdict = verify();
    let failure = verdict.failure.expect("the hole is found");
    assert_eq!(failure.reason, Reason::SequenceGap, "{failure:?}");
    assert_eq!(failure.at.seq, Some(1000), "{failure:?}");
    assert_eq!(verdict.records_checked, 1001);
}

/// Registers `key` for `agent` in a store over `dir`, then a key of agent
/// "bystander" (seq 1), appends to session s1 of "analyst" one step signed
/// by `key`, and returns the key's id.
fn signed_session(dir: &std::path::Path, agent: &str, key: &SigningKey) -> String {
    use crate::conformance::{ORG, append, ledger, step};
    let store: Arc<dyn LedgerStore> = Arc::new(SqliteStore::open(dir, options()).unwrap());
    let ledger = ledger(store);
    for (agent, key) in [
        (agent, key),
        ("bystander", &SigningKey::from_bytes(&[5; 32])),
    ] {
        ledger
            .write(cairn_store::WriteRequest::RegisterKey {
                org_id: ORG.into(),
                agent_id: agent.into(),
                public_key: key.verifying_key(),
                by_admin: true,
            })
            .unwrap();
    }
    let key_id = agent_key_id(&key.verifying_key());
    let created_at = cairn_store::now();
    let seed = [3; 32];
    let mut s = step("s1", "Decision", "approve the refund");
    s.trace_id = Some("signed-0".into());
    s.created_at = Some(created_at);
    s.step_index = Some(0);
    s.seed = Some(seed);
    let mut core = Step::new("signed-0", ORG, "analyst", "s1", 0, "Decision", created_at).unwrap();
    core.content = Some("approve the refund".into());
    core.signer_key_id = Some(key_id.clone());
    let digest = step_digest(&core, &Openings::from_seed(&seed));
    s.signature = Some(AgentSignature {
        key_id: key_id.clone(),
        signature: key.sign(&signed_step_message(&digest)).to_bytes(),
    });
    append(&ledger, s).unwrap();
    ledger.close();
    key_id
}

/// Edits the rows of `ledger.db` in `dir` with the append-only trigger
/// dropped (what the file's holder can do; the next open creates it again).
fn edit_entries(dir: &std::path::Path, sql: &str) {
    let conn = rusqlite::Connection::open(dir.join("ledger.db")).unwrap();
    conn.execute_batch(&format!("DROP TRIGGER entries_no_update; {sql}"))
        .unwrap();
}

/// One session's verification reads only its agent's key records: another
/// agent's unreadable key record (which fails the org's verification) does
/// not fail it, where every session's verification had read (and failed
/// on) every key record of the org.
#[test]
fn a_session_is_verified_against_its_agents_key_records_only() {
    use crate::conformance::ORG;
    let dir = tempfile::tempdir().unwrap();
    signed_session(dir.path(), "analyst", &SigningKey::from_bytes(&[9; 32]));
    {
        let store: Arc<dyn LedgerStore> =
            Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
        let ledger = crate::conformance::ledger(store);
        for n in 0..3u8 {
            ledger
                .write(cairn_store::WriteRequest::RegisterKey {
                    org_id: ORG.into(),
                    agent_id: format!("other-{n}"),
                    public_key: SigningKey::from_bytes(&[20 + n; 32]).verifying_key(),
                    by_admin: true,
                })
                .unwrap();
        }
        ledger.close();
    }
    edit_entries(
        dir.path(),
        "UPDATE entries SET view = '{\"not\":\"a key record\"}'
          WHERE type = 'key-registration' AND agent_id = 'other-1';",
    );
    let store: Arc<dyn LedgerStore> = Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
    let verdict = cairn_store::ops::verify_session(store.as_ref(), ORG, "s1")
        .unwrap()
        .unwrap();
    assert!(
        verdict.verified && verdict.records_checked == 1,
        "{verdict:?}"
    );
    // The org's verification reads that record and fails.
    org_fails(store.as_ref());
}

/// A verdict failing on a signature says what the org's keys say: a key
/// whose registration names another agent (here by an edited record and
/// column) is "registered for agent mallory", not merely unknown to the
/// session's agent.
#[test]
fn a_signature_failure_is_worded_from_the_orgs_keys() {
    let dir = tempfile::tempdir().unwrap();
    let key_id = signed_session(dir.path(), "analyst", &SigningKey::from_bytes(&[9; 32]));
    edit_entries(
        dir.path(),
        "UPDATE entries SET agent_id = 'mallory',
                view = replace(view, '\"agent_id\":\"analyst\"', '\"agent_id\":\"mallory\"')
          WHERE type = 'key-registration' AND agent_id = 'analyst';",
    );
    let store: Arc<dyn LedgerStore> = Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
    fails_on_a_signature(
        store.as_ref(),
        &format!("key {key_id} is registered for agent mallory, not analyst"),
    );
}

/// Session s1's verification fails on a signature, saying `why`.
fn fails_on_a_signature(store: &dyn LedgerStore, why: &str) {
    let verdict = cairn_store::ops::verify_session(store, crate::conformance::ORG, "s1")
        .unwrap()
        .unwrap();
    let failure = verdict.failure.expect("a signature fails");
    assert_eq!(failure.reason, cairn_core::verify::Reason::BadSignature);
    assert!(failure.detail.contains(why), "{}", failure.detail);
}

/// The org's verification fails (or cannot read the store).
fn org_fails(store: &dyn LedgerStore) {
    let org = cairn_store::ops::verify_org(store, crate::conformance::ORG, &[], &[], &mut |_| {});
    assert!(
        org.as_ref().map_or(true, |v| !v.verdict.verified),
        "{org:?}"
    );
}

/// A revocation is found by its type, not by its agent column, and takes
/// effect from its own position: the bystander's registration (seq 1,
/// before the signed step) turned into a revocation of the analyst's key
/// whose `agent_id` column names another agent still revokes the key from
/// seq 1 in the session's verification, though the key's genuine
/// revocation comes later (reading the analyst's records by that column
/// had verified the step; the first fix, which applied the analyst's own
/// later revocation first, did too), and the org's verification reports
/// the column.
#[test]
fn a_revocation_moved_to_another_agents_column_still_revokes() {
    use crate::conformance::ORG;
    let dir = tempfile::tempdir().unwrap();
    let key_id = signed_session(dir.path(), "analyst", &SigningKey::from_bytes(&[9; 32]));
    {
        let store: Arc<dyn LedgerStore> =
            Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
        let ledger = crate::conformance::ledger(store);
        ledger
            .write(cairn_store::WriteRequest::RevokeKey {
                org_id: ORG.into(),
                agent_id: "analyst".into(),
                key_id: key_id.clone(),
                reason: "rotated".into(),
            })
            .unwrap();
        ledger.close();
    }
    edit_entries(
        dir.path(),
        &format!(
            "UPDATE entries SET type = 'key-revocation', agent_id = 'zzz',
                    view = '{{\"agent_id\":\"analyst\",\"key_id\":\"{key_id}\",\"org_id\":\"{ORG}\",\"reason\":\"leaked\",\"revoked_at\":\"2026-01-01T00:00:00.000000Z\"}}'
              WHERE seq = 1;"
        ),
    );
    let store: Arc<dyn LedgerStore> = Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
    fails_on_a_signature(
        store.as_ref(),
        &format!("key {key_id} was revoked at seq 1"),
    );
    org_fails(store.as_ref());
}
