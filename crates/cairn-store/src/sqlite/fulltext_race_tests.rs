//! Attacks by a review session: races between the index thread's chunks,
//! erasures, flushes, failing writes and a backlogged sequencer, checked
//! against a model of the ledger.

use super::*;
use std::sync::atomic::AtomicBool;

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
