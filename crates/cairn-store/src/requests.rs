//! What writers send and what they get back: the step, session and other
//! write requests, their validation and hashing before the queue
//! ([`prepare_step`]), and the outcome of each write.

use crate::{Refusal, StoredCheckpoint, embed, fulltext};
use cairn_core::Hash;
use cairn_core::Timestamp;
use cairn_core::commit::AgentSignature;
use cairn_core::ed25519_dalek::VerifyingKey;
use cairn_core::log::SealRecord;
use cairn_core::record::{Links, Profile, Status};

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

impl NewStep {
    /// What the ledger holds for a step beside the step itself while it is
    /// written: its prepared copy (the record, 22 openings and
    /// commitments, its full-text document) and the sequencer's copies.
    /// About 5 KB for a step of a few words, measured by a review.
    pub const SEQUENCING_MEMORY: usize = 4096;

    /// [`NewStep::approx_memory`] twice (the step and its prepared copy)
    /// and [`NewStep::SEQUENCING_MEMORY`]: what a step the sequencer
    /// prepares (a turn's) holds until it is written.
    pub fn approx_sequenced_memory(&self) -> usize {
        2 * self.approx_memory() + Self::SEQUENCING_MEMORY
    }

    /// A rough estimate of the memory this step holds (its texts, and its
    /// JSON values as [`cairn_core::json::approx_memory`] counts them): a
    /// JSON value of many small parts holds many times its text's size.
    pub fn approx_memory(&self) -> usize {
        let value =
            |v: &Option<serde_json::Value>| v.as_ref().map_or(0, cairn_core::json::approx_memory);
        let text = |t: &Option<String>| t.as_ref().map_or(0, String::len);
        std::mem::size_of::<NewStep>()
            + self.org_id.len()
            + self.session_id.len()
            + self.agent_id.len()
            + self.kind_label.len()
            + text(&self.content)
            + text(&self.model)
            + text(&self.turn_id)
            + text(&self.task_id)
            + text(&self.trace_id)
            + value(&self.input)
            + value(&self.output)
            + value(&self.metadata)
    }

    /// When `refused` is the ledger's refusal of this step as a duplicate
    /// trace id: what the first write answered, if the step recorded under
    /// that id in `store` is this very step ([`Self::recorded_as`]). A lone
    /// write's retry is answered through this (REST, MCP); writes of many
    /// steps through [`crate::answer_retries`], which reads the recorded
    /// steps a chunk at a time. A failed lookup is the store's failure
    /// (try again), not the duplicate refusal: that would tell a client
    /// retrying after a lost answer that its step conflicts with another.
    pub fn retried(
        &self,
        store: &dyn crate::LedgerStore,
        refused: &crate::AppendError,
    ) -> Result<Option<Written>, crate::StoreError> {
        let Some(trace_id) = self
            .trace_id
            .as_deref()
            .filter(|_| crate::may_be_retry(refused))
        else {
            return Ok(None);
        };
        Ok(store
            .step_by_trace(&self.org_id, trace_id)?
            .and_then(|stored| self.recorded_as(&stored)))
    }

    /// What the write of this step answered, if `stored` (the step its
    /// trace id names) is this very step: a write retried after its answer
    /// was lost (a timeout, a dropped connection) is answered as the first
    /// one was, instead of as a duplicate (`duplicate_trace_id`), so that a
    /// client can retry a step that carries its trace id. Every field the
    /// writer chose must be the recorded one (the index, time and seed
    /// too, when it chose them; JSON values as sent: `1` is not `1.0`
    /// here); an erased step's payload is gone, so it never
    /// matches. The answer is the first one's but for `session_created`,
    /// false here (whether that write opened the session is not recorded
    /// with the step).
    pub fn recorded_as(&self, stored: &crate::StoredStep) -> Option<Written> {
        self.recorded_as_numbered(stored, false)
    }

