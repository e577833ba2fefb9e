//! Attacks by a second review session: parts of batches larger than a
//! chunk, the backlogged sequencer's wait (`relieve`), the thread's retry
//! sleep.

use super::*;
use std::sync::atomic::AtomicBool;

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
            index.flush_for(1).unwrap();
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
