//! # cairn-server
//!
//! The HTTP API of `cairn serve`: JSON over HTTP/1.1 (axum), every request
//! scoped to the org of its API key, errors as JSON bodies with stable
//! codes, `/healthz`, Prometheus `/metrics`, and the OpenAPI document at
//! `/openapi.json`. It is the only crate that knows wire formats (`wire`);
//! storage and the integrity core never see JSON bodies.
//!
//! Writes go through the [`cairn_store::Ledger`] (validated and hashed in
//! the request's task, sequenced and group-committed by its thread, answered
//! after the fsync). Reads run on the blocking pool.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod agent_keys;
mod error;
pub mod mcp;
mod metrics;
pub mod otlp;
mod oversight;
pub mod render;
mod traces;
mod turns;
pub mod wire;

pub use error::ApiError;
pub use metrics::Metrics;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use cairn_core::Hash;
use cairn_core::detail::DetailLevel;
use cairn_core::record::Profile;
use cairn_store::ops::{ExportScope, verify_org, verify_session};
use cairn_store::{
    ApiKey, Ledger, LedgerStore, NewSession, Role, WriteRequest, Written, token_hash,
};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest request body accepted on ordinary routes, in bytes.
    pub max_body_bytes: usize,
    /// Largest bundle accepted by `POST /v1/bundles/verify`.
    pub max_bundle_bytes: usize,
    /// How long a looked-up API key is trusted before it is read again
    /// (revocation through the API takes effect at once).
    pub key_cache_ttl: Duration,
    /// Seed 000's `ENABLED`: when false, every write is refused with 503
    /// `ledger_disabled`; reads, verification and export keep working.
    pub enabled: bool,
    /// OTLP/HTTP ingest limits (`otlp`).
    pub otlp: otlp::OtlpConfig,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            max_body_bytes: 2 * 1024 * 1024,
            max_bundle_bytes: 256 * 1024 * 1024,
            key_cache_ttl: Duration::from_secs(5),
            enabled: true,
            otlp: otlp::OtlpConfig::default(),
        }
    }
}

/// Shared state of the handlers.
pub struct AppState {
    ledger: Arc<Ledger>,
    store: Arc<dyn LedgerStore>,
    metrics: Metrics,
    config: ServerConfig,
    keys: RwLock<HashMap<Hash, (ApiKey, Instant)>>,
    otlp: otlp::OtlpState,
}

impl AppState {
    /// State over a ledger.
    pub fn new(ledger: Arc<Ledger>, config: ServerConfig) -> Arc<AppState> {
        let store = ledger.store_arc();
        Arc::new(AppState {
            ledger,
            store,
            metrics: Metrics::default(),
            otlp: otlp::OtlpState::new(&config.otlp),
            config,
            keys: RwLock::new(HashMap::new()),
        })
    }

    /// The server's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// The OpenAPI document served at `/openapi.json`.
pub const OPENAPI: &str = include_str!("openapi.json");

/// The router with every route.
pub fn router(state: Arc<AppState>) -> Router {
    let body_limit = state.config.max_body_bytes;
    let bundle_limit = state.config.max_bundle_bytes;
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .route("/v1/sessions", post(start_session).get(list_sessions))
        .route("/v1/sessions/{session_id}", get(replay))
        .route("/v1/sessions/{session_id}/verify", get(verify_one_session))
        .route("/v1/sessions/{session_id}/seal", post(seal))
        .route("/v1/sessions/{session_id}/root", get(session_root))
        .route("/v1/steps", post(append_step))
        .route("/v1/steps/batch", post(append_batch))
        .route("/v1/steps/{trace_id}", get(get_step))
        .route("/v1/steps/{trace_id}/erase", post(erase_step))
        .route("/v1/steps/{trace_id}/review", post(oversight::review))
        .route("/v1/reviews", get(oversight::queue))
        .route("/v1/audit-events", post(oversight::record_event))
        .route("/v1/audit-events/{event_id}", get(oversight::get_event))
        .route("/v1/thinking/parse", post(turns::parse))
        .route("/v1/traces", post(otlp::traces))
        .route("/v1/metrics", post(otlp::metrics))
        .route("/v1/logs", post(otlp::logs))
        .route("/v1/signed-traces", post(traces::post))
        .route("/v1/signed-traces/{trace_id}", get(traces::get))
        .route("/v1/sql", post(traces::post_sql))
        .route("/v1/sessions/{session_id}/turns", post(turns::record))
        .route(
            "/v1/sessions/{session_id}/turns/{turn_id}",
            get(turns::turn),
        )
        .route("/v1/sessions/{session_id}/trail", get(turns::trail))
        .route("/v1/verify", get(verify_whole_org))
        .route("/v1/search", get(search))
        .route("/v1/checkpoint", get(checkpoint))
        .route("/v1/proofs/inclusion", get(inclusion_proof))
        .route("/v1/proofs/consistency", get(consistency_proof))
        .route("/v1/export", get(export))
        .route(
            "/v1/bundles/verify",
            post(verify_bundle).layer(DefaultBodyLimit::max(bundle_limit)),
        )
        .route(
            "/v1/agent-keys",
            post(register_agent_key).get(agent_keys::list),
        )
        .route("/v1/agent-keys/{key_id}/revoke", post(agent_keys::revoke))
        .route("/v1/agent-keys/{key_id}/rotate", post(agent_keys::rotate))
        .route("/v1/keys", post(create_key).get(list_keys))
        .route("/v1/keys/{key_id}", delete(revoke_key))
        .nest_service("/mcp", mcp_service(Arc::clone(&state)))
        .fallback(|| async { ApiError::not_found("route") })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            count_errors,
        ))
        .with_state(state)
}

