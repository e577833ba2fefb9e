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
mod auth;
mod docs_page;
mod error;
mod input;
mod keys;
mod limits;
mod log_api;
pub mod mcp;
mod mcp_http;
mod metrics;
pub mod otlp;
mod oversight;
pub mod render;
mod traces;
mod turns;
pub mod wire;

pub use auth::Caller;
pub(crate) use auth::*;
pub use error::{ApiError, ErrorBody, ErrorDetail};
pub use keys::bootstrap_admin_key;
pub use limits::{AllowedHosts, Limits};
pub use metrics::Metrics;

use keys::*;
use log_api::*;

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
use error::shown;
use limits::Body;
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
    /// Timeouts, connection, concurrency, rate and size limits.
    pub limits: Limits,
    /// The `Host` names and browser origins MCP over HTTP answers to.
    pub allowed_hosts: AllowedHosts,
    /// A token that `GET /metrics` must present (`Authorization: Bearer`);
    /// without one, metrics are served to loopback clients only.
    pub metrics_token: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            max_body_bytes: 2 * 1024 * 1024,
            max_bundle_bytes: 256 * 1024 * 1024,
            key_cache_ttl: Duration::from_secs(5),
            enabled: true,
            otlp: otlp::OtlpConfig::default(),
            limits: Limits::default(),
            allowed_hosts: AllowedHosts::default(),
            metrics_token: None,
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
    /// Slots for expensive work (see [`Limits::max_expensive`]).
    expensive: Arc<tokio::sync::Semaphore>,
    /// Requests per API key (see [`Limits::rate_per_second`]).
    rate: Option<limits::RateLimiter>,
    /// MCP's session manager over HTTP.
    mcp_manager: Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
    /// Who opened each MCP session.
    mcp_sessions: limits::McpSessions,
}

impl AppState {
    /// State over a ledger.
    pub fn new(ledger: Arc<Ledger>, config: ServerConfig) -> Arc<AppState> {
        let store = ledger.store_arc();
        let mut manager =
            rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default();
        manager.session_config.keep_alive = Some(config.limits.mcp_session_idle);
        let manager = Arc::new(manager);
        Arc::new(AppState {
            ledger,
            store,
            metrics: Metrics::default(),
            otlp: otlp::OtlpState::new(&config.otlp),
            expensive: Arc::new(tokio::sync::Semaphore::new(
                config.limits.max_expensive.max(1),
            )),
            rate: limits::rate_limiter(&config.limits),
            mcp_sessions: limits::McpSessions::new(Arc::clone(&manager)),
            mcp_manager: manager,
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
    use tower_http::timeout::{RequestBodyDeadlineLayer, RequestBodyTimeoutLayer, TimeoutLayer};
    let body_limit = state.config.max_body_bytes;
    let bundle_limit = state.config.max_bundle_bytes;
    let limits = state.config.limits.clone();
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .route("/docs", get(docs_page::index))
        .route("/docs/docs.js", get(docs_page::script))
        .route("/docs/docs.css", get(docs_page::style))
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
            "/v1/agent-keys",
            post(register_agent_key).get(agent_keys::list),
        )
        .route("/v1/agent-keys/{key_id}/revoke", post(agent_keys::revoke))
        .route("/v1/agent-keys/{key_id}/rotate", post(agent_keys::rotate))
        .route("/v1/keys", post(create_key).get(list_keys))
        .route("/v1/keys/{key_id}", delete(revoke_key))
        .nest_service("/mcp", mcp_http::service(Arc::clone(&state)))
        .route(
            "/.well-known/oauth-protected-resource",
            get(mcp_http::protected_resource),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(mcp_http::protected_resource),
        )
        .fallback(|| async { ApiError::not_found("route") })
        .layer(RequestBodyDeadlineLayer::new(limits.body_timeout))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            limits.request_timeout,
        ))
        // Bundles are streamed and verified as they arrive: their size and
        // time are their own.
        .route(
            "/v1/bundles/verify",
            post(verify_bundle)
                .layer::<_, std::convert::Infallible>(RequestBodyDeadlineLayer::new(
                    limits.bundle_body_timeout,
                ))
                .layer::<_, std::convert::Infallible>(DefaultBodyLimit::max(bundle_limit))
                .layer::<_, std::convert::Infallible>(TimeoutLayer::with_status_code(
                    StatusCode::SERVICE_UNAVAILABLE,
                    limits.bundle_body_timeout + limits.request_timeout,
                )),
        )
        .layer(RequestBodyTimeoutLayer::new(limits.body_idle_timeout))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            count_errors,
        ))
        .with_state(state)
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
            StatusCode::REQUEST_TIMEOUT => "timeout",
            StatusCode::FORBIDDEN => "forbidden",
            StatusCode::UNAUTHORIZED => "unauthorized",
            _ => "invalid_request",
        };
        let message = status
            .canonical_reason()
            .unwrap_or("invalid request")
            .to_owned();
        return ApiError::new(status, code, message).into_response();
    }
    // The request timeout answers 503 with no body.
    if status == StatusCode::SERVICE_UNAVAILABLE && !is_json {
        return ApiError::new(
            status,
            "timeout",
            format!(
                "the request took longer than {} s (CAIRN_REQUEST_TIMEOUT)",
                state.config.limits.request_timeout.as_secs()
            ),
        )
        .into_response();
    }
    response
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

