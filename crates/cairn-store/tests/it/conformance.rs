//! The conformance suite: the contract of [`LedgerStore`] and the
//! sequencer, written once and run against every backend. A backend's test
//! module calls [`run_all`] with a factory that opens a fresh store, and a
//! reopen function that opens the same store again.

use cairn_core::Timestamp;
use cairn_core::commit::{
    AgentSignature, Openings, agent_key_id, signed_step_message, step_digest,
};
use cairn_core::detail::DetailLevel;
use cairn_core::ed25519_dalek::{Signer as _, SigningKey};
use cairn_core::log::{LogRecord, OpRecord};
use cairn_core::merkle::{verify_consistency, verify_inclusion};
use cairn_core::record::{Profile, RecordError, Step};
use cairn_store::ops::{ExportScope, ReviewItem, export, export_at, verify_org, verify_session};
use cairn_store::{
    AppendError, Ledger, LedgerStore, NewSession, NewStep, Refusal, SequencerConfig, SessionFilter,
    StoreError, WriteRequest, Written,
};
use std::sync::Arc;

/// Opens a backend: `open(name)` opens (or reopens) the store called
/// `name`, fresh the first time.
pub trait Backend {
    /// Opens the store `name`.
    fn open(&self, name: &str) -> Arc<dyn LedgerStore>;
}

pub const ORG: &str = "acme";

pub fn step(session: &str, kind: &str, content: &str) -> NewStep {
    NewStep {
        org_id: ORG.into(),
        session_id: session.into(),
        agent_id: "analyst".into(),
        kind_label: kind.into(),
        content: Some(content.into()),
        caller: "test".into(),
        ..NewStep::default()
    }
}

pub(crate) fn ledger(store: Arc<dyn LedgerStore>) -> Ledger {
    Ledger::new(store, SequencerConfig::default())
}

pub(crate) fn append(ledger: &Ledger, s: NewStep) -> Result<Written, AppendError> {
    ledger.write(WriteRequest::Step(Box::new(s)))
}

