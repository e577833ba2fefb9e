//! Verifying a store: an org's whole log, or one session's chain.
//!
//! Both read only the log (the `entries` rows) and the signed checkpoints:
//! derived tables (session heads, subtree hashes, the session registry's
//! counts) are never evidence. Tampering always gives a verdict naming the
//! first failing record, never a storage error: a row that does not parse
//! is a `malformed-record` at its position.

use crate::{LedgerStore, StoreError};
use cairn_core::Hash;
use cairn_core::checkpoint::{VerifiedCheckpoint, verify_checkpoint};
use cairn_core::log::{OpRecord, log_origin};
use cairn_core::note::NoteVerifier;
use cairn_core::verify::{AgentKeys, Location, LogVerifier, Reason, SessionVerifier, Verdict};
use derived::SessionTally;
use nodes::StoredNodes;
use std::collections::HashMap;

mod derived;
mod nodes;
mod repair;
mod witness;

pub use repair::{TreeRepair, repair_tree};
pub use witness::{WitnessReport, apply_witness_policy};

/// Every subtree at a stored level a verification folded, as (level,
/// index, hash): what `cairn admin repair-tree` writes.
type RebuiltNodes = Vec<(u32, u64, Hash)>;

/// The outcome of verifying an org's log in a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreVerdict {
    /// The org.
    pub org_id: String,
    /// The verdict.
    pub verdict: Verdict,
    /// The log's size: the entries read, when it verified; when it
    /// failed, the size read after verification stopped (the verdict's
    /// `records_checked` says how far it got).
    pub log_size: u64,
    /// Checkpoints checked against the log (stored and supplied).
    pub checkpoints_checked: usize,
    /// The largest checkpoint size checked.
    pub checkpoint_size: Option<u64>,
}

/// Checks a checkpoint someone kept (an auditor, a witness) before it is
/// trusted: it must be signed by one of `keys` (the store's own key if
/// empty) for this org's log. The error says why not, for a person.
pub fn trusted_checkpoint(
    store: &dyn LedgerStore,
    org_id: &str,
    note: &str,
    keys: &[NoteVerifier],
) -> Result<VerifiedCheckpoint, String> {
    let (server_name, _) = store.log_signer(org_id).map_err(|e| e.to_string())?;
    let keys = if keys.is_empty() {
        store.log_keys(org_id).map_err(|e| e.to_string())?
    } else {
        keys.to_vec()
    };
    verify_checkpoint(note, &log_origin(&server_name, org_id), &keys).map_err(|e| {
        format!(
            "the checkpoint does not verify as one of org {org_id}'s log, signed by its key: {e}"
        )
    })
}

/// The verdict on an org whose name the orgs table gives to two orgs
/// (its unique key removed): one of the two logs would be read, and
/// vouched for, in the other's place, so neither is verified. Every
/// surface gives this same verdict (SECURITY.md, "The operator's database").
pub fn repeated_org_name_verdict(org_id: &str) -> Verdict {
    Verdict::failed_before_records(
        Reason::MalformedRecord,
        format!(
            "the orgs table names org {org_id} more than once: one of the logs would stand for the other"
        ),
    )
}

impl StoreVerdict {
    /// The verdict on an org whose name the orgs table gives twice
    /// ([`repeated_org_name_verdict`]): nothing of its log was read.
    pub fn repeated_org_name(org_id: &str) -> StoreVerdict {
        StoreVerdict {
            org_id: org_id.to_owned(),
            verdict: repeated_org_name_verdict(org_id),
            log_size: 0,
            checkpoints_checked: 0,
            checkpoint_size: None,
        }
    }
}

/// Whether `e` is the store's refusal of `org_id` as a name the orgs
/// table gives twice.
fn names_repeated(e: &StoreError, org_id: &str) -> bool {
    matches!(e, StoreError::RepeatedOrgName(name) if name == org_id)
}

/// The failed verdict of `org_id` if the orgs table gives its name to two
/// orgs ([`StoreVerdict::repeated_org_name`]), looked up alone; `None` for
/// any other org. A surface that reads the org before verifying it
/// (trusted checkpoints) asks this first.
pub fn repeated_org_name(
    store: &dyn LedgerStore,
    org_id: &str,
) -> Result<Option<StoreVerdict>, StoreError> {
    match store.log_size(org_id) {
        Ok(_) => Ok(None),
        Err(e) if names_repeated(&e, org_id) => Ok(Some(StoreVerdict::repeated_org_name(org_id))),
        Err(e) => Err(e),
    }
}

