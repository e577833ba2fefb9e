//! Streaming verification of session chains and org logs.
//!
//! A verifier is fed records one at a time, keeps O(log n) state for the
//! log and a small state per session (never the records themselves), stops
//! at the first failure and reports it as a [`Verdict`]: verified or not,
//! how many records were checked, the last valid one, and the first failing
//! record with a [`Reason`]. The only state that grows with records is the
//! list of erased steps whose erasure record is still ahead.
//!
//! The order of the checks is part of the published algorithm
//! (`docs/FORMAT.md` section 9), so that two verifiers name the same record
//! and reason for the same input. For one step:
//!
//! 1. disclosure: fields that are never hidden are shown, fields the level
//!    hides are hidden, a hidden field the level shows is an erasable
//!    payload field (`malformed-record`);
//! 2. the session was started (`missing-record`) and is not sealed
//!    (`step-after-seal`);
//! 3. the step index is the next one (`sequence-gap`);
//! 4. `prev_hash` is the session's current head (`prev-hash-mismatch`);
//! 5. no hidden field carries a value, and the digest recomputes
//!    (`digest-mismatch`);
//! 6. the chain hash recomputes (`chain-hash-mismatch`);
//! 7. the step's agent is its session header's (`malformed-record`);
//!    time does not run backwards in the session, and `created_at` is
//!    within the session's clock skew of `logged_at` (`bad-timestamp`);
//! 8. the kind is allowed by the session's profile (`profile-violation`);
//! 9. a declared signer's signature verifies under a key registered for
//!    the step's agent before the step and not revoked (`bad-signature`);
//! 10. erased fields wait for the erasure record that names them
//!     (`erasure-mismatch` if it never comes).
//!
//! In an org log, each entry's sequence number is checked first
//! (`sequence-gap`), then its `logged_at` (`bad-timestamp`); every leaf is
//! folded into the log's tree, and whenever the tree reaches the size of an
//! expected checkpoint its root must match (`inconsistent-checkpoint`). A
//! partial log is checked against its signed [`Selection`] and each
//! entry's inclusion proof.

use crate::checkpoint::VerifiedCheckpoint;
use crate::commit::{
    Field, Opening, StepRecord, chain_hash, genesis_hash, session_leaf_data, verify_agent_signature,
};
use crate::detail::DetailLevel;
use crate::hash::Hash;
use crate::log::{
    ErasureRecord, KeyRegistration, KeyRevocation, LogEntry, LogRecord, OpRecord, SealRecord,
    log_origin,
};
use crate::merkle::{Frontier, leaf_hash};
use crate::note::NoteVerifier;
use crate::record::{Profile, SessionHeader};
use crate::selection::Selection;
use crate::time::Timestamp;
use ed25519_dalek::VerifyingKey;
use std::collections::HashMap;
use std::fmt;

