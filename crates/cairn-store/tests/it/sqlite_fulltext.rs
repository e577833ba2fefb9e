//! The embedded store's full-text index in its own file (`fulltext.db`):
//! erased steps are never found whatever the file holds, a failed deletion
//! neither misreports a committed batch nor stops ingest, a damaged or
//! foreign index file is rebuilt and never breaks other reads, the files
//! are private, analyst SQL cannot reach them, and data directories whose
//! names are not UTF-8 work. (Written by a review session as attacks on
//! the change; they failed before its fixes.)

use cairn_store::fulltext::FullTextQuery;
use cairn_store::{LedgerStore, SqliteOptions, SqliteStore, WriteRequest, Written};
use std::path::Path;

/// How many documents of org `org` (its number) in the index file
/// `index` match `condition` (SQL over the org's table, named `{t}`),
/// with `params`; 0 when the org has no table (none of its steps was
/// indexed yet).
pub(crate) fn count_documents(
    index: &rusqlite::Connection,
    org: i64,
    condition: &str,
    params: impl rusqlite::Params,
) -> i64 {
    let name = format!("steps_fts_{org}");
    let exists: bool = index
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1)",
            [&name],
            |r| r.get(0),
        )
        .unwrap();
    if !exists {
        return 0;
    }
    let t = format!("\"{name}\"");
    let sql = format!(
        "SELECT count(*) FROM {t} WHERE {}",
        condition.replace("{t}", &t)
    );
    index.query_row(&sql, params, |r| r.get(0)).unwrap()
}

/// Every org's documents in the index file `index`.
pub(crate) fn all_documents(index: &rusqlite::Connection) -> i64 {
    let orgs: Vec<i64> = index
        .prepare(
            "SELECT substr(name, 11) FROM sqlite_schema WHERE type = 'table'
               AND name GLOB 'steps_fts_[0-9]*' AND sql LIKE 'CREATE VIRTUAL TABLE%'",
        )
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|name| name.unwrap().parse().unwrap())
        .collect();
    orgs.into_iter()
        .map(|org| count_documents(index, org, "1", []))
        .sum()
}

/// The number `ledger.db` in `dir` gives org `name`.
pub(crate) fn org_number(dir: &Path, name: &str) -> i64 {
    rusqlite::Connection::open(dir.join("ledger.db"))
        .unwrap()
        .query_row("SELECT org FROM orgs WHERE name = ?1", [name], |r| r.get(0))
        .unwrap()
}

fn seq_options() -> SqliteOptions {
    crate::sqlite::options()
}

fn reader_options() -> SqliteOptions {
    SqliteOptions {
        sequencer: false,
        ..crate::sqlite::options()
    }
}

/// The best 50 of a search of `org` for `words`, unfiltered.
fn search(
    store: &SqliteStore,
    org: &str,
    words: &str,
) -> Result<Vec<(u64, f64)>, cairn_store::StoreError> {
    store.full_text_search(
        org,
        &FullTextQuery::parse(words).unwrap(),
        &cairn_store::StepFilter::default(),
        50,
    )
}

fn hits(store: &SqliteStore, words: &str) -> Vec<u64> {
    search(store, "acme", words)
        .unwrap()
        .into_iter()
        .map(|(seq, _)| seq)
        .collect()
}

/// The seqs a search of `org` finds, once the index has caught up with
/// that org's log (searched again while told it is busy, for up to 2
/// minutes).
fn hits_once_caught_up(store: &SqliteStore, org: &str, words: &str) -> Vec<u64> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        match search(store, org, words) {
            Ok(found) => return found.into_iter().map(|(seq, _)| seq).collect(),
            Err(cairn_store::StoreError::Busy(_)) if std::time::Instant::now() < deadline => {}
            other => panic!("the index never caught up: {other:?}"),
        }
    }
}

fn write_step(store: &SqliteStore, content: &str) -> (u64, String) {
    write_step_in(store, crate::conformance::ORG, content)
}

