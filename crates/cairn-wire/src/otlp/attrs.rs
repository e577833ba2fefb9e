//! Attribute values as JSON for the store: lookups, JSON text, limits.
//! Everything here is bounded: strings are clipped to the attribute limit,
//! nesting is cut at [`MAX_DEPTH`], integers beyond ±(2^53 - 1) become
//! decimal strings, and payloads are fitted to the store's size limit.

use super::map::MapLimits;
use cairn_core::Timestamp;
use cairn_core::record::validate_id;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use serde_json::{Map, Value, json};

/// Nesting kept when attribute values become JSON; deeper values are cut
/// with a marker (the store refuses JSON deeper than 64 levels).
const MAX_DEPTH: usize = 32;

/// Largest JSON text (in a message, argument or result attribute) that is
/// parsed into JSON; longer text is kept as a string.
const MAX_JSON_TEXT: usize = 1024 * 1024;

/// What JSON text may hold in memory once parsed ([`approx_memory`]): this,
/// or 32 times its text if more. Text of many small parts (objects of one
/// member nested in one another) holds about a hundred times its size
/// once parsed; such text is kept as a string, judged before it is parsed
/// by counting what could open an object, array or value
/// ([`parsed_memory_bound`]).
const MAX_PARSED_MEMORY: usize = 256 * 1024;

/// What all the JSON text one request's mapping parses may hold in memory
/// (as [`approx_memory`] counts it): past it, text stays a string. Each
/// text is bounded alone; this bounds many of them in one span or request.
pub(super) const MAX_PARSED_MEMORY_PER_REQUEST: usize = 64 * 1024 * 1024;

thread_local! {
    /// What the request being mapped on this thread may still parse
    /// (`None` outside a request's mapping: each text is bounded alone).
    static PARSE_BUDGET: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// The parse budget of the request being mapped on this thread, from
/// [`ParseBudget::start`] until the guard is dropped.
pub(super) struct ParseBudget(());

impl ParseBudget {
    /// Starts a request's budget of `bytes` on this thread.
    pub(super) fn start(bytes: usize) -> ParseBudget {
        PARSE_BUDGET.set(Some(bytes));
        ParseBudget(())
    }
}

impl Drop for ParseBudget {
    fn drop(&mut self) {
        PARSE_BUDGET.set(None);
    }
}

/// A span's attributes, looked up by key (the last value wins, as in a
/// map).
#[derive(Clone, Copy)]
pub(super) struct Attrs<'a>(pub(super) &'a [KeyValue]);

