//! The full-text query language (user text from `GET /v1/search`, MCP,
//! the CLI and the UI) and the snippets cut from stored text. Nothing may
//! panic; every token a parsed query hands the engines is letters and
//! digits only (nothing reaches FTS5's or PostgreSQL's own syntax), and
//! so is every lexeme of the `tsquery` and of the stored text's
//! `tsvector`; every highlight lies inside its snippet.
#![no_main]

use cairn_store::fulltext::lexemes::tsvector_binary;
use cairn_store::fulltext::{FullTextQuery, Term, segment, snippet};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (query, stored) = match text.split_once('\n') {
        Some((q, s)) => (q.to_owned(), s.to_owned()),
        None => (text.to_string(), text.to_string()),
    };
    // The stored text's tsvector: lexemes strictly in byte order, letters
    // and digits, positions strictly increasing within 1..=16,383.
    let vector = tsvector_binary(&segment(&stored));
    let count = i32::from_be_bytes(vector[..4].try_into().unwrap());
    let mut rest = &vector[4..];
    let mut previous: Option<&[u8]> = None;
    for _ in 0..count {
        let nul = rest.iter().position(|&b| b == 0).unwrap();
        let lexeme = &rest[..nul];
        assert!(std::str::from_utf8(lexeme).unwrap().chars().all(char::is_alphanumeric));
        assert!(previous.is_none_or(|p| p < lexeme));
        previous = Some(lexeme);
        let n = usize::from(u16::from_be_bytes([rest[nul + 1], rest[nul + 2]]));
        let positions: Vec<u16> = (0..n)
            .map(|i| u16::from_be_bytes([rest[nul + 3 + 2 * i], rest[nul + 4 + 2 * i]]))
            .collect();
        assert!((1..=256).contains(&n));
        assert!(positions.windows(2).all(|w| w[0] < w[1]));
        assert!(positions.iter().all(|&p| (1..=16_383).contains(&p)));
        rest = &rest[nul + 3 + 2 * n..];
    }
    assert!(rest.is_empty());
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
        let tsquery = parsed.to_tsquery();
        // Lexemes (letters and digits) between quotes, and the operators.
        assert!(
            tsquery
                .chars()
                .all(|c| c.is_alphanumeric() || "'()&!<->:* ".contains(c)),
            "{tsquery}"
        );
        assert_eq!(tsquery.matches('\'').count() % 2, 0);
        for width in [1, 40, 240] {
            let (snip, ranges) = snippet(&stored, &parsed, width);
            let len = snip.chars().count();
            assert!(ranges.iter().all(|(s, e)| s < e && *e <= len));
        }
    }
});
