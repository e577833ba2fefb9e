//! How the embedded store's code reaches what it works with: a pooled
//! read-only connection, the writer while the store is sound, an org's
//! internal number, and the
//! engine's settings. Apart from `sqlite.rs`, which is the store's
//! configuration, opening and trait implementation.

use super::connection::{open_reader, poisoned};
use super::{SqliteStore, Writer};
use crate::engine::Engine;
use crate::{DbContext, StoreError};
use rusqlite::Connection;

impl SqliteStore {
    /// Runs `f` with a read-only connection from the pool.
    pub(super) fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let pooled = self.readers.lock().map_err(|_| poisoned())?.pop();
        let conn = match pooled {
            Some(c) => c,
            // The full-text index is attached by the search that needs it
            // (a damaged index file must not stop every read).
            None => open_reader(&self.path)?,
        };
        let out = f(&conn);
        if let Ok(mut pool) = self.readers.lock()
            && pool.len() < 8
        {
            pool.push(conn);
        }
        out
    }

    pub(super) fn org_id_of(conn: &Connection, org: &str) -> Result<Option<i64>, StoreError> {
        // Cached: every read looks its org up (a full verification reads
        // its log a chunk at a time).
        // Two rows at most, read without collecting them: every read
        // looks its org up.
        let (first, second): (Option<i64>, Option<i64>) = conn
            .prepare_cached("SELECT org FROM orgs WHERE name = ?1 LIMIT 2")
            .and_then(|mut s| {
                let mut rows = s.query_map([org], |r| r.get(0))?;
                Ok((rows.next().transpose()?, rows.next().transpose()?))
            })
            .context("looking up an org")?;
        match (first, second) {
            (None, _) => Ok(None),
            (Some(number), None) => Ok(Some(number)),
            // The name's key removed and a second org given it: one of
            // the two logs would be read for the other (PostgreSQL's
            // lookup refuses the same way).
            (Some(_), Some(_)) => Err(StoreError::RepeatedOrgName(org.to_owned())),
        }
    }

    /// Runs `work` with the writer, unless this process opened the store to
    /// read or the store is broken (then there is nothing to maintain).
    pub(super) fn with_sound_writer(
        &self,
        work: impl FnOnce(&mut Writer) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if self.read_only {
            return Ok(());
        }
        let mut guard = self.writer.lock().map_err(|_| poisoned())?;
        if guard.broken.is_some() {
            return Ok(());
        }
        work(&mut guard)
    }

    pub(super) fn engine(&self) -> Engine<'_> {
        Engine {
            key: &self.key,
            limits: self.limits,
            embedding_sample_rate: self.embedding_sample_rate,
            checkpoint_interval: self.checkpoint_interval,
            max_clock_skew_s: self.max_clock_skew_s,
            max_agent_keys: self.max_agent_keys,
        }
    }
}
