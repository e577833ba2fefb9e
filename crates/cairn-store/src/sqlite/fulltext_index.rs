//! The embedded store's full-text index lives in its own database file
//! (`fulltext.db`, beside `ledger.db`) and is written by its own thread, so
//! that the sequencer never tokenizes: FTS5's tokenizer, stemmer and
//! segment merges were a quarter of the sequencer's time, and SQLite lets
//! one connection write a file at a time, so an index inside `ledger.db`
//! could only be written by the sequencer or by stalling it.
//!
//! A batch leaves its steps' documents in memory ([`FullTextBatch`]); when
//! the batch commits they join the index's queue, which the index thread
//! writes every tick (about 250 ms) or sooner when many are queued, a
//! chunk of whole batches (about 4,096 documents or 4 MB) per transaction,
//! handing the writing connection over between chunks; when nothing is
//! queued after a write, it merges FTS5's segments a step at a time
//! (`fulltext_merge.rs`: while documents come, FTS5 merges only at 16
//! segments a level). The file, its schema and the transaction that
//! writes documents are in `fulltext_file.rs`. Before this process
//! answers a full-text search it writes what is queued
//! ([`FullTextIndex::flush_for`]), so the server always finds what it
//! acknowledged. When the thread falls behind (64 MB queued), the sequencer
//! waits, before its next batch, for the thread's writes to bring the queue
//! back under ([`FullTextIndex::relieve`]), at most a second while under a
//! hard limit (128 MB): a batch then waits for a chunk's write or a few,
//! never for the whole queue; a batch larger than a chunk is written in
//! parts. The queue counts what it holds (each document's and batch's
//! overhead besides the text), and a batch without documents joins the
//! last queued one. An index whose writes fail or hang never stops ingest:
//! past the limit, after one more try, the index stops instead, as it does
//! when an erasure cannot be applied.
//!
//! The index is derived, never evidence, and mends itself from the log:
//! each write records, per org, the log size below which every step is
//! indexed and the log's root at that size (`fulltext_progress`, in the
//! same transaction as the documents: the sizes its last batch left, since
//! batches are written whole and in order). A sequencing process that opens the
//! store deletes the steps that erasure records at and above it name, and
//! its index thread then indexes the steps at and above it (what a crash
//! left queued) from the log, a chunk at a time, before anything queued
//! (the open never waits for that; a search of an org whose own catch-up
//! is not done, or with a batch queued behind the catch-up, waits briefly
//! for its documents, then is told to come back: `StoreError::Busy`, while
//! an org whose documents are all in is searched at once); an org
//! whose recorded root is not its log's at that size (the index belongs to
//! another history: `ledger.db` restored from a backup beside a newer
//! index) is indexed again from its first step, an org the log lacks is
//! dropped, and a missing or unreadable `fulltext.db` is rebuilt whole.
//! An erasure deletes its step's document after the batch commits and
//! before it is acknowledged; the queue's documents for that step are
//! dropped first. Because `fulltext_progress` only moves forward in
//! transactions that follow that deletion, a deletion lost to a crash is
//! always at or above the recorded progress, where the next open finds it.
//! Searches never trust the index alone on erasure either: they leave out
//! every step the log marks erased (`entries.erased`, through a partial
//! index), so a process reading beside the server, or an index a crash
//! left behind, never returns an erased step.
//!
//! The file runs with `synchronous = NORMAL` (no fsync per write): a power
//! loss may roll back its last writes, progress included, never half of
//! one, and the next open indexes again what was rolled back.

