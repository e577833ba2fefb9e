//! MCP over Streamable HTTP (`/mcp`): the gate in front of rmcp's service
//! (hosts and origins, API keys, strict JSON, sessions bound to their key
//! and bounded), and what tells an MCP client that a Cairn API key is
//! needed: a `401` with `WWW-Authenticate` and a JSON-RPC error body the
//! SDKs show, and OAuth protected-resource metadata (RFC 9728) that names
//! no authorization server, since keys are static bearer tokens.

use crate::{ApiError, AppState, authenticate, limits, mcp, shown};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;

/// JSON-RPC error code of an authentication failure (the implementation-
/// defined server error range).
const UNAUTHENTICATED: i64 = -32001;

/// The URL the request was addressed to, from its `Host` (the server does
/// not know its public name; behind a proxy, the proxy's host). A `Host`
/// that could break out of the quoted `resource_metadata` parameter is
/// not echoed.
fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\')
        })
        .unwrap_or("127.0.0.1:8714");
    format!("http://{host}")
}

/// `401` for MCP: `WWW-Authenticate: Bearer` with the resource metadata
/// URL (RFC 9728, as the MCP authorization spec asks), and a JSON-RPC
/// error whose message says a Cairn API key is needed; its `data` is the
/// REST error object.
fn unauthorized(headers: &HeaderMap, error: &ApiError) -> Response {
    let given = headers.contains_key(header::AUTHORIZATION);
    let message = if given {
        format!(
            "Cairn refused the API key ({}). Send a valid Cairn API key as Authorization: Bearer cairn_... (an admin creates one with `cairn admin create-key` or POST /v1/keys).",
            error.message
        )
    } else {
        "Cairn needs an API key: send Authorization: Bearer cairn_... (an admin creates one with `cairn admin create-key` or POST /v1/keys). Cairn does not use OAuth.".to_owned()
    };
    let metadata = format!(
        "{}/.well-known/oauth-protected-resource/mcp",
        base_url(headers)
    );
    let mut challenge = format!("Bearer realm=\"cairn\", resource_metadata=\"{metadata}\"");
    if given {
        challenge.push_str(", error=\"invalid_token\", error_description=\"the Cairn API key is unknown, revoked or expired\"");
    }
    let body = json!({
        "jsonrpc": "2.0",
        "id": Value::Null,
        "error": {"code": UNAUTHENTICATED, "message": message, "data": error.body()},
    });
    let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    if let Ok(value) = axum::http::HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// The JSON-RPC error code of an `/mcp` refusal of `status`: `-32600`
/// (Invalid Request) for what the client must change, `-32000` (a server
/// error) for what it may retry (429, 503), `-32603` (Internal error)
/// for the server's own failure.
fn rpc_code(status: StatusCode) -> i64 {
    match status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => -32000,
        s if s.is_server_error() => -32603,
        _ => -32600,
    }
}

/// The most an error answer of `/mcp` is read to be reshaped (the API's
/// error bodies are a few hundred bytes).
const ERROR_BODY_BYTES: usize = 64 * 1024;

/// An error answer of `/mcp` given the JSON-RPC shape MCP clients read:
/// the official SDKs surface a JSON-RPC error body, and for any other say
/// only "Server returned an error response" (or "Session terminated"). Its
/// `message` is the API error's, its `data` the API error object, its `id`
/// null (the request's id is the client's to pair, as a 401's); status and
/// headers (`Retry-After`, `WWW-Authenticate`) are kept. An answer already
/// in that shape is returned as it is.
pub(crate) async fn as_json_rpc_error(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, ERROR_BODY_BYTES)
        .await
        .unwrap_or_default();
    let rest: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if rest.get("jsonrpc").is_some() {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    }
    let message = rest["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| parts.status.canonical_reason().map(str::to_owned))
        .unwrap_or_else(|| "refused".to_owned());
    let body = json!({
        "jsonrpc": "2.0",
        "id": Value::Null,
        "error": {"code": rpc_code(parts.status), "message": message, "data": rest},
    });
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, axum::body::Body::from(body.to_string()))
}

/// `GET /.well-known/oauth-protected-resource[/mcp]`: RFC 9728 metadata
/// for `/mcp`. It lists no authorization server: Cairn's API keys are
/// static bearer tokens, so a client has nothing to run an OAuth flow
/// against and should ask its user for a key.
#[utoipa::path(
    get,
    path = "/.well-known/oauth-protected-resource",
    operation_id = "mcp_http_protected_resource",
    tag = "service",
    summary = "OAuth protected-resource metadata for /mcp (RFC 9728)",
    description = "Lists no authorization server: Cairn's API keys are static bearer tokens (Authorization: Bearer cairn_...), so an MCP client has no OAuth flow to run and should ask for a key. Named by the resource_metadata parameter of a 401's WWW-Authenticate header on /mcp. No key needed.",
    security(()),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = crate::api_doc::ProtectedResource),
    ),
)]
pub(crate) async fn protected_resource(headers: HeaderMap) -> Response {
    let base = base_url(&headers);
    axum::Json(json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": [],
        "bearer_methods_supported": ["header"],
        "resource_name": "Cairn (send a Cairn API key: Authorization: Bearer cairn_...)",
        "resource_documentation": format!("{base}/openapi.json"),
    }))
    .into_response()
}

