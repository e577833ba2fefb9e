//! The org log: every record of an org, steps and operational records
//! alike, as one gap-free sequence of Merkle leaves.
//!
//! ```text
//! op_hash   = SHA-256(frame("cairn/v2/op"; type, jcs(view)))
//! leaf data = frame("cairn/v2/log-leaf"; u64be(seq), type, record hash, logged_at)
//! ```
//!
//! where the record hash is a step's chain hash or an operational record's
//! `op_hash`. The canonical JSON view of each operational record is also its
//! stored and exported form ([`OpRecord::to_view`], [`OpRecord::from_view`]).
//!
//! This file holds the records as the log orders them ([`OpRecord`] and
//! what it names, [`LogRecord`], [`LogEntry`]), the leaf data, and the
//! log's origin and checkpoint; the operational records' own types (seals,
//! erasures, reviews, agent keys, audit events, signed traces, log keys)
//! are in `records`, an operational record's canonical view (written, and
//! parsed back strictly) and its `op_hash` in `view`.

use crate::checkpoint::Checkpoint;
use crate::commit::StepRecord;
use crate::hash::{Hash, frame_bytes};
use crate::merkle;
use crate::record::SessionHeader;
use crate::time::Timestamp;

mod records;
mod view;

pub use records::{
    AuditEvent, ErasureRecord, KeyRegistration, KeyRevocation, LogKeyAction, LogKeyRecord,
    ReviewDecision, ReviewRecord, SealRecord, SignedTraceRecord, TraceErasureRecord,
    log_key_note_text, seal_note_text,
};
pub use view::OpParseError;

/// An operational record of the org log.
#[derive(Debug, Clone, PartialEq)]
pub enum OpRecord {
    /// A session began; its genesis is derived from this header.
    SessionStart(SessionHeader),
    /// A session was sealed.
    Seal(SealRecord),
    /// Payload fields of a step were erased.
    Erasure(ErasureRecord),
    /// A flagged step was reviewed.
    Review(ReviewRecord),
    /// An agent key was registered.
    KeyRegistration(KeyRegistration),
    /// An agent key was revoked.
    KeyRevocation(KeyRevocation),
    /// A per-tool-call audit event.
    AuditEvent(AuditEvent),
    /// An imported, agent-signed trace.
    SignedTrace(SignedTraceRecord),
    /// A log key added or retired.
    LogKey(LogKeyRecord),
    /// A signed trace's record withheld by an erasure.
    TraceErasure(TraceErasureRecord),
}

impl OpRecord {
    /// The entry type written in the leaf: `session-start`, `seal`,
    /// `erasure`, `review`, `key-registration`, `key-revocation`,
    /// `audit-event`, `signed-trace`, `log-key` or `trace-erasure`.
    pub fn entry_type(&self) -> &'static str {
        match self {
            OpRecord::SessionStart(_) => "session-start",
            OpRecord::Seal(_) => "seal",
            OpRecord::Erasure(_) => "erasure",
            OpRecord::Review(_) => "review",
            OpRecord::KeyRegistration(_) => "key-registration",
            OpRecord::KeyRevocation(_) => "key-revocation",
            OpRecord::AuditEvent(_) => "audit-event",
            OpRecord::SignedTrace(_) => "signed-trace",
            OpRecord::LogKey(_) => "log-key",
            OpRecord::TraceErasure(_) => "trace-erasure",
        }
    }

    /// The session the record concerns, as its view names it (an audit
    /// event may name none; key and log-key records never do).
    pub fn session_id(&self) -> Option<&str> {
        match self {
            OpRecord::SessionStart(h) => Some(&h.session_id),
            OpRecord::Seal(s) => Some(&s.session_id),
            OpRecord::Erasure(e) => Some(&e.session_id),
            OpRecord::Review(r) => Some(&r.session_id),
            OpRecord::AuditEvent(a) => a.session_id.as_deref(),
            OpRecord::SignedTrace(t) => Some(&t.session_id),
            OpRecord::TraceErasure(e) => Some(&e.session_id),
            OpRecord::KeyRegistration(_) | OpRecord::KeyRevocation(_) | OpRecord::LogKey(_) => None,
        }
    }

    /// The org the record belongs to.
    pub fn org_id(&self) -> &str {
        match self {
            OpRecord::SessionStart(h) => &h.org_id,
            OpRecord::Seal(r) => &r.org_id,
            OpRecord::Erasure(r) => &r.org_id,
            OpRecord::Review(r) => &r.org_id,
            OpRecord::KeyRegistration(r) => &r.org_id,
            OpRecord::KeyRevocation(r) => &r.org_id,
            OpRecord::AuditEvent(r) => &r.org_id,
            OpRecord::SignedTrace(r) => &r.org_id,
            OpRecord::LogKey(r) => &r.org_id,
            OpRecord::TraceErasure(r) => &r.org_id,
        }
    }
}

