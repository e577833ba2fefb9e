//! # cairn-server
//!
//! The HTTP API of `cairn serve`: JSON over HTTP/1.1 (axum), every request
//! scoped to the org of its API key, errors as JSON bodies with stable
//! codes, `/healthz`, Prometheus `/metrics`, and the OpenAPI document at
//! `/openapi.json`. With `cairn-wire` (whose `wire` and `render` it
//! re-exports), it is the only crate that knows wire formats; storage and
//! the integrity core never see JSON bodies.
//!
//! Writes go through the [`cairn_store::Ledger`] (validated and hashed in
//! the request's task, sequenced and group-committed by its thread, answered
//! after the fsync). Reads run on the blocking pool.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod agent_keys;
mod api_doc;
mod auth;
mod cpu;
mod docs_page;
pub mod embedding_endpoint;
pub mod embedding_worker;
mod error;
mod held;
mod input;
mod keys;
mod limits;
mod log_api;
pub mod mcp;
mod mcp_http;
mod metrics;
pub mod monitor;
pub mod otlp;
mod oversight;
mod routes;
mod search_api;
mod sessions;
mod steps;
mod tlog;
mod traces;
mod turns;
mod ui;
pub mod witness;
pub mod witness_push;

// The readers and writers of outside bytes live in `cairn-wire` (so that
// the fuzz targets build them without the server); here under their old
// names.
pub use cairn_wire::{render, wire};

pub use auth::Caller;
pub(crate) use auth::*;
pub use error::{ApiError, ErrorBody, ErrorDetail, UNACKNOWLEDGED_WRITE, without_tokens};
pub use input::{
    REVIEWS_LIMIT, ResultLimit, SESSIONS_LIMIT, SQL_ROWS_LIMIT, refuse_unknown_step_members,
    result_limit,
};
pub use keys::bootstrap_admin_key;
pub use limits::{AllowedHosts, Limits};
pub use metrics::Metrics;

use keys::*;
use log_api::*;
pub use oversight::decision as review_decision;
pub use routes::{check_cors_origins, openapi_document, router};
use search_api::*;
pub use search_api::{SEARCH_PARAMS, search_input};
use sessions::*;
pub use sessions::{cursor_text, export_range, listing_time, parse_cursor};
use steps::*;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cairn_core::Hash;
use cairn_core::Timestamp;
use cairn_core::detail::DetailLevel;
use cairn_core::kind::StepKind;
use cairn_core::record::Profile;
use cairn_store::ops::{ExportScope, verify_org, verify_session};
use cairn_store::{
    ApiKey, Ledger, LedgerStore, NewSession, Role, SessionCursor, SessionFilter, WriteRequest,
    Written, token_hash,
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
    /// Browser origins (`scheme://host[:port]`, or `*`) whose pages may
    /// call the API from another origin (CORS): the REST API, the OTLP
    /// receiver, the tlog tiles and the service routes, never the web UI
    /// or MCP. Empty (the default): no cross-origin access.
    pub cors_origins: Vec<String>,
    /// What embeds sampled steps (in the background) and semantic queries:
    /// the built-in word hash unless a model or endpoint is configured.
    pub embedder: Arc<dyn cairn_store::embed::Embedder>,
    /// Steps the background embedder takes at once.
    pub embedding_batch: usize,
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
            cors_origins: Vec::new(),
            embedder: Arc::new(cairn_store::embed::WordHash),
            embedding_batch: 32,
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
    /// The memory parsed request bodies hold ([`MAX_HELD_BODY_MEMORY`]).
    bodies: limits::MemoryBudget,
    /// Slots for expensive work (see [`Limits::max_expensive`]).
    expensive: limits::ExpensiveSlots,
    /// The streamed replays' buffer, in KiB (see
    /// [`Limits::replay_buffer_bytes`]).
    replay_buffer: limits::ExpensiveSlots,
    /// Replay batches being read at once ([`sessions::REPLAY_READS`],
    /// one org at most half).
    replay_reads: limits::ExpensiveSlots,
    /// Requests per API key (see [`Limits::rate_per_second`]).
    rate: Option<limits::RateLimiter>,
    /// MCP's session manager over HTTP.
    mcp_manager: Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
    /// Who opened each MCP session.
    mcp_sessions: limits::McpSessions,
    /// MCP sessions' GET streams.
    mcp_streams: Arc<mcp_http::McpStreams>,
    /// The web UI's signed-in sessions.
    ui_sessions: ui::UiSessions,
    /// The background embedder (stopped when the state is dropped).
    embedding: embedding_worker::EmbeddingWorker,
    /// Where a request's long CPU work runs ([`INLINE_WORK_BYTES`]).
    cpu: cpu::CpuPool,
    /// Writes the OTLP spans whose wait for their session is over (none
    /// when holding is off, writes are disabled or the store is read-only).
    _held_flusher: Option<otlp::HeldFlusher>,
}

