//! OTLP spans waiting for their session: held durably per org, key and
//! trace, bounded per org, found when due, released once written; and the
//! session a trace's recorded steps are in.

use super::{Backend, ORG, append, ledger, step};
use cairn_store::held_spans::{HeldSpan, HeldTrace};

fn held(trace: &str, span: &str, received_ms: i64, steps: &str) -> HeldSpan {
    HeldSpan {
        trace_hex: trace.into(),
        span_hex: span.into(),
        steps: steps.into(),
        received_ms,
    }
}

pub fn spans_wait_durably_until_released(backend: &dyn Backend) {
    let store = backend.open("held_spans");
    let (a, b) = ("a".repeat(32), "b".repeat(32));
    let first = [held(&a, "01", 1_000, "[1]"), held(&a, "02", 2_000, "[22]")];
    assert_eq!(store.hold_spans(ORG, "k1", &first, 1_000).unwrap(), Some(2));
    // A retried export: the span is kept as it was first held, and
    // counted neither as held again nor against the bound.
    let retried = [held(&a, "01", 9_000, &"9".repeat(999))];
    assert_eq!(
        store.hold_spans(ORG, "k1", &retried, 1_000).unwrap(),
        Some(0)
    );
    let k2 = [held(&a, "01", 5_000, "[3]")];
    assert_eq!(store.hold_spans(ORG, "k2", &k2, 1_000).unwrap(), Some(1));
    let other = [held(&b, "01", 500, "[4]")];
    assert_eq!(
        store.hold_spans("other", "k1", &other, 1_000).unwrap(),
        Some(1)
    );
    // Per org, per key, per trace.
    let spans = store
        .held_spans(ORG, "k1", std::slice::from_ref(&a))
        .unwrap();
    assert_eq!(spans, first.to_vec());
    let both = store
        .held_spans(ORG, "k1", &[b.clone(), a.clone()])
        .unwrap();
    assert_eq!(both, first.to_vec());
    assert_eq!(
        store
            .held_spans(ORG, "k2", std::slice::from_ref(&a))
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .held_spans(ORG, "k1", std::slice::from_ref(&b))
            .unwrap()
            .is_empty()
    );
    // The org's bound counts every key's spans (3 + 4 + 3 bytes held).
    let big = [held(&b, "03", 3_000, &"x".repeat(991))];
    assert_eq!(store.hold_spans(ORG, "k1", &big, 1_000).unwrap(), None);
    assert!(
        store
            .held_spans(ORG, "k1", std::slice::from_ref(&b))
            .unwrap()
            .is_empty()
    );
    let fits = [held(&b, "03", 3_000, &"x".repeat(990))];
    assert_eq!(store.hold_spans(ORG, "k1", &fits, 1_000).unwrap(), Some(1));
    // Due: the traces with a span held before the time, of every org.
    let mut due = store.due_held_traces(1_500, 32, 10).unwrap();
    due.sort_by(|x, y| (&x.org_id, &x.key_id).cmp(&(&y.org_id, &y.key_id)));
    let trace = |org: &str, key: &str, t: &str| HeldTrace {
        org_id: org.into(),
        key_id: key.into(),
        trace_hex: t.into(),
    };
    assert_eq!(due, [trace(ORG, "k1", &a), trace("other", "k1", &b)]);
    assert_eq!(store.due_held_traces(1_500, 32, 1).unwrap().len(), 1);
    // A few of each org at a time, the longest held first.
    let mut fair = store.due_held_traces(10_000, 1, 10).unwrap();
    fair.sort_by(|x, y| x.org_id.cmp(&y.org_id));
    assert_eq!(fair, [trace(ORG, "k1", &a), trace("other", "k1", &b)]);
    assert_eq!(store.due_held_traces(10_000, 32, 10).unwrap().len(), 4);
    // Held spans survive a restart.
    drop(store);
    let store = backend.open("held_spans");
    assert_eq!(
        store
            .held_spans(ORG, "k1", std::slice::from_ref(&a))
            .unwrap(),
        first.to_vec()
    );
    // Released one by one; the others stay.
    let released = store.release_spans(ORG, "k1", &a, &["01".to_owned()]);
    assert_eq!(released.unwrap(), 1);
    assert_eq!(
        store
            .held_spans(ORG, "k1", std::slice::from_ref(&a))
            .unwrap(),
        first[1..].to_vec()
    );
    assert_eq!(
        store
            .held_spans(ORG, "k2", std::slice::from_ref(&a))
            .unwrap()
            .len(),
        1
    );
    let released = store.release_spans(ORG, "k1", &a, &["02".to_owned(), "09".to_owned()]);
    assert_eq!(released.unwrap(), 1, "only what was held is counted");
    assert!(
        store
            .held_spans(ORG, "k1", std::slice::from_ref(&a))
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.due_held_traces(1_500, 32, 10).unwrap().len(), 1);
}

pub fn a_traces_sessions_are_named_latest_first(backend: &dyn Backend) {
    let store = backend.open("otel_trace_session");
    let ledger = ledger(store.clone());
    let trace = "0123456789abcdef0123456789abcdef";
    let sessions = |org: &str, traces: &[String]| store.otel_trace_sessions(org, traces).unwrap();
    let one = [trace.to_owned()];
    assert_eq!(sessions(ORG, &one), [Vec::<String>::new()]);
    let otel = |session: &str, span: &str| {
        let mut s = step(session, "observation", "seen");
        s.trace_id = Some(format!("otel.{trace}.{span}.0"));
        s
    };
    append(&ledger, otel("by-trace", "0000000000000001")).unwrap();
    assert_eq!(sessions(ORG, &one), [["by-trace"]]);
    append(&ledger, otel("conversation", "0000000000000002")).unwrap();
    // Ids that only start alike are another trace's; another org sees none.
    let mut near = step("near", "observation", "seen");
    near.trace_id = Some(format!("otel.{trace}0.0000000000000003.0"));
    append(&ledger, near).unwrap();
    let mut plain = step("plain", "observation", "seen");
    plain.trace_id = Some(format!("otel.{trace}~x"));
    append(&ledger, plain).unwrap();
    assert_eq!(sessions(ORG, &one), [["conversation", "by-trace"]]);
    // A later step in the first session puts it first again.
    append(&ledger, otel("by-trace", "0000000000000004")).unwrap();
    assert_eq!(sessions(ORG, &one), [["by-trace", "conversation"]]);
    assert_eq!(sessions("other", &one), [Vec::<String>::new()]);
    let both = ["f".repeat(32), trace.to_owned()];
    assert_eq!(
        sessions(ORG, &both),
        [
            vec![],
            vec!["by-trace".to_owned(), "conversation".to_owned()]
        ]
    );
}