/// A record of the org log, as stored or exported.
// Most log entries are steps, and they are streamed one at a time: boxing
// the large variant would add an allocation per step on the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum LogRecord {
    /// A step; its record hash is its chain hash.
    Step(StepRecord),
    /// An operational record and its hash as recorded.
    Op {
        /// The record.
        record: OpRecord,
        /// `op_hash` as recorded (recomputed and compared by verifiers).
        hash: Hash,
    },
    /// A `signed-trace` record withheld by a later `trace-erasure`
    /// record: only its recorded `op_hash` is left, which nothing can
    /// recompute (FORMAT.md 8).
    ErasedTrace {
        /// `op_hash` as recorded.
        hash: Hash,
    },
}

/// One leaf of an org log.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    /// 0-based position in the org log; equal to the leaf index.
    pub seq: u64,
    /// When the server logged the entry (its own clock, never earlier than
    /// the previous entry's): bound into the leaf, so every record carries
    /// the server's time whatever time its writer claimed.
    pub logged_at: Timestamp,
    /// The record.
    pub record: LogRecord,
}

impl LogEntry {
    /// The entry type written in the leaf.
    pub fn entry_type(&self) -> &'static str {
        match &self.record {
            LogRecord::Step(_) => "step",
            LogRecord::Op { record, .. } => record.entry_type(),
            LogRecord::ErasedTrace { .. } => "signed-trace",
        }
    }

    /// The recorded hash the leaf binds.
    pub fn record_hash(&self) -> Hash {
        match &self.record {
            LogRecord::Step(s) => s.hash,
            LogRecord::Op { hash, .. } | LogRecord::ErasedTrace { hash } => *hash,
        }
    }

    /// The RFC 9162 leaf hash of this entry.
    pub fn leaf_hash(&self) -> Hash {
        merkle::leaf_hash(&log_leaf_data(
            self.seq,
            self.entry_type(),
            &self.record_hash(),
            self.logged_at,
        ))
    }
}

/// `frame("cairn/v2/log-leaf"; u64be(seq), type, record hash, logged_at)`.
pub fn log_leaf_data(
    seq: u64,
    entry_type: &str,
    record_hash: &Hash,
    logged_at: Timestamp,
) -> Vec<u8> {
    frame_bytes(
        "cairn/v2/log-leaf",
        &[
            &seq.to_be_bytes(),
            entry_type.as_bytes(),
            &record_hash.0,
            &logged_at.canonical_bytes(),
        ],
    )
}

/// The checkpoint origin of an org's log on a server whose key is named
/// `server_name`: `<server_name>/<org_id>`.
pub fn log_origin(server_name: &str, org_id: &str) -> String {
    format!("{server_name}/{org_id}")
}

/// A checkpoint for an org log of the given size and root.
pub fn org_checkpoint(server_name: &str, org_id: &str, size: u64, root: Hash) -> Checkpoint {
    Checkpoint {
        origin: log_origin(server_name, org_id),
        size,
        root,
        extensions: Vec::new(),
    }
}