impl AppState {
    /// State over a ledger.
    pub fn new(ledger: Arc<Ledger>, config: ServerConfig) -> Arc<AppState> {
        let store = ledger.store_arc();
        let embedding = embedding_worker::EmbeddingWorker::start(
            Arc::clone(&store),
            Arc::clone(&config.embedder),
            config.embedding_batch,
        );
        let mut manager =
            rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default();
        manager.session_config.keep_alive = Some(config.limits.mcp_session_idle);
        let manager = Arc::new(manager);
        let otlp = otlp::OtlpState::new(&config.otlp);
        // Also with a hold time of zero: spans held by an earlier run are
        // written then.
        let held_flusher = (config.enabled && !store.is_read_only()).then(|| {
            otlp::HeldFlusher::start(
                Arc::clone(&ledger),
                config.otlp.hold_for,
                Arc::clone(&otlp.held),
            )
        });
        Arc::new(AppState {
            ledger,
            store,
            metrics: Metrics::default(),
            otlp,
            bodies: limits::MemoryBudget::new(MAX_HELD_BODY_MEMORY),
            expensive: limits::ExpensiveSlots::new(config.limits.max_expensive),
            replay_buffer: limits::ExpensiveSlots::new(
                limits::replay_buffer_bytes(&config.limits).div_ceil(1024),
            ),
            replay_reads: limits::ExpensiveSlots::new(sessions::REPLAY_READS),
            rate: limits::rate_limiter(&config.limits),
            mcp_sessions: limits::McpSessions::new(Arc::clone(&manager)),
            mcp_streams: Arc::default(),
            mcp_manager: manager,
            config,
            keys: RwLock::new(HashMap::new()),
            ui_sessions: ui::UiSessions::default(),
            embedding,
            cpu: cpu::CpuPool::new(),
            _held_flusher: held_flusher,
        })
    }

    /// The server's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The background embedder's counters.
    pub fn embedding(&self) -> &embedding_worker::EmbeddingStats {
        self.embedding.stats()
    }
}

/// Loads a sentence-transformers model directory as the embedder
/// (`--embedding-model`); an error names the file and the reason.
pub fn load_embedding_model(
    dir: &std::path::Path,
) -> Result<Arc<dyn cairn_store::embed::Embedder>, String> {
    #[cfg(feature = "model")]
    {
        cairn_store::sentence_model::SentenceModel::load(dir)
            .map(|model| Arc::new(model) as Arc<dyn cairn_store::embed::Embedder>)
            .map_err(|e| format!("loading the embedding model in {}: {e}", dir.display()))
    }
    #[cfg(not(feature = "model"))]
    {
        Err(format!(
            "this cairn was built without the `model` feature and cannot run {}; use --embedding-endpoint, or rebuild with default features",
            dir.display()
        ))
    }
}

