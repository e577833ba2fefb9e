//! What a step's fields may hold: the limits, the errors a record is
//! refused with, and the checks of ids and JSON values every surface
//! applies before a record is built.

use crate::kind::StepKind;
use serde_json::Value;

/// Longest identifier accepted (org, agent, session, trace, turn, task and
/// link ids).
pub const MAX_ID_LEN: usize = 200;

/// The longest step type label accepted, in bytes. The parser ignores case,
/// white space, `_`, `-` and brackets, so without a bound a label of two
/// million underscores around `reasoning` would be kept (and shown on
/// every page of its step) as written.
pub const MAX_KIND_LABEL_LEN: usize = 64;
/// Deepest nesting accepted in a JSON payload field.
pub const MAX_JSON_DEPTH: usize = 64;
/// Largest integer magnitude a JSON payload may carry: beyond it an IEEE
/// double (and so RFC 8785) cannot tell neighbouring integers apart.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Configurable limits checked by [`Step::validate`](super::Step::validate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Maximum `content` length in bytes (seed 000 default: 65536).
    pub max_content_bytes: usize,
    /// Maximum canonical size of each JSON payload field (input, output,
    /// metadata) in bytes.
    pub max_payload_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_content_bytes: 65_536,
            max_payload_bytes: 262_144,
        }
    }
}

/// Why a record was refused. Each variant names the field at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The step type is not in the vocabulary under any seed's spelling.
    #[error(
        "unknown step type {label:?}: a strict decision-trail session takes only plan, analysis, decision and reflection; any other session also takes observation, hypothesis, tool_call, tool_result, reasoning, action, error, correction, summary, final_answer and their other spellings (docs/FORMAT.md lists them)"
    )]
    UnknownKind {
        /// The label as given.
        label: String,
    },
    /// A step type label longer than [`MAX_KIND_LABEL_LEN`] (a label is
    /// kept as written and shown wherever the step is).
    #[error(
        "the step type is {len} bytes; a step type is at most {MAX_KIND_LABEL_LEN} bytes (a name of the vocabulary, as docs/FORMAT.md lists them)"
    )]
    KindLabelTooLong {
        /// Length of the label in bytes.
        len: usize,
    },
    /// Confidence outside `0.0..=1.0` (or not a number).
    #[error("confidence {value} is outside 0.0..=1.0")]
    ConfidenceOutOfRange {
        /// The value given.
        value: f64,
    },
    /// Free text (`content`, `model`) holding the NUL character, which
    /// PostgreSQL cannot store in text (a JSON value may hold it: it is
    /// stored escaped). Refused on every backend, so that a step one
    /// store takes the other takes too.
    #[error(
        "{field} holds the NUL character (U+0000), which a ledger on PostgreSQL cannot store in text; remove it (a JSON value in input_data, output_data or metadata may hold it, escaped)"
    )]
    NulCharacter {
        /// The field name.
        field: &'static str,
    },
    /// Content longer than the configured maximum.
    #[error("content is {len} bytes; the maximum is {max}")]
    ContentTooLong {
        /// Length of the content in bytes.
        len: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A JSON payload field larger than the configured maximum.
    #[error("{field} is {len} bytes in canonical form; the maximum is {max}")]
    PayloadTooLarge {
        /// The field name.
        field: &'static str,
        /// Canonical length in bytes.
        len: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A JSON payload nested deeper than [`MAX_JSON_DEPTH`].
    #[error("{field} is nested deeper than {MAX_JSON_DEPTH} levels")]
    PayloadTooDeep {
        /// The field name.
        field: &'static str,
    },
    /// A JSON payload integer beyond ±(2^53 - 1).
    #[error(
        "{field} holds an integer beyond ±(2^53 - 1), which canonical JSON cannot represent exactly; send it as a string"
    )]
    UnsafeInteger {
        /// The field name.
        field: &'static str,
    },
    /// An integer field beyond 2^53 − 1.
    #[error("{field} is beyond 2^53 - 1 (9007199254740991), which a verifier cannot read exactly")]
    IntegerTooLarge {
        /// The field name.
        field: &'static str,
    },
    /// A JSON payload with a member name serde_json reads as one of its own
    /// markers ([`crate::json::SERDE_MARKER`]): stored, it would read back
    /// as another value.
    #[error(
        "{field} has a member named {name:?}: names starting with `$serde_json::private::` are reserved by the JSON library and would read back as another value; rename the member"
    )]
    ReservedMemberName {
        /// The field name.
        field: &'static str,
        /// The member name (its first 60 characters).
        name: String,
    },
    /// A new session, trace or turn id of `.` or `..`: valid in a log
    /// (FORMAT.md 2.4), but a path segment that HTTP clients and browsers
    /// resolve away, so what it names could never be read back by it.
    #[error(
        "{field} {value:?} cannot be used for a new record: `.` and `..` are path segments that HTTP clients and browsers resolve away, so it could never be read back by its id (/v1/sessions/{{id}}, /v1/steps/{{trace_id}}, .../turns/{{turn_id}}); choose another id"
    )]
    DotSegmentId {
        /// The field name.
        field: &'static str,
        /// The value given.
        value: String,
    },
    /// An identifier that looks like a Cairn API key (a secret pasted where
    /// an id belongs); the value is not repeated.
    #[error(
        "{field} looks like a Cairn API key (cairn_<key id>_<secret>), so it is not recorded: a ledger cannot forget what it records. Choose another id, and revoke that key if it is a real one"
    )]
    ApiKeyId {
        /// The field name.
        field: &'static str,
    },
    /// An identifier that is empty, too long or has characters outside
    /// `A-Z a-z 0-9 - _ . : @ + = ~`.
    #[error(
        "malformed {field} {value:?}: ids are 1 to {MAX_ID_LEN} characters of A-Z a-z 0-9 - _ . : @ + = ~"
    )]
    MalformedId {
        /// The field name.
        field: &'static str,
        /// The value given (truncated to 80 characters).
        value: String,
    },
    /// A kind a strict (seed 001) session does not accept.
    #[error(
        "step type {kind} is not allowed in a strict decision-trail session; only plan, analysis, decision and reflection are"
    )]
    NotInStrictProfile {
        /// The refused kind.
        kind: StepKind,
    },
}

