//! Search, one operation for every surface (`GET /v1/search`, the MCP
//! tool `search_reasoning`, the web UI's search page): full-text (the
//! store's index: words, phrases, prefixes, exclusions, with filters),
//! semantic (the embedded steps, nearest first) or hybrid (both, fused by
//! reciprocal rank), each result with a highlighted snippet.

use super::*;
use cairn_core::record::Status;
use cairn_store::StepFilter;
use cairn_store::fulltext::{FullTextQuery, snippet};

/// How a search ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SearchMode {
    /// The full-text index only.
    FullText,
    /// The embedded steps only.
    Semantic,
    /// Both, fused by reciprocal rank.
    Hybrid,
}

impl SearchMode {
    fn parse(text: &str) -> Result<SearchMode, ApiError> {
        match text {
            "fulltext" | "full-text" => Ok(SearchMode::FullText),
            "semantic" => Ok(SearchMode::Semantic),
            "hybrid" => Ok(SearchMode::Hybrid),
            other => Err(ApiError::bad_request(
                "invalid_request",
                format!(
                    "mode must be fulltext, semantic or hybrid, not {}",
                    shown(other)
                ),
            )
            .with_field("mode")),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            SearchMode::FullText => "fulltext",
            SearchMode::Semantic => "semantic",
            SearchMode::Hybrid => "hybrid",
        }
    }
}

/// A search, read alike from every surface.
#[derive(Debug, Clone)]
pub(crate) struct SearchInput {
    pub text: String,
    pub mode: SearchMode,
    pub filter: StepFilter,
    pub limit: usize,
}

