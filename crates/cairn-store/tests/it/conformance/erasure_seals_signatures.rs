//! Erasure and retention, sealed sessions and agent signatures through
//! every backend: what removes, closes or authenticates records, and that
//! the log verifies after each.

use super::*;

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
    let Written::Erased { seqs, .. } = ledger.write(erase(&traces[1])).unwrap() else {
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
    let Written::Erased { seqs, .. } = ledger
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
    let Written::Erased { seqs, .. } = ledger
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
            by_admin: true,
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
                public_key: key.verifying_key(),
                by_admin: true,
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
            public_key: key.verifying_key(),
            by_admin: true,
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
    // A listing's keys, read before the rotation: brought up to date
    // before each session it verifies (below).
    let mut listing_keys = cairn_store::ops::OrgKeys::default();
    listing_keys.refresh(store.as_ref(), ORG).unwrap();
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
            by_admin: true,
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
            public_key: key.verifying_key(),
            by_admin: true,
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
    let listed =
        cairn_store::ops::verify_session_with(store.as_ref(), ORG, "signed", &mut listing_keys)
            .unwrap()
            .unwrap();
    assert!(listed.verified, "{:?}", listed.failure);
    let records = store.key_records(ORG, Some("analyst")).unwrap();
    assert_eq!(
        records
            .iter()
            .map(|(_, r)| r.entry_type())
            .collect::<Vec<_>>(),
        ["key-registration", "key-revocation", "key-registration"]
    );
    // Pages of them, the org's and the agent's, in log order.
    for agent in [None, Some("analyst")] {
        let all = store.key_records(ORG, agent).unwrap();
        let mut paged = Vec::new();
        let mut after = None;
        loop {
            let page = store.key_records_page(ORG, agent, after, 2).unwrap();
            assert!(page.len() <= 2);
            let full = page.len() == 2;
            after = page.last().map(|(seq, _)| *seq).or(after);
            paged.extend(page.into_iter().map(|(seq, _)| seq));
            if !full {
                break;
            }
        }
        assert_eq!(paged, all.iter().map(|(seq, _)| *seq).collect::<Vec<_>>());
    }
    assert!(
        store
            .key_records_page(ORG, None, Some(u64::MAX), 10)
            .unwrap()
            .is_empty()
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
            by_admin: true,
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
