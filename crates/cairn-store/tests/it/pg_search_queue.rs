//! PostgreSQL writes a batch's full-text documents after the batch
//! commits, outside the org's lock (`search_queue`): a search still finds
//! every acknowledged step, from any server, whatever stopped before the
//! documents were written, and never finds an erased one.

use crate::conformance::{Backend, ORG, step};
use crate::pg::Pg;
use crate::pg_derived::admin_of;
use cairn_store::fulltext::FullTextQuery;
use cairn_store::{Ledger, LedgerStore, SequencerConfig, StepFilter, WriteRequest, Written};
use cairn_testkit::PgCluster;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn scalar(admin: &mut postgres::Client, sql: &str) -> i64 {
    admin.query_one(sql, &[]).unwrap().get(0)
}

/// The log positions of `org`'s steps that hold `word`.
fn found(store: &dyn LedgerStore, org: &str, word: &str) -> HashSet<u64> {
    let query = FullTextQuery::parse(word).unwrap();
    store
        .full_text_search(org, &query, &StepFilter::default(), 10_000)
        .unwrap()
        .into_iter()
        .map(|(seq, _)| seq)
        .collect()
}

fn write(ledger: &Ledger, org: &str, session: &str, content: &str) -> (u64, String) {
    let mut s = step(session, "Observation", content);
    s.org_id = org.into();
    match ledger.write(WriteRequest::Step(Box::new(s))).unwrap() {
        Written::Step { seq, trace_id, .. } => (seq, trace_id),
        other => panic!("{other:?}"),
    }
}

fn erase(ledger: &Ledger, org: &str, trace_id: &str) {
    ledger
        .write(WriteRequest::Erase {
            org_id: org.into(),
            trace_id: trace_id.into(),
            reason: "test".into(),
            actor: "test".into(),
        })
        .unwrap();
}

/// As a server that stopped between its commits and its documents
/// leaves the database: every step queued, no document written. Returns
/// the superuser's connection that did it.
fn unwrite_every_document(backend: &Pg, name: &str) -> postgres::Client {
    let mut admin = admin_of(backend, name);
    admin
        .batch_execute(
            "DELETE FROM step_search;
             INSERT INTO search_queue SELECT id FROM entries WHERE type = 'step'",
        )
        .unwrap();
    admin
}

/// A connection holding every queued step's row, as one writing their
/// documents would, until it runs `ROLLBACK`.
fn hold_the_queue(backend: &Pg, name: &str) -> postgres::Client {
    let mut holder = admin_of(backend, name);
    holder
        .batch_execute("BEGIN; SELECT count(*) FROM (SELECT id FROM search_queue FOR UPDATE) l")
        .unwrap();
    holder
}

/// Waits (up to a minute) until nothing is queued.
fn until_queue_empty(admin: &mut postgres::Client) {
    let start = Instant::now();
    while scalar(admin, "SELECT count(*) FROM search_queue") > 0 {
        assert!(start.elapsed() < Duration::from_secs(60), "still queued");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Steps whose batches committed but whose documents a server never
/// wrote (it stopped first: the state is made by hand) are found by the
/// next search of their org on any server, which waits for queued steps
/// another connection holds; a server's indexer writes the rest, in orgs
/// nobody searched, when it starts with the server's first write. A
/// queued step erased since gets no document.
#[test]
fn queued_steps_are_indexed_by_a_search_or_a_starting_server() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let name = "queued";
    let store = backend.open(name);
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    let mut written = Vec::new();
    for i in 0..30 {
        written.push(write(
            &ledger,
            ORG,
            &format!("s{}", i % 3),
            &format!("zeppelin {i}"),
        ));
    }
    for i in 0..10 {
        write(&ledger, "other", "o", &format!("zeppelin other {i}"));
    }
    let (erased_seq, erased_id) = written[7].clone();
    erase(&ledger, ORG, &erased_id);
    ledger.close();
    drop(store);
    // The erased step is queued too (a state erasure never leaves, made
    // here to show the log is asked).
    let mut admin = unwrite_every_document(&backend, name);
    // Another connection is indexing them: a search waits for it.
    let mut holder = hold_the_queue(&backend, name);
    let store = backend.open(name);
    let searched = std::thread::scope(|scope| {
        let search = scope.spawn(|| found(store.as_ref(), ORG, "zeppelin"));
        std::thread::sleep(Duration::from_millis(300));
        // The holder gives up (rolls back): the search indexes them.
        holder.batch_execute("ROLLBACK").unwrap();
        search.join().unwrap()
    });
    let expected: HashSet<u64> = written
        .iter()
        .map(|(seq, _)| *seq)
        .filter(|seq| *seq != erased_seq)
        .collect();
    assert_eq!(searched, expected);
    // The other org's steps are left for an indexer: a server's, started
    // by its first write (a process that only reads starts none).
    drop(store);
    let store = backend.open(name);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM search_queue"), 10);
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    write(&ledger, "third", "t", "an unrelated step");
    until_queue_empty(&mut admin);
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM step_search f JOIN orgs o ON o.org = f.org WHERE o.name = 'other'"
        ),
        10
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM step_search f JOIN entries e ON e.id = f.id WHERE e.erased"
        ),
        0
    );
    assert_eq!(found(store.as_ref(), "other", "zeppelin").len(), 10);
}

