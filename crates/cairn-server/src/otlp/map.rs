//! OpenTelemetry spans to Cairn steps: a pure, deterministic mapping (the
//! table in `docs/OTLP.md` is this file in prose).
//!
//! [`map_request`] turns every span of a request into its steps, or into a
//! reason it cannot be recorded; [`plan`] groups the steps by session,
//! picks each session's agent and puts the steps in their recorded order.
//! Nothing here does I/O or reads a clock; the handler in `super` turns the
//! plan into `NewStep`s and submits them.

pub use super::attrs::id_from;
use super::attrs::{Attrs, any_to_json, attributes_json, clip, fit, rfc3339};
use super::messages::{Part, indexed, last_user_text, output_messages};
use cairn_core::record::validate_id;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{Map, Value, json};

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
}

impl Default for MapLimits {
    fn default() -> MapLimits {
        let record = cairn_core::record::Limits::default();
        MapLimits {
            max_content_bytes: record.max_content_bytes,
            max_payload_bytes: record.max_payload_bytes,
            max_attribute_bytes: 16 * 1024,
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
#[derive(Debug, Clone, PartialEq)]
pub struct MappedStep {
    /// When it happened, for ordering (Unix nanoseconds): a span's opening
    /// steps at its start, its closing steps at its end.
    pub at: u64,
    /// Position within its span (0, 1, ...).
    pub position: u32,
    /// The step's trace id: `otel.<trace id>.<span id>.<position>`.
    pub step_id: String,
    /// The step type, a spelling Cairn's vocabulary parses.
    pub kind_label: &'static str,
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

/// The steps of one span, and where they go.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanSteps {
    /// Trace id, hex.
    pub trace_hex: String,
    /// Span id, hex.
    pub span_hex: String,
    /// The session (already a valid Cairn id).
    pub session_id: String,
    /// The agent the span names, as a Cairn id, and whether the span is
    /// an agent span (`invoke_agent`, `create_agent`, `AGENT`).
    pub agent: Option<(String, bool)>,
    /// The resource's `service.name`, as a Cairn id.
    pub service: Option<String>,
    /// Start time (Unix nanoseconds), for choosing a session's agent.
    pub start: u64,
    /// The steps, in span order.
    pub steps: Vec<MappedStep>,
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

/// Maps every span of a request, in request order.
pub fn map_request(
    request: &ExportTraceServiceRequest,
    limits: &MapLimits,
) -> Vec<Result<SpanSteps, Unmappable>> {
    let mut out = Vec::new();
    for rs in &request.resource_spans {
        let resource_attrs = rs
            .resource
            .as_ref()
            .map(|r| r.attributes.as_slice())
            .unwrap_or(&[]);
        let mut truncated_resource = Vec::new();
        let resource = attributes_json(resource_attrs, limits, "resource", &mut truncated_resource);
        let service = Attrs(resource_attrs).str("service.name").map(id_from);
        for ss in &rs.scope_spans {
            let scope = ss.scope.as_ref().map(|s| {
                let mut obj = Map::new();
                obj.insert("name".into(), json!(s.name));
                if !s.version.is_empty() {
                    obj.insert("version".into(), json!(s.version));
                }
                if !s.attributes.is_empty() {
                    let mut ignored = Vec::new();
                    obj.insert(
                        "attributes".into(),
                        attributes_json(&s.attributes, limits, "scope", &mut ignored),
                    );
                }
                Value::Object(obj)
            });
            for span in &ss.spans {
                let context = Context {
                    resource: &resource,
                    resource_attrs,
                    scope: scope.as_ref(),
                    service: service.as_deref(),
                    schema_url: if ss.schema_url.is_empty() {
                        &rs.schema_url
                    } else {
                        &ss.schema_url
                    },
                    truncated_resource: &truncated_resource,
                };
                out.push(map_span(span, &context, limits));
            }
        }
    }
    out
}

struct Context<'a> {
    resource: &'a Value,
    resource_attrs: &'a [KeyValue],
    scope: Option<&'a Value>,
    service: Option<&'a str>,
    schema_url: &'a str,
    truncated_resource: &'a [String],
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
            kind_label,
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
}

/// What a span is, from `gen_ai.operation.name`, else
/// `openinference.span.kind`, else the first word of its name.
fn operation(span: &Span, attrs: Attrs<'_>) -> Operation {
    attrs
        .str("gen_ai.operation.name")
        .and_then(Operation::parse)
        .or_else(|| {
            attrs
                .str("openinference.span.kind")
                .and_then(|k| Operation::parse(&k.to_ascii_uppercase()))
        })
        .or_else(|| {
            span.name
                .split_whitespace()
                .next()
                .and_then(Operation::parse)
        })
        .unwrap_or(Operation::Other)
}

fn map_span(span: &Span, ctx: &Context<'_>, limits: &MapLimits) -> Result<SpanSteps, Unmappable> {
    let trace_hex = hex::encode(&span.trace_id);
    let span_hex = hex::encode(&span.span_id);
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
    let resource = Attrs(ctx.resource_attrs);
    let operation = operation(span, attrs);
    let session_id = attrs
        .str("gen_ai.conversation.id")
        .or_else(|| attrs.str("session.id"))
        .or_else(|| resource.str("gen_ai.conversation.id"))
        .or_else(|| resource.str("session.id"))
        .map_or_else(|| trace_hex.clone(), id_from);
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
        agent,
        service: ctx.service.map(str::to_owned),
        start: span.start_time_unix_nano,
        steps: b.steps,
    })
}

/// `invoke_agent` / `AGENT`: an observation of the request at the start,
/// and a summary of the answer at the end if recorded. `create_agent`:
/// context.
fn agent_steps(b: &mut Builder<'_>, span: &Span, operation: Operation) {
    let attrs = Attrs(&span.attributes);
    let input = b.take_json(attrs, &["gen_ai.input.messages", "input.value"]);
    let content = input
        .as_ref()
        .and_then(|i| last_user_text(i).or_else(|| i.as_str().map(str::to_owned)))
        .or_else(|| attrs.str("gen_ai.agent.description").map(str::to_owned))
        .unwrap_or_else(|| span.name.clone());
    let label = if operation == Operation::CreateAgent {
        "context"
    } else {
        "observation"
    };
    b.push(At::Start, label, content, (input, None), None);
    let (messages, source) = output_messages(span, b.limits);
    let text: Vec<&str> = messages
        .iter()
        .flat_map(|m| &m.parts)
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    if !text.is_empty() {
        b.moved.extend(source);
        let text = text.join("\n");
        b.push(At::End, "summary", text, (None, None), None);
    }
}

fn chat_model(attrs: Attrs<'_>) -> Option<String> {
    [
        "gen_ai.response.model",
        "gen_ai.request.model",
        "llm.response.model_name",
        "llm.model_name",
    ]
    .into_iter()
    .find_map(|k| attrs.str(k))
    .filter(|m| m.len() <= 200 && !m.contains('\n'))
    .map(str::to_owned)
}

fn chat_tokens(attrs: Attrs<'_>) -> Option<u64> {
    let sum = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    };
    sum(
        attrs.int("gen_ai.usage.input_tokens"),
        attrs.int("gen_ai.usage.output_tokens"),
    )
    .or_else(|| attrs.int("llm.token_count.total"))
    .or_else(|| {
        sum(
            attrs.int("llm.token_count.prompt"),
            attrs.int("llm.token_count.completion"),
        )
    })
    .and_then(|t| u64::try_from(t).ok())
}

