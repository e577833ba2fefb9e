//! How both backends read a subtree hash back from the tree they store:
//! folded from the hashes stored at the level below it (leaf hashes in
//! `entries`, subtree hashes in `nodes` at levels 4, 8, 12, ...), and,
//! where those rows are missing or unusable, computed from the stored
//! level below that, a bounded range at a time.
//!
//! Every append writes the rows of the subtrees it completes, so a missing
//! row means the table was tampered with, and verification says so
//! (FORMAT 9.4, step 6). Readers still answer right: each index with no
//! usable row is folded from the 16 hashes one stored level down, read for
//! a run of such indexes in one query of up to [`RECOMPUTE_CHUNK`] hashes,
//! so a deleted row costs one more query of 16 rows, and a tree whose
//! every `nodes` row was deleted about one query per 65,536 leaves a
//! proof's subtrees cover (a full read of the log for the largest), never
//! one per node.

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

/// The hashes of a range of `count` indexes from `first` as the rows read
/// for it give them, `(index, hash)` in any order: one per index, `None`
/// where there is no row, more than one, or one whose hash is not a
/// 32-byte blob (such a row is no answer: verification names it, readers
/// compute that subtree from below).
pub(crate) fn by_index(
    rows: impl Iterator<Item = (i64, Option<Vec<u8>>)>,
    first: u64,
    count: u64,
) -> Vec<Option<Hash>> {
    let mut hashes: Vec<Option<Hash>> = vec![None; count as usize];
    let mut seen = vec![false; count as usize];
    for (index, hash) in rows {
        let Some(at) = u64::try_from(index)
            .ok()
            .and_then(|i| i.checked_sub(first))
            .filter(|&at| at < count)
        else {
            continue;
        };
        let at = at as usize;
        hashes[at] = if seen[at] {
            None
        } else {
            hash.and_then(|h| <[u8; 32]>::try_from(h.as_slice()).ok())
                .map(Hash)
        };
        seen[at] = true;
    }
    hashes
}

/// A backend's read of stored hashes: `read(level, first, count)` gives,
/// for each of the `count` indexes from `first` at `level` (0: the
/// leaves' hashes; else a multiple of [`NODE_STRIDE`]), its stored hash, or
/// `None` unless the store holds exactly one usable hash for it
/// ([`by_index`]).
pub(crate) type ReadStored<'r> =
    dyn FnMut(u32, u64, u64) -> Result<Vec<Option<Hash>>, StoreError> + 'r;

/// The hash of subtree `index` at `level`: folded from the at most 16
/// hashes stored at the level `level - level % 4` below it, each of which
/// is not there computed from further down.
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
/// as stored, and each one that is not folded from the 16 below it, read
/// for a run of such indexes at a time (at most [`RECOMPUTE_CHUNK`] hashes
/// a read), so the cost follows what is missing, not the range.
fn hashes_at(
    read: &mut ReadStored<'_>,
    level: u32,
    first: u64,
    count: u64,
) -> Result<Vec<Hash>, StoreError> {
    let mut found = read(level, first, count)?;
    if found.len() as u64 != count {
        return Err(StoreError::Corrupt(format!(
            "{} stored hashes read for {count} indexes",
            found.len()
        )));
    }
    // Indexes at this level whose hashes below fit one read.
    let piece = (RECOMPUTE_CHUNK >> NODE_STRIDE) as usize;
    let mut at = 0;
    while at < found.len() {
        if found[at].is_some() {
            at += 1;
            continue;
        }
        let index = first + at as u64;
        if level == 0 {
            return Err(StoreError::Corrupt(format!(
                "the log's leaf hash {index} is not stored (a missing entry, or a hash that is not 32 bytes)"
            )));
        }
        let mut end = at + 1;
        while end < found.len() && end - at < piece && found[end].is_none() {
            end += 1;
        }
        let below = hashes_at(
            read,
            level - NODE_STRIDE,
            index << NODE_STRIDE,
            ((end - at) as u64) << NODE_STRIDE,
        )?;
        for (slot, group) in found[at..end]
            .iter_mut()
            .zip(below.chunks_exact(1 << NODE_STRIDE))
        {
            *slot = Some(fold_perfect(group.to_vec())?);
        }
        at = end;
    }
    Ok(found.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_core::merkle::{Frontier, leaf_hash};
    use std::collections::HashMap;

    /// A stored tree as the engine writes it (rows may then be removed),
    /// with the reads it answered recorded.
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

        fn read(&mut self, level: u32, first: u64, count: u64) -> Vec<Option<Hash>> {
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
        // One row gone: only its own 16 are read one stored level down.
        let expected_11 = full.subtree(11, 37).unwrap();
        let (mut one, _) = Stored::new(size);
        one.rows.remove(&(8, 300));
        assert_eq!(one.subtree(11, 37).unwrap(), expected_11);
        assert_eq!(one.reads, vec![(8, 296, 8), (4, 300 << 4, 16)]);
        // One row of every 16 gone at each level: a read per missing row
        // (each of 16 below), never the whole range.
        let (mut sparse, _) = Stored::new(size);
        sparse
            .rows
            .retain(|&(level, index), _| level == 0 || index % 16 != 3);
        sparse.reads.clear();
        assert_eq!(sparse.subtree(18, 0).unwrap(), frontier.root());
        let rows_read: u64 = sparse.reads.iter().map(|r| r.2).sum();
        assert!(rows_read < 1 << 14, "{rows_read} rows read");
        // A missing leaf is an error, never a guess.
        let (mut torn, _) = Stored::new(size);
        torn.rows.remove(&(0, 70_000));
        torn.rows.retain(|&(level, index), _| {
            !(level > 0 && (index + 1) << level > 70_000 && index << level <= 70_000)
        });
        assert!(matches!(torn.subtree(18, 0), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn folding_needs_a_power_of_two_and_rows_one_usable_per_index() {
        assert!(fold_perfect(vec![Hash([1; 32]); 3]).is_err());
        assert!(fold_perfect(Vec::new()).is_err());
        let h = |b: u8| Some(vec![b; 32]);
        let rows = vec![
            (6, h(6)),
            (4, h(4)),
            (5, h(5)),
            (5, h(5)),
            (7, Some(vec![1, 2])),
            (9, h(9)),
            (-1, h(0)),
            (3, h(3)),
        ];
        assert_eq!(
            by_index(rows.into_iter(), 4, 5),
            vec![Some(Hash([4; 32])), None, Some(Hash([6; 32])), None, None]
        );
        assert_eq!(by_index(std::iter::once((4, None)), 4, 1), vec![None]);
    }
}
