//! The thread that writes the OTLP spans whose wait for their session is
//! over ([`HeldFlusher`]): a few traces of each org a round, each into the
//! session its key's steps of the trace are in, else the one named after
//! the trace, by the owner rule a request of the key follows. Apart from
//! `held.rs`, which decides per request, because it runs on its own.

use super::super::ingest::Owner;
use super::super::map;
use super::{HeldStats, dropped_step, now_ms, recorded_sessions, unreadable_row};
use cairn_store::held_spans::{DUE_TRACES_PER_ORG, DUE_TRACES_PER_ROUND, HeldTrace};
use cairn_store::{AppendError, Ledger, LedgerStore, NewStep, Pending, Refusal, WriteRequest};
use map::{SpanSteps, Unmappable};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How often the flusher looks for spans whose wait is over.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The thread that writes the spans whose wait is over
/// ([`crate::otlp::OtlpConfig::hold_for`]; with a hold time of zero, any span
/// still held from an earlier run): each trace's held spans into the
/// session its steps were recorded in (when the spans' key opened it),
/// else the session named after the trace. Stopped (and joined) when
/// dropped; it stops between rounds of traces.
pub struct HeldFlusher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    stopping: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HeldFlusher {
    /// Starts the flusher.
    pub(crate) fn start(
        ledger: Arc<Ledger>,
        hold_for: Duration,
        stats: Arc<HeldStats>,
    ) -> HeldFlusher {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stopping = Arc::new(AtomicBool::new(false));
        let (wait, halt) = (Arc::clone(&stop), Arc::clone(&stopping));
        let thread = std::thread::Builder::new()
            .name("cairn-otlp-held".into())
            .spawn(move || {
                let mut failing = false;
                loop {
                    let (lock, wake) = &*wait;
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
                    let before = now_ms().saturating_sub(hold_ms).saturating_add(1);
                    match flush_due(&ledger, before, &halt, &stats) {
                        Ok(()) => failing = false,
                        // Logged once per outage, not every second.
                        Err(e) if !failing => {
                            failing = true;
                            tracing::error!(target: "cairn::otlp", "writing held spans: {e}");
                        }
                        Err(_) => {}
                    }
                }
            })
            .map_err(|e| tracing::error!("the OTLP held-span flusher did not start: {e}"))
            .ok();
        HeldFlusher {
            stop,
            stopping,
            thread,
        }
    }
}

