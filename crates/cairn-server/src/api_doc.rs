//! The OpenAPI document, generated rather than written: every route is
//! registered through [`utoipa_axum`] together with the `#[utoipa::path]`
//! annotation on its handler, so a route cannot be served undocumented or
//! documented unserved; request bodies are described by the input types
//! below; the error codes come from [`crate::error::ERROR_CODES`], which
//! every [`ApiError`](crate::error::ApiError) is checked against.
//!
//! The handlers read bodies as JSON values (so that a duplicate member or a
//! 64-bit overflow is refused, and every refusal names its field), which is
//! why the types here describe rather than parse. That the two agree is
//! tested: every documented member and query parameter of every operation is
//! accepted as known, and an undocumented one is refused
//! (`tests/http.rs`), and Schemathesis checks real answers against the
//! document (`tests/python/test_schemathesis.py`).

use serde_json::Value;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, PartialSchema, ToSchema};

/// The document's fixed parts; the paths are added by the router.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Cairn",
        description = "Tamper-evident ledger of AI agents' reasoning. Every request is scoped to the org of its API key; another org's data answers exactly like data that does not exist (404). Errors are JSON: {\"error\": {\"code\", \"field\", \"message\"}} with a stable code, and the input field it concerns where there is one. An interactive reference is served at /docs.",
    ),
    servers((url = "http://127.0.0.1:8714")),
    security(("bearer" = [])),
    modifiers(&Components),
    components(schemas(
        ErrorBody, ErrorDetail, ErrorCode, Id, Hash, SessionInput, StepInput, TurnStepInput,
        StepLinks, StepSignature, ReplayFormat, Level
    )),
)]
pub struct ApiDoc;

/// The bearer scheme, the OpenAPI version and the server's version.
struct Components;

impl Modify for Components {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An API key: cairn_<id>_<secret>"))
                    .build(),
            ),
        );
        // OpenAPI 3.1: type arrays and `null` are JSON Schema 2020-12.
        openapi.openapi = utoipa::openapi::OpenApiVersion::Version31;
        openapi.info.version = env!("CARGO_PKG_VERSION").to_owned();
    }
}

/// The document as served: the fixed parts with every routed path.
pub fn document(paths: utoipa::openapi::OpenApi) -> String {
    let mut doc = ApiDoc::openapi();
    doc.merge(paths);
    let mut text = doc.to_pretty_json().unwrap_or_else(|e| {
        // Serializing values built in this crate cannot fail; if it ever
        // did, serve the reason rather than crash the server.
        format!("{{\"error\": \"the OpenAPI document could not be serialized: {e}\"}}")
    });
    text.push('\n');
    text
}

/// The error body of every surface.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct ErrorBody {
    error: ErrorDetail,
}

/// What went wrong.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct ErrorDetail {
    code: ErrorCode,
    /// What went wrong, for a person, and what to do about it.
    message: String,
    /// The input field the error concerns, where there is one: a member
    /// (`content`), a nested one (`links.corrects`), an item of a list
    /// (`steps[2].step_type`, `[3].content` in a batch), or a query
    /// parameter.
    #[schema(required = false, nullable = false)]
    field: Option<String>,
}

/// A stable error code (the list is `crate::error::ERROR_CODES`).
#[derive(serde::Deserialize)]
pub struct ErrorCode;

impl PartialSchema for ErrorCode {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::String))
            .enum_values(Some(crate::error::ERROR_CODES.iter().copied()))
            .description(Some(
                "Stable. unknown_field names a member or query parameter no one defined and \
                 suggests the nearest known name; missing_field and invalid_argument name \
                 their field. Refusals under load (429 rate_limited, too_many_sessions; 503 \
                 overloaded, timeout) and 503 unavailable (the store is busy for a while, \
                 e.g. the full-text index catching up after a start) carry Retry-After.",
            ))
            .into()
    }
}

impl ToSchema for ErrorCode {}

/// An identifier: 1 to 200 characters of A-Z a-z 0-9 - _ . : @ + = ~
#[derive(ToSchema, serde::Deserialize)]
#[schema(pattern = r"^[A-Za-z0-9._:@+=~-]{1,200}$")]
#[allow(dead_code)]
pub struct Id(String);

/// 32 bytes, lowercase hex.
#[derive(ToSchema, serde::Deserialize)]
#[schema(pattern = r"^[0-9a-f]{64}$")]
#[allow(dead_code)]
pub struct Hash(String);

/// Any JSON object.
#[derive(serde::Deserialize)]
pub struct JsonObject;

impl PartialSchema for JsonObject {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::Object))
            .into()
    }
}

impl ToSchema for JsonObject {}

/// A session profile.
#[derive(ToSchema, serde::Deserialize)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum Profile {
    /// Any seed's vocabulary.
    Standard,
    /// Seed 001's four types, a reflection before the seal.
    Strict,
}

