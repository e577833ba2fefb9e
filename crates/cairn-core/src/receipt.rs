//! COSE Receipts (RFC 9942) for the org log, in the RFC 9162 SHA-256
//! verifiable data structure profile (`vds` 1, `RFC9162_SHA256`).
//!
//! A receipt is a tagged `COSE_Sign1` (CBOR tag 18) whose
//!
//! - protected header holds `alg` (1) = EdDSA (-8), `kid` (4) = the server
//!   key's 4-byte C2SP key id, `CWT Claims` (15) = `{iss (1): <log origin>}`
//!   and `vds` (395) = 1;
//! - unprotected header holds `vdp` (396) = `{-1: [bstr .cbor [tree_size,
//!   leaf_index, [* bstr]]]}` for an inclusion receipt or `{-2: [bstr .cbor
//!   [tree_size_1, tree_size_2, [+ bstr]]]}` for a consistency receipt;
//! - payload is `nil` (detached): the signature is over the `Sig_structure`
//!   `["Signature1", protected, h'', root]` where `root` is the 32-byte
//!   RFC 9162 root of the tree of `tree_size` (inclusion) or `tree_size_2`
//!   (consistency) leaves.
//!
//! A verifier never takes the root from the receipt: it recomputes it from
//! the leaf (or the older root) and the proof, then checks the signature
//! over that root, so a receipt verifies only if proof and signature agree.
//! `docs/FORMAT.md` ("COSE receipts") is the published description.
//!
//! The CBOR and COSE structures are `coset`'s (over `ciborium`): pure,
//! `no_std` with `alloc`, no I/O. Signing is a callback, so this module
//! never holds a private key.
//!
//! This file holds the profile's constants and the types both sides share
//! (the issuer, the proof, the errors, what a verified receipt states, the
//! decoded [`Receipt`]), and the tests of issuing and verifying together;
//! building and signing a receipt is in `issue`, decoding and verifying one
//! in `verify`.

use crate::hash::Hash;
use crate::merkle::ProofVerifyError;
use coset::CoseSign1;

mod issue;
mod verify;

pub use issue::{consistency_receipt, inclusion_receipt};
pub use verify::{verify_consistency_receipt, verify_inclusion_receipt};

/// COSE header parameter `vds` (verifiable data structure), RFC 9942.
pub const HEADER_VDS: i64 = 395;
/// COSE header parameter `vdp` (verifiable data structure proofs), RFC 9942.
pub const HEADER_VDP: i64 = 396;
/// COSE header parameter `CWT Claims` (RFC 9597).
pub const HEADER_CWT_CLAIMS: i64 = 15;
/// CWT claim `iss` (RFC 8392).
pub const CWT_ISS: i64 = 1;
/// The `vds` value of RFC 9162 Merkle trees with SHA-256.
pub const VDS_RFC9162_SHA256: i64 = 1;
/// `vdp` map key of inclusion proofs.
pub const VDP_INCLUSION: i64 = -1;
/// `vdp` map key of consistency proofs.
pub const VDP_CONSISTENCY: i64 = -2;
/// COSE algorithm EdDSA (RFC 9053), the only one Cairn signs with.
pub const ALG_EDDSA: i64 = -8;
/// The generic media type of a COSE object (RFC 9052).
pub const MEDIA_TYPE_COSE: &str = "application/cose";
/// The media type of a SCITT receipt (RFC 9943).
pub const MEDIA_TYPE_SCITT_RECEIPT: &str = "application/scitt-receipt+cose";

/// Who signs a receipt: the log's origin (`<server name>/<org>`, the
/// checkpoint's first line, carried as the CWT `iss` claim) and the 4-byte
/// key id of the signing key (carried as `kid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiptIssuer<'a> {
    /// The log origin.
    pub origin: &'a str,
    /// The C2SP key id of the signing key (`NoteVerifier::key_id`).
    pub key_id: u32,
}

/// The proof a receipt carries, as decoded (not yet verified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiptProof {
    /// An inclusion proof (`vdp` key -1).
    Inclusion {
        /// Tree size the root is for.
        tree_size: u64,
        /// Index of the leaf (the record's `seq`).
        leaf_index: u64,
        /// The audit path, bottom-up.
        path: Vec<Hash>,
    },
    /// A consistency proof (`vdp` key -2).
    Consistency {
        /// The older tree size.
        old_size: u64,
        /// The newer tree size, whose root is signed.
        new_size: u64,
        /// The consistency path.
        path: Vec<Hash>,
    },
}

