//! One bundle line prepared apart from the lines before it (parsed,
//! decoded, its step digest recomputed), so that [`super::BundleVerifier`]
//! can take lines prepared on other threads.

use super::{ProvenEntry, decode_entry_value};
use crate::hash::Hash;
use crate::log::{LogEntry, LogRecord};
use crate::verify::Reason;
use serde_json::Value;
use std::borrow::Cow;

/// Why a line is not a JSON value.
#[derive(Debug)]
pub(super) enum LineError {
    NotUtf8(std::str::Utf8Error),
    NotJson(String),
}

/// An entry line decoded, with its step's digest recomputed from its
/// fields.
#[derive(Debug)]
pub(super) struct PreparedEntry {
    pub(super) decoded: Result<ProvenEntry, (Reason, String)>,
    pub(super) digest: Option<Hash>,
    /// The line's `seq`, where a failure is reported if it does not decode.
    pub(super) seq: Option<u64>,
}

impl PreparedEntry {
    /// A decoded entry line, with its step's digest recomputed (if it is
    /// a step) and its `seq` kept if a failure can be reported at it.
    fn new(decoded: Result<ProvenEntry, (Reason, String)>, seq: Option<u64>) -> PreparedEntry {
        let digest = match &decoded {
            Ok((
                LogEntry {
                    record: LogRecord::Step(record),
                    ..
                },
                _,
            )) => Some(record.recompute_digest()),
            _ => None,
        };
        PreparedEntry {
            decoded,
            digest,
            seq: seq.filter(|s| *s <= crate::record::MAX_SAFE_INTEGER),
        }
    }
}

/// A line's JSON value, or, for a line with the shape of an entry (a
/// `seq`, none of the members that end the entries), only its bytes: the
/// value was decoded into the entry and dropped on the preparing thread
/// (freeing a JSON tree on another thread costs about as much as building
/// it). The bytes are parsed again only if the line comes where no entry
/// may.
#[derive(Debug)]
pub(super) enum Parsed {
    Value(Value),
    Entry(Vec<u8>),
}

/// One bundle line with the work that does not depend on the lines
/// before it already done: parsed, and, if it has the shape of an entry,
/// decoded and its step digest recomputed (the costly part of
/// verification). Prepare lines on as many threads as there are cores and
/// feed them in order to [`super::BundleVerifier::push_prepared`].
#[derive(Debug)]
pub struct PreparedLine {
    pub(super) value: Result<Parsed, LineError>,
    pub(super) entry: Option<PreparedEntry>,
}

impl PreparedLine {
    /// Prepares one line (without its line end).
    pub fn new(line: &[u8]) -> PreparedLine {
        PreparedLine::prepare(Cow::Borrowed(line))
    }

    /// Prepares one line as read, with or without its line end (`\n` or
    /// `\r\n`, see [`super::trim_line_end`]); the line's buffer is kept
    /// rather than copied.
    pub fn from_vec(mut line: Vec<u8>) -> PreparedLine {
        let len = super::trim_line_end(&line).len();
        line.truncate(len);
        PreparedLine::prepare(Cow::Owned(line))
    }

    /// Frees what the line was decoded into (on the calling thread) and
    /// gives back the buffer it was read into ([`PreparedLine::from_vec`]),
    /// emptied, to read another line into; `None` for a line that did not
    /// keep its buffer.
    pub fn into_buffer(self) -> Option<Vec<u8>> {
        match self.value {
            Ok(Parsed::Entry(mut buffer)) => {
                buffer.clear();
                Some(buffer)
            }
            _ => None,
        }
    }

    fn prepare(bytes: Cow<'_, [u8]>) -> PreparedLine {
        let line = &*bytes;
        // Most lines are plain step entries: read them without a JSON tree.
        if let Some(entry) = super::fast::decode_step_line(line) {
            let seq = Some(entry.0.seq);
            return PreparedLine {
                value: Ok(Parsed::Entry(bytes.into_owned())),
                entry: Some(PreparedEntry::new(Ok(entry), seq)),
            };
        }
        PreparedLine::general(bytes)
    }

    /// Prepares a line through the general decoder alone (what
    /// [`PreparedLine::new`] does with every line the fast decoder leaves).
    pub(super) fn general(bytes: Cow<'_, [u8]>) -> PreparedLine {
        let line = &*bytes;
        let value = std::str::from_utf8(line)
            .map_err(LineError::NotUtf8)
            .and_then(|text| {
                crate::json::from_str(text).map_err(|e| LineError::NotJson(e.to_string()))
            });
        // Only lines with a seq can be entries; the verifier decodes any
        // other line itself if its stage expects an entry there.
        let entry_shaped = |v: &Value| {
            v.get("seq").is_some()
                && ["end", "consistency", "selection"]
                    .iter()
                    .all(|member| v.get(member).is_none())
        };
        let (value, entry) = match value {
            Ok(v) if entry_shaped(&v) => {
                let decoded = decode_entry_value(&v);
                let seq = v.get("seq").and_then(Value::as_u64);
                (
                    Ok(Parsed::Entry(bytes.into_owned())),
                    Some(PreparedEntry::new(decoded, seq)),
                )
            }
            other => (other.map(Parsed::Value), None),
        };
        PreparedLine { value, entry }
    }
}
