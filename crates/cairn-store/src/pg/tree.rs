//! The PostgreSQL store's Merkle tree as stored: subtree hashes read from
//! `entries` and `nodes` for proofs, roots and frontiers, the log's size,
//! and its signed checkpoints. The engine writes the tree; this is how it
//! is read back.

use super::PgStore;
use super::connection::{Db, col, i64_of, u64_of};
use crate::engine::{MAX_NODE_LEVEL, NODE_STRIDE, blob_hash, misplaced_node, org_range, row_id};
use crate::stored::CheckpointPage;
use crate::{DbContext, StoreError, StoredCheckpoint, StoredNode};
use cairn_core::merkle::{Frontier, SubtreeHashes, range_hash};
use cairn_core::{Hash, Timestamp};
use postgres::{GenericClient, Row};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

/// Reads perfect-subtree hashes of one org's log: a subtree at level `l`
/// is folded from at most 16 hashes stored at the level `l - l % 4` below
/// it, fetched in one round trip, or, for a proof, with every other
/// subtree the proof needs in one round trip ([`SubtreeHashes::prefetch`]).
pub(super) struct PgTree<'a, C: GenericClient> {
    pub(super) db: RefCell<Db<'a, C>>,
    pub(super) org: i64,
    pub(super) size: u64,
    /// Stored hashes fetched ahead, by (stored level, index); level 0 are
    /// leaf hashes.
    fetched: RefCell<HashMap<(u32, u64), Hash>>,
}

