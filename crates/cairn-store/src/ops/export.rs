//! Exporting bundles (`docs/FORMAT.md` section 10), in two phases so that
//! a server can refuse before it answers: [`plan_export`] decides
//! everything (the entries, the signed selection of a partial bundle, the
//! consistency proof) and can fail; [`write_export`] streams the lines.
//!
//! What a partial bundle selects is computed from the log itself (session
//! starts, the chains walked from the log, the records of each session
//! found by the log's own indexes), never from counts kept in derived
//! tables, because the server signs it.

use crate::{LedgerStore, SessionFilter, StoreError, StoredCheckpoint};
use cairn_core::Hash;
use cairn_core::Timestamp;
use cairn_core::bundle::{BundleHeader, selection_line};
use cairn_core::commit::genesis_hash;
use cairn_core::detail::DetailLevel;
use cairn_core::log::{OpRecord, log_origin};
use cairn_core::selection::{Scope, Selection, SessionClaim};
use std::io::Write;

mod write;
pub use write::write_export;

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

impl std::fmt::Display for ExportScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportScope::All => f.write_str("the whole log"),
            ExportScope::Session(id) => write!(f, "session {id:?}"),
            ExportScope::Agent(id) => write!(f, "agent {id:?}"),
            ExportScope::Range { since, until } => {
                write!(
                    f,
                    "the range of sessions started at or after {since} and before {until}"
                )
            }
        }
    }
}

impl ExportScope {
    /// The selection scope of a partial export (`None` for the whole log).
    pub fn selection_scope(&self) -> Option<Scope> {
        match self {
            ExportScope::All => None,
            ExportScope::Session(id) => Some(Scope::Session(id.clone())),
            ExportScope::Agent(agent) => Some(Scope::Agent(agent.clone())),
            ExportScope::Range { since, until } => Some(Scope::Range {
                since: *since,
                until: *until,
            }),
        }
    }
}

/// How to export.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportOptions {
    /// The detail level steps are shown at (`full` if `None`).
    pub level: Option<DetailLevel>,
    /// Include the consistency proof from this earlier log size to the
    /// bundle's checkpoint, so that a verifier holding a checkpoint of that
    /// size can check the bundle's against it.
    pub since_size: Option<u64>,
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
#[non_exhaustive]
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
    /// A step the export shows was erased after the checkpoint: its
    /// erasure record is not covered yet. Sign a checkpoint of at least
    /// `needed` entries and export again.
    #[error(
        "a step of this export was erased after the checkpoint (size {have}); a checkpoint of at least {needed} entries covers the erasure record: export again"
    )]
    Stale {
        /// The checkpoint size used.
        have: u64,
        /// The size that covers the erasure.
        needed: u64,
    },
    /// A step was erased while the bundle was written: the bundle was left
    /// without its end line (so it does not verify).
    #[error("a step of this export was erased while it was written; export again")]
    Changed,
    /// A partial export of an org mirrored from another server's log: its
    /// selection would need that server's signature.
    #[error(
        "org {0} is a mirror of another server's log: export it whole (--all), or ask that server for a partial export"
    )]
    Mirror(String),
    /// The consistency proof asked for cannot be made.
    #[error("{0}")]
    Since(String),
    /// A partial export's signed selection would be a bundle line longer
    /// than verifiers read by default
    /// ([`DEFAULT_MAX_BUNDLE_LINE_BYTES`](super::DEFAULT_MAX_BUNDLE_LINE_BYTES)):
    /// the bundle would be refused by whoever it is given to.
    #[error("{0}")]
    TooLarge(String),
}

/// Everything an export will write, decided before the first byte.
#[derive(Debug, Clone)]
pub struct ExportPlan {
    org_id: String,
    header: BundleHeader,
    checkpoint: StoredCheckpoint,
    level: DetailLevel,
    consistency: Option<(u64, Vec<Hash>)>,
    /// A partial bundle's signed selection and the seqs of its entries.
    partial: Option<(Selection, String, Vec<u64>)>,
    sessions: u64,
}

impl ExportPlan {
    /// The signed selection of a partial export.
    pub fn selection(&self) -> Option<&Selection> {
        self.partial.as_ref().map(|(s, _, _)| s)
    }

    /// The checkpoint the bundle is proven against.
    pub fn checkpoint(&self) -> &StoredCheckpoint {
        &self.checkpoint
    }

