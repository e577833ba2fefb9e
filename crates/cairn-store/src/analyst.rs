//! Analyst SQL: read-only queries over one org's reasoning, in the
//! backend's own SQL dialect.
//!
//! A statement is parsed (with `sqlparser`) and accepted only if it is one
//! query that reads: no INSERT, UPDATE, DELETE, MERGE or DDL anywhere (not
//! even inside a CTE), no `SELECT INTO`, no locking clause, no table
//! functions, no schema-qualified names, and only functions from an
//! allow-list. Its tables can only be the three views below, which Cairn
//! defines itself, scoped to the caller's org, as CTEs prepended to the
//! query; any other name is refused. The query then runs on a read-only
//! connection (SQLite) or in a read-only transaction (PostgreSQL), with a
//! time limit and a row limit. So no SQL that Cairn accepts can modify the
//! ledger or read another org.
//!
//! | view | columns |
//! |---|---|
//! | `steps` | `seq`, `trace_id`, `session_id`, `agent_id`, `step_index`, `step_type`, `kind`, `content`, `input_data`, `output_data`, `confidence`, `duration_ms`, `token_count`, `model`, `metadata`, `created_at`, `created_at_us`, `turn_id`, `turn_step`, `task_id`, `links`, `status`, `erased`, `has_embedding`, `current_hash`, `prev_hash` |
//! | `sessions` | `session_id`, `agent_id`, `profile`, `started_at`, `started_at_us`, `step_count`, `sealed` |
//! | `records` | `seq`, `type`, `view` (operational records: session starts, seals, erasures, reviews, key registrations, audit events, signed traces; `view` is their JSON) |
//!
//! This file holds the limits, the views and [`prepare`], which runs the
//! steps in order; the first look at the caller's query (the allow-lists
//! and their checks) is in `guard`, the renaming of its CTEs and the
//! second look at the rewritten statement in `rewrite`.

use crate::StoreError;
use serde_json::Value;
use sqlparser::ast::{Statement, Visit, VisitMut, With};
use sqlparser::parser::Parser;
use std::ops::ControlFlow;
use std::time::Duration;

mod checks;
mod guard;
mod pg_bounds;
mod rewrite;
mod sizes;
mod time_checks;
use guard::Guard;
#[cfg(test)]
use guard::WILDCARD_COLUMNS;
pub use guard::{MAX_EXPRESSIONS, MAX_FUNCTION_ARGUMENTS, MAX_LIST_EXPRESSIONS};
use pg_bounds::PgBounds;
use rewrite::{CTE_PREFIX, Fences, Rename, check_rewritten};
pub use rewrite::{is_allowed_table, tables_outside_views};
pub use time_checks::TIME_CHECK_FUNCTION;
use time_checks::{KeepNames, TimeChecks};

/// At most this many rows are returned (the default of
/// [`QueryLimits::max_rows`], and the largest a caller may ask for).
pub const MAX_ROWS: usize = 10_000;
/// A query running longer is stopped (the default of [`QueryLimits::time`]).
pub const TIME_LIMIT: Duration = Duration::from_secs(5);
/// Longest statement accepted, in bytes.
const MAX_SQL_BYTES: usize = 64 * 1024;
/// Most columns an answer may have.
pub const MAX_COLUMNS: usize = 100;

/// What one analyst query may cost. Every bound is enforced by the backend
/// while the query runs, not after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryLimits {
    /// At most this many rows are returned; more set `truncated`.
    pub max_rows: usize,
    /// The query is stopped after this long (SQLite: a progress handler;
    /// PostgreSQL: `statement_timeout`).
    pub time: Duration,
    /// Largest single value, in bytes: a bigger one fails the query
    /// ([`AnalystError::TooLarge`]). On SQLite this is also
    /// `SQLITE_LIMIT_LENGTH`, so no function can even build a bigger string
    /// (`printf('%.*c', 999999999, 'x')` fails at once); it must stay above
    /// the largest stored row.
    pub max_value_bytes: usize,
    /// Largest answer (the sum of its values' sizes), in bytes: rows past it
    /// are dropped and `truncated` is set.
    pub max_answer_bytes: usize,
    /// On SQLite, run each query in a process of its own with these bounds
    /// (`None`: in the calling process). PostgreSQL runs queries in the
    /// database's own backends and ignores it.
    pub worker: Option<WorkerLimits>,
}

