//! The PostgreSQL store's read queries over the log: entries in order
//! (paged), sessions (one, its steps, a filtered listing), full-text
//! search, steps by trace id or status, and operational records by type,
//! session, agent or id. Each runs on a pooled connection; none touches the
//! writer.

use super::connection::{Db, col, i64_of, u64_of};
use super::rows::{
    ENTRIES_BY_ID, LOG_PAGE, ListedEnds, PAGE_BYTES, STEP_BY_TRACE, STEPS_BY_ID, STEPS_BY_TRACE,
    STEPS_IN_ORDER, entry_from_row, listed_ends, session_ids, step_from_row, true_end,
};
use super::{PAGE, PgStore};
use crate::engine::{
    CHAIN_LINK_COLUMN, LookedUpBy, STEP_COLUMN_COUNT, StepReading, agent_keys_from_views,
    blob_hash, hash_of, op_from_view, op_looked_up, org_range, row_id, row_id_after, seq_of_row,
    withheld_or_looked_up,
};
use crate::listing::{self, ListParam};
use crate::{
    SessionFilter, SessionInfo, SessionSummary, StepFilter, StoreError, StoredEntry, StoredStep,
};
use cairn_core::log::{KeyRegistration, LogEntry, LogRecord, OpRecord};
use cairn_core::{Hash, Timestamp};
use postgres::types::ToSql;

/// Key records of org `$1` (of agent `$2`, if not NULL) after row id `$3`,
/// in log order, at most `$4`.
pub(super) const KEY_RECORDS_PAGE: &str = "SELECT e.seq, e.type, e.view FROM entries e
     WHERE e.org = $1 AND e.type IN ('key-registration', 'key-revocation')
       AND ($2::text IS NULL OR e.agent_id = $2) AND e.id > $3 ORDER BY e.id LIMIT $4";

/// An org's key records in log order within a range of rowids, a page
/// at a time, as the writer brings its cache of the org's keys up to date
/// (the partial index `entries_key_records_in_order`).
pub(super) const KEY_RECORDS_BETWEEN: &str = "SELECT seq, type, view FROM entries
     WHERE org = $1 AND type IN ('key-registration', 'key-revocation') AND id >= $2 AND id < $3
     ORDER BY id LIMIT $4";

impl PgStore {
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

