//! Analyst SQL against hostile queries, on a store holding two orgs: a
//! differential oracle (every query the guard accepts, run as the guard
//! runs it, returns only the caller's org's rows and names no real table)
//! over many generated queries, and the limits on time and bytes.

use crate::conformance::Backend;
use cairn_store::analyst::{
    AnalystError, Dialect, QueryLimits, is_allowed_table, prepare, tables_outside_views,
};
use cairn_store::{
    ApiKey, Ledger, LedgerStore, NewStep, Role, SequencerConfig, WriteRequest, Written,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::sync::Arc;
use std::time::Duration;

/// The caller's org and the other one.
pub(crate) const MINE: &str = "acme";
const THEIRS: &str = "globex";

/// Markers that must never appear in an answer to `MINE`.
pub(crate) struct Secrets {
    forbidden: Vec<String>,
}

fn step(org: &str, session: &str, kind: &str, content: &str) -> NewStep {
    NewStep {
        org_id: org.into(),
        session_id: session.into(),
        agent_id: format!("{org}-agent"),
        kind_label: kind.into(),
        content: Some(content.into()),
        metadata: Some(serde_json::json!({"owner": content})),
        caller: "test".into(),
        ..NewStep::default()
    }
}

/// Two orgs with steps, seals, audit events and API keys; returns what the
/// first org must never see.
pub(crate) fn two_orgs(store: &Arc<dyn LedgerStore>) -> Secrets {
    let ledger = Ledger::new(Arc::clone(store), SequencerConfig::default());
    let mut forbidden = Vec::new();
    for (org, secret) in [(MINE, "MINE_VISIBLE"), (THEIRS, "THEIRS_SECRET")] {
        for session in ["s1", "s2"] {
            for kind in ["Observation", "Decision", "FinalAnswer"] {
                let w = ledger
                    .write(WriteRequest::Step(Box::new(step(
                        org,
                        &format!("{org}-{session}"),
                        kind,
                        &format!("{secret} {session} {kind}"),
                    ))))
                    .unwrap();
                if org == THEIRS
                    && let Written::Step { trace_id, hash, .. } = w
                {
                    forbidden.push(trace_id);
                    forbidden.push(hash.to_hex());
                }
            }
        }
        ledger
            .write(WriteRequest::Seal {
                org_id: org.into(),
                session_id: format!("{org}-s1"),
                require_reflection: false,
            })
            .unwrap();
        ledger
            .write(WriteRequest::AuditEvent {
                org_id: org.into(),
                event_id: Some(format!("{org}-event")),
                session_id: Some(format!("{org}-s2")),
                action: format!("{secret} tool call"),
                detail: None,
            })
            .unwrap();
        let (key, _token) =
            ApiKey::generate(org, Role::Admin, None, "oracle", cairn_store::now()).unwrap();
        store.put_api_key(&key).unwrap();
        forbidden.push(key.token_hash.to_hex());
        forbidden.push(key.id.clone());
    }
    forbidden.extend(
        [
            "THEIRS_SECRET",
            "globex",
            "CREATE TABLE",
            "CREATE TRIGGER",
            "schema_version",
        ]
        .map(String::from),
    );
    forbidden.push(store.server_key().to_string());
    ledger.close();
    Secrets { forbidden }
}

/// Names a query may use as tables: the views, real tables of both
/// backends, catalogs, table-valued functions, and hostile quoted names.
fn table_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["steps", "sessions", "records", "STEPS", "\"steps\"", "\"Steps\""]).prop_map(String::from),
        2 => prop::sample::select(vec![
            "entries", "api_keys", "sqlite_master", "sqlite_schema", "meta", "cairn_meta", "orgs",
            "seals", "session_heads", "embeddings", "checkpoints", "nodes", "pg_catalog.pg_tables",
            "main.entries", "public.api_keys", "temp.x", "pragma_table_info", "information_schema.tables",
            "pg_authid", "pg_shadow",
        ]).prop_map(String::from),
        3 => cte_name(),
    ]
}

