//! What a writer chooses for its steps and the ledger must keep unique:
//! record ids (`trace_id`) in an org, numbers (`turn_step`) in a turn;
//! checked alike for a lone step, a batch and a turn, and within one
//! sequencer batch (where PostgreSQL looks them up together).

use super::*;

/// The record ids the steps of one batch choose (looked up together at
/// the batch's start on PostgreSQL) are taken by what the log held before,
/// by what the batch wrote before them (a step, an audit event) and by an
/// earlier step of the same write; ids the batch did not write stay free.
pub(super) fn ids_chosen_within_one_batch_are_checked_in_order(backend: &dyn Backend) {
    let store = backend.open("batch-ids");
    let mut old = step("s1", "plan", "before the batch");
    old.trace_id = Some("old".into());
    let ledger = ledger(Arc::clone(&store));
    append(&ledger, old).unwrap();
    let named = |id: &str| {
        let mut s = step("s1", "plan", id);
        s.trace_id = Some(id.into());
        s
    };
    let batch = vec![
        WriteRequest::Step(Box::new(named("a"))),
        WriteRequest::Step(Box::new(named("a"))),
        WriteRequest::Step(Box::new(named("old"))),
        WriteRequest::AuditEvent {
            org_id: ORG.into(),
            event_id: Some("ev".into()),
            session_id: None,
            action: "sql_query".into(),
            detail: None,
        },
        WriteRequest::Step(Box::new(named("ev"))),
        WriteRequest::Steps(vec![named("b"), named("b")]),
        WriteRequest::Turn {
            turn_id: "t".into(),
            steps: vec![named("c"), named("a")],
        },
        WriteRequest::Steps(vec![named("b"), named("c")]),
    ];
    // Links the sequencer checks, to records stored before the batch or
    // written by it, of the right type or not.
    let linked = |link: &str, to: &str| {
        let mut s = step("s2", "plan", link);
        match link {
            "parent" => s.links.parent = Some(to.into()),
            _ => s.links.audit_event = Some(to.into()),
        }
        WriteRequest::Step(Box::new(s))
    };
    let batch = [
        batch,
        vec![
            linked("parent", "old"),
            linked("parent", "a"),
            linked("audit_event", "ev"),
            linked("parent", "ev"),
            linked("parent", "nowhere"),
            linked("audit_event", "a"),
        ],
        // Audit events choosing ids held before the batch, written by it
        // and free.
        ["ev", "old", "fresh"]
            .map(|id| WriteRequest::AuditEvent {
                org_id: ORG.into(),
                event_id: Some(id.into()),
                session_id: None,
                action: "sql_query".into(),
                detail: None,
            })
            .to_vec(),
    ]
    .concat();
    let results = store.append_batch(&batch).unwrap();
    let duplicate = |result: &Result<Written, Refusal>, at: Option<usize>, id: &str| {
        let refusal = match (result, at) {
            (Err(Refusal::StepOfMany { index, refusal, .. }), Some(at)) if *index == at => {
                (**refusal).clone()
            }
            (Err(refusal), None) => refusal.clone(),
            (other, _) => panic!("expected {id} refused at {at:?}, got {other:?}"),
        };
        assert_eq!(
            refusal,
            Refusal::DuplicateTraceId {
                trace_id: id.into()
            }
        );
    };
    assert!(results[0].is_ok(), "{:?}", results[0]);
    duplicate(&results[1], None, "a");
    duplicate(&results[2], None, "old");
    assert!(results[3].is_ok(), "{:?}", results[3]);
    duplicate(&results[4], None, "ev");
    duplicate(&results[5], Some(1), "b");
    duplicate(&results[6], Some(1), "a");
    // Neither refused write kept anything: b and c are free.
    assert!(results[7].is_ok(), "{:?}", results[7]);
    for (i, expected) in [
        (8, None),
        (9, None),
        (10, None),
        (11, Some("parent")),
        (12, Some("parent")),
        (13, Some("audit_event")),
    ] {
        match (&results[i], expected) {
            (Ok(_), None) => {}
            (Err(Refusal::UnknownLink { link, .. }), Some(name)) if link == name => {}
            (other, _) => panic!("request {i}: {other:?}"),
        }
    }
    for (i, id) in [(14, "ev"), (15, "old")] {
        assert_eq!(
            results[i].as_ref().err(),
            Some(&Refusal::DuplicateId { id: id.into() }),
            "request {i}"
        );
    }
    assert!(results[16].is_ok(), "{:?}", results[16]);
    let mut written = Vec::new();
    store
        .read_session(ORG, "s1", &mut |s| {
            written.push(s.record.step.trace_id.clone());
            true
        })
        .unwrap();
    assert_eq!(written, ["old", "a", "b", "c"]);
    // What a retried batch compares itself with: the steps of the ids
    // that exist (an audit event's id names no step).
    let ids = ["c", "nope", "a", "ev"].map(String::from);
    let mut found: Vec<String> = store
        .steps_by_trace(ORG, &ids)
        .unwrap()
        .into_iter()
        .map(|s| s.record.step.trace_id)
        .collect();
    found.sort();
    assert_eq!(found, ["a", "c"]);
    assert!(
        store
            .steps_by_trace("no-such-org", &ids)
            .unwrap()
            .is_empty()
    );
    // A malformed id (a NUL byte, which PostgreSQL refuses in text) fails
    // its own request, never the batch's look-ups and with them every
    // request of the batch. (The lone step puts s1 among the sessions
    // read ahead, whose turn numbers are looked up.)
    let mut bad_link = step("s1", "plan", "x");
    bad_link.links.parent = Some("a\0".into());
    let mut bad_turn = step("s1", "plan", "y");
    bad_turn.turn_step = Some(1);
    let batch = vec![
        WriteRequest::Turn {
            turn_id: "t".into(),
            steps: vec![bad_link],
        },
        WriteRequest::Turn {
            turn_id: "t\0".into(),
            steps: vec![bad_turn],
        },
        WriteRequest::Step(Box::new(named("fine"))),
    ];
    let results = store.append_batch(&batch).unwrap();
    assert!(
        results[0].is_err() && results[1].is_err() && results[2].is_ok(),
        "{results:?}"
    );
}

