//! Full-text documents written after their batch commits, outside the
//! org's lock.
//!
//! A batch's transaction queues each step it writes with a document in
//! `search_queue` (one small B-tree row) instead of inserting the
//! document into `step_search`, whose GIN entries were a fifth of the
//! time a batch held its org's lock. Once the batch commits, its
//! documents (computed when each step was submitted) go to this
//! process's indexer thread, started by its first write, which writes
//! them on its own connection, each with the deletion of its queue row in
//! one statement, without waiting for the WAL flush
//! (`synchronous_commit = off`): a crash that loses that write loses the
//! deletion with it, and the queue row stays.
//!
//! So the queue names every step whose document may be missing, whatever
//! crashed: a full-text search first indexes its org's queued steps from
//! the log ([`finish_org`]), waiting for those another connection is
//! indexing, so any server's search finds every step any server
//! acknowledged. The indexer also indexes from the log whatever the queue
//! holds when it starts (a stopped server's leftovers), when it has idled
//! for a second at most every [`SWEEP`], and after what it could not take
//! in memory (a transaction's documents past [`HANDED_BYTES`], more than
//! [`HANDED_TOTAL`] waiting, a failed write).
//!
//! **Locks.** A document is written by one statement ([`write_documents`])
//! that locks the step's queue row (`FOR UPDATE SKIP LOCKED`: never
//! waiting), writes the document only if it got the row and the log does
//! not mark the step erased, and deletes the row; autocommitted, so the
//! row lock lasts one statement whatever its client does next (a paused
//! or disconnected process holds nothing). An erasure deletes the step's
//! queue row, then its document, in its batch's transaction: if a
//! statement holds the row, the erasure waits for it (one statement) and
//! then deletes the document it wrote; once the erasure has deleted the
//! row, no statement writes the document. A search that finds rows held
//! by others waits for one at a time, in a statement of its own that
//! holds no other lock and lets go at once, bounded by
//! [`SEARCH_BUDGET`]. Writing statements answer one number (rows sent
//! before the commit could wait on a dead network with the locks held).
//! Nothing
//! here holds a lock across a round trip to its client, and nothing that
//! holds one waits for another: no cycle, no stall of the org's writes
//! behind a stalled reader.

use super::connection::{PgConn, col, connect};
use super::tsvector::TsVector;
use crate::engine::org_range;
use crate::{DbContext, StoreError};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A step's full-text document on its way from its batch to
/// `step_search`.
pub(super) struct QueuedDoc {
    /// The entry's id.
    pub(super) id: i64,
    /// The entry's org.
    pub(super) org: i64,
    /// The document's lexemes.
    pub(super) vector: TsVector,
}

/// Bytes of documents one transaction hands to the indexer in memory;
/// the rest of its documents (an import, a huge batch) are indexed from
/// the log.
pub(super) const HANDED_BYTES: usize = 8 << 20;
/// Bytes of documents waiting for the indexer in memory, all
/// transactions together; past it a transaction's documents are indexed
/// from the log instead of holding more memory.
const HANDED_TOTAL: usize = 32 << 20;
/// Transactions' documents waiting for the indexer.
const HANDED_BATCHES: usize = 64;
/// Most documents the indexer writes in one statement: an erasure of
/// one of them waits for the statement.
const WRITE_DOCS: usize = 512;
/// Queued steps indexed from the log per statement (at most
/// [`PAGE_BYTES`] of text).
const PAGE: i64 = 512;
/// Bytes of text read from the log per page, besides the page's last
/// step: the memory a page holds.
const PAGE_BYTES: i64 = 16 * 1024 * 1024;
/// How often an idle indexer looks whether it owes a catch-up from the log
/// (after a failure).
const IDLE: Duration = Duration::from_secs(1);
/// How long an indexer that idles goes at most without indexing the
/// queue from the log: steps queued by a server that stopped before
/// writing their documents, or whose write failed, in orgs nobody
/// searches.
const SWEEP: Duration = Duration::from_secs(60);
/// How long a search indexes its org's queued steps, and waits for those
/// others are writing, before it is answered `StoreError::Busy` (what it
/// indexed stays: the next try goes on from there).
const SEARCH_BUDGET: Duration = Duration::from_secs(5);

/// The running indexer: its channel and thread.
struct Running {
    jobs: SyncSender<Vec<QueuedDoc>>,
    thread: JoinHandle<()>,
}

/// This process's indexer: a thread with its own connection, started by
/// the first transaction that hands it documents (a process that only
/// reads never indexes from the log, and searches index their org's).
pub(super) struct SearchIndexer {
    config: postgres::Config,
    running: Mutex<Option<Running>>,
    shared: Arc<Shared>,
}

