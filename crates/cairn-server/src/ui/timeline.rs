//! A session's timeline page, its Markdown view (seed 002), and the page
//! a link's id resolves to (a step anywhere in the org, or an audit
//! event).

use super::pages::{Nav, time_text};
use super::text_budget::{PAGE_TEXT_BYTES, TextBudget};
use super::*;
use cairn_core::kind::StepKind;
use cairn_core::log::OpRecord;
use cairn_store::StoredStep;

struct StepView {
    index: u64,
    seq: u64,
    kind: &'static str,
    label: String,
    created_at: String,
    model: Option<String>,
    tokens: Option<u64>,
    duration_ms: Option<u64>,
    confidence: Option<String>,
    erased: bool,
    failing: bool,
    content: Option<String>,
    preview: String,
    input: Option<String>,
    output: Option<String>,
    /// The step's metadata as JSON (bounded as the payloads are).
    metadata: Option<String>,
    /// For a step from an OpenTelemetry span: the span's name, times and
    /// ids (its `metadata.otel`), which the step's own time is not.
    span: Option<String>,
    hash: String,
    flagged: bool,
    turn: Option<String>,
    /// Links: what they are called, their value, and where they lead
    /// (a step of this session, an event of this session, or the record
    /// page that finds the id elsewhere).
    links: Vec<(&'static str, String, String)>,
    /// Later steps that correct this one.
    corrected_by: Vec<u64>,
    /// The steps that answer this tool call (its results, or the error
    /// it ended with), each with what it is.
    results: Vec<(u64, &'static str)>,
    /// Reviews of this step, in log order ("approve by key ...: note").
    reviews: Vec<String>,
}

/// An audit event of the session, shown below the timeline.
struct EventView {
    event_id: String,
    action: String,
    at: String,
    seq: u64,
    detail: Option<String>,
}

#[derive(Template)]
#[template(path = "ui/session.html")]
struct SessionPage {
    org: String,
    role: String,
    csrf: String,
    session_id: String,
    agent_id: String,
    started_at: String,
    sealed: bool,
    can_export: bool,
    verdict: String,
    verdict_class: &'static str,
    failure: Option<String>,
    checked: u64,
    sealed_at: Option<String>,
    final_hash: Option<String>,
    session_root: Option<String>,
    /// The closing reflection (seed 001): the last step, when it is one
    /// (shown on the page holding the session's last step).
    reflection: Option<u64>,
    /// The shown steps' page when it does not show the whole session:
    /// the first and last index shown, and where the pages before and
    /// after it start.
    pages: Option<Pager>,
    /// Where the first failing record is shown, when it is a step.
    failing_href: Option<String>,
    /// The session's steps, shown or not.
    step_count: u64,
    /// Audit events left out (more than a page shows).
    more_events: bool,
    /// Records past the first [`MAX_RECORDS_READ`] not read at all.
    more_records: bool,
    steps: Vec<StepView>,
    events: Vec<EventView>,
    /// Erasures: step, fields, reason, when.
    erasures: Vec<String>,
}

/// Steps shown on one page: a longer session is shown a page at a time
/// (`?from=N`, pages starting at multiples of this).
const MAX_STEPS_SHOWN: usize = 2_000;

/// Steps read from the store at once while a page is built (each is
/// written as bounded text before the next are read; a parsed payload can
/// take many times its size in memory).
const STEPS_READ_AT_ONCE: usize = 4;

/// A page of a session's steps: those whose index is in
/// `start..start + MAX_STEPS_SHOWN`.
struct StepsPage {
    /// The first index the page covers (a multiple of [`MAX_STEPS_SHOWN`]).
    start: u64,
    steps: Vec<ShownStep>,
    /// Whether the page holds the session's last step.
    to_end: bool,
}

/// Reads the page of session `id`'s steps that covers index `from`
/// (rounded down to a page's start; past the last step, the last page).
/// Pages are cut by step index, so that a link to step N always finds it
/// on page N / [`MAX_STEPS_SHOWN`]; the steps are found by their log
/// positions (`session_seqs`), where a step's index is its position in a
/// session nobody edited, and otherwise found by a binary search over the
/// positions (indices rise along the walk).
fn steps_page(
    store: &dyn cairn_store::LedgerStore,
    org: &str,
    id: &str,
    from: u64,
    budget: &mut TextBudget,
) -> Result<StepsPage, ApiError> {
    let seqs = store
        .session_seqs(org, id)?
        .ok_or_else(|| ApiError::no_session(id))?;
    let index_at = |position: usize| -> Result<Option<u64>, ApiError> {
        Ok(store
            .steps_at(org, id, &seqs[position..=position])?
            .first()
            .map(|s| s.record.step.step_index))
    };
    // The first position whose step's index is at least `index`.
    let position_of = |index: u64| -> Result<usize, ApiError> {
        let at = usize::try_from(index).unwrap_or(usize::MAX);
        if at < seqs.len()
            && index_at(at)? == Some(index)
            && (at == 0 || index_at(at - 1)? == Some(index - 1))
        {
            return Ok(at);
        }
        let (mut low, mut high) = (0, seqs.len());
        while low < high {
            let middle = low + (high - low) / 2;
            match index_at(middle)? {
                Some(i) if i < index => low = middle + 1,
                _ => high = middle,
            }
        }
        Ok(low)
    };
    let page = MAX_STEPS_SHOWN as u64;
    let last_index = match seqs.len() {
        0 => 0,
        n => index_at(n - 1)?.unwrap_or(0),
    };
    let start = from.min(last_index) / page * page;
    let first = position_of(start)?;
    let end = position_of(start.saturating_add(page))?
        .clamp(first, first.saturating_add(MAX_STEPS_SHOWN).min(seqs.len()));
    let mut steps = Vec::with_capacity(end - first);
    for chunk in seqs[first..end].chunks(STEPS_READ_AT_ONCE) {
        // Each step is cut to what the page shows before the next is
        // parsed.
        store.visit_steps_at(org, id, chunk, &mut |stored| {
            steps.push(ShownStep::of(stored, budget));
            true
        })?;
    }
    Ok(StepsPage {
        start,
        steps,
        to_end: end >= seqs.len(),
    })
}

/// Where a page of a long session's steps stands among its pages.
struct Pager {
    /// The first and last step index shown.
    first: u64,
    last: u64,
    /// Where the page before starts, if there is one.
    earlier: Option<u64>,
    /// Where the page after starts, if there is one.
    later: Option<u64>,
}

/// The link to step `index` of session `session_id` in the web UI: the
/// page of the session's timeline that shows it, at its anchor.
pub(crate) fn step_href(session_id: &str, index: u64) -> String {
    let start = index - index % MAX_STEPS_SHOWN as u64;
    let page = match start {
        0 => String::new(),
        start => format!("?from={start}"),
    };
    format!(
        "/ui/sessions/{}{page}#step-{index}",
        path_segment(session_id)
    )
}

/// Audit events of the session shown below its timeline.
const MAX_EVENTS_SHOWN: usize = 1_000;

/// Records of the session (audit events, reviews, erasures) a page reads
/// at most.
const MAX_RECORDS_READ: usize = 10_000;

/// What the records a page reads may hold, counted as they are read (a
/// review's note, an erasure's reason and an audit event's detail as
/// parsed, up to 64 KiB of text each and many times that parsed): past
/// it, later records are not read, as past [`MAX_RECORDS_READ`].
const MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

/// What `record` holds in memory, about: its free text and parsed detail.
fn record_bytes(record: &OpRecord) -> usize {
    256 + match record {
        OpRecord::Review(r) => r.note.as_ref().map_or(0, String::len),
        OpRecord::Erasure(e) => e.reason.len(),
        OpRecord::TraceErasure(e) => e.reason.len(),
        OpRecord::AuditEvent(e) => {
            e.action.len() + e.detail.as_ref().map_or(0, cairn_core::json::approx_memory)
        }
        _ => 0,
    }
}

/// What a page's read of the session's records left out.
struct RecordsLeftOut {
    /// Audit events past those listed.
    events: bool,
    /// Records past the first [`MAX_RECORDS_READ`].
    records: bool,
}

/// A step as the page shows it: its payloads already written as bounded
/// text and dropped, so that the page never holds a session's payloads
/// as parsed JSON.
struct ShownStep {
    stored: StoredStep,
    preview: String,
    input: Option<String>,
    output: Option<String>,
    metadata: Option<String>,
    span: Option<String>,
}

impl ShownStep {
    fn of(mut stored: StoredStep, budget: &mut TextBudget) -> ShownStep {
        let step = &mut stored.record.step;
        let preview = step
            .content
            .as_deref()
            .map(|c| c.chars().take(160).collect::<String>() + "…")
            .unwrap_or_default();
        let input = step.input.take().map(|v| budget.json(&v));
        let output = step.output.take().map(|v| budget.json(&v));
        let metadata = step.metadata.take();
        let span = metadata
            .as_ref()
            .and_then(span_line)
            .and_then(|line| budget.metadata_line(line));
        let metadata = metadata.map(|v| budget.metadata(&v));
        step.content = step.content.take().map(|c| budget.text(&c));
        ShownStep {
            stored,
            preview,
            input,
            output,
            metadata,
            span,
        }
    }
}

/// The line that says which OpenTelemetry span a step came from, as its
/// metadata says (OTLP ingest writes it; any writer may), from
/// its `metadata.otel` (docs/OTLP.md): the span's name and kind, its start
/// and end, its status when not unset, and its trace and span ids (the
/// step's own trace id is Cairn's id of the step, `otel.<trace>.<span>.<n>`).
/// `None` for a step that did not come from a span. Every part is cut to
/// a bounded length.
fn span_line(metadata: &serde_json::Value) -> Option<String> {
    let otel = metadata.get("otel")?.as_object()?;
    let text = |key: &str| {
        otel.get(key)
            .and_then(serde_json::Value::as_str)
            .map(|v| v.chars().take(200).collect::<String>())
    };
    // Said as what the step's metadata holds: any writer may put an
    // `otel` member in a step's metadata, OTLP ingest is only one.
    let mut line = format!("span (metadata.otel) {}", text("name").unwrap_or_default());
    if let Some(kind) = text("kind").filter(|k| !k.is_empty()) {
        line.push_str(&format!(" ({kind})"));
    } else if let Some(kind) = otel.get("kind").and_then(serde_json::Value::as_i64) {
        // A kind the enum does not define, kept as the number sent.
        line.push_str(&format!(" (kind {kind})"));
    }
    // The agent the span names (a handoff's other agent: the session's
    // steps are all written as the session's agent, docs/OTLP.md).
    let attributes = otel.get("attributes");
    if let Some(agent) = ["gen_ai.agent.name", "agent.name", "gen_ai.agent.id"]
        .iter()
        .find_map(|key| attributes?.get(*key)?.as_str())
    {
        line.push_str(&format!(
            " · agent {}",
            agent.chars().take(200).collect::<String>()
        ));
    }
    match (text("start_time"), text("end_time")) {
        (Some(start), Some(end)) => line.push_str(&format!(" · {start} → {end}")),
        (Some(start), None) => line.push_str(&format!(" · from {start}")),
        _ => {}
    }
    // A status code as OTLP ingest writes it (a name), or a number; any
    // other value (a writer's object) is not shown.
    let status = otel
        .get("status")
        .and_then(|s| s.get("code"))
        .and_then(|code| {
            code.as_str()
                .map(|c| c.chars().take(40).collect::<String>())
                .or_else(|| code.as_i64().map(|c| c.to_string()))
        });
    if let Some(status) = status
        && !status.is_empty()
        && !status.eq_ignore_ascii_case("unset")
        && status != "0"
    {
        line.push_str(&format!(" · status {status}"));
    }
    if let (Some(trace), Some(span)) = (text("trace_id"), text("span_id")) {
        line.push_str(&format!(" · trace {trace} · span {span}"));
    }
    if let Some(parent) = text("parent_span_id").filter(|p| !p.is_empty()) {
        line.push_str(&format!(" · parent {parent}"));
    }
    Some(line)
}

/// Reads a session, its verdict and its operational records (each step
/// shown within the page's budget of text).
async fn load(
    state: &Arc<AppState>,
    org: &str,
    id: String,
    from: u64,
) -> Result<
    (
        cairn_store::SessionInfo,
        Option<cairn_core::verify::Verdict>,
        StepsPage,
        (Vec<(u64, OpRecord)>, RecordsLeftOut),
        TextBudget,
    ),
    ApiError,
> {
    let org = org.to_owned();
    // Verifying a session is expensive work, as it is on the API's routes:
    // it takes a slot of the org's share.
    let permit = limits::expensive(state, &org, "verification").await?;
    blocking(state, move |store| {
        let _permit = permit;
        let Some(info) = store.session(&org, &id)? else {
            return Err(ApiError::no_session(&id));
        };
        let verdict = verify_session(store, &org, &id)?;
        let mut budget = TextBudget::new();
        let steps = steps_page(store, &org, &id, from, &mut budget)?;
        // The session's records as far as the page shows them: audit
        // events up to what it lists, and at most MAX_RECORDS_READ read in
        // all (a session may hold any number of audit events).
        let mut records = Vec::new();
        let (mut events, mut read, mut cut) = (0usize, 0usize, false);
        let mut held = 0usize;
        store.visit_session_records(&org, &id, &mut |seq, record| {
            held = held.saturating_add(record_bytes(&record));
            if read == MAX_RECORDS_READ || held > MAX_RECORD_BYTES {
                cut = true;
                return false;
            }
            read += 1;
            if matches!(record, OpRecord::AuditEvent(_)) {
                events += 1;
                if events > MAX_EVENTS_SHOWN {
                    return true;
                }
            }
            records.push((seq, record));
            true
        })?;
        let notes = RecordsLeftOut {
            events: events > MAX_EVENTS_SHOWN,
            records: cut,
        };
        Ok((info, verdict, steps, (records, notes), budget))
    })
    .await
}

/// `GET /ui/sessions/{id}`.
pub(super) async fn session(
    State(state): State<Arc<AppState>>,
    SignedIn(user): SignedIn,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let from = match q.get("from").map(|from| crate::decimal::<u64>(from)) {
        None => 0,
        Some(Some(from)) => from,
        Some(None) => {
            return error_page(
                &user,
                ApiError::bad_request(
                    "invalid_request",
                    "from: the index of the first step to show (0, 2000, 4000, ...)",
                ),
            );
        }
    };
    let (info, verdict, shown_page, (records, left_out), mut budget) =
        match load(&state, user.caller.org(), id, from).await {
            Ok(loaded) => loaded,
            Err(e) => return error_page(&user, e),
        };
    let failing_index = verdict
        .as_ref()
        .and_then(|v| v.failure.as_ref())
        .and_then(|f| f.at.step_index);
    let (verdict_text, verdict_class, failure, checked) = match &verdict {
        Some(v) if v.verified => ("Verified".to_owned(), "good", None, v.records_checked),
        Some(v) => (
            "Tampered".to_owned(),
            "bad",
            v.failure.as_ref().map(|f| {
                format!(
                    "First failing record: {} ({}): {}",
                    f.at, f.reason, f.detail
                )
            }),
            v.records_checked,
        ),
        None => ("Not verified".to_owned(), "neutral", None, 0),
    };
    // Links are threaded within the session by trace id.
    let stored: Vec<&StoredStep> = shown_page.steps.iter().map(|s| &s.stored).collect();
    let index_of: HashMap<String, u64> = stored
        .iter()
        .map(|s| (s.record.step.trace_id.clone(), s.record.step.step_index))
        .collect();
    let mut events = Vec::new();
    let mut reviews: HashMap<u64, Vec<String>> = HashMap::new();
    let mut erasures = Vec::new();
    let mut more_events = left_out.events;
    for (seq, record) in &records {
        match record {
            OpRecord::AuditEvent(_) if events.len() == MAX_EVENTS_SHOWN => more_events = true,
            OpRecord::AuditEvent(e) => events.push(EventView {
                event_id: e.event_id.clone(),
                action: e.action.clone(),
                at: e.at.to_string(),
                seq: *seq,
                detail: e.detail.as_ref().map(|d| budget.json(d)),
            }),
            // Notes and reasons are shown within the page's budget.
            OpRecord::Review(r) => reviews.entry(r.step_index).or_default().push(format!(
                "{} by {} at {}{}",
                r.decision.as_str(),
                r.reviewer,
                r.reviewed_at,
                r.note
                    .as_deref()
                    .map(|n| format!(": {}", budget.text(n)))
                    .unwrap_or_default()
            )),
            OpRecord::Erasure(e) => erasures.push(format!(
                "#{} erased ({}) by {} at {}: {}",
                e.step_index,
                e.commitments
                    .iter()
                    .map(|(field, _)| field.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                e.actor,
                e.erased_at,
                budget.text(&e.reason)
            )),
            OpRecord::TraceErasure(e) => erasures.push(format!(
                "signed trace {} (seq {}): its record withheld, with the first of its steps erased, by {} at {}: {}",
                e.trace_id,
                e.trace_seq,
                e.actor,
                e.erased_at,
                budget.text(&e.reason)
            )),
            _ => {}
        }
    }
    let event_ids: std::collections::HashSet<&str> =
        events.iter().map(|e| e.event_id.as_str()).collect();
    let link_target = |value: &str| -> String {
        if let Some(i) = index_of.get(value) {
            format!("#step-{i}")
        } else if event_ids.contains(value) {
            format!("#event-{value}")
        } else {
            format!("/ui/records/{}", path_segment(value))
        }
    };
    let mut corrected_by: HashMap<u64, Vec<u64>> = HashMap::new();
    // A tool result answers the tool call its `tool_call` link names: by
    // the call's trace id, or by the tool call id both carry.
    let call_by_tool_id: HashMap<&str, u64> = stored
        .iter()
        .filter(|s| s.record.step.kind == StepKind::ToolCall)
        .filter_map(|s| {
            let step = &s.record.step;
            step.links
                .tool_call
                .as_deref()
                .map(|id| (id, step.step_index))
        })
        .collect();
    let mut results: HashMap<u64, Vec<(u64, &'static str)>> = HashMap::new();
    for s in &stored {
        let step = &s.record.step;
        if let Some(target) = step.links.corrects.as_ref().and_then(|t| index_of.get(t)) {
            corrected_by
                .entry(*target)
                .or_default()
                .push(step.step_index);
        }
        // A tool's result answers its call, and so does the error a call
        // ended with (OTLP writes a failed tool span's error in place of
        // its result, docs/OTLP.md).
        let answer = match step.kind {
            StepKind::ToolResult => Some("result"),
            StepKind::Error => Some("error"),
            _ => None,
        };
        if let Some(answer) = answer
            && let Some(call) = step.links.tool_call.as_deref().and_then(|id| {
                index_of
                    .get(id)
                    .or_else(|| call_by_tool_id.get(id))
                    .copied()
            })
        {
            results
                .entry(call)
                .or_default()
                .push((step.step_index, answer));
        }
    }
    let (start, to_end) = (shown_page.start, shown_page.to_end);
    let reflection = stored
        .last()
        .filter(|s| to_end && s.record.step.kind == StepKind::Reflection)
        .map(|s| s.record.step.step_index);
    let pages = (start > 0 || !to_end).then(|| Pager {
        first: stored.first().map_or(start, |s| s.record.step.step_index),
        last: stored.last().map_or(start, |s| s.record.step.step_index),
        earlier: (start > 0).then(|| start.saturating_sub(MAX_STEPS_SHOWN as u64)),
        later: (!to_end).then(|| start + MAX_STEPS_SHOWN as u64),
    });
    let failing_href = failing_index.map(|i| step_href(&info.header.session_id, i));
    let steps = shown_page
        .steps
        .into_iter()
        .map(|shown| {
            let s = &shown.stored;
            let step = &s.record.step;
            let content = step.content.clone();
            let preview = shown.preview;
            StepView {
                index: step.step_index,
                seq: s.seq,
                kind: step.kind.as_str(),
                label: label_shown(&step.kind_label),
                created_at: step.created_at.to_string(),
                model: step.model.clone(),
                tokens: step.token_count,
                duration_ms: step.duration_ms,
                confidence: step.confidence.map(|c| format!("{c:.2}")),
                erased: s.record.erased,
                failing: failing_index == Some(step.step_index),
                content,
                preview,
                input: shown.input,
                output: shown.output,
                metadata: shown.metadata,
                span: shown.span,
                hash: s.record.hash.to_string(),
                flagged: step.status == cairn_core::record::Status::Flagged,
                turn: step.turn_id.as_ref().map(|turn| match step.turn_step {
                    Some(phase) => format!("turn {turn} · phase {phase}"),
                    None => format!("turn {turn}"),
                }),
                links: step
                    .links
                    .entries()
                    .into_iter()
                    .filter_map(|(name, value)| value.map(|v| (name, v.to_owned(), link_target(v))))
                    .collect(),
                corrected_by: corrected_by.remove(&step.step_index).unwrap_or_default(),
                results: results.remove(&step.step_index).unwrap_or_default(),
                reviews: reviews.remove(&step.step_index).unwrap_or_default(),
            }
        })
        .collect();
    let nav = Nav::of(&user);
    // An open session's page follows it with a script (live.js).
    let policy = if info.seal.is_some() {
        POLICY
    } else {
        SCRIPT_POLICY
    };
    page_with(
        &SessionPage {
            org: nav.org,
            role: nav.role,
            csrf: nav.csrf,
            session_id: info.header.session_id.clone(),
            agent_id: info.header.agent_id.clone(),
            started_at: info.header.started_at.to_string(),
            sealed: info.seal.is_some(),
            can_export: user.caller.key.role.can_export(),
            verdict: verdict_text,
            verdict_class,
            failure,
            checked,
            sealed_at: info.seal.as_ref().map(|seal| seal.sealed_at.to_string()),
            final_hash: info.seal.as_ref().map(|seal| seal.final_hash.to_string()),
            session_root: info.seal.as_ref().map(|seal| seal.session_root.to_string()),
            reflection,
            pages,
            failing_href,
            step_count: info.step_count,
            more_events,
            more_records: left_out.records,
            steps,
            events,
            erasures,
        },
        policy,
    )
}

/// `GET /ui/sessions/{id}/state`: what an open session's page polls
/// (`live.js`), `{"step_count": N, "sealed": bool}`, read from the
/// session's record without its steps: the page itself (which verifies
/// the session) is fetched again only when the count changed or the
/// session was sealed.
pub(super) async fn state(
    State(state): State<Arc<AppState>>,
    SignedIn(user): SignedIn,
    Path(id): Path<String>,
) -> Response {
    let org = user.caller.org().to_owned();
    let found = blocking(&state, move |store| {
        store
            .session(&org, &id)?
            .ok_or_else(|| ApiError::no_session(&id))
    })
    .await;
    match found {
        Ok(info) => {
            let mut response = axum::Json(serde_json::json!({
                "step_count": info.step_count,
                "sealed": info.seal.is_some(),
            }))
            .into_response();
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Err(e) => e.into_response(),
    }
}

#[derive(Template)]
#[template(path = "ui/markdown.html")]
struct MarkdownPage {
    org: String,
    role: String,
    csrf: String,
    session_id: String,
    markdown: String,
}

/// `GET /ui/sessions/{id}/markdown`: seed 002's Markdown export of the
/// session, as `GET /v1/sessions/{id}?format=markdown` gives it.
pub(super) async fn markdown(
    State(state): State<Arc<AppState>>,
    SignedIn(user): SignedIn,
    Path(id): Path<String>,
) -> Response {
    let org = user.caller.org().to_owned();
    // A whole session read: a slot of the org's share, as the API's
    // Markdown answer takes.
    let permit = match limits::expensive(&state, &org, "markdown").await {
        Ok(permit) => permit,
        Err(e) => return error_page(&user, e),
    };
    let loaded = blocking(&state, move |store| {
        let _permit = permit;
        let Some(info) = store.session(&org, &id)? else {
            return Err(ApiError::no_session(&id));
        };
        // The Markdown shows contents, not payloads: each step is held as
        // its line once read, and the page stops within the text budget.
        let mut steps = Vec::new();
        let mut text = 0usize;
        let mut more = false;
        store.read_session(&org, &id, &mut |s| {
            if steps.len() == MAX_STEPS_SHOWN || text > PAGE_TEXT_BYTES {
                more = true;
                return false;
            }
            text += s.record.step.content.as_ref().map_or(0, String::len);
            steps.push(crate::render::Rendered::markdown(&s.record));
            true
        })?;
        let shown = steps.len();
        let mut markdown = crate::render::rendered_markdown(&info.header.session_id, steps);
        if more {
            markdown.push_str(&format!(
                "\n(This page shows the session's first {} of {} steps; \
                 the API's replay and an export hold all of them.)\n",
                shown, info.step_count
            ));
        }
        Ok((info.header.session_id, markdown))
    })
    .await;
    match loaded {
        Ok((session_id, markdown)) => {
            let nav = Nav::of(&user);
            page(&MarkdownPage {
                org: nav.org,
                role: nav.role,
                csrf: nav.csrf,
                session_id,
                markdown,
            })
        }
        Err(e) => error_page(&user, e),
    }
}

#[derive(Template)]
#[template(path = "ui/event.html")]
struct EventPage {
    org: String,
    role: String,
    csrf: String,
    event: EventView,
    session_id: Option<String>,
}

/// `GET /ui/records/{id}`: where a link's id leads. A step's trace id
/// goes to the step in its session's timeline; an audit event's id shows
/// the event; anything else is not in this org's log.
pub(super) async fn record(
    State(state): State<Arc<AppState>>,
    SignedIn(user): SignedIn,
    Path(id): Path<String>,
) -> Response {
    let org = user.caller.org().to_owned();
    if cairn_core::record::validate_id("id", &id).is_err() {
        return error_page(&user, ApiError::not_found(format!("record {}", shown(&id))));
    }
    // A step is read where steps are (crate::steps::read_step), keeping
    // only where it is shown.
    let step = crate::steps::read_step(&state, &org, &id, |step| {
        step_href(&step.record.step.session_id, step.record.step.step_index)
    })
    .await;
    match step {
        Ok(href) => return Redirect::to_owned(href),
        Err(e) if e.status != axum::http::StatusCode::NOT_FOUND => return error_page(&user, e),
        Err(_) => {}
    }
    let found = blocking(&state, move |store| {
        store.audit_event(&org, &id)?.ok_or_else(|| {
            ApiError::not_found(format!(
                "record {} (no step or audit event of this org has that id)",
                shown(&id)
            ))
        })
    })
    .await;
    match found {
        Ok((seq, event)) => {
            let nav = Nav::of(&user);
            page(&EventPage {
                org: nav.org,
                role: nav.role,
                csrf: nav.csrf,
                session_id: event.session_id.clone(),
                event: EventView {
                    event_id: event.event_id.clone(),
                    action: event.action.clone(),
                    at: time_text(Some(event.at)),
                    seq,
                    detail: event.detail.as_ref().map(|d| TextBudget::new().json(d)),
                },
            })
        }
        Err(e) => error_page(&user, e),
    }
}

/// A value as one URL path segment (percent-encoded).
fn path_segment(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}
