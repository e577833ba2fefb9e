//! The text a step is indexed by (its document): the step's content and
//! the words of its JSON values, segmented into the tokens both engines
//! see (letters and digits, lower-cased; CJK runs as their overlapping
//! pairs), capped at [`MAX_DOCUMENT_BYTES`].

use cairn_core::record::Step;
use serde_json::Value;

/// A letter of a script written without spaces (CJK ideographs, kana,
/// Hangul). Punctuation in those blocks (`・`, `゛`) is not one: it
/// separates, as it does in every other script.
pub(super) fn is_cjk(c: char) -> bool {
    c.is_alphanumeric()
        && matches!(c as u32,
        0x3040..=0x30FF   // Hiragana, Katakana
        | 0x3400..=0x4DBF // CJK Extension A
        | 0x4E00..=0x9FFF // CJK Unified Ideographs
        | 0xF900..=0xFAFF // CJK Compatibility Ideographs
        | 0xAC00..=0xD7AF // Hangul syllables
        | 0xFF66..=0xFF9F // Half-width Katakana
        | 0x20000..=0x2FFFF)
}

/// Tokens of `text` as both engines will see them after [`segment`]:
/// runs of letters and digits (lower-cased), CJK runs as their pairs (a
/// lone CJK character as itself).
pub(super) fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut cjk: Vec<char> = Vec::new();
    let flush_cjk = |cjk: &mut Vec<char>, out: &mut Vec<String>| {
        match cjk.len() {
            0 => {}
            1 => out.push(cjk[0].to_string()),
            _ => out.extend(cjk.windows(2).map(|w| w.iter().collect::<String>())),
        }
        cjk.clear();
    };
    for c in text.chars() {
        if is_cjk(c) {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            cjk.push(c);
        } else if c.is_alphanumeric() {
            flush_cjk(&mut cjk, &mut out);
            // Some lower cases add a combining mark (`İ` is `i` and U+0307):
            // tokens keep letters and digits only.
            word.extend(c.to_lowercase().filter(|l| l.is_alphanumeric()));
        } else {
            flush_cjk(&mut cjk, &mut out);
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
        }
    }
    flush_cjk(&mut cjk, &mut out);
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// `text` rewritten for the engines: its tokens separated by spaces (one
/// or more: the engines read a run of them as one separator).
pub fn segment(text: &str) -> String {
    let mut segmenter = Segmenter::default();
    segmenter.push(text);
    segmenter.finish()
}

/// [`tokens`] written straight into one buffer, space-separated, without
/// a string per token: a step's document is built on every append, so
/// this runs once per step on the write path. Text pushed in several
/// parts is segmented as if a separator stood between them.
#[derive(Default)]
struct Segmenter {
    /// The document so far: UTF-8 by construction (ASCII bytes and whole
    /// encoded characters only), checked once by [`Segmenter::finish`].
    out: Vec<u8>,
    /// Where the current word's separator starts in `out`, if a word is
    /// open.
    word: Option<usize>,
    /// The last CJK character of the open run and whether the run has
    /// more than one character.
    cjk: Option<(char, bool)>,
}

/// Whether an ASCII byte is part of a word (a letter or a digit).
fn is_ascii_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric()
}

impl Segmenter {
    fn separate(&mut self) {
        if !self.out.is_empty() {
            self.out.push(b' ');
        }
    }

    fn push_char(&mut self, c: char) {
        let mut bytes = [0u8; 4];
        self.out
            .extend_from_slice(c.encode_utf8(&mut bytes).as_bytes());
    }

    fn end_word(&mut self) {
        // A word whose characters lower-cased to nothing is no token.
        if let Some(mark) = self.word.take()
            && self.out.len() == mark + usize::from(mark > 0)
        {
            self.out.truncate(mark);
        }
    }

    fn end_cjk(&mut self) {
        if let Some((c, false)) = self.cjk.take() {
            self.separate();
            self.push_char(c);
        }
    }

    fn start_word(&mut self) {
        if self.word.is_none() {
            self.word = Some(self.out.len());
            self.separate();
        }
    }

