//! An org's log, complete or partial: [`LogVerifier`].

use super::chain::{
    ChainState, LogPosition, check_seal_note, erased_fields, erasure_fingerprint, step_location,
};
use super::keys::AgentKeys;
use super::log_keys::KeyValidity;
use super::{Check, Failure, Location, Progress, Reason, Verdict};
use crate::checkpoint::VerifiedCheckpoint;
use crate::detail::DetailLevel;
use crate::hash::Hash;
use crate::log::{ErasureRecord, LogEntry, LogRecord, OpRecord, log_origin};
use crate::merkle::Frontier;
use crate::note::NoteVerifier;
use crate::selection::Selection;
use crate::time::Timestamp;
use std::collections::HashMap;

/// An erased step waiting for its erasure record, later in the log.
#[derive(Debug, Clone)]
struct PendingErasure {
    seq: u64,
    trace_id: String,
    fingerprint: Hash,
}

/// What a partial log's selection still expects.
#[derive(Debug)]
struct SparseState {
    size: u64,
    root: Hash,
    last_seq: Option<u64>,
    selection: Selection,
    /// Index of the next listed record not yet seen.
    next_record: usize,
    /// Claimed step counts by session id.
    claims: HashMap<String, u64>,
}

/// Verifies an org log, fed its entries in sequence order: a complete log
/// (a store, a complete bundle) or a partial one (a partial bundle, each
/// entry with its inclusion proof, under a signed selection).
#[derive(Debug)]
pub struct LogVerifier {
    org_id: String,
    origin: String,
    key_name: String,
    server_keys: Vec<NoteVerifier>,
    /// The log keys' validity, from its `log-key` records (7.10).
    key_validity: KeyValidity,
    /// Checkpoints whose signing key's validity is checked at the end.
    checkpoint_keys: Vec<(String, u64)>,
    agent_keys: AgentKeys,
    level: DetailLevel,
    tree: Frontier,
    last_logged: Option<Timestamp>,
    sessions: HashMap<String, ChainState>,
    /// Final hashes of the sessions sealed so far, with the session that
    /// continues each one, once one does.
    sealed_finals: HashMap<Hash, Option<String>>,
    /// Erased steps whose erasure record has not been seen yet, by
    /// (session, index).
    pending_erasures: HashMap<(String, u64), PendingErasure>,
    /// Checkpoints still ahead of the stream, largest size first.
    pending: Vec<(u64, Hash)>,
    /// For a partial log: the checkpoint every entry's inclusion proof must
    /// lead to, the selection, and what is still expected.
    sparse: Option<SparseState>,
    /// A mirror that read a step before its erasure was logged accepts the
    /// erasure of a step it saw whole ([`LogVerifier::mirroring`]).
    mirroring: bool,
    progress: Progress,
}

impl LogVerifier {
    /// A verifier for `org_id`'s whole log on the server whose keys are
    /// `server_keys` (named `server_name`, which makes the log origin).
    pub fn new(server_name: &str, org_id: &str, server_keys: Vec<NoteVerifier>) -> LogVerifier {
        LogVerifier {
            org_id: org_id.to_owned(),
            origin: log_origin(server_name, org_id),
            key_name: server_name.to_owned(),
            server_keys,
            key_validity: KeyValidity::default(),
            checkpoint_keys: Vec::new(),
            agent_keys: AgentKeys::new(),
            level: DetailLevel::Full,
            tree: Frontier::new(),
            last_logged: None,
            sessions: HashMap::new(),
            sealed_finals: HashMap::new(),
            pending_erasures: HashMap::new(),
            pending: Vec::new(),
            sparse: None,
            mirroring: false,
            progress: Progress::default(),
        }
    }

    /// A verifier for a log read while it grows, as a monitor mirrors it
    /// (FORMAT.md 7.9): a step read whole before its erasure was logged is
    /// still whole when the erasure record comes, so an erasure naming a
    /// step that showed its payload is accepted (its commitments cannot be
    /// compared: the monitor saw the values, not the erased copy). Every
    /// other rule holds; the caller decides, with
    /// [`LogVerifier::pending_erasures`], when an erased step's erasure
    /// record is overdue.
    pub fn mirroring(
        server_name: &str,
        org_id: &str,
        server_keys: Vec<NoteVerifier>,
    ) -> LogVerifier {
        let mut verifier = LogVerifier::new(server_name, org_id, server_keys);
        verifier.mirroring = true;
        verifier
    }

