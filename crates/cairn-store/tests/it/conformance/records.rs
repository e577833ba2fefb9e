//! The seeds' records through every backend: signed traces (seed 004),
//! decision trails and seals (seed 001), links, the review queue (seed
//! 003), erasure and retention, agent signatures.

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
    assert_verifies(store.as_ref());
}

/// Seed 003: flagged steps wait for a reviewer; each decision is a record.
pub(super) fn reviews_form_a_queue(backend: &dyn Backend) {
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

pub(super) fn erasure_and_retention_keep_everything_verifiable(backend: &dyn Backend) {
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

pub(super) fn seals_close_sessions(backend: &dyn Backend) {
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

pub(super) fn signed_steps_are_checked(backend: &dyn Backend) {
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
