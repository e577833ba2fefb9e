//! RFC 9162 Merkle trees: hashing, an incremental tree, and inclusion and
//! consistency proofs with their verifiers.
//!
//! The layouts are the RFC's, byte for byte: a leaf hash is
//! `SHA-256(0x00 || leaf data)`, an interior node is
//! `SHA-256(0x01 || left || right)`, the empty tree's root is `SHA-256("")`.
//! Proofs are checked against the published transparency-dev vectors in
//! `tests/it/vectors.rs`.
//!
//! Proof *generation* needs the hashes of complete subtrees, which only the
//! storage layer has; it reads them through the [`SubtreeHashes`] trait, so
//! the same code serves an in-memory [`MemoryTree`] and a database.

use crate::hash::Hash;

/// `SHA-256(0x00 || data)`.
pub fn leaf_hash(data: &[u8]) -> Hash {
    // Log and session leaves are well under this: framed on the stack.
    let mut framed = [0u8; 256];
    if data.len() < framed.len() {
        framed[1..=data.len()].copy_from_slice(data);
        return Hash::sha256(&framed[..=data.len()]);
    }
    let mut framed = Vec::with_capacity(data.len() + 1);
    framed.push(0);
    framed.extend_from_slice(data);
    Hash::sha256(&framed)
}

/// `SHA-256(0x01 || left || right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut framed = [1u8; 65];
    framed[1..33].copy_from_slice(&left.0);
    framed[33..].copy_from_slice(&right.0);
    Hash::sha256(&framed)
}

/// Root of the empty tree, `SHA-256("")`.
pub fn empty_root() -> Hash {
    Hash::sha256(b"")
}

/// Root of a tree over the given leaf hashes, computed directly (O(n)).
pub fn root_of(leaves: &[Hash]) -> Hash {
    let mut frontier = Frontier::new();
    for leaf in leaves {
        frontier.push(*leaf);
    }
    frontier.root()
}

/// The right edge of a Merkle tree: the roots of its maximal complete
/// subtrees, one per set bit of the size, largest first.
///
/// Appending a leaf costs one hash amortised (two on average in the worst
/// case pattern, never more than log2 n), and the state is O(log n), so a
/// verifier can fold a log of any length in constant memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    peaks: Vec<Hash>,
}

impl Frontier {
    /// The empty tree.
    pub fn new() -> Frontier {
        Frontier::default()
    }

    /// Restores a frontier from stored peaks. Fails if the number of peaks
    /// is not the number of set bits of `size`.
    pub fn from_parts(size: u64, peaks: Vec<Hash>) -> Option<Frontier> {
        (peaks.len() == size.count_ones() as usize).then_some(Frontier { size, peaks })
    }

    /// Number of leaves.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Roots of the complete subtrees, largest (leftmost) first.
    pub fn peaks(&self) -> &[Hash] {
        &self.peaks
    }

    /// Appends one leaf hash.
    pub fn push(&mut self, leaf: Hash) {
        self.push_with(leaf, |_, _, _| {});
    }

    /// Appends one leaf hash and reports every complete subtree the leaf
    /// closes as `(level, index, hash)`, lowest first (level 0 is the leaf
    /// itself). Stores persist some of these to serve proofs.
    pub fn push_with(&mut self, leaf: Hash, mut completed: impl FnMut(u32, u64, &Hash)) {
        let mut node = leaf;
        let mut size = self.size;
        let mut level = 0u32;
        completed(0, self.size, &node);
        while size & 1 == 1 {
            // A set low bit means the last peak is a complete sibling of the
            // same height as `node`: merge them.
            let left = self.peaks.pop().unwrap_or_default();
            node = node_hash(&left, &node);
            size >>= 1;
            level += 1;
            completed(level, self.size >> level, &node);
        }
        self.peaks.push(node);
        self.size += 1;
    }

