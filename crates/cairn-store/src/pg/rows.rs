//! Reading the log's rows back: steps and entries decoded from their
//! columns, the statements that select them, and a session's chain walked
//! through the successor index (its true end, its step ids). Shared by the
//! read queries and the batch's transaction.

use super::connection::{Db, col, u64_of};
use crate::engine::{
    ChainEnd, OpColumns, RawStep, STEP_COLUMNS, SessionRow, StepReading, blob_hash, chain_end,
    check_op_columns, check_session_row, check_step_session, log_entries_query_with, op_from_view,
    withheld_entry,
};
use crate::{StoreError, StoredStep};
use cairn_core::log::{LogEntry, LogRecord, OpRecord};
use cairn_core::{Hash, Timestamp};
use postgres::{GenericClient, Row};
use std::sync::LazyLock;

/// A step from a row selected with [`STEP_COLUMNS`].
pub(super) fn step_from_row(row: &Row) -> Result<StoredStep, StoreError> {
    raw_step(row)?.parse()
}

/// The columns of a row selected with [`STEP_COLUMNS`], borrowed.
fn raw_step(row: &Row) -> Result<RawStep<'_>, StoreError> {
    Ok(RawStep {
        seq: col(row, 0)?,
        trace_id: col(row, 1)?,
        agent_id: col(row, 2)?,
        kind: col(row, 3)?,
        kind_label: col(row, 4)?,
        content: col(row, 5)?,
        input: col(row, 6)?,
        output: col(row, 7)?,
        confidence: col(row, 8)?,
        duration_ms: col(row, 9)?,
        token_count: col(row, 10)?,
        model: col(row, 11)?,
        metadata: col(row, 12)?,
        created_at: col(row, 13)?,
        turn_id: col(row, 14)?,
        turn_step: col(row, 15)?,
        task_id: col(row, 16)?,
        links: col(row, 17)?,
        status: col(row, 18)?,
        seed: col(row, 19)?,
        digest: col(row, 20)?,
        prev_hash: col(row, 21)?,
        hash: col(row, 22)?,
        signer_key_id: col(row, 23)?,
        signature: col(row, 24)?,
        has_embedding: col(row, 25)?,
        erased: col(row, 26)?,
        hidden: col(row, 27)?,
        step_index: col(row, 28)?,
        org_id: col(row, 29)?,
        session_id: col(row, 30)?,
        salts: col(row, 31)?,
        logged_at: col(row, 32)?,
    })
}

pub(super) static STEP_BY_TRACE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {STEP_COLUMNS} FROM entries e JOIN orgs o ON o.org = e.org
         JOIN sessions s ON s.sid = e.sid WHERE e.org = $1 AND e.trace_id = $2 AND e.type = 'step'"
    )
});
/// [`STEP_BY_TRACE`] for an array of trace ids: one probe of
/// `entries_by_trace` per id ([`BY_TRACE_IDS`]).
pub(super) static STEPS_BY_TRACE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {STEP_COLUMNS} FROM {BY_TRACE_IDS}
         JOIN orgs o ON o.org = e.org JOIN sessions s ON s.sid = e.sid WHERE e.type = 'step'"
    )
});
/// The entries of org `$1` whose record ids are in the array `$2`, as
/// `e`: one probe of the unique index `entries_by_trace` per id, a plan
/// the statistics cannot change. `e.trace_id = ANY($2)` was planned, with
/// the statistics of a table just loaded (before autovacuum analyzes it),
/// as a scan of every entry of the org: 8 to 14 ms a query at 30,000
/// entries, where the probes take 0.2 ms.
pub(super) const BY_TRACE_IDS: &str = "unnest($2::text[]) AS wanted(trace_id)
 CROSS JOIN LATERAL (SELECT * FROM entries x
   WHERE x.org = $1 AND x.trace_id = wanted.trace_id LIMIT 1) e";
/// Which record ids of org `$1` among the array `$2` the log holds, with
/// their entries' types (`PgTx::prefetch_trace_ids`).
pub(super) static TRACE_IDS_HELD: LazyLock<String> =
    LazyLock::new(|| format!("SELECT e.trace_id, e.type FROM {}", BY_TRACE_IDS));

/// Which `(sid, turn_id, turn_step)` of three arrays the log's steps hold
/// (`PgTx::prefetch_turn_steps`): one probe of `entries_by_turn` per
/// number (LATERAL ... LIMIT 1: an EXISTS was planned on small tables as a
/// hash join over every numbered step, 72 ms at 80,000 rows).
pub(super) const TURN_NUMBERS_HELD: &str = "SELECT w.sid, w.turn_id, w.n
 FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS w(sid, turn_id, n)
 CROSS JOIN LATERAL (SELECT 1 FROM entries e
   WHERE e.sid = w.sid AND e.turn_id = w.turn_id AND e.turn_step = w.n AND e.type = 'step'
   LIMIT 1) held";

