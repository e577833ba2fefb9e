//! Full-text search, run against every backend by the conformance suite:
//! words, English stems, phrases, prefixes, exclusions, Japanese (seed 002
//! writes it), every filter, orgs kept apart, and an erasure taking the
//! step out of the index in the same transaction.

use crate::conformance::{Backend, ORG, step};
use cairn_core::kind::StepKind;
use cairn_core::record::Status;
use cairn_store::fulltext::FullTextQuery;
use cairn_store::{Ledger, LedgerStore, SequencerConfig, StepFilter, WriteRequest, Written};
use std::sync::Arc;

/// The session and index of each hit, best first.
fn found(store: &dyn LedgerStore, org: &str, query: &str, filter: &StepFilter) -> Vec<String> {
    let query = FullTextQuery::parse(query).unwrap();
    let hits = store.full_text_search(org, &query, filter, 50).unwrap();
    assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1), "best first");
    hits.into_iter()
        .map(|(seq, _)| {
            let mut name = String::new();
            store
                .read_log(org, seq, seq + 1, &mut |stored| {
                    if let Ok(entry) = &stored.entry
                        && let cairn_core::log::LogRecord::Step(record) = &entry.record
                    {
                        name = format!("{}#{}", record.step.session_id, record.step.step_index);
                    }
                    false
                })
                .unwrap();
            name
        })
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

pub fn full_text_search_finds_and_forgets(backend: &dyn Backend) {
    let store = backend.open("full-text");
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    let write = |session: &str,
                 agent: &str,
                 kind: &str,
                 content: &str,
                 edit: &dyn Fn(&mut cairn_store::NewStep)| {
        let mut s = step(session, kind, content);
        s.agent_id = agent.into();
        edit(&mut s);
        match ledger.write(WriteRequest::Step(Box::new(s))).unwrap() {
            Written::Step { trace_id, .. } => trace_id,
            other => panic!("{other:?}"),
        }
    };
    let none = |_: &mut cairn_store::NewStep| {};
    write(
        "pricing",
        "analyst",
        "Observation",
        "The pricing change hit SMB accounts hardest.",
        &none,
    ); // pricing#0
    write(
        "pricing",
        "analyst",
        "Decision",
        "Raise enterprise prices by 4% next quarter.",
        &|s| {
            s.status = Status::Flagged;
        },
    ); // pricing#1
    write("pricing", "analyst", "ToolCall", "run query", &|s| {
        s.input = Some(serde_json::json!({"sql": "SELECT segment, churn_rate FROM accounts"}));
    }); // pricing#2
    let secret = write(
        "support",
        "helper",
        "Observation",
        "Customer Jane Doe asked about her refund.",
        &none,
    ); // support#0
    write(
        "support",
        "helper",
        "Action",
        "[実行] 注文テーブルを検索しています",
        &none,
    ); // support#1
    write(
        "support",
        "helper",
        "FinalAnswer",
        "Refund approved: enterprise customers get refunds within 5 days.",
        &none,
    ); // support#2
    let mut other = step("elsewhere", "Observation", "pricing for another org");
    other.org_id = "other-org".into();
    ledger.write(WriteRequest::Step(Box::new(other))).unwrap();

    let all = StepFilter::default();
    // Words, with English stems on both engines.
    assert_eq!(
        found(store.as_ref(), ORG, "hardest", &all),
        vec!["pricing#0"]
    );
    assert_eq!(
        sorted(found(store.as_ref(), ORG, "pricing", &all)),
        vec!["pricing#0", "pricing#1"],
        "pricing, prices and price share a stem"
    );
    assert_eq!(
        sorted(found(store.as_ref(), ORG, "price", &all)),
        vec!["pricing#0", "pricing#1"]
    );
    assert_eq!(
        sorted(found(store.as_ref(), ORG, "refunds", &all)),
        vec!["support#0", "support#2"]
    );
    assert_eq!(
        found(store.as_ref(), ORG, "enterprise refund", &all),
        vec!["support#2"]
    );
    // Phrases, prefixes, exclusions.
    assert_eq!(
        found(store.as_ref(), ORG, "\"enterprise customers\"", &all),
        vec!["support#2"]
    );
    assert!(found(store.as_ref(), ORG, "\"customers enterprise\"", &all).is_empty());
    assert_eq!(
        sorted(found(store.as_ref(), ORG, "ent*", &all)),
        vec!["pricing#1", "support#2"]
    );
    assert_eq!(
        found(store.as_ref(), ORG, "enterprise -refund", &all),
        vec!["pricing#1"]
    );
    // Inputs are searched too (JSON strings and keys).
    assert_eq!(
        found(store.as_ref(), ORG, "churn_rate", &all),
        vec!["pricing#2"]
    );
    assert_eq!(
        found(store.as_ref(), ORG, "segment", &all),
        vec!["pricing#2"]
    );
    // Japanese: a two-character word, a longer one, one character, the
    // bracket label as written.
    for query in ["注文", "テーブル", "検索", "注", "実行"] {
        assert_eq!(
            found(store.as_ref(), ORG, query, &all),
            vec!["support#1"],
            "{query}"
        );
    }
    assert!(found(store.as_ref(), ORG, "文注", &all).is_empty());

    // Filters.
    let by = |f: StepFilter, q: &str| sorted(found(store.as_ref(), ORG, q, &f));
    let enterprise = "enterprise";
    assert_eq!(
        by(
            StepFilter {
                agent_id: Some("helper".into()),
                ..all.clone()
            },
            enterprise
        ),
        vec!["support#2"]
    );
    assert_eq!(
        by(
            StepFilter {
                session_id: Some("pricing".into()),
                ..all.clone()
            },
            enterprise
        ),
        vec!["pricing#1"]
    );
    assert_eq!(
        by(
            StepFilter {
                kind: Some(StepKind::FinalAnswer),
                ..all.clone()
            },
            enterprise
        ),
        vec!["support#2"]
    );
    assert_eq!(
        by(
            StepFilter {
                status: Some(Status::Flagged),
                ..all.clone()
            },
            enterprise
        ),
        vec!["pricing#1"]
    );
    let future =
        cairn_core::Timestamp::from_micros(cairn_store::now().as_micros() + 3_600_000_000).unwrap();
    assert!(
        by(
            StepFilter {
                since: Some(future),
                ..all.clone()
            },
            enterprise
        )
        .is_empty()
    );
    assert_eq!(
        by(
            StepFilter {
                until: Some(future),
                ..all.clone()
            },
            enterprise
        )
        .len(),
        2
    );
    assert!(
        by(
            StepFilter {
                session_id: Some("nope".into()),
                ..all.clone()
            },
            enterprise
        )
        .is_empty()
    );

    // Orgs apart.
    assert_eq!(
        found(store.as_ref(), "other-org", "pricing", &all),
        vec!["elsewhere#0"]
    );
    assert!(found(store.as_ref(), "nobody", "pricing", &all).is_empty());

    // An erasure takes the step out of the index.
    assert_eq!(found(store.as_ref(), ORG, "jane", &all), vec!["support#0"]);
    ledger
        .write(WriteRequest::Erase {
            org_id: ORG.into(),
            trace_id: secret,
            reason: "request".into(),
            actor: "test".into(),
        })
        .unwrap();
    assert!(found(store.as_ref(), ORG, "jane", &all).is_empty());
    assert!(found(store.as_ref(), ORG, "customer asked", &all).is_empty());
    assert_eq!(
        sorted(found(store.as_ref(), ORG, "refunds", &all)),
        vec!["support#2"]
    );
}
