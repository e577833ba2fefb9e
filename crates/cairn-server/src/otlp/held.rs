//! Spans waiting for the span that names their session (docs/OTLP.md
//! "Spans waiting for their session"). An exporter sends what has ended:
//! a turn's model and tool spans often go out before the agent span that
//! carries `gen_ai.conversation.id`, and, named by nothing, they would
//! each open a session named after their trace. Such a span is held in
//! the store (acknowledged, durable, not yet a ledger record) until a
//! span of its trace from the same key names the session, or the trace's
//! root span arrives, or [`super::OtlpConfig::hold_for`] passes; then it
//! is written, in time order with the spans that settled it.
//!
//! [`settle`] decides, for one request, which of its spans are held and
//! which held spans it writes; [`Settlement::apply`] makes every mapping
//! of the request's body (the handler maps it again for its later passes)
//! agree; [`HeldFlusher`] writes the spans whose wait is over.

use super::{OtlpError, map};
use crate::Caller;
use cairn_store::LedgerStore;
use cairn_store::held_spans::HeldSpan;
use map::{SessionSource, SpanSteps, Unmappable};

mod flusher;
pub use flusher::HeldFlusher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The most bytes (of their stored JSON) of held spans one request writes:
/// the rest of its traces' held spans wait on (for a later request of
/// the trace, or the end of their wait), so that settling a trace never
/// takes a request past what OTLP requests may hold in memory.
const MAX_SETTLED_BYTES_PER_REQUEST: usize = 16 * 1024 * 1024;

/// How long before a held span's wait ends a request leaves its trace to
/// the flusher (half the hold time when that is shorter).
const FLUSHER_MARGIN: Duration = Duration::from_secs(5);

/// What one request does with spans held: its spans whose session is
/// another than their trace id, those it holds, and the held spans it
/// writes.
#[derive(Debug, Default)]
pub(super) struct Settlement {
    /// The request's own spans (the mapped list's length before the held
    /// spans it writes were added after them).
    pub own: usize,
    /// The request's spans named by nothing that go into a session found
    /// in the store, by place: where the span's steps already are (a
    /// retry), else where its trace's steps are.
    sessions: HashMap<usize, String>,
    /// The request's spans held, by place.
    held: Vec<usize>,
    /// Spans held earlier that this request writes, their session set.
    flushed: Vec<SpanSteps>,
}

impl Settlement {
    /// Nothing held, nothing written: holding is off.
    fn none(own: usize) -> Settlement {
        Settlement {
            own,
            ..Settlement::default()
        }
    }

    /// Makes a mapping of the request's body what the first one became:
    /// sessions found in the store set, held spans taken out (a
    /// placeholder keeps the places), held spans written appended.
    pub(super) fn apply(&self, mapped: &mut Vec<Result<SpanSteps, Unmappable>>) {
        for (place, session) in &self.sessions {
            if let Some(Ok(span)) = mapped.get_mut(*place) {
                span.session_id.clone_from(session);
            }
        }
        for &i in &self.held {
            if let Some(Ok(span)) = mapped.get(i) {
                mapped[i] = Err(Unmappable {
                    trace_hex: span.trace_hex.clone(),
                    span_hex: span.span_hex.clone(),
                    reason: "held for its session".into(),
                });
            }
        }
        mapped.extend(self.flushed.iter().cloned().map(Ok));
    }

    /// Whether the span at `place` of an applied mapping is a held span
    /// written by this request (not one of the request's own).
    pub(super) fn is_flushed(&self, place: usize) -> bool {
        place >= self.own
    }

    /// What the held spans written take in memory.
    pub(super) fn flushed_bytes(&self) -> usize {
        self.flushed.iter().map(|s| s.counted_bytes).sum()
    }

    /// The held spans written whose steps were all recorded (`failed`
    /// names the places of those that were not), by trace: to forget.
    pub(super) fn written(
        &self,
        failed: &std::collections::HashSet<usize>,
    ) -> BTreeMap<String, Vec<String>> {
        let mut written: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (i, span) in self.flushed.iter().enumerate() {
            if !failed.contains(&(self.own + i)) {
                written
                    .entry(span.trace_hex.clone())
                    .or_default()
                    .push(span.span_hex.clone());
            }
        }
        written
    }
}

/// The traces of a request, as its spans (not refused) say.
#[derive(Default)]
struct TraceView {
    /// The sessions its spans name.
    named: BTreeSet<String>,
    /// Its spans named by nothing, by place.
    unnamed: Vec<usize>,
    /// Whether the request settles it (its root span is here, or it
    /// names several sessions).
    settled: bool,
}

