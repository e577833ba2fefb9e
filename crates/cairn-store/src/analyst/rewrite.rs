//! The caller's CTEs renamed to generated names (`Rename`) and the second
//! look at the rewritten statement (`check_rewritten`), with what tests
//! and fuzzing use to check a prepared statement from outside
//! ([`tables_outside_views`], [`is_allowed_table`]). Apart from the first
//! look (`guard`) because this is what makes sure no text of the caller's
//! becomes a table name.

use super::{Dialect, PREPARED_DEPTH, VIEWS, parse_nested, shown};
use sqlparser::ast::{
    Expr, Ident, LimitClause, ObjectName, ObjectNamePart, Offset, OffsetRows, Query, SetExpr,
    Statement, TableAlias, TableFactor, Value, Visit, Visitor, VisitorMut,
};
use std::collections::HashMap;
use std::ops::ControlFlow;

/// Prefix of the caller's CTE names once renamed.
pub(super) const CTE_PREFIX: &str = "cairn_cte_";

/// Renames the caller's CTEs and the references to them to generated
/// names, and writes references to the views in Cairn's spelling (see
/// [`prepare`](super::prepare)).
#[derive(Default)]
pub(super) struct Rename {
    /// Lowercase CTE name to its generated name.
    pub(super) names: HashMap<String, String>,
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

/// The `LIMIT` of a fence: no count reaches it.
const FENCE_LIMIT: &str = "9223372036854775807";

/// Fences every CTE and every subquery in `FROM` of the caller's query
/// with `LIMIT <max> OFFSET 0`, or `OFFSET 0` after its own `LIMIT`, so
/// that neither database merges it into the query that reads it. Merging
/// copies its expressions into every place that names its columns: a
/// chain of ten CTEs each naming the previous one's column three times
/// became 3^10 operations in one row (17 s and 6.4 GB on SQLite; out of
/// memory on PostgreSQL, and seconds of planning alone), all between two
/// checks of the time limit. Fenced, each is computed once per row.
/// SQLite merges no subquery with an `OFFSET`, PostgreSQL none with a
/// `LIMIT` or `OFFSET`. Subqueries in expressions (`EXISTS`, `IN`, a
/// scalar subquery) are not merged into expressions and stay as written
/// (PostgreSQL would no longer turn a fenced `EXISTS` into a semi-join);
/// so does a recursive CTE's own query (both databases refuse a `LIMIT`
/// there, and neither merges it).
pub(super) struct Fences;

/// Whether a query body is or ends in `VALUES` (SQLite takes no `LIMIT`
/// after it).
fn ends_in_values(body: &SetExpr) -> bool {
    match body {
        SetExpr::Values(_) => true,
        SetExpr::SetOperation { right, .. } => ends_in_values(right),
        SetExpr::Query(query) => ends_in_values(&query.body),
        _ => false,
    }
}

/// The alias of the subquery a query ending in `VALUES` is moved into.
const VALUES_ALIAS: &str = "cairn_values";

/// Fences `query` (see [`Fences`]). A query that ends in `VALUES` (which
/// SQLite takes no `LIMIT` after) is moved into a fenced
/// `SELECT * FROM (<query>) AS cairn_values`: unfenced, PostgreSQL merged
/// `(SELECT ... UNION ALL VALUES (...))` and `LATERAL (VALUES (...))` into
/// the query reading them and copied their expressions into every place
/// naming their columns (doubling a level: 17 levels planned for 1.2 s).
fn fence_query(query: &mut Query) {
    if query.fetch.is_some() {
        return;
    }
    if ends_in_values(&query.body) {
        let wrapper =
            format!("SELECT * FROM (VALUES (1)) AS {VALUES_ALIAS} LIMIT {FENCE_LIMIT} OFFSET 0");
        let Ok(mut parsed) =
            sqlparser::parser::Parser::parse_sql(&sqlparser::dialect::GenericDialect {}, &wrapper)
        else {
            return;
        };
        let Some(Statement::Query(wrapper)) = parsed.pop() else {
            return;
        };
        let inner = std::mem::replace(query, *wrapper);
        if let SetExpr::Select(select) = query.body.as_mut()
            && let Some(TableFactor::Derived { subquery, .. }) =
                select.from.first_mut().map(|from| &mut from.relation)
        {
            **subquery = inner;
        }
        return;
    }
    match &mut query.limit_clause {
        None => query.limit_clause = Some(fence()),
        Some(LimitClause::LimitOffset { offset, .. }) if offset.is_none() => {
            *offset = Some(offset_zero());
        }
        Some(_) => {}
    }
}

/// `LIMIT <max> OFFSET 0`.
fn fence() -> LimitClause {
    LimitClause::LimitOffset {
        limit: Some(Expr::Value(Value::Number(FENCE_LIMIT.into(), false).into())),
        offset: Some(offset_zero()),
        limit_by: Vec::new(),
    }
}

/// A fence's `OFFSET 0`.
fn offset_zero() -> Offset {
    Offset {
        value: Expr::Value(Value::Number("0".into(), false).into()),
        rows: OffsetRows::None,
    }
}

/// Whether `query` names the table `name` (a recursive CTE's reference to
/// itself).
fn names_table(query: &Query, name: &Ident) -> bool {
    struct Find<'a>(&'a Ident);
    impl Visitor for Find<'_> {
        type Break = ();
        fn pre_visit_relation(&mut self, relation: &ObjectName) -> ControlFlow<()> {
            match relation.0.as_slice() {
                [ObjectNamePart::Identifier(ident)] if ident.value == self.0.value => {
                    ControlFlow::Break(())
                }
                _ => ControlFlow::Continue(()),
            }
        }
    }
    query.visit(&mut Find(name)).is_break()
}

// After the parts are walked, so that a query moved into a wrapper is not
// walked (and wrapped) again.
impl VisitorMut for Fences {
    type Break = ();

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let Some(with) = &mut query.with {
            let recursive = with.recursive;
            for cte in &mut with.cte_tables {
                if !(recursive && names_table(&cte.query, &cte.alias.name)) {
                    fence_query(&mut cte.query);
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        if let TableFactor::Derived { subquery, .. } = factor {
            fence_query(subquery);
        }
        ControlFlow::Continue(())
    }
}

/// The second look at a rewritten query: its WITH starts with Cairn's
/// views, every other CTE has a generated name, and every table named
/// outside Cairn's views is a view or a generated name.
pub(super) fn check_rewritten(query: &Query, own_views: usize) -> Result<(), String> {
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

/// The tables a prepared statement (the output of
/// [`prepare`](super::prepare)) names outside Cairn's own three views, as
/// written: what the database resolves by name. For tests and fuzzing:
/// each must be a view or a generated CTE name (`"cairn_cte_<n>"`).
pub fn tables_outside_views(prepared: &str, dialect: Dialect) -> Result<Vec<String>, String> {
    let mut statements =
        parse_nested(prepared, dialect, PREPARED_DEPTH).map_err(|e| e.to_string())?;
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