    /// Segments the ASCII run `bytes` starts with (up to its first other
    /// byte) and returns the run's length. No CJK there, and lower-casing
    /// keeps every byte in place, so the run is written whole, each byte
    /// lower-cased if it is a letter or a digit and a space if not (a
    /// document's tokens may be separated by several spaces: both engines
    /// read any run of them as one separator). The byte map is arithmetic
    /// so the compiler vectorizes it: a table lookup per byte, with a
    /// branch on word or separator, took 2.2 µs for a 700-byte text
    /// (branch misses at every word's edge), this 0.4 µs.
    fn push_ascii(&mut self, bytes: &[u8]) -> usize {
        let run = &bytes[..bytes
            .iter()
            .position(|b| !b.is_ascii())
            .unwrap_or(bytes.len())];
        let Some(&first) = run.first() else {
            return 0;
        };
        if is_ascii_word_byte(first) {
            // Continues the open word, or starts one after a separator.
            self.start_word();
        } else {
            self.end_word();
        }
        let start = self.out.len();
        self.out.extend(run.iter().map(|&byte| {
            let lower = byte | (u8::from(byte.wrapping_sub(b'A') < 26) << 5);
            if lower.wrapping_sub(b'a') < 26 || byte.wrapping_sub(b'0') < 10 {
                lower
            } else {
                b' '
            }
        }));
        // The word open at the run's end, if any, starts after its last
        // separator: the mark `end_word` reads is that separator's place.
        match run.iter().rposition(|&byte| !is_ascii_word_byte(byte)) {
            None => {}
            Some(last) if last + 1 == run.len() => self.word = None,
            Some(last) => self.word = Some(start + last),
        }
        run.len()
    }

