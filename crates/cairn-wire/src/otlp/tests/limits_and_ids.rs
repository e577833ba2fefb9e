//! The mapping's limits: values made safe for the store, oversized
//! payloads cut, spans without ids refused, bounded steps per request,
//! JSON text attributes, and ids a path can name.

use super::*;

#[test]
fn values_are_made_safe_for_the_store() {
    let mut deep = AnyValue {
        value: Some(V::StringValue("bottom".into())),
    };
    for _ in 0..60 {
        deep = AnyValue {
            value: Some(V::ArrayValue(ArrayValue { values: vec![deep] })),
        };
    }
    let limits = MapLimits {
        max_attribute_bytes: 64,
        ..MapLimits::default()
    };
    let spans: Vec<_> = map_request(
        &request(vec![span(
            2,
            0,
            1,
            vec![
                kv("big", V::IntValue(i64::MAX)),
                kv("nan", V::DoubleValue(f64::NAN)),
                kv("bytes", V::BytesValue(vec![1, 2, 3])),
                kv("deep", deep.value.unwrap()),
                s("long", &"x".repeat(1000)),
                s(
                    "gen_ai.tool.call.arguments",
                    &format!("{{\"n\": {}}}", u64::MAX),
                ),
                s("gen_ai.operation.name", "execute_tool"),
            ],
        )]),
        &limits,
    )
    .into_iter()
    .map(Result::unwrap)
    .collect();
    let step = &spans[0].steps[0];
    let attrs = &step.metadata["otel"]["attributes"];
    assert_eq!(attrs["big"], json!(i64::MAX.to_string()));
    assert_eq!(attrs["nan"], "NaN");
    assert_eq!(attrs["bytes"], json!({"base64": "AQID"}));
    assert!(attrs["long"].as_str().unwrap().len() <= 64);
    assert!(
        attrs["long"]
            .as_str()
            .unwrap()
            .contains("truncated: 1000 bytes")
    );
    assert_eq!(
        step.metadata["otel"]["truncated"],
        json!(["attributes.long"])
    );
    assert_eq!(step.input, Some(json!({"n": u64::MAX.to_string()})));
    // Every step is acceptable to the store's own validation.
    for s in &spans[0].steps {
        let mut core = cairn_core::record::Step::new(
            s.step_id.clone(),
            "acme",
            "agent",
            "session",
            0,
            &s.kind_label,
            cairn_core::Timestamp::default(),
        )
        .unwrap();
        core.metadata = Some(s.metadata.clone());
        core.input = s.input.clone();
        core.output = s.output.clone();
        core.validate(&cairn_core::record::Limits::default())
            .unwrap();
    }
}

#[test]
fn oversized_payloads_are_cut_with_a_marker() {
    let limits = MapLimits {
        max_payload_bytes: 4096,
        max_content_bytes: 100,
        ..MapLimits::default()
    };
    let huge: Vec<Value> = (0..2000).map(|i| json!({"i": i})).collect();
    let spans: Vec<_> = map_request(
        &request(vec![span(
            2,
            0,
            1,
            vec![
                s("gen_ai.operation.name", "execute_tool"),
                s("gen_ai.tool.name", &"n".repeat(300)),
                s("gen_ai.tool.call.result", &Value::Array(huge).to_string()),
            ],
        )]),
        &limits,
    )
    .into_iter()
    .map(Result::unwrap)
    .collect();
    let steps = &spans[0].steps;
    assert!(steps[0].content.as_ref().unwrap().len() <= 100);
    let out = steps[1].output.as_ref().unwrap();
    assert_eq!(out["cairn.truncated"], true);
    assert!(out["original_bytes"].as_u64().unwrap() > 4096);
    let truncated = &steps[0].metadata["otel"]["truncated"];
    assert!(
        truncated
            .as_array()
            .unwrap()
            .contains(&json!("step 1 output_data")),
        "{truncated}"
    );
}

#[test]
fn spans_without_ids_are_refused_with_a_reason() {
    let mut bad = span(2, 0, 1, vec![]);
    bad.trace_id = vec![1, 2, 3];
    let mut zero = span(3, 0, 1, vec![]);
    zero.span_id = vec![0; 8];
    let out = map_request(
        &request(vec![bad, zero, span(4, 0, 1, vec![])]),
        &MapLimits::default(),
    );
    assert!(
        out[0]
            .as_ref()
            .unwrap_err()
            .reason
            .contains("trace id must be 16 bytes")
    );
    assert!(
        out[1]
            .as_ref()
            .unwrap_err()
            .reason
            .contains("span id must be 8 bytes")
    );
    assert!(out[2].is_ok());
    assert_eq!(plan(out, None)[0].steps.len(), 1);
}