/// Why a receipt could not be built or did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptError {
    /// The bytes are not a tagged `COSE_Sign1` of the shape this profile
    /// defines (headers, proof encoding, detached payload).
    #[error("malformed receipt: {0}")]
    Malformed(String),
    /// The receipt is of the other kind (inclusion where consistency was
    /// expected, or the reverse).
    #[error("wrong kind of receipt: expected {0}")]
    WrongKind(&'static str),
    /// The receipt's issuer (`iss`) is another log than the one asked
    /// about: every org's receipts share the server key, so only the
    /// issuer says whose log the root is.
    #[error("the receipt is of the log {found}, not of {expected}")]
    OtherLog {
        /// The log asked about (its origin).
        expected: String,
        /// The receipt's issuer.
        found: String,
    },
    /// The receipt names a key (`kid`) other than the one given.
    #[error("the receipt's kid {found} is not the key's id {expected:08x}")]
    KeyMismatch {
        /// The verifier's key id.
        expected: u32,
        /// The receipt's kid, in hex.
        found: String,
    },
    /// The proof is inconsistent with its sizes or with the given leaf or
    /// older root.
    #[error("proof: {0}")]
    Proof(#[from] ProofVerifyError),
    /// The signer failed (a key held elsewhere).
    #[error("signing: {0}")]
    Signer(#[from] crate::note::NoteError),
    /// The root the proof leads to is not the one the caller expected.
    #[error("the proof leads to root {found}, not the expected {expected}")]
    RootMismatch {
        /// The expected root (hex).
        expected: String,
        /// The recomputed root (hex).
        found: String,
    },
    /// The signature over the recomputed root does not verify.
    #[error("the signature does not verify over the recomputed root")]
    BadSignature,
    /// Building the CBOR failed (never for valid input).
    #[error("encoding the receipt failed: {0}")]
    Encode(String),
}

/// An inclusion receipt that verified: the leaf is at `leaf_index` in the
/// tree of `tree_size` leaves whose root `root` the key signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedInclusion {
    /// Tree size (unprotected in RFC 9942: see `docs/FORMAT.md`).
    pub tree_size: u64,
    /// Leaf index (the record's `seq`).
    pub leaf_index: u64,
    /// The signed root.
    pub root: Hash,
    /// The `iss` claim: the origin of the log the receipt speaks of.
    pub issuer: String,
}

/// A consistency receipt that verified: the tree of `old_size` leaves with
/// the given root is a prefix of the tree of `new_size` leaves whose root
/// `new_root` the key signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedConsistency {
    /// The older size.
    pub old_size: u64,
    /// The newer size.
    pub new_size: u64,
    /// The signed newer root.
    pub new_root: Hash,
    /// The `iss` claim: the origin of the log the receipt speaks of.
    pub issuer: String,
}

/// A receipt decoded and checked for shape, not yet verified: read its
/// proof with [`Receipt::proof`], verify it with [`Receipt::verify_inclusion`]
/// or [`Receipt::verify_consistency`].
#[derive(Debug, Clone)]
pub struct Receipt {
    sign1: CoseSign1,
    proof: ReceiptProof,
    key_id: Option<Vec<u8>>,
    issuer: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::{MemoryTree, consistency_proof, inclusion_proof, leaf_hash};
    use crate::note::NoteSigner;
    use proptest::prelude::*;

    fn signer() -> NoteSigner {
        NoteSigner::from_seed("cairn.test", &[7; 32]).expect("valid name")
    }

    fn tree(n: u64) -> MemoryTree {
        let mut t = MemoryTree::new();
        for i in 0..n {
            t.push(leaf_hash(&i.to_be_bytes()));
        }
        t
    }

    fn inclusion(signer: &NoteSigner, t: &MemoryTree, index: u64, size: u64) -> Vec<u8> {
        let issuer = ReceiptIssuer {
            origin: "cairn.test/acme",
            key_id: signer.verifier().key_id(),
        };
        let path = inclusion_proof(t, index, size).expect("in range");
        inclusion_receipt(
            &issuer,
            &leaf_hash(&index.to_be_bytes()),
            index,
            size,
            &path,
            &t.root_at(size),
            |m| signer.sign_raw(m),
        )
        .expect("valid proof")
    }

    fn consistency(signer: &NoteSigner, t: &MemoryTree, old: u64, new: u64) -> Vec<u8> {
        let issuer = ReceiptIssuer {
            origin: "cairn.test/acme",
            key_id: signer.verifier().key_id(),
        };
        let path = consistency_proof(t, old, new).expect("in range");
        consistency_receipt(
            &issuer,
            old,
            new,
            &path,
            &t.root_at(old),
            &t.root_at(new),
            |m| signer.sign_raw(m),
        )
        .expect("valid proof")
    }

