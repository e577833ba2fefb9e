//! Strict JSON reading for outside bytes: bundle lines, request bodies.
//!
//! JSON parsers disagree on two things a verdict must not depend on: which
//! of two members with the same name wins, and what an integer beyond what
//! an IEEE double holds exactly means (JavaScript rounds it, Python keeps
//! it, Rust keeps what fits in 64 bits). So Cairn refuses both: a member
//! name twice in one object, or an integer literal beyond ±(2^53 − 1), is
//! an error (I-JSON, RFC 7493), and every verifier answers the same.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// The start of the member names serde_json reads as its own markers when
/// a crate of the build turns on its `raw_value` or `arbitrary_precision`
/// feature (the binaries get `raw_value` through axum):
/// `{"$serde_json::private::RawValue":"1"}` reads as the number 1. A value
/// holding one could not be stored and read back as it was sent, so
/// ingest refuses it (`record::validate_json`) and OTLP keeps such text a
/// string; the strict reading of bundles and bodies (this module) does
/// not, since it builds objects itself and reads them as sent.
pub const SERDE_MARKER: &str = "$serde_json::private::";

/// What one `Value` takes where it is held (in its parent's array or map).
const VALUE_BYTES: usize = 32;
/// An array's first allocation (room for four values, with the
/// allocator's header), and its spare room per item (a `Vec` doubles as it
/// grows, so up to one more value per item).
const FIRST_ARRAY_BYTES: usize = 4 * VALUE_BYTES + 16;
const ARRAY_SLACK_BYTES: usize = VALUE_BYTES;
/// A non-empty string's allocation beyond its bytes (the allocator's
/// header and rounding: a one-byte string takes 32).
const STRING_HEAP_BYTES: usize = 32;
/// A map's B-tree node: about 640 bytes for every eleven members, however
/// few.
const MAP_NODE_BYTES: usize = 640;
const MAP_NODE_ENTRIES: usize = 11;

/// The bytes of `value`'s JSON as `serde_json` writes it (a string quoted
/// and escaped: a control character takes six bytes), counted without
/// building it.
pub fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    let mut count = ByteCount(0);
    // Writing into a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// A writer that only counts what is written into it.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A conservative estimate of the memory a parsed value holds in the
/// server: a `Value` for each value, for a non-empty string its bytes and
/// its allocation, for a non-empty array its first allocation and room
/// for twice its items, for an object its map's B-tree nodes and its
/// keys. Values of many small parts (one-byte strings, arrays of one
/// item, objects of one member) hold tens of times their JSON's size.
/// Measured against an allocator that counts every byte (serde_json
/// 1.0.154, glibc's rounding): arrays of `[0]` 37 MB for 0.8 MB of text,
/// counted 54 MB; objects `{"":0}` 68 MB for 0.7 MB, counted 74 MB; prose
/// 2.0 MB for 2.0 MB, counted 2.0 MB.
pub fn approx_memory(v: &Value) -> usize {
    let string = |s: &str| {
        if s.is_empty() {
            0
        } else {
            s.len() + STRING_HEAP_BYTES
        }
    };
    VALUE_BYTES
        + match v {
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
            Value::String(s) => string(s),
            Value::Array(items) if items.is_empty() => 0,
            Value::Array(items) => {
                FIRST_ARRAY_BYTES
                    + items
                        .iter()
                        .map(|item| ARRAY_SLACK_BYTES + approx_memory(item))
                        .sum::<usize>()
            }
            Value::Object(map) => {
                map.len().div_ceil(MAP_NODE_ENTRIES) * MAP_NODE_BYTES
                    + map
                        .iter()
                        .map(|(k, v)| string(k) + approx_memory(v))
                        .sum::<usize>()
            }
        }
}

