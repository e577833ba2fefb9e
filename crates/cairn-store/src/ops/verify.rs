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
use cairn_core::log::{LogRecord, OpRecord, log_origin};
use cairn_core::note::NoteVerifier;
use cairn_core::verify::{
    AgentKeys, Failure, Location, LogVerifier, Reason, SessionVerifier, Verdict,
};

/// The outcome of verifying an org's log in a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreVerdict {
    /// The org.
    pub org_id: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Entries read from the log.
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

/// Verifies an org's whole log: every session chain, every operational
/// record, the stored leaf of every entry, and the Merkle root at the size
/// of every stored checkpoint and of every checkpoint in `external` (ones
/// an auditor or witness kept, checked with [`trusted_checkpoint`]).
/// Signatures are checked against `keys` (the store's own server key if
/// empty). `progress` is called with the number of entries checked.
pub fn verify_org(
    store: &dyn LedgerStore,
    org_id: &str,
    external: &[VerifiedCheckpoint],
    keys: &[NoteVerifier],
    progress: &mut dyn FnMut(u64),
) -> Result<StoreVerdict, StoreError> {
    let (server_name, _) = store.log_signer(org_id)?;
    let keys: Vec<NoteVerifier> = if keys.is_empty() {
        store.log_keys(org_id)?
    } else {
        keys.to_vec()
    };
    let origin = log_origin(&server_name, org_id);
    let mut verifier = LogVerifier::new(&server_name, org_id, keys.clone());
    let mut checked = 0;
    let mut largest = None;
    for stored in store.checkpoints(org_id)? {
        match verify_checkpoint(&stored.note, &origin, &keys) {
            Ok(cp) => {
                verifier.expect_checkpoint(&cp);
                verifier.require_checkpoint_keys(&stored.note, stored.size);
                checked += 1;
                largest = largest.max(Some(cp.checkpoint().size));
            }
            Err(e) => {
                let failure = Failure {
                    at: Location::default(),
                    reason: Reason::BadSignature,
                    detail: format!(
                        "the stored checkpoint of size {} does not verify with the log key: {e}",
                        stored.size
                    ),
                };
                return Ok(StoreVerdict {
                    org_id: org_id.to_owned(),
                    verdict: Verdict {
                        verified: false,
                        records_checked: 0,
                        last_valid: None,
                        failure: Some(failure),
                    },
                    log_size: 0,
                    checkpoints_checked: checked,
                    checkpoint_size: None,
                });
            }
        }
    }
    for cp in external {
        verifier.expect_checkpoint(cp);
        checked += 1;
        largest = largest.max(Some(cp.checkpoint().size));
    }
    // A three-stage pipeline on scoped threads: read rows, recompute step
    // digests (the costly part), verify chains and the tree in order. The
    // bounded channels keep memory constant; dropping a receiver stops the
    // stages before it. Checked chunks go back to the reading thread to be
    // freed there: the rows were allocated on it, and glibc's malloc makes
    // a thread that frees another's blocks take that thread's arena lock
    // for every block (a third of verification's time went to that lock).
    const CHUNK: usize = 512;
    type Chunk = Vec<(crate::StoredEntry, Option<Hash>)>;
    let mut count = 0u64;
    let read_result = std::thread::scope(|scope| {
        let (raw_tx, raw_rx) = std::sync::mpsc::sync_channel::<Chunk>(4);
        let (hashed_tx, hashed_rx) = std::sync::mpsc::sync_channel::<Chunk>(4);
        let (checked_tx, checked_rx) = std::sync::mpsc::channel::<Chunk>();
        let reader = scope.spawn(move || {
            let mut chunk: Chunk = Vec::with_capacity(CHUNK);
            store.read_log(org_id, 0, u64::MAX, &mut |entry| {
                chunk.push((entry, None));
                if chunk.len() == CHUNK {
                    // Free what was checked, reusing one chunk's capacity.
                    let mut next = None;
                    while let Ok(mut checked) = checked_rx.try_recv() {
                        checked.clear();
                        next = Some(checked);
                    }
                    let next = next.unwrap_or_else(|| Vec::with_capacity(CHUNK));
                    let full = std::mem::replace(&mut chunk, next);
                    if raw_tx.send(full).is_err() {
                        return false;
                    }
                }
                true
            })?;
            if !chunk.is_empty() {
                let _ = raw_tx.send(chunk);
            }
            drop(raw_tx);
            // The last chunks are freed here too, as they come back.
            for checked in checked_rx {
                drop(checked);
            }
            Ok::<(), StoreError>(())
        });
        scope.spawn(move || {
            for mut chunk in raw_rx {
                for (stored, digest) in &mut chunk {
                    if let Ok(entry) = &stored.entry
                        && let LogRecord::Step(record) = &entry.record
                    {
                        *digest = Some(record.recompute_digest());
                    }
                }
                if hashed_tx.send(chunk).is_err() {
                    break;
                }
            }
        });
        'chunks: for chunk in &hashed_rx {
            for (stored, digest) in &chunk {
                count += 1;
                if count.is_multiple_of(4096) {
                    progress(count);
                }
                let ok = match &stored.entry {
                    Ok(entry) => verifier.push_stored(entry, *digest, stored.leaf),
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
                };
                if !ok {
                    break 'chunks;
                }
            }
            // If the reader stopped (a read error), the chunk is freed here.
            let _ = checked_tx.send(chunk);
        }
        drop(checked_tx);
        drop(hashed_rx);
        reader
            .join()
            .unwrap_or_else(|_| Err(StoreError::Corrupt("the reading thread panicked".into())))
    });
    read_result?;
    progress(count);
    Ok(StoreVerdict {
        org_id: org_id.to_owned(),
        verdict: verifier.finish(),
        log_size: count,
        checkpoints_checked: checked,
        checkpoint_size: largest,
    })
}

