//! Whole-store operations: verify a store or a session, export bundles.
//!
//! These work on any [`LedgerStore`] and stream: memory stays constant in
//! the number of records (plus one chain state per open session).

use crate::{LedgerStore, StoreError, StoredCheckpoint};
use cairn_core::Hash;
use cairn_core::Timestamp;
use cairn_core::bundle::{BundleHeader, checkpoint_line, encode_entry, end_line};
use cairn_core::checkpoint::verify_checkpoint;
use cairn_core::detail::DetailLevel;
use cairn_core::log::{LogEntry, LogRecord, OpRecord, log_origin};

use cairn_core::note::NoteVerifier;
use cairn_core::verify::{
    AgentKeys, Failure, Location, LogVerifier, Reason, SessionVerifier, Verdict,
};
use std::io::Write;

/// The outcome of verifying an org's log in a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreVerdict {
    /// The org.
    pub org_id: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Entries in the log.
    pub log_size: u64,
    /// Checkpoints checked against the log (stored and supplied).
    pub checkpoints_checked: usize,
    /// The largest checkpoint size checked.
    pub checkpoint_size: Option<u64>,
}

fn failed(org_id: &str, log_size: u64, failure: Failure, checked: usize) -> StoreVerdict {
    StoreVerdict {
        org_id: org_id.to_owned(),
        verdict: Verdict {
            verified: false,
            records_checked: 0,
            last_valid: None,
            failure: Some(failure),
        },
        log_size,
        checkpoints_checked: checked,
        checkpoint_size: None,
    }
}

