//! The UI's review queue (seed 003): the flagged steps of the org, and
//! a reviewer's decision on one, posted with the session's CSRF token.

use super::pages::Nav;
use super::timeline::step_href;
use super::*;

struct ReviewRow {
    trace_id: String,
    session_id: String,
    step_index: u64,
    /// Where the step is shown in its session's timeline.
    href: String,
    label: String,
    state: &'static str,
    content: Option<String>,
}

#[derive(Template)]
#[template(path = "ui/reviews.html")]
struct ReviewsPage {
    org: String,
    role: String,
    csrf: String,
    can_review: bool,
    message: Option<String>,
    items: Vec<ReviewRow>,
    /// Whether more flagged steps wait than the page shows.
    more: bool,
}

/// Flagged steps the page shows at most.
const SHOWN: usize = 200;

/// `GET /ui/reviews`: seed 003's review queue.
/// After a decision (`?recorded=SEQ&decision=D`, where a decision's form redirects,
/// so that reloading the page does not post it again) the page says where
/// it was recorded.
pub(super) async fn reviews(
    State(state): State<Arc<AppState>>,
    SignedIn(user): SignedIn,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let decision = q
        .get("decision")
        .and_then(|d| cairn_core::log::ReviewDecision::parse(d))
        .map_or("decision", |d| d.as_str());
    let message = q
        .get("recorded")
        .and_then(|seq| crate::decimal::<u64>(seq))
        .map(|seq| format!("{decision}: recorded at seq {seq}."));
    reviews_page(&state, &user, message).await
}

async fn reviews_page(state: &Arc<AppState>, user: &UiUser, message: Option<String>) -> Response {
    let org = user.caller.org().to_owned();
    // The queue reads the org's review records and pages of flagged steps:
    // a slot of the org's share, as the API's queue takes.
    let permit = match limits::expensive(state, &org, "review queue").await {
        Ok(permit) => permit,
        Err(e) => return error_page(user, e),
    };
    // One more than shown, to know whether more wait.
    let queue = match blocking(state, move |store| {
        let _permit = permit;
        Ok(cairn_store::ops::review_queue(
            store,
            &org,
            false,
            SHOWN + 1,
            cairn_store::ops::REVIEW_QUEUE_BYTES,
        )?)
    })
    .await
    {
        Ok(queue) => queue,
        Err(e) => return error_page(user, e),
    };
    let more = queue.truncated || queue.items.len() > SHOWN;
    // Each step's content as a preview, the page's text bounded as the
    // session page's is (the session page shows the step whole).
    let mut budget = super::text_budget::TextBudget::new();
    let nav = Nav::of(user);
    page(&ReviewsPage {
        org: nav.org,
        role: nav.role,
        csrf: nav.csrf,
        can_review: user.caller.key.role.can_review(),
        message,
        more,
        items: queue
            .items
            .iter()
            .take(SHOWN)
            .map(|item| {
                let step = &item.step.record.step;
                ReviewRow {
                    trace_id: step.trace_id.clone(),
                    session_id: step.session_id.clone(),
                    step_index: step.step_index,
                    href: step_href(&step.session_id, step.step_index),
                    label: label_shown(&step.kind_label),
                    state: item.state(),
                    content: step.content.as_deref().map(|c| budget.text(preview(c))),
                }
            })
            .collect(),
    })
}

/// The first 2,000 characters of a step's content, the review queue's
/// preview of it.
fn preview(content: &str) -> &str {
    match content.char_indices().nth(2000) {
        Some((end, _)) => &content[..end],
        None => content,
    }
}

#[derive(serde::Deserialize)]
pub(super) struct DecisionForm {
    csrf: String,
    decision: String,
    #[serde(default)]
    note: String,
}

/// `POST /ui/reviews/{trace_id}`: approve, reject or escalate a flagged
/// step, through the same operation as `POST /v1/steps/{id}/review`.
pub(super) async fn decide(
    State(state): State<Arc<AppState>>,
    _: SameOrigin,
    headers: HeaderMap,
    Path(trace_id): Path<String>,
    UiForm(form): UiForm<DecisionForm>,
) -> Response {
    let user = match user(&state, &headers).await {
        Ok(user) => user,
        Err(to) => return to,
    };
    if form.csrf != user.csrf {
        return ApiError::forbidden("the form's CSRF token is not this session's: reload the page")
            .into_response();
    }
    // The API's rule and answer.
    let decision = match crate::oversight::decision(Some(&form.decision)) {
        Ok(decision) => decision,
        Err(e) => return e.into_response(),
    };
    // Trimmed in its own buffer when nothing is trimmed: one copy, the
    // one counted below.
    let mut note = form.note;
    if note.trim().len() != note.len() {
        note = note.trim().to_owned();
    }
    let note = Some(note).filter(|n| !n.is_empty());
    // The note rides in the queued write: counted until it is written, as
    // the API's request body is.
    let counted = match crate::hold_memory(
        &state,
        user.caller.org(),
        note.as_ref().map_or(0, String::len),
    ) {
        Ok(held) => crate::limits::UntilWritten::new(None, Some(held)),
        Err(e) => return error_page(&user, e),
    };
    match crate::oversight::review_step(
        &state,
        &user.caller,
        trace_id.clone(),
        decision,
        note,
        &counted,
    )
    .await
    {
        // See Other: a reload or the back button then shows the queue
        // again instead of posting the decision a second time.
        Ok(out) => Redirect::to_owned(format!(
            "/ui/reviews?recorded={}&decision={}",
            out.seq,
            decision.as_str()
        )),
        Err(e) => error_page(&user, e),
    }
}
