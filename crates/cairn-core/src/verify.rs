//! Streaming verification of session chains and org logs.
//!
//! A verifier is fed records one at a time, keeps O(log n) state per open
//! session and for the log (never the records themselves), stops at the
//! first failure and reports it as a [`Verdict`]: verified or not, how many
//! records were checked, the last valid one, and the first failing record
//! with a [`Reason`].
//!
//! The checks for one step, in order (the first that fails is reported):
//!
//! 1. the session is known, and not sealed (`missing-record`, `step-after-seal`);
//! 2. the step index is the next one (`sequence-gap`);
//! 3. `prev_hash` is the session's current head (`prev-hash-mismatch`);
//! 4. the digest recomputed from the fields equals the recorded one
//!    (`digest-mismatch`);
//! 5. the chain hash recomputed from head, digest, index and timestamp
//!    equals the recorded one (`chain-hash-mismatch`);
//! 6. the kind is allowed by the session's profile (`profile-violation`);
//! 7. an agent signature, if present, verifies under a registered key of
//!    that agent (`bad-signature`).
//!
//! In an org log, each entry's sequence number is checked first
//! (`sequence-gap`), every leaf is folded into the log's tree, and whenever
//! the tree reaches the size of an expected checkpoint its root must match
//! (`inconsistent-checkpoint`). A checkpoint larger than the stream is
//! `missing-record` at the end.

use crate::checkpoint::VerifiedCheckpoint;
use crate::commit::{
    Field, StepRecord, chain_hash, genesis_hash, session_leaf_data, verify_agent_signature,
};
use crate::hash::Hash;
use crate::log::{LogEntry, LogRecord, OpRecord, SealRecord, log_origin};
use crate::merkle::{Frontier, leaf_hash};
use crate::note::NoteVerifier;
use crate::record::{Profile, SessionHeader};
use ed25519_dalek::VerifyingKey;
use std::collections::HashMap;
use std::fmt;

/// Why verification failed. The string forms are stable and documented in
/// `docs/FORMAT.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// A log sequence number or step index is not the next expected one: a
    /// record is missing, repeated or out of order.
    SequenceGap,
    /// A step's recorded `prev_hash` is not the previous step's chain hash
    /// (or the session's genesis).
    PrevHashMismatch,
    /// A recorded chain hash does not recompute.
    ChainHashMismatch,
    /// A recorded digest (or operational record hash) does not recompute
    /// from the record's fields: a field was edited.
    DigestMismatch,
    /// A signature (agent, seal or checkpoint) does not verify or its key is
    /// unknown.
    BadSignature,
    /// An inclusion proof does not lead to the checkpoint's root.
    InclusionMismatch,
    /// The log's root at a checkpoint's size is not the checkpoint's root,
    /// or two checkpoints are not consistent.
    InconsistentCheckpoint,
    /// A record that must exist is absent: the stream ends before a
    /// checkpoint's size or a seal's step count, or a step's session was
    /// never started.
    MissingRecord,
    /// A step follows its session's seal.
    StepAfterSeal,
    /// A seal does not match the steps it covers (root or final hash).
    SealMismatch,
    /// A step's kind is not allowed by its session's profile.
    ProfileViolation,
    /// A record is structurally invalid (wrong org, hidden chain inputs,
    /// duplicate session start, bad key registration).
    MalformedRecord,
    /// A session names a predecessor hash that is not the final hash of a
    /// session sealed earlier in the log, or a sealed session is continued
    /// twice.
    PredecessorMismatch,
}

