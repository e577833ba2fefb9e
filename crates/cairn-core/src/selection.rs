//! Selection statements: what a partial bundle holds, signed by the log.
//!
//! A partial bundle (one session, an agent's sessions, a time range) proves
//! each entry's inclusion in a signed checkpoint, but inclusion alone cannot
//! show that nothing was left out. So the exporter also signs a
//! [`Selection`]: for the bundle's checkpoint, which sessions the scope
//! selects (with each one's step count and last chain hash at that
//! checkpoint) and the position and type of every other entry it includes.
//! A verifier then names anything a courier dropped (`missing-record`) or
//! added (`unlisted-entry`).
//!
//! The selection is a deterministic function of the log prefix the
//! checkpoint covers, the scope and the detail level (`docs/FORMAT.md`
//! 10.4), so an operator that signs a false one contradicts its own log;
//! [`Selector`] recomputes it from a complete log for anyone who holds one.
//!
//! ```text
//! selection_hash = SHA-256(frame("cairn/v2/selection"; JCS(selection)))
//! note text      = "cairn-selection/v2\n" origin "\n" size "\n" base64(root) "\n" base64(selection_hash) "\n"
//! ```

use crate::checkpoint::Checkpoint;
use crate::detail::DetailLevel;
use crate::hash::{Framer, Hash};
use crate::jcs;
use crate::log::{LogEntry, LogRecord, OpRecord};
use crate::note::{NoteError, NoteSigner, NoteVerifier};
use crate::record::{MAX_SAFE_INTEGER, SessionHeader, validate_id};
use crate::time::Timestamp;
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};

/// What an export selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// One session.
    Session(String),
    /// Every session of one agent (by its session header's `agent_id`).
    Agent(String),
    /// Every session whose header's `started_at` is in `[since, until)`.
    Range {
        /// Inclusive start.
        since: Timestamp,
        /// Exclusive end.
        until: Timestamp,
    },
}

impl Scope {
    /// Whether a session with this header is in scope.
    pub fn selects(&self, header: &SessionHeader) -> bool {
        match self {
            Scope::Session(id) => header.session_id == *id,
            Scope::Agent(agent) => header.agent_id == *agent,
            Scope::Range { since, until } => {
                header.started_at >= *since && header.started_at < *until
            }
        }
    }

    /// The scope's JSON form: `{"session": id}`, `{"agent": id}` or
    /// `{"since": t, "until": t}`.
    pub fn to_value(&self) -> Value {
        match self {
            Scope::Session(id) => json!({ "session": id }),
            Scope::Agent(agent) => json!({ "agent": agent }),
            Scope::Range { since, until } => {
                json!({ "since": since.to_string(), "until": until.to_string() })
            }
        }
    }

    /// Parses [`Scope::to_value`]'s form, exactly.
    pub fn from_value(value: &Value) -> Result<Scope, String> {
        let obj = value.as_object().ok_or("scope must be an object")?;
        let text = |k: &str| -> Result<String, String> {
            obj.get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("scope.{k} must be a string"))
        };
        let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        match keys.as_slice() {
            ["session"] => {
                let id = text("session")?;
                validate_id("session", &id).map_err(|e| e.to_string())?;
                Ok(Scope::Session(id))
            }
            ["agent"] => {
                let id = text("agent")?;
                validate_id("agent", &id).map_err(|e| e.to_string())?;
                Ok(Scope::Agent(id))
            }
            ["since", "until"] | ["until", "since"] => {
                let ts = |k: &str| {
                    Timestamp::parse_canonical(&text(k)?).map_err(|e| format!("scope.{k}: {e}"))
                };
                Ok(Scope::Range {
                    since: ts("since")?,
                    until: ts("until")?,
                })
            }
            _ => Err("scope must be {\"session\"}, {\"agent\"} or {\"since\", \"until\"}".into()),
        }
    }
}

/// One selected session as of the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionClaim {
    /// The session.
    pub session_id: String,
    /// Its steps with a seq below the checkpoint's size.
    pub steps: u64,
    /// The chain hash of the last of them (the genesis if none).
    pub head: Hash,
}

