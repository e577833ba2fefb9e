//! The UI's pages over the store: the session list, a step's proof, the
//! log, verification, search and export, each with the verdict the API
//! gives.

use super::timeline::step_href;
use super::*;
use crate::input::StrictQuery;

/// The navigation bar's data.
pub(super) struct Nav {
    pub(super) org: String,
    pub(super) role: String,
    pub(super) csrf: String,
}

impl Nav {
    pub(super) fn of(user: &UiUser) -> Nav {
        Nav {
            org: user.caller.org().to_owned(),
            role: user.caller.key.role.to_string(),
            csrf: user.csrf.clone(),
        }
    }
}

struct SessionRow {
    session_id: String,
    agent_id: String,
    step_count: u64,
    first_step_at: String,
    last_step_at: String,
    sealed: bool,
    verdict: &'static str,
    verdict_class: &'static str,
}

#[derive(Template)]
#[template(path = "ui/sessions.html")]
struct SessionsPage {
    org: String,
    role: String,
    csrf: String,
    /// The filter as given (empty: not set), to refill the form.
    agent: String,
    since: String,
    until: String,
    flagged: bool,
    /// Every kind's canonical name, and whether it is the one chosen.
    kinds: Vec<(&'static str, bool)>,
    /// A kind given that is not a canonical name (kept in the form).
    other_kind: Option<String>,
    /// Whether this page continues from a cursor (not the newest).
    paged: bool,
    /// The query of the next page, when this one is full.
    next: Option<String>,
    /// The filter was refused.
    error: Option<String>,
    sessions: Vec<SessionRow>,
}

/// A GET form's fields, for the API's parameter reader: only `known`
/// ones, trimmed; an empty field is no parameter (a form sends every
/// field, filled or not).
fn form_fields(q: HashMap<String, String>, known: &[&str]) -> HashMap<String, String> {
    q.into_iter()
        .filter(|(k, _)| known.contains(&k.as_str()))
        .map(|(k, v)| (k, v.trim().to_owned()))
        .filter(|(_, v)| !v.is_empty())
        .collect()
}

/// How many sessions a page lists.
const PAGE: usize = 50;

pub(super) fn time_text(t: Option<cairn_core::Timestamp>) -> String {
    t.map_or_else(|| "—".to_owned(), |t| t.to_string())
}

/// `GET /ui/sessions`: the API's listing (`GET /v1/sessions`) with the
/// same filters read by the same code; an empty form field is no filter.
pub(super) async fn sessions(
    State(state): State<Arc<AppState>>,
    SignedIn(user): SignedIn,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let given = form_fields(q, crate::LISTING_PARAMS);
    let field = |name: &str| given.get(name).cloned().unwrap_or_default();
    let nav = Nav::of(&user);
    let mut view = SessionsPage {
        org: nav.org,
        role: nav.role,
        csrf: nav.csrf,
        agent: field("agent_id"),
        since: field("since"),
        until: field("until"),
        flagged: given.get("flagged").is_some_and(|v| v == "true"),
        kinds: cairn_core::kind::ALL_KINDS
            .iter()
            .map(|k| (k.as_str(), field("kind") == k.as_str()))
            .collect(),
        other_kind: given
            .get("kind")
            .filter(|k| {
                !cairn_core::kind::ALL_KINDS
                    .iter()
                    .any(|c| c.as_str() == k.as_str())
            })
            .cloned(),
        paged: given.contains_key("cursor"),
        next: None,
        error: None,
        sessions: Vec::new(),
    };
    let filter = match crate::listing_filter(&given) {
        Ok(filter) => filter,
        Err(e) => {
            view.error = Some(e.message.clone());
            let mut response = page(&view);
            *response.status_mut() = StatusCode::BAD_REQUEST;
            return response;
        }
    };
    let org = user.caller.org().to_owned();
    let budget = state.config.limits.list_verify_steps;
    let slot = crate::sessions::listing_slot(&state, &org, true);
    let verify = slot.is_some();
    let listed = blocking(&state, move |store| {
        let rows = listed_sessions(store, &org, &filter, PAGE, verify, budget);
        drop(slot);
        rows
    })
    .await;
    let rows = match listed {
        Ok(rows) => rows,
        Err(e) => return error_page(&user, e),
    };
    if rows.len() == PAGE
        && let Some((last, _)) = rows.last()
    {
        let mut query: Vec<(String, String)> =
            given.into_iter().filter(|(k, _)| k != "cursor").collect();
        query.sort();
        query.push((
            "cursor".into(),
            crate::cursor_text(&cairn_store::SessionCursor::after(last)),
        ));
        view.next = Some(
            form_urlencoded::Serializer::new(String::new())
                .extend_pairs(query)
                .finish(),
        );
    }
    view.sessions = rows
        .into_iter()
        .map(|(s, valid)| {
            let (verdict, verdict_class) = match valid {
                Some(true) => ("verified", "good"),
                Some(false) => ("tampered", "bad"),
                None => ("not checked", "neutral"),
            };
            SessionRow {
                session_id: s.session_id,
                agent_id: s.agent_id,
                step_count: s.step_count,
                first_step_at: time_text(s.first_step_at),
                last_step_at: time_text(s.last_step_at),
                sealed: s.sealed,
                verdict,
                verdict_class,
            }
        })
        .collect();
    page(&view)
}

#[derive(Template)]
#[template(path = "ui/verify.html")]
struct VerifyPage {
    org: String,
    role: String,
    csrf: String,
    server_key: String,
}

/// `GET /ui/verify`: the page where a bundle is verified in the browser.
pub(super) async fn verify(
    State(state): State<Arc<AppState>>,
    SignedIn(user): SignedIn,
) -> Response {
    let nav = Nav::of(&user);
    page_with(
        &VerifyPage {
            org: nav.org,
            role: nav.role,
            csrf: nav.csrf,
            server_key: state.store.server_key().to_string(),
        },
        SCRIPT_POLICY,
    )
}

#[derive(Template)]
#[template(path = "ui/proof.html")]
struct ProofPage {
    org: String,
    role: String,
    csrf: String,
    session_id: String,
    index: u64,
    /// Where the step is shown in its session's timeline.
    href: String,
    trace_id: String,
    digest: String,
    prev_hash: String,
    chain_hash: String,
    seq: u64,
    logged_at: String,
    size: u64,
    checkpoint: String,
    proof: Vec<String>,
    proof_text: String,
    origin: String,
    keys: String,
    keys_count: usize,
}

/// `GET /ui/sessions/{id}/steps/{index}`: a step's proof, which the page
/// checks in the browser against the signed checkpoint.
pub(super) async fn proof(
    State(state): State<Arc<AppState>>,
    SignedIn(user): SignedIn,
    Path((id, index)): Path<(String, String)>,
) -> Response {
    // Parsed here, not by the route, so that a bad one is a page too.
    let Some(index) = crate::decimal::<u64>(&index) else {
        return error_page(
            &user,
            ApiError::bad_request(
                "invalid_request",
                format!(
                    "step {}: a step index is a number (0, 1, 2, ...)",
                    shown(&index)
                ),
            ),
        );
    };
    let org = user.caller.org().to_owned();
    let cp = match current_checkpoint(&state, &org).await {
        Ok(cp) => cp,
        Err(e) => return error_page(&user, e),
    };
    let size = cp.size;
    let note = match cosigned(&state, &org, cp).await {
        Ok(note) => note,
        Err(e) => return error_page(&user, e),
    };
    // Finding the step walks the session's positions: a slot of the org's
    // share, as every read of a whole session takes.
    let permit = match limits::expensive(&state, &org, "proof").await {
        Ok(permit) => permit,
        Err(e) => return error_page(&user, e),
    };
    let found = blocking(&state, move |store| {
        let _permit = permit;
        // The step's position from the session's positions (8 bytes a
        // step), then that one step: no other step is read.
        let seqs = store.session_seqs(&org, &id)?.unwrap_or_default();
        let found = match usize::try_from(index).ok().and_then(|i| seqs.get(i)) {
            Some(&seq) => store
                .steps_at(&org, &id, &[seq])?
                .into_iter()
                .find(|s| s.record.step.step_index == index),
            None => None,
        };
        let Some(step) = found else {
            return Err(ApiError::not_found(format!(
                "step {index} of session {}",
                shown(&id)
            )));
        };
        if step.seq >= size {
            return Err(ApiError::not_found(
                "the step is newer than the checkpoint: reload",
            ));
        }
        let proof = store.inclusion_proof(&org, step.seq, size)?;
        let (server_name, _) = store.log_signer(&org)?;
        let keys = store.log_keys(&org)?;
        Ok((
            step,
            proof,
            cairn_core::log::log_origin(&server_name, &org),
            keys,
        ))
    })
    .await;
    let (step, proof, origin, keys) = match found {
        Ok(found) => found,
        Err(e) => return error_page(&user, e),
    };
    let proof: Vec<String> = proof.iter().map(|h| h.to_string()).collect();
    let nav = Nav::of(&user);
    page_with(
        &ProofPage {
            org: nav.org,
            role: nav.role,
            csrf: nav.csrf,
            session_id: step.record.step.session_id.clone(),
            index: step.record.step.step_index,
            href: step_href(&step.record.step.session_id, step.record.step.step_index),
            trace_id: step.record.step.trace_id.clone(),
            digest: step.record.digest.to_string(),
            prev_hash: step.record.prev_hash.to_string(),
            chain_hash: step.record.hash.to_string(),
            seq: step.seq,
            logged_at: step.logged_at.to_string(),
            size,
            checkpoint: note,
            proof_text: proof.join(" "),
            proof,
            origin,
            keys_count: keys.len(),
            keys: keys
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" "),
        },
        SCRIPT_POLICY,
    )
}

