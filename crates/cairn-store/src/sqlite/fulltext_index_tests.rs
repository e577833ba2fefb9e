//! The index's queue is written a chunk of whole batches at a time: each
//! write records, per org, the progress its last batch left, never past a
//! document still queued; a failed write leaves the queue as it was; a
//! backlogged sequencer writes one chunk, not the queue; erasure recounts
//! what is queued; a flush writes everything queued when it started.

use super::super::fulltext_file::{
    FULLTEXT_FILE, ensure_table, has_table, insert_documents, open_index_file, table,
};
use super::super::fulltext_queue::*;
use super::*;
use crate::engine::org_range;
use rusqlite::{OptionalExtension as _, params};
use std::collections::HashMap;

/// An index file in `dir` with an empty queue and no thread: the tests
/// drive the writes themselves.
fn shared(dir: &Path) -> Shared {
    Shared {
        conn: parking_lot::Mutex::new(open_index_file(&dir.join(FULLTEXT_FILE)).unwrap()),
        queue: Mutex::new(Queue::default()),
        wake: Condvar::new(),
        progressed: Condvar::new(),
        limit_bytes: LIMIT_BYTES,
        slowest_chunk: AtomicU64::new(0),
        merged_at: AtomicU64::new(u64::MAX),
    }
}

/// A root standing for org `org`'s log at `size` (the index stores it and
/// never computes one).
fn root(org: i64, size: u64) -> Hash {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&org.to_be_bytes());
    bytes[8..16].copy_from_slice(&size.to_be_bytes());
    Hash(bytes)
}

/// Queues `batches` batches of `per_batch` documents of `doc_bytes`
/// bytes each for org 1, and every other batch one document for org 2;
/// documents are numbered by their position in their org's log.
fn queue_batches(index: &Shared, batches: u64, per_batch: u64, doc_bytes: usize) {
    let (mut size1, mut size2) = (0u64, 0u64);
    for b in 0..batches {
        let mut docs = Vec::new();
        let mut sizes = Vec::new();
        for _ in 0..per_batch {
            let word = format!("one{size1} ");
            docs.push((
                org_range(1).0 + size1 as i64,
                word.repeat(doc_bytes / word.len() + 1),
            ));
            size1 += 1;
        }
        sizes.push((1, size1, root(1, size1)));
        if b % 2 == 0 {
            docs.push((org_range(2).0 + size2 as i64, format!("two{size2}")));
            size2 += 1;
            sizes.push((2, size2, root(2, size2)));
        }
        index.enqueue(docs, sizes);
    }
}

/// Puts the index in a catch-up of `org`'s log up to size 5 (5 steps to
/// go), as a sequencing open would.
fn catching_up(index: &Shared, org: i64) {
    lock(&index.queue).unwrap().catching_up = Some(CatchUp {
        targets: [(org, 5)].into_iter().collect(),
        left: [(org, 5)].into_iter().collect(),
    });
}