    /// Log entries `from..to` in seq order, a page at a time, steps read as
    /// `how` says.
    fn read_log_rows(
        &self,
        org_id: &str,
        from: u64,
        to: u64,
        how: StepReading,
        visit: &mut dyn FnMut(StoredEntry, Option<Hash>) -> bool,
    ) -> Result<(), StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(());
            };
            let (lo, hi) = org_range(org);
            let end = row_id(org, to).min(hi);
            let mut next = row_id(org, from).max(lo);
            while next < end {
                let rows = db.query(
                    &LOG_PAGE,
                    &[&next, &end, &PAGE, &PAGE_BYTES],
                    "reading the log",
                )?;
                let Some(last) = rows.last() else {
                    break;
                };
                next = col::<i64>(last, 0)? + lo + 1;
                for row in &rows {
                    let (stored, digest) = stored_entry(row, how)?;
                    if !visit(stored, digest) {
                        return Ok(());
                    }
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
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(());
            };
            let ids: Vec<i64> = seqs
                .iter()
                .filter(|&&seq| seq < 1 << 40)
                .map(|&seq| row_id(org, seq))
                .collect();
            // A page of at most PAGE_BYTES of text at a time, then the
            // ids after its last.
            let mut left = ids.as_slice();
            while !left.is_empty() {
                let rows =
                    db.query(&ENTRIES_BY_ID, &[&left, &PAGE_BYTES], "reading log entries")?;
                let Some(last) = rows.last() else {
                    break;
                };
                let last: i64 = col(last, 0)?;
                let last = row_id(org, u64::try_from(last).unwrap_or(u64::MAX));
                left = &left[left.partition_point(|&id| id <= last)..];
                for row in &rows {
                    if !visit(stored_entry(row, StepReading::Record)?.0) {
                        return Ok(());
                    }
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
        if !storable(session_id) {
            return Ok(None);
        }
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(None);
            };
            let Some(row) = db.query_opt(
                "SELECT s.start_seq, s.genesis, start.view, s.org, s.sid,
                   seal.view, seal.id,
                   CASE WHEN h.last_index BETWEEN 0 AND 9223372036854775806
                        THEN h.last_index + 1 END
                 FROM sessions s
                 JOIN entries start ON start.id = ((s.org << 40) | s.start_seq)
                 LEFT JOIN entries seal ON seal.sid = s.sid AND seal.type = 'seal'
                 LEFT JOIN session_heads h ON h.sid = s.sid
                 WHERE s.org = $1 AND s.session_id = $2",
                &[&org, &session_id],
                "reading a session",
            )?
            else {
                return Ok(None);
            };
            let start_seq: i64 = col(&row, 0)?;
            let OpRecord::SessionStart(header) =
                op_from_view(u64_of(start_seq), "session-start", &col::<String>(&row, 2)?)?
            else {
                return Err(StoreError::Corrupt(
                    "session start record has another type".into(),
                ));
            };
            let seal = match col::<Option<String>>(&row, 5)? {
                None => None,
                Some(view) => match op_from_view(0, "seal", &view)? {
                    OpRecord::Seal(seal) => Some(seal),
                    _ => return Err(StoreError::Corrupt("seal record does not parse".into())),
                },
            };
            let seal_seq = col::<Option<i64>>(&row, 6)?.map(seq_of_row);
            let genesis: Vec<u8> = col(&row, 1)?;
            let (step_count, head) = match true_end(db, col(&row, 3)?, col(&row, 4)?)? {
                Some(end) => (u64_of(end.index) + 1, blob_hash(end.hash)?),
                None => (0, blob_hash(genesis)?),
            };
            Ok(Some(SessionInfo {
                header,
                start_seq: u64_of(start_seq),
                step_count,
                head,
                seal,
                seal_seq,
                head_row_steps: col::<Option<i64>>(&row, 7)?.map(u64_of),
            }))
        })
    }

    pub(super) fn read_session_in(
        &self,
        org_id: &str,
        session_id: &str,
        visit: &mut dyn FnMut(StoredStep) -> bool,
    ) -> Result<(), StoreError> {
        // The last step given to `visit` (its seq): a read retried on a new
        // connection (`read`) resumes after it instead of giving steps
        // again (a replay would otherwise hold some twice).
        let mut delivered: Option<u64> = None;
        self.read(|db| {
            let Some((org, sid)) = session_key(db, org_id, session_id)? else {
                return Ok(());
            };
            let ids = session_ids(db, org, sid)?;
            let resume =
                delivered.map_or(0, |last| ids.partition_point(|&id| id <= row_id(org, last)));
            for chunk in ids.get(resume..).unwrap_or_default().chunks(SESSION_PAGE) {
                if !visit_steps_by_id(db, org, sid, chunk, &mut delivered, visit)? {
                    return Ok(());
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
        self.read(|db| {
            let Some((org, sid)) = session_key(db, org_id, session_id)? else {
                return Ok(None);
            };
            let ids = session_ids(db, org, sid)?;
            Ok(Some(ids.into_iter().map(seq_of_row).collect()))
        })
    }

    pub(super) fn turn_seqs_in(
        &self,
        org_id: &str,
        session_id: &str,
        turn_id: &str,
    ) -> Result<Option<Vec<u64>>, StoreError> {
        self.read(|db| {
            let Some((_, sid)) = session_key(db, org_id, session_id)? else {
                return Ok(None);
            };
            if !storable(turn_id) {
                // The session holds no such turn.
                return Ok(Some(Vec::new()));
            }
            let rows = db.query(
                "SELECT id FROM entries WHERE sid = $1 AND turn_id = $2 AND type = 'step' ORDER BY id",
                &[&sid, &turn_id],
                "reading a turn",
            )?;
            let ids = rows
                .iter()
                .map(|row| col::<i64>(row, 0))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Some(ids.into_iter().map(seq_of_row).collect()))
        })
    }

    /// The turn places of a session's steps at `seqs`: one query of two
    /// columns for the chunk.
    pub(super) fn turn_places_at_in(
        &self,
        org_id: &str,
        session_id: &str,
        seqs: &[u64],
    ) -> Result<Vec<crate::TurnPlace>, StoreError> {
        self.read(|db| {
            let Some((org, sid)) = session_key(db, org_id, session_id)? else {
                return Ok(Vec::new());
            };
            let ids: Vec<i64> = seqs.iter().map(|&seq| row_id(org, seq)).collect();
            let rows = db.query(
                "SELECT seq, turn_id, turn_step FROM entries
                  WHERE id = ANY($1) AND sid = $2 AND type = 'step' ORDER BY id",
                &[&ids, &sid],
                "reading a session's turns",
            )?;
            rows.iter()
                .map(|row| {
                    Ok(crate::TurnPlace {
                        seq: u64_of(col(row, 0)?),
                        turn_id: col(row, 1)?,
                        // As the step's record reads it.
                        turn_step: crate::engine::to_u64(col(row, 2)?),
                    })
                })
                .collect()
        })
    }

    pub(super) fn visit_steps_at_in(
        &self,
        org_id: &str,
        session_id: &str,
        seqs: &[u64],
        visit: &mut dyn FnMut(StoredStep) -> bool,
    ) -> Result<(), StoreError> {
        // How many of `seqs` were handled (given to `visit`, or found
        // missing before one that was): a read retried on a new connection
        // (`read`) goes on after them, never giving a step twice.
        let mut handled = 0usize;
        self.read(|db| {
            let Some((org, sid)) = session_key(db, org_id, session_id)? else {
                return Ok(());
            };
            let ids: Vec<i64> = seqs
                .get(handled..)
                .unwrap_or_default()
                .iter()
                .map(|&seq| row_id(org, seq))
                .collect();
            visit_steps_in_order(db, sid, &ids, &mut handled, visit)
        })
    }

    pub(super) fn step_by_trace_in(
        &self,
        org_id: &str,
        trace_id: &str,
    ) -> Result<Option<StoredStep>, StoreError> {
        if !storable(trace_id) {
            return Ok(None);
        }
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(None);
            };
            db.query_opt(&STEP_BY_TRACE, &[&org, &trace_id], "looking up a step")?
                .map(|row| step_from_row(&row))
                .transpose()
        })
    }

    pub(super) fn steps_by_trace_in(
        &self,
        org_id: &str,
        trace_ids: &[String],
    ) -> Result<Vec<StoredStep>, StoreError> {
        let trace_ids: Vec<&str> = trace_ids
            .iter()
            .map(String::as_str)
            .filter(|id| storable(id))
            .collect();
        if trace_ids.is_empty() {
            return Ok(Vec::new());
        }
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            db.query(&STEPS_BY_TRACE, &[&org, &trace_ids], "looking up steps")?
                .iter()
                .map(step_from_row)
                .collect()
        })
    }

    pub(super) fn list_sessions_in(
        &self,
        org_id: &str,
        filter: &SessionFilter,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            let (sql, params) =
                listing::session_listing_query(org, filter, limit, |n| format!("${n}"));
            let params: Vec<Box<dyn ToSql + Sync>> =
                params.into_iter().map(ListParam::into_pg).collect();
            let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref()).collect();
            let rows = db.query_built(&sql, &refs, "listing sessions")?;
            let sids = rows
                .iter()
                .map(|row| col::<i64>(row, 3))
                .collect::<Result<Vec<i64>, StoreError>>()?;
            // Counted from the log (the head row is only a hint), for the
            // whole page at once.
            let mut ends = listed_ends(db, org, &sids)?;
            let mut out = Vec::with_capacity(rows.len());
            for (row, sid) in rows.iter().zip(sids) {
                let (end, first) = match ends.remove(&sid) {
                    Some(ListedEnds { last, first }) => (last, first),
                    None => (None, None),
                };
                out.push(SessionSummary {
                    session_id: col(row, 0)?,
                    agent_id: col(row, 1)?,
                    step_count: end.as_ref().map_or(0, |e| u64_of(e.index) + 1),
                    first_step_at: first.and_then(|e| Timestamp::from_micros(e.created_at)),
                    last_step_at: end.and_then(|e| Timestamp::from_micros(e.created_at)),
                    started_at: Timestamp::from_micros(col(row, 2)?).unwrap_or_default(),
                    sealed: col(row, 4)?,
                });
            }
            Ok(out)
        })
    }

    pub(super) fn full_text_search_in(
        &self,
        org_id: &str,
        query: &crate::fulltext::FullTextQuery,
        filter: &StepFilter,
        limit: usize,
    ) -> Result<Vec<(u64, f64)>, StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            // Documents of committed steps still queued (their batch's
            // server has not written them yet, or stopped first).
            super::search_queue::finish_org(db.client, org)?;
            let (sql, params) = listing::step_search_query(
                listing::Engine::Postgres,
                org,
                query.to_tsquery(),
                filter,
                limit,
                |n| format!("${n}"),
            );
            let params: Vec<Box<dyn ToSql + Sync>> =
                params.into_iter().map(ListParam::into_pg).collect();
            let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref()).collect();
            db.query_built(&sql, &refs, "searching the full-text index")?
                .iter()
                .map(|row| Ok((u64_of(col::<i64>(row, 0)?), col::<f64>(row, 1)?)))
                .collect()
        })
    }

    pub(super) fn flagged_trace_ids_in(
        &self,
        org_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, String)>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            let (_, hi) = org_range(org);
            db.query(
                "SELECT seq, trace_id FROM entries
                 WHERE org = $1 AND status = 'flagged' AND id >= $2 AND id < $3
                 ORDER BY id LIMIT $4",
                &[&org, &row_id(org, from), &hi, &limit],
                "listing flagged steps",
            )?
            .iter()
            .map(|row| Ok((u64_of(col(row, 0)?), col::<String>(row, 1)?)))
            .collect()
        })
    }

    pub(super) fn op_records_in(
        &self,
        org_id: &str,
        entry_type: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, OpRecord)>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            db.query(
                "SELECT seq, view FROM entries WHERE org = $1 AND type = $2 AND type <> 'step'
                 AND (view IS NOT NULL OR type <> 'signed-trace')
                 AND seq >= $3 ORDER BY id LIMIT $4",
                &[&org, &entry_type, &i64_of(from), &limit],
                "listing records",
            )?
            .iter()
            .map(|row| {
                let seq = u64_of(col(row, 0)?);
                Ok((seq, op_from_view(seq, entry_type, &col::<String>(row, 1)?)?))
            })
            .collect()
        })
    }

    pub(super) fn session_records_in(
        &self,
        org_id: &str,
        session_id: &str,
        visit: &mut dyn FnMut(u64, OpRecord) -> bool,
    ) -> Result<(), StoreError> {
        if !storable(session_id) {
            return Ok(());
        }
        // The records' ids first (the index on (sid, type) does not give
        // them in log order), then the records a page at a time (a page is
        // held whole); the last record given to `visit` is where a read
        // retried on a new connection resumes.
        let mut after: i64 = -1;
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(());
            };
            let ids: Vec<i64> = db
                .query(
                    "SELECT e.id FROM sessions s
                     JOIN entries e ON e.sid = s.sid AND e.type <> 'step'
                          AND (e.view IS NOT NULL OR e.type <> 'signed-trace')
                     WHERE s.org = $1 AND s.session_id = $2 AND e.id > $3 ORDER BY e.id",
                    &[&org, &session_id, &after],
                    "reading a session's records",
                )?
                .iter()
                .map(|row| col(row, 0))
                .collect::<Result<_, _>>()?;
            for chunk in ids.chunks(256) {
                let chunk = chunk.to_vec();
                let rows = db.query(
                    "SELECT id, seq, type, view FROM entries WHERE id = ANY($1) ORDER BY id",
                    &[&chunk],
                    "reading a session's records",
                )?;
                for row in &rows {
                    let seq = u64_of(col(row, 1)?);
                    let (entry_type, view) = (col::<String>(row, 2)?, col::<String>(row, 3)?);
                    let by = LookedUpBy::Session(session_id);
                    let record = op_looked_up(seq, &entry_type, &view, by)?;
                    after = col(row, 0)?;
                    if !visit(seq, record) {
                        return Ok(());
                    }
                }
            }
            Ok(())
        })
    }

    /// Key records of an org (of one agent), after position `after`, at
    /// most `limit`, in log order: through `entries_key_records_in_order`
    /// (the org's, in id order) or `entries_key_records` (one agent's).
    pub(super) fn key_records_in(
        &self,
        org_id: &str,
        agent_id: Option<&str>,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, OpRecord)>, StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            let above = row_id_after(org, after);
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            db.query(
                KEY_RECORDS_PAGE,
                &[&org, &agent_id, &above, &limit],
                "reading key records",
            )?
            .iter()
            .map(|row| {
                let seq = u64_of(col(row, 0)?);
                Ok((
                    seq,
                    op_looked_up(
                        seq,
                        &col::<String>(row, 1)?,
                        &col::<String>(row, 2)?,
                        LookedUpBy::Agent(agent_id),
                    )?,
                ))
            })
            .collect()
        })
    }

    pub(super) fn op_by_id_in(
        &self,
        org_id: &str,
        id: &str,
    ) -> Result<Option<(u64, Option<OpRecord>)>, StoreError> {
        if !storable(id) {
            return Ok(None);
        }
        let found = self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(None);
            };
            db.query_opt(
                "SELECT e.seq, e.type, e.view FROM entries e
                 WHERE e.org = $1 AND e.trace_id = $2 AND e.type <> 'step'",
                &[&org, &id],
                "looking up a record by id",
            )?
            .map(|row| {
                Ok((
                    u64_of(col(&row, 0)?),
                    col::<String>(&row, 1)?,
                    col::<Option<String>>(&row, 2)?,
                ))
            })
            .transpose()
        })?;
        found
            .map(|(seq, entry_type, view)| {
                Ok((
                    seq,
                    withheld_or_looked_up(seq, &entry_type, view.as_deref(), LookedUpBy::Id(id))?,
                ))
            })
            .transpose()
    }

    pub(super) fn agent_keys_in(&self, org_id: &str) -> Result<Vec<KeyRegistration>, StoreError> {
        let views = self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            db.query(
                "SELECT e.seq, e.view FROM entries e
                 WHERE e.org = $1 AND e.type = 'key-registration' ORDER BY e.id",
                &[&org],
                "reading agent keys",
            )?
            .iter()
            .map(|r| Ok((u64_of(col(r, 0)?), col(r, 1)?)))
            .collect::<Result<Vec<(u64, String)>, StoreError>>()
        })?;
        Ok(agent_keys_from_views(views)?
            .into_iter()
            .map(|(_, reg)| reg)
            .collect())
    }
}

