//! JSON on the edge: step input objects, replay output, verdicts. The core
//! types are not wire types; conversions happen here, by hand, with errors
//! that name the offending member.
//!
//! Member names follow seed 000 (`session_id`, `step_type`, `input_data`,
//! `output_data`, `trace_id`, `step_index`, `current_hash`, `prev_hash`,
//! `chain_valid`, ...) and seed 003 for verdicts (`verified`,
//! `totalChecked`, `lastValidSequence`, `brokenAtSequence`,
//! `brokenReason`, `durationMs`, `verifiedAt`).

use cairn_core::Timestamp;
use cairn_core::commit::StepRecord;
use cairn_core::verify::Verdict;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

mod input;
pub use input::*;

/// A recorded step as replay output, with seed 000's member names; an
/// optional member the step does not have is left out (as in the seed's
/// examples), not given as `null`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StepOut {
    /// The step's trace id.
    pub trace_id: String,
    /// Its position in the org log.
    pub seq: u64,
    /// The org.
    pub org_id: String,
    /// The agent that recorded it (or the hash of its name).
    pub agent_id: String,
    /// The session.
    pub session_id: String,
    /// Its index in the session, from 0.
    pub step_index: u64,
    /// The step type as recorded.
    pub step_type: String,
    /// The canonical kind the step type maps to.
    pub kind: String,
    /// The reasoning content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Input to the step (any JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub input_data: Option<Value>,
    /// Output of the step (any JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub output_data: Option<Value>,
    /// Self-reported confidence, 0.0 to 1.0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// How long the step took, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Tokens used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_count: Option<u64>,
    /// Model identifier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Additional context (any JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub metadata: Option<Value>,
    /// The turn it belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// Its number within the turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_step: Option<u64>,
    /// The task it belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Cross-references by name (tool_call, policy_decision,
    /// approval_request, audit_event, corrects, parent).
    pub links: std::collections::BTreeMap<String, String>,
    /// ok or flagged.
    pub status: String,
    /// When it was recorded (RFC 3339, UTC).
    pub created_at: String,
    /// The record's content digest (hex).
    pub digest: String,
    /// The chain hash of the step before (hex).
    pub prev_hash: String,
    /// The step's chain hash (hex).
    pub current_hash: String,
    /// The agent key that signed the step, if it was signed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature_key_id: Option<String>,
    /// Whether an embedding is stored with it.
    pub has_embedding: bool,
    /// Whether its payload was erased (only commitments remain).
    pub erased: bool,
    /// Fields given only as commitments at this detail level.
    pub hidden_fields: Vec<String>,
    /// True when this answer left out the step's input, output and
    /// metadata and cut its content to its first 4 KiB, because the step
    /// alone would not fit the answer (an MCP tool's answer is one message
    /// of about 1 MiB): read it whole with `GET /v1/steps/{trace_id}`.
    /// Absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub shortened: bool,
}

/// Content a shortened step keeps ([`StepOut::shorten`]).
const SHORTENED_CONTENT_BYTES: usize = 4096;

impl StepOut {
    /// Shortens the step: its input, output and metadata left out, its
    /// content cut to its first 4 KiB, and [`StepOut::shortened`] set.
    pub fn shorten(&mut self) {
        (self.input_data, self.output_data, self.metadata) = (None, None, None);
        if let Some(content) = &mut self.content
            && content.len() > SHORTENED_CONTENT_BYTES
        {
            let mut end = SHORTENED_CONTENT_BYTES;
            while !content.is_char_boundary(end) {
                end -= 1;
            }
            content.truncate(end);
        }
        self.shortened = true;
    }
}

/// The schema of a member that holds any JSON value, spelled so that every
/// client can read it (one `type` per `anyOf` branch, rather than a schema
/// with no keyword at all).
pub fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "anyOf": [
            {"type": "object"}, {"type": "array"}, {"type": "string"},
            {"type": "number"}, {"type": "boolean"}, {"type": "null"}
        ]
    })
}

