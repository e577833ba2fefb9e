//! Steps over HTTP: record one or a batch, read one, search, erase a
//! payload.

use super::*;

/// A step body (seed 000's member names). A key bound to an agent may only
/// write as that agent, and is the default agent.
pub(crate) fn step_for(caller: &Caller, value: Value) -> Result<cairn_store::NewStep, ApiError> {
    if let Some(object) = value.as_object() {
        input::refuse_unknown_step_members(object)?;
    }
    let step = wire::step_from_json(
        value,
        caller.org(),
        caller.key.agent_id.as_deref(),
        &caller.key.id,
    )
    .map_err(ApiError::from)?;
    if let Some(bound) = &caller.key.agent_id
        && *bound != step.agent_id
        && cairn_core::record::hashed_agent_id(bound) != step.agent_id
    {
        return Err(ApiError::forbidden(format!(
            "this key may only write as agent {bound}, not {}",
            step.agent_id
        )));
    }
    check_shape(&step).map_err(|e| ApiError::from(cairn_store::Refusal::Invalid(e)))?;
    Ok(step)
}

/// Records `step` (every surface's one way to append a step): a step the
/// ledger refuses as a duplicate trace id is looked up, and if the step
/// recorded under that id is this very step (a retry whose first answer
/// was lost), it is answered as the first write was
/// ([`cairn_store::NewStep::recorded_as`]). What the ledger makes of the
/// step is counted against `memory` (the request's count; `None`: on its
/// own, as over MCP's stdio) until it is answered ([`submit_steps`]).
pub(crate) async fn record_step(
    state: &Arc<AppState>,
    org: &str,
    memory: Option<&crate::limits::RequestMemory>,
    step: cairn_store::NewStep,
) -> Result<cairn_store::Written, ApiError> {
    let submitted = submit_steps(state, org, memory, vec![step]).await?;
    let (answer, retry) = match submitted.into_iter().next() {
        Some(Submitted { retry, pending }) => (pending.await, retry),
        None => (Err(closed()), None),
    };
    match (answer, retry) {
        (Err(refused), Some(step)) => already_recorded(state, step, refused).await,
        (answer, _) => Ok(answer?),
    }
}

/// Prepares `steps` (`Ledger::prepare`: validation, hashes and, on
/// PostgreSQL, the search document's `tsvector`), counts what each
/// prepared step holds (its copy, its document and the store's form of
/// it, as allocated, and one more copy of a step that names its trace id,
/// kept to answer a retry) against `memory` or on its own, then queues
/// them in order. What is counted (and `memory`, the request's whole
/// count) stays counted until each queued step is written, even if the
/// caller stops waiting ([`crate::limits::UntilWritten`]). A large batch
/// or step is prepared on the CPU pool (`cpu::CpuPool`): that CPU work would
/// otherwise hold one of the runtime's few worker threads, and every other
/// request on it. Past the memory budget nothing is queued: `503
/// overloaded`.
pub(crate) async fn submit_steps(
    state: &Arc<AppState>,
    org: &str,
    memory: Option<&crate::limits::RequestMemory>,
    steps: Vec<cairn_store::NewStep>,
) -> Result<Vec<Submitted>, ApiError> {
    let sizes: Vec<usize> = steps
        .iter()
        .map(cairn_store::NewStep::approx_memory)
        .collect();
    let large = sizes.iter().sum::<usize>() > crate::INLINE_WORK_BYTES;
    let ledger = Arc::clone(&state.ledger);
    // The request's count goes with the work: a client that hangs up
    // drops this handler, not a preparation running on the pool.
    let counted = memory.cloned();
    type Prepared = (
        usize,
        Option<cairn_store::NewStep>,
        Result<cairn_store::PreparedStep, cairn_store::Refusal>,
    );
    let prepare = move || -> Vec<Prepared> {
        let _counted = counted;
        steps
            .into_iter()
            .zip(sizes)
            .map(|(s, size)| {
                // A step that names its trace id is kept to answer a
                // retry, copied here (on the pool for a large one).
                let retry = s.trace_id.is_some().then(|| s.clone());
                let copies = if retry.is_some() { 2 } else { 1 };
                let prepared = ledger.prepare(s);
                let held = prepared
                    .as_ref()
                    .map_or(0, |p| copies * size + p.search_bytes());
                (held, retry, prepared)
            })
            .collect()
    };
    let prepared = state
        .cpu
        .run_when(org, large, "preparing the steps", prepare)
        .await?;
    let held = crate::hold_more(
        state,
        org,
        memory,
        prepared.iter().map(|(bytes, _, _)| bytes).sum(),
    )?;
    let until_written = crate::limits::UntilWritten::new(memory, held);
    let submitted = prepared
        .into_iter()
        .map(|(_, retry, prepared)| Submitted {
            retry,
            pending: match prepared {
                Ok(p) => {
                    crate::queue_write(state, &until_written, WriteRequest::Prepared(Box::new(p)))
                }
                Err(refusal) => {
                    cairn_store::Pending::answered(Err(cairn_store::AppendError::Refused(refusal)))
                }
            },
        })
        .collect();
    Ok(submitted)
}