    /// The root hash of the tree so far.
    pub fn root(&self) -> Hash {
        let mut iter = self.peaks.iter().rev();
        let Some(last) = iter.next() else {
            return empty_root();
        };
        iter.fold(*last, |acc, peak| node_hash(peak, &acc))
    }
}

/// Read access to the hashes of complete, aligned subtrees of a tree: the
/// subtree at `level` (2^level leaves) with index `index` covers leaves
/// `index * 2^level .. (index + 1) * 2^level`. Level 0 are the leaf hashes.
pub trait SubtreeHashes {
    /// The error a read can fail with (an I/O error in a store; never for
    /// the in-memory tree).
    type Error;

    /// Number of leaves in the tree.
    fn size(&self) -> u64;

    /// The hash of a complete subtree that lies entirely below `size()`.
    fn subtree(&self, level: u32, index: u64) -> Result<Hash, Self::Error>;

    /// Says which subtrees ([`subtree`](Self::subtree) calls, as `(level,
    /// index)`) are about to be read, so that a store across a network can
    /// fetch them in one round trip. The proofs call it first; the default
    /// does nothing, and what is read afterwards must not depend on it.
    fn prefetch(&self, subtrees: &[(u32, u64)]) -> Result<(), Self::Error> {
        let _ = subtrees;
        Ok(())
    }
}

/// A [`SubtreeHashes`] that keeps every subtree hash it read: the proofs
/// of many leaves of one tree (an export's entries) share their upper
/// subtrees, which are then read once. Holds one hash per distinct subtree
/// asked for: prove in bounded chunks.
pub struct MemoSubtrees<'a, T: SubtreeHashes> {
    inner: &'a T,
    memo: std::cell::RefCell<std::collections::HashMap<(u32, u64), Hash>>,
}

impl<'a, T: SubtreeHashes> MemoSubtrees<'a, T> {
    /// Remembers what `inner` answers.
    pub fn new(inner: &'a T) -> MemoSubtrees<'a, T> {
        MemoSubtrees {
            inner,
            memo: Default::default(),
        }
    }
}

impl<T: SubtreeHashes> SubtreeHashes for MemoSubtrees<'_, T> {
    type Error = T::Error;

    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn subtree(&self, level: u32, index: u64) -> Result<Hash, T::Error> {
        if let Some(hash) = self.memo.borrow().get(&(level, index)) {
            return Ok(*hash);
        }
        let hash = self.inner.subtree(level, index)?;
        self.memo.borrow_mut().insert((level, index), hash);
        Ok(hash)
    }

    fn prefetch(&self, subtrees: &[(u32, u64)]) -> Result<(), T::Error> {
        let memo = self.memo.borrow();
        let missing: Vec<(u32, u64)> = subtrees
            .iter()
            .filter(|s| !memo.contains_key(s))
            .copied()
            .collect();
        drop(memo);
        if missing.is_empty() {
            return Ok(());
        }
        self.inner.prefetch(&missing)
    }
}

/// Inclusion proofs of several leaves in the tree of `size` leaves, in the
/// order of `indexes`, each subtree the proofs share read once
/// ([`MemoSubtrees`]).
pub fn inclusion_proofs<T: SubtreeHashes>(
    tree: &T,
    indexes: &[u64],
    size: u64,
) -> Result<Vec<Vec<Hash>>, ProofError<T::Error>> {
    let tree = MemoSubtrees::new(tree);
    // Every subtree of every proof, asked for at once (distinct ones).
    let mut wanted = Vec::new();
    for &index in indexes {
        check_inclusion(&tree, index, size)?;
        for (lo, hi) in inclusion_ranges(index, size) {
            range_subtrees(lo, hi, &mut wanted);
        }
    }
    wanted.sort_unstable();
    wanted.dedup();
    tree.prefetch(&wanted).map_err(ProofError::Read)?;
    indexes
        .iter()
        .map(|&index| inclusion_proof(&tree, index, size))
        .collect()
}

/// Why a proof cannot be produced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError<E> {
    /// The requested leaf or sizes are outside the tree.
    #[error("proof request out of range: {0}")]
    OutOfRange(String),
    /// Reading a subtree hash failed.
    #[error("reading the tree failed")]
    Read(E),
}

