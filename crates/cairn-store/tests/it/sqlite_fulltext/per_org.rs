//! One full-text table per org: what another org writes never moves an
//! org's scores or order; an index of the earlier layout (one table for
//! every org) is rebuilt per org; while the index is rebuilt, the orgs
//! take turns and each is told its own steps left.

use super::*;

/// Where org `name`'s documents are indexed up to in the index file of
/// the store in `dir` (0 when none are).
fn indexed_below(dir: &Path, name: &str) -> u64 {
    let below: i64 = rusqlite::Connection::open(dir.join(cairn_store::FULLTEXT_FILE))
        .unwrap()
        .query_row(
            "SELECT coalesce(max(indexed_below), 0) FROM fulltext_progress WHERE org = ?1",
            [org_number(dir, name)],
            |r| r.get(0),
        )
        .unwrap();
    below as u64
}

/// BM25 weighs a word by how many documents hold it: the score an org
/// sees must not move with what another org writes (a hostile probe read
/// a word of another tenant's steps from it, when one table held every
/// org's documents). Scores are ranks.
#[test]
fn another_orgs_documents_never_move_a_score() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), seq_options()).unwrap();
    write_step_in(&store, "acme", "draft term sheet for project nightingale");
    write_step_in(&store, "acme", "nightingale nightingale and the falcon");
    let scores = |store: &SqliteStore| -> Vec<(Vec<u64>, Vec<f64>)> {
        ["nightingale", "falcon", "term sheet"]
            .iter()
            .map(|words| {
                let hits = search(store, "acme", words).unwrap();
                (
                    hits.iter().map(|(seq, _)| *seq).collect(),
                    hits.iter().map(|(_, score)| *score).collect(),
                )
            })
            .collect()
    };
    let before = scores(&store);
    assert_eq!(before[0].0.len(), 2, "{before:?}");
    for i in 0..40 {
        write_step_in(&store, "beta", &format!("nightingale sighted {i}"));
        write_step_in(&store, "beta", &format!("an unrelated note {i}"));
    }
    assert_eq!(hits_once_caught_up(&store, "beta", "nightingale").len(), 40);
    assert_eq!(scores(&store), before);
}

/// BM25 normalizes a hit's weight by its document's length against the
/// average document's: with one table for every org, another org's 40
/// long steps made a long hit of one's own outrank a short one it had
/// ranked below (a second review flipped two one-word hits that way).
/// Each org's documents are in a table of their own: the order holds.
#[test]
fn another_orgs_documents_never_move_the_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), seq_options()).unwrap();
    // Twice in 30 words, and once in 3.
    let filler: Vec<String> = (0..28).map(|i| format!("filler{i}")).collect();
    let (long, _) = write_step_in(
        &store,
        "acme",
        &format!("osprey {} osprey", filler.join(" ")),
    );
    let (short, _) = write_step_in(&store, "acme", "osprey over water");
    let order = |store: &SqliteStore| -> Vec<u64> {
        search(store, "acme", "osprey")
            .unwrap()
            .into_iter()
            .map(|(seq, _)| seq)
            .collect()
    };
    assert_eq!(order(&store), vec![short, long]);
    let words: Vec<String> = (0..300).map(|i| format!("word{i}")).collect();
    for _ in 0..40 {
        write_step_in(&store, "beta", &words.join(" "));
    }
    assert_eq!(hits_once_caught_up(&store, "beta", "word7").len(), 40);
    assert_eq!(order(&store), vec![short, long]);
}