/// Limits in which only the step budget binds (tiny steps count as
/// memory too: 65,536 of them pass the default step data budget).
fn steps_only() -> MapLimits {
    MapLimits {
        max_request_step_bytes: usize::MAX,
        ..MapLimits::default()
    }
}

/// One request maps to at most `MAX_STEPS_PER_REQUEST` steps: the span
/// that would pass it is refused with a reason (its reasoning parsed no
/// further than the room left), the spans before it keep their steps, and
/// a later span that fits is still mapped.
#[test]
fn a_request_maps_to_a_bounded_number_of_steps() {
    use super::super::map::MAX_STEPS_PER_REQUEST;
    let first = MAX_STEPS_PER_REQUEST - 10;
    let out = map_request(
        &request(vec![
            reasoning_span(2, first),
            reasoning_span(3, 100),
            span(4, 0, 1, vec![]),
        ]),
        &steps_only(),
    );
    let kept = out[0].as_ref().expect("the first span fits").steps.len();
    assert!(kept >= first && kept <= MAX_STEPS_PER_REQUEST, "{kept}");
    let refused = out[1].as_ref().expect_err("the second does not");
    assert!(
        refused.reason.contains("export smaller batches"),
        "{}",
        refused.reason
    );
    assert_eq!(out[2].as_ref().expect("the third fits").steps.len(), 1);
    let total: usize = plan(out, None).iter().map(|p| p.steps.len()).sum();
    assert!(total <= MAX_STEPS_PER_REQUEST);
}

/// The budget's edge: a request of exactly `MAX_STEPS_PER_REQUEST` steps is
/// mapped whole; one step more is refused.
#[test]
fn the_step_budget_is_exact() {
    use super::super::map::MAX_STEPS_PER_REQUEST;
    // What a reasoning span adds beyond one step per paragraph.
    let overhead = mapped(vec![reasoning_span(2, 3)])[0].steps.len() - 3;
    let exact = reasoning_span(2, MAX_STEPS_PER_REQUEST - overhead);
    let out = map_request(&request(vec![exact.clone()]), &steps_only());
    assert_eq!(out[0].as_ref().unwrap().steps.len(), MAX_STEPS_PER_REQUEST);
    let out = map_request(&request(vec![exact, span(3, 0, 1, vec![])]), &steps_only());
    assert!(out[0].is_ok() && out[1].is_err());
    let over = reasoning_span(2, MAX_STEPS_PER_REQUEST - overhead + 1);
    assert!(map_request(&request(vec![over]), &steps_only())[0].is_err());
}

/// The same request in protobuf and in OTLP/JSON maps to the same steps.
#[test]
fn both_encodings_map_alike() {
    let req = request(agent_run());
    let from_proto = decode_otlp("application/x-protobuf", &req.encode_to_vec()).unwrap();
    let as_json = serde_json::to_vec(&req).unwrap();
    let from_json = decode_otlp("application/json", &as_json).unwrap();
    assert_eq!(from_proto, from_json);
    assert_eq!(
        map_request(&from_proto, &MapLimits::default()),
        map_request(&req, &MapLimits::default())
    );
    // Hex ids in the JSON, and 64-bit times as strings.
    let text = String::from_utf8(as_json).unwrap();
    assert!(text.contains(&hex::encode(TRACE)));
    assert!(text.contains("\"startTimeUnixNano\":\"1700000000010000000\""));
    let _ = super::super::json::decode_request(b"{}").unwrap();
}