/// MCP over Streamable HTTP at `/mcp`, behind the same API keys.
fn mcp_service(state: Arc<AppState>) -> Router {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let service_state = Arc::clone(&state);
    let service = StreamableHttpService::new(
        move || Ok(mcp::CairnMcp::http(Arc::clone(&service_state))),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    Router::new()
        .fallback_service(service)
        .layer(axum::middleware::from_fn_with_state(state, mcp_auth))
}

/// Authenticates an MCP request and hands the caller to the tools through
/// the request's extensions (rmcp passes the request parts on).
async fn mcp_auth(
    State(state): State<Arc<AppState>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match authenticate(&state, request.headers()).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(e) => e.into_response(),
    }
}

pub(crate) async fn count_errors(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status();
    state.metrics.error_status(status.as_u16());
    let micros = started.elapsed().as_micros() as u64;
    if status.is_client_error() || status.is_server_error() {
        tracing::info!(target: "cairn::http", %method, %path, status = status.as_u16(), micros, "request refused");
    } else {
        tracing::debug!(target: "cairn::http", %method, %path, status = status.as_u16(), micros, "request");
    }
    // axum's own rejections (body too large, bad path) are plain text;
    // give them the JSON shape every other error has.
    // OTLP answers errors as protobuf `Status` messages: also shaped.
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| {
            v.as_bytes().starts_with(b"application/json")
                || v.as_bytes().starts_with(b"application/x-protobuf")
        });
    if status.is_client_error() && !is_json {
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
            StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
            StatusCode::NOT_FOUND => "not_found",
            _ => "invalid_request",
        };
        let message = status
            .canonical_reason()
            .unwrap_or("invalid request")
            .to_owned();
        return ApiError::new(status, code, message).into_response();
    }
    response
}

/// The authenticated caller: its key's org, role and agent binding.
#[derive(Debug, Clone)]
pub struct Caller {
    key: ApiKey,
}

impl Caller {
    fn org(&self) -> &str {
        &self.key.org_id
    }

    fn require_enabled(state: &AppState) -> Result<(), ApiError> {
        if state.config.enabled {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ledger_disabled",
                "the ledger is disabled on this server (CAIRN_ENABLED=false): nothing is recorded",
            ))
        }
    }

    fn require(&self, allowed: bool, what: &str) -> Result<(), ApiError> {
        if allowed {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "a {} key may not {what}",
                self.key.role
            )))
        }
    }
}

impl FromRequestParts<Arc<AppState>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Caller, ApiError> {
        authenticate(state, &parts.headers).await
    }
}

/// The caller of a request with these headers: the key named by
/// `Authorization: Bearer`, if it exists and is not revoked.
pub(crate) async fn authenticate(
    state: &Arc<AppState>,
    headers: &HeaderMap,
) -> Result<Caller, ApiError> {
    {
        let token = bearer(headers).ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "an API key is required: Authorization: Bearer cairn_...",
            )
        })?;
        let hash = token_hash(token);
        let cached = state.keys.read().ok().and_then(|keys| {
            keys.get(&hash)
                .filter(|(_, at)| at.elapsed() < state.config.key_cache_ttl)
                .map(|(key, _)| key.clone())
        });
        let key = match cached {
            Some(key) => Some(key),
            None => {
                let store = Arc::clone(&state.store);
                let found = tokio::task::spawn_blocking(move || store.api_key_by_hash(&hash))
                    .await
                    .map_err(|_| {
                        ApiError::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "internal",
                            "lookup failed",
                        )
                    })??;
                if let (Some(key), Ok(mut keys)) = (&found, state.keys.write()) {
                    keys.insert(hash, (key.clone(), Instant::now()));
                }
                found
            }
        };
        match key {
            Some(key) if key.revoked_at.is_none() => Ok(Caller { key }),
            _ => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the API key is unknown or revoked",
            )),
        }
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    value
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Runs store work on the blocking pool.
async fn blocking<T: Send + 'static>(
    state: &Arc<AppState>,
    work: impl FnOnce(&dyn LedgerStore) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = Arc::clone(&state.store);
    tokio::task::spawn_blocking(move || work(store.as_ref()))
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "a worker failed",
            )
        })?
}

fn parse_json(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request("invalid_json", format!("the body is not valid JSON: {e}"))
    })
}

type Json = axum::Json<Value>;

/// A request body's optional string member; another type is a 400.
fn optional_string(body: &Value, key: &str) -> Result<Option<String>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::bad_request(
            "invalid_request",
            format!("{key} must be a string"),
        )),
    }
}

