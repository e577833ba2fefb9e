//! Analyst SQL on the PostgreSQL store: a read-only transaction with a
//! statement timeout, values capped by the server and rows fetched in
//! small chunks up to the answer's limits, and its errors and values as
//! the caller reads them. Separate because it is the one path that runs
//! caller-written SQL.

use super::PgStore;
use crate::analyst::{self, AnalystError, AnalystResult};
use postgres::types::Type;

/// A value PostgreSQL sent as text, as JSON by its column type.
/// An analyst query's error as the caller should read it.
fn pg_analyst_failure(e: &postgres::Error, limits: &analyst::QueryLimits) -> AnalystError {
    match e.as_db_error() {
        Some(d) if *d.code() == postgres::error::SqlState::QUERY_CANCELED => {
            AnalystError::TimedOut(limits.time)
        }
        Some(d) if *d.code() == postgres::error::SqlState::PROGRAM_LIMIT_EXCEEDED => {
            AnalystError::TooLarge(d.message().to_owned())
        }
        Some(d) => AnalystError::Failed(d.message().to_owned()),
        None => AnalystError::Failed(e.to_string()),
    }
}

fn pg_text_value(text: Option<&str>, ty: &Type) -> serde_json::Value {
    let Some(text) = text else {
        return serde_json::Value::Null;
    };
    let parsed = match *ty {
        Type::INT2 | Type::INT4 | Type::INT8 => text.parse::<i64>().ok().map(Into::into),
        Type::FLOAT4 | Type::FLOAT8 | Type::NUMERIC => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(serde_json::Value::Number),
        Type::BOOL => Some(serde_json::Value::Bool(text == "t" || text == "true")),
        Type::JSON | Type::JSONB => serde_json::from_str(text).ok(),
        _ => None,
    };
    parsed.unwrap_or_else(|| serde_json::Value::String(text.to_owned()))
}

impl PgStore {
    pub(super) fn analyst_query_limited_in(
        &self,
        org_id: &str,
        sql: &str,
        limits: &analyst::QueryLimits,
    ) -> Result<AnalystResult, AnalystError> {
        use postgres::fallible_iterator::FallibleIterator as _;
        let org = self.read(|db| Self::org_id_of(db, org_id))?.unwrap_or(0);
        let (statement, held_columns) =
            analyst::prepare_counted(sql, analyst::Dialect::Postgres, org, &self.schema)?;
        let failed = |e: postgres::Error| pg_analyst_failure(&e, limits);
        self.read(|db| {
            let out = (|| {
                // PostgreSQL starts `statement_timeout` again at each
                // message that parses, plans or fetches (each prepare, the
                // bind, each fetch of the portal): the time left is set
                // before each, so that the query as a whole stops at its
                // limit.
                let deadline = std::time::Instant::now() + limits.time;
                let time_left = |tx: &mut postgres::Transaction<'_>| {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Err(AnalystError::TimedOut(limits.time));
                    }
                    tx.batch_execute(&format!(
                        "SET LOCAL statement_timeout = {}",
                        left.as_millis().max(1)
                    ))
                    .map_err(failed)
                };
                let mut tx = db.client.transaction().map_err(failed)?;
                // Strings are read as the guard read them (no backslash
                // escapes), whatever the server's configuration; no JIT
                // (the bounded functions' costs made PostgreSQL compile
                // plans it then ran in less time than compiling took);
                // the limit of one value for `cairn_bounded`, which every
                // value the query builds passes through (time_checks.rs).
                tx.batch_execute(&format!(
                    "SET TRANSACTION READ ONLY; SET LOCAL statement_timeout = {}; SET LOCAL standard_conforming_strings = on; SET LOCAL jit = off; SET LOCAL cairn.max_value_bytes = {}",
                    limits.time.as_millis().max(1),
                    limits.max_value_bytes.max(1)
                ))
                .map_err(failed)?;
                // Column names and types from the prepared statement.
                let prepared = tx.prepare(&statement).map_err(failed)?;
                let columns: Vec<(String, postgres::types::Type)> = prepared
                    .columns()
                    .iter()
                    .map(|c| (c.name().to_owned(), c.type_().clone()))
                    .collect();
                if columns.len() > analyst::MAX_COLUMNS {
                    return Err(AnalystError::Refused(format!(
                        "an answer has at most {} columns, not {}",
                        analyst::MAX_COLUMNS,
                        columns.len()
                    )));
                }
                // The rows as text, each value capped by the server: a
                // larger one arrives as NULL with a flag, so no value
                // bigger than the limit ever reaches this process; rows
                // are fetched in small chunks and stop at the answer's
                // limit.
                let max = limits.value_limit(columns.len().max(held_columns));
                let (select, names) = if columns.is_empty() {
                    ("1".to_owned(), String::new())
                } else {
                    let select = (0..columns.len())
                        .map(|i| {
                            format!(
                                "CASE WHEN octet_length(c{i}::text) > {max} THEN NULL ELSE c{i}::text END, octet_length(c{i}::text) > {max}"
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(", ");
                    let names = (0..columns.len())
                        .map(|i| format!("c{i}"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    (select, format!("({names})"))
                };
                let limited = format!(
                    "SELECT {select} FROM ({statement}) AS cairn_q{names} LIMIT {}",
                    limits.max_rows + 1
                );
                time_left(&mut tx)?;
                let limited = tx.prepare(&limited).map_err(failed)?;
                time_left(&mut tx)?;
                let portal = tx.bind(&limited, &[]).map_err(failed)?;
                let mut rows = Vec::new();
                let mut truncated = false;
                let mut answer_bytes = 0usize;
                const CHUNK: i32 = 64;
                'fetch: loop {
                    time_left(&mut tx)?;
                    let mut fetched = 0;
                    let mut chunk = tx.query_portal_raw(&portal, CHUNK).map_err(failed)?;
                    while let Some(row) = chunk.next().map_err(failed)? {
                        fetched += 1;
                        if rows.len() == limits.max_rows {
                            truncated = true;
                            break 'fetch;
                        }
                        let mut values = Vec::with_capacity(columns.len());
                        for (i, (name, ty)) in columns.iter().enumerate() {
                            let too_big: Option<bool> = row.try_get(2 * i + 1).map_err(failed)?;
                            if too_big == Some(true) {
                                return Err(analyst::value_too_large(name, max));
                            }
                            let text: Option<&str> = row.try_get(2 * i).map_err(failed)?;
                            answer_bytes += text.map_or(8, str::len);
                            values.push(pg_text_value(text, ty));
                        }
                        if answer_bytes > limits.max_answer_bytes {
                            truncated = true;
                            break 'fetch;
                        }
                        rows.push(values);
                    }
                    if fetched < CHUNK {
                        break;
                    }
                }
                drop(portal);
                tx.rollback().map_err(failed)?;
                Ok(AnalystResult {
                    columns: columns.into_iter().map(|(name, _)| name).collect(),
                    rows,
                    truncated,
                })
            })();
            Ok(out)
        })?
    }
}