/// The agent keys of an org with their history (registrations and
/// revocations at their log positions), as a verifier checks signatures
/// with them. A bad key record fails the org's verification at its
/// position; here it simply gives no key.
pub fn agent_keys(store: &dyn LedgerStore, org_id: &str) -> Result<AgentKeys, StoreError> {
    let mut keys = AgentKeys::new();
    for (seq, record) in store.key_records(org_id, None)? {
        let _ = match &record {
            OpRecord::KeyRegistration(reg) => keys.register(reg, seq),
            OpRecord::KeyRevocation(rev) => keys.revoke(rev, seq),
            _ => Ok(()),
        };
    }
    Ok(keys)
}

/// Verifies one session's chain on its own, as the log holds it: its steps
/// (found from its last step in the log, not from derived state), its
/// seal, its erasures, and the agent keys of the org. `Ok(None)` if the
/// session does not exist. Only an org verification proves that no record
/// was removed from the log; this proves the session's chain, seal and
/// erasures, and that nothing follows the last step found.
pub fn verify_session(
    store: &dyn LedgerStore,
    org_id: &str,
    session_id: &str,
) -> Result<Option<Verdict>, StoreError> {
    let Some(info) = store.session(org_id, session_id)? else {
        return Ok(None);
    };
    let keys = agent_keys(store, org_id)?;
    let mut verifier = SessionVerifier::new(&info.header, keys);
    let mut erasures = Vec::new();
    for (seq, record) in store.session_records(org_id, session_id)? {
        if let OpRecord::Erasure(erasure) = record {
            erasures.push((seq, erasure));
        }
    }
    verifier.expect_erasures(erasures);
    store.read_session(org_id, session_id, &mut |step| {
        verifier.push_at(&step.record, step.seq, step.logged_at)
    })?;
    let (server_name, _) = store.log_signer(org_id)?;
    let keys = store.log_keys(org_id)?;
    let expected = match &info.seal {
        Some(seal) => {
            verifier.push_seal(seal, &log_origin(&server_name, org_id), &keys);
            seal.step_count
        }
        None => info.step_count,
    };
    Ok(Some(verifier.finish(Some(expected))))
}

/// How an org's stored checkpoints stand against a witness policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WitnessReport {
    /// Sizes of the stored checkpoints that carry a quorum of valid
    /// cosignatures.
    pub cosigned: Vec<u64>,
    /// Sizes of those that do not.
    pub uncosigned: Vec<u64>,
}

/// Applies a witness policy to an org's verified log (`docs/FORMAT.md`
/// 7.7): the latest stored checkpoint (the one that authenticates the whole
/// log) must carry valid cosignatures by a quorum of the policy's
/// witnesses, or the verdict fails with `insufficient-cosignatures` at that
/// checkpoint's size. Every stored checkpoint is reported either way, so
/// an auditor sees from which size on the witnesses stopped vouching.
pub fn apply_witness_policy(
    store: &dyn LedgerStore,
    org_id: &str,
    policy: &cairn_core::witness::WitnessPolicy,
    verdict: &mut StoreVerdict,
) -> Result<WitnessReport, StoreError> {
    let mut report = WitnessReport::default();
    let mut latest: Option<(u64, Result<(), String>)> = None;
    for stored in store.checkpoints(org_id)? {
        let mut note = stored.note.clone();
        for line in store.cosignatures(org_id, stored.size)? {
            note.push_str(&line);
            note.push('\n');
        }
        let check = policy.check(&note);
        if check.is_ok() {
            report.cosigned.push(stored.size);
        } else {
            report.uncosigned.push(stored.size);
        }
        if latest.as_ref().is_none_or(|(size, _)| stored.size >= *size) {
            latest = Some((stored.size, check));
        }
    }
    if !verdict.verdict.verified {
        return Ok(report);
    }
    let failure = match latest {
        None => Some("the org has no checkpoint for witnesses to have cosigned".to_owned()),
        Some((size, Err(why))) => Some(format!(
            "the latest checkpoint (size {size}): {why}; {} of {} stored checkpoints lack a quorum",
            report.uncosigned.len(),
            report.uncosigned.len() + report.cosigned.len()
        )),
        Some((_, Ok(()))) => None,
    };
    if let Some(detail) = failure {
        verdict.verdict.verified = false;
        verdict.verdict.failure = Some(Failure {
            at: Location::default(),
            reason: Reason::InsufficientCosignatures,
            detail,
        });
    }
    Ok(report)
}
