//! JSON on the edge: step input objects, replay output, verdicts. The core
//! types are not wire types; conversions happen here, by hand, with errors
//! that name the offending member.
//!
//! Member names follow seed 000 (`session_id`, `step_type`, `input_data`,
//! `output_data`, `trace_id`, `step_index`, `current_hash`, `prev_hash`,
//! `chain_valid`, ...) and seed 003 for verdicts (`verified`,
//! `totalChecked`, `lastValidSequence`, `brokenAtSequence`,
//! `brokenReason`, `durationMs`, `verifiedAt`).

use cairn_core::Timestamp;
use cairn_core::commit::StepRecord;
use cairn_core::record::{Links, Status};
use cairn_core::verify::Verdict;
use cairn_store::NewStep;
use serde_json::{Map, Value, json};

/// A step object that cannot be turned into a step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);

fn string(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, InputError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(InputError(format!(
            "{key} must be a string, not {}",
            kind_of(other)
        ))),
    }
}

fn unsigned(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, InputError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| InputError(format!("{key} must be a non-negative integer"))),
    }
}

pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The members a step object may have (REST, batch, turns).
pub(crate) const STEP_MEMBERS: &[&str] = &[
    "org_id",
    "session_id",
    "agent_id",
    "step_type",
    "content",
    "input_data",
    "output_data",
    "confidence",
    "duration_ms",
    "token_count",
    "model",
    "metadata",
    "turn_id",
    "turn_step",
    "task_id",
    "links",
    "status",
    "trace_id",
    "step_index",
    "created_at",
    "seed",
    "signature",
    "hash_agent_id",
];

/// Builds a step from a seed-000-style object. `defaults` supplies org,
/// agent and session where the object has none.
pub fn step_from_json(
    value: &Value,
    org_id: &str,
    default_agent: Option<&str>,
    caller: &str,
) -> Result<NewStep, InputError> {
    let obj = value.as_object().ok_or_else(|| {
        InputError(format!(
            "a step must be a JSON object, not {}",
            kind_of(value)
        ))
    })?;
    if let Some(unknown) = obj.keys().find(|k| !STEP_MEMBERS.contains(&k.as_str())) {
        return Err(InputError(format!(
            "unknown member {unknown:?}; a step has {}",
            STEP_MEMBERS.join(", ")
        )));
    }
    if let Some(org) = string(obj, "org_id")?
        && org != org_id
    {
        return Err(InputError(format!(
            "org_id {org:?} is not the org of this request ({org_id})"
        )));
    }
    let session_id =
        string(obj, "session_id")?.ok_or_else(|| InputError("session_id is required".into()))?;
    let agent_id = match (string(obj, "agent_id")?, default_agent) {
        (Some(a), _) => a,
        (None, Some(a)) => a.to_owned(),
        (None, None) => return Err(InputError("agent_id is required".into())),
    };
    // Seed 004's privacy: the session records a hash of the agent's name.
    let agent_id = match obj.get("hash_agent_id") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => agent_id,
        Some(Value::Bool(true)) => cairn_core::record::hashed_agent_id(&agent_id),
        Some(_) => return Err(InputError("hash_agent_id must be a boolean".into())),
    };
    let kind_label =
        string(obj, "step_type")?.ok_or_else(|| InputError("step_type is required".into()))?;
    let confidence = match obj.get("confidence") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_f64()
                .ok_or_else(|| InputError("confidence must be a number".into()))?,
        ),
    };
    let links = match obj.get("links") {
        None | Some(Value::Null) => Links::default(),
        Some(v) => Links::from_json(v).map_err(InputError)?,
    };
    let status = match string(obj, "status")? {
        None => Status::Ok,
        Some(s) => Status::parse(&s)
            .ok_or_else(|| InputError(format!("status must be ok or flagged, not {s:?}")))?,
    };
    let json_member = |key: &str| obj.get(key).filter(|v| !v.is_null()).cloned();
    // A signed step fixes what enters its digest (FORMAT.md 7.3).
    let created_at = string(obj, "created_at")?
        .map(|t| {
            Timestamp::parse_canonical(&t).map_err(|e| {
                InputError(format!(
                    "created_at: {e} (a signed step gives the canonical form)"
                ))
            })
        })
        .transpose()?;
    let seed = match string(obj, "seed")? {
        None => None,
        Some(hex_seed) => {
            let mut seed = [0u8; 32];
            hex::decode_to_slice(&hex_seed, &mut seed)
                .map_err(|_| InputError("seed must be 64 hex digits".into()))?;
            Some(seed)
        }
    };
    let signature = match obj.get("signature") {
        None | Some(Value::Null) => None,
        Some(sig) => {
            use base64::Engine as _;
            let key_id = sig
                .get("key_id")
                .and_then(Value::as_str)
                .ok_or_else(|| InputError("signature.key_id is required".into()))?;
            let bytes = sig
                .get("signature")
                .and_then(Value::as_str)
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .ok_or_else(|| InputError("signature.signature must be base64".into()))?;
            Some(cairn_core::commit::AgentSignature {
                key_id: key_id.to_owned(),
                signature: bytes
                    .try_into()
                    .map_err(|_| InputError("signature.signature must be 64 bytes".into()))?,
            })
        }
    };
    Ok(NewStep {
        org_id: org_id.to_owned(),
        session_id,
        agent_id,
        kind_label,
        content: string(obj, "content")?,
        input: json_member("input_data"),
        output: json_member("output_data"),
        confidence,
        duration_ms: unsigned(obj, "duration_ms")?,
        token_count: unsigned(obj, "token_count")?,
        model: string(obj, "model")?,
        metadata: json_member("metadata"),
        turn_id: string(obj, "turn_id")?,
        turn_step: unsigned(obj, "turn_step")?,
        task_id: string(obj, "task_id")?,
        links,
        status,
        trace_id: string(obj, "trace_id")?,
        step_index: unsigned(obj, "step_index")?,
        created_at,
        seed,
        signature,
        caller: caller.to_owned(),
    })
}

