//! OpenTelemetry spans to Cairn steps: a pure, deterministic mapping (the
//! table in `docs/OTLP.md` is this file in prose).
//!
//! [`map_request`] turns every span of a request into its steps, or into a
//! reason it cannot be recorded; [`plan`] groups the steps by session,
//! picks each session's agent and puts the steps in their recorded order.
//! Nothing here does I/O or reads a clock; the handler in `super` turns the
//! plan into `NewStep`s and submits them.
//!
//! This file holds the mapping's types, [`map_request`] and one span's
//! identity, session, agent and operation; the steps of each kind of span
//! are in `steps`, their metadata in `metadata`, the grouping by session
//! in `sessions`.

pub use super::attrs::id_from;
use super::attrs::{
    Attrs, MAX_PARSED_MEMORY_PER_REQUEST, ParseBudget, any_to_json, approx_memory, attributes_json,
    clip, marker,
};
use cairn_core::record::validate_id;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::borrow::Cow;

mod metadata;
mod sessions;
mod steps;
mod trace_sessions;
use metadata::attach_metadata;
pub use sessions::{SessionPlan, plan};
use steps::{agent_steps, chat_model, chat_steps, chat_tokens, error_step, other_step, tool_steps};

/// The most steps one request may map to. A span maps to a few steps, but
/// a chat span's reasoning text gives one step per paragraph: without this
/// bound a request of a few megabytes could ask for millions of steps (each
/// holding a few kilobytes of the server's memory until it is written).
/// The spans past it are refused one by one (`partial_success`), never
/// dropped silently.
pub const MAX_STEPS_PER_REQUEST: usize = 65_536;

/// The most bytes a request's steps may hold in all, as
/// [`MappedStep::counted_bytes`] estimates the server's memory for them (at
/// least their JSON's size): a span's data is its own, but what every
/// span of a resource or scope repeats (see [`MAX_SHARED_METADATA_BYTES`])
/// would otherwise multiply a small body many times over in memory and on
/// disk. The spans past it are refused one by one (`partial_success`).
pub const MAX_STEP_BYTES_PER_REQUEST: usize = 128 * 1024 * 1024;

/// What a step is counted as beyond its content and payloads, against
/// [`MAX_STEP_BYTES_PER_REQUEST`]: its row's ids, hashes and times.
pub const STEP_OVERHEAD_BYTES: usize = 512;

/// The most bytes of JSON the resource's attributes, and each scope, may
/// take in a span's metadata (the first step of every span of the resource
/// or scope repeats them), and a quarter of the memory they may hold
/// ([`MAX_SHARED_METADATA_MEMORY`]); past either they are replaced by a
/// marker holding the start of their JSON (`{"cairn.truncated": true,
/// ...}`), named in `metadata.otel.truncated`. Made once per resource and
/// scope, so that their size is not paid again for every span.
pub const MAX_SHARED_METADATA_BYTES: usize = 16 * 1024;

/// The most memory (as estimated for the budget of a request) the
/// resource's attributes, or a scope, may hold in a span's metadata: a
/// value of many small parts (thousands of empty strings, arrays nested
/// in arrays) holds many times its JSON's size.
pub const MAX_SHARED_METADATA_MEMORY: usize = 4 * MAX_SHARED_METADATA_BYTES;

/// The most bytes of a resource's or scope's schema URL kept.
const MAX_SCHEMA_URL_BYTES: usize = 1024;

/// How large mapped values may be (the store's record limits, and a cap on
/// each attribute kept in metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapLimits {
    /// Largest `content`, in bytes.
    pub max_content_bytes: usize,
    /// Largest canonical JSON of `input_data`, `output_data`, `metadata`.
    pub max_payload_bytes: usize,
    /// Largest string attribute value kept whole in metadata.
    pub max_attribute_bytes: usize,
    /// Most step data one request may map to
    /// ([`MAX_STEP_BYTES_PER_REQUEST`] unless a test sets less).
    pub max_request_step_bytes: usize,
}

