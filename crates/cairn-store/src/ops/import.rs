//! Importing a complete-log bundle as a new org: verified whole first,
//! then streamed into the store.

use crate::LedgerStore;
use cairn_core::note::NoteVerifier;

/// The outcome of [`import_bundle`].
#[derive(Debug)]
pub enum ImportOutcome {
    /// The bundle verified and its log was imported.
    Imported {
        /// The org imported.
        org_id: String,
        /// Entries imported.
        entries: u64,
        /// Whether the org is a read-only mirror (signed by another server).
        mirror: bool,
    },
    /// The bundle did not verify; nothing was written.
    Rejected(Box<cairn_core::bundle::BundleVerdict>),
}

/// Imports a bundle: verifies it completely first (with `keys` pinned, or
/// the bundle's own key if empty), then streams it into the store as the
/// log of its org. `open` opens the bundle afresh for each pass, so memory
/// stays constant; a line longer than `max_line` bytes is refused
/// ([`super::read_bundle_line`]).
pub fn import_bundle(
    store: &dyn LedgerStore,
    open: &dyn Fn() -> std::io::Result<Box<dyn std::io::BufRead>>,
    keys: &[NoteVerifier],
    max_line: usize,
    progress: &mut dyn FnMut(u64),
) -> Result<ImportOutcome, crate::ImportError> {
    use crate::ImportError;
    use cairn_core::bundle::{BundleHeader, BundleVerifier, decode_entry};
    let io = |e: std::io::Error| ImportError::Refused(format!("reading the bundle: {e}"));
    // Reads line `number` (counted from 1) of a pass.
    let read_line = |reader: &mut dyn std::io::BufRead, line: &mut Vec<u8>, number: u64| {
        super::read_bundle_line(reader, line, max_line).map_err(|e| match e {
            super::BundleLineError::Io(e) => io(e),
            refused => ImportError::Refused(
                refused
                    .refusal("the bundle", number)
                    .unwrap_or_else(|| refused.to_string()),
            ),
        })
    };
    let mut verifier = BundleVerifier::new(keys.to_vec());
    let mut reader = open().map_err(io)?;
    let mut line = Vec::new();
    for number in 1.. {
        line.clear();
        if read_line(&mut *reader, &mut line, number)? == 0
            || !verifier.push_bytes(cairn_core::bundle::trim_line_end(&line))
        {
            break;
        }
    }
    let verdict = verifier.finish();
    if !verdict.verdict.verified {
        return Ok(ImportOutcome::Rejected(Box::new(verdict)));
    }
    // The ids of the traces the bundle withholds, as their trace-erasure
    // records state them (a withheld entry's line does not carry its id).
    let withheld_ids: std::collections::HashMap<u64, String> =
        verdict.withheld_trace_ids.into_iter().collect();
    // The second pass verifies every line again as it imports it: the file
    // may have changed between the passes, and nothing unverified is
    // written (the import's transaction is rolled back on an error).
    let mut reader = open().map_err(io)?;
    let again = std::cell::RefCell::new(Some(BundleVerifier::new(keys.to_vec())));
    let mut number = 0u64;
    let mut next_line = || -> Result<Option<Vec<u8>>, ImportError> {
        let mut line = Vec::new();
        number += 1;
        if read_line(&mut *reader, &mut line, number)? == 0 {
            return Ok(None);
        }
        let line = cairn_core::bundle::trim_line_end(&line).to_vec();
        if let Some(v) = again.borrow_mut().as_mut()
            && !v.push_bytes(&line)
        {
            return Err(ImportError::Refused(
                "the bundle changed between the verification and the import".into(),
            ));
        }
        Ok(Some(line))
    };
    let changed = || ImportError::Refused("the bundle changed between passes".into());
    let text = |line: Vec<u8>| String::from_utf8(line).map_err(|_| changed());
    let header = BundleHeader::parse(&text(next_line()?.ok_or_else(changed)?)?)
        .map_err(ImportError::Refused)?;
    let checkpoint = cairn_core::json::from_str(&text(next_line()?.ok_or_else(changed)?)?)
        .map_err(|e| ImportError::Refused(format!("checkpoint line: {e}")))?;
    let note = checkpoint["checkpoint"]
        .as_str()
        .ok_or_else(|| ImportError::Refused("checkpoint line".into()))?
        .to_owned();
    let mut count = 0u64;
    let mut entries = std::iter::from_fn(|| {
        loop {
            let line = match next_line() {
                Ok(Some(line)) => line,
                Ok(None) => return Some(Err("the bundle changed between passes".to_owned())),
                Err(e) => return Some(Err(e.to_string())),
            };
            let line = match String::from_utf8(line) {
                Ok(line) => line,
                Err(_) => return Some(Err("the bundle changed between passes".to_owned())),
            };
            if line.starts_with("{\"consistency\"") {
                continue;
            }
            if line.starts_with("{\"end\"") {
                let verified = again
                    .borrow_mut()
                    .take()
                    .is_some_and(|v| v.finish().verdict.verified);
                return (!verified).then(|| Err("the bundle changed between passes".to_owned()));
            }
            count += 1;
            if count.is_multiple_of(4096) {
                progress(count);
            }
            return Some(decode_entry(&line).map(|(entry, _)| entry));
        }
    });
    let ours = store.server_key().to_string();
    if !header.log_keys.is_empty() && header.server_key != ours && !header.log_keys.contains(&ours)
    {
        return Err(ImportError::Refused(
            "this bundle's log changed its key (log_keys in its header): importing another server's rotated log is not supported yet; verify it with `cairn verify --bundle` instead".into(),
        ));
    }
    let entries_imported =
        store.import_log(&header.org_id, &header, &note, &mut entries, &withheld_ids)?;
    let (_, signer) = store.log_signer(&header.org_id)?;
    Ok(ImportOutcome::Imported {
        org_id: header.org_id,
        entries: entries_imported,
        mirror: signer != *store.server_key(),
    })
}
