//! The write path shared by every backend: what a batch of
//! [`WriteRequest`]s does, decided once, over a backend's open transaction.
//!
//! A backend supplies a [`WriteTx`]: its transaction plus the sequencing
//! state it can see (SQLite from memory, PostgreSQL from the database under
//! the org locks it took for the batch). The engine validates, sequences,
//! hashes, signs and writes through it, keeping what the batch changed in
//! an [`Overlay`] that the backend applies to its caches only once the
//! transaction committed. Because the rules live here, the embedded and
//! PostgreSQL stores cannot drift apart in what they accept or write; the
//! conformance suite runs against both to prove it.

use crate::keys::ServerKey;
use crate::{
    ImportError, NewSession, PreparedStep, Refusal, StoreError, StoredCheckpoint, StoredStep,
    WriteRequest, Written, now, prepare_step,
};
use cairn_core::commit::{
    AgentSignature, Assigned, Field, Opening, Openings, StepRecord, agent_key_id, chain_hash,
    digest_of_commitments, genesis_hash, recommit_assigned, session_leaf_data,
    verify_agent_signature,
};
use cairn_core::ed25519_dalek::VerifyingKey;
use cairn_core::log::{
    ErasureRecord, KeyRegistration, KeyRevocation, LogEntry, LogRecord, OpRecord, SealRecord,
    TraceErasureRecord, log_origin, org_checkpoint,
};
use cairn_core::merkle::{Frontier, leaf_hash};
use cairn_core::record::{Limits, Links, Profile, SessionHeader, Status, Step, validate_id};
use cairn_core::{Hash, Timestamp};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

mod import;
mod nul_keys;
pub(crate) mod records;
pub(crate) use records::refused_before_queueing;
mod rows;
mod state;
mod steps;
mod stored_tree;

pub(crate) use rows::*;
pub(crate) use state::*;
pub(crate) use stored_tree::{by_index, fold_perfect, stored_subtree};

/// Merkle subtrees are stored at levels that are multiples of this, so a
/// proof reads at most 16 stored hashes per subtree it needs.
pub(crate) const NODE_STRIDE: u32 = 4;

/// The highest stored level: an org's log holds fewer than 2^40 entries
/// (its rows' ids are `(org << 40) | seq`).
pub(crate) const MAX_NODE_LEVEL: u32 = 40;

/// How verification names a stored subtree row at a position no append
/// writes (both backends word it alike).
pub(crate) fn misplaced_node(level: &str, index: &str) -> String {
    format!(
        "the stored tree holds a row at level {level}, index {index}, where no append writes one (levels {NODE_STRIDE} to {MAX_NODE_LEVEL} in steps of {NODE_STRIDE}, indexes from 0): someone with the database planted it"
    )
}

/// Everything one step row holds.
pub(crate) struct StepRow<'a> {
    pub org: i64,
    pub seq: u64,
    pub logged_at: Timestamp,
    pub sid: i64,
    /// The step as written; its `step_index` and `created_at` are the
    /// writer's, the two below the ones it is logged with.
    pub step: &'a Step,
    pub step_index: u64,
    pub created_at: Timestamp,
    pub hash: &'a Hash,
    pub leaf: &'a Hash,
    pub digest: &'a Hash,
    pub prev_hash: &'a Hash,
    /// The record seed (steps written here) ...
    pub seed: Option<&'a [u8; 32]>,
    /// ... or the salts themselves (steps imported from a bundle).
    pub salts: Option<Vec<u8>>,
    pub signature: Option<&'a [u8; 64]>,
    pub has_embedding: bool,
    pub erased: bool,
    /// Commitments of hidden or erased fields, as JSON.
    pub hidden: Option<String>,
    pub prev_seq: Option<u64>,
}

