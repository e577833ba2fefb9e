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
    AgentSignature, Field, Opening, Openings, StepRecord, agent_key_id, chain_hash,
    digest_of_commitments, genesis_hash, recommit_field, session_leaf_data, verify_agent_signature,
};
use cairn_core::ed25519_dalek::VerifyingKey;
use cairn_core::log::{
    ErasureRecord, KeyRegistration, LogEntry, LogRecord, OpRecord, SealRecord, log_origin,
    org_checkpoint,
};
use cairn_core::merkle::{Frontier, leaf_hash};
use cairn_core::record::{Limits, Links, Profile, SessionHeader, Status, Step, validate_id};
use cairn_core::{Hash, Timestamp};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// Merkle subtrees are stored at levels that are multiples of this, so a
/// proof reads at most 16 stored hashes per subtree it needs.
pub(crate) const NODE_STRIDE: u32 = 4;

/// An org's sequencing state: the next seq is the frontier's size.
#[derive(Debug, Clone)]
pub(crate) struct OrgState {
    pub id: i64,
    /// Imported from another server: read-only, signed by that server.
    pub foreign: bool,
    pub frontier: Frontier,
    pub checkpoint_size: u64,
    /// When the latest checkpoint was signed (None: long enough ago).
    pub checkpoint_at: Option<Timestamp>,
}

/// A session's sequencing state.
#[derive(Debug, Clone)]
pub(crate) struct SessionState {
    pub sid: i64,
    pub agent_id: String,
    pub profile: Profile,
    pub next_index: u64,
    pub head: Hash,
    pub sealed: bool,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// Kind of the last step (a strict session's seal needs a reflection).
    pub last_kind: Option<cairn_core::kind::StepKind>,
}

impl SessionState {
    /// The state of a session that has just been opened, before its first
    /// step.
    fn opened(sid: i64, header: &SessionHeader, genesis: Hash) -> SessionState {
        SessionState {
            sid,
            agent_id: header.agent_id.clone(),
            profile: header.profile,
            next_index: 0,
            head: genesis,
            sealed: false,
            first_seq: None,
            last_seq: None,
            last_kind: None,
        }
    }
}

/// A session as both backends read it back: its row, its recorded head
/// (`session_heads`) and the step that head names.
pub(crate) struct StoredSession {
    pub session_id: String,
    pub sid: i64,
    pub agent_id: String,
    pub profile: String,
    pub genesis: Vec<u8>,
    pub sealed: bool,
    pub first_seq: Option<i64>,
    pub last_seq: Option<i64>,
    pub last_index: Option<i64>,
    /// The named step's chain hash, session, index and kind.
    pub last_hash: Option<Vec<u8>>,
    pub head_sid: Option<i64>,
    pub head_index: Option<i64>,
    pub last_kind: Option<String>,
}

impl StoredSession {
    /// The sequencing state, refusing a recorded head that does not name
    /// the session's last step (the head is derived and mutable; the
    /// step's hash is what the chain continues from).
    pub fn into_state(self) -> Result<SessionState, StoreError> {
        let StoredSession {
            session_id, sid, ..
        } = &self;
        if self.last_seq.is_some()
            && (self.head_sid != Some(*sid) || self.head_index != self.last_index)
        {
            return Err(StoreError::Corrupt(format!(
                "the recorded head of session {session_id} is not its step; run `cairn verify`"
            )));
        }
        let unsigned = |v: i64| {
            u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("negative position {v}")))
        };
        Ok(SessionState {
            sid: self.sid,
            profile: Profile::parse(&self.profile)
                .ok_or_else(|| StoreError::Corrupt(format!("unknown profile {}", self.profile)))?,
            next_index: self
                .last_index
                .map(unsigned)
                .transpose()?
                .map_or(0, |i| i + 1),
            head: blob_hash(self.last_hash.unwrap_or(self.genesis))?,
            sealed: self.sealed,
            first_seq: self.first_seq.map(unsigned).transpose()?,
            last_seq: self.last_seq.map(unsigned).transpose()?,
            last_kind: self
                .last_kind
                .as_deref()
                .and_then(cairn_core::kind::StepKind::parse),
            agent_id: self.agent_id,
        })
    }
}

/// A registered agent key.
#[derive(Debug, Clone)]
pub(crate) struct AgentKey {
    pub agent_id: String,
    pub key: VerifyingKey,
    pub seq: u64,
}

/// Changes a batch makes to the sequencing state, applied to a backend's
/// caches only after its transaction commits.
#[derive(Default, Clone)]
pub(crate) struct Overlay {
    pub orgs: HashMap<String, OrgState>,
    pub sessions: HashMap<(i64, String), SessionState>,
    pub keys: HashMap<(i64, String), AgentKey>,
    /// Sessions that got steps in this batch (their heads are written).
    touched: HashSet<i64>,
}

/// Everything one step row holds.
pub(crate) struct StepRow<'a> {
    pub org: i64,
    pub seq: u64,
    pub sid: i64,
    pub step: &'a Step,
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
    /// Writes a step's embedding vector.
    fn insert_embedding(&mut self, org: i64, seq: u64, vector: &[u8]) -> Result<(), StoreError>;
    /// Writes an operational record's row (indexed by [`op_record_id`]).
    fn insert_op(
        &mut self,
        org: i64,
        seq: u64,
        op: &OpRecord,
        hash: &Hash,
        leaf: &Hash,
    ) -> Result<(), StoreError>;
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
    /// Records that a session was sealed by the record at `seq`.
    fn insert_seal(&mut self, sid: i64, seq: u64) -> Result<(), StoreError>;
    /// `(step_index, chain hash, previous step's seq)` of the step at `seq`
    /// (written by this batch or before).
    fn chain_link(&mut self, org: i64, seq: u64) -> Result<(u64, Hash, Option<u64>), StoreError>;
    /// A step by trace id (written by this batch or before).
    fn step_by_trace(&mut self, org: i64, trace_id: &str)
    -> Result<Option<StoredStep>, StoreError>;
    /// Nulls the payload of the step at `seq`, records the commitments of
    /// its hidden fields and drops its embedding.
    fn erase(&mut self, org: i64, seq: u64, hidden: &str) -> Result<(), StoreError>;
    /// Sessions of `org` whose last step is older than `older_than`.
    fn expired_sessions(&mut self, org: i64, older_than: Timestamp)
    -> Result<Vec<i64>, StoreError>;
    /// Trace ids of a session's steps not erased yet, in index order.
    fn unerased_steps(&mut self, org: i64, sid: i64) -> Result<Vec<String>, StoreError>;
    /// Stores a signed checkpoint.
    fn insert_checkpoint(&mut self, org: i64, cp: &StoredCheckpoint) -> Result<(), StoreError>;
    /// The latest stored checkpoint of an org.
    fn latest_checkpoint(
        &mut self,
        org: i64,
        name: &str,
    ) -> Result<Option<StoredCheckpoint>, StoreError>;
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
}

