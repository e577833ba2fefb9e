//! The first look at the caller's query: a walk over its tree that stops
//! at the first thing a read of the org's views must not contain
//! (writes, locks, table functions, qualified names, functions off the
//! allow-list, casts to other types, identifiers and literals that do not
//! print back exactly) or past the bounds on one row's work. Apart from
//! [`prepare`](super::prepare) because it is the allow-list of functions,
//! the query shapes refused and the bounds, read on their own; the checks
//! of one node it calls (names, literals, types, operators, formats) are
//! in [`checks`](super::checks).

use super::checks::{
    check_data_type, check_format, check_ident, check_operator, check_qualified, check_value,
    single_name, string_literal,
};
use super::shown;
use super::sizes::{Sizes, alias_copies, counts, is_comparison, is_literal};
use sqlparser::ast::{
    BinaryOperator, CteAsMaterialized, Expr, FunctionArg, FunctionArgExpr, FunctionArguments,
    GroupByExpr, Ident, ObjectName, ObjectNamePart, Query, Select, SelectItem, SetExpr, TableAlias,
    TableFactor, Value as SqlValue, ValueWithSpan, Visit, Visitor,
};
use std::collections::HashSet;
use std::ops::ControlFlow;

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
/// [`MAX_FORMAT_WIDTH`](super::checks::MAX_FORMAT_WIDTH), so that no format builds a huge value.
const FORMAT_FUNCTIONS: &[&str] = &["printf", "format"];
/// Most expressions (every operator, call and name counts; literals and
/// parentheses do not) a statement may hold, a result column's alias
/// named in `WHERE`, `HAVING`, `GROUP BY`, `ORDER BY` or `ON`, and a
/// position in `GROUP BY` or `ORDER BY`, counting as its expression, and the
/// left side of `BETWEEN` and `IN` as often as PostgreSQL copies it
/// (`Sizes`). On SQLite the expressions of one row run between
/// two checks of the time limit, apart from the check before each call
/// (`time_checks`): each may read a whole value (a column of up to the
/// value limit is copied each time it is named), so their number bounds
/// how far one row can overrun the limit.
pub const MAX_EXPRESSIONS: usize = 1000;
/// Most arguments a call may take (SQLite copies each argument of a
/// variadic call such as `max (a, b, ...)` or `json_extract`, whose paths
/// each build an answer, before the call starts).
pub const MAX_FUNCTION_ARGUMENTS: usize = 8;
/// Most tables a statement may name (each naming of a view, a CTE or a
/// table in `FROM` or a join counts): PostgreSQL plans each naming of a
/// view or CTE on its own, before it checks its time limit (400 names of
/// one CTE planned for 2.1 s).
pub const MAX_TABLE_REFERENCES: usize = 64;
/// Most items that are not literals in one list (an `IN (...)` list, a
/// row value, the `WHEN` values of `CASE x WHEN ...`): SQLite compares
/// them one after another inside one step.
pub const MAX_LIST_EXPRESSIONS: usize = 32;

