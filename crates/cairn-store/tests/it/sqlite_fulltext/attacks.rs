//! Attacks by two review sessions on the chunked index writes: SIGKILL
//! mid-ingest and under a backlog, searches under ingest and a drop while
//! writing, an unwritable index, index snapshots beside a later ledger,
//! imports written by the index's thread.

use super::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const ATTACK_CHILD_ENV: &str = "CAIRN_FT_ATTACK_CHILD_DIR";

/// A step's unique word, and a content of about `bytes` bytes.
fn attack_content(writer: usize, i: u64, bytes: usize) -> String {
    // Unique across runs on the same store.
    static RUN: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    let run = RUN.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    });
    let mut c = format!("uw{run}r{writer}x{i} ");
    let mut k = 0;
    while c.len() < bytes {
        c.push_str(&format!("f{} ", (i * 31 + k) % 5000));
        k += 1;
    }
    c
}

fn unique_word(content: &str) -> &str {
    content.split(' ').next().unwrap()
}

/// Heavy ingest through the sequencer (8 writers, documents of 2 to 24
/// KB), an eraser erasing acknowledged steps, and a searcher checking that
/// the last step acknowledged before its search is found ("MISS" if not).
fn attack_ingest(
    store: Arc<SqliteStore>,
    stop: Arc<AtomicBool>,
    out: impl Fn(String) + Send + Sync + 'static,
) {
    let out = Arc::new(out);
    let dyn_store: Arc<dyn LedgerStore> = store.clone();
    let ledger = Arc::new(cairn_store::Ledger::new(
        dyn_store,
        cairn_store::SequencerConfig::default(),
    ));
    // (trace, content) acknowledged, for the eraser (i % 4 == 0) and the
    // searcher (the others).
    let acked: Arc<std::sync::Mutex<Vec<(String, String, u64)>>> = Arc::default();
    let mut threads = Vec::new();
    for w in 0..8 {
        let (ledger, acked, stop, out) = (ledger.clone(), acked.clone(), stop.clone(), out.clone());
        threads.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let bytes = 2_000 + ((i * 7919 + w as u64 * 104_729) % 22_000) as usize;
                let content = attack_content(w, i, bytes);
                let mut s = crate::conformance::step(&format!("w{w}"), "Reasoning", &content);
                s.agent_id = format!("agent-{w}");
                if let Ok(Written::Step { trace_id, seq, .. }) =
                    ledger.write(WriteRequest::Step(Box::new(s)))
                {
                    out(format!("ACK {trace_id} {seq} {}", unique_word(&content)));
                    acked.lock().unwrap().push((trace_id, content, i));
                }
                i += 1;
            }
        }));
    }
    {
        let (ledger, acked, stop, out) = (ledger.clone(), acked.clone(), stop.clone(), out.clone());
        threads.push(std::thread::spawn(move || {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(3));
                let victim = {
                    let a = acked.lock().unwrap();
                    let candidates: Vec<_> = a.iter().filter(|(_, _, i)| i % 4 == 0).collect();
                    if candidates.is_empty() {
                        continue;
                    }
                    n = n
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    candidates[(n >> 33) % candidates.len()].0.clone()
                };
                if let Ok(Written::Erased { seqs, .. }) = ledger.write(erase(&victim)) {
                    out(format!("ERASED {victim} {seqs:?}"));
                }
            }
        }));
    }
    {
        let (store, acked, stop, out) = (store.clone(), acked.clone(), stop.clone(), out.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let target = {
                    let a = acked.lock().unwrap();
                    a.iter().rev().find(|(_, _, i)| i % 4 != 0).cloned()
                };
                let Some((trace, content, _)) = target else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let started = Instant::now();
                let found = store.full_text_search(
                    "acme",
                    &FullTextQuery::parse(unique_word(&content)).unwrap(),
                    &cairn_store::StepFilter::default(),
                    5,
                );
                let took = started.elapsed();
                match found {
                    Ok(hits) if hits.len() == 1 => out(format!("SEARCH {} ms", took.as_millis())),
                    other => out(format!("MISS {trace} {other:?}")),
                }
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
}

/// The child side of `attack_sigkill_mid_ingest_with_erasures`.
#[test]
fn attack_child() {
    let Some(dir) = std::env::var_os(ATTACK_CHILD_ENV) else {
        return;
    };
    let store = Arc::new(SqliteStore::open(Path::new(&dir), seq_options()).unwrap());
    let out = std::sync::Mutex::new(std::io::stdout());
    attack_ingest(store, Arc::new(AtomicBool::new(false)), move |line| {
        use std::io::Write as _;
        let mut out = out.lock().unwrap();
        writeln!(out, "{line}").unwrap();
        out.flush().unwrap();
    });
}

/// fulltext.db checked against ledger.db, both read raw. `mended`: after a
/// sequencing open (progress at the log's size, every step as the ledger
/// says); otherwise as a crash left it: the recorded progress never passes
/// a step whose document is missing, nor an erasure whose deletion is not
/// applied. Returns (progress, log size, steps checked).
fn check_index_against_ledger(dir: &Path, mended: bool) -> (i64, i64, usize) {
    let ledger = rusqlite::Connection::open_with_flags(
        dir.join(cairn_store::DB_FILE),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let index = rusqlite::Connection::open(dir.join(cairn_store::FULLTEXT_FILE)).unwrap();
    let org: i64 = ledger
        .query_row("SELECT org FROM orgs WHERE name = 'acme'", [], |r| r.get(0))
        .unwrap();
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
    assert!(
        progress <= size,
        "progress {progress} past the log's size {size}"
    );
    if mended {
        assert_eq!(
            progress, size,
            "the open did not bring the index up to the log"
        );
    }
    let rows = ledger_steps(&ledger, org, progress);
    let by_rowid = |id: i64| -> bool { count_documents(&index, org, "rowid = ?1", [id]) > 0 };
    let by_word = |id: i64, content: &str| -> bool {
        count_documents(
            &index,
            org,
            "{t} MATCH ?1 AND rowid = ?2",
            rusqlite::params![format!("\"{}\"", unique_word(content)), id],
        ) == 1
    };
    for (id, seq, content, erased, erasure) in &rows {
        match (erased, erasure) {
            (false, _) => assert!(
                by_word(*id, content.as_deref().unwrap()),
                "progress {progress} (mended: {mended}) passes step {seq}, not indexed"
            ),
            (true, Some(record)) if *record < progress => assert!(
                !by_rowid(*id),
                "progress {progress} (mended: {mended}) passes erasure {record} of step {seq}, still indexed"
            ),
            (true, None) => panic!("step {seq} erased without a record"),
            _ => {}
        }
    }
    (progress, size, rows.len())
}

/// SIGKILL mid-ingest (big documents, so the thread writes in chunks and
/// the sequencer relieves a backlog), with erasures and searches: at each
/// kill, fulltext.db as left satisfies the progress invariant, and the
/// next sequencing open indexes every non-erased step and no erased one.
/// The child's searches always find the step acknowledged before them.
#[test]
fn attack_sigkill_mid_ingest_with_erasures() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = 0x1234_5678_9abc_def1u64;
    let mut erased_total = 0;
    for round in 0..cairn_testkit::campaign(2, 8) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let lines = child_killed_after(
            "sqlite_fulltext::attacks::attack_child",
            &[(ATTACK_CHILD_ENV, dir.path().as_os_str())],
            Duration::from_millis(1500 + rng % 2500),
        );
        let misses: Vec<_> = lines.iter().filter(|l| l.starts_with("MISS")).collect();
        assert!(
            misses.is_empty(),
            "round {round}: {} misses: {:?}",
            misses.len(),
            &misses[..misses.len().min(5)]
        );
        let acks = lines.iter().filter(|l| l.starts_with("ACK")).count();
        let erased = lines.iter().filter(|l| l.starts_with("ERASED")).count();
        erased_total += erased;
        let slowest = lines
            .iter()
            .filter_map(|l| {
                l.strip_prefix("SEARCH ")?
                    .strip_suffix(" ms")?
                    .parse::<u64>()
                    .ok()
            })
            .max();
        let crashed = check_index_against_ledger(dir.path(), false);
        {
            let _store = open_caught_up(dir.path());
        }
        let mended = check_index_against_ledger(dir.path(), true);
        eprintln!(
            "round {round}: {acks} acks, {erased} erased, slowest search {slowest:?} ms; at the kill (progress, size, checked) {crashed:?}, mended {mended:?}"
        );
    }
    assert!(erased_total > 0);
}

