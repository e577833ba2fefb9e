//! What the engine keeps between and during batches: an org's and a
//! session's sequencing state, a stored session as read, an agent's
//! registered key, and the [`Overlay`] of what a batch changed, which a
//! backend applies to its caches once the transaction committed.

use super::*;

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
    /// `logged_at` of the log's last entry: the next one is never earlier.
    pub last_logged: Timestamp,
}

/// A session's sequencing state.
#[derive(Debug, Clone)]
pub(crate) struct SessionState {
    pub sid: i64,
    pub agent_id: String,
    pub profile: Profile,
    /// The session's allowed distance between a step's `created_at` and
    /// the time the server logs it, in seconds.
    pub max_clock_skew_s: u64,
    pub next_index: u64,
    pub head: Hash,
    pub sealed: bool,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// `created_at` of the last step: the next one is never earlier.
    pub last_created: Option<Timestamp>,
    /// Kind of the last step (a strict session's seal needs a reflection).
    pub last_kind: Option<cairn_core::kind::StepKind>,
    /// Kinds known to be recorded in `session_kinds` for this session (one
    /// bit per [`StepKind`](cairn_core::kind::StepKind)); empty after a
    /// load, so the first step of each kind writes its row again (ignored
    /// if present).
    pub known_kinds: u32,
}

impl SessionState {
    /// The state of a session that has just been opened, before its first
    /// step.
    pub(super) fn opened(sid: i64, header: &SessionHeader, genesis: Hash) -> SessionState {
        SessionState {
            sid,
            agent_id: header.agent_id.clone(),
            profile: header.profile,
            max_clock_skew_s: header.max_clock_skew_s,
            next_index: 0,
            head: genesis,
            sealed: false,
            first_seq: None,
            last_seq: None,
            last_created: None,
            last_kind: None,
            known_kinds: 0,
        }
    }
}

/// A session's last step as the log holds it.
#[derive(Debug, Clone)]
pub(crate) struct ChainEnd {
    pub seq: i64,
    pub index: i64,
    pub hash: Vec<u8>,
    pub created_at: i64,
    pub kind: String,
}

/// Finds a session's last step in the log itself: from `hint` (the step
/// `session_heads` names, already checked to be a step of this session, or
/// `None` to start before the first step) it follows each step's
/// successor (the step of the session whose `prev_seq` is its seq, found by
/// a unique index) until there is none. Derived state can only make this
/// walk longer, never end it early or elsewhere: a head moved back is
/// walked forward again.
pub(crate) fn chain_end(
    hint: Option<ChainEnd>,
    mut successor: impl FnMut(Option<i64>) -> Result<Option<ChainEnd>, StoreError>,
) -> Result<Option<ChainEnd>, StoreError> {
    let mut end = hint;
    while let Some(next) = successor(end.as_ref().map(|e| e.seq))? {
        let expected = end.as_ref().map_or(0, |e| e.index + 1);
        if next.index != expected {
            return Err(StoreError::Corrupt(format!(
                "step {} follows step {} of its session in the log; run `cairn verify`",
                next.index,
                expected - 1
            )));
        }
        end = Some(next);
    }
    Ok(end)
}

/// A session as both backends read it back: its registry row, whether the
/// log seals it, and its last step as the log holds it.
pub(crate) struct StoredSession {
    pub sid: i64,
    pub agent_id: String,
    pub profile: String,
    pub genesis: Vec<u8>,
    pub max_clock_skew_s: i64,
    pub sealed: bool,
    pub first_seq: Option<i64>,
    pub end: Option<ChainEnd>,
}

impl StoredSession {
    /// The sequencing state.
    pub fn into_state(self) -> Result<SessionState, StoreError> {
        let unsigned = |v: i64| {
            u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("negative position {v}")))
        };
        let end = self.end;
        Ok(SessionState {
            sid: self.sid,
            profile: Profile::parse(&self.profile)
                .ok_or_else(|| StoreError::Corrupt(format!("unknown profile {}", self.profile)))?,
            max_clock_skew_s: unsigned(self.max_clock_skew_s)?,
            next_index: end
                .as_ref()
                .map(|e| unsigned(e.index))
                .transpose()?
                .map_or(0, |i| i + 1),
            head: blob_hash(match &end {
                Some(e) => e.hash.clone(),
                None => self.genesis,
            })?,
            sealed: self.sealed,
            first_seq: self.first_seq.map(unsigned).transpose()?,
            last_seq: end.as_ref().map(|e| unsigned(e.seq)).transpose()?,
            last_created: end
                .as_ref()
                .map(|e| {
                    Timestamp::from_micros(e.created_at)
                        .ok_or_else(|| StoreError::Corrupt("a step time out of range".into()))
                })
                .transpose()?,
            last_kind: end
                .as_ref()
                .and_then(|e| cairn_core::kind::StepKind::parse(&e.kind)),
            known_kinds: 0,
            agent_id: self.agent_id,
        })
    }
}

/// The committed log size of the org with id `org` among `orgs` (the
/// sequencing state's committed orgs, by name); 0 for an org they do not
/// hold (one the running batch created has no committed entries).
pub(crate) fn committed_size(orgs: &HashMap<String, OrgState>, org: i64) -> u64 {
    orgs.values()
        .find(|o| o.id == org)
        .map_or(0, |o| o.frontier.size())
}

/// A registered agent key.
#[derive(Debug, Clone)]
pub(crate) struct AgentKey {
    pub agent_id: String,
    pub key: VerifyingKey,
    pub seq: u64,
    /// The position of its `key-revocation` record, if revoked: it signs
    /// nothing from then on.
    pub revoked: Option<u64>,
}

/// Changes a batch makes to the sequencing state, applied to a backend's
/// caches only after its transaction commits.
#[derive(Default, Clone)]
pub(crate) struct Overlay {
    pub orgs: HashMap<String, OrgState>,
    pub sessions: HashMap<(i64, String), SessionState>,
    pub keys: HashMap<(i64, String), AgentKey>,
    /// Keys this batch registered, by org (checked against the bound on
    /// an org's keys).
    pub(super) registered: HashMap<i64, u64>,
    /// Sessions that got steps in this batch (their heads are written).
    pub(super) touched: HashSet<i64>,
    /// `(session, kind)` pairs this batch is the first to record.
    pub(super) new_kinds: Vec<(i64, cairn_core::kind::StepKind)>,
}

// One bit per kind in `SessionState::known_kinds`.
const _: () = assert!(cairn_core::kind::ALL_KINDS.len() <= 32);

impl Overlay {
    /// Notes that `session` got a step of `kind`; the pair is written to
    /// `session_kinds` at the end of the batch unless already known.
    pub(crate) fn note_kind(
        &mut self,
        session: &mut SessionState,
        kind: cairn_core::kind::StepKind,
    ) {
        let bit = 1u32 << (kind as u32);
        if session.known_kinds & bit == 0 {
            session.known_kinds |= bit;
            self.new_kinds.push((session.sid, kind));
        }
    }
}