/// Why verification failed. The string forms are stable and documented in
/// `docs/FORMAT.md` section 9, one per class of fault.
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
    /// A recorded digest, operational record hash or genesis does not
    /// recompute from the record's fields, or a hidden field carries a
    /// value: a field was edited.
    DigestMismatch,
    /// A signature (checkpoint, seal, selection, agent step or trace) does
    /// not verify, or is by a key that may not sign it (unknown, registered
    /// for another agent, revoked).
    BadSignature,
    /// An inclusion proof does not lead to the checkpoint's root, or a
    /// stored leaf hash does not match its entry.
    InclusionMismatch,
    /// The log's root at a trusted checkpoint's size is not that
    /// checkpoint's root, or a consistency proof between two checkpoints
    /// fails.
    InconsistentCheckpoint,
    /// A record that must exist is absent: the stream ends before a
    /// checkpoint's size, a seal's step count or a selection's claim, a
    /// bundle has no end line, a step's session was never started.
    MissingRecord,
    /// A step follows its session's seal.
    StepAfterSeal,
    /// A seal does not match the steps it covers (count, root or final
    /// hash), or its note states other fields than its record.
    SealMismatch,
    /// A step's kind is not allowed by its session's profile.
    ProfileViolation,
    /// A line or record does not have the form `docs/FORMAT.md` gives it:
    /// not JSON, an unknown or missing member, a value of the wrong type, a
    /// non-canonical timestamp, a field hidden that must be shown (or shown
    /// beyond the bundle's level), a record of another org, a step whose
    /// agent is not its session's, a key id that is not its key's.
    MalformedRecord,
    /// A session names a predecessor hash that is not the final hash of a
    /// session sealed earlier in the log, or a sealed session is continued
    /// twice.
    PredecessorMismatch,
    /// A record that may exist once exists twice: a session started or
    /// sealed twice, an agent key registered or revoked twice.
    DuplicateRecord,
    /// An entry no signed checkpoint covers: its seq is at or beyond the
    /// size of the bundle's checkpoint.
    UncoveredEntry,
    /// An entry of a partial bundle that its signed selection does not list.
    UnlistedEntry,
    /// A proof the verification needs is absent: an entry of a partial
    /// bundle without an inclusion proof, a partial bundle without its
    /// selection statement, a trusted checkpoint the bundle cannot be
    /// related to.
    MissingProof,
    /// An erased field without an erasure record that names it with its
    /// commitment, or an erasure record that names a step not erased.
    ErasureMismatch,
    /// Time runs backwards (a step's `created_at` before the previous
    /// step's in its session, an entry's `logged_at` before the previous
    /// entry's), or a step's `created_at` lies further from the time the
    /// server logged it than its session allows.
    BadTimestamp,
    /// A signed selection states something the bundle contradicts: a
    /// session outside its scope, a head other than the session's verified
    /// last chain hash, a record of another type at a listed position.
    SelectionMismatch,
}

impl Reason {
    /// Every reason, in the order `docs/FORMAT.md` lists them.
    pub const ALL: [Reason; 20] = [
        Reason::SequenceGap,
        Reason::PrevHashMismatch,
        Reason::ChainHashMismatch,
        Reason::DigestMismatch,
        Reason::BadSignature,
        Reason::InclusionMismatch,
        Reason::InconsistentCheckpoint,
        Reason::MissingRecord,
        Reason::StepAfterSeal,
        Reason::SealMismatch,
        Reason::ProfileViolation,
        Reason::MalformedRecord,
        Reason::PredecessorMismatch,
        Reason::DuplicateRecord,
        Reason::UncoveredEntry,
        Reason::UnlistedEntry,
        Reason::MissingProof,
        Reason::ErasureMismatch,
        Reason::BadTimestamp,
        Reason::SelectionMismatch,
    ];

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
            Reason::DuplicateRecord => "duplicate-record",
            Reason::UncoveredEntry => "uncovered-entry",
            Reason::UnlistedEntry => "unlisted-entry",
            Reason::MissingProof => "missing-proof",
            Reason::ErasureMismatch => "erasure-mismatch",
            Reason::BadTimestamp => "bad-timestamp",
            Reason::SelectionMismatch => "selection-mismatch",
        }
    }

    /// Parses [`Reason::as_str`].
    pub fn parse(code: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == code)
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

type Check = Result<(), (Reason, String)>;

/// One registered agent key and its history in the log.
#[derive(Debug, Clone)]
struct KeyState {
    agent_id: String,
    key: VerifyingKey,
    registered_seq: u64,
    revoked_seq: Option<u64>,
}

/// Agent public keys by key id: each bound to one agent for good, from the
/// position of its `key-registration` record until the position of its
/// `key-revocation` record, if any (`docs/FORMAT.md` 7.3).
#[derive(Debug, Clone, Default)]
pub struct AgentKeys {
    keys: HashMap<String, KeyState>,
}

impl AgentKeys {
    /// No keys.
    pub fn new() -> AgentKeys {
        AgentKeys::default()
    }

    /// Records a registration found at `seq`: its key id must be its key's,
    /// and a key id is registered once.
    pub fn register(&mut self, reg: &KeyRegistration, seq: u64) -> Check {
        if crate::commit::agent_key_id(&reg.public_key) != reg.key_id {
            return Err((
                Reason::MalformedRecord,
                format!("key id {} does not match the registered key", reg.key_id),
            ));
        }
        if let Some(existing) = self.keys.get(&reg.key_id) {
            return Err((
                Reason::DuplicateRecord,
                format!(
                    "key {} was registered at seq {} (for agent {}) already",
                    reg.key_id, existing.registered_seq, existing.agent_id
                ),
            ));
        }
        self.keys.insert(
            reg.key_id.clone(),
            KeyState {
                agent_id: reg.agent_id.clone(),
                key: reg.public_key,
                registered_seq: seq,
                revoked_seq: None,
            },
        );
        Ok(())
    }

