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

use crate::analyst::{self, AnalystError, AnalystResult};
use crate::engine::{
    AgentKey, ChainEnd, Engine, NODE_STRIDE, OpRow, OrgState, RawStep, STEP_COLUMN_COUNT,
    STEP_COLUMNS, SessionState, StepRow, StoredSession, WriteTx, agent_keys_from_views, blob_hash,
    chain_end, json_text, links_text, op_from_view, op_record_id, org_range, request_org, row_id,
};
use crate::keys::ServerKey;
use crate::listing::{self, ListParam};
use crate::{
    ApiKey, DbContext, EmbeddingBacklog, ImportError, LedgerStore, PendingEmbedding, Refusal, Role,
    SessionFilter, SessionInfo, SessionSummary, StepFilter, StoreError, StoredCheckpoint,
    StoredEntry, StoredStep, WriteRequest, Written, now,
};
use cairn_core::log::{KeyRegistration, LogEntry, LogRecord, OpRecord};
use cairn_core::merkle::{
    Frontier, SubtreeHashes, consistency_proof, inclusion_proof, leaf_hash, node_hash, range_hash,
};
use cairn_core::note::NoteVerifier;
use cairn_core::record::{Limits, SessionHeader};
use cairn_core::{Hash, Timestamp};
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::Type;
use postgres::types::{FromSql, ToSql};
use postgres::{GenericClient, NoTls, Row, Statement};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

mod embedding;

/// The schema, version 2.
pub const SCHEMA: &str = include_str!("pg_schema.sql");
/// The DDL guard (event triggers; needs a superuser).
pub const GUARD: &str = include_str!("pg_guard.sql");
/// The grants of the production role (`cairn_app`), as documented.
pub const GRANTS: &str = include_str!("pg_grants.sql");
const SCHEMA_VERSION: &str = "2";
/// First key of Cairn's advisory locks ("CAIR"), so they cannot collide
/// with another application's locks on the same database.
const LOCK_CLASS: i32 = 0x4341_4952;
/// Leaves another process appended that a batch reads to catch its cached
/// frontier up; beyond this it rebuilds the frontier from stored subtrees.
const CATCH_UP_LIMIT: u64 = 1 << 16;
/// Pending entries beyond which a transaction sends them early.
const FLUSH_ROWS: usize = 4_096;
/// Rows fetched per round trip when streaming a log.
const PAGE: i64 = 2_000;

/// Applies the schema if the database does not have it yet, and checks
/// its version. A database already at this version is left untouched, so
/// a role without DDL privileges (the production role) can start.
pub fn migrate(client: &mut postgres::Client) -> Result<(), StoreError> {
    if schema_version(client)?.as_deref() == Some(SCHEMA_VERSION) && has_additions(client)? {
        return Ok(());
    }
    // One migrating server at a time: a session lock taken before the
    // transaction starts, so that the transaction sees what the previous
    // holder committed.
    client
        .execute("SELECT pg_advisory_lock($1, 0)", &[&LOCK_CLASS])
        .context("locking the migration")?;
    let outcome = migrate_locked(client);
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1, 0)", &[&LOCK_CLASS])
        .context("unlocking the migration");
    outcome.and(unlocked.map(|_| ()))
}

fn migrate_locked(client: &mut postgres::Client) -> Result<(), StoreError> {
    let mut tx = client.transaction().context("starting the migration")?;
    let version = schema_version(&mut tx)?;
    match version.as_deref() {
        None => {
            tx.batch_execute(SCHEMA).context(
                "creating the schema (the role needs CREATE on the schema; run the first start as the schema owner)",
            )?;
            tx.execute(
                "INSERT INTO cairn_meta (key, value) VALUES ('schema_version', $1)",
                &[&SCHEMA_VERSION],
            )
            .context("recording the schema version")?;
        }
        // Tables added within version 2 (the ledger tables and
        // `cairn_meta` are append-only, so the version row never changes):
        // created by the first start of the schema owner after an upgrade.
        Some(SCHEMA_VERSION) => {
            tx.batch_execute(ADDITIONS).context(
                "adding the tables this version needs (the role needs CREATE on the schema; run this start as the schema owner)",
            )?;
            index_unindexed_steps(&mut tx)?;
            embedding::upgrade_vectors(&mut tx)?;
            record_session_kinds(&mut tx)?;
        }
        Some("1") => {
            return Err(StoreError::Corrupt(
                "this database holds a format 1 ledger (written by cairn 0.1); this cairn writes format 2, whose hashes differ, and cannot use it. Keep using cairn 0.1 for it, or point this cairn at a new database".into(),
            ));
        }
        Some(other) => {
            return Err(StoreError::Corrupt(format!(
                "database schema version {other} is not supported (expected {SCHEMA_VERSION})"
            )));
        }
    }
    tx.commit().context("committing the migration")
}

/// Tables added after version 2 was first released, without changing the
/// version row (see `migrate_locked`).
const ADDITIONS: &str = "CREATE TABLE IF NOT EXISTS cosignatures (
  org_name TEXT NOT NULL, size BIGINT NOT NULL, witness TEXT NOT NULL,
  line TEXT NOT NULL, PRIMARY KEY (org_name, size, witness));
CREATE INDEX IF NOT EXISTS sessions_listing ON sessions (org, started_at, session_id);
CREATE TABLE IF NOT EXISTS session_kinds (sid BIGINT NOT NULL, kind TEXT NOT NULL, PRIMARY KEY (sid, kind));
DROP INDEX IF EXISTS sessions_recent;
CREATE TABLE IF NOT EXISTS step_search (id BIGINT PRIMARY KEY, org BIGINT NOT NULL, doc tsvector NOT NULL);
CREATE INDEX IF NOT EXISTS step_search_doc ON step_search USING GIN (doc);
CREATE TABLE IF NOT EXISTS vectors (id BIGINT PRIMARY KEY, org BIGINT NOT NULL, embedder TEXT NOT NULL, vector BYTEA NOT NULL);
CREATE INDEX IF NOT EXISTS vectors_embedder ON vectors (embedder, id);
CREATE TABLE IF NOT EXISTS embedding_queue (n BIGSERIAL UNIQUE, id BIGINT PRIMARY KEY, org BIGINT NOT NULL,
  attempts BIGINT NOT NULL DEFAULT 0, claimed_until TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS embedding_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);";

/// Whether the tables and indexes of [`ADDITIONS`] exist.
fn has_additions(client: &mut impl GenericClient) -> Result<bool, StoreError> {
    Ok(client
        .query_one(
            "SELECT to_regclass('cosignatures') IS NOT NULL AND to_regclass('step_search') IS NOT NULL
               AND to_regclass('sessions_listing') IS NOT NULL AND to_regclass('vectors_embedder') IS NOT NULL
               AND to_regclass('embedding_settings') IS NOT NULL AND to_regclass('session_kinds') IS NOT NULL",
            &[],
        )
        .context("checking the schema")?
        .get(0))
}

/// Fills `session_kinds` from the log of a database written before it
/// existed, then drops the index over `entries (sid, kind)` it replaces
/// (once: the index's presence says it has not run).
fn record_session_kinds(tx: &mut postgres::Transaction<'_>) -> Result<(), StoreError> {
    let old: bool = tx
        .query_one(
            "SELECT to_regclass('entries_session_kinds') IS NOT NULL",
            &[],
        )
        .context("checking the schema")?
        .get(0);
    if old {
        tx.batch_execute(
            "INSERT INTO session_kinds (sid, kind)
               SELECT DISTINCT sid, kind FROM entries WHERE type = 'step' ON CONFLICT DO NOTHING;
             DROP INDEX entries_session_kinds;",
        )
        .context("recording the kinds of existing sessions")?;
        // The roles that keep session heads keep this derived table too.
        grant_to_writers_of(
            tx,
            "session_heads",
            &["GRANT SELECT, INSERT ON session_kinds"],
        )?;
    }
    Ok(())
}

/// Runs each of `grants` (`GRANT ... ON ...`, without `TO`) for every role,
/// other than the migrating one, that may INSERT into `table`: an upgrade
/// gives a new table to the roles that wrote the one it serves beside or
/// replaces.
fn grant_to_writers_of(
    tx: &mut postgres::Transaction<'_>,
    table: &str,
    grants: &[&str],
) -> Result<(), StoreError> {
    let grantees: Vec<String> = tx
        .query(
            "SELECT DISTINCT grantee::text FROM information_schema.role_table_grants
             WHERE table_name = $1 AND privilege_type = 'INSERT' AND grantee::text <> current_user",
            &[&table],
        )
        .context(&format!("reading the grants of {table}"))?
        .iter()
        .map(|row| row.get(0))
        .collect();
    for role in grantees {
        let role = format!("\"{}\"", role.replace('"', "\"\""));
        let statements: String = grants.iter().map(|g| format!("{g} TO {role};")).collect();
        tx.batch_execute(&statements)
            .context(&format!("granting to the roles that write {table}"))?;
    }
    Ok(())
}

/// Indexes for full-text search the steps a database holds from before
/// the index existed (once, in the migration that creates it).
fn index_unindexed_steps(tx: &mut postgres::Transaction<'_>) -> Result<(), StoreError> {
    let rows = tx
        .query(
            "SELECT e.id, e.org, e.content, e.input_data, e.output_data, e.metadata FROM entries e
             WHERE e.type = 'step' AND NOT e.erased
               AND NOT EXISTS (SELECT 1 FROM step_search f WHERE f.id = e.id)",
            &[],
        )
        .context("indexing steps for full-text search")?;
    let parse = |text: Option<String>| text.and_then(|t| serde_json::from_str(&t).ok());
    let (mut ids, mut orgs, mut docs) = (Vec::new(), Vec::new(), Vec::new());
    for row in &rows {
        let payloads = [
            parse(col(row, 3)?),
            parse(col(row, 4)?),
            parse(col(row, 5)?),
        ];
        let content: Option<String> = col(row, 2)?;
        let doc = crate::fulltext::segment(&crate::fulltext::display_text_of(
            content.as_deref(),
            [&payloads[0], &payloads[1], &payloads[2]],
        ));
        if !doc.is_empty() {
            ids.push(col::<i64>(row, 0)?);
            orgs.push(col::<i64>(row, 1)?);
            docs.push(doc);
        }
    }
    tx.execute(
        "INSERT INTO step_search (id, org, doc)
         SELECT t.id, t.org, to_tsvector('english', t.doc)
         FROM UNNEST($1::int8[], $2::int8[], $3::text[]) AS t(id, org, doc)",
        &[&ids, &orgs, &docs],
    )
    .context("indexing steps for full-text search")?;
    Ok(())
}

fn schema_version(client: &mut impl GenericClient) -> Result<Option<String>, StoreError> {
    let exists: bool = client
        .query_one("SELECT to_regclass('cairn_meta') IS NOT NULL", &[])
        .context("looking for the schema")?
        .get(0);
    if !exists {
        return Ok(None);
    }
    Ok(client
        .query_opt(
            "SELECT value FROM cairn_meta WHERE key = 'schema_version'",
            &[],
        )
        .context("reading the schema version")?
        .map(|row| row.get(0)))
}

