//! Counting what `POST /v1/metrics` and `POST /v1/logs` reject (Cairn
//! records traces only), without building the request: the answer needs
//! only how many data points or log records the body held, and a decoded
//! request (or a `serde_json::Value` of it) costs tens of times the body
//! (a 16 MiB OTLP/JSON body of empty log records took 6 GB). Both readers
//! allocate nothing per item: the protobuf one walks the wire format along
//! the path to the items, skipping every other field; the JSON one reads
//! the members on that path and ignores the rest unbuilt.

use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// Which discarded signal a body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscardedSignal {
    /// `ExportMetricsServiceRequest`: its data points are counted.
    Metrics,
    /// `ExportLogsServiceRequest`: its log records are counted.
    Logs,
}

/// How deep the protobuf walk goes (the item paths are at most 5 deep).
const MAX_DEPTH: u32 = 8;

/// The data points (metrics) or log records (logs) of an export request,
/// protobuf (`json` false) or OTLP/JSON, counted as the OTLP decoder
/// would read them (a metric's data is its last data field, as protobuf's
/// `oneof`: the same field given twice is merged, another replaces it).
/// Anything that is not such a request on the path to its items is an
/// error naming it; what lies off that path (an item's own fields, a
/// resource) is skipped by its wire type, not checked.
pub fn count_discarded(signal: DiscardedSignal, json: bool, body: &[u8]) -> Result<u64, String> {
    match (signal, json) {
        (DiscardedSignal::Logs, false) => protobuf_count(body, &LOGS_PATH)
            .map_err(|e| format!("the body is not a protobuf ExportLogsServiceRequest: {e}")),
        (DiscardedSignal::Metrics, false) => protobuf_count(body, &METRICS_PATH)
            .map_err(|e| format!("the body is not a protobuf ExportMetricsServiceRequest: {e}")),
        (DiscardedSignal::Logs, true) => json_count::<LogsRequest>(body),
        (DiscardedSignal::Metrics, true) => json_count::<MetricsRequest>(body),
    }
}

/// One level of the path from a request to its items: the field numbers
/// of the length-delimited fields followed into (several: a `oneof`, of
/// which the last one present counts).
type Level = &'static [u32];

/// `ExportLogsServiceRequest.resource_logs` (1), `ResourceLogs.scope_logs`
/// (2), `ScopeLogs.log_records` (2): each log record is an item.
const LOGS_PATH: [Level; 3] = [&[1], &[2], &[2]];

/// `ExportMetricsServiceRequest.resource_metrics` (1),
/// `ResourceMetrics.scope_metrics` (2), `ScopeMetrics.metrics` (2), the
/// metric's data `oneof` (gauge 5, sum 7, histogram 9, exponential
/// histogram 10, summary 11), its `data_points` (1): each data point is an
/// item.
const METRICS_PATH: [Level; 5] = [&[1], &[2], &[2], &[5, 7, 9, 10, 11], &[1]];

/// Counts the items at the end of `path` in a protobuf message.
fn protobuf_count(body: &[u8], path: &[Level]) -> Result<u64, String> {
    walk(body, path, 0)
}

fn walk(mut buf: &[u8], path: &[Level], depth: u32) -> Result<u64, String> {
    let malformed = |e: prost::DecodeError| e.to_string();
    let Some((fields, rest_of_path)) = path.split_first() else {
        // An item: its contents are not read.
        return Ok(1);
    };
    if depth > MAX_DEPTH {
        return Err("nested too deep".into());
    }
    let one_of = fields.len() > 1;
    let mut total = 0u64;
    // Of a `oneof`, the field last given: the same one given again is
    // merged into it (its repeated items add up), another replaces it.
    let mut last_of_one = None;
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).map_err(malformed)?;
        if !fields.contains(&tag) {
            skip_field(wire, tag, &mut buf, DecodeContext::default()).map_err(malformed)?;
            continue;
        }
        if wire != WireType::LengthDelimited {
            return Err(format!("invalid wire type {wire:?} for field {tag}"));
        }
        let len = usize::try_from(decode_varint(&mut buf).map_err(malformed)?)
            .ok()
            .filter(|len| *len <= buf.len())
            .ok_or_else(|| "buffer underflow".to_owned())?;
        let (inner, rest) = buf.split_at(len);
        buf = rest;
        let count = walk(inner, rest_of_path, depth + 1)?;
        total = if one_of && last_of_one != Some(tag) {
            count
        } else {
            total.saturating_add(count)
        };
        last_of_one = Some(tag);
    }
    Ok(total)
}

