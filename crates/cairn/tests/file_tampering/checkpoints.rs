//! Checkpoints against a rewritten history: one saved before the rewrite
//! catches it, and one signed by another key (or a log key recorded only
//! in the metadata) is refused.

use super::*;

#[test]
fn a_rewritten_history_is_caught_by_a_saved_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let saved = populated(dir.path());
    let saved_path = dir.path().join("auditor-checkpoint.txt");
    std::fs::write(&saved_path, &saved).unwrap();
    let saved_size: i64 = saved.lines().nth(1).unwrap().parse().unwrap();

    // The attacker, holding the data directory and its key, rebuilds the
    // whole ledger with one step changed: every hash, every checkpoint and
    // every signature is consistent again.
    std::fs::remove_file(dir.path().join("data/ledger.db")).unwrap();
    let rewritten = SEED_000_SESSION.replace("Enterprise grew 23%", "Enterprise grew 32%");
    populate_with(Target::embedded(dir.path()), &rewritten);
    assert_eq!(
        cairn_in(dir.path(), &["verify"], None).code,
        0,
        "on its own the rewrite is consistent"
    );

    let run = cairn_in(
        dir.path(),
        &[
            "verify",
            "--json",
            "--checkpoint",
            saved_path.to_str().unwrap(),
        ],
        None,
    );
    let verdict = json(&run);
    assert_eq!(run.code, 1, "{verdict}");
    assert_eq!(
        verdict["brokenReason"], "inconsistent-checkpoint",
        "{verdict}"
    );
    assert_eq!(verdict["brokenAtSequence"], saved_size - 1);
    assert!(
        verdict["detail"].as_str().unwrap().contains("rewritten"),
        "{verdict}"
    );
}

/// A checkpoint of org acme one entry past `saved`'s size, signed (and
/// validly so) by another store's key of the same name, and that key
/// (vkey): the other store logs steps until its own log has that size.
fn stranger_checkpoint(saved: &str) -> (i64, String, String) {
    let target: i64 = saved.lines().nth(1).unwrap().parse::<i64>().unwrap() + 1;
    let other = tempfile::tempdir().unwrap();
    let note = loop {
        let run = cairn_in(
            other.path(),
            &[
                "log",
                "--session",
                "x",
                "--agent",
                "a",
                "--type",
                "plan",
                "--content",
                "x",
            ],
            None,
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        let note = cairn_in(other.path(), &["checkpoint"], None).stdout;
        let size: i64 = note.lines().nth(1).unwrap().parse().unwrap();
        assert!(size <= target, "{note}");
        if size == target {
            break note;
        }
    };
    let keys = cairn_in(other.path(), &["keys"], None).stdout;
    let vkey = keys
        .lines()
        .find(|l| l.starts_with("cairn.local+"))
        .unwrap_or_else(|| panic!("{keys}"))
        .trim()
        .to_owned();
    (target, note, vkey)
}

/// Slips a stored checkpoint into the table and expects verification to
/// fail on its signature.
fn expect_bad_signature(dir: &Path, conn: rusqlite::Connection, size: i64, note: &str) {
    conn.execute(
        "INSERT INTO checkpoints (org, size, root, note, created_at) VALUES (1, ?1, zeroblob(32), ?2, 0)",
        rusqlite::params![size, note],
    )
    .unwrap();
    drop(conn);
    let run = cairn_in(dir, &["verify", "--json"], None);
    let verdict = json(&run);
    assert_eq!(run.code, 1, "{verdict}");
    assert_eq!(verdict["brokenReason"], "bad-signature", "{verdict}");
}

#[test]
fn a_checkpoint_signed_by_another_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let saved = populated(dir.path());
    // Forge a checkpoint for the current log with a different key of the
    // same name, and slip it into the table.
    let (size, forged, _) = stranger_checkpoint(&saved);
    expect_bad_signature(dir.path(), attacker(dir.path()), size, &forged);
}

/// A key named only by the database's metadata vouches for nothing: its
/// checkpoints fail verification as any stranger's do. (It was trusted,
/// valid from the first entry, by every verification not given `--key`.)
#[test]
fn a_log_key_recorded_only_in_the_metadata_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let saved = populated(dir.path());
    let (size, forged, vkey) = stranger_checkpoint(&saved);
    // With its own key row, and with the store's first-key row deleted (so
    // that the added row would be read as the store's first key).
    for drop_first in [false, true] {
        let copy = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(copy.path().join("data")).unwrap();
        for file in std::fs::read_dir(dir.path().join("data")).unwrap() {
            let file = file.unwrap();
            if file.file_type().unwrap().is_file() {
                std::fs::copy(file.path(), copy.path().join("data").join(file.file_name()))
                    .unwrap();
            }
        }
        let conn = attacker(copy.path());
        conn.execute(
            "INSERT INTO meta (key, value) VALUES (?1, '')",
            [format!("log_key_added:{vkey}")],
        )
        .unwrap();
        if drop_first {
            conn.execute("DELETE FROM meta WHERE key = 'server_key'", [])
                .unwrap();
        }
        expect_bad_signature(copy.path(), conn, size, &forged);
    }
}