/// Serialises one of the answer types below (they have string keys and no
/// fallible members, so this cannot fail).
pub fn to_json<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("an answer type serialises to JSON")
}

/// A recorded step as replay output (see [`StepOut`]).
pub fn step_out(seq: u64, record: &StepRecord) -> StepOut {
    let s = &record.step;
    let links = s
        .links
        .entries()
        .into_iter()
        .filter_map(|(name, value)| value.map(|v| (name.to_owned(), v.to_owned())))
        .collect();
    StepOut {
        trace_id: s.trace_id.clone(),
        seq,
        org_id: s.org_id.clone(),
        agent_id: s.agent_id.clone(),
        session_id: s.session_id.clone(),
        step_index: s.step_index,
        step_type: s.kind_label.clone(),
        kind: s.kind.as_str().to_owned(),
        content: s.content.clone(),
        input_data: s.input.clone().filter(|v| !v.is_null()),
        output_data: s.output.clone().filter(|v| !v.is_null()),
        confidence: s.confidence,
        duration_ms: s.duration_ms,
        token_count: s.token_count,
        model: s.model.clone(),
        metadata: s.metadata.clone().filter(|v| !v.is_null()),
        turn_id: s.turn_id.clone(),
        turn_step: s.turn_step,
        task_id: s.task_id.clone(),
        links,
        status: s.status.as_str().to_owned(),
        created_at: s.created_at.to_string(),
        digest: record.digest.to_hex(),
        prev_hash: record.prev_hash.to_hex(),
        current_hash: record.hash.to_hex(),
        signature_key_id: record.signature.as_ref().map(|sig| sig.key_id.clone()),
        has_embedding: record.has_embedding,
        erased: record.erased,
        hidden_fields: cairn_core::commit::FIELDS
            .into_iter()
            .filter(|f| !record.is_revealed(*f))
            .map(|f| f.name().to_owned())
            .collect(),
        shortened: false,
    }
}

/// A recorded step as replay output, as JSON (see [`StepOut`]).
pub fn step_to_json(seq: u64, record: &StepRecord) -> Value {
    to_json(&step_out(seq, record))
}

/// A verdict with seed 003's member names plus Cairn's location detail.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerdictOut {
    /// Whether everything checked verifies.
    pub verified: bool,
    /// The same as verified (seed 003's other spelling).
    pub ok: bool,
    /// Records checked.
    pub total_checked: u64,
    /// Position of the last record that verified (null if none).
    pub last_valid_sequence: Option<u64>,
    /// Position of the first broken record (null if none).
    pub broken_at_sequence: Option<u64>,
    /// Why it is broken (a stable reason code; null if intact).
    pub broken_reason: Option<String>,
    /// Where it is broken (null if intact).
    pub broken_at: Option<BrokenAt>,
    /// What is wrong, in words (null if intact).
    pub detail: Option<String>,
    /// How long the check took, in milliseconds.
    pub duration_ms: u64,
    /// When it was checked (RFC 3339, UTC).
    pub verified_at: String,
}

/// Where a verification failed: whatever of these is known.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BrokenAt {
    /// Position in the org log.
    pub seq: Option<u64>,
    /// The session.
    pub session_id: Option<String>,
    /// The step's index in its session.
    pub step_index: Option<u64>,
    /// The step's trace id.
    pub trace_id: Option<String>,
    /// The line of the bundle file (bundles only).
    pub line: Option<u64>,
}

/// A verdict (see [`VerdictOut`]).
pub fn verdict_out(verdict: &Verdict, duration_ms: u128, verified_at: Timestamp) -> VerdictOut {
    let failure = verdict.failure.as_ref();
    let position = |loc: &cairn_core::verify::Location| loc.seq.or(loc.step_index);
    VerdictOut {
        verified: verdict.verified,
        ok: verdict.verified,
        total_checked: verdict.records_checked,
        last_valid_sequence: verdict.last_valid.as_ref().and_then(position),
        broken_at_sequence: failure.and_then(|f| position(&f.at)),
        broken_reason: failure.map(|f| f.reason.as_str().to_owned()),
        broken_at: failure.map(|f| BrokenAt {
            seq: f.at.seq,
            session_id: f.at.session_id.clone(),
            step_index: f.at.step_index,
            trace_id: f.at.trace_id.clone(),
            line: f.at.line,
        }),
        detail: failure.map(|f| f.detail.clone()),
        duration_ms: u64::try_from(duration_ms).unwrap_or(u64::MAX),
        verified_at: verified_at.to_string(),
    }
}

