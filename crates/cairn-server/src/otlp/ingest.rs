//! `POST /v1/traces`, the one signal Cairn records: the body decoded and
//! its spans mapped on the CPU-bound pool, each span's steps planned and
//! submitted in order, the steps of a session opened as another agent
//! written again as that agent, and the answer with the spans refused.
//! Apart from `mod.rs`, which holds what every endpoint shares, because
//! this is the path from a span to the ledger.

use super::{
    Encoding, OtlpConfig, OtlpError, admit, content_encoding, cpu, decode_otlp_with, decompress,
    held, json_ok, map, protobuf_ok, request_encoding, saturated,
};
use crate::{AppState, Caller};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use cairn_store::{AppendError, NewStep, Refusal, WriteRequest};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceResponse,
};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

/// `POST /v1/traces`.
#[utoipa::path(
    post,
    path = "/v1/traces",
    operation_id = "otlp_traces",
    tag = "traces",
    summary = "Export spans (OTLP/HTTP)",
    description = "OTLP/HTTP traces receiver (docs/OTLP.md): an ExportTraceServiceRequest in binary protobuf (application/x-protobuf) or OTLP/JSON (application/json), optionally Content-Encoding gzip or deflate. Each span (GenAI semantic conventions, OpenInference) becomes hash-chained steps of its session (gen_ai.conversation.id, else session.id, else the trace id; a span naming none waits, acknowledged and durable, up to --otlp-hold-seconds for a span of its trace from the same key that names one, or for the trace's root span); step ids are otel.<trace id>.<span id>.<n>, so an exporter's retry adds nothing. The answer is an ExportTraceServiceResponse in the request's encoding, with partial_success.rejected_spans and error_message when spans were refused. Errors are OTLP Status messages in the request's encoding (JSON: {code, message, error: {code, message}}): 400 invalid_otlp / signed_trace / too_many_spans, 401, 403, 408 timeout (a body that stopped arriving), 413 body_too_large, 415 unsupported_media_type, 429 overloaded and 503 with Retry-After (retry). Also served alone on --otlp-listen. Roles: writer, admin.",
    request_body(content((crate::api_doc::Protobuf = "application/x-protobuf"), (crate::api_doc::JsonObject = "application/json"))),
    responses(
        (status = 200, description = "ExportTraceServiceResponse in the request's encoding", content((crate::api_doc::Protobuf = "application/x-protobuf"), (crate::api_doc::JsonObject = "application/json"))),
        (status = "4XX", description = "An OTLP Status message (google.rpc.Status) in the request's encoding", content((crate::api_doc::Protobuf = "application/x-protobuf"), (crate::api_doc::OtlpStatus = "application/json"))),
        (status = "5XX", description = "An OTLP Status message; 503 carries Retry-After"),
    ),
)]
pub(crate) async fn traces(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (encoding, content_type) = request_encoding(&headers);
    match export_traces(&state, &headers, body, encoding, content_type.as_deref()).await {
        Ok(response) => response,
        Err(e) => e.into_response(encoding),
    }
}

/// A span's fate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Recorded,
    Refused,
}

/// What one export decodes and maps to: each span's steps (or why it
/// cannot be recorded), from the body as sent.
fn decode_and_map(
    bytes: &[u8],
    content_type: &str,
    content_encoding: Option<&str>,
    config: &OtlpConfig,
    limits: &map::MapLimits,
) -> Result<Mapped, OtlpError> {
    let raw = decompress(
        content_encoding,
        bytes,
        config.decode.max_decompressed_bytes,
    )?;
    let request = decode_otlp_with(content_type, &raw, &config.decode)?;
    // A JSON body's members the OTLP/JSON rules made it ignore, when they
    // are likely a mistake (the proto's spelling; any, in a body of no
    // span): said in the answer, rather than a bare success.
    let spans = cairn_wire::otlp::decode::span_count(&request);
    let hint = match Encoding::from_content_type(content_type) {
        Some(Encoding::Json) => cairn_wire::otlp::json_member_hint(&raw, spans),
        // The protobuf counterpart: spans of an OTLP before 0.19.
        _ if spans == 0 => cairn_wire::otlp::protobuf_hint(&raw),
        _ => None,
    };
    drop(raw);
    Ok((map::map_request(&request, limits), hint))
}

