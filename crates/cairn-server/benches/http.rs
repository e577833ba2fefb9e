//! HTTP load benchmark: appends per second through the API with 64
//! concurrent keep-alive clients (single steps and batches), p50/p99
//! latency at peak and at half of peak, as ratios to the store's direct
//! ingest rate (the same steps through the `Ledger`, from 64 threads)
//! measured in the same run. Everything runs on loopback.
//!
//! Each phase starts from a settled store: the full-text index has
//! written what the previous phase queued (a search flushes it) and a
//! second has passed, so that a phase measures its own load, not the
//! previous phase's backlog (the batches of 100 queue hundreds of MB of
//! documents, which the index thread then tokenizes beside the next phase).
//!
//! `cargo bench -p cairn-server --bench http` (`CAIRN_BENCH_SECONDS`
//! changes the length of each phase).

// Benchmark fixtures: a failed unwrap is a broken benchmark.
#![allow(clippy::unwrap_used)]

use cairn_server::{AppState, ServerConfig};
use cairn_store::{
    Ledger, LedgerStore, NewStep, SequencerConfig, SqliteOptions, SqliteStore, WriteRequest,
};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Lets the store settle between phases: the full-text index writes what
/// is queued (a search flushes the queue first), then a second passes.
fn settle(store: &dyn LedgerStore) {
    let query = cairn_store::fulltext::FullTextQuery::parse("revenue").unwrap();
    store
        .full_text_search("bench", &query, &cairn_store::StepFilter::default(), 1)
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
}

const CLIENTS: usize = 64;
const BATCH: usize = 100;

fn content(i: usize) -> String {
    format!(
        "{i}: The revenue data shows a clear upward trend in Q4, driven primarily by the enterprise segment which grew 23% QoQ. {}",
        "x".repeat(700)
    )
}

fn step_json(client: usize, i: usize) -> String {
    serde_json::json!({
        "session_id": format!("session-{client}"),
        "agent_id": format!("agent-{client}"),
        "step_type": "Reasoning",
        "content": content(i),
        "confidence": 0.9,
    })
    .to_string()
}

/// One keep-alive HTTP/1.1 connection.
struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        Conn {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    fn post(&mut self, path: &str, token: &str, body: &str) -> u16 {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        self.writer.write_all(head.as_bytes()).unwrap();
        self.writer.write_all(body.as_bytes()).unwrap();
        let mut status_line = String::new();
        self.reader.read_line(&mut status_line).unwrap();
        let status: u16 = status_line.split(' ').nth(1).unwrap().parse().unwrap();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0u8; length];
        self.reader.read_exact(&mut body).unwrap();
        status
    }
}