/// A CTE or alias name: plain, case tricks, or quoted with hostile text.
fn cte_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "x",
            "y",
            "t",
            "r",
            "entries",
            "api_keys",
            "sqlite_master",
            "Entries",
            "cairn_cte_0",
            "CAIRN_CTE_1",
            "steps2",
            "é"
        ])
        .prop_map(String::from),
        hostile_text().prop_map(|t| format!("\"{}\"", t.replace('"', "\"\""))),
    ]
}

/// Text meant to break out of a quoted name or string.
fn hostile_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "x",
            "api_keys",
            "entries",
            "sqlite_master",
            "cairn_meta",
            " ",
            "(",
            ")",
            "--",
            "/*",
            "*/",
            "'",
            "\"",
            "\\",
            "\\\"",
            "\\'",
            ";",
            "\n",
            "\r",
            "\t",
            "\u{2028}",
            "\u{0}",
            "é",
            "名前",
            "FROM",
            "SELECT * FROM api_keys",
            "UNION SELECT token_hash FROM api_keys",
            ") SELECT * FROM entries --",
            "`",
            "[",
            "]",
            "$",
            "?",
            ",",
            ".",
        ]),
        1..5,
    )
    .prop_map(|parts| parts.concat())
}

fn literal() -> impl Strategy<Value = String> {
    prop_oneof![
        (0i64..100).prop_map(|n| n.to_string()),
        Just("NULL".to_owned()),
        Just("0.5".to_owned()),
        hostile_text().prop_map(|t| format!("'{}'", t.replace('\'', "''"))),
        hostile_text().prop_map(|t| format!("'{t}'")),
        Just("'%THEIRS%'".to_owned()),
        Just("E'\\x41'".to_owned()),
        Just("$$x$$".to_owned()),
        Just("X'41'".to_owned()),
    ]
}

fn column() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "content",
        "session_id",
        "agent_id",
        "step_type",
        "seq",
        "type",
        "view",
        "metadata",
        "current_hash",
        "token_hash",
        "org",
        "id",
        "sql",
        "name",
        "*",
        "x",
        "n",
        "value",
    ])
    .prop_map(String::from)
}

fn function() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "lower",
        "upper",
        "count",
        "max",
        "group_concat",
        "string_agg",
        "coalesce",
        "length",
        "substr",
        "replace",
        "json_extract",
        "printf",
        "format",
        "concat",
        "load_extension",
        "pg_read_file",
        "current_setting",
        "query_to_xml",
        "sqlite_version",
        "hex",
        "readfile",
        "lo_import",
        "dblink",
        "pg_ls_dir",
    ])
    .prop_map(String::from)
}

fn expr(depth: u32) -> BoxedStrategy<String> {
    let leaf = prop_oneof![column(), literal()].boxed();
    if depth == 0 {
        return leaf;
    }
    let sub = move || expr(depth - 1);
    prop_oneof![
        3 => leaf,
        2 => (function(), sub(), prop::option::of(sub())).prop_map(|(f, a, b)| match b {
            Some(b) => format!("{f}({a}, {b})"),
            None => format!("{f}({a})"),
        }),
        1 => (sub(), prop::sample::select(vec!["=", "<>", "||", "+", "LIKE", "AND", "OR"]), sub())
            .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
        1 => (sub(), prop::sample::select(vec!["text", "integer", "regclass", "oid", "bytea", "\"char\"", "json"]))
            .prop_map(|(a, t)| format!("CAST({a} AS {t})")),
        1 => query(depth - 1).prop_map(|q| format!("({q})")),
        1 => query(depth - 1).prop_map(|q| format!("EXISTS ({q})")),
        1 => (sub(), query(depth - 1)).prop_map(|(a, q)| format!("{a} IN ({q})")),
    ]
    .boxed()
}

