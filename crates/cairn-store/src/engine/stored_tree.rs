//! How both backends read a subtree hash back from the tree they store:
//! folded from the hashes stored at the level below it (leaf hashes in
//! `entries`, subtree hashes in `nodes` at levels 4, 8, 12, ...), and,
//! where those rows are missing or unusable, computed from the stored
//! level below that, a bounded range at a time.
//!
//! Every append writes the rows of the subtrees it completes, so a missing
//! row means the table was tampered with, and verification says so
//! (FORMAT 9.4, step 6). Readers still answer right: each missing range is
//! read again one stored level down, in one query for up to
//! [`RECOMPUTE_CHUNK`] hashes, so a tree whose every `nodes` row was
//! deleted costs about one query per 65,536 leaves a proof's subtrees
//! cover (a full read of the log for the largest), never one per node.

use super::NODE_STRIDE;
use crate::StoreError;
use cairn_core::Hash;

/// The most stored hashes a reader asks for in one query when it computes
/// subtrees from below (2 MiB of hashes).
pub(crate) const RECOMPUTE_CHUNK: u64 = 1 << 16;

/// The root of a perfect subtree from its hashes at one level, in order
/// (a power of two of them): how both backends fold a subtree from the
/// hashes stored below it.
pub(crate) fn fold_perfect(mut hashes: Vec<Hash>) -> Result<Hash, StoreError> {
    if !hashes.len().is_power_of_two() {
        return Err(StoreError::Corrupt(format!(
            "{} hashes do not make a perfect subtree",
            hashes.len()
        )));
    }
    while hashes.len() > 1 {
        hashes = hashes
            .chunks_exact(2)
            .map(|pair| cairn_core::merkle::node_hash(&pair[0], &pair[1]))
            .collect();
    }
    hashes
        .pop()
        .ok_or_else(|| StoreError::Corrupt("empty subtree".into()))
}

/// Whether the stored node indexes read for a range are exactly `first`,
/// `first + 1`, ... `first + span - 1`, in order: only then are their
/// hashes the range's (a planted index or a repeated one beside a missing
/// one would otherwise be folded in).
pub(crate) fn one_row_per_index(indexes: impl Iterator<Item = i64>, first: u64, span: u64) -> bool {
    let mut expected = first;
    for idx in indexes {
        if u64::try_from(idx).ok() != Some(expected) {
            return false;
        }
        expected += 1;
    }
    expected == first + span
}

/// A backend's read of stored hashes: `read(level, first, count)` gives
/// the `count` hashes stored at `level` (0: the leaves' hashes; else a
/// multiple of [`NODE_STRIDE`]) from index `first`, or `None` unless the
/// store holds exactly one usable 32-byte hash for each of them.
pub(crate) type ReadStored<'r> =
    dyn FnMut(u32, u64, u64) -> Result<Option<Vec<Hash>>, StoreError> + 'r;

/// The hash of subtree `index` at `level`: folded from the at most 16
/// hashes stored at the level `level - level % 4` below it, or, where those
/// are not all there, computed from further down.
pub(crate) fn stored_subtree(
    read: &mut ReadStored<'_>,
    level: u32,
    index: u64,
) -> Result<Hash, StoreError> {
    let stored = level - level % NODE_STRIDE;
    let shift = level - stored;
    let first = index
        .checked_shl(shift)
        .filter(|first| first >> shift == index)
        .ok_or_else(|| StoreError::NotFound(format!("no subtree {index} at level {level}")))?;
    fold_perfect(hashes_at(read, stored, first, 1 << shift)?)
}

