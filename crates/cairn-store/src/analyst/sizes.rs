//! What a caller's query costs the database, counted before it runs:
//! the size of its expressions as both databases build them (literals and
//! parentheses free, PostgreSQL's copies of the left side of `BETWEEN`
//! and `IN` counted), and what naming a result column elsewhere copies.
//! The guard ([`super::guard`]) bounds these against [`MAX_EXPRESSIONS`](super::guard::MAX_EXPRESSIONS).

use sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, ObjectNamePart, OrderBy, OrderByKind, Select, SelectItem,
    Value as SqlValue, Visit, Visitor,
};
use std::collections::HashMap;
use std::ops::ControlFlow;

/// Whether `expr` is a literal: a value, a typed string, a negated or
/// parenthesized literal. A row of literals is not: PostgreSQL compares a
/// row with a list of rows as one comparison per row, each with its own
/// copy of the left side (3,000 rows of literals took 12 GB).
pub(super) fn is_literal(expr: &Expr) -> bool {
    match expr {
        Expr::Value(_) | Expr::TypedString(_) => true,
        Expr::UnaryOp { expr, .. } | Expr::Nested(expr) => is_literal(expr),
        _ => false,
    }
}

/// Whether `expr` counts towards [`MAX_EXPRESSIONS`](super::guard::MAX_EXPRESSIONS): literals do not,
/// nor do parentheses (neither database keeps them).
pub(super) fn counts(expr: &Expr) -> bool {
    !is_literal(expr) && !matches!(expr, Expr::Nested(_))
}

/// The sizes of expressions as the databases build them, found after
/// each expression's parts (post-order): an expression that is not a
/// literal counts one, plus its parts, plus the copies PostgreSQL makes
/// of a part while it reads the query. PostgreSQL writes
/// `x BETWEEN a AND b` as `x >= a AND x <= b`, and `x IN (a, b, ...)` as
/// one comparison `x = item` for each item that is not a literal (the
/// literals share one comparison, unless `x` is a row or an array, where
/// each has its own): each comparison holds its own copy of
/// `x`, so nesting them grows the query exponentially before any row is
/// read (22 nested BETWEENs ran out of memory; nested IN lists of column
/// names grow 32 times a level). Counted for both databases alike.
#[derive(Default)]
pub(super) struct Sizes {
    /// One frame for each expression being walked: the sizes of its
    /// parts found so far, in the order they appear.
    frames: Vec<Vec<usize>>,
    /// The sizes of the outermost expressions walked, summed.
    total: usize,
}

impl Sizes {
    /// Starts an expression (before its parts are walked).
    pub(super) fn enter(&mut self) {
        self.frames.push(Vec::new());
    }

    /// Ends `expr` (after its parts): hands its size to the expression
    /// around it and answers what the copies of its parts add.
    pub(super) fn leave(&mut self, expr: &Expr) -> usize {
        let parts = self.frames.pop().unwrap_or_default();
        let own = usize::from(counts(expr));
        let copies = copied_parts(expr, &parts);
        let size = parts
            .iter()
            .fold(own, |sum, part| sum.saturating_add(*part))
            .saturating_add(copies);
        match self.frames.last_mut() {
            Some(around) => around.push(size),
            None => self.total = self.total.saturating_add(size),
        }
        copies
    }
}

impl Visitor for Sizes {
    type Break = ();
    fn pre_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<()> {
        self.enter();
        ControlFlow::Continue(())
    }
    fn post_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
        self.leave(expr);
        ControlFlow::Continue(())
    }
}

/// What PostgreSQL's copies of `expr`'s left side add to its size
/// (`parts` are its parts' sizes; the left side is the first).
fn copied_parts(expr: &Expr, parts: &[usize]) -> usize {
    let left = parts.first().copied().unwrap_or(0);
    match expr {
        Expr::Between { .. } => left,
        Expr::InList { expr, list, .. } => {
            let computed = list.iter().filter(|item| !is_literal(item)).count();
            // The literals share one comparison only when their type has
            // an array type and is not a row; a left side that may be a
            // row or an array (`CASE ... THEN (a, b) END IN (NULL, NULL)`)
            // gets one comparison per literal.
            let literals = list.len() - computed;
            let comparisons = computed
                + match scalar(expr) {
                    true => usize::from(literals > 0),
                    false => literals,
                };
            comparisons.saturating_sub(1).saturating_mul(left)
        }
        _ => 0,
    }
}

/// Allowed calls whose value has their arguments' type, so may be a row
/// or an array; every other call on the guard's allow-list answers a
/// plain value.
const ARGUMENT_TYPED: &[&str] = &[
    "coalesce",
    "ifnull",
    "nullif",
    "min",
    "max",
    "lag",
    "lead",
    "first_value",
    "last_value",
    "greatest",
    "least",
];

