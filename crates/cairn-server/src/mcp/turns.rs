//! Seed 002's tools over a session's turns: `parse_thinking`,
//! `record_turn`, `get_audit_trail`, each calling the function of
//! `crate::turns` the REST API calls. Apart from the service in `mod.rs`
//! so that each seed's tools read as one group.

use super::{
    AuditTrail, CairnMcp, Parameters, ParseArgs, ToolResult, TrailArgs, TurnArgs, output_schema,
    run, tool_error,
};
use cairn_store::NewStep;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{tool, tool_router};

#[tool_router(router = turns_router, vis = "pub(super)")]
impl CairnMcp {
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
        let caller = self.caller(&context)?;
        // Counted with the request's body, until its answer is sent (over
        // stdio, while the tool builds it).
        let memory = self.request_memory(&context);
        // As REST's `/v1/thinking/parse`: a long text on the CPU pool.
        let answered = crate::turns::parsed_answer_when_large(
            &self.state,
            caller.org(),
            args.text,
            memory,
            crate::wire::to_json,
        )
        .await;
        match answered {
            Ok((value, _held)) => super::structured(value),
            Err(e) => tool_error(e),
        }
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
            let turn_id = args.turn_id.unwrap_or_else(cairn_store::new_id);
            crate::turns::record_turn(
                &self.state,
                &caller,
                &template,
                &turn_id,
                Some(&args.thinking),
                None,
                self.request_memory(&context).as_ref(),
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
            // A Markdown step's count is no bound of its line (a step
            // counts 256 bytes besides its content), so only JSON stops
            // at what a message carries.
            let held = || {
                if markdown {
                    crate::held::HeldAnswer::new()
                } else {
                    super::held_json_answer()
                }
            };
            let (out, slot) = match &args.turn_id {
                Some(turn) => {
                    let held = crate::turns::turn_of(
                        &self.state,
                        &caller,
                        &args.session_id,
                        turn,
                        markdown,
                        held(),
                    )
                    .await?;
                    (held.answer.map(AuditTrail::Turn), held.slot)
                }
                None => {
                    let held = crate::turns::trail_of(
                        &self.state,
                        &caller,
                        &args.session_id,
                        markdown,
                        held(),
                    )
                    .await?;
                    (held.answer.map(AuditTrail::Trail), held.slot)
                }
            };
            Ok((
                out.unwrap_or_else(|markdown| AuditTrail::Markdown { markdown }),
                slot,
            ))
        }
        .await;
        // The slot is kept until the tool's result has been built.
        match result {
            Ok((answer, _slot)) => run(Ok(answer)).await,
            Err(e) => run::<AuditTrail>(Err(e)).await,
        }
    }
}