/// Installs the DDL guard if the connected role is a superuser and it is
/// not installed yet; returns whether the guard is in place. Serialized
/// with migrations by the same advisory lock, so that servers starting at
/// once do not race on its functions.
pub fn install_guard(client: &mut postgres::Client) -> Result<bool, StoreError> {
    let present = |client: &mut postgres::Client| -> Result<bool, StoreError> {
        Ok(client
            .query_one(
                "SELECT count(*) = 2 FROM pg_event_trigger
                 WHERE evtname IN ('cairn_guard_drop', 'cairn_guard_alter')",
                &[],
            )
            .context("looking for the DDL guard")?
            .get(0))
    };
    if present(client)? {
        return Ok(true);
    }
    let superuser: bool = client
        .query_one(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .context("checking privileges")?
        .get(0);
    if !superuser {
        return Ok(false);
    }
    client
        .execute("SELECT pg_advisory_lock($1, 0)", &[&LOCK_CLASS])
        .context("locking the guard's installation")?;
    let outcome = match present(client) {
        Ok(true) => Ok(true),
        Ok(false) => client
            .batch_execute(GUARD)
            .context("installing the DDL guard")
            .map(|()| true),
        Err(e) => Err(e),
    };
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1, 0)", &[&LOCK_CLASS])
        .context("unlocking the guard's installation");
    outcome.and_then(|installed| unlocked.map(|_| installed))
}

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
            network_timeout: Duration::from_secs(30),
            vector_memory_bytes: crate::vector_index::DEFAULT_BUDGET,
            vector_graph_min: crate::vector_index::GRAPH_MIN,
        }
    }
}

/// Bounds how long a connection waits on a network that stopped answering
/// (see [`PgOptions::network_timeout`]). Without it a partition leaves the
/// writer waiting for the kernel to give up, many minutes, with every
/// write queued behind it.
fn bound_network_waits(config: &mut postgres::Config, timeout: Duration) {
    let timeout = timeout.max(Duration::from_secs(1));
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(timeout);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(timeout);
    }
    // Probes start after half the timeout without traffic and three more
    // fit in the rest, so an idle connection to a vanished peer is found
    // dead within about the timeout.
    if config.get_keepalives() && config.get_keepalives_interval().is_none() {
        config.keepalives_idle(timeout / 2);
        config.keepalives_interval((timeout / 6).max(Duration::from_secs(1)));
        config.keepalives_retries(3);
    }
}

/// A connection with its prepared statements (which PostgreSQL keeps per
/// connection, across transactions).
struct PgConn {
    client: postgres::Client,
    statements: HashMap<&'static str, Statement>,
}

impl PgConn {
    fn db(&mut self) -> Db<'_, postgres::Client> {
        Db {
            client: &mut self.client,
            statements: &mut self.statements,
        }
    }
}

/// Queries through a client (or a transaction), preparing each statement
/// once per connection.
struct Db<'a, C: GenericClient> {
    client: &'a mut C,
    statements: &'a mut HashMap<&'static str, Statement>,
}

type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

impl<C: GenericClient> Db<'_, C> {
    fn statement(&mut self, sql: &'static str) -> Result<Statement, StoreError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).context("preparing a statement")?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    /// A query built at run time (not kept prepared: its text varies).
    fn query_built(
        &mut self,
        sql: &str,
        params: Params<'_>,
        what: &str,
    ) -> Result<Vec<Row>, StoreError> {
        self.client.query(sql, params).context(what)
    }

    fn query(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
        what: &str,
    ) -> Result<Vec<Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.client.query(&statement, params).context(what)
    }

    fn query_opt(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
        what: &str,
    ) -> Result<Option<Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.client.query_opt(&statement, params).context(what)
    }

    fn query_one(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
        what: &str,
    ) -> Result<Row, StoreError> {
        let statement = self.statement(sql)?;
        self.client.query_one(&statement, params).context(what)
    }

    fn execute(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
        what: &str,
    ) -> Result<u64, StoreError> {
        let statement = self.statement(sql)?;
        self.client.execute(&statement, params).context(what)
    }
}

/// A column of a row, with context on failure.
fn col<'r, T: FromSql<'r>>(row: &'r Row, index: usize) -> Result<T, StoreError> {
    row.try_get(index).context("reading a row")
}

fn u64_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A step from a row selected with [`STEP_COLUMNS`].
fn step_from_row(row: &Row) -> Result<StoredStep, StoreError> {
    RawStep {
        seq: col(row, 0)?,
        trace_id: col(row, 1)?,
        agent_id: col(row, 2)?,
        kind: col(row, 3)?,
        kind_label: col(row, 4)?,
        content: col(row, 5)?,
        input: col(row, 6)?,
        output: col(row, 7)?,
        confidence: col(row, 8)?,
        duration_ms: col(row, 9)?,
        token_count: col(row, 10)?,
        model: col(row, 11)?,
        metadata: col(row, 12)?,
        created_at: col(row, 13)?,
        turn_id: col(row, 14)?,
        turn_step: col(row, 15)?,
        task_id: col(row, 16)?,
        links: col(row, 17)?,
        status: col(row, 18)?,
        seed: col(row, 19)?,
        digest: col(row, 20)?,
        prev_hash: col(row, 21)?,
        hash: col(row, 22)?,
        signer_key_id: col(row, 23)?,
        signature: col(row, 24)?,
        has_embedding: col(row, 25)?,
        erased: col(row, 26)?,
        hidden: col(row, 27)?,
        step_index: col(row, 28)?,
        org_id: col(row, 29)?,
        session_id: col(row, 30)?,
        salts: col(row, 31)?,
        logged_at: col(row, 32)?,
    }
    .parse()
}

static STEP_BY_TRACE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {STEP_COLUMNS} FROM entries e JOIN orgs o ON o.org = e.org
         JOIN sessions s ON s.sid = e.sid WHERE e.org = $1 AND e.trace_id = $2 AND e.type = 'step'"
    )
});
static FLAGGED_STEPS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {STEP_COLUMNS} FROM entries e JOIN orgs o ON o.org = e.org
         JOIN sessions s ON s.sid = e.sid
         WHERE e.org = $1 AND e.status = 'flagged' AND e.id >= $2 AND e.id < $3
         ORDER BY e.id LIMIT $4"
    )
});
static LOG_PAGE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {STEP_COLUMNS}, e.type, e.view, e.leaf_hash FROM entries e
         JOIN orgs o ON o.org = e.org LEFT JOIN sessions s ON s.sid = e.sid
         WHERE e.id >= $1 AND e.id < $2 ORDER BY e.id LIMIT $3"
    )
});
static STEPS_BY_ID: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {STEP_COLUMNS} FROM entries e JOIN orgs o ON o.org = e.org
         JOIN sessions s ON s.sid = e.sid WHERE e.id = ANY($1) AND e.sid = $2 ORDER BY e.id"
    )
});

/// The ids of a session's steps, oldest first, found by walking `prev_seq`
/// back from the session's last step as the log holds it (`$3`, its seq;
/// `$4`, its index), as the embedded store does (no index on `sid` slows
/// every insert down). A broken link ends the walk early; verification
/// then reports the missing index.
const SESSION_WALK: &str = "WITH RECURSIVE chain (id, prev, n) AS (
    SELECT e.id, e.prev_seq, 1 FROM entries e
      WHERE e.id = (($1::bigint << 40) | $3::bigint) AND e.sid = $2
    UNION ALL
    SELECT e.id, e.prev_seq, c.n + 1 FROM chain c
      JOIN entries e ON e.id = (($1::bigint << 40) | c.prev) AND e.sid = $2
      WHERE c.n <= $4::bigint
  )
  SELECT id FROM chain ORDER BY id";

/// The step of session `$2` whose previous step is at `$1` (-1: its first).
const SUCCESSOR: &str = "SELECT seq, step_index, record_hash, created_at, kind FROM entries
  WHERE COALESCE(prev_seq, -1) = $1 AND sid = $2 AND type = 'step'";

/// The step a session's head row names, if it is a step of the session.
const HEAD_HINT: &str = "SELECT e.seq, e.step_index, e.record_hash, e.created_at, e.kind
  FROM session_heads h JOIN entries e ON e.id = (($1::bigint << 40) | h.last_seq)
  WHERE h.sid = $2 AND e.sid = $2 AND e.type = 'step' AND e.step_index = h.last_index";

fn chain_end_from_row(row: &Row) -> Result<ChainEnd, StoreError> {
    Ok(ChainEnd {
        seq: col(row, 0)?,
        index: col(row, 1)?,
        hash: col(row, 2)?,
        created_at: col(row, 3)?,
        kind: col(row, 4)?,
    })
}

/// The step of session `sid` after the one at `seq` (its first if `None`).
fn successor<C: GenericClient>(
    db: &mut Db<'_, C>,
    sid: i64,
    seq: Option<i64>,
) -> Result<Option<ChainEnd>, StoreError> {
    db.query_opt(
        SUCCESSOR,
        &[&seq.unwrap_or(-1), &sid],
        "following a session's chain",
    )?
    .map(|row| chain_end_from_row(&row))
    .transpose()
}

/// A session's last step as the log holds it: from the step its head row
/// names, walked forward to the end.
fn true_end<C: GenericClient>(
    db: &mut Db<'_, C>,
    org: i64,
    sid: i64,
) -> Result<Option<ChainEnd>, StoreError> {
    let hint = db
        .query_opt(HEAD_HINT, &[&org, &sid], "reading a session head")?
        .map(|row| chain_end_from_row(&row))
        .transpose()?;
    chain_end(hint, |seq| successor(db, sid, seq))
}

/// The ids of a session's steps, oldest first, as the log holds them.
fn session_ids<C: GenericClient>(
    db: &mut Db<'_, C>,
    org: i64,
    sid: i64,
) -> Result<Vec<i64>, StoreError> {
    let Some(end) = true_end(db, org, sid)? else {
        return Ok(Vec::new());
    };
    db.query(
        SESSION_WALK,
        &[&org, &sid, &end.seq, &end.index],
        "walking a session",
    )?
    .iter()
    .map(|r| col(r, 0))
    .collect()
}

/// Reads perfect-subtree hashes of one org's log: a subtree at level `l`
/// is folded from at most 16 hashes stored at the level `l - l % 4` below
/// it, fetched in one round trip.
struct PgTree<'a, C: GenericClient> {
    db: RefCell<Db<'a, C>>,
    org: i64,
    size: u64,
}

impl<C: GenericClient> SubtreeHashes for PgTree<'_, C> {
    type Error = StoreError;

    fn size(&self) -> u64 {
        self.size
    }

    fn subtree(&self, level: u32, index: u64) -> Result<Hash, StoreError> {
        let stored = level - level % NODE_STRIDE;
        let span = 1u64 << (level - stored);
        let first = index << (level - stored);
        let rows = {
            let mut db = self.db.borrow_mut();
            if stored == 0 {
                db.query(
                    "SELECT leaf_hash FROM entries WHERE id >= $1 AND id < $2 ORDER BY id",
                    &[&row_id(self.org, first), &row_id(self.org, first + span)],
                    "reading leaf hashes",
                )?
            } else {
                db.query(
                    "SELECT hash FROM nodes WHERE org = $1 AND level = $2 AND idx >= $3 AND idx < $4 ORDER BY idx",
                    &[
                        &self.org,
                        &(stored as i32),
                        &i64_of(first),
                        &i64_of(first + span),
                    ],
                    "reading tree nodes",
                )?
            }
        };
        if rows.len() as u64 != span {
            if level == 0 {
                return Err(StoreError::Corrupt(format!(
                    "leaf {index} of the log is missing"
                )));
            }
            // A stored node is missing: compute it from below.
            let left = self.subtree(level - 1, 2 * index)?;
            let right = self.subtree(level - 1, 2 * index + 1)?;
            return Ok(node_hash(&left, &right));
        }
        let hashes = rows
            .iter()
            .map(|row| blob_hash(col(row, 0)?))
            .collect::<Result<Vec<Hash>, StoreError>>()?;
        crate::engine::fold_perfect(hashes)
    }
}

/// The metadata rows recording log keys added and retired, in the order
/// they were written (`cairn_meta` is append-only).
fn meta_key_rows<C: GenericClient>(db: &mut Db<'_, C>) -> Result<Vec<String>, StoreError> {
    db.query(
        "SELECT key FROM cairn_meta WHERE starts_with(key, 'log_key_') ORDER BY ctid",
        &[],
        "reading the log keys",
    )?
    .iter()
    .map(|row| col::<String>(row, 0))
    .collect()
}

