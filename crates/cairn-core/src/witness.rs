//! C2SP `tlog-witness`: the `add-checkpoint` request a log sends a
//! witness, the checks a witness makes before it cosigns, and witness
//! policies (k of n cosignatures) that verifiers apply to checkpoints.
//!
//! A witness keeps, per log origin, the latest checkpoint it cosigned. It
//! cosigns a new checkpoint only if the log proves the new tree consistent
//! with that one, so it never cosigns two views of one log that disagree:
//! an operator who rewrites history (even with the log's own key) cannot
//! get the rewritten checkpoints cosigned.
//!
//! The checks are split in two so that storage can make the second one
//! atomic: [`check_request`] needs no state (parsing, the log's keys, the
//! signature), [`check_consistency`] needs the witness's latest cosigned
//! checkpoint of that log and must run in the same transaction that
//! records the new one.

use crate::checkpoint::{Checkpoint, verify_cosignature};
use crate::hash::Hash;
use crate::merkle::{empty_root, verify_consistency};
use crate::note::{ALG_COSIGNATURE_V1, Note, NoteError, NoteVerifier};

/// At most this many consistency proof lines (C2SP tlog-witness).
pub const MAX_PROOF_LINES: usize = 63;

/// Why a witness does not cosign, with the HTTP status the C2SP
/// specification gives each case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WitnessRefusal {
    /// 400: the body is not an add-checkpoint request, or the old size
    /// exceeds the checkpoint's size.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// 404: the witness does not know the checkpoint's origin.
    #[error("unknown log {0:?}")]
    UnknownLog(String),
    /// 403: no valid signature by a key the witness trusts for the origin,
    /// or an invalid one by such a key.
    #[error("not signed by the log: {0}")]
    Forbidden(String),
    /// 409: the old size is not the size of the latest checkpoint the
    /// witness cosigned for the log (which the answer gives).
    #[error("the witness's latest cosigned size for this log is {latest_size}")]
    Conflict {
        /// The size of the latest checkpoint cosigned for the origin.
        latest_size: u64,
    },
    /// 409 (without a size, C2SP's answer to a root mismatch): a checkpoint
    /// of the size the witness cosigned, with another root. The log forked.
    #[error("another root at the size the witness cosigned ({size}): the log forked")]
    Forked {
        /// The size both checkpoints have.
        size: u64,
    },
    /// 422: the checkpoint is not consistent with what the witness
    /// cosigned before (a proof that does not verify, a size-0 checkpoint
    /// with another root than the empty tree's).
    #[error("inconsistent: {0}")]
    Unprocessable(String),
    /// 422: a proof where the empty one is the only one: from size 0, or
    /// with the checkpoint the witness cosigned sent again (a tree is
    /// consistent with itself by the empty proof only). Nothing the log
    /// signed disagrees with the witness: not evidence.
    #[error("the proof must be empty (from size 0, or between two trees of the same size)")]
    ProofNotEmpty,
}

impl WitnessRefusal {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> u16 {
        match self {
            WitnessRefusal::BadRequest(_) => 400,
            WitnessRefusal::UnknownLog(_) => 404,
            WitnessRefusal::Forbidden(_) => 403,
            WitnessRefusal::Conflict { .. } | WitnessRefusal::Forked { .. } => 409,
            WitnessRefusal::Unprocessable(_) | WitnessRefusal::ProofNotEmpty => 422,
        }
    }
}

/// A parsed `add-checkpoint` request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddCheckpoint {
    /// The size of the checkpoint the log believes the witness holds.
    pub old_size: u64,
    /// A consistency proof from `old_size` to the checkpoint's size.
    pub proof: Vec<Hash>,
    /// The signed checkpoint note.
    pub note: String,
}

/// What a witness holds for a log: its latest cosigned checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Witnessed {
    /// Its size.
    pub size: u64,
    /// Its root.
    pub root: Hash,
    /// Its log-keys line's count (FORMAT.md 7.1: the log's `log-key`
    /// records below its size), if it had one.
    pub log_keys: Option<u64>,
}

/// A decimal with no leading zero (but `0` itself).
fn decimal(text: &str) -> Option<u64> {
    if text.is_empty()
        || !text.bytes().all(|b| b.is_ascii_digit())
        || (text.len() > 1 && text.starts_with('0'))
    {
        return None;
    }
    text.parse().ok()
}

