//! Recognizing JSON text that is already canonical, without building its
//! value: a verifier re-reading stored JSON (written with serde_json,
//! which spells nearly every value as RFC 8785 does) can then commit the
//! text as it is instead of parsing it into a tree and writing it out
//! again.
//!
//! The check is conservative: it accepts a text only if it can tell that
//! the text is exactly what [`super::write_value`] writes for the value
//! serde_json reads from it, and refuses anything it is not sure of (an
//! escaped member name, an integer beyond 2^53, nesting deeper than
//! [`MAX_DEPTH`], white space, a number spelled otherwise, member names serde_json treats as its own
//! markers). A recorded hash is never what decides: only the text itself.

use super::{utf16_cmp, write_f64};

/// Containers nested deeper than this are left to the parser.
pub const MAX_DEPTH: usize = 64;

/// Member names left to the parser: a margin around the ones serde_json
/// reads as its own markers ([`crate::json::SERDE_MARKER`]:
/// `{"$serde_json::private::RawValue":"1.0"}` reads as the number 1.0,
/// not as an object).
const SERDE_PRIVATE: &str = "$serde_json";

/// JSON text that is the RFC 8785 canonical form of the value it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CanonicalJson<'a>(&'a str);

impl<'a> CanonicalJson<'a> {
    /// `text`, if it is the canonical JSON of the value serde_json reads
    /// from it (so `write_value(&serde_json::from_str(text)?)` gives back
    /// exactly `text`); `None` if it is not, or if the check cannot tell.
    pub fn new(text: &'a str) -> Option<CanonicalJson<'a>> {
        let mut reader = Reader {
            text,
            bytes: text.as_bytes(),
            at: 0,
        };
        (reader.value(0) && reader.at == text.len()).then_some(CanonicalJson(text))
    }

    /// The text.
    pub fn as_str(&self) -> &'a str {
        self.0
    }
}

struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        if found {
            self.at += 1;
        }
        found
    }

    fn value(&mut self, depth: usize) -> bool {
        match self.peek() {
            Some(b'{') => depth < MAX_DEPTH && self.object(depth + 1),
            Some(b'[') => depth < MAX_DEPTH && self.array(depth + 1),
            Some(b'"') => self.string().is_some(),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => false,
        }
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        let found = self.bytes[self.at..].starts_with(word);
        if found {
            self.at += word.len();
        }
        found
    }

    /// Members in strictly increasing UTF-16 order of their names (so
    /// none twice), each name without an escape.
    fn object(&mut self, depth: usize) -> bool {
        self.at += 1;
        if self.eat(b'}') {
            return true;
        }
        let mut previous: Option<&'a str> = None;
        loop {
            let Some((name, escaped)) = self.string() else {
                return false;
            };
            if escaped
                || name.starts_with(SERDE_PRIVATE)
                || previous.is_some_and(|p| utf16_cmp(p, name).is_ge())
            {
                return false;
            }
            previous = Some(name);
            if !self.eat(b':') || !self.value(depth) {
                return false;
            }
            if self.eat(b'}') {
                return true;
            }
            if !self.eat(b',') {
                return false;
            }
        }
    }

    fn array(&mut self, depth: usize) -> bool {
        self.at += 1;
        if self.eat(b']') {
            return true;
        }
        loop {
            if !self.value(depth) {
                return false;
            }
            if self.eat(b']') {
                return true;
            }
            if !self.eat(b',') {
                return false;
            }
        }
    }

    /// A string literal escaped as [`super::write_str`] escapes: `"`, `\`
    /// and control characters only, in their short forms where they have
    /// one, else `\u00xx` in lower case. Returns its content and whether it
    /// holds an escape.
    fn string(&mut self) -> Option<(&'a str, bool)> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.at;
        let mut escaped = false;
        loop {
            let byte = self.peek()?;
            self.at += 1;
            match byte {
                b'"' => return Some((&self.text[start..self.at - 1], escaped)),
                b'\\' => {
                    escaped = true;
                    let escape = self.peek()?;
                    self.at += 1;
                    match escape {
                        b'"' | b'\\' | b'b' | b't' | b'n' | b'f' | b'r' => {}
                        b'u' => {
                            let hex = self.bytes.get(self.at..self.at + 4)?;
                            self.at += 4;
                            let lower = |b: u8| matches!(b, b'0'..=b'9' | b'a'..=b'f');
                            if hex[..2] != *b"00" || !lower(hex[2]) || !lower(hex[3]) {
                                return None;
                            }
                            // Only a control character without a short form.
                            if hex[2] > b'1'
                                || matches!(&hex[2..], b"08" | b"09" | b"0a" | b"0c" | b"0d")
                            {
                                return None;
                            }
                        }
                        _ => return None,
                    }
                }
                0x00..=0x1f => return None,
                _ => {}
            }
        }
    }

    /// An integer of at most 2^53 − 1 in magnitude (what the strict
    /// reading of `crate::json` accepts) without leading zeros (not
    /// `-0`), or any other number spelled exactly as [`write_f64`] spells
    /// its value.
    fn number(&mut self) -> bool {
        let start = self.at;
        while let Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        let literal = &self.text[start..self.at];
        let digits = literal.strip_prefix('-').unwrap_or(literal);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            let canonical_digits = digits == "0" || !digits.starts_with('0');
            return canonical_digits
                && literal != "-0"
                && digits.len() <= 16
                && digits
                    .parse::<u64>()
                    .is_ok_and(|v| v <= crate::record::MAX_SAFE_INTEGER);
        }
        // serde_json reads any other number as a double (correctly
        // rounded, like `str::parse`), and it is written in ECMAScript's
        // form; an integer literal beyond 2^53 − 1 is left to the parser.
        if !literal.contains(['.', 'e', 'E']) {
            return false;
        }
        let Ok(value) = literal.parse::<f64>() else {
            return false;
        };
        let mut spelled = Vec::with_capacity(32);
        write_f64(&mut spelled, value);
        spelled == literal.as_bytes()
    }
}

#[cfg(test)]
#[path = "canonical_tests.rs"]
mod tests;
