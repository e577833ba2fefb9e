//! Seed 000's tools, recording and reading single steps:
//! `log_reasoning_step`, `replay_decision`, `get_session_history`, and
//! `get_trace` (one step by its trace id) and `search_reasoning` (the same
//! search as `GET /v1/search`). Apart from the service in `mod.rs` so that
//! each seed's tools read as one group.

use super::{
    CairnMcp, History, HistoryArgs, LogStepArgs, Parameters, Replay, ReplayArgs, SearchArgs,
    SessionRow, StepLogged, ToolResult, TraceArgs, ok, output_schema, run, tool_error,
};
use crate::ApiError;
use cairn_store::NewStep;
use cairn_store::ops::verify_session;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{tool, tool_router};

#[tool_router(router = steps_router, vis = "pub(super)")]
impl CairnMcp {
    #[tool(
        title = "Record a reasoning step",
        description = "Record one step of your reasoning in the tamper-evident ledger (hash-chained per session; the session is created on first use). Call it for every observation, hypothesis, tool call, tool result, reasoning step, decision, action, error, correction, summary, plan step and final answer. Returns trace_id, step_index and current_hash. To retry safely after a lost answer, give the step your own trace_id: a repeat of the same step is recorded once.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<StepLogged>()
    )]
    async fn log_reasoning_step(
        &self,
        Parameters(args): Parameters<LogStepArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = async {
            let agent_id = self.agent_for(&caller, args.agent_id)?;
            let agent_id = if args.hash_agent_id {
                cairn_core::record::hashed_agent_id(&agent_id)
            } else {
                agent_id
            };
            let status = match args.status.as_deref() {
                None | Some("ok") => cairn_core::record::Status::Ok,
                Some("flagged") => cairn_core::record::Status::Flagged,
                Some(other) => {
                    return Err(ApiError::bad_request(
                        "invalid_argument",
                        format!("status must be ok or flagged, not {other:?}"),
                    )
                    .with_field("status"));
                }
            };
            // As REST reads a step's links (`input::refuse_unknown_step_members`).
            let mut links = cairn_core::record::Links::default();
            for (name, id) in args.links.unwrap_or_default() {
                let known = cairn_core::record::Links::default()
                    .entries()
                    .map(|(name, _)| name);
                if !known.contains(&name.as_str()) {
                    return Err(crate::input::unknown_field("links.", &name, &known));
                }
                // A link given as null is no link, as over REST.
                let Some(id) = id else { continue };
                links.set(&name, id).map_err(|e| {
                    ApiError::bad_request("invalid_argument", e).with_field("links")
                })?;
            }
            let step = NewStep {
                org_id: caller.org().to_owned(),
                session_id: args.session_id,
                agent_id,
                kind_label: args.step_type,
                links,
                turn_step: args.turn_step,
                content: args.content,
                input: args.input_data,
                output: args.output_data,
                confidence: args.confidence,
                duration_ms: args.duration_ms,
                token_count: args.token_count,
                model: args.model,
                metadata: args.metadata,
                turn_id: args.turn_id,
                task_id: args.task_id,
                trace_id: args.trace_id,
                status,
                caller: caller.key.id.clone(),
                ..NewStep::default()
            };
            self.log_step(&caller, step, self.request_memory(&context).as_ref())
                .await
        }
        .await;
        run(result).await
    }

    #[tool(
        title = "Replay a reasoning session",
        description = "Replay a reasoning session to see how a decision was made: every step in order (step_index, step_type, content, input_data, output_data, confidence, created_at, hashes). With verify_chain=true, every hash is recomputed and chain_valid says whether the session is intact. A long session comes in parts of about 256 KiB: when next_step_index is not null, call again with from_step set to it.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<Replay>()
    )]
    async fn replay_decision(
        &self,
        Parameters(args): Parameters<ReplayArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let org = caller.org().to_owned();
        let level = match crate::level_value(args.level.as_deref()) {
            Ok(level) => level,
            Err(e) => return tool_error(e),
        };
        // The answer is held whole (one JSON-RPC message), verified or
        // not: one of the org's expensive slots.
        let permit = match crate::limits::expensive(&self.state, &org, "an answer held whole").await
        {
            Ok(permit) => permit,
            Err(e) => return tool_error(e),
        };
        let result = self
            .store(move |store| {
                let info = store
                    .session(&org, &args.session_id)?
                    .ok_or_else(|| ApiError::no_session(&args.session_id))?;
                crate::allow_level(
                    &caller,
                    level,
                    Some((&info.header.session_id, info.header.full_consent)),
                )?;
                let seqs = store
                    .session_seqs(&org, &args.session_id)?
                    .ok_or_else(|| ApiError::no_session(&args.session_id))?;
                let from = args.from_step.unwrap_or(0);
                let skipped = usize::try_from(from)
                    .ok()
                    .filter(|from| *from <= seqs.len())
                    .ok_or_else(|| {
                        ApiError::bad_request(
                            "invalid_argument",
                            format!(
                                "from_step must be at most the session's step_count ({})",
                                seqs.len()
                            ),
                        )
                        .with_field("from_step")
                    })?;
                let (steps, next_step_index) =
                    replay_page(store, &org, &args.session_id, &seqs[skipped..], level)?;
                let mut out = Replay {
                    session_id: args.session_id.clone(),
                    agent_id: info.header.agent_id,
                    level: level.map(|l| l.as_str().to_owned()),
                    step_count: seqs.len(),
                    sealed: info.seal.is_some(),
                    steps,
                    next_step_index,
                    // chain_valid is always there (null when not checked),
                    // so code written against the seed's example can read
                    // it.
                    chain_valid: None,
                    verdict: None,
                };
                if args.verify_chain {
                    let verdict = verify_session(store, &org, &args.session_id)?;
                    out.chain_valid = Some(verdict.as_ref().is_some_and(|v| v.verified));
                    out.verdict = verdict
                        .filter(|v| !v.verified)
                        .map(|v| crate::wire::verdict_out(&v, 0, cairn_store::now()));
                }
                Ok((out, permit))
            })
            .await;
        // The slot is kept until the tool's result has been built.
        match result {
            Ok((answer, _permit)) => run(Ok(answer)).await,
            Err(e) => run::<Replay>(Err(e)).await,
        }
    }

    #[tool(
        title = "List an agent's sessions",
        description = "List an agent's recent reasoning sessions, newest first: session_id, step_count, first_step_at, last_step_at, chain_valid, sealed, started_at and cursor for each. agent_id defaults to your own agent. Filters as GET /v1/sessions: kind, flagged, since, until. A full page gives next_cursor: pass it as cursor for the next page.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<History>()
    )]
    pub(super) async fn get_session_history(
        &self,
        Parameters(args): Parameters<HistoryArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let org = caller.org().to_owned();
        // Reading is the org's, whatever agent a key is bound to (as
        // REST's listing and every other reading tool): a named agent is
        // listed; none named lists the key's (or the server's default)
        // agent, and with neither every agent's. The filters are read by
        // the REST listing's own reader, so both refuse and select alike.
        let agent_id = args.agent_id.or_else(|| {
            caller
                .key
                .agent_id
                .clone()
                .or_else(|| self.default_agent.clone())
        });
        let query: std::collections::HashMap<String, String> = [
            ("agent_id", agent_id),
            ("kind", args.kind),
            ("flagged", args.flagged.map(|f| f.to_string())),
            ("since", args.since),
            ("until", args.until),
            ("cursor", args.cursor),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_owned(), value?)))
        .collect();
        let filter = match crate::sessions::listing_filter(&query) {
            Ok(filter) => filter,
            Err(e) => return tool_error(e),
        };
        let limit =
            match crate::input::result_limit(args.limit.map(Some), crate::input::SESSIONS_LIMIT) {
                Ok(limit) => limit,
                Err(e) => return tool_error(e),
            };
        let budget = self.state.config.limits.list_verify_steps;
        let slot = crate::sessions::listing_slot(&self.state, &org, true);
        let verify = slot.is_some();
        let result = self
            .store(move |store| {
                let _slot = slot;
                let mut rows = Vec::new();
                for (s, valid) in
                    crate::listed_sessions(store, &org, &filter, limit, verify, budget)?
                {
                    let cursor =
                        crate::sessions::cursor_text(&cairn_store::SessionCursor::after(&s));
                    rows.push(SessionRow {
                        session_id: s.session_id,
                        agent_id: s.agent_id,
                        step_count: s.step_count,
                        first_step_at: s.first_step_at.map(|t| t.to_string()),
                        last_step_at: s.last_step_at.map(|t| t.to_string()),
                        chain_valid: valid,
                        sealed: s.sealed,
                        started_at: s.started_at.to_string(),
                        cursor,
                    });
                }
                Ok(rows)
            })
            .await;
        match result {
            // Structured content must be an object, so the list is under
            // "sessions" there; the text content is seed 000's list itself,
            // which is what a client reading the text gets, and, when the
            // page is full, a second text block with the next page's
            // cursor (a host that shows the model the text alone would
            // otherwise hide the cursor the description tells it to pass).
            Ok(rows) => {
                let text = crate::wire::to_json(&rows).to_string();
                let next_cursor = (rows.len() == limit)
                    .then(|| rows.last().map(|row| row.cursor.clone()))
                    .flatten();
                let mut content = vec![rmcp::model::ContentBlock::text(text)];
                if let Some(cursor) = &next_cursor {
                    content.push(rmcp::model::ContentBlock::text(
                        serde_json::json!({ "next_cursor": cursor }).to_string(),
                    ));
                }
                let mut answer = ok(&History {
                    sessions: rows,
                    next_cursor,
                })?;
                answer.content = content;
                Ok(answer)
            }
            Err(e) => tool_error(e),
        }
    }

    #[tool(
        title = "Get one recorded step",
        description = "One recorded step by its trace id, with its hashes.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<crate::wire::StepOut>()
    )]
    async fn get_trace(
        &self,
        Parameters(args): Parameters<TraceArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = crate::steps::read_step(&self.state, caller.org(), &args.trace_id, |step| {
            crate::wire::step_out(step.seq, &step.record)
        })
        .await;
        run(result).await
    }

    #[tool(
        title = "Search reasoning",
        description = "Search your org's recorded steps. mode fulltext matches words in content, inputs, outputs and metadata (\"a phrase\", prefix*, -excluded; English stems; Chinese and Japanese too); semantic ranks the embedded steps by meaning (decisions, actions, errors, corrections and final answers always embedded; the answer names the embedder); hybrid (default) fuses both. Filter by agent_id, session_id, kind, status (ok or flagged), since and until (RFC 3339 or a date). Each result is the step with score, matched_by, a snippet and highlights.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<crate::wire::SearchResults>()
    )]
    async fn search_reasoning(
        &self,
        Parameters(args): Parameters<SearchArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        // The same reading of the same parameters as GET /v1/search.
        let given: std::collections::HashMap<String, String> = [
            ("q", Some(args.query)),
            ("mode", args.mode),
            ("agent_id", args.agent_id),
            ("session_id", args.session_id),
            ("kind", args.kind),
            ("status", args.status),
            ("since", args.since),
            ("until", args.until),
            ("limit", args.limit.map(|l| l.to_string())),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v)))
        .collect();
        let result = match crate::search_input(&given) {
            // Read as REST reads it, then fitted to one message: each
            // hit's step shortened past its share, so that no large step
            // fails the tool or hides the hits after it.
            Ok(input) => {
                let read = crate::run_search(&self.state, &caller, input).await;
                super::fitted(
                    &self.state,
                    caller.org(),
                    read,
                    |answer: &mut crate::wire::SearchResults| {
                        answer.truncated |= super::fit_listed(&mut answer.results, |hit| {
                            super::shorten_if_large(&mut hit.step);
                        });
                    },
                )
                .await
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(answer) => ok(&answer),
            // REST's `q` is this tool's `query`.
            Err(mut e) => {
                if e.field.as_deref() == Some("q") {
                    e.field = Some("query".into());
                    if let Some(rest) = e.message.strip_prefix("q ") {
                        e.message = format!("query {rest}");
                    }
                }
                tool_error(e)
            }
        }
    }
}