/// The frontier of a stored tree: one subtree hash per set bit of its size.
fn frontier_of<C: GenericClient>(tree: &PgTree<'_, C>) -> Result<Frontier, StoreError> {
    let size = tree.size;
    let mut peaks = Vec::new();
    let mut start = 0u64;
    for level in (0..64u32).rev() {
        if size & (1 << level) != 0 {
            peaks.push(tree.subtree(level, start >> level)?);
            start += 1 << level;
        }
    }
    Frontier::from_parts(size, peaks).ok_or_else(|| StoreError::Corrupt("frontier rebuild".into()))
}

/// What a process remembers between batches. Only ever a cache: a batch
/// checks it against the database under the org's lock.
#[derive(Default)]
struct Cache {
    /// Each org's frontier as of some committed size.
    frontiers: HashMap<i64, Frontier>,
    /// Registered agent keys of each org, with the number of key records
    /// they were read from (another server may have added one since: the
    /// count is checked under the org's lock).
    keys: HashMap<i64, (i64, HashMap<String, AgentKey>)>,
}

/// The advisory-lock key of an org name (SHA-256 based, so every process
/// and every version computes the same one).
fn lock_key(name: &str) -> i32 {
    let h = Hash::sha256(format!("cairn/org-lock\0{name}").as_bytes()).0;
    i32::from_be_bytes([h[0], h[1], h[2], h[3]])
}

/// Takes the locks of `names` in key order, so that two batches can never
/// wait on each other.
fn lock_orgs<C: GenericClient>(
    db: &mut Db<'_, C>,
    names: &HashSet<String>,
) -> Result<(), StoreError> {
    let mut keys: Vec<i32> = names.iter().map(|n| lock_key(n)).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        db.execute(
            "SELECT pg_advisory_xact_lock($1, $2)",
            &[&LOCK_CLASS, &key],
            "locking an org",
        )?;
    }
    Ok(())
}

/// Loads a locked org's state from committed data, catching the cached
/// frontier up with what other processes appended.
fn load_org<C: GenericClient>(
    db: &mut Db<'_, C>,
    cache: &mut Cache,
    name: &str,
) -> Result<Option<OrgState>, StoreError> {
    let Some(row) = db.query_opt(
        "SELECT o.org, EXISTS (SELECT 1 FROM org_origins g WHERE g.org = o.org),
           m.id, c.size, c.created_at, c.root, (SELECT logged_at FROM entries WHERE id = m.id)
         FROM orgs o
         LEFT JOIN LATERAL (
           SELECT max(e.id) AS id FROM entries e WHERE e.id >= (o.org << 40) AND e.id < ((o.org + 1) << 40)
         ) m ON TRUE
         LEFT JOIN LATERAL (
           SELECT size, created_at, root FROM checkpoints c WHERE c.org = o.org ORDER BY size DESC LIMIT 1
         ) c ON TRUE
         WHERE o.name = $1",
        &[&name],
        "loading an org",
    )?
    else {
        return Ok(None);
    };
    let id: i64 = col(&row, 0)?;
    let foreign: bool = col(&row, 1)?;
    let max_id: Option<i64> = col(&row, 2)?;
    let size = max_id.map_or(0, |max| u64_of(max - (id << 40)) + 1);
    let checkpoint_size: Option<i64> = col(&row, 3)?;
    let checkpoint_at: Option<i64> = col(&row, 4)?;
    let checkpoint_root: Option<Vec<u8>> = col(&row, 5)?;
    let last_logged: Option<i64> = col(&row, 6)?;
    let signed = checkpoint_size.map_or(0, u64_of);
    if signed > size {
        return Err(StoreError::Corrupt(format!(
            "the log of org {name} holds {size} entries, fewer than its latest signed checkpoint ({signed}): entries were removed"
        )));
    }
    // A cached frontier was folded from checked leaves; otherwise start at
    // the latest signed checkpoint, whose root the stored subtrees must
    // give. Either way the leaves after it are folded again from their rows.
    let cached = cache
        .frontiers
        .get(&id)
        .filter(|f| f.size() <= size && f.size() >= signed && size - f.size() <= CATCH_UP_LIMIT);
    let mut frontier = match cached {
        Some(f) => f.clone(),
        None => {
            let frontier = frontier_of(&PgTree {
                db: RefCell::new(Db {
                    client: &mut *db.client,
                    statements: &mut *db.statements,
                }),
                org: id,
                size: signed,
            })?;
            if let Some(root) = checkpoint_root
                && frontier.root() != blob_hash(root)?
            {
                return Err(StoreError::Corrupt(format!(
                    "the stored tree of org {name} does not give the root its latest checkpoint signed (size {signed})"
                )));
            }
            frontier
        }
    };
    if frontier.size() < size {
        let rows = db.query(
            "SELECT seq, type, record_hash, logged_at, leaf_hash FROM entries
             WHERE id >= $1 AND id < $2 ORDER BY id",
            &[&row_id(id, frontier.size()), &row_id(id, size)],
            "catching up with the log",
        )?;
        for row in &rows {
            let seq: i64 = col(row, 0)?;
            let entry_type: String = col(row, 1)?;
            let record = blob_hash(col(row, 2)?)?;
            let logged_at = Timestamp::from_micros(col(row, 3)?)
                .ok_or_else(|| StoreError::Corrupt("a logged time out of range".into()))?;
            let leaf = leaf_hash(&cairn_core::log::log_leaf_data(
                u64_of(seq),
                &entry_type,
                &record,
                logged_at,
            ));
            if u64_of(seq) != frontier.size() || leaf != blob_hash(col(row, 4)?)? {
                return Err(StoreError::Corrupt(format!(
                    "entry {seq} of org {name} does not match its stored leaf or follows a gap"
                )));
            }
            frontier.push(leaf);
        }
        if frontier.size() != size {
            return Err(StoreError::Corrupt(format!(
                "the log of org {name} has a gap before seq {size}"
            )));
        }
    }
    cache.frontiers.insert(id, frontier.clone());
    Ok(Some(OrgState {
        id,
        foreign,
        frontier,
        checkpoint_size: signed,
        checkpoint_at: checkpoint_at.and_then(Timestamp::from_micros),
        last_logged: last_logged
            .and_then(Timestamp::from_micros)
            .unwrap_or_default(),
    }))
}

/// One `entries` row, owned, waiting for the batch's `COPY`.
#[derive(Default)]
struct EntryRow {
    id: i64,
    org: i64,
    seq: i64,
    entry_type: String,
    logged_at: i64,
    record_hash: Vec<u8>,
    leaf_hash: Vec<u8>,
    view: Option<String>,
    sid: Option<i64>,
    step_index: Option<i64>,
    trace_id: Option<String>,
    agent_id: Option<String>,
    kind: Option<String>,
    kind_label: Option<String>,
    content: Option<String>,
    input_data: Option<String>,
    output_data: Option<String>,
    confidence: Option<f64>,
    duration_ms: Option<i64>,
    token_count: Option<i64>,
    model: Option<String>,
    metadata: Option<String>,
    created_at: Option<i64>,
    turn_id: Option<String>,
    turn_step: Option<i64>,
    task_id: Option<String>,
    links: Option<String>,
    status: Option<String>,
    seed: Option<Vec<u8>>,
    digest: Option<Vec<u8>>,
    prev_hash: Option<Vec<u8>>,
    sig_key_id: Option<String>,
    signature: Option<Vec<u8>>,
    has_embedding: bool,
    erased: bool,
    hidden: Option<String>,
    salts: Option<Vec<u8>>,
    prev_seq: Option<i64>,
}

const COPY_ENTRIES: &str = "COPY entries (id, org, seq, type, logged_at, record_hash, leaf_hash, view, sid, step_index,
    trace_id, agent_id, kind, kind_label, content, input_data, output_data, confidence, duration_ms, token_count,
    model, metadata, created_at, turn_id, turn_step, task_id, links, status, seed, digest, prev_hash, sig_key_id,
    signature, has_embedding, erased, hidden, salts, prev_seq) FROM STDIN BINARY";

/// Column types of [`COPY_ENTRIES`], in order.
const ENTRY_TYPES: [Type; 38] = [
    Type::INT8,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::INT8,
    Type::BYTEA,
    Type::BYTEA,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::FLOAT8,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::BYTEA,
    Type::BYTEA,
    Type::BYTEA,
    Type::TEXT,
    Type::BYTEA,
    Type::BOOL,
    Type::BOOL,
    Type::TEXT,
    Type::BYTEA,
    Type::INT8,
];

/// Rows a batch wrote but has not sent yet: they go in a few round trips
/// (one `COPY` for every log entry) before anything reads them back and
/// before the commit.
#[derive(Default)]
struct Pending {
    entries: Vec<EntryRow>,
    nodes: Vec<(i64, i32, i64, Vec<u8>)>,
    /// Steps queued for the embedder: (id, org).
    embed_queue: Vec<(i64, i64)>,
    /// Full-text documents: (id, org, document), the document as its
    /// `tsvector` text when that was computed before the org's lock.
    search: Vec<(i64, i64, SearchDoc)>,
    heads: Vec<(i64, i64, i64, i64)>,
    /// `(session, kind)` pairs for `session_kinds`.
    kinds: Vec<(i64, &'static str)>,
}

/// A step's full-text document on its way to `step_search`.
enum SearchDoc {
    /// The document: `to_tsvector` runs in the insert.
    Text(String),
    /// `to_tsvector`'s answer for it, as text, computed before the batch
    /// took its orgs' locks.
    Vector(String),
}

/// Computes `to_tsvector('english', doc)` for the documents of a batch's
/// prepared steps before the batch takes its orgs' locks: stemming every
/// document was most of the time the derived rows' insert held an org's
/// lock. Keyed by document (a step prepared inside the batch is
/// vectorised in the insert).
fn vectors_before_locking<C: GenericClient>(
    db: &mut Db<'_, C>,
    batch: &[WriteRequest],
) -> Result<HashMap<String, String>, StoreError> {
    let docs: Vec<&str> = batch
        .iter()
        .filter_map(|request| match request {
            WriteRequest::Prepared(p) => p.search_doc.as_deref(),
            _ => None,
        })
        .collect();
    if docs.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = db.query(
        "SELECT to_tsvector('english', t.doc)::text
         FROM UNNEST($1::text[]) WITH ORDINALITY AS t(doc, n) ORDER BY t.n",
        &[&docs],
        "preparing full-text documents",
    )?;
    let mut vectors = HashMap::with_capacity(docs.len());
    for (doc, row) in docs.into_iter().zip(&rows) {
        vectors.insert(doc.to_owned(), col::<String>(row, 0)?);
    }
    Ok(vectors)
}

/// A batch's transaction, seen by the engine: the orgs it locked, loaded
/// from committed data, the sessions it will touch, read in one query per
/// org, and the rows it writes, sent in bulk.
struct PgTx<'a, C: GenericClient> {
    db: Db<'a, C>,
    orgs: HashMap<String, OrgState>,
    locked: HashSet<String>,
    /// Committed state of sessions read ahead (None: does not exist).
    sessions: HashMap<(i64, String), Option<SessionState>>,
    pending: Pending,
    cache: &'a mut Cache,
    /// `tsvector`s computed before locking, by document.
    vectors: HashMap<String, String>,
}

