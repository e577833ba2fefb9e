//! OTLP/HTTP request bodies: the content encoding (gzip, deflate), then
//! binary protobuf (with `prost` and the maintained `opentelemetry-proto`
//! definitions) or OTLP/JSON (`json.rs`) into an
//! [`ExportTraceServiceRequest`].
//!
//! Everything here is a pure function of its inputs: no I/O, no clock, and
//! no panic on any input (a fuzz target drives [`decode_otlp`]). Sizes are
//! bounded before anything is allocated in proportion to them: the
//! decompressed body ([`DecodeLimits::max_decompressed_bytes`]) and the
//! number of spans ([`DecodeLimits::max_spans`]).

use super::schema::Message;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use std::borrow::Cow;
use std::io::Read as _;

/// The two encodings OTLP/HTTP defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `application/x-protobuf`: binary protobuf.
    Protobuf,
    /// `application/json`: the OTLP/JSON mapping of protobuf.
    Json,
}

impl Encoding {
    /// The encoding a `Content-Type` names, ignoring case and parameters
    /// but a JSON body's `charset` (which must be UTF-8 if given: the body
    /// is read as UTF-8); `None` for any other media type or charset.
    pub fn from_content_type(content_type: &str) -> Option<Encoding> {
        let mut parts = content_type.split(';');
        let mime = parts.next().unwrap_or("").trim();
        // A body is read as UTF-8 (JSON) or bytes (protobuf): a charset
        // other than UTF-8 is one it would misread.
        let other_charset = parts.any(|param| {
            let (name, value) = param.split_once('=').unwrap_or((param, ""));
            name.trim().eq_ignore_ascii_case("charset")
                && !["utf-8", "utf8"]
                    .iter()
                    .any(|utf8| value.trim().trim_matches('"').eq_ignore_ascii_case(utf8))
        });
        if other_charset && !Self::is_protobuf(mime) {
            return None;
        }
        if Self::is_protobuf(mime) {
            Some(Encoding::Protobuf)
        } else if mime.eq_ignore_ascii_case("application/json") {
            Some(Encoding::Json)
        } else {
            None
        }
    }

    fn is_protobuf(mime: &str) -> bool {
        mime.eq_ignore_ascii_case("application/x-protobuf")
            || mime.eq_ignore_ascii_case("application/protobuf")
    }

    /// The `Content-Type` of a response in this encoding.
    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

/// Bounds on what one request may make the server hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Largest body after decompression, in bytes (a gzip bomb stops
    /// here).
    pub max_decompressed_bytes: usize,
    /// Most spans in one request.
    pub max_spans: usize,
    /// Most message instances (spans, attributes, values, events, ...) in
    /// one request, counted before decoding: each costs tens to hundreds of
    /// bytes once decoded but as little as 2 bytes on the wire, so this,
    /// not the body size, bounds a decoded request's memory.
    pub max_elements: usize,
}

impl Default for DecodeLimits {
    fn default() -> DecodeLimits {
        DecodeLimits {
            max_decompressed_bytes: 16 * 1024 * 1024,
            max_spans: 10_000,
            max_elements: 1_000_000,
        }
    }
}

