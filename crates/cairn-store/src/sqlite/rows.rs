//! Reading the log's rows back: steps and entries decoded from their
//! columns, and a session's chain walked through the successor index (its
//! true end, its rowids, its sequencing state). Shared by the read queries
//! and the writer's transaction.

use crate::engine::{
    ChainEnd, OpColumns, RawStep, SessionRow, SessionState, StepReading, StoredSession, chain_end,
    check_op_columns, check_session_row, check_step_session, hash_of, op_from_view, row_id,
    withheld_entry,
};
use crate::{DbContext, StoreError, StoredStep};
use cairn_core::log::{LogEntry, LogRecord, OpRecord};
use cairn_core::{Hash, Timestamp};
use rusqlite::types::{FromSqlResult, ValueRef};
use rusqlite::{Connection, OptionalExtension, params};

/// A chain end from a row of `seq, step_index, record_hash, created_at,
/// kind`.
fn chain_end_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<ChainEnd> {
    Ok(ChainEnd {
        seq: r.get(0)?,
        index: r.get(1)?,
        hash: r.get(2)?,
        created_at: r.get(3)?,
        kind: r.get(4)?,
    })
}
/// The step of session `sid` whose previous step is at `seq` (its first
/// step when `None`), found by the unique successor index.
pub(super) fn successor(
    conn: &Connection,
    sid: i64,
    seq: Option<i64>,
) -> Result<Option<ChainEnd>, StoreError> {
    conn.prepare_cached(
        "SELECT seq, step_index, record_hash, created_at, kind FROM entries
         WHERE COALESCE(prev_seq, -1) = ?1 AND sid = ?2 AND type = 'step'",
    )
    .and_then(|mut s| {
        s.query_row(params![seq.unwrap_or(-1), sid], chain_end_of)
            .optional()
    })
    .context("following a session's chain")
}

/// A session's last step as the log holds it: from the step its head row
/// names (if that is a step of the session), walked forward to the end.
pub(super) fn true_end(
    conn: &Connection,
    org: i64,
    sid: i64,
) -> Result<Option<ChainEnd>, StoreError> {
    let hint = conn
        .prepare_cached(
            "SELECT e.seq, e.step_index, e.record_hash, e.created_at, e.kind
             FROM session_heads h JOIN entries e ON e.id = ((?1 << 40) | h.last_seq)
             WHERE h.sid = ?2 AND e.sid = ?2 AND e.type = 'step' AND e.step_index = h.last_index",
        )
        .and_then(|mut s| s.query_row(params![org, sid], chain_end_of).optional())
        .context("reading a session head")?;
    chain_end(hint, |seq| successor(conn, sid, seq))
}

/// A session's sequencing state, read from the log.
pub(super) fn load_session(
    conn: &Connection,
    org: i64,
    session_id: &str,
) -> Result<Option<SessionState>, StoreError> {
    let row = conn
        .prepare_cached(
            "SELECT sid, agent_id, profile, genesis, max_clock_skew_s,
                    EXISTS (SELECT 1 FROM entries x WHERE x.sid = s.sid AND x.type = 'seal')
             FROM sessions s WHERE org = ?1 AND session_id = ?2",
        )
        .and_then(|mut s| {
            s.query_row(params![org, session_id], |r| {
                Ok(StoredSession {
                    sid: r.get(0)?,
                    agent_id: r.get(1)?,
                    profile: r.get(2)?,
                    genesis: r.get(3)?,
                    max_clock_skew_s: r.get(4)?,
                    sealed: r.get(5)?,
                    first_seq: None,
                    end: None,
                })
            })
            .optional()
        })
        .context("loading a session")?;
    let Some(mut stored) = row else {
        return Ok(None);
    };
    stored.end = true_end(conn, org, stored.sid)?;
    stored.first_seq = successor(conn, stored.sid, None)?.map(|e| e.seq);
    stored.into_state().map(Some)
}

