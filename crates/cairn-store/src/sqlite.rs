//! The embedded SQLite backend.
//!
//! One file, `ledger.db`, in WAL mode with `synchronous=FULL`: a commit
//! returns only after the WAL is synced, which is what makes an
//! acknowledged record durable. One writer connection (owned by the
//! sequencer's calls), any number of read-only connections.
//!
//! Sequencing is in memory: each org's next `seq`, Merkle frontier and
//! last logged time, each session's next index, chain head and last time.
//! Orgs are loaded on open: the frontier from stored subtree hashes, checked
//! against the latest signed checkpoint, and the entries after it folded
//! again from their rows. Sessions are loaded when first written, from the
//! log itself (their last step found by walking the successor index, so a
//! derived head moved back cannot make an index be used twice). A batch
//! updates the state only after its transaction committed. One process
//! sequences a data directory at a time (`ledger.lock`); others may read.
//!
//! Tables (see `schema.sql`): `entries` (the org log: every step and
//! operational record, keyed by `(org, seq)`), `sessions` (the registry),
//! `session_heads` (a hint), `nodes` (complete Merkle subtrees at every
//! fourth level, for proofs and restarts), `checkpoints`, `orgs`, `meta`.
//! Triggers abort UPDATE and DELETE on all of them, except the two updates
//! the format allows: erasing payload fields (only once the erasure record
//! is in the log) and setting the embedding flag; session heads may only
//! move forward. Cairn's own connections also refuse DROP and ALTER through
//! an authorizer.
//!
//! This file holds the store, its options and the `LedgerStore` impl,
//! which mostly dispatches to the submodules: `open` (opening the store),
//! `migrate` (schema),
//! `connection` (connections, directory, lock), `state` (rebuilding the
//! sequencing state), `tx` (the writer's `WriteTx`), `tree` (the stored
//! Merkle tree and checkpoints), `rows` (decoding rows, walking chains),
//! `reads` (read queries), `admin` (API keys, cosignatures, log keys),
//! `analyst_sql`, `embedding` and `fulltext_index`.

use crate::analyst::{self, AnalystError, AnalystResult};
use crate::engine::{AgentKey, OrgState, Overlay, SessionState};
use crate::keys::ServerKey;
use crate::stored::CheckpointPage;
use crate::{
    DbContext, EmbeddingBacklog, LedgerStore, PendingEmbedding, Refusal, SessionFilter,
    SessionInfo, SessionSummary, StepFilter, StoreError, StoredCheckpoint, StoredEntry, StoredStep,
    WriteRequest, Written,
};
use cairn_core::log::{KeyRegistration, LogEntry, OpRecord};
use cairn_core::merkle::{consistency_proof, inclusion_proof};
use cairn_core::note::NoteVerifier;
use cairn_core::record::Limits;
use cairn_core::{Hash, Timestamp};
use connection::{Checkpointer, poisoned};
use rusqlite::Connection;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use tree::{latest_checkpoint, log_size_of};
use tx::SqliteTx;

/// File name of the database inside the data directory.
pub const DB_FILE: &str = "ledger.db";
mod access;
mod admin;
mod analyst_functions;
mod analyst_sql;
mod analyst_worker;
mod connection;
mod derived;
mod embedding;
mod fulltext_file;
mod fulltext_index;
mod fulltext_mend;
mod fulltext_merge;
mod fulltext_queue;
mod fulltext_search;
mod held;
mod migrate;
mod open;
mod reads;
mod rows;
mod state;
mod tree;
mod tx;
pub use analyst_worker::analyst_worker_main;
pub use fulltext_file::FULLTEXT_FILE;

/// File name of the lock held by the process that sequences the store.
pub const LOCK_FILE: &str = "ledger.lock";

