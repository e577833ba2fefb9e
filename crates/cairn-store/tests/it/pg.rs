//! PostgreSQL: a throwaway cluster started by the tests themselves
//! (`initdb` and `pg_ctl` from PATH, in a temporary directory, on a free
//! loopback port), and the append-only enforcement of the schema.
//! Under `CI=true` a missing PostgreSQL fails the run; elsewhere the tests
//! say so and pass.

use crate::conformance::{Backend, run_all};
use cairn_store::pg::{PgOptions, PgStore};
use cairn_store::{LedgerStore, Written, load_or_create_server_key};
use cairn_testkit::PgCluster;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One database per store name in one cluster; each store's server key
/// lives in its own directory, as a server's data directory would hold it.
pub(crate) struct Pg {
    pub(crate) cluster: PgCluster,
    keys: tempfile::TempDir,
    created: Mutex<HashSet<String>>,
}

impl Pg {
    /// A backend over `cluster`, its databases created on first open.
    pub(crate) fn new(cluster: PgCluster) -> Pg {
        Pg {
            cluster,
            keys: tempfile::tempdir().unwrap(),
            created: Mutex::new(HashSet::new()),
        }
    }
}

impl Backend for Pg {
    fn open(&self, name: &str) -> Arc<dyn LedgerStore> {
        self.open_with_max_agent_keys(name, cairn_store::DEFAULT_MAX_AGENT_KEYS)
    }

    fn open_with_max_agent_keys(&self, name: &str, max: u64) -> Arc<dyn LedgerStore> {
        let db = name.replace('-', "_");
        let url = if self.created.lock().unwrap().insert(db.clone()) {
            self.cluster.create_database(&db)
        } else {
            self.cluster.url_for(&db)
        };
        let dir = self.keys.path().join(&db);
        std::fs::create_dir_all(&dir).unwrap();
        let key = load_or_create_server_key(&dir, "cairn.local").unwrap();
        let options = PgOptions {
            checkpoint_interval: Duration::from_millis(200),
            max_agent_keys: max,
            ..PgOptions::new(url)
        };
        Arc::new(PgStore::open(options, key).unwrap())
    }

    fn open_beside(&self, name: &str) -> Option<Arc<dyn LedgerStore>> {
        Some(self.open(name))
    }

    fn analyze(&self, name: &str) {
        let db = name.replace('-', "_");
        let url = self.cluster.url_for(&db);
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        // Hash joins only, as a planner picks for larger tables: each side
        // is scanned whole, so a condition on a view's column is evaluated
        // on every row of that side unless the view fences it off.
        client
            .batch_execute(&format!(
                "ANALYZE; ALTER DATABASE {db} SET enable_nestloop = off;
                 ALTER DATABASE {db} SET enable_mergejoin = off;"
            ))
            .unwrap();
    }
}

#[test]
fn conformance_suite() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    run_all(&Pg::new(cluster));
}

/// Analyst SQL on PostgreSQL: the differential oracle over generated
/// hostile queries, and the time and size limits.
#[test]
fn analyst_sql_oracle_and_limits() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let pg = Pg {
        cluster,
        keys: tempfile::tempdir().unwrap(),
        created: Mutex::new(HashSet::new()),
    };
    crate::analyst::oracle(&pg, cairn_store::analyst::Dialect::Postgres, 400);
    crate::analyst::limits_hold(&pg);
    crate::analyst::one_row_of_many_calls_stops_at_the_time_limit(&pg);
    crate::analyst::copied_left_sides_are_bounded(&pg);
    crate::analyst::merged_queries_cannot_multiply_one_rows_work(
        &pg,
        cairn_store::analyst::Dialect::Postgres,
    );
    crate::analyst::wrapped_calls_keep_their_names(&pg, cairn_store::analyst::Dialect::Postgres);
    crate::analyst_pg::pg_searches_are_bounded(&pg);
    crate::analyst_pg::pg_values_are_bounded_as_built(&pg);
    crate::analyst_pg::pg_casts_arrays_and_rows_are_bounded(&pg);
    crate::analyst_pg::pg_wrapping_keeps_queries_as_written(&pg);
    crate::analyst_pg::pg_nul_in_json_columns(&pg);
    crate::analyst::times_read_as_the_api_writes_them(&pg);
}

