//! Full-text documents written after their batch commits, outside the
//! org's lock.
//!
//! A batch's transaction queues each step it writes with a document in
//! `search_queue` (one small B-tree row) instead of inserting the
//! document into `step_search`, whose GIN entries were a fifth of the
//! time a batch held its org's lock. Once the batch commits, its
//! documents (computed when each step was submitted) go to this
//! process's indexer thread, which writes them on its own connection,
//! each with the deletion of its queue row in one statement, and
//! without waiting for the WAL flush (`synchronous_commit = off`): a
//! crash that loses that write loses the deletion with it, and the queue
//! row stays.
//!
//! So the queue names every step whose document may be missing, whatever
//! crashed: a full-text search first indexes its org's queued steps from
//! the log ([`finish_org`]), waiting for those another connection is
//! indexing, so any server's search finds every step any server
//! acknowledged. The indexer also indexes from the log whatever the queue
//! holds when it starts (a stopped server's leftovers), when it has idled
//! for a second at most every [`SWEEP`], and after what it could not take
//! in memory (a batch past [`HANDED_BYTES`], a full channel, a failed
//! write).
//!
//! Whoever indexes a queued step first locks its queue row
//! (`FOR UPDATE`) and writes the document only if the row is still
//! there, deleting it in the same transaction. An erasure deletes the
//! step's queue row before its document: it waits for a connection that
//! is indexing the step, then deletes the document that one wrote; once
//! the erasure has deleted the row, nobody writes the document. Locks
//! never wait in a cycle: the indexer and the first pass of a search
//! skip rows others hold (`SKIP LOCKED`), and a search waits for a held
//! row only while it holds no other.