/// Largest power of two strictly less than `n` (n >= 2).
fn split_point(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1 << (63 - (n - 1).leading_zeros())
}

/// Appends the complete subtrees [`range_hash`] reads for `D[lo:hi]`.
pub fn range_subtrees(lo: u64, hi: u64, out: &mut Vec<(u32, u64)>) {
    let n = hi - lo;
    if n == 0 {
        return;
    }
    if n.is_power_of_two() && lo.is_multiple_of(n) {
        out.push((n.trailing_zeros(), lo / n));
        return;
    }
    let k = split_point(n);
    range_subtrees(lo, lo + k, out);
    range_subtrees(lo + k, hi, out);
}

/// `MTH(D[lo:hi])` from complete subtrees: O(log n) reads.
pub fn range_hash<T: SubtreeHashes>(tree: &T, lo: u64, hi: u64) -> Result<Hash, T::Error> {
    let n = hi - lo;
    if n == 0 {
        return Ok(empty_root());
    }
    if n.is_power_of_two() && lo.is_multiple_of(n) {
        return tree.subtree(n.trailing_zeros(), lo / n);
    }
    let k = split_point(n);
    let left = range_hash(tree, lo, lo + k)?;
    let right = range_hash(tree, lo + k, hi)?;
    Ok(node_hash(&left, &right))
}

fn check_inclusion<T: SubtreeHashes>(
    tree: &T,
    index: u64,
    size: u64,
) -> Result<(), ProofError<T::Error>> {
    if index >= size || size > tree.size() {
        return Err(ProofError::OutOfRange(format!(
            "leaf {index} in a tree of {size} (log has {})",
            tree.size()
        )));
    }
    Ok(())
}

/// The leaf ranges whose hashes form the audit path of leaf `index` in a
/// tree of `size` leaves, bottom-up (RFC 9162 section 2.1.3.1).
fn inclusion_ranges(index: u64, size: u64) -> Vec<(u64, u64)> {
    let mut ranges = Vec::new();
    let (mut lo, mut hi, mut m) = (0u64, size, index);
    while hi - lo > 1 {
        let k = split_point(hi - lo);
        if m < k {
            ranges.push((lo + k, hi));
            hi = lo + k;
        } else {
            ranges.push((lo, lo + k));
            lo += k;
            m -= k;
        }
    }
    ranges.reverse();
    ranges
}

/// The hashes of `ranges`, their subtrees announced to the tree first.
fn hashes_of_ranges<T: SubtreeHashes>(
    tree: &T,
    ranges: &[(u64, u64)],
) -> Result<Vec<Hash>, ProofError<T::Error>> {
    let mut wanted = Vec::new();
    for &(lo, hi) in ranges {
        range_subtrees(lo, hi, &mut wanted);
    }
    tree.prefetch(&wanted).map_err(ProofError::Read)?;
    ranges
        .iter()
        .map(|&(lo, hi)| range_hash(tree, lo, hi).map_err(ProofError::Read))
        .collect()
}

/// The audit path of leaf `index` in the tree of the first `size` leaves
/// (RFC 9162 section 2.1.3.1), bottom-up.
pub fn inclusion_proof<T: SubtreeHashes>(
    tree: &T,
    index: u64,
    size: u64,
) -> Result<Vec<Hash>, ProofError<T::Error>> {
    check_inclusion(tree, index, size)?;
    hashes_of_ranges(tree, &inclusion_ranges(index, size))
}

/// The leaf ranges whose hashes form the consistency proof between the
/// trees of `old_size` and `new_size` leaves, bottom-up (RFC 9162 section
/// 2.1.4.1).
fn consistency_ranges(old_size: u64, new_size: u64) -> Vec<(u64, u64)> {
    let mut ranges = Vec::new();
    let (mut lo, mut hi, mut m, mut whole) = (0u64, new_size, old_size, true);
    while m != hi - lo {
        let k = split_point(hi - lo);
        if m <= k {
            ranges.push((lo + k, hi));
            hi = lo + k;
        } else {
            ranges.push((lo, lo + k));
            lo += k;
            m -= k;
            whole = false;
        }
    }
    if !whole {
        ranges.push((lo, hi));
    }
    ranges.reverse();
    ranges
}

