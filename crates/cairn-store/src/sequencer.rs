//! Group commit: many writers, one sequencer thread, one transaction and
//! one fsync per batch.
//!
//! Writers enqueue a request and wait on a [`Pending`] (blocking or as a
//! future). The sequencer takes everything queued (up to the batch limit),
//! hands it to [`LedgerStore::append_batch`], and answers each writer only
//! after the batch committed. While idle it wakes every tick to let the
//! store sign checkpoints. Dropping or closing the [`Ledger`] drains the
//! queue before the thread exits, so no accepted request is lost.

use crate::{LedgerStore, Refusal, StoreError, WriteRequest, Written};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Why a write did not happen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AppendError {
    /// The request was refused (invalid, sealed session, ...); nothing was
    /// written.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Storage failed; the batch holding the request was not written.
    #[error("storage failure: {0}")]
    Store(Arc<StoreError>),
}

type Reply = Result<Written, AppendError>;

/// What a queued write keeps alive until its batch is committed (or
/// fails), just before its answer is sent ([`Ledger::submit_holding`]): a
/// caller's count of the memory the write holds, say, which must not be
/// given back when the caller stops waiting (a client that hangs up)
/// while the write is still queued.
pub type Hold = Box<dyn Send>;

struct Job {
    request: WriteRequest,
    reply: oneshot::Sender<Reply>,
    hold: Option<Hold>,
}

/// The answer to one submitted write, available once its batch committed.
pub struct Pending {
    rx: oneshot::Receiver<Reply>,
}

impl Pending {
    /// A write answered without being queued: refused as it was prepared,
    /// by a caller that prepares steps itself ([`Ledger::prepare`]) before
    /// it submits them.
    pub fn answered(reply: Reply) -> Pending {
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(reply);
        Pending { rx }
    }

    /// Blocks until the write is durable or refused. Do not call from an
    /// async task; `.await` the `Pending` there instead.
    pub fn wait(self) -> Reply {
        self.rx
            .blocking_recv()
            .unwrap_or_else(|_| Err(AppendError::Store(Arc::new(StoreError::Closed))))
    }
}

impl Future for Pending {
    type Output = Reply;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Reply> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or_else(|_| Err(AppendError::Store(Arc::new(StoreError::Closed)))))
    }
}

/// Sequencer settings.
#[derive(Debug, Clone, Copy)]
pub struct SequencerConfig {
    /// Most requests in one transaction.
    pub max_batch: usize,
    /// How often an idle sequencer lets the store do periodic work.
    pub tick: Duration,
    /// Group-commit window: when the previous batch had more than one
    /// request (writers are concurrent), wait up to this long for more
    /// requests before committing, so that one fsync serves more of them.
    /// A lone writer never waits.
    pub linger: Duration,
}

impl Default for SequencerConfig {
    fn default() -> SequencerConfig {
        SequencerConfig {
            max_batch: 4096,
            tick: Duration::from_millis(250),
            linger: Duration::from_micros(150),
        }
    }
}

/// Counters of the sequencer's work, for metrics and benchmarks.
#[derive(Debug, Default)]
pub struct SequencerStats {
    /// Batches committed (or failed).
    pub batches: std::sync::atomic::AtomicU64,
    /// Requests processed.
    pub requests: std::sync::atomic::AtomicU64,
    /// Batches whose storage write failed.
    pub failed_batches: std::sync::atomic::AtomicU64,
    /// Batches the database refused over one request's data, tried again
    /// in halves so that the others' writes go through.
    pub isolated_batches: std::sync::atomic::AtomicU64,
    /// Requests queued or in the batch being committed: the backlog
    /// ([`Ledger::backlog`]).
    pub in_flight: std::sync::atomic::AtomicUsize,
    /// The longest a batch's write took, in microseconds: every writer in
    /// it (and every writer queued behind it) waited that long.
    pub slowest_batch_micros: std::sync::atomic::AtomicU64,
    /// The longest a round of maintenance (checkpoint signing, retention)
    /// took on the sequencer, in microseconds: writers wait for it too.
    pub slowest_maintenance_micros: std::sync::atomic::AtomicU64,
}

