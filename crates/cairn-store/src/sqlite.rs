//! The embedded SQLite backend.
//!
//! One file, `ledger.db`, in WAL mode with `synchronous=FULL`: a commit
//! returns only after the WAL is synced, which is what makes an
//! acknowledged record durable. One writer connection (owned by the
//! sequencer's calls), any number of read-only connections.
//!
//! Sequencing is in memory: each org's next `seq` and Merkle frontier, each
//! session's next index and chain head. They are rebuilt on open from the
//! tables (the frontier from stored subtree hashes, the heads from each
//! session's last step), and a batch updates them only after its
//! transaction committed.
//!
//! Tables (see `schema.sql`): `entries` (the org log: every step and
//! operational record, keyed by `(org, seq)`), `sessions` and `seals`
//! (lookup indexes), `nodes` (complete Merkle subtrees at every fourth
//! level, for proofs and restarts), `checkpoints`, `orgs`, `meta`. Triggers
//! abort UPDATE and DELETE on all of them, except the two updates the
//! format allows: erasing payload fields (recorded in the log) and setting
//! the embedding flag. Cairn's own connections also refuse DROP and ALTER
//! through an authorizer.

use crate::keys::{ServerKey, load_or_create_server_key};
use crate::{
    DbContext, LedgerStore, NewSession, PreparedStep, Refusal, SessionInfo, SessionSummary,
    StoreError, StoredCheckpoint, StoredStep, WriteRequest, Written, prepare_step,
};
use cairn_core::commit::{
    Field, Opening, Openings, StepRecord, agent_key_id, chain_hash, digest_of_commitments,
    genesis_hash, recommit_field, session_leaf_data, verify_agent_signature,
};
use cairn_core::ed25519_dalek::VerifyingKey;
use cairn_core::log::{
    KeyRegistration, LogEntry, LogRecord, OpRecord, SealRecord, log_origin, org_checkpoint,
};
use cairn_core::merkle::{
    Frontier, SubtreeHashes, consistency_proof, inclusion_proof, leaf_hash, node_hash, range_hash,
};
use cairn_core::note::NoteVerifier;
use cairn_core::record::{Limits, Links, Profile, SessionHeader, Status, Step, validate_id};
use cairn_core::{Hash, Timestamp};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// File name of the database inside the data directory.
pub const DB_FILE: &str = "ledger.db";
const SCHEMA: &str = include_str!("schema.sql");
const SCHEMA_VERSION: &str = "1";
/// Merkle subtrees are stored at levels that are multiples of this.
const NODE_STRIDE: u32 = 4;

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
}

impl Default for SqliteOptions {
    fn default() -> SqliteOptions {
        SqliteOptions {
            server_name: "cairn.local".into(),
            limits: Limits::default(),
            checkpoint_interval: Duration::from_millis(1000),
            embedding_sample_rate: 0.1,
        }
    }
}

#[derive(Debug, Clone)]
struct OrgState {
    id: i64,
    /// Imported from another server: read-only, signed by that server.
    foreign: bool,
    frontier: Frontier,
    checkpoint_size: u64,
    checkpoint_at: Option<Instant>,
}

#[derive(Debug, Clone)]
struct SessionState {
    sid: i64,
    agent_id: String,
    profile: Profile,
    next_index: u64,
    head: Hash,
    sealed: bool,
    first_seq: Option<u64>,
    last_seq: Option<u64>,
}

#[derive(Debug, Clone)]
struct AgentKey {
    org: i64,
    agent_id: String,
    key: VerifyingKey,
    seq: u64,
}

struct Writer {
    conn: Connection,
    /// Set when the in-memory state could not be rebuilt (the tables
    /// contradict themselves, e.g. after tampering): the store still opens
    /// for reading and verification, but refuses writes.
    broken: Option<String>,
    orgs: HashMap<String, OrgState>,
    sessions: HashMap<(i64, String), SessionState>,
    keys: HashMap<String, AgentKey>,
}

