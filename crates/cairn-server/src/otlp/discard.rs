//! `POST /v1/metrics` and `POST /v1/logs`: their data points or log
//! records counted (not built: `cairn_wire::otlp::count_discarded`), and
//! every one rejected in `partial_success`
//! (Cairn records traces only), so that an exporter configured for every
//! signal gets a clear answer instead of an error it would retry. Apart
//! from `mod.rs`, which holds what every endpoint shares, because nothing
//! here reaches the ledger.

use super::{
    Encoding, OtlpError, admit, content_encoding, cpu, decompress, json_ok, protobuf_ok,
    request_encoding,
};
use crate::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use cairn_wire::otlp::{DiscardedSignal as Signal, count_discarded};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
};
use serde_json::json;
use std::sync::Arc;

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
        let (caller, bytes, _slot) =
            admit(state, headers, body, encoding, content_type.as_deref()).await?;
        let limit = state.config.otlp.decode.max_decompressed_bytes;
        let content_encoding = content_encoding(headers);
        let count = cpu(state, caller.org(), move || {
            let raw = decompress(content_encoding.as_deref(), &bytes, limit)?;
            count_discarded(signal, encoding == Encoding::Json, &raw).map_err(|detail| {
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
