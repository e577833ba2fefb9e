//! FTS5's merge thresholds in the index's file, and the thread's idle
//! merges: what they leave alone while documents come, what they merge
//! once nothing is queued, and what they give way to.

use super::*;
use crate::sqlite::fulltext_merge::{AUTOMERGE, CRISISMERGE, USERMERGE};

/// Writes `writes` transactions of 40 documents each for org 1, each
/// document with 1,000 words of its own: one FTS5 segment per write, each
/// of more than FTS5's work unit (64 leaf pages), so that FTS5 merges them
/// at its default thresholds.
fn write_separately(index: &Shared, writes: u64) {
    // One segment per write, however many terms it holds (FTS5 writes its
    // pending terms out as a segment past 1 MB of them).
    fts5_set(&index.conn.lock(), &[("hashsize", 16_777_216)]);
    for write in 0..writes {
        let docs = (0..40)
            .map(|i| {
                let position = write * 40 + i;
                let words: Vec<String> = (0..1000).map(|w| format!("w{position}x{w}")).collect();
                (
                    org_range(1).0 + position as i64,
                    format!("one{position} {}", words.join(" ")),
                )
            })
            .collect();
        let size = (write + 1) * 40;
        index.enqueue(docs, vec![(1, size, root(1, size))]);
        index.flush().unwrap();
    }
}

fn setting(conn: &Connection, key: &str) -> Option<i64> {
    conn.query_row(
        "SELECT v FROM \"steps_fts_1_config\" WHERE k = ?1",
        [key],
        |r| r.get(0),
    )
    .optional()
    .unwrap()
}

/// While documents come, FTS5 merges a level only at 16 segments (at its
/// defaults the same writes are merged); once nothing is queued, the
/// thread merges every level back under 4, several steps, and every
/// document is still found. The settings are the file's own.
#[test]
fn segments_written_while_busy_are_merged_once_idle() {
    let defaults_dir = tempfile::tempdir().unwrap();
    let defaults = shared(defaults_dir.path());
    fts5_set(
        &defaults.conn.lock(),
        &[("automerge", 4), ("crisismerge", 16)],
    );
    write_separately(&defaults, 12);
    assert!(
        segments(&defaults) < 12,
        "FTS5's defaults merge these writes: {}",
        segments(&defaults)
    );

    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    write_separately(&index, 12);
    assert_eq!(segments(&index), 12, "no merge below 16 segments");
    let mut steps = 0;
    while merge_step(&index.conn.lock()).unwrap() {
        steps += 1;
    }
    assert!(steps >= 2, "a merge of this size takes steps: {steps}");
    assert!(segments(&index) < USERMERGE, "{}", segments(&index));
    assert_eq!(index.merge_while_idle(), IdleMerge::Done);
    assert!(!index.merge_due(), "nothing due until the next write");
    assert!((0..480).all(|position| indexed(&index, 1, position)));

    let reopened = open_index_file(&dir.path().join(FULLTEXT_FILE)).unwrap();
    assert_eq!(setting(&reopened, "automerge"), Some(AUTOMERGE));
    assert_eq!(setting(&reopened, "crisismerge"), Some(CRISISMERGE));
    assert_eq!(setting(&reopened, "usermerge"), Some(USERMERGE));
}

/// Notes the index as merged as of now (what an idle merge that found
/// nothing to merge records).
fn merged_now(index: &Shared) {
    let changes = index.conn.lock().total_changes();
    index.merged_at.store(changes, Ordering::Release);
}

/// Every write marks the index for an idle merge, whoever made it: the
/// thread's chunks, a search's flush, an erasure.
#[test]
fn every_write_makes_an_idle_merge_due() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    // Whether a merge is due, then as if a merge had found nothing to do.
    let due = |index: &Shared| {
        let due = index.merge_due();
        merged_now(index);
        due
    };
    assert!(
        due(&index),
        "due at first: the file may hold unmerged segments"
    );
    assert!(!due(&index));
    index.enqueue(
        vec![(org_range(1).0, "one0".into())],
        vec![(1, 1, root(1, 1))],
    );
    index.flush_org(Some(1)).unwrap();
    assert!(due(&index), "after a search's flush");
    index.erase(&[org_range(1).0]);
    assert!(due(&index), "after an erasure");
    index.flush().unwrap();
    assert!(!due(&index), "a flush with nothing queued writes nothing");
}

