//! Full-text search, the parts both backends share (pure functions): the
//! text a step is indexed by, the query language and its translation into
//! SQLite FTS5 and PostgreSQL `tsquery` syntax, and highlighted snippets.
//!
//! Both engines see the same tokens (letters and digits, lower-cased)
//! and stem English: SQLite with FTS5's `porter unicode61`, PostgreSQL
//! with the lexemes [`lexemes`] computes here (Snowball English, numbers
//! kept as they are) and stores as a `tsvector`. Neither splits
//! Chinese or Japanese text into words (they have no spaces), so before
//! indexing and before querying every run of CJK characters is rewritten
//! as its overlapping pairs (`実行中` → `実行 行中`): any word of two or more
//! characters is then a phrase of pairs, and a single character a prefix.
//!
//! The query language (documented in docs/OPERATIONS.md, "Search"):
//! words (all must match), `"a phrase"`, `prefix*`, `-excluded` (a word,
//! phrase or prefix that must not match). Everything else is a separator:
//! a user's text never reaches the engines' own syntax.

mod document;
pub mod lexemes;

pub use document::{
    MAX_DOCUMENT_BYTES, capped, display_text, display_text_of, document, segment,
    stored_display_text, stored_document,
};
use document::{is_cjk, tokens};

/// Longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 1024;
/// Most terms in one query.
pub const MAX_TERMS: usize = 32;

/// One term of a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// Tokens that must appear in this order, adjacent (a single token is
    /// a one-token phrase).
    Phrase(Vec<String>),
    /// A token prefix.
    Prefix(String),
}

/// A parsed full-text query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FullTextQuery {
    /// Terms that must match.
    pub required: Vec<Term>,
    /// Terms that must not.
    pub excluded: Vec<Term>,
}

/// Why a query was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// Nothing to search for.
    #[error("the query has no word to search for")]
    Empty,
    /// Only exclusions.
    #[error("the query only excludes: give at least one word that must match")]
    OnlyExcluded,
    /// Too long.
    #[error("the query is longer than {MAX_QUERY_BYTES} bytes or has more than {MAX_TERMS} terms")]
    TooLong,
    /// `OR` or `AND` written as an operator, which this language has not:
    /// read as a word, `a OR b` would silently ask for all three.
    #[error(
        "{0} is not an operator here: every word of a query must match (a AND b is a b), so search once for each alternative; \"{0}\" in quotes searches for the word itself"
    )]
    NotAnOperator(String),
}

/// The SQLite FTS5 table of org `org`'s documents, as an SQL identifier
/// (quoted; `org` is the orgs table's number, never a caller's text). One
/// table per org, so that what ranks an org's hits (BM25's count of
/// documents, their average length, how many hold each word) is the
/// org's own: in one table of every org's documents, the order of an
/// org's hits moved with what other orgs wrote, which let a tenant learn
/// of other tenants' text one query at a time.
pub(crate) fn fts5_table(org: i64) -> String {
    format!("\"steps_fts_{org}\"")
}

impl FullTextQuery {
    /// Parses the query language (see the module documentation).
    pub fn parse(text: &str) -> Result<FullTextQuery, QueryError> {
        if text.len() > MAX_QUERY_BYTES {
            return Err(QueryError::TooLong);
        }
        let mut query = FullTextQuery {
            required: Vec::new(),
            excluded: Vec::new(),
        };
        let mut rest = text.trim_start();
        while !rest.is_empty() {
            let (negated, after) = match rest.strip_prefix('-') {
                Some(after) => (true, after),
                None => (false, rest),
            };
            let (raw, prefix, remaining) = if let Some(quoted) = after.strip_prefix('"') {
                let end = quoted.find('"').unwrap_or(quoted.len());
                let remaining = quoted.get(end + 1..).unwrap_or("");
                (&quoted[..end], false, remaining)
            } else {
                let end = after.find(char::is_whitespace).unwrap_or(after.len());
                let word = &after[..end];
                if !negated && (word == "OR" || word == "AND") {
                    return Err(QueryError::NotAnOperator(word.to_owned()));
                }
                let (word, prefix) = match word.strip_suffix('*') {
                    Some(stem) => (stem, true),
                    None => (word, false),
                };
                (word, prefix, &after[end..])
            };
            rest = remaining.trim_start();
            let mut parts = tokens(raw);
            if parts.is_empty() {
                continue;
            }
            let term = if prefix && parts.len() == 1 {
                Term::Prefix(parts.remove(0))
            } else if parts.len() == 1
                && parts[0].chars().count() == 1
                && parts[0].chars().all(is_cjk)
            {
                // One CJK character: the pairs that start with it.
                Term::Prefix(parts.remove(0))
            } else {
                Term::Phrase(parts)
            };
            if negated {
                query.excluded.push(term);
            } else {
                query.required.push(term);
            }
            if query.required.len() + query.excluded.len() > MAX_TERMS {
                return Err(QueryError::TooLong);
            }
        }
        match (query.required.is_empty(), query.excluded.is_empty()) {
            (true, true) => Err(QueryError::Empty),
            (true, false) => Err(QueryError::OnlyExcluded),
            _ => Ok(query),
        }
    }

