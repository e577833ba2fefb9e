//! The background embedder. Ingest only queues the steps seed 000's rule
//! selects (in the step's own transaction); this thread takes them from
//! the queue in batches, embeds them with the configured embedder and
//! stores the vectors, so an acknowledgement never waits for a model. A
//! model run in process computes at the lowest CPU priority
//! (`cairn_store::background`), so writers keep the cores they need. The
//! queue lives in the store, so a backlog survives a restart and costs
//! disk, not memory; `/metrics` shows it (`cairn_embedding_backlog`).

use cairn_store::LedgerStore;
use cairn_store::embed::Embedder;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long an idle worker sleeps before it looks at the queue again.
const IDLE_POLL: Duration = Duration::from_millis(250);
/// How often the backlog is counted while the worker is busy.
const COUNT_EVERY: Duration = Duration::from_secs(2);
/// The longest pause after failures (it doubles from one second).
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How often a worker whose embedder is not the store's looks again.
const OTHER_EMBEDDER_POLL: Duration = Duration::from_secs(5);

/// What the worker reports, read by `/metrics`.
#[derive(Debug, Default)]
pub struct EmbeddingStats {
    stop: AtomicBool,
    backlog: AtomicU64,
    parked: AtomicU64,
    embedded: AtomicU64,
    refused: AtomicU64,
    failures: AtomicU64,
    wake: (Mutex<bool>, Condvar),
}

impl EmbeddingStats {
    /// Steps waiting in the queue, as last counted.
    pub fn backlog(&self) -> u64 {
        self.backlog.load(Relaxed)
    }

    /// Steps parked (refused alone too often), as last counted.
    pub fn parked(&self) -> u64 {
        self.parked.load(Relaxed)
    }

    /// Steps the embedder refused on their own (each an attempt).
    pub fn refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }

    /// Queue entries settled (embedded, or dropped because erased).
    pub fn embedded(&self) -> u64 {
        self.embedded.load(Relaxed)
    }

    /// Rounds that failed (the embedder or the store).
    pub fn failures(&self) -> u64 {
        self.failures.load(Relaxed)
    }

    fn sleep(&self, duration: Duration) {
        let (lock, condvar) = &self.wake;
        if let Ok(mut woken) = lock.lock() {
            if !*woken {
                woken = condvar
                    .wait_timeout(woken, duration)
                    .map(|(guard, _)| guard)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            *woken = false;
        }
    }

    /// Wakes the worker now (it must stop).
    pub fn wake(&self) {
        let (lock, condvar) = &self.wake;
        if let Ok(mut woken) = lock.lock() {
            *woken = true;
            condvar.notify_one();
        }
    }
}

/// The running worker; dropping it stops the thread (after the batch in
/// hand) and waits for it.
#[derive(Debug)]
pub struct EmbeddingWorker {
    stats: Arc<EmbeddingStats>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EmbeddingWorker {
    /// Starts the worker over `store`.
    pub fn start(
        store: Arc<dyn LedgerStore>,
        embedder: Arc<dyn Embedder>,
        batch: usize,
    ) -> EmbeddingWorker {
        let stats = Arc::new(EmbeddingStats::default());
        let shared = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name("cairn-embedder".into())
            .spawn(move || {
                // The model's work at the lowest priority; the loop and its
                // store transactions at normal priority (they hold locks
                // ingest waits for).
                let embedder: Arc<dyn Embedder> = if embedder.in_process() {
                    Arc::new(cairn_store::background::LowPriorityEmbedder::new(embedder))
                } else {
                    embedder
                };
                run(store.as_ref(), embedder.as_ref(), batch.max(1), &shared)
            })
            .map_err(|e| tracing::error!("the background embedder did not start: {e}"))
            .ok();
        EmbeddingWorker { stats, thread }
    }

    /// Its counters.
    pub fn stats(&self) -> &EmbeddingStats {
        &self.stats
    }
}

impl Drop for EmbeddingWorker {
    fn drop(&mut self) {
        self.stats.stop.store(true, Relaxed);
        self.stats.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(store: &dyn LedgerStore, embedder: &dyn Embedder, batch: usize, stats: &EmbeddingStats) {
    use cairn_store::ops::EmbedQueueError;
    let mut counted: Option<Instant> = None;
    let mut backoff = Duration::from_secs(1);
    let mut warned_other = false;
    let count = |stats: &EmbeddingStats| {
        if let Ok(backlog) = store.embedding_backlog() {
            stats.backlog.store(backlog.waiting, Relaxed);
            stats.parked.store(backlog.parked, Relaxed);
        }
    };
    while !stats.stop.load(Relaxed) {
        if counted.is_none_or(|at| at.elapsed() >= COUNT_EVERY) {
            count(stats);
            counted = Some(Instant::now());
        }
        // A panic in an embedder (a model's bug) must not end the thread
        // silently: it counts as a failed round.
        let round = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cairn_store::ops::embed_queued(store, embedder, batch)
        }))
        .unwrap_or_else(|_| {
            Err(EmbedQueueError::Embedder(cairn_store::embed::EmbedError(
                "the embedder panicked".into(),
            )))
        });
        match round {
            Ok(round) if round.settled == 0 && round.refused == 0 => {
                backoff = Duration::from_secs(1);
                // Nothing left to claim: count what other servers may
                // still hold (0 on the embedded store).
                count(stats);
                counted = Some(Instant::now());
                stats.sleep(IDLE_POLL);
            }
            Ok(round) if round.settled == 0 => {
                // The store kept them queued (rows held by another
                // transaction): not a reason to spin.
                backoff = Duration::from_secs(1);
                stats.refused.fetch_add(round.refused as u64, Relaxed);
                stats.sleep(IDLE_POLL);
            }
            Ok(round) => {
                backoff = Duration::from_secs(1);
                warned_other = false;
                stats.embedded.fetch_add(round.settled as u64, Relaxed);
                stats.refused.fetch_add(round.refused as u64, Relaxed);
                let _ = stats.backlog.fetch_update(Relaxed, Relaxed, |n| {
                    Some(n.saturating_sub(round.settled as u64))
                });
            }
            Err(e @ EmbedQueueError::OtherEmbedder { .. }) => {
                if !warned_other {
                    tracing::warn!("{e}");
                    warned_other = true;
                }
                stats.sleep(OTHER_EMBEDDER_POLL);
            }
            Err(e) => {
                stats.failures.fetch_add(1, Relaxed);
                tracing::warn!(
                    "background embedding failed ({e}); the steps stay queued, trying again in {} s",
                    backoff.as_secs()
                );
                stats.sleep(backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
