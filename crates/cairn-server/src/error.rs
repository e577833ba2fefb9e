//! Errors as HTTP answers: a status and a JSON body
//! `{"error": {"code": "<stable code>", "field": "<input field, if any>",
//! "message": "<for people>"}}`; MCP tool errors carry the same object.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_core::record::RecordError;
use cairn_store::{AppendError, Refusal, StoreError};
use serde_json::json;

/// An API error with a stable machine code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable code, e.g. `unknown_step_type`.
    pub code: &'static str,
    /// What went wrong, for a person.
    pub message: String,
    /// When to try again (`Retry-After`), for refusals under load.
    pub retry_after: Option<std::time::Duration>,
    /// The input field the error concerns, where there is one (`content`,
    /// `links.corrects`, `steps[2].step_type`).
    pub field: Option<String>,
}

/// The error body every surface answers (REST bodies, MCP tool errors).
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct ErrorDetail {
    /// A stable code, e.g. unknown_field, not_found, session_sealed.
    pub code: String,
    /// What went wrong and what to do, for a person (or a model).
    pub message: String,
    /// The input field the error concerns, where there is one (content,
    /// links.corrects, `steps[2].step_type`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// Text of the caller's quoted in a message: at most 64 characters, with
/// control and other invisible characters escaped, so that an error never
/// echoes a long or strange input whole.
pub fn shown(text: &str) -> String {
    if holds_a_token(text) {
        return "<what looks like an API key, not repeated>".into();
    }
    let mut out: String = text.chars().take(64).flat_map(char::escape_debug).collect();
    if text.chars().nth(64).is_some() {
        out.push_str("...");
    }
    out
}

/// Whether `text` may hold an API key, or enough of one to matter, for
/// what answers and the request log show
/// ([`cairn_core::record::may_hold_an_api_key`]: broader than the rule
/// ingest refuses ids by, since leaving a word out of a message costs
/// little).
pub fn holds_a_token(text: &str) -> bool {
    cairn_core::record::may_hold_an_api_key(text)
}

/// `text` with every word that looks like an API key
/// ([`cairn_core::record::may_hold_an_api_key`]:
/// a token, or most of one, as a message quotes a member name cut to 60
/// characters) replaced by a marker; if what is left still holds one (split
/// by an escape), the whole text is replaced. A word runs over letters,
/// digits and `_ - % . :`, so a key id and a secret joined by another
/// separator than `_` are masked together. Cairn's own words (setting names
/// such as `CAIRN_ALLOWED_ORIGINS`, `cairn_...`) stay.
pub fn without_tokens(text: &str) -> String {
    const MARKER: &str = "<what looks like an API key, not repeated>";
    let word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '%' | '.' | ':');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(word) {
        out.push_str(&rest[..start]);
        let run = &rest[start..];
        let end = run.find(|c: char| !word(c)).unwrap_or(run.len());
        let candidate = &run[..end];
        if holds_a_token(candidate) {
            out.push_str(MARKER);
        } else {
            out.push_str(candidate);
        }
        rest = &run[end..];
    }
    out.push_str(rest);
    if out.split(|c: char| !word(c)).any(holds_a_token) {
        return format!("{MARKER} (the message quoted what was sent)");
    }
    out
}

/// Every error code any surface answers with. The OpenAPI document's
/// `ErrorCode` enum is this list; every error body is checked against it in
/// debug builds, and a test finds every code literal in the server's source
/// here, so a new code cannot go undocumented.
pub const ERROR_CODES: &[&str] = &[
    "invalid_json",
    "invalid_request",
    "unknown_field",
    "missing_field",
    "invalid_argument",
    "unknown_step_type",
    "confidence_out_of_range",
    "content_too_long",
    "nul_character",
    "payload_too_large",
    "payload_too_deep",
    "unsafe_integer",
    "malformed_id",
    "not_in_strict_profile",
    "invalid_record",
    "refused",
    "body_too_large",
    "unauthorized",
    "forbidden",
    "not_found",
    "method_not_allowed",
    "session_sealed",
    "session_exists",
    "index_conflict",
    "turn_step_taken",
    "agent_mismatch",
    "duplicate_trace_id",
    "signed_step_incomplete",
    "bad_signature",
    "read_only_org",
    "nothing_to_seal",
    "not_sealed",
    "storage_failure",
    "already_erased",
    "erased",
    "ledger_disabled",
    "reflection_required",
    "rate_limited",
    "overloaded",
    "timeout",
    "unavailable",
    "too_many_sessions",
    "too_many_streams",
    "stream_open",
    "line_too_long",
    "line_too_complex",
    "answer_too_large",
    "export_too_large",
    "host_not_allowed",
    "origin_not_allowed",
    "sql_refused",
    "sql_failed",
    "sql_timeout",
    "sql_too_large",
    "consent_required",
    "unknown_link",
    "bad_predecessor",
    "duplicate_id",
    "not_flagged",
    "key_conflict",
    "key_revoked",
    "too_many_keys",
    "clock_skew",
    "time_regression",
    "invalid_checkpoint",
    "invalid_otlp",
    "signed_trace",
    "too_many_spans",
    "unsupported_media_type",
    "not_acceptable",
    "internal",
];