#[derive(Template)]
#[template(path = "ui/log.html")]
struct LogPage {
    org: String,
    role: String,
    csrf: String,
    verdict: Option<String>,
    verdict_class: &'static str,
    failure: Option<String>,
    checked: u64,
    checkpoints: Vec<(u64, String, String)>,
}

/// Checkpoints listed, newest first.
const CHECKPOINTS_SHOWN: u32 = 100;

/// `GET /ui/log[?verify=true]`: the org's checkpoints, and on request the
/// verdict of the whole log (under the same limit as `GET /v1/verify`).
pub(super) async fn log(
    State(state): State<Arc<AppState>>,
    SignedIn(user): SignedIn,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let verify = q.get("verify").is_some_and(|v| v == "true");
    let permit = if verify {
        match limits::expensive(&state, user.caller.org(), "verification").await {
            Ok(permit) => Some(permit),
            Err(e) => return error_page(&user, e),
        }
    } else {
        None
    };
    let org = user.caller.org().to_owned();
    let loaded = blocking(&state, move |store| {
        let _permit = permit;
        let verdict = if verify {
            Some(verify_org(store, &org, &[], &[], &mut |_| {})?)
        } else {
            None
        };
        let checkpoints: Vec<(u64, String, String)> =
            match store.latest_checkpoints(&org, CHECKPOINTS_SHOWN) {
                Ok(checkpoints) => checkpoints
                    .into_iter()
                    .map(|cp| (cp.size, cp.root.to_string(), cp.created_at.to_string()))
                    .collect(),
                // An org name given twice: the verdict (asked for) says so;
                // neither org's checkpoints are shown for it.
                Err(cairn_store::StoreError::RepeatedOrgName(_)) if verdict.is_some() => Vec::new(),
                Err(e) => return Err(e.into()),
            };
        Ok((checkpoints, verdict))
    })
    .await;
    let (checkpoints, verdict) = match loaded {
        Ok(loaded) => loaded,
        Err(e) => return error_page(&user, e),
    };
    let (text, class, failure, checked) = match &verdict {
        None => (None, "neutral", None, 0),
        Some(v) if v.verdict.verified => (
            Some("Verified".to_owned()),
            "good",
            None,
            v.verdict.records_checked,
        ),
        Some(v) => (
            Some("Tampered".to_owned()),
            "bad",
            v.verdict.failure.as_ref().map(|f| {
                format!(
                    "First failing record: {} ({}): {}",
                    f.at, f.reason, f.detail
                )
            }),
            v.verdict.records_checked,
        ),
    };
    let nav = Nav::of(&user);
    page(&LogPage {
        org: nav.org,
        role: nav.role,
        csrf: nav.csrf,
        verdict: text,
        verdict_class: class,
        failure,
        checked,
        checkpoints,
    })
}

