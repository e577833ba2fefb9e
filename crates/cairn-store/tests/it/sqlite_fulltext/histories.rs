//! An index file of another history (a copied data directory, a restore):
//! rebuilt, or its documents forgotten in the background and never used.

use super::*;

/// fulltext.db is tied to the history it indexes (each org's recorded
/// progress carries the log's root at that size): after ledger.db is
/// restored from a backup beside a newer index file, documents of steps
/// the restored log does not hold are not found, and a step appended after
/// the restore whose document a crash kept from the index is indexed by
/// the next open.
#[test]
fn an_index_from_another_history_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let backup = tempfile::tempdir().unwrap();
    {
        let server = SqliteStore::open(data, seq_options()).unwrap();
        write_step(&server, "the first step");
    }
    std::fs::copy(
        data.join(cairn_store::DB_FILE),
        backup.path().join("ledger.db"),
    )
    .unwrap();
    let future_seq = {
        let server = SqliteStore::open(data, seq_options()).unwrap();
        for i in 0..5 {
            write_step(&server, &format!("filler number {i}"));
        }
        let (seq, _) = write_step(&server, "the zeppelin departs at noon");
        assert_eq!(hits(&server, "zeppelin"), vec![seq]);
        seq
    };
    // Restore ledger.db (the index file is left as it is).
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!(
            "{}{suffix}",
            data.join(cairn_store::DB_FILE).display()
        ));
    }
    std::fs::copy(
        backup.path().join("ledger.db"),
        data.join(cairn_store::DB_FILE),
    )
    .unwrap();
    let index_file = data.join(cairn_store::FULLTEXT_FILE);
    let saved = backup.path().join("fulltext.db");
    let (fresh_seq, size) = {
        let server = SqliteStore::open(data, seq_options()).unwrap();
        // fulltext.db as this open left it...
        copy_index_file(&index_file, &saved);
        let (seq, _) = write_step(&server, "the dirigible lands at dawn");
        (seq, server.log_size("acme").unwrap())
    };
    // ... is what a crash before the thread's next write leaves.
    copy_index_file(&saved, &index_file);
    let server = open_caught_up(data);
    let stale = hits(&server, "zeppelin");
    let found = hits(&server, "dirigible");
    assert!(
        stale.is_empty() && found == vec![fresh_seq],
        "(a) a step that is not in this log (seq {future_seq}, log size {size}) is found: {stale:?}; \
         (b) acknowledged step {fresh_seq} is never indexed: {found:?}"
    );
}

/// An org's documents from another history are deleted by the index's
/// thread, not by the open (that made opening a large store linear in its
/// documents), and until they are gone no process uses them: a store
/// whose index holds another history's documents (here a whole other
/// store's, 3,000 of them) forgets them and indexes its own log; a mark
/// left by a stop or a crash mid-way makes another process's search say
/// so instead of using them, and the next sequencing open finishes the
/// job.
#[test]
fn documents_of_another_history_are_forgotten_in_the_background_and_never_used() {
    let other = tempfile::tempdir().unwrap();
    {
        let server = SqliteStore::open(other.path(), seq_options()).unwrap();
        let requests: Vec<WriteRequest> = (0..3000)
            .map(|i| {
                WriteRequest::Prepared(Box::new(
                    cairn_store::prepare_step(
                        crate::conformance::step("s1", "Reasoning", &format!("the quokka {i}")),
                        &server.limits(),
                        0.0,
                    )
                    .unwrap(),
                ))
            })
            .collect();
        server.append_batch(&requests).unwrap();
        assert_eq!(hits(&server, "quokka").len(), 50);
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let narwhal = {
        let server = SqliteStore::open(data, seq_options()).unwrap();
        write_step(&server, "the narwhal surfaces").0
    };
    let index_file = data.join(cairn_store::FULLTEXT_FILE);
    let foreign = other.path().join(cairn_store::FULLTEXT_FILE);
    let documents = |path: &Path| -> (i64, i64) {
        let index = rusqlite::Connection::open(path).unwrap();
        let count = |sql: &str| index.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
        (
            all_documents(&index),
            count("SELECT count(*) FROM fulltext_forgetting"),
        )
    };
    // Another store's index beside this ledger: forgotten, then rebuilt.
    copy_index_file(&foreign, &index_file);
    {
        let server = open_caught_up(data);
        assert!(
            hits(&server, "quokka").is_empty(),
            "another history's documents"
        );
        assert_eq!(hits(&server, "narwhal"), vec![narwhal]);
    }
    assert_eq!(documents(&index_file), (1, 0));

    // A mark left mid-way (a stop or a crash while forgetting): the stale
    // documents are still in the file, and no process may use them.
    copy_index_file(&foreign, &index_file);
    {
        let index = rusqlite::Connection::open(&index_file).unwrap();
        index
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS fulltext_forgetting
                   (org INTEGER PRIMARY KEY, next_rowid INTEGER NOT NULL);
                 INSERT INTO fulltext_forgetting (org, next_rowid)
                   SELECT org, 0 FROM fulltext_progress;
                 DELETE FROM fulltext_progress;",
            )
            .unwrap();
    }
    let reader = SqliteStore::open(data, reader_options()).unwrap();
    match reader.full_text_search(
        "acme",
        &FullTextQuery::parse("quokka").unwrap(),
        &cairn_store::StepFilter::default(),
        50,
    ) {
        Err(cairn_store::StoreError::Busy(message)) => {
            assert!(message.contains("another history"), "{message}")
        }
        other => panic!("a reader used documents being forgotten: {other:?}"),
    }
    drop(reader);
    let server = open_caught_up(data);
    assert!(hits(&server, "quokka").is_empty());
    drop(server);
    assert_eq!(documents(&index_file), (1, 0));
    let reader = SqliteStore::open(data, reader_options()).unwrap();
    assert_eq!(hits(&reader, "narwhal"), vec![narwhal]);
    assert!(hits(&reader, "quokka").is_empty());
}
