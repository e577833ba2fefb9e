//! The operational records' own types, each with what it signs: a
//! review's decision, a session's seal (and the text of its note), an
//! erasure, a review, an agent key registered or revoked, an audit event,
//! an imported signed trace, a log key added or retired (and the text of
//! its note). Apart from `log.rs`, which holds `OpRecord` over them and
//! the log's entries, because these are the records themselves.

use crate::commit::Field;
use crate::hash::Hash;
use crate::note::{NoteError, NoteSigner, NoteVerifier};
use crate::time::Timestamp;
use ed25519_dalek::VerifyingKey;
use serde_json::Value;

/// A human review of a flagged step (seed 003's review queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewDecision {
    /// The reviewer accepts the step.
    Approve,
    /// The reviewer rejects it.
    Reject,
    /// The reviewer passes it up.
    Escalate,
}

impl ReviewDecision {
    /// `"approve"`, `"reject"` or `"escalate"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewDecision::Approve => "approve",
            ReviewDecision::Reject => "reject",
            ReviewDecision::Escalate => "escalate",
        }
    }

    /// Parses the names of [`ReviewDecision::as_str`].
    pub fn parse(text: &str) -> Option<ReviewDecision> {
        match text {
            "approve" => Some(ReviewDecision::Approve),
            "reject" => Some(ReviewDecision::Reject),
            "escalate" => Some(ReviewDecision::Escalate),
            _ => None,
        }
    }
}

/// The server's signed statement that a session is closed: its step count,
/// the Merkle root over its steps and its final chain hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealRecord {
    /// The org.
    pub org_id: String,
    /// The sealed session.
    pub session_id: String,
    /// Number of steps covered.
    pub step_count: u64,
    /// RFC 9162 root over the session leaves of steps `0..step_count`.
    pub session_root: Hash,
    /// Chain hash of the last step.
    pub final_hash: Hash,
    /// When the seal was made.
    pub sealed_at: Timestamp,
    /// The seal as a C2SP signed note (see [`seal_note_text`]).
    pub note: String,
}

/// The text of a seal note:
/// `cairn-seal/v2`, origin, session id, step count, base64 session root,
/// base64 final hash, sealed-at, one per line.
pub fn seal_note_text(
    origin: &str,
    session_id: &str,
    step_count: u64,
    session_root: &Hash,
    final_hash: &Hash,
    sealed_at: Timestamp,
) -> String {
    format!(
        "cairn-seal/v2\n{origin}\n{session_id}\n{step_count}\n{}\n{}\n{sealed_at}\n",
        session_root.to_base64(),
        final_hash.to_base64()
    )
}

impl SealRecord {
    /// Signs the seal's fields as a note of `origin` (the org log's
    /// origin), replacing `note`.
    pub fn sign(mut self, signer: &NoteSigner, origin: &str) -> Result<SealRecord, NoteError> {
        let text = seal_note_text(
            origin,
            &self.session_id,
            self.step_count,
            &self.session_root,
            &self.final_hash,
            self.sealed_at,
        );
        self.note = signer.sign(&text)?;
        Ok(self)
    }

    /// Whether a seal note's text (already opened with a trusted key)
    /// states exactly this record's fields for `origin`.
    pub fn states(&self, origin: &str, text: &str) -> bool {
        text == seal_note_text(
            origin,
            &self.session_id,
            self.step_count,
            &self.session_root,
            &self.final_hash,
            self.sealed_at,
        )
    }
}

/// Payload fields of a step removed by an erasure request or by retention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErasureRecord {
    /// The org.
    pub org_id: String,
    /// Session of the erased step.
    pub session_id: String,
    /// Index of the erased step.
    pub step_index: u64,
    /// Trace id of the erased step.
    pub trace_id: String,
    /// The erased fields with their commitments, which stand in for the
    /// values from now on.
    pub commitments: Vec<(Field, Hash)>,
    /// Why (`"request"`, `"retention"`, or free text).
    pub reason: String,
    /// Who asked (an API key id, `retention`, a local user).
    pub actor: String,
    /// When.
    pub erased_at: Timestamp,
}

/// A signed trace's record withheld by an erasure: from then on the log
/// and its exports carry only the record's `op_hash` where its view was
/// (FORMAT.md 8, "Erasing a signed trace").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceErasureRecord {
    /// The org.
    pub org_id: String,
    /// The session the trace's components were recorded in (the
    /// `signed-trace` record's `session_id`).
    pub session_id: String,
    /// The trace's own `trace_id`, for people: nothing compares it with
    /// the withheld trace, whose text is gone.
    pub trace_id: String,
    /// The `seq` of the withheld `signed-trace` entry.
    pub trace_seq: u64,
    /// That entry's `op_hash`, which stands in for its view from now on.
    pub trace_hash: Hash,
    /// Why (`"request"`, `"retention"`, or free text), as the step
    /// erasure that caused it.
    pub reason: String,
    /// Who asked.
    pub actor: String,
    /// When.
    pub erased_at: Timestamp,
}