/// What a witness policy found on a bundle's checkpoint
/// ([`cairn_core::bundle::BundleVerdict::cosigned_by`]), as every surface
/// answers it: `{"witnesses": [names], "quorum": k}`, or null without a
/// policy.
pub fn cosigned_by_to_json(cosigned_by: Option<&(Vec<String>, usize)>) -> Value {
    cosigned_by.map_or(
        Value::Null,
        |(by, quorum)| json!({"witnesses": by, "quorum": quorum}),
    )
}

/// A verdict with seed 003's member names plus Cairn's location detail,
/// as JSON (see [`VerdictOut`]).
pub fn verdict_to_json(verdict: &Verdict, duration_ms: u128, verified_at: Timestamp) -> Value {
    to_json(&verdict_out(verdict, duration_ms, verified_at))
}

/// A human review of a flagged step.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ReviewOut {
    /// The review's position in the org log.
    pub seq: u64,
    /// The reviewed step.
    pub trace_id: String,
    /// Its session.
    pub session_id: String,
    /// Its index in the session.
    pub step_index: u64,
    /// approve, reject or escalate.
    pub decision: String,
    /// The key that reviewed.
    pub reviewer: String,
    /// The reviewer's note (null if none).
    pub note: Option<String>,
    /// When (RFC 3339, UTC).
    pub reviewed_at: String,
}

/// A review record (see [`ReviewOut`]).
pub fn review_out(seq: u64, r: &cairn_core::log::ReviewRecord) -> ReviewOut {
    ReviewOut {
        seq,
        trace_id: r.trace_id.clone(),
        session_id: r.session_id.clone(),
        step_index: r.step_index,
        decision: r.decision.as_str().to_owned(),
        reviewer: r.reviewer.clone(),
        note: r.note.clone(),
        reviewed_at: r.reviewed_at.to_string(),
    }
}

/// A review record as JSON.
pub fn review_to_json(seq: u64, r: &cairn_core::log::ReviewRecord) -> Value {
    to_json(&review_out(seq, r))
}

/// A flagged step in the review queue, with its reviews so far.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ReviewItemOut {
    /// pending, approved, rejected or escalated.
    pub state: String,
    /// The flagged step.
    pub step: StepOut,
    /// Its latest reviews (at most 100; in an MCP answer, of the first
    /// item only as many as fit), oldest first.
    pub reviews: Vec<ReviewOut>,
    /// How many reviews it has in all (more than `reviews` lists when it
    /// was reviewed more than 100 times; the log holds them all).
    pub review_count: usize,
}

/// A queue item (see [`ReviewItemOut`]).
pub fn review_item_out(item: &cairn_store::ops::ReviewItem) -> ReviewItemOut {
    ReviewItemOut {
        state: item.state().to_owned(),
        step: step_out(item.step.seq, &item.step.record),
        reviews: item
            .reviews
            .iter()
            .map(|(seq, r)| review_out(*seq, r))
            .collect(),
        review_count: item.review_count,
    }
}

/// A queue item as JSON.
pub fn review_item_to_json(item: &cairn_store::ops::ReviewItem) -> Value {
    to_json(&review_item_out(item))
}

/// An audit event as JSON.
pub fn audit_event_to_json(seq: u64, e: &cairn_core::log::AuditEvent) -> Value {
    json!({
        "seq": seq, "event_id": e.event_id, "session_id": e.session_id, "action": e.action,
        "detail": e.detail, "at": e.at.to_string(),
    })
}