/// Bytes of stored text after which a page of whole entries ends
/// ([`LOG_PAGE`], [`ENTRIES_BY_ID`]): a page holds the entries whose text
/// before them in the page is under this, so at most this plus its last
/// entry (and always one entry, whatever its size). A page of 2,000 rows
/// of the largest steps had held about 1.6 GB.
pub(super) const PAGE_BYTES: i64 = 32 * 1024 * 1024;

/// The log entries `filter` selects (in id order), each with the stored
/// text of those before it in the answer as a last column
/// (`page_bytes_before`, summed by a window over the ordered rows:
/// PostgreSQL reads each value's length from its header without fetching
/// it), kept only while that is under `bound` (a parameter). The rows
/// stay in id order: the outer query only filters the ordered inner one
/// (measured against the plain page on 100,000 steps of 800 bytes, 1.3
/// µs more per row of the database's time; a join after the window, with
/// a sort, had cost 1.9 µs).
fn sized_entries(filter: &str, bound: &str) -> String {
    let inner = log_entries_query_with(
        ", sum(COALESCE(octet_length(e.content), 0) + COALESCE(octet_length(e.input_data), 0)
             + COALESCE(octet_length(e.output_data), 0) + COALESCE(octet_length(e.metadata), 0)
             + COALESCE(octet_length(e.view), 0))
           OVER (ORDER BY e.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS page_bytes_before",
        filter,
    );
    format!("SELECT * FROM ({inner}) page WHERE COALESCE(page_bytes_before, 0) < {bound}")
}

/// Log entries `$1..$2` in id order: at most `$3`, and only while the text
/// before each is under `$4` ([`PAGE_BYTES`]).
pub(super) static LOG_PAGE: LazyLock<String> = LazyLock::new(|| {
    sized_entries(
        "WHERE e.id >= $1 AND e.id < $2 ORDER BY e.id LIMIT $3",
        "$4",
    )
});
/// Log entries by id (`$1`), in id order, with the columns of [`LOG_PAGE`]:
/// only while the text before each is under `$2` ([`PAGE_BYTES`]); the
/// caller asks again for the ids after the last one answered.
pub(super) static ENTRIES_BY_ID: LazyLock<String> =
    LazyLock::new(|| sized_entries("WHERE e.id = ANY($1) ORDER BY e.id", "$2"));
/// Steps of session `$2` by id (`$1`), in id order, only while the stored
/// text before each in the answer is under `$3` ([`PAGE_BYTES`]; the
/// same window as [`sized_entries`], as a last column): the caller asks
/// again for the ids after the last one answered.
pub(super) static STEPS_BY_ID: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT * FROM (
           SELECT {STEP_COLUMNS},
             sum(COALESCE(octet_length(e.content), 0) + COALESCE(octet_length(e.input_data), 0)
                 + COALESCE(octet_length(e.output_data), 0) + COALESCE(octet_length(e.metadata), 0)
                 + COALESCE(octet_length(e.view), 0))
               OVER (ORDER BY e.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS page_bytes_before
           FROM entries e JOIN orgs o ON o.org = e.org
           JOIN sessions s ON s.sid = e.sid WHERE e.id = ANY($1) AND e.sid = $2 AND e.type = 'step'
           ORDER BY e.id
         ) page WHERE COALESCE(page_bytes_before, 0) < $3"
    )
});

/// Steps of session `$2` by id (`$1`), in the order of `$1` (any order:
/// a streamed trail asks for its steps in trail order), each with its
/// place in `$1` (1-based) as its last column, only while the stored text
/// before each in the answer is under `$3`: the caller asks again for
/// the ids after the place of the last one answered.
pub(super) static STEPS_IN_ORDER: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT * FROM (
           SELECT {STEP_COLUMNS}, w.n,
             sum(COALESCE(octet_length(e.content), 0) + COALESCE(octet_length(e.input_data), 0)
                 + COALESCE(octet_length(e.output_data), 0) + COALESCE(octet_length(e.metadata), 0)
                 + COALESCE(octet_length(e.view), 0))
               OVER (ORDER BY w.n ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS page_bytes_before
           FROM unnest($1::bigint[]) WITH ORDINALITY AS w(id, n)
           JOIN entries e ON e.id = w.id
           JOIN orgs o ON o.org = e.org
           JOIN sessions s ON s.sid = e.sid WHERE e.sid = $2 AND e.type = 'step'
         ) page WHERE COALESCE(page_bytes_before, 0) < $3 ORDER BY page.n"
    )
});