/// Keeps in `slot` the longest of the durations noted in it, in
/// microseconds (the stores' and the sequencer's slowest-part counters).
pub(crate) fn note_longest(slot: &std::sync::atomic::AtomicU64, took: Duration) {
    let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
    slot.fetch_max(micros, std::sync::atomic::Ordering::Relaxed);
}

/// A store with its sequencer: the handle writers and readers share.
pub struct Ledger {
    store: Arc<dyn LedgerStore>,
    stats: Arc<SequencerStats>,
    queue: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Ledger {
    /// Starts the sequencer thread in front of `store`.
    pub fn new(store: Arc<dyn LedgerStore>, config: SequencerConfig) -> Ledger {
        let (queue, jobs) = mpsc::channel::<Job>();
        let worker = Arc::clone(&store);
        let stats = Arc::new(SequencerStats::default());
        let worker_stats = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name("cairn-sequencer".into())
            .spawn(move || run(worker.as_ref(), &jobs, config, &worker_stats))
            .ok();
        Ledger {
            store,
            stats,
            queue: Some(queue),
            thread,
        }
    }

    /// The sequencer's counters.
    pub fn stats(&self) -> &SequencerStats {
        &self.stats
    }

    /// Requests accepted into the queue and not yet answered (queued or in
    /// the batch being committed). Edges use it to refuse work (429)
    /// before queueing more than the sequencer can absorb.
    pub fn backlog(&self) -> usize {
        self.stats
            .in_flight
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Read access to the store.
    pub fn store(&self) -> &dyn LedgerStore {
        self.store.as_ref()
    }

    /// A shared handle to the store.
    pub fn store_arc(&self) -> Arc<dyn LedgerStore> {
        Arc::clone(&self.store)
    }

    /// Validates and hashes a step as [`Ledger::submit`] does with a
    /// `WriteRequest::Step`, and computes the store's form of its
    /// full-text document ([`LedgerStore::search_form`]), without queueing
    /// it: a caller that counts what a prepared step holds before it is
    /// queued (the server's memory budget) prepares first, then submits
    /// the `WriteRequest::Prepared`.
    pub fn prepare(&self, step: crate::NewStep) -> Result<crate::PreparedStep, Refusal> {
        let mut prepared = crate::prepare_step(
            step,
            &self.store.limits(),
            self.store.embedding_sample_rate(),
        )?;
        prepared.search_form = prepared
            .search_doc
            .as_deref()
            .and_then(|doc| self.store.search_form(doc));
        Ok(prepared)
    }

    /// Queues a write; the returned [`Pending`] resolves once it is durable
    /// or refused.
    pub fn submit(&self, request: WriteRequest) -> Pending {
        self.submit_with(request, None)
    }

    /// [`Ledger::submit`], keeping `hold` alive until the write's batch is
    /// committed or has failed, whether or not anyone still waits on the
    /// [`Pending`]. It is dropped just before the answer is sent, so that a
    /// caller whose hold counts its own memory has given it back (once it
    /// drops its own share) before its client can see the answer and send
    /// more; the request itself is freed a little later, off the
    /// sequencer's thread. A write refused before it is queued drops `hold`
    /// at once. The sequencer drops holds on its own thread, between a
    /// commit and its answers: a hold's `Drop` must be cheap.
    pub fn submit_holding(&self, request: WriteRequest, hold: Hold) -> Pending {
        self.submit_with(request, Some(hold))
    }

    fn submit_with(&self, request: WriteRequest, hold: Option<Hold>) -> Pending {
        // Validate and hash here, in the caller's thread: refusals never
        // reach the queue, and the sequencer is left with the part of the
        // work that depends on order.
        let request = match request {
            WriteRequest::Step(step) => match self.prepare(*step) {
                Ok(prepared) => WriteRequest::Prepared(Box::new(prepared)),
                Err(refusal) => return Pending::answered(Err(AppendError::Refused(refusal))),
            },
            other => {
                if let Some(refusal) =
                    crate::engine::refused_before_queueing(&other, || self.store.limits())
                {
                    return Pending::answered(Err(AppendError::Refused(refusal)));
                }
                other
            }
        };
        let (reply, rx) = oneshot::channel();
        let in_flight = &self.stats.in_flight;
        in_flight.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sent = match &self.queue {
            Some(queue) => queue
                .send(Job {
                    request,
                    reply,
                    hold,
                })
                .map_err(|e| e.0.reply),
            None => Err(reply),
        };
        if let Err(reply) = sent {
            in_flight.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            let _ = reply.send(Err(AppendError::Store(Arc::new(StoreError::Closed))));
        }
        Pending { rx }
    }

    /// Queues a write and waits for it.
    pub fn write(&self, request: WriteRequest) -> Reply {
        self.submit(request).wait()
    }

    /// Flushes every queued write and stops the sequencer.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.queue.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run(
    store: &dyn LedgerStore,
    jobs: &mpsc::Receiver<Job>,
    config: SequencerConfig,
    stats: &SequencerStats,
) {
    // A batch's requests were allocated by the writers' threads; freeing
    // them cost the sequencer about a tenth of its time in profiles, so
    // another thread frees them (if it cannot keep up, or is gone, the
    // sequencer frees them itself).
    std::thread::scope(|scope| {
        let (reap, reaped) = mpsc::sync_channel::<Vec<WriteRequest>>(8);
        let reaper = std::thread::Builder::new()
            .name("cairn-reaper".into())
            .spawn_scoped(scope, move || reaped.into_iter().for_each(drop));
        if reaper.is_err() {
            sequence(store, jobs, config, stats, None);
        } else {
            sequence(store, jobs, config, stats, Some(&reap));
        }
    });
}

fn sequence(
    store: &dyn LedgerStore,
    jobs: &mpsc::Receiver<Job>,
    config: SequencerConfig,
    stats: &SequencerStats,
    reap: Option<&mpsc::SyncSender<Vec<WriteRequest>>>,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut last_maintenance = Instant::now();
    let mut last_batch = 0usize;
    loop {
        let first = match jobs.recv_timeout(config.tick) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                maintain(store, stats);
                last_maintenance = Instant::now();
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let mut requests = vec![first.request];
        let mut replies = vec![first.reply];
        let mut holds: Vec<Hold> = first.hold.into_iter().collect();
        let linger_until = (last_batch > 1).then(|| Instant::now() + config.linger);
        while requests.len() < config.max_batch {
            let next = match linger_until {
                // Keep collecting until the window closes or the batch is
                // as large as the last one (all concurrent writers are in).
                Some(until) if requests.len() < last_batch => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        jobs.try_recv().ok()
                    } else {
                        jobs.recv_timeout(left).ok()
                    }
                }
                _ => jobs.try_recv().ok(),
            };
            match next {
                Some(job) => {
                    requests.push(job.request);
                    replies.push(job.reply);
                    holds.extend(job.hold);
                }
                None => break,
            }
        }
        last_batch = requests.len();
        stats.batches.fetch_add(1, Relaxed);
        stats.requests.fetch_add(requests.len() as u64, Relaxed);
        let started = Instant::now();
        let count = requests.len();
        let (written, requests) = append_isolating(store, requests, stats);
        note_longest(&stats.slowest_batch_micros, started.elapsed());
        drop(holds);
        for (reply, outcome) in replies.into_iter().zip(written) {
            let _ = reply.send(outcome);
        }
        stats.in_flight.fetch_sub(count, Relaxed);
        if let Some(reap) = reap {
            // Full or gone: the batch is freed here, as it would have been.
            let _ = reap.try_send(requests);
        }
        if last_maintenance.elapsed() >= config.tick {
            maintain(store, stats);
            last_maintenance = Instant::now();
        }
    }
    maintain(store, stats);
}