    /// The log positions (`seq`) of the entries the bundle holds, in
    /// order: every one below the checkpoint's size for a complete
    /// bundle, the selected ones for a partial bundle.
    pub fn entry_seqs(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        match &self.partial {
            None => Box::new(0..self.checkpoint.size),
            Some((_, _, seqs)) => Box::new(seqs.iter().copied()),
        }
    }
}

/// The sessions a scope names, from the session registry (candidates: a
/// partial export confirms each against its `session-start` record), read
/// a page at a time as they are taken: an agent or an org may have
/// millions.
pub fn sessions_in_scope<'a>(
    store: &'a dyn LedgerStore,
    org_id: &'a str,
    scope: &ExportScope,
) -> ScopeSessions<'a> {
    let (one, filter) = match scope {
        ExportScope::Session(id) => (Some(id.clone()), None),
        ExportScope::Agent(agent) => (None, Some(SessionFilter::agent(Some(agent)))),
        ExportScope::Range { since, until } => (
            None,
            Some(SessionFilter {
                started_from: Some(*since),
                started_before: Some(*until),
                ..SessionFilter::all()
            }),
        ),
        ExportScope::All => (None, Some(SessionFilter::all())),
    };
    ScopeSessions {
        store,
        org_id,
        one,
        filter,
        page: std::collections::VecDeque::new(),
    }
}

/// The sessions of a scope, a listing page at a time
/// ([`sessions_in_scope`]).
pub struct ScopeSessions<'a> {
    store: &'a dyn LedgerStore,
    org_id: &'a str,
    /// A scope of one session: its id, until taken.
    one: Option<String>,
    /// A listed scope's filter, its cursor after the last page read
    /// (`None` once the listing has ended).
    filter: Option<SessionFilter>,
    page: std::collections::VecDeque<String>,
}

/// Sessions listed at a time.
const SCOPE_PAGE: usize = 1024;

impl Iterator for ScopeSessions<'_> {
    type Item = Result<String, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(id) = self.one.take() {
            return Some(Ok(id));
        }
        if self.page.is_empty() {
            let filter = self.filter.as_mut()?;
            let listed = match self.store.list_sessions(self.org_id, filter, SCOPE_PAGE) {
                Ok(listed) => listed,
                Err(e) => {
                    self.filter = None;
                    return Some(Err(e));
                }
            };
            match listed.last() {
                Some(last) if listed.len() == SCOPE_PAGE => {
                    filter.after = Some(crate::SessionCursor::after(last));
                }
                _ => self.filter = None,
            }
            self.page
                .extend(listed.into_iter().map(|summary| summary.session_id));
        }
        self.page.pop_front().map(Ok)
    }
}

