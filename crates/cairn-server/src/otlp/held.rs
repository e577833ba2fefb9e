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
use cairn_store::held_spans::{DUE_TRACES_PER_ROUND, HeldSpan, HeldTrace};
use cairn_store::{AppendError, Ledger, LedgerStore, Refusal, WriteRequest};
use map::{SessionSource, SpanSteps, Unmappable};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// What one request does with spans held: its spans whose session is
/// another than their trace id, those it holds, and the held spans it
/// writes.
#[derive(Debug, Default)]
pub(super) struct Settlement {
    /// The request's own spans (the mapped list's length before the held
    /// spans it writes were added after them).
    pub own: usize,
    /// Traces whose spans named by nothing take a session found in the
    /// store (where the trace's steps were recorded): trace -> session.
    sessions: HashMap<String, String>,
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
        for span in mapped.iter_mut().flatten() {
            if matches!(span.session_source, SessionSource::TraceId { .. })
                && let Some(session) = self.sessions.get(&span.trace_hex)
            {
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
    mapped: &[Result<SpanSteps, Unmappable>],
    refused: impl Fn(usize) -> bool,
) -> Result<Settlement, OtlpError> {
    let mut settlement = Settlement::none(mapped.len());
    if config.hold_for.is_zero() {
        return Ok(settlement);
    }
    let (org, key) = (caller.org(), caller.key.id.as_str());
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
    let recorded = store
        .otel_trace_sessions(org, &unknown)
        .map_err(super::ingest::unreadable)?;
    let mut to_hold = Vec::new();
    for (trace, recorded) in unknown.into_iter().zip(recorded) {
        let view = &traces[trace.as_str()];
        match recorded {
            Some(session) => {
                settlement.sessions.insert(trace.clone(), session.clone());
                decided.insert(trace, session);
            }
            None if view.settled => {
                decided.insert(trace.clone(), trace);
            }
            None => to_hold.extend(view.unnamed.iter().copied()),
        }
    }
    // The held spans of the traces decided here, written with them.
    let decided_traces: Vec<String> = decided.keys().cloned().collect();
    let held = store
        .held_spans(org, key, &decided_traces)
        .map_err(super::ingest::unreadable)?;
    let mut unreadable = BTreeMap::<String, Vec<String>>::new();
    for row in held {
        match serde_json::from_str::<SpanSteps>(&row.steps) {
            Ok(mut span) if span.trace_hex == row.trace_hex => {
                span.session_id.clone_from(&decided[&row.trace_hex]);
                settlement.flushed.push(span);
            }
            _ => {
                tracing::error!(
                    target: "cairn::otlp",
                    org, key, trace = %row.trace_hex, span = %row.span_hex,
                    "a held span's stored steps do not read back (the held_spans table was changed outside Cairn): dropped"
                );
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
            .map_err(super::ingest::unreadable)?;
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
            .map_err(super::ingest::unreadable)?;
        if room {
            settlement.held = to_hold;
        } else {
            tracing::warn!(
                target: "cairn::otlp",
                org, key, spans = rows.len(),
                "the org's held spans are at their limit (CAIRN_OTLP_MAX_HELD_BYTES): spans naming no session are written at once, each into the session named after its trace"
            );
        }
    }
    Ok(settlement)
}

/// Now, in Unix milliseconds.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How often the flusher looks for spans whose wait is over.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The thread that writes the spans whose wait is over
/// ([`super::OtlpConfig::hold_for`]): each trace's held spans into the
/// session its steps were recorded in, else the session named after the
/// trace. Stopped (and joined) when dropped.
pub struct HeldFlusher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HeldFlusher {
    /// Starts the flusher (`None` when holding is off).
    pub(crate) fn start(ledger: Arc<Ledger>, hold_for: Duration) -> Option<HeldFlusher> {
        if hold_for.is_zero() {
            return None;
        }
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("cairn-otlp-held".into())
            .spawn(move || {
                let failing = AtomicBool::new(false);
                loop {
                    let (lock, wake) = &*stopping;
                    let Ok(stopped) = lock.lock() else { return };
                    let Ok((stopped, _)) = wake.wait_timeout_while(stopped, FLUSH_EVERY, |s| !*s)
                    else {
                        return;
                    };
                    if *stopped {
                        return;
                    }
                    drop(stopped);
                    let hold_ms = i64::try_from(hold_for.as_millis()).unwrap_or(i64::MAX);
                    match flush_due(&ledger, now_ms().saturating_sub(hold_ms)) {
                        Ok(()) => failing.store(false, Relaxed),
                        // Logged once per outage, not every second.
                        Err(e) if !failing.swap(true, Relaxed) => {
                            tracing::error!(target: "cairn::otlp", "writing held spans: {e}");
                        }
                        Err(_) => {}
                    }
                }
            })
            .map_err(|e| tracing::error!("the OTLP held-span flusher did not start: {e}"))
            .ok();
        Some(HeldFlusher { stop, thread })
    }
}

impl Drop for HeldFlusher {
    fn drop(&mut self) {
        if let Ok(mut stopped) = self.stop.0.lock() {
            *stopped = true;
        }
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Writes every trace's spans held since before `before_ms`.
fn flush_due(ledger: &Ledger, before_ms: i64) -> Result<(), String> {
    let store = ledger.store_arc();
    loop {
        let due = store
            .due_held_traces(before_ms, DUE_TRACES_PER_ROUND)
            .map_err(|e| e.to_string())?;
        for trace in &due {
            flush_trace(ledger, store.as_ref(), trace)?;
        }
        if due.len() < DUE_TRACES_PER_ROUND {
            return Ok(());
        }
    }
}

/// Writes one trace's held spans of one key, then forgets them: written,
/// already written (a step of the same id: an earlier flush that stopped
/// before forgetting them), or refused (logged: there is no better
/// session to wait for).
fn flush_trace(ledger: &Ledger, store: &dyn LedgerStore, held: &HeldTrace) -> Result<(), String> {
    let (org, key) = (held.org_id.as_str(), held.key_id.as_str());
    let failed = |e: cairn_store::StoreError| e.to_string();
    let trace = std::slice::from_ref(&held.trace_hex);
    let rows = store.held_spans(org, key, trace).map_err(failed)?;
    let session = store
        .otel_trace_sessions(org, trace)
        .map_err(failed)?
        .pop()
        .flatten()
        .unwrap_or_else(|| held.trace_hex.clone());
    // The key's agent, if it is bound to one (and still in the org).
    let bound = store
        .api_keys(org)
        .map_err(failed)?
        .into_iter()
        .find(|k| k.id == key)
        .and_then(|k| k.agent_id);
    let mut spans = Vec::with_capacity(rows.len());
    let mut names = Vec::with_capacity(rows.len());
    for row in rows {
        names.push(row.span_hex.clone());
        match serde_json::from_str::<SpanSteps>(&row.steps) {
            Ok(mut span) if span.trace_hex == held.trace_hex => {
                span.session_id.clone_from(&session);
                spans.push(Ok(span));
            }
            _ => tracing::error!(
                target: "cairn::otlp",
                org, key, trace = %held.trace_hex, span = %row.span_hex,
                "a held span's stored steps do not read back (the held_spans table was changed outside Cairn): dropped"
            ),
        }
    }
    // Submitted together (the sequencer commits them in order), then
    // awaited.
    let mut submitted = Vec::new();
    for plan in map::plan(spans, bound.as_deref()) {
        for (_, step) in plan.steps {
            let new = super::ingest::new_step(org, key, &plan.session_id, &plan.agent_id, step);
            let pending = ledger.submit(WriteRequest::Step(Box::new(new.clone())));
            submitted.push((new, pending));
        }
    }
    let mut again = Vec::new();
    for (new, pending) in submitted {
        match pending.wait() {
            // A session opened as another agent by a key without a
            // binding's earlier spans: written as that agent, as a
            // request's spans are (docs/OTLP.md "Sessions and agents").
            Err(AppendError::Refused(Refusal::AgentMismatch { session_agent, .. }))
                if bound.is_none() =>
            {
                let mut adopted = new;
                adopted.agent_id = session_agent;
                let pending = ledger.submit(WriteRequest::Step(Box::new(adopted.clone())));
                again.push((adopted, pending));
            }
            answer => written(org, key, &new, answer)?,
        }
    }
    for (new, pending) in again {
        written(org, key, &new, pending.wait())?;
    }
    store
        .release_spans(org, key, &held.trace_hex, &names)
        .map_err(failed)
}

/// A held span's step's answer: written (or already), or refused and
/// logged (there is no better session to wait for); a store that failed
/// stops the flush (the spans stay held, and are written again).
fn written(
    org: &str,
    key: &str,
    step: &cairn_store::NewStep,
    answer: Result<cairn_store::Written, AppendError>,
) -> Result<(), String> {
    match answer {
        Ok(_) | Err(AppendError::Refused(Refusal::DuplicateTraceId { .. })) => Ok(()),
        Err(AppendError::Refused(why)) => {
            tracing::error!(
                target: "cairn::otlp",
                org, key, session = %step.session_id,
                "a held span's step {} was refused when its wait ended, and is dropped: {why}",
                step.trace_id.as_deref().unwrap_or_default()
            );
            Ok(())
        }
        Err(AppendError::Store(e)) => Err(e.to_string()),
    }
}
