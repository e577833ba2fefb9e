//! A session's replay over HTTP (`GET /v1/sessions/{id}`): as JSON,
//! streamed in batches that a slow client holds no worker for, or as
//! Markdown, built whole within the answer budget.

use super::*;

#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}",
    operation_id = "replay",
    tag = "sessions",
    summary = "Replay a session",
    description = "Steps in order with seed 000's member names. verify=true adds chain_valid and the verdict; format=markdown returns seed 002's Markdown. The JSON is streamed as the steps are read (step_count follows the steps): a failure after the first byte cuts the body short, so it never parses as a shorter replay.",
    params(
        ("session_id" = crate::api_doc::Id, Path, description = "The session"),
        ("verify" = Option<bool>, Query, description = "true to verify the chain"),
        ("format" = Option<crate::api_doc::ReplayFormat>, Query, description = "json (default) or markdown"),
        ("level" = Option<crate::api_doc::Level>, Query, description = "Seed 004's detail level: generic (kinds, numbers, timings, hashes), detailed (plus identifiers, tool names, models, lists) or full (plus content: needs the session's recorded consent and an auditor or admin key). Hidden fields are replaced by their commitments and listed in hidden_fields; everything still verifies."),
    ),
    responses(
        (status = 200, description = "OK", content((serde_json::Value = "application/json"), (String = "text/markdown"))),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn replay(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(session_id): Path<String>,
    StrictQuery(q): StrictQuery,
) -> Result<Response, ApiError> {
    input::refuse_unknown_params(q.keys(), &["format", "verify", "level"])?;
    let verify = query_bool(&q, "verify")?;
    let markdown = wants_markdown(q.get("format").map(String::as_str))?;
    let level = level_param(&q)?;
    let org = caller.org().to_owned();
    let permit = if verify {
        Some(limits::expensive(&state, &org, "verification").await?)
    } else {
        None
    };
    let (info, verdict, permit) = {
        let (org, session_id) = (org.clone(), session_id.clone());
        // The permit goes with the work (a blocking task runs to its end
        // even if the client goes away) and comes back for a Markdown
        // replay, which holds its steps next.
        blocking(&state, move |store| {
            let info = store
                .session(&org, &session_id)?
                .ok_or_else(|| ApiError::no_session(&session_id))?;
            let verdict = if verify {
                verify_session(store, &org, &session_id)?
            } else {
                None
            };
            Ok((info, verdict, permit))
        })
        .await?
    };
    if let Some(v) = &verdict {
        state.metrics.verification(v.verified);
    }
    allow_level(
        &caller,
        level,
        Some((&info.header.session_id, info.header.full_consent)),
    )?;
    if markdown {
        // Held whole (turns are ordered across the session): one of the
        // org's expensive slots, unless verification took one.
        let permit = match permit {
            Some(permit) => permit,
            None => limits::expensive(&state, &org, "an answer held whole").await?,
        };
        let (records, permit) = blocking(&state, move |store| {
            let mut records = Vec::new();
            let mut redacted = Ok(());
            let mut held = crate::held::HeldAnswer::new();
            let mut too_large = None;
            store.read_session(&org, &session_id, &mut |mut s| {
                if let Some(level) = level {
                    redacted = s.record.redact(level);
                }
                // Held as its Markdown line (contents, never payloads):
                // the record is dropped once read.
                match held.keep::<String>(s) {
                    Ok(line) => records.push(line),
                    Err(e) => {
                        too_large = Some(e);
                        return false;
                    }
                }
                redacted.is_ok()
            })?;
            if let Some(e) = too_large {
                return Err(e);
            }
            redacted.map_err(|e| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            })?;
            Ok((records, permit))
        })
        .await?;
        let markdown = render::rendered_markdown(&info.header.session_id, records);
        return Ok(crate::held::response_holding(
            markdown.into_bytes(),
            "text/markdown; charset=utf-8",
            permit,
        ));
    }
    // A streamed replay holds no slot: it holds a few batches at a time,
    // counted in the replay buffer.
    drop(permit);
    let mut head = serde_json::Map::new();
    head.insert("session_id".into(), json!(info.header.session_id));
    head.insert("agent_id".into(), json!(info.header.agent_id));
    head.insert("level".into(), json!(level.map(DetailLevel::as_str)));
    head.insert("sealed".into(), json!(info.seal.is_some()));
    let mut tail = serde_json::Map::new();
    if let Some(v) = &verdict {
        tail.insert("chain_valid".into(), json!(v.verified));
        tail.insert(
            "verdict".into(),
            wire::verdict_to_json(v, 0, cairn_store::now()),
        );
    }
    let mut replay = StreamedReplay {
        org,
        session_id,
        level,
        seqs: Vec::new(),
        positions: None,
        sent: 0,
        // One step first: its size decides how many the next batch reads.
        batch: 1,
    };
    // The positions and the first steps are read before the status line,
    // so that a store that fails at once (or a full replay buffer)
    // answers with its error.
    let first = replay.start(&state, info.step_count).await?;
    Ok(replay.stream(&state, head, first, tail))
}