/// Verifies an org's whole log: every session chain, every operational
/// record, the stored leaf of every entry, and the Merkle root at the size
/// of every stored checkpoint and of every checkpoint in `external` (ones
/// an auditor or witness kept, checked with [`trusted_checkpoint`]).
/// Signatures are checked against `keys` (the store's own server key if
/// empty). `progress` is called with the number of entries checked. An
/// org name the orgs table gives twice is a failed verdict
/// ([`repeated_org_name_verdict`]), not an error.
pub fn verify_org(
    store: &dyn LedgerStore,
    org_id: &str,
    external: &[VerifiedCheckpoint],
    keys: &[NoteVerifier],
    progress: &mut dyn FnMut(u64),
) -> Result<StoreVerdict, StoreError> {
    match verify_org_log(store, org_id, external, keys, progress, false) {
        Err(e) if names_repeated(&e, org_id) => Ok(StoreVerdict::repeated_org_name(org_id)),
        other => other.map(|(verdict, _)| verdict),
    }
}

/// [`verify_org`]'s work. With `rebuild_tree`, the stored subtree rows are
/// not compared: the verdict covers the log's records and checkpoints only
/// (the derived tables are not checked), and when they verify it comes
/// with every stored-level subtree the fold closed, which `cairn admin
/// repair-tree` writes in place of the rows.
fn verify_org_log(
    store: &dyn LedgerStore,
    org_id: &str,
    external: &[VerifiedCheckpoint],
    keys: &[NoteVerifier],
    progress: &mut dyn FnMut(u64),
    rebuild_tree: bool,
) -> Result<(StoreVerdict, Option<RebuiltNodes>), StoreError> {
    // Its first read (as every read) looks the name up alone, which
    // refuses a name given twice.
    let (server_name, _) = store.log_signer(org_id)?;
    let keys: Vec<NoteVerifier> = if keys.is_empty() {
        store.log_keys(org_id)?
    } else {
        keys.to_vec()
    };
    let origin = log_origin(&server_name, org_id);
    let mut verifier = LogVerifier::new(&server_name, org_id, keys.clone());
    let mut stored = StoredCheckpoints {
        pages: CheckpointPages::new(store, org_id).peekable(),
        origin: &origin,
        keys: &keys,
        checked: 0,
        largest: None,
    };
    for cp in external {
        verifier.expect_checkpoint(cp);
        stored.checked += 1;
        stored.largest = stored.largest.max(Some(cp.checkpoint().size));
    }
    let mut tallies = HashMap::new();
    let (count, missing_node, rebuilt) = check_entries(
        store,
        org_id,
        &mut verifier,
        &mut stored,
        &mut tallies,
        progress,
        rebuild_tree,
    )?;
    progress(count);
    let mut verdict = verifier.finish();
    // The rebuilt subtrees stand only on a log whose records verified.
    let rebuilt = rebuilt.filter(|_| verdict.verified);
    // Each session-start record was read with its sessions row; a row no
    // record names is a session listings would show that the log never
    // started. Checked once the log verifies, so that a failure of the log
    // itself (a truncated tail, say) is the one reported.
    if verdict.verified && !rebuild_tree {
        let orphans = store.orphan_sessions(org_id)?;
        if orphans > 0 {
            verdict.fail_after_records(
                Reason::MalformedRecord,
                format!(
                    "the sessions table holds {orphans} session(s) of this org that no session-start record of its log names"
                ),
            );
        }
    }
    if verdict.verified
        && !rebuild_tree
        && let Some(failure) = derived::check_session_index(store, org_id, count, &mut tallies)?
    {
        verdict.verified = false;
        verdict.failure = Some(failure);
    }
    // A subtree row missing inside the log is reported here, after the
    // log, so that it does not hide a failure of the log itself (readers
    // compute such a subtree from below: the answers stay right).
    if verdict.verified
        && !rebuild_tree
        && let Some(detail) = match missing_node {
            Some(detail) => Some(detail),
            None => match store.tree_node_anomaly(org_id)? {
                Some(detail) => Some(detail),
                None => nodes::planted_past_end(store, org_id)?,
            },
        }
    {
        verdict.fail_after_records(Reason::InclusionMismatch, detail);
    }
    // A failure stops the reading where it is found: the log's size is
    // then read on its own (a size of 16 beside a 40,000-entry log read
    // as if the log were that short).
    let log_size = match verdict.failure {
        Some(_) => count.max(store.log_size(org_id)?),
        None => count,
    };
    let verdict = StoreVerdict {
        org_id: org_id.to_owned(),
        verdict,
        log_size,
        checkpoints_checked: stored.checked,
        checkpoint_size: stored.largest,
    };
    Ok((verdict, rebuilt))
}

