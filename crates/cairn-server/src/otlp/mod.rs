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

mod attrs;
pub mod decode;
mod json;
pub mod map;
mod messages;
#[cfg(test)]
mod tests;

pub use decode::{DecodeError, DecodeLimits, Encoding, decode_otlp, decode_otlp_with, decompress};

use crate::{AppState, Caller};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cairn_store::{AppendError, NewStep, Refusal, WriteRequest};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceResponse,
};
use prost::Message as _;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;

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
    /// Requests decoded and mapped at once (each holds its decoded body).
    pub decode_permits: usize,
    /// OTLP requests handled at once, from reading the body to the answer
    /// (each holds its body); more are answered 429 at once.
    pub max_requests: usize,
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
        }
    }
}

/// What OTLP ingest keeps between requests.
pub(crate) struct OtlpState {
    permits: tokio::sync::Semaphore,
    requests: tokio::sync::Semaphore,
}

impl OtlpState {
    pub(crate) fn new(config: &OtlpConfig) -> OtlpState {
        OtlpState {
            permits: tokio::sync::Semaphore::new(config.decode_permits.max(1)),
            requests: tokio::sync::Semaphore::new(config.max_requests.max(1)),
        }
    }
}

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
        let mut response = match encoding {
            Encoding::Protobuf => (
                self.status,
                [(header::CONTENT_TYPE, encoding.content_type())],
                Status {
                    code: self.grpc,
                    message: self.message,
                }
                .encode_to_vec(),
            )
                .into_response(),
            Encoding::Json => (
                self.status,
                axum::Json(json!({
                    "code": self.grpc,
                    "message": self.message,
                    "error": {"code": self.code, "message": self.message},
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
) -> Result<(Caller, axum::body::Bytes), OtlpError> {
    let caller = crate::authenticate(state, headers).await?;
    caller.require(caller.key.role.can_write(), "export telemetry")?;
    Caller::require_enabled(state)?;
    if content_type.and_then(Encoding::from_content_type) != Some(encoding) {
        return Err(
            DecodeError::UnsupportedMediaType(content_type.unwrap_or("").to_owned()).into(),
        );
    }
    let limit = state.config.otlp.max_body_bytes;
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| {
        OtlpError::from(DecodeError::TooLarge {
            limit,
            decompressed: false,
        })
    })?;
    Ok((caller, bytes))
}

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
/// holding one of the decode permits (which bound the memory of decoded
/// bodies).
async fn cpu<T: Send + 'static>(
    state: &Arc<AppState>,
    work: impl FnOnce() -> Result<T, OtlpError> + Send + 'static,
) -> Result<T, OtlpError> {
    let _permit = state.otlp.permits.acquire().await.map_err(|_| {
        OtlpError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "shutting down",
        )
    })?;
    tokio::task::spawn_blocking(work).await.map_err(|_| {
        OtlpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "a worker failed",
        )
    })?
}

/// `POST /v1/traces`.
#[utoipa::path(
    post,
    path = "/v1/traces",
    operation_id = "otlp_traces",
    tag = "traces",
    summary = "Export spans (OTLP/HTTP)",
    description = "OTLP/HTTP traces receiver (docs/OTLP.md): an ExportTraceServiceRequest in binary protobuf (application/x-protobuf) or OTLP/JSON (application/json), optionally Content-Encoding gzip or deflate. Each span (GenAI semantic conventions, OpenInference) becomes hash-chained steps of its session (gen_ai.conversation.id, else session.id, else the trace id); step ids are otel.<trace id>.<span id>.<n>, so an exporter's retry adds nothing. The answer is an ExportTraceServiceResponse in the request's encoding, with partial_success.rejected_spans and error_message when spans were refused. Errors are OTLP Status messages in the request's encoding (JSON: {code, message, error: {code, message}}): 400 invalid_otlp / signed_trace / too_many_spans, 401, 403, 413 body_too_large, 415 unsupported_media_type, 429 overloaded and 503 with Retry-After (retry). Also served alone on --otlp-listen. Roles: writer, admin.",
    request_body(content((crate::api_doc::Protobuf = "application/x-protobuf"), (crate::api_doc::JsonObject = "application/json"))),
    responses(
        (status = 200, description = "ExportTraceServiceResponse in the request's encoding", content((crate::api_doc::Protobuf = "application/x-protobuf"), (crate::api_doc::JsonObject = "application/json"))),
        (status = "4XX", description = "An OTLP Status message (google.rpc.Status) in the request's encoding", content((crate::api_doc::Protobuf = "application/x-protobuf"), (crate::api_doc::OtlpStatus = "application/json"))),
        (status = "5XX", description = "An OTLP Status message; 503 carries Retry-After"),
    ),
)]
pub(crate) async fn traces(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (encoding, content_type) = request_encoding(&headers);
    match export_traces(&state, &headers, body, encoding, content_type.as_deref()).await {
        Ok(response) => response,
        Err(e) => e.into_response(encoding),
    }
}

