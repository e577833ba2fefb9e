//! `PgTx` as the engine's `WriteTx`: an org and its sessions under the
//! batch's lock, agent keys (cached per org, `PgTx::org_keys`), the
//! look-ups a batch makes before writing (record ids, seals, successors,
//! trace ids, chain links, steps by trace id), the rows it queues (steps,
//! operational records, tree nodes, search documents, embeddings, session
//! kinds and heads) and the statements it runs at once (sessions, erasure,
//! expired sessions, checkpoints, origins). Apart from `tx.rs`, which holds
//! the transaction's state and how its pending rows are sent, because this
//! is the interface the engine writes through.

use super::{EntryRow, PgTx};
use crate::engine::{
    AgentKey, OpRow, OrgState, SessionState, StepRow, WriteTx, blob_hash, committed_size,
    fold_key_record, json_text, links_text, row_id,
};
use crate::pg::connection::{col, i64_of, u64_of};
use crate::pg::reads::KEY_RECORDS_BETWEEN;
use crate::pg::rows::{STEP_BY_TRACE, session_ids, step_from_row, true_end};
use crate::pg::search_queue::QueuedDoc;
use crate::pg::tree::latest_checkpoint;
use crate::pg::tsvector::TsVector;
use crate::{StoreError, StoredCheckpoint, StoredStep};
use cairn_core::record::SessionHeader;
use cairn_core::{Hash, Timestamp};
use postgres::GenericClient;
use std::collections::HashMap;

/// Key records read at a time into the writer's cache (a few pages in the
/// tests' stores).
const KEY_PAGE: i64 = if cfg!(test) { 64 } else { 4096 };

impl<C: GenericClient> PgTx<'_, C> {
    /// The org's agent keys as its committed log holds them: the process's
    /// cache, brought up to date once per transaction by reading the key
    /// records appended since it was read (by any server: one look-up of
    /// the index, usually finding none), up to the log's size when the
    /// batch took the org's lock. Rows this transaction wrote are never
    /// read into the cache (a failed batch leaves it as committed data
    /// left it); the engine's overlay holds them.
    fn org_keys(&mut self, org: i64) -> Result<&HashMap<String, AgentKey>, StoreError> {
        if self.keys_read.insert(org) {
            let size = committed_size(&self.orgs, org);
            let cached = self.cache.keys.entry(org).or_default();
            if cached.size > size {
                // The log is shorter than when the keys were read (a
                // restored database): read them again.
                *cached = Default::default();
            }
            // Pages of key records, so that a first read of many keys
            // holds one page of rows beside the keys.
            let mut from = cached.size;
            while from < size {
                let rows = self.db.query(
                    KEY_RECORDS_BETWEEN,
                    &[&org, &row_id(org, from), &row_id(org, size), &KEY_PAGE],
                    "loading agent keys",
                )?;
                let cached = self.cache.keys.entry(org).or_default();
                for row in &rows {
                    let seq = u64_of(col(row, 0)?);
                    let entry_type: String = col(row, 1)?;
                    let view: String = col(row, 2)?;
                    fold_key_record(&mut cached.keys, seq, &entry_type, &view)?;
                    from = seq + 1;
                }
                if rows.len() < KEY_PAGE as usize {
                    from = size;
                }
                cached.size = from;
            }
        }
        Ok(&self.cache.keys.entry(org).or_default().keys)
    }
}