fn from_item(depth: u32) -> BoxedStrategy<String> {
    let named = (table_name(), prop::option::of(cte_name()))
        .prop_map(|(t, a)| match a {
            Some(a) => format!("{t} AS {a}"),
            None => t,
        })
        .boxed();
    if depth == 0 {
        return named;
    }
    prop_oneof![
        4 => named,
        2 => (query(depth - 1), cte_name()).prop_map(|(q, a)| format!("({q}) AS {a}")),
        1 => (from_item(depth - 1), from_item(depth - 1), expr(0))
            .prop_map(|(a, b, on)| format!("{a} JOIN {b} ON {on}")),
        1 => (from_item(depth - 1), from_item(depth - 1)).prop_map(|(a, b)| format!("{a}, {b}")),
        1 => Just("(VALUES (1, 'a'), (2, 'b')) AS v(n, s)".to_owned()),
        1 => prop::sample::select(vec![
            "generate_series(1, 3)", "json_each('[1]')", "pragma_table_info('api_keys')",
            "unnest(ARRAY[1, 2]) AS u(n)", "LATERAL (SELECT 1) AS l", "ROWS FROM (generate_series(1, 2))",
        ]).prop_map(String::from),
    ]
    .boxed()
}

fn select(depth: u32) -> BoxedStrategy<String> {
    (
        prop::collection::vec(expr(depth), 1..3),
        from_item(depth),
        prop::option::of(expr(depth)),
        prop::option::of(prop::sample::select(vec![
            " ORDER BY 1",
            " LIMIT 5",
            " GROUP BY 1",
            " FOR UPDATE",
        ])),
    )
        .prop_map(|(cols, from, filter, tail)| {
            let mut q = format!("SELECT {} FROM {from}", cols.join(", "));
            if let Some(f) = filter {
                q.push_str(&format!(" WHERE {f}"));
            }
            q.push_str(tail.unwrap_or(""));
            q
        })
        .boxed()
}

fn query(depth: u32) -> BoxedStrategy<String> {
    let body = prop_oneof![
        4 => select(depth),
        1 => (select(depth), select(depth)).prop_map(|(a, b)| format!("{a} UNION ALL {b}")),
        1 => Just("VALUES (1)".to_owned()),
    ];
    let cte = (cte_name(), prop::option::of(Just("(n)")), body.clone())
        .prop_map(|(name, cols, q)| format!("{name}{} AS ({q})", cols.unwrap_or("")));
    (
        prop::option::of((any::<bool>(), prop::collection::vec(cte, 1..3))),
        body,
    )
        .prop_map(|(with, body)| match with {
            Some((recursive, ctes)) => format!(
                "WITH {}{} {body}",
                if recursive { "RECURSIVE " } else { "" },
                ctes.join(", ")
            ),
            None => body,
        })
        .boxed()
}

/// Checks one query against the oracle; returns whether the guard
/// accepted it.
fn check(store: &dyn LedgerStore, secrets: &Secrets, dialect: Dialect, sql: &str) -> bool {
    // As the guard rewrites it: no real table named outside the views.
    match prepare(sql, dialect, 1, "main") {
        Ok(out) => {
            for table in tables_outside_views(&out, dialect).unwrap() {
                assert!(
                    is_allowed_table(&table),
                    "{sql}\nnames table {table} in\n{out}"
                );
            }
        }
        Err(AnalystError::Refused(_)) => return false,
        Err(e) => panic!("{sql}: {e}"),
    }
    // As the guard runs it: nothing of the other org, of keys or catalogs.
    let limits = QueryLimits {
        max_rows: 200,
        time: Duration::from_secs(2),
        ..QueryLimits::default()
    };
    match store.analyst_query_limited(MINE, sql, &limits) {
        Ok(result) => {
            let text = serde_json::to_string(&result.rows).unwrap();
            // What the statement spells out itself may come back.
            for secret in secrets
                .forbidden
                .iter()
                .filter(|s| !sql.contains(s.as_str()))
            {
                assert!(
                    !text.contains(secret.as_str()),
                    "{sql}\nanswered {secret}: {text}"
                );
            }
        }
        Err(AnalystError::Refused(_)) => {}
        Err(AnalystError::Failed(m)) => {
            // Cairn's rewriting of the statement (its views, the org's
            // internal number) is never shown.
            assert!(
                !m.contains("WITH steps AS") && !m.contains("entries e"),
                "{sql}\nfailed showing the rewritten statement: {m}"
            );
            for secret in secrets
                .forbidden
                .iter()
                .filter(|s| !sql.contains(s.as_str()))
            {
                assert!(
                    !m.contains(secret.as_str()),
                    "{sql}\nfailed with {secret}: {m}"
                );
            }
        }
        Err(AnalystError::TimedOut(_) | AnalystError::TooLarge(_)) => {}
        Err(e) => panic!("{sql}: {e}"),
    }
    true
}