/// Settings of an embedded store.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Name of the server key created on first open (log origins are
    /// `<name>/<org>`).
    pub server_name: String,
    /// Record limits checked at ingest.
    pub limits: Limits,
    /// Minimum time between two checkpoints of a growing log.
    pub checkpoint_interval: Duration,
    /// Seed 000's embedding sample rate (default 0.1).
    pub embedding_sample_rate: f64,
    /// The clock skew new sessions allow, in seconds (`docs/FORMAT.md` 5.4).
    pub max_clock_skew_s: u64,
    /// The most agent keys an org's log registers
    /// ([`crate::DEFAULT_MAX_AGENT_KEYS`]).
    pub max_agent_keys: u64,
    /// Whether this process sequences the store (takes `ledger.lock`, can
    /// append). Without it the store opens beside a running server for
    /// reading, verifying and exporting, and refuses ledger writes.
    pub sequencer: bool,
    /// Where the server's signing key is (created there if missing), when
    /// it is kept outside the data directory so that a copy of the
    /// directory alone cannot sign; `None`: `server.key` in the directory.
    pub key_file: Option<PathBuf>,
    /// A key already loaded (one held by an external signer,
    /// [`crate::command_server_key`]); takes precedence over `key_file`.
    pub key: Option<ServerKey>,
    /// Bytes of vectors semantic search may hold in memory (default 1 GiB).
    pub vector_memory_bytes: usize,
    /// Vectors of one org and embedder from which semantic search builds
    /// an HNSW graph instead of scoring every vector (default 10,000).
    pub vector_graph_min: usize,
}

impl Default for SqliteOptions {
    fn default() -> SqliteOptions {
        SqliteOptions {
            server_name: "cairn.local".into(),
            limits: Limits::default(),
            checkpoint_interval: Duration::from_millis(1000),
            embedding_sample_rate: 0.1,
            max_clock_skew_s: cairn_core::record::DEFAULT_MAX_CLOCK_SKEW_S,
            max_agent_keys: crate::DEFAULT_MAX_AGENT_KEYS,
            sequencer: true,
            key_file: None,
            key: None,
            vector_memory_bytes: crate::vector_index::DEFAULT_BUDGET,
            vector_graph_min: crate::vector_index::GRAPH_MIN,
        }
    }
}

struct Writer {
    conn: Connection,
    /// Set when the in-memory state could not be rebuilt (the tables
    /// contradict themselves, e.g. after tampering): the store still opens
    /// for reading and verification, but refuses writes.
    broken: Option<String>,
    state: State,
}

/// The sequencing state, held in memory: this process is the only writer.
#[derive(Default)]
struct State {
    orgs: HashMap<String, OrgState>,
    sessions: HashMap<(i64, String), SessionState>,
    /// The agent keys of each org the writer has needed one of, by org id
    /// (`state::org_keys`).
    keys: HashMap<i64, HashMap<String, AgentKey>>,
    /// The full-text documents and erasures of the batch being written
    /// (`fulltext_index`).
    fulltext: fulltext_index::FullTextBatch,
}

impl State {
    fn apply(&mut self, overlay: Overlay) {
        self.orgs.extend(overlay.orgs);
        self.sessions.extend(overlay.sessions);
        // An org whose keys were never read gets them from its committed
        // rows when first asked.
        for ((org, key_id), key) in overlay.keys {
            if let Some(keys) = self.keys.get_mut(&org) {
                keys.insert(key_id, key);
            }
        }
    }
}

/// The embedded store. See the module docs.
pub struct SqliteStore {
    path: PathBuf,
    key: ServerKey,
    /// Whether `key` is the store's own (not one kept in memory because
    /// the key file is elsewhere and the store was opened to be read).
    key_present: bool,
    limits: Limits,
    checkpoint_interval: Duration,
    embedding_sample_rate: f64,
    max_clock_skew_s: u64,
    max_agent_keys: u64,
    /// Opened beside the sequencing process, to read.
    read_only: bool,
    writer: Mutex<Writer>,
    readers: Mutex<Vec<Connection>>,
    /// Held for its `Drop`, which stops the background thread.
    _checkpointer: Option<Checkpointer>,
    /// The full-text index and its thread (a sequencing process only).
    fulltext: Option<fulltext_index::FullTextIndex>,
    /// The sequencer's lock on the data directory, held while open.
    _lock: Option<std::fs::File>,
    /// Semantic search's vectors in memory.
    vectors: crate::vector_index::VectorIndex,
    /// The longest each part of a batch took, for diagnosis.
    slowest: BatchParts,
}

/// The longest each part of a batch's write has taken since the store
/// opened, in microseconds ([`SqliteStore::slowest_batch_parts`]).
#[derive(Debug, Default)]
pub struct BatchParts {
    /// Waiting for the full-text index (and writing a chunk of its queue)
    /// before a batch, when the index's thread fell more than its backlog
    /// behind.
    pub index_flush: std::sync::atomic::AtomicU64,
    /// The batch's rows: every request through the engine.
    pub rows: std::sync::atomic::AtomicU64,
    /// The commit, with its fsync of the WAL.
    pub commit: std::sync::atomic::AtomicU64,
}