/// A span's fate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Recorded,
    Refused,
}

/// What one export decodes and maps to: each span's steps (or why it
/// cannot be recorded), from the body as sent.
fn decode_and_map(
    bytes: &[u8],
    content_type: &str,
    content_encoding: Option<&str>,
    config: &OtlpConfig,
    limits: &map::MapLimits,
) -> Result<Vec<Result<map::SpanSteps, map::Unmappable>>, OtlpError> {
    let raw = decompress(
        content_encoding,
        bytes,
        config.decode.max_decompressed_bytes,
    )?;
    let request = decode_otlp_with(content_type, &raw, &config.decode)?;
    drop(raw);
    Ok(map::map_request(&request, limits))
}

async fn export_traces(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    body: Body,
    encoding: Encoding,
    content_type: Option<&str>,
) -> Result<Response, OtlpError> {
    let started = Instant::now();
    if let Some(e) = saturated(state, 0) {
        return Err(e);
    }
    let _request = state.otlp.requests.try_acquire().map_err(|_| {
        OtlpError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "overloaded",
            format!(
                "{} OTLP requests are being handled: retry after the delay",
                state.config.otlp.max_requests
            ),
        )
        .retry_after(1)
    })?;
    let (caller, bytes) = admit(state, headers, body, encoding, content_type).await?;
    let config = state.config.otlp;
    let limits = state.store.limits();
    let map_limits = map::MapLimits {
        max_content_bytes: limits.max_content_bytes,
        max_payload_bytes: limits.max_payload_bytes,
        max_attribute_bytes: config.max_attribute_bytes,
    };
    let content_type = content_type.unwrap_or("").to_owned();
    let content_encoding = content_encoding(headers);
    let bound = caller.key.agent_id.clone();
    let (work_state, work_caller, work_bytes) = (Arc::clone(state), caller.clone(), bytes.clone());
    let (work_type, work_encoding) = (content_type.clone(), content_encoding.clone());
    // Decode, map, plan, and submit every step (in order, so that the
    // sequencer commits each session's steps in plan order).
    let (mut fates, mut reasons, submitted) = cpu(state, move || {
        let mapped = decode_and_map(
            &work_bytes,
            &work_type,
            work_encoding.as_deref(),
            &config,
            &map_limits,
        )?;
        let mut fates = vec![Fate::Recorded; mapped.len()];
        let mut reasons: Vec<String> = Vec::new();
        for (i, m) in mapped.iter().enumerate() {
            match m {
                Err(u) => {
                    fates[i] = Fate::Refused;
                    reasons.push(u.reason.clone());
                }
                Ok(s) => {
                    if let (Some(bound), Some((agent, _))) = (&bound, &s.agent)
                        && agent != bound
                        && *agent != cairn_core::record::hashed_agent_id(bound)
                    {
                        fates[i] = Fate::Refused;
                        reasons.push(format!(
                            "span {}: this key may only write as agent {bound}, not {agent}",
                            s.span_hex
                        ));
                    }
                }
            }
        }
        let plans = map::plan(mapped, bound.as_deref());
        let steps: usize = plans.iter().map(|p| p.steps.len()).sum();
        if let Some(e) = saturated(&work_state, steps) {
            return Err(e);
        }
        let mut submitted = Vec::with_capacity(steps);
        for plan in plans {
            for (span, step) in plan.steps {
                if fates[span] == Fate::Refused {
                    continue;
                }
                let id = step.step_id.clone();
                let new = new_step(&work_caller, &plan.session_id, &plan.agent_id, step);
                let pending = work_state.ledger.submit(WriteRequest::Step(Box::new(new)));
                submitted.push((span, id, pending));
            }
        }
        Ok((fates, reasons, submitted))
    })
    .await?;
    // Steps refused because their session was opened as another agent (by
    // an earlier export, before this session's agent span arrived): step
    // id -> the session's agent.
    let mut mismatched: std::collections::HashMap<String, String> = Default::default();
    let mut storage_failure = None;
    for (span, id, pending) in submitted {
        match pending.await {
            Ok(_) => state.metrics.append(started.elapsed()),
            Err(AppendError::Refused(Refusal::DuplicateTraceId { .. })) => {}
            Err(AppendError::Refused(Refusal::AgentMismatch { session_agent, .. }))
                if caller.key.agent_id.is_none() =>
            {
                mismatched.insert(id, session_agent);
            }
            Err(AppendError::Refused(r)) => {
                state.metrics.refusal();
                if fates[span] != Fate::Refused {
                    fates[span] = Fate::Refused;
                    reasons.push(format!("step {id}: {r}"));
                }
            }
            Err(AppendError::Store(e)) => storage_failure = Some(e),
        }
    }
    if !mismatched.is_empty() && storage_failure.is_none() {
        // Rare (and cheaper than keeping a copy of every step): derive the
        // steps again and write these as the session's agent, in order.
        let work_state = Arc::clone(state);
        let work_caller = caller.clone();
        let retried = cpu(state, move || {
            let mapped = decode_and_map(
                &bytes,
                &content_type,
                content_encoding.as_deref(),
                &config,
                &map_limits,
            )?;
            let mut pendings = Vec::new();
            for plan in map::plan(mapped, None) {
                for (span, step) in plan.steps {
                    let Some(agent) = mismatched.get(&step.step_id) else {
                        continue;
                    };
                    let id = step.step_id.clone();
                    let new = new_step(&work_caller, &plan.session_id, agent, step);
                    let pending = work_state.ledger.submit(WriteRequest::Step(Box::new(new)));
                    pendings.push((span, id, pending));
                }
            }
            Ok(pendings)
        })
        .await?;
        for (span, id, pending) in retried {
            match pending.await {
                Ok(_) | Err(AppendError::Refused(Refusal::DuplicateTraceId { .. })) => {
                    state.metrics.append(started.elapsed());
                }
                Err(AppendError::Refused(r)) => {
                    state.metrics.refusal();
                    if fates[span] != Fate::Refused {
                        fates[span] = Fate::Refused;
                        reasons.push(format!("step {id}: {r}"));
                    }
                }
                Err(AppendError::Store(e)) => storage_failure = Some(e),
            }
        }
    }
    if let Some(e) = storage_failure {
        // Nothing is lost by retrying: recorded steps are duplicates then.
        return Err(OtlpError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage_failure",
            format!("storage failed, retry the export: {e}"),
        )
        .retry_after(1));
    }
    let rejected = fates.iter().filter(|f| **f == Fate::Refused).count();
    state
        .metrics
        .otlp_spans((fates.len() - rejected) as u64, rejected as u64);
    let partial = (rejected > 0).then(|| ExportTracePartialSuccess {
        rejected_spans: rejected as i64,
        error_message: summary(rejected, "span", &reasons),
    });
    Ok(match encoding {
        Encoding::Protobuf => protobuf_ok(ExportTraceServiceResponse {
            partial_success: partial,
        }),
        Encoding::Json => json_ok(partial.map(|p| {
            json!({"rejectedSpans": p.rejected_spans.to_string(), "errorMessage": p.error_message})
        })),
    })
}

