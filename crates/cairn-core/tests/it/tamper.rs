//! The fixtures the tamper properties share (`session_tamper.rs`,
//! `log_tamper.rs`, and `bundle.rs`): generated steps, session chains, a
//! small signed org log, and the checks that a verdict fails at the
//! expected record with the expected reason.

use cairn_core::Timestamp;
use cairn_core::checkpoint::verify_checkpoint;
use cairn_core::commit::{
    AgentSignature, StepRecord, agent_key_id, genesis_hash, session_leaf_data, signed_step_message,
};
use cairn_core::log::{KeyRegistration, LogEntry, LogRecord, OpRecord, SealRecord, org_checkpoint};
use cairn_core::merkle::{Frontier, MemoryTree, SubtreeHashes, leaf_hash};
use cairn_core::note::NoteSigner;
use cairn_core::record::{Links, Profile, SessionHeader, Status, Step};
use cairn_core::verify::{AgentKeys, LogVerifier, Reason, SessionVerifier, Verdict};
use ed25519_dalek::{Signer as _, SigningKey};
use proptest::prelude::*;
use serde_json::json;

pub(crate) const ORG: &str = "acme";
pub(crate) const SERVER: &str = "cairn.test";

pub(crate) fn t(micros: i64) -> Timestamp {
    Timestamp::from_micros(1_736_937_000_000_000 + micros).unwrap()
}

/// When the fixture's server logged entry `seq`: increasing, and within a
/// second of every step's `created_at`.
pub(crate) fn logged(seq: u64) -> Timestamp {
    t(500 + seq as i64 * 1_000)
}

pub(crate) fn header(session: &str) -> SessionHeader {
    SessionHeader {
        org_id: ORG.into(),
        session_id: session.into(),
        agent_id: "analyst".into(),
        started_at: t(0),
        caller: "key-1".into(),
        profile: Profile::Standard,
        predecessor: None,
        full_consent: false,
        max_clock_skew_s: 300,
    }
}

/// What varies between generated steps.
#[derive(Debug, Clone)]
pub(crate) struct StepSpec {
    pub(crate) kind: &'static str,
    pub(crate) content: String,
    pub(crate) number: Option<u64>,
    pub(crate) confidence: Option<f64>,
    pub(crate) flagged: bool,
}

pub(crate) fn step_spec() -> impl Strategy<Value = StepSpec> {
    (
        prop::sample::select(vec![
            "Observation",
            "ToolCall",
            "Reasoning",
            "Decision",
            "plan",
            "analysis",
            "execute",
            "FinalAnswer",
            "[エラー]",
        ]),
        "\\PC{0,40}",
        prop::option::of(0u64..1_000_000),
        prop::option::of(0.0f64..=1.0),
        any::<bool>(),
    )
        .prop_map(|(kind, content, number, confidence, flagged)| StepSpec {
            kind,
            content,
            number,
            confidence,
            flagged,
        })
}

pub(crate) fn make_step(session: &str, index: u64, spec: &StepSpec) -> Step {
    let mut step = Step::new(
        format!("trace-{session}-{index}"),
        ORG,
        "analyst",
        session,
        index,
        spec.kind,
        t(1_000 * (index as i64 + 1)),
    )
    .unwrap();
    step.content = Some(spec.content.clone());
    step.input = spec.number.map(|n| json!({"sql": "SELECT 1", "n": n}));
    step.output = Some(json!([spec.content.len(), null, true]));
    step.confidence = spec.confidence;
    step.duration_ms = spec.number;
    step.token_count = Some(index * 10);
    step.model = Some("gpt-4o".into());
    step.metadata = Some(json!({"k": spec.kind}));
    step.turn_id = Some(format!("turn-{}", index / 3));
    step.turn_step = Some(index % 3);
    step.task_id = Some("task-1".into());
    step.links = Links {
        tool_call: Some(format!("tc-{index}")),
        ..Links::default()
    };
    step.status = if spec.flagged {
        Status::Flagged
    } else {
        Status::Ok
    };
    step
}

pub(crate) fn build_chain(session: &str, specs: &[StepSpec]) -> Vec<StepRecord> {
    let mut prev = genesis_hash(&header(session));
    specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let rec = StepRecord::new(make_step(session, i as u64, spec), &[i as u8; 32], prev);
            prev = rec.hash;
            rec
        })
        .collect()
}

pub(crate) fn verify_session(records: &[StepRecord], expected: Option<u64>) -> Verdict {
    let mut verifier = SessionVerifier::new(&header("s1"), AgentKeys::new());
    for rec in records {
        if !verifier.push(rec) {
            break;
        }
    }
    verifier.finish(expected)
}

pub(crate) fn verify_session_at(
    records: &[StepRecord],
    expected: Option<u64>,
    level: cairn_core::detail::DetailLevel,
) -> Verdict {
    let mut verifier = SessionVerifier::new(&header("s1"), AgentKeys::new()).at_level(level);
    for r in records {
        if !verifier.push(r) {
            break;
        }
    }
    verifier.finish(expected)
}

pub(crate) fn assert_fails_at(verdict: &Verdict, index: u64, reason: Reason) {
    let failure = verdict
        .failure
        .as_ref()
        .unwrap_or_else(|| panic!("expected {reason} at {index}, got a verified chain"));
    assert_eq!(
        (failure.reason, failure.at.step_index),
        (reason, Some(index)),
        "{}",
        failure.detail
    );
    assert!(!verdict.verified);
    assert_eq!(verdict.records_checked, index + 1);
}

