//! The web UI at `/`: server-rendered HTML (askama templates in
//! `templates/ui/`, checked at compile time, escaping everything), one
//! stylesheet, no script and nothing from elsewhere (the
//! Content-Security-Policy says so).
//!
//! Signing in takes an API key once and keeps a server-side session: the
//! browser holds only an opaque, `HttpOnly`, `SameSite=Strict` cookie; the
//! key never reaches a URL or the browser's storage. Every page
//! authenticates again through the same key lookup as the API (so a
//! revoked key signs its sessions out, and roles are the API's), and every
//! form that changes something carries the session's CSRF token and must
//! come from this origin.

use super::*;
use askama::Template;
use std::sync::Mutex;

mod pages;
mod reviews;
mod text_budget;
mod timeline;

/// The session cookie's name.
const COOKIE: &str = "cairn_ui";
/// How long a UI session lasts without a new sign-in.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Most UI sessions held at once; past it, the oldest sign-in of the org
/// holding the most ends (see `make_room`).
const MAX_SESSIONS: usize = 10_000;
/// Most UI sessions one API key holds; past it, its oldest sign-in ends.
const SESSIONS_PER_KEY: usize = 16;
/// Pages: only this server's stylesheet; forms post only here.
const POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";
/// Pages that compute in the browser: also this server's scripts.
const SCRIPT_POLICY: &str = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The compiled TypeScript bundle verifier (`scripts/ui-verifier` copies
/// it from `clients/typescript`; a test there checks the copy), served to
/// the pages that verify in the browser.
const VERIFIER: [(&str, &str); 13] = [
    ("bytes.js", include_str!("verifier/bytes.js")),
    ("ed25519.js", include_str!("verifier/ed25519.js")),
    ("fail.js", include_str!("verifier/fail.js")),
    ("forms.js", include_str!("verifier/forms.js")),
    ("jcs.js", include_str!("verifier/jcs.js")),
    ("lines.js", include_str!("verifier/lines.js")),
    ("merkle.js", include_str!("verifier/merkle.js")),
    ("note.js", include_str!("verifier/note.js")),
    ("strict-json.js", include_str!("verifier/strict-json.js")),
    ("time.js", include_str!("verifier/time.js")),
    ("verdict.js", include_str!("verifier/verdict.js")),
    ("verifier.js", include_str!("verifier/verifier.js")),
    ("verify.js", include_str!("verifier/verify.js")),
];

/// The UI's signed-in sessions, by the SHA-256 of their cookie value.
#[derive(Default)]
pub(crate) struct UiSessions {
    map: Mutex<HashMap<Hash, UiSession>>,
}

#[derive(Clone)]
struct UiSession {
    /// The API key's token hash: the key is looked up again on each page.
    token_hash: Hash,
    /// The key's org, which shares [`MAX_SESSIONS`] with the others.
    org: String,
    csrf: String,
    expires: Instant,
}

/// Makes room in `map` for a new session of `org`'s key `token_hash`: a
/// key holds at most [`SESSIONS_PER_KEY`] (its oldest sign-in ends), and
/// once the map holds `capacity` ([`MAX_SESSIONS`]) the oldest sign-in of the org holding the most
/// sessions ends. So one tenant signing in over and over (with one key, or
/// with keys an admin mints) only ever ends its own sessions once it holds
/// half of them, never the other orgs'.
fn make_room(map: &mut HashMap<Hash, UiSession>, capacity: usize, org: &str, token_hash: &Hash) {
    let oldest_where = |map: &HashMap<Hash, UiSession>, keep: &dyn Fn(&UiSession) -> bool| {
        map.iter()
            .filter(|(_, s)| keep(s))
            .min_by_key(|(_, s)| s.expires)
            .map(|(k, _)| *k)
    };
    let of_key = map.values().filter(|s| s.token_hash == *token_hash).count();
    if of_key >= SESSIONS_PER_KEY
        && let Some(oldest) = oldest_where(map, &|s| s.token_hash == *token_hash)
    {
        map.remove(&oldest);
    }
    if map.len() < capacity {
        return;
    }
    let mut per_org: HashMap<&str, usize> = HashMap::new();
    for s in map.values() {
        *per_org.entry(s.org.as_str()).or_default() += 1;
    }
    // The new session counts for its org: at a tie, its own org gives way.
    *per_org.entry(org).or_default() += 1;
    let largest = per_org
        .into_iter()
        .max_by_key(|(name, count)| (*count, *name == org))
        .map(|(name, _)| name.to_owned());
    if let Some(largest) = largest
        && let Some(oldest) = oldest_where(map, &|s| s.org == largest)
    {
        map.remove(&oldest);
    }
}

/// A signed-in browser: the key's caller and the session's CSRF token.
pub(crate) struct UiUser {
    caller: Caller,
    csrf: String,
}

fn random_hex() -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("no entropy: {e}"),
        )
    })?;
    Ok(hex::encode(bytes))
}

