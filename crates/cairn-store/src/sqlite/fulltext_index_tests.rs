//! The index's queue is written a chunk of whole batches at a time: each
//! write records, per org, the progress its last batch left, never past a
//! document still queued; a failed write leaves the queue as it was; a
//! backlogged sequencer writes one chunk, not the queue; erasure recounts
//! what is queued; a flush writes everything queued when it started.

use super::super::fulltext_queue::*;
use super::*;
use crate::engine::org_range;
use rusqlite::OptionalExtension as _;

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
    index
        .conn
        .lock()
        .query_row(
            "SELECT count(*) FROM steps_fts WHERE steps_fts MATCH ?1 AND rowid = ?2",
            params![word, org_range(org).0 + position as i64],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
        == 1
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

/// A write of documents from several orgs (whose id ranges a batch
/// interleaves) starts one FTS5 segment, not one per change of org: FTS5
/// writes a segment out whenever a rowid is lower than the one before.
#[test]
fn a_write_of_interleaved_orgs_makes_one_segment() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    // Merges off, so that the segments a write made can be counted.
    index
        .conn
        .lock()
        .execute_batch(
            "INSERT INTO steps_fts (steps_fts, rank) VALUES ('automerge', 0);
             INSERT INTO steps_fts (steps_fts, rank) VALUES ('crisismerge', 100000);",
        )
        .unwrap();
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
    let segments: i64 = index
        .conn
        .lock()
        .query_row("SELECT count(DISTINCT segid) FROM steps_fts_idx", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(segments, 1, "2,000 documents of 10 orgs in one write");
}

// ---------------------------------------------------------------------
// Attacks (review session): races between the thread's chunks, erasures,
// flushes, failing writes and a backlogged sequencer, checked against a
// model of the ledger.
// ---------------------------------------------------------------------

use std::sync::atomic::AtomicBool;

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
    conn.query_row(
        "SELECT count(*) FROM steps_fts WHERE steps_fts MATCH ?1 AND rowid = ?2",
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

/// A sequencer (batches of steps and erasures of earlier steps, queued or
/// written, relieving the backlog before each), a searcher (flush, then
/// every step acknowledged before it is indexed), a switch making chunk
/// writes fail (put back) on and off, crash snapshots, all against the
/// index thread. At the end: every non-erased step indexed, no erased one,
/// progress at the log's size, counters at zero.
#[test]
fn attack_sequencer_searcher_failures_and_the_thread_race() {
    let dir = tempfile::tempdir().unwrap();
    // Races, not the limit past which failing writes stop the index (its
    // own test): the model sequencer outruns any index.
    let index = Arc::new(Shared {
        limit_bytes: usize::MAX,
        ..shared(dir.path())
    });
    install_failure_switch(&index);
    let worker = {
        let index = Arc::clone(&index);
        std::thread::spawn(move || index.run())
    };
    let ledger = Arc::new(Mutex::new(Model::default()));
    let acked = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let reader = |dir: &Path| {
        let c = Connection::open(dir.join(FULLTEXT_FILE)).unwrap();
        c.busy_timeout(Duration::from_secs(10)).unwrap();
        c
    };
    // The searcher.
    let searcher = {
        let (index, ledger, acked, done) = (
            Arc::clone(&index),
            Arc::clone(&ledger),
            Arc::clone(&acked),
            Arc::clone(&done),
        );
        let conn = reader(dir.path());
        std::thread::spawn(move || {
            let mut checked = 0;
            while !done.load(Ordering::SeqCst) {
                let before = acked.load(Ordering::SeqCst);
                let started = Instant::now();
                if index.flush().is_err() {
                    continue;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "flush ran away"
                );
                // The last 300 acknowledged steps (a full scan is too slow).
                for position in before.saturating_sub(300)..before {
                    if present(&conn, position) {
                        continue;
                    }
                    let l = ledger.lock().unwrap();
                    if let Some(None) = l.entries[position as usize] {
                        panic!("step {position} acknowledged before the flush is not indexed");
                    }
                }
                checked += 1;
            }
            checked
        })
    };
    // The failure switch and crash snapshots.
    let chaos = {
        let (index, ledger, done) = (Arc::clone(&index), Arc::clone(&ledger), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut rng = 0x9e37_79b9_7f4a_7c15u64;
            let mut snapshots = 0;
            while !done.load(Ordering::SeqCst) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let fail = rng.is_multiple_of(3);
                switch_failures(&index, fail);
                std::thread::sleep(Duration::from_millis(if fail {
                    100 + rng % 700
                } else {
                    5 + rng % 200
                }));
                let conn = index.conn.lock();
                let l = ledger.lock().unwrap();
                check_crash_state(&conn, &l);
                snapshots += 1;
            }
            switch_failures(&index, false);
            snapshots
        })
    };
    // The sequencer.
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut size = 0u64;
    let mut erasable: Vec<u64> = Vec::new();
    let mut relieved = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(cairn_testkit::campaign(5, 20)) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        match index.relieve() {
            Ok(true) => relieved += 1,
            Ok(false) => {}
            // The batch is refused before it runs (as append_batch does).
            Err(_) => continue,
        }
        let mut batch = FullTextBatch::default();
        batch.begin();
        let steps = 1 + rng % 400;
        let bytes = if rng.is_multiple_of(5) { 60_000 } else { 600 };
        let mut l = ledger.lock().unwrap();
        for _ in 0..steps {
            batch.add(org_range(1).0 + size as i64, &doc(size, bytes));
            l.entries.push(Some(None));
            erasable.push(size);
            size += 1;
        }
        // Erase a few steps: in this batch, queued, or indexed.
        for _ in 0..(rng % 4) {
            if erasable.is_empty() {
                break;
            }
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let victim = erasable.swap_remove((rng % erasable.len() as u64) as usize);
            l.entries[victim as usize] = Some(Some(size));
            l.entries.push(None);
            batch.erase(org_range(1).0 + victim as i64);
            size += 1;
        }
        drop(l);
        // As `committed`: erasures applied, then the documents queued.
        let (docs, erased) = batch.take();
        if !erased.is_empty() {
            index.erase(&erased);
        }
        index.enqueue(docs, vec![(1, size, root(1, size))]);
        acked.store(size, Ordering::SeqCst);
        assert!(
            index.queue.lock().unwrap().failed.is_none(),
            "an erasure failed"
        );
    }
    done.store(true, Ordering::SeqCst);
    let searched = searcher.join().expect("the searcher");
    let snapshots = chaos.join().expect("the chaos thread");
    index.flush().unwrap();
    index.queue.lock().unwrap().stop = true;
    index.wake.notify_all();
    worker.join().expect("the index thread panicked");
    assert_consistent(&index);
    let (docs, bytes, queued, written, left) = counts(&index);
    assert_eq!((docs, bytes, left), (0, 0, 0));
    assert_eq!(queued, written);
    let conn = index.conn.lock();
    let l = ledger.lock().unwrap();
    assert_eq!(check_crash_state(&conn, &l), size);
    for (position, entry) in l.entries.iter().enumerate() {
        if let Some(erased) = entry {
            assert_eq!(
                present(&conn, position as u64),
                erased.is_none(),
                "step {position}"
            );
        }
    }
    eprintln!(
        "positions {size}, batches {queued}, relieved {relieved}, searches {searched}, snapshots {snapshots}"
    );
}