    /// [`Self::recorded_as`], where `numbered_in_turn` says the write
    /// numbered a step that gave no `turn_step` within its turn (a turn's
    /// write, [`crate::WriteRequest::Turn`]): its recorded number is the
    /// one that write chose, not one the step gave.
    pub(crate) fn recorded_as_numbered(
        &self,
        stored: &crate::StoredStep,
        numbered_in_turn: bool,
    ) -> Option<Written> {
        let recorded = &stored.record.step;
        let same = self.trace_id.as_deref() == Some(recorded.trace_id.as_str())
            && !stored.record.erased
            && self.org_id == recorded.org_id
            && self.session_id == recorded.session_id
            && self.agent_id == recorded.agent_id
            && self.kind_label == recorded.kind_label
            && self.content == recorded.content
            && self.input == recorded.input
            && self.output == recorded.output
            && self.confidence.map(f64::to_bits) == recorded.confidence.map(f64::to_bits)
            && self.duration_ms == recorded.duration_ms
            && self.token_count == recorded.token_count
            && self.model == recorded.model
            && self.metadata == recorded.metadata
            && self.turn_id == recorded.turn_id
            && (self.turn_step == recorded.turn_step
                || numbered_in_turn && self.turn_step.is_none() && recorded.turn_step.is_some())
            && self.task_id == recorded.task_id
            && self.links == recorded.links
            && self.status == recorded.status
            && self.step_index.is_none_or(|i| i == recorded.step_index)
            && self.created_at.is_none_or(|t| t == recorded.created_at)
            && self.seed.is_none_or(|seed| {
                cairn_core::commit::Openings::from_seed(&seed) == stored.record.openings
            })
            && self.signature == stored.record.signature;
        same.then(|| Written::Step {
            seq: stored.seq,
            trace_id: recorded.trace_id.clone(),
            step_index: recorded.step_index,
            hash: stored.record.hash,
            created_at: recorded.created_at,
            session_created: false,
        })
    }
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
    /// The agent the caller's key is bound to, if it is: such a key may
    /// continue only that agent's sealed sessions (a sealed session is
    /// continued once, so another agent's would be taken from it).
    pub bound_agent: Option<String>,
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
    /// Whether the writer chose `turn_step` (then no other step of the
    /// turn may hold it); a number the sequencer assigns is past the
    /// turn's highest and needs no check.
    pub turn_step_given: bool,
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
    /// The store's own form of `search_doc`, computed before sequencing
    /// ([`crate::LedgerStore::search_form`]); `None` where the store
    /// indexes the text itself, or when the step was prepared elsewhere
    /// (the store then computes it as it writes the step).
    pub search_form: Option<Vec<u8>>,
}

impl PreparedStep {
    /// The bytes its full-text document and the store's form of it hold
    /// (as allocated), beside the step itself: with
    /// [`NewStep::approx_memory`] for the prepared copy, what a submitted
    /// step holds until it is written.
    pub fn search_bytes(&self) -> usize {
        self.search_doc.as_ref().map_or(0, String::capacity)
            + self.search_form.as_ref().map_or(0, Vec::capacity)
    }
}

