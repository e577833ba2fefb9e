//! OTLP spans waiting for their session: spans exported before the span
//! that names their session (docs/OTLP.md "Spans waiting for their
//! session"). They are kept in the store, not in memory, because they were
//! acknowledged to the exporter: a restart must not lose them. They are
//! not ledger records (nothing is hashed or chained until they are written
//! as steps), so the table may be deleted from.

use crate::StoreError;

/// The store of spans waiting for their session, and the look-up of a
/// trace's session. Part of every [`crate::LedgerStore`].
pub trait HeldSpans {
    /// Holds `spans` of `key_id`, unless the org's held spans would then
    /// take more than `max_org_bytes` of JSON: `None`, and nothing held
    /// (the caller writes them at once). A span already held (same org,
    /// key, trace and span ids: a retried export) is kept as it was, and
    /// neither counted against the bound again nor among the spans newly
    /// held (the `Some` count). Durable when this returns, as an appended
    /// step is.
    fn hold_spans(
        &self,
        org_id: &str,
        key_id: &str,
        spans: &[HeldSpan],
        max_org_bytes: u64,
    ) -> Result<Option<u64>, StoreError>;

    /// The spans of these traces held for `key_id`, by trace, then span id.
    fn held_spans(
        &self,
        org_id: &str,
        key_id: &str,
        trace_hexes: &[String],
    ) -> Result<Vec<HeldSpan>, StoreError>;

    /// Forgets held spans (written as steps, or given up); returns how many
    /// were held (another writer may have forgotten them first).
    fn release_spans(
        &self,
        org_id: &str,
        key_id: &str,
        trace_hex: &str,
        span_hexes: &[String],
    ) -> Result<u64, StoreError>;

    /// Traces (of any org and key) with a span held since before
    /// `received_before_ms`: at most `per_org` of each org (those held
    /// longest), at most `limit` in all, so that one org's many traces do
    /// not keep another org's waiting.
    fn due_held_traces(
        &self,
        received_before_ms: i64,
        per_org: usize,
        limit: usize,
    ) -> Result<Vec<HeldTrace>, StoreError>;

    /// For each trace, the sessions holding steps recorded in the org with
    /// a step id starting [`otel_trace_prefix`]`(trace_hex)` (where the
    /// OTLP receiver recorded that trace's spans), the one holding the
    /// latest step first, at most [`TRACE_SESSIONS`].
    fn otel_trace_sessions(
        &self,
        org_id: &str,
        trace_hexes: &[String],
    ) -> Result<Vec<Vec<String>>, StoreError>;
}

/// One span held, as the OTLP receiver mapped it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldSpan {
    /// The OpenTelemetry trace id, in hex.
    pub trace_hex: String,
    /// The span id, in hex.
    pub span_hex: String,
    /// The span's mapped steps as JSON (`cairn_wire::otlp::map::SpanSteps`),
    /// opaque to the store.
    pub steps: String,
    /// When it was first held, in Unix milliseconds.
    pub received_ms: i64,
}

/// A trace of one org's key with spans held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldTrace {
    /// The org's name.
    pub org_id: String,
    /// The API key that exported the spans.
    pub key_id: String,
    /// The trace id, in hex.
    pub trace_hex: String,
}

/// The most sessions of one trace [`HeldSpans::otel_trace_sessions`]
/// names.
pub const TRACE_SESSIONS: usize = 64;

/// The most traces [`HeldSpans::due_held_traces`] returns at once.
pub const DUE_TRACES_PER_ROUND: usize = 256;

/// The most traces of one org [`HeldSpans::due_held_traces`] returns at
/// once.
pub const DUE_TRACES_PER_ORG: usize = 32;

/// The first 38 characters of the step ids of an OpenTelemetry trace's
/// steps (`otel.<32 hex digits>.`): the key of the look-up of the session
/// its steps were recorded in.
pub fn otel_trace_prefix(trace_hex: &str) -> String {
    format!("otel.{trace_hex}.")
}
