//! One writer per org across processes: the advisory lock of each org a
//! batch writes to, taken in a fixed order, and the org's sequencing state
//! loaded under it from committed data (the process's [`Cache`] of
//! frontiers and agent keys is only ever a starting point, checked there).

use super::LOCK_CLASS;
use super::connection::{Db, col, u64_of};
use super::tree::{PgTree, frontier_of};
use crate::StoreError;
use crate::engine::{AgentKey, OrgState, SessionState, blob_hash, row_id};
use cairn_core::merkle::{Frontier, leaf_hash};
use cairn_core::{Hash, Timestamp};
use postgres::GenericClient;
use std::collections::{HashMap, HashSet};

/// Leaves another process appended that a batch reads to catch its cached
/// frontier up; beyond this it rebuilds the frontier from stored subtrees.
const CATCH_UP_LIMIT: u64 = 1 << 16;

/// Session states [`OwnSessions`] keeps, all orgs together, before it
/// starts over (about 25 MB; the states are then read again).
const OWN_SESSIONS_KEPT: usize = 100_000;

/// What a process remembers between batches. Only ever a cache: a batch
/// checks it against the database under the org's lock.
#[derive(Default)]
pub(super) struct Cache {
    /// Each org's frontier as of some committed size.
    pub(super) frontiers: HashMap<i64, Frontier>,
    /// Registered agent keys of each org, as its committed log held them
    /// below some size (another server may have added key records since:
    /// each batch that needs the org's keys reads the records past that
    /// size under the org's lock, [`OrgKeys`]).
    pub(super) keys: HashMap<i64, OrgKeys>,
    /// Orgs another process appended to between this one's last two
    /// batches: a batch reads their sessions before taking the lock
    /// (shortening the time it holds it); for an org only this process
    /// writes that read would be one more round trip and nothing gained.
    pub(super) shared: HashSet<String>,
    /// The sessions this process's batches wrote, by org name.
    sessions: HashMap<String, OwnSessions>,
    /// How many states `sessions` holds, all orgs together (counted as
    /// they come and go, so that the bound costs no walk of every org on
    /// each batch).
    kept_sessions: usize,
}

/// An org's agent keys as its committed log registers and revokes them
/// in its first `size` entries.
#[derive(Default)]
pub(super) struct OrgKeys {
    /// The log size the keys were read up to.
    pub(super) size: u64,
    /// By key id.
    pub(super) keys: HashMap<String, AgentKey>,
}

/// The states of sessions as this process's committed batches left them,
/// of one org, every one of them current at the org's log size `size`: a
/// batch takes a session from here instead of reading it (one query per
/// batch, and the read of its last step) as long as no entry appended
/// after `size` by another process names it. Under the org's lock, the
/// entries a batch catches its frontier up with are exactly those (from
/// the cached frontier's size, which is this `size`), and they carry the
/// `sid` of every session they change (its start, a step, its seal):
/// [`OwnSessions::catch_up`] drops those sessions.
#[derive(Default)]
pub(super) struct OwnSessions {
    size: u64,
    states: HashMap<String, SessionState>,
    /// Each kept session's id by its `sid`, to drop the sessions entries
    /// name without going through every state under the lock.
    ids: HashMap<i64, String>,
}

impl OwnSessions {
    /// Brings the states from `size` to `caught.to` under the org's lock:
    /// the sessions the entries read since name are dropped; if those
    /// entries are not all the log holds after `size` (the frontier was
    /// rebuilt from a checkpoint instead), every state is.
    fn catch_up(&mut self, caught: &CaughtUp) {
        if self.size != caught.from {
            self.states.clear();
            self.ids.clear();
        } else {
            for sid in caught.sessions.iter().filter_map(|(_, sid)| *sid) {
                if let Some(id) = self.ids.remove(&sid) {
                    self.states.remove(&id);
                }
            }
        }
        self.size = caught.to;
    }

    /// Keeps `state`, session `session_id`'s as a committed batch left it.
    fn keep(&mut self, session_id: String, state: SessionState) {
        self.ids.insert(state.sid, session_id.clone());
        self.states.insert(session_id, state);
    }

    /// A session's state, if kept.
    pub(super) fn get(&self, session_id: &str) -> Option<&SessionState> {
        self.states.get(session_id)
    }
}

impl Cache {
    /// The sessions kept of org `name`, if any.
    pub(super) fn own_sessions(&self, name: &str) -> Option<&OwnSessions> {
        self.sessions.get(name)
    }

    /// Brings org `name`'s kept sessions up to the log as a batch caught
    /// up with it under the org's lock ([`OwnSessions::catch_up`]).
    pub(super) fn catch_up_sessions(&mut self, name: &str, caught: &CaughtUp) {
        let own = self.sessions.entry(name.to_owned()).or_default();
        let before = own.states.len();
        own.catch_up(caught);
        self.kept_sessions -= before - own.states.len();
    }

    /// Whether org `name`'s session `session_id` is kept (it may still be
    /// dropped under the lock).
    pub(super) fn keeps_session(&self, name: &str, session_id: &str) -> bool {
        self.sessions
            .get(name)
            .is_some_and(|own| own.states.contains_key(session_id))
    }