/// A request's spans as mapped, and what a JSON body named that the
/// OTLP/JSON rules had ignored ([`cairn_wire::otlp::json_member_hint`]).
type Mapped = (Vec<Result<map::SpanSteps, map::Unmappable>>, Option<String>);

async fn export_traces(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    body: Body,
    encoding: Encoding,
    content_type: Option<&str>,
) -> Result<Response, OtlpError> {
    let started = Instant::now();
    if let Some(e) = saturated(state, 0) {
        return Err(e);
    }
    let (caller, bytes, slot) = admit(state, headers, body, encoding, content_type).await?;
    // Held by the handler and by its blocking work, each of which may
    // outlive the other (a client that hangs up drops the handler).
    let request = Arc::new(slot);
    let config = state.config.otlp;
    let limits = state.store.limits();
    let map_limits = map::MapLimits {
        max_content_bytes: limits.max_content_bytes,
        max_payload_bytes: limits.max_payload_bytes,
        max_attribute_bytes: config.max_attribute_bytes,
        ..map::MapLimits::default()
    };
    let content_type = content_type.unwrap_or("").to_owned();
    let content_encoding = content_encoding(headers);
    let bound = caller.key.agent_id.clone();
    let (work_state, work_caller, work_bytes) = (Arc::clone(state), caller.clone(), bytes.clone());
    let (work_type, work_encoding) = (content_type.clone(), content_encoding.clone());
    let work_request = Arc::clone(&request);
    // Decode, map, plan, and submit every step (in order, so that the
    // sequencer commits each session's steps in plan order).
    let (mut fates, mut reasons, waiting, hint, settlement) = cpu(state, caller.org(), move || {
        let (mut mapped, hint) = decode_and_map(
            &work_bytes,
            &work_type,
            work_encoding.as_deref(),
            &config,
            &map_limits,
        )?;
        let mut fates = vec![Fate::Recorded; mapped.len()];
        let mut reasons: Vec<String> = Vec::new();
        // What the spans to be written hold, as the mapping counted it.
        let mut bytes = 0;
        for (i, m) in mapped.iter().enumerate() {
            match m {
                Err(u) => refuse(&mut fates, &mut reasons, i, || u.reason.clone()),
                Ok(s) => {
                    if let (Some(bound), Some((agent, _))) = (&bound, &s.agent)
                        && agent != bound
                        && *agent != cairn_core::record::hashed_agent_id(bound)
                    {
                        refuse(&mut fates, &mut reasons, i, || {
                            format!(
                                "span {}: this key may only write as agent {bound}, not {agent}",
                                s.span_hex
                            )
                        });
                    } else {
                        bytes += s.counted_bytes;
                    }
                }
            }
        }
        // Spans named by no session wait for the one that names it; held
        // spans of the traces this request settles are written with it.
        let settlement = held::settle(
            work_state.store.as_ref(),
            &work_caller,
            &config,
            &work_state.otlp.held,
            &mapped,
            |i| fates[i] == Fate::Refused,
        )?;
        settlement.apply(&mut mapped);
        bytes += settlement.flushed_bytes();
        fates.resize(mapped.len(), Fate::Recorded);
        // A bound key writes as its agent: its spans' own agents are
        // checked above, and no session's owner is looked up.
        let span_agents = match bound {
            Some(_) => vec![None; mapped.len()],
            None => span_agents(&mapped),
        };
        let plans = map::plan(mapped, bound.as_deref());
        let steps: usize = plans.iter().map(|p| p.steps.len()).sum();
        if let Some(e) = saturated(&work_state, steps) {
            return Err(e);
        }
        let held = work_state.otlp.hold(work_caller.org(), bytes)?;
        let mut submitted = Vec::with_capacity(steps);
        let mut owners = SessionOwners::new(&work_state, &work_caller);
        for plan in plans {
            // Whose the session is matters only for a plan whose spans name
            // other agents than its own (a span of another agent may be
            // refused): a plan of one agent is written as planned, and a
            // session of another agent refuses it (`AgentMismatch`, below),
            // so the common export reads no session here. A bound key
            // writes as its agent, wherever.
            let mixed = bound.is_none()
                && plan.steps.iter().any(|(span, _)| {
                    span_agents[*span]
                        .as_deref()
                        .is_some_and(|agent| agent != plan.agent_id)
                });
            let owner = if mixed {
                owners.of(&plan.session_id)?
            } else {
                &Owner::New
            };
            let planned = (plan.session_id.as_str(), plan.agent_id.as_str());
            for (span, step) in plan.steps {
                if fates[span] == Fate::Refused {
                    continue;
                }
                let id = step.step_id.clone();
                let agent = match owner.writes(planned, span_agents[span].as_deref()) {
                    Ok(agent) => agent,
                    // A held span the session refuses stays held: its wait
                    // ends in the flusher (the request's own spans only
                    // are answered).
                    Err(_) if settlement.is_flushed(span) => {
                        fates[span] = Fate::Refused;
                        continue;
                    }
                    Err(why) => {
                        refuse(&mut fates, &mut reasons, span, || {
                            format!("step {id}: {why}")
                        });
                        continue;
                    }
                };
                let new = new_step(
                    work_caller.org(),
                    &work_caller.key.id,
                    &plan.session_id,
                    agent,
                    step,
                );
                let pending = work_state.ledger.submit(WriteRequest::Step(Box::new(new)));
                submitted.push((span, id, pending));
            }
        }
        let waiting = await_answers(submitted, held, work_request, started);
        Ok((fates, reasons, waiting, hint, Arc::new(settlement)))
    })
    .await?;
    // Steps refused because their session was opened as another agent (by
    // an earlier export, before this session's agent span arrived): step
    // id -> the session's agent.
    let mut mismatched: std::collections::HashMap<String, String> = Default::default();
    // Steps refused because their id is taken: a retry's (the very step
    // recorded under it) or another step's (another span of the same ids,
    // or a step any writer recorded under that id first), told apart
    // below. Step id -> its span and the agent it was written as when
    // that was not the plan's.
    let mut taken: std::collections::HashMap<String, (usize, Option<String>)> = Default::default();
    let mut storage_failure = None;
    for (span, id, answer, elapsed) in answers(waiting).await? {
        match answer {
            Ok(_) => state.metrics.append(elapsed),
            // A held span's step too: written before (by a flush that
            // stopped before forgetting it), or another step's id (told
            // apart below).
            Err(AppendError::Refused(Refusal::DuplicateTraceId { .. })) => {
                taken.insert(id, (span, None));
            }
            Err(AppendError::Refused(Refusal::AgentMismatch { session_agent, .. }))
                if caller.key.agent_id.is_none() =>
            {
                mismatched.insert(id, session_agent);
            }
            Err(AppendError::Refused(_)) if settlement.is_flushed(span) => {
                fates[span] = Fate::Refused;
            }
            Err(AppendError::Refused(r)) => {
                state.metrics.refusal();
                refuse(&mut fates, &mut reasons, span, || format!("step {id}: {r}"));
            }
            Err(AppendError::Store(e)) => storage_failure = Some(e),
        }
    }
    if !mismatched.is_empty() && storage_failure.is_none() {
        // Rare (and cheaper than keeping a copy of every step): derive the
        // steps again and write these as the session's agent, in order.
        let work_state = Arc::clone(state);
        let work_caller = caller.clone();
        let work_request = Arc::clone(&request);
        let (work_bytes, work_type, work_encoding) = (
            bytes.clone(),
            content_type.clone(),
            content_encoding.clone(),
        );
        let adopted: std::collections::HashSet<String> = mismatched.keys().cloned().collect();
        let work_settlement = Arc::clone(&settlement);
        let waiting = cpu(state, caller.org(), move || {
            let (mut mapped, _) = decode_and_map(
                &work_bytes,
                &work_type,
                work_encoding.as_deref(),
                &config,
                &map_limits,
            )?;
            work_settlement.apply(&mut mapped);
            let mut again = Vec::new();
            // Steps refused by the session's owner: their span, id and why.
            let mut refused = Vec::new();
            // The sessions were opened since this request looked (by
            // another request, between the look and the write): looked
            // at again, by the same rule.
            let span_agents = span_agents(&mapped);
            let mut owners = SessionOwners::new(&work_state, &work_caller);
            for plan in map::plan(mapped, None) {
                let owner = owners.of(&plan.session_id)?;
                let planned = (plan.session_id.as_str(), plan.agent_id.as_str());
                for (span, step) in plan.steps {
                    if !adopted.contains(&step.step_id) {
                        continue;
                    }
                    match owner.writes(planned, span_agents[span].as_deref()) {
                        Ok(agent) => {
                            let agent = agent.to_owned();
                            again.push((span, plan.session_id.clone(), agent, step))
                        }
                        Err(why) => refused.push((span, step.step_id, why)),
                    }
                }
            }
            // Bounded as the first submission was.
            if let Some(e) = saturated(&work_state, again.len()) {
                return Err(e);
            }
            let held = work_state.otlp.hold(
                work_caller.org(),
                again
                    .iter()
                    .map(|(_, _, _, step)| step.counted_bytes())
                    .sum(),
            )?;
            let mut pendings = Vec::with_capacity(again.len());
            for (span, session_id, agent, step) in again {
                let id = step.step_id.clone();
                let new = new_step(
                    work_caller.org(),
                    &work_caller.key.id,
                    &session_id,
                    &agent,
                    step,
                );
                let pending = work_state.ledger.submit(WriteRequest::Step(Box::new(new)));
                pendings.push((span, id, pending));
            }
            Ok((
                await_answers(pendings, held, work_request, started),
                refused,
            ))
        })
        .await?;
        let (waiting, refused) = waiting;
        for (span, id, why) in refused {
            if settlement.is_flushed(span) {
                fates[span] = Fate::Refused;
                continue;
            }
            state.metrics.refusal();
            refuse(&mut fates, &mut reasons, span, || {
                format!("step {id}: {why}")
            });
        }
        for (span, id, answer, elapsed) in answers(waiting).await? {
            match answer {
                Ok(_) => state.metrics.append(elapsed),
                Err(AppendError::Refused(Refusal::DuplicateTraceId { .. })) => {
                    let agent = mismatched.get(&id).cloned();
                    taken.insert(id, (span, agent));
                }
                Err(AppendError::Refused(_)) if settlement.is_flushed(span) => {
                    fates[span] = Fate::Refused;
                }
                Err(AppendError::Refused(r)) => {
                    state.metrics.refusal();
                    refuse(&mut fates, &mut reasons, span, || format!("step {id}: {r}"));
                }
                Err(AppendError::Store(e)) => storage_failure = Some(e),
            }
        }
    }
    // Held spans this request wrote whose ids another step had taken.
    let mut dropped = std::collections::HashSet::new();
    if !taken.is_empty() && storage_failure.is_none() {
        let work_state = Arc::clone(state);
        let work_caller = caller.clone();
        let bound = caller.key.agent_id.clone();
        let work_settlement = Arc::clone(&settlement);
        let conflicts = cpu(state, caller.org(), move || {
            taken_by_others(
                &work_state,
                &work_caller,
                bound.as_deref(),
                &work_settlement,
                taken,
                (&bytes, &content_type, content_encoding.as_deref()),
                &config,
                &map_limits,
            )
        })
        .await?;
        for (span, id) in conflicts {
            // A held span whose id another step took while it waited (it
            // was acknowledged long ago: dropped, logged and counted).
            if settlement.is_flushed(span) {
                held::dropped_step(
                    caller.org(),
                    &caller.key.id,
                    &id,
                    "its id is taken by another step (another span with this span's trace and span ids, written while it waited; or this span, written into another session before a crash)",
                );
                dropped.insert(span);
                continue;
            }
            state.metrics.refusal();
            refuse(&mut fates, &mut reasons, span, || {
                format!(
                    "step {id}: its id is taken by another step (another span with this span's trace and span ids, or a step written under that id first)"
                )
            });
        }
        state.otlp.held.dropped(dropped.len());
    }
    if let Some(e) = storage_failure {
        return Err(unreadable(e));
    }
    release_written(state, &caller, &settlement, &fates, dropped.len()).await;
    // The request's own spans are answered (held spans it wrote were
    // acknowledged by the request that sent them).
    fates.truncate(settlement.own);
    let rejected = fates.iter().filter(|f| **f == Fate::Refused).count();
    state
        .metrics
        .otlp_spans((fates.len() - rejected) as u64, rejected as u64);
    let partial = (rejected > 0)
        .then(|| {
            let mut message = summary(rejected, "span", &reasons);
            if let Some(hint) = &hint {
                message.push_str(". Also, ");
                message.push_str(hint);
            }
            let message = crate::error::without_tokens(&message);
            // Exporters drop a partial success's message (the Python SDK
            // does not read it): the operator's log is where it is seen.
            tracing::warn!(
                target: "cairn::otlp",
                org = caller.org(),
                key = %caller.key.id,
                recorded = fates.len() - rejected,
                rejected,
                "OTLP spans rejected: {message}"
            );
            ExportTracePartialSuccess {
                rejected_spans: rejected as i64,
                error_message: message,
            }
        })
        .or(hint.map(|hint| {
            let message = crate::error::without_tokens(&hint);
            // What the members named held was not recorded, and exporters
            // do not show the answer's message: the operator's log does.
            tracing::warn!(
                target: "cairn::otlp",
                org = caller.org(),
                key = %caller.key.id,
                recorded = fates.len(),
                "OTLP/JSON members ignored: {message}"
            );
            ExportTracePartialSuccess {
                rejected_spans: 0,
                error_message: message,
            }
        }));
    Ok(match encoding {
        Encoding::Protobuf => protobuf_ok(ExportTraceServiceResponse {
            partial_success: partial,
        }),
        Encoding::Json => json_ok(partial.map(|p| {
            json!({"rejectedSpans": p.rejected_spans.to_string(), "errorMessage": p.error_message})
        })),
    })
}

