//! The PostgreSQL schema and its upgrades: the DDL, the DDL guard and the
//! production grants as shipped, `migrate` (run by every server at start,
//! under an advisory lock, so that exactly one applies a change) and the
//! one-time upgrades of databases written by earlier versions. Re-exported
//! from `pg`; nothing here runs after a store is open.

use super::connection::col;
use super::search_queue::{document_of, insert_documents};
use super::{LOCK_CLASS, embedding};
use crate::{DbContext, StoreError};
use postgres::GenericClient;

/// The schema, version 2.
pub const SCHEMA: &str = include_str!("../pg_schema.sql");
/// The one function that decides which updates of `entries` are allowed,
/// created before [`SCHEMA`] and replaced by every migration.
const ENTRIES_UPDATE: &str = include_str!("../pg_entries_update.sql");
/// The DDL guard (event triggers; needs a superuser).
pub const GUARD: &str = include_str!("../pg_guard.sql");
/// The grants of the production role (`cairn_app`), as documented.
pub const GRANTS: &str = include_str!("../pg_grants.sql");
/// The functions analyst SQL calls, created or replaced by every
/// migration.
const ANALYST_FUNCTIONS: &str = include_str!("../pg_analyst.sql");
const SCHEMA_VERSION: &str = "2";

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
            tx.batch_execute(ENTRIES_UPDATE)
                .context("creating the schema (the role needs CREATE on the schema; run the first start as the schema owner)")?;
            tx.batch_execute(SCHEMA).context(
                "creating the schema (the role needs CREATE on the schema; run the first start as the schema owner)",
            )?;
            tx.batch_execute(ANALYST_FUNCTIONS)
                .context("creating analyst SQL's functions")?;
            tx.execute(
                "INSERT INTO cairn_meta (key, value) VALUES ('schema_version', $1), ($2, $3)",
                &[&SCHEMA_VERSION, &LEXEMES_KEY, &LEXEMES_VERSION],
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
            tx.batch_execute(ENTRIES_UPDATE).context(
                "replacing the rule of ledger updates (run this start as the schema owner)",
            )?;
            tx.batch_execute(ANALYST_FUNCTIONS)
                .context("creating analyst SQL's functions")?;
            reanalyze_search_documents(&mut tx)?;
            index_unindexed_steps(&mut tx)?;
            // The roles that write the log write its full-text rows too
            // (a database from before the index has none for them).
            grant_to_writers_of(
                &mut tx,
                "entries",
                &[
                    "GRANT SELECT, INSERT, DELETE ON step_search",
                    "GRANT SELECT, INSERT, UPDATE, DELETE ON search_queue",
                    // An erased signed trace's view is withheld (FORMAT 8).
                    "GRANT UPDATE (view) ON entries",
                ],
            )?;
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
CREATE TABLE IF NOT EXISTS search_queue (id BIGINT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS vectors (id BIGINT PRIMARY KEY, org BIGINT NOT NULL, embedder TEXT NOT NULL, vector BYTEA NOT NULL);
CREATE INDEX IF NOT EXISTS vectors_embedder ON vectors (embedder, id);
CREATE TABLE IF NOT EXISTS embedding_queue (n BIGSERIAL UNIQUE, id BIGINT PRIMARY KEY, org BIGINT NOT NULL,
  attempts BIGINT NOT NULL DEFAULT 0, claimed_until TIMESTAMPTZ);
CREATE INDEX IF NOT EXISTS embedding_queue_claimable ON embedding_queue (org, n) WHERE attempts < 5;
DROP INDEX IF EXISTS embedding_queue_org;
CREATE TABLE IF NOT EXISTS embedding_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS entries_by_turn ON entries (sid, turn_id, turn_step) WHERE turn_id IS NOT NULL AND type = 'step';
CREATE INDEX IF NOT EXISTS entries_log_keys ON entries (org) WHERE type = 'log-key';
CREATE INDEX IF NOT EXISTS entries_key_records_by_agent ON entries (org, agent_id, id) WHERE type IN ('key-registration', 'key-revocation');
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS expires_at BIGINT;
CREATE TABLE IF NOT EXISTS held_spans (org_name TEXT NOT NULL, key_id TEXT NOT NULL,
  trace_hex TEXT NOT NULL, span_hex TEXT NOT NULL, received_ms BIGINT NOT NULL, bytes BIGINT NOT NULL,
  steps TEXT NOT NULL, PRIMARY KEY (org_name, key_id, trace_hex, span_hex));
CREATE INDEX IF NOT EXISTS held_spans_bytes ON held_spans (org_name, bytes);
CREATE INDEX IF NOT EXISTS held_spans_due ON held_spans (received_ms);
CREATE INDEX IF NOT EXISTS entries_by_otel_trace ON entries (org, left(trace_id, 38), id)
  WHERE starts_with(trace_id, 'otel.');";

/// Whether the tables and indexes of [`ADDITIONS`] and the functions of
/// [`ANALYST_FUNCTIONS`] exist as this version makes them.
fn has_additions(client: &mut impl GenericClient) -> Result<bool, StoreError> {
    Ok(client
        .query_one(
            "SELECT to_regclass('cosignatures') IS NOT NULL AND to_regclass('step_search') IS NOT NULL
               AND to_regclass('search_queue') IS NOT NULL
               AND to_regclass('sessions_listing') IS NOT NULL AND to_regclass('vectors_embedder') IS NOT NULL
               AND to_regclass('embedding_settings') IS NOT NULL AND to_regclass('session_kinds') IS NOT NULL
               AND to_regclass('entries_by_turn') IS NOT NULL AND to_regclass('entries_log_keys') IS NOT NULL
               AND to_regclass('entries_key_records_by_agent') IS NOT NULL
               AND to_regclass('held_spans_due') IS NOT NULL AND to_regclass('entries_by_otel_trace') IS NOT NULL
               AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('api_keys')
                            AND attname = 'expires_at' AND NOT attisdropped)
               AND to_regclass('embedding_queue_claimable') IS NOT NULL AND to_regclass('embedding_queue_org') IS NULL
               AND EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure('cairn_time_check()')
                             AND provolatile = 's' AND proparallel = 's')
               AND to_regprocedure('cairn_rtrim(bytea, bytea)') IS NOT NULL
               AND to_regprocedure('cairn_bounded(anyelement)') IS NOT NULL
               AND EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure('cairn_entries_update()')
                             AND prosrc LIKE '%trace-erasure%')",
            &[],
        )
        .context("checking the schema")?
        .get::<_, bool>(0)
        && lexemes_recorded(client)?)
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

