//! The org log: every record of an org, steps and operational records
//! alike, as one gap-free sequence of Merkle leaves.
//!
//! ```text
//! op_hash   = SHA-256(frame("cairn/v2/op"; type, jcs(view)))
//! leaf data = frame("cairn/v2/log-leaf"; u64be(seq), type, record hash, logged_at)
//! ```
//!
//! where the record hash is a step's chain hash or an operational record's
//! `op_hash`. The canonical JSON view of each operational record is also its
//! stored and exported form ([`OpRecord::to_view`], [`OpRecord::from_view`]).

use crate::checkpoint::Checkpoint;
use crate::commit::{Field, StepRecord};
use crate::hash::{Framer, Hash, frame_bytes};
use crate::jcs;
use crate::merkle;
use crate::note::{NoteError, NoteSigner, NoteVerifier};
use crate::record::{Profile, SessionHeader};
use crate::time::Timestamp;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::VerifyingKey;
use serde_json::{Map, Value, json};

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
    /// When.
    pub at: Timestamp,
    /// The signed log-key note ([`log_key_note_text`]).
    pub note: String,
}

/// The text a `log-key` record's note signs:
/// `cairn-log-key/v1\n<origin>\n<action>\n<key>\n<at>\n`.
pub fn log_key_note_text(
    origin: &str,
    action: LogKeyAction,
    key: &NoteVerifier,
    at: Timestamp,
) -> String {
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
        let note = signer.sign(&log_key_note_text(origin, action, &key, at))?;
        Ok(LogKeyRecord {
            org_id: org_id.to_owned(),
            action,
            key,
            at,
            note,
        })
    }
}

/// An operational record of the org log.
#[derive(Debug, Clone, PartialEq)]
pub enum OpRecord {
    /// A session began; its genesis is derived from this header.
    SessionStart(SessionHeader),
    /// A session was sealed.
    Seal(SealRecord),
    /// Payload fields of a step were erased.
    Erasure(ErasureRecord),
    /// A flagged step was reviewed.
    Review(ReviewRecord),
    /// An agent key was registered.
    KeyRegistration(KeyRegistration),
    /// An agent key was revoked.
    KeyRevocation(KeyRevocation),
    /// A per-tool-call audit event.
    AuditEvent(AuditEvent),
    /// An imported, agent-signed trace.
    SignedTrace(SignedTraceRecord),
    /// A log key added or retired.
    LogKey(LogKeyRecord),
}

/// A stored operational record that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {kind} record: {reason}")]
pub struct OpParseError {
    /// The record type.
    pub kind: String,
    /// What is wrong.
    pub reason: String,
}