impl Reason {
    /// The stable kebab-case code, e.g. `prev-hash-mismatch`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::SequenceGap => "sequence-gap",
            Reason::PrevHashMismatch => "prev-hash-mismatch",
            Reason::ChainHashMismatch => "chain-hash-mismatch",
            Reason::DigestMismatch => "digest-mismatch",
            Reason::BadSignature => "bad-signature",
            Reason::InclusionMismatch => "inclusion-mismatch",
            Reason::InconsistentCheckpoint => "inconsistent-checkpoint",
            Reason::MissingRecord => "missing-record",
            Reason::StepAfterSeal => "step-after-seal",
            Reason::SealMismatch => "seal-mismatch",
            Reason::ProfileViolation => "profile-violation",
            Reason::MalformedRecord => "malformed-record",
            Reason::PredecessorMismatch => "predecessor-mismatch",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a record is: its log sequence number and, for steps, session and
/// index. Fields that do not apply are `None`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    /// Position in the org log.
    pub seq: Option<u64>,
    /// Session id.
    pub session_id: Option<String>,
    /// Step index within the session.
    pub step_index: Option<u64>,
    /// Trace id of the step, if disclosed.
    pub trace_id: Option<String>,
    /// Line of the bundle file the record is on (bundles only).
    pub line: Option<u64>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(line) = self.line {
            parts.push(format!("line {line}"));
        }
        if let Some(seq) = self.seq {
            parts.push(format!("seq {seq}"));
        }
        if let Some(session) = &self.session_id {
            parts.push(format!("session {session}"));
        }
        if let Some(index) = self.step_index {
            parts.push(format!("step {index}"));
        }
        if let Some(trace) = &self.trace_id {
            parts.push(format!("trace {trace}"));
        }
        if parts.is_empty() {
            f.write_str("start of stream")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// The first failing record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Where.
    pub at: Location,
    /// Why, as a stable code.
    pub reason: Reason,
    /// Why, for a person.
    pub detail: String,
}

/// The outcome of a verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// True when every record checked out and nothing expected was missing.
    pub verified: bool,
    /// Records checked (the failing one included).
    pub records_checked: u64,
    /// The last record that passed every check.
    pub last_valid: Option<Location>,
    /// The first failure, if any.
    pub failure: Option<Failure>,
}

/// Agent public keys by key id, each bound to its agent.
#[derive(Debug, Clone, Default)]
pub struct AgentKeys {
    keys: HashMap<String, (String, VerifyingKey)>,
}

impl AgentKeys {
    /// No keys.
    pub fn new() -> AgentKeys {
        AgentKeys::default()
    }

    /// Adds a key for `agent_id` under `key_id`.
    pub fn insert(&mut self, key_id: String, agent_id: String, key: VerifyingKey) {
        self.keys.insert(key_id, (agent_id, key));
    }

    /// Checks a seed-004 trace's signature: its key must be registered for
    /// the trace's (hashed) agent, and verify over the signed payload.
    pub fn check_trace(&self, trace: &crate::trace::CompleteTrace) -> Result<(), String> {
        let Some((agent, key)) = self.keys.get(&trace.signature_key_id) else {
            return Err(format!(
                "trace {} is signed by {}, which is not registered",
                trace.trace_id, trace.signature_key_id
            ));
        };
        if *agent != trace.agent_id_hash {
            return Err(format!(
                "key {} is registered for agent {agent}, not {}",
                trace.signature_key_id, trace.agent_id_hash
            ));
        }
        if !trace.verify(key) {
            return Err(format!(
                "the signature of trace {} does not verify over its components and trace level",
                trace.trace_id
            ));
        }
        Ok(())
    }

    /// Checks a step's signature against its declared signer: a step
    /// that names a signer must carry that signer's valid signature, and a
    /// step that names none must carry none.
    fn check(&self, record: &StepRecord) -> Result<(), String> {
        let declared = record.step.signer_key_id.as_deref();
        let sig = match (declared, &record.signature) {
            (None, None) => return Ok(()),
            (None, Some(sig)) => {
                return Err(format!(
                    "signature by {} on a step that declares no signer",
                    sig.key_id
                ));
            }
            (Some(key_id), None) => {
                return Err(format!(
                    "the step declares signer {key_id} but carries no signature"
                ));
            }
            (Some(key_id), Some(sig)) if key_id != sig.key_id => {
                return Err(format!(
                    "the step declares signer {key_id}, the signature is by {}",
                    sig.key_id
                ));
            }
            (Some(_), Some(sig)) => sig,
        };
        let Some((agent, key)) = self.keys.get(&sig.key_id) else {
            return Err(format!("signing key {} is not registered", sig.key_id));
        };
        if record.is_revealed(Field::AgentId) && *agent != record.step.agent_id {
            return Err(format!(
                "key {} belongs to agent {agent}, not {}",
                sig.key_id, record.step.agent_id
            ));
        }
        if !verify_agent_signature(key, &record.digest, &sig.signature) {
            return Err(format!("signature by {} does not verify", sig.key_id));
        }
        Ok(())
    }
}

