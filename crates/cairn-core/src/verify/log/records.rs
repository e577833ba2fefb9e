//! The checks of one record once it is in sequence: a step against its
//! session's chain (and its erased fields remembered), an operational
//! record's hash and its effect (session starts and continuity, seals,
//! log and agent keys, signed traces), an erasure against the step it
//! names. Apart from `log.rs`, which orders entries and checkpoints,
//! because this is what each kind of record must satisfy.

use super::{LogVerifier, PendingErasure};
use crate::detail::DetailLevel;
use crate::hash::Hash;
use crate::log::{ErasureRecord, LogEntry, LogRecord, OpRecord, TraceErasureRecord};
use crate::verify::chain::{
    ChainState, LogPosition, check_seal_note, erased_fields, erasure_fingerprint,
};
use crate::verify::{Check, Reason};

impl LogVerifier {
    pub(super) fn check_record(&mut self, entry: &LogEntry, recomputed: Option<Hash>) -> Check {
        match &entry.record {
            LogRecord::Step(rec) => {
                if rec.step.org_id != self.org_id {
                    return Err((
                        Reason::MalformedRecord,
                        format!(
                            "step of org {:?} in the log of {}",
                            rec.step.org_id, self.org_id
                        ),
                    ));
                }
                // A bundle's reading refuses such a number (FORMAT.md
                // 2.2); a stored step must fail alike, or a store would
                // verify whose every export fails.
                if let Some(field) = rec.step.integer_beyond_safe() {
                    return Err((
                        Reason::MalformedRecord,
                        format!(
                            "step {} of session {}: {field} is beyond 2^53 - 1",
                            rec.step.step_index, rec.step.session_id
                        ),
                    ));
                }
                let erased = erased_fields(rec, self.level)?;
                let Some(chain) = self.sessions.get_mut(&rec.step.session_id) else {
                    return Err((
                        Reason::MissingRecord,
                        format!(
                            "session {} has no session-start record",
                            rec.step.session_id
                        ),
                    ));
                };
                let at = LogPosition {
                    seq: Some(entry.seq),
                    logged_at: Some(entry.logged_at),
                };
                chain.check_step(rec, &self.agent_keys, recomputed, at)?;
                if let Some(tail) = &mut self.tail_steps {
                    tail.insert((rec.step.session_id.clone(), rec.step.step_index));
                }
                if !erased.is_empty() {
                    self.pending_erasures.insert(
                        (rec.step.session_id.clone(), rec.step.step_index),
                        PendingErasure {
                            seq: entry.seq,
                            trace_id: rec.step.trace_id.clone(),
                            fingerprint: erasure_fingerprint(&rec.step.trace_id, &erased),
                        },
                    );
                }
                Ok(())
            }
            LogRecord::Op { record, hash } => {
                let recomputed = record.hash();
                if recomputed != *hash {
                    return Err((
                        Reason::DigestMismatch,
                        format!(
                            "{} record hash recomputes to {recomputed}, recorded {hash}",
                            record.entry_type()
                        ),
                    ));
                }
                if record.org_id() != self.org_id {
                    return Err((
                        Reason::MalformedRecord,
                        format!(
                            "record of org {:?} in the log of {}",
                            record.org_id(),
                            self.org_id
                        ),
                    ));
                }
                self.apply_op(record, entry.seq)
            }
            // Its hash is all there is: the leaf binds it, and a later
            // trace-erasure record must name it with that hash.
            LogRecord::ErasedTrace { hash } => {
                self.pending_traces.insert(entry.seq, *hash);
                Ok(())
            }
        }
    }

    fn apply_op(&mut self, record: &OpRecord, seq: u64) -> Check {
        match record {
            OpRecord::SessionStart(header) => {
                if self.sessions.contains_key(&header.session_id) {
                    return Err((
                        Reason::DuplicateRecord,
                        format!("session {} started twice", header.session_id),
                    ));
                }
                if let Some(predecessor) = &header.predecessor {
                    match self.sealed_finals.get_mut(predecessor) {
                        None => {
                            return Err((
                                Reason::PredecessorMismatch,
                                format!(
                                    "session {} continues {predecessor}, which is not the final hash of a session sealed before it",
                                    header.session_id
                                ),
                            ));
                        }
                        Some(Some(other)) => {
                            return Err((
                                Reason::PredecessorMismatch,
                                format!(
                                    "session {} continues the session ending in {predecessor}, which session {other} already continues",
                                    header.session_id
                                ),
                            ));
                        }
                        Some(slot) => *slot = Some(header.session_id.clone()),
                    }
                }
                self.sessions
                    .insert(header.session_id.clone(), ChainState::new(header));
                Ok(())
            }
            OpRecord::Seal(seal) => {
                // Only keys valid at this position may sign (7.10).
                let valid = self.key_validity.valid_at(&self.server_keys, seq);
                match self.sessions.get_mut(&seal.session_id) {
                    Some(chain) => chain.check_seal(seal, &self.origin, &valid)?,
                    // A partial log carries the seal of a session it does
                    // not include when an included session continues it:
                    // its signature is checked, its steps cannot be.
                    None if self.sparse.is_some() => check_seal_note(seal, &self.origin, &valid)?,
                    None => {
                        return Err((
                            Reason::MissingRecord,
                            format!("seal of unknown session {}", seal.session_id),
                        ));
                    }
                }
                if let Ok((_, signers)) =
                    self.key_validity
                        .open_at(&seal.note, seq, &self.server_keys, "seal note")
                {
                    self.key_validity.mark_used(signers, seq);
                }
                self.sealed_finals.entry(seal.final_hash).or_insert(None);
                Ok(())
            }
            OpRecord::LogKey(record) => self.key_validity.apply(
                record,
                seq,
                &self.origin,
                &self.key_name,
                &self.server_keys,
            ),
            OpRecord::KeyRegistration(reg) => self.agent_keys.register(reg, seq),
            OpRecord::KeyRevocation(rev) => self.agent_keys.revoke(rev, seq),
            OpRecord::SignedTrace(record) => {
                self.agent_keys
                    .check_trace(&record.trace, Some(seq))
                    .map_err(|e| (Reason::BadSignature, e))?;
                self.shown_traces.insert(seq);
                if let Some(sparse) = &mut self.sparse {
                    sparse.listed_traces.push(crate::selection::ListedTrace {
                        seq,
                        session_id: record.session_id.clone(),
                        level: record.trace.level,
                    });
                }
                Ok(())
            }
            OpRecord::Erasure(erasure) => self.check_erasure(erasure),
            OpRecord::TraceErasure(erasure) => self.check_trace_erasure(erasure, seq),
            OpRecord::Review(_) | OpRecord::AuditEvent(_) => Ok(()),
        }
    }

