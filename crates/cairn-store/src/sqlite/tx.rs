//! The writer's side of the embedded store: [`SqliteTx`], the engine's
//! transaction over the writer connection and the in-memory state, and the
//! store's writes that run the engine through it besides a batch (signing
//! due checkpoints, importing a log). Separate from the reads: only the
//! sequencing process gets here, under the writer's lock.

use super::connection::poisoned;
use super::rows::{load_session, session_rowids, step_from_row, true_end};
use super::state::rebuild;
use super::tree::latest_checkpoint;
use super::{SqliteStore, State, Writer};
use crate::engine::{
    AgentKey, OpRow, OrgState, STEP_COLUMNS, SessionState, StepRow, WriteTx, blob_hash,
    committed_size, json_text, links_text, row_id,
};
use crate::{DbContext, StoreError, StoredCheckpoint, StoredStep};
use cairn_core::log::LogEntry;
use cairn_core::record::SessionHeader;
use cairn_core::{Hash, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::HashMap;

/// Session states kept in memory before the cache starts over (they are
/// reloaded from the log on demand).
const SESSION_CACHE: usize = 200_000;

fn insert_step_row(tx: &Connection, row: &StepRow<'_>) -> Result<(), StoreError> {
    let s = row.step;
    tx.prepare_cached(
        "INSERT INTO entries (id, org, seq, type, record_hash, leaf_hash, sid, step_index, trace_id, agent_id, kind,
         kind_label, content, input_data, output_data, confidence, duration_ms, token_count, model, metadata,
         created_at, turn_id, turn_step, task_id, links, status, seed, digest, prev_hash, sig_key_id, signature,
         has_embedding, erased, hidden, salts, prev_seq, logged_at)
         VALUES (?1, ?2, ?3, 'step', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20,
         ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35, ?36)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            row_id(row.org, row.seq),
            row.org,
            row.seq as i64,
            &row.hash.0[..],
            &row.leaf.0[..],
            row.sid,
            row.step_index as i64,
            s.trace_id,
            s.agent_id,
            s.kind.as_str(),
            s.kind_label,
            s.content,
            json_text(&s.input),
            json_text(&s.output),
            s.confidence,
            s.duration_ms.map(|v| v as i64),
            s.token_count.map(|v| v as i64),
            s.model,
            json_text(&s.metadata),
            row.created_at.as_micros(),
            s.turn_id,
            s.turn_step.map(|v| v as i64),
            s.task_id,
            links_text(&s.links),
            s.status.as_str(),
            row.seed.map(|seed| &seed[..]),
            &row.digest.0[..],
            &row.prev_hash.0[..],
            s.signer_key_id,
            row.signature.map(|sig| &sig[..]),
            row.has_embedding,
            row.erased,
            row.hidden,
            row.salts,
            row.prev_seq.map(|v| v as i64),
            row.logged_at.as_micros(),
        ])
    })
    .context("writing a step")?;
    Ok(())
}

/// The writer's transaction, seen by the engine: the state comes from
/// memory (this process is the only writer), the rows go to SQLite.
pub(super) struct SqliteTx<'a> {
    pub(super) conn: &'a Connection,
    pub(super) state: &'a mut State,
}

impl SqliteTx<'_> {
    /// The org's committed agent keys, read on first use.
    fn org_keys(&mut self, org: i64) -> Result<&HashMap<String, AgentKey>, StoreError> {
        if !self.state.keys.contains_key(&org) {
            let size = committed_size(&self.state.orgs, org);
            let keys = super::state::org_keys(self.conn, org, size)?;
            self.state.keys.insert(org, keys);
        }
        Ok(&self.state.keys[&org])
    }
}