fn progress(index: &Shared) -> HashMap<i64, (u64, Hash)> {
    let conn = index.conn.lock();
    let mut stmt = conn
        .prepare("SELECT org, indexed_below, root FROM fulltext_progress")
        .unwrap();
    stmt.query_map([], |r| {
        let root: Vec<u8> = r.get(2)?;
        Ok((
            r.get::<_, i64>(0)?,
            (r.get::<_, i64>(1)? as u64, Hash(root.try_into().unwrap())),
        ))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// Whether org `org`'s document at log position `position` is indexed.
fn indexed(index: &Shared, org: i64, position: u64) -> bool {
    let word = format!("{}{position}", if org == 1 { "one" } else { "two" });
    let conn = index.conn.lock();
    let t = table(org);
    if !has_table(&conn, "main", org).unwrap() {
        return false;
    }
    conn.query_row(
        &format!("SELECT count(*) FROM {t} WHERE {t} MATCH ?1 AND rowid = ?2"),
        params![word, org_range(org).0 + position as i64],
        |r| r.get::<_, i64>(0),
    )
    .unwrap()
        == 1
}

/// Sets FTS5 options of org 1's table (`automerge`, `hashsize`...),
/// creating it if need be.
fn fts5_set(conn: &Connection, options: &[(&str, i64)]) {
    ensure_table(conn, 1).unwrap();
    let t = table(1);
    for (option, value) in options {
        conn.execute(
            &format!("INSERT INTO {t} ({t}, rank) VALUES (?1, ?2)"),
            rusqlite::params![option, value],
        )
        .unwrap();
    }
}

/// The FTS5 segments org 1's table holds.
fn segments(index: &Shared) -> i64 {
    index
        .conn
        .lock()
        .query_row(
            "SELECT count(DISTINCT segid) FROM \"steps_fts_1_idx\"",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

fn counts(index: &Shared) -> (usize, usize, u64, u64, usize) {
    let q = index.queue.lock().unwrap();
    (q.docs, q.bytes, q.queued, q.written, q.batches.len())
}

/// The queue's totals are the sums over its batches.
fn assert_consistent(index: &Shared) {
    let q = index.queue.lock().unwrap();
    assert_eq!(
        q.docs,
        q.batches.iter().map(|b| b.docs.len()).sum::<usize>()
    );
    assert_eq!(q.bytes, q.batches.iter().map(|b| b.bytes).sum::<usize>());
    for b in &q.batches {
        assert_eq!(b.bytes, batch_cost(&b.docs, &b.sizes));
    }
}

#[test]
fn each_write_takes_whole_batches_and_records_the_progress_of_its_last() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    // 30 batches of 700 + (1 every other batch) documents: several chunks.
    queue_batches(&index, 30, 700, 20);
    let mut writes = 0;
    while counts(&index).4 > 0 {
        let before = counts(&index);
        index.write_chunk(&index.conn.lock()).unwrap();
        writes += 1;
        let after = counts(&index);
        let taken = (after.3 - before.3) as usize;
        assert!(taken >= 1, "a write takes at least one batch");
        assert_eq!(before.4 - after.4, taken);
        // At most one batch past the chunk's bound of documents.
        assert!(
            before.0 - after.0 < CHUNK_DOCS + 701,
            "{before:?} -> {after:?}"
        );
        assert_consistent(&index);
        // Progress: exactly the sizes the last written batch left, and
        // every document below it indexed, none at or above it.
        let done = after.3;
        let size1 = done * 700;
        let size2 = done.div_ceil(2);
        let recorded = progress(&index);
        assert_eq!(recorded[&1], (size1, root(1, size1)));
        assert_eq!(recorded[&2], (size2, root(2, size2)));
        for position in [0, size1 - 1] {
            assert!(indexed(&index, 1, position), "org 1 position {position}");
        }
        if size1 < 30 * 700 {
            assert!(!indexed(&index, 1, size1), "a queued document is indexed");
        }
        assert!(indexed(&index, 2, size2 - 1));
    }
    assert!(
        writes > 3,
        "the queue was written in chunks ({writes} writes)"
    );
    assert_eq!(counts(&index), (0, 0, 30, 30, 0));
}

#[test]
fn a_failed_write_leaves_the_queue_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    index.conn.lock().busy_timeout(Duration::ZERO).unwrap();
    queue_batches(&index, 12, 700, 20);
    let order = |index: &Shared| -> Vec<i64> {
        let q = index.queue.lock().unwrap();
        q.batches
            .iter()
            .flat_map(|b| b.docs.iter().map(|(id, _)| *id))
            .collect()
    };
    let before = (counts(&index), order(&index));
    let blocker = Connection::open(dir.path().join(FULLTEXT_FILE)).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    assert!(index.write_chunk(&index.conn.lock()).is_err());
    assert!(index.flush().is_err());
    assert_eq!((counts(&index), order(&index)), before);
    assert_consistent(&index);
    assert!(progress(&index).is_empty());
    blocker.execute_batch("ROLLBACK").unwrap();
    index.flush().unwrap();
    assert_eq!(counts(&index), (0, 0, 12, 12, 0));
    assert_eq!(progress(&index)[&1].0, 12 * 700);
    assert!(indexed(&index, 1, 12 * 700 - 1));
}

/// A backlogged sequencer waits for the index's writes (here: one, made
/// by this test as the thread would) until the queue is back under the
/// backlog, then goes on; it writes nothing itself.
#[test]
fn relieving_a_backlog_waits_for_the_writes_that_bring_it_under() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    assert!(
        !index.relieve().unwrap(),
        "nothing queued, nothing to wait for"
    );
    // 66 batches of one 1 MiB document: past the 64 MiB backlog.
    queue_batches(&index, 66, 1, 1 << 20);
    assert!(counts(&index).1 >= BACKLOG_BYTES);
    std::thread::scope(|scope| {
        let sequencer = scope.spawn(|| index.relieve());
        std::thread::sleep(Duration::from_millis(100));
        assert!(!sequencer.is_finished(), "went on while backlogged");
        assert_eq!(counts(&index).3, 0, "the sequencer wrote the index itself");
        index.write_chunk(&index.conn.lock()).unwrap();
        assert!(sequencer.join().unwrap().unwrap());
    });
    let (_, bytes, _, written, left) = counts(&index);
    assert!(written >= 1 && written as usize <= CHUNK_BYTES / (1 << 20));
    assert_eq!(left, 66 - written as usize);
    assert!(bytes < BACKLOG_BYTES);
    assert!(!index.relieve().unwrap(), "below the backlog: no wait");
}

/// While the index catches up with the log after a sequencing open,
/// batches join the catch-up as they come (each org's target grows to the
/// largest size they carry, their documents are let go, to be read again
/// from the log): nothing is queued, no backlog is waited for, and a
/// search is told how far its org is behind instead of finding a partial
/// index.
#[test]
fn while_catching_up_batches_join_the_catch_up_and_searches_are_told() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    catching_up(&index, 1);
    queue_batches(&index, 66, 1, 1 << 20);
    assert_eq!(counts(&index).1, 0, "queued while catching up");
    assert!(
        !index.relieve().unwrap(),
        "waited for a backlog while catching up"
    );
    let queue = lock(&index.queue).unwrap();
    assert!(queue.batches.is_empty() && queue.docs == 0 && queue.bytes == 0);
    assert_eq!(
        queue.written, queue.queued,
        "a flush would wait for dropped batches"
    );
    let catch_up = queue.catching_up.as_ref().unwrap();
    assert_eq!(catch_up.targets.get(&1), Some(&66));
    assert_eq!(catch_up.targets.get(&2), Some(&33));
    assert_eq!(catch_up.left_for(None), 5 + 66 + 33);
    drop(queue);
    match index.flush() {
        Err(StoreError::Busy(message)) => assert!(message.contains("104 steps to go"), "{message}"),
        other => panic!("a search while catching up: {other:?}"),
    }
    // An org's search is told its own count alone.
    for (org, left) in [(1, 71), (2, 33)] {
        match index.flush_org(Some(org)) {
            Err(StoreError::Busy(message)) => assert!(
                message.contains(&format!("about {left} steps to go")),
                "{message}"
            ),
            other => panic!("a search while catching up: {other:?}"),
        }
    }
    assert!(
        !indexed(&index, 1, 0) && progress(&index).is_empty(),
        "wrote the index while catching up"
    );
}

/// While the index catches up with one org's log, a search of another
/// org whose documents are all in the index goes ahead at once; an org
/// whose batch joined the catch-up, and the org being caught up, are told
/// to search again (their own steps left), as is a flush of every org.
#[test]
fn while_catching_up_an_org_whose_documents_are_all_in_is_searched_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    catching_up(&index, 3);
    let timed_flush = |org: Option<i64>| {
        let started = Instant::now();
        let outcome = index.flush_org(org);
        (outcome, started.elapsed())
    };
    let (outcome, took) = timed_flush(Some(1));
    assert!(outcome.is_ok(), "{outcome:?}");
    assert!(
        took < CATCH_UP_WAIT / 2,
        "waited {took:?} for another org's catch-up"
    );
    for org in [Some(3), None] {
        match timed_flush(org) {
            (Err(StoreError::Busy(message)), took) => {
                assert!(message.contains("5 steps to go"), "{message}");
                assert!(took >= CATCH_UP_WAIT, "{org:?} told after {took:?}");
            }
            other => panic!("a search of {org:?} while it is caught up: {other:?}"),
        }
    }
    // Org 1 (and 2) commit a batch: it joins the catch-up, unwritten.
    queue_batches(&index, 1, 1, 10);
    for org in [1, 2] {
        match index.flush_org(Some(org)) {
            Err(StoreError::Busy(message)) => {
                assert!(message.contains("about 1 steps to go"), "{message}")
            }
            other => panic!("org {org} searched without its documents: {other:?}"),
        }
        assert!(
            lock(&index.queue)
                .unwrap()
                .catching_up
                .as_ref()
                .unwrap()
                .targets
                .contains_key(&org),
            "org {org}'s batch did not join the catch-up"
        );
    }
    assert!(!indexed(&index, 1, 0), "wrote the index while catching up");
    // An org that wrote nothing since the store opened is still complete.
    assert!(index.flush_org(Some(4)).is_ok());
}

