//! What the scale benchmarks (`scale.rs`, the embedded store;
//! `pg_scale.rs`, PostgreSQL) share: the workload (sessions dealt to orgs
//! and agents, steps of ~900 bytes), the growth through the `Ledger`,
//! every measurement made through the `LedgerStore` trait, the milestone
//! loop and the tables. Each backend brings its store and its raw
//! baselines ([`Backend`], [`RawReads`]).

use cairn_core::bundle::{BundleVerifier, bundle_lines};
use cairn_core::commit::{FIELDS, write_field_value};
use cairn_core::merkle::{verify_consistency, verify_inclusion};
use cairn_store::ops::{ExportScope, export, trusted_checkpoint, verify_org};
use cairn_store::{
    Ledger, LedgerStore, NewStep, SessionCursor, SessionFilter, StoredCheckpoint, WriteRequest,
};
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

const ORGS: u64 = 10;
const AGENTS: u64 = 100;
const MEAN_SESSION: u64 = 100;
const REPLAY_STEPS: u64 = 1_000;
const REPLAY_SESSION: &str = "replay-1000";
pub const ORG0: &str = "org-0";
const WRITERS: usize = 64;
const IN_FLIGHT: usize = 64;
pub const PAGE: usize = 50;
const KINDS: &str = "Observation Reasoning ToolCall ToolResult Decision";
const CONTENT: &str = "The revenue data shows a clear upward trend in Q4, driven primarily by the enterprise segment which grew 23% QoQ. Mid-market held steady while SMB declined 5%, concentrated in three accounts that churned after the pricing change. ";

/// A deterministic mix (splitmix64), for lengths, agents and samples.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Clone)]
struct Session {
    id: String,
    org: u64,
    agent: u64,
    steps: u64,
    n: u64,
}

/// Session `n`: orgs in turn; one session in ten of an org is agent 0's.
fn session(n: u64, steps: u64) -> Session {
    let local = n / ORGS;
    let agent = if local.is_multiple_of(10) {
        0
    } else {
        1 + mix(n) % (AGENTS - 1)
    };
    Session {
        id: format!("s-{n:08}"),
        org: n % ORGS,
        agent,
        steps,
        n,
    }
}

/// Sessions of 50 to 150 steps (100 on average) holding `steps` in all.
fn plan(next: &mut u64, mut steps: u64) -> Vec<Session> {
    let mut out = Vec::new();
    while steps > 0 {
        let mut len = MEAN_SESSION / 2 + mix(*next ^ 0x5eed) % (MEAN_SESSION + 1);
        if steps < len + MEAN_SESSION / 2 {
            len = steps;
        }
        out.push(session(*next, len));
        *next += 1;
        steps -= len;
    }
    out
}

/// About 900 bytes of text, rotated per step so that pages differ.
pub fn content(key: u64) -> String {
    let cut = (mix(key) % CONTENT.len() as u64) as usize;
    let turned = format!("{}{}", &CONTENT[cut..], &CONTENT[..cut]);
    format!("{key}: {}", turned.repeat(4))
}

fn new_step(s: &Session, index: u64) -> NewStep {
    NewStep {
        org_id: format!("org-{}", s.org),
        session_id: s.id.clone(),
        agent_id: format!("agent-{}", s.agent),
        kind_label: KINDS.split(' ').nth((index % 5) as usize).unwrap().into(),
        content: Some(content(s.n.wrapping_mul(1 << 20) + index)),
        confidence: Some(0.9),
        model: Some("gpt-4o".into()),
        caller: "bench".into(),
        ..NewStep::default()
    }
}

/// Resets the kernel's peak RSS of this process to its current RSS.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// A `/proc/self/status` figure (`VmHWM`, `VmRSS`) in MB.
fn vm_mb(key: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The median and the 99th percentile of `times`.
fn p50_p99(mut times: Vec<Duration>) -> (Duration, Duration) {
    times.sort_unstable();
    let at = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.99))
}

/// `runs` timings of `f`.
fn timed(runs: usize, mut f: impl FnMut()) -> Vec<Duration> {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect()
}