/// The sessions of a batch: registry row, seal, the step the head row
/// names and whether the log holds a step after it (the head lags: the
/// walk forward then probes step by step, which is rare; checking here
/// saves the batch a round trip per session).
static SESSIONS_BY_ID: &str = "SELECT s.session_id, s.sid, s.agent_id, s.profile, s.genesis,
   s.max_clock_skew_s, EXISTS (SELECT 1 FROM entries x WHERE x.sid = s.sid AND x.type = 'seal'),
   h.first_seq, e.seq, e.step_index, e.record_hash, e.created_at, e.kind,
   EXISTS (SELECT 1 FROM entries n WHERE COALESCE(n.prev_seq, -1) = COALESCE(e.seq, -1)
             AND n.sid = s.sid AND n.type = 'step')
 FROM sessions s LEFT JOIN session_heads h ON h.sid = s.sid
 LEFT JOIN entries e ON e.id = ((s.org << 40) | h.last_seq) AND e.sid = s.sid AND e.type = 'step'
   AND e.step_index = h.last_index
 WHERE s.org = $1 AND s.session_id = ANY($2)";

/// A session from a row of [`SESSIONS_BY_ID`], with the step its head row
/// names as the end (to be walked forward to the log's real end if the
/// last column says the log holds a step after it).
fn session_from_row(row: &Row) -> Result<(String, StoredSession), StoreError> {
    let seq: Option<i64> = col(row, 8)?;
    let end = match seq {
        Some(seq) => Some(ChainEnd {
            seq,
            index: col(row, 9)?,
            hash: col(row, 10)?,
            created_at: col(row, 11)?,
            kind: col(row, 12)?,
        }),
        None => None,
    };
    Ok((
        col(row, 0)?,
        StoredSession {
            sid: col(row, 1)?,
            agent_id: col(row, 2)?,
            profile: col(row, 3)?,
            genesis: col(row, 4)?,
            max_clock_skew_s: col(row, 5)?,
            sealed: col(row, 6)?,
            first_seq: col(row, 7)?,
            end,
        },
    ))
}

impl<'a, C: GenericClient> PgTx<'a, C> {
    /// Locks the orgs `names` for the transaction and loads their state.
    fn begin(
        mut db: Db<'a, C>,
        names: HashSet<String>,
        cache: &'a mut Cache,
    ) -> Result<PgTx<'a, C>, StoreError> {
        lock_orgs(&mut db, &names)?;
        let mut orgs = HashMap::new();
        for name in &names {
            if let Some(org) = load_org(&mut db, cache, name)? {
                orgs.insert(name.clone(), org);
            }
        }
        Ok(PgTx {
            db,
            orgs,
            locked: names,
            sessions: HashMap::new(),
            pending: Pending::default(),
            cache,
            vectors: HashMap::new(),
        })
    }

    /// Reads the committed state of the sessions `ids` of `org`: their
    /// rows, each with whether the log holds a step after the one its head
    /// row names, in one query; a session whose head row lags is then
    /// walked forward probe by probe.
    fn prefetch_sessions(&mut self, org: i64, ids: &[String]) -> Result<(), StoreError> {
        let rows = self
            .db
            .query(SESSIONS_BY_ID, &[&org, &ids], "loading sessions")?;
        for id in ids {
            self.sessions.insert((org, id.clone()), None);
        }
        for row in &rows {
            let (id, mut stored) = session_from_row(row)?;
            let sid = stored.sid;
            let lags: bool = col(row, 13)?;
            if lags {
                stored.end = chain_end(stored.end.take(), |seq| successor(&mut self.db, sid, seq))?;
            }
            if stored.end.is_some() && stored.first_seq.is_none() {
                stored.first_seq = successor(&mut self.db, sid, None)?.map(|e| e.seq);
            }
            self.sessions.insert((org, id), Some(stored.into_state()?));
        }
        Ok(())
    }

    /// Bounds the memory a large import holds.
    fn flush_if_large(&mut self) -> Result<(), StoreError> {
        if self.pending.entries.len() >= FLUSH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends every pending row.
    fn flush(&mut self) -> Result<(), StoreError> {
        let pending = std::mem::take(&mut self.pending);
        if !pending.entries.is_empty() {
            let sink = self
                .db
                .client
                .copy_in(COPY_ENTRIES)
                .context("writing log entries")?;
            let mut writer = BinaryCopyInWriter::new(sink, &ENTRY_TYPES);
            for e in &pending.entries {
                writer
                    .write(&[
                        &e.id,
                        &e.org,
                        &e.seq,
                        &e.entry_type,
                        &e.logged_at,
                        &e.record_hash,
                        &e.leaf_hash,
                        &e.view,
                        &e.sid,
                        &e.step_index,
                        &e.trace_id,
                        &e.agent_id,
                        &e.kind,
                        &e.kind_label,
                        &e.content,
                        &e.input_data,
                        &e.output_data,
                        &e.confidence,
                        &e.duration_ms,
                        &e.token_count,
                        &e.model,
                        &e.metadata,
                        &e.created_at,
                        &e.turn_id,
                        &e.turn_step,
                        &e.task_id,
                        &e.links,
                        &e.status,
                        &e.seed,
                        &e.digest,
                        &e.prev_hash,
                        &e.sig_key_id,
                        &e.signature,
                        &e.has_embedding,
                        &e.erased,
                        &e.hidden,
                        &e.salts,
                        &e.prev_seq,
                    ])
                    .context("writing log entries")?;
            }
            writer.finish().context("writing log entries")?;
        }
        // Every derived row of the batch in one statement (one round trip
        // inside the org's lock instead of five; each part inserts nothing
        // when its arrays are empty).
        let derived = pending.nodes.len()
            + pending.embed_queue.len()
            + pending.search.len()
            + pending.kinds.len()
            + pending.heads.len();
        if derived == 0 {
            return Ok(());
        }
        let (node_orgs, levels, node_indexes, node_hashes) = unzip4(pending.nodes);
        let (queued_ids, queued_orgs): (Vec<i64>, Vec<i64>) =
            pending.embed_queue.into_iter().unzip();
        let mut search_ids = Vec::with_capacity(pending.search.len());
        let mut search_orgs = Vec::with_capacity(pending.search.len());
        let mut docs: Vec<Option<String>> = Vec::with_capacity(pending.search.len());
        let mut vectors: Vec<Option<String>> = Vec::with_capacity(pending.search.len());
        for (id, org, doc) in pending.search {
            search_ids.push(id);
            search_orgs.push(org);
            match doc {
                SearchDoc::Text(text) => {
                    docs.push(Some(text));
                    vectors.push(None);
                }
                SearchDoc::Vector(vector) => {
                    docs.push(None);
                    vectors.push(Some(vector));
                }
            }
        }
        let mut kinds = pending.kinds;
        // One order for every writer: concurrent inserts of the same keys
        // then wait rather than deadlock.
        kinds.sort_unstable();
        kinds.dedup();
        let (kind_sids, kind_names): (Vec<i64>, Vec<&str>) = kinds.into_iter().unzip();
        let (head_sids, firsts, lasts, last_indexes) = unzip4(pending.heads);
        self.db.execute(
            "WITH n AS (
               INSERT INTO nodes (org, level, idx, hash)
               SELECT * FROM UNNEST($1::int8[], $2::int4[], $3::int8[], $4::bytea[])
             ), q AS (
               INSERT INTO embedding_queue (id, org)
               SELECT * FROM UNNEST($5::int8[], $6::int8[]) ON CONFLICT DO NOTHING
             ), f AS (
               INSERT INTO step_search (id, org, doc)
               SELECT t.id, t.org, COALESCE(t.vector::tsvector, to_tsvector('english', t.doc))
               FROM UNNEST($7::int8[], $8::int8[], $9::text[], $16::text[]) AS t(id, org, doc, vector)
             ), k AS (
               INSERT INTO session_kinds (sid, kind)
               SELECT * FROM UNNEST($10::int8[], $11::text[]) ON CONFLICT DO NOTHING
             ), h AS (
               INSERT INTO session_heads (sid, first_seq, last_seq, last_index)
               SELECT * FROM UNNEST($12::int8[], $13::int8[], $14::int8[], $15::int8[])
               ON CONFLICT (sid) DO UPDATE SET last_seq = excluded.last_seq, last_index = excluded.last_index
               WHERE session_heads.first_seq = excluded.first_seq
                 AND session_heads.last_seq < excluded.last_seq
                 AND session_heads.last_index < excluded.last_index
             )
             SELECT 1",
            &[
                &node_orgs,
                &levels,
                &node_indexes,
                &node_hashes,
                &queued_ids,
                &queued_orgs,
                &search_ids,
                &search_orgs,
                &docs,
                &kind_sids,
                &kind_names,
                &head_sids,
                &firsts,
                &lasts,
                &last_indexes,
                &vectors,
            ],
            "writing the batch's tree nodes, search documents and session heads",
        )?;
        Ok(())
    }
}

fn unzip4<A, B, C, D>(rows: Vec<(A, B, C, D)>) -> (Vec<A>, Vec<B>, Vec<C>, Vec<D>) {
    let mut out = (
        Vec::with_capacity(rows.len()),
        Vec::with_capacity(rows.len()),
        Vec::with_capacity(rows.len()),
        Vec::with_capacity(rows.len()),
    );
    for (a, b, c, d) in rows {
        out.0.push(a);
        out.1.push(b);
        out.2.push(c);
        out.3.push(d);
    }
    out
}