/// Appends `requests` as one batch, answering each in their order (and
/// giving the requests back, to be freed off this thread). When the
/// database refuses the batch over the data one of its requests carries
/// ([`StoreError::is_refused_data`]: text PostgreSQL cannot hold, a
/// constraint), its parts are tried on their own: each org's requests,
/// in their order, when it holds several orgs (so that the request at
/// fault costs every other org one transaction), else its two halves;
/// down to the request at fault, which alone is answered with the
/// failure. Any other failure (a lost connection, a full disk) fails the
/// whole batch, as nothing of it was written.
fn append_isolating(
    store: &dyn LedgerStore,
    requests: Vec<WriteRequest>,
    stats: &SequencerStats,
) -> (Vec<Result<Written, AppendError>>, Vec<WriteRequest>) {
    let error = match store.append_batch(&requests) {
        Ok(outcomes) => {
            let answers = outcomes
                .into_iter()
                .map(|outcome| outcome.map_err(AppendError::Refused))
                .collect();
            return (answers, requests);
        }
        Err(e) => e,
    };
    if requests.len() < 2 || !error.is_refused_data() {
        stats.failed_batches.fetch_add(1, Relaxed);
        return (all_failed(&requests, &Arc::new(error)), requests);
    }
    stats.isolated_batches.fetch_add(1, Relaxed);
    // Which part each request goes to: its org's, numbered by first
    // appearance, or its half.
    let mut orgs: HashMap<&str, usize> = HashMap::new();
    let mut part_of: Vec<usize> = requests
        .iter()
        .map(|request| {
            let next = orgs.len();
            *orgs
                .entry(crate::engine::request_org(request))
                .or_insert(next)
        })
        .collect();
    let count = requests.len();
    if orgs.len() == 1 {
        part_of = (0..count).map(|i| usize::from(i >= count / 2)).collect();
    }
    let parts_count = orgs.len().max(2);
    let mut parts: Vec<(Vec<usize>, Vec<WriteRequest>)> =
        (0..parts_count).map(|_| (Vec::new(), Vec::new())).collect();
    for (position, request) in requests.into_iter().enumerate() {
        let (positions, part) = &mut parts[part_of[position]];
        positions.push(position);
        part.push(request);
    }
    let mut answers: Vec<Option<Result<Written, AppendError>>> = (0..count).map(|_| None).collect();
    let mut back = Vec::with_capacity(count);
    // A part that fails on something other than its data (a lost
    // connection, a full disk) fails the parts after it untried: each try
    // would wait on the same failure.
    let mut failed: Option<Arc<StoreError>> = None;
    for (positions, part) in parts {
        let (part_answers, part) = match &failed {
            Some(e) => (all_failed(&part, e), part),
            None => append_isolating(store, part, stats),
        };
        for (position, answer) in positions.into_iter().zip(part_answers) {
            if let Err(AppendError::Store(e)) = &answer
                && !e.is_refused_data()
            {
                failed = Some(Arc::clone(e));
            }
            answers[position] = Some(answer);
        }
        back.extend(part);
    }
    let answers = answers
        .into_iter()
        .map(|answer| {
            answer.unwrap_or_else(|| {
                Err(AppendError::Store(Arc::new(StoreError::Corrupt(
                    "a request of a batch tried in parts was left unanswered".into(),
                ))))
            })
        })
        .collect();
    (answers, back)
}

/// Each of `requests` answered with the failure `error`.
fn all_failed(
    requests: &[WriteRequest],
    error: &Arc<StoreError>,
) -> Vec<Result<Written, AppendError>> {
    requests
        .iter()
        .map(|_| Err(AppendError::Store(Arc::clone(error))))
        .collect()
}

fn maintain(store: &dyn LedgerStore, stats: &SequencerStats) {
    let started = Instant::now();
    // A failed checkpoint is retried on the next tick; the records it would
    // cover are already durable.
    let _ = store.maintain();
    note_longest(&stats.slowest_maintenance_micros, started.elapsed());
}
