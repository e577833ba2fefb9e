-- Cairn on PostgreSQL, schema version 2 (format 2). Applied idempotently by
-- `cairn_store::pg::migrate`. The same tables as the embedded store
-- (docs/STORAGE.md), with PostgreSQL types, and append-only enforcement in
-- the database: row triggers against UPDATE and DELETE (but the recorded
-- erasure and the embedding flag), statement triggers against TRUNCATE, and
-- an event trigger against DROP and ALTER of ledger tables.

-- Schema version and the fleet's server key: written once, never changed.
CREATE TABLE IF NOT EXISTS cairn_meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS orgs (
  org  BIGSERIAL PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
);

-- id = (org << 40) | seq, as in the embedded store.
CREATE TABLE IF NOT EXISTS entries (
  id            BIGINT PRIMARY KEY,
  org           BIGINT NOT NULL,
  seq           BIGINT NOT NULL,
  type          TEXT   NOT NULL,
  logged_at     BIGINT NOT NULL,
  record_hash   BYTEA  NOT NULL,
  leaf_hash     BYTEA  NOT NULL,
  view          TEXT,
  sid           BIGINT,
  step_index    BIGINT,
  trace_id      TEXT,
  agent_id      TEXT,
  kind          TEXT,
  kind_label    TEXT,
  content       TEXT,
  input_data    TEXT,
  output_data   TEXT,
  confidence    DOUBLE PRECISION,
  duration_ms   BIGINT,
  token_count   BIGINT,
  model         TEXT,
  metadata      TEXT,
  created_at    BIGINT,
  turn_id       TEXT,
  turn_step     BIGINT,
  task_id       TEXT,
  links         TEXT,
  status        TEXT,
  seed          BYTEA,
  digest        BYTEA,
  prev_hash     BYTEA,
  sig_key_id    TEXT,
  signature     BYTEA,
  has_embedding BOOLEAN NOT NULL DEFAULT FALSE,
  erased        BOOLEAN NOT NULL DEFAULT FALSE,
  hidden        TEXT,
  salts         BYTEA,
  prev_seq      BIGINT
);
CREATE UNIQUE INDEX IF NOT EXISTS entries_by_trace ON entries (org, trace_id) WHERE trace_id IS NOT NULL;
-- A session's turns: where a turn's next step is numbered, read without
-- walking the session (only steps recorded in turns are in it).
CREATE INDEX IF NOT EXISTS entries_by_turn ON entries (sid, turn_id, turn_step) WHERE turn_id IS NOT NULL AND type = 'step';
-- The review queue (seed 003): flagged steps are few, so a partial index.
CREATE INDEX IF NOT EXISTS entries_flagged ON entries (org, id) WHERE status = 'flagged';
CREATE INDEX IF NOT EXISTS entries_ops ON entries (org, type) WHERE type <> 'step';
-- The log answers for itself (see the embedded schema): a step's one
-- successor in its session, a session's records, one start, one seal and
-- one erasure per step, key records by agent.
CREATE UNIQUE INDEX IF NOT EXISTS entries_next ON entries ((COALESCE(prev_seq, -1)), sid) WHERE type = 'step';
CREATE INDEX IF NOT EXISTS entries_session_records ON entries (sid, type) WHERE type <> 'step';
CREATE UNIQUE INDEX IF NOT EXISTS entries_one_start ON entries (sid) WHERE type = 'session-start';
CREATE UNIQUE INDEX IF NOT EXISTS entries_one_seal ON entries (sid) WHERE type = 'seal';
CREATE UNIQUE INDEX IF NOT EXISTS entries_one_erasure ON entries (sid, step_index) WHERE type = 'erasure';
CREATE INDEX IF NOT EXISTS entries_key_records ON entries (org, agent_id) WHERE type IN ('key-registration', 'key-revocation');
-- The org's key records in log order, for `GET /v1/agent-keys`' pages.
CREATE INDEX IF NOT EXISTS entries_key_records_in_order ON entries (org, id) WHERE type IN ('key-registration', 'key-revocation');
-- The log-key records, which every seal and checkpoint verification reads.
CREATE INDEX IF NOT EXISTS entries_log_keys ON entries (org) WHERE type = 'log-key';
-- One agent's key records in log order (a session's verification reads
-- them a page at a time: without the order, each page sorted them all).
CREATE INDEX IF NOT EXISTS entries_key_records_by_agent ON entries (org, agent_id, id) WHERE type IN ('key-registration', 'key-revocation');

