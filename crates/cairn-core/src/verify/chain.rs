//! One session's chain: disclosure, order, hashes, time, profile,
//! signatures and erasures of its steps, and [`SessionVerifier`].

use super::keys::AgentKeys;
use super::{Check, Location, Progress, Reason, Verdict, note_failure};
use crate::commit::{Field, Opening, StepRecord, chain_hash, genesis_hash, session_leaf_data};
use crate::detail::DetailLevel;
use crate::hash::Hash;
use crate::log::{ErasureRecord, SealRecord};
use crate::merkle::{Frontier, leaf_hash};
use crate::note::NoteVerifier;
use crate::record::{Profile, SessionHeader};
use crate::time::Timestamp;
use std::collections::HashMap;

/// The fields a step shows at `level` that it hides anyway: erased payload
/// fields, with their commitments. Checks the disclosure rules first: a
/// field that is never hidden, or that the level shows and erasure cannot
/// remove, must be revealed; a field the level hides must be hidden.
pub(super) fn erased_fields(
    rec: &StepRecord,
    level: DetailLevel,
) -> Result<Vec<(Field, Hash)>, (Reason, String)> {
    let mut erased = Vec::new();
    for field in crate::commit::FIELDS {
        let shown = DetailLevel::of(field) <= level;
        match (rec.openings.get(field), shown) {
            (Opening::Revealed(_), true) | (Opening::Hidden(_), false) => {}
            (Opening::Revealed(_), false) => {
                return Err((
                    Reason::MalformedRecord,
                    format!(
                        "{} is shown beyond the bundle's level {level}",
                        field.name()
                    ),
                ));
            }
            (Opening::Hidden(commitment), true) => {
                if field.always_disclosed() || !field.is_payload() {
                    return Err((
                        Reason::MalformedRecord,
                        format!("{} must be disclosed at level {level}", field.name()),
                    ));
                }
                erased.push((field, *commitment));
            }
        }
    }
    Ok(erased)
}

/// A compact fingerprint of what an erasure removed from one step (its
/// trace id and the erased fields' commitments), compared between the step
/// and its erasure record. Internal: not part of the format.
pub(super) fn erasure_fingerprint(trace_id: &str, fields: &[(Field, Hash)]) -> Hash {
    let mut framer = crate::hash::Framer::new("cairn/internal/erasure").part(trace_id.as_bytes());
    for (field, commitment) in fields {
        framer = framer.part(field.name().as_bytes()).part(&commitment.0);
    }
    framer.finish()
}

/// The running state of one session's chain.
#[derive(Debug, Clone)]
pub(super) struct ChainState {
    session_id: String,
    agent_id: String,
    profile: Profile,
    max_skew_micros: i64,
    pub(super) next_index: u64,
    pub(super) head: Hash,
    last_created: Option<Timestamp>,
    tree: Frontier,
    sealed: bool,
}

/// Where a step sits in the log, when it is read from one.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LogPosition {
    pub(super) seq: Option<u64>,
    pub(super) logged_at: Option<Timestamp>,
}

impl ChainState {
    pub(super) fn new(header: &SessionHeader) -> ChainState {
        ChainState {
            session_id: header.session_id.clone(),
            agent_id: header.agent_id.clone(),
            profile: header.profile,
            max_skew_micros: i64::try_from(header.max_clock_skew_s)
                .unwrap_or(i64::MAX)
                .saturating_mul(1_000_000),
            next_index: 0,
            head: genesis_hash(header),
            last_created: None,
            tree: Frontier::new(),
            sealed: false,
        }
    }

