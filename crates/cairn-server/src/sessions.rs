//! Sessions over HTTP: start, list, replay, verify (one session or the
//! whole org), seal, and a sealed session's root.

use super::*;
use crate::input::StrictQuery;

mod replay;
mod streamed;
pub(crate) use replay::*;
pub(crate) use streamed::*;

#[utoipa::path(
    post,
    path = "/v1/sessions",
    operation_id = "start_session",
    tag = "sessions",
    summary = "Start a session",
    description = "Records the session start (its genesis) in the org log. Body: session_id, agent_id, profile (standard|strict), predecessor (hex final hash of the session this one continues), full_consent. Roles: writer, admin. A sealed session is continued once; a key bound to an agent continues only that agent's sessions (400 bad_predecessor).",
    request_body = crate::api_doc::SessionInput,
    responses(
        (status = 201, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn start_session(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Body(body): Body,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_write(), "start sessions")?;
    Caller::require_enabled(&state)?;
    let (v, parsed) = parse_json(&state, caller.org(), &body).await?;
    let counted = crate::limits::UntilWritten::new(None, Some(parsed));
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
    let session_id =
        text("session_id")?.ok_or_else(|| crate::input::missing_field("session_id"))?;
    let agent_id = match (text("agent_id")?, &caller.key.agent_id) {
        (Some(a), Some(bound)) if a != *bound => {
            return Err(ApiError::forbidden(format!(
                "this key may only write as agent {bound}"
            )));
        }
        (Some(a), _) => a,
        (None, Some(bound)) => bound.clone(),
        (None, None) => {
            return Err(crate::input::missing_field("agent_id"));
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
            ApiError::bad_request("invalid_argument", "profile must be standard or strict")
                .with_field("profile")
        })?,
    };
    let predecessor = match text("predecessor")? {
        None => None,
        Some(h) => Some(Hash::from_hex(&h).map_err(|e| {
            ApiError::bad_request("invalid_argument", format!("predecessor: {e}"))
                .with_field("predecessor")
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
        bound_agent: caller.key.agent_id.clone(),
        full_consent: optional_bool(&v, "full_consent")?.unwrap_or(false),
    });
    // Only the queued write's copies stay while it waits (what the
    // request counted covers one copy of what it sent).
    drop((v, body));
    let written = crate::queue_write(&state, &counted, request).await?;
    let mut body = wire::written_to_json(&written);
    body["session_id"] = json!(session_id);
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

#[utoipa::path(
    get,
    path = "/v1/sessions",
    operation_id = "list_sessions",
    tag = "sessions",
    summary = "Session history",
    description = "Sessions newest first (by start time, then session id) with step_count, first_step_at, last_step_at, chain_valid, sealed, started_at and cursor. Filters combine (AND). Pages are keyset pages: when a page is full, a Link header with rel=\"next\" names the next page (the same query with cursor set to the last row's cursor), and every page costs the same however deep. Each listed session's chain is verified until CAIRN_LIST_VERIFY_STEPS steps (default 10000) were verified in the request; later sessions have chain_valid null; verify=false verifies none. Verification runs only if one of the org's expensive-operation slots is free at once: when all are busy the listing answers at once with every chain_valid null (GET /v1/sessions/{session_id}/verify gives a session's verdict, waiting for a slot).",
    params(
        ("agent_id" = Option<crate::api_doc::Id>, Query, description = "Only this agent's sessions"),
        ("kind" = Option<String>, Query, description = "Only sessions with at least one step of this kind (any label of the kind, as written or canonical: ToolCall and tool_call are one kind)"),
        ("flagged" = Option<bool>, Query, description = "true: only sessions with a step recorded as flagged"),
        ("since" = Option<String>, Query, description = "Only sessions started at or after this time: RFC 3339, or a date (YYYY-MM-DD, its start in UTC)"),
        ("until" = Option<String>, Query, description = "Only sessions started before this time: RFC 3339, or a date (YYYY-MM-DD: the whole day is included)"),
        ("cursor" = Option<String>, Query, description = "Continue after this row: the cursor of the last row of the previous page (opaque; percent-encode it)"),
        ("limit" = Option<u64>, Query, description = "1 to 1000, default 20", minimum = 1, maximum = 1000),
        ("verify" = Option<bool>, Query, description = "false: no chain verification (chain_valid null)"),
    ),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = Vec<crate::api_doc::SessionSummary>),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn list_sessions(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    StrictQuery(q): StrictQuery,
) -> Result<Response, ApiError> {
    let mut known = LISTING_PARAMS.to_vec();
    known.extend(["limit", "verify"]);
    input::refuse_unknown_params(q.keys(), &known)?;
    let limit = input::query_limit(&q, input::SESSIONS_LIMIT)?;
    let filter = listing_filter(&q)?;
    // Verification is on unless `verify=false`, and bounded.
    let verify = !q.contains_key("verify") || query_bool(&q, "verify")?;
    let org = caller.org().to_owned();
    let budget = state.config.limits.list_verify_steps;
    let slot = listing_slot(&state, &org, verify);
    let verify = slot.is_some();
    let rows = blocking(&state, move |store| {
        let rows = listed_sessions(store, &org, &filter, limit, verify, budget);
        drop(slot);
        rows
    })
    .await?;
    let next = (rows.len() == limit)
        .then(|| {
            rows.last()
                .map(|(s, _)| cursor_text(&SessionCursor::after(s)))
        })
        .flatten();
    let body: Vec<Value> = rows
        .into_iter()
        .map(|(s, valid)| {
            json!({
                "session_id": s.session_id, "agent_id": s.agent_id, "step_count": s.step_count,
                "first_step_at": s.first_step_at.map(|t| t.to_string()),
                "last_step_at": s.last_step_at.map(|t| t.to_string()),
                "started_at": s.started_at.to_string(),
                "cursor": cursor_text(&SessionCursor::after(&s)),
                "chain_valid": valid, "sealed": s.sealed,
            })
        })
        .collect();
    let mut response = axum::Json(Value::Array(body)).into_response();
    if let Some(next) = next {
        let mut query: Vec<(String, String)> =
            q.into_iter().filter(|(k, _)| k != "cursor").collect();
        query.sort();
        query.push(("cursor".into(), next));
        let encoded = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(query)
            .finish();
        if let Ok(value) =
            header::HeaderValue::from_str(&format!("</v1/sessions?{encoded}>; rel=\"next\""))
        {
            response.headers_mut().insert(header::LINK, value);
        }
    }
    Ok(response)
}

/// The expensive slot a session listing's chain verification runs under,
/// taken only if one is free at once (`None` when `verify` is false): a
/// listing never waits for a slot or fails for want of one, it lists the
/// sessions unverified (`chain_valid` null) instead. Verification of up
/// to [`crate::limits::Limits::list_verify_steps`] steps per listing
/// would otherwise let one tenant's many listings slow every other
/// tenant's work, outside the limits every other verification keeps.
pub(crate) fn listing_slot(
    state: &AppState,
    org: &str,
    verify: bool,
) -> Option<limits::ExpensiveSlot> {
    verify.then(|| limits::expensive_now(state, org)).flatten()
}

/// The query parameters that choose which sessions a listing shows, read
/// alike by the API (`GET /v1/sessions`) and the web UI's sessions page.
pub(crate) const LISTING_PARAMS: &[&str] =
    &["agent_id", "kind", "flagged", "since", "until", "cursor"];

/// Reads [`LISTING_PARAMS`] into a filter; a malformed value is refused
/// (never read as "no filter").
pub(crate) fn listing_filter(q: &HashMap<String, String>) -> Result<SessionFilter, ApiError> {
    let kind = match q.get("kind") {
        None => None,
        Some(label) => Some(StepKind::parse(label).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_argument",
                format!(
                    "kind {:?} is not a step kind (see FORMAT.md's kinds: observation, plan, tool_call, ...)",
                    label.chars().take(80).collect::<String>()
                ),
            )
            .with_field("kind")
        })?),
    };
    let after = match q.get("cursor") {
        None => None,
        Some(text) => Some(parse_cursor(text).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_argument",
                "cursor is not a cursor of this listing: pass the cursor of the last row of the previous page (over MCP its answer's next_cursor, over REST its Link header's next page)",
            )
            .with_field("cursor")
        })?),
    };
    let started_from = q
        .get("since")
        .map(|t| listing_time("since", t, false))
        .transpose()?;
    let started_before = q
        .get("until")
        .map(|t| listing_time("until", t, true))
        .transpose()?;
    Ok(SessionFilter {
        agent_id: query_id(q, "agent_id")?,
        started_from,
        started_before,
        kind,
        flagged: query_bool(q, "flagged")?,
        after,
    })
}