/// The same metadata at the path RFC 9728 derives from the resource
/// `/mcp` (`/.well-known/oauth-protected-resource/mcp`).
#[utoipa::path(
    get,
    path = "/.well-known/oauth-protected-resource/mcp",
    operation_id = "mcp_http_protected_resource_for_mcp",
    tag = "service",
    summary = "OAuth protected-resource metadata for /mcp (RFC 9728)",
    description = "Lists no authorization server: Cairn's API keys are static bearer tokens (Authorization: Bearer cairn_...), so an MCP client has no OAuth flow to run and should ask for a key. Named by the resource_metadata parameter of a 401's WWW-Authenticate header on /mcp. No key needed.",
    security(()),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = crate::api_doc::ProtectedResource),
    ),
)]
pub(crate) async fn protected_resource_for_mcp(headers: HeaderMap) -> Response {
    protected_resource(headers).await
}

/// MCP over Streamable HTTP at `/mcp`, behind the same API keys.
pub(crate) fn service(state: Arc<AppState>) -> Router {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let service_state = Arc::clone(&state);
    // Hosts and origins are checked by `mcp_gate`, with Cairn's settings
    // and errors.
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(state.config.max_body_bytes);
    let service = StreamableHttpService::new(
        move || Ok(mcp::CairnMcp::http(Arc::clone(&service_state))),
        Arc::clone(&state.mcp_manager),
        config,
    );
    Router::new()
        .fallback_service(service)
        .layer(axum::middleware::from_fn_with_state(state, mcp_gate))
}

/// `400` for a message `mcp::check_message` refused, as a JSON-RPC error
/// (`-32700` for what is not JSON, else `-32600` answering the request's
/// id; the MCP transport lets a refused message's 400 carry one), whose
/// `data` is the REST error object (`invalid_json`), as [`unauthorized`]'s.
fn refusal(bytes: &[u8], error: ApiError) -> Response {
    let refused = mcp::refused(bytes);
    let data = error.body();
    let body = json!({
        "jsonrpc": "2.0",
        "id": refused.id(),
        "error": {"code": refused.code(), "message": data["error"]["message"], "data": data},
    });
    (error.status, axum::Json(body)).into_response()
}

/// `400` with a JSON-RPC "method not found" (`-32601`) for a message (or a
/// batch holding one) whose method name looks like an API key, which the
/// MCP SDK's own answer would repeat; `None` for any other message.
fn method_quoting_a_token(message: &Value) -> Option<Response> {
    let quotes = |m: &Value| {
        m.get("method")
            .and_then(Value::as_str)
            .is_some_and(|name| crate::error::without_tokens(name) != name)
    };
    let quoting = match message {
        Value::Array(batch) => batch.iter().find(|m| quotes(m)),
        other => Some(other).filter(|m| quotes(m)),
    }?;
    let id = match quoting.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
        _ => Value::Null,
    };
    let error = ApiError::bad_request(
        "invalid_request",
        "no such method (its name is not repeated: it looks like an API key)",
    );
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32601, "message": error.message, "data": error.body()},
    });
    Some((error.status, axum::Json(body)).into_response())
}

/// The header that names an MCP session.
const MCP_SESSION: &str = "mcp-session-id";

/// The most an MCP `initialize` request may hold once parsed (its
/// parameters, client information and capabilities, are kept with the
/// session while it lives; a client's are a few KiB).
const MAX_INITIALIZE_MEMORY: usize = 256 * 1024;

