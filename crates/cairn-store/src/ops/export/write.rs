//! Writing a planned bundle: its lines read from the log a batch at a
//! time, the read let go, then written.

use super::{
    ExportError, ExportPlan, ExportSummary, erased_after, trace_erasures_after, traces_erased_after,
};
use crate::{LedgerStore, StoreError};
use cairn_core::bundle::{
    checkpoint_line, consistency_line, encode_entry, end_line, selection_line,
};
use cairn_core::detail::DetailLevel;
use cairn_core::log::{LogEntry, LogRecord, OpRecord};
use std::io::Write;

/// Bytes of bundle lines read before they are written: each read of the
/// log (its connection and snapshot) ends before a slow client is
/// written to, and what is held is this and one line, whatever the
/// records (a chunk of 1,024 large records held whole had made a
/// session's export hold gigabytes).
const WRITE_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// The lines of the entries at the start of `seqs` (ascending, one per
/// seq), each made by `line_of`, read until they hold
/// [`WRITE_BATCH_BYTES`] (at least one, unless `seqs` is empty); an entry
/// the log no longer holds is an error.
fn read_lines(
    store: &dyn LedgerStore,
    org_id: &str,
    seqs: &[u64],
    line_of: &mut dyn FnMut(u64, Result<LogEntry, String>) -> Result<String, ExportError>,
) -> Result<Vec<String>, ExportError> {
    let mut lines = Vec::new();
    let mut bytes = 0usize;
    let mut wanted = seqs.iter();
    let mut vanished = None;
    let mut failure = None;
    store.read_entries(org_id, seqs, &mut |stored| {
        let expected = wanted.next();
        if expected != Some(&stored.seq) {
            vanished = Some(*expected.unwrap_or(&stored.seq));
            return false;
        }
        match line_of(stored.seq, stored.entry) {
            Ok(line) => {
                bytes = bytes.saturating_add(line.len());
                lines.push(line);
                bytes < WRITE_BATCH_BYTES
            }
            Err(e) => {
                failure = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    let missing = vanished.or_else(|| (lines.is_empty()).then(|| seqs.first().copied()).flatten());
    if let Some(seq) = missing {
        return Err(StoreError::Corrupt(format!("entry {seq} vanished")).into());
    }
    Ok(lines)
}

/// Writes a planned bundle. If a step was erased while it was written, the
/// end line is left out (the bundle then does not verify) and
/// [`ExportError::Changed`] is returned.
pub fn write_export(
    store: &dyn LedgerStore,
    plan: &ExportPlan,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<ExportSummary, ExportError> {
    let org_id = &plan.org_id;
    let size = plan.checkpoint.size;
    writeln!(out, "{}", plan.header.to_line())?;
    // The checkpoint with the witnesses' cosignatures stored for it, so a
    // verifier with a witness policy can check them offline.
    let mut note = plan.checkpoint.note.clone();
    for line in store.cosignatures(org_id, size)? {
        note.push_str(&line);
        note.push('\n');
    }
    writeln!(out, "{}", checkpoint_line(&note))?;
    if let Some((old, proof)) = &plan.consistency {
        writeln!(out, "{}", consistency_line(*old, proof))?;
    }
    let mut written = 0u64;
    let mut sessions = plan.sessions;
    match &plan.partial {
        None => {
            // Read a batch of lines, then write them: a slow client holds
            // no read of the log.
            let mut from = 0;
            while from < size {
                let mut failure: Option<ExportError> = None;
                let (mut lines, mut bytes, mut next) = (Vec::new(), 0usize, from);
                store.read_log(org_id, from, size, &mut |stored| {
                    next = stored.seq + 1;
                    match stored.entry {
                        Ok(entry) => {
                            if let LogRecord::Op {
                                record: OpRecord::SessionStart(_),
                                ..
                            } = &entry.record
                            {
                                sessions += 1;
                            }
                            let line = encode_entry(&entry, None);
                            bytes = bytes.saturating_add(line.len());
                            lines.push(line);
                            bytes < WRITE_BATCH_BYTES
                        }
                        Err(reason) => {
                            failure = Some(
                                StoreError::Corrupt(format!("entry {}: {reason}", stored.seq))
                                    .into(),
                            );
                            false
                        }
                    }
                })?;
                if let Some(e) = failure {
                    return Err(e);
                }
                for line in &lines {
                    writeln!(out, "{line}")?;
                    written += 1;
                    if written.is_multiple_of(4096) {
                        progress(written);
                    }
                }
                if lines.is_empty() || next <= from {
                    // The log holds nothing more below the size: the
                    // verifier reports what is missing.
                    break;
                }
                from = next;
            }
            if erased_after(store, org_id, size, None)?.is_some()
                || !trace_erasures_after(store, org_id, size)?.is_empty()
            {
                return Err(ExportError::Changed);
            }
        }
        Some((selection, note, seqs)) => {
            writeln!(out, "{}", selection_line(selection, note))?;
            // Proved a chunk at a time: the proofs of one chunk share
            // their upper subtrees, read once (memory bounded by the chunk).
            for chunk in seqs.chunks(1024) {
                let mut proofs = store.inclusion_proofs(org_id, chunk, size)?.into_iter();
                let mut line_of = |seq: u64, entry: Result<LogEntry, String>| {
                    let mut entry = entry
                        .map_err(|reason| StoreError::Corrupt(format!("entry {seq}: {reason}")))?;
                    let proof = proofs.next().ok_or_else(|| {
                        StoreError::Corrupt(format!("no inclusion proof for entry {seq}"))
                    })?;
                    if let LogRecord::Step(record) = &mut entry.record
                        && plan.level < DetailLevel::Full
                    {
                        record
                            .redact(plan.level)
                            .map_err(|e| ExportError::Level(e.to_string()))?;
                    }
                    Ok(encode_entry(&entry, Some(&proof)))
                };
                // A batch of lines read, then written: a slow client holds
                // no read of the log.
                let mut at = 0;
                while at < chunk.len() {
                    let lines = read_lines(store, org_id, &chunk[at..], &mut line_of)?;
                    at += lines.len();
                    for line in lines {
                        writeln!(out, "{line}")?;
                        written += 1;
                        if written.is_multiple_of(1024) {
                            progress(written);
                        }
                    }
                }
            }
            // Steps erased while written matter where the payload shows;
            // a trace withheld while written, at every level.
            let late = trace_erasures_after(store, org_id, size)?;
            for claim in &selection.sessions {
                let session = Some(claim.session_id.as_str());
                let steps = match plan.level {
                    DetailLevel::Full => erased_after(store, org_id, size, session)?,
                    _ => None,
                };
                if steps.or(traces_erased_after(&late, session)).is_some() {
                    return Err(ExportError::Changed);
                }
            }
        }
    }
    writeln!(out, "{}", end_line(written))?;
    out.flush()?;
    progress(written);
    Ok(ExportSummary {
        entries: written,
        sessions,
        checkpoint_size: size,
    })
}