impl SearchIndexer {
    /// The indexer of a store on `config`'s database (not started yet).
    pub(super) fn new(config: postgres::Config) -> SearchIndexer {
        SearchIndexer {
            config,
            running: Mutex::new(None),
            shared: Arc::new(Shared {
                behind: AtomicBool::new(true),
                closing: AtomicBool::new(false),
                waiting: AtomicUsize::new(0),
            }),
        }
    }

    /// Hands over the documents of a committed transaction; `complete`
    /// is false when some of its queued steps' documents were not kept.
    pub(super) fn hand(&self, docs: Vec<QueuedDoc>, complete: bool) {
        if !complete {
            self.shared.behind.store(true, Ordering::Release);
        }
        if docs.is_empty() && complete {
            return;
        }
        let Ok(mut running) = self.running.lock() else {
            return;
        };
        if running.is_none() {
            *running = self.start();
        }
        // No thread (it could not be started): searches index what is
        // queued themselves.
        let Some(running) = running.as_ref() else {
            return;
        };
        let bytes: usize = docs.iter().map(|d| d.vector.len()).sum();
        if self.shared.waiting.load(Ordering::Acquire) + bytes > HANDED_TOTAL {
            self.shared.behind.store(true, Ordering::Release);
            let _ = running.jobs.try_send(Vec::new());
            return;
        }
        self.shared.waiting.fetch_add(bytes, Ordering::AcqRel);
        if running.jobs.try_send(docs).is_err() {
            self.shared.waiting.fetch_sub(bytes, Ordering::AcqRel);
            self.shared.behind.store(true, Ordering::Release);
        }
    }

    fn start(&self) -> Option<Running> {
        let (jobs, handed) = sync_channel(HANDED_BATCHES);
        let config = self.config.clone();
        let shared = Arc::clone(&self.shared);
        std::thread::Builder::new()
            .name("cairn-pg-search".into())
            .spawn(move || run(&config, &handed, &shared))
            .ok()
            .map(|thread| Running { jobs, thread })
    }
}

impl Drop for SearchIndexer {
    fn drop(&mut self) {
        // A clean close writes what was handed over (a crash leaves it
        // queued in the database), not a catch-up's whole queue.
        self.shared.closing.store(true, Ordering::Release);
        let running = self.running.lock().ok().and_then(|mut r| r.take());
        if let Some(Running { jobs, thread }) = running {
            drop(jobs);
            let _ = thread.join();
        }
    }
}

/// What the indexer thread shares with its [`SearchIndexer`].
struct Shared {
    /// Set when documents were not handed over, and at first: the indexer
    /// then indexes the whole queue from the log.
    behind: AtomicBool,
    /// Set when the store closes: a catch-up from the log stops after its
    /// page (what is left stays queued), so a close never waits for a
    /// long queue.
    closing: AtomicBool,
    /// Bytes of documents handed over and not written yet.
    waiting: AtomicUsize,
}

/// The indexer thread: writes the documents handed over, and the queue
/// from the log when `behind` (a page at a time until `closing`), until
/// every sender is gone.
fn run(config: &postgres::Config, handed: &Receiver<Vec<QueuedDoc>>, shared: &Shared) {
    let mut conn: Option<PgConn> = None;
    let mut swept = Instant::now();
    loop {
        let mut docs = match handed.recv_timeout(IDLE) {
            Ok(docs) => docs,
            Err(RecvTimeoutError::Timeout) => {
                if swept.elapsed() >= SWEEP {
                    swept = Instant::now();
                    shared.behind.store(true, Ordering::Release);
                }
                Vec::new()
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        while docs.len() < WRITE_DOCS {
            match handed.try_recv() {
                Ok(more) => docs.extend(more),
                Err(_) => break,
            }
        }
        let catch_up = shared.behind.swap(false, Ordering::AcqRel);
        let done = if docs.is_empty() && !catch_up {
            Ok(())
        } else {
            connected(&mut conn, config).and_then(|conn| {
                for chunk in docs.chunks(WRITE_DOCS) {
                    let ids: Vec<i64> = chunk.iter().map(|d| d.id).collect();
                    write_documents(&mut conn.client, &ids, chunk)?;
                }
                if catch_up {
                    index_from_log(&mut conn.client, &shared.closing)?;
                }
                Ok(())
            })
        };
        let bytes: usize = docs.iter().map(|d| d.vector.len()).sum();
        shared.waiting.fetch_sub(bytes, Ordering::AcqRel);
        if done.is_err() {
            // What was not written stays queued in the database: indexed
            // from the log on the next round (or by a search first).
            conn = None;
            shared.behind.store(true, Ordering::Release);
        }
    }
}

fn connected<'c>(
    conn: &'c mut Option<PgConn>,
    config: &postgres::Config,
) -> Result<&'c mut PgConn, StoreError> {
    if conn.as_ref().is_none_or(|c| c.client.is_closed()) {
        let mut fresh = connect(config)?;
        // The queue row outlives a write a crash loses (see the module
        // docs): the indexer need not wait for its WAL flush.
        fresh
            .client
            .batch_execute("SET synchronous_commit = off")
            .context("configuring the search indexer's connection")?;
        *conn = Some(fresh);
    }
    conn.as_mut()
        .ok_or_else(|| StoreError::Corrupt("no search indexer connection".into()))
}

