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
//! between rows. Pattern and JSON operators (`LIKE`, `GLOB`, `->`,
//! `~`, ...) are calls too and are wrapped the same way.
//!
//! On PostgreSQL every value a call or operator builds that can be longer
//! than its arguments ([`BUILDERS`], `||`, `OVERLAY`, `ARRAY[...]`, a cast
//! of anything but a literal to text, binary, JSON or an array;
//! `string_agg`, an aggregate, too) is also passed through
//! [`BOUND_FUNCTION`] inside the check (and every cast of anything but a
//! literal gets the check), `CASE WHEN cairn_time_check() THEN cairn_bounded(f(...)) END`,
//! which fails once the value is longer than the limit of one value: so no
//! chain of them (a recursive CTE doubling a value, CTEs each
//! concatenating the previous one's column with itself) can grow a value
//! past the limit by more than one call's growth, as SQLite's
//! `SQLITE_LIMIT_LENGTH` refuses to build one at all.
//!
//! A result column without an alias would be named after the wrapped
//! text (SQLite names it by its text, PostgreSQL `case`), so such a column
//! gets the name the database gave it before as an alias: its printed
//! text on SQLite, and on PostgreSQL the name PostgreSQL derives (a
//! call's function name, `?column?` for an operator).

use super::Dialect;
use super::sizes::is_literal;
use sqlparser::ast::helpers::attached_token::AttachedToken;
use sqlparser::ast::{
    BinaryOperator, CaseWhen, CastKind, DataType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, ObjectNamePart, Query, SelectItem,
    SetExpr, TrimWhereField, Value, Visit, Visitor, VisitorMut,
};
use std::ops::ControlFlow;

/// The function that fails once the query's time is up (registered on
/// SQLite's analyst connection; in Cairn's schema on PostgreSQL, see
/// `pg_analyst.sql`; not on the allow-list, so a caller cannot name it).
pub const TIME_CHECK_FUNCTION: &str = "cairn_time_check";

/// On PostgreSQL, the function that fails when the value it is given is
/// longer than the limit of one value, and returns it otherwise (in
/// `pg_analyst.sql`; the limit is the transaction's
/// `cairn.max_value_bytes`).
pub const BOUND_FUNCTION: &str = "cairn_bounded";

/// The functions of the allow-list whose answer can be longer than their
/// arguments together, or than the longest of them (lowercase; PostgreSQL
/// names, `cairn_replace` being `replace` as `pg_bounds` writes it). A
/// function added to the allow-list that can build a value longer than
/// its arguments belongs here.
const BUILDERS: &[&str] = &[
    "concat",
    "format",
    "replace",
    "cairn_replace",
    "upper",
    "lower",
    "to_char",
    "string_agg",
];

/// Whether `expr` builds a value that PostgreSQL passes through
/// [`BOUND_FUNCTION`] (see the module documentation).
fn builds(expr: &Expr) -> bool {
    match expr {
        Expr::Function(function) => match function.name.0.last() {
            Some(ObjectNamePart::Identifier(ident)) => {
                BUILDERS.contains(&ident.value.to_lowercase().as_str())
            }
            _ => false,
        },
        // An array (of up to 32 computed items, the guard's bound) is as
        // long as its items together.
        Expr::Overlay { .. } => true,
        // `[...]` inside `ARRAY[[...]]` is part of its syntax; an empty
        // array or one of literals is as long as the statement's text.
        Expr::Array(array) => {
            array.named && !array.elem.is_empty() && !array.elem.iter().all(is_literal)
        }
        // A cast to a type of variable length (text printed from an
        // array, bytea or a number); a fixed-size answer is as long as
        // its type.
        Expr::Cast { data_type, .. } => costly_cast(expr) && variable_length(data_type),
        Expr::BinaryOp { op, .. } => matches!(op, BinaryOperator::StringConcat),
        _ => false,
    }
}

/// Functions that aggregate the rows of a group (with one argument for
/// `min` and `max`, which with two or more are scalar).
const AGGREGATES: &[&str] = &["count", "sum", "avg", "total", "group_concat", "string_agg"];