fn refused(result: Result<Written, AppendError>) -> Refusal {
    match result {
        Err(AppendError::Refused(r)) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn checkpoint(ledger: &Ledger) -> cairn_store::StoredCheckpoint {
    match ledger.write(WriteRequest::Checkpoint { org_id: ORG.into() }) {
        Ok(Written::Checkpoint(cp)) => cp,
        other => panic!("checkpoint: {other:?}"),
    }
}

pub(crate) fn assert_verifies(store: &dyn LedgerStore) {
    let verdict = verify_org(store, ORG, &[], &[], &mut |_| {}).unwrap();
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
}

/// Exports `scope` of the org at `level` (None: as stored) as bundle text.
fn bundle_text(
    store: &dyn LedgerStore,
    scope: ExportScope,
    level: Option<DetailLevel>,
    cp: &cairn_store::StoredCheckpoint,
    exported_at: Timestamp,
) -> String {
    let mut out = Vec::new();
    export_at(
        store,
        ORG,
        &scope,
        cairn_store::ops::ExportOptions {
            level,
            since_size: None,
        },
        cp,
        exported_at,
        &mut out,
        &mut |_| {},
    )
    .unwrap();
    String::from_utf8(out).unwrap()
}

/// The verdict on bundle text, with the store's key pinned.
fn verify_text(store: &dyn LedgerStore, text: &str) -> cairn_core::bundle::BundleVerdict {
    let mut v = cairn_core::bundle::BundleVerifier::new(vec![store.server_key().clone()]);
    for line in text.lines() {
        v.push_line(line);
    }
    v.finish()
}

pub fn run_all(backend: &dyn Backend) {
    appends_are_sequenced_and_readable(backend);
    concurrent_writers_get_gap_free_chains(backend);
    refusals_write_nothing(backend);
    seals_close_sessions(backend);
    signed_steps_are_checked(backend);
    proofs_and_checkpoints_verify(backend);
    hash_tiles_are_the_trees(backend);
    log_keys_are_added_and_retired(backend);
    state_survives_reopen(backend);
    listing_and_lookup(backend);
    crate::listing::session_listing_filters_and_pages(backend);
    crate::search::full_text_search_finds_and_forgets(backend);
    exports_verify_offline(backend);
    imports_round_trip(backend);
    api_keys_are_stored_hashed_and_revocable(backend);
    cosignatures_are_kept_per_checkpoint_and_witness(backend);
    erasure_and_retention_keep_everything_verifiable(backend);
    crate::embedding::run_all(backend);
    decision_trail_lifecycle(backend);
    links_name_existing_records(backend);
    reviews_form_a_queue(backend);
    signed_traces_import_and_verify(backend);
    analyst_sql_reads_one_org_and_writes_nothing(backend);
}

/// Analyst SQL: queries read the org's views, in the backend's dialect;
/// nothing that writes or reaches another org runs.
fn analyst_sql_reads_one_org_and_writes_nothing(backend: &dyn Backend) {
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

/// Seed 004's example trace (generic level), its key id adapted to `key`,
/// signed by `key` at `level`.
pub fn seed_004_trace(key: &SigningKey, trace_id: &str, level: &str) -> serde_json::Value {
    use base64::Engine as _;
    let mut trace = serde_json::json!({
        "trace_id": trace_id,
        "thought_id": "th_seed_08b4901c_3cacdfa6",
        "agent_id_hash": "e8821136df22",
        "started_at": "2026-02-08T12:34:56.123Z",
        "completed_at": "2026-02-08T12:34:58.456Z",
        "trace_level": level,
        "components": [
            {"component_type": "observation", "event_type": "THOUGHT_START",
             "timestamp": "2026-02-08T12:34:56.123Z",
             "data": {"round_number": 1, "thought_depth": 0, "task_priority": 5}},
            {"component_type": "rationale", "event_type": "DMA_RESULTS",
             "timestamp": "2026-02-08T12:34:57.234Z",
             "data": {"csdma": {"plausibility_score": 0.85}, "dsdma": {"domain_alignment": 0.80},
                      "pdma": {"has_conflicts": false}, "idma": {"k_eff": 1.0, "phase": "healthy"}}},
            {"component_type": "conscience", "event_type": "CONSCIENCE_RESULT",
             "timestamp": "2026-02-08T12:34:57.890Z",
             "data": {"conscience_passed": true, "entropy_level": 0.12, "coherence_level": 0.95}},
            {"component_type": "action", "event_type": "ACTION_RESULT",
             "timestamp": "2026-02-08T12:34:58.456Z",
             "data": {"execution_success": true, "tokens_total": 1847, "cost_cents": 0.02}},
        ],
        "signature": "A".repeat(86) + "==",
        "signature_key_id": agent_key_id(&key.verifying_key()),
    });
    let parsed = cairn_core::trace::CompleteTrace::parse(&trace).unwrap();
    let signature = key.sign(&parsed.signed_payload()).to_bytes();
    trace["signature"] =
        serde_json::json!(base64::engine::general_purpose::STANDARD.encode(signature));
    trace
}

/// Seed 004: an agent-signed trace is checked at import, its components
/// become steps, and the original stays verifiable in the log and exports.
fn signed_traces_import_and_verify(backend: &dyn Backend) {
    let store = backend.open("traces");
    let ledger = ledger(Arc::clone(&store));
    let key = SigningKey::from_bytes(&[42; 32]);
    let import = |trace: serde_json::Value| WriteRequest::ImportTrace {
        org_id: ORG.into(),
        session_id: None,
        trace,
        caller: "test".into(),
    };
    // No key registered yet.
    assert!(matches!(
        refused(ledger.write(import(seed_004_trace(&key, "trace-1", "generic")))),
        Refusal::BadSignature(_)
    ));
    ledger
        .write(WriteRequest::RegisterKey {
            org_id: ORG.into(),
            agent_id: "e8821136df22".into(),
            public_key: key.verifying_key(),
        })
        .unwrap();
    let Written::TraceImported {
        session_id, steps, ..
    } = ledger
        .write(import(seed_004_trace(&key, "trace-1", "generic")))
        .unwrap()
    else {
        panic!()
    };
    assert_eq!((session_id.as_str(), steps.len()), ("trace-1", 4));
    let info = store.session(ORG, "trace-1").unwrap().unwrap();
    assert_eq!(
        (info.header.agent_id.as_str(), info.header.full_consent),
        ("e8821136df22", false)
    );
    let mut kinds = Vec::new();
    store
        .read_session(ORG, "trace-1", &mut |s| {
            kinds.push((s.record.step.kind_label.clone(), s.record.step.token_count));
            true
        })
        .unwrap();
    assert_eq!(
        kinds,
        [
            ("THOUGHT_START".to_owned(), None),
            ("DMA_RESULTS".to_owned(), None),
            ("CONSCIENCE_RESULT".to_owned(), None),
            ("ACTION_RESULT".to_owned(), Some(1847)),
        ]
    );
    let (_, record) = store.op_by_id(ORG, "trace-1").unwrap().unwrap();
    assert!(matches!(record, OpRecord::SignedTrace(ref t) if t.trace.components.len() == 4));

    // One changed byte, another agent's key, a second import: refused,
    // and nothing written.
    let size = store.log_size(ORG).unwrap();
    let mut edited = seed_004_trace(&key, "trace-2", "generic");
    edited["components"][3]["data"]["tokens_total"] = serde_json::json!(1848);
    assert!(matches!(
        refused(ledger.write(import(edited))),
        Refusal::BadSignature(_)
    ));
    let mut wrong_agent = seed_004_trace(&key, "trace-3", "generic");
    wrong_agent["agent_id_hash"] = serde_json::json!("0000000000000000");
    assert!(matches!(
        refused(ledger.write(import(wrong_agent))),
        Refusal::BadSignature(_)
    ));
    assert!(matches!(
        refused(ledger.write(import(seed_004_trace(&key, "trace-1", "generic")))),
        Refusal::SessionExists { .. }
    ));
    let mut bad = seed_004_trace(&key, "trace-4", "generic");
    bad["components"] = serde_json::json!([]);
    assert!(matches!(
        refused(ledger.write(import(bad))),
        Refusal::InvalidRequest(_)
    ));
    assert_eq!(store.log_size(ORG).unwrap(), size);

    // A full-level trace carries its subject's consent.
    let Written::TraceImported { .. } = ledger
        .write(import(seed_004_trace(&key, "trace-full", "full_traces")))
        .unwrap()
    else {
        panic!()
    };
    assert!(
        store
            .session(ORG, "trace-full")
            .unwrap()
            .unwrap()
            .header
            .full_consent
    );
    assert_verifies(store.as_ref());

    // Exports at each level verify, the signed original included where its
    // level allows.
    let cp = checkpoint(&ledger);
    for (session, level, carries_original) in [
        ("trace-1", DetailLevel::Generic, true),
        ("trace-full", DetailLevel::Detailed, false),
        ("trace-full", DetailLevel::Full, true),
    ] {
        let text = bundle_text(
            store.as_ref(),
            ExportScope::Session(session.into()),
            Some(level),
            &cp,
            cairn_store::now(),
        );
        assert_eq!(
            text.contains("\"type\":\"signed-trace\""),
            carries_original,
            "{session} {level}"
        );
        let verdict = verify_text(store.as_ref(), &text);
        assert!(
            verdict.verdict.verified,
            "{session} {level}: {:?}",
            verdict.verdict.failure
        );
    }
}

fn session(id: &str, profile: Profile) -> NewSession {
    NewSession {
        org_id: ORG.into(),
        session_id: id.into(),
        agent_id: "analyst".into(),
        caller: "test".into(),
        profile,
        predecessor: None,
        predecessor_session: None,
        full_consent: false,
    }
}

fn seal(
    ledger: &Ledger,
    session_id: &str,
    require_reflection: bool,
) -> Result<Written, AppendError> {
    ledger.write(WriteRequest::Seal {
        org_id: ORG.into(),
        session_id: session_id.into(),
        require_reflection,
    })
}

/// Seed 001: strict sessions, the closing reflection before the seal,
/// nothing after it, and continuity from a sealed predecessor, checked by
/// verification.
fn decision_trail_lifecycle(backend: &dyn Backend) {
    let store = backend.open("trail");
    let ledger = ledger(Arc::clone(&store));
    let Written::Session { genesis, .. } = ledger
        .write(WriteRequest::StartSession(session(
            "task-1",
            Profile::Strict,
        )))
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(
        store.session(ORG, "task-1").unwrap().unwrap().head,
        genesis,
        "the genesis is recorded before any step"
    );
    for kind in ["plan", "analysis", "decision"] {
        append(&ledger, step("task-1", kind, &format!("a {kind}"))).unwrap();
    }
    assert!(matches!(
        refused(append(
            &ledger,
            step("task-1", "Observation", "not a record type")
        )),
        Refusal::Invalid(RecordError::NotInStrictProfile { .. })
    ));
    assert_eq!(
        refused(seal(&ledger, "task-1", false)),
        Refusal::ReflectionRequired {
            session_id: "task-1".into()
        },
        "a strict session closes with a reflection"
    );
    append(&ledger, step("task-1", "reflection", "what happened")).unwrap();
    let Written::Sealed { seal: sealed, .. } = seal(&ledger, "task-1", true).unwrap() else {
        panic!()
    };
    assert!(matches!(
        refused(append(&ledger, step("task-1", "analysis", "too late"))),
        Refusal::Sealed { .. }
    ));

    // A standard session: only a proof-grade seal asks for the reflection.
    append(&ledger, step("loose", "FinalAnswer", "done")).unwrap();
    assert!(matches!(
        refused(seal(&ledger, "loose", true)),
        Refusal::ReflectionRequired { .. }
    ));

    // Continuity: by id (the final hash is filled in) or by hash.
    let mut next = session("task-2", Profile::Strict);
    next.predecessor_session = Some("task-1".into());
    ledger.write(WriteRequest::StartSession(next)).unwrap();
    let header = store.session(ORG, "task-2").unwrap().unwrap().header;
    assert_eq!(header.predecessor, Some(sealed.final_hash));
    // A sealed session has one successor: task-2 now; task-3 continues
    // task-2 by hash once it is sealed.
    append(&ledger, step("task-2", "reflection", "done")).unwrap();
    let Written::Sealed { seal: second, .. } = seal(&ledger, "task-2", false).unwrap() else {
        panic!()
    };
    let mut by_hash = session("task-3", Profile::Standard);
    by_hash.predecessor = Some(second.final_hash);
    ledger.write(WriteRequest::StartSession(by_hash)).unwrap();
    for (predecessor, predecessor_session) in [
        (None, Some("task-1".to_owned())),
        (Some(second.final_hash), None),
        (Some(cairn_core::Hash::sha256(b"nothing ends here")), None),
        (None, Some("loose".to_owned())),
        (None, Some("no-such-session".to_owned())),
        (Some(cairn_core::Hash::ZERO), Some("task-1".to_owned())),
    ] {
        let mut bad = session("task-x", Profile::Standard);
        bad.predecessor = predecessor;
        bad.predecessor_session = predecessor_session.clone();
        assert!(
            matches!(
                refused(ledger.write(WriteRequest::StartSession(bad))),
                Refusal::BadPredecessor(_)
            ),
            "{predecessor:?} {predecessor_session:?}"
        );
    }
    assert!(store.session(ORG, "task-x").unwrap().is_none());
    assert_verifies(store.as_ref());

    // An export of task-2 alone carries task-1's seal, so the link is
    // checked offline too.
    let cp = checkpoint(&ledger);
    let text = bundle_text(
        store.as_ref(),
        ExportScope::Session("task-2".into()),
        None,
        &cp,
        cairn_store::now(),
    );
    let verdict = verify_text(store.as_ref(), &text);
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
    assert!(
        text.contains("\"session_id\":\"task-1\""),
        "the predecessor's seal is in"
    );
}

/// Seed 001: corrections and audit-event references name real records.
fn links_name_existing_records(backend: &dyn Backend) {
    let store = backend.open("links");
    let ledger = ledger(Arc::clone(&store));
    let Written::Step { trace_id, .. } = append(&ledger, step("s1", "Decision", "buy")).unwrap()
    else {
        panic!()
    };
    let event = |id: Option<&str>, session: Option<&str>| WriteRequest::AuditEvent {
        org_id: ORG.into(),
        event_id: id.map(str::to_owned),
        session_id: session.map(str::to_owned),
        action: "sql_query".into(),
        detail: Some(serde_json::json!({"rows": 3})),
    };
    let Written::AuditEvent { event_id, .. } =
        ledger.write(event(Some("ev-1"), Some("s1"))).unwrap()
    else {
        panic!()
    };
    assert_eq!(event_id, "ev-1");
    let Written::AuditEvent {
        event_id: generated,
        ..
    } = ledger.write(event(None, None)).unwrap()
    else {
        panic!()
    };
    assert!(store.audit_event(ORG, &generated).unwrap().is_some());
    assert_eq!(
        refused(ledger.write(event(Some("ev-1"), None))),
        Refusal::DuplicateId { id: "ev-1".into() }
    );
    assert_eq!(
        refused(ledger.write(event(Some(&trace_id), None))),
        Refusal::DuplicateId {
            id: trace_id.clone()
        },
        "event ids and trace ids share one namespace"
    );
    assert!(matches!(
        refused(ledger.write(event(Some("ev-2"), Some("no-such-session")))),
        Refusal::UnknownSession { .. }
    ));
    let (seq, stored) = store.audit_event(ORG, "ev-1").unwrap().unwrap();
    assert_eq!(
        (stored.action.as_str(), stored.session_id.as_deref()),
        ("sql_query", Some("s1"))
    );
    assert!(seq > 0);

    let mut correction = step("s1", "Correction", "sell, not buy");
    correction.links.corrects = Some(trace_id.clone());
    correction.links.audit_event = Some("ev-1".into());
    append(&ledger, correction).unwrap();
    for (link, id) in [
        ("corrects", "no-such-trace"),
        ("corrects", "ev-1"),
        ("audit_event", trace_id.as_str()),
        ("parent", "nope"),
    ] {
        let mut s = step("s1", "Correction", "x");
        s.links.set(link, id.to_owned()).unwrap();
        assert!(
            matches!(refused(append(&ledger, s)), Refusal::UnknownLink { .. }),
            "{link} {id}"
        );
    }
    let records = store.op_records(ORG, "audit-event", 0, 10).unwrap();
    assert_eq!(records.len(), 2);
    assert_verifies(store.as_ref());
}

/// Seed 003: flagged steps wait for a reviewer; each decision is a record.
fn reviews_form_a_queue(backend: &dyn Backend) {
    use cairn_core::log::ReviewDecision;
    use cairn_store::ops::review_queue;
    let store = backend.open("reviews");
    let ledger = ledger(Arc::clone(&store));
    let mut flagged = Vec::new();
    for i in 0..3 {
        let mut s = step("s1", "Decision", &format!("risky decision {i}"));
        s.status = cairn_core::record::Status::Flagged;
        let Written::Step { trace_id, .. } = append(&ledger, s).unwrap() else {
            panic!()
        };
        flagged.push(trace_id);
        append(&ledger, step("s1", "Observation", "routine")).unwrap();
    }
    let Written::Step {
        trace_id: routine, ..
    } = append(&ledger, step("s1", "Observation", "routine")).unwrap()
    else {
        panic!()
    };
    let review = |trace: &str, decision| WriteRequest::Review {
        org_id: ORG.into(),
        trace_id: trace.into(),
        decision,
        reviewer: "key-alice".into(),
        note: Some("checked against policy 7".into()),
    };
    assert_eq!(
        refused(ledger.write(review(&routine, ReviewDecision::Approve))),
        Refusal::NotFlagged { trace_id: routine }
    );
    assert!(matches!(
        refused(ledger.write(review("no-such-trace", ReviewDecision::Approve))),
        Refusal::UnknownStep { .. }
    ));
    let queue = review_queue(store.as_ref(), ORG, false, 100).unwrap();
    assert_eq!(
        queue
            .iter()
            .map(|i| i.step.record.step.trace_id.clone())
            .collect::<Vec<_>>(),
        flagged
    );
    assert!(queue.iter().all(|i| i.state() == "pending"));

    let Written::Reviewed {
        review: recorded, ..
    } = ledger
        .write(review(&flagged[0], ReviewDecision::Approve))
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(recorded.session_id, "s1");
    ledger
        .write(review(&flagged[1], ReviewDecision::Escalate))
        .unwrap();
    let queue = review_queue(store.as_ref(), ORG, false, 100).unwrap();
    let states: Vec<_> = queue.iter().map(ReviewItem::state).collect();
    assert_eq!(
        states,
        ["escalated", "pending"],
        "approved leaves the queue"
    );
    ledger
        .write(review(&flagged[1], ReviewDecision::Reject))
        .unwrap();
    let all = review_queue(store.as_ref(), ORG, true, 100).unwrap();
    let states: Vec<_> = all.iter().map(ReviewItem::state).collect();
    assert_eq!(states, ["approved", "rejected", "pending"]);
    assert_eq!(all[1].reviews.len(), 2);
    assert_eq!(review_queue(store.as_ref(), ORG, true, 1).unwrap().len(), 1);
    assert_eq!(store.op_records(ORG, "review", 0, 100).unwrap().len(), 3);
    assert_verifies(store.as_ref());
}

fn erasure_and_retention_keep_everything_verifiable(backend: &dyn Backend) {
    let store = backend.open("erasure");
    let ledger = ledger(Arc::clone(&store));
    let mut traces = Vec::new();
    for i in 0..3 {
        let mut s = step(
            "personal",
            "Observation",
            &format!("the user's address is {i} Main Street"),
        );
        s.input = Some(serde_json::json!({"email": "someone@example.com"}));
        s.metadata = Some(serde_json::json!({"k": i}));
        let Written::Step { trace_id, .. } = append(&ledger, s).unwrap() else {
            panic!()
        };
        traces.push(trace_id);
    }
    let size = store.log_size(ORG).unwrap();
    let erase = |trace: &str| WriteRequest::Erase {
        org_id: ORG.into(),
        trace_id: trace.into(),
        reason: "GDPR request 42".into(),
        actor: "dpo".into(),
    };
    let Written::Erased { seqs } = ledger.write(erase(&traces[1])).unwrap() else {
        panic!()
    };
    assert_eq!(seqs, vec![size]);
    assert_eq!(
        refused(ledger.write(erase(&traces[1]))),
        Refusal::AlreadyErased {
            trace_id: traces[1].clone()
        }
    );
    assert_eq!(
        refused(ledger.write(erase("no-such-trace"))),
        Refusal::UnknownStep {
            trace_id: "no-such-trace".into()
        }
    );
    let erased = store
        .step_by_trace(ORG, &traces[1])
        .unwrap()
        .unwrap()
        .record;
    assert!(erased.erased);
    assert_eq!(
        (
            erased.step.content.as_ref(),
            erased.step.input.as_ref(),
            erased.step.metadata.as_ref()
        ),
        (None, None, None)
    );
    assert_eq!(
        erased.recompute_digest(),
        erased.digest,
        "the digest still recomputes from the commitments"
    );
    assert!(
        store
            .step_by_trace(ORG, &traces[0])
            .unwrap()
            .unwrap()
            .record
            .step
            .content
            .is_some()
    );
    let mut erasure = None;
    store
        .read_log(ORG, size, size + 1, &mut |e| {
            erasure = e.entry.ok();
            false
        })
        .unwrap();
    match erasure.unwrap().record {
        LogRecord::Op {
            record: OpRecord::Erasure(r),
            ..
        } => {
            assert_eq!(
                (r.trace_id.as_str(), r.reason.as_str(), r.commitments.len()),
                (traces[1].as_str(), "GDPR request 42", 4)
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        verify_session(store.as_ref(), ORG, "personal")
            .unwrap()
            .map(|v| v.verified),
        Some(true)
    );
    assert_verifies(store.as_ref());
    // An export after erasure verifies and does not contain the value.
    let cp = checkpoint(&ledger);
    let text = bundle_text(
        store.as_ref(),
        ExportScope::All,
        None,
        &cp,
        Timestamp::from_micros(0).unwrap(),
    );
    assert!(!text.contains("1 Main Street") && text.contains("0 Main Street"));

    // Retention: only sessions whose last step is older than the cutoff.
    // (Steps are dated by the server: the old session is written first,
    // the cutoff taken, then the other sessions written to again.)
    for i in 0..2 {
        append(
            &ledger,
            step("ancient", "Reasoning", &format!("old thought {i}")),
        )
        .unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(5));
    let cutoff = cairn_store::now();
    std::thread::sleep(std::time::Duration::from_millis(5));
    append(&ledger, step("personal", "Reasoning", "still going")).unwrap();
    let Written::Erased { seqs } = ledger
        .write(WriteRequest::Retention {
            org_id: ORG.into(),
            older_than: cutoff,
        })
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(seqs.len(), 2);
    let mut ancient = Vec::new();
    store
        .read_session(ORG, "ancient", &mut |s| {
            ancient.push(s.record.erased);
            true
        })
        .unwrap();
    assert_eq!(ancient, vec![true, true]);
    assert!(
        store
            .step_by_trace(ORG, &traces[2])
            .unwrap()
            .unwrap()
            .record
            .step
            .content
            .is_some(),
        "recent sessions are kept"
    );
    let Written::Erased { seqs } = ledger
        .write(WriteRequest::Retention {
            org_id: ORG.into(),
            older_than: cutoff,
        })
        .unwrap()
    else {
        panic!()
    };
    assert!(seqs.is_empty(), "a second run finds nothing left to erase");
    assert_verifies(store.as_ref());
}

/// Witnesses' cosignature lines: kept per org, checkpoint size and witness,
/// in witness order; a witness's later line replaces its earlier one.
fn cosignatures_are_kept_per_checkpoint_and_witness(backend: &dyn Backend) {
    let store = backend.open("cosignatures");
    assert!(store.cosignatures(ORG, 5).unwrap().is_empty());
    store
        .put_cosignature(ORG, 5, "w2.example", "— w2.example BBBB")
        .unwrap();
    store
        .put_cosignature(ORG, 5, "w1.example", "— w1.example AAAA")
        .unwrap();
    store
        .put_cosignature(ORG, 6, "w1.example", "— w1.example CCCC")
        .unwrap();
    store
        .put_cosignature("other", 5, "w1.example", "— w1.example DDDD")
        .unwrap();
    assert_eq!(
        store.cosignatures(ORG, 5).unwrap(),
        ["— w1.example AAAA", "— w2.example BBBB"]
    );
    store
        .put_cosignature(ORG, 5, "w1.example", "— w1.example EEEE")
        .unwrap();
    assert_eq!(
        store.cosignatures(ORG, 5).unwrap(),
        ["— w1.example EEEE", "— w2.example BBBB"]
    );
    assert_eq!(
        store.cosignatures("other", 5).unwrap(),
        ["— w1.example DDDD"]
    );
}

fn api_keys_are_stored_hashed_and_revocable(backend: &dyn Backend) {
    use cairn_store::{ApiKey, Role, token_hash};
    let store = backend.open("keys");
    let now = Timestamp::from_micros(1_800_000_000_000_000).unwrap();
    let (writer, token) =
        ApiKey::generate(ORG, Role::Writer, Some("analyst"), "agent key", now).unwrap();
    let (admin, admin_token) = ApiKey::generate(ORG, Role::Admin, None, "bootstrap", now).unwrap();
    store.put_api_key(&writer).unwrap();
    store.put_api_key(&admin).unwrap();
    assert!(token.starts_with(&format!("cairn_{}_", writer.id)));
    assert_ne!(token, admin_token);
    assert_eq!(
        store.api_key_by_hash(&token_hash(&token)).unwrap(),
        Some(writer.clone())
    );
    assert_eq!(
        store
            .api_key_by_hash(&token_hash("cairn_nope_nope"))
            .unwrap(),
        None
    );
    assert_eq!(store.api_keys(ORG).unwrap().len(), 2);
    assert!(store.api_keys("other").unwrap().is_empty());
    assert!(
        !store.revoke_api_key("other", &writer.id, now).unwrap(),
        "keys of another org cannot be revoked"
    );
    assert!(store.revoke_api_key(ORG, &writer.id, now).unwrap());
    assert_eq!(
        store
            .api_key_by_hash(&token_hash(&token))
            .unwrap()
            .unwrap()
            .revoked_at,
        Some(now)
    );
    assert!(!store.revoke_api_key(ORG, &writer.id, now).unwrap());
}

fn appends_are_sequenced_and_readable(backend: &dyn Backend) {
    let store = backend.open("sequenced");
    let ledger = ledger(Arc::clone(&store));
    let first = append(
        &ledger,
        step("s1", "Observation", "User asked for Q4 revenue"),
    )
    .unwrap();
    let Written::Step {
        seq,
        step_index,
        session_created,
        ..
    } = first
    else {
        panic!()
    };
    // The implicit session start is recorded first.
    assert_eq!((seq, step_index, session_created), (1, 0, true));
    let second = append(&ledger, step("s1", "ToolCall", "Querying orders")).unwrap();
    let Written::Step {
        seq,
        step_index,
        session_created,
        hash,
        ..
    } = second
    else {
        panic!()
    };
    assert_eq!((seq, step_index, session_created), (2, 1, false));

    let mut entries = Vec::new();
    store
        .read_log(ORG, 0, 10, &mut |e| {
            entries.push(e.entry.unwrap());
            true
        })
        .unwrap();
    assert_eq!(entries.len(), 3);
    assert!(
        matches!(&entries[0].record, LogRecord::Op { record: OpRecord::SessionStart(h), .. } if h.session_id == "s1" && h.caller == "test")
    );
    // Entries by seq: the ones the log holds, in order, as read_log
    // reads them; seqs past the log (or past any log) are left out.
    let mut picked = Vec::new();
    store
        .read_entries(ORG, &[0, 2, 7, 1 << 40, u64::MAX], &mut |e| {
            picked.push((e.seq, e.leaf, e.entry.unwrap()));
            true
        })
        .unwrap();
    let mut ranged = Vec::new();
    for seq in [0, 2] {
        store
            .read_log(ORG, seq, seq + 1, &mut |e| {
                ranged.push((e.seq, e.leaf, e.entry.unwrap()));
                true
            })
            .unwrap();
    }
    assert_eq!(picked.len(), 2);
    assert_eq!(format!("{picked:?}"), format!("{ranged:?}"));
    let mut stopped = 0;
    store
        .read_entries(ORG, &[0, 1, 2], &mut |_| {
            stopped += 1;
            false
        })
        .unwrap();
    assert_eq!(stopped, 1, "visit returning false stops the read");
    store
        .read_entries("other-org", &[0, 1], &mut |_| panic!("another org's log"))
        .unwrap();
    let mut steps = Vec::new();
    store
        .read_session(ORG, "s1", &mut |s| {
            steps.push(s);
            true
        })
        .unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[1].record.hash, hash);
    assert_eq!(steps[1].record.prev_hash, steps[0].record.hash);
    assert_eq!(steps[0].record.step.kind_label, "Observation");
    assert_eq!(
        steps[1].record.step.content.as_deref(),
        Some("Querying orders")
    );
    let info = store.session(ORG, "s1").unwrap().unwrap();
    assert_eq!((info.step_count, info.head, info.seal), (2, hash, None));
    assert_eq!(
        verify_session(store.as_ref(), ORG, "s1")
            .unwrap()
            .map(|v| v.verified),
        Some(true)
    );
    assert!(store.session(ORG, "nope").unwrap().is_none());
    assert!(store.session("other-org", "s1").unwrap().is_none());
    assert_verifies(store.as_ref());
}

fn concurrent_writers_get_gap_free_chains(backend: &dyn Backend) {
    let store = backend.open("concurrent");
    let ledger = Arc::new(ledger(Arc::clone(&store)));
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let ledger = Arc::clone(&ledger);
            std::thread::spawn(move || {
                for i in 0..25 {
                    let mut s = step(
                        &format!("s{}", w % 4),
                        "Reasoning",
                        &format!("writer {w} step {i}"),
                    );
                    s.agent_id = format!("agent-{}", w % 4);
                    append(&ledger, s).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(store.log_size(ORG).unwrap(), 16 * 25 + 4);
    for s in 0..4 {
        let mut indexes = Vec::new();
        store
            .read_session(ORG, &format!("s{s}"), &mut |st| {
                indexes.push(st.record.step.step_index);
                true
            })
            .unwrap();
        assert_eq!(indexes, (0..100).collect::<Vec<u64>>());
    }
    assert_verifies(store.as_ref());
}

fn refusals_write_nothing(backend: &dyn Backend) {
    let store = backend.open("refusals");
    let ledger = ledger(Arc::clone(&store));
    append(&ledger, step("s1", "plan", "first")).unwrap();
    let size = store.log_size(ORG).unwrap();

    assert!(matches!(
        refused(append(&ledger, step("s2", "Informational", "x"))),
        Refusal::Invalid(RecordError::UnknownKind { .. })
    ));
    let mut s = step("s1", "plan", "x");
    s.confidence = Some(1.5);
    assert!(matches!(
        refused(append(&ledger, s)),
        Refusal::Invalid(RecordError::ConfidenceOutOfRange { .. })
    ));
    let s = step("s1", "plan", &"x".repeat(65_537));
    assert!(matches!(
        refused(append(&ledger, s)),
        Refusal::Invalid(RecordError::ContentTooLong { .. })
    ));
    let s = step("bad session id", "plan", "x");
    assert!(matches!(
        refused(append(&ledger, s)),
        Refusal::Invalid(RecordError::MalformedId { .. })
    ));
    let mut s = step("s1", "plan", "x");
    s.agent_id = "someone-else".into();
    assert!(matches!(
        refused(append(&ledger, s)),
        Refusal::AgentMismatch { .. }
    ));
    let mut s = step("s1", "plan", "x");
    s.step_index = Some(5);
    assert_eq!(
        refused(append(&ledger, s)),
        Refusal::IndexConflict {
            expected: 1,
            given: 5
        }
    );
    let mut s = step("s1", "plan", "x");
    let Written::Step { trace_id, .. } = append(&ledger, step("s1", "plan", "second")).unwrap()
    else {
        panic!()
    };
    s.trace_id = Some(trace_id.clone());
    assert_eq!(
        refused(append(&ledger, s)),
        Refusal::DuplicateTraceId {
            trace_id: trace_id.clone()
        }
    );
    // A duplicate trace id in a step that would open a new session leaves
    // no session behind.
    let mut s = step("s-new", "plan", "x");
    s.trace_id = Some(trace_id);
    assert!(matches!(
        refused(append(&ledger, s)),
        Refusal::DuplicateTraceId { .. }
    ));
    assert!(store.session(ORG, "s-new").unwrap().is_none());
    // So does a wrong expected index, or a signature by an unknown key.
    let mut s = step("s-new", "plan", "x");
    s.step_index = Some(3);
    assert!(matches!(
        refused(append(&ledger, s)),
        Refusal::IndexConflict { .. }
    ));
    let mut s = step("s-new", "plan", "x");
    s.trace_id = Some("0198c0de-0000-7000-8000-000000000001".into());
    s.created_at = Some(cairn_store::now());
    s.step_index = Some(0);
    s.seed = Some([7; 32]);
    s.signature = Some(AgentSignature {
        key_id: "agent-000000000000".into(),
        signature: [0; 64],
    });
    assert!(matches!(
        refused(append(&ledger, s)),
        Refusal::BadSignature(_)
    ));
    assert!(store.session(ORG, "s-new").unwrap().is_none());

    let strict = NewSession {
        org_id: ORG.into(),
        session_id: "trail".into(),
        agent_id: "analyst".into(),
        caller: "test".into(),
        profile: Profile::Strict,
        predecessor: None,
        predecessor_session: None,
        full_consent: false,
    };
    assert!(matches!(
        ledger
            .write(WriteRequest::StartSession(strict.clone()))
            .unwrap(),
        Written::Session { .. }
    ));
    assert_eq!(
        refused(ledger.write(WriteRequest::StartSession(strict))),
        Refusal::SessionExists {
            session_id: "trail".into()
        }
    );
    assert!(matches!(
        refused(append(&ledger, step("trail", "ToolCall", "x"))),
        Refusal::Invalid(RecordError::NotInStrictProfile { .. })
    ));
    append(&ledger, step("trail", "analysis", "allowed")).unwrap();
    // Exactly the successful writes reached the log: second step, trail
    // start, trail step.
    assert_eq!(store.log_size(ORG).unwrap(), size + 3);
    assert_verifies(store.as_ref());
}

fn seals_close_sessions(backend: &dyn Backend) {
    let store = backend.open("seals");
    let ledger = ledger(Arc::clone(&store));
    for content in ["plan", "analysis", "reflection"] {
        append(&ledger, step("s1", content, content)).unwrap();
    }
    let Written::Sealed { seal, .. } = ledger
        .write(WriteRequest::Seal {
            org_id: ORG.into(),
            session_id: "s1".into(),
            require_reflection: false,
        })
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(seal.step_count, 3);
    assert_eq!(
        seal.final_hash,
        store.session(ORG, "s1").unwrap().unwrap().head
    );
    let text = cairn_core::note::open(&seal.note, std::slice::from_ref(store.server_key()))
        .expect("the seal note is signed by the server key");
    assert!(seal.states(&format!("{}/{ORG}", store.server_name()), &text));
    assert_eq!(
        refused(append(&ledger, step("s1", "plan", "late"))),
        Refusal::Sealed {
            session_id: "s1".into()
        }
    );
    assert_eq!(
        refused(ledger.write(WriteRequest::Seal {
            org_id: ORG.into(),
            session_id: "s1".into(),
            require_reflection: false,
        })),
        Refusal::Sealed {
            session_id: "s1".into()
        }
    );
    assert!(matches!(
        refused(ledger.write(WriteRequest::Seal {
            org_id: ORG.into(),
            session_id: "none".into(),
            require_reflection: false,
        })),
        Refusal::UnknownSession { .. }
    ));
    assert_eq!(store.session(ORG, "s1").unwrap().unwrap().seal, Some(seal));
    assert_eq!(
        verify_session(store.as_ref(), ORG, "s1")
            .unwrap()
            .map(|v| v.verified),
        Some(true)
    );
    assert_verifies(store.as_ref());
}

fn signed_steps_are_checked(backend: &dyn Backend) {
    let store = backend.open("signed");
    let ledger = ledger(Arc::clone(&store));
    let key = SigningKey::from_bytes(&[9; 32]);
    let Written::KeyRegistered { key_id, .. } = ledger
        .write(WriteRequest::RegisterKey {
            org_id: ORG.into(),
            agent_id: "analyst".into(),
            public_key: key.verifying_key(),
        })
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(key_id, agent_key_id(&key.verifying_key()));
    // The agent computes the digest itself, as FORMAT.md 7.3 describes, at
    // its own time (within the session's clock skew of the server's).
    let base = cairn_store::now().as_micros();
    let make = |index: u64, content: &str, sign_with: &SigningKey| {
        let created_at = Timestamp::from_micros(base + index as i64).unwrap();
        let seed = [index as u8 + 1; 32];
        let trace_id = format!("signed-{index}-{}", content.replace(' ', "-"));
        let mut s = step("signed", "Decision", content);
        s.trace_id = Some(trace_id.clone());
        s.created_at = Some(created_at);
        s.step_index = Some(index);
        s.seed = Some(seed);
        let mut core = Step::new(
            trace_id, ORG, "analyst", "signed", index, "Decision", created_at,
        )
        .unwrap();
        core.content = Some(content.into());
        core.signer_key_id = Some(agent_key_id(&key.verifying_key()));
        let digest = step_digest(&core, &Openings::from_seed(&seed));
        s.signature = Some(AgentSignature {
            key_id: agent_key_id(&key.verifying_key()),
            signature: sign_with.sign(&signed_step_message(&digest)).to_bytes(),
        });
        s
    };
    append(&ledger, make(0, "approve the refund", &key)).unwrap();
    let stranger = SigningKey::from_bytes(&[8; 32]);
    assert!(matches!(
        refused(append(&ledger, make(1, "forged", &stranger))),
        Refusal::BadSignature(_)
    ));
    let mut incomplete = make(1, "no index", &key);
    incomplete.step_index = None;
    assert_eq!(
        refused(append(&ledger, incomplete)),
        Refusal::SignedStepIncomplete
    );
    append(&ledger, make(1, "second", &key)).unwrap();
    let mut steps = Vec::new();
    store
        .read_session(ORG, "signed", &mut |s| {
            steps.push(s);
            true
        })
        .unwrap();
    assert!(steps.iter().all(|s| s.record.signature.is_some()));
    assert_eq!(store.agent_keys(ORG).unwrap().len(), 1);
    // Registering the same key again is idempotent.
    assert!(matches!(
        ledger
            .write(WriteRequest::RegisterKey {
                org_id: ORG.into(),
                agent_id: "analyst".into(),
                public_key: key.verifying_key()
            })
            .unwrap(),
        Written::KeyRegistered { .. }
    ));
    assert_eq!(store.agent_keys(ORG).unwrap().len(), 1);
    // A key speaks for one agent for good: registering it for another is
    // refused (it used to replace the binding silently).
    assert_eq!(
        refused(ledger.write(WriteRequest::RegisterKey {
            org_id: ORG.into(),
            agent_id: "mallory".into(),
            public_key: key.verifying_key()
        })),
        Refusal::KeyConflict {
            key_id: key_id.clone(),
            agent_id: "analyst".into()
        }
    );
    // A signed step dated far from the server's clock is refused.
    let mut late = make(2, "late", &key);
    late.created_at = Some(Timestamp::from_micros(base - 3_600_000_000).unwrap());
    assert!(matches!(
        refused(append(&ledger, late)),
        Refusal::ClockSkew { max_s: 300, .. }
    ));
    // Rotation: the old key is revoked and the new one registered at once;
    // the old one signs nothing from then on, the new one does.
    let next = SigningKey::from_bytes(&[10; 32]);
    let Written::KeyRevoked {
        key_id: revoked,
        successor: Some((_, next_id)),
        ..
    } = ledger
        .write(WriteRequest::RotateKey {
            org_id: ORG.into(),
            agent_id: "analyst".into(),
            old_key_id: key_id.clone(),
            public_key: next.verifying_key(),
        })
        .unwrap()
    else {
        panic!("a rotation revokes and registers")
    };
    assert_eq!(
        (revoked, next_id.clone()),
        (key_id.clone(), agent_key_id(&next.verifying_key()))
    );
    let mut old = make(2, "after rotation", &key);
    old.created_at = Some(cairn_store::now());
    assert!(matches!(
        refused(append(&ledger, old)),
        Refusal::BadSignature(m) if m.contains("revoked")
    ));
    assert!(matches!(
        refused(ledger.write(WriteRequest::RegisterKey {
            org_id: ORG.into(),
            agent_id: "analyst".into(),
            public_key: key.verifying_key()
        })),
        Refusal::KeyRevoked { .. }
    ));
    assert!(matches!(
        refused(ledger.write(WriteRequest::RevokeKey {
            org_id: ORG.into(),
            agent_id: "mallory".into(),
            key_id: next_id.clone(),
            reason: "no".into(),
        })),
        Refusal::UnknownKey { .. }
    ));
    let mut signed_by_next = make(2, "rotated", &next);
    signed_by_next.created_at = Some(cairn_store::now());
    let mut core = Step::new(
        signed_by_next.trace_id.clone().unwrap(),
        ORG,
        "analyst",
        "signed",
        2,
        "Decision",
        signed_by_next.created_at.unwrap(),
    )
    .unwrap();
    core.content = Some("rotated".into());
    core.signer_key_id = Some(next_id.clone());
    let digest = step_digest(&core, &Openings::from_seed(&signed_by_next.seed.unwrap()));
    signed_by_next.signature = Some(AgentSignature {
        key_id: next_id.clone(),
        signature: next.sign(&signed_step_message(&digest)).to_bytes(),
    });
    append(&ledger, signed_by_next).unwrap();
    let records = store.key_records(ORG, Some("analyst")).unwrap();
    assert_eq!(
        records
            .iter()
            .map(|(_, r)| r.entry_type())
            .collect::<Vec<_>>(),
        ["key-registration", "key-revocation", "key-registration"]
    );
    assert_verifies(store.as_ref());
    // After a restart the keys are what the log says: the revoked one
    // stays revoked, the new one registered to its agent.
    ledger.close();
    drop(store);
    let store = backend.open("signed");
    let ledger = self::ledger(Arc::clone(&store));
    let register = |key: &SigningKey, agent: &str| {
        ledger.write(WriteRequest::RegisterKey {
            org_id: ORG.into(),
            agent_id: agent.into(),
            public_key: key.verifying_key(),
        })
    };
    assert!(matches!(
        refused(register(&key, "analyst")),
        Refusal::KeyRevoked { .. }
    ));
    assert!(matches!(
        refused(register(&next, "mallory")),
        Refusal::KeyConflict { .. }
    ));
    assert!(matches!(
        register(&next, "analyst").unwrap(),
        Written::KeyRegistered { .. }
    ));
    let mut old = make(3, "after restart", &key);
    old.created_at = Some(cairn_store::now());
    assert!(matches!(
        refused(append(&ledger, old)),
        Refusal::BadSignature(m) if m.contains("revoked")
    ));
}

fn proofs_and_checkpoints_verify(backend: &dyn Backend) {
    let store = backend.open("proofs");
    let ledger = ledger(Arc::clone(&store));
    let mut checkpoints = Vec::new();
    for i in 0..70 {
        append(
            &ledger,
            step(&format!("s{}", i % 3), "Reasoning", &format!("r{i}")),
        )
        .unwrap();
        if i % 23 == 0 {
            checkpoints.push(checkpoint(&ledger));
        }
    }
    checkpoints.push(checkpoint(&ledger));
    let size = store.log_size(ORG).unwrap();
    let last = checkpoints.last().unwrap();
    assert_eq!(last.size, size);
    assert_eq!(store.latest_checkpoint(ORG).unwrap().as_ref(), Some(last));
    let origin = format!("{}/{ORG}", store.server_name());
    for cp in &checkpoints {
        let verified = cairn_core::checkpoint::verify_checkpoint(
            &cp.note,
            &origin,
            std::slice::from_ref(store.server_key()),
        )
        .unwrap();
        assert_eq!(verified.checkpoint().root, cp.root);
        assert_eq!(store.root_at(ORG, cp.size).unwrap(), cp.root);
    }
    let mut leaves = Vec::new();
    store
        .read_log(ORG, 0, size, &mut |e| {
            assert_eq!(e.entry.unwrap().leaf_hash(), e.leaf);
            leaves.push(e.leaf);
            true
        })
        .unwrap();
    for seq in 0..size {
        let proof = store.inclusion_proof(ORG, seq, size).unwrap();
        assert_eq!(
            verify_inclusion(&leaves[seq as usize], seq, size, &proof, &last.root),
            Ok(())
        );
    }
    for pair in checkpoints.windows(2) {
        let proof = store
            .consistency_proof(ORG, pair[0].size, pair[1].size)
            .unwrap();
        assert_eq!(
            verify_consistency(
                pair[0].size,
                pair[1].size,
                &pair[0].root,
                &pair[1].root,
                &proof
            ),
            Ok(())
        );
    }
    assert!(store.inclusion_proof(ORG, size, size).is_err());
    assert_verifies(store.as_ref());
}

/// C2SP tlog-tiles hash tiles read from the store are the tree's, at every
/// level, full and partial, and a tile the log does not hold yet is
/// `NotFound`.
fn hash_tiles_are_the_trees(backend: &dyn Backend) {
    use cairn_core::tiles::{Tile, TileKind, tile_hashes, tiles_of_size};
    let store = backend.open("tiles");
    let ledger = ledger(Arc::clone(&store));
    for i in 0..300 {
        append(&ledger, step("s", "Reasoning", &format!("r{i}"))).unwrap();
    }
    let size = store.log_size(ORG).unwrap();
    let mut tree = cairn_core::merkle::MemoryTree::new();
    store
        .read_log(ORG, 0, size, &mut |e| {
            tree.push(e.leaf);
            true
        })
        .unwrap();
    let tiles = tiles_of_size(size);
    assert!(tiles.iter().any(|t| t.is_full()) && tiles.iter().any(|t| t.level() == 1));
    for tile in &tiles {
        assert_eq!(
            store.hash_tile(ORG, tile).unwrap(),
            tile_hashes(&tree, tile).unwrap(),
            "{}",
            tile.path()
        );
    }
    let beyond = Tile {
        kind: TileKind::Hashes(0),
        index: 1,
        width: size - 256 + 1,
    };
    assert!(matches!(
        store.hash_tile(ORG, &beyond),
        Err(StoreError::NotFound(_))
    ));
}

/// A `log-key` record is written and signed by the current key, the
/// store's metadata lists the added key, and the log still verifies (the
/// record checked by the rules of FORMAT.md 7.10); refusals for a key of
/// another name and for the current key vouching for itself.
fn log_keys_are_added_and_retired(backend: &dyn Backend) {
    use cairn_core::log::LogKeyAction;
    use cairn_core::note::NoteSigner;
    let store = backend.open("log-keys");
    let ledger = ledger(Arc::clone(&store));
    append(&ledger, step("s", "Reasoning", "before")).unwrap();
    let new_key = NoteSigner::from_seed(store.server_name(), &[9; 32]).unwrap();
    let stranger = NoteSigner::from_seed("elsewhere.example", &[9; 32]).unwrap();
    for (key, why) in [
        (stranger.verifier(), "another name"),
        (store.server_key().clone(), "the current key"),
    ] {
        let refused = ledger.write(WriteRequest::LogKey {
            org_id: ORG.into(),
            action: LogKeyAction::Add,
            key,
        });
        assert!(
            matches!(
                refused,
                Err(AppendError::Refused(Refusal::InvalidRequest(_)))
            ),
            "{why}: {refused:?}"
        );
    }
    let Written::LogKey { seq } = ledger
        .write(WriteRequest::LogKey {
            org_id: ORG.into(),
            action: LogKeyAction::Add,
            key: new_key.verifier(),
        })
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(seq, 2);
    store
        .record_log_key(LogKeyAction::Add, &new_key.verifier())
        .unwrap();
    let keys = store.log_keys(ORG).unwrap();
    assert!(keys.contains(&new_key.verifier()) && keys.contains(store.server_key()));
    let records = store.op_records(ORG, "log-key", 0, 10).unwrap();
    assert_eq!(records.len(), 1);
    checkpoint(&ledger);
    assert_verifies(store.as_ref());
}

fn state_survives_reopen(backend: &dyn Backend) {
    let (root, head) = {
        let store = backend.open("reopen");
        let ledger = ledger(Arc::clone(&store));
        for i in 0..37 {
            append(&ledger, step("s1", "Reasoning", &format!("r{i}"))).unwrap();
        }
        append(&ledger, step("s2", "plan", "p")).unwrap();
        ledger
            .write(WriteRequest::Seal {
                org_id: ORG.into(),
                session_id: "s2".into(),
                require_reflection: false,
            })
            .unwrap();
        let cp = checkpoint(&ledger);
        ledger.close();
        (cp.root, store.session(ORG, "s1").unwrap().unwrap().head)
    };
    let store = backend.open("reopen");
    assert_eq!(
        store.root_at(ORG, store.log_size(ORG).unwrap()).unwrap(),
        root
    );
    let ledger = ledger(Arc::clone(&store));
    let Written::Step {
        step_index, seq, ..
    } = append(&ledger, step("s1", "Reasoning", "after restart")).unwrap()
    else {
        panic!()
    };
    assert_eq!((step_index, seq), (37, 41));
    let mut last = None;
    store
        .read_session(ORG, "s1", &mut |s| {
            last = Some(s);
            true
        })
        .unwrap();
    assert_eq!(last.unwrap().record.prev_hash, head);
    assert_eq!(
        refused(append(&ledger, step("s2", "plan", "late"))),
        Refusal::Sealed {
            session_id: "s2".into()
        }
    );
    let cp = checkpoint(&ledger);
    assert_eq!(cp.size, 42);
    assert_verifies(store.as_ref());
}

fn listing_and_lookup(backend: &dyn Backend) {
    let store = backend.open("listing");
    let ledger = ledger(Arc::clone(&store));
    for (session, agent, steps) in [("a1", "alpha", 3), ("b1", "beta", 1), ("a2", "alpha", 2)] {
        for i in 0..steps {
            let mut s = step(session, "Observation", &format!("{session}-{i}"));
            s.agent_id = agent.into();
            append(&ledger, s).unwrap();
        }
    }
    let alpha = store
        .list_sessions(ORG, &SessionFilter::agent(Some("alpha")), 10)
        .unwrap();
    assert_eq!(
        alpha
            .iter()
            .map(|s| (s.session_id.as_str(), s.step_count))
            .collect::<Vec<_>>(),
        vec![("a2", 2), ("a1", 3)]
    );
    assert!(
        alpha
            .iter()
            .all(|s| s.first_step_at <= s.last_step_at && !s.sealed)
    );
    assert_eq!(
        store
            .list_sessions(ORG, &SessionFilter::all(), 2)
            .unwrap()
            .len(),
        2
    );
    assert!(
        store
            .list_sessions("nobody", &SessionFilter::all(), 10)
            .unwrap()
            .is_empty()
    );
    let mut first = None;
    store
        .read_session(ORG, "b1", &mut |s| {
            first = Some(s);
            false
        })
        .unwrap();
    let first = first.unwrap();
    let found = store
        .step_by_trace(ORG, &first.record.step.trace_id)
        .unwrap()
        .unwrap();
    assert_eq!(found, first);
    assert!(
        store
            .step_by_trace("other-org", &first.record.step.trace_id)
            .unwrap()
            .is_none()
    );
    assert_eq!(store.orgs().unwrap(), vec![ORG.to_owned()]);
}

fn exports_verify_offline(backend: &dyn Backend) {
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

fn imports_round_trip(backend: &dyn Backend) {
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
    let open = || -> std::io::Result<Box<dyn std::io::BufRead>> {
        Ok(Box::new(std::io::Cursor::new(bundle.clone())))
    };
    let outcome = cairn_store::ops::import_bundle(
        target.as_ref(),
        &open,
        &[],
        cairn_store::ops::DEFAULT_MAX_BUNDLE_LINE_BYTES,
        &mut |_| {},
    )
    .unwrap();
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
        cairn_store::ops::import_bundle(
            target.as_ref(),
            &open,
            &[],
            cairn_store::ops::DEFAULT_MAX_BUNDLE_LINE_BYTES,
            &mut |_| {}
        ),
        Err(cairn_store::ImportError::Refused(_))
    ));
}