/// Takes the queued steps `ids` that no other statement holds, writes
/// the documents among `docs` of those the log does not mark erased, and
/// deletes their queue rows: one autocommitted statement (see the module
/// docs), whose answer is one number (an answer of many rows, sent before
/// the commit, could wait on a dead network with the rows locked).
fn write_documents(
    client: &mut postgres::Client,
    ids: &[i64],
    docs: &[QueuedDoc],
) -> Result<(), StoreError> {
    let doc_ids: Vec<i64> = docs.iter().map(|d| d.id).collect();
    let orgs: Vec<i64> = docs.iter().map(|d| d.org).collect();
    let vectors: Vec<&TsVector> = docs.iter().map(|d| &d.vector).collect();
    client
        .query_one(
            "WITH held AS (
               SELECT id FROM search_queue WHERE id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED
             ), gone AS (
               DELETE FROM search_queue q USING held h WHERE q.id = h.id
             ), written AS (
               INSERT INTO step_search (id, org, doc)
               SELECT d.id, d.org, d.doc
               FROM UNNEST($2::int8[], $3::int8[], $4::tsvector[]) AS d(id, org, doc)
               JOIN held h ON h.id = d.id
               JOIN entries e ON e.id = d.id AND NOT e.erased
               ON CONFLICT (id) DO NOTHING
             )
             SELECT count(*) FROM held",
            &[&ids, &doc_ids, &orgs, &vectors],
        )
        .context("writing full-text documents")?;
    Ok(())
}

/// [`write_documents`] for documents read back from the log, one at a
/// time if PostgreSQL refuses the page (none should: documents are
/// capped below `tsvector`'s limit): a document refused alone is left
/// out, its step unindexed as a step without words, so that it cannot
/// keep its org's searches failing.
fn write_read_back(
    client: &mut postgres::Client,
    ids: &[i64],
    docs: &[QueuedDoc],
) -> Result<(), StoreError> {
    match write_documents(client, ids, docs) {
        Err(_) if !client.is_closed() => {
            for &id in ids {
                let doc = docs.iter().find(|d| d.id == id);
                match write_documents(client, &[id], doc.map_or(&[], std::slice::from_ref)) {
                    Err(_) if !client.is_closed() => write_documents(client, &[id], &[])?,
                    done => done?,
                }
            }
            Ok(())
        }
        done => done,
    }
}

/// Indexes every step of org `org` queued when it is called, from the
/// log, waiting for those another connection is writing: afterwards
/// `step_search` holds the document of every step the org's log held
/// then (but those erased). Past [`SEARCH_BUDGET`], `StoreError::Busy`.
pub(super) fn finish_org(client: &mut postgres::Client, org: i64) -> Result<(), StoreError> {
    let (low, high) = org_range(org);
    let last: Option<i64> = client
        .query_one(
            "SELECT max(id) FROM search_queue WHERE id >= $1 AND id < $2",
            &[&low, &high],
        )
        .context("looking for steps queued for full-text search")?
        .get(0);
    // Steps of one org are committed in id order (under its lock), so
    // any queued later than this look-up come after `last`.
    let Some(last) = last else {
        return Ok(());
    };
    let deadline = Instant::now() + SEARCH_BUDGET;
    loop {
        let page = read_queued(client, low, last)?;
        if page.ids.is_empty() {
            return Ok(());
        }
        write_read_back(client, &page.ids, &page.docs)?;
        // What the page's statement could not take, another is writing.
        let held: Option<i64> = client
            .query_one(
                "SELECT min(id) FROM search_queue WHERE id = ANY($1)",
                &[&page.ids],
            )
            .context("looking for steps queued for full-text search")?
            .get(0);
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(busy());
        }
        if let Some(held) = held {
            wait_for_writer(client, held, left)?;
        }
    }
}

fn busy() -> StoreError {
    StoreError::Busy(
        "the full-text index is still writing this org's latest steps: search again in a few seconds".into(),
    )
}