/// A chunk write that fails is put back; an erasure of documents in it
/// (first, middle, last batch of the chunk) then drops them, and the retry
/// writes the rest with the right progress.
#[test]
fn attack_erasure_between_a_failed_chunk_and_its_retry() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    install_failure_switch(&index);
    queue_batches(&index, 12, 700, 20);
    let before = counts(&index);
    switch_failures(&index, true);
    assert!(index.write_chunk(&index.conn.lock()).is_err());
    assert!(index.relieve().is_ok());
    assert!(index.flush().is_err());
    assert_eq!(counts(&index), before);
    assert_consistent(&index);
    let (lo, _) = org_range(1);
    let victims = [0i64, 700 * 3 + 1, 700 * 5 + 699, 700 * 11 + 699];
    index.erase(&victims.map(|v| lo + v));
    assert_consistent(&index);
    assert_eq!(counts(&index).0, before.0 - victims.len());
    switch_failures(&index, false);
    index.flush().unwrap();
    assert_eq!(counts(&index), (0, 0, 12, 12, 0));
    for v in victims {
        assert!(!indexed(&index, 1, v as u64), "erased {v} indexed");
    }
    assert!(indexed(&index, 1, 1));
    assert!(indexed(&index, 1, 12 * 700 - 2));
    assert_eq!(progress(&index)[&1].0, 12 * 700);
}