/// Seed 004: a `full` view of sessions needs the consent recorded on each.
/// Returns the first session of the scope without it.
pub fn first_without_consent(
    store: &dyn LedgerStore,
    org_id: &str,
    scope: &ExportScope,
) -> Result<Option<String>, StoreError> {
    for id in sessions_in_scope(store, org_id, scope) {
        let id = id?;
        if let Some(info) = store.session(org_id, &id)?
            && !info.header.full_consent
        {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// Decides an export of `scope` against `checkpoint`: checks the level and
/// consent, computes and signs a partial bundle's selection from the log,
/// and the consistency proof asked for. Fails with [`ExportError::Stale`]
/// when a step it would show was erased after the checkpoint (sign a newer
/// one and plan again).
pub fn plan_export(
    store: &dyn LedgerStore,
    org_id: &str,
    scope: &ExportScope,
    options: ExportOptions,
    checkpoint: &StoredCheckpoint,
    exported_at: Timestamp,
) -> Result<ExportPlan, ExportError> {
    plan_export_within(
        store,
        org_id,
        scope,
        options,
        checkpoint,
        exported_at,
        super::DEFAULT_MAX_BUNDLE_LINE_BYTES,
    )
}

/// [`plan_export`] with the longest selection line it may plan, in bytes
/// (line end excluded): past it, [`ExportError::TooLarge`], found while
/// the selection is gathered (so a session of millions of audit events
/// is not listed whole first) and confirmed on the signed line itself.
pub fn plan_export_within(
    store: &dyn LedgerStore,
    org_id: &str,
    scope: &ExportScope,
    options: ExportOptions,
    checkpoint: &StoredCheckpoint,
    exported_at: Timestamp,
    max_selection_line: usize,
) -> Result<ExportPlan, ExportError> {
    let level = options.level.unwrap_or(DetailLevel::Full);
    if options.level == Some(DetailLevel::Full)
        && let Some(session) = first_without_consent(store, org_id, scope)?
    {
        return Err(ExportError::Consent(session));
    }
    let size = checkpoint.size;
    let consistency = match options.since_size {
        None | Some(0) => None,
        Some(old) if old == size => None,
        Some(old) if old > size => {
            return Err(ExportError::Since(format!(
                "the log's checkpoint has {size} entries, fewer than the {old} to prove consistency from"
            )));
        }
        Some(old) => Some((old, store.consistency_proof(org_id, old, size)?)),
    };
    let (server_name, server_key) = store.log_signer(org_id)?;
    // The header names the checkpoint's key and the log's other keys (a
    // convenience for verifiers that pin nothing).
    let signed_by = cairn_core::note::Note::parse(&checkpoint.note)
        .ok()
        .and_then(|note| {
            let keys = store.log_keys(org_id).ok()?;
            note.verify(&keys).ok()?.first().map(|k| (*k).clone())
        })
        .unwrap_or_else(|| server_key.clone());
    let log_keys = store
        .log_keys(org_id)?
        .into_iter()
        .filter(|k| *k != signed_by)
        .map(|k| k.to_string())
        .collect();
    let header = BundleHeader {
        server_name: server_name.clone(),
        org_id: org_id.to_owned(),
        server_key: signed_by.to_string(),
        log_keys,
        complete_log: *scope == ExportScope::All,
        exported_at,
    };
    let Some(selection_scope) = scope.selection_scope() else {
        if level < DetailLevel::Full {
            return Err(ExportError::Level(format!(
                "a bundle of the whole log carries every record whole; export sessions, an agent or a time range at level {level}"
            )));
        }
        let late = trace_erasures_after(store, org_id, size)?;
        if let Some(needed) =
            erased_after(store, org_id, size, None)?.max(traces_erased_after(&late, None))
        {
            return Err(ExportError::Stale { have: size, needed });
        }
        return Ok(ExportPlan {
            org_id: org_id.to_owned(),
            header,
            checkpoint: checkpoint.clone(),
            level,
            consistency,
            partial: None,
            sessions: 0,
        });
    };
    if server_key != *store.server_key() {
        return Err(ExportError::Mirror(org_id.to_owned()));
    }
    let mut claims = Vec::new();
    let mut seqs = Vec::new();
    let mut records: Vec<(u64, String)> = Vec::new();
    // Sets, not lists: a scope of many sessions (an agent's, a time range)
    // would otherwise be quadratic in its sessions.
    let mut agents: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut predecessors: std::collections::HashSet<Hash> = std::collections::HashSet::new();
    let mut selected: Vec<(u64, String)> = Vec::new();
    // Seals listed with their sessions, so that a predecessor's seal is
    // counted once.
    let mut listed_seals: std::collections::HashSet<u64> = std::collections::HashSet::new();
    let mut budget = SelectionBudget {
        bytes: 0,
        max: max_selection_line,
    };
    let too_large = || {
        ExportError::TooLarge(format!(
            "the signed selection of {scope} would be a bundle line longer than {max_selection_line} bytes, which verifiers do not read by default: export a narrower scope (one session, one agent, a shorter time range), a lower detail level (detailed leaves audit events and reviews out), or the whole log"
        ))
    };
    let late = trace_erasures_after(store, org_id, size)?;
    for id in sessions_in_scope(store, org_id, scope) {
        let id = id?;
        let Some(info) = store.session(org_id, &id)? else {
            continue;
        };
        if info.start_seq >= size || !selection_scope.selects(&info.header) {
            continue;
        }
        selected.push((info.start_seq, id.clone()));
        let mut steps = 0;
        let mut head = genesis_hash(&info.header);
        store.read_session(org_id, &id, &mut |step| {
            if step.seq < size {
                steps += 1;
                head = step.record.hash;
                seqs.push(step.seq);
            }
            true
        })?;
        if !budget.session(&id, steps) {
            return Err(too_large());
        }
        claims.push((
            info.start_seq,
            SessionClaim {
                session_id: id.clone(),
                steps,
                head,
            },
        ));
        // A step's erasure matters where the payload shows; a trace's at
        // every level (its trace is selected by level until withheld).
        let steps = match level {
            DetailLevel::Full => erased_after(store, org_id, size, Some(&id))?,
            _ => None,
        };
        if let Some(needed) = steps.max(traces_erased_after(&late, Some(&id))) {
            return Err(ExportError::Stale { have: size, needed });
        }
        // A session may hold any number of audit events: only the
        // positions and types of those selected are kept, and only while
        // they fit the selection line.
        let mut fits = true;
        store.visit_session_records(org_id, &id, &mut |seq, record| {
            if seq >= size {
                return true;
            }
            let wanted = match &record {
                OpRecord::SessionStart(_)
                | OpRecord::Seal(_)
                | OpRecord::Erasure(_)
                | OpRecord::TraceErasure(_) => true,
                OpRecord::Review(_) | OpRecord::AuditEvent(_) => level == DetailLevel::Full,
                OpRecord::SignedTrace(t) => level >= t.trace.level,
                OpRecord::KeyRegistration(_) | OpRecord::KeyRevocation(_) | OpRecord::LogKey(_) => {
                    false
                }
            };
            if wanted {
                if matches!(record, OpRecord::Seal(_)) {
                    listed_seals.insert(seq);
                }
                fits = budget.list(&mut records, seq, record.entry_type());
            }
            fits
        })?;
        if !fits {
            return Err(too_large());
        }
        agents.insert(info.header.agent_id.clone());
        predecessors.extend(info.header.predecessor);
    }
    if claims.is_empty() {
        return Err(ExportError::Empty(format!(
            "{scope} matches no session started before the checkpoint (size {size})"
        )));
    }
    for agent in &agents {
        for (seq, record) in store.key_records(org_id, Some(agent))? {
            if seq < size && !budget.list(&mut records, seq, record.entry_type()) {
                return Err(too_large());
            }
        }
    }
    // Every log-key record: verifiers learn the log keys' validity from
    // them (FORMAT.md 7.10, 10.4).
    for (seq, record) in all_op_records(store, org_id, "log-key")? {
        if seq < size && !budget.list(&mut records, seq, record.entry_type()) {
            return Err(too_large());
        }
    }
    if !predecessors.is_empty() {
        let mut from = 0;
        loop {
            let page = store.op_records(org_id, "seal", from, 1024)?;
            let Some(&(last, _)) = page.last() else { break };
            for (seq, record) in page {
                if let OpRecord::Seal(seal) = record
                    && seq < size
                    && predecessors.contains(&seal.final_hash)
                {
                    // Listed once (with its own session, if selected).
                    if !listed_seals.contains(&seq) && !budget.list(&mut records, seq, "seal") {
                        return Err(too_large());
                    }
                }
            }
            from = last + 1;
        }
    }
    records.sort_unstable_by_key(|(seq, _)| *seq);
    records.dedup();
    claims.sort_unstable_by_key(|(start, _)| *start);
    let selection = Selection {
        checkpoint_size: size,
        scope: selection_scope,
        level,
        sessions: claims.into_iter().map(|(_, c)| c).collect(),
        records,
    };
    let note = selection
        .sign(
            store.signer(),
            &log_origin(&server_name, org_id),
            &checkpoint.root,
        )
        .map_err(|e| StoreError::Key(e.to_string()))?;
    // The estimate above counted no escapes and no duplicates' removal:
    // the line as it will be written decides.
    if selection_line(&selection, &note).len() > max_selection_line {
        return Err(too_large());
    }
    seqs.extend(selection.records.iter().map(|(seq, _)| *seq));
    seqs.sort_unstable();
    seqs.dedup();
    Ok(ExportPlan {
        org_id: org_id.to_owned(),
        header,
        checkpoint: checkpoint.clone(),
        level,
        consistency,
        sessions: selection.sessions.len() as u64,
        partial: Some((selection, note, seqs)),
    })
}

/// What a selection's JSON takes at least, counted as it is gathered:
/// each session's claim and each listed record once, without escapes
/// (the line's fixed members and the signed note are left to the final
/// check).
struct SelectionBudget {
    bytes: usize,
    max: usize,
}

impl SelectionBudget {
    /// Counts a session's claim, `{"head":"<64 hex>","session_id":"<id>","steps":<n>},`;
    /// false once the selection is past its bound.
    fn session(&mut self, id: &str, steps: u64) -> bool {
        self.add(101 + id.len() + decimal_digits(steps))
    }

    /// Lists a record in `records` and counts it, `[<seq>,"<type>"],`;
    /// false once the selection is past its bound.
    fn list(&mut self, records: &mut Vec<(u64, String)>, seq: u64, entry_type: &str) -> bool {
        records.push((seq, entry_type.to_owned()));
        self.add(6 + decimal_digits(seq) + entry_type.len())
    }

    fn add(&mut self, bytes: usize) -> bool {
        self.bytes = self.bytes.saturating_add(bytes);
        self.bytes <= self.max
    }
}

/// How many decimal digits `n` is written with.
fn decimal_digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// The trace erasures a bundle at `size` must not miss: those logged at
/// or past `size` that withhold a signed trace below it, as (the size a
/// checkpoint needs to cover it, the session it names). Read once per
/// export (a bundle shows its entries as they are now: FORMAT.md 8).
fn trace_erasures_after(
    store: &dyn LedgerStore,
    org_id: &str,
    size: u64,
) -> Result<Vec<(u64, String)>, StoreError> {
    let mut late = Vec::new();
    let mut from = size;
    loop {
        let page = store.op_records(org_id, "trace-erasure", from, 256)?;
        let Some(&(last, _)) = page.last() else { break };
        for (seq, record) in page {
            if let OpRecord::TraceErasure(erasure) = record
                && erasure.trace_seq < size
            {
                late.push((seq + 1, erasure.session_id));
            }
        }
        from = last + 1;
    }
    Ok(late)
}

/// The size a checkpoint needs to cover the trace erasures of `late`
/// ([`trace_erasures_after`]) naming `session` (all if `None`).
fn traces_erased_after(late: &[(u64, String)], session: Option<&str>) -> Option<u64> {
    late.iter()
        .filter(|(_, named)| session.is_none_or(|s| s == named))
        .map(|(needed, _)| *needed)
        .max()
}

/// The size a checkpoint needs to cover every erasure of a step below
/// `size` (of one session's steps if given), if the checkpoint of `size`
/// does not.
fn erased_after(
    store: &dyn LedgerStore,
    org_id: &str,
    size: u64,
    session: Option<&str>,
) -> Result<Option<u64>, StoreError> {
    let mut needed = None;
    let mut from = size;
    loop {
        let page = store.op_records(org_id, "erasure", from, 256)?;
        let Some(&(last, _)) = page.last() else { break };
        for (seq, record) in page {
            let OpRecord::Erasure(erasure) = record else {
                continue;
            };
            if session.is_some_and(|s| s != erasure.session_id) {
                continue;
            }
            let erased = store.step_by_trace(org_id, &erasure.trace_id)?;
            if erased.is_some_and(|step| step.seq < size) {
                needed = needed.max(Some(seq + 1));
            }
        }
        from = last + 1;
    }
    Ok(needed)
}

/// Every operational record of one type in an org's log, in order.
fn all_op_records(
    store: &dyn LedgerStore,
    org_id: &str,
    entry_type: &str,
) -> Result<Vec<(u64, OpRecord)>, StoreError> {
    let mut out = Vec::new();
    let mut from = 0;
    loop {
        let page = store.op_records(org_id, entry_type, from, 1024)?;
        let Some(&(last, _)) = page.last() else { break };
        out.extend(page);
        from = last + 1;
    }
    Ok(out)
}

/// Writes a bundle of `scope` proven against `checkpoint` with every field
/// shown: [`plan_export`] then [`write_export`].
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
        ExportOptions::default(),
        checkpoint,
        exported_at,
        out,
        progress,
    )
}

/// [`export`] with options: a detail level (seed 004: each step shows only
/// the fields of the level, the others replaced by their commitments, so
/// the bundle still verifies and reveals nothing it hides; reviews and
/// audit events, free text, at `full` only; a complete-log bundle has no
/// lower level) and a consistency proof from an earlier size.
#[allow(clippy::too_many_arguments)]
pub fn export_at(
    store: &dyn LedgerStore,
    org_id: &str,
    scope: &ExportScope,
    options: ExportOptions,
    checkpoint: &StoredCheckpoint,
    exported_at: Timestamp,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<ExportSummary, ExportError> {
    let plan = plan_export(store, org_id, scope, options, checkpoint, exported_at)?;
    write_export(store, &plan, out, progress)
}