    /// Checks a step in the order `docs/FORMAT.md` 9.2 gives (after the
    /// disclosure rules, which the caller checked). Returns what the step
    /// shows erased at `level`, for the erasure check.
    pub(super) fn check_step(
        &mut self,
        rec: &StepRecord,
        keys: &AgentKeys,
        recomputed: Option<Hash>,
        at: LogPosition,
    ) -> Check {
        let step = &rec.step;
        if self.sealed {
            return Err((
                Reason::StepAfterSeal,
                format!(
                    "session {} was sealed at {} steps",
                    self.session_id, self.next_index
                ),
            ));
        }
        if step.step_index != self.next_index {
            return Err((
                Reason::SequenceGap,
                format!(
                    "expected step index {}, found {}",
                    self.next_index, step.step_index
                ),
            ));
        }
        if rec.prev_hash != self.head {
            return Err((
                Reason::PrevHashMismatch,
                format!(
                    "prev_hash {} is not the previous chain hash {}",
                    rec.prev_hash, self.head
                ),
            ));
        }
        if let Some(field) = rec.hidden_field_with_value() {
            return Err((
                Reason::DigestMismatch,
                format!(
                    "{} is hidden (erased or not disclosed) yet carries a value, which the digest does not cover",
                    field.name()
                ),
            ));
        }
        let digest = recomputed.unwrap_or_else(|| rec.recompute_digest());
        if digest != rec.digest {
            return Err((
                Reason::DigestMismatch,
                format!(
                    "digest recomputed from the fields is {digest}, recorded {}",
                    rec.digest
                ),
            ));
        }
        let chained = chain_hash(&self.head, &rec.digest, step.step_index, step.created_at);
        if chained != rec.hash {
            return Err((
                Reason::ChainHashMismatch,
                format!("chain hash recomputes to {chained}, recorded {}", rec.hash),
            ));
        }
        if step.agent_id != self.agent_id {
            return Err((
                Reason::MalformedRecord,
                format!(
                    "the step's agent is {}, its session's header names {}",
                    step.agent_id, self.agent_id
                ),
            ));
        }
        if let Some(last) = self.last_created
            && step.created_at < last
        {
            return Err((
                Reason::BadTimestamp,
                format!(
                    "created_at {} is before the previous step's {last}",
                    step.created_at
                ),
            ));
        }
        if let Some(logged) = at.logged_at {
            let skew = step.created_at.as_micros().abs_diff(logged.as_micros());
            if skew > self.max_skew_micros.unsigned_abs() {
                return Err((
                    Reason::BadTimestamp,
                    format!(
                        "created_at {} is {:.3} s from the time the server logged it ({logged}); the session allows {} s",
                        step.created_at,
                        skew as f64 / 1e6,
                        self.max_skew_micros / 1_000_000
                    ),
                ));
            }
        }
        if let Err(e) = self.profile.check(step.kind) {
            return Err((Reason::ProfileViolation, e.to_string()));
        }
        keys.check(rec, at.seq)
            .map_err(|e| (Reason::BadSignature, e))?;
        self.head = rec.hash;
        self.next_index += 1;
        self.last_created = Some(step.created_at);
        self.tree
            .push(leaf_hash(&session_leaf_data(step.step_index, &rec.hash)));
        Ok(())
    }

    pub(super) fn check_seal(
        &mut self,
        seal: &SealRecord,
        origin: &str,
        server_keys: &[NoteVerifier],
    ) -> Check {
        if self.sealed {
            return Err((
                Reason::DuplicateRecord,
                format!("session {} is sealed twice", self.session_id),
            ));
        }
        if seal.step_count > self.next_index {
            return Err((
                Reason::MissingRecord,
                format!(
                    "seal covers {} steps; only {} present",
                    seal.step_count, self.next_index
                ),
            ));
        }
        if seal.step_count < self.next_index {
            return Err((
                Reason::SealMismatch,
                format!(
                    "seal covers {} steps; {} were recorded before it",
                    seal.step_count, self.next_index
                ),
            ));
        }
        if seal.final_hash != self.head || seal.session_root != self.tree.root() {
            return Err((
                Reason::SealMismatch,
                "seal's root or final hash does not match the session's steps".into(),
            ));
        }
        check_seal_note(seal, origin, server_keys)?;
        self.sealed = true;
        // A sealed chain is asked only for its id, step count and head
        // from now on (a later step or seal fails on `sealed`): what only
        // its steps needed is freed, so that a log of millions of sealed
        // sessions holds less per session while it is verified.
        self.tree = Frontier::new();
        self.agent_id = String::new();
        Ok(())
    }
}