/// The org a request writes to.
pub(crate) fn request_org(request: &WriteRequest) -> &str {
    match request {
        WriteRequest::Step(s) => &s.org_id,
        WriteRequest::Steps(steps) => steps.first().map_or("", |s| s.org_id.as_str()),
        WriteRequest::Prepared(p) => &p.step.org_id,
        WriteRequest::StartSession(s) => &s.org_id,
        WriteRequest::Seal { org_id, .. }
        | WriteRequest::Review { org_id, .. }
        | WriteRequest::AuditEvent { org_id, .. }
        | WriteRequest::ImportTrace { org_id, .. }
        | WriteRequest::RegisterKey { org_id, .. }
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
        let note = org_checkpoint(self.key.signer.name(), name, size, root)
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

    /// Writes a verified complete-log bundle's entries as the log of a new
    /// org (see `LedgerStore::import_log`); the caller checked the org does
    /// not exist and commits `tx`.
    pub fn import<T: WriteTx + ?Sized>(
        &self,
        tx: &mut T,
        org_id: &str,
        header: &cairn_core::bundle::BundleHeader,
        checkpoint_note: &str,
        entries: &mut dyn Iterator<Item = Result<LogEntry, String>>,
    ) -> Result<u64, ImportError> {
        if !header.complete_log {
            return Err(ImportError::Refused(
                "only a bundle of a whole org log (exported with --all) can be imported; a partial bundle can be verified with `cairn verify --bundle`".into(),
            ));
        }
        validate_id("org_id", org_id).map_err(|e| ImportError::Refused(e.to_string()))?;
        if org_id != header.org_id {
            return Err(ImportError::Refused(format!(
                "the bundle's log is signed for org {}, so it is imported under that id",
                header.org_id
            )));
        }
        if tx.org(org_id)?.is_some() {
            return Err(ImportError::Refused(format!(
                "org {org_id} already exists in this store"
            )));
        }
        let same_key = header.server_key == self.key.verifier.to_string()
            && header.server_name == self.key.signer.name();
        let mut org = OrgState {
            id: tx.create_org(org_id)?,
            foreign: !same_key,
            frontier: Frontier::new(),
            checkpoint_size: 0,
            checkpoint_at: None,
        };
        if !same_key {
            tx.insert_origin(org.id, &header.server_name, &header.server_key)?;
        }
        let mut sids: HashMap<String, i64> = HashMap::new();
        // Per session: (first seq, last seq, last index).
        let mut heads: HashMap<i64, (u64, u64, u64)> = HashMap::new();
        let mut count = 0u64;
        for (index, entry) in entries.enumerate() {
            let bad = |reason: String| ImportError::BadEntry {
                index: index as u64,
                reason,
            };
            let entry = entry.map_err(bad)?;
            if entry.seq != org.frontier.size() {
                return Err(bad(format!(
                    "seq {} where {} was expected",
                    entry.seq,
                    org.frontier.size()
                )));
            }
            let leaf = entry.leaf_hash();
            match &entry.record {
                LogRecord::Op { record, .. } => {
                    // The bundle verified, and its seq is the next one, so
                    // writing the record as the sequencer would is exact.
                    write_op(tx, &mut org, record)?;
                    match record {
                        OpRecord::SessionStart(h) => {
                            let sid = tx.insert_session(org.id, h, &genesis_hash(h), entry.seq)?;
                            sids.insert(h.session_id.clone(), sid);
                        }
                        OpRecord::Seal(seal) => {
                            let sid = *sids.get(&seal.session_id).ok_or_else(|| {
                                bad(format!("seal of unknown session {}", seal.session_id))
                            })?;
                            tx.insert_seal(sid, entry.seq)?;
                        }
                        _ => {}
                    }
                }
                LogRecord::Step(r) => {
                    let s = &r.step;
                    let sid = *sids
                        .get(&s.session_id)
                        .ok_or_else(|| bad(format!("step of unknown session {}", s.session_id)))?;
                    let mut salts = vec![0u8; 16 * cairn_core::commit::FIELD_COUNT];
                    for field in cairn_core::commit::FIELDS {
                        if let Opening::Revealed(salt) = r.openings.get(field) {
                            salts[16 * field.position()..16 * field.position() + 16]
                                .copy_from_slice(salt);
                        }
                    }
                    let prev_seq = heads.get(&sid).map(|h| h.1);
                    let head = heads
                        .entry(sid)
                        .or_insert((entry.seq, entry.seq, s.step_index));
                    head.1 = entry.seq;
                    head.2 = s.step_index;
                    tx.insert_step(&StepRow {
                        org: org.id,
                        seq: entry.seq,
                        sid,
                        step: s,
                        hash: &r.hash,
                        leaf: &leaf,
                        digest: &r.digest,
                        prev_hash: &r.prev_hash,
                        seed: None,
                        salts: Some(salts),
                        signature: r.signature.as_ref().map(|sig| &sig.signature),
                        has_embedding: r.has_embedding,
                        erased: r.erased,
                        hidden: hidden_json(&r.openings),
                        prev_seq,
                    })?;
                    // Vectors are derived: recompute them for embedded steps.
                    if r.has_embedding
                        && let Some(content) = &s.content
                    {
                        let vector = crate::embed::to_bytes(&crate::embed::embed(content));
                        tx.insert_embedding(org.id, entry.seq, &vector)?;
                    }
                    push_leaf(tx, &mut org, leaf)?;
                }
            }
            count += 1;
        }
        let text = cairn_core::note::Note::parse(checkpoint_note)
            .map_err(|e| ImportError::Refused(format!("checkpoint: {e}")))?
            .text;
        let cp = cairn_core::checkpoint::Checkpoint::parse(&text)
            .map_err(|e| ImportError::Refused(format!("checkpoint: {e}")))?;
        if cp.size != org.frontier.size() || cp.root != org.frontier.root() {
            return Err(ImportError::Refused(
                "the entries do not match the bundle's checkpoint".into(),
            ));
        }
        tx.insert_checkpoint(
            org.id,
            &StoredCheckpoint {
                org_id: org_id.to_owned(),
                size: cp.size,
                root: cp.root,
                note: checkpoint_note.to_owned(),
                created_at: now(),
            },
        )?;
        for (sid, (first, last, index)) in heads {
            tx.put_session_head(sid, first, last, index)?;
        }
        Ok(count)
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
    (!hidden.is_empty()).then(|| serde_json::Value::Object(hidden).to_string())
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

/// Writes an operational record at the org's next seq.
fn write_op<T: WriteTx + ?Sized>(
    tx: &mut T,
    org: &mut OrgState,
    op: &OpRecord,
) -> Result<u64, StoreError> {
    let seq = org.frontier.size();
    let hash = op.hash();
    let leaf = leaf_hash(&cairn_core::log::log_leaf_data(seq, op.entry_type(), &hash));
    tx.insert_op(org.id, seq, op, &hash, &leaf)?;
    push_leaf(tx, org, leaf)?;
    Ok(seq)
}

/// One batch in progress.
struct BatchRun<'e, 'k, 't, T: WriteTx + ?Sized> {
    engine: &'e Engine<'k>,
    tx: &'t mut T,
    overlay: Overlay,
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
            } => self.register_key(org_id, agent_id, *public_key)?,
            WriteRequest::Erase {
                org_id,
                trace_id,
                reason,
                actor,
            } => self
                .erase_step(org_id, trace_id, reason, actor)?
                .map(|seq| Written::Erased { seqs: vec![seq] }),
            WriteRequest::Retention { org_id, older_than } => Ok(Written::Erased {
                seqs: self.retention(org_id, *older_than)?,
            }),
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

    /// Opens an explicitly requested session.
    fn start_session(&mut self, req: &NewSession) -> Outcome<(u64, Hash)> {
        let header = SessionHeader {
            org_id: req.org_id.clone(),
            session_id: req.session_id.clone(),
            agent_id: req.agent_id.clone(),
            started_at: now(),
            caller: req.caller.clone(),
            profile: req.profile,
            predecessor: req.predecessor,
            full_consent: req.full_consent,
        };
        if let Err(e) = header.validate() {
            return Ok(Err(e.into()));
        }
        let org_id = self.org(&req.org_id)?.map(|org| org.id);
        if let Some(org) = org_id
            && self.session(org, &req.session_id)?.is_some()
        {
            return Ok(Err(Refusal::SessionExists {
                session_id: req.session_id.clone(),
            }));
        }
        let mut header = header;
        match self.resolve_predecessor(org_id, req)? {
            Ok(predecessor) => header.predecessor = predecessor,
            Err(refusal) => return Ok(Err(refusal)),
        }
        let genesis = genesis_hash(&header);
        let (seq, _) = self.open_session(&header, genesis)?;
        Ok(Ok((seq, genesis)))
    }

    /// The predecessor hash of a new session: the final hash of the sealed
    /// session it names, checked against the hash it gives, or the hash it
    /// gives, checked to end a sealed session of the org.
    fn resolve_predecessor(&mut self, org: Option<i64>, req: &NewSession) -> Outcome<Option<Hash>> {
        let resolved = self.predecessor_hash(org, req)?;
        if let (Ok(Some(hash)), Some(org)) = (&resolved, org)
            && let Some(other) = self.tx.successor_of(org, hash)?
        {
            return Ok(Err(Refusal::BadPredecessor(format!(
                "session {other} already continues the session ending in {hash}"
            ))));
        }
        Ok(resolved)
    }

    fn predecessor_hash(&mut self, org: Option<i64>, req: &NewSession) -> Outcome<Option<Hash>> {
        let bad = |m: String| Ok(Err(Refusal::BadPredecessor(m)));
        match (&req.predecessor_session, req.predecessor) {
            (None, None) => Ok(Ok(None)),
            (Some(id), given) => {
                let found = match org {
                    Some(org) => self.session(org, id)?,
                    None => None,
                };
                let Some(predecessor) = found else {
                    return bad(format!("session {id} does not exist in org {}", req.org_id));
                };
                if !predecessor.sealed {
                    return bad(format!(
                        "session {id} is not closed: seal it (audit_session_end) before continuing it"
                    ));
                }
                if let Some(hash) = given
                    && hash != predecessor.head
                {
                    return bad(format!(
                        "session {id} ends with {}, not {hash}",
                        predecessor.head
                    ));
                }
                Ok(Ok(Some(predecessor.head)))
            }
            (None, Some(hash)) => {
                let found = match org {
                    Some(org) => self.tx.session_sealed_with(org, &hash)?,
                    None => None,
                };
                match found {
                    Some(_) => Ok(Ok(Some(hash))),
                    None => bad(format!(
                        "no sealed session of org {} ends with {hash}",
                        req.org_id
                    )),
                }
            }
        }
    }

    /// Writes a session's start record and lookup row (the caller checked
    /// it does not exist), creating the org on first use.
    fn open_session(
        &mut self,
        header: &SessionHeader,
        genesis: Hash,
    ) -> Result<(u64, SessionState), StoreError> {
        let mut org = self.org_or_create(&header.org_id)?;
        let seq = write_op(self.tx, &mut org, &OpRecord::SessionStart(header.clone()))?;
        let sid = self.tx.insert_session(org.id, header, &genesis, seq)?;
        let state = SessionState::opened(sid, header, genesis);
        self.overlay
            .sessions
            .insert((org.id, header.session_id.clone()), state.clone());
        self.overlay.orgs.insert(header.org_id.clone(), org);
        Ok((seq, state))
    }

    fn append_step(&mut self, prepared: &PreparedStep) -> Outcome<Written> {
        let mut step = prepared.step.clone();
        let trace_id = step.trace_id.clone();
        let org_id = self.org(&step.org_id)?.map(|org| org.id);
        // Generated ids (UUIDv7) are unique; a writer-chosen one is checked
        // before anything is written, so a refusal leaves nothing behind.
        if prepared.trace_id_given
            && let Some(org) = org_id
            && self.tx.trace_id_taken(org, &trace_id)?
        {
            return Ok(Err(Refusal::DuplicateTraceId { trace_id }));
        }
        let existing = match org_id {
            Some(org) => self.session(org, &step.session_id)?,
            None => None,
        };
        // A step of an unknown session opens it, but only once every check
        // passed: a refused step writes nothing, not even a session start.
        let (mut session, new_session) = match existing {
            Some(s) => (s, None),
            None => {
                let header = SessionHeader {
                    org_id: step.org_id.clone(),
                    session_id: step.session_id.clone(),
                    agent_id: step.agent_id.clone(),
                    started_at: step.created_at,
                    caller: if prepared.caller.is_empty() {
                        "unknown".into()
                    } else {
                        prepared.caller.clone()
                    },
                    profile: Profile::Standard,
                    predecessor: None,
                    full_consent: false,
                };
                if let Err(e) = header.validate() {
                    return Ok(Err(e.into()));
                }
                // Not written yet: checked as if opened, opened below.
                let state = SessionState::opened(0, &header, genesis_hash(&header));
                (state, Some(header))
            }
        };
        if session.sealed {
            return Ok(Err(Refusal::Sealed {
                session_id: step.session_id.clone(),
            }));
        }
        if session.agent_id != step.agent_id {
            return Ok(Err(Refusal::AgentMismatch {
                session_id: step.session_id.clone(),
                session_agent: session.agent_id.clone(),
                step_agent: step.agent_id.clone(),
            }));
        }
        if let Err(e) = session.profile.check(step.kind) {
            return Ok(Err(e.into()));
        }
        if let Some(given) = prepared.expected_index
            && given != session.next_index
        {
            return Ok(Err(Refusal::IndexConflict {
                expected: session.next_index,
                given,
            }));
        }
        let mut commitments = prepared.commitments;
        if step.step_index != session.next_index {
            step.step_index = session.next_index;
            recommit_field(
                &mut commitments,
                &step,
                &prepared.openings,
                Field::StepIndex,
            );
        }
        let digest = digest_of_commitments(&commitments);
        if let Some(sig) = &prepared.signature
            && let Err(refusal) = self.check_signature(org_id, &step, &digest, sig)?
        {
            return Ok(Err(refusal));
        }
        if let Err(refusal) = self.check_links(org_id, &step.links)? {
            return Ok(Err(refusal));
        }
        if let Some(header) = &new_session {
            session = self.open_session(header, session.head)?.1;
        }
        let mut org = self
            .org(&step.org_id)?
            .ok_or_else(|| StoreError::Corrupt("org vanished inside a batch".into()))?;
        let created_at = step.created_at;
        let hash = chain_hash(&session.head, &digest, step.step_index, created_at);
        let seq = org.frontier.size();
        let leaf = leaf_hash(&cairn_core::log::log_leaf_data(seq, "step", &hash));
        self.tx.insert_step(&StepRow {
            org: org.id,
            seq,
            sid: session.sid,
            step: &step,
            hash: &hash,
            leaf: &leaf,
            digest: &digest,
            prev_hash: &session.head,
            seed: Some(&prepared.seed),
            salts: None,
            signature: prepared.signature.as_ref().map(|sig| &sig.signature),
            has_embedding: prepared.embedding.is_some(),
            erased: false,
            hidden: None,
            prev_seq: session.last_seq,
        })?;
        if let Some(vector) = &prepared.embedding {
            self.tx.insert_embedding(org.id, seq, vector)?;
        }
        push_leaf(self.tx, &mut org, leaf)?;
        session.first_seq.get_or_insert(seq);
        session.last_seq = Some(seq);
        session.next_index += 1;
        session.head = hash;
        session.last_kind = Some(step.kind);
        self.overlay.touched.insert(session.sid);
        self.overlay
            .sessions
            .insert((org.id, step.session_id.clone()), session);
        self.overlay.orgs.insert(step.org_id.clone(), org);
        Ok(Ok(Written::Step {
            seq,
            trace_id,
            step_index: step.step_index,
            hash,
            created_at,
            session_created: new_session.is_some(),
        }))
    }

    /// Appends `steps` all or none: each is prepared, then all are appended
    /// in a trial over a [`crate::dry_run::DryRun`] of the transaction (reads
    /// go through, writes are only remembered) with a copy of the overlay;
    /// only if none is refused are they appended for real, where the same
    /// checks on the same state cannot refuse them.
    fn append_steps(&mut self, steps: &[crate::NewStep]) -> Outcome<Written> {
        let count = steps.len();
        let many = |index: usize, refusal: Refusal| Refusal::StepOfMany {
            index,
            count,
            refusal: Box::new(refusal),
        };
        let Some(first) = steps.first() else {
            return Ok(Err(Refusal::InvalidRequest("no steps to write".into())));
        };
        if let Some(index) = steps.iter().position(|s| s.org_id != first.org_id) {
            return Ok(Err(many(
                index,
                Refusal::InvalidRequest("the steps of one write belong to one org".into()),
            )));
        }
        let mut prepared = Vec::with_capacity(count);
        for (index, step) in steps.iter().enumerate() {
            match prepare_step(
                step.clone(),
                &self.engine.limits,
                self.engine.embedding_sample_rate,
            ) {
                Ok(p) => prepared.push(p),
                Err(refusal) => return Ok(Err(many(index, refusal))),
            }
        }
        {
            let mut dry = crate::dry_run::DryRun::new(&mut *self.tx);
            let mut trial = BatchRun {
                engine: self.engine,
                tx: &mut dry,
                overlay: self.overlay.clone(),
            };
            for (index, p) in prepared.iter().enumerate() {
                if let Err(refusal) = trial.append_step(p)? {
                    return Ok(Err(many(index, refusal)));
                }
            }
        }
        let mut written = Vec::with_capacity(count);
        for (index, p) in prepared.iter().enumerate() {
            match self.append_step(p)? {
                Ok(w) => written.push(w),
                // The batch's transaction is rolled back: nothing of it is
                // written.
                Err(refusal) => {
                    return Err(StoreError::Corrupt(format!(
                        "step {index} of an all-or-nothing write passed its trial, then was refused: {refusal}"
                    )));
                }
            }
        }
        Ok(Ok(Written::Steps(written)))
    }

    /// Links to Cairn's own records must name one: `corrects` and `parent`
    /// a step, `audit_event` an audit event, of this org. (Tool calls,
    /// policy decisions and approval requests are other systems' ids.)
    fn check_links(&mut self, org: Option<i64>, links: &Links) -> Outcome<()> {
        for (link, id, wanted, expected) in [
            ("corrects", &links.corrects, "step", "a step"),
            ("parent", &links.parent, "step", "a step"),
            (
                "audit_event",
                &links.audit_event,
                "audit-event",
                "an audit event",
            ),
        ] {
            let Some(id) = id else { continue };
            let found = match org {
                Some(org) => self.tx.record_type(org, id)?,
                None => None,
            };
            if found.as_deref() != Some(wanted) {
                return Ok(Err(Refusal::UnknownLink {
                    link: link.to_owned(),
                    id: id.clone(),
                    expected: expected.to_owned(),
                }));
            }
        }
        Ok(Ok(()))
    }

    /// Records a reviewer's decision on a flagged step.
    fn review(
        &mut self,
        org_name: &str,
        trace_id: &str,
        decision: cairn_core::log::ReviewDecision,
        reviewer: &str,
        note: Option<&str>,
    ) -> Outcome<Written> {
        if reviewer.trim().is_empty() {
            return Ok(Err(Refusal::InvalidRequest(
                "a review needs a reviewer".into(),
            )));
        }
        if note.is_some_and(|n| n.len() > self.engine.limits.max_content_bytes) {
            return Ok(Err(Refusal::InvalidRequest(format!(
                "the review note is longer than {} bytes",
                self.engine.limits.max_content_bytes
            ))));
        }
        let unknown = || {
            Ok(Err(Refusal::UnknownStep {
                trace_id: trace_id.to_owned(),
            }))
        };
        let Some(mut org) = self.org(org_name)? else {
            return unknown();
        };
        let Some(step) = self.tx.step_by_trace(org.id, trace_id)? else {
            return unknown();
        };
        if step.record.step.status != cairn_core::record::Status::Flagged {
            return Ok(Err(Refusal::NotFlagged {
                trace_id: trace_id.to_owned(),
            }));
        }
        let review = cairn_core::log::ReviewRecord {
            org_id: org_name.to_owned(),
            trace_id: trace_id.to_owned(),
            session_id: step.record.step.session_id.clone(),
            step_index: step.record.step.step_index,
            decision,
            reviewer: reviewer.to_owned(),
            note: note.map(str::to_owned),
            reviewed_at: now(),
        };
        let seq = write_op(self.tx, &mut org, &OpRecord::Review(review.clone()))?;
        self.overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok(Written::Reviewed { seq, review }))
    }

    /// Imports a seed-004 trace: checked whole before anything is written,
    /// then a session, the `signed-trace` record and one step per
    /// component, in this batch.
    fn import_trace(
        &mut self,
        org_name: &str,
        session_id: Option<&str>,
        value: &serde_json::Value,
        caller: &str,
    ) -> Outcome<Written> {
        let invalid = |m: String| Ok(Err(Refusal::InvalidRequest(m)));
        let size = cairn_core::jcs::to_vec(value).len();
        let most = self.engine.limits.max_content_bytes.saturating_mul(16);
        if size > most {
            return invalid(format!("the trace is {size} bytes; at most {most}"));
        }
        let trace = match cairn_core::trace::CompleteTrace::parse(value) {
            Ok(trace) => trace,
            Err(e) => return invalid(e.to_string()),
        };
        let session_id = session_id.unwrap_or(&trace.trace_id).to_owned();
        let org_id = self.org(org_name)?.map(|org| org.id);
        let key =
            match self.registered_key(org_id, &trace.signature_key_id, &trace.agent_id_hash)? {
                Ok(key) => key,
                Err(refusal) => return Ok(Err(refusal)),
            };
        if !trace.verify(&key.key) {
            return Ok(Err(Refusal::BadSignature(
                "the trace's signature does not verify over its components and trace level".into(),
            )));
        }
        if let Some(org) = org_id {
            if self.session(org, &session_id)?.is_some() {
                return Ok(Err(Refusal::SessionExists { session_id }));
            }
            if self.tx.record_type(org, &trace.trace_id)?.is_some() {
                return Ok(Err(Refusal::DuplicateId {
                    id: trace.trace_id.clone(),
                }));
            }
        }
        // Every component is checked as a step before anything is written.
        let mut prepared = Vec::with_capacity(trace.components.len());
        for (i, component) in trace.components.iter().enumerate() {
            let data = &component.data;
            let number = |key: &str| data.get(key).and_then(serde_json::Value::as_u64);
            let step = crate::NewStep {
                org_id: org_name.to_owned(),
                session_id: session_id.clone(),
                agent_id: trace.agent_id_hash.clone(),
                kind_label: component.event_type.clone(),
                output: Some(data.clone()),
                metadata: Some(serde_json::json!({
                    "component_type": component.component_type,
                    "event_type": component.event_type,
                    "trace_id": trace.trace_id,
                    "trace_level": trace.level_name,
                })),
                confidence: data
                    .get("selection_confidence")
                    .and_then(serde_json::Value::as_f64),
                duration_ms: number("execution_time_ms"),
                token_count: number("tokens_total")
                    .or_else(|| Some(number("tokens_input")? + number("tokens_output")?)),
                turn_id: trace.thought_id.clone(),
                turn_step: Some(i as u64),
                task_id: trace.task_id.clone(),
                trace_id: Some(format!("{}.{i}", trace.trace_id)),
                created_at: Some(component.timestamp),
                step_index: Some(i as u64),
                caller: caller.to_owned(),
                ..crate::NewStep::default()
            };
            match prepare_step(step, &self.engine.limits, self.engine.embedding_sample_rate) {
                Ok(p) => prepared.push(p),
                Err(refusal) => return Ok(Err(refusal)),
            }
            if let Some(org) = org_id
                && self
                    .tx
                    .record_type(org, &format!("{}.{i}", trace.trace_id))?
                    .is_some()
            {
                return Ok(Err(Refusal::DuplicateId {
                    id: format!("{}.{i}", trace.trace_id),
                }));
            }
        }
        let header = SessionHeader {
            org_id: org_name.to_owned(),
            session_id: session_id.clone(),
            agent_id: trace.agent_id_hash.clone(),
            started_at: trace.started_at,
            caller: caller.to_owned(),
            profile: Profile::Standard,
            predecessor: None,
            // A full trace exists only where its subject consented.
            full_consent: trace.level == cairn_core::detail::DetailLevel::Full,
        };
        if let Err(e) = header.validate() {
            return Ok(Err(e.into()));
        }
        self.open_session(&header, genesis_hash(&header))?;
        let mut org = self
            .org(org_name)?
            .ok_or_else(|| StoreError::Corrupt("org vanished inside a batch".into()))?;
        let record = cairn_core::log::SignedTraceRecord {
            org_id: org_name.to_owned(),
            session_id: session_id.clone(),
            trace,
        };
        let seq = write_op(self.tx, &mut org, &OpRecord::SignedTrace(record))?;
        self.overlay.orgs.insert(org_name.to_owned(), org);
        let mut steps = Vec::with_capacity(prepared.len());
        for p in &prepared {
            match self.append_step(p)? {
                Ok(Written::Step { seq, trace_id, .. }) => steps.push((seq, trace_id)),
                // Checked above: a refusal now would leave half a trace, so
                // it fails the whole batch instead.
                other => {
                    return Err(StoreError::Corrupt(format!(
                        "importing a checked trace: {other:?}"
                    )));
                }
            }
        }
        Ok(Ok(Written::TraceImported {
            seq,
            session_id,
            steps,
        }))
    }

    /// Records an audit event.
    fn audit_event(
        &mut self,
        org_name: &str,
        event_id: Option<&str>,
        session_id: Option<&str>,
        action: &str,
        detail: Option<&serde_json::Value>,
    ) -> Outcome<Written> {
        let event_id = event_id.map_or_else(|| uuid::Uuid::now_v7().to_string(), str::to_owned);
        if let Err(e) =
            validate_id("org_id", org_name).and_then(|()| validate_id("event_id", &event_id))
        {
            return Ok(Err(e.into()));
        }
        if action.trim().is_empty() || action.len() > 256 {
            return Ok(Err(Refusal::InvalidRequest(
                "an audit event needs an action of 1 to 256 bytes".into(),
            )));
        }
        let detail_len = detail.map_or(0, |d| d.to_string().len());
        if detail_len > self.engine.limits.max_content_bytes {
            return Ok(Err(Refusal::InvalidRequest(format!(
                "the event's detail is longer than {} bytes",
                self.engine.limits.max_content_bytes
            ))));
        }
        let org_id = self.org(org_name)?.map(|o| o.id);
        if let Some(session) = session_id {
            let exists = match org_id {
                Some(org) => self.session(org, session)?.is_some(),
                None => false,
            };
            if !exists {
                return Ok(Err(Refusal::UnknownSession {
                    session_id: session.to_owned(),
                }));
            }
        }
        if let Some(org) = org_id
            && self.tx.record_type(org, &event_id)?.is_some()
        {
            return Ok(Err(Refusal::DuplicateId { id: event_id }));
        }
        let mut org = self.org_or_create(org_name)?;
        let event = cairn_core::log::AuditEvent {
            org_id: org_name.to_owned(),
            event_id: event_id.clone(),
            session_id: session_id.map(str::to_owned),
            action: action.to_owned(),
            detail: detail.cloned(),
            at: now(),
        };
        let seq = write_op(self.tx, &mut org, &OpRecord::AuditEvent(event))?;
        self.overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok(Written::AuditEvent { seq, event_id }))
    }

    /// The key `key_id` registered in `org` for `agent`, or why not.
    fn registered_key(&mut self, org: Option<i64>, key_id: &str, agent: &str) -> Outcome<AgentKey> {
        let key = match org {
            Some(org) => self.agent_key(org, key_id)?,
            None => None,
        };
        Ok(match key {
            None => Err(Refusal::BadSignature(format!(
                "key {key_id} is not registered"
            ))),
            Some(key) if key.agent_id != agent => Err(Refusal::BadSignature(format!(
                "key {key_id} is registered for agent {}, not {agent}",
                key.agent_id
            ))),
            Some(key) => Ok(key),
        })
    }

    fn check_signature(
        &mut self,
        org: Option<i64>,
        step: &Step,
        digest: &Hash,
        sig: &AgentSignature,
    ) -> Outcome<()> {
        let key = match self.registered_key(org, &sig.key_id, &step.agent_id)? {
            Ok(key) => key,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if !verify_agent_signature(&key.key, digest, &sig.signature) {
            return Ok(Err(Refusal::BadSignature(
                "the signature does not verify over the step's digest".into(),
            )));
        }
        Ok(Ok(()))
    }

    fn seal(
        &mut self,
        org_name: &str,
        session_id: &str,
        require_reflection: bool,
    ) -> Outcome<Written> {
        let unknown = || {
            Ok(Err(Refusal::UnknownSession {
                session_id: session_id.to_owned(),
            }))
        };
        let Some(mut org) = self.org(org_name)? else {
            return unknown();
        };
        let Some(mut session) = self.session(org.id, session_id)? else {
            return unknown();
        };
        if session.sealed {
            return Ok(Err(Refusal::Sealed {
                session_id: session_id.to_owned(),
            }));
        }
        if session.next_index == 0 {
            return Ok(Err(Refusal::NothingToSeal {
                session_id: session_id.to_owned(),
            }));
        }
        if (require_reflection || session.profile == Profile::Strict)
            && session.last_kind != Some(cairn_core::kind::StepKind::Reflection)
        {
            return Ok(Err(Refusal::ReflectionRequired {
                session_id: session_id.to_owned(),
            }));
        }
        // Walk back from the session's last step (which may be in this
        // batch) along the prev_seq links.
        let mut hashes: Vec<(u64, Hash)> = Vec::with_capacity(session.next_index as usize);
        let mut next = session.last_seq;
        while let Some(seq) = next {
            if hashes.len() as u64 >= session.next_index {
                break;
            }
            let (index, hash, prev) = self.tx.chain_link(org.id, seq)?;
            hashes.push((index, hash));
            next = prev;
        }
        let mut tree = Frontier::new();
        for (index, hash) in hashes.iter().rev() {
            tree.push(leaf_hash(&session_leaf_data(*index, hash)));
        }
        let origin = log_origin(self.engine.key.signer.name(), org_name);
        let seal = SealRecord {
            org_id: org_name.to_owned(),
            session_id: session_id.to_owned(),
            step_count: session.next_index,
            session_root: tree.root(),
            final_hash: session.head,
            sealed_at: now(),
            note: String::new(),
        }
        .sign(&self.engine.key.signer, &origin)
        .map_err(|e| StoreError::Key(e.to_string()))?;
        let seq = write_op(self.tx, &mut org, &OpRecord::Seal(seal.clone()))?;
        self.tx.insert_seal(session.sid, seq)?;
        session.sealed = true;
        self.overlay
            .sessions
            .insert((org.id, session_id.to_owned()), session);
        self.overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok(Written::Sealed { seq, seal }))
    }

    /// Erases one step's payload, in the shape the database allows, and
    /// records the erasure.
    fn erase_step(
        &mut self,
        org_name: &str,
        trace_id: &str,
        reason: &str,
        actor: &str,
    ) -> Outcome<u64> {
        let unknown = || Refusal::UnknownStep {
            trace_id: trace_id.to_owned(),
        };
        let Some(mut org) = self.org(org_name)? else {
            return Ok(Err(unknown()));
        };
        let Some(stored) = self.tx.step_by_trace(org.id, trace_id)? else {
            return Ok(Err(unknown()));
        };
        if stored.record.erased {
            return Ok(Err(Refusal::AlreadyErased {
                trace_id: trace_id.to_owned(),
            }));
        }
        let mut record: StepRecord = stored.record;
        let mut commitments = Vec::new();
        for field in cairn_core::commit::FIELDS
            .into_iter()
            .filter(|f| f.is_payload())
        {
            record
                .hide(field)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
            if let Opening::Hidden(c) = record.openings.get(field) {
                commitments.push((field, *c));
            }
        }
        // Every hidden field, the ones hidden before included.
        let hidden = hidden_json(&record.openings)
            .ok_or_else(|| StoreError::Corrupt("an erased step hides nothing".into()))?;
        self.tx.erase(org.id, stored.seq, &hidden)?;
        let erasure = ErasureRecord {
            org_id: org_name.to_owned(),
            session_id: record.step.session_id.clone(),
            step_index: record.step.step_index,
            trace_id: trace_id.to_owned(),
            commitments,
            reason: reason.to_owned(),
            actor: actor.to_owned(),
            erased_at: now(),
        };
        let seq = write_op(self.tx, &mut org, &OpRecord::Erasure(erasure))?;
        self.overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok(seq))
    }

    /// Erases every step of every session whose last step is older than
    /// `older_than`.
    fn retention(&mut self, org_name: &str, older_than: Timestamp) -> Result<Vec<u64>, StoreError> {
        let Some(org) = self.org(org_name)? else {
            return Ok(Vec::new());
        };
        let mut seqs = Vec::new();
        for sid in self.tx.expired_sessions(org.id, older_than)? {
            for trace in self.tx.unerased_steps(org.id, sid)? {
                if let Ok(seq) = self.erase_step(org_name, &trace, "retention", "retention")? {
                    seqs.push(seq);
                }
            }
        }
        Ok(seqs)
    }

    fn register_key(
        &mut self,
        org_name: &str,
        agent_id: &str,
        public_key: VerifyingKey,
    ) -> Outcome<Written> {
        if let Err(e) =
            validate_id("org_id", org_name).and_then(|()| validate_id("agent_id", agent_id))
        {
            return Ok(Err(e.into()));
        }
        let key_id = agent_key_id(&public_key);
        let mut org = self.org_or_create(org_name)?;
        if let Some(existing) = self.agent_key(org.id, &key_id)?
            && existing.agent_id == agent_id
        {
            self.overlay.orgs.insert(org_name.to_owned(), org);
            return Ok(Ok(Written::KeyRegistered {
                seq: existing.seq,
                key_id,
            }));
        }
        let reg = KeyRegistration {
            org_id: org_name.to_owned(),
            agent_id: agent_id.to_owned(),
            key_id: key_id.clone(),
            public_key,
            registered_at: now(),
        };
        let seq = write_op(self.tx, &mut org, &OpRecord::KeyRegistration(reg))?;
        self.overlay.keys.insert(
            (org.id, key_id.clone()),
            AgentKey {
                agent_id: agent_id.to_owned(),
                key: public_key,
                seq,
            },
        );
        self.overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok(Written::KeyRegistered { seq, key_id }))
    }
}

