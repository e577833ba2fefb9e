//! The PostgreSQL backend: many `cairn` processes on one database.
//!
//! Every process runs its own sequencer (group commit); the processes
//! agree through the database alone:
//!
//! - **One writer per org at a time.** A batch opens a transaction and
//!   takes a transaction-scoped advisory lock for each org it writes to, in
//!   a fixed order (so two batches cannot deadlock). Under the lock it reads
//!   the org's committed log size, catches its cached Merkle frontier up
//!   with the leaves other processes appended since, and reads each session
//!   it touches from `session_heads`. Sequence numbers and step indexes are
//!   therefore assigned from committed state by exactly one transaction,
//!   and the lock is released only by COMMIT or ROLLBACK: the log and every
//!   chain stay gap-free and fork-free, and a process that dies mid-batch
//!   leaves nothing (PostgreSQL rolls its transaction back).
//! - **Acknowledged means committed.** Writers are answered after COMMIT
//!   returned, with PostgreSQL's default `synchronous_commit = on`.
//! - **One server key.** The first process to start records its public key
//!   in `cairn_meta`; a process with another key refuses to start, so every
//!   checkpoint and seal of the database verifies under one key, whichever
//!   process signed it.
//!
//! The write rules themselves are the engine's (`engine.rs`), shared with
//! the embedded store. `migrate` applies `pg_schema.sql` under an advisory
//! lock, so that any number of servers starting at once migrate exactly
//! once; `install_guard` adds the event triggers that refuse DROP and ALTER
//! of ledger tables when the migrating role is a superuser.
//! `docs/OPERATIONS.md` gives the grants for the production role.
//!
//! This file holds the store, its options, the pooled reads and the
//! `LedgerStore` impl, which mostly dispatches to the submodules: `open`
//! (connecting, migrating, checking the server key), `schema` (DDL,
//! `migrate`, `install_guard`, grants on upgrade), `connection` (connecting,
//! `Db`), `locks` (per-org locks, loading an org under its lock), `tx`
//! (`PgTx`, the engine's `WriteTx`), `writer` (batches, checkpoints,
//! imports), `search_queue` (full-text documents written after their
//! batch commits), `tree` (the stored Merkle tree and checkpoints), `rows`
//! (decoding rows, walking chains), `reads` (read queries), `admin` (API
//! keys, cosignatures, log keys), `analyst_sql` and `embedding`.

use crate::analyst::{self, AnalystError, AnalystResult};
use crate::engine::{Engine, request_org};
use crate::keys::ServerKey;
use crate::stored::CheckpointPage;
use crate::{
    ApiKey, EmbeddingBacklog, ImportError, LedgerStore, PendingEmbedding, Refusal, SessionFilter,
    SessionInfo, SessionSummary, StepFilter, StoreError, StoredCheckpoint, StoredEntry, StoredStep,
    WriteRequest, Written,
};
use cairn_core::log::{KeyRegistration, LogEntry, OpRecord};
use cairn_core::merkle::{consistency_proof, inclusion_proof};
use cairn_core::note::NoteVerifier;
use cairn_core::record::Limits;
use cairn_core::{Hash, Timestamp};
use connection::{Db, PgConn, col, connect, poisoned};
use locks::Cache;
use postgres::GenericClient;
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;
use tree::latest_checkpoint;

mod admin;
mod analyst_sql;
mod connection;
mod copy;
mod derived;
mod embedding;
mod held;
mod locks;
mod open;
#[cfg(test)]
mod plan_tests;
mod reads;
mod rows;
mod schema;
mod search_queue;
mod tree;
mod tsvector;
mod tx;
mod writer;

pub use schema::{GRANTS, GUARD, SCHEMA, install_guard, migrate};

/// First key of Cairn's advisory locks ("CAIR"), so they cannot collide
/// with another application's locks on the same database.
const LOCK_CLASS: i32 = 0x4341_4952;
/// Rows fetched per round trip when streaming a log.
const PAGE: i64 = 2_000;