fn cookie_value(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

fn session_key(value: &str) -> Hash {
    Hash::sha256(value.as_bytes())
}

/// The signed-in user of a request, or where to send the browser.
async fn user(state: &Arc<AppState>, headers: &HeaderMap) -> Result<UiUser, Response> {
    let found = cookie_value(headers).and_then(|value| {
        let mut map = state.ui_sessions.map.lock().ok()?;
        let key = session_key(&value);
        match map.get(&key) {
            Some(s) if s.expires > Instant::now() => Some(s.clone()),
            Some(_) => {
                map.remove(&key);
                None
            }
            None => None,
        }
    });
    let Some(session) = found else {
        return Err(Redirect::to("/ui/sign-in"));
    };
    match auth::authenticate_hash(state, session.token_hash).await {
        Ok(caller) => Ok(UiUser {
            caller,
            csrf: session.csrf,
        }),
        // A revoked key ends its sessions; a rate limit is the API's.
        Err(e) if e.status == StatusCode::UNAUTHORIZED => Err(Redirect::to("/ui/sign-in")),
        Err(e) => Err(e.into_response()),
    }
}

/// The signed-in user of a page, as an extractor that runs before the
/// page's other ones: a request without a live session is sent to the
/// sign-in page (or given the API's error, a rate limit say) before the
/// page reads its path or query.
pub(super) struct SignedIn(pub(super) UiUser);

impl axum::extract::FromRequestParts<Arc<AppState>> for SignedIn {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &Arc<AppState>,
    ) -> Result<SignedIn, Response> {
        user(state, &parts.headers).await.map(SignedIn)
    }
}

/// A step type label as pages show it: at most 64 bytes, as a server now
/// accepts (labels stored before that rule, or imported, may be longer;
/// the parser ignores underscores and brackets, so one can be megabytes).
fn label_shown(label: &str) -> String {
    const SHOWN: usize = cairn_core::record::MAX_KIND_LABEL_LEN;
    if label.len() <= SHOWN {
        return label.to_owned();
    }
    let mut end = SHOWN;
    while !label.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &label[..end])
}

/// `303 See Other` to `to`.
struct Redirect;

impl Redirect {
    fn to(to: &'static str) -> Response {
        (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
    }

    fn to_owned(to: String) -> Response {
        match HeaderValue::from_str(&to) {
            Ok(location) => (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response(),
            Err(_) => Redirect::to("/ui/sessions"),
        }
    }
}

#[derive(Template)]
#[template(path = "ui/error.html")]
struct ErrorPage {
    org: String,
    role: String,
    csrf: String,
    status: u16,
    code: String,
    message: String,
}

/// An error of a signed-in page, as a page (with the API's code and
/// message, and its status).
fn error_page(user: &UiUser, e: ApiError) -> Response {
    let mut response = page(&ErrorPage {
        org: user.caller.org().to_owned(),
        role: user.caller.key.role.to_string(),
        csrf: user.csrf.clone(),
        status: e.status.as_u16(),
        code: e.code.to_string(),
        message: e.message.clone(),
    });
    *response.status_mut() = e.status;
    response
}

#[derive(Template)]
#[template(path = "ui/plain_error.html")]
struct PlainErrorPage<'a> {
    status: u16,
    code: &'a str,
    message: &'a str,
}

/// An error of a web UI address answered before any page ran (the request
/// timeout, a method or body the route refuses), as a page without the
/// signed-in navigation: a browser shows it instead of the API's JSON.
pub(crate) fn plain_error_page(status: StatusCode, code: &str, message: &str) -> Response {
    let mut response = page(&PlainErrorPage {
        status: status.as_u16(),
        code,
        message,
    });
    *response.status_mut() = status;
    response
}

/// A form post whose headers say it comes from this origin
/// ([`same_origin`]): an extractor of the request's head, placed before
/// the path and the form, so that a cross-site post is refused before its
/// path is parsed or its body read (a body dribbled a byte at a time would
/// otherwise hold the connection until the body's deadline first).
pub(super) struct SameOrigin;

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for SameOrigin {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        same_origin(&parts.headers).map(|()| SameOrigin)
    }
}