/// Verifies an org's whole log: every session chain, every operational
/// record, and the Merkle root at the size of every stored checkpoint and
/// of every checkpoint in `external` (signed notes an auditor or witness
/// kept). Signatures are checked against `keys` (the store's own server key
/// if empty). `progress` is called with the number of entries checked.
pub fn verify_org(
    store: &dyn LedgerStore,
    org_id: &str,
    external: &[String],
    keys: &[NoteVerifier],
    progress: &mut dyn FnMut(u64),
) -> Result<StoreVerdict, StoreError> {
    let (server_name, own_key) = store.log_signer(org_id)?;
    let keys: Vec<NoteVerifier> = if keys.is_empty() {
        vec![own_key]
    } else {
        keys.to_vec()
    };
    let origin = log_origin(&server_name, org_id);
    let log_size = store.log_size(org_id)?;
    let mut verifier = LogVerifier::new(&server_name, org_id, keys.clone());
    let stored: Vec<String> = store
        .checkpoints(org_id)?
        .into_iter()
        .map(|c| c.note)
        .collect();
    let mut checked = 0;
    let mut largest = None;
    for (source, note) in stored
        .iter()
        .map(|n| ("stored", n))
        .chain(external.iter().map(|n| ("supplied", n)))
    {
        match verify_checkpoint(note, &origin, &keys) {
            Ok(cp) => {
                verifier.expect_checkpoint(&cp);
                checked += 1;
                largest = largest.max(Some(cp.checkpoint().size));
            }
            Err(e) => {
                let size = note.lines().nth(1).unwrap_or("?").to_owned();
                let failure = Failure {
                    at: Location::default(),
                    reason: Reason::BadSignature,
                    detail: format!(
                        "{source} checkpoint of size {size} does not verify with the server key: {e}"
                    ),
                };
                return Ok(failed(org_id, log_size, failure, checked));
            }
        }
    }
    // An auditor's checkpoint must be consistent with the store's latest:
    // check the consistency proof first, as a witness would.
    if let Some(latest) = store.latest_checkpoint(org_id)? {
        for note in external {
            let Ok(cp) = verify_checkpoint(note, &origin, &keys) else {
                continue;
            };
            let old = cp.checkpoint();
            if old.size == 0 || old.size > latest.size {
                continue;
            }
            let proof = store.consistency_proof(org_id, old.size, latest.size)?;
            if let Err(e) = cairn_core::merkle::verify_consistency(
                old.size,
                latest.size,
                &old.root,
                &latest.root,
                &proof,
            ) {
                let failure = Failure {
                    at: Location {
                        seq: Some(old.size - 1),
                        ..Location::default()
                    },
                    reason: Reason::InconsistentCheckpoint,
                    detail: format!(
                        "the consistency proof from the supplied checkpoint (size {}) to the store's checkpoint (size {}) fails: {e}; history was rewritten at or before seq {}",
                        old.size,
                        latest.size,
                        old.size - 1
                    ),
                };
                return Ok(failed(org_id, log_size, failure, checked));
            }
        }
    }
    // A three-stage pipeline on scoped threads: read rows, recompute step
    // digests (the costly part), verify chains and the tree in order. The
    // bounded channels keep memory constant; dropping a receiver stops the
    // stages before it.
    const CHUNK: usize = 512;
    type Chunk = Vec<(LogEntry, Hash, Option<Hash>)>;
    let mut count = 0u64;
    let mut leaf_failure = None;
    let read_result = std::thread::scope(|scope| {
        let (raw_tx, raw_rx) = std::sync::mpsc::sync_channel::<Chunk>(4);
        let (hashed_tx, hashed_rx) = std::sync::mpsc::sync_channel::<Chunk>(4);
        let reader = scope.spawn(move || {
            let mut chunk: Chunk = Vec::with_capacity(CHUNK);
            store.read_log(org_id, 0, u64::MAX, &mut |entry, leaf| {
                chunk.push((entry, leaf, None));
                if chunk.len() == CHUNK {
                    let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK));
                    if raw_tx.send(full).is_err() {
                        return false;
                    }
                }
                true
            })?;
            if !chunk.is_empty() {
                let _ = raw_tx.send(chunk);
            }
            Ok::<(), StoreError>(())
        });
        scope.spawn(move || {
            for mut chunk in raw_rx {
                for (entry, _, digest) in &mut chunk {
                    if let LogRecord::Step(record) = &entry.record {
                        *digest = Some(record.recompute_digest());
                    }
                }
                if hashed_tx.send(chunk).is_err() {
                    break;
                }
            }
        });
        'chunks: for chunk in &hashed_rx {
            for (entry, stored_leaf, digest) in chunk {
                count += 1;
                if count.is_multiple_of(4096) {
                    progress(count);
                }
                if !verifier.push_with_digest(&entry, digest) {
                    break 'chunks;
                }
                if entry.leaf_hash() != stored_leaf {
                    // Proofs are served from stored leaf hashes: a mismatch
                    // would hand out proofs for data that is not in the log.
                    leaf_failure = Some(Failure {
                        at: Location {
                            seq: Some(entry.seq),
                            ..Location::default()
                        },
                        reason: Reason::InclusionMismatch,
                        detail: "the stored leaf hash does not match the entry".into(),
                    });
                    break 'chunks;
                }
            }
        }
        drop(hashed_rx);
        reader
            .join()
            .unwrap_or_else(|_| Err(StoreError::Corrupt("the reading thread panicked".into())))
    });
    read_result?;
    progress(count);
    let mut verdict = verifier.finish();
    if verdict.failure.is_none()
        && let Some(failure) = leaf_failure
    {
        verdict.verified = false;
        verdict.failure = Some(failure);
    }
    Ok(StoreVerdict {
        org_id: org_id.to_owned(),
        verdict,
        log_size,
        checkpoints_checked: checked,
        checkpoint_size: largest,
    })
}

/// Verifies one session's chain (and its seal, if sealed) on its own.
/// `Ok(None)` if the session does not exist.
pub fn verify_session(
    store: &dyn LedgerStore,
    org_id: &str,
    session_id: &str,
) -> Result<Option<Verdict>, StoreError> {
    let Some(info) = store.session(org_id, session_id)? else {
        return Ok(None);
    };
    let mut keys = AgentKeys::new();
    for reg in store.agent_keys(org_id)? {
        keys.insert(reg.key_id, reg.agent_id, reg.public_key);
    }
    let mut verifier = SessionVerifier::new(&info.header, keys);
    store.read_session(org_id, session_id, &mut |step| verifier.push(&step.record))?;
    let (server_name, server_key) = store.log_signer(org_id)?;
    let expected = match &info.seal {
        Some(seal) => {
            verifier.push_seal(
                seal,
                &log_origin(&server_name, org_id),
                std::slice::from_ref(&server_key),
            );
            seal.step_count
        }
        None => info.step_count,
    };
    Ok(Some(verifier.finish(Some(expected))))
}

