//! What a caller sends that breaks a rule depending on nothing the ledger
//! holds is refused before it is queued (`Ledger::submit`), with the
//! engine's own answer; the ledger's own writes (retention's erasures)
//! are not bound by the rules made for callers.

use crate::conformance::{ORG, step};
use cairn_store::{
    AppendError, Ledger, LedgerStore, Refusal, SequencerConfig, SqliteOptions, SqliteStore,
    WriteRequest, Written,
};
use std::sync::Arc;

fn refusal(ledger: &Ledger, request: WriteRequest) -> String {
    match ledger.write(request) {
        Err(AppendError::Refused(refusal)) => refusal.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// With a content limit of 4 bytes: an erasure's reason must be 1 to 4
/// bytes, on every surface (they all submit); retention still erases,
/// with its own 9-byte reason (a review found it erased nothing, and
/// said nothing, under such a limit).
#[test]
fn erasure_reasons_are_bounded_for_callers_not_for_retention() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions {
        limits: cairn_core::record::Limits {
            max_content_bytes: 4,
            ..cairn_core::record::Limits::default()
        },
        ..SqliteOptions::default()
    };
    let store: Arc<dyn LedgerStore> = Arc::new(SqliteStore::open(dir.path(), options).unwrap());
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    let mut old = step("old", "plan", "x");
    old.trace_id = Some("t-old".into());
    ledger.write(WriteRequest::Step(Box::new(old))).unwrap();
    let erase = |trace_id: &str, reason: &str| WriteRequest::Erase {
        org_id: ORG.into(),
        trace_id: trace_id.into(),
        reason: reason.into(),
        actor: "admin".into(),
    };
    assert!(refusal(&ledger, erase("t-old", "  ")).contains("reason must not be empty"));
    assert!(refusal(&ledger, erase("t-old", "12345")).contains("at most 4 bytes"));
    // An unknown step with a bad reason: the reason's refusal, which says
    // nothing of what the ledger holds.
    assert!(refusal(&ledger, erase("t-none", "12345")).contains("at most 4 bytes"));

    std::thread::sleep(std::time::Duration::from_millis(5));
    let cutoff = cairn_store::now();
    let Ok(Written::Erased { seqs, .. }) = ledger.write(WriteRequest::Retention {
        org_id: ORG.into(),
        older_than: cutoff,
    }) else {
        panic!("retention must answer with its erasures")
    };
    assert_eq!(seqs.len(), 1, "retention must erase the old step");
    assert!(
        store
            .step_by_trace(ORG, "t-old")
            .unwrap()
            .unwrap()
            .record
            .erased
    );
}

/// An audit event's chosen id is checked before its action, as the
/// engine checks them.
#[test]
fn audit_event_rules_keep_the_engines_order() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn LedgerStore> =
        Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap());
    let ledger = Ledger::new(store, SequencerConfig::default());
    let answer = ledger.write(WriteRequest::AuditEvent {
        org_id: ORG.into(),
        event_id: Some("a/b".into()),
        session_id: None,
        action: String::new(),
        detail: None,
    });
    assert!(
        matches!(answer, Err(AppendError::Refused(Refusal::Invalid(_)))),
        "{answer:?}"
    );
}
