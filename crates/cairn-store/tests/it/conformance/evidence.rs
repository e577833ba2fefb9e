//! Evidence leaving and entering a backend: exports that verify offline,
//! imports that round-trip, and analyst SQL that reads one org and
//! writes nothing.

use super::*;

/// Large records are read a bounded page at a time (PostgreSQL ends a page
/// of whole entries, or of a session's steps, past 32 MiB of text): 66
/// steps of about 800 KB, 52 MB in all, 44 of them in one session, still
/// read whole and in order by every reader of the log and of a session,
/// exported and verified.
pub(super) fn large_records_are_read_whole_across_pages(backend: &dyn Backend) {
    let store = backend.open("large-records");
    let ledger = ledger(Arc::clone(&store));
    let blob = |c: char, n: usize| serde_json::Value::String(c.to_string().repeat(n));
    for i in 0..44 {
        let mut s = step(&format!("s{}", i % 2), "ToolCall", &"c".repeat(60_000));
        s.input = Some(serde_json::json!({ "i": i, "blob": blob('i', 250_000) }));
        s.output = Some(blob('o', 250_000));
        s.metadata = Some(serde_json::json!({ "blob": blob('m', 230_000) }));
        append(&ledger, s).unwrap();
    }
    let size = store.log_size(ORG).unwrap();
    let mut seen = Vec::new();
    store
        .read_log(ORG, 0, size, &mut |stored| {
            seen.push(stored.seq);
            stored.entry.is_ok()
        })
        .unwrap();
    assert_eq!(seen, (0..size).collect::<Vec<_>>());
    let mut by_seq = Vec::new();
    store
        .read_entries(ORG, &seen, &mut |stored| {
            if let Ok(cairn_core::log::LogEntry {
                record: cairn_core::log::LogRecord::Step(r),
                ..
            }) = &stored.entry
            {
                assert_eq!(
                    r.step
                        .output
                        .as_ref()
                        .and_then(|o| o.as_str())
                        .map(str::len),
                    Some(250_000)
                );
            }
            by_seq.push(stored.seq);
            true
        })
        .unwrap();
    assert_eq!(by_seq, seen);
    // A session's steps, whole or at chosen positions, cross pages too
    // (on PostgreSQL 44 such steps pass a page's 32 MiB of text).
    for i in 44..66 {
        let mut s = step("s0", "ToolCall", &"c".repeat(60_000));
        s.input = Some(serde_json::json!({ "i": i, "blob": blob('i', 250_000) }));
        s.output = Some(blob('o', 250_000));
        s.metadata = Some(serde_json::json!({ "blob": blob('m', 230_000) }));
        append(&ledger, s).unwrap();
    }
    for (session, steps) in [("s0", 44), ("s1", 22)] {
        let seqs = store.session_seqs(ORG, session).unwrap().unwrap();
        assert_eq!(seqs.len(), steps);
        let whole = |s: &cairn_store::StoredStep| {
            s.record
                .step
                .output
                .as_ref()
                .and_then(|o| o.as_str())
                .map(str::len)
                == Some(250_000)
        };
        let mut read = Vec::new();
        store
            .read_session(ORG, session, &mut |s| {
                assert!(whole(&s), "step {} read whole", s.seq);
                read.push(s.seq);
                true
            })
            .unwrap();
        assert_eq!(read, seqs);
        let mut visited = Vec::new();
        store
            .visit_steps_at(ORG, session, &seqs, &mut |s| {
                assert!(whole(&s), "step {} read whole", s.seq);
                visited.push(s.seq);
                true
            })
            .unwrap();
        assert_eq!(visited, seqs);
        // At positions in any order (a trail's), in that order, across
        // pages; a position holding no step of the session left out.
        let mut asked: Vec<u64> = seqs.iter().rev().copied().collect();
        asked.insert(3, u64::MAX >> 30);
        let other = if session == "s0" { "s1" } else { "s0" };
        asked.insert(7, store.session_seqs(ORG, other).unwrap().unwrap()[0]);
        let mut visited = Vec::new();
        store
            .visit_steps_at(ORG, session, &asked, &mut |s| {
                assert!(whole(&s), "step {} read whole", s.seq);
                visited.push(s.seq);
                true
            })
            .unwrap();
        let reversed: Vec<u64> = seqs.iter().rev().copied().collect();
        assert_eq!(visited, reversed);
        // Stopping early gives no step after.
        let mut few = Vec::new();
        store
            .visit_steps_at(ORG, session, &asked, &mut |s| {
                few.push(s.seq);
                few.len() < 9
            })
            .unwrap();
        assert_eq!(few, reversed[..9]);
    }
    let cp = checkpoint(&ledger);
    let now = Timestamp::from_micros(0).unwrap();
    for scope in [ExportScope::All, ExportScope::Session("s1".into())] {
        let mut out = Vec::new();
        export(store.as_ref(), ORG, &scope, &cp, now, &mut out, &mut |_| {}).unwrap();
        let verdict = verify_text(store.as_ref(), &String::from_utf8(out).unwrap());
        assert!(
            verdict.verdict.verified,
            "{scope:?}: {:?}",
            verdict.verdict.failure
        );
    }
    assert_verifies(store.as_ref());
}

