//! What one connection, one request, one API key and one MCP session may
//! cost, with safe defaults (`docs/OPERATIONS.md` lists every one), and
//! the accept loop that enforces the connection-level ones.
//!
//! - Connections: at most [`Limits::max_connections`] at once, and
//!   [`Limits::max_connections_per_address`] of one client address; a request's
//!   headers must arrive within [`Limits::header_timeout`] of the
//!   connection opening or going idle (hyper's header timeout, so this
//!   also ends idle keep-alive connections); a response the client stops
//!   reading is abandoned after [`Limits::write_timeout`].
//! - Bodies: a body that sends nothing for [`Limits::body_idle_timeout`],
//!   or takes longer than [`Limits::body_timeout`] in all
//!   ([`Limits::bundle_body_timeout`] for bundle uploads), ends with `408`;
//!   sizes are capped per route (`ServerConfig`).
//! - Handlers: [`Limits::request_timeout`] to the response's first byte.
//! - Expensive work (bundle and org verification, exports, analyst SQL):
//!   at most [`Limits::max_expensive`] at once; past that a request waits
//!   briefly, then gets `503 overloaded` with `Retry-After`.
//! - Keys: [`Limits::rate_per_second`] requests per second per API key
//!   (GCRA, `governor`) with a burst of [`Limits::rate_burst`]; past that,
//!   `429 rate_limited` with `Retry-After`.
//! - MCP sessions: at most [`Limits::mcp_sessions_per_key`] per key and
//!   [`Limits::mcp_sessions`] in all, ended after
//!   [`Limits::mcp_session_idle`] without a request, and usable (or
//!   deletable) only with the key that opened them.

mod mcp_sessions;
mod memory;
mod slots;

pub(crate) use mcp_sessions::McpSessions;
pub(crate) use memory::{
    HeldMemory, MemoryBudget, RequestMemory, UntilWritten, holding_until_sent,
};
pub(crate) use slots::{
    ExpensiveSlot, ExpensiveSlots, Full, expensive, expensive_now, overloaded, replay_buffer,
    replay_buffer_bytes, replay_read, slot_in_turn, slot_now,
};

use crate::error::shown;
use crate::{ApiError, AppState};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use cairn_store::analyst::QueryLimits;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// Every limit of the server. The defaults are safe for a server on the
/// open network; each one is a setting of `cairn serve`.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// A request's headers must arrive within this long of the connection
    /// opening or of the previous response (idle keep-alive included).
    pub header_timeout: Duration,
    /// A request body that sends no byte for this long ends with `408`.
    pub body_idle_timeout: Duration,
    /// A request body must be complete within this long (`408`).
    pub body_timeout: Duration,
    /// The same for `POST /v1/bundles/verify`, whose bodies are large.
    pub bundle_body_timeout: Duration,
    /// A handler must start its response within this long (`503 timeout`).
    pub request_timeout: Duration,
    /// A response the client does not read for this long is abandoned and
    /// its connection closed.
    pub write_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Connections one client address may hold at once (an IPv6 address
    /// counts by its /64); past it, a new connection is answered `503
    /// overloaded` and closed. 0 turns the limit off (a server behind a
    /// proxy sees one address for every client).
    pub max_connections_per_address: usize,
    /// Expensive operations (bundle and org verification, exports,
    /// analyst SQL) running at once.
    pub max_expensive: usize,
    /// How long an expensive request waits for a free slot before `503`.
    pub expensive_wait: Duration,
    /// Longest line of an uploaded bundle, in bytes.
    pub max_bundle_line_bytes: usize,
    /// Requests per second per API key; 0 turns the limit off.
    pub rate_per_second: u32,
    /// Requests an API key may make at once above its rate.
    pub rate_burst: u32,
    /// MCP sessions one API key may hold open.
    pub mcp_sessions_per_key: usize,
    /// MCP sessions open in all.
    pub mcp_sessions: usize,
    /// An MCP session without a request for this long is ended.
    pub mcp_session_idle: Duration,
    /// Analyst SQL: rows, time, bytes of a value and of an answer.
    pub sql: QueryLimits,
    /// Listing sessions verifies each listed session's chain until this
    /// many steps were verified in the request; later sessions get
    /// `chain_valid: null`.
    pub list_verify_steps: u64,
    /// Bytes that streamed replays (`GET /v1/sessions/{id}` as JSON) may
    /// hold at once in all: each one's step positions and the batches it
    /// has read and not yet sent. One org holds at most half; at least
    /// 32 MiB (a smaller value is raised).
    pub replay_buffer_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(10),
            body_idle_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            bundle_body_timeout: Duration::from_secs(600),
            request_timeout: Duration::from_secs(120),
            write_timeout: Duration::from_secs(30),
            max_connections: 1024,
            max_connections_per_address: 256,
            max_expensive: 4,
            expensive_wait: Duration::from_secs(5),
            max_bundle_line_bytes: 16 * 1024 * 1024,
            rate_per_second: 1000,
            rate_burst: 2000,
            mcp_sessions_per_key: 16,
            mcp_sessions: 1024,
            mcp_session_idle: Duration::from_secs(300),
            sql: QueryLimits::default(),
            list_verify_steps: 10_000,
            replay_buffer_bytes: 256 * 1024 * 1024,
        }
    }
}