/// A panic of the index's thread (a bug) stops the index: a search during
/// a catch-up is told the index stopped instead of waiting for it forever,
/// and the sequencer does not wait for writes.
#[test]
fn a_panic_of_the_index_thread_stops_the_index_instead_of_leaving_searches_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let index = std::sync::Arc::new(shared(dir.path()));
    catching_up(&index, 1);
    queue_batches(&index, 66, 1, 1 << 20);
    let worker = std::sync::Arc::clone(&index);
    let thread = std::thread::spawn(move || {
        let _on_panic = StopsOnPanic(&worker);
        panic!("a bug in the index's thread");
    });
    assert!(thread.join().is_err());
    match index.flush() {
        Err(StoreError::Corrupt(message)) => {
            assert!(message.contains("internal error"), "{message}")
        }
        other => panic!("a search after the thread died: {other:?}"),
    }
    let started = Instant::now();
    assert!(!index.relieve().unwrap(), "waited for a dead thread");
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// An org being forgotten loses its documents a chunk at a time, each
/// chunk starting where the last stopped (its cursor kept with the mark),
/// the mark removed by the chunk that finds none left, and only then is
/// the org indexed; another org's documents are left alone. (Unit tests
/// forget 1,000 documents per chunk.)
#[test]
fn forgetting_an_org_deletes_its_documents_a_chunk_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    let conn = index.conn.lock();
    let (lo1, _) = org_range(1);
    let (lo2, _) = org_range(2);
    {
        let stale: Vec<(i64, String)> = (0..2500i64)
            .map(|seq| (lo1 + seq, format!("stale {seq}")))
            .collect();
        let kept: Vec<(i64, String)> = (0..10i64)
            .map(|seq| (lo2 + seq, format!("kept {seq}")))
            .collect();
        for docs in [stale, kept] {
            insert_documents(&conn, docs.iter().map(|(id, doc)| (*id, doc.as_str()))).unwrap();
        }
    }
    conn.execute(
        "INSERT INTO fulltext_forgetting (org, next_rowid) VALUES (1, 0)",
        [],
    )
    .unwrap();
    let ledger = rusqlite::Connection::open_in_memory().unwrap();
    let left = |org: i64| -> i64 {
        let (lo, hi) = org_range(org);
        conn.query_row(
            &format!(
                "SELECT count(*) FROM {} WHERE rowid >= ?1 AND rowid < ?2",
                table(org)
            ),
            params![lo, hi],
            |r| r.get(0),
        )
        .unwrap()
    };
    let cursor = || -> Option<i64> {
        conn.query_row(
            "SELECT next_rowid FROM fulltext_forgetting WHERE org = 1",
            [],
            |r| r.get(0),
        )
        .optional()
        .unwrap()
    };
    let mut seen = Vec::new();
    loop {
        let chunk = super::super::fulltext_mend::index_chunk(&conn, &ledger, 1, 0).unwrap();
        seen.push((chunk, left(1), cursor()));
        if chunk != super::super::fulltext_mend::Chunk::Forgot {
            break;
        }
        assert!(seen.len() < 10, "{seen:?}");
    }
    use super::super::fulltext_mend::Chunk::{Forgot, Indexed};
    assert_eq!(
        seen,
        vec![
            (Forgot, 1500, Some(lo1 + 1000)),
            (Forgot, 500, Some(lo1 + 2000)),
            (Forgot, 0, Some(lo1 + 2500)),
            (Forgot, 0, None),
            (
                Indexed {
                    from: 0,
                    reached: 0
                },
                0,
                None
            ),
        ]
    );
    assert_eq!(left(2), 10, "another org's documents");
}