/// The rowids of a session's steps, oldest first: from its last step as
/// the log holds it ([`true_end`]), back along `prev_seq`. A broken link
/// ends the walk early; verification then reports the missing index.
pub(super) fn session_rowids(
    conn: &Connection,
    org: i64,
    sid: i64,
) -> Result<Vec<i64>, StoreError> {
    let Some(end) = true_end(conn, org, sid)? else {
        return Ok(Vec::new());
    };
    let mut ids = Vec::with_capacity(end.index as usize + 1);
    let mut next = Some(end.seq);
    let mut stmt = conn
        .prepare_cached("SELECT prev_seq FROM entries WHERE id = ?1 AND sid = ?2")
        .context("walking a session")?;
    while let Some(seq) = next {
        // A session holds index + 1 steps: more links mean a loop.
        if ids.len() > end.index as usize {
            break;
        }
        let id = row_id(org, seq as u64);
        let prev: Option<Option<i64>> = stmt
            .query_row(params![id, sid], |r| r.get(0))
            .optional()
            .context("walking a session")?;
        let Some(prev) = prev else { break };
        ids.push(id);
        next = prev;
    }
    ids.reverse();
    Ok(ids)
}

/// A column read in place (the row's own bytes, no copy); a value of
/// another type, or text that is not UTF-8, fails as `Row::get` would.
fn in_place<'r, T>(
    row: &'r rusqlite::Row<'_>,
    index: usize,
    read: impl FnOnce(ValueRef<'r>) -> FromSqlResult<T>,
) -> rusqlite::Result<T> {
    use rusqlite::types::FromSqlError;
    let value = row.get_ref(index)?;
    read(value).map_err(|e| match e {
        FromSqlError::InvalidType => {
            let name = row.as_ref().column_name(index).unwrap_or("?").to_owned();
            rusqlite::Error::InvalidColumnType(index, name, value.data_type())
        }
        FromSqlError::Utf8Error(e) => rusqlite::Error::Utf8Error(index, e),
        other => {
            rusqlite::Error::FromSqlConversionFailure(index, value.data_type(), Box::new(other))
        }
    })
}

fn text<'r>(row: &'r rusqlite::Row<'_>, index: usize) -> rusqlite::Result<&'r str> {
    in_place(row, index, |v| v.as_str())
}

fn text_or_null<'r>(row: &'r rusqlite::Row<'_>, index: usize) -> rusqlite::Result<Option<&'r str>> {
    in_place(row, index, |v| v.as_str_or_null())
}

pub(super) fn blob<'r>(row: &'r rusqlite::Row<'_>, index: usize) -> rusqlite::Result<&'r [u8]> {
    in_place(row, index, |v| v.as_blob())
}

fn blob_or_null<'r>(
    row: &'r rusqlite::Row<'_>,
    index: usize,
) -> rusqlite::Result<Option<&'r [u8]>> {
    in_place(row, index, |v| v.as_blob_or_null())
}

/// The entry's org and its session's row, the columns of
/// `log_entries_query` after the leaf hash (at `n + 3` on).
fn session_row<'r>(row: &'r rusqlite::Row<'_>, n: usize) -> Result<SessionRow<'r>, StoreError> {
    (|| -> rusqlite::Result<SessionRow<'r>> {
        Ok(SessionRow {
            entry_org: row.get(n + 3)?,
            org: row.get(n + 4)?,
            session_id: text_or_null(row, 30)?,
            agent_id: text_or_null(row, n + 5)?,
            profile: text_or_null(row, n + 6)?,
            started_at: row.get(n + 7)?,
            start_seq: row.get(n + 8)?,
            genesis: blob_or_null(row, n + 9)?,
            max_clock_skew_s: row.get(n + 10)?,
        })
    })()
    .context("reading a session's row")
}

