//! Input rules every surface shares (REST bodies and query strings, MCP
//! tool arguments): a member nobody defined is an error that names it and
//! suggests the nearest known one, and an argument of the wrong type or a
//! missing one is an error that names its field. A ledger cannot be
//! corrected after the fact, so a misspelt field must never be dropped
//! silently.
//!
//! Every error here is an [`ApiError`] with a stable code (`unknown_field`,
//! `missing_field`, `invalid_argument`) and its `field`, so REST answers
//! and MCP tool errors have the one shape
//! `{"error": {"code", "field", "message"}}`.

use crate::error::{ApiError, shown};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The known name closest to `name`, if one is close enough to be a
/// likely misspelling (at most a third of its letters differ, and at most
/// three), or differs only in case, `-`/`_` or camelCase.
pub fn nearest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let folded = fold(name);
    if let Some(same) = known.iter().find(|k| fold(k) == folded) {
        return Some(same);
    }
    // A shortened or lengthened name (`agent` for `agent_id`).
    if folded.chars().count() >= 3
        && let Some(longer) = known.iter().find(|k| {
            let k = fold(k);
            k.starts_with(&folded) || folded.starts_with(&k)
        })
    {
        return Some(longer);
    }
    let limit = (name.chars().count() / 3).clamp(1, 3);
    known
        .iter()
        .map(|k| (edit_distance(&folded, &fold(k)), *k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Lowercase, without `_` and `-`: `verifyChain`, `verify-chain` and
/// `verify_chain` are one name.
fn fold(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Levenshtein distance over characters (names are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

/// `400 unknown_field` for `name` (at `path`, e.g. `links.` for a nested
/// object), suggesting the nearest of `known`.
pub fn unknown_field(path: &str, name: &str, known: &[&str]) -> ApiError {
    let field = format!("{path}{name}");
    let message = match nearest(name, known) {
        Some(suggestion) => format!(
            "unknown field {}: did you mean {path}{suggestion}?",
            shown(&field)
        ),
        None => format!(
            "unknown field {}; the known fields are {}.",
            shown(&field),
            known.join(", ")
        ),
    };
    ApiError::bad_request("unknown_field", message).with_field(field)
}

/// Refuses a member of a step object that no step has, and a link name no
/// link has (`links.colour`), each suggesting the nearest known name: the
/// check every surface that reads step objects makes first (REST bodies
/// and batches, `cairn log --stdin`).
pub fn refuse_unknown_step_members(object: &Map<String, Value>) -> Result<(), ApiError> {
    refuse_unknown(object, crate::wire::STEP_MEMBERS)?;
    if let Some(Value::Object(links)) = object.get("links") {
        let known = cairn_core::record::Links::default()
            .entries()
            .map(|(name, _)| name);
        if let Some(unknown) = links.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(unknown_field("links.", unknown, &known));
        }
    }
    Ok(())
}

/// A required member that is absent: `missing_field`, naming it, on every
/// surface (MCP's typed arguments answer it so).
pub fn missing_field(field: &str) -> ApiError {
    ApiError::bad_request("missing_field", format!("{} is required.", shown(field)))
        .with_field(field.to_owned())
}

/// Refuses a member of `object` that is not in `known`.
pub fn refuse_unknown(object: &Map<String, Value>, known: &[&str]) -> Result<(), ApiError> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        Some(unknown) => Err(unknown_field("", unknown, known)),
        None => Ok(()),
    }
}

/// Refuses a query parameter that is not in `known`. An empty name
/// (`?=1`, `?&`) names nothing and is let through.
pub fn refuse_unknown_params<'a>(
    names: impl IntoIterator<Item = &'a String>,
    known: &[&str],
) -> Result<(), ApiError> {
    for name in names.into_iter().filter(|name| !name.is_empty()) {
        if known.is_empty() {
            return Err(ApiError::bad_request(
                "unknown_field",
                format!(
                    "unknown query parameter {}; this route takes no query parameters",
                    shown(name)
                ),
            )
            .with_field(name.clone()));
        }
        if !known.contains(&name.as_str()) {
            let mut e = unknown_field("", name, known);
            e.message = e
                .message
                .replace("unknown field", "unknown query parameter")
                .replace("the known fields are", "the known parameters are");
            return Err(e);
        }
    }
    Ok(())
}