impl WriteTx for SqliteTx<'_> {
    fn org(&mut self, name: &str) -> Result<Option<OrgState>, StoreError> {
        Ok(self.state.orgs.get(name).cloned())
    }

    fn create_org(&mut self, name: &str) -> Result<i64, StoreError> {
        self.conn
            .execute("INSERT INTO orgs (name) VALUES (?1)", [name])
            .context("creating an org")?;
        Ok(self.conn.last_insert_rowid())
    }

    fn session(&mut self, org: i64, session_id: &str) -> Result<Option<SessionState>, StoreError> {
        let key = (org, session_id.to_owned());
        if let Some(state) = self.state.sessions.get(&key) {
            return Ok(Some(state.clone()));
        }
        // Committed data (the engine asks for a session the batch touched
        // from its own overlay), so it may be cached whatever the batch does.
        let loaded = load_session(self.conn, org, session_id)?;
        if let Some(state) = &loaded {
            if self.state.sessions.len() >= SESSION_CACHE {
                self.state.sessions.clear();
            }
            self.state.sessions.insert(key, state.clone());
        }
        Ok(loaded)
    }

    fn agent_key(&mut self, org: i64, key_id: &str) -> Result<Option<AgentKey>, StoreError> {
        Ok(self.org_keys(org)?.get(key_id).cloned())
    }

    fn key_registrations(&mut self, org: i64) -> Result<u64, StoreError> {
        // Each key id is registered once: one key per registration.
        Ok(self.org_keys(org)?.len() as u64)
    }

    fn log_key_records(&mut self, org: i64) -> Result<u64, StoreError> {
        // `entries_log_keys` holds only these rows.
        self.conn
            .prepare_cached("SELECT count(*) FROM entries WHERE org = ?1 AND type = 'log-key'")
            .and_then(|mut s| s.query_row(params![org], |r| r.get::<_, i64>(0)))
            .map(|count| u64::try_from(count).unwrap_or(0))
            .context("counting log-key records")
    }

    fn trace_id_taken(&mut self, org: i64, trace_id: &str) -> Result<bool, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM entries WHERE org = ?1 AND trace_id = ?2)",
            )
            .and_then(|mut s| s.query_row(params![org, trace_id], |r| r.get(0)))
            .context("checking a trace id")
    }

    fn record_type(&mut self, org: i64, id: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .prepare_cached("SELECT type FROM entries WHERE org = ?1 AND trace_id = ?2")
            .and_then(|mut s| s.query_row(params![org, id], |r| r.get(0)).optional())
            .context("looking up a record by id")
    }

    fn session_sealed_with(&mut self, org: i64, hash: &Hash) -> Result<Option<String>, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT s.session_id FROM entries e JOIN sessions s ON s.sid = e.sid
                 WHERE e.org = ?1 AND e.type = 'seal' AND json_extract(e.view, '$.final_hash') = ?2",
            )
            .and_then(|mut s| {
                s.query_row(params![org, hash.to_hex()], |r| r.get(0))
                    .optional()
            })
            .context("looking up a sealed session")
    }

    fn successor_of(&mut self, org: i64, hash: &Hash) -> Result<Option<String>, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT json_extract(view, '$.session_id') FROM entries
                 WHERE org = ?1 AND type = 'session-start' AND json_extract(view, '$.predecessor') = ?2",
            )
            .and_then(|mut s| s.query_row(params![org, hash.to_hex()], |r| r.get(0)).optional())
            .context("looking up a successor")
    }

    fn insert_step(&mut self, row: &StepRow<'_>) -> Result<(), StoreError> {
        insert_step_row(self.conn, row)
    }

    fn insert_search_doc(
        &mut self,
        org: i64,
        seq: u64,
        doc: &str,
        _form: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        // Written by the index's thread after the batch commits
        // (`fulltext_index`).
        self.state.fulltext.add(row_id(org, seq), doc);
        Ok(())
    }

    fn queue_embedding(&mut self, org: i64, seq: u64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("INSERT OR IGNORE INTO embedding_queue (id, org) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(params![row_id(org, seq), org]))
            .context("queueing a step for embedding")?;
        Ok(())
    }

    fn insert_op(&mut self, row: &OpRow<'_>) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO entries (id, org, seq, type, logged_at, record_hash, leaf_hash, view, trace_id,
                 sid, step_index, agent_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    row_id(row.org, row.seq),
                    row.org,
                    row.seq as i64,
                    row.entry_type(),
                    row.logged_at.as_micros(),
                    &row.hash.0[..],
                    &row.leaf.0[..],
                    row.view(),
                    row.id(),
                    row.sid,
                    row.step_index.map(|i| i as i64),
                    row.agent_id,
                ])
            })
            .context("writing an operational record")?;
        Ok(())
    }

    fn insert_node(
        &mut self,
        org: i64,
        level: u32,
        index: u64,
        hash: &Hash,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("INSERT INTO nodes (org, level, idx, hash) VALUES (?1, ?2, ?3, ?4)")
            .and_then(|mut s| s.execute(params![org, level, index as i64, &hash.0[..]]))
            .context("writing a tree node")?;
        Ok(())
    }

    fn insert_session(
        &mut self,
        org: i64,
        header: &SessionHeader,
        genesis: &Hash,
        start_seq: u64,
    ) -> Result<i64, StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO sessions (org, session_id, agent_id, profile, started_at, start_seq, genesis,
                 max_clock_skew_s)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    org,
                    header.session_id,
                    header.agent_id,
                    header.profile.as_str(),
                    header.started_at.as_micros(),
                    start_seq as i64,
                    &genesis.0[..],
                    i64::try_from(header.max_clock_skew_s).unwrap_or(i64::MAX),
                ])
            })
            .context("writing a session")?;
        Ok(self.conn.last_insert_rowid())
    }

    fn chain_link(&mut self, org: i64, seq: u64) -> Result<(u64, Hash, Option<u64>), StoreError> {
        let (index, hash, prev): (i64, Vec<u8>, Option<i64>) = self
            .conn
            .prepare_cached("SELECT step_index, record_hash, prev_seq FROM entries WHERE id = ?1")
            .and_then(|mut s| {
                s.query_row([row_id(org, seq)], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
            })
            .context("reading a session's chain")?;
        Ok((index as u64, blob_hash(hash)?, prev.map(|p| p as u64)))
    }

    fn step_by_trace(
        &mut self,
        org: i64,
        trace_id: &str,
    ) -> Result<Option<StoredStep>, StoreError> {
        let sql = format!(
            "SELECT {STEP_COLUMNS} FROM entries e JOIN orgs o ON o.org = e.org
             JOIN sessions s ON s.sid = e.sid WHERE e.org = ?1 AND e.trace_id = ?2 AND e.type = 'step'"
        );
        let mut stmt = self.conn.prepare_cached(&sql).context("finding a step")?;
        let mut rows = stmt
            .query(params![org, trace_id])
            .context("finding a step")?;
        match rows.next().context("finding a step")? {
            Some(row) => Ok(Some(step_from_row(row)?)),
            None => Ok(None),
        }
    }

    fn erase(&mut self, org: i64, seq: u64, hidden: &str) -> Result<(), StoreError> {
        let id = row_id(org, seq);
        self.conn
            .prepare_cached(
                "UPDATE entries SET content = NULL, input_data = NULL, output_data = NULL, metadata = NULL,
                 erased = 1, hidden = ?2, has_embedding = 0 WHERE id = ?1",
            )
            .and_then(|mut s| s.execute(params![id, hidden]))
            .context("erasing a step")?;
        // A vector would still carry what the content said, and the
        // full-text index its words.
        for sql in [
            "DELETE FROM vectors WHERE id = ?1",
            "DELETE FROM embedding_queue WHERE id = ?1",
        ] {
            self.conn
                .prepare_cached(sql)
                .and_then(|mut s| s.execute([id]))
                .context("erasing an embedding")?;
        }
        // Deleted from the index after the batch commits, before it is
        // acknowledged (`fulltext_index`).
        self.state.fulltext.erase(id);
        Ok(())
    }

    fn held_signed_trace(
        &mut self,
        org: i64,
        trace_id: &str,
    ) -> Result<Option<(u64, String, Hash)>, StoreError> {
        let found: Option<(i64, String, Vec<u8>)> = self
            .conn
            .prepare_cached(
                "SELECT seq, view, record_hash FROM entries
                 WHERE org = ?1 AND trace_id = ?2 AND type = 'signed-trace' AND view IS NOT NULL",
            )
            .and_then(|mut s| {
                s.query_row(params![org, trace_id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()
            })
            .context("looking up a signed trace")?;
        found
            .map(|(seq, view, hash)| crate::engine::held_trace(seq as u64, &view, &hash))
            .transpose()
    }

    fn withhold_trace(&mut self, org: i64, seq: u64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE entries SET view = NULL WHERE id = ?1 AND type = 'signed-trace'",
            )
            .and_then(|mut s| s.execute([row_id(org, seq)]))
            .context("withholding an erased signed trace")?;
        Ok(())
    }

    fn expired_sessions(
        &mut self,
        org: i64,
        older_than: Timestamp,
    ) -> Result<Vec<i64>, StoreError> {
        // Candidates by their head rows, confirmed by the log: a head moved
        // back must not make an active session look expired, and a session
        // whose head row is missing is a candidate if it has a first step.
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT s.sid FROM sessions s LEFT JOIN session_heads h ON h.sid = s.sid
                 LEFT JOIN entries e ON e.id = ((s.org << 40) | h.last_seq) AND e.sid = s.sid
                   AND e.type = 'step' AND e.step_index = h.last_index
                 WHERE s.org = ?1 AND (e.id IS NULL OR e.created_at < ?2)
                   AND (h.sid IS NOT NULL OR EXISTS (SELECT 1 FROM entries f
                     WHERE COALESCE(f.prev_seq, -1) = -1 AND f.sid = s.sid AND f.type = 'step'))",
            )
            .context("finding expired sessions")?;
        let candidates: Vec<i64> = stmt
            .query_map(params![org, older_than.as_micros()], |r| r.get(0))
            .context("finding expired sessions")?
            .collect::<Result<_, _>>()
            .context("finding expired sessions")?;
        let mut expired = Vec::new();
        for sid in candidates {
            if true_end(self.conn, org, sid)?.is_some_and(|e| e.created_at < older_than.as_micros())
            {
                expired.push(sid);
            }
        }
        Ok(expired)
    }

    fn turn_highest(&mut self, sid: i64, turn_id: &str) -> Result<Option<u64>, StoreError> {
        self.conn
            .prepare_cached(super::reads::TURN_HIGHEST)
            .and_then(|mut s| s.query_row(params![sid, turn_id], |r| r.get::<_, Option<i64>>(0)))
            .context("numbering a turn's steps")
            .map(|highest| highest.map(|n| n as u64))
    }

    fn turn_steps_taken(
        &mut self,
        sid: i64,
        turn_id: &str,
        numbers: &[u64],
    ) -> Result<Vec<u64>, StoreError> {
        // In process: a seek each, no round trip to save.
        let mut stmt = self
            .conn
            .prepare_cached(super::reads::TURN_STEP_TAKEN)
            .context("checking a turn's step numbers")?;
        let mut taken = Vec::new();
        for &number in numbers {
            let held: bool = stmt
                .query_row(params![sid, turn_id, number as i64], |r| r.get(0))
                .context("checking a turn's step numbers")?;
            if held {
                taken.push(number);
            }
        }
        Ok(taken)
    }

    fn unerased_steps(&mut self, org: i64, sid: i64) -> Result<Vec<String>, StoreError> {
        let ids = session_rowids(self.conn, org, sid)?;
        let mut stmt = self
            .conn
            .prepare_cached("SELECT trace_id FROM entries WHERE id = ?1 AND erased = 0")
            .context("reading an expired session")?;
        let mut pending = Vec::new();
        for id in ids {
            if let Some(trace) = stmt
                .query_row([id], |r| r.get::<_, String>(0))
                .optional()
                .context("reading an expired session")?
            {
                pending.push(trace);
            }
        }
        Ok(pending)
    }

    fn insert_checkpoint(&mut self, org: i64, cp: &StoredCheckpoint) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("INSERT INTO checkpoints (org, size, root, note, created_at) VALUES (?1, ?2, ?3, ?4, ?5)")
            .and_then(|mut s| {
                s.execute(params![org, cp.size as i64, &cp.root.0[..], cp.note, cp.created_at.as_micros()])
            })
            .context("writing a checkpoint")?;
        Ok(())
    }

    fn latest_checkpoint(
        &mut self,
        org: i64,
        name: &str,
    ) -> Result<Option<StoredCheckpoint>, StoreError> {
        latest_checkpoint(self.conn, org, name)
    }

    fn put_session_kinds(
        &mut self,
        pairs: &[(i64, cairn_core::kind::StepKind)],
    ) -> Result<(), StoreError> {
        let mut insert = self
            .conn
            .prepare_cached("INSERT OR IGNORE INTO session_kinds (sid, kind) VALUES (?1, ?2)")
            .context("recording the kinds of sessions")?;
        for (sid, kind) in pairs {
            insert
                .execute(params![sid, kind.as_str()])
                .context("recording the kinds of sessions")?;
        }
        Ok(())
    }

    fn put_session_head(
        &mut self,
        sid: i64,
        first_seq: u64,
        last_seq: u64,
        last_index: u64,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO session_heads (sid, first_seq, last_seq, last_index) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (sid) DO UPDATE SET last_seq = excluded.last_seq, last_index = excluded.last_index
                 WHERE session_heads.first_seq = excluded.first_seq
                   AND session_heads.last_seq < excluded.last_seq
                   AND session_heads.last_index < excluded.last_index",
            )
            .and_then(|mut s| s.execute(params![sid, first_seq as i64, last_seq as i64, last_index as i64]))
            .context("recording session heads")?;
        Ok(())
    }

    fn insert_origin(
        &mut self,
        org: i64,
        server_name: &str,
        server_key: &str,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO org_origins (org, server_name, server_key) VALUES (?1, ?2, ?3)",
                params![org, server_name, server_key],
            )
            .context("recording the org's origin")?;
        Ok(())
    }
}