impl Drop for HeldFlusher {
    fn drop(&mut self) {
        self.stopping.store(true, Relaxed);
        if let Ok(mut stopped) = self.stop.0.lock() {
            *stopped = true;
        }
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Writes every trace's spans held since before `before_ms`, in rounds
/// that take a few traces of each org (so that one org's many traces do
/// not keep another's waiting), until none is due or `stop` is set.
fn flush_due(
    ledger: &Ledger,
    before_ms: i64,
    stop: &AtomicBool,
    stats: &HeldStats,
) -> Result<(), String> {
    let store = ledger.store_arc();
    while !stop.load(Relaxed) {
        let due = store
            .due_held_traces(before_ms, DUE_TRACES_PER_ORG, DUE_TRACES_PER_ROUND)
            .map_err(|e| e.to_string())?;
        if due.is_empty() {
            break;
        }
        flush_round(ledger, store.as_ref(), &due, stats)?;
    }
    Ok(())
}

/// One held span's step on its way.
struct Submitted {
    /// The step as submitted.
    step: Planned,
    /// Its trace's place in the round.
    trace: usize,
    /// Whether it went to the session named after its trace.
    fallback: bool,
    /// Whether its agent was chosen again after the session it went to
    /// refused it as another agent's.
    replanned: bool,
    pending: Pending,
}

/// A held span's step planned: the step, the agent its span names (if
/// any), and the agent its plan chose (what a session that does not
/// adopt it is written as).
#[derive(Clone)]
struct Planned {
    step: NewStep,
    span_agent: Option<String>,
    plan_agent: String,
}

/// The most bytes (of their stored JSON) of held spans one round of the
/// flusher reads: a round takes whole traces until it passes this.
const MAX_ROUND_BYTES: usize = 32 * 1024 * 1024;

/// Writes the held spans of `due` (whole traces, up to
/// [`MAX_ROUND_BYTES`]; each trace's steps submitted together, the round
/// awaited together), then forgets them: written, already written (a step
/// of the same id that is this very step: an earlier flush that stopped
/// before forgetting it), or dropped, logged and counted (refused by the
/// session of the trace's recorded steps and by the one named after the
/// trace, or its id taken by another step: there is nothing better to
/// wait for).
fn flush_round(
    ledger: &Ledger,
    store: &dyn LedgerStore,
    due: &[HeldTrace],
    stats: &HeldStats,
) -> Result<(), String> {
    let failed = |e: cairn_store::StoreError| e.to_string();
    // Each org's keys' agents, read once a round.
    let mut bound: HashMap<(String, String), Option<String>> = HashMap::new();
    let mut submitted = Vec::new();
    let mut names = Vec::with_capacity(due.len());
    let mut unreadable = Vec::new();
    let mut read = 0;
    for (place, held) in due.iter().enumerate() {
        if read > MAX_ROUND_BYTES {
            break;
        }
        let (org, key) = (held.org_id.as_str(), held.key_id.as_str());
        let trace = std::slice::from_ref(&held.trace_hex);
        let rows = store.held_spans(org, key, trace).map_err(failed)?;
        read += rows.iter().map(|row| row.steps.len()).sum::<usize>();
        if !bound.contains_key(&(org.to_owned(), key.to_owned())) {
            for k in store.api_keys(org).map_err(failed)? {
                bound.insert((org.to_owned(), k.id), k.agent_id);
            }
        }
        let agent = bound_agent(&bound, org, key);
        let session = recorded_sessions(store, org, key, trace)
            .map_err(failed)?
            .pop()
            .flatten();
        let fallback = session.is_none();
        let session = session.unwrap_or_else(|| held.trace_hex.clone());
        let mut spans = Vec::with_capacity(rows.len());
        let mut span_names = Vec::with_capacity(rows.len());
        for row in rows {
            span_names.push(row.span_hex.clone());
            match serde_json::from_str::<SpanSteps>(&row.steps) {
                Ok(mut span) if span.trace_hex == held.trace_hex => {
                    span.session_id.clone_from(&session);
                    spans.push(Ok(span));
                }
                _ => {
                    unreadable_row(org, key, &held.trace_hex, &row.span_hex);
                    unreadable.push((place, row.span_hex));
                }
            }
        }
        names.push(span_names);
        let steps = planned(store, (org, key), agent.as_deref(), &bound, spans).map_err(failed)?;
        for step in steps {
            let pending = ledger.submit(WriteRequest::Step(Box::new(step.step.clone())));
            submitted.push(Submitted {
                step,
                trace: place,
                fallback,
                replanned: false,
                pending,
            });
        }
    }
    // Steps a session refused: as another agent's (a session opened since
    // they were planned, by another service's spans of the round or a
    // request), planned again against its owner; else, or refused again,
    // sent to the session named after their trace (when that was not
    // where they went), planned against its owner; else dropped. Steps
    // whose id is taken: compared with the step recorded under it.
    let mut taken = Vec::new();
    let mut dropped: BTreeSet<(usize, String)> = unreadable.into_iter().collect();
    let mut queue = submitted;
    while !queue.is_empty() {
        let mut next = Vec::new();
        for s in queue {
            let why = match s.pending.wait() {
                Ok(_) => continue,
                Err(AppendError::Refused(Refusal::DuplicateTraceId { .. })) => {
                    taken.push((s.step.step, s.trace));
                    continue;
                }
                Err(AppendError::Store(e)) => return Err(e.to_string()),
                // The server cannot write now: the round stops, its spans
                // stay held and are written again (as retries) next round.
                Err(AppendError::Refused(Refusal::Unavailable(why))) => {
                    return Err(format!("the server cannot write now: {why}"));
                }
                Err(AppendError::Refused(why)) => why,
            };
            let held = &due[s.trace];
            let (org, key) = (held.org_id.as_str(), held.key_id.as_str());
            let agent = bound_agent(&bound, org, key);
            let mut retry = None;
            if matches!(why, Refusal::AgentMismatch { .. }) && !s.replanned {
                let owner = owner_of(
                    store,
                    (org, key),
                    agent.as_deref(),
                    &bound,
                    &s.step.step.session_id,
                )
                .map_err(failed)?;
                let as_agent = agent_for(&owner, &s.step);
                if as_agent != s.step.step.agent_id {
                    let mut step = s.step.clone();
                    step.step.agent_id = as_agent;
                    // Same session, another agent.
                    retry = Some((step, s.fallback, true));
                }
            }
            if retry.is_none() && !s.fallback {
                let owner = owner_of(store, (org, key), agent.as_deref(), &bound, &held.trace_hex)
                    .map_err(failed)?;
                let mut step = s.step.clone();
                step.step.session_id.clone_from(&held.trace_hex);
                step.step.agent_id = agent_for(&owner, &step);
                // The trace's own session, planned against its owner.
                retry = Some((step, true, false));
            }
            match retry {
                Some((step, fallback, replanned)) => {
                    let pending = ledger.submit(WriteRequest::Step(Box::new(step.step.clone())));
                    next.push(Submitted {
                        step,
                        trace: s.trace,
                        fallback,
                        replanned,
                        pending,
                    });
                }
                None => {
                    refused(held, &s.step.step, &why);
                    dropped.insert((s.trace, span_of(&s.step.step)));
                }
            }
        }
        queue = next;
    }
    let outcomes = taken
        .iter()
        .map(|(step, _)| {
            let id = step.trace_id.clone().unwrap_or_default();
            let refusal = Refusal::DuplicateTraceId { trace_id: id };
            (Some(step.clone()), Err(AppendError::Refused(refusal)))
        })
        .collect();
    let answers =
        cairn_store::answer_retries(store, outcomes, cairn_store::RepeatedIds::AnswerEach);
    for ((step, trace), answer) in taken.iter().zip(answers) {
        match answer {
            Ok(_) => {}
            Err(AppendError::Store(e)) => return Err(e.to_string()),
            Err(AppendError::Refused(_)) => {
                let held = &due[*trace];
                let id = step.trace_id.as_deref().unwrap_or_default();
                dropped_step(
                    &held.org_id,
                    &held.key_id,
                    id,
                    "its id is taken by another step (another span with this span's trace and span ids, written while it waited; or this span, written into another session before a crash)",
                );
                dropped.insert((*trace, span_of(step)));
            }
        }
    }
    stats.dropped(dropped.len());
    for (place, (held, spans)) in due.iter().zip(names).enumerate() {
        let released = store
            .release_spans(&held.org_id, &held.key_id, &held.trace_hex, &spans)
            .map_err(failed)?;
        // Counted as forgotten here (another server's flusher, or a
        // request, may have written and forgotten them first).
        let lost = dropped.iter().filter(|(trace, _)| *trace == place).count() as u64;
        stats
            .waited
            .fetch_add(released.saturating_sub(lost), Relaxed);
    }
    Ok(())
}

/// The agent key `key` of `org` is bound to, if any (`bound`: the agents
/// of the org's keys, read this round).
fn bound_agent(
    bound: &HashMap<(String, String), Option<String>>,
    org: &str,
    key: &str,
) -> Option<String> {
    bound
        .get(&(org.to_owned(), key.to_owned()))
        .cloned()
        .flatten()
}

/// Logs a held span's step refused by every session it could go into.
fn refused(held: &HeldTrace, step: &NewStep, why: &Refusal) {
    dropped_step(
        &held.org_id,
        &held.key_id,
        step.trace_id.as_deref().unwrap_or_default(),
        &format!(
            "refused when its wait ended by session {} (the session of its trace's steps, or the one named after its trace, which it was sent to last): {why}",
            crate::error::shown(&step.session_id)
        ),
    );
}

/// The steps of one trace's held `spans` (their session set) in order,
/// as written for `key` (bound to `agent`, if any; `keys`: the agents of
/// the org's keys), by the rules a request of the key follows
/// ([`owner_of`], [`agent_for`]).
fn planned(
    store: &dyn LedgerStore,
    (org, key): (&str, &str),
    agent: Option<&str>,
    keys: &HashMap<(String, String), Option<String>>,
    spans: Vec<Result<SpanSteps, Unmappable>>,
) -> Result<Vec<Planned>, cairn_store::StoreError> {
    let span_agents: Vec<Option<String>> = spans
        .iter()
        .map(|s| Some(s.as_ref().ok()?.agent.as_ref()?.0.clone()))
        .collect();
    let mut steps = Vec::new();
    for plan in map::plan(spans, agent) {
        let owner = owner_of(store, (org, key), agent, keys, &plan.session_id)?;
        for (place, step) in plan.steps {
            let mut planned = Planned {
                step: super::super::ingest::new_step(
                    org,
                    key,
                    &plan.session_id,
                    &plan.agent_id,
                    step,
                ),
                span_agent: span_agents[place].clone(),
                plan_agent: plan.agent_id.clone(),
            };
            planned.step.agent_id = agent_for(&owner, &planned);
            steps.push(planned);
        }
    }
    Ok(steps)
}

/// Whom session `session_id` belongs to, for a step of `key` (bound to
/// `agent`, if any; `keys`: the agents of the org's keys), by the rule a
/// request of the key follows ([`Owner::opened_by`]): a bound key writes
/// as its agent wherever, so for it, as for a session not opened yet,
/// [`Owner::New`].
fn owner_of(
    store: &dyn LedgerStore,
    (org, key): (&str, &str),
    agent: Option<&str>,
    keys: &HashMap<(String, String), Option<String>>,
    session_id: &str,
) -> Result<Owner, cairn_store::StoreError> {
    if agent.is_some() {
        return Ok(Owner::New);
    }
    Ok(match store.session(org, session_id)? {
        None => Owner::New,
        Some(info) => {
            let opener = info.header.caller;
            Owner::opened_by(info.header.agent_id, &opener, key, || {
                Ok(keys.get(&(org.to_owned(), opener.clone())).cloned())
            })?
        }
    })
}

/// The agent `step` is written as into its session, of `owner`
/// ([`Owner::writes`]), or as planned where the owner refuses it (the
/// session then refuses the step).
fn agent_for(owner: &Owner, step: &Planned) -> String {
    owner
        .writes(
            (&step.step.session_id, &step.plan_agent),
            step.span_agent.as_deref(),
        )
        .map_or_else(|_| step.plan_agent.clone(), str::to_owned)
}

/// The span id of a held span's step id (`otel.<trace>.<span>.<n>`).
fn span_of(step: &NewStep) -> String {
    step.trace_id
        .as_deref()
        .and_then(|id| id.split('.').nth(2))
        .unwrap_or_default()
        .to_owned()
}
