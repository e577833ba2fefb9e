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
//! log says, a session has one head row at most, and no row may name a session number past every session's
//! (the next session would inherit it).
//!
//! Steps appended while verification ran are past what it read (`end`).
//! The kind rows are read before the head rows, so that a session whose
//! kind rows show a step verification did not read has a head row (read
//! later, so at least as far along) past `end`: that row must name a step
//! of its session at its index (read back from the log), and each such
//! kind row must be the kind of one of the steps after `end` (walked back
//! from that head by their links). A disagreement is a `malformed-record`
//! failure located at the session's last step verification read (none for
//! a session it read no step of).
//!
//! Memory: one [`SessionTally`] per session (about 64 bytes with the
//! map's own), whatever the tables hold; a session's id is looked up only
//! to name a failure.

use crate::{LedgerStore, SessionHeadRow, StoreError};
use cairn_core::kind::{ALL_KINDS, StepKind};
use cairn_core::log::LogRecord;
use cairn_core::verify::{Failure, Location, Reason};
use std::collections::HashMap;

/// A session's steps as verification read them from the log.
#[derive(Debug, Clone, Copy)]
pub(super) struct Steps {
    /// Where its first step is.
    pub first_seq: u64,
    /// Where its last step read is.
    pub last_seq: u64,
    /// That step's index.
    pub last_index: u64,
    /// One bit per kind it has a step of (`kind as u32`).
    pub kinds: u32,
}

/// What verification knows of one session: its steps in the log, and how
/// its derived rows stand against them.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SessionTally {
    /// Its steps among those verification read (`None`: none).
    pub steps: Option<Steps>,
    /// Kinds its kind rows name that its steps explain (as bits).
    listed: u32,
    /// Kinds its kind rows name that no step read explains (as bits):
    /// steps appended since, or a forged row.
    unexplained: u32,
    /// Its head row was read.
    head_seen: bool,
    /// Its head row points past what verification read: the seq it names.
    grown_to: Option<u64>,
}

impl SessionTally {
    /// Adds the session's next step (the first, if none yet), returning
    /// the position of the step before it (`None` for the first).
    pub fn push(&mut self, seq: u64, index: u64, kind: StepKind) -> Option<u64> {
        match &mut self.steps {
            Some(steps) => {
                let before = steps.last_seq;
                steps.last_seq = seq;
                steps.last_index = index;
                steps.kinds |= kind_bit(kind);
                Some(before)
            }
            None => {
                self.steps = Some(Steps {
                    first_seq: seq,
                    last_seq: seq,
                    last_index: index,
                    kinds: kind_bit(kind),
                });
                None
            }
        }
    }
}

fn kind_bit(kind: StepKind) -> u32 {
    1u32 << (kind as u32)
}

// One bit per kind in `Steps::kinds`.
const _: () = assert!(ALL_KINDS.len() <= 32);

/// Rows of a derived table read at a time.
const PAGE: u32 = 4096;

/// A failure about session `sid`'s derived rows.
fn fail(
    store: &dyn LedgerStore,
    org_id: &str,
    tally: &SessionTally,
    session_id: Option<&str>,
    detail: impl FnOnce(&str) -> String,
) -> Result<Failure, StoreError> {
    let name = match (session_id, tally.steps) {
        (Some(name), _) => name.to_owned(),
        (None, Some(steps)) => session_id_at(store, org_id, steps.first_seq)?,
        (None, None) => String::new(),
    };
    Ok(Failure {
        at: Location {
            seq: tally.steps.map(|s| s.last_seq),
            session_id: Some(name.clone()),
            ..Location::default()
        },
        reason: Reason::MalformedRecord,
        detail: detail(&name),
    })
}

