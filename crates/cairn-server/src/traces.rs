//! Seed 004 over HTTP: importing an agent-signed complete trace, and
//! reading it back with its signature checked again.

use crate::input::StrictQuery;
use crate::{ApiError, AppState, Caller, Json, blocking, parse_json};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_core::log::OpRecord;
use cairn_store::{WriteRequest, Written};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
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
    /// The members of `trace` the signature covers (`components` and
    /// `trace_level`, FORMAT 7.4): its other members (`trace_id`,
    /// `started_at`, `task_id`, ...) are as imported, which anyone with a
    /// writer key could have set.
    pub signed_members: Vec<String>,
    /// The trace as it was imported.
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
    memory: Option<&crate::limits::RequestMemory>,
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
    // The import makes the trace's canonical text (for its signature)
    // and a step of each component beside the parsed trace: about twice
    // what the trace holds, counted with the parsed bodies until written.
    let made = crate::hold_more(
        state,
        caller.org(),
        memory,
        cairn_core::json::approx_memory(&trace).saturating_mul(2),
    )?;
    // A trace imported again (a retry after a lost answer) is answered as
    // it was recorded: what it records is kept as a fingerprint to compare
    // (its canonical form, made on the CPU pool for a large trace), not as
    // a copy.
    let large = cairn_core::json::approx_memory(&trace) > crate::INLINE_WORK_BYTES;
    let (trace, retry) = state
        .cpu
        .run_when(caller.org(), large, "reading the trace", move || {
            let retry = trace
                .get("trace_id")
                .and_then(Value::as_str)
                .map(|id| (id.to_owned(), trace_fingerprint(&trace)));
            (trace, retry)
        })
        .await?;
    let request = WriteRequest::ImportTrace {
        org_id: caller.org().to_owned(),
        session_id: session_id.clone(),
        trace,
        caller: caller.key.id.clone(),
    };
    // Counted until written, even if the caller stops waiting.
    let until_written = crate::limits::UntilWritten::new(memory, made);
    match crate::queue_write(state, &until_written, request).await {
        Ok(Written::TraceImported {
            seq,
            session_id,
            steps,
        }) => Ok(TraceImported {
            seq,
            session_id,
            steps: steps
                .into_iter()
                .map(|(seq, trace_id)| ImportedStep { seq, trace_id })
                .collect(),
        }),
        Ok(other) => Err(crate::unexpected(other)),
        Err(
            refused @ cairn_store::AppendError::Refused(
                cairn_store::Refusal::SessionExists { .. }
                | cairn_store::Refusal::DuplicateId { .. },
            ),
        ) => {
            let Some((trace_id, fingerprint)) = retry else {
                return Err(refused.into());
            };
            let session = session_id.unwrap_or_else(|| trace_id.clone());
            recorded_import(state, caller.org(), trace_id, session, fingerprint)
                .await?
                .ok_or_else(|| refused.into())
        }
        Err(e) => Err(e.into()),
    }
}

/// A SHA-256 of `trace` in canonical form (RFC 8785): two imports of one
/// trace have the same, whatever their members' order or numbers' spelling.
fn trace_fingerprint(trace: &Value) -> cairn_core::Hash {
    let mut text = Vec::new();
    cairn_core::jcs::write_value(&mut text, trace);
    cairn_core::Hash::sha256(&text)
}