impl OpRecord {
    /// The entry type written in the leaf: `session-start`, `seal`,
    /// `erasure`, `review`, `key-registration`, `key-revocation`,
    /// `audit-event`, `signed-trace` or `log-key`.
    pub fn entry_type(&self) -> &'static str {
        match self {
            OpRecord::SessionStart(_) => "session-start",
            OpRecord::Seal(_) => "seal",
            OpRecord::Erasure(_) => "erasure",
            OpRecord::Review(_) => "review",
            OpRecord::KeyRegistration(_) => "key-registration",
            OpRecord::KeyRevocation(_) => "key-revocation",
            OpRecord::AuditEvent(_) => "audit-event",
            OpRecord::SignedTrace(_) => "signed-trace",
            OpRecord::LogKey(_) => "log-key",
        }
    }

    /// The org the record belongs to.
    pub fn org_id(&self) -> &str {
        match self {
            OpRecord::SessionStart(h) => &h.org_id,
            OpRecord::Seal(r) => &r.org_id,
            OpRecord::Erasure(r) => &r.org_id,
            OpRecord::Review(r) => &r.org_id,
            OpRecord::KeyRegistration(r) => &r.org_id,
            OpRecord::KeyRevocation(r) => &r.org_id,
            OpRecord::AuditEvent(r) => &r.org_id,
            OpRecord::SignedTrace(r) => &r.org_id,
            OpRecord::LogKey(r) => &r.org_id,
        }
    }

    /// The record's canonical view (hashed with JCS, stored and exported).
    pub fn to_view(&self) -> Value {
        match self {
            OpRecord::SessionStart(h) => json!({
                "org_id": h.org_id,
                "session_id": h.session_id,
                "agent_id": h.agent_id,
                "started_at": h.started_at.to_string(),
                "caller": h.caller,
                "profile": h.profile.as_str(),
                "predecessor": h.predecessor.map(|p| p.to_hex()),
                "full_consent": h.full_consent,
                "max_clock_skew_s": h.max_clock_skew_s,
                "genesis": crate::commit::genesis_hash(h).to_hex(),
            }),
            OpRecord::Seal(s) => json!({
                "org_id": s.org_id,
                "session_id": s.session_id,
                "step_count": s.step_count,
                "session_root": s.session_root.to_hex(),
                "final_hash": s.final_hash.to_hex(),
                "sealed_at": s.sealed_at.to_string(),
                "note": s.note,
            }),
            OpRecord::Erasure(e) => {
                let commitments: Map<String, Value> = e
                    .commitments
                    .iter()
                    .map(|(f, h)| (f.name().to_owned(), Value::String(h.to_hex())))
                    .collect();
                json!({
                    "org_id": e.org_id,
                    "session_id": e.session_id,
                    "step_index": e.step_index,
                    "trace_id": e.trace_id,
                    "commitments": commitments,
                    "reason": e.reason,
                    "actor": e.actor,
                    "erased_at": e.erased_at.to_string(),
                })
            }
            OpRecord::Review(r) => json!({
                "org_id": r.org_id,
                "trace_id": r.trace_id,
                "session_id": r.session_id,
                "step_index": r.step_index,
                "decision": r.decision.as_str(),
                "reviewer": r.reviewer,
                "note": r.note,
                "reviewed_at": r.reviewed_at.to_string(),
            }),
            OpRecord::KeyRegistration(k) => json!({
                "org_id": k.org_id,
                "agent_id": k.agent_id,
                "key_id": k.key_id,
                "public_key": B64.encode(k.public_key.as_bytes()),
                "registered_at": k.registered_at.to_string(),
            }),
            OpRecord::KeyRevocation(k) => json!({
                "org_id": k.org_id,
                "agent_id": k.agent_id,
                "key_id": k.key_id,
                "reason": k.reason,
                "revoked_at": k.revoked_at.to_string(),
            }),
            OpRecord::SignedTrace(t) => json!({
                "org_id": t.org_id,
                "session_id": t.session_id,
                "trace": t.trace.original,
            }),
            OpRecord::AuditEvent(a) => json!({
                "org_id": a.org_id,
                "event_id": a.event_id,
                "session_id": a.session_id,
                "action": a.action,
                "detail": a.detail,
                "at": a.at.to_string(),
            }),
            OpRecord::LogKey(k) => json!({
                "org_id": k.org_id,
                "action": k.action.as_str(),
                "key": k.key.to_string(),
                "at": k.at.to_string(),
                "note": k.note,
            }),
        }
    }

    /// The members a view of `entry_type` has, every one always present
    /// (optional values are `null`); `None` for an unknown type.
    pub fn view_members(entry_type: &str) -> Option<&'static [&'static str]> {
        Some(match entry_type {
            "session-start" => &[
                "org_id",
                "session_id",
                "agent_id",
                "started_at",
                "caller",
                "profile",
                "predecessor",
                "full_consent",
                "max_clock_skew_s",
                "genesis",
            ],
            "seal" => &[
                "org_id",
                "session_id",
                "step_count",
                "session_root",
                "final_hash",
                "sealed_at",
                "note",
            ],
            "erasure" => &[
                "org_id",
                "session_id",
                "step_index",
                "trace_id",
                "commitments",
                "reason",
                "actor",
                "erased_at",
            ],
            "review" => &[
                "org_id",
                "trace_id",
                "session_id",
                "step_index",
                "decision",
                "reviewer",
                "note",
                "reviewed_at",
            ],
            "key-registration" => &[
                "org_id",
                "agent_id",
                "key_id",
                "public_key",
                "registered_at",
            ],
            "key-revocation" => &["org_id", "agent_id", "key_id", "reason", "revoked_at"],
            "audit-event" => &["org_id", "event_id", "session_id", "action", "detail", "at"],
            "signed-trace" => &["org_id", "session_id", "trace"],
            "log-key" => &["org_id", "action", "key", "at", "note"],
            _ => return None,
        })
    }

    /// Parses a view produced by [`OpRecord::to_view`]. The view must have
    /// exactly the members of its type ([`OpRecord::view_members`]), each of
    /// its type: nothing is coerced or ignored. Recorded hashes inside a
    /// view (a session's `genesis`) are parsed but not compared here: a
    /// verifier recomputes the record hash from [`OpRecord::to_view`], which
    /// derives them, so a changed one is a `digest-mismatch`.
    pub fn from_view(entry_type: &str, view: &Value) -> Result<OpRecord, OpParseError> {
        let err = |reason: &str| OpParseError {
            kind: entry_type.to_owned(),
            reason: reason.to_owned(),
        };
        let members =
            OpRecord::view_members(entry_type).ok_or_else(|| err("unknown record type"))?;
        let obj = view.as_object().ok_or_else(|| err("not an object"))?;
        if let Some(unknown) = obj.keys().find(|k| !members.contains(&k.as_str())) {
            return Err(err(&format!("unknown member {unknown:?}")));
        }
        if let Some(missing) = members.iter().find(|m| !obj.contains_key(**m)) {
            return Err(err(&format!("missing member {missing:?}")));
        }
        let s = |k: &str| -> Result<String, OpParseError> {
            obj.get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| err(&format!("{k} must be a string")))
        };
        let opt_s = |k: &str| -> Result<Option<String>, OpParseError> {
            match obj.get(k) {
                Some(Value::Null) => Ok(None),
                Some(Value::String(v)) => Ok(Some(v.clone())),
                _ => Err(err(&format!("{k} must be a string or null"))),
            }
        };
        let u = |k: &str| -> Result<u64, OpParseError> {
            obj.get(k)
                .and_then(Value::as_u64)
                .filter(|v| *v <= crate::record::MAX_SAFE_INTEGER)
                .ok_or_else(|| err(&format!("{k} must be a non-negative integer")))
        };
        let ts = |k: &str| -> Result<Timestamp, OpParseError> {
            Timestamp::parse_canonical(&s(k)?).map_err(|e| err(&format!("{k}: {e}")))
        };
        let h = |k: &str| -> Result<Hash, OpParseError> {
            Hash::from_hex(&s(k)?).map_err(|e| err(&format!("{k}: {e}")))
        };
        let id = |k: &str| -> Result<String, OpParseError> {
            let v = s(k)?;
            crate::record::validate_id("id", &v)
                .map_err(|_| err(&format!("{k} is not a valid id")))?;
            Ok(v)
        };
        Ok(match entry_type {
            "session-start" => {
                let header = SessionHeader {
                    org_id: id("org_id")?,
                    session_id: id("session_id")?,
                    agent_id: id("agent_id")?,
                    started_at: ts("started_at")?,
                    caller: id("caller")?,
                    profile: Profile::parse(&s("profile")?).ok_or_else(|| err("bad profile"))?,
                    predecessor: match opt_s("predecessor")? {
                        Some(p) => Some(Hash::from_hex(&p).map_err(|e| err(&e.to_string()))?),
                        None => None,
                    },
                    full_consent: obj
                        .get("full_consent")
                        .and_then(Value::as_bool)
                        .ok_or_else(|| err("full_consent must be a boolean"))?,
                    max_clock_skew_s: u("max_clock_skew_s")?,
                };
                h("genesis")?;
                OpRecord::SessionStart(header)
            }
            "seal" => OpRecord::Seal(SealRecord {
                org_id: id("org_id")?,
                session_id: id("session_id")?,
                step_count: u("step_count")?,
                session_root: h("session_root")?,
                final_hash: h("final_hash")?,
                sealed_at: ts("sealed_at")?,
                note: s("note")?,
            }),
            "erasure" => {
                let map = obj
                    .get("commitments")
                    .and_then(Value::as_object)
                    .ok_or_else(|| err("commitments must be an object"))?;
                let mut commitments = Vec::with_capacity(map.len());
                for (name, value) in map {
                    let field = Field::from_name(name)
                        .filter(|f| f.is_payload())
                        .ok_or_else(|| err(&format!("{name:?} is not an erasable field")))?;
                    let hash = value
                        .as_str()
                        .and_then(|v| Hash::from_hex(v).ok())
                        .ok_or_else(|| err("bad commitment"))?;
                    commitments.push((field, hash));
                }
                if commitments.is_empty() {
                    return Err(err("an erasure erases at least one field"));
                }
                commitments.sort_by_key(|(f, _)| *f);
                OpRecord::Erasure(ErasureRecord {
                    org_id: id("org_id")?,
                    session_id: id("session_id")?,
                    step_index: u("step_index")?,
                    trace_id: id("trace_id")?,
                    commitments,
                    reason: s("reason")?,
                    actor: s("actor")?,
                    erased_at: ts("erased_at")?,
                })
            }
            "review" => OpRecord::Review(ReviewRecord {
                org_id: id("org_id")?,
                trace_id: id("trace_id")?,
                session_id: id("session_id")?,
                step_index: u("step_index")?,
                decision: ReviewDecision::parse(&s("decision")?)
                    .ok_or_else(|| err("bad decision"))?,
                reviewer: s("reviewer")?,
                note: opt_s("note")?,
                reviewed_at: ts("reviewed_at")?,
            }),
            "key-registration" => {
                let bytes = B64
                    .decode(s("public_key")?)
                    .map_err(|_| err("public_key is not base64"))?;
                let point: [u8; 32] = bytes
                    .try_into()
                    .map_err(|_| err("public_key is not 32 bytes"))?;
                OpRecord::KeyRegistration(KeyRegistration {
                    org_id: id("org_id")?,
                    agent_id: id("agent_id")?,
                    key_id: id("key_id")?,
                    public_key: VerifyingKey::from_bytes(&point)
                        .map_err(|_| err("public_key is not an Ed25519 point"))?,
                    registered_at: ts("registered_at")?,
                })
            }
            "key-revocation" => OpRecord::KeyRevocation(KeyRevocation {
                org_id: id("org_id")?,
                agent_id: id("agent_id")?,
                key_id: id("key_id")?,
                reason: s("reason")?,
                revoked_at: ts("revoked_at")?,
            }),
            "signed-trace" => OpRecord::SignedTrace(SignedTraceRecord {
                org_id: id("org_id")?,
                session_id: id("session_id")?,
                trace: crate::trace::CompleteTrace::parse(
                    obj.get("trace").ok_or_else(|| err("missing trace"))?,
                )
                .map_err(|e| err(&e.to_string()))?,
            }),
            "audit-event" => OpRecord::AuditEvent(AuditEvent {
                org_id: id("org_id")?,
                event_id: id("event_id")?,
                session_id: opt_s("session_id")?,
                action: s("action")?,
                detail: obj.get("detail").filter(|v| !v.is_null()).cloned(),
                at: ts("at")?,
            }),
            "log-key" => {
                let key = NoteVerifier::parse(&s("key")?)
                    .map_err(|e| err(&format!("key is not a readable vkey: {e}")))?;
                if key.alg() != crate::note::ALG_ED25519 {
                    return Err(err("key must be an Ed25519 log key (algorithm 0x01)"));
                }
                OpRecord::LogKey(LogKeyRecord {
                    org_id: id("org_id")?,
                    action: LogKeyAction::parse(&s("action")?)
                        .ok_or_else(|| err("action must be add or retire"))?,
                    key,
                    at: ts("at")?,
                    note: s("note")?,
                })
            }
            _ => return Err(err("unknown record type")),
        })
    }

    /// `SHA-256(frame("cairn/v2/op"; type, jcs(view)))`.
    pub fn hash(&self) -> Hash {
        Framer::new("cairn/v2/op")
            .part(self.entry_type().as_bytes())
            .part(&jcs::to_vec(&self.to_view()))
            .finish()
    }
}