/// The query parameters of `GET /v1/search` (the UI's form uses the same).
pub(crate) const SEARCH_PARAMS: &[&str] = &[
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
pub(crate) fn search_input(q: &HashMap<String, String>) -> Result<SearchInput, ApiError> {
    let text = q
        .get("q")
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request("invalid_request", "q (the search text) is required")
                .with_field("q")
        })?;
    let limit = match q.get("limit") {
        None => 10,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=100).contains(l))
            .ok_or_else(|| {
                ApiError::bad_request("invalid_request", "limit must be 1 to 100")
                    .with_field("limit")
            })?,
    };
    let mode = q
        .get("mode")
        .map(|m| SearchMode::parse(m))
        .transpose()?
        .unwrap_or(SearchMode::Hybrid);
    let kind = q
        .get("kind")
        .map(|label| {
            StepKind::parse(label).ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_request",
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
                "invalid_request",
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

/// Reciprocal-rank fusion's constant (the usual 60).
const RRF_K: f64 = 60.0;
/// Semantic candidates read per result wanted, before filters.
const SEMANTIC_OVERFETCH: usize = 10;
/// Characters of a result's snippet.
const SNIPPET_CHARS: usize = 240;

/// Runs a search for `caller`'s org: `{mode, embedder, results}`, each
/// result a step (as `GET /v1/steps/{id}` gives it) with `score`,
/// `matched_by`, `snippet` and `highlights` (character ranges of the
/// snippet, start inclusive, end exclusive, in Unicode scalar values).
pub(crate) async fn run_search(
    state: &Arc<AppState>,
    caller: &Caller,
    input: SearchInput,
) -> Result<Value, ApiError> {
    // A full-text query is parsed whatever the mode: it also marks the
    // snippets. Semantic mode accepts any text.
    let parsed = FullTextQuery::parse(&input.text);
    let fulltext = match (input.mode, parsed) {
        (SearchMode::Semantic, parsed) => parsed.ok(),
        (_, Ok(query)) => Some(query),
        (_, Err(e)) => {
            return Err(ApiError::bad_request("invalid_request", e.to_string()).with_field("q"));
        }
    };
    let org = caller.org().to_owned();
    // Semantic search scores every embedded step of the org.
    let permit = limits::expensive(state, "the search").await?;
    let mode = input.mode;
    blocking(state, move |store| {
        let _permit = permit;
        let wanted = input.limit;
        let pool = (wanted * 3).min(300);
        // Candidates by seq, with their rank in each list.
        let mut ranked: Vec<(u64, Vec<&'static str>, f64)> = Vec::new();
        let mut add = |seq: u64, by: &'static str, rank: usize, score: f64| {
            let fused = 1.0 / (RRF_K + rank as f64 + 1.0);
            match ranked.iter_mut().find(|(s, _, _)| *s == seq) {
                Some(entry) => {
                    entry.1.push(by);
                    entry.2 = if mode == SearchMode::Hybrid {
                        entry.2 + fused
                    } else {
                        score
                    };
                }
                None => ranked.push((
                    seq,
                    vec![by],
                    if mode == SearchMode::Hybrid {
                        fused
                    } else {
                        score
                    },
                )),
            }
        };
        if mode != SearchMode::Semantic
            && let Some(query) = &fulltext
        {
            let take = if mode == SearchMode::Hybrid {
                pool
            } else {
                wanted
            };
            for (rank, (seq, score)) in store
                .full_text_search(&org, query, &input.filter, take)?
                .into_iter()
                .enumerate()
            {
                add(seq, "fulltext", rank, score);
            }
        }
        let mut steps: HashMap<u64, cairn_core::commit::StepRecord> = HashMap::new();
        if mode != SearchMode::FullText {
            let vector = cairn_store::embed::embed(&input.text);
            let take = if mode == SearchMode::Hybrid {
                pool
            } else {
                wanted
            };
            let mut rank = 0;
            for (seq, score) in store.semantic_search(&org, &vector, take * SEMANTIC_OVERFETCH)? {
                if rank == take {
                    break;
                }
                let Some(record) = step_at(store, &org, seq)? else {
                    continue;
                };
                if !input.filter.admits(&record.step) {
                    continue;
                }
                add(seq, "semantic", rank, f64::from(score));
                steps.insert(seq, record);
                rank += 1;
            }
        }
        ranked.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        ranked.truncate(wanted);
        let mut results = Vec::with_capacity(ranked.len());
        for (seq, matched_by, score) in ranked {
            let record = match steps.remove(&seq) {
                Some(record) => record,
                None => match step_at(store, &org, seq)? {
                    Some(record) => record,
                    None => continue,
                },
            };
            let mut out = wire::step_to_json(seq, &record);
            let text = cairn_store::fulltext::display_text(&record.step);
            let (snip, highlights) = match &fulltext {
                Some(query) => snippet(&text, query, SNIPPET_CHARS),
                None => (text.chars().take(SNIPPET_CHARS).collect(), Vec::new()),
            };
            out["score"] = json!(score);
            out["matched_by"] = json!(matched_by);
            out["snippet"] = json!(snip);
            out["highlights"] = json!(highlights.iter().map(|(s, e)| [s, e]).collect::<Vec<_>>());
            results.push(out);
        }
        Ok(json!({
            "mode": mode.as_str(),
            "embedder": cairn_store::embed::EMBEDDER_NAME,
            "results": results,
        }))
    })
    .await
}

/// The step at `seq` of an org's log, if it is one.
fn step_at(
    store: &dyn LedgerStore,
    org: &str,
    seq: u64,
) -> Result<Option<cairn_core::commit::StepRecord>, ApiError> {
    let mut found = None;
    store.read_log(org, seq, seq + 1, &mut |stored| {
        if let Ok(entry) = stored.entry
            && let cairn_core::log::LogRecord::Step(record) = entry.record
        {
            found = Some(record);
        }
        false
    })?;
    Ok(found)
}

#[utoipa::path(
    get,
    path = "/v1/search",
    operation_id = "search",
    tag = "search",
    summary = "Search steps: full-text, semantic or hybrid",
    description = "mode=fulltext searches the full-text index of every step's content, inputs, outputs and metadata (words, \"phrases\", prefix*, -excluded; English stems; Chinese and Japanese by character pairs; docs/OPERATIONS.md, Search). mode=semantic ranks the embedded steps (seed 000's sampling: decision, action, error, correction and final answer always, others at CAIRN_EMBEDDING_SAMPLE_RATE) by cosine similarity to the text's embedding (embedder names the model). mode=hybrid (default) fuses both by reciprocal rank. Filters apply in every mode. Each result is the step with score, matched_by, snippet and highlights (character ranges of the snippet). Erased steps are never found.",
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
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json, ApiError> {
    input::refuse_unknown_params(q.keys(), SEARCH_PARAMS)?;
    let input = search_input(&q)?;
    Ok(axum::Json(run_search(&state, &caller, input).await?))
}