#[test]
fn large_json_text_stays_text_and_tiny_limits_hold() {
    // 2 MiB of JSON text in a result: not parsed (it would take several
    // times that in memory), cut to the payload limit's marker.
    let big = format!("[{}]", vec!["{}"; 700_000].join(","));
    let spans = mapped(vec![span(
        2,
        0,
        1,
        vec![
            s("gen_ai.operation.name", "execute_tool"),
            s("gen_ai.tool.call.result", &big),
        ],
    )]);
    let out = spans[0].steps[1].output.as_ref().unwrap();
    assert_eq!(out["cairn.truncated"], true);
    // A content limit smaller than the truncation marker still holds.
    let limits = MapLimits {
        max_content_bytes: 8,
        ..MapLimits::default()
    };
    let mut long = span(2, 0, 1, vec![s("gen_ai.operation.name", "chat")]);
    long.name = "chat with a rather long span name".into();
    let out = map_request(&request(vec![long]), &limits);
    let content = out[0].as_ref().unwrap().steps[0].content.clone().unwrap();
    assert!(content.len() <= 8, "{content}");
}

/// Attribute text that is JSON becomes a value only when it reads strictly:
/// a member given twice, or one serde_json would read as its own marker
/// (and so as another value), keeps the text as it was sent.
#[test]
fn json_text_attributes_become_values_only_when_strict() {
    use super::super::attrs::parse_json_text;
    assert_eq!(
        parse_json_text(r#"{"a":[1,2]}"#),
        Some(json!({"a": [1, 2]}))
    );
    assert_eq!(parse_json_text(r#"{"a":1,"a":2}"#), None);
    assert_eq!(
        parse_json_text(r#"{"$serde_json::private::RawValue":"1"}"#),
        None
    );
    assert_eq!(
        parse_json_text(r#"[{"$serde_json":1}]"#),
        Some(json!([{"$serde_json": 1}]))
    );
}

/// An outside identifier becomes a Cairn id a URL path can name: `.` and
/// `..` (valid ids, but path segments clients resolve away) are hashed
/// like text that is not an id, anything else valid is kept.
#[test]
fn dot_segments_are_hashed_into_ids_a_path_can_name() {
    use super::super::attrs::id_from;
    for text in [".", ".."] {
        let id = id_from(text);
        assert_ne!(id, text);
        assert!(cairn_core::record::validate_id("id", &id).is_ok(), "{id}");
        assert!(!cairn_core::record::is_dot_segment(&id), "{id}");
    }
    assert_eq!(id_from("..."), "...");
    assert_eq!(id_from("conv-1"), "conv-1");
    // An API key sent as a conversation id is never kept, even in part.
    let token = "cairn_0123456789ab_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZn";
    let id = id_from(token);
    assert!(id.starts_with("redacted~"), "{id}");
    assert!(!id.contains("0123456789ab"), "{id}");
    assert!(cairn_core::record::refuse_api_key_id("session_id", &id).is_ok());
}

/// A token count beyond 2^53 − 1 (an exporter's sum of two huge counts)
/// gives the step no `token_count` instead of one no verifier can read;
/// the attributes stay in the metadata, as strings.
#[test]
fn token_counts_beyond_two_to_the_53_are_left_in_the_attributes() {
    let spans = mapped(vec![span(
        2,
        0,
        5,
        vec![
            s("openinference.span.kind", "LLM"),
            kv("llm.token_count.prompt", V::IntValue(i64::MAX)),
            kv("llm.token_count.completion", V::IntValue(12)),
            s("llm.output_messages.0.message.role", "assistant"),
            s("llm.output_messages.0.message.content", "Done."),
        ],
    )]);
    let last = spans[0].steps.last().unwrap();
    assert_eq!(last.token_count, None);
    let attributes = &last.metadata["otel"]["attributes"];
    assert_eq!(
        attributes["llm.token_count.prompt"],
        json!(i64::MAX.to_string()),
        "{attributes}"
    );
}

/// A refusal names a span by at most 32 bytes of its ids, however long
/// they are (a probe's 15 MB request of 3 MiB span ids was answered with
/// 31 MB of hex).
#[test]
fn a_refusal_does_not_repeat_a_long_id() {
    let mut bad = span(2, 0, 1, vec![]);
    bad.trace_id = vec![1, 2, 3];
    bad.span_id = vec![7; 1 << 20];
    let out = map_request(&request(vec![bad]), &MapLimits::default());
    let refusal = out[0].as_ref().unwrap_err();
    assert!(refusal.reason.len() < 200, "{}", refusal.reason.len());
    assert!(
        refusal.reason.contains("(1048576 bytes)"),
        "{}",
        refusal.reason
    );
    assert!(refusal.span_hex.len() < 100);
}