/// Compares the org's `session_heads` and `session_kinds` rows with
/// `tallies` (every session's steps among the `end` entries verification
/// read, updated here with how its rows stand). `Some` is the first
/// disagreement, as a verdict's failure.
pub(super) fn check_session_index(
    store: &dyn LedgerStore,
    org_id: &str,
    end: u64,
    tallies: &mut HashMap<i64, SessionTally>,
) -> Result<Option<Failure>, StoreError> {
    let unattached = store.unattached_session_rows()?;
    if unattached > 0 {
        return Ok(Some(Failure {
            at: Location::default(),
            reason: Reason::MalformedRecord,
            detail: format!(
                "the store holds {unattached} session head or kind row(s) for a session number no session has yet: the next session would inherit them"
            ),
        }));
    }
    let kinds_built = read_kinds(store, org_id, tallies)?;
    if let Some(failure) = kinds_built.failure {
        return Ok(Some(failure));
    }
    if let Some(failure) = read_heads(store, org_id, end, tallies)? {
        return Ok(Some(failure));
    }
    // Sessions in log order of their first step, so that the first
    // disagreement reported is the same on every run.
    let mut order: Vec<(i64, SessionTally)> = tallies
        .iter()
        .filter(|(_, t)| t.steps.is_some())
        .map(|(sid, t)| (*sid, *t))
        .collect();
    order.sort_unstable_by_key(|(_, t)| t.steps.map(|s| s.first_seq));
    for (_, tally) in &order {
        let Some(steps) = tally.steps else { continue };
        if !tally.head_seen {
            return Ok(Some(fail(store, org_id, tally, None, |name| {
                format!(
                    "session {name} has steps in the log (entries {} to {}) but no head row: replays, retention and analyst SQL read that row",
                    steps.first_seq, steps.last_seq
                )
            })?));
        }
        let missing = steps.kinds & !tally.listed;
        if kinds_built.built && missing != 0 {
            let kinds = kind_names(missing);
            return Ok(Some(fail(store, org_id, tally, None, |name| {
                format!(
                    "session {name} has steps of kind {kinds} that its kind rows do not list: kind filters would miss it (a server of an earlier version writes no kind rows; `cairn reindex --kinds` restores them from the log)"
                )
            })?));
        }
    }
    // Kind rows no step verification read explains: each must be the kind
    // of a step its session got since.
    let mut unexplained: Vec<(i64, SessionTally)> = tallies
        .iter()
        .filter(|(_, t)| t.unexplained != 0)
        .map(|(sid, t)| (*sid, *t))
        .collect();
    unexplained.sort_unstable_by_key(|(sid, _)| *sid);
    for (sid, tally) in unexplained {
        let appended = match tally.grown_to {
            Some(head) => kinds_appended(store, org_id, sid, head, end)?,
            None => 0,
        };
        let forged = tally.unexplained & !appended;
        if forged != 0 {
            let kinds = kind_names(forged);
            return Ok(Some(fail(store, org_id, &tally, None, |name| {
                format!(
                    "session {name}'s kind rows say it has a step of kind {kinds}, where its log has none: kind filters would list it"
                )
            })?));
        }
    }
    Ok(None)
}

/// What reading the kind rows found.
struct KindsRead {
    /// Whether the store's kind rows are built at all.
    built: bool,
    /// A row that can never be right (not a kind's own name).
    failure: Option<Failure>,
}

