//! Search, one operation for every surface (`GET /v1/search`, the MCP
//! tool `search_reasoning`, the web UI's search page): full-text (the
//! store's index: words, phrases, prefixes, exclusions, with filters),
//! semantic (the embedded steps, nearest first) or hybrid (both, fused by
//! reciprocal rank), each result with a highlighted snippet.

use super::*;
use crate::input::StrictQuery;
use cairn_core::record::Status;
use cairn_store::StepFilter;
use cairn_store::ops::{SearchError, SearchMode, SearchRequest};

/// A search, read alike from every surface.
pub type SearchInput = SearchRequest;

/// The mode named `text`, or a refusal naming the field.
pub(crate) fn search_mode(text: &str) -> Result<SearchMode, ApiError> {
    SearchMode::parse(text).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_argument",
            format!(
                "mode must be fulltext, semantic or hybrid, not {}",
                shown(text)
            ),
        )
        .with_field("mode")
    })
}

/// The query parameters of `GET /v1/search` (the UI's form uses the same).
pub const SEARCH_PARAMS: &[&str] = &[
    "q",
    "mode",
    "agent_id",
    "session_id",
    "kind",
    "status",
    "since",
    "until",
    "limit",
];

/// Reads [`SEARCH_PARAMS`]; a malformed value is refused with its field.
pub fn search_input(q: &HashMap<String, String>) -> Result<SearchInput, ApiError> {
    // Absent is a missing argument; given but blank, a value not accepted
    // (as an erasure's blank reason or a turn's blank thinking).
    let text = match q.get("q").map(|t| t.trim()) {
        None => {
            return Err(
                ApiError::bad_request("missing_field", "q (the search text) is required")
                    .with_field("q"),
            );
        }
        Some("") => {
            return Err(ApiError::bad_request(
                "invalid_argument",
                "q (the search text) is blank: give the words to search for",
            )
            .with_field("q"));
        }
        Some(text) => text.to_owned(),
    };
    let limit = crate::input::query_limit(q, crate::input::SEARCH_LIMIT)?;
    let mode = q
        .get("mode")
        .map(|m| search_mode(m))
        .transpose()?
        .unwrap_or(SearchMode::Hybrid);
    let kind = q
        .get("kind")
        .map(|label| {
            StepKind::parse(label).ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_argument",
                    format!("kind {} is not a step kind", shown(label)),
                )
                .with_field("kind")
            })
        })
        .transpose()?;
    let status = q
        .get("status")
        .map(|s| match s.as_str() {
            "ok" => Ok(Status::Ok),
            "flagged" => Ok(Status::Flagged),
            other => Err(ApiError::bad_request(
                "invalid_argument",
                format!("status must be ok or flagged, not {}", shown(other)),
            )
            .with_field("status")),
        })
        .transpose()?;
    let since = q
        .get("since")
        .map(|t| listing_time("since", t, false))
        .transpose()?;
    let until = q
        .get("until")
        .map(|t| listing_time("until", t, true))
        .transpose()?;
    Ok(SearchInput {
        text,
        mode,
        filter: StepFilter {
            agent_id: query_id(q, "agent_id")?,
            session_id: query_id(q, "session_id")?,
            kind,
            status,
            since,
            until,
        },
        limit,
    })
}

/// Runs a search for `caller`'s org (see [`wire::SearchResults`]), with
/// the expensive slot it ran in: the caller keeps it until the answer has
/// been sent (an answer built whole, up to 16 MiB of steps).
pub(crate) async fn run_search(
    state: &Arc<AppState>,
    caller: &Caller,
    input: SearchInput,
) -> Result<(wire::SearchResults, limits::ExpensiveSlot), ApiError> {
    let org = caller.org().to_owned();
    // Semantic search scores every embedded step of the org.
    let permit = limits::expensive(state, &org, "the search").await?;
    let mode = input.mode;
    let embedder = Arc::clone(&state.config.embedder);
    let description = embedder.description().to_owned();
    let (answer, permit) = blocking(state, move |store| {
        let answer =
            cairn_store::ops::search(store, embedder.as_ref(), &org, &input).map_err(|e| match e {
            SearchError::Query(e) => {
                ApiError::bad_request("invalid_argument", e.to_string()).with_field("q")
            }
            SearchError::Store(e) => e.into(),
            SearchError::Embedder(e) => {
                // The service's own words stay in the operator's log.
                tracing::warn!("embedding a search query failed: {e}");
                ApiError::new(
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the embedder could not embed the query; search with mode=fulltext (or hybrid, which then ranks by words alone) meanwhile",
                )
            }
        })?;
        Ok((answer, permit))
    })
    .await?;
    if let Some(why) = &answer.semantic_unavailable {
        tracing::warn!("embedding a search query failed, answered by full text alone: {why}");
    }
    Ok((wire::search_results(mode, &description, answer), permit))
}

#[utoipa::path(
    get,
    path = "/v1/search",
    operation_id = "search",
    tag = "search",
    summary = "Search steps: full-text, semantic or hybrid",
    description = "mode=fulltext searches the full-text index of every step's content, inputs, outputs and metadata (words, \"phrases\", prefix*, -excluded; English stems; Chinese and Japanese by character pairs; docs/OPERATIONS.md, Search). mode=semantic ranks the embedded steps (seed 000's sampling: decision, action, error, correction and final answer always, others at CAIRN_EMBEDDING_SAMPLE_RATE) by cosine similarity to the text's embedding (embedder names the model). mode=hybrid (default) fuses both by reciprocal rank. Filters apply in every mode. Each result is the step with score, matched_by, snippet and highlights (character ranges of the snippet). Erased steps are never found. The results' steps are at most 16 MiB together (each counted as its content, its input, output and metadata as JSON or as what they take parsed where that is more, and 256 bytes; the first result is always given): past it fewer results than limit are given and truncated is true.",
    params(
        ("q" = String, Query, description = "The search text", min_length = 1),
        ("mode" = Option<String>, Query, description = "fulltext, semantic or hybrid (default)"),
        ("agent_id" = Option<crate::api_doc::Id>, Query, description = "Only this agent's steps"),
        ("session_id" = Option<crate::api_doc::Id>, Query, description = "Only this session's steps"),
        ("kind" = Option<String>, Query, description = "Only steps of this kind (any label of it)"),
        ("status" = Option<String>, Query, description = "ok or flagged"),
        ("since" = Option<String>, Query, description = "Only steps created at or after: RFC 3339 or a date"),
        ("until" = Option<String>, Query, description = "Only steps created before: RFC 3339 or a date (the whole day included)"),
        ("limit" = Option<u64>, Query, description = "1 to 100, default 10", minimum = 1, maximum = 100),
    ),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn search(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    StrictQuery(q): StrictQuery,
) -> Result<axum::response::Response, ApiError> {
    input::refuse_unknown_params(q.keys(), SEARCH_PARAMS)?;
    let input = search_input(&q)?;
    let (answer, slot) = run_search(&state, &caller, input).await?;
    crate::held::json_holding(&state, caller.org(), answer, slot).await
}