/// A `turn_step` a writer gives names one step of its turn: a number held
/// by a stored step, or by an earlier step of the same write, is refused
/// (409 `turn_step_taken`), in a turn, a batch of steps or a lone step,
/// and nothing of the write is kept. Numbers the sequencer assigns go
/// around the numbers given.
pub(super) fn a_turn_step_names_one_step(backend: &dyn Backend) {
    let store = backend.open("turn-steps");
    let ledger = ledger(Arc::clone(&store));
    let in_turn = |session: &str, turn: &str, number: Option<u64>| {
        let mut s = step(session, "Reasoning", "a thought");
        s.turn_id = Some(turn.into());
        s.turn_step = number;
        s
    };
    let write_turn = |steps: Vec<NewStep>| {
        ledger.write(WriteRequest::Turn {
            turn_id: "t".into(),
            steps,
        })
    };
    let taken_at = |result: Result<Written, AppendError>, at: Option<usize>, number: u64| {
        let refusal = match (refused(result), at) {
            (Refusal::StepOfMany { index, refusal, .. }, Some(at)) => {
                assert_eq!(index, at);
                *refusal
            }
            (refusal, None) => refusal,
            (other, _) => panic!("expected step {at:?} refused, got {other:?}"),
        };
        assert!(
            matches!(&refusal, Refusal::TurnStepTaken { session_id, turn_id, turn_step }
                if session_id == "s" && turn_id == "t" && *turn_step == number),
            "{refusal:?}"
        );
    };
    let numbers = || {
        let mut numbers = Vec::new();
        store
            .read_session(ORG, "s", &mut |s| {
                numbers.push(s.record.step.turn_step);
                true
            })
            .unwrap();
        numbers
    };
    // Twice in one turn request of a new session: nothing is written,
    // not even the session.
    taken_at(
        write_turn(vec![in_turn("s", "t", Some(3)), in_turn("s", "t", Some(3))]),
        Some(1),
        3,
    );
    assert!(store.session(ORG, "s").unwrap().is_none());
    write_turn(vec![
        in_turn("s", "t", Some(1)),
        in_turn("s", "t", None),
        in_turn("s", "t", None),
    ])
    .unwrap();
    assert_eq!(numbers(), [Some(1), Some(0), Some(2)]);
    // Against the stored turn, from every kind of write.
    taken_at(
        write_turn(vec![in_turn("s", "t", None), in_turn("s", "t", Some(0))]),
        Some(1),
        0,
    );
    taken_at(append(&ledger, in_turn("s", "t", Some(2))), None, 2);
    taken_at(
        ledger.write(WriteRequest::Steps(vec![
            in_turn("s", "t", Some(7)),
            in_turn("s", "t", Some(7)),
        ])),
        Some(1),
        7,
    );
    assert_eq!(numbers(), [Some(1), Some(0), Some(2)]);
    // The number is checked after the step's other checks, alike for a
    // lone step and a turn's: a taken number with a link to nothing is
    // the link's refusal on both.
    let mut linked = in_turn("s", "t", Some(0));
    linked.links.parent = Some("no-such-step".into());
    assert!(matches!(
        refused(append(&ledger, linked.clone())),
        Refusal::UnknownLink { .. }
    ));
    assert!(matches!(
        refused(write_turn(vec![linked])),
        Refusal::StepOfMany { refusal, .. } if matches!(*refusal, Refusal::UnknownLink { .. })
    ));
    // A number within no turn is refused, as a turn it forgot to name.
    let mut loose = step("s", "Reasoning", "a thought");
    loose.turn_step = Some(9);
    assert!(
        matches!(
            refused(append(&ledger, loose)),
            Refusal::InvalidMember {
                field: "turn_step",
                ..
            }
        ),
        "a turn_step without a turn_id"
    );
    // Free numbers are taken as given; another turn or session has its own.
    append(&ledger, in_turn("s", "t", Some(7))).unwrap();
    append(&ledger, in_turn("s", "u", Some(7))).unwrap();
    append(&ledger, in_turn("s2", "t", Some(7))).unwrap();
    write_turn(vec![in_turn("s", "t", None), in_turn("s", "t", Some(4))]).unwrap();
    assert_eq!(
        numbers(),
        [
            Some(1),
            Some(0),
            Some(2),
            Some(7),
            Some(7),
            Some(8),
            Some(4)
        ]
    );
    // One batch of many requests (looked up together on PostgreSQL): a
    // session it opens, a stored turn, and the numbers it wrote before.
    let lone = |session: &str, number: u64| {
        WriteRequest::Step(Box::new(in_turn(session, "t", Some(number))))
    };
    let batch = vec![
        lone("n", 1),
        lone("n", 1),
        lone("s", 1),
        lone("s", 20),
        lone("s", 20),
        WriteRequest::Turn {
            turn_id: "t".into(),
            steps: vec![in_turn("n", "t", None), in_turn("n", "t", Some(1))],
        },
        lone("n", 2),
    ];
    let results = store.append_batch(&batch).unwrap();
    for (i, result) in results.into_iter().enumerate() {
        match (i, result) {
            (0 | 3 | 6, Ok(_)) => {}
            (1 | 2 | 4 | 5, Err(refusal)) => {
                let refusal = match refusal {
                    Refusal::StepOfMany {
                        index: 1, refusal, ..
                    } if i == 5 => *refusal,
                    refusal => refusal,
                };
                let (session, number) = match i {
                    2 => ("s", 1),
                    4 => ("s", 20),
                    _ => ("n", 1),
                };
                assert!(
                    matches!(&refusal, Refusal::TurnStepTaken { session_id, turn_step, .. }
                        if session_id == session && *turn_step == number),
                    "request {i}: {refusal:?}"
                );
            }
            (i, other) => panic!("request {i}: {other:?}"),
        }
    }
}