/// A form post must come from this origin: browsers send `Origin` (and
/// `Sec-Fetch-Site`) with every POST, and a page elsewhere cannot make
/// them say this server.
fn same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let refused = || {
        ApiError::forbidden(
            "this form may only be sent from Cairn's own pages (cross-site request refused)",
        )
    };
    // Every value of a header is checked (a browser sends one; a request
    // sending two is judged by both, not by the first).
    let values = |name: &str| {
        headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap_or("\u{0}"))
            .collect::<Vec<_>>()
    };
    // Browsers that send Sec-Fetch-Site say exactly where the form was.
    let sites = values("sec-fetch-site");
    if !sites.is_empty() {
        return if sites
            .iter()
            .all(|site| *site == "same-origin" || *site == "none")
        {
            Ok(())
        } else {
            Err(refused())
        };
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (host_name, host_port) = crate::limits::split_authority(host);
    for origin in values("origin") {
        // Hosts compare without case and with the scheme's default port
        // where none is given (`Host: cairn.example:443` is
        // `https://cairn.example`).
        let (default_port, authority) = match origin.split_once("://") {
            Some(("http", rest)) => ("80", rest),
            Some(("https", rest)) => ("443", rest),
            _ => return Err(refused()),
        };
        let (origin_name, origin_port) = crate::limits::split_authority(authority);
        if origin_name != host_name
            || origin_port.unwrap_or(default_port) != host_port.unwrap_or(default_port)
        {
            return Err(refused());
        }
    }
    Ok(())
}

/// An HTML page with the UI's headers.
fn page(template: &impl Template) -> Response {
    page_with(template, POLICY)
}

fn page_with(template: &impl Template, policy: &'static str) -> Response {
    match template.render() {
        Ok(html) => {
            let mut response = html.into_response();
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            headers.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(policy),
            );
            headers.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            headers.insert(
                header::REFERRER_POLICY,
                HeaderValue::from_static("same-origin"),
            );
            // Pages hold an org's data: never cached.
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Err(e) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("rendering the page: {e}"),
        )
        .into_response(),
    }
}

use axum::http::HeaderValue;

/// The UI's routes (HTML pages, not part of the API document).
pub(crate) fn routes() -> Router<Arc<AppState>> {
    use axum::routing::{get, post};
    Router::new()
        .route("/", get(home))
        .route("/ui", get(home))
        .route("/ui/sign-in", get(sign_in_page).post(sign_in))
        .route("/ui/sign-out", post(sign_out))
        .route("/ui/sessions", get(pages::sessions))
        .route("/ui/sessions/{id}", get(timeline::session))
        .route("/ui/sessions/{id}/markdown", get(timeline::markdown))
        .route("/ui/sessions/{id}/state", get(timeline::state))
        .route("/ui/records/{id}", get(timeline::record))
        .route("/ui/export", get(pages::export_page))
        .route("/ui/search", get(pages::search))
        .route("/ui/export/bundle", get(pages::export_bundle))
        .route("/ui/sessions/{id}/steps/{index}", get(pages::proof))
        .route("/ui/verify", get(pages::verify))
        .route("/ui/reviews", get(reviews::reviews))
        .route("/ui/log", get(pages::log))
        .route(
            "/ui/reviews/{trace_id}",
            post(reviews::decide).get(|| async { Redirect::to("/ui/reviews") }),
        )
        .route("/ui/assets/ui.css", get(stylesheet))
        .route("/ui/assets/verify-page.js", get(verify_page_script))
        .route("/ui/assets/proof-page.js", get(proof_page_script))
        .route("/ui/assets/live.js", get(live_script))
        .route("/ui/assets/icon.svg", get(icon))
        .route("/favicon.ico", get(icon))
        .route("/ui/assets/verifier/{name}", get(verifier_module))
}