impl<'a, C: GenericClient> PgTree<'a, C> {
    pub(super) fn new(db: Db<'a, C>, org: i64, size: u64) -> PgTree<'a, C> {
        PgTree {
            db: RefCell::new(db),
            org,
            size,
            fetched: RefCell::default(),
        }
    }

    /// The stored hashes a subtree folds from: its stored level and the
    /// range of indexes at that level.
    fn stored_range(level: u32, index: u64) -> (u32, u64, u64) {
        let stored = level - level % NODE_STRIDE;
        let first = index << (level - stored);
        (stored, first, first + (1u64 << (level - stored)))
    }

    /// The hash stored for each of the `count` indexes at `level` from
    /// `first` (level 0: the leaves'), `None` where there is not exactly
    /// one usable one (`engine::stored_subtree` then computes it from
    /// below).
    fn stored(&self, level: u32, first: u64, count: u64) -> Result<Vec<Option<Hash>>, StoreError> {
        let end = first.saturating_add(count);
        let (Ok(from), Ok(to)) = (i64::try_from(first), i64::try_from(end)) else {
            return Ok(vec![None; count as usize]);
        };
        let mut db = self.db.borrow_mut();
        let rows = if level == 0 {
            db.query(
                "SELECT leaf_hash, id - $3 FROM entries WHERE id >= $1 AND id < $2",
                &[
                    &row_id(self.org, first),
                    &row_id(self.org, end),
                    &row_id(self.org, 0),
                ],
                "reading leaf hashes",
            )?
        } else {
            db.query(
                "SELECT hash, idx FROM nodes WHERE org = $1 AND level = $2 AND idx >= $3 AND idx < $4",
                &[&self.org, &(level as i32), &from, &to],
                "reading tree nodes",
            )?
        };
        let rows = rows
            .iter()
            .map(|row| Ok((col::<i64>(row, 1)?, col::<Option<Vec<u8>>>(row, 0)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(crate::engine::by_index(rows.into_iter(), first, count))
    }

    /// The stored hashes of a subtree, if every one was fetched ahead.
    fn fetched_hashes(&self, level: u32, index: u64) -> Option<Vec<Hash>> {
        let (stored, first, end) = Self::stored_range(level, index);
        let fetched = self.fetched.borrow();
        (first..end)
            .map(|i| fetched.get(&(stored, i)).copied())
            .collect()
    }
}

/// The stored node levels a tree of up to 2^64 leaves can have (4, 8, ...
/// 60; level 0 is the leaves, in `entries`).
const NODE_LEVELS: usize = 15;

/// One query for every hash a proof (or a chunk of proofs) reads: the
/// leaves by id, and the nodes by index, one branch per stored level (with
/// the level a constant in each, every branch is a lookup of the primary
/// key by `= ANY`, the plan PostgreSQL keeps whatever the arrays hold; a
/// join against ranges or `(level, idx)` pairs let it choose scans of the
/// whole table). `$1` the org, `$2` its first row id, `$3` the leaf ids,
/// `$4`.. the node indexes at levels 4, 8, ...
static PREFETCH_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let mut sql = String::from("SELECT 0, id - $2, leaf_hash FROM entries WHERE id = ANY($3)");
    for slot in 0..NODE_LEVELS {
        let level = (slot as u32 + 1) * NODE_STRIDE;
        sql.push_str(&format!(
            " UNION ALL SELECT {level}, idx, hash FROM nodes WHERE org = $1 AND level = {level} AND idx = ANY(${})",
            slot + 4
        ));
    }
    sql
});

impl<C: GenericClient> SubtreeHashes for PgTree<'_, C> {
    type Error = StoreError;

    fn size(&self) -> u64 {
        self.size
    }

    fn subtree(&self, level: u32, index: u64) -> Result<Hash, StoreError> {
        if let Some(hashes) = self.fetched_hashes(level, index) {
            return crate::engine::fold_perfect(hashes);
        }
        crate::engine::stored_subtree(
            &mut |l, first, count| self.stored(l, first, count),
            level,
            index,
        )
    }

    /// Fetches the stored hashes of every announced subtree not fetched
    /// yet, leaves and nodes, in one query. A subtree whose stored hashes
    /// are not all there (a node not written yet) is read as before.
    fn prefetch(&self, subtrees: &[(u32, u64)]) -> Result<(), StoreError> {
        // Leaf ids, and node indexes per stored level (4, 8, ... 60).
        let mut leaves: Vec<i64> = Vec::new();
        let mut nodes: Vec<Vec<i64>> = vec![Vec::new(); NODE_LEVELS];
        for &(level, index) in subtrees {
            if self.fetched_hashes(level, index).is_some() {
                continue;
            }
            let (stored, first, end) = Self::stored_range(level, index);
            if stored == 0 {
                leaves.extend((first..end).map(|i| row_id(self.org, i)));
            } else {
                let slot = (stored / NODE_STRIDE) as usize - 1;
                nodes[slot].extend((first..end).map(i64_of));
            }
        }
        if leaves.is_empty() && nodes.iter().all(Vec::is_empty) {
            return Ok(());
        }
        leaves.sort_unstable();
        leaves.dedup();
        for level in &mut nodes {
            level.sort_unstable();
            level.dedup();
        }
        let base = row_id(self.org, 0);
        let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> = vec![&self.org, &base, &leaves];
        params.extend(
            nodes
                .iter()
                .map(|n| n as &(dyn postgres::types::ToSql + Sync)),
        );
        let rows = self.db.borrow_mut().query(
            PREFETCH_SQL.as_str(),
            &params,
            "reading a proof's tree hashes",
        )?;
        let mut fetched = self.fetched.borrow_mut();
        // A node read twice (the key removed), or whose hash is not 32
        // bytes, is left out: `subtree` then reads its range, and computes
        // it from below.
        let mut read = HashSet::new();
        for row in &rows {
            let level: i32 = col(row, 0)?;
            let index: i64 = col(row, 1)?;
            let (Ok(level), Ok(index)) = (u32::try_from(level), u64::try_from(index)) else {
                return Err(StoreError::Corrupt(format!(
                    "a tree hash at level {level}, index {index}"
                )));
            };
            let key = (level, index);
            let hash = col::<Option<Vec<u8>>>(row, 2)?
                .and_then(|bytes| <[u8; 32]>::try_from(bytes.as_slice()).ok())
                .map(Hash);
            // One row per node, as `subtree` requires of a range: a second
            // row (whatever the first held) takes the node out for good.
            match hash {
                Some(hash) if read.insert(key) => {
                    fetched.insert(key, hash);
                }
                _ => {
                    read.insert(key);
                    fetched.remove(&key);
                }
            }
        }
        Ok(())
    }
}

/// The frontier of a stored tree: one subtree hash per set bit of its size.
pub(super) fn frontier_of<C: GenericClient>(tree: &PgTree<'_, C>) -> Result<Frontier, StoreError> {
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

pub(super) fn latest_checkpoint<C: GenericClient>(
    db: &mut Db<'_, C>,
    org: i64,
    name: &str,
) -> Result<Option<StoredCheckpoint>, StoreError> {
    db.query_opt(
        "SELECT size, root, note, created_at FROM checkpoints WHERE org = $1 ORDER BY size DESC LIMIT 1",
        &[&org],
        "reading the latest checkpoint",
    )?
    .map(|row| checkpoint_from_row(&row, name))
    .transpose()
}

fn checkpoint_from_row(row: &Row, name: &str) -> Result<StoredCheckpoint, StoreError> {
    Ok(StoredCheckpoint {
        org_id: name.to_owned(),
        size: u64_of(col(row, 0)?),
        root: blob_hash(col(row, 1)?)?,
        note: col(row, 2)?,
        created_at: Timestamp::from_micros(col(row, 3)?).unwrap_or_default(),
    })
}

impl PgStore {
    pub(super) fn log_size_of<C: GenericClient>(
        db: &mut Db<'_, C>,
        org: i64,
    ) -> Result<u64, StoreError> {
        let (lo, hi) = org_range(org);
        let max: Option<i64> = col(
            &db.query_one(
                "SELECT max(id) FROM entries WHERE id >= $1 AND id < $2",
                &[&lo, &hi],
                "reading the log size",
            )?,
            0,
        )?;
        Ok(max.map_or(0, |id| u64_of(id - lo) + 1))
    }

    /// Runs a proof computation over an org's stored tree.
    pub(super) fn with_tree<T>(
        &self,
        org_id: &str,
        mut prove: impl FnMut(
            &PgTree<'_, postgres::Client>,
        ) -> Result<T, cairn_core::merkle::ProofError<StoreError>>,
    ) -> Result<T, StoreError> {
        self.read(|db| {
            let org = Self::org_id_of(db, org_id)?
                .ok_or_else(|| StoreError::NotFound(format!("org {org_id} has no log")))?;
            let size = Self::log_size_of(db, org)?;
            let db = Db {
                client: &mut *db.client,
                statements: &mut *db.statements,
            };
            let tree = PgTree::new(db, org, size);
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
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            let rows = match page {
                CheckpointPage::Newest(limit) => db.query(
                    "SELECT size, root, note, created_at FROM checkpoints WHERE org = $1 \
                     ORDER BY size DESC LIMIT $2",
                    &[&org, &i64::from(limit)],
                    "listing the latest checkpoints",
                )?,
                CheckpointPage::From(from, limit) => db.query(
                    "SELECT size, root, note, created_at FROM checkpoints \
                     WHERE org = $1 AND size >= $2 ORDER BY size LIMIT $3",
                    // Sizes are below 2^40; a larger start selects nothing.
                    &[&org, &i64::try_from(from).unwrap_or(i64::MAX), &i64::from(limit)],
                    "listing checkpoints",
                )?,
                CheckpointPage::All => db.query(
                    "SELECT size, root, note, created_at FROM checkpoints WHERE org = $1 ORDER BY size",
                    &[&org],
                    "listing checkpoints",
                )?,
            };
            rows
            .iter()
            .map(|row| checkpoint_from_row(row, org_id))
            .collect()
        })
    }

    pub(super) fn root_at_in(&self, org_id: &str, size: u64) -> Result<Hash, StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(cairn_core::merkle::empty_root());
            };
            let db = Db {
                client: &mut *db.client,
                statements: &mut *db.statements,
            };
            let tree = PgTree::new(db, org, size);
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
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            let level = i32::try_from(level).unwrap_or(i32::MAX);
            let rows = db.query(
                // bytea has no min(): its hex orders as its bytes.
                "SELECT idx, count(*), decode(min(encode(hash, 'hex')), 'hex') FROM nodes \
                 WHERE org = $1 AND level = $2 AND idx >= $3 \
                 GROUP BY idx ORDER BY idx LIMIT $4",
                // Indexes are below 2^40; a larger start selects nothing.
                &[
                    &org,
                    &level,
                    &i64::try_from(from_index).unwrap_or(i64::MAX),
                    &i64::from(limit),
                ],
                "reading tree nodes",
            )?;
            rows.iter()
                .map(|row| {
                    Ok(StoredNode {
                        index: u64_of(col(row, 0)?),
                        rows: u64_of(col(row, 1)?),
                        hash: col(row, 2)?,
                    })
                })
                .collect()
        })
    }

    pub(super) fn tree_node_anomaly_in(&self, org_id: &str) -> Result<Option<String>, StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(None);
            };
            // A row no reader can use: not a 32-byte hash, or at a
            // position no append writes (a level other than 4, 8, ... 40,
            // a negative index).
            let (stride, top) = (NODE_STRIDE as i32, MAX_NODE_LEVEL as i32);
            let row = db.query_opt(
                "SELECT level, idx, length(hash) FROM nodes \
                 WHERE org = $1 AND (hash IS NULL OR length(hash) <> 32 \
                   OR level < $2 OR level > $3 OR level % $2 <> 0 OR idx < 0) LIMIT 1",
                &[&org, &stride, &top],
                "reading tree nodes",
            )?;
            row.map(|row| {
                let (level, idx, length): (i32, i64, Option<i32>) =
                    (col(&row, 0)?, col(&row, 1)?, col(&row, 2)?);
                Ok(match length {
                    Some(32) => misplaced_node(&level.to_string(), &idx.to_string()),
                    _ => format!(
                        "the stored tree holds a row at level {level}, index {idx} whose hash is {}: no reader can use it",
                        length.map_or("null".to_owned(), |n| format!("{n} bytes"))
                    ),
                })
            })
            .transpose()
        })
    }
}

