//! C2SP `tlog-checkpoint` statements, signed as C2SP signed notes, and
//! C2SP `tlog-cosignature` witness cosignatures.
//!
//! A checkpoint body is three lines and optional extension lines:
//!
//! ```text
//! <origin>
//! <tree size, decimal>
//! <root hash, base64>
//! cairn-log-keys <count>     (extension: Cairn's, FORMAT.md 7.1)
//! ```
//!
//! Only [`verify_checkpoint`] builds a [`VerifiedCheckpoint`], so code that
//! holds one knows its signature was checked against a trusted key and its
//! origin is the expected one.

use crate::hash::Hash;
use crate::note::{ALG_COSIGNATURE_V1, Note, NoteError, NoteSigner, NoteVerifier, key_id};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signer as _, SigningKey};

/// The body of a checkpoint: which log, how many leaves, which root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's origin line, unique per log (Cairn: `<server name>/<org>`).
    pub origin: String,
    /// Number of leaves.
    pub size: u64,
    /// RFC 9162 root hash of the first `size` leaves.
    pub root: Hash,
    /// Extension lines, each without its newline. Only the
    /// [`LOG_KEYS_EXTENSION`] line means anything to Cairn; the others are
    /// kept as they are.
    pub extensions: Vec<String>,
}

/// The first word of Cairn's one extension line, `cairn-log-keys <count>`:
/// how many `log-key` records (FORMAT.md 7.10) the log holds below the
/// checkpoint's size. Witnesses' cosignatures and kept checkpoints cover
/// it, so a partial bundle cannot leave a key's rotation out (FORMAT.md
/// 7.1, 10.4).
pub const LOG_KEYS_EXTENSION: &str = "cairn-log-keys";

/// Whether an extension line is a [`LOG_KEYS_EXTENSION`] line, well formed
/// or not: the word alone, or the word and a space.
fn is_log_keys_line(line: &str) -> bool {
    line.strip_prefix(LOG_KEYS_EXTENSION)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
}

/// The count of a [`LOG_KEYS_EXTENSION`] line: `cairn-log-keys`, one
/// space, a decimal number (digits only, no leading zero but `0` itself,
/// at most 2^64 - 1).
fn log_keys_count(line: &str) -> Result<u64, CheckpointError> {
    let malformed = CheckpointError::Malformed(
        "a cairn-log-keys line is `cairn-log-keys <count>`, the count in decimal",
    );
    let count = line
        .strip_prefix(LOG_KEYS_EXTENSION)
        .and_then(|rest| rest.strip_prefix(' '))
        .ok_or(malformed.clone())?;
    if count.is_empty()
        || !count.bytes().all(|b| b.is_ascii_digit())
        || (count.len() > 1 && count.starts_with('0'))
    {
        return Err(malformed);
    }
    count.parse::<u64>().map_err(|_| malformed)
}