/// The ids of a session's steps, oldest first, found by walking `prev_seq`
/// back from the session's last step as the log holds it (`$3`, its seq;
/// `$4`, its index), as the embedded store does (no index on `sid` slows
/// every insert down). A broken link ends the walk early; verification
/// then reports the missing index.
const SESSION_WALK: &str = "WITH RECURSIVE chain (id, prev, n) AS (
    SELECT e.id, e.prev_seq, 1 FROM entries e
      WHERE e.id = (($1::bigint << 40) | $3::bigint) AND e.sid = $2
    UNION ALL
    SELECT e.id, e.prev_seq, c.n + 1 FROM chain c
      JOIN entries e ON e.id = (($1::bigint << 40) | c.prev) AND e.sid = $2
      WHERE c.n <= $4::bigint
  )
  SELECT id FROM chain ORDER BY id";

/// The step of session `$2` whose previous step is at `$1` (-1: its first).
const SUCCESSOR: &str = "SELECT seq, step_index, record_hash, created_at, kind FROM entries
  WHERE COALESCE(prev_seq, -1) = $1 AND sid = $2 AND type = 'step'";

/// The step a session's head row names, if it is a step of the session.
const HEAD_HINT: &str = "SELECT e.seq, e.step_index, e.record_hash, e.created_at, e.kind
  FROM session_heads h JOIN entries e ON e.id = (($1::bigint << 40) | h.last_seq)
  WHERE h.sid = $2 AND e.sid = $2 AND e.type = 'step' AND e.step_index = h.last_index";

fn chain_end_from_row(row: &Row) -> Result<ChainEnd, StoreError> {
    chain_end_at(row, 0)
}

/// A chain end from five columns at `n` (seq, step_index, record_hash,
/// created_at, kind).
fn chain_end_at(row: &Row, n: usize) -> Result<ChainEnd, StoreError> {
    Ok(ChainEnd {
        seq: col(row, n)?,
        index: col(row, n + 1)?,
        hash: col(row, n + 2)?,
        created_at: col(row, n + 3)?,
        kind: col(row, n + 4)?,
    })
}

/// [`chain_end_at`], or `None` where an outer join found no step (its seq
/// column is NULL).
pub(super) fn optional_chain_end_at(row: &Row, n: usize) -> Result<Option<ChainEnd>, StoreError> {
    let seq: Option<i64> = col(row, n)?;
    seq.map(|_| chain_end_at(row, n)).transpose()
}

/// The step of session `sid` after the one at `seq` (its first if `None`).
pub(super) fn successor<C: GenericClient>(
    db: &mut Db<'_, C>,
    sid: i64,
    seq: Option<i64>,
) -> Result<Option<ChainEnd>, StoreError> {
    db.query_opt(
        SUCCESSOR,
        &[&seq.unwrap_or(-1), &sid],
        "following a session's chain",
    )?
    .map(|row| chain_end_from_row(&row))
    .transpose()
}

/// A session's last step as the log holds it: from the step its head row
/// names, walked forward to the end.
pub(super) fn true_end<C: GenericClient>(
    db: &mut Db<'_, C>,
    org: i64,
    sid: i64,
) -> Result<Option<ChainEnd>, StoreError> {
    let hint = db
        .query_opt(HEAD_HINT, &[&org, &sid], "reading a session head")?
        .map(|row| chain_end_from_row(&row))
        .transpose()?;
    chain_end(hint, |seq| successor(db, sid, seq))
}

/// For each session of a page of listed sessions, in one round trip: the
/// step its head row names (if it is a step of the session), whether the
/// log holds a step after that one (or, with no hint, any step), and its
/// first step. Same statements as [`HEAD_HINT`] and [`SUCCESSOR`], joined
/// (`OFFSET 0` keeps each a per-session index lookup: pulled up into one
/// join, the planner may scan whole tables against the page's sessions).
const LISTING_ENDS: &str = "SELECT s.sid,
       h.seq, h.step_index, h.record_hash, h.created_at, h.kind,
       EXISTS (SELECT 1 FROM entries n
                WHERE COALESCE(n.prev_seq, -1) = COALESCE(h.seq, -1)
                  AND n.sid = s.sid AND n.type = 'step') AS lags,
       f.seq, f.step_index, f.record_hash, f.created_at, f.kind
  FROM unnest($2::int8[]) AS s(sid)
  LEFT JOIN LATERAL (
       SELECT e.seq, e.step_index, e.record_hash, e.created_at, e.kind
         FROM session_heads hh JOIN entries e ON e.id = (($1::bigint << 40) | hh.last_seq)
        WHERE hh.sid = s.sid AND e.sid = s.sid AND e.type = 'step'
          AND e.step_index = hh.last_index OFFSET 0) AS h ON true
  LEFT JOIN LATERAL (
       SELECT seq, step_index, record_hash, created_at, kind FROM entries
        WHERE COALESCE(prev_seq, -1) = -1 AND sid = s.sid AND type = 'step' OFFSET 0) AS f ON true";

