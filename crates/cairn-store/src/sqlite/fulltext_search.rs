//! The full-text index's read side: the file attached to a reading
//! connection (only searches open it, so a damaged file never stops other
//! reads), and the search itself, which first writes what this process
//! queued (or says the index is still catching up with the log). Kept
//! apart from the index's writing thread and queue (`fulltext_index.rs`).

use super::SqliteStore;
use super::fulltext_file::{ATTACHED_AS, has_table, index_path};
use super::fulltext_mend::forgetting;
use crate::listing::{self, ListParam};
use crate::{DbContext, StepFilter, StoreError};
use rusqlite::Connection;
use std::path::Path;

/// Attaches the index's file to a reading connection, if it exists (a
/// store no sequencing process of this version opened has none yet).
pub(super) fn attach(conn: &Connection, ledger_path: &Path) -> Result<(), StoreError> {
    let path = index_path(ledger_path);
    if path.exists() {
        // The path's own bytes: a data directory's name need not be UTF-8.
        #[cfg(unix)]
        let name = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
        #[cfg(not(unix))]
        let name = path.to_string_lossy().into_owned().into_bytes();
        conn.execute(
            &format!("ATTACH DATABASE CAST(?1 AS TEXT) AS {ATTACHED_AS}"),
            [name],
        )
        .context("attaching the full-text index")?;
    }
    Ok(())
}

/// Makes sure a reading connection sees the index (a process that opened
/// the store to read before any sequencing process of this version created
/// the index's file attached nothing), or says why it cannot.
pub(super) fn ensure_attached(conn: &Connection, ledger_path: &Path) -> Result<(), StoreError> {
    let attached: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM pragma_database_list WHERE name = ?1)",
            [ATTACHED_AS],
            |r| r.get(0),
        )
        .context("looking for the full-text index")?;
    if attached {
        return Ok(());
    }
    attach(conn, ledger_path)?;
    if index_path(ledger_path).exists() {
        Ok(())
    } else {
        Err(StoreError::Busy(
            "the full-text index has not been built yet: it is built when the server that sequences this store starts".into(),
        ))
    }
}

impl SqliteStore {
    /// Writes the queued documents now (before a search of `org`, so that
    /// this process finds every step it acknowledged). Nothing to do in a
    /// process that opened the store to read.
    pub(super) fn flush_fulltext(&self, org: i64) -> Result<(), StoreError> {
        match &self.fulltext {
            Some(index) => index.flush_for(org),
            None => Ok(()),
        }
    }
}

impl SqliteStore {
    pub(super) fn full_text_search_in(
        &self,
        org_id: &str,
        query: &crate::fulltext::FullTextQuery,
        filter: &StepFilter,
        limit: usize,
    ) -> Result<Vec<(u64, f64)>, StoreError> {
        let Some(org) = self.read(|c| Self::org_id_of(c, org_id))? else {
            return Ok(Vec::new());
        };
        // What this process acknowledged is found at once.
        self.flush_fulltext(org)?;
        self.read(|c| {
            ensure_attached(c, &self.path)?;
            // One snapshot of both files: the mark is read with the
            // documents it speaks for.
            let snapshot = c
                .unchecked_transaction()
                .context("searching the full-text index")?;
            if forgetting(&snapshot, ATTACHED_AS, org)? {
                return Err(StoreError::Busy(
                    "the full-text index is dropping this org's documents of another history of its log (fulltext.db is older or newer than ledger.db) before indexing the log again; search again shortly".into(),
                ));
            }
            // An org none of whose steps was indexed yet has no table.
            if !has_table(&snapshot, ATTACHED_AS, org)? {
                return Ok(Vec::new());
            }
            let (sql, params) = listing::step_search_query(
                listing::Engine::Fts5,
                org,
                query.to_fts5(),
                filter,
                limit,
                |n| format!("?{n}"),
            );
            let params: Vec<Box<dyn rusqlite::ToSql>> =
                params.into_iter().map(ListParam::into_sqlite).collect();
            let mut stmt = c
                .prepare_cached(&sql)
                .context("searching the full-text index")?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(params.iter()), |r| {
                    Ok(r.get::<_, i64>(0)? as u64)
                })
                .context("searching the full-text index")?
                .collect::<Result<Vec<_>, _>>()
                .context("searching the full-text index")?;
            // The hits in BM25's order over the org's own table, scored by
            // rank alone (OPERATIONS, "Search": what a score means).
            Ok(rows
                .into_iter()
                .enumerate()
                .map(|(rank, seq)| (seq, rank_score(rank)))
                .collect())
        })
    }
}

/// The score of the hit at `rank` (0 the best) of an answer: higher is
/// better, and nothing but the rank.
fn rank_score(rank: usize) -> f64 {
    1.0 / (rank as f64 + 1.0)
}