fn write_step_in(store: &SqliteStore, org: &str, content: &str) -> (u64, String) {
    let step = cairn_store::NewStep {
        org_id: org.into(),
        ..crate::conformance::step("s1", "Reasoning", content)
    };
    let request = WriteRequest::Prepared(Box::new(
        cairn_store::prepare_step(step, &store.limits(), 0.0).unwrap(),
    ));
    match store.append_batch(&[request]).unwrap().remove(0).unwrap() {
        Written::Step { seq, trace_id, .. } => (seq, trace_id),
        other => panic!("{other:?}"),
    }
}

fn erase(trace_id: &str) -> WriteRequest {
    WriteRequest::Erase {
        org_id: "acme".into(),
        trace_id: trace_id.into(),
        reason: "gdpr".into(),
        actor: "dpo".into(),
    }
}

/// Opens the store as its sequencing process and waits for the full-text
/// index to catch up with the log of every org (the open itself never
/// waits for it: a search of an org not yet caught up is told so,
/// `StoreError::Busy`).
fn open_caught_up(dir: &Path) -> SqliteStore {
    let store = SqliteStore::open(dir, seq_options()).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    for org in store.orgs().unwrap() {
        loop {
            let searched = store.full_text_search(
                &org,
                &FullTextQuery::parse("anything").unwrap(),
                &cairn_store::StepFilter::default(),
                1,
            );
            match searched {
                Err(cairn_store::StoreError::Busy(_)) if std::time::Instant::now() < deadline => {}
                _ => break,
            }
        }
    }
    store
}