/// A process of its own for each analyst query on SQLite: what the
/// database's own limits cannot bound (the memory of one row's values and
/// of sorts, the temporary files sorts spill to, the time one call of a
/// built-in takes between two progress checks) is bounded by the
/// operating system, and a query past its time limit is killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerLimits {
    /// The program to start (the `cairn` binary) and the arguments that
    /// make it run [`crate::analyst_worker_main`].
    pub program: std::path::PathBuf,
    /// Arguments before the request (for `cairn`: `analyst-worker`).
    pub args: Vec<String>,
    /// Bytes of heap the process may hold (`RLIMIT_DATA`): past them an
    /// allocation fails and the query answers `sql_too_large`.
    pub memory_bytes: u64,
    /// Bytes any one file the process writes may reach (`RLIMIT_FSIZE`):
    /// SQLite's temporary files of sorts and materialized queries.
    pub temp_file_bytes: u64,
}

impl Default for QueryLimits {
    fn default() -> QueryLimits {
        QueryLimits {
            max_rows: MAX_ROWS,
            time: TIME_LIMIT,
            max_value_bytes: 16 * 1024 * 1024,
            max_answer_bytes: 16 * 1024 * 1024,
            worker: None,
        }
    }
}

impl QueryLimits {
    /// The largest value of an answer of `columns` columns: the value
    /// limit, but no more than an equal share of the answer limit (never
    /// under 2 MiB, about the largest value a request can store), so that
    /// one row of many huge columns cannot make the server hold many times
    /// the answer limit before the answer's size is even checked.
    pub fn value_limit(&self, columns: usize) -> usize {
        let share = (self.max_answer_bytes / columns.max(1)).max(2 * 1024 * 1024);
        self.max_value_bytes.min(share)
    }
}

/// The views a query may read.
pub const VIEWS: [&str; 3] = ["steps", "sessions", "records"];

/// Which SQL the backend speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

/// A query's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalystResult {
    /// Column names, in order.
    pub columns: Vec<String>,
    /// Rows of JSON values (numbers, strings, booleans, nulls).
    pub rows: Vec<Vec<Value>>,
    /// Whether more rows existed than were returned (the row limit or the
    /// answer's byte limit).
    pub truncated: bool,
}