/// How a replay, a turn or a trail is answered.
#[derive(ToSchema, serde::Deserialize)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum ReplayFormat {
    /// JSON (the default).
    Json,
    /// Seed 002's Markdown.
    Markdown,
}

/// Seed 004's detail levels.
#[derive(ToSchema, serde::Deserialize)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum Level {
    /// Kinds, numbers, timings, hashes.
    Generic,
    /// Plus identifiers, tool names, models, lists.
    Detailed,
    /// Plus content.
    Full,
}

/// A step's status.
#[derive(ToSchema, serde::Deserialize)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum StepStatus {
    /// Nothing to review.
    Ok,
    /// Flagged for review (seed 003).
    Flagged,
}

/// `POST /v1/sessions`.
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct SessionInput {
    session_id: Id,
    agent_id: Option<Id>,
    profile: Option<Profile>,
    /// The final hash of the sealed session this one continues.
    predecessor: Option<Hash>,
    /// Consent to export this session at the `full` detail level.
    full_consent: Option<bool>,
    /// The sealed session this one continues; its final hash enters the
    /// genesis. Each sealed session is continued at most once.
    predecessor_session: Option<Id>,
    /// Record the hash of agent_id instead of the name (seed 004).
    hash_agent_id: Option<bool>,
}

/// Links from a step to what it concerns; each names a step or an audit
/// event of the org.
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct StepLinks {
    tool_call: Option<String>,
    policy_decision: Option<String>,
    approval_request: Option<String>,
    audit_event: Option<String>,
    /// The step this one corrects.
    corrects: Option<String>,
    parent: Option<String>,
}

/// An agent's Ed25519 signature over the step (FORMAT.md 7.3).
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct StepSignature {
    /// The registered agent key.
    key_id: Option<String>,
    /// base64 of the 64-byte signature.
    signature: Option<String>,
}

/// A reasoning step (`POST /v1/steps`, `/v1/steps/batch`).
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct StepInput {
    session_id: Id,
    agent_id: Option<Id>,
    org_id: Option<Id>,
    /// Any seed's spelling: Observation, ToolCall, PlanStep, FinalAnswer,
    /// plan, analysis, decision, reflection, thinking, execute,
    /// waiting_approval, ...
    step_type: String,
    content: Option<String>,
    /// Any JSON value.
    #[serde(default)]
    input_data: Value,
    /// Any JSON value.
    #[serde(default)]
    output_data: Value,
    #[schema(minimum = 0, maximum = 1)]
    confidence: Option<f64>,
    /// At most 2^53 - 1, the largest integer every JSON reader holds exactly.
    #[schema(minimum = 0, maximum = 9007199254740991_u64)]
    duration_ms: Option<u64>,
    /// At most 2^53 - 1, the largest integer every JSON reader holds exactly.
    #[schema(minimum = 0, maximum = 9007199254740991_u64)]
    token_count: Option<u64>,
    model: Option<String>,
    /// Any JSON value.
    #[serde(default)]
    metadata: Value,
    turn_id: Option<Id>,
    /// The step's number within its turn: at most 2^53 - 1, the largest
    /// integer every JSON reader holds exactly. Only with `turn_id` (400
    /// `invalid_argument` without). A number names one step of the turn:
    /// one another step of the turn holds (stored, or earlier in the same
    /// request) is refused, 409 `turn_step_taken`.
    #[schema(minimum = 0, maximum = 9007199254740991_u64)]
    turn_step: Option<u64>,
    task_id: Option<Id>,
    links: Option<StepLinks>,
    status: Option<StepStatus>,
    trace_id: Option<Id>,
    step_index: Option<u64>,
    /// The writer's time, RFC 3339 (any offset, zero to nine fraction
    /// digits, no leap second `:60`: recorded as UTC microseconds,
    /// `2026-01-15T10:30:00.000000Z`); a signed step gives exactly that
    /// canonical form, which its agent hashed. Left out: the server's
    /// time.
    created_at: Option<String>,
    /// For signed steps: the 32-byte seed the agent drew for this step's
    /// salts, as 64 hex digits (docs/FORMAT.md 3.2 and 7.3). The server
    /// keeps it secret as it keeps its own seeds.
    seed: Option<String>,
    signature: Option<StepSignature>,
    /// Record the first 16 hex digits of SHA-256 of agent_id instead of the
    /// name (seed 004).
    hash_agent_id: Option<bool>,
}

/// A step of a turn: a step object whose `session_id`, if given, must be
/// the session of the path.
#[derive(serde::Deserialize)]
pub struct TurnStepInput;

impl PartialSchema for TurnStepInput {
    fn schema() -> RefOr<Schema> {
        match StepInput::schema() {
            RefOr::T(Schema::Object(mut object)) => {
                object.required.retain(|name| name != "session_id");
                object.description = Some(
                    "A step object; session_id, if given, must be the session of the path.".into(),
                );
                RefOr::T(Schema::Object(object))
            }
            other => other,
        }
    }
}