/// Why a body was not decoded. Nothing of the request is recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The `Content-Type` is neither protobuf nor JSON (HTTP 415).
    #[error(
        "unsupported content type {0:?}: OTLP/HTTP bodies are application/x-protobuf or application/json (read as UTF-8: a JSON body's charset, if given, must be utf-8)"
    )]
    UnsupportedMediaType(String),
    /// The `Content-Encoding` is not gzip, deflate or identity (HTTP 415).
    #[error("unsupported content encoding {0:?}: send gzip, deflate or an uncompressed body")]
    UnsupportedEncoding(String),
    /// The body is larger than the limit, compressed or not (HTTP 413).
    #[error(
        "the body is larger than {limit} bytes{}: export smaller batches",
        if *.decompressed { " once decompressed" } else { "" }
    )]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
        /// Whether the limit was hit while decompressing.
        decompressed: bool,
    },
    /// The compressed body does not decompress (HTTP 400).
    #[error("the body is not valid {encoding} data: {detail}")]
    BadCompression {
        /// `gzip` or `deflate`.
        encoding: &'static str,
        /// What the decompressor said.
        detail: String,
    },
    /// Not an `ExportTraceServiceRequest` in binary protobuf (HTTP 400).
    #[error("the body is not a protobuf ExportTraceServiceRequest: {0}")]
    BadProtobuf(String),
    /// Not an `ExportTraceServiceRequest` in OTLP/JSON (HTTP 400).
    #[error("the body is not an OTLP/JSON ExportTraceServiceRequest: {0}")]
    BadJson(String),
    /// A seed-004 signed complete trace sent to the OTLP path (HTTP 400).
    #[error(
        "this is a signed complete trace (seed 004), not OTLP: import it with POST /v1/signed-traces"
    )]
    SignedTrace,
    /// More message instances than [`DecodeLimits::max_elements`] (HTTP
    /// 400).
    #[error(
        "the request holds more than {limit} values (spans, attributes, events, array items): export smaller batches"
    )]
    TooManyElements {
        /// The limit.
        limit: usize,
    },
    /// More spans than [`DecodeLimits::max_spans`] (HTTP 400).
    #[error(
        "the request holds {count} spans; the most one request may hold is {limit}: export smaller batches"
    )]
    TooManySpans {
        /// Spans in the request.
        count: usize,
        /// The limit.
        limit: usize,
    },
}

/// Undoes a `Content-Encoding` (`gzip`, `x-gzip`, `deflate`, `identity`
/// or none), refusing to produce more than `limit` bytes.
pub fn decompress<'a>(
    content_encoding: Option<&str>,
    body: &'a [u8],
    limit: usize,
) -> Result<Cow<'a, [u8]>, DecodeError> {
    let encoding = content_encoding.map(str::trim).unwrap_or("");
    let (name, reader): (&'static str, Box<dyn std::io::Read + 'a>) =
        if encoding.is_empty() || encoding.eq_ignore_ascii_case("identity") {
            if body.len() > limit {
                return Err(DecodeError::TooLarge {
                    limit,
                    decompressed: false,
                });
            }
            return Ok(Cow::Borrowed(body));
        } else if encoding.eq_ignore_ascii_case("gzip") || encoding.eq_ignore_ascii_case("x-gzip") {
            ("gzip", Box::new(flate2::read::MultiGzDecoder::new(body)))
        } else if encoding.eq_ignore_ascii_case("deflate") {
            ("deflate", Box::new(flate2::read::ZlibDecoder::new(body)))
        } else {
            return Err(DecodeError::UnsupportedEncoding(
                encoding.chars().take(40).collect(),
            ));
        };
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(limit));
    // One byte more than the limit tells "exactly the limit" from "over".
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::BadCompression {
            encoding: name,
            detail: e.to_string(),
        })?;
    if out.len() > limit {
        return Err(DecodeError::TooLarge {
            limit,
            decompressed: true,
        });
    }
    Ok(Cow::Owned(out))
}

/// Decodes an uncompressed OTLP traces body with the default limits.
/// Never panics, whatever the input.
pub fn decode_otlp(
    content_type: &str,
    body: &[u8],
) -> Result<ExportTraceServiceRequest, DecodeError> {
    decode_otlp_with(content_type, body, &DecodeLimits::default())
}