/// A link's field name as an error names it.
fn link_field(name: &str) -> &'static str {
    match name {
        "approval_request" => "links.approval_request",
        "audit_event" => "links.audit_event",
        "corrects" => "links.corrects",
        "parent" => "links.parent",
        "policy_decision" => "links.policy_decision",
        "tool_call" => "links.tool_call",
        _ => "links",
    }
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
    // A number within no turn numbers nothing: a writer that gives one
    // means a turn it forgot to name.
    if input.turn_step.is_some() && input.turn_id.is_none() {
        return Err(Refusal::InvalidMember {
            field: "turn_step",
            message:
                "turn_step numbers a step within its turn: give turn_id too, or leave turn_step out"
                    .into(),
        });
    }
    let trace_id_given = input.trace_id.is_some();
    let created_at_given = input.created_at.is_some();
    let trace_id = input.trace_id.unwrap_or_else(new_id);
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
    // No id may be an API key pasted in its place (an ingest rule: the
    // ledger cannot forget it).
    for (field, id) in [
        ("trace_id", Some(&step.trace_id)),
        ("session_id", Some(&step.session_id)),
        ("agent_id", Some(&step.agent_id)),
        ("turn_id", step.turn_id.as_ref()),
        ("task_id", step.task_id.as_ref()),
    ] {
        if let Some(id) = id {
            cairn_core::record::refuse_api_key_id(field, id)?;
        }
    }
    // Nor may a link or the model name, which erasure does not reach.
    for (name, value) in step.links.entries() {
        if let Some(value) = value {
            cairn_core::record::refuse_api_key_id(link_field(name), value)?;
        }
    }
    if let Some(model) = &step.model {
        cairn_core::record::refuse_api_key_id("model", model)?;
    }
    // Ids a URL path names the step or its turn by (an ingest rule).
    cairn_core::record::refuse_dot_segment("trace_id", &step.trace_id)?;
    if let Some(turn) = &step.turn_id {
        cairn_core::record::refuse_dot_segment("turn_id", turn)?;
    }
    let seed = match input.seed {
        Some(seed) => seed,
        None => {
            // One call per step, on purpose: a user-space block of future
            // seeds would be handed out twice by a copy of the process (a
            // fork whose child later gets the parent's id back, a VM or
            // process snapshot restored twice), and two steps sharing a
            // seed share every salt (docs/PERFORMANCE.md, seventeenth
            // session). The kernel's generator is reseeded on VM clones.
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
        turn_step_given: input.turn_step.is_some(),
        created_at_given,
        expected_index: input.step_index,
        signature: input.signature,
        caller: input.caller,
        embed,
        search_doc,
        search_form: None,
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
    /// The steps of one turn of one session (seed 002), all or none as
    /// [`WriteRequest::Steps`]; each names `turn_id` (or is given it).
    /// Each step without a `turn_step` is numbered when it is sequenced:
    /// past the turn's highest number as the log then stands, in order,
    /// skipping the numbers the request's other steps give, so that
    /// requests of one turn written at once, through one server or
    /// several on one PostgreSQL database, never share a number.
    Turn {
        /// The turn.
        turn_id: String,
        /// Its steps, of one session.
        steps: Vec<NewStep>,
    },
    /// Append a step already prepared with [`prepare_step`] (the
    /// [`Ledger`](crate::Ledger) does this in the submitting thread).
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
        /// Asked by an org's admin (or the operator, on the data directory
        /// or database): it may use the last tenth of the org's bound on
        /// keys, which others' registrations leave to admins
        /// ([`crate::Refusal::TooManyKeys`]).
        by_admin: bool,
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
        /// Asked by an org's admin (or the operator, on the data directory
        /// or database): it may use the last tenth of the org's bound on
        /// keys, which others' registrations leave to admins
        /// ([`crate::Refusal::TooManyKeys`]).
        by_admin: bool,
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
        /// One trace-erasure record per signed trace withheld with its
        /// steps (FORMAT.md 8).
        trace_seqs: Vec<u64>,
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

/// A new id for a step, an audit event or a turn that its writer did not
/// name: a UUIDv7 (its first 48 bits the time in milliseconds) whose
/// other 74 bits are all random. `Uuid::now_v7` instead counts up from a
/// random start within each millisecond, one counter for the whole
/// process: two ids a tenant got in one millisecond told it, by their
/// difference, how many ids every other org was given between them.
pub fn new_id() -> String {
    uuid::Uuid::new_v7(uuid::Timestamp::now(uuid::NoContext)).to_string()
}

#[cfg(test)]
mod tests {
    /// Ids made one after another (most within one millisecond) are
    /// version 7 and share no counter: `Uuid::now_v7` counts up within a
    /// millisecond in the 12 bits after the version and the next 30 (of
    /// the 62 after the variant), so nearly every pair of its ids in one
    /// millisecond differs there by one.
    #[test]
    fn new_ids_share_no_counter() {
        let ids: Vec<uuid::Uuid> = (0..2000)
            .map(|_| super::new_id().parse().unwrap())
            .collect();
        let counter = |id: &uuid::Uuid| {
            let bits = id.as_u128();
            ((bits >> 64) & 0xfff) << 30 | ((bits >> 32) & ((1 << 30) - 1))
        };
        let millis = |id: &uuid::Uuid| id.as_u128() >> 80;
        let mut same_millisecond = 0;
        for pair in ids.windows(2) {
            assert_eq!(pair[1].get_version_num(), 7);
            if millis(&pair[0]) == millis(&pair[1]) {
                same_millisecond += 1;
                assert_ne!(
                    counter(&pair[1]),
                    counter(&pair[0]) + 1,
                    "{} then {}",
                    pair[0],
                    pair[1]
                );
            }
        }
        assert!(same_millisecond > 100, "{same_millisecond}");
    }

    /// A document cut to its largest keeps no more than that allocated:
    /// a prepared step holds its document until it is written, and what
    /// it holds is counted as allocated (`search_bytes`).
    #[test]
    fn a_capped_document_gives_back_what_was_cut() {
        let step = super::NewStep {
            org_id: "org".into(),
            session_id: "s".into(),
            agent_id: "agent".into(),
            kind_label: "Observation".into(),
            content: Some("漢字仮名交じり文の検索語句".repeat(20_000)),
            ..super::NewStep::default()
        };
        let limits = cairn_core::record::Limits {
            max_content_bytes: 1 << 20,
            ..cairn_core::record::Limits::default()
        };
        let prepared = super::prepare_step(step, &limits, 0.0).unwrap();
        let doc = prepared.search_doc.as_ref().unwrap();
        assert!(doc.len() > crate::fulltext::MAX_DOCUMENT_BYTES / 2);
        assert!(
            doc.capacity() <= crate::fulltext::MAX_DOCUMENT_BYTES,
            "{} allocated",
            doc.capacity()
        );
        assert_eq!(prepared.search_bytes(), doc.capacity());
    }
}