/// JSON one step may take to be answered alone, as the first of a part:
/// a third of [`super::MAX_ANSWER_MESSAGE_BYTES`] (its JSON, then escaped
/// at most twice its size), less the answer's other members.
const REPLAY_STEP_BYTES: usize = super::MAX_ANSWER_MESSAGE_BYTES / 3 - 4096;

/// The steps at `seqs` (a session's positions from the first one asked
/// for), shown at `level`, as many as fit [`super::ANSWER_STEPS_BYTES`] of JSON
/// and at least one, read 16 at a time; and the `step_index` of the first
/// step left for the next answer, if any.
fn replay_page(
    store: &dyn cairn_store::LedgerStore,
    org: &str,
    session_id: &str,
    seqs: &[u64],
    level: Option<cairn_core::detail::DetailLevel>,
) -> Result<(Vec<crate::wire::StepOut>, Option<u64>), ApiError> {
    let mut steps = Vec::new();
    let mut bytes = 0usize;
    for chunk in seqs.chunks(16) {
        // Each step is read only once the one before was taken: a page
        // that fills stops reading.
        let mut stop = None;
        store.visit_steps_at(org, session_id, chunk, &mut |stored| match page_step(
            &mut steps, &mut bytes, stored, level,
        ) {
            Ok(None) => true,
            done => {
                stop = Some(done);
                false
            }
        })?;
        if let Some(done) = stop {
            return done.map(|next| (steps, next));
        }
    }
    Ok((steps, None))
}

