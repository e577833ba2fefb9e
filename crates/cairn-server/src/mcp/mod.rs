//! The MCP server (official Rust SDK, `rmcp`): seed 000's
//! `log_reasoning_step`, `replay_decision`, `get_session_history`; seed
//! 001's `audit_session_start`, `thought_record`, `audit_verify_chain`,
//! `audit_session_end`, `merkle_finalize`, `merkle_root`, and
//! `record_audit_event`; seed 002's `parse_thinking`, `record_turn`,
//! `get_audit_trail`; seed 003's `review_queue`, `review_step`,
//! `erase_step`; and `get_trace`, `get_checkpoint`, `get_inclusion_proof`,
//! `export_session`.
//!
//! Over Streamable HTTP (`/mcp`) every call is authenticated by the same API
//! keys as the REST API (a middleware puts the [`Caller`] into the request's
//! extensions); over stdio (`cairn mcp`) the caller is the local operator of
//! one org. Both serve the stateless 2026-07-28 revision and the earlier
//! revisions with the initialize handshake (rmcp negotiates).
//!
//! Domain errors (unknown session, sealed session, invalid step) are tool
//! results with `isError: true` and a JSON body `{"error": {"code",
//! "message"}}` with the REST API's stable codes, so that a model can read
//! and correct them; so are unknown, missing and mistyped arguments
//! (`unknown_field` with the nearest known name, `missing_field`,
//! `invalid_argument`, each with its `field`), read by [`Parameters`].
//!
//! Every tool lists an `outputSchema` made from its result type (`results`
//! and the shared answer types of `wire`, `turns`, `oversight`, `traces`),
//! and answers with that type's JSON, so the schema and the answer cannot
//! differ; the schema also admits the error body, which is a tool error's
//! structured content. Input and output schemas are listed in a portable
//! spelling (no `type` arrays, no keyword-less schemas: see
//! [`results::portable`]).

use crate::{ApiError, AppState, Caller};
use cairn_core::record::Profile;
use cairn_store::ops::{ExportScope, verify_session};
use cairn_store::{ApiKey, LedgerStore, NewSession, NewStep, Role, WriteRequest, Written};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::CallToolResult;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use std::sync::Arc;

/// The MCP service over a server state.
#[derive(Clone)]
pub struct CairnMcp {
    state: Arc<AppState>,
    /// The caller for stdio, where there is no API key.
    local: Option<Caller>,
    /// The agent a tool acts for when its arguments name none and the key
    /// is bound to none (`cairn mcp --agent`, `CAIRN_AGENT`).
    default_agent: Option<String>,
    tool_router: ToolRouter<CairnMcp>,
}

type ToolResult = Result<CallToolResult, ErrorData>;

/// A structured answer: the result type's JSON as structured content (and,
/// as rmcp does, as text).
fn ok<T: serde::Serialize>(answer: &T) -> ToolResult {
    Ok(CallToolResult::structured(crate::wire::to_json(answer)))
}

fn tool_error(e: ApiError) -> ToolResult {
    Ok(CallToolResult::structured_error(e.body()))
}

mod args;
mod results;
pub use args::*;
pub use results::*;

/// The tools, each with its schemas in their portable spelling
/// ([`results::portable`]); an output schema is always an object.
fn router() -> ToolRouter<CairnMcp> {
    let mut router = CairnMcp::tool_router();
    for route in router.map.values_mut() {
        let tool = &mut route.attr;
        let mut input = tool.input_schema.as_ref().clone();
        results::portable(&mut input);
        tool.input_schema = Arc::new(input);
        if let Some(output) = &tool.output_schema {
            let mut output = output.as_ref().clone();
            results::portable(&mut output);
            output.entry("type").or_insert_with(|| json!("object"));
            tool.output_schema = Some(Arc::new(output));
        }
    }
    router
}

impl CairnMcp {
    /// The service for HTTP: callers come from each request's API key.
    pub fn http(state: Arc<AppState>) -> CairnMcp {
        CairnMcp {
            state,
            local: None,
            default_agent: None,
            tool_router: router(),
        }
    }

