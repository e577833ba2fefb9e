//! What a request may make the server hold and store beyond its own
//! spans' data: the resource and scope every span repeats, the span's
//! name on every step, and the request's step data in all.

use super::decode::Encoding;
use super::map::{MAX_SHARED_METADATA_BYTES, MAX_STEP_BYTES_PER_REQUEST, MapLimits, map_request};
use super::tests::{reasoning_span, request, s, span};
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::resource::v1::Resource;
use serde_json::Value;

/// `n` string attributes of `bytes` bytes each.
fn big_attributes(prefix: &str, n: usize, bytes: usize) -> Vec<KeyValue> {
    (0..n)
        .map(|i| s(&format!("{prefix}.{i}"), &"x".repeat(bytes)))
        .collect()
}

fn otel(step_metadata: &Value) -> &serde_json::Map<String, Value> {
    step_metadata["otel"].as_object().expect("metadata.otel")
}

/// A resource and a scope far larger than the shared budget, repeated by
/// many spans: each span's metadata holds a marker of at most the budget
/// for each (named in `truncated` once, not attribute by attribute), so
/// the request's step data grows with its spans, not with spans times the
/// resource. (Before, 20 attributes of 16 KiB on 10,000 empty spans made
/// 2.2 GB of steps out of a 100 KB body.)
#[test]
fn the_resource_and_scope_are_bounded_once_for_every_span() {
    let mut req = request((1..=200).map(|i| span(i, 0, 1, vec![])).collect());
    let rs = &mut req.resource_spans[0];
    rs.resource = Some(Resource {
        attributes: big_attributes("resource", 20, 16_000),
        ..Resource::default()
    });
    rs.scope_spans[0].scope = Some(InstrumentationScope {
        name: "scope".into(),
        attributes: big_attributes("scope", 20, 16_000),
        ..InstrumentationScope::default()
    });
    let out = map_request(&req, &MapLimits::default());
    let mut total = 0;
    for spans in &out {
        let steps = &spans.as_ref().expect("mappable").steps;
        let first = otel(&steps[0].metadata);
        for shared in ["resource", "scope"] {
            let value = &first[shared];
            assert_eq!(value["cairn.truncated"], true, "{shared}: {value}");
            // The marker every span repeats keeps 1 KiB of the JSON.
            assert!(value.to_string().len() < 1500, "{shared}: {value}");
        }
        let truncated: Vec<&str> = first["truncated"]
            .as_array()
            .expect("truncated")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(truncated, ["resource", "scope"]);
        total += steps.iter().map(|s| s.counted_bytes()).sum::<usize>();
    }
    assert!(total < 200 * 3 * MAX_SHARED_METADATA_BYTES, "{total}");
}

/// A resource within the budget is kept whole on every span.
#[test]
fn a_resource_within_the_budget_is_kept_whole() {
    let out = map_request(
        &request(vec![span(1, 0, 1, vec![]), span(2, 0, 1, vec![])]),
        &MapLimits::default(),
    );
    for spans in &out {
        let first = otel(&spans.as_ref().unwrap().steps[0].metadata);
        assert_eq!(first["resource"]["service.name"], "support-bot");
    }
}

/// The request's step data is bounded: spans whose metadata is large
/// (their own attributes, up to the payload limit each) are mapped until
/// the next would pass the request's budget (`MAX_STEP_BYTES_PER_REQUEST`,
/// 16 MiB here); it is refused with a reason, and a later small span
/// still fits.
#[test]
fn a_request_maps_to_a_bounded_number_of_bytes() {
    let limits = MapLimits {
        max_request_step_bytes: 16 << 20,
        ..MapLimits::default()
    };
    // About 240 KiB of metadata per span: about 60 fit in 16 MiB.
    let mut spans: Vec<_> = (1..=100u8)
        .map(|id| span(id, 0, 1, big_attributes("a", 15, 16_000)))
        .collect();
    spans.push(span(101, 0, 1, vec![]));
    let out = map_request(&request(spans), &limits);
    let kept: usize = out
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .flat_map(|s| &s.steps)
        .map(|s| s.counted_bytes())
        .sum();
    assert!(kept <= limits.max_request_step_bytes, "{kept}");
    assert!(kept > limits.max_request_step_bytes / 2, "{kept}");
    let refused: Vec<_> = out.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        refused.len() > 10 && refused.len() < 60,
        "{}",
        refused.len()
    );
    assert_eq!(
        MAX_STEP_BYTES_PER_REQUEST,
        MapLimits::default().max_request_step_bytes
    );
    assert!(
        refused[0].reason.contains("MiB of step data")
            && refused[0].reason.contains("export smaller batches"),
        "{}",
        refused[0].reason
    );
    assert!(out.last().unwrap().is_ok(), "a small span still fits");
}

