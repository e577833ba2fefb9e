//! The MCP server (official Rust SDK, `rmcp`): seed 000's
//! `log_reasoning_step`, `replay_decision`, `get_session_history`; seed
//! 001's `audit_session_start`, `thought_record`, `audit_verify_chain`,
//! `audit_session_end`, `merkle_finalize`, `merkle_root`, and
//! `record_audit_event`; seed 002's `parse_thinking`, `record_turn`,
//! `get_audit_trail`; seed 003's `review_queue`, `review_step`,
//! `erase_step`; and `get_trace`, `get_checkpoint`, `get_inclusion_proof`,
//! `export_session`.
//!
//! Over Streamable HTTP (`/mcp`) every call is authenticated by the same API
//! keys as the REST API (a middleware puts the [`Caller`] into the request's
//! extensions); over stdio (`cairn mcp`, [`stdio`]) the caller is the local
//! operator of one org. On both, every message passes [`check_message`]
//! before the SDK reads it. Both serve the stateless 2026-07-28 revision
//! and the earlier revisions with the initialize handshake (rmcp
//! negotiates).
//!
//! Domain errors (unknown session, sealed session, invalid step) are tool
//! results with `isError: true` and a JSON body `{"error": {"code",
//! "message"}}` with the REST API's stable codes, so that a model can read
//! and correct them; so are unknown, missing and mistyped arguments
//! (`unknown_field` with the nearest known name, `missing_field`,
//! `invalid_argument`, each with its `field`), read by [`Parameters`].
//!
//! Every tool lists an `outputSchema` made from its result type (`results`
//! and the shared answer types of `wire`, `turns`, `oversight`, `traces`),
//! and answers with that type's JSON, so the schema and the answer cannot
//! differ; the schema also admits the error body, which is a tool error's
//! structured content. Input and output schemas are listed in a portable
//! spelling (no `type` arrays, no keyword-less schemas: see
//! [`results::portable`]).
//!
//! This file holds the service, the helpers every tool shares and the
//! router that joins the tools' groups: seed 000's in `steps`, seed 001's
//! in `trail`, seed 002's in `turns`, seed 003's in `oversight`, seed
//! 004's in `traces`, the log's evidence (checkpoint, proofs, export) in
//! `evidence`; their arguments in `args`, their results in `results`.

use crate::{ApiError, AppState, Caller};
use cairn_store::{ApiKey, LedgerStore, NewStep, Role, WriteRequest, Written};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::CallToolResult;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, tool_handler};
use serde_json::json;
use std::sync::Arc;

/// Checks one MCP message as it arrives, on either transport, before the
/// MCP SDK reads it again with serde_json (which would keep the last of
/// two members with one name, turn an integer beyond 64 bits into a
/// float, and read an object holding one of its private marker names as
/// another value): strict JSON and no member name serde_json reserves.
/// Gives the message, or what is wrong with it.
pub fn check_message(bytes: &[u8]) -> Result<serde_json::Value, String> {
    let message = parse_message(bytes)?;
    match reserved_problem(&message).or_else(|| arguments_problem(&message)) {
        Some(problem) => Err(problem),
        None => Ok(message),
    }
}

/// A `tools/call` (alone or in a batch) whose `params.arguments` is there
/// but not an object: the MCP SDK would answer it "method not found",
/// which sends its author looking for the wrong mistake.
fn arguments_problem(message: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    let wrong = |m: &Value| {
        if m.get("method").and_then(Value::as_str) != Some("tools/call") {
            return None;
        }
        let kind = match m.get("params")?.get("arguments")? {
            Value::Object(_) | Value::Null => return None,
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Number(_) => "a number",
            Value::Bool(_) => "a boolean",
        };
        Some(format!(
            "params.arguments of tools/call must be an object of the tool's arguments ({{\"session_id\": ...}}), not {kind} (JSON encoded twice?)"
        ))
    };
    match message {
        Value::Array(batch) => batch.iter().find_map(wrong),
        other => wrong(other),
    }
}

/// What a message [`check_message`] refused is, as far as a JSON-RPC
/// answer to it needs to know.
#[derive(Debug, PartialEq)]
pub(crate) enum Refused {
    /// Not JSON at all (JSON-RPC's Parse error, `-32700`).
    NotJson,
    /// JSON that is not one object (a batch, a scalar), or that could not
    /// be read whole (nested too deep, a number past a double's range):
    /// answered with a null id.
    NotAnObject,
    /// An object without `method`: a response from the client, which
    /// expects no answer.
    NotACall,
    /// A notification (a method without an id): its sender expects no
    /// answer.
    Notification,
    /// A request, answered by its id (null when the id could not be read
    /// unaltered).
    Request(serde_json::Value),
}

