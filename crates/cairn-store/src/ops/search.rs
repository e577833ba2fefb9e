//! Search, the operation every surface runs (the API, MCP, the CLI, the
//! web UI): full-text (the store's index), semantic (the embedded steps,
//! nearest first) or hybrid (both, fused by reciprocal rank), filtered,
//! each hit with a highlighted snippet.

use crate::fulltext::{FullTextQuery, display_text, snippet};
use crate::{LedgerStore, StepFilter, StoreError};
use cairn_core::commit::StepRecord;
use cairn_core::log::LogRecord;

/// How a search ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchMode {
    /// The full-text index only.
    FullText,
    /// The embedded steps only.
    Semantic,
    /// Both, fused by reciprocal rank.
    Hybrid,
}

impl SearchMode {
    /// Its name: `fulltext`, `semantic` or `hybrid`.
    pub fn as_str(self) -> &'static str {
        match self {
            SearchMode::FullText => "fulltext",
            SearchMode::Semantic => "semantic",
            SearchMode::Hybrid => "hybrid",
        }
    }

    /// The mode named `text` (`full-text` is accepted for `fulltext`).
    pub fn parse(text: &str) -> Option<SearchMode> {
        match text {
            "fulltext" | "full-text" => Some(SearchMode::FullText),
            "semantic" => Some(SearchMode::Semantic),
            "hybrid" => Some(SearchMode::Hybrid),
            _ => None,
        }
    }
}

/// A search.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// The text: the full-text query language, and what semantic search
    /// embeds.
    pub text: String,
    /// How to rank.
    pub mode: SearchMode,
    /// Which steps may be found.
    pub filter: StepFilter,
    /// Most hits.
    pub limit: usize,
}

/// What a search's hits may hold, each step counted as
/// [`cairn_core::record::Step::held_bytes`] counts it (held parsed): the bound of every
/// answer the server builds whole before it sends it (16 MiB), so that a
/// search of many large steps cannot hold hundreds of megabytes. The hits
/// stop before the one that would pass it (the first is kept whatever its
/// size) and the answer says it was cut ([`SearchAnswer::truncated`]).
pub const SEARCH_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// One hit.
#[derive(Debug, Clone)]
pub struct SearchHit {
    /// The step's position in the org log.
    pub seq: u64,
    /// The step.
    pub record: StepRecord,
    /// Its score: the engine's (full-text, semantic) or the fused
    /// reciprocal rank (hybrid); higher is better, comparable only within
    /// one answer.
    pub score: f64,
    /// Which rankings found it: `fulltext`, `semantic`.
    pub matched_by: Vec<&'static str>,
    /// A snippet of its text around the first match.
    pub snippet: String,
    /// The matches in the snippet: character ranges (start inclusive, end
    /// exclusive, in Unicode scalar values).
    pub highlights: Vec<(usize, usize)>,
}

