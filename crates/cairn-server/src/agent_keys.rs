//! Agent keys over HTTP: revocation, rotation and the key history
//! (`docs/FORMAT.md` 7.3). Registration is `POST /v1/agent-keys`, in the
//! main module. Each is a record of the org log; a key bound to an agent
//! acts on that agent's keys only.

use crate::input::{KEY_RECORDS_LIMIT, StrictQuery, query_limit, refuse_unknown_params};
use crate::{ApiError, optional_string};
use crate::{AppState, Caller, Json, blocking, parse_json, public_key_param};
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use cairn_core::log::OpRecord;
use cairn_store::{WriteRequest, Written};
use serde_json::{Value, json};
use std::sync::Arc;

/// The agent a key request acts for: the body's `agent_id`, which a key
/// bound to an agent may only set to its own.
fn acting_agent(caller: &Caller, body: &Value) -> Result<String, ApiError> {
    match (optional_string(body, "agent_id")?, &caller.key.agent_id) {
        (Some(a), Some(bound)) if a != *bound => Err(ApiError::forbidden(format!(
            "this key may only act as agent {bound}"
        ))),
        (Some(a), _) => Ok(a),
        (None, Some(bound)) => Ok(bound.clone()),
        (None, None) => Err(crate::input::missing_field("agent_id")),
    }
}

fn revoked_json(written: Written) -> Result<Json, ApiError> {
    match written {
        Written::KeyRevoked {
            seq,
            key_id,
            successor,
        } => Ok(axum::Json(json!({
            "revoked": key_id, "seq": seq,
            "key_id": successor.as_ref().map(|s| &s.1),
            "registered_seq": successor.as_ref().map(|s| s.0),
        }))),
        other => Err(crate::unexpected(other)),
    }
}

/// `POST /v1/agent-keys/{key_id}/revoke`: body `{agent_id, reason}`. From
/// this record on the key signs nothing the log accepts.
#[utoipa::path(
    post,
    path = "/v1/agent-keys/{key_id}/revoke",
    operation_id = "agent_keys_revoke",
    tag = "agent-keys",
    summary = "Revoke an agent key",
    description = "Body: agent_id, reason. Appends a key-revocation record: from it on the key signs nothing the log accepts; what it signed before stays valid. Roles: writer, admin (a key bound to an agent: its own keys only).",
    params(
        ("key_id" = String, Path, description = "The agent key id (agent- + 12 hex digits)"),
    ),
    request_body = crate::api_doc::AgentKeyRevokeInput,
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn revoke(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(key_id): Path<String>,
    crate::limits::Body(body): crate::limits::Body,
) -> Result<Json, ApiError> {
    caller.require(caller.key.role.can_write(), "revoke agent keys")?;
    Caller::require_enabled(&state)?;
    let (v, parsed) = parse_json(&state, caller.org(), &body).await?;
    let counted = crate::limits::UntilWritten::new(None, Some(parsed));
    crate::members(&v, &["agent_id", "reason"])?;
    let agent_id = acting_agent(&caller, &v)?;
    let reason = optional_string(&v, "reason")?.unwrap_or_else(|| "revoked".into());
    let request = WriteRequest::RevokeKey {
        org_id: caller.org().to_owned(),
        agent_id,
        key_id,
        reason,
    };
    // Only the queued write's copies stay while it waits (what the
    // request counted covers one copy of what it sent).
    drop((v, body));
    revoked_json(crate::queue_write(&state, &counted, request).await?)
}