/// An Ed25519 public key given as base64 of its 32 bytes.
fn public_key_param(
    text: Option<&str>,
) -> Result<cairn_core::ed25519_dalek::VerifyingKey, ApiError> {
    use base64::Engine as _;
    text.and_then(|k| base64::engine::general_purpose::STANDARD.decode(k).ok())
        .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
        .and_then(|bytes| cairn_core::ed25519_dalek::VerifyingKey::from_bytes(&bytes).ok())
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid_request",
                "public_key must be base64 of a 32-byte Ed25519 public key",
            )
        })
}

/// Seed 004's `level` parameter: `generic`, `detailed` or `full`.
fn level_param(q: &HashMap<String, String>) -> Result<Option<DetailLevel>, ApiError> {
    q.get("level")
        .map(|l| {
            DetailLevel::parse(l).ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_request",
                    format!("level must be generic, detailed or full, not {l}"),
                )
            })
        })
        .transpose()
}

/// A `full` view (seed 004's research sharing) needs a key that may share
/// full traces (auditor, admin) and the consent recorded on the session.
fn allow_level(
    caller: &Caller,
    level: Option<DetailLevel>,
    session: Option<(&str, bool)>,
) -> Result<(), ApiError> {
    if level != Some(DetailLevel::Full) {
        return Ok(());
    }
    caller.require(
        matches!(caller.key.role, Role::Auditor | Role::Admin),
        "share full-detail traces (auditor or admin keys)",
    )?;
    match session {
        Some((id, false)) => Err(consent_required(id)),
        _ => Ok(()),
    }
}

fn consent_required(session: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "consent_required",
        format!(
            "session {session} has no recorded consent to full-detail sharing (full_consent when the session starts); ask for level detailed or generic"
        ),
    )
}

/// A write produced something its handler did not ask for (a bug).
fn unexpected(w: Written) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        format!("unexpected {w:?}"),
    )
}

async fn healthz(State(state): State<Arc<AppState>>) -> Result<Json, ApiError> {
    blocking(&state, |store| Ok(store.orgs()?.len())).await?;
    Ok(axum::Json(json!({"status": "ok"})))
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let stats = state.ledger.stats();
    let text = state.metrics.render(
        stats.batches.load(std::sync::atomic::Ordering::Relaxed),
        stats.requests.load(std::sync::atomic::Ordering::Relaxed),
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// A step body (seed 000's member names). A key bound to an agent may only
/// write as that agent, and is the default agent.
fn step_for(caller: &Caller, value: &Value) -> Result<cairn_store::NewStep, ApiError> {
    let step = wire::step_from_json(
        value,
        caller.org(),
        caller.key.agent_id.as_deref(),
        &caller.key.id,
    )
    .map_err(|e| ApiError::bad_request("invalid_request", e.0))?;
    if let Some(bound) = &caller.key.agent_id
        && *bound != step.agent_id
        && cairn_core::record::hashed_agent_id(bound) != step.agent_id
    {
        return Err(ApiError::forbidden(format!(
            "this key may only write as agent {bound}, not {}",
            step.agent_id
        )));
    }
    Ok(step)
}

async fn append_step(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    body: Bytes,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_write(), "record steps")?;
    Caller::require_enabled(&state)?;
    let started = Instant::now();
    let step = step_for(&caller, &parse_json(&body)?)?;
    match state
        .ledger
        .submit(WriteRequest::Step(Box::new(step)))
        .await
    {
        Ok(written) => {
            state.metrics.append(started.elapsed());
            Ok((
                StatusCode::CREATED,
                axum::Json(wire::written_to_json(&written)),
            )
                .into_response())
        }
        Err(e) => {
            state.metrics.refusal();
            Err(e.into())
        }
    }
}

async fn append_batch(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    body: Bytes,
) -> Result<Json, ApiError> {
    caller.require(caller.key.role.can_write(), "record steps")?;
    Caller::require_enabled(&state)?;
    let started = Instant::now();
    let value = parse_json(&body)?;
    let items = value.as_array().ok_or_else(|| {
        ApiError::bad_request("invalid_request", "a batch is a JSON array of steps")
    })?;
    if items.is_empty() || items.len() > 10_000 {
        return Err(ApiError::bad_request(
            "invalid_request",
            "a batch holds 1 to 10000 steps",
        ));
    }
    // Submit everything first so the sequencer commits it together.
    let mut pending = Vec::with_capacity(items.len());
    for item in items {
        pending.push(
            step_for(&caller, item).map(|s| state.ledger.submit(WriteRequest::Step(Box::new(s)))),
        );
    }
    let mut results = Vec::with_capacity(pending.len());
    let mut accepted = 0;
    for p in pending {
        let outcome = match p {
            Ok(p) => p.await.map_err(ApiError::from),
            Err(e) => Err(e),
        };
        results.push(match outcome {
            Ok(w) => {
                accepted += 1;
                state.metrics.append(started.elapsed());
                wire::written_to_json(&w)
            }
            Err(e) => {
                state.metrics.refusal();
                json!({"error": {"code": e.code, "message": e.message}})
            }
        });
    }
    Ok(axum::Json(
        json!({"accepted": accepted, "results": results}),
    ))
}

async fn start_session(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    body: Bytes,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_write(), "start sessions")?;
    Caller::require_enabled(&state)?;
    let v = parse_json(&body)?;
    let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let session_id = field("session_id")
        .ok_or_else(|| ApiError::bad_request("invalid_request", "session_id is required"))?;
    let agent_id = match (field("agent_id"), &caller.key.agent_id) {
        (Some(a), Some(bound)) if a != *bound => {
            return Err(ApiError::forbidden(format!(
                "this key may only write as agent {bound}"
            )));
        }
        (Some(a), _) => a,
        (None, Some(bound)) => bound.clone(),
        (None, None) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "agent_id is required",
            ));
        }
    };
    let agent_id = match v.get("hash_agent_id") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => agent_id,
        Some(Value::Bool(true)) => cairn_core::record::hashed_agent_id(&agent_id),
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "hash_agent_id must be a boolean",
            ));
        }
    };
    let profile = match field("profile").as_deref() {
        None => Profile::Standard,
        Some(p) => Profile::parse(p).ok_or_else(|| {
            ApiError::bad_request("invalid_request", "profile must be standard or strict")
        })?,
    };
    let predecessor =
        match field("predecessor") {
            None => None,
            Some(h) => Some(Hash::from_hex(&h).map_err(|e| {
                ApiError::bad_request("invalid_request", format!("predecessor: {e}"))
            })?),
        };
    let request = WriteRequest::StartSession(NewSession {
        org_id: caller.org().to_owned(),
        session_id: session_id.clone(),
        agent_id,
        caller: caller.key.id.clone(),
        profile,
        predecessor,
        predecessor_session: field("predecessor_session"),
        full_consent: v
            .get("full_consent")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    });
    let written = state.ledger.submit(request).await?;
    let mut body = wire::written_to_json(&written);
    body["session_id"] = json!(session_id);
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