/// Reads an OTLP/JSON request of type `R` and returns its item count.
fn json_count<R: for<'de> Deserialize<'de> + Tally>(body: &[u8]) -> Result<u64, String> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let request = R::deserialize(&mut de)
        .and_then(|request| de.end().map(|()| request))
        .map_err(|e| format!("the body is not OTLP/JSON: {e}"))?;
    Ok(request.tally())
}

/// What a read piece of a request counts.
trait Tally {
    fn tally(&self) -> u64;
}

/// A JSON array whose elements are each read as `T`: only their total is
/// kept.
struct Total<T> {
    total: u64,
    of: PhantomData<T>,
}

impl<T> Tally for Total<T> {
    fn tally(&self) -> u64 {
        self.total
    }
}

impl<'de, T: Deserialize<'de> + Tally> Deserialize<'de> for Total<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Elements<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Tally> Visitor<'de> for Elements<T> {
            type Value = Total<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Total<T>, A::Error> {
                let mut total = 0u64;
                while let Some(element) = seq.next_element::<T>()? {
                    total = total.saturating_add(element.tally());
                }
                Ok(Total {
                    total,
                    of: PhantomData,
                })
            }
        }
        deserializer.deserialize_any(Elements(PhantomData))
    }
}

/// An item (a log record, a data point): read and ignored.
struct Item;

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(deserializer).map(|_| Item)
    }
}

impl Tally for Item {
    fn tally(&self) -> u64 {
        1
    }
}

/// Which of an object's members (by position in a list of names) a key
/// is, without building the key.
struct MemberOf(&'static [&'static str]);

impl<'de> serde::de::DeserializeSeed<'de> for MemberOf {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<usize>, D::Error> {
        struct Names(&'static [&'static str]);
        impl Visitor<'_> for Names {
            type Value = Option<usize>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E>(self, key: &str) -> Result<Option<usize>, E> {
                Ok(self.0.iter().position(|name| *name == key))
            }
        }
        deserializer.deserialize_str(Names(self.0))
    }
}

/// Reads a JSON object (nothing else: an array is not read as one) whose
/// members named in `names` are each read as `T` and counted, any other
/// member ignored unbuilt; a member given twice is refused. The total
/// is the members' sum, or with `one_of` the last one's (a metric's data,
/// as protobuf's `oneof`).
fn read_object<'de, D: Deserializer<'de>, T: Deserialize<'de> + Tally>(
    deserializer: D,
    names: &'static [&'static str],
    one_of: bool,
) -> Result<u64, D::Error> {
    struct Members<T> {
        names: &'static [&'static str],
        one_of: bool,
        of: PhantomData<T>,
    }
    impl<'de, T: Deserialize<'de> + Tally> Visitor<'de> for Members<T> {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
            let mut seen = 0u32;
            let mut total = 0u64;
            while let Some(member) = map.next_key_seed(MemberOf(self.names))? {
                let Some(index) = member else {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                };
                if seen & (1 << index) != 0 {
                    return Err(serde::de::Error::duplicate_field(self.names[index]));
                }
                seen |= 1 << index;
                // `null` is the member absent (no data).
                let Some(value) = map.next_value::<Option<T>>()? else {
                    continue;
                };
                total = if self.one_of {
                    value.tally()
                } else {
                    total.saturating_add(value.tally())
                };
            }
            Ok(total)
        }
    }
    deserializer.deserialize_map(Members {
        names,
        one_of,
        of: PhantomData::<T>,
    })
}

