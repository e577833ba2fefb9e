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
        if text != log_key_note_text(origin, record.action, &record.key, record.at) {
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