async fn list_sessions(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json, ApiError> {
    let limit = match q.get("limit") {
        None => 20,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=1000).contains(l))
            .ok_or_else(|| ApiError::bad_request("invalid_request", "limit must be 1 to 1000"))?,
    };
    let agent = q.get("agent_id").cloned();
    let org = caller.org().to_owned();
    let rows = blocking(&state, move |store| {
        let mut rows = Vec::new();
        for s in store.list_sessions(&org, agent.as_deref(), limit)? {
            let valid = verify_session(store, &org, &s.session_id)?.is_some_and(|v| v.verified);
            rows.push(json!({
                "session_id": s.session_id, "agent_id": s.agent_id, "step_count": s.step_count,
                "first_step_at": s.first_step_at.map(|t| t.to_string()),
                "last_step_at": s.last_step_at.map(|t| t.to_string()),
                "chain_valid": valid, "sealed": s.sealed,
            }));
        }
        Ok(rows)
    })
    .await?;
    Ok(axum::Json(Value::Array(rows)))
}

async fn replay(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(session_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let verify = query_bool(&q, "verify")?;
    let markdown = wants_markdown(q.get("format").map(String::as_str))?;
    let level = level_param(&q)?;
    let org = caller.org().to_owned();
    let (info, mut steps, verdict) = blocking(&state, move |store| {
        let info = store
            .session(&org, &session_id)?
            .ok_or_else(|| ApiError::not_found(format!("session {session_id}")))?;
        let mut steps = Vec::new();
        store.read_session(&org, &session_id, &mut |s| {
            steps.push(s);
            true
        })?;
        let verdict = if verify {
            verify_session(store, &org, &session_id)?
        } else {
            None
        };
        Ok((info, steps, verdict))
    })
    .await?;
    if let Some(v) = &verdict {
        state.metrics.verification(v.verified);
    }
    allow_level(
        &caller,
        level,
        Some((&info.header.session_id, info.header.full_consent)),
    )?;
    if let Some(level) = level {
        for s in &mut steps {
            s.record.redact(level).map_err(|e| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            })?;
        }
    }
    if markdown {
        let records: Vec<_> = steps.into_iter().map(|s| s.record).collect();
        return Ok(markdown_response(render::markdown(
            &info.header.session_id,
            &records,
        )));
    }
    let mut body = json!({
        "session_id": info.header.session_id,
        "agent_id": info.header.agent_id,
        "level": level.map(DetailLevel::as_str),
        "step_count": steps.len(),
        "sealed": info.seal.is_some(),
        "steps": steps.iter().map(|s| wire::step_to_json(s.seq, &s.record)).collect::<Vec<_>>(),
    });
    if let Some(v) = &verdict {
        body["chain_valid"] = json!(v.verified);
        body["verdict"] = wire::verdict_to_json(v, 0, cairn_store::now());
    }
    Ok(axum::Json(body).into_response())
}

async fn verify_one_session(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(session_id): Path<String>,
) -> Result<Json, ApiError> {
    let org = caller.org().to_owned();
    let started = Instant::now();
    let verdict = blocking(&state, move |store| {
        verify_session(store, &org, &session_id)?
            .ok_or_else(|| ApiError::not_found(format!("session {session_id}")))
    })
    .await?;
    state.metrics.verification(verdict.verified);
    Ok(axum::Json(wire::verdict_to_json(
        &verdict,
        started.elapsed().as_millis(),
        cairn_store::now(),
    )))
}

