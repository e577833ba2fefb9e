//! The tools' structured results: one type per answer, from which both the
//! tool's `outputSchema` (schemars, the serialize contract) and the
//! structured content itself are made, so the two cannot differ. Answers
//! shared with the REST API are the types of `wire`, `turns`, `oversight`
//! and `traces`, made by the same functions for both.
//!
//! Every schema a tool lists passes through [`portable`]: no `type`
//! arrays (a nullable member is `anyOf` a type and `null`; an optional
//! input is its type alone, since absent and `null` mean the same there),
//! no schema without a keyword (any JSON is `anyOf` the six types), so
//! that clients which map tool schemas onto a single-`type` dialect read
//! them as written (the MCP Inspector's `--strict` lint reports none).

use crate::wire::{StepOut, VerdictOut};
use rmcp::schemars::{self, JsonSchema};
use serde::Serialize;
use serde_json::{Map, Value};
use std::sync::Arc;

/// The output schema of a tool whose answer is a `T`: what its structured
/// content is, the answer or (in a result with `isError: true`) the error
/// body, since clients such as the MCP Inspector validate both. Made
/// portable when the tools are listed (see [`portable`]).
pub fn output_schema<T: JsonSchema + 'static>() -> Arc<Map<String, Value>> {
    rmcp::handler::server::tool::schema_for_output::<Answer<T>>()
}

/// A tool's structured content: its answer, or the error body of a tool
/// error (`isError: true`).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Answer<T> {
    /// The answer.
    Ok(T),
    /// The error, in the shape every surface answers.
    Err(crate::error::ErrorBody),
}

/// Rewrites a tool schema into its portable spelling, in place:
///
/// - a property that is not required and whose `type` includes `null`
///   loses the `null` (the member is optional: leave it out);
/// - any other `type` array becomes `anyOf` branches of one type each,
///   each carrying the assertions of the original;
/// - `true` or a schema with no validation keyword (serde_json's `Value`)
///   becomes "any JSON value", `anyOf` the six types.
pub fn portable(schema: &mut Map<String, Value>) {
    let required: Vec<String> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        for (name, property) in properties.iter_mut() {
            if required.contains(name) {
                continue;
            }
            if let Some(Value::Array(types)) = property.get_mut("type") {
                types.retain(|t| t != "null");
                if let [single] = types.as_slice() {
                    let single = single.clone();
                    property["type"] = single;
                }
            }
        }
    }
    for (key, value) in schema.iter_mut() {
        match key.as_str() {
            "properties" | "$defs" | "definitions" | "patternProperties" => {
                if let Value::Object(members) = value {
                    for member in members.values_mut() {
                        subschema(member);
                    }
                }
            }
            "items" | "not" | "contains" | "propertyNames" => subschema(value),
            // `additionalProperties: false` (or `true`) is its own keyword.
            "additionalProperties" if !value.is_boolean() => subschema(value),
            "anyOf" | "allOf" | "oneOf" | "prefixItems" => {
                if let Value::Array(branches) = value {
                    branches.iter_mut().for_each(subschema);
                }
            }
            _ => {}
        }
    }
    // schemars' integer and float formats (uint64, double, ...) are not
    // JSON Schema formats: validators warn about them and ignore them
    // (`minimum` says what matters).
    if schema
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| !STANDARD_FORMATS.contains(&f))
    {
        schema.remove("format");
    }
    if let Some(Value::Array(types)) = schema.get("type").cloned() {
        schema.remove("type");
        let annotations = [
            "description",
            "title",
            "default",
            "examples",
            "deprecated",
            "$schema",
            "$defs",
            "definitions",
        ];
        let mut assertions = Map::new();
        for (key, value) in std::mem::take(schema) {
            if annotations.contains(&key.as_str()) {
                schema.insert(key, value);
            } else {
                assertions.insert(key, value);
            }
        }
        let branches = types
            .into_iter()
            .map(|t| {
                let mut branch = Map::new();
                if t != "null" {
                    branch.extend(assertions.clone());
                }
                branch.insert("type".into(), t);
                Value::Object(branch)
            })
            .collect();
        schema.insert("anyOf".into(), Value::Array(branches));
    }
}