/// Queries every case must handle: the review's finding and its cousins.
const KNOWN: &[&str] = &[
    "WITH \"x FROM api_keys --\" AS (SELECT 1) SELECT * FROM \"x FROM api_keys --\"",
    "WITH \"x, api_keys --\" AS (SELECT 1) SELECT * FROM \"x, api_keys --\"",
    "WITH \"x UNION SELECT sql, 1 FROM sqlite_master --\" AS (SELECT 1, 2) SELECT * FROM \"x UNION SELECT sql, 1 FROM sqlite_master --\"",
    "WITH \"y) SELECT * FROM entries /*\" AS (SELECT 1) SELECT * FROM \"y) SELECT * FROM entries /*\"",
    "WITH \"z\nFROM api_keys\" AS (SELECT 1) SELECT * FROM \"z\nFROM api_keys\"",
    "SELECT * FROM (WITH entries AS (SELECT 1 AS x) SELECT x FROM entries) t, entries",
    "WITH entries AS (SELECT * FROM entries) SELECT * FROM entries",
    "WITH RECURSIVE api_keys(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM api_keys WHERE n < 3) SELECT * FROM api_keys",
    "SELECT 1 AS \"a\\\"\" FROM api_keys --\" FROM steps",
    "SELECT 'a\\'' || (SELECT token_hash FROM api_keys) || '' FROM steps",
    "SELECT content FROM steps WHERE session_id = 'x' OR 1 = 1",
    "SELECT * FROM steps, sessions, records",
    "SELECT (SELECT group_concat(content) FROM steps) AS everything",
    "WITH \"Steps\" AS (SELECT 1) SELECT * FROM \"Steps\"",
    "WITH \"STEPS \" AS (SELECT 1) SELECT * FROM \"STEPS \"",
    "SELECT nosuchcol FROM steps",
    "SELECT max(length(lag(content) OVER (ORDER BY seq))) FROM steps",
    // A condition that fails names the value it failed on: evaluated on
    // another org's rows before the view's org filter, it would name that
    // org's session ids (a planner drives the join from `sessions` once
    // it has statistics).
    "SELECT count(*) FROM steps WHERE CAST(session_id AS int) = 0",
    "SELECT count(*) FROM steps WHERE CAST(CASE WHEN session_id LIKE 'acme%' THEN '0' ELSE session_id END AS int) = 1",
    "SELECT count(*) FROM sessions WHERE CAST(session_id AS int) = 0",
    "SELECT count(*) FROM steps s JOIN sessions x ON x.session_id = s.session_id WHERE CAST(x.agent_id AS int) = 0",
    "SELECT count(*) FROM records WHERE CAST(view AS int) = 0",
    "SELECT count(*) FROM steps WHERE json_type(session_id) IS NULL",
];