use super::connection::open_reader;
use super::fulltext_file::{
    BUSY_TIMEOUT, Progress, delete_documents, index_path, locked_elsewhere, open_index_file, write,
    write_transaction,
};
use super::fulltext_mend::{Chunk, index_chunk, plan_catch_up};
use super::fulltext_merge::merge_step;
use super::fulltext_queue::{
    BACKLOG_BYTES, CHUNK_BYTES, CHUNK_DOCS, CatchUp, Queue, QueuedBatch, SIZE_OVERHEAD, batch_cost,
};
use crate::{DbContext, StoreError};
use cairn_core::Hash;
use rusqlite::Connection;
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a search waits for the index to catch up with the log after a
/// sequencing open before it is told to search again later.
const CATCH_UP_WAIT: Duration = Duration::from_secs(2);
/// How long chunks of a catch-up with the log fail, each tried again a
/// tick after the last, before the index stops (searches then say to
/// restart).
const CATCH_UP_RETRY: Duration = Duration::from_secs(300);
/// How often the index thread writes what is queued.
const TICK: Duration = Duration::from_millis(250);
/// The longest the thread waits to try merging again after failed merge
/// steps (the wait doubles from a tick after each).
const MERGE_BACKOFF_MAX: Duration = Duration::from_secs(60);
/// Queued documents that wake the index thread before its tick: one
/// write's worth ([`CHUNK_DOCS`]), so that the thread keeps up while
/// documents come instead of leaving a backlog for the close to wait on
/// (two writes' worth made `cairn log --stdin` about 3% slower; each
/// write is its own FTS5 segment either way)...
const WAKE_DOCS: usize = CHUNK_DOCS;
/// ... or queued bytes ([`CHUNK_BYTES`]).
const WAKE_BYTES: usize = CHUNK_BYTES;
/// How long the sequencer waits for one write of the index before it goes
/// on regardless (a write stuck on a lock, or a slow merge), while the
/// queue is under [`LIMIT_BYTES`].
const STUCK_WAIT: Duration = Duration::from_secs(1);
/// Queued bytes past which the sequencer waits for the write in progress
/// whatever it takes, and stops the index if writes fail (searches then
/// say to restart; the next sequencing open indexes what was dropped):
/// an index that cannot be written never stops ingest, nor takes memory
/// without bound.
const LIMIT_BYTES: usize = 2 * BACKLOG_BYTES;

/// How an idle merge ended.
#[derive(Debug, PartialEq)]
enum IdleMerge {
    /// Nothing is left to merge.
    Done,
    /// Documents were queued, or the index is stopping or catching up:
    /// merging goes on at the next idle tick.
    GaveWay,
    /// A step failed (the file's lock held elsewhere, a write error).
    Failed,
}

/// The documents and erasures of the batch being written.
#[derive(Default)]
pub(super) struct FullTextBatch {
    docs: Vec<(i64, String)>,
    erased: Vec<i64>,
}

impl FullTextBatch {
    /// Starts a batch: whatever a failed batch left is forgotten.
    pub(super) fn begin(&mut self) {
        self.docs.clear();
        self.erased.clear();
    }

    /// A document written by the batch.
    pub(super) fn add(&mut self, id: i64, doc: &str) {
        self.docs.push((id, doc.to_owned()));
    }

    /// A step the batch erased: its document must never be indexed, and
    /// leaves the index before the batch is acknowledged.
    pub(super) fn erase(&mut self, id: i64) {
        self.docs.retain(|(row, _)| *row != id);
        self.erased.push(id);
    }

    fn take(&mut self) -> (Vec<(i64, String)>, Vec<i64>) {
        (
            std::mem::take(&mut self.docs),
            std::mem::take(&mut self.erased),
        )
    }
}

struct Shared {
    /// The index's writing connection, held for each write, so that writes
    /// land in the order their documents were queued. A fair lock: the
    /// index thread hands it over between chunks to whoever waits.
    conn: parking_lot::Mutex<Connection>,
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Signalled when a write of the index ends, written or failed.
    progressed: Condvar,
    /// [`LIMIT_BYTES`] (tests of races lift it).
    limit_bytes: usize,
    /// The longest chunk write or idle merge step so far, in
    /// microseconds (diagnosis).
    slowest_chunk: AtomicU64,
    /// `conn`'s count of changed rows when an idle merge last found
    /// nothing to merge (`u64::MAX` before the first). Every write of the
    /// index goes through `conn` (chunks, erasures, a catch-up's chunks, a
    /// search's flush), so another count means something was written
    /// since: a merge is due ([`Shared::merge_due`]).
    merged_at: AtomicU64,
}

/// The full-text index of a sequencing process: its file, its queue and
/// the thread that writes it.
pub(super) struct FullTextIndex {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> Result<MutexGuard<'_, T>, StoreError> {
    m.lock().map_err(|_| poisoned())
}

fn poisoned() -> StoreError {
    StoreError::Corrupt("the full-text index's lock was poisoned".into())
}