/// An erasure whose deletion fails stops the index; the progress recorded
/// stays below the erasure (what the next open needs to apply it).
#[test]
fn attack_a_failed_deletion_never_lets_progress_pass_it() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    index.conn.lock().busy_timeout(Duration::ZERO).unwrap();
    queue_batches(&index, 3, 10, 20);
    index.flush().unwrap();
    assert_eq!(progress(&index)[&1].0, 30);
    // A batch: the erasure record at 30 erases step 5.
    let blocker = Connection::open(dir.path().join(FULLTEXT_FILE)).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    index.erase(&[org_range(1).0 + 5]);
    index.enqueue(vec![], vec![(1, 31, root(1, 31))]);
    blocker.execute_batch("ROLLBACK").unwrap();
    assert!(index.queue.lock().unwrap().failed.is_some());
    assert!(index.flush().is_err());
    assert!(!index.relieve().unwrap());
    assert_eq!(counts(&index), (0, 0, 3, 3, 0));
    assert_eq!(
        progress(&index)[&1].0,
        30,
        "progress passed the lost deletion"
    );
}

/// Flush terminates while another thread queues batches as fast as it can.
#[test]
fn attack_flush_terminates_under_continuous_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let index = Arc::new(shared(dir.path()));
    let done = Arc::new(AtomicBool::new(false));
    let producer = {
        let (index, done) = (Arc::clone(&index), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut size = 0u64;
            while !done.load(Ordering::SeqCst) {
                // As the sequencer: the backlog bounds the queue.
                index.relieve().unwrap();
                let docs = (0..50)
                    .map(|i| (org_range(1).0 + (size + i) as i64, doc(size + i, 200)))
                    .collect();
                size += 50;
                index.enqueue(docs, vec![(1, size, root(1, size))]);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..5 {
        let started = Instant::now();
        index.flush().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "flush ran away"
        );
    }
    done.store(true, Ordering::SeqCst);
    producer.join().unwrap();
    index.flush().unwrap();
    assert_consistent(&index);
}

/// A write that fails at once (disk full, I/O error; here the injected
/// failure) while more than a wake's worth is queued: the index thread
/// tries again a tick later, not in a loop that keeps a core busy.
#[test]
fn attack_a_failing_write_is_retried_a_tick_later() {
    let dir = tempfile::tempdir().unwrap();
    let index = Arc::new(shared(dir.path()));
    install_failure_switch(&index);
    let attempts = Arc::new(AtomicU64::new(0));
    {
        let attempts = Arc::clone(&attempts);
        let _previous = index.conn.lock().rollback_hook(Some(move || {
            attempts.fetch_add(1, Ordering::Relaxed);
        }));
    }
    queue_batches(&index, 12, 700, 20);
    assert!(counts(&index).0 >= WAKE_DOCS);
    switch_failures(&index, true);
    let worker = {
        let index = Arc::clone(&index);
        std::thread::spawn(move || index.run())
    };
    std::thread::sleep(Duration::from_secs(1));
    let tries = attempts.load(Ordering::Relaxed);
    index.queue.lock().unwrap().stop = true;
    index.wake.notify_all();
    worker.join().unwrap();
    assert!(
        tries <= 10,
        "{tries} failed writes in one second (one a tick expected)"
    );
}

// ---------------------------------------------------------------------
// Attacks (second review session): parts of batches larger than a chunk,
// the backlogged sequencer's wait (`relieve`), the thread's retry sleep.
// ---------------------------------------------------------------------

fn next(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// The queue's bookkeeping: totals are sums, a batch not whole (a part)
/// is only ever the oldest, and `queued - written` is the number of whole
/// batches still queued (what a flush's target counts).
fn assert_bookkeeping(index: &Shared) {
    assert_consistent(index);
    let q = index.queue.lock().unwrap();
    let parts: Vec<usize> = q
        .batches
        .iter()
        .enumerate()
        .filter(|(_, b)| !b.whole)
        .map(|(i, _)| i)
        .collect();
    assert!(parts.is_empty() || parts == [0], "parts at {parts:?}");
    for b in q.batches.iter().filter(|b| !b.whole) {
        assert!(b.sizes.is_empty(), "a part carries sizes");
    }
    let whole = q.batches.iter().filter(|b| b.whole).count() as u64;
    assert!(q.written <= q.queued);
    if q.failed.is_none() {
        assert_eq!(q.queued - q.written, whole, "flush target drift");
    }
}

/// As `check_crash_state`, but checking only what a write can get wrong
/// (every erased step, the steps just below the progress, a sample), so
/// that it can run after every operation of a campaign.
fn check_crash_state_sampled(conn: &Connection, ledger: &Model, rng: &mut u64) -> u64 {
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
    let mut positions: Vec<u64> = (below.saturating_sub(64)..below).collect();
    if below > 0 {
        for _ in 0..64 {
            positions.push(next(rng) % below);
        }
    }
    for (p, e) in ledger.entries.iter().enumerate() {
        if matches!(e, Some(Some(_))) && (p as u64) < below {
            positions.push(p as u64);
        }
    }
    for position in positions {
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

/// A part that failed is put back; erasures then drop documents of the
/// part, of the rest of its batch and of the next batch; the retry takes
/// the part, the rest, the next batch, a batch with no document and the
/// erasures' batch in one chunk, and records the progress of the last.
#[test]
fn attack2_a_put_back_part_joins_the_rest_and_later_batches_in_one_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    index.conn.lock().busy_timeout(Duration::ZERO).unwrap();
    let blocker = Connection::open(dir.path().join(FULLTEXT_FILE)).unwrap();
    let (lo, _) = org_range(1);
    let mut ledger = Model::default();
    let mut size = 0u64;
    let mut add = |ledger: &mut Model, n: u64, bytes: usize| -> Vec<(i64, String)> {
        (0..n)
            .map(|_| {
                ledger.entries.push(Some(None));
                size += 1;
                (lo + size as i64 - 1, doc(size - 1, bytes))
            })
            .collect()
    };
    // A: 10 small steps, written. B: 300 of 17 KB (about 5.1 MB, more than
    // a chunk). C: 10 small. D: a record, no document.
    let a = add(&mut ledger, 10, 100);
    index.enqueue(a, vec![(1, 10, root(1, 10))]);
    index.flush().unwrap();
    let b = add(&mut ledger, 300, 17 << 10);
    index.enqueue(b, vec![(1, 310, root(1, 310))]);
    let c = add(&mut ledger, 10, 100);
    index.enqueue(c, vec![(1, 320, root(1, 320))]);
    ledger.entries.push(None);
    index.enqueue(vec![], vec![(1, 321, root(1, 321))]);
    assert_bookkeeping(&index);
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    assert!(index.write_chunk(&index.conn.lock()).is_err());
    blocker.execute_batch("ROLLBACK").unwrap();
    {
        let q = index.queue.lock().unwrap();
        // Part, the rest of B, C (D, without documents, joined C).
        assert_eq!(q.batches.len(), 3, "the part was not put back apart");
        assert!(!q.batches[0].whole && q.batches[1].whole);
    }
    assert_bookkeeping(&index);
    let mut rng = 1u64;
    check_crash_state_sampled(&index.conn.lock(), &ledger, &mut rng);
    // The erasures' batch: an indexed step (A), 100 of the part, the last
    // of B, one of C; one erasure record each.
    let mut victims: Vec<u64> = vec![3];
    victims.extend((10..210).step_by(2));
    victims.extend([309, 315]);
    let first_record = ledger.entries.len() as u64;
    for (k, v) in victims.iter().enumerate() {
        ledger.entries[*v as usize] = Some(Some(first_record + k as u64));
        ledger.entries.push(None);
    }
    let end = ledger.entries.len() as u64;
    index.erase(&victims.iter().map(|v| lo + *v as i64).collect::<Vec<_>>());
    index.enqueue(vec![], vec![(1, end, root(1, end))]);
    assert_bookkeeping(&index);
    check_crash_state_sampled(&index.conn.lock(), &ledger, &mut rng);
    index.write_chunk(&index.conn.lock()).unwrap();
    assert_bookkeeping(&index);
    // A, B, C queued; D and the erasures' batch joined C.
    assert_eq!(counts(&index), (0, 0, 3, 3, 0), "not one chunk");
    assert_eq!(progress(&index)[&1], (end, root(1, end)));
    let conn = index.conn.lock();
    assert_eq!(check_crash_state(&conn, &ledger), end);
    for (p, e) in ledger.entries.iter().enumerate() {
        if let Some(erased) = e {
            assert_eq!(present(&conn, p as u64), erased.is_none(), "step {p}");
        }
    }
}

/// A deterministic campaign against a model of the ledger: batches of
/// every shape (no document, more documents than a chunk, more bytes, one
/// document larger than a chunk, small), erasures of steps in the batch,
/// queued (in a part, in a rest) or indexed, chunk writes failing at
/// random. After each operation: the bookkeeping holds, the progress is
/// exactly the sizes the last whole batch written left, and what a crash
/// would leave never passes a missing step or an unapplied erasure.
#[test]
fn attack2_parts_erasures_and_failures_against_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    index.conn.lock().busy_timeout(Duration::ZERO).unwrap();
    let blocker = Connection::open(dir.path().join(FULLTEXT_FILE)).unwrap();
    let (lo, _) = org_range(1);
    let mut ledger = Model::default();
    let mut rng = 0x5eed_1234_abcd_ef01u64;
    let mut check_rng = 7u64;
    let mut erasable: Vec<u64> = Vec::new();
    // The log size each enqueued batch left, in order.
    let mut batch_sizes: Vec<u64> = Vec::new();
    let (mut parts_seen, mut failures, mut big_docs) = (0, 0, 0);
    for _ in 0..cairn_testkit::campaign(160, 1600) {
        let size = ledger.entries.len() as u64;
        match next(&mut rng) % 10 {
            0..=3 => {
                let (n, bytes) = match next(&mut rng) % 10 {
                    0 => (0, 0),
                    1 => (4097 + next(&mut rng) % 2000, 40),
                    2 => (2 + next(&mut rng) % 3, 1_500_000),
                    3 if big_docs < 3 => {
                        big_docs += 1;
                        (1, CHUNK_BYTES + 100_000)
                    }
                    4 => (300 + next(&mut rng) % 300, 17 << 10),
                    _ => (1 + next(&mut rng) % 200, 200),
                };
                let mut batch = FullTextBatch::default();
                batch.begin();
                let mut size = size;
                for _ in 0..n {
                    batch.add(lo + size as i64, &doc(size, bytes));
                    ledger.entries.push(Some(None));
                    erasable.push(size);
                    size += 1;
                }
                if n == 0 {
                    ledger.entries.push(None);
                    size += 1;
                }
                for _ in 0..next(&mut rng) % 4 {
                    if erasable.is_empty() {
                        break;
                    }
                    let victim =
                        erasable.swap_remove((next(&mut rng) % erasable.len() as u64) as usize);
                    ledger.entries[victim as usize] = Some(Some(size));
                    ledger.entries.push(None);
                    batch.erase(lo + victim as i64);
                    size += 1;
                }
                let (docs, erased) = batch.take();
                if !erased.is_empty() {
                    index.erase(&erased);
                }
                let joins_the_last = docs.is_empty()
                    && index
                        .queue
                        .lock()
                        .unwrap()
                        .batches
                        .back()
                        .is_some_and(|b| b.whole);
                index.enqueue(docs, vec![(1, size, root(1, size))]);
                // A batch without documents joins the last queued one.
                match batch_sizes.last_mut() {
                    Some(last) if joins_the_last => *last = size,
                    _ => batch_sizes.push(size),
                }
            }
            _ => {
                // A failure of any write, a part's too: another connection
                // holds the lock (the writer does not wait).
                let fail = next(&mut rng).is_multiple_of(4);
                if fail {
                    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
                }
                if index
                    .queue
                    .lock()
                    .unwrap()
                    .batches
                    .front()
                    .is_some_and(|b| !b.whole)
                {
                    parts_seen += 1;
                }
                let nonempty = counts(&index).4 > 0;
                let written = index.write_chunk(&index.conn.lock());
                if fail {
                    blocker.execute_batch("ROLLBACK").unwrap();
                }
                assert_eq!(written.is_err(), fail && nonempty, "{written:?}");
                failures += written.is_err() as u32;
                if index
                    .queue
                    .lock()
                    .unwrap()
                    .batches
                    .front()
                    .is_some_and(|b| !b.whole)
                {
                    parts_seen += 1;
                }
            }
        }
        assert!(index.queue.lock().unwrap().failed.is_none());
        assert_bookkeeping(&index);
        let conn = index.conn.lock();
        let below = check_crash_state_sampled(&conn, &ledger, &mut check_rng);
        let written = index.queue.lock().unwrap().written as usize;
        let expected = if written == 0 {
            0
        } else {
            batch_sizes[written - 1]
        };
        assert_eq!(
            below, expected,
            "progress is not the last whole batch written's"
        );
    }
    index.flush().unwrap();
    assert_bookkeeping(&index);
    let queued = batch_sizes.len() as u64;
    assert_eq!(counts(&index), (0, 0, queued, queued, 0));
    let size = ledger.entries.len() as u64;
    let conn = index.conn.lock();
    assert_eq!(check_crash_state(&conn, &ledger), size);
    for (p, e) in ledger.entries.iter().enumerate() {
        if let Some(erased) = e {
            assert_eq!(present(&conn, p as u64), erased.is_none(), "step {p}");
        }
    }
    eprintln!(
        "positions {size}, batches {queued}, part states seen {parts_seen}, failed writes {failures}"
    );
    assert!(parts_seen > 5 && failures > 3);
}

/// A backlogged sequencer against a slow (never failing) index thread:
/// each write waits for a lock another connection holds most of the time
/// (less than the busy timeout), and something wakes the sequencer's
/// condvar spuriously all along. `relieve` may return while the queue is
/// past the backlog, never while it is past the limit with writes
/// succeeding; the queue never holds more than the limit and a batch.
#[test]
fn attack2_relieve_never_lets_a_slow_healthy_index_pass_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let limit = BACKLOG_BYTES + (6 << 20);
    let index = Arc::new(Shared {
        limit_bytes: limit,
        ..shared(dir.path())
    });
    // Past the limit at once.
    queue_batches(&index, 72, 1, 1 << 20);
    let worker = {
        let index = Arc::clone(&index);
        std::thread::spawn(move || index.run())
    };
    let done = Arc::new(AtomicBool::new(false));
    let blocker = {
        let (done, path) = (Arc::clone(&done), dir.path().join(FULLTEXT_FILE));
        std::thread::spawn(move || {
            let c = Connection::open(path).unwrap();
            c.busy_timeout(Duration::from_secs(10)).unwrap();
            while !done.load(Ordering::SeqCst) {
                c.execute_batch("BEGIN IMMEDIATE").unwrap();
                std::thread::sleep(Duration::from_millis(120));
                c.execute_batch("ROLLBACK").unwrap();
                std::thread::sleep(Duration::from_millis(15));
            }
        })
    };
    let spurious = {
        let (done, index) = (Arc::clone(&done), Arc::clone(&index));
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                index.progressed.notify_all();
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let mut size = 72u64;
    let (mut waits, mut longest) = (0, Duration::ZERO);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(cairn_testkit::campaign(4, 30)) {
        let t = Instant::now();
        let waited = index.relieve().unwrap();
        longest = longest.max(t.elapsed());
        waits += waited as u32;
        {
            let q = index.queue.lock().unwrap();
            assert!(
                q.failed.is_none(),
                "a healthy index stopped: {:?}",
                q.failed
            );
            assert!(!q.last_write_failed, "a slow write failed");
            assert!(
                q.bytes < limit,
                "relieve returned past the limit ({} MB) with the index healthy",
                q.bytes >> 20
            );
        }
        // A batch of 1.5 MB.
        let docs = (0..3)
            .map(|i| (org_range(1).0 + (size + i) as i64, doc(size + i, 500_000)))
            .collect();
        size += 3;
        index.enqueue(docs, vec![(1, size, root(1, size))]);
        assert!(counts(&index).1 < limit + (2 << 20));
    }
    done.store(true, Ordering::SeqCst);
    blocker.join().unwrap();
    spurious.join().unwrap();
    {
        // No chunk in flight.
        let _conn = index.conn.lock();
        assert_bookkeeping(&index);
    }
    // Not the final flush of what is left (seconds): dropped.
    index.queue.lock().unwrap().fail("end of the test".into());
    index.queue.lock().unwrap().stop = true;
    index.wake.notify_all();
    worker.join().unwrap();
    assert_bookkeeping(&index);
    assert_eq!(counts(&index).1, 0);
    eprintln!("{waits} waits, longest {longest:?}");
}

/// The sequencer stops the index (past the limit, the last write failed)
/// while a chunk write is in progress: whether that write then succeeds
/// or fails, the counters neither drift nor underflow, nothing is put
/// back, and the progress it records is sound.
#[test]
fn attack2_stopping_the_index_during_a_chunk_write_is_sound() {
    for succeeds in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let index = Arc::new(Shared {
            limit_bytes: BACKLOG_BYTES + (2 << 20),
            ..shared(dir.path())
        });
        install_failure_switch(&index);
        let mut ledger = Model::default();
        let mut batches = Vec::new();
        for b in 0..70u64 {
            let docs = vec![(org_range(1).0 + b as i64, doc(b, 1 << 20))];
            ledger.entries.push(Some(None));
            batches.push(b + 1);
            index.enqueue(docs, vec![(1, b + 1, root(1, b + 1))]);
        }
        switch_failures(&index, true);
        assert!(index.write_chunk(&index.conn.lock()).is_err());
        switch_failures(&index, !succeeds);
        // The retry, held up by another connection's lock.
        let blocker = Connection::open(dir.path().join(FULLTEXT_FILE)).unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        let retry = {
            let index = Arc::clone(&index);
            std::thread::spawn(move || index.write_chunk(&index.conn.lock()).is_ok())
        };
        while counts(&index).4 == 70 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let taken = 70 - counts(&index).4 as u64;
        assert!(counts(&index).1 >= index.limit_bytes, "not past the limit");
        assert!(index.relieve().unwrap());
        assert!(index.queue.lock().unwrap().failed.is_some());
        assert_eq!(counts(&index), (0, 0, 70, 70, 0));
        blocker.execute_batch("ROLLBACK").unwrap();
        assert_eq!(retry.join().unwrap(), succeeds);
        assert_eq!(counts(&index), (0, 0, 70, 70, 0), "put back after the stop");
        assert_bookkeeping(&index);
        let conn = index.conn.lock();
        let below = check_crash_state(&conn, &ledger);
        if succeeds {
            assert_eq!(below, taken, "the retry's progress");
        } else {
            assert_eq!(below, 0);
        }
    }
}

/// Past the limit, a failure from before the sequencer arrived is given
/// the retry in progress (here held up a moment, then succeeding) before
/// the index is stopped: one transient failure (a lock held past the busy
/// timeout, a moment of a full disk) used to drop the queue and turn every
/// search into "restart the server".
#[test]
fn attack2_past_the_limit_a_stale_failure_waits_for_the_retry() {
    let dir = tempfile::tempdir().unwrap();
    let index = Arc::new(Shared {
        limit_bytes: BACKLOG_BYTES + (2 << 20),
        ..shared(dir.path())
    });
    install_failure_switch(&index);
    // 70 MB: past the limit (66 MB) by less than two chunks.
    for b in 0..70u64 {
        let docs = vec![(org_range(1).0 + b as i64, doc(b, 1 << 20))];
        index.enqueue(docs, vec![(1, b + 1, root(1, b + 1))]);
    }
    // One transient failure.
    switch_failures(&index, true);
    assert!(index.write_chunk(&index.conn.lock()).is_err());
    switch_failures(&index, false);
    // The retry is in progress (held up a moment by another connection).
    let blocker = Connection::open(dir.path().join(FULLTEXT_FILE)).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    // The retry, then the writes that follow it (as the thread's).
    let retry = {
        let index = Arc::clone(&index);
        std::thread::spawn(move || {
            let ok = index.write_chunk(&index.conn.lock()).is_ok();
            while ok && counts(&index).1 >= BACKLOG_BYTES {
                if index.write_chunk(&index.conn.lock()).is_err() {
                    return false;
                }
            }
            ok
        })
    };
    while counts(&index).4 == 70 {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(counts(&index).1 >= index.limit_bytes, "not past the limit");
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        blocker.execute_batch("ROLLBACK").unwrap();
    });
    assert!(index.relieve().unwrap());
    release.join().unwrap();
    assert!(retry.join().unwrap(), "the retry succeeded");
    let failed = index.queue.lock().unwrap().failed.clone();
    assert!(
        failed.is_none(),
        "the index was stopped although the write in progress succeeded: {failed:?}"
    );
}

