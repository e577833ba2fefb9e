//! The tools' arguments: one type per tool (unknown fields denied, so the
//! schema says `additionalProperties: false`), and the extractor that reads
//! them with the input rules every surface shares.

use crate::ApiError;
use rmcp::{ErrorData, schemars};
use serde::Deserialize;
use serde_json::Value;

/// A tool's arguments, read with the rules every surface shares
/// (`input::typed`): an unknown, missing or mistyped argument is
/// a tool error in the one error shape, naming the field (and, for a
/// misspelling, the nearest known one), which the model can correct,
/// rather than a protocol error with serde's text. Named `Parameters`
/// because rmcp's `#[tool]` macro finds the input schema by that name.
pub struct Parameters<T>(pub Result<T, ApiError>);

impl<T: schemars::JsonSchema> schemars::JsonSchema for Parameters<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }
    fn inline_schema() -> bool {
        T::inline_schema()
    }
}

impl<S, T: serde::de::DeserializeOwned>
    rmcp::handler::server::common::FromContextPart<
        rmcp::handler::server::tool::ToolCallContext<'_, S>,
    > for Parameters<T>
{
    fn from_context_part(
        context: &mut rmcp::handler::server::tool::ToolCallContext<'_, S>,
    ) -> Result<Self, ErrorData> {
        let arguments = context.arguments.take().unwrap_or_default();
        Ok(Parameters(crate::input::typed(Value::Object(arguments))))
    }
}

/// Arguments of `log_reasoning_step`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogStepArgs {
    /// The reasoning session this step belongs to (created on first use).
    pub session_id: String,
    /// One of Observation, Hypothesis, ToolCall, ToolResult, Reasoning,
    /// Decision, Action, Error, Correction, Summary, PlanStep, FinalAnswer
    /// (other spellings such as plan, analysis, thinking, execute are
    /// accepted too).
    pub step_type: String,
    /// The reasoning content, in natural language or structured text.
    pub content: Option<String>,
    /// Input to this step: tool arguments, observations (any JSON).
    pub input_data: Option<Value>,
    /// Output of this step: tool results, decisions (any JSON).
    pub output_data: Option<Value>,
    /// Self-reported confidence, 0.0 to 1.0.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub confidence: Option<f64>,
    /// Model identifier, e.g. gpt-4o.
    pub model: Option<String>,
    /// The agent recording the step; defaults to the key's agent.
    pub agent_id: Option<String>,
    /// The step's own id, chosen by the caller (default: a generated
    /// UUIDv7). Sending the same step again with the same trace_id (a retry
    /// after a lost answer) records nothing new and answers as the first
    /// call did; another step under a taken trace_id is refused
    /// (duplicate_trace_id).
    pub trace_id: Option<String>,
    /// How long the step took, in milliseconds.
    pub duration_ms: Option<u64>,
    /// Tokens used.
    pub token_count: Option<u64>,
    /// Arbitrary additional context (any JSON).
    pub metadata: Option<Value>,
    /// The turn this step belongs to.
    pub turn_id: Option<String>,
    /// The step's number within its turn (only with `turn_id`); a number
    /// another step of the turn holds is refused (`turn_step_taken`).
    pub turn_step: Option<u64>,
    /// The task this step belongs to.
    pub task_id: Option<String>,
    /// Set to "flagged" to send the step to human review ("ok", the
    /// default, otherwise).
    #[serde(default)]
    #[schemars(with = "StepStatus")]
    pub status: Option<String>,
    /// Cross-references: tool_call, policy_decision, approval_request (other
    /// systems' ids), audit_event (an audit event id), corrects and parent
    /// (trace ids of steps).
    pub links: Option<std::collections::BTreeMap<String, Option<String>>>,
    /// Record the first 16 hex digits of SHA-256 of the agent id instead of
    /// the name (for privacy).
    #[serde(default)]
    pub hash_agent_id: bool,
}

/// What a step's `status` may be (read as a string: the schema's enum
/// tells a client the two values; any other is refused with its field).
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
#[allow(missing_docs)] // The field's description says what each means.
pub enum StepStatus {
    Ok,
    Flagged,
}

/// Arguments of `replay_decision`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayArgs {
    /// The session to replay.
    pub session_id: String,
    /// Recompute every hash and report chain_valid.
    #[serde(default)]
    pub verify_chain: bool,
    /// Seed 004's detail level: generic (kinds, numbers, timings, hashes),
    /// detailed (plus identifiers, tool names, models, lists) or full (plus
    /// content; needs the session's recorded consent and an auditor or admin
    /// key). Default: everything this key may read.
    pub level: Option<String>,
    /// The step_index to start at (default 0). An answer holds the steps
    /// that fit about 256 KiB of JSON (at least one); next_step_index
    /// says where the next answer starts.
    pub from_step: Option<u64>,
}