/// Steps refused as duplicate trace ids that are the recorded steps
/// themselves are answered as their first writes (`answer_retries`),
/// across several chunks of look-ups; a changed step, an erased one and
/// one never recorded stay refused; a repeated id within the writes stays
/// a duplicate in one request and is answered as the first in writes of
/// their own.
pub(super) fn retried_writes_are_answered_as_their_first(backend: &dyn Backend) {
    use cairn_store::{RETRY_LOOKUP_CHUNK, RepeatedIds, answer_retries};
    let store = backend.open("retries");
    let ledger = ledger(Arc::clone(&store));
    let count = RETRY_LOOKUP_CHUNK * 3 + 5;
    let named = |i: usize| {
        let mut s = step(&format!("s{}", i % 3), "plan", &format!("step {i}"));
        s.trace_id = Some(format!("id-{i}"));
        s
    };
    let mut first = Vec::new();
    for i in 0..count {
        first.push(append(&ledger, named(i)).unwrap());
    }
    let changed = RETRY_LOOKUP_CHUNK * 2 + 3;
    let erased = RETRY_LOOKUP_CHUNK + 1;
    store
        .append_batch(&[WriteRequest::Erase {
            org_id: ORG.into(),
            trace_id: format!("id-{erased}"),
            reason: "test".into(),
            actor: "test".into(),
        }])
        .unwrap()
        .remove(0)
        .unwrap();
    // The writes again, a changed one, and a repeat of the first id.
    let mut again: Vec<NewStep> = (0..count).map(named).collect();
    again[changed].content = Some("not the same".into());
    again.push(named(0));
    let outcomes = || {
        again
            .iter()
            .map(|s| (Some(s.clone()), append(&ledger, s.clone())))
            .collect::<Vec<_>>()
    };
    let refused_as_duplicate = |outcome: &Result<Written, AppendError>| {
        matches!(
            outcome,
            Err(AppendError::Refused(Refusal::DuplicateTraceId { .. }))
        )
    };
    for repeats in [RepeatedIds::StayDuplicates, RepeatedIds::AnswerEach] {
        let answers = answer_retries(store.as_ref(), outcomes(), repeats);
        assert_eq!(answers.len(), count + 1);
        for (i, answer) in answers[..count].iter().enumerate() {
            if i == changed || i == erased {
                assert!(refused_as_duplicate(answer), "{i}: {answer:?}");
                continue;
            }
            let Ok(Written::Step {
                seq,
                hash,
                step_index,
                session_created,
                ..
            }) = answer
            else {
                panic!("{i}: {answer:?}");
            };
            let Written::Step {
                seq: first_seq,
                hash: first_hash,
                step_index: first_index,
                ..
            } = &first[i]
            else {
                panic!("{:?}", first[i]);
            };
            assert_eq!(
                (seq, hash, step_index),
                (first_seq, first_hash, first_index)
            );
            assert!(!session_created);
        }
        match repeats {
            RepeatedIds::StayDuplicates => {
                assert!(
                    refused_as_duplicate(&answers[count]),
                    "{:?}",
                    answers[count]
                );
            }
            RepeatedIds::AnswerEach => {
                assert_eq!(answers[count].as_ref().ok(), answers[0].as_ref().ok());
            }
        }
    }
    // A step never recorded, refused for another reason, passes as it was.
    let mut other = named(count + 1);
    other.session_id = "s\0".into();
    let refused = append(&ledger, other.clone());
    assert!(refused.is_err());
    let answers = answer_retries(
        store.as_ref(),
        vec![(Some(other), refused), (None, Ok(first[0].clone()))],
        RepeatedIds::StayDuplicates,
    );
    assert!(answers[0].is_err());
    assert_eq!(answers[1].as_ref().ok(), Some(&first[0]));
}