async fn verify_whole_org(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<Vec<(String, String)>>,
) -> Result<Json, ApiError> {
    let org = caller.org().to_owned();
    let trusted = trusted_param(&q)?;
    let started = Instant::now();
    let result = blocking(&state, move |store| {
        let mut external = Vec::new();
        for note in &trusted {
            external.push(
                cairn_store::ops::trusted_checkpoint(store, &org, note, &[])
                    .map_err(|m| ApiError::bad_request("invalid_checkpoint", m))?,
            );
        }
        Ok(verify_org(store, &org, &external, &[], &mut |_| {})?)
    })
    .await?;
    state.metrics.verification(result.verdict.verified);
    let mut body = wire::verdict_to_json(
        &result.verdict,
        started.elapsed().as_millis(),
        cairn_store::now(),
    );
    body["log_size"] = json!(result.log_size);
    body["checkpoints_checked"] = json!(result.checkpoints_checked);
    Ok(axum::Json(body))
}

async fn seal(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(session_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json, ApiError> {
    caller.require(caller.key.role.can_write(), "seal sessions")?;
    Caller::require_enabled(&state)?;
    let require_reflection = query_bool(&q, "require_reflection")?;
    let request = WriteRequest::Seal {
        org_id: caller.org().to_owned(),
        session_id,
        require_reflection,
    };
    match state.ledger.submit(request).await? {
        Written::Sealed { seq, seal } => Ok(axum::Json(seal_json(Some(seq), &seal))),
        other => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("unexpected {other:?}"),
        )),
    }
}

fn seal_json(seq: Option<u64>, seal: &cairn_core::log::SealRecord) -> Value {
    json!({
        "session_id": seal.session_id, "step_count": seal.step_count,
        "merkle_root": seal.session_root.to_hex(), "final_hash": seal.final_hash.to_hex(),
        "sealed_at": seal.sealed_at.to_string(), "note": seal.note, "seq": seq,
    })
}

async fn session_root(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(session_id): Path<String>,
) -> Result<Json, ApiError> {
    let org = caller.org().to_owned();
    let info = blocking(&state, move |store| {
        store
            .session(&org, &session_id)?
            .ok_or_else(|| ApiError::not_found(format!("session {session_id}")))
    })
    .await?;
    let seal = info.seal.ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "not_sealed",
            "the session is not sealed yet: seal it first",
        )
    })?;
    Ok(axum::Json(seal_json(None, &seal)))
}

async fn get_step(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(trace_id): Path<String>,
) -> Result<Json, ApiError> {
    let org = caller.org().to_owned();
    let step = blocking(&state, move |store| {
        store
            .step_by_trace(&org, &trace_id)?
            .ok_or_else(|| ApiError::not_found(format!("step {trace_id}")))
    })
    .await?;
    Ok(axum::Json(wire::step_to_json(step.seq, &step.record)))
}

/// Semantic search over the embedded steps of the caller's org.
async fn search(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json, ApiError> {
    let text = q
        .get("q")
        .filter(|t| !t.trim().is_empty())
        .cloned()
        .ok_or_else(|| {
            ApiError::bad_request("invalid_request", "q (the search text) is required")
        })?;
    let limit = match q.get("limit") {
        None => 10,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=100).contains(l))
            .ok_or_else(|| ApiError::bad_request("invalid_request", "limit must be 1 to 100"))?,
    };
    let org = caller.org().to_owned();
    let results = blocking(&state, move |store| {
        let query = cairn_store::embed::embed(&text);
        let mut out = Vec::new();
        for (seq, score) in store.semantic_search(&org, &query, limit)? {
            store.read_log(&org, seq, seq + 1, &mut |stored| {
                if let Ok(entry) = &stored.entry
                    && let cairn_core::log::LogRecord::Step(record) = &entry.record
                {
                    let mut step = wire::step_to_json(seq, record);
                    step["score"] = json!(score);
                    out.push(step);
                }
                false
            })?;
        }
        Ok(out)
    })
    .await?;
    Ok(axum::Json(json!({"results": results})))
}

/// Erases a step's payload (admin): the values become commitments, every
/// hash stays, and the erasure is recorded.
async fn erase_step(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(trace_id): Path<String>,
    body: Bytes,
) -> Result<Json, ApiError> {
    caller.require(caller.key.role.can_admin(), "erase records")?;
    Caller::require_enabled(&state)?;
    let reason = if body.is_empty() {
        String::new()
    } else {
        parse_json(&body)?
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    if reason.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_request",
            "reason is required (it is recorded with the erasure)",
        ));
    }
    let request = WriteRequest::Erase {
        org_id: caller.org().to_owned(),
        trace_id: trace_id.clone(),
        reason,
        actor: caller.key.id.clone(),
    };
    match state.ledger.submit(request).await? {
        Written::Erased { seqs } => Ok(axum::Json(
            json!({"trace_id": trace_id, "erased": true, "erasure_seq": seqs.first()}),
        )),
        other => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("unexpected {other:?}"),
        )),
    }
}