/// A signed statement of what a partial bundle holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The size of the checkpoint the selection is taken at.
    pub checkpoint_size: u64,
    /// What was selected.
    pub scope: Scope,
    /// The detail level steps are shown at.
    pub level: DetailLevel,
    /// The selected sessions, in the order of their `session-start` records.
    pub sessions: Vec<SessionClaim>,
    /// Every selected entry that is not a step, as `(seq, entry type)`, in
    /// increasing seq.
    pub records: Vec<(u64, String)>,
}

/// Why a selection line could not be accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectionError {
    /// The statement does not have the documented form.
    Malformed(String),
    /// The note's signature does not verify with a trusted log key.
    BadSignature(String),
    /// The note does not state this selection's hash: the statement was
    /// edited.
    Edited(String),
    /// The note speaks of another log or checkpoint.
    OtherCheckpoint(String),
}

impl Selection {
    /// Whether this (signed) selection is the `recomputed` one, where it
    /// may leave out each signed trace at a seq of `undecided` (sorted:
    /// [`Selector::undecided`]: withheld in the log recomputed from, so
    /// its level is gone), or list it if the bundle shows it (`listed`:
    /// [`crate::bundle::BundleVerdict::listed_traces`]) of a selected
    /// session at a level the selection's shows (FORMAT.md 10.4).
    pub fn is_recomputed(
        &self,
        recomputed: &Selection,
        undecided: &[u64],
        listed: &[ListedTrace],
    ) -> bool {
        let selected = |session: &str| {
            recomputed
                .sessions
                .iter()
                .any(|claim| claim.session_id == session)
        };
        let mut claimed = self.clone();
        let mut lies = false;
        // Both in increasing seq: `undecided` sorted, `listed` as read.
        claimed.records.retain(|(seq, kind)| {
            if kind != "signed-trace" || undecided.binary_search(seq).is_err() {
                return true;
            }
            let shown = listed
                .binary_search_by_key(seq, |trace| trace.seq)
                .ok()
                .map(|i| &listed[i]);
            lies |= !shown
                .is_some_and(|trace| selected(&trace.session_id) && trace.level <= self.level);
            false
        });
        !lies && claimed == *recomputed
    }

    /// The statement's JSON form (hashed with JCS).
    pub fn to_value(&self) -> Value {
        json!({
            "checkpoint_size": self.checkpoint_size,
            "scope": self.scope.to_value(),
            "level": self.level.as_str(),
            "sessions": self.sessions.iter().map(|s| json!({
                "session_id": s.session_id,
                "steps": s.steps,
                "head": s.head.to_hex(),
            })).collect::<Vec<_>>(),
            "records": self.records.iter().map(|(seq, t)| json!([seq, t])).collect::<Vec<_>>(),
        })
    }

    /// Parses [`Selection::to_value`]'s form, exactly: every member, no
    /// other, sessions unique, records in strictly increasing seq below the
    /// checkpoint size.
    pub fn from_value(value: &Value) -> Result<Selection, String> {
        let obj = value.as_object().ok_or("the selection must be an object")?;
        exact_members(
            obj,
            &["checkpoint_size", "scope", "level", "sessions", "records"],
            "selection",
        )?;
        let checkpoint_size = safe_u64(&obj["checkpoint_size"], "checkpoint_size")?;
        let scope = Scope::from_value(&obj["scope"])?;
        let level = obj["level"]
            .as_str()
            .filter(|l| *l != "full_traces")
            .and_then(DetailLevel::parse)
            .ok_or("level must be generic, detailed or full")?;
        let mut sessions = Vec::new();
        let mut seen = HashSet::new();
        for item in obj["sessions"]
            .as_array()
            .ok_or("sessions must be an array")?
        {
            let s = item
                .as_object()
                .ok_or("a session claim must be an object")?;
            exact_members(s, &["session_id", "steps", "head"], "session claim")?;
            let session_id = s["session_id"]
                .as_str()
                .ok_or("session_id must be a string")?
                .to_owned();
            validate_id("session_id", &session_id).map_err(|e| e.to_string())?;
            if !seen.insert(session_id.clone()) {
                return Err(format!("session {session_id} is listed twice"));
            }
            sessions.push(SessionClaim {
                steps: safe_u64(&s["steps"], "steps")?,
                head: s["head"]
                    .as_str()
                    .and_then(|h| Hash::from_hex(h).ok())
                    .ok_or("head must be a hex hash")?,
                session_id,
            });
        }
        let mut records = Vec::new();
        for item in obj["records"]
            .as_array()
            .ok_or("records must be an array")?
        {
            let pair = item
                .as_array()
                .filter(|p| p.len() == 2)
                .ok_or("a record must be [seq, type]")?;
            let seq = safe_u64(&pair[0], "a record's seq")?;
            let entry_type = pair[1].as_str().ok_or("a record's type must be a string")?;
            if entry_type == "step" || OpRecord::view_members(entry_type).is_none() {
                return Err(format!("{entry_type:?} is not a record type"));
            }
            if records.last().is_some_and(|(last, _)| *last >= seq) {
                return Err("records must be in strictly increasing seq".into());
            }
            if seq >= checkpoint_size {
                return Err(format!(
                    "record {seq} is beyond the checkpoint size {checkpoint_size}"
                ));
            }
            records.push((seq, entry_type.to_owned()));
        }
        Ok(Selection {
            checkpoint_size,
            scope,
            level,
            sessions,
            records,
        })
    }

