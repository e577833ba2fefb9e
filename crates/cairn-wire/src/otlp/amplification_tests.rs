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
            assert!(value.to_string().len() <= MAX_SHARED_METADATA_BYTES);
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
/// the next would pass `MAX_STEP_BYTES_PER_REQUEST`; it is refused with a
/// reason, and a later small span still fits.
#[test]
fn a_request_maps_to_a_bounded_number_of_bytes() {
    // About 240 KiB of metadata per span: about 270 fit in 64 MiB.
    let heavy = |id: u8| span(id, 0, 1, big_attributes("a", 15, 16_000));
    let mut spans: Vec<_> = (1..=250u8).map(heavy).collect();
    spans.extend((1..=50u8).map(|i| {
        let mut s = heavy(i);
        s.span_id = vec![i, 0xee, 0, 0, 0, 0, 0, 1];
        s
    }));
    spans.push(span(251, 0, 1, vec![]));
    let out = map_request(&request(spans), &MapLimits::default());
    let kept: usize = out
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .flat_map(|s| &s.steps)
        .map(|s| s.counted_bytes())
        .sum();
    assert!(kept <= MAX_STEP_BYTES_PER_REQUEST, "{kept}");
    let refused: Vec<_> = out.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        !refused.is_empty() && refused.len() < 100,
        "{}",
        refused.len()
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