/// The running state of one session's chain.
#[derive(Debug, Clone)]
struct ChainState {
    session_id: String,
    profile: Profile,
    next_index: u64,
    head: Hash,
    tree: Frontier,
    sealed: bool,
}

impl ChainState {
    fn new(header: &SessionHeader) -> ChainState {
        ChainState {
            session_id: header.session_id.clone(),
            profile: header.profile,
            next_index: 0,
            head: genesis_hash(header),
            tree: Frontier::new(),
            sealed: false,
        }
    }

    fn check_step(
        &mut self,
        rec: &StepRecord,
        keys: &AgentKeys,
        recomputed: Option<Hash>,
    ) -> Result<(), (Reason, String)> {
        for field in [
            Field::StepIndex,
            Field::CreatedAt,
            Field::SessionId,
            Field::StepType,
            Field::SignerKeyId,
        ] {
            if !rec.is_revealed(field) {
                return Err((
                    Reason::MalformedRecord,
                    format!("{} must be disclosed", field.name()),
                ));
            }
        }
        if self.sealed {
            return Err((
                Reason::StepAfterSeal,
                format!(
                    "session {} was sealed at {} steps",
                    self.session_id, self.next_index
                ),
            ));
        }
        let step = &rec.step;
        if step.step_index != self.next_index {
            return Err((
                Reason::SequenceGap,
                format!(
                    "expected step index {}, found {}",
                    self.next_index, step.step_index
                ),
            ));
        }
        if rec.prev_hash != self.head {
            return Err((
                Reason::PrevHashMismatch,
                format!(
                    "prev_hash {} is not the previous chain hash {}",
                    rec.prev_hash, self.head
                ),
            ));
        }
        if let Some(field) = rec.hidden_field_with_value() {
            return Err((
                Reason::DigestMismatch,
                format!(
                    "{} is hidden (erased or not disclosed) yet carries a value, which the digest does not cover",
                    field.name()
                ),
            ));
        }
        let digest = recomputed.unwrap_or_else(|| rec.recompute_digest());
        if digest != rec.digest {
            return Err((
                Reason::DigestMismatch,
                format!(
                    "digest recomputed from the fields is {digest}, recorded {}",
                    rec.digest
                ),
            ));
        }
        let chained = chain_hash(&self.head, &rec.digest, step.step_index, step.created_at);
        if chained != rec.hash {
            return Err((
                Reason::ChainHashMismatch,
                format!("chain hash recomputes to {chained}, recorded {}", rec.hash),
            ));
        }
        if let Err(e) = self.profile.check(step.kind) {
            return Err((Reason::ProfileViolation, e.to_string()));
        }
        keys.check(rec).map_err(|e| (Reason::BadSignature, e))?;
        self.head = rec.hash;
        self.next_index += 1;
        self.tree
            .push(leaf_hash(&session_leaf_data(step.step_index, &rec.hash)));
        Ok(())
    }

    fn check_seal(
        &mut self,
        seal: &SealRecord,
        origin: &str,
        server_keys: &[NoteVerifier],
    ) -> Result<(), (Reason, String)> {
        if self.sealed {
            return Err((Reason::MalformedRecord, "session sealed twice".into()));
        }
        if seal.step_count > self.next_index {
            return Err((
                Reason::MissingRecord,
                format!(
                    "seal covers {} steps; only {} present",
                    seal.step_count, self.next_index
                ),
            ));
        }
        if seal.step_count < self.next_index {
            return Err((
                Reason::SealMismatch,
                format!(
                    "seal covers {} steps; {} were recorded before it",
                    seal.step_count, self.next_index
                ),
            ));
        }
        if seal.final_hash != self.head || seal.session_root != self.tree.root() {
            return Err((
                Reason::SealMismatch,
                "seal's root or final hash does not match the session's steps".into(),
            ));
        }
        seal.verify_note(origin, server_keys)
            .map_err(|e| (Reason::BadSignature, e))?;
        self.sealed = true;
        Ok(())
    }
}

