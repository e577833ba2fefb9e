//! Answers that are held whole before they are sent: an MCP tool's audit
//! trail, turn or replay (one JSON-RPC message), and the search's and
//! review queue's steps. Their steps are counted as they are read, and
//! past [`MAX_HELD_ANSWER_BYTES`] the request is refused, naming what
//! streams instead: a session of many large steps would otherwise be held
//! whole, many times its size as parsed JSON. (Over HTTP a replay, an
//! audit trail and a turn, as JSON or Markdown, and exports stream:
//! [`crate::sessions::StreamedSteps`].)

use crate::ApiError;
use crate::limits::ExpensiveSlot;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use cairn_core::commit::StepRecord;
use cairn_wire::render::Rendered;

/// Bytes of steps one held answer may hold, counted as
/// [`HeldAnswer::hold`] does. Parsed JSON takes several times its text's
/// size in memory (many times, for arrays of small numbers), so the limit
/// is well below what a server can hold, and held answers take one of the
/// org's expensive slots ([`crate::limits::expensive`]) so that only a few
/// are built at once.
///
/// A step costs [`cairn_core::record::Step::ANSWER_STEP_BYTES`] besides its text (ids, hashes,
/// commitments): with the limit, a held answer holds at most 65,536 steps,
/// as many as one OTLP request may record.
pub(crate) const MAX_HELD_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// Bytes an answer built whole from its steps' text (a turn, a trail, a
/// Markdown replay: [`Rendered`] steps) may keep of that text, counted
/// as [`HeldAnswer::hold_rendered`] does, besides
/// [`MAX_HELD_ANSWER_BYTES`] of the steps' count: a step's count is its
/// payloads and a fixed 256 bytes, and a step of long ids and links
/// writes ten times that (65,536 such steps made a 170 MB trail). The
/// answer's text, written from these, is about as large, so such an
/// answer holds at most about twice this at its peak.
pub(crate) const MAX_RENDERED_ANSWER_BYTES: usize = 32 * 1024 * 1024;

/// What an answer held whole keeps of each step: its Markdown line
/// (`String`) or its JSON as a replay writes it (`Box<RawValue>`).
pub(crate) trait StepPiece: Send + Sized + 'static {
    /// Whether the answer shows no payloads: they are dropped before the
    /// step is counted.
    const WITHOUT_PAYLOADS: bool;

    /// The piece of the step at `seq`.
    fn of(seq: u64, record: &StepRecord) -> Result<Self, ApiError>;

    /// Its bytes.
    fn text_len(&self) -> usize;
}

impl StepPiece for String {
    const WITHOUT_PAYLOADS: bool = true;

    fn of(_seq: u64, record: &StepRecord) -> Result<String, ApiError> {
        Ok(crate::render::markdown_line(record))
    }

    fn text_len(&self) -> usize {
        self.len()
    }
}

impl StepPiece for Box<serde_json::value::RawValue> {
    const WITHOUT_PAYLOADS: bool = false;

    fn of(seq: u64, record: &StepRecord) -> Result<Self, ApiError> {
        serde_json::value::to_raw_value(&crate::wire::step_out(seq, record)).map_err(|e| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })
    }

    fn text_len(&self) -> usize {
        self.get().len()
    }
}

/// The running count of one held answer.
pub(crate) struct HeldAnswer {
    bytes: usize,
    limit: usize,
    /// What its rendered steps hold, up to `rendered_limit`.
    rendered: usize,
    rendered_limit: usize,
    /// The refusal past `limit` (given the limit), saying what to do
    /// instead.
    refusal: fn(usize) -> ApiError,
}

/// A response of `body` that keeps `slot` until the body has been sent
/// (or the client went away): a held answer stays in memory while a
/// client reads it, and only a few may be held at once.
pub(crate) fn response_holding(
    body: Vec<u8>,
    content_type: &'static str,
    slot: ExpensiveSlot,
) -> Response {
    /// The body, sent once, and the slot, dropped with it.
    struct Holding {
        body: Option<Bytes>,
        _slot: ExpensiveSlot,
    }

    impl futures_core::Stream for Holding {
        type Item = Result<Bytes, std::convert::Infallible>;

        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            std::task::Poll::Ready(self.body.take().map(Ok))
        }
    }

    (
        [(header::CONTENT_TYPE, content_type)],
        axum::body::Body::from_stream(Holding {
            body: Some(Bytes::from(body)),
            _slot: slot,
        }),
    )
        .into_response()
}