impl<C: GenericClient> WriteTx for PgTx<'_, C> {
    fn org(&mut self, name: &str) -> Result<Option<OrgState>, StoreError> {
        if !self.locked.contains(name) {
            return Err(StoreError::Corrupt(format!(
                "internal: org {name} was used without its lock"
            )));
        }
        Ok(self.orgs.get(name).cloned())
    }

    fn create_org(&mut self, name: &str) -> Result<i64, StoreError> {
        let row = self.db.query_one(
            "INSERT INTO orgs (name) VALUES ($1) RETURNING org",
            &[&name],
            "creating an org",
        )?;
        col(&row, 0)
    }

    fn session(&mut self, org: i64, session_id: &str) -> Result<Option<SessionState>, StoreError> {
        let key = (org, session_id.to_owned());
        if !self.sessions.contains_key(&key) {
            self.prefetch_sessions(org, &[session_id.to_owned()])?;
        }
        Ok(self.sessions.get(&key).cloned().flatten())
    }

    fn agent_key(&mut self, org: i64, key_id: &str) -> Result<Option<AgentKey>, StoreError> {
        Ok(self.org_keys(org)?.get(key_id).cloned())
    }

    fn key_registrations(&mut self, org: i64) -> Result<u64, StoreError> {
        // Each key id is registered once: one key per registration.
        Ok(self.org_keys(org)?.len() as u64)
    }

    fn log_key_records(&mut self, org: i64) -> Result<u64, StoreError> {
        self.flush()?;
        // `entries_log_keys` holds only these rows.
        let row = self.db.query_one(
            "SELECT count(*) FROM entries WHERE org = $1 AND type = 'log-key'",
            &[&org],
            "counting log-key records",
        )?;
        let count: i64 = col(&row, 0)?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    fn record_type(&mut self, org: i64, id: &str) -> Result<Option<String>, StoreError> {
        if let Some(kind) = self.record_known(org, id) {
            return Ok(kind);
        }
        self.flush()?;
        self.db
            .query_opt(
                "SELECT type FROM entries WHERE org = $1 AND trace_id = $2",
                &[&org, &id],
                "looking up a record by id",
            )?
            .map(|row| col(&row, 0))
            .transpose()
    }

    fn session_sealed_with(&mut self, org: i64, hash: &Hash) -> Result<Option<String>, StoreError> {
        self.flush()?;
        self.db
            .query_opt(
                "SELECT s.session_id FROM entries e JOIN sessions s ON s.sid = e.sid
                 WHERE e.org = $1 AND e.type = 'seal' AND e.view::jsonb ->> 'final_hash' = $2",
                &[&org, &hash.to_hex()],
                "looking up a sealed session",
            )?
            .map(|row| col(&row, 0))
            .transpose()
    }

    fn successor_of(&mut self, org: i64, hash: &Hash) -> Result<Option<String>, StoreError> {
        self.flush()?;
        self.db
            .query_opt(
                "SELECT view::jsonb ->> 'session_id' FROM entries
                 WHERE org = $1 AND type = 'session-start' AND view::jsonb ->> 'predecessor' = $2",
                &[&org, &hash.to_hex()],
                "looking up a successor",
            )?
            .map(|row| col(&row, 0))
            .transpose()
    }

    fn trace_id_taken(&mut self, org: i64, trace_id: &str) -> Result<bool, StoreError> {
        if let Some(kind) = self.record_known(org, trace_id) {
            return Ok(kind.is_some());
        }
        self.flush()?;
        let row = self.db.query_one(
            "SELECT EXISTS (SELECT 1 FROM entries WHERE org = $1 AND trace_id = $2)",
            &[&org, &trace_id],
            "checking a trace id",
        )?;
        col(&row, 0)
    }

    fn insert_step(&mut self, row: &StepRow<'_>) -> Result<(), StoreError> {
        let s = row.step;
        self.push_entry(EntryRow {
            id: row_id(row.org, row.seq),
            org: row.org,
            seq: i64_of(row.seq),
            entry_type: "step".into(),
            logged_at: row.logged_at.as_micros(),
            record_hash: row.hash.0.to_vec(),
            leaf_hash: row.leaf.0.to_vec(),
            view: None,
            sid: Some(row.sid),
            step_index: Some(i64_of(row.step_index)),
            trace_id: Some(s.trace_id.clone()),
            agent_id: Some(s.agent_id.clone()),
            kind: Some(s.kind.as_str().to_owned()),
            kind_label: Some(s.kind_label.clone()),
            content: s.content.clone(),
            input_data: json_text(&s.input),
            output_data: json_text(&s.output),
            confidence: s.confidence,
            duration_ms: s.duration_ms.map(i64_of),
            token_count: s.token_count.map(i64_of),
            model: s.model.clone(),
            metadata: json_text(&s.metadata),
            created_at: Some(row.created_at.as_micros()),
            turn_id: s.turn_id.clone(),
            turn_step: s.turn_step.map(i64_of),
            task_id: s.task_id.clone(),
            links: links_text(&s.links),
            status: Some(s.status.as_str().to_owned()),
            seed: row.seed.map(|seed| seed.to_vec()),
            digest: Some(row.digest.0.to_vec()),
            prev_hash: Some(row.prev_hash.0.to_vec()),
            sig_key_id: s.signer_key_id.clone(),
            signature: row.signature.map(|sig| sig.to_vec()),
            has_embedding: row.has_embedding,
            erased: row.erased,
            hidden: row.hidden.clone(),
            salts: row.salts.clone(),
            prev_seq: row.prev_seq.map(i64_of),
        })
    }

    fn insert_search_doc(
        &mut self,
        org: i64,
        seq: u64,
        doc: &str,
        form: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        // A form computed on the submitting thread is the same function
        // of the document (`search_form`); PostgreSQL checks it as any
        // `tsvector` it receives.
        let vector = match form {
            Some(form) => TsVector::from_binary(form.to_vec()),
            None => TsVector::of(doc),
        };
        // Counted with the entries, so that a batch of large documents is
        // sent early as one of large entries is.
        self.pending.entry_bytes += vector.len();
        self.pending.search.push(QueuedDoc {
            id: row_id(org, seq),
            org,
            vector,
        });
        Ok(())
    }

    fn queue_embedding(&mut self, org: i64, seq: u64) -> Result<(), StoreError> {
        self.pending.embed_queue.push((row_id(org, seq), org));
        Ok(())
    }

    fn insert_op(&mut self, row: &OpRow<'_>) -> Result<(), StoreError> {
        self.push_entry(EntryRow {
            id: row_id(row.org, row.seq),
            org: row.org,
            seq: i64_of(row.seq),
            entry_type: row.entry_type().to_owned(),
            logged_at: row.logged_at.as_micros(),
            record_hash: row.hash.0.to_vec(),
            leaf_hash: row.leaf.0.to_vec(),
            view: row.view(),
            trace_id: row.id().map(str::to_owned),
            sid: row.sid,
            step_index: row.step_index.map(i64_of),
            agent_id: row.agent_id.map(str::to_owned),
            ..EntryRow::default()
        })
    }

    fn insert_node(
        &mut self,
        org: i64,
        level: u32,
        index: u64,
        hash: &Hash,
    ) -> Result<(), StoreError> {
        self.pending
            .nodes
            .push((org, level as i32, i64_of(index), hash.0.to_vec()));
        Ok(())
    }

    fn insert_session(
        &mut self,
        org: i64,
        header: &SessionHeader,
        genesis: &Hash,
        start_seq: u64,
    ) -> Result<i64, StoreError> {
        let row = self.db.query_one(
            "INSERT INTO sessions (org, session_id, agent_id, profile, started_at, start_seq, genesis,
             max_clock_skew_s)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING sid",
            &[
                &org,
                &header.session_id,
                &header.agent_id,
                &header.profile.as_str(),
                &header.started_at.as_micros(),
                &i64_of(start_seq),
                &&genesis.0[..],
                &i64_of(header.max_clock_skew_s),
            ],
            "writing a session",
        )?;
        let sid = col(&row, 0)?;
        self.session_created(sid);
        Ok(sid)
    }

    fn chain_link(&mut self, org: i64, seq: u64) -> Result<(u64, Hash, Option<u64>), StoreError> {
        self.flush()?;
        let row = self.db.query_one(
            "SELECT step_index, record_hash, prev_seq FROM entries WHERE id = $1",
            &[&row_id(org, seq)],
            "reading a session's chain",
        )?;
        let index: i64 = col(&row, 0)?;
        let prev: Option<i64> = col(&row, 2)?;
        Ok((u64_of(index), blob_hash(col(&row, 1)?)?, prev.map(u64_of)))
    }

    fn step_by_trace(
        &mut self,
        org: i64,
        trace_id: &str,
    ) -> Result<Option<StoredStep>, StoreError> {
        self.flush()?;
        self.db
            .query_opt(&STEP_BY_TRACE, &[&org, &trace_id], "finding a step")?
            .map(|row| step_from_row(&row))
            .transpose()
    }

    fn erase(&mut self, org: i64, seq: u64, hidden: &str) -> Result<(), StoreError> {
        self.flush()?;
        let id = row_id(org, seq);
        self.db.execute(
            "UPDATE entries SET content = NULL, input_data = NULL, output_data = NULL, metadata = NULL,
             erased = TRUE, hidden = $2, has_embedding = FALSE WHERE id = $1",
            &[&id, &hidden],
            "erasing a step",
        )?;
        // A vector would still carry what the content said.
        for sql in [
            "DELETE FROM vectors WHERE id = $1",
            "DELETE FROM embedding_queue WHERE id = $1",
        ] {
            self.db.execute(sql, &[&id], "erasing an embedding")?;
        }
        // The queue row first: a connection indexing the step holds it,
        // and this waits for its document, deleted next; once the row is
        // gone, nobody writes the document (`search_queue.rs`).
        for sql in [
            "DELETE FROM search_queue WHERE id = $1",
            "DELETE FROM step_search WHERE id = $1",
        ] {
            self.db
                .execute(sql, &[&id], "erasing a step from the full-text index")?;
        }
        Ok(())
    }

    fn held_signed_trace(
        &mut self,
        org: i64,
        trace_id: &str,
    ) -> Result<Option<(u64, String, Hash)>, StoreError> {
        self.flush()?;
        self.db
            .query_opt(
                "SELECT seq, view, record_hash FROM entries
                 WHERE org = $1 AND trace_id = $2 AND type = 'signed-trace' AND view IS NOT NULL",
                &[&org, &trace_id],
                "looking up a signed trace",
            )?
            .map(|row| {
                crate::engine::held_trace(
                    u64_of(col(&row, 0)?),
                    &col::<String>(&row, 1)?,
                    col(&row, 2)?,
                )
            })
            .transpose()
    }

    fn withhold_trace(&mut self, org: i64, seq: u64) -> Result<(), StoreError> {
        self.flush()?;
        self.db.execute(
            "UPDATE entries SET view = NULL WHERE id = $1 AND type = 'signed-trace'",
            &[&row_id(org, seq)],
            "withholding an erased signed trace",
        )?;
        Ok(())
    }

    fn expired_sessions(
        &mut self,
        org: i64,
        older_than: Timestamp,
    ) -> Result<Vec<i64>, StoreError> {
        self.flush()?;
        // Candidates by their head rows, confirmed by the log (a session
        // whose head row is missing is one if it has a first step).
        let candidates: Vec<i64> = self
            .db
            .query(
                "SELECT s.sid FROM sessions s LEFT JOIN session_heads h ON h.sid = s.sid
                 LEFT JOIN entries e ON e.id = ((s.org << 40) | h.last_seq) AND e.sid = s.sid
                   AND e.type = 'step' AND e.step_index = h.last_index
                 WHERE s.org = $1 AND (e.id IS NULL OR e.created_at < $2)
                   AND (h.sid IS NOT NULL OR EXISTS (SELECT 1 FROM entries f
                     WHERE COALESCE(f.prev_seq, -1) = -1 AND f.sid = s.sid AND f.type = 'step'))",
                &[&org, &older_than.as_micros()],
                "finding expired sessions",
            )?
            .iter()
            .map(|r| col(r, 0))
            .collect::<Result<_, _>>()?;
        let mut expired = Vec::new();
        for sid in candidates {
            if true_end(&mut self.db, org, sid)?
                .is_some_and(|e| e.created_at < older_than.as_micros())
            {
                expired.push(sid);
            }
        }
        Ok(expired)
    }

    fn turn_highest(&mut self, sid: i64, turn_id: &str) -> Result<Option<u64>, StoreError> {
        self.flush()?;
        let row = self.db.query_one(
            crate::pg::reads::TURN_HIGHEST,
            &[&sid, &turn_id],
            "numbering a turn's steps",
        )?;
        Ok(col::<Option<i64>>(&row, 0)?.map(|n| n as u64))
    }

    fn turn_steps_taken(
        &mut self,
        sid: i64,
        turn_id: &str,
        numbers: &[u64],
    ) -> Result<Vec<u64>, StoreError> {
        let mut taken = Vec::new();
        let mut unknown = Vec::new();
        for &number in numbers {
            match self.turn_step_known(sid, turn_id, number) {
                Some(true) => taken.push(number),
                Some(false) => {}
                None => unknown.push(number as i64),
            }
        }
        if unknown.is_empty() {
            return Ok(taken);
        }
        self.flush()?;
        let rows = self.db.query(
            crate::pg::reads::TURN_STEPS_TAKEN,
            &[&sid, &turn_id, &unknown],
            "checking a turn's step numbers",
        )?;
        for row in &rows {
            taken.push(col::<i64>(row, 0)? as u64);
        }
        Ok(taken)
    }

    fn unerased_steps(&mut self, org: i64, sid: i64) -> Result<Vec<String>, StoreError> {
        self.flush()?;
        let ids = session_ids(&mut self.db, org, sid)?;
        let rows = self.db.query(
            "SELECT trace_id FROM entries WHERE id = ANY($1) AND NOT erased ORDER BY id",
            &[&ids],
            "reading an expired session",
        )?;
        rows.iter().map(|r| col(r, 0)).collect()
    }

    fn insert_checkpoint(&mut self, org: i64, cp: &StoredCheckpoint) -> Result<(), StoreError> {
        self.db.execute(
            "INSERT INTO checkpoints (org, size, root, note, created_at) VALUES ($1, $2, $3, $4, $5)",
            &[
                &org,
                &i64_of(cp.size),
                &&cp.root.0[..],
                &cp.note,
                &cp.created_at.as_micros(),
            ],
            "writing a checkpoint",
        )?;
        Ok(())
    }

    fn latest_checkpoint(
        &mut self,
        org: i64,
        name: &str,
    ) -> Result<Option<StoredCheckpoint>, StoreError> {
        latest_checkpoint(&mut self.db, org, name)
    }

    fn put_session_kinds(
        &mut self,
        pairs: &[(i64, cairn_core::kind::StepKind)],
    ) -> Result<(), StoreError> {
        self.pending
            .kinds
            .extend(pairs.iter().map(|(sid, kind)| (*sid, kind.as_str())));
        Ok(())
    }

    fn put_session_head(
        &mut self,
        sid: i64,
        first_seq: u64,
        last_seq: u64,
        last_index: u64,
    ) -> Result<(), StoreError> {
        self.pending
            .heads
            .push((sid, i64_of(first_seq), i64_of(last_seq), i64_of(last_index)));
        Ok(())
    }

    fn insert_origin(
        &mut self,
        org: i64,
        server_name: &str,
        server_key: &str,
    ) -> Result<(), StoreError> {
        self.db.execute(
            "INSERT INTO org_origins (org, server_name, server_key) VALUES ($1, $2, $3)",
            &[&org, &server_name, &server_key],
            "recording the org's origin",
        )?;
        Ok(())
    }
}
