//! Seed 002 over HTTP: `parseThinking`, recording a turn (optionally from a
//! raw thinking blob), one turn as Markdown or JSON, and a session's audit
//! trail across its turns.

use crate::held::{HeldAnswer, StepPiece};
use crate::input::StrictQuery;
use crate::limits::ExpensiveSlot;
use crate::render::Rendered;
use crate::sessions::{Shape, Steps, StreamedSteps, TurnsForm};
use crate::{ApiError, AppState, Caller, blocking, parse_json, render, step_for, wire};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_store::{NewStep, WriteRequest};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::sync::Arc;

/// The steps a thinking text splits into (nothing recorded).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Parsed {
    /// The steps, in order.
    pub steps: Vec<ParsedStep>,
}

/// One step of a parsed thinking text.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ParsedStep {
    /// thinking, plan, waiting_approval, execute or error.
    pub phase: String,
    /// Its bracket marker, e.g. `[思考]`.
    pub label: String,
    /// The canonical kind it is recorded as.
    pub kind: String,
    /// Its text, trimmed.
    pub content: String,
}

/// The parsed steps of a thinking text, held as memory of `org`'s
/// requests until the answer is sent (REST and MCP alike); refused past
/// the steps one turn may hold ([`cairn_store::ops::MAX_STEPS_PER_WRITE`]),
/// as recording it would be, or while requests hold too much.
pub(crate) fn parsed_answer(
    state: &AppState,
    org: &str,
    text: &str,
    memory: Option<&crate::limits::RequestMemory>,
) -> Result<(Parsed, Option<crate::limits::HeldMemory>), ApiError> {
    let parsed = parsed(text)?;
    // Up to 10,000 small steps from one text: the answer is held three
    // times over while it is sent (these steps, the JSON value made from
    // them, its text), each step with its strings' headers and the map of
    // its four members.
    const PER_STEP: usize = 4 * 24 + 640;
    let one_copy: usize = parsed
        .steps
        .iter()
        .map(|s| PER_STEP + s.phase.len() + s.label.len() + s.kind.len() + s.content.len())
        .sum();
    let held = crate::hold_more(state, org, memory, one_copy.saturating_mul(3))?;
    Ok((parsed, held))
}

/// [`parsed_answer`] and what `finish` makes of it (the answer's JSON), on
/// the CPU pool for a text past [`crate::INLINE_WORK_BYTES`] (REST
/// `/v1/thinking/parse` and MCP `parse_thinking`), the request's count
/// kept until the work ends.
pub(crate) async fn parsed_answer_when_large<T: Send + 'static>(
    state: &Arc<AppState>,
    org: &str,
    text: String,
    memory: Option<crate::limits::RequestMemory>,
    finish: impl FnOnce(&Parsed) -> T + Send + 'static,
) -> Result<(T, Option<crate::limits::HeldMemory>), ApiError> {
    let large = text.len() > crate::INLINE_WORK_BYTES;
    let (work_state, org_id) = (Arc::clone(state), org.to_owned());
    state
        .cpu
        .run_when(org, large, "splitting the thinking text", move || {
            let (answer, held) = parsed_answer(&work_state, &org_id, &text, memory.as_ref())?;
            drop(text);
            Ok((finish(&answer), held))
        })
        .await?
}

/// The parsed steps of a thinking text; refused past the steps one turn
/// may hold ([`cairn_store::ops::MAX_STEPS_PER_WRITE`]), as recording it
/// would be.
fn parsed(text: &str) -> Result<Parsed, ApiError> {
    let steps = cairn_core::thinking::parse_thinking_at_most(
        text,
        cairn_store::ops::MAX_STEPS_PER_WRITE,
    )
    .map_err(|e| {
        ApiError::bad_request(
            "invalid_request",
            format!(
                "{e}: one request records at most that many steps of a turn, so split the text"
            ),
        )
    })?
    .into_iter()
    .map(|p| ParsedStep {
        phase: p.phase.to_owned(),
        label: p.kind.bracket_label().to_owned(),
        kind: p.kind.as_str().to_owned(),
        content: p.content,
    })
    .collect();
    Ok(Parsed { steps })
}

