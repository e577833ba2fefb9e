//! Analyst SQL on PostgreSQL only: the bounded searches, the values
//! bounded as they are built, the casts, arrays and row values, and that
//! the wrapping keeps a query's meaning and its columns' names, and JSON
//! columns holding U+0000.

use crate::analyst::{MINE, two_orgs};
use crate::conformance::Backend;
use cairn_store::analyst::{AnalystError, QueryLimits};
use std::time::Duration;

/// PostgreSQL's searches whose one call costs the product of the two
/// lengths (`LIKE`, `ILIKE`, `position`, `replace`, `trim` with a set) never check for interrupts: past the work bound they are refused
/// at once with a message saying why (one `position` ran 64 s past a 5 s
/// limit), and within it they answer as the built-ins do.
pub fn pg_searches_are_bounded(backend: &dyn Backend) {
    let store = backend.open("analyst-pg-searches");
    two_orgs(&store);
    let value = |c: char, doublings: u32| {
        format!(
            "(WITH RECURSIVE r(s, n) AS (SELECT '{c}'::text, 0 UNION ALL SELECT s || s, n + 1 FROM r WHERE n < {doublings}) SELECT s FROM r WHERE n = {doublings})"
        )
    };
    let (mb, needle) = (value('a', 20), value('a', 14));
    for sql in [
        format!("SELECT {mb} LIKE '%' || {needle} || 'b%'"),
        format!("SELECT {mb} NOT ILIKE '%' || {needle} || 'b%'"),
        format!("SELECT position({needle} || 'b' IN {mb})"),
        format!("SELECT replace({mb}, {needle} || 'b', 'x')"),
        format!("SELECT ltrim({}, {needle} || 'b')", value('b', 20)),
        format!("SELECT trim(both {needle} || 'b' FROM {})", value('b', 20)),
        format!("SELECT position(CAST({needle} || 'b' AS bytea) IN CAST({mb} AS bytea))"),
        format!("SELECT CAST({mb} AS bytea) LIKE CAST('%' || {needle} || 'b%' AS bytea)"),
    ] {
        let started = std::time::Instant::now();
        match store.analyst_query_limited(MINE, &sql, &QueryLimits::default()) {
            Err(AnalystError::TooLarge(m) | AnalystError::Failed(m)) => {
                assert!(m.contains("more work than one call may take"), "{sql}: {m}")
            }
            other => panic!("{sql}: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(3), "{sql}");
    }
    for (sql, expected) in [
        ("SELECT 'abc' LIKE 'a%'", serde_json::json!(true)),
        ("SELECT 'abc' NOT LIKE 'a%'", serde_json::json!(false)),
        ("SELECT 'ABC' ILIKE 'a%'", serde_json::json!(true)),
        (
            "SELECT 'a_c' LIKE 'a#_c' ESCAPE '#'",
            serde_json::json!(true),
        ),
        ("SELECT position('b' IN 'abc')", serde_json::json!(2)),
        ("SELECT \"position\"('abc', 'b')", serde_json::json!(2)),
        ("SELECT replace('aaa', 'a', 'b')", serde_json::json!("bbb")),
        ("SELECT trim(both 'x' FROM 'xxaxx')", serde_json::json!("a")),
        (
            "SELECT trim(leading 'x' FROM 'xxaxx')",
            serde_json::json!("axx"),
        ),
        ("SELECT rtrim('xxaxx', 'x')", serde_json::json!("xxa")),
        ("SELECT NULL LIKE 'a'", serde_json::Value::Null),
        // char(n) keeps its trailing spaces for LIKE, as PostgreSQL's
        // own LIKE on char(n) does; bytea has LIKE, position and trim.
        (
            "SELECT CAST('ab' AS char(4)) LIKE 'ab'",
            serde_json::json!(false),
        ),
        (
            "SELECT CAST('ab' AS char(4)) ILIKE 'AB  '",
            serde_json::json!(true),
        ),
        (
            "SELECT CAST('abc' AS bytea) LIKE CAST('a%' AS bytea)",
            serde_json::json!(true),
        ),
        (
            "SELECT position(CAST('b' AS bytea) IN CAST('abc' AS bytea))",
            serde_json::json!(2),
        ),
        (
            "SELECT length(ltrim(CAST('xxa' AS bytea), CAST('x' AS bytea)))",
            serde_json::json!(1),
        ),
        (
            "SELECT count(*) FROM steps WHERE content LIKE '%secret%'",
            serde_json::json!(0),
        ),
    ] {
        let answer = store
            .analyst_query_limited(MINE, sql, &QueryLimits::default())
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(answer.rows, vec![vec![expected]], "{sql}");
    }
}

/// PostgreSQL builds values without a length limit of its own short of
/// 1 GB: every value a call or operator builds that can be longer than
/// its arguments is checked against the limit of one value as it is
/// built, so no chain of them (a recursive CTE doubling a value, CTEs
/// each concatenating the previous one's value eight times) grows past it,
/// and `replace` refuses at once a call that would build more than its
/// bound. Values up to the limit are built as before, and the columns
/// keep their names.
pub fn pg_values_are_bounded_as_built(backend: &dyn Backend) {
    let store = backend.open("analyst-pg-built");
    two_orgs(&store);
    let limits = QueryLimits {
        max_value_bytes: 1 << 20,
        ..QueryLimits::default()
    };
    let value = |c: char, doublings: u32| {
        format!(
            "(WITH RECURSIVE r(s, n) AS (SELECT '{c}'::text, 0 UNION ALL SELECT s || s, n + 1 FROM r WHERE n < {doublings}) SELECT s FROM r WHERE n = {doublings})"
        )
    };
    // Exactly the limit is built; one byte more is not.
    for (sql, expected) in [
        (format!("SELECT length({})", value('x', 20)), 1 << 20),
        (
            format!("SELECT length(concat({}, 'y'))", value('x', 19)),
            (1 << 19) + 1,
        ),
    ] {
        let answer = store
            .analyst_query_limited(MINE, &sql, &limits)
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(
            answer.rows,
            vec![vec![serde_json::json!(expected)]],
            "{sql}"
        );
    }
    let eight = |c: &str| [c; 8].join(", ");
    for sql in [
        format!("SELECT length({} || 'y')", value('x', 20)),
        // Doubling up to PostgreSQL's own 1 GB limit within the time
        // limit, before; stopped at the first value past 1 MiB now.
        "WITH RECURSIVE r(s, n) AS (SELECT 'x'::text, 0 UNION ALL SELECT s || s, n + 1 FROM r WHERE n < 40) SELECT length(s) FROM r WHERE n = 40".to_owned(),
        format!(
            "WITH a AS (SELECT {} AS c), b AS (SELECT concat({}) AS c FROM a), d AS (SELECT concat({}) AS c FROM b), e AS (SELECT concat({}) AS c FROM d) SELECT length(c) FROM e",
            value('x', 12),
            eight("c"),
            eight("c"),
            eight("c")
        ),
        format!(
            "SELECT length(string_agg(v, '')) FROM (SELECT {} AS v) x, steps",
            value('x', 18)
        ),
        format!("SELECT length(upper(format('%s%s%s', {0}, {0}, {0})))", value('x', 19)),
    ] {
        let started = std::time::Instant::now();
        match store.analyst_query_limited(MINE, &sql, &limits) {
            Err(AnalystError::TooLarge(m)) => {
                assert!(m.contains("was built") && m.contains("1048576"), "{sql}: {m}")
            }
            other => panic!("{sql}: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(3), "{sql}");
    }
    // replace: a replacement longer than its pattern is refused when the
    // answer would pass 64 MiB, before it is built; a long value with few
    // occurrences is replaced.
    let mb = value('a', 20);
    match store.analyst_query_limited(
        MINE,
        &format!(
            "SELECT length(replace({mb}, 'a', repeat_me)) FROM (SELECT {} AS repeat_me) x",
            value('b', 7)
        ),
        &QueryLimits::default(),
    ) {
        Err(AnalystError::TooLarge(m)) => {
            assert!(m.contains("would build a value of 134217728 bytes"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    let answer = store
        .analyst_query_limited(
            MINE,
            &format!(
                "SELECT length(replace({mb} || 'z', 'z', x)) FROM (SELECT {} AS x) y",
                value('b', 10)
            ),
            &QueryLimits::default(),
        )
        .unwrap();
    assert_eq!(answer.rows, vec![vec![serde_json::json!((1 << 20) + 1024)]]);
    // Names as before the bounds.
    let answer = store
        .analyst_query_limited(
            MINE,
            "SELECT string_agg(kind, ','), content || 'x', upper(content), concat(kind, 'y') FROM steps GROUP BY content, kind",
            &QueryLimits::default(),
        )
        .unwrap();
    assert_eq!(
        answer.columns,
        ["string_agg", "?column?", "upper", "concat"]
    );
}

/// On PostgreSQL a cast can read a whole value without checking for
/// interrupts (`jsonb` parses it: about 0.1 s for 8 MiB), so a cast of
/// anything but a literal is checked for time as a call is; an array is
/// as long as its items together, so it is bounded as it is built; and a
/// row value is accepted only where it is compared. The columns keep the
/// names PostgreSQL gave them.
pub fn pg_casts_arrays_and_rows_are_bounded(backend: &dyn Backend) {
    let store = backend.open("analyst-pg-casts");
    two_orgs(&store);
    let casts = vec!["CAST(v AS jsonb) IS NULL"; 200].join(" OR ");
    let sql = format!(
        "WITH RECURSIVE r(s, n) AS (SELECT 'a'::text, 0 UNION ALL SELECT s || s, n + 1 FROM r WHERE n < 23), big(v) AS (SELECT '\"' || s || '\"' FROM r WHERE n = 23) SELECT {casts} FROM big"
    );
    let limits = QueryLimits {
        time: Duration::from_millis(500),
        ..QueryLimits::default()
    };
    let started = std::time::Instant::now();
    let answer = store.analyst_query_limited(MINE, &sql, &limits);
    let took = started.elapsed();
    assert!(
        matches!(answer, Err(AnalystError::TimedOut(_))),
        "{answer:?}"
    );
    // Unchecked, about 20 s.
    assert!(took < Duration::from_secs(4), "{took:?}");
    // Numeric arithmetic costs the square of the digits (each `^` of a
    // number of 65,000 digits about 0.17 s), checked for time too.
    let powers = vec!["n ^ 2"; 40].join(" + ");
    let sql =
        format!("WITH a AS (SELECT '1e65000'::numeric - 1 AS n) SELECT ({powers}) > 0 FROM a");
    let started = std::time::Instant::now();
    let answer = store.analyst_query_limited(MINE, &sql, &limits);
    assert!(
        matches!(answer, Err(AnalystError::TimedOut(_))),
        "{answer:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(4), "{sql}");
    let items = vec!["c"; 32].join(", ");
    let arrays = format!(
        "WITH a AS (SELECT content AS c FROM steps LIMIT 1), b AS (SELECT ARRAY[{items}] AS c FROM a), d AS (SELECT ARRAY[{items}] AS c FROM b), e AS (SELECT ARRAY[{items}] AS c FROM d), f AS (SELECT ARRAY[{items}] AS c FROM e) SELECT c IS NULL FROM f"
    );
    // Casts that grow a value, in a recursion: an array of eight copies
    // printed as text, bytea printed as hex (each doubled the value at
    // every step, 324 MB in 3.8 s).
    for sql in [
        arrays,
        "WITH RECURSIVE r(n, x) AS (SELECT 0, 'a' UNION ALL SELECT n + 1, CAST(ARRAY[x, x, x, x, x, x, x, x] AS text) FROM r WHERE n < 12) SELECT n, length(x) AS l FROM r WHERE n = 12".to_owned(),
        "WITH RECURSIVE r(n, x) AS (SELECT 0, 'a'::text UNION ALL SELECT n + 1, substring(CAST(CAST(x AS bytea) AS text) FROM 2) FROM r WHERE n < 40) SELECT length(x) FROM r WHERE n = 40".to_owned(),
    ] {
        let started = std::time::Instant::now();
        match store.analyst_query_limited(MINE, &sql, &QueryLimits::default()) {
            Err(AnalystError::TooLarge(m)) => assert!(m.contains("was built"), "{m}"),
            other => panic!("{sql}: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(3), "{sql}");
    }
    for sql in [
        "SELECT (content, content) FROM steps",
        "WITH a AS (SELECT content AS c FROM steps) SELECT count(*) FROM a GROUP BY (c, c)",
    ] {
        match store.analyst_query_limited(MINE, sql, &QueryLimits::default()) {
            Err(AnalystError::Refused(m)) => assert!(m.contains("row value"), "{m}"),
            other => panic!("{sql}: {other:?}"),
        }
    }
    let answer = store
        .analyst_query_limited(
            MINE,
            "SELECT count(*) FROM steps WHERE (kind, seq) = (kind, seq) AND (kind, 1) IN ((kind, 1), ('x', 2)) AND (seq, kind) IN (SELECT seq, kind FROM steps)",
            &QueryLimits::default(),
        )
        .unwrap();
    assert_eq!(answer.rows, vec![vec![serde_json::json!(6)]]);
    let answer = store
        .analyst_query_limited(
            MINE,
            "SELECT CAST(seq + 1 AS integer), CAST(content AS text), (seq + 1)::float, CAST(seq AS double precision), ARRAY[content], CAST(content || 'x' AS varchar(9)), CAST('7' AS int), CAST(seq + 1 AS float(10)) FROM steps LIMIT 1",
            &QueryLimits::default(),
        )
        .unwrap();
    assert_eq!(
        answer.columns,
        [
            "int4", "content", "float8", "seq", "array", "varchar", "int4", "float4"
        ]
    );
}

/// What the checks and bounds wrap on PostgreSQL keeps the query's
/// meaning: a cast keeps its type modifier (a recursive CTE's column
/// must keep one type), `ARRAY[...]::T[]` types its items from the cast,
/// nested and empty arrays stay arrays, and the columns keep the names
/// PostgreSQL gives them.
pub fn pg_wrapping_keeps_queries_as_written(backend: &dyn Backend) {
    let store = backend.open("analyst-pg-as-written");
    two_orgs(&store);
    for (sql, expected) in [
        (
            "WITH RECURSIVE t(n, path) AS (SELECT 1, CAST('a' AS varchar(100)) UNION ALL SELECT n + 1, CAST(path || 'x' AS varchar(100)) FROM t WHERE n < 3) SELECT path FROM t ORDER BY n DESC LIMIT 1",
            serde_json::json!("axx"),
        ),
        (
            "WITH RECURSIVE t(n, v) AS (SELECT 1, CAST(1 AS numeric(10, 2)) UNION ALL SELECT n + 1, CAST(v * 2 AS numeric(10, 2)) FROM t WHERE n < 3) SELECT v FROM t ORDER BY n DESC LIMIT 1",
            serde_json::json!(4.0),
        ),
        (
            "WITH RECURSIVE t(n, p) AS (SELECT 1, ARRAY[]::bigint[] UNION ALL SELECT n + 1, p || CAST(n AS bigint) FROM t WHERE n < 4) SELECT CAST(p AS text) FROM t ORDER BY n DESC LIMIT 1",
            serde_json::json!("{1,2,3}"),
        ),
        (
            "SELECT CAST(ARRAY[kind, seq]::text[] AS text) FROM steps ORDER BY seq LIMIT 1",
            serde_json::json!("{observation,1}"),
        ),
        (
            "SELECT CAST(ARRAY[[1, 2], [3, seq]] AS text) FROM steps ORDER BY seq LIMIT 1",
            serde_json::json!("{{1,2},{3,1}}"),
        ),
        (
            "SELECT CAST(CAST(ARRAY[] AS text[]) AS text)",
            serde_json::json!("{}"),
        ),
        (
            "SELECT count(*) FROM steps WHERE (CAST(created_at AS timestamp), CAST(created_at AS timestamp)) OVERLAPS (CAST(created_at AS timestamp), CAST(created_at AS timestamp) + interval '1 day')",
            serde_json::json!(6),
        ),
        (
            "WITH RECURSIVE kinds AS (SELECT kind FROM steps UNION SELECT 'x'), r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 2) SELECT count(*) FROM kinds, r",
            serde_json::json!(8),
        ),
        (
            "SELECT to_char(CAST(created_at AS timestamp), 'YYYY'::text) = to_char(CAST(created_at AS timestamp), ('YYYY')) FROM steps LIMIT 1",
            serde_json::json!(true),
        ),
        (
            "WITH RECURSIVE r(v, n) AS (SELECT CAST('abc' AS varchar(3)), 1 UNION ALL SELECT greatest(coalesce(v, v), v), n + 1 FROM r WHERE n < 3) SELECT v FROM r ORDER BY n DESC LIMIT 1",
            serde_json::json!("abc"),
        ),
        (
            "SELECT CAST((ARRAY[seq, '1.5'])::numeric[] AS text) || CAST(ARRAY[ARRAY[seq, '2.5']]::numeric[] AS text) FROM steps ORDER BY seq LIMIT 1",
            serde_json::json!("{1,1.5}{{1,2.5}}"),
        ),
    ] {
        let answer = store
            .analyst_query_limited(MINE, sql, &QueryLimits::default())
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(answer.rows, vec![vec![expected]], "{sql}");
    }
    let answer = store
        .analyst_query_limited(
            MINE,
            "SELECT EXTRACT(epoch FROM CAST(created_at AS timestamp))::bigint, (SELECT max(seq) FROM steps)::text, (ARRAY[seq, 2])[1], CAST(kind AS char varying), CAST(created_at AS timestamp(3) with time zone), seq * 2, (CAST(created_at AS timestamp) AT TIME ZONE 'UTC')::date, substr(content, 1, 5), NOT EXISTS (SELECT 1 FROM steps WHERE upper(content) = 'A'), (SELECT upper(content) AS U FROM steps LIMIT 1), CAST('{' || seq || '}' AS int ARRAY) FROM steps LIMIT 1",
            &QueryLimits::default(),
        )
        .unwrap();
    assert_eq!(
        answer.columns,
        [
            "extract",
            "max",
            "array",
            "kind",
            "created_at",
            "?column?",
            "timezone",
            "substr",
            "?column?",
            "u",
            "int4",
        ]
    );
    for (sql, why) in [
        (
            "SELECT content OPERATOR(pg_catalog.||) content FROM steps",
            "is not accepted",
        ),
        (
            "WITH RECURSIVE r(n) AS ((SELECT 1 UNION SELECT n + 1 FROM r WHERE n < 5)) SELECT n FROM r",
            "takes UNION ALL",
        ),
        (
            "SELECT to_timestamp(content, content) FROM steps",
            "to_timestamp takes a format string literal",
        ),
        ("SELECT CAST('{a}' AS char(10)[])", "an array of char(n)"),
    ] {
        match store.analyst_query_limited(MINE, sql, &QueryLimits::default()) {
            Err(AnalystError::Refused(m)) => assert!(m.contains(why), "{sql}: {m}"),
            other => panic!("{sql}: {other:?}"),
        }
    }
}

/// A JSON string holding U+0000 (`\u0000`) is recorded as written, and
/// PostgreSQL's `json` and `jsonb` cannot hold it: a cast of such a value
/// fails the query, and the two ways OPERATIONS gives around it (skip
/// those rows with `position`, or cast the value with the character
/// replaced) answer.
pub fn pg_nul_in_json_columns(backend: &dyn Backend) {
    use cairn_store::{Ledger, NewStep, SequencerConfig, WriteRequest};
    let store = backend.open("analyst-pg-nul");
    let ledger = Ledger::new(std::sync::Arc::clone(&store), SequencerConfig::default());
    for (session, metadata) in [
        ("with-nul", serde_json::json!({"a": "x\u{0}y", "b": 1})),
        ("plain", serde_json::json!({"a": "z", "b": 2})),
    ] {
        ledger
            .write(WriteRequest::Step(Box::new(NewStep {
                org_id: MINE.into(),
                session_id: session.into(),
                agent_id: "agent".into(),
                kind_label: "Observation".into(),
                metadata: Some(metadata),
                caller: "test".into(),
                ..NewStep::default()
            })))
            .unwrap();
    }
    let query = |sql: &str| store.analyst_query_limited(MINE, sql, &QueryLimits::default());
    match query("SELECT CAST(metadata AS jsonb) ->> 'b' FROM steps") {
        Err(AnalystError::Failed(m)) => assert!(m.contains("Unicode escape"), "{m}"),
        other => panic!("{other:?}"),
    }
    let skipped = query(
        "SELECT CAST(metadata AS jsonb) ->> 'b' FROM steps WHERE position('\\u0000' IN metadata) = 0",
    )
    .unwrap();
    assert_eq!(skipped.rows, vec![vec![serde_json::json!("2")]]);
    let replaced = query(
        "SELECT CAST(replace(metadata, '\\u0000', '\\ufffd') AS jsonb) ->> 'a' FROM steps ORDER BY seq",
    )
    .unwrap();
    assert_eq!(
        replaced.rows,
        vec![
            vec![serde_json::json!("x\u{fffd}y")],
            vec![serde_json::json!("z")]
        ]
    );
}