/// An index whose writes fail never stops ingest: under the limit the
/// sequencer goes on at once; past it, the index stops (its queue
/// dropped, searches told to restart) and ingest goes on.
#[test]
fn a_backlog_that_cannot_be_written_stops_the_index_not_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    install_failure_switch(&index);
    switch_failures(&index, true);
    queue_batches(&index, 66, 1, 1 << 20);
    assert!(index.write_chunk(&index.conn.lock()).is_err());
    let started = Instant::now();
    assert!(index.relieve().unwrap());
    assert!(started.elapsed() < STUCK_WAIT, "waited for a failed index");
    assert!(index.queue.lock().unwrap().failed.is_none());
    queue_batches(&index, 66, 1, 1 << 20);
    assert!(counts(&index).1 >= LIMIT_BYTES);
    assert!(index.relieve().unwrap());
    let failed = index.queue.lock().unwrap().failed.clone();
    assert!(
        failed
            .as_deref()
            .is_some_and(|r| r.contains("restart the server")),
        "{failed:?}"
    );
    assert_eq!(counts(&index).1, 0, "the queue is dropped");
    assert!(!index.relieve().unwrap());
}

/// A batch larger than a chunk is written in parts of at most a chunk;
/// only the write of its last part records its progress, a failed part
/// goes back in front of the rest, and erasing a document of a written
/// part or of the rest works as for whole batches.
#[test]
fn a_batch_larger_than_a_chunk_is_written_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    // One batch of 1,000 documents of 17 KB: 17 MB, about five chunks.
    let docs: Vec<(i64, String)> = (0..1000u64)
        .map(|p| (org_range(1).0 + p as i64, doc(p, 17 << 10)))
        .collect();
    let order: Vec<i64> = docs.iter().map(|(id, _)| *id).collect();
    index.enqueue(docs, vec![(1, 1000, root(1, 1000))]);
    index.conn.lock().busy_timeout(Duration::ZERO).unwrap();
    let queued_ids = |index: &Shared| -> Vec<i64> {
        let q = index.queue.lock().unwrap();
        q.batches
            .iter()
            .flat_map(|b| b.docs.iter().map(|(id, _)| *id))
            .collect()
    };
    let blocker = Connection::open(dir.path().join(FULLTEXT_FILE)).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    assert!(index.write_chunk(&index.conn.lock()).is_err());
    blocker.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        queued_ids(&index),
        order,
        "a failed part goes back in front"
    );
    assert_consistent(&index);
    let before = counts(&index);
    index.write_chunk(&index.conn.lock()).unwrap();
    let after = counts(&index);
    assert!(
        before.1 - after.1 <= CHUNK_BYTES,
        "a part of at most a chunk"
    );
    assert!(after.0 > 0 && after.0 < 1000);
    assert_eq!(after.3, 0, "the batch is not written yet");
    assert!(progress(&index).is_empty(), "a part recorded progress");
    assert!(present(&index.conn.lock(), 0));
    assert_consistent(&index);
    let (lo, _) = org_range(1);
    index.erase(&[lo, lo + 999]);
    assert_consistent(&index);
    index.flush().unwrap();
    assert_eq!(counts(&index), (0, 0, 1, 1, 0));
    assert_eq!(progress(&index)[&1].0, 1000);
    let conn = index.conn.lock();
    assert!(!present(&conn, 0) && !present(&conn, 999));
    assert!((1..999).all(|p| present(&conn, p)));
}

