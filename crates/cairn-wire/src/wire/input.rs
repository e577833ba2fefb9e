//! Step objects coming in: the members a step may have, read with
//! errors that name the offending member, as every surface reads them.

use cairn_core::Timestamp;
use cairn_core::record::{Links, Status};
use cairn_store::NewStep;
use serde_json::{Map, Value};

/// A step object that cannot be turned into a step: the API's error code
/// and the member concerned, so that every surface answers one mistake
/// alike (REST as `{"error": {"code", "field", "message"}}`, `cairn log
/// --stdin` per line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InputError {
    /// The stable error code: `missing_field`, `invalid_argument`,
    /// `unknown_field`, or `invalid_request` (the body as a whole).
    pub code: &'static str,
    /// The member concerned, if one is.
    pub field: Option<String>,
    /// What is wrong, for a person.
    pub message: String,
}

impl InputError {
    /// Required member `field` is absent (or null).
    pub fn missing(field: &str) -> InputError {
        InputError {
            code: "missing_field",
            field: Some(field.to_owned()),
            message: format!("{field} is required"),
        }
    }

    /// Member `field` has a value it cannot have.
    pub fn invalid(field: &str, message: impl Into<String>) -> InputError {
        InputError {
            code: "invalid_argument",
            field: Some(field.to_owned()),
            message: message.into(),
        }
    }

    /// The body as a whole is wrong (not an object, not JSON).
    pub fn request(message: impl Into<String>) -> InputError {
        InputError {
            code: "invalid_request",
            field: None,
            message: message.into(),
        }
    }
}

/// A step object's members, each moved out at most once: the step takes
/// its strings and JSON values from the parsed object instead of copying
/// them (a step's content is most of its bytes), and finds each member
/// without a map lookup.
struct Members([Option<Value>; STEP_MEMBERS.len()]);

impl Members {
    /// The members of `obj`, all of which must be in [`STEP_MEMBERS`].
    fn of(obj: Map<String, Value>) -> Result<Members, InputError> {
        let mut members = Members(Default::default());
        for (key, value) in obj {
            let Some(slot) = STEP_MEMBERS.iter().position(|m| *m == key) else {
                return Err(InputError {
                    code: "unknown_field",
                    message: format!(
                        "unknown member {key:?}; a step has {}",
                        STEP_MEMBERS.join(", ")
                    ),
                    field: Some(key),
                });
            };
            members.0[slot] = Some(value);
        }
        Ok(members)
    }

    /// Takes member `key` out (None if absent or already taken).
    fn take(&mut self, key: &str) -> Option<Value> {
        let slot = STEP_MEMBERS.iter().position(|m| *m == key)?;
        self.0[slot].take()
    }
}

fn string(obj: &mut Members, key: &str) -> Result<Option<String>, InputError> {
    match obj.take(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(InputError::invalid(
            key,
            format!("{key} must be a string, not {}", kind_of(&other)),
        )),
    }
}

fn unsigned(obj: &mut Members, key: &str) -> Result<Option<u64>, InputError> {
    match obj.take(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            InputError::invalid(key, format!("{key} must be a non-negative integer"))
        }),
    }
}