/// A step queued by [`submit_steps`]: its answer to come, and the step
/// itself if it names its trace id (to answer a retry whose first answer
/// was lost, [`cairn_store::NewStep::recorded_as`]).
pub(crate) struct Submitted {
    /// The step as sent, if it names its trace id.
    pub(crate) retry: Option<cairn_store::NewStep>,
    /// Its answer.
    pub(crate) pending: cairn_store::Pending,
}

/// The answer to a write whose submission's worker was lost.
fn closed() -> cairn_store::AppendError {
    cairn_store::AppendError::Store(Arc::new(cairn_store::StoreError::Closed))
}

/// `refused` unless it refused `step` as a duplicate trace id and the
/// step recorded under that id is `step` itself: then what its write
/// answered. A failed read of the recorded step is its failure (`503
/// storage_failure`), a read that panicked `500 internal` (as for a
/// batch), never the refusal: that would tell a client retrying after a
/// lost answer that its step conflicts with another.
async fn already_recorded(
    state: &Arc<AppState>,
    step: cairn_store::NewStep,
    refused: cairn_store::AppendError,
) -> Result<cairn_store::Written, ApiError> {
    if !cairn_store::may_be_retry(&refused) {
        return Err(refused.into());
    }
    let answered = refused.clone();
    // The recorded step is held parsed to be compared.
    let org = step.org_id.clone();
    let retried = crate::on_cpu(state, &org, "checking a retried step", move |store| {
        step.retried(store, &answered)
    })
    .await?;
    match retried {
        Ok(Some(written)) => Ok(written),
        Ok(None) => Err(refused.into()),
        Err(failed) => Err(cairn_store::AppendError::Store(Arc::new(failed)).into()),
    }
}

/// The rules of a step's shape that the OpenAPI document states as
/// patterns and ranges (its ids, its confidence), checked before anything
/// is submitted, so that a batch item breaking one is refused as malformed
/// (the whole batch, naming the item) rather than answered per item like
/// what the ledger refuses (a sealed session, a step type the vocabulary or
/// the session's profile does not have). The engine checks them again.
fn check_shape(step: &cairn_store::NewStep) -> Result<(), cairn_core::record::RecordError> {
    use cairn_core::record::{RecordError, validate_id};
    validate_id("session_id", &step.session_id)?;
    validate_id("agent_id", &step.agent_id)?;
    for (field, value) in [
        ("trace_id", &step.trace_id),
        ("turn_id", &step.turn_id),
        ("task_id", &step.task_id),
    ] {
        if let Some(value) = value {
            validate_id(field, value)?;
        }
    }
    if let Some(confidence) = step.confidence
        && !(0.0..=1.0).contains(&confidence)
    {
        return Err(RecordError::ConfidenceOutOfRange { value: confidence });
    }
    Ok(())
}

#[utoipa::path(
    post,
    path = "/v1/steps",
    operation_id = "append_step",
    tag = "steps",
    summary = "Record a step",
    description = "Seed 000's log_reasoning_step. A key bound to an agent writes only as that agent. Signed steps carry trace_id, step_index, created_at, seed and signature (FORMAT.md 7.3). Roles: writer, admin.",
    request_body = crate::api_doc::StepInput,
    responses(
        (status = 201, description = "OK", content_type = "application/json", body = crate::api_doc::StepWritten),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn append_step(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Body(body): Body,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_write(), "record steps")?;
    Caller::require_enabled(&state)?;
    let started = Instant::now();
    let (value, parsed) = parse_json(&state, caller.org(), &body).await?;
    let step = step_for(&caller, value)?;
    let memory = crate::limits::RequestMemory::new(parsed);
    match record_step(&state, caller.org(), Some(&memory), step).await {
        Ok(written) => {
            state.metrics.append(started.elapsed());
            Ok((
                StatusCode::CREATED,
                axum::Json(wire::written_to_json(&written)),
            )
                .into_response())
        }
        Err(e) => {
            state.metrics.refusal();
            Err(e)
        }
    }
}

