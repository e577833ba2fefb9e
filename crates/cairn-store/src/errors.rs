//! Why a write was refused, why the store failed, and why an import did
//! not happen: the errors every backend and surface report.

use cairn_core::Timestamp;
use cairn_core::record::RecordError;

/// Why one write was refused. Refusals write nothing; other writes of the
/// same batch are unaffected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// A field breaks a record rule.
    #[error(transparent)]
    Invalid(#[from] RecordError),
    /// The session was sealed; nothing more can be appended.
    #[error(
        "session {session_id} is sealed: nothing can be appended after its seal, and it cannot be sealed again"
    )]
    Sealed {
        /// The session.
        session_id: String,
    },
    /// The session does not exist.
    #[error("session {session_id} does not exist")]
    UnknownSession {
        /// The session.
        session_id: String,
    },
    /// The session already exists.
    #[error(
        "session {session_id} already exists (what a session starts with, its agent, profile, predecessor and full_consent, is fixed in its genesis when it starts: start a session explicitly before its first step, or start another)"
    )]
    SessionExists {
        /// The session.
        session_id: String,
    },
    /// The writer expected another index (someone else appended first).
    #[error("step index {given} is not the session's next index {expected}")]
    IndexConflict {
        /// The next index.
        expected: u64,
        /// The index the writer gave.
        given: u64,
    },
    /// A step gives a `turn_step` that another step of its turn (stored,
    /// or earlier in the same write) already holds: a number names one
    /// step of a turn.
    #[error(
        "turn_step {turn_step} of turn {turn_id} in session {session_id} is already another step's (stored, or earlier in this write): give each step of a turn its own number, or leave turn_step out (a turn request then numbers the step; elsewhere it takes none)"
    )]
    TurnStepTaken {
        /// The session.
        session_id: String,
        /// The turn.
        turn_id: String,
        /// The number given.
        turn_step: u64,
    },
    /// The step's agent is not the session's agent.
    #[error(
        "session {session_id} belongs to agent {session_agent}, not {step_agent}{}",
        hashed_hint(session_agent, step_agent)
    )]
    AgentMismatch {
        /// The session.
        session_id: String,
        /// Its agent.
        session_agent: String,
        /// The step's agent.
        step_agent: String,
    },
    /// The trace id is already used in this org.
    #[error("trace id {trace_id} already exists")]
    DuplicateTraceId {
        /// The trace id.
        trace_id: String,
    },
    /// A signed step must fix its index, timestamp, trace id and seed.
    #[error("a signed step must carry its own trace_id, step_index, created_at and seed")]
    SignedStepIncomplete,
    /// The agent signature does not verify, or its key is not registered
    /// for this agent.
    #[error("bad agent signature: {0}")]
    BadSignature(String),
    /// The org was imported from another server and is read-only here.
    #[error("org {org_id} is a read-only mirror imported from another server")]
    ReadOnlyOrg {
        /// The org.
        org_id: String,
    },
    /// The step's payload was already erased.
    #[error("step {trace_id} is already erased")]
    AlreadyErased {
        /// The step.
        trace_id: String,
    },
    /// No step with this trace id.
    #[error("step {trace_id} does not exist")]
    UnknownStep {
        /// The step.
        trace_id: String,
    },
    /// The server cannot take the write now (no entropy source, ...).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Sealing a session with no steps.
    #[error("session {session_id} has no steps to seal")]
    NothingToSeal {
        /// The session.
        session_id: String,
    },
    /// Sealing a strict (or proof-grade) session whose last step is not a
    /// reflection.
    #[error(
        "session {session_id} must end with a reflection before it is sealed: otherwise the task's own account of what it did is outside the Merkle root"
    )]
    ReflectionRequired {
        /// The session.
        session_id: String,
    },
    /// Reviewing a step that is not flagged.
    #[error("step {trace_id} is not flagged for review")]
    NotFlagged {
        /// The step.
        trace_id: String,
    },
    /// A link names a record that does not exist (or is of another type).
    #[error("links.{link}: {id} is not {expected} of this org")]
    UnknownLink {
        /// The link's name.
        link: String,
        /// The id it gives.
        id: String,
        /// What it must name (`a step`, `an audit event`).
        expected: String,
    },
    /// The predecessor of a new session is not a sealed session of the
    /// org, or the hash and id given disagree.
    #[error("predecessor: {0}")]
    BadPredecessor(String),
    /// The id is already used by a record of this org.
    #[error("id {id} is already used in this org")]
    DuplicateId {
        /// The id.
        id: String,
    },
    /// A field of the request is invalid (empty, too long).
    #[error("{0}")]
    InvalidRequest(String),
    /// One member of the request is refused for what the ledger holds
    /// or what the rest of the request says (a turn's step naming
    /// another session or turn, a turn numbered to its end): answered
    /// with that member as the error's field.
    #[error("{message}")]
    InvalidMember {
        /// The member, as the request names it (`session_id`, `turn_id`).
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The key id is registered for another agent: a key speaks for one
    /// agent for good.
    #[error("key {key_id} is registered for agent {agent_id}; a key speaks for one agent only")]
    KeyConflict {
        /// The key.
        key_id: String,
        /// The agent it is registered for.
        agent_id: String,
    },
    /// The org's log registers as many keys as the store allows
    /// (`CAIRN_MAX_AGENT_KEYS`; every verifier of the org holds them all),
    /// or as many as it allows to others than the org's admins (all but
    /// the last tenth, rounded up).
    #[error("{}", too_many_keys(*held, *bound, *admins_only, *rotation))]
    TooManyKeys {
        /// Keys the org's log registers.
        held: u64,
        /// The server's bound.
        bound: u64,
        /// Refused because the last tenth of the bound is left to admins.
        admins_only: bool,
        /// A rotation was refused (its old key stays live).
        rotation: bool,
    },
    /// The key was revoked.
    #[error("key {key_id} was revoked at seq {seq}; register a new key")]
    KeyRevoked {
        /// The key.
        key_id: String,
        /// Position of its revocation.
        seq: u64,
    },
    /// No such key is registered for the agent.
    #[error("key {key_id} is not registered for agent {agent_id}")]
    UnknownKey {
        /// The key.
        key_id: String,
        /// The agent.
        agent_id: String,
    },
    /// A writer's `created_at` lies further from the server's clock than
    /// the session allows.
    #[error(
        "created_at {created_at} is {skew_s} s from the server's clock ({logged_at}); session {session_id} allows {max_s} s: leave created_at out to use the server's time"
    )]
    ClockSkew {
        /// The session.
        session_id: String,
        /// The time given.
        created_at: Timestamp,
        /// The server's time.
        logged_at: Timestamp,
        /// The distance, in whole seconds.
        skew_s: u64,
        /// The session's allowance.
        max_s: u64,
    },
    /// A writer's `created_at` is before the session's previous step.
    #[error(
        "created_at {created_at} is before the previous step of session {session_id} ({previous}): time may not run backwards in a session"
    )]
    TimeRegression {
        /// The session.
        session_id: String,
        /// The time given.
        created_at: Timestamp,
        /// The previous step's time.
        previous: Timestamp,
    },
    /// A step of an all-or-nothing write ([`WriteRequest::Steps`](crate::WriteRequest::Steps)) was
    /// refused, so none of them was written.
    #[error(
        "step {index} (counting from 0) of {count} was refused, so none was written: {refusal}"
    )]
    StepOfMany {
        /// Position of the refused step in the request.
        index: usize,
        /// Steps in the request.
        count: usize,
        /// Why that step was refused.
        refusal: Box<Refusal>,
    },
}

