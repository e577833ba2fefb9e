//! Time checks inside one row: every call of a scalar function in the
//! caller's query is preceded by a call of [`TIME_CHECK_FUNCTION`], which
//! fails once the query's time is up.
//!
//! Neither database checks its time limit inside the expressions of one
//! row: SQLite runs its progress handler only when its program jumps,
//! from one row to the next, and PostgreSQL acts on `statement_timeout`
//! only where its code checks for interrupts, which a built-in such as
//! `upper` never does. A row of a hundred `length(upper(upper(upper(upper
//! (v)))))` on an 8 MiB value ran for about twenty seconds on SQLite and
//! 80 s on PostgreSQL past a half-second limit, and a few hundred `LIKE`s
//! on SQLite for minutes. Each scalar call `f(...)` is written `CASE WHEN
//! cairn_time_check() THEN f(...) END`: the check runs right before the
//! call, so a query overruns its limit by at most one call and the
//! operators between two calls (whose number the guard bounds). On
//! SQLite the check is a function of the analyst connection that compares
//! the clock with the query's deadline; on PostgreSQL it is a PL/pgSQL
//! function of Cairn's schema that returns true, and running a PL/pgSQL
//! statement checks for interrupts, so the timeout stops the query there.
//! The form keeps the call's own evaluation as it was (its arguments'
//! types, collations and affinities, and `NULL` answers); the check
//! answers true or fails. Aggregate and window calls are not wrapped: they
//! run once per row of their input, and both databases check the time
//! between rows.

use sqlparser::ast::helpers::attached_token::AttachedToken;
use sqlparser::ast::{
    CaseWhen, Expr, Function, FunctionArgumentList, FunctionArguments, Ident, ObjectName,
    ObjectNamePart, Value, VisitorMut,
};
use std::ops::ControlFlow;

/// The function that fails once the query's time is up (registered on
/// SQLite's analyst connection; in Cairn's schema on PostgreSQL, see
/// `pg_schema.sql`; not on the allow-list, so a caller cannot name it).
pub const TIME_CHECK_FUNCTION: &str = "cairn_time_check";

/// Functions that aggregate the rows of a group (with one argument for
/// `min` and `max`, which with two or more are scalar).
const AGGREGATES: &[&str] = &["count", "sum", "avg", "total", "group_concat", "string_agg"];

/// Whether `function` is an aggregate or window call (not wrapped).
fn aggregates(function: &Function) -> bool {
    if function.over.is_some() || function.filter.is_some() || !function.within_group.is_empty() {
        return true;
    }
    let name = function.name.to_string().to_lowercase();
    let arguments = match &function.args {
        FunctionArguments::List(list) => list.args.len(),
        _ => 0,
    };
    AGGREGATES.contains(&name.as_str())
        || (matches!(name.as_str(), "min" | "max") && arguments <= 1)
}

/// `CASE WHEN [<schema>.]cairn_time_check() THEN <expr> END`.
fn checked(expr: Expr, schema: Option<&str>) -> Expr {
    let mut name: Vec<ObjectNamePart> = schema
        .map(|s| ObjectNamePart::Identifier(Ident::with_quote('"', s)))
        .into_iter()
        .collect();
    name.push(ObjectNamePart::Identifier(Ident::new(TIME_CHECK_FUNCTION)));
    let check = Expr::Function(Function {
        name: ObjectName(name),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: Vec::new(),
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    });
    Expr::Case {
        case_token: AttachedToken::empty(),
        end_token: AttachedToken::empty(),
        operand: None,
        conditions: vec![CaseWhen {
            condition: check,
            result: expr,
        }],
        else_result: None,
    }
}

/// Puts a time check before every scalar call of a query (see the module
/// documentation), naming the function in `schema` if given
/// (PostgreSQL: the schema of Cairn's tables).
pub(super) struct TimeChecks<'a> {
    pub(super) schema: Option<&'a str>,
}

impl VisitorMut for TimeChecks<'_> {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let wrap = match expr {
            Expr::Function(function) => !aggregates(function),
            // The special forms of scalar calls.
            Expr::Trim { .. }
            | Expr::Substring { .. }
            | Expr::Position { .. }
            | Expr::Overlay { .. }
            | Expr::Ceil { .. }
            | Expr::Floor { .. }
            // Pattern matches (SQLite's are functions of the analyst
            // connection, which check the time themselves too).
            | Expr::Like { .. }
            | Expr::ILike { .. }
            | Expr::SimilarTo { .. }
            | Expr::RLike { .. } => true,
            _ => false,
        };
        if wrap {
            let call = std::mem::replace(expr, Expr::Value(Value::Null.into()));
            *expr = checked(call, self.schema);
        }
        ControlFlow::Continue(())
    }
}
