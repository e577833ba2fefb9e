//! Seed 001's decision-trail tools: `audit_session_start`,
//! `thought_record`, `audit_verify_chain`, `merkle_finalize`, `merkle_root`,
//! `audit_session_end` and `record_audit_event`, with the sealing they
//! share (`finalize`). Apart from the service in `mod.rs` so that each
//! seed's tools read as one group.

use super::{
    AuditEventArgs, CairnMcp, ChainChecked, Parameters, Seal, SessionArgs, SessionClosed,
    SessionStartArgs, SessionStarted, ThoughtArgs, ThoughtRecorded, ToolResult, output_schema, run,
    tool_error,
};
use crate::{ApiError, Caller, unexpected};
use cairn_core::record::Profile;
use cairn_store::ops::verify_session;
use cairn_store::{NewSession, NewStep, StoreError, WriteRequest, Written};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{tool, tool_router};
use std::sync::Arc;

#[tool_router(router = trail_router, vis = "pub(super)")]
impl CairnMcp {
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
                        ApiError::bad_request("invalid_argument", format!("predecessor: {e}"))
                            .with_field("predecessor")
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
                bound_agent: caller.key.agent_id.clone(),
                full_consent: args.full_consent,
            });
            match self.write(&context, request).await? {
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
        let record_type = match super::ThoughtType::read(&args.record_type) {
            Ok(record_type) => record_type,
            Err(e) => return tool_error(e),
        };
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
                kind_label: record_type.as_str().to_owned(),
                content: Some(args.content),
                task_id: args.task_id,
                links,
                caller: caller.key.id.clone(),
                ..NewStep::default()
            };
            let written = self
                .log_step(&caller, step, self.request_memory(&context).as_ref())
                .await?;
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
        let permit = match crate::limits::expensive(&self.state, &org, "verification").await {
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
                let steps = match store.session(&org, &args.session_id) {
                    Ok(info) => info.map_or(0, |info| info.step_count),
                    // An org name given twice: the verdict says so, and no
                    // step of either org's session is counted.
                    Err(StoreError::RepeatedOrgName(_)) => 0,
                    Err(e) => return Err(e.into()),
                };
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
        let result = self
            .finalize(&context, &caller, args.session_id, true)
            .await;
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
                Ok(Seal::at(info.seal_seq, &seal))
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
        let result = self
            .finalize(&context, &caller, args.session_id, false)
            .await;
        run(result.map(|seal| SessionClosed { seal, closed: true })).await
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
        let counted = self.counted(&context);
        let result = crate::oversight::audit_event(
            &self.state,
            &caller,
            args.event_id,
            args.session_id,
            args.action,
            args.detail,
            &counted,
        )
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
        context: &RequestContext<RoleServer>,
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
                    store
                        .session(&org, &id)?
                        .ok_or_else(|| ApiError::no_session(&id))
                })
                .await?;
            if let Some(seal) = &info.seal {
                return Ok(Seal::at(info.seal_seq, seal));
            }
        }
        // The store checks, atomically with the seal, that a proof-grade
        // (or strict) session ends with its closing reflection.
        let request = WriteRequest::Seal {
            org_id: caller.org().to_owned(),
            session_id,
            require_reflection: proof_grade,
        };
        match self.write(context, request).await? {
            Written::Sealed { seq, seal } => Ok(Seal::at(Some(seq), &seal)),
            other => Err(unexpected(other)),
        }
    }
}
