//! A step's 22 committed values as one borrowed view: what every field
//! commitment is computed from, whether the values are a parsed [`Step`]
//! or the columns of a stored row borrowed where they are read (a
//! verifier reading many rows then copies none of their text, and parses
//! none of their JSON that is already canonical: [`CanonicalJson`]).

use super::{Assigned, Field};
use crate::jcs::{self, CanonicalJson};
use crate::kind::StepKind;
use crate::record::{Links, Status, Step};
use crate::time::Timestamp;
use serde_json::Value;

/// A JSON field's value: parsed, or text known to be the canonical JSON
/// of the value it holds (committed as it is, which is the same).
#[derive(Debug, Clone, Copy)]
pub enum JsonValue<'a> {
    /// A parsed value, written canonically.
    Parsed(&'a Value),
    /// Canonical text.
    Canonical(CanonicalJson<'a>),
}

/// The committed values of one step, borrowed ([`Step`]'s fields).
#[derive(Debug, Clone, Copy)]
pub struct StepFields<'a> {
    /// `trace_id`.
    pub trace_id: &'a str,
    /// `org_id`.
    pub org_id: &'a str,
    /// `agent_id`.
    pub agent_id: &'a str,
    /// `session_id`.
    pub session_id: &'a str,
    /// `step_index`.
    pub step_index: u64,
    /// `step_type`.
    pub kind: StepKind,
    /// `step_type_original`.
    pub kind_label: &'a str,
    /// `content`.
    pub content: Option<&'a str>,
    /// `input_data`.
    pub input: Option<JsonValue<'a>>,
    /// `output_data`.
    pub output: Option<JsonValue<'a>>,
    /// `confidence`.
    pub confidence: Option<f64>,
    /// `duration_ms`.
    pub duration_ms: Option<u64>,
    /// `token_count`.
    pub token_count: Option<u64>,
    /// `model`.
    pub model: Option<&'a str>,
    /// `metadata`.
    pub metadata: Option<JsonValue<'a>>,
    /// `created_at`.
    pub created_at: Timestamp,
    /// `turn_id`.
    pub turn_id: Option<&'a str>,
    /// `turn_step`.
    pub turn_step: Option<u64>,
    /// `task_id`.
    pub task_id: Option<&'a str>,
    /// `links` (never absent: no links is the empty object).
    pub links: &'a Links,
    /// `status`.
    pub status: Status,
    /// `signer_key_id`.
    pub signer_key_id: Option<&'a str>,
}

impl<'a> StepFields<'a> {
    /// The values of a parsed step.
    pub fn of(step: &'a Step) -> StepFields<'a> {
        StepFields {
            trace_id: &step.trace_id,
            org_id: &step.org_id,
            agent_id: &step.agent_id,
            session_id: &step.session_id,
            step_index: step.step_index,
            kind: step.kind,
            kind_label: &step.kind_label,
            content: step.content.as_deref(),
            input: step.input.as_ref().map(JsonValue::Parsed),
            output: step.output.as_ref().map(JsonValue::Parsed),
            confidence: step.confidence,
            duration_ms: step.duration_ms,
            token_count: step.token_count,
            model: step.model.as_deref(),
            metadata: step.metadata.as_ref().map(JsonValue::Parsed),
            created_at: step.created_at,
            turn_id: step.turn_id.as_deref(),
            turn_step: step.turn_step,
            task_id: step.task_id.as_deref(),
            links: &step.links,
            status: step.status,
            signer_key_id: step.signer_key_id.as_deref(),
        }
    }

    /// Appends the canonical (RFC 8785) value of `field` to `out`. Absent
    /// optional values are `null`.
    pub fn write(&self, field: Field, out: &mut Vec<u8>) {
        fn opt_str(out: &mut Vec<u8>, v: Option<&str>) {
            match v {
                Some(s) => jcs::write_str(out, s),
                None => out.extend_from_slice(b"null"),
            }
        }
        fn opt_u64(out: &mut Vec<u8>, v: Option<u64>) {
            match v {
                Some(n) => jcs::write_u64(out, n),
                None => out.extend_from_slice(b"null"),
            }
        }
        fn opt_json(out: &mut Vec<u8>, v: Option<JsonValue<'_>>) {
            match v {
                Some(JsonValue::Parsed(value)) => jcs::write_value(out, value),
                Some(JsonValue::Canonical(text)) => out.extend_from_slice(text.as_str().as_bytes()),
                None => out.extend_from_slice(b"null"),
            }
        }
        match field {
            Field::TraceId => jcs::write_str(out, self.trace_id),
            Field::OrgId => jcs::write_str(out, self.org_id),
            Field::AgentId => jcs::write_str(out, self.agent_id),
            Field::SessionId => jcs::write_str(out, self.session_id),
            Field::StepIndex => Assigned::StepIndex(self.step_index).write(out),
            Field::StepType => jcs::write_str(out, self.kind.as_str()),
            Field::StepTypeOriginal => jcs::write_str(out, self.kind_label),
            Field::Content => opt_str(out, self.content),
            Field::InputData => opt_json(out, self.input),
            Field::OutputData => opt_json(out, self.output),
            Field::Confidence => match self.confidence {
                Some(c) => jcs::write_f64(out, c),
                None => out.extend_from_slice(b"null"),
            },
            Field::DurationMs => opt_u64(out, self.duration_ms),
            Field::TokenCount => opt_u64(out, self.token_count),
            Field::Model => opt_str(out, self.model),
            Field::Metadata => opt_json(out, self.metadata),
            Field::CreatedAt => Assigned::CreatedAt(self.created_at).write(out),
            Field::TurnId => opt_str(out, self.turn_id),
            Field::TurnStep => opt_u64(out, self.turn_step),
            Field::TaskId => opt_str(out, self.task_id),
            Field::Links => write_links(self.links, out),
            Field::Status => jcs::write_str(out, self.status.as_str()),
            Field::SignerKeyId => opt_str(out, self.signer_key_id),
        }
    }
}

/// Appends the links' canonical object: the set links, by name (their
/// canonical order), as strings.
fn write_links(links: &Links, out: &mut Vec<u8>) {
    out.push(b'{');
    let mut first = true;
    for (name, value) in links.entries() {
        if let Some(value) = value {
            if !first {
                out.push(b',');
            }
            first = false;
            jcs::write_str(out, name);
            out.push(b':');
            jcs::write_str(out, value);
        }
    }
    out.push(b'}');
}