/// Everything one operational record's row holds. Records that concern a
/// session carry its `sid` (and an erasure or review the step's index),
/// key records their agent, so that the log itself can be searched by
/// them: derived tables are never asked what the log holds.
pub(crate) struct OpRow<'a> {
    pub org: i64,
    pub seq: u64,
    pub logged_at: Timestamp,
    /// The record; `None` for a `signed-trace` record whose view is
    /// withheld (an erased trace, imported so from a bundle).
    pub op: Option<&'a OpRecord>,
    /// The id of a withheld trace (`op` is `None`), which stays taken.
    pub withheld_id: Option<&'a str>,
    pub hash: &'a Hash,
    pub leaf: &'a Hash,
    pub sid: Option<i64>,
    pub step_index: Option<u64>,
    pub agent_id: Option<&'a str>,
}

impl OpRow<'_> {
    /// The entry type of the row.
    pub fn entry_type(&self) -> &'static str {
        self.op.map_or("signed-trace", OpRecord::entry_type)
    }

    /// The stored view (`None`: withheld).
    pub fn view(&self) -> Option<String> {
        self.op.map(|op| op.to_view().to_string())
    }

    /// The id the record is found by ([`op_record_id`]; a withheld
    /// trace's own).
    pub fn id(&self) -> Option<&str> {
        self.op.map_or(self.withheld_id, op_record_id)
    }
}