impl Default for MapLimits {
    fn default() -> MapLimits {
        let record = cairn_core::record::Limits::default();
        MapLimits {
            max_content_bytes: record.max_content_bytes,
            max_payload_bytes: record.max_payload_bytes,
            max_attribute_bytes: 16 * 1024,
            max_request_step_bytes: MAX_STEP_BYTES_PER_REQUEST,
        }
    }
}

/// What a span is, from `gen_ai.operation.name`, else
/// `openinference.span.kind`, else the first word of its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `invoke_agent`, OpenInference `AGENT`.
    InvokeAgent,
    /// `create_agent`.
    CreateAgent,
    /// `chat`, `text_completion`, `generate_content`, OpenInference `LLM`.
    Chat,
    /// `execute_tool`, OpenInference `TOOL`.
    Tool,
    /// `retrieval`, OpenInference `RETRIEVER`.
    Retrieval,
    /// `embeddings`, OpenInference `EMBEDDING`.
    Embeddings,
    /// OpenInference `RERANKER`.
    Reranker,
    /// OpenInference `GUARDRAIL`.
    Guardrail,
    /// OpenInference `EVALUATOR`.
    Evaluator,
    /// `invoke_workflow`, OpenInference `CHAIN`.
    Chain,
    /// OpenInference `PROMPT`.
    Prompt,
    /// Anything else (an HTTP call, a database query, ...).
    Other,
}

impl Operation {
    fn parse(name: &str) -> Option<Operation> {
        Some(match name {
            "invoke_agent" | "AGENT" => Operation::InvokeAgent,
            "create_agent" => Operation::CreateAgent,
            "chat" | "text_completion" | "generate_content" | "LLM" => Operation::Chat,
            "execute_tool" | "TOOL" => Operation::Tool,
            "retrieval" | "RETRIEVER" => Operation::Retrieval,
            "embeddings" | "EMBEDDING" => Operation::Embeddings,
            "RERANKER" => Operation::Reranker,
            "GUARDRAIL" => Operation::Guardrail,
            "EVALUATOR" => Operation::Evaluator,
            "invoke_workflow" | "CHAIN" => Operation::Chain,
            "PROMPT" => Operation::Prompt,
            _ => return None,
        })
    }

    /// The name recorded in `metadata.otel.operation`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::InvokeAgent => "invoke_agent",
            Operation::CreateAgent => "create_agent",
            Operation::Chat => "chat",
            Operation::Tool => "execute_tool",
            Operation::Retrieval => "retrieval",
            Operation::Embeddings => "embeddings",
            Operation::Reranker => "rerank",
            Operation::Guardrail => "guardrail",
            Operation::Evaluator => "evaluate",
            Operation::Chain => "chain",
            Operation::Prompt => "prompt",
            Operation::Other => "span",
        }
    }
}

/// One step made from a span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MappedStep {
    /// When it happened, for ordering (Unix nanoseconds): a span's opening
    /// steps at its start, its closing steps at its end.
    pub at: u64,
    /// Position within its span (0, 1, ...).
    pub position: u32,
    /// The step's trace id: `otel.<trace id>.<span id>.<position>`.
    pub step_id: String,
    /// The step type, a spelling Cairn's vocabulary parses.
    pub kind_label: Cow<'static, str>,
    /// Text.
    pub content: Option<String>,
    /// Input JSON.
    pub input: Option<Value>,
    /// Output JSON.
    pub output: Option<Value>,
    /// Duration of the span, on its last step.
    pub duration_ms: Option<u64>,
    /// Tokens of the span, on its last step.
    pub token_count: Option<u64>,
    /// Model name.
    pub model: Option<String>,
    /// `{"otel": {...}}`.
    pub metadata: Value,
    /// `links.tool_call`.
    pub tool_call: Option<String>,
    /// The OTel trace id (hex), recorded as the step's turn.
    pub turn_id: String,
}

