//! [`PgTx`], a batch's transaction as the engine sees it: the orgs it
//! locked, the sessions it touches (read ahead, one query per org), and
//! the rows it writes, held as pending and sent in a few round trips (one
//! `COPY` for the log entries, one statement for every derived row).
//!
//! This file holds the transaction itself: its state, the sessions read
//! ahead, the rows pending and how they are sent; what the engine asks of
//! it, the `WriteTx` impl, is in `write_tx`.

use super::connection::{Db, col};
use super::locks::{Cache, load_org, lock_orgs};
use super::rows::{optional_chain_end_at, successor};
use super::tsvector::TsVector;
use crate::engine::{OrgState, SessionState, StoredSession, chain_end};
use crate::{DbContext, StoreError, WriteRequest};
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::Type;
use postgres::{GenericClient, Row};
use std::collections::{HashMap, HashSet};

mod write_tx;

/// Pending entries beyond which a transaction sends them early.
const FLUSH_ROWS: usize = 4_096;

/// One `entries` row, owned, waiting for the batch's `COPY`.
#[derive(Default)]
struct EntryRow {
    id: i64,
    org: i64,
    seq: i64,
    entry_type: String,
    logged_at: i64,
    record_hash: Vec<u8>,
    leaf_hash: Vec<u8>,
    view: Option<String>,
    sid: Option<i64>,
    step_index: Option<i64>,
    trace_id: Option<String>,
    agent_id: Option<String>,
    kind: Option<String>,
    kind_label: Option<String>,
    content: Option<String>,
    input_data: Option<String>,
    output_data: Option<String>,
    confidence: Option<f64>,
    duration_ms: Option<i64>,
    token_count: Option<i64>,
    model: Option<String>,
    metadata: Option<String>,
    created_at: Option<i64>,
    turn_id: Option<String>,
    turn_step: Option<i64>,
    task_id: Option<String>,
    links: Option<String>,
    status: Option<String>,
    seed: Option<Vec<u8>>,
    digest: Option<Vec<u8>>,
    prev_hash: Option<Vec<u8>>,
    sig_key_id: Option<String>,
    signature: Option<Vec<u8>>,
    has_embedding: bool,
    erased: bool,
    hidden: Option<String>,
    salts: Option<Vec<u8>>,
    prev_seq: Option<i64>,
}

const COPY_ENTRIES: &str = "COPY entries (id, org, seq, type, logged_at, record_hash, leaf_hash, view, sid, step_index,
    trace_id, agent_id, kind, kind_label, content, input_data, output_data, confidence, duration_ms, token_count,
    model, metadata, created_at, turn_id, turn_step, task_id, links, status, seed, digest, prev_hash, sig_key_id,
    signature, has_embedding, erased, hidden, salts, prev_seq) FROM STDIN BINARY";

/// Column types of [`COPY_ENTRIES`], in order.
const ENTRY_TYPES: [Type; 38] = [
    Type::INT8,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::INT8,
    Type::BYTEA,
    Type::BYTEA,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::FLOAT8,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::BYTEA,
    Type::BYTEA,
    Type::BYTEA,
    Type::TEXT,
    Type::BYTEA,
    Type::BOOL,
    Type::BOOL,
    Type::TEXT,
    Type::BYTEA,
    Type::INT8,
];

/// Rows a batch wrote but has not sent yet: they go in a few round trips
/// (one `COPY` for every log entry) before anything reads them back and
/// before the commit.
#[derive(Default)]
struct Pending {
    entries: Vec<EntryRow>,
    nodes: Vec<(i64, i32, i64, Vec<u8>)>,
    /// Steps queued for the embedder: (id, org).
    embed_queue: Vec<(i64, i64)>,
    /// Full-text documents: (id, org, the document's `tsvector`).
    search: Vec<(i64, i64, TsVector)>,
    heads: Vec<(i64, i64, i64, i64)>,
    /// `(session, kind)` pairs for `session_kinds`.
    kinds: Vec<(i64, &'static str)>,
}

/// The `tsvector`s of a batch's prepared steps' documents, computed
/// before the batch takes its orgs' locks (analysis is most of a step's
/// indexing cost; a step prepared inside the batch is analyzed when its
/// document is written). Keyed by document.
pub(super) fn vectors_before_locking(batch: &[WriteRequest]) -> HashMap<String, TsVector> {
    batch
        .iter()
        .filter_map(|request| match request {
            WriteRequest::Prepared(p) => p.search_doc.as_deref(),
            _ => None,
        })
        .map(|doc| (doc.to_owned(), TsVector::of(doc)))
        .collect()
}

/// A batch's transaction, seen by the engine: the orgs it locked, loaded
/// from committed data, the sessions it will touch, read in one query per
/// org, and the rows it writes, sent in bulk.
pub(super) struct PgTx<'a, C: GenericClient> {
    db: Db<'a, C>,
    pub(super) orgs: HashMap<String, OrgState>,
    locked: HashSet<String>,
    /// Committed state of sessions read ahead (None: does not exist).
    sessions: HashMap<(i64, String), Option<SessionState>>,
    pending: Pending,
    cache: &'a mut Cache,
    /// `tsvector`s computed before locking, by document.
    pub(super) vectors: HashMap<String, TsVector>,
}

