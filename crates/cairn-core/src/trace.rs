//! Seed 004's complete traces: a reasoning pipeline's components signed
//! as a whole by the agent.
//!
//! A trace carries its components (`component_type`, `event_type`,
//! `timestamp`, `data`), its detail level, and an Ed25519 signature by the
//! agent's registered key over the **signed payload**: the RFC 8785
//! canonical JSON of `{"components": [...], "trace_level": "..."}`, the
//! components exactly as given. The level is inside the signature, so each
//! level of a trace has its own.
//!
//! Cairn records an imported trace twice over: the original, whole, as a
//! `signed-trace` record of the org log (so its signature can be checked
//! again by anyone holding an export), and each component as a step of a
//! session (so it can be replayed, searched and shown at a detail level).

use crate::detail::DetailLevel;
use crate::ed25519_dalek::{Signature, VerifyingKey};
use crate::record::validate_id;
use crate::time::Timestamp;
use base64::Engine as _;
use serde_json::{Map, Value, json};

/// A trace that cannot be imported, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("trace: {0}")]
pub struct TraceError(pub String);

/// One component of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    /// `observation`, `context`, `rationale`, `conscience`, `action`, ...
    pub component_type: String,
    /// `THOUGHT_START`, `SNAPSHOT_AND_CONTEXT`, `DMA_RESULTS`, ...
    pub event_type: String,
    /// When it happened.
    pub timestamp: Timestamp,
    /// Its data, as given.
    pub data: Value,
}

/// A parsed complete trace (seed 004's `CompleteTrace`).
#[derive(Debug, Clone, PartialEq)]
pub struct CompleteTrace {
    /// The trace's id.
    pub trace_id: String,
    /// The thought it processed.
    pub thought_id: Option<String>,
    /// The parent task.
    pub task_id: Option<String>,
    /// The hashed agent id.
    pub agent_id_hash: String,
    /// Start of processing.
    pub started_at: Timestamp,
    /// End of processing.
    pub completed_at: Option<Timestamp>,
    /// The level it was recorded and signed at.
    pub level: DetailLevel,
    /// The level's name as given (`generic`, `detailed`, `full_traces`).
    pub level_name: String,
    /// The components, in order.
    pub components: Vec<Component>,
    /// The agent's signature over [`CompleteTrace::signed_payload`].
    pub signature: [u8; 64],
    /// The key that signed (`agent-` + 12 hex digits).
    pub signature_key_id: String,
    /// The trace exactly as received.
    pub original: Value,
}

fn text<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, TraceError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(TraceError(format!("{key} must be a string"))),
    }
}

fn required<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a str, TraceError> {
    text(obj, key)?.ok_or_else(|| TraceError(format!("{key} is required")))
}

fn time(value: &str, what: &str) -> Result<Timestamp, TraceError> {
    Timestamp::parse_rfc3339(value).map_err(|e| TraceError(format!("{what}: {e}")))
}

fn id(field: &'static str, value: &str) -> Result<(), TraceError> {
    validate_id(field, value).map_err(|e| TraceError(e.to_string()))
}

