//! A partial log: [`LogVerifier::sparse`] and the entries it is fed with
//! their inclusion proofs ([`LogVerifier::push_proven`]), each checked
//! against the checkpoint and the signed selection before the checks every
//! entry gets. Apart from `log.rs` because only a partial log (a partial
//! bundle) has proofs and a selection.

use super::{LogVerifier, SparseState, entry_location};
use crate::checkpoint::VerifiedCheckpoint;
use crate::hash::Hash;
use crate::log::{LogEntry, LogRecord, OpRecord};
use crate::note::NoteVerifier;
use crate::selection::Selection;
use crate::verify::{Location, Reason};

impl LogVerifier {
    /// A verifier for a *partial* log: the entries `selection` lists, in
    /// increasing `seq` order, each with an inclusion proof into
    /// `checkpoint` (fed with [`LogVerifier::push_proven`]). The caller
    /// checked the selection's signature against the checkpoint.
    pub fn sparse(
        server_name: &str,
        org_id: &str,
        server_keys: Vec<NoteVerifier>,
        checkpoint: &VerifiedCheckpoint,
        selection: Selection,
    ) -> LogVerifier {
        let mut verifier = LogVerifier::new(server_name, org_id, server_keys);
        verifier.level = selection.level;
        let claims = selection
            .sessions
            .iter()
            .map(|c| (c.session_id.clone(), c.steps))
            .collect();
        verifier.sparse = Some(SparseState {
            size: checkpoint.checkpoint().size,
            root: checkpoint.checkpoint().root,
            last_seq: None,
            selection,
            next_record: 0,
            claims,
            listed_traces: Vec::new(),
        });
        verifier.require_log_key_count(checkpoint);
        verifier
    }

    /// Checks the next entry of a partial log with its inclusion proof (or
    /// `None` if the entry carries none). Returns false once verification
    /// has failed.
    pub fn push_proven(&mut self, entry: &LogEntry, proof: Option<&[Hash]>) -> bool {
        self.push_proven_with_digest(entry, proof, None)
    }

    /// Like [`LogVerifier::push_proven`], with the step's digest already
    /// recomputed (see [`LogVerifier::push_with_digest`]).
    pub fn push_proven_with_digest(
        &mut self,
        entry: &LogEntry,
        proof: Option<&[Hash]>,
        recomputed: Option<Hash>,
    ) -> bool {
        if self.progress.failure.is_some() {
            return false;
        }
        let at = entry_location(entry);
        match self.check_proven(entry, proof, recomputed) {
            Ok(()) => self.progress.record(at, Ok(())),
            // A listed record the bundle skipped: reported where it belongs.
            Err((reason, detail, Some(seq))) => {
                let elsewhere = Location {
                    seq: Some(seq),
                    ..Location::default()
                };
                self.progress.record(elsewhere, Err((reason, detail)))
            }
            Err((reason, detail, None)) => self.progress.record(at, Err((reason, detail))),
        }
    }

    fn check_proven(
        &mut self,
        entry: &LogEntry,
        proof: Option<&[Hash]>,
        recomputed: Option<Hash>,
    ) -> Result<(), (Reason, String, Option<u64>)> {
        let no_loc = |(reason, detail): (Reason, String)| (reason, detail, None);
        let Some(sparse) = &mut self.sparse else {
            return Err(no_loc((
                Reason::MalformedRecord,
                "inclusion proofs are only checked for partial logs".into(),
            )));
        };
        if let Some(last) = sparse.last_seq
            && entry.seq <= last
        {
            return Err(no_loc((
                Reason::SequenceGap,
                format!("seq {} does not follow seq {last}", entry.seq),
            )));
        }
        if let Some((seq, entry_type)) = sparse.selection.records.get(sparse.next_record)
            && *seq < entry.seq
        {
            return Err((
                Reason::MissingRecord,
                format!(
                    "the selection lists a {entry_type} record at seq {seq}, which the bundle lacks"
                ),
                Some(*seq),
            ));
        }
        if entry.seq >= sparse.size {
            return Err(no_loc((
                Reason::UncoveredEntry,
                format!(
                    "seq {} is beyond the checkpoint's size {}: no signature covers it",
                    entry.seq, sparse.size
                ),
            )));
        }
        let Some(proof) = proof else {
            return Err(no_loc((
                Reason::MissingProof,
                format!("seq {} has no inclusion proof", entry.seq),
            )));
        };
        if let Err(e) = crate::merkle::verify_inclusion(
            &entry.leaf_hash(),
            entry.seq,
            sparse.size,
            proof,
            &sparse.root,
        ) {
            return Err(no_loc((
                Reason::InclusionMismatch,
                format!(
                    "inclusion proof of seq {} in the checkpoint of size {} fails: {e}",
                    entry.seq, sparse.size
                ),
            )));
        }
        match &entry.record {
            LogRecord::Step(rec) => {
                let claimed = sparse.claims.get(&rec.step.session_id).copied();
                match claimed {
                    None => {
                        return Err(no_loc((
                            Reason::UnlistedEntry,
                            format!(
                                "a step of session {}, which the selection does not list",
                                rec.step.session_id
                            ),
                        )));
                    }
                    Some(steps) if rec.step.step_index >= steps => {
                        return Err(no_loc((
                            Reason::UnlistedEntry,
                            format!(
                                "step {} of session {}; the selection claims {steps} steps",
                                rec.step.step_index, rec.step.session_id
                            ),
                        )));
                    }
                    Some(_) => {}
                }
            }
            LogRecord::Op { .. } | LogRecord::ErasedTrace { .. } => {
                match sparse.selection.records.get(sparse.next_record) {
                    Some((seq, listed)) if *seq == entry.seq => {
                        if listed != entry.entry_type() {
                            return Err(no_loc((
                                Reason::SelectionMismatch,
                                format!(
                                    "the selection lists seq {seq} as a {listed} record; it is a {}",
                                    entry.entry_type()
                                ),
                            )));
                        }
                        sparse.next_record += 1;
                    }
                    _ => {
                        return Err(no_loc((
                            Reason::UnlistedEntry,
                            format!(
                                "a {} record at seq {}, which the selection does not list",
                                entry.entry_type(),
                                entry.seq
                            ),
                        )));
                    }
                }
                if let LogRecord::Op {
                    record: OpRecord::SessionStart(header),
                    ..
                } = &entry.record
                    && sparse.claims.contains_key(&header.session_id)
                    && !sparse.selection.scope.selects(header)
                {
                    return Err(no_loc((
                        Reason::SelectionMismatch,
                        format!(
                            "the selection lists session {}, which its scope does not select",
                            header.session_id
                        ),
                    )));
                }
            }
        }
        sparse.last_seq = Some(entry.seq);
        self.check_logged_at(entry).map_err(no_loc)?;
        self.check_record(entry, recomputed).map_err(no_loc)
    }
}