/// A request body as JSON, strictly: a member given twice, or an integer
/// beyond the 64-bit range (which would silently become a float), is
/// refused rather than guessed at.
fn parse_json(body: &Bytes) -> Result<Value, ApiError> {
    wire::parse_strict(body).map_err(|e| ApiError::bad_request("invalid_json", e.0))
}

/// A request body that must be a JSON object with only these members;
/// an unknown member is refused, naming it.
pub(crate) fn members<'a>(
    body: &'a Value,
    allowed: &[&str],
) -> Result<&'a serde_json::Map<String, Value>, ApiError> {
    let object = body.as_object().ok_or_else(|| {
        ApiError::bad_request("invalid_request", "the body must be a JSON object")
    })?;
    input::refuse_unknown(object, allowed)?;
    Ok(object)
}

/// A request body's optional boolean member; another type is a 400.
fn optional_bool(body: &Value, key: &str) -> Result<Option<bool>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::bad_request(
            "invalid_request",
            format!("{key} must be true or false"),
        )),
    }
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

/// Prometheus metrics count every org's traffic: only the operator reads
/// them, with the metrics token, or from the server's own machine.
async fn metrics(
    State(state): State<Arc<AppState>>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
) -> Response {
    let allowed = match &state.config.metrics_token {
        Some(token) => bearer(&headers).is_some_and(|given| {
            // Compared as hashes: the time taken says nothing of the token.
            token_hash(given) == token_hash(token)
        }),
        None => extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .is_some_and(|peer| peer.0.ip().is_loopback()),
    };
    if !allowed {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "metrics count every org's requests and are for the operator: send the metrics token (CAIRN_METRICS_TOKEN) as Authorization: Bearer, or scrape from the server's own machine",
        )
        .into_response();
    }
    let stats = state.ledger.stats();
    let mut text = state.metrics.render(
        stats.batches.load(std::sync::atomic::Ordering::Relaxed),
        stats.requests.load(std::sync::atomic::Ordering::Relaxed),
    );
    text.push_str(&format!(
        "# HELP cairn_mcp_sessions MCP sessions open over HTTP.\n# TYPE cairn_mcp_sessions gauge\ncairn_mcp_sessions {}\n# HELP cairn_expensive_available Free slots for expensive operations.\n# TYPE cairn_expensive_available gauge\ncairn_expensive_available {}\n",
        state.mcp_sessions.open(),
        state.expensive.available_permits()
    ));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// A step body (seed 000's member names). A key bound to an agent may only