/// Several steps written as one unit on PostgreSQL: all or none.
#[test]
fn all_or_nothing_writes() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let pg = Pg::new(cluster);
    crate::atomic::all_or_nothing(&pg);
    // And a write's hold lives while another session's lock keeps it
    // from being written.
    let url = pg.cluster.create_database("holds");
    let locking_url = url.clone();
    let lock = move || -> Box<dyn FnOnce()> {
        let mut client = postgres::Client::connect(&locking_url, postgres::NoTls).unwrap();
        client
            .batch_execute("BEGIN; LOCK TABLE entries IN EXCLUSIVE MODE")
            .unwrap();
        Box::new(move || client.batch_execute("COMMIT").unwrap())
    };
    let dir = tempfile::tempdir().unwrap();
    let key = load_or_create_server_key(dir.path(), "cairn.local").unwrap();
    let store: Arc<dyn LedgerStore> = Arc::new(PgStore::open(PgOptions::new(url), key).unwrap());
    crate::holds::holds_live_until_their_writes_are_durable(store, Some(&lock));
}

#[test]
fn migrations_are_idempotent_and_concurrent_safe() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let url = cluster.url();
            std::thread::spawn(move || {
                let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                cairn_store::pg::migrate(&mut client).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut client = cluster.connect();
    cairn_store::pg::migrate(&mut client).unwrap();
    let version: String = client
        .query_one(
            "SELECT value FROM cairn_meta WHERE key = 'schema_version'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(version, "2");
    // A database from before the witnesses' cosignatures gets the table.
    client.batch_execute("DROP TABLE cosignatures").unwrap();
    cairn_store::pg::migrate(&mut client).unwrap();
    client
        .batch_execute("SELECT count(*) FROM cosignatures")
        .unwrap();
    assert!(
        cairn_store::pg::install_guard(&mut client).unwrap(),
        "the test cluster's role is a superuser"
    );
    assert!(
        cairn_store::pg::install_guard(&mut client).unwrap(),
        "the guard installs idempotently"
    );
}

/// Every forbidden statement fails, even for the superuser that owns the
/// tables; the two recorded mutations pass in their exact shape.
/// A database written before the full-text index existed (no
/// `step_search`, no listing index) gets both, and its steps indexed,
/// when the schema owner next migrates it.
#[test]
fn an_older_database_gets_its_steps_indexed_for_search() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let store = backend.open("older");
    let ledger =
        cairn_store::Ledger::new(Arc::clone(&store), cairn_store::SequencerConfig::default());
    for content in [
        "the zeppelin schedule slipped",
        "注文テーブルを検索しています",
    ] {
        let step = crate::conformance::step("s1", "Observation", content);
        ledger
            .write(cairn_store::WriteRequest::Step(Box::new(step)))
            .unwrap();
    }
    let decision = crate::conformance::step("s1", "Decision", "retire the airship fleet");
    ledger
        .write(cairn_store::WriteRequest::Step(Box::new(decision)))
        .unwrap();
    ledger.close();
    cairn_store::ops::drain_queue(
        store.as_ref(),
        &cairn_store::embed::WordHash,
        8,
        &mut |_| {},
    )
    .unwrap();
    // The decision, and an observation if sampling picked it.
    let before = store.vectors_by_embedder().unwrap();
    // Closed, so that its documents are written before the table goes.
    drop(store);
    let mut client =
        postgres::Client::connect(&backend.cluster.url_for("older"), postgres::NoTls).unwrap();
    // As written before vectors were tagged with their embedder.
    client
        .batch_execute(
            "DROP TABLE step_search; DROP INDEX sessions_listing;
             CREATE TABLE embeddings (id BIGINT PRIMARY KEY, org BIGINT NOT NULL, vector BYTEA NOT NULL);
             INSERT INTO embeddings SELECT id, org, vector FROM vectors;
             DROP TABLE vectors; DROP TABLE embedding_queue;",
        )
        .unwrap();
    cairn_store::pg::migrate(&mut client).unwrap();
    let indexed: i64 = client
        .query_one("SELECT count(*) FROM step_search", &[])
        .unwrap()
        .get(0);
    assert_eq!(indexed, 3);
    let store = backend.open("older");
    assert_eq!(store.vectors_by_embedder().unwrap(), before);
    let hits = store
        .semantic_search(
            crate::conformance::ORG,
            cairn_store::embed::WORD_HASH_ID,
            &cairn_store::embed::embed("airship fleet"),
            5,
        )
        .unwrap();
    assert_eq!(hits.len() as u64, before[0].1);
    for query in ["zeppelin", "注文"] {
        let query = cairn_store::fulltext::FullTextQuery::parse(query).unwrap();
        let hits = store
            .full_text_search(
                crate::conformance::ORG,
                &query,
                &cairn_store::StepFilter::default(),
                5,
            )
            .unwrap();
        assert_eq!(hits.len(), 1);
    }
}

#[test]
fn the_database_refuses_to_change_the_ledger() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let mut client = cluster.connect();
    cairn_store::pg::migrate(&mut client).unwrap();
    cairn_store::pg::install_guard(&mut client).unwrap();
    client
        .batch_execute(
            "INSERT INTO orgs (name) VALUES ('acme');
             INSERT INTO sessions (org, session_id, agent_id, profile, started_at, start_seq, genesis, max_clock_skew_s)
               VALUES (1, 's1', 'a', 'standard', 0, 0, '\\x00', 300);
             INSERT INTO entries (id, org, seq, type, logged_at, record_hash, leaf_hash, sid, step_index, trace_id, content, input_data, metadata, seed, digest, prev_hash, prev_seq)
               VALUES (1099511627776, 1, 0, 'step', 0, '\\x01', '\\x02', 1, 0, 't0', 'secret', '{}', '{}', '\\x03', '\\x04', '\\x05', NULL),
                      (1099511627777, 1, 1, 'step', 0, '\\x11', '\\x12', 1, 1, 't1', 'secret', '{}', '{}', '\\x13', '\\x14', '\\x15', 0);
             INSERT INTO session_heads VALUES (1, 0, 1, 1);
             INSERT INTO nodes (org, level, idx, hash) VALUES (1, 4, 0, '\\x06');
             INSERT INTO checkpoints (org, size, root, note, created_at) VALUES (1, 2, '\\x07', 'n', 0);",
        )
        .unwrap();
    let forbidden = [
        "UPDATE entries SET content = 'edited'",
        "UPDATE entries SET digest = '\\x00'",
        "UPDATE entries SET seq = seq + 100",
        "DELETE FROM entries WHERE seq = 1",
        "TRUNCATE entries",
        "TRUNCATE checkpoints",
        "UPDATE sessions SET agent_id = 'mallory'",
        "DELETE FROM sessions",
        "UPDATE checkpoints SET note = 'forged'",
        "DELETE FROM nodes",
        "UPDATE orgs SET name = 'other'",
        "UPDATE entries SET content = NULL, erased = TRUE, hidden = '{}' WHERE seq = 0",
        "UPDATE entries SET has_embedding = TRUE, content = 'x' WHERE seq = 0",
        // The erasure's shape, but no erasure record names the step.
        "UPDATE entries SET content = NULL, input_data = NULL, output_data = NULL, metadata = NULL, erased = TRUE, hidden = '{}' WHERE seq = 1",
        // A view withheld: only a signed trace's, once a trace-erasure
        // record names it (below).
        "UPDATE entries SET view = NULL WHERE seq = 0",
        // Session heads move forward only.
        "UPDATE session_heads SET last_seq = 0, last_index = 0",
        "DELETE FROM session_heads",
        "TRUNCATE session_heads",
        "DROP TABLE entries",
        "DROP TABLE checkpoints",
        "DROP TRIGGER cairn_no_delete ON entries",
        "ALTER TABLE entries DISABLE TRIGGER ALL",
        "ALTER TABLE entries DROP COLUMN digest",
    ];
    for sql in forbidden {
        assert_refused_by_cairn(&mut client, sql);
    }
    let rows: i64 = client
        .query_one("SELECT count(*) FROM entries WHERE content = 'secret'", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 2, "nothing changed");
    client
        .batch_execute("UPDATE entries SET has_embedding = TRUE WHERE seq = 0")
        .unwrap();
    // With its erasure record in the log, the erasure passes.
    client
        .batch_execute(
            "INSERT INTO entries (id, org, seq, type, logged_at, record_hash, leaf_hash, view, sid, step_index)
               VALUES (1099511627778, 1, 2, 'erasure', 0, '\\x21', '\\x22', '{}', 1, 1);
             UPDATE entries SET content = NULL, input_data = NULL, output_data = NULL, metadata = NULL, erased = TRUE, hidden = '{}' WHERE seq = 1;
             UPDATE session_heads SET last_seq = 2, last_index = 2;",
        )
        .unwrap();
    // A signed trace's view is withheld only once a trace-erasure record
    // names its seq, and only the view.
    client
        .batch_execute(
            "INSERT INTO entries (id, org, seq, type, logged_at, record_hash, leaf_hash, view, sid, trace_id)
               VALUES (1099511627779, 1, 3, 'signed-trace', 0, '\\x31', '\\x32', '{\"trace\":1}', 1, 'tr');",
        )
        .unwrap();
    for sql in [
        "UPDATE entries SET view = NULL WHERE seq = 3",
        "UPDATE entries SET view = '{}' WHERE seq = 3",
    ] {
        assert_refused_by_cairn(&mut client, sql);
    }
    client
        .batch_execute(
            "INSERT INTO entries (id, org, seq, type, logged_at, record_hash, leaf_hash, view, sid, step_index)
               VALUES (1099511627780, 1, 4, 'trace-erasure', 0, '\\x41', '\\x42', '{}', 1, 3);",
        )
        .unwrap();
    for sql in [
        "UPDATE entries SET view = NULL, trace_id = NULL WHERE seq = 3",
        "UPDATE entries SET view = NULL WHERE seq = 4",
    ] {
        assert_refused_by_cairn(&mut client, sql);
    }
    client
        .batch_execute("UPDATE entries SET view = NULL WHERE seq = 3")
        .unwrap();
}

