//! The streaming verifier: [`BundleVerifier`] takes a bundle's lines in
//! order (as bytes, text or [`PreparedLine`]s), checks the header, the
//! checkpoint, consistency with the checkpoints the caller trusts, the
//! signed selection and every entry, and gives a [`BundleVerdict`]. Apart
//! from the line format (`lines`) because this is the order of the checks
//! of `docs/FORMAT.md` section 10.

use super::lines::proof_member;
use super::prepared::{LineError, Parsed, PreparedEntry};
use super::{BundleHeader, PreparedLine, decode_entry_value, exact_members};
use crate::checkpoint::{VerifiedCheckpoint, verify_checkpoint};
use crate::hash::Hash;
use crate::note::NoteVerifier;
use crate::selection::{Selection, SelectionError};
use crate::verify::{Failure, Location, LogVerifier, Reason, Verdict};
use serde_json::Value;

/// What a bundle verification found.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleVerdict {
    /// The verdict over every line.
    pub verdict: Verdict,
    /// The key whose signature on the bundle's checkpoint verified (the
    /// first, if several did): the key that vouches for the bundle, which
    /// may be any of the header's keys, never merely the one the header
    /// names first. `None` unless the checkpoint verified.
    pub server_key: Option<String>,
    /// Every key, of those the checkpoint was checked with, whose
    /// signature on it verified.
    pub signers: Vec<String>,
    /// Every key whose signature on a partial bundle's signed selection
    /// verified (empty for a complete bundle): who vouches that the
    /// bundle holds all of its scope.
    pub selection_signers: Vec<String>,
    /// Whether that key was supplied by the caller (pinned) rather than
    /// taken from the bundle itself.
    pub key_pinned: bool,
    /// The verified checkpoint's size and root, if it verified.
    pub checkpoint: Option<(u64, Hash)>,
    /// The bundle's header, if it parsed.
    pub header: Option<BundleHeader>,
    /// The signed selection of a partial bundle, if it verified.
    pub selection: Option<Selection>,
    /// The signed traces a partial bundle shows (for `--log`'s
    /// comparison, [`Selection::is_recomputed`]).
    pub listed_traces: Vec<crate::selection::ListedTrace>,
    /// The withheld signed traces and the trace ids their trace-erasure
    /// records state (what `cairn import` keeps taken).
    pub withheld_trace_ids: Vec<(u64, String)>,
    /// Sizes of the trusted checkpoints the bundle was related to.
    pub trusted_sizes: Vec<u64>,
    /// The witnesses of the verifier's policy whose cosignature on the
    /// checkpoint verified, and the quorum it asked for (`None` without a
    /// policy, or before the checkpoint was read).
    pub cosigned_by: Option<(Vec<String>, usize)>,
}

/// Where the verifier is in the bundle's structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Header,
    Checkpoint,
    /// After the checkpoint: consistency lines, then (partial) the
    /// selection, then entries.
    Preamble,
    Entries,
    Ended,
}

/// Verifies a bundle fed line by line, in constant memory in the number of
/// entries (plus one chain state per session, and the erased steps whose
/// erasure record is still ahead).
pub struct BundleVerifier {
    pinned: Vec<NoteVerifier>,
    trusted_notes: Vec<String>,
    witness_policy: Option<crate::witness::WitnessPolicy>,
    /// What the witness policy found on the checkpoint: who cosigned, of
    /// the quorum asked for.
    cosigned_by: Option<(Vec<String>, usize)>,
    trusted: Vec<VerifiedCheckpoint>,
    /// Trusted checkpoints of size 0 given with a larger bundle: nothing
    /// but their log-keys line is checked (FORMAT.md 7.10, 10.2).
    empty_trusted: Vec<VerifiedCheckpoint>,
    /// Trusted checkpoints older than the bundle's still needing a
    /// consistency line (partial bundles), by size.
    unproven: Vec<u64>,
    stage: Stage,
    header: Option<BundleHeader>,
    keys: Vec<NoteVerifier>,
    checkpoint: Option<VerifiedCheckpoint>,
    last_consistency: u64,
    selection: Option<Selection>,
    /// The keys whose signatures on the selection verified.
    selection_signers: Vec<String>,
    log: Option<LogVerifier>,
    line: u64,
    entries: u64,
    failure: Option<Failure>,
}