/// The sessions of a batch: registry row, seal, the step the head row
/// names and whether the log holds a step after it (the head lags: the
/// walk forward then probes step by step, which is rare; checking here
/// saves the batch a round trip per session).
static SESSIONS_BY_ID: &str = "SELECT s.session_id, s.sid, s.agent_id, s.profile, s.genesis,
   s.max_clock_skew_s, EXISTS (SELECT 1 FROM entries x WHERE x.sid = s.sid AND x.type = 'seal'),
   h.first_seq, e.seq, e.step_index, e.record_hash, e.created_at, e.kind,
   EXISTS (SELECT 1 FROM entries n WHERE COALESCE(n.prev_seq, -1) = COALESCE(e.seq, -1)
             AND n.sid = s.sid AND n.type = 'step')
 FROM sessions s LEFT JOIN session_heads h ON h.sid = s.sid
 LEFT JOIN entries e ON e.id = ((s.org << 40) | h.last_seq) AND e.sid = s.sid AND e.type = 'step'
   AND e.step_index = h.last_index
 WHERE s.org = $1 AND s.session_id = ANY($2)";

/// A session from a row of [`SESSIONS_BY_ID`], with the step its head row
/// names as the end (to be walked forward to the log's real end if the
/// last column says the log holds a step after it).
fn session_from_row(row: &Row) -> Result<(String, StoredSession), StoreError> {
    let end = optional_chain_end_at(row, 8)?;
    Ok((
        col(row, 0)?,
        StoredSession {
            sid: col(row, 1)?,
            agent_id: col(row, 2)?,
            profile: col(row, 3)?,
            genesis: col(row, 4)?,
            max_clock_skew_s: col(row, 5)?,
            sealed: col(row, 6)?,
            first_seq: col(row, 7)?,
            end,
        },
    ))
}