/// An org's stored checkpoints in size order, read a page at a time: a
/// log signs about one a second while it grows.
struct CheckpointPages<'a> {
    store: &'a dyn LedgerStore,
    org_id: &'a str,
    page: std::collections::VecDeque<crate::StoredCheckpoint>,
    /// The size the next page starts at (`None` once every one was read).
    next: Option<u64>,
}

/// Stored checkpoints read at a time.
const CHECKPOINT_PAGE: u32 = 1024;

impl<'a> CheckpointPages<'a> {
    fn new(store: &'a dyn LedgerStore, org_id: &'a str) -> Self {
        CheckpointPages {
            store,
            org_id,
            page: std::collections::VecDeque::new(),
            next: Some(0),
        }
    }
}

impl Iterator for CheckpointPages<'_> {
    type Item = Result<crate::StoredCheckpoint, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.page.is_empty() {
            let from = self.next.take()?;
            let page = match self
                .store
                .checkpoints_from(self.org_id, from, CHECKPOINT_PAGE)
            {
                Ok(page) => page,
                Err(e) => return Some(Err(e)),
            };
            self.next = match page.last() {
                Some(last) if page.len() == CHECKPOINT_PAGE as usize => last.size.checked_add(1),
                _ => None,
            };
            self.page.extend(page);
        }
        self.page.pop_front().map(Ok)
    }
}

/// The stored checkpoints of a verification, handed to the verifier
/// ahead of the entries that reach their sizes (so that none is held
/// longer than a page). Each is verified with the log keys and handed
/// over (its root expected at its size, its signer's validity required)
/// before the stream passes it.
struct StoredCheckpoints<'a> {
    pages: std::iter::Peekable<CheckpointPages<'a>>,
    origin: &'a str,
    keys: &'a [NoteVerifier],
    checked: usize,
    largest: Option<u64>,
}