impl BundleVerifier {
    /// A verifier that trusts only `pinned` server keys, or, if `pinned` is
    /// empty, the key the bundle names (the caller should then compare its
    /// fingerprint with the operator's published key).
    pub fn new(pinned: Vec<NoteVerifier>) -> BundleVerifier {
        BundleVerifier {
            pinned,
            trusted_notes: Vec::new(),
            witness_policy: None,
            cosigned_by: None,
            trusted: Vec::new(),
            empty_trusted: Vec::new(),
            unproven: Vec::new(),
            stage: Stage::Header,
            header: None,
            keys: Vec::new(),
            checkpoint: None,
            last_consistency: 0,
            selection: None,
            selection_signers: Vec::new(),
            log: None,
            line: 0,
            entries: 0,
            failure: None,
        }
    }

    /// Adds a checkpoint the caller trusts (one it kept earlier, or a
    /// witness's): the bundle's checkpoint must be consistent with it, and
    /// the bundle must prove so (`docs/FORMAT.md` 10.3). Call before the
    /// first line.
    pub fn trust_checkpoint(&mut self, note: impl Into<String>) {
        self.trusted_notes.push(note.into());
    }

    /// Requires the bundle's checkpoint to carry a quorum of valid
    /// cosignatures by `policy`'s witnesses (`insufficient-cosignatures`
    /// at the checkpoint line otherwise). Call before the first line.
    pub fn require_witnesses(&mut self, policy: crate::witness::WitnessPolicy) {
        self.witness_policy = Some(policy);
    }

    fn fail(&mut self, at: Location, reason: Reason, detail: String) -> bool {
        let mut at = at;
        at.line = Some(self.line);
        self.failure = Some(Failure { at, reason, detail });
        false
    }

    fn malformed(&mut self, detail: String) -> bool {
        self.fail(Location::default(), Reason::MalformedRecord, detail)
    }

    /// A line of the entries part that is not an entry at all (not UTF-8,
    /// not strict JSON): like any entry line, it counts as a checked record.
    fn malformed_entry_line(&mut self, detail: String) -> bool {
        if self.stage == Stage::Entries
            && let Some(log) = self.log.as_mut()
        {
            log.fail(Location::default(), Reason::MalformedRecord, detail);
            if let Some(mut failure) = log.failure().cloned() {
                failure.at.line = Some(self.line);
                self.failure = Some(failure);
            }
            return false;
        }
        self.malformed(detail)
    }

    /// Feeds the next line as read: a line that is not UTF-8 is a changed
    /// byte and fails verification at that line. (Decoding it lossily
    /// instead could turn a changed byte back into the text it replaced.)
    /// Returns false once verification has failed.
    pub fn push_bytes(&mut self, line: &[u8]) -> bool {
        if self.failure.is_some() {
            return false;
        }
        self.push_prepared(PreparedLine::new(line))
    }

    /// Feeds the next line. Returns false once verification has failed.
    pub fn push_line(&mut self, line: &str) -> bool {
        self.push_bytes(line.as_bytes())
    }

    /// Feeds the next line, already prepared ([`PreparedLine::new`], which
    /// may run on other threads, in any order: the verdict is the same as
    /// feeding the lines with [`BundleVerifier::push_bytes`]). Returns
    /// false once verification has failed.
    pub fn push_prepared(&mut self, line: PreparedLine) -> bool {
        self.check_prepared(&line)
    }

