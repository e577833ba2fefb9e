//! Analyst SQL on the embedded store: the connection it runs on (read-only,
//! reading only the ledger's tables, with bounded values) and the query
//! loop that enforces its row, size and time limits. Separate because it
//! is the one path that runs caller-written SQL.

use super::SqliteStore;
use super::connection::open_reader;
use crate::analyst::{self, AnalystError, AnalystResult};
use crate::{DbContext, StoreError};
use rusqlite::Connection;
use std::path::Path;

/// The tables analyst SQL reads through its views (see
/// [`crate::analyst`]); its connection may read no other.
const ANALYST_TABLES: [&str; 3] = ["entries", "sessions", "session_heads"];

/// A connection for analyst SQL: read-only; its authorizer lets a
/// statement read the ledger's tables and nothing else (not `api_keys`,
/// `meta` or `sqlite_master`), run functions and recurse, and refuses every
/// other action (PRAGMA, ATTACH, writes); no string or blob may be longer
/// than the value limit (`SQLITE_LIMIT_LENGTH`), so that no function can
/// build a huge one; and the built-ins whose one call could outlast the
/// time limit are replaced (`analyst_functions`).
/// The page cache of an analyst connection (and of its temporary
/// database: sorts, materialized CTEs), in KiB; SQLite's sorter spills to
/// a temporary file past it.
const ANALYST_CACHE_KIB: u32 = 16 * 1024;

fn open_analyst(
    path: &Path,
    limits: &analyst::QueryLimits,
    deadline: std::time::Instant,
) -> Result<Connection, StoreError> {
    use rusqlite::hooks::{AuthAction, Authorization};
    let mut c = open_reader(path)?;
    // Sorts, materialized CTEs and IN lists write what passes
    // ANALYST_CACHE_KIB to a temporary file (deleted when the connection
    // closes): a hostile query sorting 300 values of 2 MiB by the values
    // held 670 MB in memory.
    c.execute_batch(&format!(
        "PRAGMA temp_store = FILE; PRAGMA cache_size = -{ANALYST_CACHE_KIB}; PRAGMA temp.cache_size = -{ANALYST_CACHE_KIB};"
    ))
    .context("bounding the analyst connection's memory")?;
    let length = i32::try_from(limits.max_value_bytes.max(1)).unwrap_or(i32::MAX);
    c.set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH, length)
        .context("setting the length limit")?;
    // The guard refuses more arguments; SQLite refuses them too.
    c.set_limit(
        rusqlite::limits::Limit::SQLITE_LIMIT_FUNCTION_ARG,
        i32::try_from(analyst::MAX_FUNCTION_ARGUMENTS).unwrap_or(8),
    )
    .context("setting the argument limit")?;
    super::analyst_functions::install(&c, limits.max_value_bytes.max(1), deadline)
        .context("installing the analyst functions")?;
    c.authorizer(Some(|ctx: rusqlite::hooks::AuthContext<'_>| {
        match ctx.action {
            AuthAction::Select | AuthAction::Recursive | AuthAction::Function { .. } => {
                Authorization::Allow
            }
            AuthAction::Read { table_name, .. }
                if ANALYST_TABLES.contains(&table_name)
                    && matches!(ctx.database_name, Some("main")) =>
            {
                Authorization::Allow
            }
            // A recursive CTE's own rows (no database).
            AuthAction::Read { .. } if ctx.database_name.is_none() => Authorization::Allow,
            _ => Authorization::Deny,
        }
    }))
    .context("installing the analyst authorizer")?;
    Ok(c)
}

/// What a query whose allocation failed answers (`sql_too_large`); an
/// analyst worker (`analyst_worker`) names its memory bound instead.
pub(super) const OUT_OF_MEMORY: &str =
    "the query needed more memory than an analyst query may hold";

/// An analyst query's error as the caller should read it.
fn analyst_failure(
    e: rusqlite::Error,
    limits: &analyst::QueryLimits,
    value_limit: usize,
    deadline: std::time::Instant,
) -> AnalystError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::OperationInterrupted) => AnalystError::TimedOut(limits.time),
        // An allocation failed (in a worker: past its memory bound).
        Some(rusqlite::ErrorCode::OutOfMemory) => AnalystError::TooLarge(OUT_OF_MEMORY.into()),
        Some(rusqlite::ErrorCode::TooBig) => AnalystError::TooLarge(format!(
            "a value of the answer would be larger than {value_limit} bytes (the limit of one value in an answer of this many columns)"
        )),
        _ if std::time::Instant::now() > deadline => AnalystError::TimedOut(limits.time),
        // SQLite's own message without the statement: the statement run is
        // Cairn's rewriting of the caller's (the views over the ledger's
        // tables, bounded by the org's internal number and id range),
        // which would tell a tenant how many orgs came before it.
        _ => AnalystError::Failed(match e {
            rusqlite::Error::SqlInputError { msg, .. } => msg,
            rusqlite::Error::SqliteFailure(_, Some(msg)) => msg,
            other => other.to_string(),
        }),
    }
}