/// `POST /v1/thinking/parse`: `{"text"}` to `{"steps": [{phase, label,
/// kind, content}]}`; records nothing.
#[utoipa::path(
    post,
    path = "/v1/thinking/parse",
    operation_id = "turns_parse",
    tag = "thinking",
    summary = "Parse thinking text into steps",
    description = "Seed 002's parseThinking: bracket markers first ([思考] [計画] [承認待ち] [実行] [エラー]), then numbered or bulleted lines after a plan keyword (plan, steps, 手順) as plan, lines with error, failed, エラー or 失敗 as error, the rest as thinking. Records nothing. A text that splits into more than 10000 steps (the most one request records) is refused (400).",
    request_body = crate::api_doc::ThinkingInput,
    responses(
        (status = 200, description = "{steps: [{phase, label, kind, content}]}", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn parse(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    crate::limits::Body(body): crate::limits::Body,
) -> Result<Response, ApiError> {
    let (v, parsed) = parse_json(&state, caller.org(), &body).await?;
    let memory = crate::limits::RequestMemory::new(parsed);
    crate::members(&v, &["text"])?;
    let text = crate::required_string(&v, "text")?;
    drop(v);
    // The answer's text is made with it, so that what it holds is counted
    // until it is written out.
    let (json, held) =
        parsed_answer_when_large(&state, caller.org(), text, Some(memory.clone()), |answer| {
            serde_json::to_vec(&wire::to_json(answer)).unwrap_or_default()
        })
        .await?;
    let response = (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json,
    )
        .into_response();
    Ok(crate::limits::holding_until_sent(response, (memory, held)))
}

/// `POST /v1/sessions/{session_id}/turns`: records one turn: `thinking`
/// (raw text, parsed into phases) and/or `steps` (step objects), numbered
/// within the turn after the steps it already has.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/turns",
    operation_id = "turns_record",
    tag = "sessions",
    summary = "Record a turn",
    description = "Seed 002: records one turn of a session: thinking (raw text, parsed into phase steps) and/or steps (step objects), all with the turn id and numbered within the turn after the steps it already has (numbered as they are written, past the turn's highest turn_step: requests of one turn sent at once never share a number; a step that gives its own turn_step keeps it and the others go around it, and a number another step of the turn holds is refused, 409 turn_step_taken; a step naming another session or turn is refused; a turn numbered up to 2^53 - 1 takes no more). turn_id defaults to a new UUIDv7. agent_id and model are also each explicit step's unless it names its own. Roles: writer, admin. A turn is one unit: if any step is refused, none is written and the answer (4xx, the refused step's code) names it: steps[i], or a phase of the thinking text. One request records at most 10000 steps, the thinking text's phases and the steps together (400 beyond, nothing written); send more in several requests with the same turn_id. A turn whose every step names its trace_id, sent again after its answer was lost (the same steps, turn_id and order), is answered as its first write (201, session_created false); one with a thinking text (whose phases get new ids), or that differs, is 409 duplicate_trace_id.",
    params(
        ("session_id" = crate::api_doc::Id, Path, description = "The session (created on first use)"),
    ),
    request_body = crate::api_doc::TurnInput,
    responses(
        (status = 201, description = "{session_id, turn_id, accepted, results}", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn record(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(session_id): Path<String>,
    crate::limits::Body(body): crate::limits::Body,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_write(), "record steps")?;
    Caller::require_enabled(&state)?;
    let (v, parsed) = parse_json(&state, caller.org(), &body).await?;
    let memory = crate::limits::RequestMemory::new(parsed);
    crate::members(&v, &["thinking", "turn_id", "agent_id", "model", "steps"])?;
    let text = |k: &str| crate::optional_string(&v, k);
    let thinking = text("thinking")?;
    let turn_id = text("turn_id")?.unwrap_or_else(cairn_store::new_id);
    // The template: the session, agent and model every parsed step gets.
    let mut base = json!({"session_id": session_id, "step_type": "thinking"});
    for k in ["agent_id", "model"] {
        if let Some(value) = text(k)? {
            base[k] = json!(value);
        }
    }
    let template = step_for(&caller, base)?;
    let mut explicit = Vec::new();
    match v.get("steps") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            // Refused before any step is built, as a batch is.
            if items.len() > cairn_store::ops::MAX_STEPS_PER_WRITE {
                return Err(ApiError::bad_request(
                    "invalid_request",
                    cairn_store::ops::TurnTooLarge {
                        explicit: items.len(),
                    }
                    .to_string(),
                ));
            }
            // The steps built from the items, counted before they are.
            crate::hold_more(
                &state,
                caller.org(),
                Some(&memory),
                items.iter().map(cairn_core::json::approx_memory).sum(),
            )?;
            for (index, item) in items.iter().enumerate() {
                let mut item = item.clone();
                let Some(obj) = item.as_object_mut() else {
                    return Err(ApiError::bad_request(
                        "invalid_argument",
                        format!("steps[{index}] is not a step object: steps must be step objects"),
                    )
                    .with_field(format!("steps[{index}]")));
                };
                match obj.get("session_id") {
                    None => {}
                    Some(Value::String(other)) if *other == session_id => {}
                    Some(Value::String(other)) => {
                        return Err(ApiError::bad_request(
                            "invalid_argument",
                            format!(
                                "steps[{index}]: a step of session {} in a turn of session {} (nothing of this turn was written)",
                                crate::error::shown(other),
                                crate::error::shown(&session_id)
                            ),
                        )
                        .with_field(format!("steps[{index}].session_id")));
                    }
                    // Read as `/v1/steps` reads it: a string or nothing.
                    Some(_) => {
                        return Err(ApiError::bad_request(
                            "invalid_argument",
                            format!("steps[{index}]: session_id must be a string (nothing of this turn was written)"),
                        )
                        .with_field(format!("steps[{index}].session_id")));
                    }
                }
                obj.insert("session_id".into(), json!(session_id));
                // The request's agent and model are each step's unless it
                // names its own (a member given as null names none).
                let defaults = [
                    ("agent_id", Some(json!(template.agent_id))),
                    ("model", template.model.as_ref().map(|m| json!(m))),
                ];
                for (member, value) in defaults {
                    if let Some(value) = value
                        && obj.get(member).is_none_or(Value::is_null)
                    {
                        obj.insert(member.into(), value);
                    }
                }
                explicit.push(step_for(&caller, item).map_err(|mut e| {
                    e.message = format!(
                        "steps[{index}]: {} (nothing of this turn was written)",
                        e.message
                    );
                    e.field = Some(match e.field.take() {
                        Some(field) => format!("steps[{index}].{field}"),
                        None => format!("steps[{index}]"),
                    });
                    e
                })?);
            }
        }
        Some(_) => {
            return Err(
                ApiError::bad_request("invalid_argument", "steps must be an array")
                    .with_field("steps"),
            );
        }
    }
    let body = record_turn(
        &state,
        &caller,
        &template,
        &turn_id,
        thinking.as_deref(),
        Some(explicit),
        Some(&memory),
    )
    .await?;
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

/// The members of a turn request that every step built from its
/// thinking text takes as they are.
const TURN_MEMBERS: [&str; 4] = ["agent_id", "model", "session_id", "turn_id"];

/// A turn just recorded.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TurnRecorded {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: String,
    /// How many steps were recorded.
    pub accepted: usize,
    /// Each step's position and hashes, in order.
    pub results: Vec<wire::StepWritten>,
}

/// Records a turn (HTTP and MCP): the parsed thinking, then `explicit`
/// (`None` where the surface takes no steps), numbered within the turn
/// after the steps it already has.
pub(crate) async fn record_turn(
    state: &Arc<AppState>,
    caller: &Caller,
    template: &NewStep,
    turn_id: &str,
    thinking: Option<&str>,
    explicit: Option<Vec<NewStep>>,
    memory: Option<&crate::limits::RequestMemory>,
) -> Result<TurnRecorded, ApiError> {
    caller.require(caller.key.role.can_write(), "record steps")?;
    Caller::require_enabled(state)?;
    // Whether this surface takes steps besides the thinking text (REST
    // does, MCP `record_turn` does not): said so when neither is given.
    let explicit_possible = explicit.is_some();
    let explicit = explicit.unwrap_or_default();
    if thinking.is_none_or(|t| t.trim().is_empty()) && explicit.is_empty() {
        // Nothing given is a missing member, as MCP's typed arguments say
        // it; a blank text is an invalid one.
        let code = if thinking.is_none() {
            "missing_field"
        } else {
            "invalid_argument"
        };
        return Err(ApiError::bad_request(
            code,
            if explicit_possible {
                "a turn needs thinking text or steps"
            } else {
                "a turn needs thinking text"
            },
        )
        .with_field("thinking"));
    }
    let given = explicit.len();
    // A long thinking text is split on the CPU pool, the request's count
    // kept until it ends.
    let steps = if thinking.is_some_and(|t| t.len() > crate::INLINE_WORK_BYTES) {
        let (template, turn_id) = (template.clone(), turn_id.to_owned());
        let (thinking, counted) = (thinking.map(str::to_owned), memory.cloned());
        state
            .cpu
            .run(caller.org(), "splitting the thinking text", move || {
                let _counted = counted;
                cairn_store::ops::turn_steps(&template, &turn_id, thinking.as_deref(), explicit)
            })
            .await?
    } else {
        // Small: split where it is, without copying the template.
        cairn_store::ops::turn_steps(template, turn_id, thinking, explicit)
    }
    .map_err(|e| ApiError::bad_request("invalid_request", e.to_string()))?;
    if steps.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_argument",
            "this thinking text holds no phase with text, so the turn would record nothing",
        )
        .with_field("thinking"));
    }
    // A turn whose every step names its trace id (no thinking text's
    // phases, which get new ids) is kept to answer its retry
    // ([`cairn_store::turn_retried`]).
    let kept_for_retry = steps.iter().all(|s| s.trace_id.is_some());
    // The turn's steps (a thinking text's phases are each a step, and
    // explicit steps are copies of the body's) are held until written,
    // with the sequencer's copies (numbered, prepared) and the copy kept
    // for a retry: counted with the request's body, on every surface,
    // before the copy is made.
    let copies = if kept_for_retry { 2 } else { 1 };
    let steps_memory = crate::hold_more(
        state,
        caller.org(),
        memory,
        steps
            .iter()
            .map(|s| s.approx_sequenced_memory() + copies * s.approx_memory())
            .sum(),
    )?;
    // A large turn is copied on the CPU pool, as a large batch's steps
    // are, the request's counts going with the copy until it ends.
    let (steps, retry, steps_memory) = if kept_for_retry {
        let large =
            steps.iter().map(NewStep::approx_memory).sum::<usize>() > crate::INLINE_WORK_BYTES;
        let counted = memory.cloned();
        state
            .cpu
            .run_when(caller.org(), large, "copying the turn", move || {
                let _counted = counted;
                let copy = steps.clone();
                (steps, Some(copy), steps_memory)
            })
            .await?
    } else {
        (steps, None, steps_memory)
    };
    let parsed = steps.len() - given;
    // A turn is one unit: every step is written, or none is and the
    // answer names the step refused.
    // Numbered within the turn as they are sequenced: requests of one turn
    // at once never share a number.
    let request = WriteRequest::Turn {
        turn_id: turn_id.to_owned(),
        steps,
    };
    // Counted until written, even if the caller stops waiting.
    let until_written = crate::limits::UntilWritten::new(memory, steps_memory);
    let written = match crate::queue_write(state, &until_written, request).await {
        Ok(written) => written,
        Err(cairn_store::AppendError::Refused(cairn_store::Refusal::StepOfMany {
            index,
            refusal,
            ..
        })) => match retry {
            // A duplicate trace id may be this turn's own first write.
            Some(steps) if matches!(*refusal, cairn_store::Refusal::DuplicateTraceId { .. }) => {
                // The recorded steps are held parsed to be compared.
                let retried = crate::on_cpu(
                    state,
                    caller.org(),
                    "checking a retried turn",
                    move |store| cairn_store::turn_retried(store, &steps),
                )
                .await??;
                match retried {
                    Some(steps) => cairn_store::Written::Steps(steps),
                    None => return Err(turn_refusal(index, *refusal, parsed)),
                }
            }
            _ => return Err(turn_refusal(index, *refusal, parsed)),
        },
        Err(e) => return Err(e.into()),
    };
    let results: Vec<wire::StepWritten> = match written {
        cairn_store::Written::Steps(steps) => steps
            .iter()
            .map(|w| wire::step_written(w).ok_or_else(|| crate::unexpected(w.clone())))
            .collect::<Result<_, _>>()?,
        other => return Err(crate::unexpected(other)),
    };
    Ok(TurnRecorded {
        session_id: template.session_id.clone(),
        turn_id: turn_id.to_owned(),
        accepted: results.len(),
        results,
    })
}

