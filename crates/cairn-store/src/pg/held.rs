//! PostgreSQL's OTLP spans waiting for their session
//! (`crate::held_spans`), and the look-up of the session a trace's steps
//! were recorded in.

use super::PgStore;
use super::connection::col;
use crate::StoreError;
use crate::held_spans::{HeldSpan, HeldSpans, HeldTrace, TRACE_SESSIONS, otel_trace_prefix};

/// The sessions of an OpenTelemetry trace's steps (`$2`: their ids' first
/// 38 characters) in org `$1`, the latest step's first, at most `$3`,
/// through the expression index `entries_by_otel_trace`.
pub(super) const TRACE_SESSIONS_SQL: &str =
    "SELECT s.session_id FROM entries e JOIN sessions s ON s.sid = e.sid
      WHERE e.org = $1 AND starts_with(e.trace_id, 'otel.')
        AND left(e.trace_id, 38) = $2 AND e.type = 'step'
      GROUP BY s.session_id ORDER BY MAX(e.id) DESC LIMIT $3";

impl HeldSpans for PgStore {
    fn hold_spans(
        &self,
        org_id: &str,
        key_id: &str,
        spans: &[HeldSpan],
        max_org_bytes: u64,
    ) -> Result<Option<u64>, StoreError> {
        let (mut traces, mut ids, mut received, mut bytes, mut steps) =
            (vec![], vec![], vec![], vec![], vec![]);
        for span in spans {
            traces.push(span.trace_hex.as_str());
            ids.push(span.span_hex.as_str());
            received.push(span.received_ms);
            bytes.push(span.steps.len() as i64);
            steps.push(span.steps.as_str());
        }
        let max = i64::try_from(max_org_bytes).unwrap_or(i64::MAX);
        self.read(|db| {
            // One statement: the spans not held yet (a retry's are), the
            // org's total checked with them, and the rows written together
            // (servers of a fleet holding at once may each pass the check:
            // the bound is per statement, about the limit). The count says
            // which: rows written, else whether the bound refused them.
            let row = db.query_one(
                "WITH new AS (
                   SELECT t, s, r, b, j
                     FROM unnest($3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::text[]) AS u(t, s, r, b, j)
                    WHERE NOT EXISTS (SELECT 1 FROM held_spans h WHERE h.org_name = $1 AND h.key_id = $2
                                         AND h.trace_hex = u.t AND h.span_hex = u.s)),
                 room AS (
                   SELECT (SELECT COALESCE(SUM(bytes), 0)::bigint FROM held_spans WHERE org_name = $1)
                          + (SELECT COALESCE(SUM(b), 0)::bigint FROM new) <= $8::bigint AS fits),
                 written AS (
                   INSERT INTO held_spans (org_name, key_id, trace_hex, span_hex, received_ms, bytes, steps)
                   SELECT $1, $2, t, s, r, b, j FROM new WHERE (SELECT fits FROM room)
                   ON CONFLICT DO NOTHING RETURNING 1)
                 SELECT (SELECT fits FROM room), (SELECT COUNT(*) FROM written)",
                &[&org_id, &key_id, &traces, &ids, &received, &bytes, &steps, &max],
                "holding spans",
            )?;
            let fits: bool = col(&row, 0)?;
            let written: i64 = col(&row, 1)?;
            Ok(fits.then_some(u64::try_from(written).unwrap_or(0)))
        })
    }

    fn held_spans(
        &self,
        org_id: &str,
        key_id: &str,
        trace_hexes: &[String],
    ) -> Result<Vec<HeldSpan>, StoreError> {
        self.read(|db| {
            db.query(
                "SELECT trace_hex, span_hex, steps, received_ms FROM held_spans
                  WHERE org_name = $1 AND key_id = $2 AND trace_hex = ANY($3)
                  ORDER BY trace_hex, span_hex",
                &[&org_id, &key_id, &trace_hexes],
                "reading held spans",
            )?
            .iter()
            .map(|row| {
                Ok(HeldSpan {
                    trace_hex: col(row, 0)?,
                    span_hex: col(row, 1)?,
                    steps: col(row, 2)?,
                    received_ms: col(row, 3)?,
                })
            })
            .collect()
        })
    }

    fn release_spans(
        &self,
        org_id: &str,
        key_id: &str,
        trace_hex: &str,
        span_hexes: &[String],
    ) -> Result<u64, StoreError> {
        self.read(|db| {
            db.execute(
                "DELETE FROM held_spans
                  WHERE org_name = $1 AND key_id = $2 AND trace_hex = $3 AND span_hex = ANY($4)",
                &[&org_id, &key_id, &trace_hex, &span_hexes],
                "releasing held spans",
            )
        })
    }

    fn due_held_traces(
        &self,
        received_before_ms: i64,
        per_org: usize,
        limit: usize,
    ) -> Result<Vec<HeldTrace>, StoreError> {
        let (per_org, limit) = (per_org as i64, limit as i64);
        self.read(|db| {
            db.query(
"SELECT org_name, key_id, trace_hex FROM (
                       SELECT org_name, key_id, trace_hex,
                              ROW_NUMBER() OVER (PARTITION BY org_name ORDER BY MIN(received_ms), key_id, trace_hex) AS n
                         FROM held_spans WHERE received_ms < $1
                        GROUP BY org_name, key_id, trace_hex) AS due
                      WHERE n <= $2 ORDER BY n, org_name LIMIT $3",
                &[&received_before_ms, &per_org, &limit],
                "reading held spans",
            )?
            .iter()
            .map(|row| {
                Ok(HeldTrace {
                    org_id: col(row, 0)?,
                    key_id: col(row, 1)?,
                    trace_hex: col(row, 2)?,
                })
            })
            .collect()
        })
    }

    fn otel_trace_sessions(
        &self,
        org_id: &str,
        trace_hexes: &[String],
    ) -> Result<Vec<Vec<String>>, StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(vec![Vec::new(); trace_hexes.len()]);
            };
            let mut found = Vec::with_capacity(trace_hexes.len());
            for trace_hex in trace_hexes {
                let prefix = otel_trace_prefix(trace_hex);
                // A trace id of 32 hex digits makes the 38-character key
                // the index holds; any other names no recorded trace.
                if prefix.len() != 38 || !super::reads::storable(&prefix) {
                    found.push(Vec::new());
                    continue;
                }
                let most = TRACE_SESSIONS as i64;
                let rows = db.query(
                    TRACE_SESSIONS_SQL,
                    &[&org, &prefix, &most],
                    "looking up a trace's sessions",
                )?;
                found.push(
                    rows.iter()
                        .map(|row| col(row, 0))
                        .collect::<Result<_, _>>()?,
                );
            }
            Ok(found)
        })
    }
}