/// The embedded store. See the module docs.
pub struct SqliteStore {
    path: PathBuf,
    key: ServerKey,
    limits: Limits,
    checkpoint_interval: Duration,
    embedding_sample_rate: f64,
    writer: Mutex<Writer>,
    readers: Mutex<Vec<Connection>>,
    /// Held for its `Drop`, which stops the background thread.
    _checkpointer: Checkpointer,
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

use crate::now;

fn blob_hash(bytes: Vec<u8>) -> Result<Hash, StoreError> {
    let arr: [u8; 32] = bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt("a stored hash is not 32 bytes".into()))?;
    Ok(Hash(arr))
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

impl SqliteStore {
    /// Opens (creating if needed) the store in `data_dir`: the directory,
    /// the server key, the database and its schema; then rebuilds the
    /// in-memory sequencing state from the tables.
    pub fn open(data_dir: &Path, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::Io {
            context: format!("creating data directory {}", data_dir.display()),
            source,
        })?;
        let key = load_or_create_server_key(data_dir, &options.server_name)?;
        let path = data_dir.join(DB_FILE);
        let mut conn = Connection::open(&path).context("opening the database")?;
        configure(&conn)?;
        let tx = conn
            .transaction()
            .context("starting the schema transaction")?;
        tx.execute_batch(SCHEMA).context("creating the schema")?;
        let version: Option<String> = tx
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()
            .context("reading the schema version")?;
        match version.as_deref() {
            None => {
                tx.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)",
                    [SCHEMA_VERSION],
                )
                .context("recording the schema version")?;
            }
            Some(SCHEMA_VERSION) => {}
            Some(other) => {
                return Err(StoreError::Corrupt(format!(
                    "database schema version {other} is not supported (expected {SCHEMA_VERSION})"
                )));
            }
        }
        tx.commit().context("committing the schema")?;
        forbid_structural_changes(&mut conn)?;
        conn.execute_batch("PRAGMA wal_autocheckpoint = 0;")
            .context("handing WAL checkpoints to the background")?;
        let checkpointer = Checkpointer::start(&path)?;
        let writer = load_state(conn);
        Ok(SqliteStore {
            path,
            key,
            limits: options.limits,
            checkpoint_interval: options.checkpoint_interval,
            embedding_sample_rate: options.embedding_sample_rate.clamp(0.0, 1.0),
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
            _checkpointer: checkpointer,
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
            None => {
                let mut c = Connection::open_with_flags(
                    &self.path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .context("opening a reader")?;
                c.busy_timeout(Duration::from_secs(10))
                    .context("setting the busy timeout")?;
                forbid_structural_changes(&mut c)?;
                c
            }
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

/// The rowid of an entry: `(org << 40) | seq`, so that each org's log is
/// one contiguous, append-only rowid range and needs no second index.
/// (2^40 entries per org, 2^23 orgs.)
fn row_id(org: i64, seq: u64) -> i64 {
    (org << 40) | (seq.min((1 << 40) - 1) as i64)
}

/// Rowid bounds of an org's log, half-open.
fn org_range(org: i64) -> (i64, i64) {
    (org << 40, (org + 1) << 40)
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

/// Reads perfect-subtree hashes of one org's log from the tables.
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
        if level == 0 {
            let bytes: Vec<u8> = self
                .conn
                .prepare_cached("SELECT leaf_hash FROM entries WHERE id = ?1")
                .and_then(|mut s| s.query_row(params![row_id(self.org, index)], |r| r.get(0)))
                .context("reading a leaf hash")?;
            return blob_hash(bytes);
        }
        if level.is_multiple_of(NODE_STRIDE) {
            let stored: Option<Vec<u8>> = self
                .conn
                .prepare_cached("SELECT hash FROM nodes WHERE org = ?1 AND level = ?2 AND idx = ?3")
                .and_then(|mut s| {
                    s.query_row(params![self.org, level, index as i64], |r| r.get(0))
                        .optional()
                })
                .context("reading a tree node")?;
            if let Some(bytes) = stored {
                return blob_hash(bytes);
            }
        }
        let left = self.subtree(level - 1, 2 * index)?;
        let right = self.subtree(level - 1, 2 * index + 1)?;
        Ok(node_hash(&left, &right))
    }
}

fn load_state(conn: Connection) -> Writer {
    match rebuild(&conn) {
        Ok((orgs, sessions, keys)) => Writer {
            conn,
            broken: None,
            orgs,
            sessions,
            keys,
        },
        Err(e) => Writer {
            conn,
            broken: Some(format!(
                "the store's tables are inconsistent ({e}); it is open for reading and verification only: run `cairn verify`"
            )),
            orgs: HashMap::new(),
            sessions: HashMap::new(),
            keys: HashMap::new(),
        },
    }
}

type State = (
    HashMap<String, OrgState>,
    HashMap<(i64, String), SessionState>,
    HashMap<String, AgentKey>,
);

fn rebuild(conn: &Connection) -> Result<State, StoreError> {
    let mut orgs = HashMap::new();
    {
        let mut stmt = conn
            .prepare("SELECT org, name, 0 FROM orgs o")
            .context("listing orgs")?;
        let rows: Vec<(i64, String, i64)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .context("listing orgs")?
            .collect::<Result<_, _>>()
            .context("listing orgs")?;
        for (id, name, _) in rows {
            let size = log_size_of(conn, id)?;
            let tree = DbTree {
                conn,
                org: id,
                size,
            };
            let mut peaks = Vec::new();
            let mut start = 0u64;
            for level in (0..64u32).rev() {
                if size & (1 << level) != 0 {
                    peaks.push(tree.subtree(level, start >> level)?);
                    start += 1 << level;
                }
            }
            let frontier = Frontier::from_parts(size, peaks)
                .ok_or_else(|| StoreError::Corrupt("frontier rebuild".into()))?;
            let checkpoint_size: i64 = conn
                .query_row(
                    "SELECT COALESCE(MAX(size), 0) FROM checkpoints WHERE org = ?1",
                    [id],
                    |r| r.get(0),
                )
                .context("reading the last checkpoint")?;
            let foreign: bool = conn
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM org_origins WHERE org = ?1)",
                    [id],
                    |r| r.get(0),
                )
                .context("reading org origins")?;
            orgs.insert(
                name,
                OrgState {
                    id,
                    foreign,
                    frontier,
                    checkpoint_size: checkpoint_size as u64,
                    checkpoint_at: None,
                },
            );
        }
    }
    let mut sessions = HashMap::new();
    {
        let mut stmt = conn
            .prepare(
                                "SELECT s.sid, s.org, s.session_id, s.agent_id, s.profile, s.genesis,
                        h.last_index, e.record_hash, EXISTS (SELECT 1 FROM seals x WHERE x.sid = s.sid),
                        h.first_seq, h.last_seq, e.sid, e.step_index
                 FROM sessions s LEFT JOIN session_heads h ON h.sid = s.sid
                 LEFT JOIN entries e ON e.id = ((s.org << 40) | h.last_seq)",
            )
            .context("loading sessions")?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, Vec<u8>>(5)?,
                    r.get::<_, Option<i64>>(6)?,
                    r.get::<_, Option<Vec<u8>>>(7)?,
                    r.get::<_, bool>(8)?,
                    r.get::<_, Option<i64>>(9)?,
                    r.get::<_, Option<i64>>(10)?,
                    r.get::<_, Option<i64>>(11)?,
                    r.get::<_, Option<i64>>(12)?,
                ))
            })
            .context("loading sessions")?;
        for row in rows {
            let (
                sid,
                org,
                session_id,
                agent_id,
                profile,
                genesis,
                last_index,
                last_hash,
                sealed,
                first_seq,
                last_seq,
                head_sid,
                head_index,
            ) = row.context("loading a session")?;
            if last_seq.is_some() && (head_sid != Some(sid) || head_index != last_index) {
                return Err(StoreError::Corrupt(format!(
                    "the recorded head of session {session_id} is not its step"
                )));
            }
            let head = match last_hash {
                Some(h) => blob_hash(h)?,
                None => blob_hash(genesis)?,
            };
            sessions.insert(
                (org, session_id),
                SessionState {
                    sid,
                    agent_id,
                    profile: Profile::parse(&profile)
                        .ok_or_else(|| StoreError::Corrupt(format!("unknown profile {profile}")))?,
                    next_index: last_index.map_or(0, |i| i as u64 + 1),
                    head,
                    sealed,
                    first_seq: first_seq.map(|v| v as u64),
                    last_seq: last_seq.map(|v| v as u64),
                },
            );
        }
    }
    let mut keys = HashMap::new();
    {
        let mut stmt = conn
            .prepare(
                "SELECT org, seq, view FROM entries WHERE type = 'key-registration' ORDER BY id",
            )
            .context("loading agent keys")?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .context("loading agent keys")?;
        for row in rows {
            let (org, seq, view) = row.context("loading an agent key")?;
            let view: serde_json::Value = serde_json::from_str(&view)
                .map_err(|e| StoreError::Corrupt(format!("key registration: {e}")))?;
            if let Ok(OpRecord::KeyRegistration(reg)) =
                OpRecord::from_view("key-registration", &view)
            {
                keys.insert(
                    reg.key_id.clone(),
                    AgentKey {
                        org,
                        agent_id: reg.agent_id,
                        key: reg.public_key,
                        seq: seq as u64,
                    },
                );
            }
        }
    }
    Ok((orgs, sessions, keys))
}

/// Changes a batch makes to the in-memory state, applied only after its
/// transaction commits.
#[derive(Default)]
struct Overlay {
    orgs: HashMap<String, OrgState>,
    sessions: HashMap<(i64, String), SessionState>,
    keys: HashMap<String, AgentKey>,
    /// Sessions that got steps in this batch (their heads are written).
    touched: std::collections::HashSet<i64>,
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

/// Everything one step row holds.
struct StepRow<'a> {
    org: i64,
    seq: u64,
    sid: i64,
    step: &'a Step,
    hash: &'a Hash,
    leaf: &'a Hash,
    digest: &'a Hash,
    prev_hash: &'a Hash,
    /// The record seed (steps written here) ...
    seed: Option<&'a [u8; 32]>,
    /// ... or the salts themselves (steps imported from a bundle).
    salts: Option<Vec<u8>>,
    signature: Option<&'a [u8; 64]>,
    has_embedding: bool,
    erased: bool,
    /// Commitments of hidden or erased fields, as JSON.
    hidden: Option<String>,
    prev_seq: Option<u64>,
}

fn insert_step_row(tx: &Connection, row: &StepRow<'_>) -> Result<(), StoreError> {
    let s = row.step;
    tx.prepare_cached(
        "INSERT INTO entries (id, org, seq, type, record_hash, leaf_hash, sid, step_index, trace_id, agent_id, kind,
         kind_label, content, input_data, output_data, confidence, duration_ms, token_count, model, metadata,
         created_at, turn_id, turn_step, task_id, links, status, seed, digest, prev_hash, sig_key_id, signature,
         has_embedding, erased, hidden, salts, prev_seq)
         VALUES (?1, ?2, ?3, 'step', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20,
         ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35)",
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
        ])
    })
    .context("writing a step")?;
    Ok(())
}

const STEP_COLUMNS: &str = "e.seq, e.trace_id, e.agent_id, e.kind, e.kind_label, e.content, e.input_data,
    e.output_data, e.confidence, e.duration_ms, e.token_count, e.model, e.metadata, e.created_at, e.turn_id,
    e.turn_step, e.task_id, e.links, e.status, e.seed, e.digest, e.prev_hash, e.record_hash, e.sig_key_id,
    e.signature, e.has_embedding, e.erased, e.hidden, e.step_index, o.name, s.session_id, e.salts";