/// Arguments of `get_session_history`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryArgs {
    /// The agent whose sessions to list (default: the key's agent, or the
    /// server's default agent; with neither, every agent's sessions, as
    /// `GET /v1/sessions` lists them).
    pub agent_id: Option<String>,
    /// At most this many, newest first: 1 to 1000 (default 20).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u64>,
    /// Only sessions holding a step of this kind (a FORMAT.md kind or a
    /// label that names one, as `GET /v1/sessions?kind=`).
    pub kind: Option<String>,
    /// Only sessions holding a step flagged for review.
    pub flagged: Option<bool>,
    /// Only sessions started at or after this time (RFC 3339, or a date:
    /// its start, UTC).
    pub since: Option<String>,
    /// Only sessions started before this time (RFC 3339, or a date: the
    /// whole date is included).
    pub until: Option<String>,
    /// The next page: the `next_cursor` of the previous answer (or the
    /// `cursor` of its last row).
    pub cursor: Option<String>,
}

/// Arguments of `audit_session_start`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionStartArgs {
    /// The session to open.
    pub session_id: String,
    /// The agent running it; defaults to the key's agent.
    pub agent_id: Option<String>,
    /// Final chain hash (hex) of the session this one continues (a sealed
    /// session of the org).
    pub predecessor: Option<String>,
    /// The id of the sealed session this one continues; its final hash
    /// enters this session's genesis.
    pub predecessor_session: Option<String>,
    /// Accept only the four decision-trail record types (plan, analysis, decision,
    /// reflection). Default true.
    pub strict: Option<bool>,
    /// Record the hash of the agent id instead of the name (for privacy).
    #[serde(default)]
    pub hash_agent_id: bool,
    /// The subject consented to `full` detail exports of this session.
    #[serde(default)]
    pub full_consent: bool,
}

/// Arguments of `thought_record`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThoughtArgs {
    /// The session (opened with audit_session_start).
    pub session_id: String,
    /// plan, analysis, decision or reflection (in any case). A reflection
    /// closes a task.
    #[serde(rename = "type")]
    #[schemars(with = "ThoughtType")]
    pub record_type: String,
    /// What the record holds: the trajectory, what was learned, the choice
    /// and why, or what happened and what remains uncertain.
    pub content: String,
    /// The task it belongs to.
    pub task_id: Option<String>,
    /// The record id (trace id) this one corrects.
    pub corrects: Option<String>,
    /// An audit event id this record rests on.
    pub audit_event: Option<String>,
}

/// The four decision-trail record types (any other is refused by the
/// schema): plan, the start of a phase (the intended trajectory);
/// analysis, what was learned; decision, the choice, the alternatives and
/// why; reflection, at task close: what happened, what was proved, what
/// remains uncertain.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
#[allow(missing_docs)] // The variants are described above, so that the schema is an `enum`.
pub enum ThoughtType {
    Plan,
    Analysis,
    Decision,
    Reflection,
}

impl ThoughtType {
    /// The record type `label` names, read as every step type is (any
    /// case, any seed's spelling: `Plan`, `[計画]`); another kind is the
    /// strict profile's refusal (`not_in_strict_profile`) and no kind at
    /// all `unknown_step_type`, as `log_reasoning_step` answers them in a
    /// strict session, naming the `type` argument.
    pub fn read(label: &str) -> Result<ThoughtType, ApiError> {
        use cairn_core::kind::StepKind;
        use cairn_core::record::RecordError;
        let refused = |e: RecordError| {
            let mut e = ApiError::from(cairn_store::Refusal::Invalid(e));
            e.field = Some("type".into());
            e
        };
        match StepKind::parse(label) {
            Some(StepKind::Plan) => Ok(ThoughtType::Plan),
            Some(StepKind::Analysis) => Ok(ThoughtType::Analysis),
            Some(StepKind::Decision) => Ok(ThoughtType::Decision),
            Some(StepKind::Reflection) => Ok(ThoughtType::Reflection),
            Some(kind) => Err(refused(RecordError::NotInStrictProfile { kind })),
            None => Err(refused(RecordError::UnknownKind {
                label: label.chars().take(80).collect(),
            })),
        }
    }

    /// The step type the record is stored as.
    pub fn as_str(self) -> &'static str {
        match self {
            ThoughtType::Plan => "plan",
            ThoughtType::Analysis => "analysis",
            ThoughtType::Decision => "decision",
            ThoughtType::Reflection => "reflection",
        }
    }
}