/// Forgets the held spans this request wrote whose steps were all
/// recorded or dropped (`dropped` of them: their ids taken by other
/// steps); a failure is logged: they stay held, and are written again, as
/// retries, when their wait ends.
async fn release_written(
    state: &Arc<AppState>,
    caller: &Caller,
    settlement: &held::Settlement,
    fates: &[Fate],
    dropped: usize,
) {
    let failed = (settlement.own..fates.len())
        .filter(|&i| fates[i] == Fate::Refused)
        .collect();
    let written = settlement.written(&failed);
    if written.is_empty() {
        return;
    }
    let (org, key) = (caller.org().to_owned(), caller.key.id.clone());
    let store = Arc::clone(&state.store);
    let released = tokio::task::spawn_blocking(move || {
        let mut released = 0;
        for (trace, spans) in written {
            released += store.release_spans(&org, &key, &trace, &spans)?;
        }
        Ok::<_, cairn_store::StoreError>(released)
    })
    .await;
    match released {
        // Counted as forgotten: a span two requests (or a request and the
        // flusher) both wrote is counted once.
        Ok(Ok(released)) => state
            .otlp
            .held
            .settled(released.saturating_sub(dropped as u64)),
        Ok(Err(e)) => {
            tracing::warn!(target: "cairn::otlp", "forgetting written held spans: {e}")
        }
        Err(_) => {}
    }
}

