//! The validity of an org log's keys across rotations (`docs/FORMAT.md`
//! 7.10), learned from its `log-key` records as the log streams by.

use super::{Check, Reason, note_failure};
use crate::log::{LogKeyAction, LogKeyRecord, log_key_note_text};
use crate::note::{Note, NoteVerifier};
use std::collections::HashMap;

/// What the log said so far about its keys, by vkey text: where each was
/// added and retired, and where each first signed a note that was
/// accepted (a key that signed before its `add` was not valid there).
#[derive(Debug, Default)]
pub(super) struct KeyValidity {
    added: HashMap<String, u64>,
    retired: HashMap<String, u64>,
    first_used: HashMap<String, u64>,
}

impl KeyValidity {
    /// `from_K` (7.10): the position after the key's `add`, else 0.
    fn from(&self, key: &str) -> u64 {
        self.added.get(key).map_or(0, |r| r + 1)
    }

    /// `until_K`: the position after the key's `retire`, else unbounded.
    fn until(&self, key: &str) -> u64 {
        self.retired
            .get(key)
            .map_or(u64::MAX, |t| t.saturating_add(1))
    }

    /// How many `log-key` records of the log read so far lie below `size`
    /// (each read one set an `add` or a `retire`; a failing one ends the
    /// verification).
    fn records_below(&self, size: u64) -> u64 {
        let below = self
            .added
            .values()
            .chain(self.retired.values())
            .filter(|seq| **seq < size)
            .count();
        u64::try_from(below).unwrap_or(u64::MAX)
    }

    /// The trusted keys valid for a record at `seq`, as far as the log
    /// told so far (a key added later is caught at its `add`).
    pub(super) fn valid_at(&self, trusted: &[NoteVerifier], seq: u64) -> Vec<NoteVerifier> {
        trusted
            .iter()
            .filter(|k| {
                let text = k.to_string();
                self.from(&text) <= seq && seq < self.until(&text)
            })
            .cloned()
            .collect()
    }

    /// Opens the note of a record at `seq` (a seal's, a log-key record's)
    /// with the trusted keys valid there, and returns its text and the keys
    /// whose signatures verified. Nothing is marked used yet.
    pub(super) fn open_at(
        &self,
        note: &str,
        seq: u64,
        trusted: &[NoteVerifier],
        what: &str,
    ) -> Result<(String, Vec<String>), (Reason, String)> {
        let parsed = Note::parse(note).map_err(|e| note_failure(&e, what))?;
        let valid = self.valid_at(trusted, seq);
        match parsed.verify(&valid) {
            Ok(signers) => Ok((
                parsed.text.clone(),
                signers.iter().map(ToString::to_string).collect(),
            )),
            Err(e) => {
                let (reason, mut detail) = note_failure(&e, what);
                if valid.len() < trusted.len() && parsed.verify(trusted).is_ok() {
                    detail =
                        format!("{what}: signed only by a log key retired before seq {seq} (7.10)");
                }
                Err((reason, detail))
            }
        }
    }

    /// Records that `signers` signed a note accepted at `seq`.
    pub(super) fn mark_used(&mut self, signers: Vec<String>, seq: u64) {
        for key in signers {
            self.first_used.entry(key).or_insert(seq);
        }
    }

    /// Checks and applies a `log-key` record at `seq` (7.10, check 2).
    pub(super) fn apply(
        &mut self,
        record: &LogKeyRecord,
        seq: u64,
        origin: &str,
        key_name: &str,
        trusted: &[NoteVerifier],
    ) -> Check {
        let key = record.key.to_string();
        if record.key.name() != key_name {
            return Err((
                Reason::MalformedRecord,
                format!(
                    "the log-key record names a key of {:?}, not one of this log ({key_name:?})",
                    record.key.name()
                ),
            ));
        }
        let (text, signers) = self.open_at(&record.note, seq, trusted, "log-key note")?;
        if text != log_key_note_text(origin, record.action, &record.key_text, record.at) {
            return Err((
                Reason::MalformedRecord,
                "the log-key note states other fields than its record".into(),
            ));
        }
        match record.action {
            LogKeyAction::Add => {
                if let Some(r) = self.added.get(&key) {
                    return Err((
                        Reason::BadSignature,
                        format!("log key {key} was already added at seq {r}"),
                    ));
                }
                if let Some(used) = self.first_used.get(&key) {
                    return Err((
                        Reason::BadSignature,
                        format!(
                            "log key {key} signed a note at seq {used}, before its add record at seq {seq}: it was not valid there"
                        ),
                    ));
                }
                if signers.iter().all(|s| *s == key) {
                    return Err((
                        Reason::BadSignature,
                        "a log key's add record must be signed by another valid log key".into(),
                    ));
                }
                self.added.insert(key, seq);
            }
            LogKeyAction::Retire => {
                if let Some(t) = self.retired.get(&key) {
                    return Err((
                        Reason::BadSignature,
                        format!("log key {key} was already retired at seq {t}"),
                    ));
                }
                self.retired.insert(key, seq);
            }
        }
        self.mark_used(signers, seq);
        Ok(())
    }

