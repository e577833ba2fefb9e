//! Human oversight and provenance over HTTP: seed 003's review queue and
//! review decisions, and seed 001's audit events.

use crate::input::StrictQuery;
use crate::{ApiError, AppState, Caller, Json, blocking, parse_json, wire};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_core::log::ReviewDecision;
use cairn_store::{AppendError, Refusal, WriteRequest, Written};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;

/// Parses `approve`, `reject` or `escalate` (REST, MCP and the web UI's
/// form alike: 400 `invalid_argument`, field `decision`; absent, 400
/// `missing_field`, as MCP's typed arguments answer it).
pub fn decision(text: Option<&str>) -> Result<ReviewDecision, ApiError> {
    let text = text.ok_or_else(|| crate::input::missing_field("decision"))?;
    ReviewDecision::parse(text).ok_or_else(|| {
        const DECISIONS: [&str; 3] = ["approve", "reject", "escalate"];
        let hint = crate::input::nearest(&text.to_ascii_lowercase(), &DECISIONS)
            .map(|d| format!(" (did you mean {d}?)"))
            .unwrap_or_default();
        ApiError::bad_request(
            "invalid_argument",
            format!(
                "decision must be approve, reject or escalate, not {}{hint}",
                crate::error::shown(text)
            ),
        )
        .with_field("decision")
    })
}