/// The consistency proof between the trees of `old_size` and `new_size`
/// leaves (RFC 9162 section 2.1.4.1). `old_size` must be at least 1.
pub fn consistency_proof<T: SubtreeHashes>(
    tree: &T,
    old_size: u64,
    new_size: u64,
) -> Result<Vec<Hash>, ProofError<T::Error>> {
    if old_size == 0 || old_size > new_size || new_size > tree.size() {
        return Err(ProofError::OutOfRange(format!(
            "consistency from {old_size} to {new_size} (log has {})",
            tree.size()
        )));
    }
    hashes_of_ranges(tree, &consistency_ranges(old_size, new_size))
}

/// Why a proof did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofVerifyError {
    /// The index or sizes cannot describe a valid proof.
    #[error("invalid proof parameters: {0}")]
    BadRequest(&'static str),
    /// The proof has the wrong number of hashes for its sizes.
    #[error("proof has the wrong length")]
    WrongLength,
    /// The proof's hashes do not lead to the given root(s).
    #[error("proof does not match the root")]
    RootMismatch,
}

/// Verifies an inclusion proof (RFC 9162 section 2.1.3.2).
pub fn verify_inclusion(
    leaf: &Hash,
    index: u64,
    size: u64,
    proof: &[Hash],
    root: &Hash,
) -> Result<(), ProofVerifyError> {
    if inclusion_root(leaf, index, size, proof)? != *root {
        return Err(ProofVerifyError::RootMismatch);
    }
    Ok(())
}

