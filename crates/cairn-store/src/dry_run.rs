//! A trial run of writes over an open transaction: reads go to the
//! transaction, writes are only remembered, and reads that depend on what
//! the trial itself wrote (a trace id taken, a record's type) see those
//! writes. The engine uses it to find out whether every step of an
//! all-or-nothing write ([`crate::WriteRequest::Steps`]) would be
//! accepted before it writes any of them.

use crate::engine::{AgentKey, OpRow, OrgState, SessionState, StepRow, WriteTx};
use crate::{StoreError, StoredCheckpoint, StoredStep};
use cairn_core::record::SessionHeader;
use cairn_core::{Hash, Timestamp};
use std::collections::HashMap;

/// See the module docs.
pub(crate) struct DryRun<'t, T: WriteTx + ?Sized> {
    tx: &'t mut T,
    /// `(org, id)` of records the trial wrote, to their entry type.
    written: HashMap<(i64, String), String>,
    /// `log-key` records the trial wrote, by org.
    log_keys: HashMap<i64, u64>,
    /// Ids handed out for orgs and sessions the trial created (negative:
    /// no real row has them).
    next_id: i64,
}

impl<'t, T: WriteTx + ?Sized> DryRun<'t, T> {
    pub(crate) fn new(tx: &'t mut T) -> DryRun<'t, T> {
        DryRun {
            tx,
            written: HashMap::new(),
            log_keys: HashMap::new(),
            next_id: -1,
        }
    }

    fn fresh_id(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id -= 1;
        id
    }
}

impl<T: WriteTx + ?Sized> WriteTx for DryRun<'_, T> {
    fn org(&mut self, name: &str) -> Result<Option<OrgState>, StoreError> {
        self.tx.org(name)
    }

    fn create_org(&mut self, _name: &str) -> Result<i64, StoreError> {
        Ok(self.fresh_id())
    }

    fn session(&mut self, org: i64, session_id: &str) -> Result<Option<SessionState>, StoreError> {
        if org < 0 {
            return Ok(None);
        }
        self.tx.session(org, session_id)
    }

    fn agent_key(&mut self, org: i64, key_id: &str) -> Result<Option<AgentKey>, StoreError> {
        if org < 0 {
            return Ok(None);
        }
        self.tx.agent_key(org, key_id)
    }

    fn key_registrations(&mut self, org: i64) -> Result<u64, StoreError> {
        if org < 0 {
            return Ok(0);
        }
        self.tx.key_registrations(org)
    }

    fn log_key_records(&mut self, org: i64) -> Result<u64, StoreError> {
        let written = self.log_keys.get(&org).copied().unwrap_or(0);
        if org < 0 {
            return Ok(written);
        }
        Ok(self.tx.log_key_records(org)? + written)
    }

    fn trace_id_taken(&mut self, org: i64, trace_id: &str) -> Result<bool, StoreError> {
        if self.written.contains_key(&(org, trace_id.to_owned())) {
            return Ok(true);
        }
        if org < 0 {
            return Ok(false);
        }
        self.tx.trace_id_taken(org, trace_id)
    }

    fn record_type(&mut self, org: i64, id: &str) -> Result<Option<String>, StoreError> {
        if let Some(kind) = self.written.get(&(org, id.to_owned())) {
            return Ok(Some(kind.clone()));
        }
        if org < 0 {
            return Ok(None);
        }
        self.tx.record_type(org, id)
    }

    fn session_sealed_with(&mut self, org: i64, hash: &Hash) -> Result<Option<String>, StoreError> {
        if org < 0 {
            return Ok(None);
        }
        self.tx.session_sealed_with(org, hash)
    }

    fn successor_of(&mut self, org: i64, hash: &Hash) -> Result<Option<String>, StoreError> {
        if org < 0 {
            return Ok(None);
        }
        self.tx.successor_of(org, hash)
    }

    fn insert_step(&mut self, row: &StepRow<'_>) -> Result<(), StoreError> {
        self.written
            .insert((row.org, row.step.trace_id.clone()), "step".into());
        Ok(())
    }