/// In one process: searches under continuous ingest find what was
/// acknowledged before them, and the store is dropped while the index
/// thread writes (the last owner a searcher thread).
#[test]
fn attack_searches_under_ingest_and_drop_while_writing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path(), seq_options()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let runner = {
        let (store, stop, lines) = (store.clone(), stop.clone(), lines.clone());
        std::thread::spawn(move || {
            attack_ingest(store, stop, move |l| lines.lock().unwrap().push(l));
        })
    };
    std::thread::sleep(Duration::from_secs(cairn_testkit::campaign(3, 12)));
    stop.store(true, Ordering::Relaxed);
    runner.join().unwrap();
    let lines = lines.lock().unwrap();
    let misses: Vec<_> = lines.iter().filter(|l| l.starts_with("MISS")).collect();
    assert!(
        misses.is_empty(),
        "{} misses: {:?}",
        misses.len(),
        &misses[..misses.len().min(5)]
    );
    let acked: Vec<(String, String)> = lines
        .iter()
        .filter_map(|l| {
            let mut p = l.strip_prefix("ACK ")?.split(' ');
            Some((p.next()?.to_owned(), p.nth(1)?.to_owned()))
        })
        .collect();
    eprintln!(
        "{} acks, {} erased, {} searches, slowest index chunk {} ms, slowest index wait {} ms",
        acked.len(),
        lines.iter().filter(|l| l.starts_with("ERASED")).count(),
        lines.iter().filter(|l| l.starts_with("SEARCH")).count(),
        store.slowest_index_chunk_micros() / 1000,
        store
            .slowest_batch_parts()
            .index_flush
            .load(Ordering::Relaxed)
            / 1000,
    );
    // Queue more, then drop the store while the thread writes.
    let more = (0..400)
        .map(|i| {
            WriteRequest::Prepared(Box::new(
                cairn_store::prepare_step(
                    crate::conformance::step("late", "Reasoning", &attack_content(99, i, 20_000)),
                    &store.limits(),
                    0.0,
                )
                .unwrap(),
            ))
        })
        .collect::<Vec<_>>();
    store.append_batch(&more).unwrap();
    let searcher = {
        let store = store.clone();
        std::thread::spawn(move || hits(&store, unique_word(&attack_content(99, 399, 10))).len())
    };
    drop(store);
    assert_eq!(searcher.join().unwrap(), 1);
    let (progress, size, _) = check_index_against_ledger(dir.path(), false);
    assert_eq!(progress, size, "a clean close left the queue unwritten");
}