/// The formats JSON Schema (2020-12) defines.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// The keywords that constrain a value (a schema with none accepts any).
const CONSTRAINING: &[&str] = &[
    "type",
    "enum",
    "const",
    "anyOf",
    "allOf",
    "oneOf",
    "not",
    "$ref",
    "properties",
    "items",
    "required",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "additionalProperties",
    "prefixItems",
];

fn subschema(value: &mut Value) {
    if let Value::Bool(true) = value {
        *value = any_json(Map::new());
        return;
    }
    if let Value::Object(members) = value {
        if !members.keys().any(|k| CONSTRAINING.contains(&k.as_str())) {
            *value = any_json(std::mem::take(members));
            return;
        }
        portable(members);
    }
}

fn any_json(mut annotations: Map<String, Value>) -> Value {
    if let Value::Object(any) =
        crate::wire::any_json(&mut schemars::SchemaGenerator::default()).to_value()
    {
        annotations.extend(any);
    }
    Value::Object(annotations)
}

/// `log_reasoning_step`: where the step went, as REST answers it (its
/// trace id, index, chain hash, position, time, and whether it created
/// its session).
pub use crate::wire::StepWritten as StepLogged;

/// `replay_decision`: a session's steps in order.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Replay {
    /// The session.
    pub session_id: String,
    /// The agent that ran it.
    pub agent_id: String,
    /// The detail level the steps are shown at (null: everything this key
    /// may read).
    pub level: Option<String>,
    /// How many steps it has.
    pub step_count: usize,
    /// Whether it is sealed.
    pub sealed: bool,
    /// Its steps from from_step on, in order, as many as fit one answer
    /// (about 256 KiB of JSON, at least one).
    pub steps: Vec<StepOut>,
    /// The step_index the next answer starts at (from_step), or null when
    /// these steps reach the session's last.
    pub next_step_index: Option<u64>,
    /// Whether every hash recomputes (null unless verify_chain was asked).
    pub chain_valid: Option<bool>,
    /// Where and why the chain is broken (only when it is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<VerdictOut>,
}

/// `get_session_history` and `list_traces`: an agent's sessions (the text
/// content is the list itself, as seed 000 returns it).
#[derive(Debug, Serialize, JsonSchema)]
pub struct History {
    /// The sessions, newest first.
    pub sessions: Vec<SessionRow>,
    /// When the page is full: the `cursor` argument of the next page
    /// (null on the last page).
    pub next_cursor: Option<String>,
}

/// One session of an agent.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SessionRow {
    /// The session.
    pub session_id: String,
    /// The agent whose session it is.
    pub agent_id: String,
    /// How many steps it has.
    pub step_count: u64,
    /// When its first step was recorded (null if it has none).
    pub first_step_at: Option<String>,
    /// When its last step was recorded (null if it has none).
    pub last_step_at: Option<String>,
    /// Whether its chain verifies (null when not checked: the listing's
    /// verification budget was spent before it, or the server's slots
    /// for expensive work were all busy; replay with verify_chain=true
    /// for a verdict).
    pub chain_valid: Option<bool>,
    /// Whether it was sealed.
    pub sealed: bool,
    /// When it started (its session-start record).
    pub started_at: String,
    /// This row's place in the listing: the `cursor` argument of the
    /// page after it.
    pub cursor: String,
}

/// `audit_session_start`: the session's genesis.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SessionStarted {
    /// The session.
    pub session_id: String,
    /// The hash its chain starts from (hex).
    pub genesis_hash: String,
    /// The start record's position in the org log.
    pub seq: u64,
}

/// `thought_record`: the record just written.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ThoughtRecorded {
    /// The record's id (its trace id): name it to correct it.
    pub record_id: String,
    /// Its index in the session, from 0.
    pub step_index: u64,
    /// Its content digest (hex).
    pub content_hash: String,
    /// Its chain hash (hex).
    pub chain_hash: String,
    /// The chain hash of the record before (hex).
    pub parent_chain_hash: String,
    /// Its position in the org log.
    pub seq: u64,
}

