//! Opening the embedded store: the directory and its lock, the server
//! key, the database and its schema, then the sequencing state and the
//! full-text index.

use super::connection::{
    Checkpointer, configure, create_private_dir, forbid_structural_changes, restrict_file,
    take_lock,
};
use super::{
    BatchParts, DB_FILE, SqliteOptions, SqliteStore, State, Writer, embedding, fulltext_file,
    fulltext_index, migrate, state,
};
use crate::keys::load_or_create_server_key;
use crate::{DbContext, StoreError};
use rusqlite::Connection;
use std::path::Path;
use std::sync::Mutex;

impl SqliteStore {
    /// Opens (creating if needed) the store in `data_dir`: the directory,
    /// the server key, the database and its schema; then rebuilds the
    /// in-memory sequencing state from the tables.
    pub fn open(data_dir: &Path, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        create_private_dir(data_dir)?;
        let lock = if options.sequencer {
            Some(take_lock(data_dir)?)
        } else {
            None
        };
        let path = data_dir.join(DB_FILE);
        // A key is created with its store, never for one that exists: a
        // store whose key file is not where this command looks keeps it
        // elsewhere, and a new key would answer for it (`cairn keys`) and
        // sign nothing its log holds.
        // Read without it, a store needs no key: it is opened with one kept
        // in memory, which signs nothing (`holds_server_key`).
        let key_path = options
            .key_file
            .clone()
            .unwrap_or_else(|| data_dir.join(crate::keys::KEY_FILE));
        let key_missing = options.key.is_none() && path.exists() && !key_path.exists();
        if key_missing && options.sequencer {
            return Err(StoreError::Key(format!(
                "no server key at {}: this store exists, so its key is kept elsewhere: give it with --server-key PATH (CAIRN_SERVER_KEY) or --server-key-command (a new key would not be the one its log is signed with)",
                key_path.display()
            )));
        }
        let key = match (&options.key, &options.key_file) {
            _ if key_missing => crate::keys::ephemeral_key(&options.server_name)?,
            (Some(key), _) => key.clone(),
            (None, Some(file)) => crate::keys::load_or_create_key_file(file, &options.server_name)?,
            (None, None) => load_or_create_server_key(data_dir, &options.server_name)?,
        };
        let mut conn = Connection::open(&path).context("opening the database")?;
        restrict_file(&path)?;
        configure(&conn)?;
        let tx = conn
            .transaction()
            .context("starting the schema transaction")?;
        let damaged = migrate::check_schema(&tx, &path, &options)?;
        if options.sequencer && damaged.is_none() {
            embedding::move_untagged_vectors(&tx)?;
            fulltext_file::drop_inline_index(&tx)?;
            migrate::record_session_kinds(&tx)?;
            let from = match (&options.key, &options.key_file) {
                (Some(_), _) => "the server key command".to_owned(),
                (None, Some(file)) => file.display().to_string(),
                (None, None) => data_dir.join(crate::keys::KEY_FILE).display().to_string(),
            };
            migrate::check_signing_key(&tx, &key, &from)?;
        }
        // Opened to be read with a key file that is not the store's (one
        // its log was never signed with): held as a stand-in, as a missing
        // one is, never shown or used as the store's.
        let key_is_the_stores = options.sequencer || migrate::key_is_the_stores(&tx, &key)?;
        tx.commit().context("committing the schema")?;
        forbid_structural_changes(&mut conn)?;
        conn.execute_batch("PRAGMA wal_autocheckpoint = 0;")
            .context("handing WAL checkpoints to the background")?;
        let checkpointer = if options.sequencer {
            Some(Checkpointer::start(&path)?)
        } else {
            None
        };
        let writer = if let Some(reason) = damaged {
            Writer {
                conn,
                broken: Some(reason),
                state: State::default(),
            }
        } else if options.sequencer {
            state::load_state(conn)
        } else {
            Writer {
                conn,
                broken: None,
                state: State::default(),
            }
        };
        // Only a sound sequencing process keeps the index: an inconsistent
        // store opens to be read and verified, and its log cannot be
        // trusted to mend the index from.
        let fulltext = if options.sequencer && writer.broken.is_none() {
            Some(fulltext_index::FullTextIndex::open(&path, &writer.conn)?)
        } else {
            None
        };
        Ok(SqliteStore {
            path,
            key,
            key_present: !key_missing && key_is_the_stores,
            limits: options.limits,
            checkpoint_interval: options.checkpoint_interval,
            embedding_sample_rate: options.embedding_sample_rate.clamp(0.0, 1.0),
            max_clock_skew_s: options.max_clock_skew_s,
            max_agent_keys: options.max_agent_keys,
            read_only: !options.sequencer,
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
            _checkpointer: checkpointer,
            fulltext,
            _lock: lock,
            vectors: crate::vector_index::VectorIndex::new(
                options.vector_memory_bytes,
                options.vector_graph_min,
            ),
            slowest: BatchParts::default(),
        })
    }
}