/// Longest message an error carries.
const MAX_MESSAGE: usize = 2048;

impl ApiError {
    /// An error with a status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
            field: None,
        }
    }

    /// The same error, naming the input field it concerns.
    pub fn with_field(mut self, field: impl Into<String>) -> ApiError {
        self.field = Some(field.into());
        self
    }

    /// The error body every surface answers:
    /// `{"error": {"code", "field"?, "message"}}`.
    pub fn body(&self) -> serde_json::Value {
        debug_assert!(
            ERROR_CODES.contains(&self.code),
            "error code {} is not in ERROR_CODES",
            self.code
        );
        crate::wire::to_json(&self.error_body())
    }

    /// The error body as its type (see [`ErrorBody`]). Whatever in the
    /// message or the field looks like an API key is left out: a message
    /// may quote a member name or a value the caller sent.
    pub fn error_body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: without_tokens(&self.message),
                field: self.field.as_deref().map(without_tokens),
            },
        }
    }

    /// The same error, asking the client to retry after `after`.
    pub fn retry_after(mut self, after: std::time::Duration) -> ApiError {
        self.retry_after = Some(after);
        self
    }

    /// 400 with a code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 404: the same answer for what does not exist and for what belongs
    /// to another org.
    pub fn not_found(what: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{} not found", what.into()),
        )
    }

    /// 404 whose message is already a sentence saying what is missing (not
    /// a name to follow with "not found").
    pub fn not_found_because(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 410 for a signed trace whose record an erasure withheld: it was
    /// recorded, and what it said is gone (FORMAT.md 8).
    pub fn erased_trace(trace_id: &str, seq: u64) -> ApiError {
        ApiError::new(
            StatusCode::GONE,
            "erased",
            format!(
                "trace {} was erased: its signed-trace record (seq {seq}) keeps only its hash, and the trace-erasure record after it says when, why and by whom",
                shown(trace_id)
            ),
        )
    }

    /// 409 for an import of a trace whose id an erased trace holds: the
    /// id stays taken.
    pub fn erased_trace_id_taken(trace_id: &str, seq: u64) -> ApiError {
        ApiError::new(
            StatusCode::CONFLICT,
            "duplicate_id",
            format!(
                "trace {} was imported and then erased (its signed-trace record, seq {seq}, keeps only its hash): its id stays taken; import the trace under another trace_id",
                shown(trace_id)
            ),
        )
    }

    /// 404 for a turn the session does not hold (REST's streamed turn and
    /// MCP's `get_audit_trail` word it alike).
    pub fn no_turn(turn_id: &str, session_id: &str) -> ApiError {
        ApiError::not_found(format!(
            "turn {} in session {}",
            shown(turn_id),
            shown(session_id)
        ))
    }

    /// 404 for a session this org does not have (or that does not exist:
    /// the two are not told apart). An id Cairn would not store as given
    /// (a space, a slash, ...) is named with the id OTLP ingest stores a
    /// session of that name under (docs/OTLP.md), which is where a user
    /// who sent it as a conversation id finds it.
    pub fn no_session(id: &str) -> ApiError {
        match cairn_wire::otlp::stored_session_hint(id) {
            None => ApiError::not_found(format!("session {}", shown(id))),
            Some(hint) => ApiError::not_found_because(format!(
                "session {} not found: it is not an id as Cairn stores ids; {hint}",
                shown(id)
            )),
        }
    }

    /// 403 for a role that may not do this.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut message = without_tokens(&self.message);
        if message.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push_str("...");
        }
        let mut body = self.body();
        body["error"]["message"] = json!(message);
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(after) = self.retry_after {
            // Whole seconds, rounded up: at least 1.
            let seconds = after.as_millis().div_ceil(1000).max(1);
            if let Ok(value) = axum::http::HeaderValue::from_str(&seconds.to_string()) {
                response
                    .headers_mut()
                    .insert(axum::http::header::RETRY_AFTER, value);
            }
        }
        response
    }
}