impl<C: GenericClient> WriteTx for PgTx<'_, C> {
    fn org(&mut self, name: &str) -> Result<Option<OrgState>, StoreError> {
        if !self.locked.contains(name) {
            return Err(StoreError::Corrupt(format!(
                "internal: org {name} was used without its lock"
            )));
        }
        Ok(self.orgs.get(name).cloned())
    }

    fn create_org(&mut self, name: &str) -> Result<i64, StoreError> {
        let row = self.db.query_one(
            "INSERT INTO orgs (name) VALUES ($1) RETURNING org",
            &[&name],
            "creating an org",
        )?;
        col(&row, 0)
    }

    fn session(&mut self, org: i64, session_id: &str) -> Result<Option<SessionState>, StoreError> {
        let key = (org, session_id.to_owned());
        if !self.sessions.contains_key(&key) {
            self.prefetch_sessions(org, &[session_id.to_owned()])?;
        }
        Ok(self.sessions.get(&key).cloned().flatten())
    }

    fn agent_key(&mut self, org: i64, key_id: &str) -> Result<Option<AgentKey>, StoreError> {
        let count: i64 = col(
            &self.db.query_one(
                "SELECT count(*) FROM entries
                 WHERE org = $1 AND type IN ('key-registration', 'key-revocation')",
                &[&org],
                "counting key records",
            )?,
            0,
        )?;
        let fresh = self.cache.keys.get(&org).is_some_and(|(n, _)| *n == count);
        if !fresh {
            let rows = self.db.query(
                "SELECT seq, type, view FROM entries
                 WHERE org = $1 AND type IN ('key-registration', 'key-revocation') ORDER BY id",
                &[&org],
                "loading agent keys",
            )?;
            let mut keys: HashMap<String, AgentKey> = HashMap::new();
            for row in &rows {
                let seq = u64_of(col(row, 0)?);
                let entry_type: String = col(row, 1)?;
                let view: String = col(row, 2)?;
                match op_from_view(seq, &entry_type, &view)? {
                    OpRecord::KeyRegistration(reg) => {
                        keys.insert(
                            reg.key_id,
                            AgentKey {
                                agent_id: reg.agent_id,
                                key: reg.public_key,
                                seq,
                                revoked: false,
                            },
                        );
                    }
                    OpRecord::KeyRevocation(rev) => {
                        if let Some(key) = keys.get_mut(&rev.key_id) {
                            key.revoked = true;
                        }
                    }
                    _ => {}
                }
            }
            self.cache.keys.insert(org, (count, keys));
        }
        Ok(self
            .cache
            .keys
            .get(&org)
            .and_then(|(_, keys)| keys.get(key_id))
            .cloned())
    }

    fn record_type(&mut self, org: i64, id: &str) -> Result<Option<String>, StoreError> {
        self.flush()?;
        self.db
            .query_opt(
                "SELECT type FROM entries WHERE org = $1 AND trace_id = $2",
                &[&org, &id],
                "looking up a record by id",
            )?
            .map(|row| col(&row, 0))
            .transpose()
    }

    fn session_sealed_with(&mut self, org: i64, hash: &Hash) -> Result<Option<String>, StoreError> {
        self.flush()?;
        self.db
            .query_opt(
                "SELECT s.session_id FROM entries e JOIN sessions s ON s.sid = e.sid
                 WHERE e.org = $1 AND e.type = 'seal' AND e.view::jsonb ->> 'final_hash' = $2",
                &[&org, &hash.to_hex()],
                "looking up a sealed session",
            )?
            .map(|row| col(&row, 0))
            .transpose()
    }

    fn successor_of(&mut self, org: i64, hash: &Hash) -> Result<Option<String>, StoreError> {
        self.flush()?;
        self.db
            .query_opt(
                "SELECT view::jsonb ->> 'session_id' FROM entries
                 WHERE org = $1 AND type = 'session-start' AND view::jsonb ->> 'predecessor' = $2",
                &[&org, &hash.to_hex()],
                "looking up a successor",
            )?
            .map(|row| col(&row, 0))
            .transpose()
    }

    fn trace_id_taken(&mut self, org: i64, trace_id: &str) -> Result<bool, StoreError> {
        self.flush()?;
        let row = self.db.query_one(
            "SELECT EXISTS (SELECT 1 FROM entries WHERE org = $1 AND trace_id = $2)",
            &[&org, &trace_id],
            "checking a trace id",
        )?;
        col(&row, 0)
    }

    fn insert_step(&mut self, row: &StepRow<'_>) -> Result<(), StoreError> {
        let s = row.step;
        self.pending.entries.push(EntryRow {
            id: row_id(row.org, row.seq),
            org: row.org,
            seq: i64_of(row.seq),
            entry_type: "step".into(),
            logged_at: row.logged_at.as_micros(),
            record_hash: row.hash.0.to_vec(),
            leaf_hash: row.leaf.0.to_vec(),
            view: None,
            sid: Some(row.sid),
            step_index: Some(i64_of(s.step_index)),
            trace_id: Some(s.trace_id.clone()),
            agent_id: Some(s.agent_id.clone()),
            kind: Some(s.kind.as_str().to_owned()),
            kind_label: Some(s.kind_label.clone()),
            content: s.content.clone(),
            input_data: json_text(&s.input),
            output_data: json_text(&s.output),
            confidence: s.confidence,
            duration_ms: s.duration_ms.map(i64_of),
            token_count: s.token_count.map(i64_of),
            model: s.model.clone(),
            metadata: json_text(&s.metadata),
            created_at: Some(s.created_at.as_micros()),
            turn_id: s.turn_id.clone(),
            turn_step: s.turn_step.map(i64_of),
            task_id: s.task_id.clone(),
            links: links_text(&s.links),
            status: Some(s.status.as_str().to_owned()),
            seed: row.seed.map(|seed| seed.to_vec()),
            digest: Some(row.digest.0.to_vec()),
            prev_hash: Some(row.prev_hash.0.to_vec()),
            sig_key_id: s.signer_key_id.clone(),
            signature: row.signature.map(|sig| sig.to_vec()),
            has_embedding: row.has_embedding,
            erased: row.erased,
            hidden: row.hidden.clone(),
            salts: row.salts.clone(),
            prev_seq: row.prev_seq.map(i64_of),
        });
        self.flush_if_large()
    }

    fn insert_search_doc(&mut self, org: i64, seq: u64, doc: &str) -> Result<(), StoreError> {
        let doc = match self.vectors.get(doc) {
            Some(vector) => SearchDoc::Vector(vector.clone()),
            None => SearchDoc::Text(doc.to_owned()),
        };
        self.pending.search.push((row_id(org, seq), org, doc));
        Ok(())
    }

    fn queue_embedding(&mut self, org: i64, seq: u64) -> Result<(), StoreError> {
        self.pending.embed_queue.push((row_id(org, seq), org));
        Ok(())
    }

    fn insert_op(&mut self, row: &OpRow<'_>) -> Result<(), StoreError> {
        self.pending.entries.push(EntryRow {
            id: row_id(row.org, row.seq),
            org: row.org,
            seq: i64_of(row.seq),
            entry_type: row.op.entry_type().to_owned(),
            logged_at: row.logged_at.as_micros(),
            record_hash: row.hash.0.to_vec(),
            leaf_hash: row.leaf.0.to_vec(),
            view: Some(row.op.to_view().to_string()),
            trace_id: op_record_id(row.op).map(str::to_owned),
            sid: row.sid,
            step_index: row.step_index.map(i64_of),
            agent_id: row.agent_id.map(str::to_owned),
            ..EntryRow::default()
        });
        self.flush_if_large()
    }

    fn insert_node(
        &mut self,
        org: i64,
        level: u32,
        index: u64,
        hash: &Hash,
    ) -> Result<(), StoreError> {
        self.pending
            .nodes
            .push((org, level as i32, i64_of(index), hash.0.to_vec()));
        Ok(())
    }

    fn insert_session(
        &mut self,
        org: i64,
        header: &SessionHeader,
        genesis: &Hash,
        start_seq: u64,
    ) -> Result<i64, StoreError> {
        let row = self.db.query_one(
            "INSERT INTO sessions (org, session_id, agent_id, profile, started_at, start_seq, genesis,
             max_clock_skew_s)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING sid",
            &[
                &org,
                &header.session_id,
                &header.agent_id,
                &header.profile.as_str(),
                &header.started_at.as_micros(),
                &i64_of(start_seq),
                &&genesis.0[..],
                &i64_of(header.max_clock_skew_s),
            ],
            "writing a session",
        )?;
        col(&row, 0)
    }

    fn chain_link(&mut self, org: i64, seq: u64) -> Result<(u64, Hash, Option<u64>), StoreError> {
        self.flush()?;
        let row = self.db.query_one(
            "SELECT step_index, record_hash, prev_seq FROM entries WHERE id = $1",
            &[&row_id(org, seq)],
            "reading a session's chain",
        )?;
        let index: i64 = col(&row, 0)?;
        let prev: Option<i64> = col(&row, 2)?;
        Ok((u64_of(index), blob_hash(col(&row, 1)?)?, prev.map(u64_of)))
    }

    fn step_by_trace(
        &mut self,
        org: i64,
        trace_id: &str,
    ) -> Result<Option<StoredStep>, StoreError> {
        self.flush()?;
        self.db
            .query_opt(&STEP_BY_TRACE, &[&org, &trace_id], "finding a step")?
            .map(|row| step_from_row(&row))
            .transpose()
    }

    fn erase(&mut self, org: i64, seq: u64, hidden: &str) -> Result<(), StoreError> {
        self.flush()?;
        let id = row_id(org, seq);
        self.db.execute(
            "UPDATE entries SET content = NULL, input_data = NULL, output_data = NULL, metadata = NULL,
             erased = TRUE, hidden = $2, has_embedding = FALSE WHERE id = $1",
            &[&id, &hidden],
            "erasing a step",
        )?;
        // A vector would still carry what the content said.
        for sql in [
            "DELETE FROM vectors WHERE id = $1",
            "DELETE FROM embedding_queue WHERE id = $1",
        ] {
            self.db.execute(sql, &[&id], "erasing an embedding")?;
        }
        self.db.execute(
            "DELETE FROM step_search WHERE id = $1",
            &[&id],
            "erasing a step from the full-text index",
        )?;
        Ok(())
    }

    fn expired_sessions(
        &mut self,
        org: i64,
        older_than: Timestamp,
    ) -> Result<Vec<i64>, StoreError> {
        self.flush()?;
        // Candidates by their head rows, confirmed by the log.
        let candidates: Vec<i64> = self
            .db
            .query(
                "SELECT s.sid FROM sessions s JOIN session_heads h ON h.sid = s.sid
                 LEFT JOIN entries e ON e.id = ((s.org << 40) | h.last_seq) AND e.sid = s.sid
                   AND e.type = 'step' AND e.step_index = h.last_index
                 WHERE s.org = $1 AND (e.id IS NULL OR e.created_at < $2)",
                &[&org, &older_than.as_micros()],
                "finding expired sessions",
            )?
            .iter()
            .map(|r| col(r, 0))
            .collect::<Result<_, _>>()?;
        let mut expired = Vec::new();
        for sid in candidates {
            if true_end(&mut self.db, org, sid)?
                .is_some_and(|e| e.created_at < older_than.as_micros())
            {
                expired.push(sid);
            }
        }
        Ok(expired)
    }

    fn unerased_steps(&mut self, org: i64, sid: i64) -> Result<Vec<String>, StoreError> {
        self.flush()?;
        let ids = session_ids(&mut self.db, org, sid)?;
        let rows = self.db.query(
            "SELECT trace_id FROM entries WHERE id = ANY($1) AND NOT erased ORDER BY id",
            &[&ids],
            "reading an expired session",
        )?;
        rows.iter().map(|r| col(r, 0)).collect()
    }

    fn insert_checkpoint(&mut self, org: i64, cp: &StoredCheckpoint) -> Result<(), StoreError> {
        self.db.execute(
            "INSERT INTO checkpoints (org, size, root, note, created_at) VALUES ($1, $2, $3, $4, $5)",
            &[
                &org,
                &i64_of(cp.size),
                &&cp.root.0[..],
                &cp.note,
                &cp.created_at.as_micros(),
            ],
            "writing a checkpoint",
        )?;
        Ok(())
    }

    fn latest_checkpoint(
        &mut self,
        org: i64,
        name: &str,
    ) -> Result<Option<StoredCheckpoint>, StoreError> {
        latest_checkpoint(&mut self.db, org, name)
    }

    fn put_session_kinds(
        &mut self,
        pairs: &[(i64, cairn_core::kind::StepKind)],
    ) -> Result<(), StoreError> {
        self.pending
            .kinds
            .extend(pairs.iter().map(|(sid, kind)| (*sid, kind.as_str())));
        Ok(())
    }

    fn put_session_head(
        &mut self,
        sid: i64,
        first_seq: u64,
        last_seq: u64,
        last_index: u64,
    ) -> Result<(), StoreError> {
        self.pending
            .heads
            .push((sid, i64_of(first_seq), i64_of(last_seq), i64_of(last_index)));
        Ok(())
    }

    fn insert_origin(
        &mut self,
        org: i64,
        server_name: &str,
        server_key: &str,
    ) -> Result<(), StoreError> {
        self.db.execute(
            "INSERT INTO org_origins (org, server_name, server_key) VALUES ($1, $2, $3)",
            &[&org, &server_name, &server_key],
            "recording the org's origin",
        )?;
        Ok(())
    }
}

/// A log entry from a row selected with [`STEP_COLUMNS`] followed by
/// `type, view, leaf_hash` (at `n`, `n + 1`, `n + 2`).
fn entry_from_row(row: &Row, n: usize) -> Result<LogEntry, StoreError> {
    let entry_type: String = col(row, n)?;
    if entry_type == "step" {
        let stored = step_from_row(row)?;
        return Ok(LogEntry {
            seq: stored.seq,
            logged_at: stored.logged_at,
            record: LogRecord::Step(stored.record),
        });
    }
    let seq = u64_of(col(row, 0)?);
    let view: Option<String> = col(row, n + 1)?;
    let view = view.ok_or_else(|| StoreError::Corrupt(format!("record {seq} has no view")))?;
    Ok(LogEntry {
        seq,
        logged_at: Timestamp::from_micros(col(row, n - 1)?)
            .ok_or_else(|| StoreError::Corrupt(format!("record {seq}: time out of range")))?,
        record: LogRecord::Op {
            record: op_from_view(seq, &entry_type, &view)?,
            hash: blob_hash(col(row, 22)?)?,
        },
    })
}

