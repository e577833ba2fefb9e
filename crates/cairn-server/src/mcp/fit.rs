//! Listed answers (search hits, review-queue items) fitted into one MCP
//! message: each item made smaller where it is large, then as many items
//! as fit.

/// JSON one listed step (a search hit's, a queue item's) may take before it
/// is given shortened ([`cairn_wire::wire::StepOut::shorten_past`]), and
/// one queue item's reviews ([`keep_latest`]): a quarter of
/// [`super::ANSWER_STEPS_BYTES`], so that one large step leaves room for others.
pub(crate) const LISTED_STEP_BYTES: usize = super::ANSWER_STEPS_BYTES / 4;

/// The bytes of `value`'s JSON.
fn json_bytes<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    let mut count = cairn_core::json::ByteCount(0);
    // Writing into a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Fits a listed answer's items into one message: each item made smaller
/// by `shrink` (its step shortened past [`LISTED_STEP_BYTES`]), then the
/// items kept while their JSON comes to [`super::ANSWER_STEPS_BYTES`] (the first
/// whatever its size); true if items were left out.
pub(crate) fn fit_listed<T: serde::Serialize>(
    items: &mut Vec<T>,
    mut shrink: impl FnMut(&mut T),
) -> bool {
    let (mut total, mut keep) = (0usize, 0usize);
    for item in items.iter_mut() {
        shrink(item);
        let bytes = json_bytes(item);
        if keep > 0 && total.saturating_add(bytes) > super::ANSWER_STEPS_BYTES {
            break;
        }
        total = total.saturating_add(bytes);
        keep += 1;
    }
    let cut = keep < items.len();
    items.truncate(keep);
    cut
}

/// Keeps the latest of `reviews` (oldest first) whose JSON comes to
/// `limit` bytes, at least the latest one.
pub(crate) fn keep_latest(reviews: &mut Vec<cairn_wire::wire::ReviewOut>, limit: usize) {
    let mut total = 0usize;
    let mut keep = 0usize;
    for review in reviews.iter().rev() {
        let bytes = json_bytes(review);
        if keep > 0 && total.saturating_add(bytes) > limit {
            break;
        }
        total = total.saturating_add(bytes);
        keep += 1;
    }
    reviews.drain(..reviews.len() - keep);
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_wire::wire::ReviewOut;

    fn review(seq: u64, note: &str) -> ReviewOut {
        ReviewOut {
            seq,
            trace_id: "t".into(),
            session_id: "s".into(),
            step_index: 0,
            decision: "escalate".into(),
            reviewer: "k".into(),
            note: Some(note.into()),
            reviewed_at: "2026-12-06T00:00:00Z".into(),
        }
    }

    #[test]
    fn the_latest_reviews_that_fit_are_kept() {
        let mut reviews: Vec<ReviewOut> = (0..10).map(|i| review(i, &"n".repeat(1000))).collect();
        let one = json_bytes(&reviews[0]);
        keep_latest(&mut reviews, 3 * one + 2);
        assert_eq!(reviews.iter().map(|r| r.seq).collect::<Vec<_>>(), [7, 8, 9]);
        // The latest is kept whatever its size; escapes count.
        let mut big = vec![review(1, "a"), review(2, &"\u{1}".repeat(1000))];
        keep_latest(&mut big, 100);
        assert_eq!(big.len(), 1);
        assert_eq!(big[0].seq, 2);
        let mut none: Vec<ReviewOut> = Vec::new();
        keep_latest(&mut none, 0);
        assert!(none.is_empty());
    }

    #[test]
    fn listed_items_stop_where_the_message_is_full() {
        let item = "x".repeat(100 * 1024);
        let mut items = vec![item.clone(), item.clone(), item.clone(), item];
        let mut shrunk = 0;
        // Two of 100 KiB fit 256 KiB; each item is shrunk before it is
        // measured, and those after the cut are not looked at.
        assert!(fit_listed(&mut items, |_| shrunk += 1));
        assert_eq!((items.len(), shrunk), (2, 3));
        // The first is kept whatever its size.
        let mut alone = vec!["y".repeat(300 * 1024), "z".into()];
        assert!(fit_listed(&mut alone, |_| {}));
        assert_eq!(alone.len(), 1);
        let mut small = vec!["a".to_owned(); 5];
        assert!(!fit_listed(&mut small, |_| {}));
        assert_eq!(small.len(), 5);
    }
}