/// A derived index that cannot be written for a while (here another
/// connection holds fulltext.db's write lock) must not stop ingest: past
/// the backlog a batch waits at most about a second for the stuck write,
/// then goes on (before the fix: 20 s each, then refused).
#[test]
fn attack_an_unwritable_index_under_backlog_never_stops_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = seq_options();
    options.limits.max_content_bytes = 4 << 20;
    let server = SqliteStore::open(dir.path(), options).unwrap();
    write_step(&server, "the zeppelin departs at noon");
    let blocker = rusqlite::Connection::open(dir.path().join(cairn_store::FULLTEXT_FILE)).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    // Documents are cut at 256 KB: batches of 20 such steps (5 MB).
    let words: String = (0..40_000).map(|i| format!("w{i} ")).collect();
    let mut refused = None;
    for i in 0..20 {
        let batch: Vec<WriteRequest> = (0..20)
            .map(|_| {
                WriteRequest::Prepared(Box::new(
                    cairn_store::prepare_step(
                        crate::conformance::step("s1", "Reasoning", &words),
                        &server.limits(),
                        0.0,
                    )
                    .unwrap(),
                ))
            })
            .collect();
        let started = Instant::now();
        let answer = server.append_batch(&batch);
        eprintln!("append {i}: {:?} {}", started.elapsed(), answer.is_ok());
        if let Err(e) = answer {
            refused = Some((i, started.elapsed(), e));
            break;
        }
    }
    blocker.execute_batch("ROLLBACK").unwrap();
    assert!(
        refused.is_none(),
        "ingest refused because the derived index could not be written: {refused:?}"
    );
}

const BULK_CHILD_ENV: &str = "CAIRN_FT_BULK_CHILD_DIR";

