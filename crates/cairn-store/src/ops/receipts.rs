//! COSE receipts (RFC 9942) for an org log, signed with the server key:
//! inclusion receipts for records and consistency receipts between sizes,
//! all tied to a checkpoint this server signed.
//!
//! Nothing stored is signed on trust: the leaf is recomputed from the
//! entry, every root below the checkpoint's size is checked against the
//! checkpoint's root with a consistency proof, and the core builds a
//! receipt only over a root its proof leads to. A tree whose stored nodes
//! disagree with the signed checkpoint is reported as corrupt, never
//! receipted.

use crate::{LedgerStore, StoreError, StoredCheckpoint};
use cairn_core::Hash;
use cairn_core::checkpoint::{VerifiedCheckpoint, verify_checkpoint};
use cairn_core::log::log_origin;
use cairn_core::merkle::verify_consistency;
use cairn_core::receipt::{ReceiptIssuer, consistency_receipt, inclusion_receipt};

/// Why a receipt could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptOpError {
    /// Storage failed, or the stored tree contradicts the signed
    /// checkpoint ([`StoreError::Corrupt`]).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The entry or size is not in the tree the checkpoint covers.
    #[error("{0}")]
    OutOfRange(String),
    /// An argument cannot make a receipt (a size of 0 or past the
    /// checkpoint's, an entry at or past the size asked, an old size 0 or
    /// not below the new one): `field` names it.
    #[error("{message}")]
    Invalid {
        /// The argument at fault (`seq`, `size`, `old`).
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The log's checkpoint is not signed by this server's key (an
    /// imported mirror): receipts come from the server that holds the
    /// log's key.
    #[error("this org's log is signed by another server's key (a mirror); ask that server")]
    ForeignLog,
}

/// Makes receipts for one org's log against one of its checkpoints.
pub struct Receipts<'a> {
    store: &'a dyn LedgerStore,
    org_id: String,
    origin: String,
    checkpoint: VerifiedCheckpoint,
}

impl<'a> Receipts<'a> {
    /// Receipts against `checkpoint`, which must be signed by this
    /// server's key for the org's origin.
    pub fn new(
        store: &'a dyn LedgerStore,
        org_id: &str,
        checkpoint: &StoredCheckpoint,
    ) -> Result<Receipts<'a>, ReceiptOpError> {
        let origin = log_origin(store.server_name(), org_id);
        let keys = store.log_keys(org_id)?;
        let checkpoint = verify_checkpoint(&checkpoint.note, &origin, &keys)
            .map_err(|_| ReceiptOpError::ForeignLog)?;
        if store.signer().verifier() != *store.server_key() {
            return Err(ReceiptOpError::ForeignLog);
        }
        Ok(Receipts {
            store,
            org_id: org_id.to_owned(),
            origin,
            checkpoint,
        })
    }

    /// The size of the checkpoint receipts are made against.
    pub fn checkpoint_size(&self) -> u64 {
        self.checkpoint.checkpoint().size
    }

    fn issuer(&self) -> ReceiptIssuer<'_> {
        ReceiptIssuer {
            origin: &self.origin,
            key_id: self.store.server_key().key_id(),
        }
    }

    /// The root at `size` (at most the checkpoint's), proven consistent
    /// with the checkpoint's signed root.
    fn root_at(&self, size: u64) -> Result<Hash, ReceiptOpError> {
        let cp = self.checkpoint.checkpoint();
        if size == cp.size {
            return Ok(cp.root);
        }
        let root = self.store.root_at(&self.org_id, size)?;
        let proof = self.store.consistency_proof(&self.org_id, size, cp.size)?;
        verify_consistency(size, cp.size, &root, &cp.root, &proof).map_err(|e| {
            StoreError::Corrupt(format!(
                "the stored tree at size {size} is not consistent with the checkpoint of size {}: {e}",
                cp.size
            ))
        })?;
        Ok(root)
    }

    /// The inclusion receipt of entry `seq` in the tree of `size` entries
    /// (default: the checkpoint's size).
    pub fn inclusion(&self, seq: u64, size: Option<u64>) -> Result<Vec<u8>, ReceiptOpError> {
        let cp_size = self.checkpoint_size();
        let size = size.unwrap_or(cp_size);
        // As the inclusion proofs answer (`GET /v1/proofs/inclusion`).
        if size == 0 || size > cp_size {
            return Err(ReceiptOpError::Invalid {
                field: "size",
                message: format!("size must be 1 to the checkpoint's size ({cp_size}), not {size}"),
            });
        }
        if seq >= cp_size {
            return Err(ReceiptOpError::OutOfRange(format!(
                "entry {seq} is not in the log the checkpoint covers ({cp_size} entries)"
            )));
        }
        if seq >= size {
            return Err(ReceiptOpError::Invalid {
                field: "seq",
                message: format!(
                    "entry {seq} is not in the log's first {size} entries: give a size above {seq}"
                ),
            });
        }
        let mut entry = None;
        self.store
            .read_log(&self.org_id, seq, seq + 1, &mut |stored| {
                entry = Some(stored);
                false
            })?;
        let stored = entry.ok_or_else(|| {
            StoreError::Corrupt(format!("entry {seq} is missing below the checkpoint"))
        })?;
        let leaf = stored
            .entry
            .map_err(|e| StoreError::Corrupt(format!("entry {seq} does not parse: {e}")))?
            .leaf_hash();
        if leaf != stored.leaf {
            return Err(StoreError::Corrupt(format!(
                "entry {seq}: the stored leaf hash is not the entry's"
            ))
            .into());
        }
        let path = self.store.inclusion_proof(&self.org_id, seq, size)?;
        let root = self.root_at(size)?;
        let signer = self.store.signer();
        inclusion_receipt(&self.issuer(), &leaf, seq, size, &path, &root, |m| {
            signer.sign_raw(m)
        })
        .map_err(|e| {
            StoreError::Corrupt(format!(
                "entry {seq} is not proven in the tree of size {size}: {e}"
            ))
            .into()
        })
    }

    /// The consistency receipt from size `old` to size `new` (default: the
    /// checkpoint's size), signed over the root at `new`.
    pub fn consistency(&self, old: u64, new: Option<u64>) -> Result<Vec<u8>, ReceiptOpError> {
        let cp_size = self.checkpoint_size();
        let new = new.unwrap_or(cp_size);
        if old == 0 || old >= new {
            return Err(ReceiptOpError::Invalid {
                field: "old",
                message: format!(
                    "old must be 1 to new - 1 ({}), not {old}: equal sizes prove nothing",
                    new.saturating_sub(1)
                ),
            });
        }
        if new > cp_size {
            return Err(ReceiptOpError::OutOfRange(format!(
                "a log of size {new} (the checkpoint covers {cp_size})"
            )));
        }
        let new_root = self.root_at(new)?;
        let old_root = self.store.root_at(&self.org_id, old)?;
        let path = self.store.consistency_proof(&self.org_id, old, new)?;
        let signer = self.store.signer();
        consistency_receipt(&self.issuer(), old, new, &path, &old_root, &new_root, |m| {
            signer.sign_raw(m)
        })
        .map_err(|e| {
            StoreError::Corrupt(format!(
                "the stored tree at size {old} is not consistent with size {new}: {e}"
            ))
            .into()
        })
    }
}
