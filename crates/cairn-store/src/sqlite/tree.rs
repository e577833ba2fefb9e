//! The embedded store's Merkle tree as stored: subtree hashes read from
//! `entries` and `nodes` for proofs, roots and frontiers, the log's size,
//! and its signed checkpoints. The engine writes the tree; this is how it
//! is read back.

use super::SqliteStore;
use crate::engine::{MAX_NODE_LEVEL, NODE_STRIDE, blob_hash, misplaced_node, org_range, row_id};
use crate::stored::CheckpointPage;
use crate::{DbContext, StoreError, StoredCheckpoint, StoredNode, TreeRowsRewritten};
use cairn_core::merkle::{Frontier, SubtreeHashes, range_hash};
use cairn_core::{Hash, Timestamp};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, params};

/// Size of an org's log, from its largest rowid.
pub(super) fn log_size_of(conn: &Connection, org: i64) -> Result<u64, StoreError> {
    let (lo, hi) = org_range(org);
    let max: Option<i64> = conn
        .prepare_cached("SELECT MAX(id) FROM entries WHERE id >= ?1 AND id < ?2")
        .and_then(|mut s| s.query_row(params![lo, hi], |r| r.get(0)))
        .context("reading the log size")?;
    Ok(max.map_or(0, |id| (id - lo) as u64 + 1))
}

/// Reads perfect-subtree hashes of one org's log from the tables: a
/// subtree at level `l` is folded from at most 16 hashes stored at the
/// level `l - l % 4` below it, read in one range query (as the PostgreSQL
/// backend does), rather than one point query per leaf or node.
pub(super) struct DbTree<'c> {
    pub(super) conn: &'c Connection,
    pub(super) org: i64,
    pub(super) size: u64,
}

impl SubtreeHashes for DbTree<'_> {
    type Error = StoreError;

    fn size(&self) -> u64 {
        self.size
    }

    fn subtree(&self, level: u32, index: u64) -> Result<Hash, StoreError> {
        crate::engine::stored_subtree(
            &mut |l, first, count| self.stored(l, first, count),
            level,
            index,
        )
    }
}

impl DbTree<'_> {
    /// The hash stored for each of the `count` indexes at `level` from
    /// `first` (level 0: the leaves'), `None` where there is not exactly
    /// one usable one (`engine::stored_subtree` then computes it from
    /// below).
    fn stored(&self, level: u32, first: u64, count: u64) -> Result<Vec<Option<Hash>>, StoreError> {
        let end = first.saturating_add(count);
        let (Ok(from), Ok(to)) = (i64::try_from(first), i64::try_from(end)) else {
            return Ok(vec![None; count as usize]);
        };
        let rows: Vec<(i64, Option<Vec<u8>>)> = if level == 0 {
            self.conn
                .prepare_cached("SELECT id, leaf_hash FROM entries WHERE id >= ?1 AND id < ?2")
                .and_then(|mut s| {
                    s.query_map(
                        params![row_id(self.org, first), row_id(self.org, end)],
                        |r| {
                            Ok((
                                r.get::<_, i64>(0)? - row_id(self.org, 0),
                                blob_of(r.get_ref(1)?),
                            ))
                        },
                    )?
                    .collect()
                })
                .context("reading leaf hashes")?
        } else {
            // Only integer indexes: SQLite keeps any type, and a
            // fractional index lies inside the range.
            self.conn
                .prepare_cached(
                    "SELECT idx, hash FROM nodes WHERE org = ?1 AND level = ?2 AND idx >= ?3 AND idx < ?4
                       AND typeof(idx) = 'integer'",
                )
                .and_then(|mut s| {
                    s.query_map(params![self.org, level, from, to], |r| {
                        Ok((r.get(0)?, blob_of(r.get_ref(1)?)))
                    })?
                    .collect()
                })
                .context("reading tree nodes")?
        };
        Ok(crate::engine::by_index(rows.into_iter(), first, count))
    }
}

/// The frontier of a stored tree: one subtree hash per set bit of its size.
pub(super) fn frontier_of(tree: &DbTree<'_>) -> Result<Frontier, StoreError> {
    let size = tree.size;
    let mut peaks = Vec::new();
    let mut start = 0u64;
    for level in (0..64u32).rev() {
        if size & (1 << level) != 0 {
            peaks.push(tree.subtree(level, start >> level)?);
            start += 1 << level;
        }
    }
    Frontier::from_parts(size, peaks).ok_or_else(|| StoreError::Corrupt("frontier rebuild".into()))
}

