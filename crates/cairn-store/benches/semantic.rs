//! Semantic search and the embedder, in one run on this machine:
//!
//! 1. embedding throughput: the built-in word hash, and all-MiniLM-L6-v2 in
//!    process when a model directory is given (`CAIRN_EMBEDDING_MODEL` or
//!    `CAIRN_TEST_EMBEDDING_MODEL`), against SHA-256 of the same bytes;
//! 2. ingest with the embedder busy beside it: the same writers with and
//!    without a thread embedding the queue, acknowledgement latency and
//!    throughput of each, and how long the queue took to drain;
//! 3. search at `CAIRN_BENCH_VECTORS` embedded steps (default 100,000) of
//!    384 dimensions: from the store (the memory budget at 0), exact in
//!    memory, and through the HNSW graph, with the graph's recall@10
//!    against exact search.
//!
//! `cargo bench -p cairn-store --bench semantic --features model`
//! (`CAIRN_BENCH_PARTS=13` runs parts 1 and 3 only); `cargo test
//! --benches` runs it once, small.

// Benchmark fixtures: a failed unwrap is a broken benchmark.
#![allow(clippy::unwrap_used)]

use cairn_store::embed::{EmbedError, Embedder, WordHash};
use cairn_store::{
    Ledger, LedgerStore, NewStep, SequencerConfig, SqliteOptions, SqliteStore, WriteRequest,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const ORG: &str = "bench";
const DIMS: usize = 384;
const CLUSTERS: u64 = 200;

/// A step's text, about 200 characters.
fn text(i: u64) -> String {
    const WORDS: [&str; 16] = [
        "revenue", "orders", "customer", "refund", "pricing", "segment", "latency", "deploy",
        "cache", "forecast", "budget", "ticket", "invoice", "shipment", "churn", "retry",
    ];
    let pick = |k: u64| WORDS[((i.wrapping_mul(2_654_435_761) >> k) % 16) as usize];
    format!(
        "Decided to move the {} review to next week because the {} numbers for the {} team are late; \
         the {} dashboard shows {} trending down, so we wait for the {} report.",
        pick(3),
        pick(7),
        pick(11),
        pick(13),
        pick(17),
        pick(19)
    )
}

/// A deterministic unit vector near one of [`CLUSTERS`] centres.
fn vector(i: u64) -> Vec<f32> {
    let mut state = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f32 / (1u64 << 53) as f32 - 0.5
    };
    let centre = i % CLUSTERS;
    let mut v: Vec<f32> = (0..DIMS as u64)
        .map(|d| ((centre * 31 + d * 17) % 23) as f32 / 23.0 - 0.5 + 0.6 * next())
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// Synthetic 384-dimension vectors, numbered by the text's step number.
#[derive(Debug)]
struct Synthetic;

impl Embedder for Synthetic {
    fn id(&self) -> &str {
        "bench-384"
    }
    fn description(&self) -> &str {
        "synthetic"
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let n = t
                    .rsplit(' ')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                vector(n)
            })
            .collect())
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(feature = "model")]
fn model() -> Option<Arc<dyn Embedder>> {
    let dir = std::env::var_os("CAIRN_EMBEDDING_MODEL")
        .or_else(|| std::env::var_os("CAIRN_TEST_EMBEDDING_MODEL"))?;
    let model = cairn_store::sentence_model::SentenceModel::load(std::path::Path::new(&dir))
        .unwrap_or_else(|e| panic!("{e}"));
    Some(Arc::new(model))
}

/// Without the `model` feature there is no model to run.
#[cfg(not(feature = "model"))]
fn model() -> Option<Arc<dyn Embedder>> {
    None
}

fn throughput(embedder: &dyn Embedder, texts: &[String], batch: usize) -> f64 {
    let started = Instant::now();
    for chunk in texts.chunks(batch) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        embedder.embed(&refs).unwrap();
    }
    texts.len() as f64 / started.elapsed().as_secs_f64()
}

