//! PostgreSQL: schema, migrations and the append-only guard.
//!
//! `migrate` applies `pg_schema.sql` under an advisory lock, so that any
//! number of `cairn` servers starting at once against one database migrate
//! it exactly once. `install_guard` adds the event triggers that refuse
//! DROP and ALTER of ledger tables (PostgreSQL requires a superuser for
//! event triggers); `docs/OPERATIONS.md` gives the grants for the role
//! Cairn runs as in production, which owns nothing and may only SELECT,
//! INSERT and (for the recorded erasure and derived tables) UPDATE.
//!
//! The `LedgerStore` implementation on PostgreSQL is issue 5's next step;
//! this module is the part of it that does not depend on the sequencer.

use crate::StoreError;

/// The schema, version 1.
pub const SCHEMA: &str = include_str!("pg_schema.sql");
/// The DDL guard (event triggers; needs a superuser).
pub const GUARD: &str = include_str!("pg_guard.sql");
const SCHEMA_VERSION: &str = "1";

fn pg_error(context: &str) -> impl Fn(postgres::Error) -> StoreError + '_ {
    move |e| StoreError::Corrupt(format!("PostgreSQL, while {context}: {e}"))
}

/// Applies the schema if needed and checks its version.
pub fn migrate(client: &mut postgres::Client) -> Result<(), StoreError> {
    let mut tx = client
        .transaction()
        .map_err(pg_error("starting the migration"))?;
    // One migrating server at a time.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('cairn-migrate'))",
        &[],
    )
    .map_err(pg_error("locking the migration"))?;
    tx.batch_execute(SCHEMA)
        .map_err(pg_error("creating the schema"))?;
    let version: Option<String> = tx
        .query_opt(
            "SELECT value FROM cairn_meta WHERE key = 'schema_version'",
            &[],
        )
        .map_err(pg_error("reading the schema version"))?
        .map(|row| row.get(0));
    match version.as_deref() {
        None => {
            tx.execute(
                "INSERT INTO cairn_meta (key, value) VALUES ('schema_version', $1)",
                &[&SCHEMA_VERSION],
            )
            .map_err(pg_error("recording the schema version"))?;
        }
        Some(SCHEMA_VERSION) => {}
        Some(other) => {
            return Err(StoreError::Corrupt(format!(
                "database schema version {other} is not supported (expected {SCHEMA_VERSION})"
            )));
        }
    }
    tx.commit().map_err(pg_error("committing the migration"))
}

/// Installs the DDL guard if the connected role is a superuser; returns
/// whether it did.
pub fn install_guard(client: &mut postgres::Client) -> Result<bool, StoreError> {
    let superuser: bool = client
        .query_one(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .map_err(pg_error("checking privileges"))?
        .get(0);
    if !superuser {
        return Ok(false);
    }
    client
        .batch_execute(GUARD)
        .map_err(pg_error("installing the DDL guard"))?;
    Ok(true)
}