/// A model call: reasoning parts through `parseThinking`, then a decision
/// (tool calls) or the final answer (text), per output message.
fn chat_steps(b: &mut Builder<'_>, span: &Span, failed: bool) {
    let attrs = Attrs(&span.attributes);
    let mut input = b.take_json(attrs, &["gen_ai.input.messages"]);
    if input.is_none() && attrs.with_prefix("llm.input_messages.").next().is_some() {
        b.moved.push("llm.input_messages.");
        let mut cut = false;
        let messages: Vec<Value> = indexed(attrs, "llm.input_messages.")
            .into_iter()
            .map(|fields| {
                Value::Object(
                    fields
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), any_to_json(v, 0, b.limits, &mut cut)))
                        .collect(),
                )
            })
            .collect();
        input = Some(Value::Array(messages));
    }
    if input.is_none() {
        input = b.take_json(attrs, &["input.value"]);
    }
    let (messages, source) = output_messages(span, b.limits);
    b.moved.extend(source);
    for m in &messages {
        for p in &m.parts {
            if let Part::Reasoning(text) = p {
                for parsed in cairn_core::thinking::parse_thinking(text) {
                    b.push(
                        At::End,
                        parsed.phase,
                        parsed.content,
                        (input.take(), None),
                        None,
                    );
                }
            }
        }
        let text: Vec<&str> = m
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        let calls: Vec<Value> = m
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::ToolCall {
                    id,
                    name,
                    arguments,
                } => Some(json!({"id": id, "name": name, "arguments": arguments})),
                _ => None,
            })
            .collect();
        if !calls.is_empty() {
            let content = if text.is_empty() {
                let names: Vec<&str> = calls
                    .iter()
                    .filter_map(|c| c.get("name").and_then(Value::as_str))
                    .collect();
                format!("call {}", names.join(", "))
            } else {
                text.join("\n")
            };
            let first_id = calls
                .iter()
                .find_map(|c| c.get("id").and_then(Value::as_str).map(str::to_owned));
            let output = json!({"tool_calls": calls, "finish_reason": m.finish_reason});
            b.push(
                At::End,
                "decision",
                content,
                (input.take(), Some(output)),
                first_id,
            );
        } else if !text.is_empty() {
            let output = m
                .finish_reason
                .as_ref()
                .map(|r| json!({"finish_reason": r}));
            b.push(
                At::End,
                "final_answer",
                text.join("\n"),
                (input.take(), output),
                None,
            );
        }
    }
    if b.steps.is_empty() && !failed {
        // No output recorded (content capture is off): the call itself.
        b.push(
            At::End,
            "reasoning",
            span.name.clone(),
            (input.take(), None),
            None,
        );
    }
    if let Some(input) = input {
        // The call failed before any output: keep what it was asked.
        b.push(
            At::Start,
            "reasoning",
            span.name.clone(),
            (Some(input), None),
            None,
        );
    }
}