    /// Records a revocation found at `seq`: it must name a key registered
    /// earlier for that agent, not revoked yet.
    pub fn revoke(&mut self, rev: &KeyRevocation, seq: u64) -> Check {
        let Some(state) = self
            .keys
            .get_mut(&rev.key_id)
            .filter(|k| k.registered_seq < seq)
        else {
            return Err((
                Reason::MalformedRecord,
                format!("revocation of key {}, which is not registered", rev.key_id),
            ));
        };
        if state.agent_id != rev.agent_id {
            return Err((
                Reason::MalformedRecord,
                format!(
                    "revocation of key {} for agent {}; it is registered for {}",
                    rev.key_id, rev.agent_id, state.agent_id
                ),
            ));
        }
        if let Some(at) = state.revoked_seq {
            return Err((
                Reason::DuplicateRecord,
                format!("key {} was revoked at seq {at} already", rev.key_id),
            ));
        }
        state.revoked_seq = Some(seq);
        Ok(())
    }

    /// The key `key_id` as it may sign for `agent` at log position `seq`
    /// (`None`: at any position, for records read outside a log).
    fn usable(&self, key_id: &str, agent: &str, seq: Option<u64>) -> Result<&VerifyingKey, String> {
        let Some(state) = self.keys.get(key_id) else {
            return Err(format!("signing key {key_id} is not registered"));
        };
        if let Some(seq) = seq
            && state.registered_seq >= seq
        {
            return Err(format!(
                "signing key {key_id} is registered at seq {}, after this record",
                state.registered_seq
            ));
        }
        if state.agent_id != agent {
            return Err(format!(
                "key {key_id} is registered for agent {}, not {agent}",
                state.agent_id
            ));
        }
        if let Some(revoked) = state.revoked_seq
            && seq.is_none_or(|seq| revoked < seq)
        {
            return Err(format!("key {key_id} was revoked at seq {revoked}"));
        }
        Ok(&state.key)
    }

    /// Checks a seed-004 trace's signature at log position `seq`: its key
    /// must be registered for the trace's (hashed) agent and not revoked,
    /// and verify over the signed payload.
    pub fn check_trace(
        &self,
        trace: &crate::trace::CompleteTrace,
        seq: Option<u64>,
    ) -> Result<(), String> {
        let key = self.usable(&trace.signature_key_id, &trace.agent_id_hash, seq)?;
        if !trace.verify(key) {
            return Err(format!(
                "the signature of trace {} does not verify over its components and trace level",
                trace.trace_id
            ));
        }
        Ok(())
    }

    /// Checks a step's signature against its declared signer: a step
    /// that names a signer must carry that signer's valid signature, by a
    /// key registered for the step's agent before it and not revoked; a
    /// step that names none must carry none.
    fn check(&self, record: &StepRecord, seq: Option<u64>) -> Result<(), String> {
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
        let key = self.usable(&sig.key_id, &record.step.agent_id, seq)?;
        if !verify_agent_signature(key, &record.digest, &sig.signature) {
            return Err(format!("signature by {} does not verify", sig.key_id));
        }
        Ok(())
    }
}

/// The fields a step shows at `level` that it hides anyway: erased payload
/// fields, with their commitments. Checks the disclosure rules first: a
/// field that is never hidden, or that the level shows and erasure cannot
/// remove, must be revealed; a field the level hides must be hidden.
fn erased_fields(
    rec: &StepRecord,
    level: DetailLevel,
) -> Result<Vec<(Field, Hash)>, (Reason, String)> {
    let mut erased = Vec::new();
    for field in crate::commit::FIELDS {
        let shown = DetailLevel::of(field) <= level;
        match (rec.openings.get(field), shown) {
            (Opening::Revealed(_), true) | (Opening::Hidden(_), false) => {}
            (Opening::Revealed(_), false) => {
                return Err((
                    Reason::MalformedRecord,
                    format!(
                        "{} is shown beyond the bundle's level {level}",
                        field.name()
                    ),
                ));
            }
            (Opening::Hidden(commitment), true) => {
                if field.always_disclosed() || !field.is_payload() {
                    return Err((
                        Reason::MalformedRecord,
                        format!("{} must be disclosed at level {level}", field.name()),
                    ));
                }
                erased.push((field, *commitment));
            }
        }
    }
    Ok(erased)
}

