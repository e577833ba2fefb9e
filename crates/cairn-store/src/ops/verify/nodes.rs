//! The stored subtree hashes (`nodes`) compared with verification's own
//! fold of the leaves: proofs, receipts' inclusion paths and the roots of
//! sizes no checkpoint signed are computed from them, so a row edited by
//! someone with the database would have the server hand out proofs that
//! fail while `cairn verify` said the store was sound.
//!
//! Each subtree the verification closes at a stored level is compared
//! with its row, read a page at a time per level in index order (memory
//! flat in the log's size: one page per level). Only subtrees inside the
//! log's size when the verification started are compared: their rows were
//! committed with the entries that closed them, before that size was read,
//! so an append running beside the verification cannot make a row look
//! missing or wrong. A missing row is a failure too, reported after the
//! log (so that it hides no failure of the log itself): every append
//! writes the rows of the subtrees it completes, so only someone with the
//! database removes one, and readers then compute each proof over it from
//! the level below (`engine::stored_subtree`): right, but slower.

use crate::engine::{MAX_NODE_LEVEL, NODE_STRIDE};
use crate::{LedgerStore, StoreError, StoredNode};
use cairn_core::Hash;
use std::collections::VecDeque;

/// Rows read at a time, per level.
const PAGE: u32 = 1024;

/// One level's rows, read ahead in index order.
struct LevelRows {
    page: VecDeque<StoredNode>,
    /// The index the next page starts at (at the least: never below the
    /// subtree asked for); `None` once the level's rows are exhausted.
    next: Option<u64>,
}

impl Default for LevelRows {
    fn default() -> Self {
        LevelRows {
            page: VecDeque::new(),
            next: Some(0),
        }
    }
}

/// The stored subtree hashes of one org, compared as the verification
/// closes each subtree.
pub(super) struct StoredNodes<'a> {
    store: &'a dyn LedgerStore,
    org_id: &'a str,
    /// Subtrees lying wholly within this many leaves are compared.
    within: u64,
    /// By stored level: `levels[k]` holds level `(k + 1) * NODE_STRIDE`.
    levels: Vec<LevelRows>,
    /// The first subtree found with no row, as (level, index).
    missing: Option<(u32, u64)>,
    /// When the org's stored tree is being rebuilt (`cairn admin
    /// repair-tree`): every stored-level subtree the fold closed, as
    /// (level, index, hash), instead of comparing the rows.
    rebuilt: Option<Vec<(u32, u64, Hash)>>,
}

impl<'a> StoredNodes<'a> {
    pub(super) fn new(store: &'a dyn LedgerStore, org_id: &'a str, within: u64) -> Self {
        StoredNodes {
            store,
            org_id,
            within,
            levels: Vec::new(),
            missing: None,
            rebuilt: None,
        }
    }

    /// Collects the subtrees the fold closes instead of comparing them
    /// with their rows: what [`StoredNodes::into_rebuilt`] returns.
    pub(super) fn rebuilding(mut self) -> Self {
        self.rebuilt = Some(Vec::new());
        self
    }

    /// The stored-level subtrees the fold closed, in the order it closed
    /// them (`None` unless [`StoredNodes::rebuilding`]).
    pub(super) fn into_rebuilt(self) -> Option<Vec<(u32, u64, Hash)>> {
        self.rebuilt
    }

    /// What verification reports after the log if a subtree had no row.
    pub(super) fn missing_row(&self) -> Option<String> {
        self.missing.map(|(level, index)| {
            format!(
                "the stored tree has no row for the node at level {level}, index {index} (leaves {} to {}), which the append of its last leaf wrote: it was removed; readers compute such subtrees from the stored level below, right but slower",
                index << level,
                ((index + 1) << level) - 1
            )
        })
    }

