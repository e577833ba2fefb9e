//! Analyst SQL's preparation: what is refused, what is rewritten.
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

/// Every scalar call, in any clause, is preceded by the time check;
/// aggregate and window calls are not. The caller cannot call the
/// check itself.
#[test]
fn every_scalar_call_is_checked_for_time() {
    let sql = "SELECT upper(content), max(length(content), 3), count(*), row_number() OVER (ORDER BY seq), trim(model) FROM steps WHERE instr(content, 'x') > 0 GROUP BY seq HAVING sum(abs(seq)) > 0";
    let ours = prepare(sql, Dialect::Sqlite, 7, "main").unwrap();
    let checks = ours.matches("CASE WHEN cairn_time_check() THEN ").count();
    // upper, max (scalar), length, trim, instr, abs: six calls.
    assert_eq!(checks, 6, "{ours}");
    for call in [
        "CASE WHEN cairn_time_check() THEN upper(content) END",
        "CASE WHEN cairn_time_check() THEN instr(content, 'x') END",
        "count(*)",
        "sum(CASE WHEN cairn_time_check() THEN abs(seq) END)",
    ] {
        assert!(ours.contains(call), "{call} in {ours}");
    }
    // PostgreSQL's check is the function in Cairn's schema.
    let theirs = prepare(sql, Dialect::Postgres, 7, "main").unwrap();
    assert_eq!(
        theirs
            .matches("CASE WHEN \"main\".cairn_time_check() THEN ")
            .count(),
        6,
        "{theirs}"
    );
    // On PostgreSQL what can build a longer value than its arguments is
    // bounded too, string_agg (an aggregate) included; SQLite's length
    // limit refuses to build one at all.
    let builders = "SELECT upper(content) || 'x', string_agg(model, ','), replace(content, 'a', 'bb'), length(content) FROM steps";
    let theirs = prepare(builders, Dialect::Postgres, 7, "main").unwrap();
    for bounded in [
        "\"main\".cairn_bounded(upper(content))",
        "\"main\".cairn_bounded(CASE WHEN \"main\".cairn_time_check() THEN \"main\".cairn_bounded(upper(content)) END || 'x')",
        "CASE WHEN \"main\".cairn_time_check() THEN \"main\".cairn_bounded(string_agg(model, ',')) END",
        "\"main\".cairn_bounded(\"main\".cairn_replace(content, 'a', 'bb'))",
    ] {
        assert!(theirs.contains(bounded), "{bounded} in {theirs}");
    }
    assert_eq!(theirs.matches("cairn_bounded").count(), 4, "{theirs}");
    let ours = prepare(builders, Dialect::Sqlite, 7, "main").unwrap();
    assert!(!ours.contains("cairn_bounded"), "{ours}");
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        assert!(
            refused("SELECT cairn_time_check() FROM steps", dialect).contains("not accepted"),
            "{dialect:?}"
        );
        // A statement nested as deep as the parser takes is still
        // passed on once its calls are wrapped.
        let nested = format!(
            "SELECT {}content{} FROM steps",
            "upper(".repeat(46),
            ")".repeat(46)
        );
        let out = prepare(&nested, dialect, 7, "main").unwrap();
        assert_eq!(out.matches("cairn_time_check()").count(), 46, "{out}");
    }
}