#[test]
fn an_erasure_drops_queued_documents_from_every_batch_and_recounts() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    queue_batches(&index, 10, 700, 20);
    index.write_chunk(&index.conn.lock()).unwrap();
    let written = counts(&index).3;
    // One indexed document, and queued ones in two different batches.
    let (lo, _) = org_range(1);
    let queued_a = written * 700 + 3;
    let queued_b = (written + 2) * 700 + 5;
    assert!(indexed(&index, 1, 1));
    let (docs, bytes, ..) = counts(&index);
    index.erase(&[lo + 1, lo + queued_a as i64, lo + queued_b as i64]);
    assert_consistent(&index);
    let after = counts(&index);
    assert_eq!(after.0, docs - 2);
    assert!(after.1 < bytes);
    assert!(
        !indexed(&index, 1, 1),
        "an indexed document stays after its erasure"
    );
    index.flush().unwrap();
    assert!(!indexed(&index, 1, queued_a));
    assert!(!indexed(&index, 1, queued_b));
    assert!(indexed(&index, 1, queued_a + 1));
    assert_eq!(progress(&index)[&1].0, 7000);
}

#[test]
fn a_flush_writes_what_was_queued_when_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    queue_batches(&index, 25, 700, 20);
    index.flush().unwrap();
    assert_eq!(counts(&index), (0, 0, 25, 25, 0));
    assert!(indexed(&index, 1, 25 * 700 - 1));
    assert!(indexed(&index, 2, 12));
    // A failed index refuses flushes and takes no more documents.
    index.queue.lock().unwrap().fail("stopped".into());
    queue_batches(&index, 2, 1, 10);
    assert_eq!(counts(&index).4, 0);
    assert!(matches!(index.flush(), Err(StoreError::Corrupt(reason)) if reason == "stopped"));
}