/// `audit_verify_chain`: whether the session is intact.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ChainChecked {
    /// The session.
    pub session_id: String,
    /// Whether every record verifies.
    pub valid: bool,
    /// Records of the trail checked (as merkle_root's step_count counts
    /// them).
    pub records_checked: u64,
    /// Records of the org log checked (the session's start and seal
    /// included).
    pub log_records_checked: u64,
    /// Index of the first broken record (null if intact).
    pub first_broken_index: Option<u64>,
    /// Why it is broken (a stable reason code; null if intact).
    pub reason: Option<String>,
    /// What is wrong, in words (null if intact).
    pub detail: Option<String>,
}

/// `merkle_finalize`, `merkle_root`: a session's seal.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Seal {
    /// The session.
    pub session_id: String,
    /// The Merkle root over its records (hex): keep it as proof.
    pub merkle_root: String,
    /// How many records the root covers.
    pub step_count: u64,
    /// The chain hash of its last record (hex).
    pub final_hash: String,
    /// When it was sealed (RFC 3339, UTC).
    pub sealed_at: String,
    /// The seal as the server's signed note (C2SP).
    pub note: String,
    /// The seal record's position in the org's log.
    pub seq: Option<u64>,
}

impl Seal {
    /// The seal recorded at `seq` of the org's log.
    pub fn at(seq: Option<u64>, seal: &cairn_core::log::SealRecord) -> Seal {
        Seal {
            session_id: seal.session_id.clone(),
            merkle_root: seal.session_root.to_hex(),
            step_count: seal.step_count,
            final_hash: seal.final_hash.to_hex(),
            sealed_at: seal.sealed_at.to_string(),
            note: seal.note.clone(),
            seq,
        }
    }
}

/// `audit_session_end`: the seal of the closed session.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SessionClosed {
    /// The seal.
    #[serde(flatten)]
    pub seal: Seal,
    /// Always true: the session is closed.
    pub closed: bool,
}

/// `get_audit_trail`: the whole trail, one turn, or either as Markdown.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum AuditTrail {
    /// Every turn of the session (no turn_id, format json).
    Trail(crate::turns::Trail),
    /// One turn (turn_id, format json).
    Turn(crate::turns::HeldTurn),
    /// The Markdown export (format markdown).
    Markdown {
        /// The trail or turn as Markdown.
        markdown: String,
    },
}

/// `erase_step`: the erasure.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Erased {
    /// The step whose payload was erased.
    pub trace_id: String,
    /// Always true.
    pub erased: bool,
    /// The erasure record's position in the org log (none when the step
    /// was erased before and only the signed trace it came from is now).
    pub erasure_seq: Option<u64>,
    /// When the step came from an agent-signed trace still held: the
    /// position of the trace-erasure record this erasure wrote, which
    /// withheld the trace's record (none when the step came from no signed
    /// trace, or from one an earlier erasure of another of its steps
    /// already withheld).
    pub trace_erasure_seq: Option<u64>,
}

/// `register_agent_key`: the key's id.
#[derive(Debug, Serialize, JsonSchema)]
pub struct KeyRegistered {
    /// The key id (agent- and 12 hex digits).
    pub key_id: String,
    /// The registration's position in the org log.
    pub seq: u64,
}

/// `get_checkpoint`: the latest signed checkpoint of the org log.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Checkpoint {
    /// The log's size (records).
    pub size: u64,
    /// The log's Merkle root at that size (hex).
    pub root: String,
    /// The checkpoint as a C2SP signed note.
    pub note: String,
}

/// `get_inclusion_proof`: an RFC 9162 inclusion proof.
#[derive(Debug, Serialize, JsonSchema)]
pub struct InclusionProof {
    /// The record's position in the org log.
    pub seq: u64,
    /// The log size the proof is against.
    pub size: u64,
    /// The record's leaf hash (hex).
    pub leaf_hash: Option<String>,
    /// The audit path, leaf to root (hex hashes).
    pub proof: Vec<String>,
    /// The log's root at that size (hex).
    pub root: String,
    /// The signed checkpoint note of that size when it is the latest
    /// checkpoint's (the root signed), else null.
    pub checkpoint: Option<String>,
}