    fn push(&mut self, text: &str) {
        // The document is about as long as the text.
        self.out.reserve(text.len() + 1);
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i].is_ascii() {
                if self.cjk.is_some() {
                    self.end_cjk();
                }
                i += self.push_ascii(&bytes[i..]);
                continue;
            }
            let Some(c) = text[i..].chars().next() else {
                break;
            };
            i += c.len_utf8();
            if is_cjk(c) {
                self.end_word();
                match self.cjk {
                    Some((previous, _)) => {
                        self.separate();
                        self.push_char(previous);
                        self.push_char(c);
                        self.cjk = Some((c, true));
                    }
                    None => self.cjk = Some((c, false)),
                }
            } else if c.is_alphanumeric() {
                self.end_cjk();
                self.start_word();
                for lower in c.to_lowercase().filter(|l| l.is_alphanumeric()) {
                    self.push_char(lower);
                }
            } else {
                self.end_cjk();
                self.end_word();
            }
        }
        self.end_cjk();
        self.end_word();
    }

    fn finish(mut self) -> String {
        self.end_cjk();
        self.end_word();
        // A text that ends in separators leaves spaces with no token
        // after them (and one of separators alone, nothing else).
        while self.out.last() == Some(&b' ') {
            self.out.pop();
        }
        // Always valid: only ASCII bytes and encoded characters went in.
        String::from_utf8(self.out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

/// Every string (and key, and number) of a JSON value, space-separated.
fn json_words(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => {
            out.push(' ');
            out.push_str(s);
        }
        Value::Number(n) => {
            out.push(' ');
            out.push_str(&n.to_string());
        }
        Value::Bool(_) | Value::Null => {}
        Value::Array(items) => items.iter().for_each(|v| json_words(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push(' ');
                out.push_str(k);
                json_words(v, out);
            }
        }
    }
}

/// What a step is found by, readable: its content, then the words of its
/// input, output and metadata. Empty for an erased step.
pub fn display_text(step: &Step) -> String {
    display_text_of(
        step.content.as_deref(),
        [&step.input, &step.output, &step.metadata],
    )
}

/// [`display_text_of`] from a stored step's columns (payloads as the JSON
/// text the store keeps; a payload that does not parse adds no words).
pub fn stored_display_text(content: Option<&str>, payloads: [Option<&str>; 3]) -> String {
    let parse = |text: Option<&str>| text.and_then(|t| serde_json::from_str::<Value>(t).ok());
    let [input, output, metadata] = payloads.map(parse);
    display_text_of(content, [&input, &output, &metadata])
}

/// The full-text document of a stored step's columns: what every rebuild
/// from the log indexes, the same words [`document`] gave at ingest.
pub fn stored_document(content: Option<&str>, payloads: [Option<&str>; 3]) -> String {
    capped(segment(&stored_display_text(content, payloads)))
}

/// [`display_text`] from a step's payload fields.
pub fn display_text_of(content: Option<&str>, payloads: [&Option<Value>; 3]) -> String {
    let mut text = content.unwrap_or_default().to_owned();
    for value in payloads.into_iter().flatten() {
        let mut words = String::new();
        json_words(value, &mut words);
        if !words.trim().is_empty() {
            if !text.is_empty() {
                text.push_str(" · ");
            }
            text.push_str(words.trim());
        }
    }
    text
}

/// The document a step is indexed as (None when it has no text): the
/// tokens of [`display_text`], segmented part by part (the separators
/// between the parts are not letters, so the result is the same as
/// segmenting the joined text, without building it).
pub fn document(step: &Step) -> Option<String> {
    let payloads = [&step.input, &step.output, &step.metadata];
    // One allocation for the whole document: grown part by part, the
    // buffer was reallocated (and the content copied) for nearly every
    // step, about 1.5% of `cairn log --stdin`'s CPU.
    let capacity = step.content.as_ref().map_or(0, String::len)
        + payloads
            .into_iter()
            .flatten()
            .map(json_text_len)
            .sum::<usize>();
    let mut segmenter = Segmenter {
        out: Vec::with_capacity(capacity.min(MAX_DOCUMENT_BYTES) + 1),
        ..Segmenter::default()
    };
    if let Some(content) = &step.content {
        segmenter.push(content);
    }
    for value in payloads.into_iter().flatten() {
        segment_json(value, &mut segmenter);
    }
    let doc = capped(segmenter.finish());
    (!doc.is_empty()).then_some(doc)
}

/// A segmented document cut to [`MAX_DOCUMENT_BYTES`] at a word boundary:
/// PostgreSQL refuses a tsvector over 1 MB (about 3 bytes per byte of
/// document at worst), which would fail the whole batch. Every path that
/// indexes a step (ingest, and each backend's rebuild from the log) goes
/// through it, so a step is found by the same words whichever wrote it.
pub fn capped(mut doc: String) -> String {
    if doc.len() > MAX_DOCUMENT_BYTES {
        // The cap counts tokens and one space between each, as the
        // document is read: separators a text spells with several bytes
        // (runs of punctuation, indentation) cost nothing against it, and
        // a document cut here holds the same words whichever path built it
        // (ingest segments part by part, a rebuild from the log the
        // display text, whose separators differ).
        doc = single_spaced(&doc);
    }
    if doc.len() > MAX_DOCUMENT_BYTES {
        let mut end = MAX_DOCUMENT_BYTES;
        while !doc.is_char_boundary(end) {
            end -= 1;
        }
        let cut = doc[..end].rfind(' ').unwrap_or(0);
        let cut = doc[..cut].trim_end_matches(' ').len();
        doc.truncate(cut);
        // The document is kept until its step is written: what was cut
        // (up to several megabytes of a long text's pairs) is given back.
        doc.shrink_to_fit();
    }
    doc
}

/// `doc`'s tokens separated by one space each.
fn single_spaced(doc: &str) -> String {
    let mut out = String::with_capacity(doc.len());
    for token in doc.split(' ').filter(|t| !t.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(token);
    }
    out
}

/// Longest full-text document, in bytes (cut at a word boundary).
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;

/// About how many bytes [`segment_json`] writes for `value` at most: its
/// strings, member names and numbers, each with a separator.
fn json_text_len(value: &Value) -> usize {
    match value {
        Value::String(s) => s.len() + 1,
        // The longest number serde_json writes (`-1.2345678901234567e-308`).
        Value::Number(_) => 25,
        Value::Bool(_) | Value::Null => 0,
        Value::Array(items) => items.iter().map(json_text_len).sum(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| k.len() + 1 + json_text_len(v))
            .sum(),
    }
}

/// [`json_words`] fed to a segmenter.
fn segment_json(value: &Value, out: &mut Segmenter) {
    match value {
        Value::String(s) => out.push(s),
        Value::Number(n) => {
            // Written on the stack: a `String` per number was one more
            // allocation per step on the write path.
            use std::io::Write as _;
            let mut text = [0u8; 40];
            let mut cursor = std::io::Cursor::new(&mut text[..]);
            match write!(cursor, "{n}") {
                Ok(()) => {
                    let len = usize::try_from(cursor.position()).unwrap_or(0);
                    out.push(std::str::from_utf8(&text[..len]).unwrap_or_default());
                }
                Err(_) => out.push(&n.to_string()),
            }
        }
        Value::Bool(_) | Value::Null => {}
        Value::Array(items) => items.iter().for_each(|v| segment_json(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k);
                segment_json(v, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words that switch between ASCII and other letters, or hold a
    /// letter that lower-cases to nothing kept, at the edges where the
    /// ASCII fast path hands over to the character-by-character one.
    #[test]
    fn words_mixing_ascii_and_other_letters_are_segmented_as_tokens() {
        for text in [
            "caféBar, ÉTÉ-été x",
            "İstanbul İ İx xİ, x",
            "ᾈa aᾈ, ǅx Xǅ",
            "ab日本cd 日x x日 ,日,",
            "\u{0345}ab ab\u{0345} \u{0345} a",
            "  A1b2 -- C3 ",
            "",
            ",,,",
        ] {
            assert_eq!(tokens_of(&segment(text)), tokens(text), "{text:?}");
        }
    }

    /// A document's tokens, as the engines read it (any run of spaces
    /// one separator).
    fn tokens_of(document: &str) -> Vec<String> {
        document
            .split(' ')
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect()
    }

    proptest::proptest! {
        /// The one-pass segmenter writes exactly the tokens of [`tokens`],
        /// and a step's document is the segmented display text.
        #[test]
        fn segmenting_in_one_pass_gives_the_tokens(
            text in "(\\PC|[a-zA-Z0-9 .,İ日本語ーテ])*",
            words in proptest::collection::vec("(\\PC|[a-zA-Z0-9 ])*", 0..4),
        ) {
            let segmented = segment(&text);
            proptest::prop_assert_eq!(tokens_of(&segmented), tokens(&text));
            // No space before the first token's text ends, none after the last.
            proptest::prop_assert!(!segmented.ends_with(' '));
            let mut step = Step::new(
                "t", "o", "a", "s", 0, "Reasoning",
                cairn_core::time::Timestamp::from_micros(0).unwrap(),
            ).unwrap();
            step.content = Some(text.clone());
            step.metadata = Some(serde_json::json!({ "k": words, "n": -1.5e3 }));
            let expected = tokens(&display_text(&step));
            let doc = document(&step);
            proptest::prop_assert_eq!(doc.is_some(), !expected.is_empty());
            proptest::prop_assert_eq!(tokens_of(&doc.unwrap_or_default()), expected);
        }
    }

    /// A step with no text, for tests to fill.
    fn blank_step() -> Step {
        Step::new(
            "t",
            "o",
            "a",
            "s",
            0,
            "Reasoning",
            cairn_core::time::Timestamp::from_micros(0).unwrap(),
        )
        .unwrap()
    }

    /// A document longer than the cap is cut at a word boundary below it,
    /// also when the cap falls inside a multi-byte character.
    #[test]
    fn documents_are_capped_at_a_word_boundary() {
        let mut step = blank_step();
        for filler in ["wörd ", "注文テーブル ", "x "] {
            let text = filler.repeat(MAX_DOCUMENT_BYTES / filler.len() + 100);
            step.content = Some(text.clone());
            let doc = document(&step).unwrap();
            let full = single_spaced(&segment(&text));
            assert!(doc.len() <= MAX_DOCUMENT_BYTES && doc.len() > MAX_DOCUMENT_BYTES - 64);
            assert!(full.starts_with(&doc) && full[doc.len()..].starts_with(' '));
        }
    }

    /// Separators cost nothing against the cap, and a step's document
    /// holds the same words whether ingest built it (part by part) or a
    /// rebuild from the stored columns did (from the display text).
    #[test]
    fn documents_over_the_cap_keep_every_word_that_fits() {
        let mut step = blank_step();
        step.input = Some(serde_json::json!("-".repeat(200_000)));
        step.output = Some(serde_json::json!("-".repeat(100_000)));
        step.metadata = Some(serde_json::json!("lonely"));
        assert_eq!(document(&step).as_deref(), Some("lonely"));
        step.content = Some("c ".repeat(30_000));
        step.input = Some(serde_json::json!(
            (0..25_500).map(|i| format!(",w{i:05}")).collect::<Vec<_>>()
        ));
        step.output = Some(serde_json::json!({"o": ",".repeat(50_000) + " needle"}));
        step.metadata = None;
        let ingested = document(&step).unwrap();
        let text = |v: &Option<Value>| v.as_ref().map(|v| v.to_string());
        let rebuilt = stored_document(
            step.content.as_deref(),
            [
                text(&step.input).as_deref(),
                text(&step.output).as_deref(),
                None,
            ],
        );
        assert_eq!(ingested, rebuilt);
        assert!(
            ingested.ends_with(" w25499 o needle"),
            "{}",
            &ingested[ingested.len() - 40..]
        );
        assert!(ingested.len() <= MAX_DOCUMENT_BYTES);
    }

    #[test]
    fn cjk_runs_become_pairs_and_latin_words_stay_words() {
        assert_eq!(
            tokens_of(&segment("Querying 注文テーブル now!")),
            ["querying", "注文", "文テ", "テー", "ーブ", "ブル", "now"]
        );
        assert_eq!(tokens_of(&segment("[実行] Querying")), ["実行", "querying"]);
        assert_eq!(tokens_of(&segment("a 日 b")), ["a", "日", "b"]);
    }
}