/// What the import of trace `trace_id` into `session` answered, if the
/// trace recorded under that id is the one `fingerprint` says
/// ([`trace_fingerprint`]) and went to that session: its position and its
/// components' steps (`{trace_id}.{i}`). `None` when the id or the session
/// is another's. Read on the CPU pool (the recorded trace and its steps are
/// held parsed), the steps 4 at a time; a failed read is the store's
/// failure (503, to be tried again), never the refusal.
async fn recorded_import(
    state: &Arc<AppState>,
    org: &str,
    trace_id: String,
    session: String,
    fingerprint: cairn_core::Hash,
) -> Result<Option<TraceImported>, ApiError> {
    let org_id = org.to_owned();
    crate::on_cpu(state, org, "checking a retried import", move |store| {
        // An erased trace is never answered as recorded: its id stays
        // taken, and the refusal says why.
        let (seq, record) = match store.op_by_id(&org_id, &trace_id)? {
            Some((seq, Some(OpRecord::SignedTrace(record)))) => (seq, record),
            Some((seq, None)) => return Err(ApiError::erased_trace_id_taken(&trace_id, seq)),
            _ => return Ok(None),
        };
        if record.session_id != session || trace_fingerprint(&record.trace.original) != fingerprint
        {
            return Ok(None);
        }
        let ids: Vec<String> = (0..record.trace.components.len())
            .map(|i| format!("{trace_id}.{i}"))
            .collect();
        drop(record);
        let mut steps = Vec::with_capacity(ids.len());
        let all = cairn_store::visit_recorded(store, &org_id, &ids, &mut |_, step| {
            steps.push(ImportedStep {
                seq: step.seq,
                trace_id: step.record.step.trace_id,
            });
            true
        })?;
        Ok(all.then_some(TraceImported {
            seq,
            session_id: session,
            steps,
        }))
    })
    .await?
}

