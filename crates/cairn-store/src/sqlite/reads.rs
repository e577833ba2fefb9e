//! The embedded store's read queries over the log: entries in order,
//! sessions (one, its steps, a filtered listing), steps by trace id or
//! status, and operational records by type, session, agent or id. Each runs
//! on a pooled read-only connection; none touches the writer.

use super::SqliteStore;
use super::rows::{blob, entry_from_row, session_rowids, step_from_row, successor, true_end};
use crate::engine::{
    CHAIN_LINK_COLUMN, LookedUpBy, STEP_COLUMN_COUNT, STEP_COLUMNS, StepReading,
    agent_keys_from_views, blob_hash, hash_of, log_entries_query, op_from_view, op_looked_up,
    org_range, row_id, row_id_after, seq_of_row, withheld_or_looked_up,
};
use crate::listing::{self, ListParam};
use crate::{
    DbContext, SessionFilter, SessionInfo, SessionSummary, StoreError, StoredEntry, StoredStep,
};
use cairn_core::log::{KeyRegistration, LogEntry, LogRecord, OpRecord};
use cairn_core::{Hash, Timestamp};
use rusqlite::{OptionalExtension, params};

/// One agent's key records after a rowid (`?3`), in log order, at most
/// `?4` (`?2`: the agent).
pub(super) const AGENT_KEY_RECORDS: &str = "SELECT e.seq, e.type, e.view FROM entries e
     WHERE e.org = ?1 AND e.type IN ('key-registration', 'key-revocation')
       AND e.agent_id = ?2 AND e.id > ?3 ORDER BY e.id LIMIT ?4";

/// An org's key records after a rowid (`?3`), in log order, at most `?4`
/// (`?2` is NULL).
pub(super) const ORG_KEY_RECORDS_PAGE: &str = "SELECT e.seq, e.type, e.view FROM entries e
     WHERE e.org = ?1 AND e.type IN ('key-registration', 'key-revocation')
       AND ?2 IS NULL AND e.id > ?3 ORDER BY e.id LIMIT ?4";

impl SqliteStore {
    pub(super) fn read_log_in(
        &self,
        org_id: &str,
        from: u64,
        to: u64,
        visit: &mut dyn FnMut(StoredEntry) -> bool,
    ) -> Result<(), StoreError> {
        self.read_log_rows(org_id, from, to, StepReading::Record, &mut |stored, _| {
            visit(stored)
        })
    }

    pub(super) fn read_log_for_verification_in(
        &self,
        org_id: &str,
        from: u64,
        to: u64,
        visit: &mut dyn FnMut(StoredEntry, Option<Hash>) -> bool,
    ) -> Result<(), StoreError> {
        self.read_log_rows(org_id, from, to, StepReading::Verification, visit)
    }