/// At least what [`approx_memory`] gives for `text` once parsed, from its
/// bytes alone (so a body can be counted before it is parsed): outside
/// strings, every `,` and `:` starts a value (a `,` also its array slot's
/// spare room), every non-empty `[` an array's first allocation and its
/// first value, every non-empty `{` a `Value` and a map node, every
/// non-empty string its allocation, on top of the text's own bytes (what
/// is inside a string counts once, as its bytes).
pub fn parsed_memory_bound(text: &[u8]) -> usize {
    let mut bytes = text.len() + VALUE_BYTES;
    let (mut in_string, mut escaped) = (false, false);
    let next_is = |at: usize, closing: u8| {
        text[at + 1..]
            .iter()
            .find(|c| !c.is_ascii_whitespace())
            .is_some_and(|c| *c == closing)
    };
    for (at, &b) in text.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        bytes += match b {
            b'"' => {
                in_string = true;
                if text.get(at + 1) == Some(&b'"') {
                    0
                } else {
                    STRING_HEAP_BYTES
                }
            }
            b'{' if next_is(at, b'}') => VALUE_BYTES,
            b'{' => VALUE_BYTES + MAP_NODE_BYTES,
            b'[' if next_is(at, b']') => 0,
            b'[' => FIRST_ARRAY_BYTES + VALUE_BYTES + ARRAY_SLACK_BYTES,
            b',' => VALUE_BYTES + ARRAY_SLACK_BYTES,
            b':' => VALUE_BYTES,
            _ => 0,
        };
    }
    bytes
}

/// Whether serde_json would read a member of this name as its own marker
/// ([`SERDE_MARKER`]).
pub fn is_reserved_member_name(name: &str) -> bool {
    name.starts_with(SERDE_MARKER)
}

/// The first of an object's own member names (not its values') that
/// serde_json would read as its own marker ([`SERDE_MARKER`]).
pub fn reserved_name_of(members: &Map<String, Value>) -> Option<&str> {
    members
        .keys()
        .find(|name| is_reserved_member_name(name))
        .map(String::as_str)
}

/// The first member name, at any depth of `value`, that serde_json would
/// read as its own marker ([`SERDE_MARKER`]): an object's own names before
/// those inside its values.
pub fn reserved_member_name(value: &Value) -> Option<&str> {
    match value {
        Value::Array(items) => items.iter().find_map(reserved_member_name),
        Value::Object(map) => {
            reserved_name_of(map).or_else(|| map.values().find_map(reserved_member_name))
        }
        _ => None,
    }
}

/// Parses one JSON text strictly: duplicate member names and integer
/// literals beyond ±(2^53 − 1) are errors, as is anything after the value
/// but white space. Nesting is bounded (serde_json's limit of 128).
pub fn from_slice(bytes: &[u8]) -> Result<Value, String> {
    from_slice_with(bytes, Integers::DoubleSafe)
}

/// Which integer literals a strict reading accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Integers {
    /// ±(2^53 − 1): what every JSON implementation holds exactly (the
    /// published format's rule).
    DoubleSafe,
    /// `i64::MIN..=u64::MAX`: what the server's request bodies take (a
    /// larger literal would silently become a float in `serde_json`).
    Bits64,
}

/// [`from_slice`] with the integer range given: duplicate member names and
/// integer literals outside `integers` are errors, as is anything after
/// the value but white space.
pub fn from_slice_with(bytes: &[u8], integers: Integers) -> Result<Value, String> {
    check_integer_literals(bytes, integers)?;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = StrictSeed::GENERAL
        .deserialize(&mut de)
        .map_err(|e| explained(bytes, e))?;
    de.end().map_err(|e| explained(bytes, e))?;
    Ok(value)
}

/// serde's message, with the way out where the cause is one a person
/// would not see in the text: a byte order mark (which editors on Windows
/// write and JSON does not allow) or no text at all.
fn explained(bytes: &[u8], e: serde_json::Error) -> String {
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        format!(
            "{e} (the text starts with a UTF-8 byte order mark, which JSON does not allow: save it without one)"
        )
    } else if bytes.iter().all(u8::is_ascii_whitespace) {
        format!("{e} (the text is empty)")
    } else {
        e.to_string()
    }
}