/// Per-key request rate.
pub(crate) type RateLimiter = governor::DefaultKeyedRateLimiter<String>;

/// The per-key limiter, if the limit is on.
/// `router` with the API's clocks on every request: a body's total
/// deadline and idle time (408) and the handler's time (503). The OTLP
/// and witness listeners take them whole; the main router sets them
/// around its routes itself, since the bundle upload has deadlines of its
/// own.
pub(crate) fn timed<S: Clone + Send + Sync + 'static>(
    router: axum::Router<S>,
    limits: &Limits,
) -> axum::Router<S> {
    use tower_http::timeout::{RequestBodyDeadlineLayer, RequestBodyTimeoutLayer, TimeoutLayer};
    router
        .layer(RequestBodyDeadlineLayer::new(limits.body_timeout))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            limits.request_timeout,
        ))
        .layer(RequestBodyTimeoutLayer::new(limits.body_idle_timeout))
}

pub(crate) fn rate_limiter(limits: &Limits) -> Option<RateLimiter> {
    let rate = NonZeroU32::new(limits.rate_per_second)?;
    let burst = NonZeroU32::new(limits.rate_burst.max(limits.rate_per_second)).unwrap_or(rate);
    Some(governor::RateLimiter::keyed(
        governor::Quota::per_second(rate).allow_burst(burst),
    ))
}

/// Counts a request of `key_id` against its rate: `429` with
/// `Retry-After` past it.
pub(crate) fn check_rate(state: &AppState, key_id: &str) -> Result<(), ApiError> {
    use governor::clock::Clock as _;
    let Some(limiter) = &state.rate else {
        return Ok(());
    };
    let key = key_id.to_owned();
    match limiter.check_key(&key) {
        Ok(()) => Ok(()),
        Err(not_until) => {
            let wait = not_until.wait_time_from(limiter.clock().now());
            // Forget keys idle long enough to be back at full burst.
            if limiter.len() > 10_000 {
                limiter.retain_recent();
            }
            Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "this API key made more than {} requests per second (burst {}): retry after {} ms",
                    state.config.limits.rate_per_second,
                    state.config.limits.rate_burst,
                    wait.as_millis()
                ),
            )
            .retry_after(wait))
        }
    }
}

/// A request body read whole, within the route's size limit; a body that
/// is too large is `413 body_too_large`, one that is too slow `408
/// timeout`.
pub(crate) struct Body(pub axum::body::Bytes);

/// Refuses a body sent with a `Content-Encoding` (other than `identity`):
/// only the OTLP receiver inflates bodies, and every other route would
/// otherwise read compressed bytes as JSON and answer with a puzzling
/// `invalid_json`.
pub(crate) fn refuse_encoded_body(headers: &HeaderMap) -> Result<(), ApiError> {
    match headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim())
    {
        None => Ok(()),
        Some(encoding) if encoding.is_empty() || encoding.eq_ignore_ascii_case("identity") => {
            Ok(())
        }
        Some(encoding) => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "this route reads its body as sent: Content-Encoding {} is not supported (send it uncompressed; only the OTLP receiver, POST /v1/traces, /v1/metrics and /v1/logs, inflates gzip and deflate)",
                shown(encoding)
            ),
        )),
    }
}

impl FromRequest<Arc<AppState>> for Body {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &Arc<AppState>) -> Result<Body, ApiError> {
        refuse_encoded_body(request.headers())?;
        match axum::body::Bytes::from_request(request, state).await {
            Ok(bytes) => Ok(Body(bytes)),
            Err(rejection) => Err(body_error(&rejection, state.config.max_body_bytes)),
        }
    }
}

/// The error for a body that could not be read.
pub(crate) fn body_error(error: &(dyn std::error::Error + 'static), limit: usize) -> ApiError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                "the request body arrived too slowly (see CAIRN_BODY_IDLE_TIMEOUT and CAIRN_BODY_TIMEOUT)",
            );
        }
        if e.is::<http_body_util::LengthLimitError>() {
            return body_too_large(limit);
        }
        source = e.source();
    }
    let text = error.to_string();
    if text.contains("length limit") {
        return body_too_large(limit);
    }
    ApiError::bad_request(
        "invalid_request",
        format!("the request body could not be read: {}", shown(&text)),
    )
}

