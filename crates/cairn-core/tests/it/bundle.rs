//! Bundles: encode and decode round trip, complete and partial bundles
//! verify, and changing any single byte of a bundle is caught at its line.

use crate::tamper::{Fixture, ORG, SERVER, build_log, step_spec};
use cairn_core::Timestamp;
use cairn_core::bundle::{
    BundleHeader, BundleVerifier, bundle_lines, checkpoint_line, decode_entry, encode_entry,
    end_line,
};
use cairn_core::commit::Field;
use cairn_core::log::LogRecord;
use cairn_core::merkle::{MemoryTree, inclusion_proof};
use cairn_core::verify::Reason;
use proptest::prelude::*;
use serde_json::json;

fn header(fx: &Fixture, complete: bool) -> BundleHeader {
    BundleHeader {
        server_name: SERVER.into(),
        org_id: ORG.into(),
        server_key: fx.server.verifier().to_string(),
        scope: json!({"all": complete}),
        complete_log: complete,
        exported_at: Timestamp::from_micros(0).unwrap(),
    }
}

fn complete_bundle(fx: &Fixture) -> Vec<String> {
    let mut lines = vec![
        header(fx, true).to_line(),
        checkpoint_line(fx.checkpoints.last().unwrap()),
    ];
    lines.extend(fx.entries.iter().map(|e| encode_entry(e, None)));
    lines.push(end_line(fx.entries.len() as u64));
    lines
}

/// Session s1 only: its start, its steps, its seal and the key registration.
fn partial_bundle(fx: &Fixture) -> Vec<String> {
    let mut tree = MemoryTree::new();
    for e in &fx.entries {
        tree.push(e.leaf_hash());
    }
    let size = fx.entries.len() as u64;
    let mut lines = vec![
        header(fx, false).to_line(),
        checkpoint_line(fx.checkpoints.last().unwrap()),
    ];
    let mut count = 0;
    for e in &fx.entries {
        let keep = match &e.record {
            LogRecord::Step(r) => r.step.session_id == "s1",
            LogRecord::Op { record, .. } => {
                !matches!(record, cairn_core::log::OpRecord::SessionStart(h) if h.session_id != "s1")
            }
        };
        if keep {
            let proof = inclusion_proof(&tree, e.seq, size).unwrap();
            lines.push(encode_entry(e, Some(&proof)));
            count += 1;
        }
    }
    lines.push(end_line(count));
    lines
}

fn verify(lines: &[String]) -> cairn_core::bundle::BundleVerdict {
    let mut v = BundleVerifier::new(vec![]);
    for line in lines {
        if !v.push_line(line) {
            break;
        }
    }
    v.finish()
}

/// Verifies a bundle as bytes, the way a file or an upload arrives.
fn verify_bytes(bundle: &[u8]) -> cairn_core::bundle::BundleVerdict {
    let mut v = BundleVerifier::new(vec![]);
    for line in bundle_lines(bundle) {
        if !v.push_bytes(line) {
            break;
        }
    }
    v.finish()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn entries_round_trip(specs in prop::collection::vec(step_spec(), 1..8)) {
        let fx = build_log(&specs);
        for e in &fx.entries {
            let (decoded, proof) = decode_entry(&encode_entry(e, None)).unwrap();
            prop_assert_eq!(&decoded, e);
            prop_assert_eq!(proof, None);
        }
    }

    #[test]
    fn bundles_verify_and_any_changed_byte_is_caught_at_its_line(
        specs in prop::collection::vec(step_spec(), 2..8),
        line in any::<prop::sample::Index>(),
        byte in any::<prop::sample::Index>(),
        replacement in any::<u8>(),
        complete in any::<bool>(),
    ) {
        let fx = build_log(&specs);
        let lines = if complete { complete_bundle(&fx) } else { partial_bundle(&fx) };
        let verdict = verify(&lines);
        prop_assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
        prop_assert!(!verdict.key_pinned);

        // Change one byte of one entry line (lines 3.. are entries) to any
        // other byte but a line end: also to bytes that are not UTF-8.
        let k = 2 + line.index(lines.len() - 3);
        let mut bytes = lines[k].clone().into_bytes();
        let at = byte.index(bytes.len());
        let original = bytes[at];
        bytes[at] = match replacement {
            b'\n' | b'\r' => 0xff,
            r if r == original => original ^ 0x80,
            r => r,
        };
        let mut tampered_bundle = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            tampered_bundle.extend_from_slice(if i == k { &bytes } else { l.as_bytes() });
            tampered_bundle.push(b'\n');
        }
        let verdict = verify_bytes(&tampered_bundle);
        if verdict.verdict.verified {
            let changed = String::from_utf8(bytes).expect("a verified line is text");
            let mut tampered = lines.clone();
            tampered[k] = changed;
            // The only changes that cannot matter are to bytes outside the
            // signed data: the mutable flags, or JSON that parses the same.
            let (a, _) = decode_entry(&lines[k]).unwrap();
            let (b, _) = decode_entry(&tampered[k]).unwrap();
            let same_signed = match (&a.record, &b.record) {
                (LogRecord::Step(x), LogRecord::Step(y)) => {
                    let (mut x, mut y) = (x.clone(), y.clone());
                    x.has_embedding = false; y.has_embedding = false; x.erased = false; y.erased = false;
                    x == y
                }
                (x, y) => x == y,
            };
            prop_assert!(same_signed, "undetected change on line {}: {}", k + 1, tampered[k]);
        } else {
            let failure = verdict.verdict.failure.unwrap();
            prop_assert_eq!(failure.at.line, Some(k as u64 + 1), "{:?}", failure);
        }
    }
}

