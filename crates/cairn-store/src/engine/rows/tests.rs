//! A verifier's reading of step rows (`RawStep::parse_for_verification`)
//! against the full parse: the same digest and the same verdict for every
//! row, whichever way it took.

use super::*;
use proptest::prelude::*;
use serde_json::{Value, json};

/// A step's columns as the store writes them (owned; [`Row::raw`]
/// borrows them as a backend's row would).
struct Row {
    record: StepRecord,
    seed: [u8; 32],
    input: Option<String>,
    output: Option<String>,
    metadata: Option<String>,
    links: Option<String>,
    hidden: Option<String>,
    digest: Vec<u8>,
}

impl Row {
    fn written(step: Step) -> Row {
        let seed = [7u8; 32];
        let record = StepRecord::new(step, &seed, Hash([1; 32]));
        Row {
            input: json_text(&record.step.input),
            output: json_text(&record.step.output),
            metadata: json_text(&record.step.metadata),
            links: links_text(&record.step.links),
            hidden: None,
            digest: record.digest.0.to_vec(),
            record,
            seed,
        }
    }

    fn raw(&self) -> RawStep<'_> {
        let s = &self.record.step;
        RawStep {
            seq: 12,
            logged_at: s.created_at.as_micros(),
            org_id: &s.org_id,
            session_id: &s.session_id,
            step_index: s.step_index as i64,
            trace_id: &s.trace_id,
            agent_id: &s.agent_id,
            kind: s.kind.as_str(),
            kind_label: &s.kind_label,
            content: s.content.as_deref(),
            input: self.input.as_deref(),
            output: self.output.as_deref(),
            confidence: s.confidence,
            duration_ms: s.duration_ms.map(|v| v as i64),
            token_count: s.token_count.map(|v| v as i64),
            model: s.model.as_deref(),
            metadata: self.metadata.as_deref(),
            created_at: s.created_at.as_micros(),
            turn_id: s.turn_id.as_deref(),
            turn_step: s.turn_step.map(|v| v as i64),
            task_id: s.task_id.as_deref(),
            links: self.links.as_deref(),
            status: s.status.as_str(),
            seed: Some(&self.seed),
            salts: None,
            digest: &self.digest,
            prev_hash: &self.record.prev_hash.0,
            hash: &self.record.hash.0,
            signer_key_id: s.signer_key_id.as_deref(),
            signature: None,
            has_embedding: false,
            erased: false,
            hidden: self.hidden.as_deref(),
        }
    }
}

fn step() -> Step {
    let at = Timestamp::from_micros(1_700_000_000_123_456).unwrap();
    let mut step = Step::new("trace-1", "acme", "analyst", "s1", 3, "ToolCall", at).unwrap();
    step.content = Some("Looked the \"order\" up\n".into());
    step.input = Some(json!({"order": 42, "query": "line\tbreak", "nested": [1, "two", null]}));
    step.output = Some(json!(["ok", {"rows": 3}]));
    step.metadata = Some(json!({"source": "unit"}));
    step.model = Some("model-x".into());
    step.confidence = Some(0.25);
    step.duration_ms = Some(31);
    step.links.parent = Some("trace-0".into());
    step.links.tool_call = Some("call-9".into());
    step
}

/// The payload a quick reading leaves out, as it would be blank.
fn is_without_payload(rec: &StepRecord) -> bool {
    let s = &rec.step;
    s.content.is_none()
        && s.input.is_none()
        && s.output.is_none()
        && s.metadata.is_none()
        && s.model.is_none()
        && s.links.is_empty()
}

/// What the verifier is given is what the full parse gives, with the same
/// digest, except the payload on the quick path.
fn agrees_with_full_parse(row: &Row) -> (bool, Hash) {
    let full = row.raw().parse();
    let checked = row.raw().parse_for_verification();
    match (full, checked) {
        (Ok(full), Ok((checked, digest))) => {
            assert_eq!(digest, full.record.recompute_digest());
            let quick = is_without_payload(&checked.record);
            if quick {
                assert_eq!(
                    digest, full.record.digest,
                    "only a recomputing digest is quick"
                );
                let mut blanked = full.record.clone();
                blanked.step.blank_payload();
                assert_eq!(checked.record, blanked);
            } else {
                assert_eq!(checked.record, full.record);
            }
            assert_eq!((checked.seq, checked.logged_at), (full.seq, full.logged_at));
            (quick, digest)
        }
        (Err(full), Err(checked)) => {
            assert_eq!(full.to_string(), checked.to_string());
            (false, Hash::ZERO)
        }
        (full, checked) => panic!("full parse {full:?}, verifier's {checked:?}"),
    }
}

