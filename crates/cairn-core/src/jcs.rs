//! RFC 8785 JSON Canonicalization Scheme (JCS), written directly into a
//! byte buffer.
//!
//! Written by hand because canonicalizing through a generic serializer
//! (`serde_jcs`) costs about 7 times a plain serialization, and this runs
//! once per field of every step on the append and verification paths. The
//! published RFC 8785 vectors are in the test suite
//! (`tests/it/vectors.rs`).
//!
//! Numbers follow JCS: every number is an IEEE 754 double printed as
//! ECMAScript's `Number.prototype.toString` does. Integers beyond 2^53 lose
//! precision exactly as they would in any JCS implementation; the record
//! validator refuses them in step payloads so that no two distinct inputs
//! share a canonical form.

use serde_json::Value;

mod canonical;
pub use canonical::CanonicalJson;

/// Where the writers below put canonical bytes: a buffer (`Vec<u8>`), or
/// [`Length`], which only counts them. One writer for both, so that a
/// measured size is always the size of what is written.
pub trait Sink {
    /// Appends one byte.
    fn push(&mut self, byte: u8);
    /// Appends bytes.
    fn extend_from_slice(&mut self, bytes: &[u8]);
    /// Appends `byte` `count` times.
    fn push_repeated(&mut self, byte: u8, count: usize);
    /// Makes room for at least `additional` more bytes, if the sink keeps
    /// them.
    fn reserve(&mut self, additional: usize);
}

impl Sink for Vec<u8> {
    fn push(&mut self, byte: u8) {
        Vec::push(self, byte);
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        Vec::extend_from_slice(self, bytes);
    }
    fn push_repeated(&mut self, byte: u8, count: usize) {
        self.extend(std::iter::repeat_n(byte, count));
    }
    fn reserve(&mut self, additional: usize) {
        Vec::reserve(self, additional);
    }
}

/// A [`Sink`] that counts the bytes written to it and keeps none.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Length(pub usize);

impl Sink for Length {
    fn push(&mut self, _byte: u8) {
        self.0 += 1;
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
    fn push_repeated(&mut self, _byte: u8, count: usize) {
        self.0 += count;
    }
    fn reserve(&mut self, _additional: usize) {}
}

/// Canonical bytes of a JSON value.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    write_value(&mut out, value);
    out
}

/// The length of [`to_vec`]`(value)`, without building it (size limits
/// are checked on every append: a payload near the limit would otherwise
/// be copied whole only to be measured).
pub fn canonical_len(value: &Value) -> usize {
    let mut length = Length(0);
    write_value(&mut length, value);
    length.0
}

/// Appends the canonical form of `value` to `out`.
pub fn write_value<S: Sink + ?Sized>(out: &mut S, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                write_u64(out, u);
            } else if let Some(i) = n.as_i64() {
                write_i64(out, i);
            } else {
                // serde_json only produces finite doubles.
                write_f64(out, n.as_f64().unwrap_or(0.0));
            }
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            // UTF-8 byte order equals UTF-16 code unit order unless a key
            // holds a character at or above U+E000 (surrogate pairs sort
            // below those in UTF-16). serde_json's default map iterates in
            // byte order, but another crate may switch on `preserve_order`
            // (features unify), so check the order instead of assuming it.
            let keys_in_order = map.keys().zip(map.keys().skip(1)).all(|(a, b)| a < b);
            if keys_in_order && map.keys().all(|k| !k.chars().any(|c| c >= '\u{e000}')) {
                for (i, (key, item)) in map.iter().enumerate() {
                    write_member(out, i, key, item);
                }
            } else {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| utf16_cmp(a.0, b.0));
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    write_member(out, i, key, item);
                }
            }
            out.push(b'}');
        }
    }
}

fn write_member<S: Sink + ?Sized>(out: &mut S, i: usize, key: &str, item: &Value) {
    if i > 0 {
        out.push(b',');
    }
    write_str(out, key);
    out.push(b':');
    write_value(out, item);
}

