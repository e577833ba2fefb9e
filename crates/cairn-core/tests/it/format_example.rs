//! Recomputes the worked example of `docs/FORMAT.md`: every `label = value`
//! line this test produces must appear verbatim in the document, so the
//! published algorithm and this implementation cannot drift apart.
//! `CAIRN_PRINT_EXAMPLE=1 cargo test -p cairn-core --test it format_example
//! -- --nocapture` prints the lines.

use cairn_core::commit::{
    FIELDS, Opening, StepRecord, chain_hash, derive_salt, genesis_hash, header_view,
    session_leaf_data, write_field_value,
};
use cairn_core::log::{LogEntry, LogRecord, OpRecord, org_checkpoint};
use cairn_core::merkle::{MemoryTree, inclusion_proof, leaf_hash, root_of};
use cairn_core::note::NoteSigner;
use cairn_core::record::{Profile, SessionHeader, Step};
use cairn_core::{Hash, Timestamp};
use serde_json::json;
use std::path::Path;

fn example_lines() -> Vec<(String, String)> {
    let mut lines: Vec<(String, String)> = Vec::new();
    let mut put = |label: &str, value: String| lines.push((label.to_owned(), value));

    let started = Timestamp::parse_rfc3339("2025-01-15T10:30:00Z").unwrap();
    let header = SessionHeader {
        org_id: "acme".into(),
        session_id: "revenue-analysis-q4".into(),
        agent_id: "analyst".into(),
        started_at: started,
        caller: "key-1".into(),
        profile: Profile::Standard,
        predecessor: None,
        full_consent: false,
        max_clock_skew_s: 300,
    };
    put(
        "header_view",
        String::from_utf8(header_view(&header)).unwrap(),
    );
    let genesis = genesis_hash(&header);
    put("genesis", genesis.to_hex());

    let mut step0 = Step::new(
        "f47ac10b-58cc-4372-a567-0e02b2c3d479",
        "acme",
        "analyst",
        "revenue-analysis-q4",
        0,
        "Observation",
        started,
    )
    .unwrap();
    step0.content = Some("User asked for Q4 revenue breakdown by segment".into());
    let seed0: [u8; 32] = std::array::from_fn(|i| i as u8);
    let rec0 = StepRecord::new(step0.clone(), &seed0, genesis);
    put("step0.seed", hex::encode(seed0));
    for field in FIELDS {
        let mut value = Vec::new();
        write_field_value(&step0, field, &mut value);
        let name = field.name();
        put(
            &format!("step0.{name}.value"),
            String::from_utf8(value).unwrap(),
        );
        put(
            &format!("step0.{name}.salt"),
            hex::encode(derive_salt(&seed0, field)),
        );
    }
    // Commitments for the first and a payload field; the rest follow the
    // same formula.
    for field in [FIELDS[0], cairn_core::commit::Field::Content] {
        let mut probe = rec0.clone();
        probe.hide(field).unwrap();
        let Opening::Hidden(c) = probe.openings.get(field) else {
            unreachable!()
        };
        put(&format!("step0.{}.commitment", field.name()), c.to_hex());
    }
    put("step0.digest", rec0.digest.to_hex());
    put("step0.hash", rec0.hash.to_hex());
    assert_eq!(rec0.hash, chain_hash(&genesis, &rec0.digest, 0, started));

    let t1 = Timestamp::parse_rfc3339("2025-01-15T10:30:01.250000Z").unwrap();
    let mut step1 = Step::new(
        "0b7e5c1a-3d2f-4e6b-9a8c-1f2e3d4c5b6a",
        "acme",
        "analyst",
        "revenue-analysis-q4",
        1,
        "ToolCall",
        t1,
    )
    .unwrap();
    step1.content = Some("Querying orders table".into());
    step1.input = Some(
        json!({"sql": "SELECT segment, SUM(revenue) FROM orders WHERE quarter='Q4' GROUP BY 1"}),
    );
    step1.confidence = Some(0.92);
    let seed1: [u8; 32] = std::array::from_fn(|i| 32 + i as u8);
    let rec1 = StepRecord::new(step1.clone(), &seed1, rec0.hash);
    for field in [
        cairn_core::commit::Field::InputData,
        cairn_core::commit::Field::Confidence,
    ] {
        let mut value = Vec::new();
        write_field_value(&step1, field, &mut value);
        put(
            &format!("step1.{}.value", field.name()),
            String::from_utf8(value).unwrap(),
        );
    }
    put("step1.digest", rec1.digest.to_hex());
    put("step1.hash", rec1.hash.to_hex());

    // The step redacted to hide its content still has the same digest.
    let mut redacted = rec1.clone();
    redacted.hide(cairn_core::commit::Field::Content).unwrap();
    assert_eq!(redacted.recompute_digest(), rec1.digest);

    let session_leaves = [
        leaf_hash(&session_leaf_data(0, &rec0.hash)),
        leaf_hash(&session_leaf_data(1, &rec1.hash)),
    ];
    put("session.leaf0", session_leaves[0].to_hex());
    put("session.root", root_of(&session_leaves).to_hex());

    let start = OpRecord::SessionStart(header);
    let op_hash = start.hash();
    // When the server logged each entry: the session start, then each step
    // a few milliseconds after it was received.
    let logged = [
        "2025-01-15T10:30:00.000000Z",
        "2025-01-15T10:30:00.004000Z",
        "2025-01-15T10:30:01.253000Z",
    ]
    .map(|t| Timestamp::parse_canonical(t).unwrap());
    let entries = [
        LogEntry {
            seq: 0,
            logged_at: logged[0],
            record: LogRecord::Op {
                record: start,
                hash: op_hash,
            },
        },
        LogEntry {
            seq: 1,
            logged_at: logged[1],
            record: LogRecord::Step(rec0),
        },
        LogEntry {
            seq: 2,
            logged_at: logged[2],
            record: LogRecord::Step(rec1),
        },
    ];
    put("log.op0.hash", op_hash.to_hex());
    let mut tree = MemoryTree::new();
    for (i, entry) in entries.iter().enumerate() {
        put(&format!("log.logged_at{i}"), entry.logged_at.to_string());
        put(&format!("log.leaf{i}"), entry.leaf_hash().to_hex());
        tree.push(entry.leaf_hash());
    }
    let root = tree.root_at(3);
    put("log.root", root.to_hex());
    let proof = inclusion_proof(&tree, 1, 3).unwrap();
    put(
        "log.inclusion(1,3)",
        proof.iter().map(Hash::to_hex).collect::<Vec<_>>().join(","),
    );

    let server = NoteSigner::from_seed("cairn.example", &[0x11; 32]).unwrap();
    put("server.vkey", server.verifier().to_string());
    let checkpoint = org_checkpoint("cairn.example", "acme", 3, root);
    let signed = checkpoint.sign(&server).unwrap();
    put(
        "checkpoint.signature_line",
        signed.lines().last().unwrap().to_owned(),
    );

    // A partial bundle of the session at the generic level: its selection
    // statement, hash and signature.
    let selection = cairn_core::selection::Selection {
        checkpoint_size: 3,
        scope: cairn_core::selection::Scope::Session("revenue-analysis-q4".into()),
        level: cairn_core::detail::DetailLevel::Generic,
        sessions: vec![cairn_core::selection::SessionClaim {
            session_id: "revenue-analysis-q4".into(),
            steps: 2,
            head: entries[2].record_hash(),
        }],
        records: vec![(0, "session-start".into())],
    };
    put(
        "selection",
        String::from_utf8(cairn_core::jcs::to_vec(&selection.to_value())).unwrap(),
    );
    put("selection.hash", selection.hash().to_hex());
    let origin = "cairn.example/acme";
    let note = selection.sign(&server, origin, &root).unwrap();
    put(
        "selection.signature_line",
        note.lines().last().unwrap().to_owned(),
    );
    lines
}

#[test]
fn format_md_worked_example_recomputes() {
    let lines = example_lines();
    if std::env::var_os("CAIRN_PRINT_EXAMPLE").is_some() {
        for (label, value) in &lines {
            println!("{label} = {value}");
        }
    }
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/FORMAT.md");
    let doc = std::fs::read_to_string(&doc_path).expect("docs/FORMAT.md exists");
    let missing: Vec<String> = lines
        .iter()
        .map(|(label, value)| format!("{label} = {value}"))
        .filter(|line| !doc.lines().any(|l| l.trim_end() == line))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/FORMAT.md lacks these lines of the worked example:\n{}",
        missing.join("\n")
    );
}
