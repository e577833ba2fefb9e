//! The output messages of a model call, from whichever form the
//! instrumentation recorded them in: the GenAI conventions'
//! `gen_ai.output.messages` (structured or JSON text), span events,
//! OpenInference's flattened `llm.output_messages.*`, legacy
//! `gen_ai.completion.*`, or `output.value`.

use super::attrs::{Attrs, parse_json_text};
use super::map::MapLimits;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// A normalized output message part.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Part {
    /// Reasoning (thinking) text.
    Reasoning(String),
    /// Answer text.
    Text(String),
    /// A tool call the model requests.
    ToolCall {
        /// The call id, if given.
        id: Option<String>,
        /// The tool.
        name: String,
        /// Its arguments (JSON text parsed).
        arguments: Value,
    },
}

/// A normalized output message (one choice).
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Message {
    /// The parts, in order.
    pub(super) parts: Vec<Part>,
    /// Why generation stopped (`stop`, `tool_call`, ...).
    pub(super) finish_reason: Option<String>,
}

/// Text that opens with `<think>...</think>` (reasoning models that inline
/// their thinking) split into reasoning and text.
fn split_think(text: &str, parts: &mut Vec<Part>) {
    let trimmed = text.trim_start();
    if let Some(rest) = trimmed.strip_prefix("<think>")
        && let Some(end) = rest.find("</think>")
    {
        let thinking = rest[..end].trim();
        if !thinking.is_empty() {
            parts.push(Part::Reasoning(thinking.to_owned()));
        }
        let answer = rest[end + "</think>".len()..].trim();
        if !answer.is_empty() {
            parts.push(Part::Text(answer.to_owned()));
        }
        return;
    }
    if !text.trim().is_empty() {
        parts.push(Part::Text(text.to_owned()));
    }
}

fn value_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// Tool arguments: JSON text becomes JSON.
fn arguments(v: Option<&Value>) -> Value {
    match v {
        Some(Value::String(s)) => parse_json_text(s).unwrap_or_else(|| json!(s)),
        Some(other) => other.clone(),
        None => Value::Null,
    }
}

/// Messages in the GenAI JSON schema (`gen_ai.output.messages`):
/// `[{"role", "parts": [{"type", ...}], "finish_reason"}]`.
fn genai_messages(v: &Value) -> Vec<Message> {
    let list: Vec<&Value> = match v {
        Value::Array(items) => items.iter().collect(),
        Value::Object(_) => vec![v],
        Value::String(s) => {
            let mut parts = Vec::new();
            split_think(s, &mut parts);
            return vec![Message {
                parts,
                finish_reason: None,
            }];
        }
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    for m in list {
        let mut msg = Message {
            finish_reason: m.get("finish_reason").and_then(value_text),
            ..Message::default()
        };
        if let Some(parts) = m.get("parts").and_then(Value::as_array) {
            for p in parts {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or("");
                match kind {
                    "reasoning" | "thinking" => {
                        if let Some(text) = p
                            .get("content")
                            .or_else(|| p.get("thinking"))
                            .or_else(|| p.get("text"))
                            .and_then(value_text)
                        {
                            msg.parts.push(Part::Reasoning(text));
                        }
                    }
                    "text" => {
                        if let Some(text) = p
                            .get("content")
                            .or_else(|| p.get("text"))
                            .and_then(value_text)
                        {
                            split_think(&text, &mut msg.parts);
                        }
                    }
                    "tool_call" => msg.parts.push(Part::ToolCall {
                        id: p.get("id").and_then(Value::as_str).map(str::to_owned),
                        name: p.get("name").and_then(value_text).unwrap_or_default(),
                        arguments: arguments(p.get("arguments")),
                    }),
                    _ => {}
                }
            }
        } else if let Some(content) = m.get("content") {
            // Older shape: {"role", "content", "tool_calls"}.
            if let Some(text) = value_text(content) {
                split_think(&text, &mut msg.parts);
            }
        }
        if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                let function = c.get("function").unwrap_or(c);
                msg.parts.push(Part::ToolCall {
                    id: c.get("id").and_then(Value::as_str).map(str::to_owned),
                    name: function
                        .get("name")
                        .and_then(value_text)
                        .unwrap_or_default(),
                    arguments: arguments(function.get("arguments")),
                });
            }
        }
        out.push(msg);
    }
    out
}

/// Flattened indexed attributes (`<prefix><i>.<rest>`) grouped by index,
/// in index order; only keys [`indexed_field`] reads.
pub(super) fn indexed<'a>(
    attrs: Attrs<'a>,
    prefix: &'a str,
) -> Vec<Vec<(&'a str, &'a any_value::Value)>> {
    let mut groups: std::collections::BTreeMap<u32, Vec<(&'a str, &'a any_value::Value)>> =
        std::collections::BTreeMap::new();
    for (rest, v) in attrs.with_prefix(prefix) {
        let Some((index, field)) = indexed_field(rest) else {
            continue;
        };
        groups.entry(index).or_default().push((field, v));
    }
    groups.into_values().collect()
}

