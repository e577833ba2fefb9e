//! The tamper suite's erased signed traces (FORMAT.md 8, rules 4 and 5):
//! a trace's record withheld behind a trace-erasure record verifies; a
//! courier withholding a trace no record erased, or another record's view,
//! and an insider's trace-erasure naming another hash or a trace shown
//! whole, fail where the rules say. Each case is written to the shared
//! corpus, as the rest of `tamper.rs`.

use crate::corpus::*;
use crate::tamper_world::*;
use cairn_core::detail::DetailLevel;
use cairn_core::ed25519_dalek::SigningKey;
use cairn_core::log::{LogEntry, LogRecord, OpRecord};
use cairn_core::selection::Scope;
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
        let forged = with_trace_erasure(entries, erasure, |record| {
            record.trace_seq = trace_seq;
            record.trace_hash = trace_hash;
        });
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
    // The same in partial bundles that hold the entry named: a trace shown
    // whole, a key registration the selection lists as one (rule 5.3 and
    // 5.4: a partial bundle compares what it holds).
    let registration = seq_of(
        entries,
        |e| matches!(&e.record, LogRecord::Op { record: OpRecord::KeyRegistration(k), .. } if k.agent_id == "tracer"),
    ) as u64;
    for (name, trace_seq) in [
        ("partial-trace-erasure-names-a-shown-trace", kept),
        (
            "partial-trace-erasure-names-a-key-registration",
            registration,
        ),
    ] {
        let forged = with_trace_erasure(entries, erasure, |record| {
            record.trace_seq = trace_seq;
            record.trace_hash = kept_hash;
            record.session_id = "trace-b".into();
        });
        let selection = selection_of(
            &forged,
            Scope::Session("trace-b".into()),
            DetailLevel::Generic,
        );
        assert!(
            selection.records.iter().any(|(seq, _)| *seq == erasure),
            "{name}"
        );
        let bundle = w.signed_partial(&forged, &selection);
        case(
            name,
            &bundle,
            pinned,
            &[],
            Some(&Expected {
                seq: Some(erasure),
                session_id: Some("trace-b".into()),
                ..at_line(
                    Reason::ErasureMismatch,
                    line_of(&bundle, erasure) as u64 + 1,
                )
            }),
        );
    }
    // Two trace-erasure records naming one entry the partial bundle does
    // not compare (a step of its session): the second fails (rule 5.4
    // names it, 5.3 refuses a second naming), as in a complete log.
    let step = seq_of(entries, |e| is_step_of(e, "trace-b", 0)) as u64;
    let mut forged = with_trace_erasure(entries, erasure, |record| {
        record.trace_seq = step;
        record.session_id = "trace-b".into();
    });
    let n = forged.len() as u64;
    let mut again = forged[erasure as usize].clone();
    again.seq = n;
    again.logged_at = forged[forged.len() - 1].logged_at;
    forged.push(again);
    let selection = selection_of(
        &forged,
        Scope::Session("trace-b".into()),
        DetailLevel::Generic,
    );
    let bundle = w.signed_partial(&forged, &selection);
    case(
        "partial-trace-erasure-names-a-step-twice",
        &bundle,
        pinned,
        &[],
        Some(&Expected {
            seq: Some(n),
            session_id: Some("trace-b".into()),
            ..at_line(Reason::ErasureMismatch, line_of(&bundle, n) as u64 + 1)
        }),
    );
}

/// `entries` with the trace-erasure record at `erasure` edited by `edit`
/// and its hash recomputed (an insider's forgery, signed by the caller).
fn with_trace_erasure(
    entries: &[LogEntry],
    erasure: u64,
    edit: impl FnOnce(&mut cairn_core::log::TraceErasureRecord),
) -> Vec<LogEntry> {
    let mut forged = entries.to_vec();
    let LogRecord::Op {
        record: OpRecord::TraceErasure(record),
        hash,
    } = &mut forged[erasure as usize].record
    else {
        unreachable!()
    };
    edit(record);
    *hash = OpRecord::TraceErasure(record.clone()).hash();
    forged
}