/// The names of tables, CTEs and table aliases anywhere in `query`.
fn row_names(query: &Query) -> HashSet<String> {
    struct Names(HashSet<String>);
    impl Visitor for Names {
        type Break = ();
        fn pre_visit_relation(&mut self, relation: &ObjectName) -> ControlFlow<()> {
            if let [ObjectNamePart::Identifier(ident)] = relation.0.as_slice() {
                self.0.insert(ident.value.to_lowercase());
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            let alias = match factor {
                TableFactor::Table { alias, .. }
                | TableFactor::Derived { alias, .. }
                | TableFactor::NestedJoin { alias, .. }
                | TableFactor::UNNEST { alias, .. } => alias.as_ref(),
                _ => None,
            };
            if let Some(alias) = alias {
                self.0.insert(alias.name.value.to_lowercase());
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
            for cte in query.with.iter().flat_map(|w| &w.cte_tables) {
                self.0.insert(cte.alias.name.value.to_lowercase());
            }
            ControlFlow::Continue(())
        }
    }
    let mut names = Names(HashSet::new());
    let _ = query.visit(&mut names);
    names.0
}

/// The refusal of a statement past [`MAX_EXPRESSIONS`].
fn too_many_expressions() -> String {
    format!(
        "a statement holds at most {MAX_EXPRESSIONS} expressions (operators, calls and names; a result column's alias named in WHERE, HAVING, GROUP BY or ON counts as its expression, as does a position in GROUP BY or ORDER BY; the left side of BETWEEN counts twice, and that of IN once for each comparison it makes)"
    )
}

/// Walks a query and stops at the first thing a read of the org's views
/// must not contain.
#[derive(Default)]
pub(super) struct Guard {
    pub(super) relations: HashSet<String>,
    pub(super) ctes: HashSet<String>,
    /// The size of the expressions seen so far (see [`Sizes`]).
    expressions: usize,
    /// Tables named so far.
    table_references: usize,
    /// The names that stand for a table's whole row anywhere in the
    /// statement (tables, CTEs and their aliases), found once.
    row_names: Option<HashSet<String>>,
    /// The sizes of the expressions being walked.
    sizes: Sizes,
    /// The row values (by address in the tree being walked) that are a
    /// side of a comparison, `IN` or `BETWEEN`, the only places a row
    /// value is accepted (see [`compared_rows`]).
    compared_rows: HashSet<usize>,
    /// The columns the statement's queries list, together (a `*` counts
    /// [`WILDCARD_COLUMNS`]; of a UNION's arms, the widest): the most
    /// values the database may hold at once, a row of each nested query
    /// (see [`MAX_HELD_COLUMNS`]).
    pub(super) held_columns: usize,
    /// The subqueries of `EXISTS` (by address in the tree being walked):
    /// their columns are never computed, so they hold nothing.
    exists_queries: HashSet<usize>,
}

/// What a `*` or `t.*` counts towards [`Guard::held_columns`]: about the
/// widest of Cairn's views (`steps` has 26 columns).
pub(super) const WILDCARD_COLUMNS: usize = 32;

/// The most columns the SELECTs of one statement may list together. A
/// database holds the current row of every nested query while it
/// computes the one around it, each value up to the answer's value limit,
/// which is the answer's size shared among these columns (never under 2
/// MiB): so no statement makes the database hold more than about 200 MiB
/// of values at once (a subquery of 32 computed 15 MiB columns under an
/// answer of one column held 953 MB; three nested, 3.8 GB).
pub(super) const MAX_HELD_COLUMNS: usize = 100;

/// The row values `(a, b)` that `expr` compares (its direct operands, if
/// it is a comparison, an `IN` or a `BETWEEN`), by address. A row value
/// anywhere else is a value of its own, as long as its items together,
/// which PostgreSQL builds without checking its length: `(r, r)` in each
/// of a chain of CTEs doubles a value at each level, and 32 items
/// multiply it by 32.
fn compared_rows(expr: &Expr) -> Vec<usize> {
    let operands: Vec<&Expr> = match expr {
        Expr::BinaryOp { left, op, right }
            if is_comparison(op) || matches!(op, BinaryOperator::Overlaps) =>
        {
            vec![left, right]
        }
        Expr::AnyOp { left, .. } | Expr::AllOp { left, .. } => vec![left],
        Expr::IsDistinctFrom(a, b) | Expr::IsNotDistinctFrom(a, b) => vec![a, b],
        Expr::InList { expr, list, .. } => std::iter::once(&**expr).chain(list).collect(),
        Expr::InSubquery { expr, .. } => vec![expr],
        Expr::Between {
            expr, low, high, ..
        } => vec![expr, low, high],
        _ => Vec::new(),
    };
    operands
        .into_iter()
        .filter(|e| matches!(e, Expr::Tuple(_)))
        .map(|e| e as *const Expr as usize)
        .collect()
}

/// A query body without the parentheses around it (`((SELECT ... UNION
/// SELECT ...))`).
fn unparenthesized(body: &SetExpr) -> &SetExpr {
    match body {
        SetExpr::Query(query) if query.with.is_none() => unparenthesized(&query.body),
        other => other,
    }
}

/// Whether `query` reads a table named `name` anywhere inside it.
fn names_relation(query: &Query, name: &str) -> bool {
    struct Find<'a>(&'a str);
    impl Visitor for Find<'_> {
        type Break = ();
        fn pre_visit_relation(&mut self, relation: &ObjectName) -> ControlFlow<()> {
            match relation.0.as_slice() {
                [ObjectNamePart::Identifier(ident)] if ident.value.eq_ignore_ascii_case(self.0) => {
                    ControlFlow::Break(())
                }
                _ => ControlFlow::Continue(()),
            }
        }
    }
    query.visit(&mut Find(name)).is_break()
}

/// Whether `query` declares a CTE named `name` anywhere inside it.
fn declares(query: &Query, name: &str) -> bool {
    struct Find<'a>(&'a str);
    impl Visitor for Find<'_> {
        type Break = ();
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
            match &query.with {
                Some(with)
                    if with
                        .cte_tables
                        .iter()
                        .any(|c| c.alias.name.value.eq_ignore_ascii_case(self.0)) =>
                {
                    ControlFlow::Break(())
                }
                _ => ControlFlow::Continue(()),
            }
        }
    }
    query.visit(&mut Find(name)).is_break()
}

