//! OTLP/HTTP ingest: OpenTelemetry spans (GenAI semantic conventions,
//! OpenInference) become hash-chained steps, with no change to the agent's
//! code (`docs/OTLP.md`).
//!
//! - `POST /v1/traces` takes an `ExportTraceServiceRequest` in binary
//!   protobuf or OTLP/JSON, optionally gzip- or deflate-compressed
//!   ([`decode`]), maps each span to steps ([`map`]) and writes them
//!   through the same [`cairn_store::Ledger`] as the REST API. The answer
//!   is an `ExportTraceServiceResponse` in the request's encoding, with
//!   `partial_success` counting the spans refused.
//! - `POST /v1/metrics` and `POST /v1/logs` are decoded and answered with
//!   every item rejected in `partial_success`: Cairn records traces only.
//! - Errors are OTLP `Status` messages in the request's encoding (the JSON
//!   form also carries Cairn's `{"error": {"code", "message"}}`).
//! - Exporter retries add nothing: each step's id derives from its trace
//!   id, span id and position, and a duplicate counts as recorded.
//! - A saturated sequencer answers 429 with `Retry-After` before anything
//!   is queued; the exporter retries.
//!
//! This file holds what both kinds of endpoint share: the settings and
//! state, OTLP error answers, admitting a request (its writer, encoding
//! and body), the backlog check, the CPU-bound pool, the success answers,
//! and the OTLP listener's router; `POST /v1/traces` (decode, map, submit,
//! answer) is in `ingest`, `POST /v1/metrics` and `POST /v1/logs` (counted
//! and answered, not stored) in `discard`.

mod discard;
mod held;
pub use held::HeldFlusher;
mod ingest;

// Decoding and mapping are `cairn-wire`'s (parsers of outside bytes, fuzzed
// without the server).
pub use cairn_wire::otlp::{
    DecodeError, DecodeLimits, Encoding, decode, decode_otlp, decode_otlp_with, decompress, map,
};
// `routes!(otlp::traces)` also names the `__path_` type that utoipa
// generates beside each handler.
pub(crate) use discard::{__path_logs, __path_metrics, logs, metrics};
pub(crate) use ingest::{__path_traces, traces};

use crate::{AppState, Caller};
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prost::Message as _;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Limits and settings of OTLP ingest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OtlpConfig {
    /// Largest request body as sent (compressed or not), in bytes.
    pub max_body_bytes: usize,
    /// Largest body once decompressed, and most spans per request.
    pub decode: DecodeLimits,
    /// Largest string attribute kept whole in a step's metadata.
    pub max_attribute_bytes: usize,
    /// Steps the sequencer may hold (queued or committing) before OTLP
    /// requests are answered 429: the backpressure threshold.
    pub max_backlog: usize,
    /// Requests decoded and mapped at once (each holds its decoded body);
    /// one org's at most half of them (at least one).
    pub decode_permits: usize,
    /// OTLP requests handled at once, from reading the body to the answer
    /// (each holds its body); one org's at most half of them (at least
    /// one); more are answered 429 at once.
    pub max_requests: usize,
    /// How long a span named by no session waits for a span of its trace
    /// that names one (docs/OTLP.md "Spans waiting for their session");
    /// zero: never held, written at once into the session named after
    /// its trace.
    pub hold_for: Duration,
    /// The most bytes (of their steps' JSON) an org's held spans may take;
    /// past it, spans are written at once as if holding were off.
    pub max_held_bytes: u64,
}

impl Default for OtlpConfig {
    fn default() -> OtlpConfig {
        OtlpConfig {
            max_body_bytes: 16 * 1024 * 1024,
            decode: DecodeLimits::default(),
            max_attribute_bytes: 16 * 1024,
            max_backlog: 65_536,
            decode_permits: 2,
            max_requests: 64,
            hold_for: Duration::from_secs(120),
            max_held_bytes: 64 * 1024 * 1024,
        }
    }
}

/// The most bytes of mapped steps (as `MappedStep::counted_bytes` counts
/// them) that OTLP requests may hold submitted and not yet written; a
/// request that would take them past it is answered 429 (unless none are
/// held: one request's steps, at most 128 MiB, always go through).
pub const MAX_HELD_STEP_BYTES: usize = 256 * 1024 * 1024;