/// Decodes an uncompressed OTLP traces body: the encoding named by
/// `content_type`, then the span count checked against `limits`.
pub fn decode_otlp_with(
    content_type: &str,
    body: &[u8],
    limits: &DecodeLimits,
) -> Result<ExportTraceServiceRequest, DecodeError> {
    let encoding = Encoding::from_content_type(content_type).ok_or_else(|| {
        DecodeError::UnsupportedMediaType(content_type.chars().take(80).collect())
    })?;
    if body.len() > limits.max_decompressed_bytes {
        return Err(DecodeError::TooLarge {
            limit: limits.max_decompressed_bytes,
            decompressed: false,
        });
    }
    // Neither encoding can start with gzip's magic bytes (a protobuf tag
    // of wire type 7 does not exist; JSON starts with text): a compressed
    // body sent without its header is named as such.
    if body.starts_with(&[0x1f, 0x8b]) {
        let detail = "it starts with gzip's magic bytes (1f 8b), once any Content-Encoding is undone: a gzip-compressed body needs the header Content-Encoding: gzip (OTEL_EXPORTER_OTLP_COMPRESSION=gzip makes the SDK send both), and is compressed once".to_owned();
        return Err(match encoding {
            Encoding::Protobuf => DecodeError::BadProtobuf(detail),
            Encoding::Json => DecodeError::BadJson(detail),
        });
    }
    // Count before allocating: spans and every other message instance.
    let budget = match encoding {
        Encoding::Protobuf => protobuf_budget(body, limits)?,
        Encoding::Json => json_budget(body, limits)?,
    };
    if budget.spans > limits.max_spans {
        return Err(DecodeError::TooManySpans {
            count: budget.spans,
            limit: limits.max_spans,
        });
    }
    let request = match encoding {
        Encoding::Protobuf => ExportTraceServiceRequest::decode(body)
            .map_err(|e| DecodeError::BadProtobuf(e.to_string()))?,
        Encoding::Json => {
            let request = super::json::decode_request(body).map_err(DecodeError::BadJson)?;
            if request.resource_spans.is_empty() && is_signed_trace(body) {
                return Err(DecodeError::SignedTrace);
            }
            request
        }
    };
    let count = span_count(&request);
    if count > limits.max_spans {
        return Err(DecodeError::TooManySpans {
            count,
            limit: limits.max_spans,
        });
    }
    Ok(request)
}

/// What a body holds, counted without decoding it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Budget {
    spans: usize,
    elements: usize,
}

/// Counts the spans and message instances of a protobuf
/// `ExportTraceServiceRequest` in one pass with `prost`'s wire primitives,
/// allocating nothing; stops as soon as a limit is passed. Malformed input
/// is left for the decoder to report.
fn protobuf_budget(body: &[u8], limits: &DecodeLimits) -> Result<Budget, DecodeError> {
    use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};
    fn walk(
        mut buf: &[u8],
        msg: Message,
        depth: u32,
        budget: &mut Budget,
        limits: &DecodeLimits,
    ) -> Result<(), DecodeError> {
        let malformed = |e: prost::DecodeError| DecodeError::BadProtobuf(e.to_string());
        while !buf.is_empty() {
            let (tag, wire) = decode_key(&mut buf).map_err(malformed)?;
            match msg.child(tag) {
                Some(child) if wire == WireType::LengthDelimited => {
                    let len = decode_varint(&mut buf).map_err(malformed)?;
                    let len = usize::try_from(len)
                        .ok()
                        .filter(|l| *l <= buf.len())
                        .ok_or_else(|| DecodeError::BadProtobuf("buffer underflow".into()))?;
                    let (inner, rest) = buf.split_at(len);
                    buf = rest;
                    budget.elements += 1;
                    if child == Message::Span {
                        budget.spans += 1;
                        if budget.spans > limits.max_spans {
                            return Ok(());
                        }
                    }
                    if budget.elements > limits.max_elements {
                        return Err(DecodeError::TooManyElements {
                            limit: limits.max_elements,
                        });
                    }
                    if depth >= 100 {
                        return Err(DecodeError::BadProtobuf("nested too deep".into()));
                    }
                    walk(inner, child, depth + 1, budget, limits)?;
                }
                _ => {
                    skip_field(wire, tag, &mut buf, DecodeContext::default()).map_err(malformed)?
                }
            }
        }
        Ok(())
    }
    let mut budget = Budget::default();
    walk(body, Message::Request, 0, &mut budget, limits)?;
    Ok(budget)
}

/// Why a protobuf body that decoded to no span at all likely held some:
/// resource spans holding field 1000, `instrumentation_library_spans`, the
/// spans of OTLP before 0.19 (which the current messages do not have, so
/// the decoder skips them). `None` for a body without. Reads the request's
/// resource spans only (their other fields skipped unread).
pub fn protobuf_hint(body: &[u8]) -> Option<String> {
    use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};
    /// Each length-delimited field `field` of `buf`'s message.
    fn each(mut buf: &[u8], field: u32, found: &mut dyn FnMut(&[u8]) -> bool) -> Option<bool> {
        while !buf.is_empty() {
            let (tag, wire) = decode_key(&mut buf).ok()?;
            if tag == field && wire == WireType::LengthDelimited {
                let len = usize::try_from(decode_varint(&mut buf).ok()?).ok()?;
                let (inner, rest) = (buf.get(..len)?, buf.get(len..)?);
                buf = rest;
                if found(inner) {
                    return Some(true);
                }
            } else {
                skip_field(wire, tag, &mut buf, DecodeContext::default()).ok()?;
            }
        }
        Some(false)
    }
    let old_spans = each(body, 1, &mut |resource_spans| {
        each(resource_spans, 1000, &mut |_| true) == Some(true)
    });
    (old_spans == Some(true)).then(|| {
        "no span was found in this protobuf body: its resource spans hold instrumentation_library_spans (field 1000), the spans of OTLP before 0.19, which Cairn does not read; export with an OpenTelemetry SDK or collector of OTLP 0.19 or later (scope_spans)".to_owned()
    })
}