/// A turn's steps, every one naming its trace id, written again are
/// recognised as recorded (`turn_retried`, across several chunks of
/// look-ups; the numbers the write gave the steps that gave none taken as
/// they are), answered with their positions; a changed, reordered or
/// partly new turn, or one a step of which names no id, is not; steps
/// recorded apart (another step between them) are not either, while one
/// recorded alone, as sent, is (which write recorded a step is not asked).
pub(super) fn a_retried_turn_is_answered_as_its_first_write(backend: &dyn Backend) {
    use cairn_store::{RETRY_LOOKUP_CHUNK, turn_retried};
    let store = backend.open("turn-retries");
    let ledger = ledger(Arc::clone(&store));
    let named = |id: &str| {
        let mut s = step("s1", "plan", id);
        s.trace_id = Some(id.into());
        s.turn_id = Some("t".into());
        s
    };
    let steps: Vec<NewStep> = (0..RETRY_LOOKUP_CHUNK * 2 + 1)
        .map(|i| named(&format!("turn-{i}")))
        .collect();
    let written = ledger
        .write(WriteRequest::Turn {
            turn_id: "t".into(),
            steps: steps.clone(),
        })
        .unwrap();
    let Written::Steps(first) = written else {
        panic!("{written:?}");
    };
    let again = turn_retried(store.as_ref(), &steps)
        .unwrap()
        .expect("recognised");
    // The first write's answers, but `session_created` (which only that
    // write knows).
    let unopened = |w: &Written| {
        let mut w = w.clone();
        if let Written::Step {
            session_created, ..
        } = &mut w
        {
            *session_created = false;
        }
        w
    };
    assert_eq!(again, first.iter().map(unopened).collect::<Vec<_>>());
    let mut changed = steps.clone();
    changed[RETRY_LOOKUP_CHUNK + 2].content = Some("another".into());
    let mut reordered = steps.clone();
    reordered.swap(1, 2);
    let mut unnamed = steps.clone();
    unnamed[3].trace_id = None;
    let mut longer = steps.clone();
    longer.push(named("never-written"));
    let mut renumbered = steps.clone();
    renumbered[0].turn_step = Some(7);
    for (what, turn) in [
        ("changed", changed),
        ("reordered", reordered),
        ("unnamed", unnamed),
        ("longer", longer),
        ("renumbered", renumbered),
    ] {
        assert_eq!(turn_retried(store.as_ref(), &turn).unwrap(), None, "{what}");
    }
    // Steps recorded apart (another step between them) do not stand as a
    // turn's write leaves them; one alone, recorded as sent, does.
    for id in ["apart-0", "between", "apart-1"] {
        let mut s = named(id);
        s.turn_id = None;
        append(&ledger, s).unwrap();
    }
    let mut apart = vec![named("apart-0"), named("apart-1")];
    for s in &mut apart {
        s.turn_id = None;
    }
    assert_eq!(turn_retried(store.as_ref(), &apart).unwrap(), None);
    apart.remove(1);
    assert!(turn_retried(store.as_ref(), &apart).unwrap().is_some());
}