/// Why a search was refused before it ran.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The query cannot be parsed (full-text and hybrid modes).
    #[error(transparent)]
    Query(#[from] crate::fulltext::QueryError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The embedder could not embed the query (semantic and hybrid modes).
    #[error("the embedder failed: {0}")]
    Embedder(#[from] crate::embed::EmbedError),
}

/// Reciprocal-rank fusion's constant (the usual 60).
const RRF_K: f64 = 60.0;
/// Semantic candidates read per hit wanted, before filters.
const SEMANTIC_OVERFETCH: usize = 10;
/// Characters of a hit's snippet.
const SNIPPET_CHARS: usize = 240;

/// The order of ranked candidates `(seq, found by, score)`: best score
/// first; at equal scores (in hybrid mode the first of each ranking
/// scores alike), a step both rankings found, then one full text found
/// (its words are in the step; a semantic neighbour's may not be), then
/// the older.
fn best_first(a: (u64, &[&str], f64), b: (u64, &[&str], f64)) -> std::cmp::Ordering {
    let text_first = |by: &[&str]| (by.len(), by.contains(&"fulltext"));
    b.2.total_cmp(&a.2)
        .then_with(|| text_first(b.1).cmp(&text_first(a.1)))
        .then(a.0.cmp(&b.0))
}

/// The step at `seq` of an org's log, if it is one.
pub fn step_at(
    store: &dyn LedgerStore,
    org: &str,
    seq: u64,
) -> Result<Option<StepRecord>, StoreError> {
    let mut found = None;
    store.read_log(org, seq, seq + 1, &mut |stored| {
        if let Ok(entry) = stored.entry
            && let LogRecord::Step(record) = entry.record
        {
            found = Some(record);
        }
        false
    })?;
    Ok(found)
}

/// A search's answer.
#[derive(Debug, Clone, Default)]
pub struct SearchAnswer {
    /// Hits, best first.
    pub hits: Vec<SearchHit>,
    /// Whether hits were left out because their steps would have passed
    /// [`SEARCH_ANSWER_BYTES`] (fewer than the limit were kept while
    /// more matched).
    pub truncated: bool,
    /// Set when hybrid mode ranked by full text alone because the embedder
    /// could not embed the query (why).
    pub semantic_unavailable: Option<String>,
}

/// Runs `request` over an org, best first; semantic ranking embeds the
/// text with `embedder` and compares it with the vectors it made. In
/// hybrid mode an embedder that fails leaves the full-text ranking alone
/// (and says so); in semantic mode it is an error.
pub fn search(
    store: &dyn LedgerStore,
    embedder: &dyn crate::embed::Embedder,
    org: &str,
    request: &SearchRequest,
) -> Result<SearchAnswer, SearchError> {
    // A full-text query is parsed whatever the mode: it also marks the
    // snippets. Semantic mode accepts any text, within the same length
    // (the whole text is sent to the embedder).
    if request.text.len() > crate::fulltext::MAX_QUERY_BYTES {
        return Err(crate::fulltext::QueryError::TooLong.into());
    }
    let fulltext = match (request.mode, FullTextQuery::parse(&request.text)) {
        (SearchMode::Semantic, parsed) => parsed.ok(),
        (_, parsed) => Some(parsed?),
    };
    let mode = request.mode;
    let wanted = request.limit;
    let pool = if mode == SearchMode::Hybrid {
        (wanted * 3).min(300)
    } else {
        wanted
    };
    let mut ranked: Vec<(u64, Vec<&'static str>, f64)> = Vec::new();
    let mut add = |seq: u64, by: &'static str, rank: usize, score: f64| {
        let value = if mode == SearchMode::Hybrid {
            1.0 / (RRF_K + rank as f64 + 1.0)
        } else {
            score
        };
        match ranked.iter_mut().find(|(s, _, _)| *s == seq) {
            Some(entry) => {
                entry.1.push(by);
                entry.2 += value;
            }
            None => ranked.push((seq, vec![by], value)),
        }
    };
    // What full text found, and the query's words (what a lexical
    // embedder's hit must share with the query to be one).
    let mut found_by_text = std::collections::HashSet::new();
    let query_words: std::collections::HashSet<String> =
        crate::embed::words(&request.text).collect();
    if mode != SearchMode::Semantic
        && let Some(query) = &fulltext
    {
        for (rank, (seq, score)) in store
            .full_text_search(org, query, &request.filter, pool)?
            .into_iter()
            .enumerate()
        {
            found_by_text.insert(seq);
            add(seq, "fulltext", rank, score);
        }
    }
    let mut semantic_unavailable = None;
    let vector = match mode {
        SearchMode::FullText => None,
        SearchMode::Semantic => Some(embedder.embed(&[request.text.as_str()])?),
        SearchMode::Hybrid => match embedder.embed(&[request.text.as_str()]) {
            Ok(vector) => Some(vector),
            Err(e) => {
                semantic_unavailable = Some(e.to_string());
                None
            }
        },
    };
    if let Some(mut vector) = vector {
        let vector = vector.pop().unwrap_or_default();
        let mut rank = 0;
        // Steps a lexical embedder found that share no word with the query.
        let mut passed_over = 0;
        for (seq, score) in
            store.semantic_search(org, embedder.id(), &vector, pool * SEMANTIC_OVERFETCH)?
        {
            if rank == pool {
                break;
            }
            // A similarity of 0 or less: the step has nothing in common
            // with the text (with the built-in word-hash embedder, no
            // word), and is no match.
            if score <= 0.0 {
                continue;
            }
            let Some(record) = step_at(store, org, seq)? else {
                continue;
            };
            // A lexical embedder's neighbours that share no word with the
            // query share only hash buckets or letter triples: in hybrid
            // mode such a step is no hit (it would rank beside real ones).
            if mode == SearchMode::Hybrid
                && embedder.lexical()
                && !found_by_text.contains(&seq)
                && !crate::embed::words(&display_text(&record.step))
                    .any(|word| query_words.contains(&word))
            {
                // Read no more such neighbours than the hits asked for:
                // past them, the rest share no word either, most likely.
                passed_over += 1;
                if passed_over >= pool {
                    break;
                }
                continue;
            }
            // The in-memory graph may still hold a vector erased since it
            // was built: the record is the authority.
            if record.erased || !request.filter.admits(&record.step) {
                continue;
            }
            // The record is read again if it is among the hits: holding
            // every candidate's would hold up to `pool` large steps.
            add(seq, "semantic", rank, f64::from(score));
            rank += 1;
        }
    }
    ranked.sort_by(|a, b| best_first((a.0, &a.1, a.2), (b.0, &b.1, b.2)));
    ranked.truncate(wanted);
    let mut hits = Vec::with_capacity(ranked.len());
    let mut held = 0usize;
    let mut truncated = false;
    for (seq, matched_by, score) in ranked {
        // Erased since it was ranked: no longer a hit.
        let Some(record) = step_at(store, org, seq)?.filter(|r| !r.erased) else {
            continue;
        };
        held = held.saturating_add(record.step.held_bytes());
        if held > SEARCH_ANSWER_BYTES && !hits.is_empty() {
            truncated = true;
            break;
        }
        let text = display_text(&record.step);
        let (snippet, highlights) = match &fulltext {
            Some(query) => snippet(&text, query, SNIPPET_CHARS),
            None => (text.chars().take(SNIPPET_CHARS).collect(), Vec::new()),
        };
        hits.push(SearchHit {
            seq,
            record,
            score,
            matched_by,
            snippet,
            highlights,
        });
    }
    Ok(SearchAnswer {
        hits,
        truncated,
        semantic_unavailable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first of each ranking fuse to the same score: the one full text
    /// found comes first (a lexical neighbour sharing one word of the
    /// query had come first, being older), and one both found before
    /// either.
    #[test]
    fn ties_go_to_what_both_rankings_then_full_text_found() {
        let tie = 1.0 / (RRF_K + 1.0);
        let mut ranked = [
            (3, vec!["semantic"], tie),
            (9, vec!["fulltext"], tie),
            (5, vec!["fulltext", "semantic"], tie),
            (1, vec!["semantic"], tie * 2.0),
            (7, vec!["fulltext"], tie),
        ];
        ranked.sort_by(|a, b| best_first((a.0, &a.1, a.2), (b.0, &b.1, b.2)));
        let order: Vec<u64> = ranked.iter().map(|r| r.0).collect();
        assert_eq!(order, vec![1, 5, 7, 9, 3]);
    }
}
