//! Who is calling: the API key named by `Authorization: Bearer` (hashed,
//! looked up with a short cache, rate-limited per key), the [`Caller`]
//! extractor every handler takes, and the checks that a bound key acts only
//! for its own agent's sessions and steps.

use super::*;

/// The authenticated caller: its key's org, role and agent binding.
#[derive(Debug, Clone)]
pub struct Caller {
    pub(crate) key: ApiKey,
}

impl Caller {
    pub(crate) fn org(&self) -> &str {
        &self.key.org_id
    }

    pub(crate) fn require_enabled(state: &AppState) -> Result<(), ApiError> {
        if state.config.enabled {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ledger_disabled",
                "the ledger is disabled on this server (CAIRN_ENABLED=false): nothing is recorded",
            ))
        }
    }

    pub(crate) fn require(&self, allowed: bool, what: &str) -> Result<(), ApiError> {
        if allowed {
            Ok(())
        } else {
            let role = self.key.role.as_str();
            let article = if role.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            Err(ApiError::forbidden(format!(
                "{article} {role} key may not {what}"
            )))
        }
    }

    /// A key bound to an agent acts only for that agent (its name or its
    /// hashed id); an unbound key acts for any agent of its org.
    pub(crate) fn may_act_for(&self, agent: &str) -> Result<(), ApiError> {
        match &self.key.agent_id {
            Some(bound)
                if bound != agent && cairn_core::record::hashed_agent_id(bound) != agent =>
            {
                Err(ApiError::forbidden(format!(
                    "this key is bound to agent {bound} and may not act on agent {}'s records",
                    shown(agent)
                )))
            }
            _ => Ok(()),
        }
    }
}

/// For a key bound to an agent: session `session_id` must be that agent's
/// (404 if there is no such session). Every write that names a session
/// (seal, audit event, ...) checks this first; an agent never changes, so
/// the check cannot go stale.
pub(crate) async fn require_own_session(
    state: &Arc<AppState>,
    caller: &Caller,
    session_id: &str,
) -> Result<(), ApiError> {
    if caller.key.agent_id.is_none() {
        return Ok(());
    }
    let (org, id) = (caller.org().to_owned(), session_id.to_owned());
    let agent = blocking(state, move |store| {
        store
            .session(&org, &id)?
            .map(|info| info.header.agent_id)
            .ok_or_else(|| ApiError::no_session(&id))
    })
    .await?;
    caller.may_act_for(&agent)
}

/// For a key bound to an agent: step `trace_id` must be that agent's (404
/// if there is no such step).
pub(crate) async fn require_own_step(
    state: &Arc<AppState>,
    caller: &Caller,
    trace_id: &str,
) -> Result<(), ApiError> {
    if caller.key.agent_id.is_none() {
        return Ok(());
    }
    let agent = crate::steps::read_step(state, caller.org(), trace_id, |step| {
        step.record.step.agent_id
    })
    .await?;
    caller.may_act_for(&agent)
}

impl FromRequestParts<Arc<AppState>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Caller, ApiError> {
        authenticate(state, &parts.headers).await
    }
}

/// The caller of a request with these headers: the key named by
/// `Authorization: Bearer`, if it exists and is not revoked.
pub(crate) async fn authenticate(
    state: &Arc<AppState>,
    headers: &HeaderMap,
) -> Result<Caller, ApiError> {
    {
        let token = bearer(headers).ok_or_else(|| {
            let message = if headers.contains_key(header::AUTHORIZATION) {
                // A key sent without the scheme, or two headers: say how
                // to send it rather than that none was sent.
                "the Authorization header is not one `Bearer <API key>`: send `Authorization: Bearer cairn_...`"
            } else {
                "an API key is required: Authorization: Bearer cairn_..."
            };
            ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
        })?;
        authenticate_hash(state, token_hash(token)).await
    }
}

/// The caller whose API key's token hashes to `hash` (the web UI's
/// sessions keep only that), with the same cache, revocation and rate
/// limit as a Bearer token.
pub(crate) async fn authenticate_hash(
    state: &Arc<AppState>,
    hash: Hash,
) -> Result<Caller, ApiError> {
    {
        let cached = state.keys.read().ok().and_then(|keys| {
            keys.get(&hash)
                .filter(|(_, at)| at.elapsed() < state.config.key_cache_ttl)
                .map(|(key, _)| key.clone())
        });
        let key = match cached {
            Some(key) => Some(key),
            None => {
                let store = Arc::clone(&state.store);
                let found = tokio::task::spawn_blocking(move || store.api_key_by_hash(&hash))
                    .await
                    .map_err(|_| {
                        ApiError::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "internal",
                            "lookup failed",
                        )
                    })??;
                if let (Some(key), Ok(mut keys)) = (&found, state.keys.write()) {
                    keys.insert(hash, (key.clone(), Instant::now()));
                }
                found
            }
        };
        match key {
            Some(key) if key.usable_at(cairn_store::now()) => {
                limits::check_rate(state, &key.id)?;
                Ok(Caller { key })
            }
            Some(ApiKey {
                revoked_at: None,
                expires_at: Some(end),
                ..
            }) => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                format!(
                    "the API key expired at {end}: use another, or have an admin create one (POST /v1/keys, cairn admin create-key)"
                ),
            )),
            _ => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the API key is unknown or revoked",
            )),
        }
    }
}

/// The API key of `Authorization: Bearer <key>`: the scheme's name in any
/// case (RFC 9110 11.1), the header once (two are ambiguous: neither is
/// used).
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next()?.to_str().ok()?;
    if values.next().is_some() {
        return None;
    }
    let (scheme, token) = value.split_once(' ')?;
    Some(token.trim()).filter(|t| scheme.eq_ignore_ascii_case("bearer") && !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_read_in_any_case_from_one_header() {
        let mut headers = HeaderMap::new();
        for (value, key) in [
            ("Bearer cairn_a", Some("cairn_a")),
            ("bearer cairn_a", Some("cairn_a")),
            ("BEARER  cairn_a ", Some("cairn_a")),
            ("Basic cairn_a", None),
            ("Bearer ", None),
            ("Bearercairn_a", None),
        ] {
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
            assert_eq!(bearer(&headers), key, "{value}");
        }
        headers.append(header::AUTHORIZATION, "Bearer cairn_b".parse().unwrap());
        assert_eq!(bearer(&headers), None, "two headers");
    }
}