impl SqliteStore {
    pub(super) fn analyst_query_limited_in(
        &self,
        org_id: &str,
        sql: &str,
        limits: &analyst::QueryLimits,
    ) -> Result<AnalystResult, AnalystError> {
        let deadline = std::time::Instant::now() + limits.time;
        let org = self.read(|c| Self::org_id_of(c, org_id))?.unwrap_or(0);
        let (statement, held_columns) =
            analyst::prepare_counted(sql, analyst::Dialect::Sqlite, org, "main")?;
        match &limits.worker {
            Some(worker) => super::analyst_worker::run_in_worker(
                worker,
                &super::analyst_worker::WorkerRequest {
                    path: self.path.clone(),
                    statement,
                    held_columns,
                    max_rows: limits.max_rows,
                    time_ms: u64::try_from(limits.time.as_millis()).unwrap_or(u64::MAX),
                    time_left_ms: u64::try_from(
                        deadline
                            .saturating_duration_since(std::time::Instant::now())
                            .as_millis(),
                    )
                    .unwrap_or(u64::MAX),
                    max_value_bytes: limits.max_value_bytes,
                    max_answer_bytes: limits.max_answer_bytes,
                    memory_bytes: worker.memory_bytes,
                    temp_file_bytes: worker.temp_file_bytes,
                    server_pid: std::process::id(),
                },
                limits,
                deadline,
            ),
            None => run_statement(&self.path, &statement, held_columns, limits, deadline),
        }
    }
}

/// Runs a statement the guard has prepared (`analyst::prepare_counted`)
/// on a connection of its own, within `limits` and by `deadline`: in the
/// server's process, or in an analyst worker's.
pub(super) fn run_statement(
    path: &Path,
    statement: &str,
    held_columns: usize,
    limits: &analyst::QueryLimits,
    deadline: std::time::Instant,
) -> Result<AnalystResult, AnalystError> {
    // A connection of its own: read-only, reading only the ledger's
    // tables, with no string longer than the value limit, and a handler
    // that stops a long query.
    let mut c = open_analyst(path, limits, deadline)?;
    c.progress_handler(1_000, Some(move || std::time::Instant::now() > deadline))
        .context("setting the time limit")?;
    // The value limit shrinks once the answer's columns are known.
    let value_limit = std::cell::Cell::new(limits.max_value_bytes);
    let failed = |e: rusqlite::Error| analyst_failure(e, limits, value_limit.get(), deadline);
    let mut stmt = c.prepare(statement).map_err(failed)?;
    let columns: Vec<String> = stmt.column_names().map(str::to_owned).collect();
    if columns.len() > analyst::MAX_COLUMNS {
        return Err(AnalystError::Refused(format!(
            "an answer has at most {} columns, not {}",
            analyst::MAX_COLUMNS,
            columns.len()
        )));
    }
    // No function may build a value past this answer's share (SQLite
    // holds a row's values whole before handing it over).
    value_limit.set(limits.value_limit(columns.len().max(held_columns)));
    let value_limit = value_limit.get();
    c.set_limit(
        rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH,
        i32::try_from(value_limit.max(1)).unwrap_or(i32::MAX),
    )
    .context("setting the length limit")
    .map_err(AnalystError::from)?;
    let mut rows = stmt.query([]).map_err(failed)?;
    let mut out = Vec::new();
    let mut truncated = false;
    let mut answer_bytes = 0usize;
    while let Some(row) = rows.next().map_err(failed)? {
        if out.len() == limits.max_rows {
            truncated = true;
            break;
        }
        if std::time::Instant::now() > deadline {
            return Err(AnalystError::TimedOut(limits.time));
        }
        // Sizes first (read in place), so that a row past the answer's
        // limit is never copied.
        let mut row_bytes = 0usize;
        for (i, name) in columns.iter().enumerate() {
            use rusqlite::types::ValueRef;
            let size = match row.get_ref(i).map_err(failed)? {
                ValueRef::Text(t) => t.len(),
                ValueRef::Blob(b) => 2 * b.len(),
                _ => 8,
            };
            if size > value_limit {
                return Err(analyst::value_too_large(name, value_limit));
            }
            row_bytes += size;
        }
        if answer_bytes + row_bytes > limits.max_answer_bytes {
            truncated = true;
            break;
        }
        let mut values = Vec::with_capacity(columns.len());
        for i in 0..columns.len() {
            use rusqlite::types::ValueRef;
            let value = row.get_ref(i).map_err(failed)?;
            values.push(match value {
                ValueRef::Null => serde_json::Value::Null,
                ValueRef::Integer(n) => n.into(),
                ValueRef::Real(f) => f.into(),
                ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned().into(),
                ValueRef::Blob(b) => hex::encode(b).into(),
            });
        }
        answer_bytes += row_bytes;
        out.push(values);
    }
    Ok(AnalystResult {
        columns,
        rows: out,
        truncated,
    })
}
