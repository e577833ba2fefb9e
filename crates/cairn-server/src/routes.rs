//! The router: every route with its handler's OpenAPI annotation (so the
//! served document is generated from what is routed), the limits each route
//! runs under, and the request counter.

use super::*;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

/// The OpenAPI document served at `/openapi.json`, generated from the
/// routes and their handlers' annotations (`api_doc`). The committed copy
/// (`docs/openapi.json`) is checked against it by a test.
pub fn openapi_document() -> &'static str {
    static DOCUMENT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let (_, main) = api_routes().split_for_parts();
        let (_, bundles) = bundle_routes(&Limits::default(), usize::MAX).split_for_parts();
        let mut paths = main;
        paths.merge(bundles);
        api_doc::document(paths)
    });
    &DOCUMENT
}

/// Every documented route but the bundle upload, which has limits of its
/// own. A route is added only with its handler's `#[utoipa::path]`, so the
/// document and the router cannot disagree.
fn api_routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(metrics))
        .routes(routes!(openapi))
        .routes(routes!(docs_page::index))
        .routes(routes!(docs_page::script))
        .routes(routes!(docs_page::style))
        .routes(routes!(start_session, list_sessions))
        .routes(routes!(replay))
        .routes(routes!(verify_one_session))
        .routes(routes!(seal))
        .routes(routes!(session_root))
        .routes(routes!(append_step))
        .routes(routes!(append_batch))
        .routes(routes!(get_step))
        .routes(routes!(erase_step))
        .routes(routes!(oversight::review))
        .routes(routes!(oversight::queue))
        .routes(routes!(oversight::record_event))
        .routes(routes!(oversight::get_event))
        .routes(routes!(turns::parse))
        .routes(routes!(otlp::traces))
        .routes(routes!(otlp::metrics))
        .routes(routes!(otlp::logs))
        .routes(routes!(traces::post))
        .routes(routes!(traces::get))
        .routes(routes!(traces::post_sql))
        .routes(routes!(turns::record))
        .routes(routes!(turns::turn))
        .routes(routes!(turns::trail))
        .routes(routes!(verify_whole_org))
        .routes(routes!(search))
        .routes(routes!(checkpoint))
        .routes(routes!(tlog::checkpoint))
        .routes(routes!(inclusion_proof))
        .routes(routes!(consistency_proof))
        .routes(routes!(inclusion_receipt))
        .routes(routes!(consistency_receipt))
        .routes(routes!(export))
        .routes(routes!(register_agent_key, agent_keys::list))
        .routes(routes!(agent_keys::revoke))
        .routes(routes!(agent_keys::rotate))
        .routes(routes!(create_key, list_keys))
        .routes(routes!(revoke_key))
        .routes(routes!(mcp_http::protected_resource))
        .routes(routes!(mcp_http::protected_resource_for_mcp))
}

/// The CORS layer for `origins` (`None` when there are none): requests
/// from those origins' pages may send an API key (`Authorization`) and a
/// JSON, NDJSON or OTLP body, and read `Retry-After` and
/// `Content-Disposition`; nothing rides on cookies (no credentials mode).
/// Origins are checked when the server starts ([`check_cors_origins`]).
fn cors_layer(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use axum::http::{HeaderValue, Method};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok()),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::HEAD, Method::POST, Method::DELETE])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                header::CONTENT_ENCODING,
                header::ACCEPT,
            ])
            .expose_headers([header::RETRY_AFTER, header::CONTENT_DISPOSITION])
            .max_age(Duration::from_secs(600)),
    )
}

/// Cross-origin access is for `/v1/` only: the service routes beside the
/// API (`/metrics`, which trusts callers on the server's own machine,
/// `/healthz`, `/openapi.json`, `/docs`, `/.well-known/...`) never answer
/// another origin's page, so their requests reach the CORS layer as if no
/// page had sent them (without `Origin`, which they do not read).
async fn same_origin_outside_v1(
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if !request.uri().path().starts_with("/v1/") {
        request.headers_mut().remove(header::ORIGIN);
    }
    next.run(request).await
}