/// The `count` subtree hashes at stored level `level` from index `first`:
/// as stored, or each folded from the 16 below it.
fn hashes_at(
    read: &mut ReadStored<'_>,
    level: u32,
    first: u64,
    count: u64,
) -> Result<Vec<Hash>, StoreError> {
    if let Some(hashes) = read(level, first, count)? {
        return Ok(hashes);
    }
    if level == 0 {
        return Err(StoreError::Corrupt(format!(
            "the log's leaf hashes {first} to {} are not all stored",
            first + count - 1
        )));
    }
    // Indexes at this level whose hashes below fit one read.
    let piece = RECOMPUTE_CHUNK >> NODE_STRIDE;
    if count > piece {
        // Damage is usually local: each piece is read at this level again
        // before going further down.
        let mut hashes = Vec::with_capacity(count as usize);
        let mut start = first;
        while start < first + count {
            let n = piece.min(first + count - start);
            hashes.extend(hashes_at(read, level, start, n)?);
            start += n;
        }
        return Ok(hashes);
    }
    let below = hashes_at(
        read,
        level - NODE_STRIDE,
        first << NODE_STRIDE,
        count << NODE_STRIDE,
    )?;
    below
        .chunks_exact(1 << NODE_STRIDE)
        .map(|group| fold_perfect(group.to_vec()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_core::merkle::{Frontier, leaf_hash};
    use std::collections::HashMap;

    /// A stored tree of `size` leaves as the engine writes it, minus the
    /// rows `missing` says, with the reads it answered counted.
    struct Stored {
        rows: HashMap<(u32, u64), Hash>,
        reads: Vec<(u32, u64, u64)>,
    }

    impl Stored {
        fn new(size: u64) -> (Stored, Frontier) {
            let mut rows = HashMap::new();
            let mut frontier = Frontier::new();
            for i in 0..size {
                let leaf = leaf_hash(&i.to_be_bytes());
                rows.insert((0, i), leaf);
                frontier.push_with(leaf, |level, index, hash| {
                    if level > 0 && level.is_multiple_of(NODE_STRIDE) {
                        rows.insert((level, index), *hash);
                    }
                });
            }
            (
                Stored {
                    rows,
                    reads: Vec::new(),
                },
                frontier,
            )
        }

        fn read(&mut self, level: u32, first: u64, count: u64) -> Option<Vec<Hash>> {
            self.reads.push((level, first, count));
            (first..first + count)
                .map(|i| self.rows.get(&(level, i)).copied())
                .collect()
        }

        fn subtree(&mut self, level: u32, index: u64) -> Result<Hash, StoreError> {
            let mut read = |l, f, c| Ok(self.read(l, f, c));
            stored_subtree(&mut read, level, index)
        }
    }

    #[test]
    fn subtrees_are_the_same_with_rows_missing_and_reads_stay_bounded() {
        let size = 1 << 18;
        let (mut full, frontier) = Stored::new(size);
        assert_eq!(full.subtree(18, 0).unwrap(), frontier.root());
        assert_eq!(full.reads, vec![(16, 0, 4)]);
        let expected: Vec<(u32, u64, Hash)> =
            [(18, 0), (17, 1), (13, 5), (9, 77), (5, 1000), (2, 9)]
                .into_iter()
                .map(|(l, i)| (l, i, full.subtree(l, i).unwrap()))
                .collect();
        // Every node row gone: the same hashes, each from at most
        // RECOMPUTE_CHUNK leaves a read.
        let (mut bare, _) = Stored::new(size);
        bare.rows.retain(|&(level, _), _| level == 0);
        for &(level, index, hash) in &expected {
            bare.reads.clear();
            assert_eq!(bare.subtree(level, index).unwrap(), hash);
            assert!(
                bare.reads
                    .iter()
                    .all(|&(_, _, count)| count <= RECOMPUTE_CHUNK)
            );
            let leaves: u64 = bare.reads.iter().filter(|r| r.0 == 0).map(|r| r.2).sum();
            assert_eq!(leaves, 1 << level, "level {level}: every leaf read once");
        }
        // One row gone: the range holding it is read one stored level
        // down, in one query.
        let expected_11 = full.subtree(11, 37).unwrap();
        let (mut one, _) = Stored::new(size);
        one.rows.remove(&(8, 300));
        assert_eq!(one.subtree(11, 37).unwrap(), expected_11);
        assert_eq!(one.reads, vec![(8, 296, 8), (4, 296 << 4, 8 << 4)]);
        // A missing leaf is an error, never a guess.
        let (mut torn, _) = Stored::new(size);
        torn.rows.remove(&(0, 70_000));
        torn.rows.retain(|&(level, index), _| {
            !(level > 0 && (index + 1) << level > 70_000 && index << level <= 70_000)
        });
        assert!(matches!(torn.subtree(18, 0), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn folding_needs_a_power_of_two_and_indexes_in_order() {
        assert!(fold_perfect(vec![Hash([1; 32]); 3]).is_err());
        assert!(fold_perfect(Vec::new()).is_err());
        assert!(one_row_per_index([4, 5, 6].into_iter(), 4, 3));
        assert!(!one_row_per_index([4, 6, 6].into_iter(), 4, 3));
        assert!(!one_row_per_index([4, 5].into_iter(), 4, 3));
        assert!(!one_row_per_index([4, 5, 6, 7].into_iter(), 4, 3));
    }
}
