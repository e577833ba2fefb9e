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
//! partial log is checked against its signed [`Selection`](crate::selection::Selection) and each
//! entry's inclusion proof.

mod chain;
mod keys;
mod log;
mod log_keys;

pub use chain::SessionVerifier;
pub use keys::AgentKeys;
pub use log::{LogVerifier, StoreChecks, entry_location};

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
    /// The checkpoint that authenticates the verdict lacks valid
    /// cosignatures by enough of the witness policy's witnesses (given to
    /// the verifier): no quorum of independent witnesses vouched that it
    /// extends what they saw before.
    InsufficientCosignatures,
}

impl Reason {
    /// Every reason, in the order `docs/FORMAT.md` lists them.
    pub const ALL: [Reason; 21] = [
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
        Reason::InsufficientCosignatures,
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
            Reason::InsufficientCosignatures => "insufficient-cosignatures",
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

impl Verdict {
    /// A verdict that failed before any record was checked, at no
    /// position (a store whose tables contradict each other, say).
    pub fn failed_before_records(reason: Reason, detail: String) -> Verdict {
        let mut verdict = Verdict {
            verified: true,
            records_checked: 0,
            last_valid: None,
            failure: None,
        };
        verdict.fail_after_records(reason, detail);
        verdict
    }

    /// Records a failure found once the records were checked (a derived
    /// table, a witness policy), at no position: the verdict no longer
    /// verifies, and what it counted stays.
    pub fn fail_after_records(&mut self, reason: Reason, detail: String) {
        self.verified = false;
        self.failure = Some(Failure {
            at: Location::default(),
            reason,
            detail,
        });
    }
}

type Check = Result<(), (Reason, String)>;

/// Why a signed note fails: one that is not a signed note at all is
/// `malformed-record`; one without a valid signature by a trusted key is
/// `bad-signature`.
pub fn note_failure(e: &crate::note::NoteError, what: &str) -> (Reason, String) {
    match e {
        crate::note::NoteError::Malformed(_) => (Reason::MalformedRecord, format!("{what}: {e}")),
        _ => (Reason::BadSignature, format!("{what}: {e}")),
    }
}
#[derive(Debug, Default)]
struct Progress {
    checked: u64,
    last_valid: Option<Location>,
    failure: Option<Failure>,
}

impl Progress {
    /// Counts a record that passed every check and gives the last valid
    /// location to be written over in place (a log of millions of records
    /// then allocates no location per record).
    fn passed(&mut self) -> &mut Location {
        self.checked += 1;
        self.last_valid.get_or_insert_with(Location::default)
    }

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
