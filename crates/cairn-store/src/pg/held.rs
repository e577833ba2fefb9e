//! PostgreSQL's OTLP spans waiting for their session
//! (`crate::held_spans`), and the look-up of the session a trace's steps
//! were recorded in.

use super::PgStore;
use super::connection::col;
use crate::StoreError;
use crate::held_spans::{HeldSpan, HeldSpans, HeldTrace, otel_trace_prefix};

/// The session of the latest step of an OpenTelemetry trace (`$2`: its
/// step ids' first 38 characters) in org `$1`, through the expression
/// index `entries_by_otel_trace`.
pub(super) const TRACE_SESSION: &str =
    "SELECT s.session_id FROM entries e JOIN sessions s ON s.sid = e.sid
      WHERE e.org = $1 AND starts_with(e.trace_id, 'otel.')
        AND left(e.trace_id, 38) = $2 AND e.type = 'step'
      ORDER BY e.id DESC LIMIT 1";

impl HeldSpans for PgStore {
    fn hold_spans(
        &self,
        org_id: &str,
        key_id: &str,
        spans: &[HeldSpan],
        max_org_bytes: u64,
    ) -> Result<bool, StoreError> {
        let (mut traces, mut ids, mut received, mut bytes, mut steps) =
            (vec![], vec![], vec![], vec![], vec![]);
        for span in spans {
            traces.push(span.trace_hex.as_str());
            ids.push(span.span_hex.as_str());
            received.push(span.received_ms);
            bytes.push(span.steps.len() as i64);
            steps.push(span.steps.as_str());
        }
        let adding: i64 = bytes.iter().sum();
        let max = i64::try_from(max_org_bytes).unwrap_or(i64::MAX);
        self.read(|db| {
            // One statement: the org's total checked and the rows written
            // together (servers of a fleet holding at once may each pass
            // the check: the bound is per statement, about the limit).
            let written = db.execute(
                "INSERT INTO held_spans (org_name, key_id, trace_hex, span_hex, received_ms, bytes, steps)
                 SELECT $1, $2, t, s, r, b, j
                   FROM unnest($3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::text[]) AS u(t, s, r, b, j)
                  WHERE (SELECT COALESCE(SUM(bytes), 0)::bigint FROM held_spans WHERE org_name = $1) + $8::bigint <= $9::bigint
                 ON CONFLICT DO NOTHING",
                &[
                    &org_id, &key_id, &traces, &ids, &received, &bytes, &steps, &adding, &max,
                ],
                "holding spans",
            )?;
            if written > 0 || spans.is_empty() {
                return Ok(true);
            }
            // Nothing written: over the limit, or every span held already
            // (a retry of the export).
            let row = db.query_one(
                "SELECT COALESCE(SUM(bytes), 0)::bigint FROM held_spans WHERE org_name = $1",
                &[&org_id],
                "counting held spans",
            )?;
            let held: i64 = col(&row, 0)?;
            Ok(held.saturating_add(adding) <= max)
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
    ) -> Result<(), StoreError> {
        self.read(|db| {
            db.execute(
                "DELETE FROM held_spans
                  WHERE org_name = $1 AND key_id = $2 AND trace_hex = $3 AND span_hex = ANY($4)",
                &[&org_id, &key_id, &trace_hex, &span_hexes],
                "releasing held spans",
            )?;
            Ok(())
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
    ) -> Result<Vec<Option<String>>, StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(vec![None; trace_hexes.len()]);
            };
            let mut found = Vec::with_capacity(trace_hexes.len());
            for trace_hex in trace_hexes {
                let prefix = otel_trace_prefix(trace_hex);
                // A trace id of 32 hex digits makes the 38-character key
                // the index holds; any other names no recorded trace.
                if prefix.len() != 38 || !super::reads::storable(&prefix) {
                    found.push(None);
                    continue;
                }
                let row = db.query_opt(
                    TRACE_SESSION,
                    &[&org, &prefix],
                    "looking up a trace's session",
                )?;
                found.push(row.map(|row| col(&row, 0)).transpose()?);
            }
            Ok(found)
        })
    }
}