impl SqliteStore {
    /// The periodic work: sign the checkpoints that are due.
    pub(super) fn maintain_with(&self, w: &mut Writer) -> Result<(), StoreError> {
        let engine = self.engine();
        let due: Vec<(String, OrgState)> = w
            .state
            .orgs
            .iter()
            .filter(|(_, org)| !org.foreign && engine.due(org))
            .map(|(name, org)| (name.clone(), org.clone()))
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        let tx = w
            .conn
            .unchecked_transaction()
            .context("starting a checkpoint")?;
        let mut sqlite_tx = SqliteTx {
            conn: &tx,
            state: &mut w.state,
        };
        let mut updated = Vec::new();
        for (name, mut org) in due {
            engine.checkpoint(&mut sqlite_tx, &name, &mut org)?;
            updated.push((name, org));
        }
        tx.commit().context("committing checkpoints")?;
        w.state.orgs.extend(updated);
        Ok(())
    }

    pub(super) fn import_log_in(
        &self,
        org_id: &str,
        header: &cairn_core::bundle::BundleHeader,
        checkpoint_note: &str,
        entries: &mut dyn Iterator<Item = Result<LogEntry, String>>,
        withheld_ids: &std::collections::HashMap<u64, String>,
    ) -> Result<u64, crate::ImportError> {
        let mut guard = self.writer.lock().map_err(|_| poisoned())?;
        let w = &mut *guard;
        if w.broken.is_some() {
            return Err(crate::ImportError::Refused(
                "the store is inconsistent; run `cairn verify`".into(),
            ));
        }
        w.state.fulltext.begin();
        let tx = w
            .conn
            .unchecked_transaction()
            .context("starting the import")?;
        let count = self.engine().import(
            &mut SqliteTx {
                conn: &tx,
                state: &mut w.state,
            },
            org_id,
            header,
            checkpoint_note,
            entries,
            withheld_ids,
        )?;
        tx.commit().context("committing the import")?;
        let mut fulltext = std::mem::take(&mut w.state.fulltext);
        // Rebuild the in-memory state from the tables, as on open.
        w.state = rebuild(&w.conn)?;
        if let Some(index) = &self.fulltext {
            // Written by the index's thread, in chunks, like any batch's
            // (the import is committed whatever happens to the index; a
            // search writes what is queued first).
            index.committed(&mut fulltext, w.state.org_progress().into_iter());
        }
        Ok(count)
    }
}