/// How many results a listing returns: its default, and the most it may
/// be asked for.
#[derive(Debug, Clone, Copy)]
pub struct ResultLimit {
    /// When no limit is given.
    pub default: usize,
    /// The largest limit accepted.
    pub max: usize,
}

/// Sessions of `GET /v1/sessions` and MCP `get_session_history` and
/// `list_traces`.
pub const SESSIONS_LIMIT: ResultLimit = ResultLimit {
    default: 20,
    max: 1000,
};

/// Items of the review queue (`GET /v1/reviews`, MCP `review_queue`).
pub const REVIEWS_LIMIT: ResultLimit = ResultLimit {
    default: 100,
    max: 10_000,
};

/// Key records of a page of `GET /v1/agent-keys`.
pub const KEY_RECORDS_LIMIT: ResultLimit = ResultLimit {
    default: 1000,
    max: 1000,
};

/// Results of a search (`GET /v1/search`, MCP `search_reasoning`, the web
/// UI's search).
pub const SEARCH_LIMIT: ResultLimit = ResultLimit {
    default: 10,
    max: 100,
};

/// Rows of an analyst query (`POST /v1/sql`, MCP `query_sql`).
pub const SQL_ROWS_LIMIT: ResultLimit = ResultLimit {
    default: cairn_store::analyst::MAX_ROWS,
    max: cairn_store::analyst::MAX_ROWS,
};

/// Reads a `limit` as every surface reads it. `given` is `None` when no
/// limit was given (the default), `Some(None)` when what was given is not a
/// non-negative integer. 1 to the maximum is taken; anything else is
/// refused with the one message, never clamped: a client that asked for
/// more than it can get must not believe it got everything.
pub fn result_limit(given: Option<Option<u64>>, limit: ResultLimit) -> Result<usize, ApiError> {
    match given {
        None => Ok(limit.default),
        Some(n) => n
            .filter(|n| (1..=limit.max as u64).contains(n))
            .map(|n| n as usize)
            .ok_or_else(|| {
                let mut e = ApiError::bad_request(
                    "invalid_argument",
                    format!("limit must be 1 to {}", limit.max),
                );
                e.field = Some("limit".into());
                e
            }),
    }
}

/// A query's `limit` read by [`result_limit`]: decimal digits only
/// ([`crate::decimal`]), anything else refused as out of range.
pub fn query_limit(
    q: &std::collections::HashMap<String, String>,
    limit: ResultLimit,
) -> Result<usize, ApiError> {
    result_limit(q.get("limit").map(|l| crate::decimal(l)), limit)
}

/// Deserializes arguments into `T` (whose serde attributes deny unknown
/// fields), turning serde's error into the shared shape with the field's
/// path.
pub fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        from_serde_message(&path, &inner)
    })
}

/// Classifies serde's message (its wording is stable: `unknown field `x`,
/// expected one of `a`, `b``, `missing field `x``, `invalid type: ...`).
fn from_serde_message(path: &str, message: &str) -> ApiError {
    // The path of the object the problem is in: "." at the top.
    let prefix = if path == "." || path.is_empty() {
        String::new()
    } else {
        format!("{path}.")
    };
    let quoted: Vec<&str> = message.split('`').skip(1).step_by(2).collect();
    if let Some(rest) = message.strip_prefix("unknown field ")
        && let Some(name) = quoted.first()
    {
        let known: Vec<&str> = if rest.contains("there are no fields") {
            Vec::new()
        } else {
            quoted[1..].to_vec()
        };
        // The path of an unknown field ends with the field itself.
        let parent = path.strip_suffix(name).unwrap_or(path);
        let parent = if parent == "." { "" } else { parent };
        return unknown_field(parent, name, &known);
    }
    if message.starts_with("missing field ")
        && let Some(name) = quoted.first()
    {
        return missing_field(&format!("{prefix}{name}"));
    }
    let field = if prefix.is_empty() {
        None
    } else {
        Some(path.to_owned())
    };
    // A required argument given as null is missing, as REST reads a null
    // member (optional arguments take null as absent and never get here).
    if message.starts_with("invalid type: null")
        && let Some(f) = &field
    {
        return missing_field(f);
    }
    let message = plain_type_message(message);
    // `confidence must be a number, ...` as REST says it; serde's other
    // messages after a colon.
    let joint = if message.starts_with("must be ") {
        " "
    } else {
        ": "
    };
    let shown_message = match &field {
        Some(f) => format!("{}{joint}{message}", shown(f)),
        None => format!("the arguments{joint}{message}"),
    };
    let error = ApiError::bad_request("invalid_argument", shown_message);
    match field {
        Some(f) => error.with_field(f),
        None => error,
    }
}