/// A compact fingerprint of what an erasure removed from one step (its
/// trace id and the erased fields' commitments), compared between the step
/// and its erasure record. Internal: not part of the format.
fn erasure_fingerprint(trace_id: &str, fields: &[(Field, Hash)]) -> Hash {
    let mut framer = crate::hash::Framer::new("cairn/internal/erasure").part(trace_id.as_bytes());
    for (field, commitment) in fields {
        framer = framer.part(field.name().as_bytes()).part(&commitment.0);
    }
    framer.finish()
}

/// The running state of one session's chain.
#[derive(Debug, Clone)]
struct ChainState {
    session_id: String,
    agent_id: String,
    profile: Profile,
    max_skew_micros: i64,
    next_index: u64,
    head: Hash,
    last_created: Option<Timestamp>,
    tree: Frontier,
    sealed: bool,
}

/// Where a step sits in the log, when it is read from one.
#[derive(Debug, Clone, Copy, Default)]
struct LogPosition {
    seq: Option<u64>,
    logged_at: Option<Timestamp>,
}

impl ChainState {
    fn new(header: &SessionHeader) -> ChainState {
        ChainState {
            session_id: header.session_id.clone(),
            agent_id: header.agent_id.clone(),
            profile: header.profile,
            max_skew_micros: i64::try_from(header.max_clock_skew_s)
                .unwrap_or(i64::MAX)
                .saturating_mul(1_000_000),
            next_index: 0,
            head: genesis_hash(header),
            last_created: None,
            tree: Frontier::new(),
            sealed: false,
        }
    }

    /// Checks a step in the order `docs/FORMAT.md` 9.2 gives (after the
    /// disclosure rules, which the caller checked). Returns what the step
    /// shows erased at `level`, for the erasure check.
    fn check_step(
        &mut self,
        rec: &StepRecord,
        keys: &AgentKeys,
        recomputed: Option<Hash>,
        at: LogPosition,
    ) -> Check {
        let step = &rec.step;
        if self.sealed {
            return Err((
                Reason::StepAfterSeal,
                format!(
                    "session {} was sealed at {} steps",
                    self.session_id, self.next_index
                ),
            ));
        }
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
        if step.agent_id != self.agent_id {
            return Err((
                Reason::MalformedRecord,
                format!(
                    "the step's agent is {}, its session's header names {}",
                    step.agent_id, self.agent_id
                ),
            ));
        }
        if let Some(last) = self.last_created
            && step.created_at < last
        {
            return Err((
                Reason::BadTimestamp,
                format!(
                    "created_at {} is before the previous step's {last}",
                    step.created_at
                ),
            ));
        }
        if let Some(logged) = at.logged_at {
            let skew = step.created_at.as_micros().abs_diff(logged.as_micros());
            if skew > self.max_skew_micros.unsigned_abs() {
                return Err((
                    Reason::BadTimestamp,
                    format!(
                        "created_at {} is {:.3} s from the time the server logged it ({logged}); the session allows {} s",
                        step.created_at,
                        skew as f64 / 1e6,
                        self.max_skew_micros / 1_000_000
                    ),
                ));
            }
        }
        if let Err(e) = self.profile.check(step.kind) {
            return Err((Reason::ProfileViolation, e.to_string()));
        }
        keys.check(rec, at.seq)
            .map_err(|e| (Reason::BadSignature, e))?;
        self.head = rec.hash;
        self.next_index += 1;
        self.last_created = Some(step.created_at);
        self.tree
            .push(leaf_hash(&session_leaf_data(step.step_index, &rec.hash)));
        Ok(())
    }