/// A seal's note must be signed by a log key (`bad-signature`) and state
/// exactly the record's fields (`seal-mismatch`).
pub(super) fn check_seal_note(
    seal: &SealRecord,
    origin: &str,
    server_keys: &[NoteVerifier],
) -> Check {
    let text =
        crate::note::open(&seal.note, server_keys).map_err(|e| note_failure(&e, "seal note"))?;
    if !seal.states(origin, &text) {
        return Err((
            Reason::SealMismatch,
            "the seal note states other fields than its record".into(),
        ));
    }
    Ok(())
}

pub(super) fn step_location(seq: Option<u64>, rec: &StepRecord) -> Location {
    Location {
        seq,
        session_id: rec
            .is_revealed(Field::SessionId)
            .then(|| rec.step.session_id.clone()),
        step_index: Some(rec.step.step_index),
        trace_id: rec
            .is_revealed(Field::TraceId)
            .then(|| rec.step.trace_id.clone()),
        line: None,
    }
}

/// Bookkeeping shared by both verifiers: counts, last valid, first failure.
/// Verifies one session's chain on its own, fed its steps in order: the
/// reads of a store use it (`cairn verify --session`, replay with
/// verification). The session's erasure records and key history come from
/// the same log.
#[derive(Debug)]
pub struct SessionVerifier {
    chain: ChainState,
    /// Shared, so that many sessions of one org (a listing) are checked
    /// against one copy of its keys.
    keys: std::sync::Arc<AgentKeys>,
    level: DetailLevel,
    /// Erasure records of the session by step index, with their seq; each
    /// erased step must have one, and each one an erased step.
    erasures: HashMap<u64, (u64, ErasureRecord)>,
    progress: Progress,
}

impl SessionVerifier {
    /// A verifier for the session with this header (its genesis is derived
    /// from it) and these agent keys (owned, or shared in an `Arc`).
    pub fn new(
        header: &SessionHeader,
        keys: impl Into<std::sync::Arc<AgentKeys>>,
    ) -> SessionVerifier {
        SessionVerifier {
            chain: ChainState::new(header),
            keys: keys.into(),
            level: DetailLevel::Full,
            erasures: HashMap::new(),
            progress: Progress::default(),
        }
    }

    /// Checks steps shown at `level` (seed 004) rather than in full: the
    /// fields the level hides must be hidden, the others shown.
    pub fn at_level(mut self, level: DetailLevel) -> SessionVerifier {
        self.level = level;
        self
    }

    /// Gives the session's erasure records (with their log positions).
    pub fn expect_erasures(&mut self, erasures: impl IntoIterator<Item = (u64, ErasureRecord)>) {
        for (seq, erasure) in erasures {
            self.erasures.insert(erasure.step_index, (seq, erasure));
        }
    }

    /// Checks the next step, read outside a log (no position, no logged
    /// time). Returns false once verification has failed.
    pub fn push(&mut self, record: &StepRecord) -> bool {
        self.push_inner(record, LogPosition::default())
    }

    /// Checks the next step, read from the log at `seq`, logged at
    /// `logged_at`. Returns false once verification has failed.
    pub fn push_at(&mut self, record: &StepRecord, seq: u64, logged_at: Timestamp) -> bool {
        self.push_inner(
            record,
            LogPosition {
                seq: Some(seq),
                logged_at: Some(logged_at),
            },
        )
    }

    fn push_inner(&mut self, record: &StepRecord, at: LogPosition) -> bool {
        if self.progress.failure.is_some() {
            return false;
        }
        // Report the position in the stream, whatever index the record claims.
        let position = self.chain.next_index;
        let outcome = self.check(record, at);
        let mut loc = step_location(at.seq, record);
        loc.step_index = Some(position);
        loc.session_id = Some(self.chain.session_id.clone());
        self.progress.record(loc, outcome)
    }

