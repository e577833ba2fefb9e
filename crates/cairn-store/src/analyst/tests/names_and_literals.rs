//! Analyst SQL's preparation, continued: names and literals that would
//! not survive the round trip to SQL, formats and recursive unions, and
//! the columns of nested queries.

use super::*;

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

/// What builds large values before the time limit can act is refused:
/// `char(n)` past 1,000 (PostgreSQL pads a literal to n while planning),
/// a `to_char` format that is not a literal (8 to 12 bytes set aside per
/// character of it), a recursive `UNION` (every row kept in memory).
#[test]
fn padding_formats_and_recursive_unions_are_refused() {
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        for (sql, why) in [
            (
                "SELECT 1 WHERE CHAR(10485760) 'a' = CHAR(10485760) 'a'",
                "char(n) takes a length of at most 1000",
            ),
            (
                "SELECT CAST(content AS character(1001)) FROM steps",
                "char(n) takes a length of at most 1000",
            ),
            (
                "SELECT to_char(seq, content) FROM steps",
                "to_char takes a format string literal",
            ),
            (
                "WITH RECURSIVE r(n) AS (SELECT 1 UNION SELECT n + 1 FROM r WHERE n < 9) SELECT n FROM r",
                "takes UNION ALL",
            ),
        ] {
            let reason = refused(sql, dialect);
            assert!(reason.contains(why), "{dialect:?} {sql}: {reason}");
        }
        for sql in [
            "SELECT CAST(content AS char(1000)), CAST(content AS varchar(100000)), CAST(content AS character varying(5000)) FROM steps",
            "SELECT to_char(seq, 'FM999') FROM steps",
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 9) SELECT n FROM r",
            "WITH r AS (SELECT 1 AS n UNION SELECT 2) SELECT n FROM r",
        ] {
            prepare(sql, dialect, 7, "main").unwrap_or_else(|e| panic!("{dialect:?} {sql}: {e}"));
        }
    }
    // On PostgreSQL a cast of anything but a literal is checked for time
    // and bounded; literals are cast once while planning.
    let out = prepare(
        "SELECT CAST(content AS jsonb), CAST('7' AS int), CAST(content AS int) FROM steps",
        Dialect::Postgres,
        7,
        "main",
    )
    .unwrap();
    // A cast to a fixed-size type is checked for time only.
    assert!(
        out.contains("CASE WHEN \"main\".cairn_time_check() THEN CAST(content AS INT) END"),
        "{out}"
    );
    assert!(
        out.contains("CASE WHEN \"main\".cairn_time_check() THEN \"main\".cairn_bounded(CAST(content AS JSONB)) END"),
        "{out}"
    );
    assert!(out.contains("CAST('7' AS INT)"), "{out}");
    let out = prepare(
        "SELECT CAST(content AS TEXT) FROM steps",
        Dialect::Sqlite,
        7,
        "main",
    )
    .unwrap();
    assert!(!out.contains("cairn_time_check"), "{out}");
}

/// The columns a statement's SELECTs list together bound the values the
/// database holds at once (a row of each nested query): they are counted
/// (a `*` as about a view's columns), shared into the value limit, and
/// refused past [`MAX_HELD_COLUMNS`] (a hostile review: 32 computed 15
/// MiB columns in a subquery under an answer of one column held 953 MB,
/// three nested 3.8 GB).
#[test]
fn the_columns_of_nested_queries_are_counted() {
    let columns = |n: usize| {
        (0..n)
            .map(|i| format!("content || '{i}' AS c{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        let one = format!(
            "SELECT length(c0) FROM (SELECT {} FROM steps) t",
            columns(32)
        );
        let (_, held) = prepare_counted(&one, dialect, 1, "main").unwrap();
        assert_eq!(held, 33);
        let limits = QueryLimits::default();
        assert_eq!(limits.value_limit(held), 2 * 1024 * 1024);
        let star = "SELECT * FROM (SELECT * FROM steps) t";
        assert_eq!(
            prepare_counted(star, dialect, 1, "main").unwrap().1,
            2 * WILDCARD_COLUMNS
        );
        let nested = format!(
            "SELECT length(c0) FROM (SELECT {0} FROM (SELECT {0} FROM (SELECT {0} FROM (SELECT {0} FROM steps) a) b) c) d",
            columns(30)
        );
        // An EXISTS computes none of its subquery's columns.
        let exists = "SELECT * FROM steps s WHERE EXISTS (SELECT * FROM sessions t WHERE t.session_id = s.session_id) AND NOT EXISTS (SELECT * FROM records r WHERE r.seq = s.seq) AND EXISTS (SELECT * FROM steps x WHERE x.session_id = s.session_id AND x.seq > s.seq)";
        assert_eq!(
            prepare_counted(exists, dialect, 1, "main").unwrap().1,
            WILDCARD_COLUMNS
        );
        let refused = prepare_counted(&nested, dialect, 1, "main").unwrap_err();
        assert!(
            refused.to_string().contains("at most 100 columns together"),
            "{refused}"
        );
    }
}