/// What to export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportScope {
    /// The whole org log up to the checkpoint.
    All,
    /// One session.
    Session(String),
    /// Every session of one agent.
    Agent(String),
    /// Every session started in `[since, until)`.
    Range {
        /// Inclusive start.
        since: Timestamp,
        /// Exclusive end.
        until: Timestamp,
    },
}

impl ExportScope {
    fn describe(&self) -> serde_json::Value {
        match self {
            ExportScope::All => serde_json::json!({"all": true}),
            ExportScope::Session(s) => serde_json::json!({"session": s}),
            ExportScope::Agent(a) => serde_json::json!({"agent": a}),
            ExportScope::Range { since, until } => {
                serde_json::json!({"since": since.to_string(), "until": until.to_string()})
            }
        }
    }
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSummary {
    /// Entries written.
    pub entries: u64,
    /// Sessions included.
    pub sessions: u64,
    /// The checkpoint the bundle is proven against.
    pub checkpoint_size: u64,
}

/// Why an export could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Writing the bundle failed.
    #[error("writing the bundle: {0}")]
    Write(#[from] std::io::Error),
    /// Nothing matches the scope.
    #[error("nothing to export: {0}")]
    Empty(String),
    /// The detail level cannot be applied to this scope.
    #[error("{0}")]
    Level(String),
    /// A `full` export of a session without recorded consent.
    #[error(
        "session {0} has no recorded consent to full-detail sharing; export it at level detailed or generic"
    )]
    Consent(String),
}

/// The sessions a scope names (every session for [`ExportScope::All`]).
pub fn sessions_in_scope(
    store: &dyn LedgerStore,
    org_id: &str,
    scope: &ExportScope,
) -> Result<Vec<String>, StoreError> {
    Ok(match scope {
        ExportScope::Session(id) => vec![id.clone()],
        ExportScope::Agent(agent) => store
            .list_sessions(org_id, Some(agent), usize::MAX)?
            .into_iter()
            .map(|s| s.session_id)
            .collect(),
        ExportScope::Range { since, until } => store
            .list_sessions(org_id, None, usize::MAX)?
            .into_iter()
            .filter(|s| s.started_at >= *since && s.started_at < *until)
            .map(|s| s.session_id)
            .collect(),
        ExportScope::All => store
            .list_sessions(org_id, None, usize::MAX)?
            .into_iter()
            .map(|s| s.session_id)
            .collect(),
    })
}