/// Checks `CAIRN_CORS_ORIGINS`: each is `*` or an origin,
/// `http(s)://host[:port]` with nothing after it, as a browser sends it
/// in `Origin`; gives what is wrong with the first that is not.
pub fn check_cors_origins(origins: &[String]) -> Result<(), String> {
    for origin in origins {
        if origin == "*" {
            continue;
        }
        let given = origin.trim_end_matches('/');
        let refused = |why: &str| {
            Err(format!(
                "{origin:?} is not an origin ({why}): give scheme://host[:port] as a browser sends it in Origin (https://app.example, http://localhost:5173), or *"
            ))
        };
        let (scheme, rest) = match given.split_once("://") {
            Some((scheme @ ("http" | "https"), rest)) => (scheme, rest),
            _ => return refused("the scheme must be http or https"),
        };
        // `host`, `host:port`, `[v6]` or `[v6]:port`.
        let (host_ok, port) = match rest.strip_prefix('[') {
            Some(v6) => {
                let Some((address, after)) = v6.split_once(']') else {
                    return refused("an IPv6 address must end with ]");
                };
                let port = match after {
                    "" => None,
                    _ => match after.strip_prefix(':') {
                        Some(port) => Some(port),
                        None => return refused("text after the address"),
                    },
                };
                (address.parse::<std::net::Ipv6Addr>().is_ok(), port)
            }
            None => {
                let (host, port) = match rest.rsplit_once(':') {
                    Some((host, port)) => (host, Some(port)),
                    None => (rest, None),
                };
                let label_ok = |label: &str| {
                    !label.is_empty()
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                };
                (host.split('.').all(label_ok), port)
            }
        };
        if !host_ok {
            return refused("the host must be a name, an IPv4 address or [an IPv6 address]");
        }
        if let Some(port) = port {
            let default = if scheme == "https" { 443 } else { 80 };
            match port.parse::<u16>() {
                Ok(0) | Err(_) => return refused("the port must be a number from 1 to 65535"),
                Ok(p) if p == default => {
                    return refused(
                        "browsers leave the scheme's default port out: give it without",
                    );
                }
                Ok(_) => {}
            }
        }
    }
    Ok(())
}

/// The bundle upload: streamed and verified as it arrives, so its size and
/// time limits are its own.
fn bundle_routes(limits: &Limits, bundle_limit: usize) -> OpenApiRouter<Arc<AppState>> {
    use tower_http::timeout::{RequestBodyDeadlineLayer, TimeoutLayer};
    OpenApiRouter::new().routes(routes!(verify_bundle).map(|route| {
        route
            .layer::<_, std::convert::Infallible>(RequestBodyDeadlineLayer::new(
                limits.bundle_body_timeout,
            ))
            .layer::<_, std::convert::Infallible>(DefaultBodyLimit::max(bundle_limit))
            .layer::<_, std::convert::Infallible>(TimeoutLayer::with_status_code(
                StatusCode::SERVICE_UNAVAILABLE,
                limits.bundle_body_timeout + limits.request_timeout,
            ))
    }))
}