/// The child side of `attack_sigkill_with_a_backlog`: big batches straight
/// to the store (300 steps of 4 to 40 KB, and erasures of earlier steps in
/// the same batches), no searches: the queue runs past the backlog and the
/// sequencer relieves it.
#[test]
fn attack_bulk_child() {
    let Some(dir) = std::env::var_os(BULK_CHILD_ENV) else {
        return;
    };
    use std::io::Write as _;
    let store = SqliteStore::open(Path::new(&dir), seq_options()).unwrap();
    // Now and then something holds fulltext.db's write lock for 4 s (less
    // than the busy timeout): the queue runs past the backlog meanwhile.
    let blocked = Path::new(&dir).join(cairn_store::FULLTEXT_FILE);
    std::thread::spawn(move || {
        let blocker = rusqlite::Connection::open(&blocked).unwrap();
        blocker.busy_timeout(Duration::from_secs(30)).unwrap();
        loop {
            std::thread::sleep(Duration::from_millis(1500));
            blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
            std::thread::sleep(Duration::from_secs(4));
            blocker.execute_batch("ROLLBACK").unwrap();
        }
    });
    let mut out = std::io::stdout();
    let mut erasable: Vec<String> = Vec::new();
    let mut n = 7u64;
    for i in 0u64.. {
        let mut batch: Vec<WriteRequest> = (0..300u64)
            .map(|k| {
                let j = i * 300 + k;
                let bytes = 4_000 + ((j * 7919) % 36_000) as usize;
                WriteRequest::Prepared(Box::new(
                    cairn_store::prepare_step(
                        crate::conformance::step(
                            &format!("b{}", j % 16),
                            "Reasoning",
                            &attack_content(7, j, bytes),
                        ),
                        &store.limits(),
                        0.0,
                    )
                    .unwrap(),
                ))
            })
            .collect();
        for _ in 0..if i % 8 == 0 { 6 } else { 0 } {
            if erasable.is_empty() {
                break;
            }
            n = n
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let victim = erasable.swap_remove((n >> 33) as usize % erasable.len());
            batch.push(erase(&victim));
        }
        let Ok(results) = store.append_batch(&batch) else {
            continue;
        };
        for r in results {
            if let Ok(Written::Step { trace_id, seq, .. }) = r {
                if seq % 4 == 0 {
                    erasable.push(trace_id.clone());
                }
                writeln!(out, "ACK {trace_id}").unwrap();
            }
        }
        writeln!(
            out,
            "WAIT {} ms CHUNK {} ms",
            store
                .slowest_batch_parts()
                .index_flush
                .load(Ordering::Relaxed)
                / 1000,
            store.slowest_index_chunk_micros() / 1000
        )
        .unwrap();
        out.flush().unwrap();
    }
}

/// SIGKILL while the index queue is backlogged (chunks written by the
/// thread and by the sequencer, erasures in the same batches).
#[test]
fn attack_sigkill_with_a_backlog() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = 0x0bad_cafe_dead_beefu64;
    for round in 0..cairn_testkit::campaign(1, 6) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let lines = child_killed_after(
            "sqlite_fulltext::attacks::attack_bulk_child",
            &[(BULK_CHILD_ENV, dir.path().as_os_str())],
            Duration::from_millis(4000 + rng % 8000),
        );
        let acks = lines.iter().filter(|l| l.starts_with("ACK")).count();
        let last_wait = lines.iter().rev().find(|l| l.starts_with("WAIT")).cloned();
        let crashed = check_index_against_ledger(dir.path(), false);
        {
            let _store = open_caught_up(dir.path());
        }
        let mended = check_index_against_ledger(dir.path(), true);
        eprintln!(
            "round {round}: {acks} acks, {last_wait:?}; at the kill (progress, size, checked) {crashed:?}, mended {mended:?}"
        );
    }
}