/// Puts the index file `from` (and its WAL) in place of `to`'s, or removes
/// `to`'s if `from` does not exist; the shared memory is rebuilt on open.
fn copy_index_file(from: &Path, to: &Path) {
    for suffix in ["", "-wal"] {
        let (mut src, mut dst) = (from.as_os_str().to_owned(), to.as_os_str().to_owned());
        src.push(suffix);
        dst.push(suffix);
        let _ = std::fs::remove_file(&dst);
        if Path::new(&src).exists() {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
    let mut shm = to.as_os_str().to_owned();
    shm.push("-shm");
    let _ = std::fs::remove_file(shm);
}

/// Runs this binary's test `name` (a campaign's child side) with `envs`,
/// kills it (SIGKILL) after `after`, and returns the lines it printed.
fn child_killed_after(
    name: &str,
    envs: &[(&str, &std::ffi::OsStr)],
    after: std::time::Duration,
) -> Vec<String> {
    use std::io::BufRead as _;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .envs(envs.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    std::thread::sleep(after);
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap()
}

/// A deletion from the index that fails (here: another connection holds
/// fulltext.db's write lock past the 10 s busy timeout): the committed
/// erasure is acknowledged, no process finds the erased step (a reader
/// beside the server leaves out the log's erased steps), the server's own
/// searches say the index stopped, and ingest goes on (documents are then
/// dropped, for the next sequencing open to index) past the 64 MB the
/// queue would hold.
#[test]
fn a_failed_index_deletion_hides_the_step_and_stops_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = seq_options();
    options.limits.max_content_bytes = 4 << 20;
    let server = SqliteStore::open(dir.path(), options).unwrap();
    let (seq, trace) = write_step(&server, "the zeppelin departs at noon");
    assert_eq!(hits(&server, "zeppelin"), vec![seq]);
    // Something holds the index's write lock (a backup tool, `sqlite3`, a
    // stuck disk: any reason the DELETE fails).
    let blocker = rusqlite::Connection::open(dir.path().join(cairn_store::FULLTEXT_FILE)).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let answer = server.append_batch(&[erase(&trace)]);
    blocker.execute_batch("ROLLBACK").unwrap();
    drop(blocker);
    assert!(
        matches!(&answer, Ok(results) if results[0].is_ok()),
        "the erasure is committed and must be acknowledged: {answer:?}"
    );
    assert!(
        server
            .step_by_trace("acme", &trace)
            .unwrap()
            .unwrap()
            .record
            .erased
    );
    let reader = SqliteStore::open(dir.path(), reader_options()).unwrap();
    assert_eq!(hits(&reader, "zeppelin"), Vec::<u64>::new());
    let refused = server.full_text_search(
        "acme",
        &FullTextQuery::parse("zeppelin").unwrap(),
        &cairn_store::StepFilter::default(),
        5,
    );
    assert!(
        matches!(&refused, Err(e) if e.to_string().contains("restart the server")),
        "{refused:?}"
    );
    let words: String = (0..400_000).map(|i| format!("w{i} ")).collect();
    for i in 0..40 {
        let request = WriteRequest::Prepared(Box::new(
            cairn_store::prepare_step(
                crate::conformance::step("s1", "Reasoning", &words),
                &server.limits(),
                0.0,
            )
            .unwrap(),
        ));
        let answer = server.append_batch(&[request]);
        assert!(answer.is_ok(), "write {i} refused: {answer:?}");
    }
    drop(reader);
    drop(server);
    // The next sequencing open applies the deletion and indexes the rest.
    let server = open_caught_up(dir.path());
    assert_eq!(hits(&server, "zeppelin"), Vec::<u64>::new());
    assert_eq!(hits(&server, "w1000").len(), 40);
}

/// A crash (or a power loss: the file runs with synchronous = NORMAL)
/// between an erasure's ledger commit and its deletion from fulltext.db
/// leaves the document in the index until a sequencing open mends it; a
/// process reading meanwhile (beside a server that is still starting)
/// does not find the erased step: searches leave out the log's erased
/// steps.
#[test]
fn a_reader_never_finds_a_step_whose_deletion_a_crash_lost() {
    let dir = tempfile::tempdir().unwrap();
    let index_file = dir.path().join(cairn_store::FULLTEXT_FILE);
    let (seq, trace) = {
        let server = SqliteStore::open(dir.path(), seq_options()).unwrap();
        let written = write_step(&server, "the zeppelin departs at noon");
        assert_eq!(hits(&server, "zeppelin"), vec![written.0]);
        written
    };
    // fulltext.db as the crash left it: indexed, progress before the erasure.
    let saved = std::fs::read(&index_file).unwrap();
    {
        let server = SqliteStore::open(dir.path(), seq_options()).unwrap();
        server.append_batch(&[erase(&trace)]).unwrap()[0]
            .as_ref()
            .unwrap();
        assert!(hits(&server, "zeppelin").is_empty());
    }
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", index_file.display()));
    }
    std::fs::write(&index_file, saved).unwrap();
    let reader = SqliteStore::open(dir.path(), reader_options()).unwrap();
    assert!(
        reader
            .step_by_trace("acme", &trace)
            .unwrap()
            .unwrap()
            .record
            .erased,
        "the ledger says erased"
    );
    let leaked = hits(&reader, "zeppelin");
    assert!(
        !leaked.contains(&seq),
        "a reader finds erased step {seq} by its erased words"
    );
}

/// A damaged (or unreadable) index file never stops a reading process
/// from reading the ledger (`cairn verify`, `sessions`, `replay`, `trail`
/// open the store to read): only a search attaches the index.
#[test]
fn a_damaged_index_file_never_stops_other_reads() {
    let dir = tempfile::tempdir().unwrap();
    {
        let server = SqliteStore::open(dir.path(), seq_options()).unwrap();
        write_step(&server, "the zeppelin departs at noon");
    }
    let index_file = dir.path().join(cairn_store::FULLTEXT_FILE);
    std::fs::write(&index_file, b"not a database, not even close; ".repeat(200)).unwrap();
    let reader = SqliteStore::open(dir.path(), reader_options()).unwrap();
    let size = reader.log_size("acme");
    assert!(
        matches!(size, Ok(n) if n > 0),
        "reading the intact ledger fails because the derived index is damaged: {size:?}"
    );
}

/// An open that must mend the index (here: its progress names another
/// history, so the org is marked to be forgotten) while another program
/// holds `fulltext.db`'s write lock past the busy timeout fails with a
/// clear "busy" error and leaves the file alone: the file is not damaged,
/// and deleting it would lose the other program's writes. Once the lock
/// is released, the next open mends the index.
#[test]
fn an_index_locked_by_another_program_is_not_mistaken_for_damage() {
    let dir = tempfile::tempdir().unwrap();
    let zeppelin = {
        let server = SqliteStore::open(dir.path(), seq_options()).unwrap();
        write_step(&server, "the zeppelin departs at noon").0
    };
    let index_file = dir.path().join(cairn_store::FULLTEXT_FILE);
    let blocker = rusqlite::Connection::open(&index_file).unwrap();
    blocker
        .execute_batch(
            "UPDATE fulltext_progress SET root = zeroblob(32);
             BEGIN IMMEDIATE;
             CREATE TABLE other_programs_work (x);",
        )
        .unwrap();
    match SqliteStore::open(dir.path(), seq_options()) {
        Err(cairn_store::StoreError::Busy(message)) => {
            assert!(message.contains("locked by another program"), "{message}")
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("the open mended an index whose lock another program holds"),
    }
    blocker.execute_batch("COMMIT").unwrap();
    let kept: i64 = blocker
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'other_programs_work'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kept, 1, "the other program's writes were lost");
    drop(blocker);
    let server = open_caught_up(dir.path());
    assert_eq!(hits(&server, "zeppelin"), vec![zeppelin]);
}

/// A sequencing open never waits for the full-text index to catch up
/// with the log (a missing or stale `fulltext.db` beside a large log would
/// otherwise keep the server from starting): here the index stopped after
/// the first of 10,001 steps, and another process holds the index file's
/// write lock, so the catch-up cannot advance. The open returns, ingest
/// goes on, a search says how far the index is behind instead of waiting;
/// once the lock is let go the thread indexes the log and what was
/// written meanwhile, a step erased while it catches up is not in the
/// index file, and the next open has nothing left to do.
#[test]
fn opening_never_waits_for_the_index_to_catch_up_with_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let index_file = data.join(cairn_store::FULLTEXT_FILE);
    let saved = tempfile::tempdir().unwrap();
    {
        let server = SqliteStore::open(data, seq_options()).unwrap();
        write_step(&server, "the first step");
    }
    copy_index_file(&index_file, &saved.path().join("fulltext.db"));
    let (zeppelin, albatross, size) = {
        let server = SqliteStore::open(data, seq_options()).unwrap();
        let (mut zeppelin, mut albatross) = (0, String::new());
        for batch in 0..20 {
            let requests: Vec<WriteRequest> = (0..500)
                .map(|i| {
                    let content = if batch == 14 && i == 250 {
                        "the zeppelin departs at noon".to_owned()
                    } else if batch == 1 && i == 10 {
                        "the albatross circles twice".to_owned()
                    } else {
                        format!("filler step {batch} {i}")
                    };
                    WriteRequest::Prepared(Box::new(
                        cairn_store::prepare_step(
                            crate::conformance::step("s1", "Reasoning", &content),
                            &server.limits(),
                            0.0,
                        )
                        .unwrap(),
                    ))
                })
                .collect();
            for (i, written) in server
                .append_batch(&requests)
                .unwrap()
                .into_iter()
                .enumerate()
            {
                let Ok(Written::Step { seq, trace_id, .. }) = written else {
                    panic!("{written:?}")
                };
                if batch == 14 && i == 250 {
                    zeppelin = seq;
                }
                if batch == 1 && i == 10 {
                    albatross = trace_id;
                }
            }
        }
        (zeppelin, albatross, server.log_size("acme").unwrap())
    };
    copy_index_file(&saved.path().join("fulltext.db"), &index_file);
    let blocker = rusqlite::Connection::open(&index_file).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let server = SqliteStore::open(data, seq_options()).unwrap();
    match search(&server, "acme", "zeppelin") {
        Err(cairn_store::StoreError::Busy(message)) => {
            assert!(message.contains("steps to go"), "{message}");
        }
        other => panic!("a search while the index cannot catch up: {other:?}"),
    }
    let (dirigible, _) = write_step(&server, "the dirigible lands at dawn");
    blocker.execute_batch("ROLLBACK").unwrap();
    // An erasure while the thread catches up (before or after it indexed
    // the step: both must end with the step's document gone).
    server
        .append_batch(&[erase(&albatross)])
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!(
        hits_once_caught_up(&server, "acme", "zeppelin"),
        vec![zeppelin]
    );
    assert_eq!(hits(&server, "dirigible"), vec![dirigible]);
    assert!(hits(&server, "albatross").is_empty());
    drop(server);
    let index = rusqlite::Connection::open(&index_file).unwrap();
    let progress: i64 = index
        .query_row("SELECT indexed_below FROM fulltext_progress", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(
        progress as u64,
        size + 2,
        "the index's progress after a clean close"
    );
    let erased = count_documents(
        &index,
        org_number(dir.path(), "acme"),
        "{t} MATCH 'albatross'",
        [],
    );
    assert_eq!(
        erased, 0,
        "an erased step's document is left in fulltext.db"
    );
}

/// While the index catches up with one org's log (its writes held up here
/// by another connection's lock on the file), a search of another org
/// whose documents are all in the index is answered at once, and finds
/// them; the org being caught up is told to search again, and found once
/// the catch-up ends. (A catch-up of one org once made every org's search
/// wait 2 s and answer 503.)
#[test]
fn another_orgs_catch_up_never_holds_up_a_search() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let index_file = data.join(cairn_store::FULLTEXT_FILE);
    let saved = tempfile::tempdir().unwrap();
    let heron = {
        let server = SqliteStore::open(data, seq_options()).unwrap();
        write_step(&server, "the first step");
        write_step_in(&server, "beta", "the heron waits").0
    };
    copy_index_file(&index_file, &saved.path().join("fulltext.db"));
    let zeppelin = {
        let server = SqliteStore::open(data, seq_options()).unwrap();
        write_step(&server, "the zeppelin departs at noon").0
    };
    // The index as it was before acme's last step: acme is caught up from
    // the log, beta's documents are all in.
    copy_index_file(&saved.path().join("fulltext.db"), &index_file);
    let blocker = rusqlite::Connection::open(&index_file).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let server = SqliteStore::open(data, seq_options()).unwrap();
    let started = std::time::Instant::now();
    let found = search(&server, "beta", "heron").unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "beta's search waited {:?} for acme's catch-up",
        started.elapsed()
    );
    assert_eq!(
        found.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        vec![heron]
    );
    match search(&server, "acme", "zeppelin") {
        Err(cairn_store::StoreError::Busy(message)) => {
            assert!(message.contains("steps to go"), "{message}");
        }
        other => panic!("a search of the org being caught up: {other:?}"),
    }
    blocker.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        hits_once_caught_up(&server, "acme", "zeppelin"),
        vec![zeppelin]
    );
}

