//! OTLP/JSON into the `opentelemetry-proto` message types.
//!
//! `opentelemetry-proto`'s own serde support (feature `with-serde`) was
//! checked against the OTLP/JSON rules and falls short in ways exporters
//! hit: an `arrayValue` or `kvlistValue` whose empty `values` is omitted
//! (proto3 JSON omits defaults) is refused, as are 32-bit integers sent as
//! strings, `null` members, `"NaN"` doubles and enum names. This module is
//! a serde mirror of the trace messages that follows the OTLP/HTTP
//! specification's JSON rules:
//!
//! - member names are lowerCamelCase; unknown members are ignored;
//! - `traceId`, `spanId`, `parentSpanId` are hex (any case), not base64;
//! - enums are integers (their proto names are accepted too);
//! - 64-bit (and 32-bit) integers are numbers or decimal strings;
//! - `null` or an absent member is the field's default;
//! - `bytesValue` is base64 (standard or URL-safe, padding optional).
//!
//! The result is the same `ExportTraceServiceRequest` the protobuf path
//! produces, so everything after decoding is shared. A test checks it
//! against the serde output of `opentelemetry-proto` itself.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1 as common;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1 as trace;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use std::fmt;

/// Decodes an OTLP/JSON `ExportTraceServiceRequest`; the error names what
/// is wrong and where (serde_json's line and column).
pub(crate) fn decode_request(body: &[u8]) -> Result<ExportTraceServiceRequest, String> {
    // serde's derived structs also take a JSON array (fields by position);
    // an export request is an object, so anything else is refused here.
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => {}
        _ => {
            return Err(
                "an OTLP/JSON export request is a JSON object ({\"resourceSpans\": [...]})".into(),
            );
        }
    }
    let request: Request = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    Ok(request.into_proto())
}