    /// Log entries `from..to` in seq order, steps read as `how` says.
    fn read_log_rows(
        &self,
        org_id: &str,
        from: u64,
        to: u64,
        how: StepReading,
        visit: &mut dyn FnMut(StoredEntry, Option<Hash>) -> bool,
    ) -> Result<(), StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(());
            };
            let sql = log_entries_query("WHERE e.id >= ?1 AND e.id < ?2 ORDER BY e.id");
            let (lo, hi) = org_range(org);
            let mut stmt = c.prepare_cached(&sql).context("reading the log")?;
            let mut rows = stmt
                .query(params![row_id(org, from).max(lo), row_id(org, to).min(hi)])
                .context("reading the log")?;
            while let Some(row) = rows.next().context("reading the log")? {
                let (stored, digest) = stored_entry(row, how)?;
                if !visit(stored, digest) {
                    break;
                }
            }
            Ok(())
        })
    }

    pub(super) fn read_entries_in(
        &self,
        org_id: &str,
        seqs: &[u64],
        visit: &mut dyn FnMut(StoredEntry) -> bool,
    ) -> Result<(), StoreError> {
        if seqs.is_empty() {
            return Ok(());
        }
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(());
            };
            // In process, a lookup per entry costs what one query of them
            // all would.
            let sql = log_entries_query("WHERE e.id = ?1");
            let mut stmt = c.prepare_cached(&sql).context("reading log entries")?;
            for &seq in seqs.iter().filter(|&&seq| seq < 1 << 40) {
                let mut rows = stmt
                    .query([row_id(org, seq)])
                    .context("reading log entries")?;
                let Some(row) = rows.next().context("reading log entries")? else {
                    continue;
                };
                if !visit(stored_entry(row, StepReading::Record)?.0) {
                    break;
                }
            }
            Ok(())
        })
    }

    pub(super) fn session_in(
        &self,
        org_id: &str,
        session_id: &str,
    ) -> Result<Option<SessionInfo>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(None);
            };
            let row: Option<(i64, i64, Vec<u8>)> = c
                .prepare_cached("SELECT sid, start_seq, genesis FROM sessions WHERE org = ?1 AND session_id = ?2")
                .and_then(|mut s| {
                    s.query_row(params![org, session_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                        .optional()
                })
                .context("reading a session")?;
            let Some((sid, start_seq, genesis)) = row else {
                return Ok(None);
            };
            let view: String = c
                .query_row("SELECT view FROM entries WHERE id = ?1", params![row_id(org, start_seq as u64)], |r| {
                    r.get(0)
                })
                .context("reading a session start")?;
            let OpRecord::SessionStart(header) = op_from_view(start_seq as u64, "session-start", &view)? else {
                return Err(StoreError::Corrupt("session start record has another type".into()));
            };
            let last = true_end(c, org, sid)?.map(|e| (e.index, e.hash));
            let seal_row: Option<(i64, String)> = c
                .query_row(
                    "SELECT id, view FROM entries WHERE sid = ?1 AND type = 'seal'",
                    params![sid],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .context("reading a seal")?;
            let (seal, seal_seq) = match seal_row {
                None => (None, None),
                Some((id, v)) => match op_from_view(0, "seal", &v)? {
                    OpRecord::Seal(s) => (Some(s), Some(seq_of_row(id))),
                    _ => return Err(StoreError::Corrupt("seal record does not parse".into())),
                },
            };
            let (step_count, head) = match last {
                Some((index, hash)) => (index as u64 + 1, blob_hash(hash)?),
                None => (0, blob_hash(genesis)?),
            };
            // Only a whole number the row can be one past: a head row
            // edited to another type or past the range is no claim (the
            // org's verification names it), not a read error.
            let head_row_steps: Option<i64> = c
                .prepare_cached(
                    "SELECT last_index + 1 FROM session_heads
                     WHERE sid = ?1 AND typeof(last_index) = 'integer'
                       AND last_index BETWEEN 0 AND 9223372036854775806",
                )
                .and_then(|mut s| s.query_row(params![sid], |r| r.get(0)).optional())
                .context("reading a session head")?;
            Ok(Some(SessionInfo {
                header,
                start_seq: start_seq as u64,
                step_count,
                head,
                seal,
                seal_seq,
                head_row_steps: head_row_steps.map(|n| n.max(0) as u64),
            }))
        })
    }

    pub(super) fn read_session_in(
        &self,
        org_id: &str,
        session_id: &str,
        visit: &mut dyn FnMut(StoredStep) -> bool,
    ) -> Result<(), StoreError> {
        self.read(|c| {
            let Some((org, sid)) = session_key(c, org_id, session_id)? else {
                return Ok(());
            };
            let sql = format!(
                "SELECT {STEP_COLUMNS} FROM entries e JOIN orgs o ON o.org = e.org
                 JOIN sessions s ON s.sid = e.sid WHERE e.id = ?1"
            );
            let mut stmt = c.prepare_cached(&sql).context("reading a session")?;
            for id in session_rowids(c, org, sid)? {
                let mut rows = stmt.query([id]).context("reading a session")?;
                if let Some(row) = rows.next().context("reading a session")?
                    && !visit(step_from_row(row)?)
                {
                    break;
                }
            }
            Ok(())
        })
    }

    pub(super) fn session_seqs_in(
        &self,
        org_id: &str,
        session_id: &str,
    ) -> Result<Option<Vec<u64>>, StoreError> {
        self.read(|c| {
            let Some((org, sid)) = session_key(c, org_id, session_id)? else {
                return Ok(None);
            };
            let ids = session_rowids(c, org, sid)?;
            Ok(Some(ids.into_iter().map(seq_of_row).collect()))
        })
    }

    pub(super) fn turn_seqs_in(
        &self,
        org_id: &str,
        session_id: &str,
        turn_id: &str,
    ) -> Result<Option<Vec<u64>>, StoreError> {
        self.read(|c| {
            let Some((_, sid)) = session_key(c, org_id, session_id)? else {
                return Ok(None);
            };
            let mut stmt = c.prepare_cached(TURN_STEPS).context("reading a turn")?;
            let ids = stmt
                .query_map(params![sid, turn_id], |r| r.get::<_, i64>(0))
                .context("reading a turn")?
                .collect::<Result<Vec<_>, _>>()
                .context("reading a turn")?;
            Ok(Some(ids.into_iter().map(seq_of_row).collect()))
        })
    }

    /// The turn places of a session's steps at `seqs`: one look-up of
    /// two columns by rowid each, the session's keys found once.
    pub(super) fn turn_places_at_in(
        &self,
        org_id: &str,
        session_id: &str,
        seqs: &[u64],
    ) -> Result<Vec<crate::TurnPlace>, StoreError> {
        self.read(|c| {
            let Some((org, sid)) = session_key(c, org_id, session_id)? else {
                return Ok(Vec::new());
            };
            let mut stmt = c
                .prepare_cached(
                    "SELECT turn_id, turn_step FROM entries WHERE id = ?1 AND sid = ?2 AND type = 'step'",
                )
                .context("reading a session's turns")?;
            let mut places = Vec::with_capacity(seqs.len());
            for &seq in seqs {
                let place = stmt
                    .query_row(params![row_id(org, seq), sid], |r| {
                        Ok((r.get::<_, Option<String>>(0)?, r.get::<_, Option<i64>>(1)?))
                    })
                    .optional()
                    .context("reading a session's turns")?;
                if let Some((turn_id, turn_step)) = place {
                    places.push(crate::TurnPlace {
                        seq,
                        turn_id,
                        // As the step's record reads it.
                        turn_step: crate::engine::to_u64(turn_step),
                    });
                }
            }
            Ok(places)
        })
    }

    pub(super) fn visit_steps_at_in(
        &self,
        org_id: &str,
        session_id: &str,
        seqs: &[u64],
        visit: &mut dyn FnMut(StoredStep) -> bool,
    ) -> Result<(), StoreError> {
        self.read(|c| {
            let Some((org, sid)) = session_key(c, org_id, session_id)? else {
                return Ok(());
            };
            let sql = format!(
                "SELECT {STEP_COLUMNS} FROM entries e JOIN orgs o ON o.org = e.org
                 JOIN sessions s ON s.sid = e.sid WHERE e.id = ?1 AND e.sid = ?2 AND e.type = 'step'"
            );
            let mut stmt = c.prepare_cached(&sql).context("reading a session")?;
            for &seq in seqs {
                let mut rows = stmt
                    .query(params![row_id(org, seq), sid])
                    .context("reading a session")?;
                if let Some(row) = rows.next().context("reading a session")?
                    && !visit(step_from_row(row)?)
                {
                    break;
                }
            }
            Ok(())
        })
    }

    pub(super) fn step_by_trace_in(
        &self,
        org_id: &str,
        trace_id: &str,
    ) -> Result<Option<StoredStep>, StoreError> {
        Ok(self.steps_by_trace_in(org_id, &[trace_id])?.pop())
    }

    /// The steps of these trace ids that exist, in one read: the org
    /// looked up once and one prepared look-up run for each id (the
    /// trait's default had read each id on its own, the org looked up
    /// again for every one: a review queue listing 10,000 steps took twice
    /// as long as reading them in ranges).
    pub(super) fn steps_by_trace_in(
        &self,
        org_id: &str,
        trace_ids: &[impl AsRef<str>],
    ) -> Result<Vec<StoredStep>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            let sql = format!(
                "SELECT {STEP_COLUMNS} FROM entries e JOIN orgs o ON o.org = e.org JOIN sessions s ON s.sid = e.sid
                 WHERE e.org = ?1 AND e.trace_id = ?2 AND e.type = 'step'"
            );
            let mut stmt = c.prepare_cached(&sql).context("looking up steps")?;
            let mut found = Vec::new();
            for trace_id in trace_ids {
                let mut rows = stmt
                    .query(params![org, trace_id.as_ref()])
                    .context("looking up steps")?;
                if let Some(row) = rows.next().context("looking up steps")? {
                    found.push(step_from_row(row)?);
                }
            }
            Ok(found)
        })
    }

    pub(super) fn list_sessions_in(
        &self,
        org_id: &str,
        filter: &SessionFilter,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            let (sql, params) =
                listing::session_listing_query(org, filter, limit, |n| format!("?{n}"));
            let params: Vec<Box<dyn rusqlite::ToSql>> =
                params.into_iter().map(ListParam::into_sqlite).collect();
            let mut stmt = c.prepare_cached(&sql).context("listing sessions")?;
            let rows: Vec<(String, String, i64, i64, bool)> = stmt
                .query_map(rusqlite::params_from_iter(params.iter()), |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .context("listing sessions")?
                .collect::<Result<_, _>>()
                .context("listing sessions")?;
            let mut out = Vec::with_capacity(rows.len());
            for (session_id, agent_id, started, sid, sealed) in rows {
                // Counted from the log (the head row is only a hint).
                let end = true_end(c, org, sid)?;
                let first = match &end {
                    Some(_) => successor(c, sid, None)?,
                    None => None,
                };
                out.push(SessionSummary {
                    session_id,
                    agent_id,
                    step_count: end.as_ref().map_or(0, |e| e.index as u64 + 1),
                    first_step_at: first.and_then(|e| Timestamp::from_micros(e.created_at)),
                    last_step_at: end.and_then(|e| Timestamp::from_micros(e.created_at)),
                    started_at: Timestamp::from_micros(started).unwrap_or_default(),
                    sealed,
                });
            }
            Ok(out)
        })
    }

    pub(super) fn flagged_trace_ids_in(
        &self,
        org_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, String)>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            let (_, hi) = org_range(org);
            let mut stmt = c
                .prepare_cached(
                    "SELECT seq, trace_id FROM entries
                     WHERE org = ?1 AND status = 'flagged' AND id >= ?2 AND id < ?3
                     ORDER BY id LIMIT ?4",
                )
                .context("listing flagged steps")?;
            let rows = stmt
                .query_map(
                    params![
                        org,
                        row_id(org, from),
                        hi,
                        limit.min(i64::MAX as usize) as i64
                    ],
                    |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
                )
                .context("listing flagged steps")?;
            let mut out = Vec::new();
            for row in rows {
                let (seq, trace_id) = row.context("listing flagged steps")?;
                out.push((seq as u64, trace_id));
            }
            Ok(out)
        })
    }

    pub(super) fn op_records_in(
        &self,
        org_id: &str,
        entry_type: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, OpRecord)>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            let mut stmt = c
                .prepare_cached(
                    "SELECT seq, view FROM entries WHERE org = ?1 AND type = ?2 AND type <> 'step'
                     AND (view IS NOT NULL OR type <> 'signed-trace')
                     AND seq >= ?3 ORDER BY id LIMIT ?4",
                )
                .context("listing records")?;
            let rows = stmt
                .query_map(
                    params![
                        org,
                        entry_type,
                        from as i64,
                        limit.min(i64::MAX as usize) as i64
                    ],
                    |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
                )
                .context("listing records")?;
            let mut out = Vec::new();
            for row in rows {
                let (seq, view) = row.context("listing records")?;
                out.push((seq as u64, op_from_view(seq as u64, entry_type, &view)?));
            }
            Ok(out)
        })
    }

    pub(super) fn session_records_in(
        &self,
        org_id: &str,
        session_id: &str,
        visit: &mut dyn FnMut(u64, OpRecord) -> bool,
    ) -> Result<(), StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(());
            };
            // The records' ids first (the index on (sid, type) does not
            // give them in log order, and sorting whole rows would read
            // every record before the first is visited), then each record.
            let ids: Vec<i64> = c
                .prepare_cached(
                    "SELECT e.id FROM sessions s
                     JOIN entries e ON e.sid = s.sid AND e.type <> 'step'
                          AND (e.view IS NOT NULL OR e.type <> 'signed-trace')
                     WHERE s.org = ?1 AND s.session_id = ?2 ORDER BY e.id",
                )
                .and_then(|mut stmt| {
                    stmt.query_map(params![org, session_id], |r| r.get(0))?
                        .collect::<Result<_, _>>()
                })
                .context("reading a session's records")?;
            let mut stmt = c
                .prepare_cached("SELECT seq, type, view FROM entries WHERE id = ?1")
                .context("reading a session's records")?;
            for id in ids {
                let (seq, kind, view): (i64, String, String) = stmt
                    .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .context("reading a session's records")?;
                let record =
                    op_looked_up(seq as u64, &kind, &view, LookedUpBy::Session(session_id))?;
                if !visit(seq as u64, record) {
                    break;
                }
            }
            Ok(())
        })
    }

    /// Key records of an org (of one agent), after position `after`, at
    /// most `limit`, in log order: through `entries_key_records` (one
    /// agent's) or `entries_key_records_in_order` (the org's), each in
    /// rowid order within the org.
    pub(super) fn key_records_in(
        &self,
        org_id: &str,
        agent_id: Option<&str>,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, OpRecord)>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            let above = row_id_after(org, after);
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let sql = if agent_id.is_some() {
                AGENT_KEY_RECORDS
            } else {
                ORG_KEY_RECORDS_PAGE
            };
            let mut stmt = c.prepare_cached(sql).context("reading key records")?;
            let rows: Vec<(i64, String, String)> = stmt
                .query_map(params![org, agent_id, above, limit], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .context("reading key records")?
                .collect::<Result<_, _>>()
                .context("reading key records")?;
            rows.into_iter()
                .map(|(seq, t, view)| {
                    let by = LookedUpBy::Agent(agent_id);
                    Ok((seq as u64, op_looked_up(seq as u64, &t, &view, by)?))
                })
                .collect()
        })
    }

    pub(super) fn op_by_id_in(
        &self,
        org_id: &str,
        id: &str,
    ) -> Result<Option<(u64, Option<OpRecord>)>, StoreError> {
        let found: Option<(i64, String, Option<String>)> = self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(None);
            };
            c.prepare_cached(
                "SELECT e.seq, e.type, e.view FROM entries e
                 WHERE e.org = ?1 AND e.trace_id = ?2 AND e.type <> 'step'",
            )
            .and_then(|mut s| {
                s.query_row(params![org, id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()
            })
            .context("looking up a record by id")
        })?;
        found
            .map(|(seq, entry_type, view)| {
                let by = LookedUpBy::Id(id);
                Ok((
                    seq as u64,
                    withheld_or_looked_up(seq as u64, &entry_type, view.as_deref(), by)?,
                ))
            })
            .transpose()
    }

    pub(super) fn agent_keys_in(&self, org_id: &str) -> Result<Vec<KeyRegistration>, StoreError> {
        let views = self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            let mut stmt = c
                .prepare_cached(
                    // The partial index's own condition, so that SQLite
                    // uses it (it would scan the whole log otherwise).
                    "SELECT e.seq, e.view FROM entries e
                     WHERE e.org = ?1 AND e.type IN ('key-registration', 'key-revocation')
                       AND e.type = 'key-registration' ORDER BY e.id",
                )
                .context("reading agent keys")?;
            let rows = stmt
                .query_map([org], |r| {
                    Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?))
                })
                .context("reading agent keys")?;
            rows.collect::<Result<Vec<_>, _>>()
                .context("reading agent keys")
        })?;
        Ok(agent_keys_from_views(views)?
            .into_iter()
            .map(|(_, reg)| reg)
            .collect())
    }
}