/// [`from_slice`] on text.
pub fn from_str(text: &str) -> Result<Value, String> {
    from_slice(text.as_bytes())
}

/// Scans the number tokens of a JSON text (outside strings): an integer
/// literal (no fraction, no exponent) whose magnitude exceeds 2^53 − 1 is
/// an error. Malformed text is left to the parser.
pub(crate) fn check_integer_literals(bytes: &[u8], integers: Integers) -> Result<(), String> {
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // To the closing quote, stepping over escapes (a string is
                // most of a line's bytes: searched, not walked).
                i += 1;
                loop {
                    match memchr::memchr2(b'"', b'\\', &bytes[i.min(bytes.len())..]) {
                        Some(at) if bytes[i + at] == b'\\' => i += at + 2,
                        Some(at) => {
                            i += at + 1;
                            break;
                        }
                        None => {
                            i = bytes.len();
                            break;
                        }
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                if bytes[i] == b'-' {
                    i += 1;
                }
                let digits_start = i;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                let digits = &bytes[digits_start..i];
                let integer = !matches!(bytes.get(i), Some(b'.' | b'e' | b'E'));
                while i < bytes.len()
                    && matches!(bytes[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                if integer && !digits.is_empty() {
                    let literal = String::from_utf8_lossy(&bytes[start..i.min(start + 40)]);
                    match integers {
                        Integers::DoubleSafe if !safe_integer_digits(digits) => {
                            return Err(format!(
                                "the integer {literal} is beyond ±(2^53 - 1), which JSON numbers (IEEE doubles) do not hold exactly; send it as a string"
                            ));
                        }
                        Integers::Bits64
                            if !fits_64_bits(&bytes[start..digits_start + digits.len()]) =>
                        {
                            return Err(format!(
                                "the integer {literal} at byte {start} is outside the 64-bit range; send it as a string"
                            ));
                        }
                        _ => {}
                    }
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}

/// Whether an integer literal (optionally negative) is in
/// `i64::MIN..=u64::MAX`.
fn fits_64_bits(literal: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(literal) else {
        return false;
    };
    if text.starts_with('-') {
        text.parse::<i64>().is_ok()
    } else {
        text.parse::<u64>().is_ok()
    }
}

fn safe_integer_digits(digits: &[u8]) -> bool {
    let trimmed = match digits.iter().position(|&d| d != b'0') {
        Some(p) => &digits[p..],
        None => return true,
    };
    if trimmed.len() > 16 {
        return false;
    }
    let mut value: u64 = 0;
    for &d in trimmed {
        value = value * 10 + u64::from(d - b'0');
    }
    value <= crate::record::MAX_SAFE_INTEGER
}

/// Deserializes a [`Value`] refusing duplicate member names (a visitor
/// that is its own seed, for nested values).
#[derive(Clone, Copy)]
pub(crate) struct StrictSeed {
    /// Refuse numbers [`StrictSeed::PLAIN`] refuses.
    plain: bool,
}

impl StrictSeed {
    /// The general reading (integer literals are checked beforehand, by
    /// [`check_integer_literals`]).
    pub(crate) const GENERAL: StrictSeed = StrictSeed { plain: false };
    /// For a reader that does not scan the text's literals first: it also
    /// refuses every number that might have been written as an integer
    /// literal beyond ±(2^53 − 1) — an integer beyond it, and any float of
    /// that magnitude (a long integer literal reaches a visitor as a
    /// float). Its refusals are never shown: a reader using it gives up,
    /// and the line is read again the general way.
    pub(crate) const PLAIN: StrictSeed = StrictSeed { plain: true };
}

impl<'de> DeserializeSeed<'de> for StrictSeed {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// Whether a number read by a visitor is certainly not an integer literal
/// beyond ±(2^53 − 1) (see [`StrictSeed::PLAIN`]).
pub(crate) fn plainly_safe_f64(v: f64) -> bool {
    v.abs() < 9_007_199_254_740_992.0
}

impl StrictSeed {
    fn refuse_unplain<E: de::Error>(&self, safe: bool) -> Result<(), E> {
        if self.plain && !safe {
            return Err(E::custom("a number beyond ±(2^53 - 1)"));
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for StrictSeed {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.refuse_unplain(v.unsigned_abs() <= crate::record::MAX_SAFE_INTEGER)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.refuse_unplain(v <= crate::record::MAX_SAFE_INTEGER)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.refuse_unplain(plainly_safe_f64(v))?;
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            // One lookup: the slot is filled once the value is read.
            match members.entry(name) {
                serde_json::map::Entry::Occupied(taken) => {
                    let shown: String = taken.key().chars().take(60).collect();
                    return Err(de::Error::custom(format!(
                        "the member {shown:?} is given twice in one object"
                    )));
                }
                serde_json::map::Entry::Vacant(slot) => {
                    slot.insert(map.next_value_seed(self)?);
                }
            }
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A byte order mark and an empty text are named in the refusal; other
    /// mistakes keep serde's message alone.
    #[test]
    fn refusals_name_what_a_person_cannot_see() {
        let bom = from_slice_with(b"\xEF\xBB\xBF{}", Integers::Bits64).unwrap_err();
        assert!(bom.contains("byte order mark"), "{bom}");
        let empty = from_slice_with(b" \n", Integers::Bits64).unwrap_err();
        assert!(empty.contains("the text is empty"), "{empty}");
        let other = from_slice_with(b"{x}", Integers::Bits64).unwrap_err();
        assert!(!other.contains('('), "{other}");
    }

    /// The estimate before parsing counts what may open a value outside
    /// strings only: braces in text are its bytes, and an empty object
    /// holds no map node; objects with members are not underestimated.
    #[test]
    fn parsed_memory_is_bounded_from_the_text() {
        let text = format!("{{\"content\": \"{}\"}}", "{".repeat(10_000));
        let bound = parsed_memory_bound(text.as_bytes());
        assert!(bound < 2 * text.len() + 1_000, "{bound}");
        let escaped = br#"{"a": "\"{{{{", "b": "x\\"}"#;
        assert!(parsed_memory_bound(escaped) < 2_000);
        let empty = "[{}, {}, {}]";
        assert!(parsed_memory_bound(empty.as_bytes()) < 600);
        // The shapes measured with a counting allocator (see
        // `approx_memory`): what each held, per repeated part, in bytes.
        for (part, held_per_part) in [
            ("[0]", 186),
            ("[]", 42),
            ("\"a\"", 74),
            ("[[0]]", 330),
            ("{\"\":0}", 682),
            ("0", 56),
            ("[0,0]", 186),
            ("{\"a\":[0]}", 858),
        ] {
            let text = format!("[{}]", vec![part; 10_000].join(","));
            let value: Value = serde_json::from_str(&text).unwrap();
            let counted = approx_memory(&value);
            assert!(counted >= 10_000 * held_per_part, "{part}: {counted}");
            assert!(counted <= 2 * 10_000 * held_per_part, "{part}: {counted}");
            assert!(parsed_memory_bound(text.as_bytes()) >= counted, "{part}");
        }
        for text in [
            r#"[{"":0},{"":0},{"a":[1,2,{"b":{}}]}]"#,
            r#"{"k": {"x": 1, "y": [true, null]}}"#,
            r#"{"k0":"a","k1":"a","k2":"a","k3":"a","k4":"a","k5":"a","k6":"a","k7":"a","k8":"a","k9":"a","k10":"a","k11":"a","k12":"a"}"#,
        ] {
            let value: Value = serde_json::from_str(text).unwrap();
            assert!(
                parsed_memory_bound(text.as_bytes()) >= approx_memory(&value),
                "{text}"
            );
        }
    }

    proptest::proptest! {
        /// What a body is counted before it is parsed is never less than
        /// what its value is counted once parsed, however it is spelt.
        #[test]
        fn the_text_bound_covers_the_parsed_value(value in any_json(), pretty: bool) {
            let text = if pretty {
                serde_json::to_string_pretty(&value).unwrap()
            } else {
                serde_json::to_string(&value).unwrap()
            };
            proptest::prop_assert!(parsed_memory_bound(text.as_bytes()) >= approx_memory(&value));
        }
    }

    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(Value::from),
            "[a-z\"\\\\{}\\[\\],:]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 64, 14, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..14).prop_map(Value::Array),
                prop::collection::btree_map("[a-z\"{]{0,3}", inner, 0..14)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn serde_json_markers_are_found_at_any_depth_and_read_as_sent() {
        let marked = from_str(r#"{"a":[{"$serde_json::private::Number":"1.0"}]}"#).unwrap();
        assert_eq!(
            reserved_member_name(&marked),
            Some("$serde_json::private::Number")
        );
        let object = from_str(r#"{"$serde_json::private::RawValue":"1"}"#).unwrap();
        assert!(
            object.is_object(),
            "the strict reading builds the object as sent"
        );
        assert_eq!(
            reserved_member_name(&from_str(r#"{"$serde_json":1}"#).unwrap()),
            None
        );
    }

    #[test]
    fn duplicate_members_are_refused_at_any_depth() {
        assert!(from_str(r#"{"a":1,"a":2}"#).unwrap_err().contains("twice"));
        assert!(from_str(r#"{"x":[{"b":1,"b":1}]}"#).is_err());
        assert_eq!(from_str(r#"{"a":{"a":1}}"#).unwrap()["a"]["a"], 1);
    }

    #[test]
    fn integers_beyond_a_double_are_refused_but_floats_pass() {
        assert!(from_str("9007199254740991").is_ok());
        assert!(from_str("-9007199254740991").is_ok());
        assert!(from_str("9007199254740992").is_err());
        assert!(from_str(r#"{"n":[1,18446744073709551616]}"#).is_err());
        assert!(from_str("1e300").is_ok());
        assert!(from_str("12345678901234567890.5").is_ok());
        assert!(
            from_str("0000000000000000000001").is_err(),
            "leading zeros are not JSON"
        );
        assert!(from_str(r#""9007199254740993""#).is_ok(), "inside a string");
        assert!(from_str(r#"{"s":"a\"b 99999999999999999999"}"#).is_ok());
    }

    /// The scan as first written (walking strings byte by byte), as the
    /// reference for the searching one.
    fn reference_scan(bytes: &[u8]) -> bool {
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'"' => {
                    i += 1;
                    while i < bytes.len() && bytes[i] != b'"' {
                        if bytes[i] == b'\\' {
                            i += 1;
                        }
                        i += 1;
                    }
                    i += 1;
                }
                b'-' | b'0'..=b'9' => {
                    let start = i;
                    i += usize::from(bytes[i] == b'-');
                    let digits_start = i;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                    let digits = &bytes[digits_start..i];
                    let integer = !matches!(bytes.get(i), Some(b'.' | b'e' | b'E'));
                    while i < bytes.len()
                        && matches!(bytes[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                    {
                        i += 1;
                    }
                    if integer && !digits.is_empty() && !safe_integer_digits(digits) {
                        return false;
                    }
                    let _ = start;
                }
                _ => i += 1,
            }
        }
        true
    }

    proptest::proptest! {
        #[test]
        fn the_literal_scan_skips_strings_as_the_reference_does(
            text in "[\"\\\\a19 .e-]{0,24}(9007199254740993)?[\"\\\\a1 ]{0,8}"
        ) {
            let bytes = text.as_bytes();
            proptest::prop_assert_eq!(
                check_integer_literals(bytes, Integers::DoubleSafe).is_ok(),
                reference_scan(bytes)
            );
        }
    }

    #[test]
    fn trailing_content_and_broken_text_are_refused() {
        assert!(from_str(r#"{"a":1} x"#).is_err());
        assert!(from_str(r#"{"a":"#).is_err());
        assert!(from_str("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]").is_err());
    }
}