/// serde's `invalid type: string "x", expected f64` in the words REST's
/// refusals use (`must be a number, not string "x"`); other messages as
/// they are.
fn plain_type_message(message: &str) -> String {
    let Some((got, expected)) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .and_then(|rest| rest.rsplit_once(", expected "))
    else {
        return message.to_owned();
    };
    let wanted = match expected {
        "f32" | "f64" => "a number",
        "u8" | "u16" | "u32" | "u64" | "usize" => {
            "a whole number written without a sign, a fraction or an exponent (2, not 2.0), within the argument's range"
        }
        "i8" | "i16" | "i32" | "i64" | "isize" => {
            "a whole number written without a fraction or an exponent (2, not 2.0), within the argument's range"
        }
        "a boolean" => "true or false",
        "a sequence" => "an array",
        "a map" => "an object",
        e if e.starts_with("struct ") => "an object",
        e => e,
    };
    format!("must be {wanted}, not {got}")
}

/// A request's query string as name → value, with a name given twice
/// refused (400 `invalid_request` naming it): `Query<HashMap>` kept the
/// last of two `session=` silently, where a JSON body's repeated member
/// is refused.
pub(crate) struct StrictQuery(pub(crate) std::collections::HashMap<String, String>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for StrictQuery {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<StrictQuery, ApiError> {
        let axum::extract::Query(pairs) =
            axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&parts.uri).map_err(
                |e| {
                    ApiError::bad_request(
                        "invalid_request",
                        format!("the query string does not parse: {e}"),
                    )
                },
            )?;
        let mut map = std::collections::HashMap::with_capacity(pairs.len());
        for (name, value) in pairs {
            if map.contains_key(&name) {
                return Err(ApiError::bad_request(
                    "invalid_request",
                    format!(
                        "query parameter {} is given twice: give it once",
                        shown(&name)
                    ),
                )
                .with_field(name));
            }
            map.insert(name, value);
        }
        Ok(StrictQuery(map))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Args {
        session_id: String,
        content: Option<String>,
        confidence: Option<f64>,
        verify_chain: Option<bool>,
    }

    #[test]
    fn misspellings_get_the_nearest_name() {
        let known = ["session_id", "content", "confidence", "verify_chain"];
        assert_eq!(nearest("contnet", &known), Some("content"));
        assert_eq!(nearest("verifyChain", &known), Some("verify_chain"));
        assert_eq!(nearest("Session-Id", &known), Some("session_id"));
        assert_eq!(nearest("zzz", &known), None);
        assert_eq!(nearest("session", &known), Some("session_id"));
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn serde_errors_become_the_shared_shape() {
        let e = typed::<Args>(json!({"session_id": "s", "contnet": "x"})).unwrap_err();
        assert_eq!(e.code, "unknown_field");
        assert_eq!(e.field.as_deref(), Some("contnet"));
        assert!(e.message.contains("did you mean content"), "{}", e.message);

        let e = typed::<Args>(json!({"content": "x"})).unwrap_err();
        assert_eq!(e.code, "missing_field");
        assert_eq!(e.field.as_deref(), Some("session_id"));

        let e = typed::<Args>(json!({"session_id": "s", "confidence": "high"})).unwrap_err();
        assert_eq!(e.code, "invalid_argument");
        assert_eq!(e.field.as_deref(), Some("confidence"));
        assert!(
            e.message.contains("must be a number, not string \"high\""),
            "{}",
            e.message
        );

        let e = typed::<Args>(json!({"session_id": null})).unwrap_err();
        assert_eq!(e.code, "missing_field");
        assert_eq!(e.field.as_deref(), Some("session_id"));

        let e = typed::<Args>(json!({"session_id": "s", "verify_chain": 1})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("verify_chain"));
        assert!(e.message.contains("must be true or false"), "{}", e.message);

        let e = typed::<Args>(json!("not an object")).unwrap_err();
        assert_eq!(e.code, "invalid_argument");
        assert_eq!(e.field, None);
    }
}