/// Seed 004: a `full` view of sessions needs the consent recorded on each.
/// Returns the first session of the scope without it.
pub fn first_without_consent(
    store: &dyn LedgerStore,
    org_id: &str,
    scope: &ExportScope,
) -> Result<Option<String>, StoreError> {
    for id in sessions_in_scope(store, org_id, scope)? {
        if let Some(info) = store.session(org_id, &id)?
            && !info.header.full_consent
        {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// Writes a bundle of `scope` proven against `checkpoint` (entries after
/// it are not included: checkpoint first for a complete export), with every
/// field shown.
pub fn export(
    store: &dyn LedgerStore,
    org_id: &str,
    scope: &ExportScope,
    checkpoint: &StoredCheckpoint,
    exported_at: Timestamp,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<ExportSummary, ExportError> {
    export_at(
        store,
        org_id,
        scope,
        None,
        checkpoint,
        exported_at,
        out,
        progress,
    )
}

/// [`export`] at a detail level (seed 004): each step shows only the fields
/// of `level`, the others replaced by their commitments, so the bundle still
/// verifies and reveals nothing it hides. Reviews and audit events (free
/// text) are included at `full` only; a complete-log bundle carries every
/// record whole, so it has no lower level.
#[allow(clippy::too_many_arguments)]
pub fn export_at(
    store: &dyn LedgerStore,
    org_id: &str,
    scope: &ExportScope,
    level: Option<DetailLevel>,
    checkpoint: &StoredCheckpoint,
    exported_at: Timestamp,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<ExportSummary, ExportError> {
    let shown = level.unwrap_or(DetailLevel::Full);
    if level == Some(DetailLevel::Full)
        && let Some(session) = first_without_consent(store, org_id, scope)?
    {
        return Err(ExportError::Consent(session));
    }
    if *scope == ExportScope::All && shown < DetailLevel::Full {
        return Err(ExportError::Level(format!(
            "a bundle of the whole log carries every record whole; export sessions, an agent or a time range at level {shown}"
        )));
    }
    let redact = |entry: LogEntry| -> Result<LogEntry, ExportError> {
        match entry.record {
            LogRecord::Step(mut record) if shown < DetailLevel::Full => {
                record
                    .redact(shown)
                    .map_err(|e| ExportError::Level(e.to_string()))?;
                Ok(LogEntry {
                    seq: entry.seq,
                    record: LogRecord::Step(record),
                })
            }
            record => Ok(LogEntry {
                seq: entry.seq,
                record,
            }),
        }
    };
    let size = checkpoint.size;
    let (server_name, server_key) = store.log_signer(org_id)?;
    let mut described = scope.describe();
    if let (Some(level), Some(object)) = (level, described.as_object_mut()) {
        object.insert("level".into(), level.as_str().into());
    }
    let header = BundleHeader {
        server_name,
        org_id: org_id.to_owned(),
        server_key: server_key.to_string(),
        scope: described,
        complete_log: *scope == ExportScope::All,
        exported_at,
    };
    writeln!(out, "{}", header.to_line())?;
    writeln!(out, "{}", checkpoint_line(&checkpoint.note))?;
    let mut written = 0u64;
    let mut sessions = 0u64;
    let mut write_error = None;
    if *scope == ExportScope::All {
        store.read_log(org_id, 0, size, &mut |entry, _| {
            if let LogRecord::Op {
                record: OpRecord::SessionStart(_),
                ..
            } = &entry.record
            {
                sessions += 1;
            }
            if let Err(e) = writeln!(out, "{}", encode_entry(&entry, None)) {
                write_error = Some(e);
                return false;
            }
            written += 1;
            if written.is_multiple_of(4096) {
                progress(written);
            }
            true
        })?;
    } else {
        // Which sessions, then which entries: their starts, steps, seals,
        // erasures, reviews and audit events, the key registrations of
        // their agents, and the seals of the sessions they continue.
        let mut session_ids: Vec<String> = Vec::new();
        let mut agents: Vec<String> = Vec::new();
        let mut predecessors: Vec<Hash> = Vec::new();
        let mut seqs: Vec<u64> = Vec::new();
        let mut per_session = |id: &str, seqs: &mut Vec<u64>| -> Result<bool, StoreError> {
            let Some(info) = store.session(org_id, id)? else {
                return Ok(false);
            };
            if info.start_seq >= size {
                return Ok(false);
            }
            seqs.push(info.start_seq);
            store.read_session(org_id, id, &mut |step| {
                if step.seq < size {
                    seqs.push(step.seq);
                }
                true
            })?;
            if !agents.contains(&info.header.agent_id) {
                agents.push(info.header.agent_id.clone());
            }
            predecessors.extend(info.header.predecessor);
            Ok(true)
        };
        let candidates = sessions_in_scope(store, org_id, scope)?;
        for id in candidates {
            if per_session(&id, &mut seqs)? {
                session_ids.push(id);
            }
        }
        if session_ids.is_empty() {
            return Err(ExportError::Empty(format!(
                "{scope:?} matches no session covered by the checkpoint"
            )));
        }
        sessions = session_ids.len() as u64;
        // These live in the log; find them in one pass over it.
        store.read_log(org_id, 0, size, &mut |entry, _| {
            let LogRecord::Op { record, .. } = &entry.record else {
                return true;
            };
            let wanted = match record {
                OpRecord::Seal(seal) => {
                    session_ids.contains(&seal.session_id)
                        || predecessors.contains(&seal.final_hash)
                }
                OpRecord::KeyRegistration(reg) => agents.contains(&reg.agent_id),
                OpRecord::Erasure(e) => session_ids.contains(&e.session_id),
                OpRecord::Review(r) => {
                    shown == DetailLevel::Full && session_ids.contains(&r.session_id)
                }
                OpRecord::AuditEvent(a) => {
                    shown == DetailLevel::Full
                        && a.session_id
                            .as_ref()
                            .is_some_and(|s| session_ids.contains(s))
                }
                // The original signed trace shows what its level shows.
                OpRecord::SignedTrace(t) => {
                    shown >= t.trace.level && session_ids.contains(&t.session_id)
                }
                OpRecord::SessionStart(_) => false,
            };
            if wanted {
                seqs.push(entry.seq);
            }
            true
        })?;
        seqs.sort_unstable();
        seqs.dedup();
        for seq in seqs {
            let proof = store.inclusion_proof(org_id, seq, size)?;
            let mut line = None;
            let mut found = None;
            store.read_log(org_id, seq, seq + 1, &mut |entry, _| {
                found = Some(entry);
                false
            })?;
            if let Some(entry) = found {
                line = Some(encode_entry(&redact(entry)?, Some(&proof)));
            }
            let line = line.ok_or_else(|| StoreError::Corrupt(format!("entry {seq} vanished")))?;
            writeln!(out, "{line}")?;
            written += 1;
            if written.is_multiple_of(1024) {
                progress(written);
            }
        }
    }
    if let Some(e) = write_error {
        return Err(e.into());
    }
    writeln!(out, "{}", end_line(written))?;
    out.flush()?;
    progress(written);
    Ok(ExportSummary {
        entries: written,
        sessions,
        checkpoint_size: size,
    })
}

/// The outcome of [`import_bundle`].
#[derive(Debug)]
pub enum ImportOutcome {
    /// The bundle verified and its log was imported.
    Imported {
        /// The org imported.
        org_id: String,
        /// Entries imported.
        entries: u64,
        /// Whether the org is a read-only mirror (signed by another server).
        mirror: bool,
    },
    /// The bundle did not verify; nothing was written.
    Rejected(Box<cairn_core::bundle::BundleVerdict>),
}

/// Imports a bundle: verifies it completely first (with `keys` pinned, or
/// the bundle's own key if empty), then streams it into the store as the
/// log of its org. `open` opens the bundle afresh for each pass, so memory
/// stays constant.
pub fn import_bundle(
    store: &dyn LedgerStore,
    open: &dyn Fn() -> std::io::Result<Box<dyn std::io::BufRead>>,
    keys: &[NoteVerifier],
    progress: &mut dyn FnMut(u64),
) -> Result<ImportOutcome, crate::ImportError> {
    use crate::ImportError;
    use cairn_core::bundle::{BundleHeader, BundleVerifier, decode_entry};
    let io = |e: std::io::Error| ImportError::Refused(format!("reading the bundle: {e}"));
    let mut verifier = BundleVerifier::new(keys.to_vec());
    let mut reader = open().map_err(io)?;
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(io)? == 0
            || !verifier.push_bytes(cairn_core::bundle::trim_line_end(&line))
        {
            break;
        }
    }
    let verdict = verifier.finish();
    if !verdict.verdict.verified {
        return Ok(ImportOutcome::Rejected(Box::new(verdict)));
    }
    let mut lines = std::io::BufRead::lines(open().map_err(io)?);
    let mut next = || -> Result<String, ImportError> {
        lines
            .next()
            .ok_or_else(|| ImportError::Refused("the bundle changed between passes".into()))?
            .map_err(io)
    };
    let header = BundleHeader::parse(&next()?).map_err(ImportError::Refused)?;
    let checkpoint: serde_json::Value = serde_json::from_str(&next()?)
        .map_err(|e| ImportError::Refused(format!("checkpoint line: {e}")))?;
    let note = checkpoint["checkpoint"]
        .as_str()
        .ok_or_else(|| ImportError::Refused("checkpoint line".into()))?
        .to_owned();
    let mut count = 0u64;
    let mut entries = std::iter::from_fn(|| {
        let line = match next() {
            Ok(line) => line,
            Err(e) => return Some(Err(e.to_string())),
        };
        if line.starts_with("{\"end\"") {
            return None;
        }
        count += 1;
        if count.is_multiple_of(4096) {
            progress(count);
        }
        Some(decode_entry(&line).map(|(entry, _)| entry))
    });
    let entries_imported = store.import_log(&header.org_id, &header, &note, &mut entries)?;
    let (_, signer) = store.log_signer(&header.org_id)?;
    Ok(ImportOutcome::Imported {
        org_id: header.org_id,
        entries: entries_imported,
        mirror: signer != *store.server_key(),
    })
}

/// A flagged step in seed 003's review queue, with the reviews recorded
/// for it so far (oldest first).
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewItem {
    /// The flagged step.
    pub step: crate::StoredStep,
    /// Its reviews, with their positions in the log.
    pub reviews: Vec<(u64, cairn_core::log::ReviewRecord)>,
}

impl ReviewItem {
    /// `pending` (no review yet), `escalated`, `approved` or `rejected`:
    /// the latest review decides.
    pub fn state(&self) -> &'static str {
        use cairn_core::log::ReviewDecision;
        match self.reviews.last().map(|(_, r)| r.decision) {
            None => "pending",
            Some(ReviewDecision::Escalate) => "escalated",
            Some(ReviewDecision::Approve) => "approved",
            Some(ReviewDecision::Reject) => "rejected",
        }
    }

    /// Whether it still waits for a decision (pending or escalated).
    pub fn is_open(&self) -> bool {
        matches!(self.state(), "pending" | "escalated")
    }
}

/// Seed 003's review queue: the org's flagged steps that still wait for a
/// decision (never reviewed, or escalated), oldest first, at most `limit`;
/// with `include_resolved`, approved and rejected ones too.
pub fn review_queue(
    store: &dyn LedgerStore,
    org_id: &str,
    include_resolved: bool,
    limit: usize,
) -> Result<Vec<ReviewItem>, StoreError> {
    let mut reviews: std::collections::HashMap<String, Vec<(u64, cairn_core::log::ReviewRecord)>> =
        std::collections::HashMap::new();
    let mut from = 0;
    loop {
        let page = store.op_records(org_id, "review", from, 1024)?;
        let Some(&(last, _)) = page.last() else { break };
        for (seq, record) in page {
            if let OpRecord::Review(review) = record {
                reviews
                    .entry(review.trace_id.clone())
                    .or_default()
                    .push((seq, review));
            }
        }
        from = last + 1;
    }
    let mut queue = Vec::new();
    let mut from = 0;
    while queue.len() < limit {
        let page = store.flagged_steps(org_id, from, 1024)?;
        let Some(last) = page.last().map(|s| s.seq) else {
            break;
        };
        for step in page {
            let item = ReviewItem {
                reviews: reviews
                    .remove(&step.record.step.trace_id)
                    .unwrap_or_default(),
                step,
            };
            if (include_resolved || item.is_open()) && queue.len() < limit {
                queue.push(item);
            }
        }
        from = last + 1;
    }
    Ok(queue)
}

/// Seed 002: the steps that record one turn: the thinking text parsed into
/// phases first (`parseThinking`), then `explicit` steps, all carrying
/// `turn_id` and numbered within the turn from `first_number`. `template`
/// gives the org, session, agent, model and caller.
pub fn turn_steps(
    template: &crate::NewStep,
    turn_id: &str,
    thinking: Option<&str>,
    explicit: Vec<crate::NewStep>,
    first_number: u64,
) -> Vec<crate::NewStep> {
    let parsed = thinking
        .map(cairn_core::thinking::parse_thinking)
        .unwrap_or_default()
        .into_iter()
        .map(|p| crate::NewStep {
            kind_label: p.phase.to_owned(),
            content: Some(p.content),
            ..template.clone()
        });
    parsed
        .chain(explicit)
        .zip(first_number..)
        .map(|(step, number)| crate::NewStep {
            turn_id: Some(turn_id.to_owned()),
            turn_step: step.turn_step.or(Some(number)),
            ..step
        })
        .collect()
}

/// The number the next step of a turn takes: one more than the highest
/// recorded in the session, and at least the number of its steps (0 for a
/// new turn).
pub fn next_turn_step(
    store: &dyn LedgerStore,
    org_id: &str,
    session_id: &str,
    turn_id: &str,
) -> Result<u64, StoreError> {
    // Steps recorded without a number still take one.
    let (mut next, mut count) = (0, 0);
    store.read_session(org_id, session_id, &mut |s| {
        if s.record.step.turn_id.as_deref() == Some(turn_id) {
            count += 1;
            next = next.max(s.record.step.turn_step.map_or(0, |n| n.saturating_add(1)));
        }
        true
    })?;
    Ok(next.max(count))
}