/// fulltext.db copied (a consistent snapshot: VACUUM INTO) at arbitrary
/// moments of an ingest with erasures and searches, then put back beside
/// the final ledger (what a power loss rolling back the index's last
/// writes leaves): the progress invariant holds, and a sequencing open
/// indexes every non-erased step and no erased one.
#[test]
fn attack_index_snapshots_beside_the_final_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let snaps = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path(), seq_options()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let runner = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || attack_ingest(store, stop, |_| {}))
    };
    let index_file = dir.path().join(cairn_store::FULLTEXT_FILE);
    let mut taken = Vec::new();
    let copier = rusqlite::Connection::open(&index_file).unwrap();
    copier.busy_timeout(Duration::from_secs(30)).unwrap();
    let mut rng = 0x5eed_u64;
    for i in 0..cairn_testkit::campaign(4, 12) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(100 + rng % 900));
        let to = snaps.path().join(format!("snap{i}.db"));
        copier
            .execute("VACUUM INTO ?1", [to.to_str().unwrap()])
            .unwrap();
        taken.push(to);
    }
    stop.store(true, Ordering::Relaxed);
    runner.join().unwrap();
    drop(copier);
    drop(store);
    for (i, snap) in taken.iter().enumerate() {
        let copy = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            if name.to_string_lossy().starts_with("fulltext.db")
                || name == std::ffi::OsStr::new("ledger.lock")
            {
                continue;
            }
            if entry.file_type().unwrap().is_file() {
                std::fs::copy(entry.path(), copy.path().join(&name)).unwrap();
            }
        }
        std::fs::copy(snap, copy.path().join(cairn_store::FULLTEXT_FILE)).unwrap();
        let stale = check_index_against_ledger(copy.path(), false);
        {
            let _store = open_caught_up(copy.path());
        }
        let mended = check_index_against_ledger(copy.path(), true);
        eprintln!("snapshot {i}: as copied {stale:?}, mended {mended:?}");
    }
}

// ---------------------------------------------------------------------
// Attacks (second review session): an import's documents are written by
// the index's thread like any batch's (in parts: more documents and bytes
// than a chunk); they must be found by the next search, after a clean
// close, and after a crash right after the import.
// ---------------------------------------------------------------------

const IMPORT_CHILD_ENV: &str = "CAIRN_FT_IMPORT_CHILD_DIR";
const IMPORT_BUNDLE_ENV: &str = "CAIRN_FT_IMPORT_BUNDLE";

/// A complete-log bundle of org acme: `steps` steps of about `bytes`
/// bytes, each starting with a unique word, every 50th erased. Returns the
/// bundle and, per step, its word and whether it was erased.
fn bundle_of(steps: u64, bytes: usize) -> (Vec<u8>, Vec<(String, bool)>) {
    let dir = tempfile::tempdir().unwrap();
    let source = SqliteStore::open(dir.path(), seq_options()).unwrap();
    let mut words = Vec::new();
    let mut traces = Vec::new();
    for part in 0..steps.div_ceil(500) {
        let batch: Vec<WriteRequest> = (part * 500..((part + 1) * 500).min(steps))
            .map(|i| {
                let content = attack_content(42, i, bytes);
                words.push(unique_word(&content).to_owned());
                WriteRequest::Prepared(Box::new(
                    cairn_store::prepare_step(
                        crate::conformance::step(&format!("i{}", i % 8), "Reasoning", &content),
                        &source.limits(),
                        0.0,
                    )
                    .unwrap(),
                ))
            })
            .collect();
        for r in source.append_batch(&batch).unwrap() {
            match r.unwrap() {
                Written::Step { trace_id, .. } => traces.push(trace_id),
                other => panic!("{other:?}"),
            }
        }
    }
    let erased: Vec<bool> = (0..steps).map(|i| i % 50 == 7).collect();
    let erasures: Vec<WriteRequest> = traces
        .iter()
        .zip(&erased)
        .filter(|(_, e)| **e)
        .map(|(t, _)| erase(t))
        .collect();
    for r in source.append_batch(&erasures).unwrap() {
        r.unwrap();
    }
    let cp = match source
        .append_batch(&[WriteRequest::Checkpoint {
            org_id: "acme".into(),
        }])
        .unwrap()
        .remove(0)
        .unwrap()
    {
        Written::Checkpoint(cp) => cp,
        other => panic!("{other:?}"),
    };
    let mut bundle = Vec::new();
    cairn_store::ops::export(
        &source,
        "acme",
        &cairn_store::ops::ExportScope::All,
        &cp,
        cairn_core::Timestamp::from_micros(0).unwrap(),
        &mut bundle,
        &mut |_| {},
    )
    .unwrap();
    (bundle, words.into_iter().zip(erased).collect())
}

fn import(store: &SqliteStore, bundle: &[u8]) {
    let open = || -> std::io::Result<Box<dyn std::io::BufRead>> {
        Ok(Box::new(std::io::Cursor::new(bundle.to_vec())))
    };
    match cairn_store::ops::import_bundle(
        store,
        &open,
        &[],
        cairn_store::ops::DEFAULT_MAX_BUNDLE_LINE_BYTES,
        &mut |_| {},
    )
    .unwrap()
    {
        cairn_store::ops::ImportOutcome::Imported { .. } => {}
        other => panic!("{other:?}"),
    }
}

