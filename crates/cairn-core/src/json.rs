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

/// A rough estimate of the memory a value holds in the server: a `Value`
/// node for each value (32 bytes), the strings' bytes, and for an object
/// the B-tree nodes of its map (one of about 640 bytes for every eleven
/// members, however few) and its keys' bytes. Values of many small parts
/// (empty strings, nested arrays, objects of one member) hold many times
/// their JSON's size.
pub fn approx_memory(v: &Value) -> usize {
    const NODE: usize = 32;
    const MAP_NODE: usize = 640;
    const MAP_NODE_ENTRIES: usize = 11;
    NODE + match v {
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(approx_memory).sum::<usize>(),
        Value::Object(map) => {
            map.len().div_ceil(MAP_NODE_ENTRIES) * MAP_NODE
                + map
                    .iter()
                    .map(|(k, v)| k.len() + approx_memory(v))
                    .sum::<usize>()
        }
    }
}

/// About what [`approx_memory`] gives for `text` once parsed, from its
/// bytes alone: outside strings, every `{` that opens an object with a
/// member holds a `Value` and a map node, an empty one a `Value`, and
/// every `[`, `,` and `:` a value, on top of the text's own bytes (what is
/// inside a string counts once, as its bytes; an object of more than
/// eleven members holds more map nodes than this counts, which a check
/// after parsing sees).
pub fn parsed_memory_bound(text: &[u8]) -> usize {
    let (mut objects, mut values) = (0usize, 1usize);
    let (mut in_string, mut escaped) = (false, false);
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
        match b {
            b'"' => in_string = true,
            b'{' => {
                let empty = text[at + 1..]
                    .iter()
                    .find(|c| !c.is_ascii_whitespace())
                    .is_some_and(|c| *c == b'}');
                if empty {
                    values += 1;
                } else {
                    objects += 1;
                }
            }
            b'[' | b',' | b':' => values += 1,
            _ => {}
        }
    }
    text.len() + objects * (32 + 640) + values * 32
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
        .map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(value)
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
        assert!(parsed_memory_bound(empty.as_bytes()) < 400);
        for text in [
            r#"[{"":0},{"":0},{"a":[1,2,{"b":{}}]}]"#,
            r#"{"k": {"x": 1, "y": [true, null]}}"#,
        ] {
            let value: Value = serde_json::from_str(text).unwrap();
            assert!(
                parsed_memory_bound(text.as_bytes()) >= approx_memory(&value),
                "{text}"
            );
        }
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