/// Marks span `span` refused, with `reason` if it is the span's first.
fn refuse(
    fates: &mut [Fate],
    reasons: &mut Vec<String>,
    span: usize,
    reason: impl FnOnce() -> String,
) {
    if fates[span] != Fate::Refused {
        fates[span] = Fate::Refused;
        reasons.push(reason());
    }
}

/// Each span's own agent (as the mapping named it), by its place in the
/// request: what a session that already exists is checked against.
fn span_agents(mapped: &[Result<map::SpanSteps, map::Unmappable>]) -> Vec<Option<String>> {
    mapped
        .iter()
        .map(|m| {
            m.as_ref()
                .ok()?
                .agent
                .as_ref()
                .map(|(agent, _)| agent.clone())
        })
        .collect()
}

/// Whom a session a key without a binding writes into belongs to
/// (docs/OTLP.md "Sessions and agents").
pub(super) enum Owner {
    /// No such session yet: the plan's agent opens it.
    New,
    /// Opened by a key without a binding (this key, or another of the
    /// org's: the exporter's own earlier spans, as a rule, before their
    /// agent span arrived): every span is written as its agent.
    Adopts(String),
    /// Opened by a key bound to its agent, a local user, or a key no
    /// longer in the org: that agent's own. A span naming another agent is
    /// refused (as REST refuses it, `agent_mismatch`); one naming that
    /// agent, or none (a child span exported before its agent span), is
    /// written as it. Otherwise a bound key that opened a session id first
    /// would have every later span of that conversation recorded as its
    /// agent's.
    Owns { agent: String, opener: &'static str },
}

impl Owner {
    /// Whom a session of agent `agent`, opened by `opener`, belongs to
    /// for a key without a binding `key_id`; `binding` looks up the
    /// opener's binding among the org's API keys (`None`: not a key of
    /// the org), and is only called when the opener is another caller
    /// than `key_id`'s (so the keys are read only then).
    pub(super) fn opened_by<E>(
        agent: String,
        opener: &str,
        key_id: &str,
        binding: impl FnOnce() -> Result<Option<Option<String>>, E>,
    ) -> Result<Owner, E> {
        if opener == key_id {
            return Ok(Owner::Adopts(agent));
        }
        Ok(match binding()? {
            Some(None) => Owner::Adopts(agent),
            Some(Some(_)) => Owner::Owns {
                agent,
                opener: "a key bound to that agent",
            },
            None => Owner::Owns {
                agent,
                opener: "a caller that is not an API key of this org",
            },
        })
    }