/// Rebuilt subtrees sent per statement by `rewrite_tree_nodes_in` (three
/// arrays of this many elements: about 3 MB).
const REWRITE_CHUNK: usize = 65_536;

impl PgStore {
    pub(super) fn rewrite_tree_nodes_in(
        &self,
        org_id: &str,
        rebuilt: &[(u32, u64, Hash)],
    ) -> Result<crate::TreeRowsRewritten, StoreError> {
        const WHAT: &str = "repairing the stored tree";
        self.with_writer(|conn, _cache| {
            let mut tx = conn.client.transaction().context(WHAT)?;
            let mut db = Db {
                client: &mut tx,
                statements: &mut conn.statements,
            };
            // The org's lock, as its appends take it: none of them runs
            // until the rows are rewritten.
            super::locks::lock_orgs(&mut db, &HashSet::from([org_id.to_owned()]))?;
            let Some(org) = Self::org_id_of(&mut db, org_id)? else {
                return Ok(crate::TreeRowsRewritten::default());
            };
            let size = i64_of(Self::log_size_of(&mut db, org)?);
            // The append-only triggers, off for this transaction only (the
            // DDL guard refuses to alter them, from any role): what a
            // superuser may do, so the repair needs one (or a role granted
            // SET on the parameter, and DELETE on `nodes`).
            db.execute(
                "SET LOCAL session_replication_role = replica",
                &[],
                "switching the append-only triggers off for the repair's transaction (run the repair as a PostgreSQL superuser)",
            )?;
            let (stride, top) = (NODE_STRIDE as i32, MAX_NODE_LEVEL as i32);
            let mut rewritten = crate::TreeRowsRewritten {
                unusable: db.execute(
                    "DELETE FROM nodes WHERE org = $1 AND (hash IS NULL OR length(hash) <> 32
                       OR level < $2 OR level > $3 OR level % $2 <> 0 OR idx < 0
                       OR idx >= ($4::bigint >> level))",
                    &[&org, &stride, &top, &size],
                    WHAT,
                )?,
                ..crate::TreeRowsRewritten::default()
            };
            for chunk in rebuilt.chunks(REWRITE_CHUNK) {
                let levels: Vec<i32> = chunk.iter().map(|(l, _, _)| *l as i32).collect();
                let indexes: Vec<i64> = chunk.iter().map(|(_, i, _)| i64_of(*i)).collect();
                let hashes: Vec<&[u8]> = chunk.iter().map(|(_, _, h)| &h.0[..]).collect();
                let replaced = db.query_one(
                    "WITH gone AS (
                       DELETE FROM nodes n
                        USING unnest($2::int[], $3::bigint[], $4::bytea[]) AS r(level, idx, hash)
                        WHERE n.org = $1 AND n.level = r.level AND n.idx = r.idx
                          AND (n.hash IS DISTINCT FROM r.hash
                               OR (SELECT count(*) FROM nodes m
                                    WHERE m.org = $1 AND m.level = r.level AND m.idx = r.idx) > 1)
                        RETURNING n.level, n.idx)
                     SELECT count(*) FROM (SELECT DISTINCT level, idx FROM gone) AS keys",
                    &[&org, &levels, &indexes, &hashes],
                    WHAT,
                )?;
                let replaced = u64_of(col(&replaced, 0)?);
                let written = db.execute(
                    "INSERT INTO nodes (org, level, idx, hash)
                     SELECT $1, r.level, r.idx, r.hash
                       FROM unnest($2::int[], $3::bigint[], $4::bytea[]) AS r(level, idx, hash)
                      WHERE NOT EXISTS (SELECT 1 FROM nodes n
                                         WHERE n.org = $1 AND n.level = r.level AND n.idx = r.idx)",
                    &[&org, &levels, &indexes, &hashes],
                    WHAT,
                )?;
                rewritten.replaced += replaced;
                rewritten.missing += written.saturating_sub(replaced);
            }
            tx.commit().context(WHAT)?;
            Ok(rewritten)
        })
    }
}