/// A step just written: its position and hashes.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StepWritten {
    /// The step's trace id.
    pub trace_id: String,
    /// Its index in the session.
    pub step_index: u64,
    /// Its chain hash (hex).
    pub current_hash: String,
    /// Its position in the org log.
    pub seq: u64,
    /// When it was recorded (RFC 3339, UTC).
    pub created_at: String,
    /// Whether this step created its session.
    pub session_created: bool,
}

/// One answer line of `cairn log --stdin`: the input line's number and
/// what its step became, written without building a JSON value first.
#[derive(Debug, Serialize)]
pub struct LineWritten<'a> {
    /// The input line's number, from 1.
    pub line: usize,
    /// The step written from it.
    #[serde(flatten)]
    pub step: &'a StepWritten,
}

/// A written step (see [`StepWritten`]); `None` for other writes.
pub fn step_written(w: &cairn_store::Written) -> Option<StepWritten> {
    match w {
        cairn_store::Written::Step {
            seq,
            trace_id,
            step_index,
            hash,
            created_at,
            session_created,
        } => Some(StepWritten {
            trace_id: trace_id.clone(),
            step_index: *step_index,
            current_hash: hash.to_hex(),
            seq: *seq,
            created_at: created_at.to_string(),
            session_created: *session_created,
        }),
        _ => None,
    }
}

/// What a write produced, as the answer to the request that made it: a
/// step's position and hashes, a session's genesis.
pub fn written_to_json(w: &cairn_store::Written) -> Value {
    use cairn_store::Written;
    if let Some(step) = step_written(w) {
        return to_json(&step);
    }
    match w {
        Written::Session { seq, genesis } => json!({"seq": seq, "genesis": genesis.to_hex()}),
        other => json!({"written": format!("{other:?}")}),
    }
}

/// A search's answer (`GET /v1/search`, MCP `search_reasoning`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SearchResults {
    /// The mode that ranked: `fulltext`, `semantic` or `hybrid`.
    pub mode: String,
    /// The embedder that ranked by meaning (semantic and hybrid modes).
    pub embedder: String,
    /// True when hybrid mode ranked by words alone because the embedder
    /// could not embed the query (the service is down); absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub semantic_unavailable: bool,
    /// Hits, best first.
    pub results: Vec<SearchHitOut>,
    /// True when fewer hits than the limit are given although more
    /// matched, because their steps would have made the answer too large
    /// (16 MiB of steps over HTTP; about 900 KiB of an MCP tool's
    /// message, where a step taking more than about 180 KiB of it is given
    /// shortened; the first hit is always given): ask again with a
    /// narrower query or filters, or read the steps one at a time.
    pub truncated: bool,
}

/// One hit of a search: the step, and how it was found.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SearchHitOut {
    /// The step, as `GET /v1/steps/{id}` gives it.
    #[serde(flatten)]
    pub step: StepOut,
    /// Higher is better, comparable only within one answer.
    pub score: f64,
    /// Which rankings found it: `fulltext`, `semantic`.
    pub matched_by: Vec<String>,
    /// Its text around the first match.
    pub snippet: String,
    /// The matches in the snippet: `[start, end)` character ranges
    /// (Unicode scalar values).
    pub highlights: Vec<[usize; 2]>,
}

/// The answer of a search from the store's hits.
pub fn search_results(
    mode: cairn_store::ops::SearchMode,
    embedder: &str,
    answer: cairn_store::ops::SearchAnswer,
) -> SearchResults {
    SearchResults {
        mode: mode.as_str().to_owned(),
        embedder: embedder.to_owned(),
        semantic_unavailable: answer.semantic_unavailable.is_some(),
        truncated: answer.truncated,
        results: answer
            .hits
            .into_iter()
            .map(|hit| SearchHitOut {
                step: step_out(hit.seq, &hit.record),
                score: hit.score,
                matched_by: hit.matched_by.iter().map(|m| (*m).to_owned()).collect(),
                snippet: hit.snippet,
                highlights: hit.highlights.iter().map(|(s, e)| [*s, *e]).collect(),
            })
            .collect(),
    }
}