/// The oracle over generated queries on `backend`, as `dialect`.
pub fn oracle(backend: &dyn Backend, dialect: Dialect, cases: u32) {
    let store = backend.open("analyst-oracle");
    let secrets = two_orgs(&store);
    backend.analyze("analyst-oracle");
    drop(store);
    let store = backend.open("analyst-oracle");
    // Sanity: the caller sees its own data, so an empty answer is not
    // what keeps the oracle quiet.
    let own = store
        .analyst_query(MINE, "SELECT count(*) FROM steps", 10)
        .unwrap();
    assert_eq!(own.rows, vec![vec![serde_json::json!(6)]]);
    for sql in KNOWN {
        check(store.as_ref(), &secrets, dialect, sql);
    }
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let accepted = std::cell::Cell::new(0u32);
    runner
        .run(&query(2), |sql| {
            if check(store.as_ref(), &secrets, dialect, &sql) {
                accepted.set(accepted.get() + 1);
            }
            Ok(())
        })
        .unwrap();
    // The generator is not so hostile that nothing gets through.
    assert!(
        accepted.get() > cases / 20,
        "only {} of {cases} generated queries were accepted",
        accepted.get()
    );
}

/// Time and size limits, enforced while the query runs.
pub fn limits_hold(backend: &dyn Backend) {
    let store = backend.open("analyst-limits");
    two_orgs(&store);
    // A value built bigger than the limit fails with a clear error, and no
    // gigabyte is ever allocated: the doubling stops at the limit.
    let limits = QueryLimits {
        max_value_bytes: 1 << 20,
        ..QueryLimits::default()
    };
    let doubling = "WITH RECURSIVE r(s, n) AS (SELECT 'x', 0 UNION ALL SELECT s || s, n + 1 FROM r WHERE n < 40) SELECT s FROM r WHERE n = 25";
    match store.analyst_query_limited(MINE, doubling, &limits) {
        Err(AnalystError::TooLarge(m)) => assert!(m.contains("1048576"), "{m}"),
        other => panic!("{other:?}"),
    }
    let wide = "WITH RECURSIVE r(s, n) AS (SELECT 'x', 0 UNION ALL SELECT s || s, n + 1 FROM r WHERE n < 21) SELECT s FROM r WHERE n = 21";
    match store.analyst_query_limited(MINE, wide, &limits) {
        Err(AnalystError::TooLarge(m)) => assert!(m.contains("1048576"), "{m}"),
        other => panic!("{other:?}"),
    }
    // The answer's bytes: rows past the limit are dropped.
    let small = QueryLimits {
        max_answer_bytes: 100,
        ..QueryLimits::default()
    };
    let answer = store
        .analyst_query_limited(MINE, "SELECT content FROM steps ORDER BY seq", &small)
        .unwrap();
    assert!(answer.truncated);
    assert!(
        !answer.rows.is_empty() && answer.rows.len() < 6,
        "{answer:?}"
    );
    // Time: a query that would run for minutes is stopped.
    let quick = QueryLimits {
        time: Duration::from_millis(300),
        ..QueryLimits::default()
    };
    let started = std::time::Instant::now();
    let forever = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 1000000000) SELECT count(*) FROM r";
    match store.analyst_query_limited(MINE, forever, &quick) {
        Err(AnalystError::TimedOut(_)) => {}
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    // A query that gives its rows slowly, each fetch well within the limit,
    // is stopped at the limit as a whole (PostgreSQL starts a statement's
    // timeout again at each fetch of a portal).
    // 40 million iterations in all, a fetch of 64 rows about 1.3 million.
    let sparse = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 1000000000) SELECT n FROM r WHERE n % 20000 = 0";
    let paced = QueryLimits {
        time: Duration::from_secs(2),
        max_rows: 2000,
        ..QueryLimits::default()
    };
    let started = std::time::Instant::now();
    match store.analyst_query_limited(MINE, sparse, &paced) {
        Err(AnalystError::TimedOut(_)) => {}
        other => panic!("{:?}", other.map(|a| a.rows.len())),
    }
    assert!(started.elapsed() < Duration::from_secs(6));
    // A row of many large columns is measured before it is copied: past
    // the answer's limit it is dropped, and each value's limit is a share
    // of the answer's (never under 2 MiB).
    let mb = "(WITH RECURSIVE r(s, n) AS (SELECT 'x', 0 UNION ALL SELECT s || s, n + 1 FROM r WHERE n < 20) SELECT s FROM r WHERE n = 20)";
    let many = format!(
        "SELECT {}",
        (0..20)
            .map(|i| format!("{mb} AS c{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let answer = store
        .analyst_query_limited(MINE, &many, &QueryLimits::default())
        .unwrap();
    assert!(
        answer.truncated && answer.rows.is_empty(),
        "{:?}",
        answer.columns
    );
    let three_mb = "(WITH RECURSIVE r(s, n) AS (SELECT 'xyz', 0 UNION ALL SELECT s || s, n + 1 FROM r WHERE n < 20) SELECT s FROM r WHERE n = 20)";
    let wide_and_big = format!(
        "SELECT {}",
        (0..10)
            .map(|i| format!("{three_mb} AS c{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    match store.analyst_query_limited(MINE, &wide_and_big, &QueryLimits::default()) {
        Err(AnalystError::TooLarge(_)) => {}
        other => panic!("{:?}", other.map(|a| a.columns)),
    }
    // Formats that would build huge values are refused before running.
    for sql in [
        "SELECT printf('%.*c', 999999999, 'x')",
        "SELECT format('%1000000000s', 'x')",
        "SELECT printf('%999999999d', 1)",
    ] {
        assert!(matches!(
            store.analyst_query_limited(MINE, sql, &limits),
            Err(AnalystError::Refused(_))
        ));
    }
}

/// One call of a text function cannot outlast the time limit on SQLite
/// (whose time limit is checked between calls): `LIKE`, `GLOB` and `trim`
/// with a long pattern on a long value are refused at once with a message
/// saying why, and `instr` and `replace` find a long needle in linear
/// time. Each of these ran for tens of seconds to hours in one call.
pub fn one_call_is_bounded(backend: &dyn Backend) {
    let store = backend.open("analyst-one-call");
    two_orgs(&store);
    let value = |c: char, doublings: u32| {
        format!(
            "(WITH RECURSIVE r(s, n) AS (SELECT '{c}', 0 UNION ALL SELECT s || s, n + 1 FROM r WHERE n < {doublings}) SELECT s FROM r WHERE n = {doublings})"
        )
    };
    let (mb, needle) = (value('a', 20), value('a', 14));
    for sql in [
        format!("SELECT {mb} LIKE '%' || {needle} || 'b%'"),
        format!("SELECT {mb} GLOB '*' || {needle} || 'b*'"),
        format!("SELECT trim({}, {needle} || 'b')", value('b', 20)),
    ] {
        match store.analyst_query_limited(MINE, &sql, &QueryLimits::default()) {
            Err(AnalystError::Failed(m)) => {
                assert!(m.contains("more work than one call may take"), "{m}")
            }
            other => panic!("{sql}: {other:?}"),
        }
    }
    for (sql, expected) in [
        (format!("SELECT instr({mb}, {needle} || 'b')"), 0),
        (
            format!("SELECT length(replace({mb}, {needle} || 'b', 'x'))"),
            1 << 20,
        ),
        // Short patterns still work as SQLite's own.
        (format!("SELECT {mb} LIKE '%aab%'"), 0),
        (format!("SELECT {mb} LIKE 'aaa%'"), 1),
        (
            "SELECT count(*) FROM steps WHERE content LIKE '%secret%'".to_owned(),
            0,
        ),
    ] {
        let answer = store
            .analyst_query_limited(MINE, &sql, &QueryLimits::default())
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(
            answer.rows,
            vec![vec![serde_json::json!(expected)]],
            "{sql}"
        );
    }
}

/// One row of many calls on a large value stops at the time limit, not
/// after its last call: SQLite checks its limit only between rows (400
/// calls of `upper` on 16 MiB take about twenty seconds), and each call
/// now checks it first.
pub fn one_row_of_many_calls_stops_at_the_time_limit(backend: &dyn Backend) {
    let store = backend.open("analyst-one-row");
    two_orgs(&store);
    let calls = vec!["length(upper(upper(upper(upper(v))))) / 1024"; 100].join(" + ");
    let sql = format!(
        // A 4 MiB value, in a statement whose queries list two columns
        // together (each value's limit is the answer's shared among them).
        "WITH RECURSIVE r(v) AS (SELECT 'a' UNION ALL SELECT v || v FROM r WHERE length(v) < 4194304) SELECT {calls} FROM r WHERE length(v) = 4194304"
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
    // The limit and at most one call past it, with room for a slow
    // machine; without the checks, about forty times the limit.
    assert!(took < Duration::from_secs(4), "{took:?}");
}

/// A chain of CTEs each naming the previous one's column three times is
/// computed once per level and row, not merged into 3^n copies of the
/// first expression in one row (ten levels took 17 s and 6.4 GB on
/// SQLite, and ran PostgreSQL out of memory, between two checks of the
/// time limit); the same through subqueries in `FROM`.
pub fn merged_queries_cannot_multiply_one_rows_work(backend: &dyn Backend, dialect: Dialect) {
    let store = backend.open("analyst-merged");
    two_orgs(&store);
    // A 1 MB value, once (an aggregate), then one more character ('0')
    // or five ('false') each level.
    let (base, text, grows) = match dialect {
        Dialect::Sqlite => (
            "max(replace(printf('%.1000c', 'a'), 'a', printf('%.1000c', 'a')))",
            "(c < c) || c",
            1,
        ),
        Dialect::Postgres => (
            "max(replace(format('%1000s', ''), ' ', format('%1000s', '')))",
            "(c < c)::text || c",
            5,
        ),
    };
    let levels = 9;
    let mut ctes = vec![format!("b0 AS (SELECT {base} AS c FROM steps)")];
    for level in 1..=levels {
        ctes.push(format!(
            "b{level} AS (SELECT {text} AS c FROM b{})",
            level - 1
        ));
    }
    let chain = format!("WITH {} SELECT length(c) FROM b{levels}", ctes.join(", "));
    let mut nested = format!("SELECT {base} AS c FROM steps");
    for _ in 1..=levels {
        nested = format!("SELECT {text} AS c FROM ({nested}) t");
    }
    let nested = format!("SELECT length(c) FROM ({nested}) t");
    let limits = QueryLimits {
        time: Duration::from_millis(500),
        ..QueryLimits::default()
    };
    for sql in [chain, nested] {
        let started = std::time::Instant::now();
        let answer = store.analyst_query_limited(MINE, &sql, &limits);
        let took = started.elapsed();
        match answer {
            Ok(a) => assert_eq!(
                a.rows,
                vec![vec![serde_json::json!(1_000_000 + grows * levels)]],
                "{sql}"
            ),
            Err(AnalystError::TimedOut(_)) => {}
            Err(e) => panic!("{sql}: {e:?}"),
        }
        // Unmerged, well under a second; merged, 6 s and 2 GB.
        assert!(took < Duration::from_secs(3), "{took:?}: {sql}");
    }
}

/// Nested BETWEEN and IN lists, which PostgreSQL copies the left side of
/// (22 nested BETWEENs ran it out of memory before reading a row): a
/// nesting within the expression limit answers what its flat form
/// answers, a deeper one is refused before the database sees it.
pub fn copied_left_sides_are_bounded(backend: &dyn Backend) {
    let store = backend.open("analyst-copies");
    two_orgs(&store);
    let nest = |depth: usize| {
        (1..depth).fold("seq BETWEEN 0 AND 1".to_owned(), |inner, _| {
            format!("({inner}) BETWEEN true AND true")
        })
    };
    let count = |condition: &str| {
        let sql = format!("SELECT count(*) FROM steps WHERE {condition}");
        store
            .analyst_query_limited(MINE, &sql, &QueryLimits::default())
            .map(|answer| answer.rows)
    };
    let flat = count("seq BETWEEN 0 AND 1").unwrap();
    assert_ne!(flat, vec![vec![serde_json::json!(0)]]);
    assert_eq!(count(&nest(8)).unwrap(), flat);
    let columns = "seq IN (seq, duration_ms, 0, 1)";
    assert_eq!(
        count(&format!("({columns}) IN (true)")).unwrap(),
        count(columns).unwrap()
    );
    for deep in [nest(9), nest(22)] {
        let started = std::time::Instant::now();
        match count(&deep) {
            Err(AnalystError::Refused(reason)) => {
                assert!(reason.contains("BETWEEN counts twice"), "{reason}")
            }
            other => panic!("{deep}: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}

/// A result column without an alias keeps the name the database gave it
/// before its calls were wrapped in time checks: its text on SQLite, the
/// function's name (or `?column?`) on PostgreSQL; an outer query can
/// still name it.
pub fn wrapped_calls_keep_their_names(backend: &dyn Backend, dialect: Dialect) {
    let store = backend.open("analyst-names");
    two_orgs(&store);
    let sql = "SELECT upper(content), content LIKE 'x%', (lower(content)), kind AS k, length(content) + 1 FROM steps";
    let answer = store
        .analyst_query_limited(MINE, sql, &QueryLimits::default())
        .unwrap();
    let expected: &[&str] = match dialect {
        Dialect::Sqlite => &[
            "upper(content)",
            "content LIKE 'x%'",
            "(lower(content))",
            "k",
            "length(content) + 1",
        ],
        Dialect::Postgres => &["upper", "?column?", "lower", "k", "?column?"],
    };
    assert_eq!(answer.columns, expected);
    let outer = match dialect {
        Dialect::Sqlite => {
            "SELECT \"upper(content)\" FROM (SELECT upper(content) FROM steps) LIMIT 1"
        }
        Dialect::Postgres => "SELECT x.upper FROM (SELECT upper(content) FROM steps) x LIMIT 1",
    };
    let answer = store
        .analyst_query_limited(MINE, outer, &QueryLimits::default())
        .unwrap();
    assert_ne!(
        answer.rows[0][0],
        serde_json::json!("upper(content)"),
        "the outer query read its own text, not the column"
    );
}

/// The views' times are written as the API writes them (RFC 3339 UTC,
/// six fractional digits) on both databases: a time copied from an answer
/// finds its step. SQLite's had only milliseconds.
pub fn times_read_as_the_api_writes_them(backend: &dyn Backend) {
    let store = backend.open("analyst-times");
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    let Written::Step { trace_id, .. } = ledger
        .write(WriteRequest::Step(Box::new(step(
            MINE,
            "times",
            "Observation",
            "t",
        ))))
        .unwrap()
    else {
        panic!("not a step");
    };
    let recorded = store.step_by_trace(MINE, &trace_id).unwrap().unwrap();
    let created_at = recorded.record.step.created_at.to_string();
    let query =
        format!("SELECT created_at, created_at_us FROM steps WHERE created_at = '{created_at}'");
    let answer = store
        .analyst_query_limited(MINE, &query, &QueryLimits::default())
        .unwrap();
    assert_eq!(
        answer.rows,
        vec![vec![
            serde_json::json!(created_at),
            serde_json::json!(recorded.record.step.created_at.as_micros())
        ]]
    );
    let started = store
        .analyst_query_limited(
            MINE,
            "SELECT started_at, started_at_us FROM sessions WHERE session_id = 'times'",
            &QueryLimits::default(),
        )
        .unwrap();
    let us = started.rows[0][1].as_i64().unwrap();
    assert_eq!(
        started.rows[0][0],
        serde_json::json!(cairn_core::Timestamp::from_micros(us).unwrap().to_string())
    );
}