impl FullTextIndex {
    /// Opens (creating or rebuilding if needed) the index of the ledger at
    /// `ledger_path`, brings it up to the log that `ledger` (the writer's
    /// connection, before any batch) holds, and starts its thread.
    pub(super) fn open(
        ledger_path: &Path,
        ledger: &Connection,
    ) -> Result<FullTextIndex, StoreError> {
        let path = index_path(ledger_path);
        let mended = open_index_file(&path).and_then(|mut conn| {
            let plan = plan_catch_up(&mut conn, ledger)?;
            Ok((conn, plan))
        });
        let (conn, plan) = match mended {
            Ok(mended) => mended,
            // Another program holds the file's lock past the busy timeout
            // (an open `sqlite3` shell, a backup tool): the file is not
            // damaged, and removing it would lose that program's writes.
            Err(e) if locked_elsewhere(&e) => {
                return Err(StoreError::Busy(format!(
                    "the full-text index {} is locked by another program (for more than {} s): close it and start again",
                    path.display(),
                    BUSY_TIMEOUT.as_secs()
                )));
            }
            // Derived data: an index that does not open or read is rebuilt.
            Err(_) => {
                for suffix in ["", "-wal", "-shm"] {
                    let mut file = OsString::from(path.as_os_str());
                    file.push(suffix);
                    let file = PathBuf::from(file);
                    if file.exists() {
                        std::fs::remove_file(&file).map_err(|source| StoreError::Io {
                            context: format!("removing a damaged {}", file.display()),
                            source,
                        })?;
                    }
                }
                let mut conn = open_index_file(&path)?;
                let plan = plan_catch_up(&mut conn, ledger)?;
                (conn, plan)
            }
        };
        // The steps to index from the log are indexed by the thread, from
        // its own reading connection: opening never waits for them.
        let mut queue = Queue::default();
        let reader = if plan.is_empty() {
            None
        } else {
            let reader = open_reader(ledger_path)?;
            queue.catching_up = Some(CatchUp {
                left: plan
                    .iter()
                    .map(|(org, (below, size))| (*org, size - below))
                    .collect(),
                targets: plan
                    .into_iter()
                    .map(|(org, (_, size))| (org, size))
                    .collect(),
            });
            Some(reader)
        };
        let shared = Arc::new(Shared {
            conn: parking_lot::Mutex::new(conn),
            queue: Mutex::new(queue),
            wake: Condvar::new(),
            progressed: Condvar::new(),
            limit_bytes: LIMIT_BYTES,
            slowest_chunk: AtomicU64::new(0),
            // The file may hold what another process wrote unmerged.
            merged_at: AtomicU64::new(u64::MAX),
        });
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("cairn-fulltext".into())
            .spawn(move || {
                let _on_panic = StopsOnPanic(&worker);
                if let Some(reader) = reader {
                    worker.catch_up(&reader);
                }
                worker.run();
            })
            .map_err(|source| StoreError::Io {
                context: "starting the full-text index thread".into(),
                source,
            })?;
        Ok(FullTextIndex {
            shared,
            thread: Some(thread),
        })
    }

    /// Hands over what a committed batch wrote: its erasures leave the
    /// index now, its documents join the queue. `sizes`: the committed log
    /// size and root of each org the batch wrote to. The batch is durable
    /// whatever happens here, so nothing is returned: an erasure the index
    /// could not apply stops the index (searches say so, and leave out
    /// erased steps anyway) until the next sequencing open applies it.
    pub(super) fn committed(
        &self,
        batch: &mut FullTextBatch,
        sizes: impl Iterator<Item = (i64, u64, Hash)>,
    ) {
        let (docs, erased) = batch.take();
        if !erased.is_empty() {
            self.shared.erase(&erased);
        }
        self.shared.enqueue(docs, sizes.collect());
    }

    /// Called by the sequencer before each batch: if the queue has grown
    /// past its bound (the index thread fell behind), waits for the
    /// thread's writes to bring it back under, each write a chunk; for no
    /// longer than [`STUCK_WAIT`] while under [`LIMIT_BYTES`], and past it
    /// for the write in progress, stopping the index if writes fail. Memory
    /// stays bounded, ingest slows to the index's pace, and an index that
    /// cannot be written never stops ingest. Returns whether it waited.
    pub(super) fn relieve(&self) -> Result<bool, StoreError> {
        self.shared.relieve()
    }

    /// Writes everything queued now, before a search of `org` (this
    /// process finds every step it acknowledged). While the index catches
    /// up with the log, an org whose documents are all in it
    /// ([`Queue::complete_while_catching_up`]) is searched at once instead
    /// of waiting for the other orgs.
    pub(super) fn flush_for(&self, org: i64) -> Result<(), StoreError> {
        self.shared.flush_org(Some(org))
    }