/// Runs store work that holds stored steps parsed on the CPU pool
/// ([`cpu::CpuPool`], one thread per core), not on the blocking pool
/// ([`blocking`], one thread per request): a step's payloads of many
/// small values take tens of times their stored text once parsed, so as
/// many such reads as requests at once could hold gigabytes, and the
/// blocking pool's many threads each keep an allocator arena of what a
/// parse freed. The work takes `org`'s turn on the pool; `what` names it
/// if it fails.
async fn on_cpu<T: Send + 'static>(
    state: &AppState,
    org: &str,
    what: &str,
    work: impl FnOnce(&dyn LedgerStore) -> T + Send + 'static,
) -> Result<T, ApiError> {
    let store = Arc::clone(&state.store);
    state.cpu.run(org, what, move || work(store.as_ref())).await
}

/// Runs store work on the blocking pool; not at all if the caller stopped
/// waiting before a thread took it (as [`cpu::CpuPool::run`]).
async fn blocking<T: Send + 'static>(
    state: &Arc<AppState>,
    work: impl FnOnce(&dyn LedgerStore) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = Arc::clone(&state.store);
    let (done, answer) = tokio::sync::oneshot::channel();
    drop(tokio::task::spawn_blocking(move || {
        if !done.is_closed() {
            let _ = done.send(work(store.as_ref()));
        }
    }));
    // A work that panicked dropped its sender.
    answer.await.map_err(|_| worker_failed("a worker failed"))?
}

/// What the parsed JSON bodies of the REST and MCP requests in flight may
/// hold in memory together, as [`cairn_core::json::parsed_memory_bound`]
/// counts it before parsing: a body of many small objects holds up to
/// about a hundred times its size, and a request holds its body's values
/// until it is answered (a batch's steps wait for the sequencer), so
/// concurrent bodies at the size limit could otherwise hold gigabytes.
/// Past it, `503 overloaded` with `Retry-After: 1` (one request alone
/// always goes through).
pub const MAX_HELD_BODY_MEMORY: usize = 256 * 1024 * 1024;

/// A request body as JSON, strictly: a member given twice, or an integer
/// beyond the 64-bit range (which would silently become a float), is
/// refused rather than guessed at. The memory its values may hold is
/// counted against [`MAX_HELD_BODY_MEMORY`] until the guard is dropped
/// (keep it for the request). A body past [`INLINE_WORK_BYTES`] is parsed
/// on the CPU pool ([`cpu::CpuPool`]), not on one of the runtime's few
/// worker threads (2 MiB of JSON is milliseconds of CPU, during which
/// every other request on that thread would wait).
async fn parse_json(
    state: &AppState,
    org: &str,
    body: &Bytes,
) -> Result<(Value, limits::HeldMemory), ApiError> {
    let held = hold_body(state, org, body)?;
    // The count goes with the work: a client that hangs up drops this
    // handler, not the parse, which holds the value until it ends.
    let large = body.len() > INLINE_WORK_BYTES;
    let body = body.clone();
    let (parsed, held) = state
        .cpu
        .run_when(org, large, "parsing the request body", move || {
            (wire::parse_strict(&body), held)
        })
        .await?;
    let value = parsed.map_err(|e| ApiError::bad_request("invalid_json", e.message))?;
    Ok((value, held))
}

/// Input bytes past which a request's CPU work (parsing its body,
/// preparing its steps, checking an audit event's detail, splitting a
/// thinking text) is done on the CPU pool ([`cpu::CpuPool`]); below it
/// (about 0.1 ms of work) on the request's own thread, which a hop to the
/// pool would cost more than it saves.
const INLINE_WORK_BYTES: usize = 64 * 1024;

/// The answer when a blocking-pool task of a request panicked.
fn worker_failed(what: &str) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", what)
}

