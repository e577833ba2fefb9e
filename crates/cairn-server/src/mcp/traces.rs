//! Seed 004's tools: `list_traces`, `register_agent_key`, `import_trace`,
//! `get_signed_trace` and `query_sql` (analyst SQL), through
//! `crate::traces` as the REST API. Apart from the service in `mod.rs` so
//! that each seed's tools read as one group.

use super::{
    CairnMcp, History, HistoryArgs, ImportTraceArgs, KeyRegistered, Parameters, RegisterKeyArgs,
    SignedTraceArgs, SqlArgs, ToolResult, output_schema, run, tool_error,
};
use crate::unexpected;
use cairn_store::{WriteRequest, Written};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{tool, tool_router};
use serde_json::Value;

#[tool_router(router = traces_router, vis = "pub(super)")]
impl CairnMcp {
    #[tool(
        title = "List an agent's sessions (traces)",
        description = "List an agent's recent sessions, newest first: session_id, step_count, first_step_at, last_step_at, chain_valid, sealed, started_at and cursor (the same as get_session_history, with its filters and next_cursor).",
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
                by_admin: caller.key.role.can_admin(),
            };
            match self.write(&context, request).await? {
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
            self.request_memory(&context).as_ref(),
        )
        .await;
        run(result).await
    }

    #[tool(
        title = "Get an imported signed trace",
        description = "An imported agent-signed trace as it was imported, with its signature checked again against the registered key (signature_valid); the signature covers only the members named in signed_members (components, trace_level). A trace erased with one of its steps is an error with code erased: only its hash is kept.",
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
        let limit =
            match crate::input::result_limit(args.limit.map(Some), crate::input::SQL_ROWS_LIMIT) {
                Ok(limit) => limit,
                Err(e) => return tool_error(e),
            };
        let result = crate::traces::sql(&self.state, &caller, args.sql, limit).await;
        run(result).await
    }
}