    /// The longest the index has held its writing connection for one
    /// chunk or one idle merge step, in microseconds.
    pub(super) fn slowest_chunk_micros(&self) -> u64 {
        self.shared.slowest_chunk.load(Ordering::Relaxed)
    }
}

impl Shared {
    /// Queues a committed batch's documents and, per org it wrote to, the
    /// committed log size and root once they are in.
    fn enqueue(&self, docs: Vec<(i64, String)>, sizes: Vec<(i64, u64, Hash)>) {
        let Ok(mut queue) = self.queue.lock() else {
            return;
        };
        if queue.failed.is_some() {
            // Never written: the next sequencing open indexes from the
            // recorded progress.
            return;
        }
        if docs.is_empty() && sizes.is_empty() {
            return;
        }
        if queue.catching_up.is_some() {
            // Nothing queued is written before a catch-up ends: the batch
            // joins the catch-up at once (its orgs' targets grow to its
            // sizes, its documents are read again from the log in their
            // org's turn), so an org that writes or erases during a
            // rebuild is searchable again after a chunk of its own, not
            // after every other org's catch-up (a review: a small org's
            // first write made it wait for a 450,000-step org, told
            // "about 0 steps to go").
            queue.queued += 1;
            queue.batches.push_back(QueuedBatch {
                docs,
                bytes: 0,
                sizes,
                whole: true,
            });
            queue.absorb();
            return;
        }
        if docs.is_empty()
            && let Some(last) = queue.batches.back_mut()
            && last.whole
        {
            // A batch without documents (session starts, seals, reviews,
            // erasures) only moves progress on: it joins the last queued
            // batch (its erasures are already applied), so that such
            // batches never pile up while the index cannot be written.
            let before = last.sizes.len();
            for (org, size, root) in sizes {
                match last.sizes.iter_mut().find(|known| known.0 == org) {
                    Some(known) if size >= known.1 => *known = (org, size, root),
                    Some(_) => {}
                    None => last.sizes.push((org, size, root)),
                }
            }
            let grew = (last.sizes.len() - before) * SIZE_OVERHEAD;
            last.bytes += grew;
            queue.bytes += grew;
            return;
        }
        let bytes = batch_cost(&docs, &sizes);
        queue.docs += docs.len();
        queue.bytes += bytes;
        queue.queued += 1;
        let number = queue.queued;
        for (org, _, _) in &sizes {
            queue.last_of_org.insert(*org, number);
        }
        queue.batches.push_back(QueuedBatch {
            docs,
            bytes,
            sizes,
            whole: true,
        });
        if queue.docs >= WAKE_DOCS || queue.bytes >= WAKE_BYTES {
            self.wake.notify_one();
        }
    }

    /// Erased steps: their queued documents are dropped, then they are
    /// deleted from the index; if that fails, the index stops.
    fn erase(&self, ids: &[i64]) {
        let fail = |reason: String| {
            if let Ok(mut queue) = self.queue.lock() {
                queue.fail(reason);
            }
        };
        let conn = self.conn.lock();
        let erased: BTreeSet<i64> = ids.iter().copied().collect();
        if let Ok(mut queue) = self.queue.lock() {
            let queue = &mut *queue;
            for batch in &mut queue.batches {
                let before = batch.docs.len();
                batch.docs.retain(|(row, _)| !erased.contains(row));
                if batch.docs.len() != before {
                    queue.docs -= before - batch.docs.len();
                    queue.bytes -= batch.bytes;
                    batch.bytes = batch_cost(&batch.docs, &batch.sizes);
                    queue.bytes += batch.bytes;
                }
            }
        }
        let deleted = (|| {
            let tx =
                write_transaction(&conn).context("deleting erased steps' full-text documents")?;
            delete_documents(&tx, erased.iter().copied())?;
            tx.commit()
                .context("deleting erased steps' full-text documents")
        })();
        if let Err(e) = deleted {
            // Progress must not pass this erasure (the next sequencing
            // open applies it): write nothing more, answer no search.
            fail(format!(
                "an erasure could not be applied to the full-text index ({e}); restart the server to mend it"
            ));
        }
    }