/// Whether `function` only passes one of its arguments on (not wrapped).
fn passes_on(function: &Function) -> bool {
    matches!(
        function.name.to_string().to_lowercase().as_str(),
        "coalesce" | "nullif" | "greatest" | "least" | "ifnull"
    )
}

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

/// A plain call of Cairn's function `name` (in `schema` if given) on
/// `args`.
pub(super) fn call(schema: Option<&str>, name: &str, args: Vec<Expr>) -> Expr {
    let mut parts: Vec<ObjectNamePart> = schema
        .map(|s| ObjectNamePart::Identifier(Ident::with_quote('"', s)))
        .into_iter()
        .collect();
    parts.push(ObjectNamePart::Identifier(Ident::new(name)));
    Expr::Function(Function {
        name: ObjectName(parts),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                .collect(),
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    })
}

/// `CASE WHEN [<schema>.]cairn_time_check() THEN <expr> END`.
fn checked(expr: Expr, schema: Option<&str>) -> Expr {
    Expr::Case {
        case_token: AttachedToken::empty(),
        end_token: AttachedToken::empty(),
        operand: None,
        conditions: vec![CaseWhen {
            condition: call(schema, TIME_CHECK_FUNCTION, Vec::new()),
            result: expr,
        }],
        else_result: None,
    }
}

/// Whether `expr` gets a time check in front in `dialect` (see the
/// module documentation).
fn wrapped(expr: &Expr, dialect: Dialect) -> bool {
    (dialect == Dialect::Postgres && (builds(expr) || costly_cast(expr) || costly_operator(expr)))
        || checked_call(expr)
}

/// Whether `expr` is an operator whose one application can cost far more
/// than copying its operands on PostgreSQL, checked for time there:
/// numeric `*`, `/`, `%` and `^` grow with the square of their digits
/// (330 `^` on a number of 65,000 digits: 57 s past a 5 s limit), and
/// `jsonb - x` and `#-` rebuild the whole value (20 of them on 8 MiB:
/// 1.7 GB in 3.5 s). SQLite's arithmetic is on machine numbers.
fn costly_operator(expr: &Expr) -> bool {
    matches!(
        expr,
        Expr::BinaryOp {
            op: BinaryOperator::Minus
                | BinaryOperator::Multiply
                | BinaryOperator::Divide
                | BinaryOperator::Modulo
                | BinaryOperator::PGExp
                | BinaryOperator::HashMinus,
            ..
        }
    )
}

/// Whether `expr` is a cast of something other than a literal. On
/// PostgreSQL a cast can read a whole value without checking for
/// interrupts (`jsonb` parses it: 200 of them in one row ran 20 s on
/// 8 MiB) and build a longer one (`bytea` to text doubles it, a number
/// prints as up to 147 KB of digits). Not on SQLite, where a `CASE`
/// around a cast would drop the cast's type affinity (`CAST(x AS TEXT) =
/// 5` compares as text only with it) and where a cast copies a value at
/// most; nor of a literal, which PostgreSQL casts once while planning.
fn costly_cast(expr: &Expr) -> bool {
    matches!(expr, Expr::Cast { expr, .. } if !is_literal(expr))
}