/// Errors from checkpoint parsing and verification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The body is not a valid checkpoint.
    #[error("malformed checkpoint: {0}")]
    Malformed(&'static str),
    /// The checkpoint is for another log.
    #[error("checkpoint origin {found:?} is not the expected {expected:?}")]
    WrongOrigin {
        /// The origin the caller trusts.
        expected: String,
        /// The origin in the checkpoint.
        found: String,
    },
    /// The signed note failed to parse or verify.
    #[error(transparent)]
    Note(#[from] NoteError),
}

impl Checkpoint {
    /// The note text (body) of the checkpoint, ending in a newline.
    pub fn to_text(&self) -> String {
        let mut text = format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            self.root.to_base64()
        );
        for ext in &self.extensions {
            text.push_str(ext);
            text.push('\n');
        }
        text
    }

    /// This checkpoint stating that its log holds `count` `log-key`
    /// records below its size (its [`LOG_KEYS_EXTENSION`] line, replacing
    /// any it had).
    pub fn with_log_key_count(mut self, count: u64) -> Checkpoint {
        self.extensions.retain(|line| !is_log_keys_line(line));
        self.extensions
            .push(format!("{LOG_KEYS_EXTENSION} {count}"));
        self
    }

    /// How many `log-key` records the checkpoint says its log holds below
    /// its size, or `None` when it has no [`LOG_KEYS_EXTENSION`] line (it
    /// then says nothing of them: a checkpoint signed before Cairn wrote
    /// the line). [`Checkpoint::parse`] refuses a malformed or repeated
    /// line, so a parsed checkpoint's answer is its one line's.
    pub fn log_key_count(&self) -> Option<u64> {
        self.extensions
            .iter()
            .find(|line| is_log_keys_line(line))
            .and_then(|line| log_keys_count(line).ok())
    }

    /// Parses a checkpoint body (the text of a signed note).
    pub fn parse(text: &str) -> Result<Checkpoint, CheckpointError> {
        let body = text
            .strip_suffix('\n')
            .ok_or(CheckpointError::Malformed("must end with a newline"))?;
        let mut lines = body.split('\n');
        let origin = lines
            .next()
            .filter(|l| !l.is_empty())
            .ok_or(CheckpointError::Malformed("missing origin"))?;
        let size_line = lines
            .next()
            .ok_or(CheckpointError::Malformed("missing size"))?;
        if size_line.is_empty()
            || !size_line.bytes().all(|b| b.is_ascii_digit())
            || (size_line.len() > 1 && size_line.starts_with('0'))
        {
            return Err(CheckpointError::Malformed("size must be a decimal number"));
        }
        let size = size_line
            .parse::<u64>()
            .map_err(|_| CheckpointError::Malformed("size out of range"))?;
        let root_line = lines
            .next()
            .ok_or(CheckpointError::Malformed("missing root"))?;
        let root = Hash::from_base64(root_line)
            .map_err(|_| CheckpointError::Malformed("root must be base64 of 32 bytes"))?;
        let extensions: Vec<String> = lines.map(str::to_owned).collect();
        if extensions.iter().any(String::is_empty) {
            return Err(CheckpointError::Malformed("empty extension line"));
        }
        let mut log_keys_lines = extensions.iter().filter(|line| is_log_keys_line(line));
        if let Some(line) = log_keys_lines.next() {
            log_keys_count(line)?;
        }
        if log_keys_lines.next().is_some() {
            return Err(CheckpointError::Malformed(
                "a checkpoint has at most one cairn-log-keys line",
            ));
        }
        Ok(Checkpoint {
            origin: origin.to_owned(),
            size,
            root,
            extensions,
        })
    }

    /// Signs the checkpoint and returns the signed note.
    pub fn sign(&self, signer: &NoteSigner) -> Result<String, NoteError> {
        signer.sign(&self.to_text())
    }
}

/// A checkpoint whose signature by a trusted key and whose origin were
/// checked. Only [`verify_checkpoint`] constructs one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedCheckpoint {
    checkpoint: Checkpoint,
    note: String,
    /// The keys given to [`verify_checkpoint`] whose signatures verified,
    /// as vkey text.
    signers: Vec<String>,
}

impl VerifiedCheckpoint {
    /// The verified checkpoint body.
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// The signed note it was verified from.
    pub fn note(&self) -> &str {
        &self.note
    }

    /// The keys it was verified with whose signatures are on it, as vkey
    /// text (so that a check of their validity needs no second
    /// verification).
    pub fn signers(&self) -> &[String] {
        &self.signers
    }
}

/// Whether `note` is a signed note at all (text, a blank line, signature
/// lines), no signature checked: what a checkpoint an auditor gives to be
/// trusted must be before a verifier can weigh it. Anything else is the
/// caller's mistake (an empty file, an error message saved as a
/// checkpoint), not evidence; a signed note that is not this log's
/// checkpoint (another key's, another text) is the verifier's to judge
/// (`bad-signature`, FORMAT 10.2).
pub fn checkpoint_note_shape(note: &str) -> Result<(), CheckpointError> {
    Note::parse(note).map(|_| ()).map_err(CheckpointError::from)
}