/// fulltext.db and its -wal / -shm are private, also when
/// rebuilt, even in a data directory the operator created world-readable.
#[test]
fn index_files_are_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let check = |data: &Path| {
        for suffix in ["", "-wal", "-shm"] {
            let file = format!(
                "{}{suffix}",
                data.join(cairn_store::FULLTEXT_FILE).display()
            );
            if let Ok(meta) = std::fs::metadata(&file) {
                assert_eq!(
                    meta.permissions().mode() & 0o077,
                    0,
                    "{file} is readable by others"
                );
            }
        }
    };
    let server = SqliteStore::open(dir.path(), seq_options()).unwrap();
    write_step(&server, "the zeppelin departs at noon");
    hits(&server, "zeppelin");
    check(dir.path());
    drop(server);
    std::fs::write(
        dir.path().join(cairn_store::FULLTEXT_FILE),
        b"garbage ".repeat(100),
    )
    .unwrap();
    let server = SqliteStore::open(dir.path(), seq_options()).unwrap();
    write_step(&server, "the airship");
    hits(&server, "airship");
    check(dir.path());
}

/// Analyst SQL cannot reach the index (no ATTACH, no
/// attached schema), so no tenant reads another's tokens through it.
#[test]
fn analyst_sql_cannot_read_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let server = SqliteStore::open(dir.path(), seq_options()).unwrap();
    write_step(&server, "the zeppelin departs at noon");
    hits(&server, "zeppelin");
    let path = dir.path().join(cairn_store::FULLTEXT_FILE);
    for sql in [
        "SELECT * FROM fulltext.\"steps_fts_1_data\"".to_owned(),
        "SELECT * FROM \"steps_fts_1_data\"".to_owned(),
        "SELECT * FROM steps_fts_1".to_owned(),
        format!("ATTACH DATABASE '{}' AS f", path.display()),
        "SELECT rowid FROM steps_fts_1 WHERE steps_fts_1 MATCH 'zeppelin'".to_owned(),
    ] {
        assert!(server.analyst_query("acme", &sql, 10).is_err(), "{sql}");
    }
}

