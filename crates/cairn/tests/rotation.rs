//! Log key rotation (`docs/FORMAT.md` 7.10): a real store whose key is
//! rotated without a flag day (K1 signs, K2 is added by a record K1 signs,
//! K2 signs, K1 is retired), its genuine bundles, and what an insider who
//! holds a key can and cannot make verify. Every case is written to the
//! shared tamper corpus, so the Python and TypeScript verifiers must agree.
#![allow(clippy::unwrap_used)]

mod common;
mod corpus;
use corpus::*;

use cairn_core::bundle::{BundleHeader, checkpoint_line, encode_entry, end_line};
use cairn_core::log::{LogEntry, LogKeyAction, LogKeyRecord, LogRecord, OpRecord, org_checkpoint};
use cairn_core::merkle::{MemoryTree, SubtreeHashes as _};
use cairn_core::note::NoteSigner;
use cairn_core::verify::Reason;
use cairn_store::ops::{ExportOptions, ExportScope, export_at};
use cairn_store::{
    Ledger, LedgerStore, NewStep, SequencerConfig, SqliteOptions, SqliteStore, WriteRequest,
    Written,
};
use std::path::Path;
use std::sync::Arc;

const ORG: &str = "acme";
const NAME: &str = "cairn.test";

fn open(data: &Path, key: &Path) -> Arc<dyn LedgerStore> {
    Arc::new(
        SqliteStore::open(
            data,
            SqliteOptions {
                server_name: NAME.into(),
                embedding_sample_rate: 0.0,
                key_file: Some(key.to_owned()),
                ..SqliteOptions::default()
            },
        )
        .unwrap(),
    )
}

fn steps(ledger: &Ledger, session: &str, n: usize) {
    for i in 0..n {
        ledger
            .write(WriteRequest::Step(Box::new(NewStep {
                org_id: ORG.into(),
                session_id: session.into(),
                agent_id: "analyst".into(),
                kind_label: "observation".into(),
                content: Some(format!("{session} {i}")),
                caller: "rotation".into(),
                ..NewStep::default()
            })))
            .unwrap();
    }
    let sealed = ledger.write(WriteRequest::Seal {
        org_id: ORG.into(),
        session_id: session.into(),
        require_reflection: false,
    });
    assert!(matches!(sealed, Ok(Written::Sealed { .. })), "{sealed:?}");
}

fn log_key(ledger: &Ledger, store: &dyn LedgerStore, action: LogKeyAction, key: &NoteSigner) {
    let written = ledger.write(WriteRequest::LogKey {
        org_id: ORG.into(),
        action,
        key: key.verifier(),
    });
    assert!(matches!(written, Ok(Written::LogKey { .. })), "{written:?}");
    store.record_log_key(action, &key.verifier()).unwrap();
}

struct Rotated {
    _dir: tempfile::TempDir,
    store: Arc<dyn LedgerStore>,
    k1: NoteSigner,
    k2: NoteSigner,
}

/// s1 under K1; K2 added; s2 under K2; K1 retired; s3 under K2.
fn rotated() -> Rotated {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (k1_file, k2_file) = (dir.path().join("k1.key"), dir.path().join("k2.key"));
    let k1 = cairn_store::load_or_create_key_file(&k1_file, NAME).unwrap();
    let k2 = cairn_store::load_or_create_key_file(&k2_file, NAME).unwrap();
    {
        let store = open(&data, &k1_file);
        let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
        steps(&ledger, "s1", 3);
        log_key(&ledger, store.as_ref(), LogKeyAction::Add, &k2.signer);
        // K1 may not vouch for itself, nor K2 be added twice.
        let again = ledger.write(WriteRequest::LogKey {
            org_id: ORG.into(),
            action: LogKeyAction::Add,
            key: k1.verifier.clone(),
        });
        assert!(again.is_err(), "{again:?}");
        ledger.close();
    }
    let store = open(&data, &k2_file);
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    steps(&ledger, "s2", 2);
    log_key(&ledger, store.as_ref(), LogKeyAction::Retire, &k1.signer);
    steps(&ledger, "s3", 2);
    ledger.close();
    drop(store);
    // A process with the retired key refuses to sign for the store.
    let refused = SqliteStore::open(
        &data,
        SqliteOptions {
            server_name: NAME.into(),
            key_file: Some(k1_file),
            ..SqliteOptions::default()
        },
    );
    assert!(
        matches!(&refused, Err(cairn_store::StoreError::Key(m)) if m.contains("retired")),
        "{:?}",
        refused.err()
    );
    Rotated {
        store: open(&data, &k2_file),
        _dir: dir,
        k1: k1.signer,
        k2: k2.signer,
    }
}