impl ToSchema for TurnStepInput {}

/// `POST /v1/sessions/{session_id}/turns`.
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct TurnInput {
    turn_id: Option<Id>,
    agent_id: Option<Id>,
    model: Option<String>,
    /// Raw thinking text, parsed into phases.
    thinking: Option<String>,
    #[schema(min_items = 1)]
    steps: Option<Vec<TurnStepInput>>,
}

/// Who may create keys.
#[derive(ToSchema, serde::Deserialize)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum Role {
    /// Records steps.
    Writer,
    /// Reads, verifies, runs analyst SQL.
    Reader,
    /// Reads everything, exports at every level.
    Auditor,
    /// Everything, including keys.
    Admin,
}

/// `POST /v1/keys`.
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct KeyInput {
    role: Role,
    /// Bind the key to this agent. A key bound to an agent may only create
    /// keys bound to the same agent (the default for it).
    agent_id: Option<Id>,
    label: Option<String>,
    /// When the key stops working (RFC 3339, in the future); never when
    /// absent.
    #[schema(format = DateTime)]
    expires_at: Option<String>,
}

/// `POST /v1/agent-keys`.
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct AgentKeyInput {
    /// The key's agent (default: the caller's bound agent).
    agent_id: Option<Id>,
    /// base64 of the 32-byte Ed25519 public key.
    public_key: String,
}

/// `POST /v1/agent-keys/{key_id}/rotate`.
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct AgentKeyRotateInput {
    /// The key's agent (default: the caller's bound agent).
    #[schema(required = false, nullable = false)]
    agent_id: Option<Id>,
    /// base64 of the new 32-byte Ed25519 public key.
    public_key: String,
}

/// `POST /v1/agent-keys/{key_id}/revoke`.
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct AgentKeyRevokeInput {
    /// The key's agent (default: the caller's bound agent).
    #[schema(required = false, nullable = false)]
    agent_id: Option<Id>,
    /// Why the key is revoked (recorded; default "revoked").
    reason: Option<String>,
}

/// `POST /v1/steps/{trace_id}/erase`.
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct EraseInput {
    /// Why the payload is erased (recorded in the org log).
    #[schema(pattern = r"\S")]
    reason: String,
}

/// A reviewer's decision.
#[derive(ToSchema, serde::Deserialize)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum Decision {
    /// The step stands.
    Approve,
    /// The step is rejected.
    Reject,
    /// Someone else must decide.
    Escalate,
}

/// `POST /v1/steps/{trace_id}/review`.
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct ReviewInput {
    decision: Decision,
    note: Option<String>,
}

/// `POST /v1/audit-events`.
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct AuditEventInput {
    event_id: Option<Id>,
    session_id: Option<Id>,
    #[schema(min_length = 1)]
    action: String,
    /// Any JSON value.
    #[serde(default)]
    detail: Value,
}

/// `POST /v1/thinking/parse`.
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct ThinkingInput {
    text: String,
}

/// `POST /v1/sql`.
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct SqlInput {
    /// One read-only SELECT over the analyst views (docs/OPERATIONS.md).
    #[schema(pattern = r"\S")]
    sql: String,
    #[schema(minimum = 1, maximum = 10000)]
    limit: Option<u64>,
}

/// A seed 004 complete trace, signed by the agent's registered key.
#[derive(serde::Deserialize)]
pub struct SignedTraceInput;

impl PartialSchema for SignedTraceInput {
    fn schema() -> RefOr<Schema> {
        let mut object = ObjectBuilder::new().schema_type(SchemaType::Type(Type::Object));
        for name in [
            "trace_id",
            "agent_id_hash",
            "started_at",
            "trace_level",
            "components",
            "signature",
            "signature_key_id",
        ] {
            object = object.required(name);
        }
        object
            .description(Some("Seed 004's CompleteTrace (docs/FORMAT.md)."))
            .into()
    }
}

impl ToSchema for SignedTraceInput {}

/// A batch of steps.
#[derive(serde::Deserialize)]
pub struct StepBatch;

impl PartialSchema for StepBatch {
    fn schema() -> RefOr<Schema> {
        ArrayBuilder::new()
            .items(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                "StepInput",
            )))
            .min_items(Some(1))
            .max_items(Some(10_000))
            .into()
    }
}

impl ToSchema for StepBatch {}

/// RFC 9728 protected-resource metadata.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct ProtectedResource {
    resource: String,
    /// Always empty: Cairn's keys are static bearer tokens, there is no
    /// OAuth flow to run.
    #[schema(max_items = 0)]
    authorization_servers: Vec<String>,
    #[schema(required = false, nullable = false)]
    bearer_methods_supported: Option<Vec<String>>,
    #[schema(required = false, nullable = false)]
    resource_name: Option<String>,
    #[schema(required = false, nullable = false)]
    resource_documentation: Option<String>,
}

