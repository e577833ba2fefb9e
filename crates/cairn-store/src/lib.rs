//! # cairn-store
//!
//! Where Cairn's records live: the [`LedgerStore`] trait, the group-commit
//! group-commit sequencer in front of it ([`Ledger`]), the embedded SQLite backend
//! ([`SqliteStore`]), the server key file, and the operations that work on a
//! whole store (export to a bundle, import from one, verify).
//!
//! ```text
//!  many writers ──▶ Ledger::append ──▶ Sequencer (one thread, batches) ──▶ LedgerStore::append_batch
//!                                            one transaction, one fsync per batch ◀──┘
//! ```
//!
//! A write is acknowledged only after the transaction holding it has
//! committed with `synchronous=FULL`, so an acknowledged record survives a
//! crash. The backend does its own sequencing (assigning step indexes and
//! log sequence numbers), because that is where backends differ: SQLite
//! has one writer and keeps chain heads in memory, PostgreSQL (next) locks
//! per org. The conformance suite in `tests/it/conformance.rs` is written
//! against the trait and runs unchanged on every backend.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod analyst;
mod auth;
pub mod background;
mod dry_run;
pub mod embed;
mod engine;
mod external_key;
pub mod fulltext;
mod keys;
mod listing;
pub mod ops;
pub mod pg;
#[cfg(feature = "model")]
pub mod sentence_model;
mod sequencer;
mod sqlite;
mod vector_index;
pub mod witness_state;

pub use auth::{ApiKey, Role, token_hash};
pub use external_key::command_server_key;
pub use keys::{ServerKey, load_or_create_key, load_or_create_key_file, load_or_create_server_key};
pub use sequencer::{AppendError, Ledger, Pending, SequencerConfig, SequencerStats};
pub use sqlite::{DB_FILE, FULLTEXT_FILE, SqliteOptions, SqliteStore};

use cairn_core::Hash;
use cairn_core::Timestamp;
use cairn_core::commit::{AgentSignature, StepRecord};
use cairn_core::ed25519_dalek::VerifyingKey;
use cairn_core::kind::StepKind;
use cairn_core::log::{LogEntry, SealRecord};
use cairn_core::record::{Links, Profile, RecordError, SessionHeader, Status};

/// The current time from the system clock (the core never reads a clock;
/// this crate and the binary do, through this one function).
pub fn now() -> Timestamp {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    i64::try_from(micros)
        .ok()
        .and_then(Timestamp::from_micros)
        .unwrap_or_default()
}

/// A step as a writer submits it: the fields it chooses. The store assigns
/// the rest (trace id, index, timestamp, seed) unless the writer signs the
/// step, in which case it must fix them itself (see `docs/FORMAT.md` 7.3).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewStep {
    /// The org.
    pub org_id: String,
    /// The session; created on first use if it does not exist.
    pub session_id: String,
    /// The agent writing.
    pub agent_id: String,
    /// The kind, in any seed's spelling.
    pub kind_label: String,
    /// Reasoning text.
    pub content: Option<String>,
    /// Input JSON.
    pub input: Option<serde_json::Value>,
    /// Output JSON.
    pub output: Option<serde_json::Value>,
    /// Confidence 0..1.
    pub confidence: Option<f64>,
    /// Duration in milliseconds.
    pub duration_ms: Option<u64>,
    /// Tokens used.
    pub token_count: Option<u64>,
    /// Model name.
    pub model: Option<String>,
    /// Free-form metadata.
    pub metadata: Option<serde_json::Value>,
    /// Turn (seed 002).
    pub turn_id: Option<String>,
    /// Position in the turn.
    pub turn_step: Option<u64>,
    /// Task (seed 001).
    pub task_id: Option<String>,
    /// Cross-references.
    pub links: Links,
    /// `ok` or `flagged`.
    pub status: Status,
    /// The trace id; a UUIDv7 is generated when absent.
    pub trace_id: Option<String>,
    /// The timestamp; the store's clock when absent.
    pub created_at: Option<Timestamp>,
    /// The index the writer expects; the append is refused if it is not
    /// the session's next index.
    pub step_index: Option<u64>,
    /// The record seed; drawn by the store when absent.
    pub seed: Option<[u8; 32]>,
    /// The agent's signature over the step digest.
    pub signature: Option<AgentSignature>,
    /// Who is writing (API key id, `cli`): recorded if this step opens the
    /// session.
    pub caller: String,
}

