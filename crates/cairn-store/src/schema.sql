-- Cairn embedded store, schema version 2 (format 2). Applied idempotently on open.

CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS orgs (
  org  INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
);

-- The org log: every step and operational record. A step fills the step
-- columns; an operational record fills `view` (its canonical JSON view).
-- The rowid is (org << 40) | seq: each org's log is one append-only rowid
-- range, so appends touch the end of one B-tree and need no second index.
CREATE TABLE IF NOT EXISTS entries (
  id            INTEGER PRIMARY KEY,
  org           INTEGER NOT NULL,
  seq           INTEGER NOT NULL,
  type          TEXT    NOT NULL,
  logged_at     INTEGER NOT NULL,  -- when the server logged it (microseconds), bound into the leaf
  record_hash   BLOB    NOT NULL,  -- chain hash (steps) or op hash
  leaf_hash     BLOB    NOT NULL,  -- RFC 9162 leaf hash of the entry
  view          TEXT,
  sid           INTEGER,           -- the session (steps, and records that concern one)
  step_index    INTEGER,           -- steps, and the step an erasure or review names
  trace_id      TEXT,
  agent_id      TEXT,              -- steps, and the agent of a key record
  kind          TEXT,
  kind_label    TEXT,
  content       TEXT,
  input_data    TEXT,
  output_data   TEXT,
  confidence    REAL,
  duration_ms   INTEGER,
  token_count   INTEGER,
  model         TEXT,
  metadata      TEXT,
  created_at    INTEGER,           -- microseconds since the Unix epoch, UTC
  turn_id       TEXT,
  turn_step     INTEGER,
  task_id       TEXT,
  links         TEXT,
  status        TEXT,
  seed          BLOB,              -- secret: the salts derive from it
  digest        BLOB,
  prev_hash     BLOB,
  sig_key_id    TEXT,
  signature     BLOB,
  has_embedding INTEGER NOT NULL DEFAULT 0,  -- outside the digest
  erased        INTEGER NOT NULL DEFAULT 0,  -- outside the digest
  hidden        TEXT,              -- commitments of erased fields (JSON)
  salts         BLOB,              -- imported steps: 21 x 16 salt bytes (no seed)
  prev_seq      INTEGER            -- seq of the previous step of the same session
);
CREATE INDEX IF NOT EXISTS entries_ops ON entries (org, type) WHERE type <> 'step';
-- The log answers for itself, so derived tables never decide what it holds:
-- a step's successor in its session (at most one: no fork, no index used
-- twice), a session's records, one start, one seal and one erasure per step.
CREATE UNIQUE INDEX IF NOT EXISTS entries_next ON entries (COALESCE(prev_seq, -1), sid) WHERE type = 'step';
CREATE INDEX IF NOT EXISTS entries_session_records ON entries (sid, type) WHERE type <> 'step';
CREATE UNIQUE INDEX IF NOT EXISTS entries_one_start ON entries (sid) WHERE type = 'session-start';
CREATE UNIQUE INDEX IF NOT EXISTS entries_one_seal ON entries (sid) WHERE type = 'seal';
CREATE UNIQUE INDEX IF NOT EXISTS entries_one_erasure ON entries (sid, step_index) WHERE type = 'erasure';
CREATE INDEX IF NOT EXISTS entries_key_records ON entries (org, agent_id) WHERE type IN ('key-registration', 'key-revocation');
-- The org's key records in log order (the rowid follows the org), for
-- `GET /v1/agent-keys`' pages.
CREATE INDEX IF NOT EXISTS entries_key_records_in_order ON entries (org) WHERE type IN ('key-registration', 'key-revocation');
CREATE UNIQUE INDEX IF NOT EXISTS entries_by_trace ON entries (org, trace_id) WHERE trace_id IS NOT NULL;
-- A session's turns: where a turn's next step is numbered, read without
-- walking the session (only steps recorded in turns are in it).
CREATE INDEX IF NOT EXISTS entries_by_turn ON entries (sid, turn_id, turn_step) WHERE turn_id IS NOT NULL AND type = 'step';
-- The review queue (seed 003): flagged steps are few, so a partial index.
CREATE INDEX IF NOT EXISTS entries_flagged ON entries (org, id) WHERE status = 'flagged';
-- Erased steps are few: full-text search leaves them out through this
-- index whatever the derived index file holds (sqlite/fulltext_index.rs).
CREATE INDEX IF NOT EXISTS entries_erased ON entries (id) WHERE erased = 1;
-- The log-key records (a few per org at most), which every seal and
-- checkpoint verification reads, without reading any other record.
CREATE INDEX IF NOT EXISTS entries_log_keys ON entries (org) WHERE type = 'log-key';