/// JCS orders object members by the UTF-16 code units of their names.
fn utf16_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    if a.is_ascii() && b.is_ascii() {
        return a.as_bytes().cmp(b.as_bytes());
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Appends a JSON string literal with JCS escaping: `"` and `\` escaped,
/// control characters as `\b \t \n \f \r` or `\u00xx`, everything else
/// (including non-ASCII) literal.
pub fn write_str<S: Sink + ?Sized>(out: &mut S, s: &str) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Skip eight bytes at a time while none needs escaping: this is
        // most of the cost of canonicalizing long content.
        if let Some(chunk) = bytes.get(i..i + 8)
            && !chunk_needs_escape(chunk)
        {
            i += 8;
            continue;
        }
        let byte = bytes[i];
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            0x00..=0x1f => {
                out.extend_from_slice(&bytes[start..i]);
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(byte >> 4)]);
                out.push(HEX[usize::from(byte & 0xf)]);
                i += 1;
                start = i;
                continue;
            }
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escape);
        i += 1;
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Whether any of 8 bytes is `"`, `\\` or below 0x20 (SWAR: bit 7 of each
/// byte lane of `has_zero(x)` is set where a lane of `x` is zero).
fn chunk_needs_escape(chunk: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut lanes = [0u8; 8];
    lanes.copy_from_slice(chunk);
    let v = u64::from_le_bytes(lanes);
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    // A lane is below 0x20 when subtracting 0x20 borrows and it had no high bit.
    let below_space = v.wrapping_sub(ONES * 0x20) & !v & HIGHS;
    (has_zero(v ^ (ONES * u64::from(b'"'))) | has_zero(v ^ (ONES * u64::from(b'\\'))) | below_space)
        != 0
}

/// Appends an unsigned integer as JCS does (as a double).
pub fn write_u64<S: Sink + ?Sized>(out: &mut S, value: u64) {
    if value <= 1 << 53 {
        write_digits(out, value);
    } else {
        write_f64(out, value as f64);
    }
}

/// Appends a signed integer as JCS does (as a double).
pub fn write_i64<S: Sink + ?Sized>(out: &mut S, value: i64) {
    if value.unsigned_abs() <= 1 << 53 {
        if value < 0 {
            out.push(b'-');
        }
        write_digits(out, value.unsigned_abs());
    } else {
        write_f64(out, value as f64);
    }
}

fn write_digits<S: Sink + ?Sized>(out: &mut S, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends a finite double in ECMAScript `Number.prototype.toString` form
/// (shortest round-trip digits, exponent outside 1e-7..1e21). Non-finite
/// values are not JSON; they are written as `null` and never reach here from
/// validated input.
pub fn write_f64<S: Sink + ?Sized>(out: &mut S, value: f64) {
    if !value.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    if value == 0.0 {
        out.push(b'0');
        return;
    }
    if value < 0.0 {
        out.push(b'-');
    }
    let mut buffer = ryu::Buffer::new();
    let shortest = buffer.format_finite(value.abs());
    // ryu prints either `d.ddd`, `0.000ddd` or `d.ddde±x`; recover the digit
    // string and the decimal exponent n of ECMAScript's algorithm, where the
    // value is 0.d1d2...dk * 10^n.
    let (mantissa, exponent) = match shortest.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (shortest, 0),
    };
    let point = mantissa.find('.').unwrap_or(mantissa.len()) as i32;
    let all: Vec<u8> = mantissa.bytes().filter(|b| *b != b'.').collect();
    let leading = all.iter().take_while(|d| **d == b'0').count();
    let mut digits = &all[leading..];
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits = &digits[..digits.len() - 1];
    }
    let k = digits.len() as i32;
    let n = point - leading as i32 + exponent;
    if k <= n && n <= 21 {
        out.extend_from_slice(digits);
        out.push_repeated(b'0', (n - k) as usize);
    } else if 0 < n && n <= 21 {
        out.extend_from_slice(&digits[..n as usize]);
        out.push(b'.');
        out.extend_from_slice(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.extend_from_slice(b"0.");
        out.push_repeated(b'0', (-n) as usize);
        out.extend_from_slice(digits);
    } else {
        out.push(digits[0]);
        if k > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        out.push(if n - 1 < 0 { b'-' } else { b'+' });
        out.extend_from_slice((n - 1).unsigned_abs().to_string().as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(value: f64) -> String {
        let mut out = Vec::new();
        write_f64(&mut out, value);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn ecmascript_number_forms() {
        let cases = [
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.5, "-1.5"),
            (0.92, "0.92"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (1e-7, "1e-7"),
            (1e-6, "0.000001"),
            (0.000001234, "0.000001234"),
            (1.5e-10, "1.5e-10"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (9007199254740992.0, "9007199254740992"),
            (333333333.3333333, "333333333.3333333"),
        ];
        for (value, want) in cases {
            assert_eq!(num(value), want, "{value:e}");
        }
    }

    #[test]
    fn strings_escape_only_what_jcs_escapes() {
        let mut out = Vec::new();
        write_str(&mut out, "a\"b\\c\u{8}\t\n\u{c}\r\u{1}\u{1f}\u{7f}é€/");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"a\\\"b\\\\c\\b\\t\\n\\f\\r\\u0001\\u001f\u{7f}é€/\""
        );
    }

    proptest::proptest! {
        // serde_json escapes strings exactly as JCS does (quote, backslash,
        // controls with their short forms or lowercase u00xx escapes), so it
        // is a reference for the fast path of `write_str`.
        #[test]
        fn write_str_matches_reference(s in "(\\PC|[\\x00-\\x1f\"\\\\]){0,80}") {
            let mut out = Vec::new();
            write_str(&mut out, &s);
            proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&s).unwrap());
        }
    }
}
