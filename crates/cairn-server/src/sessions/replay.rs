//! A session's replay over HTTP (`GET /v1/sessions/{id}`): as JSON, or
//! as seed 002's Markdown (its turns in trail order), streamed in batches
//! that a slow client holds no worker for ([`super::streamed`]).

use super::*;

#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}",
    operation_id = "replay",
    tag = "sessions",
    summary = "Replay a session",
    description = "Steps in order with seed 000's member names. verify=true adds chain_valid and the verdict (with format=markdown, whose text has no place for them, the headers Cairn-Chain-Valid and, when it fails, Cairn-Verdict-Reason, Cairn-Verdict-Step-Index and Cairn-Verdict-Seq); format=markdown returns seed 002's Markdown (the turns in trail order, as the audit trail's). Both are streamed as the steps are read (step_count follows the steps): a failure after the first byte cuts the body short (the connection ends without the body's last chunk), so it never reads as a shorter replay.",
    params(
        ("session_id" = crate::api_doc::Id, Path, description = "The session"),
        ("verify" = Option<bool>, Query, description = "true to verify the chain"),
        ("format" = Option<crate::api_doc::ReplayFormat>, Query, description = "json (default) or markdown"),
        ("level" = Option<crate::api_doc::Level>, Query, description = "Seed 004's detail level: generic (kinds, numbers, timings, hashes), detailed (plus identifiers, tool names, models, lists) or full (plus content: needs the session's recorded consent and an auditor or admin key). Hidden fields are replaced by their commitments and listed in hidden_fields; everything still verifies."),
    ),
    responses(
        (status = 200, description = "OK", content((serde_json::Value = "application/json"), (String = "text/markdown"))),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn replay(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(session_id): Path<String>,
    StrictQuery(q): StrictQuery,
) -> Result<Response, ApiError> {
    input::refuse_unknown_params(q.keys(), &["format", "verify", "level"])?;
    let verify = query_bool(&q, "verify")?;
    let markdown = wants_markdown(q.get("format").map(String::as_str))?;
    let level = level_param(&q)?;
    let org = caller.org().to_owned();
    let info = {
        let (org, session_id) = (org.clone(), session_id.clone());
        blocking(&state, move |store| {
            store
                .session(&org, &session_id)?
                .ok_or_else(|| ApiError::no_session(&session_id))
        })
        .await?
    };
    // Whether the caller may see the level asked for is answered before
    // any verification is spent on the request.
    allow_level(
        &caller,
        level,
        Some((&info.header.session_id, info.header.full_consent)),
    )?;
    let verdict = if verify {
        let permit = limits::expensive(&state, &org, "verification").await?;
        let (org, session_id) = (org.clone(), session_id.clone());
        // The permit goes with the work (a blocking task that started runs
        // to its end even if the client goes away); a streamed replay holds no slot:
        // it holds a few batches at a time, counted in the replay buffer.
        blocking(&state, move |store| {
            let verdict = verify_session(store, &org, &session_id)?;
            drop(permit);
            Ok(verdict)
        })
        .await?
    } else {
        None
    };
    if let Some(v) = &verdict {
        state.metrics.verification(v.verified);
    }
    if markdown {
        // Seed 002's Markdown of the whole session: its turns in trail
        // order, streamed as the audit trail is.
        let shape = Shape::Turns(TurnsForm::TrailMarkdown);
        let mut replay = StreamedSteps::new(org, info.header.session_id.clone(), level, shape);
        let first = replay
            .start(&state, info.step_count, Steps::Session)
            .await?;
        let mut response = replay.stream(&state, first);
        if let Some(v) = &verdict {
            verdict_headers(response.headers_mut(), v);
        }
        return Ok(response);
    }
    let mut head = serde_json::Map::new();
    head.insert("session_id".into(), json!(info.header.session_id));
    head.insert("agent_id".into(), json!(info.header.agent_id));
    head.insert("level".into(), json!(level.map(DetailLevel::as_str)));
    head.insert("sealed".into(), json!(info.seal.is_some()));
    let mut tail = serde_json::Map::new();
    if let Some(v) = &verdict {
        tail.insert("chain_valid".into(), json!(v.verified));
        tail.insert(
            "verdict".into(),
            wire::verdict_to_json(v, 0, cairn_store::now()),
        );
    }
    let shape = Shape::Replay { head, tail };
    let mut replay = StreamedSteps::new(org, session_id, level, shape);
    // The positions and the first steps are read before the status line,
    // so that a store that fails at once (or a full replay buffer)
    // answers with its error.
    let first = replay
        .start(&state, info.step_count, Steps::Session)
        .await?;
    Ok(replay.stream(&state, first))
}

/// A Markdown replay's verdict, which its text (seed 002's) has no place
/// for: `Cairn-Chain-Valid` (`true` or `false`) and, when it fails,
/// `Cairn-Verdict-Reason` (FORMAT 9.1's code) and the failing step's
/// `Cairn-Verdict-Step-Index` or record's `Cairn-Verdict-Seq` where the
/// verdict names them.
fn verdict_headers(headers: &mut axum::http::HeaderMap, verdict: &cairn_core::verify::Verdict) {
    use axum::http::HeaderValue;
    headers.insert(
        "cairn-chain-valid",
        HeaderValue::from_static(if verdict.verified { "true" } else { "false" }),
    );
    if let Some(failure) = &verdict.failure {
        headers.insert(
            "cairn-verdict-reason",
            HeaderValue::from_static(failure.reason.as_str()),
        );
        if let Some(index) = failure.at.step_index {
            headers.insert("cairn-verdict-step-index", HeaderValue::from(index));
        }
        if let Some(seq) = failure.at.seq {
            headers.insert("cairn-verdict-seq", HeaderValue::from(seq));
        }
    }
}