/// The agent keys recorded by an org's key-registration records, given as
/// `(seq, view)` in log order.
pub(crate) fn agent_keys_from_views(
    views: impl IntoIterator<Item = (u64, String)>,
) -> Result<Vec<(u64, KeyRegistration)>, StoreError> {
    let mut out = Vec::new();
    for (seq, view) in views {
        let view: serde_json::Value = serde_json::from_str(&view)
            .map_err(|e| StoreError::Corrupt(format!("key registration {seq}: {e}")))?;
        match OpRecord::from_view("key-registration", &view) {
            Ok(OpRecord::KeyRegistration(reg)) => out.push((seq, reg)),
            _ => {
                return Err(StoreError::Corrupt(format!(
                    "key registration {seq} does not parse"
                )));
            }
        }
    }
    Ok(out)
}

/// The rowid of an entry: `(org << 40) | seq`, so that each org's log is
/// one contiguous, append-only rowid range and needs no second index.
/// (2^40 entries per org, 2^23 orgs.)
pub(crate) fn row_id(org: i64, seq: u64) -> i64 {
    (org << 40) | (seq.min((1 << 40) - 1) as i64)
}

/// Rowid bounds of an org's log, half-open.
pub(crate) fn org_range(org: i64) -> (i64, i64) {
    (org << 40, (org + 1) << 40)
}