/// `answer` as a JSON response that keeps `slot` until it has been sent
/// ([`response_holding`]), written on the CPU pool (an answer of up to 16
/// MiB of steps takes tens of milliseconds to write), in `org`'s turn.
pub(crate) async fn json_holding<T: serde::Serialize + Send + 'static>(
    state: &crate::AppState,
    org: &str,
    answer: T,
    slot: ExpensiveSlot,
) -> Result<Response, ApiError> {
    let body = state
        .cpu
        .run(org, "writing the answer", move || {
            crate::wire::to_json(&answer).to_string().into_bytes()
        })
        .await?;
    Ok(response_holding(body, "application/json", slot))
}

/// Drops what a Markdown rendering never shows (input, output and
/// metadata), before the step is held.
pub(crate) fn drop_payloads(record: &mut StepRecord) {
    record.step.input = None;
    record.step.output = None;
    record.step.metadata = None;
}

impl HeldAnswer {
    /// An empty answer, limited to [`MAX_HELD_ANSWER_BYTES`].
    pub(crate) fn new() -> HeldAnswer {
        HeldAnswer::at_most(MAX_HELD_ANSWER_BYTES)
    }

    fn at_most(limit: usize) -> HeldAnswer {
        HeldAnswer::refused_past(limit, |limit| {
            too_large(
                limit,
                "read it over HTTP, streamed (GET /v1/sessions/{id}/trail, \
                 /v1/sessions/{id}/turns/{turn_id} or the replay GET /v1/sessions/{id}), \
                 or export it (GET /v1/export?session=...)",
            )
        })
    }

    /// An empty answer, refused past `limit` with `refusal(limit)`: an
    /// answer that is refused past a smaller size than
    /// [`MAX_HELD_ANSWER_BYTES`] anyway (an MCP tool's message) stops
    /// reading there.
    pub(crate) fn refused_past(limit: usize, refusal: fn(usize) -> ApiError) -> HeldAnswer {
        HeldAnswer {
            bytes: 0,
            limit,
            rendered: 0,
            rendered_limit: MAX_RENDERED_ANSWER_BYTES,
            refusal,
        }
    }

    /// `step` as the answer keeps it ([`StepPiece`]): its payloads dropped
    /// if the answer shows none, counted as a step ([`HeldAnswer::hold`]),
    /// rendered, and counted as what is kept
    /// ([`HeldAnswer::hold_rendered`]); the record is dropped here.
    pub(crate) fn keep<P: StepPiece>(
        &mut self,
        mut step: cairn_store::StoredStep,
    ) -> Result<Rendered<P>, ApiError> {
        if P::WITHOUT_PAYLOADS {
            drop_payloads(&mut step.record);
        }
        self.hold(&step.record)?;
        let rendered = Rendered::new(&step.record, P::of(step.seq, &step.record)?);
        self.hold_rendered(&rendered)?;
        Ok(rendered)
    }

    /// Counts `step` as it is kept, rendered: its text, its turn id and
    /// the rest of it. Past [`MAX_RENDERED_ANSWER_BYTES`], the refusal
    /// [`HeldAnswer::hold`] gives past its limit.
    pub(crate) fn hold_rendered<P: StepPiece>(
        &mut self,
        step: &Rendered<P>,
    ) -> Result<(), ApiError> {
        let bytes = std::mem::size_of::<Rendered<P>>()
            + step.turn_id.as_ref().map_or(0, String::len)
            + step.piece.text_len();
        self.rendered = self.rendered.saturating_add(bytes);
        if self.rendered > self.rendered_limit {
            return Err((self.refusal)(self.rendered_limit));
        }
        Ok(())
    }

    /// Counts `record` as it is held: its content, its input, output and
    /// metadata as JSON (those still there), and a fixed cost a step. Past
    /// the limit, `answer_too_large`.
    pub(crate) fn hold(&mut self, record: &StepRecord) -> Result<(), ApiError> {
        self.bytes = self.bytes.saturating_add(record.step.answer_bytes());
        if self.bytes > self.limit {
            return Err((self.refusal)(self.limit));
        }
        Ok(())
    }
}