/// Whether `expr` is a scalar call or an operator that calls a function
/// (a time check in front in both dialects).
fn checked_call(expr: &Expr) -> bool {
    match expr {
        // coalesce, nullif, greatest and least only pass a value on (and
        // keep its type modifier on PostgreSQL, which a CASE around them
        // would drop: a recursive CTE's varchar(3) column then failed).
        Expr::Function(function) => !aggregates(function) && !passes_on(function),
        // The special forms of scalar calls, and pattern matches (SQLite's
        // are functions of the analyst connection, which check the time
        // themselves too).
        Expr::Trim { .. }
        | Expr::Substring { .. }
        | Expr::Position { .. }
        | Expr::Overlay { .. }
        | Expr::Ceil { .. }
        | Expr::Floor { .. }
        | Expr::Like { .. }
        | Expr::ILike { .. }
        | Expr::SimilarTo { .. }
        | Expr::RLike { .. } => true,
        // Operators that call a function: JSON paths, pattern matches (the
        // `~~` forms of LIKE are refused by the guard).
        Expr::BinaryOp { op, .. } => matches!(
            op,
            BinaryOperator::Arrow
                | BinaryOperator::LongArrow
                | BinaryOperator::HashArrow
                | BinaryOperator::HashLongArrow
                | BinaryOperator::Match
                | BinaryOperator::Regexp
                | BinaryOperator::Glob
                | BinaryOperator::PGRegexMatch
                | BinaryOperator::PGRegexIMatch
                | BinaryOperator::PGRegexNotMatch
                | BinaryOperator::PGRegexNotIMatch
                | BinaryOperator::PGStartsWith
                // Concatenation builds a new value each time: a chain of
                // them held n^2/2 times a value's size before the row
                // ended (1 GB a second on PostgreSQL), and the check
                // before each stops it at the limit.
                | BinaryOperator::StringConcat
        ),
        _ => false,
    }
}

/// Whether `expr` or anything in it (subqueries included) gets a check
/// in `dialect`.
fn holds_wrapped(expr: &Expr, dialect: Dialect) -> bool {
    struct Find(Dialect);
    impl Visitor for Find {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            if wrapped(expr, self.0) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        }
    }
    expr.visit(&mut Find(dialect)).is_break()
}

/// An identifier as PostgreSQL reads it: quoted as written, otherwise
/// its ASCII letters lowercased (PostgreSQL folds no other letter).
fn folded(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    }
}

/// The name PostgreSQL gives a result column of expression `expr` when it
/// is a strong one (`FigureColname`: a column's, a call's), `None` when
/// PostgreSQL would fall back to a weaker one (`?column?`, `case`, a
/// cast's type name).
fn pg_column_name(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Identifier(ident) => Some(folded(ident)),
        Expr::CompoundIdentifier(parts) => parts.last().map(folded),
        Expr::Function(function) => match function.name.0.last() {
            Some(ObjectNamePart::Identifier(ident)) => Some(folded(ident)),
            _ => None,
        },
        Expr::Nested(inner)
        | Expr::Cast { expr: inner, .. }
        | Expr::Collate { expr: inner, .. } => pg_column_name(inner),
        Expr::Case { else_result, .. } => else_result.as_deref().and_then(pg_column_name),
        Expr::Trim { trim_where, .. } => Some(
            match trim_where {
                Some(TrimWhereField::Leading) => "ltrim",
                Some(TrimWhereField::Trailing) => "rtrim",
                _ => "btrim",
            }
            .into(),
        ),
        Expr::Substring {
            shorthand: true, ..
        } => Some("substr".into()),
        Expr::Substring { .. } => Some("substring".into()),
        Expr::Position { .. } => Some("position".into()),
        Expr::Overlay { .. } => Some("overlay".into()),
        Expr::Ceil { .. } => Some("ceil".into()),
        Expr::Floor { .. } => Some("floor".into()),
        Expr::Exists { negated: false, .. } => Some("exists".into()),
        Expr::Array(_) => Some("array".into()),
        Expr::Extract { .. } => Some("extract".into()),
        Expr::AtTimeZone { .. } => Some("timezone".into()),
        // A subscript keeps its value's name.
        Expr::CompoundFieldAccess { root, access_chain }
            if access_chain
                .iter()
                .all(|a| matches!(a, sqlparser::ast::AccessExpr::Subscript(_))) =>
        {
            pg_column_name(root)
        }
        // A scalar subquery is named after its first column, whatever
        // the strength of that name.
        Expr::Subquery(query) => {
            first_select(&query.body).and_then(|select| match select.projection.first() {
                Some(SelectItem::ExprWithAlias { alias, .. }) => Some(folded(alias)),
                Some(SelectItem::UnnamedExpr(e)) => Some(pg_any_name(e)),
                _ => None,
            })
        }
        _ => None,
    }
}