fn step_location(seq: Option<u64>, rec: &StepRecord) -> Location {
    Location {
        seq,
        session_id: Some(rec.step.session_id.clone()),
        step_index: Some(rec.step.step_index),
        trace_id: rec
            .is_revealed(Field::TraceId)
            .then(|| rec.step.trace_id.clone()),
        line: None,
    }
}

/// Bookkeeping shared by both verifiers: counts, last valid, first failure.
#[derive(Debug, Default)]
struct Progress {
    checked: u64,
    last_valid: Option<Location>,
    failure: Option<Failure>,
}

impl Progress {
    fn record(&mut self, at: Location, outcome: Result<(), (Reason, String)>) -> bool {
        self.checked += 1;
        match outcome {
            Ok(()) => {
                self.last_valid = Some(at);
                true
            }
            Err((reason, detail)) => {
                self.failure = Some(Failure { at, reason, detail });
                false
            }
        }
    }

    fn fail_at_end(&mut self, at: Location, reason: Reason, detail: String) {
        if self.failure.is_none() {
            self.failure = Some(Failure { at, reason, detail });
        }
    }

    fn verdict(self) -> Verdict {
        Verdict {
            verified: self.failure.is_none(),
            records_checked: self.checked,
            last_valid: self.last_valid,
            failure: self.failure,
        }
    }
}

/// Verifies one session's chain, fed its steps in order.
#[derive(Debug)]
pub struct SessionVerifier {
    chain: ChainState,
    keys: AgentKeys,
    progress: Progress,
}

impl SessionVerifier {
    /// A verifier for the session with this header (its genesis is derived
    /// from it) and these agent keys.
    pub fn new(header: &SessionHeader, keys: AgentKeys) -> SessionVerifier {
        SessionVerifier {
            chain: ChainState::new(header),
            keys,
            progress: Progress::default(),
        }
    }

    /// Checks the next step. Returns false once verification has failed;
    /// later records are ignored.
    pub fn push(&mut self, record: &StepRecord) -> bool {
        if self.progress.failure.is_some() {
            return false;
        }
        let outcome = if record.step.session_id == self.chain.session_id
            || !record.is_revealed(Field::SessionId)
        {
            self.chain.check_step(record, &self.keys, None)
        } else {
            Err((
                Reason::MalformedRecord,
                format!("step belongs to session {}", record.step.session_id),
            ))
        };
        // Report the position in the stream, whatever index the record claims.
        let mut at = step_location(None, record);
        at.step_index = Some(self.chain.next_index - u64::from(outcome.is_ok()));
        at.session_id = Some(self.chain.session_id.clone());
        self.progress.record(at, outcome)
    }

    /// Checks the session's seal after its steps.
    pub fn push_seal(
        &mut self,
        seal: &SealRecord,
        origin: &str,
        server_keys: &[NoteVerifier],
    ) -> bool {
        if self.progress.failure.is_some() {
            return false;
        }
        let at = Location {
            session_id: Some(seal.session_id.clone()),
            step_index: Some(seal.step_count),
            ..Location::default()
        };
        let outcome = self.chain.check_seal(seal, origin, server_keys);
        self.progress.record(at, outcome)
    }

    /// The chain hash of the last step checked (the genesis before any).
    pub fn head(&self) -> Hash {
        self.chain.head
    }

    /// The verdict. If `expected_steps` is given (from a seal or a trusted
    /// count), fewer steps is `missing-record`.
    pub fn finish(mut self, expected_steps: Option<u64>) -> Verdict {
        if let Some(expected) = expected_steps
            && self.chain.next_index < expected
        {
            let at = Location {
                session_id: Some(self.chain.session_id.clone()),
                step_index: Some(self.chain.next_index),
                ..Location::default()
            };
            self.progress.fail_at_end(
                at,
                Reason::MissingRecord,
                format!(
                    "{expected} steps expected, stream ended after {}",
                    self.chain.next_index
                ),
            );
        }
        self.progress.verdict()
    }
}