    /// The agent a step of a span naming `span_agent` (if any) in session
    /// `session_id`, planned as `planned`'s, is written as, or why it is
    /// refused.
    pub(super) fn writes<'a>(
        &'a self,
        (session_id, planned): (&str, &'a str),
        span_agent: Option<&str>,
    ) -> Result<&'a str, String> {
        match self {
            Owner::New => Ok(planned),
            Owner::Adopts(agent) => Ok(agent),
            Owner::Owns { agent, opener } => match span_agent {
                Some(named)
                    if named != agent && cairn_core::record::hashed_agent_id(named) != *agent =>
                {
                    Err(format!(
                        "session {} was opened as agent {} by {opener}, so only spans naming that agent (or no agent) are written into it, and this span names agent {}",
                        crate::error::shown(session_id),
                        crate::error::shown(agent),
                        crate::error::shown(named),
                    ))
                }
                _ => Ok(agent),
            },
        }
    }
}

/// The owners of the sessions a request of a key without a binding
/// writes into, each read once.
struct SessionOwners<'a> {
    state: &'a AppState,
    caller: &'a Caller,
    /// Each session's agent and its opener's binding, as read.
    sessions: std::collections::HashMap<String, Owner>,
    /// The org's API keys, read when a session is opened by another key.
    keys: Option<Vec<cairn_store::ApiKey>>,
}