/// A storage failure (I/O, database, corrupt state). Unlike a [`Refusal`],
/// it fails the whole batch: nothing of it was acknowledged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database failed.
    #[error("database error while {context}: {source}")]
    Database {
        /// What the store was doing.
        context: String,
        /// The driver's error.
        #[source]
        source: rusqlite::Error,
    },
    /// PostgreSQL failed (connection, query, constraint).
    #[error("PostgreSQL error while {context}: {source}")]
    Postgres {
        /// What the store was doing.
        context: String,
        /// The driver's error.
        #[source]
        source: postgres::Error,
    },
    /// A file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the store was doing.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The stored data contradicts itself (for example a row that does not
    /// parse); verification says more.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// The orgs table gives one org name to two orgs (its unique key
    /// removed): one log would be read for the other. Verification turns
    /// it into a failed verdict; everything else refuses.
    #[error("corrupt store: the orgs table names org {0} more than once")]
    RepeatedOrgName(String),
    /// The server key file is invalid.
    #[error("server key: {0}")]
    Key(String),
    /// The sequencer is gone (the ledger was closed).
    #[error("the ledger is closed")]
    Closed,
    /// What was asked for is not in the store (an unknown org, a proof
    /// beyond the log's size).
    #[error("not found: {0}")]
    NotFound(String),
    /// Another process holds what this one needs (the data directory's
    /// sequencer lock).
    #[error("{0}")]
    Busy(String),
    /// The store was opened to read only.
    #[error("{0}")]
    ReadOnly(String),
}