#[utoipa::path(
    post,
    path = "/v1/steps/batch",
    operation_id = "append_batch",
    tag = "steps",
    summary = "Record many steps",
    description = "A JSON array of steps (1 to 10000), group-committed; one result per step, in order. Roles: writer, admin.",
    request_body = crate::api_doc::StepBatch,
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = crate::api_doc::BatchResult),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn append_batch(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Body(body): Body,
) -> Result<Json, ApiError> {
    caller.require(caller.key.role.can_write(), "record steps")?;
    Caller::require_enabled(&state)?;
    let started = Instant::now();
    let (items, parsed) = parse_json(&state, caller.org(), &body).await?;
    let Value::Array(items) = items else {
        return Err(ApiError::bad_request(
            "invalid_request",
            "a batch is a JSON array of steps",
        ));
    };
    if items.is_empty() || items.len() > cairn_store::ops::MAX_STEPS_PER_WRITE {
        return Err(ApiError::bad_request(
            "invalid_request",
            format!(
                "a batch holds 1 to {} steps",
                cairn_store::ops::MAX_STEPS_PER_WRITE
            ),
        ));
    }
    // What the ledger holds for each step while it is written (its
    // prepared copy, openings and commitments), counted with the body
    // before any is built.
    let memory = crate::limits::RequestMemory::new(parsed);
    crate::hold_more(
        &state,
        caller.org(),
        Some(&memory),
        items.len() * cairn_store::NewStep::SEQUENCING_MEMORY,
    )?;
    // Every item must be a well-formed step before anything is written: a
    // malformed item is a client bug, and the whole batch is refused with
    // its position. What the ledger refuses (a sealed session, a clock
    // skew) is answered per item below.
    let mut steps = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let step = step_for(&caller, item).map_err(|mut e| {
            e.message = format!(
                "step {index} of the batch: {} (nothing in this batch was written)",
                e.message
            );
            e.field = Some(match e.field.take() {
                Some(field) => format!("[{index}].{field}"),
                None => format!("[{index}]"),
            });
            e
        })?;
        steps.push(step);
    }
    // Submit everything first so the sequencer commits it together (what
    // the ledger makes of each step counted with the body), each step that
    // names its trace id kept for a retried batch.
    let submitted = submit_steps(&state, caller.org(), Some(&memory), steps).await?;
    let mut outcomes = Vec::with_capacity(submitted.len());
    for Submitted { retry, pending } in submitted {
        outcomes.push((retry, pending.await));
    }
    // Steps refused as duplicate trace ids may be a retried batch's: all
    // looked up in one blocking task, in the batch's order (the trace ids
    // answered as written, recorded now or before, make a later copy in
    // the same batch its duplicate, whichever copy matched).
    let duplicates = outcomes.iter().any(|(retry, outcome)| {
        retry.is_some()
            && outcome
                .as_ref()
                .err()
                .is_some_and(cairn_store::may_be_retry)
    });
    let outcomes: Vec<Result<cairn_store::Written, cairn_store::AppendError>> = if duplicates {
        // The recorded steps are held parsed to be compared
        // (cairn_store::RETRY_LOOKUP_CHUNK at a time).
        crate::on_cpu(
            &state,
            caller.org(),
            "checking a retried batch",
            move |store| {
                cairn_store::answer_retries(
                    store,
                    outcomes,
                    cairn_store::RepeatedIds::StayDuplicates,
                )
            },
        )
        .await?
    } else {
        outcomes.into_iter().map(|(_, outcome)| outcome).collect()
    };
    let mut results = Vec::with_capacity(outcomes.len());
    let mut accepted = 0;
    for outcome in outcomes {
        let outcome = outcome.map_err(ApiError::from);
        results.push(match outcome {
            Ok(w) => {
                accepted += 1;
                state.metrics.append(started.elapsed());
                wire::written_to_json(&w)
            }
            Err(e) => {
                state.metrics.refusal();
                // The one error shape, with the field where there is one.
                e.body()
            }
        });
    }
    let refused = results.len() - accepted;
    Ok(axum::Json(
        json!({"accepted": accepted, "refused": refused, "results": results}),
    ))
}