    /// The service for stdio: the local operator, as an admin of `org_id`,
    /// acting for `default_agent` where a tool's arguments name no agent.
    pub fn local(state: Arc<AppState>, org_id: &str, default_agent: Option<String>) -> CairnMcp {
        let key = ApiKey {
            id: "local-stdio".into(),
            org_id: org_id.to_owned(),
            role: Role::Admin,
            agent_id: None,
            token_hash: cairn_core::Hash::ZERO,
            label: "stdio".into(),
            created_at: cairn_store::now(),
            revoked_at: None,
        };
        CairnMcp {
            state,
            local: Some(Caller { key }),
            default_agent,
            tool_router: router(),
        }
    }

    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        if let Some(local) = &self.local {
            return Ok(local.clone());
        }
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned()
            .ok_or_else(|| ErrorData::invalid_request("an API key is required", None))
    }

    async fn store<T: Send + 'static>(
        &self,
        work: impl FnOnce(&dyn LedgerStore) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        crate::blocking(&self.state, work).await
    }

    async fn write(&self, request: WriteRequest) -> Result<Written, ApiError> {
        Caller::require_enabled(&self.state)?;
        Ok(self.state.ledger.submit(request).await?)
    }

    /// The agent a tool acts for: the one its arguments name, else the
    /// key's own agent, else the service's default agent. A key bound to
    /// an agent acts for no other.
    fn agent_for(&self, caller: &Caller, given: Option<String>) -> Result<String, ApiError> {
        match (given, &caller.key.agent_id) {
            (Some(a), Some(bound)) if a != *bound => Err(ApiError::forbidden(format!(
                "this key may only act as agent {bound}"
            ))),
            (Some(a), _) => Ok(a),
            (None, Some(bound)) => Ok(bound.clone()),
            (None, None) => self.default_agent.clone().ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_request",
                    if self.local.is_some() {
                        "agent_id is required: name the agent in the arguments, or start `cairn mcp --agent NAME` (or set CAIRN_AGENT) to give every tool a default agent"
                    } else {
                        "agent_id is required: name the agent in the arguments, or use an API key bound to the agent (`cairn admin create-key --agent NAME`)"
                    },
                )
            }),
        }
    }

    async fn log_step(&self, caller: &Caller, step: NewStep) -> Result<StepLogged, ApiError> {
        caller.require(caller.key.role.can_write(), "record steps")?;
        match self.write(WriteRequest::Step(Box::new(step))).await? {
            Written::Step {
                trace_id,
                step_index,
                hash,
                seq,
                ..
            } => Ok(StepLogged {
                trace_id,
                step_index,
                current_hash: hash.to_hex(),
                seq,
            }),
            other => Err(unexpected(other)),
        }
    }
}

use crate::unexpected;

async fn run<T: serde::Serialize>(result: Result<T, ApiError>) -> ToolResult {
    match result {
        Ok(answer) => ok(&answer),
        Err(e) => tool_error(e),
    }
}