#[test]
fn truncation_bad_keys_and_missing_proofs_are_refused() {
    let fx = build_log(&[crate::tamper::StepSpec {
        kind: "plan",
        content: "p".into(),
        number: None,
        confidence: None,
        flagged: false,
    }]);
    let lines = complete_bundle(&fx);
    // Truncated: no end line.
    let v = verify(&lines[..lines.len() - 1]);
    assert_eq!(v.verdict.failure.unwrap().reason, Reason::MissingRecord);
    // Truncated inside, with a consistent end line: the checkpoint is larger.
    let mut short = lines[..lines.len() - 2].to_vec();
    short.push(end_line(fx.entries.len() as u64 - 1));
    assert_eq!(
        verify(&short).verdict.failure.unwrap().reason,
        Reason::MissingRecord
    );
    // A pinned key that did not sign the checkpoint.
    let other = cairn_core::note::NoteSigner::from_seed(SERVER, &[3; 32]).unwrap();
    let mut v = BundleVerifier::new(vec![other.verifier()]);
    for l in &lines {
        v.push_line(l);
    }
    let verdict = v.finish();
    assert!(verdict.key_pinned);
    assert_eq!(
        verdict.verdict.failure.unwrap().reason,
        Reason::BadSignature
    );
    // A partial bundle whose entry lacks its proof.
    let mut partial = partial_bundle(&fx);
    let mut entry: serde_json::Value = serde_json::from_str(&partial[2]).unwrap();
    entry.as_object_mut().unwrap().remove("proof");
    partial[2] = entry.to_string();
    assert_eq!(
        verify(&partial).verdict.failure.unwrap().reason,
        Reason::InclusionMismatch
    );
}

#[test]
fn a_redacted_bundle_verifies_without_revealing_hidden_fields() {
    let fx = build_log(&[crate::tamper::StepSpec {
        kind: "plan",
        content: "secret plan".into(),
        number: Some(5),
        confidence: None,
        flagged: false,
    }]);
    let mut lines = vec![
        header(&fx, true).to_line(),
        checkpoint_line(fx.checkpoints.last().unwrap()),
    ];
    for e in &fx.entries {
        let mut e = e.clone();
        if let LogRecord::Step(r) = &mut e.record {
            for f in [
                Field::Content,
                Field::InputData,
                Field::OutputData,
                Field::Metadata,
            ] {
                r.hide(f).unwrap();
            }
        }
        lines.push(encode_entry(&e, None));
    }
    lines.push(end_line(fx.entries.len() as u64));
    assert!(lines.iter().all(|l| !l.contains("secret plan")));
    let verdict = verify(&lines);
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
}

proptest! {
    /// Bytes split into lines as text splits: `\n` or `\r\n` ends a line,
    /// and a final line end opens no empty line.
    #[test]
    fn bundle_lines_split_as_str_lines(text in "[a-z\r\n\u{2028}\u{85}]{0,40}") {
        let from_bytes: Vec<&[u8]> = bundle_lines(text.as_bytes()).collect();
        let from_text: Vec<&[u8]> = text.lines().map(str::as_bytes).collect();
        prop_assert_eq!(from_bytes, from_text);
    }
}

/// A byte that is not UTF-8 is a change, found at its line, even where a
/// lossy decoding would give back the very character it replaced.
#[test]
fn a_line_that_is_not_utf8_fails_at_that_line() {
    let fx = build_log(&[crate::tamper::StepSpec {
        kind: "plan",
        content: "odd \u{fffd} character".into(),
        number: None,
        confidence: None,
        flagged: false,
    }]);
    let bundle = complete_bundle(&fx).join("\n") + "\n";
    assert!(verify_bytes(bundle.as_bytes()).verdict.verified);
    let k = bundle.find('\u{fffd}').unwrap();
    let line = bundle[..k].matches('\n').count() as u64 + 1;
    let mut tampered = bundle.as_bytes().to_vec();
    tampered.splice(k..k + '\u{fffd}'.len_utf8(), [0xff]);
    assert_eq!(
        String::from_utf8_lossy(&tampered),
        bundle,
        "a lossy reader sees the original"
    );
    let failure = verify_bytes(&tampered).verdict.failure.unwrap();
    assert_eq!(failure.reason, Reason::MalformedRecord);
    assert_eq!(failure.at.line, Some(line));
    assert!(failure.detail.contains("not UTF-8"), "{}", failure.detail);
}
