//! An operational record's canonical view: written ([`OpRecord::to_view`],
//! also its stored and exported form), its members by record type, parsed
//! back strictly ([`OpRecord::from_view`], failing with [`OpParseError`]),
//! and the `op_hash` over it. Apart from `log.rs`, which holds the records
//! as the log orders them, because this is the one encoding every
//! operational record is hashed, stored and exported in.

use super::{
    AuditEvent, ErasureRecord, KeyRegistration, KeyRevocation, LogKeyAction, LogKeyRecord,
    OpRecord, ReviewDecision, ReviewRecord, SealRecord, SignedTraceRecord, TraceErasureRecord,
};
use crate::commit::Field;
use crate::hash::{Framer, Hash};
use crate::jcs;
use crate::note::NoteVerifier;
use crate::record::{Profile, SessionHeader};
use crate::time::Timestamp;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::VerifyingKey;
use serde_json::{Map, Value, json};

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
                "key": k.key_text,
                "at": k.at.to_string(),
                "note": k.note,
            }),
            OpRecord::TraceErasure(e) => json!({
                "org_id": e.org_id,
                "session_id": e.session_id,
                "trace_id": e.trace_id,
                "trace_seq": e.trace_seq,
                "trace_hash": e.trace_hash.to_hex(),
                "reason": e.reason,
                "actor": e.actor,
                "erased_at": e.erased_at.to_string(),
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
            "trace-erasure" => &[
                "org_id",
                "session_id",
                "trace_id",
                "trace_seq",
                "trace_hash",
                "reason",
                "actor",
                "erased_at",
            ],
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
                let key_text = s("key")?;
                let key = NoteVerifier::parse(&key_text)
                    .map_err(|e| err(&format!("key is not a readable vkey: {e}")))?;
                if key.alg() != crate::note::ALG_ED25519 {
                    return Err(err("key must be an Ed25519 log key (algorithm 0x01)"));
                }
                OpRecord::LogKey(LogKeyRecord {
                    org_id: id("org_id")?,
                    action: LogKeyAction::parse(&s("action")?)
                        .ok_or_else(|| err("action must be add or retire"))?,
                    key,
                    key_text,
                    at: ts("at")?,
                    note: s("note")?,
                })
            }
            "trace-erasure" => OpRecord::TraceErasure(TraceErasureRecord {
                org_id: id("org_id")?,
                session_id: id("session_id")?,
                trace_id: id("trace_id")?,
                trace_seq: u("trace_seq")?,
                trace_hash: h("trace_hash")?,
                reason: s("reason")?,
                actor: s("actor")?,
                erased_at: ts("erased_at")?,
            }),
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