    /// Compares the subtree `(level, index)` the verification computed as
    /// `hash` with its stored row: `Some(detail)` when there is more than
    /// one, or one that says otherwise; a missing one is noted for
    /// [`StoredNodes::missing_row`].
    pub(super) fn check(
        &mut self,
        level: u32,
        index: u64,
        hash: &Hash,
    ) -> Result<Option<String>, StoreError> {
        if level == 0 || !level.is_multiple_of(NODE_STRIDE) {
            return Ok(None);
        }
        // The subtree's end, as a leaf count (levels stay below 64 and
        // indexes below 2^40, so this cannot overflow a u128).
        let end = (u128::from(index) + 1) << level;
        if end > u128::from(self.within) {
            return Ok(None);
        }
        if let Some(rebuilt) = &mut self.rebuilt {
            rebuilt.push((level, index, *hash));
            return Ok(None);
        }
        let slot = (level / NODE_STRIDE - 1) as usize;
        if self.levels.len() <= slot {
            self.levels.resize_with(slot + 1, LevelRows::default);
        }
        let rows = &mut self.levels[slot];
        loop {
            // Rows below the index were compared or belong to no subtree
            // this verification closes (a repeated or out-of-order index).
            while rows.page.front().is_some_and(|node| node.index < index) {
                rows.page.pop_front();
            }
            if !rows.page.is_empty() {
                break;
            }
            let Some(from) = rows.next.map(|next| next.max(index)) else {
                break;
            };
            let page = self.store.tree_nodes_from(self.org_id, level, from, PAGE)?;
            rows.next = match page.last() {
                Some(last) if page.len() == PAGE as usize => last.index.checked_add(1),
                _ => None,
            };
            if page.is_empty() {
                break;
            }
            rows.page.extend(page);
        }
        match rows.page.front() {
            Some(node) if node.index == index => {
                let detail = if node.rows != 1 {
                    Some(format!(
                        "the stored tree holds {} rows for the node at level {level}, index {index} (the table's key removed): readers would not know which to use",
                        node.rows
                    ))
                } else if node.hash.as_deref() != Some(hash.as_bytes().as_slice()) {
                    Some(format!(
                        "the stored tree node at level {level}, index {index} (which proofs and roots are computed from) is {}, the log's is {hash}",
                        shown(node.hash.as_deref())
                    ))
                } else {
                    None
                };
                rows.page.pop_front();
                Ok(detail)
            }
            _ => {
                self.missing.get_or_insert((level, index));
                Ok(None)
            }
        }
    }
}

/// A stored subtree hash past the log's end, if the store holds one: the
/// append that completes that subtree would be refused (its row is taken),
/// so the org could no longer grow past it. The log's size is read before
/// the rows and again after them: a row an append wrote meanwhile
/// (committed with its entries) lies inside the second size, and up to
/// [`PAST_END_ROWS`] rows per level past the first size are looked at, so
/// that such rows cannot hide a planted one behind them. Levels 4 to 40 (a
/// log holds fewer than 2^40 entries).
pub(super) fn planted_past_end(
    store: &dyn LedgerStore,
    org_id: &str,
) -> Result<Option<String>, StoreError> {
    let before = store.log_size(org_id)?;
    let mut found = Vec::new();
    for level in (NODE_STRIDE..=MAX_NODE_LEVEL).step_by(NODE_STRIDE as usize) {
        // The first subtree that ends past `before` entries.
        let first_past = before >> level;
        for node in store.tree_nodes_from(org_id, level, first_past, PAST_END_ROWS)? {
            found.push((level, node.index));
        }
    }
    if found.is_empty() {
        return Ok(None);
    }
    let size = store.log_size(org_id)?;
    Ok(found
        .into_iter()
        .find(|&(level, index)| (u128::from(index) + 1) << level > u128::from(size))
        .map(|(level, index)| {
            format!(
                "the stored tree holds a node at level {level}, index {index}, past the log's end (size {size}): the append that completes that subtree would be refused"
            )
        }))
}

/// Rows past the log's size read per level by [`planted_past_end`].
const PAST_END_ROWS: u32 = 64;

/// A stored hash as a person reads it: hex, or what it is instead.
fn shown(stored: Option<&[u8]>) -> String {
    match stored.map(<[u8; 32]>::try_from) {
        Some(Ok(bytes)) => Hash(bytes).to_string(),
        Some(Err(_)) => format!("{} bytes, not a hash", stored.map_or(0, <[u8]>::len)),
        None => "no hash (a null, or not a blob)".to_owned(),
    }
}