impl Refused {
    /// The JSON-RPC error code that answers it: `-32700` for what is not
    /// JSON, `-32600` (Invalid Request) for JSON Cairn will not read.
    pub(crate) fn code(&self) -> i64 {
        if *self == Refused::NotJson {
            -32700
        } else {
            -32600
        }
    }

    /// The id a JSON-RPC error answering it carries.
    pub(crate) fn id(&self) -> serde_json::Value {
        match self {
            Refused::Request(id) => id.clone(),
            _ => serde_json::Value::Null,
        }
    }
}

/// What the message `bytes`, which [`check_message`] refused, is. Its id
/// comes from the strict reading when only a member name was refused,
/// else from a lenient one, where it is kept only if it is a string or an
/// integer the lenient reading did not alter.
pub(crate) fn refused(bytes: &[u8]) -> Refused {
    use serde_json::Value;
    let (message, lenient) = match parse_message(bytes) {
        Ok(message) => (message, false),
        Err(_) => match serde_json::from_slice::<Value>(bytes) {
            Ok(message) => (message, true),
            // JSON the reader will not hold (nested past its depth, a
            // number past a double's range) is JSON all the same.
            Err(e)
                if ["recursion limit exceeded", "number out of range"]
                    .iter()
                    .any(|m| e.to_string().starts_with(m)) =>
            {
                return Refused::NotAnObject;
            }
            Err(_) => return Refused::NotJson,
        },
    };
    let Value::Object(message) = message else {
        return Refused::NotAnObject;
    };
    if !message.contains_key("method") {
        return Refused::NotACall;
    }
    // An id given twice is ambiguous: the lenient reading kept the last,
    // which may be another request's of the client's.
    if lenient && top_level_ids(bytes) > 1 {
        return Refused::Request(Value::Null);
    }
    match message.get("id") {
        None => Refused::Notification,
        Some(Value::Number(n)) if lenient && !(n.is_i64() || n.is_u64()) => {
            Refused::Request(Value::Null)
        }
        Some(id @ (Value::String(_) | Value::Number(_))) => Refused::Request(id.clone()),
        Some(_) => Refused::Request(Value::Null),
    }
}

/// How many members named `id` the JSON object `bytes` has at its top
/// level (0 if it is not one).
fn top_level_ids(bytes: &[u8]) -> usize {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
    struct Ids;
    impl<'de> Visitor<'de> for Ids {
        type Value = usize;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
            let mut ids = 0;
            while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                ids += usize::from(name == "id");
                map.next_value::<IgnoredAny>()?;
            }
            Ok(ids)
        }
    }
    serde_json::Deserializer::from_slice(bytes)
        .deserialize_map(Ids)
        .unwrap_or(0)
}

/// [`check_message`]'s strict reading.
fn parse_message(bytes: &[u8]) -> Result<serde_json::Value, String> {
    cairn_core::json::from_slice_with(bytes, cairn_core::json::Integers::Bits64)
        .map_err(|e| format!("the message is not valid JSON: {e}"))
}

/// [`check_message`]'s refusal of a reserved member name, worded as a
/// payload's is ([`cairn_core::record::RecordError::ReservedMemberName`]).
fn reserved_problem(message: &serde_json::Value) -> Option<String> {
    let name = cairn_core::json::reserved_member_name(message)?;
    let refusal = cairn_core::record::RecordError::ReservedMemberName {
        field: "the message",
        name: name.chars().take(60).collect(),
    };
    Some(refusal.to_string())
}

/// The MCP service over a server state.
#[derive(Clone)]
pub struct CairnMcp {
    state: Arc<AppState>,
    /// The caller for stdio, where there is no API key.
    local: Option<Caller>,
    /// The agent a tool acts for when its arguments name none and the key
    /// is bound to none (`cairn mcp --agent`, `CAIRN_AGENT`).
    default_agent: Option<String>,
    tool_router: ToolRouter<CairnMcp>,
}

type ToolResult = Result<CallToolResult, ErrorData>;

/// A structured answer: the result type's JSON as structured content (and,
/// as rmcp does, as text).
fn ok<T: serde::Serialize>(answer: &T) -> ToolResult {
    structured(crate::wire::to_json(answer))
}

/// The most one tool answer's message may hold of its answer: the JSON
/// as structured content plus the same JSON escaped as the text block MCP
/// asks for beside it (where every `"` and `\` takes two bytes). MCP
/// clients bound a message (the official Python SDK refuses a server-sent
/// event past 1 MiB, and its caller then sees a transport error instead
/// of the answer), so a larger answer is refused as a tool error that
/// says where it can be read.
pub(crate) const MAX_ANSWER_MESSAGE_BYTES: usize = 960 * 1024;

