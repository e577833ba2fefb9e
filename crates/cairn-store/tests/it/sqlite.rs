//! The SQLite backend: the conformance suite, plus what only an embedded
//! file store has (plain-SQL tampering, crash recovery).

use crate::conformance::{Backend, run_all};
use cairn_store::{LedgerStore, SqliteOptions, SqliteStore};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

struct Sqlite {
    dir: tempfile::TempDir,
}

impl Sqlite {
    fn new() -> Sqlite {
        Sqlite {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

pub fn options() -> SqliteOptions {
    SqliteOptions {
        checkpoint_interval: Duration::from_millis(200),
        ..SqliteOptions::default()
    }
}

impl Backend for Sqlite {
    fn open(&self, name: &str) -> Arc<dyn LedgerStore> {
        Arc::new(SqliteStore::open(&self.path(name), options()).unwrap())
    }

    fn open_with_max_agent_keys(&self, name: &str, max: u64) -> Arc<dyn LedgerStore> {
        let options = SqliteOptions {
            max_agent_keys: max,
            ..options()
        };
        Arc::new(SqliteStore::open(&self.path(name), options).unwrap())
    }
}

/// Analyst SQL: the differential oracle over generated hostile queries,
/// and the time and size limits.
#[test]
fn analyst_sql_oracle_and_limits() {
    crate::analyst::oracle(&Sqlite::new(), cairn_store::analyst::Dialect::Sqlite, 1500);
    crate::analyst::limits_hold(&Sqlite::new());
    crate::analyst::one_row_of_many_calls_stops_at_the_time_limit(&Sqlite::new());
    crate::analyst::copied_left_sides_are_bounded(&Sqlite::new());
    crate::analyst::merged_queries_cannot_multiply_one_rows_work(
        &Sqlite::new(),
        cairn_store::analyst::Dialect::Sqlite,
    );
    crate::analyst::wrapped_calls_keep_their_names(
        &Sqlite::new(),
        cairn_store::analyst::Dialect::Sqlite,
    );
    crate::analyst::one_call_is_bounded(&Sqlite::new());
    crate::analyst::times_read_as_the_api_writes_them(&Sqlite::new());
}

/// Several steps written as one unit: all or none.
#[test]
fn all_or_nothing_writes() {
    crate::atomic::all_or_nothing(&Sqlite::new());
}

#[test]
fn conformance_suite() {
    run_all(&Sqlite::new());
}

/// Every forbidden statement, run with plain SQL on the database file (as
/// a user of the `sqlite3` shell would), is refused by the triggers; the
/// two allowed updates pass only in their exact shape.
#[test]
fn plain_sql_cannot_change_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store: Arc<dyn LedgerStore> =
            Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
        let ledger =
            cairn_store::Ledger::new(Arc::clone(&store), cairn_store::SequencerConfig::default());
        for i in 0..20 {
            let mut s = crate::conformance::step("s1", "plan", &format!("p{i}"));
            s.metadata = Some(serde_json::json!({"k": i}));
            ledger
                .write(cairn_store::WriteRequest::Step(Box::new(s)))
                .unwrap();
        }
        ledger
            .write(cairn_store::WriteRequest::Checkpoint {
                org_id: "acme".into(),
            })
            .unwrap();
    }
    let conn = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    let forbidden = [
        "UPDATE entries SET content = 'edited' WHERE type = 'step'",
        "UPDATE entries SET digest = zeroblob(32)",
        "UPDATE entries SET seq = seq + 100",
        "DELETE FROM entries WHERE seq = 1",
        "DELETE FROM entries",
        "UPDATE sessions SET agent_id = 'mallory'",
        "DELETE FROM sessions",
        "UPDATE checkpoints SET note = 'forged'",
        "DELETE FROM checkpoints",
        "DELETE FROM nodes",
        "UPDATE orgs SET name = 'other'",
        "DELETE FROM orgs",
        // Erasure must null every payload field at once and keep hashes.
        "UPDATE entries SET content = NULL, erased = 1, hidden = '{}' WHERE seq = 1",
        "UPDATE entries SET content = NULL, input_data = NULL, output_data = NULL, metadata = NULL, erased = 1, hidden = '{}', digest = zeroblob(32) WHERE seq = 1",
        // The embedding flag may only go from 0 to 1, alone.
        "UPDATE entries SET has_embedding = 1, content = 'x' WHERE seq = 1",
        // Only an erased signed trace's view is withheld, and only once a
        // trace-erasure record names it.
        "UPDATE entries SET view = NULL WHERE type <> 'step'",
        "UPDATE entries SET view = '{}' WHERE type <> 'step'",
    ];
    let before: i64 = conn
        .query_row("SELECT total_changes()", [], |r| r.get(0))
        .unwrap();
    for sql in forbidden {
        let err = conn.execute(sql, []).expect_err(sql);
        assert!(err.to_string().contains("cairn:"), "{sql}: {err}");
    }
    let after: i64 = conn
        .query_row("SELECT total_changes()", [], |r| r.get(0))
        .unwrap();
    assert_eq!(before, after, "nothing changed");
    // The two recorded mutations are allowed in their exact shape.
    // (Sampling embeds some steps at ingest: pick one that is not.)
    let changed = conn
        .execute(
            "UPDATE entries SET has_embedding = 1
             WHERE id = (SELECT id FROM entries WHERE type = 'step' AND has_embedding = 0 LIMIT 1)",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    // The erasure's shape, without an erasure record naming the step, is
    // refused: an erasure is always recorded.
    let err = conn
        .execute(
            "UPDATE entries SET content = NULL, input_data = NULL, output_data = NULL, metadata = NULL, erased = 1, hidden = '{}' WHERE seq = 2",
            [],
        )
        .unwrap_err();
    assert!(err.to_string().contains("cairn:"), "{err}");
    // Session heads move forward only.
    for sql in [
        "UPDATE session_heads SET last_index = 0, last_seq = 1",
        "DELETE FROM session_heads",
    ] {
        let err = conn.execute(sql, []).unwrap_err();
        assert!(err.to_string().contains("cairn:"), "{sql}: {err}");
    }
}

/// An erased payload's bytes do not stay in the ledger file's free space
/// (`secure_delete = FAST`): once the WAL is checkpointed, the file holds
/// no copy of them.
#[test]
fn an_erased_payload_leaves_no_bytes_in_the_ledger_file() {
    let dir = tempfile::tempdir().unwrap();
    let marker = "erase-me-3f9c2b7d1e";
    {
        let store: Arc<dyn LedgerStore> = Arc::new(
            SqliteStore::open(
                dir.path(),
                SqliteOptions {
                    embedding_sample_rate: 0.0,
                    ..options()
                },
            )
            .unwrap(),
        );
        let ledger =
            cairn_store::Ledger::new(Arc::clone(&store), cairn_store::SequencerConfig::default());
        for i in 0..5 {
            let content = if i == 2 {
                marker.to_owned()
            } else {
                format!("kept {i}")
            };
            let mut step = crate::conformance::step("s1", "plan", &content);
            step.trace_id = Some(format!("t{i}"));
            ledger
                .write(cairn_store::WriteRequest::Step(Box::new(step)))
                .unwrap();
        }
        ledger
            .write(cairn_store::WriteRequest::Erase {
                org_id: "acme".into(),
                trace_id: "t2".into(),
                reason: "request".into(),
                actor: "dpo".into(),
            })
            .unwrap();
        ledger.close();
    }
    let conn = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    let bytes = std::fs::read(dir.path().join("ledger.db")).unwrap();
    let found = bytes
        .windows(marker.len())
        .any(|window| window == marker.as_bytes());
    assert!(!found, "the erased content is still in ledger.db");
}

const CHILD_ENV: &str = "CAIRN_CRASH_CHILD_DIR";

/// The child side of `acknowledged_writes_survive_sigkill`: many writers
/// append as fast as they can and print each trace id once acknowledged.
/// Without the environment variable it does nothing.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let store: Arc<dyn LedgerStore> =
        Arc::new(SqliteStore::open(std::path::Path::new(&dir), options()).unwrap());
    let ledger = Arc::new(cairn_store::Ledger::new(
        store,
        cairn_store::SequencerConfig::default(),
    ));
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let ledger = Arc::clone(&ledger);
            let out = Arc::clone(&out);
            std::thread::spawn(move || {
                for i in 0.. {
                    let mut s = crate::conformance::step(
                        &format!("w{w}"),
                        "Reasoning",
                        &format!("writer {w} step {i}"),
                    );
                    s.agent_id = format!("agent-{w}");
                    if let Ok(cairn_store::Written::Step { trace_id, .. }) =
                        ledger.write(cairn_store::WriteRequest::Step(Box::new(s)))
                    {
                        use std::io::Write as _;
                        let mut out = out.lock().unwrap();
                        writeln!(out, "ACK {trace_id}").unwrap();
                        out.flush().unwrap();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
}

/// Kills a writing child with SIGKILL at random moments, many times, on
/// the same store: every acknowledged record must be present afterwards and
/// the store must verify. (Run as `campaigns::acknowledged_writes_survive_sigkill`.)
pub(crate) fn acknowledged_writes_survive_sigkill() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let rounds = if std::env::var_os("CI").is_some() {
        12
    } else {
        6
    };
    let mut acknowledged: Vec<String> = Vec::new();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for round in 0..rounds {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sqlite::crash_child",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| l.strip_prefix("ACK ").map(str::to_owned))
                .collect::<Vec<_>>()
        });
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(150 + rng % 400));
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        let acked = reader.join().unwrap();
        assert!(
            !acked.is_empty(),
            "round {round}: the child acknowledged nothing"
        );
        acknowledged.extend(acked);

        let store = SqliteStore::open(dir.path(), options()).unwrap();
        for trace_id in &acknowledged {
            assert!(
                store.step_by_trace("acme", trace_id).unwrap().is_some(),
                "round {round}: acknowledged step {trace_id} is missing"
            );
        }
        let verdict = cairn_store::ops::verify_org(&store, "acme", &[], &[], &mut |_| {}).unwrap();
        assert!(
            verdict.verdict.verified,
            "round {round}: {:?}",
            verdict.verdict.failure
        );
        // Full-text documents still pending at the kill were indexed when
        // the store was opened again: the last acknowledged steps are found.
        for trace_id in acknowledged.iter().rev().take(20) {
            let step = store.step_by_trace("acme", trace_id).unwrap().unwrap();
            let content = step.record.step.content.clone().unwrap();
            let query =
                cairn_store::fulltext::FullTextQuery::parse(&format!("\"{content}\"")).unwrap();
            let hits = store
                .full_text_search("acme", &query, &cairn_store::StepFilter::default(), 50)
                .unwrap();
            assert!(
                hits.iter().any(|(seq, _)| *seq == step.seq),
                "round {round}: acknowledged step {trace_id} ({content}) is not found"
            );
        }
    }
}

/// The full-text index (its own file, written by its own thread) is
/// written in bulk after batches commit: a search in the writing process
/// finds every acknowledged step at once, an erasure of a step still
/// queued keeps its words out of the index, and the next sequencing open
/// mends what a crash left: steps left unindexed (below: removed from the
/// index, the recorded progress moved back) are indexed without indexing
/// twice those that are, an erasure whose deletion was lost is applied, and
/// a missing or damaged index file is rebuilt from the log.
#[test]
fn full_text_documents_are_indexed_in_bulk_and_after_a_crash() {
    use cairn_store::fulltext::FullTextQuery;
    let dir = tempfile::tempdir().unwrap();
    let search = |store: &SqliteStore, words: &str| -> usize {
        store
            .full_text_search(
                "acme",
                &FullTextQuery::parse(words).unwrap(),
                &cairn_store::StepFilter::default(),
                50,
            )
            .unwrap()
            .len()
    };
    let prepared = |store: &SqliteStore, content: &str| {
        cairn_store::WriteRequest::Prepared(Box::new(
            cairn_store::prepare_step(
                crate::conformance::step("s1", "Reasoning", content),
                &store.limits(),
                0.0,
            )
            .unwrap(),
        ))
    };
    let erased_trace = {
        let store = SqliteStore::open(dir.path(), options()).unwrap();
        let written = store
            .append_batch(&[
                prepared(&store, "the zeppelin departs at noon"),
                prepared(&store, "the airship fleet is grounded"),
            ])
            .unwrap();
        let Ok(cairn_store::Written::Step { trace_id, .. }) = &written[0] else {
            panic!("{written:?}")
        };
        // Erased while its document is still pending: never indexed.
        store
            .append_batch(&[cairn_store::WriteRequest::Erase {
                org_id: "acme".into(),
                trace_id: trace_id.clone(),
                reason: "test".into(),
                actor: "dpo".into(),
            }])
            .unwrap()[0]
            .as_ref()
            .unwrap();
        assert_eq!(search(&store, "zeppelin"), 0);
        assert_eq!(search(&store, "airship"), 1);
        for i in 0..5 {
            store
                .append_batch(&[prepared(&store, &format!("dirigible number {i}"))])
                .unwrap();
        }
        assert_eq!(search(&store, "dirigible"), 5);
        trace_id.clone()
    };
    let ledger = rusqlite::Connection::open(dir.path().join(cairn_store::DB_FILE)).unwrap();
    let (size, last_id, erased_id): (i64, i64, i64) = ledger
        .query_row(
            "SELECT (SELECT count(*) FROM entries), (SELECT max(id) FROM entries),
                    (SELECT id FROM entries WHERE trace_id = ?1)",
            [&erased_trace],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    drop(ledger);
    let index_file = dir.path().join(cairn_store::FULLTEXT_FILE);
    let expect_mended = || {
        let store = SqliteStore::open(dir.path(), options()).unwrap();
        assert_eq!(search(&store, "dirigible"), 5);
        assert_eq!(search(&store, "airship"), 1);
        assert_eq!(search(&store, "zeppelin"), 0);
    };
    // A crash after the last three were acknowledged and before they were
    // indexed.
    let index = rusqlite::Connection::open(&index_file).unwrap();
    index
        .execute_batch(&format!(
            "DELETE FROM \"steps_fts_{}\" WHERE rowid >= {};
             UPDATE fulltext_progress SET indexed_below = {};",
            last_id >> 40,
            last_id - 2,
            size - 6
        ))
        .unwrap();
    drop(index);
    expect_mended();
    // A crash after the erasure committed and before its deletion from the
    // index (the progress recorded before it).
    let index = rusqlite::Connection::open(&index_file).unwrap();
    index
        .execute_batch(&format!(
            "INSERT INTO \"steps_fts_{}\" (rowid, doc) VALUES ({erased_id}, 'the zeppelin departs at noon');
             UPDATE fulltext_progress SET indexed_below = 0;",
            erased_id >> 40
        ))
        .unwrap();
    drop(index);
    expect_mended();
    // The index file lost, then damaged: rebuilt from the log.
    std::fs::remove_file(&index_file).unwrap();
    expect_mended();
    std::fs::write(
        &index_file,
        b"this is not a database at all, not even close; ".repeat(200),
    )
    .unwrap();
    expect_mended();
}

/// While the log grows, checkpoints are signed at the configured interval
/// (here 200 ms) without anyone asking, and the idle tick covers the tail.
#[test]
fn checkpoints_follow_a_growing_log() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn LedgerStore> = Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
    let ledger =
        cairn_store::Ledger::new(Arc::clone(&store), cairn_store::SequencerConfig::default());
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(1200) {
        ledger
            .write(cairn_store::WriteRequest::Step(Box::new(
                crate::conformance::step("s1", "Reasoning", "r"),
            )))
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let size = store.log_size("acme").unwrap();
    // The idle tick (250 ms) plus the interval (200 ms) covers the tail.
    std::thread::sleep(Duration::from_millis(700));
    let checkpoints = store.checkpoints("acme").unwrap();
    assert!(
        checkpoints.len() >= 3,
        "only {} checkpoints while the log grew for 1.2 s",
        checkpoints.len()
    );
    assert_eq!(
        checkpoints.last().unwrap().size,
        size,
        "the idle tick checkpoints the tail"
    );
    assert!(checkpoints.windows(2).all(|w| w[0].size < w[1].size));
}

#[cfg(unix)]
#[test]
fn the_server_key_is_created_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let first = SqliteStore::open(dir.path(), options())
        .unwrap()
        .server_key()
        .to_string();
    let mode = std::fs::metadata(dir.path().join("server.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // Reopening loads the same key.
    assert_eq!(
        SqliteStore::open(dir.path(), options())
            .unwrap()
            .server_key()
            .to_string(),
        first
    );
}

/// A store written before the full-text index existed, or that kept it
/// inside `ledger.db`, gets its steps indexed in `fulltext.db` when a
/// sequencing process next opens it (and the old tables dropped),
/// one written before vectors were tagged with their embedder (the
/// `embeddings` table) gets them moved into `vectors` as word-hash ones,
/// and one that kept the kinds of sessions in an index over `entries` gets
/// them carried into `session_kinds`.
#[test]
fn an_older_store_gets_its_steps_indexed_for_search() {
    let dir = tempfile::tempdir().unwrap();
    let append = |store: Arc<dyn LedgerStore>, content: &str| {
        cairn_store::Ledger::new(store, cairn_store::SequencerConfig::default()).write(
            cairn_store::WriteRequest::Step(Box::new(crate::conformance::step(
                "s1", "plan", content,
            ))),
        )
    };
    let before = {
        let store: Arc<dyn LedgerStore> =
            Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
        append(Arc::clone(&store), "the zeppelin schedule slipped").unwrap();
        append(Arc::clone(&store), "注文テーブルを検索しています").unwrap();
        cairn_store::Ledger::new(Arc::clone(&store), cairn_store::SequencerConfig::default())
            .write(cairn_store::WriteRequest::Step(Box::new(
                crate::conformance::step("s1", "Decision", "retire the airship fleet"),
            )))
            .unwrap();
        cairn_store::ops::drain_queue(
            store.as_ref(),
            &cairn_store::embed::WordHash,
            8,
            &mut |_| {},
        )
        .unwrap();
        // The decision, and a plan if sampling picked it.
        store.vectors_by_embedder().unwrap()
    };
    std::fs::remove_file(dir.path().join(cairn_store::FULLTEXT_FILE)).unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    conn.execute_batch(
        "CREATE VIRTUAL TABLE steps_fts USING fts5(doc, content = '', contentless_delete = 1);
         CREATE TABLE fulltext_progress (org INTEGER PRIMARY KEY, indexed_below INTEGER NOT NULL);
         INSERT INTO meta (key, value) VALUES ('fulltext', '1'), ('fulltext_progress', '1');
         CREATE TABLE embeddings (id INTEGER PRIMARY KEY, org INTEGER NOT NULL, vector BLOB NOT NULL);
         INSERT INTO embeddings SELECT id, org, vector FROM vectors;
         DROP TABLE vectors; DROP TABLE embedding_queue;
         DROP TABLE session_kinds;
         CREATE INDEX entries_session_kinds ON entries (sid, kind) WHERE type = 'step';",
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(dir.path(), options()).unwrap();
    // The kinds of its sessions were carried into `session_kinds`.
    for (kind, listed) in [
        (cairn_core::kind::StepKind::Decision, 1),
        (cairn_core::kind::StepKind::Reflection, 0),
    ] {
        let filter = cairn_store::SessionFilter {
            kind: Some(kind),
            ..cairn_store::SessionFilter::all()
        };
        let sessions = store
            .list_sessions(crate::conformance::ORG, &filter, 10)
            .unwrap();
        assert_eq!(sessions.len(), listed, "{kind:?}");
    }
    assert_eq!(store.vectors_by_embedder().unwrap(), before);
    assert_eq!(before[0].0, cairn_store::embed::WORD_HASH_ID);
    let hits = store
        .semantic_search(
            crate::conformance::ORG,
            cairn_store::embed::WORD_HASH_ID,
            &cairn_store::embed::embed("airship fleet"),
            5,
        )
        .unwrap();
    assert_eq!(hits.len() as u64, before[0].1);
    for query in ["zeppelin", "注文"] {
        let query = cairn_store::fulltext::FullTextQuery::parse(query).unwrap();
        let hits = store
            .full_text_search(
                crate::conformance::ORG,
                &query,
                &cairn_store::StepFilter::default(),
                5,
            )
            .unwrap();
        assert_eq!(hits.len(), 1, "{query:?}");
    }
    drop(store);
    let conn = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    let leftovers: i64 = conn
        .query_row(
            "SELECT (SELECT count(*) FROM sqlite_master WHERE name LIKE 'steps_fts%' OR name = 'fulltext_progress')
                  + (SELECT count(*) FROM meta WHERE key IN ('fulltext', 'fulltext_progress'))",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        leftovers, 0,
        "the index's old tables are gone from ledger.db"
    );
}

/// Verification reads the stored checkpoints a page at a time while the
/// log streams past them (a log signs about one a second while it grows):
/// with a checkpoint at every size, more than a page of them and sizes on
/// the verifier's chunk boundaries, the log verifies, and one signed by
/// the log key with a false root, past the first page, is still compared
/// where the stream reaches its size.
#[test]
fn stored_checkpoints_are_read_in_pages_and_each_is_compared_at_its_size() {
    use cairn_core::checkpoint::Checkpoint;
    use cairn_core::verify::Reason;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn LedgerStore> = Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
    let ledger = Arc::new(crate::conformance::ledger(Arc::clone(&store)));
    std::thread::scope(|scope| {
        for t in 0..8 {
            let ledger = Arc::clone(&ledger);
            scope.spawn(move || {
                for i in 0..165 {
                    crate::conformance::append(
                        &ledger,
                        crate::conformance::step(&format!("s{t}"), "plan", &format!("p{i}")),
                    )
                    .unwrap();
                }
            });
        }
    });
    let org = crate::conformance::ORG;
    let size = store.log_size(org).unwrap();
    assert!(size > 1300, "{size}");
    let origin = format!("{}/{org}", store.server_name());
    let signed = |size: u64, root: cairn_core::Hash| {
        let body = Checkpoint {
            origin: origin.clone(),
            size,
            root,
            extensions: Vec::new(),
        };
        store.signer().sign(&body.to_text()).unwrap()
    };
    let conn = rusqlite::Connection::open(dir.path().join(cairn_store::DB_FILE)).unwrap();
    let org_row: i64 = conn
        .query_row("SELECT org FROM orgs WHERE name = ?1", [org], |r| r.get(0))
        .unwrap();
    let put = |size: u64, root: cairn_core::Hash| {
        conn.execute(
            "INSERT OR REPLACE INTO checkpoints (org, size, root, note, created_at) VALUES (?1, ?2, ?3, ?4, 0)",
            rusqlite::params![org_row, size as i64, root.0.to_vec(), signed(size, root)],
        )
        .unwrap();
    };
    for n in 1..=size {
        put(n, store.root_at(org, n).unwrap());
    }
    let verdict = cairn_store::ops::verify_org(store.as_ref(), org, &[], &[], &mut |_| {}).unwrap();
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
    assert_eq!(verdict.checkpoints_checked as u64, size);
    assert_eq!(verdict.checkpoint_size, Some(size));
    // A false root at a chunk boundary (entries are read 512 at a time)
    // and past the first page of checkpoints (1,024): named at the entry
    // that brings the log to its size.
    let false_root = store.root_at(org, 1).unwrap();
    for size in [1024, 1100] {
        put(size, false_root);
        let verdict =
            cairn_store::ops::verify_org(store.as_ref(), org, &[], &[], &mut |_| {}).unwrap();
        let failure = verdict.verdict.failure.expect("a false root fails");
        assert_eq!(
            failure.reason,
            Reason::InconsistentCheckpoint,
            "{failure:?}"
        );
        assert_eq!(failure.at.seq, Some(size - 1), "{failure:?}");
        put(size, store.root_at(org, size).unwrap());
    }
    // The row's size and root are read from its columns, which only order
    // and find it: a genuine note of size 100 with a false root, filed in
    // a row of another size (past the log, so that it would come after
    // the stream passed 100) or with another root, fails; so does a
    // signed checkpoint of the empty log with another root.
    let wrong = |row_size: u64, row_root: cairn_core::Hash, note_size: u64| {
        conn.execute(
            "INSERT OR REPLACE INTO checkpoints (org, size, root, note, created_at) VALUES (?1, ?2, ?3, ?4, 0)",
            rusqlite::params![org_row, row_size as i64, row_root.0.to_vec(), signed(note_size, false_root)],
        )
        .unwrap();
        let verdict =
            cairn_store::ops::verify_org(store.as_ref(), org, &[], &[], &mut |_| {}).unwrap();
        let failure = verdict.verdict.failure.expect("a false checkpoint fails");
        assert_eq!(
            failure.reason,
            Reason::InconsistentCheckpoint,
            "{row_size} {note_size}: {failure:?}"
        );
        failure.detail
    };
    let true_root = store.root_at(org, 100).unwrap();
    let relabelled = wrong(100, true_root, 100);
    assert!(
        relabelled.contains("holds a note signed for size 100"),
        "{relabelled}"
    );
    put(100, true_root);
    let empty = wrong(0, false_root, 0);
    put(0, cairn_core::merkle::empty_root());
    assert!(empty.contains("empty log"), "{empty}");
    // Rows are never deleted (the store refuses it): this one stays last.
    let moved = wrong(1 << 30, false_root, 100);
    assert!(
        moved.contains("holds a note signed for size 100"),
        "{moved}"
    );
}

/// An export's scope is listed a page at a time (an agent may have
/// millions of sessions): an agent of more sessions than a page exports
/// each of them once, and the bundle verifies.
#[test]
fn an_agent_of_more_sessions_than_a_listing_page_exports_them_all() {
    use cairn_store::ops::ExportScope;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn LedgerStore> = Arc::new(SqliteStore::open(dir.path(), options()).unwrap());
    let ledger = Arc::new(crate::conformance::ledger(Arc::clone(&store)));
    std::thread::scope(|scope| {
        for t in 0..8 {
            let ledger = Arc::clone(&ledger);
            scope.spawn(move || {
                for i in 0..140 {
                    crate::conformance::append(
                        &ledger,
                        crate::conformance::step(&format!("s{t}-{i}"), "plan", "p"),
                    )
                    .unwrap();
                }
            });
        }
    });
    let org = crate::conformance::ORG;
    let ids: Vec<String> =
        cairn_store::ops::sessions_in_scope(store.as_ref(), org, &ExportScope::All)
            .map(Result::unwrap)
            .collect();
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(
        (ids.len(), distinct.len()),
        (1120, 1120),
        "each session listed once"
    );
    let checkpoint =
        match ledger.write(cairn_store::WriteRequest::Checkpoint { org_id: org.into() }) {
            Ok(cairn_store::Written::Checkpoint(cp)) => cp,
            other => panic!("{other:?}"),
        };
    let agent = crate::conformance::step("x", "plan", "p").agent_id;
    let now = cairn_core::Timestamp::from_micros(0).unwrap();
    let mut bundle = Vec::new();
    let summary = cairn_store::ops::export(
        store.as_ref(),
        org,
        &ExportScope::Agent(agent),
        &checkpoint,
        now,
        &mut bundle,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(summary.sessions, 1120);
    let mut verifier = cairn_core::bundle::BundleVerifier::new(vec![store.server_key().clone()]);
    for line in String::from_utf8(bundle).unwrap().lines() {
        verifier.push_line(line);
    }
    let verdict = verifier.finish();
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
    assert_eq!(verdict.selection.map(|s| s.sessions.len()), Some(1120));
}

/// A store written before keys could expire (its `api_keys` without
/// `expires_at`) gets the column from its first open that can write (a
/// key command beside a server as well as a sequencing one), and its keys
/// keep working and can be made to expire.
#[test]
fn a_store_from_before_key_expiry_gets_the_column() {
    use cairn_store::{ApiKey, Role, token_hash};
    let dir = tempfile::tempdir().unwrap();
    let now = cairn_store::now();
    let (old, old_token) = ApiKey::generate("acme", Role::Admin, None, "old", now).unwrap();
    {
        let store = SqliteStore::open(dir.path(), options()).unwrap();
        store.put_api_key(&old).unwrap();
    }
    {
        let conn = rusqlite::Connection::open(dir.path().join(cairn_store::DB_FILE)).unwrap();
        conn.execute_batch("ALTER TABLE api_keys DROP COLUMN expires_at")
            .unwrap();
    }
    // A key command's open (beside a server, not sequencing) adds it too.
    let beside = SqliteStore::open(
        dir.path(),
        SqliteOptions {
            sequencer: false,
            ..options()
        },
    )
    .unwrap();
    assert_eq!(
        beside.api_key_by_hash(&token_hash(&old_token)).unwrap(),
        Some(old.clone())
    );
    drop(beside);
    let store = SqliteStore::open(dir.path(), options()).unwrap();
    assert_eq!(
        store.api_key_by_hash(&token_hash(&old_token)).unwrap(),
        Some(old)
    );
    let (mut expiring, token) = ApiKey::generate("acme", Role::Reader, None, "", now).unwrap();
    expiring.expires_at = Some(cairn_core::Timestamp::from_micros(now.as_micros() + 1).unwrap());
    store.put_api_key(&expiring).unwrap();
    assert_eq!(
        store.api_key_by_hash(&token_hash(&token)).unwrap(),
        Some(expiring)
    );
}
