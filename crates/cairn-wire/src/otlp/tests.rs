//! The mapping from spans to steps, through both encodings: the GenAI
//! conventions, OpenInference, errors, limits, ordering and agents.

use super::decode_otlp;
use super::map::{MapLimits, MappedStep, SpanSteps, map_request, plan};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, KeyValue, KeyValueList, any_value::Value as V,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span};
use prost::Message as _;
use serde_json::{Value, json};

const TRACE: [u8; 16] = [0xab; 16];

pub(super) fn kv(key: &str, value: V) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..KeyValue::default()
    }
}

pub(super) fn s(key: &str, value: &str) -> KeyValue {
    kv(key, V::StringValue(value.into()))
}

pub(super) fn span(id: u8, start: u64, end: u64, attributes: Vec<KeyValue>) -> Span {
    Span {
        trace_id: TRACE.to_vec(),
        span_id: vec![id; 8],
        parent_span_id: if id == 1 { vec![] } else { vec![1; 8] },
        name: format!("span {id}"),
        kind: 3,
        start_time_unix_nano: 1_700_000_000_000_000_000 + start * 1_000_000,
        end_time_unix_nano: 1_700_000_000_000_000_000 + end * 1_000_000,
        attributes,
        ..Span::default()
    }
}

pub(super) fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    s("service.name", "support-bot"),
                    s("deployment.environment", "test"),
                ],
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..ScopeSpans::default()
            }],
            schema_url: String::new(),
        }],
    }
}

fn mapped(spans: Vec<Span>) -> Vec<SpanSteps> {
    map_request(&request(spans), &MapLimits::default())
        .into_iter()
        .map(|r| r.expect("mappable"))
        .collect()
}

fn labels(steps: &[MappedStep]) -> Vec<&str> {
    steps.iter().map(|s| s.kind_label.as_ref()).collect()
}

/// A small agent run in the GenAI conventions: an agent span, a chat with
/// reasoning and a tool call, the tool, a final chat.
fn agent_run() -> Vec<Span> {
    let conv = s("gen_ai.conversation.id", "conv 42/a");
    vec![
        span(
            2,
            10,
            20,
            vec![
                conv.clone(),
                s("gen_ai.operation.name", "chat"),
                s("gen_ai.request.model", "gpt-4o"),
                kv("gen_ai.usage.input_tokens", V::IntValue(100)),
                kv("gen_ai.usage.output_tokens", V::IntValue(20)),
                s(
                    "gen_ai.output.messages",
                    r#"[{"role":"assistant","finish_reason":"tool_call","parts":[
                        {"type":"reasoning","content":"Need the weather.\nPlan:\n1. get_weather"},
                        {"type":"tool_call","id":"call_1","name":"get_weather","arguments":{"city":"Paris"}}]}]"#,
                ),
            ],
        ),
        span(
            3,
            20,
            30,
            vec![
                conv.clone(),
                s("gen_ai.operation.name", "execute_tool"),
                s("gen_ai.tool.name", "get_weather"),
                s("gen_ai.tool.call.id", "call_1"),
                s("gen_ai.tool.call.arguments", r#"{"city":"Paris"}"#),
                s("gen_ai.tool.call.result", r#"{"forecast":"rain"}"#),
            ],
        ),
        span(
            4,
            30,
            40,
            vec![
                conv.clone(),
                s("gen_ai.operation.name", "chat"),
                s("gen_ai.response.model", "gpt-4o-2024-08-06"),
                // Structured (not JSON text) messages.
                kv(
                    "gen_ai.output.messages",
                    V::ArrayValue(ArrayValue {
                        values: vec![AnyValue {
                            value: Some(V::KvlistValue(KeyValueList {
                                values: vec![
                                    s("role", "assistant"),
                                    s("finish_reason", "stop"),
                                    kv(
                                        "parts",
                                        V::ArrayValue(ArrayValue {
                                            values: vec![AnyValue {
                                                value: Some(V::KvlistValue(KeyValueList {
                                                    values: vec![
                                                        s("type", "text"),
                                                        s("content", "Take an umbrella."),
                                                    ],
                                                })),
                                            }],
                                        }),
                                    ),
                                ],
                            })),
                        }],
                    }),
                ),
            ],
        ),
        span(
            1,
            0,
            50,
            vec![
                conv,
                s("gen_ai.operation.name", "invoke_agent"),
                s("gen_ai.agent.name", "Weather Helper"),
                s(
                    "gen_ai.input.messages",
                    r#"[{"role":"user","parts":[{"type":"text","content":"Umbrella today?"}]}]"#,
                ),
                s(
                    "gen_ai.output.messages",
                    r#"[{"role":"assistant","parts":[{"type":"text","content":"Yes: rain."}]}]"#,
                ),
            ],
        ),
    ]
}