/// Counts the objects, arrays and `null`s of an OTLP/JSON body (each
/// message instance is one, and a `null` in a list of values decodes to
/// an empty value: four bytes each, a message instance) and its spans
/// (objects three levels under `resourceSpans`, approximated by the
/// `"spans"` arrays' objects), in one pass over the bytes, allocating
/// nothing.
fn json_budget(body: &[u8], limits: &DecodeLimits) -> Result<Budget, DecodeError> {
    let mut budget = Budget::default();
    let mut in_string = false;
    let mut escaped = false;
    // Depth of the innermost open `"spans": [` array, if any.
    let mut depth = 0usize;
    let mut spans_at: Option<usize> = None;
    let mut last_key_spans = false;
    let mut key_start = 0usize;
    for (i, &b) in body.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
                last_key_spans = &body[key_start..i] == b"spans";
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                key_start = i + 1;
            }
            b'{' | b'[' => {
                depth += 1;
                budget.elements += 1;
                if b == b'[' && last_key_spans && spans_at.is_none() {
                    spans_at = Some(depth);
                } else if spans_at == Some(depth - 1) {
                    // A span written as an object, or as an array (which
                    // the decoder reads as a span of default fields).
                    budget.spans += 1;
                }
                if budget.elements > limits.max_elements {
                    return Err(DecodeError::TooManyElements {
                        limit: limits.max_elements,
                    });
                }
                last_key_spans = false;
            }
            b']' | b'}' => {
                if spans_at == Some(depth) {
                    spans_at = None;
                }
                depth = depth.saturating_sub(1);
                last_key_spans = false;
            }
            b'n' => {
                // `null` (the only bare word starting with n).
                budget.elements += 1;
                if budget.elements > limits.max_elements {
                    return Err(DecodeError::TooManyElements {
                        limit: limits.max_elements,
                    });
                }
                last_key_spans = false;
            }
            b':' | b' ' | b'\n' | b'\r' | b'\t' => {}
            _ => last_key_spans = false,
        }
    }
    Ok(budget)
}

/// Spans in a request.
pub fn span_count(request: &ExportTraceServiceRequest) -> usize {
    request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len())
        .sum()
}