/// Replay batches read at once, server-wide, one org at most half (a
/// batch is reserved in the replay buffer whole only once read; until
/// then these few bound it).
pub(crate) const REPLAY_READS: usize = 8;

/// What a replay's batches need of its org's share of the replay buffer
/// beside its positions (a few batches in flight, each at most 256 KiB
/// and one step, and a step's JSON at most about 1.2 MiB under the
/// default input limits): a replay whose positions leave less is refused
/// at once rather than left to wait on itself.
const REPLAY_HEADROOM: usize = 8 * 1024 * 1024;

/// Most steps a replay reads at a time: the store is read without
/// holding a connection or a read snapshot while the client takes what
/// was sent.
const REPLAY_BATCH_STEPS: usize = 16;

/// How many bytes of JSON a replay's batch holds, and one step more at
/// most: a batch writes steps until it has this many (at least one), and
/// after a batch of larger steps the next reads as many as fit this at
/// the size of those.
const REPLAY_BATCH_BYTES: usize = 256 * 1024;

/// A replay's JSON object, streamed: its steps are read
/// [`REPLAY_BATCH_STEPS`] at a time and sent as they are read, so the
/// server holds a few batches, whatever the session's length, and a client
/// that reads slowly holds no worker thread and no store connection,
/// only its place in the session. What it holds (its steps' positions,
/// each batch from before it is read until it has been sent) is reserved
/// in the server's replay buffer ([`limits::replay_buffer`]), so that many
/// slow readers of long sessions of large steps cannot add up to more
/// than `CAIRN_REPLAY_BUFFER_BYTES`.
struct StreamedReplay {
    org: String,
    session_id: String,
    level: Option<DetailLevel>,
    /// The session's steps' log positions, in index order.
    seqs: Vec<u64>,
    /// Their reservation in the replay buffer.
    positions: Option<limits::ExpensiveSlot>,
    /// Steps written so far (the next batch starts at this position of
    /// `seqs`).
    sent: u64,
    /// Steps the next batch reads.
    batch: usize,
}

impl StreamedReplay {
    /// Reads the session's positions (reserved first, at the `steps` the
    /// session is said to hold) and writes its first batch.
    async fn start(&mut self, state: &Arc<AppState>, steps: u64) -> Result<Bytes, ApiError> {
        let position = std::mem::size_of::<u64>();
        let reserved = usize::try_from(steps)
            .unwrap_or(usize::MAX)
            .saturating_mul(position);
        let mut positions =
            limits::replay_buffer(state, &self.org, reserved, REPLAY_HEADROOM).await?;
        // Reading the positions holds more than they do once read (on
        // PostgreSQL, rows): one of the few reads at a time.
        let wait = Some(state.config.limits.expensive_wait);
        let reading = limits::replay_read(state, &self.org, wait).await?;
        let (org, session_id) = (self.org.clone(), self.session_id.clone());
        self.seqs = blocking(state, move |store| {
            store
                .session_seqs(&org, &session_id)?
                .ok_or_else(|| ApiError::no_session(&session_id))
        })
        .await?;
        drop(reading);
        // The log holds more than the registry said: the rest too.
        let read = self.seqs.len().saturating_mul(position);
        if read > reserved {
            // Checked whole: all the positions, and the room beside them.
            let headroom = REPLAY_HEADROOM.saturating_add(reserved);
            positions
                .merge(limits::replay_buffer(state, &self.org, read - reserved, headroom).await?);
        }
        self.positions = Some(positions);
        self.next_batch(state).await.map(Option::unwrap_or_default)
    }