/// The router with every route.
pub fn router(state: Arc<AppState>) -> Router {
    use tower_http::timeout::{RequestBodyDeadlineLayer, RequestBodyTimeoutLayer, TimeoutLayer};
    let body_limit = state.config.max_body_bytes;
    let bundle_limit = state.config.max_bundle_bytes;
    let limits = state.config.limits.clone();
    let (api, _) = api_routes().split_for_parts();
    let (bundles, _) = bundle_routes(&limits, bundle_limit).split_for_parts();
    // After routing (a router's layer wraps each route), so the matched
    // route's template names its documented parameters.
    let api = api.layer(axum::middleware::from_fn(refuse_undocumented_params));
    let bundles = bundles.layer(axum::middleware::from_fn(refuse_undocumented_params));
    // Cross-origin access, when configured, to these routes only (each
    // route's layer answers its preflight): never the web UI's pages,
    // whose forms rely on the browser's same-origin rule, or MCP, which
    // checks origins itself.
    let (api, bundles, tiles) = match cors_layer(&state.config.cors_origins) {
        Some(cors) => (
            api.layer(cors.clone())
                .layer(axum::middleware::from_fn(same_origin_outside_v1)),
            bundles.layer(cors.clone()),
            tlog::routes().layer(cors),
        ),
        None => (api, bundles, tlog::routes()),
    };
    api.merge(tiles)
        .merge(ui::routes())
        .nest_service("/mcp", mcp_http::service(Arc::clone(&state)))
        .fallback(
            |method: axum::http::Method, uri: axum::http::Uri| async move {
                if method == axum::http::Method::POST && matches!(uri.path(), "/v1" | "/v1/") {
                    ApiError::not_found_because(format!("route not found{OTLP_PATH_HINT}"))
                        .into_response()
                } else if is_ui(uri.path()) {
                    crate::ui::plain_error_page(
                        StatusCode::NOT_FOUND,
                        "not_found",
                        "there is no page at this address",
                    )
                } else if let Some(hint) = misjoined_path_hint(uri.path()) {
                    ApiError::not_found(format!("route {}{hint}", logged_path(uri.path())))
                        .into_response()
                } else if uri.path().len() > 1 && uri.path().ends_with('/') {
                    // What to send instead: the same address without the slash.
                    ApiError::not_found(format!(
                        "route {} (routes have no trailing slash: {})",
                        logged_path(uri.path()),
                        logged_path(uri.path().trim_end_matches('/'))
                    ))
                    .into_response()
                } else {
                    ApiError::not_found("route").into_response()
                }
            },
        )
        .layer(RequestBodyDeadlineLayer::new(limits.body_timeout))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            limits.request_timeout,
        ))
        .merge(bundles)
        .layer(RequestBodyTimeoutLayer::new(limits.body_idle_timeout))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            count_errors,
        ))
        .with_state(state)
}

/// The query parameters of every documented operation, by method
/// (lowercase) and route template, read from the served OpenAPI document:
/// what the document lists is exactly what a route accepts.
fn documented_query_params() -> &'static HashMap<(String, String), Vec<String>> {
    static PARAMS: std::sync::LazyLock<HashMap<(String, String), Vec<String>>> =
        std::sync::LazyLock::new(|| {
            let mut params = HashMap::new();
            let document: Value = serde_json::from_str(openapi_document()).unwrap_or(Value::Null);
            let Some(paths) = document.get("paths").and_then(Value::as_object) else {
                return params;
            };
            for (path, item) in paths {
                let Some(item) = item.as_object() else {
                    continue;
                };
                for (method, operation) in item {
                    let names = operation
                        .get("parameters")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter(|p| p.get("in").and_then(Value::as_str) == Some("query"))
                        .filter_map(|p| p.get("name").and_then(Value::as_str))
                        .map(str::to_owned)
                        .collect();
                    params.insert((method.clone(), path.clone()), names);
                }
            }
            params
        });
    &PARAMS
}

/// Refuses a query parameter the matched `/v1/` route's OpenAPI
/// operation does not list (400 `unknown_field` naming it), so that every
/// API route treats a misspelt or unsupported parameter alike: some
/// handlers checked their own lists and others ignored what they did not
/// read. A query string that does not parse is left to the handler; the
/// OTLP receiver's routes are left alone (its errors have OTLP's own
/// shape, and exporters send no query parameters), as is the C2SP
/// tlog-tiles API under `/v1/tlog/` (read as static files: a monitor or
/// cache may add its own parameters to every address), and so are the
/// service's routes outside `/v1/` (`/healthz`, `/metrics`,
/// `/openapi.json`, `/docs`, `/.well-known/...`), which probes, scrapers
/// and caches call with parameters of their own.
async fn refuse_undocumented_params(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let (Some(route), Some(_)) = (
        request.extensions().get::<axum::extract::MatchedPath>(),
        request.uri().query(),
    ) else {
        return next.run(request).await;
    };
    if !route.as_str().starts_with("/v1/")
        || route.as_str().starts_with("/v1/tlog/")
        || ["/v1/traces", "/v1/metrics", "/v1/logs"].contains(&route.as_str())
    {
        return next.run(request).await;
    }
    let method = match *request.method() {
        axum::http::Method::HEAD => "get".to_owned(),
        ref other => other.as_str().to_ascii_lowercase(),
    };
    if let Some(known) = documented_query_params().get(&(method, route.as_str().to_owned()))
        && let Ok(axum::extract::Query(pairs)) =
            axum::extract::Query::<Vec<(String, String)>>::try_from_uri(request.uri())
    {
        let known: Vec<&str> = known.iter().map(String::as_str).collect();
        if let Err(e) = input::refuse_unknown_params(pairs.iter().map(|(n, _)| n), &known) {
            return e.into_response();
        }
    }
    next.run(request).await
}

