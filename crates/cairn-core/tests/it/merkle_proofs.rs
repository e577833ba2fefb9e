//! Merkle proofs: every inclusion and consistency proof verifies for every
//! pair of sizes up to 300, and an altered proof, or a correct one for
//! another leaf or size, fails.

use cairn_core::Hash;
use cairn_core::merkle::{
    self, Frontier, MemoryTree, consistency_proof, inclusion_proof, leaf_hash, verify_consistency,
    verify_inclusion,
};
use proptest::prelude::*;

/// Every inclusion and consistency proof for every pair of sizes up to 300
/// verifies; the state of an incremental tree matches at every size.
#[test]
fn every_proof_up_to_300_leaves_verifies() {
    const N: u64 = 300;
    let mut tree = MemoryTree::new();
    let mut frontier = Frontier::new();
    let mut roots = vec![merkle::empty_root()];
    for i in 0..N {
        let leaf = leaf_hash(&i.to_le_bytes());
        tree.push(leaf);
        frontier.push(leaf);
        roots.push(frontier.root());
        assert_eq!(frontier.root(), tree.root_at(i + 1));
    }
    for size in 1..=N {
        for index in 0..size {
            let proof = inclusion_proof(&tree, index, size).unwrap();
            let leaf = leaf_hash(&index.to_le_bytes());
            assert_eq!(
                verify_inclusion(&leaf, index, size, &proof, &roots[size as usize]),
                Ok(())
            );
        }
        for old in 1..=size {
            let proof = consistency_proof(&tree, old, size).unwrap();
            assert_eq!(
                verify_consistency(
                    old,
                    size,
                    &roots[old as usize],
                    &roots[size as usize],
                    &proof
                ),
                Ok(()),
                "{old}->{size}"
            );
        }
    }
}

proptest! {
    #[test]
    fn altered_proofs_fail(size in 2u64..300, a in any::<prop::sample::Index>(), b in any::<prop::sample::Index>(), bit in 0usize..256, op in 0usize..4) {
        let mut tree = MemoryTree::new();
        for i in 0..size {
            tree.push(leaf_hash(&i.to_le_bytes()));
        }
        let root = tree.root_at(size);
        let index = a.index(size as usize) as u64;
        let mut proof = inclusion_proof(&tree, index, size).unwrap();
        let alter = |proof: &mut Vec<Hash>| match op {
            0 if !proof.is_empty() => { let i = bit % proof.len(); proof[i].0[bit / 8] ^= 1 << (bit % 8); }
            1 if !proof.is_empty() => { proof.pop(); }
            2 => proof.push(Hash::sha256(b"extra")),
            _ if proof.len() > 1 => proof.swap(0, 1),
            _ => proof.push(Hash::ZERO),
        };
        alter(&mut proof);
        let leaf = leaf_hash(&index.to_le_bytes());
        prop_assert!(verify_inclusion(&leaf, index, size, &proof, &root).is_err());
        // A correct proof for another leaf or size does not pass either.
        let good = inclusion_proof(&tree, index, size).unwrap();
        prop_assert!(verify_inclusion(&leaf, (index + 1) % size, size, &good, &root).is_err());

        let old = (b.index(size as usize - 1) + 1) as u64;
        let mut cproof = consistency_proof(&tree, old, size).unwrap();
        if old != size {
            alter(&mut cproof);
            prop_assert!(verify_consistency(old, size, &tree.root_at(old), &root, &cproof).is_err());
        }
        prop_assert!(verify_consistency(old, size, &Hash::sha256(b"other"), &root, &consistency_proof(&tree, old, size).unwrap()).is_err());
    }
}