    /// Whether a checkpoint of size `size` carries a valid signature by a
    /// key valid for it (7.10: `from_K <= size <= until_K`), once every
    /// record below `size` was seen.
    pub(super) fn check_checkpoint(
        &self,
        note: &str,
        size: u64,
        trusted: &[NoteVerifier],
    ) -> Result<(), String> {
        let valid: Vec<NoteVerifier> = trusted
            .iter()
            .filter(|k| {
                let text = k.to_string();
                self.from(&text) <= size && size <= self.until(&text)
            })
            .cloned()
            .collect();
        let parsed = Note::parse(note).map_err(|e| e.to_string())?;
        match parsed.verify(&valid) {
            Ok(_) => Ok(()),
            Err(_) => Err(format!(
                "the checkpoint of size {size} is not signed by a log key valid at that size (7.10: a key retired or added in the log)"
            )),
        }
    }
}

/// Checkpoints whose signatures must be by a log key valid at their size
/// (7.10), settled as the stream passes each one, so that what is held
/// does not grow with the checkpoints (a log signs about one a second
/// while it grows: a year of them is millions of notes).
///
/// When every entry below a checkpoint's size `n` has been seen, a signer
/// `K` whose `add` was seen (necessarily below `n`) or whose `retire` was
/// seen below `n - 1` is settled for good: `from_K` and `until_K` can no
/// longer change in a way that matters for `n` (a later `retire` leaves
/// `until_K > n`). A signer with no `add` seen yet is valid now
/// (`from_K = 0`) and stays valid unless an `add` of it comes later, at a
/// seq at or above `n`, which makes `from_K > n`. So a checkpoint with a
/// settled valid signer is valid; one with none and no open signer is
/// invalid; the rest hang only on whether all their open signers are
/// added later, the same question for every checkpoint of the same open
/// set, so only the smallest size of each set is kept.
#[derive(Debug, Default)]
pub(super) struct CheckpointKeys {
    /// Not yet reached by the stream: by size, each checkpoint's signers
    /// (the trusted keys, as vkey text, whose signatures verify).
    ahead: std::collections::BTreeMap<u64, Vec<Vec<String>>>,
    /// Reached and valid unless every one of these keys is added later:
    /// the smallest size of each set.
    open: HashMap<Vec<String>, u64>,
    /// The smallest size found signed by no valid key.
    failed: Option<u64>,
}

impl CheckpointKeys {
    /// Requires the checkpoint note of `size` entries to be signed by a
    /// key of `trusted` valid at that size.
    pub(super) fn require(&mut self, note: &str, size: u64, trusted: &[NoteVerifier]) {
        let signers = Note::parse(note)
            .ok()
            .and_then(|parsed| {
                parsed
                    .verify(trusted)
                    .ok()
                    .map(|keys| keys.iter().map(ToString::to_string).collect())
            })
            .unwrap_or_default();
        self.require_signers(size, signers);
    }

    /// [`CheckpointKeys::require`] given the keys (vkey text) whose
    /// signatures on the checkpoint verify.
    pub(super) fn require_signers(&mut self, size: u64, signers: Vec<String>) {
        self.ahead.entry(size).or_default().push(signers);
    }

    /// Settles every checkpoint of at most `reached` entries, once every
    /// entry below `reached` was seen.
    pub(super) fn settle(&mut self, reached: u64, validity: &KeyValidity) {
        while let Some(entry) = self.ahead.first_entry() {
            let size = *entry.key();
            if size > reached {
                break;
            }
            for signers in entry.remove() {
                self.settle_one(size, signers, validity);
            }
        }
    }

    fn settle_one(&mut self, size: u64, signers: Vec<String>, validity: &KeyValidity) {
        let within = |key: &String| validity.from(key) <= size && size <= validity.until(key);
        if signers
            .iter()
            .any(|key| validity.added.contains_key(key) && within(key))
        {
            return;
        }
        let mut open: Vec<String> = signers
            .into_iter()
            .filter(|key| !validity.added.contains_key(key) && within(key))
            .collect();
        if open.is_empty() {
            self.failed = Some(self.failed.map_or(size, |f| f.min(size)));
            return;
        }
        open.sort_unstable();
        open.dedup();
        let smallest = self.open.entry(open).or_insert(size);
        *smallest = (*smallest).min(size);
    }

    /// After the last entry: the smallest size of a checkpoint signed by no
    /// key valid at it, if any.
    pub(super) fn first_failure(&mut self, validity: &KeyValidity) -> Option<u64> {
        self.settle(u64::MAX, validity);
        let added_later = self
            .open
            .iter()
            .filter(|(keys, _)| keys.iter().all(|key| validity.added.contains_key(key)))
            .map(|(_, size)| *size)
            .min();
        self.failed.into_iter().chain(added_later).min()
    }
}