/// Two servers on one database write steps, erase a third of them as
/// they are acknowledged and search all the while: no write, erasure or
/// search fails (none waits on another in a cycle), no search finds a
/// step whose erasure was acknowledged before it started, and once the
/// servers close every step has its document but the erased ones, and
/// nothing is left queued.
#[test]
fn searches_and_erasures_beside_the_indexers_of_two_servers() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let name = "two_indexers";
    let stores = [backend.open(name), backend.open(name)];
    let ledgers: Vec<Ledger> = stores
        .iter()
        .map(|s| Ledger::new(Arc::clone(s), SequencerConfig::default()))
        .collect();
    const WRITERS: usize = 4;
    const STEPS: usize = 120;
    let erased: Mutex<HashSet<u64>> = Mutex::new(HashSet::new());
    let writing = AtomicBool::new(true);
    let searches = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (ledger, other) = (&ledgers[w % 2], &ledgers[(w + 1) % 2]);
                let erased = &erased;
                scope.spawn(move || {
                    for i in 0..STEPS {
                        let (seq, id) =
                            write(ledger, ORG, &format!("w{w}"), &format!("zeppelin w{w} {i}"));
                        if i % 3 == 0 {
                            // Erased through the other server.
                            erase(other, ORG, &id);
                            erased.lock().unwrap().insert(seq);
                        }
                    }
                })
            })
            .collect();
        for store in &stores {
            let (erased, writing, searches) = (&erased, &writing, &searches);
            scope.spawn(move || {
                while writing.load(Ordering::Acquire) {
                    let before = erased.lock().unwrap().clone();
                    let hits = found(store.as_ref(), ORG, "zeppelin");
                    let shown: Vec<_> = hits.intersection(&before).collect();
                    assert!(shown.is_empty(), "erased steps found: {shown:?}");
                    searches.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for writer in writers {
            writer.join().unwrap();
        }
        writing.store(false, Ordering::Release);
    });
    assert!(searches.into_inner() > 0);
    let erased = erased.into_inner().unwrap();
    let all = found(stores[0].as_ref(), ORG, "zeppelin");
    assert_eq!(all.len(), WRITERS * STEPS - erased.len());
    assert!(all.is_disjoint(&erased));
    for ledger in ledgers {
        ledger.close();
    }
    drop(stores);
    let mut admin = admin_of(&backend, name);
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM search_queue"), 0);
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM entries e WHERE e.type = 'step' AND NOT e.erased
               AND NOT EXISTS (SELECT 1 FROM step_search f WHERE f.id = e.id)"
        ),
        0
    );
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM step_search f JOIN entries e ON e.id = f.id WHERE e.erased"
        ),
        0
    );
}

/// A search waits for queued steps another connection is writing at most
/// its budget (5 s), then is told to come back (`StoreError::Busy`, 503
/// on the API) rather than answer without them; once they are let go,
/// the same search finds them.
#[test]
fn a_search_waits_for_documents_being_written_at_most_its_budget() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let name = "held_queue";
    let store = backend.open(name);
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    for i in 0..5 {
        write(&ledger, ORG, "s", &format!("zeppelin {i}"));
    }
    ledger.close();
    drop(store);
    unwrite_every_document(&backend, name);
    let mut holder = hold_the_queue(&backend, name);
    let store = backend.open(name);
    let query = FullTextQuery::parse("zeppelin").unwrap();
    match store.full_text_search(ORG, &query, &StepFilter::default(), 10) {
        Err(cairn_store::StoreError::Busy(message)) => {
            assert!(message.contains("search again"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    holder.batch_execute("ROLLBACK").unwrap();
    assert_eq!(found(store.as_ref(), ORG, "zeppelin").len(), 5);
}