/// Waits until no statement holds the queue row `id` (one writing its
/// document), at most `limit`: one statement, autocommitted, that waits
/// for that row alone (holding no other lock while it waits, so it closes
/// no cycle with an erasure that waits for another) and lets it go as
/// soon as it is granted.
fn wait_for_writer(
    client: &mut postgres::Client,
    id: i64,
    limit: Duration,
) -> Result<(), StoreError> {
    // One simple-protocol message runs as one implicit transaction: the
    // setting is undone with it if the wait times out, and nothing waits
    // for this client between the statements. The id is a number this
    // process read from the database.
    let sql = format!(
        "SET lock_timeout = {}; SELECT 1 FROM search_queue WHERE id = {id} FOR KEY SHARE; RESET lock_timeout",
        limit.as_millis().clamp(1, i32::MAX as u128),
    );
    match client.batch_execute(&sql) {
        Ok(()) => Ok(()),
        Err(e) if e.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) => Err(busy()),
        Err(e) => Err(e).context("waiting for full-text documents being written"),
    }
}

/// The indexer's catch-up: indexes every queued step from the log, a
/// page per statement, leaving those other statements hold to them,
/// until none is left or `closing` is set.
fn index_from_log(client: &mut postgres::Client, closing: &AtomicBool) -> Result<(), StoreError> {
    let mut from = i64::MIN;
    while !closing.load(Ordering::Acquire) {
        let page = read_queued(client, from, i64::MAX)?;
        let Some(&last) = page.ids.last() else {
            return Ok(());
        };
        write_read_back(client, &page.ids, &page.docs)?;
        from = last.saturating_add(1);
    }
    Ok(())
}

/// Queued steps read back from the log: every id the page holds, and the
/// documents of those that are steps with words.
struct QueuedPage {
    ids: Vec<i64>,
    docs: Vec<QueuedDoc>,
}

/// The queued steps with ids in `low..=high`, in id order, up to
/// [`PAGE`] of them and about [`PAGE_BYTES`] of text (at least one), read
/// without locking: [`write_documents`] takes them.
fn read_queued(
    client: &mut postgres::Client,
    low: i64,
    high: i64,
) -> Result<QueuedPage, StoreError> {
    let rows = client
        .query(
            "SELECT id, org, step, CASE WHEN step THEN content END, CASE WHEN step THEN input_data END,
               CASE WHEN step THEN output_data END, CASE WHEN step THEN metadata END
             FROM (
               SELECT q.id, e.org, COALESCE(e.type = 'step' AND NOT e.erased, FALSE) AS step,
                 e.content, e.input_data, e.output_data, e.metadata,
                 sum(COALESCE(octet_length(e.content), 0) + COALESCE(octet_length(e.input_data), 0)
                     + COALESCE(octet_length(e.output_data), 0) + COALESCE(octet_length(e.metadata), 0))
                   OVER (ORDER BY q.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
               FROM (SELECT id FROM search_queue WHERE id BETWEEN $1 AND $2 ORDER BY id LIMIT $3) q
               LEFT JOIN entries e ON e.id = q.id
             ) page
             WHERE COALESCE(before, 0) < $4
             ORDER BY id",
            &[&low, &high, &PAGE, &PAGE_BYTES],
        )
        .context("reading queued steps")?;
    let mut page = QueuedPage {
        ids: Vec::with_capacity(rows.len()),
        docs: Vec::new(),
    };
    for row in &rows {
        let id: i64 = col(row, 0)?;
        page.ids.push(id);
        if !col::<bool>(row, 2)? {
            continue;
        }
        let columns: [Option<String>; 4] = [col(row, 3)?, col(row, 4)?, col(row, 5)?, col(row, 6)?];
        if let Some(vector) = document_of(&columns) {
            page.docs.push(QueuedDoc {
                id,
                org: col(row, 1)?,
                vector,
            });
        }
    }
    Ok(page)
}

/// The `tsvector` of a step stored with these text columns (`content`,
/// `input_data`, `output_data`, `metadata`), as its batch computed it;
/// `None` for a step without words.
pub(super) fn document_of(columns: &[Option<String>; 4]) -> Option<TsVector> {
    let [content, input, output, metadata] = columns.each_ref().map(Option::as_deref);
    let doc = crate::fulltext::stored_document(content, [input, output, metadata]);
    (!doc.is_empty()).then(|| TsVector::of(&doc))
}

/// Inserts documents read back from the log by a migration (one already
/// there is kept).
pub(super) fn insert_documents(
    tx: &mut postgres::Transaction<'_>,
    ids: &[i64],
    orgs: &[i64],
    vectors: &[TsVector],
) -> Result<(), StoreError> {
    if ids.is_empty() {
        return Ok(());
    }
    tx.execute(
        "INSERT INTO step_search (id, org, doc)
         SELECT * FROM UNNEST($1::int8[], $2::int8[], $3::tsvector[])
         ON CONFLICT (id) DO NOTHING",
        &[&ids, &orgs, &vectors],
    )
    .context("indexing steps for full-text search")?;
    Ok(())
}
