//! Listed answers (search hits, review-queue items) fitted into one MCP
//! message: each item made smaller where it is large, then as many items
//! as fit. Sizes are what an item takes in the message
//! ([`message_bytes`]: its JSON as structured content, and that JSON
//! escaped again in the text block beside it), so that text of quotes,
//! backslashes or control characters is counted as sent.

/// What the listed items of one answer may take of its message together
/// (the first whatever its size): [`super::MAX_ANSWER_MESSAGE_BYTES`] less
/// 64 KiB for the answer's other members.
pub(crate) const LIST_MESSAGE_BYTES: usize = super::MAX_ANSWER_MESSAGE_BYTES - 64 * 1024;

/// What one listed step (a search hit's, a queue item's) may take of the
/// message before it is given shortened
/// ([`cairn_wire::wire::StepOut::shorten`]), and one queue item's reviews
/// ([`keep_latest`]): a fifth of [`LIST_MESSAGE_BYTES`], so that one large
/// step leaves room for others, and an item of both (its step shortened:
/// at most 4 KiB of content; its latest review, whose note may take 13
/// bytes a character) stays within the message.
pub(crate) const LISTED_STEP_BYTES: usize = LIST_MESSAGE_BYTES / 5;

/// What `value` takes in a tool's message: its JSON, and that JSON written
/// as a JSON string (the text block).
pub(crate) fn message_bytes<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    text_message_bytes(&serde_json::to_string(value).unwrap_or_default())
}

/// What JSON `text` takes in a tool's message: itself (the structured
/// content) and itself written as a JSON string (the text block).
pub(crate) fn text_message_bytes(text: &str) -> usize {
    text.len() + cairn_core::json::json_len(text)
}

/// `read` (an answer and the expensive slot it was read in) made to fit one
/// message by `fit`, on the CPU pool in `org`'s turn (the answer may hold
/// 16 MiB of steps) with the slot held until it is done.
pub(crate) async fn fitted<T: Send + 'static>(
    state: &crate::AppState,
    org: &str,
    read: Result<(T, crate::limits::ExpensiveSlot), crate::ApiError>,
    fit: impl FnOnce(&mut T) + Send + 'static,
) -> Result<T, crate::ApiError> {
    let (mut answer, slot) = read?;
    state
        .cpu
        .run(org, "fitting the answer", move || {
            let _slot = slot;
            fit(&mut answer);
            answer
        })
        .await
}

/// Fits a listed answer's items into one message: each item made smaller
/// by `shrink` (its step shortened past [`LISTED_STEP_BYTES`]), then the
/// items kept while they take [`LIST_MESSAGE_BYTES`] of the message (the
/// first whatever its size); true if items were left out.
pub(crate) fn fit_listed<T: serde::Serialize>(
    items: &mut Vec<T>,
    mut shrink: impl FnMut(&mut T),
) -> bool {
    let (mut total, mut keep) = (0usize, 0usize);
    for item in items.iter_mut() {
        shrink(item);
        let bytes = message_bytes(item);
        if keep > 0 && total.saturating_add(bytes) > LIST_MESSAGE_BYTES {
            break;
        }
        total = total.saturating_add(bytes);
        keep += 1;
    }
    let cut = keep < items.len();
    items.truncate(keep);
    cut
}

/// Shortens `step` if it takes more than [`LISTED_STEP_BYTES`] of the
/// message.
pub(crate) fn shorten_if_large(step: &mut cairn_wire::wire::StepOut) {
    if message_bytes(step) > LISTED_STEP_BYTES {
        step.shorten();
    }
}

/// Makes a review-queue item fit the message: its latest reviews within
/// [`LISTED_STEP_BYTES`] (at least its latest), its step shortened past
/// [`LISTED_STEP_BYTES`], and shortened too when the two together would
/// pass [`LIST_MESSAGE_BYTES`] (a step just under its share beside a
/// latest note of 64 KiB of control characters, 852 KB of the message,
/// had failed the tool and hidden the queue). A shortened step holds at
/// most 4 KiB of content, so such an item stays within the message.
pub(crate) fn fit_queue_item(item: &mut cairn_wire::wire::ReviewItemOut) {
    keep_latest(&mut item.reviews, LISTED_STEP_BYTES);
    shorten_if_large(&mut item.step);
    if !item.step.shortened && message_bytes(item) > LIST_MESSAGE_BYTES {
        item.step.shorten();
    }
}

/// Keeps the latest of `reviews` (oldest first) that take `limit` bytes of
/// the message, at least the latest one.
pub(crate) fn keep_latest(reviews: &mut Vec<cairn_wire::wire::ReviewOut>, limit: usize) {
    let mut total = 0usize;
    let mut keep = 0usize;
    for review in reviews.iter().rev() {
        let bytes = message_bytes(review);
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
        let one = message_bytes(&reviews[0]);
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
        // Each takes 400 KiB of the message (its text twice): two fit 896
        // KiB; each item is shrunk before it is measured, and those after
        // the cut are not looked at.
        let item = "x".repeat(200 * 1024);
        let mut items = vec![item.clone(), item.clone(), item.clone(), item];
        let mut shrunk = 0;
        assert!(fit_listed(&mut items, |_| shrunk += 1));
        assert_eq!((items.len(), shrunk), (2, 3));
        // Quotes take six bytes each of the message: 100 KiB of them is
        // 600 KiB, alone in its answer.
        let quotes = "\"".repeat(100 * 1024);
        assert_eq!(message_bytes(&quotes), 6 * 100 * 1024 + 8);
        let mut two = vec![quotes.clone(), quotes];
        assert!(fit_listed(&mut two, |_| {}));
        assert_eq!(two.len(), 1);
        // The first is kept whatever its size.
        let mut alone = vec!["y".repeat(600 * 1024), "z".into()];
        assert!(fit_listed(&mut alone, |_| {}));
        assert_eq!(alone.len(), 1);
        let mut small = vec!["a".to_owned(); 5];
        assert!(!fit_listed(&mut small, |_| {}));
        assert_eq!(small.len(), 5);
    }
}