/// The `cairn_meta` row saying which analysis made `step_search`'s
/// `tsvector`s: absent, PostgreSQL's `to_tsvector('english', ...)` (before
/// Cairn computed the lexemes itself, see `fulltext::lexemes`), which
/// dropped the stop words the queries now hold.
const LEXEMES_KEY: &str = "search_lexemes";
/// The analysis of `fulltext::lexemes`.
const LEXEMES_VERSION: &str = "1";

/// Re-analyzes every full-text document once if `step_search` was
/// written by PostgreSQL's own analysis (no [`LEXEMES_KEY`] row): its
/// rows go, [`index_unindexed_steps`] writes them again, and the row says
/// it is done. Linear in the steps; one transaction with the migration.
fn reanalyze_search_documents(tx: &mut postgres::Transaction<'_>) -> Result<(), StoreError> {
    if lexemes_recorded(tx)? {
        return Ok(());
    }
    tx.batch_execute("TRUNCATE step_search")
        .context("re-analyzing the full-text documents")?;
    index_unindexed_steps(tx)?;
    tx.execute(
        "INSERT INTO cairn_meta (key, value) VALUES ($1, $2)",
        &[&LEXEMES_KEY, &LEXEMES_VERSION],
    )
    .context("recording the full-text documents' analysis")?;
    Ok(())
}

/// Whether the [`LEXEMES_KEY`] row says `step_search` holds the lexemes
/// of `fulltext::lexemes`.
fn lexemes_recorded(client: &mut impl GenericClient) -> Result<bool, StoreError> {
    Ok(client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM cairn_meta WHERE key = $1 AND value = $2)",
            &[&LEXEMES_KEY, &LEXEMES_VERSION],
        )
        .context("checking the full-text documents' analysis")?
        .get(0))
}

/// Most steps read per query by [`index_unindexed_steps`].
const INDEX_PAGE: i64 = 2_000;
/// Bytes of text after which a page of [`index_unindexed_steps`] ends: a
/// page holds the steps whose text before them in the page is under
/// this, so at most this plus its last step (and always one step,
/// whatever its size): its memory.
const INDEX_PAGE_BYTES: i64 = 32 * 1024 * 1024;

/// Indexes for full-text search the steps `step_search` lacks (a database
/// from before the index existed, or whose documents are re-analyzed),
/// a page of steps at a time in id order, each page at most
/// [`INDEX_PAGE`] steps and about [`INDEX_PAGE_BYTES`] of text.
fn index_unindexed_steps(tx: &mut postgres::Transaction<'_>) -> Result<(), StoreError> {
    let mut after = i64::MIN;
    loop {
        let rows = tx
            .query(
                "SELECT id, org, content, input_data, output_data, metadata FROM (
                   SELECT e.id, e.org, e.content, e.input_data, e.output_data, e.metadata,
                     sum(COALESCE(octet_length(e.content), 0) + COALESCE(octet_length(e.input_data), 0)
                         + COALESCE(octet_length(e.output_data), 0) + COALESCE(octet_length(e.metadata), 0))
                       OVER (ORDER BY e.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
                   FROM entries e
                   WHERE e.id > $1 AND e.type = 'step' AND NOT e.erased
                     AND NOT EXISTS (SELECT 1 FROM step_search f WHERE f.id = e.id)
                     AND NOT EXISTS (SELECT 1 FROM search_queue q WHERE q.id = e.id)
                   ORDER BY e.id LIMIT $2) page
                 WHERE COALESCE(before, 0) < $3
                 ORDER BY id",
                &[&after, &INDEX_PAGE, &INDEX_PAGE_BYTES],
            )
            .context("indexing steps for full-text search")?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        after = col(last, 0)?;
        let (mut ids, mut orgs, mut vectors) = (Vec::new(), Vec::new(), Vec::new());
        for row in &rows {
            let columns: [Option<String>; 4] =
                [col(row, 2)?, col(row, 3)?, col(row, 4)?, col(row, 5)?];
            if let Some(vector) = document_of(&columns) {
                ids.push(col::<i64>(row, 0)?);
                orgs.push(col::<i64>(row, 1)?);
                vectors.push(vector);
            }
        }
        insert_documents(tx, &ids, &orgs, &vectors)?;
    }
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

/// Runs each of `grants` (`GRANT ... ON ...`, without `TO`) for every role,
/// other than the migrating one, that may INSERT into `table`: an upgrade
/// gives a new table to the roles that wrote the one it serves beside or
/// replaces.
pub(super) fn grant_to_writers_of(
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