struct Run {
    steps_per_sec: f64,
    p50: Duration,
    p99: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// 64 clients for `seconds`; each sends `per_request` steps per request;
/// `pace` (requests per second per client) throttles them if given.
fn load(
    addr: SocketAddr,
    token: &str,
    seconds: f64,
    per_request: usize,
    pace: Option<f64>,
    tag: &str,
) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let token = token.to_owned();
            let stop = Arc::clone(&stop);
            let tag = tag.to_owned();
            std::thread::spawn(move || {
                let mut conn = Conn::open(addr);
                let mut latencies = Vec::new();
                let mut steps = 0usize;
                let mut i = 0usize;
                let interval = pace.map(|p| Duration::from_secs_f64(1.0 / p));
                // Paced clients start their schedules spread evenly over one
                // interval: started together, all 64 fired at the same
                // instant every interval, a burst of 64 requests instead of
                // a steady rate.
                let mut next = Instant::now()
                    + interval.map_or(Duration::ZERO, |i| i * c as u32 / CLIENTS as u32);
                while !stop.load(Ordering::Relaxed) {
                    if let Some(interval) = interval {
                        let now = Instant::now();
                        if now < next {
                            std::thread::sleep(next - now);
                        }
                        next += interval;
                    }
                    let session = format!("{tag}-{c}");
                    let (path, body) = if per_request == 1 {
                        (
                            "/v1/steps",
                            step_json(0, i)
                                .replace("session-0", &session)
                                .replace("agent-0", &format!("agent-{c}")),
                        )
                    } else {
                        let items: Vec<String> = (0..per_request)
                            .map(|k| {
                                step_json(0, i + k)
                                    .replace("session-0", &session)
                                    .replace("agent-0", &format!("agent-{c}"))
                            })
                            .collect();
                        ("/v1/steps/batch", format!("[{}]", items.join(",")))
                    };
                    let t = Instant::now();
                    let status = conn.post(path, &token, &body);
                    latencies.push(t.elapsed());
                    assert!(status == 201 || status == 200, "status {status}");
                    steps += per_request;
                    i += per_request;
                }
                (steps, latencies)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    let mut steps = 0;
    let mut latencies = Vec::new();
    for t in threads {
        let (s, l) = t.join().unwrap();
        steps += s;
        latencies.extend(l);
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort();
    Run {
        steps_per_sec: steps as f64 / elapsed,
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
    }
}

fn direct(ledger: &Arc<Ledger>, seconds: f64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let ledger = Arc::clone(ledger);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let step = NewStep {
                        org_id: "bench".into(),
                        session_id: format!("direct-{c}"),
                        agent_id: format!("agent-{c}"),
                        kind_label: "Reasoning".into(),
                        content: Some(content(n)),
                        confidence: Some(0.9),
                        caller: "bench".into(),
                        ..NewStep::default()
                    };
                    ledger.write(WriteRequest::Step(Box::new(step))).unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    total as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let seconds: f64 = std::env::var("CAIRN_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 5.0 } else { 0.3 });
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn LedgerStore> =
        Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap());
    let token = cairn_server::bootstrap_admin_key(store.as_ref(), "bench")
        .unwrap()
        .unwrap();
    let ledger = Arc::new(Ledger::new(Arc::clone(&store), SequencerConfig::default()));
    // One key drives 64 clients at the server's peak: its per-key rate
    // limit is off here, as this measures throughput, not fairness.
    let config = ServerConfig {
        limits: cairn_server::Limits {
            rate_per_second: 0,
            ..cairn_server::Limits::default()
        },
        ..ServerConfig::default()
    };
    let state = AppState::new(Arc::clone(&ledger), config);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            ready_tx.send(listener.local_addr().unwrap()).unwrap();
            cairn_server::serve(listener, state, async {
                let _ = stop_rx.await;
            })
            .await
            .unwrap();
        });
    });
    let addr = ready_rx.recv().unwrap();

    let direct_rate = direct(&ledger, seconds);
    settle(store.as_ref());
    let single = load(addr, &token, seconds, 1, None, "single");
    settle(store.as_ref());
    let batched = load(addr, &token, seconds, BATCH, None, "batched");
    settle(store.as_ref());
    // Half of the single-step peak, spread evenly over the clients.
    let half = load(
        addr,
        &token,
        seconds,
        1,
        Some(single.steps_per_sec / 2.0 / CLIENTS as f64),
        "half",
    );
    let _ = stop_tx.send(());
    server.join().unwrap();

    println!(
        "HTTP appends, {CLIENTS} concurrent keep-alive clients, {seconds} s per phase, ~900-byte steps"
    );
    println!("| what | steps/s | p50 | p99 | ratio to direct ingest |");
    println!("|---|---|---|---|---|");
    println!(
        "| direct ingest (Ledger, {CLIENTS} threads): baseline | {direct_rate:.0} | | | 1.00× |"
    );
    for (name, run) in [
        ("HTTP single-step, peak", &single),
        ("HTTP batches of 100, peak", &batched),
        ("HTTP single-step at half of peak", &half),
    ] {
        println!(
            "| {name} | {:.0} | {:.2} ms | {:.2} ms | {:.2}× |",
            run.steps_per_sec,
            run.p50.as_secs_f64() * 1e3,
            run.p99.as_secs_f64() * 1e3,
            run.steps_per_sec / direct_rate
        );
    }
}