    #[test]
    fn inclusion_receipt_has_the_profile_shape() {
        let s = signer();
        let t = tree(7);
        let bytes = inclusion(&s, &t, 4, 7);
        // Tag 18, then a 4-array whose protected bstr starts with a map of
        // four: alg -8, kid, CWT claims, vds 1.
        assert_eq!(&bytes[..2], &[0xd2, 0x84]);
        let r = Receipt::decode(&bytes).expect("decodes");
        assert_eq!(r.issuer(), "cairn.test/acme");
        assert_eq!(r.key_id(), Some(&s.verifier().key_id().to_be_bytes()[..]));
        let protected = r.sign1.protected.original_data.clone().expect("kept");
        assert_eq!(&protected[..3], &[0xa4, 0x01, 0x27]);
        assert!(protected.ends_with(&[0x19, 0x01, 0x8b, 0x01]));
        let v = r
            .verify_inclusion(
                &s.verifier(),
                &leaf_hash(&4u64.to_be_bytes()),
                Some(&t.root_at(7)),
            )
            .expect("verifies");
        assert_eq!((v.tree_size, v.leaf_index, v.root), (7, 4, t.root_at(7)));
    }

    /// The example of `docs/FORMAT.md` (7.8): leaves `leaf_hash(u64be(i))`
    /// for i in 0..3, the receipt of leaf 1 in the tree of 3, key
    /// `cairn.test` from the seed `[7; 32]`. Ed25519 is deterministic, so
    /// the bytes are fixed.
    #[test]
    fn published_example() {
        let s = signer();
        let bytes = inclusion(&s, &tree(3), 1, 3);
        assert_eq!(hex::encode(&bytes), EXAMPLE);
    }

    const EXAMPLE: &str = concat!(
        "d2845820a401270444c66fc03b0fa1016f636169726e2e746573742f61636d65",
        "19018b01a119018ca1208158488303018258203e7077fd2f66d689e0cee6a7cf",
        "5b37bf2dca7c979af356d0a31cbc5c85605c7d5820d81f51781eeb8f46a0e112",
        "e86ca335896ccc12cee00e6cfcf58a3501129dfc24f65840a614b636be8883f8",
        "67daaa5610dfc018bf4961d2dc9c314a32839afa9d312a724f1726e3e2b393dc",
        "17286c0934dfb3c45ef7cfd3094731451beb853ed8041f01",
    );

    #[test]
    fn wrong_leaf_key_root_or_kind_fail() {
        let s = signer();
        let t = tree(9);
        let bytes = inclusion(&s, &t, 3, 9);
        let key = s.verifier();
        let leaf = leaf_hash(&3u64.to_be_bytes());
        assert!(matches!(
            verify_inclusion_receipt(&bytes, &key, &leaf_hash(b"other"), None),
            Err(ReceiptError::BadSignature)
        ));
        let other = NoteSigner::from_seed("cairn.test", &[8; 32]).expect("valid");
        assert!(matches!(
            verify_inclusion_receipt(&bytes, &other.verifier(), &leaf, None),
            Err(ReceiptError::KeyMismatch { .. })
        ));
        assert!(matches!(
            verify_inclusion_receipt(&bytes, &key, &leaf, Some(&t.root_at(8))),
            Err(ReceiptError::RootMismatch { .. })
        ));
        assert!(matches!(
            verify_consistency_receipt(&bytes, &key, &t.root_at(3), None),
            Err(ReceiptError::WrongKind("consistency"))
        ));
    }

    #[test]
    fn builders_refuse_proofs_that_do_not_lead_to_the_root() {
        let s = signer();
        let t = tree(5);
        let issuer = ReceiptIssuer {
            origin: "o",
            key_id: 1,
        };
        let path = inclusion_proof(&t, 2, 5).expect("in range");
        let leaf = leaf_hash(&2u64.to_be_bytes());
        assert!(
            inclusion_receipt(&issuer, &leaf, 2, 5, &path, &t.root_at(4), |m| s
                .sign_raw(m))
            .is_err()
        );
        let cpath = consistency_proof(&t, 2, 5).expect("in range");
        assert!(
            consistency_receipt(&issuer, 2, 5, &cpath, &t.root_at(3), &t.root_at(5), |m| s
                .sign_raw(m))
            .is_err()
        );
        assert!(
            consistency_receipt(&issuer, 5, 5, &[], &t.root_at(5), &t.root_at(5), |m| s
                .sign_raw(m))
            .is_err()
        );
    }

    #[test]
    fn one_leaf_tree_has_an_empty_path() {
        let s = signer();
        let t = tree(1);
        let bytes = inclusion(&s, &t, 0, 1);
        let r = Receipt::decode(&bytes).expect("decodes");
        assert_eq!(
            r.proof(),
            &ReceiptProof::Inclusion {
                tree_size: 1,
                leaf_index: 0,
                path: vec![]
            }
        );
        r.verify_inclusion(&s.verifier(), &leaf_hash(&0u64.to_be_bytes()), None)
            .expect("verifies");
    }