/// What the engine needs from a backend's open write transaction. State
/// lookups see committed data plus nothing of the running batch (the
/// engine's overlay has that); writes go into the transaction.
pub(crate) trait WriteTx {
    /// An org's state, None if it has no log yet.
    fn org(&mut self, name: &str) -> Result<Option<OrgState>, StoreError>;
    /// Creates an org row, returning its id.
    fn create_org(&mut self, name: &str) -> Result<i64, StoreError>;
    /// A session's state.
    fn session(&mut self, org: i64, session_id: &str) -> Result<Option<SessionState>, StoreError>;
    /// An agent key registered in `org`.
    fn agent_key(&mut self, org: i64, key_id: &str) -> Result<Option<AgentKey>, StoreError>;
    /// How many keys `org`'s committed log registers (revoked ones
    /// included: a verifier keeps them too).
    fn key_registrations(&mut self, org: i64) -> Result<u64, StoreError>;
    /// How many `log-key` records `org`'s log holds as it stands in this
    /// transaction (this batch's included): a checkpoint states it
    /// (FORMAT.md 7.1).
    fn log_key_records(&mut self, org: i64) -> Result<u64, StoreError>;
    /// Whether a trace id is used in `org`.
    fn trace_id_taken(&mut self, org: i64, trace_id: &str) -> Result<bool, StoreError>;
    /// The entry type (`step`, `audit-event`) of the record with this id
    /// (a step's trace id, an audit event's id) in `org`, written by this
    /// batch or before.
    fn record_type(&mut self, org: i64, id: &str) -> Result<Option<String>, StoreError>;
    /// The sealed session of `org` whose seal's final hash is `hash`.
    fn session_sealed_with(&mut self, org: i64, hash: &Hash) -> Result<Option<String>, StoreError>;
    /// The session of `org` that continues the one ending in `hash`.
    fn successor_of(&mut self, org: i64, hash: &Hash) -> Result<Option<String>, StoreError>;
    /// Writes a step row.
    fn insert_step(&mut self, row: &StepRow<'_>) -> Result<(), StoreError>;
    /// Indexes a step's full-text document, given with the store's own
    /// form of it when that was computed before sequencing
    /// ([`crate::LedgerStore::search_form`]).
    fn insert_search_doc(
        &mut self,
        org: i64,
        seq: u64,
        doc: &str,
        form: Option<&[u8]>,
    ) -> Result<(), StoreError>;
    /// Queues a step for the background embedder.
    fn queue_embedding(&mut self, org: i64, seq: u64) -> Result<(), StoreError>;
    /// Writes an operational record's row (indexed by [`op_record_id`]).
    fn insert_op(&mut self, row: &OpRow<'_>) -> Result<(), StoreError>;
    /// Writes a completed Merkle subtree at a stored level.
    fn insert_node(
        &mut self,
        org: i64,
        level: u32,
        index: u64,
        hash: &Hash,
    ) -> Result<(), StoreError>;
    /// Writes a session's lookup row, returning its id.
    fn insert_session(
        &mut self,
        org: i64,
        header: &SessionHeader,
        genesis: &Hash,
        start_seq: u64,
    ) -> Result<i64, StoreError>;
    /// `(step_index, chain hash, previous step's seq)` of the step at `seq`
    /// (written by this batch or before).
    fn chain_link(&mut self, org: i64, seq: u64) -> Result<(u64, Hash, Option<u64>), StoreError>;
    /// A step by trace id (written by this batch or before).
    fn step_by_trace(&mut self, org: i64, trace_id: &str)
    -> Result<Option<StoredStep>, StoreError>;
    /// Nulls the payload of the step at `seq`, records the commitments of
    /// its hidden fields and drops its embedding. The step's erasure record
    /// is written first: the database refuses an erasure without one.
    fn erase(&mut self, org: i64, seq: u64, hidden: &str) -> Result<(), StoreError>;
    /// The `signed-trace` record of trace `trace_id` in `org` whose view
    /// is still held: its seq, its session and its recorded `op_hash`.
    fn held_signed_trace(
        &mut self,
        org: i64,
        trace_id: &str,
    ) -> Result<Option<(u64, String, Hash)>, StoreError>;
    /// Withholds the view of the `signed-trace` record at `seq` (FORMAT.md
    /// 8). Its trace-erasure record is written first: the database refuses
    /// to withhold a view that no such record names.
    fn withhold_trace(&mut self, org: i64, seq: u64) -> Result<(), StoreError>;
    /// Sessions of `org` whose last step is older than `older_than`.
    fn expired_sessions(&mut self, org: i64, older_than: Timestamp)
    -> Result<Vec<i64>, StoreError>;
    /// Trace ids of a session's steps not erased yet, in index order.
    fn unerased_steps(&mut self, org: i64, sid: i64) -> Result<Vec<String>, StoreError>;
    /// The highest `turn_step` of turn `turn_id` of session `sid`, as the
    /// log stands in this transaction (this batch's rows included).
    fn turn_highest(&mut self, sid: i64, turn_id: &str) -> Result<Option<u64>, StoreError>;
    /// Which of `numbers` a step of turn `turn_id` of session `sid` holds
    /// (written by this batch or before), in one query.
    fn turn_steps_taken(
        &mut self,
        sid: i64,
        turn_id: &str,
        numbers: &[u64],
    ) -> Result<Vec<u64>, StoreError>;
    /// Stores a signed checkpoint.
    fn insert_checkpoint(&mut self, org: i64, cp: &StoredCheckpoint) -> Result<(), StoreError>;
    /// The latest stored checkpoint of an org.
    fn latest_checkpoint(
        &mut self,
        org: i64,
        name: &str,
    ) -> Result<Option<StoredCheckpoint>, StoreError>;
    /// Records that sessions hold steps of these kinds (derived state for
    /// the listing's kind filter; a pair already recorded is ignored).
    fn put_session_kinds(
        &mut self,
        pairs: &[(i64, cairn_core::kind::StepKind)],
    ) -> Result<(), StoreError>;
    /// Records a session's first and last step (derived state).
    fn put_session_head(
        &mut self,
        sid: i64,
        first_seq: u64,
        last_seq: u64,
        last_index: u64,
    ) -> Result<(), StoreError>;
    /// Records that an org is a mirror of another server's log.
    fn insert_origin(
        &mut self,
        org: i64,
        server_name: &str,
        server_key: &str,
    ) -> Result<(), StoreError>;
}

/// The settings the write path follows.
pub(crate) struct Engine<'k> {
    /// Signs checkpoints and seals.
    pub key: &'k ServerKey,
    /// Record limits checked at ingest.
    pub limits: Limits,
    /// Seed 000's embedding sample rate.
    pub embedding_sample_rate: f64,
    /// Minimum time between two checkpoints of a growing log.
    pub checkpoint_interval: Duration,
    /// The clock skew new sessions allow between a writer's `created_at`
    /// and the server's `logged_at`, in seconds (recorded in each session
    /// header).
    pub max_clock_skew_s: u64,
    /// The most keys an org's log may register
    /// ([`crate::DEFAULT_MAX_AGENT_KEYS`] unless set).
    pub max_agent_keys: u64,
}

/// The org a request writes to.
pub(crate) fn request_org(request: &WriteRequest) -> &str {
    match request {
        WriteRequest::Step(s) => &s.org_id,
        WriteRequest::Steps(steps) | WriteRequest::Turn { steps, .. } => {
            steps.first().map_or("", |s| s.org_id.as_str())
        }
        WriteRequest::Prepared(p) => &p.step.org_id,
        WriteRequest::StartSession(s) => &s.org_id,
        WriteRequest::Seal { org_id, .. }
        | WriteRequest::Review { org_id, .. }
        | WriteRequest::AuditEvent { org_id, .. }
        | WriteRequest::ImportTrace { org_id, .. }
        | WriteRequest::RegisterKey { org_id, .. }
        | WriteRequest::LogKey { org_id, .. }
        | WriteRequest::RevokeKey { org_id, .. }
        | WriteRequest::RotateKey { org_id, .. }
        | WriteRequest::Erase { org_id, .. }
        | WriteRequest::Retention { org_id, .. }
        | WriteRequest::Checkpoint { org_id } => org_id,
    }
}

/// The id an operational record is found by, stored in the `trace_id`
/// column so that ids are unique across an org's steps and events: an
/// audit event's id.
pub(crate) fn op_record_id(op: &OpRecord) -> Option<&str> {
    match op {
        OpRecord::AuditEvent(event) => Some(&event.event_id),
        OpRecord::SignedTrace(record) => Some(&record.trace.trace_id),
        _ => None,
    }
}

type Outcome<T> = Result<Result<T, Refusal>, StoreError>;

impl Engine<'_> {
    /// Runs a batch inside `tx` (which the caller commits if this returns
    /// Ok): one outcome per request, and the state changes to apply after
    /// the commit.
    pub fn run_batch<T: WriteTx + ?Sized>(
        &self,
        tx: &mut T,
        batch: &[WriteRequest],
    ) -> Result<(Vec<Result<Written, Refusal>>, Overlay), StoreError> {
        let mut run = BatchRun {
            engine: self,
            tx,
            overlay: Overlay::default(),
            now: now(),
        };
        let mut results = Vec::with_capacity(batch.len());
        for request in batch {
            results.push(run.apply(request)?);
        }
        // Checkpoint every org this batch grew, if its last checkpoint is
        // old enough, inside the same transaction.
        let names: Vec<String> = run.overlay.orgs.keys().cloned().collect();
        for name in names {
            if let Some(org) = run.overlay.orgs.get(&name)
                && self.due(org)
            {
                let mut org = org.clone();
                self.checkpoint(run.tx, &name, &mut org)?;
                run.overlay.orgs.insert(name, org);
            }
        }
        let heads: Vec<(i64, u64, u64, u64)> = run
            .overlay
            .sessions
            .values()
            .filter(|s| run.overlay.touched.contains(&s.sid))
            .filter_map(|s| {
                Some((
                    s.sid,
                    s.first_seq?,
                    s.last_seq?,
                    s.next_index.checked_sub(1)?,
                ))
            })
            .collect();
        for (sid, first, last, index) in heads {
            run.tx.put_session_head(sid, first, last, index)?;
        }
        if !run.overlay.new_kinds.is_empty() {
            run.tx.put_session_kinds(&run.overlay.new_kinds)?;
        }
        Ok((results, run.overlay))
    }