/// Why a query gave no answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnalystError {
    /// The statement is not one Cairn accepts (it would write, or read
    /// something other than the org's views).
    #[error("refused: {0}")]
    Refused(String),
    /// The query is accepted but failed (an unknown column, a type error).
    #[error("the query failed: {0}")]
    Failed(String),
    /// The query ran longer than its time limit and was stopped.
    #[error("the query was stopped after its time limit of {} ms", .0.as_millis())]
    TimedOut(Duration),
    /// A value of the answer is larger than the limit.
    #[error("{0}")]
    TooLarge(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The error for a value of column `column` larger than the limit.
pub(crate) fn value_too_large(column: &str, limit: usize) -> AnalystError {
    AnalystError::TooLarge(format!(
        "a value of column {} is larger than {limit} bytes (the limit of one value in an answer of this many columns)",
        shown(column),
    ))
}

/// How deep a caller's statement may nest (sqlparser's default).
const CALLER_DEPTH: usize = 50;
/// How deep a prepared statement may nest: the caller's, with Cairn's
/// views around it, and a `CASE` and on PostgreSQL a bound around each
/// checked call or operator (`time_checks`): two levels more for each,
/// and a chain (`a || b || c ...`, which sqlparser reads in a loop
/// whatever its length) nests each link inside the next once wrapped.
/// The statement is read on a thread whose stack holds this depth.
const PREPARED_DEPTH: usize = 2 * CALLER_DEPTH + 3 * guard::MAX_EXPRESSIONS + 10;

fn parse(sql: &str, dialect: Dialect) -> Result<Vec<Statement>, sqlparser::parser::ParserError> {
    parse_nested(sql, dialect, CALLER_DEPTH)
}

fn parse_nested(
    sql: &str,
    dialect: Dialect,
    depth: usize,
) -> Result<Vec<Statement>, sqlparser::parser::ParserError> {
    let parser = |d: &dyn sqlparser::dialect::Dialect| {
        Parser::new(d)
            .with_recursion_limit(depth)
            .try_with_sql(sql)?
            .parse_statements()
    };
    match dialect {
        Dialect::Sqlite => parser(&sqlparser::dialect::SQLiteDialect {}),
        Dialect::Postgres => parser(&sqlparser::dialect::PostgreSqlDialect {}),
    }
}

/// Text of the caller's quoted in a message: at most 64 characters,
/// control characters escaped.
fn shown(text: &str) -> String {
    let mut out: String = text.chars().take(64).flat_map(char::escape_debug).collect();
    if text.chars().count() > 64 {
        out.push_str("...");
    }
    out
}

/// Checks `sql` and returns the statement to run: the caller's one
/// read-only query, with the views of org `org` (whose tables live in
/// `schema`) defined ahead of it.
///
/// No text of the caller's becomes a table name: every table the caller
/// names is either one of the three views (written back as Cairn's own
/// spelling) or one of the caller's CTEs, which are renamed to generated
/// names (`cairn_cte_0`, ...), declarations and references alike. Every
/// identifier and literal the caller wrote must be plain (no quote or
/// backslash inside, no control character, only `"` quoting), and the
/// printed statement is parsed again and must be exactly the statement
/// that was checked, so that what the database reads is what was checked.
pub fn prepare(
    sql: &str,
    dialect: Dialect,
    org: i64,
    schema: &str,
) -> Result<String, AnalystError> {
    prepare_counted(sql, dialect, org, schema).map(|prepared| prepared.0)
}

/// [`prepare`], with the number of columns its SELECTs list together (a
/// `*` counted as about a view's): the backends share the answer's size
/// among these, not only among the answer's own columns, when they bound
/// each value ([`QueryLimits::value_limit`]), since the database holds a
/// row of every nested query at once.
pub fn prepare_counted(
    sql: &str,
    dialect: Dialect,
    org: i64,
    schema: &str,
) -> Result<(String, usize), AnalystError> {
    // sqlparser builds left-deep chains (`1 + 1 + ...`, `SELECT 1 UNION
    // SELECT 1 ...`) in a loop, past its recursion limit, but cloning,
    // printing, comparing and dropping a tree recurse once per link: a
    // statement of a few thousand links overflowed a blocking thread's
    // 2 MiB stack and aborted the server. The tree lives and dies on a
    // thread of its own with a stack for the deepest chain the token
    // bound lets through.
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("cairn-analyst-prepare".into())
            .stack_size(PREPARE_STACK_BYTES)
            .spawn_scoped(scope, || prepare_here(sql, dialect, org, schema))
            .map_err(|e| AnalystError::Failed(format!("no thread to read the statement: {e}")))?
            .join()
            .unwrap_or_else(|_| {
                Err(AnalystError::Refused(
                    "the statement could not be read".into(),
                ))
            })
    })
}

/// Stack of the thread that reads a statement ([`prepare`]): at most
/// [`MAX_TOKENS`] tokens make a chain of a few thousand links, a few
/// kilobytes of stack each at most.
const PREPARE_STACK_BYTES: usize = 256 << 20;

/// Most tokens (words, names, literals, operators, punctuation) a
/// statement may hold: bounds how deep its tree can be.
pub const MAX_TOKENS: usize = 16_384;