/// A search's flush writes up to its org's last queued batch (and the
/// batches before it), not every org's backlog; an org with nothing
/// queued waits for nothing.
#[test]
fn a_search_waits_only_for_its_own_orgs_documents() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    // Ten batches: org 1 in each, org 2 in the 1st, 3rd, ..., 9th.
    queue_batches(&index, 10, 10, 20);
    // Then org 1 alone, forty more batches, each half a chunk (so that a
    // write of every batch takes many chunks).
    for b in 0..40u64 {
        let at = 100 + b;
        let word = format!("one{at} ");
        index.enqueue(
            vec![(
                org_range(1).0 + at as i64,
                word.repeat(crate::sqlite::fulltext_queue::CHUNK_BYTES / 2 / word.len()),
            )],
            vec![(1, at + 1, root(1, at + 1))],
        );
    }
    assert_eq!(counts(&index).2, 50);
    index.flush_org(Some(3)).unwrap();
    assert_eq!(
        counts(&index).3,
        0,
        "an org with nothing queued waits for nothing"
    );
    index.flush_org(Some(2)).unwrap();
    let written = counts(&index).3;
    assert!((9..50).contains(&written), "written {written}");
    assert!(indexed(&index, 2, 4));
    index.flush_org(Some(1)).unwrap();
    assert_eq!(counts(&index).3, 50);
    assert_consistent(&index);
}

/// A write of documents from several orgs (whose id ranges a batch
/// interleaves) starts one FTS5 segment, not one per change of org: FTS5
/// writes a segment out whenever a rowid is lower than the one before.
#[test]
fn a_write_of_interleaved_orgs_makes_one_segment() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    // Merges off, so that the segments a write made can be counted.
    fts5_set(
        &index.conn.lock(),
        &[("automerge", 0), ("crisismerge", 100_000)],
    );
    let mut sizes = [0u64; 10];
    for _ in 0..4 {
        let mut docs = Vec::new();
        for i in 0..500 {
            let org = i % 10;
            docs.push((
                org_range(org as i64 + 1).0 + sizes[org] as i64,
                format!("org{org} step{}", sizes[org]),
            ));
            sizes[org] += 1;
        }
        let progress = (0..10).map(|org| {
            let id = org as i64 + 1;
            (id, sizes[org], root(id, sizes[org]))
        });
        index.enqueue(docs, progress.collect());
    }
    index.flush().unwrap();
    assert_eq!(
        segments(&index),
        1,
        "2,000 documents of 10 orgs in one write"
    );
}