    /// Whether an org's log grew since its last checkpoint and that one is
    /// old enough.
    pub fn due(&self, org: &OrgState) -> bool {
        org.frontier.size() > org.checkpoint_size
            && org.checkpoint_at.is_none_or(|at| {
                now().as_micros().saturating_sub(at.as_micros())
                    >= i64::try_from(self.checkpoint_interval.as_micros()).unwrap_or(i64::MAX)
            })
    }

    /// Signs and stores a checkpoint of `org` at its current size.
    pub fn checkpoint<T: WriteTx + ?Sized>(
        &self,
        tx: &mut T,
        name: &str,
        org: &mut OrgState,
    ) -> Result<StoredCheckpoint, StoreError> {
        let size = org.frontier.size();
        let root = org.frontier.root();
        // Every log-key record is below the frontier's size: the count is
        // the one below this checkpoint's.
        let log_keys = tx.log_key_records(org.id)?;
        let note = org_checkpoint(self.key.signer.name(), name, size, root)
            .with_log_key_count(log_keys)
            .sign(&self.key.signer)
            .map_err(|e| StoreError::Key(e.to_string()))?;
        let cp = StoredCheckpoint {
            org_id: name.to_owned(),
            size,
            root,
            note,
            created_at: now(),
        };
        tx.insert_checkpoint(org.id, &cp)?;
        org.checkpoint_size = size;
        org.checkpoint_at = Some(cp.created_at);
        Ok(cp)
    }
}

