//! Mending the full-text index from the log when a sequencing process
//! opens the store: what a crash left queued is indexed, erasures at or
//! above the recorded progress applied, an index of another history or of
//! a dropped org forgotten (the rules are in `fulltext_index.rs`).

use super::fulltext_index::mark;
use super::tree::{DbTree, log_size_of};
use crate::engine::org_range;
use crate::{DbContext, StoreError};
use cairn_core::Hash;
use rusqlite::{Connection, OptionalExtension as _, params};

/// Brings the index up to the log: drops the orgs the log lacks; per org,
/// starts again from its first step if the recorded root is not the log's
/// at the recorded size, deletes the steps that erasure records at or above
/// its indexed size name, then indexes the steps at or above it.
pub(super) fn catch_up(index: &mut Connection, ledger: &Connection) -> Result<(), StoreError> {
    let orgs: Vec<i64> = ledger
        .prepare("SELECT org FROM orgs")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .context("listing orgs")?;
    let known: Vec<i64> = index
        .prepare("SELECT org FROM fulltext_progress")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .context("reading the full-text index's progress")?;
    for org in known.into_iter().filter(|org| !orgs.contains(org)) {
        forget_org(index, org)?;
    }
    for org in orgs {
        let recorded: Option<(i64, Vec<u8>)> = index
            .query_row(
                "SELECT indexed_below, root FROM fulltext_progress WHERE org = ?1",
                [org],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .context("reading the full-text index's progress")?;
        let size = log_size_of(ledger, org)?;
        let tree = DbTree {
            conn: ledger,
            org,
            size,
        };
        let below = match recorded {
            Some((below, root))
                if (0..=size as i64).contains(&below)
                    && root_at(&tree, below as u64)?.0[..] == root[..] =>
            {
                below
            }
            // Another history, or nothing recorded: whatever the index
            // holds of the org cannot be trusted.
            _ => {
                forget_org(index, org)?;
                0
            }
        };
        if below as u64 == size {
            continue;
        }
        let (lo, hi) = org_range(org);
        let tx = index
            .transaction()
            .context("starting to mend the full-text index")?;
        {
            let mut erased = ledger
                .prepare(
                    "SELECT s.id FROM entries x JOIN entries s
                       ON s.org = x.org AND s.trace_id = json_extract(x.view, '$.trace_id')
                     WHERE x.org = ?1 AND x.type = 'erasure' AND x.id >= ?2 AND x.id < ?3",
                )
                .context("reading erasures for the full-text index")?;
            let ids = erased
                .query_map(params![org, lo + below, hi], |r| r.get::<_, i64>(0))
                .context("reading erasures for the full-text index")?;
            let mut delete = tx
                .prepare("DELETE FROM steps_fts WHERE rowid = ?1")
                .context("mending the full-text index")?;
            for id in ids {
                let id = id.context("reading erasures for the full-text index")?;
                delete
                    .execute([id])
                    .context("mending the full-text index")?;
            }
            index_steps(
                ledger,
                &tx,
                "SELECT e.id, e.content, e.input_data, e.output_data, e.metadata FROM entries e
                 WHERE e.id >= ?1 AND e.id < ?2 AND e.type = 'step' AND e.erased = 0",
                params![lo + below, hi],
            )?;
            mark(&tx, org, size, &root_at(&tree, size)?)?;
        }
        tx.commit().context("mending the full-text index")?;
    }
    Ok(())
}

/// The org log's root at `size`, from the stored tree.
fn root_at(tree: &DbTree<'_>, size: u64) -> Result<Hash, StoreError> {
    cairn_core::merkle::range_hash(tree, 0, size)
}

/// Deletes an org's documents and progress.
fn forget_org(index: &Connection, org: i64) -> Result<(), StoreError> {
    let (lo, hi) = org_range(org);
    index
        .execute(
            "DELETE FROM steps_fts WHERE rowid >= ?1 AND rowid < ?2",
            params![lo, hi],
        )
        .and_then(|_| index.execute("DELETE FROM fulltext_progress WHERE org = ?1", [org]))
        .context("dropping an org's documents from the full-text index")?;
    Ok(())
}

/// Indexes the steps `select` (run on the ledger) returns (`id, content,
/// input_data, output_data, metadata`).
fn index_steps(
    ledger: &Connection,
    index: &Connection,
    select: &str,
    select_params: impl rusqlite::Params,
) -> Result<(), StoreError> {
    let mut read = ledger
        .prepare(select)
        .context("reading steps for the full-text index")?;
    let mut rows = read
        .query(select_params)
        .context("reading steps for the full-text index")?;
    let mut insert = index
        .prepare("INSERT OR REPLACE INTO steps_fts (rowid, doc) VALUES (?1, ?2)")
        .context("indexing steps for full-text search")?;
    let column = "reading steps for the full-text index";
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
        }
    }
    Ok(())
}