/// `<i>.<field>` of a flattened key after its prefix: an index written as
/// a `u32` is (no sign, no leading zero, so that two keys never name one
/// index) and a field that is not empty. Only such keys are read into a
/// step, and only they are left out of its metadata: any other stays
/// there, so nothing sent is lost.
pub(super) fn indexed_field(rest: &str) -> Option<(u32, &str)> {
    let (index, field) = rest.split_once('.')?;
    let parsed = index.parse::<u32>().ok()?;
    (parsed.to_string() == index && !field.is_empty()).then_some((parsed, field))
}

/// The key a flattened field is read under: `field` without `prefix`
/// (`message.role` as `role`) unless another field of the same item
/// already has that name, so that no two fields write one key.
pub(super) fn unprefixed<'a>(
    field: &'a str,
    prefix: &str,
    item: &[(&'a str, &any_value::Value)],
) -> &'a str {
    match field.strip_prefix(prefix) {
        Some(short) if !item.iter().any(|(other, _)| *other == short) => short,
        _ => field,
    }
}

fn any_str(v: &any_value::Value) -> Option<&str> {
    match v {
        any_value::Value::StringValue(s) => Some(s),
        _ => None,
    }
}

/// OpenInference's flattened output messages
/// (`llm.output_messages.<i>.message.*`).
/// One OpenInference tool call: id, function name, arguments.
type FlatCall<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a str>);

fn openinference_messages(attrs: Attrs<'_>) -> Vec<Message> {
    let mut out = Vec::new();
    for fields in indexed(attrs, "llm.output_messages.") {
        let mut msg = Message::default();
        let get = |name: &str| {
            fields
                .iter()
                .find(|(f, _)| *f == name)
                .and_then(|(_, v)| any_str(v))
        };
        // Ordered content items first (reasoning, text), then plain content.
        let mut contents: std::collections::BTreeMap<u32, (Option<&str>, Option<&str>)> =
            std::collections::BTreeMap::new();
        let mut calls: std::collections::BTreeMap<u32, FlatCall<'_>> =
            std::collections::BTreeMap::new();
        for (field, v) in &fields {
            if let Some((i, name)) = field
                .strip_prefix("message.contents.")
                .and_then(indexed_field)
            {
                let entry = contents.entry(i).or_default();
                match name {
                    "message_content.type" => entry.0 = any_str(v),
                    "message_content.text" => entry.1 = any_str(v),
                    _ => {}
                }
            } else if let Some((i, name)) = field
                .strip_prefix("message.tool_calls.")
                .and_then(indexed_field)
            {
                let entry = calls.entry(i).or_default();
                match name {
                    "tool_call.id" => entry.0 = any_str(v),
                    "tool_call.function.name" => entry.1 = any_str(v),
                    "tool_call.function.arguments" => entry.2 = any_str(v),
                    _ => {}
                }
            }
        }
        for (kind, text) in contents.into_values() {
            let Some(text) = text else { continue };
            if kind == Some("reasoning") {
                msg.parts.push(Part::Reasoning(text.to_owned()));
            } else {
                split_think(text, &mut msg.parts);
            }
        }
        if let Some(text) = get("message.content") {
            split_think(text, &mut msg.parts);
        }
        push_calls(&mut msg, calls);
        if !msg.parts.is_empty() {
            out.push(msg);
        }
    }
    out
}

/// Flattened tool calls (by index: id, function name, arguments) as the
/// message's tool-call parts, in index order.
fn push_calls(msg: &mut Message, calls: std::collections::BTreeMap<u32, FlatCall<'_>>) {
    for (id, name, args) in calls.into_values() {
        msg.parts.push(Part::ToolCall {
            id: id.map(str::to_owned),
            name: name.unwrap_or_default().to_owned(),
            arguments: arguments(args.map(|a| json!(a)).as_ref()),
        });
    }
}

/// Legacy flattened completions (`gen_ai.completion.<i>.content`,
/// `.finish_reason`, and OpenLLMetry's `.tool_calls.<j>.id`, `.name`,
/// `.arguments`).
fn legacy_completions(attrs: Attrs<'_>) -> Vec<Message> {
    let mut out = Vec::new();
    for fields in indexed(attrs, "gen_ai.completion.") {
        let mut msg = Message::default();
        let mut calls: std::collections::BTreeMap<u32, FlatCall<'_>> =
            std::collections::BTreeMap::new();
        for (field, v) in &fields {
            match *field {
                "content" => {
                    if let Some(text) = any_str(v) {
                        split_think(text, &mut msg.parts);
                    }
                }
                "finish_reason" => msg.finish_reason = any_str(v).map(str::to_owned),
                other => {
                    if let Some((i, name)) =
                        other.strip_prefix("tool_calls.").and_then(indexed_field)
                    {
                        let entry = calls.entry(i).or_default();
                        match name {
                            "id" => entry.0 = any_str(v),
                            "name" => entry.1 = any_str(v),
                            "arguments" => entry.2 = any_str(v),
                            _ => {}
                        }
                    }
                }
            }
        }
        push_calls(&mut msg, calls);
        if !msg.parts.is_empty() {
            out.push(msg);
        }
    }
    out
}