/// The commitments of a record's hidden fields as stored (`{"field": hex}`),
/// or None if it shows every field.
pub(crate) fn hidden_json(openings: &Openings) -> Option<String> {
    let hidden: serde_json::Map<String, serde_json::Value> = cairn_core::commit::FIELDS
        .into_iter()
        .filter_map(|f| match openings.get(f) {
            Opening::Hidden(c) => {
                Some((f.name().to_owned(), serde_json::Value::String(c.to_hex())))
            }
            Opening::Revealed(_) => None,
        })
        .collect();
    (!hidden.is_empty()).then(|| rows::compact_json(&serde_json::Value::Object(hidden)))
}

/// Appends one leaf to an org's log state, writing the Merkle nodes it
/// completes at stored levels.
pub(crate) fn push_leaf<T: WriteTx + ?Sized>(
    tx: &mut T,
    org: &mut OrgState,
    leaf: Hash,
) -> Result<(), StoreError> {
    let mut nodes: Vec<(u32, u64, Hash)> = Vec::new();
    org.frontier.push_with(leaf, |level, index, hash| {
        if level > 0 && level.is_multiple_of(NODE_STRIDE) {
            nodes.push((level, index, *hash));
        }
    });
    for (level, index, hash) in nodes {
        tx.insert_node(org.id, level, index, &hash)?;
    }
    Ok(())
}

/// The time the next entry of `org` is logged at: the batch's clock, or
/// the last entry's time if the clock went back.
pub(crate) fn next_logged(org: &OrgState, now: Timestamp) -> Timestamp {
    now.max(org.last_logged)
}

/// A held signed trace's row read back: its seq, its session and its
/// recorded `op_hash` ([`WriteTx::held_signed_trace`]).
pub(crate) fn held_trace(
    seq: u64,
    view: &str,
    hash: &[u8],
) -> Result<(u64, String, Hash), StoreError> {
    let OpRecord::SignedTrace(record) = op_from_view(seq, "signed-trace", view)? else {
        return Err(StoreError::Corrupt(format!(
            "record {seq} is no signed trace"
        )));
    };
    Ok((seq, record.session_id, rows::hash_of(hash)?))
}

/// The step an erasure or review names (the seq of the trace a trace
/// erasure withholds), and the agent a key record is for: written beside
/// the record so the log can be searched by them.
pub(crate) fn op_target(op: &OpRecord) -> (Option<u64>, Option<&str>) {
    match op {
        OpRecord::Erasure(e) => (Some(e.step_index), None),
        OpRecord::TraceErasure(e) => (Some(e.trace_seq), None),
        OpRecord::Review(r) => (Some(r.step_index), None),
        OpRecord::KeyRegistration(k) => (None, Some(&k.agent_id)),
        OpRecord::KeyRevocation(k) => (None, Some(&k.agent_id)),
        _ => (None, None),
    }
}