/// A tool execution: the call at the start, the result at the end (an
/// error replaces the result).
fn tool_steps(b: &mut Builder<'_>, span: &Span, failed: bool) {
    let attrs = Attrs(&span.attributes);
    let name = ["gen_ai.tool.name", "tool.name", "tool_call.function.name"]
        .into_iter()
        .find_map(|k| attrs.str(k))
        .map_or_else(|| span.name.clone(), str::to_owned);
    let call_id = tool_call_id(attrs);
    let args = b.take_json(
        attrs,
        &[
            "gen_ai.tool.call.arguments",
            "tool_call.function.arguments",
            "input.value",
        ],
    );
    b.push(
        At::Start,
        "tool_call",
        name.clone(),
        (args, None),
        call_id.clone(),
    );
    let result = b.take_json(attrs, &["gen_ai.tool.call.result", "output.value"]);
    if failed {
        return;
    }
    let content = match &result {
        Some(Value::String(s)) => s.clone(),
        Some(v) => Some(v.to_string())
            .filter(|t| t.len() <= 2048)
            .unwrap_or_else(|| name.clone()),
        None => name,
    };
    b.push(At::End, "tool_result", content, (None, result), call_id);
}

fn tool_call_id(attrs: Attrs<'_>) -> Option<String> {
    ["gen_ai.tool.call.id", "tool_call.id", "tool.id"]
        .into_iter()
        .find_map(|k| attrs.str(k))
        .map(str::to_owned)
}

/// Every other kind of span: one step at its end.
fn other_step(b: &mut Builder<'_>, span: &Span, operation: Operation) {
    let attrs = Attrs(&span.attributes);
    let label = match operation {
        Operation::Retrieval => "observation",
        Operation::Reranker | Operation::Evaluator => "analysis",
        Operation::Guardrail => "conscience",
        Operation::Prompt => "context",
        _ => "action",
    };
    let input = b.take_json(attrs, &["input.value"]);
    let output = b.take_json(attrs, &["output.value"]);
    let content = attrs
        .str("gen_ai.retrieval.query.text")
        .or_else(|| input.as_ref().and_then(Value::as_str))
        .map_or_else(|| span.name.clone(), str::to_owned);
    b.push(At::End, label, content, (input, output), None);
}

/// The error step of a failed span: the status message (else the
/// exception's), with `error.type` and the exception event's details.
fn error_step(b: &mut Builder<'_>, span: &Span, tool: bool) {
    let attrs = Attrs(&span.attributes);
    let exception = span
        .events
        .iter()
        .rev()
        .find(|e| e.name == "exception")
        .map(|e| Attrs(&e.attributes));
    let message = span
        .status
        .as_ref()
        .map(|s| s.message.as_str())
        .filter(|m| !m.is_empty())
        .or_else(|| exception.and_then(|e| e.str("exception.message")))
        .or_else(|| attrs.str("error.type"))
        .unwrap_or("the span ended with an error")
        .to_owned();
    let mut detail = Map::new();
    for (key, value) in [
        ("error.type", attrs.str("error.type")),
        (
            "exception.type",
            exception.and_then(|e| e.str("exception.type")),
        ),
        (
            "exception.message",
            exception.and_then(|e| e.str("exception.message")),
        ),
        (
            "exception.stacktrace",
            exception.and_then(|e| e.str("exception.stacktrace")),
        ),
    ] {
        if let Some(v) = value {
            let mut cut = false;
            detail.insert(
                key.into(),
                json!(clip(v, b.limits.max_attribute_bytes, &mut cut)),
            );
        }
    }
    let tool_call = if tool { tool_call_id(attrs) } else { None };
    b.push(
        At::End,
        "error",
        message,
        (None, Some(Value::Object(detail))),
        tool_call,
    );
}