/// Checkpoints' `cairn-log-keys` lines (FORMAT.md 7.1): how many `log-key`
/// records the log holds below each one's size, compared with the records
/// read once the stream has passed that size, so that a partial bundle
/// that leaves a key's rotation out, or a checkpoint that misstates it,
/// fails. Held by size until reached, as [`CheckpointKeys`].
#[derive(Debug, Default)]
pub(super) struct LogKeyCounts {
    /// Not yet reached by the stream: by size, the counts stated.
    ahead: std::collections::BTreeMap<u64, Vec<u64>>,
    /// The smallest size whose stated count the log does not bear:
    /// `(size, stated, read)`.
    failed: Option<(u64, u64, u64)>,
}

impl LogKeyCounts {
    /// Requires the log to hold as many `log-key` records below the
    /// checkpoint's size as its line states (nothing if it has none).
    pub(super) fn require(&mut self, checkpoint: &crate::checkpoint::Checkpoint) {
        if let Some(count) = checkpoint.log_key_count() {
            let counts = self.ahead.entry(checkpoint.size).or_default();
            if !counts.contains(&count) {
                counts.push(count);
            }
        }
    }

    /// Compares every count of a checkpoint of at most `reached` entries,
    /// once every entry below `reached` was seen.
    pub(super) fn settle(&mut self, reached: u64, validity: &KeyValidity) {
        while let Some(entry) = self.ahead.first_entry() {
            let size = *entry.key();
            if size > reached {
                break;
            }
            let read = validity.records_below(size);
            for stated in entry.remove() {
                if stated != read && self.failed.is_none_or(|(first, _, _)| size < first) {
                    self.failed = Some((size, stated, read));
                }
            }
        }
    }

    /// After the last entry: the smallest size whose count the log does
    /// not bear, with the count stated and the records read.
    pub(super) fn first_failure(&mut self, validity: &KeyValidity) -> Option<(u64, u64, u64)> {
        self.settle(u64::MAX, validity);
        self.failed
    }

    /// Checks now the count of a checkpoint of `size` entries, every entry
    /// below it having been read (a monitor's log, which has no end).
    pub(super) fn check_now(
        checkpoint: &crate::checkpoint::Checkpoint,
        validity: &KeyValidity,
    ) -> Result<(), (u64, u64)> {
        let read = validity.records_below(checkpoint.size);
        match checkpoint.log_key_count() {
            Some(stated) if stated != read => Err((stated, read)),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Key events `(seq, add or retire, key)` and checkpoints `(size,
    /// signers, how far the stream had gone when it was required)`.
    type Events = Vec<(u64, bool, usize)>;
    type Required = Vec<(u64, Vec<usize>, u64)>;

    /// A log of `len` entries in which keys `k0..k3` are added and retired
    /// (each at most once, as the verifier's checks of log-key records
    /// require), and checkpoints signed by sets of them.
    fn history() -> impl Strategy<Value = (u64, Events, Required)> {
        (1u64..40).prop_flat_map(|len| {
            let events = proptest::collection::vec((0..len, any::<bool>(), 0usize..4), 0..6);
            // (size, signers, how far the stream had gone when it was required)
            let checkpoints = proptest::collection::vec(
                (0..=len, proptest::collection::vec(0usize..4, 0..3), 0..=len),
                0..12,
            );
            (Just(len), events, checkpoints)
        })
    }

    fn key(i: usize) -> String {
        format!("k{i}")
    }

    proptest! {
        /// Settling each checkpoint as the stream passes it gives the
        /// verdict of checking every one at the end with the whole key
        /// history (the rule of 7.10), while keeping one size per signer
        /// set.
        #[test]
        fn settled_as_streamed_is_checked_at_the_end((len, events, checkpoints) in history()) {
            let mut by_seq: std::collections::BTreeMap<u64, (bool, String)> = Default::default();
            let mut seen_add = std::collections::HashSet::new();
            let mut seen_retire = std::collections::HashSet::new();
            for (seq, add, k) in events {
                let fresh = if add { seen_add.insert(k) } else { seen_retire.insert(k) };
                if fresh {
                    by_seq.entry(seq).or_insert((add, key(k)));
                }
            }
            let mut streamed = CheckpointKeys::default();
            let mut validity = KeyValidity::default();
            for pos in 0..=len {
                // Every entry below `pos` has been seen.
                for (size, signers, required_at) in &checkpoints {
                    if *required_at == pos {
                        streamed.require_signers(*size, signers.iter().map(|i| key(*i)).collect());
                    }
                }
                streamed.settle(pos, &validity);
                if let Some((add, k)) = by_seq.get(&pos) {
                    if *add {
                        validity.added.insert(k.clone(), pos);
                    } else {
                        validity.retired.insert(k.clone(), pos);
                    }
                }
            }
            let expected = checkpoints
                .iter()
                .filter(|(size, signers, _)| {
                    !signers.iter().any(|i| {
                        let k = key(*i);
                        validity.from(&k) <= *size && *size <= validity.until(&k)
                    })
                })
                .map(|(size, _, _)| *size)
                .min();
            prop_assert_eq!(streamed.first_failure(&validity), expected);
            prop_assert!(streamed.open.len() <= 16, "one size per signer set");
        }
    }
}
