//! Seed 004 over HTTP: importing an agent-signed complete trace, and
//! reading it back with its signature checked again.

use crate::{ApiError, AppState, Caller, Json, blocking, parse_json};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_core::log::OpRecord;
use cairn_store::{WriteRequest, Written};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// A signed trace just imported.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TraceImported {
    /// The trace's position in the org log.
    pub seq: u64,
    /// The session its components became steps of.
    pub session_id: String,
    /// The steps, one per component, in order.
    pub steps: Vec<ImportedStep>,
}

/// A step an imported component became.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ImportedStep {
    /// Its position in the org log.
    pub seq: u64,
    /// Its trace id.
    pub trace_id: String,
}

/// An imported trace, with its signature checked again.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SignedTrace {
    /// The trace's position in the org log.
    pub seq: u64,
    /// The session its components became steps of.
    pub session_id: String,
    /// The trace level it was signed at.
    pub trace_level: String,
    /// The agent key that signed it.
    pub signature_key_id: String,
    /// Whether the signature verifies against the registered key.
    pub signature_valid: bool,
    /// Why it does not (null when it does).
    pub signature_error: Option<String>,
    /// The trace exactly as it was signed.
    pub trace: serde_json::Map<String, Value>,
}

/// The answer to analyst SQL.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SqlResult {
    /// Column names, in order.
    pub columns: Vec<String>,
    /// Rows, each a list of values (numbers, strings, booleans, nulls) in
    /// column order.
    #[schemars(with = "Vec<Vec<SqlValue>>")]
    pub rows: Vec<Vec<Value>>,
    /// Whether more rows existed than were returned.
    pub truncated: bool,
}

/// A value of an SQL row (its schema only).
#[derive(JsonSchema)]
#[schemars(untagged)]
#[allow(dead_code)]
enum SqlValue {
    Number(f64),
    Text(String),
    Boolean(bool),
    Null(()),
}

/// Imports a trace (HTTP and MCP).
pub(crate) async fn import(
    state: &Arc<AppState>,
    caller: &Caller,
    trace: Value,
    session_id: Option<String>,
) -> Result<TraceImported, ApiError> {
    caller.require(caller.key.role.can_write(), "import traces")?;
    Caller::require_enabled(state)?;
    if let Some(bound) = &caller.key.agent_id {
        let agent = trace.get("agent_id_hash").and_then(Value::as_str);
        if agent != Some(bound.as_str())
            && agent != Some(cairn_core::record::hashed_agent_id(bound).as_str())
        {
            return Err(ApiError::forbidden(format!(
                "this key may only import traces of agent {bound}"
            )));
        }
    }
    let request = WriteRequest::ImportTrace {
        org_id: caller.org().to_owned(),
        session_id,
        trace,
        caller: caller.key.id.clone(),
    };
    match state.ledger.submit(request).await? {
        Written::TraceImported {
            seq,
            session_id,
            steps,
        } => Ok(TraceImported {
            seq,
            session_id,
            steps: steps
                .into_iter()
                .map(|(seq, trace_id)| ImportedStep { seq, trace_id })
                .collect(),
        }),
        other => Err(crate::unexpected(other)),
    }
}