    /// A receipt must name its log (`iss` in the protected CWT claims,
    /// FORMAT 7.8): one signed by the right key without it, or with it only
    /// in the unprotected header, is refused (a review's receipts of both
    /// kinds had verified, their issuer null).
    #[test]
    fn a_receipt_without_its_issuer_is_refused() {
        use coset::{CoseSign1Builder, TaggedCborSerializable as _};
        let s = signer();
        let t = tree(5);
        let genuine = CoseSign1::from_tagged_slice(&inclusion(&s, &t, 2, 5)).expect("decodes");
        let without_claims = |mut header: coset::Header| {
            header
                .rest
                .retain(|(label, _)| *label != coset::Label::Int(HEADER_CWT_CLAIMS));
            header
        };
        let mut unprotected_iss = genuine.unprotected.clone();
        unprotected_iss.rest.push((
            coset::Label::Int(HEADER_CWT_CLAIMS),
            coset::cbor::value::Value::Map(vec![(
                coset::cbor::value::Value::Integer(CWT_ISS.into()),
                coset::cbor::value::Value::Text("cairn.test/acme".into()),
            )]),
        ));
        for unprotected in [genuine.unprotected.clone(), unprotected_iss] {
            let protected = without_claims(genuine.protected.header.clone());
            let forged = CoseSign1Builder::new()
                .protected(protected)
                .unprotected(unprotected)
                .create_detached_signature(&t.root_at(5).0, b"", |m| {
                    s.sign_raw(m).expect("signs").to_vec()
                })
                .build()
                .to_tagged_vec()
                .expect("encodes");
            let refused = Receipt::decode(&forged).expect_err("no issuer");
            assert!(refused.to_string().contains("iss"), "{refused}");
        }
        assert!(Receipt::decode(&genuine.to_tagged_vec().expect("encodes")).is_ok());
    }

    #[test]
    fn every_single_byte_change_fails_or_changes_the_statement() {
        let s = signer();
        let key = s.verifier();
        let t = tree(13);
        let bytes = inclusion(&s, &t, 6, 13);
        let leaf = leaf_hash(&6u64.to_be_bytes());
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut altered = bytes.clone();
                altered[i] ^= flip;
                if let Ok(v) = verify_inclusion_receipt(&altered, &key, &leaf, None) {
                    // Only the unsigned tree size can change and still lead
                    // to the same signed root (RFC 9942 leaves it
                    // unprotected); never the leaf's index or root.
                    assert_eq!((v.leaf_index, v.root), (6, t.root_at(13)), "byte {i}");
                    assert_ne!(v.tree_size, 13, "byte {i} changed nothing");
                }
            }
        }
        let bytes = consistency(&s, &t, 5, 13);
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut altered = bytes.clone();
                altered[i] ^= flip;
                if let Ok(v) = verify_consistency_receipt(&altered, &key, &t.root_at(5), None) {
                    assert_eq!(v.new_root, t.root_at(13), "byte {i}");
                    assert_ne!((v.old_size, v.new_size), (5, 13), "byte {i}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn any_valid_inclusion_receipt_verifies(n in 1u64..80, i in 0u64..80, extra in 0u64..10) {
            let index = i % n;
            let t = tree(n + extra);
            let s = signer();
            let bytes = inclusion(&s, &t, index, n);
            let v = verify_inclusion_receipt(&bytes, &s.verifier(), &leaf_hash(&index.to_be_bytes()), Some(&t.root_at(n)));
            prop_assert_eq!(v.map(|v| (v.tree_size, v.leaf_index)), Ok((n, index)));
        }

        #[test]
        fn any_valid_consistency_receipt_verifies(new in 2u64..80, o in 1u64..80) {
            let old = 1 + o % (new - 1);
            let t = tree(new);
            let s = signer();
            let bytes = consistency(&s, &t, old, new);
            let v = verify_consistency_receipt(&bytes, &s.verifier(), &t.root_at(old), Some(&t.root_at(new)));
            prop_assert_eq!(v.map(|v| (v.old_size, v.new_size)), Ok((old, new)));
        }

        #[test]
        fn an_altered_byte_fails_or_changes_only_the_size(
            n in 1u64..40, i in 0u64..40, pos in any::<prop::sample::Index>(), flip in 1u8..=255,
        ) {
            let index = i % n;
            let t = tree(n);
            let s = signer();
            let mut bytes = inclusion(&s, &t, index, n);
            let at = pos.index(bytes.len());
            bytes[at] ^= flip;
            if let Ok(v) = verify_inclusion_receipt(&bytes, &s.verifier(), &leaf_hash(&index.to_be_bytes()), None) {
                prop_assert_eq!((v.leaf_index, v.root), (index, t.root_at(n)));
                prop_assert_ne!(v.tree_size, n);
            }
        }

        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Receipt::decode(&bytes);
        }
    }
}