impl Rotated {
    fn export(&self, scope: ExportScope) -> Vec<String> {
        let cp = match self
            .store
            .append_batch(&[WriteRequest::Checkpoint { org_id: ORG.into() }])
            .unwrap()
            .pop()
        {
            Some(Ok(Written::Checkpoint(cp))) => cp,
            other => panic!("{other:?}"),
        };
        let mut out = Vec::new();
        export_at(
            self.store.as_ref(),
            ORG,
            &scope,
            ExportOptions::default(),
            &cp,
            cairn_store::now(),
            &mut out,
            &mut |_| {},
        )
        .unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn entries(&self) -> Vec<LogEntry> {
        let lines = self.export(ExportScope::All);
        lines[2..lines.len() - 1]
            .iter()
            .map(|l| cairn_core::bundle::decode_entry(l).unwrap().0)
            .collect()
    }

    fn keys(&self) -> Vec<String> {
        vec![
            self.k1.verifier().to_string(),
            self.k2.verifier().to_string(),
        ]
    }

    /// A complete bundle of `entries` whose checkpoint `signer` signs (an
    /// insider holding that key).
    fn signed_by(&self, entries: &[LogEntry], signer: &NoteSigner) -> Vec<String> {
        let mut tree = MemoryTree::new();
        entries.iter().for_each(|e| tree.push(e.leaf_hash()));
        let cp = org_checkpoint(NAME, ORG, tree.size(), tree.root_at(tree.size()))
            .sign(signer)
            .unwrap();
        let header = BundleHeader {
            server_name: NAME.into(),
            org_id: ORG.into(),
            server_key: signer.verifier().to_string(),
            log_keys: Vec::new(),
            complete_log: true,
            exported_at: cairn_store::now(),
        };
        let mut lines = vec![header.to_line(), checkpoint_line(&cp)];
        lines.extend(entries.iter().map(|e| encode_entry(e, None)));
        lines.push(end_line(entries.len() as u64));
        lines
    }
}

fn position(entries: &[LogEntry], pick: impl Fn(&OpRecord) -> bool) -> usize {
    entries
        .iter()
        .position(|e| matches!(&e.record, LogRecord::Op { record, .. } if pick(record)))
        .unwrap()
}

/// Replaces an operational record, with its hash recomputed.
fn replace(entries: &mut [LogEntry], at: usize, record: OpRecord) {
    entries[at].record = LogRecord::Op {
        hash: record.hash(),
        record,
    };
}

fn failing_at(reason: Reason, seq: usize) -> Expected {
    Expected {
        reason,
        line: Some(2 + seq as u64 + 1),
        seq: Some(seq as u64),
        session_id: None,
        step_index: None,
    }
}

#[test]
fn a_rotated_log_verifies_and_an_insider_cannot_abuse_a_key_outside_its_validity() {
    let w = rotated();
    let keys = w.keys();
    let origin = format!("{NAME}/{ORG}");

    // The store verifies, with both keys from its metadata.
    let verdict =
        cairn_store::ops::verify_org(w.store.as_ref(), ORG, &[], &[], &mut |_| {}).unwrap();
    assert!(verdict.verdict.verified, "{verdict:?}");

    // Genuine bundles: unpinned (the header names both keys), pinned to
    // both, partial (every log-key record comes along).
    let complete = w.export(ExportScope::All);
    assert!(complete[0].contains("log_keys"), "{}", complete[0]);
    case("rotation-genuine-complete", &complete, &[], &[], None);
    case(
        "rotation-genuine-complete-pinned",
        &complete,
        &keys,
        &[],
        None,
    );
    let s1 = w.export(ExportScope::Session("s1".into()));
    case("rotation-genuine-s1", &s1, &keys, &[], None);
    let s3 = w.export(ExportScope::Session("s3".into()));
    case("rotation-genuine-s3", &s3, &[], &[], None);

    // Pinned to the old key alone: the checkpoint is the new key's.
    case(
        "rotation-pinned-old-key-only",
        &complete,
        &keys[..1],
        &[],
        Some(&at_line(Reason::BadSignature, 2)),
    );

    let entries = w.entries();
    let add = position(
        &entries,
        |r| matches!(r, OpRecord::LogKey(k) if k.action == LogKeyAction::Add),
    );
    let retire = position(
        &entries,
        |r| matches!(r, OpRecord::LogKey(k) if k.action == LogKeyAction::Retire),
    );

    // The retired key signs a checkpoint past its retirement: no position.
    let by_retired = w.signed_by(&entries, &w.k1);
    case(
        "rotation-checkpoint-by-retired-key",
        &by_retired,
        &keys,
        &[],
        Some(&Expected {
            reason: Reason::BadSignature,
            line: None,
            seq: None,
            session_id: None,
            step_index: None,
        }),
    );
    // ... though one that covers no more than its retirement record is
    // still its to sign.
    let upto = w.signed_by(&entries[..=retire], &w.k1);
    case("rotation-checkpoint-at-retirement", &upto, &keys, &[], None);

    // The new key signs a seal before it was added: caught at its add.
    let mut early = entries.clone();
    let seal = position(
        &early,
        |r| matches!(r, OpRecord::Seal(s) if s.session_id == "s1"),
    );
    let OpRecord::Seal(s) = (match &early[seal].record {
        LogRecord::Op { record, .. } => record.clone(),
        LogRecord::Step(_) | LogRecord::ErasedTrace { .. } => unreachable!(),
    }) else {
        unreachable!()
    };
    let resealed = s.sign(&w.k2, &origin).unwrap();
    replace(&mut early, seal, OpRecord::Seal(resealed));
    case(
        "rotation-seal-before-add",
        &w.signed_by(&early, &w.k2),
        &keys,
        &[],
        Some(&failing_at(Reason::BadSignature, add)),
    );

    // An add signed only by the key it adds.
    let mut self_vouched = entries.clone();
    let LogRecord::Op {
        record: OpRecord::LogKey(k),
        ..
    } = &entries[add].record
    else {
        unreachable!()
    };
    let forged =
        LogKeyRecord::sign(ORG, &origin, LogKeyAction::Add, k.key.clone(), k.at, &w.k2).unwrap();
    replace(&mut self_vouched, add, OpRecord::LogKey(forged));
    case(
        "rotation-add-signed-by-itself",
        &w.signed_by(&self_vouched, &w.k2),
        &keys,
        &[],
        Some(&failing_at(Reason::BadSignature, add)),
    );

    // A note that states another time than its record.
    let mut restated = entries.clone();
    let mut other = k.clone();
    other.at = cairn_core::Timestamp::from_micros(k.at.as_micros() + 1).unwrap();
    other.note = LogKeyRecord::sign(
        ORG,
        &origin,
        LogKeyAction::Add,
        k.key.clone(),
        other.at,
        &w.k1,
    )
    .unwrap()
    .note;
    other.at = k.at;
    replace(&mut restated, add, OpRecord::LogKey(other));
    case(
        "rotation-note-states-another-record",
        &w.signed_by(&restated, &w.k2),
        &keys,
        &[],
        Some(&failing_at(Reason::MalformedRecord, add)),
    );

    // The added key's id written in upper case (FORMAT 7.1: a vkey's key
    // id is read in either case): the view is hashed as written and its
    // note states that text, so it verifies; a note stating Cairn's own
    // spelling (lowercase) then states another record.
    let mut parts = k.key_text.splitn(3, '+');
    let (name, id, rest) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let upper = format!("{name}+{}+{rest}", id.to_uppercase());
    assert_ne!(upper, k.key_text);
    let mut respelled = k.clone();
    respelled.key_text.clone_from(&upper);
    respelled.note =
        w.k1.sign(&cairn_core::log::log_key_note_text(
            &origin,
            LogKeyAction::Add,
            &upper,
            k.at,
        ))
        .unwrap();
    let mut upper_entries = entries.clone();
    replace(&mut upper_entries, add, OpRecord::LogKey(respelled.clone()));
    case(
        "rotation-add-key-id-in-upper-case",
        &w.signed_by(&upper_entries, &w.k2),
        &keys,
        &[],
        None,
    );
    respelled.note.clone_from(&k.note);
    replace(&mut upper_entries, add, OpRecord::LogKey(respelled));
    case(
        "rotation-add-key-id-in-upper-case-note-in-lower-case",
        &w.signed_by(&upper_entries, &w.k2),
        &keys,
        &[],
        Some(&failing_at(Reason::MalformedRecord, add)),
    );

    // Retiring a retired key again (appended by the new key's holder).
    let mut twice = entries.clone();
    let LogRecord::Op {
        record: OpRecord::LogKey(r),
        ..
    } = &entries[retire].record
    else {
        unreachable!()
    };
    let mut again = entries[retire].clone();
    again.seq = entries.len() as u64;
    again.logged_at = entries.last().unwrap().logged_at;
    let retired_again = LogKeyRecord::sign(
        ORG,
        &origin,
        LogKeyAction::Retire,
        r.key.clone(),
        r.at,
        &w.k2,
    )
    .unwrap();
    again.record = LogRecord::Op {
        hash: OpRecord::LogKey(retired_again.clone()).hash(),
        record: OpRecord::LogKey(retired_again),
    };
    twice.push(again);
    let n = twice.len() - 1;
    case(
        "rotation-retired-twice",
        &w.signed_by(&twice, &w.k2),
        &keys,
        &[],
        Some(&failing_at(Reason::BadSignature, n)),
    );

    // A header whose log keys are not keys, unpinned.
    let mut bad_header = complete.clone();
    edit_line(&mut bad_header, 0, |v| {
        v["log_keys"] = serde_json::json!(["not a key"])
    });
    case(
        "rotation-header-log-key-unreadable",
        &bad_header,
        &[],
        &[],
        Some(&at_line(Reason::MalformedRecord, 2)),
    );
}

/// The insider attack the checkpoints' log-keys line closes (FORMAT.md
/// 7.1, 7.10; SECURITY.md "Key rotation"): the retired key signs a partial
/// bundle of the *real* history (real size and root, the witness's
/// cosignature copied from the genuine checkpoint, whose text it covers,
/// and a selection that lists no log-key record), so that nothing in the
/// bundle retires it. The genuine text counts the add and the retire: the
/// bundle holds neither.
#[test]
fn a_retired_key_cannot_sign_a_partial_bundle_that_leaves_its_retirement_out() {
    use cairn_core::bundle::selection_line;
    use cairn_core::checkpoint::{Checkpoint, Cosigner};
    use cairn_core::selection::Selection;
    let w = rotated();
    let keys = w.keys();
    let origin = format!("{NAME}/{ORG}");
    let genuine = w.export(ExportScope::Session("s3".into()));
    let note_of = |line: &str| -> String {
        serde_json::from_str::<serde_json::Value>(line).unwrap()["checkpoint"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let genuine_note = note_of(&genuine[1]);
    let text = &genuine_note[..genuine_note.rfind("\n\n").unwrap() + 1];
    let checkpoint = Checkpoint::parse(text).unwrap();
    assert_eq!(checkpoint.log_key_count(), Some(2), "{text}");
    let witness = Cosigner::from_seed("w1.example", &[51; 32]).unwrap();
    let cosignature = witness.cosign(text, 1_780_000_000);
    let policy = Witnesses {
        vkeys: vec![witness.verifier().to_string()],
        quorum: None,
    };
    let with_note = |lines: &[String], note: &str| -> Vec<String> {
        let mut lines = lines.to_vec();
        lines[1] = serde_json::json!({ "checkpoint": note }).to_string();
        lines
    };
    // The genuine bundle, cosigned, verifies under the policy and with
    // its own checkpoint kept.
    let cosigned = format!("{genuine_note}{cosignature}");
    case_witnessed(
        "rotation-partial-genuine-cosigned",
        &with_note(&genuine, &cosigned),
        &keys,
        std::slice::from_ref(&cosigned),
        &policy,
        None,
    );

    // The forgery: the same text signed by the retired key, the
    // witness's line copied, the log-key records left out of the
    // selection and of the entries.
    let forge = |text: &str| -> Vec<String> {
        let checkpoint = Checkpoint::parse(text).unwrap();
        let note = format!("{}{cosignature}", w.k1.sign(text).unwrap());
        let selection_value: serde_json::Value = serde_json::from_str(&genuine[2]).unwrap();
        let mut selection = Selection::from_value(&selection_value["selection"]).unwrap();
        let before = selection.records.len();
        selection.records.retain(|(_, kind)| kind != "log-key");
        assert_eq!(selection.records.len(), before - 2);
        let signed = selection.sign(&w.k1, &origin, &checkpoint.root).unwrap();
        let mut lines = vec![
            genuine[0].clone(),
            serde_json::json!({ "checkpoint": note }).to_string(),
        ];
        lines.push(selection_line(&selection, &signed));
        let entries: Vec<String> = genuine[3..genuine.len() - 1]
            .iter()
            .filter(|line| !line.contains("\"type\":\"log-key\""))
            .cloned()
            .collect();
        assert_eq!(entries.len(), genuine.len() - 4 - 2);
        lines.push(end_line(entries.len() as u64));
        lines.splice(3..3, entries);
        lines
    };
    let no_position = |reason| Expected {
        reason,
        line: None,
        seq: None,
        session_id: None,
        step_index: None,
    };
    // Under the witness policy: the cosigned text counts two log-key
    // records, the bundle holds none.
    let forged = forge(text);
    case_witnessed(
        "rotation-partial-by-retired-key-witnessed",
        &forged,
        &keys,
        &[],
        &policy,
        Some(&no_position(Reason::MissingRecord)),
    );
    // With the genuine checkpoint kept instead (same size and root).
    case(
        "rotation-partial-by-retired-key-checkpoint-kept",
        &forged,
        &keys,
        std::slice::from_ref(&genuine_note),
        Some(&no_position(Reason::MissingRecord)),
    );
    // A text that counts no log-key record: the witness never cosigned
    // it, and the kept checkpoint still counts two.
    let uncounted = Checkpoint::parse(text)
        .unwrap()
        .with_log_key_count(0)
        .to_text();
    let forged_uncounted = forge(&uncounted);
    case_witnessed(
        "rotation-partial-by-retired-key-recounted-witnessed",
        &forged_uncounted,
        &keys,
        &[],
        &policy,
        Some(&at_line(Reason::InsufficientCosignatures, 2)),
    );
    case(
        "rotation-partial-by-retired-key-recounted-checkpoint-kept",
        &forged_uncounted,
        &keys,
        std::slice::from_ref(&genuine_note),
        Some(&no_position(Reason::MissingRecord)),
    );
    // The genuine partial bundle with its log-key records dropped by a
    // courier fails the same way (its selection then also lists them:
    // missing-record at the first one's seq, before the end).
    let mut dropped = genuine.clone();
    dropped.retain(|line| !line.contains("\"type\":\"log-key\""));
    let n = dropped.len() - 4;
    *dropped.last_mut().unwrap() = end_line(n as u64);
    let verdict = verify_lines(&dropped, &keys, &[]);
    let failure = verdict.verdict.failure.unwrap();
    assert_eq!(failure.reason, Reason::MissingRecord, "{failure:?}");

    // A trusted checkpoint of size 0 is otherwise ignored (FORMAT.md
    // 10.2), but its log-keys line is checked: below 0 there is none.
    let empty = org_checkpoint(NAME, ORG, 0, cairn_core::merkle::empty_root())
        .with_log_key_count(1)
        .sign(&w.k2)
        .unwrap();
    case(
        "rotation-partial-trusted-empty-checkpoint-counts-one",
        &genuine,
        &keys,
        std::slice::from_ref(&empty),
        Some(&no_position(Reason::MissingRecord)),
    );

    // A complete bundle whose checkpoint misstates the count, signed by
    // the current key: the log holds two.
    let entries = w.entries();
    let mut tree = MemoryTree::new();
    entries.iter().for_each(|e| tree.push(e.leaf_hash()));
    let miscounted = org_checkpoint(NAME, ORG, tree.size(), tree.root_at(tree.size()))
        .with_log_key_count(1)
        .sign(&w.k2)
        .unwrap();
    let mut complete = w.signed_by(&entries, &w.k2);
    complete[1] = checkpoint_line(&miscounted);
    case(
        "rotation-complete-checkpoint-miscounts-log-keys",
        &complete,
        &keys,
        &[],
        Some(&no_position(Reason::InconsistentCheckpoint)),
    );
    case(
        "rotation-complete-trusted-empty-checkpoint-counts-one",
        &w.signed_by(&entries, &w.k2),
        &keys,
        std::slice::from_ref(&empty),
        Some(&no_position(Reason::InconsistentCheckpoint)),
    );
}

#[test]
fn cairn_keys_rotate_and_retire_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let new_key = dir.path().join("k2.key");
    let new_key = new_key.to_str().unwrap();
    let run = |args: &[&str], stdin: Option<&str>| common::cairn_in(dir.path(), args, stdin);
    let line = |session: &str, content: &str| {
        format!(
            r#"{{"session_id":"{session}","agent_id":"a","step_type":"observation","content":"{content}"}}"#
        )
    };
    assert_eq!(run(&["log", "--stdin"], Some(&line("s1", "one"))).code, 0);
    assert_eq!(run(&["seal", "s1"], None).code, 0);
    let old = common::json(&run(&["--json", "keys"], None))["server_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let rotate = run(&["keys", "rotate", "--new-key", new_key], None);
    assert_eq!(rotate.code, 0, "{}", rotate.stderr);
    assert!(
        rotate.stdout.contains("acme: log-key add at seq 3"),
        "{}",
        rotate.stdout
    );
    // Rotating again writes nothing more.
    let again = run(&["keys", "rotate", "--new-key", new_key], None);
    assert!(!again.stdout.contains("log-key add at"), "{}", again.stdout);
    let with_new = |args: &[&str], stdin: Option<&str>| {
        let mut all = vec!["--server-key", new_key];
        all.extend_from_slice(args);
        run(&all, stdin)
    };
    assert_eq!(
        with_new(&["log", "--stdin"], Some(&line("s2", "two"))).code,
        0
    );
    assert_eq!(with_new(&["seal", "s2"], None).code, 0);
    let keys = common::json(&with_new(&["--json", "keys"], None));
    let new = keys["server_key"].as_str().unwrap().to_owned();
    assert_eq!(keys["log_keys"], serde_json::json!([old, new]));
    // The old key still starts (no flag day); the store verifies.
    assert_eq!(run(&["log", "--stdin"], Some(&line("s3", "three"))).code, 0);
    assert_eq!(with_new(&["verify"], None).code, 0);

    // Retiring the key the process holds is refused; with the new one
    // loaded it is done, and the old key no longer starts.
    assert_eq!(run(&["keys", "retire", &old], None).code, 2);
    let retire = with_new(&["keys", "retire", &old], None);
    assert_eq!(retire.code, 0, "{}", retire.stderr);
    let refused = run(&["log", "--stdin"], Some(&line("s3", "four")));
    assert_eq!(refused.code, 3);
    assert!(refused.stderr.contains("retired"), "{}", refused.stderr);
    assert_eq!(with_new(&["verify"], None).code, 0);

    // A bundle verifies pinned to both keys, not to the old one alone.
    let bundle = dir.path().join("all.ndjson");
    let bundle = bundle.to_str().unwrap();
    assert_eq!(with_new(&["export", "--all", "-o", bundle], None).code, 0);
    let both = run(
        &["verify", "--bundle", bundle, "--key", &old, "--key", &new],
        None,
    );
    assert_eq!(both.code, 0, "{}", both.stdout);
    assert_eq!(
        run(&["verify", "--bundle", bundle, "--key", &old], None).code,
        1
    );
    assert_eq!(run(&["verify", "--bundle", bundle], None).code, 0);

    // A monitor given both keys follows the rotated log; given only the
    // old one, it refuses the new key's checkpoint.
    let (server, admin) = common::serve_with(dir.path(), None, &["--server-key", new_key], &[]);
    let admin = admin.expect("a store without API keys prints an admin key");
    let url = format!("http://{}/v1/tlog", server.addr);
    let monitor = |keys: &[&str]| {
        let mut args = vec!["monitor", url.as_str(), "--once"];
        for k in keys {
            args.extend(["--log-key", k]);
        }
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"));
        command.args(&args).env("CAIRN_API_KEY", &admin);
        command.output().unwrap()
    };
    let both = monitor(&[&old, &new]);
    assert_eq!(
        both.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&both.stdout)
    );
    assert_eq!(monitor(&[&old]).status.code(), Some(1));
}