/// The 32 columns a step is read from into a [`RawStep`] (`e` entries,
/// `o` orgs, `s` sessions).
pub(crate) const STEP_COLUMNS: &str = "e.seq, e.trace_id, e.agent_id, e.kind, e.kind_label, e.content, e.input_data,
    e.output_data, e.confidence, e.duration_ms, e.token_count, e.model, e.metadata, e.created_at, e.turn_id,
    e.turn_step, e.task_id, e.links, e.status, e.seed, e.digest, e.prev_hash, e.record_hash, e.sig_key_id,
    e.signature, e.has_embedding, e.erased, e.hidden, e.step_index, o.name, s.session_id, e.salts";

/// The name and key that sign an org's log: the server's own, or for a
/// mirror the origin server's recorded `(name, vkey)`.
pub(crate) fn signer_of(
    key: &ServerKey,
    origin: Option<(String, String)>,
) -> Result<(String, cairn_core::note::NoteVerifier), StoreError> {
    match origin {
        None => Ok((key.signer.name().to_owned(), key.verifier.clone())),
        Some((name, vkey)) => {
            let verifier = cairn_core::note::NoteVerifier::parse(&vkey)
                .map_err(|e| StoreError::Corrupt(format!("origin key: {e}")))?;
            Ok((name, verifier))
        }
    }
}