/// A recorded step as replay output, with seed 000's member names; an
/// optional member the step does not have is left out (as in the seed's
/// examples), not given as `null`.
pub fn step_to_json(seq: u64, record: &StepRecord) -> Value {
    let mut value = step_to_json_with_nulls(seq, record);
    if let Value::Object(members) = &mut value {
        members.retain(|_, v| !v.is_null());
    }
    value
}

fn step_to_json_with_nulls(seq: u64, record: &StepRecord) -> Value {
    let s = &record.step;
    let mut links = Map::new();
    for (name, value) in s.links.entries() {
        if let Some(v) = value {
            links.insert(name.into(), Value::String(v.into()));
        }
    }
    json!({
        "trace_id": s.trace_id,
        "seq": seq,
        "org_id": s.org_id,
        "agent_id": s.agent_id,
        "session_id": s.session_id,
        "step_index": s.step_index,
        "step_type": s.kind_label,
        "kind": s.kind.as_str(),
        "content": s.content,
        "input_data": s.input,
        "output_data": s.output,
        "confidence": s.confidence,
        "duration_ms": s.duration_ms,
        "token_count": s.token_count,
        "model": s.model,
        "metadata": s.metadata,
        "turn_id": s.turn_id,
        "turn_step": s.turn_step,
        "task_id": s.task_id,
        "links": links,
        "status": s.status.as_str(),
        "created_at": s.created_at.to_string(),
        "digest": record.digest.to_hex(),
        "prev_hash": record.prev_hash.to_hex(),
        "current_hash": record.hash.to_hex(),
        "signature_key_id": record.signature.as_ref().map(|sig| sig.key_id.clone()),
        "has_embedding": record.has_embedding,
        "erased": record.erased,
        "hidden_fields": cairn_core::commit::FIELDS
            .into_iter()
            .filter(|f| !record.is_revealed(*f))
            .map(|f| f.name())
            .collect::<Vec<_>>(),
    })
}

/// A verdict with seed 003's member names plus Cairn's location detail.
pub fn verdict_to_json(verdict: &Verdict, duration_ms: u128, verified_at: Timestamp) -> Value {
    let failure = verdict.failure.as_ref();
    let position = |loc: &cairn_core::verify::Location| loc.seq.or(loc.step_index);
    json!({
        "verified": verdict.verified,
        "ok": verdict.verified,
        "totalChecked": verdict.records_checked,
        "lastValidSequence": verdict.last_valid.as_ref().and_then(position),
        "brokenAtSequence": failure.and_then(|f| position(&f.at)),
        "brokenReason": failure.map(|f| f.reason.as_str()),
        "brokenAt": failure.map(|f| json!({
            "seq": f.at.seq,
            "session_id": f.at.session_id,
            "step_index": f.at.step_index,
            "trace_id": f.at.trace_id,
            "line": f.at.line,
        })),
        "detail": failure.map(|f| f.detail.clone()),
        "durationMs": duration_ms,
        "verifiedAt": verified_at.to_string(),
    })
}

/// A review record as JSON.
pub fn review_to_json(seq: u64, r: &cairn_core::log::ReviewRecord) -> Value {
    json!({
        "seq": seq, "trace_id": r.trace_id, "session_id": r.session_id, "step_index": r.step_index,
        "decision": r.decision.as_str(), "reviewer": r.reviewer, "note": r.note,
        "reviewed_at": r.reviewed_at.to_string(),
    })
}

/// A queue item as JSON.
pub fn review_item_to_json(item: &cairn_store::ops::ReviewItem) -> Value {
    json!({
        "state": item.state(),
        "step": step_to_json(item.step.seq, &item.step.record),
        "reviews": item.reviews.iter().map(|(seq, r)| review_to_json(*seq, r)).collect::<Vec<_>>(),
    })
}

/// An audit event as JSON.
pub fn audit_event_to_json(seq: u64, e: &cairn_core::log::AuditEvent) -> Value {
    json!({
        "seq": seq, "event_id": e.event_id, "session_id": e.session_id, "action": e.action,
        "detail": e.detail, "at": e.at.to_string(),
    })
}

