//! The messages of an OTLP trace export and their members, as both
//! encodings name them (the protobuf's field numbers, OTLP/JSON's
//! lowerCamelCase names): written once, for what reads a body without
//! decoding it (the protobuf budget in `decode.rs`, the ignored JSON
//! members in `json_hint.rs`).

/// A message of the trace export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Message {
    Request,
    ResourceSpans,
    Resource,
    ScopeSpans,
    Scope,
    Span,
    Event,
    Link,
    Status,
    KeyValue,
    AnyValue,
    List,
    KvList,
}

/// What a member holds: another message, a repeated one, or a scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holds {
    One(Message),
    Many(Message),
    Scalar,
}

/// A member of a message: its OTLP/JSON name, its protobuf field number,
/// and what it holds.
pub(crate) struct Member {
    pub(crate) json: &'static str,
    pub(crate) field: u32,
    pub(crate) holds: Holds,
}

/// A [`Member`] (a literal, so that the tables are static).
macro_rules! member {
    ($json:literal, $field:literal, $holds:expr) => {
        Member {
            json: $json,
            field: $field,
            holds: $holds,
        }
    };
}

impl Message {
    /// Its members (opentelemetry-proto's `trace.proto`, `common.proto`,
    /// `resource.proto` and `trace_service.proto`).
    pub(crate) fn members(self) -> &'static [Member] {
        use Holds::{Many, One, Scalar};
        use Message::*;
        match self {
            Request => &[member!("resourceSpans", 1, Many(ResourceSpans))],
            ResourceSpans => &[
                member!("resource", 1, One(Resource)),
                member!("scopeSpans", 2, Many(ScopeSpans)),
                member!("schemaUrl", 3, Scalar),
            ],
            Resource => &[
                member!("attributes", 1, Many(KeyValue)),
                member!("droppedAttributesCount", 2, Scalar),
                member!("entityRefs", 3, Scalar),
            ],
            ScopeSpans => &[
                member!("scope", 1, One(Scope)),
                member!("spans", 2, Many(Span)),
                member!("schemaUrl", 3, Scalar),
            ],
            Scope => &[
                member!("name", 1, Scalar),
                member!("version", 2, Scalar),
                member!("attributes", 3, Many(KeyValue)),
                member!("droppedAttributesCount", 4, Scalar),
            ],
            Span => &[
                member!("traceId", 1, Scalar),
                member!("spanId", 2, Scalar),
                member!("traceState", 3, Scalar),
                member!("parentSpanId", 4, Scalar),
                member!("name", 5, Scalar),
                member!("kind", 6, Scalar),
                member!("startTimeUnixNano", 7, Scalar),
                member!("endTimeUnixNano", 8, Scalar),
                member!("attributes", 9, Many(KeyValue)),
                member!("droppedAttributesCount", 10, Scalar),
                member!("events", 11, Many(Event)),
                member!("droppedEventsCount", 12, Scalar),
                member!("links", 13, Many(Link)),
                member!("droppedLinksCount", 14, Scalar),
                member!("status", 15, One(Status)),
                member!("flags", 16, Scalar),
            ],
            Event => &[
                member!("timeUnixNano", 1, Scalar),
                member!("name", 2, Scalar),
                member!("attributes", 3, Many(KeyValue)),
                member!("droppedAttributesCount", 4, Scalar),
            ],
            Link => &[
                member!("traceId", 1, Scalar),
                member!("spanId", 2, Scalar),
                member!("traceState", 3, Scalar),
                member!("attributes", 4, Many(KeyValue)),
                member!("droppedAttributesCount", 5, Scalar),
                member!("flags", 6, Scalar),
            ],
            Status => &[member!("message", 2, Scalar), member!("code", 3, Scalar)],
            KeyValue => &[
                member!("key", 1, Scalar),
                member!("value", 2, One(AnyValue)),
            ],
            AnyValue => &[
                member!("stringValue", 1, Scalar),
                member!("boolValue", 2, Scalar),
                member!("intValue", 3, Scalar),
                member!("doubleValue", 4, Scalar),
                member!("arrayValue", 5, One(List)),
                member!("kvlistValue", 6, One(KvList)),
                member!("bytesValue", 7, Scalar),
            ],
            List => &[member!("values", 1, Many(AnyValue))],
            KvList => &[member!("values", 1, Many(KeyValue))],
        }
    }

    /// The message protobuf field `field` holds, if it holds one whose
    /// instances the decoding budget counts (a span's status, one per
    /// span and of bounded size, is not counted).
    pub(crate) fn child(self, field: u32) -> Option<Message> {
        let m = self.members().iter().find(|m| m.field == field)?;
        match m.holds {
            Holds::One(Message::Status) | Holds::Scalar => None,
            Holds::One(child) | Holds::Many(child) => Some(child),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counted children are those the protobuf budget has always
    /// counted.
    #[test]
    fn protobuf_children_are_the_counted_messages() {
        use Message::*;
        // Every message the request reaches through counted children.
        let mut children: Vec<(Message, u32, Message)> = Vec::new();
        let mut reached = vec![Request];
        let mut i = 0;
        while let Some(&m) = reached.get(i) {
            for field in 0..20 {
                if let Some(child) = m.child(field) {
                    children.push((m, field, child));
                    if !reached.contains(&child) {
                        reached.push(child);
                    }
                }
            }
            i += 1;
        }
        children.sort_by_key(|(m, field, _)| (*m as u8, *field));
        assert_eq!(
            children,
            [
                (Request, 1, ResourceSpans),
                (ResourceSpans, 1, Resource),
                (ResourceSpans, 2, ScopeSpans),
                (Resource, 1, KeyValue),
                (ScopeSpans, 1, Scope),
                (ScopeSpans, 2, Span),
                (Scope, 3, KeyValue),
                (Span, 9, KeyValue),
                (Span, 11, Event),
                (Span, 13, Link),
                (Event, 3, KeyValue),
                (Link, 4, KeyValue),
                (KeyValue, 2, AnyValue),
                (AnyValue, 5, List),
                (AnyValue, 6, KvList),
                (List, 1, AnyValue),
                (KvList, 1, KeyValue),
            ]
        );
    }
}
