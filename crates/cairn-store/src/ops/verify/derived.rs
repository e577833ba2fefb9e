//! The derived per-session tables compared with the log at the end of an
//! org's verification.
//!
//! `session_heads` (where each session's walk starts, how many steps
//! analyst SQL says it has, which sessions retention finds expired) and
//! `session_kinds` (which sessions a kind filter lists) are written in the
//! transaction of the steps they describe and never believed as evidence,
//! but readers use them: a head row deleted or moved back, or a kind row
//! added or removed, changed answers while every hash held. Verification
//! tallies each session's steps as the log holds them ([`SessionTally`])
//! and then reads both tables page by page: every row must say what the
//! log says.
//!
//! Steps appended while verification ran are past what it read (`end`):
//! a head row pointing there must name a step of its session at its index
//! (read back from the log), and a kind row no step before `end` explains
//! must be the kind of one of the steps after it (walked back from that
//! head by their links). A disagreement is a `malformed-record` failure
//! located at the session's last step verification read (none for a
//! session it read no step of).

use crate::{LedgerStore, StoreError};
use cairn_core::kind::{ALL_KINDS, StepKind};
use cairn_core::log::LogRecord;
use cairn_core::verify::{Failure, Location, Reason};
use std::collections::HashMap;

/// What verification saw of one session's steps in the log.
#[derive(Debug, Clone, Copy)]
pub(super) struct SessionTally {
    /// Where its first step is.
    pub first_seq: u64,
    /// Where its last step read is.
    pub last_seq: u64,
    /// That step's index.
    pub last_index: u64,
    /// One bit per kind it has a step of (`kind as u32`).
    pub kinds: u32,
}

impl SessionTally {
    /// A session's tally from its first step.
    pub fn first(seq: u64, index: u64, kind: StepKind) -> Self {
        SessionTally {
            first_seq: seq,
            last_seq: seq,
            last_index: index,
            kinds: kind_bit(kind),
        }
    }

    /// Adds the session's next step.
    pub fn push(&mut self, seq: u64, index: u64, kind: StepKind) {
        self.last_seq = seq;
        self.last_index = index;
        self.kinds |= kind_bit(kind);
    }
}

fn kind_bit(kind: StepKind) -> u32 {
    1u32 << (kind as u32)
}

// One bit per kind in `SessionTally::kinds`.
const _: () = assert!(ALL_KINDS.len() <= 32);

/// Rows of a derived table read at a time.
const PAGE: u32 = 4096;

/// How a session stands against its derived rows.
#[derive(Default)]
struct Standing {
    /// Its head row was read.
    head_seen: bool,
    /// Its head row points past what verification read (steps appended
    /// since): the seq that row names.
    grown_to: Option<u64>,
    /// Kinds its kind rows name (as bits).
    kinds_listed: u32,
    /// Kind rows no step verification read explains (the session grew).
    unexplained: Vec<String>,
}