CREATE TABLE IF NOT EXISTS sessions (
  sid        INTEGER PRIMARY KEY,
  org        INTEGER NOT NULL,
  session_id TEXT    NOT NULL,
  agent_id   TEXT    NOT NULL,
  profile    TEXT    NOT NULL,
  started_at INTEGER NOT NULL,
  start_seq  INTEGER NOT NULL,
  genesis    BLOB    NOT NULL,
  max_clock_skew_s INTEGER NOT NULL,
  UNIQUE (org, session_id)
);
CREATE INDEX IF NOT EXISTS sessions_by_agent ON sessions (org, agent_id, started_at);
-- Full-text search (derived, never evidence; docs/OPERATIONS.md "Search")
-- lives in its own file, fulltext.db (sqlite/fulltext_index.rs).
-- The session listing (newest first, keyset pages) and its kind filter.
CREATE INDEX IF NOT EXISTS sessions_listing ON sessions (org, started_at, session_id);
-- Derived, not evidence: the kinds of step each session holds, for the
-- listing's kind filter; a row is written the first time a session gets a
-- step of that kind. (An index over entries (sid, kind) took one page
-- write per session per batch: 40% of the time of an append.)
CREATE TABLE IF NOT EXISTS session_kinds (
  sid  INTEGER NOT NULL,
  kind TEXT NOT NULL,
  PRIMARY KEY (sid, kind)
) WITHOUT ROWID;

-- Orgs imported from another server's bundle: their log is signed by that
-- server's key, so they are verified with it and are read-only here.
CREATE TABLE IF NOT EXISTS org_origins (
  org         INTEGER PRIMARY KEY,
  server_name TEXT NOT NULL,
  server_key  TEXT NOT NULL
);

-- Derived, not part of the ledger: each session's first and last step,
-- updated in the same transaction as the batch that appends to it. A hint
-- only: Cairn walks from `last_seq` forward through `entries_next` to the
-- log's real last step before trusting it, and back through
-- `entries.prev_seq` to read the session. It may only move forward.
-- (An index over (session, step) would take 64 random page writes per
-- batch with 64 interleaved sessions; this takes one or two.)
CREATE TABLE IF NOT EXISTS session_heads (
  sid        INTEGER PRIMARY KEY,
  first_seq  INTEGER NOT NULL,
  last_seq   INTEGER NOT NULL,
  last_index INTEGER NOT NULL
);

-- API keys: not ledger records (they can be revoked). Only a SHA-256 of
-- each token is stored.
CREATE TABLE IF NOT EXISTS api_keys (
  id         TEXT PRIMARY KEY,
  org_name   TEXT NOT NULL,
  role       TEXT NOT NULL,
  agent_id   TEXT,
  token_hash BLOB NOT NULL UNIQUE,
  label      TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  revoked_at INTEGER,
  expires_at INTEGER                -- refused from then on (microseconds), if set
);

-- Derived, not part of the ledger: the embedding vector of each step seed
-- 000's sampling rule selected (id = the step's entry id; little-endian
-- f32s), tagged with the embedder that made it. Erasure deletes it. (The
-- untagged `embeddings` table of earlier versions is moved here, as
-- word-hash-256 vectors, when such a store is next opened.)
CREATE TABLE IF NOT EXISTS vectors (
  id       INTEGER PRIMARY KEY,
  org      INTEGER NOT NULL,
  embedder TEXT NOT NULL,
  vector   BLOB NOT NULL
);

-- Semantic search counts and follows an org's vectors of one embedder.
CREATE INDEX IF NOT EXISTS vectors_embedder ON vectors (embedder, id);

-- Derived: steps waiting for the background embedder (queued in the
-- transaction that writes the step; erasure removes them), taken in the
-- queue's order `n` across orgs; a step the embedder refused alone
-- MAX_ATTEMPTS times is parked (left out until `cairn reindex`).
CREATE TABLE IF NOT EXISTS embedding_queue (
  n        INTEGER PRIMARY KEY,
  id       INTEGER NOT NULL UNIQUE,
  org      INTEGER NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0
);
-- Orgs take turns in the queue (embed::take_turns): each org's oldest
-- claimable steps. Parked steps (5 = embed::MAX_ATTEMPTS) are left out of
-- the index, so that a claim never reads past them; it replaces the
-- full (org, n) index of earlier versions.
CREATE INDEX IF NOT EXISTS embedding_queue_claimable ON embedding_queue (org, n)
  WHERE attempts < 5;
