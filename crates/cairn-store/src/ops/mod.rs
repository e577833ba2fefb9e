//! Whole-store operations, over any [`LedgerStore`]: verify a store or a
//! session (`verify`), export bundles (`export`), import one (`import`),
//! read a bundle's lines with a bound on each (`bundle_lines`),
//! COSE receipts against a checkpoint (`receipts`), search (`search`), the
//! background embedder's rounds (`embedding`),
//! and the seeds' reads that combine several records (review queue, turn
//! numbering).
//!
//! These stream: memory stays constant in the number of records (plus one
//! chain state per open session).

use crate::LedgerStore;
use crate::StoreError;
use cairn_core::log::OpRecord;

mod bundle_lines;
mod embedding;
mod export;
mod import;
mod receipts;
mod search;
mod verify;

pub use bundle_lines::{
    BundleLineError, DEFAULT_MAX_BUNDLE_LINE_BYTES, checked_line_memory, line_memory,
    line_memory_limit, line_too_complex, line_too_long, read_bundle_line,
};
pub use embedding::{EmbedQueueError, EmbedRound, drain_queue, embed_queued};
pub use export::{
    ExportError, ExportOptions, ExportPlan, ExportScope, ExportSummary, ScopeSessions, export,
    export_at, first_without_consent, plan_export, plan_export_within, sessions_in_scope,
    write_export,
};
pub use import::{ImportOutcome, import_bundle};
pub use receipts::{ReceiptOpError, Receipts};
pub use search::{
    SEARCH_ANSWER_BYTES, SearchAnswer, SearchError, SearchHit, SearchMode, SearchRequest, search,
    step_at,
};
pub use verify::{
    OrgKeys, StoreVerdict, TreeRepair, WitnessReport, apply_witness_policy, check_trace_signature,
    repair_tree, repeated_org_name, repeated_org_name_verdict, trusted_checkpoint, verify_org,
    verify_session, verify_session_with,
};

/// A flagged step in seed 003's review queue, with the latest reviews
/// recorded for it (oldest first).
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewItem {
    /// The flagged step.
    pub step: crate::StoredStep,
    /// Its latest reviews (at most [`REVIEWS_LISTED`]), with their
    /// positions in the log, oldest first.
    pub reviews: Vec<(u64, cairn_core::log::ReviewRecord)>,
    /// How many reviews it has in all (more than `reviews` lists when it
    /// has more than [`REVIEWS_LISTED`]).
    pub review_count: usize,
}

impl ReviewItem {
    /// `pending` (no review yet), `escalated`, `approved` or `rejected`:
    /// the latest review decides.
    pub fn state(&self) -> &'static str {
        state_of(self.reviews.last().map(|(_, r)| r.decision))
    }

    /// Whether it still waits for a decision (pending or escalated).
    pub fn is_open(&self) -> bool {
        matches!(self.state(), "pending" | "escalated")
    }
}

/// The state a step's latest review decision gives it.
fn state_of(latest: Option<cairn_core::log::ReviewDecision>) -> &'static str {
    use cairn_core::log::ReviewDecision;
    match latest {
        None => "pending",
        Some(ReviewDecision::Escalate) => "escalated",
        Some(ReviewDecision::Approve) => "approved",
        Some(ReviewDecision::Reject) => "rejected",
    }
}

/// Reviews of one step a queue item lists at most: its latest (the last
/// of them decides its state). A step reviewed more often says how many
/// it has ([`ReviewItem::review_count`]); the log holds them all.
pub const REVIEWS_LISTED: usize = 100;

/// What the review queue may hold by default: the bound of every answer
/// the server builds whole (16 MiB), counted as its steps
/// ([`cairn_core::record::Step::held_bytes`]: held parsed) and reviews
/// ([`review_bytes`]) are read.
pub const REVIEW_QUEUE_BYTES: usize = 16 * 1024 * 1024;

/// Flagged steps' positions and trace ids read at once.
const FLAGGED_PAGE: usize = 1024;
/// Flagged steps the queue lists read at once, as many as it read in one
/// range before (each may take several megabytes once parsed).
const LISTED_READ: usize = 8;
/// Review records read at once (each note may be up to the content limit).
const REVIEW_PAGE: usize = 64;

/// One page of the review queue.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReviewQueuePage {
    /// Flagged steps, oldest first.
    pub items: Vec<ReviewItem>,
    /// Whether later items were left out because they would have passed
    /// the page's bound of bytes (fewer than the limit while more wait).
    pub truncated: bool,
}

/// What a review takes in the queue's answer: its note as a JSON string
/// (escaped: a control character takes six bytes) and, for the rest,
/// [`cairn_core::record::Step::ANSWER_STEP_BYTES`].
pub fn review_bytes(review: &cairn_core::log::ReviewRecord) -> usize {
    cairn_core::record::Step::ANSWER_STEP_BYTES
        + review.note.as_ref().map_or(0, cairn_core::json::json_len)
}

