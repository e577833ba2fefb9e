//! `cairn demo`: seed 000's usage example recorded, sealed, checkpointed,
//! replayed and verified in memory, then tampered with and verified again.

use cairn_core::checkpoint::verify_checkpoint;
use cairn_core::commit::{StepRecord, genesis_hash, session_leaf_data};
use cairn_core::log::{LogEntry, LogRecord, OpRecord, SealRecord, log_origin, org_checkpoint};
use cairn_core::merkle::{Frontier, leaf_hash};
use cairn_core::note::NoteSigner;
use cairn_core::record::{Limits, Profile, SessionHeader, Step};
use cairn_core::verify::{LogVerifier, Verdict};
use serde_json::json;

const SERVER: &str = "cairn.demo";

/// The session id of the sample session.
pub const SAMPLE_SESSION: &str = "revenue-analysis-q4";

/// Seed 000's usage example: kind, content, input, confidence.
pub fn sample_steps() -> [(
    &'static str,
    &'static str,
    Option<serde_json::Value>,
    Option<f64>,
); 4] {
    [
        (
            "Observation",
            "User asked for Q4 revenue breakdown by segment",
            None,
            None,
        ),
        (
            "ToolCall",
            "Querying orders table",
            Some(
                json!({"sql": "SELECT segment, SUM(revenue) FROM orders WHERE quarter='Q4' GROUP BY 1"}),
            ),
            None,
        ),
        (
            "Reasoning",
            "Enterprise grew 23% QoQ while SMB declined 5%. The growth is concentrated in 3 accounts.",
            None,
            Some(0.88),
        ),
        (
            "FinalAnswer",
            "Q4 revenue was $7.49M, up 15% QoQ. Enterprise drove the growth at +23%.",
            None,
            Some(0.95),
        ),
    ]
}
const ORG: &str = "demo-org";

fn random32() -> anyhow::Result<[u8; 32]> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("no entropy source: {e}"))?;
    Ok(seed)
}

fn print_verdict(verdict: &Verdict) {
    if verdict.verified {
        println!(
            "  verdict: VERIFIED ({} records checked)",
            verdict.records_checked
        );
    } else if let Some(f) = &verdict.failure {
        println!("  verdict: TAMPERED");
        println!("  first failing record: {}", f.at);
        println!("  reason: {} ({})", f.reason, f.detail);
    }
}

/// Runs the demo; exit code 0 when the untouched log verifies and the
/// tampered one is caught.
pub fn run() -> anyhow::Result<crate::Outcome> {
    let server =
        NoteSigner::from_seed(SERVER, &random32()?).map_err(|e| anyhow::anyhow!(e.to_string()))?;
    let origin = log_origin(SERVER, ORG);
    let session = SAMPLE_SESSION;
    let header = SessionHeader {
        org_id: ORG.into(),
        session_id: session.into(),
        agent_id: "analyst".into(),
        started_at: cairn_store::now(),
        caller: "demo".into(),
        profile: Profile::Standard,
        predecessor: None,
        full_consent: false,
        max_clock_skew_s: cairn_core::record::DEFAULT_MAX_CLOCK_SKEW_S,
    };
    let mut entries: Vec<LogEntry> = Vec::new();
    let op = OpRecord::SessionStart(header.clone());
    entries.push(LogEntry {
        seq: 0,
        logged_at: cairn_store::now(),
        record: LogRecord::Op {
            hash: op.hash(),
            record: op,
        },
    });

    let steps = sample_steps();
    let mut head = genesis_hash(&header);
    let mut session_tree = Frontier::new();
    println!("Recording session {session} of agent analyst in org {ORG}:");
    for (index, (kind, content, input, confidence)) in steps.into_iter().enumerate() {
        let index = index as u64;
        let trace_id = format!("{session}-{index}");
        let mut step = Step::new(
            trace_id,
            ORG,
            "analyst",
            session,
            index,
            kind,
            cairn_store::now(),
        )
        .map_err(|e| anyhow::anyhow!(e.to_string()))?;
        step.content = Some(content.to_owned());
        step.input = input;
        step.confidence = confidence;
        step.validate(&Limits::default())
            .map_err(|e| anyhow::anyhow!(e.to_string()))?;
        let record = StepRecord::new(step, &random32()?, head);
        println!(
            "  [{index}] {:<12} {}  hash {}",
            record.step.kind_label,
            content,
            &record.hash.to_hex()[..16]
        );
        head = record.hash;
        session_tree.push(leaf_hash(&session_leaf_data(index, &record.hash)));
        entries.push(LogEntry {
            seq: entries.len() as u64,
            logged_at: cairn_store::now(),
            record: LogRecord::Step(record),
        });
    }
    let seal = SealRecord {
        org_id: ORG.into(),
        session_id: session.into(),
        step_count: session_tree.size(),
        session_root: session_tree.root(),
        final_hash: head,
        sealed_at: cairn_store::now(),
        note: String::new(),
    }
    .sign(&server, &origin)
    .map_err(|e| anyhow::anyhow!(e.to_string()))?;
    println!("\nSealed: session root {}", seal.session_root);
    let op = OpRecord::Seal(seal);
    entries.push(LogEntry {
        seq: entries.len() as u64,
        logged_at: cairn_store::now(),
        record: LogRecord::Op {
            hash: op.hash(),
            record: op,
        },
    });

    let mut log = Frontier::new();
    for entry in &entries {
        log.push(entry.leaf_hash());
    }
    let note = org_checkpoint(SERVER, ORG, log.size(), log.root())
        .sign(&server)
        .map_err(|e| anyhow::anyhow!(e.to_string()))?;
    println!("\nSigned checkpoint of the org log (C2SP signed note):\n{note}");
    println!("Server key: {}", server.verifier());

    let verify = |entries: &[LogEntry]| -> anyhow::Result<Verdict> {
        let checkpoint = verify_checkpoint(&note, &origin, &[server.verifier()])
            .map_err(|e| anyhow::anyhow!(e.to_string()))?;
        let mut verifier = LogVerifier::new(SERVER, ORG, vec![server.verifier()]);
        verifier.expect_checkpoint(&checkpoint);
        for entry in entries {
            if !verifier.push(entry) {
                break;
            }
        }
        Ok(verifier.finish())
    };

    println!("\nVerifying the org log against the checkpoint:");
    let clean = verify(&entries)?;
    print_verdict(&clean);

    println!("\nAn insider edits step 2's content in the store, keeping its hashes:");
    let mut tampered = entries.clone();
    if let LogRecord::Step(record) = &mut tampered[3].record {
        record.step.content = Some("Enterprise grew 2% QoQ.".into());
    }
    let caught = verify(&tampered)?;
    print_verdict(&caught);

    Ok(if clean.verified && !caught.verified {
        crate::Outcome::Success
    } else {
        crate::Outcome::VerificationFailed
    })
}