/// Runs `sql`, which the database must refuse with one of Cairn's own
/// messages (a trigger or the guard).
fn assert_refused_by_cairn(client: &mut postgres::Client, sql: &str) {
    let err = client.batch_execute(sql).expect_err(sql);
    let text = err
        .as_db_error()
        .map(|e| e.message().to_owned())
        .unwrap_or_else(|| err.to_string());
    assert!(text.contains("cairn:"), "{sql}: {text}");
}

/// The production role of docs/OPERATIONS.md can append and read, and is
/// refused by privilege (before any trigger) everything else.
#[test]
fn the_production_role_has_only_what_it_needs() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let mut admin = cluster.connect();
    cairn_store::pg::migrate(&mut admin).unwrap();
    admin.batch_execute("CREATE ROLE cairn_app LOGIN").unwrap();
    admin
        .batch_execute(include_str!("../../src/pg_grants.sql"))
        .unwrap();
    let url = cluster.url().replace("user=postgres", "user=cairn_app");
    let mut app = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    app.batch_execute(
        "INSERT INTO orgs (name) VALUES ('acme');
         INSERT INTO entries (id, org, seq, type, logged_at, record_hash, leaf_hash, content, metadata, sid, step_index)
           VALUES (1099511627776, 1, 0, 'step', 0, '\\x01', '\\x02', 'secret', '{}', 1, 0),
                  (1099511627777, 1, 1, 'erasure', 0, '\\x03', '\\x04', NULL, NULL, 1, 0);
         UPDATE entries SET content = NULL, input_data = NULL, output_data = NULL, metadata = NULL, erased = TRUE, hidden = '{}' WHERE seq = 0;
         INSERT INTO session_heads VALUES (1, 0, 0, 0); UPDATE session_heads SET last_seq = 1, last_index = 1;
         INSERT INTO entries (id, org, seq, type, logged_at, record_hash, leaf_hash, view, sid, step_index)
           VALUES (1099511627778, 1, 2, 'signed-trace', 0, '\\x05', '\\x06', '{}', 1, NULL),
                  (1099511627779, 1, 3, 'trace-erasure', 0, '\\x07', '\\x08', '{}', 1, 2);
         UPDATE entries SET view = NULL WHERE seq = 2;",
    )
    .unwrap();
    for sql in [
        "UPDATE session_heads SET last_seq = 0, last_index = 0",
        "DELETE FROM session_heads",
        "UPDATE entries SET digest = '\\x00'",
        "UPDATE entries SET seq = 5",
        "DELETE FROM entries",
        "TRUNCATE entries",
        "DROP TABLE entries",
        "UPDATE checkpoints SET note = 'x'",
        "ALTER TABLE entries DISABLE TRIGGER ALL",
        "CREATE TABLE sneaky (x int)",
    ] {
        let err = app.batch_execute(sql).expect_err(sql);
        let code = err
            .as_db_error()
            .map(|e| e.code().code().to_owned())
            .unwrap_or_default();
        assert!(
            code == "42501" || code == "42P01" || err.to_string().contains("cairn:"),
            "{sql}: {err}"
        );
    }
}