    /// The query in FTS5's syntax: every token quoted, phrases joined
    /// with `+`, prefixes with `*`, exclusions with `NOT`.
    pub fn to_fts5(&self) -> String {
        fn term(t: &Term) -> String {
            match t {
                Term::Phrase(words) => words
                    .iter()
                    .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
                    .collect::<Vec<_>>()
                    .join(" + "),
                Term::Prefix(p) => format!("\"{}\" *", p.replace('"', "\"\"")),
            }
        }
        let required = self
            .required
            .iter()
            .map(|t| format!("({})", term(t)))
            .collect::<Vec<_>>()
            .join(" AND ");
        self.excluded
            .iter()
            .fold(required, |q, t| format!("{q} NOT ({})", term(t)))
    }

    /// The query as PostgreSQL's `tsquery` text (cast with `::tsquery`,
    /// never re-analyzed by PostgreSQL): every token as its lexeme
    /// ([`lexemes::lexeme`], as the documents were indexed), single-quoted
    /// (lexemes hold only letters and digits), phrases with `<->`,
    /// prefixes with `:*`, exclusions with `!`.
    pub fn to_tsquery(&self) -> String {
        fn quoted(token: &str) -> String {
            format!("'{}'", lexemes::lexeme(token).replace('\'', "''"))
        }
        fn term(t: &Term) -> String {
            match t {
                Term::Phrase(words) => format!(
                    "({})",
                    words
                        .iter()
                        .map(|w| quoted(w))
                        .collect::<Vec<_>>()
                        .join(" <-> ")
                ),
                Term::Prefix(p) => format!("{}:*", quoted(p)),
            }
        }
        let mut parts: Vec<String> = self.required.iter().map(term).collect();
        parts.extend(self.excluded.iter().map(|t| format!("!{}", term(t))));
        parts.join(" & ")
    }

    /// The tokens a match is highlighted by: words (and their first
    /// letters, as the engines stem), prefixes, CJK pairs.
    fn highlight_terms(&self) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        for t in &self.required {
            match t {
                Term::Phrase(words) => {
                    out.extend(words.iter().map(|w| (w.clone(), false)));
                }
                Term::Prefix(p) => out.push((p.clone(), true)),
            }
        }
        out
    }
}

/// Whether `token` (lower-cased) matches a highlight term: equal, or
/// starting with a prefix term, or starting with the term's stem (the
/// term without one English ending, `ing`, `ed`, `es`, `s`, `e` or `ly`,
/// when three letters or more remain), close to what the engines' English
/// stemmers match (`pricing` and `priced` with `price`).
fn token_matches(token: &str, term: &str, prefix: bool) -> bool {
    if prefix {
        return token.starts_with(term);
    }
    if token == term {
        return true;
    }
    let stem = ["ing", "ed", "es", "s", "e", "ly"]
        .iter()
        .find_map(|ending| {
            term.strip_suffix(ending)
                .filter(|stem| stem.chars().count() >= 3)
        })
        .unwrap_or(term);
    stem.chars().count() >= 3 && !stem.chars().all(is_cjk) && token.starts_with(stem)
}