impl StoredCheckpoints<'_> {
    /// Hands `verifier` every stored checkpoint of at most `through`
    /// entries not handed yet. Returns false once a stored checkpoint does
    /// not verify with the log keys (`bad-signature`, no position: the
    /// store holds a note its log key did not sign) or its row is not its
    /// note's.
    fn feed_through(
        &mut self,
        verifier: &mut LogVerifier,
        through: u64,
    ) -> Result<bool, StoreError> {
        while let Some(next) = self
            .pages
            .next_if(|next| !matches!(next, Ok(stored) if stored.size > through))
        {
            let stored = next?;
            match verify_checkpoint(&stored.note, self.origin, self.keys) {
                // The row's size and root columns are derived from the
                // note (they order and find it): believed only when they
                // are the note's.
                Ok(cp)
                    if cp.checkpoint().size != stored.size
                        || cp.checkpoint().root != stored.root =>
                {
                    verifier.fail(
                        Location::default(),
                        Reason::InconsistentCheckpoint,
                        format!(
                            "the stored checkpoint row of size {} holds a note signed for size {} and root {}",
                            stored.size,
                            cp.checkpoint().size,
                            cp.checkpoint().root
                        ),
                    );
                    return Ok(false);
                }
                Ok(cp) => {
                    verifier.expect_checkpoint(&cp);
                    verifier.require_verified_checkpoint_keys(&cp);
                    self.checked += 1;
                    self.largest = self.largest.max(Some(cp.checkpoint().size));
                }
                Err(e) => {
                    verifier.fail(
                        Location::default(),
                        Reason::BadSignature,
                        format!(
                            "the stored checkpoint of size {} does not verify with the log key: {e}",
                            stored.size
                        ),
                    );
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

/// Entries per chunk a reader of [`check_entries`] reads at a time.
const CHUNK: u64 = 512;

/// A chunk of entries with the digest recomputed for each step (the
/// costly part of checking it: the seed's salts and the digest, about 70
/// SHA-256 blocks), as `LedgerStore::read_log_for_verification` reads
/// them.
type Checked = Vec<(crate::StoredEntry, Option<Hash>)>;

/// Feeds every entry of an org's log to `verifier` in log order, returning
/// how many were read.
///
/// The log's size when the check starts is cut into chunks of [`CHUNK`]
/// entries, dealt in turn to one reader per core (at least two): each
/// reads its chunks with its own connection, decodes them and recomputes
/// their step digests; this thread takes the chunks in log order and
/// checks chains and the tree. Whatever the log holds past that size
/// (appended since, or a size the store misreports) is then read here, in
/// order, so no entry is left out. Bounded channels keep memory constant;
/// a reader whose receiver is gone stops. Checked chunks go back to the
/// reader that built them, to be freed there: glibc's malloc makes a
/// thread that frees another's blocks take that thread's arena lock for
/// every block (a third of verification's time once went to that lock).
fn check_entries(
    store: &dyn LedgerStore,
    org_id: &str,
    verifier: &mut LogVerifier,
    checkpoints: &mut StoredCheckpoints<'_>,
    tallies: &mut HashMap<i64, SessionTally>,
    progress: &mut dyn FnMut(u64),
    rebuild_tree: bool,
) -> Result<(u64, Option<String>, Option<RebuiltNodes>), StoreError> {
    use std::sync::mpsc::{Receiver, Sender, channel, sync_channel};
    let readers = std::thread::available_parallelism()
        .map_or(2, usize::from)
        .clamp(2, 8);
    let size = store.log_size(org_id)?;
    let chunks = size.div_ceil(CHUNK);
    let mut count = 0u64;
    // The stored subtree hashes, compared as the fold closes each subtree;
    // a failed read of them ends the check with that error.
    let mut nodes = StoredNodes::new(store, org_id, size);
    if rebuild_tree {
        nodes = nodes.rebuilding();
    }
    let mut node_error: Option<StoreError> = None;
    // Per session (by its row number), its steps so far (`tallies`): each
    // step's `prev_seq` column must name the last one (the first step's
    // none). Readers walk a session by that column (replays, listings,
    // session verification and exports), so a link edited to point
    // nowhere would show a shorter session while every hash held. Checked
    // after the verifier accepted the step, so that a deleted or moved
    // step is reported as the log's own failure first. The tallies are
    // compared with the derived per-session tables at the end.
    let mut check = |verifier: &mut LogVerifier,
                     stored: &crate::StoredEntry,
                     digest: Option<Hash>|
     -> bool {
        count += 1;
        if count.is_multiple_of(4096) {
            progress(count);
        }
        match &stored.entry {
            Ok(entry) => {
                // The store's own checks of the entry run inside the
                // verifier's, so that a failure counts the entry once.
                let mut store_checks =
                    |closed: &[(u32, u64, Hash)]| -> Result<(), (Reason, String)> {
                        if let (Some((sid, prev_seq)), cairn_core::log::LogRecord::Step(r)) =
                            (stored.chain_link, &entry.record)
                        {
                            let expected = tallies.entry(sid).or_default().push(
                                stored.seq,
                                r.step.step_index,
                                r.step.kind,
                            );
                            if prev_seq != expected {
                                return Err((
                                    Reason::MalformedRecord,
                                    format!(
                                        "the row of entry {} names {} as its session's previous step, where the log holds {}: readers walking the session by that column would not see all of it",
                                        stored.seq,
                                        prev_seq.map_or("none".to_owned(), |p| p.to_string()),
                                        expected.map_or("none".to_owned(), |p| p.to_string()),
                                    ),
                                ));
                            }
                        }
                        for (level, index, hash) in closed {
                            match nodes.check(*level, *index, hash) {
                                Ok(None) => {}
                                Ok(Some(detail)) => {
                                    return Err((Reason::InclusionMismatch, detail));
                                }
                                // The verdict is dropped: the read's error is
                                // the answer.
                                Err(e) => {
                                    node_error = Some(e);
                                    return Err((
                                        Reason::InclusionMismatch,
                                        "reading tree nodes failed".into(),
                                    ));
                                }
                            }
                        }
                        Ok(())
                    };
                verifier.push_stored_with_checks(entry, digest, stored.leaf, &mut store_checks)
            }
            Err(reason) => {
                verifier.fail(
                    Location {
                        seq: Some(stored.seq),
                        ..Location::default()
                    },
                    Reason::MalformedRecord,
                    format!("the row of entry {} is not a record: {reason}", stored.seq),
                );
                false
            }
        }
    };
    let finished = std::thread::scope(|scope| {
        let mut from_readers: Vec<Receiver<Result<Checked, StoreError>>> = Vec::new();
        let mut to_free: Vec<Sender<Checked>> = Vec::new();
        let mut handles = Vec::new();
        for first in 0..readers {
            let (checked_tx, checked_rx) = sync_channel::<Result<Checked, StoreError>>(4);
            let (free_tx, free_rx) = channel::<Checked>();
            from_readers.push(checked_rx);
            to_free.push(free_tx);
            handles.push(scope.spawn(move || {
                let mut n = first as u64;
                while n < chunks {
                    // Free what was checked, keeping one chunk's capacity.
                    let mut chunk = None;
                    while let Ok(mut done) = free_rx.try_recv() {
                        done.clear();
                        chunk = Some(done);
                    }
                    let mut chunk = chunk.unwrap_or_else(|| Vec::with_capacity(CHUNK as usize));
                    let from = n * CHUNK;
                    let to = (from + CHUNK).min(size);
                    let read =
                        store.read_log_for_verification(org_id, from, to, &mut |stored, digest| {
                            chunk.push((stored, digest));
                            true
                        });
                    let failed = read.is_err();
                    if checked_tx.send(read.map(|()| chunk)).is_err() || failed {
                        break;
                    }
                    n += readers as u64;
                }
                // The last chunks are freed here too, as they come back.
                drop(checked_tx);
                for done in free_rx {
                    drop(done);
                }
            }));
        }
        let mut outcome: Result<bool, StoreError> = Ok(true);
        'chunks: for n in 0..chunks {
            let which = (n % readers as u64) as usize;
            let chunk = match from_readers[which].recv() {
                Ok(Ok(chunk)) => chunk,
                Ok(Err(e)) => {
                    outcome = Err(e);
                    break;
                }
                Err(_) => {
                    outcome = Err(StoreError::Corrupt("a reading thread panicked".into()));
                    break;
                }
            };
            // The chunk's checkpoints are expected before its entries
            // pass them.
            match checkpoints.feed_through(verifier, ((n + 1) * CHUNK).min(size)) {
                Ok(true) => {}
                Ok(false) => {
                    outcome = Ok(false);
                    break 'chunks;
                }
                Err(e) => {
                    outcome = Err(e);
                    break 'chunks;
                }
            }
            for (stored, digest) in &chunk {
                if !check(verifier, stored, *digest) {
                    outcome = Ok(false);
                    break 'chunks;
                }
            }
            let _ = to_free[which].send(chunk);
        }
        drop(to_free);
        drop(from_readers);
        for handle in handles {
            if handle.join().is_err() && outcome.is_ok() {
                outcome = Err(StoreError::Corrupt("a reading thread panicked".into()));
            }
        }
        outcome
    })?;
    // Past the size read above (the log grew since): every checkpoint
    // left first, then the entries. A step read above may have been erased
    // since, its erasure record among these: an erasure of a step read
    // above is accepted as a mirror accepts one; a step read from here on
    // was read after any erasure of it, so its own is checked as always.
    if finished && checkpoints.feed_through(verifier, u64::MAX)? {
        verifier.mirror_from_here();
        store.read_log_for_verification(org_id, size, u64::MAX, &mut |stored, digest| {
            check(verifier, &stored, digest)
        })?;
    }
    if let Some(e) = node_error {
        return Err(e);
    }
    let missing = nodes.missing_row();
    Ok((count, missing, nodes.into_rebuilt()))
}

/// Checks a stored seed-004 trace's signature (the trace at log position
/// `seq`) against the agent keys as the log holds them: first the keys of
/// the trace's (hashed) agent alone ([`OrgKeys::agent_keys`]), which are
/// the only keys that may sign it; a signature they refuse, or a read of
/// them that fails, is checked again against every key record of the org,
/// so that the answer says what the org's keys say. A bad key record
/// fails the org's verification at its position; here it simply gives no
/// key.
pub fn check_trace_signature(
    store: &dyn LedgerStore,
    org_id: &str,
    trace: &cairn_core::trace::CompleteTrace,
    seq: u64,
) -> Result<Result<(), String>, StoreError> {
    let mut org = OrgKeys::default();
    if let Ok(keys) = org.agent_keys(store, org_id, &trace.agent_id_hash)
        && keys.check_trace(trace, Some(seq)).is_ok()
    {
        return Ok(Ok(()));
    }
    Ok(org.refresh(store, org_id)?.check_trace(trace, Some(seq)))
}

/// Key records read at a time by [`OrgKeys::refresh`].
const KEY_RECORDS_READ: usize = 1024;

/// An org's agent keys as far as they were read, brought up to date by
/// reading only the key records after the last one read: a listing that
/// verifies many sessions checks each against the keys as the log holds
/// them when its verification starts, as [`verify_session`] does, without
/// reading (and decoding) every key record of the org for each.
///
/// One agent's keys ([`OrgKeys::agent_keys`]) are its registrations (found
/// by their rows' `agent_id` column, each record required to name that
/// agent) and every revocation of the org, found by its `type` as the
/// org's whole read finds them, applied in log order (so a revocation
/// whose `agent_id` column was edited away from its agent still revokes,
/// and from its own position): what one session's steps or one signed
/// trace may be signed with, whatever the number of the org's other
/// agents' keys. The revocations are kept here, read once for every
/// session a listing verifies.
///
/// Each agent's keys are kept once read, and brought up to date as the
/// org's are: a listing of many sessions of one agent of many keys reads
/// and decodes that agent's registrations once, not once a session, and
/// gives each key only its own revocations (found by key id), not every
/// revocation of the org.
#[derive(Default)]
pub struct OrgKeys {
    /// Shared with the verifiers of the sessions checked against them
    /// (copied only if records arrive while one still holds them).
    keys: std::sync::Arc<AgentKeys>,
    last: Option<u64>,
    /// The org's revocations read so far, in log order.
    revocations: Vec<(u64, cairn_core::log::KeyRevocation)>,
    /// Where each key id's revocations are in `revocations`, in log order.
    revocations_of: std::collections::HashMap<String, Vec<usize>>,
    /// The position from which the org's revocations are still to be read.
    revocations_from: u64,
    /// Each agent's keys as far as they were read.
    agents: std::collections::HashMap<String, AgentKeysRead>,
}

/// One agent's keys as far as [`OrgKeys::agent_keys`] read them.
#[derive(Default)]
struct AgentKeysRead {
    keys: std::sync::Arc<AgentKeys>,
    /// The position of the last registration read.
    last: Option<u64>,
    /// How many of the org's revocations (in log order) were applied.
    revocations_applied: usize,
}

impl OrgKeys {
    /// Reads the key records appended since the last read (usually none:
    /// one look-up), a page at a time, and gives the keys.
    pub fn refresh(
        &mut self,
        store: &dyn LedgerStore,
        org_id: &str,
    ) -> Result<&std::sync::Arc<AgentKeys>, StoreError> {
        let keys = &mut self.keys;
        each_key_record(store, org_id, None, &mut self.last, &mut |seq, record| {
            let keys = std::sync::Arc::make_mut(keys);
            let _ = match record {
                OpRecord::KeyRegistration(reg) => keys.register(reg, seq),
                OpRecord::KeyRevocation(rev) => keys.revoke(rev, seq),
                _ => Ok(()),
            };
        })?;
        Ok(&self.keys)
    }

    /// The keys of agent `agent_id` as the log holds them now: its
    /// registrations, then every revocation of the org in log order (the
    /// registrations and revocations read since the last call added to
    /// those kept). A key registers once and a revocation revokes only a
    /// key registered before it, so this is what the org's keys say of the
    /// agent's, but where a forged record registers one key for two agents.
    pub fn agent_keys(
        &mut self,
        store: &dyn LedgerStore,
        org_id: &str,
        agent_id: &str,
    ) -> Result<std::sync::Arc<AgentKeys>, StoreError> {
        // The registrations first, then the revocations (a revocation is
        // appended after the registration it revokes), each from where the
        // last call stopped; what was read is kept only once all of it was.
        let mut last = self.agents.get(agent_id).and_then(|agent| agent.last);
        // Keys registered by an earlier call, which the revocations read
        // since may revoke.
        let earlier = last.is_some();
        let mut registered = Vec::new();
        each_key_record(
            store,
            org_id,
            Some(agent_id),
            &mut last,
            &mut |seq, record| {
                if let OpRecord::KeyRegistration(reg) = record {
                    registered.push((seq, reg.clone()));
                }
            },
        )?;
        self.read_revocations(store, org_id)?;
        let agent = self.agents.entry(agent_id.to_owned()).or_default();
        agent.last = last;
        let new_revocations = if earlier {
            &self.revocations[agent.revocations_applied..]
        } else {
            &[]
        };
        agent.revocations_applied = self.revocations.len();
        if registered.is_empty() && new_revocations.is_empty() {
            return Ok(std::sync::Arc::clone(&agent.keys));
        }
        let keys = std::sync::Arc::make_mut(&mut agent.keys);
        // A revocation revokes only the key id it names, registered (for
        // its agent) before it, and a key id registers once: each key's
        // own revocations in log order, applied after its registration,
        // leave what every registration and then every revocation of the
        // org in log order would.
        for (seq, reg) in &registered {
            if keys.register(reg, *seq).is_err() {
                continue;
            }
            for &at in self.revocations_of.get(&reg.key_id).into_iter().flatten() {
                let (seq, rev) = &self.revocations[at];
                let _ = keys.revoke(rev, *seq);
            }
        }
        // Revocations read since the agent's earlier keys were last
        // brought up to date (those of keys registered just now were
        // applied above; revoking a key again changes nothing).
        for (seq, rev) in new_revocations {
            let _ = keys.revoke(rev, *seq);
        }
        Ok(std::sync::Arc::clone(&agent.keys))
    }

    /// Reads the org's revocations appended since the last read.
    fn read_revocations(
        &mut self,
        store: &dyn LedgerStore,
        org_id: &str,
    ) -> Result<(), StoreError> {
        loop {
            let page = store.op_records(
                org_id,
                "key-revocation",
                self.revocations_from,
                KEY_RECORDS_READ,
            )?;
            let full = page.len() == KEY_RECORDS_READ;
            for (seq, record) in page {
                if let OpRecord::KeyRevocation(mut rev) = record {
                    // Kept for every session a listing verifies: without
                    // the reason (up to 1 KiB each), which no check reads.
                    rev.reason = String::new();
                    self.revocations_of
                        .entry(rev.key_id.clone())
                        .or_default()
                        .push(self.revocations.len());
                    self.revocations.push((seq, rev));
                }
                self.revocations_from = seq + 1;
            }
            if !full {
                return Ok(());
            }
        }
    }
}

/// Gives `each` the key records of org `org_id` (of agent `agent`, if
/// given) after position `after`, in log order, a page at a time; `after`
/// is left at the last one given.
fn each_key_record(
    store: &dyn LedgerStore,
    org_id: &str,
    agent: Option<&str>,
    after: &mut Option<u64>,
    each: &mut dyn FnMut(u64, &OpRecord),
) -> Result<(), StoreError> {
    loop {
        let page = store.key_records_page(org_id, agent, *after, KEY_RECORDS_READ)?;
        let full = page.len() == KEY_RECORDS_READ;
        for (seq, record) in &page {
            each(*seq, record);
            *after = Some(*seq);
        }
        if !full {
            return Ok(());
        }
    }
}

/// Verifies one session's chain on its own, as the log holds it: its steps
/// (found from its last step in the log, not from derived state), its
/// seal, its erasures, and the agent keys of the org. `Ok(None)` if the
/// session does not exist. Only an org verification proves that no record
/// was removed from the log; this proves the session's chain, seal and
/// erasures, and that nothing follows the last step found. An org name
/// the orgs table gives twice is a failed verdict
/// ([`repeated_org_name_verdict`]) whatever the session.
///
/// A step's signature may only be by a key of the session's agent (a step
/// of another agent fails before its signature is looked at), so the
/// session is checked against that agent's registrations and the org's
/// revocations ([`OrgKeys::agent_keys`]): its cost does not grow with the
/// org's other agents' keys. A verdict that fails on a signature, or a
/// read that fails, is computed again against every key record of the
/// org, so that what it says (a key "registered for agent B", not merely
/// "not registered") is what the org's keys say.
pub fn verify_session(
    store: &dyn LedgerStore,
    org_id: &str,
    session_id: &str,
) -> Result<Option<Verdict>, StoreError> {
    verify_session_with(store, org_id, session_id, &mut OrgKeys::default())
}

/// [`verify_session`] with the org's keys as read so far: its revocations
/// (read once, then only those appended since, for every session) and,
/// for the verdicts that must be computed again against every key of the
/// org, its key records (read, or brought up to date, only then), so many
/// sessions of one org verified in turn read each of the org's key
/// records at most once.
pub fn verify_session_with(
    store: &dyn LedgerStore,
    org_id: &str,
    session_id: &str,
    org_keys: &mut OrgKeys,
) -> Result<Option<Verdict>, StoreError> {
    if let Ok(Some(verdict)) =
        verify_session_chain(store, org_id, session_id, SessionKeys::Agent(org_keys))
        && !fails_on_a_signature(&verdict)
    {
        return Ok(Some(verdict));
    }
    match verify_session_chain(store, org_id, session_id, SessionKeys::Org(org_keys)) {
        Err(e) if names_repeated(&e, org_id) => Ok(Some(repeated_org_name_verdict(org_id))),
        other => other,
    }
}

/// Whether `verdict` failed on a signature (which the org's other keys may
/// explain differently than one agent's).
fn fails_on_a_signature(verdict: &Verdict) -> bool {
    verdict
        .failure
        .as_ref()
        .is_some_and(|failure| failure.reason == Reason::BadSignature)
}

/// The agent keys a session is checked against.
enum SessionKeys<'k> {
    /// Its agent's, read for it (with the org's revocations as read so
    /// far).
    Agent(&'k mut OrgKeys),
    /// The org's, as read so far.
    Org(&'k mut OrgKeys),
}

fn verify_session_chain(
    store: &dyn LedgerStore,
    org_id: &str,
    session_id: &str,
    keys: SessionKeys<'_>,
) -> Result<Option<Verdict>, StoreError> {
    let Some(info) = store.session(org_id, session_id)? else {
        return Ok(None);
    };
    let keys = match keys {
        SessionKeys::Agent(keys) => keys.agent_keys(store, org_id, &info.header.agent_id)?,
        SessionKeys::Org(keys) => std::sync::Arc::clone(keys.refresh(store, org_id)?),
    };
    // Only the erasures are kept (a session may hold any number of audit
    // events), without their reasons, which the check does not read (each
    // may be up to the content limit, and every step of a session may be
    // erased).
    let erasures_of = || -> Result<Vec<_>, StoreError> {
        let mut erasures = Vec::new();
        store.visit_session_records(org_id, session_id, &mut |seq, record| {
            if let OpRecord::Erasure(mut erasure) = record {
                erasure.reason = String::new();
                erasures.push((seq, erasure));
            }
            true
        })?;
        Ok(erasures)
    };
    // The erasure records are read before the steps, so a step erased in
    // between shows erased with no record for it. Its record committed
    // with the erasure, before the step was read: it is read again then
    // (on another connection), and only that step's record added.
    let erasures = erasures_of()?;
    let mut known: std::collections::HashSet<u64> =
        erasures.iter().map(|(_, e)| e.step_index).collect();
    let mut verifier = SessionVerifier::new(&info.header, keys);
    verifier.expect_erasures(erasures);
    let mut reread: Result<(), StoreError> = Ok(());
    store.read_session(org_id, session_id, &mut |step| {
        let index = step.record.step.step_index;
        // The row's erased flag only decides whether to look again: what
        // is read is the log's records, checked as always.
        if step.record.erased && !known.contains(&index) {
            match erasures_of() {
                Ok(now) => {
                    let late: Vec<_> = now
                        .into_iter()
                        .filter(|(_, e)| e.step_index == index)
                        .collect();
                    if !late.is_empty() {
                        known.insert(index);
                        verifier.expect_erasures(late);
                    }
                }
                Err(e) => {
                    reread = Err(e);
                    return false;
                }
            }
        }
        verifier.push_at(&step.record, step.seq, step.logged_at)
    })?;
    reread?;
    let expected = match &info.seal {
        Some(seal) => {
            // The log keys are read only for a seal (its note is signed
            // with one).
            let (server_name, _) = store.log_signer(org_id)?;
            let log_keys = store.log_keys(org_id)?;
            verifier.push_seal(
                seal,
                info.seal_seq,
                &log_origin(&server_name, org_id),
                &log_keys,
            );
            seal.step_count
        }
        None => info.step_count,
    };
    // The head row may only accuse: what the session holds is the log's,
    // but a head row claiming more steps than the log gives the session
    // (which honest writes never leave: the row is written with each
    // batch, and read here before the steps) means a step moved to another
    // session or removed, or the row edited.
    let head_claims = info.head_row_steps.filter(|&claimed| claimed > expected);
    let mut verdict = verifier.finish(Some(head_claims.unwrap_or(expected)));
    if let (Some(claimed), Some(failure)) = (head_claims, verdict.failure.as_mut())
        && failure.reason == Reason::MissingRecord
        && failure.at.step_index == Some(expected)
    {
        failure.detail = format!(
            "the session's head row records {claimed} steps, the log gives it {expected} (a step moved to another session or removed, or the row edited)"
        );
    }
    Ok(Some(verdict))
}