/// A seed-004 complete trace: a JSON object with `components` and a
/// `signature` (OTLP/JSON ignores unknown members, so such a body would
/// otherwise decode as an empty export).
fn is_signed_trace(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe {
        components: Option<serde::de::IgnoredAny>,
        signature: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Probe>(body)
        .is_ok_and(|p| p.components.is_some() && p.signature.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use std::io::Write as _;

    /// Resource spans holding OTLP before 0.19's spans (field 1000, which
    /// the decoder skips) are named; a body without them is not.
    #[test]
    fn protobuf_spans_of_otlp_before_0_19_are_named() {
        use prost::encoding::{WireType, encode_key, encode_varint};
        // ResourceSpans { 1000: InstrumentationLibrarySpans { 2: Span {} } }
        let mut library_spans = Vec::new();
        encode_key(2, WireType::LengthDelimited, &mut library_spans);
        encode_varint(0, &mut library_spans);
        let mut resource_spans = Vec::new();
        encode_key(1000, WireType::LengthDelimited, &mut resource_spans);
        encode_varint(library_spans.len() as u64, &mut resource_spans);
        resource_spans.extend(&library_spans);
        let mut body = Vec::new();
        encode_key(1, WireType::LengthDelimited, &mut body);
        encode_varint(resource_spans.len() as u64, &mut body);
        body.extend(&resource_spans);
        let decoded = decode_otlp("application/x-protobuf", &body).unwrap();
        assert_eq!(span_count(&decoded), 0);
        let hint = protobuf_hint(&body).unwrap();
        assert!(
            hint.contains("instrumentation_library_spans (field 1000)"),
            "{hint}"
        );
        assert_eq!(protobuf_hint(&request(2).encode_to_vec()), None);
        assert_eq!(protobuf_hint(&[]), None);
        assert_eq!(protobuf_hint(&[0x0a, 0xff]), None);
    }

    fn request(spans: usize) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: (0..spans)
                        .map(|i| Span {
                            trace_id: vec![1; 16],
                            span_id: vec![i as u8 + 1; 8],
                            name: format!("span {i}"),
                            ..Span::default()
                        })
                        .collect(),
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            }],
        }
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn content_types() {
        for (ct, enc) in [
            ("application/x-protobuf", Some(Encoding::Protobuf)),
            (
                "Application/X-Protobuf; charset=binary",
                Some(Encoding::Protobuf),
            ),
            ("application/protobuf", Some(Encoding::Protobuf)),
            ("application/json", Some(Encoding::Json)),
            ("application/json; charset=utf-8", Some(Encoding::Json)),
            ("text/plain", None),
            ("", None),
        ] {
            assert_eq!(Encoding::from_content_type(ct), enc, "{ct}");
        }
        assert!(matches!(
            decode_otlp("text/plain", b"{}"),
            Err(DecodeError::UnsupportedMediaType(_))
        ));
    }

    #[test]
    fn protobuf_round_trip() {
        let req = request(3);
        let decoded = decode_otlp("application/x-protobuf", &req.encode_to_vec()).unwrap();
        assert_eq!(decoded, req);
    }

    #[test]
    fn malformed_bodies_are_errors() {
        assert!(matches!(
            decode_otlp("application/x-protobuf", &[0x0a, 0xff, 0xff, 0x01]),
            Err(DecodeError::BadProtobuf(_))
        ));
        assert!(matches!(
            decode_otlp("application/json", b"{\"resourceSpans\": 4"),
            Err(DecodeError::BadJson(_))
        ));
        assert!(matches!(
            decode_otlp("application/json", b"[1,2]"),
            Err(DecodeError::BadJson(_))
        ));
    }

    #[test]
    fn gzip_and_deflate_decompress_within_the_limit() {
        let raw = request(2).encode_to_vec();
        let gz = gzip(&raw);
        let out = decompress(Some("gzip"), &gz, 1 << 20).unwrap();
        assert_eq!(&*out, &raw[..]);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&raw).unwrap();
        let deflated = z.finish().unwrap();
        let out = decompress(Some("deflate"), &deflated, 1 << 20).unwrap();
        assert_eq!(&*out, &raw[..]);
        assert!(matches!(
            decompress(None, &raw, 1 << 20),
            Ok(Cow::Borrowed(_))
        ));
        assert!(matches!(
            decompress(Some("br"), &raw, 1 << 20),
            Err(DecodeError::UnsupportedEncoding(_))
        ));
        assert!(matches!(
            decompress(Some("gzip"), b"not gzip", 1 << 20),
            Err(DecodeError::BadCompression { .. })
        ));
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_limit() {
        // 64 MiB of zeros compress to about 64 KiB.
        let bomb = gzip(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 1 << 20);
        assert_eq!(
            decompress(Some("gzip"), &bomb, 1 << 20).unwrap_err(),
            DecodeError::TooLarge {
                limit: 1 << 20,
                decompressed: true
            }
        );
        let exact = gzip(&[7u8; 1000]);
        assert_eq!(decompress(Some("gzip"), &exact, 1000).unwrap().len(), 1000);
        assert!(decompress(Some("gzip"), &exact, 999).is_err());
    }

    #[test]
    fn too_many_spans_are_refused() {
        let limits = DecodeLimits {
            max_spans: 2,
            ..DecodeLimits::default()
        };
        let body = request(3).encode_to_vec();
        assert_eq!(
            decode_otlp_with("application/x-protobuf", &body, &limits).unwrap_err(),
            DecodeError::TooManySpans { count: 3, limit: 2 }
        );
    }

    #[test]
    fn elements_are_counted_before_decoding() {
        // 3 MB of empty attributes (2 bytes each on the wire, ~64 bytes
        // each decoded) are refused before anything is allocated for them.
        let mut req = request(1);
        req.resource_spans[0].scope_spans[0].spans[0].attributes =
            vec![opentelemetry_proto::tonic::common::v1::KeyValue::default(); 1_500_000];
        let body = req.encode_to_vec();
        assert_eq!(
            decode_otlp("application/x-protobuf", &body).unwrap_err(),
            DecodeError::TooManyElements { limit: 1_000_000 }
        );
        let limits = DecodeLimits {
            max_spans: 3,
            ..DecodeLimits::default()
        };
        let budget = protobuf_budget(&request(3).encode_to_vec(), &limits).unwrap();
        assert_eq!(budget.spans, 3);
        assert_eq!(budget.elements, 1 + 1 + 3);
        // Empty spans: counted, refused past the span limit.
        let json = format!(
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{}], "x": "\"spans\": [{{}}]"}}]}}]}}"#,
            ["{}"; 4].join(",")
        );
        assert_eq!(json_budget(json.as_bytes(), &limits).unwrap().spans, 4);
        assert_eq!(
            decode_otlp_with("application/json", json.as_bytes(), &limits).unwrap_err(),
            DecodeError::TooManySpans { count: 4, limit: 3 }
        );
        let objects = format!("[{}]", vec!["{}"; 1_000_001].join(","));
        assert_eq!(
            decode_otlp("application/json", objects.as_bytes()).unwrap_err(),
            DecodeError::TooManyElements { limit: 1_000_000 }
        );
        // A null in a list of values decodes to an empty value: counted
        // (3.3 million of them in 16 MB took 300 MB to decode).
        let nulls = format!(
            r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"k","value":{{"arrayValue":{{"values":[{}]}}}}}}]}}}}]}}"#,
            vec!["null"; 1_000_001].join(",")
        );
        assert_eq!(
            decode_otlp("application/json", nulls.as_bytes()).unwrap_err(),
            DecodeError::TooManyElements { limit: 1_000_000 }
        );
        // Spans written as arrays are spans (999,990 `[]` took 305 MB to
        // decode before the span limit refused them).
        let arrays = format!(
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
            ["[]"; 4].join(",")
        );
        assert_eq!(json_budget(arrays.as_bytes(), &limits).unwrap().spans, 4);
        assert_eq!(
            decode_otlp_with("application/json", arrays.as_bytes(), &limits).unwrap_err(),
            DecodeError::TooManySpans { count: 4, limit: 3 }
        );
        // Strings holding n's are not nulls.
        let text = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"nnn","value":{"stringValue":"null"}}]}}]}"#;
        assert_eq!(json_budget(text.as_bytes(), &limits).unwrap().elements, 7);
    }

    #[test]
    fn a_signed_trace_is_pointed_to_its_own_path() {
        let trace = br#"{"trace_id":"t-1","components":[{"event_type":"THOUGHT_START"}],"signature":"AAAA","signature_key_id":"agent-1"}"#;
        let err = decode_otlp("application/json", trace).unwrap_err();
        assert_eq!(err, DecodeError::SignedTrace);
        assert!(err.to_string().contains("/v1/signed-traces"));
        // An empty export is not one.
        assert_eq!(
            decode_otlp("application/json", b"{}").unwrap(),
            ExportTraceServiceRequest::default()
        );
    }

    /// Arbitrary bytes never panic in either decoder.
    #[test]
    fn arbitrary_bytes_do_not_panic() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let seed = request(4).encode_to_vec();
        for round in 0..4000 {
            let mut bytes = if round % 2 == 0 {
                seed.clone()
            } else {
                br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102","attributes":[{"key":"a","value":{"intValue":"12"}}]}]}]}]}"#.to_vec()
            };
            for _ in 0..(next() % 8) {
                let at = (next() as usize) % bytes.len();
                bytes[at] = next() as u8;
            }
            let cut = (next() as usize) % (bytes.len() + 1);
            bytes.truncate(cut);
            let _ = decode_otlp("application/x-protobuf", &bytes);
            let _ = decode_otlp("application/json", &bytes);
            let _ = decompress(Some("gzip"), &bytes, 1 << 16);
        }
    }
}