CREATE TABLE IF NOT EXISTS sessions (
  sid        BIGSERIAL PRIMARY KEY,
  org        BIGINT NOT NULL,
  session_id TEXT   NOT NULL,
  agent_id   TEXT   NOT NULL,
  profile    TEXT   NOT NULL,
  started_at BIGINT NOT NULL,
  start_seq  BIGINT NOT NULL,
  genesis    BYTEA  NOT NULL,
  max_clock_skew_s BIGINT NOT NULL,
  UNIQUE (org, session_id)
);
CREATE INDEX IF NOT EXISTS sessions_by_agent ON sessions (org, agent_id, started_at);
-- Full-text search (derived, never evidence; docs/OPERATIONS.md "Search"):
-- each step's document (fulltext::document) as an English tsvector; an
-- erasure deletes the step's row in the same transaction.
CREATE TABLE IF NOT EXISTS step_search (
  id  BIGINT PRIMARY KEY,
  org BIGINT NOT NULL,
  doc tsvector NOT NULL
);
CREATE INDEX IF NOT EXISTS step_search_doc ON step_search USING GIN (doc);
-- Steps whose document a batch left for after its commit (written outside
-- the org's lock, pg/search_queue.rs): a search indexes its org's from the
-- log first; an erasure deletes the step's row before its document.
CREATE TABLE IF NOT EXISTS search_queue (id BIGINT PRIMARY KEY);
-- The session listing (newest first, keyset pages) and its kind filter.
CREATE INDEX IF NOT EXISTS sessions_listing ON sessions (org, started_at, session_id);
-- Derived, not evidence: the kinds of step each session holds, for the
-- listing's kind filter; a row is written the first time a session gets a
-- step of that kind. (An index over entries (sid, kind) took one page
-- write per session per batch: 40% of the time of an append.)
CREATE TABLE IF NOT EXISTS session_kinds (
  sid  BIGINT NOT NULL,
  kind TEXT NOT NULL,
  PRIMARY KEY (sid, kind)
);
DROP INDEX IF EXISTS sessions_recent;

-- Derived, not ledger (see docs/STORAGE.md): a hint Cairn walks forward
-- from through `entries_next`; it may only move forward.
CREATE TABLE IF NOT EXISTS session_heads (
  sid        BIGINT PRIMARY KEY,
  first_seq  BIGINT NOT NULL,
  last_seq   BIGINT NOT NULL,
  last_index BIGINT NOT NULL
);
-- Derived: each embedded step's vector (little-endian f32s), tagged with
-- the embedder that made it, and the steps waiting for the background
-- embedder (leased by the server embedding them until `claimed_until`).
CREATE TABLE IF NOT EXISTS vectors (
  id       BIGINT PRIMARY KEY,
  org      BIGINT NOT NULL,
  embedder TEXT   NOT NULL,
  vector   BYTEA  NOT NULL
);
CREATE TABLE IF NOT EXISTS embedding_queue (
  n             BIGSERIAL UNIQUE,  -- the queue's order (age), across orgs
  id            BIGINT PRIMARY KEY,
  org           BIGINT NOT NULL,
  attempts      BIGINT NOT NULL DEFAULT 0,  -- refusals of this step alone; parked at 5
  claimed_until TIMESTAMPTZ
);
-- Orgs take turns in the queue (embed::take_turns): each org's oldest.
-- Claimable steps only (5 = embed::MAX_ATTEMPTS): claims never read past
-- parked ones.
CREATE INDEX IF NOT EXISTS embedding_queue_claimable ON embedding_queue (org, n) WHERE attempts < 5;
DROP INDEX IF EXISTS embedding_queue_org;
-- The embedder the queue is for (key 'embedder').
CREATE TABLE IF NOT EXISTS embedding_settings (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS vectors_embedder ON vectors (embedder, id);
CREATE TABLE IF NOT EXISTS api_keys (
  id         TEXT PRIMARY KEY,
  org_name   TEXT NOT NULL,
  role       TEXT NOT NULL,
  agent_id   TEXT,
  token_hash BYTEA NOT NULL UNIQUE,
  label      TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  revoked_at BIGINT,
  expires_at BIGINT                 -- refused from then on (microseconds), if set
);

CREATE TABLE IF NOT EXISTS org_origins (
  org         BIGINT PRIMARY KEY,
  server_name TEXT NOT NULL,
  server_key  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS nodes (
  org   BIGINT NOT NULL,
  level INTEGER NOT NULL,
  idx   BIGINT NOT NULL,
  hash  BYTEA  NOT NULL,
  PRIMARY KEY (org, level, idx)
);
CREATE TABLE IF NOT EXISTS checkpoints (
  org        BIGINT NOT NULL,
  size       BIGINT NOT NULL,
  root       BYTEA  NOT NULL,
  note       TEXT   NOT NULL,
  created_at BIGINT NOT NULL,
  PRIMARY KEY (org, size)
);

-- OTLP spans waiting for the span that names their session
-- (docs/OTLP.md "Spans waiting for their session"): acknowledged to the
-- exporter, not yet ledger records; deleted once written as steps.
CREATE TABLE IF NOT EXISTS held_spans (
  org_name    TEXT   NOT NULL,
  key_id      TEXT   NOT NULL,
  trace_hex   TEXT   NOT NULL,
  span_hex    TEXT   NOT NULL,
  received_ms BIGINT NOT NULL,
  bytes       BIGINT NOT NULL,
  steps       TEXT   NOT NULL,
  PRIMARY KEY (org_name, key_id, trace_hex, span_hex)
);
CREATE INDEX IF NOT EXISTS held_spans_bytes ON held_spans (org_name, bytes);
CREATE INDEX IF NOT EXISTS held_spans_due ON held_spans (received_ms);
-- The session a trace's steps were recorded in: its step ids share their
-- first 38 characters (`otel.<trace id>.`), looked up by equality (a
-- range over text depends on the database's collation).
CREATE INDEX IF NOT EXISTS entries_by_otel_trace ON entries (org, left(trace_id, 38), id)
  WHERE starts_with(trace_id, 'otel.');

-- Witnesses' cosignatures of checkpoints (C2SP cosignature/v1 lines),
-- verified before they are stored and again by every verifier.
CREATE TABLE IF NOT EXISTS cosignatures (
  org_name   TEXT   NOT NULL,
  size       BIGINT NOT NULL,
  witness    TEXT   NOT NULL,
  line       TEXT   NOT NULL,
  PRIMARY KEY (org_name, size, witness)
);

-- Append-only, enforced by the database.
CREATE OR REPLACE FUNCTION cairn_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'cairn: the ledger is append-only; % on % is refused', TG_OP, TG_TABLE_NAME
    USING ERRCODE = 'insufficient_privilege';
END $$;

-- The only updates of `entries`: `cairn_entries_update()`, in
-- pg_entries_update.sql (created before this file, and replaced by every
-- migration).

-- Session heads only move forward, to a later step of the same session.
CREATE OR REPLACE FUNCTION cairn_heads_forward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.sid = OLD.sid AND NEW.first_seq = OLD.first_seq
     AND NEW.last_seq > OLD.last_seq AND NEW.last_index > OLD.last_index THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'cairn: session heads only move forward; % is refused', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END $$;

DO $$
DECLARE
  t TEXT;
BEGIN
  DROP TRIGGER IF EXISTS cairn_heads_forward ON session_heads;
  CREATE TRIGGER cairn_heads_forward BEFORE UPDATE OR DELETE ON session_heads
    FOR EACH ROW EXECUTE FUNCTION cairn_heads_forward();
  DROP TRIGGER IF EXISTS cairn_heads_no_truncate ON session_heads;
  CREATE TRIGGER cairn_heads_no_truncate BEFORE TRUNCATE ON session_heads
    FOR EACH STATEMENT EXECUTE FUNCTION cairn_refuse();
  FOREACH t IN ARRAY ARRAY['entries', 'orgs', 'sessions', 'nodes', 'checkpoints', 'org_origins', 'cairn_meta'] LOOP
    EXECUTE format('DROP TRIGGER IF EXISTS cairn_no_delete ON %I', t);
    EXECUTE format('CREATE TRIGGER cairn_no_delete BEFORE DELETE ON %I FOR EACH ROW EXECUTE FUNCTION cairn_refuse()', t);
    EXECUTE format('DROP TRIGGER IF EXISTS cairn_no_truncate ON %I', t);
    EXECUTE format('CREATE TRIGGER cairn_no_truncate BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION cairn_refuse()', t);
    IF t <> 'entries' THEN
      EXECUTE format('DROP TRIGGER IF EXISTS cairn_no_update ON %I', t);
      EXECUTE format('CREATE TRIGGER cairn_no_update BEFORE UPDATE ON %I FOR EACH ROW EXECUTE FUNCTION cairn_refuse()', t);
    END IF;
  END LOOP;
  DROP TRIGGER IF EXISTS cairn_entries_update ON entries;
  CREATE TRIGGER cairn_entries_update BEFORE UPDATE ON entries FOR EACH ROW EXECUTE FUNCTION cairn_entries_update();
END $$;