/// Declares a JSON object read for the members that lead to its items
/// (under OTLP/JSON's lowerCamelCase names; every other member ignored).
macro_rules! counted_object {
    ($name:ident, [$($member:literal),+], $inner:ty, $one_of:literal) => {
        struct $name(u64);
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                read_object::<D, $inner>(deserializer, &[$($member),+], $one_of).map($name)
            }
        }
        impl Tally for $name {
            fn tally(&self) -> u64 {
                self.0
            }
        }
    };
}

counted_object!(LogsRequest, ["resourceLogs"], Total<ResourceLogs>, false);
counted_object!(ResourceLogs, ["scopeLogs"], Total<ScopeLogs>, false);
counted_object!(ScopeLogs, ["logRecords"], Total<Item>, false);
counted_object!(
    MetricsRequest,
    ["resourceMetrics"],
    Total<ResourceMetrics>,
    false
);
counted_object!(
    ResourceMetrics,
    ["scopeMetrics"],
    Total<ScopeMetrics>,
    false
);
counted_object!(ScopeMetrics, ["metrics"], Total<Metric>, false);
// A metric's data is one of five members; the last one given counts.
counted_object!(
    Metric,
    [
        "gauge",
        "sum",
        "histogram",
        "exponentialHistogram",
        "summary"
    ],
    DataPoints,
    true
);
counted_object!(DataPoints, ["dataPoints"], Total<Item>, false);

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use opentelemetry_proto::tonic::metrics::v1::{
        Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, metric::Data,
    };
    use prost::Message as _;

    fn logs(scopes: &[usize]) -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: scopes
                    .iter()
                    .map(|n| ScopeLogs {
                        log_records: vec![LogRecord::default(); *n],
                        ..ScopeLogs::default()
                    })
                    .collect(),
                ..ResourceLogs::default()
            }],
        }
    }

    fn metric(data: Data) -> Metric {
        Metric {
            name: "m".into(),
            data: Some(data),
            ..Metric::default()
        }
    }

    #[test]
    fn protobuf_items_are_counted_as_decoded() {
        let request = logs(&[3, 0, 2]);
        assert_eq!(
            count_discarded(DiscardedSignal::Logs, false, &request.encode_to_vec()),
            Ok(5)
        );
        let point = NumberDataPoint::default();
        let request = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![
                        metric(Data::Gauge(Gauge {
                            data_points: vec![point.clone(); 4],
                        })),
                        metric(Data::Sum(Sum {
                            data_points: vec![point; 2],
                            ..Sum::default()
                        })),
                    ],
                    ..ScopeMetrics::default()
                }],
                ..ResourceMetrics::default()
            }],
        };
        let body = request.encode_to_vec();
        assert_eq!(
            count_discarded(DiscardedSignal::Metrics, false, &body),
            Ok(6)
        );
        // What is no such message fails as the decoder fails: a length
        // past the end, a key without its value, a message field given as
        // a number or a fixed32; an unknown field is skipped.
        for body in [
            &b"\x0a\x05ab"[..],
            b"\x08",
            b"\x08\x01",
            b"\x0d\x01\x02\x03\x04",
            b"\x10\x01",
            b"\x0a\x02\x12\x05",
        ] {
            assert_eq!(
                count_discarded(DiscardedSignal::Logs, false, body).is_err(),
                ExportLogsServiceRequest::decode(body).is_err(),
                "{body:?}"
            );
        }
    }

    /// The same data field twice is merged (its points add up), as a
    /// protobuf decoder merges a repeated message field of a `oneof`.
    #[test]
    fn a_data_field_given_twice_is_merged() {
        use prost::encoding::{WireType, encode_key, encode_varint};
        let gauge = |n: usize| {
            Gauge {
                data_points: vec![NumberDataPoint::default(); n],
            }
            .encode_to_vec()
        };
        let field = |number: u32, bytes: &[u8], out: &mut Vec<u8>| {
            encode_key(number, WireType::LengthDelimited, out);
            encode_varint(bytes.len() as u64, out);
            out.extend_from_slice(bytes);
        };
        let sum = Sum {
            data_points: vec![NumberDataPoint::default(); 4],
            ..Sum::default()
        }
        .encode_to_vec();
        for (parts, expected) in [
            (vec![(5, gauge(3)), (5, gauge(2))], 5),
            (vec![(5, gauge(3)), (1, b"name".to_vec()), (5, gauge(2))], 5),
            (vec![(5, gauge(3)), (7, sum.clone()), (5, gauge(2))], 2),
            (vec![(5, gauge(3)), (7, sum)], 4),
        ] {
            let mut metric = Vec::new();
            for (number, bytes) in &parts {
                field(*number, bytes, &mut metric);
            }
            let (mut scope, mut resource, mut body) = (Vec::new(), Vec::new(), Vec::new());
            field(2, &metric, &mut scope);
            field(2, &scope, &mut resource);
            field(1, &resource, &mut body);
            let decoded = ExportMetricsServiceRequest::decode(&body[..]).unwrap();
            let points: usize = decoded.resource_metrics[0].scope_metrics[0]
                .metrics
                .iter()
                .map(|m| match &m.data {
                    Some(Data::Gauge(g)) => g.data_points.len(),
                    Some(Data::Sum(s)) => s.data_points.len(),
                    _ => 0,
                })
                .sum();
            assert_eq!(points, expected, "prost");
            assert_eq!(
                count_discarded(DiscardedSignal::Metrics, false, &body),
                Ok(expected as u64)
            );
        }
    }

    #[test]
    fn a_metric_given_two_data_fields_counts_its_last_as_protobuf_does() {
        use prost::encoding::{WireType, encode_key, encode_varint};
        let gauge = Gauge {
            data_points: vec![NumberDataPoint::default(); 3],
        }
        .encode_to_vec();
        let sum = Sum {
            data_points: vec![NumberDataPoint::default(); 1],
            ..Sum::default()
        }
        .encode_to_vec();
        let mut metric = Vec::new();
        for (field, bytes) in [(5, &gauge), (7, &sum)] {
            encode_key(field, WireType::LengthDelimited, &mut metric);
            encode_varint(bytes.len() as u64, &mut metric);
            metric.extend_from_slice(bytes);
        }
        let mut nest = metric;
        for _ in 0..3 {
            let mut outer = Vec::new();
            encode_key(
                if outer.is_empty() && nest.is_empty() {
                    1
                } else {
                    2
                },
                WireType::LengthDelimited,
                &mut outer,
            );
            encode_varint(nest.len() as u64, &mut outer);
            outer.extend_from_slice(&nest);
            nest = outer;
        }
        // The outermost level is field 1, resource_metrics.
        nest[0] = 0x0a;
        let decoded = ExportMetricsServiceRequest::decode(&nest[..]).unwrap();
        let points: usize = decoded.resource_metrics[0].scope_metrics[0]
            .metrics
            .iter()
            .map(|m| match &m.data {
                Some(Data::Sum(s)) => s.data_points.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(points, 1);
        assert_eq!(
            count_discarded(DiscardedSignal::Metrics, false, &nest),
            Ok(1)
        );
    }

    #[test]
    fn json_items_are_counted_without_building_them() {
        let body = br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{},{"body":{"stringValue":"x"}},{"":0}]},{"logRecords":null},{}]},{"resource":{}}],"other":[1,2]}"#;
        assert_eq!(count_discarded(DiscardedSignal::Logs, true, body), Ok(3));
        let body = br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"a","gauge":{"dataPoints":[{},{}]}},{"sum":{"dataPoints":[{}]},"histogram":null},{"summary":{}}]}]}]}"#;
        assert_eq!(count_discarded(DiscardedSignal::Metrics, true, body), Ok(3));
        assert_eq!(count_discarded(DiscardedSignal::Logs, true, b"{}"), Ok(0));
        for bad in [&b"[]"[..], b"5", b"{", br#"{"resourceLogs":5}"#, b"{} x"] {
            let err = count_discarded(DiscardedSignal::Logs, true, bad).unwrap_err();
            assert!(err.starts_with("the body is not OTLP/JSON"), "{err}");
        }
    }
}