/// The steps of one span, and where they go. Serialized as JSON to wait
/// in the store for the span that names its session ([`SessionSource`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanSteps {
    /// Trace id, hex.
    pub trace_hex: String,
    /// Span id, hex.
    pub span_hex: String,
    /// The session (already a valid Cairn id).
    pub session_id: String,
    /// Where [`SpanSteps::session_id`] came from.
    pub session_source: SessionSource,
    /// The agent the span names, as a Cairn id, and whether the span is
    /// an agent span (`invoke_agent`, `create_agent`, `AGENT`).
    pub agent: Option<(String, bool)>,
    /// The resource's `service.name`, as a Cairn id (none when it is the
    /// name an SDK makes up, `unknown_service…`).
    pub service: Option<String>,
    /// Start time (Unix nanoseconds), for choosing a session's agent.
    pub start: u64,
    /// The steps, in span order.
    pub steps: Vec<MappedStep>,
    /// What the steps count against the request's step data
    /// ([`MappedStep::counted_bytes`], summed once by [`map_request`]).
    pub counted_bytes: usize,
}

/// Where a span's session came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionSource {
    /// Named by the span or its resource (`gen_ai.conversation.id`, else
    /// `session.id`), by its nearest ancestor in the request, or by the
    /// one session its trace's other spans in the request name.
    Named,
    /// Named by nothing in the request: the trace id stands in.
    /// `settled` when nothing a later export brings can name it better:
    /// the request holds its trace's root span (the span a trace ends
    /// with, as a parent ends after its children), or its trace's spans
    /// in the request name several sessions. Otherwise the span that
    /// names the session may still come (a batch exported before it).
    TraceId {
        /// Whether the request settles the trace's session.
        settled: bool,
    },
}

/// A span that cannot be recorded, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmappable {
    /// Trace id, hex (may be empty or odd when that is the fault).
    pub trace_hex: String,
    /// Span id, hex.
    pub span_hex: String,
    /// Why.
    pub reason: String,
}

/// Whether `name` is the `service.name` an OpenTelemetry SDK makes up
/// when none was configured (`unknown_service`, or `unknown_service:`
/// and the process's executable name, as the resource semantic
/// conventions require): it names no agent, so it is not taken as one.
fn is_sdk_default_service(name: &str) -> bool {
    name == "unknown_service" || name.starts_with("unknown_service:")
}

/// Maps every span of a request, in request order. A span whose steps
/// would take the request past [`MAX_STEPS_PER_REQUEST`] is unmappable
/// (the spans before it keep their steps; a later, smaller span may still
/// fit).
pub fn map_request(
    request: &ExportTraceServiceRequest,
    limits: &MapLimits,
) -> Vec<Result<SpanSteps, Unmappable>> {
    let _parsing = ParseBudget::start(MAX_PARSED_MEMORY_PER_REQUEST);
    let trace_sessions = trace_sessions::TraceSessions::of(request);
    let mut out = Vec::new();
    let mut room = MAX_STEPS_PER_REQUEST;
    let mut bytes_left = limits.max_request_step_bytes;
    for rs in &request.resource_spans {
        let resource_attrs = rs
            .resource
            .as_ref()
            .map(|r| r.attributes.as_slice())
            .unwrap_or(&[]);
        let mut truncated_resource = Vec::new();
        let resource = attributes_json(resource_attrs, limits, "resource", &mut truncated_resource);
        let resource = shared(resource, "resource", &mut truncated_resource);
        let service = Attrs(resource_attrs)
            .str("service.name")
            .filter(|name| !is_sdk_default_service(name))
            .map(id_from);
        // Looked up once: a resource may hold many attributes, and every
        // span without a session of its own falls back to it.
        let resource_session = Attrs(resource_attrs).session();
        for ss in &rs.scope_spans {
            let mut truncated_shared = truncated_resource.clone();
            let scope = ss.scope.as_ref().map(|s| {
                let mut obj = Map::new();
                obj.insert("name".into(), json!(s.name));
                if !s.version.is_empty() {
                    obj.insert("version".into(), json!(s.version));
                }
                let mut truncated_scope = Vec::new();
                if !s.attributes.is_empty() {
                    obj.insert(
                        "attributes".into(),
                        attributes_json(&s.attributes, limits, "scope", &mut truncated_scope),
                    );
                }
                let scope = shared(Value::Object(obj), "scope", &mut truncated_scope);
                truncated_shared.extend(truncated_scope);
                scope
            });
            let schema_url = if ss.schema_url.is_empty() {
                &rs.schema_url
            } else {
                &ss.schema_url
            };
            let schema_url = clip(schema_url, MAX_SCHEMA_URL_BYTES, &mut false);
            for span in &ss.spans {
                let context = Context {
                    resource: &resource,
                    resource_session: resource_session.as_deref(),
                    trace_sessions: &trace_sessions,
                    scope: scope.as_ref(),
                    service: service.as_deref(),
                    schema_url: &schema_url,
                    truncated_shared: &truncated_shared,
                };
                let mapped = map_span(span, &context, limits, room).and_then(|mut steps| {
                    let bytes: usize = steps.steps.iter().map(MappedStep::counted_bytes).sum();
                    steps.counted_bytes = bytes;
                    if bytes > bytes_left {
                        return Err(Unmappable {
                            reason: format!(
                                "span {} of trace {}: its steps would take the request past {} MiB of step data: export smaller batches",
                                steps.span_hex,
                                steps.trace_hex,
                                limits.max_request_step_bytes >> 20
                            ),
                            trace_hex: steps.trace_hex,
                            span_hex: steps.span_hex,
                        });
                    }
                    bytes_left -= bytes;
                    Ok(steps)
                });
                if let Ok(steps) = &mapped {
                    room -= steps.steps.len();
                }
                out.push(mapped);
            }
        }
    }
    out
}