/// The answer to a turn's step `index` refused with `refusal` (`parsed`:
/// how many of the turn's steps are its thinking text's phases, which
/// come first): the refusal's own code, its message naming the step and
/// saying that nothing was written, its field under the step's member.
fn turn_refusal(index: usize, refusal: cairn_store::Refusal, parsed: usize) -> ApiError {
    let mut e = ApiError::from(refusal);
    let (which, member) = if index < parsed {
        (
            format!("phase {index} of the thinking text"),
            "thinking".to_owned(),
        )
    } else {
        let step = format!("steps[{}]", index - parsed);
        (step.clone(), step)
    };
    e.message = format!("{which}: {} (nothing of this turn was written)", e.message);
    // The refused step's member, under the step. A phase of the thinking
    // text is the `thinking` member itself, unless what was refused is a
    // member of the request every phase takes (its agent, model, session
    // or turn).
    e.field = Some(match e.field.take() {
        Some(field) if index >= parsed => format!("{member}.{field}"),
        Some(field) if TURN_MEMBERS.contains(&field.as_str()) => field,
        _ => member,
    });
    e
}

/// A session's steps (of one turn, with `turn`) as `held` lets an
/// answer hold them, each kept as its piece `P` once read
/// ([`HeldAnswer::keep`]): no parsed record outlives its read. 404 for an unknown session. The
/// answer is held whole: it takes one of the org's expensive slots.
async fn session_steps<P: StepPiece>(
    state: &Arc<AppState>,
    caller: &Caller,
    session_id: &str,
    turn: Option<&str>,
    mut held: HeldAnswer,
) -> Result<(Vec<Rendered<P>>, ExpensiveSlot), ApiError> {
    let org = caller.org().to_owned();
    let session_id = session_id.to_owned();
    let turn = turn.map(str::to_owned);
    let permit = crate::limits::expensive(state, &org, "an answer held whole").await?;
    // The slot goes with the work and comes back: the answer is held
    // until it has been sent.
    blocking(state, move |store| {
        store
            .session(&org, &session_id)?
            .ok_or_else(|| ApiError::no_session(&session_id))?;
        let mut steps = Vec::new();
        let mut refused = None;
        let mut keep = |s: cairn_store::StoredStep| match held.keep::<P>(s) {
            Ok(step) => {
                steps.push(step);
                true
            }
            Err(e) => {
                refused = Some(e);
                false
            }
        };
        match &turn {
            // One turn: its steps found through the index of turns, read
            // a few at a time, whatever the length of the session.
            Some(turn) => {
                if !store.read_turn(&org, &session_id, turn, &mut keep)? {
                    return Err(ApiError::no_session(&session_id));
                }
            }
            None => store.read_session(&org, &session_id, &mut keep)?,
        }
        match refused {
            Some(e) => Err(e),
            None => Ok((steps, permit)),
        }
    })
    .await
}

