//! The PostgreSQL backend's text analysis, done here instead of by
//! PostgreSQL's `to_tsvector('english', ...)`: a segmented document (see
//! [`super::segment`]: tokens of letters and digits, lower-cased, separated
//! by spaces) becomes its lexemes with their positions, in `tsvector`'s
//! binary wire format; a query's tokens become the same lexemes.
//!
//! PostgreSQL's own analysis took more of a batch's database time than
//! every other statement together (about 150 µs of CPU per 900-byte step
//! on these machines, mostly its parser), and it re-tokenized text Cairn
//! had already tokenized. The rules (docs/OPERATIONS.md, "Search"):
//!
//! - every token of the document is a lexeme, at its position (the
//!   first token is 1; positions past 16,383, `tsvector`'s largest, all
//!   count as 16,383, kept once);
//! - a token without a digit is stemmed with Snowball's English stemmer
//!   (the algorithm of PostgreSQL's `english_stem`); a token with a digit
//!   (`q4`, `2024`) is kept as it is, as PostgreSQL's `english`
//!   configuration keeps numbers;
//! - no stop words: `the` and `of` are lexemes, as in the embedded
//!   store's FTS5 index, so phrases match exactly;
//! - a lexeme keeps its first 256 positions (`tsvector`'s limit), and a
//!   token longer than 2,046 bytes is left out (the longest lexeme
//!   `tsvector`'s text form accepts: `tsvectorrecv` would take one byte
//!   more, but a row `pg_dump` could not restore is a broken backup).

use rust_stemmers::{Algorithm, Stemmer};
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;

/// `tsvector`'s largest position.
const MAX_POSITION: u16 = 16_383;
/// `tsvector`'s most positions per lexeme.
const MAX_POSITIONS: usize = 256;
/// The longest lexeme `tsvector`'s text input accepts, in bytes.
const MAX_LEXEME_BYTES: usize = 2_046;
/// Words whose stems a thread remembers (emptied when full): most words of
/// a step are frequent words met before.
const STEM_CACHE_WORDS: usize = 32_768;
/// The longest word the cache keeps, in bytes: with [`STEM_CACHE_WORDS`],
/// under 10 MB per thread whatever the steps hold.
const STEM_CACHE_WORD_BYTES: usize = 48;

thread_local! {
    static STEMMER: Stemmer = Stemmer::create(Algorithm::English);
    static STEMS: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
}

/// The lexeme of one token (letters and digits, lower-cased): stemmed
/// unless it holds a digit.
pub fn lexeme(token: &str) -> Cow<'_, str> {
    if has_digit(token) {
        return Cow::Borrowed(token);
    }
    STEMMER.with(|stemmer| match stemmer.stem(token) {
        Cow::Borrowed(_) => Cow::Borrowed(token),
        Cow::Owned(stemmed) => Cow::Owned(stemmed),
    })
}

/// Whether `token` is kept as written rather than stemmed.
fn has_digit(token: &str) -> bool {
    token.chars().any(char::is_numeric)
}

/// Appends [`lexeme`]`(token)` to `out`, from the thread's cache when the
/// word was met before (the cache keeps short words only: numbers, which
/// are their own lexemes and rarely repeat, and long words go past it).
fn push_lexeme(token: &str, out: &mut String) {
    if token.len() > STEM_CACHE_WORD_BYTES || has_digit(token) {
        out.push_str(&lexeme(token));
        return;
    }
    STEMS.with(|stems| {
        let mut stems = stems.borrow_mut();
        if let Some(stem) = stems.get(token) {
            out.push_str(stem);
            return;
        }
        let stem = lexeme(token).into_owned();
        out.push_str(&stem);
        if stems.len() >= STEM_CACHE_WORDS {
            stems.clear();
        }
        stems.insert(token.to_owned(), stem);
    });
}