/// A piece of metadata every span of a group repeats (the resource's
/// attributes, a scope), cut past [`MAX_SHARED_METADATA_BYTES`] of JSON or
/// [`MAX_SHARED_METADATA_MEMORY`] of memory to a marker keeping the first
/// [`SHARED_MARKER_PREFIX_BYTES`] of its JSON (every span repeats it); when
/// it is cut, `truncated` names it alone (not each attribute cut inside it).
fn shared(value: Value, name: &str, truncated: &mut Vec<String>) -> Value {
    // Measured by what it holds first: a value of many small parts holds
    // many times its JSON's size.
    let text = value.to_string();
    if approx_memory(&value) <= MAX_SHARED_METADATA_MEMORY
        && text.len() <= MAX_SHARED_METADATA_BYTES
    {
        return value;
    }
    truncated.clear();
    truncated.push(name.to_owned());
    marker(&text, SHARED_MARKER_PREFIX_BYTES * 2)
}

/// The most bytes of a cut shared piece's JSON its marker keeps.
const SHARED_MARKER_PREFIX_BYTES: usize = 1024;

impl MappedStep {
    /// What the step counts against [`MAX_STEP_BYTES_PER_REQUEST`]: its
    /// content, the memory its payloads hold as `Value`s (an estimate that
    /// is at least their JSON's size but for escapes), and
    /// [`STEP_OVERHEAD_BYTES`].
    pub fn counted_bytes(&self) -> usize {
        STEP_OVERHEAD_BYTES
            + self.content.as_ref().map_or(0, String::len)
            + self.input.as_ref().map_or(0, approx_memory)
            + self.output.as_ref().map_or(0, approx_memory)
            + approx_memory(&self.metadata)
    }
}

struct Context<'a> {
    resource: &'a Value,
    /// The resource's `gen_ai.conversation.id`, else its `session.id`.
    resource_session: Option<&'a str>,
    /// What the request's other spans say about sessions.
    trace_sessions: &'a trace_sessions::TraceSessions<'a>,
    scope: Option<&'a Value>,
    service: Option<&'a str>,
    schema_url: &'a str,
    /// What was cut in the resource's attributes and the scope.
    truncated_shared: &'a [String],
}

/// Builder for one span's steps.
struct Builder<'a> {
    trace_hex: String,
    span_hex: String,
    limits: &'a MapLimits,
    start: u64,
    end: u64,
    steps: Vec<MappedStep>,
    /// What was cut, for `metadata.otel.truncated`.
    truncated: Vec<String>,
    /// Attributes whose content went into content, input or output.
    moved: Vec<&'static str>,
    /// The most steps this span may have (what its request has left).
    room: usize,
    /// Whether the span asked for more than `room`.
    over: bool,
}