/// The root an inclusion proof leads to from `leaf` at `index` in a tree of
/// `size` leaves (RFC 9162 section 2.1.3.2 without the final comparison):
/// what a verifier checks a signature over when the root is not given, as
/// in a COSE receipt.
pub fn inclusion_root(
    leaf: &Hash,
    index: u64,
    size: u64,
    proof: &[Hash],
) -> Result<Hash, ProofVerifyError> {
    if index >= size {
        return Err(ProofVerifyError::BadRequest("leaf index beyond tree size"));
    }
    let (mut fnode, mut snode) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if snode == 0 {
            return Err(ProofVerifyError::WrongLength);
        }
        if fnode & 1 == 1 || fnode == snode {
            r = node_hash(p, &r);
            if fnode & 1 == 0 {
                while fnode & 1 == 0 && fnode != 0 {
                    fnode >>= 1;
                    snode >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    if snode != 0 {
        return Err(ProofVerifyError::WrongLength);
    }
    Ok(r)
}

/// Verifies a consistency proof (RFC 9162 section 2.1.4.2), with the edge
/// rules of the reference implementation: `old_size` 0 is refused (nothing
/// is proven), equal sizes need an empty proof and equal roots.
pub fn verify_consistency(
    old_size: u64,
    new_size: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), ProofVerifyError> {
    if consistency_root(old_size, new_size, old_root, proof)? != *new_root {
        return Err(ProofVerifyError::RootMismatch);
    }
    Ok(())
}

/// The newer root a consistency proof leads to from `old_root` (RFC 9162
/// section 2.1.4.2 without the final comparison with the new root): the
/// proof must reproduce `old_root`, and the root it yields for `new_size`
/// is returned, for a verifier that checks a signature over it (a COSE
/// consistency receipt). Equal sizes need an empty proof and yield
/// `old_root`.
pub fn consistency_root(
    old_size: u64,
    new_size: u64,
    old_root: &Hash,
    proof: &[Hash],
) -> Result<Hash, ProofVerifyError> {
    if old_size == 0 {
        return Err(ProofVerifyError::BadRequest("old size is zero"));
    }
    if old_size > new_size {
        return Err(ProofVerifyError::BadRequest("old size exceeds new size"));
    }
    if old_size == new_size {
        if !proof.is_empty() {
            return Err(ProofVerifyError::WrongLength);
        }
        return Ok(*old_root);
    }
    if proof.is_empty() {
        return Err(ProofVerifyError::WrongLength);
    }
    let mut path = proof.iter();
    let seed = if old_size.is_power_of_two() {
        *old_root
    } else {
        *path.next().unwrap_or(old_root)
    };
    let (mut fnode, mut snode) = (old_size - 1, new_size - 1);
    while fnode & 1 == 1 {
        fnode >>= 1;
        snode >>= 1;
    }
    let (mut fr, mut sr) = (seed, seed);
    for c in path {
        if snode == 0 {
            return Err(ProofVerifyError::WrongLength);
        }
        if fnode & 1 == 1 || fnode == snode {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if fnode & 1 == 0 {
                while fnode & 1 == 0 && fnode != 0 {
                    fnode >>= 1;
                    snode >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    if snode != 0 {
        return Err(ProofVerifyError::WrongLength);
    }
    if fr != *old_root {
        return Err(ProofVerifyError::RootMismatch);
    }
    Ok(sr)
}

/// A complete Merkle tree held in memory: every level of complete-subtree
/// hashes (about 2n hashes for n leaves). For tests, benchmarks and
/// verifiers of small logs; stores keep the same levels in their tables.
#[derive(Clone, Debug, Default)]
pub struct MemoryTree {
    levels: Vec<Vec<Hash>>,
}

impl MemoryTree {
    /// An empty tree.
    pub fn new() -> MemoryTree {
        MemoryTree {
            levels: vec![Vec::new()],
        }
    }

    /// Appends a leaf hash, completing every subtree it closes.
    pub fn push(&mut self, leaf: Hash) {
        self.levels[0].push(leaf);
        let mut level = 0;
        while self.levels[level].len().is_multiple_of(2) {
            let nodes = &self.levels[level];
            let parent = node_hash(&nodes[nodes.len() - 2], &nodes[nodes.len() - 1]);
            if self.levels.len() == level + 1 {
                self.levels.push(Vec::new());
            }
            self.levels[level + 1].push(parent);
            level += 1;
        }
    }

    /// Root of the first `size` leaves.
    pub fn root_at(&self, size: u64) -> Hash {
        match range_hash(self, 0, size.min(self.size())) {
            Ok(hash) => hash,
            Err(never) => match never {},
        }
    }
}

impl SubtreeHashes for MemoryTree {
    type Error = std::convert::Infallible;

    fn size(&self) -> u64 {
        self.levels[0].len() as u64
    }

    fn subtree(&self, level: u32, index: u64) -> Result<Hash, Self::Error> {
        Ok(self.levels[level as usize][index as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree that records what it was told to prefetch and what was read.
    struct Recording<'a> {
        inner: &'a MemoryTree,
        announced: std::cell::RefCell<std::collections::HashSet<(u32, u64)>>,
        unannounced: std::cell::RefCell<Vec<(u32, u64)>>,
    }

    impl SubtreeHashes for Recording<'_> {
        type Error = std::convert::Infallible;

        fn size(&self) -> u64 {
            self.inner.size()
        }

        fn subtree(&self, level: u32, index: u64) -> Result<Hash, Self::Error> {
            if !self.announced.borrow().contains(&(level, index)) {
                self.unannounced.borrow_mut().push((level, index));
            }
            self.inner.subtree(level, index)
        }

        fn prefetch(&self, subtrees: &[(u32, u64)]) -> Result<(), Self::Error> {
            self.announced.borrow_mut().extend(subtrees.iter().copied());
            Ok(())
        }
    }

    proptest::proptest! {
        /// Every subtree a proof reads was announced to `prefetch` first,
        /// so a store that fetches what is announced answers every read
        /// from what it fetched.
        #[test]
        fn proofs_read_only_what_they_announced(size in 1u64..600, a in 0u64..600, b in 0u64..600) {
            let t = tree(size);
            let fresh = || Recording {
                inner: &t,
                announced: Default::default(),
                unannounced: Default::default(),
            };
            let (index, old) = (a % size, b % size + 1);
            let (one, two, many) = (fresh(), fresh(), fresh());
            proptest::prop_assert_eq!(
                inclusion_proof(&one, index, size).unwrap(),
                inclusion_proof(&t, index, size).unwrap()
            );
            proptest::prop_assert_eq!(
                consistency_proof(&two, old, size).unwrap(),
                consistency_proof(&t, old, size).unwrap()
            );
            inclusion_proofs(&many, &[index, old - 1, size - 1], size).unwrap();
            for recording in [one, two, many] {
                proptest::prop_assert!(recording.unannounced.borrow().is_empty());
            }
        }
    }

    #[test]
    fn remembered_subtrees_give_the_same_proofs() {
        let t = tree(1000);
        let indexes: Vec<u64> = (0..1000).step_by(7).collect();
        let proofs = inclusion_proofs(&t, &indexes, 1000).unwrap();
        for (index, proof) in indexes.into_iter().zip(proofs) {
            assert_eq!(proof, inclusion_proof(&t, index, 1000).unwrap());
        }
    }

    #[test]
    fn leaf_and_node_hashes_are_the_rfc_9162_prefixed_sha256() {
        for n in [0usize, 1, 54, 55, 254, 255, 256, 1000] {
            let data = vec![0xabu8; n];
            let mut framed = vec![0u8];
            framed.extend_from_slice(&data);
            assert_eq!(leaf_hash(&data), Hash::sha256(&framed), "length {n}");
        }
        let (l, r) = (Hash::sha256(b"l"), Hash::sha256(b"r"));
        let framed = [&[1u8][..], &l.0, &r.0].concat();
        assert_eq!(node_hash(&l, &r), Hash::sha256(&framed));
    }

    fn tree(n: u64) -> MemoryTree {
        let mut t = MemoryTree::new();
        for i in 0..n {
            t.push(leaf_hash(&i.to_be_bytes()));
        }
        t
    }

    #[test]
    fn frontier_root_matches_tree_root() {
        let mut frontier = Frontier::new();
        let t = tree(70);
        assert_eq!(frontier.root(), empty_root());
        for i in 0..70u64 {
            frontier.push(leaf_hash(&i.to_be_bytes()));
            assert_eq!(frontier.root(), t.root_at(i + 1));
            assert_eq!(frontier.peaks().len(), (i + 1).count_ones() as usize);
        }
    }

    #[test]
    fn push_with_reports_every_complete_subtree() {
        let t = tree(37);
        let mut frontier = Frontier::new();
        let mut seen = 0;
        for i in 0..37u64 {
            frontier.push_with(leaf_hash(&i.to_be_bytes()), |level, index, hash| {
                assert_eq!(*hash, t.subtree(level, index).unwrap());
                seen += 1;
            });
        }
        // 37 leaves and 36 - popcount(37) + 1 interior complete subtrees.
        assert_eq!(seen, 37 + 37 - 37u64.count_ones() as usize);
    }

    #[test]
    fn proofs_round_trip_for_all_small_sizes() {
        let t = tree(40);
        for size in 1..=40 {
            let root = t.root_at(size);
            for index in 0..size {
                let proof = inclusion_proof(&t, index, size).unwrap();
                let leaf = t.levels[0][index as usize];
                assert_eq!(verify_inclusion(&leaf, index, size, &proof, &root), Ok(()));
            }
            for old in 1..=size {
                let proof = consistency_proof(&t, old, size).unwrap();
                let old_root = t.root_at(old);
                assert_eq!(
                    verify_consistency(old, size, &old_root, &root, &proof),
                    Ok(())
                );
            }
        }
    }
}