/// A document's `tsvector` in PostgreSQL's binary wire format (what
/// `tsvectorrecv` reads): the number of lexemes (i32), then per lexeme in
/// byte order its text, a NUL, the number of its positions (u16) and the
/// positions (u16 each, increasing).
pub fn tsvector_binary(document: &str) -> Vec<u8> {
    // Every token's lexeme in one string, with (start, end, position).
    let mut lexemes = String::with_capacity(document.len());
    let mut at: Vec<(u32, u32, u16)> = Vec::new();
    let tokens = document.split(' ').filter(|t| !t.is_empty());
    for (index, token) in tokens.enumerate() {
        if token.len() > MAX_LEXEME_BYTES {
            continue;
        }
        let position = u16::try_from(index + 1)
            .unwrap_or(MAX_POSITION)
            .min(MAX_POSITION);
        let start = lexemes.len();
        push_lexeme(token, &mut lexemes);
        // A document is capped far below 4 GB (`MAX_DOCUMENT_BYTES`).
        let (Ok(start), Ok(end)) = (u32::try_from(start), u32::try_from(lexemes.len())) else {
            break;
        };
        at.push((start, end, position));
    }
    let text =
        |&(start, end, _): &(u32, u32, u16)| &lexemes.as_bytes()[start as usize..end as usize];
    // `tsvector` keeps its lexemes in byte order (shorter first on a tie),
    // which is the order of byte slices; positions increasing.
    at.sort_unstable_by(|a, b| text(a).cmp(text(b)).then(a.2.cmp(&b.2)));
    let mut out = Vec::with_capacity(4 + lexemes.len() + 5 * at.len());
    out.extend_from_slice(&[0; 4]);
    let mut count: i32 = 0;
    for group in at.chunk_by(|a, b| text(a) == text(b)) {
        count += 1;
        out.extend_from_slice(text(&group[0]));
        out.push(0);
        let count_at = out.len();
        out.extend_from_slice(&[0; 2]);
        let mut kept: u16 = 0;
        let mut last = 0;
        for &(_, _, position) in group {
            // Positions past the largest collapse into one.
            if position > last && usize::from(kept) < MAX_POSITIONS {
                out.extend_from_slice(&position.to_be_bytes());
                kept += 1;
                last = position;
            }
        }
        out[count_at..count_at + 2].copy_from_slice(&kept.to_be_bytes());
    }
    out[..4].copy_from_slice(&count.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// The rules of the module documentation, written the plain way.
    fn model(document: &str) -> Vec<(String, Vec<u16>)> {
        let mut lexemes: BTreeMap<Vec<u8>, Vec<u16>> = BTreeMap::new();
        for (i, token) in document.split(' ').filter(|t| !t.is_empty()).enumerate() {
            if token.len() > MAX_LEXEME_BYTES {
                continue;
            }
            let position = (i + 1).min(usize::from(MAX_POSITION)) as u16;
            let at = lexemes
                .entry(lexeme(token).as_bytes().to_vec())
                .or_default();
            if at.len() < MAX_POSITIONS && at.last().is_none_or(|&last| last < position) {
                at.push(position);
            }
        }
        lexemes
            .into_iter()
            .map(|(l, p)| (String::from_utf8(l).unwrap(), p))
            .collect()
    }

    proptest! {
        /// Any document of words, numbers, CJK pairs, over-long tokens and
        /// runs of spaces (a word up to about 300 times, past the 256
        /// positions kept): the encoding is the plain model's, and the same
        /// again once the thread's cache knows every word.
        #[test]
        fn the_encoding_is_the_models(picks in proptest::collection::vec(0usize..12, 0..3_500)) {
            let long = "y".repeat(MAX_LEXEME_BYTES + 1);
            let words = ["pricing", "priced", "the", "q4", "2024", "実行", "行中", "é", "a", "ab", &long, ""];
            let document = picks.iter().map(|&i| words[i]).collect::<Vec<_>>().join(" ");
            let expected = model(&document);
            prop_assert_eq!(decode(&tsvector_binary(&document)), expected.clone());
            prop_assert_eq!(decode(&tsvector_binary(&document)), expected);
        }
    }

    /// Decodes the wire format back, for the assertions.
    fn decode(bytes: &[u8]) -> Vec<(String, Vec<u16>)> {
        let count = i32::from_be_bytes(bytes[..4].try_into().unwrap());
        let mut rest = &bytes[4..];
        let mut out = Vec::new();
        for _ in 0..count {
            let nul = rest.iter().position(|&b| b == 0).unwrap();
            let lexeme = String::from_utf8(rest[..nul].to_vec()).unwrap();
            let n = u16::from_be_bytes([rest[nul + 1], rest[nul + 2]]) as usize;
            let positions = (0..n)
                .map(|i| u16::from_be_bytes([rest[nul + 3 + 2 * i], rest[nul + 4 + 2 * i]]))
                .collect();
            rest = &rest[nul + 3 + 2 * n..];
            out.push((lexeme, positions));
        }
        assert!(rest.is_empty(), "trailing bytes");
        out
    }

    proptest! {
        /// Any text, segmented as a step's document is: the encoding is
        /// one `tsvectorrecv` accepts without sorting (lexemes strictly in
        /// byte order, without NUL, at most 2,046 bytes; 1 to 256
        /// positions each, strictly increasing, within 1..=16,383), and
        /// every lexeme is letters and digits.
        #[test]
        fn any_text_encodes_as_a_valid_tsvector(text in "\\PC{0,400}") {
            let v = decode(&tsvector_binary(&crate::fulltext::segment(&text)));
            for pair in v.windows(2) {
                prop_assert!(pair[0].0.as_bytes() < pair[1].0.as_bytes());
            }
            for (lexeme, positions) in &v {
                prop_assert!(!lexeme.is_empty() && lexeme.len() <= MAX_LEXEME_BYTES);
                prop_assert!(lexeme.chars().all(char::is_alphanumeric), "{lexeme:?}");
                prop_assert!(!positions.is_empty() && positions.len() <= MAX_POSITIONS);
                prop_assert!(positions.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(positions.iter().all(|&p| (1..=MAX_POSITION).contains(&p)));
            }
        }
    }

    #[test]
    fn lexemes_are_stemmed_words_and_unstemmed_numbers() {
        assert_eq!(lexeme("pricing"), "price");
        assert_eq!(lexeme("priced"), "price");
        assert_eq!(lexeme("revenue"), "revenu");
        assert_eq!(lexeme("the"), "the");
        assert_eq!(lexeme("q4"), "q4");
        assert_eq!(lexeme("2024"), "2024");
        assert_eq!(lexeme("実行"), "実行");
    }

    #[test]
    fn a_document_is_its_lexemes_in_byte_order_with_positions() {
        let v = decode(&tsvector_binary("the prices of the price q4 apple"));
        assert_eq!(
            v,
            vec![
                ("appl".to_owned(), vec![7]),
                ("of".to_owned(), vec![3]),
                ("price".to_owned(), vec![2, 5]),
                ("q4".to_owned(), vec![6]),
                ("the".to_owned(), vec![1, 4]),
            ]
        );
        assert_eq!(decode(&tsvector_binary("")), vec![]);
        // Shorter first on a shared prefix, bytes compared unsigned.
        let v = decode(&tsvector_binary("ab a é z"));
        let order: Vec<&str> = v.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(order, ["a", "ab", "z", "é"]);
    }

    #[test]
    fn the_limits_of_tsvector_hold() {
        // 20,000 tokens: positions stop at 16,383, each kept once; no
        // lexeme has more than 256 positions.
        let doc = (0..20_000)
            .map(|i| {
                if i % 2 == 0 {
                    "word".to_owned()
                } else {
                    format!("n{i}")
                }
            })
            .collect::<Vec<_>>()
            .join(" ");
        let v = decode(&tsvector_binary(&doc));
        let word = &v.iter().find(|(l, _)| l == "word").unwrap().1;
        assert_eq!(word.len(), MAX_POSITIONS);
        assert!(word.windows(2).all(|w| w[0] < w[1]));
        let last = &v.iter().find(|(l, _)| l == "n19999").unwrap().1;
        assert_eq!(last, &[MAX_POSITION]);
        let late = v
            .iter()
            .filter(|(l, _)| l.starts_with('n'))
            .filter(|(_, p)| p == &[MAX_POSITION])
            .count();
        assert_eq!(late, 20_000 / 2 - 16_382 / 2, "every late token kept");
        // A token longer than tsvector's longest lexeme is left out; one of
        // exactly that length is kept.
        let long = "x".repeat(MAX_LEXEME_BYTES + 1);
        let v = decode(&tsvector_binary(&format!("a {long} b")));
        assert_eq!(
            v,
            vec![("a".to_owned(), vec![1]), ("b".to_owned(), vec![3])]
        );
        let longest = "x".repeat(MAX_LEXEME_BYTES);
        let v = decode(&tsvector_binary(&longest));
        assert_eq!(v, vec![(longest, vec![1])]);
    }

    /// The stem cache keeps short words only, so that its memory is
    /// bounded whatever words the steps hold; long words stem the same.
    #[test]
    fn the_stem_cache_keeps_short_words_only() {
        let long = format!("{}ing", "z".repeat(STEM_CACHE_WORD_BYTES));
        let v = decode(&tsvector_binary(&format!("walking {long}")));
        assert_eq!(v[0].0, "walk");
        assert_eq!(v[1].0, lexeme(&long));
        STEMS.with(|stems| {
            let stems = stems.borrow();
            assert_eq!(stems.get("walking").map(String::as_str), Some("walk"));
            assert!(!stems.contains_key(&long));
        });
    }
}
