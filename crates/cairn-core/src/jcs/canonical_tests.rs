//! The canonical-text check against the parser and the writer: whatever
//! it accepts, serde_json reads and `write_value` writes back unchanged.

use super::*;
use proptest::prelude::*;
use serde_json::Value;

/// What a verifier relies on: an accepted text is its value's canonical
/// JSON.
fn assert_sound(text: &str) {
    if CanonicalJson::new(text).is_some() {
        let value: Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("accepted {text:?}, which does not parse: {e}"));
        let written = crate::jcs::to_vec(&value);
        assert_eq!(
            String::from_utf8_lossy(&written),
            text,
            "accepted a text that is not its value's canonical JSON"
        );
    }
}

fn accepted(text: &str) -> bool {
    assert_sound(text);
    CanonicalJson::new(text).is_some()
}

#[test]
fn canonical_texts_are_accepted() {
    for text in [
        "null",
        "true",
        "false",
        "0",
        "-1",
        "9007199254740991",
        "-9007199254740991",
        "0.5",
        "-1.5",
        "1e+21",
        "1e-7",
        "1.5e-7",
        r#""""#,
        r#""a\"b\\c\b\f\n\r\t\u0000\u001f\u000b""#,
        "\"\u{7f}é\u{e000}\u{1f600}\"",
        "[]",
        "{}",
        r#"{"a":[1,{"b":null}],"b":"x"}"#,
        // UTF-16 order: a surrogate pair sorts below U+E000.
        "{\"\u{1f600}\":1,\"\u{e000}\":2}",
    ] {
        assert!(accepted(text), "{text:?}");
    }
}

#[test]
fn anything_else_is_left_to_the_parser() {
    for text in [
        // Beyond what the strict reading accepts (2^53 − 1).
        "9007199254740992",
        "-9007199254740992",
        "",
        " null",
        "null ",
        "[1, 2]",
        "{\"a\": 1}",
        "-0",
        "01",
        "1.0",
        "1e2",
        "1E+21",
        "100000000000000000000",
        "9007199254740993",
        "-9007199254740993",
        ".5",
        "+1",
        "1.",
        "0.50",
        r#""\/""#,
        r#""\u0041""#,
        r#""\u00e9""#,
        r#""\u0008""#,
        r#""\u000A""#,
        r#""\ud800""#,
        "\"tab\there\"",
        r#"{"b":1,"a":2}"#,
        r#"{"a":1,"a":2}"#,
        r#"{"\u0061":1}"#,
        "{\"\u{e000}\":1,\"\u{1f600}\":2}",
        "[1,]",
        "{\"a\":1,}",
        "[",
        "\"open",
        "nul",
        "truex",
        "[1]x",
        // serde_json's markers (the tests build it with `raw_value`, as
        // the binaries do): these read as `1`, `"evil"` and `[{...}]`.
        r#"{"$serde_json::private::RawValue":"1"}"#,
        r#"{"$serde_json::private::RawValue":"\"evil\""}"#,
        r#"[{"$serde_json::private::RawValue":"{\"b\":1,\"a\":2}"}]"#,
        r#"{"$serde_json::private::Number":"1.0"}"#,
        r#"{"$serde_json":1}"#,
    ] {
        assert!(!accepted(text), "{text:?}");
    }
}

#[test]
fn nesting_beyond_the_limit_is_left_to_the_parser() {
    let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    assert!(accepted(&nested(MAX_DEPTH)));
    assert!(!accepted(&nested(MAX_DEPTH + 1)));
    assert!(
        !accepted(&nested(100_000)),
        "deep nesting neither overflows nor passes"
    );
}

/// Any JSON value, its numbers within ±2^53 or fractional.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53)..=(1i64 << 53)).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        (-1e25f64..1e25).prop_map(Value::from),
        "[a-z\"\\\\\u{0}-\u{1f}\u{7f}\u{e000}\u{ffff}\u{1f600}é/]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[a-z\u{e000}\u{1f600}\n]{0,3}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Whether a value holds a number the check leaves to the parser (an
/// integer-valued magnitude from 2^53 up to 1e21, which the writer
/// spells as a long run of digits, 2^53 itself included).
fn holds_long_integer(value: &Value) -> bool {
    match value {
        Value::Number(n) => n
            .as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f.abs() >= (1u64 << 53) as f64 && f.abs() < 1e21),
        Value::Array(items) => items.iter().any(holds_long_integer),
        Value::Object(map) => {
            map.values().any(holds_long_integer)
                || map
                    .keys()
                    .any(|k| k.contains(|c: char| c < ' ' || c == '"' || c == '\\'))
        }
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Canonical JSON is accepted (unless it holds what the check leaves
    /// to the parser: long integers, escaped member names).
    #[test]
    fn written_json_is_accepted(value in any_json()) {
        let text = String::from_utf8(crate::jcs::to_vec(&value)).unwrap();
        prop_assert!(accepted(&text) || holds_long_integer(&value), "{}", text);
    }

    /// The measured length is the written length, for any value (size
    /// limits are checked with the one and the other is committed).
    #[test]
    fn the_measured_length_is_the_written_length(value in any_json()) {
        prop_assert_eq!(crate::jcs::canonical_len(&value), crate::jcs::to_vec(&value).len());
    }

    /// Any edit of canonical JSON is either still its value's canonical
    /// JSON or refused.
    #[test]
    fn edited_json_is_accepted_only_if_canonical(
        value in any_json(),
        edits in prop::collection::vec(
            (any::<prop::sample::Index>(), 0u8..3, prop::sample::select(vec![
                " ", "0", "1", "-", "+", ".", "e", "E", "\\", "\"", "u", "00", ",", ":",
                "{", "}", "[", "]", "a", "\u{e000}", "\u{1f600}", "\\u0041", "\\u001f", "\\/",
            ])),
            1..4,
        ),
    ) {
        let mut text = String::from_utf8(crate::jcs::to_vec(&value)).unwrap();
        for (at, op, piece) in edits {
            let boundaries: Vec<usize> =
                (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
            let i = boundaries[at.index(boundaries.len())];
            match op {
                0 => text.insert_str(i, piece),
                1 if i < text.len() => {
                    let end = (i + 1..=text.len()).find(|&j| text.is_char_boundary(j)).unwrap();
                    text.replace_range(i..end, "");
                }
                _ => text.replace_range(i..i, piece),
            }
        }
        assert_sound(&text);
    }

    /// Short texts of JSON's own characters: whatever is accepted is sound.
    #[test]
    fn json_like_texts_are_accepted_only_if_canonical(text in "[-+.eE0-9\"\\\\u{}\\[\\],:a-f ]{0,12}") {
        assert_sound(&text);
    }
}