impl<'a> Attrs<'a> {
    pub(super) fn get(self, key: &str) -> Option<&'a any_value::Value> {
        self.0
            .iter()
            .rev()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| v.value.as_ref())
    }

    pub(super) fn str(self, key: &str) -> Option<&'a str> {
        match self.get(key)? {
            any_value::Value::StringValue(s) if !s.is_empty() => Some(s),
            _ => None,
        }
    }

    /// The session these attributes name: `gen_ai.conversation.id`, else
    /// `session.id`; a string that is not empty, or an integer as its
    /// decimal digits (instrumentations that number conversations send
    /// one: taken for none, each trace had opened a session of its own).
    pub(super) fn session(self) -> Option<std::borrow::Cow<'a, str>> {
        ["gen_ai.conversation.id", "session.id"]
            .into_iter()
            .find_map(|key| match self.get(key)? {
                any_value::Value::StringValue(s) if !s.is_empty() => {
                    Some(std::borrow::Cow::Borrowed(s.as_str()))
                }
                any_value::Value::IntValue(i) => Some(std::borrow::Cow::Owned(i.to_string())),
                _ => None,
            })
    }

    pub(super) fn int(self, key: &str) -> Option<i64> {
        match self.get(key)? {
            any_value::Value::IntValue(i) => Some(*i),
            any_value::Value::DoubleValue(d) if d.fract() == 0.0 && d.abs() < 9e15 => {
                Some(*d as i64)
            }
            any_value::Value::StringValue(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// A value that may be structured or a JSON string (the GenAI
    /// conventions allow both for messages, arguments and results).
    pub(super) fn json(self, key: &str, limits: &MapLimits) -> Option<Value> {
        let value = self.get(key)?;
        Some(match value {
            any_value::Value::StringValue(s) => parse_json_text(s).unwrap_or_else(|| json!(s)),
            other => any_to_json(other, 0, limits, &mut false),
        })
    }

    /// Keys starting with `prefix`.
    pub(super) fn with_prefix(
        self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a any_value::Value)> {
        self.0.iter().filter_map(move |kv| {
            let rest = kv.key.strip_prefix(prefix)?;
            Some((rest, kv.value.as_ref()?.value.as_ref()?))
        })
    }
}

/// JSON text (an object or array) as a value, sanitized for the store;
/// `None` (the text is kept as a string) if it is not strict JSON.
pub(super) fn parse_json_text(text: &str) -> Option<Value> {
    let t = text.trim_start();
    // Parsed JSON takes several times its text in memory; text this large
    // would be cut to a marker by the payload limit anyway, so it stays a
    // string.
    if !(t.starts_with('{') || t.starts_with('[')) || text.len() > MAX_JSON_TEXT {
        return None;
    }
    let left = PARSE_BUDGET.get();
    let allowed = MAX_PARSED_MEMORY
        .max(32 * text.len())
        .min(left.unwrap_or(usize::MAX));
    if parsed_memory_bound(text.as_bytes()) > allowed {
        return None;
    }
    // Read strictly: text with a member given twice, or a member name
    // serde_json would read as its own marker (and so as another value),
    // stays the string it was sent as rather than become a value it was not.
    let value =
        cairn_core::json::from_slice_with(text.as_bytes(), cairn_core::json::Integers::Bits64)
            .ok()
            .filter(|value| cairn_core::json::reserved_member_name(value).is_none())?;
    let value = sanitize(value, 0);
    let held = approx_memory(&value);
    if held > allowed {
        return None;
    }
    if let Some(left) = left {
        PARSE_BUDGET.set(Some(left - held));
    }
    Some(value)
}

/// Makes parsed JSON acceptable to the store: integers beyond ±(2^53 - 1)
/// become strings, nesting deeper than [`MAX_DEPTH`] is cut.
fn sanitize(value: Value, depth: usize) -> Value {
    match value {
        Value::Number(n) => {
            let safe = n
                .as_i64()
                .map(|i| i.unsigned_abs() <= cairn_core::record::MAX_SAFE_INTEGER)
                .or_else(|| {
                    n.as_u64()
                        .map(|u| u <= cairn_core::record::MAX_SAFE_INTEGER)
                })
                .unwrap_or(true);
            if safe {
                Value::Number(n)
            } else {
                Value::String(n.to_string())
            }
        }
        Value::Array(items) if depth >= MAX_DEPTH => {
            json!(format!("[{} items nested too deep]", items.len()))
        }
        Value::Object(map) if depth >= MAX_DEPTH => {
            json!(format!("[{} members nested too deep]", map.len()))
        }
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| sanitize(v, depth + 1)).collect())
        }
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, sanitize(v, depth + 1)))
                .collect(),
        ),
        other => other,
    }
}

/// An attribute value as JSON. Strings longer than the attribute limit are
/// cut with a marker (`cut` is set); integers beyond ±(2^53 - 1) become
/// decimal strings; bytes become `{"base64": ...}`.
pub(super) fn any_to_json(
    value: &any_value::Value,
    depth: usize,
    limits: &MapLimits,
    cut: &mut bool,
) -> Value {
    use any_value::Value as V;
    match value {
        V::StringValue(s) => Value::String(clip(s, limits.max_attribute_bytes, cut)),
        V::BoolValue(b) => Value::Bool(*b),
        V::IntValue(i) => {
            if i.unsigned_abs() <= cairn_core::record::MAX_SAFE_INTEGER {
                json!(i)
            } else {
                json!(i.to_string())
            }
        }
        V::DoubleValue(d) => {
            if d.is_finite() {
                json!(d)
            } else if d.is_nan() {
                json!("NaN")
            } else if *d > 0.0 {
                json!("Infinity")
            } else {
                json!("-Infinity")
            }
        }
        V::BytesValue(b) => {
            use base64::Engine as _;
            let cut_len = b.len().min(limits.max_attribute_bytes / 4 * 3);
            if cut_len < b.len() {
                *cut = true;
            }
            json!({"base64": base64::engine::general_purpose::STANDARD.encode(&b[..cut_len])})
        }
        V::ArrayValue(a) if depth >= MAX_DEPTH => {
            json!(format!("[{} items nested too deep]", a.values.len()))
        }
        V::KvlistValue(l) if depth >= MAX_DEPTH => {
            json!(format!("[{} members nested too deep]", l.values.len()))
        }
        V::ArrayValue(a) => Value::Array(
            a.values
                .iter()
                .map(|v| match &v.value {
                    Some(v) => any_to_json(v, depth + 1, limits, cut),
                    None => Value::Null,
                })
                .collect(),
        ),
        V::KvlistValue(l) => {
            let mut obj = Map::new();
            for kv in &l.values {
                let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(v) => any_to_json(v, depth + 1, limits, cut),
                    None => Value::Null,
                };
                obj.insert(kv.key.clone(), v);
            }
            Value::Object(obj)
        }
        V::StringValueStrindex(i) => json!({"string_index": i}),
    }
}