/// [`prepare`], on the thread it runs on.
fn prepare_here(
    sql: &str,
    dialect: Dialect,
    org: i64,
    schema: &str,
) -> Result<(String, usize), AnalystError> {
    let refuse = |m: String| Err(AnalystError::Refused(m));
    if sql.len() > MAX_SQL_BYTES {
        return refuse(format!(
            "the statement is longer than {MAX_SQL_BYTES} bytes"
        ));
    }
    let tokens = sqlparser::tokenizer::Tokenizer::new(&sqlparser::dialect::GenericDialect {}, sql)
        .tokenize()
        .map(|tokens| {
            tokens
                .iter()
                .filter(|t| !matches!(t, sqlparser::tokenizer::Token::Whitespace(_)))
                .count()
        })
        .unwrap_or(0);
    if tokens > MAX_TOKENS {
        return refuse(format!(
            "the statement holds more than {MAX_TOKENS} tokens ({tokens}): join with a CTE instead of listing values"
        ));
    }
    let mut statements = match parse(sql, dialect) {
        Ok(statements) => statements,
        Err(e) => return refuse(format!("the statement does not parse: {e}")),
    };
    if statements.len() != 1 {
        return refuse(format!(
            "exactly one statement is accepted, not {}",
            statements.len()
        ));
    }
    let Some(Statement::Query(mut query)) = statements.pop() else {
        return refuse(
            "only a query that reads (SELECT or WITH ... SELECT) is accepted: the ledger cannot be changed through SQL".into(),
        );
    };
    let mut guard = Guard::default();
    if let ControlFlow::Break(reason) = query.visit(&mut guard) {
        return refuse(reason);
    }
    let held_columns = guard.held_columns;
    for name in &guard.ctes {
        if VIEWS.contains(&name.as_str()) {
            return refuse(format!(
                "{name} is one of Cairn's views and cannot be redefined"
            ));
        }
    }
    for name in &guard.relations {
        if !VIEWS.contains(&name.as_str()) && !guard.ctes.contains(name) {
            return refuse(format!(
                "unknown table {name}: a query reads the views steps, sessions and records"
            ));
        }
    }
    // The caller's CTEs get generated names, and every table reference is
    // rewritten to a view or to one of those names: a name can then only
    // resolve to one of Cairn's views or to one of the caller's CTEs, never
    // to a real table, whatever scope it is written in.
    // The result columns whose calls are rewritten below keep their
    // names, taken from the statement as the caller wrote it (before the
    // renaming and the fences, whose text SQLite would put in a name).
    let _ = VisitMut::visit(query.as_mut(), &mut KeepNames { dialect });
    let mut rename = Rename::default();
    let mut ctes: Vec<&String> = guard.ctes.iter().collect();
    ctes.sort();
    for (i, name) in ctes.into_iter().enumerate() {
        rename
            .names
            .insert(name.clone(), format!("{CTE_PREFIX}{i}"));
    }
    if let ControlFlow::Break(reason) = VisitMut::visit(query.as_mut(), &mut rename) {
        return refuse(reason);
    }
    // No nested query is merged into the one around it (which would copy
    // its expressions into every place that names its columns).
    let _ = VisitMut::visit(query.as_mut(), &mut Fences);
    // PostgreSQL's searches that never check for interrupts are bounded.
    if dialect == Dialect::Postgres {
        let _ = VisitMut::visit(query.as_mut(), &mut PgBounds { schema });
    }
    // Neither database checks its time limit inside one row's
    // expressions: each scalar call checks it first.
    let mut checks = TimeChecks {
        schema: (dialect == Dialect::Postgres).then_some(schema),
        cast_arrays: Default::default(),
    };
    let _ = VisitMut::visit(query.as_mut(), &mut checks);
    let ours = views(dialect, org, schema)?;
    let own_views = ours.cte_tables.len();
    match &mut query.with {
        Some(with) => {
            with.cte_tables.splice(0..0, ours.cte_tables);
        }
        None => query.with = Some(ours),
    }
    let statement = Statement::Query(query);
    let out = statement.to_string();
    // What the database will read is what was checked: the printed
    // statement parses back to the same tree, and every table in it, past
    // Cairn's views, is a view or a generated name.
    match parse_nested(&out, dialect, PREPARED_DEPTH) {
        Ok(again) if again.len() == 1 && again[0] == statement => {}
        _ => {
            return refuse(
                "the statement cannot be passed on unchanged (an identifier or literal Cairn cannot reproduce exactly): simplify its names and strings".into(),
            );
        }
    }
    if let Statement::Query(query) = &statement {
        check_rewritten(query, own_views).map_err(AnalystError::Refused)?;
    }
    Ok((out, held_columns))
}

/// What ends each view's query so that the caller's conditions run only on
/// the rows the view gives, never inside it: neither SQLite nor PostgreSQL
/// flattens a subquery with a LIMIT into the query around it or pushes that
/// query's conditions into it (either would change what a LIMIT returns).
/// Without it a planner may evaluate a caller's condition on another org's
/// rows before the view's org filter (a join driven from `sessions`), and a
/// condition that fails (`CAST(session_id AS int)`) would name the value
/// it failed on in its error: another org's session ids. The cost is that
/// a caller's condition cannot use an index: a query reads its org's whole
/// view.
const FENCE: &str = "LIMIT 9223372036854775807";