/// Adds a stored step to a page of [`replay_page`] unless the page is
/// full: then the `step_index` the next page starts at.
fn page_step(
    steps: &mut Vec<crate::wire::StepOut>,
    bytes: &mut usize,
    mut stored: cairn_store::StoredStep,
    level: Option<cairn_core::detail::DetailLevel>,
) -> Result<Option<u64>, ApiError> {
    if let Some(level) = level {
        stored
            .record
            .redact(level)
            .map_err(|e| ApiError::bad_request("invalid_request", e.to_string()))?;
    }
    let out = crate::wire::step_out(stored.seq, &stored.record);
    let size = serde_json::to_vec(&out).map_or(0, |json| json.len());
    if !steps.is_empty() && bytes.saturating_add(size) > super::ANSWER_STEPS_BYTES {
        return Ok(Some(out.step_index));
    }
    // A step too large for a message of its own: said, with where
    // to read it and where the session goes on, rather than a
    // part the client would refuse.
    if steps.is_empty() && size > REPLAY_STEP_BYTES {
        return Err(ApiError::new(
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "answer_too_large",
            format!(
                "step {} alone holds {} KiB of JSON, more than one MCP message carries: replay at a lower level (level generic or detailed hides its payloads), or read it over REST (GET /v1/steps/{}) or with cairn replay; the session goes on at from_step {}",
                out.step_index,
                size / 1024,
                out.trace_id,
                out.step_index + 1
            ),
        )
        .with_field("from_step"));
    }
    *bytes = bytes.saturating_add(size);
    steps.push(out);
    Ok(None)
}
