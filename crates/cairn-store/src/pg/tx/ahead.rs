//! What a batch's transaction reads ahead of the engine, each in one
//! query per org: the sessions it appends to (before the org's lock for
//! orgs other servers write, checked under it), and the record ids and
//! turn numbers its steps choose, answered from memory afterwards with
//! what the batch writes.

use super::super::connection::{Db, col, u64_of};
use super::super::rows::{TRACE_IDS_HELD, TURN_NUMBERS_HELD, optional_chain_end_at, successor};
use super::PgTx;
use crate::StoreError;
use crate::engine::{StoredSession, chain_end};
use postgres::{GenericClient, Row};
use std::collections::{HashMap, HashSet};

/// The query of a batch's sessions: registry row, seal, the step the
/// head row names and whether the log holds a step after it (the head
/// lags: the walk forward then probes step by step, which is rare;
/// checking here saves the batch a round trip per session), then the
/// columns `$extra` and the org given by `$org`.
macro_rules! sessions_query {
    ($extra:literal, $org:literal) => {
        concat!(
            "SELECT s.session_id, s.sid, s.agent_id, s.profile, s.genesis,
   s.max_clock_skew_s, EXISTS (SELECT 1 FROM entries x WHERE x.sid = s.sid AND x.type = 'seal'),
   h.first_seq, e.seq, e.step_index, e.record_hash, e.created_at, e.kind,
   EXISTS (SELECT 1 FROM entries n WHERE COALESCE(n.prev_seq, -1) = COALESCE(e.seq, -1)
             AND n.sid = s.sid AND n.type = 'step')",
            $extra,
            "
 FROM sessions s LEFT JOIN session_heads h ON h.sid = s.sid
 LEFT JOIN entries e ON e.id = ((s.org << 40) | h.last_seq) AND e.sid = s.sid AND e.type = 'step'
   AND e.step_index = h.last_index
 WHERE s.org = ",
            $org,
            " AND s.session_id = ANY($2)"
        )
    };
}

/// A batch's sessions of org `$1` (an id), under its lock.
static SESSIONS_BY_ID: &str = sessions_query!("", "$1");

/// A batch's sessions of the org named `$1`, read before its lock, with
/// the org's id and the last id of its log, as one snapshot saw them.
static SESSIONS_BEFORE_LOCKING: &str = sessions_query!(
    ", s.org, (SELECT (SELECT max(m.id) FROM entries m
                  WHERE m.id >= (o.org << 40) AND m.id < ((o.org + 1) << 40))
         FROM orgs o WHERE o.name = $1)",
    "(SELECT org FROM orgs WHERE name = $1)"
);

/// Sessions of one org read before a batch took the org's lock, with the
/// size of the org's log as that read saw it. Under the lock, a session
/// none of the entries appended since names is as this read found it:
/// every record that changes a session's state (its start, a step, its
/// seal) carries the session's `sid`.
pub(in crate::pg) struct EarlySessions {
    org: i64,
    pub(super) size: u64,
    pub(super) sessions: Vec<(String, StoredSession)>,
}

/// Reads the sessions `ids` of the org `name` before the batch locks it
/// (one statement, so one snapshot). Sessions that do not exist yet, and
/// any whose head row lags the log, are left to the read under the lock.
pub(in crate::pg) fn sessions_before_locking<C: GenericClient>(
    db: &mut Db<'_, C>,
    name: &str,
    ids: &[String],
) -> Result<Option<EarlySessions>, StoreError> {
    let rows = db.query(
        SESSIONS_BEFORE_LOCKING,
        &[&name, &ids],
        "loading sessions before locking",
    )?;
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let org: i64 = col(first, 14)?;
    let last_id: Option<i64> = col(first, 15)?;
    let size = last_id.map_or(0, |id| u64_of(id - (org << 40)) + 1);
    let mut sessions = Vec::with_capacity(rows.len());
    for row in &rows {
        let (id, stored) = session_from_row(row)?;
        let lags: bool = col(row, 13)?;
        if !lags && (stored.end.is_none() || stored.first_seq.is_some()) {
            sessions.push((id, stored));
        }
    }
    Ok(Some(EarlySessions {
        org,
        size,
        sessions,
    }))
}