fn json_text(value: &Option<serde_json::Value>) -> Option<String> {
    value.as_ref().map(serde_json::Value::to_string)
}

fn links_text(links: &Links) -> Option<String> {
    if links.is_empty() {
        return None;
    }
    let map: serde_json::Map<String, serde_json::Value> = links
        .entries()
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_owned(), serde_json::Value::String(v.to_owned()))))
        .collect();
    Some(serde_json::Value::Object(map).to_string())
}

/// The rowids of a session's steps, oldest first, found by walking
/// `prev_seq` back from the session's last step. A broken link ends the
/// walk early; verification then reports the missing index.
fn session_rowids(conn: &Connection, org: i64, sid: i64) -> Result<Vec<i64>, StoreError> {
    let head: Option<(i64, i64)> = conn
        .prepare_cached("SELECT last_seq, last_index FROM session_heads WHERE sid = ?1")
        .and_then(|mut s| {
            s.query_row([sid], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .context("reading a session head")?;
    let Some((last_seq, last_index)) = head else {
        return Ok(Vec::new());
    };
    let mut ids = Vec::with_capacity(last_index as usize + 1);
    let mut next = Some(last_seq);
    let mut stmt = conn
        .prepare_cached("SELECT prev_seq FROM entries WHERE id = ?1 AND sid = ?2")
        .context("walking a session")?;
    while let Some(seq) = next {
        // A session holds last_index + 1 steps: more links mean a loop.
        if ids.len() > last_index as usize {
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
    let corrupt = |what: &str| StoreError::Corrupt(format!("stored step: {what}"));
    let get_json = |i: usize| -> Result<Option<serde_json::Value>, StoreError> {
        let text: Option<String> = row.get(i).context("reading a step")?;
        text.map(|t| serde_json::from_str(&t).map_err(|_| corrupt("a JSON column does not parse")))
            .transpose()
    };
    let seq: i64 = row.get(0).context("reading a step")?;
    let kind_name: String = row.get(3).context("reading a step")?;
    let kind =
        cairn_core::kind::StepKind::parse(&kind_name).ok_or_else(|| corrupt("unknown kind"))?;
    let links = match get_json(17)? {
        None => Links::default(),
        Some(v) => Links::from_json(&v).map_err(|e| corrupt(&e))?,
    };
    let status: String = row.get(18).context("reading a step")?;
    let created: i64 = row.get(13).context("reading a step")?;
    let opt_u64 = |i: usize| -> Result<Option<u64>, StoreError> {
        let v: Option<i64> = row.get(i).context("reading a step")?;
        Ok(v.map(|v| v as u64))
    };
    let step = Step {
        trace_id: row.get(1).context("reading a step")?,
        org_id: row.get(29).context("reading a step")?,
        agent_id: row.get(2).context("reading a step")?,
        session_id: row.get(30).context("reading a step")?,
        step_index: row.get::<_, i64>(28).context("reading a step")? as u64,
        kind,
        kind_label: row.get(4).context("reading a step")?,
        content: row.get(5).context("reading a step")?,
        input: get_json(6)?,
        output: get_json(7)?,
        confidence: row.get(8).context("reading a step")?,
        duration_ms: opt_u64(9)?,
        token_count: opt_u64(10)?,
        model: row.get(11).context("reading a step")?,
        metadata: get_json(12)?,
        created_at: Timestamp::from_micros(created)
            .ok_or_else(|| corrupt("timestamp out of range"))?,
        turn_id: row.get(14).context("reading a step")?,
        turn_step: opt_u64(15)?,
        task_id: row.get(16).context("reading a step")?,
        links,
        status: Status::parse(&status).ok_or_else(|| corrupt("unknown status"))?,
        signer_key_id: None,
    };
    let mut step = step;
    step.signer_key_id = row.get(23).context("reading a step")?;
    let seed: Option<Vec<u8>> = row.get(19).context("reading a step")?;
    let mut openings = match seed {
        Some(seed) => {
            let seed: [u8; 32] = seed
                .try_into()
                .map_err(|_| corrupt("seed is not 32 bytes"))?;
            Openings::from_seed(&seed)
        }
        None => {
            // Imported from a bundle: the salts themselves, no seed.
            let salts: Vec<u8> = row
                .get::<_, Option<Vec<u8>>>(31)
                .context("reading a step")?
                .ok_or_else(|| corrupt("neither seed nor salts"))?;
            if salts.len() != 16 * cairn_core::commit::FIELD_COUNT {
                return Err(corrupt("salts are not 21 x 16 bytes"));
            }
            Openings(std::array::from_fn(|i| {
                let mut salt = [0u8; 16];
                salt.copy_from_slice(&salts[16 * i..16 * i + 16]);
                Opening::Revealed(salt)
            }))
        }
    };
    let erased: bool = row.get(26).context("reading a step")?;
    if let Some(hidden) = get_json(27)? {
        let map = hidden
            .as_object()
            .ok_or_else(|| corrupt("hidden is not an object"))?;
        for (name, value) in map {
            let field =
                Field::from_name(name).ok_or_else(|| corrupt("hidden names an unknown field"))?;
            let hash = value
                .as_str()
                .and_then(|s| Hash::from_hex(s).ok())
                .ok_or_else(|| corrupt("hidden commitment is not a hash"))?;
            openings.0[field.position()] = Opening::Hidden(hash);
        }
    }
    // `sig_key_id` is the declared signer (a committed field); the
    // signature bytes are beside it.
    let sig_key: Option<String> = row.get(23).context("reading a step")?;
    let sig: Option<Vec<u8>> = row.get(24).context("reading a step")?;
    let signature = match (&sig_key, sig) {
        (Some(key_id), Some(bytes)) => Some(cairn_core::commit::AgentSignature {
            key_id: key_id.clone(),
            signature: bytes
                .try_into()
                .map_err(|_| corrupt("signature is not 64 bytes"))?,
        }),
        _ => None,
    };
    Ok(StoredStep {
        seq: seq as u64,
        record: StepRecord {
            step,
            openings,
            digest: blob_hash(row.get(20).context("reading a step")?)?,
            prev_hash: blob_hash(row.get(21).context("reading a step")?)?,
            hash: blob_hash(row.get(22).context("reading a step")?)?,
            signature,
            has_embedding: row.get(25).context("reading a step")?,
            erased,
        },
    })
}

impl Writer {
    fn org(&self, overlay: &Overlay, name: &str) -> Option<OrgState> {
        overlay
            .orgs
            .get(name)
            .or_else(|| self.orgs.get(name))
            .cloned()
    }

    fn session(&self, overlay: &Overlay, org: i64, session: &str) -> Option<SessionState> {
        let key = (org, session.to_owned());
        overlay
            .sessions
            .get(&key)
            .or_else(|| self.sessions.get(&key))
            .cloned()
    }

    fn agent_key(&self, overlay: &Overlay, key_id: &str) -> Option<AgentKey> {
        overlay
            .keys
            .get(key_id)
            .or_else(|| self.keys.get(key_id))
            .cloned()
    }

    /// The org's state, creating the org on first use.
    fn org_or_create(
        &self,
        tx: &Connection,
        overlay: &Overlay,
        name: &str,
    ) -> Result<OrgState, StoreError> {
        if let Some(org) = self.org(overlay, name) {
            return Ok(org);
        }
        tx.execute("INSERT INTO orgs (name) VALUES (?1)", [name])
            .context("creating an org")?;
        Ok(OrgState {
            id: tx.last_insert_rowid(),
            foreign: false,
            frontier: Frontier::new(),
            checkpoint_size: 0,
            checkpoint_at: None,
        })
    }
}

/// Appends one leaf to an org's log state, writing the Merkle nodes it
/// completes at stored levels.
fn push_leaf(tx: &Connection, org: &mut OrgState, leaf: Hash) -> Result<(), StoreError> {
    let mut nodes: Vec<(u32, u64, Hash)> = Vec::new();
    org.frontier.push_with(leaf, |level, index, hash| {
        if level > 0 && level.is_multiple_of(NODE_STRIDE) {
            nodes.push((level, index, *hash));
        }
    });
    for (level, index, hash) in nodes {
        tx.prepare_cached("INSERT INTO nodes (org, level, idx, hash) VALUES (?1, ?2, ?3, ?4)")
            .and_then(|mut s| s.execute(params![org.id, level, index as i64, &hash.0[..]]))
            .context("writing a tree node")?;
    }
    Ok(())
}

/// The lookup row of a session whose start record is at `start_seq`.
fn insert_session_row(
    tx: &Connection,
    org: i64,
    header: &SessionHeader,
    start_seq: u64,
) -> Result<i64, StoreError> {
    tx.prepare_cached(
        "INSERT INTO sessions (org, session_id, agent_id, profile, started_at, start_seq, genesis)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .and_then(|mut s| {
        s.execute(params![
            org,
            header.session_id,
            header.agent_id,
            header.profile.as_str(),
            header.started_at.as_micros(),
            start_seq as i64,
            &genesis_hash(header).0[..]
        ])
    })
    .context("writing a session")?;
    Ok(tx.last_insert_rowid())
}

fn insert_op(tx: &Connection, org: &mut OrgState, op: &OpRecord) -> Result<u64, StoreError> {
    let seq = org.frontier.size();
    let hash = op.hash();
    let entry = LogEntry {
        seq,
        record: LogRecord::Op {
            record: op.clone(),
            hash,
        },
    };
    let leaf = entry.leaf_hash();
    tx.prepare_cached(
        "INSERT INTO entries (id, org, seq, type, record_hash, leaf_hash, view) VALUES (?7, ?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut s| {
        s.execute(params![
            org.id,
            seq as i64,
            op.entry_type(),
            &hash.0[..],
            &leaf.0[..],
            op.to_view().to_string(),
            row_id(org.id, seq)
        ])
    })
    .context("writing an operational record")?;
    push_leaf(tx, org, leaf)?;
    Ok(seq)
}

impl SqliteStore {
    fn start_session(
        &self,
        w: &Writer,
        tx: &Connection,
        overlay: &mut Overlay,
        req: &NewSession,
        started_at: Timestamp,
    ) -> Result<Result<(u64, Hash, SessionState), Refusal>, StoreError> {
        let header = SessionHeader {
            org_id: req.org_id.clone(),
            session_id: req.session_id.clone(),
            agent_id: req.agent_id.clone(),
            started_at,
            caller: req.caller.clone(),
            profile: req.profile,
            predecessor: req.predecessor,
            full_consent: req.full_consent,
        };
        if let Err(e) = header.validate() {
            return Ok(Err(e.into()));
        }
        let mut org = w.org_or_create(tx, overlay, &req.org_id)?;
        if w.session(overlay, org.id, &req.session_id).is_some() {
            return Ok(Err(Refusal::SessionExists {
                session_id: req.session_id.clone(),
            }));
        }
        let genesis = genesis_hash(&header);
        let seq = insert_op(tx, &mut org, &OpRecord::SessionStart(header.clone()))?;
        let sid = insert_session_row(tx, org.id, &header, seq)?;
        let state = SessionState {
            sid,
            agent_id: req.agent_id.clone(),
            profile: req.profile,
            next_index: 0,
            head: genesis,
            sealed: false,
            first_seq: None,
            last_seq: None,
        };
        overlay
            .sessions
            .insert((org.id, req.session_id.clone()), state.clone());
        overlay.orgs.insert(req.org_id.clone(), org);
        Ok(Ok((seq, genesis, state)))
    }

    fn append_step(
        &self,
        w: &Writer,
        tx: &Connection,
        overlay: &mut Overlay,
        prepared: &PreparedStep,
    ) -> Result<Result<Written, Refusal>, StoreError> {
        let mut step = prepared.step.clone();
        let trace_id = step.trace_id.clone();
        // Generated ids (UUIDv7) are unique; a writer-chosen one is checked
        // before anything is written, so a refusal leaves nothing behind.
        if prepared.trace_id_given
            && let Some(org) = w.org(overlay, &step.org_id)
        {
            let taken: bool = tx
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM entries WHERE org = ?1 AND trace_id = ?2)",
                )
                .and_then(|mut s| s.query_row(params![org.id, trace_id], |r| r.get(0)))
                .context("checking a trace id")?;
            if taken {
                return Ok(Err(Refusal::DuplicateTraceId { trace_id }));
            }
        }
        let existing = w
            .org(overlay, &step.org_id)
            .and_then(|o| w.session(overlay, o.id, &step.session_id));
        let (mut session, session_created) = match existing {
            Some(s) => (s, false),
            None => {
                let new = NewSession {
                    org_id: step.org_id.clone(),
                    session_id: step.session_id.clone(),
                    agent_id: step.agent_id.clone(),
                    caller: if prepared.caller.is_empty() {
                        "unknown".into()
                    } else {
                        prepared.caller.clone()
                    },
                    profile: Profile::Standard,
                    predecessor: None,
                    full_consent: false,
                };
                match self.start_session(w, tx, overlay, &new, step.created_at)? {
                    Ok((_, _, state)) => (state, true),
                    Err(refusal) => return Ok(Err(refusal)),
                }
            }
        };
        if session.sealed {
            return Ok(Err(Refusal::Sealed {
                session_id: step.session_id.clone(),
            }));
        }
        if session.agent_id != step.agent_id {
            return Ok(Err(Refusal::AgentMismatch {
                session_id: step.session_id.clone(),
                session_agent: session.agent_id.clone(),
                step_agent: step.agent_id.clone(),
            }));
        }
        if let Err(e) = session.profile.check(step.kind) {
            return Ok(Err(e.into()));
        }
        if let Some(given) = prepared.expected_index
            && given != session.next_index
        {
            return Ok(Err(Refusal::IndexConflict {
                expected: session.next_index,
                given,
            }));
        }
        let mut commitments = prepared.commitments;
        if step.step_index != session.next_index {
            step.step_index = session.next_index;
            recommit_field(
                &mut commitments,
                &step,
                &prepared.openings,
                Field::StepIndex,
            );
        }
        let digest = digest_of_commitments(&commitments);
        if let Some(sig) = &prepared.signature {
            let Some(key) = w.agent_key(overlay, &sig.key_id) else {
                return Ok(Err(Refusal::BadSignature(format!(
                    "key {} is not registered",
                    sig.key_id
                ))));
            };
            let org_id = w.org(overlay, &step.org_id).map(|o| o.id);
            if Some(key.org) != org_id || key.agent_id != step.agent_id {
                return Ok(Err(Refusal::BadSignature(format!(
                    "key {} is not registered for agent {}",
                    sig.key_id, step.agent_id
                ))));
            }
            if !verify_agent_signature(&key.key, &digest, &sig.signature) {
                return Ok(Err(Refusal::BadSignature(
                    "the signature does not verify over the step's digest".into(),
                )));
            }
        }
        let created_at = step.created_at;
        let hash = chain_hash(&session.head, &digest, step.step_index, created_at);
        let mut org = w
            .org(overlay, &step.org_id)
            .ok_or_else(|| StoreError::Corrupt("org vanished inside a batch".into()))?;
        let seq = org.frontier.size();
        let leaf = leaf_hash(&cairn_core::log::log_leaf_data(seq, "step", &hash));
        insert_step_row(
            tx,
            &StepRow {
                org: org.id,
                seq,
                sid: session.sid,
                step: &step,
                hash: &hash,
                leaf: &leaf,
                digest: &digest,
                prev_hash: &session.head,
                seed: Some(&prepared.seed),
                salts: None,
                signature: prepared.signature.as_ref().map(|sig| &sig.signature),
                has_embedding: prepared.embedding.is_some(),
                erased: false,
                hidden: None,
                prev_seq: session.last_seq,
            },
        )?;
        if let Some(vector) = &prepared.embedding {
            tx.prepare_cached("INSERT INTO embeddings (id, org, vector) VALUES (?1, ?2, ?3)")
                .and_then(|mut s| s.execute(params![row_id(org.id, seq), org.id, vector]))
                .context("storing an embedding")?;
        }
        push_leaf(tx, &mut org, leaf)?;
        session.first_seq.get_or_insert(seq);
        session.last_seq = Some(seq);
        session.next_index += 1;
        session.head = hash;
        overlay.touched.insert(session.sid);
        overlay
            .sessions
            .insert((org.id, step.session_id.clone()), session);
        overlay.orgs.insert(step.org_id.clone(), org);
        Ok(Ok(Written::Step {
            seq,
            trace_id,
            step_index: step.step_index,
            hash,
            created_at,
            session_created,
        }))
    }

    fn seal(
        &self,
        w: &Writer,
        tx: &Connection,
        overlay: &mut Overlay,
        org_name: &str,
        session_id: &str,
    ) -> Result<Result<Written, Refusal>, StoreError> {
        let unknown = || {
            Ok(Err(Refusal::UnknownSession {
                session_id: session_id.to_owned(),
            }))
        };
        let Some(mut org) = w.org(overlay, org_name) else {
            return unknown();
        };
        let Some(mut session) = w.session(overlay, org.id, session_id) else {
            return unknown();
        };
        if session.sealed {
            return Ok(Err(Refusal::Sealed {
                session_id: session_id.to_owned(),
            }));
        }
        if session.next_index == 0 {
            return Ok(Err(Refusal::NothingToSeal {
                session_id: session_id.to_owned(),
            }));
        }
        let mut tree = Frontier::new();
        // The session's last step may be in this batch's overlay, not yet in
        // session_heads: walk from the in-memory last step.
        let mut hashes: Vec<(u64, Hash)> = Vec::with_capacity(session.next_index as usize);
        {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT step_index, record_hash, prev_seq FROM entries WHERE id = ?1",
                )
                .context("reading the session to seal")?;
            let mut next = session.last_seq;
            while let Some(seq) = next {
                if hashes.len() as u64 >= session.next_index {
                    break;
                }
                let (index, hash, prev): (i64, Vec<u8>, Option<i64>) = stmt
                    .query_row([row_id(org.id, seq)], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })
                    .context("reading the session to seal")?;
                hashes.push((index as u64, blob_hash(hash)?));
                next = prev.map(|p| p as u64);
            }
        }
        for (index, hash) in hashes.iter().rev() {
            tree.push(leaf_hash(&session_leaf_data(*index, hash)));
        }
        let origin = log_origin(self.key.signer.name(), org_name);
        let seal = SealRecord {
            org_id: org_name.to_owned(),
            session_id: session_id.to_owned(),
            step_count: session.next_index,
            session_root: tree.root(),
            final_hash: session.head,
            sealed_at: now(),
            note: String::new(),
        }
        .sign(&self.key.signer, &origin)
        .map_err(|e| StoreError::Key(e.to_string()))?;
        let seq = insert_op(tx, &mut org, &OpRecord::Seal(seal.clone()))?;
        tx.prepare_cached("INSERT INTO seals (sid, seq) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(params![session.sid, seq as i64]))
            .context("writing a seal")?;
        session.sealed = true;
        overlay
            .sessions
            .insert((org.id, session_id.to_owned()), session);
        overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok(Written::Sealed { seq, seal }))
    }

    /// Erases one step's payload, in the shape the trigger allows, and
    /// records the erasure.
    #[allow(clippy::too_many_arguments)]
    fn erase_step(
        &self,
        w: &Writer,
        tx: &Connection,
        overlay: &mut Overlay,
        org_name: &str,
        trace_id: &str,
        reason: &str,
        actor: &str,
    ) -> Result<Result<u64, Refusal>, StoreError> {
        let unknown = || Refusal::UnknownStep {
            trace_id: trace_id.to_owned(),
        };
        let Some(mut org) = w.org(overlay, org_name) else {
            return Ok(Err(unknown()));
        };
        let sql = format!(
            "SELECT {STEP_COLUMNS}, e.id FROM entries e JOIN orgs o ON o.org = e.org
             JOIN sessions s ON s.sid = e.sid WHERE e.org = ?1 AND e.trace_id = ?2"
        );
        let found = {
            let mut stmt = tx
                .prepare_cached(&sql)
                .context("finding the step to erase")?;
            let mut rows = stmt
                .query(params![org.id, trace_id])
                .context("finding the step to erase")?;
            match rows.next().context("finding the step to erase")? {
                Some(row) => Some((
                    step_from_row(row)?,
                    row.get::<_, i64>(32).context("finding the step to erase")?,
                )),
                None => None,
            }
        };
        let Some((stored, rowid)) = found else {
            return Ok(Err(unknown()));
        };
        if stored.record.erased {
            return Ok(Err(Refusal::AlreadyErased {
                trace_id: trace_id.to_owned(),
            }));
        }
        let mut record = stored.record;
        let mut commitments = Vec::new();
        for field in cairn_core::commit::FIELDS
            .into_iter()
            .filter(|f| f.is_payload())
        {
            record
                .hide(field)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
            if let Opening::Hidden(c) = record.openings.get(field) {
                commitments.push((field, *c));
            }
        }
        // Every hidden field, the ones hidden before included.
        let hidden: serde_json::Map<String, serde_json::Value> = cairn_core::commit::FIELDS
            .into_iter()
            .filter_map(|f| match record.openings.get(f) {
                Opening::Hidden(c) => {
                    Some((f.name().to_owned(), serde_json::Value::String(c.to_hex())))
                }
                Opening::Revealed(_) => None,
            })
            .collect();
        tx.prepare_cached(
            "UPDATE entries SET content = NULL, input_data = NULL, output_data = NULL, metadata = NULL,
             erased = 1, hidden = ?2, has_embedding = 0 WHERE id = ?1",
        )
        .and_then(|mut s| s.execute(params![rowid, serde_json::Value::Object(hidden).to_string()]))
        .context("erasing a step")?;
        // A vector would still carry what the content said.
        tx.prepare_cached("DELETE FROM embeddings WHERE id = ?1")
            .and_then(|mut s| s.execute([rowid]))
            .context("erasing an embedding")?;
        let erasure = cairn_core::log::ErasureRecord {
            org_id: org_name.to_owned(),
            session_id: record.step.session_id.clone(),
            step_index: record.step.step_index,
            trace_id: trace_id.to_owned(),
            commitments,
            reason: reason.to_owned(),
            actor: actor.to_owned(),
            erased_at: now(),
        };
        let seq = insert_op(tx, &mut org, &OpRecord::Erasure(erasure))?;
        overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok(seq))
    }

    /// Erases every step of every session whose last step is older than
    /// `older_than`.
    fn retention(
        &self,
        w: &Writer,
        tx: &Connection,
        overlay: &mut Overlay,
        org_name: &str,
        older_than: Timestamp,
    ) -> Result<Vec<u64>, StoreError> {
        let Some(org) = w.org(overlay, org_name) else {
            return Ok(Vec::new());
        };
        let sids: Vec<i64> = {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT s.sid FROM sessions s JOIN session_heads h ON h.sid = s.sid
                     JOIN entries e ON e.id = ((s.org << 40) | h.last_seq)
                     WHERE s.org = ?1 AND e.created_at < ?2",
                )
                .context("finding expired sessions")?;
            let rows = stmt
                .query_map(params![org.id, older_than.as_micros()], |r| r.get(0))
                .context("finding expired sessions")?;
            rows.collect::<Result<_, _>>()
                .context("finding expired sessions")?
        };
        let mut seqs = Vec::new();
        for sid in sids {
            let ids = session_rowids(tx, org.id, sid)?;
            let mut pending: Vec<String> = Vec::new();
            {
                let mut stmt = tx
                    .prepare_cached("SELECT trace_id FROM entries WHERE id = ?1 AND erased = 0")
                    .context("reading an expired session")?;
                for id in ids {
                    if let Some(trace) = stmt
                        .query_row([id], |r| r.get::<_, String>(0))
                        .optional()
                        .context("reading an expired session")?
                    {
                        pending.push(trace);
                    }
                }
            }
            for trace in pending {
                if let Ok(seq) =
                    self.erase_step(w, tx, overlay, org_name, &trace, "retention", "retention")?
                {
                    seqs.push(seq);
                }
            }
        }
        Ok(seqs)
    }

    fn register_key(
        &self,
        w: &Writer,
        tx: &Connection,
        overlay: &mut Overlay,
        org_name: &str,
        agent_id: &str,
        public_key: VerifyingKey,
    ) -> Result<Result<Written, Refusal>, StoreError> {
        if let Err(e) =
            validate_id("org_id", org_name).and_then(|()| validate_id("agent_id", agent_id))
        {
            return Ok(Err(e.into()));
        }
        let key_id = agent_key_id(&public_key);
        let mut org = w.org_or_create(tx, overlay, org_name)?;
        if let Some(existing) = w.agent_key(overlay, &key_id)
            && existing.org == org.id
            && existing.agent_id == agent_id
        {
            return Ok(Ok(Written::KeyRegistered {
                seq: existing.seq,
                key_id,
            }));
        }
        let reg = KeyRegistration {
            org_id: org_name.to_owned(),
            agent_id: agent_id.to_owned(),
            key_id: key_id.clone(),
            public_key,
            registered_at: now(),
        };
        let seq = insert_op(tx, &mut org, &OpRecord::KeyRegistration(reg))?;
        overlay.keys.insert(
            key_id.clone(),
            AgentKey {
                org: org.id,
                agent_id: agent_id.to_owned(),
                key: public_key,
                seq,
            },
        );
        overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok(Written::KeyRegistered { seq, key_id }))
    }

    /// Signs and stores a checkpoint of `org` at its current size.
    fn checkpoint(
        &self,
        tx: &Connection,
        name: &str,
        org: &mut OrgState,
    ) -> Result<StoredCheckpoint, StoreError> {
        let size = org.frontier.size();
        let root = org.frontier.root();
        let note = org_checkpoint(self.key.signer.name(), name, size, root)
            .sign(&self.key.signer)
            .map_err(|e| StoreError::Key(e.to_string()))?;
        let created_at = now();
        tx.prepare_cached("INSERT INTO checkpoints (org, size, root, note, created_at) VALUES (?1, ?2, ?3, ?4, ?5)")
            .and_then(|mut s| s.execute(params![org.id, size as i64, &root.0[..], note, created_at.as_micros()]))
            .context("writing a checkpoint")?;
        org.checkpoint_size = size;
        org.checkpoint_at = Some(Instant::now());
        Ok(StoredCheckpoint {
            org_id: name.to_owned(),
            size,
            root,
            note,
            created_at,
        })
    }

    fn due(&self, org: &OrgState) -> bool {
        org.frontier.size() > org.checkpoint_size
            && org
                .checkpoint_at
                .is_none_or(|at| at.elapsed() >= self.checkpoint_interval)
    }

    fn run_batch(
        &self,
        w: &mut Writer,
        batch: &[WriteRequest],
    ) -> Result<Vec<Result<Written, Refusal>>, StoreError> {
        let mut overlay = Overlay::default();
        // Dropping the transaction without commit (an error below) rolls the
        // whole batch back; the overlay is then discarded too.
        let tx = w.conn.unchecked_transaction().context("starting a batch")?;
        let mut results = Vec::with_capacity(batch.len());
        for request in batch {
            let org_name = match request {
                WriteRequest::Step(s) => &s.org_id,
                WriteRequest::Prepared(p) => &p.step.org_id,
                WriteRequest::StartSession(s) => &s.org_id,
                WriteRequest::Seal { org_id, .. }
                | WriteRequest::RegisterKey { org_id, .. }
                | WriteRequest::Erase { org_id, .. }
                | WriteRequest::Retention { org_id, .. }
                | WriteRequest::Checkpoint { org_id } => org_id,
            };
            if let Some(org) = w.org(&overlay, org_name)
                && org.foreign
            {
                results.push(match request {
                    // A mirror's checkpoint is the one it was imported with.
                    WriteRequest::Checkpoint { .. } => latest_checkpoint(&tx, org.id, org_name)?
                        .map(Written::Checkpoint)
                        .ok_or_else(|| Refusal::ReadOnlyOrg {
                            org_id: org_name.clone(),
                        }),
                    _ => Err(Refusal::ReadOnlyOrg {
                        org_id: org_name.clone(),
                    }),
                });
                continue;
            }
            let outcome = match request {
                WriteRequest::Step(step) => {
                    match prepare_step((**step).clone(), &self.limits, self.embedding_sample_rate) {
                        Ok(prepared) => self.append_step(w, &tx, &mut overlay, &prepared)?,
                        Err(refusal) => Err(refusal),
                    }
                }
                WriteRequest::Prepared(prepared) => {
                    self.append_step(w, &tx, &mut overlay, prepared)?
                }
                WriteRequest::StartSession(new) => self
                    .start_session(w, &tx, &mut overlay, new, now())?
                    .map(|(seq, genesis, _)| Written::Session { seq, genesis }),
                WriteRequest::Seal { org_id, session_id } => {
                    self.seal(w, &tx, &mut overlay, org_id, session_id)?
                }
                WriteRequest::RegisterKey {
                    org_id,
                    agent_id,
                    public_key,
                } => self.register_key(w, &tx, &mut overlay, org_id, agent_id, *public_key)?,
                WriteRequest::Erase {
                    org_id,
                    trace_id,
                    reason,
                    actor,
                } => self
                    .erase_step(w, &tx, &mut overlay, org_id, trace_id, reason, actor)?
                    .map(|seq| Written::Erased { seqs: vec![seq] }),
                WriteRequest::Retention { org_id, older_than } => Ok(Written::Erased {
                    seqs: self.retention(w, &tx, &mut overlay, org_id, *older_than)?,
                }),
                WriteRequest::Checkpoint { org_id } => match w.org(&overlay, org_id) {
                    None => Err(Refusal::UnknownSession {
                        session_id: format!("(org {org_id} has no log)"),
                    }),
                    Some(mut org) => {
                        let stored = if org.frontier.size() > org.checkpoint_size
                            || org.checkpoint_size == 0
                        {
                            let cp = self.checkpoint(&tx, org_id, &mut org)?;
                            overlay.orgs.insert(org_id.clone(), org);
                            cp
                        } else {
                            latest_checkpoint(&tx, org.id, org_id)?
                                .ok_or_else(|| StoreError::Corrupt("checkpoint vanished".into()))?
                        };
                        Ok(Written::Checkpoint(stored))
                    }
                },
            };
            results.push(outcome);
        }
        // Checkpoint every org this batch grew, if its last checkpoint is
        // old enough, inside the same transaction.
        let names: Vec<String> = overlay.orgs.keys().cloned().collect();
        for name in names {
            if let Some(org) = overlay.orgs.get_mut(&name)
                && self.due(org)
            {
                let mut org_state = org.clone();
                self.checkpoint(&tx, &name, &mut org_state)?;
                *org = org_state;
            }
        }
        for state in overlay.sessions.values() {
            if let (true, Some(first), Some(last)) = (
                overlay.touched.contains(&state.sid),
                state.first_seq,
                state.last_seq,
            ) {
                tx.prepare_cached(
                    "INSERT INTO session_heads (sid, first_seq, last_seq, last_index) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (sid) DO UPDATE SET last_seq = excluded.last_seq, last_index = excluded.last_index",
                )
                .and_then(|mut s| {
                    s.execute(params![state.sid, first as i64, last as i64, state.next_index as i64 - 1])
                })
                .context("recording session heads")?;
            }
        }
        tx.commit().context("committing a batch")?;
        w.orgs.extend(overlay.orgs);
        w.sessions.extend(overlay.sessions);
        w.keys.extend(overlay.keys);
        Ok(results)
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
        let mut w = self.writer.lock().map_err(|_| poisoned())?;
        if let Some(reason) = &w.broken {
            return Err(StoreError::Corrupt(reason.clone()));
        }
        self.run_batch(&mut w, batch)
    }

    fn maintain(&self) -> Result<(), StoreError> {
        let mut w = self.writer.lock().map_err(|_| poisoned())?;
        if w.broken.is_some() {
            return Ok(());
        }
        let due: Vec<String> = w
            .orgs
            .iter()
            .filter(|(_, org)| self.due(org))
            .map(|(name, _)| name.clone())
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        let tx = w
            .conn
            .unchecked_transaction()
            .context("starting a checkpoint")?;
        let mut updated = Vec::new();
        for name in due {
            if let Some(org) = w.orgs.get(&name) {
                let mut org = org.clone();
                self.checkpoint(&tx, &name, &mut org)?;
                updated.push((name, org));
            }
        }
        tx.commit().context("committing checkpoints")?;
        w.orgs.extend(updated);
        Ok(())
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
        visit: &mut dyn FnMut(LogEntry, Hash) -> bool,
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
            while let Some(row) = rows.next().context("reading the log")? {
                let entry_type: String = row.get(32).context("reading the log")?;
                let leaf = blob_hash(row.get(34).context("reading the log")?)?;
                let entry = if entry_type == "step" {
                    let stored = step_from_row(row)?;
                    LogEntry {
                        seq: stored.seq,
                        record: LogRecord::Step(stored.record),
                    }
                } else {
                    let seq: i64 = row.get(0).context("reading the log")?;
                    let view: String = row.get(33).context("reading the log")?;
                    let hash = blob_hash(row.get(22).context("reading the log")?)?;
                    let view: serde_json::Value = serde_json::from_str(&view)
                        .map_err(|e| StoreError::Corrupt(format!("record {seq}: {e}")))?;
                    let record = OpRecord::from_view(&entry_type, &view)
                        .map_err(|e| StoreError::Corrupt(format!("record {seq}: {e}")))?;
                    LogEntry {
                        seq: seq as u64,
                        record: LogRecord::Op { record, hash },
                    }
                };
                if !visit(entry, leaf) {
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
            let view: serde_json::Value =
                serde_json::from_str(&view).map_err(|e| StoreError::Corrupt(format!("session start: {e}")))?;
            let OpRecord::SessionStart(header) = OpRecord::from_view("session-start", &view)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?
            else {
                return Err(StoreError::Corrupt("session start record has another type".into()));
            };
                        let last: Option<(i64, Vec<u8>)> = c
                .query_row(
                    "SELECT e.step_index, e.record_hash FROM session_heads h
                     JOIN entries e ON e.id = ((?1 << 40) | h.last_seq) WHERE h.sid = ?2",
                    params![org, sid],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .context("reading a session head")?;
            let seal_view: Option<String> = c
                .query_row(
                    "SELECT e.view FROM seals x JOIN entries e ON e.id = ((?1 << 40) | x.seq) WHERE x.sid = ?2",
                    params![org, sid],
                    |r| r.get(0),
                )
                .optional()
                .context("reading a seal")?;
            let seal = match seal_view {
                None => None,
                Some(v) => {
                    let v: serde_json::Value =
                        serde_json::from_str(&v).map_err(|e| StoreError::Corrupt(format!("seal: {e}")))?;
                    match OpRecord::from_view("seal", &v) {
                        Ok(OpRecord::Seal(s)) => Some(s),
                        _ => return Err(StoreError::Corrupt("seal record does not parse".into())),
                    }
                }
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
                 WHERE o.name = ?1 AND e.trace_id = ?2"
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
        agent_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare_cached(
                                        "SELECT s.session_id, s.agent_id, s.started_at,
                        COALESCE(h.last_index + 1, 0),
                        (SELECT created_at FROM entries e WHERE e.id = ((s.org << 40) | h.first_seq)),
                        (SELECT created_at FROM entries e WHERE e.id = ((s.org << 40) | h.last_seq)),
                        EXISTS (SELECT 1 FROM seals x WHERE x.sid = s.sid)
                     FROM sessions s JOIN orgs o ON o.org = s.org LEFT JOIN session_heads h ON h.sid = s.sid
                     WHERE o.name = ?1 AND (?2 IS NULL OR s.agent_id = ?2)
                     ORDER BY s.started_at DESC, s.sid DESC LIMIT ?3",
                )
                .context("listing sessions")?;
            let rows = stmt
                .query_map(params![org_id, agent_id, limit.min(i64::MAX as usize) as i64], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, Option<i64>>(4)?,
                        r.get::<_, Option<i64>>(5)?,
                        r.get::<_, bool>(6)?,
                    ))
                })
                .context("listing sessions")?;
            let mut out = Vec::new();
            for row in rows {
                let (session_id, agent_id, started, count, first, last, sealed) = row.context("listing sessions")?;
                out.push(SessionSummary {
                    session_id,
                    agent_id,
                    step_count: count as u64,
                    first_step_at: first.and_then(Timestamp::from_micros),
                    last_step_at: last.and_then(Timestamp::from_micros),
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

    fn consistency_proof(
        &self,
        org_id: &str,
        old_size: u64,
        new_size: u64,
    ) -> Result<Vec<Hash>, StoreError> {
        self.with_tree(org_id, |tree| consistency_proof(tree, old_size, new_size))
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

    fn semantic_search(
        &self,
        org_id: &str,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<(u64, f32)>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            let (lo, hi) = org_range(org);
            let mut stmt = c
                .prepare_cached("SELECT id, vector FROM embeddings WHERE id >= ?1 AND id < ?2")
                .context("searching embeddings")?;
            let mut rows = stmt
                .query(params![lo, hi])
                .context("searching embeddings")?;
            let mut best: Vec<(u64, f32)> = Vec::new();
            while let Some(row) = rows.next().context("searching embeddings")? {
                let id: i64 = row.get(0).context("searching embeddings")?;
                let bytes: Vec<u8> = row.get(1).context("searching embeddings")?;
                let Some(vector) = crate::embed::from_bytes(&bytes) else {
                    continue;
                };
                let score = crate::embed::similarity(query, &vector);
                best.push(((id - lo) as u64, score));
                if best.len() > limit.saturating_mul(4).max(256) {
                    best.sort_by(|a, b| b.1.total_cmp(&a.1));
                    best.truncate(limit);
                }
            }
            best.sort_by(|a, b| b.1.total_cmp(&a.1));
            best.truncate(limit);
            Ok(best)
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
        self.read(|c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT e.view FROM entries e JOIN orgs o ON o.org = e.org
                     WHERE o.name = ?1 AND e.type = 'key-registration' ORDER BY e.id",
                )
                .context("reading agent keys")?;
            let rows = stmt
                .query_map([org_id], |r| r.get::<_, String>(0))
                .context("reading agent keys")?;
            let mut out = Vec::new();
            for row in rows {
                let view: serde_json::Value =
                    serde_json::from_str(&row.context("reading agent keys")?)
                        .map_err(|e| StoreError::Corrupt(format!("key registration: {e}")))?;
                match OpRecord::from_view("key-registration", &view) {
                    Ok(OpRecord::KeyRegistration(reg)) => out.push(reg),
                    _ => {
                        return Err(StoreError::Corrupt(
                            "key registration does not parse".into(),
                        ));
                    }
                }
            }
            Ok(out)
        })
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
        match origin {
            None => Ok((self.key.signer.name().to_owned(), self.key.verifier.clone())),
            Some((name, key)) => {
                let key = NoteVerifier::parse(&key)
                    .map_err(|e| StoreError::Corrupt(format!("origin key: {e}")))?;
                Ok((name, key))
            }
        }
    }

    fn import_log(
        &self,
        org_id: &str,
        header: &cairn_core::bundle::BundleHeader,
        checkpoint_note: &str,
        entries: &mut dyn Iterator<Item = Result<LogEntry, String>>,
    ) -> Result<u64, crate::ImportError> {
        use crate::ImportError;
        if !header.complete_log {
            return Err(ImportError::Refused(
                "only a bundle of a whole org log (exported with --all) can be imported; a partial bundle can be verified with `cairn verify --bundle`".into(),
            ));
        }
        validate_id("org_id", org_id).map_err(|e| ImportError::Refused(e.to_string()))?;
        let mut w = self.writer.lock().map_err(|_| poisoned())?;
        if w.broken.is_some() {
            return Err(ImportError::Refused(
                "the store is inconsistent; run `cairn verify`".into(),
            ));
        }
        if w.orgs.contains_key(org_id) {
            return Err(ImportError::Refused(format!(
                "org {org_id} already exists in this store"
            )));
        }
        let same_key = header.server_key == self.key.verifier.to_string()
            && header.server_name == self.key.signer.name();
        if org_id != header.org_id {
            return Err(ImportError::Refused(format!(
                "the bundle's log is signed for org {}, so it is imported under that id",
                header.org_id
            )));
        }
        let tx = w
            .conn
            .unchecked_transaction()
            .context("starting the import")?;
        tx.execute("INSERT INTO orgs (name) VALUES (?1)", [org_id])
            .context("creating the org")?;
        let mut org = OrgState {
            id: tx.last_insert_rowid(),
            foreign: !same_key,
            frontier: Frontier::new(),
            checkpoint_size: 0,
            checkpoint_at: None,
        };
        if !same_key {
            tx.execute(
                "INSERT INTO org_origins (org, server_name, server_key) VALUES (?1, ?2, ?3)",
                params![org.id, header.server_name, header.server_key],
            )
            .context("recording the org's origin")?;
        }
        let mut sids: HashMap<String, i64> = HashMap::new();
        // Per session: (first seq, last seq, last index).
        let mut heads: HashMap<i64, (u64, u64, u64)> = HashMap::new();
        let mut count = 0u64;
        for (index, entry) in entries.enumerate() {
            let bad = |reason: String| ImportError::BadEntry {
                index: index as u64,
                reason,
            };
            let entry = entry.map_err(bad)?;
            if entry.seq != org.frontier.size() {
                return Err(bad(format!(
                    "seq {} where {} was expected",
                    entry.seq,
                    org.frontier.size()
                )));
            }
            let leaf = entry.leaf_hash();
            match &entry.record {
                LogRecord::Op { record, .. } => {
                    // The bundle verified, and its seq is the next one, so
                    // writing the record as the sequencer would is exact.
                    insert_op(&tx, &mut org, record)?;
                    match record {
                        OpRecord::SessionStart(h) => {
                            let sid = insert_session_row(&tx, org.id, h, entry.seq)?;
                            sids.insert(h.session_id.clone(), sid);
                        }
                        OpRecord::Seal(seal) => {
                            let sid = *sids.get(&seal.session_id).ok_or_else(|| {
                                bad(format!("seal of unknown session {}", seal.session_id))
                            })?;
                            tx.execute(
                                "INSERT INTO seals (sid, seq) VALUES (?1, ?2)",
                                params![sid, entry.seq as i64],
                            )
                            .context("importing a seal")?;
                        }
                        _ => {}
                    }
                }
                LogRecord::Step(r) => {
                    let s = &r.step;
                    let sid = *sids
                        .get(&s.session_id)
                        .ok_or_else(|| bad(format!("step of unknown session {}", s.session_id)))?;
                    let mut salts = vec![0u8; 16 * cairn_core::commit::FIELD_COUNT];
                    let mut hidden = serde_json::Map::new();
                    for field in cairn_core::commit::FIELDS {
                        match r.openings.get(field) {
                            Opening::Revealed(salt) => {
                                salts[16 * field.position()..16 * field.position() + 16]
                                    .copy_from_slice(salt);
                            }
                            Opening::Hidden(c) => {
                                hidden.insert(
                                    field.name().into(),
                                    serde_json::Value::String(c.to_hex()),
                                );
                            }
                        }
                    }
                    let hidden =
                        (!hidden.is_empty()).then(|| serde_json::Value::Object(hidden).to_string());
                    let prev_seq = heads.get(&sid).map(|h| h.1);
                    let head = heads
                        .entry(sid)
                        .or_insert((entry.seq, entry.seq, s.step_index));
                    head.1 = entry.seq;
                    head.2 = s.step_index;
                    insert_step_row(
                        &tx,
                        &StepRow {
                            org: org.id,
                            seq: entry.seq,
                            sid,
                            step: s,
                            hash: &r.hash,
                            leaf: &leaf,
                            digest: &r.digest,
                            prev_hash: &r.prev_hash,
                            seed: None,
                            salts: Some(salts),
                            signature: r.signature.as_ref().map(|sig| &sig.signature),
                            has_embedding: r.has_embedding,
                            erased: r.erased,
                            hidden,
                            prev_seq,
                        },
                    )?;
                    // Vectors are derived: recompute them for embedded steps.
                    if r.has_embedding
                        && let Some(content) = &s.content
                    {
                        let vector = crate::embed::to_bytes(&crate::embed::embed(content));
                        tx.prepare_cached(
                            "INSERT INTO embeddings (id, org, vector) VALUES (?1, ?2, ?3)",
                        )
                        .and_then(|mut st| {
                            st.execute(params![row_id(org.id, entry.seq), org.id, vector])
                        })
                        .context("importing an embedding")?;
                    }
                    push_leaf(&tx, &mut org, leaf)?;
                }
            }
            count += 1;
        }
        let text = cairn_core::note::Note::parse(checkpoint_note)
            .map_err(|e| ImportError::Refused(format!("checkpoint: {e}")))?
            .text;
        let cp = cairn_core::checkpoint::Checkpoint::parse(&text)
            .map_err(|e| ImportError::Refused(format!("checkpoint: {e}")))?;
        if cp.size != org.frontier.size() || cp.root != org.frontier.root() {
            return Err(ImportError::Refused(
                "the entries do not match the bundle's checkpoint".into(),
            ));
        }
        tx.execute(
            "INSERT INTO checkpoints (org, size, root, note, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![org.id, cp.size as i64, &cp.root.0[..], checkpoint_note, now().as_micros()],
        )
        .context("importing the checkpoint")?;
        for (sid, (first, last, index)) in heads {
            tx.execute(
                "INSERT INTO session_heads (sid, first_seq, last_seq, last_index) VALUES (?1, ?2, ?3, ?4)",
                params![sid, first as i64, last as i64, index as i64],
            )
            .context("importing session heads")?;
        }
        tx.commit().context("committing the import")?;
        // Rebuild the in-memory state from the tables, as on open.
        let (orgs, sessions, keys) = rebuild(&w.conn)?;
        w.orgs = orgs;
        w.sessions = sessions;
        w.keys = keys;
        Ok(count)
    }

    fn server_key(&self) -> &NoteVerifier {
        &self.key.verifier
    }

    fn server_name(&self) -> &str {
        self.key.signer.name()
    }
}
