//! Issuing a receipt: the inclusion or consistency proof checked against
//! its root first, then encoded in the profile's headers and signed over
//! the root through a callback (the key stays with the caller). Apart from
//! `receipt.rs`, which holds what both sides share, because this is the
//! issuing side, the server's.

use super::{
    CWT_ISS, HEADER_CWT_CLAIMS, HEADER_VDP, HEADER_VDS, ReceiptError, ReceiptIssuer,
    VDP_CONSISTENCY, VDP_INCLUSION, VDS_RFC9162_SHA256,
};
use crate::hash::Hash;
use crate::merkle::ProofVerifyError;
use coset::cbor::value::Value;
use coset::{
    CborSerializable as _, CoseSign1Builder, HeaderBuilder, TaggedCborSerializable as _, iana,
};

/// Builds an inclusion receipt for `leaf` at `leaf_index` in the tree of
/// `tree_size` leaves with root `root`. The proof is checked first: a
/// receipt is never signed over a root its proof does not lead to.
/// `sign` returns the Ed25519 signature of the bytes it is given.
pub fn inclusion_receipt(
    issuer: &ReceiptIssuer<'_>,
    leaf: &Hash,
    leaf_index: u64,
    tree_size: u64,
    path: &[Hash],
    root: &Hash,
    sign: impl FnOnce(&[u8]) -> Result<[u8; 64], crate::note::NoteError>,
) -> Result<Vec<u8>, ReceiptError> {
    crate::merkle::verify_inclusion(leaf, leaf_index, tree_size, path, root)?;
    build(
        issuer,
        VDP_INCLUSION,
        proof_bytes(tree_size, leaf_index, path)?,
        root,
        sign,
    )
}

/// Builds a consistency receipt from the tree of `old_size` leaves (root
/// `old_root`) to the tree of `new_size` leaves (root `new_root`, the one
/// signed). The proof is checked first; equal sizes are refused (their
/// proof is empty, which the profile's CDDL does not allow, and proves
/// nothing).
pub fn consistency_receipt(
    issuer: &ReceiptIssuer<'_>,
    old_size: u64,
    new_size: u64,
    path: &[Hash],
    old_root: &Hash,
    new_root: &Hash,
    sign: impl FnOnce(&[u8]) -> Result<[u8; 64], crate::note::NoteError>,
) -> Result<Vec<u8>, ReceiptError> {
    if old_size >= new_size {
        return Err(ProofVerifyError::BadRequest("old size must be below new size").into());
    }
    crate::merkle::verify_consistency(old_size, new_size, old_root, new_root, path)?;
    build(
        issuer,
        VDP_CONSISTENCY,
        proof_bytes(old_size, new_size, path)?,
        new_root,
        sign,
    )
}

/// `bstr .cbor [a, b, [* bstr]]`: the encoded proof array.
fn proof_bytes(a: u64, b: u64, path: &[Hash]) -> Result<Vec<u8>, ReceiptError> {
    Value::Array(vec![
        Value::Integer(a.into()),
        Value::Integer(b.into()),
        Value::Array(path.iter().map(|h| Value::Bytes(h.0.to_vec())).collect()),
    ])
    .to_vec()
    .map_err(|e| ReceiptError::Encode(e.to_string()))
}

fn build(
    issuer: &ReceiptIssuer<'_>,
    proof_key: i64,
    proof: Vec<u8>,
    root: &Hash,
    sign: impl FnOnce(&[u8]) -> Result<[u8; 64], crate::note::NoteError>,
) -> Result<Vec<u8>, ReceiptError> {
    // Labels in the order of RFC 8949's deterministic encoding: 1, 4, 15, 395.
    let protected = HeaderBuilder::new()
        .algorithm(iana::Algorithm::EdDSA)
        .key_id(issuer.key_id.to_be_bytes().to_vec())
        .value(
            HEADER_CWT_CLAIMS,
            Value::Map(vec![(
                Value::Integer(CWT_ISS.into()),
                Value::Text(issuer.origin.to_owned()),
            )]),
        )
        .value(HEADER_VDS, Value::Integer(VDS_RFC9162_SHA256.into()))
        .build();
    let unprotected = HeaderBuilder::new()
        .value(
            HEADER_VDP,
            Value::Map(vec![(
                Value::Integer(proof_key.into()),
                Value::Array(vec![Value::Bytes(proof)]),
            )]),
        )
        .build();
    let mut failure = None;
    let receipt = CoseSign1Builder::new()
        .protected(protected)
        .unprotected(unprotected)
        .create_detached_signature(&root.0, b"", |tbs| match sign(tbs) {
            Ok(signature) => signature.to_vec(),
            Err(e) => {
                failure = Some(e);
                Vec::new()
            }
        })
        .build();
    if let Some(e) = failure {
        return Err(ReceiptError::Signer(e));
    }
    receipt
        .to_tagged_vec()
        .map_err(|e| ReceiptError::Encode(e.to_string()))
}