pub(super) fn latest_checkpoint(
    conn: &Connection,
    org: i64,
    name: &str,
) -> Result<Option<StoredCheckpoint>, StoreError> {
    let row: Option<(i64, Vec<u8>, String, i64)> = conn
        .prepare_cached("SELECT size, root, note, created_at FROM checkpoints WHERE org = ?1 ORDER BY size DESC LIMIT 1")
        .and_then(|mut s| {
            s.query_row([org], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .optional()
        })
        .context("reading the latest checkpoint")?;
    row.map(|(size, root, note, created)| {
        Ok(StoredCheckpoint {
            org_id: name.to_owned(),
            size: size as u64,
            root: blob_hash(root)?,
            note,
            created_at: Timestamp::from_micros(created).unwrap_or_default(),
        })
    })
    .transpose()
}

impl SqliteStore {
    /// Runs a proof computation over an org's stored tree.
    pub(super) fn with_tree<T>(
        &self,
        org_id: &str,
        prove: impl FnOnce(&DbTree<'_>) -> Result<T, cairn_core::merkle::ProofError<StoreError>>,
    ) -> Result<T, StoreError> {
        self.read(|c| {
            let org = Self::org_id_of(c, org_id)?
                .ok_or_else(|| StoreError::NotFound(format!("org {org_id} has no log")))?;
            let tree = DbTree {
                conn: c,
                org,
                size: log_size_of(c, org)?,
            };
            prove(&tree).map_err(|e| match e {
                cairn_core::merkle::ProofError::Read(e) => e,
                cairn_core::merkle::ProofError::OutOfRange(m) => StoreError::NotFound(m),
            })
        })
    }

    /// Every checkpoint, oldest first; or the `newest` latest, newest
    /// first.
    pub(super) fn checkpoints_in(
        &self,
        org_id: &str,
        page: CheckpointPage,
    ) -> Result<Vec<StoredCheckpoint>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            let (sql, from, limit) = match page {
                CheckpointPage::All => ("ORDER BY size LIMIT ?3", 0, -1),
                CheckpointPage::From(from, limit) => {
                    ("ORDER BY size LIMIT ?3", from, i64::from(limit))
                }
                CheckpointPage::Newest(limit) => ("ORDER BY size DESC LIMIT ?3", 0, i64::from(limit)),
            };
            let mut stmt = c
                .prepare_cached(&format!(
                    "SELECT size, root, note, created_at FROM checkpoints WHERE org = ?1 AND size >= ?2 {sql}"
                ))
                .context("listing checkpoints")?;
            // Sizes are below 2^40 (a row id's share); a larger start
            // selects nothing.
            let from = i64::try_from(from).unwrap_or(i64::MAX);
            let rows = stmt
                .query_map(rusqlite::params![org, from, limit], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, Vec<u8>>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                })
                .context("listing checkpoints")?;
            let mut out = Vec::new();
            for row in rows {
                let (size, root, note, created) = row.context("listing checkpoints")?;
                out.push(StoredCheckpoint {
                    org_id: org_id.to_owned(),
                    size: size as u64,
                    root: blob_hash(root)?,
                    note,
                    created_at: Timestamp::from_micros(created).unwrap_or_default(),
                });
            }
            Ok(out)
        })
    }

    pub(super) fn root_at_in(&self, org_id: &str, size: u64) -> Result<Hash, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(cairn_core::merkle::empty_root());
            };
            let tree = DbTree { conn: c, org, size };
            range_hash(&tree, 0, size)
        })
    }

    pub(super) fn tree_nodes_in(
        &self,
        org_id: &str,
        level: u32,
        from_index: u64,
        limit: u32,
    ) -> Result<Vec<StoredNode>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            // Indexes are below 2^40; a larger start selects nothing.
            let from = i64::try_from(from_index).unwrap_or(i64::MAX);
            // Integer indexes only, as `DbTree` reads them (a row of any
            // other type is `tree_node_anomaly`'s); a hash that is not a
            // blob (which readers do not fold) is read as none, so that
            // verification names it instead of failing to read it.
            c.prepare_cached(
                "SELECT idx, count(*), min(hash) FROM nodes
                 WHERE org = ?1 AND level = ?2 AND idx >= ?3 AND typeof(idx) = 'integer'
                 GROUP BY idx ORDER BY idx LIMIT ?4",
            )
            .and_then(|mut s| {
                s.query_map(params![org, level, from, limit], |r| {
                    Ok(StoredNode {
                        index: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(u64::MAX),
                        rows: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                        hash: blob_of(r.get_ref(2)?),
                    })
                })?
                .collect()
            })
            .context("reading tree nodes")
        })
    }

    pub(super) fn tree_node_anomaly_in(&self, org_id: &str) -> Result<Option<String>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(None);
            };
            // A row no reader can use: not a 32-byte hash, or at a
            // position no append writes (a level other than 4, 8, ... 40,
            // a negative index).
            c.prepare_cached(
                "SELECT quote(level), quote(idx), typeof(hash), length(hash),
                   typeof(level) = 'integer' AND typeof(idx) = 'integer',
                   typeof(hash) = 'blob' AND length(hash) = 32
                 FROM nodes
                 WHERE org = ?1 AND (typeof(level) != 'integer' OR typeof(idx) != 'integer'
                   OR typeof(hash) != 'blob' OR length(hash) != 32
                   OR level < ?2 OR level > ?3 OR level % ?2 != 0 OR idx < 0)
                 LIMIT 1",
            )
            .and_then(|mut s| {
                s.query_row(params![org, NODE_STRIDE, MAX_NODE_LEVEL], |r| {
                    let (level, idx) = (r.get::<_, String>(0)?, r.get::<_, String>(1)?);
                    let (whole_numbers, hash) = (r.get::<_, bool>(4)?, r.get::<_, bool>(5)?);
                    Ok(if whole_numbers && hash {
                        misplaced_node(&level, &idx)
                    } else if hash {
                        format!(
                            "the stored tree holds a row at level {level}, index {idx}: a level and index that are not both integers, which no reader can use"
                        )
                    } else {
                        format!(
                            "the stored tree holds a row at level {level}, index {idx} whose hash is {} ({} bytes): no reader can use it",
                            r.get::<_, String>(2)?,
                            r.get::<_, Option<i64>>(3)?.unwrap_or(0),
                        )
                    })
                })
                .optional()
            })
            .context("reading tree nodes")
        })
    }
}

