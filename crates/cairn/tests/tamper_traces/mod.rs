//! The tamper suite's erased signed traces (FORMAT.md 8, rules 4 and 5):
//! a trace's record withheld behind a trace-erasure record verifies; a
//! courier withholding a trace no record erased, or another record's view,
//! and an insider's trace-erasure naming another hash or a trace shown
//! whole, fail where the rules say. Each case is written to the shared
//! corpus, as the rest of `tamper.rs`.

use crate::corpus::*;
use crate::tamper_world::*;
use cairn_core::detail::DetailLevel;
use cairn_core::log::{LogEntry, LogRecord, OpRecord};
use cairn_core::verify::Reason;
use cairn_store::ops::ExportScope;
use serde_json::Value;

/// The cases; `complete` is the world's complete bundle, `entries` its
/// entries.
pub fn erased_traces(w: &World, complete: &[String], entries: &[LogEntry], pinned: &[String]) {
    let withheld = seq_of(entries, |e| {
        matches!(e.record, LogRecord::ErasedTrace { .. })
    }) as u64;
    let kept = seq_of(entries, |e| is_op(e, "signed-trace")) as u64;
    let erasure = seq_of(entries, |e| is_op(e, "trace-erasure")) as u64;
    assert!(withheld < kept && kept < erasure);
    // Exports of the erased trace's session leave the trace out and carry
    // its trace-erasure record; they verify.
    let t1 = w.export(
        ExportScope::Session("trace-a".into()),
        Some(DetailLevel::Generic),
    );
    assert!(t1.iter().all(|l| !l.contains(r#""type":"signed-trace""#)));
    case(
        "genuine-erased-trace-session-generic",
        &t1,
        pinned,
        &[],
        None,
    );
    let mut dropped = t1.clone();
    let at = line_of(&dropped, erasure);
    dropped.remove(at);
    fix_end(&mut dropped);
    case(
        "partial-trace-erasure-dropped",
        &dropped,
        pinned,
        &[],
        Some(&Expected {
            reason: Reason::MissingRecord,
            line: None,
            seq: Some(erasure),
            session_id: None,
            step_index: None,
        }),
    );

    // A courier withholds a trace no record erased: its leaf is unchanged,
    // so only the missing trace-erasure record tells, at the end.
    let mut hidden = complete.to_vec();
    let at = line_of(&hidden, kept);
    edit_line(&mut hidden, at, |v| v["view"] = Value::Null);
    case(
        "complete-signed-trace-withheld",
        &hidden,
        pinned,
        &[],
        Some(&Expected {
            reason: Reason::ErasureMismatch,
            line: None,
            seq: Some(kept),
            session_id: None,
            step_index: None,
        }),
    );
    // Only a signed trace's view is ever withheld.
    let review = seq_of(entries, |e| is_op(e, "review")) as u64;
    let mut nulled = complete.to_vec();
    let at = line_of(&nulled, review);
    edit_line(&mut nulled, at, |v| v["view"] = Value::Null);
    case(
        "complete-review-view-withheld",
        &nulled,
        pinned,
        &[],
        Some(&Expected {
            seq: Some(review),
            ..at_line(Reason::MalformedRecord, at as u64 + 1)
        }),
    );

    // An insider re-signs a trace-erasure record that names another hash,
    // or the trace kept whole.
    let kept_hash = entries[kept as usize].record_hash();
    for (name, trace_seq, trace_hash) in [
        (
            "insider-trace-erasure-other-hash",
            withheld,
            cairn_core::Hash::sha256(b"another trace"),
        ),
        ("insider-trace-erasure-names-a-kept-trace", kept, kept_hash),
    ] {
        let mut forged = entries.to_vec();
        let LogRecord::Op {
            record: OpRecord::TraceErasure(record),
            hash,
        } = &mut forged[erasure as usize].record
        else {
            unreachable!()
        };
        record.trace_seq = trace_seq;
        record.trace_hash = trace_hash;
        *hash = OpRecord::TraceErasure(record.clone()).hash();
        let bundle = w.signed_complete(&forged);
        case(
            name,
            &bundle,
            pinned,
            &[],
            Some(&Expected {
                seq: Some(erasure),
                session_id: Some("trace-a".into()),
                ..at_line(
                    Reason::ErasureMismatch,
                    line_of(&bundle, erasure) as u64 + 1,
                )
            }),
        );
    }
}
