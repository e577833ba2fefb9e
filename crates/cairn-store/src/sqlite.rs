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

use crate::analyst::{self, AnalystError, AnalystResult};
use crate::engine::{
    AgentKey, ChainEnd, Engine, OpRow, OrgState, Overlay, RawStep, STEP_COLUMN_COUNT, STEP_COLUMNS,
    SessionState, StepRow, StoredSession, WriteTx, agent_keys_from_views, blob_hash, chain_end,
    json_text, links_text, op_from_view, op_record_id, org_range, row_id,
};
use crate::keys::{ServerKey, load_or_create_server_key};
use crate::listing::{self, ListParam};
use crate::{
    DbContext, EmbeddingBacklog, LedgerStore, PendingEmbedding, Refusal, SessionFilter,
    SessionInfo, SessionSummary, StepFilter, StoreError, StoredCheckpoint, StoredEntry, StoredStep,
    WriteRequest, Written,
};
use cairn_core::log::{KeyRegistration, LogEntry, LogRecord, OpRecord};
use cairn_core::merkle::{
    Frontier, SubtreeHashes, consistency_proof, inclusion_proof, leaf_hash, node_hash, range_hash,
};
use cairn_core::note::NoteVerifier;
use cairn_core::record::{Limits, SessionHeader};
use cairn_core::{Hash, Timestamp};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// File name of the database inside the data directory.
pub const DB_FILE: &str = "ledger.db";
mod embedding;
mod fulltext_index;
pub use fulltext_index::FULLTEXT_FILE;

const SCHEMA: &str = include_str!("schema.sql");
const SCHEMA_VERSION: &str = "2";
/// File name of the lock held by the process that sequences the store.
pub const LOCK_FILE: &str = "ledger.lock";
/// Session states kept in memory before the cache starts over (they are
/// reloaded from the log on demand).
const SESSION_CACHE: usize = 200_000;
use crate::engine::NODE_STRIDE;

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
    keys: HashMap<(i64, String), AgentKey>,
    /// The full-text documents and erasures of the batch being written
    /// (`fulltext_index`).
    fulltext: fulltext_index::FullTextBatch,
}

impl State {
    fn apply(&mut self, overlay: Overlay) {
        self.orgs.extend(overlay.orgs);
        self.sessions.extend(overlay.sessions);
        self.keys.extend(overlay.keys);
    }
}

/// The embedded store. See the module docs.
pub struct SqliteStore {
    path: PathBuf,
    key: ServerKey,
    limits: Limits,
    checkpoint_interval: Duration,
    embedding_sample_rate: f64,
    max_clock_skew_s: u64,
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
}

/// Copies committed WAL frames into the database file in the background,
/// so the writer never pays for it inside a commit (the writer connection
/// runs with `wal_autocheckpoint = 0`).
struct Checkpointer {
    stop: std::sync::Arc<(Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    fn start(path: &Path) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(path).context("opening the checkpointer")?;
        conn.busy_timeout(Duration::from_secs(10))
            .context("setting the busy timeout")?;
        let stop = std::sync::Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("cairn-wal-checkpoint".into())
            .spawn(move || {
                let (lock, wake) = &*flag;
                let Ok(mut stopped) = lock.lock() else { return };
                while !*stopped {
                    // PASSIVE never blocks the writer or readers; a busy
                    // database just means fewer frames copied this round.
                    let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                    stopped = match wake.wait_timeout(stopped, Duration::from_millis(100)) {
                        Ok((guard, _)) => guard,
                        Err(_) => return,
                    };
                }
            })
            .map_err(|source| StoreError::Io {
                context: "starting the checkpointer thread".into(),
                source,
            })?;
        Ok(Checkpointer {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        if let Ok(mut stopped) = self.stop.0.lock() {
            *stopped = true;
        }
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.busy_timeout(Duration::from_secs(10))
        .context("setting the busy timeout")?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         PRAGMA foreign_keys = OFF;
         PRAGMA cache_size = -65536;
         PRAGMA temp_store = MEMORY;",
    )
    .context("configuring the connection")
}

/// Opens a read-only connection that waits for the writer rather than
/// failing at once, and refuses structural changes.
fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let mut c = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .context("opening a reader")?;
    c.busy_timeout(Duration::from_secs(10))
        .context("setting the busy timeout")?;
    forbid_structural_changes(&mut c)?;
    Ok(c)
}

/// The tables analyst SQL reads through its views (see
/// [`crate::analyst`]); its connection may read no other.
const ANALYST_TABLES: [&str; 3] = ["entries", "sessions", "session_heads"];

/// A connection for analyst SQL: read-only; its authorizer lets a
/// statement read the ledger's tables and nothing else (not `api_keys`,
/// `meta` or `sqlite_master`), run functions and recurse, and refuses every
/// other action (PRAGMA, ATTACH, writes); no string or blob may be longer
/// than the value limit (`SQLITE_LIMIT_LENGTH`), so that no function can
/// build a huge one.
fn open_analyst(path: &Path, limits: &analyst::QueryLimits) -> Result<Connection, StoreError> {
    use rusqlite::hooks::{AuthAction, Authorization};
    let mut c = open_reader(path)?;
    let length = i32::try_from(limits.max_value_bytes.max(1)).unwrap_or(i32::MAX);
    c.set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH, length)
        .context("setting the length limit")?;
    c.authorizer(Some(|ctx: rusqlite::hooks::AuthContext<'_>| {
        match ctx.action {
            AuthAction::Select | AuthAction::Recursive | AuthAction::Function { .. } => {
                Authorization::Allow
            }
            AuthAction::Read { table_name, .. }
                if ANALYST_TABLES.contains(&table_name)
                    && matches!(ctx.database_name, Some("main")) =>
            {
                Authorization::Allow
            }
            // A recursive CTE's own rows (no database).
            AuthAction::Read { .. } if ctx.database_name.is_none() => Authorization::Allow,
            _ => Authorization::Deny,
        }
    }))
    .context("installing the analyst authorizer")?;
    Ok(c)
}

/// An analyst query's error as the caller should read it.
fn analyst_failure(
    e: rusqlite::Error,
    limits: &analyst::QueryLimits,
    deadline: std::time::Instant,
) -> AnalystError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::OperationInterrupted) => AnalystError::TimedOut(limits.time),
        Some(rusqlite::ErrorCode::TooBig) => AnalystError::TooLarge(format!(
            "a value of the answer would be larger than {} bytes (the limit of one value)",
            limits.max_value_bytes
        )),
        _ if std::time::Instant::now() > deadline => AnalystError::TimedOut(limits.time),
        _ => AnalystError::Failed(e.to_string()),
    }
}

/// Refuses, on Cairn's own connections, statements that would remove
/// ledger structure: DROP of anything and ALTER TABLE. (A user of the plain
/// `sqlite3` shell is not bound by this; the triggers and verification
/// are what stand there.)
fn forbid_structural_changes(conn: &mut Connection) -> Result<(), StoreError> {
    use rusqlite::hooks::{AuthAction, Authorization};
    conn.authorizer(Some(|ctx: rusqlite::hooks::AuthContext<'_>| {
        match ctx.action {
            AuthAction::DropTable { .. }
            | AuthAction::DropIndex { .. }
            | AuthAction::DropTrigger { .. }
            | AuthAction::DropView { .. }
            | AuthAction::AlterTable { .. } => Authorization::Deny,
            _ => Authorization::Allow,
        }
    }))
    .context("installing the authorizer")
}

/// The key that signs this store's checkpoints is recorded in `meta` on
/// first sequencing; a sequencing process with another key (a data
/// directory copied without its key, a key file lost and recreated) refuses
/// to start rather than sign checkpoints no verifier would accept.
fn check_signing_key(
    tx: &rusqlite::Transaction<'_>,
    key: &crate::ServerKey,
    from: &str,
) -> Result<(), StoreError> {
    let ours = key.verifier.to_string();
    tx.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('server_key', ?1)",
        [&ours],
    )
    .context("recording the server key")?;
    let recorded: String = tx
        .query_row("SELECT value FROM meta WHERE key = 'server_key'", [], |r| {
            r.get(0)
        })
        .context("reading the recorded server key")?;
    crate::keys::check_key_allowed(&recorded, &meta_key_rows(tx)?, &key.verifier, from)
}

/// The metadata rows recording log keys added and retired.
fn meta_key_rows(conn: &Connection) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn
        .prepare("SELECT key FROM meta WHERE key LIKE 'log\\_key\\_%' ESCAPE '\\' ORDER BY rowid")
        .context("reading the log keys")?;
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .context("reading the log keys")?
        .collect::<Result<Vec<_>, _>>()
        .context("reading the log keys")?;
    Ok(rows)
}