/// `answer_too_large` for an answer past `limit` bytes, saying what to do
/// instead.
pub(crate) fn too_large(limit: usize, instead: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "answer_too_large",
        format!(
            "this answer would hold over {} MiB, and it is built whole before it is sent: {instead}",
            limit / (1024 * 1024)
        ),
    )
}

/// A writer that keeps at most `limit` bytes: the write that reaches past
/// it keeps what fits and fails (which stops the writer's caller), and
/// [`AtMostBytes::overflowed`] says so. Held answers refuse once it
/// overflows; a web UI page shows the prefix, cut.
pub(crate) struct AtMostBytes {
    bytes: Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl AtMostBytes {
    /// An empty buffer of at most `limit` bytes.
    pub(crate) fn new(limit: usize) -> AtMostBytes {
        AtMostBytes {
            bytes: Vec::new(),
            limit,
            overflowed: false,
        }
    }

    /// Whether a write went past the limit.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// What was written.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

impl std::io::Write for AtMostBytes {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.limit.saturating_sub(self.bytes.len());
        if buf.len() > room {
            self.bytes.extend_from_slice(&buf[..room]);
            self.overflowed = true;
            return Err(std::io::Error::other("the answer is over its limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_core::record::Step;

    fn record(content: &str, input: serde_json::Value) -> StepRecord {
        let t = cairn_core::Timestamp::from_micros(1).unwrap();
        let mut step = Step::new("t", "acme", "a", "s", 0, "plan", t).unwrap();
        step.content = Some(content.into());
        step.input = Some(input);
        StepRecord::new(step, &[0; 32], cairn_core::Hash::ZERO)
    }

    #[test]
    fn an_answer_is_refused_once_it_passes_its_limit() {
        let mut held = HeldAnswer::at_most(1_500);
        let mut small = record("0123456789", serde_json::json!([1, 2, 3]));
        small.step.metadata = Some(serde_json::json!({"k": 1}));
        for _ in 0..5 {
            held.hold(&small).unwrap();
        }
        // Content (as a JSON string, quoted), input, metadata and the
        // fixed cost, each time.
        assert_eq!(held.bytes, 5 * (12 + 7 + 7 + Step::ANSWER_STEP_BYTES));
        assert_eq!(held.bytes, 1_410);
        // Without payloads (a Markdown's steps) the content and the fixed
        // cost count.
        drop_payloads(&mut small);
        let mut markdown = HeldAnswer::at_most(1_500);
        markdown.hold(&small).unwrap();
        assert_eq!(markdown.bytes, 12 + Step::ANSWER_STEP_BYTES);
        // 1,410 + 268 is past 1,500.
        let refused = held.hold(&small).unwrap_err();
        assert_eq!(
            (refused.status.as_u16(), refused.code),
            (422, "answer_too_large")
        );
        assert!(refused.message.contains("GET /v1/sessions/{id}"));
        // What rendered steps keep is counted too: their text, their turn
        // id and the rest of each, past its own limit refused as above.
        let mut rendered = HeldAnswer::new();
        rendered.rendered_limit = 1_000;
        let mut step = record("", serde_json::Value::Null);
        step.step.turn_id = Some("t".repeat(100));
        let line = Rendered::new(&step, "l".repeat(300));
        let each = std::mem::size_of::<Rendered<String>>() + 100 + 300;
        rendered.hold_rendered(&line).unwrap();
        rendered.hold_rendered(&line).unwrap();
        assert_eq!(rendered.rendered, 2 * each);
        let refused = rendered.hold_rendered(&line).unwrap_err();
        assert_eq!(
            (refused.status.as_u16(), refused.code),
            (422, "answer_too_large")
        );
        assert!(refused.message.contains("GET /v1/sessions/{id}"));
        let json = serde_json::value::to_raw_value(&"x".repeat(10)).unwrap();
        assert_eq!(json.text_len(), 12, "a JSON piece counts its text");
        // A capped writer refuses past its limit and says so.
        let mut out = AtMostBytes::new(4);
        use std::io::Write as _;
        out.write_all(b"abc").unwrap();
        assert!(out.write_all(b"de").is_err() && out.overflowed());
        assert_eq!(out.into_bytes(), b"abcd", "what fits is kept");
    }
}
