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
    DataType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectName,
    ObjectNamePart, Query, SetExpr, Statement, TableAlias, TableFactor, Value as SqlValue,
    ValueWithSpan, Visit, VisitMut, Visitor, VisitorMut, With,
};
use sqlparser::parser::Parser;
use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::time::Duration;

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
}

impl Default for QueryLimits {
    fn default() -> QueryLimits {
        QueryLimits {
            max_rows: MAX_ROWS,
            time: TIME_LIMIT,
            max_value_bytes: 16 * 1024 * 1024,
            max_answer_bytes: 16 * 1024 * 1024,
        }
    }
}

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

/// Functions whose first argument is a format string (`printf`, `format`):
/// it must be a literal without `*` and without widths or precisions above
/// [`MAX_FORMAT_WIDTH`], so that no format builds a huge value.
const FORMAT_FUNCTIONS: &[&str] = &["printf", "format"];
/// Largest width or precision a format string may give.
const MAX_FORMAT_WIDTH: u64 = 1000;

/// The type names a cast may name (the first word of the type, lowercase).
const TYPES: &[&str] = &[
    "int",
    "integer",
    "bigint",
    "smallint",
    "int2",
    "int4",
    "int8",
    "real",
    "float",
    "float4",
    "float8",
    "double",
    "numeric",
    "decimal",
    "text",
    "varchar",
    "char",
    "character",
    "boolean",
    "bool",
    "date",
    "time",
    "timestamp",
    "timestamptz",
    "interval",
    "json",
    "jsonb",
    "bytea",
    "blob",
    "uuid",
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
    #[error("the query was stopped after its time limit of {0:?}")]
    TimedOut(Duration),
    /// A value of the answer is larger than the limit.
    #[error("{0}")]
    TooLarge(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The error for a value of column `column` larger than the limit.
pub(crate) fn value_too_large(column: &str, limits: &QueryLimits) -> AnalystError {
    AnalystError::TooLarge(format!(
        "a value of column {} is larger than {} bytes (the limit of one value)",
        shown(column),
        limits.max_value_bytes
    ))
}

fn parse(sql: &str, dialect: Dialect) -> Result<Vec<Statement>, sqlparser::parser::ParserError> {
    match dialect {
        Dialect::Sqlite => Parser::parse_sql(&sqlparser::dialect::SQLiteDialect {}, sql),
        Dialect::Postgres => Parser::parse_sql(&sqlparser::dialect::PostgreSqlDialect {}, sql),
    }
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
    let refuse = |m: String| Err(AnalystError::Refused(m));
    if sql.len() > MAX_SQL_BYTES {
        return refuse(format!(
            "the statement is longer than {MAX_SQL_BYTES} bytes"
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
    match parse(&out, dialect) {
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
    Ok(out)
}

/// The second look at a rewritten query: its WITH starts with Cairn's
/// views, every other CTE has a generated name, and every table named
/// outside Cairn's views is a view or a generated name.
fn check_rewritten(query: &Query, own_views: usize) -> Result<(), String> {
    let with = query.with.as_ref().ok_or("internal: no views")?;
    let mut outside = query.clone();
    if let Some(w) = &mut outside.with {
        for (i, cte) in w.cte_tables.iter().enumerate() {
            let name = &cte.alias.name;
            let ok = if i < own_views {
                name.quote_style.is_none() && VIEWS.get(i) == Some(&name.value.as_str())
            } else {
                is_generated(name)
            };
            if !ok {
                return Err(format!("internal: unexpected CTE {name}"));
            }
        }
        w.cte_tables.drain(..own_views.min(with.cte_tables.len()));
    }
    struct Tables;
    impl Visitor for Tables {
        type Break = String;
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<String> {
            if let Some(with) = &query.with
                && let Some(cte) = with
                    .cte_tables
                    .iter()
                    .find(|c| !is_generated(&c.alias.name))
            {
                return ControlFlow::Break(format!("internal: unexpected CTE {}", cte.alias.name));
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_relation(&mut self, relation: &ObjectName) -> ControlFlow<String> {
            match relation.0.as_slice() {
                [ObjectNamePart::Identifier(ident)]
                    if is_generated(ident)
                        || (ident.quote_style.is_none()
                            && VIEWS.contains(&ident.value.as_str())) =>
                {
                    ControlFlow::Continue(())
                }
                _ => ControlFlow::Break(format!("internal: unexpected table {relation}")),
            }
        }
    }
    match outside.visit(&mut Tables) {
        ControlFlow::Break(reason) => Err(reason),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// The tables a prepared statement (the output of [`prepare`]) names
/// outside Cairn's own three views, as written: what the database
/// resolves by name. For tests and fuzzing: each must be a view or a
/// generated CTE name (`"cairn_cte_<n>"`).
pub fn tables_outside_views(prepared: &str, dialect: Dialect) -> Result<Vec<String>, String> {
    let mut statements = parse(prepared, dialect).map_err(|e| e.to_string())?;
    let Some(Statement::Query(mut query)) = statements.pop() else {
        return Err("not a query".into());
    };
    let with = query.with.as_mut().ok_or("no views")?;
    if with.cte_tables.len() < VIEWS.len() {
        return Err("no views".into());
    }
    with.cte_tables.drain(..VIEWS.len());
    struct Collect(Vec<String>);
    impl Visitor for Collect {
        type Break = ();
        fn pre_visit_relation(&mut self, r: &ObjectName) -> ControlFlow<()> {
            self.0.push(r.to_string());
            ControlFlow::Continue(())
        }
    }
    let mut c = Collect(Vec::new());
    let _ = query.visit(&mut c);
    Ok(c.0)
}

/// Whether `table` (as [`tables_outside_views`] writes it) may appear in
/// a prepared statement: a view or a generated CTE name.
pub fn is_allowed_table(table: &str) -> bool {
    VIEWS.contains(&table)
        || table
            .strip_prefix("\"cairn_cte_")
            .and_then(|rest| rest.strip_suffix('"'))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn is_generated(ident: &Ident) -> bool {
    ident.quote_style == Some('"')
        && ident
            .value
            .strip_prefix(CTE_PREFIX)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
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
    let parsed = parse(&definitions, dialect)
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
            "{}: qualified or computed names are not accepted",
            shown(&name.to_string())
        )),
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

/// An identifier Cairn passes on: unquoted (letters, digits and `_`, not
/// starting with a digit) or double-quoted without `"`, backslash or
/// control characters inside.
fn check_ident(ident: &Ident) -> Result<(), String> {
    let v = &ident.value;
    if v.is_empty() || v.len() > 128 {
        return Err("an identifier must have 1 to 128 bytes".into());
    }
    match ident.quote_style {
        None => {
            let mut chars = v.chars();
            let first_ok = chars.next().is_some_and(|c| c.is_alphabetic() || c == '_');
            if !first_ok || !chars.all(|c| c.is_alphanumeric() || c == '_') {
                return Err(format!(
                    "identifier {}: an unquoted name has letters, digits and _ only",
                    shown(v)
                ));
            }
            Ok(())
        }
        Some('"') => {
            if v.chars()
                .any(|c| c == '"' || c == '\\' || c.is_control() || is_separator(c))
            {
                return Err(format!(
                    "identifier \"{}\": a quoted name may not hold quotes, backslashes or control characters",
                    shown(v)
                ));
            }
            Ok(())
        }
        Some(q) => Err(format!(
            "identifier {q}{}: only double quotes quote a name",
            shown(v)
        )),
    }
}

/// Line and paragraph separators some tools read as line breaks.
fn is_separator(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}' | '\u{85}' | '\u{feff}')
}

/// A literal Cairn passes on: numbers, booleans, NULL and plain
/// single-quoted strings (`''` for a quote; no backslash before a quote).
fn check_value(value: &ValueWithSpan) -> Result<(), String> {
    match &value.value {
        SqlValue::Number(_, false) | SqlValue::Boolean(_) | SqlValue::Null => Ok(()),
        SqlValue::SingleQuotedString(s) => {
            if s.contains("\\'") || s.contains('\0') {
                Err(format!(
                    "string {}: a backslash before a quote, or a NUL, is not accepted",
                    shown(s)
                ))
            } else {
                Ok(())
            }
        }
        SqlValue::Placeholder(p) => Err(format!(
            "parameter {}: a query takes no parameters",
            shown(p)
        )),
        other => Err(format!(
            "literal {}: only numbers, booleans, NULL and '...' strings are accepted",
            shown(&other.to_string())
        )),
    }
}

/// A type a cast may name: a simple built-in type.
fn check_data_type(data_type: &DataType) -> Result<(), String> {
    let text = data_type.to_string().to_lowercase();
    let base = text.split([' ', '(', '[']).next().unwrap_or_default();
    let plain = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || " (),[]_".contains(c));
    if plain && TYPES.contains(&base) {
        Ok(())
    } else {
        Err(format!(
            "type {}: a cast names a built-in type ({})",
            shown(&text),
            TYPES.join(", ")
        ))
    }
}

/// A `printf`/`format` string: no `*`, no width or precision above
/// [`MAX_FORMAT_WIDTH`].
fn check_format(format: &str) -> Result<(), String> {
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        let mut number = String::new();
        while let Some(&d) = chars.peek() {
            chars.next();
            match d {
                '0'..='9' => number.push(d),
                '$' | '.' | '-' | '+' | ' ' | '#' | ',' | '!' | '\'' | 'l' | 'h' | 'q' => {
                    check_width(&number)?;
                    number.clear();
                }
                '*' => {
                    return Err(
                        "a format string may not take its width or precision from an argument (*)"
                            .into(),
                    );
                }
                _ => break,
            }
        }
        check_width(&number)?;
    }
    Ok(())
}

fn check_width(number: &str) -> Result<(), String> {
    let digits = number.trim_start_matches('0');
    if digits.len() > 4 || digits.parse::<u64>().unwrap_or(0) > MAX_FORMAT_WIDTH {
        return Err(format!(
            "a format width or precision is at most {MAX_FORMAT_WIDTH}, not {number}"
        ));
    }
    Ok(())
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
                if cte.from.is_some() {
                    return ControlFlow::Break("WITH ... FROM is not accepted".into());
                }
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
        let alias_types = |alias: &Option<TableAlias>| {
            alias
                .as_ref()
                .is_some_and(|a| a.columns.iter().any(|c| c.data_type.is_some()) || a.at.is_some())
        };
        match factor {
            TableFactor::Table {
                args: Some(_),
                name,
                ..
            } => ControlFlow::Break(format!(
                "table function {} is not accepted",
                shown(&name.to_string())
            )),
            TableFactor::Table {
                alias,
                with_hints,
                version,
                partitions,
                json_path,
                sample,
                index_hints,
                with_ordinality,
                ..
            } => {
                if !with_hints.is_empty()
                    || version.is_some()
                    || !partitions.is_empty()
                    || json_path.is_some()
                    || sample.is_some()
                    || !index_hints.is_empty()
                    || *with_ordinality
                    || alias_types(alias)
                {
                    ControlFlow::Break("table hints, samples and versions are not accepted".into())
                } else {
                    ControlFlow::Continue(())
                }
            }
            TableFactor::Derived { sample, alias, .. } => {
                if sample.is_some() || alias_types(alias) {
                    ControlFlow::Break("table samples are not accepted".into())
                } else {
                    ControlFlow::Continue(())
                }
            }
            TableFactor::NestedJoin { alias, .. } | TableFactor::UNNEST { alias, .. } => {
                if alias_types(alias) {
                    ControlFlow::Break("typed column aliases are not accepted".into())
                } else {
                    ControlFlow::Continue(())
                }
            }
            _ => ControlFlow::Break("this kind of FROM item is not accepted".into()),
        }
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<String> {
        let checked = match expr {
            Expr::Function(function) => (|| {
                let name = single_name(&function.name)?;
                if !FUNCTIONS.contains(&name.as_str()) {
                    return Err(format!(
                        "function {} is not accepted (allowed: {})",
                        shown(&name),
                        FUNCTIONS.join(", ")
                    ));
                }
                if !matches!(function.parameters, FunctionArguments::None)
                    || function.uses_odbc_syntax
                {
                    return Err(format!("this form of {name}(...) is not accepted"));
                }
                if FORMAT_FUNCTIONS.contains(&name.as_str()) {
                    let first = match &function.args {
                        FunctionArguments::List(list) => list.args.first(),
                        _ => None,
                    };
                    match first {
                        Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v)))) => {
                            match &v.value {
                                SqlValue::SingleQuotedString(f) => check_format(f)?,
                                _ => {
                                    return Err(format!(
                                        "{name} takes a format string literal first"
                                    ));
                                }
                            }
                        }
                        _ => return Err(format!("{name} takes a format string literal first")),
                    }
                }
                Ok(())
            })(),
            Expr::Cast {
                data_type, format, ..
            } => {
                if format.is_some() {
                    Err("CAST ... FORMAT is not accepted".into())
                } else {
                    check_data_type(data_type)
                }
            }
            Expr::TypedString(typed) => check_data_type(&typed.data_type),
            Expr::Convert { .. } => Err("CONVERT is not accepted: use CAST".into()),
            _ => Ok(()),
        };
        match checked {
            Ok(()) => ControlFlow::Continue(()),
            Err(reason) => ControlFlow::Break(reason),
        }
    }

    fn pre_visit_ident(&mut self, ident: &Ident) -> ControlFlow<String> {
        match check_ident(ident) {
            Ok(()) => ControlFlow::Continue(()),
            Err(reason) => ControlFlow::Break(reason),
        }
    }

    fn pre_visit_value(&mut self, value: &ValueWithSpan) -> ControlFlow<String> {
        match check_value(value) {
            Ok(()) => ControlFlow::Continue(()),
            Err(reason) => ControlFlow::Break(reason),
        }
    }
}

/// Prefix of the caller's CTE names once renamed.
const CTE_PREFIX: &str = "cairn_cte_";

/// Renames the caller's CTEs and the references to them to generated
/// names, and writes references to the views in Cairn's spelling (see
/// [`prepare`]).
#[derive(Default)]
struct Rename {
    /// Lowercase CTE name to its generated name.
    names: HashMap<String, String>,
}

impl Rename {
    fn generated(&self, name: &Ident) -> Result<Ident, String> {
        self.names
            .get(&name.value.to_lowercase())
            .map(|g| Ident::with_quote('"', g.clone()))
            .ok_or_else(|| format!("unknown table {}", shown(&name.value)))
    }
}

impl VisitorMut for Rename {
    type Break = String;

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<String> {
        if let Some(with) = &mut query.with {
            for cte in &mut with.cte_tables {
                match self.generated(&cte.alias.name) {
                    Ok(g) => cte.alias.name = g,
                    Err(reason) => return ControlFlow::Break(reason),
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<String> {
        // Columns qualified by a CTE's name still resolve: the renamed
        // reference keeps the name as its alias.
        if let TableFactor::Table { name, alias, .. } = factor
            && let [ObjectNamePart::Identifier(ident)] = name.0.as_slice()
            && !VIEWS.contains(&ident.value.to_lowercase().as_str())
            && alias.is_none()
        {
            *alias = Some(TableAlias {
                explicit: true,
                name: ident.clone(),
                columns: Vec::new(),
                at: None,
            });
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_relation(&mut self, relation: &mut ObjectName) -> ControlFlow<String> {
        let [ObjectNamePart::Identifier(ident)] = relation.0.as_mut_slice() else {
            return ControlFlow::Break(format!(
                "{}: qualified or computed names are not accepted",
                shown(&relation.to_string())
            ));
        };
        let lower = ident.value.to_lowercase();
        if let Some(view) = VIEWS.iter().find(|v| **v == lower) {
            *ident = Ident::new(*view);
            return ControlFlow::Continue(());
        }
        match self.generated(ident) {
            Ok(g) => {
                *ident = g;
                ControlFlow::Continue(())
            }
            Err(reason) => ControlFlow::Break(reason),
        }
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
            assert!(
                with_own_cte.contains("\"cairn_cte_0\" AS"),
                "{with_own_cte}"
            );
            assert!(!with_own_cte.contains("recent AS ("), "{with_own_cte}");
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
                            before.ends_with("\"main\".") || before.ends_with("AS "),
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

    /// The review's finding: a double-quoted CTE name held SQL that was
    /// pasted into an unquoted identifier. Names with any text (spaces,
    /// parentheses, comments, Unicode, case tricks) are now renamed to
    /// generated ones, and nothing of theirs reaches the statement as a
    /// table name.
    #[test]
    fn hostile_cte_names_never_become_sql() {
        let names = [
            "x FROM api_keys --",
            "x FROM api_keys /*",
            "x) SELECT * FROM sqlite_master --",
            "a b",
            "(select",
            "--",
            "/*",
            "*/",
            "é; DROP",
            "Ünïcödé 名前",
            "STEPS2",
            "entries",
            "api_keys",
            "sqlite_master",
            "cairn_meta",
            "cairn_cte_0",
            "CAIRN_CTE_1",
            "'",
            ";",
        ];
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            for name in names {
                let quoted = format!("\"{}\"", name.replace('"', "\"\""));
                for sql in [
                    format!("WITH {quoted} AS (SELECT content FROM steps) SELECT * FROM {quoted}"),
                    format!("WITH {quoted}(a) AS (SELECT 1) SELECT {quoted}.a FROM {quoted}"),
                    format!(
                        "WITH RECURSIVE {quoted}(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM {quoted} WHERE n < 3) SELECT n FROM {quoted}"
                    ),
                    format!(
                        "SELECT * FROM (WITH {quoted} AS (SELECT 1 AS x) SELECT x FROM {quoted}) t"
                    ),
                    format!(
                        "WITH {quoted} AS (SELECT 1 AS x) SELECT (SELECT count(*) FROM {quoted}), (SELECT x FROM {quoted} WHERE x IN (SELECT x FROM {quoted}))"
                    ),
                ] {
                    match prepare(&sql, dialect, 7, "main") {
                        Ok(out) => {
                            for table in tables_outside_views(&out, dialect).unwrap() {
                                assert!(is_allowed_table(&table), "{sql}: table {table} in {out}");
                            }
                            for word in ["api_keys", "sqlite_master", "cairn_meta", "--", "/*"] {
                                if !name.contains(word) {
                                    assert!(!out.contains(word), "{sql}: {word} in {out}");
                                }
                            }
                        }
                        Err(AnalystError::Refused(_)) => {}
                        Err(e) => panic!("{sql}: {e}"),
                    }
                }
            }
        }
    }

    /// Identifiers and literals sqlparser would print differently from how
    /// they were read (a backslash before a quote, other quote styles,
    /// control characters) are refused, so that a printed statement cannot
    /// close a name or a string early.
    #[test]
    fn identifiers_and_literals_that_do_not_round_trip_are_refused() {
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            for sql in [
                "SELECT 1 AS \"a\\\"\" FROM api_keys --\" FROM steps",
                "SELECT 'a\\'' , (SELECT 1) FROM steps",
                "SELECT 'x\\'' FROM steps WHERE 'y' = ' UNION SELECT token_hash FROM api_keys --'",
                "WITH \"a\nb\" AS (SELECT 1) SELECT * FROM \"a\nb\"",
                "WITH \"a\u{2028}b\" AS (SELECT 1) SELECT * FROM \"a\u{2028}b\"",
                "SELECT content AS \"x\\\" FROM steps",
                "SELECT $1 FROM steps",
                "SELECT ? FROM steps",
                "SELECT CAST(content AS regclass) FROM steps",
                "SELECT 'api_keys'::regclass",
                "SELECT printf('%.*c', 999999999, 'x')",
                "SELECT printf('%999999999d', 1)",
                "SELECT format('%1000000000s', 'x')",
                "SELECT format(content, 'x') FROM steps",
                "SELECT * FROM steps INDEXED BY entries_by_trace",
            ] {
                assert!(
                    matches!(
                        prepare(sql, dialect, 7, "main"),
                        Err(AnalystError::Refused(_))
                    ),
                    "{dialect:?} {sql}: {:?}",
                    prepare(sql, dialect, 7, "main")
                );
            }
            let sqlite_only = ["SELECT 1 AS `a` FROM steps", "SELECT 1 AS [a] FROM steps"];
            if dialect == Dialect::Sqlite {
                for sql in sqlite_only {
                    assert!(
                        matches!(
                            prepare(sql, dialect, 7, "main"),
                            Err(AnalystError::Refused(_))
                        ),
                        "{sql}"
                    );
                }
            }
            // Ordinary text still works: quotes doubled, LIKE, formats.
            for sql in [
                "SELECT content FROM steps WHERE content LIKE '%don''t%'",
                "SELECT printf('%5.2f %s', confidence, step_type) FROM steps",
                "SELECT \"step_type\", count(*) AS \"how many\" FROM steps GROUP BY 1",
                "SELECT CAST(confidence AS text), CAST(seq AS bigint) FROM steps",
                "SELECT * FROM (VALUES (1, 'a'), (2, 'b')) AS v(n, s)",
                "SELECT s.session_id FROM sessions s WHERE EXISTS (SELECT 1 FROM steps t WHERE t.session_id = s.session_id)",
                "SELECT step_type FROM steps UNION SELECT type FROM records ORDER BY 1",
            ] {
                prepare(sql, dialect, 7, "main").unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
        }
    }
}