/// write as that agent, and is the default agent.
fn step_for(caller: &Caller, value: &Value) -> Result<cairn_store::NewStep, ApiError> {
    if let Some(object) = value.as_object() {
        input::refuse_unknown(object, wire::STEP_MEMBERS)?;
    }
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
    Body(body): Body,
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
    Body(body): Body,
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
    // Every item must be a well-formed step before anything is written: a
    // malformed item is a client bug, and the whole batch is refused with
    // its position. What the ledger refuses (a sealed session, a clock
    // skew) is answered per item below.
    let mut steps = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let step = step_for(&caller, item).map_err(|mut e| {
            e.message = format!(
                "step {index} of the batch: {} (nothing in this batch was written)",
                e.message
            );
            e.field = Some(match e.field.take() {
                Some(field) => format!("[{index}].{field}"),
                None => format!("[{index}]"),
            });
            e
        })?;
        steps.push(step);
    }
    // Submit everything first so the sequencer commits it together.
    let pending: Vec<_> = steps
        .into_iter()
        .map(|s| state.ledger.submit(WriteRequest::Step(Box::new(s))))
        .collect();
    let mut results = Vec::with_capacity(pending.len());
    let mut accepted = 0;
    for p in pending {
        let outcome = p.await.map_err(ApiError::from);
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
    Body(body): Body,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_write(), "start sessions")?;
    Caller::require_enabled(&state)?;
    let v = parse_json(&body)?;
    members(
        &v,
        &[
            "session_id",
            "agent_id",
            "hash_agent_id",
            "profile",
            "predecessor",
            "predecessor_session",
            "full_consent",
        ],
    )?;
    let text = |k: &str| optional_string(&v, k);
    let session_id = text("session_id")?
        .ok_or_else(|| ApiError::bad_request("invalid_request", "session_id is required"))?;
    let agent_id = match (text("agent_id")?, &caller.key.agent_id) {
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
    let agent_id = if optional_bool(&v, "hash_agent_id")?.unwrap_or(false) {
        cairn_core::record::hashed_agent_id(&agent_id)
    } else {
        agent_id
    };
    let profile = match text("profile")?.as_deref() {
        None => Profile::Standard,
        Some(p) => Profile::parse(p).ok_or_else(|| {
            ApiError::bad_request("invalid_request", "profile must be standard or strict")
        })?,
    };
    let predecessor =
        match text("predecessor")? {
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
        predecessor_session: text("predecessor_session")?,
        full_consent: optional_bool(&v, "full_consent")?.unwrap_or(false),
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
    input::refuse_unknown_params(q.keys(), &["agent_id", "limit", "verify"])?;
    let limit = match q.get("limit") {
        None => 20,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=1000).contains(l))
            .ok_or_else(|| ApiError::bad_request("invalid_request", "limit must be 1 to 1000"))?,
    };
    let agent = query_id(&q, "agent_id")?;
    // Verification is on unless `verify=false`, and bounded.
    let verify = !q.contains_key("verify") || query_bool(&q, "verify")?;
    let org = caller.org().to_owned();
    let budget = state.config.limits.list_verify_steps;
    let rows = blocking(&state, move |store| {
        Ok(listed_sessions(store, &org, agent.as_deref(), limit, verify, budget)?
            .into_iter()
            .map(|(s, valid)| {
                json!({
                    "session_id": s.session_id, "agent_id": s.agent_id, "step_count": s.step_count,
                    "first_step_at": s.first_step_at.map(|t| t.to_string()),
                    "last_step_at": s.last_step_at.map(|t| t.to_string()),
                    "chain_valid": valid, "sealed": s.sealed,
                })
            })
            .collect::<Vec<_>>())
    })
    .await?;
    Ok(axum::Json(Value::Array(rows)))
}

/// Sessions of an org, newest first, each with its chain's validity: the
/// listed sessions are verified in order until `budget` steps were
/// verified; the rest (and all of them when `verify` is false) get
/// `None`, so that a listing costs at most `budget` steps of hashing
/// whatever the org's size.
pub(crate) fn listed_sessions(
    store: &dyn LedgerStore,
    org: &str,
    agent: Option<&str>,
    limit: usize,
    verify: bool,
    budget: u64,
) -> Result<Vec<(cairn_store::SessionSummary, Option<bool>)>, ApiError> {
    let mut spent = 0u64;
    let mut out = Vec::new();
    for s in store.list_sessions(org, agent, limit)? {
        let valid = if verify && spent.saturating_add(s.step_count) <= budget {
            spent += s.step_count;
            Some(verify_session(store, org, &s.session_id)?.is_some_and(|v| v.verified))
        } else {
            None
        };
        out.push((s, valid));
    }
    Ok(out)
}