/// Decides what request `mapped` (its spans refused already marked in
/// `refused`) holds and writes of held spans, and holds what it holds
/// (durably, before the request is answered). Fails (503, retry) when
/// the store cannot answer.
pub(super) fn settle(
    store: &dyn LedgerStore,
    caller: &Caller,
    config: &super::OtlpConfig,
    stats: &HeldStats,
    mapped: &[Result<SpanSteps, Unmappable>],
    refused: impl Fn(usize) -> bool,
) -> Result<Settlement, OtlpError> {
    let mut settlement = Settlement::none(mapped.len());
    if config.hold_for.is_zero() {
        return Ok(settlement);
    }
    let (org, key) = (caller.org(), caller.key.id.as_str());
    let failed = super::ingest::unreadable;
    let mut traces: BTreeMap<&str, TraceView> = BTreeMap::new();
    for (i, span) in mapped.iter().enumerate() {
        let Ok(span) = span else { continue };
        if refused(i) {
            continue;
        }
        let view = traces.entry(span.trace_hex.as_str()).or_default();
        match span.session_source {
            SessionSource::Named => {
                view.named.insert(span.session_id.clone());
            }
            SessionSource::TraceId { settled } => {
                view.unnamed.push(i);
                view.settled |= settled;
            }
        }
    }
    // A span named by nothing whose steps are recorded already (a retry
    // of an export written since) goes where they are, so that the retry
    // is recognized as one.
    let unnamed: Vec<usize> = traces.values().flat_map(|v| v.unnamed.clone()).collect();
    let first_ids: Vec<String> = unnamed
        .iter()
        .filter_map(|&i| Some(mapped[i].as_ref().ok()?.steps.first()?.step_id.clone()))
        .collect();
    let recorded_spans: HashMap<String, String> = store
        .steps_by_trace(org, &first_ids)
        .map_err(failed)?
        .into_iter()
        .map(|s| (s.record.step.trace_id, s.record.step.session_id))
        .collect();
    // Only into a session the key opened: another key's step under the
    // span's id (a downstream service knows its caller's span id) is
    // another step, not this span's first write.
    let mut opened_here: HashMap<String, bool> = HashMap::new();
    for &i in &unnamed {
        let first = mapped[i].as_ref().ok().and_then(|s| s.steps.first());
        let Some(session) = first.and_then(|s| recorded_spans.get(&s.step_id)) else {
            continue;
        };
        if !opened_here.contains_key(session) {
            let opener = store.session(org, session).map_err(failed)?;
            let ours = opener.is_some_and(|info| info.header.caller == key);
            opened_here.insert(session.clone(), ours);
        }
        if opened_here[session] {
            settlement.sessions.insert(i, session.clone());
        }
    }
    // Each trace's session, where the request decides it.
    let mut decided: BTreeMap<String, String> = BTreeMap::new();
    let mut unknown: Vec<String> = Vec::new();
    for (trace, view) in &traces {
        match view.named.len() {
            0 => unknown.push((*trace).to_owned()),
            1 => {
                let one = view.named.iter().next().cloned().unwrap_or_default();
                decided.insert((*trace).to_owned(), one);
            }
            _ => {
                decided.insert((*trace).to_owned(), (*trace).to_owned());
            }
        }
    }
    let recorded = recorded_sessions(store, org, key, &unknown).map_err(failed)?;
    let mut to_hold = Vec::new();
    for (trace, recorded) in unknown.into_iter().zip(recorded) {
        let view = &traces[trace.as_str()];
        match recorded {
            Some(session) => {
                for &i in &view.unnamed {
                    settlement
                        .sessions
                        .entry(i)
                        .or_insert_with(|| session.clone());
                }
                decided.insert(trace, session);
            }
            None if view.settled => {
                decided.insert(trace.clone(), trace);
            }
            None => to_hold.extend(
                view.unnamed
                    .iter()
                    .copied()
                    .filter(|i| !settlement.sessions.contains_key(i)),
            ),
        }
    }
    // The held spans of the traces decided here, written with them (up
    // to a bound; the rest wait on). A trace with a span near the end of
    // its wait is left to the flusher whole, so that the two do not write
    // one trace's spans into two sessions at once.
    let decided_traces: Vec<String> = decided.keys().cloned().collect();
    let held = store
        .held_spans(org, key, &decided_traces)
        .map_err(failed)?;
    let margin = (config.hold_for / 2).min(FLUSHER_MARGIN);
    let hold_ms = i64::try_from((config.hold_for - margin).as_millis()).unwrap_or(i64::MAX);
    let near_due = now_ms().saturating_sub(hold_ms);
    let flushers: BTreeSet<String> = held
        .iter()
        .filter(|row| row.received_ms < near_due)
        .map(|row| row.trace_hex.clone())
        .collect();
    let mut unreadable = BTreeMap::<String, Vec<String>>::new();
    let mut settled_bytes = 0;
    for row in held
        .into_iter()
        .filter(|row| !flushers.contains(&row.trace_hex))
    {
        settled_bytes += row.steps.len();
        if settled_bytes > MAX_SETTLED_BYTES_PER_REQUEST {
            break;
        }
        match serde_json::from_str::<SpanSteps>(&row.steps) {
            // A row of a trace this request did not ask for (a store
            // answering more than it was asked) is left held.
            Ok(mut span) if span.trace_hex == row.trace_hex => {
                if let Some(session) = decided.get(&row.trace_hex) {
                    span.session_id.clone_from(session);
                    settlement.flushed.push(span);
                }
            }
            _ => {
                unreadable_row(org, key, &row.trace_hex, &row.span_hex);
                stats.dropped.fetch_add(1, Relaxed);
                unreadable
                    .entry(row.trace_hex)
                    .or_default()
                    .push(row.span_hex);
            }
        }
    }
    for (trace, spans) in unreadable {
        store
            .release_spans(org, key, &trace, &spans)
            .map_err(failed)?;
    }
    if !to_hold.is_empty() {
        let now = now_ms();
        let mut rows = Vec::with_capacity(to_hold.len());
        for &i in &to_hold {
            let Some(Ok(span)) = mapped.get(i) else {
                continue;
            };
            let steps = serde_json::to_string(span).map_err(|e| {
                OtlpError::new(
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    format!("a span's steps could not be held: {e}"),
                )
            })?;
            rows.push(HeldSpan {
                trace_hex: span.trace_hex.clone(),
                span_hex: span.span_hex.clone(),
                steps,
                received_ms: now,
            });
        }
        let room = store
            .hold_spans(org, key, &rows, config.max_held_bytes)
            .map_err(failed)?;
        if let Some(newly) = room {
            stats.held.fetch_add(newly, Relaxed);
            settlement.held = to_hold;
        } else {
            stats.over_limit.fetch_add(to_hold.len() as u64, Relaxed);
            tracing::warn!(
                target: "cairn::otlp",
                org, key, spans = rows.len(),
                "the org's held spans are at their limit (CAIRN_OTLP_MAX_HELD_BYTES): spans naming no session are written at once, each into the session named after its trace"
            );
        }
    }
    Ok(settlement)
}