/// What OTLP ingest keeps between requests.
pub(crate) struct OtlpState {
    /// The decode slots: the server's, and each org's share (half).
    decode: crate::limits::ExpensiveSlots,
    /// The request slots: the server's, and each org's share (half), so
    /// that one org's slow senders cannot hold every slot.
    requests: crate::limits::ExpensiveSlots,
    /// Bytes of steps submitted by OTLP requests and not yet written.
    held_bytes: crate::limits::MemoryBudget,
    /// What happened to spans that waited for their session.
    pub(crate) held: Arc<held::HeldStats>,
}

impl OtlpState {
    pub(crate) fn new(config: &OtlpConfig) -> OtlpState {
        OtlpState {
            decode: crate::limits::ExpensiveSlots::new(config.decode_permits),
            requests: crate::limits::ExpensiveSlots::new(config.max_requests),
            held_bytes: crate::limits::MemoryBudget::new(MAX_HELD_STEP_BYTES),
            held: Arc::default(),
        }
    }

    /// Counts `bytes` of steps of `org` as held until the guard is
    /// dropped, or answers 429 if that would take what requests hold past
    /// [`MAX_HELD_STEP_BYTES`], or what the org's requests hold past half
    /// of it (when some are held), so that one org's exports leave the
    /// other half to other orgs.
    fn hold(&self, org: &str, bytes: usize) -> Result<HeldBytes, OtlpError> {
        self.held_bytes.hold(Some(org), bytes).map_err(|now| {
            OtlpError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "overloaded",
                format!(
                    "OTLP requests hold {} MiB of steps not yet written, as many as the server (limit {} MiB) or one org (half of it) may: retry after the delay",
                    now >> 20,
                    MAX_HELD_STEP_BYTES >> 20
                ),
            )
            .retry_after(1)
        })
    }
}

/// Bytes of steps an OTLP request submitted, counted as held until it has
/// its answers.
pub(super) type HeldBytes = crate::limits::HeldMemory;

/// gRPC status codes used in OTLP `Status` messages.
mod code {
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const NOT_FOUND: i32 = 5;
    pub const PERMISSION_DENIED: i32 = 7;
    pub const RESOURCE_EXHAUSTED: i32 = 8;
    pub const INTERNAL: i32 = 13;
    pub const UNAVAILABLE: i32 = 14;
    pub const UNAUTHENTICATED: i32 = 16;
}

