//! The PostgreSQL store's reads of its derived per-session tables for
//! verification (`session_heads`, `session_kinds`, page by page), and the
//! restoring of kind rows from the log.

use super::PgStore;
use super::connection::{Db, col, u64_of};
use crate::engine::KindRows;
use crate::{OrgScope, SessionHeadRow, SessionKindRow, StoreError};
use postgres::GenericClient;
use postgres::types::ToSql;

/// The state of the store's `session_kinds` table.
fn kind_rows<C: GenericClient>(db: &mut Db<'_, C>) -> Result<KindRows, StoreError> {
    let row = db.query_one(
        "SELECT to_regclass('session_kinds') IS NOT NULL, to_regclass('entries_session_kinds') IS NOT NULL",
        &[],
        "checking the schema",
    )?;
    Ok(KindRows::of(col(&row, 0)?, col(&row, 1)?))
}

impl PgStore {
    pub(super) fn session_heads_page_in(
        &self,
        org_id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<SessionHeadRow>, StoreError> {
        static QUERY: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| crate::engine::session_heads_page_query("$1", "$2", "$3"));
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            db.query(
                &QUERY,
                &[&org, &after, &i64::from(limit)],
                "reading session heads",
            )?
            .iter()
            .map(|row| {
                Ok(SessionHeadRow {
                    sid: col(row, 0)?,
                    session_id: col(row, 1)?,
                    first_seq: col(row, 2)?,
                    last_seq: col(row, 3)?,
                    last_index: col(row, 4)?,
                })
            })
            .collect()
        })
    }

    pub(super) fn session_kinds_page_in(
        &self,
        org_id: &str,
        after: (i64, &str),
        limit: u32,
    ) -> Result<Option<Vec<SessionKindRow>>, StoreError> {
        static QUERY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            crate::engine::session_kinds_page_query("$1", "$2", "$3", "$4")
        });
        self.read(|db| {
            if kind_rows(db)? != KindRows::Built {
                return Ok(None);
            }
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Some(Vec::new()));
            };
            let params: [&(dyn ToSql + Sync); 4] = [&org, &after.0, &after.1, &i64::from(limit)];
            db.query(&QUERY, &params, "reading session kinds")?
                .iter()
                .map(|row| {
                    Ok(SessionKindRow {
                        sid: col(row, 0)?,
                        session_id: col(row, 1)?,
                        kind: col(row, 2)?,
                    })
                })
                .collect::<Result<_, _>>()
                .map(Some)
        })
    }

    pub(super) fn unattached_session_rows_in(&self) -> Result<u64, StoreError> {
        self.read(|db| {
            let query = kind_rows(db)?.unattached_query();
            let row = db.query_one(query, &[], "counting derived rows")?;
            Ok(u64_of(col(&row, 0)?))
        })
    }

    pub(super) fn restore_session_kinds_in(&self, org_id: Option<&str>) -> Result<u64, StoreError> {
        self.read(|db| {
            let scope = OrgScope::of(org_id, |name| Self::org_id_of(db, name))?;
            if scope == OrgScope::Unknown {
                return Ok(0);
            }
            db.execute(
                "INSERT INTO session_kinds (sid, kind)
                 SELECT DISTINCT sid, kind FROM entries
                 WHERE type = 'step' AND sid IS NOT NULL AND kind IS NOT NULL
                   AND ($1::int8 IS NULL OR org = $1)
                 ON CONFLICT DO NOTHING",
                &[&scope.number()],
                "restoring the kinds of sessions",
            )
        })
    }
}
