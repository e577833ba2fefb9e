//! [`PgTx`], a batch's transaction as the engine sees it: the orgs it
//! locked, the sessions it touches (read ahead, one query per org), and
//! the rows it writes, held as pending and sent in a few round trips (one
//! `COPY` for the log entries, one statement for every derived row).
//!
//! This file holds the transaction itself: its state, the rows pending
//! and how they are sent; what it reads ahead of the engine (sessions,
//! chosen ids, turn numbers) is in `ahead`; what the engine asks of it,
//! the `WriteTx` impl, is in `write_tx`.

use super::connection::Db;
use super::locks::{Cache, CaughtUp, load_org, lock_orgs};
use super::search_queue::{HANDED_BYTES, QueuedDoc};
use crate::StoreError;
use crate::engine::{OrgState, SessionState};
use postgres::GenericClient;
use postgres::types::Type;
use std::collections::{HashMap, HashSet};

mod ahead;
mod write_tx;

pub(super) use ahead::sessions_before_locking;

/// Pending entries beyond which a transaction sends them early.
const FLUSH_ROWS: usize = 4_096;

/// Pending entries' bytes (about, as [`EntryRow::approximate_size`]
/// counts them, with their documents' `tsvector`s) beyond which a
/// transaction sends them early: 4,096 steps
/// near the limits of a step (about 830 KB each) would otherwise be held
/// in memory at once, over 3 GB.
const FLUSH_BYTES: usize = 64 << 20;

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

impl EntryRow {
    /// About the bytes of the row in a binary `COPY`: its free-form texts
    /// (a step's content and JSON, its links, an operational record's
    /// view, an erased step's hidden text), which can be large, and a
    /// bound for the rest (numbers, hashes, a signature, ids and labels).
    fn approximate_size(&self) -> usize {
        const THE_REST: usize = 2048;
        THE_REST
            + [
                &self.content,
                &self.input_data,
                &self.output_data,
                &self.metadata,
                &self.links,
                &self.view,
                &self.hidden,
            ]
            .into_iter()
            .map(|text| text.as_ref().map_or(0, String::len))
            .sum::<usize>()
    }
}

const COPY_ENTRIES: &str = "COPY entries (id, org, seq, type, logged_at, record_hash, leaf_hash, view, sid, step_index,
    trace_id, agent_id, kind, kind_label, content, input_data, output_data, confidence, duration_ms, token_count,
    model, metadata, created_at, turn_id, turn_step, task_id, links, status, seed, digest, prev_hash, sig_key_id,
    signature, has_embedding, erased, hidden, salts, prev_seq) FROM STDIN BINARY";

