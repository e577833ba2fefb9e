//! The embedded store's tables outside the log: API keys, witness
//! cosignatures, and the log keys recorded in `meta` (with the origin of
//! an imported org's log). None of them is part of the Merkle tree, so
//! they are kept apart from the log's reads and writes.

use super::SqliteStore;
use super::connection::poisoned;
use crate::engine::blob_hash;
use crate::{DbContext, StoreError};
use cairn_core::note::NoteVerifier;
use cairn_core::{Hash, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};

/// The metadata rows recording log keys added and retired.
pub(super) fn meta_key_rows(conn: &Connection) -> Result<Vec<String>, StoreError> {
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

const API_KEY_COLUMNS: &str =
    "id, org_name, role, agent_id, token_hash, label, created_at, revoked_at, expires_at";

fn api_key_from_row(row: &rusqlite::Row<'_>) -> Result<crate::ApiKey, StoreError> {
    let role: String = row.get(2).context("reading an API key")?;
    let created: i64 = row.get(6).context("reading an API key")?;
    let revoked: Option<i64> = row.get(7).context("reading an API key")?;
    let expires: Option<i64> = row.get(8).context("reading an API key")?;
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
        expires_at: expires.and_then(Timestamp::from_micros),
    })
}

impl SqliteStore {
    pub(super) fn put_api_key_in(&self, key: &crate::ApiKey) -> Result<(), StoreError> {
        let w = self.writer.lock().map_err(|_| poisoned())?;
        w.conn
            .execute(
                "INSERT INTO api_keys (id, org_name, role, agent_id, token_hash, label, created_at, revoked_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    key.id,
                    key.org_id,
                    key.role.as_str(),
                    key.agent_id,
                    &key.token_hash.0[..],
                    key.label,
                    key.created_at.as_micros(),
                    key.revoked_at.map(Timestamp::as_micros),
                    key.expires_at.map(Timestamp::as_micros)
                ],
            )
            .context("storing an API key")?;
        Ok(())
    }

    pub(super) fn api_key_by_hash_in(
        &self,
        token_hash: &Hash,
    ) -> Result<Option<crate::ApiKey>, StoreError> {
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

    pub(super) fn key_orgs_in(&self) -> Result<Vec<String>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare_cached("SELECT DISTINCT org_name FROM api_keys ORDER BY org_name")
                .context("listing orgs with keys")?;
            let names = stmt
                .query_map([], |r| r.get(0))
                .context("listing orgs with keys")?
                .collect::<Result<Vec<String>, _>>()
                .context("listing orgs with keys")?;
            Ok(names)
        })
    }

    pub(super) fn api_keys_in(&self, org_id: &str) -> Result<Vec<crate::ApiKey>, StoreError> {
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

    pub(super) fn revoke_api_key_in(
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

    pub(super) fn revoke_api_key_unless_last_admin_in(
        &self,
        org_id: &str,
        key_id: &str,
        agent: Option<&str>,
        at: Timestamp,
    ) -> Result<crate::KeyRevocation, StoreError> {
        // One statement holds SQLite's write lock from its check to its
        // change, against this process's writers and any other process's.
        let w = self.writer.lock().map_err(|_| poisoned())?;
        let changed = w
            .conn
            .execute(
                crate::auth::REVOKE_UNLESS_LAST_ADMIN,
                params![org_id, key_id, at.as_micros(), agent],
            )
            .context("revoking an API key")?;
        if changed > 0 {
            return Ok(crate::KeyRevocation::Revoked);
        }
        let in_use: i64 = w
            .conn
            .query_row(
                crate::auth::KEY_IN_USE,
                params![org_id, key_id, agent],
                |r| r.get(0),
            )
            .context("revoking an API key")?;
        Ok(if in_use > 0 {
            crate::KeyRevocation::LastAdmin
        } else {
            crate::KeyRevocation::Unknown
        })
    }

    pub(super) fn put_cosignature_in(
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

    pub(super) fn cosignatures_in(
        &self,
        org_id: &str,
        size: u64,
    ) -> Result<Vec<String>, StoreError> {
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

    pub(super) fn log_keys_in(&self, org_id: &str) -> Result<Vec<NoteVerifier>, StoreError> {
        self.read(|c| {
            let foreign: Option<String> = match Self::org_id_of(c, org_id)? {
                Some(org) => c
                    .query_row(
                        "SELECT server_key FROM org_origins WHERE org = ?1",
                        [org],
                        |r| r.get(0),
                    )
                    .optional()
                    .context("reading an org's origin")?,
                None => None,
            };
            if let Some(key) = foreign {
                return NoteVerifier::parse(&key)
                    .map(|k| vec![k])
                    .map_err(|e| StoreError::Corrupt(format!("an imported log's key: {e}")));
            }
            let first: Option<String> = c
                .query_row("SELECT value FROM meta WHERE key = 'server_key'", [], |r| {
                    r.get(0)
                })
                .optional()
                .context("reading the server key")?;
            // Without `entries_log_keys` (a store opened only to be read
            // before its first writable open of this version) the query
            // would read the whole log: the older index instead.
            let indexed: bool = c
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'index' AND name = 'entries_log_keys')",
                )
                .and_then(|mut s| s.query_row([], |r| r.get(0)))
                .context("reading the schema")?;
            let adds = c
                .prepare_cached(if indexed {
                    crate::keys::LOG_KEY_RECORDS
                } else {
                    crate::keys::LOG_KEY_RECORDS_SCAN
                })
                .and_then(|mut stmt| {
                    stmt.query_map([], |r| {
                        Ok((
                            r.get::<_, i64>(0)? as u64,
                            r.get::<_, String>(1)?,
                            r.get::<_, String>(2)?,
                        ))
                    })?
                    .collect::<Result<Vec<_>, _>>()
                })
                .context("reading the log-key records")?;
            crate::keys::vouched_log_keys(
                &self.key.verifier,
                first.as_deref(),
                &meta_key_rows(c)?,
                &adds,
            )
        })
    }

    pub(super) fn record_log_key_in(
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

    pub(super) fn log_signer_in(&self, org_id: &str) -> Result<(String, NoteVerifier), StoreError> {
        let origin: Option<(String, String)> = self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(None);
            };
            c.query_row(
                "SELECT server_name, server_key FROM org_origins WHERE org = ?1",
                [org],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .context("reading an org's origin")
        })?;
        crate::engine::signer_of(&self.key, origin)
    }
}
