//! `cairn admin repair-tree`: the stored subtree rows (`nodes`) made the
//! log's again after someone with the database removed or edited them.
//!
//! The rows are derived state (proofs, receipts' paths and the roots of
//! sizes no checkpoint signed are computed from them), so they are
//! rebuilt from the one thing that is evidence: the log's records, folded
//! by a verification of the org that must pass first. A log whose records
//! or checkpoints do not verify is not a source to rebuild from, and is
//! left as it is.

use super::{StoreVerdict, verify_org_log};
use crate::{LedgerStore, StoreError, TreeRowsRewritten};

/// The outcome of [`repair_tree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeRepair {
    /// The verification of the org's records and checkpoints the rebuild
    /// rests on (its stored subtree rows not compared, its derived tables
    /// not checked). When it failed nothing was written.
    pub records: StoreVerdict,
    /// What was changed in the rows, when the records verified.
    pub rewritten: Option<TreeRowsRewritten>,
}

/// Verifies the org's records and checkpoints (as [`super::verify_org`]
/// does, with the stored keys, without comparing the stored subtree rows)
/// and, when they verify, makes its stored subtree rows those of the log
/// ([`LedgerStore::rewrite_tree_nodes`]). Holds every rebuilt subtree in
/// memory until it is written: about 3 bytes per entry of the log (48
/// bytes for each of the entries' sixteenth, 256th, ... subtrees).
/// `progress` is called with the number of entries checked.
pub fn repair_tree(
    store: &dyn LedgerStore,
    org_id: &str,
    progress: &mut dyn FnMut(u64),
) -> Result<TreeRepair, StoreError> {
    let (records, rebuilt) = verify_org_log(store, org_id, &[], &[], progress, true)?;
    let rewritten = match rebuilt {
        Some(rebuilt) if records.verdict.verified => {
            Some(store.rewrite_tree_nodes(org_id, &rebuilt)?)
        }
        _ => None,
    };
    Ok(TreeRepair { records, rewritten })
}