/// A snippet of `text` around the first match of `query`, at most about
/// `width` characters, with the matches' character ranges within the
/// snippet (start inclusive, end exclusive, counted in Unicode scalar
/// values). Without a match, the text's beginning and no ranges.
pub fn snippet(text: &str, query: &FullTextQuery, width: usize) -> (String, Vec<(usize, usize)>) {
    let chars: Vec<char> = text.chars().collect();
    let mut terms = query.highlight_terms();
    // A term given twice highlights once (and costs once).
    terms.sort();
    terms.dedup();
    // Matches in characters, from the text's start to where no match can
    // be shown any more: the window starts at most a quarter of its width
    // before the first match, so nothing from `first + width` on is in
    // it. Linear in the text and the terms: a CJK run's matches are
    // counted in characters as the search moves on (counting each from
    // the run's start had made one 21,000-character run of a term 32
    // times over take 47 s of CPU).
    let mut matches: Vec<(usize, usize)> = Vec::new();
    let mut first: Option<usize> = None;
    let shown = |start: usize, first: Option<usize>| first.is_none_or(|f| start < f + width);
    let mut i = 0;
    while i < chars.len() && shown(i, first) {
        let c = chars[i];
        if is_cjk(c) {
            let end = (i..chars.len())
                .find(|&j| !is_cjk(chars[j]))
                .unwrap_or(chars.len());
            let run: String = chars[i..end].iter().collect();
            for (term, _) in &terms {
                if !term.chars().all(is_cjk) {
                    continue;
                }
                let length = term.chars().count();
                // The byte and character positions reached in the run.
                let (mut byte, mut counted) = (0, 0);
                while let Some(at) = run[byte..].find(term.as_str()) {
                    counted += run[byte..byte + at].chars().count();
                    let start = i + counted;
                    if !shown(start, first) {
                        break;
                    }
                    matches.push((start, start + length));
                    first = Some(first.map_or(start, |f| f.min(start)));
                    byte += at + term.len();
                    counted += length;
                }
            }
            i = end;
        } else if c.is_alphanumeric() {
            let end = (i..chars.len())
                .find(|&j| !chars[j].is_alphanumeric() || is_cjk(chars[j]))
                .unwrap_or(chars.len());
            let token: String = chars[i..end]
                .iter()
                .flat_map(|c| c.to_lowercase())
                .collect();
            if terms
                .iter()
                .any(|(term, prefix)| token_matches(&token, term, *prefix))
            {
                matches.push((i, end));
                first = Some(first.map_or(i, |f| f.min(i)));
            }
            i = end;
        } else {
            i += 1;
        }
    }
    matches.sort_unstable();
    // Pairs of one CJK word overlap: merge them.
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (start, end) in matches {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    let first = merged.first().map_or(0, |m| m.0);
    let begin = if chars.len() <= width {
        0
    } else {
        first.saturating_sub(width / 4).min(chars.len() - width)
    };
    let end = (begin + width).min(chars.len());
    let mut out: String = chars[begin..end].iter().collect();
    let mut offset = 0;
    if begin > 0 {
        out.insert(0, '…');
        offset = 1;
    }
    if end < chars.len() {
        out.push('…');
    }
    // A match the window cuts (merged CJK matches can run past it) is
    // highlighted where it is shown.
    let ranges = merged
        .into_iter()
        .filter(|(s, e)| *e > begin && *s < end)
        .map(|(s, e)| (s.max(begin) - begin + offset, e.min(end) - begin + offset))
        .collect();
    (out, ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> FullTextQuery {
        FullTextQuery::parse(text).unwrap()
    }

    #[test]
    fn the_query_language_parses_into_terms() {
        let query = q(r#"pricing "enterprise segment" churn* -smb 実行"#);
        assert_eq!(
            query.required,
            vec![
                Term::Phrase(vec!["pricing".into()]),
                Term::Phrase(vec!["enterprise".into(), "segment".into()]),
                Term::Prefix("churn".into()),
                Term::Phrase(vec!["実行".into()]),
            ]
        );
        assert_eq!(query.excluded, vec![Term::Phrase(vec!["smb".into()])]);
        assert_eq!(
            query.to_fts5(),
            r#"("pricing") AND ("enterprise" + "segment") AND ("churn" *) AND ("実行") NOT ("smb")"#
        );
        assert_eq!(
            query.to_tsquery(),
            "('price') & ('enterpris' <-> 'segment') & 'churn':* & ('実行') & !('smb')"
        );
        assert_eq!(q("日").required, vec![Term::Prefix("日".into())]);
        assert_eq!(FullTextQuery::parse("  \" \" -- "), Err(QueryError::Empty));
        assert_eq!(FullTextQuery::parse("-only"), Err(QueryError::OnlyExcluded));
        assert_eq!(
            FullTextQuery::parse(&"w ".repeat(40)),
            Err(QueryError::TooLong)
        );
        // No operators but `-`: a bare OR or AND is said, not searched for;
        // in quotes, or in another case, it is a word.
        assert_eq!(
            FullTextQuery::parse("revenue OR credit"),
            Err(QueryError::NotAnOperator("OR".into()))
        );
        assert!(FullTextQuery::parse("a AND b").is_err());
        assert_eq!(q("\"OR\" or and").required.len(), 3);
    }

    #[test]
    fn nothing_a_user_types_escapes_the_engines_syntax() {
        for hostile in [
            // Found by fuzzing: punctuation inside the kana blocks, and a
            // capital whose lower case carries a combining mark.
            "注文・実行 ゛",
            "iİOR x'?ly",
            r#"a" OR "b"#,
            "x' | 'y",
            "NEAR(a b)",
            "col:value",
            "a) OR (b",
            "*",
            "\\'",
        ] {
            if let Ok(query) = FullTextQuery::parse(hostile) {
                for t in query.required.iter().chain(&query.excluded) {
                    let tokens = match t {
                        Term::Phrase(w) => w.clone(),
                        Term::Prefix(p) => vec![p.clone()],
                    };
                    assert!(
                        tokens.iter().all(|w| w.chars().all(char::is_alphanumeric)),
                        "{hostile}"
                    );
                }
            }
        }
    }

    #[test]
    fn snippets_highlight_words_stems_prefixes_and_cjk() {
        let text =
            "The pricing change hit SMB accounts; priced plans churned. 注文テーブルを実行中";
        let (snip, ranges) = snippet(text, &q("price churn* 実行"), 200);
        let marked: Vec<String> = ranges
            .iter()
            .map(|(s, e)| snip.chars().skip(*s).take(e - s).collect())
            .collect();
        assert_eq!(marked, vec!["pricing", "priced", "churned", "実行"]);
        let long = format!("{} needle {}", "hay ".repeat(100), "hay ".repeat(100));
        let (snip, ranges) = snippet(&long, &q("needle"), 40);
        assert!(snip.starts_with('…') && snip.ends_with('…'));
        let (s, e) = ranges[0];
        assert_eq!(
            snip.chars().skip(s).take(e - s).collect::<String>(),
            "needle"
        );
    }

    /// Matches in a CJK run are placed by characters after earlier ones
    /// (terms repeated count once), and only those the window can show
    /// are collected: a run of 200,000 characters of one term repeated
    /// 32 times answers its first 40 characters' matches (it had counted
    /// every match's position from the run's start, for every copy of
    /// the term: quadratic).
    #[test]
    fn cjk_runs_are_matched_in_one_pass_within_the_window() {
        let text = format!("x {}本{}", "日本".repeat(3), "日".repeat(200_000));
        let query = q(&vec!["日"; 32].join(" "));
        let (snip, ranges) = snippet(&text, &query, 40);
        assert_eq!(snip.chars().count(), 41, "{snip}");
        let starts: Vec<usize> = ranges.iter().map(|r| r.0).collect();
        // "x " then 日本日本日本本 then 日...: the 日 at 2, 4, 6, and from 9 on,
        // merged where they touch.
        assert_eq!(ranges[..3], [(2, 3), (4, 5), (6, 7)], "{starts:?}");
        assert_eq!(ranges[3], (9, 40), "{ranges:?}");
        let marked: String = snip.chars().skip(9).take(31).collect();
        assert!(marked.chars().all(|c| c == '日'), "{marked}");
    }
}