impl<'a> SessionOwners<'a> {
    fn new(state: &'a AppState, caller: &'a Caller) -> Self {
        Self {
            state,
            caller,
            sessions: Default::default(),
            keys: None,
        }
    }

    /// Who `session_id` belongs to. Fails (503, retry) when the store
    /// cannot answer.
    fn of(&mut self, session_id: &str) -> Result<&Owner, OtlpError> {
        if !self.sessions.contains_key(session_id) {
            let owner = self.read(session_id)?;
            self.sessions.insert(session_id.to_owned(), owner);
        }
        Ok(&self.sessions[session_id])
    }

    fn read(&mut self, session_id: &str) -> Result<Owner, OtlpError> {
        let Some(info) = self
            .state
            .store
            .session(self.caller.org(), session_id)
            .map_err(unreadable)?
        else {
            return Ok(Owner::New);
        };
        let opener = info.header.caller;
        let (state, caller, keys) = (self.state, self.caller, &mut self.keys);
        Owner::opened_by(info.header.agent_id, &opener, &caller.key.id, || {
            // The org's keys, read once, when a session is another
            // caller's.
            if keys.is_none() {
                *keys = Some(state.store.api_keys(caller.org()).map_err(unreadable)?);
            }
            Ok(keys
                .iter()
                .flatten()
                .find(|key| key.id == opener)
                .map(|key| key.agent_id.clone()))
        })
    }
}