/// A database `db` whose schema the owner created, and the URL of the
/// production role (`cairn_app`, holding only `pg_grants.sql`'s grants)
/// on it; the server key lives in `keys`.
pub(crate) fn production_role_url(cluster: &PgCluster, db: &str, keys: &std::path::Path) -> String {
    let url = cluster.create_database(db);
    let key = load_or_create_server_key(keys, "cairn.local").unwrap();
    // The schema owner creates the schema once.
    drop(PgStore::open(PgOptions::new(url.clone()), key).unwrap());
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .batch_execute("DO $$ BEGIN CREATE ROLE cairn_app LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;")
        .unwrap();
    admin
        .batch_execute(include_str!("../../src/pg_grants.sql"))
        .unwrap();
    url.replace("user=postgres", "user=cairn_app")
}

/// The production role runs the whole background-embedding path (queue,
/// lease, vectors, the flag, search, erasure) with its grants alone.
#[test]
fn the_production_role_runs_the_embedding_queue() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let key = || load_or_create_server_key(keys.path(), "cairn.local").unwrap();
    let app_url = production_role_url(&cluster, "app_embedding", keys.path());
    let store: Arc<dyn LedgerStore> =
        Arc::new(PgStore::open(PgOptions::new(app_url), key()).unwrap());
    let ledger =
        cairn_store::Ledger::new(Arc::clone(&store), cairn_store::SequencerConfig::default());
    let mut traces = Vec::new();
    for content in ["retire the airship fleet", "lease two more zeppelins"] {
        let step = crate::conformance::step("s1", "Decision", content);
        match ledger
            .write(cairn_store::WriteRequest::Step(Box::new(step)))
            .unwrap()
        {
            cairn_store::Written::Step { trace_id, .. } => traces.push(trace_id),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(store.embedding_backlog().unwrap().waiting, 2);
    let embedded = cairn_store::ops::drain_queue(
        store.as_ref(),
        &cairn_store::embed::WordHash,
        8,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(embedded, 2);
    let query = cairn_store::embed::embed("airship fleet");
    let hits = store
        .semantic_search(
            crate::conformance::ORG,
            cairn_store::embed::WORD_HASH_ID,
            &query,
            5,
        )
        .unwrap();
    assert_eq!(hits.len(), 2);
    ledger
        .write(cairn_store::WriteRequest::Erase {
            org_id: crate::conformance::ORG.into(),
            trace_id: traces[0].clone(),
            reason: "test".into(),
            actor: "test".into(),
        })
        .unwrap();
    assert_eq!(store.queue_reindex(None).unwrap(), 1);
    assert_eq!(
        cairn_store::ops::drain_queue(
            store.as_ref(),
            &cairn_store::embed::WordHash,
            8,
            &mut |_| {}
        )
        .unwrap(),
        1
    );
    let hits = store
        .semantic_search(
            crate::conformance::ORG,
            cairn_store::embed::WORD_HASH_ID,
            &query,
            5,
        )
        .unwrap();
    assert_eq!(hits.len(), 1);
    ledger.close();
}

/// The worker never waits for a row the sequencer's batch holds (an
/// erasure): it skips it, leaves it queued, and cannot deadlock with it.
#[test]
fn storing_vectors_skips_rows_an_erasing_batch_holds() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let store = backend.open("skip_locked");
    let ledger =
        cairn_store::Ledger::new(Arc::clone(&store), cairn_store::SequencerConfig::default());
    for (session, content) in [("a", "low id step"), ("b", "high id step")] {
        let step = crate::conformance::step(session, "Decision", content);
        ledger
            .write(cairn_store::WriteRequest::Step(Box::new(step)))
            .unwrap();
    }
    let claimed = store.claim_embeddings(32).unwrap();
    let (low, high) = (claimed[0].id, claimed[1].id);
    let done: Vec<_> = claimed
        .into_iter()
        .map(|p| {
            let v = cairn_store::embed::embed(p.text.as_deref().unwrap()).to_vec();
            (p, Some(v))
        })
        .collect();
    // The sequencer's transaction, holding the high row as an erasure does.
    let mut sequencer =
        postgres::Client::connect(&backend.cluster.url_for("skip_locked"), postgres::NoTls)
            .unwrap();
    sequencer.batch_execute("BEGIN").unwrap();
    sequencer
        .execute(
            "SELECT 1 FROM entries WHERE id = $1 FOR NO KEY UPDATE",
            &[&high],
        )
        .unwrap();
    let worker_store = Arc::clone(&store);
    let worker = std::thread::spawn(move || {
        worker_store.store_embeddings(cairn_store::embed::WORD_HASH_ID, &done)
    });
    let stored = worker.join().unwrap();
    // Then the sequencer takes the low row: no one waits for anyone.
    sequencer
        .execute(
            "SELECT 1 FROM entries WHERE id = $1 FOR NO KEY UPDATE",
            &[&low],
        )
        .unwrap();
    sequencer.batch_execute("ROLLBACK").unwrap();
    stored.unwrap();
    // The low step has its vector; the held one is still queued.
    assert_eq!(store.embedding_backlog().unwrap().waiting, 1);
    assert_eq!(
        cairn_store::ops::drain_queue(
            store.as_ref(),
            &cairn_store::embed::WordHash,
            8,
            &mut |_| {}
        )
        .unwrap(),
        1
    );
    ledger.close();
}

/// A database upgraded from before the embedding queue and `session_kinds`:
/// the roles that could write the old vector table (and session heads) get
/// the new tables in the migration, the kinds of existing sessions are
/// carried over,
/// and a role without them is refused at start with the fix in the message.
#[test]
fn an_upgrade_grants_the_new_embedding_tables() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.create_database("upgrade_grants");
    let keys = tempfile::tempdir().unwrap();
    let key = || load_or_create_server_key(keys.path(), "cairn.local").unwrap();
    {
        let store: Arc<dyn LedgerStore> =
            Arc::new(PgStore::open(PgOptions::new(url.clone()), key()).unwrap());
        let ledger = cairn_store::Ledger::new(store, cairn_store::SequencerConfig::default());
        let step = crate::conformance::step("old", "Decision", "a decision before the upgrade");
        ledger
            .write(cairn_store::WriteRequest::Step(Box::new(step)))
            .unwrap();
        ledger.close();
    }
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    // As a previous version left it: an `embeddings` table granted to the
    // production role, none of the new tables (not even the full-text
    // index's), the kinds of sessions in an index over `entries`.
    admin
        .batch_execute(
            "DO $$ BEGIN CREATE ROLE cairn_app LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
             DROP TABLE vectors, embedding_queue, embedding_settings, session_kinds, step_search, search_queue;
             CREATE INDEX entries_session_kinds ON entries (sid, kind) WHERE type = 'step';
             CREATE TABLE embeddings (id BIGINT PRIMARY KEY, org BIGINT NOT NULL, vector BYTEA NOT NULL);
             CREATE OR REPLACE FUNCTION cairn_entries_update() RETURNS trigger LANGUAGE plpgsql AS $f$
             BEGIN
               IF NEW.view IS DISTINCT FROM OLD.view THEN
                 RAISE EXCEPTION 'cairn: the rule before signed traces were erased';
               END IF;
               RETURN NEW;
             END $f$;",
        )
        .unwrap();
    admin
        .batch_execute(
            &cairn_store::pg::GRANTS
                .replace(
                    "ON vectors, embedding_queue, api_keys",
                    "ON embeddings, api_keys",
                )
                .replace(
                    "GRANT SELECT, INSERT, UPDATE ON embedding_settings TO cairn_app;",
                    "",
                )
                .replace(", embedding_queue_n_seq", "")
                .replace("GRANT SELECT, INSERT ON session_kinds TO cairn_app;", "")
                .replace(
                    "GRANT SELECT, INSERT, DELETE ON step_search TO cairn_app;",
                    "",
                )
                .replace(
                    "GRANT SELECT, INSERT, UPDATE, DELETE ON search_queue TO cairn_app;",
                    "",
                )
                .replace(
                    ", has_embedding, view) ON entries",
                    ", has_embedding) ON entries",
                ),
        )
        .unwrap();
    let app_url = url.replace("user=postgres", "user=cairn_app");
    // The production role cannot migrate; the schema owner's next start does.
    assert!(PgStore::open(PgOptions::new(app_url.clone()), key()).is_err());
    drop(PgStore::open(PgOptions::new(url.clone()), key()).unwrap());
    let store: Arc<dyn LedgerStore> =
        Arc::new(PgStore::open(PgOptions::new(app_url.clone()), key()).unwrap());
    let ledger =
        cairn_store::Ledger::new(Arc::clone(&store), cairn_store::SequencerConfig::default());
    let step = crate::conformance::step("s", "Decision", "a decision after the upgrade");
    ledger
        .write(cairn_store::WriteRequest::Step(Box::new(step)))
        .unwrap();
    ledger.close();
    // The kinds of the sessions written before the upgrade were carried
    // into `session_kinds`; those written after are recorded there.
    let filter = cairn_store::SessionFilter {
        kind: Some(cairn_core::kind::StepKind::Decision),
        ..cairn_store::SessionFilter::all()
    };
    let mut listed: Vec<String> = store
        .list_sessions(crate::conformance::ORG, &filter, 10)
        .unwrap()
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    listed.sort();
    assert_eq!(listed, ["old", "s"]);
    // Both steps are found: the one from before by the migration's index,
    // the one after through the production role's new grant.
    let hits = store
        .full_text_search(
            crate::conformance::ORG,
            &cairn_store::fulltext::FullTextQuery::parse("decision upgrade").unwrap(),
            &cairn_store::StepFilter::default(),
            10,
        )
        .unwrap();
    assert_eq!(hits.len(), 2, "{hits:?}");
    // The production role erases a signed trace with its step: the
    // migration replaced the rule of updates and granted the view column.
    let trace_key = cairn_core::ed25519_dalek::SigningKey::from_bytes(&[42; 32]);
    let ledger =
        cairn_store::Ledger::new(Arc::clone(&store), cairn_store::SequencerConfig::default());
    ledger
        .write(cairn_store::WriteRequest::RegisterKey {
            org_id: crate::conformance::ORG.into(),
            agent_id: "e8821136df22".into(),
            public_key: trace_key.verifying_key(),
            by_admin: true,
        })
        .unwrap();
    ledger
        .write(cairn_store::WriteRequest::ImportTrace {
            org_id: crate::conformance::ORG.into(),
            session_id: None,
            trace: crate::conformance::records::seed_004_trace(&trace_key, "tr", "generic"),
            caller: "test".into(),
        })
        .unwrap();
    let erased = ledger
        .write(cairn_store::WriteRequest::Erase {
            org_id: crate::conformance::ORG.into(),
            trace_id: "tr.0".into(),
            reason: "request".into(),
            actor: "dpo".into(),
        })
        .unwrap();
    assert!(
        matches!(&erased, cairn_store::Written::Erased { trace_seqs, .. } if trace_seqs.len() == 1),
        "{erased:?}"
    );
    assert!(matches!(
        store.op_by_id(crate::conformance::ORG, "tr").unwrap(),
        Some((_, None))
    ));
    ledger.close();
    crate::conformance::assert_verifies(store.as_ref());
    // A role left without the new grants is refused at start, saying why.
    admin
        .batch_execute("CREATE ROLE bare LOGIN; GRANT USAGE ON SCHEMA public TO bare; GRANT SELECT ON ALL TABLES IN SCHEMA public TO bare;")
        .unwrap();
    let refused = PgStore::open(
        PgOptions::new(url.replace("user=postgres", "user=bare")),
        key(),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(refused.contains("derived tables"), "{refused}");
}

/// A request the database refuses over its own data (here a trigger
/// planted by the test refuses one step's content, as PostgreSQL refuses
/// a NUL byte in text) fails alone: the sequencer tries the batch's
/// halves on their own, so every other request of the batch, other orgs'
/// included, is written, in order, and the log verifies.
#[test]
fn a_request_the_database_refuses_fails_alone() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let pg = Pg::new(cluster);
    let store = pg.open("poisoned");
    let mut admin =
        postgres::Client::connect(&pg.cluster.url_for("poisoned"), postgres::NoTls).unwrap();
    let guards: Vec<String> = admin
        .query("SELECT evtname::text FROM pg_event_trigger", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for guard in &guards {
        admin
            .batch_execute(&format!("ALTER EVENT TRIGGER {guard} DISABLE"))
            .unwrap();
    }
    admin
        .batch_execute(
            "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF NEW.content = 'poison' THEN
                 RAISE EXCEPTION 'refused by the test' USING ERRCODE = '22021';
               END IF;
               RETURN NEW;
             END $$;
             CREATE TRIGGER poison BEFORE INSERT ON entries FOR EACH ROW EXECUTE FUNCTION poison();",
        )
        .unwrap();
    let ledger = crate::conformance::ledger(Arc::clone(&store));
    let pending: Vec<_> = (0..300)
        .map(|i| {
            let mut s = crate::conformance::step(
                &format!("s{}", i % 7),
                "observation",
                if i == 211 { "poison" } else { "honest" },
            );
            s.trace_id = Some(format!("p{i}"));
            if i % 2 == 1 {
                s.org_id = "other".into();
            }
            ledger.submit(cairn_store::WriteRequest::Step(Box::new(s)))
        })
        .collect();
    let outcomes: Vec<_> = pending.into_iter().map(|p| p.wait()).collect();
    for (i, outcome) in outcomes.iter().enumerate() {
        match (i, outcome) {
            (211, Err(cairn_store::AppendError::Store(e))) => {
                assert!(e.is_data_exception(), "{e}");
            }
            (211, other) => panic!("the poisoned step: {other:?}"),
            // Each answer is its own request's.
            (i, Ok(Written::Step { trace_id, .. })) if *trace_id == format!("p{i}") => {}
            (i, other) => panic!("step {i}: {other:?}"),
        }
    }
    assert!(
        ledger
            .stats()
            .isolated_batches
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0,
        "the poisoned step was never in a batch with others"
    );
    for org in [crate::conformance::ORG, "other"] {
        let verdict =
            cairn_store::ops::verify_org(store.as_ref(), org, &[], &[], &mut |_| {}).unwrap();
        assert!(
            verdict.verdict.verified,
            "{org}: {:?}",
            verdict.verdict.failure
        );
    }
    // Every honest step of each org was written: 150 and 149.
    let steps = |org: &str| {
        let mut count = 0;
        for session in 0..7 {
            store
                .read_session(org, &format!("s{session}"), &mut |_| {
                    count += 1;
                    true
                })
                .unwrap();
        }
        count
    };
    assert_eq!((steps(crate::conformance::ORG), steps("other")), (150, 149));
}