async fn home(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    match user(&state, &headers).await {
        Ok(_) => Redirect::to("/ui/sessions"),
        Err(to_sign_in) => to_sign_in,
    }
}

async fn stylesheet() -> Response {
    asset(include_str!("ui.css"), "text/css")
}

async fn verify_page_script() -> Response {
    asset(include_str!("verify-page.js"), "text/javascript")
}

async fn icon() -> Response {
    asset(include_str!("icon.svg"), "image/svg+xml")
}

async fn live_script() -> Response {
    asset(include_str!("live.js"), "text/javascript")
}

async fn proof_page_script() -> Response {
    asset(include_str!("proof-page.js"), "text/javascript")
}

async fn verifier_module(Path(name): Path<String>) -> Response {
    match VERIFIER.iter().find(|(n, _)| *n == name) {
        Some((_, source)) => asset(source, "text/javascript"),
        None => ApiError::not_found(format!("asset {}", shown(&name))).into_response(),
    }
}

/// A static asset, revalidated on each use (it changes with the binary).
fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[derive(Template)]
#[template(path = "ui/sign_in.html")]
struct SignIn {
    error: Option<String>,
}

async fn sign_in_page() -> Response {
    page(&SignIn { error: None })
}

#[derive(serde::Deserialize)]
struct SignInForm {
    api_key: String,
}

async fn sign_in(
    State(state): State<Arc<AppState>>,
    _: SameOrigin,
    headers: HeaderMap,
    UiForm(form): UiForm<SignInForm>,
) -> Result<Response, ApiError> {
    let token = form.api_key.trim();
    let caller = match auth::authenticate_hash(&state, cairn_store::token_hash(token)).await {
        Ok(caller) => caller,
        Err(e) if e.status == StatusCode::UNAUTHORIZED => {
            let mut response = page(&SignIn {
                error: Some("That API key is unknown, revoked or expired.".into()),
            });
            *response.status_mut() = StatusCode::UNAUTHORIZED;
            return Ok(response);
        }
        Err(e) => return Err(e),
    };
    let value = random_hex()?;
    let session = UiSession {
        token_hash: caller.key.token_hash,
        org: caller.org().to_owned(),
        csrf: random_hex()?,
        expires: Instant::now() + SESSION_TTL,
    };
    {
        let mut map =
            state.ui_sessions.map.lock().map_err(|_| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "lock")
            })?;
        let now = Instant::now();
        map.retain(|_, s| s.expires > now);
        make_room(&mut map, MAX_SESSIONS, &session.org, &session.token_hash);
        map.insert(session_key(&value), session);
    }
    let secure = headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    let cookie = format!(
        "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        SESSION_TTL.as_secs(),
        if secure { "; Secure" } else { "" }
    );
    Ok((
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/ui/sessions".to_owned()),
            (header::SET_COOKIE, cookie),
        ],
    )
        .into_response())
}

/// A form as a browser posts it (`application/x-www-form-urlencoded`),
/// read like every other body: one sent with a `Content-Encoding` is
/// refused (415), one too large or too slow is 413 or 408, and one that
/// is not this form is 400 or 415, all in the API's error shape (axum's
/// own form rejections are plain text).
pub(super) struct UiForm<T>(pub(super) T);

impl<T: serde::de::DeserializeOwned> axum::extract::FromRequest<Arc<AppState>> for UiForm<T> {
    type Rejection = ApiError;

    async fn from_request(
        request: axum::extract::Request,
        state: &Arc<AppState>,
    ) -> Result<UiForm<T>, ApiError> {
        use axum::extract::rejection::FormRejection;
        limits::refuse_encoded_body(request.headers())?;
        match axum::Form::<T>::from_request(request, state).await {
            Ok(axum::Form(form)) => Ok(UiForm(form)),
            Err(FormRejection::InvalidFormContentType(_)) => Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "a web UI form is sent as application/x-www-form-urlencoded",
            )),
            Err(FormRejection::BytesRejection(rejection)) => {
                Err(limits::body_error(&rejection, state.config.max_body_bytes))
            }
            Err(rejection) => Err(ApiError::bad_request(
                "invalid_request",
                format!(
                    "the form could not be read: {}",
                    crate::error::shown(&rejection.body_text())
                ),
            )),
        }
    }
}