/// A reviewer's decision on a flagged step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewRecord {
    /// The org.
    pub org_id: String,
    /// Trace id of the reviewed step.
    pub trace_id: String,
    /// Its session.
    pub session_id: String,
    /// Its index.
    pub step_index: u64,
    /// The decision.
    pub decision: ReviewDecision,
    /// Who reviewed.
    pub reviewer: String,
    /// The reviewer's note.
    pub note: Option<String>,
    /// When.
    pub reviewed_at: Timestamp,
}

/// An agent's public key, registered so that its signed steps can be
/// checked by anyone holding the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRegistration {
    /// The org.
    pub org_id: String,
    /// The agent the key speaks for.
    pub agent_id: String,
    /// `agent-` + 12 hex digits of SHA-256 of the key.
    pub key_id: String,
    /// The Ed25519 public key.
    pub public_key: VerifyingKey,
    /// When.
    pub registered_at: Timestamp,
}

/// An agent key withdrawn: from this record on, the key signs nothing the
/// log accepts (steps and traces signed earlier stay valid). Rotating a
/// key is revoking the old one and registering the new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRevocation {
    /// The org.
    pub org_id: String,
    /// The agent the key was registered for.
    pub agent_id: String,
    /// The revoked key's id.
    pub key_id: String,
    /// Why (free text: `rotated`, `compromised`, ...).
    pub reason: String,
    /// When.
    pub revoked_at: Timestamp,
}

/// A lower-level per-tool-call record that steps can reference (seed 001's
/// audit events).
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEvent {
    /// The org.
    pub org_id: String,
    /// The event id steps link to.
    pub event_id: String,
    /// The session it happened in, if any.
    pub session_id: Option<String>,
    /// What kind of event (a tool name, `genesis`, ...).
    pub action: String,
    /// Details.
    pub detail: Option<Value>,
    /// When.
    pub at: Timestamp,
}

/// A seed-004 trace imported whole, so that its agent signature can be
/// checked again from the log or an export; its components are also steps
/// of `session_id`.
#[derive(Debug, Clone, PartialEq)]
pub struct SignedTraceRecord {
    /// The org.
    pub org_id: String,
    /// The session holding the trace's components as steps.
    pub session_id: String,
    /// The trace, as received (signature included).
    pub trace: crate::trace::CompleteTrace,
}

/// What a `log-key` record does to a log key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKeyAction {
    /// The key becomes valid after this record.
    Add,
    /// The key is valid up to and including this record, never after.
    Retire,
}

impl LogKeyAction {
    /// `add` or `retire`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogKeyAction::Add => "add",
            LogKeyAction::Retire => "retire",
        }
    }

    /// Parses `add` or `retire`.
    pub fn parse(text: &str) -> Option<LogKeyAction> {
        match text {
            "add" => Some(LogKeyAction::Add),
            "retire" => Some(LogKeyAction::Retire),
            _ => None,
        }
    }
}

/// A log key added or retired (`docs/FORMAT.md` 7.10): how a server's key
/// changes without a flag day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogKeyRecord {
    /// The org.
    pub org_id: String,
    /// Added or retired.
    pub action: LogKeyAction,
    /// The key (a readable Ed25519 note vkey).
    pub key: NoteVerifier,
    /// The key's vkey text as the record's view holds it: what the view is
    /// hashed with and its note states. A vkey's key id may be written in
    /// either case (FORMAT 7.1), so this need not be `key`'s own spelling
    /// (lowercase), which Cairn writes; the key itself (name, algorithm,
    /// public key) is what identifies it.
    pub key_text: String,
    /// When.
    pub at: Timestamp,
    /// The signed log-key note ([`log_key_note_text`]).
    pub note: String,
}

/// The text a `log-key` record's note signs:
/// `cairn-log-key/v1\n<origin>\n<action>\n<key>\n<at>\n`, with the key's
/// vkey text as the record's view writes it ([`LogKeyRecord::key_text`]).
pub fn log_key_note_text(origin: &str, action: LogKeyAction, key: &str, at: Timestamp) -> String {
    format!(
        "cairn-log-key/v1\n{origin}\n{}\n{key}\n{at}\n",
        action.as_str()
    )
}

impl LogKeyRecord {
    /// A record of `action` on `key`, its note signed by `signer`.
    pub fn sign(
        org_id: &str,
        origin: &str,
        action: LogKeyAction,
        key: NoteVerifier,
        at: Timestamp,
        signer: &NoteSigner,
    ) -> Result<LogKeyRecord, NoteError> {
        let key_text = key.to_string();
        let note = signer.sign(&log_key_note_text(origin, action, &key_text, at))?;
        Ok(LogKeyRecord {
            org_id: org_id.to_owned(),
            action,
            key,
            key_text,
            at,
            note,
        })
    }
}