impl From<crate::wire::InputError> for ApiError {
    fn from(e: crate::wire::InputError) -> ApiError {
        let error = ApiError::bad_request(e.code, e.message);
        match e.field {
            Some(field) => error.with_field(field),
            None => error,
        }
    }
}

/// What a client is told of a write the store failed: not acknowledged is
/// not necessarily not written.
pub const UNACKNOWLEDGED_WRITE: &str = "the write was not acknowledged, but it may still have been recorded if only the commit's answer was lost: look it up before writing it again, or send a step again with the same trace_id (a recorded one is answered as it was)";

/// A request whose text or numbers the database refused (a NUL byte a
/// rule missed: `StoreError::is_data_exception`), answered as the bad
/// request it is: a write's the sequencer narrowed to the one request at
/// fault; a read's from what the request gave (a filter, a query's words;
/// the names a read looks up by are guarded before, `pg::reads::storable`),
/// which the reads' parameters are, never the rows they read.
fn refused_data(e: &StoreError) -> Option<ApiError> {
    e.is_data_exception().then(|| {
        tracing::warn!(error = %e, "request refused by the database");
        ApiError::bad_request(
            "invalid_request",
            format!(
                "the database cannot take what this request holds (such as the NUL character, U+0000, in a name or text): {e}"
            ),
        )
    })
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        if let Some(refused) = refused_data(&e) {
            return refused;
        }
        match e {
            StoreError::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, "not_found", m),
            // Not a failure: something the store is doing for a while (the
            // full-text index catching up with the log after a start).
            StoreError::Busy(m) => {
                tracing::warn!(reason = %m, "store busy");
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", m)
                    .retry_after(std::time::Duration::from_secs(5))
            }
            other => {
                tracing::error!(error = %other, "storage failure");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "storage_failure",
                    other.to_string(),
                )
            }
        }
    }
}

/// The input field a record rule concerns, where it names one.
fn record_field(e: &RecordError) -> Option<String> {
    match e {
        RecordError::UnknownKind { .. }
        | RecordError::KindLabelTooLong { .. }
        | RecordError::NotInStrictProfile { .. } => Some("step_type".into()),
        RecordError::ConfidenceOutOfRange { .. } => Some("confidence".into()),
        RecordError::ContentTooLong { .. } => Some("content".into()),
        RecordError::NulCharacter { field }
        | RecordError::PayloadTooLarge { field, .. }
        | RecordError::PayloadTooDeep { field }
        | RecordError::UnsafeInteger { field }
        | RecordError::IntegerTooLarge { field }
        | RecordError::ReservedMemberName { field, .. }
        | RecordError::MalformedId { field, .. }
        | RecordError::DotSegmentId { field, .. }
        | RecordError::ApiKeyId { field } => Some((*field).to_owned()),
        _ => None,
    }
}