/// The span's name is whole (up to 1 KiB) on its first step and cut to
/// its start on the others: a reasoning text of many paragraphs does not
/// repeat a long name on each.
#[test]
fn a_long_name_is_not_repeated_on_every_step() {
    let mut long = reasoning_span(2, 50);
    long.name = "n".repeat(1100);
    let out = map_request(&request(vec![long]), &MapLimits::default());
    let steps = &out[0].as_ref().unwrap().steps;
    assert!(steps.len() >= 50, "{}", steps.len());
    let name = |i: usize| otel(&steps[i].metadata)["name"].as_str().unwrap().len();
    assert!(name(0) >= 1024 && name(0) < 1100, "{}", name(0));
    for i in 1..steps.len() {
        assert!(name(i) < 200, "step {i}: {}", name(i));
    }
}

/// A JSON body in a charset other than UTF-8 is not one Cairn reads.
#[test]
fn only_utf8_is_read() {
    for (content_type, expected) in [
        ("application/json", Some(Encoding::Json)),
        ("application/json; charset=utf-8", Some(Encoding::Json)),
        ("application/json;charset=\"UTF-8\"", Some(Encoding::Json)),
        ("application/json; charset=utf8", Some(Encoding::Json)),
        ("Application/JSON; foo=bar", Some(Encoding::Json)),
        ("application/json; charset=utf-16", None),
        ("application/json; charset=latin1", None),
        // Protobuf is bytes: a charset changes nothing.
        (
            "application/x-protobuf; charset=utf-16",
            Some(Encoding::Protobuf),
        ),
        ("application/x-protobuf", Some(Encoding::Protobuf)),
    ] {
        assert_eq!(
            Encoding::from_content_type(content_type),
            expected,
            "{content_type}"
        );
    }
}

/// A resource of many small parts (thousands of empty strings, arrays
/// nested in arrays) holds many times its JSON's size in memory: it is cut
/// by what it holds, not only by its JSON, so that each span's copy stays
/// small (a hostile review's 15 KB body had held 1.1 GB this way).
#[test]
fn a_resource_of_many_small_parts_is_cut_by_its_memory() {
    use super::map::MAX_SHARED_METADATA_MEMORY;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, any_value::Value as V};
    let empties = AnyValue {
        value: Some(V::ArrayValue(ArrayValue {
            values: vec![
                AnyValue {
                    value: Some(V::StringValue(String::new())),
                };
                5_000
            ],
        })),
    };
    let mut nested = AnyValue {
        value: Some(V::StringValue(String::new())),
    };
    for _ in 0..30 {
        nested = AnyValue {
            value: Some(V::ArrayValue(ArrayValue {
                values: vec![nested],
            })),
        };
    }
    let nested_many = AnyValue {
        value: Some(V::ArrayValue(ArrayValue {
            values: vec![nested; 160],
        })),
    };
    for (shape, value) in [("empty strings", empties), ("nested arrays", nested_many)] {
        let mut req = request((1..=50).map(|i| span(i, 0, 1, vec![])).collect());
        req.resource_spans[0].resource = Some(Resource {
            attributes: vec![KeyValue {
                key: "r".into(),
                value: Some(value),
                ..KeyValue::default()
            }],
            ..Resource::default()
        });
        for spans in map_request(&req, &MapLimits::default()) {
            let steps = spans.expect("mappable").steps;
            let resource = &otel(&steps[0].metadata)["resource"];
            assert_eq!(resource["cairn.truncated"], true, "{shape}: {resource}");
            assert!(
                super::attrs::approx_memory(resource) <= MAX_SHARED_METADATA_MEMORY,
                "{shape}"
            );
        }
    }
}

/// JSON text that would hold far more memory than its size once parsed
/// (objects of one member nested in one another, a review's 1 MiB tool
/// arguments that held 390 MB each) stays a string, judged before it is
/// parsed; ordinary JSON text of the same size is parsed.
#[test]
fn json_text_of_many_small_parts_is_not_parsed() {
    use super::attrs::parse_json_text;
    let nested = {
        let mut one = String::from("1");
        for _ in 0..20 {
            one = format!("{{\"a\":{one}}}");
        }
        format!("[{}]", vec![one; 5_000].join(","))
    };
    assert!(nested.len() > 100_000);
    assert_eq!(parse_json_text(&nested), None);
    let ordinary = serde_json::to_string(
        &(0..3_000)
            .map(|i| serde_json::json!({"name": format!("item {i}"), "value": i, "tags": ["a", "b"]}))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    assert!(ordinary.len() > 100_000);
    assert!(parse_json_text(&ordinary).is_some());
}

/// Within a request's mapping, all the JSON text parsed is bounded too:
/// once its budget is spent, further text stays a string; the budget
/// ends with the guard.
#[test]
fn a_request_parses_json_text_within_a_budget() {
    use super::attrs::{ParseBudget, parse_json_text};
    let text = serde_json::to_string(&vec![serde_json::json!({"k": "v"}); 100]).unwrap();
    {
        let _budget = ParseBudget::start(150_000);
        let parsed = (0..10).filter(|_| parse_json_text(&text).is_some()).count();
        assert!((1..10).contains(&parsed), "{parsed} of 10 parsed");
    }
    assert!((0..10).all(|_| parse_json_text(&text).is_some()));
}
