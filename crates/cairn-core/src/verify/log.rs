//! An org's log, complete or partial: [`LogVerifier`].
//!
//! This file holds the verifier's state, the order of entries and
//! checkpoints and the verdict; the checks of each record are in
//! `records`, what only a partial log has (inclusion proofs, the signed
//! selection) in `sparse`.

use super::chain::ChainState;
use super::keys::AgentKeys;
use super::log_keys::{CheckpointKeys, KeyValidity, LogKeyCounts};
use super::{Check, Failure, Location, Progress, Reason, Verdict};
use crate::checkpoint::{Checkpoint, VerifiedCheckpoint};
use crate::detail::DetailLevel;
use crate::hash::Hash;
use crate::log::{LogEntry, LogRecord, log_origin};
use crate::merkle::Frontier;
use crate::note::NoteVerifier;
use crate::selection::Selection;
use crate::time::Timestamp;
use std::collections::HashMap;

mod records;
mod sparse;

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
    /// The signed traces the bundle shows, for `--log`'s comparison
    /// ([`crate::selection::Selection::is_recomputed`]).
    listed_traces: Vec<crate::selection::ListedTrace>,
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
    /// Checkpoints whose signing key's validity is checked (7.10),
    /// settled as the stream passes them, reported at the end.
    checkpoint_keys: CheckpointKeys,
    /// The same for a partial bundle's selection note, reported apart.
    selection_keys: CheckpointKeys,
    /// Checkpoints' statements of the `log-key` records below their size
    /// (their `cairn-log-keys` line), compared as the stream passes them.
    log_key_counts: LogKeyCounts,
    agent_keys: AgentKeys,
    level: DetailLevel,
    tree: Frontier,
    /// The subtrees the entry being checked closed (kept to reuse its
    /// memory), for the store's checks.
    closed: Vec<(u32, u64, Hash)>,
    last_logged: Option<Timestamp>,
    sessions: HashMap<String, ChainState>,
    /// Final hashes of the sessions sealed so far, with the session that
    /// continues each one, once one does.
    sealed_finals: HashMap<Hash, Option<String>>,
    /// Erased steps whose erasure record has not been seen yet, by
    /// (session, index).
    pending_erasures: HashMap<(String, u64), PendingErasure>,
    /// Withheld signed traces whose trace-erasure record has not been
    /// seen yet: their recorded hashes by seq.
    pending_traces: std::collections::BTreeMap<u64, Hash>,
    /// Signed traces read with their view, by seq (a mirror accepts one
    /// trace-erasure record naming each: it read the trace before it was
    /// withheld).
    shown_traces: std::collections::HashSet<u64>,
    /// Signed traces a trace-erasure record named already.
    named_traces: std::collections::HashSet<u64>,
    /// Withheld traces matched by their trace-erasure records: the seq and
    /// the trace id the record states.
    withheld_trace_ids: Vec<(u64, String)>,
    /// Checkpoints still ahead of the stream: their roots by size.
    pending: std::collections::BTreeMap<u64, Vec<Hash>>,
    /// For a partial log: the checkpoint every entry's inclusion proof must
    /// lead to, the selection, and what is still expected.
    sparse: Option<SparseState>,
    /// A mirror that read a step before its erasure was logged accepts the
    /// erasure of a step it saw whole ([`LogVerifier::mirroring`]).
    mirroring: bool,
    /// Past a store's starting size ([`LogVerifier::mirror_from_here`]):
    /// the steps read since, whose erasures get no leniency (they were
    /// read after any erasure that names them had committed).
    tail_steps: Option<std::collections::HashSet<(String, u64)>>,
    /// The log's size when [`LogVerifier::mirror_from_here`] was called:
    /// a signed trace below it may have been read before it was withheld.
    mirror_from: Option<u64>,
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
            checkpoint_keys: CheckpointKeys::default(),
            selection_keys: CheckpointKeys::default(),
            log_key_counts: LogKeyCounts::default(),
            agent_keys: AgentKeys::new(),
            level: DetailLevel::Full,
            tree: Frontier::new(),
            closed: Vec::new(),
            last_logged: None,
            sessions: HashMap::new(),
            sealed_finals: HashMap::new(),
            pending_erasures: HashMap::new(),
            pending_traces: std::collections::BTreeMap::new(),
            shown_traces: std::collections::HashSet::new(),
            named_traces: std::collections::HashSet::new(),
            withheld_trace_ids: Vec::new(),
            pending: std::collections::BTreeMap::new(),
            sparse: None,
            mirroring: false,
            tail_steps: None,
            mirror_from: None,
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

    /// From here on (entries appended while a store's verification ran),
    /// accepts an erasure naming a step read whole *before* this point, as
    /// [`LogVerifier::mirroring`] does: that step may have been read before
    /// the erasure committed (the next verification, reading both after
    /// it, compares them). A step read after this point was read after any
    /// erasure naming it, so its erasure is checked as always.
    pub fn mirror_from_here(&mut self) {
        self.tail_steps.get_or_insert_with(Default::default);
        self.mirror_from.get_or_insert(self.tree.size());
    }

    /// Erased steps and withheld signed traces seen so far whose erasure
    /// record has not come yet: their positions, oldest first.
    pub fn pending_erasures(&self) -> Vec<u64> {
        let mut seqs: Vec<u64> = self.pending_erasures.values().map(|p| p.seq).collect();
        seqs.extend(self.pending_traces.keys());
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
        let found = found.or_else(|| {
            self.pending_traces.contains_key(&seq).then(|| Location {
                seq: Some(seq),
                ..Location::default()
            })
        });
        if let Some(at) = found {
            self.fail(at, Reason::ErasureMismatch, detail);
        }
    }

    /// Requires the log's root at `checkpoint`'s size to be its root. Call
    /// before streaming past that size; any number of checkpoints (the
    /// latest one, and older ones an auditor or witness saved) may be given.
    pub fn expect_checkpoint(&mut self, checkpoint: &VerifiedCheckpoint) {
        // Kept by size (a log verified against a year of checkpoints expects
        // millions: each is filed in log n, never by sorting them all again).
        let cp = checkpoint.checkpoint();
        self.pending.entry(cp.size).or_default().push(cp.root);
        self.log_key_counts.require(cp);
    }

    /// Requires the log to hold as many `log-key` records below
    /// `checkpoint`'s size as its `cairn-log-keys` line states (FORMAT.md
    /// 7.1; nothing if it has none), compared at the end: what
    /// [`LogVerifier::expect_checkpoint`] does besides the root, for a
    /// partial log's trusted checkpoints, whose roots their consistency
    /// proofs relate.
    pub fn require_log_key_count(&mut self, checkpoint: &VerifiedCheckpoint) {
        self.log_key_counts.require(checkpoint.checkpoint());
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
    /// What is held does not grow with the checkpoints: each is settled
    /// once the stream reaches its size, keeping at most one size per set
    /// of signers whose validity hangs on the rest of the log.
    pub fn require_checkpoint_keys(&mut self, note: &str, size: u64) {
        self.checkpoint_keys.require(note, size, &self.server_keys);
    }

    /// [`LogVerifier::require_checkpoint_keys`] for a partial bundle's
    /// selection note, signed for the checkpoint of `size` entries
    /// (reported after the checkpoint's, naming the selection).
    pub fn require_selection_keys(&mut self, note: &str, size: u64) {
        self.selection_keys.require(note, size, &self.server_keys);
    }

    /// [`LogVerifier::require_checkpoint_keys`] for a checkpoint verified
    /// with this verifier's keys, from the signers found then (no second
    /// signature check): a signer that is not one of this verifier's keys
    /// is ignored.
    pub fn require_verified_checkpoint_keys(&mut self, checkpoint: &VerifiedCheckpoint) {
        let signers = checkpoint
            .signers()
            .iter()
            .filter(|signer| {
                self.server_keys
                    .iter()
                    .any(|key| key.to_string() == **signer)
            })
            .cloned()
            .collect();
        self.checkpoint_keys
            .require_signers(checkpoint.checkpoint().size, signers);
    }

    /// Checks now that the checkpoint `note` of `size` entries counts the
    /// log-key records read below its size (its `cairn-log-keys` line, if
    /// it has one: `inconsistent-checkpoint`) and is signed by a log key
    /// valid at that size, with the key history read so far (for a log
    /// that has no end, as a monitor follows it: call once every entry
    /// below `size` was pushed). Returns false once verification has
    /// failed.
    pub fn check_checkpoint_keys_now(&mut self, note: &str, size: u64) -> bool {
        if self.progress.failure.is_some() {
            return false;
        }
        if let Ok(checkpoint) = crate::note::Note::parse(note)
            .map_err(|_| ())
            .and_then(|parsed| Checkpoint::parse(&parsed.text).map_err(|_| ()))
            && let Err((stated, read)) = LogKeyCounts::check_now(&checkpoint, &self.key_validity)
        {
            self.progress.fail_at_end(
                Location::default(),
                Reason::InconsistentCheckpoint,
                log_key_count_detail(size, stated, read, "log"),
            );
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

    /// The withheld traces matched by their trace-erasure records so far:
    /// each one's seq and the trace id its record states (informative: no
    /// verifier can compare it), in the order matched.
    pub fn withheld_trace_ids(&self) -> &[(u64, String)] {
        &self.withheld_trace_ids
    }

    /// The signed traces a partial log showed, in order (empty for a
    /// complete log).
    pub fn listed_traces(&self) -> &[crate::selection::ListedTrace] {
        self.sparse
            .as_ref()
            .map_or(&[], |sparse| sparse.listed_traces.as_slice())
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
    ///
    /// Given the digest, the checks read none of the step's payload
    /// (`step_type_original`, `content`, `input_data`, `output_data`,
    /// `confidence`, `duration_ms`, `token_count`, `model`, `metadata`,
    /// `turn_id`, `turn_step`, `task_id`, `links`) except to refuse a
    /// hidden field that holds a value: a caller that recomputed the digest
    /// from the record's values and found it the recorded one may leave
    /// them blank, as long as no field is hidden.
    pub fn push_with_digest(&mut self, entry: &LogEntry, recomputed: Option<Hash>) -> bool {
        self.push_checked(entry, recomputed, None, None)
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
        self.push_checked(entry, recomputed, Some(stored_leaf), None)
    }

    /// Like [`LogVerifier::push_stored`], with the store's own checks of
    /// the entry (`store_checks`: its stored subtree hashes, the columns
    /// readers walk it by) run as part of it, after the entry's checks and
    /// the checkpoints it reaches (9.4): a failure they return fails the
    /// entry at its position, so the verdict counts it once and names the
    /// entry before it as the last valid one. They are given every
    /// complete subtree of the log the entry closes as `(level, index,
    /// hash)`, lowest first (as [`Frontier::push_with`]).
    pub fn push_stored_with_checks(
        &mut self,
        entry: &LogEntry,
        recomputed: Option<Hash>,
        stored_leaf: Hash,
        store_checks: &mut StoreChecks<'_>,
    ) -> bool {
        self.push_checked(entry, recomputed, Some(stored_leaf), Some(store_checks))
    }

    fn push_checked(
        &mut self,
        entry: &LogEntry,
        recomputed: Option<Hash>,
        stored_leaf: Option<Hash>,
        store_checks: Option<&mut StoreChecks<'_>>,
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
        if entry.seq != expected {
            let mut at = entry_location(entry);
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
        self.closed.clear();
        if outcome.is_ok() {
            match store_checks {
                Some(_) => {
                    let closed = &mut self.closed;
                    self.tree.push_with(leaf, |level, index, hash| {
                        closed.push((level, index, *hash))
                    });
                }
                None => self.tree.push(leaf),
            }
        }
        let checked = outcome
            .and_then(|()| self.check_checkpoints())
            .and_then(|()| match store_checks {
                Some(checks) => checks(&self.closed),
                None => Ok(()),
            });
        match checked {
            Ok(()) => {
                write_entry_location(self.progress.passed(), entry);
                true
            }
            Err(failure) => self.progress.record(entry_location(entry), Err(failure)),
        }
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

    fn check_checkpoints(&mut self) -> Check {
        self.checkpoint_keys
            .settle(self.tree.size(), &self.key_validity);
        self.selection_keys
            .settle(self.tree.size(), &self.key_validity);
        self.log_key_counts
            .settle(self.tree.size(), &self.key_validity);
        while let Some(entry) = self.pending.first_entry() {
            let size = *entry.key();
            if size > self.tree.size() {
                break;
            }
            let roots = entry.remove();
            // A checkpoint the stream has passed cannot be compared any
            // more: the empty log's root is known, any other is a caller
            // that expected it too late, and never passes unchecked.
            if size < self.tree.size() {
                if let Some(root) = roots
                    .iter()
                    .find(|root| size > 0 || **root != crate::merkle::empty_root())
                {
                    return Err((
                        Reason::InconsistentCheckpoint,
                        if size == 0 {
                            format!(
                                "the empty log's root is {}, the signed checkpoint of size 0 says {root}",
                                crate::merkle::empty_root()
                            )
                        } else {
                            format!(
                                "the checkpoint of size {size} (root {root}) was given after the log passed that size, so it was not compared"
                            )
                        },
                    ));
                }
                continue;
            }
            // The last expected of a size is named, as before.
            if let Some(root) = roots
                .into_iter()
                .rev()
                .find(|root| size == self.tree.size() && self.tree.root() != *root)
            {
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
    /// order; an erased step or withheld signed trace whose erasure record
    /// never came (`erasure-mismatch` at the first of them in the log).
    pub fn finish(mut self) -> Verdict {
        if self.progress.failure.is_some() {
            return self.progress.verdict();
        }
        if let Some((&size, _)) = self.pending.last_key_value()
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
        // The first in the log of the erased steps and withheld traces
        // that no erasure record named.
        let step = self.pending_erasures.iter().min_by_key(|(_, p)| p.seq);
        let trace = self.pending_traces.keys().next().copied();
        match (step, trace) {
            (Some(((session, index), pending)), trace)
                if trace.is_none_or(|seq| pending.seq < seq) =>
            {
                let at = Location {
                    seq: Some(pending.seq),
                    session_id: Some(session.clone()),
                    step_index: Some(*index),
                    trace_id: Some(pending.trace_id.clone()),
                    line: None,
                };
                let detail =
                    "the step's payload is erased but no erasure record names it".to_owned();
                self.progress
                    .fail_at_end(at, Reason::ErasureMismatch, detail);
            }
            (_, Some(seq)) => {
                let at = Location {
                    seq: Some(seq),
                    ..Location::default()
                };
                let detail =
                    "the signed trace's view is withheld but no trace-erasure record names it"
                        .to_owned();
                self.progress
                    .fail_at_end(at, Reason::ErasureMismatch, detail);
            }
            _ => {}
        }
        if let Some((size, stated, read)) = self.log_key_counts.first_failure(&self.key_validity) {
            // A partial bundle holds every log-key record below its
            // checkpoint (10.4): fewer is one left out; more, or any
            // difference in a complete log, a checkpoint that misstates it.
            let (reason, holder) = if self.sparse.is_some() && read < stated {
                (Reason::MissingRecord, "bundle")
            } else {
                (Reason::InconsistentCheckpoint, "log")
            };
            self.progress.fail_at_end(
                Location::default(),
                reason,
                log_key_count_detail(size, stated, read, holder),
            );
        }
        if let Some(size) = self.checkpoint_keys.first_failure(&self.key_validity) {
            let detail = format!(
                "the checkpoint of size {size} is not signed by a log key valid at that size (7.10: a key retired or added in the log)"
            );
            self.progress
                .fail_at_end(Location::default(), Reason::BadSignature, detail);
        }
        if let Some(size) = self.selection_keys.first_failure(&self.key_validity) {
            let detail = format!(
                "the selection signed for the checkpoint of size {size} is not signed by a log key valid at that size (7.10: a key retired or added in the log)"
            );
            self.progress
                .fail_at_end(Location::default(), Reason::BadSignature, detail);
        }
        self.progress.verdict()
    }
}

/// What a failed `cairn-log-keys` comparison says: the checkpoint's size,
/// what it states and what the log (or bundle) holds.
fn log_key_count_detail(size: u64, stated: u64, read: u64, holder: &str) -> String {
    format!(
        "the checkpoint of size {size} says its log holds {stated} log-key records below that size (its cairn-log-keys line); the {holder} holds {read} (FORMAT.md 7.1, 7.10)"
    )
}

/// A store's own checks of an entry, given the subtrees it closes as
/// `(level, index, hash)` ([`LogVerifier::push_stored_with_checks`]).
pub type StoreChecks<'a> = dyn FnMut(&[(u32, u64, Hash)]) -> Result<(), (Reason, String)> + 'a;

/// Where `entry` is, as a verdict names it: its seq, and for a step its
/// index and the session and trace ids it discloses (an operational
/// record: its session).
pub fn entry_location(entry: &LogEntry) -> Location {
    let mut at = Location::default();
    write_entry_location(&mut at, entry);
    at
}

/// Where `entry` is, written over `out` (reusing its strings' memory):
/// a step's seq, index and the session and trace ids it discloses, an
/// operational record's seq and session.
fn write_entry_location(out: &mut Location, entry: &LogEntry) {
    fn set(slot: &mut Option<String>, value: Option<&str>) {
        match (slot.as_mut(), value) {
            (Some(kept), Some(value)) => {
                kept.clear();
                kept.push_str(value);
            }
            (_, value) => *slot = value.map(str::to_owned),
        }
    }
    out.seq = Some(entry.seq);
    out.line = None;
    match &entry.record {
        LogRecord::Step(rec) => {
            let session = rec.is_revealed(crate::commit::Field::SessionId);
            set(
                &mut out.session_id,
                session.then_some(rec.step.session_id.as_str()),
            );
            out.step_index = Some(rec.step.step_index);
            let trace = rec.is_revealed(crate::commit::Field::TraceId);
            set(
                &mut out.trace_id,
                trace.then_some(rec.step.trace_id.as_str()),
            );
        }
        LogRecord::Op { record, .. } => {
            set(&mut out.session_id, record.session_id());
            out.step_index = None;
            out.trace_id = None;
        }
        LogRecord::ErasedTrace { .. } => {
            out.session_id = None;
            out.step_index = None;
            out.trace_id = None;
        }
    }
}
