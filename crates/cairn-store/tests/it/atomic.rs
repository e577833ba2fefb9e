//! All-or-nothing writes of several steps (a seed-002 turn): every step is
//! written, or none is, whatever refuses the bad one (a record rule, a
//! link, a duplicate id, a sealed session), on every backend.

use crate::conformance::{Backend, ORG, step};
use cairn_store::ops::verify_org;
use cairn_store::{
    AppendError, Ledger, LedgerStore, Refusal, SequencerConfig, WriteRequest, Written,
};
use std::sync::Arc;

fn refused_at(ledger: &Ledger, steps: Vec<cairn_store::NewStep>) -> (usize, Refusal) {
    match ledger.write(WriteRequest::Steps(steps)) {
        Err(AppendError::Refused(Refusal::StepOfMany { index, refusal, .. })) => (index, *refusal),
        other => panic!("expected a refusal of one step, got {other:?}"),
    }
}

/// Runs the cases on `backend`.
pub fn all_or_nothing(backend: &dyn Backend) {
    let store: Arc<dyn LedgerStore> = backend.open("atomic");
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    let with_id = |kind: &str, id: &str| {
        let mut s = step("turn", kind, id);
        s.trace_id = Some(id.into());
        s
    };
    // A record rule: the third step's kind.
    let (index, refusal) = refused_at(
        &ledger,
        vec![
            step("turn", "plan", "a"),
            step("turn", "plan", "b"),
            step("turn", "no-such-kind", "c"),
        ],
    );
    assert_eq!(index, 2);
    assert!(matches!(refusal, Refusal::Invalid(_)), "{refusal:?}");
    assert!(
        store.session(ORG, "turn").unwrap().is_none(),
        "nothing written"
    );
    assert_eq!(store.log_size(ORG).unwrap(), 0);
    // A link to nothing, on a session the write would have opened.
    let mut dangling = step("turn", "plan", "b");
    dangling.links.corrects = Some("no-such-step".into());
    let (index, refusal) = refused_at(&ledger, vec![step("turn", "plan", "a"), dangling]);
    assert_eq!(index, 1);
    assert!(
        matches!(refusal, Refusal::UnknownLink { .. }),
        "{refusal:?}"
    );
    assert!(
        store.session(ORG, "turn").unwrap().is_none(),
        "nothing written"
    );
    // The same id twice in one write.
    let (index, refusal) = refused_at(&ledger, vec![with_id("plan", "t1"), with_id("plan", "t1")]);
    assert_eq!(index, 1);
    assert!(
        matches!(refusal, Refusal::DuplicateTraceId { .. }),
        "{refusal:?}"
    );
    // A link to a step of the same write resolves; all are written.
    let mut follow = with_id("plan", "t3");
    follow.links.parent = Some("t2".into());
    let written = ledger
        .write(WriteRequest::Steps(vec![with_id("plan", "t2"), follow]))
        .unwrap();
    let Written::Steps(steps) = written else {
        panic!("{written:?}")
    };
    assert_eq!(steps.len(), 2);
    assert!(matches!(steps[1], Written::Step { step_index: 1, .. }));
    let size = store.log_size(ORG).unwrap();
    // Another agent's session: refused at the first step.
    let mut other = step("turn", "plan", "x");
    other.agent_id = "mallory".into();
    let (index, refusal) = refused_at(&ledger, vec![other]);
    assert_eq!(index, 0);
    assert!(
        matches!(refusal, Refusal::AgentMismatch { .. }),
        "{refusal:?}"
    );
    // A sealed session refuses all.
    ledger
        .write(WriteRequest::Seal {
            org_id: ORG.into(),
            session_id: "turn".into(),
            require_reflection: false,
        })
        .unwrap();
    let (index, refusal) = refused_at(&ledger, vec![step("turn", "plan", "late")]);
    assert_eq!(index, 0);
    assert!(matches!(refusal, Refusal::Sealed { .. }), "{refusal:?}");
    assert_eq!(store.log_size(ORG).unwrap(), size + 1, "only the seal");
    let verdict = verify_org(store.as_ref(), ORG, &[], &[], &mut |_| {}).unwrap();
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
    ledger.close();
}
