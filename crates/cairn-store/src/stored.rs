//! What the store hands back to readers: stored checkpoints, sessions,
//! steps and log entries, and the filters and cursors of listings.

use cairn_core::Hash;
use cairn_core::Timestamp;
use cairn_core::commit::StepRecord;
use cairn_core::kind::StepKind;
use cairn_core::log::{LogEntry, SealRecord};
use cairn_core::record::{SessionHeader, Status};

/// One stored subtree hash of an org's log, as verification reads it
/// ([`crate::LedgerStore::tree_nodes_from`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredNode {
    /// The subtree's index at its level.
    pub index: u64,
    /// How many rows the store holds for it (one, unless the table's key
    /// was removed).
    pub rows: u64,
    /// The hash stored for it, as stored (`None` for a null, or, on
    /// SQLite, a value that is not a blob); of one of its rows when there
    /// are several.
    pub hash: Option<Vec<u8>>,
}

/// What [`crate::LedgerStore::rewrite_tree_nodes`] changed in an org's
/// stored subtree rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeRowsRewritten {
    /// Rows no reader can use, removed: a hash that is not 32 bytes, a
    /// level or index no append writes, or a subtree past the log's end.
    pub unusable: u64,
    /// Rows whose hash was not the log's, replaced.
    pub replaced: u64,
    /// Rows that were missing, written.
    pub missing: u64,
}

/// A signed checkpoint as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCheckpoint {
    /// The org.
    pub org_id: String,
    /// Log size it covers.
    pub size: u64,
    /// Root hash at that size.
    pub root: Hash,
    /// The signed note.
    pub note: String,
    /// When it was signed.
    pub created_at: Timestamp,
}

/// Which of an org's stored checkpoints a read returns (the backends'
/// one query, three ways).
#[derive(Debug, Clone, Copy)]
pub(crate) enum CheckpointPage {
    /// Every one, smallest first.
    All,
    /// Those of at least this size, smallest first, at most this many.
    From(u64, u32),
    /// The latest this many, newest first.
    Newest(u32),
}

/// A session's stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The header the genesis derives from.
    pub header: SessionHeader,
    /// Position of its `session-start` record.
    pub start_seq: u64,
    /// Steps recorded.
    pub step_count: u64,
    /// Chain hash of the last step (the genesis if none).
    pub head: Hash,
    /// The seal, if sealed.
    pub seal: Option<SealRecord>,
    /// The seal record's position in the org log, if sealed.
    pub seal_seq: Option<u64>,
    /// The steps the session's head row says it holds (that row is
    /// derived, written with each batch, never believed for what the
    /// session holds): a verification fails when the log holds fewer (a
    /// step an insider moved to another session or removed), so that a
    /// session's own verdict does not shrink with it unnoticed. `None`
    /// without a head row.
    pub head_row_steps: Option<u64>,
}

/// One line of a session listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    /// The session id.
    pub session_id: String,
    /// Its agent.
    pub agent_id: String,
    /// Steps recorded.
    pub step_count: u64,
    /// Timestamp of the first step.
    pub first_step_at: Option<Timestamp>,
    /// Timestamp of the last step.
    pub last_step_at: Option<Timestamp>,
    /// When the session started.
    pub started_at: Timestamp,
    /// Whether it is sealed.
    pub sealed: bool,
}

/// Which sessions a listing returns, and from where. Sessions are listed
/// newest first: by `started_at` descending, then `session_id`
/// descending, so that a page ends at a [`SessionCursor`] and the next
/// page starts strictly after it (keyset pagination: every page costs the
/// same however deep it is).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFilter {
    /// Only this agent's sessions.
    pub agent_id: Option<String>,
    /// Only sessions started at or after this time.
    pub started_from: Option<Timestamp>,
    /// Only sessions started before this time.
    pub started_before: Option<Timestamp>,
    /// Only sessions with at least one step of this kind.
    pub kind: Option<StepKind>,
    /// Only sessions with at least one step recorded as flagged.
    pub flagged: bool,
    /// Only sessions that come after this one in the listing order.
    pub after: Option<SessionCursor>,
}