/// When a step happened, for ordering: at the span's start or its end.
#[derive(Clone, Copy)]
enum At {
    Start,
    End,
}

impl Builder<'_> {
    fn push(
        &mut self,
        at: At,
        kind_label: &'static str,
        content: String,
        (input, output): (Option<Value>, Option<Value>),
        tool_call: Option<String>,
    ) {
        if self.steps.len() >= self.room {
            self.over = true;
            return;
        }
        let position = self.steps.len() as u32;
        let mut cut = false;
        let content = clip(&content, self.limits.max_content_bytes, &mut cut);
        if cut {
            self.truncated.push(format!("step {position} content"));
        }
        self.steps.push(MappedStep {
            at: match at {
                At::Start => self.start,
                At::End => self.end,
            },
            position,
            step_id: format!("otel.{}.{}.{position}", self.trace_hex, self.span_hex),
            kind_label: Cow::Borrowed(kind_label),
            content: Some(content),
            input,
            output,
            duration_ms: None,
            token_count: None,
            model: None,
            metadata: Value::Null,
            tool_call: tool_call.map(|id| id_from(&id)),
            turn_id: self.trace_hex.clone(),
        });
    }

    /// The first of `keys` present, as JSON, noted as moved.
    fn take_json(&mut self, attrs: Attrs<'_>, keys: &[&'static str]) -> Option<Value> {
        let (key, value) = keys
            .iter()
            .find_map(|k| attrs.json(k, self.limits).map(|v| (*k, v)))?;
        self.moved.push(key);
        Some(value)
    }

    /// The items of a flattened list (`<prefix><i>.<field>`, as
    /// [`crate::otlp::messages::indexed`] reads them), each an object of
    /// its fields named without `strip` (`message.role` as `role`), noted
    /// as moved; `None` when no key reads as one. A value cut to the
    /// limits is noted in `truncated` under the list's name.
    fn take_flattened(
        &mut self,
        attrs: Attrs<'_>,
        prefix: &'static str,
        strip: &str,
    ) -> Option<Vec<Value>> {
        use crate::otlp::messages::{indexed, unprefixed};
        let items = indexed(attrs, prefix);
        if items.is_empty() {
            return None;
        }
        self.moved.push(prefix);
        let mut cut = false;
        let items = items
            .iter()
            .map(|fields| {
                Value::Object(
                    fields
                        .iter()
                        .map(|(k, v)| {
                            let k = unprefixed(k, strip, fields);
                            (k.to_owned(), any_to_json(v, 0, self.limits, &mut cut))
                        })
                        .collect(),
                )
            })
            .collect();
        if cut {
            self.truncated.push(prefix.trim_end_matches('.').to_owned());
        }
        Some(items)
    }
}

/// What a span is, from `gen_ai.operation.name`, else
/// `openinference.span.kind`, else OpenLLMetry's `llm.request.type`, else
/// the first word of its name.
fn operation(span: &Span, attrs: Attrs<'_>) -> Operation {
    attrs
        .str("gen_ai.operation.name")
        .and_then(Operation::parse)
        .or_else(|| {
            attrs
                .str("openinference.span.kind")
                .and_then(|k| Operation::parse(&k.to_ascii_uppercase()))
        })
        // OpenLLMetry (Traceloop) names a model call's kind here.
        .or_else(|| match attrs.str("llm.request.type") {
            Some("chat" | "completion") => Some(Operation::Chat),
            _ => None,
        })
        .or_else(|| {
            span.name
                .split_whitespace()
                .next()
                .and_then(Operation::parse)
        })
        .unwrap_or(Operation::Other)
}

/// An id's bytes in hex, for messages: at most its first 32 bytes (a
/// valid trace or span id is 16 or 8), so that a refusal naming a span
/// whose id is megabytes long does not repeat it (a probe's 15 MB request
/// was answered with 31 MB).
fn id_hex(id: &[u8]) -> String {
    const SHOWN: usize = 32;
    if id.len() <= SHOWN {
        hex::encode(id)
    } else {
        format!("{}... ({} bytes)", hex::encode(&id[..SHOWN]), id.len())
    }
}

