//! Reading a receipt: [`Receipt::decode`] checks its shape strictly (one
//! deterministic encoding, the profile's headers, a detached payload, one
//! proof of one kind), then verifying recomputes the root from the leaf or
//! the older root and the proof and checks the signature over that root;
//! the one-call verifiers of both kinds. Apart from `receipt.rs`, which
//! holds what both sides share, because this is the verifying side,
//! anyone's.

use super::{
    CWT_ISS, HEADER_CWT_CLAIMS, HEADER_VDP, HEADER_VDS, Receipt, ReceiptError, ReceiptProof,
    VDP_CONSISTENCY, VDP_INCLUSION, VDS_RFC9162_SHA256, VerifiedConsistency, VerifiedInclusion,
};
use crate::hash::Hash;
use crate::merkle::{ProofVerifyError, consistency_root, inclusion_root};
use crate::note::NoteVerifier;
use coset::cbor::value::Value;
use coset::{
    CborSerializable as _, CoseSign1, Label, RegisteredLabelWithPrivate,
    TaggedCborSerializable as _, iana,
};

fn malformed(what: impl Into<String>) -> ReceiptError {
    ReceiptError::Malformed(what.into())
}

fn int_of(value: &Value) -> Option<i128> {
    match value {
        Value::Integer(i) => Some(i128::from(*i)),
        _ => None,
    }
}

fn uint_of(value: &Value, what: &str) -> Result<u64, ReceiptError> {
    int_of(value)
        .and_then(|i| u64::try_from(i).ok())
        .ok_or_else(|| malformed(format!("{what} is not an unsigned integer")))
}