/// A store that failed: the export is to be retried (nothing is lost by
/// retrying: recorded steps are retries then).
pub(super) fn unreadable(e: impl std::fmt::Display) -> OtlpError {
    OtlpError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "storage_failure",
        format!("storage failed, retry the export: {e}"),
    )
    .retry_after(1)
}

/// Of the steps refused because their id was taken (`taken`: step id ->
/// its span and the agent it was written as, when not the plan's), those
/// whose recorded step is another than this request's (derived again
/// from the body, as the first submission derived it): their span and
/// id. The others are retries of a recorded export, answered as written
/// ([`cairn_store::answer_retries`], the rule of REST's batches; a second
/// copy of a span within this request stays a duplicate).
#[allow(clippy::too_many_arguments)]
fn taken_by_others(
    state: &AppState,
    caller: &Caller,
    bound: Option<&str>,
    settlement: &held::Settlement,
    taken: std::collections::HashMap<String, (usize, Option<String>)>,
    (bytes, content_type, content_encoding): (&[u8], &str, Option<&str>),
    config: &OtlpConfig,
    map_limits: &map::MapLimits,
) -> Result<Vec<(usize, String)>, OtlpError> {
    let mut outcomes = Vec::with_capacity(taken.len());
    let mut spans = Vec::with_capacity(taken.len());
    // Planned as the first submission planned them (steps written again as
    // their session's agent are only ever a key's without a binding, for
    // which both plans are one).
    let (mut mapped, _) =
        decode_and_map(bytes, content_type, content_encoding, config, map_limits)?;
    settlement.apply(&mut mapped);
    // A key without a binding writes a span into a session another agent
    // opened as that agent (the session's): so a retry of it was recorded.
    let mut session_agents: std::collections::HashMap<String, Option<String>> = Default::default();
    for plan in map::plan(mapped, bound) {
        for (_, step) in plan.steps {
            let Some((span, agent)) = taken.get(&step.step_id) else {
                continue;
            };
            let session_agent = if bound.is_none() && agent.is_none() {
                match session_agents.get(&plan.session_id) {
                    Some(known) => known.clone(),
                    None => {
                        let known = state
                            .store
                            .session(caller.org(), &plan.session_id)
                            .map_err(unreadable)?
                            .map(|info| info.header.agent_id);
                        session_agents.insert(plan.session_id.clone(), known.clone());
                        known
                    }
                }
            } else {
                None
            };
            let written_as = agent
                .as_ref()
                .or(session_agent.as_ref())
                .unwrap_or(&plan.agent_id);
            let id = step.step_id.clone();
            let new = new_step(
                caller.org(),
                &caller.key.id,
                &plan.session_id,
                written_as,
                step,
            );
            spans.push((*span, id.clone()));
            outcomes.push((
                Some(new),
                Err(AppendError::Refused(Refusal::DuplicateTraceId {
                    trace_id: id,
                })),
            ));
        }
    }
    let answers = cairn_store::answer_retries(
        state.store.as_ref(),
        outcomes,
        cairn_store::RepeatedIds::StayDuplicates,
    );
    Ok(spans
        .into_iter()
        .zip(answers)
        .filter(|(_, answer)| answer.is_err())
        .map(|(span, _)| span)
        .collect())
}