pub(super) fn exports_verify_offline(backend: &dyn Backend) {
    let store = backend.open("export");
    let ledger = ledger(Arc::clone(&store));
    for i in 0..20 {
        let mut s = step(&format!("s{}", i % 4), "Reasoning", &format!("r{i}"));
        s.agent_id = format!("agent-{}", i % 2);
        append(&ledger, s).unwrap();
    }
    ledger
        .write(WriteRequest::Seal {
            org_id: ORG.into(),
            session_id: "s0".into(),
            require_reflection: false,
        })
        .unwrap();
    let cp = checkpoint(&ledger);
    let now = Timestamp::from_micros(0).unwrap();
    for scope in [
        ExportScope::All,
        ExportScope::Session("s0".into()),
        ExportScope::Agent("agent-1".into()),
        ExportScope::Range {
            since: now,
            until: Timestamp::parse_rfc3339("9999-12-31T23:59:59Z").unwrap(),
        },
    ] {
        let mut out = Vec::new();
        let summary = export(store.as_ref(), ORG, &scope, &cp, now, &mut out, &mut |_| {}).unwrap();
        let verdict = verify_text(store.as_ref(), &String::from_utf8(out).unwrap());
        assert!(
            verdict.verdict.verified,
            "{scope:?}: {:?}",
            verdict.verdict.failure
        );
        assert_eq!(
            verdict.verdict.records_checked, summary.entries,
            "{scope:?}"
        );
    }
    // Seed 004's detail levels: a lower-level bundle verifies, shows its
    // level's fields, and leaves out what it hides.
    for requested in [
        Some(DetailLevel::Generic),
        Some(DetailLevel::Detailed),
        None,
    ] {
        let level = requested.unwrap_or(DetailLevel::Full);
        let text = bundle_text(
            store.as_ref(),
            ExportScope::Session("s1".into()),
            requested,
            &cp,
            now,
        );
        let verdict = verify_text(store.as_ref(), &text);
        assert!(
            verdict.verdict.verified,
            "{level}: {:?}",
            verdict.verdict.failure
        );
        assert_eq!(
            text.contains("\"r1\""),
            level == DetailLevel::Full,
            "{level}: content"
        );
        // The agent is shown at every level, as its session's header (an
        // operational record shown whole) names it anyway: hashed agent
        // ids are for sessions that must not name theirs.
        let steps: Vec<&str> = text.lines().filter(|l| l.contains("\"fields\":")).collect();
        assert!(!steps.is_empty());
        assert!(
            steps.iter().all(|l| l.contains("\"agent_id\":\"agent-1\"")),
            "{level}: agent in steps"
        );
        // The signed selection states the level.
        assert_eq!(verdict.selection.as_ref().map(|s| s.level), Some(level));
    }
    // `full` as a sharing level needs the session's recorded consent.
    assert!(matches!(
        export_at(store.as_ref(), ORG, &ExportScope::Session("s1".into()), cairn_store::ops::ExportOptions { level: Some(DetailLevel::Full), since_size: None }, &cp, now, &mut Vec::new(), &mut |_| {}),
        Err(cairn_store::ops::ExportError::Consent(session)) if session == "s1"
    ));
    assert!(matches!(
        export_at(
            store.as_ref(),
            ORG,
            &ExportScope::All,
            cairn_store::ops::ExportOptions {
                level: Some(DetailLevel::Generic),
                since_size: None
            },
            &cp,
            now,
            &mut Vec::new(),
            &mut |_| {}
        ),
        Err(cairn_store::ops::ExportError::Level(_))
    ));
    assert!(
        export(
            store.as_ref(),
            ORG,
            &ExportScope::Session("nope".into()),
            &cp,
            now,
            &mut Vec::new(),
            &mut |_| {}
        )
        .is_err()
    );
}