/// Text no store can hold (the NUL character, which PostgreSQL refuses in
/// text) is refused with its request, never failing the batch it is in:
/// in a step's content or model, and in any name a request looks up (a
/// session, a step, a predecessor, an audit event's session, a turn's
/// session), before the look-up. The batch's honest requests are written.
pub(super) fn text_with_nul_is_refused_with_its_request(backend: &dyn Backend) {
    use cairn_core::log::ReviewDecision;
    use cairn_core::record::RecordError;
    let store = backend.open("nul-text");
    let ledger = ledger(Arc::clone(&store));
    let mut honest = step("s1", "plan", "honest");
    honest.trace_id = Some("honest".into());
    append(&ledger, honest.clone()).unwrap();
    let mut nul_content = step("s1", "plan", "a\0b");
    nul_content.trace_id = Some("nul-content".into());
    let mut nul_model = step("s1", "plan", "fine");
    nul_model.model = Some("m\0".into());
    let in_turn = step("s\0", "plan", "fine");
    let open = NewSession {
        org_id: ORG.into(),
        session_id: "next".into(),
        agent_id: "analyst".into(),
        caller: "test".into(),
        profile: Profile::Standard,
        predecessor: None,
        predecessor_session: Some("s\0".into()),
        bound_agent: None,
        full_consent: false,
    };
    let batch = vec![
        WriteRequest::Step(Box::new(nul_content)),
        WriteRequest::Step(Box::new(nul_model)),
        WriteRequest::Turn {
            turn_id: "t".into(),
            steps: vec![step("s1", "plan", "fine"), in_turn],
        },
        WriteRequest::Steps(vec![step("s\0", "plan", "fine")]),
        WriteRequest::StartSession(open),
        WriteRequest::Seal {
            org_id: ORG.into(),
            session_id: "s\0".into(),
            require_reflection: false,
        },
        WriteRequest::AuditEvent {
            org_id: ORG.into(),
            event_id: None,
            session_id: Some("s\0".into()),
            action: "sql_query".into(),
            detail: None,
        },
        WriteRequest::Erase {
            org_id: ORG.into(),
            trace_id: "t\0".into(),
            reason: "test".into(),
            actor: "test".into(),
        },
        WriteRequest::Review {
            org_id: ORG.into(),
            trace_id: "t\0".into(),
            decision: ReviewDecision::Approve,
            reviewer: "test".into(),
            note: None,
        },
        WriteRequest::Step(Box::new(step("s1", "plan", "after"))),
    ];
    let results = store.append_batch(&batch).unwrap();
    let invalid = |result: &Result<Written, Refusal>| match result {
        Err(Refusal::Invalid(e)) => e.clone(),
        Err(Refusal::StepOfMany { refusal, .. }) => match &**refusal {
            Refusal::Invalid(e) => e.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    assert_eq!(
        invalid(&results[0]),
        RecordError::NulCharacter { field: "content" }
    );
    assert_eq!(
        invalid(&results[1]),
        RecordError::NulCharacter { field: "model" }
    );
    for (i, field) in [
        (2, "session_id"),
        (3, "session_id"),
        (4, "predecessor_session"),
        (5, "session_id"),
        (6, "session_id"),
        (7, "trace_id"),
        (8, "trace_id"),
    ] {
        match invalid(&results[i]) {
            RecordError::MalformedId { field: named, .. } => assert_eq!(named, field, "{i}"),
            other => panic!("{i}: {other:?}"),
        }
    }
    assert!(results[9].is_ok(), "{:?}", results[9]);
    // Nothing of the refused requests was written.
    assert!(store.session(ORG, "next").unwrap().is_none());
    let mut written = Vec::new();
    store
        .read_session(ORG, "s1", &mut |s| {
            written.push(s.record.step.content.clone().unwrap_or_default());
            true
        })
        .unwrap();
    assert_eq!(written, ["honest", "after"]);
    assert_verifies(store.as_ref());
    // Reads of such names find nothing, on both backends alike (no query
    // the database would refuse).
    assert!(store.session(ORG, "s\0").unwrap().is_none());
    assert!(store.session("acme\0", "s1").unwrap().is_none());
    assert!(store.session_seqs(ORG, "s\0").unwrap().is_none());
    assert_eq!(store.turn_seqs(ORG, "s1", "t\0").unwrap(), Some(Vec::new()));
    assert!(store.step_by_trace(ORG, "honest\0").unwrap().is_none());
    assert!(store.op_by_id(ORG, "t\0").unwrap().is_none());
    let found = store
        .steps_by_trace(ORG, &["honest".into(), "honest\0".into()])
        .unwrap();
    assert_eq!(found.len(), 1);
    let mut visited = 0;
    store
        .read_session(ORG, "s\0", &mut |_| {
            visited += 1;
            true
        })
        .unwrap();
    store
        .visit_session_records(ORG, "s\0", &mut |_, _| {
            visited += 1;
            true
        })
        .unwrap();
    assert_eq!(visited, 0);
}