    /// Feeds the next line, already prepared, as
    /// [`BundleVerifier::push_prepared`] does, but leaves the line to the
    /// caller: a feeder that prepares lines on other threads can free them
    /// there, or read the next line into the spent line's buffer
    /// ([`PreparedLine::into_buffer`]). Returns false once verification
    /// has failed.
    pub fn check_prepared(&mut self, line: &PreparedLine) -> bool {
        if self.failure.is_some() {
            return false;
        }
        self.line += 1;
        let parsed_again;
        let value = match &line.value {
            Ok(Parsed::Value(value)) => value,
            Ok(Parsed::Entry(_)) if self.stage == Stage::Entries => {
                return self.entry_or_end(None, line.entry.as_ref());
            }
            // An entry where the stage expects something else: the stage
            // needs its value (it parsed once, so it parses again).
            Ok(Parsed::Entry(bytes)) => match crate::json::from_slice(bytes) {
                Ok(value) => {
                    parsed_again = value;
                    &parsed_again
                }
                Err(e) => return self.malformed(e),
            },
            Err(LineError::NotUtf8(e)) => {
                return self
                    .malformed_entry_line(format!("line {} is not UTF-8 text: {e}", self.line));
            }
            Err(LineError::NotJson(e)) => {
                if self.stage == Stage::Ended {
                    return self.malformed("content after the end line".into());
                }
                let detail = format!("line {} is not strict JSON: {e}", self.line);
                return self.malformed_entry_line(detail);
            }
        };
        if self.stage == Stage::Ended {
            return self.malformed("content after the end line".into());
        }
        match self.stage {
            Stage::Header => match BundleHeader::from_value(value) {
                Ok(header) => {
                    self.header = Some(header);
                    self.stage = Stage::Checkpoint;
                    true
                }
                Err(e) => self.malformed(e),
            },
            Stage::Checkpoint => self.open_checkpoint(value),
            Stage::Preamble => self.preamble(value, line.entry.as_ref()),
            Stage::Entries => self.entry_or_end(Some(value), line.entry.as_ref()),
            Stage::Ended => false,
        }
    }

    fn open_checkpoint(&mut self, value: &Value) -> bool {
        let note = match value.as_object() {
            Some(obj) if obj.len() == 1 => obj.get("checkpoint").and_then(Value::as_str),
            _ => None,
        };
        let Some(note) = note.map(str::to_owned) else {
            return self.malformed("line 2 must be {\"checkpoint\": \"<signed note>\"}".into());
        };
        let Some(header) = self.header.clone() else {
            return false;
        };
        let keys = if self.pinned.is_empty() {
            let mut keys = Vec::with_capacity(1 + header.log_keys.len());
            for text in std::iter::once(&header.server_key).chain(&header.log_keys) {
                match NoteVerifier::parse(text) {
                    Ok(key) => keys.push(key),
                    Err(e) => return self.malformed(format!("a key in the header: {e}")),
                }
            }
            keys
        } else {
            self.pinned.clone()
        };
        // A log's keys all bear its key name, the server name of its
        // origin (FORMAT 7.10): a key of another name signs nothing of it,
        // whoever pinned it (a verifier given two servers' keys must not
        // let one sign the other's logs).
        let given = keys.len();
        let keys: Vec<NoteVerifier> = keys
            .into_iter()
            .filter(|key| key.name() == header.server_name)
            .collect();
        if keys.is_empty() && given > 0 {
            return self.fail(
                Location::default(),
                Reason::BadSignature,
                format!(
                    "none of the keys is named {}, the log's key name (the server name of its origin): a key of another name signs nothing of this log",
                    header.server_name
                ),
            );
        }
        let origin = crate::log::log_origin(&header.server_name, &header.org_id);
        let checkpoint = match verify_checkpoint(&note, &origin, &keys) {
            Ok(cp) => cp,
            Err(crate::checkpoint::CheckpointError::Note(e)) => {
                let (reason, detail) = crate::verify::note_failure(&e, "the bundle's checkpoint");
                return self.fail(Location::default(), reason, detail);
            }
            Err(e) => return self.malformed(format!("the bundle's checkpoint: {e}")),
        };
        if let Some(policy) = &self.witness_policy {
            let by = policy.cosigned_by(&note);
            self.cosigned_by = Some((
                by.iter().map(|name| (*name).to_owned()).collect(),
                policy.quorum(),
            ));
            if let Err(why) = policy.check(&note) {
                return self.fail(
                    Location::default(),
                    Reason::InsufficientCosignatures,
                    format!("the bundle's checkpoint: {why}"),
                );
            }
        }
        let (size, root) = (checkpoint.checkpoint().size, checkpoint.checkpoint().root);
        for trusted in std::mem::take(&mut self.trusted_notes) {
            let cp = match verify_checkpoint(&trusted, &origin, &keys) {
                Ok(cp) => cp,
                Err(e) => {
                    let detail = format!(
                        "the trusted checkpoint given to the verifier does not verify for {origin} with the log key: {e}"
                    );
                    return self.fail(Location::default(), Reason::BadSignature, detail);
                }
            };
            let old = cp.checkpoint();
            if old.size > size {
                let detail = format!(
                    "the bundle's checkpoint (size {size}) is older than the trusted checkpoint (size {}): a bundle cannot prove it consistent; export again",
                    old.size
                );
                return self.fail(Location::default(), Reason::MissingProof, detail);
            }
            if old.size == size && old.root != root {
                let detail = format!(
                    "the trusted checkpoint and the bundle's have the same size {size} and different roots: the log was rewritten"
                );
                return self.fail(Location::default(), Reason::InconsistentCheckpoint, detail);
            }
            if old.size == 0 && size > 0 {
                // FORMAT 10.2: a trusted checkpoint of size 0 is compared
                // only with a bundle of size 0 (every log extends the empty
                // one, whatever root such a note claims); only its
                // log-keys line is still checked (7.10).
                self.empty_trusted.push(cp);
                continue;
            }
            if old.size < size && !header.complete_log {
                self.unproven.push(old.size);
            }
            self.trusted.push(cp);
        }
        self.keys = keys;
        self.checkpoint = Some(checkpoint);
        self.stage = Stage::Preamble;
        true
    }