/// A request's path as the log keeps it: a segment that holds what looks
/// like an API key (`crate::error::holds_a_token`, the rule answers and
/// ingest use: a token pasted where a key id belongs) is replaced, so that
/// no secret reaches the log.
fn logged_path(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            if crate::error::holds_a_token(segment) {
                "<redacted>"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether `path` is served by MCP (`/mcp`, and whatever lies below it,
/// which the nested service answers too).
fn is_mcp(path: &str) -> bool {
    path == "/mcp" || path.starts_with("/mcp/")
}

/// What a `POST` to the root or to `/v1` is told: such a request is
/// usually an OTLP exporter given the base URL where it wants the full
/// path, or the reverse.
const OTLP_PATH_HINT: &str = ": an OTLP exporter sends traces to /v1/traces (OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:PORT, which the SDK completes, or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://HOST:PORT/v1/traces)";

/// What to change when `path` is a base URL joined to a route the wrong
/// way (a base URL ending in `/`, or one that already holds `/v1`, to
/// which a client or an exporter appended its own path), or `None`.
pub(crate) fn misjoined_path_hint(path: &str) -> Option<String> {
    let collapsed = path
        .split('/')
        .filter(|segment| !segment.is_empty())
        .fold(String::new(), |joined, segment| joined + "/" + segment);
    if path.contains("//") {
        Some(format!(
            " (the path has an empty segment, //: the base URL or endpoint given to the client probably ends with a slash; without it the path is {})",
            logged_path(&collapsed)
        ))
    } else if path == "/v1/v1" || path.starts_with("/v1/v1/") {
        let mut rest = path;
        while let Some(shorter) = rest.strip_prefix("/v1").filter(|r| r.starts_with("/v1")) {
            rest = shorter;
        }
        Some(format!(
            " (the path repeats /v1: give the client the server's base URL, http://HOST:PORT, without /v1; without the repetition the path is {})",
            logged_path(rest)
        ))
    } else {
        None
    }
}

/// The longest plain-text rejection kept as an error's message.
const REJECTION_TEXT_BYTES: usize = 1024;

/// Around every route: counts answers by status for `/metrics`, logs
/// refusals, gives the rejections of axum and rmcp (plain text) and the
/// request timeout's empty 503 the one JSON error shape (a page for the
/// web UI's addresses), and marks every
/// answer that names no caching of its own `Cache-Control: no-store`.
pub(crate) async fn count_errors(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = request.method().clone();
    let path = logged_path(request.uri().path());
    // A page on an allowed origin reads every `/v1/` answer, also those
    // made outside the routes' CORS layer (an unknown route's 404, the
    // request timeout's 503).
    let cors_origin = request
        .uri()
        .path()
        .starts_with("/v1/")
        .then(|| request.headers().get(header::ORIGIN))
        .flatten()
        .and_then(|origin| cors_allowed(&state.config.cors_origins, origin));
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|m| m.as_str().to_owned());
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
                // The web UI's own pages (a refused sign-in shows the form).
                || v.as_bytes().starts_with(b"text/html")
        });
    if status.is_client_error() && !is_json {
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
            StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
            StatusCode::NOT_FOUND => "not_found",
            StatusCode::REQUEST_TIMEOUT => "timeout",
            StatusCode::FORBIDDEN => "forbidden",
            StatusCode::UNAUTHORIZED => "unauthorized",
            StatusCode::NOT_ACCEPTABLE => "not_acceptable",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            _ => "invalid_request",
        };
        // The rejection's own text says what to fix (axum: "Invalid URL:
        // Cannot parse `abc` to a `u64`"; rmcp: "Not Acceptable: Client
        // must accept both application/json and text/event-stream"); a
        // short one is kept as the message.
        let reason = status.canonical_reason().unwrap_or("invalid request");
        let (parts, body) = response.into_parts();
        let headers = parts.headers;
        let text = axum::body::to_bytes(body, REJECTION_TEXT_BYTES)
            .await
            .ok()
            .and_then(|bytes| String::from_utf8(bytes.to_vec()).ok())
            .map(|text| text.trim().to_owned())
            .filter(|text| !text.is_empty() && !text.contains('\n'));
        let mut message = match text {
            Some(text) if text.starts_with(reason) => text,
            Some(text) => format!("{reason}: {text}"),
            None => reason.to_owned(),
        };
        // rmcp's refusal of a request without a session names no way out:
        // a hand-written client is told the handshake.
        if is_mcp(&path) && status == StatusCode::BAD_REQUEST && message.contains("Session ID") {
            message.push_str(
                " (send `initialize` first, without the header, then give the Mcp-Session-Id header its answer carries with every later request)",
            );
        }
        // An OTLP exporter pointed at the server's root (or at /v1) is
        // told the path its traces go to.
        if method == axum::http::Method::POST && path == "/" {
            message.push_str(OTLP_PATH_HINT);
        }
        // A 405 says which methods the address takes, as the OpenAPI
        // document lists them (axum adds `Allow` only after this layer).
        if status == StatusCode::METHOD_NOT_ALLOWED
            && let Some(route) = &route
        {
            let mut allowed: Vec<String> = documented_query_params()
                .keys()
                .filter(|(_, path)| path == route)
                .map(|(method, _)| method.to_ascii_uppercase())
                .collect();
            // A GET route answers HEAD too.
            if allowed.iter().any(|m| m == "GET") {
                allowed.push("HEAD".into());
            }
            allowed.sort();
            if !allowed.is_empty() {
                // The route, not the path: nothing the client sent is
                // repeated.
                message = format!(
                    "{} is not a method of {route}; it takes {}",
                    crate::error::shown(method.as_str()),
                    allowed.join(", ")
                );
            }
        }
        let mut shaped = if is_ui(&path) {
            crate::ui::plain_error_page(status, code, &message)
        } else {
            ApiError::new(status, code, message).into_response()
        };
        // What the refusal's headers tell the client stays (405's Allow,
        // and the CORS headers a page on an allowed origin needs to read
        // the error).
        for name in [
            header::ALLOW,
            header::RETRY_AFTER,
            header::WWW_AUTHENTICATE,
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            header::VARY,
        ] {
            if let Some(value) = headers.get(&name) {
                shaped.headers_mut().insert(name, value.clone());
            }
        }
        if is_mcp(&path) {
            shaped = crate::mcp_http::as_json_rpc_error(shaped).await;
        }
        return with_cors(no_store(shaped), cors_origin.as_ref());
    }
    // The request timeout answers 503 with no body.
    if status == StatusCode::SERVICE_UNAVAILABLE && !is_json {
        let message = format!(
            "the request took longer than {} s (CAIRN_REQUEST_TIMEOUT)",
            state.config.limits.request_timeout.as_secs()
        );
        let mut shaped = if is_ui(&path) {
            crate::ui::plain_error_page(status, "timeout", &message)
        } else {
            ApiError::new(status, "timeout", message).into_response()
        };
        if is_mcp(&path) {
            shaped = crate::mcp_http::as_json_rpc_error(shaped).await;
        }
        return with_cors(no_store(shaped), cors_origin.as_ref());
    }
    // Every other refusal of `/mcp` (the gate's, in the API's shape).
    let response = if is_mcp(&path) && (status.is_client_error() || status.is_server_error()) {
        crate::mcp_http::as_json_rpc_error(response).await
    } else {
        response
    };
    with_cors(no_store(response), cors_origin.as_ref())
}