/// A partial bundle written while trace-a was still shown (its checkpoint
/// below the trace-erasure record) lists the trace; a complete bundle
/// written after withholds it, so `--log` cannot know the trace's level:
/// the selection may list it or not (FORMAT.md 10.4), and both pass.
pub fn selection_of_a_trace_erased_later(w: &World, entries: &[LogEntry], key: &str) {
    let withheld = seq_of(entries, |e| {
        matches!(e.record, LogRecord::ErasedTrace { .. })
    });
    let step_erasure = seq_of(entries, |e| is_op(e, "erasure") && e.seq > withheld as u64);
    let mut before = entries[..step_erasure].to_vec();
    let shown = OpRecord::SignedTrace(cairn_core::log::SignedTraceRecord {
        org_id: ORG.into(),
        session_id: "trace-a".into(),
        trace: cairn_core::trace::CompleteTrace::parse(&signed_trace(
            &SigningKey::from_bytes(&[9; 32]),
            "trace-a",
        ))
        .unwrap(),
    });
    assert_eq!(
        shown.hash(),
        before[withheld].record_hash(),
        "the original trace"
    );
    before[withheld].record = LogRecord::Op {
        hash: shown.hash(),
        record: shown,
    };
    let listed = selection_of(
        &before,
        Scope::Session("trace-a".into()),
        DetailLevel::Generic,
    );
    assert!(
        listed
            .records
            .iter()
            .any(|(seq, _)| *seq == withheld as u64)
    );
    let mut left_out = listed.clone();
    left_out.records.retain(|(seq, _)| *seq != withheld as u64);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.bundle");
    std::fs::write(&log, w.signed_complete(entries).join("\n") + "\n").unwrap();
    // A log whose trace-erasure record states another session (its word
    // only) changes nothing: the listed trace is decided by its view.
    let erasure = seq_of(entries, |e| is_op(e, "trace-erasure")) as u64;
    let lying = dir.path().join("lying.bundle");
    let forged = with_trace_erasure(entries, erasure, |record| {
        record.session_id = "trace-b".into();
    });
    std::fs::write(&lying, w.signed_complete(&forged).join("\n") + "\n").unwrap();
    for (name, selection, log) in [
        ("listed", &listed, &log),
        ("left out", &left_out, &log),
        ("listed, the log lying", &listed, &lying),
    ] {
        let partial = dir.path().join("partial.bundle");
        std::fs::write(
            &partial,
            w.signed_partial(&before, selection).join("\n") + "\n",
        )
        .unwrap();
        let run = crate::common::cairn_in(
            dir.path(),
            &[
                "verify",
                "--bundle",
                partial.to_str().unwrap(),
                "--log",
                log.to_str().unwrap(),
                "--key",
                key,
            ],
            None,
        );
        assert_eq!(run.code, 0, "{name}: {} {}", run.stdout, run.stderr);
    }
}

/// `cairn import` of a verifying log whose trace-erasure records state ids
/// (informative) that other records of the log hold, or each other's: the
/// import goes through, and a withheld trace takes only an id nothing else
/// holds.
pub fn import_of_stated_ids(w: &World, entries: &[LogEntry]) {
    let erasure = seq_of(entries, |e| is_op(e, "trace-erasure")) as u64;
    // A courier may spell the record's type with an escape: it still
    // verifies, and its id is still kept.
    let escaped = w.signed_complete(entries).join("\n").replace(
        r#""type":"trace-erasure""#,
        r#""type":"trace\u002derasure""#,
    ) + "\n";
    assert!(!escaped.contains(r#""type":"trace-erasure""#));
    for stated in ["trace-b", "trace-b.0", "personal-1", "trace-a"] {
        let bundle = if stated == "trace-a" {
            escaped.clone()
        } else {
            let forged = with_trace_erasure(entries, erasure, |record| {
                record.trace_id = stated.into();
            });
            w.signed_complete(&forged).join("\n") + "\n"
        };
        let dir = tempfile::tempdir().unwrap();
        let target = cairn_store::SqliteStore::open(
            dir.path(),
            cairn_store::SqliteOptions {
                embedding_sample_rate: 0.0,
                ..cairn_store::SqliteOptions::default()
            },
        )
        .unwrap();
        let open = || -> std::io::Result<Box<dyn std::io::BufRead>> {
            Ok(Box::new(std::io::Cursor::new(bundle.clone().into_bytes())))
        };
        let imported = cairn_store::ops::import_bundle(
            &target,
            &open,
            &[],
            cairn_store::ops::DEFAULT_MAX_BUNDLE_LINE_BYTES,
            &mut |_| {},
        );
        assert!(
            matches!(
                imported,
                Ok(cairn_store::ops::ImportOutcome::Imported { .. })
            ),
            "{stated}: {imported:?}"
        );
        // The id stays the record's that held it; the withheld trace takes
        // its own.
        let held = cairn_store::LedgerStore::op_by_id(&target, ORG, "trace-b").unwrap();
        assert!(
            matches!(held, Some((_, Some(OpRecord::SignedTrace(_))))),
            "{stated}"
        );
        let withheld = cairn_store::LedgerStore::op_by_id(&target, ORG, "trace-a").unwrap();
        assert_eq!(withheld.is_some(), stated == "trace-a", "{stated}");
    }
}
