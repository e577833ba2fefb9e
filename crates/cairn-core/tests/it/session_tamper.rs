//! Session-chain tampering: every edit of any field, hash or salt,
//! reordering, insertion, deletion or truncation of a session chain is
//! detected at the exact first affected record with the right reason;
//! redacted records and every detail level still verify, and a hidden
//! field cannot carry a value or hide a chain input.

use crate::tamper::{
    ORG, StepSpec, assert_fails_at, build_chain, header, make_step, step_spec, t, verify_session,
    verify_session_at,
};
use cairn_core::commit::{FIELDS, Field, Opening, StepRecord, chain_hash, genesis_hash};
use cairn_core::record::{Profile, Status, Step};
use cairn_core::verify::{AgentKeys, Reason, SessionVerifier};
use cairn_core::{Hash, Timestamp};
use proptest::prelude::*;
use serde_json::json;

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
