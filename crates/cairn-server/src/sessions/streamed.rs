//! A session's steps streamed as they are read, in batches that a slow
//! client holds no worker for: a replay's JSON (`GET /v1/sessions/{id}`),
//! and seed 002's turns (the audit trail, one turn, and a Markdown
//! replay, as JSON or Markdown), whose order is planned first from each
//! step's turn and number ([`plan_turns`]), read without the steps, and
//! written by [`cairn_wire::trail`].

use super::*;
pub(crate) use cairn_wire::trail::TurnsForm;
use cairn_wire::trail::{TrailPlanner, TurnsWriter};

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
/// was sent. Each step is parsed only once the one before was written,
/// and PostgreSQL answers a batch's positions in pages of at most 4 MiB
/// of stored text, so this bounds the reads a batch makes (16 had made a
/// batch's fixed costs, a blocking task and a query or two, a third of a
/// trail's time), not what it holds.
const REPLAY_BATCH_STEPS: usize = 256;

/// How many bytes a replay's batch holds, and one step more at most: a
/// batch writes steps until it has this many (at least one), and after a
/// batch of larger steps the next reads as many as fit this at the size
/// of those.
const REPLAY_BATCH_BYTES: usize = 256 * 1024;

/// Steps whose places in the trail are read at a time while a stream of
/// turns is planned.
const PLAN_CHUNK: usize = 4096;

/// What planning holds for a step besides its position (its turn and
/// number while they are sorted, its place in the order, its position
/// in the new order): reserved while the plan is made, given back after.
const PLAN_BYTES_PER_STEP: usize = 32;

/// What a distinct turn id costs the plan besides its text (the id, its
/// entry in the map that finds it, its start).
const PLAN_BYTES_PER_TURN: usize = 96;

/// Which steps a stream reads.
pub(crate) enum Steps {
    /// The session's, in index order or in trail order (by the shape).
    Session,
    /// One turn's, in trail order.
    Turn(String),
}

/// What a streamed answer writes around and between its steps.
pub(crate) enum Shape {
    /// A replay's JSON object: `head`'s members, `"steps":[...]` in index
    /// order, `step_count`, then `tail`'s members.
    Replay {
        head: serde_json::Map<String, Value>,
        tail: serde_json::Map<String, Value>,
    },
    /// Seed 002's turns, in trail order ([`cairn_wire::render::in_turns`]).
    Turns(TurnsForm),
}

/// How a batch writes each step: the shape without what is written only
/// at the start and the end (cloned into the store's worker).
#[derive(Clone)]
enum Pieces {
    Replay,
    Turns(Arc<TurnsWriter>),
}

impl Pieces {
    /// Writes the step at `position` (of the streamed order), with what
    /// comes before it: a comma, or its turn's opening.
    fn write(
        &self,
        position: u64,
        seq: u64,
        record: &cairn_core::commit::StepRecord,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        match self {
            Pieces::Replay => {
                if position > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, &wire::step_out(seq, record))
                    .map_err(|e| e.to_string())
            }
            Pieces::Turns(writer) => writer.write_step(position, seq, record, out),
        }
    }
}

/// A session's steps, streamed: read [`REPLAY_BATCH_STEPS`] at a time and
/// sent as they are read, so the server holds a few batches, whatever the
/// session's length, and a client that reads slowly holds no worker thread
/// and no store connection, only its place in the session. What it holds
/// (its steps' positions and, for turns, their plan; each batch from
/// before it is read until it has been sent) is reserved in the server's
/// replay buffer ([`limits::replay_buffer`]), so that many slow readers of
/// long sessions of large steps cannot add up to more than
/// `CAIRN_REPLAY_BUFFER_BYTES`.
pub(crate) struct StreamedSteps {
    org: String,
    session_id: String,
    level: Option<DetailLevel>,
    shape: Shape,
    /// The steps' log positions, in the order they are written.
    seqs: Vec<u64>,
    /// How each is written.
    pieces: Pieces,
    /// Their reservation in the replay buffer.
    positions: Option<limits::ExpensiveSlot>,
    /// Steps written so far (the next batch starts at this position of
    /// `seqs`).
    sent: u64,
    /// Steps the next batch reads.
    batch: usize,
}