    fn preamble(&mut self, value: &Value, prepared: Option<&PreparedEntry>) -> bool {
        let Some(header) = self.header.clone() else {
            return false;
        };
        if let Some(consistency) = value.get("consistency") {
            return self.consistency(value, consistency);
        }
        // The consistency lines are over: every trusted checkpoint older
        // than the bundle's must have been proven (partial bundles; a
        // complete one proves it by folding).
        if let Some(size) = self.unproven.first().copied() {
            let detail = format!(
                "the bundle carries no consistency proof from the trusted checkpoint of size {size} to its own: export it again with --since-size {size} (or --since-checkpoint FILE), which adds one"
            );
            return self.fail(Location::default(), Reason::MissingProof, detail);
        }
        let Some(checkpoint) = self.checkpoint.clone() else {
            return false;
        };
        if header.complete_log {
            if value.get("selection").is_some() {
                return self.malformed("a complete bundle has no selection line".into());
            }
            let mut log = LogVerifier::new(&header.server_name, &header.org_id, self.keys.clone());
            log.expect_checkpoint(&checkpoint);
            log.require_checkpoint_keys(checkpoint.note(), checkpoint.checkpoint().size);
            for trusted in &self.trusted {
                log.expect_checkpoint(trusted);
            }
            for empty in &self.empty_trusted {
                log.require_log_key_count(empty);
            }
            self.log = Some(log);
            self.stage = Stage::Entries;
            return self.entry_or_end(Some(value), prepared);
        }
        let Some(statement) = value.get("selection") else {
            let detail =
                "a partial bundle must carry its signed selection after the checkpoint".to_owned();
            return self.fail(Location::default(), Reason::MissingProof, detail);
        };
        let obj = value.as_object();
        if obj.is_none_or(|o| o.len() != 2) {
            return self.malformed("the selection line is {\"selection\", \"note\"}".into());
        }
        let Some(note) = value.get("note").and_then(Value::as_str) else {
            return self.malformed("the selection line's note must be a string".into());
        };
        let selection = match Selection::from_value(statement) {
            Ok(s) => s,
            Err(e) => return self.malformed(format!("selection: {e}")),
        };
        if let Err(e) = selection.verify_note(note, checkpoint.checkpoint(), &self.keys) {
            return match e {
                SelectionError::BadSignature(d) => {
                    self.fail(Location::default(), Reason::BadSignature, d)
                }
                SelectionError::Edited(d) => {
                    self.fail(Location::default(), Reason::DigestMismatch, d)
                }
                SelectionError::OtherCheckpoint(d) => {
                    self.fail(Location::default(), Reason::SelectionMismatch, d)
                }
                SelectionError::Malformed(d) => self.malformed(d),
            };
        }
        let mut log = LogVerifier::sparse(
            &header.server_name,
            &header.org_id,
            self.keys.clone(),
            &checkpoint,
            selection.clone(),
        );
        let size = checkpoint.checkpoint().size;
        log.require_checkpoint_keys(checkpoint.note(), size);
        log.require_selection_keys(note, size);
        // Larger trusted checkpoints failed at line 2 (missing-proof).
        for trusted in self.trusted.iter().chain(&self.empty_trusted) {
            log.require_log_key_count(trusted);
        }
        self.log = Some(log);
        self.selection = Some(selection);
        // Which keys signed the selection (it verified: one did).
        self.selection_signers = crate::note::Note::parse(note)
            .and_then(|parsed| {
                parsed
                    .verify(&self.keys)
                    .map(|keys| keys.iter().map(ToString::to_string).collect())
            })
            .unwrap_or_default();
        self.stage = Stage::Entries;
        true
    }