    fn queue_embedding(&mut self, _org: i64, _seq: u64) -> Result<(), StoreError> {
        Ok(())
    }

    fn insert_search_doc(
        &mut self,
        _org: i64,
        _seq: u64,
        _doc: &str,
        _form: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    fn insert_op(&mut self, row: &OpRow<'_>) -> Result<(), StoreError> {
        if row.entry_type() == "log-key" {
            *self.log_keys.entry(row.org).or_default() += 1;
        }
        if let Some(id) = row.id() {
            self.written
                .insert((row.org, id.to_owned()), row.entry_type().to_owned());
        }
        Ok(())
    }

    fn insert_node(
        &mut self,
        _org: i64,
        _level: u32,
        _index: u64,
        _hash: &Hash,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    fn insert_session(
        &mut self,
        _org: i64,
        _header: &SessionHeader,
        _genesis: &Hash,
        _start_seq: u64,
    ) -> Result<i64, StoreError> {
        Ok(self.fresh_id())
    }

    fn chain_link(&mut self, org: i64, seq: u64) -> Result<(u64, Hash, Option<u64>), StoreError> {
        self.tx.chain_link(org, seq)
    }

    fn step_by_trace(
        &mut self,
        org: i64,
        trace_id: &str,
    ) -> Result<Option<StoredStep>, StoreError> {
        if org < 0 {
            return Ok(None);
        }
        self.tx.step_by_trace(org, trace_id)
    }

    fn erase(&mut self, _org: i64, _seq: u64, _hidden: &str) -> Result<(), StoreError> {
        Ok(())
    }

    fn held_signed_trace(
        &mut self,
        org: i64,
        trace_id: &str,
    ) -> Result<Option<(u64, String, Hash)>, StoreError> {
        if org < 0 {
            return Ok(None);
        }
        self.tx.held_signed_trace(org, trace_id)
    }

    fn withhold_trace(&mut self, _org: i64, _seq: u64) -> Result<(), StoreError> {
        Ok(())
    }

    fn expired_sessions(
        &mut self,
        org: i64,
        older_than: Timestamp,
    ) -> Result<Vec<i64>, StoreError> {
        self.tx.expired_sessions(org, older_than)
    }

    fn unerased_steps(&mut self, org: i64, sid: i64) -> Result<Vec<String>, StoreError> {
        self.tx.unerased_steps(org, sid)
    }

    /// The transaction's answer: a turn is numbered before its trial, so
    /// the steps this dry run remembers never need counting.
    fn turn_highest(&mut self, sid: i64, turn_id: &str) -> Result<Option<u64>, StoreError> {
        self.tx.turn_highest(sid, turn_id)
    }

    fn turn_steps_taken(
        &mut self,
        sid: i64,
        turn_id: &str,
        numbers: &[u64],
    ) -> Result<Vec<u64>, StoreError> {
        // The stored turn's only: a write of many steps checks the numbers
        // its writer gave, among themselves too, before its trial
        // (`BatchRun::first_turn_step_taken`), and the trial asks nothing.
        if sid < 0 {
            return Ok(Vec::new());
        }
        self.tx.turn_steps_taken(sid, turn_id, numbers)
    }

    fn insert_checkpoint(&mut self, _org: i64, _cp: &StoredCheckpoint) -> Result<(), StoreError> {
        Ok(())
    }

    fn latest_checkpoint(
        &mut self,
        org: i64,
        name: &str,
    ) -> Result<Option<StoredCheckpoint>, StoreError> {
        self.tx.latest_checkpoint(org, name)
    }

    fn put_session_kinds(
        &mut self,
        _pairs: &[(i64, cairn_core::kind::StepKind)],
    ) -> Result<(), StoreError> {
        Ok(())
    }

    fn put_session_head(
        &mut self,
        _sid: i64,
        _first_seq: u64,
        _last_seq: u64,
        _last_index: u64,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    fn insert_origin(
        &mut self,
        _org: i64,
        _server_name: &str,
        _server_key: &str,
    ) -> Result<(), StoreError> {
        Ok(())
    }
}
