//! Property tests: every edit of any field, reordering, insertion,
//! deletion or truncation of a session chain or an org log is detected at
//! the exact first affected record with the right reason; redacted records
//! still verify; Merkle proofs verify for every pair of sizes and fail when
//! altered.

use cairn_core::checkpoint::verify_checkpoint;
use cairn_core::commit::{
    AgentSignature, FIELDS, Field, Opening, StepRecord, agent_key_id, chain_hash, genesis_hash,
    session_leaf_data, signed_step_message,
};
use cairn_core::log::{KeyRegistration, LogEntry, LogRecord, OpRecord, SealRecord, org_checkpoint};
use cairn_core::merkle::{
    self, Frontier, MemoryTree, SubtreeHashes, consistency_proof, inclusion_proof, leaf_hash,
    verify_consistency, verify_inclusion,
};
use cairn_core::note::NoteSigner;
use cairn_core::record::{Links, Profile, SessionHeader, Status, Step};
use cairn_core::verify::{AgentKeys, LogVerifier, Reason, SessionVerifier, Verdict};
use cairn_core::{Hash, Timestamp};
use ed25519_dalek::{Signer as _, SigningKey};
use proptest::prelude::*;
use serde_json::json;

pub(crate) const ORG: &str = "acme";
pub(crate) const SERVER: &str = "cairn.test";

fn t(micros: i64) -> Timestamp {
    Timestamp::from_micros(1_736_937_000_000_000 + micros).unwrap()
}

/// When the fixture's server logged entry `seq`: increasing, and within a
/// second of every step's `created_at`.
pub(crate) fn logged(seq: u64) -> Timestamp {
    t(500 + seq as i64 * 1_000)
}