/// JSON of steps one `replay_decision` part holds at most (but always one
/// step). With the answer's other members, and written twice in its
/// message (the second time escaped, at most twice the size), that fits
/// [`MAX_ANSWER_MESSAGE_BYTES`]. (`search_reasoning` and `review_queue`
/// fit their lists by what each item takes of the message: [`fit_listed`].)
pub(crate) const ANSWER_STEPS_BYTES: usize = 256 * 1024;

pub(crate) use fit::{fit_listed, fit_queue_item, fitted, shorten_if_large};

/// `value` as a tool's structured answer, or `answer_too_large` when its
/// message would pass [`MAX_ANSWER_MESSAGE_BYTES`].
fn structured(value: serde_json::Value) -> ToolResult {
    let text = value.to_string();
    let message = fit::text_message_bytes(&text);
    if message > MAX_ANSWER_MESSAGE_BYTES {
        return tool_error(message_too_large(&format!("{} KiB", message / 1024)));
    }
    // As `CallToolResult::structured`, with the text already written.
    let mut result = CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)]);
    result.structured_content = Some(value);
    Ok(result)
}

/// `answer_too_large` for an answer whose message would take `taken`
/// (past [`MAX_ANSWER_MESSAGE_BYTES`]), saying what to ask for instead.
fn message_too_large(taken: &str) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        "answer_too_large",
        format!(
            "this answer would take {taken} of its MCP message (its JSON twice: as structured content and as text), more than one message carries ({} KiB; clients refuse messages past about 1 MiB): ask for less (search_reasoning with a smaller limit, get_audit_trail a turn at a time with turn_id, replay_decision in parts with from_step, a lower level), or read it over REST (GET /v1/sessions/{{id}}, GET /v1/export?session=..., GET /v1/reviews, GET /v1/search) or with the CLI (cairn replay, cairn export, cairn review queue, cairn search)",
            MAX_ANSWER_MESSAGE_BYTES / 1024
        ),
    )
}

/// What a tool answer that is held whole may hold of steps, counted as
/// [`crate::held::HeldAnswer`] counts them, when it is JSON: a step's
/// count is at most the length of its JSON, and the message holds the
/// JSON twice, so past half of [`MAX_ANSWER_MESSAGE_BYTES`] the answer
/// would be refused anyway, and reading stops there (not at the 16 MiB
/// a REST answer may hold, which parsed for the message would take
/// hundreds of megabytes).
fn held_json_answer() -> crate::held::HeldAnswer {
    crate::held::HeldAnswer::refused_past(MAX_ANSWER_MESSAGE_BYTES / 2, |limit| {
        message_too_large(&format!("over {} KiB", 2 * limit / 1024))
    })
}

fn tool_error(e: ApiError) -> ToolResult {
    Ok(CallToolResult::structured_error(e.body()))
}

mod args;
mod evidence;
mod fit;
mod oversight;
mod results;
pub mod stdio;
mod steps;
mod traces;
mod trail;
mod turns;
pub use args::*;
pub use results::*;

/// The tools, each with its schemas in their portable spelling
/// ([`results::portable`]); an output schema is always an object.
fn router() -> ToolRouter<CairnMcp> {
    let mut router = CairnMcp::steps_router()
        + CairnMcp::trail_router()
        + CairnMcp::turns_router()
        + CairnMcp::oversight_router()
        + CairnMcp::traces_router()
        + CairnMcp::evidence_router();
    for route in router.map.values_mut() {
        let tool = &mut route.attr;
        let mut input = tool.input_schema.as_ref().clone();
        results::portable(&mut input);
        tool.input_schema = Arc::new(input);
        if let Some(output) = &tool.output_schema {
            let mut output = output.as_ref().clone();
            results::portable(&mut output);
            output.entry("type").or_insert_with(|| json!("object"));
            tool.output_schema = Some(Arc::new(output));
        }
    }
    router
}

impl CairnMcp {
    /// The service for HTTP: callers come from each request's API key.
    pub fn http(state: Arc<AppState>) -> CairnMcp {
        CairnMcp {
            state,
            local: None,
            default_agent: None,
            tool_router: router(),
        }
    }