/// The select that names a query body's columns: the first branch of a
/// set operation, through parentheses.
fn first_select(body: &SetExpr) -> Option<&sqlparser::ast::Select> {
    match body {
        SetExpr::Select(select) => Some(select),
        SetExpr::SetOperation { left, .. } => first_select(left),
        SetExpr::Query(query) => first_select(&query.body),
        _ => None,
    }
}

/// The name PostgreSQL gives a result column of expression `expr`,
/// strong or weak: [`pg_column_name`], else (through parentheses) a
/// cast's type name, `case`, or `?column?`.
fn pg_any_name(expr: &Expr) -> String {
    pg_column_name(expr).unwrap_or_else(|| {
        let mut top = expr;
        while let Expr::Nested(inner) | Expr::Collate { expr: inner, .. } = top {
            top = inner;
        }
        match top {
            Expr::Cast { data_type, .. } => pg_type_name(data_type),
            Expr::Case { .. } => "case".into(),
            _ => "?column?".into(),
        }
    })
}

/// Whether values of `data_type` can be of any length (text, binary,
/// JSON, arrays), as opposed to numbers, truth values and times.
fn variable_length(data_type: &DataType) -> bool {
    let written = data_type.to_string().to_lowercase();
    written.contains('[')
        || matches!(data_type, DataType::Array(_))
        || matches!(
            written.split([' ', '(']).next().unwrap_or_default(),
            "text"
                | "varchar"
                | "char"
                | "character"
                | "bpchar"
                | "json"
                | "jsonb"
                | "bytea"
                | "blob"
        )
}

/// The name PostgreSQL gives a cast to `data_type` whose operand has no
/// strong name: the type's internal name (`int4` for `integer`, `float8`
/// for `double precision`, `bpchar` for `char(3)`).
fn pg_type_name(data_type: &DataType) -> String {
    let written = data_type.to_string().to_lowercase();
    // The words without their modifiers (`timestamp(3) with time zone`,
    // `varchar(9)[]`).
    let mut words = String::new();
    let mut depth = 0usize;
    for c in written.chars() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => words.push(c),
            _ => {}
        }
    }
    let base = words.split_whitespace().collect::<Vec<_>>().join(" ");
    // `int ARRAY` is `int[]`, named by its items' type.
    let base = base.strip_suffix(" array").unwrap_or(&base).to_owned();
    let precision = written
        .split_once('(')
        .and_then(|(_, rest)| rest.split(')').next()?.trim().parse::<u32>().ok());
    if base.starts_with("interval") {
        return "interval".into();
    }
    match base.as_str() {
        "int" | "integer" | "int4" => "int4",
        "bigint" | "int8" => "int8",
        "smallint" | "int2" => "int2",
        "real" | "float4" => "float4",
        "float" if precision.is_some_and(|p| p <= 24) => "float4",
        "float" | "float8" | "double" | "double precision" => "float8",
        "decimal" | "numeric" => "numeric",
        "character varying" | "char varying" | "varchar" => "varchar",
        "char" | "character" | "bpchar" => "bpchar",
        "boolean" | "bool" => "bool",
        "timestamp with time zone" | "timestamptz" => "timestamptz",
        "timestamp" | "timestamp without time zone" => "timestamp",
        "time with time zone" | "timetz" => "timetz",
        "time" | "time without time zone" => "time",
        other => other,
    }
    .to_owned()
}

/// The alias that keeps an unnamed result column's name once the calls
/// in it are wrapped, if it needs one.
fn kept_name(expr: &Expr, dialect: Dialect) -> Option<String> {
    if !holds_wrapped(expr, dialect) {
        return None;
    }
    match dialect {
        // SQLite names the column by the expression's text.
        Dialect::Sqlite => Some(expr.to_string()),
        Dialect::Postgres => pg_column_name(expr).or_else(|| {
            // No strong name: PostgreSQL said `?column?`, a cast's type
            // name or a weaker name that the wrapping does not change,
            // unless the expression itself, through parentheses and
            // COLLATE, is now a CASE.
            let mut top = expr;
            while let Expr::Nested(inner) | Expr::Collate { expr: inner, .. } = top {
                top = inner;
            }
            wrapped(top, dialect).then(|| match top {
                Expr::Cast { data_type, .. } => pg_type_name(data_type),
                _ => "?column?".to_owned(),
            })
        }),
    }
}