/// A log entry as stored, from a row of the log's columns
/// (`STEP_COLUMNS`, then type, view and leaf hash; a row that does not
/// parse is handed over as such, not as an error), its step read as `how`
/// says (with the step's recomputed digest for a verifier).
fn stored_entry(
    row: &rusqlite::Row<'_>,
    how: StepReading,
) -> Result<(StoredEntry, Option<Hash>), StoreError> {
    let n = STEP_COLUMN_COUNT;
    let seq: i64 = row.get(0).context("reading the log")?;
    let leaf = blob(row, n + 2).context("reading the log")?;
    let (entry, digest) = match entry_from_row(row, n, how) {
        Ok((entry, digest)) => (Ok(entry), digest),
        Err(e) => (Err(e.to_string()), None),
    };
    let link = n + CHAIN_LINK_COLUMN;
    let sid: Option<i64> = row.get(link).context("reading the log")?;
    let prev: Option<i64> = row.get(link + 1).context("reading the log")?;
    let is_step = matches!(
        &entry,
        Ok(LogEntry {
            record: LogRecord::Step(_),
            ..
        })
    );
    let stored = StoredEntry {
        seq: seq as u64,
        leaf: hash_of(leaf).unwrap_or(Hash::ZERO),
        chain_link: is_step.then(|| (sid.unwrap_or(-1), prev.map(|p| p as u64))),
        entry,
    };
    Ok((stored, digest))
}