/// The bounds on one row's work: expressions per statement, arguments
/// per call, computed items per list; both dialects alike.
#[test]
fn one_rows_work_is_bounded() {
    let many = vec!["length(content)"; MAX_EXPRESSIONS / 2 + 1].join(" + ");
    let args = |n: usize| vec!["content"; n].join(", ");
    let list = |n: usize| vec!["model"; n].join(", ");
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        for (sql, why) in [
            (
                format!("SELECT {many} FROM steps"),
                "at most 1000 expressions",
            ),
            (
                format!("SELECT coalesce({}) FROM steps", args(9)),
                "at most 8 arguments",
            ),
            (
                format!("SELECT content IN ({}) FROM steps", list(33)),
                "IN list holds at most 32",
            ),
            (
                format!(
                    "SELECT (content, {}) = (content, {}) FROM steps",
                    list(32),
                    list(32)
                ),
                "row value holds at most 32",
            ),
            (
                format!(
                    "SELECT CASE content {} END FROM steps",
                    vec!["WHEN model THEN 1"; 33].join(" ")
                ),
                "CASE x WHEN",
            ),
        ] {
            let reason = refused(&sql, dialect);
            assert!(reason.contains(why), "{dialect:?} {why}: {reason}");
        }
        for sql in [
            format!("SELECT coalesce({}) FROM steps", args(8)),
            format!("SELECT content IN ({}) FROM steps", list(32)),
            // Literals are not counted in a list.
            format!(
                "SELECT content IN ({}) FROM steps",
                vec!["'a'"; 200].join(", ")
            ),
        ] {
            prepare(&sql, dialect, 7, "main").unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
}

/// Every CTE and subquery in FROM is fenced against merging (a
/// caller's LIMIT gets OFFSET 0); subqueries in expressions and a
/// recursive CTE's own query are left as written.
#[test]
fn nested_queries_are_fenced_against_merging() {
    let fenced = "LIMIT 9223372036854775807 OFFSET 0";
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        let out = prepare(
            "WITH a AS (SELECT seq FROM steps), b AS (SELECT seq FROM a LIMIT 5) SELECT * FROM (SELECT seq FROM b) x WHERE EXISTS (SELECT 1 FROM steps) AND seq IN (SELECT seq FROM a)",
            dialect,
            7,
            "main",
        )
        .unwrap();
        assert_eq!(out.matches(fenced).count(), 2, "{out}");
        assert!(out.contains("LIMIT 5 OFFSET 0"), "{out}");
        assert!(out.contains("(SELECT 1 FROM steps)"), "{out}");
        let recursive = prepare(
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3), s AS (SELECT n FROM r) SELECT n FROM s",
            dialect,
            7,
            "main",
        )
        .unwrap();
        assert_eq!(recursive.matches(fenced).count(), 1, "{recursive}");
        assert!(recursive.contains("n < 3)"), "{recursive}");
    }
}

/// Literals are not counted, and a result column's alias named in
/// WHERE costs its expression.
#[test]
fn literals_are_free_and_aliases_cost_their_expression() {
    let numbers: Vec<String> = (0..2000).map(|n| n.to_string()).collect();
    let rows = vec!["(1, 'a')"; 30].join(", ");
    let term = vec!["length(content)"; 20].join(" + ");
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        for sql in [
            format!(
                "SELECT seq FROM steps WHERE seq IN ({})",
                numbers.join(", ")
            ),
            format!("SELECT seq FROM steps WHERE (seq, kind) IN ({rows})"),
        ] {
            prepare(&sql, dialect, 7, "main").unwrap_or_else(|e| panic!("{dialect:?}: {e}"));
        }
        let copies = vec!["d > 0"; 40].join(" AND ");
        let reason = refused(
            &format!("SELECT {term} AS d FROM steps WHERE {copies}"),
            dialect,
        );
        assert!(reason.contains("alias named in WHERE"), "{reason}");
    }
}

/// A result column the wrapping would rename gets its old name as an
/// alias: the expression's text on SQLite, PostgreSQL's derived name.
#[test]
fn wrapped_result_columns_keep_their_names() {
    let sql = "SELECT upper(content), content LIKE 'x%', kind AS k, s.kind, (lower(content)), CAST(length(content) AS TEXT) FROM steps s";
    let ours = prepare(sql, Dialect::Sqlite, 7, "main").unwrap();
    for name in [
        "AS \"upper(content)\"",
        "AS \"content LIKE 'x%'\"",
        "AS k",
        "s.kind,",
        "AS \"(lower(content))\"",
        "AS \"CAST(length(content) AS TEXT)\"",
    ] {
        assert!(ours.contains(name), "{name} in {ours}");
    }
    let theirs = prepare(sql, Dialect::Postgres, 7, "main").unwrap();
    for name in [
        "AS \"upper\"",
        "AS \"?column?\"",
        "AS \"lower\"",
        "AS \"length\"",
    ] {
        assert!(theirs.contains(name), "{name} in {theirs}");
    }
}

/// The names PostgreSQL reads as the session's role, schema or
/// database are refused unquoted (they named the database's role).
#[test]
fn session_names_are_not_columns() {
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        for name in [
            "current_user",
            "CURRENT_ROLE",
            "session_user",
            "user",
            "current_schema",
            "current_catalog",
        ] {
            let reason = refused(&format!("SELECT {name} FROM steps"), dialect);
            assert!(
                reason.contains("names the database session") || reason.contains("not accepted"),
                "{dialect:?} {name}: {reason}"
            );
        }
        prepare(
            "WITH t(\"user\") AS (SELECT agent_id FROM steps) SELECT \"user\" FROM t",
            dialect,
            7,
            "main",
        )
        .unwrap_or_else(|e| panic!("{dialect:?}: {e}"));
    }
}