#[tool_router]
impl CairnMcp {
    #[tool(
        title = "Record a reasoning step",
        description = "Record one step of your reasoning in the tamper-evident ledger (hash-chained per session; the session is created on first use). Call it for every observation, hypothesis, tool call, tool result, reasoning step, decision, action, error, correction, summary, plan step and final answer. Returns trace_id, step_index and current_hash.",
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
                        "invalid_request",
                        format!("status must be ok or flagged, not {other}"),
                    ));
                }
            };
            let mut links = cairn_core::record::Links::default();
            for (name, id) in args.links.unwrap_or_default() {
                links
                    .set(&name, id)
                    .map_err(|e| ApiError::bad_request("invalid_request", e))?;
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
                status,
                caller: caller.key.id.clone(),
                ..NewStep::default()
            };
            self.log_step(&caller, step).await
        }
        .await;
        run(result).await
    }

    #[tool(
        title = "Replay a reasoning session",
        description = "Replay a reasoning session to see how a decision was made: every step in order (step_index, step_type, content, input_data, output_data, confidence, created_at, hashes). With verify_chain=true, every hash is recomputed and chain_valid says whether the session is intact.",
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
        let level = match level_arg(args.level.as_deref()) {
            Ok(level) => level,
            Err(e) => return tool_error(e),
        };
        let permit = if args.verify_chain {
            match crate::limits::expensive(&self.state, "verification").await {
                Ok(permit) => Some(permit),
                Err(e) => return tool_error(e),
            }
        } else {
            None
        };
        let result = self
            .store(move |store| {
                let _permit = permit;
                let info = store.session(&org, &args.session_id)?.ok_or_else(|| {
                    ApiError::not_found(format!(
                        "session {}",
                        crate::error::shown(&args.session_id)
                    ))
                })?;
                crate::allow_level(
                    &caller,
                    level,
                    Some((&info.header.session_id, info.header.full_consent)),
                )?;
                let mut steps = Vec::new();
                let mut redacted = Ok(());
                store.read_session(&org, &args.session_id, &mut |mut s| {
                    if let Some(level) = level {
                        redacted = s.record.redact(level);
                    }
                    steps.push(crate::wire::step_out(s.seq, &s.record));
                    redacted.is_ok()
                })?;
                redacted.map_err(|e| ApiError::bad_request("invalid_request", e.to_string()))?;
                let mut out = Replay {
                    session_id: args.session_id.clone(),
                    agent_id: info.header.agent_id,
                    level: level.map(|l| l.as_str().to_owned()),
                    step_count: steps.len(),
                    sealed: info.seal.is_some(),
                    steps,
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
                Ok(out)
            })
            .await;
        run(result).await
    }

    #[tool(
        title = "List an agent's sessions",
        description = "List an agent's recent reasoning sessions, newest first: session_id, step_count, first_step_at, last_step_at and chain_valid for each. agent_id defaults to your own agent.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<History>()
    )]
    async fn get_session_history(
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
        let agent_id = match self.agent_for(&caller, args.agent_id) {
            Ok(agent) => agent,
            Err(e) => return tool_error(e),
        };
        let limit = args.limit.unwrap_or(20).clamp(1, 1000);
        let budget = self.state.config.limits.list_verify_steps;
        let result = self
            .store(move |store| {
                let mut rows = Vec::new();
                for (s, valid) in crate::listed_sessions(
                    store,
                    &org,
                    &cairn_store::SessionFilter::agent(Some(&agent_id)),
                    limit,
                    true,
                    budget,
                )? {
                    rows.push(SessionRow {
                        session_id: s.session_id,
                        step_count: s.step_count,
                        first_step_at: s.first_step_at.map(|t| t.to_string()),
                        last_step_at: s.last_step_at.map(|t| t.to_string()),
                        chain_valid: valid,
                    });
                }
                Ok(rows)
            })
            .await;
        match result {
            // Structured content must be an object, so the list is under
            // "sessions" there; the text content is seed 000's list itself,
            // which is what a client reading the text gets.
            Ok(rows) => {
                let text = crate::wire::to_json(&rows).to_string();
                let mut answer = ok(&History { sessions: rows })?;
                answer.content = vec![rmcp::model::ContentBlock::text(text)];
                Ok(answer)
            }
            Err(e) => tool_error(e),
        }
    }

    #[tool(
        title = "Open a decision-trail session",
        description = "Open an auditable decision-trail session before a task whose reasoning must be provable. Records the session's start in the org log, so no session starts silently. By default the session is strict: only plan, analysis, decision and reflection records (thought_record). Call it first.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<SessionStarted>()
    )]
    async fn audit_session_start(
        &self,
        Parameters(args): Parameters<SessionStartArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = async {
            caller.require(caller.key.role.can_write(), "start sessions")?;
            let agent_id = self.agent_for(&caller, args.agent_id)?;
            let agent_id = if args.hash_agent_id {
                cairn_core::record::hashed_agent_id(&agent_id)
            } else {
                agent_id
            };
            let predecessor = args
                .predecessor
                .map(|h| {
                    cairn_core::Hash::from_hex(&h).map_err(|e| {
                        ApiError::bad_request("invalid_request", format!("predecessor: {e}"))
                    })
                })
                .transpose()?;
            let request = WriteRequest::StartSession(NewSession {
                org_id: caller.org().to_owned(),
                session_id: args.session_id.clone(),
                agent_id,
                caller: caller.key.id.clone(),
                profile: if args.strict.unwrap_or(true) {
                    Profile::Strict
                } else {
                    Profile::Standard
                },
                predecessor,
                predecessor_session: args.predecessor_session,
                full_consent: args.full_consent,
            });
            match self.write(request).await? {
                Written::Session { seq, genesis } => Ok(SessionStarted {
                    session_id: args.session_id,
                    genesis_hash: genesis.to_hex(),
                    seq,
                }),
                other => Err(unexpected(other)),
            }
        }
        .await;
        run(result).await
    }

    #[tool(
        title = "Record a decision-trail entry",
        description = "Append an entry to a decision-trail session: type plan (start of a phase: the intended trajectory), analysis (what was learned), decision (the choice, the alternatives, the why) or reflection (at task close: what happened, what was proved, what remains uncertain). A correction is a new record that names the one it corrects; nothing is ever edited.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<ThoughtRecorded>()
    )]
    async fn thought_record(
        &self,
        Parameters(args): Parameters<ThoughtArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = async {
            let org = caller.org().to_owned();
            let session_id = args.session_id.clone();
            let agent_id = self
                .store(move |store| {
                    store
                        .session(&org, &session_id)?
                        .map(|i| i.header.agent_id)
                        .ok_or_else(|| {
                            ApiError::new(
                                axum::http::StatusCode::NOT_FOUND,
                                "not_found",
                                format!(
                                    "session {} was never started: open it with audit_session_start first",
                                    crate::error::shown(&session_id)
                                ),
                            )
                        })
                })
                .await?;
            let links = cairn_core::record::Links {
                corrects: args.corrects,
                audit_event: args.audit_event,
                ..Default::default()
            };
            let step = NewStep {
                org_id: caller.org().to_owned(),
                session_id: args.session_id.clone(),
                agent_id: self.agent_for(&caller, Some(agent_id))?,
                kind_label: args.record_type.as_str().to_owned(),
                content: Some(args.content),
                task_id: args.task_id,
                links,
                caller: caller.key.id.clone(),
                ..NewStep::default()
            };
            let written = self.log_step(&caller, step).await?;
            let org = caller.org().to_owned();
            let trace = written.trace_id;
            let record = self
                .store(move |store| {
                    store
                        .step_by_trace(&org, &trace)?
                        .ok_or_else(|| ApiError::not_found("the record just written"))
                })
                .await?;
            Ok(ThoughtRecorded {
                record_id: record.record.step.trace_id,
                step_index: record.record.step.step_index,
                content_hash: record.record.digest.to_hex(),
                chain_hash: record.record.hash.to_hex(),
                parent_chain_hash: record.record.prev_hash.to_hex(),
                seq: record.seq,
            })
        }
        .await;
        run(result).await
    }

    #[tool(
        title = "Check a session's integrity",
        description = "Check that a session is intact: walks its records in order, recomputes every content hash and chain hash, and stops at the first broken record. Returns valid, records_checked and, on failure, first_broken_index and reason. Run it before merkle_finalize.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<ChainChecked>()
    )]
    async fn audit_verify_chain(
        &self,
        Parameters(args): Parameters<SessionArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let org = caller.org().to_owned();
        let state = Arc::clone(&self.state);
        let permit = match crate::limits::expensive(&self.state, "verification").await {
            Ok(permit) => permit,
            Err(e) => return tool_error(e),
        };
        let result = self
            .store(move |store| {
                let _permit = permit;
                let verdict = verify_session(store, &org, &args.session_id)?.ok_or_else(|| {
                    ApiError::not_found(format!(
                        "session {}",
                        crate::error::shown(&args.session_id)
                    ))
                })?;
                state.metrics.verification(verdict.verified);
                // Records of the trail, as merkle_root's step_count counts
                // them: the steps checked (all of them, or those before the
                // first broken one); the log records checked (start and
                // seal included) are reported beside.
                let steps = store
                    .session(&org, &args.session_id)?
                    .map_or(0, |info| info.step_count);
                let steps_checked = match &verdict.failure {
                    None => steps,
                    Some(f) => f.at.step_index.unwrap_or(0).min(steps),
                };
                Ok(ChainChecked {
                    session_id: args.session_id,
                    valid: verdict.verified,
                    records_checked: steps_checked,
                    log_records_checked: verdict.records_checked,
                    first_broken_index: verdict.failure.as_ref().and_then(|f| f.at.step_index),
                    reason: verdict
                        .failure
                        .as_ref()
                        .map(|f| f.reason.as_str().to_owned()),
                    detail: verdict.failure.as_ref().map(|f| f.detail.clone()),
                })
            })
            .await;
        run(result).await
    }

    #[tool(
        title = "Seal a session",
        description = "Seal a finished session: signs the Merkle root over all its records, after which nothing can be appended. Write the closing reflection first: sealing a session whose last record is not a reflection is refused.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<Seal>()
    )]
    async fn merkle_finalize(
        &self,
        Parameters(args): Parameters<SessionArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = self.finalize(&caller, args.session_id, true).await;
        run(result).await
    }

    #[tool(
        title = "Get a sealed session's root",
        description = "The Merkle root of a sealed session, to keep as proof: merkle_root, step_count, final_hash and the server's signed seal note.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<Seal>()
    )]
    async fn merkle_root(
        &self,
        Parameters(args): Parameters<SessionArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let org = caller.org().to_owned();
        let result = self
            .store(move |store| {
                let info = store.session(&org, &args.session_id)?.ok_or_else(|| {
                    ApiError::not_found(format!(
                        "session {}",
                        crate::error::shown(&args.session_id)
                    ))
                })?;
                let seal = info.seal.ok_or_else(|| {
                    ApiError::new(
                        axum::http::StatusCode::CONFLICT,
                        "not_sealed",
                        "the session is not sealed: call merkle_finalize first",
                    )
                })?;
                Ok(Seal::from(&seal))
            })
            .await;
        run(result).await
    }

    #[tool(
        title = "Close a session",
        description = "Close a decision-trail session. If merkle_finalize was not called, the session is sealed now; its last record should be the closing reflection. Returns the session's final state.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<SessionClosed>()
    )]
    async fn audit_session_end(
        &self,
        Parameters(args): Parameters<SessionArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = self.finalize(&caller, args.session_id, false).await;
        run(result.map(|seal| SessionClosed { seal, closed: true })).await
    }

    #[tool(
        title = "Split thinking text into steps",
        description = "Split raw thinking text into structured steps without recording anything: bracket markers [思考] [計画] [承認待ち] [実行] [エラー] first, then numbered or bulleted lines after plan/steps/手順 as plan, lines with error/failed/エラー/失敗 as error, the rest as thinking. Use record_turn to record them.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<crate::turns::Parsed>()
    )]
    async fn parse_thinking(
        &self,
        Parameters(args): Parameters<ParseArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        self.caller(&context)?;
        ok(&crate::turns::parsed(&args.text))
    }

    #[tool(
        title = "Record a turn from thinking text",
        description = "Record one turn of a session from its raw thinking text: the text is split into phase steps (thinking, plan, waiting_approval, execute, error), each recorded with the turn id and its number within the turn. All steps are written or none. Returns turn_id and each step's trace_id and hashes.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<crate::turns::TurnRecorded>()
    )]
    async fn record_turn(
        &self,
        Parameters(args): Parameters<TurnArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = async {
            let template = NewStep {
                org_id: caller.org().to_owned(),
                session_id: args.session_id,
                agent_id: self.agent_for(&caller, args.agent_id)?,
                kind_label: "thinking".into(),
                model: args.model,
                caller: caller.key.id.clone(),
                ..NewStep::default()
            };
            let turn_id = args
                .turn_id
                .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
            crate::turns::record_turn(
                &self.state,
                &caller,
                &template,
                &turn_id,
                Some(&args.thinking),
                Vec::new(),
            )
            .await
        }
        .await;
        run(result).await
    }

    #[tool(
        title = "Get a session's audit trail",
        description = "A session's audit trail across all its turns, in order, or one turn with turn_id. format=markdown gives a readable export: '## Turn <id> (<time>)' then '[思考] ...', '[計画] ...', '[実行] ... (tool_call: ...)' lines.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<AuditTrail>()
    )]
    async fn get_audit_trail(
        &self,
        Parameters(args): Parameters<TrailArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = async {
            let markdown = crate::wants_markdown(args.format.as_deref())?;
            let out = match &args.turn_id {
                Some(turn) => {
                    crate::turns::turn_of(&self.state, &caller, &args.session_id, turn, markdown)
                        .await?
                        .map(AuditTrail::Turn)
                }
                None => crate::turns::trail_of(&self.state, &caller, &args.session_id, markdown)
                    .await?
                    .map(AuditTrail::Trail),
            };
            Ok(out.unwrap_or_else(|markdown| AuditTrail::Markdown { markdown }))
        }
        .await;
        run(result).await
    }

    #[tool(
        title = "Record an audit event",
        description = "Record an audit event: the lower-level record of one tool call that reasoning records can point to for provenance (thought_record audit_event, log_reasoning_step links.audit_event). Returns event_id and seq.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<crate::oversight::EventRecorded>()
    )]
    async fn record_audit_event(
        &self,
        Parameters(args): Parameters<AuditEventArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = crate::oversight::audit_event(
            &self.state,
            &caller,
            args.event_id,
            args.session_id,
            args.action,
            args.detail,
        )
        .await;
        run(result).await
    }

    #[tool(
        title = "List steps awaiting review",
        description = "The review queue: flagged steps waiting for a human decision (pending or escalated), oldest first, with their reviews so far; all=true includes approved and rejected ones.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<crate::oversight::ReviewQueue>()
    )]
    async fn review_queue(
        &self,
        Parameters(args): Parameters<QueueArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let limit = args.limit.unwrap_or(100).clamp(1, 10_000);
        let result = crate::oversight::queue_of(&self.state, &caller, args.all, limit).await;
        run(result).await
    }

    #[tool(
        title = "Review a flagged step",
        description = "Record a human review of a flagged step: decision approve, reject or escalate, with a note. The review is itself a record of the org log, linked by trace_id. Needs an auditor or admin key.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<crate::wire::ReviewOut>()
    )]
    async fn review_step(
        &self,
        Parameters(args): Parameters<ReviewArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = async {
            let decision = crate::oversight::decision(Some(&args.decision))?;
            crate::oversight::review_step(&self.state, &caller, args.trace_id, decision, args.note)
                .await
        }
        .await;
        run(result).await
    }

    #[tool(
        title = "Erase a step's payload",
        description = "Erase a step's payload (for example on a GDPR request): content, input_data, output_data and metadata are replaced by their commitments; every hash stays and everything still verifies; the erasure is itself a record. Irreversible. Needs an admin key.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<Erased>()
    )]
    async fn erase_step(
        &self,
        Parameters(args): Parameters<EraseArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = async {
            caller.require(caller.key.role == Role::Admin, "erase steps")?;
            crate::require_own_step(&self.state, &caller, &args.trace_id).await?;
            let request = WriteRequest::Erase {
                org_id: caller.org().to_owned(),
                trace_id: args.trace_id.clone(),
                reason: args.reason,
                actor: caller.key.id.clone(),
            };
            match self.write(request).await? {
                Written::Erased { seqs } => Ok(Erased {
                    trace_id: args.trace_id,
                    erased: true,
                    erasure_seq: seqs.first().copied(),
                }),
                other => Err(unexpected(other)),
            }
        }
        .await;
        run(result).await
    }

    #[tool(
        title = "List an agent's sessions (traces)",
        description = "List an agent's recent sessions, newest first: session_id, step_count, first_step_at, last_step_at, chain_valid.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<History>()
    )]
    async fn list_traces(
        &self,
        Parameters(args): Parameters<HistoryArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        self.get_session_history(Parameters(Ok(args)), context)
            .await
    }

    #[tool(
        title = "Register an agent's signing key",
        description = "Register an agent's Ed25519 public key; returns its key id (agent- + 12 hex digits). Steps and traces signed with it are verified when recorded and by every verifier.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<KeyRegistered>()
    )]
    async fn register_agent_key(
        &self,
        Parameters(args): Parameters<RegisterKeyArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = async {
            caller.require(caller.key.role.can_write(), "register agent keys")?;
            let public_key = crate::public_key_param(Some(&args.public_key))?;
            let request = WriteRequest::RegisterKey {
                org_id: caller.org().to_owned(),
                agent_id: self.agent_for(&caller, Some(args.agent_id))?,
                public_key,
            };
            match self.write(request).await? {
                Written::KeyRegistered { seq, key_id } => Ok(KeyRegistered { key_id, seq }),
                other => Err(unexpected(other)),
            }
        }
        .await;
        run(result).await
    }

    #[tool(
        title = "Import an agent-signed trace",
        description = "Import a complete trace the agent signed (trace_id, agent_id_hash, components, signature): the Ed25519 signature over its components and trace level is checked against the registered key of its agent_id_hash; the trace is kept whole (re-verifiable from any export) and each component becomes a step of a new session.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<crate::traces::TraceImported>()
    )]
    async fn import_trace(
        &self,
        Parameters(args): Parameters<ImportTraceArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = crate::traces::import(
            &self.state,
            &caller,
            Value::Object(args.trace),
            args.session_id,
        )
        .await;
        run(result).await
    }

    #[tool(
        title = "Get an imported signed trace",
        description = "An imported agent-signed trace exactly as it was signed, with its signature checked again against the registered key (signature_valid).",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<crate::traces::SignedTrace>()
    )]
    async fn get_signed_trace(
        &self,
        Parameters(args): Parameters<SignedTraceArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = crate::traces::fetch(&self.state, &caller, args.trace_id).await;
        run(result).await
    }

    #[tool(
        title = "Run a read-only SQL query",
        description = "Analyst SQL: one read-only query (SELECT, or WITH ... SELECT) over your org's views: steps (seq, trace_id, session_id, agent_id, step_index, step_type, kind, content, input_data, output_data, confidence, duration_ms, token_count, model, metadata, created_at, turn_id, turn_step, task_id, links, status, erased, current_hash, prev_hash), sessions (session_id, agent_id, profile, started_at, step_count, sealed) and records (seq, type, view). Anything that writes or reads other tables is refused.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<crate::traces::SqlResult>()
    )]
    async fn query_sql(
        &self,
        Parameters(args): Parameters<SqlArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let limit = args
            .limit
            .unwrap_or(cairn_store::analyst::MAX_ROWS)
            .clamp(1, cairn_store::analyst::MAX_ROWS);
        let result = crate::traces::sql(&self.state, &caller, args.sql, limit).await;
        run(result).await
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
        let org = caller.org().to_owned();
        let result = self
            .store(move |store| {
                let step = store.step_by_trace(&org, &args.trace_id)?.ok_or_else(|| {
                    ApiError::not_found(format!("step {}", crate::error::shown(&args.trace_id)))
                })?;
                Ok(crate::wire::step_out(step.seq, &step.record))
            })
            .await;
        run(result).await
    }

    #[tool(
        title = "Get the signed checkpoint",
        description = "The latest signed checkpoint of the org log (a C2SP signed note): size, root and the note. Keep it: it pins the log's history, and later exports must be consistent with it.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<Checkpoint>()
    )]
    async fn get_checkpoint(
        &self,
        Parameters(args): Parameters<NoArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        if let Err(e) = args {
            return tool_error(e);
        }
        let caller = self.caller(&context)?;
        let result = crate::current_checkpoint(&self.state, caller.org())
            .await
            .map(|cp| Checkpoint {
                size: cp.size,
                root: cp.root.to_hex(),
                note: cp.note,
            });
        run(result).await
    }

    #[tool(
        title = "Get an inclusion proof",
        description = "An RFC 9162 inclusion proof that the record at seq is in the org log of the given size (default: the latest checkpoint's).",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<InclusionProof>()
    )]
    async fn get_inclusion_proof(
        &self,
        Parameters(args): Parameters<InclusionArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = async {
            let cp = crate::current_checkpoint(&self.state, caller.org()).await?;
            let size = args.size.unwrap_or(cp.size);
            let org = caller.org().to_owned();
            let seq = args.seq;
            self.store(move |store| {
                if seq >= size || size > store.log_size(&org)? {
                    return Err(ApiError::not_found(format!(
                        "entry {seq} in a log of size {size}"
                    )));
                }
                let proof = store.inclusion_proof(&org, seq, size)?;
                let mut leaf = None;
                store.read_log(&org, seq, seq + 1, &mut |stored| {
                    leaf = Some(stored.leaf);
                    false
                })?;
                Ok(InclusionProof {
                    seq,
                    size,
                    leaf_hash: leaf.map(|l| l.to_hex()),
                    proof: proof.iter().map(cairn_core::Hash::to_hex).collect(),
                    root: store.root_at(&org, size)?.to_hex(),
                })
            })
            .await
        }
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
            Ok(input) => crate::run_search(&self.state, &caller, input).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(answer) => ok(&answer),
            Err(e) => tool_error(e),
        }
    }

    #[tool(
        title = "Export a session bundle",
        description = "Export one session as a self-contained bundle (JSON Lines: header, signed checkpoint, records with inclusion proofs) that anyone can verify offline with `cairn verify --bundle`.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<Exported>()
    )]
    async fn export_session(
        &self,
        Parameters(args): Parameters<ExportArgs>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let args = match args {
            Ok(args) => args,
            Err(e) => return tool_error(e),
        };
        let caller = self.caller(&context)?;
        let result = async {
            caller.require(caller.key.role.can_export(), "export bundles")?;
            let level = level_arg(args.level.as_deref())?;
            crate::allow_level(&caller, level, None)?;
            let options = cairn_store::ops::ExportOptions {
                level,
                since_size: None,
            };
            let permit = crate::limits::expensive(&self.state, "the export").await?;
            let plan = crate::plan_export(
                &self.state,
                &caller,
                ExportScope::Session(args.session_id.clone()),
                options,
            )
            .await?;
            self.store(move |store| {
                let _permit = permit;
                let mut out = Vec::new();
                let summary = cairn_store::ops::write_export(store, &plan, &mut out, &mut |_| {})
                    .map_err(|e| {
                    ApiError::new(
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        "storage_failure",
                        e.to_string(),
                    )
                })?;
                Ok(Exported {
                    session_id: args.session_id,
                    entries: summary.entries,
                    checkpoint_size: summary.checkpoint_size,
                    bundle: String::from_utf8_lossy(&out).into_owned(),
                })
            })
            .await
        }
        .await;
        run(result).await
    }
}