    /// Marks the index stopped after its thread panicked (see
    /// [`StopsOnPanic`]).
    fn stopped_by_panic(&self) {
        let mut queue = self
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if queue.failed.is_none() {
            queue.fail(
                "the full-text index stopped on an internal error; restart the server to rebuild it"
                    .into(),
            );
        }
        drop(queue);
        self.progressed.notify_all();
        self.wake.notify_all();
    }

    /// Indexes from the log what [`plan_catch_up`] left (and what the
    /// queue gave up to it meanwhile, [`Queue::absorb`]), a chunk at a
    /// time, each chunk its own transaction with its progress, holding the
    /// index's connection for the chunk only: an erasure waits for at most
    /// one chunk, and either comes before it (the chunk reads the step as
    /// erased) or after (and deletes what the chunk wrote). A stop leaves
    /// the rest to the next sequencing open; a failed chunk is tried again
    /// a tick later, and failures for [`CATCH_UP_RETRY`] stop the index.
    fn catch_up(&self, ledger: &Connection) {
        let mut failing_since: Option<Instant> = None;
        // The orgs take turns, a chunk each, so that a small org's search
        // waits for a few chunks, not for every larger org before it.
        let mut last_org: Option<i64> = None;
        loop {
            let next = {
                let Ok(mut queue) = self.queue.lock() else {
                    return;
                };
                if queue.stop || queue.failed.is_some() {
                    return;
                }
                let Some(catch_up) = queue.catching_up.as_mut() else {
                    return;
                };
                let after = last_org.map_or(i64::MIN, |org| org.saturating_add(1));
                let next = catch_up
                    .targets
                    .range(after..)
                    .next()
                    .or_else(|| catch_up.targets.first_key_value())
                    .map(|(o, s)| (*o, *s));
                if next.is_none() {
                    // Caught up: the batches queued since are written next,
                    // in order, by the loop.
                    queue.catching_up = None;
                    self.progressed.notify_all();
                }
                next
            };
            let Some((org, to)) = next else { return };
            last_org = Some(org);
            let conn = self.conn.lock();
            let reached = index_chunk(&conn, ledger, org, to);
            drop(conn);
            let Ok(mut queue) = self.queue.lock() else {
                return;
            };
            match reached {
                Ok(Chunk::Forgot) => {}
                Ok(Chunk::Indexed { from, reached }) => {
                    if let Some(catch_up) = queue.catching_up.as_mut() {
                        if let Some(left) = catch_up.left.get_mut(&org) {
                            *left = left.saturating_sub(reached - from);
                        }
                        // The target may have grown meanwhile (absorbed
                        // batches): only one reached is done.
                        if catch_up.targets.get(&org).is_some_and(|t| *t <= reached) {
                            catch_up.targets.remove(&org);
                        }
                    }
                }
                Err(e) => {
                    // The chunk rolled back (its progress with it). As a
                    // failed write of the queue, tried again a tick later
                    // (something held the file's lock past the busy
                    // timeout: a backup tool, `sqlite3`); a stop ends it,
                    // and failures that last stop the index.
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= CATCH_UP_RETRY {
                        queue.fail(format!(
                            "the full-text index could not be brought up to date with the log ({e}); restart the server to mend it"
                        ));
                        self.progressed.notify_all();
                        return;
                    }
                    let Ok(_) = self.wake.wait_timeout_while(queue, TICK, |q| !q.stop) else {
                        return;
                    };
                    continue;
                }
            }
            failing_since = None;
            drop(queue);
            self.progressed.notify_all();
        }
    }

    fn run(&self) {
        // After a failed merge step (the file locked by another program,
        // or failing), merging waits this long, doubling up to a minute.
        let mut merge_backoff = TICK;
        let mut merge_after = Instant::now();
        loop {
            let stop = {
                let Ok(queue) = self.queue.lock() else { return };
                let Ok((queue, _)) = self.wake.wait_timeout_while(queue, TICK, |q| {
                    !q.stop && q.docs < WAKE_DOCS && q.bytes < WAKE_BYTES
                }) else {
                    return;
                };
                queue.stop
            };
            // A failed write keeps its documents queued for the next try,
            // a tick later (and `maintain` reports nothing: the next search
            // does).
            let failed = self.flush().is_err();
            if stop {
                return;
            }
            if failed {
                std::thread::sleep(TICK);
                continue;
            }
            if Instant::now() < merge_after || !self.merge_due() {
                continue;
            }
            match self.merge_while_idle() {
                // Its steps (if any) succeeded: the next failure backs off
                // from a tick again.
                IdleMerge::Done | IdleMerge::GaveWay => merge_backoff = TICK,
                IdleMerge::Failed => {
                    merge_after = Instant::now() + merge_backoff;
                    merge_backoff = (merge_backoff * 2).min(MERGE_BACKOFF_MAX);
                }
            }
        }
    }

