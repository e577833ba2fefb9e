//! The analyst SQL guard with a differential oracle. For any statement:
//! what the guard accepts, rewritten as it runs it, names no table but
//! Cairn's views and generated CTE names (in both dialects); and run as
//! the guard runs it, on an embedded store holding two orgs, API keys and
//! Cairn's own metadata, it answers nothing of the other org, of the keys
//! or of the catalog (unless the statement spelled it out itself).
#![no_main]

use cairn_store::analyst::{Dialect, QueryLimits, is_allowed_table, prepare, tables_outside_views};
use cairn_store::{
    ApiKey, Ledger, LedgerStore, NewStep, Role, SequencerConfig, SqliteOptions, SqliteStore,
    WriteRequest, Written,
};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

struct World {
    store: Arc<dyn LedgerStore>,
    forbidden: Vec<String>,
    _dir: tempfile::TempDir,
}

const MINE: &str = "acme";

fn world() -> World {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store: Arc<dyn LedgerStore> = Arc::new(
        SqliteStore::open(dir.path(), SqliteOptions::default()).expect("a store"),
    );
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    let mut forbidden = vec![
        "THEIRS_SECRET".to_owned(),
        "globex".to_owned(),
        "CREATE TABLE".to_owned(),
        "schema_version".to_owned(),
        store.server_key().to_string(),
    ];
    for (org, secret) in [(MINE, "MINE_VISIBLE"), ("globex", "THEIRS_SECRET")] {
        for kind in ["Observation", "Decision", "FinalAnswer"] {
            let step = NewStep {
                org_id: org.into(),
                session_id: format!("{org}-s"),
                agent_id: format!("{org}-agent"),
                kind_label: kind.into(),
                content: Some(format!("{secret} {kind}")),
                caller: "fuzz".into(),
                ..NewStep::default()
            };
            let written = ledger
                .write(WriteRequest::Step(Box::new(step)))
                .expect("a step");
            if org != MINE
                && let Written::Step { trace_id, hash, .. } = written
            {
                forbidden.push(trace_id);
                forbidden.push(hash.to_hex());
            }
        }
        let (key, _) = ApiKey::generate(org, Role::Admin, None, "fuzz", cairn_store::now())
            .expect("a key");
        store.put_api_key(&key).expect("a stored key");
        forbidden.push(key.token_hash.to_hex());
        forbidden.push(key.id.clone());
    }
    ledger.close();
    World {
        store,
        forbidden,
        _dir: dir,
    }
}

static WORLD: OnceLock<World> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    let mut accepted = false;
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        if let Ok(out) = prepare(sql, dialect, 1, "main") {
            accepted |= dialect == Dialect::Sqlite;
            for table in tables_outside_views(&out, dialect).expect("the guard's output parses") {
                assert!(is_allowed_table(&table), "{sql:?} names table {table} in {out}");
            }
        }
    }
    if !accepted {
        return;
    }
    if std::env::var_os("CAIRN_FUZZ_COUNT_ACCEPTED").is_some() {
        eprintln!("cairn-fuzz: accepted");
    }
    let world = WORLD.get_or_init(world);
    let limits = QueryLimits {
        max_rows: 100,
        time: Duration::from_millis(200),
        max_value_bytes: 1 << 20,
        max_answer_bytes: 1 << 20,
        // In this process: a worker per input would make fuzzing crawl,
        // and the guard and the query are the same code either way.
        worker: None,
    };
    let text = match world.store.analyst_query_limited(MINE, sql, &limits) {
        Ok(result) => serde_json::to_string(&result.rows).expect("JSON"),
        Err(e) => e.to_string(),
    };
    // A secret the statement itself spells out may come back (an echoed
    // literal, a column name in an error): that is not a leak.
    for secret in world.forbidden.iter().filter(|s| !sql.contains(s.as_str())) {
        assert!(!text.contains(secret.as_str()), "{sql:?} answered {secret}: {text}");
    }
});