/// A log entry as stored, from a row of [`LOG_PAGE`]'s columns (a row that
/// does not parse is handed over as such, not as an error), its step read
/// as `how` says (with the step's recomputed digest for a verifier).
fn stored_entry(
    row: &postgres::Row,
    how: StepReading,
) -> Result<(StoredEntry, Option<Hash>), StoreError> {
    let n = STEP_COLUMN_COUNT;
    let seq: i64 = col(row, 0)?;
    let leaf: &[u8] = col(row, n + 2)?;
    let (entry, digest) = match entry_from_row(row, n, how) {
        Ok((entry, digest)) => (Ok(entry), digest),
        Err(e) => (Err(e.to_string()), None),
    };
    let link = n + CHAIN_LINK_COLUMN;
    let sid: Option<i64> = col(row, link)?;
    let prev: Option<i64> = col(row, link + 1)?;
    let is_step = matches!(
        &entry,
        Ok(LogEntry {
            record: LogRecord::Step(_),
            ..
        })
    );
    let stored = StoredEntry {
        seq: u64_of(seq),
        leaf: hash_of(leaf).unwrap_or(Hash::ZERO),
        chain_link: is_step.then(|| (sid.unwrap_or(-1), prev.map(u64_of))),
        entry,
    };
    Ok((stored, digest))
}