/// What the second review found: VALUES subqueries run unfenced, a
/// CTE name is declared once, rows of literals count as items,
/// GROUP BY positions and ORDER BY aliases cost their expression, and
/// the `~~` forms, LIKE ANY and containment operators are refused.
#[test]
fn second_review_shapes() {
    let term = vec!["length(content)"; 20].join(" + ");
    let rows = vec!["(1, 'a')"; 33].join(", ");
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        for sql in [
            "SELECT * FROM (VALUES (1, 'a'), (2, 'b')) AS v",
            "WITH x(a) AS (VALUES (1), (2)) SELECT a FROM x",
        ] {
            let out = prepare(sql, dialect, 7, "main").unwrap_or_else(|e| panic!("{sql}: {e}"));
            assert!(out.contains("AS cairn_values LIMIT"), "{out}");
        }
        for (sql, why) in [
            ("WITH b AS (SELECT 1 AS x FROM steps WHERE EXISTS (WITH b AS (SELECT 2 AS x) SELECT x FROM b)) SELECT x FROM b".to_owned(), "of its own name"),
            (format!("SELECT seq FROM steps WHERE (seq, kind) IN ({rows})"), "IN list holds at most 32"),
            (format!("SELECT {term} FROM steps GROUP BY {}", vec!["1"; 40].join(", ")), "at most 1000"),
            (format!("SELECT {term} AS x FROM steps ORDER BY {}", vec!["x"; 40].join(", ")), "at most 1000"),
            ("SELECT content ~~ 'a%' FROM steps".to_owned(), "write LIKE"),
            ("SELECT links @> '[1]' FROM steps".to_owned(), "containment"),
        ] {
            let reason = refused(&sql, dialect);
            assert!(reason.contains(why), "{dialect:?} {sql}: {reason}");
        }
    }
    let out = prepare(
        "SELECT \"position\"(content, 'x') FROM steps",
        Dialect::Postgres,
        7,
        "main",
    )
    .unwrap();
    assert!(out.contains("cairn_position('x', content)"), "{out}");
}

/// PostgreSQL copies the left side of BETWEEN into two comparisons,
/// and that of IN into one for each item that is not a literal: nested,
/// they grow exponentially while the query is read (22 nested BETWEENs
/// ran out of memory under 100 written expressions). Each copy counts.
#[test]
fn copied_left_sides_count() {
    fn nest(depth: usize, wrap: impl Fn(&str) -> String) -> String {
        (0..depth).fold("seq".to_owned(), |inner, _| wrap(&inner))
    }
    let between = |depth| nest(depth, |x| format!("(({x}) BETWEEN 0 AND 5)"));
    let columns = |depth| nest(depth, |x| format!("(({x}) IN (seq, duration_ms, 1, 2))"));
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        for accepted in [between(8), columns(5)] {
            let sql = format!("SELECT {accepted} FROM steps");
            prepare(&sql, dialect, 7, "main").unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        for shape in [between(9), between(22), columns(6), columns(12)] {
            let sql = format!("SELECT seq FROM steps WHERE {shape}");
            let reason = refused(&sql, dialect);
            assert!(reason.contains("BETWEEN counts twice"), "{reason}");
        }
        // A list of literals is one comparison: no copies.
        let literals = (0..200)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT seq FROM steps WHERE {}",
            nest(10, |x| format!("(({x}) IN ({literals}))"))
        );
        prepare(&sql, dialect, 7, "main").unwrap_or_else(|e| panic!("{e}"));
    }
}