impl CompleteTrace {
    /// Parses and checks a trace in seed 004's format.
    pub fn parse(value: &Value) -> Result<CompleteTrace, TraceError> {
        let obj = value
            .as_object()
            .ok_or_else(|| TraceError("a trace is a JSON object".into()))?;
        let trace_id = required(obj, "trace_id")?;
        id("trace_id", trace_id)?;
        let agent_id_hash = required(obj, "agent_id_hash")?;
        id("agent_id_hash", agent_id_hash)?;
        let thought_id = text(obj, "thought_id")?;
        if let Some(t) = thought_id {
            id("thought_id", t)?;
        }
        let task_id = text(obj, "task_id")?;
        if let Some(t) = task_id {
            id("task_id", t)?;
        }
        let level_name = required(obj, "trace_level")?;
        let level = DetailLevel::parse(level_name).ok_or_else(|| {
            TraceError(format!(
                "trace_level must be generic, detailed or full_traces, not {level_name:?}"
            ))
        })?;
        let key_id = required(obj, "signature_key_id")?;
        id("signature_key_id", key_id)?;
        let signature: [u8; 64] = base64::engine::general_purpose::STANDARD
            .decode(required(obj, "signature")?)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| TraceError("signature must be 64 bytes of base64".into()))?;
        let items = obj
            .get("components")
            .and_then(Value::as_array)
            .ok_or_else(|| TraceError("components must be an array".into()))?;
        if items.is_empty() {
            return Err(TraceError("a trace has at least one component".into()));
        }
        let mut components = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let c = item
                .as_object()
                .ok_or_else(|| TraceError(format!("component {i} is not an object")))?;
            let event_type = required(c, "event_type")?;
            if crate::kind::StepKind::parse(event_type).is_none() {
                return Err(TraceError(format!(
                    "component {i}: unknown event_type {event_type:?}"
                )));
            }
            components.push(Component {
                component_type: required(c, "component_type")?.to_owned(),
                event_type: event_type.to_owned(),
                timestamp: time(
                    required(c, "timestamp")?,
                    &format!("component {i} timestamp"),
                )?,
                data: c.get("data").cloned().unwrap_or(Value::Null),
            });
        }
        Ok(CompleteTrace {
            trace_id: trace_id.to_owned(),
            thought_id: thought_id.map(str::to_owned),
            task_id: task_id.map(str::to_owned),
            agent_id_hash: agent_id_hash.to_owned(),
            started_at: time(required(obj, "started_at")?, "started_at")?,
            completed_at: text(obj, "completed_at")?
                .map(|t| time(t, "completed_at"))
                .transpose()?,
            level,
            level_name: level_name.to_owned(),
            components,
            signature,
            signature_key_id: key_id.to_owned(),
            original: value.clone(),
        })
    }

    /// The bytes the agent signed: RFC 8785 canonical JSON of the
    /// components as given and the trace level.
    pub fn signed_payload(&self) -> Vec<u8> {
        let components = self
            .original
            .get("components")
            .cloned()
            .unwrap_or(Value::Null);
        crate::jcs::to_vec(&json!({"components": components, "trace_level": self.level_name}))
    }

    /// Whether the signature verifies under `key`.
    pub fn verify(&self, key: &VerifyingKey) -> bool {
        key.verify_strict(
            &self.signed_payload(),
            &Signature::from_bytes(&self.signature),
        )
        .is_ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ed25519_dalek::{Signer as _, SigningKey};

    fn example(level: &str) -> Value {
        json!({
            "trace_id": "trace-th_seed_08b4901c_3cacdfa6-739-20260130024435",
            "thought_id": "th_seed_08b4901c_3cacdfa6",
            "agent_id_hash": "e8821136df22",
            "started_at": "2026-02-08T12:34:56.123Z",
            "completed_at": "2026-02-08T12:34:58.456Z",
            "trace_level": level,
            "components": [
                {"component_type": "observation", "event_type": "THOUGHT_START",
                 "timestamp": "2026-02-08T12:34:56.123Z",
                 "data": {"round_number": 1, "thought_depth": 0, "task_priority": 5}},
                {"component_type": "rationale", "event_type": "DMA_RESULTS",
                 "timestamp": "2026-02-08T12:34:57.234Z",
                 "data": {"csdma": {"plausibility_score": 0.85}, "dsdma": {"domain_alignment": 0.80}}},
            ],
            "signature": "",
            "signature_key_id": "agent-e8821136df22",
        })
    }

    fn signed(mut value: Value, key: &SigningKey) -> Value {
        value["signature"] = json!("A".repeat(86) + "==");
        let trace = CompleteTrace::parse(&value).unwrap();
        let signature = key.sign(&trace.signed_payload());
        value["signature"] =
            json!(base64::engine::general_purpose::STANDARD.encode(signature.to_bytes()));
        value
    }

    #[test]
    fn the_signature_covers_components_and_level() {
        let key = SigningKey::from_bytes(&[9; 32]);
        let value = signed(example("generic"), &key);
        let trace = CompleteTrace::parse(&value).unwrap();
        assert!(trace.verify(&key.verifying_key()));
        assert_eq!(trace.components.len(), 2);
        assert_eq!(
            String::from_utf8(trace.signed_payload()).unwrap(),
            r#"{"components":[{"component_type":"observation","data":{"round_number":1,"task_priority":5,"thought_depth":0},"event_type":"THOUGHT_START","timestamp":"2026-02-08T12:34:56.123Z"},{"component_type":"rationale","data":{"csdma":{"plausibility_score":0.85},"dsdma":{"domain_alignment":0.8}},"event_type":"DMA_RESULTS","timestamp":"2026-02-08T12:34:57.234Z"}],"trace_level":"generic"}"#
        );
        // One changed byte of data, or the level, or another key: refused.
        let mut edited = value.clone();
        edited["components"][0]["data"]["task_priority"] = json!(6);
        assert!(
            !CompleteTrace::parse(&edited)
                .unwrap()
                .verify(&key.verifying_key())
        );
        let mut relevelled = value.clone();
        relevelled["trace_level"] = json!("detailed");
        assert!(
            !CompleteTrace::parse(&relevelled)
                .unwrap()
                .verify(&key.verifying_key())
        );
        let other = SigningKey::from_bytes(&[8; 32]);
        assert!(!trace.verify(&other.verifying_key()));
    }

    #[test]
    fn malformed_traces_say_what_is_wrong() {
        let mut v = example("generic");
        v["signature"] = json!("A".repeat(86) + "==");
        for (edit, message) in [
            (json!({"trace_level": "secret"}), "trace_level"),
            (json!({"components": []}), "at least one component"),
            (json!({"signature": "nope"}), "signature"),
            (json!({"trace_id": "has space"}), "trace_id"),
            (json!({"started_at": "yesterday"}), "started_at"),
        ] {
            let mut bad = v.clone();
            for (k, val) in edit.as_object().unwrap() {
                bad[k] = val.clone();
            }
            let err = CompleteTrace::parse(&bad).unwrap_err();
            assert!(err.0.contains(message), "{err}");
        }
        let mut bad = v.clone();
        bad["components"][0]["event_type"] = json!("DANCE");
        assert!(
            CompleteTrace::parse(&bad)
                .unwrap_err()
                .0
                .contains("event_type")
        );
    }
}