use super::connection::{PgConn, col, connect};
use super::tsvector::TsVector;
use crate::engine::org_range;
use crate::{DbContext, StoreError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
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
/// Batches of documents waiting for the indexer in memory (at most
/// [`HANDED_BYTES`] each); past it a batch's documents are indexed from
/// the log instead of holding more memory.
const HANDED_BATCHES: usize = 32;
/// Most documents the indexer writes in one statement.
const WRITE_DOCS: usize = 4_096;
/// Queued steps indexed from the log per transaction (at most
/// [`PAGE_BYTES`] of text).
const PAGE: i64 = 512;
/// Bytes of text read from the log per transaction, besides the page's
/// last step: the memory a page holds.
const PAGE_BYTES: i64 = 16 * 1024 * 1024;
/// How often an idle indexer looks whether it owes a catch-up from the log
/// (after a failure).
const IDLE: Duration = Duration::from_secs(1);
/// How long an indexer that idles goes at most without indexing the
/// queue from the log: steps queued by a server that stopped before
/// writing their documents, or left by a connection that held their rows
/// and gave up, in orgs nobody searches.
const SWEEP: Duration = Duration::from_secs(60);

/// This process's indexer: a thread with its own connection.
pub(super) struct SearchIndexer {
    jobs: Mutex<Option<SyncSender<Vec<QueuedDoc>>>>,
    /// Set when documents were not handed over: the indexer then indexes
    /// the whole queue from the log.
    behind: Arc<AtomicBool>,
    /// Set when the store closes: a catch-up from the log stops after its
    /// page (what is left stays queued), so a close never waits for a
    /// long queue.
    closing: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl SearchIndexer {
    /// Starts the indexer of a store on `config`'s database; its first
    /// work is the queue as it stands.
    pub(super) fn start(config: postgres::Config) -> SearchIndexer {
        let (jobs, handed) = sync_channel(HANDED_BATCHES);
        let behind = Arc::new(AtomicBool::new(true));
        let closing = Arc::new(AtomicBool::new(false));
        let flags = (Arc::clone(&behind), Arc::clone(&closing));
        let thread = std::thread::Builder::new()
            .name("cairn-pg-search".into())
            .spawn(move || run(&config, &handed, &flags.0, &flags.1))
            .ok();
        SearchIndexer {
            // No thread: searches index what is queued themselves.
            jobs: Mutex::new(thread.is_some().then_some(jobs)),
            behind,
            closing,
            thread: Mutex::new(thread),
        }
    }

    /// Hands over the documents of a committed transaction; `complete`
    /// is false when some of its queued steps' documents were not kept.
    pub(super) fn hand(&self, docs: Vec<QueuedDoc>, complete: bool) {
        if !complete {
            self.behind.store(true, Ordering::Release);
        }
        if docs.is_empty() && complete {
            return;
        }
        let Ok(jobs) = self.jobs.lock() else {
            return;
        };
        match jobs.as_ref().map(|jobs| jobs.try_send(docs)) {
            Some(Ok(())) => {}
            Some(Err(TrySendError::Full(_))) => self.behind.store(true, Ordering::Release),
            // The thread is gone: searches index what is queued.
            Some(Err(TrySendError::Disconnected(_))) | None => {}
        }
    }
}

impl Drop for SearchIndexer {
    fn drop(&mut self) {
        // A clean close writes what was handed over (a crash leaves it
        // queued in the database), not a catch-up's whole queue.
        self.closing.store(true, Ordering::Release);
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.take();
        }
        if let Ok(mut thread) = self.thread.lock()
            && let Some(thread) = thread.take()
        {
            let _ = thread.join();
        }
    }
}

/// The indexer thread: writes the documents handed over, and the queue
/// from the log when `behind` (a page at a time until `closing`), until
/// every sender is gone.
fn run(
    config: &postgres::Config,
    handed: &Receiver<Vec<QueuedDoc>>,
    behind: &AtomicBool,
    closing: &AtomicBool,
) {
    let mut conn: Option<PgConn> = None;
    let mut swept = Instant::now();
    loop {
        let mut docs = match handed.recv_timeout(IDLE) {
            Ok(docs) => docs,
            Err(RecvTimeoutError::Timeout) => {
                if swept.elapsed() >= SWEEP {
                    swept = Instant::now();
                    behind.store(true, Ordering::Release);
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
        let catch_up = behind.swap(false, Ordering::AcqRel);
        if docs.is_empty() && !catch_up {
            continue;
        }
        let done = connected(&mut conn, config).and_then(|conn| {
            write_handed(conn, &docs)?;
            if catch_up {
                finish_range(&mut conn.client, i64::MIN, i64::MAX, Some(closing))?;
            }
            Ok(())
        });
        if done.is_err() {
            // What was not written stays queued in the database: indexed
            // from the log on the next round (or by a search first).
            conn = None;
            behind.store(true, Ordering::Release);
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

/// Writes documents handed over in memory, each only if its step is
/// still queued and no other connection is indexing it, with the
/// deletion of its queue row: one statement, one transaction. A step the
/// log says is erased gets none (its erasure deleted the queue row
/// first; this also covers a server of a version without the queue,
/// whose erasure deletes the document only).
fn write_handed(conn: &mut PgConn, docs: &[QueuedDoc]) -> Result<(), StoreError> {
    for docs in docs.chunks(WRITE_DOCS) {
        let ids: Vec<i64> = docs.iter().map(|d| d.id).collect();
        let orgs: Vec<i64> = docs.iter().map(|d| d.org).collect();
        let vectors: Vec<&TsVector> = docs.iter().map(|d| &d.vector).collect();
        conn.db().execute(
            "WITH held AS (
               SELECT id FROM search_queue WHERE id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED
             ), gone AS (
               DELETE FROM search_queue q USING held h WHERE q.id = h.id
             )
             INSERT INTO step_search (id, org, doc)
             SELECT d.id, d.org, d.doc
             FROM UNNEST($1::int8[], $2::int8[], $3::tsvector[]) AS d(id, org, doc)
             JOIN held h ON h.id = d.id
             JOIN entries e ON e.id = d.id AND NOT e.erased
             ON CONFLICT (id) DO NOTHING",
            &[&ids, &orgs, &vectors],
            "writing full-text documents",
        )?;
    }
    Ok(())
}

/// Indexes every step of org `org` queued when it is called, from the
/// log, waiting for those another connection is indexing: afterwards
/// `step_search` holds the document of every step the org's log held
/// then (but those erased).
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
    match last {
        Some(last) => finish_range(client, low, last, None),
        None => Ok(()),
    }
}

/// Indexes the queued steps with ids in `low..=high` from the log, a page
/// per transaction. A search (`until: None`) waits for the rows another
/// connection holds, one at a time once none other is left (the
/// transaction then holds no other lock, so it cannot close a cycle); an
/// indexer skips them and stops after the page during which `until` is
/// set.
fn finish_range(
    client: &mut postgres::Client,
    low: i64,
    high: i64,
    until: Option<&AtomicBool>,
) -> Result<(), StoreError> {
    let wait = until.is_none();
    loop {
        if until.is_some_and(|stop| stop.load(Ordering::Acquire)) {
            return Ok(());
        }
        let mut tx = client
            .transaction()
            .context("starting to index queued steps")?;
        let mut ids: Vec<i64> = tx
            .query(
                "SELECT id FROM search_queue WHERE id BETWEEN $1 AND $2
                 ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED",
                &[&low, &high, &PAGE],
            )
            .context("taking queued steps")?
            .iter()
            .map(|row| col(row, 0))
            .collect::<Result<_, _>>()?;
        if ids.is_empty() && wait {
            ids = tx
                .query(
                    "SELECT id FROM search_queue WHERE id BETWEEN $1 AND $2
                     ORDER BY id LIMIT 1 FOR UPDATE",
                    &[&low, &high],
                )
                .context("waiting for queued steps being indexed")?
                .iter()
                .map(|row| col(row, 0))
                .collect::<Result<_, _>>()?;
        }
        if ids.is_empty() {
            return tx.commit().context("indexing queued steps");
        }
        index_queued(&mut tx, &ids)?;
        tx.commit().context("indexing queued steps")?;
    }
}

/// Indexes queued steps whose rows the transaction holds, from the log,
/// in id order up to about [`PAGE_BYTES`] of text (at least one step),
/// and deletes the queue rows of those it got to (a step erased since, or
/// without a document, too). The rest stay queued.
fn index_queued(tx: &mut postgres::Transaction<'_>, ids: &[i64]) -> Result<(), StoreError> {
    let rows = tx
        .query(
            "SELECT id, org, step, COALESCE(before, 0) < $2 AS within,
               CASE WHEN step THEN content END, CASE WHEN step THEN input_data END,
               CASE WHEN step THEN output_data END, CASE WHEN step THEN metadata END
             FROM (
               SELECT q.id, e.org, COALESCE(e.type = 'step' AND NOT e.erased, FALSE) AS step,
                 e.content, e.input_data, e.output_data, e.metadata,
                 sum(COALESCE(octet_length(e.content), 0) + COALESCE(octet_length(e.input_data), 0)
                     + COALESCE(octet_length(e.output_data), 0) + COALESCE(octet_length(e.metadata), 0))
                   OVER (ORDER BY q.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
               FROM UNNEST($1::int8[]) AS q(id) LEFT JOIN entries e ON e.id = q.id
             ) page
             ORDER BY id",
            &[&ids, &PAGE_BYTES],
        )
        .context("reading queued steps")?;
    let (mut done, mut doc_ids, mut orgs, mut vectors) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for row in &rows {
        if !col::<bool>(row, 3)? {
            break;
        }
        let id: i64 = col(row, 0)?;
        done.push(id);
        if !col::<bool>(row, 2)? {
            continue;
        }
        let columns: [Option<String>; 4] = [col(row, 4)?, col(row, 5)?, col(row, 6)?, col(row, 7)?];
        if let Some(vector) = document_of(&columns) {
            doc_ids.push(id);
            orgs.push(col::<i64>(row, 1)?);
            vectors.push(vector);
        }
    }
    if insert_in_savepoint(tx, &doc_ids, &orgs, &vectors).is_err() {
        // One document PostgreSQL refuses (none should: documents are
        // capped below `tsvector`'s limit) must not keep the org's
        // searches failing: the others are written one by one, and a
        // step refused alone stays unindexed, as a step without words.
        for ((id, org), vector) in doc_ids.iter().zip(&orgs).zip(&vectors) {
            use std::slice::from_ref;
            let _ = insert_in_savepoint(tx, from_ref(id), from_ref(org), from_ref(vector));
        }
    }
    tx.execute("DELETE FROM search_queue WHERE id = ANY($1)", &[&done])
        .context("indexing queued steps")?;
    Ok(())
}

/// [`insert_documents`] undone alone if it fails (a lost connection
/// fails the transaction's next statement too).
fn insert_in_savepoint(
    tx: &mut postgres::Transaction<'_>,
    ids: &[i64],
    orgs: &[i64],
    vectors: &[TsVector],
) -> Result<(), StoreError> {
    let mut savepoint = tx.savepoint("document").context("indexing queued steps")?;
    insert_documents(&mut savepoint, ids, orgs, vectors)?;
    savepoint.commit().context("indexing queued steps")
}

/// The `tsvector` of a step stored with these text columns (`content`,
/// `input_data`, `output_data`, `metadata`), as its batch computed it;
/// `None` for a step without words.
pub(super) fn document_of(columns: &[Option<String>; 4]) -> Option<TsVector> {
    let [content, input, output, metadata] = columns.each_ref().map(Option::as_deref);
    let doc = crate::fulltext::stored_document(content, [input, output, metadata]);
    (!doc.is_empty()).then(|| TsVector::of(&doc))
}

/// Inserts documents read back from the log (one already there, from a
/// connection that indexed the step first, is kept).
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