/// The latest checkpoint, signing a new one first if the log grew.
async fn current_checkpoint(
    state: &Arc<AppState>,
    org: &str,
) -> Result<cairn_store::StoredCheckpoint, ApiError> {
    let org_owned = org.to_owned();
    let size = blocking(state, move |store| Ok(store.log_size(&org_owned)?)).await?;
    if size == 0 {
        return Err(ApiError::not_found("a log for this org"));
    }
    match state
        .ledger
        .submit(WriteRequest::Checkpoint {
            org_id: org.to_owned(),
        })
        .await?
    {
        Written::Checkpoint(cp) => Ok(cp),
        other => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("unexpected {other:?}"),
        )),
    }
}

async fn checkpoint(
    State(state): State<Arc<AppState>>,
    caller: Caller,
) -> Result<Response, ApiError> {
    let cp = current_checkpoint(&state, caller.org()).await?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        cp.note,
    )
        .into_response())
}

/// A boolean query parameter: `true`/`1` or `false`/`0`; absent is false.
/// Anything else is refused rather than read as false.
pub(crate) fn query_bool(q: &HashMap<String, String>, key: &str) -> Result<bool, ApiError> {
    match q.get(key).map(String::as_str) {
        None | Some("false" | "0") => Ok(false),
        Some("true" | "1") => Ok(true),
        Some(other) => Err(ApiError::bad_request(
            "invalid_request",
            format!("{key} must be true or false, not {other}"),
        )),
    }
}

/// The `format` parameter of the readable endpoints and tools: `json`
/// (default) or `markdown`.
pub(crate) fn wants_markdown(format: Option<&str>) -> Result<bool, ApiError> {
    match format {
        None | Some("json") => Ok(false),
        Some("markdown") => Ok(true),
        Some(other) => Err(ApiError::bad_request(
            "invalid_request",
            format!("format must be json or markdown, not {other}"),
        )),
    }
}

pub(crate) fn markdown_response(text: String) -> Response {
    (
        [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
        text,
    )
        .into_response()
}

fn query_u64(q: &HashMap<String, String>, key: &str) -> Result<Option<u64>, ApiError> {
    q.get(key)
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                ApiError::bad_request(
                    "invalid_request",
                    format!("{key} must be a non-negative integer"),
                )
            })
        })
        .transpose()
}

async fn inclusion_proof(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json, ApiError> {
    let seq = query_u64(&q, "seq")?
        .ok_or_else(|| ApiError::bad_request("invalid_request", "seq is required"))?;
    let cp = current_checkpoint(&state, caller.org()).await?;
    let size = query_u64(&q, "size")?.unwrap_or(cp.size);
    let org = caller.org().to_owned();
    let (leaf, proof, root) = blocking(&state, move |store| {
        if seq >= size || size > store.log_size(&org)? {
            return Err(ApiError::not_found(format!(
                "entry {seq} in a log of size {size}"
            )));
        }
        let mut leaf = None;
        store.read_log(&org, seq, seq + 1, &mut |stored| {
            leaf = Some(stored.leaf);
            false
        })?;
        let proof = store.inclusion_proof(&org, seq, size)?;
        let root = store.root_at(&org, size)?;
        Ok((leaf, proof, root))
    })
    .await?;
    Ok(axum::Json(json!({
        "seq": seq, "size": size, "leaf_hash": leaf.map(|l| l.to_hex()),
        "proof": proof.iter().map(Hash::to_hex).collect::<Vec<_>>(), "root": root.to_hex(),
        "checkpoint": if size == cp.size { Some(cp.note) } else { None },
    })))
}

async fn consistency_proof(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json, ApiError> {
    let old = query_u64(&q, "old")?
        .ok_or_else(|| ApiError::bad_request("invalid_request", "old is required"))?;
    let cp = current_checkpoint(&state, caller.org()).await?;
    let new = query_u64(&q, "new")?.unwrap_or(cp.size);
    if old == 0 || old > new {
        return Err(ApiError::bad_request(
            "invalid_request",
            "need 1 <= old <= new",
        ));
    }
    let org = caller.org().to_owned();
    let (proof, old_root, new_root) = blocking(&state, move |store| {
        if new > store.log_size(&org)? {
            return Err(ApiError::not_found(format!("a log of size {new}")));
        }
        Ok((
            store.consistency_proof(&org, old, new)?,
            store.root_at(&org, old)?,
            store.root_at(&org, new)?,
        ))
    })
    .await?;
    Ok(axum::Json(json!({
        "old_size": old, "new_size": new, "old_root": old_root.to_hex(), "new_root": new_root.to_hex(),
        "proof": proof.iter().map(Hash::to_hex).collect::<Vec<_>>(),
    })))
}

/// Sends written bytes to the response body as they come.
struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    buffer: Vec<u8>,
}

impl std::io::Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(data);
        if self.buffer.len() >= 64 * 1024 {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buffer));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away")
        })
    }
}

