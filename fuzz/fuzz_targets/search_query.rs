//! The full-text query language (user text from `GET /v1/search`, MCP,
//! the CLI and the UI) and the snippets cut from stored text. Nothing may
//! panic; every token a parsed query hands the engines is letters and
//! digits only (nothing reaches FTS5's or PostgreSQL's own syntax); every
//! highlight lies inside its snippet.
#![no_main]

use cairn_store::fulltext::{FullTextQuery, Term, segment, snippet};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (query, stored) = match text.split_once('\n') {
        Some((q, s)) => (q.to_owned(), s.to_owned()),
        None => (text.to_string(), text.to_string()),
    };
    let _ = segment(&stored);
    if let Ok(parsed) = FullTextQuery::parse(&query) {
        for term in parsed.required.iter().chain(&parsed.excluded) {
            let tokens = match term {
                Term::Phrase(words) => words.clone(),
                Term::Prefix(p) => vec![p.clone()],
            };
            assert!(!tokens.is_empty());
            assert!(tokens.iter().all(|t| !t.is_empty() && t.chars().all(char::is_alphanumeric)));
        }
        let _ = parsed.to_fts5();
        let _ = parsed.to_tsquery();
        for width in [1, 40, 240] {
            let (snip, ranges) = snippet(&stored, &parsed, width);
            let len = snip.chars().count();
            assert!(ranges.iter().all(|(s, e)| s < e && *e <= len));
        }
    }
});