impl SessionFilter {
    /// Every session of the org.
    pub fn all() -> Self {
        Self::default()
    }

    /// One agent's sessions.
    pub fn agent(agent_id: Option<&str>) -> Self {
        Self {
            agent_id: agent_id.map(str::to_owned),
            ..Self::default()
        }
    }
}

/// Which steps a search returns (every filter given must hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepFilter {
    /// Only this agent's steps.
    pub agent_id: Option<String>,
    /// Only this session's steps.
    pub session_id: Option<String>,
    /// Only steps of this kind.
    pub kind: Option<StepKind>,
    /// Only steps with this status.
    pub status: Option<Status>,
    /// Only steps created at or after this time.
    pub since: Option<Timestamp>,
    /// Only steps created before this time.
    pub until: Option<Timestamp>,
}

impl StepFilter {
    /// Whether a step passes (for results found another way than by the
    /// full-text query, which applies the filter in SQL).
    pub fn admits(&self, step: &cairn_core::record::Step) -> bool {
        self.agent_id.as_ref().is_none_or(|a| *a == step.agent_id)
            && self
                .session_id
                .as_ref()
                .is_none_or(|s| *s == step.session_id)
            && self.kind.is_none_or(|k| k == step.kind)
            && self.status.is_none_or(|s| s == step.status)
            && self.since.is_none_or(|t| step.created_at >= t)
            && self.until.is_none_or(|t| step.created_at < t)
    }
}

/// A place in a session listing: the last session of a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCursor {
    /// When that session started.
    pub started_at: Timestamp,
    /// Its id.
    pub session_id: String,
}

impl SessionCursor {
    /// The cursor after `summary`.
    pub fn after(summary: &SessionSummary) -> Self {
        Self {
            started_at: summary.started_at,
            session_id: summary.session_id.clone(),
        }
    }
}

/// A step with its position in the org log.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredStep {
    /// Position in the org log.
    pub seq: u64,
    /// When the server logged it.
    pub logged_at: Timestamp,
    /// The record.
    pub record: StepRecord,
}

/// Where a step stands in its session's audit trail
/// ([`crate::LedgerStore::turn_places_at`]): its turn and its number
/// within the turn, without the step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnPlace {
    /// Position in the org log.
    pub seq: u64,
    /// The turn id (`None` for a step recorded outside any turn).
    pub turn_id: Option<String>,
    /// Its number within the turn, if it was given one.
    pub turn_step: Option<u64>,
}

/// One entry of an org log as the store holds it: its position, the leaf
/// hash stored for it (which proofs are served from), and the record, or
/// why its row could not be read as one (a verifier reports that as a
/// malformed record at this position; other readers as corruption).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEntry {
    /// Position in the org log.
    pub seq: u64,
    /// The stored leaf hash.
    pub leaf: Hash,
    /// The entry.
    pub entry: Result<LogEntry, String>,
    /// For a step, the row's session number and the position of the step
    /// before it in its session (`sid`, `prev_seq`): the columns readers
    /// walk a session by, which verification checks against the log.
    pub chain_link: Option<(i64, Option<u64>)>,
}

/// A `session_heads` row of one of an org's sessions (derived state that
/// readers start a session's walk from and analyst SQL counts steps by),
/// as verification compares it with the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionHeadRow {
    /// The session's row number.
    pub sid: i64,
    /// The session's id, from its `sessions` row.
    pub session_id: String,
    /// Where its first step is in the org log, as the row says (`None`
    /// where the column does not hold an integer: SQLite keeps any type).
    pub first_seq: Option<i64>,
    /// Where its last step is, as the row says.
    pub last_seq: Option<i64>,
    /// Its last step's index, as the row says.
    pub last_index: Option<i64>,
}

/// A `session_kinds` row of one of an org's sessions (derived state that
/// session listings filter by kind with), as verification compares it
/// with the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionKindRow {
    /// The session's row number.
    pub sid: i64,
    /// The session's id, from its `sessions` row.
    pub session_id: String,
    /// The kind the row says the session has a step of (`None` where the
    /// column does not hold UTF-8 text).
    pub kind: Option<String>,
}