#[derive(Template)]
#[template(path = "ui/export.html")]
struct ExportPage {
    org: String,
    role: String,
    csrf: String,
    can_export: bool,
    /// Whether the key exports the org's own record (every field whatever
    /// the consent, the whole log): an admin key not bound to an agent.
    own_record: bool,
    session: String,
    agent: String,
}

/// The export form's fields, passed on to `GET /v1/export`'s handler.
const EXPORT_FIELDS: [&str; 4] = ["session", "agent", "all", "level"];

/// `GET /ui/export[?session=|agent=]`: the export form.
pub(super) async fn export_page(
    SignedIn(user): SignedIn,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let nav = Nav::of(&user);
    page(&ExportPage {
        org: nav.org,
        role: nav.role,
        csrf: nav.csrf,
        can_export: user.caller.key.role.can_export(),
        own_record: crate::exports_own_record(&user.caller),
        session: q.get("session").cloned().unwrap_or_default(),
        agent: q.get("agent").cloned().unwrap_or_default(),
    })
}

/// `GET /ui/export/bundle`: the bundle, downloaded. The same handler as
/// `GET /v1/export` decides (roles, scope, level, consent), with the
/// signed-in key; empty form fields are left out.
pub(super) async fn export_bundle(
    State(state): State<Arc<AppState>>,
    SignedIn(user): SignedIn,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let given = form_fields(q, &EXPORT_FIELDS);
    let name = given
        .get("session")
        .or_else(|| given.get("agent"))
        .map_or("org", String::as_str)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
        .collect::<String>();
    // The file is named after the level the export is made at (for a key
    // that does not export the org's own record, none asked is full).
    let level = given.get("level").cloned().unwrap_or_else(|| {
        if crate::exports_own_record(&user.caller) {
            "complete".into()
        } else {
            "full".into()
        }
    });
    match crate::export(
        State(Arc::clone(&state)),
        user.caller.clone(),
        StrictQuery(given),
    )
    .await
    {
        Ok(mut response) => {
            let disposition = format!("attachment; filename=\"cairn-{name}-{level}.jsonl\"");
            if let Ok(value) = HeaderValue::from_str(&disposition) {
                response
                    .headers_mut()
                    .insert(header::CONTENT_DISPOSITION, value);
            }
            response
        }
        Err(e) => error_page(&user, e),
    }
}