/// A time bound of a listing, a search or a time-range export (every
/// surface reads one so): RFC 3339, or a date in UTC (as `since`, its
/// start; as `until`, the start of the next day, so that the date is
/// included; for 9999-12-31, whose next day no timestamp names, the last
/// instant there is).
pub fn listing_time(
    key: &'static str,
    text: &str,
    end_of_day: bool,
) -> Result<Timestamp, ApiError> {
    if let Ok(t) = Timestamp::parse_rfc3339(text) {
        return Ok(t);
    }
    let date = (text.len() == 10)
        .then(|| Timestamp::parse_rfc3339(&format!("{text}T00:00:00Z")).ok())
        .flatten();
    match date {
        Some(midnight) if end_of_day => Ok(Timestamp::from_micros(
            midnight.as_micros().saturating_add(86_400_000_000),
        )
        .unwrap_or(Timestamp::MAX)),
        Some(midnight) => Ok(midnight),
        None => Err(ApiError::bad_request(
            "invalid_argument",
            format!("{key} must be an RFC 3339 time (2026-11-25T09:30:00Z) or a date (2026-11-25)"),
        )
        .with_field(key)),
    }
}

/// The scope of a time-range export (REST's `since` and `until`, the
/// command line's `--since` and `--until`), its bounds read as
/// [`listing_time`] reads them; refused when the range holds no instant,
/// rather than answered as an export that found no session.
pub fn export_range(since: &str, until: &str) -> Result<ExportScope, ApiError> {
    let from = listing_time("since", since, false)?;
    let before = listing_time("until", until, true)?;
    if before <= from {
        return Err(ApiError::bad_request(
            "invalid_argument",
            format!(
                "until ({until}) is not after since ({since}): the range holds no time; give the earlier time as since"
            ),
        )
        .with_field("until"));
    }
    Ok(ExportScope::Range {
        since: from,
        until: before,
    })
}