DROP INDEX IF EXISTS embedding_queue_org;

-- Derived: the embedder the queue is for (key 'embedder'), chosen by the
-- last `cairn serve` or `cairn reindex`.
CREATE TABLE IF NOT EXISTS embedding_settings (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);

-- Complete Merkle subtrees of each org log at levels 4, 8, 12, ...
CREATE TABLE IF NOT EXISTS nodes (
  org   INTEGER NOT NULL,
  level INTEGER NOT NULL,
  idx   INTEGER NOT NULL,
  hash  BLOB    NOT NULL,
  PRIMARY KEY (org, level, idx)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS checkpoints (
  org        INTEGER NOT NULL,
  size       INTEGER NOT NULL,
  root       BLOB    NOT NULL,
  note       TEXT    NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (org, size)
) WITHOUT ROWID;

-- Witnesses' cosignatures of checkpoints (C2SP cosignature/v1 lines),
-- verified before they are stored and again by every verifier.
CREATE TABLE IF NOT EXISTS cosignatures (
  org_name   TEXT    NOT NULL,
  size       INTEGER NOT NULL,
  witness    TEXT    NOT NULL,
  line       TEXT    NOT NULL,
  PRIMARY KEY (org_name, size, witness)
) WITHOUT ROWID;

-- OTLP spans waiting for the span that names their session
-- (docs/OTLP.md "Spans waiting for their session"): acknowledged to the
-- exporter, not yet ledger records; deleted once written as steps.
CREATE TABLE IF NOT EXISTS held_spans (
  org_name    TEXT    NOT NULL,
  key_id      TEXT    NOT NULL,
  trace_hex   TEXT    NOT NULL,
  span_hex    TEXT    NOT NULL,
  received_ms INTEGER NOT NULL,
  bytes       INTEGER NOT NULL,
  steps       TEXT    NOT NULL,
  UNIQUE (org_name, key_id, trace_hex, span_hex)
);
CREATE INDEX IF NOT EXISTS held_spans_bytes ON held_spans (org_name, bytes);
CREATE INDEX IF NOT EXISTS held_spans_due ON held_spans (received_ms);

-- Append-only, enforced by the database itself.
CREATE TRIGGER IF NOT EXISTS entries_no_delete BEFORE DELETE ON entries
BEGIN SELECT RAISE(ABORT, 'cairn: the ledger is append-only; DELETE is refused'); END;

-- The only updates allowed: the recorded erasure (payload columns nulled,
-- `erased` set, commitments kept in `hidden`, the embedding flag may drop
-- with the vector, and only once the step's erasure record is in the log),
-- the withheld view of an erased signed trace (only once a trace-erasure
-- record names its seq), and setting `has_embedding`.
-- Every other column must stay exactly as it was.
-- Replaced at every open, so that a store written by an earlier version
-- gets this version's rule.
DROP TRIGGER IF EXISTS entries_no_update;
CREATE TRIGGER entries_no_update BEFORE UPDATE ON entries
WHEN NOT (
  NEW.id IS OLD.id AND NEW.org IS OLD.org AND NEW.seq IS OLD.seq AND NEW.type IS OLD.type
  AND NEW.logged_at IS OLD.logged_at AND NEW.record_hash IS OLD.record_hash AND NEW.leaf_hash IS OLD.leaf_hash
  AND NEW.sid IS OLD.sid AND NEW.step_index IS OLD.step_index AND NEW.trace_id IS OLD.trace_id
  AND NEW.agent_id IS OLD.agent_id AND NEW.kind IS OLD.kind AND NEW.kind_label IS OLD.kind_label
  AND NEW.confidence IS OLD.confidence AND NEW.duration_ms IS OLD.duration_ms
  AND NEW.token_count IS OLD.token_count AND NEW.model IS OLD.model AND NEW.created_at IS OLD.created_at
  AND NEW.turn_id IS OLD.turn_id AND NEW.turn_step IS OLD.turn_step AND NEW.task_id IS OLD.task_id
  AND NEW.links IS OLD.links AND NEW.status IS OLD.status AND NEW.seed IS OLD.seed
  AND NEW.digest IS OLD.digest AND NEW.prev_hash IS OLD.prev_hash AND NEW.sig_key_id IS OLD.sig_key_id
  AND NEW.signature IS OLD.signature AND NEW.salts IS OLD.salts AND NEW.prev_seq IS OLD.prev_seq
  AND (
    (OLD.type = 'step' AND NEW.view IS OLD.view AND OLD.erased = 0 AND NEW.erased = 1 AND NEW.hidden IS NOT NULL
     AND NEW.content IS NULL AND NEW.input_data IS NULL AND NEW.output_data IS NULL AND NEW.metadata IS NULL
     AND (NEW.has_embedding IS OLD.has_embedding OR NEW.has_embedding = 0)
     AND EXISTS (SELECT 1 FROM entries x WHERE x.type = 'erasure' AND x.sid = OLD.sid
                 AND x.step_index = OLD.step_index AND x.seq > OLD.seq))
    OR
    (OLD.has_embedding = 0 AND NEW.has_embedding = 1 AND NEW.view IS OLD.view AND NEW.erased IS OLD.erased
     AND NEW.hidden IS OLD.hidden
     AND NEW.content IS OLD.content AND NEW.input_data IS OLD.input_data
     AND NEW.output_data IS OLD.output_data AND NEW.metadata IS OLD.metadata)
    OR
    (OLD.type = 'signed-trace' AND OLD.view IS NOT NULL AND NEW.view IS NULL
     AND NEW.erased IS OLD.erased AND NEW.hidden IS OLD.hidden AND NEW.has_embedding IS OLD.has_embedding
     AND NEW.content IS OLD.content AND NEW.input_data IS OLD.input_data
     AND NEW.output_data IS OLD.output_data AND NEW.metadata IS OLD.metadata
     AND EXISTS (SELECT 1 FROM entries x WHERE x.org = OLD.org AND x.type = 'trace-erasure'
                 AND x.step_index = OLD.seq AND x.seq > OLD.seq))
  )
)
BEGIN SELECT RAISE(ABORT, 'cairn: ledger entries cannot be updated (only recorded erasure, a recorded trace erasure and the embedding flag)'); END;

CREATE TRIGGER IF NOT EXISTS orgs_no_update BEFORE UPDATE ON orgs
BEGIN SELECT RAISE(ABORT, 'cairn: the ledger is append-only; UPDATE is refused'); END;
CREATE TRIGGER IF NOT EXISTS orgs_no_delete BEFORE DELETE ON orgs
BEGIN SELECT RAISE(ABORT, 'cairn: the ledger is append-only; DELETE is refused'); END;
CREATE TRIGGER IF NOT EXISTS sessions_no_update BEFORE UPDATE ON sessions
BEGIN SELECT RAISE(ABORT, 'cairn: the ledger is append-only; UPDATE is refused'); END;
CREATE TRIGGER IF NOT EXISTS sessions_no_delete BEFORE DELETE ON sessions
BEGIN SELECT RAISE(ABORT, 'cairn: the ledger is append-only; DELETE is refused'); END;
CREATE TRIGGER IF NOT EXISTS org_origins_no_update BEFORE UPDATE ON org_origins
BEGIN SELECT RAISE(ABORT, 'cairn: the ledger is append-only; UPDATE is refused'); END;
CREATE TRIGGER IF NOT EXISTS org_origins_no_delete BEFORE DELETE ON org_origins
BEGIN SELECT RAISE(ABORT, 'cairn: the ledger is append-only; DELETE is refused'); END;
-- Session heads only move forward, to a step of the session.
CREATE TRIGGER IF NOT EXISTS session_heads_no_delete BEFORE DELETE ON session_heads
BEGIN SELECT RAISE(ABORT, 'cairn: session heads only move forward; DELETE is refused'); END;
CREATE TRIGGER IF NOT EXISTS session_heads_forward BEFORE UPDATE ON session_heads
WHEN NOT (NEW.sid IS OLD.sid AND NEW.first_seq IS OLD.first_seq
  AND NEW.last_seq > OLD.last_seq AND NEW.last_index > OLD.last_index)
BEGIN SELECT RAISE(ABORT, 'cairn: session heads only move forward'); END;
CREATE TRIGGER IF NOT EXISTS nodes_no_update BEFORE UPDATE ON nodes
BEGIN SELECT RAISE(ABORT, 'cairn: the ledger is append-only; UPDATE is refused'); END;
CREATE TRIGGER IF NOT EXISTS nodes_no_delete BEFORE DELETE ON nodes
BEGIN SELECT RAISE(ABORT, 'cairn: the ledger is append-only; DELETE is refused'); END;
CREATE TRIGGER IF NOT EXISTS checkpoints_no_update BEFORE UPDATE ON checkpoints
BEGIN SELECT RAISE(ABORT, 'cairn: the ledger is append-only; UPDATE is refused'); END;
CREATE TRIGGER IF NOT EXISTS checkpoints_no_delete BEFORE DELETE ON checkpoints
BEGIN SELECT RAISE(ABORT, 'cairn: the ledger is append-only; DELETE is refused'); END;