/// A model call's input messages where no `gen_ai.input.messages`
/// attribute holds them: OpenLLMetry's flattened prompts
/// (`gen_ai.prompt.<i>.role`, `.content`), else the span's message events
/// (`gen_ai.client.inference.operation.details` with
/// `gen_ai.input.messages`; the older `gen_ai.system.message`,
/// `gen_ai.user.message`, `gen_ai.assistant.message`,
/// `gen_ai.tool.message` with `content`), as `[{role, content}]`; and the
/// attribute prefix they came from, if any (kept out of metadata).
pub(super) fn legacy_input(
    span: &Span,
    limits: &MapLimits,
) -> Option<(Value, Option<&'static str>)> {
    let attrs = Attrs(&span.attributes);
    let prompts: Vec<Value> = indexed(attrs, "gen_ai.prompt.")
        .into_iter()
        .filter_map(|fields| {
            let get = |name: &str| {
                fields
                    .iter()
                    .find(|(f, _)| *f == name)
                    .and_then(|(_, v)| any_str(v))
            };
            let content = get("content")?;
            Some(json!({"role": get("role").unwrap_or("user"), "content": content}))
        })
        .collect();
    if !prompts.is_empty() {
        return Some((Value::Array(prompts), Some("gen_ai.prompt.")));
    }
    let mut messages = Vec::new();
    for e in &span.events {
        let attrs = Attrs(&e.attributes);
        let role = match e.name.as_str() {
            "gen_ai.client.inference.operation.details" => {
                if let Some(Value::Array(given)) = attrs.json("gen_ai.input.messages", limits) {
                    messages.extend(given);
                }
                continue;
            }
            "gen_ai.system.message" => "system",
            "gen_ai.user.message" => "user",
            "gen_ai.assistant.message" => "assistant",
            "gen_ai.tool.message" => "tool",
            _ => continue,
        };
        if let Some(content) = attrs.json("content", limits) {
            messages.push(json!({"role": role, "content": content}));
        }
    }
    (!messages.is_empty()).then_some((Value::Array(messages), None))
}

/// Output messages from span events: `gen_ai.client.inference.operation.details`
/// (with `gen_ai.output.messages`) or `gen_ai.choice` (with `message`).
fn event_messages(span: &Span, limits: &MapLimits) -> Vec<Message> {
    let mut out = Vec::new();
    for e in &span.events {
        let attrs = Attrs(&e.attributes);
        match e.name.as_str() {
            "gen_ai.client.inference.operation.details" => {
                if let Some(v) = attrs.json("gen_ai.output.messages", limits) {
                    out.extend(genai_messages(&v));
                }
            }
            "gen_ai.choice" => {
                if let Some(v) = attrs.json("message", limits) {
                    let mut msgs = genai_messages(&v);
                    if let Some(reason) = attrs.str("finish_reason") {
                        for m in &mut msgs {
                            m.finish_reason.get_or_insert_with(|| reason.to_owned());
                        }
                    }
                    out.extend(msgs);
                }
            }
            _ => {}
        }
    }
    out
}

/// The output messages of a model call, from the first source that has
/// any; and the attribute it came from (kept out of metadata).
pub(super) fn output_messages(
    span: &Span,
    limits: &MapLimits,
) -> (Vec<Message>, Option<&'static str>) {
    let attrs = Attrs(&span.attributes);
    if let Some(v) = attrs.json("gen_ai.output.messages", limits) {
        return (genai_messages(&v), Some("gen_ai.output.messages"));
    }
    let from_events = event_messages(span, limits);
    if !from_events.is_empty() {
        return (from_events, None);
    }
    let oi = openinference_messages(attrs);
    if !oi.is_empty() {
        return (oi, Some("llm.output_messages."));
    }
    let legacy = legacy_completions(attrs);
    if !legacy.is_empty() {
        return (legacy, Some("gen_ai.completion."));
    }
    if let Some(text) = attrs.str("output.value") {
        let v = parse_json_text(text);
        let msgs = match &v {
            Some(v @ (Value::Array(_) | Value::Object(_)))
                if v.get("parts").is_some() || v.is_array() =>
            {
                genai_messages(v)
            }
            _ => genai_messages(&json!(text)),
        };
        return (msgs, Some("output.value"));
    }
    (Vec::new(), None)
}