#[utoipa::path(
    get,
    path = "/v1/steps/{trace_id}",
    operation_id = "get_step",
    tag = "steps",
    summary = "One step by trace id",
    params(
        ("trace_id" = crate::api_doc::Id, Path, description = "The step's trace id"),
    ),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = crate::api_doc::Step),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn get_step(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(trace_id): Path<String>,
) -> Result<axum::response::Response, ApiError> {
    // The answer's text is made where the step is read, and only the text
    // is kept while it is sent.
    let body = read_step(&state, caller.org(), &trace_id, |step| {
        wire::step_to_json(step.seq, &step.record).to_string()
    })
    .await?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// Reads the step `trace_id` of `org` and makes what is needed of it with
/// `keep` where it is read ([`crate::on_cpu`]), so that the parsed step
/// is dropped there: three payloads of 130,000 zeros take about 12 MB
/// parsed, and 32 requests reading such a step on the blocking pool at
/// once had peaked at 449 MB. 404 for a step the org does not have.
pub(crate) async fn read_step<T: Send + 'static>(
    state: &AppState,
    org: &str,
    trace_id: &str,
    keep: impl FnOnce(cairn_store::StoredStep) -> T + Send + 'static,
) -> Result<T, ApiError> {
    let (org_id, trace_id) = (org.to_owned(), trace_id.to_owned());
    crate::on_cpu(state, org, "reading a step", move |store| {
        store
            .step_by_trace(&org_id, &trace_id)?
            .map(keep)
            .ok_or_else(|| ApiError::not_found(format!("step {}", crate::error::shown(&trace_id))))
    })
    .await?
}

/// Erases a step's payload (admin): the values become commitments, every
/// hash stays, and the erasure is recorded.
#[utoipa::path(
    post,
    path = "/v1/steps/{trace_id}/erase",
    operation_id = "erase_step",
    tag = "steps",
    summary = "Erase a step's payload",
    description = "GDPR-style erasure: content, input_data, output_data and metadata are replaced by their commitments; every hash stays and everything still verifies; the erasure is itself a record. A step imported from an agent-signed trace (trace id <trace_id>.<i>) erases that trace's record with it: it is withheld, its hash kept, behind a trace-erasure record (FORMAT.md 8). Body: reason. Roles: admin.",
    params(
        ("trace_id" = crate::api_doc::Id, Path, description = "The step"),
    ),
    request_body = crate::api_doc::EraseInput,
    responses(
        (status = 200, description = "{trace_id, erased: true, erasure_seq, trace_erasure_seq}: the positions of the erasure record and of the trace-erasure record this erasure wrote: when the step came from a signed trace still held, its record is withheld now (trace_erasure_seq null when the step came from no signed trace, or from one an earlier erasure of another of its steps already withheld; erasure_seq null when the step was erased before and only its trace now, in a store written before traces were erased with their steps)", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn erase_step(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(trace_id): Path<String>,
    Body(body): Body,
) -> Result<Json, ApiError> {
    caller.require(caller.key.role.can_admin(), "erase records")?;
    Caller::require_enabled(&state)?;
    // The body's count is kept until the erasure is written: the reason
    // rides in the queued write.
    let (reason, counted) = if body.is_empty() {
        (None, crate::limits::UntilWritten::nothing())
    } else {
        let (v, parsed) = parse_json(&state, caller.org(), &body).await?;
        members(&v, &["reason"])?;
        (
            optional_string(&v, "reason")?,
            crate::limits::UntilWritten::new(None, Some(parsed)),
        )
    };
    // Refused as MCP refuses it (a missing member, then the store's rule
    // for the reason), before the step is looked up.
    let reason = reason.ok_or_else(|| crate::input::missing_field("reason"))?;
    if let Some(refusal) = cairn_store::erasure_refusal(&reason, &state.store.limits()) {
        return Err(refusal.into());
    }
    require_own_step(&state, &caller, &trace_id).await?;
    let request = WriteRequest::Erase {
        org_id: caller.org().to_owned(),
        trace_id: trace_id.clone(),
        reason,
        actor: caller.key.id.clone(),
    };
    // Only the queued write's copy of the reason stays while it waits.
    drop(body);
    match crate::queue_write(&state, &counted, request).await? {
        Written::Erased { seqs, trace_seqs } => Ok(axum::Json(json!({
            "trace_id": trace_id,
            "erased": true,
            "erasure_seq": seqs.first(),
            "trace_erasure_seq": trace_seqs.first(),
        }))),
        other => Err(crate::unexpected(other)),
    }
}