/// A turn's highest step number, from `entries_by_turn` (one seek to the
/// end of the turn's part of the index: `turn_id = ?` implies the index's
/// `turn_id IS NOT NULL`).
pub(super) const TURN_HIGHEST: &str = "SELECT MAX(turn_step) FROM entries
 WHERE sid = ?1 AND turn_id = ?2 AND type = 'step'";

/// The rows of a turn's steps, in log order, from `entries_by_turn`.
pub(super) const TURN_STEPS: &str =
    "SELECT id FROM entries WHERE sid = ?1 AND turn_id = ?2 AND type = 'step' ORDER BY id";

/// Whether a step of a turn holds a number, from `entries_by_turn` (one
/// seek).
pub(super) const TURN_STEP_TAKEN: &str = "SELECT EXISTS (SELECT 1 FROM entries
 WHERE sid = ?1 AND turn_id = ?2 AND turn_step = ?3 AND type = 'step')";

/// The org and session keys of a session, if it exists.
fn session_key(
    c: &rusqlite::Connection,
    org_id: &str,
    session_id: &str,
) -> Result<Option<(i64, i64)>, StoreError> {
    let Some(org) = SqliteStore::org_id_of(c, org_id)? else {
        return Ok(None);
    };
    c.prepare_cached("SELECT s.org, s.sid FROM sessions s WHERE s.org = ?1 AND s.session_id = ?2")
        .and_then(|mut s| {
            s.query_row(params![org, session_id], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .context("reading a session")
}

#[cfg(test)]
mod tests {
    use super::super::{SqliteOptions, SqliteStore};
    use super::{TURN_HIGHEST, TURN_STEP_TAKEN, TURN_STEPS};
    use rusqlite::types::Value;

    /// A turn is numbered from the index of turns, never by scanning the
    /// log or walking the session (which made every turn linear in its
    /// session: 4.6 s in a session of 330,000 steps).
    #[test]
    fn turns_are_numbered_without_scanning_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let writer = store.writer.lock().unwrap();
        let values = [
            Value::Integer(1),
            Value::Text("t".into()),
            Value::Integer(0),
        ];
        for query in [TURN_HIGHEST, TURN_STEPS, TURN_STEP_TAKEN] {
            let mut stmt = writer
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {query}"))
                .unwrap();
            let plan: Vec<String> = stmt
                .query_map(
                    rusqlite::params_from_iter(&values[..stmt.parameter_count()]),
                    |r| r.get(3),
                )
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert!(
                plan.iter().any(|step| step.contains("entries_by_turn")),
                "{plan:?}"
            );
            assert!(
                !plan
                    .iter()
                    .any(|step| step.starts_with("SCAN") && step != "SCAN CONSTANT ROW"),
                "{plan:?}"
            );
        }
    }
}