/// Verifies a signed checkpoint note: at least one signature by one of
/// `keys`, no invalid signature by a known key, and the expected origin.
pub fn verify_checkpoint(
    note: &str,
    expected_origin: &str,
    keys: &[NoteVerifier],
) -> Result<VerifiedCheckpoint, CheckpointError> {
    let parsed = Note::parse(note)?;
    let signers = parsed
        .verify(keys)?
        .iter()
        .map(ToString::to_string)
        .collect();
    let checkpoint = Checkpoint::parse(&parsed.text)?;
    if checkpoint.origin != expected_origin {
        return Err(CheckpointError::WrongOrigin {
            expected: expected_origin.to_owned(),
            found: checkpoint.origin,
        });
    }
    Ok(VerifiedCheckpoint {
        checkpoint,
        note: note.to_owned(),
        signers,
    })
}

/// A witness key producing C2SP `cosignature/v1` signatures.
pub struct Cosigner {
    name: String,
    key_id: u32,
    key: SigningKey,
}

/// The message a `cosignature/v1` signature covers.
fn cosigned_message(checkpoint_text: &str, timestamp: u64) -> String {
    format!("cosignature/v1\ntime {timestamp}\n{checkpoint_text}")
}

impl Cosigner {
    /// A cosigner from a 32-byte seed; the caller supplies the randomness.
    pub fn from_seed(name: &str, seed: &[u8; 32]) -> Result<Cosigner, NoteError> {
        let key = SigningKey::from_bytes(seed);
        let verifier = NoteVerifier::new(name, ALG_COSIGNATURE_V1, key.verifying_key())?;
        Ok(Cosigner {
            name: name.to_owned(),
            key_id: verifier.key_id(),
            key,
        })
    }

    /// The cosigner with the same name and key material as a note signer
    /// (a witness keeps one key file; its cosignature key id differs from
    /// the note key id by the algorithm byte). Never give a log's own key
    /// to a witness: C2SP requires distinct keys per cosigner.
    /// `None` for a key held elsewhere (a witness's key is a file).
    pub fn from_note_signer(signer: &NoteSigner) -> Option<Cosigner> {
        match Cosigner::from_seed(signer.name(), &signer.seed()?) {
            Ok(c) => Some(c),
            // The name was validated when the signer was made.
            Err(_) => unreachable!("note signer names are valid cosigner names"),
        }
    }

    /// The matching verifier (algorithm `0x04`).
    pub fn verifier(&self) -> NoteVerifier {
        match NoteVerifier::new(&self.name, ALG_COSIGNATURE_V1, self.key.verifying_key()) {
            Ok(v) => v,
            // The name was validated in from_seed.
            Err(_) => unreachable!("cosigner name validated at construction"),
        }
    }

    /// A cosignature line over a checkpoint body at `timestamp` (seconds
    /// since the Unix epoch), to append to the signed checkpoint.
    pub fn cosign(&self, checkpoint_text: &str, timestamp: u64) -> String {
        let sig = self
            .key
            .sign(cosigned_message(checkpoint_text, timestamp).as_bytes());
        let mut blob = self.key_id.to_be_bytes().to_vec();
        blob.extend_from_slice(&timestamp.to_be_bytes());
        blob.extend_from_slice(&sig.to_bytes());
        format!("\u{2014} {} {}\n", self.name, B64.encode(blob))
    }
}

