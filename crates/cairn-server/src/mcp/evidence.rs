//! The org log's evidence as tools: `get_checkpoint`,
//! `get_inclusion_proof` and `export_session` (a bundle anyone can verify
//! offline). Apart from the service in `mod.rs` so that each group of
//! tools reads on its own.

use super::{
    CairnMcp, Checkpoint, ExportArgs, Exported, InclusionArgs, InclusionProof, NoArgs, Parameters,
    ToolResult, output_schema, run, tool_error,
};
use crate::ApiError;
use cairn_store::ops::ExportScope;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{tool, tool_router};

#[tool_router(router = evidence_router, vis = "pub(super)")]
impl CairnMcp {
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
        let result =
            crate::log_api::inclusion_proof_of(&self.state, caller.org(), args.seq, args.size)
                .await;
        run(result).await
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
            let level = crate::export_level(&caller, crate::level_value(args.level.as_deref())?);
            crate::allow_level(&caller, level, None)?;
            let options = cairn_store::ops::ExportOptions {
                level,
                since_size: None,
            };
            let permit = std::sync::Arc::new(
                crate::limits::expensive(&self.state, caller.org(), "the export").await?,
            );
            let plan = crate::plan_export(
                &self.state,
                &caller,
                ExportScope::Session(args.session_id.clone()),
                options,
                &permit,
            )
            .await?;
            self.store(move |store| {
                let _permit = permit;
                // One tool result is one JSON-RPC message, held whole: the
                // bundle is written up to the held-answer limit.
                let mut out = crate::held::AtMostBytes::new(crate::held::MAX_HELD_ANSWER_BYTES);
                let written = cairn_store::ops::write_export(store, &plan, &mut out, &mut |_| {});
                if out.overflowed() {
                    return Err(crate::held::too_large(
                        crate::held::MAX_HELD_ANSWER_BYTES,
                        "export it with GET /v1/export (streamed)",
                    ));
                }
                let summary = written.map_err(|e| {
                    ApiError::new(
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        "storage_failure",
                        e.to_string(),
                    )
                })?;
                let out = out.into_bytes();
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
