//! Opening a PostgreSQL store: connecting with bounded network waits,
//! migrating, checking the server key against the database's, and the
//! signing keys a command reads before it makes a key file.

use super::admin::meta_key_rows;
use super::connection::{PgConn, bound_network_waits, col, connect};
use super::locks::Cache;
use super::{PgOptions, PgStore, embedding, install_guard, migrate};
use crate::StoreError;
use crate::keys::ServerKey;
use std::sync::Mutex;

/// The connection settings `options` name (network waits bounded) and a
/// first connection with them.
fn connect_for(options: &PgOptions) -> Result<(postgres::Config, PgConn), StoreError> {
    let mut config: postgres::Config = options.url.parse().map_err(|e| StoreError::Postgres {
        context: "parsing the database URL".into(),
        source: e,
    })?;
    bound_network_waits(&mut config, options.network_timeout);
    let conn = connect(&config)?;
    Ok((config, conn))
}

impl PgStore {
    /// The keys a server of this database may sign with (the first
    /// server's and those added with `cairn keys rotate`, none retired), as
    /// `cairn keys` names them; empty for a database no server has opened
    /// yet. Read before a key file is made for a command, so that a data
    /// directory without the fleet's key file gets an error, not a fresh key
    /// file the database then refuses.
    pub fn signing_keys(options: &PgOptions) -> Result<Vec<String>, StoreError> {
        let (_, mut conn) = connect_for(options)?;
        let mut db = conn.db();
        let exists: bool = col(
            &db.query_one(
                "SELECT to_regclass('cairn_meta') IS NOT NULL",
                &[],
                "looking for Cairn's tables",
            )?,
            0,
        )?;
        if !exists {
            return Ok(Vec::new());
        }
        let first: Option<String> = db
            .query_opt(
                "SELECT value FROM cairn_meta WHERE key = 'server_key'",
                &[],
                "reading the server key",
            )?
            .map(|row| col(&row, 0))
            .transpose()?;
        let rows = meta_key_rows(&mut db)?;
        let retired = |key: &str| {
            rows.iter()
                .any(|r| r.strip_prefix(crate::keys::RETIRED_PREFIX) == Some(key))
        };
        let added = rows
            .iter()
            .filter_map(|r| r.strip_prefix(crate::keys::ADDED_PREFIX))
            .map(str::to_owned);
        Ok(first
            .into_iter()
            .chain(added)
            .filter(|key| !retired(key))
            .collect())
    }

    /// Connects, migrates the schema if needed (installing the DDL guard
    /// when the role is a superuser), and checks that the database's logs
    /// are signed with `key`, recording it if this is the first server.
    pub fn open(options: PgOptions, key: ServerKey) -> Result<PgStore, StoreError> {
        let (config, mut conn) = connect_for(&options)?;
        migrate(&mut conn.client)?;
        embedding::check_embedding_grants(&mut conn.client)?;
        install_guard(&mut conn.client)?;
        let vkey = key.verifier.to_string();
        let mut db = conn.db();
        db.execute(
            "INSERT INTO cairn_meta (key, value) VALUES ('server_key', $1) ON CONFLICT (key) DO NOTHING",
            &[&vkey],
            "recording the server key",
        )?;
        let recorded: String = col(
            &db.query_one(
                "SELECT value FROM cairn_meta WHERE key = 'server_key'",
                &[],
                "reading the server key",
            )?,
            0,
        )?;
        let rows = meta_key_rows(&mut db)?;
        crate::keys::check_key_allowed(&recorded, &rows, &key.verifier, "this server's key file")
            .map_err(|e| {
                StoreError::Key(format!(
                    "{e} (every server on one database signs with a log key of the database: see docs/OPERATIONS.md)"
                ))
            })?;
        let schema: String = col(
            &db.query_one("SELECT current_schema()", &[], "reading the schema")?,
            0,
        )?;
        let search_indexer = super::search_queue::SearchIndexer::new(config.clone());
        Ok(PgStore {
            schema,
            config,
            key,
            limits: options.limits,
            checkpoint_interval: options.checkpoint_interval,
            embedding_sample_rate: options.embedding_sample_rate.clamp(0.0, 1.0),
            max_clock_skew_s: options.max_clock_skew_s,
            max_agent_keys: options.max_agent_keys,
            writer: Mutex::new(Some(conn)),
            readers: Mutex::new(Vec::new()),
            cache: Mutex::new(Cache::default()),
            vectors: crate::vector_index::VectorIndex::new(
                options.vector_memory_bytes,
                options.vector_graph_min,
            ),
            search_indexer,
        })
    }
}