impl CairnMcp {
    /// Seals a session. `proof_grade` (merkle_finalize) requires the last
    /// record to be a reflection; closing an already sealed session
    /// (audit_session_end after merkle_finalize) returns the seal.
    async fn finalize(
        &self,
        caller: &Caller,
        session_id: String,
        proof_grade: bool,
    ) -> Result<Seal, ApiError> {
        caller.require(caller.key.role.can_write(), "seal sessions")?;
        crate::require_own_session(&self.state, caller, &session_id).await?;
        if !proof_grade {
            // Closing a session merkle_finalize already sealed returns its
            // seal.
            let org = caller.org().to_owned();
            let id = session_id.clone();
            let info = self
                .store(move |store| {
                    store.session(&org, &id)?.ok_or_else(|| {
                        ApiError::not_found(format!("session {}", crate::error::shown(&id)))
                    })
                })
                .await?;
            if let Some(seal) = &info.seal {
                return Ok(Seal::from(seal));
            }
        }
        // The store checks, atomically with the seal, that a proof-grade
        // (or strict) session ends with its closing reflection.
        let request = WriteRequest::Seal {
            org_id: caller.org().to_owned(),
            session_id,
            require_reflection: proof_grade,
        };
        match self.write(request).await? {
            Written::Sealed { seal, .. } => Ok(Seal::from(&seal)),
            other => Err(unexpected(other)),
        }
    }
}

#[tool_handler(
    router = self.tool_router,
    name = "cairn",
    instructions = "Cairn is a tamper-evident ledger of your reasoning. Record every step with log_reasoning_step (or, for a decision trail you must be able to prove: audit_session_start, thought_record for plan/analysis/decision, record_audit_event for tool calls they rest on, audit_verify_chain, a closing thought_record of type reflection, merkle_finalize, merkle_root, audit_session_end). Record a whole turn from your raw thinking with record_turn (parse_thinking shows the split first); read a session's turns with get_audit_trail. Flag a step (status flagged) to send it to human review (review_queue, review_step). Replay with replay_decision; list sessions with get_session_history. Records are never edited: correct a step by recording a new one that names it (corrects)."
)]
impl ServerHandler for CairnMcp {}
