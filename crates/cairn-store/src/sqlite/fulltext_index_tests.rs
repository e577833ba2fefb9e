//! The index's queue is written a chunk of whole batches at a time: each
//! write records, per org, the progress its last batch left, never past a
//! document still queued; a failed write leaves the queue as it was; a
//! backlogged sequencer writes one chunk, not the queue; erasure recounts
//! what is queued; a flush writes everything queued when it started.

use super::*;

/// An index file in `dir` with an empty queue and no thread: the tests
/// drive the writes themselves.
fn shared(dir: &Path) -> Shared {
    Shared {
        conn: parking_lot::Mutex::new(open_index_file(&dir.join(FULLTEXT_FILE)).unwrap()),
        queue: Mutex::new(Queue::default()),
        wake: Condvar::new(),
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
        assert_eq!(b.bytes, b.docs.iter().map(|(_, d)| d.len()).sum::<usize>());
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

#[test]
fn relieving_a_backlog_writes_one_chunk_not_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    assert!(
        !index.relieve().unwrap(),
        "nothing queued, nothing to wait for"
    );
    // 66 batches of one 1 MiB document: past the 64 MiB backlog.
    queue_batches(&index, 66, 1, 1 << 20);
    assert!(counts(&index).1 >= BACKLOG_BYTES);
    assert!(index.relieve().unwrap());
    let (_, bytes, _, written, left) = counts(&index);
    assert_eq!(written as usize, CHUNK_BYTES.div_ceil(1 << 20));
    assert_eq!(left, 66 - written as usize);
    assert!(bytes < BACKLOG_BYTES);
    assert!(!index.relieve().unwrap(), "below the backlog: no wait");
    assert_eq!(counts(&index).3, written);
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
