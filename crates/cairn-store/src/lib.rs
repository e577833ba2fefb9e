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
mod errors;
mod external_key;
pub mod fulltext;
pub mod held_spans;
mod keys;
mod listing;
pub mod ops;
pub mod pg;
mod requests;
mod retries;
#[cfg(feature = "model")]
pub mod sentence_model;
mod sequencer;
mod sqlite;
mod stored;
mod vector_index;
pub mod witness_state;

pub use auth::{
    ApiKey, KeyRevocation, MAX_KEY_LABEL_BYTES, Role, key_expiry, key_label_refused, token_hash,
};
pub use engine::records::erasure_refusal;
pub(crate) use errors::DbContext;
pub use errors::{ImportError, Refusal, StoreError};
pub use external_key::command_server_key;
pub use held_spans::HeldSpans;
pub use keys::{
    KEY_FILE, ServerKey, load_or_create_key, load_or_create_key_file, load_or_create_server_key,
};
pub use requests::{
    EmbeddingBacklog, NewSession, NewStep, PendingEmbedding, PreparedStep, WriteRequest, Written,
    new_id, now, prepare_step,
};
pub use retries::{
    RETRY_LOOKUP_CHUNK, RepeatedIds, answer_retries, may_be_retry, turn_retried, visit_recorded,
};
pub use sequencer::{AppendError, Hold, Ledger, Pending, SequencerConfig, SequencerStats};
pub use sqlite::{DB_FILE, FULLTEXT_FILE, SqliteOptions, SqliteStore, analyst_worker_main};
pub use stored::{
    SessionCursor, SessionFilter, SessionHeadRow, SessionInfo, SessionKindRow, SessionSummary,
    StepFilter, StoredCheckpoint, StoredEntry, StoredNode, StoredStep, TreeRowsRewritten,
    TurnPlace,
};

use cairn_core::Hash;
use cairn_core::Timestamp;
use cairn_core::log::LogEntry;

/// The most agent keys an org's log registers unless the store is told
/// otherwise (`CAIRN_MAX_AGENT_KEYS`): the sequencer and every
/// verification of the org hold them all in memory, about 800 bytes each.
pub const DEFAULT_MAX_AGENT_KEYS: u64 = 100_000;

/// The orgs a maintenance command (`cairn reindex`) covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OrgScope {
    /// Every org of the store.
    Every,
    /// The named org, by its internal number.
    One(i64),
    /// The named org does not exist: nothing to do.
    Unknown,
}

impl OrgScope {
    /// The scope of `org_id` (`None`: every org), the named org's number
    /// looked up with `number_of`.
    pub(crate) fn of(
        org_id: Option<&str>,
        number_of: impl FnOnce(&str) -> Result<Option<i64>, StoreError>,
    ) -> Result<OrgScope, StoreError> {
        Ok(match org_id {
            None => OrgScope::Every,
            Some(name) => number_of(name)?.map_or(OrgScope::Unknown, OrgScope::One),
        })
    }

    /// The org number a query filters on (`None`: every org).
    pub(crate) fn number(self) -> Option<i64> {
        match self {
            OrgScope::One(org) => Some(org),
            OrgScope::Every | OrgScope::Unknown => None,
        }
    }
}