/// Writes an operational record at the org's next seq, logged at `now`
/// (or later, never before the previous entry). `sid` is the registry id
/// of the session the record concerns, if any.
fn write_op<T: WriteTx + ?Sized>(
    tx: &mut T,
    org: &mut OrgState,
    op: &OpRecord,
    now: Timestamp,
    sid: Option<i64>,
) -> Result<u64, StoreError> {
    let (step_index, agent_id) = op_target(op);
    let seq = org.frontier.size();
    let logged_at = next_logged(org, now);
    let hash = op.hash();
    let leaf = leaf_hash(&cairn_core::log::log_leaf_data(
        seq,
        op.entry_type(),
        &hash,
        logged_at,
    ));
    tx.insert_op(&OpRow {
        org: org.id,
        seq,
        logged_at,
        op: Some(op),
        withheld_id: None,
        hash: &hash,
        leaf: &leaf,
        sid,
        step_index,
        agent_id,
    })?;
    push_leaf(tx, org, leaf)?;
    org.last_logged = logged_at;
    Ok(seq)
}

/// One batch in progress.
struct BatchRun<'e, 'k, 't, T: WriteTx + ?Sized> {
    engine: &'e Engine<'k>,
    tx: &'t mut T,
    overlay: Overlay,
    /// The server's clock for this batch: every entry is logged at it, or
    /// at its log's last time if that is later.
    now: Timestamp,
}