/// `POST /v1/signed-traces`: a complete trace in seed 004's format;
/// `?session_id=` names the session its components go to (default: the
/// trace id). Roles: writer, admin.
pub(crate) async fn post(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<HashMap<String, String>>,
    crate::limits::Body(body): crate::limits::Body,
) -> Result<Response, ApiError> {
    crate::input::refuse_unknown_params(q.keys(), &["session_id"])?;
    caller.require(caller.key.role.can_write(), "import traces")?;
    let trace = parse_json(&body)?;
    let body = import(&state, &caller, trace, q.get("session_id").cloned()).await?;
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

/// A stored trace with its signature checked again (HTTP and MCP).
pub(crate) async fn fetch(
    state: &Arc<AppState>,
    caller: &Caller,
    trace_id: String,
) -> Result<SignedTrace, ApiError> {
    let org = caller.org().to_owned();
    blocking(state, move |store| {
        let Some((seq, OpRecord::SignedTrace(record))) = store.op_by_id(&org, &trace_id)? else {
            return Err(ApiError::not_found(format!(
                "trace {}",
                crate::error::shown(&trace_id)
            )));
        };
        let keys = cairn_store::ops::agent_keys(store, &org)?;
        let check = keys.check_trace(&record.trace, Some(seq));
        let trace = match &record.trace.original {
            Value::Object(members) => members.clone(),
            other => {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    format!(
                        "a stored trace is {}, not an object",
                        crate::wire::kind_of(other)
                    ),
                ));
            }
        };
        Ok(SignedTrace {
            seq,
            session_id: record.session_id.clone(),
            trace_level: record.trace.level_name.clone(),
            signature_key_id: record.trace.signature_key_id.clone(),
            signature_valid: check.is_ok(),
            signature_error: check.err(),
            trace,
        })
    })
    .await
}

/// `GET /v1/signed-traces/{trace_id}`: the original signed trace,
/// re-verified.
pub(crate) async fn get(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(trace_id): Path<String>,
) -> Result<Json, ApiError> {
    Ok(axum::Json(crate::wire::to_json(
        &fetch(&state, &caller, trace_id).await?,
    )))
}

/// Runs analyst SQL for the caller's org (HTTP and MCP).
pub(crate) async fn sql(
    state: &Arc<AppState>,
    caller: &Caller,
    sql: String,
    limit: usize,
) -> Result<SqlResult, ApiError> {
    use cairn_store::analyst::AnalystError;
    let org = caller.org().to_owned();
    let store = Arc::clone(&state.store);
    let limits = cairn_store::analyst::QueryLimits {
        max_rows: limit.min(state.config.limits.sql.max_rows),
        ..state.config.limits.sql.clone()
    };
    let permit = crate::limits::expensive(state, "the query").await?;
    let result = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        store.analyst_query_limited(&org, &sql, &limits)
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    match result {
        Ok(r) => Ok(SqlResult {
            columns: r.columns,
            rows: r.rows,
            truncated: r.truncated,
        }),
        Err(AnalystError::Refused(m)) => Err(ApiError::bad_request("sql_refused", m)),
        Err(AnalystError::Failed(m)) => Err(ApiError::bad_request("sql_failed", m)),
        Err(e @ AnalystError::TimedOut(_)) => {
            Err(ApiError::bad_request("sql_timeout", e.to_string()))
        }
        Err(AnalystError::TooLarge(m)) => Err(ApiError::bad_request("sql_too_large", m)),
        Err(AnalystError::Store(e)) => Err(e.into()),
        Err(other) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            other.to_string(),
        )),
    }
}

/// `POST /v1/sql`: `{"sql", "limit"?}`, a read-only query over the org's
/// views `steps`, `sessions` and `records`.
pub(crate) async fn post_sql(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    crate::limits::Body(body): crate::limits::Body,
) -> Result<Json, ApiError> {
    let v = parse_json(&body)?;
    crate::members(&v, &["sql", "limit"])?;
    let text = crate::optional_string(&v, "sql")?
        .ok_or_else(|| ApiError::bad_request("invalid_request", "sql (a string) is required"))?;
    let limit = match v.get("limit") {
        None | Some(Value::Null) => cairn_store::analyst::MAX_ROWS,
        Some(l) => l
            .as_u64()
            .filter(|&l| (1..=cairn_store::analyst::MAX_ROWS as u64).contains(&l))
            .ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_request",
                    format!("limit must be 1 to {}", cairn_store::analyst::MAX_ROWS),
                )
            })? as usize,
    };
    Ok(axum::Json(crate::wire::to_json(
        &sql(&state, &caller, text, limit).await?,
    )))
}