/// `POST /v1/steps/{trace_id}/review`: `{"decision", "note"}` on a flagged
/// step, recorded as a `review` record of the org log. Roles: auditor,
/// admin.
#[utoipa::path(
    post,
    path = "/v1/steps/{trace_id}/review",
    operation_id = "oversight_review",
    tag = "steps",
    summary = "Review a flagged step",
    description = "Seed 003's human oversight: approve, reject or escalate a step recorded with status flagged, with a note. The review is itself a record of the org log, linked to the step by trace id. Roles: auditor, admin.",
    params(
        ("trace_id" = crate::api_doc::Id, Path, description = "The flagged step"),
    ),
    request_body = crate::api_doc::ReviewInput,
    responses(
        (status = 201, description = "The review record: seq, trace_id, session_id, step_index, decision, reviewer, note, reviewed_at", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn review(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(trace_id): Path<String>,
    crate::limits::Body(body): crate::limits::Body,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_review(), "review flagged steps")?;
    let (v, parsed) = parse_json(&state, caller.org(), &body).await?;
    let counted = crate::limits::UntilWritten::new(None, Some(parsed));
    crate::members(&v, &["decision", "note"])?;
    let decision = decision(crate::optional_string(&v, "decision")?.as_deref())?;
    let note = crate::optional_string(&v, "note")?;
    // Only the queued write's copies stay while it waits (what the
    // request counted covers one copy of what it sent).
    drop((v, body));
    let body = review_step(&state, &caller, trace_id, decision, note, &counted).await?;
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

/// Records a review (HTTP, MCP and the web UI), `counted` (the request's
/// memory) kept until it is written.
pub(crate) async fn review_step(
    state: &Arc<AppState>,
    caller: &Caller,
    trace_id: String,
    decision: ReviewDecision,
    note: Option<String>,
    counted: &crate::limits::UntilWritten,
) -> Result<wire::ReviewOut, ApiError> {
    caller.require(caller.key.role.can_review(), "review flagged steps")?;
    Caller::require_enabled(state)?;
    crate::require_own_step(state, caller, &trace_id).await?;
    let request = WriteRequest::Review {
        org_id: caller.org().to_owned(),
        trace_id,
        decision,
        reviewer: caller.key.id.clone(),
        note,
    };
    match crate::queue_write(state, counted, request).await? {
        Written::Reviewed { seq, review } => Ok(wire::review_out(seq, &review)),
        other => Err(crate::unexpected(other)),
    }
}

/// The review queue.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ReviewQueue {
    /// Flagged steps, oldest first.
    pub items: Vec<wire::ReviewItemOut>,
    /// True when fewer items than the limit are given although more wait,
    /// because their steps and reviews would have made the answer too
    /// large (16 MiB over HTTP; about 900 KiB of an MCP tool's message,
    /// where a step taking more than about 180 KiB of it is given
    /// shortened; the first item is always given): decide on these, or
    /// read the steps one at a time.
    pub truncated: bool,
}

/// The review queue (HTTP and MCP), with the expensive slot it was read
/// in: the caller keeps it until the answer has been sent (an answer built
/// whole, up to 16 MiB of steps and reviews).
pub(crate) async fn queue_of(
    state: &Arc<AppState>,
    caller: &Caller,
    all: bool,
    limit: usize,
) -> Result<(ReviewQueue, crate::limits::ExpensiveSlot), ApiError> {
    let org = caller.org().to_owned();
    // The queue reads the org's review records and pages of flagged steps
    // (`all` reads every one): a slot of the org's share.
    let permit = crate::limits::expensive(state, &org, "review queue").await?;
    let (page, permit) = blocking(state, move |store| {
        let page = cairn_store::ops::review_queue(
            store,
            &org,
            all,
            limit,
            cairn_store::ops::REVIEW_QUEUE_BYTES,
        )?;
        Ok((page, permit))
    })
    .await?;
    let queue = ReviewQueue {
        items: page.items.iter().map(wire::review_item_out).collect(),
        truncated: page.truncated,
    };
    Ok((queue, permit))
}

/// `GET /v1/reviews`: flagged steps waiting for a decision (pending or
/// escalated), oldest first; `all=true` adds approved and rejected ones.
#[utoipa::path(
    get,
    path = "/v1/reviews",
    operation_id = "oversight_queue",
    tag = "reviews",
    summary = "The review queue",
    description = "Flagged steps waiting for a decision (never reviewed, or escalated), oldest first, each with its state, its latest reviews (at most 100) and review_count; all=true includes approved and rejected ones. The items' steps and reviews are at most 16 MiB together (the first item is always given): past it fewer items than limit are given and truncated is true.",
    params(
        ("all" = Option<bool>, Query),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 10000),
    ),
    responses(
        (status = 200, description = "{items: [{state, step, reviews}]}", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn queue(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    StrictQuery(q): StrictQuery,
) -> Result<axum::response::Response, ApiError> {
    crate::input::refuse_unknown_params(q.keys(), &["all", "limit"])?;
    let all = crate::query_bool(&q, "all")?;
    let limit = crate::input::query_limit(&q, crate::input::REVIEWS_LIMIT)?;
    let (queue, slot) = queue_of(&state, &caller, all, limit).await?;
    crate::held::json_holding(&state, caller.org(), queue, slot).await
}

/// `POST /v1/audit-events`: `{"event_id"?, "session_id"?, "action",
/// "detail"?}`, a per-tool-call record that steps can link to.
#[utoipa::path(
    post,
    path = "/v1/audit-events",
    operation_id = "oversight_record_event",
    tag = "audit-events",
    summary = "Record an audit event",
    description = "Seed 001's per-tool-call record: steps reference it with links.audit_event. The id (a UUIDv7 when absent) is unique in the org, across steps' trace ids too: an event sent again under the id it chose, with the same session, action and detail (the detail compared in canonical form), is answered as it was recorded (a retry after a lost answer: 201 with its seq, nothing recorded again); anything else under a taken id is 409 duplicate_id. Roles: writer, admin.",
    request_body = crate::api_doc::AuditEventInput,
    responses(
        (status = 201, description = "{seq, event_id}", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn record_event(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    crate::limits::Body(body): crate::limits::Body,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_write(), "record audit events")?;
    let (mut v, parsed) = parse_json(&state, caller.org(), &body).await?;
    let counted = crate::limits::UntilWritten::new(None, Some(parsed));
    crate::members(&v, &["event_id", "session_id", "action", "detail"])?;
    let text = |k: &str| crate::optional_string(&v, k);
    let action = text("action")?.ok_or_else(|| crate::input::missing_field("action"))?;
    let (event_id, session_id) = (text("event_id")?, text("session_id")?);
    // Taken out of the body, not copied: the body's count covers it once.
    let detail = v
        .as_object_mut()
        .and_then(|members| members.remove("detail"))
        .filter(|d| !d.is_null());
    // Only the queued write's copies stay while it waits (what the
    // request counted covers one copy of what it sent).
    drop((v, body));
    let body = audit_event(
        &state, &caller, event_id, session_id, action, detail, &counted,
    )
    .await?;
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

/// An audit event just recorded.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct EventRecorded {
    /// Its position in the org log.
    pub seq: u64,
    /// Its id (the one given, or a new one): link steps to it.
    pub event_id: String,
}

/// Records an audit event (HTTP and MCP), `counted` (the request's
/// memory) kept until it is written.
pub(crate) async fn audit_event(
    state: &Arc<AppState>,
    caller: &Caller,
    event_id: Option<String>,
    session_id: Option<String>,
    action: String,
    detail: Option<Value>,
    counted: &crate::limits::UntilWritten,
) -> Result<EventRecorded, ApiError> {
    caller.require(caller.key.role.can_write(), "record audit events")?;
    Caller::require_enabled(state)?;
    // A key bound to an agent records events in its agent's sessions only.
    if let Some(session) = &session_id {
        crate::require_own_session(state, caller, session).await?;
    }
    // Checked in canonical form before it is queued: a large detail from
    // the CPU pool, as a large step is prepared.
    let large = detail
        .as_ref()
        .is_some_and(|d| cairn_core::json::approx_memory(d) > crate::INLINE_WORK_BYTES);
    // An event sent again under the id it chose (a retry after a lost
    // answer) is answered as it was recorded: what it records is kept as a
    // fingerprint to compare, not as a copy.
    let retry = event_id.clone().map(|id| {
        let fingerprint = event_fingerprint(session_id.as_deref(), &action, detail.as_ref());
        (id, fingerprint)
    });
    let request = WriteRequest::AuditEvent {
        org_id: caller.org().to_owned(),
        event_id,
        session_id,
        action,
        detail,
    };
    match crate::queue_write_when_large(state, caller.org(), counted, request, large)
        .await?
        .await
    {
        Ok(Written::AuditEvent { seq, event_id }) => Ok(EventRecorded { seq, event_id }),
        Ok(other) => Err(crate::unexpected(other)),
        Err(refused @ AppendError::Refused(Refusal::DuplicateId { .. })) => {
            let Some((event_id, fingerprint)) = retry else {
                return Err(refused.into());
            };
            match recorded_event(state, caller.org(), &event_id, fingerprint).await? {
                Some(seq) => Ok(EventRecorded { seq, event_id }),
                None => Err(refused.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// What an audit event records besides its id and time (its session,
/// action and detail, the detail in canonical form, so that spellings of
/// one number are one), hashed.
fn event_fingerprint(
    session_id: Option<&str>,
    action: &str,
    detail: Option<&Value>,
) -> cairn_core::Hash {
    let mut text = Vec::new();
    match session_id {
        Some(session) => cairn_core::jcs::write_str(&mut text, session),
        None => text.extend_from_slice(b"null"),
    }
    text.push(b',');
    cairn_core::jcs::write_str(&mut text, action);
    text.push(b',');
    match detail {
        Some(detail) => cairn_core::jcs::write_value(&mut text, detail),
        None => text.extend_from_slice(b"null"),
    }
    cairn_core::Hash::sha256(&text)
}

/// The position of the audit event recorded under `event_id` if it
/// records what `fingerprint` says ([`event_fingerprint`]); `None` when
/// the id is another record's (a step's, another event's). Read on the
/// CPU pool, as every comparison of a retry with what is recorded (the
/// recorded detail is held parsed). A failed read is the store's failure
/// (503, to be tried again), never the refusal, which would tell a client
/// retrying after a lost answer that its event conflicts with another.
async fn recorded_event(
    state: &Arc<AppState>,
    org: &str,
    event_id: &str,
    fingerprint: cairn_core::Hash,
) -> Result<Option<u64>, ApiError> {
    let (org_id, event_id) = (org.to_owned(), event_id.to_owned());
    crate::on_cpu(state, org, "checking a retried event", move |store| {
        Ok::<_, ApiError>(
            store
                .audit_event(&org_id, &event_id)?
                .and_then(|(seq, event)| {
                    let recorded = event_fingerprint(
                        event.session_id.as_deref(),
                        &event.action,
                        event.detail.as_ref(),
                    );
                    (recorded == fingerprint).then_some(seq)
                }),
        )
    })
    .await?
}

/// `GET /v1/audit-events/{event_id}`.
#[utoipa::path(
    get,
    path = "/v1/audit-events/{event_id}",
    operation_id = "oversight_get_event",
    tag = "audit-events",
    summary = "One audit event",
    params(
        ("event_id" = crate::api_doc::Id, Path, description = "The event"),
    ),
    responses(
        (status = 200, description = "{seq, event_id, session_id, action, detail, at}", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn get_event(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(event_id): Path<String>,
) -> Result<Json, ApiError> {
    let org = caller.org().to_owned();
    let (seq, event) = blocking(&state, move |store| {
        store.audit_event(&org, &event_id)?.ok_or_else(|| {
            ApiError::not_found(format!("audit event {}", crate::error::shown(&event_id)))
        })
    })
    .await?;
    Ok(axum::Json(wire::audit_event_to_json(seq, &event)))
}