/// A data directory whose path is not UTF-8 (legal on Linux): the index
/// is found, searched, and rebuilt when damaged, by its path's own bytes.
#[test]
fn a_data_directory_whose_name_is_not_utf8_works() {
    use std::os::unix::ffi::OsStrExt as _;
    let parent = tempfile::tempdir().unwrap();
    let data = parent
        .path()
        .join(std::ffi::OsStr::from_bytes(b"data-\xff"));
    let server = SqliteStore::open(&data, seq_options()).unwrap();
    let (seq, _) = write_step(&server, "the zeppelin departs at noon");
    let size = server.log_size("acme");
    assert!(matches!(size, Ok(n) if n > 0), "reading the log: {size:?}");
    assert_eq!(hits(&server, "zeppelin"), vec![seq]);
    drop(server);
    std::fs::write(
        data.join(cairn_store::FULLTEXT_FILE),
        b"garbage ".repeat(100),
    )
    .unwrap();
    let server = SqliteStore::open(&data, seq_options()).unwrap();
    assert_eq!(hits(&server, "zeppelin"), vec![seq]);
}

/// A step of the ledger as the index checks see it: id, seq, content,
/// erased, and the seq of the erasure record naming it, if any.
type LedgerStep = (i64, i64, Option<String>, bool, Option<i64>);

/// The steps of `org` below seq `below`, read from ledger.db, each with
/// the first erasure record naming it (the records are read once, not
/// searched again for every step: with thousands of steps and hundreds of
/// erasures that search made the checks most of the campaigns' time).
fn ledger_steps(ledger: &rusqlite::Connection, org: i64, below: i64) -> Vec<LedgerStep> {
    let mut erasures: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    let mut records = ledger
        .prepare(
            "SELECT json_extract(view, '$.trace_id'), seq FROM entries
             WHERE org = ?1 AND type = 'erasure'",
        )
        .unwrap();
    for row in records
        .query_map([org], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .unwrap()
    {
        let (trace_id, seq) = row.unwrap();
        let first = erasures.entry(trace_id).or_insert(seq);
        *first = (*first).min(seq);
    }
    let mut steps = ledger
        .prepare(
            "SELECT id, seq, content, erased, trace_id FROM entries
             WHERE org = ?1 AND type = 'step' AND seq < ?2",
        )
        .unwrap();
    steps
        .query_map([org, below], |r| {
            let trace_id: String = r.get(4)?;
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                erasures.get(&trace_id).copied(),
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

mod attacks;
pub(crate) mod catch_up_attacks;
mod per_org;

mod histories;