/// Parses an `add-checkpoint` body: `old <size>\n`, at most 63 lines of
/// one base64 hash each, an empty line, then the signed checkpoint.
pub fn parse_add_checkpoint(body: &str) -> Result<AddCheckpoint, WitnessRefusal> {
    let bad = |why: &str| WitnessRefusal::BadRequest(why.to_owned());
    let (first, mut rest) = body
        .split_once('\n')
        .ok_or_else(|| bad("the body must start with an old size line"))?;
    let old_size = first
        .strip_prefix("old ")
        .and_then(decimal)
        .ok_or_else(|| {
            bad("the first line must be `old <size>`, a decimal without leading zeros")
        })?;
    let mut proof = Vec::new();
    loop {
        let (line, after) = rest
            .split_once('\n')
            .ok_or_else(|| bad("the proof lines must end with an empty line"))?;
        rest = after;
        if line.is_empty() {
            break;
        }
        if proof.len() == MAX_PROOF_LINES {
            return Err(bad("more than 63 consistency proof lines"));
        }
        proof.push(
            Hash::from_base64(line).map_err(|_| bad("a proof line is not base64 of 32 bytes"))?,
        );
    }
    if rest.is_empty() {
        return Err(bad("no checkpoint after the empty line"));
    }
    Ok(AddCheckpoint {
        old_size,
        proof,
        note: rest.to_owned(),
    })
}

/// The checks that need no state: the body parses, the origin is a log the
/// witness knows (`log_keys` gives its trusted keys), the checkpoint is
/// signed by one of them and by none invalidly, and the old size does not
/// exceed the checkpoint's. Returns the request, the checkpoint and its
/// note text (what a cosignature covers).
pub fn check_request(
    body: &str,
    log_keys: impl Fn(&str) -> Option<Vec<NoteVerifier>>,
) -> Result<(AddCheckpoint, Checkpoint, String), WitnessRefusal> {
    let request = parse_add_checkpoint(body)?;
    let note = Note::parse(&request.note).map_err(|e| {
        WitnessRefusal::BadRequest(format!("the checkpoint is not a signed note: {e}"))
    })?;
    let checkpoint =
        Checkpoint::parse(&note.text).map_err(|e| WitnessRefusal::BadRequest(e.to_string()))?;
    let keys = log_keys(&checkpoint.origin)
        .ok_or_else(|| WitnessRefusal::UnknownLog(checkpoint.origin.clone()))?;
    // Sizes are kept as signed 64-bit integers (SQLite, PostgreSQL); a
    // larger one is refused rather than stored as another size.
    if checkpoint.size > i64::MAX as u64 {
        return Err(WitnessRefusal::BadRequest(format!(
            "checkpoint sizes above 2^63 - 1 are not supported (got {})",
            checkpoint.size
        )));
    }
    note.verify(&keys).map_err(|e| match e {
        NoteError::NoKnownSignature => {
            WitnessRefusal::Forbidden("no signature by a key trusted for this log".into())
        }
        other => WitnessRefusal::Forbidden(other.to_string()),
    })?;
    if request.old_size > checkpoint.size {
        return Err(WitnessRefusal::BadRequest(format!(
            "old size {} exceeds the checkpoint's size {}",
            request.old_size, checkpoint.size
        )));
    }
    Ok((request, checkpoint, note.text))
}

/// The check that needs the witness's state, to run atomically with
/// recording its result: the old size is the latest cosigned size (or 0),
/// and the checkpoint is consistent with the latest cosigned checkpoint.
/// Returns what the witness must record before it cosigns.
pub fn check_consistency(
    request: &AddCheckpoint,
    checkpoint: &Checkpoint,
    latest: Option<&Witnessed>,
) -> Result<Witnessed, WitnessRefusal> {
    let latest_size = latest.map_or(0, |w| w.size);
    if request.old_size != latest_size {
        return Err(WitnessRefusal::Conflict { latest_size });
    }
    let inconsistent = |why: &str| WitnessRefusal::Unprocessable(why.to_owned());
    if checkpoint.size == 0 && checkpoint.root != empty_root() {
        return Err(inconsistent(
            "a checkpoint of size 0 must have the empty tree's root",
        ));
    }
    match latest {
        Some(seen) if request.old_size > 0 => {
            if request.old_size == checkpoint.size {
                if seen.root != checkpoint.root {
                    return Err(WitnessRefusal::Forked {
                        size: checkpoint.size,
                    });
                }
                if !request.proof.is_empty() {
                    return Err(WitnessRefusal::ProofNotEmpty);
                }
            } else {
                verify_consistency(
                    request.old_size,
                    checkpoint.size,
                    &seen.root,
                    &checkpoint.root,
                    &request.proof,
                )
                .map_err(|e| {
                    WitnessRefusal::Unprocessable(format!(
                        "the consistency proof from size {} does not verify ({e}): the log \
                         is not an extension of what the witness cosigned",
                        request.old_size
                    ))
                })?;
            }
        }
        _ => {
            // From size 0 (the witness has cosigned nothing, or only the
            // empty tree) there is nothing to prove: a proof is the
            // sender's mistake, nothing the log signed disagrees.
            if !request.proof.is_empty() {
                return Err(WitnessRefusal::ProofNotEmpty);
            }
        }
    }
    check_log_keys(checkpoint, latest)?;
    Ok(Witnessed {
        size: checkpoint.size,
        root: checkpoint.root,
        log_keys: checkpoint.log_key_count(),
    })
}

