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
    BundleLineError, DEFAULT_MAX_BUNDLE_LINE_BYTES, line_too_long, read_bundle_line,
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
    SearchAnswer, SearchError, SearchHit, SearchMode, SearchRequest, search, step_at,
};
pub use verify::{
    StoreVerdict, TreeRepair, WitnessReport, agent_keys, apply_witness_policy, repair_tree,
    repeated_org_name, repeated_org_name_verdict, trusted_checkpoint, verify_org, verify_session,
};

/// A flagged step in seed 003's review queue, with the reviews recorded
/// for it so far (oldest first).
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewItem {
    /// The flagged step.
    pub step: crate::StoredStep,
    /// Its reviews, with their positions in the log.
    pub reviews: Vec<(u64, cairn_core::log::ReviewRecord)>,
}

impl ReviewItem {
    /// `pending` (no review yet), `escalated`, `approved` or `rejected`:
    /// the latest review decides.
    pub fn state(&self) -> &'static str {
        use cairn_core::log::ReviewDecision;
        match self.reviews.last().map(|(_, r)| r.decision) {
            None => "pending",
            Some(ReviewDecision::Escalate) => "escalated",
            Some(ReviewDecision::Approve) => "approved",
            Some(ReviewDecision::Reject) => "rejected",
        }
    }

    /// Whether it still waits for a decision (pending or escalated).
    pub fn is_open(&self) -> bool {
        matches!(self.state(), "pending" | "escalated")
    }
}

/// Seed 003's review queue: the org's flagged steps that still wait for a
/// decision (never reviewed, or escalated), oldest first, at most `limit`;
/// with `include_resolved`, approved and rejected ones too.
pub fn review_queue(
    store: &dyn LedgerStore,
    org_id: &str,
    include_resolved: bool,
    limit: usize,
) -> Result<Vec<ReviewItem>, StoreError> {
    let mut reviews: std::collections::HashMap<String, Vec<(u64, cairn_core::log::ReviewRecord)>> =
        std::collections::HashMap::new();
    let mut from = 0;
    loop {
        let page = store.op_records(org_id, "review", from, 1024)?;
        let Some(&(last, _)) = page.last() else { break };
        for (seq, record) in page {
            if let OpRecord::Review(review) = record {
                reviews
                    .entry(review.trace_id.clone())
                    .or_default()
                    .push((seq, review));
            }
        }
        from = last + 1;
    }
    let mut queue = Vec::new();
    let mut from = 0;
    while queue.len() < limit {
        let page = store.flagged_steps(org_id, from, 1024)?;
        let Some(last) = page.last().map(|s| s.seq) else {
            break;
        };
        for step in page {
            let item = ReviewItem {
                reviews: reviews
                    .remove(&step.record.step.trace_id)
                    .unwrap_or_default(),
                step,
            };
            if (include_resolved || item.is_open()) && queue.len() < limit {
                queue.push(item);
            }
        }
        from = last + 1;
    }
    Ok(queue)
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
