//! Mending the full-text index from the log when a sequencing process
//! opens the store: erasures at or above the recorded progress applied at
//! open; an org's documents of another history (or of an org the log
//! lacks) marked to be forgotten at open and deleted by the index's
//! thread, a chunk at a time; what a crash left queued (or a whole missing
//! index) indexed from the log by the same thread, a chunk at a time (the
//! rules are in `fulltext_index.rs`).

use super::fulltext_file::{
    delete_documents, ensure_table, has_table, mark, org_of, table, write_transaction,
};
use super::fulltext_queue::CHUNK_BYTES;
use super::tree::{DbTree, log_size_of};
use crate::engine::org_range;
use crate::{DbContext, StoreError};
use cairn_core::Hash;
use rusqlite::{Connection, OptionalExtension as _, params};
use std::collections::{BTreeMap, BTreeSet};

/// Brings the index's bookkeeping up to the log when a sequencing process
/// opens the store, and says what is left to do: an org the log lacks, or
/// whose recorded root is not the log's at the recorded size (an index of
/// another history: `ledger.db` restored beside a newer `fulltext.db`), or
/// with no progress recorded, is marked to be forgotten (its progress
/// dropped; its documents are deleted by the index's thread before it is
/// indexed again from its first step: deleting them here made opening a
/// large store linear in its documents); for the others, the steps that
/// erasure records at or above the indexed size name are deleted. Returns,
/// per org to forget or whose log holds steps at or above its indexed
/// size, that size and the log size to index up to: the index's thread
/// does the rest ([`index_chunk`]), so that opening the store never waits
/// for it (a missing `fulltext.db` beside a large log is rebuilt in the
/// background).
pub(super) fn plan_catch_up(
    index: &mut Connection,
    ledger: &Connection,
) -> Result<BTreeMap<i64, (u64, u64)>, StoreError> {
    let orgs: Vec<i64> = ledger
        .prepare("SELECT org FROM orgs")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .context("listing orgs")?;
    let known: Vec<i64> = index
        .prepare("SELECT org FROM fulltext_progress")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .context("reading the full-text index's progress")?;
    // Marked by an earlier open whose thread did not finish forgetting.
    let mut forgetting: BTreeSet<i64> = index
        .prepare("SELECT org FROM fulltext_forgetting")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .context("reading the full-text index's progress")?;
    forgetting.extend(known.into_iter().filter(|org| !orgs.contains(org)));
    let mut targets = BTreeMap::new();
    let mut sizes = Vec::with_capacity(orgs.len());
    for &org in &orgs {
        let size = log_size_of(ledger, org)?;
        let tree = DbTree {
            conn: ledger,
            org,
            size,
        };
        match indexed_below(index, org)? {
            Some((below, root))
                if !forgetting.contains(&org)
                    && below <= size
                    && root_at(&tree, below)?.0[..] == root[..] =>
            {
                sizes.push((org, below, size));
            }
            // Another history, or nothing recorded: whatever the index
            // holds of the org cannot be trusted.
            _ => {
                forgetting.insert(org);
                targets.insert(org, (0, size));
            }
        }
    }
    // Deferred: an open with nothing to mend takes no lock (a file whose
    // lock another program holds is mended by a later open).
    let tx = index
        .transaction()
        .context("starting to mend the full-text index")?;
    for &org in &forgetting {
        mark_forgotten(&tx, org)?;
        targets.entry(org).or_insert((0, 0));
    }
    for (org, below, size) in sizes {
        if below == size {
            continue;
        }
        let (lo, hi) = org_range(org);
        delete_erased(ledger, &tx, org, lo + below as i64, hi)?;
        targets.insert(org, (below, size));
    }
    tx.commit().context("mending the full-text index")?;
    Ok(targets)
}

/// Documents deleted per transaction while forgetting an org: about
/// 0.15 s of the index's connection each. Fewer per transaction made FTS5
/// merge its segments far more often (4,096: 2.2 s for 100,000 documents
/// against 0.45 s, which is what deleting them all at once takes).
const FORGET_DOCS: usize = if cfg!(test) { 1000 } else { 32_768 };

/// Marks an org's documents to be forgotten and drops its progress, so
/// that no process trusts them meanwhile ([`forgetting`]).
fn mark_forgotten(index: &Connection, org: i64) -> Result<(), StoreError> {
    index
        .execute(
            "INSERT OR IGNORE INTO fulltext_forgetting (org, next_rowid) VALUES (?1, 0)",
            [org],
        )
        .and_then(|_| index.execute("DELETE FROM fulltext_progress WHERE org = ?1", [org]))
        .context("marking an org's documents to be forgotten")?;
    Ok(())
}