impl<T: WriteTx + ?Sized> BatchRun<'_, '_, '_, T> {
    fn org(&mut self, name: &str) -> Result<Option<OrgState>, StoreError> {
        match self.overlay.orgs.get(name) {
            Some(org) => Ok(Some(org.clone())),
            None => self.tx.org(name),
        }
    }

    fn session(&mut self, org: i64, session_id: &str) -> Result<Option<SessionState>, StoreError> {
        match self.overlay.sessions.get(&(org, session_id.to_owned())) {
            Some(s) => Ok(Some(s.clone())),
            None => self.tx.session(org, session_id),
        }
    }

    fn agent_key(&mut self, org: i64, key_id: &str) -> Result<Option<AgentKey>, StoreError> {
        match self.overlay.keys.get(&(org, key_id.to_owned())) {
            Some(k) => Ok(Some(k.clone())),
            None => self.tx.agent_key(org, key_id),
        }
    }

    /// Refuses one more key registration in `org` past the store's bound
    /// on an org's keys (committed and written by this batch). The last
    /// tenth of the bound (at least one key) is an admin's: a writer's key
    /// that registers keys in a loop cannot leave the org's admins unable
    /// to rotate a leaked key.
    /// (`None`: an org without a log yet, which registers none.)
    fn key_room(
        &mut self,
        org: Option<i64>,
        by_admin: bool,
        rotation: bool,
    ) -> Result<Option<Refusal>, StoreError> {
        let held = match org {
            Some(org) => {
                let written = self.overlay.registered.get(&org).copied().unwrap_or(0);
                self.tx.key_registrations(org)?.saturating_add(written)
            }
            None => 0,
        };
        let bound = self.engine.max_agent_keys;
        let limit = if by_admin {
            bound
        } else {
            bound - bound.div_ceil(10)
        };
        Ok((held >= limit).then_some(Refusal::TooManyKeys {
            held,
            bound,
            admins_only: !by_admin && held < bound,
            rotation,
        }))
    }

    /// The org's state, creating the org on first use.
    fn org_or_create(&mut self, name: &str) -> Result<OrgState, StoreError> {
        if let Some(org) = self.org(name)? {
            return Ok(org);
        }
        Ok(OrgState {
            id: self.tx.create_org(name)?,
            foreign: false,
            frontier: Frontier::new(),
            checkpoint_size: 0,
            checkpoint_at: None,
            last_logged: Timestamp::default(),
        })
    }

    fn apply(&mut self, request: &WriteRequest) -> Result<Result<Written, Refusal>, StoreError> {
        let org_name = request_org(request);
        if let Some(org) = self.org(org_name)?
            && org.foreign
        {
            return Ok(match request {
                // A mirror's checkpoint is the one it was imported with.
                WriteRequest::Checkpoint { .. } => self
                    .tx
                    .latest_checkpoint(org.id, org_name)?
                    .map(Written::Checkpoint)
                    .ok_or_else(|| Refusal::ReadOnlyOrg {
                        org_id: org_name.to_owned(),
                    }),
                _ => Err(Refusal::ReadOnlyOrg {
                    org_id: org_name.to_owned(),
                }),
            });
        }
        // Before any look-up by a name the request gives (the org's is
        // read with the batch's locks).
        if let Some(refusal) = request.key_with_nul() {
            return Ok(Err(refusal));
        }
        Ok(match request {
            WriteRequest::Step(step) => match prepare_step(
                (**step).clone(),
                &self.engine.limits,
                self.engine.embedding_sample_rate,
            ) {
                Ok(prepared) => self.append_step(&prepared)?,
                Err(refusal) => Err(refusal),
            },
            WriteRequest::Prepared(prepared) => self.append_step(prepared)?,
            WriteRequest::Steps(steps) => self.append_steps(steps)?,
            WriteRequest::Turn { turn_id, steps } => self.append_turn(turn_id, steps)?,
            WriteRequest::StartSession(new) => self
                .start_session(new)?
                .map(|(seq, genesis)| Written::Session { seq, genesis }),
            WriteRequest::Seal {
                org_id,
                session_id,
                require_reflection,
            } => self.seal(org_id, session_id, *require_reflection)?,
            WriteRequest::Review {
                org_id,
                trace_id,
                decision,
                reviewer,
                note,
            } => self.review(org_id, trace_id, *decision, reviewer, note.as_deref())?,
            WriteRequest::ImportTrace {
                org_id,
                session_id,
                trace,
                caller,
            } => self.import_trace(org_id, session_id.as_deref(), trace, caller)?,
            WriteRequest::AuditEvent {
                org_id,
                event_id,
                session_id,
                action,
                detail,
            } => self.audit_event(
                org_id,
                event_id.as_deref(),
                session_id.as_deref(),
                action,
                detail.as_ref(),
            )?,
            WriteRequest::RegisterKey {
                org_id,
                agent_id,
                public_key,
                by_admin,
            } => self.register_key(org_id, agent_id, *public_key, *by_admin)?,
            WriteRequest::LogKey {
                org_id,
                action,
                key,
            } => self.log_key(org_id, *action, key)?,
            WriteRequest::RevokeKey {
                org_id,
                agent_id,
                key_id,
                reason,
            } => self.revoke_key(org_id, agent_id, key_id, reason, None)?,
            WriteRequest::RotateKey {
                org_id,
                agent_id,
                old_key_id,
                public_key,
                by_admin,
            } => self.revoke_key(
                org_id,
                agent_id,
                old_key_id,
                "rotated",
                Some((*public_key, *by_admin)),
            )?,
            WriteRequest::Erase {
                org_id,
                trace_id,
                reason,
                actor,
            } => match records::erasure_refusal(reason, &self.engine.limits) {
                Some(refusal) => Err(refusal),
                None => self
                    .erase_step(org_id, trace_id, reason, actor)?
                    .map(|(step, trace)| Written::Erased {
                        seqs: step.into_iter().collect(),
                        trace_seqs: trace.into_iter().collect(),
                    }),
            },
            WriteRequest::Retention { org_id, older_than } => {
                let (seqs, trace_seqs) = self.retention(org_id, *older_than)?;
                Ok(Written::Erased { seqs, trace_seqs })
            }
            WriteRequest::Checkpoint { org_id } => match self.org(org_id)? {
                None => Err(Refusal::UnknownSession {
                    session_id: format!("(org {org_id} has no log)"),
                }),
                Some(mut org) => {
                    let stored =
                        if org.frontier.size() > org.checkpoint_size || org.checkpoint_size == 0 {
                            let cp = self.engine.checkpoint(self.tx, org_id, &mut org)?;
                            self.overlay.orgs.insert(org_id.clone(), org);
                            cp
                        } else {
                            self.tx
                                .latest_checkpoint(org.id, org_id)?
                                .ok_or_else(|| StoreError::Corrupt("checkpoint vanished".into()))?
                        };
                    Ok(Written::Checkpoint(stored))
                }
            },
        })
    }
}