/// Makes every chunk write fail while switched on (the progress upsert
/// raises), while an erasure's DELETE still succeeds.
fn install_failure_switch(index: &Shared) {
    index
        .conn
        .lock()
        .execute_batch(
            "CREATE TEMP TABLE fail_ctl (on_ INTEGER NOT NULL);
             INSERT INTO temp.fail_ctl VALUES (0);
             CREATE TEMP TRIGGER fail_ins BEFORE INSERT ON main.fulltext_progress
               WHEN (SELECT on_ FROM temp.fail_ctl) BEGIN SELECT RAISE(ABORT, 'injected'); END;
             CREATE TEMP TRIGGER fail_upd BEFORE UPDATE ON main.fulltext_progress
               WHEN (SELECT on_ FROM temp.fail_ctl) BEGIN SELECT RAISE(ABORT, 'injected'); END;",
        )
        .unwrap();
}

fn switch_failures(index: &Shared, on: bool) {
    index
        .conn
        .lock()
        .execute("UPDATE temp.fail_ctl SET on_ = ?1", [on as i64])
        .unwrap();
}

/// The ledger as the sequencer committed it (org 1): per position, a step
/// (and the position of the erasure record that erased it, once erasing
/// has begun) or another record.
#[derive(Default)]
struct Model {
    entries: Vec<Option<Option<u64>>>,
}

fn token(position: u64) -> String {
    format!("tok{position}")
}

fn doc(position: u64, bytes: usize) -> String {
    let mut d = format!("{} ", token(position));
    while d.len() < bytes {
        d.push_str("filler ");
    }
    d
}

fn present(conn: &Connection, position: u64) -> bool {
    let t = table(1);
    if !has_table(conn, "main", 1).unwrap() {
        return false;
    }
    conn.query_row(
        &format!("SELECT count(*) FROM {t} WHERE {t} MATCH ?1 AND rowid = ?2"),
        params![token(position), org_range(1).0 + position as i64],
        |r| r.get::<_, i64>(0),
    )
    .unwrap()
        == 1
}

/// What a crash now would leave (`conn`: the held writing connection, so
/// no write is half done): the recorded progress never passes a step whose
/// document is missing, nor an erasure whose deletion is not applied.
fn check_crash_state(conn: &Connection, ledger: &Model) -> u64 {
    let below: u64 = conn
        .query_row(
            "SELECT indexed_below FROM fulltext_progress WHERE org = 1",
            [],
            |r| r.get::<_, i64>(0),
        )
        .optional()
        .unwrap()
        .unwrap_or(0) as u64;
    assert!(below as usize <= ledger.entries.len());
    // The last positions below the progress, and a sample of the others.
    let window = below.saturating_sub(3000);
    for position in (0..below).filter(|p| {
        *p >= window || p % 97 == 0 || matches!(ledger.entries[*p as usize], Some(Some(_)))
    }) {
        match ledger.entries[position as usize] {
            Some(None) => assert!(
                present(conn, position),
                "progress {below} passes step {position}, not indexed"
            ),
            Some(Some(record)) if record < below => assert!(
                !present(conn, position),
                "progress {below} passes erasure record {record} of step {position}, still indexed"
            ),
            _ => {}
        }
    }
    below
}

#[path = "fulltext_race_tests.rs"]
mod race;

#[path = "fulltext_parts_tests.rs"]
mod parts;

/// FTS5's merge thresholds and the thread's idle merges.
#[path = "fulltext_merge_tests.rs"]
mod merges;