/// A submitted step's answer: its span, its id, the ledger's reply, and
/// the time since the request started.
type Answer = (
    usize,
    String,
    Result<cairn_store::Written, AppendError>,
    std::time::Duration,
);

/// Starts awaiting the answers to `submitted` (each with the time since
/// `started`) in a task of its own, which holds `held` and the request's
/// permit until every step is written or refused: a client that hangs up
/// (dropping the handler, whenever it does) gives back neither while its
/// steps still take room in the sequencer's queue. Called from the
/// blocking work that submitted them, so that no await lies between.
fn await_answers(
    submitted: Vec<(usize, String, cairn_store::Pending)>,
    held: super::HeldBytes,
    request: Arc<super::RequestSlot>,
    started: Instant,
) -> tokio::task::JoinHandle<Vec<Answer>> {
    tokio::runtime::Handle::current().spawn(async move {
        let _held = (held, request);
        let mut answers = Vec::with_capacity(submitted.len());
        for (span, id, pending) in submitted {
            let answer = pending.await;
            answers.push((span, id, answer, started.elapsed()));
        }
        answers
    })
}

/// The answers [`await_answers`] gathered.
async fn answers(waiting: tokio::task::JoinHandle<Vec<Answer>>) -> Result<Vec<Answer>, OtlpError> {
    waiting.await.map_err(|_| {
        OtlpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "a worker failed",
        )
    })
}

/// `N spans rejected: reason; reason; ...` (at most five reasons).
fn summary(count: usize, what: &str, reasons: &[String]) -> String {
    let mut text = format!(
        "{count} {what}{} rejected",
        if count == 1 { "" } else { "s" }
    );
    for (i, r) in reasons.iter().take(5).enumerate() {
        text.push_str(if i == 0 { ": " } else { "; " });
        text.push_str(r);
    }
    if reasons.len() > 5 {
        text.push_str(&format!("; and {} more", reasons.len() - 5));
    }
    text
}

/// `text` with each NUL character (U+0000) replaced by a space: a span's
/// text is kept, where a step's own would be refused (the ledger's text
/// columns cannot hold NUL on PostgreSQL; a JSON value holds it escaped).
/// A space, one byte as NUL is, so that text the mapping cut to its
/// limits stays within them.
fn without_nul(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', " ")
    } else {
        text
    }
}

/// A planned step as the ledger's input, written for key `key_id` of
/// org `org`.
pub(super) fn new_step(
    org: &str,
    key_id: &str,
    session_id: &str,
    agent_id: &str,
    step: map::MappedStep,
) -> NewStep {
    let links = cairn_core::record::Links {
        tool_call: step.tool_call,
        ..Default::default()
    };
    NewStep {
        org_id: org.to_owned(),
        session_id: session_id.to_owned(),
        agent_id: agent_id.to_owned(),
        kind_label: step.kind_label.into_owned(),
        content: step.content.map(without_nul),
        input: step.input,
        output: step.output,
        duration_ms: step.duration_ms,
        token_count: step.token_count,
        model: step.model.map(without_nul),
        metadata: Some(step.metadata),
        turn_id: Some(step.turn_id),
        links,
        trace_id: Some(step.step_id),
        caller: key_id.to_owned(),
        ..NewStep::default()
    }
}