/// A stored 32-byte hash.
pub(crate) fn blob_hash(bytes: Vec<u8>) -> Result<Hash, StoreError> {
    let arr: [u8; 32] = bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt("a stored hash is not 32 bytes".into()))?;
    Ok(Hash(arr))
}

/// A JSON column's text.
pub(crate) fn json_text(value: &Option<serde_json::Value>) -> Option<String> {
    value.as_ref().map(serde_json::Value::to_string)
}

/// The links column's text (None when there are no links).
pub(crate) fn links_text(links: &Links) -> Option<String> {
    if links.is_empty() {
        return None;
    }
    let map: serde_json::Map<String, serde_json::Value> = links
        .entries()
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_owned(), serde_json::Value::String(v.to_owned()))))
        .collect();
    Some(serde_json::Value::Object(map).to_string())
}

/// A parsed operational record from its stored type and view.
pub(crate) fn op_from_view(seq: u64, entry_type: &str, view: &str) -> Result<OpRecord, StoreError> {
    let view: serde_json::Value = serde_json::from_str(view)
        .map_err(|e| StoreError::Corrupt(format!("record {seq}: {e}")))?;
    OpRecord::from_view(entry_type, &view)
        .map_err(|e| StoreError::Corrupt(format!("record {seq}: {e}")))
}

