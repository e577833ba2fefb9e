//! Attacks on the background catch-up of the full-text index with the log
//! (b8146d5): SIGKILL at any moment of a catch-up (full rebuilds, stale
//! snapshots, crash-left queues) with erasures of old and new steps in
//! three orgs and a backlog absorbed into the catch-up; erasures placed
//! around the chunks; close during a catch-up; a locked index file.

use super::*;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "CAIRN_FT_CATCHUP_CHILD_DIR";
const ORGS: [&str; 3] = ["acme", "beta", "gamma"];

fn run_id() -> u128 {
    static RUN: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    *RUN.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    })
}

/// A unique word ending in `e` (erasable) or `k` (kept), then filler up
/// to about `bytes`.
fn content(tag: &str, n: u64, erasable: bool, bytes: usize) -> String {
    let mut c = format!(
        "cu{}{tag}n{n}{} ",
        run_id(),
        if erasable { "e" } else { "k" }
    );
    let mut k = 0u64;
    while c.len() < bytes {
        c.push_str(&format!("g{} ", (n * 31 + k) % 7000));
        k += 1;
    }
    c
}

fn first_word(content: &str) -> &str {
    content.split(' ').next().unwrap()
}

fn step_request(store: &SqliteStore, org: &str, session: &str, content: &str) -> WriteRequest {
    let mut s = crate::conformance::step(session, "Reasoning", content);
    s.org_id = org.into();
    WriteRequest::Prepared(Box::new(
        cairn_store::prepare_step(s, &store.limits(), 0.0).unwrap(),
    ))
}

fn erase_in(org: &str, trace_id: &str) -> WriteRequest {
    WriteRequest::Erase {
        org_id: org.into(),
        trace_id: trace_id.into(),
        reason: "gdpr".into(),
        actor: "dpo".into(),
    }
}

fn big_options() -> SqliteOptions {
    let mut options = seq_options();
    options.limits.max_content_bytes = 256 << 10;
    options
}