/// A session to open explicitly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSession {
    /// The org.
    pub org_id: String,
    /// The session id.
    pub session_id: String,
    /// The agent running it.
    pub agent_id: String,
    /// Who opened it.
    pub caller: String,
    /// Kind profile.
    pub profile: Profile,
    /// Final chain hash of the session this one continues: it must be the
    /// final hash of a sealed session of the org.
    pub predecessor: Option<Hash>,
    /// The session this one continues, by id (it must be sealed); its
    /// final hash becomes the predecessor hash. If both are given they
    /// must agree.
    pub predecessor_session: Option<String>,
    /// Consent to `full` detail exports.
    pub full_consent: bool,
}

/// A step validated and hashed as far as possible before sequencing: all
/// field commitments but the index's are computed by the submitting thread,
/// so the single sequencer only commits the index, digests and chains.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedStep {
    /// The step; `step_index` is provisional until sequenced.
    pub step: cairn_core::record::Step,
    /// The record seed.
    pub seed: [u8; 32],
    /// Openings derived from the seed.
    pub openings: cairn_core::commit::Openings,
    /// Field commitments for the provisional `step_index`.
    pub commitments: [Hash; cairn_core::commit::FIELD_COUNT],
    /// Whether the writer chose the trace id (then it must be checked for
    /// uniqueness).
    pub trace_id_given: bool,
    /// Whether the writer chose `created_at` (then it must lie within the
    /// session's clock skew of the time the server logs it, and not before
    /// the session's previous step); otherwise it is the server's clock.
    pub created_at_given: bool,
    /// The index the writer expects, if it said.
    pub expected_index: Option<u64>,
    /// The agent's signature.
    pub signature: Option<AgentSignature>,
    /// Who is writing.
    pub caller: String,
    /// Whether seed 000's sampling rule selected this step (and it has
    /// text): it is queued for the background embedder, never embedded on
    /// the write path.
    pub embed: bool,
    /// The full-text document it is indexed by ([`fulltext::document`]).
    pub search_doc: Option<String>,
}

/// Validates a step and computes everything that does not depend on its
/// position: trace id, timestamp, seed, salts, all commitments but the
/// index's, and whether `embedding_sample_rate` selects it for embedding.
pub fn prepare_step(
    input: NewStep,
    limits: &cairn_core::record::Limits,
    embedding_sample_rate: f64,
) -> Result<PreparedStep, Refusal> {
    if input.signature.is_some()
        && (input.trace_id.is_none()
            || input.created_at.is_none()
            || input.step_index.is_none()
            || input.seed.is_none())
    {
        return Err(Refusal::SignedStepIncomplete);
    }
    let trace_id_given = input.trace_id.is_some();
    let created_at_given = input.created_at.is_some();
    let trace_id = input
        .trace_id
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let created_at = input.created_at.unwrap_or_else(now);
    let mut step = cairn_core::record::Step::new(
        trace_id,
        input.org_id,
        input.agent_id,
        input.session_id,
        input.step_index.unwrap_or(0),
        &input.kind_label,
        created_at,
    )?;
    step.content = input.content;
    step.input = input.input;
    step.output = input.output;
    step.confidence = input.confidence;
    step.duration_ms = input.duration_ms;
    step.token_count = input.token_count;
    step.model = input.model;
    step.metadata = input.metadata;
    step.turn_id = input.turn_id;
    step.turn_step = input.turn_step;
    step.task_id = input.task_id;
    step.links = input.links;
    step.status = input.status;
    // A signed step declares its signer inside the digest, so that the
    // signature cannot later be stripped unnoticed.
    step.signer_key_id = input.signature.as_ref().map(|sig| sig.key_id.clone());
    step.validate(limits)?;
    let seed = match input.seed {
        Some(seed) => seed,
        None => {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed)
                .map_err(|e| Refusal::Unavailable(format!("no entropy source: {e}")))?;
            seed
        }
    };
    let openings = cairn_core::commit::Openings::from_seed(&seed);
    let commitments = cairn_core::commit::field_commitments(&step, &openings);
    let search_doc = fulltext::document(&step);
    let embed = search_doc.is_some()
        && embed::should_embed(step.kind, &step.trace_id, embedding_sample_rate);
    Ok(PreparedStep {
        step,
        seed,
        openings,
        commitments,
        trace_id_given,
        created_at_given,
        expected_index: input.step_index,
        signature: input.signature,
        caller: input.caller,
        embed,
        search_doc,
    })
}