/// Where records live. Implementations sequence natively (see the crate
/// docs); every method's contract is checked by the conformance suite.
pub trait LedgerStore: HeldSpans + Send + Sync + 'static {
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

    /// Rows of the org's `sessions` table that no session-start entry of
    /// its log names (0 in a store nobody edited).
    fn orphan_sessions(&self, org_id: &str) -> Result<u64, StoreError>;

    /// Org numbers whose entries, tree nodes or checkpoints the store
    /// holds while its `orgs` table does not name them (empty in a store
    /// nobody edited): a deleted org row would hide that org's whole log
    /// from [`LedgerStore::orgs`], and so from `verify --all-orgs`, and
    /// rows planted for an org not created yet would refuse its first
    /// appends. At least one such org is named when there are any.
    fn unlisted_log_orgs(&self) -> Result<Vec<i64>, StoreError>;

    /// A stored subtree row of the org that no reader can use as one, if
    /// the store holds any, described for a person: a null hash or one
    /// that is not 32 bytes, and on SQLite (which keeps any type in any
    /// column) a level or index that is not an integer (a whole-number
    /// real index still takes the integer's key). Readers compute such a
    /// subtree from below; verification names the row.
    fn tree_node_anomaly(&self, org_id: &str) -> Result<Option<String>, StoreError>;

    /// Makes the org's stored subtree rows (`nodes`) the log's: `rebuilt`
    /// holds (level, index, hash) of every subtree at a stored level that a
    /// verification of the log folded ([`ops::repair_tree`]). In one
    /// transaction, under the org's write lock (so no append of the org
    /// runs beside it): rows no reader can use (see
    /// [`LedgerStore::tree_node_anomaly`]) or lying past the log's end are
    /// removed, rows of `rebuilt`'s subtrees that differ are replaced,
    /// missing ones written; other rows (subtrees appended since the
    /// verification read the log) are left. The append-only triggers of
    /// `nodes` are lifted for the transaction only (on PostgreSQL that
    /// takes the table's owner).
    fn rewrite_tree_nodes(
        &self,
        org_id: &str,
        rebuilt: &[(u32, u64, Hash)],
    ) -> Result<TreeRowsRewritten, StoreError>;

    /// Up to `limit` `session_heads` rows of the org's sessions whose
    /// session number is above `after`, by session number.
    fn session_heads_page(
        &self,
        org_id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<SessionHeadRow>, StoreError>;

    /// Up to `limit` `session_kinds` rows of the org's sessions after
    /// `after` (session number, kind), in that order; `None` while the
    /// store's kind rows are not built (a store of an earlier version not
    /// yet opened by this one's sequencer).
    fn session_kinds_page(
        &self,
        org_id: &str,
        after: (i64, &str),
        limit: u32,
    ) -> Result<Option<Vec<SessionKindRow>>, StoreError>;

    /// How many `session_heads` and `session_kinds` rows name a session
    /// number past every session's (0 in a store nobody edited).
    fn unattached_session_rows(&self) -> Result<u64, StoreError>;

    /// Writes the `session_kinds` rows the log's steps call for and the
    /// table lacks (of one org, or of all): a server of an earlier version
    /// writing beside this one's schema writes none. Returns how many.
    fn restore_session_kinds(&self, org_id: Option<&str>) -> Result<u64, StoreError>;

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

    /// [`LedgerStore::read_log`] for a verifier of the whole log: each entry
    /// with, for a step that parses, its digest recomputed from its fields
    /// (`None` for an operational record or a row that does not parse). A
    /// step whose recomputed digest is the recorded one, with no field
    /// hidden, may come without its payload (`kind_label`,
    /// `content`, `input_data`, `output_data`, `confidence`,
    /// `duration_ms`, `token_count`, `model`, `metadata`, turn, task and
    /// links blank), which the in-order checks of
    /// `cairn_core::verify::LogVerifier::push_stored` given the digest do
    /// not read; any other step comes as [`LedgerStore::read_log`] gives
    /// it. Nothing but such a verifier may use these records.
    fn read_log_for_verification(
        &self,
        org_id: &str,
        from: u64,
        to: u64,
        visit: &mut dyn FnMut(StoredEntry, Option<Hash>) -> bool,
    ) -> Result<(), StoreError>;

    /// Streams the log entries at `seqs` (ascending, no repeats) in seq
    /// order, each as stored, in one read where the backend can (an
    /// export's chunk of proven entries, scattered over the log); a seq the
    /// log does not hold is left out. `visit` returns false to stop early.
    fn read_entries(
        &self,
        org_id: &str,
        seqs: &[u64],
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

    /// The log positions of a session's steps in index order (the walk
    /// [`LedgerStore::read_session`] makes), or `None` for an unknown
    /// session: a reader that streams a long session to a client fetches
    /// its steps a few at a time with [`LedgerStore::steps_at`], holding
    /// no connection or read snapshot while the client reads.
    fn session_seqs(&self, org_id: &str, session_id: &str) -> Result<Option<Vec<u64>>, StoreError>;

    /// The log positions of the steps of turn `turn_id` of a session, in
    /// index order (as [`LedgerStore::read_session`] meets them), or
    /// `None` for an unknown session. The backends answer from the index of
    /// turns; this default reads the whole session.
    fn turn_seqs(
        &self,
        org_id: &str,
        session_id: &str,
        turn_id: &str,
    ) -> Result<Option<Vec<u64>>, StoreError> {
        if self.session(org_id, session_id)?.is_none() {
            return Ok(None);
        }
        let mut seqs = Vec::new();
        self.read_session(org_id, session_id, &mut |s| {
            if s.record.step.turn_id.as_deref() == Some(turn_id) {
                seqs.push(s.seq);
            }
            true
        })?;
        Ok(Some(seqs))
    }

    /// Streams the steps of turn `turn_id` of a session in index order, as
    /// [`LedgerStore::read_session`] streams a session: found through
    /// [`LedgerStore::turn_seqs`] and read a few at a time, whatever the
    /// length of the session. `visit` returns false to stop early; false
    /// for an unknown session.
    fn read_turn(
        &self,
        org_id: &str,
        session_id: &str,
        turn_id: &str,
        visit: &mut dyn FnMut(StoredStep) -> bool,
    ) -> Result<bool, StoreError> {
        // Steps held at once: each may be several megabytes once parsed.
        const CHUNK: usize = 16;
        let Some(positions) = self.turn_seqs(org_id, session_id, turn_id)? else {
            return Ok(false);
        };
        for chunk in positions.chunks(CHUNK) {
            let mut stopped = false;
            self.visit_steps_at(org_id, session_id, chunk, &mut |step| {
                stopped = !visit(step);
                !stopped
            })?;
            if stopped {
                break;
            }
        }
        Ok(true)
    }

    /// The steps of `session_id` at these log positions (from
    /// [`LedgerStore::session_seqs`] or [`LedgerStore::turn_seqs`], in any
    /// order), in that order; a position that holds no step of the session
    /// is left out.
    fn steps_at(
        &self,
        org_id: &str,
        session_id: &str,
        seqs: &[u64],
    ) -> Result<Vec<StoredStep>, StoreError> {
        let mut steps = Vec::with_capacity(seqs.len());
        self.visit_steps_at(org_id, session_id, seqs, &mut |step| {
            steps.push(step);
            true
        })?;
        Ok(steps)
    }

    /// Where the steps of `session_id` at these log positions (ascending,
    /// from [`LedgerStore::session_seqs`] or [`LedgerStore::turn_seqs`])
    /// stand in its audit trail, in that order: each one's turn id and
    /// number within its turn, read without the step (what a streamed
    /// trail orders its steps by before it reads them). A position that
    /// holds no step of the session is left out. The backends read the
    /// two columns; this default reads whole steps.
    fn turn_places_at(
        &self,
        org_id: &str,
        session_id: &str,
        seqs: &[u64],
    ) -> Result<Vec<TurnPlace>, StoreError> {
        let mut places = Vec::with_capacity(seqs.len());
        self.visit_steps_at(org_id, session_id, seqs, &mut |s| {
            places.push(TurnPlace {
                seq: s.seq,
                turn_id: s.record.step.turn_id,
                turn_step: s.record.step.turn_step,
            });
            true
        })?;
        Ok(places)
    }

    /// [`LedgerStore::steps_at`] one step at a time, in the order of
    /// `seqs` (any order: a streamed trail reads its steps in trail order):
    /// each is parsed only when `visit` has taken the one before, and none
    /// after `visit` returns false, so a reader that stops once it holds
    /// enough (a replay's batch, a page) never holds the rest parsed (a step
    /// of small numbers is about 15 times its stored size once parsed).
    fn visit_steps_at(
        &self,
        org_id: &str,
        session_id: &str,
        seqs: &[u64],
        visit: &mut dyn FnMut(StoredStep) -> bool,
    ) -> Result<(), StoreError>;

    /// A step by trace id.
    fn step_by_trace(&self, org_id: &str, trace_id: &str)
    -> Result<Option<StoredStep>, StoreError>;

    /// The steps of these trace ids that exist, in any order: what a
    /// retried batch is compared with. One look-up each unless a backend
    /// does better (PostgreSQL: one query, not two round trips a step).
    fn steps_by_trace(
        &self,
        org_id: &str,
        trace_ids: &[String],
    ) -> Result<Vec<StoredStep>, StoreError> {
        let mut found = Vec::new();
        for trace_id in trace_ids {
            found.extend(self.step_by_trace(org_id, trace_id)?);
        }
        Ok(found)
    }

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

    /// The org's stored checkpoints of `from_size` entries or more,
    /// smallest first, at most `limit`: what a verifier of the whole log
    /// reads a page at a time as its entries stream by (a log signs about
    /// one a second while it grows, so a year holds millions).
    fn checkpoints_from(
        &self,
        org_id: &str,
        from_size: u64,
        limit: u32,
    ) -> Result<Vec<StoredCheckpoint>, StoreError>;

    /// The org's `limit` latest stored checkpoints, newest first: what a
    /// page of recent checkpoints reads, however many the log has signed
    /// (about one a second while it grows).
    fn latest_checkpoints(
        &self,
        org_id: &str,
        limit: u32,
    ) -> Result<Vec<StoredCheckpoint>, StoreError>;

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

    /// The stored subtree hashes of an org's log at `level` (a multiple of
    /// the stride the store keeps, 4), from subtree `from_index` on, at
    /// most `limit` indexes, in index order: what proofs and roots are
    /// computed from, which verification compares with its own fold of
    /// the leaves. Each index comes once, with its number of rows and its
    /// hash as stored (a hash that is not 32 bytes, or no hash, is the
    /// verdict's to name, not a read error).
    fn tree_nodes_from(
        &self,
        org_id: &str,
        level: u32,
        from_index: u64,
        limit: u32,
    ) -> Result<Vec<StoredNode>, StoreError>;

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

    /// The store's own form of a step's full-text document, when the store
    /// indexes a form computed from it: [`Ledger::prepare`] (and so
    /// [`Ledger::submit`]) computes it on the submitting thread, so that
    /// the single sequencer does not
    /// (PostgreSQL: the document's `tsvector`, in its binary format).
    /// `None` (the default) where the store indexes the text itself.
    fn search_form(&self, _document: &str) -> Option<Vec<u8>> {
        None
    }

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

    /// Up to `limit` queued steps to embed, orgs taking turns in a
    /// rotation (each org's oldest first: `embed::take_turns`), in queue
    /// order, parked ones left out, each with its text (`None` if it was erased or
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

    /// Flagged steps of an org (seed 003's review candidates), oldest
    /// first, from log position `from` on, at most `limit`: each one's log
    /// position and trace id, read from the flagged steps' index without
    /// the step (the review queue reads only the steps it lists, not the
    /// payloads of every step ever flagged).
    fn flagged_trace_ids(
        &self,
        org_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, String)>, StoreError>;

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
    /// their positions, found in the log by the session's id. A session
    /// may hold any number of audit events: a reader that must not hold
    /// them all uses [`LedgerStore::visit_session_records`].
    fn session_records(
        &self,
        org_id: &str,
        session_id: &str,
    ) -> Result<Vec<(u64, cairn_core::log::OpRecord)>, StoreError> {
        let mut records = Vec::new();
        self.visit_session_records(org_id, session_id, &mut |seq, record| {
            records.push((seq, record));
            true
        })?;
        Ok(records)
    }

    /// The same records, given to `visit` one at a time (`visit` returns
    /// false to stop); the store reads them a page at a time.
    fn visit_session_records(
        &self,
        org_id: &str,
        session_id: &str,
        visit: &mut dyn FnMut(u64, cairn_core::log::OpRecord) -> bool,
    ) -> Result<(), StoreError>;

    /// The agent key records (registrations and revocations) of an org, or
    /// of one agent, in log order with their positions.
    fn key_records(
        &self,
        org_id: &str,
        agent_id: Option<&str>,
    ) -> Result<Vec<(u64, cairn_core::log::OpRecord)>, StoreError> {
        self.key_records_page(org_id, agent_id, None, usize::MAX)
    }

    /// A page of [`LedgerStore::key_records`]: at most `limit` of them,
    /// those after position `after` (from the first when `None`), in log
    /// order; read through an index in that order, so that every page
    /// costs the same however deep.
    fn key_records_page(
        &self,
        org_id: &str,
        agent_id: Option<&str>,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, cairn_core::log::OpRecord)>, StoreError>;

    /// An operational record found by id (an audit event's id, an
    /// imported trace's id), with its position; the record is `None` for
    /// a signed trace whose view an erasure withheld (FORMAT.md 8).
    fn op_by_id(
        &self,
        org_id: &str,
        id: &str,
    ) -> Result<Option<(u64, Option<cairn_core::log::OpRecord>)>, StoreError>;

    /// An audit event by id, with its position.
    fn audit_event(
        &self,
        org_id: &str,
        event_id: &str,
    ) -> Result<Option<(u64, cairn_core::log::AuditEvent)>, StoreError> {
        Ok(match self.op_by_id(org_id, event_id)? {
            Some((seq, Some(cairn_core::log::OpRecord::AuditEvent(event)))) => Some((seq, event)),
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

    /// Every org that has an API key (revoked ones included), by name: an
    /// org may have keys before its log has a record.
    fn key_orgs(&self) -> Result<Vec<String>, StoreError>;

    /// Revokes a key of an org; false if there is no such key.
    fn revoke_api_key(&self, org_id: &str, key_id: &str, at: Timestamp)
    -> Result<bool, StoreError>;

    /// Revokes a key of an org (with `agent`, only a key bound to that
    /// agent) unless it is the org's last admin key in use not bound to an
    /// agent. The check and the revocation are one, against every writer
    /// of the store (other servers of a PostgreSQL fleet included), so two
    /// admins revoking each other cannot both succeed.
    fn revoke_api_key_unless_last_admin(
        &self,
        org_id: &str,
        key_id: &str,
        agent: Option<&str>,
        at: Timestamp,
    ) -> Result<KeyRevocation, StoreError>;

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
    /// caller verified them); `withheld_ids` the trace ids of the signed
    /// traces it withholds, by seq, from their trace-erasure records (a
    /// withheld entry's line does not carry its id, which stays taken).
    /// Returns the number of entries imported.
    fn import_log(
        &self,
        org_id: &str,
        header: &cairn_core::bundle::BundleHeader,
        checkpoint_note: &str,
        entries: &mut dyn Iterator<Item = Result<LogEntry, String>>,
        withheld_ids: &std::collections::HashMap<u64, String>,
    ) -> Result<u64, ImportError>;

    /// The server key's public half.
    fn server_key(&self) -> &cairn_core::note::NoteVerifier;

    /// Whether the store holds its own server key: an embedded store
    /// opened to be read where its key file is not holds a key kept in
    /// memory instead, which must neither be shown as the store's
    /// (`cairn keys`) nor sign anything given out (an export's selection).
    fn holds_server_key(&self) -> bool {
        true
    }

    /// The server key, to sign what the server states (a partial bundle's
    /// selection).
    fn signer(&self) -> &cairn_core::note::NoteSigner;

    /// The server key's name (log origins are `<name>/<org>`).
    fn server_name(&self) -> &str;
}