/// Opens the store and waits until a search of every org is answered (a
/// search of an org whose documents are all in is answered while other
/// orgs are still caught up with the log).
fn open_settled(dir: &Path) -> SqliteStore {
    let store = SqliteStore::open(dir, big_options()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    for org in store.orgs().unwrap() {
        loop {
            match search(&store, &org, "anything") {
                Err(cairn_store::StoreError::Busy(_)) if Instant::now() < deadline => {}
                Err(e) => panic!("the index did not settle: {e}"),
                Ok(_) => break,
            }
        }
    }
    store
}

/// fulltext.db checked against ledger.db for every org (see
/// `attacks::check_index_against_ledger`). Returns per org (progress, size).
fn check_all_orgs(dir: &Path, mended: bool) -> Vec<(String, i64, i64)> {
    let ledger = rusqlite::Connection::open_with_flags(
        dir.join(cairn_store::DB_FILE),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let index_file = dir.join(cairn_store::FULLTEXT_FILE);
    if !index_file.exists() {
        assert!(!mended, "no fulltext.db after a settled open");
        return Vec::new();
    }
    let index = rusqlite::Connection::open(&index_file).unwrap();
    let orgs: Vec<(i64, String)> = ledger
        .prepare("SELECT org, name FROM orgs")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut out = Vec::new();
    for (org, name) in orgs {
        let size: i64 = ledger
            .query_row("SELECT count(*) FROM entries WHERE org = ?1", [org], |r| {
                r.get(0)
            })
            .unwrap();
        let progress: i64 = index
            .query_row(
                "SELECT indexed_below FROM fulltext_progress WHERE org = ?1",
                [org],
                |r| r.get(0),
            )
            .unwrap_or(0);
        assert!(progress <= size, "{name}: progress {progress} past {size}");
        if mended {
            assert_eq!(
                progress, size,
                "{name}: the settled index is not at the log"
            );
        }
        let rows = ledger_steps(&ledger, org, i64::MAX);
        for (id, seq, content, erased, erasure) in rows {
            let in_index = count_documents(&index, org, "rowid = ?1", [id]) > 0;
            match (erased, erasure) {
                (false, _) if seq < progress => {
                    let word = first_word(content.as_deref().unwrap());
                    let found = count_documents(
                        &index,
                        org,
                        "{t} MATCH ?1 AND rowid = ?2",
                        rusqlite::params![format!("\"{word}\""), id],
                    );
                    assert_eq!(
                        found, 1,
                        "{name}: progress {progress} (mended {mended}) passes step {seq}, not indexed"
                    );
                }
                (true, Some(record)) if record < progress => assert!(
                    !in_index,
                    "{name}: progress {progress} (mended {mended}) passes erasure {record} of step {seq}, still indexed"
                ),
                (true, None) => panic!("{name}: step {seq} erased without a record"),
                _ => {}
            }
            if mended && erased {
                assert!(!in_index, "{name}: erased step {seq} in a settled index");
            }
        }
        out.push((name, progress, size));
    }
    out
}

/// The child: opens the store (a catch-up is due), then writes batches to
/// three orgs (every third batch of ~200 KB documents, so the queue runs
/// past the backlog and is absorbed), erases random old and new steps
/// read from the ledger, and searches: an erased word is never found; once
/// searches answer, the last kept step acknowledged is.
#[test]
fn catch_up_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    use std::io::Write as _;
    let dir = PathBuf::from(dir);
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let say = {
        let out = out.clone();
        move |line: String| {
            let mut out = out.lock().unwrap();
            writeln!(out, "{line}").unwrap();
            out.flush().unwrap();
        }
    };
    let started = Instant::now();
    let store = Arc::new(SqliteStore::open(&dir, big_options()).unwrap());
    say(format!("OPENED {} ms", started.elapsed().as_millis()));
    let acked: Arc<std::sync::Mutex<Vec<(String, String)>>> = Arc::default();
    let erased: Arc<std::sync::Mutex<Vec<(String, String)>>> = Arc::default();
    let mut threads = Vec::new();
    {
        let (store, acked, say) = (store.clone(), acked.clone(), say.clone());
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            for i in 0u64.. {
                let big = i % 3 == 0;
                let count = if big { 30 } else { 60 };
                let mut words = Vec::new();
                let batch: Vec<WriteRequest> = (0..count)
                    .map(|k| {
                        n += 1;
                        let org = ORGS[((i + k) % 3) as usize];
                        let c =
                            content("c", n, n.is_multiple_of(3), if big { 200_000 } else { 300 });
                        words.push((org, first_word(&c).to_owned()));
                        step_request(&store, org, &format!("c{}", k % 7), &c)
                    })
                    .collect();
                let Ok(results) = store.append_batch(&batch) else {
                    continue;
                };
                for (r, (org, word)) in results.into_iter().zip(words) {
                    if let Ok(Written::Step { seq, .. }) = r {
                        say(format!("ACK {org} {seq} {word}"));
                        if word.ends_with('k') {
                            acked.lock().unwrap().push((org.to_owned(), word));
                        }
                    }
                }
            }
        }));
    }
    {
        let (store, erased, say, dir) = (store.clone(), erased.clone(), say.clone(), dir.clone());
        threads.push(std::thread::spawn(move || {
            let ledger = rusqlite::Connection::open_with_flags(
                dir.join(cairn_store::DB_FILE),
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .unwrap();
            ledger.busy_timeout(Duration::from_secs(10)).unwrap();
            let mut rng = run_id() as u64 | 1;
            loop {
                std::thread::sleep(Duration::from_millis(15));
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let org = ORGS[(rng % 3) as usize];
                let picked: rusqlite::Result<(String, String, i64)> = ledger
                    .query_row(
                        "WITH r(lo, hi) AS (SELECT org << 40, (org + 1) << 40 FROM orgs WHERE name = ?1),
                              m(top) AS (SELECT max(id) FROM entries, r WHERE id >= r.lo AND id < r.hi)
                         SELECT e.trace_id, e.content, e.seq FROM entries e, r, m
                         WHERE e.id >= r.lo + abs(?2) % (m.top - r.lo + 1) AND e.id < r.hi
                           AND e.type = 'step' AND e.erased = 0
                           AND substr(e.content, 1, 60) GLOB 'cu*e *'
                         ORDER BY e.id LIMIT 1",
                        rusqlite::params![org, (rng >> 1) as i64],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    );
                let (trace, content, seq) = match picked {
                    Ok(picked) => picked,
                    Err(rusqlite::Error::QueryReturnedNoRows) => continue,
                    Err(e) => {
                        say(format!("PICK {e}"));
                        continue;
                    }
                };
                let word = first_word(&content).to_owned();
                match store.append_batch(&[erase_in(org, &trace)]).map(|mut r| r.remove(0)) {
                    Ok(Ok(_)) => {
                        say(format!("ERASED {org} {seq} {word}"));
                        erased.lock().unwrap().push((org.to_owned(), word));
                    }
                    other => say(format!("NOERASE {other:?}")),
                }
            }
        }));
    }
    {
        let (store, acked, erased, say) =
            (store.clone(), acked.clone(), erased.clone(), say.clone());
        threads.push(std::thread::spawn(move || {
            let mut k = 0usize;
            loop {
                std::thread::sleep(Duration::from_millis(20));
                k += 1;
                let gone = {
                    let e = erased.lock().unwrap();
                    (!e.is_empty()).then(|| e[k % e.len()].clone())
                };
                if let Some((org, word)) = gone {
                    match search(&store, &org, &word) {
                        Ok(found) if !found.is_empty() => say(format!("LEAK {org} {word}")),
                        Ok(_) => {}
                        Err(cairn_store::StoreError::Busy(_)) => {}
                        Err(e) => say(format!("ERROR {e}")),
                    }
                }
                let last = acked.lock().unwrap().last().cloned();
                if let Some((org, word)) = last {
                    match search(&store, &org, &word) {
                        Ok(found) if found.len() == 1 => say("FOUND".into()),
                        Ok(found) => say(format!("MISS {org} {word} {found:?}")),
                        Err(cairn_store::StoreError::Busy(_)) => say("BUSY".into()),
                        Err(e) => say(format!("ERROR {e}")),
                    }
                }
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
}

/// The index files of data directory `from` put in place of `to`'s (or
/// `to`'s removed, if `from` has none).
fn copy_index(from: &Path, to: &Path) {
    copy_index_file(
        &from.join(cairn_store::FULLTEXT_FILE),
        &to.join(cairn_store::FULLTEXT_FILE),
    );
}

/// SIGKILL at random moments of a catch-up: before each round the index is
/// removed (rebuilt whole), put back as an older crash left it (stale,
/// same history), or left as the last crash left it. At each kill the
/// progress invariant holds in every org; every other round, a settled
/// open leaves every kept step indexed and no erased one; the child never
/// finds an erased step, and once searches answer finds the last step it
/// acknowledged. (Run as `campaigns::catch_up_attack_sigkill_during_catch_up`.)
pub(crate) fn catch_up_attack_sigkill_during_catch_up() {
    let dir = tempfile::tempdir().unwrap();
    let snaps = tempfile::tempdir().unwrap();
    // A log for the catch-up: 3 orgs, 24,000 steps.
    {
        let store = SqliteStore::open(dir.path(), big_options()).unwrap();
        let mut n = 0u64;
        for b in 0..48u64 {
            let batch: Vec<WriteRequest> = (0..500u64)
                .map(|k| {
                    n += 1;
                    let org = ORGS[((b + k) % 3) as usize];
                    let c = content("p", n, n.is_multiple_of(3), 300);
                    step_request(&store, org, &format!("p{}", k % 11), &c)
                })
                .collect();
            for r in store.append_batch(&batch).unwrap() {
                r.unwrap();
            }
        }
    }
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut totals = (0, 0, 0, 0);
    // Each round leaves a snapshot of the index as its kill left it, named
    // by the round: the rounds before this one's are the snapshots taken.
    for round in 0..cairn_testkit::campaign(8, 30) {
        let snapshots = round as usize;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let mode = match round % 3 {
            0 => {
                copy_index(Path::new("/nonexistent"), dir.path());
                "rebuilt"
            }
            1 if snapshots > 0 => {
                let snap = snaps.path().join(format!("{}", rng as usize % snapshots));
                copy_index(&snap, dir.path());
                "stale snapshot"
            }
            _ => "as left",
        };
        let lines = child_killed_after(
            "sqlite_fulltext::catch_up_attacks::catch_up_child",
            &[(CHILD_ENV, dir.path().as_os_str())],
            Duration::from_millis(800 + rng % 7000),
        );
        let bad: Vec<_> = lines
            .iter()
            .filter(|l| l.starts_with("MISS") || l.starts_with("LEAK") || l.contains("ERROR"))
            .collect();
        assert!(
            bad.is_empty(),
            "round {round} ({mode}): {} bad: {:?}",
            bad.len(),
            &bad[..bad.len().min(5)]
        );
        let count = |p: &str| lines.iter().filter(|l| l.starts_with(p)).count();
        let opened = lines.iter().find(|l| l.contains("OPENED")).cloned();
        for l in lines
            .iter()
            .filter(|l| l.starts_with("PICK") || l.starts_with("NOERASE"))
            .take(3)
        {
            eprintln!("{l}");
        }
        totals.0 += count("ACK");
        totals.1 += count("ERASED");
        totals.2 += count("BUSY");
        totals.3 += count("FOUND");
        let crashed = check_all_orgs(dir.path(), false);
        let snap = snaps.path().join(format!("{round}"));
        std::fs::create_dir(&snap).unwrap();
        copy_index(dir.path(), &snap);
        let mended = if round % 2 == 1 {
            drop(open_settled(dir.path()));
            Some(check_all_orgs(dir.path(), true))
        } else {
            None
        };
        eprintln!(
            "round {round} ({mode}): {opened:?}, {} acks, {} erased, {} busy, {} found; at the kill {crashed:?}; mended {mended:?}",
            count("ACK"),
            count("ERASED"),
            count("BUSY"),
            count("FOUND")
        );
    }
    drop(open_settled(dir.path()));
    check_all_orgs(dir.path(), true);
    eprintln!("totals (acks, erased, busy, found): {totals:?}");
    assert!(totals.1 > 0 && totals.2 > 0);
}

/// A catch-up chunk was bounded by 4,096 steps only, not by bytes: steps
/// with documents near the 256 KB cap make one chunk hundreds of MB of
/// text in one transaction, holding the index's connection throughout.
/// An erasure meanwhile (the sequencer, holding the writer, waits for the
/// connection to delete the document before acknowledging) and a close
/// (which waits for the chunk) then wait for all of it, where the queue's
/// chunks bound the same waits to about 4 MB of text.
#[test]
fn catch_up_attack_a_chunk_of_big_documents_bounds_erasure_and_close_waits() {
    let dir = tempfile::tempdir().unwrap();
    let mut traces = Vec::new();
    {
        let store = SqliteStore::open(dir.path(), big_options()).unwrap();
        for b in 0..80u64 {
            let batch: Vec<WriteRequest> = (0..20u64)
                .map(|k| {
                    let c = content("b", b * 20 + k, true, 250_000);
                    step_request(&store, "acme", &format!("b{}", k % 5), &c)
                })
                .collect();
            for r in store.append_batch(&batch).unwrap() {
                if let Ok(Written::Step { trace_id, .. }) = r {
                    traces.push(trace_id);
                }
            }
        }
    }
    let mut measure = |erase: bool| {
        copy_index(Path::new("/nonexistent"), dir.path());
        let started = Instant::now();
        let store = SqliteStore::open(dir.path(), big_options()).unwrap();
        let opened = started.elapsed();
        // Let the thread start its first chunk.
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        if erase {
            let victim = traces.pop().unwrap();
            store
                .append_batch(&[erase_in("acme", &victim)])
                .unwrap()
                .remove(0)
                .unwrap();
        } else {
            drop(store);
        }
        (opened, started.elapsed())
    };
    let (opened, erasure) = measure(true);
    let (_, close) = measure(false);
    eprintln!("1,600 steps of 250 KB: open {opened:?}, erasure {erasure:?}, close {close:?}");
    assert!(
        opened < Duration::from_secs(2),
        "the open waited: {opened:?}"
    );
    // What a chunk of the queue (4 MB of documents) takes, generously.
    let bound = Duration::from_secs(3);
    assert!(
        erasure < bound && close < bound,
        "an erasure waited {erasure:?}, a close {close:?}, for one catch-up chunk"
    );
}

/// Something holds fulltext.db's write lock past the 10 s busy timeout
/// while the index catches up (a backup tool, `sqlite3`): a queued write
/// that fails so is tried again a tick later; a catch-up chunk that
/// failed so stopped the index until the server restarts (searches:
/// "restart the server to mend it"), though nothing was wrong once the
/// lock was let go.
#[test]
fn catch_up_attack_a_lock_held_past_the_busy_timeout_does_not_stop_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let saved = tempfile::tempdir().unwrap();
    {
        let store = SqliteStore::open(dir.path(), big_options()).unwrap();
        write_step(&store, "the first step");
    }
    copy_index(dir.path(), saved.path());
    {
        let store = SqliteStore::open(dir.path(), big_options()).unwrap();
        let batch: Vec<WriteRequest> = (0..2000u64)
            .map(|n| step_request(&store, "acme", "s1", &content("l", n, false, 200)))
            .collect();
        for r in store.append_batch(&batch).unwrap() {
            r.unwrap();
        }
        write_step(&store, "the zeppelin departs at noon");
    }
    copy_index(saved.path(), dir.path());
    let blocker = rusqlite::Connection::open(dir.path().join(cairn_store::FULLTEXT_FILE)).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let server = SqliteStore::open(dir.path(), big_options()).unwrap();
    std::thread::sleep(Duration::from_secs(11));
    blocker.execute_batch("ROLLBACK").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let found = loop {
        match search(&server, "acme", "zeppelin") {
            Err(cairn_store::StoreError::Busy(_)) if Instant::now() < deadline => {}
            other => break other,
        }
    };
    assert_eq!(
        found.map(|f| f.len()).map_err(|e| e.to_string()),
        Ok(1),
        "the index after a lock let go"
    );
}