/// Verifies an org log, fed its entries in sequence order.
#[derive(Debug)]
pub struct LogVerifier {
    org_id: String,
    origin: String,
    server_keys: Vec<NoteVerifier>,
    agent_keys: AgentKeys,
    tree: Frontier,
    sessions: HashMap<String, ChainState>,
    /// Final hashes of the sessions sealed so far, with the session that
    /// continues each one, once one does.
    sealed_finals: HashMap<Hash, Option<String>>,
    /// Checkpoints still ahead of the stream, largest size first.
    pending: Vec<(u64, Hash)>,
    /// For a partial log (an export of some sessions): the checkpoint every
    /// entry's inclusion proof must lead to, and the last seq seen.
    sparse: Option<SparseState>,
    progress: Progress,
}

#[derive(Debug)]
struct SparseState {
    size: u64,
    root: Hash,
    last_seq: Option<u64>,
}

impl LogVerifier {
    /// A verifier for `org_id`'s log on the server whose key is
    /// `server_keys` (named `server_name`, which makes the log origin).
    pub fn new(server_name: &str, org_id: &str, server_keys: Vec<NoteVerifier>) -> LogVerifier {
        LogVerifier {
            org_id: org_id.to_owned(),
            origin: log_origin(server_name, org_id),
            server_keys,
            agent_keys: AgentKeys::new(),
            tree: Frontier::new(),
            sessions: HashMap::new(),
            sealed_finals: HashMap::new(),
            pending: Vec::new(),
            sparse: None,
            progress: Progress::default(),
        }
    }

    /// A verifier for a *partial* log: some entries of `org_id`'s log, in
    /// increasing `seq` order, each with an inclusion proof into
    /// `checkpoint` (fed with [`LogVerifier::push_proven`]). Sessions must
    /// be complete from their `session-start` record on.
    pub fn sparse(
        server_name: &str,
        org_id: &str,
        server_keys: Vec<NoteVerifier>,
        checkpoint: &VerifiedCheckpoint,
    ) -> LogVerifier {
        let mut verifier = LogVerifier::new(server_name, org_id, server_keys);
        verifier.sparse = Some(SparseState {
            size: checkpoint.checkpoint().size,
            root: checkpoint.checkpoint().root,
            last_seq: None,
        });
        verifier
    }

