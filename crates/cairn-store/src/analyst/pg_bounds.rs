//! PostgreSQL's searches whose one call costs the product of its two
//! lengths, bounded: `LIKE`, `ILIKE` (their `~~` operator forms and
//! `LIKE ANY` are refused by the guard), `position`, `replace` and `trim`
//! with a set of characters
//! are written as calls of Cairn's functions (`pg_analyst.sql`), which run
//! the built-in while the product of the two lengths in bytes is at most
//! 64 Mi and fail past it.
//!
//! PostgreSQL acts on `statement_timeout` only where its code checks for
//! interrupts, and these built-ins never do inside one call: one
//! `position` of a 100 KB text in a megabyte ran 64 s past a 5 s limit,
//! a `LIKE '%…b%'` 25 s, a `trim` 21 s, and the time check in front of a
//! call (`time_checks`) cannot stop a call that has started. SQLite's
//! analyst connection replaces the same built-ins by functions of its own
//! (`sqlite/analyst_functions.rs`). Cairn's functions are SQL functions
//! that PostgreSQL inlines when their arguments are columns, so a
//! `LIKE` over a million rows does not become a million function calls.

use super::time_checks;
use sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, ObjectNamePart,
    TrimWhereField, UnaryOperator, VisitorMut,
};
use std::ops::ControlFlow;

/// `NOT <expr>` when `negated`.
fn negate(expr: Expr, negated: bool) -> Expr {
    match negated {
        true => Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr: Box::new(expr),
        },
        false => expr,
    }
}

/// The plain arguments of a call, if it has exactly `n` and nothing else.
fn plain_args(function: &Function, n: usize) -> Option<Vec<Expr>> {
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    if list.args.len() != n || list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return None;
    }
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// Writes the bounded searches of a PostgreSQL query as calls of Cairn's
/// functions in `schema` (see the module documentation).
pub(super) struct PgBounds<'a> {
    pub(super) schema: &'a str,
}

impl PgBounds<'_> {
    /// The bounded form of `expr`, if it is one of the searches.
    fn bounded(&self, expr: &Expr) -> Option<Expr> {
        let call = |name: &str, args: Vec<Expr>| time_checks::call(Some(self.schema), name, args);
        let like = |name: &str, negated: bool, e: &Expr, p: &Expr, escape: &Option<Box<Expr>>| {
            let mut args = vec![e.clone(), p.clone()];
            args.extend(escape.as_deref().cloned());
            negate(call(name, args), negated)
        };
        Some(match expr {
            Expr::Like {
                negated,
                any: false,
                expr,
                pattern,
                escape_char,
            } => like("cairn_like", *negated, expr, pattern, escape_char),
            Expr::ILike {
                negated,
                any: false,
                expr,
                pattern,
                escape_char,
            } => like("cairn_ilike", *negated, expr, pattern, escape_char),
            Expr::Position { expr, r#in } => {
                call("cairn_position", vec![(**expr).clone(), (**r#in).clone()])
            }
            Expr::Trim {
                expr,
                trim_where,
                trim_what: Some(what),
                trim_characters: None,
            } => {
                let name = match trim_where {
                    Some(TrimWhereField::Leading) => "cairn_ltrim",
                    Some(TrimWhereField::Trailing) => "cairn_rtrim",
                    _ => "cairn_btrim",
                };
                call(name, vec![(**expr).clone(), (**what).clone()])
            }
            Expr::Trim {
                expr,
                trim_where: None,
                trim_what: None,
                trim_characters: Some(set),
            } if set.len() == 1 => call("cairn_btrim", vec![(**expr).clone(), set[0].clone()]),
            Expr::Function(function)
                if function.over.is_none()
                    && function.filter.is_none()
                    && function.within_group.is_empty() =>
            {
                let name = match function.name.0.as_slice() {
                    [ObjectNamePart::Identifier(ident)] => ident.value.to_lowercase(),
                    _ => return None,
                };
                if name == "position" {
                    // position(string, substring), the call the syntax
                    // `position(substring IN string)` stands for.
                    let mut args = plain_args(function, 2)?;
                    args.reverse();
                    return Some(call("cairn_position", args));
                }
                let (bounded, arity) = match name.as_str() {
                    "replace" => ("cairn_replace", 3),
                    "btrim" | "trim" => ("cairn_btrim", 2),
                    "ltrim" => ("cairn_ltrim", 2),
                    "rtrim" => ("cairn_rtrim", 2),
                    _ => return None,
                };
                call(bounded, plain_args(function, arity)?)
            }
            _ => return None,
        })
    }
}

impl VisitorMut for PgBounds<'_> {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some(bounded) = self.bounded(expr) {
            *expr = bounded;
        }
        ControlFlow::Continue(())
    }
}