/// Batches that leave no document (session starts and seals, reviews,
/// erasures, steps without text) never pile up while the index cannot be
/// written (they weighed nothing and did: they now join the last queued
/// batch).
#[test]
fn attack2_batches_without_documents_never_pile_up_while_writes_fail() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    install_failure_switch(&index);
    switch_failures(&index, true);
    let batches = cairn_testkit::campaign(300_000, 3_000_000);
    for b in 1..=batches {
        index.relieve().unwrap();
        // Each batch wrote to a few orgs.
        let sizes = (1..=4).map(|org| (org, b, root(org, b))).collect();
        index.enqueue(Vec::new(), sizes);
        if b % 50_000 == 0 {
            // The thread's failing retry.
            assert!(index.write_chunk(&index.conn.lock()).is_err());
        }
    }
    let q = index.queue.lock().unwrap();
    // What the queue holds beyond the documents' bytes: a QueuedBatch and
    // its sizes (4 × 48 bytes), at the least.
    let held = q.batches.len()
        * (std::mem::size_of::<QueuedBatch>() + 4 * std::mem::size_of::<(i64, u64, Hash)>());
    assert!(
        q.failed.is_some() || held < 16 << 20,
        "{} batches queued ({} MB held, {} bytes counted), the index neither written nor stopped",
        q.batches.len(),
        held >> 20,
        q.bytes
    );
}

