//! The writer connection and what runs through it, each a [`PgTx`]
//! under its orgs' locks: one attempt at a batch (`append_batch` tries
//! again once if BEGIN failed), the checkpoints that are due, and imports.
//! Separate from the read queries, which run on pooled connections.

use super::PgStore;
use super::connection::{Db, PgConn, col, connect, poisoned};
use super::locks::Cache;
use super::tx::{PgTx, sessions_before_locking};
use crate::engine::request_org;
use crate::{DbContext, ImportError, Refusal, StoreError, WriteRequest, Written, now};
use cairn_core::log::LogEntry;
use std::collections::{HashMap, HashSet};

/// What `each` draws from a batch's requests, by org name, each once
/// (sorted).
fn by_org<T: Ord>(
    batch: &[WriteRequest],
    each: impl Fn(&WriteRequest) -> Vec<T>,
) -> HashMap<&str, Vec<T>> {
    let mut wanted: HashMap<&str, Vec<T>> = HashMap::new();
    for request in batch {
        let found = each(request);
        if !found.is_empty() {
            wanted
                .entry(request_org(request))
                .or_default()
                .extend(found);
        }
    }
    for found in wanted.values_mut() {
        found.sort_unstable();
        found.dedup();
    }
    wanted
}

/// The sessions a batch appends to or seals, by org name, each once;
/// only well-formed ids, as in [`trace_ids_of`] (a malformed one is
/// refused with its own request).
fn sessions_of(batch: &[WriteRequest]) -> HashMap<&str, Vec<String>> {
    by_org(batch, |request| {
        let session = match request {
            WriteRequest::Step(s) => &s.session_id,
            WriteRequest::Prepared(p) => &p.step.session_id,
            WriteRequest::Seal { session_id, .. } => session_id,
            _ => return Vec::new(),
        };
        if well_formed(session) {
            vec![session.clone()]
        } else {
            Vec::new()
        }
    })
}

/// The record ids a batch's steps and audit events choose, and those its
/// steps link to (`corrects`, `parent`, `audit_event`: the links the
/// sequencer checks), by org name
/// (looked up together under the lock: [`PgTx::prefetch_trace_ids`]).
///
/// Only well-formed ids ([`well_formed`]): a malformed one (a NUL byte,
/// which PostgreSQL refuses in text) would fail the whole batch's query,
/// every org's request with it, where its step alone is refused. An id not
/// looked up is asked for, if ever, the slow way.
fn trace_ids_of(batch: &[WriteRequest]) -> HashMap<&str, Vec<String>> {
    fn step_ids<'a>(
        chosen: Option<&'a String>,
        links: &'a cairn_core::record::Links,
    ) -> impl Iterator<Item = &'a String> {
        chosen.into_iter().chain(
            [&links.corrects, &links.parent, &links.audit_event]
                .into_iter()
                .flatten(),
        )
    }
    by_org(batch, |request| {
        let ids: Vec<&String> = match request {
            WriteRequest::Step(s) => step_ids(s.trace_id.as_ref(), &s.links).collect(),
            WriteRequest::Prepared(p) => {
                step_ids(p.trace_id_given.then_some(&p.step.trace_id), &p.step.links).collect()
            }
            WriteRequest::Steps(steps) | WriteRequest::Turn { steps, .. } => steps
                .iter()
                .flat_map(|s| step_ids(s.trace_id.as_ref(), &s.links))
                .collect(),
            WriteRequest::AuditEvent {
                event_id: Some(id), ..
            } => vec![id],
            _ => Vec::new(),
        };
        ids.into_iter()
            .filter(|id| well_formed(id))
            .cloned()
            .collect()
    })
}

/// Whether `id` is an id every record may hold ([`validate_id`]): what
/// the look-ups ahead of a batch send to the database.
///
/// [`validate_id`]: cairn_core::record::validate_id
fn well_formed(id: &str) -> bool {
    cairn_core::record::validate_id("id", id).is_ok()
}