/// A partial export whose signed selection would be a bundle line longer
/// than verifiers read is refused before a byte is written, whichever
/// part of the selection makes it long (its sessions or a session's audit
/// events), and an export exactly at the bound is planned.
pub(super) fn exports_refuse_a_selection_line_verifiers_would_not_read(backend: &dyn Backend) {
    use cairn_store::ops::{ExportError, ExportOptions, plan_export_within};
    let store = backend.open("export-selection-bound");
    let ledger = ledger(Arc::clone(&store));
    for i in 0..6 {
        append(&ledger, step(&format!("s{i}"), "Reasoning", "r")).unwrap();
    }
    for i in 0..40 {
        ledger
            .write(WriteRequest::AuditEvent {
                org_id: ORG.into(),
                event_id: Some(format!("ev-{i}")),
                session_id: Some("s0".into()),
                action: "sql_query".into(),
                detail: None,
            })
            .unwrap();
    }
    let cp = checkpoint(&ledger);
    let now = Timestamp::from_micros(0).unwrap();
    let range = ExportScope::Range {
        since: now,
        until: Timestamp::parse_rfc3339("9999-12-31T23:59:59Z").unwrap(),
    };
    let options = ExportOptions {
        level: None,
        since_size: None,
    };
    for scope in [ExportScope::Session("s0".into()), range] {
        // The selection line the unbounded plan signs, as written.
        let text = bundle_text(store.as_ref(), scope.clone(), None, &cp, now);
        let line = text
            .lines()
            .find(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .is_ok_and(|v| v.get("selection").is_some())
            })
            .expect("a partial bundle has a selection line");
        let plan = |max| plan_export_within(store.as_ref(), ORG, &scope, options, &cp, now, max);
        assert!(
            plan(line.len()).is_ok(),
            "{scope}: a line of the bound is planned"
        );
        match plan(line.len() - 1) {
            Err(ExportError::TooLarge(message)) => {
                assert!(message.contains("narrower scope"), "{message}")
            }
            other => panic!("{scope}: one byte over the bound: {other:?}"),
        }
        // Far below what the sessions and events alone take: refused while
        // the selection is gathered.
        assert!(
            matches!(plan(200), Err(ExportError::TooLarge(_))),
            "{scope}"
        );
    }
}

