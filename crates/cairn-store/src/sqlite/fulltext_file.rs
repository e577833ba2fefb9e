//! The full-text index's file (`fulltext.db`): where it lives, its
//! schema, how its writing connection is opened, and the one transaction
//! that writes documents with each org's progress. The queue, the thread
//! and the rules of what is written when are in `fulltext_index.rs`.

use super::connection::restrict_file;
use super::fulltext_merge::configure as configure_merges;
use crate::{DbContext, StoreError};
use cairn_core::Hash;
use rusqlite::{Connection, params};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The index's file, beside the ledger's.
pub const FULLTEXT_FILE: &str = "fulltext.db";

/// The name under which reading connections attach the index's file.
pub(super) const ATTACHED_AS: &str = "fulltext";

/// How long the index's writing connection waits for the file's lock
/// (idle merges and the open's settings never wait: see
/// `fulltext_merge.rs`).
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

const SCHEMA: &str = "
CREATE VIRTUAL TABLE IF NOT EXISTS steps_fts USING fts5(
  doc, tokenize = 'porter unicode61 remove_diacritics 2', content = '', contentless_delete = 1
);
CREATE TABLE IF NOT EXISTS fulltext_progress (
  org           INTEGER PRIMARY KEY,
  indexed_below INTEGER NOT NULL,
  root          BLOB    NOT NULL  -- the org log's root at indexed_below
);
-- Orgs whose documents are from another history of their log, being
-- deleted by the index's thread: no search uses them meanwhile.
CREATE TABLE IF NOT EXISTS fulltext_forgetting (
  org        INTEGER PRIMARY KEY,
  next_rowid INTEGER NOT NULL  -- where the thread's next deletion starts
);";

/// Per org: the committed log size once the queued documents are in, and
/// the log's root at that size.
pub(super) type Progress = HashMap<i64, (u64, Hash)>;

/// The index file's path for the ledger at `ledger_path`.
pub(super) fn index_path(ledger_path: &Path) -> PathBuf {
    ledger_path.with_file_name(FULLTEXT_FILE)
}

/// Whether `error` is SQLite saying another connection holds the lock
/// (`SQLITE_BUSY` or `SQLITE_LOCKED`), not that the file is damaged.
pub(super) fn locked_elsewhere(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Database {
            source: rusqlite::Error::SqliteFailure(failure, _),
            ..
        } if matches!(
            failure.code,
            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
        )
    )
}

/// Opens (creating it if need be) the index's file at `path`, ready to
/// write.
pub(super) fn open_index_file(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).context("opening the full-text index")?;
    restrict_file(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .context("setting the busy timeout")?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = NORMAL;
         PRAGMA cache_size = -16384;",
    )
    .context("configuring the full-text index")?;
    conn.execute_batch(SCHEMA)
        .context("creating the full-text index")?;
    configure_merges(&conn);
    Ok(conn)
}

/// Writes documents and each org's indexed size in one transaction.
///
/// The documents go in in rowid order: FTS5 writes its pending terms out
/// as a new segment whenever a rowid is lower than the one before it, and
/// a batch's documents interleave the orgs' id ranges, so in the order
/// they were written nearly every document started a segment of its own
/// (and the segment merges that follow).
pub(super) fn write<'a>(
    conn: &Connection,
    docs: impl Iterator<Item = &'a (i64, String)>,
    sizes: &Progress,
) -> Result<(), StoreError> {
    let mut docs: Vec<&(i64, String)> = docs.collect();
    docs.sort_unstable_by_key(|(id, _)| *id);
    let tx = conn
        .unchecked_transaction()
        .context("starting to index steps for full-text search")?;
    {
        let mut insert = tx
            .prepare_cached("INSERT OR REPLACE INTO steps_fts (rowid, doc) VALUES (?1, ?2)")
            .context("indexing steps for full-text search")?;
        for (id, doc) in docs {
            insert
                .execute(params![id, doc])
                .context("indexing steps for full-text search")?;
        }
        for (org, (size, root)) in sizes {
            mark(&tx, *org, *size, root)?;
        }
    }
    tx.commit()
        .context("committing the full-text index's documents")
}

/// Records that org `org`'s log is indexed below `size`, whose root is
/// `root` (never moving it back).
pub(super) fn mark(conn: &Connection, org: i64, size: u64, root: &Hash) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO fulltext_progress (org, indexed_below, root) VALUES (?1, ?2, ?3)
         ON CONFLICT (org) DO UPDATE SET indexed_below = excluded.indexed_below, root = excluded.root
         WHERE excluded.indexed_below >= fulltext_progress.indexed_below",
    )
    .and_then(|mut s| s.execute(params![org, size as i64, &root.0[..]]))
    .context("recording the full-text index's progress")?;
    Ok(())
}

/// Removes what older versions kept of the index inside `ledger.db` (the
/// index now lives in its own file, rebuilt from the log).
pub(super) fn drop_inline_index(tx: &Connection) -> Result<(), StoreError> {
    tx.execute_batch(
        "DROP TABLE IF EXISTS steps_fts;
         DROP TABLE IF EXISTS fulltext_progress;
         DELETE FROM meta WHERE key IN ('fulltext', 'fulltext_progress');",
    )
    .context("moving the full-text index to its own file")
}