/// What kind of JSON value `v` is, for error messages ("a string").
pub fn kind_of(v: &Value) -> &'static str {
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
pub const STEP_MEMBERS: &[&str] = &[
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
    value: Value,
    org_id: &str,
    default_agent: Option<&str>,
    caller: &str,
) -> Result<NewStep, InputError> {
    let obj = match value {
        Value::Object(obj) => obj,
        other => {
            return Err(InputError::request(format!(
                "a step must be a JSON object, not {}",
                kind_of(&other)
            )));
        }
    };
    // The first unknown member in the object's order is named, before
    // any other error.
    let obj = &mut Members::of(obj)?;
    if let Some(org) = string(obj, "org_id")?
        && org != org_id
    {
        return Err(InputError::invalid(
            "org_id",
            format!("org_id {org:?} is not the org of this request ({org_id})"),
        ));
    }
    let session_id = string(obj, "session_id")?.ok_or_else(|| InputError::missing("session_id"))?;
    let agent_id = match (string(obj, "agent_id")?, default_agent) {
        (Some(a), _) => a,
        (None, Some(a)) => a.to_owned(),
        (None, None) => return Err(InputError::missing("agent_id")),
    };
    // Seed 004's privacy: the session records a hash of the agent's name.
    let agent_id = match obj.take("hash_agent_id") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => agent_id,
        Some(Value::Bool(true)) => cairn_core::record::hashed_agent_id(&agent_id),
        Some(_) => {
            return Err(InputError::invalid(
                "hash_agent_id",
                "hash_agent_id must be a boolean",
            ));
        }
    };
    let kind_label = string(obj, "step_type")?.ok_or_else(|| InputError::missing("step_type"))?;
    let confidence = match obj.take("confidence") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_f64()
                .ok_or_else(|| InputError::invalid("confidence", "confidence must be a number"))?,
        ),
    };
    let links = match obj.take("links") {
        None | Some(Value::Null) => Links::default(),
        // A link given as null is no link, as a null member is an absent
        // one (the OpenAPI document types each as a string or null).
        Some(Value::Object(mut given)) => {
            given.retain(|_, v| !v.is_null());
            Links::from_json(&Value::Object(given)).map_err(|m| InputError::invalid("links", m))?
        }
        Some(v) => Links::from_json(&v).map_err(|m| InputError::invalid("links", m))?,
    };
    let status = match string(obj, "status")? {
        None => Status::Ok,
        Some(s) => Status::parse(&s).ok_or_else(|| {
            InputError::invalid("status", format!("status must be ok or flagged, not {s:?}"))
        })?,
    };
    let json_member = |obj: &mut Members, key: &str| obj.take(key).filter(|v| !v.is_null());
    let created_at = string(obj, "created_at")?;
    let seed = match string(obj, "seed")? {
        None => None,
        Some(hex_seed) => {
            let mut seed = [0u8; 32];
            hex::decode_to_slice(&hex_seed, &mut seed)
                .map_err(|_| InputError::invalid("seed", "seed must be 64 hex digits"))?;
            Some(seed)
        }
    };
    let signature = match obj.take("signature") {
        None | Some(Value::Null) => None,
        Some(sig) => {
            use base64::Engine as _;
            let key_id = sig
                .get("key_id")
                .and_then(Value::as_str)
                .ok_or_else(|| InputError::missing("signature.key_id"))?;
            let bytes = sig
                .get("signature")
                .and_then(Value::as_str)
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .ok_or_else(|| {
                    InputError::invalid("signature", "signature.signature must be base64")
                })?;
            Some(cairn_core::commit::AgentSignature {
                key_id: key_id.to_owned(),
                signature: bytes.try_into().map_err(|_| {
                    InputError::invalid("signature", "signature.signature must be 64 bytes")
                })?,
            })
        }
    };
    // Any RFC 3339 spelling is converted to the canonical form (offsets
    // applied, digits past the sixth dropped: FORMAT.md 2.3), but a signed
    // step fixes what enters its digest (FORMAT.md 7.3): its agent hashed
    // the canonical text, so only that is taken.
    let created_at = created_at
        .map(|t| match signature {
            Some(_) => Timestamp::parse_canonical(&t).map_err(|e| {
                InputError::invalid(
                    "created_at",
                    format!(
                        "created_at: {e} (a signed step gives the canonical form its agent hashed)"
                    ),
                )
            }),
            None => Timestamp::parse_rfc3339(&t).map_err(|_| {
                InputError::invalid("created_at", format!(
                    "created_at: {t:?} is not an RFC 3339 date-time such as 2026-01-15T10:30:00.000000Z or 2026-01-15T11:30:00+01:00 (zero to nine fraction digits, no leap second)"
                ))
            }),
        })
        .transpose()?;
    Ok(NewStep {
        org_id: org_id.to_owned(),
        session_id,
        agent_id,
        kind_label,
        content: string(obj, "content")?,
        input: json_member(obj, "input_data"),
        output: json_member(obj, "output_data"),
        confidence,
        duration_ms: unsigned(obj, "duration_ms")?,
        token_count: unsigned(obj, "token_count")?,
        model: string(obj, "model")?,
        metadata: json_member(obj, "metadata"),
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

/// Parses JSON strictly: like `serde_json`, but a member given twice in
/// one object, or an integer literal beyond the 64-bit range (which
/// `serde_json` would silently turn into a float), is an error that says
/// so, rather than a guess.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, InputError> {
    cairn_core::json::from_slice_with(bytes, cairn_core::json::Integers::Bits64)
        .map_err(|e| InputError::request(format!("the body is not valid JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let step = step_from_json(v, "acme", Some("analyst-agent"), "cli").unwrap();
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
            let err = step_from_json(value.clone(), "acme", None, "cli").unwrap_err();
            assert!(err.message.contains(message), "{value}: {err}");
        }
    }

    /// A writer's `created_at` in any RFC 3339 spelling is converted to
    /// the canonical form (FORMAT.md 2.3); a signed step's must already
    /// be canonical, since its agent hashed that text.
    #[test]
    fn created_at_is_converted_unless_signed() {
        let step = |created_at: &str, signed: bool| {
            let mut v = json!({"session_id": "s", "step_type": "plan", "agent_id": "a", "created_at": created_at});
            if signed {
                v["signature"] = json!({"key_id": "k", "signature": "A".repeat(86) + "=="});
            }
            step_from_json(v, "acme", None, "cli").map(|s| s.created_at.map(|t| t.to_string()))
        };
        for (given, canonical) in [
            ("2026-01-15T10:30:05Z", "2026-01-15T10:30:05.000000Z"),
            (
                "2026-01-15T10:30:05.1234567Z",
                "2026-01-15T10:30:05.123456Z",
            ),
            ("2026-01-15t10:30:05.5+01:00", "2026-01-15T09:30:05.500000Z"),
            ("2026-01-15T10:30:05.000000Z", "2026-01-15T10:30:05.000000Z"),
        ] {
            assert_eq!(
                step(given, false).unwrap().as_deref(),
                Some(canonical),
                "{given}"
            );
        }
        assert!(step("2026-01-15 10:30:05Z", false).is_err());
        let err = step("2026-01-15T10:30:05Z", true).unwrap_err();
        assert!(
            err.message.contains("signed step gives the canonical form"),
            "{err}"
        );
        assert!(step("2026-01-15T10:30:05.000000Z", true).is_ok());
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
            assert!(err.message.contains(message), "{text}: {err}");
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