#[derive(serde::Deserialize)]
struct CsrfForm {
    csrf: String,
}

async fn sign_out(
    State(state): State<Arc<AppState>>,
    _: SameOrigin,
    headers: HeaderMap,
    UiForm(form): UiForm<CsrfForm>,
) -> Result<Response, ApiError> {
    if let Some(value) = cookie_value(&headers)
        && let Ok(mut map) = state.ui_sessions.map.lock()
    {
        let key = session_key(&value);
        if map.get(&key).is_some_and(|s| s.csrf != form.csrf) {
            return Err(ApiError::forbidden(
                "the form's CSRF token is not this session's: reload the page",
            ));
        }
        map.remove(&key);
    }
    let cookie = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    Ok((
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/ui/sign-in".to_owned()),
            (header::SET_COOKIE, cookie),
        ],
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A form's origin is compared with the host without case and without
    /// the scheme's default port; every value of a repeated header counts.
    #[test]
    fn same_origin_reads_hosts_as_browsers_mean_them() {
        let check = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.append(*name, axum::http::HeaderValue::from_static(value));
            }
            same_origin(&headers).is_ok()
        };
        assert!(check(&[
            ("host", "CAIRN.example"),
            ("origin", "http://cairn.example")
        ]));
        assert!(check(&[
            ("host", "cairn.example:443"),
            ("origin", "https://cairn.example")
        ]));
        assert!(check(&[
            ("host", "cairn.example:8714"),
            ("origin", "http://cairn.example:8714")
        ]));
        assert!(!check(&[
            ("host", "cairn.example:8443"),
            ("origin", "https://cairn.example")
        ]));
        assert!(!check(&[
            ("host", "cairn.example"),
            ("origin", "http://evil.example")
        ]));
        assert!(!check(&[("host", "cairn.example"), ("origin", "null")]));
        assert!(!check(&[
            ("host", "cairn.example"),
            ("origin", "http://cairn.example"),
            ("origin", "http://evil.example"),
        ]));
        assert!(!check(&[
            ("sec-fetch-site", "same-origin"),
            ("sec-fetch-site", "cross-site"),
        ]));
        assert!(check(&[("sec-fetch-site", "same-origin")]));
        assert!(check(&[("host", "cairn.example")]));
    }

    const CAPACITY: usize = 500;

    fn session(org: &str, key: u16, age: u64) -> UiSession {
        let mut token_hash = [0u8; 32];
        token_hash[..2].copy_from_slice(&key.to_be_bytes());
        UiSession {
            token_hash: Hash(token_hash),
            org: org.to_owned(),
            csrf: String::new(),
            // Older sign-ins expire sooner.
            expires: Instant::now() + SESSION_TTL - Duration::from_secs(age),
        }
    }

    fn sign_in(map: &mut HashMap<Hash, UiSession>, n: &mut u32, s: UiSession) {
        make_room(map, CAPACITY, &s.org, &s.token_hash);
        *n += 1;
        let mut id = [0u8; 32];
        id[..4].copy_from_slice(&n.to_be_bytes());
        map.insert(Hash(id), s);
    }

    fn count(map: &HashMap<Hash, UiSession>, org: &str) -> usize {
        map.values().filter(|s| s.org == org).count()
    }

    /// A tenant signing in over and over, with one key or many, ends its
    /// own sessions, never pushing another org below an equal share.
    #[test]
    fn one_org_signing_in_over_and_over_never_signs_the_others_out() {
        let mut map = HashMap::new();
        let mut n = 0;
        for i in 0..100 {
            sign_in(&mut map, &mut n, session("victim", i % 8, 10_000));
        }
        // One key: at most SESSIONS_PER_KEY of its own.
        for _ in 0..1_000 {
            sign_in(&mut map, &mut n, session("hostile", 200, 0));
        }
        assert_eq!(count(&map, "hostile"), SESSIONS_PER_KEY);
        assert_eq!(count(&map, "victim"), 100);
        // Many keys until the map is full and past it: the hostile org
        // gives way once it holds the most.
        for i in 0..(CAPACITY as u16 * 4) {
            sign_in(&mut map, &mut n, session("hostile", 1_000 + i % 400, 0));
        }
        assert_eq!(map.len(), CAPACITY);
        assert_eq!(count(&map, "victim"), 100);
    }
}