/// The embedding queue's length.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmbeddingBacklog {
    /// Steps waiting to be embedded.
    pub waiting: u64,
    /// Steps the embedder refused [`embed::MAX_ATTEMPTS`] times, left out
    /// until `cairn reindex`.
    pub parked: u64,
}

/// A step waiting in the embedding queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEmbedding {
    /// The row's id (org and position; opaque to callers).
    pub id: i64,
    /// The text to embed ([`embed::text_of`]); `None` if the step was
    /// erased or has no text.
    pub text: Option<String>,
}

/// One write for the sequencer.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteRequest {
    /// Append a step.
    Step(Box<NewStep>),
    /// Append several steps of one org as one unit (a seed-002 turn): all
    /// are written, in order, or none is, and the refusal
    /// ([`Refusal::StepOfMany`]) names the first step refused.
    Steps(Vec<NewStep>),
    /// Append a step already prepared with [`prepare_step`] (the
    /// [`Ledger`] does this in the submitting thread).
    Prepared(Box<PreparedStep>),
    /// Open a session.
    StartSession(NewSession),
    /// Seal a session: sign its Merkle root; nothing can be appended after.
    /// A strict session's last step must be a reflection (seed 001: a
    /// reflection closes the task); `require_reflection` asks the same of
    /// any session (a proof-grade `merkle_finalize`).
    Seal {
        /// The org.
        org_id: String,
        /// The session.
        session_id: String,
        /// Refuse unless the last step is a reflection.
        require_reflection: bool,
    },
    /// Record a reviewer's decision on a flagged step (seed 003's review
    /// queue), as a `review` record of the org log.
    Review {
        /// The org.
        org_id: String,
        /// The reviewed step.
        trace_id: String,
        /// Approve, reject or escalate.
        decision: cairn_core::log::ReviewDecision,
        /// Who reviewed (an API key id, a local user).
        reviewer: String,
        /// The reviewer's note.
        note: Option<String>,
    },
    /// Import a seed-004 complete trace: its signature is checked against
    /// the registered key of its (hashed) agent, the trace is recorded whole
    /// as a `signed-trace` record, and each component becomes a step of a
    /// new session (`session_id`, or the trace id).
    ImportTrace {
        /// The org.
        org_id: String,
        /// The session to create; the trace id when absent.
        session_id: Option<String>,
        /// The trace in seed 004's format.
        trace: serde_json::Value,
        /// Who imports it.
        caller: String,
    },
    /// Record a per-tool-call audit event (seed 001) that steps can link to
    /// (`links.audit_event`).
    AuditEvent {
        /// The org.
        org_id: String,
        /// The event's id; a UUIDv7 when absent. Unique in the org.
        event_id: Option<String>,
        /// The session it belongs to, if any (it must exist).
        session_id: Option<String>,
        /// What happened: a tool name, an action.
        action: String,
        /// Details (any JSON).
        detail: Option<serde_json::Value>,
    },
    /// Register an agent's Ed25519 public key. A key id belongs to one
    /// agent for good: registering it again for the same agent returns the
    /// existing registration, for another agent (or after its revocation)
    /// is refused.
    RegisterKey {
        /// The org.
        org_id: String,
        /// The agent.
        agent_id: String,
        /// The key.
        public_key: VerifyingKey,
    },
    /// Add or retire a log key (`docs/FORMAT.md` 7.10): a `log-key`
    /// record whose note is signed by the server's current key. The key
    /// must be named with the server's name; an `add` of the current key
    /// itself is refused (another key must vouch for it).
    LogKey {
        /// The org.
        org_id: String,
        /// Add or retire.
        action: cairn_core::log::LogKeyAction,
        /// The key.
        key: cairn_core::note::NoteVerifier,
    },
    /// Revoke an agent key: from this record on it signs nothing the log
    /// accepts; what it signed before stays valid.
    RevokeKey {
        /// The org.
        org_id: String,
        /// The agent the key is registered for.
        agent_id: String,
        /// The key's id (`agent-` + 12 hex digits).
        key_id: String,
        /// Why (recorded).
        reason: String,
    },
    /// Rotate an agent key: revoke `old_key_id` and register `public_key`,
    /// in one step (both records or neither).
    RotateKey {
        /// The org.
        org_id: String,
        /// The agent.
        agent_id: String,
        /// The key being replaced.
        old_key_id: String,
        /// The new key.
        public_key: VerifyingKey,
    },
    /// Sign a checkpoint of the org's log now, if it grew since the last.
    Checkpoint {
        /// The org.
        org_id: String,
    },
    /// Erase a step's payload (content, input, output, metadata): the
    /// values are replaced by their commitments, hashes stay, and an
    /// `erasure` record is appended (a GDPR request, for example).
    Erase {
        /// The org.
        org_id: String,
        /// The step.
        trace_id: String,
        /// Why (recorded).
        reason: String,
        /// Who asked (recorded).
        actor: String,
    },
    /// Retention: erase the payload of every step of every session whose
    /// last step is older than `older_than`, recording each erasure.
    Retention {
        /// The org.
        org_id: String,
        /// The cutoff.
        older_than: Timestamp,
    },
}