impl StreamedSteps {
    /// A stream of `session_id`'s steps in `shape`, each redacted to
    /// `level` if given.
    pub(crate) fn new(
        org: String,
        session_id: String,
        level: Option<DetailLevel>,
        shape: Shape,
    ) -> StreamedSteps {
        StreamedSteps {
            org,
            session_id,
            level,
            shape,
            seqs: Vec::new(),
            pieces: Pieces::Replay,
            positions: None,
            sent: 0,
            // One step first: its size decides how many the next batch reads.
            batch: 1,
        }
    }

    /// Reads the positions of `which` steps (reserved first, at the
    /// `steps` the session is said to hold), plans their turns if the
    /// shape has them, and writes the first batch: everything that can
    /// fail at once, before the status line. An unknown session is 404
    /// `not_found`, a turn the session does not hold 404 too.
    pub(crate) async fn start(
        &mut self,
        state: &Arc<AppState>,
        steps: u64,
        which: Steps,
    ) -> Result<Bytes, ApiError> {
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
        let turn = match &which {
            Steps::Session => None,
            Steps::Turn(turn) => Some(turn.clone()),
        };
        self.seqs = blocking(state, move |store| {
            let seqs = match &turn {
                None => store.session_seqs(&org, &session_id)?,
                Some(turn) => store.turn_seqs(&org, &session_id, turn)?,
            };
            let seqs = seqs.ok_or_else(|| ApiError::no_session(&session_id))?;
            match turn {
                Some(turn) if seqs.is_empty() => Err(ApiError::no_turn(&turn, &session_id)),
                _ => Ok(seqs),
            }
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
        } else {
            positions.shrink_to(read);
        }
        if let Shape::Turns(form) = self.shape {
            let seqs = std::mem::take(&mut self.seqs);
            let (ordered, writer) = plan_turns(
                state,
                &self.org,
                &self.session_id,
                seqs,
                (form, self.level),
                &mut positions,
            )
            .await?;
            self.seqs = ordered;
            self.pieces = Pieces::Turns(Arc::new(writer));
        }
        self.positions = Some(positions);
        self.next_batch(state).await.map(Option::unwrap_or_default)
    }

    /// The next steps with what comes before each (a comma, a turn's
    /// opening), or `None` once every step was sent. A step the store no
    /// longer holds at its position fails the stream: a shorter answer
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
        let want = rest[..self.batch.min(rest.len())].to_vec();
        let (org, session_id, level, sent, pieces) = (
            self.org.clone(),
            self.session_id.clone(),
            self.level,
            self.sent,
            self.pieces.clone(),
        );
        let (text, written) = blocking(state, move |store| {
            let batch = Batch {
                want: &want,
                sent,
                level,
                pieces: &pieces,
            };
            batch.read(store, &org, &session_id)
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

    /// What comes before the first step.
    fn opening(&mut self) -> Vec<u8> {
        match &mut self.shape {
            Shape::Replay { head, .. } => {
                // `{...}` without its closing brace, then the steps.
                let head = std::mem::take(head);
                let mut opening = serde_json::to_vec(&Value::Object(head)).unwrap_or_default();
                opening.pop();
                opening.extend_from_slice(b",\"steps\":[");
                opening
            }
            Shape::Turns(_) => match &self.pieces {
                Pieces::Turns(writer) => writer.opening(&self.session_id),
                Pieces::Replay => Vec::new(),
            },
        }
    }

    /// What comes after the last step.
    fn closing(&mut self) -> Vec<u8> {
        match &mut self.shape {
            Shape::Replay { tail, .. } => {
                let mut tail = std::mem::take(tail);
                tail.insert("step_count".into(), json!(self.sent));
                let closing = serde_json::to_vec(&Value::Object(tail)).unwrap_or_default();
                // `],` and the tail's members with its closing brace.
                let mut text = b"],".to_vec();
                text.extend_from_slice(closing.get(1..).unwrap_or_default());
                text
            }
            Shape::Turns(_) => match &self.pieces {
                Pieces::Turns(writer) => writer.closing(self.sent),
                Pieces::Replay => Vec::new(),
            },
        }
    }

    /// The response: the opening, the steps (`first`, then each next
    /// batch as the client takes the previous ones) and the closing. A
    /// failure after the status line cuts the body short, so a client sees
    /// invalid JSON (or Markdown without its end), never a shorter answer
    /// that parses.
    pub(crate) fn stream(mut self, state: &Arc<AppState>, first: Bytes) -> Response {
        let content_type = match &self.shape {
            Shape::Replay { .. } => "application/json",
            Shape::Turns(form) => form.content_type(),
        };
        // One batch waits in the channel while the next is read.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let state = Arc::clone(state);
        tokio::spawn(async move {
            let opening = self.opening();
            if tx.send(Ok(Bytes::from(opening))).await.is_err() || tx.send(Ok(first)).await.is_err()
            {
                return;
            }
            loop {
                // A client that leaves ends the stream even while it waits
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
                        tracing::warn!(error = %e.message, "a streamed answer failed while streaming");
                        // Its reservation ends now, not when a stalled
                        // client lets the error through.
                        drop(self.positions.take());
                        drop(std::mem::take(&mut self.seqs));
                        drop(std::mem::replace(&mut self.pieces, Pieces::Replay));
                        let _ = tx.send(Err(std::io::Error::other(e.message))).await;
                        return;
                    }
                }
            }
            let closing = self.closing();
            let _ = tx.send(Ok(Bytes::from(closing))).await;
        });
        (
            [(header::CONTENT_TYPE, content_type)],
            axum::body::Body::from_stream(crate::log_api::ChannelBody::new(rx)),
        )
            .into_response()
    }
}

/// A stream's step missing at its position: the answer fails (a shorter
/// answer must never pass for the whole).
fn missing_step(seq: u64) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "storage_failure",
        format!("the session's step at log position {seq} could not be read"),
    )
}