struct ChannelBody(tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl futures_core::Stream for ChannelBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

async fn export(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_export(), "export bundles")?;
    let scope = match (
        q.get("session"),
        q.get("agent"),
        q.get("since"),
        q.get("until"),
        query_bool(&q, "all")?,
    ) {
        (Some(s), None, None, None, false) => ExportScope::Session(s.clone()),
        (None, Some(a), None, None, false) => ExportScope::Agent(a.clone()),
        (None, None, Some(since), Some(until), false) => ExportScope::Range {
            since: cairn_core::Timestamp::parse_rfc3339(since)
                .map_err(|e| ApiError::bad_request("invalid_request", format!("since: {e}")))?,
            until: cairn_core::Timestamp::parse_rfc3339(until)
                .map_err(|e| ApiError::bad_request("invalid_request", format!("until: {e}")))?,
        },
        (None, None, None, None, true) => ExportScope::All,
        _ => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "give exactly one of session, agent, since and until, or all",
            ));
        }
    };
    let level = level_param(&q)?;
    allow_level(&caller, level, None)?;
    let options = cairn_store::ops::ExportOptions {
        level,
        since_size: query_u64(&q, "since_size")?,
    };
    // Everything is decided before the status line, so that an empty or a
    // refused export is a 4xx, not a truncated body.
    let plan = plan_export(&state, &caller, scope, options).await?;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let store = Arc::clone(&state.store);
    tokio::task::spawn_blocking(move || {
        let mut out = ChannelWriter {
            tx: tx.clone(),
            buffer: Vec::new(),
        };
        if let Err(e) = cairn_store::ops::write_export(store.as_ref(), &plan, &mut out, &mut |_| {})
        {
            // The body is cut short; a verifier reports the missing end
            // line as `missing-record`.
            tracing::warn!(error = %e, "export failed");
            let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
        }
    });
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(ChannelBody(rx)),
    )
        .into_response())
}

/// Plans an export of the caller's org against a fresh checkpoint (HTTP and
/// MCP): the selection of a partial bundle is computed and signed, the
/// consistency proof asked for made. A step erased between the checkpoint
/// and the plan makes it sign a newer checkpoint and plan again.
pub(crate) async fn plan_export(
    state: &Arc<AppState>,
    caller: &Caller,
    scope: ExportScope,
    options: cairn_store::ops::ExportOptions,
) -> Result<cairn_store::ops::ExportPlan, ApiError> {
    use cairn_store::ops::ExportError;
    let mut attempts = 0;
    loop {
        let cp = current_checkpoint(state, caller.org()).await?;
        let (org, scope_now) = (caller.org().to_owned(), scope.clone());
        let planned = blocking(state, move |store| {
            Ok(cairn_store::ops::plan_export(
                store,
                &org,
                &scope_now,
                options,
                &cp,
                cairn_store::now(),
            ))
        })
        .await?;
        match planned {
            Ok(plan) => return Ok(plan),
            Err(ExportError::Stale { .. }) if attempts < 3 => attempts += 1,
            Err(ExportError::Empty(m)) => return Err(ApiError::not_found(m)),
            Err(ExportError::Consent(session)) => return Err(consent_required(&session)),
            Err(ExportError::Store(e)) => return Err(e.into()),
            Err(e) => return Err(ApiError::bad_request("invalid_request", e.to_string())),
        }
    }
}

/// Trusted checkpoints given with a verification: each `checkpoint`
/// parameter is a signed checkpoint note, in base64 (standard or URL-safe).
fn trusted_param(q: &[(String, String)]) -> Result<Vec<String>, ApiError> {
    use base64::Engine as _;
    q.iter()
        .filter(|(k, _)| k == "checkpoint")
        .map(|(_, v)| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v)
                .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(v))
                .map_err(|_| {
                    ApiError::bad_request(
                        "invalid_request",
                        "checkpoint must be a signed checkpoint note in base64",
                    )
                })?;
            String::from_utf8(bytes).map_err(|_| {
                ApiError::bad_request("invalid_request", "checkpoint is not UTF-8 text")
            })
        })
        .collect()
}

async fn verify_bundle(
    State(state): State<Arc<AppState>>,
    _caller: Caller,
    Query(q): Query<Vec<(String, String)>>,
    body: Bytes,
) -> Result<Json, ApiError> {
    let trusted = trusted_param(&q)?;
    let pinned = q
        .iter()
        .filter(|(k, _)| k == "key")
        .map(|(_, v)| {
            cairn_core::note::NoteVerifier::parse(v).map_err(|e| {
                ApiError::bad_request("invalid_request", format!("key must be a vkey: {e}"))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let started = Instant::now();
    let result = tokio::task::spawn_blocking(move || {
        let mut verifier = cairn_core::bundle::BundleVerifier::new(pinned);
        for note in trusted {
            verifier.trust_checkpoint(note);
        }
        for line in cairn_core::bundle::bundle_lines(&body) {
            if !verifier.push_bytes(line) {
                break;
            }
        }
        verifier.finish()
    })
    .await
    .map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "a worker failed",
        )
    })?;
    state.metrics.verification(result.verdict.verified);
    let mut v = wire::verdict_to_json(
        &result.verdict,
        started.elapsed().as_millis(),
        cairn_store::now(),
    );
    v["server_key"] = json!(result.server_key);
    v["checkpoint_size"] = json!(result.checkpoint.map(|c| c.0));
    Ok(axum::Json(v))
}

/// Registers an agent's Ed25519 public key, so that it can sign its steps.
/// A key bound to an agent registers for that agent only.
async fn register_agent_key(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    body: Bytes,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_write(), "register agent keys")?;
    Caller::require_enabled(&state)?;
    let v = parse_json(&body)?;
    let agent_id = match (
        v.get("agent_id").and_then(Value::as_str),
        &caller.key.agent_id,
    ) {
        (Some(a), Some(bound)) if a != bound => {
            return Err(ApiError::forbidden(format!(
                "this key may only act as agent {bound}"
            )));
        }
        (Some(a), _) => a.to_owned(),
        (None, Some(bound)) => bound.clone(),
        (None, None) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "agent_id is required",
            ));
        }
    };
    let public_key = public_key_param(v.get("public_key").and_then(Value::as_str))?;
    let request = WriteRequest::RegisterKey {
        org_id: caller.org().to_owned(),
        agent_id: agent_id.clone(),
        public_key,
    };
    match state.ledger.submit(request).await? {
        Written::KeyRegistered { seq, key_id } => Ok((
            StatusCode::CREATED,
            axum::Json(json!({"key_id": key_id, "agent_id": agent_id, "seq": seq})),
        )
            .into_response()),
        other => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("unexpected {other:?}"),
        )),
    }
}

