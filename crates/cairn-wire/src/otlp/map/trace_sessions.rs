//! The session a span names (or its resource names), lent to the spans of
//! its trace in the same request that name none: instrumentations often
//! set `gen_ai.conversation.id` (or `session.id`) on the agent's span
//! only, and its model and tool calls would otherwise each open a session
//! named after the trace.

use super::super::attrs::Attrs;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

/// A span, by trace id and span id.
type SpanKey<'a> = (&'a [u8], &'a [u8]);

/// Ancestors looked at, at most, from one span (parents in a request
/// could form a cycle or a chain of any length).
const MAX_ANCESTORS: usize = 64;

/// What a request's spans say about sessions.
pub(super) struct TraceSessions<'a> {
    /// The session each span names itself, or its resource names.
    own: HashMap<SpanKey<'a>, Cow<'a, str>>,
    /// Each span's parent.
    parent: HashMap<SpanKey<'a>, &'a [u8]>,
    /// The one session a trace's spans name, or `None` when they name
    /// several.
    by_trace: HashMap<&'a [u8], Option<Cow<'a, str>>>,
    /// The traces whose root span (no parent) is in the request.
    rooted: HashSet<&'a [u8]>,
}

/// The session a span names with its own attributes.
pub(super) fn named_by(span: &Span) -> Option<Cow<'_, str>> {
    Attrs(&span.attributes).session()
}

impl<'a> TraceSessions<'a> {
    /// Reads every span of `request` once.
    pub(super) fn of(request: &'a ExportTraceServiceRequest) -> TraceSessions<'a> {
        let mut sessions = TraceSessions {
            own: HashMap::new(),
            parent: HashMap::new(),
            by_trace: HashMap::new(),
            rooted: HashSet::new(),
        };
        // Each span with the session its resource names, which its own
        // attributes override (as for the span itself).
        let spans = request.resource_spans.iter().flat_map(|rs| {
            let resource = rs.resource.as_ref().map(|r| Attrs(&r.attributes));
            let of_resource = resource.and_then(|attrs| attrs.session());
            rs.scope_spans
                .iter()
                .flat_map(|ss| &ss.spans)
                .map(move |span| (span, of_resource.clone()))
        });
        for (span, of_resource) in spans {
            let key = (span.trace_id.as_slice(), span.span_id.as_slice());
            if let Some(session) = named_by(span).or(of_resource) {
                sessions
                    .by_trace
                    .entry(key.0)
                    .and_modify(|one| {
                        if one.as_ref() != Some(&session) {
                            *one = None;
                        }
                    })
                    .or_insert(Some(session.clone()));
                sessions.own.insert(key, session);
            }
            if span.parent_span_id.is_empty() {
                sessions.rooted.insert(key.0);
            } else {
                sessions.parent.insert(key, span.parent_span_id.as_slice());
            }
        }
        sessions
    }

    /// For a span that names no session: the one its nearest ancestor in
    /// the request names, else the one session its trace's spans in the
    /// request name (if they name exactly one).
    pub(super) fn inherited(&self, span: &Span) -> Option<Cow<'a, str>> {
        let trace = span.trace_id.as_slice();
        let mut at = span.parent_span_id.as_slice();
        for _ in 0..MAX_ANCESTORS {
            if at.is_empty() {
                break;
            }
            if let Some(session) = self.own.get(&(trace, at)) {
                return Some(session.clone());
            }
            match self.parent.get(&(trace, at)) {
                Some(parent) => at = parent,
                None => break,
            }
        }
        self.by_trace.get(trace).cloned().flatten()
    }

    /// Whether nothing a later request brings can name a session for
    /// `trace`'s spans that name none here: the request holds the trace's
    /// root span, or the trace's spans name several sessions.
    pub(super) fn settled(&self, trace: &[u8]) -> bool {
        self.rooted.contains(trace) || matches!(self.by_trace.get(trace), Some(None))
    }
}