/// The ends of a listed session as the log holds them: its last step and
/// its first.
pub(super) struct ListedEnds {
    pub(super) last: Option<ChainEnd>,
    pub(super) first: Option<ChainEnd>,
}

/// [`ListedEnds`] of each of `sids`, in one round trip for the sessions
/// whose head row is current (all but those a crash, an older server or
/// tampering left behind, which are walked as [`true_end`] walks them).
pub(super) fn listed_ends<C: GenericClient>(
    db: &mut Db<'_, C>,
    org: i64,
    sids: &[i64],
) -> Result<std::collections::HashMap<i64, ListedEnds>, StoreError> {
    let rows = db.query(
        LISTING_ENDS,
        &[&org, &sids],
        "reading listed sessions' ends",
    )?;
    let mut ends = std::collections::HashMap::with_capacity(rows.len());
    for row in &rows {
        let sid: i64 = col(row, 0)?;
        let hint = optional_chain_end_at(row, 1)?;
        let lags: bool = col(row, 6)?;
        let last = if lags {
            chain_end(hint, |seq| successor(db, sid, seq))?
        } else {
            hint
        };
        let first = match &last {
            Some(_) => optional_chain_end_at(row, 7)?,
            None => None,
        };
        ends.insert(sid, ListedEnds { last, first });
    }
    Ok(ends)
}

/// The ids of a session's steps, oldest first, as the log holds them.
pub(super) fn session_ids<C: GenericClient>(
    db: &mut Db<'_, C>,
    org: i64,
    sid: i64,
) -> Result<Vec<i64>, StoreError> {
    let Some(end) = true_end(db, org, sid)? else {
        return Ok(Vec::new());
    };
    db.query(
        SESSION_WALK,
        &[&org, &sid, &end.seq, &end.index],
        "walking a session",
    )?
    .iter()
    .map(|r| col(r, 0))
    .collect()
}

/// A log entry from a row selected with [`STEP_COLUMNS`] followed by
/// `type, view, leaf_hash` (at `n`, `n + 1`, `n + 2`), its step read as
/// `how` says (with the step's recomputed digest for a verifier).
pub(super) fn entry_from_row(
    row: &Row,
    n: usize,
    how: StepReading,
) -> Result<(LogEntry, Option<Hash>), StoreError> {
    let entry_type: &str = col(row, n)?;
    if entry_type == "step" {
        let (stored, digest) = raw_step(row)?.read(how)?;
        check_step_session(stored.seq, col(row, n + 3)?, col(row, n + 4)?)?;
        let entry = LogEntry {
            seq: stored.seq,
            logged_at: stored.logged_at,
            record: LogRecord::Step(stored.record),
        };
        return Ok((entry, digest));
    }
    let seq = u64_of(col(row, 0)?);
    let view: Option<&str> = col(row, n + 1)?;
    let Some(view) = view else {
        let logged_at = Timestamp::from_micros(col(row, n - 1)?)
            .ok_or_else(|| StoreError::Corrupt(format!("record {seq}: time out of range")))?;
        return withheld_entry(seq, entry_type, logged_at, blob_hash(col(row, 22)?)?);
    };
    let record = op_from_view(seq, entry_type, view)?;
    if let OpRecord::SessionStart(header) = &record {
        let session = SessionRow {
            entry_org: col(row, n + 3)?,
            org: col(row, n + 4)?,
            session_id: col(row, 30)?,
            agent_id: col(row, n + 5)?,
            profile: col(row, n + 6)?,
            started_at: col(row, n + 7)?,
            start_seq: col(row, n + 8)?,
            genesis: col(row, n + 9)?,
            max_clock_skew_s: col(row, n + 10)?,
        };
        check_session_row(seq, header, &session)?;
    }
    let step_index: Option<i64> = col(row, 28)?;
    let columns = OpColumns {
        entry_org: col(row, n + 3)?,
        session_org: col(row, n + 4)?,
        session_id: col(row, 30)?,
        agent_id: col(row, 2)?,
        step_index,
        trace_id: col(row, 1)?,
    };
    check_op_columns(seq, &record, &columns)?;
    let entry = LogEntry {
        seq,
        logged_at: Timestamp::from_micros(col(row, n - 1)?)
            .ok_or_else(|| StoreError::Corrupt(format!("record {seq}: time out of range")))?,
        record: LogRecord::Op {
            record,
            hash: blob_hash(col(row, 22)?)?,
        },
    };
    Ok((entry, None))
}