    /// `SHA-256(frame("cairn/v2/selection"; JCS(selection)))`.
    pub fn hash(&self) -> Hash {
        Framer::new("cairn/v2/selection")
            .part(&jcs::to_vec(&self.to_value()))
            .finish()
    }

    /// The text the log key signs.
    pub fn note_text(&self, origin: &str, root: &Hash) -> String {
        format!(
            "cairn-selection/v2\n{origin}\n{}\n{}\n{}\n",
            self.checkpoint_size,
            root.to_base64(),
            self.hash().to_base64()
        )
    }

    /// Signs the statement for the checkpoint `(origin, size, root)`.
    pub fn sign(
        &self,
        signer: &NoteSigner,
        origin: &str,
        root: &Hash,
    ) -> Result<String, NoteError> {
        signer.sign(&self.note_text(origin, root))
    }

    /// Checks a selection line's note against the bundle's verified
    /// checkpoint and the trusted log keys.
    pub fn verify_note(
        &self,
        note: &str,
        checkpoint: &Checkpoint,
        keys: &[NoteVerifier],
    ) -> Result<(), SelectionError> {
        let text = crate::note::open(note, keys).map_err(|e| match e {
            NoteError::Malformed(_) => SelectionError::Malformed(format!("selection note: {e}")),
            _ => SelectionError::BadSignature(format!("selection note: {e}")),
        })?;
        let lines: Vec<&str> = text
            .strip_suffix('\n')
            .unwrap_or(&text)
            .split('\n')
            .collect();
        let [kind, origin, size, root, hash] = lines.as_slice() else {
            return Err(SelectionError::Malformed(
                "the selection note must have five lines".into(),
            ));
        };
        if *kind != "cairn-selection/v2" {
            return Err(SelectionError::Malformed(format!(
                "the selection note is a {kind:?}, not cairn-selection/v2"
            )));
        }
        if *origin != checkpoint.origin
            || *size != checkpoint.size.to_string()
            || *root != checkpoint.root.to_base64()
        {
            return Err(SelectionError::OtherCheckpoint(format!(
                "the selection is signed for {origin} at size {size}, the bundle's checkpoint is {} at size {}",
                checkpoint.origin, checkpoint.size
            )));
        }
        if self.checkpoint_size != checkpoint.size {
            return Err(SelectionError::OtherCheckpoint(format!(
                "the selection's checkpoint_size is {}, the bundle's checkpoint (and the selection's note) size {}",
                self.checkpoint_size, checkpoint.size
            )));
        }
        if *hash != self.hash().to_base64() {
            return Err(SelectionError::Edited(
                "the selection does not hash to what its note states: it was changed".into(),
            ));
        }
        Ok(())
    }
}

