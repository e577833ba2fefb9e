//! The full-text index's file (`fulltext.db`): where it lives, its
//! schema, how its writing connection is opened, and the one transaction
//! that writes documents with each org's progress. The queue, the thread
//! and the rules of what is written when are in `fulltext_index.rs`.

use super::connection::restrict_file;
use super::fulltext_merge::{configure as configure_merges, set_thresholds};
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

/// The file's own tables. Each org's documents are in a table of its own
/// ([`table`]), created with its first document.
const SCHEMA: &str = "
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

/// The name of org `org`'s table of documents (rowids are the entries'
/// ids, as in the log).
pub(super) use crate::fulltext::fts5_table as table;

/// The org whose table holds the document of the entry with id `id`
/// (the id's high bits, as `engine::org_range` lays them out).
pub(super) fn org_of(id: i64) -> i64 {
    id >> 40
}

/// Whether org `org`'s table exists in the schema `schema` of `conn`
/// (`main` on the index's writing connection, [`ATTACHED_AS`] on a
/// reading one): an org none of whose steps was ever indexed has none.
pub(super) fn has_table(conn: &Connection, schema: &str, org: i64) -> Result<bool, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT EXISTS (SELECT 1 FROM {schema}.sqlite_schema WHERE type = 'table' AND name = ?1)"
    ))
    .and_then(|mut s| s.query_row([table(org).trim_matches('"')], |r| r.get(0)))
    .context("looking for an org's full-text documents")
}

/// Creates org `org`'s table if it has none yet, with the index's merge
/// settings.
pub(super) fn ensure_table(conn: &Connection, org: i64) -> Result<(), StoreError> {
    if has_table(conn, "main", org)? {
        return Ok(());
    }
    conn.execute_batch(&format!(
        "CREATE VIRTUAL TABLE IF NOT EXISTS {} USING fts5(
           doc, tokenize = 'porter unicode61 remove_diacritics 2', content = '', contentless_delete = 1
         );",
        table(org)
    ))
    .context("creating an org's full-text documents")?;
    // Within the caller's write transaction, which holds the file's lock.
    set_thresholds(conn, org).context("setting an org's full-text merge thresholds")?;
    Ok(())
}

/// The orgs that have a table of documents in the index's file.
pub(super) fn orgs_with_tables(conn: &Connection) -> Result<Vec<i64>, StoreError> {
    let names: Vec<String> = conn
        .prepare_cached(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name GLOB 'steps_fts_[0-9]*'
               AND sql LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name",
        )
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .context("listing the full-text index's tables")?;
    Ok(names
        .iter()
        .filter_map(|name| name.strip_prefix("steps_fts_")?.parse().ok())
        .collect())
}

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
    drop_shared_table(&conn)?;
    conn.execute_batch(SCHEMA)
        .context("creating the full-text index")?;
    for org in orgs_with_tables(&conn)? {
        configure_merges(&conn, org);
    }
    Ok(conn)
}

/// Removes the one table of every org's documents that versions before
/// the tables per org ([`table`]) wrote, with every org's progress: the
/// sequencing open then indexes each org again from its log, in the
/// background (OPERATIONS.md, "Search").
fn drop_shared_table(conn: &Connection) -> Result<(), StoreError> {
    let shared: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'steps_fts')",
            [],
            |r| r.get(0),
        )
        .context("looking for an older full-text index")?;
    if shared {
        conn.execute_batch(
            "BEGIN IMMEDIATE;
             DROP TABLE steps_fts;
             DROP TABLE IF EXISTS fulltext_progress;
             DROP TABLE IF EXISTS fulltext_forgetting;
             COMMIT;",
        )
        .context("dropping an older full-text index (one table for every org)")?;
    }
    Ok(())
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
    let tx = write_transaction(conn).context("starting to index steps for full-text search")?;
    {
        // Sorted by id, so each org's documents come together.
        for org_docs in docs.chunk_by(|a, b| org_of(a.0) == org_of(b.0)) {
            insert_documents(&tx, org_docs.iter().map(|(id, doc)| (*id, doc.as_str())))?;
        }
        for (org, (size, root)) in sizes {
            mark(&tx, *org, *size, root)?;
        }
    }
    tx.commit()
        .context("committing the full-text index's documents")
}

/// A write transaction of the index's file, begun `IMMEDIATE`: it takes
/// the file's write lock at once, waiting for it within the connection's
/// busy timeout. (A deferred transaction that read first, as the lookup
/// of an org's table does, and then wrote while another connection held
/// the lock was refused at once, `SQLITE_BUSY`, without waiting.)
pub(super) fn write_transaction(conn: &Connection) -> rusqlite::Result<rusqlite::Transaction<'_>> {
    rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)
}

/// Writes documents (entry id, text) of one org into its table, creating
/// the table first if need be.
pub(super) fn insert_documents<'a>(
    conn: &Connection,
    mut docs: impl Iterator<Item = (i64, &'a str)>,
) -> Result<(), StoreError> {
    let Some((first, doc)) = docs.next() else {
        return Ok(());
    };
    let org = org_of(first);
    ensure_table(conn, org)?;
    let mut insert = conn
        .prepare_cached(&format!(
            "INSERT OR REPLACE INTO {} (rowid, doc) VALUES (?1, ?2)",
            table(org)
        ))
        .context("indexing steps for full-text search")?;
    for (id, doc) in std::iter::once((first, doc)).chain(docs) {
        debug_assert_eq!(org_of(id), org);
        insert
            .execute(params![id, doc])
            .context("indexing steps for full-text search")?;
    }
    Ok(())
}

/// Deletes the documents of the entries `ids` (of any orgs), if indexed.
/// Writes without reading first: in a deferred transaction (the
/// sequencing open's mending) a read would begin a read transaction, and
/// its write would then be refused at once, without the busy timeout's
/// wait, if another connection held the file's lock; an org with no
/// table is SQLite's "no such table", which means nothing to delete.
pub(super) fn delete_documents(
    conn: &Connection,
    ids: impl IntoIterator<Item = i64>,
) -> Result<(), StoreError> {
    for id in ids {
        let org = org_of(id);
        match conn
            .prepare_cached(&format!("DELETE FROM {} WHERE rowid = ?1", table(org)))
            .and_then(|mut s| s.execute([id]))
        {
            Ok(_) => {}
            Err(rusqlite::Error::SqliteFailure(_, Some(message)))
                if message.starts_with("no such table") => {}
            Err(e) => {
                return Err(e).context("deleting an erased step's full-text document");
            }
        }
    }
    Ok(())
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