/// The turn numbers a batch's lone steps give, `(session, turn_id,
/// turn_step)` by org name (looked up together under the lock:
/// [`PgTx::prefetch_turn_steps`], for the sessions read ahead, which are
/// lone steps'; a turn or a write of many steps looks its numbers up in
/// one query per turn). Only well-formed ids, as in [`trace_ids_of`].
fn turn_steps_of(batch: &[WriteRequest]) -> HashMap<&str, Vec<(String, String, u64)>> {
    by_org(batch, |request| {
        let (session, turn, number) = match request {
            WriteRequest::Step(s) => (&s.session_id, &s.turn_id, s.turn_step),
            WriteRequest::Prepared(p) if p.turn_step_given => {
                (&p.step.session_id, &p.step.turn_id, p.step.turn_step)
            }
            _ => return Vec::new(),
        };
        match (turn, number) {
            (Some(turn), Some(number)) if well_formed(session) && well_formed(turn) => {
                vec![(session.clone(), turn.clone(), number)]
            }
            _ => Vec::new(),
        }
    })
}

impl PgStore {
    /// Runs `f` with the writer connection, reconnecting if it was lost.
    pub(super) fn with_writer<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut PgConn, &mut Cache) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut writer = self.writer.lock().map_err(|_| poisoned())?;
        let mut cache = self.cache.lock().map_err(|_| poisoned())?;
        if writer.as_ref().is_none_or(|c| c.client.is_closed()) {
            *writer = None;
            // Whatever the lost connection's batches left is forgotten too:
            // the database may not be the one they wrote to (restored from
            // a backup, failed over), and a kept frontier or session state
            // is trusted as the catch-up's starting point.
            *cache = Cache::default();
            *writer = Some(connect(&self.config)?);
        }
        let conn = writer
            .as_mut()
            .ok_or_else(|| StoreError::Corrupt("no writer connection".into()))?;
        let out = f(conn, &mut cache);
        if out.is_err() {
            // The cache may have been filled inside the failed transaction
            // from its own uncommitted rows (agent keys registered earlier
            // in the batch): forget it rather than trust what was rolled
            // back. It is rebuilt from committed data under the next lock.
            *cache = Cache::default();
        }
        out
    }

    /// One attempt at a batch: `Ok(Err(_))` when BEGIN failed, so that
    /// nothing of the batch was sent and it may be tried again.
    #[allow(clippy::type_complexity)]
    pub(super) fn append_once(
        &self,
        batch: &[WriteRequest],
        names: HashSet<String>,
    ) -> Result<Result<Vec<Result<Written, Refusal>>, postgres::Error>, StoreError> {
        self.with_writer(|conn, cache| {
            // Before the transaction and its locks: the sessions of orgs
            // other processes write too, as the log stands (checked under
            // the lock). The documents' lexemes were computed as each step
            // was submitted (`LedgerStore::search_form`).
            let wanted = sessions_of(batch);
            // A failed early read is only a missed shortcut: the sessions
            // are then read under the lock, and a lost connection fails
            // the BEGIN below, which may be tried again.
            let mut early = Vec::new();
            for (&name, ids) in &wanted {
                if !cache.shared.contains(name) {
                    continue;
                }
                // Those this process wrote last are most likely still as
                // it left them (checked under the lock).
                let ids: Vec<String> = ids
                    .iter()
                    .filter(|id| !cache.keeps_session(name, id))
                    .cloned()
                    .collect();
                if ids.is_empty() {
                    continue;
                }
                if let Ok(Some(sessions)) = sessions_before_locking(&mut conn.db(), name, &ids) {
                    early.push(sessions);
                }
            }
            // Dropping the transaction without commit (an error below) rolls
            // the whole batch back and releases the locks.
            let mut tx = match conn.client.transaction() {
                Ok(tx) => tx,
                Err(e) => return Ok(Err(e)),
            };
            let db = Db {
                client: &mut tx,
                statements: &mut conn.statements,
            };
            let mut pg_tx = PgTx::begin(db, names, &mut *cache)?;
            for sessions in early {
                pg_tx.adopt_early_sessions(sessions)?;
            }
            // The sessions the batch appends to or seals that the early
            // read did not settle: one query per org.
            for (name, ids) in &wanted {
                if let Some(org) = pg_tx.orgs.get(*name).map(|o| o.id) {
                    pg_tx.prefetch_sessions(org, ids)?;
                }
            }
            // The record ids and turn numbers its steps choose: a query
            // each per org.
            for (name, ids) in &trace_ids_of(batch) {
                if let Some(org) = pg_tx.orgs.get(*name).map(|o| o.id) {
                    pg_tx.prefetch_trace_ids(org, ids)?;
                }
            }
            for (name, numbers) in &turn_steps_of(batch) {
                if let Some(org) = pg_tx.orgs.get(*name).map(|o| o.id) {
                    pg_tx.prefetch_turn_steps(org, numbers)?;
                }
            }
            let (results, overlay) = self.engine().run_batch(&mut pg_tx, batch)?;
            pg_tx.flush()?;
            let (docs, all_docs) = pg_tx.take_handed();
            drop(pg_tx);
            tx.commit().context("committing a batch")?;
            self.search_indexer.hand(docs, all_docs);
            cache.keep_sessions(&overlay.orgs, overlay.sessions);
            for org in overlay.orgs.into_values() {
                cache.frontiers.insert(org.id, org.frontier);
            }
            Ok(Ok(results))
        })
    }

    /// Checkpoints one org if it is due, under its lock.
    fn checkpoint_if_due(
        &self,
        conn: &mut PgConn,
        cache: &mut Cache,
        name: &str,
    ) -> Result<(), StoreError> {
        let mut tx = conn.client.transaction().context("starting a checkpoint")?;
        let db = Db {
            client: &mut tx,
            statements: &mut conn.statements,
        };
        let mut pg_tx = PgTx::begin(db, HashSet::from([name.to_owned()]), cache)?;
        let Some(mut org) = pg_tx.orgs.get(name).cloned() else {
            return Ok(());
        };
        let engine = self.engine();
        if org.foreign || !engine.due(&org) {
            return Ok(());
        }
        engine.checkpoint(&mut pg_tx, name, &mut org)?;
        pg_tx.flush()?;
        drop(pg_tx);
        tx.commit().context("committing a checkpoint")
    }

    pub(super) fn maintain_in(&self) -> Result<(), StoreError> {
        let horizon = now().as_micros().saturating_sub(
            i64::try_from(self.checkpoint_interval.as_micros()).unwrap_or(i64::MAX),
        );
        // Orgs whose log grew past their last checkpoint, which is old
        // enough: any process may sign, under the org's lock.
        let due: Vec<String> = self.read(|db| {
            db.query(
                "SELECT o.name FROM orgs o LEFT JOIN LATERAL (
                   SELECT size, created_at FROM checkpoints c WHERE c.org = o.org ORDER BY size DESC LIMIT 1
                 ) c ON TRUE
                 WHERE NOT EXISTS (SELECT 1 FROM org_origins g WHERE g.org = o.org)
                   AND COALESCE(c.created_at, 0) <= $1
                   AND EXISTS (SELECT 1 FROM entries e
                               WHERE e.id >= (o.org << 40) + COALESCE(c.size, 0) AND e.id < ((o.org + 1) << 40))",
                &[&horizon],
                "finding orgs to checkpoint",
            )?
            .iter()
            .map(|r| col(r, 0))
            .collect()
        })?;
        for name in due {
            self.with_writer(|conn, cache| self.checkpoint_if_due(conn, cache, &name))?;
        }
        Ok(())
    }

    pub(super) fn import_log_in(
        &self,
        org_id: &str,
        header: &cairn_core::bundle::BundleHeader,
        checkpoint_note: &str,
        entries: &mut dyn Iterator<Item = Result<LogEntry, String>>,
        withheld_ids: &std::collections::HashMap<u64, String>,
    ) -> Result<u64, ImportError> {
        self.with_writer(|conn, cache| {
            let mut tx = conn.client.transaction().context("starting the import")?;
            let db = Db {
                client: &mut tx,
                statements: &mut conn.statements,
            };
            let mut pg_tx = PgTx::begin(db, HashSet::from([org_id.to_owned()]), cache)?;
            let count = self.engine().import(
                &mut pg_tx,
                org_id,
                header,
                checkpoint_note,
                entries,
                withheld_ids,
            )?;
            pg_tx.flush()?;
            let (docs, all_docs) = pg_tx.take_handed();
            drop(pg_tx);
            tx.commit().context("committing the import")?;
            self.search_indexer.hand(docs, all_docs);
            Ok(count)
        })
    }
}