/// A record of the org log, as stored or exported.
// Most log entries are steps, and they are streamed one at a time: boxing
// the large variant would add an allocation per step on the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum LogRecord {
    /// A step; its record hash is its chain hash.
    Step(StepRecord),
    /// An operational record and its hash as recorded.
    Op {
        /// The record.
        record: OpRecord,
        /// `op_hash` as recorded (recomputed and compared by verifiers).
        hash: Hash,
    },
}

/// One leaf of an org log.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    /// 0-based position in the org log; equal to the leaf index.
    pub seq: u64,
    /// When the server logged the entry (its own clock, never earlier than
    /// the previous entry's): bound into the leaf, so every record carries
    /// the server's time whatever time its writer claimed.
    pub logged_at: Timestamp,
    /// The record.
    pub record: LogRecord,
}

impl LogEntry {
    /// The entry type written in the leaf.
    pub fn entry_type(&self) -> &'static str {
        match &self.record {
            LogRecord::Step(_) => "step",
            LogRecord::Op { record, .. } => record.entry_type(),
        }
    }

    /// The recorded hash the leaf binds.
    pub fn record_hash(&self) -> Hash {
        match &self.record {
            LogRecord::Step(s) => s.hash,
            LogRecord::Op { hash, .. } => *hash,
        }
    }

    /// The RFC 9162 leaf hash of this entry.
    pub fn leaf_hash(&self) -> Hash {
        merkle::leaf_hash(&log_leaf_data(
            self.seq,
            self.entry_type(),
            &self.record_hash(),
            self.logged_at,
        ))
    }
}

/// `frame("cairn/v2/log-leaf"; u64be(seq), type, record hash, logged_at)`.
pub fn log_leaf_data(
    seq: u64,
    entry_type: &str,
    record_hash: &Hash,
    logged_at: Timestamp,
) -> Vec<u8> {
    frame_bytes(
        "cairn/v2/log-leaf",
        &[
            &seq.to_be_bytes(),
            entry_type.as_bytes(),
            &record_hash.0,
            &logged_at.canonical_bytes(),
        ],
    )
}

/// The checkpoint origin of an org's log on a server whose key is named
/// `server_name`: `<server_name>/<org_id>`.
pub fn log_origin(server_name: &str, org_id: &str) -> String {
    format!("{server_name}/{org_id}")
}

/// A checkpoint for an org log of the given size and root.
pub fn org_checkpoint(server_name: &str, org_id: &str, size: u64, root: Hash) -> Checkpoint {
    Checkpoint {
        origin: log_origin(server_name, org_id),
        size,
        root,
        extensions: Vec::new(),
    }
}