/// Calls `visit` with each review record of an org, in log order, a page
/// at a time.
fn visit_reviews(
    store: &dyn LedgerStore,
    org_id: &str,
    visit: &mut dyn FnMut(u64, cairn_core::log::ReviewRecord),
) -> Result<(), StoreError> {
    let mut from = 0;
    loop {
        let page = store.op_records(org_id, "review", from, REVIEW_PAGE)?;
        let Some(&(last, _)) = page.last() else {
            return Ok(());
        };
        for (seq, record) in page {
            if let OpRecord::Review(review) = record {
                visit(seq, review);
            }
        }
        from = last + 1;
    }
}

/// Gives `each` the steps of `session_id` at `positions` (any order), in
/// that order, with their index there, each parsed only once `each` has the
/// one before ([`crate::LedgerStore::visit_steps_at`]), until a position holds no
/// step of the session or `each` answers false. How many steps `each` was
/// given: fewer than `positions` with `each` never refusing means the step
/// at that index is missing, which a reader that streams a session treats
/// as its failure (a shorter answer must never pass for the whole).
pub fn visit_in_place(
    store: &dyn crate::LedgerStore,
    org_id: &str,
    session_id: &str,
    positions: &[u64],
    each: &mut dyn FnMut(usize, crate::StoredStep) -> bool,
) -> Result<usize, crate::StoreError> {
    let mut given = 0usize;
    store.visit_steps_at(org_id, session_id, positions, &mut |step| {
        if positions.get(given) != Some(&step.seq) {
            return false;
        }
        given += 1;
        each(given - 1, step)
    })?;
    Ok(given)
}

/// Seed 003's review queue: the org's flagged steps that still wait for a
/// decision (never reviewed, or escalated), oldest first, at most `limit`;
/// with `include_resolved`, approved and rejected ones too. The items stop
/// before the one whose step and reviews would take the page past
/// `max_bytes` (the first is kept whatever its size), and the page says it
/// was cut. What it holds while it reads is the page itself, a page of
/// records, and a decision and a count for each reviewed step.
pub fn review_queue(
    store: &dyn LedgerStore,
    org_id: &str,
    include_resolved: bool,
    limit: usize,
    max_bytes: usize,
) -> Result<ReviewQueuePage, StoreError> {
    // Each reviewed step's latest decision (its state) and how many
    // reviews it has, whatever their notes hold.
    let mut decided: std::collections::HashMap<String, (cairn_core::log::ReviewDecision, usize)> =
        std::collections::HashMap::new();
    visit_reviews(store, org_id, &mut |_, review| {
        let entry = decided
            .entry(review.trace_id)
            .or_insert((review.decision, 0));
        *entry = (review.decision, entry.1 + 1);
    })?;
    let mut page = ReviewQueuePage::default();
    let mut held = 0usize;
    let mut from = 0;
    // Which flagged steps to list is decided from their trace ids and the
    // reviews: only the steps listed are read (a resolved step's payload
    // is never read again, however many the org has flagged).
    'pages: while page.items.len() < limit {
        let flagged = store.flagged_trace_ids(org_id, from, FLAGGED_PAGE)?;
        let Some(&(last, _)) = flagged.last() else {
            break;
        };
        let listed: Vec<String> = flagged
            .into_iter()
            .map(|(_, trace_id)| trace_id)
            .filter(|trace_id| {
                include_resolved
                    || matches!(
                        state_of(decided.get(trace_id).map(|&(decision, _)| decision)),
                        "pending" | "escalated"
                    )
            })
            .take(limit - page.items.len())
            .collect();
        for ids in listed.chunks(LISTED_READ) {
            let mut steps = store.steps_by_trace(org_id, ids)?;
            steps.sort_by_key(|step| step.seq);
            for step in steps {
                let review_count = decided
                    .get(&step.record.step.trace_id)
                    .map_or(0, |&(_, count)| count);
                let bytes = step.record.step.held_bytes();
                if !page.items.is_empty() && held.saturating_add(bytes) > max_bytes {
                    page.truncated = true;
                    break 'pages;
                }
                held = held.saturating_add(bytes);
                page.items.push(ReviewItem {
                    step,
                    reviews: Vec::new(),
                    review_count,
                });
            }
        }
        from = last + 1;
    }
    if page.items.iter().all(|item| item.review_count == 0) {
        return Ok(page);
    }
    // The items' reviews, the latest of each; past the bound the last
    // items are left out (never the first).
    let position: std::collections::HashMap<String, usize> = page
        .items
        .iter()
        .enumerate()
        .map(|(i, item)| (item.step.record.step.trace_id.clone(), i))
        .collect();
    let items = &mut page.items;
    let mut truncated = false;
    // Counted again as they are listed: a review recorded between the two
    // reads is counted, and decides the state, as the list shows it.
    let mut counts = vec![0usize; items.len()];
    visit_reviews(store, org_id, &mut |seq, review| {
        let Some(&at) = position.get(&review.trace_id) else {
            return;
        };
        let Some(item) = items.get_mut(at) else {
            // Left out since.
            return;
        };
        counts[at] += 1;
        if item.reviews.len() == REVIEWS_LISTED {
            let (_, oldest) = item.reviews.remove(0);
            held = held.saturating_sub(review_bytes(&oldest));
        }
        held = held.saturating_add(review_bytes(&review));
        item.reviews.push((seq, review));
        while held > max_bytes && items.len() > 1 {
            if let Some(left_out) = items.pop() {
                let bytes = left_out.step.record.step.held_bytes()
                    + left_out
                        .reviews
                        .iter()
                        .map(|(_, r)| review_bytes(r))
                        .sum::<usize>();
                held = held.saturating_sub(bytes);
                truncated = true;
            }
        }
    })?;
    page.truncated |= truncated;
    for (item, count) in page.items.iter_mut().zip(counts) {
        item.review_count = count;
    }
    if !include_resolved {
        // Decided between the two reads.
        page.items.retain(ReviewItem::is_open);
    }
    Ok(page)
}