/// `text` cut to at most `max` bytes at a character boundary, with a marker
/// saying how long it was.
pub(super) fn clip(text: &str, max: usize, cut: &mut bool) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    *cut = true;
    let mut marker = format!(" …[truncated: {} bytes in all]", text.len());
    if marker.len() > max {
        // A limit too small for the marker: the text alone, cut.
        marker.clear();
    }
    let mut end = max - marker.len();
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{marker}", &text[..end])
}

/// Attributes as a JSON object (the last value of a repeated key wins);
/// keys of cut values are added to `truncated` as `<prefix>.<key>`.
pub(super) fn attributes_json<'a>(
    attrs: impl IntoIterator<Item = &'a KeyValue>,
    limits: &MapLimits,
    prefix: &str,
    truncated: &mut Vec<String>,
) -> Value {
    let mut obj = Map::new();
    for kv in attrs {
        let mut cut = false;
        let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(v) => any_to_json(v, 0, limits, &mut cut),
            None => Value::Null,
        };
        if cut {
            truncated.push(format!("{prefix}.{}", kv.key));
        }
        obj.insert(kv.key.clone(), v);
    }
    Value::Object(obj)
}

/// A Cairn id for an outside identifier: itself when it is one (1 to 200
/// characters of `A-Za-z0-9-_.:@+=~`); otherwise its other characters
/// replaced by `-`, cut to 180 bytes, and `~` plus 12 hex digits of its
/// SHA-256 appended, so that two different identifiers stay different.
pub fn id_from(text: &str) -> String {
    // What looks like an API key is never kept, not even in part: its
    // hash alone names it.
    if cairn_core::record::looks_like_an_api_key(text) {
        let digest = cairn_core::Hash::sha256(text.as_bytes()).to_hex();
        return format!("redacted~{}", &digest[..12]);
    }
    // `.` and `..` are valid ids but name nothing in a URL path: hashed
    // like any other text that is not an id.
    if validate_id("id", text).is_ok() && !cairn_core::record::is_dot_segment(text) {
        return text.to_owned();
    }
    let mut cleaned = String::with_capacity(text.len().min(180));
    for c in text.chars() {
        if cleaned.len() >= 180 {
            break;
        }
        if c.is_ascii_alphanumeric() || "-_.:@+=".contains(c) {
            cleaned.push(c);
        } else if !cleaned.ends_with('-') {
            cleaned.push('-');
        }
    }
    let digest = cairn_core::Hash::sha256(text.as_bytes()).to_hex();
    format!("{cleaned}~{}", &digest[..12])
}

/// For a session id looked up and not found: where OTLP ingest stores a
/// session of that name when the name is not an id as given ("a session
/// an OTLP exporter named so is stored as `conv-42-~…`"), `None` when it
/// is one.
pub fn stored_session_hint(id: &str) -> Option<String> {
    let stored = id_from(id);
    (stored != id).then(|| format!("a session an OTLP exporter named so is stored as {stored}"))
}

/// Unix nanoseconds as RFC 3339 UTC with microseconds; `None` for 0 or
/// out of range.
pub(super) fn rfc3339(nanos: u64) -> Option<String> {
    let micros = i64::try_from(nanos / 1000).ok()?;
    if nanos == 0 {
        return None;
    }
    Timestamp::from_micros(micros).map(|t| t.to_string())
}

/// A rough upper bound of a value's JSON size, without serializing it.
pub(super) fn approx_size(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 24,
        Value::String(s) => s.len() + 2 + s.len() / 8,
        Value::Array(items) => 2 + items.iter().map(|v| approx_size(v) + 1).sum::<usize>(),
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| k.len() + 4 + approx_size(v))
                .sum::<usize>()
        }
    }
}

pub(super) use cairn_core::json::approx_memory;
use cairn_core::json::parsed_memory_bound;

/// `value` if its JSON fits in `max` bytes; otherwise a marker object with
/// its size and the start of its JSON text (`on_cut` is called).
pub(super) fn fit(value: Value, max: usize, on_cut: impl FnOnce()) -> Value {
    // Escapes can make canonical JSON a little longer than this estimate's
    // base; keep a margin.
    let budget = max.saturating_sub(max / 16);
    if approx_size(&value) <= budget {
        return value;
    }
    let text = value.to_string();
    if text.len() <= budget {
        return value;
    }
    on_cut();
    marker(&text, budget)
}

/// The marker standing for a value whose JSON text is `text`: its size and
/// the start of the text, at most `budget / 2` bytes of it.
pub(super) fn marker(text: &str, budget: usize) -> Value {
    let mut end = (budget / 2).min(text.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    json!({
        "cairn.truncated": true,
        "original_bytes": text.len(),
        "json_prefix": &text[..end],
    })
}