/// Attributes whose content is moved into a step's content, input or
/// output (and so not repeated in its metadata).
fn moved(key: &str, moved_prefixes: &[&str]) -> bool {
    moved_prefixes.iter().any(|p| {
        if p.ends_with('.') {
            key.starts_with(p)
        } else {
            key == *p
        }
    })
}

fn span_kind(kind: i32) -> &'static str {
    match kind {
        1 => "internal",
        2 => "server",
        3 => "client",
        4 => "producer",
        5 => "consumer",
        _ => "unspecified",
    }
}

/// Metadata: the span's identity on every step; everything not mapped
/// (attributes, resource, scope, events, links, status) on the first.
/// Every payload is fitted to the store's limit.
fn attach_metadata(b: &mut Builder<'_>, span: &Span, ctx: &Context<'_>, operation: Operation) {
    let limits = b.limits;
    let mut truncated = std::mem::take(&mut b.truncated);
    let mut base = Map::new();
    base.insert("trace_id".into(), json!(b.trace_hex));
    base.insert("span_id".into(), json!(b.span_hex));
    if !span.parent_span_id.is_empty() {
        base.insert(
            "parent_span_id".into(),
            json!(hex::encode(&span.parent_span_id)),
        );
    }
    base.insert("name".into(), json!(clip(&span.name, 1024, &mut false)));
    base.insert("operation".into(), json!(operation.as_str()));
    if let Some(t) = rfc3339(span.start_time_unix_nano) {
        base.insert("start_time".into(), json!(t));
    }
    if let Some(t) = rfc3339(span.end_time_unix_nano) {
        base.insert("end_time".into(), json!(t));
    }
    let mut full = base.clone();
    full.insert("kind".into(), json!(span_kind(span.kind)));
    if let Some(status) = &span.status
        && (status.code != 0 || !status.message.is_empty())
    {
        let code = match status.code {
            1 => "ok",
            2 => "error",
            _ => "unset",
        };
        let message = clip(&status.message, limits.max_attribute_bytes, &mut false);
        full.insert("status".into(), json!({"code": code, "message": message}));
    }
    let kept = span
        .attributes
        .iter()
        .filter(|kv| !moved(&kv.key, &b.moved));
    full.insert(
        "attributes".into(),
        attributes_json(kept, limits, "attributes", &mut truncated),
    );
    if !b.moved.is_empty() {
        full.insert("mapped_attributes".into(), json!(b.moved));
    }
    full.insert("resource".into(), ctx.resource.clone());
    truncated.extend(ctx.truncated_resource.iter().cloned());
    if let Some(scope) = ctx.scope {
        full.insert("scope".into(), scope.clone());
    }
    if !ctx.schema_url.is_empty() {
        full.insert("schema_url".into(), json!(ctx.schema_url));
    }
    if !span.trace_state.is_empty() {
        full.insert(
            "trace_state".into(),
            json!(clip(&span.trace_state, 1024, &mut false)),
        );
    }
    if !span.events.is_empty() {
        let events: Vec<Value> = span
            .events
            .iter()
            .map(|e| {
                let mut obj = Map::new();
                obj.insert("name".into(), json!(e.name));
                if let Some(t) = rfc3339(e.time_unix_nano) {
                    obj.insert("time".into(), json!(t));
                }
                if !e.attributes.is_empty() {
                    let prefix = format!("events.{}", e.name);
                    let attrs = attributes_json(&e.attributes, limits, &prefix, &mut truncated);
                    obj.insert("attributes".into(), attrs);
                }
                Value::Object(obj)
            })
            .collect();
        full.insert("events".into(), Value::Array(events));
    }
    if !span.links.is_empty() {
        let links: Vec<Value> = span
            .links
            .iter()
            .map(|l| {
                let mut obj = Map::new();
                obj.insert("trace_id".into(), json!(hex::encode(&l.trace_id)));
                obj.insert("span_id".into(), json!(hex::encode(&l.span_id)));
                if !l.attributes.is_empty() {
                    let attrs = attributes_json(&l.attributes, limits, "links", &mut truncated);
                    obj.insert("attributes".into(), attrs);
                }
                Value::Object(obj)
            })
            .collect();
        full.insert("links".into(), Value::Array(links));
    }
    let dropped = [
        ("attributes", span.dropped_attributes_count),
        ("events", span.dropped_events_count),
        ("links", span.dropped_links_count),
    ];
    if dropped.iter().any(|(_, n)| *n > 0) {
        let counts = dropped
            .iter()
            .map(|(k, n)| ((*k).into(), json!(n)))
            .collect();
        full.insert("dropped".into(), Value::Object(counts));
    }
    let max = limits.max_payload_bytes;
    for (i, s) in b.steps.iter_mut().enumerate() {
        for (field, slot) in [("input_data", &mut s.input), ("output_data", &mut s.output)] {
            if let Some(v) = slot.take() {
                *slot = Some(fit(v, max, || truncated.push(format!("step {i} {field}"))));
            }
        }
    }
    let count = b.steps.len();
    let mut full = Some(full);
    for (i, s) in b.steps.iter_mut().enumerate() {
        let mut otel = match full.take() {
            Some(full) => full,
            None => base.clone(),
        };
        otel.insert("step".into(), json!(i));
        otel.insert("steps".into(), json!(count));
        if i == 0 && !truncated.is_empty() {
            otel.insert("truncated".into(), json!(truncated));
        }
        s.metadata = fit(json!({ "otel": Value::Object(otel) }), max, || {});
    }
}

