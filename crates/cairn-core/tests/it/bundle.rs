//! Bundles: encode and decode round trip, complete and partial bundles
//! verify, and changing any single byte of a bundle is caught at its line.

use crate::tamper::{Fixture, ORG, SERVER, build_log, step_spec};
use cairn_core::Timestamp;
use cairn_core::bundle::{
    BundleHeader, BundleVerifier, bundle_lines, checkpoint_line, consistency_line, decode_entry,
    encode_entry, end_line, selection_line,
};
use cairn_core::commit::Field;
use cairn_core::detail::DetailLevel;
use cairn_core::log::LogRecord;
use cairn_core::merkle::{MemoryTree, SubtreeHashes as _, consistency_proof, inclusion_proof};
use cairn_core::selection::{Scope, Selector};
use cairn_core::verify::Reason;
use proptest::prelude::*;

fn header(fx: &Fixture, complete: bool) -> BundleHeader {
    BundleHeader {
        server_name: SERVER.into(),
        org_id: ORG.into(),
        server_key: fx.server.verifier().to_string(),
        log_keys: Vec::new(),
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

/// Exports `scope` at `level` the way the published algorithm says: the
/// selection recomputed from the complete log, signed, then every listed
/// entry (and every step of a listed session) with its inclusion proof.
pub(crate) fn partial_export(fx: &Fixture, scope: Scope, level: DetailLevel) -> Vec<String> {
    let size = fx.entries.len() as u64;
    let mut tree = MemoryTree::new();
    for e in &fx.entries {
        tree.push(e.leaf_hash());
    }
    let mut selector = Selector::new(scope, level, size);
    fx.entries.iter().for_each(|e| selector.first_pass(e));
    fx.entries.iter().for_each(|e| selector.second_pass(e));
    let selection = selector.finish().expect("the scope selects a session");
    let note = selection
        .sign(&fx.server, &format!("{SERVER}/{ORG}"), &tree.root_at(size))
        .unwrap();
    let mut lines = vec![
        header(fx, false).to_line(),
        checkpoint_line(fx.checkpoints.last().unwrap()),
        selection_line(&selection, &note),
    ];
    let listed: Vec<u64> = selection.records.iter().map(|(seq, _)| *seq).collect();
    let sessions: Vec<&str> = selection
        .sessions
        .iter()
        .map(|c| c.session_id.as_str())
        .collect();
    let mut count = 0;
    for e in &fx.entries {
        let keep = match &e.record {
            LogRecord::Step(r) => sessions.contains(&r.step.session_id.as_str()),
            LogRecord::Op { .. } | LogRecord::ErasedTrace { .. } => listed.contains(&e.seq),
        };
        if keep {
            let mut e = e.clone();
            if let LogRecord::Step(r) = &mut e.record {
                r.redact(level).unwrap();
            }
            let proof = inclusion_proof(&tree, e.seq, size).unwrap();
            lines.push(encode_entry(&e, Some(&proof)));
            count += 1;
        }
    }
    lines.push(end_line(count));
    lines
}

/// Session s1 only, at full detail.
fn partial_bundle(fx: &Fixture) -> Vec<String> {
    partial_export(fx, Scope::Session("s1".into()), DetailLevel::Full)
}

/// The index of the first entry line (after header, checkpoint and, for a
/// partial bundle, the selection).
fn first_entry_line(lines: &[String]) -> usize {
    if lines[2].starts_with("{\"note\"") || lines[2].contains("\"selection\"") {
        3
    } else {
        2
    }
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

fn verify_with(lines: &[String], trusted: &[&str]) -> cairn_core::bundle::BundleVerdict {
    let mut v = BundleVerifier::new(vec![]);
    for t in trusted {
        v.trust_checkpoint(*t);
    }
    for line in lines {
        if !v.push_line(line) {
            break;
        }
    }
    v.finish()
}

fn failure(lines: &[String]) -> (Reason, Option<u64>, Option<u64>) {
    let f = verify(lines)
        .verdict
        .failure
        .expect("the bundle must fail verification");
    (f.reason, f.at.line, f.at.seq)
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

        // Change one byte of any line after the header (the checkpoint, the
        // selection, an entry, the end) to any other byte but a line end:
        // also to bytes that are not UTF-8.
        let k = 1 + line.index(lines.len() - 1);
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
            // The only changes that cannot matter are to the mutable flags
            // outside the signed data.
            let changed = String::from_utf8(bytes).expect("a verified line is text");
            let (a, _) = decode_entry(&lines[k]).expect("only entry lines may change unnoticed");
            let (b, _) = decode_entry(&changed).unwrap();
            let same_signed = match (&a.record, &b.record) {
                (LogRecord::Step(x), LogRecord::Step(y)) => {
                    let (mut x, mut y) = (x.clone(), y.clone());
                    x.has_embedding = false; y.has_embedding = false; x.erased = false; y.erased = false;
                    x == y
                }
                (x, y) => x == y,
            };
            prop_assert!(same_signed, "undetected change on line {}: {}", k + 1, changed);
        } else {
            let failure = verdict.verdict.failure.unwrap();
            // The time an entry was logged is bound only by its leaf: in a
            // complete bundle a changed one is caught where time runs back
            // or at the checkpoint's root, the last entry.
            let only_time = String::from_utf8(bytes.clone()).ok().and_then(|changed| {
                let (a, _) = decode_entry(&lines[k]).ok()?;
                let (b, _) = decode_entry(&changed).ok()?;
                Some(a.logged_at != b.logged_at && a.record == b.record && a.seq == b.seq)
            }) == Some(true);
            if only_time && complete {
                prop_assert!(
                    matches!(failure.reason, Reason::BadTimestamp | Reason::InconsistentCheckpoint),
                    "{:?}", failure
                );
                prop_assert!(failure.at.line >= Some(k as u64 + 1), "{:?}", failure);
            } else {
                prop_assert_eq!(failure.at.line, Some(k as u64 + 1), "{:?}", failure);
            }
        }
    }

    /// A courier drops, repeats, moves or adds any line of a bundle of any
    /// scope and level: verification fails, and names where.
    #[test]
    fn any_dropped_added_or_moved_line_is_named(
        specs in prop::collection::vec(step_spec(), 2..10),
        scope_pick in 0usize..4,
        level_pick in 0usize..3,
        edit in 0usize..4,
        a in any::<prop::sample::Index>(),
        b in any::<prop::sample::Index>(),
    ) {
        let fx = build_log(&specs);
        let level = [DetailLevel::Generic, DetailLevel::Detailed, DetailLevel::Full][level_pick];
        let lines = match scope_pick {
            0 => complete_bundle(&fx),
            1 => partial_export(&fx, Scope::Session("s1".into()), level),
            2 => partial_export(&fx, Scope::Session("s2".into()), level),
            _ => partial_export(&fx, Scope::Agent("analyst".into()), level),
        };
        prop_assert!(verify(&lines).verdict.verified);
        let first = first_entry_line(&lines);
        let last = lines.len() - 1; // the end line
        let entries = first..last;
        let i = entries.start + a.index(entries.len());
        let j = entries.start + b.index(entries.len());
        let mut tampered = lines.clone();
        match edit {
            // Drop an entry, keeping the end count honest.
            0 => {
                tampered.remove(i);
                tampered[last - 1] = end_line((last - first - 1) as u64);
            }
            // Repeat an entry.
            1 => {
                let copy = tampered[i].clone();
                tampered.insert(i + 1, copy);
                tampered[last + 1] = end_line((last - first + 1) as u64);
            }
            // Swap two entries (a no-op when they are the same line).
            2 => {
                prop_assume!(i != j);
                tampered.swap(i, j);
            }
            // Add an entry of the other partial export or, for a complete
            // bundle, any line of a partial export (with a valid proof).
            _ => {
                let other = partial_export(&fx, Scope::Session("s2".into()), DetailLevel::Full);
                let extra = other[first_entry_line(&other)..other.len() - 1].iter().find(|l| !lines.contains(l));
                prop_assume!(extra.is_some());
                tampered.insert(i, extra.unwrap().clone());
                let n = tampered.len();
                tampered[n - 1] = end_line((last - first + 1) as u64);
            }
        }
        let verdict = verify(&tampered);
        prop_assert!(!verdict.verdict.verified, "edit {edit} at {i}/{j} went unnoticed");
        let failure = verdict.verdict.failure.unwrap();
        // Named: a line, or a record (seq, or session and step).
        prop_assert!(
            failure.at.line.is_some() || failure.at.seq.is_some() || failure.at.step_index.is_some(),
            "{:?}", failure
        );
    }
}

/// The audit's first finding: entries appended after a genuine complete
/// bundle, with hashes recomputed from FORMAT.md, and a complete bundle
/// under an older genuine checkpoint, are covered by no signature.
#[test]
fn entries_no_checkpoint_covers_are_refused() {
    let specs: Vec<_> = (0..6)
        .map(|i| crate::tamper::StepSpec {
            kind: "plan",
            content: format!("p{i}"),
            number: None,
            confidence: None,
            flagged: false,
        })
        .collect();
    let fx = build_log(&specs);
    let n = fx.entries.len();
    // Older checkpoint, all entries: the ones past it are uncovered.
    let mut lines = complete_bundle(&fx);
    lines[1] = checkpoint_line(&fx.checkpoints[n - 3]);
    assert_eq!(
        failure(&lines),
        (
            Reason::UncoveredEntry,
            Some(2 + n as u64 - 1),
            Some(n as u64 - 2)
        )
    );
    // A forged step appended (the log of a longer fixture, but the
    // checkpoint of this one).
    let longer = build_log(&[specs.clone(), specs.clone()].concat());
    let mut lines = complete_bundle(&longer);
    lines[1] = checkpoint_line(&longer.checkpoints[n - 1]);
    let (reason, line, seq) = failure(&lines);
    assert_eq!((reason, seq), (Reason::UncoveredEntry, Some(n as u64)));
    assert_eq!(line, Some(2 + n as u64 + 1));
}

/// An auditor's saved checkpoint is checked: a consistent older one
/// passes (folded in a complete bundle, by the consistency line in a
/// partial one), a rewritten history fails, a partial bundle without the
/// proof fails, and a bundle older than the trusted checkpoint cannot pass.
#[test]
fn trusted_checkpoints_are_checked_or_refused() {
    let specs: Vec<_> = (0..6)
        .map(|i| crate::tamper::StepSpec {
            kind: "plan",
            content: format!("p{i}"),
            number: None,
            confidence: None,
            flagged: false,
        })
        .collect();
    let fx = build_log(&specs);
    let n = fx.entries.len();
    let old = fx.checkpoints[3].as_str();
    let complete = complete_bundle(&fx);
    assert!(verify_with(&complete, &[old]).verdict.verified);
    let partial = partial_bundle(&fx);
    let f = verify_with(&partial, &[old]).verdict.failure.unwrap();
    assert_eq!((f.reason, f.at.line), (Reason::MissingProof, Some(3)));
    // With the consistency line, it passes.
    let mut tree = MemoryTree::new();
    for e in &fx.entries {
        tree.push(e.leaf_hash());
    }
    let proof = consistency_proof(&tree, 4, n as u64).unwrap();
    let mut proven = partial.clone();
    proven.insert(2, consistency_line(4, &proof));
    assert!(verify_with(&proven, &[old]).verdict.verified);
    assert!(
        verify(&proven).verdict.verified,
        "a consistency line is harmless unasked"
    );
    // A history rewritten and re-signed with the server key: the old
    // checkpoint (kept by the auditor) no longer matches.
    let mut other = specs.clone();
    other[0].content = "rewritten".into();
    let rewritten = build_log(&other);
    let f = verify_with(&complete_bundle(&rewritten), &[old])
        .verdict
        .failure
        .unwrap();
    assert_eq!(f.reason, Reason::InconsistentCheckpoint);
    let mut rtree = MemoryTree::new();
    for e in &rewritten.entries {
        rtree.push(e.leaf_hash());
    }
    let mut forged = partial_bundle(&rewritten);
    forged.insert(
        2,
        consistency_line(4, &consistency_proof(&rtree, 4, n as u64).unwrap()),
    );
    let f = verify_with(&forged, &[old]).verdict.failure.unwrap();
    assert_eq!(
        (f.reason, f.at.line),
        (Reason::InconsistentCheckpoint, Some(3))
    );
    // A trusted checkpoint newer than the bundle's.
    let mut stale = complete_bundle(&fx);
    stale[1] = checkpoint_line(&fx.checkpoints[n - 2]);
    stale.remove(n + 1);
    let m = stale.len();
    stale[m - 1] = end_line(n as u64 - 1);
    assert!(verify(&stale).verdict.verified);
    let f = verify_with(&stale, &[fx.checkpoints[n - 1].as_str()])
        .verdict
        .failure
        .unwrap();
    assert_eq!((f.reason, f.at.line), (Reason::MissingProof, Some(2)));
}

/// The selection names what a courier drops and refuses what one adds.
#[test]
fn the_selection_names_dropped_records_and_refuses_added_ones() {
    let specs: Vec<_> = (0..6)
        .map(|i| crate::tamper::StepSpec {
            kind: "plan",
            content: format!("p{i}"),
            number: None,
            confidence: None,
            flagged: false,
        })
        .collect();
    let fx = build_log(&specs);
    let lines = partial_export(&fx, Scope::Session("s2".into()), DetailLevel::Full);
    assert!(verify(&lines).verdict.verified);
    // Dropping the last step of the (unsealed) session s2.
    let mut short = lines.clone();
    let last_entry = short.len() - 2;
    short.remove(last_entry);
    let n = short.len();
    short[n - 1] = end_line((n - 4) as u64);
    let f = verify(&short).verdict.failure.unwrap();
    assert_eq!(f.reason, Reason::MissingRecord);
    assert_eq!(
        (f.at.session_id.as_deref(), f.at.step_index),
        (Some("s2"), Some(2))
    );
    // Dropping the key registration (listed first).
    let mut no_key = lines.clone();
    no_key.remove(3);
    let n = no_key.len();
    no_key[n - 1] = end_line((n - 4) as u64);
    let f = verify(&no_key).verdict.failure.unwrap();
    assert_eq!(
        (f.reason, f.at.seq, f.at.line),
        (Reason::MissingRecord, Some(0), Some(4))
    );
    // Dropping the selection line itself.
    let mut unlisted = lines.clone();
    unlisted.remove(2);
    let f = verify(&unlisted).verdict.failure.unwrap();
    assert_eq!((f.reason, f.at.line), (Reason::MissingProof, Some(3)));
    // Editing the statement (a session's claimed step count).
    let mut edited = lines.clone();
    edited[2] = edited[2].replacen("\"steps\":3", "\"steps\":2", 1);
    assert_ne!(edited[2], lines[2]);
    assert_eq!(failure(&edited).0, Reason::DigestMismatch);
}

/// Erased payloads verify only with the erasure records that name them
/// (the audit's fifth finding: nulling a step's payload in the erasure's
/// shape, with no record, used to pass).
#[test]
fn erased_payloads_need_their_erasure_records() {
    use cairn_core::log::{ErasureRecord, LogEntry, OpRecord};
    let fx = build_log(&[crate::tamper::StepSpec {
        kind: "plan",
        content: "secret plan".into(),
        number: Some(5),
        confidence: None,
        flagged: false,
    }]);
    let mut entries = fx.entries.clone();
    let mut erasures = Vec::new();
    for e in &mut entries {
        if let LogRecord::Step(r) = &mut e.record {
            let mut commitments = Vec::new();
            for f in [
                Field::Content,
                Field::InputData,
                Field::OutputData,
                Field::Metadata,
            ] {
                r.hide(f).unwrap();
                if let cairn_core::commit::Opening::Hidden(c) = r.openings.get(f) {
                    commitments.push((f, *c));
                }
            }
            r.erased = true;
            erasures.push(ErasureRecord {
                org_id: ORG.into(),
                session_id: r.step.session_id.clone(),
                step_index: r.step.step_index,
                trace_id: r.step.trace_id.clone(),
                commitments,
                reason: "request".into(),
                actor: "dpo".into(),
                erased_at: crate::tamper::logged(90),
            });
        }
    }
    let bundle = |entries: &[LogEntry]| {
        let mut tree = MemoryTree::new();
        entries.iter().for_each(|e| tree.push(e.leaf_hash()));
        let cp =
            cairn_core::log::org_checkpoint(SERVER, ORG, tree.size(), tree.root_at(tree.size()))
                .sign(&fx.server)
                .unwrap();
        let mut lines = vec![header(&fx, true).to_line(), checkpoint_line(&cp)];
        lines.extend(entries.iter().map(|e| encode_entry(e, None)));
        lines.push(end_line(entries.len() as u64));
        lines
    };
    // Without the erasure record: the step is named.
    let lines = bundle(&entries);
    assert!(lines.iter().all(|l| !l.contains("secret plan")));
    let f = verify(&lines).verdict.failure.unwrap();
    assert_eq!((f.reason, f.at.seq), (Reason::ErasureMismatch, Some(3)));
    // With it, later in the log: verified.
    let mut recorded = entries.clone();
    for erasure in erasures {
        let op = OpRecord::Erasure(erasure);
        recorded.push(LogEntry {
            seq: recorded.len() as u64,
            logged_at: crate::tamper::logged(recorded.len() as u64),
            record: LogRecord::Op {
                hash: op.hash(),
                record: op,
            },
        });
    }
    let verdict = verify(&bundle(&recorded));
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
    // An erasure record for a step that still shows its payload.
    let mut shown = fx.entries.clone();
    shown.extend(recorded[fx.entries.len()..].iter().cloned());
    let f = verify(&bundle(&shown)).verdict.failure.unwrap();
    assert_eq!(
        (f.reason, f.at.seq),
        (Reason::ErasureMismatch, Some(fx.entries.len() as u64))
    );
    // A store's verification reads entries appended while it ran after
    // `mirror_from_here`: an erasure there naming a step read whole before
    // that point is accepted (it may have committed after the read), one
    // naming a step read after it is not (read after the erasure).
    let tail_verdict = |split: usize| {
        let mut verifier =
            cairn_core::verify::LogVerifier::new(SERVER, ORG, vec![fx.server.verifier()]);
        for (i, e) in shown.iter().enumerate() {
            if i == split {
                verifier.mirror_from_here();
            }
            if !verifier.push(e) {
                break;
            }
        }
        verifier.finish()
    };
    let steps_end = fx.entries.len();
    let read_before = tail_verdict(steps_end);
    assert!(read_before.verified, "{:?}", read_before.failure);
    let first_step = shown
        .iter()
        .position(|e| matches!(e.record, LogRecord::Step(_)))
        .unwrap();
    let read_after = tail_verdict(first_step);
    let f = read_after
        .failure
        .expect("a step read in the tail gets no leniency");
    assert_eq!(
        (f.reason, f.at.seq),
        (Reason::ErasureMismatch, Some(steps_end as u64))
    );
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