    /// The next steps as JSON array members (each after a comma but the
    /// very first), or `None` once every step was sent. A step the store
    /// no longer holds at its position fails the replay: a shorter replay
    /// must never parse.
    async fn next_batch(&mut self, state: &Arc<AppState>) -> Result<Option<Bytes>, ApiError> {
        let start = usize::try_from(self.sent).unwrap_or(usize::MAX);
        let Some(rest) = self.seqs.get(start..).filter(|rest| !rest.is_empty()) else {
            return Ok(None);
        };
        // The batch being read holds a read turn (a few at once, one org
        // at most half) until it is reserved whole: the first batch,
        // before the status line, waits for one within
        // CAIRN_EXPENSIVE_WAIT; later ones wait their turn. The turn comes
        // first, so that batches waiting for one hold nothing of the
        // buffer that a turn's holder could be waiting for.
        let wait = (self.sent == 0).then_some(state.config.limits.expensive_wait);
        let reading = limits::replay_read(state, &self.org, wait).await?;
        // A batch is reserved at its usual size before it is read; once
        // read, the reservation is cut to its size, or what its last step
        // took beyond it is added.
        let mut reserved = limits::replay_buffer(state, &self.org, REPLAY_BATCH_BYTES, 0).await?;
        let seqs = &rest[..self.batch.min(rest.len())];
        let (org, session_id, seqs, level, sent) = (
            self.org.clone(),
            self.session_id.clone(),
            seqs.to_vec(),
            self.level,
            self.sent,
        );
        let (text, written) = blocking(state, move |store| {
            let mut text = Vec::new();
            let mut written = 0usize;
            let mut failed = None;
            // Steps are written until the batch's bytes are reached (its
            // steps may be larger than the last batch's), each read only
            // once the one before was written: the rest are read again by
            // the next batch. Each must be the one at its position, in
            // order: a missing step fails the replay.
            store.visit_steps_at(&org, &session_id, &seqs, &mut |mut s| {
                if seqs.get(written) != Some(&s.seq) {
                    return false;
                }
                if let Some(level) = level
                    && let Err(e) = s.record.redact(level)
                {
                    failed = Some(e.to_string());
                    return false;
                }
                if sent + written as u64 > 0 {
                    text.push(b',');
                }
                if let Err(e) = serde_json::to_writer(&mut text, &wire::step_out(s.seq, &s.record))
                {
                    failed = Some(e.to_string());
                    return false;
                }
                written += 1;
                text.len() < REPLAY_BATCH_BYTES
            })?;
            if let Some(message) = failed {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    message,
                ));
            }
            if written < seqs.len() && text.len() < REPLAY_BATCH_BYTES {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "storage_failure",
                    format!(
                        "the session's step at log position {} could not be read",
                        seqs[written]
                    ),
                ));
            }
            Ok((text, written as u64))
        })
        .await?;
        match text.len().checked_sub(REPLAY_BATCH_BYTES) {
            Some(excess) if excess > 0 => {
                reserved.merge(limits::replay_buffer(state, &self.org, excess, 0).await?);
            }
            _ => reserved.shrink_to(text.len()),
        }
        drop(reading);
        self.sent += written;
        // Steps of this size: as many as fit the batch's bytes next.
        let per_step = text.len() / (written.max(1) as usize);
        self.batch = (REPLAY_BATCH_BYTES / per_step.max(1)).clamp(1, REPLAY_BATCH_STEPS);
        // The reservation goes with the bytes and ends when they are gone
        // (sent, or dropped with a client that left).
        Ok(Some(Bytes::from_owner(ReservedBatch {
            text,
            _reserved: reserved,
        })))
    }

    /// The response: `head`'s members, the steps (`first`, then each next
    /// batch as the client takes the previous ones), `step_count` and
    /// `tail`'s members. A failure after the status line cuts the body
    /// short, so a client sees invalid JSON, never a shorter replay that
    /// parses.
    fn stream(
        mut self,
        state: &Arc<AppState>,
        head: serde_json::Map<String, Value>,
        first: Bytes,
        mut tail: serde_json::Map<String, Value>,
    ) -> Response {
        // One batch waits in the channel while the next is read.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let state = Arc::clone(state);
        tokio::spawn(async move {
            // `{...}` without its closing brace, then the steps.
            let mut opening = serde_json::to_vec(&Value::Object(head)).unwrap_or_default();
            opening.pop();
            opening.extend_from_slice(b",\"steps\":[");
            if tx.send(Ok(Bytes::from(opening))).await.is_err() || tx.send(Ok(first)).await.is_err()
            {
                return;
            }
            loop {
                // A client that leaves ends the replay even while it waits
                // for a turn or a reservation.
                let next = tokio::select! {
                    next = self.next_batch(&state) => next,
                    () = tx.closed() => return,
                };
                match next {
                    Ok(Some(text)) => {
                        if tx.send(Ok(text)).await.is_err() {
                            // The client went away.
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = %e.message, "a replay failed while streaming");
                        // Its reservation ends now, not when a stalled
                        // client lets the error through.
                        drop(self.positions.take());
                        drop(std::mem::take(&mut self.seqs));
                        let _ = tx.send(Err(std::io::Error::other(e.message))).await;
                        return;
                    }
                }
            }
            tail.insert("step_count".into(), json!(self.sent));
            let closing = serde_json::to_vec(&Value::Object(tail)).unwrap_or_default();
            // `],` and the tail's members with its closing brace.
            let mut text = b"],".to_vec();
            text.extend_from_slice(closing.get(1..).unwrap_or_default());
            let _ = tx.send(Ok(Bytes::from(text))).await;
        });
        (
            [(header::CONTENT_TYPE, "application/json")],
            axum::body::Body::from_stream(crate::log_api::ChannelBody::new(rx)),
        )
            .into_response()
    }
}

/// A replay's batch of JSON with its reservation in the replay buffer,
/// which ends when the last reference to the bytes is dropped.
struct ReservedBatch {
    text: Vec<u8>,
    _reserved: limits::ExpensiveSlot,
}

impl AsRef<[u8]> for ReservedBatch {
    fn as_ref(&self) -> &[u8] {
        &self.text
    }
}