    /// Keeps what a committed batch left: each org it grew is at its new
    /// size, with the states of the sessions the batch wrote.
    pub(super) fn keep_sessions(
        &mut self,
        orgs: &HashMap<String, OrgState>,
        sessions: HashMap<(i64, String), SessionState>,
    ) {
        let mut names = HashMap::with_capacity(orgs.len());
        for (name, org) in orgs {
            let own = self.sessions.entry(name.clone()).or_default();
            // Whatever it held is current at the size the batch started
            // from (set under the lock); the batch's own entries changed
            // only the sessions it returns.
            own.size = org.frontier.size();
            names.insert(org.id, name.as_str());
        }
        for ((org, session_id), state) in sessions {
            if let Some(own) = names
                .get(&org)
                .and_then(|name| self.sessions.get_mut(*name))
            {
                let before = own.states.len();
                own.keep(session_id, state);
                self.kept_sessions += own.states.len() - before;
            }
        }
        if self.kept_sessions > OWN_SESSIONS_KEPT {
            self.sessions.clear();
            self.kept_sessions = 0;
        }
    }
}

/// The advisory-lock key of an org name (SHA-256 based, so every process
/// and every version computes the same one).
fn lock_key(name: &str) -> i32 {
    let h = Hash::sha256(format!("cairn/org-lock\0{name}").as_bytes()).0;
    i32::from_be_bytes([h[0], h[1], h[2], h[3]])
}

/// Takes the locks of `names` in key order, so that two batches can never
/// wait on each other.
pub(super) fn lock_orgs<C: GenericClient>(
    db: &mut Db<'_, C>,
    names: &HashSet<String>,
) -> Result<(), StoreError> {
    let mut keys: Vec<i32> = names.iter().map(|n| lock_key(n)).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        db.execute(
            "SELECT pg_advisory_xact_lock($1, $2)",
            &[&LOCK_CLASS, &key],
            "locking an org",
        )?;
    }
    Ok(())
}

/// The entries a batch read under its org's lock to catch its frontier
/// up: those from `from` to the log's size, each with the session it
/// concerns, if any.
pub(super) struct CaughtUp {
    pub(super) from: u64,
    pub(super) to: u64,
    /// `(seq, sid)` of each entry read, in order.
    pub(super) sessions: Vec<(u64, Option<i64>)>,
}

/// Loads a locked org's state from committed data, catching the cached
/// frontier up with what other processes appended (which it returns).
pub(super) fn load_org<C: GenericClient>(
    db: &mut Db<'_, C>,
    cache: &mut Cache,
    name: &str,
) -> Result<Option<(OrgState, CaughtUp)>, StoreError> {
    let Some(row) = db.query_opt(
        "SELECT o.org, EXISTS (SELECT 1 FROM org_origins g WHERE g.org = o.org),
           m.id, c.size, c.created_at, c.root, (SELECT logged_at FROM entries WHERE id = m.id)
         FROM orgs o
         LEFT JOIN LATERAL (
           SELECT max(e.id) AS id FROM entries e WHERE e.id >= (o.org << 40) AND e.id < ((o.org + 1) << 40)
         ) m ON TRUE
         LEFT JOIN LATERAL (
           SELECT size, created_at, root FROM checkpoints c WHERE c.org = o.org ORDER BY size DESC LIMIT 1
         ) c ON TRUE
         WHERE o.name = $1",
        &[&name],
        "loading an org",
    )?
    else {
        return Ok(None);
    };
    let id: i64 = col(&row, 0)?;
    let foreign: bool = col(&row, 1)?;
    let max_id: Option<i64> = col(&row, 2)?;
    let size = max_id.map_or(0, |max| u64_of(max - (id << 40)) + 1);
    let checkpoint_size: Option<i64> = col(&row, 3)?;
    let checkpoint_at: Option<i64> = col(&row, 4)?;
    let checkpoint_root: Option<Vec<u8>> = col(&row, 5)?;
    let last_logged: Option<i64> = col(&row, 6)?;
    let signed = checkpoint_size.map_or(0, u64_of);
    if signed > size {
        return Err(StoreError::Corrupt(format!(
            "the log of org {name} holds {size} entries, fewer than its latest signed checkpoint ({signed}): entries were removed"
        )));
    }
    // A cached frontier was folded from checked leaves; otherwise start at
    // the latest signed checkpoint, whose root the stored subtrees must
    // give. Either way the leaves after it are folded again from their rows.
    let cached = cache
        .frontiers
        .get(&id)
        .filter(|f| f.size() <= size && f.size() >= signed && size - f.size() <= CATCH_UP_LIMIT);
    let mut frontier = match cached {
        Some(f) => f.clone(),
        None => {
            let tree_db = Db {
                client: &mut *db.client,
                statements: &mut *db.statements,
            };
            let frontier = frontier_of(&PgTree::new(tree_db, id, signed))?;
            if let Some(root) = checkpoint_root
                && frontier.root() != blob_hash(root)?
            {
                return Err(StoreError::Corrupt(format!(
                    "the stored tree of org {name} does not give the root its latest checkpoint signed (size {signed})"
                )));
            }
            frontier
        }
    };
    let mut caught_up = CaughtUp {
        from: frontier.size(),
        to: size,
        sessions: Vec::new(),
    };
    if frontier.size() < size {
        let rows = db.query(
            "SELECT seq, type, record_hash, logged_at, leaf_hash, sid FROM entries
             WHERE id >= $1 AND id < $2 ORDER BY id",
            &[&row_id(id, frontier.size()), &row_id(id, size)],
            "catching up with the log",
        )?;
        for row in &rows {
            let seq: i64 = col(row, 0)?;
            let entry_type: String = col(row, 1)?;
            let record = blob_hash(col(row, 2)?)?;
            let logged_at = Timestamp::from_micros(col(row, 3)?)
                .ok_or_else(|| StoreError::Corrupt("a logged time out of range".into()))?;
            let leaf = leaf_hash(&cairn_core::log::log_leaf_data(
                u64_of(seq),
                &entry_type,
                &record,
                logged_at,
            ));
            if u64_of(seq) != frontier.size() || leaf != blob_hash(col(row, 4)?)? {
                return Err(StoreError::Corrupt(format!(
                    "entry {seq} of org {name} does not match its stored leaf or follows a gap"
                )));
            }
            frontier.push(leaf);
            caught_up.sessions.push((u64_of(seq), col(row, 5)?));
        }
        if frontier.size() != size {
            return Err(StoreError::Corrupt(format!(
                "the log of org {name} has a gap before seq {size}"
            )));
        }
    }
    cache.frontiers.insert(id, frontier.clone());
    let org = OrgState {
        id,
        foreign,
        frontier,
        checkpoint_size: signed,
        checkpoint_at: checkpoint_at.and_then(Timestamp::from_micros),
        last_logged: last_logged
            .and_then(Timestamp::from_micros)
            .unwrap_or_default(),
    };
    Ok(Some((org, caught_up)))
}