/// What a plan's turn ids hold: each id twice, and
/// [`PLAN_BYTES_PER_TURN`] a turn.
fn turn_id_bytes(planner: &TrailPlanner) -> usize {
    planner
        .turns()
        .saturating_mul(PLAN_BYTES_PER_TURN)
        .saturating_add(planner.turn_id_bytes().saturating_mul(2))
}

/// Reads where each of `seqs`' steps (in index order) stands in the
/// trail, a chunk at a time without the steps, and returns the positions
/// in trail order with the writer of their turns in `form`, as a reader
/// shown `level` sees them (the steps are redacted to it). What the plan holds is
/// reserved in `positions` (the steps' positions' reservation); what
/// ordering holds for a while besides, apart, and given back.
async fn plan_turns(
    state: &Arc<AppState>,
    org: &str,
    session_id: &str,
    seqs: Vec<u64>,
    (form, level): (TurnsForm, Option<DetailLevel>),
    positions: &mut limits::ExpensiveSlot,
) -> Result<(Vec<u64>, TurnsWriter), ApiError> {
    // Each reservation is checked with what the answer holds already (its
    // positions, its planning, its turn ids so far) and the room its
    // batches need: an answer that could never be served is refused at
    // once (422), not left to wait for a share it alone passes.
    let positions_bytes = seqs.len().saturating_mul(std::mem::size_of::<u64>());
    let planning_bytes = seqs.len().saturating_mul(PLAN_BYTES_PER_STEP);
    let planning = limits::replay_buffer(
        state,
        org,
        planning_bytes,
        REPLAY_HEADROOM.saturating_add(positions_bytes),
    )
    .await?;
    let seqs = Arc::new(seqs);
    let mut planner = TrailPlanner::default();
    let mut ids_reserved = 0usize;
    // Each chunk is read holding one of the few read turns, as a batch
    // is (before the status line: within CAIRN_EXPENSIVE_WAIT).
    let wait = Some(state.config.limits.expensive_wait);
    for start in (0..seqs.len()).step_by(PLAN_CHUNK) {
        let end = seqs.len().min(start + PLAN_CHUNK);
        let reading = limits::replay_read(state, org, wait).await?;
        let (org_id, session, chunk_of) =
            (org.to_owned(), session_id.to_owned(), Arc::clone(&seqs));
        planner = blocking(state, move |store| {
            let chunk = &chunk_of[start..end];
            let places = store.turn_places_at(&org_id, &session, chunk)?;
            planner
                .push_places(chunk, places, level)
                .map_err(missing_step)?;
            Ok(planner)
        })
        .await?;
        drop(reading);
        // The turn ids read so far, reserved as they come (a chunk's at
        // most past the reservation).
        let held = turn_id_bytes(&planner);
        if held > ids_reserved {
            let more = held - ids_reserved;
            let holding = REPLAY_HEADROOM
                .saturating_add(positions_bytes)
                .saturating_add(planning_bytes)
                .saturating_add(ids_reserved);
            positions.merge(limits::replay_buffer(state, org, more, holding).await?);
            ids_reserved = held;
        }
    }
    let ordered = crate::on_cpu(state, org, "ordering a trail", move |_| {
        let plan = planner.order();
        let ordered: Vec<u64> = plan.order.iter().map(|&i| seqs[i]).collect();
        (ordered, TurnsWriter::new(form, &plan))
    })
    .await?;
    drop(planning);
    Ok(ordered)
}