/// An idle merge gives way between its steps: to queued documents
/// (written first), to a stop, to a catch-up; and it never waits for
/// another holder of the file's lock, while the index's writes still do.
#[test]
fn idle_merges_give_way_to_documents_stops_and_other_writers() {
    let dir = tempfile::tempdir().unwrap();
    let index = shared(dir.path());
    write_separately(&index, 5);
    assert!(
        merge_step(&index.conn.lock()).unwrap(),
        "one step of several"
    );
    let before = segments(&index);
    index.enqueue(
        vec![(org_range(1).0 + 200, "one200".into())],
        vec![(1, 201, root(1, 201))],
    );
    assert_eq!(index.merge_while_idle(), IdleMerge::GaveWay);
    assert_eq!(segments(&index), before, "nothing merged while queued");
    index.flush().unwrap();
    catching_up(&index, 2);
    assert_eq!(index.merge_while_idle(), IdleMerge::GaveWay);
    lock(&index.queue).unwrap().catching_up = None;
    lock(&index.queue).unwrap().stop = true;
    assert_eq!(index.merge_while_idle(), IdleMerge::GaveWay);
    lock(&index.queue).unwrap().stop = false;

    let other = Connection::open(dir.path().join(FULLTEXT_FILE)).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();
    assert_eq!(index.merge_while_idle(), IdleMerge::Failed);
    assert!(started.elapsed() < Duration::from_secs(1));
    // The index's own writes wait for the lock as before (the merge left
    // the connection's busy timeout as it found it).
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        other.execute_batch("ROLLBACK").unwrap();
    });
    index.enqueue(
        vec![(org_range(1).0 + 201, "one201".into())],
        vec![(1, 202, root(1, 202))],
    );
    index.flush().unwrap();
    release.join().unwrap();

    assert_eq!(index.merge_while_idle(), IdleMerge::Done);
    assert!(segments(&index) < USERMERGE);
    assert!((0..202).all(|position| indexed(&index, 1, position)));
}

/// Setting the merge thresholds never holds up an open: with the file's
/// lock held elsewhere, the open goes on with the file's settings, and a
/// later open writes them.
#[test]
fn an_open_never_waits_to_write_the_merge_settings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FULLTEXT_FILE);
    let conn = open_index_file(&path).unwrap();
    fts5_set(&conn, &[("automerge", 4)]);
    drop(conn);
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();
    let opened = open_index_file(&path).unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(setting(&opened, "automerge"), Some(4));
    other.execute_batch("ROLLBACK").unwrap();
    drop(opened);
    let opened = open_index_file(&path).unwrap();
    assert_eq!(setting(&opened, "automerge"), Some(AUTOMERGE));
}

/// The thread itself: a search's flush writes segments, and once nothing
/// is queued the thread merges them, ticks later, without being asked.
#[test]
fn the_thread_merges_what_a_search_wrote_once_idle() {
    let dir = tempfile::tempdir().unwrap();
    let index = Arc::new(shared(dir.path()));
    merged_now(&index);
    fts5_set(&index.conn.lock(), &[("hashsize", 16_777_216)]);
    for write in 0..6u64 {
        let position = write * 10;
        let docs = (0..10)
            .map(|i| {
                (
                    org_range(1).0 + (position + i) as i64,
                    format!("one{}", position + i),
                )
            })
            .collect();
        index.enqueue(docs, vec![(1, position + 10, root(1, position + 10))]);
        index.flush_org(Some(1)).unwrap();
    }
    assert_eq!(segments(&index), 6);
    let worker = {
        let index = Arc::clone(&index);
        std::thread::spawn(move || index.run())
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while segments(&index) >= USERMERGE && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    lock(&index.queue).unwrap().stop = true;
    index.wake.notify_all();
    worker.join().unwrap();
    assert!(segments(&index) < USERMERGE, "{}", segments(&index));
    assert!((0..60).all(|position| indexed(&index, 1, position)));
}
