//! API keys and agent keys over HTTP: registering an agent's signing key,
//! creating, listing and revoking API keys, and the bootstrap admin key.

use super::*;
use cairn_store::KeyRevocation;

/// Registers an agent's Ed25519 public key, so that it can sign its steps.
/// A key bound to an agent registers for that agent only.
#[utoipa::path(
    post,
    path = "/v1/agent-keys",
    operation_id = "register_agent_key",
    tag = "agent-keys",
    summary = "Register an agent's Ed25519 key",
    description = "Body: agent_id, public_key (base64 of 32 bytes). Key id: agent- + 12 hex digits of SHA-256 of the key. Roles: writer, admin.",
    request_body = crate::api_doc::AgentKeyInput,
    responses(
        (status = 201, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn register_agent_key(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Body(body): Body,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_write(), "register agent keys")?;
    Caller::require_enabled(&state)?;
    let (v, parsed) = parse_json(&state, caller.org(), &body).await?;
    let counted = crate::limits::UntilWritten::new(None, Some(parsed));
    members(&v, &["agent_id", "public_key"])?;
    let given = optional_string(&v, "agent_id")?;
    let agent_id = match (given.as_deref(), &caller.key.agent_id) {
        (Some(a), Some(bound)) if a != bound => {
            return Err(ApiError::forbidden(format!(
                "this key may only act as agent {bound}"
            )));
        }
        (Some(a), _) => a.to_owned(),
        (None, Some(bound)) => bound.clone(),
        (None, None) => {
            return Err(crate::input::missing_field("agent_id"));
        }
    };
    let public_key = public_key_param(optional_string(&v, "public_key")?.as_deref())?;
    let request = WriteRequest::RegisterKey {
        org_id: caller.org().to_owned(),
        agent_id: agent_id.clone(),
        public_key,
        by_admin: caller.key.role.can_admin(),
    };
    // Only the queued write's copies stay while it waits (what the
    // request counted covers one copy of what it sent).
    drop((v, body));
    match crate::queue_write(&state, &counted, request).await? {
        Written::KeyRegistered { seq, key_id } => Ok((
            StatusCode::CREATED,
            axum::Json(json!({"key_id": key_id, "agent_id": agent_id, "seq": seq})),
        )
            .into_response()),
        other => Err(crate::unexpected(other)),
    }
}

/// A new key's `expires_at`: an RFC 3339 time after `now`.
fn expiry(text: &str, now: cairn_core::Timestamp) -> Result<cairn_core::Timestamp, ApiError> {
    cairn_store::key_expiry(text, now).map_err(|why| {
        ApiError::bad_request("invalid_argument", format!("expires_at {why}"))
            .with_field("expires_at")
    })
}

pub(crate) fn key_json(key: &ApiKey) -> Value {
    json!({
        "id": key.id, "org_id": key.org_id, "role": key.role.as_str(), "agent_id": key.agent_id,
        "label": key.label, "created_at": key.created_at.to_string(),
        "revoked_at": key.revoked_at.map(|t| t.to_string()),
        "expires_at": key.expires_at.map(|t| t.to_string()),
    })
}

#[utoipa::path(
    post,
    path = "/v1/keys",
    operation_id = "create_key",
    tag = "keys",
    summary = "Create an API key",
    description = "Body: role (writer|reader|auditor|admin), agent_id (optional binding), label (one line, at most 256 bytes), expires_at (optional: an RFC 3339 time in the future, or a date, which is that day's start in UTC, after which the key is refused as a revoked one is; it stays listed; a key made by an expiring key expires no later than that key). The token is shown once. Roles: admin.",
    request_body = crate::api_doc::KeyInput,
    responses(
        (status = 201, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn create_key(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Body(body): Body,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_admin(), "manage keys")?;
    let (v, _parsed) = parse_json(&state, caller.org(), &body).await?;
    members(&v, &["role", "agent_id", "label", "expires_at"])?;
    let role = crate::required_string(&v, "role")?;
    let role = Role::parse(&role).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_argument",
            "role must be writer, reader, auditor or admin",
        )
        .with_field("role")
    })?;
    // A key bound to an agent mints keys bound to the same agent only:
    // it cannot create a key that acts for any agent.
    let agent = match (optional_string(&v, "agent_id")?, &caller.key.agent_id) {
        (Some(a), Some(bound)) if a != *bound => {
            return Err(ApiError::forbidden(format!(
                "this key is bound to agent {bound}: it may only create keys bound to {bound}, not to {}",
                shown(&a)
            )));
        }
        (None, Some(bound)) => Some(bound.clone()),
        (given, _) => given,
    };
    if let Some(a) = &agent {
        cairn_core::record::validate_id("agent_id", a)
            .map_err(|e| ApiError::bad_request("malformed_id", e.to_string()))?;
    }
    let label = optional_string(&v, "label")?.unwrap_or_default();
    if let Some(why) = cairn_store::key_label_refused(&label) {
        return Err(ApiError::bad_request("invalid_argument", why).with_field("label"));
    }
    let now = cairn_store::now();
    let asked = optional_string(&v, "expires_at")?
        .map(|text| expiry(&text, now))
        .transpose()?;
    // A key that expires makes keys that expire no later than it does:
    // else a stolen one would outlive its end through the keys it made.
    let expires_at = match (asked, caller.key.expires_at) {
        (Some(asked), Some(end)) => Some(asked.min(end)),
        (asked, end) => asked.or(end),
    };
    let (mut key, token) = ApiKey::generate(caller.org(), role, agent.as_deref(), &label, now)?;
    key.expires_at = expires_at;
    let stored = key.clone();
    blocking(&state, move |store| Ok(store.put_api_key(&stored)?)).await?;
    let mut body = key_json(&key);
    body["token"] = json!(token);
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