/// Arguments naming a session.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionArgs {
    /// The session.
    pub session_id: String,
}

/// Arguments of `export_session`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExportArgs {
    /// The session.
    pub session_id: String,
    /// Seed 004's detail level (generic, detailed, full); the bundle still
    /// verifies, hidden fields as commitments. Without it every field is
    /// shown: for a key other than an admin's that is `full`, which needs
    /// the session's consent.
    pub level: Option<String>,
}

/// Arguments of `get_trace`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceArgs {
    /// The step's trace id (returned by log_reasoning_step).
    pub trace_id: String,
}

/// Arguments of `get_inclusion_proof`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InclusionArgs {
    /// Position of the record in the org log (the `seq` of a step).
    pub seq: u64,
    /// Tree size to prove against; default the latest checkpoint's.
    pub size: Option<u64>,
}

/// Arguments of `parse_thinking`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParseArgs {
    /// Raw thinking text: bracket markers (`[思考]` `[計画]` `[承認待ち]`
    /// `[実行]` `[エラー]`) or free text.
    pub text: String,
}

/// Arguments of `record_turn`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnArgs {
    /// The session (created on first use).
    pub session_id: String,
    /// The turn; a new id when absent.
    pub turn_id: Option<String>,
    /// The turn's raw thinking text, parsed into thinking, plan,
    /// waiting_approval, execute and error steps.
    pub thinking: String,
    /// The agent; defaults to the key's agent.
    pub agent_id: Option<String>,
    /// Model identifier.
    pub model: Option<String>,
}

/// Arguments of `get_audit_trail`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrailArgs {
    /// The session.
    pub session_id: String,
    /// Only this turn.
    pub turn_id: Option<String>,
    /// json (default) or markdown.
    pub format: Option<String>,
}

/// Arguments of `record_audit_event`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditEventArgs {
    /// What happened: a tool name, an action.
    pub action: String,
    /// The event id (unique in the org); a new id when absent.
    pub event_id: Option<String>,
    /// The session it belongs to.
    pub session_id: Option<String>,
    /// Details (any JSON).
    pub detail: Option<Value>,
}

/// Arguments of `review_queue`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueArgs {
    /// Include approved and rejected steps.
    #[serde(default)]
    pub all: bool,
    /// At most this many: 1 to 10000 (default 100).
    #[schemars(range(min = 1, max = 10000))]
    pub limit: Option<u64>,
}

/// Arguments of `review_step`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewArgs {
    /// The flagged step.
    pub trace_id: String,
    /// approve, reject or escalate.
    pub decision: String,
    /// The reviewer's note.
    pub note: Option<String>,
}

/// Arguments of `erase_step`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EraseArgs {
    /// The step whose payload to erase.
    pub trace_id: String,
    /// Why (recorded).
    pub reason: String,
}

/// Arguments of `import_trace`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportTraceArgs {
    /// The complete signed trace (trace_id, agent_id_hash,
    /// started_at, trace_level, components, signature, signature_key_id).
    pub trace: serde_json::Map<String, Value>,
    /// The session its components become steps of (default: the trace id).
    pub session_id: Option<String>,
}

/// Arguments of `get_signed_trace`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SignedTraceArgs {
    /// The imported trace's id.
    pub trace_id: String,
}

/// Arguments of `register_agent_key`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterKeyArgs {
    /// The agent (for imported traces: their agent_id_hash).
    pub agent_id: String,
    /// The Ed25519 public key, base64 of its 32 bytes.
    pub public_key: String,
}

/// Arguments of `query_sql`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqlArgs {
    /// One read-only query over the views steps, sessions and records of
    /// your org (the backend's SQL dialect).
    pub sql: String,
    /// At most this many rows: 1 to 10000 (default 10000).
    #[schemars(range(min = 1, max = 10000))]
    pub limit: Option<u64>,
}

/// Arguments of `get_checkpoint`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// Arguments of `search_reasoning`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// What to look for: words, "a phrase", prefix*, -excluded (full
    /// text), or any text (semantic).
    pub query: String,
    /// fulltext, semantic or hybrid (default).
    pub mode: Option<String>,
    /// Only this agent's steps.
    pub agent_id: Option<String>,
    /// Only this session's steps.
    pub session_id: Option<String>,
    /// Only steps of this kind (any label of it: ToolCall, tool_call).
    pub kind: Option<String>,
    /// ok or flagged.
    pub status: Option<String>,
    /// Only steps created at or after: RFC 3339 or a date.
    pub since: Option<String>,
    /// Only steps created before: RFC 3339 or a date (the whole day
    /// included).
    pub until: Option<String>,
    /// At most this many results, 1 to 100 (default 10).
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u64>,
}
