//! OTLP/HTTP trace export bodies as `POST /v1/traces` reads them: the first
//! byte picks the encoding and compression, the rest is the body;
//! decompressed within a limit, decoded (protobuf or OTLP/JSON) within the
//! span and element budgets, then mapped to steps and planned into
//! sessions, and a JSON body's ignored members named; the same bytes are
//! also counted as `/v1/metrics` and `/v1/logs` count them. Nothing may panic,
//! whatever the bytes.
#![no_main]

use cairn_wire::otlp::map::{MapLimits, map_request, plan};
use cairn_wire::otlp::{
    DecodeLimits, DiscardedSignal, count_discarded, decode_otlp_with, decompress, json_member_hint,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let content_type = if selector & 1 == 0 {
        "application/x-protobuf"
    } else {
        "application/json"
    };
    let encoding = match (selector >> 1) % 3 {
        0 => None,
        1 => Some("gzip"),
        _ => Some("deflate"),
    };
    let limits = DecodeLimits {
        max_decompressed_bytes: 1 << 20,
        ..DecodeLimits::default()
    };
    let Ok(body) = decompress(encoding, body, limits.max_decompressed_bytes) else {
        return;
    };
    // What /v1/metrics and /v1/logs count of the same bytes.
    let json = selector & 1 == 1;
    let _ = count_discarded(DiscardedSignal::Logs, json, &body);
    let _ = count_discarded(DiscardedSignal::Metrics, json, &body);
    let Ok(request) = decode_otlp_with(content_type, &body, &limits) else {
        return;
    };
    if selector & 1 == 1 {
        let _ = json_member_hint(&body, cairn_wire::otlp::decode::span_count(&request));
    }
    let spans = map_request(&request, &MapLimits::default());
    let bound = (selector & 0x80 != 0).then_some("agent-a");
    let _ = plan(spans, bound);
});