/// One search result.
struct Hit {
    session_id: String,
    step_index: u64,
    /// Where the step is shown in its session's timeline.
    href: String,
    label: String,
    agent_id: String,
    score: String,
    matched_by: String,
    /// The snippet in pieces, each marked or not.
    snippet: Vec<(String, bool)>,
}

#[derive(Template)]
#[template(path = "ui/search.html")]
struct SearchPage {
    org: String,
    role: String,
    csrf: String,
    q: String,
    mode: String,
    agent: String,
    kind: String,
    embedder: Option<String>,
    error: Option<String>,
    hits: Option<Vec<Hit>>,
    /// Whether more steps matched than the answer holds.
    truncated: bool,
}

/// Cuts `snippet` at the `highlights` (character ranges) into pieces.
fn marked(snippet: &str, highlights: &[Value]) -> Vec<(String, bool)> {
    let chars: Vec<char> = snippet.chars().collect();
    let mut pieces: Vec<(String, bool)> = Vec::new();
    let mut at = 0;
    for range in highlights {
        let (Some(start), Some(end)) = (range[0].as_u64(), range[1].as_u64()) else {
            continue;
        };
        let (start, end) = (start as usize, (end as usize).min(chars.len()));
        if start < at || start >= end {
            continue;
        }
        pieces.push((chars[at..start].iter().collect(), false));
        pieces.push((chars[start..end].iter().collect(), true));
        at = end;
    }
    pieces.push((chars[at.min(chars.len())..].iter().collect(), false));
    pieces.retain(|(text, _)| !text.is_empty());
    pieces
}

/// `GET /ui/search`: the API's search (the same input reading and the
/// same operation as `GET /v1/search`), results linked to their steps
/// with the matches marked.
pub(super) async fn search(
    State(state): State<Arc<AppState>>,
    SignedIn(user): SignedIn,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let mut given = form_fields(q, crate::SEARCH_PARAMS);
    let field = |name: &str| given.get(name).cloned().unwrap_or_default();
    let nav = Nav::of(&user);
    let mut view = SearchPage {
        org: nav.org,
        role: nav.role,
        csrf: nav.csrf,
        q: field("q"),
        mode: given
            .get("mode")
            .cloned()
            .unwrap_or_else(|| "hybrid".into()),
        agent: field("agent_id"),
        kind: field("kind"),
        embedder: None,
        error: None,
        hits: None,
        truncated: false,
    };
    if view.q.is_empty() {
        return page(&view);
    }
    given.entry("limit".into()).or_insert_with(|| "50".into());
    let outcome = match crate::search_input(&given) {
        // The slot is kept until the page is built.
        Ok(input) => crate::run_search(&state, &user.caller, input).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok((answer, _slot)) => {
            view.truncated = answer.truncated;
            let body = crate::wire::to_json(&answer);
            let text_of = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_owned();
            view.embedder = (view.mode != "fulltext").then(|| text_of(&body, "embedder"));
            view.hits = Some(
                body["results"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .map(|r| Hit {
                        session_id: text_of(r, "session_id"),
                        step_index: r["step_index"].as_u64().unwrap_or_default(),
                        href: step_href(
                            &text_of(r, "session_id"),
                            r["step_index"].as_u64().unwrap_or_default(),
                        ),
                        label: text_of(r, "step_type"),
                        agent_id: text_of(r, "agent_id"),
                        score: format!("{:.3}", r["score"].as_f64().unwrap_or_default()),
                        matched_by: r["matched_by"]
                            .as_array()
                            .map(|m| {
                                m.iter()
                                    .filter_map(Value::as_str)
                                    .collect::<Vec<_>>()
                                    .join(" + ")
                            })
                            .unwrap_or_default(),
                        snippet: marked(
                            r["snippet"].as_str().unwrap_or_default(),
                            r["highlights"]
                                .as_array()
                                .map(Vec::as_slice)
                                .unwrap_or_default(),
                        ),
                    })
                    .collect(),
            );
            page(&view)
        }
        Err(e) => {
            view.error = Some(e.message.clone());
            let mut response = page(&view);
            *response.status_mut() = e.status;
            response
        }
    }
}