/// Every imported step is found, no erased one (a sample, the first and
/// the last, and every erased one).
fn assert_imported_found(store: &SqliteStore, words: &[(String, bool)], when: &str) {
    for (i, (word, erased)) in words.iter().enumerate() {
        if i % 211 == 0 || i + 1 == words.len() || *erased {
            assert_eq!(
                hits(store, word).len(),
                usize::from(!erased),
                "{when}: imported step {i} (erased: {erased})"
            );
        }
    }
}

/// 4,600 steps of about 1.1 KB (more documents and more bytes than a
/// chunk): found by the search that follows the import (whose flush
/// writes them in parts beside the thread), by a reading process after a
/// clean close, and fulltext.db holds them with its progress at the log.
#[test]
fn attack2_imported_steps_are_found_at_once_and_after_a_close() {
    let (bundle, words) = bundle_of(4600, 1_100);
    let dir = tempfile::tempdir().unwrap();
    let target = SqliteStore::open(dir.path(), seq_options()).unwrap();
    // Another org's batch queued before the import.
    let mut other = crate::conformance::step("o1", "Reasoning", "zeppelin of another org");
    other.org_id = "other".into();
    let request = WriteRequest::Prepared(Box::new(
        cairn_store::prepare_step(other, &target.limits(), 0.0).unwrap(),
    ));
    target.append_batch(&[request]).unwrap().remove(0).unwrap();
    import(&target, &bundle);
    let last = &words.last().unwrap().0;
    assert_eq!(
        hits(&target, last).len(),
        1,
        "the last imported step, at once"
    );
    assert_imported_found(&target, &words, "after the import");
    drop(target);
    let (progress, size, _) = check_index_against_ledger(dir.path(), false);
    assert_eq!(progress, size, "a clean close left the import unwritten");
    let reader = SqliteStore::open(dir.path(), reader_options()).unwrap();
    assert_imported_found(&reader, &words, "a reading process");
}

/// The child side of `attack2_a_crash_right_after_an_import`.
#[test]
fn attack2_import_child() {
    let Some(dir) = std::env::var_os(IMPORT_CHILD_ENV) else {
        return;
    };
    use std::io::Write as _;
    let bundle = std::fs::read(std::env::var_os(IMPORT_BUNDLE_ENV).unwrap()).unwrap();
    let store = SqliteStore::open(Path::new(&dir), seq_options()).unwrap();
    import(&store, &bundle);
    let mut out = std::io::stdout();
    writeln!(out, "IMPORTED").unwrap();
    out.flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// SIGKILL at once or soon after an import returns (the thread writing
/// its parts): fulltext.db as left never has progress past a missing
/// imported step, and the next sequencing open indexes the import.
#[test]
fn attack2_a_crash_right_after_an_import() {
    use std::io::BufRead as _;
    // About 36 MB of documents: nine parts.
    let (bundle, words) = bundle_of(3000, 12_000);
    let files = tempfile::tempdir().unwrap();
    let bundle_path = files.path().join("bundle.jsonl");
    std::fs::write(&bundle_path, &bundle).unwrap();
    let mut rng = 0x0123_4567_89ab_cdefu64;
    for round in 0..cairn_testkit::campaign(4, 20) {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sqlite_fulltext::attacks::attack2_import_child",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(IMPORT_CHILD_ENV, dir.path())
            .env(IMPORT_BUNDLE_ENV, &bundle_path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        // (After the harness's "test ... " on the same line.)
        let imported = lines.any(|l| l.is_ok_and(|l| l.ends_with("IMPORTED")));
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // At once, or while the thread writes the import's parts (its
        // first write comes a tick after the import).
        let delay = (round * 170 + rng % 60) % 800;
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(imported, "the child did not import");
        let crashed = check_index_against_ledger(dir.path(), false);
        let documents = all_documents(
            &rusqlite::Connection::open(dir.path().join(cairn_store::FULLTEXT_FILE)).unwrap(),
        );
        eprintln!("round {round}: {documents} documents indexed at the kill");
        {
            let store = open_caught_up(dir.path());
            assert_imported_found(&store, &words, "after the crash");
        }
        let mended = check_index_against_ledger(dir.path(), true);
        eprintln!(
            "round {round}: killed {delay} ms after the import: at the kill {crashed:?}, mended {mended:?}"
        );
    }
}
