//! Org-log tampering: deletion, reordering and truncation of the log, edits
//! of operational records, a fully recomputed rewrite exposed by an older
//! checkpoint, agent signatures and seals, signed traces, predecessors,
//! and a checkpoint signed by another key.

use crate::tamper::{
    ORG, SERVER, StepSpec, assert_log_fails_at, build_log, header, logged, make_step, step_spec, t,
    verify_log,
};
use cairn_core::Hash;
use cairn_core::checkpoint::verify_checkpoint;
use cairn_core::commit::{StepRecord, agent_key_id, chain_hash};
use cairn_core::log::{KeyRegistration, LogEntry, LogRecord, OpRecord, org_checkpoint};
use cairn_core::note::NoteSigner;
use cairn_core::verify::Reason;
use ed25519_dalek::{Signer as _, SigningKey};
use proptest::prelude::*;
use serde_json::json;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn untouched_logs_verify_against_their_checkpoints(specs in prop::collection::vec(step_spec(), 1..12)) {
        let fx = build_log(&specs);
        let n = fx.entries.len();
        let verdict = verify_log(&fx, &fx.entries, &[1, n / 2 + 1, n]);
        prop_assert!(verdict.verified, "{:?}", verdict.failure);
        prop_assert_eq!(verdict.records_checked, n as u64);
    }

    /// The verdict's last valid location is the last entry that passed,
    /// a step's or an operational record's, whatever came before it (the
    /// verifier writes it over in place).
    #[test]
    fn the_last_valid_location_is_the_last_entry_that_passed(
        specs in prop::collection::vec(step_spec(), 1..12),
        upto in any::<prop::sample::Index>(),
    ) {
        let fx = build_log(&specs);
        let k = upto.index(fx.entries.len()) + 1;
        let verdict = verify_log(&fx, &fx.entries[..k], &[]);
        prop_assert!(verdict.verified, "{:?}", verdict.failure);
        let last = &fx.entries[k - 1];
        let expected = match &last.record {
            LogRecord::Step(rec) => cairn_core::verify::Location {
                seq: Some(last.seq),
                session_id: Some(rec.step.session_id.clone()),
                step_index: Some(rec.step.step_index),
                trace_id: Some(rec.step.trace_id.clone()),
                line: None,
            },
            LogRecord::Op { record, .. } => cairn_core::verify::Location {
                seq: Some(last.seq),
                session_id: match record {
                    OpRecord::SessionStart(h) => Some(h.session_id.clone()),
                    OpRecord::Seal(seal) => Some(seal.session_id.clone()),
                    _ => None,
                },
                ..Default::default()
            },
            LogRecord::ErasedTrace { .. } => cairn_core::verify::Location {
                seq: Some(last.seq),
                ..Default::default()
            },
        };
        prop_assert_eq!(verdict.last_valid, Some(expected));
    }

    #[test]
    fn log_deletion_reorder_and_truncation_are_caught(
        specs in prop::collection::vec(step_spec(), 2..12),
        at in any::<prop::sample::Index>(),
        op in 0usize..3,
    ) {
        let fx = build_log(&specs);
        let n = fx.entries.len();
        let mut entries = fx.entries.clone();
        let k = at.index(n - 1);
        let (seq, reason) = match op {
            0 => { entries.remove(k); (k, Reason::SequenceGap) }
            1 => { entries.swap(k, k + 1); (k, Reason::SequenceGap) }
            _ => { entries.truncate(k + 1); (k + 1, Reason::MissingRecord) }
        };
        assert_log_fails_at(&verify_log(&fx, &entries, &[n]), seq as u64, reason);
    }

    #[test]
    fn op_record_edits_are_caught_at_their_record(specs in prop::collection::vec(step_spec(), 1..8), which in 0usize..3) {
        let fx = build_log(&specs);
        let mut entries = fx.entries.clone();
        let k = [0, 1, entries.len() - 1][which];
        let LogRecord::Op { record, .. } = &mut entries[k].record else { unreachable!() };
        match record {
            OpRecord::KeyRegistration(r) => r.agent_id = "mallory".into(),
            OpRecord::SessionStart(h) => h.full_consent = true,
            OpRecord::Seal(s) => s.step_count += 1,
            _ => unreachable!(),
        }
        assert_log_fails_at(&verify_log(&fx, &entries, &[entries.len()]), k as u64, Reason::DigestMismatch);
    }

    #[test]
    fn a_fully_recomputed_rewrite_is_caught_by_an_older_checkpoint(
        specs in prop::collection::vec(step_spec(), 2..12),
        at in any::<prop::sample::Index>(),
    ) {
        // The attacker edits a step of session s2 (never sealed) and
        // recomputes every digest, chain hash and leaf after it: the chains
        // verify, and only a checkpoint signed before the rewrite (held by an
        // auditor) exposes it, at the first checkpoint size covering the edit.
        let fx = build_log(&specs);
        let n = fx.entries.len();
        let s2: Vec<usize> = (0..n).filter(|&i| matches!(&fx.entries[i].record, LogRecord::Step(r) if r.step.session_id == "s2")).collect();
        prop_assume!(!s2.is_empty());
        let edited = s2[at.index(s2.len())];
        let mut entries = fx.entries.clone();
        let mut head = None;
        for &i in s2.iter().filter(|&&i| i >= edited) {
            let LogRecord::Step(rec) = &mut entries[i].record else { unreachable!() };
            if i == edited {
                rec.step.content = Some("a different story".into());
            }
                        if let Some(h) = head {
                rec.prev_hash = h;
            }
            // Without the agent's key the attacker cannot re-sign, so they
            // also drop the declared signer before recomputing.
            rec.step.signer_key_id = None;
            rec.digest = rec.recompute_digest();
            rec.hash = chain_hash(&rec.prev_hash, &rec.digest, rec.step.step_index, rec.step.created_at);
            rec.signature = None;
            head = Some(rec.hash);
        }
        // Chains alone verify.
        prop_assert!(verify_log(&fx, &entries, &[]).verified);
        // Against the checkpoint at the final size, the root differs.
        assert_log_fails_at(&verify_log(&fx, &entries, &[n]), n as u64 - 1, Reason::InconsistentCheckpoint);
        // Against one taken right after the edited entry, it is caught there.
        assert_log_fails_at(&verify_log(&fx, &entries, &[edited + 1, n]), edited as u64, Reason::InconsistentCheckpoint);
    }

    #[test]
    fn signatures_and_seals_are_checked(specs in prop::collection::vec(step_spec(), 2..10), bit in 0usize..512) {
        let fx = build_log(&specs);
        let n = fx.entries.len();
        // A flipped bit in an agent signature.
        let signed = fx.entries.iter().position(|e| matches!(&e.record, LogRecord::Step(r) if r.signature.is_some()));
        if let Some(k) = signed {
            let mut entries = fx.entries.clone();
            let LogRecord::Step(rec) = &mut entries[k].record else { unreachable!() };
                        if let Some(sig) = rec.signature.as_mut() { sig.signature[bit / 8] ^= 1 << (bit % 8); }
            assert_log_fails_at(&verify_log(&fx, &entries, &[n]), k as u64, Reason::BadSignature);
            // A stripped signature: the step still declares its signer.
            let mut stripped = fx.entries.clone();
            let LogRecord::Step(rec) = &mut stripped[k].record else { unreachable!() };
            rec.signature = None;
            assert_log_fails_at(&verify_log(&fx, &stripped, &[n]), k as u64, Reason::BadSignature);
        }
        // A step of the sealed session appended after its seal.
        let mut entries = fx.entries.clone();
        let s1_steps: Vec<&StepRecord> = entries.iter().filter_map(|e| match &e.record { LogRecord::Step(r) if r.step.session_id == "s1" => Some(r), _ => None }).collect();
        let last = s1_steps.last().map(|r| (*r).clone());
        if let Some(last) = last {
            let mut extra = StepRecord::new(make_step("s1", last.step.step_index + 1, &specs[0]), &[1; 32], last.hash);
            extra.signature = None;
            entries.push(LogEntry { seq: n as u64, logged_at: logged(n as u64), record: LogRecord::Step(extra) });
            assert_log_fails_at(&verify_log(&fx, &entries, &[]), n as u64, Reason::StepAfterSeal);
        }
    }
}

