//! The shared tamper corpus: a case is checked with the core verifier
//! (exact reason and position) and with `cairn verify --bundle`, and
//! written to `CAIRN_TAMPER_CORPUS` (default `target/tamper-corpus`) for
//! the Python and TypeScript verifiers, with the keys, trusted checkpoints
//! and witness policy it is verified under. Used by `tamper.rs` and
//! `rotation.rs`.
#![allow(dead_code)]

use super::common;
use cairn_core::bundle::{BundleVerdict, BundleVerifier, end_line};
use cairn_core::verify::Reason;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// What a case must produce.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    pub reason: Reason,
    pub line: Option<u64>,
    pub seq: Option<u64>,
    pub session_id: Option<String>,
    pub step_index: Option<u64>,
}

pub fn at_line(reason: Reason, line: u64) -> Expected {
    Expected {
        reason,
        line: Some(line),
        seq: None,
        session_id: None,
        step_index: None,
    }
}

pub fn verify_lines(lines: &[String], keys: &[String], trusted: &[String]) -> BundleVerdict {
    verify_lines_witnessed(lines, keys, trusted, &Witnesses::default())
}

/// A witness policy of a case: the witnesses' cosignature vkeys and the
/// quorum (`None`: all of them). No witnesses, no policy.
#[derive(Debug, Clone, Default)]
pub struct Witnesses {
    pub vkeys: Vec<String>,
    pub quorum: Option<usize>,
}

pub fn verify_lines_witnessed(
    lines: &[String],
    keys: &[String],
    trusted: &[String],
    witnesses: &Witnesses,
) -> BundleVerdict {
    let keys = keys
        .iter()
        .map(|k| cairn_core::note::NoteVerifier::parse(k).unwrap())
        .collect();
    let mut v = BundleVerifier::new(keys);
    for t in trusted {
        v.trust_checkpoint(t.clone());
    }
    if !witnesses.vkeys.is_empty() {
        let vkeys: Vec<_> = witnesses
            .vkeys
            .iter()
            .map(|k| cairn_core::note::NoteVerifier::parse(k).unwrap())
            .collect();
        let quorum = witnesses.quorum.unwrap_or(vkeys.len());
        v.require_witnesses(cairn_core::witness::WitnessPolicy::new(vkeys, quorum).unwrap());
    }
    for line in lines {
        if !v.push_line(line) {
            break;
        }
    }
    v.finish()
}

/// Checks one case with the core verifier (exact reason and position), with
/// `cairn verify --bundle` (exit 1, same reason and line), and writes it to
/// the corpus.
pub fn case(
    name: &str,
    lines: &[String],
    keys: &[String],
    trusted: &[String],
    expected: Option<&Expected>,
) {
    case_witnessed(name, lines, keys, trusted, &Witnesses::default(), expected);
}

/// [`case`] under a witness policy (`cairn verify --witness ...
/// --witness-quorum K`; the corpus case names the witnesses and quorum).
pub fn case_witnessed(
    name: &str,
    lines: &[String],
    keys: &[String],
    trusted: &[String],
    witnesses: &Witnesses,
    expected: Option<&Expected>,
) {
    let verdict = verify_lines_witnessed(lines, keys, trusted, witnesses);
    let failure = verdict.verdict.failure.clone();
    match (expected, &failure) {
        (None, None) => assert!(verdict.verdict.verified, "{name}"),
        (Some(want), Some(got)) => {
            assert_eq!(got.reason, want.reason, "{name}: {}", got.detail);
            if want.line.is_some() {
                assert_eq!(got.at.line, want.line, "{name}: line; {got:?}");
            }
            if want.seq.is_some() {
                assert_eq!(got.at.seq, want.seq, "{name}: seq; {got:?}");
            }
            if want.session_id.is_some() {
                assert_eq!(
                    got.at.session_id, want.session_id,
                    "{name}: session; {got:?}"
                );
            }
            if want.step_index.is_some() {
                assert_eq!(got.at.step_index, want.step_index, "{name}: step; {got:?}");
            }
        }
        (want, got) => panic!("{name}: expected {want:?}, got {got:?}"),
    }
    // The same through the command line.
    let dir = corpus_dir();
    let bundle = dir.join(format!("{name}.bundle"));
    std::fs::write(&bundle, lines.join("\n") + "\n").unwrap();
    let mut args = vec![
        "verify".to_owned(),
        "--json".to_owned(),
        "--bundle".to_owned(),
        bundle.display().to_string(),
    ];
    for k in keys {
        args.extend(["--key".to_owned(), k.clone()]);
    }
    let trusted_dir = tempfile::tempdir().unwrap();
    for (i, t) in trusted.iter().enumerate() {
        let path = trusted_dir.path().join(format!("cp{i}"));
        std::fs::write(&path, t).unwrap();
        args.extend(["--checkpoint".to_owned(), path.display().to_string()]);
    }
    for w in &witnesses.vkeys {
        args.extend(["--witness".to_owned(), w.clone()]);
    }
    if let Some(quorum) = witnesses.quorum {
        args.extend(["--witness-quorum".to_owned(), quorum.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = common::cairn_in(trusted_dir.path(), &args, None);
    let cli: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{name}: {e}: {} {}", run.stdout, run.stderr));
    assert_eq!(
        run.code,
        if expected.is_some() { 1 } else { 0 },
        "{name}: {cli}"
    );
    if let Some(f) = &failure {
        assert_eq!(cli["brokenReason"], f.reason.as_str(), "{name}");
        assert_eq!(cli["brokenAt"]["line"], json!(f.at.line), "{name}");
        assert_eq!(cli["brokenAt"]["seq"], json!(f.at.seq), "{name}");
    }
    let at = failure.as_ref().map(|f| &f.at);
    let record = json!({
        "bundle": format!("{name}.bundle"),
        "keys": keys,
        "trusted_checkpoints": trusted,
        "witnesses": witnesses.vkeys,
        "witness_quorum": witnesses.quorum,
        "expected": {
            "verified": verdict.verdict.verified,
            "reason": failure.as_ref().map(|f| f.reason.as_str()),
            "line": at.and_then(|a| a.line),
            "seq": at.and_then(|a| a.seq),
            "session_id": at.and_then(|a| a.session_id.clone()),
            "step_index": at.and_then(|a| a.step_index),
            "records_checked": verdict.verdict.records_checked,
        },
    });
    std::fs::write(
        dir.join(format!("{name}.json")),
        serde_json::to_string_pretty(&record).unwrap(),
    )
    .unwrap();
}

pub fn corpus_dir() -> PathBuf {
    let dir = std::env::var_os("CAIRN_TAMPER_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tamper-corpus")
        });
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The entry line of `seq` in a bundle, by position.
pub fn line_of(lines: &[String], seq: u64) -> usize {
    lines
        .iter()
        .position(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .and_then(|v| v.get("seq").and_then(Value::as_u64))
                == Some(seq)
        })
        .unwrap()
}

pub fn edit_line(lines: &mut [String], index: usize, edit: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_str(&lines[index]).unwrap();
    edit(&mut v);
    lines[index] = v.to_string();
}

pub fn set_end(lines: &mut [String], entries: u64) {
    let n = lines.len();
    lines[n - 1] = end_line(entries);
}

/// Rewrites the end line to the number of entry lines (a courier keeping
/// the count honest).
pub fn fix_end(lines: &mut [String]) {
    let entries = lines
        .iter()
        .filter(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .is_some_and(|v| v.get("seq").is_some())
        })
        .count() as u64;
    set_end(lines, entries);
}
