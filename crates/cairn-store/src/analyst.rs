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

use crate::StoreError;
use serde_json::Value;
use sqlparser::ast::{
    Expr, Ident, ObjectName, ObjectNamePart, Query, SetExpr, Statement, TableAlias, TableFactor,
    Visit, VisitMut, Visitor, VisitorMut, With,
};
use sqlparser::parser::Parser;
use std::collections::HashSet;
use std::ops::ControlFlow;

/// At most this many rows are returned.
pub const MAX_ROWS: usize = 10_000;
/// A query running longer is stopped.
pub const TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);
/// Longest statement accepted, in bytes.
const MAX_SQL_BYTES: usize = 64 * 1024;

/// The views a query may read.
pub const VIEWS: [&str; 3] = ["steps", "sessions", "records"];

/// The functions a query may call (lowercase names).
const FUNCTIONS: &[&str] = &[
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "total",
    "group_concat",
    "string_agg",
    "lower",
    "upper",
    "length",
    "char_length",
    "substr",
    "substring",
    "trim",
    "ltrim",
    "rtrim",
    "replace",
    "instr",
    "position",
    "coalesce",
    "ifnull",
    "nullif",
    "abs",
    "round",
    "floor",
    "ceil",
    "ceiling",
    "date",
    "time",
    "datetime",
    "strftime",
    "julianday",
    "unixepoch",
    "date_trunc",
    "to_char",
    "to_timestamp",
    "json_extract",
    "json_array_length",
    "json_type",
    "jsonb_array_length",
    "json_typeof",
    "printf",
    "format",
    "concat",
    "row_number",
    "rank",
    "dense_rank",
    "lag",
    "lead",
    "first_value",
    "last_value",
    "ntile",
    "percent_rank",
    "cume_dist",
    "greatest",
    "least",
    "sign",
    "sqrt",
    "power",
    "ln",
    "log",
    "exp",
    "mod",
];

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
    /// Whether more rows existed than were returned.
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
    /// The query is accepted but failed (an unknown column, a type error,
    /// the time limit).
    #[error("the query failed: {0}")]
    Failed(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Checks `sql` and returns the statement to run: the caller's one
/// read-only query, with the views of org `org` (whose tables live in
/// `schema`) defined ahead of it.
pub fn prepare(
    sql: &str,
    dialect: Dialect,
    org: i64,
    schema: &str,
) -> Result<String, AnalystError> {
    let refuse = |m: String| Err(AnalystError::Refused(m));
    if sql.len() > MAX_SQL_BYTES {
        return refuse(format!(
            "the statement is longer than {MAX_SQL_BYTES} bytes"
        ));
    }
    let parsed = match dialect {
        Dialect::Sqlite => Parser::parse_sql(&sqlparser::dialect::SQLiteDialect {}, sql),
        Dialect::Postgres => Parser::parse_sql(&sqlparser::dialect::PostgreSqlDialect {}, sql),
    };
    let mut statements = match parsed {
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
    // The caller's own CTEs get names no table of any database has, and
    // every reference to them is renamed the same way: a name can then only
    // resolve to one of Cairn's views or to one of the caller's CTEs, never
    // to a real table, whatever scope it is written in.
    let _ = VisitMut::visit(query.as_mut(), &mut Rename);
    let ours = views(dialect, org, schema)?;
    match &mut query.with {
        Some(with) => {
            with.cte_tables.splice(0..0, ours.cte_tables);
        }
        None => query.with = Some(ours),
    }
    Ok(query.to_string())
}

/// The three views of one org, as a WITH clause of the dialect.
fn views(dialect: Dialect, org: i64, schema: &str) -> Result<With, AnalystError> {
    let (lo, hi) = crate::engine::org_range(org);
    let s = schema.replace('"', "");
    let (hex_hash, hex_prev, time, started) = match dialect {
        Dialect::Sqlite => (
            "lower(hex(e.record_hash))".to_owned(),
            "lower(hex(e.prev_hash))".to_owned(),
            "strftime('%Y-%m-%dT%H:%M:%fZ', e.created_at / 1000000.0, 'unixepoch')".to_owned(),
            "strftime('%Y-%m-%dT%H:%M:%fZ', s.started_at / 1000000.0, 'unixepoch')".to_owned(),
        ),
        Dialect::Postgres => (
            "encode(e.record_hash, 'hex')".to_owned(),
            "encode(e.prev_hash, 'hex')".to_owned(),
            "to_char(to_timestamp(e.created_at / 1000000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')".to_owned(),
            "to_char(to_timestamp(s.started_at / 1000000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')".to_owned(),
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
           WHERE e.id >= {lo} AND e.id < {hi} AND e.type = 'step'),
         sessions AS (
           SELECT s.session_id, s.agent_id, s.profile, {started} AS started_at,
             s.started_at AS started_at_us, COALESCE(h.last_index + 1, 0) AS step_count,
             EXISTS (SELECT 1 FROM \"{s}\".entries x WHERE x.sid = s.sid AND x.type = 'seal') AS sealed
           FROM \"{s}\".sessions s LEFT JOIN \"{s}\".session_heads h ON h.sid = s.sid
           WHERE s.org = {org}),
         records AS (
           SELECT e.seq, e.type, e.view FROM \"{s}\".entries e
           WHERE e.id >= {lo} AND e.id < {hi} AND e.type <> 'step')
         SELECT 1"
    );
    let parsed = match dialect {
        Dialect::Sqlite => Parser::parse_sql(&sqlparser::dialect::SQLiteDialect {}, &definitions),
        Dialect::Postgres => {
            Parser::parse_sql(&sqlparser::dialect::PostgreSqlDialect {}, &definitions)
        }
    }
    .map_err(|e| AnalystError::Failed(format!("internal: the views do not parse: {e}")))?;
    match parsed.into_iter().next() {
        Some(Statement::Query(query)) => query
            .with
            .ok_or_else(|| AnalystError::Failed("internal: no views".into())),
        _ => Err(AnalystError::Failed("internal: no views".into())),
    }
}

/// Walks a query and stops at the first thing a read of the org's views
/// must not contain.
#[derive(Default)]
struct Guard {
    relations: HashSet<String>,
    ctes: HashSet<String>,
}

fn single_name(name: &ObjectName) -> Result<String, String> {
    match name.0.as_slice() {
        [ObjectNamePart::Identifier(ident)] => Ok(ident.value.to_lowercase()),
        _ => Err(format!(
            "{name}: qualified or computed names are not accepted"
        )),
    }
}

fn check_body(body: &SetExpr) -> Result<(), String> {
    match body {
        SetExpr::Select(select) if select.into.is_some() => {
            Err("SELECT INTO writes a table".into())
        }
        SetExpr::Select(_) | SetExpr::Query(_) | SetExpr::Values(_) => Ok(()),
        SetExpr::SetOperation { left, right, .. } => {
            check_body(left)?;
            check_body(right)
        }
        SetExpr::Insert(_) | SetExpr::Update(_) | SetExpr::Delete(_) | SetExpr::Merge(_) => {
            Err("a statement that changes data is not accepted, not even inside a query".into())
        }
        SetExpr::Table(_) => Err("TABLE is not accepted: SELECT from a view".into()),
    }
}

impl Visitor for Guard {
    type Break = String;

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<String> {
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                self.ctes.insert(cte.alias.name.value.to_lowercase());
            }
        }
        if !query.locks.is_empty() {
            return ControlFlow::Break(
                "FOR UPDATE and FOR SHARE lock rows; a read does not".into(),
            );
        }
        if query.for_clause.is_some()
            || query.settings.is_some()
            || query.format_clause.is_some()
            || !query.pipe_operators.is_empty()
        {
            return ControlFlow::Break("this query clause is not accepted".into());
        }
        match check_body(&query.body) {
            Ok(()) => ControlFlow::Continue(()),
            Err(reason) => ControlFlow::Break(reason),
        }
    }

    fn pre_visit_relation(&mut self, relation: &ObjectName) -> ControlFlow<String> {
        match single_name(relation) {
            Ok(name) => {
                self.relations.insert(name);
                ControlFlow::Continue(())
            }
            Err(reason) => ControlFlow::Break(reason),
        }
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<String> {
        match factor {
            TableFactor::Table {
                args: Some(_),
                name,
                ..
            } => ControlFlow::Break(format!("table function {name} is not accepted")),
            TableFactor::Table { .. }
            | TableFactor::Derived { .. }
            | TableFactor::NestedJoin { .. }
            | TableFactor::UNNEST { .. } => ControlFlow::Continue(()),
            _ => ControlFlow::Break("this kind of FROM item is not accepted".into()),
        }
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<String> {
        if let Expr::Function(function) = expr {
            match single_name(&function.name) {
                Ok(name) if FUNCTIONS.contains(&name.as_str()) => {}
                Ok(name) => {
                    return ControlFlow::Break(format!(
                        "function {name} is not accepted (allowed: {})",
                        FUNCTIONS.join(", ")
                    ));
                }
                Err(reason) => return ControlFlow::Break(reason),
            }
        }
        ControlFlow::Continue(())
    }
}

/// Prefix of the caller's CTE names once renamed.
const CTE_PREFIX: &str = "cairn_cte_";

/// Renames the caller's CTEs and the references to them (see [`prepare`]).
struct Rename;

impl VisitorMut for Rename {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let Some(with) = &mut query.with {
            for cte in &mut with.cte_tables {
                cte.alias.name = Ident::new(format!(
                    "{CTE_PREFIX}{}",
                    cte.alias.name.value.to_lowercase()
                ));
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table { name, alias, .. } = factor
            && let [ObjectNamePart::Identifier(ident)] = name.0.as_mut_slice()
            && !VIEWS.contains(&ident.value.to_lowercase().as_str())
        {
            let original = ident.clone();
            *ident = Ident::new(format!("{CTE_PREFIX}{}", original.value.to_lowercase()));
            // Columns qualified by the CTE's name still resolve.
            if alias.is_none() {
                *alias = Some(TableAlias {
                    explicit: true,
                    name: original,
                    columns: Vec::new(),
                    at: None,
                });
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn refused(sql: &str, dialect: Dialect) -> String {
        match prepare(sql, dialect, 7, "main") {
            Err(AnalystError::Refused(reason)) => reason,
            other => panic!("{sql}: expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn reads_of_the_views_are_accepted_and_scoped() {
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            let sql = prepare(
                "SELECT step_type, count(*) AS n FROM steps WHERE confidence > 0.5 GROUP BY step_type ORDER BY n DESC",
                dialect,
                7,
                "main",
            )
            .unwrap();
            assert!(sql.starts_with("WITH steps AS ("), "{sql}");
            assert!(sql.contains(&format!("e.id >= {}", 7i64 << 40)), "{sql}");
            let with_own_cte = prepare(
                "WITH recent AS (SELECT * FROM sessions WHERE step_count > 2) SELECT r.session_id, s.content FROM recent r JOIN steps s ON s.session_id = r.session_id",
                dialect,
                7,
                "main",
            )
            .unwrap();
            assert!(with_own_cte.contains("recent AS"), "{with_own_cte}");
        }
    }

    /// A CTE declared in one scope cannot make a same-named reference in
    /// another scope reach the real table: every CTE and every reference to
    /// one is renamed to a name no table has.
    #[test]
    fn cte_names_cannot_unlock_real_tables() {
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            for sql in [
                "SELECT * FROM (WITH entries AS (SELECT 1 AS x) SELECT x FROM entries) t, entries",
                "WITH entries AS (SELECT * FROM entries) SELECT * FROM entries",
                "WITH RECURSIVE api_keys AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM api_keys WHERE n < 3) SELECT * FROM api_keys",
            ] {
                let out = prepare(sql, dialect, 7, "main").unwrap();
                for table in ["entries", "api_keys"] {
                    for (at, _) in out.match_indices(table) {
                        let before = &out[..at];
                        assert!(
                            before.ends_with("\"main\".")
                                || before.ends_with(CTE_PREFIX)
                                || before.ends_with("AS "),
                            "{sql}: a bare {table} at {at} in {out}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn anything_that_writes_or_reaches_outside_is_refused() {
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            for (sql, why) in [
                ("DELETE FROM entries", "reads"),
                ("UPDATE steps SET content = 'x'", "reads"),
                ("INSERT INTO steps VALUES (1)", "reads"),
                ("DROP TABLE entries", "reads"),
                ("CREATE TABLE x (a INT)", "reads"),
                ("SELECT 1; DELETE FROM entries", "exactly one"),
                ("SELECT * FROM entries", "unknown table entries"),
                ("SELECT * FROM main.entries", "qualified"),
                ("SELECT * FROM orgs", "unknown table"),
                (
                    "SELECT * FROM steps s JOIN api_keys k ON 1 = 1",
                    "unknown table api_keys",
                ),
                (
                    "SELECT (SELECT count(*) FROM session_heads)",
                    "unknown table",
                ),
                (
                    "WITH steps AS (SELECT 1) SELECT * FROM steps",
                    "cannot be redefined",
                ),
                (
                    "WITH x AS (SELECT * FROM entries) SELECT * FROM x",
                    "unknown table entries",
                ),
                ("SELECT load_extension('x')", "function load_extension"),
                ("SELECT pg_sleep(10)", "function pg_sleep"),
                ("SELECT * FROM generate_series(1, 10)", "table function"),
                ("SELECT nonsense FROM", "does not parse"),
                ("SELECT * FROM pragma_database_list", "unknown table"),
            ] {
                let reason = refused(sql, dialect);
                assert!(reason.contains(why), "{sql}: {reason}");
            }
        }
        let reason = refused(
            "WITH gone AS (DELETE FROM steps RETURNING *) SELECT * FROM gone",
            Dialect::Postgres,
        );
        assert!(reason.contains("changes data"), "{reason}");
        let reason = refused("SELECT * INTO copy FROM steps", Dialect::Postgres);
        assert!(reason.contains("INTO"), "{reason}");
        let reason = refused("SELECT * FROM steps FOR UPDATE", Dialect::Postgres);
        assert!(reason.contains("lock"), "{reason}");
        let reason = refused("SELECT set_config('x', 'y', false)", Dialect::Postgres);
        assert!(reason.contains("set_config"), "{reason}");
    }
}