/// In front of MCP over HTTP: checks `Host` and `Origin`, authenticates
/// the request and hands the caller to the tools through the request's
/// extensions (rmcp passes the request parts on), refuses JSON that is
/// ambiguous (duplicate members, integers beyond 64 bits), and keeps each
/// session to the key that opened it, within the session limits.
async fn mcp_gate(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Err(e) = limits::check_host(&state.config.allowed_hosts, request.headers()) {
        return e.into_response();
    }
    let caller = match authenticate(&state, request.headers()).await {
        Ok(caller) => caller,
        Err(e) if e.status == StatusCode::UNAUTHORIZED => {
            return unauthorized(request.headers(), &e);
        }
        Err(e) => return e.into_response(),
    };
    let (parts, body) = request.into_parts();
    // Whether this request opens a session (an `initialize`).
    let mut initialize = false;
    // What the body may hold once parsed (here and by the MCP SDK),
    // counted until the request is answered, as a REST body's is.
    let mut _body_memory = None;
    let body = if parts.method == axum::http::Method::POST {
        if let Err(e) = limits::refuse_encoded_body(&parts.headers) {
            return e.into_response();
        }
        let limit = state.config.max_body_bytes;
        let bytes = match axum::body::to_bytes(body, limit).await {
            Ok(bytes) => bytes,
            Err(e) => return limits::body_error(&e, limit).into_response(),
        };
        // What the parsed body may hold, as the budget counted it.
        let parsed = match crate::hold_body(&state, caller.org(), &bytes) {
            Ok(held) => {
                let parsed = held.bytes();
                _body_memory = Some(crate::limits::RequestMemory::new(held));
                parsed
            }
            Err(e) => return e.into_response(),
        };
        match mcp::check_message(&bytes) {
            Ok(message) => {
                // The MCP SDK answers an unknown method with its name: one
                // that looks like an API key is answered here instead.
                if let Some(answer) = method_quoting_a_token(&message) {
                    return answer;
                }
                let opens =
                    |m: &Value| m.get("method").and_then(Value::as_str) == Some("initialize");
                initialize = match &message {
                    Value::Array(batch) => batch.iter().any(opens),
                    other => opens(other),
                };
                // A session keeps its `initialize` request's parameters for
                // as long as it lives, beyond what a request's count covers.
                if initialize && parsed > MAX_INITIALIZE_MEMORY {
                    return refusal(
                        &bytes,
                        ApiError::bad_request(
                            "invalid_request",
                            format!(
                                "an initialize request may hold at most {} KiB once parsed (a session keeps its parameters while it lives); this one would hold {} KiB",
                                MAX_INITIALIZE_MEMORY >> 10,
                                parsed >> 10
                            ),
                        ),
                    );
                }
            }
            Err(e) => return refusal(&bytes, ApiError::bad_request("invalid_json", e)),
        }
        axum::body::Body::from(bytes)
    } else {
        body
    };
    let mut request = axum::extract::Request::from_parts(parts, body);
    let method = request.method().clone();
    let session = request
        .headers()
        .get(MCP_SESSION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let key = caller.key.id.clone();
    let org = caller.org().to_owned();
    request.extensions_mut().insert(caller);
    // The tool grows what the request holds (the steps it builds) on the
    // body's count, so that a request alone always goes through.
    if let Some(memory) = &_body_memory {
        request.extensions_mut().insert(memory.clone());
    }
    let limits = &state.config.limits;
    let response = match session {
        Some(id) => {
            // Another key's session answers like one that does not exist.
            if !state
                .mcp_sessions
                .use_session(&id, &key, limits.mcp_session_idle)
            {
                return ApiError::not_found_because(format!(
                    "MCP session {} not found: it was closed, idle past CAIRN_MCP_SESSION_IDLE, opened with another key, or the server restarted; send initialize (without the Mcp-Session-Id header) to open a new one",
                    shown(&id)
                ))
                .into_response();
            }
            // A GET opens the session's stream of server messages, which
            // holds a connection for as long as the client keeps it.
            let stream = if method == axum::http::Method::GET {
                let resumed = request.headers().contains_key("last-event-id");
                match state
                    .mcp_streams
                    .open(&id, &org, resumed, limits.max_connections)
                {
                    Ok(guard) => Some(guard),
                    Err(e) => return e.into_response(),
                }
            } else {
                None
            };
            let mut response = next.run(request).await;
            if let Some(guard) = stream
                && response.status().is_success()
            {
                response = guard.hold_until_sent(response);
            }
            let deleted = method == axum::http::Method::DELETE && response.status().is_success();
            if deleted || response.status() == StatusCode::NOT_FOUND {
                state.mcp_sessions.forget(&id);
            }
            // rmcp answers a session's DELETE with 202; the session is gone
            // at once, and clients (the Python SDK) expect 200 or 204.
            if deleted && response.status() == StatusCode::ACCEPTED {
                *response.status_mut() = StatusCode::NO_CONTENT;
            }
            response
        }
        None if initialize => {
            let reservation = match state.mcp_sessions.reserve(&key, &org, limits).await {
                Ok(r) => r,
                Err(e) => return e.into_response(),
            };
            let response = next.run(request).await;
            if let Some(id) = response
                .headers()
                .get(MCP_SESSION)
                .and_then(|v| v.to_str().ok())
            {
                reservation.confirm(id);
            }
            response
        }
        None => next.run(request).await,
    };
    // The body's parsed memory stays counted until the answer is sent: an
    // event stream's headers come before the tool has run.
    match _body_memory {
        Some(held) => crate::limits::holding_until_sent(response, held),
        None => response,
    }
}

/// The GET streams of MCP sessions: each session's standalone stream (the
/// server's messages to its client) and the streams a client resumes with
/// `Last-Event-ID` (the rest of a POST's answer after a dropped
/// connection). Each holds a connection for as long as the client keeps
/// it, pinged and exempt from the idle timeouts, so they are bounded apart
/// from sessions: one standalone stream per session (a second is 409, as
/// the MCP SDKs' servers answer), [`MAX_RESUMED_STREAMS`] resumed ones, at
/// most half of `CAIRN_MAX_CONNECTIONS` in all and a quarter for one org.
/// Without that, rmcp took 33 streams per session, and one org's sessions
/// held every connection of the listener.
#[derive(Default)]
pub(crate) struct McpStreams {
    table: std::sync::Mutex<StreamTable>,
}

/// Resumed streams one session may hold at once.
pub(crate) const MAX_RESUMED_STREAMS: usize = 4;

#[derive(Default)]
struct StreamTable {
    /// Per session: whether its standalone stream is open, and how many
    /// resumed streams are.
    sessions: std::collections::HashMap<String, (bool, usize)>,
    /// Streams open per org.
    per_org: std::collections::HashMap<String, usize>,
    /// Streams open in all.
    total: usize,
}

/// An open stream, counted until the response's body is dropped.
pub(crate) struct StreamGuard {
    streams: Arc<McpStreams>,
    session: String,
    org: String,
    resumed: bool,
}

/// How long a client refused a stream for the server's or its org's share
/// is asked to wait.
const STREAM_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

impl McpStreams {
    /// The table; a poisoned one is still a set of counts (every change to
    /// it is a few increments or decrements made together).
    fn table(&self) -> std::sync::MutexGuard<'_, StreamTable> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a stream of session `session` (of org `org`; `resumed` if
    /// the GET names a `Last-Event-ID`), or says why it may not open.
    pub(crate) fn open(
        self: &Arc<Self>,
        session: &str,
        org: &str,
        resumed: bool,
        max_connections: usize,
    ) -> Result<StreamGuard, ApiError> {
        let total = (max_connections / 2).max(1);
        let org_share = (total / 2).max(1);
        let mut table = self.table();
        let (standalone, resumes) = table.sessions.get(session).copied().unwrap_or_default();
        if !resumed && standalone {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "stream_open",
                format!(
                    "MCP session {} already has its GET stream open (one per session): read that one, or close it first",
                    shown(session)
                ),
            ));
        }
        if resumed && resumes >= MAX_RESUMED_STREAMS {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "stream_open",
                format!(
                    "MCP session {} already has {MAX_RESUMED_STREAMS} resumed GET streams open (Last-Event-ID): read those, or close some first",
                    shown(session)
                ),
            ));
        }
        if table.total >= total {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                format!(
                    "the server holds {total} MCP GET streams open, the most it may (half of CAIRN_MAX_CONNECTIONS); try again later"
                ),
            )
            .retry_after(STREAM_RETRY));
        }
        if table.per_org.get(org).copied().unwrap_or(0) >= org_share {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_streams",
                format!(
                    "org {} holds {org_share} MCP GET streams open, the most one org may (a quarter of CAIRN_MAX_CONNECTIONS): close some, or end sessions not in use (DELETE /mcp)",
                    shown(org)
                ),
            )
            .retry_after(STREAM_RETRY));
        }
        let entry = table.sessions.entry(session.to_owned()).or_default();
        if resumed {
            entry.1 += 1;
        } else {
            entry.0 = true;
        }
        *table.per_org.entry(org.to_owned()).or_insert(0) += 1;
        table.total += 1;
        Ok(StreamGuard {
            streams: Arc::clone(self),
            session: session.to_owned(),
            org: org.to_owned(),
            resumed,
        })
    }

    /// Streams open now.
    pub(crate) fn open_count(&self) -> usize {
        self.table().total
    }
}

impl StreamGuard {
    /// `response` with its body holding the guard: the stream counts until
    /// the body is done or dropped (the client left, the session ended).
    fn hold_until_sent(self, response: Response) -> Response {
        crate::limits::holding_until_sent(response, self)
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut table = self.streams.table();
        if let Some(entry) = table.sessions.get_mut(&self.session) {
            if self.resumed {
                entry.1 = entry.1.saturating_sub(1);
            } else {
                entry.0 = false;
            }
            if *entry == (false, 0) {
                table.sessions.remove(&self.session);
            }
        }
        if let Some(n) = table.per_org.get_mut(&self.org) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                table.per_org.remove(&self.org);
            }
        }
        table.total = table.total.saturating_sub(1);
    }
}