impl SqliteStore {
    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The longest each part of a batch's write has taken since the store
    /// opened: where a stalled batch spent its time (benchmarks print it).
    pub fn slowest_batch_parts(&self) -> &BatchParts {
        &self.slowest
    }

    /// The longest one write of the full-text index (a chunk of queued
    /// batches, or a step of an idle merge) has taken since the store
    /// opened, in microseconds: what bounds a backlogged batch's wait, an
    /// erasure's or a search's flush (0 in a process that only reads).
    pub fn slowest_index_chunk_micros(&self) -> u64 {
        self.fulltext
            .as_ref()
            .map_or(0, |index| index.slowest_chunk_micros())
    }
}

impl LedgerStore for SqliteStore {
    fn append_batch(
        &self,
        batch: &[WriteRequest],
    ) -> Result<Vec<Result<Written, Refusal>>, StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly(
                "this process opened the store beside the process that sequences it, to read; write through that process (its HTTP API or MCP)".into(),
            ));
        }
        let mut guard = self.writer.lock().map_err(|_| poisoned())?;
        let w = &mut *guard;
        if let Some(reason) = &w.broken {
            return Err(StoreError::Corrupt(reason.clone()));
        }
        if let Some(index) = &self.fulltext {
            let started = std::time::Instant::now();
            if index.relieve()? {
                crate::sequencer::note_longest(&self.slowest.index_flush, started.elapsed());
            }
        }
        w.state.fulltext.begin();
        // Dropping the transaction without commit (an error below) rolls the
        // whole batch back; the overlay is then discarded too.
        let started = std::time::Instant::now();
        let tx = w.conn.unchecked_transaction().context("starting a batch")?;
        let (results, overlay) = self.engine().run_batch(
            &mut SqliteTx {
                conn: &tx,
                state: &mut w.state,
            },
            batch,
        )?;
        crate::sequencer::note_longest(&self.slowest.rows, started.elapsed());
        let started = std::time::Instant::now();
        tx.commit().context("committing a batch")?;
        crate::sequencer::note_longest(&self.slowest.commit, started.elapsed());
        let sizes: Vec<(i64, u64, Hash)> = overlay
            .orgs
            .values()
            .map(|org| (org.id, org.frontier.size(), org.frontier.root()))
            .collect();
        w.state.apply(overlay);
        if let Some(index) = &self.fulltext {
            index.committed(&mut w.state.fulltext, sizes.into_iter());
        }
        Ok(results)
    }

    fn maintain(&self) -> Result<(), StoreError> {
        self.with_sound_writer(|w| self.maintain_with(w))
    }

    fn orgs(&self) -> Result<Vec<String>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare("SELECT name FROM orgs ORDER BY name")
                .context("listing orgs")?;
            stmt.query_map([], |r| r.get(0))
                .context("listing orgs")?
                .collect::<Result<Vec<String>, _>>()
                .context("listing orgs")
        })
    }

    fn log_size(&self, org_id: &str) -> Result<u64, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(0);
            };
            let size = log_size_of(c, org)?;
            Ok(size)
        })
    }

    fn orphan_sessions(&self, org_id: &str) -> Result<u64, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(0);
            };
            let n: i64 = c
                .prepare_cached(&crate::engine::orphan_sessions_query("?1"))
                .and_then(|mut s| s.query_row([org], |r| r.get(0)))
                .context("counting sessions rows")?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
    }

    fn unlisted_log_orgs(&self) -> Result<Vec<i64>, StoreError> {
        self.read(|c| {
            // An org number that is not an integer (SQLite keeps any type)
            // is no org's and takes no org's key: left out.
            let numbers: Vec<Option<i64>> = c
                .prepare_cached(crate::engine::UNLISTED_LOG_ORGS)
                .and_then(|mut s| {
                    s.query_map([], |r| {
                        Ok(match r.get_ref(0)? {
                            rusqlite::types::ValueRef::Integer(n) => Some(n),
                            _ => None,
                        })
                    })?
                    .collect()
                })
                .context("looking for entries of orgs the orgs table does not name")?;
            Ok(numbers.into_iter().flatten().collect())
        })
    }

    fn session_heads_page(
        &self,
        org_id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<crate::SessionHeadRow>, StoreError> {
        self.session_heads_page_in(org_id, after, limit)
    }

    fn session_kinds_page(
        &self,
        org_id: &str,
        after: (i64, &str),
        limit: u32,
    ) -> Result<Option<Vec<crate::SessionKindRow>>, StoreError> {
        self.session_kinds_page_in(org_id, after, limit)
    }

    fn unattached_session_rows(&self) -> Result<u64, StoreError> {
        self.unattached_session_rows_in()
    }

    fn restore_session_kinds(&self, org_id: Option<&str>) -> Result<u64, StoreError> {
        self.restore_session_kinds_in(org_id)
    }

    fn read_log(
        &self,
        org_id: &str,
        from: u64,
        to: u64,
        visit: &mut dyn FnMut(StoredEntry) -> bool,
    ) -> Result<(), StoreError> {
        self.read_log_in(org_id, from, to, visit)
    }

    fn read_log_for_verification(
        &self,
        org_id: &str,
        from: u64,
        to: u64,
        visit: &mut dyn FnMut(StoredEntry, Option<Hash>) -> bool,
    ) -> Result<(), StoreError> {
        self.read_log_for_verification_in(org_id, from, to, visit)
    }

    fn read_entries(
        &self,
        org_id: &str,
        seqs: &[u64],
        visit: &mut dyn FnMut(StoredEntry) -> bool,
    ) -> Result<(), StoreError> {
        self.read_entries_in(org_id, seqs, visit)
    }

    fn session(&self, org_id: &str, session_id: &str) -> Result<Option<SessionInfo>, StoreError> {
        self.session_in(org_id, session_id)
    }

    fn read_session(
        &self,
        org_id: &str,
        session_id: &str,
        visit: &mut dyn FnMut(StoredStep) -> bool,
    ) -> Result<(), StoreError> {
        self.read_session_in(org_id, session_id, visit)
    }

    fn session_seqs(&self, org_id: &str, session_id: &str) -> Result<Option<Vec<u64>>, StoreError> {
        self.session_seqs_in(org_id, session_id)
    }

    fn turn_seqs(
        &self,
        org_id: &str,
        session_id: &str,
        turn_id: &str,
    ) -> Result<Option<Vec<u64>>, StoreError> {
        self.turn_seqs_in(org_id, session_id, turn_id)
    }

    fn turn_places_at(
        &self,
        org_id: &str,
        session_id: &str,
        seqs: &[u64],
    ) -> Result<Vec<crate::TurnPlace>, StoreError> {
        self.turn_places_at_in(org_id, session_id, seqs)
    }

    fn visit_steps_at(
        &self,
        org_id: &str,
        session_id: &str,
        seqs: &[u64],
        visit: &mut dyn FnMut(StoredStep) -> bool,
    ) -> Result<(), StoreError> {
        self.visit_steps_at_in(org_id, session_id, seqs, visit)
    }

    fn step_by_trace(
        &self,
        org_id: &str,
        trace_id: &str,
    ) -> Result<Option<StoredStep>, StoreError> {
        self.step_by_trace_in(org_id, trace_id)
    }

    fn list_sessions(
        &self,
        org_id: &str,
        filter: &SessionFilter,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StoreError> {
        self.list_sessions_in(org_id, filter, limit)
    }

    fn latest_checkpoint(&self, org_id: &str) -> Result<Option<StoredCheckpoint>, StoreError> {
        self.read(|c| match Self::org_id_of(c, org_id)? {
            Some(org) => latest_checkpoint(c, org, org_id),
            None => Ok(None),
        })
    }

    fn checkpoints(&self, org_id: &str) -> Result<Vec<StoredCheckpoint>, StoreError> {
        self.checkpoints_in(org_id, CheckpointPage::All)
    }

    fn checkpoints_from(
        &self,
        org_id: &str,
        from_size: u64,
        limit: u32,
    ) -> Result<Vec<StoredCheckpoint>, StoreError> {
        self.checkpoints_in(org_id, CheckpointPage::From(from_size, limit))
    }

    fn latest_checkpoints(
        &self,
        org_id: &str,
        limit: u32,
    ) -> Result<Vec<StoredCheckpoint>, StoreError> {
        self.checkpoints_in(org_id, CheckpointPage::Newest(limit))
    }

    fn inclusion_proof(&self, org_id: &str, seq: u64, size: u64) -> Result<Vec<Hash>, StoreError> {
        self.with_tree(org_id, |tree| inclusion_proof(tree, seq, size))
    }

    fn inclusion_proofs(
        &self,
        org_id: &str,
        seqs: &[u64],
        size: u64,
    ) -> Result<Vec<Vec<Hash>>, StoreError> {
        self.with_tree(org_id, |tree| {
            cairn_core::merkle::inclusion_proofs(tree, seqs, size)
        })
    }

    fn consistency_proof(
        &self,
        org_id: &str,
        old_size: u64,
        new_size: u64,
    ) -> Result<Vec<Hash>, StoreError> {
        self.with_tree(org_id, |tree| consistency_proof(tree, old_size, new_size))
    }

    fn hash_tile(
        &self,
        org_id: &str,
        tile: &cairn_core::tiles::Tile,
    ) -> Result<Vec<Hash>, StoreError> {
        self.with_tree(org_id, |tree| cairn_core::tiles::tile_hashes(tree, tile))
    }

    fn root_at(&self, org_id: &str, size: u64) -> Result<Hash, StoreError> {
        self.root_at_in(org_id, size)
    }

    fn tree_nodes_from(
        &self,
        org_id: &str,
        level: u32,
        from_index: u64,
        limit: u32,
    ) -> Result<Vec<crate::StoredNode>, StoreError> {
        self.tree_nodes_in(org_id, level, from_index, limit)
    }

    fn tree_node_anomaly(&self, org_id: &str) -> Result<Option<String>, StoreError> {
        self.tree_node_anomaly_in(org_id)
    }

    fn rewrite_tree_nodes(
        &self,
        org_id: &str,
        rebuilt: &[(u32, u64, Hash)],
    ) -> Result<crate::TreeRowsRewritten, StoreError> {
        self.rewrite_tree_nodes_in(org_id, rebuilt)
    }

    fn limits(&self) -> Limits {
        self.limits
    }

    fn embedding_sample_rate(&self) -> f64 {
        self.embedding_sample_rate
    }

    fn full_text_search(
        &self,
        org_id: &str,
        query: &crate::fulltext::FullTextQuery,
        filter: &StepFilter,
        limit: usize,
    ) -> Result<Vec<(u64, f64)>, StoreError> {
        self.full_text_search_in(org_id, query, filter, limit)
    }

    fn semantic_search(
        &self,
        org_id: &str,
        embedder: &str,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<(u64, f32)>, StoreError> {
        self.semantic_search_in(org_id, embedder, query, limit)
    }

    fn claim_embeddings(&self, limit: usize) -> Result<Vec<PendingEmbedding>, StoreError> {
        self.claim_embeddings_in(limit)
    }

    fn store_embeddings(
        &self,
        embedder: &str,
        done: &[(PendingEmbedding, Option<Vec<f32>>)],
    ) -> Result<usize, StoreError> {
        self.store_embeddings_in(embedder, done)
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn release_embeddings(&self, ids: &[i64], failed: bool) -> Result<(), StoreError> {
        self.release_embeddings_in(ids, failed)
    }

    fn embedding_backlog(&self) -> Result<EmbeddingBacklog, StoreError> {
        self.embedding_backlog_in()
    }

    fn queue_reindex(&self, org_id: Option<&str>) -> Result<u64, StoreError> {
        self.queue_reindex_in(org_id)
    }

    fn vectors_by_embedder(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.vectors_by_embedder_in()
    }

    fn chosen_embedder(&self) -> Result<Option<String>, StoreError> {
        self.chosen_embedder_in()
    }

    fn choose_embedder(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.choose_embedder_in(id)
    }

    fn steps_by_trace(
        &self,
        org_id: &str,
        trace_ids: &[String],
    ) -> Result<Vec<StoredStep>, StoreError> {
        self.steps_by_trace_in(org_id, trace_ids)
    }

    fn flagged_trace_ids(
        &self,
        org_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, String)>, StoreError> {
        self.flagged_trace_ids_in(org_id, from, limit)
    }

    fn op_records(
        &self,
        org_id: &str,
        entry_type: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, OpRecord)>, StoreError> {
        self.op_records_in(org_id, entry_type, from, limit)
    }

    fn visit_session_records(
        &self,
        org_id: &str,
        session_id: &str,
        visit: &mut dyn FnMut(u64, cairn_core::log::OpRecord) -> bool,
    ) -> Result<(), StoreError> {
        self.session_records_in(org_id, session_id, visit)
    }

    fn key_records_page(
        &self,
        org_id: &str,
        agent_id: Option<&str>,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, OpRecord)>, StoreError> {
        self.key_records_in(org_id, agent_id, after, limit)
    }

    fn op_by_id(
        &self,
        org_id: &str,
        id: &str,
    ) -> Result<Option<(u64, Option<OpRecord>)>, StoreError> {
        self.op_by_id_in(org_id, id)
    }

    fn analyst_query_limited(
        &self,
        org_id: &str,
        sql: &str,
        limits: &analyst::QueryLimits,
    ) -> Result<AnalystResult, AnalystError> {
        self.analyst_query_limited_in(org_id, sql, limits)
    }

    fn put_api_key(&self, key: &crate::ApiKey) -> Result<(), StoreError> {
        self.put_api_key_in(key)
    }

    fn api_key_by_hash(&self, token_hash: &Hash) -> Result<Option<crate::ApiKey>, StoreError> {
        self.api_key_by_hash_in(token_hash)
    }

    fn api_keys(&self, org_id: &str) -> Result<Vec<crate::ApiKey>, StoreError> {
        self.api_keys_in(org_id)
    }

    fn key_orgs(&self) -> Result<Vec<String>, StoreError> {
        self.key_orgs_in()
    }

    fn put_cosignature(
        &self,
        org_id: &str,
        size: u64,
        witness: &str,
        line: &str,
    ) -> Result<(), StoreError> {
        self.put_cosignature_in(org_id, size, witness, line)
    }

    fn log_keys(&self, org_id: &str) -> Result<Vec<NoteVerifier>, StoreError> {
        self.log_keys_in(org_id)
    }

    fn record_log_key(
        &self,
        action: cairn_core::log::LogKeyAction,
        key: &NoteVerifier,
    ) -> Result<(), StoreError> {
        self.record_log_key_in(action, key)
    }

    fn cosignatures(&self, org_id: &str, size: u64) -> Result<Vec<String>, StoreError> {
        self.cosignatures_in(org_id, size)
    }

    fn revoke_api_key(
        &self,
        org_id: &str,
        key_id: &str,
        at: Timestamp,
    ) -> Result<bool, StoreError> {
        self.revoke_api_key_in(org_id, key_id, at)
    }

    fn revoke_api_key_unless_last_admin(
        &self,
        org_id: &str,
        key_id: &str,
        agent: Option<&str>,
        at: Timestamp,
    ) -> Result<crate::KeyRevocation, StoreError> {
        self.revoke_api_key_unless_last_admin_in(org_id, key_id, agent, at)
    }

    fn agent_keys(&self, org_id: &str) -> Result<Vec<KeyRegistration>, StoreError> {
        self.agent_keys_in(org_id)
    }

    fn log_signer(&self, org_id: &str) -> Result<(String, NoteVerifier), StoreError> {
        self.log_signer_in(org_id)
    }

    fn import_log(
        &self,
        org_id: &str,
        header: &cairn_core::bundle::BundleHeader,
        checkpoint_note: &str,
        entries: &mut dyn Iterator<Item = Result<LogEntry, String>>,
        withheld_ids: &std::collections::HashMap<u64, String>,
    ) -> Result<u64, crate::ImportError> {
        self.import_log_in(org_id, header, checkpoint_note, entries, withheld_ids)
    }

    fn signer(&self) -> &cairn_core::note::NoteSigner {
        &self.key.signer
    }

    fn server_key(&self) -> &NoteVerifier {
        &self.key.verifier
    }

    fn holds_server_key(&self) -> bool {
        self.key_present
    }

    fn server_name(&self) -> &str {
        self.key.signer.name()
    }
}

/// SQLite's plan for `sql` with `params`, one line a step (what the plan
/// tests assert on).
#[cfg(test)]
fn query_plan(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Vec<String> {
    conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .unwrap()
        .query_map(params, |r| r.get(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}