/// One turn of a session (seed 002).
// Its steps are their JSON, written as they were read. Its schema is
// named as the wire type it writes (`wire::TurnOut`) so that MCP
// clients see one name for it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "TurnOut")]
pub struct HeldTurn {
    /// The turn id (null for steps recorded outside a turn).
    pub turn_id: Option<String>,
    /// When its first step was recorded (RFC 3339, UTC).
    pub started_at: Option<String>,
    /// Its steps, by their number within the turn.
    #[schemars(with = "Vec<wire::StepOut>")]
    pub steps: Vec<Box<RawValue>>,
}

impl HeldTurn {
    /// A turn's steps, in trail order ([`render::in_turns`]).
    fn of(steps: Vec<Rendered<Box<RawValue>>>) -> HeldTurn {
        let first = steps.first();
        HeldTurn {
            turn_id: first.and_then(|s| s.turn_id.clone()),
            started_at: first.map(|s| s.created_at.to_string()),
            steps: steps.into_iter().map(|s| s.piece).collect(),
        }
    }
}

/// A session's audit trail: its turns, in order.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Trail {
    /// The session.
    pub session_id: String,
    /// Its turns, in the order of their first step.
    pub turns: Vec<HeldTurn>,
}

/// An answer held whole (as JSON, or the Markdown text), and the
/// expensive slot it keeps until it has been sent.
pub(crate) struct Held<T> {
    /// The answer.
    pub(crate) answer: Result<T, String>,
    /// Dropped once the answer is sent.
    pub(crate) slot: ExpensiveSlot,
}