/// Column types of [`COPY_ENTRIES`], in order.
static ENTRY_TYPES: [Type; 38] = [
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
    /// The entries' approximate size, with the search documents'
    /// `tsvector`s.
    entry_bytes: usize,
    nodes: Vec<(i64, i32, i64, Vec<u8>)>,
    /// Steps queued for the embedder: (id, org).
    embed_queue: Vec<(i64, i64)>,
    /// Full-text documents, queued in `search_queue`.
    search: Vec<QueuedDoc>,
    heads: Vec<(i64, i64, i64, i64)>,
    /// `(session, kind)` pairs for `session_kinds`.
    kinds: Vec<(i64, &'static str)>,
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
    /// What each org's state read under the lock caught up with, by org id.
    caught_up: HashMap<i64, CaughtUp>,
    /// The record ids the batch's steps choose or link to, looked up at
    /// its start ([`PgTx::prefetch_trace_ids`]), `(org, id)` to the entry
    /// type of the record the log held with that id then (`None`: none):
    /// a batch of steps that name their ids (OTLP spans, clients that
    /// retry) or their parents asks once, instead of sending its pending
    /// rows and asking once per step.
    ids_looked_up: HashMap<(i64, String), Option<String>>,
    /// The ids the batch has written since (to their entry type), while
    /// `ids_looked_up` holds any: whatever the look-up said.
    ids_written: HashMap<(i64, String), String>,
    /// The turn numbers the batch's steps give, looked up the same way
    /// ([`PgTx::prefetch_turn_steps`]): `(sid, turn_id, turn_step)` to
    /// whether a stored step held it then.
    turns_looked_up: HashMap<(i64, String, i64), bool>,
    /// Whether the batch's steps give turn numbers: then the numbers it
    /// writes and the sessions it opens are kept track of.
    turns_tracked: bool,
    /// The turn numbers the batch has written, while `turns_tracked`.
    turns_written: HashSet<(i64, String, i64)>,
    /// The sessions the batch opened, while `turns_tracked`: they hold no
    /// step but the batch's own.
    sessions_opened: HashSet<i64>,
    /// The documents of the steps queued in `search_queue`, for the
    /// indexer once the transaction commits, up to [`HANDED_BYTES`].
    handed: Vec<QueuedDoc>,
    /// The bytes of every queued step's document, kept or not: past
    /// [`HANDED_BYTES`], the rest are left out of `handed`.
    handed_bytes: usize,
    /// The orgs whose cached agent keys this transaction brought up to
    /// date under their lock ([`PgTx::org_keys`]).
    keys_read: HashSet<i64>,
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
        let mut caught_up = HashMap::new();
        for name in &names {
            if let Some((org, caught)) = load_org(&mut db, cache, name)? {
                if caught.from < caught.to {
                    if !cache.shared.contains(name) {
                        cache.shared.insert(name.clone());
                    }
                } else {
                    cache.shared.remove(name);
                }
                cache.catch_up_sessions(name, &caught);
                caught_up.insert(org.id, caught);
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
            caught_up,
            ids_looked_up: HashMap::new(),
            ids_written: HashMap::new(),
            turns_looked_up: HashMap::new(),
            turns_tracked: false,
            turns_written: HashSet::new(),
            sessions_opened: HashSet::new(),
            handed: Vec::new(),
            handed_bytes: 0,
            keys_read: HashSet::new(),
        })
    }

    /// Queues an entry; bounds the memory a large batch or import holds.
    fn push_entry(&mut self, row: EntryRow) -> Result<(), StoreError> {
        if !self.ids_looked_up.is_empty()
            && let Some(id) = &row.trace_id
        {
            self.ids_written
                .insert((row.org, id.clone()), row.entry_type.clone());
        }
        if self.turns_tracked
            && let (Some(sid), Some(turn_id), Some(number)) = (row.sid, &row.turn_id, row.turn_step)
        {
            self.turns_written.insert((sid, turn_id.clone(), number));
        }
        self.pending.entry_bytes += row.approximate_size();
        self.pending.entries.push(row);
        if self.pending.entries.len() >= FLUSH_ROWS || self.pending.entry_bytes >= FLUSH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// The documents of the steps the transaction queued for full-text
    /// search, and whether they are all there, for
    /// [`SearchIndexer::hand`](super::search_queue::SearchIndexer::hand)
    /// once it commits.
    pub(super) fn take_handed(&mut self) -> (Vec<QueuedDoc>, bool) {
        let all = self.handed_bytes <= HANDED_BYTES;
        (std::mem::take(&mut self.handed), all)
    }

    /// Sends every pending row.
    pub(super) fn flush(&mut self) -> Result<(), StoreError> {
        let pending = std::mem::take(&mut self.pending);
        if !pending.entries.is_empty() {
            let entries = &pending.entries;
            self.db
                .copy_in(COPY_ENTRIES, &ENTRY_TYPES, "writing log entries", |rows| {
                    for e in entries {
                        rows.push(&[
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
                        ])?;
                    }
                    Ok(())
                })?;
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
        // The documents are written after the commit, outside the lock
        // (`search_queue.rs`): here only the steps are queued.
        let search_ids: Vec<i64> = pending.search.iter().map(|doc| doc.id).collect();
        for doc in pending.search {
            self.handed_bytes += doc.vector.len();
            if self.handed_bytes <= HANDED_BYTES {
                self.handed.push(doc);
            }
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
               INSERT INTO search_queue (id) SELECT * FROM UNNEST($7::int8[])
             ), k AS (
               INSERT INTO session_kinds (sid, kind)
               SELECT * FROM UNNEST($8::int8[], $9::text[]) ON CONFLICT DO NOTHING
             ), h AS (
               INSERT INTO session_heads (sid, first_seq, last_seq, last_index)
               SELECT * FROM UNNEST($10::int8[], $11::int8[], $12::int8[], $13::int8[])
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
                &kind_sids,
                &kind_names,
                &head_sids,
                &firsts,
                &lasts,
                &last_indexes,
            ],
            "writing the batch's tree nodes, queued steps and session heads",
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

#[cfg(test)]
mod tests {
    use super::{PgTx, sessions_before_locking};
    use crate::pg::connection::Db;
    use crate::pg::{PgOptions, PgStore};
    use crate::{LedgerStore, NewStep, WriteRequest, load_or_create_server_key};
    use cairn_testkit::PgCluster;
    use std::collections::HashSet;

    const ORG: &str = "early";

    fn step(session: &str) -> WriteRequest {
        WriteRequest::Step(Box::new(NewStep {
            org_id: ORG.into(),
            session_id: session.into(),
            agent_id: "agent".into(),
            kind_label: "Observation".into(),
            content: Some("seen".into()),
            caller: "test".into(),
            ..NewStep::default()
        }))
    }

    /// Two servers on one new database of a throwaway cluster, with its
    /// URL (the cluster lives as long as the value).
    struct TwoServers {
        _cluster: PgCluster,
        _keys: tempfile::TempDir,
        url: String,
        first: PgStore,
        second: PgStore,
    }

    fn two_servers(db: &str) -> Option<TwoServers> {
        let cluster = PgCluster::start()?;
        let url = cluster.create_database(db);
        let keys = tempfile::tempdir().unwrap();
        let open = || {
            let key = load_or_create_server_key(keys.path(), "cairn.local").unwrap();
            PgStore::open(PgOptions::new(url.clone()), key).unwrap()
        };
        let (first, second) = (open(), open());
        Some(TwoServers {
            _cluster: cluster,
            _keys: keys,
            url,
            first,
            second,
        })
    }

    fn write(store: &PgStore, session: &str) {
        for written in store.append_batch(&[step(session)]).unwrap() {
            written.unwrap();
        }
    }

    /// The entries another server appended are checked as a batch catches
    /// its frontier up with them under the lock: each leaf is recomputed
    /// from its entry, and a stored leaf that is not the entry's fails the
    /// batch rather than being folded into the tree it signs.
    #[test]
    fn entries_another_server_appended_are_checked_when_caught_up() {
        let Some(servers) = two_servers("caught_up") else {
            return;
        };
        let (url, first, second) = (&servers.url, &servers.first, &servers.second);
        write(first, "a");
        for _ in 0..3 {
            write(second, "b");
        }
        // Caught up with the other server's entries, then appends after them.
        write(first, "a");
        for _ in 0..2 {
            write(second, "b");
        }
        let mut attacker = postgres::Client::connect(url, postgres::NoTls).unwrap();
        attacker
            .batch_execute(
                "SET session_replication_role = replica;
                 UPDATE entries SET leaf_hash = sha256(leaf_hash) WHERE id = (SELECT max(id) FROM entries)",
            )
            .unwrap();
        let failed = first.append_batch(&[step("a")]);
        let message = format!("{failed:?}");
        assert!(
            failed.is_err() && message.contains("does not match its stored leaf"),
            "{message}"
        );
    }

    fn step_index(outcome: Result<crate::Written, crate::Refusal>) -> u64 {
        match outcome.unwrap() {
            crate::Written::Step { step_index, .. } => step_index,
            other => panic!("not a step: {other:?}"),
        }
    }

    /// Two servers appending to one session in turn: a server takes the
    /// session's state from what its own last batch left only while no
    /// entry the other appended since names the session, so each step
    /// continues the other's chain, and a seal by one is seen by the other.
    #[test]
    fn a_kept_session_is_dropped_once_another_server_writes_it() {
        let Some(servers) = two_servers("kept_sessions") else {
            return;
        };
        let (first, second) = (&servers.first, &servers.second);
        let mut indexes = Vec::new();
        for _ in 0..3 {
            for store in [first, second, first] {
                let outcomes = store.append_batch(&[step("shared")]).unwrap();
                indexes.extend(outcomes.into_iter().map(step_index));
            }
        }
        assert_eq!(indexes, (0..9).collect::<Vec<u64>>());
        assert!(first.cache.lock().unwrap().keeps_session(ORG, "shared"));

        // The other server appends; under the lock, the first drops the
        // state it kept.
        write(second, "shared");
        let mut guard = first.writer.lock().unwrap();
        let conn = guard.as_mut().unwrap();
        let mut cache = first.cache.lock().unwrap();
        let mut tx = conn.client.transaction().unwrap();
        let db = Db {
            client: &mut tx,
            statements: &mut conn.statements,
        };
        let pg_tx = PgTx::begin(db, HashSet::from([ORG.to_owned()]), &mut cache).unwrap();
        drop(pg_tx);
        drop(tx);
        assert!(!cache.keeps_session(ORG, "shared"));
        drop(cache);
        drop(guard);

        let outcomes = first.append_batch(&[step("shared")]).unwrap();
        assert_eq!(
            outcomes.into_iter().map(step_index).collect::<Vec<_>>(),
            [10]
        );
        let sealed = second
            .append_batch(&[WriteRequest::Seal {
                org_id: ORG.into(),
                session_id: "shared".into(),
                require_reflection: false,
            }])
            .unwrap();
        assert!(sealed[0].is_ok(), "{:?}", sealed[0]);
        let refused = first.append_batch(&[step("shared")]).unwrap();
        assert!(refused[0].is_err(), "a step after the other server's seal");
        let verdict = crate::ops::verify_org(first, ORG, &[], &[], &mut |_| {}).unwrap();
        assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
    }

    /// Two servers on one database: what one read of a batch's sessions
    /// before taking the org's lock is kept under the lock only for the
    /// sessions no entry appended in between (by the other server) names.
    #[test]
    fn sessions_read_before_the_lock_are_kept_only_if_untouched_since() {
        let Some(servers) = two_servers("early_sessions") else {
            return;
        };
        let (first, second) = (&servers.first, &servers.second);
        for session in ["touched", "untouched"] {
            write(first, session);
        }
        let ids = ["absent", "touched", "untouched"].map(String::from);

        let mut guard = first.writer.lock().unwrap();
        let conn = guard.as_mut().unwrap();
        let early = sessions_before_locking(&mut conn.db(), ORG, &ids)
            .unwrap()
            .unwrap();
        assert_eq!(early.size, 4, "two session starts and two steps");
        assert_eq!(early.sessions.len(), 2);
        // The other server appends to one of them before this one locks.
        write(second, "touched");

        let mut cache = first.cache.lock().unwrap();
        let mut tx = conn.client.transaction().unwrap();
        let db = Db {
            client: &mut tx,
            statements: &mut conn.statements,
        };
        let mut pg_tx = PgTx::begin(db, HashSet::from([ORG.to_owned()]), &mut cache).unwrap();
        let org = pg_tx.orgs[ORG].id;
        pg_tx.adopt_early_sessions(early).unwrap();
        let known = |tx: &PgTx<'_, _>, id: &str| tx.sessions.contains_key(&(org, id.to_owned()));
        assert!(known(&pg_tx, "untouched"));
        assert!(!known(&pg_tx, "touched"), "a step was appended to it since");
        assert!(!known(&pg_tx, "absent"));

        // Read under the lock, the touched session continues after the
        // other server's step.
        pg_tx.prefetch_sessions(org, &ids).unwrap();
        let next = |tx: &PgTx<'_, _>, id: &str| {
            tx.sessions[&(org, id.to_owned())]
                .as_ref()
                .map(|s| s.next_index)
        };
        assert_eq!(next(&pg_tx, "touched"), Some(2));
        assert_eq!(next(&pg_tx, "untouched"), Some(1));
        assert_eq!(next(&pg_tx, "absent"), None);

        // The org is marked as written by another process, so the next
        // batch reads early; once only this process writes it, not.
        drop(pg_tx);
        drop(tx);
        assert!(cache.shared.contains(ORG));
        drop(cache);
        drop(guard);
        write(first, "untouched");
        assert!(!first.cache.lock().unwrap().shared.contains(ORG));
    }
}