/// Whether `expr`'s value is never a row or an array (what PostgreSQL
/// needs to compare it with a list of literals in one comparison): a name
/// (a column; a whole row named alone costs one name a copy), a literal,
/// a cast to a type that is not an array, a comparison, a test, a JSON
/// path, arithmetic or concatenation of such values, a call of
/// an allowed function that is not [`ARGUMENT_TYPED`], or of the special forms (`SUBSTRING`, `TRIM`,
/// `POSITION`, `EXTRACT`, `CEIL`, `FLOOR`). Errs towards "may be" (a
/// name is taken as scalar: copies of a name cost one each, and nothing
/// nests inside one).
fn scalar(expr: &Expr) -> bool {
    match expr {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => true,
        _ if is_literal(expr) => true,
        Expr::Nested(inner) | Expr::UnaryOp { expr: inner, .. } => scalar(inner),
        Expr::Cast { data_type, .. } => !data_type.to_string().contains('['),
        Expr::BinaryOp { op, left, right } => match op {
            _ if is_comparison(op) => true,
            BinaryOperator::And | BinaryOperator::Or => true,
            // JSON paths answer json, jsonb or text.
            BinaryOperator::Arrow
            | BinaryOperator::LongArrow
            | BinaryOperator::HashArrow
            | BinaryOperator::HashLongArrow => true,
            BinaryOperator::Plus
            | BinaryOperator::Minus
            | BinaryOperator::Multiply
            | BinaryOperator::Divide
            | BinaryOperator::Modulo
            | BinaryOperator::StringConcat => scalar(left) && scalar(right),
            _ => false,
        },
        Expr::Substring { .. }
        | Expr::Trim { .. }
        | Expr::Position { .. }
        | Expr::Extract { .. }
        | Expr::Ceil { .. }
        | Expr::Floor { .. } => true,
        Expr::IsNull(_)
        | Expr::IsNotNull(_)
        | Expr::IsTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsNotTrue(_)
        | Expr::IsNotFalse(_)
        | Expr::IsDistinctFrom(..)
        | Expr::IsNotDistinctFrom(..)
        | Expr::Like { .. }
        | Expr::ILike { .. }
        | Expr::InList { .. }
        | Expr::InSubquery { .. }
        | Expr::Between { .. }
        | Expr::Exists { .. } => true,
        // The guard refuses any call off its allow-list.
        Expr::Function(function) => match function.name.0.as_slice() {
            [ObjectNamePart::Identifier(name)] => {
                !ARGUMENT_TYPED.contains(&name.value.to_lowercase().as_str())
            }
            _ => false,
        },
        _ => false,
    }
}

/// The size of `node`'s expressions (what [`MAX_EXPRESSIONS`](super::guard::MAX_EXPRESSIONS) counts):
/// those that are not literals, with the copies [`Sizes`] describes.
pub(super) fn expression_size<V: Visit + ?Sized>(node: &V) -> usize {
    let mut sizes = Sizes::default();
    let _ = node.visit(&mut sizes);
    sizes.total
}

/// What naming result columns outside the select list costs: SQLite
/// reads a name in `WHERE`, `HAVING`, `GROUP BY`, `ORDER BY` or a join's
/// `ON` that is a result column's alias, and a `GROUP BY` or `ORDER BY`
/// position (`GROUP BY 1`), as a copy of that column's expression, so
/// each costs the expressions it stands for (a 30-term alias named 30
/// times in `WHERE` ran 33 s in one row; `GROUP BY 1, 1, ...` 300 times,
/// 34 s). Counted for both databases alike; a name that is also a column
/// of the input is counted too, and an alias given twice costs its larger
/// expression (the count errs high).
pub(super) fn alias_copies(select: &Select, order_by: Option<&OrderBy>) -> usize {
    let sizes: Vec<usize> = select
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => {
                expression_size(expr)
            }
            _ => 1,
        })
        .collect();
    let mut aliases: HashMap<String, usize> = HashMap::new();
    for (item, size) in select.projection.iter().zip(&sizes) {
        if let SelectItem::ExprWithAlias { alias, .. } = item {
            let entry = aliases.entry(alias.value.to_lowercase()).or_default();
            *entry = (*entry).max(*size);
        }
    }
    struct Names<'a>(&'a HashMap<String, usize>, usize);
    impl Visitor for Names<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            if let Expr::Identifier(ident) = expr
                && let Some(size) = self.0.get(&ident.value.to_lowercase())
            {
                self.1 = self.1.saturating_add(*size);
            }
            ControlFlow::Continue(())
        }
    }
    let mut names = Names(&aliases, 0);
    let _ = select.selection.visit(&mut names);
    let _ = select.having.visit(&mut names);
    let _ = select.group_by.visit(&mut names);
    let _ = select.from.visit(&mut names);
    if let Some(order_by) = order_by {
        let _ = order_by.visit(&mut names);
    }
    // Positions: a number names the result column at that place.
    let position = |expr: &Expr| match expr {
        Expr::Value(v) => match &v.value {
            SqlValue::Number(n, _) => n
                .parse::<usize>()
                .ok()
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| sizes.get(i).copied()),
            _ => None,
        },
        _ => None,
    };
    let mut positions = 0usize;
    if let GroupByExpr::Expressions(exprs, _) = &select.group_by {
        positions = exprs
            .iter()
            .filter_map(position)
            .fold(positions, usize::saturating_add);
    }
    if let Some(OrderBy {
        kind: OrderByKind::Expressions(exprs),
        ..
    }) = order_by
    {
        positions = exprs
            .iter()
            .filter_map(|o| position(&o.expr))
            .fold(positions, usize::saturating_add);
    }
    names.1.saturating_add(positions)
}

/// Whether `op` compares its two sides.
pub(super) fn is_comparison(op: &BinaryOperator) -> bool {
    matches!(
        op,
        BinaryOperator::Eq
            | BinaryOperator::NotEq
            | BinaryOperator::Lt
            | BinaryOperator::LtEq
            | BinaryOperator::Gt
            | BinaryOperator::GtEq
            | BinaryOperator::Spaceship
    )
}