/// A log's key history only grows (FORMAT.md 7.7, 7.10): once the witness
/// has cosigned a checkpoint whose log-keys line counts `c` `log-key`
/// records, it cosigns none that counts fewer, none of the same size that
/// counts otherwise, and none without the line. Otherwise a holder of a
/// retired key the witness still trusts could have a checkpoint that
/// leaves the retirement out cosigned, the same root at the same size.
fn check_log_keys(
    checkpoint: &Checkpoint,
    latest: Option<&Witnessed>,
) -> Result<(), WitnessRefusal> {
    let Some((seen, counted)) = latest.and_then(|w| w.log_keys.map(|c| (w, c))) else {
        return Ok(());
    };
    let refused = |what: String| {
        Err(WitnessRefusal::Unprocessable(format!(
            "{what}, where the checkpoint of size {} the witness cosigned counts {counted} (cairn-log-keys): a log's key history only grows",
            seen.size
        )))
    };
    match checkpoint.log_key_count() {
        None => refused("the checkpoint has no cairn-log-keys line".into()),
        Some(count) if count < counted => {
            refused(format!("the checkpoint counts {count} log-key records"))
        }
        Some(count) if count != counted && checkpoint.size == seen.size => refused(format!(
            "the checkpoint of the same size counts {count} log-key records"
        )),
        Some(_) => Ok(()),
    }
}

/// A witness policy: the checkpoint must carry valid `cosignature/v1`
/// cosignatures by at least `quorum` of `witnesses`.
#[derive(Debug, Clone)]
pub struct WitnessPolicy {
    witnesses: Vec<NoteVerifier>,
    quorum: usize,
}

/// Most witnesses one policy names: real deployments name a handful, and
/// every checkpoint checked against a policy is checked against each of
/// them, so a policy given over HTTP must not make that cost unbounded.
pub const MAX_WITNESSES: usize = 64;

impl WitnessPolicy {
    /// A policy of `quorum` of `witnesses` (cosignature keys, algorithm
    /// `0x04`, distinct names, at most [`MAX_WITNESSES`]). The quorum is 1
    /// to the number of witnesses.
    pub fn new(witnesses: Vec<NoteVerifier>, quorum: usize) -> Result<WitnessPolicy, String> {
        if witnesses.is_empty() {
            return Err("a witness policy names at least one witness".into());
        }
        if witnesses.len() > MAX_WITNESSES {
            return Err(format!(
                "a witness policy names at most {MAX_WITNESSES} witnesses, not {}",
                witnesses.len()
            ));
        }
        if quorum == 0 || quorum > witnesses.len() {
            return Err(format!(
                "the quorum must be 1 to {} (the number of witnesses), not {quorum}",
                witnesses.len()
            ));
        }
        for (i, w) in witnesses.iter().enumerate() {
            if w.alg() != ALG_COSIGNATURE_V1 {
                return Err(format!(
                    "witness key {} is not a cosignature/v1 key (algorithm 0x04)",
                    w.name()
                ));
            }
            if witnesses[..i].iter().any(|o| o.name() == w.name()) {
                return Err(format!("witness {} is named twice", w.name()));
            }
            // cosignature/v1 does not sign the witness's name: one key under
            // two names would count one cosignature twice.
            if witnesses[..i]
                .iter()
                .any(|o| o.public_key() == w.public_key())
            {
                return Err(format!(
                    "witness {} has the key of another witness",
                    w.name()
                ));
            }
        }
        Ok(WitnessPolicy { witnesses, quorum })
    }

    /// How many cosignatures are needed.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// The witnesses.
    pub fn witnesses(&self) -> &[NoteVerifier] {
        &self.witnesses
    }

