//! The PostgreSQL store's tables outside the log: API keys, witness
//! cosignatures, and the log keys recorded in `cairn_meta` (with the origin
//! of an imported org's log). None of them is part of the Merkle tree, so
//! they are kept apart from the log's reads and writes.

use super::PgStore;
use super::connection::{Db, col};
use crate::engine::blob_hash;
use crate::errors::DbContext;
use crate::{ApiKey, Role, StoreError};
use cairn_core::note::NoteVerifier;
use cairn_core::{Hash, Timestamp};
use postgres::{GenericClient, Row};

/// The metadata rows recording log keys added and retired, in the order
/// they were written (`cairn_meta` is append-only).
pub(super) fn meta_key_rows<C: GenericClient>(
    db: &mut Db<'_, C>,
) -> Result<Vec<String>, StoreError> {
    db.query(
        "SELECT key FROM cairn_meta WHERE starts_with(key, 'log_key_') ORDER BY ctid",
        &[],
        "reading the log keys",
    )?
    .iter()
    .map(|row| col::<String>(row, 0))
    .collect()
}

fn api_key_from_row(row: &Row) -> Result<ApiKey, StoreError> {
    let role: String = col(row, 2)?;
    let revoked: Option<i64> = col(row, 7)?;
    let expires: Option<i64> = col(row, 8)?;
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
        expires_at: expires.and_then(Timestamp::from_micros),
    })
}

impl PgStore {
    pub(super) fn put_cosignature_in(
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

    pub(super) fn log_keys_in(&self, org_id: &str) -> Result<Vec<NoteVerifier>, StoreError> {
        self.read(|db| {
            let foreign = match Self::org_id_of(db, org_id)? {
                Some(org) => db.query(
                    "SELECT g.server_key FROM org_origins g WHERE g.org = $1",
                    &[&org],
                    "reading an org's origin",
                )?,
                None => Vec::new(),
            };
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
            let adds = db
                .query(
                    crate::keys::LOG_KEY_RECORDS,
                    &[],
                    "reading the log-key records",
                )?
                .iter()
                .map(|row| {
                    Ok((
                        super::connection::u64_of(col(row, 0)?),
                        col::<String>(row, 1)?,
                        col::<String>(row, 2)?,
                    ))
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            crate::keys::vouched_log_keys(&self.key.verifier, first.as_deref(), &rows, &adds)
        })
    }

    pub(super) fn record_log_key_in(
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

    pub(super) fn cosignatures_in(
        &self,
        org_id: &str,
        size: u64,
    ) -> Result<Vec<String>, StoreError> {
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

    pub(super) fn put_api_key_in(&self, key: &ApiKey) -> Result<(), StoreError> {
        self.read(|db| {
            db.execute(
                "INSERT INTO api_keys (id, org_name, role, agent_id, token_hash, label, created_at, revoked_at, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &key.id,
                    &key.org_id,
                    &key.role.as_str(),
                    &key.agent_id,
                    &&key.token_hash.0[..],
                    &key.label,
                    &key.created_at.as_micros(),
                    &key.revoked_at.map(Timestamp::as_micros),
                    &key.expires_at.map(Timestamp::as_micros),
                ],
                "storing an API key",
            )?;
            Ok(())
        })
    }

    pub(super) fn api_key_by_hash_in(
        &self,
        token_hash: &Hash,
    ) -> Result<Option<ApiKey>, StoreError> {
        self.read(|db| {
            db.query_opt(
                "SELECT id, org_name, role, agent_id, token_hash, label, created_at, revoked_at, expires_at
                 FROM api_keys WHERE token_hash = $1",
                &[&&token_hash.0[..]],
                "looking up an API key",
            )?
            .map(|row| api_key_from_row(&row))
            .transpose()
        })
    }

    pub(super) fn key_orgs_in(&self) -> Result<Vec<String>, StoreError> {
        self.read(|db| {
            db.query(
                "SELECT DISTINCT org_name FROM api_keys ORDER BY org_name",
                &[],
                "listing orgs with keys",
            )?
            .iter()
            .map(|row| col::<String>(row, 0))
            .collect()
        })
    }

    pub(super) fn api_keys_in(&self, org_id: &str) -> Result<Vec<ApiKey>, StoreError> {
        self.read(|db| {
            db.query(
                "SELECT id, org_name, role, agent_id, token_hash, label, created_at, revoked_at, expires_at
                 FROM api_keys WHERE org_name = $1 ORDER BY created_at, id",
                &[&org_id],
                "listing API keys",
            )?
            .iter()
            .map(api_key_from_row)
            .collect()
        })
    }

    pub(super) fn revoke_api_key_in(
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

    pub(super) fn revoke_api_key_unless_last_admin_in(
        &self,
        org_id: &str,
        key_id: &str,
        agent: Option<&str>,
        at: Timestamp,
    ) -> Result<crate::KeyRevocation, StoreError> {
        let context = "revoking an API key";
        self.read(|db| {
            db.client.batch_execute("BEGIN").context(context)?;
            let outcome = (|| {
                // The org's admin keys in use, locked until this commits: a
                // second revocation (on any server) waits here, and then
                // sees this one's (in READ COMMITTED each statement reads
                // what committed before it began), so two admins revoking
                // each other cannot both pass the check.
                db.client
                    .query(
                        "SELECT id FROM api_keys WHERE org_name = $1 AND role = 'admin'
                          AND agent_id IS NULL AND revoked_at IS NULL FOR UPDATE",
                        &[&org_id],
                    )
                    .context(context)?;
                let changed = db
                    .client
                    .execute(
                        crate::auth::REVOKE_UNLESS_LAST_ADMIN_PG,
                        &[&org_id, &key_id, &at.as_micros(), &agent],
                    )
                    .context(context)?;
                if changed > 0 {
                    return Ok(crate::KeyRevocation::Revoked);
                }
                let in_use: i64 = db
                    .client
                    .query_one(crate::auth::KEY_IN_USE_PG, &[&org_id, &key_id, &agent])
                    .context(context)?
                    .try_get(0)
                    .context(context)?;
                Ok(if in_use > 0 {
                    crate::KeyRevocation::LastAdmin
                } else {
                    crate::KeyRevocation::Unknown
                })
            })();
            let end = if outcome.is_ok() {
                "COMMIT"
            } else {
                "ROLLBACK"
            };
            let ended = db.client.batch_execute(end).context(context);
            ended.and(outcome)
        })
    }

    pub(super) fn log_signer_in(&self, org_id: &str) -> Result<(String, NoteVerifier), StoreError> {
        let origin = self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(None);
            };
            db.query_opt(
                "SELECT g.server_name, g.server_key FROM org_origins g WHERE g.org = $1",
                &[&org],
                "reading an org's origin",
            )?
            .map(|row| Ok((col::<String>(&row, 0)?, col::<String>(&row, 1)?)))
            .transpose()
        })?;
        crate::engine::signer_of(&self.key, origin)
    }
}