/// Seed 004: a signed trace in the log verifies only under a key
/// registered for its agent, over exactly its components and level.
#[test]
fn signed_traces_are_checked_in_the_log() {
    use base64::Engine as _;
    let fx = build_log(&[]);
    let agent = SigningKey::from_bytes(&[3; 32]);
    let push = |entries: &mut Vec<LogEntry>, op: OpRecord| {
        let seq = entries.len() as u64;
        entries.push(LogEntry {
            seq,
            logged_at: logged(seq),
            record: LogRecord::Op {
                hash: op.hash(),
                record: op,
            },
        });
    };
    let trace = |priority: u64, key: &SigningKey| {
        let mut v = json!({
            "trace_id": "trace-1", "agent_id_hash": "e8821136df22",
            "started_at": "2026-02-08T12:34:56.123Z", "trace_level": "generic",
            "components": [{"component_type": "observation", "event_type": "THOUGHT_START",
                            "timestamp": "2026-02-08T12:34:56.123Z", "data": {"task_priority": 5}}],
            "signature": "A".repeat(86) + "==", "signature_key_id": agent_key_id(&agent.verifying_key()),
        });
        let payload = cairn_core::trace::CompleteTrace::parse(&v)
            .unwrap()
            .signed_payload();
        v["signature"] =
            json!(base64::engine::general_purpose::STANDARD.encode(key.sign(&payload).to_bytes()));
        v["components"][0]["data"]["task_priority"] = json!(priority);
        cairn_core::log::SignedTraceRecord {
            org_id: ORG.into(),
            session_id: "trace-1".into(),
            trace: cairn_core::trace::CompleteTrace::parse(&v).unwrap(),
        }
    };
    let mut entries = fx.entries.clone();
    push(
        &mut entries,
        OpRecord::KeyRegistration(KeyRegistration {
            org_id: ORG.into(),
            agent_id: "e8821136df22".into(),
            key_id: agent_key_id(&agent.verifying_key()),
            public_key: agent.verifying_key(),
            registered_at: t(1),
        }),
    );
    let mut good = entries.clone();
    push(&mut good, OpRecord::SignedTrace(trace(5, &agent)));
    assert!(verify_log(&fx, &good, &[]).verified);
    let at = entries.len() as u64;
    for forged in [
        trace(6, &agent),
        trace(5, &SigningKey::from_bytes(&[4; 32])),
    ] {
        let mut bad = entries.clone();
        push(&mut bad, OpRecord::SignedTrace(forged));
        assert_log_fails_at(&verify_log(&fx, &bad, &[]), at, Reason::BadSignature);
    }
    let mut unregistered = fx.entries.clone();
    push(&mut unregistered, OpRecord::SignedTrace(trace(5, &agent)));
    assert_log_fails_at(
        &verify_log(&fx, &unregistered, &[]),
        fx.entries.len() as u64,
        Reason::BadSignature,
    );

    // Erasure (FORMAT.md 8): the trace's view withheld, its hash kept, and
    // a later trace-erasure record naming it by seq and hash.
    let withhold = |entries: &mut Vec<LogEntry>, seq: u64| {
        let entry = &mut entries[seq as usize];
        entry.record = LogRecord::ErasedTrace {
            hash: entry.record_hash(),
        };
    };
    let erasure = |trace_seq: u64, trace_hash: cairn_core::Hash| {
        OpRecord::TraceErasure(cairn_core::log::TraceErasureRecord {
            org_id: ORG.into(),
            session_id: "trace-1".into(),
            trace_id: "trace-1".into(),
            trace_seq,
            trace_hash,
            reason: "request".into(),
            actor: "key-1".into(),
            erased_at: t(3),
        })
    };
    let hash = good[at as usize].record_hash();
    let mut erased = good.clone();
    withhold(&mut erased, at);
    push(&mut erased, erasure(at, hash));
    assert!(verify_log(&fx, &erased, &[]).verified);
    // A bundle line carries the hash where the view was, and reads back.
    let line = cairn_core::bundle::encode_entry(&erased[at as usize], None);
    assert!(line.contains(r#""view":null"#), "{line}");
    let (back, _) = cairn_core::bundle::decode_entry(&line).unwrap();
    assert_eq!(back, erased[at as usize]);
    // Only a signed trace's view is ever withheld.
    let key_line = cairn_core::bundle::encode_entry(&erased[at as usize - 1], None);
    let nulled = key_line.replace(
        &serde_json::to_string(&match &erased[at as usize - 1].record {
            LogRecord::Op { record, .. } => record.to_view(),
            _ => unreachable!(),
        })
        .unwrap(),
        "null",
    );
    assert!(
        cairn_core::bundle::decode_entry(&nulled).is_err(),
        "{nulled}"
    );
    // A courier withholds a trace no record erased: the leaf is unchanged,
    // the verdict is not.
    let mut hidden = good.clone();
    withhold(&mut hidden, at);
    assert_log_fails_at(&verify_log(&fx, &hidden, &[]), at, Reason::ErasureMismatch);
    // A trace-erasure by another hash, of a trace shown whole, of a record
    // that is no trace, of a later seq, or twice.
    let next = at + 1;
    for (name, build) in [
        (
            "another hash",
            (at, cairn_core::Hash::sha256(b"other"), true),
        ),
        ("shown whole", (at, hash, false)),
        ("a key registration", (at - 1, hash, true)),
        ("itself", (next, hash, true)),
    ] {
        let (trace_seq, trace_hash, withheld) = build;
        let mut bad = good.clone();
        if withheld {
            withhold(&mut bad, at);
        }
        push(&mut bad, erasure(trace_seq, trace_hash));
        let verdict = verify_log(&fx, &bad, &[]);
        assert!(!verdict.verified, "{name}");
        assert_eq!(
            verdict.failure.as_ref().map(|f| (f.reason, f.at.seq)),
            Some((Reason::ErasureMismatch, Some(next))),
            "{name}"
        );
    }
    let mut twice = erased.clone();
    push(&mut twice, erasure(at, hash));
    assert_log_fails_at(
        &verify_log(&fx, &twice, &[]),
        next + 1,
        Reason::ErasureMismatch,
    );

    // A mirror read the trace whole before it was withheld: it accepts
    // the trace-erasure record naming it, once, and nothing else a complete
    // log would refuse.
    let mirrored = |entries: &[LogEntry]| {
        let mut verifier =
            cairn_core::verify::LogVerifier::mirroring(SERVER, ORG, vec![fx.server.verifier()]);
        entries.iter().all(|e| verifier.push(e))
    };
    let mut read_whole = good.clone();
    push(&mut read_whole, erasure(at, hash));
    assert!(mirrored(&read_whole));
    let mut again = read_whole.clone();
    push(&mut again, erasure(at, hash));
    assert!(!mirrored(&again), "named twice");
    let mut not_a_trace = good.clone();
    push(&mut not_a_trace, erasure(at - 1, hash));
    assert!(!mirrored(&not_a_trace), "a key registration named");
}

/// Seed 001's continuity: a session may continue a sealed one by naming
/// its final hash, once; any other predecessor is caught.
#[test]
fn predecessors_must_be_sealed_sessions_continued_once() {
    let fx = build_log(&[StepSpec {
        kind: "plan",
        content: "p".into(),
        number: None,
        confidence: None,
        flagged: false,
    }]);
    let final_hash = fx
        .entries
        .iter()
        .find_map(|e| match &e.record {
            LogRecord::Op {
                record: OpRecord::Seal(seal),
                ..
            } => Some(seal.final_hash),
            _ => None,
        })
        .unwrap();
    let start = |entries: &[LogEntry], id: &str, predecessor: Hash| {
        let mut h = header(id);
        h.predecessor = Some(predecessor);
        let op = OpRecord::SessionStart(h);
        LogEntry {
            seq: entries.len() as u64,
            logged_at: logged(entries.len() as u64),
            record: LogRecord::Op {
                hash: op.hash(),
                record: op,
            },
        }
    };
    let mut entries = fx.entries.clone();
    entries.push(start(&entries, "next", final_hash));
    assert!(verify_log(&fx, &entries, &[]).verified);

    let mut twice = entries.clone();
    twice.push(start(&twice, "again", final_hash));
    assert_log_fails_at(
        &verify_log(&fx, &twice, &[]),
        entries.len() as u64,
        Reason::PredecessorMismatch,
    );
    let mut unknown = fx.entries.clone();
    unknown.push(start(&unknown, "next", Hash::sha256(b"no such session")));
    assert_log_fails_at(
        &verify_log(&fx, &unknown, &[]),
        fx.entries.len() as u64,
        Reason::PredecessorMismatch,
    );
}

#[test]
fn a_checkpoint_by_another_key_is_refused() {
    let fx = build_log(&[StepSpec {
        kind: "plan",
        content: "p".into(),
        number: None,
        confidence: None,
        flagged: false,
    }]);
    let stranger = NoteSigner::from_seed(SERVER, &[1; 32]).unwrap();
    let forged = org_checkpoint(SERVER, ORG, 1, Hash::ZERO)
        .sign(&stranger)
        .unwrap();
    assert!(
        verify_checkpoint(&forged, &format!("{SERVER}/{ORG}"), &[fx.server.verifier()]).is_err()
    );
}

/// A checkpoint's log-keys line (FORMAT.md 7.1, 7.10) is compared with the
/// log-key records below its size: by a verifier of the whole log (at the
/// end, no position) and by a monitor (once it has read every entry
/// below the size). This log has none: a line counting one misstates it.
#[test]
fn a_checkpoint_that_miscounts_the_log_keys_is_inconsistent() {
    use cairn_core::merkle::{MemoryTree, SubtreeHashes as _};
    use cairn_core::verify::LogVerifier;
    let spec = StepSpec {
        kind: "plan",
        content: "p".into(),
        number: None,
        confidence: None,
        flagged: false,
    };
    let fx = build_log(&vec![spec; 3]);
    let mut tree = MemoryTree::new();
    fx.entries.iter().for_each(|e| tree.push(e.leaf_hash()));
    let n = tree.size();
    let origin = format!("{SERVER}/{ORG}");
    let note = |count: u64| {
        org_checkpoint(SERVER, ORG, n, tree.root_at(n))
            .with_log_key_count(count)
            .sign(&fx.server)
            .unwrap()
    };
    for (count, expected) in [(0, None), (1, Some(Reason::InconsistentCheckpoint))] {
        let cp = verify_checkpoint(&note(count), &origin, &[fx.server.verifier()]).unwrap();
        let mut whole = LogVerifier::new(SERVER, ORG, vec![fx.server.verifier()]);
        whole.expect_checkpoint(&cp);
        fx.entries.iter().for_each(|e| assert!(whole.push(e)));
        let verdict = whole.finish();
        assert_eq!(
            verdict.failure.as_ref().map(|f| f.reason),
            expected,
            "{count}: {verdict:?}"
        );
        if let Some(failure) = &verdict.failure {
            assert_eq!(failure.at, cairn_core::verify::Location::default());
        }
        let mut monitor = LogVerifier::mirroring(SERVER, ORG, vec![fx.server.verifier()]);
        fx.entries.iter().for_each(|e| assert!(monitor.push(e)));
        assert_eq!(
            monitor.check_checkpoint_keys_now(&note(count), n),
            expected.is_none()
        );
        assert_eq!(monitor.failure().map(|f| f.reason), expected, "{count}");
    }
}