/// What a successful write produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Written {
    /// The steps of a [`WriteRequest::Steps`], each a [`Written::Step`],
    /// in order.
    Steps(Vec<Written>),
    /// A step was appended.
    Step {
        /// Its position in the org log.
        seq: u64,
        /// Its trace id.
        trace_id: String,
        /// Its index in the session.
        step_index: u64,
        /// Its chain hash.
        hash: Hash,
        /// Its timestamp.
        created_at: Timestamp,
        /// Whether this step opened the session.
        session_created: bool,
    },
    /// A session was opened.
    Session {
        /// Position of its `session-start` record.
        seq: u64,
        /// Its genesis hash.
        genesis: Hash,
    },
    /// A session was sealed.
    Sealed {
        /// Position of the seal record.
        seq: u64,
        /// The seal.
        seal: SealRecord,
    },
    /// A key was registered.
    KeyRegistered {
        /// Position of the registration.
        seq: u64,
        /// Its key id (`agent-` + 12 hex digits).
        key_id: String,
    },
    /// A key was revoked (and, for a rotation, its successor registered).
    KeyRevoked {
        /// Position of the revocation.
        seq: u64,
        /// The revoked key.
        key_id: String,
        /// For a rotation: the new key's registration (position, key id).
        successor: Option<(u64, String)>,
    },
    /// A checkpoint was signed (or the latest one returned, if the log did
    /// not grow).
    Checkpoint(StoredCheckpoint),
    /// Steps were erased: the seqs of the erasure records.
    Erased {
        /// One erasure record per erased step.
        seqs: Vec<u64>,
    },
    /// A review was recorded.
    Reviewed {
        /// Position of the review record.
        seq: u64,
        /// The record.
        review: cairn_core::log::ReviewRecord,
    },
    /// A seed-004 trace was imported.
    TraceImported {
        /// Position of its `signed-trace` record.
        seq: u64,
        /// The session holding its components.
        session_id: String,
        /// Each component's step: position and trace id.
        steps: Vec<(u64, String)>,
    },
    /// An audit event was recorded.
    AuditEvent {
        /// Position of the event record.
        seq: u64,
        /// Its id.
        event_id: String,
    },
    /// A `log-key` record was written.
    LogKey {
        /// Its position.
        seq: u64,
    },
}