/// `N spans rejected: reason; reason; ...` (at most five reasons).
fn summary(count: usize, what: &str, reasons: &[String]) -> String {
    let mut text = format!(
        "{count} {what}{} rejected",
        if count == 1 { "" } else { "s" }
    );
    for (i, r) in reasons.iter().take(5).enumerate() {
        text.push_str(if i == 0 { ": " } else { "; " });
        text.push_str(r);
    }
    if reasons.len() > 5 {
        text.push_str(&format!("; and {} more", reasons.len() - 5));
    }
    text
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

/// A planned step as the ledger's input.
fn new_step(caller: &Caller, session_id: &str, agent_id: &str, step: map::MappedStep) -> NewStep {
    let links = cairn_core::record::Links {
        tool_call: step.tool_call,
        ..Default::default()
    };
    NewStep {
        org_id: caller.org().to_owned(),
        session_id: session_id.to_owned(),
        agent_id: agent_id.to_owned(),
        kind_label: step.kind_label.to_owned(),
        content: step.content,
        input: step.input,
        output: step.output,
        duration_ms: step.duration_ms,
        token_count: step.token_count,
        model: step.model,
        metadata: Some(step.metadata),
        turn_id: Some(step.turn_id),
        links,
        trace_id: Some(step.step_id),
        caller: caller.key.id.clone(),
        ..NewStep::default()
    }
}

/// Which signal a discarding endpoint serves.
#[derive(Debug, Clone, Copy)]
enum Signal {
    Metrics,
    Logs,
}

/// `POST /v1/metrics`: decoded, counted, and rejected (Cairn records
/// traces only), so that an exporter configured for every signal gets a
/// clear answer instead of an error it would retry.
#[utoipa::path(
    post,
    path = "/v1/metrics",
    operation_id = "otlp_metrics",
    tag = "metrics",
    summary = "Export metrics (OTLP/HTTP): answered, not stored",
    description = "Decoded and answered 200 with every data point rejected in partial_success (Cairn records traces only; set OTEL_METRICS_EXPORTER=none). Counted in /metrics as cairn_otlp_discarded_items_total. Roles: writer, admin.",
    request_body(content((crate::api_doc::Protobuf = "application/x-protobuf"), (crate::api_doc::JsonObject = "application/json"))),
    responses(
        (status = 200, description = "ExportMetricsServiceResponse in the request's encoding", content((crate::api_doc::Protobuf = "application/x-protobuf"), (crate::api_doc::JsonObject = "application/json"))),
        (status = "4XX", description = "An OTLP Status message (google.rpc.Status) in the request's encoding", content((crate::api_doc::Protobuf = "application/x-protobuf"), (crate::api_doc::OtlpStatus = "application/json"))),
        (status = "5XX", description = "An OTLP Status message; 503 carries Retry-After"),
    ),
)]
pub(crate) async fn metrics(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    discard(&state, &headers, body, Signal::Metrics).await
}

