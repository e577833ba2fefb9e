//! The embedded store's OTLP spans waiting for their session
//! (`crate::held_spans`), and the look-up of the session a trace's steps
//! were recorded in.

use super::SqliteStore;
use super::connection::poisoned;
use crate::held_spans::{HeldSpan, HeldSpans, HeldTrace, TRACE_SESSIONS, otel_trace_prefix};
use crate::{DbContext, StoreError};
use rusqlite::params;

impl HeldSpans for SqliteStore {
    fn hold_spans(
        &self,
        org_id: &str,
        key_id: &str,
        spans: &[HeldSpan],
        max_org_bytes: u64,
    ) -> Result<Option<u64>, StoreError> {
        let mut w = self.writer.lock().map_err(|_| poisoned())?;
        let tx = w.conn.transaction().context("holding spans")?;
        // Only the spans not held yet (a retry's are) count and are added.
        let new: Vec<&HeldSpan> = {
            let mut held = tx
                .prepare_cached(
                    "SELECT 1 FROM held_spans
                     WHERE org_name = ?1 AND key_id = ?2 AND trace_hex = ?3 AND span_hex = ?4",
                )
                .context("holding spans")?;
            let mut new = Vec::with_capacity(spans.len());
            for span in spans {
                if !held
                    .exists(params![org_id, key_id, span.trace_hex, span.span_hex])
                    .context("holding spans")?
                {
                    new.push(span);
                }
            }
            new
        };
        let held: i64 = tx
            .query_row(
                "SELECT COALESCE(SUM(bytes), 0) FROM held_spans WHERE org_name = ?1",
                [org_id],
                |r| r.get(0),
            )
            .context("counting held spans")?;
        let adding: u64 = new.iter().map(|s| s.steps.len() as u64).sum();
        if (held as u64).saturating_add(adding) > max_org_bytes {
            return Ok(None);
        }
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO held_spans (org_name, key_id, trace_hex, span_hex, received_ms, bytes, steps)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING",
                )
                .context("holding spans")?;
            for span in &new {
                insert
                    .execute(params![
                        org_id,
                        key_id,
                        span.trace_hex,
                        span.span_hex,
                        span.received_ms,
                        span.steps.len() as i64,
                        span.steps
                    ])
                    .context("holding spans")?;
            }
        }
        tx.commit().context("holding spans")?;
        Ok(Some(new.len() as u64))
    }

    fn held_spans(
        &self,
        org_id: &str,
        key_id: &str,
        trace_hexes: &[String],
    ) -> Result<Vec<HeldSpan>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT span_hex, steps, received_ms FROM held_spans
                     WHERE org_name = ?1 AND key_id = ?2 AND trace_hex = ?3 ORDER BY span_hex",
                )
                .context("reading held spans")?;
            let mut found = Vec::new();
            for trace_hex in trace_hexes {
                let rows = stmt
                    .query_map(params![org_id, key_id, trace_hex], |r| {
                        Ok(HeldSpan {
                            trace_hex: trace_hex.clone(),
                            span_hex: r.get(0)?,
                            steps: r.get(1)?,
                            received_ms: r.get(2)?,
                        })
                    })
                    .context("reading held spans")?;
                for row in rows {
                    found.push(row.context("reading held spans")?);
                }
            }
            Ok(found)
        })
    }

    fn release_spans(
        &self,
        org_id: &str,
        key_id: &str,
        trace_hex: &str,
        span_hexes: &[String],
    ) -> Result<u64, StoreError> {
        let mut w = self.writer.lock().map_err(|_| poisoned())?;
        let tx = w.conn.transaction().context("releasing held spans")?;
        let mut released = 0;
        {
            let mut delete = tx
                .prepare_cached(
                    "DELETE FROM held_spans
                     WHERE org_name = ?1 AND key_id = ?2 AND trace_hex = ?3 AND span_hex = ?4",
                )
                .context("releasing held spans")?;
            for span in span_hexes {
                released += delete
                    .execute(params![org_id, key_id, trace_hex, span])
                    .context("releasing held spans")? as u64;
            }
        }
        tx.commit().context("releasing held spans")?;
        Ok(released)
    }

    fn due_held_traces(
        &self,
        received_before_ms: i64,
        per_org: usize,
        limit: usize,
    ) -> Result<Vec<HeldTrace>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare_cached(
"SELECT org_name, key_id, trace_hex FROM (
                       SELECT org_name, key_id, trace_hex,
                              ROW_NUMBER() OVER (PARTITION BY org_name ORDER BY MIN(received_ms), key_id, trace_hex) AS n
                         FROM held_spans WHERE received_ms < ?1
                        GROUP BY org_name, key_id, trace_hex) AS due
                      WHERE n <= ?2 ORDER BY n, org_name LIMIT ?3",
                )
                .context("reading held spans")?;
            let rows = stmt
                .query_map(params![received_before_ms, per_org as i64, limit as i64], |r| {
                    Ok(HeldTrace {
                        org_id: r.get(0)?,
                        key_id: r.get(1)?,
                        trace_hex: r.get(2)?,
                    })
                })
                .context("reading held spans")?;
            rows.collect::<Result<Vec<_>, _>>()
                .context("reading held spans")
        })
    }

    fn otel_trace_sessions(
        &self,
        org_id: &str,
        trace_hexes: &[String],
    ) -> Result<Vec<Vec<String>>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(vec![Vec::new(); trace_hexes.len()]);
            };
            // The step ids of a trace sort together under the unique index
            // on (org, trace_id), in byte order (SQLite's BINARY
            // collation): `/` follows `.`, so the range is exactly the ids
            // with the prefix; the trace's steps are grouped by session
            // after the range is read (a trace's steps, not the log).
            let mut stmt = c
                .prepare_cached(
                    "SELECT s.session_id FROM entries e JOIN sessions s ON s.sid = e.sid
                     WHERE e.org = ?1 AND e.trace_id >= ?2 AND e.trace_id < ?3 AND e.type = 'step'
                     GROUP BY s.session_id ORDER BY MAX(e.id) DESC LIMIT ?4",
                )
                .context("looking up a trace's session")?;
            trace_hexes
                .iter()
                .map(|trace_hex| {
                    let (from, to) = (otel_trace_prefix(trace_hex), format!("otel.{trace_hex}/"));
                    stmt.query_map(params![org, from, to, TRACE_SESSIONS as i64], |r| r.get(0))
                        .and_then(|rows| rows.collect::<Result<Vec<String>, _>>())
                        .context("looking up a trace's sessions")
                })
                .collect()
        })
    }
}