/// Why one write was refused. Refusals write nothing; other writes of the
/// same batch are unaffected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// A field breaks a record rule.
    #[error(transparent)]
    Invalid(#[from] RecordError),
    /// The session was sealed; nothing more can be appended.
    #[error("session {session_id} is sealed; nothing can be appended after the seal")]
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
    #[error("session {session_id} already exists")]
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
    /// The step's agent is not the session's agent.
    #[error("session {session_id} belongs to agent {session_agent}, not {step_agent}")]
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
    /// The key id is registered for another agent: a key speaks for one
    /// agent for good.
    #[error("key {key_id} is registered for agent {agent_id}; a key speaks for one agent only")]
    KeyConflict {
        /// The key.
        key_id: String,
        /// The agent it is registered for.
        agent_id: String,
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
    /// A step of an all-or-nothing write ([`WriteRequest::Steps`]) was
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
}

/// Where records live. Implementations sequence natively (see the crate
/// docs); every method's contract is checked by the conformance suite.
pub trait LedgerStore: Send + Sync + 'static {
    /// Sequences and durably writes a batch, in order. Returns one outcome
    /// per request once the batch is durable. `Err` means nothing of the
    /// batch was written.
    fn append_batch(
        &self,
        batch: &[WriteRequest],
    ) -> Result<Vec<Result<Written, Refusal>>, StoreError>;

    /// Periodic work between batches: sign a checkpoint for every org
    /// whose log grew since its last one and whose last one is older than
    /// the checkpoint interval.
    fn maintain(&self) -> Result<(), StoreError>;

    /// The orgs that have a log.
    fn orgs(&self) -> Result<Vec<String>, StoreError>;

    /// Number of entries in an org's log (0 for an unknown org).
    fn log_size(&self, org_id: &str) -> Result<u64, StoreError>;

    /// Streams log entries `from..to` (clamped to the log) in seq order,
    /// each as stored (a row that does not parse is handed over as such,
    /// not as an error). `visit` returns false to stop early.
    fn read_log(
        &self,
        org_id: &str,
        from: u64,
        to: u64,
        visit: &mut dyn FnMut(StoredEntry) -> bool,
    ) -> Result<(), StoreError>;

    /// A session's header, counts, head and seal.
    fn session(&self, org_id: &str, session_id: &str) -> Result<Option<SessionInfo>, StoreError>;

    /// Streams a session's steps in index order. `visit` returns false to
    /// stop early.
    fn read_session(
        &self,
        org_id: &str,
        session_id: &str,
        visit: &mut dyn FnMut(StoredStep) -> bool,
    ) -> Result<(), StoreError>;

    /// A step by trace id.
    fn step_by_trace(&self, org_id: &str, trace_id: &str)
    -> Result<Option<StoredStep>, StoreError>;

    /// Sessions that pass `filter`, newest first (see [`SessionFilter`]),
    /// at most `limit`.
    fn list_sessions(
        &self,
        org_id: &str,
        filter: &SessionFilter,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StoreError>;

    /// The latest checkpoint of an org's log.
    fn latest_checkpoint(&self, org_id: &str) -> Result<Option<StoredCheckpoint>, StoreError>;

    /// Every stored checkpoint of an org's log, oldest first.
    fn checkpoints(&self, org_id: &str) -> Result<Vec<StoredCheckpoint>, StoreError>;

    /// Inclusion proof of entry `seq` in the tree of `size` entries.
    fn inclusion_proof(&self, org_id: &str, seq: u64, size: u64) -> Result<Vec<Hash>, StoreError>;

    /// Inclusion proofs of several entries in the tree of `size` entries,
    /// in the order of `seqs` (an export's: the backends read the subtrees
    /// the proofs share once).
    fn inclusion_proofs(
        &self,
        org_id: &str,
        seqs: &[u64],
        size: u64,
    ) -> Result<Vec<Vec<Hash>>, StoreError> {
        seqs.iter()
            .map(|&seq| self.inclusion_proof(org_id, seq, size))
            .collect()
    }

    /// Consistency proof between two sizes of the log.
    fn consistency_proof(
        &self,
        org_id: &str,
        old_size: u64,
        new_size: u64,
    ) -> Result<Vec<Hash>, StoreError>;

    /// Root of the log at `size`.
    fn root_at(&self, org_id: &str, size: u64) -> Result<Hash, StoreError>;

    /// Every key the org's log may be signed with (`docs/FORMAT.md` 7.10):
    /// for the server's own orgs, its first key and every key added since
    /// (retired ones included: they signed older history); for an
    /// imported log, its server's key. Read from the database on each
    /// call, so that every server of a fleet sees a rotation at once.
    fn log_keys(&self, org_id: &str) -> Result<Vec<cairn_core::note::NoteVerifier>, StoreError>;

    /// Records in the store's metadata that `key` was added or retired as
    /// a log key (after the `log-key` records were written to every org):
    /// a server may then start with an added key, and refuses to start
    /// with a retired one.
    fn record_log_key(
        &self,
        action: cairn_core::log::LogKeyAction,
        key: &cairn_core::note::NoteVerifier,
    ) -> Result<(), StoreError>;

    /// The hashes of a C2SP tlog-tiles hash tile of an org's log
    /// ([`cairn_core::tiles::tile_hashes`]); `NotFound` when the log does
    /// not yet hold every subtree the tile names.
    fn hash_tile(
        &self,
        org_id: &str,
        tile: &cairn_core::tiles::Tile,
    ) -> Result<Vec<Hash>, StoreError>;

    /// The record limits steps are validated against.
    fn limits(&self) -> cairn_core::record::Limits;

    /// Seed 000's embedding sample rate (0 to 1) applied at ingest.
    fn embedding_sample_rate(&self) -> f64;

    /// The `limit` steps of an org most similar to `query`, among those
    /// whose vector the embedder `embedder` (an [`embed::Embedder::id`])
    /// made, best first, as `(seq, similarity)`.
    fn semantic_search(
        &self,
        org_id: &str,
        embedder: &str,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<(u64, f32)>, StoreError>;

    /// Up to `limit` queued steps to embed, oldest first across orgs and
    /// parked ones left out, each with its text (`None` if it was erased or
    /// has none: it only leaves the queue). On PostgreSQL each is leased to
    /// this caller for a while so that servers sharing a database do not
    /// embed the same step.
    fn claim_embeddings(&self, limit: usize) -> Result<Vec<PendingEmbedding>, StoreError>;

    /// Stores vectors made by the embedder `embedder` and takes their steps
    /// off the queue: a step erased meanwhile gets none, every other gets
    /// its vector (replacing an older one) and `has_embedding` set. Nothing
    /// is stored (every step stays queued) if the store's chosen embedder is
    /// another; on PostgreSQL a step whose row another transaction holds
    /// stays queued. Returns how many left the queue.
    fn store_embeddings(
        &self,
        embedder: &str,
        done: &[(PendingEmbedding, Option<Vec<f32>>)],
    ) -> Result<usize, StoreError>;

    /// Gives claimed steps back to the queue at once instead of when their
    /// lease expires; with `failed`, counts a failed attempt of each (the
    /// embedder refused that step alone): after
    /// [`embed::MAX_ATTEMPTS`] a step is parked until `cairn reindex`.
    fn release_embeddings(&self, ids: &[i64], failed: bool) -> Result<(), StoreError>;

    /// Whether this store was opened to read beside the process that
    /// sequences it (then it writes nothing, derived tables included).
    fn is_read_only(&self) -> bool {
        false
    }

    /// Steps in the embedding queue: waiting, and parked.
    fn embedding_backlog(&self) -> Result<EmbeddingBacklog, StoreError>;

    /// Queues every step of `org_id` (every org if `None`) that has a
    /// vector or that seed 000's rule selects at this store's rate, to be
    /// embedded again (`cairn reindex`); returns how many were queued.
    fn queue_reindex(&self, org_id: Option<&str>) -> Result<u64, StoreError>;

    /// How many stored vectors each embedder made, by [`embed::Embedder::id`].
    fn vectors_by_embedder(&self) -> Result<Vec<(String, u64)>, StoreError>;

    /// The embedder the store's queue is for (the last `cairn serve` or
    /// `cairn reindex` chose it), by id; `None` before any chose one.
    fn chosen_embedder(&self) -> Result<Option<String>, StoreError>;

    /// Makes `id` the store's embedder; returns the one before. Workers of
    /// another embedder stop taking steps from the queue.
    fn choose_embedder(&self, id: &str) -> Result<Option<String>, StoreError>;

    /// The `limit` steps of an org that match a full-text `query` and
    /// pass `filter`, best first, as `(seq, score)` (a higher score is a
    /// better match; scores compare only within one answer). Erased steps
    /// are never found.
    fn full_text_search(
        &self,
        org_id: &str,
        query: &fulltext::FullTextQuery,
        filter: &StepFilter,
        limit: usize,
    ) -> Result<Vec<(u64, f64)>, StoreError>;

    /// Flagged steps of an org (seed 003's review candidates), oldest first,
    /// from log position `from` on, at most `limit`.
    fn flagged_steps(
        &self,
        org_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<StoredStep>, StoreError>;

    /// Operational records of one type (`review`, `erasure`,
    /// `audit-event`, ...) in log order, from position `from` on, at most
    /// `limit`, with their positions.
    fn op_records(
        &self,
        org_id: &str,
        entry_type: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, cairn_core::log::OpRecord)>, StoreError>;

    /// The operational records that concern one session (its start, seal,
    /// erasures, reviews, audit events, signed trace), in log order with
    /// their positions, found in the log by the session's id.
    fn session_records(
        &self,
        org_id: &str,
        session_id: &str,
    ) -> Result<Vec<(u64, cairn_core::log::OpRecord)>, StoreError>;

    /// The agent key records (registrations and revocations) of an org, or
    /// of one agent, in log order with their positions.
    fn key_records(
        &self,
        org_id: &str,
        agent_id: Option<&str>,
    ) -> Result<Vec<(u64, cairn_core::log::OpRecord)>, StoreError>;

    /// An operational record found by id (an audit event's id, an
    /// imported trace's id), with its position.
    fn op_by_id(
        &self,
        org_id: &str,
        id: &str,
    ) -> Result<Option<(u64, cairn_core::log::OpRecord)>, StoreError>;

    /// An audit event by id, with its position.
    fn audit_event(
        &self,
        org_id: &str,
        event_id: &str,
    ) -> Result<Option<(u64, cairn_core::log::AuditEvent)>, StoreError> {
        Ok(match self.op_by_id(org_id, event_id)? {
            Some((seq, cairn_core::log::OpRecord::AuditEvent(event))) => Some((seq, event)),
            _ => None,
        })
    }

    /// Runs an analyst's read-only SQL over one org's views (see
    /// [`analyst`]): at most `max_rows` rows, the other limits at their
    /// defaults.
    fn analyst_query(
        &self,
        org_id: &str,
        sql: &str,
        max_rows: usize,
    ) -> Result<analyst::AnalystResult, analyst::AnalystError> {
        self.analyst_query_limited(
            org_id,
            sql,
            &analyst::QueryLimits {
                max_rows,
                ..analyst::QueryLimits::default()
            },
        )
    }

    /// Runs an analyst's read-only SQL over one org's views (see
    /// [`analyst`]) within `limits`: rows, time, bytes of each value and of
    /// the answer.
    fn analyst_query_limited(
        &self,
        org_id: &str,
        sql: &str,
        limits: &analyst::QueryLimits,
    ) -> Result<analyst::AnalystResult, analyst::AnalystError>;

    /// Stores a new API key. Keys are not ledger records: they can be
    /// revoked.
    fn put_api_key(&self, key: &ApiKey) -> Result<(), StoreError>;

    /// Stores a witness's cosignature line (C2SP `cosignature/v1`, already
    /// verified by the caller) of an org's checkpoint at `size`. A later
    /// line of the same witness for the same checkpoint replaces the earlier
    /// one (a witness that changed its key cosigns again).
    /// Cosignatures are not ledger records: a verifier checks them itself.
    fn put_cosignature(
        &self,
        org_id: &str,
        size: u64,
        witness: &str,
        line: &str,
    ) -> Result<(), StoreError>;

    /// The cosignature lines stored for an org's checkpoint at `size`, by
    /// witness name.
    fn cosignatures(&self, org_id: &str, size: u64) -> Result<Vec<String>, StoreError>;

    /// The key whose token hashes to `token_hash`, revoked or not.
    fn api_key_by_hash(&self, token_hash: &Hash) -> Result<Option<ApiKey>, StoreError>;

    /// The keys of an org, oldest first.
    fn api_keys(&self, org_id: &str) -> Result<Vec<ApiKey>, StoreError>;

    /// Revokes a key of an org; false if there is no such key.
    fn revoke_api_key(&self, org_id: &str, key_id: &str, at: Timestamp)
    -> Result<bool, StoreError>;

    /// Agent key registrations of an org, in log order.
    fn agent_keys(&self, org_id: &str)
    -> Result<Vec<cairn_core::log::KeyRegistration>, StoreError>;

    /// The name and key that sign an org's checkpoints and seals: the
    /// server's own, or, for an org imported from another server's bundle,
    /// that server's.
    fn log_signer(
        &self,
        org_id: &str,
    ) -> Result<(String, cairn_core::note::NoteVerifier), StoreError>;

    /// Imports a verified complete-log bundle as the log of `org_id`, which
    /// must not exist yet: same seq numbers, hashes and signatures, plus its
    /// checkpoint. `entries` must be the bundle's entries in order (the
    /// caller verified them). Returns the number of entries imported.
    fn import_log(
        &self,
        org_id: &str,
        header: &cairn_core::bundle::BundleHeader,
        checkpoint_note: &str,
        entries: &mut dyn Iterator<Item = Result<LogEntry, String>>,
    ) -> Result<u64, ImportError>;

    /// The server key's public half.
    fn server_key(&self) -> &cairn_core::note::NoteVerifier;

    /// The server key, to sign what the server states (a partial bundle's
    /// selection).
    fn signer(&self) -> &cairn_core::note::NoteSigner;

    /// The server key's name (log origins are `<name>/<org>`).
    fn server_name(&self) -> &str;
}