/// The thread's retry sleep after a failed write neither delays a clean
/// close by more than about a tick, nor a search's flush once writes
/// succeed again; a stopped index closes as fast.
#[test]
fn attack2_the_retry_sleep_delays_neither_close_nor_a_search() {
    for stopped in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let shared = Arc::new(shared(dir.path()));
        install_failure_switch(&shared);
        queue_batches(&shared, 12, 700, 20);
        switch_failures(&shared, true);
        if stopped {
            shared.queue.lock().unwrap().fail("stopped".into());
        }
        let worker = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .spawn(move || shared.run())
                .unwrap()
        };
        let index = FullTextIndex {
            shared: Arc::clone(&shared),
            thread: Some(worker),
        };
        // The thread failed and sleeps.
        std::thread::sleep(Duration::from_millis(120));
        if !stopped {
            switch_failures(&shared, false);
            let started = Instant::now();
            index.flush().unwrap();
            assert!(
                started.elapsed() < Duration::from_millis(200),
                "a search's flush waited for the retry: {:?}",
                started.elapsed()
            );
            queue_batches(&shared, 2, 10, 20);
            switch_failures(&shared, true);
            shared.wake.notify_all();
            std::thread::sleep(Duration::from_millis(300));
        }
        let started = Instant::now();
        drop(index);
        assert!(
            started.elapsed() < TICK * 3,
            "close took {:?} (stopped: {stopped})",
            started.elapsed()
        );
    }
}

