//! A step's `metadata.otel`: the span's identity on every step, and
//! everything not mapped (attributes, resource, scope, events, links,
//! status, what was cut) on the first, each payload fitted to the store's
//! limit. Apart from the steps themselves because it is the record of what
//! the mapping left out.

use super::{Builder, Context, Operation};
use crate::otlp::attrs::{attributes_json, clip, fit, rfc3339};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{Map, Value, json};

/// The most bytes of the span's name on its steps after the first.
const REPEATED_NAME_BYTES: usize = 128;

/// Attributes whose content is moved into a step's content, input or
/// output (and so not repeated in its metadata).
fn moved(key: &str, moved_prefixes: &[&str]) -> bool {
    moved_prefixes.iter().any(|p| {
        if p.ends_with('.') {
            // Only the flattened keys that were read (`<p><i>.<field>`).
            key.strip_prefix(p)
                .and_then(crate::otlp::messages::indexed_field)
                .is_some()
        } else {
            key == *p
        }
    })
}

/// A span's kind by its name, or the number as sent when the enum has no
/// such value (kept rather than read as `unspecified`: what the exporter
/// sent is never silently replaced).
fn span_kind(kind: i32) -> Value {
    match kind {
        0 => json!("unspecified"),
        1 => json!("internal"),
        2 => json!("server"),
        3 => json!("client"),
        4 => json!("producer"),
        5 => json!("consumer"),
        other => json!(other),
    }
}

/// A status code by its name, or the number as sent (as [`span_kind`]).
fn status_code(code: i32) -> Value {
    match code {
        0 => json!("unset"),
        1 => json!("ok"),
        2 => json!("error"),
        other => json!(other),
    }
}

/// Metadata: the span's identity on every step; everything not mapped
/// (attributes, resource, scope, events, links, status) on the first.
/// Every payload is fitted to the store's limit.
pub(super) fn attach_metadata(
    b: &mut Builder<'_>,
    span: &Span,
    ctx: &Context<'_>,
    operation: Operation,
) {
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
    // The name whole (up to 1 KiB) on the first step, its start on the
    // others: a reasoning text of thousands of paragraphs repeats it on
    // every one.
    base.insert(
        "name".into(),
        json!(clip(&span.name, REPEATED_NAME_BYTES, &mut false)),
    );
    base.insert("operation".into(), json!(operation.as_str()));
    if let Some(t) = rfc3339(span.start_time_unix_nano) {
        base.insert("start_time".into(), json!(t));
    }
    if let Some(t) = rfc3339(span.end_time_unix_nano) {
        base.insert("end_time".into(), json!(t));
    }
    let mut full = base.clone();
    full.insert("name".into(), json!(clip(&span.name, 1024, &mut false)));
    full.insert("kind".into(), span_kind(span.kind));
    if let Some(status) = &span.status
        && (status.code != 0 || !status.message.is_empty())
    {
        let code = status_code(status.code);
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
    truncated.extend(ctx.truncated_shared.iter().cloned());
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
