//! What looks like a Cairn API key (`cairn_<key id>_<secret>`): the rule
//! ingest refuses ids, link values and model names by, and the broader
//! one answers and logs leave text out by, over one decoding loop.

use super::RecordError;

/// Whether `text` holds a Cairn API key, anywhere in it, in any case,
/// also percent-encoded up to three times: `cairn_`, a key id (12 hex
/// digits), `_` and 20 or more of a secret's characters (base64url: a
/// token cut short too), or a bare key id starting a word, `_` and a run
/// of exactly 43 such characters holding both upper- and lower-case
/// letters, as random base64url does (a token pasted without its
/// prefix). Ingest refuses such text as an id
/// ([`refuse_api_key_id`]); a key id alone (`cairn_202612051200`) or a
/// UUID followed by a name (its last group is 12 hex digits) is not one.
pub fn looks_like_an_api_key(text: &str) -> bool {
    token_in(text, TokenMatch::Whole)
}

/// Whether `text` may hold an API key or enough of one to matter, by a
/// broader rule than [`looks_like_an_api_key`], for what Cairn shows and
/// logs (where leaving a word out costs little): `cairn_` followed by a
/// key id, or a key id followed by `_`, `.` or `:` and 20 or more of a
/// secret's characters (most of a token cut to 60 characters in a
/// message), in any case, percent-encoded up to three times.
pub fn may_hold_an_api_key(text: &str) -> bool {
    token_in(text, TokenMatch::Part)
}

/// How much of a token [`token_in`] looks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TokenMatch {
    /// A whole token (ingest's rule).
    Whole,
    /// A key id with a prefix, or most of a token (answers' and logs').
    Part,
}

/// The one decoding loop of the token rules: `text` as sent, then
/// percent-decoded while that changes it (at most three times). Only text
/// holding a `%` reads differently decoded, so the ids every appended step
/// is checked for are read in place, without a copy.
fn token_in(text: &str, rule: TokenMatch) -> bool {
    if holds_token(text, rule) {
        return true;
    }
    let mut decoded = std::borrow::Cow::Borrowed(text);
    for _ in 0..3 {
        if !decoded.contains('%') {
            return false;
        }
        let next = percent_decoded(&decoded);
        if next == *decoded {
            return false;
        }
        if holds_token(&next, rule) {
            return true;
        }
        decoded = std::borrow::Cow::Owned(next);
    }
    false
}

/// [`token_in`]'s test of one spelling: linear in its length (each
/// position looks at a bounded number of bytes after it).
fn holds_token(text: &str, rule: TokenMatch) -> bool {
    const PREFIX: &[u8] = b"cairn_";
    const SECRET: usize = 43;
    let bytes = text.as_bytes();
    let secret_byte = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-';
    let hex_run =
        |at: usize| bytes.len() >= at + 12 && bytes[at..at + 12].iter().all(u8::is_ascii_hexdigit);
    // Up to `enough` of the secret's characters (base64url) from `at` on.
    let secret_run = |at: usize, enough: usize| {
        bytes[at.min(bytes.len())..]
            .iter()
            .take(enough)
            .take_while(|b| secret_byte(b))
            .count()
    };
    // A bare token's secret: exactly 43 characters (the run ends there)
    // holding both cases, as random base64url does (all but about one in
    // a billion); names of that shape rarely are.
    let bare_secret = |at: usize| {
        secret_run(at, SECRET) == SECRET
            && !bytes.get(at + SECRET).is_some_and(secret_byte)
            && bytes[at..at + SECRET].iter().any(u8::is_ascii_uppercase)
            && bytes[at..at + SECRET].iter().any(u8::is_ascii_lowercase)
    };
    let prefixed = (0..bytes.len().saturating_sub(PREFIX.len() - 1)).any(|at| {
        bytes[at..at + PREFIX.len()].eq_ignore_ascii_case(PREFIX)
            && hex_run(at + 6)
            && match rule {
                TokenMatch::Part => true,
                // Most of a secret after a prefixed key id: a token cut
                // short is still refused (what is left would be guessed).
                TokenMatch::Whole => {
                    bytes.get(at + 18) == Some(&b'_') && secret_run(at + 19, 20) == 20
                }
            }
    });
    prefixed
        || (0..bytes.len()).any(|at| {
            hex_run(at)
                && match (rule, bytes.get(at + 12)) {
                    // A bare key id starts a word: not the tail of a longer
                    // run of letters and digits (a millisecond timestamp).
                    (TokenMatch::Whole, Some(b'_')) => {
                        (at == 0 || !bytes[at - 1].is_ascii_alphanumeric()) && bare_secret(at + 13)
                    }
                    (TokenMatch::Part, Some(b'_' | b'.' | b':')) => secret_run(at + 13, 20) == 20,
                    _ => false,
                }
        })
}