/// For each trace, of the sessions its recorded steps are in, the one
/// holding the latest step among those `key` opened: the exporter's own
/// (a session another key opened, which could be any key of the org
/// writing a step under an `otel.` id, does not decide where this key's
/// spans go; it hides the key's own only past the trace's
/// [`cairn_store::held_spans::TRACE_SESSIONS`] latest sessions).
fn recorded_sessions(
    store: &dyn LedgerStore,
    org: &str,
    key: &str,
    traces: &[String],
) -> Result<Vec<Option<String>>, cairn_store::StoreError> {
    let mut found = Vec::with_capacity(traces.len());
    for sessions in store.otel_trace_sessions(org, traces)? {
        let mut own = None;
        for id in sessions {
            if store
                .session(org, &id)?
                .is_some_and(|info| info.header.caller == key)
            {
                own = Some(id);
                break;
            }
        }
        found.push(own);
    }
    Ok(found)
}

/// Logs a held row that does not read back.
fn unreadable_row(org: &str, key: &str, trace: &str, span: &str) {
    tracing::error!(
        target: "cairn::otlp",
        org, key, trace, span,
        "a held span's stored steps do not read back (the held_spans table was changed outside Cairn): dropped"
    );
}

/// Now, in Unix milliseconds.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Logs a held span's step that is not recorded, and why.
pub(super) fn dropped_step(org: &str, key: &str, step_id: &str, why: &str) {
    tracing::error!(
        target: "cairn::otlp",
        org, key,
        "a held span's step {step_id} is dropped: {why}"
    );
}

/// What happened to held spans, for `/metrics`
/// (`cairn_otlp_held_spans_total{outcome}`).
#[derive(Debug, Default)]
pub(crate) struct HeldStats {
    /// Spans a request held.
    held: AtomicU64,
    /// Held spans written by a request of their trace.
    settled: AtomicU64,
    /// Held spans written when their wait ended.
    waited: AtomicU64,
    /// Held spans dropped: refused by every session they could go into
    /// when their wait ended, or unreadable.
    dropped: AtomicU64,
    /// Spans written at once because their org's held spans were at
    /// their limit.
    over_limit: AtomicU64,
}

impl HeldStats {
    /// The counters in Prometheus' text format.
    pub(crate) fn render(&self) -> String {
        format!(
            "# HELP cairn_otlp_held_spans_total OTLP spans that named no session, by outcome: held (waiting for the span naming their session), settled (written by a request of their trace), waited (written when their wait ended), dropped (refused by every session they could go into, or unreadable: logged as errors), over_limit (written at once: their org's held spans were at --otlp-max-held-bytes).\n# TYPE cairn_otlp_held_spans_total counter\n\
             cairn_otlp_held_spans_total{{outcome=\"held\"}} {}\ncairn_otlp_held_spans_total{{outcome=\"settled\"}} {}\ncairn_otlp_held_spans_total{{outcome=\"waited\"}} {}\ncairn_otlp_held_spans_total{{outcome=\"dropped\"}} {}\ncairn_otlp_held_spans_total{{outcome=\"over_limit\"}} {}\n",
            self.held.load(Relaxed),
            self.settled.load(Relaxed),
            self.waited.load(Relaxed),
            self.dropped.load(Relaxed),
            self.over_limit.load(Relaxed),
        )
    }

    /// Counts held spans a request wrote (and forgot).
    pub(super) fn settled(&self, spans: u64) {
        self.settled.fetch_add(spans, Relaxed);
    }

    /// Counts held spans dropped.
    pub(super) fn dropped(&self, spans: usize) {
        self.dropped.fetch_add(spans as u64, Relaxed);
    }
}