/// Queues `request` for the ledger, keeping `counted` (the request's
/// count: its parsed body and what it built) alive until the write is
/// committed, even if the client hangs up or the request times out
/// ([`limits::UntilWritten`]): a queued write carries what the request sent
/// (an audit event's detail, a review's note, a reason, ids) until the
/// sequencer checks it. Every write a surface queues for a request goes
/// through here (steps once [`steps::submit_steps`] has prepared and
/// counted them), but two: OTLP's steps, whose own budget a task of
/// their own holds until they are answered, and a checkpoint, which
/// carries nothing the request sent. Over MCP's stdio nothing is counted
/// but steps, turns and trace imports (one local client).
fn queue_write(
    state: &AppState,
    counted: &limits::UntilWritten,
    request: WriteRequest,
) -> cairn_store::Pending {
    state.ledger.submit_holding(request, counted.hold())
}

/// [`queue_write`], from the CPU pool when `large`: for a request whose
/// checks before queueing (an audit event's detail in canonical form) can
/// be milliseconds of CPU, which would otherwise hold a runtime worker.
async fn queue_write_when_large(
    state: &AppState,
    org: &str,
    counted: &limits::UntilWritten,
    request: WriteRequest,
    large: bool,
) -> Result<cairn_store::Pending, ApiError> {
    let (ledger, hold) = (Arc::clone(&state.ledger), counted.hold());
    state
        .cpu
        .run_when(org, large, "queueing the write", move || {
            ledger.submit_holding(request, hold)
        })
        .await
}

/// Counts what JSON `body` may hold once parsed against
/// [`MAX_HELD_BODY_MEMORY`] (an org's requests at most half of it), or
/// refuses it (`503 overloaded`).
fn hold_body(state: &AppState, org: &str, body: &[u8]) -> Result<limits::HeldMemory, ApiError> {
    hold_memory(state, org, cairn_core::json::parsed_memory_bound(body))
}

/// Counts `bytes` that a request of `org` holds in memory (its parsed
/// body, the steps it built from it) against [`MAX_HELD_BODY_MEMORY`],
/// until the guard is dropped, or refuses it (`503 overloaded`).
pub(crate) fn hold_memory(
    state: &AppState,
    org: &str,
    bytes: usize,
) -> Result<limits::HeldMemory, ApiError> {
    state
        .bodies
        .hold(Some(org), bytes)
        .map_err(|now| memory_refused(now, bytes))
}

/// Counts `bytes` more that a request builds (steps, an answer): grown on
/// the request's memory where it has one (so that a request alone always
/// goes through), else held on its own until the guard returned is
/// dropped; `503 overloaded` past the limits.
fn hold_more(
    state: &AppState,
    org: &str,
    memory: Option<&limits::RequestMemory>,
    bytes: usize,
) -> Result<Option<limits::HeldMemory>, ApiError> {
    match memory {
        Some(memory) => memory
            .grow(bytes)
            .map(|()| None)
            .map_err(|now| memory_refused(now, bytes)),
        None => hold_memory(state, org, bytes).map(Some),
    }
}

fn memory_refused(now: usize, bytes: usize) -> ApiError {
    limits::overloaded(format!(
        "requests in flight hold {} MiB of parsed JSON and the steps made from it (limit {} MiB in all, half for one org), and this request would hold {} MiB more (objects and arrays of few, small members hold many times their text): retry after the delay",
        now >> 20,
        MAX_HELD_BODY_MEMORY >> 20,
        bytes.div_ceil(1 << 20)
    ))
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
            "invalid_argument",
            format!("{key} must be true or false"),
        )
        .with_field(key)),
    }
}

type Json = axum::Json<Value>;

/// A request body's optional string member; another type is a 400.
fn optional_string(body: &Value, key: &str) -> Result<Option<String>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::bad_request(
            "invalid_argument",
            format!("{key} must be a string"),
        )
        .with_field(key)),
    }
}

/// A request body's required string member: absent (or null) is
/// `missing_field`, as every surface answers it; another type a 400.
fn required_string(body: &Value, key: &str) -> Result<String, ApiError> {
    optional_string(body, key)?.ok_or_else(|| input::missing_field(key))
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
                "invalid_argument",
                "public_key must be base64 of a 32-byte Ed25519 public key",
            )
            .with_field("public_key")
        })
}