/// What a backend's tables call its parts.
pub struct Labels {
    /// The first words of the title line ("Scale of the embedded store").
    pub title: &'static str,
    /// Said after the title line's first sentence (may be empty).
    pub note: &'static str,
    /// The raw ingest baseline's column.
    pub raw_insert: &'static str,
    /// The bytes-stored column.
    pub disk: &'static str,
    /// The start column, and its raw twin.
    pub open: &'static str,
    pub raw_open: &'static str,
}

/// A store under test and its raw baselines.
pub trait Backend {
    const LABELS: Labels;
    /// Opens the store with its sequencer, as `cairn serve` starts.
    fn open_ledger(&mut self) -> Ledger;
    /// Writes `total` rows shaped like the store's, `batch` rows per
    /// durable transaction, without the store (and removes them): rows/s.
    fn raw_inserts(&mut self, batch: usize, total: u64) -> f64;
    /// The bytes the store takes.
    fn disk_bytes(&mut self) -> u64;
    /// Where those bytes go (by table and index), if the backend says.
    fn disk_parts(&mut self) -> Option<String> {
        None
    }
    /// The raw twin of the measurements' reads.
    fn raw(&mut self) -> Box<dyn RawReads>;
    /// The store opened for reading (not sequenced).
    fn reader(&mut self) -> Box<dyn LedgerStore>;
    /// Opens (connects) without the store and reads the last row.
    fn raw_last_row(&mut self);
    /// Where the store's slowest batches spent their time, if it says.
    fn batch_parts(&self) -> Option<String> {
        None
    }
    /// Does the database's own work after a bulk load now (PostgreSQL's
    /// vacuum and analyze), so that the measurements see the store at rest
    /// rather than sharing two cores with it; says what it did, if
    /// anything.
    fn settle(&mut self) -> Option<String> {
        None
    }
}

/// Reads org 0's rows at some seqs (see [`RawReads::rows_reader`]).
pub type RowsReader<'a> = Box<dyn FnMut(&[u64]) + 'a>;
/// Reads a leaf hash of org 0 by seq (see [`RawReads::leaf_reader`]).
pub type LeafReader<'a> = Box<dyn FnMut(u64) + 'a>;

/// Raw reads of org 0's rows, beside the store's.
pub trait RawReads {
    /// Sessions in the store.
    fn sessions(&mut self) -> u64;
    /// Reads every row of org 0 in order, optionally with SHA-256 over
    /// each row's bytes: (rows, bytes, time).
    fn scan(&mut self, hash: bool) -> (u64, u64, Duration);
    /// Reads the rows of org 0 at these seqs (its statement prepared once).
    fn rows_reader(&mut self) -> RowsReader<'_>;
    /// Reads the leaf hash of org 0's entry at a seq (prepared once).
    fn leaf_reader(&mut self) -> LeafReader<'_>;
    /// Agent 0's first listing page of org 0 from the sessions table: rows.
    fn first_page(&mut self) -> usize;
}

#[derive(Default)]
struct Growth {
    steps: u64,
    steps_per_sec: f64,
    mean_batch: f64,
    raw_per_sec: f64,
    peak_mb: f64,
    secs: f64,
    /// With the checkpoints signed after it and the raw baseline.
    total_secs: f64,
    /// Checkpoints of org 0 signed during the increment, and the intervals
    /// between them (s) and leaves each added.
    checkpoints: usize,
    intervals: Vec<f64>,
    leaves: Vec<u64>,
    /// The sequencer's longest batch write and longest round of
    /// maintenance (checkpoint signing) in the increment, s: what a gap in
    /// the cadence waited on.
    slowest_batch: f64,
    slowest_maintenance: f64,
}