    /// The names of the policy's witnesses whose cosignature on `note`
    /// verifies (a cosignature that does not verify counts for nothing).
    pub fn cosigned_by(&self, note: &str) -> Vec<&str> {
        self.witnesses
            .iter()
            .filter(|w| verify_cosignature(note, w).is_ok())
            .map(NoteVerifier::name)
            .collect()
    }

    /// Whether `note` carries a quorum of valid cosignatures; the error
    /// says how many it has, for a person.
    pub fn check(&self, note: &str) -> Result<(), String> {
        let by = self.cosigned_by(note);
        if by.len() >= self.quorum {
            Ok(())
        } else {
            Err(format!(
                "the checkpoint carries {} valid cosignature(s) of the {} the witness policy \
                 needs{}",
                by.len(),
                self.quorum,
                if by.is_empty() {
                    String::new()
                } else {
                    format!(" (by {})", by.join(", "))
                }
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Cosigner;
    use crate::merkle::{MemoryTree, consistency_proof, leaf_hash};
    use crate::note::NoteSigner;
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as B64;
    use proptest::prelude::*;

    const ORIGIN: &str = "log.example/acme";

    fn log_signer() -> NoteSigner {
        NoteSigner::from_seed("log.example", &[7; 32]).unwrap()
    }

    fn tree(n: u64, salt: u8) -> MemoryTree {
        let mut t = MemoryTree::new();
        for i in 0..n {
            t.push(leaf_hash(&[salt, i as u8, (i >> 8) as u8]));
        }
        t
    }

    fn signed(t: &MemoryTree, size: u64, signer: &NoteSigner) -> String {
        Checkpoint {
            origin: ORIGIN.into(),
            size,
            root: t.root_at(size),
            extensions: vec![],
        }
        .sign(signer)
        .unwrap()
    }

    fn body(old: u64, proof: &[Hash], note: &str) -> String {
        let mut b = format!("old {old}\n");
        for h in proof {
            b.push_str(&B64.encode(h.as_bytes()));
            b.push('\n');
        }
        b.push('\n');
        b.push_str(note);
        b
    }

    fn keys(origin: &str) -> Option<Vec<NoteVerifier>> {
        (origin == ORIGIN).then(|| vec![log_signer().verifier()])
    }

    /// Runs both checks as a witness would, against `latest`.
    fn submit(b: &str, latest: Option<&Witnessed>) -> Result<Witnessed, WitnessRefusal> {
        let (req, cp, _) = check_request(b, keys)?;
        check_consistency(&req, &cp, latest)
    }

    #[test]
    fn every_status_of_the_specification() {
        let t = tree(20, 1);
        let signer = log_signer();
        // First checkpoint: old 0, no proof.
        let first = submit(&body(0, &[], &signed(&t, 10, &signer)), None).unwrap();
        assert_eq!(first.size, 10);
        // Growth with a proof.
        let proof = consistency_proof(&t, 10, 20).unwrap();
        let second = submit(&body(10, &proof, &signed(&t, 20, &signer)), Some(&first)).unwrap();
        assert_eq!(second.size, 20);
        // 409: a stale old size, answered with the witness's size.
        assert_eq!(
            submit(&body(10, &proof, &signed(&t, 20, &signer)), Some(&second)),
            Err(WitnessRefusal::Conflict { latest_size: 20 })
        );
        assert_eq!(
            submit(&body(0, &[], &signed(&t, 20, &signer)), Some(&second)).map_err(|e| e.status()),
            Err(409)
        );
        // 422: a proof that does not verify (a rewritten history).
        let other = tree(20, 2);
        let forged = consistency_proof(&other, 10, 20).unwrap();
        let refused = submit(
            &body(10, &forged, &signed(&other, 20, &signer)),
            Some(&first),
        );
        assert_eq!(refused.map_err(|e| e.status()), Err(422));
        // 409 without a size: another root at the same size (a fork).
        let fork = submit(&body(10, &[], &signed(&other, 10, &signer)), Some(&first));
        assert_eq!(fork, Err(WitnessRefusal::Forked { size: 10 }));
        assert_eq!(fork.map_err(|e| e.status()), Err(409));
        // 422: the cosigned checkpoint again, with a proof (a tree is
        // consistent with itself by the empty proof only).
        let again = submit(&body(10, &proof, &signed(&t, 10, &signer)), Some(&first));
        assert_eq!(again, Err(WitnessRefusal::ProofNotEmpty));
        assert_eq!(again.map_err(|e| e.status()), Err(422));
        // 422: a non-empty proof from size 0.
        assert_eq!(
            submit(&body(0, &proof, &signed(&t, 20, &signer)), None),
            Err(WitnessRefusal::ProofNotEmpty)
        );
        // 422: size 0 with a root other than the empty tree's.
        let zero = Checkpoint {
            origin: ORIGIN.into(),
            size: 0,
            root: t.root_at(1),
            extensions: vec![],
        }
        .sign(&signer)
        .unwrap();
        assert_eq!(
            submit(&body(0, &[], &zero), None).map_err(|e| e.status()),
            Err(422)
        );
        // 400: old size beyond the checkpoint's size; malformed bodies.
        assert_eq!(
            submit(&body(30, &[], &signed(&t, 20, &signer)), Some(&second)).map_err(|e| e.status()),
            Err(400)
        );
        for bad in [
            "",
            "old 01\n\nx",
            "old 1\nnot base64\n\n",
            "new 1\n\n",
            "old 1\n",
        ] {
            assert_eq!(
                submit(bad, None).map_err(|e| e.status()),
                Err(400),
                "{bad:?}"
            );
        }
        let too_long = body(10, &vec![t.root_at(1); 64], &signed(&t, 20, &signer));
        assert_eq!(
            submit(&too_long, Some(&first)).map_err(|e| e.status()),
            Err(400)
        );
        // 400: a size beyond what the witness can store exactly.
        let huge = Checkpoint {
            origin: ORIGIN.into(),
            size: u64::MAX,
            root: t.root_at(20),
            extensions: vec![],
        }
        .sign(&signer)
        .unwrap();
        assert_eq!(
            submit(&body(0, &[], &huge), None).map_err(|e| e.status()),
            Err(400)
        );
        // 404: an unknown origin.
        let stranger = Checkpoint {
            origin: "other.example/x".into(),
            size: 1,
            root: t.root_at(1),
            extensions: vec![],
        }
        .sign(&signer)
        .unwrap();
        assert_eq!(
            submit(&body(0, &[], &stranger), None).map_err(|e| e.status()),
            Err(404)
        );
        // 403: signed by another key of the same name, or a bad signature.
        let impostor = NoteSigner::from_seed("log.example", &[9; 32]).unwrap();
        assert_eq!(
            submit(&body(0, &[], &signed(&t, 10, &impostor)), None).map_err(|e| e.status()),
            Err(403)
        );
        let mut broken = signed(&t, 10, &signer);
        let at = broken.len() - 5;
        broken.replace_range(
            at..at + 1,
            if &broken[at..at + 1] == "A" { "B" } else { "A" },
        );
        assert_eq!(
            submit(&body(0, &[], &broken), None).map_err(|e| e.status()),
            Err(403)
        );
        // Re-submitting the same checkpoint is consistent (the same root).
        assert_eq!(
            submit(&body(20, &[], &signed(&t, 20, &signer)), Some(&second)).unwrap(),
            second
        );
    }

    #[test]
    fn a_policy_counts_valid_cosignatures_of_its_witnesses() {
        let t = tree(5, 1);
        let note = signed(&t, 5, &log_signer());
        let text = Note::parse(&note).unwrap().text;
        let w1 = Cosigner::from_seed("w1.example", &[1; 32]).unwrap();
        let w2 = Cosigner::from_seed("w2.example", &[2; 32]).unwrap();
        let w3 = Cosigner::from_seed("w3.example", &[3; 32]).unwrap();
        let policy = WitnessPolicy::new(vec![w1.verifier(), w2.verifier()], 2).unwrap();
        let one = format!("{note}{}", w1.cosign(&text, 1_700_000_000));
        assert!(policy.check(&note).is_err());
        assert!(
            policy
                .check(&one)
                .unwrap_err()
                .contains("1 valid cosignature")
        );
        let two = format!("{one}{}", w2.cosign(&text, 1_700_000_001));
        assert!(policy.check(&two).is_ok());
        // A witness outside the policy does not count.
        let outsider = format!("{one}{}", w3.cosign(&text, 1_700_000_001));
        assert!(policy.check(&outsider).is_err());
        // A cosignature over another checkpoint does not count.
        let other = signed(&tree(5, 2), 5, &log_signer());
        let other_text = Note::parse(&other).unwrap().text;
        let misplaced = format!("{one}{}", w2.cosign(&other_text, 1_700_000_001));
        assert!(policy.check(&misplaced).is_err());
        assert!(WitnessPolicy::new(vec![w1.verifier()], 2).is_err());
        // One key under two names would count one cosignature twice.
        let alias = Cosigner::from_seed("w1-alias.example", &[1; 32]).unwrap();
        assert!(WitnessPolicy::new(vec![w1.verifier(), alias.verifier()], 2).is_err());
        // A relayer's bad line before a valid one does not hide it; a
        // timestamp of 0 or beyond 2^63 - 1 never counts.
        let good = w2.cosign(&text, 1_700_000_001);
        let blob = good.trim_end().rsplit(' ').next().unwrap().to_owned();
        let mut bad_bytes = B64.decode(&blob).unwrap();
        bad_bytes[20] ^= 1;
        let bad = good.replace(&blob, &B64.encode(&bad_bytes));
        assert!(policy.check(&format!("{one}{bad}{good}")).is_ok());
        for timestamp in [0, 1 << 63] {
            let forged = w2.cosign(&text, timestamp);
            assert!(
                policy.check(&format!("{one}{forged}")).is_err(),
                "{timestamp}"
            );
        }
        assert!(WitnessPolicy::new(vec![log_signer().verifier()], 1).is_err());
    }

    /// Once a checkpoint counting the log's key records is cosigned, one
    /// counting fewer (a retirement left out), one of the same size
    /// counting otherwise, or one without the line is refused; more, at a
    /// larger size, is a rotation since.
    #[test]
    fn the_log_keys_count_never_goes_back() {
        let t = tree(6, 1);
        let signer = log_signer();
        let keys = |origin: &str| (origin == ORIGIN).then(|| vec![signer.verifier()]);
        let note = |size: u64, count: Option<u64>| {
            let cp = Checkpoint {
                origin: ORIGIN.into(),
                size,
                root: t.root_at(size),
                extensions: vec![],
            };
            count
                .map_or(cp.clone(), |c| cp.with_log_key_count(c))
                .sign(&signer)
                .unwrap()
        };
        let submit = |old: u64, proof: &[Hash], note: &str, latest: Option<&Witnessed>| {
            let (req, cp, _) = check_request(&body(old, proof, note), keys).unwrap();
            check_consistency(&req, &cp, latest)
        };
        let first = submit(0, &[], &note(4, Some(2)), None).unwrap();
        assert_eq!(first.log_keys, Some(2));
        let proof = consistency_proof(&t, 4, 6).unwrap();
        for (count, accepted) in [
            (Some(1), false),
            (None, false),
            (Some(2), true),
            (Some(3), true),
        ] {
            let outcome = submit(4, &proof, &note(6, count), Some(&first));
            assert_eq!(outcome.is_ok(), accepted, "{count:?}: {outcome:?}");
            if let Err(refusal) = outcome {
                assert_eq!(refusal.status(), 422);
            }
        }
        // The same size: another count is refused, the same one accepted.
        assert!(submit(4, &[], &note(4, Some(3)), Some(&first)).is_err());
        assert!(submit(4, &[], &note(4, Some(2)), Some(&first)).is_ok());
        // A witness that cosigned only checkpoints without the line (an
        // older log's) accepts either.
        let unlined = Witnessed {
            log_keys: None,
            ..first
        };
        assert!(submit(4, &proof, &note(6, None), Some(&unlined)).is_ok());
    }

    proptest! {
        /// A witness fed any sequence of checkpoints from two diverging
        /// histories of one log never accepts both sides: once it holds a
        /// checkpoint of one history, every later acceptance is of a tree
        /// consistent with it.
        #[test]
        fn a_witness_never_accepts_two_inconsistent_views(
            steps in proptest::collection::vec((any::<bool>(), 1u64..40), 1..12)
        ) {
            let histories = [tree(40, 1), tree(40, 2)];
            // Both histories share their first 3 leaves' positions but not values.
            let signer = log_signer();
            let mut latest: Option<(Witnessed, usize)> = None;
            for (pick, size) in steps {
                let h = usize::from(pick);
                let t = &histories[h];
                let old = latest.as_ref().map_or(0, |(w, _)| w.size);
                let proof = if old == 0 || old >= size { vec![] } else { consistency_proof(t, old, size).unwrap() };
                let outcome = submit(&body(old, &proof, &signed(t, size, &signer)), latest.as_ref().map(|(w, _)| w));
                if let Ok(w) = outcome {
                    if let Some((_, held)) = &latest {
                        prop_assert_eq!(*held, h, "accepted a checkpoint of the other history");
                    }
                    latest = Some((w, h));
                }
            }
        }
    }
}