/// An OTLP request body: binary protobuf.
#[derive(serde::Deserialize)]
pub struct Protobuf;

impl PartialSchema for Protobuf {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::String))
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::Binary,
            )))
            .into()
    }
}

impl ToSchema for Protobuf {}

/// A COSE object (a COSE receipt: a tagged COSE_Sign1), binary CBOR.
#[derive(serde::Deserialize)]
pub struct Cose;

impl PartialSchema for Cose {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::String))
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::Binary,
            )))
            .into()
    }
}

impl ToSchema for Cose {}

/// An OTLP Status message as JSON (google.rpc.Status, with Cairn's error).
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct OtlpStatus {
    #[schema(required = false, nullable = false)]
    code: Option<i64>,
    #[schema(required = false, nullable = false)]
    message: Option<String>,
    #[schema(required = false, nullable = false)]
    error: Option<JsonObject>,
}

/// A recorded step as read back (seed 000's member names). Optional members
/// the step does not have are left out, not given as `null`.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct Step {
    trace_id: String,
    /// Its position in the org log.
    seq: u64,
    org_id: String,
    agent_id: String,
    session_id: String,
    step_index: u64,
    /// The step type as the caller wrote it.
    step_type: String,
    /// The canonical kind.
    kind: String,
    #[schema(required = false, nullable = false)]
    content: Option<String>,
    /// Any JSON value.
    #[serde(default)]
    input_data: Value,
    /// Any JSON value.
    #[serde(default)]
    output_data: Value,
    #[schema(required = false, nullable = false)]
    confidence: Option<f64>,
    #[schema(required = false, nullable = false)]
    duration_ms: Option<u64>,
    #[schema(required = false, nullable = false)]
    token_count: Option<u64>,
    #[schema(required = false, nullable = false)]
    model: Option<String>,
    /// Any JSON value.
    #[serde(default)]
    metadata: Value,
    #[schema(required = false, nullable = false)]
    turn_id: Option<String>,
    #[schema(required = false, nullable = false)]
    turn_step: Option<u64>,
    #[schema(required = false, nullable = false)]
    task_id: Option<String>,
    /// The step's links (only those it has).
    links: std::collections::BTreeMap<String, String>,
    status: StepStatus,
    created_at: String,
    digest: Hash,
    prev_hash: Hash,
    current_hash: Hash,
    #[schema(required = false, nullable = false)]
    signature_key_id: Option<String>,
    has_embedding: bool,
    erased: bool,
    /// Fields replaced by their commitments (erased, or below the detail
    /// level asked for).
    hidden_fields: Vec<String>,
}

/// What recording a step produced.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct StepWritten {
    trace_id: String,
    step_index: u64,
    current_hash: Hash,
    seq: u64,
    created_at: String,
    /// This step opened its session.
    session_created: bool,
}

/// One result per step of a batch, in order: what was written, or the
/// ledger's refusal in the one error shape.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct BatchResult {
    /// Steps written (or already written: a retried step with its trace id).
    accepted: u64,
    /// Steps the ledger refused (each with its error in `results`): a
    /// batch answers 200 whatever this is.
    refused: u64,
    results: Vec<BatchItem>,
}

/// One step's result in a batch.
#[derive(ToSchema, serde::Deserialize)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum BatchItem {
    /// Written.
    Written(StepWritten),
    /// Refused.
    Refused(ErrorBody),
}

/// A listed session.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct SessionSummary {
    session_id: String,
    agent_id: String,
    step_count: u64,
    first_step_at: Option<String>,
    last_step_at: Option<String>,
    /// Null when the listing's verification budget was spent before this
    /// session, or with verify=false.
    chain_valid: Option<bool>,
    sealed: bool,
    /// When the session started (the listing's order).
    started_at: String,
    /// Continue a listing after this row (`cursor=`).
    cursor: String,
}

/// A verification verdict (seed 003's member names, with where it broke).
#[derive(ToSchema, serde::Deserialize)]
#[allow(non_snake_case, dead_code)]
pub struct Verdict {
    verified: bool,
    ok: bool,
    totalChecked: u64,
    lastValidSequence: Option<u64>,
    brokenAtSequence: Option<u64>,
    /// A stable reason code (docs/FORMAT.md).
    brokenReason: Option<String>,
    brokenAt: Option<BrokenAt>,
    detail: Option<String>,
    durationMs: u64,
    verifiedAt: String,
}

/// Where verification stopped.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct BrokenAt {
    seq: Option<u64>,
    session_id: Option<String>,
    step_index: Option<u64>,
    trace_id: Option<String>,
    line: Option<u64>,
}
