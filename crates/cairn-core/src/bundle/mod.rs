//! Export bundles, format 2: a self-contained, streamable file (JSON Lines)
//! holding log entries, the checkpoint they are proven against, the proofs,
//! the signed statement of what a partial bundle selects, and the server's
//! public key, verifiable offline.
//!
//! ```text
//! line 1      {"cairn_bundle":2, "server_name", "org_id", "origin", "server_key", "complete_log", "exported_at"}
//! line 2      {"checkpoint": "<signed note>"}
//! then        {"consistency": {"old_size": M, "proof": [...]}}      zero or more, increasing M
//! then        {"selection": {...}, "note": "<signed note>"}          partial bundles only
//! then        one log entry per line, in increasing seq, each with "proof" unless complete_log
//! last line   {"end": {"entries": N}}
//! ```
//!
//! A bundle of the whole log (`complete_log: true`) carries every entry
//! from seq 0 to the checkpoint's size and no proofs: the verifier rebuilds
//! the tree. A partial bundle carries what its
//! [`Selection`](crate::selection::Selection) lists, each entry with its
//! inclusion proof. Every entry must be covered by the signed checkpoint;
//! nothing may be added or dropped without the verifier naming it.
//! `docs/FORMAT.md` section 10 specifies every member and the order of the
//! checks.
//!
//! This file holds what every part shares; the lines' format (writing each
//! line, reading an entry line) is in `lines`, the streaming verifier in
//! `verifier`, the header line in `header`, lines prepared apart from each
//! other in `prepared`, and the typed decoder of plain step lines in `fast`.

use serde_json::{Map, Value};

/// Format version written in the header's `cairn_bundle` member.
pub const BUNDLE_VERSION: u64 = 2;

/// Longest consistency proof a line may carry (twice the height of a tree
/// of 2^64 leaves).
const MAX_PROOF_HASHES: usize = 128;

mod fast;
mod header;
mod lines;
mod prepared;
mod verifier;
#[doc(hidden)]
pub use fast::assert_fast_agrees;
pub use header::{BundleHeader, NOT_A_BUNDLE};
use lines::decode_entry_value;
pub use lines::{
    ProvenEntry, checkpoint_line, consistency_line, decode_entry, encode_entry, end_line,
    selection_line,
};
pub use prepared::PreparedLine;
pub use verifier::{BundleVerdict, BundleVerifier};

fn exact_members(obj: &Map<String, Value>, members: &[&str], what: &str) -> Result<(), String> {
    if let Some(k) = obj.keys().find(|k| !members.contains(&k.as_str())) {
        return Err(format!("unknown member {k:?} in the {what}"));
    }
    if let Some(m) = members.iter().find(|m| !obj.contains_key(**m)) {
        return Err(format!("the {what} lacks {m:?}"));
    }
    Ok(())
}

/// A line as read, without its line ending (`\n` or `\r\n`).
pub fn trim_line_end(line: &[u8]) -> &[u8] {
    match line.strip_suffix(b"\n") {
        Some(line) => line.strip_suffix(b"\r").unwrap_or(line),
        None => line,
    }
}

/// The lines of a bundle held in memory, split at `\n` only, for
/// [`BundleVerifier::push_bytes`].
pub fn bundle_lines(bundle: &[u8]) -> impl Iterator<Item = &[u8]> {
    bundle.split_inclusive(|&b| b == b'\n').map(trim_line_end)
}
