//! The interactive API reference at `/docs`: a static page and script,
//! embedded in the binary, that render `/openapi.json` in the browser and
//! can send requests with a key typed into the page. Nothing is loaded
//! from anywhere but this server (the Content-Security-Policy says so).

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("docs/index.html");
const SCRIPT: &str = include_str!("docs/docs.js");
const STYLE: &str = include_str!("docs/docs.css");

/// Same-origin only: the page, its script and style, and the API.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET /docs`.
#[utoipa::path(
    get,
    path = "/docs",
    operation_id = "docs_page_index",
    tag = "service",
    summary = "The interactive API reference (renders /openapi.json in the browser)",
    description = "Embedded in the binary; served with a same-origin Content-Security-Policy. No key needed.",
    security(()),
    responses(
        (status = 200, description = "OK", content_type = "text/html", body = String),
    ),
)]
pub(crate) async fn index() -> Response {
    asset(INDEX, "text/html; charset=utf-8")
}

/// `GET /docs/docs.js`.
#[utoipa::path(
    get,
    path = "/docs/docs.js",
    operation_id = "docs_page_script",
    tag = "service",
    summary = "The reference page's script",
    description = "Embedded in the binary; served with a same-origin Content-Security-Policy. No key needed.",
    security(()),
    responses(
        (status = 200, description = "OK", content_type = "text/javascript", body = String),
    ),
)]
pub(crate) async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

/// `GET /docs/docs.css`.
#[utoipa::path(
    get,
    path = "/docs/docs.css",
    operation_id = "docs_page_style",
    tag = "service",
    summary = "The reference page's style sheet",
    description = "Embedded in the binary; served with a same-origin Content-Security-Policy. No key needed.",
    security(()),
    responses(
        (status = 200, description = "OK", content_type = "text/css", body = String),
    ),
)]
pub(crate) async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}