/// `text` with each `%XX` replaced by its byte (invalid UTF-8 lossily).
pub fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// [`RecordError::ApiKeyId`] for an id that [`looks_like_an_api_key`]: an
/// ingest rule (a log holding such an id still verifies).
pub fn refuse_api_key_id(field: &'static str, id: &str) -> Result<(), RecordError> {
    if looks_like_an_api_key(id) {
        return Err(RecordError::ApiKeyId { field });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An API key pasted where an id belongs is refused at ingest, in any
    /// spelling; ids that only resemble one in part are not.
    #[test]
    fn ids_that_look_like_api_keys_are_refused() {
        let token = "cairn_0123456789ab_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZ";
        for id in [
            token.to_owned(),
            token.to_ascii_uppercase(),
            format!("run-{token}"),
            token[6..].to_owned(),
            token.replace('_', "%5F"),
            // Cut short: what is left would be guessed.
            token[..60].to_owned(),
            token[..40].to_owned(),
        ] {
            assert!(looks_like_an_api_key(&id), "{id}");
            assert!(matches!(
                refuse_api_key_id("session_id", &id),
                Err(RecordError::ApiKeyId {
                    field: "session_id"
                })
            ));
        }
        for id in [
            "cairn_meta",
            "CAIRN_ALLOWED_ORIGINS",
            "analysis-session-42",
            "0123456789ab_short",
            "550e8400-e29b-41d4-a716-446655440000_run-attempt-number-0001",
            "550e8400-e29b-41d4-a716-446655440000_customer-support-conversation-summary-2026",
            "otel.0af7651916cd43dd8448eb211c80319c.b7ad6b7169203331.0",
            // A key id alone is no secret; nor are timestamps or digests.
            "cairn_0123456789ab",
            "cairn_202612051200",
            "cairn_1733356800000",
            "build_202612051200_3f786850e387550fdab836ed7e6dc881de23001b",
            "1733366400000_ResearchAgentSummarizeQuarterlyEarningsReportV2",
            "202612051200_CustomerSupportAgent-HandlingRefundRequests-v2",
            "550e8400-e29b-41d4-a716-446655440000_Agent_Research_Summarize_Quarterly_Report_Q3",
            "run-deadbeefcafe_ExtractInvoiceLineItemsFromScannedPdfDocuments",
        ] {
            assert!(!looks_like_an_api_key(id), "{id}");
            assert!(refuse_api_key_id("session_id", id).is_ok());
        }
        // Linear in the text: 2 MiB of key-id-like runs (OTLP ids are not
        // cut before this test) once took minutes.
        let long = "000000000000_".repeat(160_000);
        assert!(!looks_like_an_api_key(&long));
        assert!(may_hold_an_api_key(&long));
    }

    /// What Cairn shows and logs leaves out more: a prefixed key id, and
    /// most of a token (a message cuts what it quotes to 60 characters),
    /// also after `.` or `:`; everyday words stay.
    #[test]
    fn answers_leave_out_parts_of_tokens() {
        let token = "cairn_0123456789ab_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZ";
        for text in [
            token.to_owned(),
            format!("Authorization: Bearer {}", &token[6..])[..60].to_owned(),
            "cairn_0123456789ab".to_owned(),
            format!("0123456789ab.{}", &token[19..]),
            format!("0123456789ab:{}", &token[19..]),
            token.replace('_', "%255F"),
        ] {
            assert!(may_hold_an_api_key(&text), "{text}");
        }
        for text in [
            "cairn_meta",
            "CAIRN_ALLOWED_ORIGINS",
            "my_cairn_test",
            "0123456789ab_short",
        ] {
            assert!(!may_hold_an_api_key(text), "{text}");
        }
    }
}