/// An agent span whose input history is too large to parse whole (over
/// 1 MiB of JSON text) still records its last user message as the
/// observation's content, read one message at a time (it had recorded the
/// text's first 64 KiB, the history's head, and the question was lost: a
/// user review's finding).
#[test]
fn a_huge_history_keeps_its_last_question() {
    let filler = "doc ".repeat(1_250);
    let mut history: Vec<serde_json::Value> = (0..300)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "parts": [{"type": "text", "content": format!("{i} {filler}")}]})
        })
        .collect();
    history.push(json!({"role": "user", "parts": [
        {"type": "text", "content": "What is the final question?"},
        {"type": "blob", "content": "ignored"}
    ]}));
    let text = serde_json::Value::Array(history).to_string();
    assert!(text.len() > 1024 * 1024, "{}", text.len());
    let agent = span(
        1,
        0,
        50,
        vec![
            s("gen_ai.operation.name", "invoke_agent"),
            s("gen_ai.agent.name", "Historian"),
            s("gen_ai.input.messages", &text),
        ],
    );
    let spans = mapped(vec![agent]);
    let observation = &spans[0].steps[0];
    assert_eq!(observation.kind_label, "observation");
    assert_eq!(
        observation.content.as_deref(),
        Some("What is the final question?")
    );
    // The streamed reading gives what the reading of the parsed value
    // gives (a review found it silently taking an older question, reading
    // arrays by position, and giving up on one odd element).
    use crate::otlp::messages::{last_user_text, last_user_text_streamed};
    for history in [
        r#"[{"role":"user","content":"OLD"},{"role":"user","content":[{"text":"NEW q","type":"text"}]}]"#,
        r#"[{"role":"user","content":"OLD"},{"parts":[{"content":12345,"type":"text"}],"role":"user"}]"#,
        r#"[{"role":"user","content":"OLD"},{"role":"user","content":{"text":"NEW"}}]"#,
        r#"[{"role":"user","content":"NEW q"},["user",[["text","INJECTED"]],null]]"#,
        r#"[{"role":"user","content":"OLD"},{"role":"user","parts":[["text","ARRPART"]]}]"#,
        r#"[null,{"role":"user","content":"NEW q"},{"role":"assistant","parts":"weird"}]"#,
        r#"[{"role":"user","content":"NEW q"},{"role":"assistant","parts":["hi"]}]"#,
        r#"[{"role":"user","parts":[{"type":"text","content":"a"},{"type":"image","content":"b"},{"type":"text","content":"c"}]}]"#,
        r#"[{"role":{"x":1},"content":"no role"},{"role":"user","content":"asked"}]"#,
        r#"[{"role":"user","content":"asked"},{"role":"user","content":null}]"#,
        r#"[{"role":"user","parts":[{"type":"text","content":""}]}]"#,
        "[]",
    ] {
        let parsed: serde_json::Value = serde_json::from_str(history).unwrap();
        assert_eq!(
            last_user_text_streamed(history),
            last_user_text(&parsed),
            "{history}"
        );
    }
    // A member given twice, as the strict reading of a small history,
    // gives no answer (the text's head is recorded).
    assert_eq!(
        last_user_text_streamed(r#"[{"role":"user","role":"user","content":"x"}]"#),
        None
    );
    // A text that is not such an array keeps the text's head, as before.
    assert_eq!(last_user_text_streamed("[1, 2]"), None);
    assert_eq!(
        last_user_text_streamed(r#"[{"role":"user","content":"a"}] trailing"#),
        None
    );
    assert_eq!(last_user_text_streamed(r#"{"role":"user"}"#), None);
}

#[test]
fn genai_spans_become_steps() {
    let spans = mapped(agent_run());
    assert_eq!(labels(&spans[0].steps), ["thinking", "plan", "decision"]);
    assert_eq!(labels(&spans[1].steps), ["tool_call", "tool_result"]);
    assert_eq!(labels(&spans[2].steps), ["final_answer"]);
    assert_eq!(labels(&spans[3].steps), ["observation", "summary"]);

    let chat = &spans[0];
    let decision = &chat.steps[2];
    assert_eq!(decision.content.as_deref(), Some("call get_weather"));
    assert_eq!(decision.tool_call.as_deref(), Some("call_1"));
    assert_eq!(
        decision.output.as_ref().unwrap()["tool_calls"][0]["arguments"],
        json!({"city": "Paris"})
    );
    assert_eq!(decision.token_count, Some(120));
    assert_eq!(decision.duration_ms, Some(10));
    assert!(
        chat.steps
            .iter()
            .all(|s| s.model.as_deref() == Some("gpt-4o"))
    );
    assert_eq!(chat.steps[0].token_count, None, "measures on the last step");

    let tool = &spans[1].steps;
    assert_eq!(tool[0].input, Some(json!({"city": "Paris"})));
    assert_eq!(tool[1].output, Some(json!({"forecast": "rain"})));
    assert_eq!(tool[1].content.as_deref(), Some(r#"{"forecast":"rain"}"#));
    assert!(
        tool.iter()
            .all(|s| s.tool_call.as_deref() == Some("call_1"))
    );

    assert_eq!(
        spans[2].steps[0].content.as_deref(),
        Some("Take an umbrella.")
    );
    assert_eq!(
        spans[2].steps[0].model.as_deref(),
        Some("gpt-4o-2024-08-06")
    );
    let agent = &spans[3].steps;
    assert_eq!(agent[0].content.as_deref(), Some("Umbrella today?"));
    assert_eq!(agent[1].content.as_deref(), Some("Yes: rain."));

    // Ids, turn, session, agent.
    let trace = hex::encode(TRACE);
    assert_eq!(
        chat.steps[1].step_id,
        format!("otel.{trace}.0202020202020202.1")
    );
    assert!(chat.steps.iter().all(|s| s.turn_id == trace));
    assert!(
        spans[0].session_id.starts_with("conv-42-a~"),
        "{}",
        spans[0].session_id
    );
    let (agent_id, is_agent_span) = spans[3].agent.clone().unwrap();
    assert!(
        agent_id.starts_with("Weather-Helper~") && is_agent_span,
        "{agent_id}"
    );
    assert_eq!(spans[0].service.as_deref(), Some("support-bot"));
}

#[test]
fn metadata_keeps_what_is_not_mapped() {
    let spans = mapped(agent_run());
    let first = &spans[0].steps[0].metadata["otel"];
    assert_eq!(first["span_id"], "0202020202020202");
    assert_eq!(first["parent_span_id"], "0101010101010101");
    assert_eq!(first["operation"], "chat");
    assert_eq!(first["kind"], "client");
    assert_eq!(first["start_time"], "2023-11-14T22:13:20.010000Z");
    assert_eq!(first["end_time"], "2023-11-14T22:13:20.020000Z");
    assert_eq!(first["attributes"]["gen_ai.request.model"], "gpt-4o");
    assert_eq!(first["attributes"]["gen_ai.usage.input_tokens"], 100);
    assert!(
        first["attributes"].get("gen_ai.output.messages").is_none(),
        "moved to the steps"
    );
    assert_eq!(
        first["mapped_attributes"],
        json!(["gen_ai.output.messages"])
    );
    assert_eq!(first["resource"]["service.name"], "support-bot");
    assert_eq!(first["resource"]["deployment.environment"], "test");
    assert_eq!(first["step"], 0);
    assert_eq!(first["steps"], 3);
    // Later steps carry the span's identity only.
    let later = &spans[0].steps[1].metadata["otel"];
    assert_eq!(later["span_id"], "0202020202020202");
    assert!(later.get("attributes").is_none() && later.get("resource").is_none());
    assert_eq!(later["step"], 1);
}

#[test]
fn plan_orders_by_time_and_picks_the_agent() {
    let mut spans = agent_run();
    spans.reverse();
    let mapped: Vec<_> = map_request(&request(spans), &MapLimits::default());
    let plans = plan(mapped.clone(), None);
    assert_eq!(plans.len(), 1);
    let p = &plans[0];
    assert!(p.agent_id.starts_with("Weather-Helper~"));
    let order: Vec<&str> = p.steps.iter().map(|(_, s)| s.kind_label.as_ref()).collect();
    assert_eq!(
        order,
        [
            "observation",
            "thinking",
            "plan",
            "decision",
            "tool_call",
            "tool_result",
            "final_answer",
            "summary"
        ]
    );
    // A key bound to an agent writes as that agent.
    assert_eq!(plan(mapped, Some("bound")).remove(0).agent_id, "bound");
    // Without an agent span: the service.
    let no_agent: Vec<_> = map_request(&request(agent_run()[..3].to_vec()), &MapLimits::default());
    assert_eq!(plan(no_agent, None)[0].agent_id, "support-bot");
    // The service name an SDK makes up when none was set names no agent.
    for made_up in ["unknown_service", "unknown_service:python"] {
        let mut unnamed = request(agent_run()[..3].to_vec());
        unnamed.resource_spans[0]
            .resource
            .as_mut()
            .unwrap()
            .attributes[0] = s("service.name", made_up);
        let spans = map_request(&unnamed, &MapLimits::default());
        assert_eq!(plan(spans, None)[0].agent_id, "otel", "{made_up}");
    }
}

#[test]
fn sessions_fall_back_to_session_id_then_the_trace() {
    // A span of another trace, which names no session.
    let mut alone = span(2, 0, 1, vec![]);
    alone.trace_id = vec![0xcd; 16];
    alone.parent_span_id = vec![];
    let spans = mapped(vec![
        span(1, 0, 1, vec![s("session.id", "oi-session")]),
        alone,
    ]);
    assert_eq!(spans[0].session_id, "oi-session");
    assert_eq!(spans[1].session_id, hex::encode([0xcd; 16]));
    assert_eq!(labels(&spans[1].steps), ["action"]);
    assert_eq!(spans[1].steps[0].content.as_deref(), Some("span 2"));
    // An integer id is its digits (first the conversation's, over a
    // session.id string), lent to a child as a string's is; an empty
    // string or a boolean names none.
    let spans = mapped(vec![
        span(
            1,
            0,
            1,
            vec![
                kv("gen_ai.conversation.id", V::IntValue(42)),
                s("session.id", "other"),
            ],
        ),
        span(2, 1, 1, vec![]),
        span(
            3,
            0,
            1,
            vec![
                s("gen_ai.conversation.id", ""),
                kv("session.id", V::IntValue(-7)),
            ],
        ),
        span(
            4,
            0,
            1,
            vec![
                kv("gen_ai.conversation.id", V::BoolValue(true)),
                s("session.id", "s"),
            ],
        ),
    ]);
    let sessions: Vec<_> = spans.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(sessions, ["42", "42", "-7", "s"]);
}

#[test]
fn openinference_spans() {
    let spans = mapped(vec![
        span(
            2,
            0,
            5,
            vec![
                s("openinference.span.kind", "LLM"),
                s("llm.model_name", "claude-sonnet"),
                kv("llm.token_count.prompt", V::IntValue(30)),
                kv("llm.token_count.completion", V::IntValue(12)),
                s("llm.input_messages.0.message.role", "user"),
                s("llm.input_messages.0.message.content", "Add 2 and 3"),
                s("llm.output_messages.0.message.role", "assistant"),
                s(
                    "llm.output_messages.0.message.contents.0.message_content.type",
                    "reasoning",
                ),
                s(
                    "llm.output_messages.0.message.contents.0.message_content.text",
                    "Simple sum.",
                ),
                s(
                    "llm.output_messages.0.message.tool_calls.0.tool_call.id",
                    "t1",
                ),
                s(
                    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
                    "add",
                ),
                s(
                    "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments",
                    r#"{"a":2,"b":3}"#,
                ),
            ],
        ),
        span(
            3,
            5,
            6,
            vec![
                s("openinference.span.kind", "TOOL"),
                s("tool.name", "add"),
                s("input.value", r#"{"a":2,"b":3}"#),
                s("output.value", "5"),
            ],
        ),
        span(4, 6, 7, vec![s("openinference.span.kind", "GUARDRAIL")]),
        span(
            5,
            7,
            8,
            vec![
                s("openinference.span.kind", "RETRIEVER"),
                s("input.value", "umbrella policy"),
            ],
        ),
        span(6, 8, 9, vec![s("openinference.span.kind", "chain")]),
        span(
            7,
            0,
            9,
            vec![
                s("openinference.span.kind", "AGENT"),
                s("agent.name", "calc"),
                s("output.value", "5"),
            ],
        ),
    ]);
    assert_eq!(labels(&spans[0].steps), ["thinking", "decision"]);
    assert_eq!(
        spans[0].steps[0].input.as_ref().unwrap()[0]["content"],
        "Add 2 and 3"
    );
    assert_eq!(spans[0].steps[1].token_count, Some(42));
    assert_eq!(spans[0].steps[1].model.as_deref(), Some("claude-sonnet"));
    assert_eq!(
        spans[0].steps[1].output.as_ref().unwrap()["tool_calls"][0]["arguments"],
        json!({"a": 2, "b": 3})
    );
    assert_eq!(labels(&spans[1].steps), ["tool_call", "tool_result"]);
    assert_eq!(spans[1].steps[1].output, Some(json!("5")));
    assert_eq!(labels(&spans[2].steps), ["conscience"]);
    assert_eq!(labels(&spans[3].steps), ["observation"]);
    assert_eq!(
        spans[3].steps[0].content.as_deref(),
        Some("umbrella policy")
    );
    assert_eq!(labels(&spans[4].steps), ["action"]);
    assert_eq!(labels(&spans[5].steps), ["observation", "summary"]);
    assert_eq!(spans[5].agent, Some(("calc".to_owned(), true)));
}

#[test]
fn errors_become_error_steps() {
    let mut tool = span(
        2,
        0,
        3,
        vec![
            s("gen_ai.operation.name", "execute_tool"),
            s("gen_ai.tool.name", "fetch"),
            s("gen_ai.tool.call.id", "c9"),
            s("error.type", "TimeoutError"),
        ],
    );
    tool.status = Some(Status {
        code: 2,
        message: "timed out".into(),
    });
    tool.events.push(span::Event {
        time_unix_nano: tool.end_time_unix_nano,
        name: "exception".into(),
        attributes: vec![
            s("exception.type", "TimeoutError"),
            s("exception.message", "read timed out"),
            s("exception.stacktrace", "Traceback ..."),
        ],
        dropped_attributes_count: 0,
    });
    let mut chat = span(
        3,
        3,
        4,
        vec![
            s("gen_ai.operation.name", "chat"),
            s("gen_ai.input.messages", "[]"),
        ],
    );
    chat.status = Some(Status {
        code: 2,
        message: String::new(),
    });
    let spans = mapped(vec![tool, chat]);
    assert_eq!(labels(&spans[0].steps), ["tool_call", "error"]);
    let error = &spans[0].steps[1];
    assert_eq!(error.content.as_deref(), Some("timed out"));
    assert_eq!(error.tool_call.as_deref(), Some("c9"));
    assert_eq!(
        error.output.as_ref().unwrap()["exception.stacktrace"],
        "Traceback ..."
    );
    assert_eq!(
        spans[0].steps[0].metadata["otel"]["status"]["code"],
        "error"
    );
    assert_eq!(
        spans[0].steps[0].metadata["otel"]["events"][0]["name"],
        "exception"
    );
    // A failed model call keeps its input and says what failed.
    assert_eq!(labels(&spans[1].steps), ["reasoning", "error"]);
    assert_eq!(
        spans[1].steps[1].content.as_deref(),
        Some("the span ended with an error")
    );
}

/// A kind or status code the enums do not define is kept as the number
/// sent, not read as `unspecified` or `unset`; the defined ones by name.
#[test]
fn undefined_enum_values_are_kept_as_sent() {
    let mut odd = span(2, 0, 1, vec![s("gen_ai.operation.name", "chat")]);
    odd.kind = 7;
    odd.status = Some(Status {
        code: 9,
        message: "odd".into(),
    });
    let mut plain = span(2, 0, 2, vec![s("gen_ai.operation.name", "chat")]);
    plain.kind = 3;
    plain.status = Some(Status {
        code: 0,
        message: "note".into(),
    });
    let spans = mapped(vec![odd, plain]);
    let otel = |i: usize| spans[i].steps[0].metadata["otel"].clone();
    assert_eq!(otel(0)["kind"], 7);
    assert_eq!(otel(0)["status"]["code"], 9);
    assert_eq!(otel(1)["kind"], "client");
    assert_eq!(otel(1)["status"]["code"], "unset");
}

#[test]
fn think_tags_and_legacy_events() {
    let mut chat = span(
        2,
        0,
        1,
        vec![
            s("gen_ai.operation.name", "chat"),
            s(
                "gen_ai.completion.0.content",
                "<think>Check the units.</think>42 km",
            ),
        ],
    );
    let mut choice = span(3, 1, 2, vec![s("gen_ai.operation.name", "chat")]);
    choice.events.push(span::Event {
        time_unix_nano: 0,
        name: "gen_ai.choice".into(),
        attributes: vec![
            s("finish_reason", "stop"),
            s("message", r#"{"role":"assistant","content":"Done."}"#),
        ],
        dropped_attributes_count: 0,
    });
    chat.attributes.push(s("gen_ai.system", "openai"));
    let spans = mapped(vec![chat, choice]);
    assert_eq!(labels(&spans[0].steps), ["thinking", "final_answer"]);
    assert_eq!(spans[0].steps[1].content.as_deref(), Some("42 km"));
    assert_eq!(labels(&spans[1].steps), ["final_answer"]);
    assert_eq!(
        spans[1].steps[0].output,
        Some(json!({"finish_reason": "stop"}))
    );
}

#[test]
fn content_capture_off_still_records_the_call() {
    let spans = mapped(vec![span(
        2,
        0,
        1,
        vec![
            s("gen_ai.operation.name", "chat"),
            s("gen_ai.request.model", "m"),
        ],
    )]);
    assert_eq!(labels(&spans[0].steps), ["reasoning"]);
    assert_eq!(spans[0].steps[0].content.as_deref(), Some("span 2"));
}

/// A chat span whose reasoning text has one paragraph after another.
pub(super) fn reasoning_span(id: u8, paragraphs: usize) -> Span {
    let messages = json!([{"role": "assistant", "parts": [
        {"type": "reasoning", "content": "a thought\n\n".repeat(paragraphs)}
    ]}]);
    span(
        id,
        0,
        1,
        vec![
            s("gen_ai.operation.name", "chat"),
            s("gen_ai.output.messages", &messages.to_string()),
        ],
    )
}

mod limits_and_ids;

/// A gzip-compressed body sent without `Content-Encoding` is refused as
/// such, in both encodings, rather than as a malformed message.
#[test]
fn a_compressed_body_without_its_header_is_named() {
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(br#"{"resourceSpans":[]}"#).unwrap();
    let body = gz.finish().unwrap();
    for content_type in ["application/json", "application/x-protobuf"] {
        let error = decode_otlp(content_type, &body).unwrap_err().to_string();
        assert!(
            error.contains("Content-Encoding: gzip"),
            "{content_type}: {error}"
        );
    }
}

/// Spans that name no session take the one their nearest ancestor in the
/// request names (an agent span carrying the conversation id, its model
/// and tool calls not), else the one their trace's spans name; a trace
/// whose spans name two sessions lends neither; a span of a trace that
/// names none keeps the trace id.
#[test]
fn spans_without_a_session_take_their_traces() {
    let strip = |mut spans: Vec<Span>| {
        for span in &mut spans[..3] {
            span.attributes
                .retain(|kv| kv.key != "gen_ai.conversation.id");
        }
        spans
    };
    // Only the agent span (id 1, everyone's parent) names it.
    let spans = mapped(strip(agent_run()));
    let expected = crate::otlp::id_from("conv 42/a");
    assert!(
        spans.iter().all(|s| s.session_id == expected),
        "{:?}",
        spans.iter().map(|s| &s.session_id).collect::<Vec<_>>()
    );
    // A grandchild whose parent names nothing finds the grandparent.
    let mut deep = strip(agent_run());
    deep[2].parent_span_id = vec![3; 8];
    assert!(mapped(deep).iter().all(|s| s.session_id == expected));
    // Not an ancestor, but the trace's one session.
    let mut sibling = strip(agent_run());
    sibling[3]
        .attributes
        .retain(|kv| kv.key != "gen_ai.conversation.id");
    sibling[1].attributes.push(s("session.id", "only-one"));
    assert!(mapped(sibling).iter().all(|s| s.session_id == "only-one"));
    // Two sessions in the trace: the spans that name none keep the trace id.
    let mut two = strip(agent_run());
    two[3]
        .attributes
        .retain(|kv| kv.key != "gen_ai.conversation.id");
    two[1].attributes.push(s("session.id", "one"));
    two[2].attributes.push(s("session.id", "two"));
    let sessions: Vec<String> = mapped(two).into_iter().map(|s| s.session_id).collect();
    let trace = hex::encode(TRACE);
    assert_eq!(sessions, [trace.clone(), "one".into(), "two".into(), trace]);
}

/// Where each span's session came from: named (by itself, an ancestor
/// or its trace's one session), or the trace id standing in, settled
/// only when the request holds the trace's root span or its trace names
/// several sessions (a later export could name it otherwise).
#[test]
fn a_session_stood_in_by_the_trace_says_whether_the_request_settles_it() {
    use super::map::SessionSource::{Named, TraceId};
    let sources = |spans: Vec<Span>| -> Vec<_> {
        mapped(spans)
            .into_iter()
            .map(|s| s.session_source)
            .collect()
    };
    // Children of an agent span not yet exported: nothing settles them.
    let children = vec![span(2, 0, 1, vec![]), span(3, 1, 2, vec![])];
    let open = TraceId { settled: false };
    assert_eq!(sources(children.clone()), [open, open]);
    // With the root span (no parent) naming nothing: settled.
    let mut with_root = children.clone();
    with_root.push(span(1, 0, 3, vec![]));
    let settled = TraceId { settled: true };
    assert_eq!(sources(with_root), [settled, settled, settled]);
    // A child naming the session lends it to its trace-mates.
    let mut named = children.clone();
    named[1].attributes.push(s("session.id", "conv"));
    assert_eq!(sources(named), [Named, Named]);
    // Two sessions named in the trace: the others stay the trace's, settled.
    let mut two = children;
    two[0].attributes.push(s("session.id", "one"));
    two[1].attributes.push(s("session.id", "two"));
    two.push(span(4, 2, 3, vec![]));
    assert_eq!(sources(two), [Named, Named, settled]);
}

/// OpenLLMetry (Traceloop) writes a model call as `llm.request.type`,
/// flattened prompts and completions with their tool calls, and the
/// conventions' older token names; older GenAI instrumentations put the
/// prompt in message events. Each maps as a GenAI chat span does.
#[test]
fn openllmetry_and_event_prompts_map_as_chat_spans() {
    let traceloop = span(
        2,
        0,
        5,
        vec![
            s("llm.request.type", "chat"),
            s("gen_ai.system", "openai"),
            s("gen_ai.request.model", "gpt-4o"),
            s("gen_ai.prompt.0.role", "system"),
            s("gen_ai.prompt.0.content", "You are terse."),
            s("gen_ai.prompt.1.role", "user"),
            s("gen_ai.prompt.1.content", "Weather in Paris?"),
            s("gen_ai.completion.0.role", "assistant"),
            s("gen_ai.completion.0.finish_reason", "tool_calls"),
            s("gen_ai.completion.0.tool_calls.0.id", "call_9"),
            s("gen_ai.completion.0.tool_calls.0.name", "get_weather"),
            s(
                "gen_ai.completion.0.tool_calls.0.arguments",
                r#"{"city":"Paris"}"#,
            ),
            kv("gen_ai.usage.prompt_tokens", V::IntValue(30)),
            kv("gen_ai.usage.completion_tokens", V::IntValue(7)),
        ],
    );
    let mut evented = span(
        3,
        5,
        9,
        vec![
            s("gen_ai.operation.name", "chat"),
            s("gen_ai.completion.0.content", "Take an umbrella."),
        ],
    );
    evented.events = vec![opentelemetry_proto::tonic::trace::v1::span::Event {
        name: "gen_ai.user.message".into(),
        attributes: vec![s("content", "Umbrella today?")],
        ..Default::default()
    }];
    let spans = mapped(vec![traceloop, evented]);
    let call = &spans[0].steps;
    assert_eq!(labels(call), ["decision"]);
    assert_eq!(call[0].content.as_deref(), Some("call get_weather"));
    assert_eq!(call[0].tool_call.as_deref(), Some("call_9"));
    assert_eq!(
        call[0].output.as_ref().unwrap()["tool_calls"][0]["arguments"],
        json!({"city": "Paris"})
    );
    assert_eq!(
        call[0].input,
        Some(json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Weather in Paris?"}
        ]))
    );
    assert_eq!(call[0].token_count, Some(37));
    assert!(
        call[0].metadata["otel"]["attributes"]
            .get("gen_ai.prompt.1.content")
            .is_none(),
        "moved, not repeated: {}",
        call[0].metadata
    );
    let answer = &spans[1].steps;
    assert_eq!(labels(answer), ["final_answer"]);
    assert_eq!(
        answer[0].input,
        Some(json!([{"role": "user", "content": "Umbrella today?"}]))
    );
}

/// A span whose session comes from its resource lends it to its children
/// in the request, even under another resource (a Collector batching two
/// services of one trace).
#[test]
fn a_resource_session_is_lent_to_children_under_other_resources() {
    let mut request = request(vec![span(1, 0, 9, vec![])]);
    request.resource_spans[0]
        .resource
        .as_mut()
        .unwrap()
        .attributes
        .push(s("session.id", "from-resource"));
    let mut other = request.resource_spans[0].clone();
    other.resource = Some(Resource {
        attributes: vec![s("service.name", "tools")],
        ..Resource::default()
    });
    other.scope_spans[0].spans = vec![span(2, 1, 2, vec![])];
    request.resource_spans.push(other);
    let sessions: Vec<String> = map_request(&request, &MapLimits::default())
        .into_iter()
        .map(|r| r.unwrap().session_id)
        .collect();
    assert_eq!(sessions, ["from-resource", "from-resource"]);
}

/// A retriever's documents (OpenInference's flattened
/// `retrieval.documents.<i>.document.*`) are its step's output, each an
/// object of its fields, and are not repeated in metadata.
#[test]
fn retrieved_documents_are_the_output() {
    let spans = mapped(vec![span(
        2,
        0,
        3,
        vec![
            s("openinference.span.kind", "RETRIEVER"),
            s("input.value", "umbrella policy"),
            s("retrieval.documents.0.document.id", "doc-1"),
            s(
                "retrieval.documents.0.document.content",
                "Bring one when rain is likely.",
            ),
            kv("retrieval.documents.0.document.score", V::DoubleValue(0.9)),
            s("retrieval.documents.1.document.id", "doc-2"),
            s(
                "retrieval.documents.1.document.content",
                "Umbrellas are on floor 2.",
            ),
        ],
    )]);
    let step = &spans[0].steps[0];
    assert_eq!(labels(&spans[0].steps), ["observation"]);
    assert_eq!(step.content.as_deref(), Some("umbrella policy"));
    assert_eq!(
        step.output,
        Some(json!({"documents": [
            {"id": "doc-1", "content": "Bring one when rain is likely.", "score": 0.9},
            {"id": "doc-2", "content": "Umbrellas are on floor 2."}
        ]}))
    );
    assert!(
        step.metadata["otel"]["attributes"]
            .get("retrieval.documents.0.document.content")
            .is_none(),
        "{}",
        step.metadata
    );
}

/// Flattened keys that are not `<index>.<field>` with a plain index (a
/// leading zero, a sign, past u32, no field) are not read and stay in the
/// metadata; two fields of one document that would read as one name keep
/// their own names: nothing sent is lost.
#[test]
fn flattened_keys_not_read_stay_in_metadata() {
    let spans = mapped(vec![span(
        2,
        0,
        3,
        vec![
            s("openinference.span.kind", "RETRIEVER"),
            s("retrieval.documents.0.document.id", "doc-0"),
            s("retrieval.documents.00.document.id", "doc-00"),
            s("retrieval.documents.-1.document.id", "doc-minus"),
            s("retrieval.documents.4294967296.document.id", "doc-big"),
            s("retrieval.documents.0", "no field"),
            s("retrieval.documents.1.id", "short"),
            s("retrieval.documents.1.document.id", "long"),
        ],
    )]);
    let step = &spans[0].steps[0];
    assert_eq!(
        step.output,
        Some(json!({"documents": [
            {"id": "doc-0"},
            {"id": "short", "document.id": "long"}
        ]}))
    );
    let kept = &step.metadata["otel"]["attributes"];
    for key in [
        "retrieval.documents.00.document.id",
        "retrieval.documents.-1.document.id",
        "retrieval.documents.4294967296.document.id",
        "retrieval.documents.0",
    ] {
        assert!(kept.get(key).is_some(), "{key}: {kept}");
    }
    assert!(
        kept.get("retrieval.documents.0.document.id").is_none(),
        "{kept}"
    );
}