/// The selects of a query body (through set operations).
fn selects(body: &SetExpr) -> Vec<&Select> {
    match body {
        SetExpr::Select(select) => vec![select.as_ref()],
        SetExpr::SetOperation { left, right, .. } => {
            let mut all = selects(left);
            all.extend(selects(right));
            all
        }
        _ => Vec::new(),
    }
}

/// Refuses a list of more than [`MAX_LIST_EXPRESSIONS`] items that are
/// not literals.
fn check_list<'a>(what: &str, items: impl Iterator<Item = &'a Expr>) -> Result<(), String> {
    let computed = items.filter(|e| !is_literal(e)).count();
    if computed > MAX_LIST_EXPRESSIONS {
        return Err(format!(
            "{what} holds at most {MAX_LIST_EXPRESSIONS} items that are not literals, not {computed}: join with a CTE instead"
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
        if self.row_names.is_none() {
            self.row_names = Some(row_names(query));
        }
        // The arms of a UNION, INTERSECT or EXCEPT give their rows in turn:
        // the widest counts.
        let mut widest_arm = 0usize;
        for (i, select) in selects(&query.body).into_iter().enumerate() {
            match &select.group_by {
                GroupByExpr::Expressions(_, modifiers) if modifiers.is_empty() => {}
                _ => {
                    return ControlFlow::Break(
                        "this form of GROUP BY is not accepted: name the expressions to group by"
                            .into(),
                    );
                }
            }
            // The query's ORDER BY names the first select's columns.
            let order_by = if i == 0 {
                query.order_by.as_ref()
            } else {
                None
            };
            self.expressions = self
                .expressions
                .saturating_add(alias_copies(select, order_by));
            let listed: usize = select
                .projection
                .iter()
                .map(|item| match item {
                    SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => WILDCARD_COLUMNS,
                    _ => 1,
                })
                .sum();
            widest_arm = widest_arm.max(listed);
        }
        if !self
            .exists_queries
            .contains(&(std::ptr::from_ref::<Query>(query) as usize))
        {
            self.held_columns = self.held_columns.saturating_add(widest_arm);
        }
        if self.expressions > MAX_EXPRESSIONS {
            return ControlFlow::Break(too_many_expressions());
        }
        if self.held_columns > MAX_HELD_COLUMNS {
            return ControlFlow::Break(format!(
                "the SELECTs of a statement list at most {MAX_HELD_COLUMNS} columns together (a * counts {WILDCARD_COLUMNS}), not {}: the database holds a row of each nested query at once; select only the columns you need",
                self.held_columns
            ));
        }
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                if cte.from.is_some() {
                    return ControlFlow::Break("WITH ... FROM is not accepted".into());
                }
                // PostgreSQL copies a NOT MATERIALIZED CTE into every
                // place that names it: a chain of them, each naming the
                // one before twice, grows exponentially while planned
                // (20 levels: 13 GB).
                if matches!(cte.materialized, Some(CteAsMaterialized::NotMaterialized)) {
                    return ControlFlow::Break(
                        "AS NOT MATERIALIZED is not accepted: a CTE is computed once".into(),
                    );
                }
                // A CTE that declares its own name again inside it would
                // look recursive after renaming (every declaration of a
                // name gets the same generated name), and go unfenced.
                if declares(&cte.query, &cte.alias.name.value) {
                    return ControlFlow::Break(format!(
                        "the CTE {} declares a CTE of its own name inside it; give each its own name",
                        shown(&cte.alias.name.value)
                    ));
                }
                // A recursive UNION (not UNION ALL) keeps every row it has
                // produced in a hash table in memory, whatever work_mem
                // (60 rows of 16 MiB: 1 GB).
                if with.recursive
                    && let SetExpr::SetOperation {
                        op: sqlparser::ast::SetOperator::Union,
                        set_quantifier,
                        ..
                    } = unparenthesized(&cte.query.body)
                    && !matches!(set_quantifier, sqlparser::ast::SetQuantifier::All)
                    && names_relation(&cte.query, &cte.alias.name.value)
                {
                    return ControlFlow::Break(
                        "a recursive CTE takes UNION ALL, not UNION (which keeps every row it produced in memory): end the recursion with a condition".into(),
                    );
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
        self.table_references += 1;
        if self.table_references > MAX_TABLE_REFERENCES {
            return ControlFlow::Break(format!(
                "a statement names at most {MAX_TABLE_REFERENCES} tables (views and CTEs, each naming counted)"
            ));
        }
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
        self.sizes.enter();
        self.compared_rows.extend(compared_rows(expr));
        // An EXISTS computes none of its subquery's columns.
        if let Expr::Exists { subquery, .. } = expr {
            self.exists_queries
                .insert(std::ptr::from_ref::<Query>(subquery) as usize);
        }
        if counts(expr) {
            self.expressions += 1;
        }
        if self.expressions > MAX_EXPRESSIONS {
            return ControlFlow::Break(too_many_expressions());
        }
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
                if let FunctionArguments::List(list) = &function.args
                    && list.args.len() > MAX_FUNCTION_ARGUMENTS
                {
                    return Err(format!(
                        "{name}(...) takes at most {MAX_FUNCTION_ARGUMENTS} arguments here, not {}",
                        list.args.len()
                    ));
                }
                if let FunctionArguments::List(list) = &function.args
                    && list.args.iter().any(|a| {
                        matches!(
                            a,
                            FunctionArg::Unnamed(FunctionArgExpr::QualifiedWildcard(_))
                                | FunctionArg::Named {
                                    arg: FunctionArgExpr::QualifiedWildcard(_),
                                    ..
                                }
                        )
                    })
                {
                    return Err(format!(
                        "{name}(table.*) is not accepted: it takes the whole row; name the columns"
                    ));
                }
                // PostgreSQL's to_char sets aside 8 to 12 bytes of answer,
                // and more to parse it, for each character of its format
                // (a 16 MiB format: 469 MB for one call).
                // to_timestamp's format the same way.
                if matches!(name.as_str(), "to_char" | "to_timestamp")
                    && let FunctionArguments::List(list) = &function.args
                    && let Some(format) = list.args.get(1)
                    && !matches!(
                        format,
                        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) if string_literal(e)
                    )
                {
                    return Err(format!("{name} takes a format string literal second"));
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
            Expr::CompoundIdentifier(parts) => check_qualified(parts),
            // A table's name alone is its whole row on PostgreSQL: every
            // column copied, uncounted and between two time checks (300
            // namings of a row of 16 values of 8 MiB: about 40 GB).
            Expr::Identifier(ident)
                if self
                    .row_names
                    .as_ref()
                    .is_some_and(|names| names.contains(&ident.value.to_lowercase())) =>
            {
                Err(format!(
                    "{} names a table here, which stands for its whole row: name its columns (or rename the table's alias if a column has that name)",
                    shown(&ident.value)
                ))
            }
            Expr::QualifiedWildcard(..) => {
                Err("table.* is accepted in the select list only: name the columns".into())
            }
            Expr::Array(array) => check_list("ARRAY[...]", array.elem.iter()),
            // `(t).f` is `t.f`, with the same reading of a function.
            Expr::CompoundFieldAccess { access_chain, .. }
                if access_chain
                    .iter()
                    .any(|a| matches!(a, sqlparser::ast::AccessExpr::Dot(_))) =>
            {
                Err("(x).field is not accepted: name a column as table.column".into())
            }
            // One grouping per set, up to 4,096 of them, planned before
            // the time limit is checked (two ROLLUPs of 63: 19.5 s past
            // 1 s); SQLite has none of them.
            Expr::Rollup(_) | Expr::Cube(_) | Expr::GroupingSets(_) => Err(
                "ROLLUP, CUBE and GROUPING SETS are not accepted: write each grouping as its own query, joined with UNION ALL".into(),
            ),
            Expr::Like { any: true, .. } | Expr::ILike { any: true, .. } => {
                Err("LIKE ANY and ILIKE ANY are not accepted: join LIKEs with OR".into())
            }
            Expr::BinaryOp { op, .. }
            | Expr::AnyOp { compare_op: op, .. }
            | Expr::AllOp { compare_op: op, .. } => check_operator(op),
            Expr::InList { list, .. } => check_list("an IN list", list.iter()),
            Expr::Tuple(_) if !self.compared_rows.contains(&(expr as *const Expr as usize)) => Err(
                "a row value (a, b, ...) is accepted only as a side of a comparison, IN or BETWEEN: select its items as columns".into(),
            ),
            Expr::Tuple(items) => check_list("a row value", items.iter()),
            Expr::Case {
                operand: Some(_),
                conditions,
                ..
            } => check_list("CASE x WHEN ...", conditions.iter().map(|c| &c.condition)),
            _ => Ok(()),
        };
        match checked {
            Ok(()) => ControlFlow::Continue(()),
            Err(reason) => ControlFlow::Break(reason),
        }
    }

    fn post_visit_expr(&mut self, expr: &Expr) -> ControlFlow<String> {
        self.expressions = self.expressions.saturating_add(self.sizes.leave(expr));
        if self.expressions > MAX_EXPRESSIONS {
            return ControlFlow::Break(too_many_expressions());
        }
        ControlFlow::Continue(())
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