pub(super) fn imports_round_trip(backend: &dyn Backend) {
    let source = backend.open("import-source");
    let ledger = ledger(Arc::clone(&source));
    for i in 0..12 {
        append(
            &ledger,
            step(&format!("s{}", i % 2), "Reasoning", &format!("r{i}")),
        )
        .unwrap();
    }
    ledger
        .write(WriteRequest::Seal {
            org_id: ORG.into(),
            session_id: "s1".into(),
            require_reflection: false,
        })
        .unwrap();
    let cp = checkpoint(&ledger);
    let mut bundle = Vec::new();
    export(
        source.as_ref(),
        ORG,
        &ExportScope::All,
        &cp,
        Timestamp::from_micros(0).unwrap(),
        &mut bundle,
        &mut |_| {},
    )
    .unwrap();
    // A byte that is not UTF-8 is a change: the bundle is rejected with
    // its verdict, and nothing is written.
    let rejected = backend.open("import-rejected");
    let mut changed = bundle.clone();
    let third_line = changed
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(1)
        .unwrap()
        .0
        + 1;
    let at = third_line + 10;
    changed[at] = 0xff;
    let open_changed = || -> std::io::Result<Box<dyn std::io::BufRead>> {
        Ok(Box::new(std::io::Cursor::new(changed.clone())))
    };
    match cairn_store::ops::import_bundle(
        rejected.as_ref(),
        &open_changed,
        &[],
        cairn_store::ops::DEFAULT_MAX_BUNDLE_LINE_BYTES,
        &mut |_| {},
    )
    .unwrap()
    {
        cairn_store::ops::ImportOutcome::Rejected(verdict) => assert_eq!(
            verdict.verdict.failure.map(|f| (f.reason, f.at.line)),
            Some((cairn_core::verify::Reason::MalformedRecord, Some(3)))
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(rejected.log_size(ORG).unwrap(), 0);

    let target = backend.open("import-target");
    let outcome = import_bytes(target.as_ref(), &bundle).unwrap();
    assert!(
        matches!(
            outcome,
            cairn_store::ops::ImportOutcome::Imported {
                entries: 15,
                mirror: true,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(target.root_at(ORG, 15).unwrap(), cp.root);
    assert_eq!(target.log_signer(ORG).unwrap().1, *source.server_key());
    assert_eq!(
        target.latest_checkpoint(ORG).unwrap().map(|c| c.note),
        Some(cp.note)
    );
    assert_verifies(target.as_ref());
    let target_ledger = Ledger::new(Arc::clone(&target), SequencerConfig::default());
    assert_eq!(
        refused(append(&target_ledger, step("s0", "plan", "x"))),
        Refusal::ReadOnlyOrg { org_id: ORG.into() }
    );
    assert!(matches!(
        import_bytes(target.as_ref(), &bundle),
        Err(cairn_store::ImportError::Refused(_))
    ));
}

/// Analyst SQL: queries read the org's views, in the backend's dialect;
/// nothing that writes or reaches another org runs.
pub(super) fn analyst_sql_reads_one_org_and_writes_nothing(backend: &dyn Backend) {
    use cairn_store::analyst::AnalystError;
    let store = backend.open("analyst");
    let ledger = ledger(Arc::clone(&store));
    for (i, kind) in ["Observation", "Decision", "Decision", "FinalAnswer"]
        .iter()
        .enumerate()
    {
        let mut s = step("s1", kind, &format!("pricing step {i}"));
        s.confidence = Some(0.5 + i as f64 / 10.0);
        append(&ledger, s).unwrap();
    }
    let mut other = step("theirs", "Decision", "another org's secret");
    other.org_id = "globex".into();
    append(&ledger, other).unwrap();
    ledger
        .write(WriteRequest::Seal {
            org_id: ORG.into(),
            session_id: "s1".into(),
            require_reflection: false,
        })
        .unwrap();
    let size = store.log_size(ORG).unwrap();

    let result = store
        .analyst_query(
            ORG,
            "SELECT step_type, count(*) AS n, max(confidence) AS top FROM steps GROUP BY step_type ORDER BY step_type",
            100,
        )
        .unwrap();
    assert_eq!(result.columns, ["step_type", "n", "top"]);
    assert_eq!(
        result.rows,
        vec![
            vec![
                serde_json::json!("Decision"),
                serde_json::json!(2),
                serde_json::json!(0.7)
            ],
            vec![
                serde_json::json!("FinalAnswer"),
                serde_json::json!(1),
                serde_json::json!(0.8)
            ],
            vec![
                serde_json::json!("Observation"),
                serde_json::json!(1),
                serde_json::json!(0.5)
            ],
        ]
    );
    let sessions = store
        .analyst_query(
            ORG,
            "SELECT session_id, step_count, agent_id FROM sessions",
            100,
        )
        .unwrap();
    assert_eq!(
        sessions.rows,
        vec![vec![
            serde_json::json!("s1"),
            serde_json::json!(4),
            serde_json::json!("analyst")
        ]]
    );
    let records = store
        .analyst_query(
            ORG,
            "SELECT type, count(*) FROM records GROUP BY type ORDER BY type",
            100,
        )
        .unwrap();
    assert_eq!(records.rows.len(), 2, "{:?}", records.rows);
    let hashes = store
        .analyst_query(
            ORG,
            "SELECT current_hash, created_at FROM steps WHERE step_index = 0",
            100,
        )
        .unwrap();
    let first = store
        .step_by_trace(ORG, &{
            let mut t = String::new();
            store
                .read_session(ORG, "s1", &mut |s| {
                    t = s.record.step.trace_id;
                    false
                })
                .unwrap();
            t
        })
        .unwrap()
        .unwrap();
    assert_eq!(
        hashes.rows[0][0],
        serde_json::json!(first.record.hash.to_hex())
    );
    assert!(
        hashes.rows[0][1]
            .as_str()
            .unwrap()
            .starts_with(&first.record.step.created_at.to_string()[..19])
    );
    // Another org's rows are not in this org's views, and vice versa.
    let theirs = store
        .analyst_query("globex", "SELECT content FROM steps", 100)
        .unwrap();
    assert_eq!(
        theirs.rows,
        vec![vec![serde_json::json!("another org's secret")]]
    );
    let mine = store
        .analyst_query(
            ORG,
            "SELECT count(*) FROM steps WHERE content LIKE '%secret%'",
            100,
        )
        .unwrap();
    assert_eq!(mine.rows, vec![vec![serde_json::json!(0)]]);
    // Row limit.
    let limited = store
        .analyst_query(ORG, "SELECT seq FROM steps ORDER BY seq", 2)
        .unwrap();
    assert!(limited.truncated && limited.rows.len() == 2);
    // Refused: writes, other tables, other orgs' data by any route.
    for sql in [
        "DELETE FROM entries",
        "UPDATE steps SET content = 'x'",
        "SELECT * FROM entries",
        "SELECT * FROM api_keys",
        "WITH gone AS (DELETE FROM entries RETURNING *) SELECT * FROM gone",
        "SELECT * FROM steps; DROP TABLE entries",
    ] {
        assert!(
            matches!(
                store.analyst_query(ORG, sql, 100),
                Err(AnalystError::Refused(_))
            ),
            "{sql}"
        );
    }
    // A CTE named like a real table is the caller's own, never the table,
    // even from another scope (where the name resolves to nothing).
    assert!(matches!(
        store.analyst_query(
            ORG,
            "SELECT * FROM (WITH entries AS (SELECT 1 AS x) SELECT x FROM entries) t, entries",
            100
        ),
        Err(AnalystError::Failed(_))
    ));
    let own = store
        .analyst_query(
            ORG,
            "WITH entries AS (SELECT content FROM steps) SELECT count(*) FROM entries",
            100,
        )
        .unwrap();
    assert_eq!(own.rows, vec![vec![serde_json::json!(4)]]);
    assert!(matches!(
        store.analyst_query(ORG, "SELECT no_such_column FROM steps", 100),
        Err(AnalystError::Failed(_))
    ));
    assert_eq!(store.log_size(ORG).unwrap(), size, "nothing was written");
    assert_verifies(store.as_ref());
}