/// Names the unnamed result columns of `body` that the wrapping would
/// rename (see [`kept_name`]).
fn keep_names(body: &mut SetExpr, dialect: Dialect) {
    match body {
        SetExpr::Select(select) => {
            for item in &mut select.projection {
                if let SelectItem::UnnamedExpr(expr) = item
                    && let Some(name) = kept_name(expr, dialect)
                {
                    let expr = std::mem::replace(expr, Expr::Value(Value::Null.into()));
                    *item = SelectItem::ExprWithAlias {
                        expr,
                        alias: Ident::with_quote('"', name),
                    };
                }
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            keep_names(left, dialect);
            keep_names(right, dialect);
        }
        _ => {}
    }
}

/// Gives every unnamed result column the wrapping would rename its name
/// as an alias (see [`kept_name`]); run before any rewriting of calls, on
/// the text as the caller wrote it.
pub(super) struct KeepNames {
    pub(super) dialect: Dialect,
}

impl VisitorMut for KeepNames {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        keep_names(&mut query.body, self.dialect);
        ControlFlow::Continue(())
    }
}

/// Puts a time check before every scalar call of a query and, on
/// PostgreSQL, a bound on every value built (see the module
/// documentation), naming Cairn's functions in `schema` if given
/// (PostgreSQL: the schema of Cairn's tables; SQLite: none).
pub(super) struct TimeChecks<'a> {
    pub(super) schema: Option<&'a str>,
    /// The arrays (by address) that are the direct operand of a cast,
    /// left as written: PostgreSQL types the items of `ARRAY[...]::T[]`
    /// from the cast, which must stay right on it; the cast is checked.
    pub(super) cast_arrays: std::collections::HashSet<usize>,
}

impl VisitorMut for TimeChecks<'_> {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        // PostgreSQL types the items of an array right under a cast from
        // the cast, through parentheses and into the arrays inside it.
        fn typed_by_cast(expr: &Expr, arrays: &mut std::collections::HashSet<usize>) {
            match expr {
                Expr::Nested(inner) => typed_by_cast(inner, arrays),
                Expr::Array(array) => {
                    arrays.insert(expr as *const Expr as usize);
                    for item in &array.elem {
                        typed_by_cast(item, arrays);
                    }
                }
                _ => {}
            }
        }
        if let Expr::Cast { expr: operand, .. } = expr {
            typed_by_cast(operand, &mut self.cast_arrays);
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let dialect = match self.schema {
            Some(_) => Dialect::Postgres,
            None => Dialect::Sqlite,
        };
        if self.cast_arrays.contains(&(&*expr as *const Expr as usize)) {
            return ControlFlow::Continue(());
        }
        if wrapped(expr, dialect) {
            let mut call = std::mem::replace(expr, Expr::Value(Value::Null.into()));
            // The type a cast gives, with its modifier (varchar(100),
            // numeric(10, 2)), which a function's answer loses: the
            // checked cast is cast again to it.
            let cast_to = match &call {
                Expr::Cast { data_type, .. } if dialect == Dialect::Postgres => {
                    Some(data_type.clone())
                }
                _ => None,
            };
            if dialect == Dialect::Postgres && builds(&call) {
                call = self::call(self.schema, BOUND_FUNCTION, vec![call]);
            }
            *expr = checked(call, self.schema);
            if let Some(data_type) = cast_to {
                let checked = std::mem::replace(expr, Expr::Value(Value::Null.into()));
                *expr = Expr::Cast {
                    kind: CastKind::Cast,
                    expr: Box::new(checked),
                    data_type,
                    format: None,
                };
            }
        }
        ControlFlow::Continue(())
    }
}
