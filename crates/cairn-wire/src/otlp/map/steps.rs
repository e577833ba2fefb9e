//! The steps each kind of span becomes: an agent's request and answer, a
//! model call's reasoning and decision or final answer, a tool's call and
//! result, one step for any other span, and the error step of a failed
//! span. Apart from `map.rs`, which reads a span's identity and session
//! and dispatches on its operation, because this is the table of
//! `docs/OTLP.md` kind by kind.

use super::{At, Builder, Operation};
use crate::otlp::attrs::{Attrs, clip};
use crate::otlp::messages::{
    Part, last_user_text, last_user_text_streamed, legacy_input, output_messages,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{Map, Value, json};

/// `invoke_agent` / `AGENT`: an observation of the request at the start,
/// and a summary of the answer at the end if recorded. `create_agent`:
/// context.
pub(super) fn agent_steps(b: &mut Builder<'_>, span: &Span, operation: Operation) {
    let attrs = Attrs(&span.attributes);
    let input = b.take_json(attrs, &["gen_ai.input.messages", "input.value"]);
    let content = input
        .as_ref()
        .and_then(|i| {
            last_user_text(i)
                // A history too large to parse whole stays its text: its
                // last user message is read from it one message at a time
                // rather than the text's head taken for the question.
                .or_else(|| i.as_str().and_then(last_user_text_streamed))
                .or_else(|| i.as_str().map(str::to_owned))
        })
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

pub(super) fn chat_model(attrs: Attrs<'_>) -> Option<String> {
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

pub(super) fn chat_tokens(attrs: Attrs<'_>) -> Option<u64> {
    let sum = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    };
    sum(
        attrs.int("gen_ai.usage.input_tokens"),
        attrs.int("gen_ai.usage.output_tokens"),
    )
    // The conventions' older names, which OpenLLMetry still writes.
    .or_else(|| {
        sum(
            attrs.int("gen_ai.usage.prompt_tokens"),
            attrs.int("gen_ai.usage.completion_tokens"),
        )
    })
    .or_else(|| attrs.int("llm.usage.total_tokens"))
    .or_else(|| attrs.int("llm.token_count.total"))
    .or_else(|| {
        sum(
            attrs.int("llm.token_count.prompt"),
            attrs.int("llm.token_count.completion"),
        )
    })
    .and_then(|t| u64::try_from(t).ok())
    // A step's integers must be read exactly by a verifier (FORMAT.md
    // 2.2); a larger count is left in the span's attributes, kept in
    // metadata.
    .filter(|t| *t <= cairn_core::record::MAX_SAFE_INTEGER)
}

/// A model call: reasoning parts through `parseThinking`, then a decision
/// (tool calls) or the final answer (text), per output message.
pub(super) fn chat_steps(b: &mut Builder<'_>, span: &Span, failed: bool) {
    let attrs = Attrs(&span.attributes);
    let mut input = b.take_json(attrs, &["gen_ai.input.messages"]);
    if input.is_none() {
        // `message.role` and `message.content` read as the GenAI
        // messages' `role` and `content`.
        input = b
            .take_flattened(attrs, "llm.input_messages.", "message.")
            .map(Value::Array);
    }
    if input.is_none() {
        input = b.take_json(attrs, &["input.value"]);
    }
    if input.is_none()
        && let Some((messages, source)) = legacy_input(span, b.limits)
    {
        b.moved.extend(source);
        input = Some(messages);
    }
    let (messages, source) = output_messages(span, b.limits);
    b.moved.extend(source);
    for m in &messages {
        for p in &m.parts {
            if let Part::Reasoning(text) = p {
                // Parsed no further than the span may go: a text of a
                // million paragraphs costs no more than its room.
                let room = b.room.saturating_sub(b.steps.len());
                let Ok(parsed) = cairn_core::thinking::parse_thinking_at_most(text, room) else {
                    b.over = true;
                    return;
                };
                for parsed in parsed {
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
            let mut output = json!({"tool_calls": calls});
            if let Some(reason) = &m.finish_reason {
                output["finish_reason"] = json!(reason);
            }
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
pub(super) fn tool_steps(b: &mut Builder<'_>, span: &Span, failed: bool) {
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
pub(super) fn other_step(b: &mut Builder<'_>, span: &Span, operation: Operation) {
    let attrs = Attrs(&span.attributes);
    let label = match operation {
        Operation::Retrieval => "observation",
        Operation::Reranker | Operation::Evaluator => "analysis",
        Operation::Guardrail => "conscience",
        Operation::Prompt => "context",
        _ => "action",
    };
    let input = b.take_json(attrs, &["input.value"]);
    let mut output = b.take_json(attrs, &["output.value"]);
    // A retriever's documents: the GenAI attribute, else OpenInference's
    // flattened `retrieval.documents.<i>.document.*` (id, content,
    // score, metadata), each document an object of its fields.
    if operation == Operation::Retrieval && output.is_none() {
        output = b.take_json(attrs, &["gen_ai.retrieval.documents"]);
        if output.is_none() {
            output = b
                .take_flattened(attrs, "retrieval.documents.", "document.")
                .map(|documents| json!({ "documents": documents }));
        }
    }
    let content = attrs
        .str("gen_ai.retrieval.query.text")
        .or_else(|| input.as_ref().and_then(Value::as_str))
        .map_or_else(|| span.name.clone(), str::to_owned);
    b.push(At::End, label, content, (input, output), None);
}

/// The error step of a failed span: the status message (else the
/// exception's), with `error.type` and the exception event's details.
pub(super) fn error_step(b: &mut Builder<'_>, span: &Span, tool: bool) {
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