/// A session's trail as JSON, or as seed 002's Markdown; its steps held
/// within `held`.
pub(crate) async fn trail_of(
    state: &Arc<AppState>,
    caller: &Caller,
    session_id: &str,
    markdown: bool,
    held: HeldAnswer,
) -> Result<Held<Trail>, ApiError> {
    if markdown {
        let (steps, slot) = session_steps(state, caller, session_id, None, held).await?;
        let answer = Err(render::rendered_markdown(session_id, steps));
        return Ok(Held { answer, slot });
    }
    let (steps, slot) = session_steps(state, caller, session_id, None, held).await?;
    let answer = Ok(Trail {
        session_id: session_id.to_owned(),
        turns: render::in_turns(steps)
            .into_iter()
            .map(HeldTurn::of)
            .collect(),
    });
    Ok(Held { answer, slot })
}

/// One turn as JSON, or as seed 002's Markdown; its steps held within
/// `held`.
pub(crate) async fn turn_of(
    state: &Arc<AppState>,
    caller: &Caller,
    session_id: &str,
    turn_id: &str,
    markdown: bool,
    held: HeldAnswer,
) -> Result<Held<HeldTurn>, ApiError> {
    /// The steps of `turn_id` among `steps`, in trail order.
    fn the_turn<P>(steps: Vec<Rendered<P>>, turn_id: &str) -> Option<Vec<Rendered<P>>> {
        render::in_turns(steps)
            .into_iter()
            .find(|t| t.first().and_then(|s| s.turn_id.as_deref()) == Some(turn_id))
    }
    let not_found = || ApiError::no_turn(turn_id, session_id);
    let turn = Some(turn_id);
    let answer = if markdown {
        let (steps, slot) = session_steps(state, caller, session_id, turn, held).await?;
        let steps = the_turn(steps, turn_id).ok_or_else(not_found)?;
        Held {
            answer: Err(render::rendered_turn_markdown(&steps)),
            slot,
        }
    } else {
        let (steps, slot) = session_steps(state, caller, session_id, turn, held).await?;
        let steps = the_turn(steps, turn_id).ok_or_else(not_found)?;
        Held {
            answer: Ok(HeldTurn::of(steps)),
            slot,
        }
    };
    Ok(answer)
}