    fn check(&mut self, record: &StepRecord, at: LogPosition) -> Check {
        let erased = erased_fields(record, self.level)?;
        if record.step.session_id != self.chain.session_id {
            return Err((
                Reason::MalformedRecord,
                format!("step belongs to session {}", record.step.session_id),
            ));
        }
        self.chain.check_step(record, &self.keys, None, at)?;
        let index = record.step.step_index;
        match (erased.is_empty(), self.erasures.remove(&index)) {
            (true, None) => Ok(()),
            (false, None) => Err((
                Reason::ErasureMismatch,
                "the step's payload is erased but no erasure record names it".into(),
            )),
            (true, Some((seq, _))) => Err((
                Reason::ErasureMismatch,
                format!("the erasure record at seq {seq} names this step, whose payload is shown"),
            )),
            (false, Some((seq, erasure))) => {
                if erasure_fingerprint(&erasure.trace_id, &erasure.commitments)
                    != erasure_fingerprint(&record.step.trace_id, &erased)
                {
                    return Err((
                        Reason::ErasureMismatch,
                        format!(
                            "the erasure record at seq {seq} names other fields or commitments than the step hides"
                        ),
                    ));
                }
                if at.seq.is_some_and(|step_seq| seq <= step_seq) {
                    return Err((
                        Reason::ErasureMismatch,
                        format!("the erasure record at seq {seq} precedes its step"),
                    ));
                }
                Ok(())
            }
        }
    }

    /// Checks the session's seal after its steps.
    pub fn push_seal(
        &mut self,
        seal: &SealRecord,
        seq: Option<u64>,
        origin: &str,
        server_keys: &[NoteVerifier],
    ) -> bool {
        if self.progress.failure.is_some() {
            return false;
        }
        // The seal's own position in the log, where it is known: the
        // verdict's last valid record is then the seal's `seq`, as for any
        // other record (without it, the step count stood in for a `seq`).
        let at = Location {
            seq,
            session_id: Some(seal.session_id.clone()),
            step_index: Some(seal.step_count),
            ..Location::default()
        };
        let outcome = self.chain.check_seal(seal, origin, server_keys);
        self.progress.record(at, outcome)
    }

    /// The chain hash of the last step checked (the genesis before any).
    pub fn head(&self) -> Hash {
        self.chain.head
    }

    /// Steps checked so far.
    pub fn steps(&self) -> u64 {
        self.chain.next_index
    }

    /// The verdict. If `expected_steps` is given (from a seal or the log),
    /// fewer steps is `missing-record`; an erasure record naming a step
    /// that was not seen is `erasure-mismatch`.
    pub fn finish(mut self, expected_steps: Option<u64>) -> Verdict {
        if let Some(expected) = expected_steps
            && self.chain.next_index < expected
        {
            let at = Location {
                session_id: Some(self.chain.session_id.clone()),
                step_index: Some(self.chain.next_index),
                ..Location::default()
            };
            self.progress.fail_at_end(
                at,
                Reason::MissingRecord,
                format!(
                    "{expected} steps expected, stream ended after {}",
                    self.chain.next_index
                ),
            );
        }
        if let Some((seq, erasure)) = self.erasures.values().min_by_key(|(seq, _)| *seq) {
            let at = Location {
                seq: Some(*seq),
                session_id: Some(erasure.session_id.clone()),
                step_index: Some(erasure.step_index),
                trace_id: Some(erasure.trace_id.clone()),
                line: None,
            };
            self.progress.fail_at_end(
                at,
                Reason::ErasureMismatch,
                format!(
                    "the erasure record at seq {seq} names step {}, which the session does not hold",
                    erasure.step_index
                ),
            );
        }
        self.progress.verdict()
    }
}