/// `POST /v1/logs`: as `/v1/metrics`, for log records.
#[utoipa::path(
    post,
    path = "/v1/logs",
    operation_id = "otlp_logs",
    tag = "logs",
    summary = "Export logs (OTLP/HTTP): answered, not stored",
    description = "Decoded and answered 200 with every log record rejected in partial_success (Cairn records traces only; set OTEL_LOGS_EXPORTER=none). Counted in /metrics as cairn_otlp_discarded_items_total. Roles: writer, admin.",
    request_body(content((crate::api_doc::Protobuf = "application/x-protobuf"), (crate::api_doc::JsonObject = "application/json"))),
    responses(
        (status = 200, description = "ExportLogsServiceResponse in the request's encoding", content((crate::api_doc::Protobuf = "application/x-protobuf"), (crate::api_doc::JsonObject = "application/json"))),
        (status = "4XX", description = "An OTLP Status message (google.rpc.Status) in the request's encoding", content((crate::api_doc::Protobuf = "application/x-protobuf"), (crate::api_doc::OtlpStatus = "application/json"))),
        (status = "5XX", description = "An OTLP Status message; 503 carries Retry-After"),
    ),
)]
pub(crate) async fn logs(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    discard(&state, &headers, body, Signal::Logs).await
}

async fn discard(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    body: Body,
    signal: Signal,
) -> Response {
    let (encoding, content_type) = request_encoding(headers);
    let result = async {
        let (_, bytes) = admit(state, headers, body, encoding, content_type.as_deref()).await?;
        let limit = state.config.otlp.decode.max_decompressed_bytes;
        let content_encoding = content_encoding(headers);
        let count = cpu(state, move || {
            let raw = decompress(content_encoding.as_deref(), &bytes, limit)?;
            count_items(signal, encoding, &raw).map_err(|detail| {
                OtlpError::new(StatusCode::BAD_REQUEST, "invalid_otlp", detail)
            })
        })
        .await?;
        state.metrics.otlp_discarded(count);
        let (what, variable) = match signal {
            Signal::Metrics => ("data point", "OTEL_METRICS_EXPORTER"),
            Signal::Logs => ("log record", "OTEL_LOGS_EXPORTER"),
        };
        let message = format!(
            "{count} {what}{} rejected: Cairn records traces only (set {variable}=none to stop sending them)",
            if count == 1 { "" } else { "s" }
        );
        let rejected = i64::try_from(count).unwrap_or(i64::MAX);
        Ok::<Response, OtlpError>(match (signal, encoding) {
            (Signal::Metrics, Encoding::Protobuf) => protobuf_ok(ExportMetricsServiceResponse {
                partial_success: Some(ExportMetricsPartialSuccess {
                    rejected_data_points: rejected,
                    error_message: message,
                }),
            }),
            (Signal::Logs, Encoding::Protobuf) => protobuf_ok(ExportLogsServiceResponse {
                partial_success: Some(ExportLogsPartialSuccess {
                    rejected_log_records: rejected,
                    error_message: message,
                }),
            }),
            (Signal::Metrics, Encoding::Json) => json_ok(Some(
                json!({"rejectedDataPoints": rejected.to_string(), "errorMessage": message}),
            )),
            (Signal::Logs, Encoding::Json) => json_ok(Some(
                json!({"rejectedLogRecords": rejected.to_string(), "errorMessage": message}),
            )),
        })
    }
    .await;
    result.unwrap_or_else(|e| e.into_response(encoding))
}