fn embedding_throughput(model: Option<&Arc<dyn Embedder>>, quick: bool) {
    let texts: Vec<String> = (0..if quick { 64 } else { 2_000 }).map(text).collect();
    let bytes: usize = texts.iter().map(String::len).sum();
    let started = Instant::now();
    for t in &texts {
        std::hint::black_box(cairn_core::Hash::sha256(t.as_bytes()));
    }
    let sha = texts.len() as f64 / started.elapsed().as_secs_f64();
    println!(
        "\n1. Embedding throughput ({} texts of {} bytes on average)",
        texts.len(),
        bytes / texts.len()
    );
    println!("   SHA-256 of the same bytes     {sha:>12.0} texts/s (baseline)");
    let hashed = throughput(&WordHash, &texts, 32);
    println!(
        "   word-hash (built-in)          {hashed:>12.0} texts/s ({:.3}x SHA-256)",
        hashed / sha
    );
    if let Some(model) = model {
        let texts = &texts[..if quick { 32 } else { 512 }];
        let rate = throughput(model.as_ref(), texts, 32);
        println!(
            "   {} {rate:>8.0} texts/s (batches of 32)",
            model.description()
        );
    } else {
        println!("   (no model: set CAIRN_EMBEDDING_MODEL to a model directory to measure one)");
    }
}

fn decision(i: u64) -> NewStep {
    NewStep {
        org_id: ORG.into(),
        session_id: format!("s{}", i % 100),
        agent_id: "agent".into(),
        kind_label: "Decision".into(),
        content: Some(format!("{} {i}", text(i))),
        caller: "bench".into(),
        ..NewStep::default()
    }
}