/// Whether an org's documents are being forgotten (they belong to another
/// history of its log: no search may use them). `schema`: the name the
/// index file is known by on `conn` (`main`, or where it is attached).
pub(super) fn forgetting(conn: &Connection, schema: &str, org: i64) -> Result<bool, StoreError> {
    // A file no sequencing open of this version touched has no such table.
    let has_table: bool = conn
        .query_row(
            &format!(
                "SELECT EXISTS (SELECT 1 FROM {schema}.sqlite_master
                 WHERE type = 'table' AND name = 'fulltext_forgetting')"
            ),
            [],
            |r| r.get(0),
        )
        .context("reading the full-text index's progress")?;
    if !has_table {
        return Ok(false);
    }
    conn.prepare_cached(&format!(
        "SELECT EXISTS (SELECT 1 FROM {schema}.fulltext_forgetting WHERE org = ?1)"
    ))
    .and_then(|mut s| s.query_row([org], |r| r.get(0)))
    .context("reading the full-text index's progress")
}

/// What one call of [`index_chunk`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chunk {
    /// Deleted documents of an org being forgotten (its indexing starts
    /// once they are all gone).
    Forgot,
    /// Indexed steps: the progress it started from and the one it reached.
    Indexed { from: u64, reached: u64 },
}

/// Steps indexed from the log in one transaction of the index while it
/// catches up, at most, and documents' bytes (the queue's chunk,
/// [`CHUNK_BYTES`]): what bounds how long an erasure, a search, a close or
/// the sequencer waits for the index's connection meanwhile (documents are
/// up to 256 KB: 4,096 of them were a gigabyte of text in one transaction).
pub(super) const CATCH_UP_STEPS: u64 = 4096;

/// Indexes, in one transaction, the next steps of `org` from its recorded
/// progress up to at most [`CATCH_UP_STEPS`] more (and about
/// [`CHUNK_BYTES`] of documents) and at most `to` (a log size), and
/// records the progress with the log's root there. An org being forgotten
/// has up to [`FORGET_DOCS`] of its documents deleted instead (and its
/// mark with the last of them). `ledger`: a reading connection to the log,
/// which holds every step below `to` (they were committed before it was
/// asked).
pub(super) fn index_chunk(
    index: &Connection,
    ledger: &Connection,
    org: i64,
    to: u64,
) -> Result<Chunk, StoreError> {
    let (lo, hi) = org_range(org);
    // An org being forgotten carries the cursor its deletion reached:
    // each chunk seeks past the documents already deleted.
    let cursor: Option<i64> = index
        .prepare_cached("SELECT next_rowid FROM fulltext_forgetting WHERE org = ?1")
        .and_then(|mut s| s.query_row([org], |r| r.get(0)).optional())
        .context("reading the full-text index's progress")?;
    if let Some(from) = cursor {
        let tx = write_transaction(index).context("starting to mend the full-text index")?;
        let table = table(org);
        let indexed = has_table(&tx, "main", org)?;
        let forget = |e| StoreError::Database {
            context: "forgetting an org's documents in the full-text index".into(),
            source: e,
        };
        // The last of the next FORGET_DOCS documents from the cursor (an
        // org with no table has none).
        let last: Option<i64> = if indexed {
            tx.prepare_cached(&format!(
                "SELECT max(rowid) FROM (SELECT rowid FROM {table}
                 WHERE rowid >= ?1 AND rowid < ?2 ORDER BY rowid LIMIT ?3)"
            ))
            .and_then(|mut s| {
                s.query_row(params![from.max(lo), hi, FORGET_DOCS as i64], |r| r.get(0))
            })
            .map_err(forget)?
        } else {
            None
        };
        match last {
            Some(last) => {
                tx.execute(
                    &format!("DELETE FROM {table} WHERE rowid >= ?1 AND rowid <= ?2"),
                    params![from.max(lo), last],
                )
                .and_then(|_| {
                    tx.execute(
                        "UPDATE fulltext_forgetting SET next_rowid = ?2 WHERE org = ?1",
                        params![org, last + 1],
                    )
                })
                .map_err(forget)?;
            }
            None => {
                tx.execute("DELETE FROM fulltext_forgetting WHERE org = ?1", [org])
                    .map_err(forget)?;
            }
        }
        tx.commit().context("mending the full-text index")?;
        return Ok(Chunk::Forgot);
    }
    let below = indexed_below(index, org)?.map_or(0, |(below, _)| below);
    if below >= to {
        return Ok(Chunk::Indexed {
            from: below,
            reached: below,
        });
    }
    let tx = write_transaction(index).context("starting to mend the full-text index")?;
    let last = to.min(below + CATCH_UP_STEPS);
    // Where the bytes' bound cut the chunk short: just past the step that
    // reached it (every step below is indexed or erased).
    let end = index_steps(
        ledger,
        &tx,
        lo + below as i64,
        lo + last as i64,
        CHUNK_BYTES,
    )?
    .map_or(last, |reached| (reached - lo) as u64 + 1);
    // The progress this chunk records passes the erasure records in it:
    // their steps' documents (indexed by an earlier chunk, or before) go
    // in the same transaction, or a crash could keep the progress and
    // lose the deletion that the erasing batch made meanwhile. (A step
    // such a record names was erased in the record's batch, committed
    // before `to` was asked: this chunk read it as erased.)
    delete_erased(ledger, &tx, org, lo + below as i64, lo + end as i64)?;
    let tree = DbTree {
        conn: ledger,
        org,
        size: end,
    };
    mark(&tx, org, end, &root_at(&tree, end)?)?;
    tx.commit().context("mending the full-text index")?;
    Ok(Chunk::Indexed {
        from: below,
        reached: end,
    })
}