/// A small org log: two interleaved sessions, an agent key, signed steps,
/// a seal, and signed checkpoints at every size.
pub(crate) struct Fixture {
    pub(crate) entries: Vec<LogEntry>,
    pub(crate) server: NoteSigner,
    /// Signed checkpoint notes, one per log size 1..=n.
    pub(crate) checkpoints: Vec<String>,
}

pub(crate) fn build_log(specs: &[StepSpec]) -> Fixture {
    let server = NoteSigner::from_seed(SERVER, &[42; 32]).unwrap();
    let agent = SigningKey::from_bytes(&[7; 32]);
    let mut entries = Vec::new();
    let push_op = |entries: &mut Vec<LogEntry>, op: OpRecord| {
        let seq = entries.len() as u64;
        let hash = op.hash();
        entries.push(LogEntry {
            seq,
            logged_at: logged(seq),
            record: LogRecord::Op { record: op, hash },
        });
    };
    push_op(
        &mut entries,
        OpRecord::KeyRegistration(KeyRegistration {
            org_id: ORG.into(),
            agent_id: "analyst".into(),
            key_id: agent_key_id(&agent.verifying_key()),
            public_key: agent.verifying_key(),
            registered_at: t(0),
        }),
    );
    push_op(&mut entries, OpRecord::SessionStart(header("s1")));
    push_op(&mut entries, OpRecord::SessionStart(header("s2")));
    let mut heads = [genesis_hash(&header("s1")), genesis_hash(&header("s2"))];
    let mut counts = [0u64, 0];
    let mut trees = [Frontier::new(), Frontier::new()];
    for (i, spec) in specs.iter().enumerate() {
        let s = i % 2;
        let session = ["s1", "s2"][s];
        let mut step = make_step(session, counts[s], spec);
        if spec.flagged {
            step.signer_key_id = Some(agent_key_id(&agent.verifying_key()));
        }
        let mut rec = StepRecord::new(step, &[i as u8; 32], heads[s]);
        if spec.flagged {
            rec.signature = Some(AgentSignature {
                key_id: agent_key_id(&agent.verifying_key()),
                signature: agent.sign(&signed_step_message(&rec.digest)).to_bytes(),
            });
        }
        heads[s] = rec.hash;
        trees[s].push(leaf_hash(&session_leaf_data(counts[s], &rec.hash)));
        counts[s] += 1;
        let seq = entries.len() as u64;
        entries.push(LogEntry {
            seq,
            logged_at: logged(seq),
            record: LogRecord::Step(rec),
        });
    }
    let seal = SealRecord {
        org_id: ORG.into(),
        session_id: "s1".into(),
        step_count: counts[0],
        session_root: trees[0].root(),
        final_hash: heads[0],
        sealed_at: t(10_000_000),
        note: String::new(),
    }
    .sign(&server, &format!("{SERVER}/{ORG}"))
    .unwrap();
    push_op(&mut entries, OpRecord::Seal(seal));
    let mut tree = MemoryTree::new();
    let mut checkpoints = Vec::new();
    for e in &entries {
        tree.push(e.leaf_hash());
        let cp = org_checkpoint(SERVER, ORG, tree.size(), tree.root_at(tree.size()));
        checkpoints.push(cp.sign(&server).unwrap());
    }
    Fixture {
        entries,
        server,
        checkpoints,
    }
}

pub(crate) fn verify_log(
    fx: &Fixture,
    entries: &[LogEntry],
    checkpoint_sizes: &[usize],
) -> Verdict {
    let verifier = || {
        let mut verifier = LogVerifier::new(SERVER, ORG, vec![fx.server.verifier()]);
        for &size in checkpoint_sizes {
            let cp = verify_checkpoint(
                &fx.checkpoints[size - 1],
                &format!("{SERVER}/{ORG}"),
                &[fx.server.verifier()],
            )
            .unwrap();
            verifier.expect_checkpoint(&cp);
        }
        verifier
    };
    let mut full = verifier();
    for e in entries {
        if !full.push(e) {
            break;
        }
    }
    let verdict = full.finish();
    // A store's verifier recomputes each digest on its own and leaves out
    // the payload of a step whose digest recomputes (no field hidden):
    // the verdict must be the same, whatever the tampering.
    let mut given_digests = verifier();
    for e in entries {
        let (entry, digest) = without_payload_if_digest_holds(e);
        if !given_digests.push_with_digest(&entry, digest) {
            break;
        }
    }
    assert_eq!(
        given_digests.finish(),
        verdict,
        "a verifier given digests disagrees"
    );
    verdict
}

/// `entry` with its digest recomputed, and its payload blanked if that
/// digest is the recorded one and no field is hidden.
fn without_payload_if_digest_holds(entry: &LogEntry) -> (LogEntry, Option<cairn_core::Hash>) {
    let LogRecord::Step(rec) = &entry.record else {
        return (entry.clone(), None);
    };
    let digest = rec.recompute_digest();
    let mut entry = entry.clone();
    let all_revealed = cairn_core::commit::FIELDS
        .into_iter()
        .all(|f| rec.is_revealed(f));
    if digest == rec.digest
        && all_revealed
        && let LogRecord::Step(rec) = &mut entry.record
    {
        rec.step.blank_payload();
    }
    (entry, Some(digest))
}

pub(crate) fn assert_log_fails_at(verdict: &Verdict, seq: u64, reason: Reason) {
    let failure = verdict
        .failure
        .as_ref()
        .unwrap_or_else(|| panic!("expected {reason} at seq {seq}"));
    assert_eq!(
        (failure.reason, failure.at.seq),
        (reason, Some(seq)),
        "{}",
        failure.detail
    );
}