/// `GET /v1/sessions/{session_id}/trail`: the audit trail across turns
/// (JSON, or `format=markdown` for seed 002's export of every turn).
#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}/trail",
    operation_id = "turns_trail",
    tag = "sessions",
    summary = "A session's audit trail across its turns",
    description = "Seed 002's getAuditTrail: every turn of the session in the order of its first step, each turn's steps by their number within the turn; format=markdown gives the whole session in seed 002's format. Streamed as the steps are read, whatever the session's length (their order is planned first from each step's turn and number): a failure after the first byte cuts the body short (the connection ends without the body's last chunk), so it never reads as a shorter trail.",
    params(
        ("session_id" = crate::api_doc::Id, Path, description = "The session"),
        ("format" = Option<crate::api_doc::ReplayFormat>, Query, description = "json (default) or markdown (seed 002's export with bracket labels)"),
    ),
    responses(
        (status = 200, description = "{session_id, turns: [{turn_id, started_at, steps}]}", content((serde_json::Value = "application/json"), (String = "text/markdown"))),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn trail(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(session_id): Path<String>,
    StrictQuery(q): StrictQuery,
) -> Result<Response, ApiError> {
    crate::input::refuse_unknown_params(q.keys(), &["format"])?;
    let markdown = crate::wants_markdown(q.get("format").map(String::as_str))?;
    let form = if markdown {
        TurnsForm::TrailMarkdown
    } else {
        TurnsForm::TrailJson
    };
    streamed_turns(&state, &caller, session_id, Steps::Session, form).await
}

/// Steps of a session in turns, streamed ([`StreamedSteps`]): the
/// session's header read first (404 for an unknown session), then the
/// positions, their plan and the first batch before the status line.
async fn streamed_turns(
    state: &Arc<AppState>,
    caller: &Caller,
    session_id: String,
    which: Steps,
    form: TurnsForm,
) -> Result<Response, ApiError> {
    let org = caller.org().to_owned();
    let info = {
        let (org, session_id) = (org.clone(), session_id.clone());
        crate::blocking(state, move |store| {
            store
                .session(&org, &session_id)?
                .ok_or_else(|| ApiError::no_session(&session_id))
        })
        .await?
    };
    let mut steps = StreamedSteps::new(org, session_id, None, Shape::Turns(form));
    let first = steps.start(state, info.step_count, which).await?;
    Ok(steps.stream(state, first))
}

/// `GET /v1/sessions/{session_id}/turns/{turn_id}`: one turn (JSON, or
/// `format=markdown` for seed 002's `exportMarkdown`).
#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}/turns/{turn_id}",
    operation_id = "turns_turn",
    tag = "sessions",
    summary = "One turn",
    description = "A turn's steps in order (JSON), or format=markdown for seed 002's exportMarkdown: '## Turn <id> (<time>)' then '[label] content' per step with its tool call, policy decision and approval request. Streamed as the trail is.",
    params(
        ("session_id" = crate::api_doc::Id, Path, description = "The session"),
        ("turn_id" = crate::api_doc::Id, Path, description = "The turn"),
        ("format" = Option<crate::api_doc::ReplayFormat>, Query, description = "json (default) or markdown (seed 002's export with bracket labels)"),
    ),
    responses(
        (status = 200, description = "{turn_id, started_at, steps}", content((serde_json::Value = "application/json"), (String = "text/markdown"))),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn turn(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path((session_id, turn_id)): Path<(String, String)>,
    StrictQuery(q): StrictQuery,
) -> Result<Response, ApiError> {
    crate::input::refuse_unknown_params(q.keys(), &["format"])?;
    let markdown = crate::wants_markdown(q.get("format").map(String::as_str))?;
    let form = if markdown {
        TurnsForm::TurnMarkdown
    } else {
        TurnsForm::TurnJson
    };
    streamed_turns(&state, &caller, session_id, Steps::Turn(turn_id), form).await
}