/// One session's steps in recorded order, with its agent.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionPlan {
    /// The session.
    pub session_id: String,
    /// The agent every step is written as.
    pub agent_id: String,
    /// `(index of the span in the request's mapped list, step)`, ordered.
    pub steps: Vec<(usize, MappedStep)>,
}

/// Groups mapped spans by session (sessions in order of first appearance)
/// and orders each session's steps by time (a span's opening steps at its
/// start, closing steps at its end), then span id, then position in the
/// span. The agent of a session is `bound_agent` if the API key is bound
/// to one; otherwise the agent named by the session's earliest agent span
/// (`invoke_agent`, `create_agent`, `AGENT`), else by any span of it, else
/// the resource's `service.name`, else `otel`.
pub fn plan(
    spans: Vec<Result<SpanSteps, Unmappable>>,
    bound_agent: Option<&str>,
) -> Vec<SessionPlan> {
    // Sessions in order of first appearance, with their spans.
    let mut order: Vec<(String, Vec<usize>)> = Vec::new();
    let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, s) in spans.iter().enumerate() {
        let Ok(s) = s else { continue };
        let at = *index.entry(s.session_id.as_str()).or_insert_with(|| {
            order.push((s.session_id.clone(), Vec::new()));
            order.len() - 1
        });
        order[at].1.push(i);
    }
    drop(index);
    let agents: Vec<String> = order
        .iter()
        .map(|(_, idx)| {
            if let Some(a) = bound_agent {
                return a.to_owned();
            }
            let of = |i: &usize| spans[*i].as_ref().ok();
            let named = |want_agent_span: bool| {
                idx.iter()
                    .filter_map(of)
                    .filter(|s| {
                        s.agent
                            .as_ref()
                            .is_some_and(|(_, is)| *is || !want_agent_span)
                    })
                    .min_by(|a, b| (a.start, &a.span_hex).cmp(&(b.start, &b.span_hex)))
                    .and_then(|s| s.agent.as_ref().map(|(a, _)| a.clone()))
            };
            named(true)
                .or_else(|| named(false))
                .or_else(|| idx.iter().filter_map(of).find_map(|s| s.service.clone()))
                .unwrap_or_else(|| "otel".to_owned())
        })
        .collect();
    // Move the steps out (no copies), keeping each span's id for ordering.
    let mut taken: Vec<(String, Vec<MappedStep>)> = spans
        .into_iter()
        .map(|s| match s {
            Ok(s) => (s.span_hex, s.steps),
            Err(_) => (String::new(), Vec::new()),
        })
        .collect();
    order
        .into_iter()
        .zip(agents)
        .map(|((session_id, idx), agent_id)| {
            let mut steps: Vec<(usize, MappedStep)> = Vec::new();
            for i in idx {
                steps.extend(std::mem::take(&mut taken[i].1).into_iter().map(|s| (i, s)));
            }
            steps.sort_by(|(ia, a), (ib, b)| {
                (a.at, taken[*ia].0.as_str(), a.position).cmp(&(
                    b.at,
                    taken[*ib].0.as_str(),
                    b.position,
                ))
            });
            SessionPlan {
                session_id,
                agent_id,
                steps,
            }
        })
        .collect()
}