/// `POST /v1/agent-keys/{key_id}/rotate`: body `{agent_id, public_key}`.
/// Revokes the key and registers the new one in one step.
#[utoipa::path(
    post,
    path = "/v1/agent-keys/{key_id}/rotate",
    operation_id = "agent_keys_rotate",
    tag = "agent-keys",
    summary = "Rotate an agent key",
    description = "Body: agent_id, public_key (base64 of 32 bytes). Revokes the key and registers the new one in one step (both records or neither). Roles: writer, admin.",
    params(
        ("key_id" = String, Path, description = "The agent key id (agent- + 12 hex digits)"),
    ),
    request_body = crate::api_doc::AgentKeyRotateInput,
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn rotate(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(key_id): Path<String>,
    crate::limits::Body(body): crate::limits::Body,
) -> Result<Json, ApiError> {
    caller.require(caller.key.role.can_write(), "rotate agent keys")?;
    Caller::require_enabled(&state)?;
    let (v, parsed) = parse_json(&state, caller.org(), &body).await?;
    let counted = crate::limits::UntilWritten::new(None, Some(parsed));
    crate::members(&v, &["agent_id", "public_key"])?;
    let agent_id = acting_agent(&caller, &v)?;
    let public_key = public_key_param(v.get("public_key").and_then(Value::as_str))?;
    let request = WriteRequest::RotateKey {
        org_id: caller.org().to_owned(),
        agent_id,
        old_key_id: key_id,
        public_key,
        by_admin: caller.key.role.can_admin(),
    };
    // Only the queued write's copies stay while it waits (what the
    // request counted covers one copy of what it sent).
    drop((v, body));
    revoked_json(crate::queue_write(&state, &counted, request).await?)
}

/// `GET /v1/agent-keys`: the key records of the org (of the caller's
/// agent, for a bound key), in log order, a page at a time (an org may
/// register keys without end: the whole list had been built in memory at
/// once).
#[utoipa::path(
    get,
    path = "/v1/agent-keys",
    operation_id = "agent_keys_list",
    tag = "agent-keys",
    summary = "The org's agent key records",
    description = "The key-registration and key-revocation records of the org (of the caller's agent, for a key bound to one), in log order, at most limit of them (1 to 1000, default 1000) after position after. When a page is full, a Link header with rel=\"next\" names the next page (the same query with after set to the page's last seq); every page costs the same however deep. Roles: any.",
    params(
        ("after" = Option<u64>, Query, description = "Only records after this log position: the seq of the last record of the previous page"),
        ("limit" = Option<u64>, Query, description = "1 to 1000, default 1000", minimum = 1, maximum = 1000),
    ),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    StrictQuery(q): StrictQuery,
) -> Result<Response, ApiError> {
    refuse_unknown_params(q.keys(), &["after", "limit"])?;
    let limit = query_limit(&q, KEY_RECORDS_LIMIT)?;
    // A log position, as the document types it (int64): past it is not
    // a position of any log.
    let after = crate::query_u64(&q, "after")?;
    if after.is_some_and(|seq| i64::try_from(seq).is_err()) {
        return Err(ApiError::bad_request(
            "invalid_argument",
            "after must be a log position: the seq of the last record of the previous page",
        )
        .with_field("after"));
    }
    let org = caller.org().to_owned();
    let agent = caller.key.agent_id.clone();
    let records = blocking(&state, move |store| {
        Ok(store.key_records_page(&org, agent.as_deref(), after, limit)?)
    })
    .await?;
    let next = (records.len() == limit)
        .then(|| records.last().map(|(seq, _)| *seq))
        .flatten();
    let keys: Vec<Value> = records
        .into_iter()
        .map(|(seq, record)| match record {
            OpRecord::KeyRegistration(k) => json!({
                "seq": seq, "type": "key-registration", "agent_id": k.agent_id, "key_id": k.key_id,
                "public_key": base64_key(&k.public_key), "at": k.registered_at.to_string(),
            }),
            OpRecord::KeyRevocation(k) => json!({
                "seq": seq, "type": "key-revocation", "agent_id": k.agent_id, "key_id": k.key_id,
                "reason": k.reason, "at": k.revoked_at.to_string(),
            }),
            other => json!({"seq": seq, "type": other.entry_type()}),
        })
        .collect();
    let mut response = axum::Json(json!({ "keys": keys })).into_response();
    if let Some(last) = next
        && let Ok(value) = header::HeaderValue::from_str(&format!(
            "</v1/agent-keys?after={last}&limit={limit}>; rel=\"next\""
        ))
    {
        response.headers_mut().insert(header::LINK, value);
    }
    Ok(response)
}

fn base64_key(key: &cairn_core::ed25519_dalek::VerifyingKey) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(key.as_bytes())
}
