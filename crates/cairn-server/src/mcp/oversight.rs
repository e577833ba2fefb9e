//! Seed 003's oversight tools: `review_queue`, `review_step` (through
//! `crate::oversight`, as the REST API) and `erase_step`. Apart from the
//! service in `mod.rs` so that each seed's tools read as one group.

use super::{
    CairnMcp, EraseArgs, Erased, Parameters, QueueArgs, ReviewArgs, ToolResult, output_schema, run,
    tool_error,
};
use crate::unexpected;
use cairn_store::{Role, WriteRequest, Written};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{tool, tool_router};

#[tool_router(router = oversight_router, vis = "pub(super)")]
impl CairnMcp {
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
        let limit =
            match crate::input::result_limit(args.limit.map(Some), crate::input::REVIEWS_LIMIT) {
                Ok(limit) => limit,
                Err(e) => return tool_error(e),
            };
        // Read as REST reads it, then fitted to one message: each item's
        // step shortened past its share and its reviews the latest that
        // fit, so that no large step or note fails the tool or hides the
        // items after it.
        let read = crate::oversight::queue_of(&self.state, &caller, args.all, limit).await;
        let result = super::fitted(
            &self.state,
            caller.org(),
            read,
            |queue: &mut crate::oversight::ReviewQueue| {
                queue.truncated |= super::fit_listed(&mut queue.items, super::fit_queue_item);
            },
        )
        .await;
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
            let counted = self.counted(&context);
            crate::oversight::review_step(
                &self.state,
                &caller,
                args.trace_id,
                decision,
                args.note,
                &counted,
            )
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
            match self.write(&context, request).await? {
                Written::Erased { seqs, trace_seqs } => Ok(Erased {
                    trace_id: args.trace_id,
                    erased: true,
                    erasure_seq: seqs.first().copied(),
                    trace_erasure_seq: trace_seqs.first().copied(),
                }),
                other => Err(unexpected(other)),
            }
        }
        .await;
        run(result).await
    }
}