/// Short documents ("ok", "done") count what they hold, not only their
/// text (they held many times what the backlog and the limit counted: at
/// the 128 MB limit, with two-byte documents, gigabytes).
#[test]
fn attack2_short_documents_count_what_they_hold() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    let mut size = 0u64;
    for _ in 0..200 {
        let docs = (0..5000)
            .map(|i| (org_range(1).0 + (size + i) as i64, "ok".to_owned()))
            .collect();
        size += 5000;
        index.enqueue(docs, vec![(1, size, root(1, size))]);
    }
    let (docs, bytes, ..) = counts(&index);
    // At the least: each (id, String) in its Vec, and the String's own
    // allocation (16 bytes at the least, whatever the allocator).
    let held = docs * (std::mem::size_of::<(i64, String)>() + 16);
    assert!(
        held <= 2 * bytes,
        "{docs} documents: {} MB held, {} MB counted against the backlog and the limit",
        held >> 20,
        bytes >> 20
    );
}

/// A sequencer waiting past the limit (no write ends: the thread is held
/// up) goes on within about a tick once the index stops meanwhile (an
/// erasure it could not apply, from elsewhere), never waits forever.
#[test]
fn attack2_relieve_past_the_limit_returns_when_the_index_stops_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let index = Arc::new(Shared {
        limit_bytes: BACKLOG_BYTES,
        ..shared(dir.path())
    });
    queue_batches(&index, 66, 1, 1 << 20);
    let sequencer = {
        let index = Arc::clone(&index);
        std::thread::spawn(move || index.relieve())
    };
    std::thread::sleep(Duration::from_millis(600));
    assert!(!sequencer.is_finished(), "went on past the limit, healthy");
    index.queue.lock().unwrap().fail("stopped".into());
    let stopped = Instant::now();
    while !sequencer.is_finished() {
        assert!(
            stopped.elapsed() < TICK * 3,
            "still waiting for a stopped index"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(sequencer.join().unwrap().unwrap());
}
