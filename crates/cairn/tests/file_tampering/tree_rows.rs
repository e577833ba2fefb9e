//! The stored Merkle subtree rows (`nodes`): compared with the log by
//! verification, rebuilt from it by `cairn admin repair-tree`.

use super::*;

/// A populated store of 300 more steps whose level-4 subtree row `index`
/// was deleted; the attacker's connection (triggers dropped) to go on.
fn store_without_tree_row(dir: &Path, index: i64) -> rusqlite::Connection {
    populated(dir);
    common::log_many(Target::embedded(dir), 300);
    let conn = attacker(dir);
    conn.execute("DELETE FROM nodes WHERE level = 4 AND idx = ?1", [index])
        .unwrap();
    conn
}

/// How many rows the store holds for the level-4 subtree `index`.
fn tree_rows(dir: &Path, index: i64) -> i64 {
    rusqlite::Connection::open(dir.join("data/ledger.db"))
        .unwrap()
        .query_row(
            "SELECT count(*) FROM nodes WHERE level = 4 AND idx = ?1",
            [index],
            |r| r.get(0),
        )
        .unwrap()
}

/// The stored subtree hashes (`nodes`), which proofs, receipts and the
/// roots of sizes no checkpoint signed are computed from, are compared
/// with verification's own fold of the leaves: an edited row, or one that
/// is not a hash, fails at the entry that closes its subtree, and so does
/// a missing one, which every reader computes from below (its proofs still
/// verify). `cairn admin repair-tree` then makes the rows the log's again:
/// the very rows the appends wrote.
#[test]
fn stored_tree_nodes_are_compared_with_the_log() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    common::log_many(Target::embedded(dir.path()), 300);
    assert_eq!(cairn_in(dir.path(), &["verify"], None).code, 0);
    for (name, sql, seq) in common::node_tamperings(false) {
        let copy = tempfile::tempdir().unwrap();
        common::copy_dir(&dir.path().join("data"), &copy.path().join("data"));
        let conn = attacker(copy.path());
        let digest = || -> String {
            conn.query_row(common::NODES_DIGEST_SQL, [], |r| r.get(0))
                .unwrap()
        };
        let before = digest();
        conn.execute_batch(&sql).unwrap();
        assert!(
            before != digest() || sql.starts_with("UPDATE"),
            "{name}: nothing changed"
        );
        common::expect_node_verdict(Target::embedded(copy.path()), name, seq);
        common::expect_tree_repaired(Target::embedded(copy.path()), name);
        assert_eq!(before, digest(), "{name}: the rows after the repair");
    }
}

/// The repair rewrites rows the sequencer writes: beside a running
/// server (which holds the data directory's lock) it is refused and
/// writes nothing; once the server has stopped it runs.
#[test]
fn the_tree_repair_refuses_to_run_beside_a_server() {
    let dir = tempfile::tempdir().unwrap();
    drop(store_without_tree_row(dir.path(), 2));
    let (server, _) = common::serve(dir.path(), None);
    let run = cairn_in(dir.path(), &["--json", "admin", "repair-tree"], None);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stderr.contains("in use by another cairn process"),
        "{}",
        run.stderr
    );
    drop(server);
    assert_eq!(
        tree_rows(dir.path(), 2),
        0,
        "nothing written beside the server"
    );
    let run = cairn_in(dir.path(), &["--json", "admin", "repair-tree"], None);
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    assert_eq!(json(&run)["missing_written"], 1, "{}", run.stdout);
    assert_eq!(tree_rows(dir.path(), 2), 1);
}

/// A missing subtree row is reported after the log, so it hides no
/// failure of the log itself: a record edited further on is the verdict.
#[test]
fn a_missing_tree_row_hides_no_later_failure() {
    let dir = tempfile::tempdir().unwrap();
    let conn = store_without_tree_row(dir.path(), 0);
    let forged: i64 = conn
        .query_row(
            "SELECT min(seq) FROM entries WHERE type = 'step' AND content LIKE 'bulk note%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    conn.execute(
        "UPDATE entries SET content = 'FORGED' WHERE seq = ?1",
        [forged],
    )
    .unwrap();
    let entries: i64 = conn
        .query_row("SELECT count(*) FROM entries", [], |r| r.get(0))
        .unwrap();
    drop(conn);
    let run = cairn_in(dir.path(), &["--json", "verify"], None);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let verdict = json(&run);
    assert_eq!(verdict["brokenReason"], "digest-mismatch", "{verdict}");
    assert_eq!(verdict["brokenAtSequence"], forged, "{verdict}");
    // The log's size, not how far verification read before it stopped.
    assert_eq!(verdict["log_size"], entries, "{verdict}");
    assert!(
        verdict["totalChecked"].as_i64().unwrap() < entries,
        "{verdict}"
    );
    // Nor does the repair of the tree rebuild anything from such a log.
    let run = cairn_in(dir.path(), &["--json", "admin", "repair-tree"], None);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let answer = json(&run);
    assert_eq!(answer["repaired"], false, "{answer}");
    assert_eq!(answer["brokenAtSequence"], forged, "{answer}");
    assert_eq!(tree_rows(dir.path(), 0), 0, "nothing written");
}