/// Writes `sessions` through `ledger`: `WRITERS` threads, each keeping up
/// to `IN_FLIGHT` steps submitted and not yet acknowledged.
fn grow(ledger: &Ledger, sessions: &[Session], backend: &mut impl Backend) -> Growth {
    let (batches0, requests0) = (
        ledger.stats().batches.load(Relaxed),
        ledger.stats().requests.load(Relaxed),
    );
    let steps: u64 = sessions.iter().map(|s| s.steps).sum();
    reset_peak();
    let from = cairn_store::now();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            scope.spawn(move || {
                let mut pending = VecDeque::with_capacity(IN_FLIGHT);
                for s in sessions.iter().skip(w).step_by(WRITERS) {
                    for i in 0..s.steps {
                        if pending.len() == IN_FLIGHT {
                            let p: cairn_store::Pending = pending.pop_front().unwrap();
                            p.wait().unwrap();
                        }
                        let step = WriteRequest::Step(Box::new(new_step(s, i)));
                        pending.push_back(ledger.submit(step));
                    }
                }
                for p in pending {
                    p.wait().unwrap();
                }
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let to = cairn_store::now();
    let peak_mb = vm_mb("VmHWM");
    let slowest_batch = ledger.stats().slowest_batch_micros.load(Relaxed) as f64 / 1e6;
    let slowest_maintenance = ledger.stats().slowest_maintenance_micros.load(Relaxed) as f64 / 1e6;
    let batches = (ledger.stats().batches.load(Relaxed) - batches0).max(1) as f64;
    let requests = (ledger.stats().requests.load(Relaxed) - requests0) as f64;
    let cps: Vec<StoredCheckpoint> = ledger
        .store()
        .checkpoints(ORG0)
        .unwrap()
        .into_iter()
        .filter(|c| c.created_at >= from && c.created_at <= to)
        .collect();
    // Sign a checkpoint of every org at its full size, for the
    // measurements (proofs, exports, verification cover everything).
    for org in ledger.store().orgs().unwrap() {
        ledger
            .write(WriteRequest::Checkpoint { org_id: org })
            .unwrap();
    }
    let mean_batch = requests / batches;
    let raw_per_sec = backend.raw_inserts(mean_batch.round().max(1.0) as usize, steps);
    Growth {
        steps,
        steps_per_sec: steps as f64 / secs,
        mean_batch,
        raw_per_sec,
        peak_mb,
        secs,
        total_secs: started.elapsed().as_secs_f64(),
        checkpoints: cps.len(),
        intervals: cps
            .windows(2)
            .map(|w| (w[1].created_at.as_micros() - w[0].created_at.as_micros()) as f64 / 1e6)
            .collect(),
        leaves: cps.windows(2).map(|w| w[1].size - w[0].size).collect(),
        slowest_batch,
        slowest_maintenance,
    }
}

/// Everything measured at one milestone.
#[derive(Default)]
struct Row {
    steps: u64,
    sessions: u64,
    org_entries: u64,
    growth: Growth,
    disk_per_step: f64,
    json_per_step: f64,
    verify_rate: f64,
    raw_scan_rate: f64,
    verify_peak_mb: f64,
    rss_before_verify_mb: f64,
    replay: Duration,
    raw_replay: Duration,
    agent_sessions: usize,
    first_page: (Duration, Duration),
    deep_page: (Duration, Duration, usize),
    org_deep_page: (Duration, Duration, usize),
    raw_page: Duration,
    inclusion: (Duration, Duration),
    consistency: (Duration, Duration),
    proof_hashes: f64,
    raw_point_reads: Duration,
    session_export: (u64, Duration),
    org_export: (u64, Duration),
    raw_org_read: (u64, Duration),
    open: Duration,
    raw_open: Duration,
    first_write: Duration,
    second_write: Duration,
    measure_secs: f64,
}

/// A sink that counts bytes (and keeps them when asked, to verify).
struct Sink {
    bytes: u64,
    kept: Option<Vec<u8>>,
}

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes += buf.len() as u64;
        if let Some(kept) = &mut self.kept {
            kept.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Exports `scope` of org 0 against `cp`; checks the bundle if `check`.
fn export_org0(
    store: &dyn LedgerStore,
    scope: &ExportScope,
    cp: &StoredCheckpoint,
    check: bool,
) -> (u64, Duration) {
    let mut sink = Sink {
        bytes: 0,
        kept: check.then(Vec::new),
    };
    let started = Instant::now();
    let now = cairn_store::now();
    let summary = export(store, ORG0, scope, cp, now, &mut sink, &mut |_| {}).unwrap();
    let elapsed = started.elapsed();
    assert!(
        summary.entries > 0 && sink.bytes > 0,
        "{scope:?}: empty export"
    );
    if let Some(bytes) = sink.kept {
        let mut verifier = BundleVerifier::new(vec![store.server_key().clone()]);
        for line in bundle_lines(&bytes) {
            verifier.push_bytes(line);
        }
        let verdict = verifier.finish().verdict;
        assert!(verdict.verified, "{scope:?}: {:?}", verdict.failure);
    }
    (sink.bytes, elapsed)
}

/// The step's canonical JSON: its fields object in RFC 8785 form.
fn canonical_len(record: &cairn_core::commit::StepRecord) -> usize {
    let mut fields = serde_json::Map::new();
    let mut scratch = Vec::new();
    for field in FIELDS {
        scratch.clear();
        write_field_value(&record.step, field, &mut scratch);
        fields.insert(
            field.name().into(),
            serde_json::from_slice(&scratch).unwrap(),
        );
    }
    cairn_core::jcs::canonical_len(&serde_json::Value::Object(fields))
}

/// Times listings of `filter` after the session at `position` (the first
/// page when 0): (p50, p99).
fn list_times(
    store: &dyn LedgerStore,
    all: &[cairn_store::SessionSummary],
    agent: Option<&str>,
    position: usize,
    runs: usize,
) -> (Duration, Duration) {
    let filter = SessionFilter {
        after: position
            .checked_sub(1)
            .and_then(|p| all.get(p))
            .map(SessionCursor::after),
        ..SessionFilter::agent(agent)
    };
    p50_p99(timed(runs, || {
        let page = store.list_sessions(ORG0, &filter, PAGE).unwrap();
        assert!(!page.is_empty() || position >= all.len());
    }))
}

/// Every read-side measurement at a milestone, on a store opened for
/// reading, beside its raw twin.
fn measure(
    store: &dyn LedgerStore,
    raw: &mut dyn RawReads,
    row: &mut Row,
    runs: usize,
    proofs: u64,
    check: bool,
) {
    row.sessions = raw.sessions();

    // Verification, after the raw baseline (both with a warm cache).
    let (rows, _, elapsed) = raw.scan(true);
    row.raw_scan_rate = rows as f64 / elapsed.as_secs_f64();
    row.rss_before_verify_mb = vm_mb("VmRSS");
    reset_peak();
    let started = Instant::now();
    let verdict = verify_org(store, ORG0, &[], &[], &mut |_| {}).unwrap();
    let elapsed = started.elapsed();
    row.verify_peak_mb = vm_mb("VmHWM");
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
    assert_eq!(verdict.log_size, rows);
    row.org_entries = rows;
    row.verify_rate = rows as f64 / elapsed.as_secs_f64();

    // Replay of the 1,000-step session, against its rows read raw.
    let mut seqs = Vec::new();
    let mut json = 0;
    store
        .read_session(ORG0, REPLAY_SESSION, &mut |s| {
            seqs.push(s.seq);
            json += canonical_len(&s.record);
            true
        })
        .unwrap();
    assert_eq!(seqs.len() as u64, REPLAY_STEPS);
    row.json_per_step = json as f64 / seqs.len() as f64;
    row.replay = p50_p99(timed(runs, || {
        let mut n = 0;
        store
            .read_session(ORG0, REPLAY_SESSION, &mut |_| {
                n += 1;
                true
            })
            .unwrap();
        assert_eq!(n, REPLAY_STEPS);
    }))
    .0;
    {
        let mut read_rows = raw.rows_reader();
        row.raw_replay = p50_p99(timed(runs, || read_rows(&seqs))).0;
    }

    // Listing agent 0's sessions, and the whole org half-way down.
    let agent = store
        .list_sessions(ORG0, &SessionFilter::agent(Some("agent-0")), usize::MAX)
        .unwrap();
    let everyone = store
        .list_sessions(ORG0, &SessionFilter::all(), usize::MAX)
        .unwrap();
    row.agent_sessions = agent.len();
    let lists = runs * 10;
    row.first_page = list_times(store, &agent, Some("agent-0"), 0, lists);
    let (mid, org_mid) = (agent.len() / 2, everyone.len() / 2);
    let (p50, p99) = list_times(store, &agent, Some("agent-0"), mid, lists);
    row.deep_page = (p50, p99, mid);
    let (p50, p99) = list_times(store, &everyone, None, org_mid, lists);
    row.org_deep_page = (p50, p99, org_mid);
    row.raw_page = p50_p99(timed(lists, || {
        assert!(raw.first_page() > 0);
    }))
    .0;

    // Proofs at random leaves and sizes of the latest checkpoint.
    let cp = store.latest_checkpoint(ORG0).unwrap().unwrap();
    let signed = trusted_checkpoint(store, ORG0, &cp.note, &[]).unwrap();
    let (size, root) = (signed.checkpoint().size, signed.checkpoint().root);
    assert_eq!(size, rows, "the checkpoint covers the whole log");
    let mut hashes = 0usize;
    let mut times = Vec::new();
    for k in 0..proofs {
        let seq = mix(k ^ size) % size;
        let started = Instant::now();
        let proof = store.inclusion_proof(ORG0, seq, size).unwrap();
        times.push(started.elapsed());
        hashes += proof.len();
        if k < 20 {
            let mut leaf = None;
            store
                .read_log(ORG0, seq, seq + 1, &mut |e| {
                    leaf = Some(e.entry.unwrap().leaf_hash());
                    false
                })
                .unwrap();
            verify_inclusion(&leaf.unwrap(), seq, size, &proof, &root).unwrap();
        }
    }
    row.inclusion = p50_p99(times);
    row.proof_hashes = hashes as f64 / proofs as f64;
    let mut k = 0u64;
    row.consistency = p50_p99(timed(proofs as usize, || {
        k += 1;
        let old = 1 + mix(k ^ size ^ 0xc0) % (size - 1);
        std::hint::black_box(store.consistency_proof(ORG0, old, size).unwrap());
    }));
    // Older signed checkpoints against the latest.
    let older = store.checkpoints(ORG0).unwrap();
    let stride = (older.len() / 20).max(1);
    for old in older.iter().filter(|c| c.size < size).step_by(stride) {
        let old_root = trusted_checkpoint(store, ORG0, &old.note, &[])
            .unwrap()
            .checkpoint()
            .root;
        let proof = store.consistency_proof(ORG0, old.size, size).unwrap();
        verify_consistency(old.size, size, &old_root, &root, &proof).unwrap();
    }
    let reads = row.proof_hashes.round().max(1.0) as u64;
    {
        let mut leaf = raw.leaf_reader();
        let mut k = 0u64;
        row.raw_point_reads = p50_p99(timed(proofs as usize, || {
            for _ in 0..reads {
                k += 1;
                leaf(mix(k) % size);
            }
        }))
        .0;
    }

    // Exports: the session (a partial bundle, one proof per entry) and
    // the whole org; the raw twins read the same rows.
    let session = ExportScope::Session(REPLAY_SESSION.into());
    row.session_export = export_org0(store, &session, &cp, true);
    row.org_export = export_org0(store, &ExportScope::All, &cp, check);
    let (_, bytes, raw) = raw.scan(false);
    row.raw_org_read = (bytes, raw);
}

/// Reopens the store to sequence it, as `cairn serve` starts; times the
/// open and the first two writes (to an existing session of org 0).
fn start(backend: &mut impl Backend, row: &mut Row, probe: &mut Session) -> Ledger {
    let started = Instant::now();
    backend.raw_last_row();
    row.raw_open = started.elapsed();
    let started = Instant::now();
    let ledger = backend.open_ledger();
    row.open = started.elapsed();
    for time in [&mut row.first_write, &mut row.second_write] {
        let started = Instant::now();
        let step = WriteRequest::Step(Box::new(new_step(probe, probe.steps)));
        ledger.write(step).unwrap();
        *time = started.elapsed();
        probe.steps += 1;
    }
    ledger
}

/// The milestones, and whether this is `cargo test --benches` (tiny, and
/// checking every answer).
pub fn milestones() -> (Vec<u64>, bool) {
    if !std::env::args().any(|a| a == "--bench") {
        // `cargo test --benches`: once, tiny, checking every answer.
        return (vec![2_000, 5_000], true);
    }
    if let Ok(list) = std::env::var("CAIRN_BENCH_SCALE_MILESTONES") {
        let mut m: Vec<u64> = list
            .split(',')
            .map(|v| v.trim().replace('_', "").parse().unwrap())
            .collect();
        m.sort_unstable();
        return (m, false);
    }
    let mut m = vec![10_000, 100_000, 1_000_000];
    if std::env::var("CAIRN_BENCH_SCALE").is_ok_and(|v| v == "full") {
        m.push(10_000_000);
    }
    (m, false)
}

/// Grows the store through `milestones`, measuring at each, and prints
/// the tables. `name` prefixes the progress lines.
pub fn run<B: Backend>(backend: &mut B, name: &str, milestones: &[u64], test: bool) {
    assert!(
        milestones[0] > REPLAY_STEPS,
        "the first milestone holds the 1,000-step session"
    );
    let (runs, proofs) = if test { (3, 50) } else { (21, 1_000) };
    let bench_started = Instant::now();
    let mut next = 0u64;
    let mut written = 0u64;
    let mut ledger = backend.open_ledger();
    let mut probe: Option<Session> = None;
    let mut rows: Vec<Row> = Vec::new();
    for (i, &target) in milestones.iter().enumerate() {
        let mut sessions = Vec::new();
        if i == 0 {
            sessions.push(Session {
                id: REPLAY_SESSION.into(),
                org: 0,
                agent: 1,
                steps: REPLAY_STEPS,
                n: u64::from(u32::MAX),
            });
        }
        let increment = target.saturating_sub(written + REPLAY_STEPS * u64::from(i == 0));
        sessions.extend(plan(&mut next, increment));
        let mut row = Row {
            growth: grow(&ledger, &sessions, backend),
            ..Row::default()
        };
        written += row.growth.steps;
        if let Some(last) = sessions
            .iter()
            .rev()
            .find(|s| s.org == 0 && s.n < u64::from(u32::MAX))
        {
            probe = Some(last.clone());
        }
        eprintln!(
            "{name}: {target}: {} steps written in {:.1} s ({:.0}/s)",
            row.growth.steps, row.growth.secs, row.growth.steps_per_sec
        );
        if let Some(parts) = backend.batch_parts() {
            eprintln!("{name}: {target}: longest batch parts: {parts}");
        }
        ledger.close();
        if let Some(waited) = backend.settle() {
            eprintln!("{name}: {target}: {waited}");
        }
        let started = Instant::now();
        let disk = backend.disk_bytes();
        if let Some(parts) = backend.disk_parts() {
            eprintln!("{name}: {target}: bytes per log entry by relation: {parts}");
        }
        {
            let mut raw = backend.raw();
            let store = backend.reader();
            measure(store.as_ref(), raw.as_mut(), &mut row, runs, proofs, test);
        }
        let probe = probe.as_mut().unwrap();
        ledger = start(backend, &mut row, probe);
        written += 2;
        row.steps = written;
        row.disk_per_step = disk as f64 / (written - 2) as f64;
        row.measure_secs = started.elapsed().as_secs_f64();
        eprintln!("{name}: {target}: measured in {:.1} s", row.measure_secs);
        rows.push(row);
    }
    ledger.close();
    print_tables(&B::LABELS, &rows, bench_started.elapsed());
}

/// The tables printed at the end of a run.
#[path = "scale_tables.rs"]
mod tables;
use tables::print_tables;