/// Rows of a session asked for at once (a page also ends past
/// [`PAGE_BYTES`] of stored text: a page is held whole before its steps
/// are visited, and a step may hold a megabyte of text).
const SESSION_PAGE: usize = 128;

/// Bytes of stored text after which a page of steps read by position
/// ([`crate::LedgerStore::visit_steps_at`]) ends: a streamed answer's
/// batch asks for up to 256 positions after small steps, and the steps at
/// them may each hold a megabyte; its page holds at most this and one
/// step.
const STEP_PAGE_BYTES: i64 = 4 * 1024 * 1024;

/// Visits the steps of session `sid` at `ids`, in the order of `ids`
/// (any order), each parsed only when the one before was taken, in pages
/// that end past [`STEP_PAGE_BYTES`] of stored text; `handled` counts the
/// ids dealt with so far, across a retried read (it is where `ids`
/// starts). An id that holds no step of the session is left out.
fn visit_steps_in_order(
    db: &mut Db<'_, postgres::Client>,
    sid: i64,
    ids: &[i64],
    handled: &mut usize,
    visit: &mut dyn FnMut(StoredStep) -> bool,
) -> Result<(), StoreError> {
    let base = *handled;
    let mut done = 0usize;
    while done < ids.len() {
        let rest = &ids[done..];
        let rows = db.query(
            &STEPS_IN_ORDER,
            &[&rest, &sid, &STEP_PAGE_BYTES],
            "reading a session",
        )?;
        if rows.is_empty() {
            // None of the rest holds a step of the session.
            *handled = base + ids.len();
            return Ok(());
        }
        for row in &rows {
            let place: i64 = col(row, STEP_COLUMN_COUNT)?;
            let place = usize::try_from(place).unwrap_or(0);
            let step = step_from_row(row)?;
            *handled = base + done + place;
            if !visit(step) {
                return Ok(());
            }
        }
        if let Some(last) = rows.last() {
            let last: i64 = col(last, STEP_COLUMN_COUNT)?;
            done += usize::try_from(last).unwrap_or(rest.len()).max(1);
        }
    }
    *handled = base + ids.len();
    Ok(())
}