fn exact_members(obj: &Map<String, Value>, members: &[&str], what: &str) -> Result<(), String> {
    if let Some(k) = obj.keys().find(|k| !members.contains(&k.as_str())) {
        return Err(format!("unknown member {k:?} in the {what}"));
    }
    if let Some(m) = members.iter().find(|m| !obj.contains_key(**m)) {
        return Err(format!("the {what} lacks {m:?}"));
    }
    Ok(())
}

fn safe_u64(value: &Value, what: &str) -> Result<u64, String> {
    value
        .as_u64()
        .filter(|v| *v <= MAX_SAFE_INTEGER)
        .ok_or_else(|| format!("{what} must be a non-negative integer"))
}

/// A signed trace a partial bundle shows: its position, the session its
/// record names and its level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTrace {
    /// Its `seq`.
    pub seq: u64,
    /// The record's `session_id`.
    pub session_id: String,
    /// The trace's level (`full_traces` read as `full`).
    pub level: DetailLevel,
}

/// Recomputes the selection of a scope from a complete log, in two passes
/// over its entries (`docs/FORMAT.md` 10.4): the first finds the sessions
/// and what they need, the second everything else. Feed the same entries,
/// in seq order, to [`Selector::first_pass`] and then to
/// [`Selector::second_pass`]; entries at or beyond `checkpoint_size` are
/// ignored, except the trace-erasure records that tell which withheld
/// traces below it were still shown there ([`Selector::undecided`]).
#[derive(Debug)]
pub struct Selector {
    scope: Scope,
    level: DetailLevel,
    size: u64,
    /// Selected sessions by id: (position in start order, steps, head).
    sessions: HashMap<String, (usize, u64, Hash)>,
    order: Vec<String>,
    agents: HashSet<String>,
    predecessors: HashSet<Hash>,
    records: Vec<(u64, String)>,
    /// Withheld signed traces below the size.
    withheld: HashSet<u64>,
    /// The traces that trace-erasure records at or beyond the size name.
    late_erasures: HashSet<u64>,
}

impl Selector {
    /// A selector for `scope` at `level` over the log prefix of
    /// `checkpoint_size` entries.
    pub fn new(scope: Scope, level: DetailLevel, checkpoint_size: u64) -> Selector {
        Selector {
            scope,
            level,
            size: checkpoint_size,
            sessions: HashMap::new(),
            order: Vec::new(),
            agents: HashSet::new(),
            predecessors: HashSet::new(),
            records: Vec::new(),
            withheld: HashSet::new(),
            late_erasures: HashSet::new(),
        }
    }

    /// First pass: the selected sessions, their step counts and heads.
    pub fn first_pass(&mut self, entry: &LogEntry) {
        if entry.seq >= self.size {
            if let LogRecord::Op {
                record: OpRecord::TraceErasure(erasure),
                ..
            } = &entry.record
            {
                self.late_erasures.insert(erasure.trace_seq);
            }
            return;
        }
        match &entry.record {
            LogRecord::Op {
                record: OpRecord::SessionStart(header),
                ..
            } if self.scope.selects(header) && !self.sessions.contains_key(&header.session_id) => {
                let genesis = crate::commit::genesis_hash(header);
                self.sessions
                    .insert(header.session_id.clone(), (self.order.len(), 0, genesis));
                self.order.push(header.session_id.clone());
                self.agents.insert(header.agent_id.clone());
                self.predecessors.extend(header.predecessor);
                self.records.push((entry.seq, "session-start".into()));
            }
            LogRecord::Step(record) => {
                if let Some(claim) = self.sessions.get_mut(&record.step.session_id) {
                    claim.1 += 1;
                    claim.2 = record.hash;
                }
            }
            LogRecord::ErasedTrace { .. } => {
                self.withheld.insert(entry.seq);
            }
            LogRecord::Op { .. } => {}
        }
    }

    /// The traces the selection may list or not (FORMAT.md 10.4): signed
    /// traces below the size withheld in this log by a trace-erasure
    /// record at or beyond the size. The trace was shown at the size, but
    /// its session and level (which decide whether it is selected) are
    /// gone from this log; the bundle that lists one shows them
    /// ([`Selection::is_recomputed`]). Call after both passes, before
    /// [`Selector::finish`].
    pub fn undecided(&self) -> Vec<u64> {
        let mut seqs: Vec<u64> = self
            .withheld
            .intersection(&self.late_erasures)
            .copied()
            .collect();
        seqs.sort_unstable();
        seqs
    }