    /// Erased steps seen so far whose erasure record has not come yet:
    /// their positions, oldest first.
    pub fn pending_erasures(&self) -> Vec<u64> {
        let mut seqs: Vec<u64> = self.pending_erasures.values().map(|p| p.seq).collect();
        seqs.sort_unstable();
        seqs
    }

    /// Fails the verification at the erased step at `seq` (one of
    /// [`LogVerifier::pending_erasures`]): no erasure record names it where
    /// one must be.
    pub fn fail_pending_erasure(&mut self, seq: u64, detail: String) {
        let found = self
            .pending_erasures
            .iter()
            .find(|(_, p)| p.seq == seq)
            .map(|((session, index), p)| Location {
                seq: Some(p.seq),
                session_id: Some(session.clone()),
                step_index: Some(*index),
                trace_id: Some(p.trace_id.clone()),
                line: None,
            });
        if let Some(at) = found {
            self.fail(at, Reason::ErasureMismatch, detail);
        }
    }

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
        });
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
            LogRecord::Op { record, .. } => {
                match sparse.selection.records.get(sparse.next_record) {
                    Some((seq, listed)) if *seq == entry.seq => {
                        if listed != record.entry_type() {
                            return Err(no_loc((
                                Reason::SelectionMismatch,
                                format!(
                                    "the selection lists seq {seq} as a {listed} record; it is a {}",
                                    record.entry_type()
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
                                record.entry_type(),
                                entry.seq
                            ),
                        )));
                    }
                }
                if let OpRecord::SessionStart(header) = record
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

    /// Requires the log's root at `checkpoint`'s size to be its root. Call
    /// before streaming past that size; any number of checkpoints (the
    /// latest one, and older ones an auditor or witness saved) may be given.
    pub fn expect_checkpoint(&mut self, checkpoint: &VerifiedCheckpoint) {
        let cp = checkpoint.checkpoint();
        self.pending.push((cp.size, cp.root));
        self.pending.sort_by_key(|cp| std::cmp::Reverse(cp.0));
    }

    /// The log's origin line.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Number of entries folded so far.
    pub fn size(&self) -> u64 {
        self.tree.size()
    }

    /// Root of the entries folded so far.
    pub fn root(&self) -> Hash {
        self.tree.root()
    }

    /// Requires the checkpoint `note` of `size` entries (its signature
    /// already verified with the trusted keys) to be signed by a log key
    /// valid at that size, with the key history read by the end (7.10):
    /// checked last in [`LogVerifier::finish`], `bad-signature` with no
    /// position.
    pub fn require_checkpoint_keys(&mut self, note: &str, size: u64) {
        self.checkpoint_keys.push((note.to_owned(), size));
    }

    /// Checks now that the checkpoint `note` of `size` entries is signed by
    /// a log key valid at that size, with the key history read so far (for
    /// a log that has no end, as a monitor follows it: call once every
    /// entry below `size` was pushed). Returns false once verification has
    /// failed.
    pub fn check_checkpoint_keys_now(&mut self, note: &str, size: u64) -> bool {
        if self.progress.failure.is_some() {
            return false;
        }
        match self
            .key_validity
            .check_checkpoint(note, size, &self.server_keys)
        {
            Ok(()) => true,
            Err(detail) => {
                self.progress
                    .fail_at_end(Location::default(), Reason::BadSignature, detail);
                false
            }
        }
    }

    /// The first failure, once there is one.
    pub fn failure(&self) -> Option<&Failure> {
        self.progress.failure.as_ref()
    }

    /// Records checked so far.
    pub fn records_checked(&self) -> u64 {
        self.progress.checked
    }

    /// Fails the verification at `at` for a reason found outside the
    /// records themselves (a stored leaf hash, an entry that could not be
    /// read, an entry no checkpoint covers), counting it as checked.
    pub fn fail(&mut self, at: Location, reason: Reason, detail: String) {
        if self.progress.failure.is_none() {
            self.progress.record(at, Err((reason, detail)));
        }
    }

    /// Checks the next entry. Returns false once verification has failed.
    pub fn push(&mut self, entry: &LogEntry) -> bool {
        self.push_with_digest(entry, None)
    }

    /// Like [`LogVerifier::push`], with the step's digest already
    /// recomputed from its fields (`record.recompute_digest()`, the costly
    /// part, done on another thread). For operational records pass `None`.
    pub fn push_with_digest(&mut self, entry: &LogEntry, recomputed: Option<Hash>) -> bool {
        self.push_checked(entry, recomputed, None)
    }

    /// Like [`LogVerifier::push_with_digest`], for an entry read from a
    /// store with the leaf hash stored beside it (which proofs are served
    /// from): once the record checks out, that leaf must be the entry's
    /// (`inclusion-mismatch` otherwise, at this entry).
    pub fn push_stored(
        &mut self,
        entry: &LogEntry,
        recomputed: Option<Hash>,
        stored_leaf: Hash,
    ) -> bool {
        self.push_checked(entry, recomputed, Some(stored_leaf))
    }

    fn push_checked(
        &mut self,
        entry: &LogEntry,
        recomputed: Option<Hash>,
        stored_leaf: Option<Hash>,
    ) -> bool {
        if self.progress.failure.is_some() {
            return false;
        }
        if self.sparse.is_some() {
            let detail = "a partial log needs an inclusion proof per entry".to_owned();
            return self
                .progress
                .record(entry_location(entry), Err((Reason::MissingProof, detail)));
        }
        let expected = self.tree.size();
        let mut at = entry_location(entry);
        if entry.seq != expected {
            let detail = if entry.seq > expected {
                format!(
                    "expected seq {expected}, found {}: {} record(s) missing",
                    entry.seq,
                    entry.seq - expected
                )
            } else {
                format!(
                    "expected seq {expected}, found {}: repeated or out of order",
                    entry.seq
                )
            };
            at.seq = Some(expected);
            return self.progress.record(at, Err((Reason::SequenceGap, detail)));
        }
        let leaf = entry.leaf_hash();
        let outcome = self
            .check_logged_at(entry)
            .and_then(|()| self.check_record(entry, recomputed))
            .and_then(|()| match stored_leaf {
                Some(stored) if stored != leaf => Err((
                    Reason::InclusionMismatch,
                    format!(
                        "the stored leaf hash {stored} (which proofs are served from) is not the entry's {leaf}"
                    ),
                )),
                _ => Ok(()),
            });
        if outcome.is_ok() {
            self.tree.push(leaf);
        }
        let outcome = outcome.and_then(|()| self.check_checkpoints());
        self.progress.record(at, outcome)
    }

    fn check_logged_at(&mut self, entry: &LogEntry) -> Check {
        if let Some(last) = self.last_logged
            && entry.logged_at < last
        {
            return Err((
                Reason::BadTimestamp,
                format!(
                    "logged_at {} is before the previous entry's {last}",
                    entry.logged_at
                ),
            ));
        }
        self.last_logged = Some(entry.logged_at);
        Ok(())
    }

    fn check_record(&mut self, entry: &LogEntry, recomputed: Option<Hash>) -> Check {
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
            OpRecord::SignedTrace(record) => self
                .agent_keys
                .check_trace(&record.trace, Some(seq))
                .map_err(|e| (Reason::BadSignature, e)),
            OpRecord::Erasure(erasure) => self.check_erasure(erasure),
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
            None if self.level == DetailLevel::Full && !self.mirroring => Err((
                Reason::ErasureMismatch,
                format!(
                    "the erasure names step {} of session {}, which shows its payload (or was erased already)",
                    erasure.step_index, erasure.session_id
                ),
            )),
            // The level hides the payload anyway, or a mirror read the
            // step before it was erased: nothing to compare.
            None => Ok(()),
        }
    }

    fn check_checkpoints(&mut self) -> Check {
        while let Some(&(size, root)) = self.pending.last() {
            if size > self.tree.size() {
                break;
            }
            self.pending.pop();
            if size == self.tree.size() && self.tree.root() != root {
                return Err((
                    Reason::InconsistentCheckpoint,
                    match size.checked_sub(1) {
                        Some(last) => format!(
                            "log root at size {size} is {}, the signed checkpoint says {root}: the history up to seq {last} was rewritten",
                            self.tree.root()
                        ),
                        None => format!(
                            "the empty log's root is {}, the signed checkpoint of size 0 says {root}",
                            self.tree.root()
                        ),
                    },
                ));
            }
        }
        Ok(())
    }

    /// The verdict, after the last entry. In this order, the first that
    /// applies fails it: a checkpoint larger than the stream
    /// (`missing-record` at the first absent seq); for a partial log, a
    /// listed record not seen (`missing-record` at its seq), a listed
    /// session with fewer steps than claimed (`missing-record` at the first
    /// absent step) or another head (`selection-mismatch`), in listed
    /// order; an erased step whose erasure record never came
    /// (`erasure-mismatch` at the step).
    pub fn finish(mut self) -> Verdict {
        if self.progress.failure.is_some() {
            return self.progress.verdict();
        }
        if let Some(&(size, _)) = self.pending.first()
            && size > self.tree.size()
        {
            let at = Location {
                seq: Some(self.tree.size()),
                ..Location::default()
            };
            let detail = format!(
                "checkpoint covers {size} records; the log ends after {}",
                self.tree.size()
            );
            self.progress.fail_at_end(at, Reason::MissingRecord, detail);
        }
        // A checkpoint no entry brought the tree to (the empty log's, of
        // size 0) is compared now: a signed false root never verifies.
        if self.sparse.is_none()
            && let Err((reason, detail)) = self.check_checkpoints()
        {
            self.progress
                .fail_at_end(Location::default(), reason, detail);
        }
        if let Some(sparse) = &self.sparse {
            if let Some((seq, entry_type)) = sparse.selection.records.get(sparse.next_record) {
                let at = Location {
                    seq: Some(*seq),
                    ..Location::default()
                };
                let detail = format!(
                    "the selection lists a {entry_type} record at seq {seq}, which the bundle lacks"
                );
                self.progress.fail_at_end(at, Reason::MissingRecord, detail);
            }
            for claim in &sparse.selection.sessions {
                let (steps, head) = self
                    .sessions
                    .get(&claim.session_id)
                    .map_or((0, None), |c| (c.next_index, Some(c.head)));
                let at = Location {
                    session_id: Some(claim.session_id.clone()),
                    step_index: Some(steps),
                    ..Location::default()
                };
                if steps < claim.steps {
                    let detail = format!(
                        "the selection claims {} steps of session {}; the bundle holds {steps}",
                        claim.steps, claim.session_id
                    );
                    self.progress.fail_at_end(at, Reason::MissingRecord, detail);
                } else if head != Some(claim.head) {
                    let detail = format!(
                        "the selection claims session {} ends in {}, its steps end in {}",
                        claim.session_id,
                        claim.head,
                        head.map_or_else(|| "nothing".into(), |h| h.to_string())
                    );
                    let at = Location {
                        step_index: None,
                        ..at
                    };
                    self.progress
                        .fail_at_end(at, Reason::SelectionMismatch, detail);
                }
            }
        }
        if let Some(((session, index), pending)) =
            self.pending_erasures.iter().min_by_key(|(_, p)| p.seq)
        {
            let at = Location {
                seq: Some(pending.seq),
                session_id: Some(session.clone()),
                step_index: Some(*index),
                trace_id: Some(pending.trace_id.clone()),
                line: None,
            };
            let detail = "the step's payload is erased but no erasure record names it".to_owned();
            self.progress
                .fail_at_end(at, Reason::ErasureMismatch, detail);
        }
        for (note, size) in &self.checkpoint_keys {
            if let Err(detail) = self
                .key_validity
                .check_checkpoint(note, *size, &self.server_keys)
            {
                self.progress
                    .fail_at_end(Location::default(), Reason::BadSignature, detail);
            }
        }
        self.progress.verdict()
    }
}

fn entry_location(entry: &LogEntry) -> Location {
    match &entry.record {
        LogRecord::Step(rec) => step_location(Some(entry.seq), rec),
        LogRecord::Op { record, .. } => Location {
            seq: Some(entry.seq),
            session_id: op_session(record).map(str::to_owned),
            ..Location::default()
        },
    }
}

fn op_session(record: &OpRecord) -> Option<&str> {
    match record {
        OpRecord::SessionStart(h) => Some(&h.session_id),
        OpRecord::Seal(s) => Some(&s.session_id),
        OpRecord::Erasure(e) => Some(&e.session_id),
        OpRecord::Review(r) => Some(&r.session_id),
        OpRecord::AuditEvent(a) => a.session_id.as_deref(),
        OpRecord::SignedTrace(t) => Some(&t.session_id),
        OpRecord::KeyRegistration(_) | OpRecord::KeyRevocation(_) | OpRecord::LogKey(_) => None,
    }
}