pub(crate) fn body_too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("the request body is larger than {limit} bytes, the most this route accepts"),
    )
}

/// Where MCP over HTTP may be reached from: the `Host` names it answers
/// to and the browser origins it accepts (protection against DNS
/// rebinding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHosts {
    /// `host` (any port) or `host:port`; `*` allows every host.
    pub hosts: Vec<String>,
    /// `scheme://host[:port]`; `*` allows every origin. Empty: an origin
    /// is accepted when its host is an allowed host.
    pub origins: Vec<String>,
}

impl Default for AllowedHosts {
    fn default() -> AllowedHosts {
        AllowedHosts {
            hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            origins: Vec::new(),
        }
    }
}

impl AllowedHosts {
    /// Loopback names plus the host of `listen`, unless it is the
    /// unspecified address (0.0.0.0, ::), whose public names only the
    /// operator knows.
    pub fn for_listen(listen: &SocketAddr) -> AllowedHosts {
        let mut allowed = AllowedHosts::default();
        let ip = listen.ip();
        if !ip.is_unspecified() && !ip.is_loopback() {
            allowed.hosts.push(ip.to_string());
        }
        allowed
    }
}

/// `(host, port)` of an authority (`example.com:8080`, `[::1]:80`, `::1`).
pub(crate) fn split_authority(authority: &str) -> (String, Option<&str>) {
    let authority = authority.trim();
    if let Some(rest) = authority.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((host, tail)) => (host.to_ascii_lowercase(), tail.strip_prefix(':')),
            None => (rest.to_ascii_lowercase(), None),
        };
    }
    match authority.rsplit_once(':') {
        // One colon and digits after it: a port.
        Some((host, port))
            if !host.contains(':')
                && !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            (host.to_ascii_lowercase(), Some(port))
        }
        _ => (authority.to_ascii_lowercase(), None),
    }
}

fn host_matches(authority: &str, allowed: &[String]) -> bool {
    let (host, port) = split_authority(authority);
    allowed.iter().any(|entry| {
        if entry == "*" {
            return true;
        }
        let (h, p) = split_authority(entry);
        h == host && (p.is_none() || p == port)
    })
}

/// Checks the `Host` and `Origin` of a request to `/mcp`.
pub(crate) fn check_host(allowed: &AllowedHosts, headers: &HeaderMap) -> Result<(), ApiError> {
    let listed = |v: &[String]| {
        if v.is_empty() {
            "(none)".to_owned()
        } else {
            v.join(", ")
        }
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !host_matches(host, &allowed.hosts) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "host_not_allowed",
            format!(
                "MCP over HTTP does not answer to Host {} (protection against DNS rebinding); allowed: {}. Add the name clients use with --allowed-hosts or CAIRN_ALLOWED_HOSTS",
                shown(host),
                listed(&allowed.hosts)
            ),
        ));
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("");
    let accepted = if allowed.origins.is_empty() {
        origin
            .split_once("://")
            .is_some_and(|(_, authority)| host_matches(authority, &allowed.hosts))
    } else {
        allowed
            .origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin.trim_end_matches('/')))
    };
    if accepted {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            format!(
                "MCP over HTTP does not accept requests from Origin {}; allowed: {}. Add it with --allowed-origins or CAIRN_ALLOWED_ORIGINS",
                shown(origin),
                if allowed.origins.is_empty() {
                    format!("origins on the allowed hosts ({})", listed(&allowed.hosts))
                } else {
                    listed(&allowed.origins)
                }
            ),
        ))
    }
}

/// Serves `app` on `listener` within the connection limits until
/// `shutdown` resolves; then stops accepting, lets requests in flight
/// finish (at most 30 s) and returns.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: &Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt as _;
    let connections = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let per_address = Arc::new(AddressConnections::new(limits.max_connections_per_address));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&connections).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, a connection reset before
                    // accept: wait a little rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // One address may not hold every connection: a client that opens
        // many and dribbles each request (headers or body) would otherwise
        // leave none for anyone else until its requests' deadlines.
        let Some(address_slot) = AddressConnections::take(&per_address, peer) else {
            refuse_busy_address(&stream, limits.max_connections_per_address);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let mut stream = tokio_io_timeout::TimeoutStream::new(stream);
        stream.set_write_timeout(Some(limits.write_timeout));
        let service =
            app.clone()
                .map_request(move |mut request: Request<hyper::body::Incoming>| {
                    request
                        .extensions_mut()
                        .insert(axum::extract::ConnectInfo(peer));
                    request
                });
        let service = hyper_util::service::TowerToHyperService::new(service);
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(TokioIo::new(Box::pin(stream)), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _permit = permit;
            let _address_slot = address_slot;
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, %peer, "connection ended");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(Duration::from_secs(30)) => {
            tracing::warn!("stopping with requests still in flight after 30 s");
        }
    }
    Ok(())
}