/// A stored hash's bytes if it is a blob (readers take nothing else).
fn blob_of(value: ValueRef<'_>) -> Option<Vec<u8>> {
    match value {
        ValueRef::Blob(b) => Some(b.to_vec()),
        _ => None,
    }
}

impl SqliteStore {
    pub(super) fn rewrite_tree_nodes_in(
        &self,
        org_id: &str,
        rebuilt: &[(u32, u64, Hash)],
    ) -> Result<TreeRowsRewritten, StoreError> {
        const WHAT: &str = "repairing the stored tree";
        if self.read_only {
            return Err(StoreError::ReadOnly(
                "the stored tree is rewritten by the process that sequences the store: stop `cairn serve` and run the repair alone".into(),
            ));
        }
        // This process is the store's only writer (the data directory's
        // lock), and holding the writer keeps the sequencer's batches out
        // until the rows are rewritten. The rows are rewritten on a
        // connection of their own: Cairn's connections refuse DROP, and
        // the append-only triggers are dropped for the transaction. A
        // store whose state could not be loaded is repaired too: its rows
        // may be why.
        let _writer = self
            .writer
            .lock()
            .map_err(|_| super::connection::poisoned())?;
        let conn = Connection::open(&self.path).context(WHAT)?;
        super::connection::configure(&conn)?;
        let tx = conn.unchecked_transaction().context(WHAT)?;
        let Some(org) = Self::org_id_of(&tx, org_id)? else {
            return Ok(TreeRowsRewritten::default());
        };
        let size = i64::try_from(log_size_of(&tx, org)?).unwrap_or(i64::MAX);
        // The append-only triggers of `nodes`, lifted for this
        // transaction: a rollback (any error below) restores them.
        let triggers: Vec<(String, String)> = tx
            .prepare("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND lower(tbl_name) = 'nodes' AND sql IS NOT NULL")
            .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
            .context(WHAT)?;
        for (name, _) in &triggers {
            tx.execute_batch(&format!("DROP TRIGGER \"{}\"", name.replace('"', "\"\"")))
                .context(WHAT)?;
        }
        let mut rewritten = TreeRowsRewritten {
            // What no reader can use (as `tree_node_anomaly` finds it),
            // and subtrees ending past the log.
            unusable: tx
                .execute(
                    "DELETE FROM nodes WHERE org = ?1 AND (
                       typeof(level) != 'integer' OR typeof(idx) != 'integer'
                       OR typeof(hash) != 'blob' OR length(hash) != 32
                       OR level < ?2 OR level > ?3 OR level % ?2 != 0 OR idx < 0
                       OR idx >= (?4 >> level))",
                    params![org, NODE_STRIDE, MAX_NODE_LEVEL, size],
                )
                .context(WHAT)? as u64,
            ..TreeRowsRewritten::default()
        };
        {
            // A key held by more than one row (the table rebuilt without
            // its key) is rewritten as one.
            let mut differing = tx
                .prepare(
                    "DELETE FROM nodes WHERE org = ?1 AND level = ?2 AND idx = ?3 AND (hash IS NOT ?4
                       OR (SELECT count(*) FROM nodes WHERE org = ?1 AND level = ?2 AND idx = ?3) > 1)",
                )
                .context(WHAT)?;
            let mut missing = tx
                .prepare(
                    "INSERT INTO nodes (org, level, idx, hash) SELECT ?1, ?2, ?3, ?4
                     WHERE NOT EXISTS (SELECT 1 FROM nodes WHERE org = ?1 AND level = ?2 AND idx = ?3)",
                )
                .context(WHAT)?;
            for (level, index, hash) in rebuilt {
                let index = i64::try_from(*index).unwrap_or(i64::MAX);
                let row = params![org, level, index, &hash.0[..]];
                let removed = differing.execute(row).context(WHAT)?;
                if missing.execute(row).context(WHAT)? > 0 {
                    if removed > 0 {
                        rewritten.replaced += 1;
                    } else {
                        rewritten.missing += 1;
                    }
                }
            }
        }
        for (_, sql) in &triggers {
            tx.execute_batch(sql).context(WHAT)?;
        }
        tx.commit().context(WHAT)?;
        Ok(rewritten)
    }
}