/// Data points of a metrics export, or log records of a logs export.
fn count_items(signal: Signal, encoding: Encoding, body: &[u8]) -> Result<u64, String> {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    match (signal, encoding) {
        (Signal::Metrics, Encoding::Protobuf) => {
            let request = ExportMetricsServiceRequest::decode(body).map_err(|e| {
                format!("the body is not a protobuf ExportMetricsServiceRequest: {e}")
            })?;
            Ok(request
                .resource_metrics
                .iter()
                .flat_map(|r| &r.scope_metrics)
                .flat_map(|s| &s.metrics)
                .map(|m| match &m.data {
                    Some(Data::Gauge(g)) => g.data_points.len(),
                    Some(Data::Sum(s)) => s.data_points.len(),
                    Some(Data::Histogram(h)) => h.data_points.len(),
                    Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
                    Some(Data::Summary(s)) => s.data_points.len(),
                    None => 0,
                } as u64)
                .sum())
        }
        (Signal::Logs, Encoding::Protobuf) => {
            let request = ExportLogsServiceRequest::decode(body)
                .map_err(|e| format!("the body is not a protobuf ExportLogsServiceRequest: {e}"))?;
            Ok(request
                .resource_logs
                .iter()
                .flat_map(|r| &r.scope_logs)
                .map(|s| s.log_records.len() as u64)
                .sum())
        }
        (signal, Encoding::Json) => {
            let v: Value = serde_json::from_slice(body)
                .map_err(|e| format!("the body is not OTLP/JSON: {e}"))?;
            if !v.is_object() {
                return Err(format!(
                    "the body is not OTLP/JSON: an export request is a JSON object, not {}",
                    crate::wire::kind_of(&v)
                ));
            }
            let list = |v: &Value, key: &str| -> Vec<Value> {
                v.get(key)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            };
            let mut count = 0u64;
            let (outer, inner) = match signal {
                Signal::Metrics => ("resourceMetrics", "scopeMetrics"),
                Signal::Logs => ("resourceLogs", "scopeLogs"),
            };
            for r in list(&v, outer) {
                for s in list(&r, inner) {
                    match signal {
                        Signal::Logs => count += list(&s, "logRecords").len() as u64,
                        Signal::Metrics => {
                            for m in list(&s, "metrics") {
                                for kind in [
                                    "gauge",
                                    "sum",
                                    "histogram",
                                    "exponentialHistogram",
                                    "summary",
                                ] {
                                    if let Some(d) = m.get(kind) {
                                        count += list(d, "dataPoints").len() as u64;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            Ok(count)
        }
    }
}

/// The router of the OTLP listener (`--otlp-listen`): only the OTLP paths,
/// and an OTLP-shaped 404 elsewhere.
pub fn router(state: Arc<AppState>) -> axum::Router {
    use axum::routing::post;
    axum::Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/metrics", post(metrics))
        .route("/v1/logs", post(logs))
        .fallback(|headers: HeaderMap| async move {
            let (encoding, _) = request_encoding(&headers);
            OtlpError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "this listener serves OTLP/HTTP only: POST /v1/traces, /v1/metrics, /v1/logs",
            )
            .into_response(encoding)
        })
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            crate::routes::count_errors,
        ))
        .with_state(state)
}
