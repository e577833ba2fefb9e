//! The session listing's filters and keyset pages, run against every
//! backend by the conformance suite.

use crate::conformance::{Backend, ORG, step};
use cairn_core::kind::StepKind;
use cairn_core::record::Status;
use cairn_store::{
    Ledger, LedgerStore, SequencerConfig, SessionCursor, SessionFilter, SessionSummary,
    WriteRequest,
};
use std::sync::Arc;

fn ids(rows: &[SessionSummary]) -> Vec<String> {
    rows.iter().map(|s| s.session_id.clone()).collect()
}

/// Every page of `filter`, `page` sessions at a time, following cursors.
fn paged(store: &dyn LedgerStore, filter: &SessionFilter, page: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut filter = filter.clone();
    loop {
        let rows = store.list_sessions(ORG, &filter, page).unwrap();
        assert!(rows.len() <= page);
        out.extend(ids(&rows));
        match rows.last() {
            Some(last) if rows.len() == page => filter.after = Some(SessionCursor::after(last)),
            _ => return out,
        }
    }
}

pub fn session_listing_filters_and_pages(backend: &dyn Backend) {
    let store = backend.open("listing-filters");
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    for n in 0..25 {
        let session = format!("s{n:02}");
        let agent = if n % 2 == 0 { "alpha" } else { "beta" };
        let mut first = step(&session, "Observation", &format!("{session} looks"));
        first.agent_id = agent.into();
        if n == 7 {
            first.status = Status::Flagged;
        }
        ledger.write(WriteRequest::Step(Box::new(first))).unwrap();
        if n == 5 || n == 12 {
            let mut call = step(&session, "ToolCall", "search");
            call.agent_id = agent.into();
            ledger.write(WriteRequest::Step(Box::new(call))).unwrap();
        }
    }
    // Another tenant's sessions never show.
    let mut foreign = step("s99", "ToolCall", "elsewhere");
    foreign.org_id = "other-org".into();
    foreign.status = Status::Flagged;
    ledger.write(WriteRequest::Step(Box::new(foreign))).unwrap();

    let all = store
        .list_sessions(ORG, &SessionFilter::all(), 1000)
        .unwrap();
    assert_eq!(all.len(), 25);
    assert!(
        all.windows(2)
            .all(|w| (w[0].started_at, &w[0].session_id) > (w[1].started_at, &w[1].session_id)),
        "newest first, then by session id descending"
    );
    // Keyset pages, of any size, add up to the whole listing in order.
    for page in [1, 7, 25, 30] {
        assert_eq!(
            paged(store.as_ref(), &SessionFilter::all(), page),
            ids(&all)
        );
    }
    let alpha = SessionFilter::agent(Some("alpha"));
    let expected: Vec<String> = all
        .iter()
        .filter(|s| s.agent_id == "alpha")
        .map(|s| s.session_id.clone())
        .collect();
    assert_eq!(expected.len(), 13);
    assert_eq!(paged(store.as_ref(), &alpha, 4), expected);

    let tool_calls = SessionFilter {
        kind: StepKind::parse("tool_call"),
        ..SessionFilter::all()
    };
    assert_eq!(paged(store.as_ref(), &tool_calls, 1), vec!["s12", "s05"]);
    let alpha_tool_calls = SessionFilter {
        kind: Some(StepKind::ToolCall),
        agent_id: Some("alpha".into()),
        ..SessionFilter::all()
    };
    assert_eq!(paged(store.as_ref(), &alpha_tool_calls, 10), vec!["s12"]);
    let decisions = SessionFilter {
        kind: Some(StepKind::Decision),
        ..SessionFilter::all()
    };
    assert!(paged(store.as_ref(), &decisions, 10).is_empty());
    let flagged = SessionFilter {
        flagged: true,
        ..SessionFilter::all()
    };
    assert_eq!(paged(store.as_ref(), &flagged, 10), vec!["s07"]);

    // A time range: [since, until) on the start time.
    let pivot = all[10].started_at;
    let since = SessionFilter {
        started_from: Some(pivot),
        ..SessionFilter::all()
    };
    let until = SessionFilter {
        started_before: Some(pivot),
        ..SessionFilter::all()
    };
    let newer = paged(store.as_ref(), &since, 3);
    let older = paged(store.as_ref(), &until, 3);
    assert_eq!(
        newer,
        ids(&all
            .iter()
            .filter(|s| s.started_at >= pivot)
            .cloned()
            .collect::<Vec<_>>())
    );
    assert_eq!([newer.clone(), older].concat(), ids(&all));
    assert!(newer.len() >= 11);
    let empty_range = SessionFilter {
        started_from: Some(pivot),
        started_before: Some(pivot),
        ..SessionFilter::all()
    };
    assert!(paged(store.as_ref(), &empty_range, 5).is_empty());

    let other = store
        .list_sessions("other-org", &SessionFilter::all(), 10)
        .unwrap();
    assert_eq!(ids(&other), vec!["s99"]);
    assert!(
        store
            .list_sessions("nobody", &flagged, 10)
            .unwrap()
            .is_empty()
    );
}