/// Seed 004's `level` parameter: `generic`, `detailed` or `full`.
fn level_param(q: &HashMap<String, String>) -> Result<Option<DetailLevel>, ApiError> {
    level_value(q.get("level").map(String::as_str))
}

/// A `level` as every surface reads it (a query parameter, an MCP
/// argument): absent, or `generic`, `detailed` or `full`; anything else a
/// 400 naming the field.
pub(crate) fn level_value(level: Option<&str>) -> Result<Option<DetailLevel>, ApiError> {
    level
        .map(|l| {
            DetailLevel::parse(l).ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_argument",
                    format!("level must be generic, detailed or full, not {}", shown(l)),
                )
                .with_field("level")
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

/// The level an export is made at for `caller`, asked for `level`: an
/// export without a level shows every field (FORMAT 4.1: the org's own
/// record), which only the org's admin keys (not bound to an agent) make;
/// for another key (an auditor, a bound admin) it is a `full` export,
/// which needs every session's consent as `level=full` does (a review: an
/// auditor that left the level out got the full content of sessions
/// without consent).
fn export_level(caller: &Caller, level: Option<DetailLevel>) -> Option<DetailLevel> {
    match level {
        None if !exports_own_record(caller) => Some(DetailLevel::Full),
        given => given,
    }
}

/// Whether `caller` exports the org's own record (every field, whatever
/// the consent): an admin key not bound to an agent.
fn exports_own_record(caller: &Caller) -> bool {
    caller.key.role == Role::Admin && caller.key.agent_id.is_none()
}

fn consent_required(session: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "consent_required",
        format!(
            "session {session} has no recorded consent to full-detail sharing (full_consent when the session starts): ask for level detailed or generic. An export that names no level is made at level full for every key but an admin key bound to no agent (which exports the org's own record, every field)"
        ),
    )
}

/// A write produced something its handler did not ask for (a bug).
/// The error for a ledger answer of another kind than the request's (a
/// bug): the answer is logged for the operator, never sent (its Debug text
/// holds hashes and internal fields, and means nothing to a client).
fn unexpected(w: Written) -> ApiError {
    tracing::error!("the ledger answered with an unexpected result: {w:?}");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "the ledger answered this request with a result of another kind: an internal error, logged on the server",
    )
}

#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "service",
    summary = "Health check",
    security(()),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
async fn healthz(State(state): State<Arc<AppState>>) -> Result<Json, ApiError> {
    blocking(&state, |store| Ok(store.orgs()?.len())).await?;
    Ok(axum::Json(json!({"status": "ok"})))
}

/// Whether a request carries a header that proxies add to what they
/// forward (any name holding `forwarded`, `Via`, `CDN-Loop`, or one
/// naming the client: `X-Real-IP`, any `...client-ip`/`...clientip`,
/// `CF-Connecting-IP`, `X-Envoy-External-Address`,
/// `X-Appengine-User-IP`): a loopback request carrying one came through a
/// proxy, not from the operator's own machine. (A proxy set up as
/// OPERATIONS says adds `X-Forwarded-Proto` alone; one that adds nothing
/// is told apart only by the metrics token.)
fn forwarded_by_a_proxy(headers: &HeaderMap) -> bool {
    headers.keys().any(|name| {
        // Header names arrive lower-cased.
        let name = name.as_str();
        name.contains("forwarded")
            || name.ends_with("client-ip")
            || name.ends_with("clientip")
            || name.ends_with("connecting-ip")
            || [
                "via",
                "x-real-ip",
                "x-envoy-external-address",
                "x-appengine-user-ip",
                "cdn-loop",
            ]
            .contains(&name)
    })
}