/// `writers` threads write `per_writer` decisions each; with `embedder`,
/// a thread embeds the queue meanwhile. Returns acknowledgement
/// latencies, throughput, and the time the queue took to drain after.
fn ingest(
    writers: u64,
    per_writer: u64,
    embedder: Option<Arc<dyn Embedder>>,
) -> (Vec<Duration>, f64, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn LedgerStore> =
        Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap());
    let ledger = Arc::new(Ledger::new(Arc::clone(&store), SequencerConfig::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let worker = embedder.clone().map(|embedder| {
        let store = Arc::clone(&store);
        let stop = Arc::clone(&stop);
        // As the server's worker runs it: the model at the lowest priority.
        let embedder = cairn_store::background::LowPriorityEmbedder::new(embedder);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let round = cairn_store::ops::embed_queued(store.as_ref(), &embedder, 32).unwrap();
                if round.settled == 0 {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        })
    });
    let started = Instant::now();
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let ledger = Arc::clone(&ledger);
            std::thread::spawn(move || {
                let mut latencies = Vec::with_capacity(per_writer as usize);
                for i in 0..per_writer {
                    let step = decision(w * per_writer + i);
                    let t = Instant::now();
                    ledger.write(WriteRequest::Step(Box::new(step))).unwrap();
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let elapsed = started.elapsed();
    let rate = latencies.len() as f64 / elapsed.as_secs_f64();
    latencies.sort();
    let drained = match (worker, embedder) {
        (Some(worker), Some(_)) => {
            while store.embedding_backlog().unwrap().waiting > 0 {
                std::thread::sleep(Duration::from_millis(10));
            }
            stop.store(true, Ordering::Relaxed);
            worker.join().unwrap();
            started.elapsed()
        }
        _ => Duration::ZERO,
    };
    (latencies, rate, drained)
}

fn ingest_beside_the_embedder(model: Option<&Arc<dyn Embedder>>, quick: bool) {
    let (writers, per) = if quick { (4, 50) } else { (16, 1_000) };
    let embedder: Arc<dyn Embedder> = model.cloned().unwrap_or_else(|| Arc::new(WordHash));
    println!(
        "\n2. Ingest of {} decisions (all queued for embedding) by {writers} writers, durable",
        writers * per
    );
    let (alone, alone_rate, _) = ingest(writers, per, None);
    let (busy, busy_rate, drained) = ingest(writers, per, Some(Arc::clone(&embedder)));
    for (what, lat, rate) in [
        ("no embedder running", &alone, alone_rate),
        ("embedder busy beside it", &busy, busy_rate),
    ] {
        println!(
            "   {what:<26} {rate:>8.0} steps/s  ack p50 {:.2} ms  p99 {:.2} ms",
            ms(percentile(lat, 0.5)),
            ms(percentile(lat, 0.99))
        );
    }
    println!(
        "   ratio busy/alone: throughput {:.2}x, p99 {:.2}x; the queue ({}) drained {:.1} s after ingest began",
        busy_rate / alone_rate,
        ms(percentile(&busy, 0.99)) / ms(percentile(&alone, 0.99)).max(1e-9),
        embedder.description(),
        drained.as_secs_f64()
    );
}

fn search_latency(store: &SqliteStore, queries: &[Vec<f32>]) -> (Vec<Duration>, Vec<Vec<u64>>) {
    let mut latencies = Vec::new();
    let mut answers = Vec::new();
    for q in queries {
        let t = Instant::now();
        let hits = store.semantic_search(ORG, "bench-384", q, 10).unwrap();
        latencies.push(t.elapsed());
        answers.push(hits.into_iter().map(|(seq, _)| seq).collect());
    }
    latencies.sort();
    (latencies, answers)
}

fn semantic_at_scale(n: u64, quick: bool) {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    {
        let store: Arc<dyn LedgerStore> =
            Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap());
        let ledger = Arc::new(Ledger::new(Arc::clone(&store), SequencerConfig::default()));
        let writers = 32;
        let threads: Vec<_> = (0..writers)
            .map(|w| {
                let ledger = Arc::clone(&ledger);
                std::thread::spawn(move || {
                    let mut i = w;
                    while i < n {
                        ledger
                            .write(WriteRequest::Step(Box::new(decision(i))))
                            .unwrap();
                        i += writers;
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        cairn_store::ops::drain_queue(store.as_ref(), &Synthetic, 1_000, &mut |_| {}).unwrap();
    }
    println!(
        "\n3. Semantic search over {n} embedded steps of {DIMS} dimensions (stored in {:.0} s)",
        started.elapsed().as_secs_f64()
    );
    let open = |memory: usize, graph_min: usize| {
        SqliteStore::open(
            dir.path(),
            SqliteOptions {
                sequencer: false,
                vector_memory_bytes: memory,
                vector_graph_min: graph_min,
                ..SqliteOptions::default()
            },
        )
        .unwrap()
    };
    let queries: Vec<Vec<f32>> = (0..if quick { 10 } else { 100 })
        .map(|q| vector(10_000_000 + q))
        .collect();
    let disk = open(0, usize::MAX);
    let (disk_lat, _) = search_latency(&disk, &queries[..queries.len().min(20)]);
    drop(disk);
    let exact = open(usize::MAX, usize::MAX);
    let t = Instant::now();
    exact
        .semantic_search(ORG, "bench-384", &queries[0], 10)
        .unwrap();
    let load = t.elapsed();
    let (exact_lat, truth) = search_latency(&exact, &queries);
    drop(exact);
    let graph = open(usize::MAX, 10_000.min(n as usize / 2));
    graph
        .semantic_search(ORG, "bench-384", &queries[0], 10)
        .unwrap();
    let t = Instant::now();
    while graph.vector_graph_covers(ORG, "bench-384") != Some(n as usize) {
        assert!(t.elapsed() < Duration::from_secs(3_600), "no graph");
        std::thread::sleep(Duration::from_millis(50));
    }
    let built = t.elapsed();
    let (graph_lat, found) = search_latency(&graph, &queries);
    let (mut hit, mut wanted) = (0, 0);
    for (t, f) in truth.iter().zip(&found) {
        wanted += t.len();
        hit += t.iter().filter(|s| f.contains(s)).count();
    }
    for (what, lat) in [
        ("from the store (over budget)", &disk_lat),
        ("exact, in memory", &exact_lat),
        ("HNSW graph", &graph_lat),
    ] {
        println!(
            "   {what:<30} p50 {:>8.2} ms  p99 {:>8.2} ms",
            ms(percentile(lat, 0.5)),
            ms(percentile(lat, 0.99))
        );
    }
    println!(
        "   loading {n} vectors into memory took {:.0} ms; building the graph {:.1} s in the background",
        ms(load),
        built.as_secs_f64()
    );
    println!(
        "   graph recall@10 against exact: {:.3} over {} queries",
        hit as f64 / wanted as f64,
        queries.len()
    );
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let n: u64 = if quick {
        3_000
    } else {
        std::env::var("CAIRN_BENCH_VECTORS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000)
    };
    // CAIRN_BENCH_PARTS picks parts (default all: "123").
    let parts = std::env::var("CAIRN_BENCH_PARTS").unwrap_or_else(|_| "123".into());
    let model = model();
    if parts.contains('1') {
        embedding_throughput(model.as_ref(), quick);
    }
    if parts.contains('2') {
        ingest_beside_the_embedder(model.as_ref(), quick);
    }
    if parts.contains('3') {
        semantic_at_scale(n, quick);
    }
}