    fn check_seal(
        &mut self,
        seal: &SealRecord,
        origin: &str,
        server_keys: &[NoteVerifier],
    ) -> Check {
        if self.sealed {
            return Err((
                Reason::DuplicateRecord,
                format!("session {} is sealed twice", self.session_id),
            ));
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
        check_seal_note(seal, origin, server_keys)?;
        self.sealed = true;
        Ok(())
    }
}

/// Why a signed note fails: one that is not a signed note at all is
/// `malformed-record`; one without a valid signature by a trusted key is
/// `bad-signature`.
pub fn note_failure(e: &crate::note::NoteError, what: &str) -> (Reason, String) {
    match e {
        crate::note::NoteError::Malformed(_) => (Reason::MalformedRecord, format!("{what}: {e}")),
        _ => (Reason::BadSignature, format!("{what}: {e}")),
    }
}

/// A seal's note must be signed by a log key (`bad-signature`) and state
/// exactly the record's fields (`seal-mismatch`).
fn check_seal_note(seal: &SealRecord, origin: &str, server_keys: &[NoteVerifier]) -> Check {
    let text =
        crate::note::open(&seal.note, server_keys).map_err(|e| note_failure(&e, "seal note"))?;
    if !seal.states(origin, &text) {
        return Err((
            Reason::SealMismatch,
            "the seal note states other fields than its record".into(),
        ));
    }
    Ok(())
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
    fn record(&mut self, at: Location, outcome: Check) -> bool {
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

/// Verifies one session's chain on its own, fed its steps in order: the
/// reads of a store use it (`cairn verify --session`, replay with
/// verification). The session's erasure records and key history come from
/// the same log.
#[derive(Debug)]
pub struct SessionVerifier {
    chain: ChainState,
    keys: AgentKeys,
    level: DetailLevel,
    /// Erasure records of the session by step index, with their seq; each
    /// erased step must have one, and each one an erased step.
    erasures: HashMap<u64, (u64, ErasureRecord)>,
    progress: Progress,
}

impl SessionVerifier {
    /// A verifier for the session with this header (its genesis is derived
    /// from it) and these agent keys.
    pub fn new(header: &SessionHeader, keys: AgentKeys) -> SessionVerifier {
        SessionVerifier {
            chain: ChainState::new(header),
            keys,
            level: DetailLevel::Full,
            erasures: HashMap::new(),
            progress: Progress::default(),
        }
    }

    /// Checks steps shown at `level` (seed 004) rather than in full: the
    /// fields the level hides must be hidden, the others shown.
    pub fn at_level(mut self, level: DetailLevel) -> SessionVerifier {
        self.level = level;
        self
    }

    /// Gives the session's erasure records (with their log positions).
    pub fn expect_erasures(&mut self, erasures: impl IntoIterator<Item = (u64, ErasureRecord)>) {
        for (seq, erasure) in erasures {
            self.erasures.insert(erasure.step_index, (seq, erasure));
        }
    }

    /// Checks the next step, read outside a log (no position, no logged
    /// time). Returns false once verification has failed.
    pub fn push(&mut self, record: &StepRecord) -> bool {
        self.push_inner(record, LogPosition::default())
    }

    /// Checks the next step, read from the log at `seq`, logged at
    /// `logged_at`. Returns false once verification has failed.
    pub fn push_at(&mut self, record: &StepRecord, seq: u64, logged_at: Timestamp) -> bool {
        self.push_inner(
            record,
            LogPosition {
                seq: Some(seq),
                logged_at: Some(logged_at),
            },
        )
    }

    fn push_inner(&mut self, record: &StepRecord, at: LogPosition) -> bool {
        if self.progress.failure.is_some() {
            return false;
        }
        // Report the position in the stream, whatever index the record claims.
        let position = self.chain.next_index;
        let outcome = self.check(record, at);
        let mut loc = step_location(at.seq, record);
        loc.step_index = Some(position);
        loc.session_id = Some(self.chain.session_id.clone());
        self.progress.record(loc, outcome)
    }

    fn check(&mut self, record: &StepRecord, at: LogPosition) -> Check {
        let erased = erased_fields(record, self.level)?;
        if record.step.session_id != self.chain.session_id {
            return Err((
                Reason::MalformedRecord,
                format!("step belongs to session {}", record.step.session_id),
            ));
        }
        self.chain.check_step(record, &self.keys, None, at)?;
        let index = record.step.step_index;
        match (erased.is_empty(), self.erasures.remove(&index)) {
            (true, None) => Ok(()),
            (false, None) => Err((
                Reason::ErasureMismatch,
                "the step's payload is erased but no erasure record names it".into(),
            )),
            (true, Some((seq, _))) => Err((
                Reason::ErasureMismatch,
                format!("the erasure record at seq {seq} names this step, whose payload is shown"),
            )),
            (false, Some((seq, erasure))) => {
                if erasure_fingerprint(&erasure.trace_id, &erasure.commitments)
                    != erasure_fingerprint(&record.step.trace_id, &erased)
                {
                    return Err((
                        Reason::ErasureMismatch,
                        format!(
                            "the erasure record at seq {seq} names other fields or commitments than the step hides"
                        ),
                    ));
                }
                if at.seq.is_some_and(|step_seq| seq <= step_seq) {
                    return Err((
                        Reason::ErasureMismatch,
                        format!("the erasure record at seq {seq} precedes its step"),
                    ));
                }
                Ok(())
            }
        }
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

    /// Steps checked so far.
    pub fn steps(&self) -> u64 {
        self.chain.next_index
    }

    /// The verdict. If `expected_steps` is given (from a seal or the log),
    /// fewer steps is `missing-record`; an erasure record naming a step
    /// that was not seen is `erasure-mismatch`.
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
        if let Some((seq, erasure)) = self.erasures.values().min_by_key(|(seq, _)| *seq) {
            let at = Location {
                seq: Some(*seq),
                session_id: Some(erasure.session_id.clone()),
                step_index: Some(erasure.step_index),
                trace_id: Some(erasure.trace_id.clone()),
                line: None,
            };
            self.progress.fail_at_end(
                at,
                Reason::ErasureMismatch,
                format!(
                    "the erasure record at seq {seq} names step {}, which the session does not hold",
                    erasure.step_index
                ),
            );
        }
        self.progress.verdict()
    }
}

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
    server_keys: Vec<NoteVerifier>,
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
    progress: Progress,
}

impl LogVerifier {
    /// A verifier for `org_id`'s whole log on the server whose keys are
    /// `server_keys` (named `server_name`, which makes the log origin).
    pub fn new(server_name: &str, org_id: &str, server_keys: Vec<NoteVerifier>) -> LogVerifier {
        LogVerifier {
            org_id: org_id.to_owned(),
            origin: log_origin(server_name, org_id),
            server_keys,
            agent_keys: AgentKeys::new(),
            level: DetailLevel::Full,
            tree: Frontier::new(),
            last_logged: None,
            sessions: HashMap::new(),
            sealed_finals: HashMap::new(),
            pending_erasures: HashMap::new(),
            pending: Vec::new(),
            sparse: None,
            progress: Progress::default(),
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
        if self.progress.failure.is_some() {
            return false;
        }
        let at = entry_location(entry);
        match self.check_proven(entry, proof) {
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
        self.check_record(entry, None).map_err(no_loc)
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
                match self.sessions.get_mut(&seal.session_id) {
                    Some(chain) => chain.check_seal(seal, &self.origin, &self.server_keys)?,
                    // A partial log carries the seal of a session it does
                    // not include when an included session continues it:
                    // its signature is checked, its steps cannot be.
                    None if self.sparse.is_some() => {
                        check_seal_note(seal, &self.origin, &self.server_keys)?
                    }
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
            None if self.level == DetailLevel::Full => Err((
                Reason::ErasureMismatch,
                format!(
                    "the erasure names step {} of session {}, which shows its payload (or was erased already)",
                    erasure.step_index, erasure.session_id
                ),
            )),
            // The level hides the payload anyway: nothing to compare.
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
                    format!(
                        "log root at size {size} is {}, the signed checkpoint says {root}: the history up to seq {} was rewritten",
                        self.tree.root(),
                        size - 1
                    ),
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
        OpRecord::KeyRegistration(_) | OpRecord::KeyRevocation(_) => None,
    }
}