/// The most steps one write of several steps may hold: a batch of
/// `POST /v1/steps/batch`, one request of a turn (its thinking text's
/// phases and its explicit steps together; a turn may grow over several
/// requests), and a signed trace's components. Each step costs the server a few kilobytes
/// until it is written (its record, commitments and full-text document),
/// so a request of a few megabytes that split into hundreds of thousands
/// of steps would hold gigabytes.
pub const MAX_STEPS_PER_WRITE: usize = 10_000;

/// One request of a turn that would record more than
/// [`MAX_STEPS_PER_WRITE`] steps.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "one request records at most {MAX_STEPS_PER_WRITE} steps of a turn: its thinking text (one step per phase, a blank line ending each) and its {explicit} steps given as objects come to more; send them in several requests (with the same turn_id they stay one turn)"
)]
pub struct TurnTooLarge {
    /// The explicit steps.
    pub explicit: usize,
}

/// Seed 002: the steps that record one turn: the thinking text parsed into
/// phases first (`parseThinking`), then `explicit` steps, each given
/// `turn_id` unless it names one (a step naming another turn is refused by
/// [`crate::WriteRequest::Turn`], which numbers those without a
/// `turn_step` within the turn as they are sequenced).
/// `template` gives the org, session, agent, model and caller. Refused,
/// before any step is built, past [`MAX_STEPS_PER_WRITE`] steps.
pub fn turn_steps(
    template: &crate::NewStep,
    turn_id: &str,
    thinking: Option<&str>,
    explicit: Vec<crate::NewStep>,
) -> Result<Vec<crate::NewStep>, TurnTooLarge> {
    let too_large = TurnTooLarge {
        explicit: explicit.len(),
    };
    let room = MAX_STEPS_PER_WRITE
        .checked_sub(explicit.len())
        .ok_or(too_large.clone())?;
    let parsed = match thinking {
        Some(text) => {
            cairn_core::thinking::parse_thinking_at_most(text, room).map_err(|_| too_large)?
        }
        None => Vec::new(),
    };
    let parsed = parsed.into_iter().map(|p| crate::NewStep {
        kind_label: p.phase.to_owned(),
        content: Some(p.content),
        ..template.clone()
    });
    Ok(parsed
        .chain(explicit)
        .map(|step| crate::NewStep {
            turn_id: step.turn_id.or_else(|| Some(turn_id.to_owned())),
            ..step
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One request of a turn records up to [`MAX_STEPS_PER_WRITE`] steps,
    /// its thinking text's phases and its explicit steps counted together,
    /// and no more.
    #[test]
    fn a_turn_request_holds_up_to_the_limit_and_no_more() {
        let template = crate::NewStep::default();
        let half = MAX_STEPS_PER_WRITE / 2;
        let thinking = "a thought\n\n".repeat(half);
        let explicit = |n: usize| vec![crate::NewStep::default(); n];
        let steps = turn_steps(&template, "t", Some(&thinking), explicit(half)).unwrap();
        assert_eq!(steps.len(), MAX_STEPS_PER_WRITE);
        // Numbered when sequenced (`WriteRequest::Turn`).
        assert!(steps.iter().all(|s| s.turn_id.as_deref() == Some("t")));
        assert!(steps.iter().all(|s| s.turn_step.is_none()));
        assert_eq!(
            turn_steps(&template, "t", Some(&thinking), explicit(half + 1)),
            Err(TurnTooLarge { explicit: half + 1 })
        );
        let more = "a thought\n\n".repeat(half + 1);
        assert!(turn_steps(&template, "t", Some(&more), explicit(half)).is_err());
        assert!(turn_steps(&template, "t", None, explicit(MAX_STEPS_PER_WRITE + 1)).is_err());
    }
}