/// A step's columns as read from either backend, before parsing.
pub(crate) struct RawStep {
    pub seq: i64,
    pub org_id: String,
    pub session_id: String,
    pub step_index: i64,
    pub trace_id: String,
    pub agent_id: String,
    pub kind: String,
    pub kind_label: String,
    pub content: Option<String>,
    pub input: Option<String>,
    pub output: Option<String>,
    pub confidence: Option<f64>,
    pub duration_ms: Option<i64>,
    pub token_count: Option<i64>,
    pub model: Option<String>,
    pub metadata: Option<String>,
    pub created_at: i64,
    pub turn_id: Option<String>,
    pub turn_step: Option<i64>,
    pub task_id: Option<String>,
    pub links: Option<String>,
    pub status: String,
    pub seed: Option<Vec<u8>>,
    pub salts: Option<Vec<u8>>,
    pub digest: Vec<u8>,
    pub prev_hash: Vec<u8>,
    pub hash: Vec<u8>,
    pub signer_key_id: Option<String>,
    pub signature: Option<Vec<u8>>,
    pub has_embedding: bool,
    pub erased: bool,
    pub hidden: Option<String>,
}

impl RawStep {
    /// Parses the columns into a record; a column that does not parse is
    /// corruption (verification then says which record).
    pub fn parse(self) -> Result<StoredStep, StoreError> {
        let corrupt = |what: &str| StoreError::Corrupt(format!("stored step: {what}"));
        let json = |text: Option<String>| -> Result<Option<serde_json::Value>, StoreError> {
            text.map(|t| {
                serde_json::from_str(&t).map_err(|_| corrupt("a JSON column does not parse"))
            })
            .transpose()
        };
        let to_u64 = |v: Option<i64>| v.map(|v| v as u64);
        let kind =
            cairn_core::kind::StepKind::parse(&self.kind).ok_or_else(|| corrupt("unknown kind"))?;
        let links = match json(self.links)? {
            None => Links::default(),
            Some(v) => Links::from_json(&v).map_err(|e| corrupt(&e))?,
        };
        let step = Step {
            trace_id: self.trace_id,
            org_id: self.org_id,
            agent_id: self.agent_id,
            session_id: self.session_id,
            step_index: self.step_index as u64,
            kind,
            kind_label: self.kind_label,
            content: self.content,
            input: json(self.input)?,
            output: json(self.output)?,
            confidence: self.confidence,
            duration_ms: to_u64(self.duration_ms),
            token_count: to_u64(self.token_count),
            model: self.model,
            metadata: json(self.metadata)?,
            created_at: Timestamp::from_micros(self.created_at)
                .ok_or_else(|| corrupt("timestamp out of range"))?,
            turn_id: self.turn_id,
            turn_step: to_u64(self.turn_step),
            task_id: self.task_id,
            links,
            status: Status::parse(&self.status).ok_or_else(|| corrupt("unknown status"))?,
            signer_key_id: self.signer_key_id.clone(),
        };
        let mut openings = match self.seed {
            Some(seed) => {
                let seed: [u8; 32] = seed
                    .try_into()
                    .map_err(|_| corrupt("seed is not 32 bytes"))?;
                Openings::from_seed(&seed)
            }
            None => {
                // Imported from a bundle: the salts themselves, no seed.
                let salts = self
                    .salts
                    .ok_or_else(|| corrupt("neither seed nor salts"))?;
                if salts.len() != 16 * cairn_core::commit::FIELD_COUNT {
                    return Err(corrupt("salts are not 16 bytes per field"));
                }
                Openings(std::array::from_fn(|i| {
                    let mut salt = [0u8; 16];
                    salt.copy_from_slice(&salts[16 * i..16 * i + 16]);
                    Opening::Revealed(salt)
                }))
            }
        };
        if let Some(hidden) = json(self.hidden)? {
            let map = hidden
                .as_object()
                .ok_or_else(|| corrupt("hidden is not an object"))?;
            for (name, value) in map {
                let field = Field::from_name(name)
                    .ok_or_else(|| corrupt("hidden names an unknown field"))?;
                let hash = value
                    .as_str()
                    .and_then(|s| Hash::from_hex(s).ok())
                    .ok_or_else(|| corrupt("hidden commitment is not a hash"))?;
                openings.0[field.position()] = Opening::Hidden(hash);
            }
        }
        // `sig_key_id` is the declared signer (a committed field); the
        // signature bytes are beside it.
        let signature = match (self.signer_key_id, self.signature) {
            (Some(key_id), Some(bytes)) => Some(AgentSignature {
                key_id,
                signature: bytes
                    .try_into()
                    .map_err(|_| corrupt("signature is not 64 bytes"))?,
            }),
            _ => None,
        };
        Ok(StoredStep {
            seq: self.seq as u64,
            record: StepRecord {
                step,
                openings,
                digest: blob_hash(self.digest)?,
                prev_hash: blob_hash(self.prev_hash)?,
                hash: blob_hash(self.hash)?,
                signature,
                has_embedding: self.has_embedding,
                erased: self.erased,
            },
        })
    }
}
