//! The embedded store's full-text index is written in bulk, not in each
//! batch's transaction: FTS5 costs far less per document in transactions
//! of thousands than of tens (its segments are written and merged per
//! transaction), and it was the largest part of an append.
//!
//! A batch leaves its steps' documents in memory; they become pending
//! when the batch commits and are written to `steps_fts` in one
//! transaction when the store's periodic work runs (every tick, about
//! 250 ms), when too many are pending, and before this process answers a
//! full-text search (so the server always finds what it acknowledged).
//! Each flush records, per org, the log size below which every step is
//! indexed (`fulltext_progress`); a sequencing process that opens the store
//! indexes the steps at and above it that the index lacks (what a crash
//! left pending). A process that opened the store to read beside the
//! sequencing one sees a step in full-text search a tick after it was
//! acknowledged.

use super::{SqliteStore, log_size_of};
use crate::engine::org_range;
use crate::{DbContext, StoreError};
use rusqlite::{Connection, OptionalExtension as _, params};
use std::collections::{BTreeSet, HashMap};

/// Pending documents that make the next batch flush first (memory bound).
const FLUSH_DOCS: usize = 8192;
/// ... or pending bytes.
const FLUSH_BYTES: usize = 16 << 20;

/// Documents on their way to `steps_fts`.
#[derive(Default)]
pub(super) struct FullTextQueue {
    /// Documents of committed steps, by row id.
    pending: Vec<(i64, String)>,
    pending_bytes: usize,
    /// Documents of the batch being written.
    batch: Vec<(i64, String)>,
    /// Rows the batch being written erased.
    erased: Vec<i64>,
}

impl FullTextQueue {
    /// Starts a batch: whatever a failed batch left is forgotten.
    pub(super) fn begin_batch(&mut self) {
        self.batch.clear();
        self.erased.clear();
    }

    /// A document written by the batch.
    pub(super) fn add(&mut self, id: i64, doc: &str) {
        self.batch.push((id, doc.to_owned()));
    }

    /// A step the batch erased: its document must never be indexed (if it
    /// already is, the batch deletes it from the index itself).
    pub(super) fn erase(&mut self, id: i64) {
        self.batch.retain(|(row, _)| *row != id);
        self.erased.push(id);
    }

    /// The batch committed.
    pub(super) fn commit_batch(&mut self) {
        if !self.erased.is_empty() {
            let erased: BTreeSet<i64> = self.erased.drain(..).collect();
            self.pending.retain(|(row, _)| !erased.contains(row));
            self.pending_bytes = self.pending.iter().map(|(_, d)| d.len()).sum();
        }
        self.pending_bytes += self.batch.iter().map(|(_, d)| d.len()).sum::<usize>();
        self.pending.append(&mut self.batch);
    }

    /// Whether the pending documents should be written before more come.
    pub(super) fn full(&self) -> bool {
        self.pending.len() >= FLUSH_DOCS || self.pending_bytes >= FLUSH_BYTES
    }

    /// Writes every pending document in one transaction, with each
    /// concerned org's indexed size (`sizes`: the committed log size of
    /// each org by id).
    pub(super) fn flush(
        &mut self,
        conn: &Connection,
        sizes: &HashMap<i64, u64>,
    ) -> Result<(), StoreError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let tx = conn
            .unchecked_transaction()
            .context("starting to index steps for full-text search")?;
        {
            let mut insert = tx
                .prepare_cached("INSERT INTO steps_fts (rowid, doc) VALUES (?1, ?2)")
                .context("indexing steps for full-text search")?;
            for (id, doc) in &self.pending {
                insert
                    .execute(params![id, doc])
                    .context("indexing steps for full-text search")?;
            }
            let orgs: BTreeSet<i64> = self.pending.iter().map(|(id, _)| id >> 40).collect();
            let mut mark = tx
                .prepare_cached(
                    "INSERT INTO fulltext_progress (org, indexed_below) VALUES (?1, ?2)
                     ON CONFLICT (org) DO UPDATE SET indexed_below = excluded.indexed_below",
                )
                .context("recording the full-text index's progress")?;
            for org in orgs {
                if let Some(size) = sizes.get(&org) {
                    mark.execute(params![org, *size as i64])
                        .context("recording the full-text index's progress")?;
                }
            }
        }
        tx.commit()
            .context("committing the full-text index's documents")?;
        self.pending.clear();
        self.pending_bytes = 0;
        Ok(())
    }
}

/// Run in the opening transaction of a sequencing process: a store written
/// before `fulltext_progress` existed had every step indexed in its own
/// batch, so each org starts indexed to its size; then the steps a crash
/// left pending (at or above an org's indexed size, not in the index) are
/// indexed.
pub(super) fn catch_up(tx: &Connection) -> Result<(), StoreError> {
    let recorded: Option<String> = tx
        .query_row(
            "SELECT value FROM meta WHERE key = 'fulltext_progress'",
            [],
            |r| r.get(0),
        )
        .optional()
        .context("reading the full-text index state")?;
    let orgs: Vec<i64> = tx
        .prepare("SELECT org FROM orgs")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .context("listing orgs")?;
    if recorded.is_none() {
        for &org in &orgs {
            tx.execute(
                "INSERT OR IGNORE INTO fulltext_progress (org, indexed_below) VALUES (?1, ?2)",
                params![org, log_size_of(tx, org)? as i64],
            )
            .context("recording the full-text index's progress")?;
        }
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('fulltext_progress', '1')",
            [],
        )
        .context("recording the full-text index state")?;
        return Ok(());
    }
    for org in orgs {
        let below: i64 = tx
            .query_row(
                "SELECT indexed_below FROM fulltext_progress WHERE org = ?1",
                [org],
                |r| r.get(0),
            )
            .optional()
            .context("reading the full-text index's progress")?
            .unwrap_or(0);
        let (lo, hi) = org_range(org);
        let from = lo + below;
        super::index_steps(
            tx,
            "SELECT e.id, e.content, e.input_data, e.output_data, e.metadata FROM entries e
             WHERE e.id >= ?1 AND e.id < ?2 AND e.type = 'step' AND e.erased = 0
               AND NOT EXISTS (SELECT 1 FROM steps_fts_docsize d WHERE d.id = e.id)",
            params![from, hi],
        )?;
        tx.execute(
            "INSERT INTO fulltext_progress (org, indexed_below) VALUES (?1, ?2)
             ON CONFLICT (org) DO UPDATE SET indexed_below = excluded.indexed_below",
            params![org, log_size_of(tx, org)? as i64],
        )
        .context("recording the full-text index's progress")?;
    }
    Ok(())
}

impl SqliteStore {
    /// Writes the pending documents now (before a search, so that this
    /// process finds every step it acknowledged). Nothing to do in a
    /// process that opened the store to read.
    pub(super) fn flush_fulltext(&self) -> Result<(), StoreError> {
        self.with_sound_writer(|w| w.flush_fulltext())
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // A clean close indexes what is pending (a crash leaves it to the
        // next sequencing open).
        let _ = self.flush_fulltext();
    }
}