    /// Checks the next entry of a partial log with its inclusion proof.
    /// Returns false once verification has failed.
    pub fn push_proven(&mut self, entry: &LogEntry, proof: &[Hash]) -> bool {
        if self.progress.failure.is_some() {
            return false;
        }
        let at = entry_location(entry);
        let Some(sparse) = &mut self.sparse else {
            let detail = "inclusion proofs are only checked for partial logs".to_owned();
            return self
                .progress
                .record(at, Err((Reason::MalformedRecord, detail)));
        };
        if sparse.last_seq.is_some_and(|last| entry.seq <= last) {
            let detail = format!(
                "seq {} does not follow seq {:?}",
                entry.seq, sparse.last_seq
            );
            return self.progress.record(at, Err((Reason::SequenceGap, detail)));
        }
        if let Err(e) = crate::merkle::verify_inclusion(
            &entry.leaf_hash(),
            entry.seq,
            sparse.size,
            proof,
            &sparse.root,
        ) {
            let detail = format!(
                "inclusion proof of seq {} in the checkpoint of size {} fails: {e}",
                entry.seq, sparse.size
            );
            return self
                .progress
                .record(at, Err((Reason::InclusionMismatch, detail)));
        }
        sparse.last_seq = Some(entry.seq);
        let outcome = self.check_record(entry, None);
        self.progress.record(at, outcome)
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

    /// The first failure, once there is one.
    pub fn failure(&self) -> Option<&Failure> {
        self.progress.failure.as_ref()
    }

    /// Checks the next entry. Returns false once verification has failed.
    pub fn push(&mut self, entry: &LogEntry) -> bool {
        self.push_with_digest(entry, None)
    }

    /// Like [`LogVerifier::push`], with the step's digest already
    /// recomputed from its fields (`record.recompute_digest()`, the costly
    /// part, done on another thread). For operational records pass `None`.
    pub fn push_with_digest(&mut self, entry: &LogEntry, recomputed: Option<Hash>) -> bool {
        if self.progress.failure.is_some() {
            return false;
        }
        if self.sparse.is_some() {
            let detail = "a partial log needs an inclusion proof per entry".to_owned();
            return self.progress.record(
                entry_location(entry),
                Err((Reason::InclusionMismatch, detail)),
            );
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
        let outcome = self.check_record(entry, recomputed);
        if outcome.is_ok() {
            self.tree.push(entry.leaf_hash());
        }
        let outcome = outcome.and_then(|()| self.check_checkpoints());
        self.progress.record(at, outcome)
    }

    fn check_record(
        &mut self,
        entry: &LogEntry,
        recomputed: Option<Hash>,
    ) -> Result<(), (Reason, String)> {
        match &entry.record {
            LogRecord::Step(rec) => {
                if !rec.is_revealed(Field::OrgId) || rec.step.org_id != self.org_id {
                    return Err((
                        Reason::MalformedRecord,
                        format!(
                            "step of org {:?} in the log of {}",
                            rec.step.org_id, self.org_id
                        ),
                    ));
                }
                let Some(chain) = self.sessions.get_mut(&rec.step.session_id) else {
                    return Err((
                        Reason::MissingRecord,
                        format!(
                            "session {} has no session-start record",
                            rec.step.session_id
                        ),
                    ));
                };
                chain.check_step(rec, &self.agent_keys, recomputed)
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
                self.apply_op(record)
            }
        }
    }

    fn apply_op(&mut self, record: &OpRecord) -> Result<(), (Reason, String)> {
        match record {
            OpRecord::SessionStart(header) => {
                if self.sessions.contains_key(&header.session_id) {
                    return Err((
                        Reason::MalformedRecord,
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
                match self.sessions.get_mut(&seal.session_id) {
                    Some(chain) => chain.check_seal(seal, &self.origin, &self.server_keys)?,
                    // A partial log carries the seal of a session it does
                    // not include when an included session continues it:
                    // its signature is checked, its steps cannot be.
                    None if self.sparse.is_some() => seal
                        .verify_note(&self.origin, &self.server_keys)
                        .map_err(|e| (Reason::BadSignature, e))?,
                    None => {
                        return Err((
                            Reason::MissingRecord,
                            format!("seal of unknown session {}", seal.session_id),
                        ));
                    }
                }
                self.sealed_finals.entry(seal.final_hash).or_insert(None);
                Ok(())
            }
            OpRecord::KeyRegistration(reg) => {
                if crate::commit::agent_key_id(&reg.public_key) != reg.key_id {
                    return Err((
                        Reason::MalformedRecord,
                        format!("key id {} does not match the registered key", reg.key_id),
                    ));
                }
                self.agent_keys
                    .insert(reg.key_id.clone(), reg.agent_id.clone(), reg.public_key);
                Ok(())
            }
            OpRecord::SignedTrace(record) => self
                .agent_keys
                .check_trace(&record.trace)
                .map_err(|e| (Reason::BadSignature, e)),
            OpRecord::Erasure(_) | OpRecord::Review(_) | OpRecord::AuditEvent(_) => Ok(()),
        }
    }

    fn check_checkpoints(&mut self) -> Result<(), (Reason, String)> {
        while let Some(&(size, root)) = self.pending.last() {
            if size > self.tree.size() {
                break;
            }
            self.pending.pop();
            if size == self.tree.size() && self.tree.root() != root {
                return Err((
                    Reason::InconsistentCheckpoint,
                    format!(
                        "log root at size {size} is {}, the signed checkpoint says {root}",
                        self.tree.root()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The verdict. A checkpoint larger than the stream means records are
    /// missing at the end.
    pub fn finish(mut self) -> Verdict {
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
        OpRecord::KeyRegistration(_) => None,
    }
}
