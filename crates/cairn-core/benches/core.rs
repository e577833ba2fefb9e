//! Benchmarks of the integrity core, each paired with a baseline measured
//! in the same run (raw SHA-256 of the same bytes), and a closing table of
//! ratios, because absolute figures on shared 2-core machines are noisy.
//!
//! `cargo bench -p cairn-core --bench core`

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

use cairn_core::commit::{StepRecord, chain_hash, genesis_hash};
use cairn_core::merkle::{Frontier, MemoryTree, consistency_proof, inclusion_proof, leaf_hash};
use cairn_core::record::{Links, Profile, SessionHeader, Step};
use cairn_core::verify::{AgentKeys, SessionVerifier};
use cairn_core::{Hash, Timestamp, jcs};
use criterion::{BatchSize, Criterion, Throughput};
use serde_json::json;
use std::hint::black_box;
use std::time::Duration;

fn header() -> SessionHeader {
    SessionHeader {
        org_id: "acme".into(),
        session_id: "bench-session".into(),
        agent_id: "analyst".into(),
        started_at: Timestamp::from_micros(1_736_937_000_000_000).unwrap(),
        caller: "bench".into(),
        profile: Profile::Standard,
        predecessor: None,
        full_consent: false,
        max_clock_skew_s: 300,
    }
}

/// A step of about 1 KB of canonical field values.
fn kilobyte_step(index: u64) -> Step {
    let mut step = Step::new(
        "f47ac10b-58cc-4372-a567-0e02b2c3d479",
        "acme",
        "analyst",
        "bench-session",
        index,
        "Reasoning",
        Timestamp::from_micros(1_736_937_000_000_000 + index as i64).unwrap(),
    )
    .unwrap();
    step.content = Some("The revenue data shows a clear upward trend in Q4, driven primarily by the enterprise segment which grew 23% QoQ. ".repeat(6));
    step.input = Some(
        json!({"query": "SELECT segment, SUM(revenue) FROM orders WHERE quarter = 'Q4' GROUP BY 1"}),
    );
    step.output = Some(json!({"enterprise": 4500000, "mid_market": 2100000, "smb": 890000}));
    step.confidence = Some(0.92);
    step.duration_ms = Some(1234);
    step.token_count = Some(512);
    step.model = Some("gpt-4o".into());
    step.metadata = Some(json!({"temperature": 0.2}));
    step.turn_id = Some("turn-1".into());
    step.turn_step = Some(2);
    step.links = Links {
        tool_call: Some("tc-1".into()),
        ..Links::default()
    };
    step
}

fn step_bytes(step: &Step) -> usize {
    let mut out = Vec::new();
    for field in cairn_core::commit::FIELDS {
        cairn_core::commit::write_field_value(step, field, &mut out);
    }
    out.len()
}

fn benches(c: &mut Criterion) {
    let step = kilobyte_step(0);
    let size = step_bytes(&step);
    let same_bytes = vec![0x5au8; size];
    let genesis = genesis_hash(&header());

    let mut g = c.benchmark_group("step");
    g.throughput(Throughput::Elements(1));
    g.bench_function("sha256_same_bytes", |b| {
        b.iter(|| Hash::sha256(black_box(&same_bytes)))
    });
    g.bench_function("digest_and_chain", |b| {
        b.iter_batched(
            || step.clone(),
            |s| StepRecord::new(s, black_box(&[7; 32]), genesis),
            BatchSize::SmallInput,
        )
    });
    let record = StepRecord::new(step.clone(), &[7; 32], genesis);
    g.bench_function("verify", |b| {
        b.iter_batched(
            || SessionVerifier::new(&header(), AgentKeys::new()),
            |mut v| v.push(black_box(&record)),
            BatchSize::SmallInput,
        )
    });
    let ts = step.created_at;
    g.bench_function("chain_link_digest_given", |b| {
        b.iter(|| chain_hash(black_box(&genesis), black_box(&record.digest), 0, ts))
    });
    let payload = json!({"content": step.content, "input": step.input, "output": step.output});
    g.bench_function("jcs_of_payload", |b| {
        b.iter(|| jcs::to_vec(black_box(&payload)))
    });
    // What a size limit needs: the same writer, counting instead of
    // copying (every append measures each payload).
    g.bench_function("jcs_length_of_payload", |b| {
        b.iter(|| jcs::canonical_len(black_box(&payload)))
    });
    g.finish();

    let mut g = c.benchmark_group("merkle");
    g.throughput(Throughput::Elements(1));
    let leaf_input = [0x42u8; 64];
    g.bench_function("sha256_leaf_bytes", |b| {
        b.iter(|| Hash::sha256(black_box(&leaf_input)))
    });
    g.bench_function("frontier_append", |b| {
        let mut frontier = Frontier::new();
        let leaf = leaf_hash(&leaf_input);
        b.iter(|| frontier.push(black_box(leaf)))
    });
    let n: u64 = 1 << 20;
    let mut tree = MemoryTree::new();
    for i in 0..n {
        tree.push(leaf_hash(&i.to_be_bytes()));
    }
    let mut i = 0u64;
    g.bench_function("inclusion_proof_1m", |b| {
        b.iter(|| {
            i = (i + 7919) % n;
            inclusion_proof(&tree, black_box(i), n).unwrap()
        })
    });
    g.bench_function("consistency_proof_1m", |b| {
        b.iter(|| {
            i = (i + 7919) % (n - 4);
            consistency_proof(&tree, black_box(i + 1), n - 3).unwrap()
        })
    });
    g.finish();
}

/// Mean time per iteration of a finished benchmark, from criterion's output.
fn mean_ns(group: &str, name: &str) -> Option<f64> {
    let dir = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../target").to_owned());
    let path = format!("{dir}/criterion/{group}/{name}/new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["mean"]["point_estimate"].as_f64()
}

fn main() {
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    benches(&mut criterion);
    criterion.final_summary();

    let size = step_bytes(&kilobyte_step(0));
    println!("\nRatios against raw SHA-256 of the same bytes, measured in this run");
    println!("(throughput of the operation / throughput of the baseline; higher is better):");
    let rows = [
        ("step", "digest_and_chain", "step", "sha256_same_bytes"),
        ("step", "verify", "step", "sha256_same_bytes"),
        (
            "step",
            "chain_link_digest_given",
            "step",
            "sha256_same_bytes",
        ),
        ("merkle", "frontier_append", "merkle", "sha256_leaf_bytes"),
        (
            "merkle",
            "inclusion_proof_1m",
            "merkle",
            "sha256_leaf_bytes",
        ),
        (
            "merkle",
            "consistency_proof_1m",
            "merkle",
            "sha256_leaf_bytes",
        ),
    ];
    println!("| operation | time | per second | baseline | ratio |");
    println!("|---|---|---|---|---|");
    for (group, name, base_group, base) in rows {
        if let (Some(t), Some(b)) = (mean_ns(group, name), mean_ns(base_group, base)) {
            println!(
                "| {group}/{name} | {:.3} µs | {:.0} | {base} {:.3} µs | {:.3}× |",
                t / 1000.0,
                1e9 / t,
                b / 1000.0,
                b / t
            );
        }
    }
    println!("(step size: {size} bytes of canonical field values)");
}