/// Prometheus metrics count every org's traffic: only the operator reads
/// them, with the metrics token, or from the server's own machine.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "service",
    summary = "Prometheus metrics",
    description = "Counts every org's requests, so it is for the operator: with CAIRN_METRICS_TOKEN set, send it as Authorization: Bearer; without, only clients on the server's own machine (loopback) are answered, and not a request a proxy forwarded (one carrying Forwarded, Via, CDN-Loop, any header named ...forwarded..., X-Real-IP, ...Client-IP, CF-Connecting-IP, X-Envoy-External-Address or X-Appengine-User-IP); others get 403.",
    security(()),
    responses(
        (status = 200, description = "OK", content_type = "text/plain", body = String),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 403, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
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
        // A loopback peer whose request a proxy forwarded (it names the
        // client it came from) is not the server's own machine: behind a
        // reverse proxy on the same host every client would look local.
        None => {
            extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                // `::ffff:127.0.0.1` on a dual-stack listener is loopback.
                .is_some_and(|peer| peer.0.ip().to_canonical().is_loopback())
                && !forwarded_by_a_proxy(&headers)
        }
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
    let mut text = state.metrics.render(stats);
    text.push_str(&format!(
        "# HELP cairn_sequencer_in_flight Writes queued for the sequencer or in the batch it is committing.\n# TYPE cairn_sequencer_in_flight gauge\ncairn_sequencer_in_flight {}\n# HELP cairn_request_memory_bytes Memory counted for requests in flight and the writes they queued, until written (limit {} in all, half for one org).\n# TYPE cairn_request_memory_bytes gauge\ncairn_request_memory_bytes {}\n",
        state.ledger.backlog(),
        MAX_HELD_BODY_MEMORY,
        state.bodies.held()
    ));
    text.push_str(&format!(
        "# HELP cairn_mcp_sessions MCP sessions open over HTTP.\n# TYPE cairn_mcp_sessions gauge\ncairn_mcp_sessions {}\n# HELP cairn_mcp_streams MCP sessions' GET streams open.\n# TYPE cairn_mcp_streams gauge\ncairn_mcp_streams {}\n# HELP cairn_expensive_available Free slots for expensive operations.\n# TYPE cairn_expensive_available gauge\ncairn_expensive_available {}\n",
        state.mcp_sessions.open(),
        state.mcp_streams.open_count(),
        state.expensive.available()
    ));
    text.push_str(&state.otlp.held.render());
    let embedding = state.embedding();
    text.push_str(&format!(
        "# HELP cairn_embedding_backlog Steps waiting for the background embedder (counted every few seconds).
# TYPE cairn_embedding_backlog gauge
cairn_embedding_backlog {}
         # HELP cairn_embeddings_total Queued steps the background embedder settled (embedded, or dropped as erased).
# TYPE cairn_embeddings_total counter
cairn_embeddings_total {}
         # HELP cairn_embedding_failures_total Rounds of the background embedder that failed (the steps stay queued).
# TYPE cairn_embedding_failures_total counter
cairn_embedding_failures_total {}
",
        embedding.backlog(),
        embedding.embedded(),
        embedding.failures()
    ));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    tag = "service",
    summary = "This document",
    security(()),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        openapi_document(),
    )
        .into_response()
}

/// A boolean query parameter: `true`/`1` or `false`/`0`; absent is false.
/// Anything else is refused rather than read as false.
pub(crate) fn query_bool(q: &HashMap<String, String>, key: &str) -> Result<bool, ApiError> {
    match q.get(key).map(String::as_str) {
        None | Some("false" | "0") => Ok(false),
        Some("true" | "1") => Ok(true),
        Some(other) => Err(ApiError::bad_request(
            "invalid_argument",
            format!("{key} must be true or false, not {}", shown(other)),
        )
        .with_field(key)),
    }
}