async fn replay(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(session_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    input::refuse_unknown_params(q.keys(), &["format", "verify", "level"])?;
    let verify = query_bool(&q, "verify")?;
    let markdown = wants_markdown(q.get("format").map(String::as_str))?;
    let level = level_param(&q)?;
    let org = caller.org().to_owned();
    let permit = if verify {
        Some(limits::expensive(&state, "verification").await?)
    } else {
        None
    };
    let (info, mut steps, verdict) = blocking(&state, move |store| {
        let _permit = permit;
        let info = store.session(&org, &session_id)?.ok_or_else(|| {
            ApiError::not_found(format!("session {}", crate::error::shown(&session_id)))
        })?;
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
    let permit = limits::expensive(&state, "verification").await?;
    let verdict = blocking(&state, move |store| {
        let _permit = permit;
        verify_session(store, &org, &session_id)?.ok_or_else(|| {
            ApiError::not_found(format!("session {}", crate::error::shown(&session_id)))
        })
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
    input::refuse_unknown_params(q.iter().map(|(k, _)| k), &["checkpoint"])?;
    let org = caller.org().to_owned();
    let trusted = trusted_param(&q)?;
    let started = Instant::now();
    let permit = limits::expensive(&state, "verification").await?;
    let result = blocking(&state, move |store| {
        let _permit = permit;
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
    input::refuse_unknown_params(q.keys(), &["require_reflection"])?;
    caller.require(caller.key.role.can_write(), "seal sessions")?;
    Caller::require_enabled(&state)?;
    let require_reflection = query_bool(&q, "require_reflection")?;
    require_own_session(&state, &caller, &session_id).await?;
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
        store.session(&org, &session_id)?.ok_or_else(|| {
            ApiError::not_found(format!("session {}", crate::error::shown(&session_id)))
        })
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
            .ok_or_else(|| ApiError::not_found(format!("step {}", crate::error::shown(&trace_id))))
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
    input::refuse_unknown_params(q.keys(), &["q", "limit"])?;
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
    // Semantic search scores every embedded step of the org.
    let permit = limits::expensive(&state, "the search").await?;
    let results = blocking(&state, move |store| {
        let _permit = permit;
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
    Body(body): Body,
) -> Result<Json, ApiError> {
    caller.require(caller.key.role.can_admin(), "erase records")?;
    Caller::require_enabled(&state)?;
    let reason = if body.is_empty() {
        String::new()
    } else {
        let v = parse_json(&body)?;
        members(&v, &["reason"])?;
        optional_string(&v, "reason")?.unwrap_or_default()
    };
    if reason.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_request",
            "reason is required (it is recorded with the erasure)",
        ));
    }
    require_own_step(&state, &caller, &trace_id).await?;
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

/// An id given as a query parameter (a filter or a scope): absent, or a
/// well-formed id (FORMAT.md's id rule); an empty or malformed one is
/// refused rather than matching nothing.
fn query_id(q: &HashMap<String, String>, key: &'static str) -> Result<Option<String>, ApiError> {
    match q.get(key) {
        None => Ok(None),
        Some(value) => {
            cairn_core::record::validate_id(key, value)
                .map_err(|e| ApiError::bad_request("malformed_id", e.to_string()))?;
            Ok(Some(value.clone()))
        }
    }
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

/// Serves until `shutdown` resolves, then stops taking requests, finishes
/// those in flight and returns (the caller closes the ledger, which
/// flushes the sequencer).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = state.config.limits.clone();
    limits::serve(listener, router(state), &limits, shutdown).await
}

/// Serves the OTLP/HTTP paths alone (`--otlp-listen`, conventionally port
/// 4318, where exporters send with `OTEL_EXPORTER_OTLP_ENDPOINT`) until
/// `shutdown` resolves.
pub async fn serve_otlp(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // The same accept loop as the main port: header, body and write
    // timeouts and the connection cap hold here too.
    let limits = state.config.limits.clone();
    limits::serve(listener, otlp::router(state), &limits, shutdown).await
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
