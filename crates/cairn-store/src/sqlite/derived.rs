//! The embedded store's reads of its derived per-session tables for
//! verification (`session_heads`, `session_kinds`, page by page, each
//! value as stored whatever its type), and the restoring of kind rows
//! from the log.

use super::SqliteStore;
use super::connection::poisoned;
use crate::engine::KindRows;
use crate::{DbContext, OrgScope, SessionHeadRow, SessionKindRow, StoreError};
use rusqlite::params;
use rusqlite::types::ValueRef;

/// An integer column, `None` for any other type (SQLite keeps what it is
/// given in a column of any declared type).
fn integer(row: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<i64>> {
    Ok(match row.get_ref(i)? {
        ValueRef::Integer(n) => Some(n),
        _ => None,
    })
}

/// A text column as UTF-8, `None` for any other type or bytes.
fn text(row: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<String>> {
    Ok(match row.get_ref(i)? {
        ValueRef::Text(t) => std::str::from_utf8(t).ok().map(str::to_owned),
        _ => None,
    })
}

/// The state of the store's `session_kinds` table.
fn kind_rows(c: &rusqlite::Connection) -> Result<KindRows, StoreError> {
    let (table, old_index) = c
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'session_kinds'),
                    EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'entries_session_kinds')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .context("checking the schema")?;
    Ok(KindRows::of(table, old_index))
}

impl SqliteStore {
    pub(super) fn session_heads_page_in(
        &self,
        org_id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<SessionHeadRow>, StoreError> {
        static QUERY: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| crate::engine::session_heads_page_query("?1", "?2", "?3"));
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            let mut stmt = c.prepare_cached(&QUERY).context("reading session heads")?;
            stmt.query_map(params![org, after, limit], |r| {
                Ok(SessionHeadRow {
                    sid: r.get(0)?,
                    session_id: text(r, 1)?.unwrap_or_default(),
                    first_seq: integer(r, 2)?,
                    last_seq: integer(r, 3)?,
                    last_index: integer(r, 4)?,
                })
            })
            .context("reading session heads")?
            .collect::<Result<_, _>>()
            .context("reading session heads")
        })
    }

    pub(super) fn session_kinds_page_in(
        &self,
        org_id: &str,
        after: (i64, &str),
        limit: u32,
    ) -> Result<Option<Vec<SessionKindRow>>, StoreError> {
        static QUERY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            crate::engine::session_kinds_page_query("?1", "?2", "?3", "?4")
        });
        self.read(|c| {
            if kind_rows(c)? != KindRows::Built {
                return Ok(None);
            }
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Some(Vec::new()));
            };
            let mut stmt = c.prepare_cached(&QUERY).context("reading session kinds")?;
            stmt.query_map(params![org, after.0, after.1, limit], |r| {
                Ok(SessionKindRow {
                    sid: r.get(0)?,
                    session_id: text(r, 1)?.unwrap_or_default(),
                    kind: text(r, 2)?,
                })
            })
            .context("reading session kinds")?
            .collect::<Result<_, _>>()
            .context("reading session kinds")
            .map(Some)
        })
    }

    pub(super) fn unattached_session_rows_in(&self) -> Result<u64, StoreError> {
        self.read(|c| {
            let query = kind_rows(c)?.unattached_query();
            let n: i64 = c
                .query_row(query, [], |r| r.get(0))
                .context("counting derived rows")?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
    }

    pub(super) fn restore_session_kinds_in(&self, org_id: Option<&str>) -> Result<u64, StoreError> {
        let mut guard = self.writer.lock().map_err(|_| poisoned())?;
        let tx = guard
            .conn
            .transaction()
            .context("restoring the kinds of sessions")?;
        let scope = OrgScope::of(org_id, |name| Self::org_id_of(&tx, name))?;
        if scope == OrgScope::Unknown {
            return Ok(0);
        }
        let added = tx
            .execute(
                "INSERT OR IGNORE INTO session_kinds (sid, kind)
                 SELECT DISTINCT sid, kind FROM entries
                 WHERE type = 'step' AND sid IS NOT NULL AND kind IS NOT NULL
                   AND (?1 IS NULL OR org = ?1)",
                [scope.number()],
            )
            .context("restoring the kinds of sessions")?;
        tx.commit().context("restoring the kinds of sessions")?;
        Ok(added as u64)
    }
}