impl StoreError {
    /// Whether PostgreSQL refused the text or number a statement was given
    /// (class 22, data exception: a NUL byte in text, a value out of
    /// range): the request's fault, answered as a bad request, not as a
    /// storage failure.
    pub fn is_data_exception(&self) -> bool {
        self.sqlstate_class() == Some("22")
    }

    /// The class of PostgreSQL's SQLSTATE (its first two characters) when
    /// the database refused a statement.
    fn sqlstate_class(&self) -> Option<&str> {
        match self {
            StoreError::Postgres { source, .. } => source.as_db_error()?.code().code().get(..2),
            _ => None,
        }
    }

    /// Whether the database refused a statement over the data it was
    /// given (PostgreSQL's classes 22, data exception, such as a NUL byte
    /// in text; 23, integrity constraint violation; 54, program limit
    /// exceeded; SQLite's constraint and too-big errors), which one
    /// request of a batch can cause, rather than failing itself (a lost
    /// connection, a full disk, a lock): the sequencer then tries the
    /// batch's parts on their own ([`crate::Ledger`]), so that one
    /// request's bytes fail no one else's write.
    pub fn is_refused_data(&self) -> bool {
        match self {
            StoreError::Postgres { .. } => {
                matches!(self.sqlstate_class(), Some("22" | "23" | "54"))
            }
            StoreError::Database { source, .. } => matches!(
                source.sqlite_error_code(),
                Some(rusqlite::ErrorCode::ConstraintViolation | rusqlite::ErrorCode::TooBig)
            ),
            _ => false,
        }
    }
}

/// A helper to attach context to database errors.
pub(crate) trait DbContext<T> {
    fn context(self, what: &str) -> Result<T, StoreError>;
}

impl<T> DbContext<T> for Result<T, rusqlite::Error> {
    fn context(self, what: &str) -> Result<T, StoreError> {
        self.map_err(|source| StoreError::Database {
            context: what.to_owned(),
            source,
        })
    }
}

impl<T> DbContext<T> for Result<T, postgres::Error> {
    fn context(self, what: &str) -> Result<T, StoreError> {
        self.map_err(|source| StoreError::Postgres {
            context: what.to_owned(),
            source,
        })
    }
}

/// Why an import did not happen. Nothing was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The bundle cannot be imported (partial, wrong org, org exists).
    #[error("{0}")]
    Refused(String),
    /// An entry of the bundle does not decode.
    #[error("bundle entry {index}: {reason}")]
    BadEntry {
        /// 0-based entry number.
        index: u64,
        /// What is wrong.
        reason: String,
    },
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The message of [`Refusal::TooManyKeys`].
fn too_many_keys(held: u64, bound: u64, admins_only: bool, rotation: bool) -> String {
    let keys = if held == 1 { "key" } else { "keys" };
    let why = if admins_only {
        format!(
            "this org's log registers {held} agent {keys}; the server allows {bound}, and keeps the last tenth (at least one) for the org's admins (so that a key registering in a loop cannot leave them unable to rotate a leaked key): ask an admin"
        )
    } else {
        format!(
            "this org's log registers {held} agent {keys}, and the server allows {bound} (revoked keys count: verifiers keep them to check what they signed); the server's operator can raise it (CAIRN_MAX_AGENT_KEYS, --max-agent-keys)"
        )
    };
    if rotation {
        format!(
            "{why}; nothing was written: the old key is still live, and revoking it alone is allowed"
        )
    } else {
        why
    }
}

/// For a step naming the agent whose hash is its session's agent (a
/// session started with `hash_agent_id`): what to send.
fn hashed_hint(session_agent: &str, step_agent: &str) -> &'static str {
    if cairn_core::record::hashed_agent_id(step_agent) == session_agent {
        " (the session records the hash of this agent id: send hash_agent_id: true (CLI: --hash-agent-id) with each of its steps, as when it started)"
    } else {
        ""
    }
}