/// `google.rpc.Status`, the body of every OTLP/HTTP error.
#[derive(Clone, PartialEq, prost::Message)]
struct Status {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// An OTLP error answer.
#[derive(Debug)]
struct OtlpError {
    status: StatusCode,
    grpc: i32,
    code: &'static str,
    message: String,
    retry_after: Option<u64>,
}

impl OtlpError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> OtlpError {
        let grpc = match status {
            StatusCode::UNAUTHORIZED => code::UNAUTHENTICATED,
            StatusCode::FORBIDDEN => code::PERMISSION_DENIED,
            StatusCode::NOT_FOUND => code::NOT_FOUND,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::PAYLOAD_TOO_LARGE => {
                code::RESOURCE_EXHAUSTED
            }
            StatusCode::SERVICE_UNAVAILABLE => code::UNAVAILABLE,
            s if s.is_server_error() => code::INTERNAL,
            _ => code::INVALID_ARGUMENT,
        };
        OtlpError {
            status,
            grpc,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    fn retry_after(mut self, seconds: u64) -> OtlpError {
        self.retry_after = Some(seconds);
        self
    }

    fn into_response(self, encoding: Encoding) -> Response {
        // A message may quote what was sent (a member, a header's value).
        let message = crate::error::without_tokens(&self.message);
        let mut response = match encoding {
            Encoding::Protobuf => (
                self.status,
                [(header::CONTENT_TYPE, encoding.content_type())],
                Status {
                    code: self.grpc,
                    message: message.clone(),
                }
                .encode_to_vec(),
            )
                .into_response(),
            Encoding::Json => (
                self.status,
                axum::Json(json!({
                    "code": self.grpc,
                    "message": message,
                    "error": {"code": self.code, "message": message},
                })),
            )
                .into_response(),
        };
        if let Some(seconds) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&seconds.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        response
    }
}

impl From<crate::ApiError> for OtlpError {
    fn from(e: crate::ApiError) -> OtlpError {
        OtlpError::new(e.status, e.code, e.message)
    }
}

impl From<DecodeError> for OtlpError {
    fn from(e: DecodeError) -> OtlpError {
        let (status, code) = match &e {
            DecodeError::UnsupportedMediaType(_) | DecodeError::UnsupportedEncoding(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            DecodeError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            DecodeError::SignedTrace => (StatusCode::BAD_REQUEST, "signed_trace"),
            DecodeError::TooManySpans { .. } | DecodeError::TooManyElements { .. } => {
                (StatusCode::BAD_REQUEST, "too_many_spans")
            }
            _ => (StatusCode::BAD_REQUEST, "invalid_otlp"),
        };
        OtlpError::new(status, code, e.to_string())
    }
}

/// The encoding of the request (for the answer): protobuf unless the
/// request said JSON.
fn request_encoding(headers: &HeaderMap) -> (Encoding, Option<String>) {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let encoding = content_type
        .as_deref()
        .and_then(Encoding::from_content_type)
        .unwrap_or(Encoding::Json);
    (encoding, content_type)
}

/// The authenticated writer of an OTLP request, and its body as sent.
async fn admit(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    body: Body,
    encoding: Encoding,
    content_type: Option<&str>,
) -> Result<(Caller, axum::body::Bytes, RequestSlot), OtlpError> {
    let caller = crate::authenticate(state, headers).await?;
    caller.require(caller.key.role.can_write(), "export telemetry")?;
    Caller::require_enabled(state)?;
    if content_type.and_then(Encoding::from_content_type) != Some(encoding) {
        return Err(
            DecodeError::UnsupportedMediaType(content_type.unwrap_or("").to_owned()).into(),
        );
    }
    // A request slot before the body is read: the slots bound the bodies
    // held at once, and one org holds at most half of them.
    let slots = &state.otlp.requests;
    let slot = crate::limits::slot_now(slots, caller.org()).map_err(|full| {
        let total = state.config.otlp.max_requests.max(1);
        let message = match full {
            crate::limits::Full::Org => format!(
                "org {} has as many OTLP requests being handled as one org may ({} of the server's {total}): retry after the delay",
                crate::shown(caller.org()),
                slots.per_org()
            ),
            crate::limits::Full::Server => {
                format!("{total} OTLP requests are being handled: retry after the delay")
            }
        };
        OtlpError::new(StatusCode::TOO_MANY_REQUESTS, "overloaded", message).retry_after(1)
    })?;
    let limit = state.config.otlp.max_body_bytes;
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|e| {
        // A body past the limit is OTLP's own 413; one that arrived too
        // slowly is the API's 408 (it had been answered 413 too).
        let error = crate::limits::body_error(&e, limit);
        if error.status == StatusCode::PAYLOAD_TOO_LARGE {
            OtlpError::from(DecodeError::TooLarge {
                limit,
                decompressed: false,
            })
        } else {
            OtlpError::from(error)
        }
    })?;
    Ok((caller, bytes, slot))
}

/// One of the OTLP request slots, held from before the body is read until
/// every step of the request is written or refused.
pub(super) type RequestSlot = crate::limits::ExpensiveSlot;

fn content_encoding(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("(not text)").to_owned())
}

/// A 429 when the sequencer's backlog is full: before reading a request
/// (`adding` 0: the backlog is at the limit), and before queueing its
/// steps (they would take it past the limit; a request larger than the
/// limit still goes through an empty queue). A limit of 0 refuses every
/// export.
fn saturated(state: &AppState, adding: usize) -> Option<OtlpError> {
    let backlog = state.ledger.backlog();
    let max = state.config.otlp.max_backlog;
    let full = if adding == 0 {
        backlog >= max
    } else {
        backlog > 0 && backlog.saturating_add(adding) > max
    };
    full.then(|| {
        OtlpError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "overloaded",
            format!(
                "the ledger's write queue holds {backlog} steps (limit {max}): retry after the delay"
            ),
        )
        .retry_after(1)
    })
}

/// Runs CPU-bound work (decoding, mapping, hashing) on the blocking pool,
/// holding one of the decode slots (which bound the memory of decoded
/// bodies) of `org`'s share and the server's: one org's requests, however
/// slow, leave the other half of the slots to other orgs.
async fn cpu<T: Send + 'static>(
    state: &Arc<AppState>,
    org: &str,
    work: impl FnOnce() -> Result<T, OtlpError> + Send + 'static,
) -> Result<T, OtlpError> {
    let slot = crate::limits::slot_in_turn(&state.otlp.decode, org)
        .await
        .map_err(|_| {
            OtlpError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "shutting down",
            )
        })?;
    // The slot goes with the work: a client that hangs up drops this
    // future, not the work already handed to the blocking pool, and the
    // slot is given back only when that work ends.
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        work()
    })
    .await
    .map_err(|_| {
        OtlpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "a worker failed",
        )
    })?
}