    /// An erasure record names a step of a started session seen earlier.
    /// At a level that shows payload fields, that step must show exactly the
    /// fields it erases as hidden, with the same commitments.
    fn check_erasure(&mut self, erasure: &ErasureRecord) -> Check {
        let held = self
            .sessions
            .get(&erasure.session_id)
            .is_some_and(|chain| erasure.step_index < chain.next_index);
        if !held {
            return Err((
                Reason::ErasureMismatch,
                format!(
                    "the erasure names step {} of session {}, which the log does not hold before it",
                    erasure.step_index, erasure.session_id
                ),
            ));
        }
        let key = (erasure.session_id.clone(), erasure.step_index);
        match self.pending_erasures.remove(&key) {
            Some(pending) => {
                if pending.fingerprint
                    != erasure_fingerprint(&erasure.trace_id, &erasure.commitments)
                {
                    return Err((
                        Reason::ErasureMismatch,
                        format!(
                            "the erasure of step {} of session {} names other fields, commitments or trace id ({}) than the step ({}) hides",
                            erasure.step_index,
                            erasure.session_id,
                            erasure.trace_id,
                            pending.trace_id
                        ),
                    ));
                }
                Ok(())
            }
            None if self.level == DetailLevel::Full
                && !self.mirroring
                && self
                    .tail_steps
                    .as_ref()
                    .is_none_or(|tail| tail.contains(&key)) =>
            {
                Err((
                    Reason::ErasureMismatch,
                    format!(
                        "the erasure names step {} of session {}, which shows its payload (or was erased already)",
                        erasure.step_index, erasure.session_id
                    ),
                ))
            }
            // The level hides the payload anyway, or a mirror read the
            // step before it was erased: nothing to compare.
            None => Ok(()),
        }
    }

    /// A trace-erasure record names an earlier `signed-trace` entry whose
    /// view is withheld, by its `op_hash`, once (FORMAT.md 8, rule 5). A
    /// trace read with its view fails, except in a mirror that read it
    /// before it was withheld; in a partial log, an entry the bundle does
    /// not hold is not compared (one the selection lists as another type
    /// fails).
    fn check_trace_erasure(&mut self, erasure: &TraceErasureRecord, seq: u64) -> Check {
        let at = erasure.trace_seq;
        let mismatch = |detail: String| Err((Reason::ErasureMismatch, detail));
        if at >= seq {
            return mismatch(format!(
                "the trace erasure names seq {at}, which is not before it"
            ));
        }
        if let Some(hash) = self.pending_traces.remove(&at) {
            self.named_traces.insert(at);
            self.withheld_trace_ids.push((at, erasure.trace_id.clone()));
            if hash != erasure.trace_hash {
                return mismatch(format!(
                    "the trace erasure names the signed trace at seq {at} by hash {}; the withheld entry's hash is {hash}",
                    erasure.trace_hash
                ));
            }
            return Ok(());
        }
        if self.named_traces.contains(&at) {
            return mismatch(format!(
                "the trace erasure names the signed trace at seq {at}, which an earlier trace erasure named"
            ));
        }
        if self.shown_traces.remove(&at) {
            // A mirror, or the part of a store's verification read before
            // it started growing, may have read the trace before it was
            // withheld.
            if self.mirroring || self.mirror_from.is_some_and(|from| at < from) {
                self.named_traces.insert(at);
                return Ok(());
            }
            return mismatch(format!(
                "the trace erasure names the signed trace at seq {at}, which shows its view"
            ));
        }
        match &self.sparse {
            None => mismatch(format!(
                "the trace erasure names seq {at}, which is not a signed-trace record"
            )),
            Some(sparse) => match sparse
                .selection
                .records
                .binary_search_by_key(&at, |(listed, _)| *listed)
            {
                Ok(i) if sparse.selection.records[i].1 != "signed-trace" => mismatch(format!(
                    "the trace erasure names seq {at}, which the selection lists as a {} record",
                    sparse.selection.records[i].1
                )),
                // Not compared (the bundle may not hold it), but named: a
                // second trace erasure of it fails, as in a complete log.
                _ => {
                    self.named_traces.insert(at);
                    Ok(())
                }
            },
        }
    }
}