/// `export_session`: a bundle to verify offline.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Exported {
    /// The session.
    pub session_id: String,
    /// Records in the bundle.
    pub entries: u64,
    /// The size of the signed checkpoint the bundle is proved against.
    pub checkpoint_size: u64,
    /// The bundle itself (JSON Lines): save it and run `cairn verify
    /// --bundle`.
    pub bundle: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What the MCP Inspector's `--strict` lint reports, restated: type
    /// arrays, bare booleans (but `additionalProperties: false`), schemas
    /// with no validation keyword, remote `$ref`s.
    fn findings(schema: &Value, path: &str, keyword: &str, out: &mut Vec<String>) {
        let members = match schema {
            Value::Bool(_) if keyword == "additionalProperties" => return,
            Value::Object(members) => members,
            other => return out.push(format!("{path}: {other}")),
        };
        if members.get("type").is_some_and(Value::is_array) {
            out.push(format!("{path}: type array"));
        }
        if let Some(Value::String(r)) = members.get("$ref")
            && !r.starts_with('#')
        {
            out.push(format!("{path}: remote $ref"));
        }
        if !members.keys().any(|k| CONSTRAINING.contains(&k.as_str())) {
            out.push(format!("{path}: no keyword"));
        }
        for (key, value) in members {
            match (key.as_str(), value) {
                ("properties" | "$defs", Value::Object(map)) => {
                    for (name, sub) in map {
                        findings(sub, &format!("{path}.{key}.{name}"), key, out);
                    }
                }
                ("anyOf" | "allOf" | "oneOf" | "prefixItems", Value::Array(list)) => {
                    for (i, sub) in list.iter().enumerate() {
                        findings(sub, &format!("{path}.{key}[{i}]"), key, out);
                    }
                }
                ("items" | "additionalProperties" | "not", sub) => {
                    findings(sub, &format!("{path}.{key}"), key, out)
                }
                _ => {}
            }
        }
    }

    #[test]
    fn every_tool_lists_a_portable_output_schema() {
        let tools = super::super::router().list_all();
        assert_eq!(tools.len(), 26);
        for tool in tools {
            let output = tool.output_schema.as_ref().expect("an output schema");
            assert_eq!(output.get("type"), Some(&json!("object")), "{}", tool.name);
            let mut found = Vec::new();
            findings(
                &Value::Object(tool.schema_as_json_value().as_object().unwrap().clone()),
                "inputSchema",
                "",
                &mut found,
            );
            findings(
                &Value::Object(output.as_ref().clone()),
                "outputSchema",
                "",
                &mut found,
            );
            assert!(found.is_empty(), "{}: {found:?}", tool.name);
        }
    }

    #[test]
    fn portable_spellings() {
        let mut schema = json!({
            "type": "object",
            "required": ["always"],
            "properties": {
                "optional": {"type": ["integer", "null"], "format": "uint64", "minimum": 0, "description": "d"},
                "always": {"type": ["string", "null"], "description": "d"},
                "anything": true,
                "described": {"description": "any JSON"},
                "closed": {"type": "object", "additionalProperties": false},
            },
        });
        portable(schema.as_object_mut().unwrap());
        assert_eq!(
            schema["properties"],
            json!({
                "optional": {"type": "integer", "minimum": 0, "description": "d"},
                "always": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "d"},
                "anything": {"anyOf": [{"type": "object"}, {"type": "array"}, {"type": "string"},
                    {"type": "number"}, {"type": "boolean"}, {"type": "null"}]},
                "described": {"description": "any JSON", "anyOf": [{"type": "object"}, {"type": "array"},
                    {"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"}]},
                "closed": {"type": "object", "additionalProperties": false},
            })
        );
    }
}