/// A column of microseconds since the epoch as the API writes times
/// (RFC 3339 UTC with six fractional digits, as PostgreSQL's `US` gives):
/// SQLite's `%f` has only milliseconds, so an analyst's `created_at =
/// '...932320Z'` copied from an answer found nothing. The seconds are
/// floored (a time before 1970 has a negative remainder in SQLite).
fn sqlite_time(column: &str) -> String {
    let fraction = format!("(({column} % 1000000) + 1000000) % 1000000");
    format!(
        "strftime('%Y-%m-%dT%H:%M:%S', ({column} - {fraction}) / 1000000, 'unixepoch') || printf('.%06dZ', {fraction})"
    )
}

/// [`sqlite_time`] on PostgreSQL: whole seconds and microseconds added
/// apart, each exact (`bigint * interval` goes through a double, which
/// loses microseconds far from 1970: a review found 9999-12-31T23:59:59.999999
/// shown as 10000-01-01).
fn postgres_time(column: &str) -> String {
    format!(
        "to_char(timestamp '1970-01-01' + ({column} / 1000000) * interval '1 second' + ({column} % 1000000) * interval '1 microsecond', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
    )
}

/// The three views of one org, as a WITH clause of the dialect.
fn views(dialect: Dialect, org: i64, schema: &str) -> Result<With, AnalystError> {
    let (lo, hi) = crate::engine::org_range(org);
    let s = schema.replace('"', "");
    let (hex_hash, hex_prev, time, started) = match dialect {
        Dialect::Sqlite => (
            "lower(hex(e.record_hash))".to_owned(),
            "lower(hex(e.prev_hash))".to_owned(),
            sqlite_time("e.created_at"),
            sqlite_time("s.started_at"),
        ),
        Dialect::Postgres => (
            "encode(e.record_hash, 'hex')".to_owned(),
            "encode(e.prev_hash, 'hex')".to_owned(),
            postgres_time("e.created_at"),
            postgres_time("s.started_at"),
        ),
    };
    let definitions = format!(
        "WITH steps AS (
           SELECT e.seq, e.trace_id, s.session_id, e.agent_id, e.step_index, e.kind_label AS step_type,
             e.kind, e.content, e.input_data, e.output_data, e.confidence, e.duration_ms, e.token_count,
             e.model, e.metadata, {time} AS created_at, e.created_at AS created_at_us, e.turn_id,
             e.turn_step, e.task_id, e.links, e.status, e.erased, e.has_embedding,
             {hex_hash} AS current_hash, {hex_prev} AS prev_hash
           FROM \"{s}\".entries e JOIN \"{s}\".sessions s ON s.sid = e.sid
           WHERE e.id >= {lo} AND e.id < {hi} AND e.type = 'step' AND s.org = {org} {FENCE}),
         sessions AS (
           SELECT s.session_id, s.agent_id, s.profile, {started} AS started_at,
             s.started_at AS started_at_us, COALESCE(h.last_index + 1, 0) AS step_count,
             EXISTS (SELECT 1 FROM \"{s}\".entries x WHERE x.sid = s.sid AND x.type = 'seal') AS sealed
           FROM \"{s}\".sessions s LEFT JOIN \"{s}\".session_heads h ON h.sid = s.sid
           WHERE s.org = {org} {FENCE}),
         records AS (
           SELECT e.seq, e.type, e.view FROM \"{s}\".entries e
           WHERE e.id >= {lo} AND e.id < {hi} AND e.type <> 'step' {FENCE})
         SELECT 1"
    );
    let parsed = parse(&definitions, dialect)
        .map_err(|e| AnalystError::Failed(format!("internal: the views do not parse: {e}")))?;
    match parsed.into_iter().next() {
        Some(Statement::Query(query)) => query
            .with
            .ok_or_else(|| AnalystError::Failed("internal: no views".into())),
        _ => Err(AnalystError::Failed("internal: no views".into())),
    }
}

#[cfg(test)]
mod tests;