fn map_span(
    span: &Span,
    ctx: &Context<'_>,
    limits: &MapLimits,
    room: usize,
) -> Result<SpanSteps, Unmappable> {
    let trace_hex = id_hex(&span.trace_id);
    let span_hex = id_hex(&span.span_id);
    let unmappable = |reason: String| Unmappable {
        trace_hex: trace_hex.clone(),
        span_hex: span_hex.clone(),
        reason,
    };
    if span.trace_id.len() != 16 || span.trace_id.iter().all(|b| *b == 0) {
        return Err(unmappable(format!(
            "span {span_hex:?}: the trace id must be 16 bytes, not all zero"
        )));
    }
    if span.span_id.len() != 8 || span.span_id.iter().all(|b| *b == 0) {
        return Err(unmappable(format!(
            "trace {trace_hex}: a span id must be 8 bytes, not all zero"
        )));
    }
    let attrs = Attrs(&span.attributes);
    let operation = operation(span, attrs);
    // The span's own session, else its resource's, else the one its
    // ancestors (or its trace's other spans) in the request name.
    let (session_id, session_source) = match trace_sessions::named_by(span)
        .or_else(|| ctx.resource_session.map(Cow::Borrowed))
        .or_else(|| ctx.trace_sessions.inherited(span))
    {
        Some(named) => (id_from(&named), SessionSource::Named),
        None => (
            trace_hex.clone(),
            SessionSource::TraceId {
                settled: ctx.trace_sessions.settled(&span.trace_id),
            },
        ),
    };
    let agent = attrs
        .str("gen_ai.agent.id")
        .filter(|id| validate_id("agent", id).is_ok())
        .or_else(|| attrs.str("gen_ai.agent.name"))
        .or_else(|| attrs.str("agent.name"))
        .map(|a| {
            let is_agent_span =
                matches!(operation, Operation::InvokeAgent | Operation::CreateAgent);
            (id_from(a), is_agent_span)
        });
    let failed = span.status.as_ref().is_some_and(|s| s.code == 2);
    let mut b = Builder {
        trace_hex: trace_hex.clone(),
        span_hex: span_hex.clone(),
        limits,
        start: span.start_time_unix_nano,
        end: span.end_time_unix_nano.max(span.start_time_unix_nano),
        steps: Vec::new(),
        truncated: Vec::new(),
        moved: Vec::new(),
        room,
        over: false,
    };
    let (mut model, mut tokens) = (None, None);
    match operation {
        Operation::InvokeAgent | Operation::CreateAgent => agent_steps(&mut b, span, operation),
        Operation::Chat => {
            model = chat_model(attrs);
            tokens = chat_tokens(attrs);
            chat_steps(&mut b, span, failed);
        }
        Operation::Tool => tool_steps(&mut b, span, failed),
        other => other_step(&mut b, span, other),
    }
    if failed {
        error_step(&mut b, span, operation == Operation::Tool);
    }
    if b.over {
        return Err(unmappable(format!(
            "span {span_hex} of trace {trace_hex}: its steps would take the request past {MAX_STEPS_PER_REQUEST} steps (a reasoning text gives one step per paragraph): export smaller batches"
        )));
    }
    // Span-level measures on the last step; the model on every step of a
    // model call.
    let duration = span
        .end_time_unix_nano
        .checked_sub(span.start_time_unix_nano)
        .filter(|_| span.start_time_unix_nano > 0)
        .map(|ns| ns / 1_000_000);
    if let Some(last) = b.steps.last_mut() {
        last.duration_ms = duration;
        last.token_count = tokens;
    }
    for s in &mut b.steps {
        s.model.clone_from(&model);
    }
    attach_metadata(&mut b, span, ctx, operation);
    Ok(SpanSteps {
        trace_hex,
        span_hex,
        session_id,
        session_source,
        agent,
        service: ctx.service.map(str::to_owned),
        start: span.start_time_unix_nano,
        steps: b.steps,
        counted_bytes: 0,
    })
}