fn latest_checkpoint<C: GenericClient>(
    db: &mut Db<'_, C>,
    org: i64,
    name: &str,
) -> Result<Option<StoredCheckpoint>, StoreError> {
    db.query_opt(
        "SELECT size, root, note, created_at FROM checkpoints WHERE org = $1 ORDER BY size DESC LIMIT 1",
        &[&org],
        "reading the latest checkpoint",
    )?
    .map(|row| checkpoint_from_row(&row, name))
    .transpose()
}

fn checkpoint_from_row(row: &Row, name: &str) -> Result<StoredCheckpoint, StoreError> {
    Ok(StoredCheckpoint {
        org_id: name.to_owned(),
        size: u64_of(col(row, 0)?),
        root: blob_hash(col(row, 1)?)?,
        note: col(row, 2)?,
        created_at: Timestamp::from_micros(col(row, 3)?).unwrap_or_default(),
    })
}

fn api_key_from_row(row: &Row) -> Result<ApiKey, StoreError> {
    let role: String = col(row, 2)?;
    let revoked: Option<i64> = col(row, 7)?;
    Ok(ApiKey {
        id: col(row, 0)?,
        org_id: col(row, 1)?,
        role: Role::parse(&role)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown role {role}")))?,
        agent_id: col(row, 3)?,
        token_hash: blob_hash(col(row, 4)?)?,
        label: col(row, 5)?,
        created_at: Timestamp::from_micros(col(row, 6)?).unwrap_or_default(),
        revoked_at: revoked.and_then(Timestamp::from_micros),
    })
}

/// A value PostgreSQL sent as text, as JSON by its column type.
/// An analyst query's error as the caller should read it.
fn pg_analyst_failure(e: &postgres::Error, limits: &analyst::QueryLimits) -> AnalystError {
    match e.as_db_error() {
        Some(d) if *d.code() == postgres::error::SqlState::QUERY_CANCELED => {
            AnalystError::TimedOut(limits.time)
        }
        Some(d) if *d.code() == postgres::error::SqlState::PROGRAM_LIMIT_EXCEEDED => {
            AnalystError::TooLarge(d.message().to_owned())
        }
        Some(d) => AnalystError::Failed(d.message().to_owned()),
        None => AnalystError::Failed(e.to_string()),
    }
}

fn pg_text_value(text: Option<&str>, ty: &Type) -> serde_json::Value {
    let Some(text) = text else {
        return serde_json::Value::Null;
    };
    let parsed = match *ty {
        Type::INT2 | Type::INT4 | Type::INT8 => text.parse::<i64>().ok().map(Into::into),
        Type::FLOAT4 | Type::FLOAT8 | Type::NUMERIC => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(serde_json::Value::Number),
        Type::BOOL => Some(serde_json::Value::Bool(text == "t" || text == "true")),
        Type::JSON | Type::JSONB => serde_json::from_str(text).ok(),
        _ => None,
    };
    parsed.unwrap_or_else(|| serde_json::Value::String(text.to_owned()))
}

/// The PostgreSQL store. See the module docs.
pub struct PgStore {
    config: postgres::Config,
    key: ServerKey,
    limits: Limits,
    checkpoint_interval: Duration,
    embedding_sample_rate: f64,
    max_clock_skew_s: u64,
    /// The sequencer's connection (batches, checkpoints, imports).
    writer: Mutex<Option<PgConn>>,
    readers: Mutex<Vec<PgConn>>,
    cache: Mutex<Cache>,
    /// The schema Cairn's tables are in (analyst views name it).
    schema: String,
    /// Semantic search's vectors in memory.
    vectors: crate::vector_index::VectorIndex,
}

fn poisoned() -> StoreError {
    StoreError::Corrupt("a previous panic poisoned the store's lock".into())
}

impl PgStore {
    /// Connects, migrates the schema if needed (installing the DDL guard
    /// when the role is a superuser), and checks that the database's logs
    /// are signed with `key`, recording it if this is the first server.
    pub fn open(options: PgOptions, key: ServerKey) -> Result<PgStore, StoreError> {
        let mut config: postgres::Config =
            options.url.parse().map_err(|e| StoreError::Postgres {
                context: "parsing the database URL".into(),
                source: e,
            })?;
        bound_network_waits(&mut config, options.network_timeout);
        let mut conn = connect(&config)?;
        migrate(&mut conn.client)?;
        embedding::check_embedding_grants(&mut conn.client)?;
        install_guard(&mut conn.client)?;
        let vkey = key.verifier.to_string();
        let mut db = conn.db();
        db.execute(
            "INSERT INTO cairn_meta (key, value) VALUES ('server_key', $1) ON CONFLICT (key) DO NOTHING",
            &[&vkey],
            "recording the server key",
        )?;
        let recorded: String = col(
            &db.query_one(
                "SELECT value FROM cairn_meta WHERE key = 'server_key'",
                &[],
                "reading the server key",
            )?,
            0,
        )?;
        let rows = meta_key_rows(&mut db)?;
        crate::keys::check_key_allowed(&recorded, &rows, &key.verifier, "this server's key file")
            .map_err(|e| {
                StoreError::Key(format!(
                    "{e} (every server on one database signs with a log key of the database: see docs/OPERATIONS.md)"
                ))
            })?;
        let schema: String = col(
            &db.query_one("SELECT current_schema()", &[], "reading the schema")?,
            0,
        )?;
        Ok(PgStore {
            schema,
            config,
            key,
            limits: options.limits,
            checkpoint_interval: options.checkpoint_interval,
            embedding_sample_rate: options.embedding_sample_rate.clamp(0.0, 1.0),
            max_clock_skew_s: options.max_clock_skew_s,
            writer: Mutex::new(Some(conn)),
            readers: Mutex::new(Vec::new()),
            cache: Mutex::new(Cache::default()),
            vectors: crate::vector_index::VectorIndex::new(
                options.vector_memory_bytes,
                options.vector_graph_min,
            ),
        })
    }

    fn engine(&self) -> Engine<'_> {
        Engine {
            key: &self.key,
            limits: self.limits,
            embedding_sample_rate: self.embedding_sample_rate,
            checkpoint_interval: self.checkpoint_interval,
            max_clock_skew_s: self.max_clock_skew_s,
        }
    }

    /// Runs `f` with the writer connection, reconnecting if it was lost.
    fn with_writer<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut PgConn, &mut Cache) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut writer = self.writer.lock().map_err(|_| poisoned())?;
        if writer.as_ref().is_none_or(|c| c.client.is_closed()) {
            *writer = None;
            *writer = Some(connect(&self.config)?);
        }
        let conn = writer
            .as_mut()
            .ok_or_else(|| StoreError::Corrupt("no writer connection".into()))?;
        let mut cache = self.cache.lock().map_err(|_| poisoned())?;
        let out = f(conn, &mut cache);
        if out.is_err() {
            // The cache may have been filled inside the failed transaction
            // from its own uncommitted rows (agent keys registered earlier
            // in the batch): forget it rather than trust what was rolled
            // back. It is rebuilt from committed data under the next lock.
            *cache = Cache::default();
        }
        out
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
        db.query_opt(
            "SELECT org FROM orgs WHERE name = $1",
            &[&name],
            "looking up an org",
        )?
        .map(|row| col(&row, 0))
        .transpose()
    }

    fn log_size_of<C: GenericClient>(db: &mut Db<'_, C>, org: i64) -> Result<u64, StoreError> {
        let (lo, hi) = org_range(org);
        let max: Option<i64> = col(
            &db.query_one(
                "SELECT max(id) FROM entries WHERE id >= $1 AND id < $2",
                &[&lo, &hi],
                "reading the log size",
            )?,
            0,
        )?;
        Ok(max.map_or(0, |id| u64_of(id - lo) + 1))
    }

    /// Runs a proof computation over an org's stored tree.
    fn with_tree<T>(
        &self,
        org_id: &str,
        mut prove: impl FnMut(
            &PgTree<'_, postgres::Client>,
        ) -> Result<T, cairn_core::merkle::ProofError<StoreError>>,
    ) -> Result<T, StoreError> {
        self.read(|db| {
            let org = Self::org_id_of(db, org_id)?
                .ok_or_else(|| StoreError::NotFound(format!("org {org_id} has no log")))?;
            let size = Self::log_size_of(db, org)?;
            let tree = PgTree {
                db: RefCell::new(Db {
                    client: &mut *db.client,
                    statements: &mut *db.statements,
                }),
                org,
                size,
            };
            prove(&tree).map_err(|e| match e {
                cairn_core::merkle::ProofError::Read(e) => e,
                cairn_core::merkle::ProofError::OutOfRange(m) => StoreError::NotFound(m),
            })
        })
    }

    /// One attempt at a batch: `Ok(Err(_))` when BEGIN failed, so that
    /// nothing of the batch was sent and it may be tried again.
    #[allow(clippy::type_complexity)]
    fn append_once(
        &self,
        batch: &[WriteRequest],
        names: HashSet<String>,
    ) -> Result<Result<Vec<Result<Written, Refusal>>, postgres::Error>, StoreError> {
        self.with_writer(|conn, cache| {
            // Dropping the transaction without commit (an error below) rolls
            // the whole batch back and releases the locks.
            // Before the transaction and its locks, and never fatal: a
            // document to_tsvector refuses (or a refused step's) is
            // vectorised, or fails, in the insert as before.
            let vectors = vectors_before_locking(
                &mut Db {
                    client: &mut conn.client,
                    statements: &mut conn.statements,
                },
                batch,
            )
            .unwrap_or_default();
            let mut tx = match conn.client.transaction() {
                Ok(tx) => tx,
                Err(e) => return Ok(Err(e)),
            };
            let db = Db {
                client: &mut tx,
                statements: &mut conn.statements,
            };
            let mut pg_tx = PgTx::begin(db, names, &mut *cache)?;
            pg_tx.vectors = vectors;
            // The sessions the batch appends to or seals, one query per org.
            let mut wanted: HashMap<i64, Vec<String>> = HashMap::new();
            for request in batch {
                let session = match request {
                    WriteRequest::Step(s) => &s.session_id,
                    WriteRequest::Prepared(p) => &p.step.session_id,
                    WriteRequest::Seal { session_id, .. } => session_id,
                    _ => continue,
                };
                if let Some(org) = pg_tx.orgs.get(request_org(request)) {
                    wanted.entry(org.id).or_default().push(session.clone());
                }
            }
            for (org, mut ids) in wanted {
                ids.sort_unstable();
                ids.dedup();
                pg_tx.prefetch_sessions(org, &ids)?;
            }
            let (results, overlay) = self.engine().run_batch(&mut pg_tx, batch)?;
            pg_tx.flush()?;
            drop(pg_tx);
            tx.commit().context("committing a batch")?;
            for org in overlay.orgs.into_values() {
                cache.frontiers.insert(org.id, org.frontier);
            }
            for (org, _) in overlay.keys.keys() {
                cache.keys.remove(org);
            }
            Ok(Ok(results))
        })
    }

    /// Checkpoints one org if it is due, under its lock.
    fn checkpoint_if_due(
        &self,
        conn: &mut PgConn,
        cache: &mut Cache,
        name: &str,
    ) -> Result<(), StoreError> {
        let mut tx = conn.client.transaction().context("starting a checkpoint")?;
        let db = Db {
            client: &mut tx,
            statements: &mut conn.statements,
        };
        let mut pg_tx = PgTx::begin(db, HashSet::from([name.to_owned()]), cache)?;
        let Some(mut org) = pg_tx.orgs.get(name).cloned() else {
            return Ok(());
        };
        let engine = self.engine();
        if org.foreign || !engine.due(&org) {
            return Ok(());
        }
        engine.checkpoint(&mut pg_tx, name, &mut org)?;
        pg_tx.flush()?;
        drop(pg_tx);
        tx.commit().context("committing a checkpoint")
    }
}