/// The stable code of a record rule.
fn record_code(e: &RecordError) -> &'static str {
    match e {
        RecordError::UnknownKind { .. } | RecordError::KindLabelTooLong { .. } => {
            "unknown_step_type"
        }
        RecordError::ConfidenceOutOfRange { .. } => "confidence_out_of_range",
        RecordError::ContentTooLong { .. } => "content_too_long",
        RecordError::NulCharacter { .. } => "nul_character",
        RecordError::PayloadTooLarge { .. } => "payload_too_large",
        RecordError::PayloadTooDeep { .. } => "payload_too_deep",
        RecordError::UnsafeInteger { .. } | RecordError::IntegerTooLarge { .. } => "unsafe_integer",
        RecordError::MalformedId { .. }
        | RecordError::DotSegmentId { .. }
        | RecordError::ApiKeyId { .. } => "malformed_id",
        RecordError::NotInStrictProfile { .. } => "not_in_strict_profile",
        _ => "invalid_record",
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        let message = r.to_string();
        let (status, code) = match &r {
            Refusal::Invalid(e) => (StatusCode::BAD_REQUEST, record_code(e)),
            Refusal::Sealed { .. } => (StatusCode::CONFLICT, "session_sealed"),
            Refusal::UnknownSession { .. } => (StatusCode::NOT_FOUND, "not_found"),
            Refusal::SessionExists { .. } => (StatusCode::CONFLICT, "session_exists"),
            Refusal::IndexConflict { .. } => (StatusCode::CONFLICT, "index_conflict"),
            Refusal::TurnStepTaken { .. } => (StatusCode::CONFLICT, "turn_step_taken"),
            Refusal::AgentMismatch { .. } => (StatusCode::CONFLICT, "agent_mismatch"),
            Refusal::DuplicateTraceId { .. } => (StatusCode::CONFLICT, "duplicate_trace_id"),
            Refusal::SignedStepIncomplete => (StatusCode::BAD_REQUEST, "signed_step_incomplete"),
            Refusal::BadSignature(_) => (StatusCode::BAD_REQUEST, "bad_signature"),
            Refusal::ReadOnlyOrg { .. } => (StatusCode::CONFLICT, "read_only_org"),
            Refusal::NothingToSeal { .. } => (StatusCode::CONFLICT, "nothing_to_seal"),
            Refusal::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            Refusal::AlreadyErased { .. } => (StatusCode::CONFLICT, "already_erased"),
            Refusal::UnknownStep { .. } => (StatusCode::NOT_FOUND, "not_found"),
            Refusal::ReflectionRequired { .. } => (StatusCode::CONFLICT, "reflection_required"),
            Refusal::NotFlagged { .. } => (StatusCode::CONFLICT, "not_flagged"),
            Refusal::UnknownLink { .. } => (StatusCode::BAD_REQUEST, "unknown_link"),
            Refusal::BadPredecessor(_) => (StatusCode::BAD_REQUEST, "bad_predecessor"),
            Refusal::DuplicateId { .. } => (StatusCode::CONFLICT, "duplicate_id"),
            Refusal::InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            Refusal::InvalidMember { .. } => (StatusCode::BAD_REQUEST, "invalid_argument"),
            Refusal::KeyConflict { .. } => (StatusCode::CONFLICT, "key_conflict"),
            Refusal::KeyRevoked { .. } => (StatusCode::CONFLICT, "key_revoked"),
            Refusal::TooManyKeys { .. } => (StatusCode::CONFLICT, "too_many_keys"),
            Refusal::UnknownKey { .. } => (StatusCode::NOT_FOUND, "not_found"),
            Refusal::ClockSkew { .. } => (StatusCode::BAD_REQUEST, "clock_skew"),
            Refusal::TimeRegression { .. } => (StatusCode::BAD_REQUEST, "time_regression"),
            // The refused step's own status and code; the message says
            // which step it was and that nothing was written.
            Refusal::StepOfMany { refusal, .. } => {
                let inner = ApiError::from((**refusal).clone());
                (inner.status, inner.code)
            }
            _ => (StatusCode::BAD_REQUEST, "refused"),
        };
        let field = match &r {
            Refusal::Invalid(e) => record_field(e),
            Refusal::ClockSkew { .. } | Refusal::TimeRegression { .. } => {
                Some("created_at".to_owned())
            }
            Refusal::InvalidMember { field, .. } => Some((*field).to_owned()),
            Refusal::AgentMismatch { .. } => Some("agent_id".to_owned()),
            Refusal::DuplicateTraceId { .. } => Some("trace_id".to_owned()),
            Refusal::TurnStepTaken { .. } => Some("turn_step".to_owned()),
            Refusal::UnknownLink { link, .. } => Some(format!("links.{link}")),
            _ => None,
        };
        let error = ApiError::new(status, code, message);
        match field {
            Some(field) => error.with_field(field),
            None => error,
        }
    }
}