/// A cursor as text: the session's start in microseconds, a dot, its id
/// (a listing's `cursor`, over REST and `cairn sessions`).
pub fn cursor_text(cursor: &SessionCursor) -> String {
    format!("{}.{}", cursor.started_at.as_micros(), cursor.session_id)
}

/// A cursor [`cursor_text`] wrote, or `None`.
pub fn parse_cursor(text: &str) -> Option<SessionCursor> {
    let (micros, session_id) = text.split_once('.')?;
    if micros.is_empty() || !micros.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    cairn_core::record::validate_id("cursor", session_id).ok()?;
    Some(SessionCursor {
        started_at: Timestamp::from_micros(micros.parse().ok()?)?,
        session_id: session_id.to_owned(),
    })
}

/// Sessions of an org, newest first, each with its chain's validity: the
/// listed sessions are verified in order until `budget` steps were
/// verified; the rest (and all of them when `verify` is false) get
/// `None`, so that a listing costs at most `budget` steps of hashing
/// whatever the org's size.
pub(crate) fn listed_sessions(
    store: &dyn LedgerStore,
    org: &str,
    filter: &SessionFilter,
    limit: usize,
    verify: bool,
    budget: u64,
) -> Result<Vec<(cairn_store::SessionSummary, Option<bool>)>, ApiError> {
    let mut spent = 0u64;
    let mut out = Vec::new();
    // Each session is checked against its agent's key records; the org's
    // (for a verdict failing on a signature) are read once at most, then
    // only the records appended since (each session is checked against
    // the keys as the log holds them when its verification starts).
    let mut keys = cairn_store::ops::OrgKeys::default();
    for s in store.list_sessions(org, filter, limit)? {
        let valid = if verify && spent.saturating_add(s.step_count) <= budget {
            spent += s.step_count;
            Some(
                cairn_store::ops::verify_session_with(store, org, &s.session_id, &mut keys)?
                    .is_some_and(|v| v.verified),
            )
        } else {
            None
        };
        out.push((s, valid));
    }
    Ok(out)
}

#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}/verify",
    operation_id = "verify_one_session",
    tag = "sessions",
    summary = "Verify a session's chain",
    description = "Verdict: verified, totalChecked, lastValidSequence, brokenAtSequence, brokenReason, durationMs, verifiedAt.",
    params(
        ("session_id" = crate::api_doc::Id, Path, description = "The session"),
    ),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = crate::api_doc::Verdict),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn verify_one_session(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(session_id): Path<String>,
) -> Result<Json, ApiError> {
    let org = caller.org().to_owned();
    let started = Instant::now();
    let permit = limits::expensive(&state, &org, "verification").await?;
    let verdict = blocking(&state, move |store| {
        let _permit = permit;
        verify_session(store, &org, &session_id)?.ok_or_else(|| ApiError::no_session(&session_id))
    })
    .await?;
    state.metrics.verification(verdict.verified);
    Ok(axum::Json(wire::verdict_to_json(
        &verdict,
        started.elapsed().as_millis(),
        cairn_store::now(),
    )))
}