    /// The service for stdio: the local operator, as an admin of `org_id`,
    /// acting for `default_agent` where a tool's arguments name no agent.
    pub fn local(state: Arc<AppState>, org_id: &str, default_agent: Option<String>) -> CairnMcp {
        let key = ApiKey {
            id: "local-stdio".into(),
            org_id: org_id.to_owned(),
            role: Role::Admin,
            agent_id: None,
            token_hash: cairn_core::Hash::ZERO,
            label: "stdio".into(),
            created_at: cairn_store::now(),
            revoked_at: None,
            expires_at: None,
        };
        CairnMcp {
            state,
            local: Some(Caller { key }),
            default_agent,
            tool_router: router(),
        }
    }

    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        if let Some(local) = &self.local {
            return Ok(local.clone());
        }
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned()
            .ok_or_else(|| ErrorData::invalid_request("an API key is required", None))
    }

    /// What the HTTP request carrying this call holds in memory (its body,
    /// counted by the HTTP layer), for the tool to grow; none over stdio.
    fn request_memory(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Option<crate::limits::RequestMemory> {
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<crate::limits::RequestMemory>())
            .cloned()
    }

    async fn store<T: Send + 'static>(
        &self,
        work: impl FnOnce(&dyn LedgerStore) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        crate::blocking(&self.state, work).await
    }

    /// What the HTTP request carrying this call holds, kept until a write
    /// it queues is written ([`crate::queue_write`]); nothing over stdio.
    fn counted(&self, context: &RequestContext<RoleServer>) -> crate::limits::UntilWritten {
        crate::limits::UntilWritten::new(self.request_memory(context).as_ref(), None)
    }

    /// Queues `request` for the call of `context`, its request's memory
    /// counted until it is written.
    async fn write(
        &self,
        context: &RequestContext<RoleServer>,
        request: WriteRequest,
    ) -> Result<Written, ApiError> {
        Caller::require_enabled(&self.state)?;
        Ok(crate::queue_write(&self.state, &self.counted(context), request).await?)
    }

    /// The agent a tool acts for: the one its arguments name, else the
    /// key's own agent, else the service's default agent. A key bound to
    /// an agent acts for no other.
    fn agent_for(&self, caller: &Caller, given: Option<String>) -> Result<String, ApiError> {
        match (given, &caller.key.agent_id) {
            (Some(a), Some(bound)) if a != *bound => Err(ApiError::forbidden(format!(
                "this key may only act as agent {bound}"
            ))),
            (Some(a), _) => Ok(a),
            (None, Some(bound)) => Ok(bound.clone()),
            (None, None) => self.default_agent.clone().ok_or_else(|| {
                ApiError::bad_request(
                    "missing_field",
                    if self.local.is_some() {
                        "agent_id is required: name the agent in the arguments, or start `cairn mcp --agent NAME` (or set CAIRN_AGENT) to give every tool a default agent"
                    } else {
                        "agent_id is required: name the agent in the arguments, or use an API key bound to the agent (`cairn admin create-key --agent NAME`)"
                    },
                )
                .with_field("agent_id")
            }),
        }
    }

    /// Records `step` as `record_step` does on REST, with what the ledger
    /// makes of it counted against the request's memory (`memory`, the
    /// HTTP layer's count of the body; none over stdio).
    async fn log_step(
        &self,
        caller: &Caller,
        step: NewStep,
        memory: Option<&crate::limits::RequestMemory>,
    ) -> Result<StepLogged, ApiError> {
        caller.require(caller.key.role.can_write(), "record steps")?;
        Caller::require_enabled(&self.state)?;
        let written = crate::steps::record_step(&self.state, caller.org(), memory, step).await?;
        // The answer REST gives a step (`wire::StepWritten`): one shape on
        // every surface.
        match crate::wire::step_written(&written) {
            Some(step) => Ok(step),
            None => Err(unexpected(written)),
        }
    }
}

use crate::unexpected;

async fn run<T: serde::Serialize>(result: Result<T, ApiError>) -> ToolResult {
    match result {
        Ok(answer) => ok(&answer),
        Err(e) => tool_error(e),
    }
}

#[tool_handler(
    router = self.tool_router,
    name = "cairn",
    instructions = "Cairn is a tamper-evident ledger of your reasoning. Record every step with log_reasoning_step (or, for a decision trail you must be able to prove: audit_session_start, thought_record for plan/analysis/decision, record_audit_event for tool calls they rest on, audit_verify_chain, a closing thought_record of type reflection, merkle_finalize, merkle_root, audit_session_end). Record a whole turn from your raw thinking with record_turn (parse_thinking shows the split first); read a session's turns with get_audit_trail. Flag a step (status flagged) to send it to human review (review_queue, review_step). Replay with replay_decision; list sessions with get_session_history. Records are never edited: correct a step by recording a new one that names it (corrects)."
)]
impl ServerHandler for CairnMcp {}