impl Receipt {
    /// Decodes a receipt and checks its shape: tag 18, `alg` EdDSA and
    /// `vds` 1 protected, no `crit`, a detached payload, a 64-byte
    /// signature, and a `vdp` map with exactly one proof of one kind whose
    /// hashes are 32 bytes each.
    pub fn decode(bytes: &[u8]) -> Result<Receipt, ReceiptError> {
        let sign1 = CoseSign1::from_tagged_slice(bytes)
            .map_err(|e| malformed(format!("not a tagged COSE_Sign1: {e}")))?;
        // One encoding only (RFC 8949 deterministic encoding, labels in
        // the order written here): `undefined` for `nil`, a longer integer
        // or length form, an indefinite length or another key order would
        // otherwise let two different byte strings carry one receipt.
        let canonical = |original: &[u8], again: Result<Vec<u8>, coset::CoseError>| {
            if again.ok().as_deref() == Some(original) {
                Ok(())
            } else {
                Err(malformed("not in deterministic CBOR encoding"))
            }
        };
        canonical(bytes, sign1.clone().to_tagged_vec())?;
        if let Some(original) = &sign1.protected.original_data {
            canonical(original, sign1.protected.header.clone().to_vec())?;
        }
        let protected = &sign1.protected.header;
        if protected.alg != Some(RegisteredLabelWithPrivate::Assigned(iana::Algorithm::EdDSA)) {
            return Err(malformed("protected alg is not EdDSA (-8)"));
        }
        if !protected.crit.is_empty() {
            return Err(malformed(
                "crit names parameters this profile does not define",
            ));
        }
        let mut vds = None;
        let mut issuer = None;
        for (label, value) in &protected.rest {
            match label {
                Label::Int(HEADER_VDS) => vds = int_of(value),
                Label::Int(HEADER_CWT_CLAIMS) => {
                    let Value::Map(claims) = value else {
                        return Err(malformed("CWT claims are not a map"));
                    };
                    for (claim, v) in claims {
                        if int_of(claim) == Some(CWT_ISS.into()) {
                            let Value::Text(iss) = v else {
                                return Err(malformed("iss is not text"));
                            };
                            issuer = Some(iss.clone());
                        }
                    }
                }
                _ => {}
            }
        }
        // The issuer names the log: every org's receipts are signed by the
        // one server key, so a receipt without it would say nothing of
        // which org's log its root is (FORMAT 7.8: the labels are required).
        let issuer = issuer.ok_or_else(|| {
            malformed("no iss claim (the log's origin) in the protected CWT claims (15)")
        })?;
        if vds != Some(VDS_RFC9162_SHA256.into()) {
            return Err(malformed("protected vds is not 1 (RFC9162_SHA256)"));
        }
        if sign1.payload.is_some() {
            return Err(malformed("the payload must be detached (nil)"));
        }
        if sign1.signature.len() != 64 {
            return Err(malformed("an EdDSA signature is 64 bytes"));
        }
        let vdp = sign1
            .unprotected
            .rest
            .iter()
            .find(|(label, _)| *label == Label::Int(HEADER_VDP))
            .map(|(_, v)| v)
            .ok_or_else(|| malformed("no vdp (396) in the unprotected header"))?;
        let Value::Map(proofs) = vdp else {
            return Err(malformed("vdp is not a map"));
        };
        let [(kind, list)] = proofs.as_slice() else {
            return Err(malformed("vdp must hold exactly one kind of proof"));
        };
        let Value::Array(list) = list else {
            return Err(malformed("the proofs are not an array"));
        };
        let [Value::Bytes(encoded)] = list.as_slice() else {
            return Err(malformed("exactly one proof, as a bstr, is supported"));
        };
        let inner = Value::from_slice(encoded)
            .map_err(|e| malformed(format!("the proof is not one CBOR item: {e}")))?;
        canonical(encoded, inner.clone().to_vec())?;
        let Value::Array(fields) = inner else {
            return Err(malformed("the proof is not an array"));
        };
        let [a, b, Value::Array(hashes)] = fields.as_slice() else {
            return Err(malformed("the proof is not [uint, uint, [bstr]]"));
        };
        let path = hashes
            .iter()
            .map(|h| match h {
                Value::Bytes(bytes) => <[u8; 32]>::try_from(bytes.as_slice())
                    .map(Hash)
                    .map_err(|_| malformed("a path hash is not 32 bytes")),
                _ => Err(malformed("a path hash is not a bstr")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let proof = match int_of(kind) {
            Some(k) if k == i128::from(VDP_INCLUSION) => ReceiptProof::Inclusion {
                tree_size: uint_of(a, "tree_size")?,
                leaf_index: uint_of(b, "leaf_index")?,
                path,
            },
            Some(k) if k == i128::from(VDP_CONSISTENCY) => ReceiptProof::Consistency {
                old_size: uint_of(a, "tree_size_1")?,
                new_size: uint_of(b, "tree_size_2")?,
                path,
            },
            _ => return Err(malformed("vdp holds neither -1 nor -2")),
        };
        let key_id = (!protected.key_id.is_empty()).then(|| protected.key_id.clone());
        Ok(Receipt {
            sign1,
            proof,
            key_id,
            issuer,
        })
    }

    /// The proof, as decoded.
    pub fn proof(&self) -> &ReceiptProof {
        &self.proof
    }

    /// The `iss` claim: the origin of the log the receipt speaks of.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Whether the receipt is of the log `origin` (FORMAT 7.8: a verifier
    /// that knows the log it asks about compares the issuer).
    pub fn check_issuer(&self, origin: &str) -> Result<(), ReceiptError> {
        if self.issuer == origin {
            Ok(())
        } else {
            Err(ReceiptError::OtherLog {
                expected: origin.to_owned(),
                found: self.issuer.clone(),
            })
        }
    }

    /// The protected `kid`, when present.
    pub fn key_id(&self) -> Option<&[u8]> {
        self.key_id.as_deref()
    }

    fn check_key(&self, key: &NoteVerifier) -> Result<(), ReceiptError> {
        match &self.key_id {
            Some(kid) if kid.as_slice() != key.key_id().to_be_bytes() => {
                Err(ReceiptError::KeyMismatch {
                    expected: key.key_id(),
                    found: hex::encode(kid),
                })
            }
            _ => Ok(()),
        }
    }

    fn check_signature(&self, key: &NoteVerifier, root: &Hash) -> Result<(), ReceiptError> {
        self.sign1
            .verify_detached_signature(&root.0, b"", |sig, tbs| {
                let sig = ed25519_dalek::Signature::from_slice(sig)
                    .map_err(|_| ReceiptError::BadSignature)?;
                key.public_key()
                    .verify_strict(tbs, &sig)
                    .map_err(|_| ReceiptError::BadSignature)
            })
    }

    /// Verifies an inclusion receipt for `leaf` (the record's RFC 9162
    /// leaf hash): recomputes the root from the leaf and the path, checks
    /// it against `expected_root` when given (a checkpoint's), then checks
    /// the signature by `key` over it.
    pub fn verify_inclusion(
        &self,
        key: &NoteVerifier,
        leaf: &Hash,
        expected_root: Option<&Hash>,
    ) -> Result<VerifiedInclusion, ReceiptError> {
        let ReceiptProof::Inclusion {
            tree_size,
            leaf_index,
            path,
        } = &self.proof
        else {
            return Err(ReceiptError::WrongKind("inclusion"));
        };
        self.check_key(key)?;
        let root = inclusion_root(leaf, *leaf_index, *tree_size, path)?;
        if let Some(expected) = expected_root
            && *expected != root
        {
            return Err(ReceiptError::RootMismatch {
                expected: expected.to_hex(),
                found: root.to_hex(),
            });
        }
        self.check_signature(key, &root)?;
        Ok(VerifiedInclusion {
            tree_size: *tree_size,
            leaf_index: *leaf_index,
            root,
            issuer: self.issuer.clone(),
        })
    }

    /// Verifies a consistency receipt from an older tree whose root the
    /// caller holds (`old_root`, from a checkpoint or an inclusion receipt
    /// of that size): the proof must reproduce `old_root`, and the
    /// signature by `key` must hold over the newer root it yields, which
    /// must equal `expected_new_root` when given. One answer for proof and
    /// signature together, as RFC 9942 recommends.
    pub fn verify_consistency(
        &self,
        key: &NoteVerifier,
        old_root: &Hash,
        expected_new_root: Option<&Hash>,
    ) -> Result<VerifiedConsistency, ReceiptError> {
        let ReceiptProof::Consistency {
            old_size,
            new_size,
            path,
        } = &self.proof
        else {
            return Err(ReceiptError::WrongKind("consistency"));
        };
        self.check_key(key)?;
        if old_size >= new_size {
            return Err(ProofVerifyError::BadRequest("old size must be below new size").into());
        }
        let new_root = consistency_root(*old_size, *new_size, old_root, path)?;
        if let Some(expected) = expected_new_root
            && *expected != new_root
        {
            return Err(ReceiptError::RootMismatch {
                expected: expected.to_hex(),
                found: new_root.to_hex(),
            });
        }
        self.check_signature(key, &new_root)?;
        Ok(VerifiedConsistency {
            old_size: *old_size,
            new_size: *new_size,
            new_root,
            issuer: self.issuer.clone(),
        })
    }
}

/// Decodes and verifies an inclusion receipt in one call
/// ([`Receipt::decode`], then [`Receipt::verify_inclusion`]).
pub fn verify_inclusion_receipt(
    bytes: &[u8],
    key: &NoteVerifier,
    leaf: &Hash,
    expected_root: Option<&Hash>,
) -> Result<VerifiedInclusion, ReceiptError> {
    Receipt::decode(bytes)?.verify_inclusion(key, leaf, expected_root)
}

/// Decodes and verifies a consistency receipt in one call
/// ([`Receipt::decode`], then [`Receipt::verify_consistency`]).
pub fn verify_consistency_receipt(
    bytes: &[u8],
    key: &NoteVerifier,
    old_root: &Hash,
    expected_new_root: Option<&Hash>,
) -> Result<VerifiedConsistency, ReceiptError> {
    Receipt::decode(bytes)?.verify_consistency(key, old_root, expected_new_root)
}