#[utoipa::path(
    get,
    path = "/v1/verify",
    operation_id = "verify_whole_org",
    tag = "verify",
    summary = "Verify the org",
    description = "Every chain, every operational record, the Merkle root at every stored checkpoint. The answer adds `log_size` (the log's size, also when verification stopped at a failure: `totalChecked` says how far it got) and `checkpoints_checked`. With a witness policy the answer adds `witnessed`: `quorum`, `cosigned` and `uncosigned` (runs of stored checkpoints in size order with that standing, each `[first size, last size]`), `cosigned_checkpoints` and `uncosigned_checkpoints` (how many).",
    params(
        ("witness" = Option<String>, Query, description = "A witness's cosignature key (vkey, algorithm 0x04); repeatable. With it, the checkpoint that authenticates the verdict (the latest stored one; the bundle's) must carry valid cosignatures by `quorum` of the witnesses given, or the verdict fails with insufficient-cosignatures (docs/FORMAT.md 7.7)."),
        ("quorum" = Option<u64>, Query, description = "How many of the witness keys must have cosigned (default: all).", minimum = 1),
        ("checkpoint" = Option<String>, Query, description = "A signed checkpoint the caller trusts: the note exactly as `cairn checkpoint` printed it, base64-encoded (standard or URL-safe alphabet); repeatable. Verification fails unless the log is consistent with each; a value that is not a checkpoint of this org's log signed by this server's key is refused (400 invalid_checkpoint)."),
    ),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = crate::api_doc::Verdict),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn verify_whole_org(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<Vec<(String, String)>>,
) -> Result<Json, ApiError> {
    input::refuse_unknown_params(
        q.iter().map(|(k, _)| k),
        &["checkpoint", "witness", "quorum"],
    )?;
    let org = caller.org().to_owned();
    let trusted = trusted_param(&q)?;
    let policy = crate::log_api::witness_policy_param(&q)?;
    let started = Instant::now();
    let permit = limits::expensive(&state, &org, "verification").await?;
    let result = blocking(&state, move |store| {
        let _permit = permit;
        // An org name given twice is the verdict before a trusted
        // checkpoint can be read against the org (it would be refused).
        if let Some(verdict) = cairn_store::ops::repeated_org_name(store, &org)? {
            let report = policy.as_ref().map(|p| (p.quorum(), Default::default()));
            return Ok((verdict, report));
        }
        let mut external = Vec::new();
        for note in &trusted {
            external.push(
                cairn_store::ops::trusted_checkpoint(store, &org, note, &[]).map_err(|m| {
                    ApiError::bad_request("invalid_checkpoint", m).with_field("checkpoint")
                })?,
            );
        }
        let mut verdict = verify_org(store, &org, &external, &[], &mut |_| {})?;
        let report = match &policy {
            Some(policy) => Some((
                policy.quorum(),
                cairn_store::ops::apply_witness_policy(store, &org, policy, &mut verdict)?,
            )),
            None => None,
        };
        Ok((verdict, report))
    })
    .await?;
    let (result, report) = result;
    state.metrics.verification(result.verdict.verified);
    let mut body = wire::verdict_to_json(
        &result.verdict,
        started.elapsed().as_millis(),
        cairn_store::now(),
    );
    body["log_size"] = json!(result.log_size);
    body["checkpoints_checked"] = json!(result.checkpoints_checked);
    if let Some((quorum, report)) = report {
        body["witnessed"] = report.to_json(quorum);
    }
    Ok(axum::Json(body))
}

#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/seal",
    operation_id = "seal",
    tag = "sessions",
    summary = "Seal a session",
    description = "Signs the Merkle root over the session's steps; nothing can be appended after. Roles: writer, admin.",
    params(
        ("session_id" = crate::api_doc::Id, Path, description = "The session"),
        ("require_reflection" = Option<bool>, Query, description = "Refuse unless the last step is a reflection (seed 001's proof-grade merkle_finalize). Strict sessions always require it."),
    ),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn seal(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(session_id): Path<String>,
    StrictQuery(q): StrictQuery,
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
    // Nothing is counted: the request has no body.
    let counted = crate::limits::UntilWritten::nothing();
    match crate::queue_write(&state, &counted, request).await? {
        Written::Sealed { seq, seal } => Ok(axum::Json(seal_json(Some(seq), &seal))),
        other => Err(crate::unexpected(other)),
    }
}

pub(crate) fn seal_json(seq: Option<u64>, seal: &cairn_core::log::SealRecord) -> Value {
    json!({
        "session_id": seal.session_id, "step_count": seal.step_count,
        "merkle_root": seal.session_root.to_hex(), "final_hash": seal.final_hash.to_hex(),
        "sealed_at": seal.sealed_at.to_string(), "note": seal.note, "seq": seq,
    })
}

#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}/root",
    operation_id = "session_root",
    tag = "sessions",
    summary = "A sealed session's Merkle root",
    description = "409 not_sealed before the seal.",
    params(
        ("session_id" = crate::api_doc::Id, Path, description = "The session"),
    ),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn session_root(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(session_id): Path<String>,
) -> Result<Json, ApiError> {
    let org = caller.org().to_owned();
    let info = blocking(&state, move |store| {
        store
            .session(&org, &session_id)?
            .ok_or_else(|| ApiError::no_session(&session_id))
    })
    .await?;
    let seal = info.seal.ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "not_sealed",
            "the session is not sealed yet: seal it first",
        )
    })?;
    Ok(axum::Json(seal_json(info.seal_seq, &seal)))
}