/// Checks an identifier's syntax.
pub fn validate_id(field: &'static str, value: &str) -> Result<(), RecordError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_ID_LEN
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:@+=~".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(RecordError::MalformedId {
            field,
            value: value.chars().take(80).collect(),
        })
    }
}

/// Whether an id is `.` or `..`: a valid id (2.4), but a URL path segment
/// that clients resolve away, so never given to a new session, trace or
/// turn (an ingest rule; verifiers accept it).
pub fn is_dot_segment(id: &str) -> bool {
    matches!(id, "." | "..")
}

/// [`RecordError::DotSegmentId`] for an id that [`is_dot_segment`].
pub fn refuse_dot_segment(field: &'static str, id: &str) -> Result<(), RecordError> {
    if is_dot_segment(id) {
        return Err(RecordError::DotSegmentId {
            field,
            value: id.to_owned(),
        });
    }
    Ok(())
}

/// An id a URL path names its record by (a turn, an audit event): a
/// valid id ([`validate_id`]), neither `.` nor `..`
/// ([`refuse_dot_segment`]), and not an API key pasted in its place
/// ([`super::refuse_api_key_id`]).
pub fn validate_path_id(field: &'static str, id: &str) -> Result<(), RecordError> {
    validate_id(field, id)?;
    refuse_dot_segment(field, id)?;
    super::refuse_api_key_id(field, id)
}

/// Checks a JSON payload: nesting at most [`MAX_JSON_DEPTH`], no integer
/// beyond ±(2^53 − 1), no member name serde_json reserves, at most
/// `max_bytes` in canonical form.
pub fn validate_json(
    field: &'static str,
    value: &Value,
    max_bytes: usize,
) -> Result<(), RecordError> {
    /// Also finds the first member name serde_json reserves, in the order
    /// `json::reserved_member_name` would (one walk on the append path);
    /// it is refused only once the rest of the value is known good.
    fn walk<'v>(
        field: &'static str,
        value: &'v Value,
        depth: usize,
        reserved: &mut Option<&'v str>,
    ) -> Result<(), RecordError> {
        if depth > MAX_JSON_DEPTH {
            return Err(RecordError::PayloadTooDeep { field });
        }
        match value {
            Value::Number(n) => {
                let safe = n
                    .as_u64()
                    .map(|u| u <= MAX_SAFE_INTEGER)
                    .or_else(|| n.as_i64().map(|i| i.unsigned_abs() <= MAX_SAFE_INTEGER))
                    .unwrap_or(true);
                if safe {
                    Ok(())
                } else {
                    Err(RecordError::UnsafeInteger { field })
                }
            }
            Value::Array(items) => items
                .iter()
                .try_for_each(|v| walk(field, v, depth + 1, reserved)),
            Value::Object(map) => {
                if reserved.is_none() {
                    *reserved = crate::json::reserved_name_of(map);
                }
                map.values()
                    .try_for_each(|v| walk(field, v, depth + 1, reserved))
            }
            _ => Ok(()),
        }
    }
    let mut reserved = None;
    walk(field, value, 0, &mut reserved)?;
    if let Some(name) = reserved {
        return Err(RecordError::ReservedMemberName {
            field,
            name: name.chars().take(60).collect(),
        });
    }
    let len = crate::jcs::canonical_len(value);
    if len > max_bytes {
        return Err(RecordError::PayloadTooLarge {
            field,
            len,
            max: max_bytes,
        });
    }
    Ok(())
}
