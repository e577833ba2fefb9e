//! The PostgreSQL store's Merkle tree as stored: subtree hashes read from
//! `entries` and `nodes` for proofs, roots and frontiers, the log's size,
//! and its signed checkpoints. The engine writes the tree; this is how it
//! is read back.

use super::PgStore;
use super::connection::{Db, col, i64_of, u64_of};
use crate::engine::{NODE_STRIDE, blob_hash, org_range, row_id};
use crate::{StoreError, StoredCheckpoint};
use cairn_core::merkle::{Frontier, SubtreeHashes, node_hash, range_hash};
use cairn_core::{Hash, Timestamp};
use postgres::{GenericClient, Row};
use std::cell::RefCell;

/// Reads perfect-subtree hashes of one org's log: a subtree at level `l`
/// is folded from at most 16 hashes stored at the level `l - l % 4` below
/// it, fetched in one round trip.
pub(super) struct PgTree<'a, C: GenericClient> {
    pub(super) db: RefCell<Db<'a, C>>,
    pub(super) org: i64,
    pub(super) size: u64,
}

impl<C: GenericClient> SubtreeHashes for PgTree<'_, C> {
    type Error = StoreError;

    fn size(&self) -> u64 {
        self.size
    }

    fn subtree(&self, level: u32, index: u64) -> Result<Hash, StoreError> {
        let stored = level - level % NODE_STRIDE;
        let span = 1u64 << (level - stored);
        let first = index << (level - stored);
        let rows = {
            let mut db = self.db.borrow_mut();
            if stored == 0 {
                db.query(
                    "SELECT leaf_hash FROM entries WHERE id >= $1 AND id < $2 ORDER BY id",
                    &[&row_id(self.org, first), &row_id(self.org, first + span)],
                    "reading leaf hashes",
                )?
            } else {
                db.query(
                    "SELECT hash FROM nodes WHERE org = $1 AND level = $2 AND idx >= $3 AND idx < $4 ORDER BY idx",
                    &[
                        &self.org,
                        &(stored as i32),
                        &i64_of(first),
                        &i64_of(first + span),
                    ],
                    "reading tree nodes",
                )?
            }
        };
        if rows.len() as u64 != span {
            if level == 0 {
                return Err(StoreError::Corrupt(format!(
                    "leaf {index} of the log is missing"
                )));
            }
            // A stored node is missing: compute it from below.
            let left = self.subtree(level - 1, 2 * index)?;
            let right = self.subtree(level - 1, 2 * index + 1)?;
            return Ok(node_hash(&left, &right));
        }
        let hashes = rows
            .iter()
            .map(|row| blob_hash(col(row, 0)?))
            .collect::<Result<Vec<Hash>, StoreError>>()?;
        crate::engine::fold_perfect(hashes)
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
            let tree = PgTree {
                db: RefCell::new(Db {
                    client: &mut *db.client,
                    statements: &mut *db.statements,
                }),
                org,
                size,
            };
            prove(&tree).map_err(|e| match e {
                cairn_core::merkle::ProofError::Read(e) => e,
                cairn_core::merkle::ProofError::OutOfRange(m) => StoreError::NotFound(m),
            })
        })
    }

    pub(super) fn checkpoints_in(&self, org_id: &str) -> Result<Vec<StoredCheckpoint>, StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            db.query(
                "SELECT size, root, note, created_at FROM checkpoints WHERE org = $1 ORDER BY size",
                &[&org],
                "listing checkpoints",
            )?
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
            let tree = PgTree {
                db: RefCell::new(Db {
                    client: &mut *db.client,
                    statements: &mut *db.statements,
                }),
                org,
                size,
            };
            range_hash(&tree, 0, size)
        })
    }
}