/// What `Access-Control-Allow-Origin` answers a page of `origin` with:
/// `*` when `CAIRN_CORS_ORIGINS` holds it, the origin itself when it is
/// one of them (kept lower case, no trailing slash), else nothing.
fn cors_allowed(
    origins: &[String],
    origin: &axum::http::HeaderValue,
) -> Option<axum::http::HeaderValue> {
    if origins.iter().any(|allowed| allowed == "*") {
        return Some(axum::http::HeaderValue::from_static("*"));
    }
    let text = origin.to_str().ok()?;
    origins
        .iter()
        .any(|allowed| allowed == text)
        .then(|| origin.clone())
}

/// `response` with the CORS headers a page of `origin` (already allowed)
/// needs to read it, where the routes' CORS layer did not add them.
fn with_cors(mut response: Response, origin: Option<&axum::http::HeaderValue>) -> Response {
    let Some(origin) = origin else {
        return response;
    };
    let headers = response.headers_mut();
    if !headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        headers.append(header::VARY, axum::http::HeaderValue::from_static("origin"));
    }
    response
}

/// Whether `path` is one of the web UI's addresses, whose errors a
/// browser shows: answered as pages, not as the API's JSON.
fn is_ui(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// Answers hold an org's data (exports, replays, searches): never cached
/// unless the route says otherwise (tiles, static assets), and never read
/// by a browser as another type than the one they name (a Markdown replay
/// holds what agents wrote, HTML included: `nosniff` keeps a browser from
/// taking it for a page).
fn no_store(mut response: Response) -> Response {
    let headers = response.headers_mut();
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(
            header::CACHE_CONTROL,
            axum::http::HeaderValue::from_static("no-store"),
        );
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        axum::http::HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::{check_cors_origins, logged_path};

    /// `CAIRN_CORS_ORIGINS` takes origins as browsers send them, or `*`;
    /// anything else stops the start with what to give instead.
    #[test]
    fn cors_origins_are_checked() {
        let ok =
            |o: &[&str]| check_cors_origins(&o.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(ok(&["https://app.example", "http://localhost:5173", "*"]).is_ok());
        assert!(
            ok(&["https://app.example/"]).is_ok(),
            "a trailing slash is dropped"
        );
        assert!(ok(&[]).is_ok());
        assert!(ok(&["http://[::1]:8080", "https://10.0.0.2:8443"]).is_ok());
        for bad in [
            "app.example",
            "https://",
            "https://app.example/path",
            "https://user@app.example",
            "ftp://app.example",
            "https://app.example?x=1",
            "https://app example",
            "https://app.example:abc",
            "https://app.example:99999",
            "https://app.example:",
            "https://app.example:443",
            "http://app.example:80",
            "http://*.example.com",
            "https://app.example;x",
            "https://app.example*",
            "http://[::1",
            "http://[nope]",
        ] {
            let refused = ok(&[bad]).expect_err(bad);
            assert!(refused.contains("is not an origin"), "{bad}: {refused}");
        }
    }

    /// No spelling of a token in a path reaches the log; other paths are
    /// kept as they are.
    #[test]
    fn tokens_in_paths_are_not_logged() {
        let secret = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcde";
        for path in [
            format!("/v1/keys/cairn_0123456789ab_{secret}"),
            format!("/v1/keys/%20CAIRN_0123456789ab_{secret}"),
            format!("/v1/keys/cairn%5F0123456789ab_{secret}"),
            format!("/v1/keys/0123456789ab_{secret}"),
            format!("/v1/keys/%200123456789ab_{secret}"),
            format!("/v1/keys/0123456789ab%5F{secret}"),
            format!("/v1/keys/c%61irn_0123456789ab_{secret}"),
            format!("/v1/keys/cairn%255F0123456789ab_{secret}"),
            format!("/v1/sessions/x0123456789ab_{secret}"),
            format!("/v1/sessions/cairn-0123456789ab_{secret}"),
        ] {
            let logged = logged_path(&path);
            assert!(!logged.contains(secret), "{logged}");
            assert!(logged.starts_with("/v1/"), "{logged}");
        }
        for kept in ["/v1/keys/0123456789ab", "/v1/sessions/s-1/verify", "/"] {
            assert_eq!(logged_path(kept), kept);
        }
    }
}