/// The `format` parameter of the readable endpoints and tools: `json`
/// (default) or `markdown`.
pub(crate) fn wants_markdown(format: Option<&str>) -> Result<bool, ApiError> {
    match format {
        None | Some("json") => Ok(false),
        Some("markdown") => Ok(true),
        Some(other) => Err(ApiError::bad_request(
            "invalid_argument",
            format!("format must be json or markdown, not {}", shown(other)),
        )
        .with_field("format")),
    }
}

/// An id given as a query parameter (a filter or a scope): absent, or a
/// well-formed id (FORMAT.md's id rule); an empty or malformed one is
/// refused rather than matching nothing.
fn query_id(q: &HashMap<String, String>, key: &'static str) -> Result<Option<String>, ApiError> {
    match q.get(key) {
        None => Ok(None),
        Some(value) => {
            cairn_core::record::validate_id(key, value).map_err(|e| {
                ApiError::bad_request("malformed_id", e.to_string()).with_field(key)
            })?;
            Ok(Some(value.clone()))
        }
    }
}

pub(crate) fn query_u64(q: &HashMap<String, String>, key: &str) -> Result<Option<u64>, ApiError> {
    q.get(key)
        .map(|v| {
            decimal::<u64>(v).ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_argument",
                    format!("{key} must be a non-negative integer, not {}", shown(v)),
                )
                .with_field(key)
            })
        })
        .transpose()
}

/// A non-negative integer spelled in decimal digits only: Rust's
/// `from_str` also takes a leading `+` (`limit=%2B5`), a second spelling
/// of every number that other readers of the same URL (a proxy, a cache,
/// a log filter) would not take for the same.
pub(crate) fn decimal<T: std::str::FromStr>(v: &str) -> Option<T> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
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

/// Serves a witness (`cairn witness`, or `cairn serve --witness-log`)
/// until `shutdown` resolves, with the API's accept loop, connection cap
/// and timeouts (`limits`: the server's own, or the defaults).
pub async fn serve_witness(
    listener: tokio::net::TcpListener,
    witness: Arc<witness::Witness>,
    limits: &Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    limits::serve(listener, witness::router(witness, limits), limits, shutdown).await
}

/// Serves the OTLP/HTTP paths alone (`--otlp-listen`, conventionally port
/// 4318, where exporters send with `OTEL_EXPORTER_OTLP_ENDPOINT`) until
/// `shutdown` resolves.
pub async fn serve_otlp(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // The same accept loop as the main port (its header and write
    // timeouts and connection cap); the router times bodies and requests
    // as the main router does.
    let limits = state.config.limits.clone();
    limits::serve(listener, otlp::router(state), &limits, shutdown).await
}

#[cfg(test)]
mod tests {
    /// The committed copy of the OpenAPI document (`docs/openapi.json`,
    /// read by the clients' tests and by people) is what the server serves.
    /// `CAIRN_UPDATE_OPENAPI=1 cargo test -p cairn-server openapi` rewrites it.
    #[test]
    fn the_committed_openapi_document_is_the_generated_one() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
        let generated = super::openapi_document();
        if std::env::var_os("CAIRN_UPDATE_OPENAPI").is_some() {
            std::fs::write(&path, generated).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/openapi.json differs from the document the server generates; \
             run CAIRN_UPDATE_OPENAPI=1 cargo test -p cairn-server openapi and commit it"
        );
    }

    /// Every `$ref` of the document names a schema it defines, and every
    /// operation has a unique id.
    #[test]
    fn the_openapi_document_is_self_contained() {
        let doc: serde_json::Value = serde_json::from_str(super::openapi_document()).unwrap();
        let text = doc.to_string();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for piece in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = piece.split('"').next().unwrap();
            assert!(
                schemas.contains_key(name),
                "$ref to undefined schema {name}"
            );
        }
        let mut ids = std::collections::BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                let id = operation["operationId"].as_str().unwrap();
                assert!(
                    ids.insert(id.to_owned()),
                    "{method} {path}: operationId {id} twice"
                );
            }
        }
    }
}