    /// Second pass: every other entry the selection includes.
    pub fn second_pass(&mut self, entry: &LogEntry) {
        if entry.seq >= self.size {
            return;
        }
        let LogRecord::Op { record, .. } = &entry.record else {
            return;
        };
        let mine = |session: &str| self.sessions.contains_key(session);
        let wanted = match record {
            OpRecord::SessionStart(_) => false,
            OpRecord::Seal(seal) => {
                mine(&seal.session_id) || self.predecessors.contains(&seal.final_hash)
            }
            OpRecord::Erasure(e) => mine(&e.session_id),
            // At every level, as a step's erasure; the trace it withholds
            // is never selected (an erased trace is no `LogRecord::Op`).
            OpRecord::TraceErasure(e) => mine(&e.session_id),
            OpRecord::Review(r) => self.level == DetailLevel::Full && mine(&r.session_id),
            OpRecord::AuditEvent(a) => {
                self.level == DetailLevel::Full && a.session_id.as_deref().is_some_and(mine)
            }
            OpRecord::KeyRegistration(k) => self.agents.contains(&k.agent_id),
            OpRecord::KeyRevocation(k) => self.agents.contains(&k.agent_id),
            OpRecord::SignedTrace(t) => self.level >= t.trace.level && mine(&t.session_id),
            // Every log-key record: a verifier learns the keys' validity
            // from them (7.10).
            OpRecord::LogKey(_) => true,
        };
        if wanted {
            self.records
                .push((entry.seq, record.entry_type().to_owned()));
        }
    }

    /// The selection, or `None` if the scope selects no session.
    pub fn finish(mut self) -> Option<Selection> {
        if self.order.is_empty() {
            return None;
        }
        self.records.sort_unstable_by_key(|(seq, _)| *seq);
        let sessions = self
            .order
            .iter()
            .map(|id| {
                let (_, steps, head) = self.sessions[id];
                SessionClaim {
                    session_id: id.clone(),
                    steps,
                    head,
                }
            })
            .collect();
        Some(Selection {
            checkpoint_size: self.size,
            scope: self.scope,
            level: self.level,
            sessions,
            records: self.records,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--log`'s comparison (FORMAT.md 10.4): a trace withheld in the log
    /// recomputed from may be left out, or listed if the bundle shows it
    /// of a selected session at a level the selection shows; every other
    /// difference is a lie.
    #[test]
    fn undecided_traces_are_listed_only_as_the_bundle_shows_them() {
        let claim = |session: &str| SessionClaim {
            session_id: session.into(),
            steps: 1,
            head: Hash::sha256(session.as_bytes()),
        };
        let recomputed = Selection {
            checkpoint_size: 10,
            scope: Scope::Session("a".into()),
            level: DetailLevel::Detailed,
            sessions: vec![claim("a")],
            records: vec![(0, "session-start".into())],
        };
        let listing = |seqs: &[u64]| {
            let mut selection = recomputed.clone();
            selection
                .records
                .extend(seqs.iter().map(|seq| (*seq, "signed-trace".to_owned())));
            selection
        };
        let shown = |seq: u64, session: &str, level: DetailLevel| ListedTrace {
            seq,
            session_id: session.into(),
            level,
        };
        let undecided = [3];
        // Left out, or listed as shown: both pass.
        assert!(listing(&[]).is_recomputed(&recomputed, &undecided, &[]));
        let fine = [shown(3, "a", DetailLevel::Generic)];
        assert!(listing(&[3]).is_recomputed(&recomputed, &undecided, &fine));
        // Listed, but of a level above the selection's, of another
        // session, or not shown: lies.
        for listed in [
            vec![shown(3, "a", DetailLevel::Full)],
            vec![shown(3, "b", DetailLevel::Generic)],
            vec![],
        ] {
            assert!(!listing(&[3]).is_recomputed(&recomputed, &undecided, &listed));
        }
        // A trace that is not undecided is compared as any record.
        assert!(!listing(&[4]).is_recomputed(&recomputed, &undecided, &fine));
    }
}