fn protobuf_ok(message: impl prost::Message) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, Encoding::Protobuf.content_type())],
        message.encode_to_vec(),
    )
        .into_response()
}

fn json_ok(partial: Option<Value>) -> Response {
    let body = match partial {
        Some(p) => json!({"partialSuccess": p}),
        None => json!({}),
    };
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// The router of the OTLP listener (`--otlp-listen`): only the OTLP paths,
/// and an OTLP-shaped 404 elsewhere. Its bodies and requests are timed as
/// the main port's are (a body's deadline and idle time, 408; a request's
/// time, 503): a request holds an OTLP slot and its body's bytes while it
/// is read, so a client that stops sending must not keep them.
pub fn router(state: Arc<AppState>) -> axum::Router {
    use axum::routing::post;
    let limits = state.config.limits.clone();
    let routes = axum::Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/metrics", post(metrics))
        .route("/v1/logs", post(logs))
        .fallback(|headers: HeaderMap, uri: axum::http::Uri| async move {
            let (encoding, _) = request_encoding(&headers);
            let hint = crate::routes::misjoined_path_hint(uri.path()).unwrap_or_default();
            OtlpError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!(
                    "this listener serves OTLP/HTTP only: POST /v1/traces, /v1/metrics, /v1/logs{hint}"
                ),
            )
            .into_response(encoding)
        });
    crate::limits::timed(routes, &limits)
        .layer(axum::middleware::from_fn(timeouts_in_otlp_shape))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            crate::routes::count_errors,
        ))
        .with_state(state)
}

/// The request timeout's answer (an empty `503`) as an OTLP error in the
/// request's encoding, as every other refusal of this listener is (a
/// protobuf exporter gets a `Status`, not the API's JSON).
async fn timeouts_in_otlp_shape(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let (encoding, _) = request_encoding(request.headers());
    let response = next.run(request).await;
    if response.status() == StatusCode::SERVICE_UNAVAILABLE
        && !response.headers().contains_key(header::CONTENT_TYPE)
    {
        return OtlpError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "timeout",
            "the request took longer than the server's request timeout: send it again (a resent export records nothing twice)",
        )
        .retry_after(1)
        .into_response(encoding);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The bytes of steps OTLP requests hold are bounded: one request
    /// alone goes through whatever its size, a second that would pass
    /// the limit is answered 429, and what a finished request held is
    /// given back.
    #[test]
    fn held_step_bytes_are_bounded() {
        let state = OtlpState::new(&OtlpConfig::default());
        let alone = state
            .hold("a", MAX_HELD_STEP_BYTES + 10)
            .expect("alone, any size");
        let refused = state.hold("b", 1).err().expect("past the limit");
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.retry_after, Some(1));
        drop(alone);
        // One org holds at most half: the other half is left to others.
        let a = state.hold("a", MAX_HELD_STEP_BYTES / 2).unwrap();
        assert!(state.hold("a", 1).is_err(), "past the org's half");
        let b = state.hold("b", MAX_HELD_STEP_BYTES / 2).unwrap();
        assert!(state.hold("c", 1).is_err(), "past the server's limit");
        drop(a);
        let c = state.hold("c", 1).expect("room again");
        drop((b, c));
        assert_eq!(state.held_bytes.held(), 0);
    }

    /// One org holds at most half of the decode slots: its slow requests
    /// leave the rest to other orgs, who are not kept waiting.
    #[tokio::test]
    async fn one_org_takes_at_most_half_of_the_decode_slots() {
        let state = OtlpState::new(&OtlpConfig::default());
        let first = crate::limits::slot_in_turn(&state.decode, "noisy")
            .await
            .unwrap();
        let second = tokio::time::timeout(
            Duration::from_millis(200),
            crate::limits::slot_in_turn(&state.decode, "noisy"),
        )
        .await;
        assert!(second.is_err(), "the noisy org waits for its own share");
        let other = tokio::time::timeout(
            Duration::from_millis(200),
            crate::limits::slot_in_turn(&state.decode, "quiet"),
        )
        .await;
        assert!(matches!(other, Ok(Ok(_))), "another org is served at once");
        drop(first);
    }
}