/// Visits the steps of session `sid` at `ids` (ascending) in order, each
/// parsed only when the one before was taken, in pages that end past
/// [`PAGE_BYTES`] of stored text; `delivered` is the last step given
/// (across a retried read). False once `visit` asked to stop.
fn visit_steps_by_id(
    db: &mut Db<'_, postgres::Client>,
    org: i64,
    sid: i64,
    ids: &[i64],
    delivered: &mut Option<u64>,
    visit: &mut dyn FnMut(StoredStep) -> bool,
) -> Result<bool, StoreError> {
    let mut rest = ids;
    while !rest.is_empty() {
        let rows = db.query(
            &STEPS_BY_ID,
            &[&rest, &sid, &PAGE_BYTES],
            "reading a session",
        )?;
        let Some(last) = rows.last() else {
            return Ok(true);
        };
        let last_id = row_id(org, u64_of(col(last, 0)?));
        for row in &rows {
            let step = step_from_row(row)?;
            *delivered = Some(step.seq);
            if !visit(step) {
                return Ok(false);
            }
        }
        rest = &rest[rest.partition_point(|&id| id <= last_id)..];
    }
    Ok(true)
}

/// The org and session keys of a session, if it exists.
/// A turn's highest step number, from `entries_by_turn` (a backward
/// scan of the turn's part of the index that stops at its first row).
pub(super) const TURN_HIGHEST: &str = "SELECT MAX(turn_step) FROM entries
 WHERE sid = $1 AND turn_id = $2 AND type = 'step'";