#[test]
fn a_row_as_written_is_checked_without_its_payload() {
    let row = Row::written(step());
    let (quick, digest) = agrees_with_full_parse(&row);
    assert!(quick);
    assert_eq!(digest, row.record.digest);
}

#[test]
fn json_spelled_otherwise_than_canonically_is_committed_from_its_value() {
    let mut s = step();
    // serde_json writes these `1.0` and `1e20`; the canonical JSON is `1`
    // and `100000000000000000000`.
    s.input = Some(json!({"temperature": 1.0, "big": 1e20}));
    s.metadata = Some(json!({"\u{e000}": 1, "\u{1f600}": 2}));
    let row = Row::written(s);
    assert_ne!(
        row.input.as_deref(),
        Some(r#"{"big":100000000000000000000,"temperature":1}"#)
    );
    let (quick, digest) = agrees_with_full_parse(&row);
    assert!(quick);
    assert_eq!(digest, row.record.digest);
}

/// The digest the row would need for `field` to hold `text` as its bytes
/// (what an attacker who rewrites the row computes if the verifier
/// committed the stored text as it is).
fn digest_over_text(row: &Row, field: Field, text: &str) -> Vec<u8> {
    let record = &row.record;
    let mut commitments = cairn_core::commit::field_commitments(&record.step, &record.openings);
    let Opening::Revealed(salt) = record.openings.get(field) else {
        panic!("{field:?} is revealed");
    };
    commitments[field.position()] = cairn_core::commit::commit_field(salt, text.as_bytes());
    digest_of_commitments(&commitments).0.to_vec()
}

#[test]
fn text_a_digest_was_recomputed_over_is_still_read_as_its_value() {
    // A rewritten row whose digest commits to its JSON columns' bytes:
    // text that does not parse, or parses to another canonical JSON than
    // itself, never verifies, on either path.
    let texts = [
        (Field::InputData, r#"{"order":1,"order":1000}"#),
        (Field::InputData, r#"{"order": 42}"#),
        (Field::InputData, "not json"),
        (Field::OutputData, r#""\ud800""#),
        (Field::Metadata, "1.0"),
        (Field::Links, "null"),
        (
            Field::Links,
            r#"{"parent":"trace-0","tool_call":"call-9","x":"y"}"#,
        ),
    ];
    for (field, text) in texts {
        let mut row = Row::written(step());
        let slot = match field {
            Field::InputData => &mut row.input,
            Field::OutputData => &mut row.output,
            Field::Metadata => &mut row.metadata,
            _ => &mut row.links,
        };
        *slot = Some(text.to_owned());
        row.digest = digest_over_text(&row, field, text);
        let (quick, digest) = agrees_with_full_parse(&row);
        assert!(!quick, "{field:?} = {text}");
        assert_ne!(digest.0.as_slice(), row.digest, "{field:?} = {text}");
    }
}

#[test]
fn a_tampered_row_is_parsed_in_full() {
    let tamperings: [fn(&mut Row); 6] = [
        |r| r.record.step.content = Some("rewritten".into()),
        |r| r.input = Some(r#"{"order":43}"#.into()),
        |r| r.input = Some("{not json".into()),
        |r| r.links = Some(r#"{"parent":7}"#.into()),
        |r| r.digest[0] ^= 1,
        |r| r.digest.truncate(31),
    ];
    for tamper in tamperings {
        let mut row = Row::written(step());
        tamper(&mut row);
        let (quick, digest) = agrees_with_full_parse(&row);
        assert!(!quick);
        assert_ne!(
            digest.0.as_slice(),
            row.digest,
            "the recorded digest does not recompute"
        );
    }
}

#[test]
fn a_row_with_hidden_fields_is_parsed_in_full() {
    let mut row = Row::written(step());
    row.record.hide(Field::Content).unwrap();
    let Opening::Hidden(commitment) = row.record.openings.get(Field::Content) else {
        panic!("content is hidden");
    };
    row.hidden = Some(json!({"content": commitment.to_hex()}).to_string());
    let (quick, digest) = agrees_with_full_parse(&row);
    assert!(!quick);
    assert_eq!(digest, row.record.digest);
    // A hidden field that still holds a value is refused by the in-order
    // checks, which must see the value: it stays in the record.
    let mut row = Row::written(step());
    row.hidden = Some(json!({"content": commitment.to_hex()}).to_string());
    let (checked, _) = row.raw().parse_for_verification().unwrap();
    assert!(checked.record.hidden_field_with_value().is_some());
}

/// Any JSON value a step may hold: numbers of every kind (integers within
/// ±(2^53 − 1), which ingest holds them to), strings with escapes and
/// characters on both sides of U+E000, nested.
fn any_json() -> impl Strategy<Value = Value> {
    const SAFE: i64 = (1 << 53) - 1;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-SAFE..=SAFE).prop_map(Value::from),
        (SAFE - 1000..=SAFE).prop_map(Value::from),
        (-1e25f64..1e25).prop_map(Value::from),
        (-1000i32..1000).prop_map(|n| Value::from(f64::from(n))),
        "[a-z\"\\\\\u{0}-\u{1f}\u{7f}\u{e000}\u{ffff}\u{1f600}é]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z\u{e000}\u{1f600}]{0,3}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A stored integer beyond 2^53 − 1 (which ingest refuses, and a bundle's
/// reading too) is corruption for the verifier's reading and the full
/// parse alike: the check of canonical text leaves it to the strict
/// parser.
#[test]
fn an_integer_beyond_two_to_the_53_is_refused_by_both_readings() {
    for text in [
        "[9007199254740992]",
        "[-9007199254740992]",
        "{\"a\":18446744073709551615}",
    ] {
        let mut row = Row::written(step());
        row.input = Some(text.to_owned());
        let (quick, _) = agrees_with_full_parse(&row);
        assert!(!quick, "{text}");
        assert!(row.raw().parse().is_err(), "{text}");
    }
}

proptest! {
    /// Whatever JSON a step holds, the verifier's reading of its row gives
    /// the full parse's digest, and leaves the payload out only when that
    /// digest is the recorded one.
    #[test]
    fn every_written_row_verifies_as_the_full_parse_says(
        input in proptest::option::of(any_json()),
        output in proptest::option::of(any_json()),
        metadata in proptest::option::of(any_json()),
        content in proptest::option::of("[a-z \"\\\\\n\u{e000}\u{1f600}]{0,12}"),
    ) {
        let mut s = step();
        (s.input, s.output, s.metadata, s.content) = (input, output, metadata, content);
        let row = Row::written(s);
        let (quick, digest) = agrees_with_full_parse(&row);
        prop_assert!(quick);
        prop_assert_eq!(digest, row.record.digest);
    }
}

/// A record found through a lookup column must name what it was looked up
/// by: an edited `sid` or `trace_id` cannot bring it into another
/// session's records or serve it for another id.
#[test]
fn a_record_looked_up_by_a_column_must_name_what_it_was_found_by() {
    let event = OpRecord::AuditEvent(cairn_core::log::AuditEvent {
        org_id: "acme".into(),
        event_id: "event-1".into(),
        session_id: Some("s1".into()),
        action: "export".into(),
        detail: None,
        at: Timestamp::from_micros(1_700_000_000_000_000).unwrap(),
    });
    let view = event.to_view().to_string();
    let found = |by| op_looked_up(9, "audit-event", &view, by);
    assert!(found(LookedUpBy::Session("s1")).is_ok());
    assert!(found(LookedUpBy::Id("event-1")).is_ok());
    assert!(found(LookedUpBy::Agent(None)).is_ok());
    for by in [
        LookedUpBy::Session("s2"),
        LookedUpBy::Id("event-2"),
        LookedUpBy::Agent(Some("analyst")),
    ] {
        assert!(
            matches!(found(by), Err(StoreError::Corrupt(m)) if m.starts_with("record 9:")),
            "a record of session s1 and id event-1 served for another"
        );
    }
}