/// One batch of a stream being read: the positions it asks for, in the
/// order they are written, from position `sent` of the stream.
struct Batch<'a> {
    want: &'a [u64],
    sent: u64,
    level: Option<DetailLevel>,
    pieces: &'a Pieces,
}

impl Batch<'_> {
    /// The batch's text and how many steps it wrote: steps are written
    /// until the batch holds [`REPLAY_BATCH_BYTES`] (at least one step; the
    /// rest are read again by the next batch), each parsed only once the
    /// one before was written. A step missing at its position fails the
    /// stream.
    fn read(
        &self,
        store: &dyn LedgerStore,
        org: &str,
        session_id: &str,
    ) -> Result<(Vec<u8>, u64), ApiError> {
        let internal =
            |message: String| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message);
        let want = self.want;
        // In the order written (the store reads positions in any order):
        // each step written as read, until the batch's bytes are reached.
        let mut text = Vec::new();
        let mut failed = None;
        let written =
            cairn_store::ops::visit_in_place(store, org, session_id, want, &mut |at, mut s| {
                if let Err(e) = self.write(at, &mut s, &mut text) {
                    failed = Some(e);
                    return false;
                }
                text.len() < REPLAY_BATCH_BYTES
            })?;
        if let Some(message) = failed {
            return Err(internal(message));
        }
        if written < want.len() && text.len() < REPLAY_BATCH_BYTES {
            return Err(missing_step(want[written]));
        }
        Ok((text, written as u64))
    }

    /// Writes the batch's step `at` (redacted to the level) after what
    /// comes before it at its place in the stream.
    fn write(
        &self,
        at: usize,
        step: &mut cairn_store::StoredStep,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        if let Some(level) = self.level {
            step.record.redact(level).map_err(|e| e.to_string())?;
        }
        self.pieces
            .write(self.sent + at as u64, step.seq, &step.record, out)
    }
}

/// A batch of a streamed answer with its reservation in the replay
/// buffer, which ends when the last reference to the bytes is dropped.
struct ReservedBatch {
    text: Vec<u8>,
    _reserved: limits::ExpensiveSlot,
}

impl AsRef<[u8]> for ReservedBatch {
    fn as_ref(&self) -> &[u8] {
        &self.text
    }
}