/// A session from a row of [`SESSIONS_BY_ID`], with the step its head row
/// names as the end (to be walked forward to the log's real end if the
/// last column says the log holds a step after it).
fn session_from_row(row: &Row) -> Result<(String, StoredSession), StoreError> {
    let end = optional_chain_end_at(row, 8)?;
    Ok((
        col(row, 0)?,
        StoredSession {
            sid: col(row, 1)?,
            agent_id: col(row, 2)?,
            profile: col(row, 3)?,
            genesis: col(row, 4)?,
            max_clock_skew_s: col(row, 5)?,
            sealed: col(row, 6)?,
            first_seq: col(row, 7)?,
            end,
        },
    ))
}

impl<C: GenericClient> PgTx<'_, C> {
    /// Notes a session this batch opened (its turns hold only what the
    /// batch writes).
    pub(in crate::pg) fn session_created(&mut self, sid: i64) {
        if self.turns_tracked {
            self.sessions_opened.insert(sid);
        }
    }

    /// Looks up which of `wanted` (`(session, turn_id, turn_step)` the
    /// batch's steps give, in org `org`) a stored step of an existing
    /// session holds, in one query: a probe of `entries_by_turn` each;
    /// [`crate::engine::WriteTx::turn_steps_taken`] then answers for them
    /// from memory.
    pub(in crate::pg) fn prefetch_turn_steps(
        &mut self,
        org: i64,
        wanted: &[(String, String, u64)],
    ) -> Result<(), StoreError> {
        if wanted.is_empty() {
            return Ok(());
        }
        self.flush()?;
        self.turns_tracked = true;
        let (mut sids, mut turns, mut numbers) = (Vec::new(), Vec::new(), Vec::new());
        for (session_id, turn_id, number) in wanted {
            // A session the batch opens holds no step yet.
            if let Some(Some(session)) = self.sessions.get(&(org, session_id.clone())) {
                sids.push(session.sid);
                turns.push(turn_id.clone());
                numbers.push(*number as i64);
            }
        }
        if sids.is_empty() {
            return Ok(());
        }
        let rows = self.db.query(
            TURN_NUMBERS_HELD,
            &[&sids, &turns, &numbers],
            "looking up a batch's turn numbers",
        )?;
        let mut held = HashSet::with_capacity(rows.len());
        for row in &rows {
            held.insert((
                col::<i64>(row, 0)?,
                col::<String>(row, 1)?,
                col::<i64>(row, 2)?,
            ));
        }
        for ((sid, turn_id), number) in sids.into_iter().zip(turns).zip(numbers) {
            let key = (sid, turn_id, number);
            let taken = held.contains(&key);
            self.turns_looked_up.insert(key, taken);
        }
        Ok(())
    }

    /// What [`PgTx::prefetch_turn_steps`] and the batch's own writes say
    /// of number `number` of turn `turn_id` of session `sid`, if anything.
    pub(in crate::pg) fn turn_step_known(
        &self,
        sid: i64,
        turn_id: &str,
        number: u64,
    ) -> Option<bool> {
        if !self.turns_tracked {
            return None;
        }
        let key = (sid, turn_id.to_owned(), number as i64);
        if self.turns_written.contains(&key) {
            return Some(true);
        }
        if self.sessions_opened.contains(&sid) {
            return Some(false);
        }
        self.turns_looked_up.get(&key).copied()
    }

    /// Looks up which of `ids` (record ids a batch's steps choose or link
    /// to) org `org`'s log holds, and as what, in one query;
    /// [`crate::engine::WriteTx::trace_id_taken`] and
    /// [`crate::engine::WriteTx::record_type`] then answer for them from
    /// memory.
    pub(in crate::pg) fn prefetch_trace_ids(
        &mut self,
        org: i64,
        ids: &[String],
    ) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        // What memory answers from then on is this query's answer and
        // what is written after it: nothing may be pending before it.
        self.flush()?;
        let rows = self.db.query(
            &TRACE_IDS_HELD,
            &[&org, &ids],
            "looking up a batch's record ids",
        )?;
        let mut held = HashMap::with_capacity(rows.len());
        for row in &rows {
            held.insert(col::<String>(row, 0)?, col::<String>(row, 1)?);
        }
        for id in ids {
            let kind = held.get(id).cloned();
            self.ids_looked_up.insert((org, id.clone()), kind);
        }
        Ok(())
    }

    /// What [`PgTx::prefetch_trace_ids`] and the batch's own writes say of
    /// record id `id` of `org` (the entry type of its record, or `None`
    /// when there is none), if they say anything.
    pub(in crate::pg) fn record_known(&self, org: i64, id: &str) -> Option<Option<String>> {
        if self.ids_looked_up.is_empty() {
            return None;
        }
        let key = (org, id.to_owned());
        if let Some(kind) = self.ids_written.get(&key) {
            return Some(Some(kind.clone()));
        }
        self.ids_looked_up.get(&key).cloned()
    }

    /// Takes the sessions read before the lock that no entry appended
    /// since names, as they were read. The others (and any the early read
    /// did not find) are left to [`PgTx::prefetch_sessions`].
    pub(in crate::pg) fn adopt_early_sessions(
        &mut self,
        early: EarlySessions,
    ) -> Result<(), StoreError> {
        // The entries appended since the early read must all have been
        // read under the lock, or nothing read early can be trusted.
        let Some(caught) = self.caught_up.get(&early.org) else {
            return Ok(());
        };
        if early.size < caught.from || early.size > caught.to {
            return Ok(());
        }
        let touched: HashSet<i64> = caught
            .sessions
            .iter()
            .filter(|(seq, _)| *seq >= early.size)
            .filter_map(|(_, sid)| *sid)
            .collect();
        for (id, stored) in early.sessions {
            if !touched.contains(&stored.sid) {
                self.sessions
                    .insert((early.org, id), Some(stored.into_state()?));
            }
        }
        Ok(())
    }

    /// Reads the committed state of the sessions `ids` of `org`: their
    /// rows, each with whether the log holds a step after the one its head
    /// row names, in one query; a session whose head row lags is then
    /// walked forward probe by probe.
    pub(in crate::pg) fn prefetch_sessions(
        &mut self,
        org: i64,
        ids: &[String],
    ) -> Result<(), StoreError> {
        // The states this process's batches left, checked under the lock
        // (`OwnSessions::catch_up`), need no read.
        let own = self
            .orgs
            .iter()
            .find(|(_, state)| state.id == org)
            .and_then(|(name, _)| self.cache.own_sessions(name));
        let mut unread = Vec::new();
        for id in ids {
            let key = (org, id.clone());
            if self.sessions.contains_key(&key) {
                continue;
            }
            match own.and_then(|own| own.get(id)) {
                Some(state) => {
                    self.sessions.insert(key, Some(state.clone()));
                }
                None => unread.push(id.clone()),
            }
        }
        let ids = unread;
        if ids.is_empty() {
            return Ok(());
        }
        let rows = self
            .db
            .query(SESSIONS_BY_ID, &[&org, &ids], "loading sessions")?;
        for id in &ids {
            self.sessions.insert((org, id.clone()), None);
        }
        for row in &rows {
            let (id, mut stored) = session_from_row(row)?;
            let sid = stored.sid;
            let lags: bool = col(row, 13)?;
            if lags {
                stored.end = chain_end(stored.end.take(), |seq| successor(&mut self.db, sid, seq))?;
            }
            if stored.end.is_some() && stored.first_seq.is_none() {
                stored.first_seq = successor(&mut self.db, sid, None)?.map(|e| e.seq);
            }
            self.sessions.insert((org, id), Some(stored.into_state()?));
        }
        Ok(())
    }
}