    fn consistency(&mut self, line: &Value, consistency: &Value) -> bool {
        let Some(checkpoint) = self.checkpoint.clone() else {
            return false;
        };
        let size = checkpoint.checkpoint().size;
        let parsed = (|| -> Result<(u64, Vec<Hash>), String> {
            if line.as_object().is_none_or(|o| o.len() != 1) {
                return Err("a consistency line has one member".into());
            }
            let obj = consistency
                .as_object()
                .ok_or("consistency must be an object")?;
            exact_members(obj, &["old_size", "proof"], "consistency")?;
            let old = obj["old_size"]
                .as_u64()
                .ok_or("consistency.old_size must be a non-negative integer")?;
            Ok((old, proof_member(&obj["proof"], "consistency.proof")?))
        })();
        let (old_size, proof) = match parsed {
            Ok(p) => p,
            Err(e) => return self.malformed(e),
        };
        if old_size == 0 || old_size >= size || old_size <= self.last_consistency {
            return self.malformed(format!(
                "consistency.old_size {old_size} must be above 0, below the checkpoint's size {size} and above the previous line's"
            ));
        }
        self.last_consistency = old_size;
        let trusted = self
            .trusted
            .iter()
            .find(|t| t.checkpoint().size == old_size)
            .map(|t| t.checkpoint().root);
        if let Some(old_root) = trusted {
            if let Err(e) = crate::merkle::verify_consistency(
                old_size,
                size,
                &old_root,
                &checkpoint.checkpoint().root,
                &proof,
            ) {
                let detail = format!(
                    "the bundle's checkpoint (size {size}) is not consistent with the trusted checkpoint (size {old_size}): {e}; the log was rewritten"
                );
                return self.fail(Location::default(), Reason::InconsistentCheckpoint, detail);
            }
            self.unproven.retain(|s| *s != old_size);
        }
        true
    }