/// `null` or absent: the default.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Request {
    #[serde(deserialize_with = "nullable")]
    resource_spans: Vec<ResourceSpans>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ResourceSpans {
    resource: Option<JsonResource>,
    #[serde(deserialize_with = "nullable")]
    scope_spans: Vec<ScopeSpans>,
    #[serde(deserialize_with = "nullable")]
    schema_url: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct JsonResource {
    #[serde(deserialize_with = "nullable")]
    attributes: Vec<KeyValue>,
    #[serde(deserialize_with = "int")]
    dropped_attributes_count: u32,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ScopeSpans {
    scope: Option<Scope>,
    #[serde(deserialize_with = "nullable")]
    spans: Vec<Span>,
    #[serde(deserialize_with = "nullable")]
    schema_url: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Scope {
    #[serde(deserialize_with = "nullable")]
    name: String,
    #[serde(deserialize_with = "nullable")]
    version: String,
    #[serde(deserialize_with = "nullable")]
    attributes: Vec<KeyValue>,
    #[serde(deserialize_with = "int")]
    dropped_attributes_count: u32,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Span {
    #[serde(deserialize_with = "hex_id")]
    trace_id: Vec<u8>,
    #[serde(deserialize_with = "hex_id")]
    span_id: Vec<u8>,
    #[serde(deserialize_with = "nullable")]
    trace_state: String,
    #[serde(deserialize_with = "hex_id")]
    parent_span_id: Vec<u8>,
    #[serde(deserialize_with = "int")]
    flags: u32,
    #[serde(deserialize_with = "nullable")]
    name: String,
    #[serde(deserialize_with = "span_kind")]
    kind: i32,
    #[serde(deserialize_with = "int")]
    start_time_unix_nano: u64,
    #[serde(deserialize_with = "int")]
    end_time_unix_nano: u64,
    #[serde(deserialize_with = "nullable")]
    attributes: Vec<KeyValue>,
    #[serde(deserialize_with = "int")]
    dropped_attributes_count: u32,
    #[serde(deserialize_with = "nullable")]
    events: Vec<Event>,
    #[serde(deserialize_with = "int")]
    dropped_events_count: u32,
    #[serde(deserialize_with = "nullable")]
    links: Vec<Link>,
    #[serde(deserialize_with = "int")]
    dropped_links_count: u32,
    status: Option<Status>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Event {
    #[serde(deserialize_with = "int")]
    time_unix_nano: u64,
    #[serde(deserialize_with = "nullable")]
    name: String,
    #[serde(deserialize_with = "nullable")]
    attributes: Vec<KeyValue>,
    #[serde(deserialize_with = "int")]
    dropped_attributes_count: u32,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Link {
    #[serde(deserialize_with = "hex_id")]
    trace_id: Vec<u8>,
    #[serde(deserialize_with = "hex_id")]
    span_id: Vec<u8>,
    #[serde(deserialize_with = "nullable")]
    trace_state: String,
    #[serde(deserialize_with = "nullable")]
    attributes: Vec<KeyValue>,
    #[serde(deserialize_with = "int")]
    dropped_attributes_count: u32,
    #[serde(deserialize_with = "int")]
    flags: u32,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Status {
    #[serde(deserialize_with = "nullable")]
    message: String,
    #[serde(deserialize_with = "status_code")]
    code: i32,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct KeyValue {
    #[serde(deserialize_with = "nullable")]
    key: String,
    value: Option<AnyValue>,
}

#[derive(Deserialize, Default)]
#[serde(
    default,
    rename_all = "camelCase",
    bound(deserialize = "T: Deserialize<'de> + Default")
)]
struct Values<T> {
    #[serde(deserialize_with = "nullable")]
    values: Vec<T>,
}

/// An `AnyValue`: an object with at most one known member that is not
/// `null` (a second is an error, as proto3 JSON has it for a oneof).
#[derive(Default)]
struct AnyValue(Option<common::any_value::Value>);

impl<'de> Deserialize<'de> for AnyValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AnyValue, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AnyValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an AnyValue object")
            }
            fn visit_unit<E: de::Error>(self) -> Result<AnyValue, E> {
                Ok(AnyValue(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnyValue, A::Error> {
                use common::any_value::Value;
                let mut value = None;
                let mut first_member = None;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    let next = match &*key {
                        "stringValue" => {
                            map.next_value::<Option<String>>()?.map(Value::StringValue)
                        }
                        "boolValue" => map.next_value::<Option<bool>>()?.map(Value::BoolValue),
                        "intValue" => map.next_value::<Lenient<i64>>()?.0.map(Value::IntValue),
                        "doubleValue" => map.next_value::<Double>()?.0.map(Value::DoubleValue),
                        "bytesValue" => map.next_value::<Bytes>()?.0.map(Value::BytesValue),
                        "arrayValue" => map
                            .next_value::<Option<Values<AnyValue>>>()?
                            .map(|a| Value::ArrayValue(array(a))),
                        "kvlistValue" => map
                            .next_value::<Option<Values<KeyValue>>>()?
                            .map(|l| Value::KvlistValue(kvlist(l))),
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    if next.is_some() {
                        // A oneof: two values would leave one of them
                        // unrecorded, whichever were kept.
                        if let Some(first) = first_member {
                            return Err(de::Error::custom(format!(
                                "an AnyValue holds one value, this one both {first} and {key}"
                            )));
                        }
                        first_member = Some(key);
                        value = next;
                    }
                }
                Ok(AnyValue(value))
            }
        }
        d.deserialize_any(V)
    }
}

/// An integer given as a JSON number or a decimal string; `null` is none.
struct Lenient<T>(Option<T>);

impl<'de, T> Deserialize<'de> for Lenient<T>
where
    T: TryFrom<i64> + TryFrom<u64> + std::str::FromStr,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Lenient<T>, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T> Visitor<'de> for V<T>
        where
            T: TryFrom<i64> + TryFrom<u64> + std::str::FromStr,
        {
            type Value = Lenient<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer (a number or a decimal string)")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Lenient<T>, E> {
                Ok(Lenient(None))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Lenient<T>, E> {
                T::try_from(v)
                    .map(|v| Lenient(Some(v)))
                    .map_err(|_| E::custom(format!("integer {v} out of range")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Lenient<T>, E> {
                T::try_from(v)
                    .map(|v| Lenient(Some(v)))
                    .map_err(|_| E::custom(format!("integer {v} out of range")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Lenient<T>, E> {
                // 1e3 or 12.0: proto3 JSON accepts integral floats.
                if v.fract() != 0.0 || !v.is_finite() {
                    Err(E::custom(format!("{v} is not an integer")))
                } else if v.abs() < 9.007_199_254_740_992e15 {
                    self.visit_i64(v as i64)
                } else {
                    // 1.7e+18: integral, but a double holds only 53 bits,
                    // so the digits sent may not be the ones meant.
                    Err(E::custom(format!(
                        "{v:e} is a number in exponent or fraction form beyond 2^53, which loses digits: send a 64-bit integer as a decimal string (\"1700000000000000000\") or as digits"
                    )))
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Lenient<T>, E> {
                v.trim()
                    .parse::<T>()
                    .map(|v| Lenient(Some(v)))
                    .map_err(|_| E::custom(format!("{v:?} is not an integer")))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

fn int<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i64> + TryFrom<u64> + std::str::FromStr + Default,
{
    Ok(Lenient::<T>::deserialize(d)?.0.unwrap_or_default())
}

/// An enum given as its number or its proto name.
fn enum_value<'de, D: Deserializer<'de>>(
    d: D,
    by_name: fn(&str) -> Option<i32>,
) -> Result<i32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberOrName {
        Number(Lenient<i32>),
        Name(String),
    }
    match Option::<NumberOrName>::deserialize(d)? {
        None => Ok(0),
        Some(NumberOrName::Number(n)) => Ok(n.0.unwrap_or(0)),
        Some(NumberOrName::Name(name)) => {
            by_name(&name).ok_or_else(|| de::Error::custom(format!("unknown enum value {name:?}")))
        }
    }
}

fn span_kind<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    enum_value(d, |name| {
        trace::span::SpanKind::from_str_name(name).map(|k| k as i32)
    })
}

fn status_code<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    enum_value(d, |name| {
        trace::status::StatusCode::from_str_name(name).map(|k| k as i32)
    })
}

/// A trace or span id: hex of any case; `null` or `""` is empty.
fn hex_id<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = Option::<std::borrow::Cow<'de, str>>::deserialize(d)?.unwrap_or_default();
    if text.len() > 64 {
        return Err(de::Error::custom("an id longer than 32 bytes"));
    }
    hex::decode(&*text)
        .map_err(|e| de::Error::custom(format!("an id must be hex (not base64): {e}")))
}

/// A double: a number, or `"NaN"`, `"Infinity"`, `"-Infinity"`, or a
/// numeric string.
struct Double(Option<f64>);

impl<'de> Deserialize<'de> for Double {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Double, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Double;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Double, E> {
                Ok(Double(None))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Double, E> {
                Ok(Double(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Double, E> {
                Ok(Double(Some(v as f64)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Double, E> {
                Ok(Double(Some(v as f64)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Double, E> {
                match v {
                    "NaN" => Ok(Double(Some(f64::NAN))),
                    "Infinity" => Ok(Double(Some(f64::INFINITY))),
                    "-Infinity" => Ok(Double(Some(f64::NEG_INFINITY))),
                    other => other
                        .parse()
                        .map(|v| Double(Some(v)))
                        .map_err(|_| E::custom(format!("{other:?} is not a number"))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// Base64 bytes, standard or URL-safe, padded or not.
struct Bytes(Option<Vec<u8>>);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        use base64::Engine as _;
        use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
        let Some(text) = Option::<std::borrow::Cow<'de, str>>::deserialize(d)? else {
            return Ok(Bytes(None));
        };
        let trimmed = text.trim_end_matches('=');
        STANDARD_NO_PAD
            .decode(trimmed)
            .or_else(|_| URL_SAFE_NO_PAD.decode(trimmed))
            .map(|b| Bytes(Some(b)))
            .map_err(|_| de::Error::custom("bytesValue must be base64"))
    }
}

fn key_values(list: Vec<KeyValue>) -> Vec<common::KeyValue> {
    list.into_iter()
        .map(|kv| common::KeyValue {
            key: kv.key,
            value: kv.value.map(|v| common::AnyValue { value: v.0 }),
            ..common::KeyValue::default()
        })
        .collect()
}

fn array(a: Values<AnyValue>) -> common::ArrayValue {
    common::ArrayValue {
        values: a
            .values
            .into_iter()
            .map(|v| common::AnyValue { value: v.0 })
            .collect(),
    }
}

fn kvlist(l: Values<KeyValue>) -> common::KeyValueList {
    common::KeyValueList {
        values: key_values(l.values),
    }
}

impl Request {
    fn into_proto(self) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: self
                .resource_spans
                .into_iter()
                .map(|rs| trace::ResourceSpans {
                    resource: rs.resource.map(|r| Resource {
                        attributes: key_values(r.attributes),
                        dropped_attributes_count: r.dropped_attributes_count,
                        ..Resource::default()
                    }),
                    scope_spans: rs
                        .scope_spans
                        .into_iter()
                        .map(|ss| trace::ScopeSpans {
                            scope: ss.scope.map(|s| common::InstrumentationScope {
                                name: s.name,
                                version: s.version,
                                attributes: key_values(s.attributes),
                                dropped_attributes_count: s.dropped_attributes_count,
                            }),
                            spans: ss.spans.into_iter().map(Span::into_proto).collect(),
                            schema_url: ss.schema_url,
                        })
                        .collect(),
                    schema_url: rs.schema_url,
                })
                .collect(),
        }
    }
}

impl Span {
    fn into_proto(self) -> trace::Span {
        trace::Span {
            trace_id: self.trace_id,
            span_id: self.span_id,
            trace_state: self.trace_state,
            parent_span_id: self.parent_span_id,
            flags: self.flags,
            name: self.name,
            kind: self.kind,
            start_time_unix_nano: self.start_time_unix_nano,
            end_time_unix_nano: self.end_time_unix_nano,
            attributes: key_values(self.attributes),
            dropped_attributes_count: self.dropped_attributes_count,
            events: self
                .events
                .into_iter()
                .map(|e| trace::span::Event {
                    time_unix_nano: e.time_unix_nano,
                    name: e.name,
                    attributes: key_values(e.attributes),
                    dropped_attributes_count: e.dropped_attributes_count,
                })
                .collect(),
            dropped_events_count: self.dropped_events_count,
            links: self
                .links
                .into_iter()
                .map(|l| trace::span::Link {
                    trace_id: l.trace_id,
                    span_id: l.span_id,
                    trace_state: l.trace_state,
                    attributes: key_values(l.attributes),
                    dropped_attributes_count: l.dropped_attributes_count,
                    flags: l.flags,
                })
                .collect(),
            dropped_links_count: self.dropped_links_count,
            status: self.status.map(|s| trace::Status {
                message: s.message,
                code: s.code,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::any_value::Value;

    fn attr(req: &ExportTraceServiceRequest, key: &str) -> Option<Value> {
        req.resource_spans[0].scope_spans[0].spans[0]
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone())
            .and_then(|v| v.value)
    }

    #[test]
    fn the_otlp_json_rules() {
        let body = br#"{
          "resourceSpans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "agent"}}]},
            "scopeSpans": [{
              "scope": {"name": "tests", "version": null},
              "spans": [{
                "traceId": "5B8EFFF798038103D269B633813FC60C",
                "spanId": "eee19b7ec3c1b174",
                "parentSpanId": "",
                "name": "chat gpt-4o",
                "kind": 3,
                "startTimeUnixNano": "1544712660000000000",
                "endTimeUnixNano": 1544712661000000000,
                "droppedAttributesCount": "2",
                "futureField": {"anything": [1, 2, 3]},
                "attributes": [
                  {"key": "as_string", "value": {"intValue": "9007199254740993"}},
                  {"key": "as_number", "value": {"intValue": 42}},
                  {"key": "empty_array", "value": {"arrayValue": {}}},
                  {"key": "empty_list", "value": {"kvlistValue": {}}},
                  {"key": "nan", "value": {"doubleValue": "NaN"}},
                  {"key": "bytes", "value": {"bytesValue": "AQID"}},
                  {"key": "url_bytes", "value": {"bytesValue": "-_8"}},
                  {"key": "nested", "value": {"arrayValue": {"values": [{"stringValue": "a"}, {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": true}}]}}]}}},
                  {"key": "unknown_type", "value": {"decimalValue": "1.5"}},
                  {"key": "no_value"}
                ],
                "status": {"code": "STATUS_CODE_ERROR", "message": "boom"}
              }]
            }]
          }]
        }"#;
        let req = decode_request(body).unwrap();
        let span = &req.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(
            hex::encode(&span.trace_id),
            "5b8efff798038103d269b633813fc60c"
        );
        assert_eq!(hex::encode(&span.span_id), "eee19b7ec3c1b174");
        assert!(span.parent_span_id.is_empty());
        assert_eq!(span.kind, 3);
        assert_eq!(span.start_time_unix_nano, 1_544_712_660_000_000_000);
        assert_eq!(span.end_time_unix_nano, 1_544_712_661_000_000_000);
        assert_eq!(span.dropped_attributes_count, 2);
        assert_eq!(span.status.as_ref().unwrap().code, 2);
        assert_eq!(
            attr(&req, "as_string"),
            Some(Value::IntValue(9_007_199_254_740_993))
        );
        assert_eq!(attr(&req, "as_number"), Some(Value::IntValue(42)));
        assert_eq!(
            attr(&req, "empty_array"),
            Some(Value::ArrayValue(common::ArrayValue::default()))
        );
        assert_eq!(
            attr(&req, "empty_list"),
            Some(Value::KvlistValue(common::KeyValueList::default()))
        );
        assert!(matches!(attr(&req, "nan"), Some(Value::DoubleValue(d)) if d.is_nan()));
        assert_eq!(attr(&req, "bytes"), Some(Value::BytesValue(vec![1, 2, 3])));
        assert_eq!(
            attr(&req, "url_bytes"),
            Some(Value::BytesValue(vec![0xfb, 0xff]))
        );
        assert!(matches!(attr(&req, "nested"), Some(Value::ArrayValue(a)) if a.values.len() == 2));
        assert_eq!(attr(&req, "unknown_type"), None);
        assert_eq!(attr(&req, "no_value"), None);
    }

    #[test]
    fn bad_members_are_errors() {
        for body in [
            &br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"AQIDBA=="}]}]}]}"#[..],
            br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":"soon"}]}]}]}"#,
            br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"kind":"SPAN_KIND_NOPE"}]}]}]}"#,
            br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[{"key":"a","value":{"intValue":"x"}}]}]}]}]}"#,
            br#"{"resourceSpans":{}}"#,
            br#"{"resourceSpans":[{"resource":{"attributes":[{"key":"a","value":{"stringValue":"x","intValue":"1"}}]}}]}"#,
        ] {
            assert!(
                decode_request(body).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    /// A time in exponent form is an integer only below 2^53 (where a
    /// double holds every digit); past it the error says what to send.
    #[test]
    fn integers_in_exponent_form_are_read_only_while_exact() {
        let span = |time: &str| {
            format!(
                r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"startTimeUnixNano":{time}}}]}}]}}]}}"#
            )
        };
        let start = |time: &str| {
            decode_request(span(time).as_bytes())
                .map(|r| r.resource_spans[0].scope_spans[0].spans[0].start_time_unix_nano)
        };
        assert_eq!(start("1.7e+15"), Ok(1_700_000_000_000_000));
        assert_eq!(start("1700000000000000000"), Ok(1_700_000_000_000_000_000));
        let error = start("1.7e+18").unwrap_err();
        assert!(
            error.starts_with("1.7e18 is a number in exponent or fraction form beyond 2^53"),
            "{error}"
        );
        assert!(
            start("1.5")
                .unwrap_err()
                .starts_with("1.5 is not an integer")
        );
    }

    /// What `opentelemetry-proto`'s own serde writes, this module reads
    /// back to the same message.
    #[test]
    fn reads_what_opentelemetry_proto_writes() {
        use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
        let kv = |k: &str, v: Value| common::KeyValue {
            key: k.into(),
            value: Some(common::AnyValue { value: Some(v) }),
            ..common::KeyValue::default()
        };
        let req = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", Value::StringValue("svc".into()))],
                    ..Resource::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(common::InstrumentationScope {
                        name: "scope".into(),
                        version: "1.0".into(),
                        ..Default::default()
                    }),
                    spans: vec![trace::Span {
                        trace_id: (1..=16).collect(),
                        span_id: (1..=8).collect(),
                        parent_span_id: (9..=16).collect(),
                        name: "execute_tool get_weather".into(),
                        kind: 1,
                        start_time_unix_nano: 1_700_000_000_123_456_789,
                        end_time_unix_nano: 1_700_000_001_000_000_000,
                        attributes: vec![
                            kv("i", Value::IntValue(-7)),
                            kv("d", Value::DoubleValue(1.5)),
                            kv("b", Value::BoolValue(true)),
                            kv("s", Value::StringValue("x".into())),
                            kv(
                                "a",
                                Value::ArrayValue(common::ArrayValue {
                                    values: vec![common::AnyValue {
                                        value: Some(Value::IntValue(1)),
                                    }],
                                }),
                            ),
                            kv("bytes", Value::BytesValue(vec![0, 255])),
                        ],
                        events: vec![trace::span::Event {
                            time_unix_nano: 5,
                            name: "gen_ai.choice".into(),
                            attributes: vec![kv("index", Value::IntValue(0))],
                            dropped_attributes_count: 0,
                        }],
                        status: Some(trace::Status {
                            message: "m".into(),
                            code: 2,
                        }),
                        ..trace::Span::default()
                    }],
                    schema_url: "https://opentelemetry.io/schemas/1.30.0".into(),
                }],
                schema_url: String::new(),
            }],
        };
        let json = serde_json::to_vec(&req).unwrap();
        assert_eq!(decode_request(&json).unwrap(), req);
    }
}