fn key_json(key: &ApiKey) -> Value {
    json!({
        "id": key.id, "org_id": key.org_id, "role": key.role.as_str(), "agent_id": key.agent_id,
        "label": key.label, "created_at": key.created_at.to_string(),
        "revoked_at": key.revoked_at.map(|t| t.to_string()),
    })
}

async fn create_key(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    body: Bytes,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_admin(), "manage keys")?;
    let v = parse_json(&body)?;
    let role = v
        .get("role")
        .and_then(Value::as_str)
        .and_then(Role::parse)
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid_request",
                "role must be writer, reader, auditor or admin",
            )
        })?;
    let agent = v.get("agent_id").and_then(Value::as_str).map(str::to_owned);
    if let Some(a) = &agent {
        cairn_core::record::validate_id("agent_id", a)
            .map_err(|e| ApiError::bad_request("malformed_id", e.to_string()))?;
    }
    let label = v
        .get("label")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let (key, token) = ApiKey::generate(
        caller.org(),
        role,
        agent.as_deref(),
        &label,
        cairn_store::now(),
    )?;
    let stored = key.clone();
    blocking(&state, move |store| Ok(store.put_api_key(&stored)?)).await?;
    let mut body = key_json(&key);
    body["token"] = json!(token);
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

async fn list_keys(State(state): State<Arc<AppState>>, caller: Caller) -> Result<Json, ApiError> {
    caller.require(caller.key.role.can_admin(), "manage keys")?;
    let org = caller.org().to_owned();
    let keys = blocking(&state, move |store| Ok(store.api_keys(&org)?)).await?;
    Ok(axum::Json(Value::Array(
        keys.iter().map(key_json).collect(),
    )))
}

async fn revoke_key(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(key_id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_admin(), "manage keys")?;
    let org = caller.org().to_owned();
    let id = key_id.clone();
    let revoked = blocking(&state, move |store| {
        Ok(store.revoke_api_key(&org, &id, cairn_store::now())?)
    })
    .await?;
    if !revoked {
        return Err(ApiError::not_found(format!("key {key_id}")));
    }
    if let Ok(mut keys) = state.keys.write() {
        keys.retain(|_, (k, _)| k.id != key_id);
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Creates the first admin key of `org_id` if the org has no key yet, and
/// returns its token (to print once).
pub fn bootstrap_admin_key(
    store: &dyn LedgerStore,
    org_id: &str,
) -> Result<Option<String>, cairn_store::StoreError> {
    if !store.api_keys(org_id)?.is_empty() {
        return Ok(None);
    }
    let (key, token) = ApiKey::generate(
        org_id,
        Role::Admin,
        None,
        "bootstrap admin",
        cairn_store::now(),
    )?;
    store.put_api_key(&key)?;
    Ok(Some(token))
}

/// Serves until `shutdown` resolves, then stops taking requests, finishes
/// those in flight and returns (the caller closes the ledger, which
/// flushes the sequencer).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Serves the OTLP/HTTP paths alone (`--otlp-listen`, conventionally port
/// 4318, where exporters send with `OTEL_EXPORTER_OTLP_ENDPOINT`) until
/// `shutdown` resolves.
pub async fn serve_otlp(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, otlp::router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    /// Every path given to `.route(...)` in this file is in the OpenAPI
    /// document, and every documented path is routed here.
    #[test]
    fn every_routed_path_is_documented() {
        let source = include_str!("lib.rs");
        let routed: std::collections::BTreeSet<&str> = source
            .split(".route(")
            .skip(1)
            .filter_map(|rest| rest.trim_start().strip_prefix('"'))
            .filter_map(|rest| rest.split('"').next())
            .filter(|p| p.starts_with('/'))
            .collect();
        let doc: serde_json::Value = serde_json::from_str(super::OPENAPI).unwrap();
        let documented: std::collections::BTreeSet<&str> = doc["paths"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(routed, documented);
    }
}