    /// Whether the index was written since an idle merge last found
    /// nothing to merge (see `merged_at`).
    fn merge_due(&self) -> bool {
        self.merged_at.load(Ordering::Acquire) != self.conn.lock().total_changes()
    }

    /// Merges the index's segments one step at a time for as long as
    /// nothing is queued ([`fulltext_merge`](super::fulltext_merge)),
    /// giving way between steps to queued documents, a stop or a
    /// catch-up; when nothing is left, notes `conn`'s count of changes
    /// (no merge is due until the next write).
    fn merge_while_idle(&self) -> IdleMerge {
        loop {
            let idle = lock(&self.queue).is_ok_and(|q| {
                !q.stop && q.failed.is_none() && q.catching_up.is_none() && q.batches.is_empty()
            });
            if !idle {
                return IdleMerge::GaveWay;
            }
            let conn = self.conn.lock();
            let started = Instant::now();
            let merged = merge_step(&conn);
            crate::sequencer::note_longest(&self.slowest_chunk, started.elapsed());
            if let Ok(false) = merged {
                self.merged_at
                    .store(conn.total_changes(), Ordering::Release);
            }
            parking_lot::MutexGuard::unlock_fair(conn);
            match merged {
                Ok(true) => {}
                Ok(false) => return IdleMerge::Done,
                Err(_) => return IdleMerge::Failed,
            }
        }
    }

    /// Writes the oldest chunk of queued batches in one transaction, with
    /// each org's progress as its last batch in the chunk left it; on
    /// failure the chunk goes back in front of the queue. `conn`: the held
    /// writing connection.
    fn write_chunk(&self, conn: &Connection) -> Result<(), StoreError> {
        let chunk = {
            let mut queue = lock(&self.queue)?;
            if let Some(reason) = &queue.failed {
                return Err(StoreError::Corrupt(reason.clone()));
            }
            queue.take_chunk()
        };
        if chunk.is_empty() {
            return Ok(());
        }
        let mut sizes = Progress::new();
        for (org, size, root) in chunk.iter().flat_map(|b| &b.sizes) {
            let known = sizes.entry(*org).or_insert((*size, *root));
            if *size >= known.0 {
                *known = (*size, *root);
            }
        }
        let started = Instant::now();
        let docs = chunk.iter().flat_map(|b| &b.docs);
        let written = write(conn, docs, &sizes);
        let mut queue = lock(&self.queue)?;
        queue.attempts += 1;
        queue.last_write_failed = written.is_err();
        match written {
            Ok(()) => {
                crate::sequencer::note_longest(&self.slowest_chunk, started.elapsed());
                if queue.failed.is_none() {
                    queue.written += chunk.iter().filter(|b| b.whole).count() as u64;
                }
            }
            Err(_) => queue.put_back(chunk),
        }
        drop(queue);
        self.progressed.notify_all();
        written
    }
}

impl super::State {
    /// Each org's committed log size and root (what the full-text index
    /// records as its progress).
    pub(super) fn org_progress(&self) -> Vec<(i64, u64, Hash)> {
        self.orgs
            .values()
            .map(|org| (org.id, org.frontier.size(), org.frontier.root()))
            .collect()
    }
}

/// Held by the index's thread: if the thread panics (a bug), the index is
/// marked stopped, so that searches say so instead of waiting for a
/// catch-up or writes that will never come (`cairn search` would wait
/// forever), and the sequencer never waits for its writes.
struct StopsOnPanic<'a>(&'a Shared);

impl Drop for StopsOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stopped_by_panic();
        }
    }
}

#[cfg(test)]
#[path = "fulltext_index_tests.rs"]
mod tests;
mod waits;

impl Drop for FullTextIndex {
    fn drop(&mut self) {
        // A clean close indexes what is queued (a crash leaves it to the
        // next sequencing open).
        if let Ok(mut queue) = self.shared.queue.lock() {
            queue.stop = true;
        }
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