impl SqliteStore {
    /// Opens (creating if needed) the store in `data_dir`: the directory,
    /// the server key, the database and its schema; then rebuilds the
    /// in-memory sequencing state from the tables.
    pub fn open(data_dir: &Path, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        create_private_dir(data_dir)?;
        let lock = if options.sequencer {
            Some(take_lock(data_dir)?)
        } else {
            None
        };
        let key = match (&options.key, &options.key_file) {
            (Some(key), _) => key.clone(),
            (None, Some(file)) => crate::keys::load_or_create_key_file(file, &options.server_name)?,
            (None, None) => load_or_create_server_key(data_dir, &options.server_name)?,
        };
        let path = data_dir.join(DB_FILE);
        let mut conn = Connection::open(&path).context("opening the database")?;
        restrict_file(&path)?;
        configure(&conn)?;
        let tx = conn
            .transaction()
            .context("starting the schema transaction")?;
        let version: Option<String> = tx
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()
            .or_else(|e| match e {
                // A new database has no meta table yet.
                rusqlite::Error::SqliteFailure(_, Some(ref m)) if m.contains("no such table") => {
                    Ok(None)
                }
                e => Err(e),
            })
            .context("reading the schema version")?;
        // Set when the schema's constraints cannot be restored over the
        // rows (someone removed an index and stored rows it would refuse):
        // the store then opens to be read and verified, not written.
        let mut damaged = None;
        match version.as_deref() {
            None => {
                tx.execute_batch(SCHEMA).context("creating the schema")?;
                tx.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)",
                    [SCHEMA_VERSION],
                )
                .context("recording the schema version")?;
            }
            Some(SCHEMA_VERSION) if options.sequencer => {
                tx.execute_batch("SAVEPOINT schema_check")
                    .context("checking the schema")?;
                if let Err(e) = tx.execute_batch(SCHEMA) {
                    tx.execute_batch("ROLLBACK TO schema_check")
                        .context("checking the schema")?;
                    damaged = Some(format!(
                        "the store's schema cannot be restored over its rows ({e}): it was changed outside Cairn; it is open for reading and verification only: run `cairn verify`"
                    ));
                }
                tx.execute_batch("RELEASE schema_check")
                    .context("checking the schema")?;
            }
            Some(SCHEMA_VERSION) => {}
            Some("1") => {
                return Err(StoreError::Corrupt(format!(
                    "{} holds a format 1 ledger (written by cairn 0.1); this cairn writes format 2, whose hashes differ, and cannot open it. Keep using cairn 0.1 for it (its exports verify with cairn 0.1), or start a new data directory",
                    path.display()
                )));
            }
            Some(other) => {
                return Err(StoreError::Corrupt(format!(
                    "database schema version {other} is not supported (expected {SCHEMA_VERSION})"
                )));
            }
        }
        if options.sequencer && damaged.is_none() {
            embedding::move_untagged_vectors(&tx)?;
            fulltext_index::drop_inline_index(&tx)?;
            record_session_kinds(&tx)?;
            let from = match (&options.key, &options.key_file) {
                (Some(_), _) => "the server key command".to_owned(),
                (None, Some(file)) => file.display().to_string(),
                (None, None) => data_dir.join(crate::keys::KEY_FILE).display().to_string(),
            };
            check_signing_key(&tx, &key, &from)?;
        }
        tx.commit().context("committing the schema")?;
        forbid_structural_changes(&mut conn)?;
        conn.execute_batch("PRAGMA wal_autocheckpoint = 0;")
            .context("handing WAL checkpoints to the background")?;
        let checkpointer = if options.sequencer {
            Some(Checkpointer::start(&path)?)
        } else {
            None
        };
        let writer = if let Some(reason) = damaged {
            Writer {
                conn,
                broken: Some(reason),
                state: State::default(),
            }
        } else if options.sequencer {
            load_state(conn)
        } else {
            Writer {
                conn,
                broken: None,
                state: State::default(),
            }
        };
        // Only a sound sequencing process keeps the index: an inconsistent
        // store opens to be read and verified, and its log cannot be
        // trusted to mend the index from.
        let fulltext = if options.sequencer && writer.broken.is_none() {
            Some(fulltext_index::FullTextIndex::open(&path, &writer.conn)?)
        } else {
            None
        };
        Ok(SqliteStore {
            path,
            key,
            limits: options.limits,
            checkpoint_interval: options.checkpoint_interval,
            embedding_sample_rate: options.embedding_sample_rate.clamp(0.0, 1.0),
            max_clock_skew_s: options.max_clock_skew_s,
            read_only: !options.sequencer,
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
            _checkpointer: checkpointer,
            fulltext,
            _lock: lock,
            vectors: crate::vector_index::VectorIndex::new(
                options.vector_memory_bytes,
                options.vector_graph_min,
            ),
        })
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` with a read-only connection from the pool.
    fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let pooled = self.readers.lock().map_err(|_| poisoned())?.pop();
        let conn = match pooled {
            Some(c) => c,
            // The full-text index is attached by the search that needs it
            // (a damaged index file must not stop every read).
            None => open_reader(&self.path)?,
        };
        let out = f(&conn);
        if let Ok(mut pool) = self.readers.lock()
            && pool.len() < 8
        {
            pool.push(conn);
        }
        out
    }

    /// Runs a proof computation over an org's stored tree.
    fn with_tree<T>(
        &self,
        org_id: &str,
        prove: impl FnOnce(&DbTree<'_>) -> Result<T, cairn_core::merkle::ProofError<StoreError>>,
    ) -> Result<T, StoreError> {
        self.read(|c| {
            let org = Self::org_id_of(c, org_id)?
                .ok_or_else(|| StoreError::NotFound(format!("org {org_id} has no log")))?;
            let tree = DbTree {
                conn: c,
                org,
                size: log_size_of(c, org)?,
            };
            prove(&tree).map_err(|e| match e {
                cairn_core::merkle::ProofError::Read(e) => e,
                cairn_core::merkle::ProofError::OutOfRange(m) => StoreError::NotFound(m),
            })
        })
    }

    fn org_id_of(conn: &Connection, org: &str) -> Result<Option<i64>, StoreError> {
        conn.query_row("SELECT org FROM orgs WHERE name = ?1", [org], |r| r.get(0))
            .optional()
            .context("looking up an org")
    }
}

impl SqliteStore {
    /// Runs `work` with the writer, unless this process opened the store to
    /// read or the store is broken (then there is nothing to maintain).
    fn with_sound_writer(
        &self,
        work: impl FnOnce(&mut Writer) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if self.read_only {
            return Ok(());
        }
        let mut guard = self.writer.lock().map_err(|_| poisoned())?;
        if guard.broken.is_some() {
            return Ok(());
        }
        work(&mut guard)
    }

    /// The periodic work: sign the checkpoints that are due.
    fn maintain_with(&self, w: &mut Writer) -> Result<(), StoreError> {
        let engine = self.engine();
        let due: Vec<(String, OrgState)> = w
            .state
            .orgs
            .iter()
            .filter(|(_, org)| !org.foreign && engine.due(org))
            .map(|(name, org)| (name.clone(), org.clone()))
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        let tx = w
            .conn
            .unchecked_transaction()
            .context("starting a checkpoint")?;
        let mut sqlite_tx = SqliteTx {
            conn: &tx,
            state: &mut w.state,
        };
        let mut updated = Vec::new();
        for (name, mut org) in due {
            engine.checkpoint(&mut sqlite_tx, &name, &mut org)?;
            updated.push((name, org));
        }
        tx.commit().context("committing checkpoints")?;
        w.state.orgs.extend(updated);
        Ok(())
    }
}

/// Creates the data directory readable by its owner only (it holds every
/// tenant's content and the hashes of their API keys).
fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        context: format!("creating data directory {}", dir.display()),
        source,
    };
    if !dir.exists() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).map_err(io)?;
    }
    Ok(())
}

/// Makes a database file readable by its owner only.
fn restrict_file(path: &Path) -> Result<(), StoreError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(
            |source| StoreError::Io {
                context: format!("restricting {}", path.display()),
                source,
            },
        )?;
    }
    Ok(())
}

/// How long `take_lock` waits for a lock held elsewhere, and how often it
/// tries.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// Takes the sequencer's lock on a data directory, or says who holds it:
/// two processes sequencing one embedded store would each keep their own
/// idea of the next index.
fn take_lock(dir: &Path) -> Result<std::fs::File, StoreError> {
    use std::io::{Read as _, Seek as _, Write as _};
    let path = dir.join(LOCK_FILE);
    let io = |source| StoreError::Io {
        context: format!("locking {}", path.display()),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    // A lock can be held for a moment by no cairn process at all: a child
    // forked (by any thread of this or the holder's process) between fork
    // and exec shares the holder's open file, so its lock. Only a lock still
    // held after a short wait is another process's.
    let mut waited = std::time::Duration::ZERO;
    let outcome = loop {
        match file.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) if waited < LOCK_PATIENCE => {
                std::thread::sleep(LOCK_RETRY);
                waited += LOCK_RETRY;
            }
            other => break other,
        }
    };
    match outcome {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(StoreError::Busy(format!(
                "the data directory {} is in use by another cairn process ({}): stop it, or write through it (its HTTP API or MCP); read-only commands (verify, export, replay, sessions) work beside it",
                dir.display(),
                if holder.is_empty() {
                    "pid unknown".to_owned()
                } else {
                    holder.to_owned()
                }
            )));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    let command: Vec<String> = std::env::args().take(3).collect();
    write!(file, "pid {}, `{}`", std::process::id(), command.join(" ")).map_err(io)?;
    file.flush().map_err(io)?;
    Ok(file)
}

/// Size of an org's log, from its largest rowid.
fn log_size_of(conn: &Connection, org: i64) -> Result<u64, StoreError> {
    let (lo, hi) = org_range(org);
    let max: Option<i64> = conn
        .prepare_cached("SELECT MAX(id) FROM entries WHERE id >= ?1 AND id < ?2")
        .and_then(|mut s| s.query_row(params![lo, hi], |r| r.get(0)))
        .context("reading the log size")?;
    Ok(max.map_or(0, |id| (id - lo) as u64 + 1))
}

fn poisoned() -> StoreError {
    StoreError::Corrupt("a previous panic poisoned the store's lock".into())
}

/// Reads perfect-subtree hashes of one org's log from the tables: a
/// subtree at level `l` is folded from at most 16 hashes stored at the
/// level `l - l % 4` below it, read in one range query (as the PostgreSQL
/// backend does), rather than one point query per leaf or node.
struct DbTree<'c> {
    conn: &'c Connection,
    org: i64,
    size: u64,
}

impl SubtreeHashes for DbTree<'_> {
    type Error = StoreError;

    fn size(&self) -> u64 {
        self.size
    }

    fn subtree(&self, level: u32, index: u64) -> Result<Hash, StoreError> {
        let stored = level - level % NODE_STRIDE;
        let span = 1u64 << (level - stored);
        let first = index << (level - stored);
        let hashes: Vec<Vec<u8>> = if stored == 0 {
            self.conn
                .prepare_cached(
                    "SELECT leaf_hash FROM entries WHERE id >= ?1 AND id < ?2 ORDER BY id",
                )
                .and_then(|mut s| {
                    s.query_map(
                        params![row_id(self.org, first), row_id(self.org, first + span)],
                        |r| r.get(0),
                    )?
                    .collect()
                })
                .context("reading leaf hashes")?
        } else {
            self.conn
                .prepare_cached(
                    "SELECT hash FROM nodes WHERE org = ?1 AND level = ?2 AND idx >= ?3 AND idx < ?4
                     ORDER BY idx",
                )
                .and_then(|mut s| {
                    s.query_map(
                        params![self.org, stored, first as i64, (first + span) as i64],
                        |r| r.get(0),
                    )?
                    .collect()
                })
                .context("reading tree nodes")?
        };
        if hashes.len() as u64 != span {
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
        let hashes = hashes
            .into_iter()
            .map(blob_hash)
            .collect::<Result<Vec<Hash>, StoreError>>()?;
        crate::engine::fold_perfect(hashes)
    }
}

fn load_state(conn: Connection) -> Writer {
    match rebuild(&conn) {
        Ok(state) => Writer {
            conn,
            broken: None,
            state,
        },
        Err(e) => Writer {
            conn,
            broken: Some(format!(
                "the store's tables are inconsistent ({e}); it is open for reading and verification only: run `cairn verify`"
            )),
            state: State::default(),
        },
    }
}

/// An org's agent key records in log order, read at start-up. Per org,
/// so that it is a search of the partial index `entries_key_records`:
/// over every org at once, SQLite scanned the whole `entries` table in
/// rowid order to save a sort, making every start linear in the log
/// (0.4 s at a million steps).
const ORG_KEY_RECORDS: &str = "SELECT seq, type, view FROM entries
     WHERE org = ?1 AND type IN ('key-registration', 'key-revocation') ORDER BY id";

fn rebuild(conn: &Connection) -> Result<State, StoreError> {
    let mut orgs = HashMap::new();
    {
        let mut stmt = conn
            .prepare("SELECT org, name, EXISTS (SELECT 1 FROM org_origins g WHERE g.org = o.org) FROM orgs o")
            .context("listing orgs")?;
        let rows: Vec<(i64, String, bool)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .context("listing orgs")?
            .collect::<Result<_, _>>()
            .context("listing orgs")?;
        for (id, name, foreign) in rows {
            let size = log_size_of(conn, id)?;
            let latest = latest_checkpoint(conn, id, &name)?;
            let frontier = checked_frontier(conn, id, &name, size, latest.as_ref())?;
            let last_logged: i64 = if size == 0 {
                0
            } else {
                conn.query_row(
                    "SELECT logged_at FROM entries WHERE id = ?1",
                    [row_id(id, size - 1)],
                    |r| r.get(0),
                )
                .context("reading the last entry's time")?
            };
            orgs.insert(
                name,
                OrgState {
                    id,
                    foreign,
                    frontier,
                    checkpoint_size: latest.as_ref().map_or(0, |c| c.size),
                    checkpoint_at: None,
                    last_logged: Timestamp::from_micros(last_logged).unwrap_or_default(),
                },
            );
        }
    }
    let mut keys = HashMap::new();
    let mut stmt = conn
        .prepare(ORG_KEY_RECORDS)
        .context("loading agent keys")?;
    for org in orgs.values().map(|o| o.id) {
        let rows = stmt
            .query_map([org], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .context("loading agent keys")?;
        for row in rows {
            let (seq, entry_type, view) = row.context("loading an agent key")?;
            match op_from_view(seq as u64, &entry_type, &view)? {
                OpRecord::KeyRegistration(reg) => {
                    keys.insert(
                        (org, reg.key_id),
                        AgentKey {
                            agent_id: reg.agent_id,
                            key: reg.public_key,
                            seq: seq as u64,
                            revoked: false,
                        },
                    );
                }
                OpRecord::KeyRevocation(rev) => {
                    if let Some(key) = keys.get_mut(&(org, rev.key_id)) {
                        key.revoked = true;
                    }
                }
                _ => {}
            }
        }
    }
    drop(stmt);
    Ok(State {
        orgs,
        sessions: HashMap::new(),
        keys,
        fulltext: Default::default(),
    })
}

/// An org's Merkle frontier for sequencing, not taken on trust from the
/// stored subtrees: at the latest signed checkpoint's size it must give
/// the signed root, and the entries after it are folded again from their
/// rows (each row's leaf recomputed and compared with the stored one).
fn checked_frontier(
    conn: &Connection,
    org: i64,
    name: &str,
    size: u64,
    latest: Option<&StoredCheckpoint>,
) -> Result<Frontier, StoreError> {
    let signed = latest.map_or(0, |c| c.size);
    if signed > size {
        return Err(StoreError::Corrupt(format!(
            "the log of org {name} holds {size} entries, fewer than its latest signed checkpoint ({signed}): entries were removed"
        )));
    }
    let mut frontier = frontier_of(&DbTree {
        conn,
        org,
        size: signed,
    })?;
    if let Some(cp) = latest
        && frontier.root() != cp.root
    {
        return Err(StoreError::Corrupt(format!(
            "the stored tree of org {name} does not give the root its latest checkpoint signed (size {signed})"
        )));
    }
    let (lo, _) = org_range(org);
    let mut stmt = conn
        .prepare(
            "SELECT seq, type, record_hash, logged_at, leaf_hash FROM entries
             WHERE id >= ?1 AND id < ?2 ORDER BY id",
        )
        .context("reading the log's tail")?;
    let mut rows = stmt
        .query(params![row_id(org, signed), lo + (1 << 40)])
        .context("reading the log's tail")?;
    while let Some(row) = rows.next().context("reading the log's tail")? {
        let seq: i64 = row.get(0).context("reading the log's tail")?;
        let entry_type: String = row.get(1).context("reading the log's tail")?;
        let record = blob_hash(row.get(2).context("reading the log's tail")?)?;
        let logged_at = Timestamp::from_micros(row.get(3).context("reading the log's tail")?)
            .ok_or_else(|| StoreError::Corrupt("a logged time out of range".into()))?;
        let stored = blob_hash(row.get(4).context("reading the log's tail")?)?;
        let leaf = leaf_hash(&cairn_core::log::log_leaf_data(
            seq as u64,
            &entry_type,
            &record,
            logged_at,
        ));
        if seq as u64 != frontier.size() || leaf != stored {
            return Err(StoreError::Corrupt(format!(
                "entry {seq} of org {name} does not match its stored leaf or follows a gap"
            )));
        }
        frontier.push(leaf);
    }
    Ok(frontier)
}

/// The step of session `sid` whose previous step is at `seq` (its first
/// step when `None`), found by the unique successor index.
fn successor(
    conn: &Connection,
    sid: i64,
    seq: Option<i64>,
) -> Result<Option<ChainEnd>, StoreError> {
    conn.prepare_cached(
        "SELECT seq, step_index, record_hash, created_at, kind FROM entries
         WHERE COALESCE(prev_seq, -1) = ?1 AND sid = ?2 AND type = 'step'",
    )
    .and_then(|mut s| {
        s.query_row(params![seq.unwrap_or(-1), sid], |r| {
            Ok(ChainEnd {
                seq: r.get(0)?,
                index: r.get(1)?,
                hash: r.get(2)?,
                created_at: r.get(3)?,
                kind: r.get(4)?,
            })
        })
        .optional()
    })
    .context("following a session's chain")
}

/// A session's last step as the log holds it: from the step its head row
/// names (if that is a step of the session), walked forward to the end.
fn true_end(conn: &Connection, org: i64, sid: i64) -> Result<Option<ChainEnd>, StoreError> {
    let hint = conn
        .prepare_cached(
            "SELECT e.seq, e.step_index, e.record_hash, e.created_at, e.kind
             FROM session_heads h JOIN entries e ON e.id = ((?1 << 40) | h.last_seq)
             WHERE h.sid = ?2 AND e.sid = ?2 AND e.type = 'step' AND e.step_index = h.last_index",
        )
        .and_then(|mut s| {
            s.query_row(params![org, sid], |r| {
                Ok(ChainEnd {
                    seq: r.get(0)?,
                    index: r.get(1)?,
                    hash: r.get(2)?,
                    created_at: r.get(3)?,
                    kind: r.get(4)?,
                })
            })
            .optional()
        })
        .context("reading a session head")?;
    chain_end(hint, |seq| successor(conn, sid, seq))
}

/// A session's sequencing state, read from the log.
fn load_session(
    conn: &Connection,
    org: i64,
    session_id: &str,
) -> Result<Option<SessionState>, StoreError> {
    let row = conn
        .prepare_cached(
            "SELECT sid, agent_id, profile, genesis, max_clock_skew_s,
                    EXISTS (SELECT 1 FROM entries x WHERE x.sid = s.sid AND x.type = 'seal')
             FROM sessions s WHERE org = ?1 AND session_id = ?2",
        )
        .and_then(|mut s| {
            s.query_row(params![org, session_id], |r| {
                Ok(StoredSession {
                    sid: r.get(0)?,
                    agent_id: r.get(1)?,
                    profile: r.get(2)?,
                    genesis: r.get(3)?,
                    max_clock_skew_s: r.get(4)?,
                    sealed: r.get(5)?,
                    first_seq: None,
                    end: None,
                })
            })
            .optional()
        })
        .context("loading a session")?;
    let Some(mut stored) = row else {
        return Ok(None);
    };
    stored.end = true_end(conn, org, stored.sid)?;
    stored.first_seq = successor(conn, stored.sid, None)?.map(|e| e.seq);
    stored.into_state().map(Some)
}

const API_KEY_COLUMNS: &str =
    "id, org_name, role, agent_id, token_hash, label, created_at, revoked_at";

fn api_key_from_row(row: &rusqlite::Row<'_>) -> Result<crate::ApiKey, StoreError> {
    let role: String = row.get(2).context("reading an API key")?;
    let created: i64 = row.get(6).context("reading an API key")?;
    let revoked: Option<i64> = row.get(7).context("reading an API key")?;
    Ok(crate::ApiKey {
        id: row.get(0).context("reading an API key")?,
        org_id: row.get(1).context("reading an API key")?,
        role: crate::Role::parse(&role)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown role {role}")))?,
        agent_id: row.get(3).context("reading an API key")?,
        token_hash: blob_hash(row.get(4).context("reading an API key")?)?,
        label: row.get(5).context("reading an API key")?,
        created_at: Timestamp::from_micros(created).unwrap_or_default(),
        revoked_at: revoked.and_then(Timestamp::from_micros),
    })
}

/// Fills `session_kinds` from the log of a store written before it
/// existed, then drops the index over `entries (sid, kind)` it replaces
/// (once: the index's presence says it has not run).
fn record_session_kinds(tx: &Connection) -> Result<(), StoreError> {
    let old: bool = tx
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'entries_session_kinds')",
            [],
            |r| r.get(0),
        )
        .context("checking the schema")?;
    if old {
        tx.execute_batch(
            "INSERT OR IGNORE INTO session_kinds (sid, kind)
               SELECT DISTINCT sid, kind FROM entries WHERE type = 'step';
             DROP INDEX entries_session_kinds;",
        )
        .context("recording the kinds of existing sessions")?;
    }
    Ok(())
}

fn insert_step_row(tx: &Connection, row: &StepRow<'_>) -> Result<(), StoreError> {
    let s = row.step;
    tx.prepare_cached(
        "INSERT INTO entries (id, org, seq, type, record_hash, leaf_hash, sid, step_index, trace_id, agent_id, kind,
         kind_label, content, input_data, output_data, confidence, duration_ms, token_count, model, metadata,
         created_at, turn_id, turn_step, task_id, links, status, seed, digest, prev_hash, sig_key_id, signature,
         has_embedding, erased, hidden, salts, prev_seq, logged_at)
         VALUES (?1, ?2, ?3, 'step', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20,
         ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35, ?36)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            row_id(row.org, row.seq),
            row.org,
            row.seq as i64,
            &row.hash.0[..],
            &row.leaf.0[..],
            row.sid,
            s.step_index as i64,
            s.trace_id,
            s.agent_id,
            s.kind.as_str(),
            s.kind_label,
            s.content,
            json_text(&s.input),
            json_text(&s.output),
            s.confidence,
            s.duration_ms.map(|v| v as i64),
            s.token_count.map(|v| v as i64),
            s.model,
            json_text(&s.metadata),
            s.created_at.as_micros(),
            s.turn_id,
            s.turn_step.map(|v| v as i64),
            s.task_id,
            links_text(&s.links),
            s.status.as_str(),
            row.seed.map(|seed| &seed[..]),
            &row.digest.0[..],
            &row.prev_hash.0[..],
            s.signer_key_id,
            row.signature.map(|sig| &sig[..]),
            row.has_embedding,
            row.erased,
            row.hidden,
            row.salts,
            row.prev_seq.map(|v| v as i64),
            row.logged_at.as_micros(),
        ])
    })
    .context("writing a step")?;
    Ok(())
}

/// The rowids of a session's steps, oldest first: from its last step as
/// the log holds it ([`true_end`]), back along `prev_seq`. A broken link
/// ends the walk early; verification then reports the missing index.
fn session_rowids(conn: &Connection, org: i64, sid: i64) -> Result<Vec<i64>, StoreError> {
    let Some(end) = true_end(conn, org, sid)? else {
        return Ok(Vec::new());
    };
    let mut ids = Vec::with_capacity(end.index as usize + 1);
    let mut next = Some(end.seq);
    let mut stmt = conn
        .prepare_cached("SELECT prev_seq FROM entries WHERE id = ?1 AND sid = ?2")
        .context("walking a session")?;
    while let Some(seq) = next {
        // A session holds index + 1 steps: more links mean a loop.
        if ids.len() > end.index as usize {
            break;
        }
        let id = row_id(org, seq as u64);
        let prev: Option<Option<i64>> = stmt
            .query_row(params![id, sid], |r| r.get(0))
            .optional()
            .context("walking a session")?;
        let Some(prev) = prev else { break };
        ids.push(id);
        next = prev;
    }
    ids.reverse();
    Ok(ids)
}

/// Builds a [`StoredStep`] from a row selected with [`STEP_COLUMNS`].
fn step_from_row(row: &rusqlite::Row<'_>) -> Result<StoredStep, StoreError> {
    let read = |e| StoreError::Database {
        context: "reading a step".into(),
        source: e,
    };
    let raw = (|| {
        Ok::<_, rusqlite::Error>(RawStep {
            seq: row.get(0)?,
            trace_id: row.get(1)?,
            agent_id: row.get(2)?,
            kind: row.get(3)?,
            kind_label: row.get(4)?,
            content: row.get(5)?,
            input: row.get(6)?,
            output: row.get(7)?,
            confidence: row.get(8)?,
            duration_ms: row.get(9)?,
            token_count: row.get(10)?,
            model: row.get(11)?,
            metadata: row.get(12)?,
            created_at: row.get(13)?,
            turn_id: row.get(14)?,
            turn_step: row.get(15)?,
            task_id: row.get(16)?,
            links: row.get(17)?,
            status: row.get(18)?,
            seed: row.get(19)?,
            digest: row.get(20)?,
            prev_hash: row.get(21)?,
            hash: row.get(22)?,
            signer_key_id: row.get(23)?,
            signature: row.get(24)?,
            has_embedding: row.get(25)?,
            erased: row.get(26)?,
            hidden: row.get(27)?,
            step_index: row.get(28)?,
            org_id: row.get(29)?,
            session_id: row.get(30)?,
            salts: row.get(31)?,
            logged_at: row.get(32)?,
        })
    })()
    .map_err(read)?;
    raw.parse()
}

/// A log entry from a row selected with [`STEP_COLUMNS`] followed by
/// `type, view, leaf_hash` (at `n`, `n + 1`, `n + 2`).
fn entry_from_row(row: &rusqlite::Row<'_>, n: usize) -> Result<LogEntry, StoreError> {
    let entry_type: String = row.get(n).context("reading the log")?;
    if entry_type == "step" {
        let stored = step_from_row(row)?;
        return Ok(LogEntry {
            seq: stored.seq,
            logged_at: stored.logged_at,
            record: LogRecord::Step(stored.record),
        });
    }
    let seq: i64 = row.get(0).context("reading the log")?;
    let logged_at: i64 = row.get(n - 1).context("reading the log")?;
    let view: Option<String> = row.get(n + 1).context("reading the log")?;
    let hash = blob_hash(row.get(22).context("reading the log")?)?;
    let view = view.ok_or_else(|| StoreError::Corrupt(format!("record {seq} has no view")))?;
    let record = op_from_view(seq as u64, &entry_type, &view)?;
    Ok(LogEntry {
        seq: seq as u64,
        logged_at: Timestamp::from_micros(logged_at)
            .ok_or_else(|| StoreError::Corrupt(format!("record {seq}: time out of range")))?,
        record: LogRecord::Op { record, hash },
    })
}

/// The frontier of a stored tree: one subtree hash per set bit of its size.
fn frontier_of(tree: &DbTree<'_>) -> Result<Frontier, StoreError> {
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

/// The writer's transaction, seen by the engine: the state comes from
/// memory (this process is the only writer), the rows go to SQLite.
struct SqliteTx<'a> {
    conn: &'a Connection,
    state: &'a mut State,
}

impl WriteTx for SqliteTx<'_> {
    fn org(&mut self, name: &str) -> Result<Option<OrgState>, StoreError> {
        Ok(self.state.orgs.get(name).cloned())
    }

    fn create_org(&mut self, name: &str) -> Result<i64, StoreError> {
        self.conn
            .execute("INSERT INTO orgs (name) VALUES (?1)", [name])
            .context("creating an org")?;
        Ok(self.conn.last_insert_rowid())
    }

    fn session(&mut self, org: i64, session_id: &str) -> Result<Option<SessionState>, StoreError> {
        let key = (org, session_id.to_owned());
        if let Some(state) = self.state.sessions.get(&key) {
            return Ok(Some(state.clone()));
        }
        // Committed data (the engine asks for a session the batch touched
        // from its own overlay), so it may be cached whatever the batch does.
        let loaded = load_session(self.conn, org, session_id)?;
        if let Some(state) = &loaded {
            if self.state.sessions.len() >= SESSION_CACHE {
                self.state.sessions.clear();
            }
            self.state.sessions.insert(key, state.clone());
        }
        Ok(loaded)
    }

    fn agent_key(&mut self, org: i64, key_id: &str) -> Result<Option<AgentKey>, StoreError> {
        Ok(self.state.keys.get(&(org, key_id.to_owned())).cloned())
    }

    fn trace_id_taken(&mut self, org: i64, trace_id: &str) -> Result<bool, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM entries WHERE org = ?1 AND trace_id = ?2)",
            )
            .and_then(|mut s| s.query_row(params![org, trace_id], |r| r.get(0)))
            .context("checking a trace id")
    }

    fn record_type(&mut self, org: i64, id: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .prepare_cached("SELECT type FROM entries WHERE org = ?1 AND trace_id = ?2")
            .and_then(|mut s| s.query_row(params![org, id], |r| r.get(0)).optional())
            .context("looking up a record by id")
    }

    fn session_sealed_with(&mut self, org: i64, hash: &Hash) -> Result<Option<String>, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT s.session_id FROM entries e JOIN sessions s ON s.sid = e.sid
                 WHERE e.org = ?1 AND e.type = 'seal' AND json_extract(e.view, '$.final_hash') = ?2",
            )
            .and_then(|mut s| {
                s.query_row(params![org, hash.to_hex()], |r| r.get(0))
                    .optional()
            })
            .context("looking up a sealed session")
    }

    fn successor_of(&mut self, org: i64, hash: &Hash) -> Result<Option<String>, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT json_extract(view, '$.session_id') FROM entries
                 WHERE org = ?1 AND type = 'session-start' AND json_extract(view, '$.predecessor') = ?2",
            )
            .and_then(|mut s| s.query_row(params![org, hash.to_hex()], |r| r.get(0)).optional())
            .context("looking up a successor")
    }

    fn insert_step(&mut self, row: &StepRow<'_>) -> Result<(), StoreError> {
        insert_step_row(self.conn, row)
    }

    fn insert_search_doc(&mut self, org: i64, seq: u64, doc: &str) -> Result<(), StoreError> {
        // Written by the index's thread after the batch commits
        // (`fulltext_index`).
        self.state.fulltext.add(row_id(org, seq), doc);
        Ok(())
    }

    fn queue_embedding(&mut self, org: i64, seq: u64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("INSERT OR IGNORE INTO embedding_queue (id, org) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(params![row_id(org, seq), org]))
            .context("queueing a step for embedding")?;
        Ok(())
    }

    fn insert_op(&mut self, row: &OpRow<'_>) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO entries (id, org, seq, type, logged_at, record_hash, leaf_hash, view, trace_id,
                 sid, step_index, agent_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    row_id(row.org, row.seq),
                    row.org,
                    row.seq as i64,
                    row.op.entry_type(),
                    row.logged_at.as_micros(),
                    &row.hash.0[..],
                    &row.leaf.0[..],
                    row.op.to_view().to_string(),
                    op_record_id(row.op),
                    row.sid,
                    row.step_index.map(|i| i as i64),
                    row.agent_id,
                ])
            })
            .context("writing an operational record")?;
        Ok(())
    }

    fn insert_node(
        &mut self,
        org: i64,
        level: u32,
        index: u64,
        hash: &Hash,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("INSERT INTO nodes (org, level, idx, hash) VALUES (?1, ?2, ?3, ?4)")
            .and_then(|mut s| s.execute(params![org, level, index as i64, &hash.0[..]]))
            .context("writing a tree node")?;
        Ok(())
    }

    fn insert_session(
        &mut self,
        org: i64,
        header: &SessionHeader,
        genesis: &Hash,
        start_seq: u64,
    ) -> Result<i64, StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO sessions (org, session_id, agent_id, profile, started_at, start_seq, genesis,
                 max_clock_skew_s)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    org,
                    header.session_id,
                    header.agent_id,
                    header.profile.as_str(),
                    header.started_at.as_micros(),
                    start_seq as i64,
                    &genesis.0[..],
                    i64::try_from(header.max_clock_skew_s).unwrap_or(i64::MAX),
                ])
            })
            .context("writing a session")?;
        Ok(self.conn.last_insert_rowid())
    }

    fn chain_link(&mut self, org: i64, seq: u64) -> Result<(u64, Hash, Option<u64>), StoreError> {
        let (index, hash, prev): (i64, Vec<u8>, Option<i64>) = self
            .conn
            .prepare_cached("SELECT step_index, record_hash, prev_seq FROM entries WHERE id = ?1")
            .and_then(|mut s| {
                s.query_row([row_id(org, seq)], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
            })
            .context("reading a session's chain")?;
        Ok((index as u64, blob_hash(hash)?, prev.map(|p| p as u64)))
    }

    fn step_by_trace(
        &mut self,
        org: i64,
        trace_id: &str,
    ) -> Result<Option<StoredStep>, StoreError> {
        let sql = format!(
            "SELECT {STEP_COLUMNS} FROM entries e JOIN orgs o ON o.org = e.org
             JOIN sessions s ON s.sid = e.sid WHERE e.org = ?1 AND e.trace_id = ?2 AND e.type = 'step'"
        );
        let mut stmt = self.conn.prepare_cached(&sql).context("finding a step")?;
        let mut rows = stmt
            .query(params![org, trace_id])
            .context("finding a step")?;
        match rows.next().context("finding a step")? {
            Some(row) => Ok(Some(step_from_row(row)?)),
            None => Ok(None),
        }
    }

    fn erase(&mut self, org: i64, seq: u64, hidden: &str) -> Result<(), StoreError> {
        let id = row_id(org, seq);
        self.conn
            .prepare_cached(
                "UPDATE entries SET content = NULL, input_data = NULL, output_data = NULL, metadata = NULL,
                 erased = 1, hidden = ?2, has_embedding = 0 WHERE id = ?1",
            )
            .and_then(|mut s| s.execute(params![id, hidden]))
            .context("erasing a step")?;
        // A vector would still carry what the content said, and the
        // full-text index its words.
        for sql in [
            "DELETE FROM vectors WHERE id = ?1",
            "DELETE FROM embedding_queue WHERE id = ?1",
        ] {
            self.conn
                .prepare_cached(sql)
                .and_then(|mut s| s.execute([id]))
                .context("erasing an embedding")?;
        }
        // Deleted from the index after the batch commits, before it is
        // acknowledged (`fulltext_index`).
        self.state.fulltext.erase(id);
        Ok(())
    }

    fn expired_sessions(
        &mut self,
        org: i64,
        older_than: Timestamp,
    ) -> Result<Vec<i64>, StoreError> {
        // Candidates by their head rows, confirmed by the log: a head moved
        // back must not make an active session look expired.
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT s.sid FROM sessions s JOIN session_heads h ON h.sid = s.sid
                 LEFT JOIN entries e ON e.id = ((s.org << 40) | h.last_seq) AND e.sid = s.sid
                   AND e.type = 'step' AND e.step_index = h.last_index
                 WHERE s.org = ?1 AND (e.id IS NULL OR e.created_at < ?2)",
            )
            .context("finding expired sessions")?;
        let candidates: Vec<i64> = stmt
            .query_map(params![org, older_than.as_micros()], |r| r.get(0))
            .context("finding expired sessions")?
            .collect::<Result<_, _>>()
            .context("finding expired sessions")?;
        let mut expired = Vec::new();
        for sid in candidates {
            if true_end(self.conn, org, sid)?.is_some_and(|e| e.created_at < older_than.as_micros())
            {
                expired.push(sid);
            }
        }
        Ok(expired)
    }

    fn unerased_steps(&mut self, org: i64, sid: i64) -> Result<Vec<String>, StoreError> {
        let ids = session_rowids(self.conn, org, sid)?;
        let mut stmt = self
            .conn
            .prepare_cached("SELECT trace_id FROM entries WHERE id = ?1 AND erased = 0")
            .context("reading an expired session")?;
        let mut pending = Vec::new();
        for id in ids {
            if let Some(trace) = stmt
                .query_row([id], |r| r.get::<_, String>(0))
                .optional()
                .context("reading an expired session")?
            {
                pending.push(trace);
            }
        }
        Ok(pending)
    }

    fn insert_checkpoint(&mut self, org: i64, cp: &StoredCheckpoint) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("INSERT INTO checkpoints (org, size, root, note, created_at) VALUES (?1, ?2, ?3, ?4, ?5)")
            .and_then(|mut s| {
                s.execute(params![org, cp.size as i64, &cp.root.0[..], cp.note, cp.created_at.as_micros()])
            })
            .context("writing a checkpoint")?;
        Ok(())
    }

    fn latest_checkpoint(
        &mut self,
        org: i64,
        name: &str,
    ) -> Result<Option<StoredCheckpoint>, StoreError> {
        latest_checkpoint(self.conn, org, name)
    }

    fn put_session_kinds(
        &mut self,
        pairs: &[(i64, cairn_core::kind::StepKind)],
    ) -> Result<(), StoreError> {
        let mut insert = self
            .conn
            .prepare_cached("INSERT OR IGNORE INTO session_kinds (sid, kind) VALUES (?1, ?2)")
            .context("recording the kinds of sessions")?;
        for (sid, kind) in pairs {
            insert
                .execute(params![sid, kind.as_str()])
                .context("recording the kinds of sessions")?;
        }
        Ok(())
    }

    fn put_session_head(
        &mut self,
        sid: i64,
        first_seq: u64,
        last_seq: u64,
        last_index: u64,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO session_heads (sid, first_seq, last_seq, last_index) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (sid) DO UPDATE SET last_seq = excluded.last_seq, last_index = excluded.last_index
                 WHERE session_heads.first_seq = excluded.first_seq
                   AND session_heads.last_seq < excluded.last_seq
                   AND session_heads.last_index < excluded.last_index",
            )
            .and_then(|mut s| s.execute(params![sid, first_seq as i64, last_seq as i64, last_index as i64]))
            .context("recording session heads")?;
        Ok(())
    }

    fn insert_origin(
        &mut self,
        org: i64,
        server_name: &str,
        server_key: &str,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO org_origins (org, server_name, server_key) VALUES (?1, ?2, ?3)",
                params![org, server_name, server_key],
            )
            .context("recording the org's origin")?;
        Ok(())
    }
}

impl SqliteStore {
    fn engine(&self) -> Engine<'_> {
        Engine {
            key: &self.key,
            limits: self.limits,
            embedding_sample_rate: self.embedding_sample_rate,
            checkpoint_interval: self.checkpoint_interval,
            max_clock_skew_s: self.max_clock_skew_s,
        }
    }
}

fn latest_checkpoint(
    conn: &Connection,
    org: i64,
    name: &str,
) -> Result<Option<StoredCheckpoint>, StoreError> {
    let row: Option<(i64, Vec<u8>, String, i64)> = conn
        .prepare_cached("SELECT size, root, note, created_at FROM checkpoints WHERE org = ?1 ORDER BY size DESC LIMIT 1")
        .and_then(|mut s| {
            s.query_row([org], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .optional()
        })
        .context("reading the latest checkpoint")?;
    row.map(|(size, root, note, created)| {
        Ok(StoredCheckpoint {
            org_id: name.to_owned(),
            size: size as u64,
            root: blob_hash(root)?,
            note,
            created_at: Timestamp::from_micros(created).unwrap_or_default(),
        })
    })
    .transpose()
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
        if let Some(index) = &self.fulltext
            && index.backlogged()
        {
            index.flush()?;
        }
        w.state.fulltext.begin();
        // Dropping the transaction without commit (an error below) rolls the
        // whole batch back; the overlay is then discarded too.
        let tx = w.conn.unchecked_transaction().context("starting a batch")?;
        let (results, overlay) = self.engine().run_batch(
            &mut SqliteTx {
                conn: &tx,
                state: &mut w.state,
            },
            batch,
        )?;
        tx.commit().context("committing a batch")?;
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

    fn read_log(
        &self,
        org_id: &str,
        from: u64,
        to: u64,
        visit: &mut dyn FnMut(StoredEntry) -> bool,
    ) -> Result<(), StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(());
            };
            let sql = format!(
                "SELECT {STEP_COLUMNS}, e.type, e.view, e.leaf_hash FROM entries e
                 JOIN orgs o ON o.org = e.org LEFT JOIN sessions s ON s.sid = e.sid
                 WHERE e.id >= ?1 AND e.id < ?2 ORDER BY e.id"
            );
            let (lo, hi) = org_range(org);
            let mut stmt = c.prepare(&sql).context("reading the log")?;
            let mut rows = stmt
                .query(params![row_id(org, from).max(lo), row_id(org, to).min(hi)])
                .context("reading the log")?;
            let n = STEP_COLUMN_COUNT;
            while let Some(row) = rows.next().context("reading the log")? {
                let seq: i64 = row.get(0).context("reading the log")?;
                let leaf: Vec<u8> = row.get(n + 2).context("reading the log")?;
                let stored = StoredEntry {
                    seq: seq as u64,
                    leaf: blob_hash(leaf).unwrap_or(Hash::ZERO),
                    entry: entry_from_row(row, n).map_err(|e| e.to_string()),
                };
                if !visit(stored) {
                    break;
                }
            }
            Ok(())
        })
    }

    fn session(&self, org_id: &str, session_id: &str) -> Result<Option<SessionInfo>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(None);
            };
            let row: Option<(i64, i64, Vec<u8>)> = c
                .prepare_cached("SELECT sid, start_seq, genesis FROM sessions WHERE org = ?1 AND session_id = ?2")
                .and_then(|mut s| {
                    s.query_row(params![org, session_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                        .optional()
                })
                .context("reading a session")?;
            let Some((sid, start_seq, genesis)) = row else {
                return Ok(None);
            };
            let view: String = c
                .query_row("SELECT view FROM entries WHERE id = ?1", params![row_id(org, start_seq as u64)], |r| {
                    r.get(0)
                })
                .context("reading a session start")?;
            let OpRecord::SessionStart(header) = op_from_view(start_seq as u64, "session-start", &view)? else {
                return Err(StoreError::Corrupt("session start record has another type".into()));
            };
            let last = true_end(c, org, sid)?.map(|e| (e.index, e.hash));
            let seal_view: Option<String> = c
                .query_row(
                    "SELECT view FROM entries WHERE sid = ?1 AND type = 'seal'",
                    params![sid],
                    |r| r.get(0),
                )
                .optional()
                .context("reading a seal")?;
            let seal = match seal_view {
                None => None,
                Some(v) => match op_from_view(0, "seal", &v)? {
                    OpRecord::Seal(s) => Some(s),
                    _ => return Err(StoreError::Corrupt("seal record does not parse".into())),
                },
            };
            let (step_count, head) = match last {
                Some((index, hash)) => (index as u64 + 1, blob_hash(hash)?),
                None => (0, blob_hash(genesis)?),
            };
            Ok(Some(SessionInfo {
                header,
                start_seq: start_seq as u64,
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
        self.read(|c| {
            let session: Option<(i64, i64)> = c
                .prepare_cached(
                    "SELECT s.org, s.sid FROM sessions s JOIN orgs o ON o.org = s.org
                     WHERE o.name = ?1 AND s.session_id = ?2",
                )
                .and_then(|mut s| {
                    s.query_row(params![org_id, session_id], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()
                })
                .context("reading a session")?;
            let Some((org, sid)) = session else {
                return Ok(());
            };
            let sql = format!(
                "SELECT {STEP_COLUMNS} FROM entries e JOIN orgs o ON o.org = e.org
                 JOIN sessions s ON s.sid = e.sid WHERE e.id = ?1"
            );
            let mut stmt = c.prepare_cached(&sql).context("reading a session")?;
            for id in session_rowids(c, org, sid)? {
                let mut rows = stmt.query([id]).context("reading a session")?;
                if let Some(row) = rows.next().context("reading a session")?
                    && !visit(step_from_row(row)?)
                {
                    break;
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
        self.read(|c| {
            let sql = format!(
                "SELECT {STEP_COLUMNS} FROM entries e JOIN orgs o ON o.org = e.org JOIN sessions s ON s.sid = e.sid
                 WHERE o.name = ?1 AND e.trace_id = ?2 AND e.type = 'step'"
            );
            let mut stmt = c.prepare_cached(&sql).context("looking up a step")?;
            let mut rows = stmt.query(params![org_id, trace_id]).context("looking up a step")?;
            match rows.next().context("looking up a step")? {
                Some(row) => Ok(Some(step_from_row(row)?)),
                None => Ok(None),
            }
        })
    }

    fn list_sessions(
        &self,
        org_id: &str,
        filter: &SessionFilter,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            let (sql, params) =
                listing::session_listing_query(org, filter, limit, |n| format!("?{n}"));
            let params: Vec<Box<dyn rusqlite::ToSql>> =
                params.into_iter().map(ListParam::into_sqlite).collect();
            let mut stmt = c.prepare_cached(&sql).context("listing sessions")?;
            let rows: Vec<(String, String, i64, i64, bool)> = stmt
                .query_map(rusqlite::params_from_iter(params.iter()), |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .context("listing sessions")?
                .collect::<Result<_, _>>()
                .context("listing sessions")?;
            let mut out = Vec::with_capacity(rows.len());
            for (session_id, agent_id, started, sid, sealed) in rows {
                // Counted from the log (the head row is only a hint).
                let end = true_end(c, org, sid)?;
                let first = match &end {
                    Some(_) => successor(c, sid, None)?,
                    None => None,
                };
                out.push(SessionSummary {
                    session_id,
                    agent_id,
                    step_count: end.as_ref().map_or(0, |e| e.index as u64 + 1),
                    first_step_at: first.and_then(|e| Timestamp::from_micros(e.created_at)),
                    last_step_at: end.and_then(|e| Timestamp::from_micros(e.created_at)),
                    started_at: Timestamp::from_micros(started).unwrap_or_default(),
                    sealed,
                });
            }
            Ok(out)
        })
    }

    fn latest_checkpoint(&self, org_id: &str) -> Result<Option<StoredCheckpoint>, StoreError> {
        self.read(|c| match Self::org_id_of(c, org_id)? {
            Some(org) => latest_checkpoint(c, org, org_id),
            None => Ok(None),
        })
    }

    fn checkpoints(&self, org_id: &str) -> Result<Vec<StoredCheckpoint>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            let mut stmt = c
                .prepare("SELECT size, root, note, created_at FROM checkpoints WHERE org = ?1 ORDER BY size")
                .context("listing checkpoints")?;
            let rows = stmt
                .query_map([org], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?, r.get::<_, String>(2)?, r.get::<_, i64>(3)?))
                })
                .context("listing checkpoints")?;
            let mut out = Vec::new();
            for row in rows {
                let (size, root, note, created) = row.context("listing checkpoints")?;
                out.push(StoredCheckpoint {
                    org_id: org_id.to_owned(),
                    size: size as u64,
                    root: blob_hash(root)?,
                    note,
                    created_at: Timestamp::from_micros(created).unwrap_or_default(),
                });
            }
            Ok(out)
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
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(cairn_core::merkle::empty_root());
            };
            let tree = DbTree { conn: c, org, size };
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
        // What this process acknowledged is found at once.
        self.flush_fulltext()?;
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            fulltext_index::ensure_attached(c, &self.path)?;
            let (sql, params) = listing::step_search_query(
                listing::Engine::Fts5,
                org,
                query.to_fts5(),
                filter,
                limit,
                |n| format!("?{n}"),
            );
            let params: Vec<Box<dyn rusqlite::ToSql>> =
                params.into_iter().map(ListParam::into_sqlite).collect();
            let mut stmt = c
                .prepare_cached(&sql)
                .context("searching the full-text index")?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(params.iter()), |r| {
                    Ok((r.get::<_, i64>(0)? as u64, r.get::<_, f64>(1)?))
                })
                .context("searching the full-text index")?
                .collect::<Result<Vec<_>, _>>()
                .context("searching the full-text index")?;
            Ok(rows)
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

    fn flagged_steps(
        &self,
        org_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<StoredStep>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            let (_, hi) = org_range(org);
            let sql = format!(
                "SELECT {STEP_COLUMNS} FROM entries e JOIN orgs o ON o.org = e.org
                 JOIN sessions s ON s.sid = e.sid
                 WHERE e.org = ?1 AND e.status = 'flagged' AND e.id >= ?2 AND e.id < ?3
                 ORDER BY e.id LIMIT ?4"
            );
            let mut stmt = c.prepare_cached(&sql).context("listing flagged steps")?;
            let mut rows = stmt
                .query(params![
                    org,
                    row_id(org, from),
                    hi,
                    limit.min(i64::MAX as usize) as i64
                ])
                .context("listing flagged steps")?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().context("listing flagged steps")? {
                out.push(step_from_row(row)?);
            }
            Ok(out)
        })
    }

    fn op_records(
        &self,
        org_id: &str,
        entry_type: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, OpRecord)>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            let mut stmt = c
                .prepare_cached(
                    "SELECT seq, view FROM entries WHERE org = ?1 AND type = ?2 AND type <> 'step'
                     AND seq >= ?3 ORDER BY id LIMIT ?4",
                )
                .context("listing records")?;
            let rows = stmt
                .query_map(
                    params![
                        org,
                        entry_type,
                        from as i64,
                        limit.min(i64::MAX as usize) as i64
                    ],
                    |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
                )
                .context("listing records")?;
            let mut out = Vec::new();
            for row in rows {
                let (seq, view) = row.context("listing records")?;
                out.push((seq as u64, op_from_view(seq as u64, entry_type, &view)?));
            }
            Ok(out)
        })
    }

    fn session_records(
        &self,
        org_id: &str,
        session_id: &str,
    ) -> Result<Vec<(u64, OpRecord)>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT e.seq, e.type, e.view FROM sessions s JOIN orgs o ON o.org = s.org
                     JOIN entries e ON e.sid = s.sid AND e.type <> 'step'
                     WHERE o.name = ?1 AND s.session_id = ?2 ORDER BY e.id",
                )
                .context("reading a session's records")?;
            let rows: Vec<(i64, String, String)> = stmt
                .query_map(params![org_id, session_id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .context("reading a session's records")?
                .collect::<Result<_, _>>()
                .context("reading a session's records")?;
            rows.into_iter()
                .map(|(seq, t, view)| Ok((seq as u64, op_from_view(seq as u64, &t, &view)?)))
                .collect()
        })
    }

    fn key_records(
        &self,
        org_id: &str,
        agent_id: Option<&str>,
    ) -> Result<Vec<(u64, OpRecord)>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT e.seq, e.type, e.view FROM entries e JOIN orgs o ON o.org = e.org
                     WHERE o.name = ?1 AND e.type IN ('key-registration', 'key-revocation')
                       AND (?2 IS NULL OR e.agent_id = ?2) ORDER BY e.id",
                )
                .context("reading key records")?;
            let rows: Vec<(i64, String, String)> = stmt
                .query_map(params![org_id, agent_id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .context("reading key records")?
                .collect::<Result<_, _>>()
                .context("reading key records")?;
            rows.into_iter()
                .map(|(seq, t, view)| Ok((seq as u64, op_from_view(seq as u64, &t, &view)?)))
                .collect()
        })
    }

    fn op_by_id(&self, org_id: &str, id: &str) -> Result<Option<(u64, OpRecord)>, StoreError> {
        let found: Option<(i64, String, String)> = self.read(|c| {
            c.prepare_cached(
                "SELECT e.seq, e.type, e.view FROM entries e JOIN orgs o ON o.org = e.org
                 WHERE o.name = ?1 AND e.trace_id = ?2 AND e.type <> 'step'",
            )
            .and_then(|mut s| {
                s.query_row(params![org_id, id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()
            })
            .context("looking up a record by id")
        })?;
        found
            .map(|(seq, entry_type, view)| {
                Ok((seq as u64, op_from_view(seq as u64, &entry_type, &view)?))
            })
            .transpose()
    }

    fn analyst_query_limited(
        &self,
        org_id: &str,
        sql: &str,
        limits: &analyst::QueryLimits,
    ) -> Result<AnalystResult, AnalystError> {
        let org = self.read(|c| Self::org_id_of(c, org_id))?.unwrap_or(0);
        let statement = analyst::prepare(sql, analyst::Dialect::Sqlite, org, "main")?;
        // A connection of its own: read-only, reading only the ledger's
        // tables, with no string longer than the value limit, and a handler
        // that stops a long query.
        let mut c = open_analyst(&self.path, limits)?;
        let deadline = std::time::Instant::now() + limits.time;
        c.progress_handler(1_000, Some(move || std::time::Instant::now() > deadline))
            .context("setting the time limit")?;
        let failed = |e: rusqlite::Error| analyst_failure(e, limits, deadline);
        let mut stmt = c.prepare(&statement).map_err(failed)?;
        let columns: Vec<String> = stmt.column_names().map(str::to_owned).collect();
        if columns.len() > analyst::MAX_COLUMNS {
            return Err(AnalystError::Refused(format!(
                "an answer has at most {} columns, not {}",
                analyst::MAX_COLUMNS,
                columns.len()
            )));
        }
        let mut rows = stmt.query([]).map_err(failed)?;
        let mut out = Vec::new();
        let mut truncated = false;
        let mut answer_bytes = 0usize;
        while let Some(row) = rows.next().map_err(failed)? {
            if out.len() == limits.max_rows {
                truncated = true;
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err(AnalystError::TimedOut(limits.time));
            }
            let mut values = Vec::with_capacity(columns.len());
            let mut row_bytes = 0usize;
            for (i, name) in columns.iter().enumerate() {
                use rusqlite::types::ValueRef;
                let value = row.get_ref(i).map_err(failed)?;
                let size = match value {
                    ValueRef::Text(t) => t.len(),
                    ValueRef::Blob(b) => 2 * b.len(),
                    _ => 8,
                };
                if size > limits.max_value_bytes {
                    return Err(analyst::value_too_large(name, limits));
                }
                row_bytes += size;
                values.push(match value {
                    ValueRef::Null => serde_json::Value::Null,
                    ValueRef::Integer(n) => n.into(),
                    ValueRef::Real(f) => f.into(),
                    ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned().into(),
                    ValueRef::Blob(b) => hex::encode(b).into(),
                });
            }
            answer_bytes += row_bytes;
            if answer_bytes > limits.max_answer_bytes {
                truncated = true;
                break;
            }
            out.push(values);
        }
        Ok(AnalystResult {
            columns,
            rows: out,
            truncated,
        })
    }

    fn put_api_key(&self, key: &crate::ApiKey) -> Result<(), StoreError> {
        let w = self.writer.lock().map_err(|_| poisoned())?;
        w.conn
            .execute(
                "INSERT INTO api_keys (id, org_name, role, agent_id, token_hash, label, created_at, revoked_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    key.id,
                    key.org_id,
                    key.role.as_str(),
                    key.agent_id,
                    &key.token_hash.0[..],
                    key.label,
                    key.created_at.as_micros(),
                    key.revoked_at.map(Timestamp::as_micros)
                ],
            )
            .context("storing an API key")?;
        Ok(())
    }

    fn api_key_by_hash(&self, token_hash: &Hash) -> Result<Option<crate::ApiKey>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare_cached(&format!(
                    "SELECT {API_KEY_COLUMNS} FROM api_keys WHERE token_hash = ?1"
                ))
                .context("looking up an API key")?;
            let mut rows = stmt
                .query([&token_hash.0[..]])
                .context("looking up an API key")?;
            match rows.next().context("looking up an API key")? {
                Some(row) => Ok(Some(api_key_from_row(row)?)),
                None => Ok(None),
            }
        })
    }

    fn api_keys(&self, org_id: &str) -> Result<Vec<crate::ApiKey>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare_cached(&format!(
                    "SELECT {API_KEY_COLUMNS} FROM api_keys WHERE org_name = ?1 ORDER BY created_at, id"
                ))
                .context("listing API keys")?;
            let mut rows = stmt.query([org_id]).context("listing API keys")?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().context("listing API keys")? {
                out.push(api_key_from_row(row)?);
            }
            Ok(out)
        })
    }

    fn put_cosignature(
        &self,
        org_id: &str,
        size: u64,
        witness: &str,
        line: &str,
    ) -> Result<(), StoreError> {
        let w = self.writer.lock().map_err(|_| poisoned())?;
        w.conn
            .execute(
                "INSERT INTO cosignatures (org_name, size, witness, line) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (org_name, size, witness) DO UPDATE SET line = excluded.line",
                params![org_id, size as i64, witness, line],
            )
            .context("storing a cosignature")?;
        Ok(())
    }

    fn log_keys(&self, org_id: &str) -> Result<Vec<NoteVerifier>, StoreError> {
        self.read(|c| {
            let foreign: Option<String> = c
                .query_row(
                    "SELECT g.server_key FROM org_origins g JOIN orgs o ON o.org = g.org WHERE o.name = ?1",
                    [org_id],
                    |r| r.get(0),
                )
                .optional()
                .context("reading an org's origin")?;
            if let Some(key) = foreign {
                return NoteVerifier::parse(&key)
                    .map(|k| vec![k])
                    .map_err(|e| StoreError::Corrupt(format!("an imported log's key: {e}")));
            }
            let first: Option<String> = c
                .query_row("SELECT value FROM meta WHERE key = 'server_key'", [], |r| r.get(0))
                .optional()
                .context("reading the server key")?;
            let mut keys = crate::keys::log_keys_from_meta(first.as_deref(), &meta_key_rows(c)?)?;
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
        let w = self.writer.lock().map_err(|_| poisoned())?;
        w.conn
            .execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES (?1, ?2)",
                params![
                    crate::keys::log_key_row(action, key),
                    crate::now().to_string()
                ],
            )
            .context("recording a log key")?;
        Ok(())
    }

    fn cosignatures(&self, org_id: &str, size: u64) -> Result<Vec<String>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT line FROM cosignatures WHERE org_name = ?1 AND size = ?2 ORDER BY witness",
                )
                .context("reading cosignatures")?;
            let rows = stmt
                .query_map(params![org_id, size as i64], |r| r.get::<_, String>(0))
                .context("reading cosignatures")?;
            let mut out = Vec::new();
            for row in rows {
                out.push(row.context("reading cosignatures")?);
            }
            Ok(out)
        })
    }

    fn revoke_api_key(
        &self,
        org_id: &str,
        key_id: &str,
        at: Timestamp,
    ) -> Result<bool, StoreError> {
        let w = self.writer.lock().map_err(|_| poisoned())?;
        let changed = w
            .conn
            .execute(
                "UPDATE api_keys SET revoked_at = ?3 WHERE org_name = ?1 AND id = ?2 AND revoked_at IS NULL",
                params![org_id, key_id, at.as_micros()],
            )
            .context("revoking an API key")?;
        Ok(changed > 0)
    }

    fn agent_keys(&self, org_id: &str) -> Result<Vec<KeyRegistration>, StoreError> {
        let views = self.read(|c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT e.seq, e.view FROM entries e JOIN orgs o ON o.org = e.org
                     WHERE o.name = ?1 AND e.type = 'key-registration' ORDER BY e.id",
                )
                .context("reading agent keys")?;
            let rows = stmt
                .query_map([org_id], |r| {
                    Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?))
                })
                .context("reading agent keys")?;
            rows.collect::<Result<Vec<_>, _>>()
                .context("reading agent keys")
        })?;
        Ok(agent_keys_from_views(views)?
            .into_iter()
            .map(|(_, reg)| reg)
            .collect())
    }

    fn log_signer(&self, org_id: &str) -> Result<(String, NoteVerifier), StoreError> {
        let origin: Option<(String, String)> = self.read(|c| {
            c.query_row(
                "SELECT g.server_name, g.server_key FROM org_origins g JOIN orgs o ON o.org = g.org WHERE o.name = ?1",
                [org_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .context("reading an org's origin")
        })?;
        crate::engine::signer_of(&self.key, origin)
    }

    fn import_log(
        &self,
        org_id: &str,
        header: &cairn_core::bundle::BundleHeader,
        checkpoint_note: &str,
        entries: &mut dyn Iterator<Item = Result<LogEntry, String>>,
    ) -> Result<u64, crate::ImportError> {
        let mut guard = self.writer.lock().map_err(|_| poisoned())?;
        let w = &mut *guard;
        if w.broken.is_some() {
            return Err(crate::ImportError::Refused(
                "the store is inconsistent; run `cairn verify`".into(),
            ));
        }
        w.state.fulltext.begin();
        let tx = w
            .conn
            .unchecked_transaction()
            .context("starting the import")?;
        let count = self.engine().import(
            &mut SqliteTx {
                conn: &tx,
                state: &mut w.state,
            },
            org_id,
            header,
            checkpoint_note,
            entries,
        )?;
        tx.commit().context("committing the import")?;
        let mut fulltext = std::mem::take(&mut w.state.fulltext);
        // Rebuild the in-memory state from the tables, as on open.
        w.state = rebuild(&w.conn)?;
        if let Some(index) = &self.fulltext {
            index.committed(&mut fulltext, w.state.org_progress().into_iter());
            index.flush()?;
        }
        Ok(count)
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
    use super::*;

    /// The authorizer is a second line behind the analyst SQL guard and
    /// the triggers: on the writer and on a reader, DROP and ALTER are
    /// refused by SQLite itself, while ordinary statements still run.
    #[test]
    fn cairn_connections_refuse_structural_changes() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let structural = [
            "DROP TABLE entries",
            "DROP TRIGGER entries_no_delete",
            "DROP INDEX entries_by_trace",
            "ALTER TABLE entries ADD COLUMN forged TEXT",
            "ALTER TABLE entries RENAME TO entries_old",
        ];
        {
            let writer = store.writer.lock().unwrap();
            for sql in structural {
                let err = writer.conn.execute_batch(sql).unwrap_err();
                assert!(
                    err.to_string().contains("not authorized"),
                    "{sql} on the writer: {err}"
                );
            }
            writer
                .conn
                .execute_batch("CREATE TEMP TABLE scratch (x); INSERT INTO scratch VALUES (1);")
                .unwrap();
        }
        let reader = open_reader(store.path()).unwrap();
        for sql in structural {
            let err = reader.execute_batch(sql).unwrap_err();
            assert!(
                err.to_string().contains("not authorized"),
                "{sql} on a reader: {err}"
            );
        }
        let entries: i64 = reader
            .query_row("SELECT count(*) FROM entries", [], |r| r.get(0))
            .unwrap();
        assert_eq!(entries, 0);
    }

    /// Start-up reads each org's key records through their partial index,
    /// never by scanning the log (which made every start linear in it).
    #[test]
    fn key_records_load_without_scanning_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let writer = store.writer.lock().unwrap();
        let mut stmt = writer
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {ORG_KEY_RECORDS}"))
            .unwrap();
        let plan: Vec<String> = stmt
            .query_map([1], |r| r.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter().any(|step| step.contains("entries_key_records")),
            "{plan:?}"
        );
        assert!(!plan.iter().any(|step| step == "SCAN entries"), "{plan:?}");
    }
}