/// A turn (seed 002) as JSON; `seqs` maps trace ids to log positions.
pub fn turn_to_json(
    turn: &crate::render::Turn<'_>,
    seqs: &std::collections::HashMap<String, u64>,
) -> Value {
    json!({
        "turn_id": turn.turn_id,
        "started_at": turn.steps.first().map(|r| r.step.created_at.to_string()),
        "steps": turn.steps.iter().map(|r| {
            step_to_json(seqs.get(&r.step.trace_id).copied().unwrap_or(0), r)
        }).collect::<Vec<_>>(),
    })
}

/// What a write produced, as the answer to the request that made it: a
/// step's position and hashes, a session's genesis.
pub fn written_to_json(w: &cairn_store::Written) -> Value {
    use cairn_store::Written;
    match w {
        Written::Step {
            seq,
            trace_id,
            step_index,
            hash,
            created_at,
            session_created,
        } => json!({
            "trace_id": trace_id, "step_index": step_index, "current_hash": hash.to_hex(),
            "seq": seq, "created_at": created_at.to_string(), "session_created": session_created,
        }),
        Written::Session { seq, genesis } => json!({"seq": seq, "genesis": genesis.to_hex()}),
        other => json!({"written": format!("{other:?}")}),
    }
}

/// Parses JSON strictly: like `serde_json`, but a member given twice in
/// one object, or an integer literal beyond the 64-bit range (which
/// `serde_json` would silently turn into a float), is an error that says
/// so, rather than a guess.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, InputError> {
    cairn_core::json::from_slice_with(bytes, cairn_core::json::Integers::Bits64)
        .map_err(|e| InputError(format!("the body is not valid JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_000_input_converts() {
        let v = json!({
            "session_id": "analysis-session-42",
            "step_type": "Reasoning",
            "content": "The revenue data shows a clear upward trend in Q4.",
            "input_data": {"query": "SELECT segment, SUM(revenue) FROM orders"},
            "output_data": {"enterprise": 4500000},
            "confidence": 0.92,
            "model": "gpt-4o"
        });
        let step = step_from_json(&v, "acme", Some("analyst-agent"), "cli").unwrap();
        assert_eq!(step.session_id, "analysis-session-42");
        assert_eq!(step.agent_id, "analyst-agent");
        assert_eq!(step.kind_label, "Reasoning");
        assert_eq!(step.confidence, Some(0.92));
        assert_eq!(step.output, Some(json!({"enterprise": 4500000})));
    }

    #[test]
    fn bad_members_are_named() {
        let cases = [
            (json!([1]), "must be a JSON object"),
            (
                json!({"step_type": "plan", "agent_id": "a"}),
                "session_id is required",
            ),
            (
                json!({"session_id": "s", "agent_id": "a"}),
                "step_type is required",
            ),
            (
                json!({"session_id": "s", "step_type": "plan", "agent_id": "a", "confidence": "high"}),
                "confidence must be a number",
            ),
            (
                json!({"session_id": "s", "step_type": "plan", "agent_id": "a", "colour": 1}),
                "unknown member \"colour\"",
            ),
            (
                json!({"session_id": 4, "step_type": "plan", "agent_id": "a"}),
                "session_id must be a string",
            ),
            (
                json!({"session_id": "s", "step_type": "plan", "agent_id": "a", "org_id": "other"}),
                "is not the org",
            ),
            (
                json!({"session_id": "s", "step_type": "plan", "agent_id": "a", "links": {"x": "y"}}),
                "unknown link",
            ),
            (
                json!({"session_id": "s", "step_type": "plan", "agent_id": "a", "token_count": -1}),
                "non-negative integer",
            ),
        ];
        for (value, message) in cases {
            let err = step_from_json(&value, "acme", None, "cli").unwrap_err();
            assert!(err.0.contains(message), "{value}: {err}");
        }
    }

    #[test]
    fn strict_json_refuses_duplicates_and_huge_integers() {
        for (text, message) in [
            (r#"{"a": 1, "a": 2}"#, "given twice"),
            (r#"{"x": {"b": true, "b": false}}"#, "given twice"),
            (r#"{"n": 18446744073709551616}"#, "outside the 64-bit range"),
            (r#"[-9223372036854775809]"#, "outside the 64-bit range"),
            (r#"{"a": 1} x"#, "not valid JSON"),
        ] {
            let err = parse_strict(text.as_bytes()).unwrap_err();
            assert!(err.0.contains(message), "{text}: {err}");
        }
        for text in [
            r#"{"n": 18446744073709551615, "m": -9223372036854775808, "f": 1e300, "g": 0.5}"#,
            r#"{"s": "18446744073709551616 \" 99999999999999999999", "a": {"a": 1}}"#,
            r#"[{"a": 1}, {"a": 2}]"#,
        ] {
            let v = parse_strict(text.as_bytes()).unwrap();
            assert_eq!(v, serde_json::from_str::<Value>(text).unwrap(), "{text}");
        }
    }
}