/// Checks the cosignature by `witness` on a signed checkpoint and returns
/// its timestamp. Fails if the note has no cosignature by that witness or
/// if it does not verify.
pub fn verify_cosignature(note: &str, witness: &NoteVerifier) -> Result<u64, CheckpointError> {
    if witness.alg() != ALG_COSIGNATURE_V1 {
        return Err(NoteError::MalformedKey("not a cosignature/v1 key".into()).into());
    }
    let parsed = Note::parse(note)?;
    let expected_id = key_id(
        witness.name(),
        ALG_COSIGNATURE_V1,
        witness.public_key().as_bytes(),
    );
    // Every line with the witness's name and key id is tried: a valid one
    // counts whatever other lines a relayer added (FORMAT.md 7.7). The
    // timestamp must be 1 to 2^63 - 1 (C2SP tlog-cosignature).
    let mut candidates = parsed
        .signatures
        .iter()
        .filter(|s| s.name == witness.name() && s.key_id == expected_id)
        .peekable();
    let first = candidates
        .peek()
        .copied()
        .ok_or(NoteError::NoKnownSignature)?;
    let invalid = NoteError::InvalidSignature {
        name: first.name.clone(),
        key_id: first.key_id,
    };
    for sig in candidates {
        if sig.signature.len() != 72 {
            continue;
        }
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&sig.signature[..8]);
        let timestamp = u64::from_be_bytes(ts);
        if timestamp == 0 || timestamp > i64::MAX as u64 {
            continue;
        }
        let Ok(signature) = ed25519_dalek::Signature::from_slice(&sig.signature[8..]) else {
            continue;
        };
        if witness
            .public_key()
            .verify_strict(
                cosigned_message(&parsed.text, timestamp).as_bytes(),
                &signature,
            )
            .is_ok()
        {
            return Ok(timestamp);
        }
    }
    Err(invalid.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(extensions: &[&str]) -> String {
        let mut text = format!("cairn.example/acme\n3\n{}\n", Hash::ZERO.to_base64());
        for line in extensions {
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    #[test]
    fn the_log_keys_line_is_read_and_written() {
        let cp = Checkpoint::parse(&text(&[])).unwrap();
        assert_eq!(cp.log_key_count(), None);
        let counted = cp.clone().with_log_key_count(2);
        assert_eq!(counted.to_text(), text(&["cairn-log-keys 2"]));
        assert_eq!(
            Checkpoint::parse(&counted.to_text())
                .unwrap()
                .log_key_count(),
            Some(2)
        );
        // Replaced, never repeated; other extension lines kept as written.
        let other = Checkpoint::parse(&text(&["other 1", "cairn-log-keys 0"])).unwrap();
        assert_eq!(other.log_key_count(), Some(0));
        assert_eq!(
            other.with_log_key_count(5).to_text(),
            text(&["other 1", "cairn-log-keys 5"])
        );
        // A line that only begins with the word is another extension.
        let unrelated = Checkpoint::parse(&text(&["cairn-log-keysX 1"])).unwrap();
        assert_eq!(unrelated.log_key_count(), None);
        assert_eq!(
            Checkpoint::parse(&text(&["cairn-log-keys 18446744073709551615"]))
                .unwrap()
                .log_key_count(),
            Some(u64::MAX)
        );
    }

    #[test]
    fn a_malformed_or_repeated_log_keys_line_is_not_a_checkpoint() {
        for lines in [
            &["cairn-log-keys"][..],
            &["cairn-log-keys "],
            &["cairn-log-keys 01"],
            &["cairn-log-keys -1"],
            &["cairn-log-keys +1"],
            &["cairn-log-keys 1 "],
            &["cairn-log-keys  1"],
            &["cairn-log-keys 1 2"],
            &["cairn-log-keys x"],
            &["cairn-log-keys 18446744073709551616"],
            &["cairn-log-keys 1", "cairn-log-keys 1"],
            &["cairn-log-keys 1", "other", "cairn-log-keys 2"],
        ] {
            assert!(
                matches!(
                    Checkpoint::parse(&text(lines)),
                    Err(CheckpointError::Malformed(_))
                ),
                "{lines:?}"
            );
        }
    }
}