/// Compares the org's `session_heads` and `session_kinds` rows with
/// `tallies` (every session's steps among the `end` entries verification
/// read). `Some` is the first disagreement, as a verdict's failure.
pub(super) fn check_session_index(
    store: &dyn LedgerStore,
    org_id: &str,
    end: u64,
    tallies: &HashMap<i64, SessionTally>,
) -> Result<Option<Failure>, StoreError> {
    let fail = |session_id: &str, seq: Option<u64>, detail: String| Failure {
        at: Location {
            seq,
            session_id: Some(session_id.to_owned()),
            ..Location::default()
        },
        reason: Reason::MalformedRecord,
        detail,
    };
    let mut standing: HashMap<i64, Standing> = HashMap::new();
    let mut names: HashMap<i64, String> = HashMap::new();
    // Kind rows first, head rows after: a kind row no step verification
    // read explains must then belong to a session whose head row (read
    // later, so at least as far along) points past what it read.
    let mut after: (i64, String) = (i64::MIN, String::new());
    loop {
        let page = store.session_kinds_page(org_id, (after.0, &after.1), PAGE)?;
        for row in &page {
            let kind = StepKind::parse(&row.kind).filter(|k| k.as_str() == row.kind);
            let in_log = match (kind, tallies.get(&row.sid)) {
                (Some(kind), Some(t)) => t.kinds & kind_bit(kind) != 0,
                _ => false,
            };
            let entry = standing.entry(row.sid).or_default();
            names
                .entry(row.sid)
                .or_insert_with(|| row.session_id.clone());
            if in_log {
                entry.kinds_listed |= kind.map_or(0, kind_bit);
            } else {
                entry.unexplained.push(row.kind.clone());
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE as usize => after = (last.sid, last.kind.clone()),
            _ => break,
        }
    }
    let mut after = i64::MIN;
    loop {
        let page = store.session_heads_page(org_id, after, PAGE)?;
        for head in &page {
            let tally = tallies.get(&head.sid);
            let (first, last, index) = (
                u64::try_from(head.first_seq).ok(),
                u64::try_from(head.last_seq).ok(),
                u64::try_from(head.last_index).ok(),
            );
            let said = format!(
                "session {}'s head row says its steps run from entry {} to entry {} (step {})",
                head.session_id, head.first_seq, head.last_seq, head.last_index
            );
            let ok = match (first, last, index) {
                (Some(first), Some(last), Some(index)) if last < end => tally.is_some_and(|t| {
                    t.first_seq == first && t.last_seq == last && t.last_index == index
                }),
                (Some(first), Some(last), Some(index)) => {
                    let first_ok = match tally {
                        Some(t) => t.first_seq == first && index > t.last_index,
                        None => first >= end,
                    };
                    first_ok && names_step_of(store, org_id, head, last, index)?
                }
                _ => false,
            };
            if !ok {
                let log = match tally {
                    Some(t) => format!(
                        "the log holds its steps from entry {} to entry {} (step {})",
                        t.first_seq, t.last_seq, t.last_index
                    ),
                    None => "the log holds no step of it".to_owned(),
                };
                return Ok(Some(fail(
                    &head.session_id,
                    tally.map(|t| t.last_seq),
                    format!(
                        "{said}, where {log}: replays, retention and analyst SQL read that row"
                    ),
                )));
            }
            let entry = standing.entry(head.sid).or_default();
            entry.head_seen = true;
            entry.grown_to = last.filter(|last| *last >= end);
            names.insert(head.sid, head.session_id.clone());
        }
        match page.last() {
            Some(last) if page.len() == PAGE as usize => after = last.sid,
            _ => break,
        }
    }
    // Sessions in log order of their first step, so that the first
    // disagreement reported is the same on every run.
    let mut order: Vec<(&i64, &SessionTally)> = tallies.iter().collect();
    order.sort_unstable_by_key(|(_, t)| t.first_seq);
    for (sid, tally) in order {
        let name = match names.get(sid) {
            Some(name) => name.clone(),
            None => store_session_id(store, org_id, tally.first_seq)?,
        };
        let Some(standing) = standing.get(sid).filter(|s| s.head_seen) else {
            return Ok(Some(fail(
                &name,
                Some(tally.last_seq),
                format!(
                    "session {name} has steps in the log (entries {} to {}) but no head row: replays, retention and analyst SQL read that row",
                    tally.first_seq, tally.last_seq
                ),
            )));
        };
        let missing = tally.kinds & !standing.kinds_listed;
        if missing != 0 {
            let kinds: Vec<&str> = ALL_KINDS
                .iter()
                .filter(|k| missing & kind_bit(**k) != 0)
                .map(|k| k.as_str())
                .collect();
            return Ok(Some(fail(
                &name,
                Some(tally.last_seq),
                format!(
                    "session {name} has steps of kind {} that its kind rows do not list: kind filters would miss it",
                    kinds.join(", ")
                ),
            )));
        }
    }
    // Kind rows no step verification read explains: each must be the kind
    // of a step its session got since.
    let mut unexplained: Vec<(&i64, &Standing)> = standing
        .iter()
        .filter(|(_, s)| !s.unexplained.is_empty())
        .collect();
    unexplained.sort_unstable_by_key(|(sid, _)| **sid);
    for (sid, standing) in unexplained {
        let appended = match standing.grown_to {
            Some(head) => kinds_appended(store, org_id, *sid, head, end)?,
            None => 0,
        };
        if let Some(kind) = standing.unexplained.iter().find(|k| {
            !StepKind::parse(k).is_some_and(|p| p.as_str() == *k && appended & kind_bit(p) != 0)
        }) {
            let name = names.get(sid).cloned().unwrap_or_default();
            return Ok(Some(fail(
                &name,
                tallies.get(sid).map(|t| t.last_seq),
                format!(
                    "session {name}'s kind rows say it has a step of kind {kind:?}, where its log has none: kind filters would list it"
                ),
            )));
        }
    }
    Ok(None)
}

/// Whether the entry at `seq` (past what verification read) is a step of
/// `head`'s session at index `index`.
fn names_step_of(
    store: &dyn LedgerStore,
    org_id: &str,
    head: &crate::SessionHeadRow,
    seq: u64,
    index: u64,
) -> Result<bool, StoreError> {
    let mut found = false;
    store.read_entries(org_id, &[seq], &mut |stored| {
        found = stored.chain_link.is_some_and(|(sid, _)| sid == head.sid)
            && matches!(&stored.entry, Ok(entry) if matches!(&entry.record,
                LogRecord::Step(r) if r.step.session_id == head.session_id && r.step.step_index == index));
        false
    })?;
    Ok(found)
}

/// The kinds (as bits) of session `sid`'s steps at or after `end`, walked
/// back from its step at `head` by each step's link.
fn kinds_appended(
    store: &dyn LedgerStore,
    org_id: &str,
    sid: i64,
    head: u64,
    end: u64,
) -> Result<u32, StoreError> {
    let mut kinds = 0;
    let mut next = Some(head);
    while let Some(seq) = next.filter(|seq| *seq >= end) {
        next = None;
        store.read_entries(org_id, &[seq], &mut |stored| {
            if let (Some((row_sid, prev)), Ok(entry)) = (stored.chain_link, &stored.entry)
                && let LogRecord::Step(r) = &entry.record
                && row_sid == sid
            {
                kinds |= kind_bit(r.step.kind);
                next = prev.filter(|prev| *prev < seq);
            }
            false
        })?;
    }
    Ok(kinds)
}

/// The id of the session whose first step is at `seq` (for a message
/// about a session no derived row named).
fn store_session_id(store: &dyn LedgerStore, org_id: &str, seq: u64) -> Result<String, StoreError> {
    let mut name = String::new();
    store.read_entries(org_id, &[seq], &mut |stored| {
        if let Ok(entry) = &stored.entry
            && let LogRecord::Step(r) = &entry.record
        {
            name = r.step.session_id.clone();
        }
        false
    })?;
    Ok(name)
}