impl From<AppendError> for ApiError {
    fn from(e: AppendError) -> ApiError {
        match e {
            AppendError::Refused(r) => r.into(),
            AppendError::Store(e) => {
                if let Some(refused) = refused_data(&e) {
                    return refused;
                }
                tracing::error!(error = %e, "storage failure");
                // A commit whose answer was lost may have committed: the
                // client is told so, and how to find out safely.
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "storage_failure",
                    format!("{e}; {UNACKNOWLEDGED_WRITE}"),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ERROR_CODES;

    /// A write the store failed is 503 `storage_failure`, saying what
    /// failed and that it may still have been recorded.
    #[test]
    fn a_failed_write_says_it_may_have_been_recorded() {
        let failure = cairn_store::StoreError::Io {
            context: "committing a batch".into(),
            source: std::io::Error::other("disk I/O error"),
        };
        let e = super::ApiError::from(cairn_store::AppendError::Store(std::sync::Arc::new(
            failure,
        )));
        assert_eq!((e.status.as_u16(), e.code), (503, "storage_failure"));
        assert!(
            e.message
                .starts_with("committing a batch: disk I/O error; ")
                && e.message.contains("may still have been recorded")
                && e.message.contains("same trace_id"),
            "{}",
            e.message
        );
    }

    /// A token (or most of one) quoted in a message or named as a field
    /// is left out of the answer; Cairn's own words about keys stay.
    #[test]
    fn answers_leave_tokens_out() {
        use super::{ApiError, without_tokens};
        let token = "cairn_0123456789ab_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZn";
        for text in [
            format!("the member {token:?} is given twice"),
            format!("unknown field `{}`", &token[..60]),
            format!("reserved name $serde_json::private::{token}"),
            format!("in a path: /v1/keys/{}", token.replace('_', "%5F")),
            format!("bare: {}", &token[6..]),
            format!("prefixed: key-{}", &token[6..]),
            format!("upper: {}", token.to_ascii_uppercase()),
            format!("thrice: {}", token.replace('_', "%25255F")),
            format!("dotted: cairn_0123456789ab.{}", &token[19..]),
            format!("colon: cairn_0123456789ab:{}", &token[19..]),
        ] {
            let shown = without_tokens(&text);
            assert!(!shown.contains(&token[13..40]), "{text} -> {shown}");
            assert!(shown.contains("not repeated"), "{shown}");
        }
        for kept in [
            "send Authorization: Bearer cairn_... (cairn admin create-key)",
            "the role cairn_app may not read it",
            "session abc_def is sealed",
            "Add it with --allowed-origins or CAIRN_ALLOWED_ORIGINS",
            "raise CAIRN_MCP_SESSIONS_PER_KEY or CAIRN_MAX_BUNDLE_LINE_BYTES",
            "the step 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(without_tokens(kept), kept);
        }
        // A word that merely holds `cairn_`, or a key id and a short name,
        // is shown.
        for kept in ["my_cairn_test", "0123456789ab_short-name"] {
            assert_eq!(super::shown(kept), kept);
        }
        let e = ApiError::bad_request("unknown_field", format!("unknown field {token}"))
            .with_field(token);
        let body = e.body().to_string();
        assert!(!body.contains(&token[13..40]), "{body}");
    }

    /// A store busy for a while (the full-text index catching up after a
    /// start) is a 503 to retry, not a storage failure.
    #[test]
    fn a_busy_store_is_unavailable_with_retry_after() {
        let e = super::ApiError::from(cairn_store::StoreError::Busy("catching up".into()));
        assert_eq!(e.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!((e.code, e.message.as_str()), ("unavailable", "catching up"));
        assert_eq!(e.retry_after, Some(std::time::Duration::from_secs(5)));
    }

    /// The code literal right after `marker` (skipping a `StatusCode::X,`
    /// and white space), if there is one.
    fn literal_after(text: &str) -> Option<&str> {
        let mut rest = text.trim_start();
        if let Some(after) = rest.strip_prefix("StatusCode::") {
            let end = after.find(|c: char| !c.is_ascii_alphanumeric() && c != '_')?;
            rest = after[end..].trim_start().strip_prefix(',')?.trim_start();
        }
        let rest = rest.strip_prefix('"')?;
        let end = rest.find('"')?;
        let code = &rest[..end];
        (!code.is_empty() && code.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .then_some(code)
    }

    /// Every code literal the server's source gives an error (`ApiError`,
    /// OTLP errors, the refusal and record-error mappings here) is in
    /// `ERROR_CODES`, and so in the OpenAPI document.
    #[test]
    fn every_code_in_the_source_is_listed() {
        let mut found = 0;
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut stack = vec![root];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let mut markers = vec!["ApiError::new(", "OtlpError::new(", "bad_request("];
                if path.ends_with("error.rs") {
                    markers.extend(["(StatusCode::", "=> "]);
                }
                for marker in markers {
                    for (at, _) in text.match_indices(marker) {
                        let start = at + marker.len();
                        let start = if marker == "(StatusCode::" {
                            start - "StatusCode::".len()
                        } else {
                            start
                        };
                        if let Some(code) = literal_after(&text[start..]) {
                            found += 1;
                            assert!(
                                ERROR_CODES.contains(&code),
                                "{}: error code {code} is not in ERROR_CODES",
                                path.display()
                            );
                        }
                    }
                }
            }
        }
        assert!(found > 60, "the scan found only {found} codes");
    }
}
