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
/// ([`cairn_store::NewStep::recorded_as`]).
pub(crate) async fn record_step(
    state: &Arc<AppState>,
    step: cairn_store::NewStep,
) -> Result<cairn_store::Written, cairn_store::AppendError> {
    let retry = step.trace_id.is_some().then(|| step.clone());
    let answer = match submit_steps(state, vec![step]).await?.pop() {
        Some(pending) => pending.await,
        None => Err(closed()),
    };
    match (answer, retry) {
        (Err(refused), Some(step)) => already_recorded(state, step, refused).await,
        (answer, _) => answer,
    }
}

/// Steps whose texts together pass this are submitted from the blocking
/// pool; below it (about 0.1 ms of work), on the request's own thread,
/// which a hop to the pool would cost more than it saves.
const INLINE_SUBMIT_BYTES: usize = 64 * 1024;

/// Submits `steps` to the ledger, returning their pending answers in
/// order. Submitting validates and hashes each step, and on PostgreSQL
/// computes its search document's `tsvector` (`Ledger::submit`): CPU work
/// that, for a large batch or step, would hold one of the runtime's few
/// worker threads, and every other request on it, for as long as it
/// takes; such steps are submitted from the blocking pool.
async fn submit_steps(
    state: &Arc<AppState>,
    steps: Vec<cairn_store::NewStep>,
) -> Result<Vec<cairn_store::Pending>, cairn_store::AppendError> {
    let inline = steps
        .iter()
        .map(cairn_store::NewStep::approx_memory)
        .sum::<usize>()
        <= INLINE_SUBMIT_BYTES;
    let ledger = Arc::clone(&state.ledger);
    let submit = move || -> Vec<cairn_store::Pending> {
        steps
            .into_iter()
            .map(|s| ledger.submit(WriteRequest::Step(Box::new(s))))
            .collect()
    };
    if inline {
        return Ok(submit());
    }
    tokio::task::spawn_blocking(submit)
        .await
        .map_err(|_| closed())
}

/// The answer to a write whose submission's worker was lost (the
/// runtime shutting down).
fn closed() -> cairn_store::AppendError {
    cairn_store::AppendError::Store(Arc::new(cairn_store::StoreError::Closed))
}

/// `refused` unless it refused `step` as a duplicate trace id and the
/// step recorded under that id is `step` itself: then what its write
/// answered.
async fn already_recorded(
    state: &Arc<AppState>,
    step: cairn_store::NewStep,
    refused: cairn_store::AppendError,
) -> Result<cairn_store::Written, cairn_store::AppendError> {
    if !matches!(
        refused,
        cairn_store::AppendError::Refused(cairn_store::Refusal::DuplicateTraceId { .. })
    ) {
        return Err(refused);
    }
    let store = Arc::clone(&state.store);
    let answered = refused.clone();
    let retried =
        tokio::task::spawn_blocking(move || step.retried(store.as_ref(), &answered)).await;
    match retried {
        Ok(Ok(Some(written))) => Ok(written),
        Ok(Err(failed)) => Err(cairn_store::AppendError::Store(Arc::new(failed))),
        Ok(Ok(None)) | Err(_) => Err(refused),
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
    let (value, parsed) = parse_json(&state, caller.org(), &body)?;
    let step = step_for(&caller, value)?;
    // What the ledger makes of the step (its prepared copy, document and
    // the store's form of it), counted with the body as a batch's are.
    let memory = crate::limits::RequestMemory::new(parsed);
    crate::hold_more(
        &state,
        caller.org(),
        Some(&memory),
        step.approx_prepared_memory(),
    )?;
    match record_step(&state, step).await {
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
            Err(e.into())
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
    let (items, parsed) = parse_json(&state, caller.org(), &body)?;
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
    // Once built, what the ledger makes of each step beside it (its
    // prepared copy, full-text document and the store's form of it), and
    // the copy kept of a step that names its trace id.
    crate::hold_more(
        &state,
        caller.org(),
        Some(&memory),
        steps
            .iter()
            .map(|s| {
                let step = s.approx_memory();
                cairn_store::NewStep::prepared_memory_of(step)
                    + s.trace_id.as_ref().map_or(0, |_| step)
            })
            .sum(),
    )?;
    // Submit everything first so the sequencer commits it together; a
    // copy of each step that names its trace id, for a retried batch.
    let retries: Vec<_> = steps
        .iter()
        .map(|s| s.trace_id.is_some().then(|| s.clone()))
        .collect();
    let pending = submit_steps(&state, steps).await.map_err(ApiError::from)?;
    let mut outcomes = Vec::with_capacity(pending.len());
    for (retry, p) in retries.into_iter().zip(pending) {
        outcomes.push((retry, p.await));
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
        blocking(&state, move |store| {
            Ok(cairn_store::answer_retries(
                store,
                outcomes,
                cairn_store::RepeatedIds::StayDuplicates,
            ))
        })
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
) -> Result<Json, ApiError> {
    let org = caller.org().to_owned();
    let step = blocking(&state, move |store| {
        store
            .step_by_trace(&org, &trace_id)?
            .ok_or_else(|| ApiError::not_found(format!("step {}", crate::error::shown(&trace_id))))
    })
    .await?;
    Ok(axum::Json(wire::step_to_json(step.seq, &step.record)))
}

/// Erases a step's payload (admin): the values become commitments, every
/// hash stays, and the erasure is recorded.
#[utoipa::path(
    post,
    path = "/v1/steps/{trace_id}/erase",
    operation_id = "erase_step",
    tag = "steps",
    summary = "Erase a step's payload",
    description = "GDPR-style erasure: content, input_data, output_data and metadata are replaced by their commitments; every hash stays and everything still verifies; the erasure is itself a record. Body: reason. Roles: admin.",
    params(
        ("trace_id" = crate::api_doc::Id, Path, description = "The step"),
    ),
    request_body = crate::api_doc::EraseInput,
    responses(
        (status = 200, description = "Erased", content_type = "application/json", body = serde_json::Value),
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
    let reason = if body.is_empty() {
        String::new()
    } else {
        let (v, _parsed) = parse_json(&state, caller.org(), &body)?;
        members(&v, &["reason"])?;
        optional_string(&v, "reason")?.unwrap_or_default()
    };
    if reason.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_request",
            "reason is required (it is recorded with the erasure)",
        ));
    }
    require_own_step(&state, &caller, &trace_id).await?;
    let request = WriteRequest::Erase {
        org_id: caller.org().to_owned(),
        trace_id: trace_id.clone(),
        reason,
        actor: caller.key.id.clone(),
    };
    match state.ledger.submit(request).await? {
        Written::Erased { seqs } => Ok(axum::Json(
            json!({"trace_id": trace_id, "erased": true, "erasure_seq": seqs.first()}),
        )),
        other => Err(crate::unexpected(other)),
    }
}
