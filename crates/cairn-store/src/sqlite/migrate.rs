//! The embedded store's schema and its upgrades: creating the schema in a
//! new database, checking it over an existing one, refusing versions this
//! cairn cannot open, and the one-time upgrades of stores written by
//! earlier versions. Run once, at open, inside the schema transaction.

use super::SqliteOptions;
use super::admin::meta_key_rows;
use crate::{DbContext, StoreError};
use rusqlite::{Connection, OptionalExtension};
use std::path::Path;

const SCHEMA: &str = include_str!("../schema.sql");
const SCHEMA_VERSION: &str = "2";

/// Reads the stored schema version and creates the schema (a new
/// database), restores it over the rows (a sequencing process), or refuses
/// a version this cairn cannot open. Returns why the store can only be
/// read, if it can only be read.
pub(super) fn check_schema(
    tx: &rusqlite::Transaction<'_>,
    path: &Path,
    options: &SqliteOptions,
) -> Result<Option<String>, StoreError> {
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
            add_missing_columns(tx)?;
        }
        Some(SCHEMA_VERSION) => {
            // Key commands run beside a server, and may be the first
            // commands of a new version: they need the added columns as
            // much as the sequencer does. A store that cannot be written
            // (a read-only copy being verified) is read without them.
            let _ = add_missing_columns(tx);
        }
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
    Ok(damaged)
}

/// The key that signs this store's checkpoints is recorded in `meta` on
/// first sequencing; a sequencing process with another key (a data
/// directory copied without its key, a key file lost and recreated) refuses
/// to start rather than sign checkpoints no verifier would accept.
pub(super) fn check_signing_key(
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

/// Whether `key` is this store's (the public key of its recorded first
/// key or of one added since, whatever name it is loaded under), judged
/// without recording anything: true for a store that has recorded no key
/// yet.
pub(super) fn key_is_the_stores(
    tx: &rusqlite::Transaction<'_>,
    key: &crate::ServerKey,
) -> Result<bool, StoreError> {
    let recorded: Option<String> = tx
        .query_row("SELECT value FROM meta WHERE key = 'server_key'", [], |r| {
            r.get(0)
        })
        .optional()
        .context("reading the recorded server key")?;
    let Some(first) = recorded else {
        return Ok(true);
    };
    let rows = meta_key_rows(tx)?;
    let ours = key.verifier.public_key();
    Ok(std::iter::once(first.as_str())
        .chain(
            rows.iter()
                .filter_map(|r| r.strip_prefix(crate::keys::ADDED_PREFIX)),
        )
        .filter_map(|text| cairn_core::note::NoteVerifier::parse(text).ok())
        .any(|k| k.public_key() == ours))
}

/// Fills `session_kinds` from the log of a store written before it
/// existed, then drops the index over `entries (sid, kind)` it replaces
/// (once: the index's presence says it has not run).
pub(super) fn record_session_kinds(tx: &Connection) -> Result<(), StoreError> {
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

/// Adds the columns a version-2 store written before them lacks (tables
/// outside the ledger only): `api_keys.expires_at`.
fn add_missing_columns(tx: &rusqlite::Transaction<'_>) -> Result<(), StoreError> {
    let has_expiry: bool = tx
        .query_row(
            "SELECT count(*) > 0 FROM pragma_table_info('api_keys') WHERE name = 'expires_at'",
            [],
            |r| r.get(0),
        )
        .context("checking the API keys' columns")?;
    if !has_expiry {
        tx.execute_batch("ALTER TABLE api_keys ADD COLUMN expires_at INTEGER")
            .context("adding the API keys' expiry")?;
    }
    Ok(())
}