/// The connections each client address holds (an IPv6 address by its
/// /64, the block one host is usually given), against
/// [`Limits::max_connections_per_address`].
struct AddressConnections {
    limit: usize,
    held: std::sync::Mutex<HashMap<std::net::IpAddr, usize>>,
}

/// One connection's place in its address's count, given back when the
/// connection ends.
struct AddressSlot {
    connections: Arc<AddressConnections>,
    address: std::net::IpAddr,
}

impl AddressConnections {
    /// Counts against `limit` a connection (0: no limit, still counted,
    /// which costs a map entry per address connected).
    fn new(limit: usize) -> AddressConnections {
        AddressConnections {
            limit: if limit == 0 { usize::MAX } else { limit },
            held: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The address a connection counts under.
    fn key(peer: SocketAddr) -> std::net::IpAddr {
        match peer.ip().to_canonical() {
            std::net::IpAddr::V6(v6) => {
                let mut octets = v6.octets();
                octets[8..].fill(0);
                std::net::IpAddr::V6(octets.into())
            }
            v4 => v4,
        }
    }

    /// A place for a connection from `peer`, or `None` if its address
    /// holds the most it may.
    fn take(connections: &Arc<AddressConnections>, peer: SocketAddr) -> Option<AddressSlot> {
        let address = Self::key(peer);
        let mut held = connections.held.lock().unwrap_or_else(|e| e.into_inner());
        let count = held.entry(address).or_insert(0);
        if *count >= connections.limit {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            connections: Arc::clone(connections),
            address,
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut held = self
            .connections
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.address);
            }
        }
    }
}

/// Answers a connection past its address's limit with `503 overloaded`,
/// as far as the socket takes it at once (never waiting on the client,
/// who may not read), and closes it.
fn refuse_busy_address(stream: &tokio::net::TcpStream, limit: usize) {
    // The API's error body, written by hand: the connection is refused
    // before hyper serves it.
    let body = overloaded(format!(
        "this client address holds {limit} connections to the server, the most one address may (CAIRN_MAX_CONNECTIONS_PER_ADDRESS): reuse them (keep-alive) or close some"
    ))
    .body()
    .to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(response.as_bytes());
    tracing::debug!("refused a connection past its address's limit");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address holds at most the limit; a connection that ends gives its
    /// place back; an IPv6 /64 counts as one address; 0 is no limit.
    #[test]
    fn each_address_holds_at_most_its_share() {
        let connections = Arc::new(AddressConnections::new(2));
        let peer = |text: &str| text.parse::<SocketAddr>().unwrap();
        let a = AddressConnections::take(&connections, peer("10.0.0.1:1000")).unwrap();
        let b = AddressConnections::take(&connections, peer("10.0.0.1:1001")).unwrap();
        assert!(AddressConnections::take(&connections, peer("10.0.0.1:1002")).is_none());
        assert!(AddressConnections::take(&connections, peer("10.0.0.2:1000")).is_some());
        drop(a);
        let c = AddressConnections::take(&connections, peer("10.0.0.1:1003")).unwrap();
        let v6a = AddressConnections::take(&connections, peer("[2001:db8::1]:1")).unwrap();
        let v6b = AddressConnections::take(&connections, peer("[2001:db8::ffff]:1")).unwrap();
        assert!(AddressConnections::take(&connections, peer("[2001:db8::2]:1")).is_none());
        assert!(AddressConnections::take(&connections, peer("[2001:db8:0:1::1]:1")).is_some());
        drop((b, c, v6a, v6b));
        assert!(connections.held.lock().unwrap().is_empty());
        let off = Arc::new(AddressConnections::new(0));
        for port in 0..10 {
            assert!(AddressConnections::take(&off, peer(&format!("10.0.0.1:{port}"))).is_some());
        }
    }

    #[test]
    fn hosts_match_with_and_without_ports() {
        let allowed = vec![
            "localhost".to_owned(),
            "::1".to_owned(),
            "cairn.example:8714".to_owned(),
        ];
        for (host, ok) in [
            ("localhost", true),
            ("LOCALHOST:8714", true),
            ("[::1]:8714", true),
            ("::1", true),
            ("cairn.example:8714", true),
            ("cairn.example:9999", false),
            ("cairn.example", false),
            ("evil.example", false),
            ("localhost.evil.example", false),
            ("", false),
        ] {
            assert_eq!(host_matches(host, &allowed), ok, "{host}");
        }
        assert!(host_matches("anything", &["*".to_owned()]));
    }
}