/// Which of some numbers (an array) the steps of a turn hold: one probe
/// of `entries_by_turn` on all three columns per number, LATERAL with
/// LIMIT 1 so that no statistics can make it a join (a plain `turn_step =
/// ANY(...)` was planned, with the statistics a batch's own rows leave
/// stale, as a scan of the whole turn per query).
pub(super) const TURN_STEPS_TAKEN: &str = "SELECT n FROM unnest($3::bigint[]) AS n
 CROSS JOIN LATERAL (SELECT 1 FROM entries
   WHERE sid = $1 AND turn_id = $2 AND turn_step = n AND type = 'step' LIMIT 1) held";

/// Whether `name` holds text PostgreSQL can take (no NUL). A name that
/// does not names nothing stored: a read of it is answered as missing,
/// as the embedded store answers it, without a query the database would
/// refuse (and a `400` where SQLite answers `404`).
pub(super) fn storable(name: &str) -> bool {
    !name.contains('\0')
}

fn session_key<C: postgres::GenericClient>(
    db: &mut Db<'_, C>,
    org_id: &str,
    session_id: &str,
) -> Result<Option<(i64, i64)>, StoreError> {
    if !storable(session_id) {
        return Ok(None);
    }
    let Some(org) = PgStore::org_id_of(db, org_id)? else {
        return Ok(None);
    };
    let Some(row) = db.query_opt(
        "SELECT s.org, s.sid FROM sessions s WHERE s.org = $1 AND s.session_id = $2",
        &[&org, &session_id],
        "reading a session",
    )?
    else {
        return Ok(None);
    };
    Ok(Some((col(&row, 0)?, col(&row, 1)?)))
}
