//! What an OTLP/JSON body names that a receiver ignores, said to its
//! sender: the OTLP/JSON rules have unknown members ignored (so that newer
//! exporters' members pass older receivers), which also drops, without a
//! word, whatever an exporter sent under the protobuf's snake_case names
//! (`scope_spans`, `start_time_unix_nano`, `string_value`): spans, times,
//! attribute values. [`json_member_hint`] reads a body that decoded, once
//! more, member names only (values skipped unread, known names compared
//! without copying), through every message of the trace export.

use super::schema::{Holds, Message};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// At most this many names are kept (and named), in the body's order.
const MAX_NAMES: usize = 8;

/// A name is shown (and compared) as its first 64 characters.
const SHOWN_CHARS: usize = 64;

/// Why an OTLP/JSON body (that decoded, holding `spans` spans) lost
/// something to the rule that unknown members are ignored, or `None`:
///
/// - a body of no span that names any member OTLP/JSON does not have at
///   its top, in a resource spans element or in a scope spans element
///   (the proto's snake_case, OTLP before 0.19's
///   `instrumentationLibrarySpans`, a typo such as `span`), which is
///   likely an export misspelt rather than an empty one;
/// - any body that names a member, in any message of the export, that is
///   the snake_case spelling of one OTLP/JSON has there (`trace_id` in a
///   span, `string_value` in an attribute's value): what it held was not
///   recorded. Other unknown members of a body with spans are not named
///   (a newer OTLP's members are ignored as the rules say).
pub fn json_member_hint(body: &[u8], spans: usize) -> Option<String> {
    let mut found = Found::default();
    let mut reader = serde_json::Deserializer::from_slice(body);
    // A body that stops parsing keeps the names found before.
    let _ = Scan {
        message: Message::Request,
        list: false,
        found: &mut found,
    }
    .deserialize(&mut reader);
    if spans == 0 && !found.unknown.is_empty() {
        return Some(format!(
            "no span was found in this OTLP/JSON body: it names {}, which OTLP/JSON does not have and a receiver ignores; its members are lowerCamelCase: resourceSpans, scopeSpans, spans (instrumentationLibrarySpans is OTLP before 0.19, which Cairn does not read)",
            quoted(found.unknown.iter())
        ));
    }
    let mut parts = Vec::new();
    if !found.snake.is_empty() {
        parts.push(format!(
            "this OTLP/JSON body names {}: the protobuf's spelling, which OTLP/JSON does not have and a receiver ignores, so what those members held was not recorded (OTLP/JSON member names are lowerCamelCase)",
            found
                .snake
                .iter()
                .map(|(name, camel)| format!("{name:?} (for {camel:?})"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !found.arrays.is_empty() {
        parts.push(format!(
            "this OTLP/JSON body gives {} as an array, not an object: its values were read by their position, which OTLP/JSON does not define (give each message as an object of named members)",
            found
                .arrays
                .iter()
                .map(|m| format!("a {m:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// `"a", "b"`.
fn quoted<'a>(names: impl Iterator<Item = &'a String>) -> String {
    names
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The names found, each once, at most [`MAX_NAMES`] of each kind.
#[derive(Default)]
struct Found {
    /// Unknown members of the request and of its resource spans elements
    /// (snake_case spellings included), as shown.
    unknown: Vec<String>,
    /// Snake_case spellings anywhere, as shown, with the member meant.
    snake: Vec<(String, &'static str)>,
    /// The messages given as an array where an object belongs (the decoder
    /// reads such an array by position).
    arrays: Vec<Message>,
}

impl Found {
    /// Keeps `shown` (a name as [`NameOf`] cut it) among the unknown.
    fn unknown(&mut self, shown: &str) {
        if self.unknown.len() < MAX_NAMES && !self.unknown.iter().any(|n| n == shown) {
            self.unknown.push(shown.to_owned());
        }
    }

    /// Keeps `shown`, the snake_case spelling of `camel`.
    fn snake(&mut self, shown: &str, camel: &'static str) {
        if self.snake.len() < MAX_NAMES && !self.snake.iter().any(|(n, _)| n == shown) {
            self.snake.push((shown.to_owned(), camel));
        }
    }
}

/// Whether an unknown member of `message` may mean an export misspelt
/// whole (named when the body holds no span): the messages on the way to
/// the spans (`"span": [...]` in a scope's spans held them all).
fn outer(message: Message) -> bool {
    matches!(
        message,
        Message::Request | Message::ResourceSpans | Message::ScopeSpans
    )
}

/// The member `name` of `message`: compared without copying it, and
/// copied (cut to [`SHOWN_CHARS`]) only when it is to be shown.
fn classify(message: Message, name: &str) -> Named {
    let shown = || name.chars().take(SHOWN_CHARS).collect();
    let members = message.members();
    if let Some(m) = members.iter().find(|m| m.json == name) {
        return Named::Known(m.holds);
    }
    if name.contains('_')
        && let Some(m) = members.iter().find(|m| snake_of(m.json, name))
    {
        return Named::Snake(shown(), m.json, m.holds);
    }
    Named::Unknown(shown())
}

/// Whether `name` is `camel` in snake_case (`scope_spans` for
/// `scopeSpans`): each upper-case letter an underscore and its lower case.
fn snake_of(camel: &str, name: &str) -> bool {
    let mut expected = camel.chars().flat_map(|c| {
        let lower = c.to_ascii_lowercase();
        let underscore = c.is_ascii_uppercase().then_some('_');
        underscore.into_iter().chain(std::iter::once(lower))
    });
    let mut given = name.chars();
    loop {
        match (expected.next(), given.next()) {
            (None, None) => return true,
            (Some(e), Some(g)) if e == g => {}
            _ => return false,
        }
    }
}

/// Reads a value of `message` (or a list of them, `list`), recording
/// member names in `found`.
struct Scan<'a> {
    message: Message,
    list: bool,
    found: &'a mut Found,
}

impl<'de> DeserializeSeed<'de> for Scan<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        // `deserialize_any`: a value of another type than the message's
        // (a decoded body's `null`, a string where a list was) is skipped.
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scan<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an OTLP/JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        if self.list {
            // Not the list the member holds: nothing of it is read.
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        }
        while let Some(name) = map.next_key_seed(NameOf(self.message))? {
            let holds = match name {
                Named::Known(holds) => holds,
                Named::Snake(shown, camel, holds) => {
                    self.found.snake(&shown, camel);
                    if outer(self.message) {
                        self.found.unknown(&shown);
                    }
                    // Read on: the names within are misspelt too.
                    holds
                }
                Named::Unknown(shown) => {
                    if outer(self.message) {
                        self.found.unknown(&shown);
                    }
                    Holds::Scalar
                }
            };
            match holds {
                Holds::Scalar => {
                    map.next_value::<IgnoredAny>()?;
                }
                Holds::One(message) | Holds::Many(message) => map.next_value_seed(Scan {
                    message,
                    list: matches!(holds, Holds::Many(_)),
                    found: &mut *self.found,
                })?,
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if !self.list {
            // A message given as an array.
            if self.found.arrays.len() < MAX_NAMES && !self.found.arrays.contains(&self.message) {
                self.found.arrays.push(self.message);
            }
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(());
        }
        while seq
            .next_element_seed(Scan {
                message: self.message,
                list: false,
                found: &mut *self.found,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// A member name as read: what it is in its message, and as shown when it
/// is to be.
enum Named {
    Known(Holds),
    /// The snake_case spelling of a member the message has: as shown, the
    /// member, what it holds.
    Snake(String, &'static str, Holds),
    Unknown(String),
}

/// Reads a member name of a message.
struct NameOf(Message);

impl<'de> DeserializeSeed<'de> for NameOf {
    type Value = Named;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Named, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for NameOf {
    type Value = Named;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, name: &str) -> Result<Named, E> {
        Ok(classify(self.0, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_case_spellings_are_recognised_exactly() {
        assert!(snake_of("scopeSpans", "scope_spans"));
        assert!(snake_of("startTimeUnixNano", "start_time_unix_nano"));
        assert!(snake_of("name", "name"));
        assert!(!snake_of("scopeSpans", "scope_span"));
        assert!(!snake_of("scopeSpans", "scope_spans_"));
        assert!(!snake_of("scopeSpans", "Scope_Spans"));
        assert!(!snake_of("spanId", "spanid"));
    }

    #[test]
    fn misspelt_members_are_named_wherever_they_are() {
        let hint = |body: &str, spans| json_member_hint(body.as_bytes(), spans);
        // A span's time and an attribute's value in the proto's spelling,
        // beside spans spelt right.
        let body = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[
            {"traceId":"01","spanId":"02","start_time_unix_nano":"1",
             "attributes":[{"key":"k","value":{"string_value":"v"}}]},
            {"traceId":"01","spanId":"03","start_time_unix_nano":"2"}]}]}]}"#;
        let text = hint(body, 2).unwrap();
        assert!(
            text.starts_with(
                r#"this OTLP/JSON body names "start_time_unix_nano" (for "startTimeUnixNano"), "string_value" (for "stringValue"): "#
            ),
            "{text}"
        );
        // A second resource's spans under scope_spans: the names within
        // are read too.
        let body = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"01"}]}]},
            {"scope_spans":[{"spans":[{"trace_id":"01"}]}]}]}"#;
        let text = hint(body, 1).unwrap();
        assert!(
            text.contains(r#""scope_spans" (for "scopeSpans"), "trace_id" (for "traceId")"#),
            "{text}"
        );
        // Nested values: a list's value, a key-value list's value.
        let body = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":
            {"arrayValue":{"values":[{"kvlistValue":{"values":[{"key":"a","value":{"int_value":1}}]}}]}}}]}}]}"#;
        assert!(
            hint(body, 1)
                .unwrap()
                .contains(r#""int_value" (for "intValue")"#)
        );
        // Other unknown members of a body with spans are a newer OTLP's.
        assert_eq!(hint(r#"{"resourceSpans":[],"futureMember":1}"#, 1), None);
        assert_eq!(
            hint(
                r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"01","newField":{"a_b":1}}]}]}]}"#,
                1
            ),
            None
        );
        // A name in a value (an attribute's key, a string) is no member.
        assert_eq!(
            hint(
                r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"scope_spans","value":{"stringValue":"trace_id"}}]}}]}"#,
                0
            ),
            None
        );
        // At most eight, each once.
        let many: Vec<String> = (0..12)
            .map(|i| format!(r#"{{"key":"k{i}","value":{{"string_value":"v"}},"dropped_attributes_count":{i}}}"#))
            .collect();
        let body = format!(
            r#"{{"resourceSpans":[{{"resource":{{"attributes":[{}]}}}}]}}"#,
            many.join(",")
        );
        let text = hint(&body, 1).unwrap();
        assert_eq!(text.matches("(for ").count(), 1, "{text}");
    }

    #[test]
    fn a_body_of_no_span_names_its_unknown_outer_members() {
        let text =
            json_member_hint(br#"{"resource_spans":[{"scope_spans":[]}],"x":1}"#, 0).unwrap();
        assert!(
            text.starts_with(
                r#"no span was found in this OTLP/JSON body: it names "resource_spans", "scope_spans", "x","#
            ),
            "{text}"
        );
        assert_eq!(json_member_hint(b"{}", 0), None);
        // A message given as an array (read by position by the decoder).
        let text = json_member_hint(
            br#"{"resourceSpans":[[null,[{"spans":[["01","02"]]}]]]}"#,
            1,
        )
        .unwrap();
        assert!(
            text.contains(r#"gives a ResourceSpans as an array"#),
            "{text}"
        );
        assert_eq!(
            json_member_hint(
                br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"01"}]}]}]}"#,
                1
            ),
            None
        );
        let text = json_member_hint(
            br#"{"resourceSpans":[{"scopeSpans":[{"span":[{"traceId":"01"}]}]}]}"#,
            0,
        )
        .unwrap();
        assert!(text.contains(r#"it names "span","#), "{text}");
        // A body cut short keeps what was found before.
        assert!(json_member_hint(br#"{"resourceSpanz":[1,"#, 0).is_some());
    }
}