fn header(session: &str) -> SessionHeader {
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

fn make_step(session: &str, index: u64, spec: &StepSpec) -> Step {
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

fn build_chain(session: &str, specs: &[StepSpec]) -> Vec<StepRecord> {
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

fn verify_session(records: &[StepRecord], expected: Option<u64>) -> Verdict {
    let mut verifier = SessionVerifier::new(&header("s1"), AgentKeys::new());
    for rec in records {
        if !verifier.push(rec) {
            break;
        }
    }
    verifier.finish(expected)
}

fn verify_session_at(
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

fn assert_fails_at(verdict: &Verdict, index: u64, reason: Reason) {
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

/// Changes the value of one field of a step, so that it differs.
fn edit_field(step: &mut Step, field: Field) {
    match field {
        Field::TraceId => step.trace_id.push('x'),
        Field::OrgId => step.org_id.push('x'),
        Field::AgentId => step.agent_id.push('x'),
        Field::SessionId => step.session_id.push('x'),
        Field::StepIndex => step.step_index += 1,
        Field::StepType => step.kind = cairn_core::kind::StepKind::Summary,
        Field::StepTypeOriginal => step.kind_label.push(' '),
        Field::Content => step.content.get_or_insert_default().push('.'),
        Field::InputData => step.input = Some(json!({"sql": "DROP TABLE orders"})),
        Field::OutputData => step.output = None,
        Field::Confidence => {
            step.confidence = Some(
                step.confidence
                    .map_or(0.5, |c| if c > 0.5 { c - 0.25 } else { c + 0.25 }),
            )
        }
        Field::DurationMs => step.duration_ms = Some(step.duration_ms.map_or(1, |d| d + 1)),
        Field::TokenCount => step.token_count = step.token_count.map(|n| n + 1),
        Field::Model => step.model = Some("gpt-4o-mini".into()),
        Field::Metadata => step.metadata = Some(json!({"k": "edited"})),
        Field::CreatedAt => {
            step.created_at = Timestamp::from_micros(step.created_at.as_micros() + 1).unwrap()
        }
        Field::TurnId => step.turn_id = Some("turn-x".into()),
        Field::TurnStep => step.turn_step = step.turn_step.map(|n| n + 7),
        Field::TaskId => step.task_id = None,
        Field::Links => step.links.corrects = Some("trace-0".into()),
        Field::Status => {
            step.status = match step.status {
                Status::Ok => Status::Flagged,
                Status::Flagged => Status::Ok,
            }
        }
        Field::SignerKeyId => step.signer_key_id = Some("agent-000000000000".into()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn untouched_chains_verify(specs in prop::collection::vec(step_spec(), 1..12)) {
        let chain = build_chain("s1", &specs);
        let verdict = verify_session(&chain, Some(chain.len() as u64));
        prop_assert!(verdict.verified, "{:?}", verdict.failure);
        prop_assert_eq!(verdict.records_checked, chain.len() as u64);
    }

    /// The digest's commitments (framed in place, in a buffer each thread
    /// keeps) are `commit_field` of each field's canonical value, whatever
    /// the size of the values committed before them on the thread.
    #[test]
    fn commitments_are_each_fields_framed_value(specs in prop::collection::vec(step_spec(), 1..6)) {
        for rec in build_chain("s1", &specs) {
            let commitments = cairn_core::commit::field_commitments(&rec.step, &rec.openings);
            for field in FIELDS {
                let Opening::Revealed(salt) = rec.openings.get(field) else {
                    continue;
                };
                let mut value = Vec::new();
                cairn_core::commit::write_field_value(&rec.step, field, &mut value);
                prop_assert_eq!(
                    commitments[field.position()],
                    cairn_core::commit::commit_field(salt, &value),
                    "{:?}", field
                );
            }
            prop_assert_eq!(
                cairn_core::commit::digest_of_commitments(&commitments),
                rec.digest
            );
        }
    }

    #[test]
    fn every_field_edit_is_caught_at_its_record(
        specs in prop::collection::vec(step_spec(), 1..10),
        at in any::<prop::sample::Index>(),
        field in prop::sample::select(FIELDS.to_vec()),
    ) {
        let mut chain = build_chain("s1", &specs);
        let k = at.index(chain.len());
        edit_field(&mut chain[k].step, field);
        let verdict = verify_session(&chain, Some(chain.len() as u64));
        let reason = match field {
            Field::StepIndex => Reason::SequenceGap,
            Field::SessionId => Reason::MalformedRecord,
            _ => Reason::DigestMismatch,
        };
        assert_fails_at(&verdict, k as u64, reason);
    }

    #[test]
    fn hash_and_salt_edits_are_caught_at_their_record(
        specs in prop::collection::vec(step_spec(), 1..10),
        at in any::<prop::sample::Index>(),
        what in 0usize..4,
        bit in 0usize..256,
    ) {
        let mut chain = build_chain("s1", &specs);
        let k = at.index(chain.len());
        let flip = |h: &mut Hash| h.0[bit / 8] ^= 1 << (bit % 8);
        let reason = match what {
            0 => { flip(&mut chain[k].digest); Reason::DigestMismatch }
            1 => { flip(&mut chain[k].prev_hash); Reason::PrevHashMismatch }
            2 => { flip(&mut chain[k].hash); Reason::ChainHashMismatch }
            _ => {
                let field = FIELDS[bit % FIELDS.len()];
                if let Opening::Revealed(salt) = &mut chain[k].openings.0[field.position()] {
                    salt[bit % 16] ^= 1;
                }
                Reason::DigestMismatch
            }
        };
        let verdict = verify_session(&chain, Some(chain.len() as u64));
        assert_fails_at(&verdict, k as u64, reason);
    }

    #[test]
    fn a_recomputed_edit_is_caught_at_the_next_link(
        specs in prop::collection::vec(step_spec(), 2..10),
        at in any::<prop::sample::Index>(),
    ) {
        // An attacker edits step k and recomputes its digest and chain hash:
        // step k verifies on its own, the link from step k+1 does not.
        let mut chain = build_chain("s1", &specs);
        let k = at.index(chain.len() - 1);
        chain[k].step.content = Some("rewritten".into());
        chain[k].digest = chain[k].recompute_digest();
        chain[k].hash = chain_hash(&chain[k].prev_hash, &chain[k].digest, k as u64, chain[k].step.created_at);
        let verdict = verify_session(&chain, Some(chain.len() as u64));
        assert_fails_at(&verdict, k as u64 + 1, Reason::PrevHashMismatch);
    }

    #[test]
    fn reorder_delete_insert_truncate_are_caught(
        specs in prop::collection::vec(step_spec(), 2..10),
        at in any::<prop::sample::Index>(),
        source in any::<prop::sample::Index>(),
        op in 0usize..4,
    ) {
        let mut chain = build_chain("s1", &specs);
        let n = chain.len();
        let k = at.index(n - 1);
        let (expected_index, reason) = match op {
            0 => { chain.swap(k, k + 1); (k, Reason::SequenceGap) }
            1 => {
                chain.remove(k);
                (k, Reason::SequenceGap)
            }
            2 => {
                // Replay of an existing record at position k + 1.
                let j = source.index(n);
                let copy = chain[j].clone();
                chain.insert(k + 1, copy);
                // It only passes as position k + 1 if it is record k + 1 itself.
                let first_bad = if j == k + 1 { k + 2 } else { k + 1 };
                (first_bad, Reason::SequenceGap)
            }
            _ => { chain.truncate(k + 1); (k + 1, Reason::MissingRecord) }
        };
        let verdict = verify_session(&chain, Some(n as u64));
        let failure = verdict.failure.clone().expect("tampering must be detected");
        prop_assert_eq!((failure.reason, failure.at.step_index), (reason, Some(expected_index as u64)), "{}", failure.detail);
    }

    #[test]
    fn redacted_records_still_verify_and_reveal_nothing(
        specs in prop::collection::vec(step_spec(), 1..8),
        level in 0usize..3,
        at in any::<prop::sample::Index>(),
    ) {
        use cairn_core::detail::DetailLevel;
        let level = [DetailLevel::Generic, DetailLevel::Detailed, DetailLevel::Full][level];
        let hide: Vec<bool> = FIELDS.iter().map(|f| DetailLevel::of(*f) > level).collect();
        let original = build_chain("s1", &specs);
        let mut chain = original.clone();
        for rec in &mut chain {
            rec.redact(level).unwrap();
        }
        let verdict = verify_session_at(&chain, Some(chain.len() as u64), level);
        prop_assert!(verdict.verified, "{:?}", verdict.failure);
        let k = at.index(chain.len());
        if hide[Field::Content.position()] {
            prop_assert_eq!(&chain[k].step.content, &None);
            // The commitment is not the hash of the value alone: without the
            // salt it reveals nothing testable.
            let Opening::Hidden(c) = chain[k].openings.get(Field::Content) else { unreachable!() };
            prop_assert_ne!(*c, Hash::sha256(original[k].step.content.as_deref().unwrap_or("").as_bytes()));
        }
        // A visible field of a redacted record is still bound.
        let visible = FIELDS.iter().zip(&hide).find(|(f, h)| !**h && !f.always_disclosed() && **f != Field::OutputData);
        if let Some((field, _)) = visible {
            edit_field(&mut chain[k].step, *field);
            assert_fails_at(&verify_session_at(&chain, Some(chain.len() as u64), level), k as u64, Reason::DigestMismatch);
        }
    }
}

#[test]
fn hidden_chain_inputs_cannot_be_hidden() {
    let mut rec = build_chain(
        "s1",
        &[StepSpec {
            kind: "plan",
            content: "x".into(),
            number: None,
            confidence: None,
            flagged: false,
        }],
    )
    .remove(0);
    for field in [
        Field::StepIndex,
        Field::CreatedAt,
        Field::SessionId,
        Field::OrgId,
        Field::StepType,
        Field::Status,
    ] {
        assert!(rec.hide(field).is_err());
    }
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

fn verify_log(fx: &Fixture, entries: &[LogEntry], checkpoint_sizes: &[usize]) -> Verdict {
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
    for e in entries {
        if !verifier.push(e) {
            break;
        }
    }
    verifier.finish()
}

fn assert_log_fails_at(verdict: &Verdict, seq: u64, reason: Reason) {
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

proptest! {
    /// A session shown at any detail level verifies, shows exactly the
    /// fields of its level, and a hidden field cannot be put back.
    #[test]
    fn every_detail_level_verifies(specs in prop::collection::vec(step_spec(), 1..8)) {
        use cairn_core::detail::DetailLevel;
        for level in [DetailLevel::Generic, DetailLevel::Detailed, DetailLevel::Full] {
            let mut records = build_chain("s1", &specs);
            for r in &mut records {
                r.redact(level).unwrap();
                for field in FIELDS {
                    prop_assert_eq!(r.is_revealed(field), DetailLevel::of(field) <= level);
                }
            }
            let verdict = verify_session_at(&records, Some(records.len() as u64), level);
            prop_assert!(verdict.verified, "{:?}: {:?}", level, verdict.failure);
            // A level's view verifies only at that level.
            if level < DetailLevel::Full {
                // Detailed hides only erasable payload fields, which full
                // detail then takes for unrecorded erasures.
                let expected = if level == DetailLevel::Generic { Reason::MalformedRecord } else { Reason::ErasureMismatch };
                prop_assert_eq!(
                    verify_session(&records, None).failure.map(|f| f.reason),
                    Some(expected)
                );
                records[0].step.content = Some("put back".into());
                prop_assert_eq!(
                    verify_session_at(&records, None, level).failure.map(|f| f.reason),
                    Some(Reason::DigestMismatch)
                );
            }
        }
    }
}

/// An erased (hidden) field is blank; a value written into it afterwards
/// is covered by nothing and must not pass. An erasure needs its record.
#[test]
fn a_hidden_field_carrying_a_value_is_refused() {
    use cairn_core::detail::DetailLevel;
    use cairn_core::log::ErasureRecord;
    let specs: Vec<StepSpec> = (0..3)
        .map(|i| StepSpec {
            kind: "Reasoning",
            content: format!("step {i}"),
            number: None,
            confidence: Some(0.5),
            flagged: false,
        })
        .collect();
    let mut records = build_chain("s1", &specs);
    let mut commitments = Vec::new();
    for field in [Field::Content, Field::Metadata] {
        records[1].hide(field).unwrap();
        let Opening::Hidden(c) = records[1].openings.get(field) else {
            unreachable!()
        };
        commitments.push((field, *c));
    }
    let erasure = ErasureRecord {
        org_id: ORG.into(),
        session_id: "s1".into(),
        step_index: 1,
        trace_id: records[1].step.trace_id.clone(),
        commitments,
        reason: "request".into(),
        actor: "dpo".into(),
        erased_at: t(5_000),
    };
    let with_record = |records: &[StepRecord], erasure: Option<&ErasureRecord>| {
        let mut verifier = SessionVerifier::new(&header("s1"), AgentKeys::new());
        verifier.expect_erasures(erasure.map(|e| (10, e.clone())));
        for r in records {
            if !verifier.push(r) {
                break;
            }
        }
        verifier.finish(Some(3))
    };
    assert!(
        with_record(&records, Some(&erasure)).verified,
        "erasure keeps it valid"
    );
    assert_fails_at(&with_record(&records, None), 1, Reason::ErasureMismatch);
    let mut other = erasure.clone();
    other.commitments.pop();
    assert_fails_at(
        &with_record(&records, Some(&other)),
        1,
        Reason::ErasureMismatch,
    );
    records[1].step.content = Some("forged after the erasure".into());
    assert_fails_at(
        &with_record(&records, Some(&erasure)),
        1,
        Reason::DigestMismatch,
    );
    // A field that erasure cannot remove, hidden at full detail.
    let mut records = build_chain("s1", &specs);
    records[1].hide(Field::Confidence).unwrap();
    assert_fails_at(
        &verify_session(&records, Some(3)),
        1,
        Reason::MalformedRecord,
    );
    // At the generic level the model is hidden; a value put back is caught.
    let mut records = build_chain("s1", &specs);
    for r in &mut records {
        r.redact(DetailLevel::Generic).unwrap();
    }
    assert!(verify_session_at(&records, Some(3), DetailLevel::Generic).verified);
    records[2].step.model = Some("gpt-5".into());
    assert_fails_at(
        &verify_session_at(&records, Some(3), DetailLevel::Generic),
        2,
        Reason::DigestMismatch,
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

#[test]
fn strict_sessions_refuse_other_kinds() {
    let mut h = header("s1");
    h.profile = Profile::Strict;
    let step = make_step(
        "s1",
        0,
        &StepSpec {
            kind: "ToolCall",
            content: "x".into(),
            number: None,
            confidence: None,
            flagged: false,
        },
    );
    let rec = StepRecord::new(step, &[0; 32], genesis_hash(&h));
    let mut verifier = SessionVerifier::new(&h, AgentKeys::new());
    verifier.push(&rec);
    let verdict = verifier.finish(None);
    assert_eq!(
        verdict.failure.map(|f| f.reason),
        Some(Reason::ProfileViolation)
    );
}

/// Every inclusion and consistency proof for every pair of sizes up to 300
/// verifies; the state of an incremental tree matches at every size.
#[test]
fn every_proof_up_to_300_leaves_verifies() {
    const N: u64 = 300;
    let mut tree = MemoryTree::new();
    let mut frontier = Frontier::new();
    let mut roots = vec![merkle::empty_root()];
    for i in 0..N {
        let leaf = leaf_hash(&i.to_le_bytes());
        tree.push(leaf);
        frontier.push(leaf);
        roots.push(frontier.root());
        assert_eq!(frontier.root(), tree.root_at(i + 1));
    }
    for size in 1..=N {
        for index in 0..size {
            let proof = inclusion_proof(&tree, index, size).unwrap();
            let leaf = leaf_hash(&index.to_le_bytes());
            assert_eq!(
                verify_inclusion(&leaf, index, size, &proof, &roots[size as usize]),
                Ok(())
            );
        }
        for old in 1..=size {
            let proof = consistency_proof(&tree, old, size).unwrap();
            assert_eq!(
                verify_consistency(
                    old,
                    size,
                    &roots[old as usize],
                    &roots[size as usize],
                    &proof
                ),
                Ok(()),
                "{old}->{size}"
            );
        }
    }
}

proptest! {
    #[test]
    fn altered_proofs_fail(size in 2u64..300, a in any::<prop::sample::Index>(), b in any::<prop::sample::Index>(), bit in 0usize..256, op in 0usize..4) {
        let mut tree = MemoryTree::new();
        for i in 0..size {
            tree.push(leaf_hash(&i.to_le_bytes()));
        }
        let root = tree.root_at(size);
        let index = a.index(size as usize) as u64;
        let mut proof = inclusion_proof(&tree, index, size).unwrap();
        let alter = |proof: &mut Vec<Hash>| match op {
            0 if !proof.is_empty() => { let i = bit % proof.len(); proof[i].0[bit / 8] ^= 1 << (bit % 8); }
            1 if !proof.is_empty() => { proof.pop(); }
            2 => proof.push(Hash::sha256(b"extra")),
            _ if proof.len() > 1 => proof.swap(0, 1),
            _ => proof.push(Hash::ZERO),
        };
        alter(&mut proof);
        let leaf = leaf_hash(&index.to_le_bytes());
        prop_assert!(verify_inclusion(&leaf, index, size, &proof, &root).is_err());
        // A correct proof for another leaf or size does not pass either.
        let good = inclusion_proof(&tree, index, size).unwrap();
        prop_assert!(verify_inclusion(&leaf, (index + 1) % size, size, &good, &root).is_err());

        let old = (b.index(size as usize - 1) + 1) as u64;
        let mut cproof = consistency_proof(&tree, old, size).unwrap();
        if old != size {
            alter(&mut cproof);
            prop_assert!(verify_consistency(old, size, &tree.root_at(old), &root, &cproof).is_err());
        }
        prop_assert!(verify_consistency(old, size, &Hash::sha256(b"other"), &root, &consistency_proof(&tree, old, size).unwrap()).is_err());
    }
}