/// A `fulltext.db` of a version with one table for every org: the first
/// open drops it with every org's progress, and each org is indexed
/// again from its log into a table of its own (its stale documents, here
/// one naming a word no step holds, are never found).
#[test]
fn an_index_with_one_table_for_every_org_is_rebuilt_per_org() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SqliteStore::open(dir.path(), seq_options()).unwrap();
        write_step_in(&store, "acme", "the kestrel hovers");
        write_step_in(&store, "beta", "the kestrel dives");
    }
    let index_file = dir.path().join(cairn_store::FULLTEXT_FILE);
    let acme = org_number(dir.path(), "acme");
    {
        let index = rusqlite::Connection::open(&index_file).unwrap();
        index
            .execute_batch(&format!(
                "DROP TABLE \"steps_fts_{acme}\";
                 CREATE VIRTUAL TABLE steps_fts USING fts5(doc, content = '', contentless_delete = 1);
                 INSERT INTO steps_fts (rowid, doc) VALUES ({}, 'a stale wyvern');",
                acme << 40
            ))
            .unwrap();
    }
    let store = SqliteStore::open(dir.path(), seq_options()).unwrap();
    assert_eq!(hits_once_caught_up(&store, "acme", "kestrel").len(), 1);
    assert_eq!(hits_once_caught_up(&store, "beta", "kestrel").len(), 1);
    assert!(hits(&store, "wyvern").is_empty());
    drop(store);
    let index = rusqlite::Connection::open(&index_file).unwrap();
    let shared: i64 = index
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = 'steps_fts'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(shared, 0, "the shared table is left");
    assert_eq!(count_documents(&index, acme, "1", []), 1);
}

/// While the index is rebuilt from the log, the orgs take turns a chunk
/// at a time: a small org is searchable while a large org numbered before
/// it is still being indexed (it waited for all of it), and its search
/// meanwhile is told its own steps left, never the other org's.
#[test]
fn a_small_org_is_searchable_before_a_large_org_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let (heron, large) = {
        let server = SqliteStore::open(dir.path(), seq_options()).unwrap();
        for chunk in 0..40 {
            let requests: Vec<WriteRequest> = (0..1000)
                .map(|i| {
                    WriteRequest::Prepared(Box::new(
                        cairn_store::prepare_step(
                            crate::conformance::step(
                                "s1",
                                "Reasoning",
                                &format!("the albatross glides {chunk} {i}"),
                            ),
                            &server.limits(),
                            0.0,
                        )
                        .unwrap(),
                    ))
                })
                .collect();
            server.append_batch(&requests).unwrap();
        }
        let heron = write_step_in(&server, "beta", "the heron waits").0;
        (heron, server.log_size("acme").unwrap())
    };
    assert!(large > 40_000);
    std::fs::remove_file(dir.path().join(cairn_store::FULLTEXT_FILE)).unwrap();
    let server = SqliteStore::open(dir.path(), seq_options()).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let found = loop {
        match search(&server, "beta", "heron") {
            Ok(found) => break found,
            Err(cairn_store::StoreError::Busy(message)) => {
                let left: u64 = message
                    .split("about ")
                    .nth(1)
                    .and_then(|rest| rest.split(' ').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("{message}"));
                assert!(left <= 10, "beta was told of other orgs' steps: {message}");
            }
            Err(other) => panic!("{other:?}"),
        }
        assert!(std::time::Instant::now() < deadline, "beta never caught up");
    };
    // Where acme's rebuild stood when beta was found (its chunks take far
    // longer than this read).
    let acme_indexed = indexed_below(dir.path(), "acme");
    assert!(
        acme_indexed < large,
        "beta was searchable only once acme's {large} steps were indexed"
    );
    assert_eq!(
        found.into_iter().map(|(seq, _)| seq).collect::<Vec<_>>(),
        vec![heron]
    );
    // beta writes during acme's rebuild: searchable again after a chunk of
    // its own, its new step found (it waited for all of acme, told "about
    // 0 steps to go").
    let egret = write_step_in(&server, "beta", "the egret lands").0;
    assert_eq!(hits_once_caught_up(&server, "beta", "egret"), vec![egret]);
    let acme_indexed = indexed_below(dir.path(), "acme");
    assert!(
        acme_indexed < large,
        "beta's write was searchable only once acme's {large} steps were indexed"
    );
    assert_eq!(hits_once_caught_up(&server, "acme", "albatross").len(), 50);
}