/// What PostgreSQL copies or multiplies while it plans, before it
/// checks its time limit: NOT MATERIALIZED CTEs (copied into each
/// place naming them), grouping sets, many tables, and IN lists of
/// literals whose left side may be a row or an array (one comparison
/// per literal, each with its own copy of the left side).
#[test]
fn planning_cannot_multiply_the_query() {
    let chain = |materialized: &str| {
        let mut ctes = vec![format!("c0 AS {materialized}(SELECT seq FROM steps)")];
        // (SQLite's dialect does not parse the MATERIALIZED forms.)
        for i in 1..4 {
            ctes.push(format!(
                "c{i} AS {materialized}(SELECT a.seq FROM c{} a, c{} b)",
                i - 1,
                i - 1
            ));
        }
        format!("WITH {} SELECT count(*) FROM c3", ctes.join(", "))
    };
    let tables = |n: usize| {
        format!(
            "SELECT count(*) FROM {}",
            (0..n)
                .map(|i| format!("steps t{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let rows = |depth: usize, literals: usize| {
        let nulls = vec!["NULL"; literals].join(", ");
        let nested = (0..depth).fold("ARRAY[seq, 1]".to_owned(), |inner, _| {
            format!("CASE WHEN {inner} IN ({nulls}) THEN ARRAY[seq, 1] END")
        });
        format!("SELECT count(*) FROM steps WHERE {nested} IS NULL")
    };
    // Arrays (PostgreSQL's) compared with IN lists, each copied per
    // literal, nested.
    prepare(&rows(3, 2), Dialect::Postgres, 7, "main").unwrap();
    for sql in [rows(18, 2), rows(3, 40)] {
        let reason = refused(&sql, Dialect::Postgres);
        assert!(reason.contains("at most 1000"), "{sql}: {reason}");
    }
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        for sql in [chain(""), tables(64)] {
            prepare(&sql, dialect, 7, "main").unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        // A row value is compared, never a value of its own (which could
        // be nested so, or grow as its items together).
        let compared = "SELECT count(*) FROM steps WHERE (seq, 1) IN ((seq, 1), (2, 2)) AND (seq, 1) = (1, seq) AND (seq, 1) IN (SELECT seq, 1 FROM steps)";
        prepare(compared, dialect, 7, "main").unwrap_or_else(|e| panic!("{compared}: {e}"));
        for sql in [
            "SELECT count(*) FROM steps WHERE CASE WHEN (seq, 1) IN (NULL, NULL) THEN (seq, 1) END IS NULL",
            "SELECT (seq, 1) FROM steps",
            "SELECT count(*) FROM steps WHERE ((seq, 1)) = (1, 1)",
        ] {
            assert!(refused(sql, dialect).contains("row value"), "{sql}");
        }
        let reason = refused(&tables(65), dialect);
        assert!(
            reason.contains("at most 64 tables"),
            "{dialect:?}: {reason}"
        );
    }
    // SQLite's dialect reads ROLLUP and CUBE as calls (refused too).
    for sql in [
        "SELECT count(*) FROM steps GROUP BY ROLLUP (kind, agent_id)",
        "SELECT count(*) FROM steps GROUP BY CUBE (kind, agent_id)",
        "SELECT count(*) FROM steps GROUP BY GROUPING SETS ((kind), (agent_id))",
    ] {
        refused(sql, Dialect::Sqlite);
        let reason = refused(sql, Dialect::Postgres);
        assert!(
            reason.contains("ROLLUP, CUBE and GROUPING SETS"),
            "{reason}"
        );
    }
    prepare(&chain("MATERIALIZED "), Dialect::Postgres, 7, "main").unwrap();
    let reason = refused(&chain("NOT MATERIALIZED "), Dialect::Postgres);
    assert!(reason.contains("NOT MATERIALIZED"), "{reason}");
    // A scalar left side compares with its literals once.
    let kinds = vec!["'a'"; 600].join(", ");
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        for left in [
            "lower(kind)",
            "kind || '/' || step_type",
            "metadata ->> 'tool'",
            "json_extract(metadata, '$.tool')",
            "substring(content FROM 1 FOR 3)",
        ] {
            let sql = format!("SELECT count(*) FROM steps WHERE {left} IN ({kinds})");
            prepare(&sql, dialect, 7, "main").unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
}

/// Left-deep chains (`1 + 1 + ...`, `SELECT 1 UNION SELECT 1 ...`),
/// which sqlparser builds past its recursion limit, are read on a
/// thread whose stack holds them and bounded by their tokens: a few
/// thousand links overflowed a 2 MiB stack and aborted the process
/// while the tree was cloned, printed or dropped.
#[test]
fn deep_chains_cannot_overflow_the_stack() {
    let arms = vec!["SELECT 1"; 4_000].join(" UNION ");
    let sums = format!("SELECT {} FROM steps", vec!["1"; 30_000].join("+"));
    // As deep as the token bound lets a chain be: read whole, refused
    // by the expression count, its tree dropped on the reading thread.
    let deepest = format!("SELECT {} FROM steps", vec!["seq"; 8_000].join("+"));
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        // Accepted or refused, never a crash.
        let _ = prepare(&arms, dialect, 7, "main");
        assert!(refused(&sums, dialect).contains("tokens"));
        assert!(refused(&deepest, dialect).contains("at most 1000 expressions"));
        // The longest chain of checked operators the expression bound
        // takes, each link nested in the next once wrapped (a CASE, and
        // on PostgreSQL a bound too): passed on, not refused as a
        // statement that cannot be reproduced.
        let links = format!("SELECT content{} FROM steps", " || 'a'".repeat(998));
        let out = prepare(&links, dialect, 7, "main").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.matches("cairn_time_check()").count(), 998);
    }
}

/// A subquery or CTE that ends in VALUES (which SQLite takes no LIMIT
/// after) is fenced inside a wrapper, and so is LATERAL (VALUES ...):
/// unfenced, PostgreSQL merged them and copied their expressions; each
/// `||` is checked for time as a call is.
#[test]
fn values_and_concatenations_are_fenced_and_checked() {
    for (dialect, sql) in [
        (
            Dialect::Sqlite,
            "SELECT x FROM (SELECT content AS x FROM steps UNION ALL VALUES (NULL)) t",
        ),
        (
            Dialect::Postgres,
            "SELECT x FROM (SELECT content AS x FROM steps UNION ALL VALUES (NULL)) t",
        ),
        (
            Dialect::Postgres,
            "SELECT t.x FROM steps s, LATERAL (VALUES (s.content || s.content)) AS t(x)",
        ),
        (
            Dialect::Sqlite,
            "WITH c AS (SELECT content AS x FROM steps UNION ALL VALUES (NULL)) SELECT x FROM c",
        ),
    ] {
        let out = prepare(sql, dialect, 7, "main").unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert!(
            out.contains("AS cairn_values LIMIT 9223372036854775807 OFFSET 0"),
            "{out}"
        );
    }
    let out = prepare(
        "SELECT content || content FROM steps",
        Dialect::Sqlite,
        7,
        "main",
    )
    .unwrap();
    assert!(
        out.contains("CASE WHEN cairn_time_check() THEN content || content END"),
        "{out}"
    );
}

/// PostgreSQL reads `t.f` as the call `f(t)` when `t` has no column
/// `f`: a qualified name may not end in a function of a whole row,
/// nor a field access name one.
#[test]
fn qualified_names_cannot_call_functions_of_the_row() {
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        for (sql, why) in [
            ("SELECT s.to_jsonb FROM steps s", "the function to_jsonb"),
            (
                "SELECT s.row_to_json FROM steps s",
                "the function row_to_json",
            ),
            (
                "SELECT length(s.pg_column_size) FROM steps s",
                "the function pg_column_size",
            ),
            (
                "SELECT s.seq.x FROM steps s",
                "a qualified name is table.column",
            ),
        ] {
            let reason = refused(sql, dialect);
            assert!(reason.contains(why), "{dialect:?} {sql}: {reason}");
        }
        prepare("SELECT s.content, s.seq FROM steps s", dialect, 7, "main").unwrap();
    }
    let reason = refused("SELECT (s).to_jsonb FROM steps s", Dialect::Postgres);
    assert!(reason.contains("(x).field"), "{reason}");
}

/// A table's name alone is its whole row on PostgreSQL (every column
/// copied, uncounted): refused as an expression, as is `t.*` outside
/// the select list; `ARRAY[...]` counts as a list.
#[test]
fn whole_rows_are_not_values() {
    let items = vec!["seq"; 33].join(", ");
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        for (sql, why) in [
            (
                "WITH d AS (SELECT content FROM steps) SELECT d IS NOT NULL FROM d",
                "names a table here",
            ),
            ("SELECT CAST(s AS text) FROM steps s", "names a table here"),
            (
                "SELECT count(*) FROM steps s GROUP BY s",
                "names a table here",
            ),
            ("SELECT count(s.*) FROM steps s", "takes the whole row"),
        ] {
            let reason = refused(sql, dialect);
            assert!(reason.contains(why), "{dialect:?} {sql}: {reason}");
        }
        prepare("SELECT s.*, seq FROM steps s", dialect, 7, "main").unwrap();
    }
    let reason = refused(
        &format!("SELECT ARRAY[{items}] FROM steps"),
        Dialect::Postgres,
    );
    assert!(reason.contains("ARRAY[...] holds at most 32"), "{reason}");
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

mod names_and_literals;
