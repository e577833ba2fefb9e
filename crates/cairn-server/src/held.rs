//! Answers that are held whole before they are sent: a Markdown replay or
//! audit trail (its turns are ordered across the whole session), an audit
//! trail as JSON, and an MCP tool's replay (one JSON-RPC message). Their
//! steps are counted as they are read, and past [`MAX_HELD_ANSWER_BYTES`]
//! the request is refused, naming what streams instead: a session of many
//! large steps would otherwise be held whole, many times its size as
//! parsed JSON. (`GET /v1/sessions/{id}` as JSON and exports stream.)

use crate::ApiError;
use axum::http::StatusCode;
use cairn_core::commit::StepRecord;

/// Bytes of step text (contents, and payloads as JSON where the answer
/// holds them) one held answer may hold.
pub(crate) const MAX_HELD_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// The running count of one held answer.
pub(crate) struct HeldAnswer {
    bytes: usize,
    limit: usize,
}

/// Counts what is written into it.
struct Count(usize);

impl std::io::Write for Count {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl HeldAnswer {
    /// An empty answer, limited to [`MAX_HELD_ANSWER_BYTES`].
    pub(crate) fn new() -> HeldAnswer {
        HeldAnswer::at_most(MAX_HELD_ANSWER_BYTES)
    }

    fn at_most(limit: usize) -> HeldAnswer {
        HeldAnswer { bytes: 0, limit }
    }

    /// Counts `record`: its content, and with `payloads` its input and
    /// output as JSON. Past the limit, `answer_too_large`.
    pub(crate) fn hold(&mut self, record: &StepRecord, payloads: bool) -> Result<(), ApiError> {
        let step = &record.step;
        let mut count = Count(step.content.as_ref().map_or(0, String::len));
        if payloads {
            for value in [&step.input, &step.output].into_iter().flatten() {
                // Writing into a counter cannot fail.
                let _ = serde_json::to_writer(&mut count, value);
            }
        }
        self.bytes = self.bytes.saturating_add(count.0);
        if self.bytes > self.limit {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "answer_too_large",
                format!(
                    "this answer would hold over {} MiB of the session's steps, and it is built whole \
                     before it is sent: replay the session as JSON (GET /v1/sessions/{{id}}, streamed) \
                     or export it (GET /v1/export?session=...)",
                    self.limit / (1024 * 1024)
                ),
            ));
        }
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
        let mut held = HeldAnswer::at_most(100);
        let small = record("0123456789", serde_json::json!([1, 2, 3]));
        for _ in 0..5 {
            held.hold(&small, true).unwrap();
        }
        assert_eq!(held.bytes, 5 * (10 + 7));
        // Without payloads only the content counts.
        held.hold(&small, false).unwrap();
        assert_eq!(held.bytes, 95);
        let refused = held.hold(&small, true).unwrap_err();
        assert_eq!(
            (refused.status.as_u16(), refused.code),
            (422, "answer_too_large")
        );
        assert!(refused.message.contains("GET /v1/sessions/{id}"));
    }
}