/// Settings of a PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Connection string: a `postgres://` URL or `key=value` pairs.
    pub url: String,
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
    /// How long a connection may get no answer from the network before it
    /// is given up: the TCP connect timeout, TCP keepalive (idle, interval
    /// and probes within it) and `TCP_USER_TIMEOUT` (data sent and never
    /// acknowledged). Settings the URL gives itself are kept.
    pub network_timeout: Duration,
    /// Bytes of vectors semantic search may hold in memory (default 1 GiB).
    pub vector_memory_bytes: usize,
    /// Vectors of one org and embedder from which semantic search builds
    /// an HNSW graph instead of scoring every vector (default 10,000).
    pub vector_graph_min: usize,
}

impl PgOptions {
    /// Default settings for a database.
    pub fn new(url: impl Into<String>) -> PgOptions {
        PgOptions {
            url: url.into(),
            limits: Limits::default(),
            checkpoint_interval: Duration::from_millis(1000),
            embedding_sample_rate: 0.1,
            max_clock_skew_s: cairn_core::record::DEFAULT_MAX_CLOCK_SKEW_S,
            max_agent_keys: crate::DEFAULT_MAX_AGENT_KEYS,
            network_timeout: Duration::from_secs(30),
            vector_memory_bytes: crate::vector_index::DEFAULT_BUDGET,
            vector_graph_min: crate::vector_index::GRAPH_MIN,
        }
    }
}

/// The PostgreSQL store. See the module docs.
pub struct PgStore {
    config: postgres::Config,
    key: ServerKey,
    limits: Limits,
    checkpoint_interval: Duration,
    embedding_sample_rate: f64,
    max_clock_skew_s: u64,
    max_agent_keys: u64,
    /// The sequencer's connection (batches, checkpoints, imports).
    writer: Mutex<Option<PgConn>>,
    readers: Mutex<Vec<PgConn>>,
    cache: Mutex<Cache>,
    /// The schema Cairn's tables are in (analyst views name it).
    schema: String,
    /// Semantic search's vectors in memory.
    vectors: crate::vector_index::VectorIndex,
    /// Writes the full-text documents of committed batches.
    search_indexer: search_queue::SearchIndexer,
}

impl PgStore {
    fn engine(&self) -> Engine<'_> {
        Engine {
            key: &self.key,
            limits: self.limits,
            embedding_sample_rate: self.embedding_sample_rate,
            checkpoint_interval: self.checkpoint_interval,
            max_clock_skew_s: self.max_clock_skew_s,
            max_agent_keys: self.max_agent_keys,
        }
    }

    /// Runs `f` with a pooled connection.
    ///
    /// A pooled connection may have died while idle (the database
    /// restarted, the network was cut): the client finds out only when it
    /// next uses it. Reads are idempotent, so a read whose connection turns
    /// out closed empties the pool (its siblings died the same way) and
    /// runs once more on a new connection: the first reads after an outage
    /// succeed instead of each finding one dead connection.
    fn read<T>(
        &self,
        mut f: impl FnMut(&mut Db<'_, postgres::Client>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let pooled = self.readers.lock().map_err(|_| poisoned())?.pop();
        let mut conn = match pooled {
            Some(c) if !c.client.is_closed() => c,
            _ => connect(&self.config)?,
        };
        let mut out = f(&mut conn.db());
        if out.is_err() && conn.client.is_closed() {
            self.readers.lock().map_err(|_| poisoned())?.clear();
            conn = connect(&self.config)?;
            out = f(&mut conn.db());
        }
        if !conn.client.is_closed()
            && let Ok(mut pool) = self.readers.lock()
            && pool.len() < 8
        {
            pool.push(conn);
        }
        out
    }

    fn org_id_of<C: GenericClient>(
        db: &mut Db<'_, C>,
        name: &str,
    ) -> Result<Option<i64>, StoreError> {
        // A NUL (which PostgreSQL refuses in text) names no org: missing,
        // as on the embedded store (`reads::storable`).
        if !reads::storable(name) {
            return Ok(None);
        }
        let rows = db.query(
            "SELECT org FROM orgs WHERE name = $1 LIMIT 2",
            &[&name],
            "looking up an org",
        )?;
        match &rows[..] {
            [] => Ok(None),
            [row] => col(row, 0).map(Some),
            // The name's key removed and a second org given it: one of
            // the two logs would be read for the other.
            _ => Err(StoreError::RepeatedOrgName(name.to_owned())),
        }
    }
}