/// `POST /v1/signed-traces`: a complete trace in seed 004's format;
/// `?session_id=` names the session its components go to (default: the
/// trace id). Roles: writer, admin.
#[utoipa::path(
    post,
    path = "/v1/signed-traces",
    operation_id = "traces_post",
    tag = "signed-traces",
    summary = "Import a signed complete trace (seed 004)",
    description = "A CompleteTrace in seed 004's format: trace_id, thought_id, task_id, agent_id_hash, started_at, completed_at, trace_level (generic, detailed, full_traces), components (component_type, event_type, timestamp, data), signature (base64 Ed25519 over the RFC 8785 canonical JSON of {components, trace_level}) and signature_key_id, which must be registered (POST /v1/agent-keys) for agent_id_hash. The trace is kept whole as a signed-trace record of the org log and each component becomes a step of a new session. A bad signature is refused (bad_signature). The same trace imported again into the same session (a retry after a lost answer; compared in canonical form) is answered as it was recorded (201); another trace under its id, or the trace into another session, is 409 (session_exists, duplicate_id). Roles: writer, admin. (This import moved here from POST /v1/traces, which is now the OTLP/HTTP receiver; a signed trace sent there is answered 400 signed_trace.)",
    params(
        ("session_id" = Option<crate::api_doc::Id>, Query, description = "The session to create (default: the trace id)"),
    ),
    request_body = crate::api_doc::SignedTraceInput,
    responses(
        (status = 201, description = "{seq, session_id, steps: [{seq, trace_id}]}", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn post(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    StrictQuery(q): StrictQuery,
    crate::limits::Body(body): crate::limits::Body,
) -> Result<Response, ApiError> {
    crate::input::refuse_unknown_params(q.keys(), &["session_id"])?;
    caller.require(caller.key.role.can_write(), "import traces")?;
    let (trace, parsed) = parse_json(&state, caller.org(), &body).await?;
    let memory = crate::limits::RequestMemory::new(parsed);
    let body = import(
        &state,
        &caller,
        trace,
        q.get("session_id").cloned(),
        Some(&memory),
    )
    .await?;
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

/// A stored trace with its signature checked again (HTTP and MCP).
pub(crate) async fn fetch(
    state: &Arc<AppState>,
    caller: &Caller,
    trace_id: String,
) -> Result<SignedTrace, ApiError> {
    let org = caller.org().to_owned();
    // Checking the signature reads the trace's agent's key records and,
    // when they refuse it, the org's (up to CAIRN_MAX_AGENT_KEYS of them,
    // tens of megabytes): a slot of the org's share, as a session's
    // verification takes.
    let permit = crate::limits::expensive(state, &org, "checking the trace's signature").await?;
    blocking(state, move |store| {
        let _permit = permit;
        let (seq, record) = match store.op_by_id(&org, &trace_id)? {
            Some((seq, Some(OpRecord::SignedTrace(record)))) => (seq, record),
            Some((seq, None)) => return Err(ApiError::erased_trace(&trace_id, seq)),
            _ => {
                return Err(ApiError::not_found(format!(
                    "trace {}",
                    crate::error::shown(&trace_id)
                )));
            }
        };
        let check = cairn_store::ops::check_trace_signature(store, &org, &record.trace, seq)?;
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
            signed_members: vec!["components".into(), "trace_level".into()],
            trace,
        })
    })
    .await
}

/// `GET /v1/signed-traces/{trace_id}`: the original signed trace,
/// re-verified.
#[utoipa::path(
    get,
    path = "/v1/signed-traces/{trace_id}",
    operation_id = "traces_get",
    tag = "signed-traces",
    summary = "An imported trace, its signature checked again",
    params(
        ("trace_id" = crate::api_doc::Id, Path),
    ),
    responses(
        (status = 200, description = "{seq, session_id, trace_level, signature_key_id, signature_valid, signature_error, signed_members, trace}: the signature covers the trace's members named in signed_members (components, trace_level) only", content_type = "application/json", body = serde_json::Value),
        (status = 410, description = "erased: one of the trace's components' steps was erased, which withholds the trace's record (FORMAT.md 8); its hash stays in the log", body = crate::api_doc::ErrorBody),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
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
    let permit = crate::limits::expensive(state, &org, "the query").await?;
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
#[utoipa::path(
    post,
    path = "/v1/sql",
    operation_id = "traces_post_sql",
    tag = "sql",
    summary = "Analyst SQL (read-only)",
    description = "One query that reads (SELECT or WITH ... SELECT), in the backend's dialect (SQLite or PostgreSQL), over the org's views: steps (seq, trace_id, session_id, agent_id, step_index, step_type, kind, content, input_data, output_data, confidence, duration_ms, token_count, model, metadata, created_at, created_at_us, turn_id, turn_step, task_id, links, status, erased, has_embedding, current_hash, prev_hash), sessions (session_id, agent_id, profile, started_at, started_at_us, step_count, sealed) and records (seq, type, view); created_at and started_at are written as every answer writes times (RFC 3339 UTC, six fractional digits), the *_us columns as microseconds since the epoch. The statement is parsed: anything that writes, other tables, schema-qualified names, table functions and functions outside an allow-list are refused (sql_refused). Runs read-only within CAIRN_SQL_TIMEOUT (default 5 s, else 400 sql_timeout), at most CAIRN_SQL_MAX_ROWS rows (default 10000) and CAIRN_SQL_MAX_ANSWER_BYTES bytes (rows past either are dropped and truncated is true); a value larger than CAIRN_SQL_MAX_VALUE_BYTES fails with 400 sql_too_large. Identifiers and strings must be plain (no quote or backslash inside a name, only double quotes around names).",
    request_body = crate::api_doc::SqlInput,
    responses(
        (status = 200, description = "{columns, rows, truncated}", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn post_sql(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    crate::limits::Body(body): crate::limits::Body,
) -> Result<Json, ApiError> {
    let (v, _parsed) = parse_json(&state, caller.org(), &body).await?;
    crate::members(&v, &["sql", "limit"])?;
    let text = crate::required_string(&v, "sql")?;
    let limit = crate::input::result_limit(
        v.get("limit").filter(|l| !l.is_null()).map(Value::as_u64),
        crate::input::SQL_ROWS_LIMIT,
    )?;
    Ok(axum::Json(crate::wire::to_json(
        &sql(&state, &caller, text, limit).await?,
    )))
}