/// The text of the last user message of a `gen_ai.input.messages` JSON
/// text too large to parse whole (`parse_json_text` keeps such text a
/// string), as [`last_user_text`] reads a parsed one: the array is read
/// one message at a time, and of each message only its role, its text
/// parts' contents and its `content` are kept, each as text (a string as
/// its value, any other value as its JSON as written), so what is held is
/// one message's text, not the history's values. Elements that are not
/// objects, members of other names and parts of other types are skipped
/// without being built. `None` if the text is not such an array (or a
/// message or part names one of those members twice) or holds no user
/// message with text.
pub(super) fn last_user_text_streamed(text: &str) -> Option<String> {
    let mut last = None;
    let mut well_formed = true;
    each_element(text, |message| {
        let Some(picked) = members(message, ["role", "parts", "content"]) else {
            well_formed &= !message.get().starts_with('{');
            return;
        };
        let [role, parts, content] = picked;
        if role.and_then(string_of).as_deref() != Some("user") {
            return;
        }
        let mut texts = Vec::new();
        if let Some(parts) = parts {
            each_element(parts.get(), |part| {
                match members(part, ["type", "content"]) {
                    Some([kind, content]) => {
                        if kind.and_then(string_of).as_deref() == Some("text")
                            && let Some(text) = content.and_then(text_of)
                        {
                            texts.push(text);
                        }
                    }
                    None => well_formed &= !part.get().starts_with('{'),
                }
            });
        }
        let text = if texts.is_empty() {
            content.and_then(text_of)
        } else {
            Some(texts.join("\n"))
        };
        if text.is_some() {
            last = text;
        }
    })?;
    well_formed.then_some(last).flatten()
}

/// Calls `each` with every element of `text` when it is a JSON array,
/// each as its text (nothing built); `Some(())` then, `None` when `text`
/// is not one (trailing text included). Any other value is no array.
fn each_element<'a>(text: &'a str, each: impl FnMut(&'a RawValue)) -> Option<()> {
    use serde::de::{Deserializer as _, SeqAccess, Visitor};
    struct Elements<F>(F);
    impl<'de, F: FnMut(&'de RawValue)> Visitor<'de> for Elements<F> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an array")
        }
        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
            while let Some(element) = seq.next_element::<&RawValue>()? {
                (self.0)(element);
            }
            Ok(())
        }
    }
    if !text.trim_start().starts_with('[') {
        return None;
    }
    let mut reader = serde_json::Deserializer::from_str(text);
    reader.deserialize_seq(Elements(each)).ok()?;
    reader.end().ok()
}

/// The members `names` of `object` when it is a JSON object, each as its
/// text (the others skipped unbuilt); `None` when it is not one or names
/// one of them twice.
fn members<'a, const N: usize>(
    object: &'a RawValue,
    names: [&'static str; N],
) -> Option<[Option<&'a RawValue>; N]> {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
    struct Members<const N: usize>([&'static str; N]);
    impl<'de, const N: usize> Visitor<'de> for Members<N> {
        type Value = [Option<&'de RawValue>; N];
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = [None; N];
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                match self.0.iter().position(|name| *name == key) {
                    Some(at) if found[at].is_some() => {
                        return Err(serde::de::Error::custom(format!("{key} given twice")));
                    }
                    Some(at) => found[at] = Some(map.next_value::<&RawValue>()?),
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(found)
        }
    }
    if !object.get().starts_with('{') {
        return None;
    }
    serde_json::Deserializer::from_str(object.get())
        .deserialize_map(Members(names))
        .ok()
}

/// A JSON string's value, when `raw` is one.
fn string_of(raw: &RawValue) -> Option<String> {
    serde_json::from_str::<String>(raw.get()).ok()
}

/// A member's value as [`value_text`] gives it: a string's value, nothing
/// for null, any other value as its JSON (here as written, never built).
fn text_of(raw: &RawValue) -> Option<String> {
    match raw.get() {
        "null" => None,
        json if json.starts_with('"') => string_of(raw),
        json => Some(json.to_owned()),
    }
}

/// The text of the last user message of `gen_ai.input.messages` (or of an
/// OpenInference `input.value`), for an agent invocation's content.
pub(super) fn last_user_text(input: &Value) -> Option<String> {
    let list = input.as_array()?;
    for m in list.iter().rev() {
        if m.get("role").and_then(Value::as_str) != Some("user") {
            continue;
        }
        if let Some(parts) = m.get("parts").and_then(Value::as_array) {
            let text: Vec<String> = parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("content").and_then(value_text))
                .collect();
            if !text.is_empty() {
                return Some(text.join("\n"));
            }
        }
        if let Some(text) = m.get("content").and_then(value_text) {
            return Some(text);
        }
    }
    None
}