/// The columns of a row selected with [`STEP_COLUMNS`](crate::engine::STEP_COLUMNS), borrowed.
fn raw_step<'r>(row: &'r rusqlite::Row<'_>) -> Result<RawStep<'r>, StoreError> {
    let raw = (|| {
        Ok::<_, rusqlite::Error>(RawStep {
            seq: row.get(0)?,
            trace_id: text(row, 1)?,
            agent_id: text(row, 2)?,
            kind: text(row, 3)?,
            kind_label: text(row, 4)?,
            content: text_or_null(row, 5)?,
            input: text_or_null(row, 6)?,
            output: text_or_null(row, 7)?,
            confidence: row.get(8)?,
            duration_ms: row.get(9)?,
            token_count: row.get(10)?,
            model: text_or_null(row, 11)?,
            metadata: text_or_null(row, 12)?,
            created_at: row.get(13)?,
            turn_id: text_or_null(row, 14)?,
            turn_step: row.get(15)?,
            task_id: text_or_null(row, 16)?,
            links: text_or_null(row, 17)?,
            status: text(row, 18)?,
            seed: blob_or_null(row, 19)?,
            digest: blob(row, 20)?,
            prev_hash: blob(row, 21)?,
            hash: blob(row, 22)?,
            signer_key_id: text_or_null(row, 23)?,
            signature: blob_or_null(row, 24)?,
            has_embedding: row.get(25)?,
            erased: row.get(26)?,
            hidden: text_or_null(row, 27)?,
            step_index: row.get(28)?,
            org_id: text(row, 29)?,
            session_id: text(row, 30)?,
            salts: blob_or_null(row, 31)?,
            logged_at: row.get(32)?,
        })
    })();
    raw.map_err(|e| StoreError::Database {
        context: "reading a step".into(),
        source: e,
    })
}

/// Builds a [`StoredStep`] from a row selected with [`STEP_COLUMNS`](crate::engine::STEP_COLUMNS).
pub(super) fn step_from_row(row: &rusqlite::Row<'_>) -> Result<StoredStep, StoreError> {
    raw_step(row)?.parse()
}

/// A log entry from a row selected with [`STEP_COLUMNS`](crate::engine::STEP_COLUMNS) followed by
/// `type, view, leaf_hash` (at `n`, `n + 1`, `n + 2`), its step read as
/// `how` says (with the step's recomputed digest for a verifier).
pub(super) fn entry_from_row(
    row: &rusqlite::Row<'_>,
    n: usize,
    how: StepReading,
) -> Result<(LogEntry, Option<Hash>), StoreError> {
    let entry_type = text(row, n).context("reading the log")?;
    if entry_type == "step" {
        let (stored, digest) = raw_step(row)?.read(how)?;
        let entry_org: i64 = row.get(n + 3).context("reading the log")?;
        let session_org: Option<i64> = row.get(n + 4).context("reading the log")?;
        check_step_session(stored.seq, entry_org, session_org)?;
        let entry = LogEntry {
            seq: stored.seq,
            logged_at: stored.logged_at,
            record: LogRecord::Step(stored.record),
        };
        return Ok((entry, digest));
    }
    let seq: i64 = row.get(0).context("reading the log")?;
    let logged_at: i64 = row.get(n - 1).context("reading the log")?;
    let view = text_or_null(row, n + 1).context("reading the log")?;
    let hash = hash_of(blob(row, 22).context("reading the log")?)?;
    let logged_at = Timestamp::from_micros(logged_at)
        .ok_or_else(|| StoreError::Corrupt(format!("record {seq}: time out of range")))?;
    let Some(view) = view else {
        return withheld_entry(seq as u64, entry_type, logged_at, hash);
    };
    let record = op_from_view(seq as u64, entry_type, view)?;
    if let OpRecord::SessionStart(header) = &record {
        check_session_row(seq as u64, header, &session_row(row, n)?)?;
    }
    let columns = (|| {
        Ok::<_, rusqlite::Error>(OpColumns {
            entry_org: row.get(n + 3)?,
            session_org: row.get(n + 4)?,
            session_id: text_or_null(row, 30)?,
            agent_id: text_or_null(row, 2)?,
            step_index: row.get(28)?,
            trace_id: text_or_null(row, 1)?,
        })
    })()
    .context("reading the log")?;
    check_op_columns(seq as u64, &record, &columns)?;
    let entry = LogEntry {
        seq: seq as u64,
        logged_at,
        record: LogRecord::Op { record, hash },
    };
    Ok((entry, None))
}