    /// An entry or the end line: `value` is `None` only for a prepared
    /// entry whose value was dropped (then it has none of the members
    /// checked here).
    fn entry_or_end(&mut self, value: Option<&Value>, prepared: Option<&PreparedEntry>) -> bool {
        let complete = self.header.as_ref().is_some_and(|h| h.complete_log);
        if let Some(value) = value
            && let Some(end) = value.get("end")
        {
            let count = value
                .as_object()
                .filter(|o| o.len() == 1)
                .and(end.as_object())
                .filter(|e| e.len() == 1)
                .and_then(|e| e.get("entries"))
                .and_then(Value::as_u64);
            self.stage = Stage::Ended;
            return match count {
                Some(n) if n == self.entries => true,
                Some(n) => self.malformed(format!(
                    "the end line says {n} entries; {} were read",
                    self.entries
                )),
                None => self.malformed("the end line is {\"end\": {\"entries\": N}}".into()),
            };
        }
        if value.is_some_and(|v| v.get("consistency").is_some() || v.get("selection").is_some()) {
            return self
                .malformed("consistency and selection lines come before the entries".into());
        }
        self.entries += 1;
        let size = self.checkpoint.as_ref().map_or(0, |c| c.checkpoint().size);
        let Some(log) = self.log.as_mut() else {
            return false;
        };
        // A line that is not an entry still counts as a checked record.
        let decoded_here;
        let (decoded, digest, seq) = match (prepared, value) {
            (Some(prepared), _) => (&prepared.decoded, prepared.digest, prepared.seq),
            (None, Some(value)) => {
                decoded_here = decode_entry_value(value);
                (
                    &decoded_here,
                    None,
                    value
                        .get("seq")
                        .and_then(Value::as_u64)
                        .filter(|s| *s <= crate::record::MAX_SAFE_INTEGER),
                )
            }
            (None, None) => return false,
        };
        let checked = match decoded {
            Ok((entry, proof)) if !(complete && proof.is_some()) => Ok((entry, proof)),
            Ok(_) => Err((
                Reason::MalformedRecord,
                "a complete-log bundle carries no proofs".to_owned(),
            )),
            Err((reason, e)) => Err((*reason, e.clone())),
        };
        let (entry, proof) = match checked {
            Ok(decoded) => decoded,
            Err((reason, e)) => {
                let at = Location {
                    seq,
                    ..Location::default()
                };
                log.fail(at, reason, e);
                if let Some(mut failure) = log.failure().cloned() {
                    failure.at.line = Some(self.line);
                    self.failure = Some(failure);
                }
                return false;
            }
        };
        let ok = if complete {
            if entry.seq == log.size() && entry.seq >= size {
                log.fail(
                    Location {
                        seq: Some(entry.seq),
                        ..Location::default()
                    },
                    Reason::UncoveredEntry,
                    format!(
                        "seq {} is beyond the checkpoint's size {size}: no signature covers it",
                        entry.seq
                    ),
                );
                false
            } else {
                log.push_with_digest(entry, digest)
            }
        } else {
            log.push_proven_with_digest(entry, proof.as_deref(), digest)
        };
        if !ok && let Some(mut failure) = log.failure().cloned() {
            failure.at.line = Some(self.line);
            self.failure = Some(failure);
        }
        ok
    }

    /// The verdict. A bundle without its end line is truncated:
    /// `missing-record` at the line after the last.
    pub fn finish(mut self) -> BundleVerdict {
        if self.failure.is_none() && self.stage != Stage::Ended {
            self.line += 1;
            let detail = "the bundle ends without its end line: truncated".to_owned();
            self.fail(Location::default(), Reason::MissingRecord, detail);
        }
        let listed_traces = self
            .log
            .as_ref()
            .map(|log| log.listed_traces().to_vec())
            .unwrap_or_default();
        let withheld_trace_ids = self
            .log
            .as_ref()
            .map(|log| log.withheld_trace_ids().to_vec())
            .unwrap_or_default();
        let inner = self.log.map(LogVerifier::finish);
        let verdict = match (self.failure, inner) {
            (Some(failure), inner) => Verdict {
                verified: false,
                records_checked: inner.as_ref().map_or(0, |v| v.records_checked),
                last_valid: inner.and_then(|v| v.last_valid),
                failure: Some(failure),
            },
            (None, Some(inner)) => inner,
            (None, None) => Verdict {
                verified: false,
                records_checked: 0,
                last_valid: None,
                failure: None,
            },
        };
        BundleVerdict {
            verdict,
            server_key: self
                .checkpoint
                .as_ref()
                .and_then(|c| c.signers().first().cloned()),
            signers: self
                .checkpoint
                .as_ref()
                .map(|c| c.signers().to_vec())
                .unwrap_or_default(),
            key_pinned: !self.pinned.is_empty(),
            checkpoint: self
                .checkpoint
                .as_ref()
                .map(|c| (c.checkpoint().size, c.checkpoint().root)),
            header: self.header,
            selection: self.selection,
            listed_traces,
            withheld_trace_ids,
            selection_signers: self.selection_signers,
            trusted_sizes: self.trusted.iter().map(|t| t.checkpoint().size).collect(),
            cosigned_by: self.cosigned_by,
        }
    }
}