impl LedgerStore for PgStore {
    fn append_batch(
        &self,
        batch: &[WriteRequest],
    ) -> Result<Vec<Result<Written, Refusal>>, StoreError> {
        let names: HashSet<String> = batch.iter().map(|r| request_org(r).to_owned()).collect();
        match self.append_once(batch, names.clone())? {
            Ok(results) => Ok(results),
            // BEGIN failed, so nothing of the batch was sent. If that was
            // because the writer connection had died while idle (the
            // database restarted, the network was reset), the batch is
            // started once more on a new connection instead of failing.
            Err(_) => match self.append_once(batch, names)? {
                Ok(results) => Ok(results),
                Err(e) => Err(StoreError::Postgres {
                    context: "starting a batch".into(),
                    source: e,
                }),
            },
        }
    }

    fn maintain(&self) -> Result<(), StoreError> {
        self.maintain_in()
    }

    fn orgs(&self) -> Result<Vec<String>, StoreError> {
        self.read(|db| {
            db.query("SELECT name FROM orgs ORDER BY name", &[], "listing orgs")?
                .iter()
                .map(|r| col(r, 0))
                .collect()
        })
    }

    fn log_size(&self, org_id: &str) -> Result<u64, StoreError> {
        self.read(|db| match Self::org_id_of(db, org_id)? {
            Some(org) => Self::log_size_of(db, org),
            None => Ok(0),
        })
    }

    fn orphan_sessions(&self, org_id: &str) -> Result<u64, StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(0);
            };
            static ORPHAN_SESSIONS: std::sync::LazyLock<String> =
                std::sync::LazyLock::new(|| crate::engine::orphan_sessions_query("$1"));
            let row = db.query_one(&ORPHAN_SESSIONS, &[&org], "counting sessions rows")?;
            Ok(connection::u64_of(connection::col(&row, 0)?))
        })
    }

    fn unlisted_log_orgs(&self) -> Result<Vec<i64>, StoreError> {
        self.read(|db| {
            db.query(
                crate::engine::UNLISTED_LOG_ORGS,
                &[],
                "looking for entries of orgs the orgs table does not name",
            )?
            .iter()
            .map(|r| connection::col(r, 0))
            .collect()
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

    fn steps_by_trace(
        &self,
        org_id: &str,
        trace_ids: &[String],
    ) -> Result<Vec<StoredStep>, StoreError> {
        self.steps_by_trace_in(org_id, trace_ids)
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
        self.read(|db| match Self::org_id_of(db, org_id)? {
            Some(org) => latest_checkpoint(db, org, org_id),
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

    fn search_form(&self, document: &str) -> Option<Vec<u8>> {
        Some(crate::fulltext::lexemes::tsvector_binary(document))
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

    fn put_api_key(&self, key: &ApiKey) -> Result<(), StoreError> {
        self.put_api_key_in(key)
    }

    fn api_key_by_hash(&self, token_hash: &Hash) -> Result<Option<ApiKey>, StoreError> {
        self.api_key_by_hash_in(token_hash)
    }

    fn api_keys(&self, org_id: &str) -> Result<Vec<ApiKey>, StoreError> {
        self.api_keys_in(org_id)
    }

    fn key_orgs(&self) -> Result<Vec<String>, StoreError> {
        self.key_orgs_in()
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
    ) -> Result<u64, ImportError> {
        self.import_log_in(org_id, header, checkpoint_note, entries, withheld_ids)
    }

    fn signer(&self) -> &cairn_core::note::NoteSigner {
        &self.key.signer
    }

    fn server_key(&self) -> &NoteVerifier {
        &self.key.verifier
    }

    fn server_name(&self) -> &str {
        self.key.signer.name()
    }
}