/// Deletes from the index the steps that the org's erasure records with
/// entry ids in `from..to` name. (`type <> 'step'` lets SQLite read them
/// through the partial index `entries_ops`: without it, it scanned the
/// org's whole id range, every step, at each open.)
fn delete_erased(
    ledger: &Connection,
    index: &Connection,
    org: i64,
    from: i64,
    to: i64,
) -> Result<(), StoreError> {
    let mut erased = ledger
        .prepare_cached(
            "SELECT s.id FROM entries x JOIN entries s
               ON s.org = x.org AND s.trace_id = json_extract(x.view, '$.trace_id')
             WHERE x.org = ?1 AND x.type = 'erasure' AND x.type <> 'step'
               AND x.id >= ?2 AND x.id < ?3",
        )
        .context("reading erasures for the full-text index")?;
    let ids = erased
        .query_map(params![org, from, to], |r| r.get::<_, i64>(0))
        .context("reading erasures for the full-text index")?
        .collect::<Result<Vec<i64>, _>>()
        .context("reading erasures for the full-text index")?;
    delete_documents(index, ids)
}

/// An org's recorded progress: the log size below which every step is
/// indexed, and the log's root there.
fn indexed_below(index: &Connection, org: i64) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
    let recorded: Option<(i64, Vec<u8>)> = index
        .query_row(
            "SELECT indexed_below, root FROM fulltext_progress WHERE org = ?1",
            [org],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .context("reading the full-text index's progress")?;
    Ok(recorded.and_then(|(below, root)| Some((u64::try_from(below).ok()?, root))))
}

/// The org log's root at `size`, from the stored tree.
fn root_at(tree: &DbTree<'_>, size: u64) -> Result<Hash, StoreError> {
    cairn_core::merkle::range_hash(tree, 0, size)
}

/// Indexes the steps (not erased) with entry ids in `from..to`, in id
/// order, until their documents reach `max_bytes`: returns the id of the
/// step that reached it, if one did (the steps after it are left).
fn index_steps(
    ledger: &Connection,
    index: &Connection,
    from: i64,
    to: i64,
    max_bytes: usize,
) -> Result<Option<i64>, StoreError> {
    let mut read = ledger
        .prepare(
            "SELECT e.id, e.content, e.input_data, e.output_data, e.metadata FROM entries e
             WHERE e.id >= ?1 AND e.id < ?2 AND e.type = 'step' AND e.erased = 0 ORDER BY e.id",
        )
        .context("reading steps for the full-text index")?;
    let mut rows = read
        .query(params![from, to])
        .context("reading steps for the full-text index")?;
    // `from..to` is one org's range of ids.
    let org = org_of(from);
    ensure_table(index, org)?;
    let mut insert = index
        .prepare(&format!(
            "INSERT OR REPLACE INTO {} (rowid, doc) VALUES (?1, ?2)",
            table(org)
        ))
        .context("indexing steps for full-text search")?;
    let column = "reading steps for the full-text index";
    let mut bytes = 0;
    while let Some(row) = rows.next().context(column)? {
        let id: i64 = row.get(0).context(column)?;
        let text = |i: usize| row.get::<_, Option<String>>(i).context(column);
        let columns = [text(1)?, text(2)?, text(3)?, text(4)?];
        let [content, input, output, metadata] = columns.each_ref().map(Option::as_deref);
        let doc = crate::fulltext::stored_document(content, [input, output, metadata]);
        if !doc.is_empty() {
            insert
                .execute(params![id, doc])
                .context("indexing steps for full-text search")?;
            bytes += doc.len();
            if bytes >= max_bytes {
                return Ok(Some(id));
            }
        }
    }
    Ok(None)
}