/// Files every kind row of the org under its session's tally.
fn read_kinds(
    store: &dyn LedgerStore,
    org_id: &str,
    tallies: &mut HashMap<i64, SessionTally>,
) -> Result<KindsRead, StoreError> {
    let mut after: (i64, String) = (i64::MIN, String::new());
    loop {
        let Some(page) = store.session_kinds_page(org_id, (after.0, &after.1), PAGE)? else {
            return Ok(KindsRead {
                built: false,
                failure: None,
            });
        };
        for row in &page {
            let tally = tallies.entry(row.sid).or_default();
            let kind = row
                .kind
                .as_deref()
                .and_then(|k| StepKind::parse(k).filter(|p| p.as_str() == k));
            let Some(kind) = kind else {
                let said = row.kind.clone();
                let tally = *tally;
                let failure = fail(store, org_id, &tally, Some(&row.session_id), |name| {
                    format!(
                        "session {name}'s kind rows hold {said:?}, which is not a kind's own name: kind filters read that row"
                    )
                })?;
                return Ok(KindsRead {
                    built: true,
                    failure: Some(failure),
                });
            };
            let bit = kind_bit(kind);
            if tally.steps.is_some_and(|s| s.kinds & bit != 0) {
                tally.listed |= bit;
            } else {
                tally.unexplained |= bit;
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE as usize => {
                after = (last.sid, last.kind.clone().unwrap_or_default())
            }
            _ => {
                return Ok(KindsRead {
                    built: true,
                    failure: None,
                });
            }
        }
    }
}

/// Checks every head row of the org against its session's tally.
fn read_heads(
    store: &dyn LedgerStore,
    org_id: &str,
    end: u64,
    tallies: &mut HashMap<i64, SessionTally>,
) -> Result<Option<Failure>, StoreError> {
    // Each page after the first starts again at the last session of the
    // page before (read again, and passed over once): with the table's
    // key removed, a second row of that session would otherwise fall
    // between the two pages unread.
    let mut after = i64::MIN;
    let mut read_again: Option<i64> = None;
    loop {
        let page = store.session_heads_page(org_id, after, PAGE)?;
        for head in &page {
            let tally = tallies.entry(head.sid).or_default();
            if tally.head_seen {
                if read_again.take() == Some(head.sid) {
                    continue;
                }
                let tally = *tally;
                return Ok(Some(fail(
                    store,
                    org_id,
                    &tally,
                    Some(&head.session_id),
                    |name| {
                        format!(
                            "session {name} has more than one head row: replays, retention and analyst SQL would read either"
                        )
                    },
                )?));
            }
            let (first, last, index) = (
                head.first_seq.and_then(|n| u64::try_from(n).ok()),
                head.last_seq.and_then(|n| u64::try_from(n).ok()),
                head.last_index.and_then(|n| u64::try_from(n).ok()),
            );
            let ok = match (first, last, index) {
                (Some(first), Some(last), Some(index)) if last < end => {
                    tally.steps.is_some_and(|s| {
                        s.first_seq == first && s.last_seq == last && s.last_index == index
                    })
                }
                (Some(first), Some(last), Some(index)) => {
                    let first_ok = match tally.steps {
                        Some(s) => s.first_seq == first && index > s.last_index,
                        None => first >= end,
                    };
                    first_ok && names_step_of(store, org_id, head, last, index)?
                }
                _ => false,
            };
            if !ok {
                let tally = *tally;
                let failure = fail(store, org_id, &tally, Some(&head.session_id), |name| {
                    let log = match tally.steps {
                        Some(s) => format!(
                            "the log holds its steps from entry {} to entry {} (step {})",
                            s.first_seq, s.last_seq, s.last_index
                        ),
                        None => "the log holds no step of it".to_owned(),
                    };
                    let shown =
                        |v: Option<i64>| v.map_or("a non-integer".to_owned(), |n| n.to_string());
                    format!(
                        "session {name}'s head row says its steps run from entry {} to entry {} (step {}), where {log}: replays, retention and analyst SQL read that row",
                        shown(head.first_seq),
                        shown(head.last_seq),
                        shown(head.last_index)
                    )
                })?;
                return Ok(Some(failure));
            }
            tally.head_seen = true;
            tally.grown_to = last.filter(|last| *last >= end);
        }
        match page.last() {
            Some(last) if page.len() == PAGE as usize => {
                after = last.sid.saturating_sub(1);
                read_again = Some(last.sid);
            }
            _ => return Ok(None),
        }
    }
}

/// The names of the kinds in `bits`.
fn kind_names(bits: u32) -> String {
    ALL_KINDS
        .iter()
        .filter(|k| bits & kind_bit(**k) != 0)
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The step at `seq` as its row's chain link and the log say: its
/// session's number and the position of its step before (`None` without
/// a link), its session's id, index and kind.
struct StepAt {
    sid: Option<i64>,
    prev: Option<u64>,
    session_id: String,
    index: u64,
    kind: StepKind,
}

/// Reads the step at `seq` (`None` for an entry that is no readable
/// step).
fn step_at(store: &dyn LedgerStore, org_id: &str, seq: u64) -> Result<Option<StepAt>, StoreError> {
    let mut found = None;
    store.read_entries(org_id, &[seq], &mut |stored| {
        if let Ok(entry) = &stored.entry
            && let LogRecord::Step(r) = &entry.record
        {
            found = Some(StepAt {
                sid: stored.chain_link.map(|(sid, _)| sid),
                prev: stored.chain_link.and_then(|(_, prev)| prev),
                session_id: r.step.session_id.clone(),
                index: r.step.step_index,
                kind: r.step.kind,
            });
        }
        false
    })?;
    Ok(found)
}

/// Whether the entry at `seq` (past what verification read) is a step of
/// `head`'s session at index `index`.
fn names_step_of(
    store: &dyn LedgerStore,
    org_id: &str,
    head: &SessionHeadRow,
    seq: u64,
    index: u64,
) -> Result<bool, StoreError> {
    Ok(step_at(store, org_id, seq)?.is_some_and(|s| {
        s.sid == Some(head.sid) && s.session_id == head.session_id && s.index == index
    }))
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
        if let Some(step) = step_at(store, org_id, seq)?.filter(|s| s.sid == Some(sid)) {
            kinds |= kind_bit(step.kind);
            next = step.prev.filter(|prev| *prev < seq);
        }
    }
    Ok(kinds)
}

/// The id of the session whose step is at `seq` (for a message about a
/// session no derived row named).
fn session_id_at(store: &dyn LedgerStore, org_id: &str, seq: u64) -> Result<String, StoreError> {
    Ok(step_at(store, org_id, seq)?
        .map(|s| s.session_id)
        .unwrap_or_default())
}