#[cfg(test)]
mod tests {
    use super::{Cache, CaughtUp, OwnSessions};
    use crate::engine::{OrgState, SessionState};
    use std::collections::HashMap;

    fn state(sid: i64) -> SessionState {
        SessionState {
            sid,
            agent_id: "agent".into(),
            profile: cairn_core::record::Profile::default(),
            max_clock_skew_s: 0,
            next_index: 1,
            head: cairn_core::Hash::sha256(b"head"),
            sealed: false,
            first_seq: Some(0),
            last_seq: Some(0),
            last_created: None,
            last_kind: None,
            known_kinds: 0,
        }
    }

    fn kept(size: u64) -> OwnSessions {
        let mut own = OwnSessions {
            size,
            ..OwnSessions::default()
        };
        own.keep("a".into(), state(1));
        own.keep("b".into(), state(2));
        own
    }

    /// The sessions the entries caught up with name are dropped, the
    /// others kept; a catch-up from another size drops them all.
    #[test]
    fn a_catch_up_drops_the_sessions_its_entries_name() {
        let mut own = kept(10);
        own.catch_up(&CaughtUp {
            from: 10,
            to: 13,
            sessions: vec![(10, Some(2)), (11, None), (12, Some(7))],
        });
        assert!(own.get("a").is_some());
        assert!(own.get("b").is_none());
        assert_eq!(own.size, 13);

        let mut own = kept(10);
        own.catch_up(&CaughtUp {
            from: 8,
            to: 13,
            sessions: Vec::new(),
        });
        assert!(own.get("a").is_none() && own.get("b").is_none());
        assert_eq!(own.size, 13);
    }

    /// The states kept are counted as batches keep them and catch-ups
    /// drop them, and past the bound all are forgotten.
    #[test]
    fn kept_sessions_are_counted_and_bounded() {
        let mut cache = Cache::default();
        let org = OrgState {
            id: 1,
            foreign: false,
            frontier: cairn_core::merkle::Frontier::new(),
            checkpoint_size: 0,
            checkpoint_at: None,
            last_logged: cairn_core::Timestamp::default(),
        };
        let orgs = HashMap::from([("acme".to_owned(), org)]);
        let batch = |sids: std::ops::Range<i64>| -> HashMap<(i64, String), SessionState> {
            sids.map(|sid| ((1, format!("s{sid}")), state(sid)))
                .collect()
        };
        cache.keep_sessions(&orgs, batch(0..3));
        cache.keep_sessions(&orgs, batch(2..5));
        assert_eq!(cache.kept_sessions, 5);
        cache.catch_up_sessions(
            "acme",
            &CaughtUp {
                from: 0,
                to: 2,
                sessions: vec![(0, Some(1)), (1, Some(3))],
            },
        );
        assert_eq!(cache.kept_sessions, 3);
        assert!(cache.keeps_session("acme", "s0") && !cache.keeps_session("acme", "s1"));
        cache.keep_sessions(&orgs, batch(10..super::OWN_SESSIONS_KEPT as i64 + 8));
        assert_eq!(cache.kept_sessions, 0);
        assert!(!cache.keeps_session("acme", "s0"));
    }
}