impl<'a, C: GenericClient> PgTx<'a, C> {
    /// Locks the orgs `names` for the transaction and loads their state.
    pub(super) fn begin(
        mut db: Db<'a, C>,
        names: HashSet<String>,
        cache: &'a mut Cache,
    ) -> Result<PgTx<'a, C>, StoreError> {
        lock_orgs(&mut db, &names)?;
        let mut orgs = HashMap::new();
        for name in &names {
            if let Some(org) = load_org(&mut db, cache, name)? {
                orgs.insert(name.clone(), org);
            }
        }
        Ok(PgTx {
            db,
            orgs,
            locked: names,
            sessions: HashMap::new(),
            pending: Pending::default(),
            cache,
            vectors: HashMap::new(),
        })
    }

    /// Reads the committed state of the sessions `ids` of `org`: their
    /// rows, each with whether the log holds a step after the one its head
    /// row names, in one query; a session whose head row lags is then
    /// walked forward probe by probe.
    pub(super) fn prefetch_sessions(&mut self, org: i64, ids: &[String]) -> Result<(), StoreError> {
        let rows = self
            .db
            .query(SESSIONS_BY_ID, &[&org, &ids], "loading sessions")?;
        for id in ids {
            self.sessions.insert((org, id.clone()), None);
        }
        for row in &rows {
            let (id, mut stored) = session_from_row(row)?;
            let sid = stored.sid;
            let lags: bool = col(row, 13)?;
            if lags {
                stored.end = chain_end(stored.end.take(), |seq| successor(&mut self.db, sid, seq))?;
            }
            if stored.end.is_some() && stored.first_seq.is_none() {
                stored.first_seq = successor(&mut self.db, sid, None)?.map(|e| e.seq);
            }
            self.sessions.insert((org, id), Some(stored.into_state()?));
        }
        Ok(())
    }

    /// Bounds the memory a large import holds.
    fn flush_if_large(&mut self) -> Result<(), StoreError> {
        if self.pending.entries.len() >= FLUSH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends every pending row.
    pub(super) fn flush(&mut self) -> Result<(), StoreError> {
        let pending = std::mem::take(&mut self.pending);
        if !pending.entries.is_empty() {
            let sink = self
                .db
                .client
                .copy_in(COPY_ENTRIES)
                .context("writing log entries")?;
            let mut writer = BinaryCopyInWriter::new(sink, &ENTRY_TYPES);
            for e in &pending.entries {
                writer
                    .write(&[
                        &e.id,
                        &e.org,
                        &e.seq,
                        &e.entry_type,
                        &e.logged_at,
                        &e.record_hash,
                        &e.leaf_hash,
                        &e.view,
                        &e.sid,
                        &e.step_index,
                        &e.trace_id,
                        &e.agent_id,
                        &e.kind,
                        &e.kind_label,
                        &e.content,
                        &e.input_data,
                        &e.output_data,
                        &e.confidence,
                        &e.duration_ms,
                        &e.token_count,
                        &e.model,
                        &e.metadata,
                        &e.created_at,
                        &e.turn_id,
                        &e.turn_step,
                        &e.task_id,
                        &e.links,
                        &e.status,
                        &e.seed,
                        &e.digest,
                        &e.prev_hash,
                        &e.sig_key_id,
                        &e.signature,
                        &e.has_embedding,
                        &e.erased,
                        &e.hidden,
                        &e.salts,
                        &e.prev_seq,
                    ])
                    .context("writing log entries")?;
            }
            writer.finish().context("writing log entries")?;
        }
        // Every derived row of the batch in one statement (one round trip
        // inside the org's lock instead of five; each part inserts nothing
        // when its arrays are empty).
        let derived = pending.nodes.len()
            + pending.embed_queue.len()
            + pending.search.len()
            + pending.kinds.len()
            + pending.heads.len();
        if derived == 0 {
            return Ok(());
        }
        let (node_orgs, levels, node_indexes, node_hashes) = unzip4(pending.nodes);
        let (queued_ids, queued_orgs): (Vec<i64>, Vec<i64>) =
            pending.embed_queue.into_iter().unzip();
        let mut search_ids = Vec::with_capacity(pending.search.len());
        let mut search_orgs = Vec::with_capacity(pending.search.len());
        let mut vectors = Vec::with_capacity(pending.search.len());
        for (id, org, vector) in pending.search {
            search_ids.push(id);
            search_orgs.push(org);
            vectors.push(vector);
        }
        let mut kinds = pending.kinds;
        // One order for every writer: concurrent inserts of the same keys
        // then wait rather than deadlock.
        kinds.sort_unstable();
        kinds.dedup();
        let (kind_sids, kind_names): (Vec<i64>, Vec<&str>) = kinds.into_iter().unzip();
        let (head_sids, firsts, lasts, last_indexes) = unzip4(pending.heads);
        self.db.execute(
            "WITH n AS (
               INSERT INTO nodes (org, level, idx, hash)
               SELECT * FROM UNNEST($1::int8[], $2::int4[], $3::int8[], $4::bytea[])
             ), q AS (
               INSERT INTO embedding_queue (id, org)
               SELECT * FROM UNNEST($5::int8[], $6::int8[]) ON CONFLICT DO NOTHING
             ), f AS (
               INSERT INTO step_search (id, org, doc)
               SELECT * FROM UNNEST($7::int8[], $8::int8[], $9::tsvector[])
             ), k AS (
               INSERT INTO session_kinds (sid, kind)
               SELECT * FROM UNNEST($10::int8[], $11::text[]) ON CONFLICT DO NOTHING
             ), h AS (
               INSERT INTO session_heads (sid, first_seq, last_seq, last_index)
               SELECT * FROM UNNEST($12::int8[], $13::int8[], $14::int8[], $15::int8[])
               ON CONFLICT (sid) DO UPDATE SET last_seq = excluded.last_seq, last_index = excluded.last_index
               WHERE session_heads.first_seq = excluded.first_seq
                 AND session_heads.last_seq < excluded.last_seq
                 AND session_heads.last_index < excluded.last_index
             )
             SELECT 1",
            &[
                &node_orgs,
                &levels,
                &node_indexes,
                &node_hashes,
                &queued_ids,
                &queued_orgs,
                &search_ids,
                &search_orgs,
                &vectors,
                &kind_sids,
                &kind_names,
                &head_sids,
                &firsts,
                &lasts,
                &last_indexes,
            ],
            "writing the batch's tree nodes, search documents and session heads",
        )?;
        Ok(())
    }
}

fn unzip4<A, B, C, D>(rows: Vec<(A, B, C, D)>) -> (Vec<A>, Vec<B>, Vec<C>, Vec<D>) {
    let mut out = (
        Vec::with_capacity(rows.len()),
        Vec::with_capacity(rows.len()),
        Vec::with_capacity(rows.len()),
        Vec::with_capacity(rows.len()),
    );
    for (a, b, c, d) in rows {
        out.0.push(a);
        out.1.push(b);
        out.2.push(c);
        out.3.push(d);
    }
    out
}