#[utoipa::path(
    get,
    path = "/v1/keys",
    operation_id = "list_keys",
    tag = "keys",
    summary = "List the org's API keys (never their tokens)",
    description = "Roles: admin.",
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn list_keys(
    State(state): State<Arc<AppState>>,
    caller: Caller,
) -> Result<Json, ApiError> {
    caller.require(caller.key.role.can_admin(), "manage keys")?;
    let org = caller.org().to_owned();
    let keys = blocking(&state, move |store| Ok(store.api_keys(&org)?)).await?;
    // A key bound to an agent sees the keys of that agent only.
    Ok(axum::Json(Value::Array(
        keys.iter()
            .filter(|k| caller.key.agent_id.is_none() || k.agent_id == caller.key.agent_id)
            .map(key_json)
            .collect(),
    )))
}

#[utoipa::path(
    delete,
    path = "/v1/keys/{key_id}",
    operation_id = "revoke_key",
    tag = "keys",
    summary = "Revoke an API key",
    description = "Roles: admin. The org's last admin key not bound to an agent is not revoked (409 `refused`: create another admin key first; `cairn admin revoke-key` on the data directory can). A key bound to an agent revokes that agent's keys only.",
    params(
        ("key_id" = String, Path, description = "The key's id"),
    ),
    responses(
        (status = 204, description = "Revoked"),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn revoke_key(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(key_id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_admin(), "manage keys")?;
    let org = caller.org().to_owned();
    let id = key_id.clone();
    // A key bound to an agent revokes keys of that agent only; others
    // answer as if they did not exist.
    let bound = caller.key.agent_id.clone();
    // Only what can be a key id is repeated in an answer: anything else
    // may be a whole token (a secret) pasted where its id belongs, and
    // answers are kept by logs and proxies.
    let looks_like_an_id = key_id.len() <= 32 && key_id.chars().all(|c| c.is_ascii_alphanumeric());
    if !looks_like_an_id {
        return Err(ApiError::not_found(
            "no key has the id in the path (not repeated here: it is not a key id, and may be a whole API key); a key's id is what GET /v1/keys lists as `id`",
        ));
    }
    let caller_org = org.clone();
    let revoked = blocking(&state, move |store| {
        // The store checks and revokes in one step, against every writer
        // (two admins revoking each other, on one server or two of a
        // PostgreSQL fleet, cannot both pass the last-admin check).
        Ok(store.revoke_api_key_unless_last_admin(
            &org,
            &id,
            bound.as_deref(),
            cairn_store::now(),
        )?)
    })
    .await?;
    match revoked {
        KeyRevocation::Revoked => {}
        KeyRevocation::Unknown => {
            // A key of this org the store has not in use, which this
            // server still holds (revoked beside this request, or by this
            // very request when its commit's answer was lost and the
            // statement ran again): forgotten all the same. Only this
            // org's: another org's key answers as if it did not exist.
            let held = state.keys.write().is_ok_and(|mut keys| {
                let before = keys.len();
                keys.retain(|_, (k, _)| !(k.id == key_id && k.org_id == caller_org));
                keys.len() != before
            });
            if held {
                state.mcp_sessions.end_key(&key_id).await;
            }
            // Revoked before (a DELETE sent again): said so, with when,
            // rather than a bare "not found" for a key GET /v1/keys lists.
            let (org, id, bound) = (
                caller.org().to_owned(),
                key_id.clone(),
                caller.key.agent_id.clone(),
            );
            let revoked_at = blocking(&state, move |store| {
                Ok(store
                    .api_keys(&org)?
                    .into_iter()
                    .find(|k| k.id == id && (bound.is_none() || k.agent_id == bound)))
            })
            .await
            .ok()
            .flatten()
            .and_then(|k| k.revoked_at);
            return Err(match revoked_at {
                Some(at) => ApiError::not_found_because(format!(
                    "key {} is not in use: it was revoked at {at} (GET /v1/keys lists it with revoked_at)",
                    shown(&key_id)
                )),
                None => ApiError::not_found(format!("key {}", shown(&key_id))),
            });
        }
        KeyRevocation::LastAdmin => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "refused",
                format!(
                    "key {} is the org's last admin key: create another admin key first (POST /v1/keys with role admin), then revoke this one",
                    shown(&key_id)
                ),
            ));
        }
    }
    if let Ok(mut keys) = state.keys.write() {
        keys.retain(|_, (k, _)| k.id != key_id);
    }
    state.mcp_sessions.end_key(&key_id).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Creates the first admin key of `org_id` if the org has no key yet, and
/// returns its token (to print once).
pub fn bootstrap_admin_key(
    store: &dyn LedgerStore,
    org_id: &str,
) -> Result<Option<String>, cairn_store::StoreError> {
    if !store.api_keys(org_id)?.is_empty() {
        return Ok(None);
    }
    let (key, token) = ApiKey::generate(
        org_id,
        Role::Admin,
        None,
        "bootstrap admin",
        cairn_store::now(),
    )?;
    store.put_api_key(&key)?;
    Ok(Some(token))
}