fn connect(config: &postgres::Config) -> Result<PgConn, StoreError> {
    let mut client = config.connect(NoTls).context("connecting to PostgreSQL")?;
    // Statements stay prepared for the connection's life; a generic plan
    // chosen while the tables were small (a sequential scan of `entries`)
    // would otherwise be kept as they grow, until the next ANALYZE.
    client
        .batch_execute("SET plan_cache_mode = force_custom_plan")
        .context("configuring the connection")?;
    Ok(PgConn {
        client,
        statements: HashMap::new(),
    })
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
        let horizon = now().as_micros().saturating_sub(
            i64::try_from(self.checkpoint_interval.as_micros()).unwrap_or(i64::MAX),
        );
        // Orgs whose log grew past their last checkpoint, which is old
        // enough: any process may sign, under the org's lock.
        let due: Vec<String> = self.read(|db| {
            db.query(
                "SELECT o.name FROM orgs o LEFT JOIN LATERAL (
                   SELECT size, created_at FROM checkpoints c WHERE c.org = o.org ORDER BY size DESC LIMIT 1
                 ) c ON TRUE
                 WHERE NOT EXISTS (SELECT 1 FROM org_origins g WHERE g.org = o.org)
                   AND COALESCE(c.created_at, 0) <= $1
                   AND EXISTS (SELECT 1 FROM entries e
                               WHERE e.id >= (o.org << 40) + COALESCE(c.size, 0) AND e.id < ((o.org + 1) << 40))",
                &[&horizon],
                "finding orgs to checkpoint",
            )?
            .iter()
            .map(|r| col(r, 0))
            .collect()
        })?;
        for name in due {
            self.with_writer(|conn, cache| self.checkpoint_if_due(conn, cache, &name))?;
        }
        Ok(())
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

    fn read_log(
        &self,
        org_id: &str,
        from: u64,
        to: u64,
        visit: &mut dyn FnMut(StoredEntry) -> bool,
    ) -> Result<(), StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(());
            };
            let (lo, hi) = org_range(org);
            let end = row_id(org, to).min(hi);
            let mut next = row_id(org, from).max(lo);
            let n = STEP_COLUMN_COUNT;
            while next < end {
                let rows = db.query(&LOG_PAGE, &[&next, &end, &PAGE], "reading the log")?;
                let Some(last) = rows.last() else {
                    break;
                };
                next = col::<i64>(last, 0)? + lo + 1;
                for row in &rows {
                    let seq: i64 = col(row, 0)?;
                    let leaf: Vec<u8> = col(row, n + 2)?;
                    let stored = StoredEntry {
                        seq: u64_of(seq),
                        leaf: blob_hash(leaf).unwrap_or(Hash::ZERO),
                        entry: entry_from_row(row, n).map_err(|e| e.to_string()),
                    };
                    if !visit(stored) {
                        return Ok(());
                    }
                }
            }
            Ok(())
        })
    }

    fn session(&self, org_id: &str, session_id: &str) -> Result<Option<SessionInfo>, StoreError> {
        self.read(|db| {
            let Some(row) = db.query_opt(
                "SELECT s.start_seq, s.genesis, start.view, s.org, s.sid,
                   (SELECT view FROM entries x WHERE x.sid = s.sid AND x.type = 'seal')
                 FROM sessions s JOIN orgs o ON o.org = s.org
                 JOIN entries start ON start.id = ((s.org << 40) | s.start_seq)
                 WHERE o.name = $1 AND s.session_id = $2",
                &[&org_id, &session_id],
                "reading a session",
            )?
            else {
                return Ok(None);
            };
            let start_seq: i64 = col(&row, 0)?;
            let OpRecord::SessionStart(header) =
                op_from_view(u64_of(start_seq), "session-start", &col::<String>(&row, 2)?)?
            else {
                return Err(StoreError::Corrupt(
                    "session start record has another type".into(),
                ));
            };
            let seal = match col::<Option<String>>(&row, 5)? {
                None => None,
                Some(view) => match op_from_view(0, "seal", &view)? {
                    OpRecord::Seal(seal) => Some(seal),
                    _ => return Err(StoreError::Corrupt("seal record does not parse".into())),
                },
            };
            let genesis: Vec<u8> = col(&row, 1)?;
            let (step_count, head) = match true_end(db, col(&row, 3)?, col(&row, 4)?)? {
                Some(end) => (u64_of(end.index) + 1, blob_hash(end.hash)?),
                None => (0, blob_hash(genesis)?),
            };
            Ok(Some(SessionInfo {
                header,
                start_seq: u64_of(start_seq),
                step_count,
                head,
                seal,
            }))
        })
    }

    fn read_session(
        &self,
        org_id: &str,
        session_id: &str,
        visit: &mut dyn FnMut(StoredStep) -> bool,
    ) -> Result<(), StoreError> {
        self.read(|db| {
            let Some(row) = db.query_opt(
                "SELECT s.org, s.sid FROM sessions s JOIN orgs o ON o.org = s.org
                 WHERE o.name = $1 AND s.session_id = $2",
                &[&org_id, &session_id],
                "reading a session",
            )?
            else {
                return Ok(());
            };
            let (org, sid): (i64, i64) = (col(&row, 0)?, col(&row, 1)?);
            let ids = session_ids(db, org, sid)?;
            for chunk in ids.chunks(PAGE as usize) {
                let chunk = chunk.to_vec();
                for row in db.query(&STEPS_BY_ID, &[&chunk, &sid], "reading a session")? {
                    if !visit(step_from_row(&row)?) {
                        return Ok(());
                    }
                }
            }
            Ok(())
        })
    }

    fn step_by_trace(
        &self,
        org_id: &str,
        trace_id: &str,
    ) -> Result<Option<StoredStep>, StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(None);
            };
            db.query_opt(&STEP_BY_TRACE, &[&org, &trace_id], "looking up a step")?
                .map(|row| step_from_row(&row))
                .transpose()
        })
    }

    fn list_sessions(
        &self,
        org_id: &str,
        filter: &SessionFilter,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            let (sql, params) =
                listing::session_listing_query(org, filter, limit, |n| format!("${n}"));
            let params: Vec<Box<dyn ToSql + Sync>> =
                params.into_iter().map(ListParam::into_pg).collect();
            let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref()).collect();
            let rows = db.query_built(&sql, &refs, "listing sessions")?;
            let mut out = Vec::with_capacity(rows.len());
            for row in &rows {
                let sid: i64 = col(row, 3)?;
                // Counted from the log (the head row is only a hint).
                let end = true_end(db, org, sid)?;
                let first = match &end {
                    Some(_) => successor(db, sid, None)?,
                    None => None,
                };
                out.push(SessionSummary {
                    session_id: col(row, 0)?,
                    agent_id: col(row, 1)?,
                    step_count: end.as_ref().map_or(0, |e| u64_of(e.index) + 1),
                    first_step_at: first.and_then(|e| Timestamp::from_micros(e.created_at)),
                    last_step_at: end.and_then(|e| Timestamp::from_micros(e.created_at)),
                    started_at: Timestamp::from_micros(col(row, 2)?).unwrap_or_default(),
                    sealed: col(row, 4)?,
                });
            }
            Ok(out)
        })
    }

    fn latest_checkpoint(&self, org_id: &str) -> Result<Option<StoredCheckpoint>, StoreError> {
        self.read(|db| match Self::org_id_of(db, org_id)? {
            Some(org) => latest_checkpoint(db, org, org_id),
            None => Ok(None),
        })
    }

    fn checkpoints(&self, org_id: &str) -> Result<Vec<StoredCheckpoint>, StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            db.query(
                "SELECT size, root, note, created_at FROM checkpoints WHERE org = $1 ORDER BY size",
                &[&org],
                "listing checkpoints",
            )?
            .iter()
            .map(|row| checkpoint_from_row(row, org_id))
            .collect()
        })
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
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(cairn_core::merkle::empty_root());
            };
            let tree = PgTree {
                db: RefCell::new(Db {
                    client: &mut *db.client,
                    statements: &mut *db.statements,
                }),
                org,
                size,
            };
            range_hash(&tree, 0, size)
        })
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
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            let (sql, params) = listing::step_search_query(
                listing::Engine::Postgres,
                org,
                query.to_tsquery(),
                filter,
                limit,
                |n| format!("${n}"),
            );
            let params: Vec<Box<dyn ToSql + Sync>> =
                params.into_iter().map(ListParam::into_pg).collect();
            let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref()).collect();
            db.query_built(&sql, &refs, "searching the full-text index")?
                .iter()
                .map(|row| Ok((u64_of(col::<i64>(row, 0)?), col::<f64>(row, 1)?)))
                .collect()
        })
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

    fn flagged_steps(
        &self,
        org_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<StoredStep>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            let (_, hi) = org_range(org);
            db.query(
                &FLAGGED_STEPS,
                &[&org, &row_id(org, from), &hi, &limit],
                "listing flagged steps",
            )?
            .iter()
            .map(step_from_row)
            .collect()
        })
    }

    fn op_records(
        &self,
        org_id: &str,
        entry_type: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, OpRecord)>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            db.query(
                "SELECT seq, view FROM entries WHERE org = $1 AND type = $2 AND type <> 'step'
                 AND seq >= $3 ORDER BY id LIMIT $4",
                &[&org, &entry_type, &i64_of(from), &limit],
                "listing records",
            )?
            .iter()
            .map(|row| {
                let seq = u64_of(col(row, 0)?);
                Ok((seq, op_from_view(seq, entry_type, &col::<String>(row, 1)?)?))
            })
            .collect()
        })
    }

    fn session_records(
        &self,
        org_id: &str,
        session_id: &str,
    ) -> Result<Vec<(u64, OpRecord)>, StoreError> {
        self.read(|db| {
            db.query(
                "SELECT e.seq, e.type, e.view FROM sessions s JOIN orgs o ON o.org = s.org
                 JOIN entries e ON e.sid = s.sid AND e.type <> 'step'
                 WHERE o.name = $1 AND s.session_id = $2 ORDER BY e.id",
                &[&org_id, &session_id],
                "reading a session's records",
            )?
            .iter()
            .map(|row| {
                let seq = u64_of(col(row, 0)?);
                Ok((
                    seq,
                    op_from_view(seq, &col::<String>(row, 1)?, &col::<String>(row, 2)?)?,
                ))
            })
            .collect()
        })
    }

    fn key_records(
        &self,
        org_id: &str,
        agent_id: Option<&str>,
    ) -> Result<Vec<(u64, OpRecord)>, StoreError> {
        self.read(|db| {
            db.query(
                "SELECT e.seq, e.type, e.view FROM entries e JOIN orgs o ON o.org = e.org
                 WHERE o.name = $1 AND e.type IN ('key-registration', 'key-revocation')
                   AND ($2::text IS NULL OR e.agent_id = $2) ORDER BY e.id",
                &[&org_id, &agent_id],
                "reading key records",
            )?
            .iter()
            .map(|row| {
                let seq = u64_of(col(row, 0)?);
                Ok((
                    seq,
                    op_from_view(seq, &col::<String>(row, 1)?, &col::<String>(row, 2)?)?,
                ))
            })
            .collect()
        })
    }

    fn op_by_id(&self, org_id: &str, id: &str) -> Result<Option<(u64, OpRecord)>, StoreError> {
        let found = self.read(|db| {
            db.query_opt(
                "SELECT e.seq, e.type, e.view FROM entries e JOIN orgs o ON o.org = e.org
                 WHERE o.name = $1 AND e.trace_id = $2 AND e.type <> 'step'",
                &[&org_id, &id],
                "looking up a record by id",
            )?
            .map(|row| {
                Ok((
                    u64_of(col(&row, 0)?),
                    col::<String>(&row, 1)?,
                    col::<String>(&row, 2)?,
                ))
            })
            .transpose()
        })?;
        found
            .map(|(seq, entry_type, view)| Ok((seq, op_from_view(seq, &entry_type, &view)?)))
            .transpose()
    }

    fn analyst_query_limited(
        &self,
        org_id: &str,
        sql: &str,
        limits: &analyst::QueryLimits,
    ) -> Result<AnalystResult, AnalystError> {
        use postgres::fallible_iterator::FallibleIterator as _;
        let org = self.read(|db| Self::org_id_of(db, org_id))?.unwrap_or(0);
        let statement = analyst::prepare(sql, analyst::Dialect::Postgres, org, &self.schema)?;
        let failed = |e: postgres::Error| pg_analyst_failure(&e, limits);
        self.read(|db| {
            let out = (|| {
                let mut tx = db.client.transaction().map_err(failed)?;
                // Strings are read as the guard read them (no backslash
                // escapes), whatever the server's configuration.
                tx.batch_execute(&format!(
                    "SET TRANSACTION READ ONLY; SET LOCAL statement_timeout = {}; SET LOCAL standard_conforming_strings = on",
                    limits.time.as_millis().max(1)
                ))
                .map_err(failed)?;
                // Column names and types from the prepared statement.
                let prepared = tx.prepare(&statement).map_err(failed)?;
                let columns: Vec<(String, postgres::types::Type)> = prepared
                    .columns()
                    .iter()
                    .map(|c| (c.name().to_owned(), c.type_().clone()))
                    .collect();
                if columns.len() > analyst::MAX_COLUMNS {
                    return Err(AnalystError::Refused(format!(
                        "an answer has at most {} columns, not {}",
                        analyst::MAX_COLUMNS,
                        columns.len()
                    )));
                }
                // The rows as text, each value capped by the server: a
                // larger one arrives as NULL with a flag, so no value
                // bigger than the limit ever reaches this process; rows
                // are fetched in small chunks and stop at the answer's
                // limit.
                let max = limits.max_value_bytes;
                let (select, names) = if columns.is_empty() {
                    ("1".to_owned(), String::new())
                } else {
                    let select = (0..columns.len())
                        .map(|i| {
                            format!(
                                "CASE WHEN octet_length(c{i}::text) > {max} THEN NULL ELSE c{i}::text END, octet_length(c{i}::text) > {max}"
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(", ");
                    let names = (0..columns.len())
                        .map(|i| format!("c{i}"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    (select, format!("({names})"))
                };
                let limited = format!(
                    "SELECT {select} FROM ({statement}) AS cairn_q{names} LIMIT {}",
                    limits.max_rows + 1
                );
                let portal = tx.bind(limited.as_str(), &[]).map_err(failed)?;
                let mut rows = Vec::new();
                let mut truncated = false;
                let mut answer_bytes = 0usize;
                const CHUNK: i32 = 64;
                'fetch: loop {
                    let mut fetched = 0;
                    let mut chunk = tx.query_portal_raw(&portal, CHUNK).map_err(failed)?;
                    while let Some(row) = chunk.next().map_err(failed)? {
                        fetched += 1;
                        if rows.len() == limits.max_rows {
                            truncated = true;
                            break 'fetch;
                        }
                        let mut values = Vec::with_capacity(columns.len());
                        for (i, (name, ty)) in columns.iter().enumerate() {
                            let too_big: Option<bool> = row.try_get(2 * i + 1).map_err(failed)?;
                            if too_big == Some(true) {
                                return Err(analyst::value_too_large(name, limits));
                            }
                            let text: Option<&str> = row.try_get(2 * i).map_err(failed)?;
                            answer_bytes += text.map_or(8, str::len);
                            values.push(pg_text_value(text, ty));
                        }
                        if answer_bytes > limits.max_answer_bytes {
                            truncated = true;
                            break 'fetch;
                        }
                        rows.push(values);
                    }
                    if fetched < CHUNK {
                        break;
                    }
                }
                drop(portal);
                tx.rollback().map_err(failed)?;
                Ok(AnalystResult {
                    columns: columns.into_iter().map(|(name, _)| name).collect(),
                    rows,
                    truncated,
                })
            })();
            Ok(out)
        })?
    }

    fn put_cosignature(
        &self,
        org_id: &str,
        size: u64,
        witness: &str,
        line: &str,
    ) -> Result<(), StoreError> {
        let size =
            i64::try_from(size).map_err(|_| StoreError::Corrupt("size beyond 2^63".into()))?;
        self.read(|db| {
            db.execute(
                "INSERT INTO cosignatures (org_name, size, witness, line) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (org_name, size, witness) DO UPDATE SET line = excluded.line",
                &[&org_id, &size, &witness, &line],
                "storing a cosignature",
            )?;
            Ok(())
        })
    }

    fn log_keys(&self, org_id: &str) -> Result<Vec<NoteVerifier>, StoreError> {
        self.read(|db| {
            let foreign = db.query(
                "SELECT g.server_key FROM org_origins g JOIN orgs o ON o.org = g.org WHERE o.name = $1",
                &[&org_id],
                "reading an org's origin",
            )?;
            if let Some(row) = foreign.first() {
                let key: String = col(row, 0)?;
                return NoteVerifier::parse(&key)
                    .map(|k| vec![k])
                    .map_err(|e| StoreError::Corrupt(format!("an imported log's key: {e}")));
            }
            let first = db.query(
                "SELECT value FROM cairn_meta WHERE key = 'server_key'",
                &[],
                "reading the server key",
            )?;
            let first: Option<String> = match first.first() {
                Some(row) => Some(col(row, 0)?),
                None => None,
            };
            let rows = meta_key_rows(db)?;
            let mut keys = crate::keys::log_keys_from_meta(first.as_deref(), &rows)?;
            if !keys.contains(&self.key.verifier) {
                keys.push(self.key.verifier.clone());
            }
            Ok(keys)
        })
    }

    fn record_log_key(
        &self,
        action: cairn_core::log::LogKeyAction,
        key: &NoteVerifier,
    ) -> Result<(), StoreError> {
        let row = crate::keys::log_key_row(action, key);
        let at = crate::now().to_string();
        self.read(|db| {
            db.execute(
                "INSERT INTO cairn_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                &[&row, &at],
                "recording a log key",
            )?;
            Ok(())
        })
    }

    fn cosignatures(&self, org_id: &str, size: u64) -> Result<Vec<String>, StoreError> {
        let size =
            i64::try_from(size).map_err(|_| StoreError::Corrupt("size beyond 2^63".into()))?;
        self.read(|db| {
            Ok(db
                .query(
                    "SELECT line FROM cosignatures WHERE org_name = $1 AND size = $2 ORDER BY witness",
                    &[&org_id, &size],
                    "reading cosignatures",
                )?
                .iter()
                .map(|row| row.get::<_, String>(0))
                .collect())
        })
    }

    fn put_api_key(&self, key: &ApiKey) -> Result<(), StoreError> {
        self.read(|db| {
            db.execute(
                "INSERT INTO api_keys (id, org_name, role, agent_id, token_hash, label, created_at, revoked_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                &[
                    &key.id,
                    &key.org_id,
                    &key.role.as_str(),
                    &key.agent_id,
                    &&key.token_hash.0[..],
                    &key.label,
                    &key.created_at.as_micros(),
                    &key.revoked_at.map(Timestamp::as_micros),
                ],
                "storing an API key",
            )?;
            Ok(())
        })
    }

    fn api_key_by_hash(&self, token_hash: &Hash) -> Result<Option<ApiKey>, StoreError> {
        self.read(|db| {
            db.query_opt(
                "SELECT id, org_name, role, agent_id, token_hash, label, created_at, revoked_at
                 FROM api_keys WHERE token_hash = $1",
                &[&&token_hash.0[..]],
                "looking up an API key",
            )?
            .map(|row| api_key_from_row(&row))
            .transpose()
        })
    }

    fn api_keys(&self, org_id: &str) -> Result<Vec<ApiKey>, StoreError> {
        self.read(|db| {
            db.query(
                "SELECT id, org_name, role, agent_id, token_hash, label, created_at, revoked_at
                 FROM api_keys WHERE org_name = $1 ORDER BY created_at, id",
                &[&org_id],
                "listing API keys",
            )?
            .iter()
            .map(api_key_from_row)
            .collect()
        })
    }

    fn revoke_api_key(
        &self,
        org_id: &str,
        key_id: &str,
        at: Timestamp,
    ) -> Result<bool, StoreError> {
        self.read(|db| {
            Ok(db.execute(
                "UPDATE api_keys SET revoked_at = $3 WHERE org_name = $1 AND id = $2 AND revoked_at IS NULL",
                &[&org_id, &key_id, &at.as_micros()],
                "revoking an API key",
            )? > 0)
        })
    }

    fn agent_keys(&self, org_id: &str) -> Result<Vec<KeyRegistration>, StoreError> {
        let views = self.read(|db| {
            db.query(
                "SELECT e.seq, e.view FROM entries e JOIN orgs o ON o.org = e.org
                 WHERE o.name = $1 AND e.type = 'key-registration' ORDER BY e.id",
                &[&org_id],
                "reading agent keys",
            )?
            .iter()
            .map(|r| Ok((u64_of(col(r, 0)?), col(r, 1)?)))
            .collect::<Result<Vec<(u64, String)>, StoreError>>()
        })?;
        Ok(agent_keys_from_views(views)?
            .into_iter()
            .map(|(_, reg)| reg)
            .collect())
    }

    fn log_signer(&self, org_id: &str) -> Result<(String, NoteVerifier), StoreError> {
        let origin = self.read(|db| {
            db.query_opt(
                "SELECT g.server_name, g.server_key FROM org_origins g JOIN orgs o ON o.org = g.org
                 WHERE o.name = $1",
                &[&org_id],
                "reading an org's origin",
            )?
            .map(|row| Ok((col::<String>(&row, 0)?, col::<String>(&row, 1)?)))
            .transpose()
        })?;
        crate::engine::signer_of(&self.key, origin)
    }

    fn import_log(
        &self,
        org_id: &str,
        header: &cairn_core::bundle::BundleHeader,
        checkpoint_note: &str,
        entries: &mut dyn Iterator<Item = Result<LogEntry, String>>,
    ) -> Result<u64, ImportError> {
        self.with_writer(|conn, cache| {
            let mut tx = conn.client.transaction().context("starting the import")?;
            let db = Db {
                client: &mut tx,
                statements: &mut conn.statements,
            };
            let mut pg_tx = PgTx::begin(db, HashSet::from([org_id.to_owned()]), cache)?;
            let count =
                self.engine()
                    .import(&mut pg_tx, org_id, header, checkpoint_note, entries)?;
            pg_tx.flush()?;
            drop(pg_tx);
            tx.commit().context("committing the import")?;
            Ok(count)
        })
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

#[cfg(test)]
mod tests {
    use super::bound_network_waits;
    use std::time::Duration;

    #[test]
    fn network_waits_are_bounded_unless_the_url_says_otherwise() {
        let mut config: postgres::Config = "host=db user=cairn".parse().unwrap_or_default();
        bound_network_waits(&mut config, Duration::from_secs(30));
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(30)));
        assert_eq!(
            config.get_tcp_user_timeout(),
            Some(&Duration::from_secs(30))
        );
        assert!(config.get_keepalives());
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(15));
        assert_eq!(
            config.get_keepalives_interval(),
            Some(Duration::from_secs(5))
        );
        assert_eq!(config.get_keepalives_retries(), Some(3));

        let mut config: postgres::Config =
            "host=db connect_timeout=3 keepalives=0 tcp_user_timeout=7"
                .parse()
                .unwrap_or_default();
        bound_network_waits(&mut config, Duration::from_secs(30));
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert_eq!(config.get_tcp_user_timeout(), Some(&Duration::from_secs(7)));
        assert!(!config.get_keepalives());
    }
}
