//! The seeds' records through every backend: signed traces (seed 004),
//! decision trails and seals (seed 001), links, the review queue (seed
//! 003), turns (seed 002). Erasure and retention, sealing and agent signatures are in
//! `erasure_seals_signatures.rs`.

use super::*;

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
pub(super) fn signed_traces_import_and_verify(backend: &dyn Backend) {
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
            by_admin: true,
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
    // Its components' steps are named `<trace id>.<index>`: a trace id
    // that leaves no room for them is refused as the trace's id.
    let long = "t".repeat(cairn_core::record::MAX_ID_LEN - 1);
    match refused(ledger.write(import(seed_004_trace(&key, &long, "generic")))) {
        Refusal::InvalidMember {
            field: "trace_id",
            message: m,
        } => assert!(
            m.contains("at most 198 characters") && m.contains("this one has 199"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    let fits = "t".repeat(cairn_core::record::MAX_ID_LEN - 2);
    ledger
        .write(import(seed_004_trace(&key, &fits, "generic")))
        .unwrap();
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
    let (seq, record) = store.op_by_id(ORG, "trace-1").unwrap().unwrap();
    assert!(matches!(record, Some(OpRecord::SignedTrace(ref t)) if t.trace.components.len() == 4));
    // Its signature checked again from the log (HTTP and MCP reads): by the
    // key records of its agent, whatever the org's other agents hold; a
    // check it fails says what the org's keys say.
    ledger
        .write(WriteRequest::RegisterKey {
            org_id: ORG.into(),
            agent_id: "another-agent".into(),
            public_key: SigningKey::from_bytes(&[43; 32]).verifying_key(),
            by_admin: true,
        })
        .unwrap();
    let Some(OpRecord::SignedTrace(signed)) = &record else {
        panic!()
    };
    let check = |at: u64| {
        cairn_store::ops::check_trace_signature(store.as_ref(), ORG, &signed.trace, at).unwrap()
    };
    assert_eq!(check(seq), Ok(()));
    let early = check(0).unwrap_err();
    assert!(early.contains("after this record"), "{early}");

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
    // Each component becomes a step: a write's bound of 10,000 steps.
    let mut huge = seed_004_trace(&key, "trace-5", "generic");
    // (Small components, so that the trace stays under its byte limit.)
    let one = serde_json::json!({"component_type": "a", "event_type": "plan",
        "timestamp": "2026-02-08T12:34:56.123Z"});
    huge["components"] = serde_json::Value::Array(vec![one; 10_001]);
    let refusal = refused(ledger.write(import(huge)));
    assert!(
        matches!(&refusal, Refusal::InvalidRequest(m) if m.contains("at most 10000 components")),
        "{refusal:?}"
    );
    // The trace is kept whole in its record: an integer beyond 2^53 - 1
    // anywhere in it (here outside the components' data) would leave a
    // record no verifier reads.
    let mut unsafe_integer = seed_004_trace(&key, "trace-6", "generic");
    unsafe_integer["components"][0]["n"] = serde_json::json!(1u64 << 60);
    let refusal = refused(ledger.write(import(unsafe_integer)));
    assert!(
        matches!(
            &refusal,
            Refusal::Invalid(cairn_core::record::RecordError::UnsafeInteger { field: "trace" })
        ),
        "{refusal:?}"
    );
    assert_eq!(store.log_size(ORG).unwrap(), size);
    // Every sessions row is named by its session-start record.
    assert_eq!(store.orphan_sessions(ORG).unwrap(), 0);
    assert_eq!(store.orphan_sessions("nobody").unwrap(), 0);

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

    // Erasure reaches the signed original (FORMAT.md 8): erasing one of
    // its components' steps withholds the trace's record behind a
    // trace-erasure record, once, whichever step comes first.
    let erase = |trace_id: &str| WriteRequest::Erase {
        org_id: ORG.into(),
        trace_id: trace_id.into(),
        reason: "GDPR request 7".into(),
        actor: "dpo".into(),
    };
    let before = store.log_size(ORG).unwrap();
    let Written::Erased { seqs, trace_seqs } = ledger.write(erase("trace-1.2")).unwrap() else {
        panic!()
    };
    assert_eq!((seqs, trace_seqs), (vec![before], vec![before + 1]));
    assert_eq!(store.log_size(ORG).unwrap(), before + 2);
    assert_eq!(store.op_by_id(ORG, "trace-1").unwrap(), Some((seq, None)));
    let (withholding, _) = store.op_records(ORG, "trace-erasure", 0, 10).unwrap()[0].clone();
    let (_, Some(OpRecord::TraceErasure(named))) = (
        withholding,
        store
            .op_records(ORG, "trace-erasure", 0, 10)
            .unwrap()
            .into_iter()
            .map(|(_, r)| r)
            .next(),
    ) else {
        panic!()
    };
    assert_eq!(
        (
            named.trace_seq,
            named.trace_id.as_str(),
            named.session_id.as_str()
        ),
        (seq, "trace-1", "trace-1")
    );
    assert_eq!(named.reason, "GDPR request 7");
    let Written::Erased { seqs, trace_seqs } = ledger.write(erase("trace-1.0")).unwrap() else {
        panic!()
    };
    assert_eq!((seqs, trace_seqs), (vec![before + 2], vec![]));
    assert_eq!(store.log_size(ORG).unwrap(), before + 3);
    assert_eq!(
        store.op_records(ORG, "trace-erasure", 0, 10).unwrap().len(),
        1
    );
    // A step of another session named like a component erases no trace.
    assert_verifies(store.as_ref());
    // Its id stays taken: the same trace is not imported again.
    assert!(matches!(
        refused(ledger.write(import(seed_004_trace(&key, "trace-1", "generic")))),
        Refusal::SessionExists { .. } | Refusal::DuplicateId { .. }
    ));
    // Exports carry its hash where its view was (complete), or leave it
    // out and carry the trace-erasure record (the session's), and verify.
    let cp = checkpoint(&ledger);
    let complete = bundle_text(
        store.as_ref(),
        ExportScope::All,
        None,
        &cp,
        cairn_store::now(),
    );
    assert_eq!(
        complete
            .matches(r#""type":"signed-trace","view":null"#)
            .count(),
        1
    );
    let verdict = verify_text(store.as_ref(), &complete);
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
    // Imported, the withheld trace keeps its id taken (its line does not
    // carry it: the trace-erasure record does).
    let target = backend.open("traces-imported");
    let imported = import_bytes(target.as_ref(), complete.as_bytes()).unwrap();
    assert!(
        matches!(imported, cairn_store::ops::ImportOutcome::Imported { .. }),
        "{imported:?}"
    );
    assert_eq!(target.op_by_id(ORG, "trace-1").unwrap(), Some((seq, None)));
    assert_verifies(target.as_ref());
    for level in [DetailLevel::Generic, DetailLevel::Detailed] {
        let text = bundle_text(
            store.as_ref(),
            ExportScope::Session("trace-1".into()),
            Some(level),
            &cp,
            cairn_store::now(),
        );
        assert!(!text.contains("\"type\":\"signed-trace\""), "{level}");
        assert!(text.contains("\"type\":\"trace-erasure\""), "{level}");
        let verdict = verify_text(store.as_ref(), &text);
        assert!(
            verdict.verdict.verified,
            "{level}: {:?}",
            verdict.verdict.failure
        );
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
pub(super) fn decision_trail_lifecycle(backend: &dyn Backend) {
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
pub(super) fn links_name_existing_records(backend: &dyn Backend) {
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
    // A session's records are read a page at a time (PostgreSQL: 256 a
    // page), in log order, and a visitor may stop early.
    for i in 0..300 {
        ledger
            .write(event(Some(&format!("many-{i}")), Some("s1")))
            .unwrap();
    }
    let all = store.session_records(ORG, "s1").unwrap();
    let seqs: Vec<u64> = all.iter().map(|(seq, _)| *seq).collect();
    assert!(seqs.is_sorted() && seqs.len() == 302, "{}", seqs.len());
    let mut seen = Vec::new();
    store
        .visit_session_records(ORG, "s1", &mut |seq, _| {
            seen.push(seq);
            seen.len() < 270
        })
        .unwrap();
    assert_eq!(seen, seqs[..270]);
    assert_verifies(store.as_ref());
}

/// Seed 003: flagged steps wait for a reviewer; each decision is a record.
pub(super) fn reviews_form_a_queue(backend: &dyn Backend) {
    use cairn_core::log::ReviewDecision;
    use cairn_store::ops::{REVIEW_QUEUE_BYTES, REVIEWS_LISTED, review_queue};
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
    let queue = review_queue(store.as_ref(), ORG, false, 100, REVIEW_QUEUE_BYTES)
        .unwrap()
        .items;
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
    let queue = review_queue(store.as_ref(), ORG, false, 100, REVIEW_QUEUE_BYTES)
        .unwrap()
        .items;
    let states: Vec<_> = queue.iter().map(ReviewItem::state).collect();
    assert_eq!(
        states,
        ["escalated", "pending"],
        "approved leaves the queue"
    );
    ledger
        .write(review(&flagged[1], ReviewDecision::Reject))
        .unwrap();
    let all = review_queue(store.as_ref(), ORG, true, 100, REVIEW_QUEUE_BYTES)
        .unwrap()
        .items;
    let states: Vec<_> = all.iter().map(ReviewItem::state).collect();
    assert_eq!(states, ["approved", "rejected", "pending"]);
    assert_eq!(all[1].reviews.len(), 2);
    assert_eq!(
        review_queue(store.as_ref(), ORG, true, 1, REVIEW_QUEUE_BYTES)
            .unwrap()
            .items
            .len(),
        1
    );
    assert_eq!(store.op_records(ORG, "review", 0, 100).unwrap().len(), 3);

    // A page stops before the item that would pass its bound of bytes
    // (the first is always given) and says so.
    let first = review_queue(store.as_ref(), ORG, true, 100, 1).unwrap();
    assert_eq!(first.items.len(), 1);
    assert!(first.truncated);
    assert_eq!(first.items[0].step.record.step.trace_id, flagged[0]);
    assert_eq!(first.items[0].state(), "approved");
    let step_bytes = |at: usize| all[at].step.record.step.held_bytes();
    let note_bytes = cairn_store::ops::review_bytes(&all[0].reviews[0].1);
    // The first two items and their three reviews fit exactly; the third
    // item does not.
    let two = step_bytes(0) + step_bytes(1) + 3 * note_bytes;
    let page = review_queue(store.as_ref(), ORG, true, 100, two).unwrap();
    assert_eq!((page.items.len(), page.truncated), (2, true));
    assert_eq!(page.items[1].reviews.len(), 2);
    // One byte less and the second item's reviews take it past: it is
    // left out once they are read.
    let page = review_queue(store.as_ref(), ORG, true, 100, two - 1).unwrap();
    assert_eq!((page.items.len(), page.truncated), (1, true));
    let whole = review_queue(store.as_ref(), ORG, true, 100, REVIEW_QUEUE_BYTES).unwrap();
    assert_eq!((whole.items.len(), whole.truncated), (3, false));

    // A step reviewed more often lists its latest reviews, and how many
    // it has; the latest still decides its state.
    for _ in 0..REVIEWS_LISTED {
        ledger
            .write(review(&flagged[2], ReviewDecision::Escalate))
            .unwrap();
    }
    ledger
        .write(review(&flagged[2], ReviewDecision::Reject))
        .unwrap();
    let all = review_queue(store.as_ref(), ORG, true, 100, REVIEW_QUEUE_BYTES).unwrap();
    let busy = &all.items[2];
    assert_eq!(busy.review_count, REVIEWS_LISTED + 1);
    assert_eq!(busy.reviews.len(), REVIEWS_LISTED);
    assert_eq!(busy.state(), "rejected");
    let positions: Vec<u64> = busy.reviews.iter().map(|(seq, _)| *seq).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "oldest first");
    assert_eq!(all.items[1].review_count, 2);
    assert_verifies(store.as_ref());
}

/// Seed 002: a turn's steps without a number are numbered as they are
/// sequenced, past the turn's highest number, in order, skipping the
/// numbers the request's other steps give; per session and turn; a step
/// of another session or turn is refused; a turn numbered up to 2^53 - 1
/// takes no more unnumbered steps; requests of one turn written at once
/// (from two handles where the backend has them, as two servers of a
/// fleet) never share a number. A turn's steps are found through the
/// index of turns as a walk of the session finds them.
pub(super) fn turns_are_numbered_per_session(backend: &dyn Backend) {
    let store = backend.open("turns");
    let ledger = Arc::new(ledger(Arc::clone(&store)));
    let in_turn = |session: &str, turn: &str, number: Option<u64>| {
        let mut s = step(session, "Reasoning", "a thought");
        s.turn_id = Some(turn.into());
        s.turn_step = number;
        s
    };
    let write_turn = |turn: &str, steps: Vec<NewStep>| {
        ledger.write(WriteRequest::Turn {
            turn_id: turn.into(),
            steps,
        })
    };
    let turn = |turn: &str, steps: Vec<NewStep>| match write_turn(turn, steps) {
        Ok(Written::Steps(written)) => written.len(),
        other => panic!("{other:?}"),
    };
    let numbers = |session: &str, turn: &str| {
        let mut numbers = Vec::new();
        store
            .read_session(ORG, session, &mut |s| {
                if s.record.step.turn_id.as_deref() == Some(turn) {
                    numbers.push(s.record.step.turn_step);
                }
                true
            })
            .unwrap();
        numbers
    };
    // A new session's turn starts at 0; the next request continues it.
    turn(
        "t1",
        vec![in_turn("s1", "t1", None), in_turn("s1", "t1", None)],
    );
    turn("t1", vec![in_turn("s1", "t1", None)]);
    // A step of the turn written alone, without a number, takes none.
    append(&ledger, in_turn("s1", "t1", None)).unwrap();
    append(&ledger, step("s1", "Observation", "outside any turn")).unwrap();
    // A number given is kept, and the others go around it.
    turn(
        "t1",
        vec![
            in_turn("s1", "t1", None),
            in_turn("s1", "t1", Some(4)),
            in_turn("s1", "t1", None),
        ],
    );
    turn(
        "t1",
        vec![in_turn("s1", "t1", Some(100)), in_turn("s1", "t1", None)],
    );
    assert_eq!(
        numbers("s1", "t1"),
        [
            Some(0),
            Some(1),
            Some(2),
            None,
            Some(3),
            Some(4),
            Some(5),
            Some(100),
            Some(6)
        ]
    );
    // Per session and turn.
    turn("t1", vec![in_turn("s2", "t1", None)]);
    assert_eq!(numbers("s2", "t1"), [Some(0)]);
    // A step of another session or turn is refused, naming it.
    for (steps, at) in [
        (
            vec![in_turn("s1", "t1", None), in_turn("s2", "t1", None)],
            1,
        ),
        (
            vec![in_turn("s1", "t1", None), in_turn("s1", "t9", None)],
            1,
        ),
    ] {
        let refused = write_turn("t1", steps);
        // The refused step is named, and the member that misplaces it.
        assert!(
            matches!(&refused, Err(AppendError::Refused(Refusal::StepOfMany { index, refusal, .. }))
                if *index == at && matches!(**refusal, Refusal::InvalidMember { field: "session_id" | "turn_id", .. })),
            "{refused:?}"
        );
    }
    // The largest number a step may hold ends a turn.
    let last = cairn_core::record::MAX_SAFE_INTEGER;
    turn("t2", vec![in_turn("s1", "t2", Some(last))]);
    let full = write_turn("t2", vec![in_turn("s1", "t2", None)]);
    assert!(
        matches!(&full, Err(AppendError::Refused(Refusal::InvalidMember { field: "turn_id", message })) if message.contains("2^53")),
        "{full:?}"
    );
    assert_eq!(numbers("s1", "t2"), [Some(last)]);
    // Requests of one turn at once, from every handle.
    let handles: Vec<Arc<Ledger>> = std::iter::once(Arc::clone(&ledger))
        .chain(
            backend
                .open_beside("turns")
                .map(|other| Arc::new(self::ledger(other))),
        )
        .collect();
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let ledger = Arc::clone(&handles[w % handles.len()]);
            let in_turn = move |n: usize| {
                let mut s = step("s3", "Reasoning", &format!("writer {w} step {n}"));
                s.turn_id = Some("t3".into());
                s
            };
            std::thread::spawn(move || {
                for _ in 0..5 {
                    let request = WriteRequest::Turn {
                        turn_id: "t3".into(),
                        steps: vec![in_turn(0), in_turn(1), in_turn(2)],
                    };
                    match ledger.write(request) {
                        Ok(Written::Steps(written)) => assert_eq!(written.len(), 3),
                        other => panic!("{other:?}"),
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let mut concurrent: Vec<u64> = numbers("s3", "t3")
        .into_iter()
        .map(Option::unwrap)
        .collect();
    concurrent.sort_unstable();
    assert_eq!(concurrent, (0..120).collect::<Vec<u64>>());
    // A turn's steps, found through the index, are the walk's, in order.
    for (session, turn, steps) in [("s1", "t1", 9), ("s3", "t3", 120), ("s1", "t3", 0)] {
        let mut walked = Vec::new();
        store
            .read_session(ORG, session, &mut |s| {
                if s.record.step.turn_id.as_deref() == Some(turn) {
                    walked.push(s.seq);
                }
                true
            })
            .unwrap();
        let found = store.turn_seqs(ORG, session, turn).unwrap().unwrap();
        assert_eq!(found, walked, "{session} {turn}");
        let mut read = Vec::new();
        assert!(
            store
                .read_turn(ORG, session, turn, &mut |s| {
                    read.push(s.seq);
                    true
                })
                .unwrap()
        );
        assert_eq!(read, walked, "{session} {turn}");
        assert_eq!(found.len(), steps, "{session} {turn}");
    }
    // Each step's place in the trail, read without the step, is its
    // record's (steps outside any turn and unnumbered ones included);
    // positions of another session or of no step are left out.
    for session in ["s1", "s3"] {
        let mut recorded = Vec::new();
        store
            .read_session(ORG, session, &mut |s| {
                recorded.push(cairn_store::TurnPlace {
                    seq: s.seq,
                    turn_id: s.record.step.turn_id,
                    turn_step: s.record.step.turn_step,
                });
                true
            })
            .unwrap();
        let seqs = store.session_seqs(ORG, session).unwrap().unwrap();
        assert_eq!(store.turn_places_at(ORG, session, &seqs).unwrap(), recorded);
        assert!(recorded.iter().any(|p| p.turn_id.is_none()) == (session == "s1"));
        assert!(recorded.iter().any(|p| p.turn_step.is_none()) == (session == "s1"));
        let other = if session == "s1" { "s3" } else { "s1" };
        let mut mixed = store.session_seqs(ORG, other).unwrap().unwrap();
        mixed.extend([seqs[0], u64::MAX >> 30]);
        mixed.sort_unstable();
        assert_eq!(
            store.turn_places_at(ORG, session, &mixed).unwrap(),
            recorded[..1]
        );
    }
    assert_eq!(store.turn_places_at(ORG, "unknown", &[0, 1]).unwrap(), []);
    assert_eq!(store.turn_seqs(ORG, "unknown", "t1").unwrap(), None);
    assert!(
        !store
            .read_turn(ORG, "unknown", "t1", &mut |_| true)
            .unwrap()
    );
    assert_verifies(store.as_ref());
}
